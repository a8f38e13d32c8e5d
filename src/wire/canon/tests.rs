use super::*;

fn canon(line: &str) -> Option<String> {
    let mut out = Vec::new();
    let r = canonical_event(line.as_bytes(), &mut out)?;
    // The places are those the fast path finds in the rewritten line.
    assert_eq!(Some(r.meta), crate::wire::fast::event_spans(&out));
    assert_eq!(r.plain_table, crate::wire::fast::event_meta(&out).is_some());
    Some(String::from_utf8(out).expect("UTF-8"))
}

#[test]
fn runs_end_at_the_first_stop() {
    // Every byte at every place of a word and of the tail, after bytes
    // that flag nothing (and borrow nothing), with a stop after it.
    for fill in [b'a', 0x80, 0xff, 0x21] {
        for c in 0..=255u8 {
            for at in 0..19 {
                let mut b = vec![fill; 19];
                b[at] = c;
                b.push(b'"');
                b.extend([0u8, b'\\', b'x']);
                let s = String::from_utf8_lossy(&b).into_owned();
                let cur = Cur { b: &b, s: &s, i: 0 };
                let want = b.iter().position(|&x| STOP[x as usize]).expect("a stop");
                assert_eq!(cur.run(), want, "{fill} {c} {at}");
            }
        }
    }
}

#[test]
fn other_spellings_become_the_canonical_line() {
    let want = r#"{"kind":"event","event":{"sequence":"7","table":"t\"é","operation":"update","before":[["integer","1"],["null"]],"after":[["integer","1"],["text","é😀/\n\u0001"],["real","1","-1"],["blob","00ff"],["text","a"]]}}"#;
    assert_eq!(canon(want).as_deref(), Some(want), "canonical stays");
    for other in [
        // Python's json.dumps: ", " and ": ", non-ASCII escaped
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t\"\u00e9", "operation": "update", "before": [["integer", "1"], ["null"]], "after": [["integer", "1"], ["text", "\u00e9\ud83d\ude00\/\n\u0001"], ["real", "0.5"], ["blob", "00FF"], ["text-utf8", "61"]]}}"#,
        // members in another order, whitespace everywhere, a CR
        " {\t\"event\" : { \"after\" :[ [ \"integer\" , \"1\" ] ,[\"text\",\"\u{e9}\\uD83D\\uDE00/\\n\\u0001\"],[\"real\",\"2\",\"-2\"],[\"blob\",\"00Ff\"],[\"text\",\"\\u0061\"] ] , \"operation\":\"update\",\"before\":[[\"integer\",\"1\"],[ \"null\" ]],\"table\":\"t\\u0022\u{e9}\",\"sequence\":\"7\"},\"kind\":\"event\" }\r",
    ] {
        assert_eq!(canon(other).as_deref(), Some(want), "{other}");
    }
    for declined in [
        // an unknown, doubled or null member; a truncate; escapes in a
        // member name; a lone surrogate; bad JSON; another record
        r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[],"x":1}}"#,
        r#"{"kind":"event","kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[],"after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","before":null,"after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"truncate"}}"#,
        r#"{"kind":"event","event":{"sequence":"7","t\u0061ble":"t","operation":"insert","after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"\ud800","operation":"insert","after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"\udc00","operation":"insert","after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"\ud800\u0041","operation":"insert","after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"\ud83d\ud83d","operation":"insert","after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"\ud83dx","operation":"insert","after":[]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[["null"],]}}"#,
        r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[]}} x"#,
        r#"{"kind":"commit","end":{"source":"s","sequence":"7"},"count":"1"}"#,
    ] {
        assert_eq!(canon(declined), None, "{declined}");
    }
    // Bad contents: the strict decoder says what is wrong.
    for bad in [
        r#"{"kind": "event", "event": {"sequence": "07", "table": "t", "operation": "insert", "after": []}}"#,
        r#"{"kind": "event", "event": {"sequence": "0", "table": "t", "operation": "insert", "after": []}}"#,
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t", "operation": "insert", "after": [["integer", "01"]]}}"#,
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t", "operation": "insert", "after": [["blob", "0G"]]}}"#,
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t", "operation": "insert", "after": [["blob", "0"]]}}"#,
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t", "operation": "insert", "after": [["real", "3", "-1075"]]}}"#,
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t", "operation": "insert", "after": [["text-utf8", "ff"]]}}"#,
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t", "operation": "delete", "after": []}}"#,
        r#"{"kind": "event", "event": {"sequence": "7", "table": "t", "operation": "update", "after": []}}"#,
    ] {
        assert_eq!(canon(bad), None, "{bad}");
    }
    // A table name with escapes: rewritten, its place not given.
    let escaped = canon(
        r#"{"kind": "event", "event": {"sequence": "7", "table": "a\u0001", "operation": "insert", "after": []}}"#,
    );
    assert_eq!(
        escaped.as_deref(),
        Some(
            r#"{"kind":"event","event":{"sequence":"7","table":"a\u0001","operation":"insert","after":[]}}"#
        )
    );
}
