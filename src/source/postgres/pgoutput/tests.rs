use super::{decode, in_stream, Cell, Message};

fn tuple(cells: &[Option<&[u8]>]) -> Vec<u8> {
    let mut b = (cells.len() as u16).to_be_bytes().to_vec();
    for c in cells {
        match c {
            None => b.push(b'n'),
            Some(v) => {
                b.push(b't');
                b.extend((v.len() as u32).to_be_bytes());
                b.extend(*v);
            }
        }
    }
    b
}

#[test]
fn decodes_relation_and_changes() {
    let mut r = vec![b'R'];
    r.extend(16384u32.to_be_bytes());
    r.extend(b"public\0items\0");
    r.push(b'f');
    r.extend(2u16.to_be_bytes());
    r.push(1);
    r.extend(b"id\0");
    r.extend(20u32.to_be_bytes());
    r.extend((-1i32).to_be_bytes());
    r.push(0);
    r.extend(b"name\0");
    r.extend(25u32.to_be_bytes());
    r.extend((-1i32).to_be_bytes());
    let Message::Relation(rel) = decode(&r).unwrap() else {
        panic!()
    };
    assert_eq!(rel.name, "items");
    assert_eq!(rel.columns.len(), 2);
    assert!(rel.columns[0].key && !rel.columns[1].key);

    let mut u = vec![b'U'];
    u.extend(16384u32.to_be_bytes());
    u.push(b'O');
    u.extend(tuple(&[Some(b"1"), Some(b"a")]));
    u.push(b'N');
    u.extend(tuple(&[Some(b"1"), None]));
    assert_eq!(
        decode(&u).unwrap(),
        Message::Update {
            relation: 16384,
            old: Some((
                b'O',
                vec![Cell::Text(b"1".to_vec()), Cell::Text(b"a".to_vec())]
            )),
            new: vec![Cell::Text(b"1".to_vec()), Cell::Null],
        }
    );
}

#[test]
fn refuses_bad_framing_without_panicking() {
    // Every truncation of a valid message is an error.
    let mut i = vec![b'I'];
    i.extend(7u32.to_be_bytes());
    i.push(b'N');
    i.extend(tuple(&[Some(b"42"), None]));
    assert!(decode(&i).is_ok());
    for n in 0..i.len() {
        assert!(decode(&i[..n]).is_err(), "prefix of {n} bytes");
    }
    // Trailing bytes, unknown tags, bad lengths and kinds.
    let mut t = i.clone();
    t.push(0);
    assert!(decode(&t).is_err());
    assert!(decode(b"Z").is_err());
    let mut bad_len = vec![b'I'];
    bad_len.extend(7u32.to_be_bytes());
    bad_len.push(b'N');
    bad_len.extend(1u16.to_be_bytes());
    bad_len.push(b't');
    bad_len.extend(u32::MAX.to_be_bytes());
    assert!(decode(&bad_len).is_err());
    let mut bad_kind = vec![b'D'];
    bad_kind.extend(7u32.to_be_bytes());
    bad_kind.push(b'O');
    bad_kind.extend(1u16.to_be_bytes());
    bad_kind.push(b'x');
    assert!(decode(&bad_kind).is_err());
    let mut huge = vec![b'T'];
    huge.extend(u32::MAX.to_be_bytes());
    huge.push(0);
    assert!(decode(&huge).is_err());
    assert!(decode(b"R\0\0\0\x01public").is_err(), "unterminated string");
}

#[test]
fn random_bytes_never_panic() {
    let mut x: u64 = 0x1234_5678_9abc_def1;
    for _ in 0..20000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 40) as usize;
        let tags = b"BCORYIUDTMSEcA";
        let mut b = vec![tags[(x % 14) as usize]];
        let mut y = x;
        for _ in 0..len {
            y = y.wrapping_mul(6364136223846793005).wrapping_add(1);
            b.push((y >> 56) as u8);
        }
        let _ = decode(&b);
        if let Ok(Some((_, plain))) = in_stream(&b) {
            let _ = decode(&plain);
        }
    }
}

#[test]
fn decodes_stream_control_and_streamed_changes() {
    let mut start = vec![b'S'];
    start.extend(77u32.to_be_bytes());
    start.push(1);
    assert_eq!(
        decode(&start).unwrap(),
        Message::StreamStart {
            xid: 77,
            first_segment: true
        }
    );
    assert_eq!(decode(b"E").unwrap(), Message::StreamStop);
    let mut commit = vec![b'c'];
    commit.extend(77u32.to_be_bytes());
    commit.push(0);
    commit.extend(0x10u64.to_be_bytes());
    commit.extend(0x18u64.to_be_bytes());
    commit.extend(5u64.to_be_bytes());
    assert_eq!(
        decode(&commit).unwrap(),
        Message::StreamCommit {
            xid: 77,
            flags: 0,
            commit_lsn: 0x10,
            end_lsn: 0x18,
            timestamp: 5
        }
    );
    let mut abort = vec![b'A'];
    abort.extend(77u32.to_be_bytes());
    abort.extend(78u32.to_be_bytes());
    let want = Message::StreamAbort {
        xid: 77,
        subxid: 78,
    };
    assert_eq!(decode(&abort).unwrap(), want);
    // streaming = parallel: the abort's LSN and time follow.
    abort.extend(1u64.to_be_bytes());
    abort.extend(2u64.to_be_bytes());
    assert_eq!(decode(&abort).unwrap(), want);
    abort.push(0);
    assert!(decode(&abort).is_err(), "trailing byte");

    // A streamed insert: the xid after the tag is taken off.
    let mut i = vec![b'I'];
    i.extend(78u32.to_be_bytes());
    i.extend(7u32.to_be_bytes());
    i.push(b'N');
    i.extend(tuple(&[Some(b"42")]));
    let (xid, plain) = in_stream(&i).unwrap().unwrap();
    assert_eq!(xid, 78);
    assert_eq!(
        decode(&plain).unwrap(),
        Message::Insert {
            relation: 7,
            new: vec![Cell::Text(b"42".to_vec())]
        }
    );
    assert_eq!(in_stream(b"E").unwrap(), None);
    assert!(in_stream(b"I\0\0").is_err(), "a short xid");
}
