use super::{Budget, Message, Streams};

/// Messages as a protocol 2 server sends them in a stream block.
fn start(xid: u32, first: bool) -> Vec<u8> {
    let mut m = vec![b'S'];
    m.extend(xid.to_be_bytes());
    m.push(first as u8);
    m
}

/// A Relation of table `relid` named `name` with columns `cols`.
fn relation(xid: u32, relid: u32, cols: &[&str]) -> Vec<u8> {
    let mut m = vec![b'R'];
    m.extend(xid.to_be_bytes());
    m.extend(relid.to_be_bytes());
    m.extend(b"public\0t\0");
    m.push(b'f');
    m.extend((cols.len() as u16).to_be_bytes());
    for (i, c) in cols.iter().enumerate() {
        m.push((i == 0) as u8);
        m.extend(c.as_bytes());
        m.push(0);
        m.extend(20u32.to_be_bytes());
        m.extend((-1i32).to_be_bytes());
    }
    m
}

fn insert(xid: u32, relid: u32, id: u64) -> Vec<u8> {
    let mut m = vec![b'I'];
    m.extend(xid.to_be_bytes());
    m.extend(relid.to_be_bytes());
    m.push(b'N');
    m.extend(1u16.to_be_bytes());
    let v = id.to_string();
    m.push(b't');
    m.extend((v.len() as u32).to_be_bytes());
    m.extend(v.as_bytes());
    m
}

fn abort(xid: u32, subxid: u32) -> Vec<u8> {
    let mut m = vec![b'A'];
    m.extend(xid.to_be_bytes());
    m.extend(subxid.to_be_bytes());
    m
}

fn commit(xid: u32) -> Vec<u8> {
    let mut m = vec![b'c'];
    m.extend(xid.to_be_bytes());
    m.push(0);
    m.extend(0x100u64.to_be_bytes());
    m.extend(0x108u64.to_be_bytes());
    m.extend(0i64.to_be_bytes());
    m
}

/// Feed `blocks` (each a block's messages after its Stream Start),
/// with `between` after each block, then commit: what is read back,
/// as (kind, table, columns or row id).
fn replay(sends: Vec<Vec<u8>>) -> Vec<String> {
    let mut streams = Streams::new(Budget::default());
    let mut out = Vec::new();
    for data in sends {
        let mut feed = streams.take(&data).unwrap();
        while let Some(m) = feed.next().unwrap() {
            out.push(match m {
                Message::Relation(r) => format!(
                    "R {} {}",
                    r.oid,
                    r.columns
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Message::Insert { relation, new } => format!("I {relation} {new:?}"),
                Message::Begin { .. } => "B".into(),
                Message::Commit { .. } => "C".into(),
                other => format!("{other:?}"),
            });
        }
    }
    out
}

fn row(relid: u32, id: u64) -> String {
    format!("I {relid} [Text({:?})]", id.to_string().into_bytes())
}

const STOP: &[u8] = b"E";

/// A savepoint whose `ALTER TABLE` was rolled back: the server
/// describes the table again after the rollback, and the description
/// the rolled-back part had is never put back.
#[test]
fn a_rolled_back_description_never_comes_back() {
    let (top, sub) = (700, 701);
    // Described before the savepoint.
    let got = replay(vec![
        start(top, true),
        relation(top, 5, &["id"]),
        insert(top, 5, 1),
        STOP.to_vec(),
        start(top, false),
        relation(sub, 5, &["id", "extra"]),
        insert(sub, 5, 2),
        STOP.to_vec(),
        abort(top, sub),
        start(top, false),
        relation(top, 5, &["id"]),
        insert(top, 5, 3),
        STOP.to_vec(),
        commit(top),
    ]);
    assert_eq!(
        got,
        ["B", "R 5 id", &row(5, 1), "R 5 id", &row(5, 3), "C"],
        "described before the savepoint"
    );
    // First described inside the savepoint, described again after.
    let got = replay(vec![
        start(top, true),
        relation(sub, 5, &["id", "extra"]),
        insert(sub, 5, 2),
        STOP.to_vec(),
        abort(top, sub),
        start(top, false),
        relation(top, 5, &["id"]),
        insert(top, 5, 3),
        STOP.to_vec(),
        commit(top),
    ]);
    assert_eq!(got, ["B", "R 5 id", &row(5, 3), "C"], "described again");
    // Cut with no DDL: the server does not describe it again, and the
    // cut description comes back before the next change, once.
    let got = replay(vec![
        start(top, true),
        insert(top, 6, 0),
        relation(sub, 5, &["id"]),
        insert(sub, 5, 2),
        STOP.to_vec(),
        abort(top, sub),
        start(top, false),
        insert(top, 6, 1),
        insert(top, 5, 3),
        insert(top, 5, 4),
        STOP.to_vec(),
        commit(top),
    ]);
    assert_eq!(
        got,
        [
            "B",
            &row(6, 0),
            &row(6, 1),
            "R 5 id",
            &row(5, 3),
            &row(5, 4),
            "C"
        ],
        "put back where needed"
    );
    // Put back, then cut again with a later savepoint, then needed.
    let got = replay(vec![
        start(top, true),
        relation(sub, 5, &["id"]),
        insert(sub, 5, 2),
        STOP.to_vec(),
        abort(top, sub),
        start(top, false),
        insert(702, 5, 3),
        STOP.to_vec(),
        abort(top, 702),
        start(top, false),
        insert(top, 5, 4),
        STOP.to_vec(),
        commit(top),
    ]);
    assert_eq!(got, ["B", "R 5 id", &row(5, 4), "C"], "cut twice");
}

/// A streamed transaction with a subtransaction per row (a PL/pgSQL
/// loop with an EXCEPTION block) is held in time linear in its
/// subtransactions, and a rollback of the last one still cuts right.
#[test]
fn subtransactions_cost_linear_time() {
    let top = 1;
    let n = 200_000u32;
    let mut streams = Streams::new(Budget::default());
    let t0 = std::time::Instant::now();
    let _ = streams.take(&start(top, true)).unwrap();
    let _ = streams.take(&relation(top, 5, &["id"])).unwrap();
    for k in 0..n {
        let _ = streams.take(&insert(top + 1 + k, 5, k as u64)).unwrap();
    }
    let _ = streams.take(STOP).unwrap();
    let _ = streams.take(&abort(top, top + n)).unwrap();
    let mut feed = streams.take(&commit(top)).unwrap();
    let mut rows = 0;
    while let Some(m) = feed.next().unwrap() {
        rows += matches!(m, Message::Insert { .. }) as u32;
    }
    assert_eq!(rows, n - 1, "the last subtransaction's row is cut");
    // Linear: well under a second in a release build; a scan per
    // message (quadratic) takes minutes here.
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(20),
        "{n} subtransactions took {:?}",
        t0.elapsed()
    );
}
