//! The read path against a model, without a server.
//!
//! A random history of transactions on one table (inserts, updates,
//! deletes, transactional messages, `ADD COLUMN`, savepoints rolled back or
//! not, transactions rolled back), with non-transactional messages between
//! any two records (right before a COMMIT among them), is laid out as a
//! WAL. A small server model turns it into what a walsender sends from a
//! given start: protocol 1 (each transaction at its commit) or streaming
//! (large transactions in blocks while they run, Stream Abort for a
//! savepoint rolled back after part of it was sent, Stream Commit),
//! Relation messages as pgoutput sends them (once per session or streamed
//! transaction, again when the table's shape changes), keepalives.
//!
//! The [`Reader`] decodes that, and what it writes is checked against the
//! history itself: every committed change once, in commit order, nothing of
//! a rolled-back transaction or savepoint, each event with the table's
//! shape at its point, sequences strictly increasing and never shared,
//! batches that follow each other. Reads that do not follow stop at random
//! points of the WAL (inside message records too) and at random event
//! limits, and each next read resumes from the last batch end; a follower
//! reconnects at a random point and the server sends again from its
//! position. Resuming loses and repeats nothing.

use super::backfill::Backfills;
use super::batch_out::BatchOut;
use super::catalog::Catalog;
use super::decode::{Catalogue, Flow, ReadSettings, Reader};
use super::sequence;
use super::streamed::Budget;
use crate::error::Result;
use crate::source::ReadLimits;
use crate::wire::batch::{BatchStreamReader, Item};
use crate::wire::{Column, Event, Limits, Operation, Schema, Sequence, Value};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

const RELID: u32 = 16_400;
const TABLE: &str = "public.t";
const PREFIX: &str = "app";
const SOURCE: &str = "postgres:1/db/s";

/// What happens in a transaction, in order.
#[derive(Debug, Clone)]
enum Op {
    Insert(i64),
    Update(i64),
    Delete(i64),
    /// A transactional message.
    Note(u16),
    /// `ALTER TABLE t ADD COLUMN c<n> text`.
    AddColumn,
}

#[derive(Debug, Clone)]
enum Step {
    Op(Op),
    /// A savepoint: its ops (the first a row change), rolled back or not.
    Savepoint(Vec<Op>, bool),
}

#[derive(Debug, Clone)]
struct Txn {
    steps: Vec<Step>,
    commits: bool,
    /// Sent in blocks while it runs, when the protocol streams.
    streamed: bool,
}

impl Txn {
    fn has_ddl(&self) -> bool {
        self.steps.iter().any(|s| match s {
            Step::Op(Op::AddColumn) => true,
            Step::Savepoint(ops, _) => ops.iter().any(|o| matches!(o, Op::AddColumn)),
            _ => false,
        })
    }
}

/// One WAL record.
#[derive(Debug, Clone)]
enum Rec {
    /// A change of transaction `txn` (index), in subtransaction `sub` (0:
    /// the top one); `shape` the table's added columns at that point.
    Change {
        txn: usize,
        sub: u32,
        op: Op,
        shape: usize,
    },
    SubAbort {
        txn: usize,
        sub: u32,
    },
    Commit(usize),
    Abort(usize),
    Loose(u16),
}

/// The history as a WAL: records with their positions.
struct Wal {
    recs: Vec<(u64, u64, Rec)>,
    txns: Vec<Txn>,
    end: u64,
    /// Columns the table has at the end (committed ADD COLUMNs).
    columns: usize,
}

/// A small deterministic generator for the choices a history leaves open.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn xid(txn: usize) -> u32 {
    1000 + txn as u32
}

/// Each transaction's records in order (savepoints numbered from `subs`),
/// with the shape the table has at each change, from `base` added columns.
fn records_of(i: usize, t: &Txn, base: usize, subs: &mut u32) -> (Vec<Rec>, usize) {
    let mut out = Vec::new();
    let mut shape = base;
    for step in &t.steps {
        match step {
            Step::Op(op) => {
                if matches!(op, Op::AddColumn) {
                    shape += 1;
                }
                out.push(Rec::Change {
                    txn: i,
                    sub: 0,
                    op: op.clone(),
                    shape,
                });
            }
            Step::Savepoint(ops, rolled_back) => {
                *subs += 1;
                let sub = *subs;
                let before = shape;
                for op in ops {
                    if matches!(op, Op::AddColumn) {
                        shape += 1;
                    }
                    out.push(Rec::Change {
                        txn: i,
                        sub,
                        op: op.clone(),
                        shape,
                    });
                }
                if *rolled_back {
                    out.push(Rec::SubAbort { txn: i, sub });
                    shape = before;
                }
            }
        }
    }
    out.push(if t.commits {
        Rec::Commit(i)
    } else {
        Rec::Abort(i)
    });
    (out, if t.commits { shape } else { base })
}

/// Lay the history out: transactions without DDL interleave; one with DDL
/// runs alone (it holds the table's lock); loose messages anywhere.
fn wal(txns: Vec<Txn>, loose: &[u16], dice: &mut Dice) -> Wal {
    let mut recs: Vec<Rec> = Vec::new();
    let mut shape = 0;
    let mut subs = 5000;
    let mut group: Vec<Vec<Rec>> = Vec::new();
    let flush = |group: &mut Vec<Vec<Rec>>, recs: &mut Vec<Rec>, dice: &mut Dice| {
        while !group.is_empty() {
            let k = dice.below(group.len() as u64) as usize;
            let r = group[k].remove(0);
            recs.push(r);
            if group[k].is_empty() {
                group.remove(k);
            }
        }
    };
    for (i, t) in txns.iter().enumerate() {
        let (r, after) = records_of(i, t, shape, &mut subs);
        if t.has_ddl() {
            flush(&mut group, &mut recs, dice);
            recs.extend(r);
            shape = after;
        } else {
            group.push(r);
        }
    }
    flush(&mut group, &mut recs, dice);
    for &m in loose {
        let at = dice.below(recs.len() as u64 + 1) as usize;
        recs.insert(at, Rec::Loose(m));
    }
    // A loose message right before a commit, where one is not already.
    if let Some(at) = recs.iter().position(|r| matches!(r, Rec::Commit(_))) {
        if !loose.is_empty() && (at == 0 || !matches!(recs[at - 1], Rec::Loose(_))) {
            recs.insert(at, Rec::Loose(9999));
        }
    }
    let mut lsn = 0x0100_0000u64;
    let recs = recs
        .into_iter()
        .map(|r| {
            let size = 24 + dice.below(200);
            let start = lsn;
            lsn += size;
            (start, lsn, r)
        })
        .collect();
    Wal {
        recs,
        txns,
        end: lsn,
        columns: 2 + shape,
    }
}

mod server;
use server::{columns, row, server, Sent};

// ---------------------------------------------------------------- the model

/// The committed history, as lines comparable with what a read writes.
fn expected(w: &Wal) -> Vec<(Sequence, String)> {
    let mut out = Vec::new();
    let mut version = 0u64;
    let mut changes: HashMap<usize, Vec<(u32, Op, usize, u64)>> = HashMap::new();
    let mut aborted: Vec<(usize, u32)> = Vec::new();
    for (rs, re, rec) in &w.recs {
        match rec {
            Rec::Change {
                txn,
                sub,
                op,
                shape,
            } => {
                version += 1;
                changes
                    .entry(*txn)
                    .or_default()
                    .push((*sub, op.clone(), *shape, version));
            }
            Rec::SubAbort { txn, sub } => aborted.push((*txn, *sub)),
            Rec::Abort(_) => {}
            Rec::Commit(txn) => {
                let mut ordinal = 0;
                for (sub, op, shape, v) in changes.remove(txn).unwrap_or_default() {
                    if aborted.contains(&(*txn, sub)) || matches!(op, Op::AddColumn) {
                        continue;
                    }
                    ordinal += 1;
                    out.push((sequence(*rs, ordinal), describe(&op, v, shape)));
                }
            }
            Rec::Loose(n) => out.push((sequence(re - 1, 1), format!("loose note {n}"))),
        }
    }
    out.sort_by_key(|(s, _)| *s);
    out
}

fn describe(op: &Op, version: u64, shape: usize) -> String {
    let cols = columns(shape).join(",");
    match op {
        Op::Insert(id) => format!("insert [{cols}] {:?}", row(*id, version, shape)),
        Op::Update(id) => format!("update [{cols}] {:?}", row(*id, version, shape)),
        Op::Delete(id) => format!("delete [{cols}] key {id}"),
        Op::Note(n) => format!("note {n}"),
        Op::AddColumn => unreachable!(),
    }
}

/// A value as the model's rows spell it.
fn cell(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        Value::Text(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

/// The shapes a stream declares for the table: the model only adds
/// columns, so they never shrink, and never pass what was committed (a
/// rolled-back `ADD COLUMN` declared would, or one dropped again).
#[derive(Default)]
struct Declared(usize);

impl Declared {
    fn saw(&mut self, s: &Schema, most: usize) {
        assert!(
            s.columns.len() >= self.0,
            "the table shrank from {} to {} columns: a rolled-back change reached the stream",
            self.0,
            s.columns.len()
        );
        assert!(
            s.columns.len() <= most,
            "the table has {} columns, more than ever committed ({most})",
            s.columns.len()
        );
        self.0 = s.columns.len();
    }
}

/// What a read wrote, as the model's lines, checked as it is read: each
/// batch starts where the last ended, every record inside its batch,
/// sequences strictly increasing, the table never in a shape that was
/// rolled back.
fn written(
    bytes: &[u8],
    from: Sequence,
    last: &mut Sequence,
    declared: &mut Declared,
    most: usize,
) -> (Vec<(Sequence, String)>, Sequence) {
    let mut r = BatchStreamReader::jsonl(bytes, "<read>", Limits::default());
    let mut out = Vec::new();
    let mut shapes: HashMap<String, Schema> = HashMap::new();
    let mut end = from;
    let mut start = from;
    loop {
        let item = r.next_item().unwrap_or_else(|e| {
            panic!(
                "not a valid stream: {e}\n{}",
                String::from_utf8_lossy(bytes)
            )
        });
        let Some(item) = item else { break };
        match item {
            Item::Header(h) => {
                assert_eq!(
                    h.start.sequence(),
                    end,
                    "a batch starts where the last ended"
                );
                start = end;
                for s in h.schemas.unwrap_or_default() {
                    declared.saw(&s, most);
                    shapes.insert(s.table.clone(), s);
                }
            }
            Item::Schema(c) => {
                declared.saw(&c.schema, most);
                shapes.insert(c.schema.table.clone(), c.schema);
            }
            Item::Event(e) => {
                assert!(e.sequence > *last, "sequence {} after {}", e.sequence, last);
                assert!(e.sequence > start);
                *last = e.sequence;
                assert_eq!(e.table, TABLE);
                out.push((e.sequence, event_line(&e, &shapes[&e.table])));
            }
            Item::Message(m) => {
                assert!(m.sequence > *last, "message {} after {}", m.sequence, last);
                assert!(m.sequence > start);
                *last = m.sequence;
                let Value::Text(t) = &m.content else { panic!() };
                let line = if m.transactional {
                    t.clone()
                } else {
                    format!("loose {t}")
                };
                out.push((m.sequence, line));
            }
            Item::Commit(c) => {
                assert!(c.end.sequence() >= *last, "a batch ends after its records");
                end = c.end.sequence();
            }
        }
    }
    (out, end)
}

/// An event as the model's line, in the shape `s` it was written with
/// (checked to have that shape's width).
fn event_line(e: &Event, s: &Schema) -> String {
    let cols: Vec<&str> = s.columns.iter().map(|c: &Column| c.name.as_str()).collect();
    let cols = cols.join(",");
    match e.operation {
        Operation::Insert | Operation::Update => {
            let after = e.after.as_ref().expect("a row");
            assert_eq!(
                after.len(),
                s.columns.len(),
                "the row has the shape's width"
            );
            let word = if e.operation == Operation::Insert {
                "insert"
            } else {
                "update"
            };
            format!(
                "{word} [{cols}] {:?}",
                after.iter().map(cell).collect::<Vec<_>>()
            )
        }
        Operation::Delete => {
            let key = e.before_key.as_ref().expect("a key");
            format!("delete [{cols}] key {}", cell(&key[0]).unwrap())
        }
        other => panic!("{other:?}"),
    }
}

/// The read path asks the model's catalog: the key is `id`, the rest may
/// be NULL.
struct Model;

impl Catalogue for Model {
    async fn type_name(&self, oid: u32, _typmod: i32) -> Result<String> {
        Ok(if oid == 20 { "bigint" } else { "text" }.into())
    }
    async fn table(&self, schema: &str, table: &str, named: &[String]) -> Result<Schema> {
        Ok(Schema {
            table: format!("{schema}.{table}"),
            columns: named
                .iter()
                .map(|n| Column {
                    name: n.clone(),
                    decl_type: String::new(),
                    nullable: n != "id",
                })
                .collect(),
            key: vec!["id".into()],
        })
    }
    async fn note_backfills(&self, _bf: &mut Backfills, _commit: u64) -> Result<()> {
        Ok(())
    }
}

fn limits(max_events: Option<u64>) -> ReadLimits {
    static SHOWN: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ReadLimits {
        max_events,
        messages: SHOWN.get_or_init(|| vec![PREFIX.to_string()]),
        ..ReadLimits::default()
    }
}

fn budget() -> Budget {
    // Small: streamed transactions move to their files.
    Budget {
        memory: 300,
        max_bytes: None,
    }
}

/// One read that does not follow, from `cursor` to its stop point `stop`.
fn read_once(
    rt: &tokio::runtime::Runtime,
    w: &Wal,
    cursor: Sequence,
    stop: u64,
    max_events: Option<u64>,
    streaming: bool,
    dice: &mut Dice,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    let high_water = sequence(stop, 0).max(cursor);
    let out = BatchOut::new(SOURCE.into(), cursor, high_water, Vec::new(), &mut bytes);
    let settings = ReadSettings {
        follow: false,
        wal_end: stop,
        limits: limits(max_events),
        idle_batch: None,
    };
    let mut r = Reader::new(
        settings,
        cursor,
        Catalog::empty(),
        Backfills::default(),
        budget(),
        out,
    );
    let mut flow = Flow::Go;
    for s in server(w, (cursor >> 64) as u64, streaming, dice) {
        flow = match s {
            Sent::Data(d) => rt.block_on(r.data(d, &Model)).expect("decodes"),
            Sent::KeepAlive(at) => r.keepalive(at, false).expect("keepalive"),
        };
        if flow != Flow::Go {
            break;
        }
    }
    if flow != Flow::Ended {
        r.caught_up(high_water).expect("caught up");
    }
    drop(r);
    bytes
}

/// Reads that do not follow, each from the last one's end, until the end
/// of the WAL: together, the history.
fn reads(w: &Wal, streaming: bool, dice: &mut Dice) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let first = w.recs.first().map_or(w.end, |r| r.0);
    let mut cursor = sequence(first, 0);
    let mut got = Vec::new();
    let mut last = 0;
    let mut declared = Declared::default();
    for _ in 0..200 {
        if (cursor >> 64) as u64 >= w.end {
            break;
        }
        let from = (cursor >> 64) as u64;
        // Anywhere past the cursor, inside records too, or the end.
        let stop = if dice.chance(30) {
            w.end
        } else {
            from + 1 + dice.below(w.end - from)
        };
        let max_events = dice.chance(30).then(|| 1 + dice.below(5));
        let bytes = read_once(&rt, w, cursor, stop, max_events, streaming, dice);
        let (lines, end) = written(&bytes, cursor, &mut last, &mut declared, w.columns);
        got.extend(lines);
        assert!(end >= cursor);
        cursor = end;
    }
    if std::env::var_os("MODEL_STATS").is_some() {
        eprintln!(
            "reads: {} lines, {} records, streaming {streaming}",
            got.len(),
            w.recs.len()
        );
    }
    assert_eq!(got, expected(w), "reads resumed from each end");
}

/// A follower that reconnects at a random point: the server sends again
/// from its position.
fn follow(w: &Wal, streaming: bool, dice: &mut Dice) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let first = w.recs.first().map_or(w.end, |r| r.0);
    let start = sequence(first, 0);
    let mut bytes = Vec::new();
    let out = BatchOut::new(SOURCE.into(), start, start, Vec::new(), &mut bytes);
    let settings = ReadSettings {
        follow: true,
        wal_end: first,
        limits: limits(None),
        idle_batch: Some(Duration::ZERO),
    };
    let mut r = Reader::new(
        settings,
        start,
        Catalog::empty(),
        Backfills::default(),
        budget(),
        out,
    );
    let mut sends = server(w, first, streaming, dice);
    let mut cut = dice.below(sends.len() as u64 + 1) as usize;
    let mut reconnects = 0;
    let mut i = 0;
    while i < sends.len() {
        if i == cut && reconnects < 3 {
            reconnects += 1;
            r.resumed();
            sends = server(w, (r.w.position >> 64) as u64, streaming, dice);
            cut = dice.below(sends.len() as u64 + 1) as usize;
            i = 0;
            continue;
        }
        let flow = match sends[i].clone() {
            Sent::Data(d) => rt.block_on(r.data(d, &Model)).expect("decodes"),
            Sent::KeepAlive(at) => r.keepalive(at, false).expect("keepalive"),
        };
        assert_eq!(flow, Flow::Go, "a follower goes on");
        i += 1;
    }
    r.end_open_batch().unwrap();
    drop(r);
    let mut last = 0;
    let (got, _) = written(
        &bytes,
        start,
        &mut last,
        &mut Declared::default(),
        w.columns,
    );
    assert_eq!(got, expected(w), "a follower across reconnects");
}

/// One change; `ddl` weighs `ADD COLUMN` (likelier inside a savepoint,
/// whose rollback is what the read path must not carry).
fn op(ddl: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..6).prop_map(Op::Insert),
        3 => (1i64..6).prop_map(Op::Update),
        2 => (1i64..6).prop_map(Op::Delete),
        2 => (0u16..100).prop_map(Op::Note),
        ddl => Just(Op::AddColumn),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => op(1).prop_map(Step::Op),
        // A savepoint opens with a row change: PostgreSQL sends a streamed
        // transaction's messages under the top transaction's id, so one
        // before the savepoint's first change cannot be cut with it
        // (docs/POSTGRES.md, "Logical messages").
        2 => ((1i64..6), prop::collection::vec(op(3), 0..5), any::<bool>())
            .prop_map(|(id, mut ops, back)| {
                ops.insert(0, Op::Insert(id));
                Step::Savepoint(ops, back)
            }),
    ]
}

fn txn() -> impl Strategy<Value = Txn> {
    (
        prop::collection::vec(step(), 0..8),
        prop::bool::weighted(0.85),
        any::<bool>(),
    )
        .prop_map(|(steps, commits, streamed)| Txn {
            steps,
            commits,
            streamed,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Reads resumed from every batch end, and a follower that reconnects,
    /// write the committed history exactly, with protocol 1 and streaming.
    #[test]
    fn the_read_path_writes_the_committed_history_exactly(
        txns in prop::collection::vec(txn(), 1..7),
        loose in prop::collection::vec(0u16..100, 0..4),
        seed in 1u64..u64::MAX,
        streaming in any::<bool>(),
    ) {
        let mut dice = Dice(seed);
        let w = wal(txns, &loose, &mut dice);
        reads(&w, streaming, &mut dice);
        follow(&w, streaming, &mut dice);
    }
}
