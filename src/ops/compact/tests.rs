use super::*;
use crate::wire::{Sequence, Value};

/// A folded line is what the encoder writes for the folded event, for
/// every fold, with plain and escaped table names.
#[test]
fn folded_lines_are_the_encoders_lines() {
    let row = |k: i64, t: &str| Some(vec![Value::Integer(k), Value::Text(t.into())]);
    for table in ["t", "a\"b\u{1}", ""] {
        let ev = |seq: Sequence, op, before, after| Event {
            sequence: seq,
            table: table.into(),
            operation: op,
            before,
            before_key: None,
            after,
        };
        use Operation::*;
        for (a, b, want) in [
            (
                ev(1, Insert, None, row(1, "x")),
                ev(2, Update, row(1, "x"), row(1, "y")),
                Some(ev(2, Insert, None, row(1, "y"))),
            ),
            (
                ev(1, Update, row(1, "w"), row(1, "x")),
                ev(2, Update, row(1, "x"), row(1, "y")),
                Some(ev(2, Update, row(1, "w"), row(1, "y"))),
            ),
            (
                ev(1, Update, row(1, "w"), row(1, "x")),
                ev(3, Delete, row(1, "x"), None),
                Some(ev(3, Delete, row(1, "w"), None)),
            ),
            (
                ev(1, Delete, row(1, "w"), None),
                ev(2, Insert, None, row(1, "\n")),
                Some(ev(2, Update, row(1, "w"), row(1, "\n"))),
            ),
            (
                ev(1, Insert, None, row(1, "x")),
                ev(2, Delete, row(1, "x"), None),
                None,
            ),
            (
                ev(1, Insert, None, row(1, "x")),
                ev(2, Update, row(1, "z"), row(1, "y")),
                None,
            ),
        ] {
            let (mut la, mut lb, mut want_line) = (Vec::new(), Vec::new(), Vec::new());
            let (ra, rb) = (encoded(&mut la, &a).unwrap(), encoded(&mut lb, &b).unwrap());
            match (fold(ra, rb), want) {
                (Fold::Into(op), Some(w)) => {
                    let mut got = Vec::new();
                    write_folded(&mut got, op, ra, rb);
                    write_event_line(&mut want_line, &w);
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want_line)
                    );
                }
                (Fold::Vanish, None) if a.operation == Insert && b.operation == Delete => {}
                (Fold::No, None) if a.operation == Insert && b.operation == Update => {}
                (_, w) => panic!("{a:?} then {b:?}: expected {w:?}"),
            }
        }
    }
}

/// The library function refuses an event no stream may hold, as it did
/// before it compacted lines (no panic).
#[test]
fn events_no_stream_may_hold_are_refused() {
    let schema: Schema = serde_json::from_str(
        r#"{"table":"t","columns":[{"name":"k","type":"INTEGER","nullable":false}],"key":["k"]}"#,
    )
    .unwrap();
    let bad = Event {
        sequence: 1,
        table: "t".into(),
        operation: Operation::Insert,
        before: Some(vec![Value::Integer(1)]),
        before_key: None,
        after: Some(vec![Value::Integer(1)]),
    };
    let e = compact_events(vec![bad], &[schema]).unwrap_err();
    assert!(e.to_string().contains("insert event 1 must have"), "{e}");
}

#[test]
fn keys_are_compared_exactly() {
    let shape = TableShape {
        width: 2,
        key: vec![1, 0],
    };
    let mut values = Vec::new();
    let mut key = |row: Vec<Value>| {
        let e = Event {
            sequence: 1,
            table: "t".into(),
            operation: Operation::Insert,
            before: None,
            before_key: None,
            after: Some(row),
        };
        let mut buf = Vec::new();
        let raw = encoded(&mut buf, &e).unwrap();
        let mut out = Vec::new();
        Compactor::key_of(&mut values, raw.after().unwrap(), &shape, false, &mut out).unwrap();
        out
    };
    let k = key(vec![Value::Real(0.0), Value::Text("a,\"]b".into())]);
    assert_eq!(k, key(vec![Value::Real(0.0), Value::Text("a,\"]b".into())]));
    assert_ne!(
        k,
        key(vec![Value::Real(-0.0), Value::Text("a,\"]b".into())])
    );
    assert_ne!(
        k,
        key(vec![Value::Integer(0), Value::Text("a,\"]b".into())])
    );
    assert_ne!(
        k,
        key(vec![Value::Real(0.0), Value::Blob(b"a,\"]b".to_vec())])
    );
}
