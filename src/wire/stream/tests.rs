use super::*;

type Read = (Vec<String>, Option<String>, u64);

fn read(mut r: BatchStreamReader<std::io::Cursor<Vec<u8>>>) -> Read {
    let mut items = Vec::new();
    loop {
        match r.next_lean() {
            Ok(Some(l)) => {
                let table = match &l {
                    Lean::Event(_) => r.lean_table().to_string(),
                    _ => String::new(),
                };
                let line = r
                    .canonical_line()
                    .map(|l| String::from_utf8_lossy(l).into_owned());
                items.push(format!("{l:?} {table:?} {line:?}"));
            }
            Ok(None) => return (items, None, r.batches()),
            Err(e) => return (items, Some(e.to_string()), r.batches()),
        }
    }
}

fn open(text: &str, limits: Limits) -> BatchStreamReader<std::io::Cursor<Vec<u8>>> {
    BatchStreamReader::jsonl(std::io::Cursor::new(text.as_bytes().to_vec()), "s", limits)
}

/// Lean reading ahead gives the same items, lines, tables and errors
/// (at the same lines) as reading in place, whichever thread scans.
#[test]
fn lean_read_ahead_reads_the_same_whoever_scans() {
    let header = r#"{"kind":"header","format":"mooncdc.jsonl.v1","start":{"source":"s","sequence":"0"},"high_water":"9000"}"#;
    let ev = |n: u32, t: &str| {
        format!(
            r#"{{"kind":"event","event":{{"sequence":"{n}","table":"{t}","operation":"insert","after":[["integer","{n}"],["text","x\ny"]]}}}}"#
        )
    };
    let commit = |n: u32| {
        format!(r#"{{"kind":"commit","end":{{"source":"s","sequence":"{n}"}},"count":"{n}"}}"#)
    };
    let mut good = vec![header.to_string()];
    good.extend((1..=2500).map(|n| ev(n, if n % 3 == 0 { "a\\u0001" } else { "t" })));
    good.push(commit(2500));
    let good = good.join("\n") + "\n";
    let mut cases = vec![good.clone(), good.trim_end().to_string()];
    // An event line broken, out of order, a spelling the fast path
    // declines, a bad commit, a missing commit, a line too long.
    for (at, with) in [
        (1500, r#"{"kind":"event","event":{"sequence":"1501","table":"t","operation":"insert","after":[["integer","01"]]}}"#.to_string()),
        (1200, ev(7, "t")),
        (900, r#"{"kind":"event","event":{"sequence":"901", "table":"t","operation":"insert","after":[["integer","1"],["null"]]}}"#.to_string()),
        (2501, commit(2499)),
        (2501, String::new()),
        (10, ev(11, &"x".repeat(5000))),
    ] {
        let mut lines: Vec<String> = good.lines().map(str::to_string).collect();
        lines[at] = with;
        cases.push(lines.join("\n") + "\n");
    }
    let limits = Limits::new(Some(4096), None).expect("limits");
    for (i, text) in cases.iter().enumerate() {
        let here = read(open(text, limits));
        for share in [Share::WhenBusy, Share::Never, Share::Always] {
            let ahead = read(open(text, limits).ahead(true, share).expect("spawn"));
            assert_eq!(here.0.len(), ahead.0.len(), "case {i}");
            assert!(here.0 == ahead.0, "case {i}: items differ");
            assert_eq!(here.1, ahead.1, "case {i}");
            assert_eq!(here.2, ahead.2, "case {i}");
        }
        if i == 0 {
            assert_eq!(here.1, None);
            assert_eq!(here.2, 1);
        } else if i > 1 {
            assert!(here.1.is_some(), "case {i} is refused");
        }
    }
}
