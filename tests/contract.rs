//! The Target contract (`mooncdc::destination::Target`, docs/TOOLS.md (apply)), run
//! case by case against every target through the trait: the in-memory
//! double, a SQLite projection, a PostgreSQL and a ClickHouse database
//! (throwaway servers), and an archive of batch files (`dir:`), whose rows
//! are what replaying its files gives. A new target passes these before
//! anything else.

mod common;

use common::{ch, del, ins, kv_schema, row, trunc, upd, Spec};
use mooncdc::destination::clickhouse::{ClickHouse, Engine};
use mooncdc::destination::dir::{DirConfig, DirTarget};
use mooncdc::destination::memory::MemoryTarget;
use mooncdc::destination::postgres::PgTarget;
use mooncdc::destination::sqlite::SqliteTarget;
use mooncdc::destination::{AuditedTarget, Target, TargetOptions};
use mooncdc::endpoint;
use mooncdc::endpoint::Endpoint;
use mooncdc::source::SourceKind;
use mooncdc::wire::{BatchStreamReader, DynRead, Limits, Row, Schema, SnapshotReader, Value};
use serde_json::{json, Value as J};

/// Makes a fresh target for the case named; files go in the folder given.
type Make = Box<dyn Fn(&std::path::Path, &str, TargetOptions) -> Box<dyn AuditedTarget>>;

/// How to make a fresh, empty target of one kind.
struct Kind {
    name: &'static str,
    /// Whether the target refuses events whose images contradict its rows.
    checks_images: bool,
    /// An archive keeps what the stream says: a change no database can
    /// follow (a key changed, a header that does not say how a table
    /// changed) is refused when its files are replayed, not when written.
    archive: bool,
    make: Make,
}

/// An archive read back as the contract reads a target: its files, in the
/// order of their names' intervals, replayed into the in-memory double.
struct Archive {
    t: DirTarget,
    path: std::path::PathBuf,
}

impl Archive {
    fn replayed(&self) -> mooncdc::Result<MemoryTarget> {
        let mut m = MemoryTarget::default();
        for (_, _, p) in common::archive_files(&self.path) {
            // Through the tools' input, which checks each file's sidecar.
            match mooncdc::cli::open_input(Some(&p), Limits::default())? {
                mooncdc::cli::Input::Batches(mut r) => {
                    m.apply_stream(&mut r, &mut |_| {})?;
                }
                mooncdc::cli::Input::Snapshot(_) => panic!("{}: a snapshot", p.display()),
            }
        }
        Ok(m)
    }
}

impl Target for Archive {
    fn cursor(&self) -> mooncdc::Result<Option<mooncdc::wire::Cursor>> {
        self.t.cursor()
    }
    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&mooncdc::destination::ApplyStats),
    ) -> mooncdc::Result<mooncdc::destination::ApplyStats> {
        self.t.apply_stream(input, progress)
    }
    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<DynRead>,
        progress: &mut dyn FnMut(&mooncdc::destination::ApplyStats),
    ) -> mooncdc::Result<mooncdc::destination::ApplyStats> {
        self.t.apply_snapshot(input, progress)
    }
    fn committed(&self) -> mooncdc::destination::ApplyStats {
        self.t.committed()
    }
}

impl AuditedTarget for Archive {
    fn table_shape(
        &self,
        schema: &Schema,
        kind: SourceKind,
    ) -> mooncdc::Result<Option<mooncdc::destination::StoredShape>> {
        self.replayed()?.table_shape(schema, kind)
    }
    fn with_rows(
        &self,
        schema: &Schema,
        kind: SourceKind,
        f: &mut dyn FnMut(&mut mooncdc::destination::PullRow<'_>) -> mooncdc::Result<()>,
    ) -> mooncdc::Result<()> {
        self.replayed()?.with_rows(schema, kind, f)
    }
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "memory",
            checks_images: true,
            archive: false,
            make: Box::new(|_, _, o| {
                Box::new(MemoryTarget {
                    options: o,
                    ..Default::default()
                })
            }),
        },
        Kind {
            name: "sqlite",
            checks_images: true,
            archive: false,
            make: Box::new(|dir, case, o| {
                Box::new(
                    SqliteTarget::open(&dir.join(format!("{case}.db")))
                        .unwrap()
                        .with_options(o),
                )
            }),
        },
        Kind {
            name: "postgres",
            checks_images: true,
            archive: false,
            make: Box::new(|_, case, o| {
                let db = common::pg::db(&format!("contract_{case}"));
                let Endpoint::Postgres(c) = endpoint::parse(&db.url()).unwrap() else {
                    unreachable!("a PostgreSQL URL")
                };
                Box::new(PgTarget::open(*c).unwrap().with_options(o))
            }),
        },
        Kind {
            name: "clickhouse",
            checks_images: false,
            archive: false,
            make: Box::new(|_, case, o| {
                let db = ch::db(&format!("contract_{case}"));
                let Endpoint::ClickHouse(c) = endpoint::parse(&db.url()).unwrap() else {
                    unreachable!("a ClickHouse URL")
                };
                Box::new(
                    ClickHouse::connect(*c, Engine::Replacing)
                        .unwrap()
                        .with_options(o),
                )
            }),
        },
        Kind {
            name: "dir",
            checks_images: false,
            archive: true,
            make: Box::new(|dir, case, _| {
                let path = dir.join(format!("{case}.archive"));
                let url = path.to_str().unwrap();
                Box::new(Archive {
                    t: DirTarget::new(DirConfig::parse(url).unwrap()),
                    path,
                })
            }),
        },
        // Batches grouped into files: every case's batches wait in one
        // file until the input ends (or fails).
        Kind {
            name: "dir (grouped)",
            checks_images: false,
            archive: true,
            make: Box::new(|dir, case, _| {
                let path = dir.join(format!("{case}.grouped"));
                let url = format!("{}?max-bytes=1000000&max-age=600", path.display());
                Box::new(Archive {
                    t: DirTarget::new(DirConfig::parse(&url).unwrap()),
                    path,
                })
            }),
        },
    ]
}

fn stream(text: &str) -> BatchStreamReader<DynRead> {
    let r: DynRead = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    BatchStreamReader::jsonl(r, "contract", Limits::default())
}

fn snapshot(text: &str) -> SnapshotReader<DynRead> {
    let r: DynRead = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    SnapshotReader::jsonl(r, "contract", Limits::default())
}

fn apply(t: &mut dyn Target, text: &str) -> mooncdc::Result<mooncdc::destination::ApplyStats> {
    t.apply_stream(&mut stream(text), &mut |_| {})
}

fn kv() -> Schema {
    serde_json::from_value(kv_schema("t")).unwrap()
}

/// The target's rows of `t`, in the order it yields them.
fn rows(t: &dyn AuditedTarget) -> Vec<Row> {
    let mut out = Vec::new();
    t.with_rows(&kv(), SourceKind::Sqlite, &mut |pull| {
        while let Some(r) = pull()? {
            out.push(r);
        }
        Ok(())
    })
    .unwrap();
    out
}

fn expect_rows(k: &Kind, t: &dyn AuditedTarget, want: &[(i64, &str)]) {
    let got = rows(t);
    let want: Vec<Row> = want
        .iter()
        .map(|(i, v)| vec![Value::Integer(*i), Value::Text(v.to_string())])
        .collect();
    let same = got.len() == want.len()
        && got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.iter().zip(b).all(|(x, y)| x.same_normalized(y)));
    assert!(same, "{}: rows {got:?}, expected {want:?}", k.name);
}

fn batch(start: u128, end: u128, events: Vec<J>) -> Spec {
    Spec::new(start, end)
        .schemas(vec![kv_schema("t")])
        .events(events)
}

fn seq(t: &dyn Target) -> Option<u128> {
    t.cursor().unwrap().map(|c| c.sequence())
}

#[test]
fn the_target_contract_holds_for_every_target() {
    let dir = tempfile::tempdir().unwrap();
    for k in kinds() {
        let mut t = (k.make)(dir.path(), "main", TargetOptions::default());
        let t = &mut *t;
        // A new target holds nothing.
        assert_eq!(seq(t), None, "{}", k.name);
        expect_rows(&k, t, &[]);

        // A batch, committed with its cursor.
        let b1 = batch(
            0,
            3,
            vec![ins(1, "t", row(1, "a")), ins(2, "t", row(2, "b"))],
        );
        let s = apply(t, &b1.jsonl()).unwrap();
        assert_eq!((s.batches, s.applied, s.skipped), (1, 2, 0), "{}", k.name);
        assert_eq!(seq(t), Some(3), "{}", k.name);
        assert_eq!(t.committed().cursor.map(|c| c.sequence()), Some(3));
        expect_rows(&k, t, &[(1, "a"), (2, "b")]);

        // Replaying it is a no-op.
        let s = apply(t, &b1.jsonl()).unwrap();
        assert_eq!((s.applied, s.skipped), (0, 2), "{}: replay", k.name);
        expect_rows(&k, t, &[(1, "a"), (2, "b")]);

        // An overlapping batch applies only what is after the cursor.
        let b2 = batch(
            1,
            6,
            vec![
                ins(2, "t", row(2, "b")),
                upd(4, "t", row(1, "a"), row(1, "A")),
                del(6, "t", row(2, "b")),
            ],
        );
        let s = apply(t, &b2.jsonl()).unwrap();
        assert_eq!((s.applied, s.skipped), (2, 1), "{}: overlap", k.name);
        assert_eq!(seq(t), Some(6));
        expect_rows(&k, t, &[(1, "A")]);

        // A gap, another source, a compacted batch across the cursor: each
        // refused, nothing changed.
        let gap = batch(7, 8, vec![ins(8, "t", row(8, "x"))]);
        let other = batch(6, 8, vec![ins(8, "t", row(8, "x"))]).source("sqlite:other");
        let compacted = batch(5, 9, vec![ins(9, "t", row(9, "x"))]).compacted(true);
        for (what, b) in [
            ("gap", gap),
            ("other source", other),
            ("compacted", compacted),
        ] {
            let e = apply(t, &b.jsonl()).expect_err(what);
            assert_eq!(
                e.kind(),
                mooncdc::ErrorKind::State,
                "{}: {what}: {e}",
                k.name
            );
            assert_eq!(seq(t), Some(6), "{}: {what}", k.name);
            expect_rows(&k, t, &[(1, "A")]);
        }
        // A compacted batch from the cursor is applied.
        let from = batch(6, 9, vec![ins(9, "t", row(9, "x"))]).compacted(true);
        apply(t, &from.jsonl()).unwrap();
        expect_rows(&k, t, &[(1, "A"), (9, "x")]);

        // A good batch, then a truncated one: the first is kept, nothing of
        // the second.
        let good = batch(9, 10, vec![ins(10, "t", row(10, "y"))]);
        let cut = batch(10, 11, vec![ins(11, "t", row(11, "z"))]);
        let text = format!("{}{}{}", good.jsonl(), cut.header_line(), cut.event_lines());
        apply(t, &text).expect_err("truncated");
        assert_eq!(seq(t), Some(10), "{}: truncated", k.name);
        assert_eq!(t.committed().batches, 1, "{}", k.name);
        expect_rows(&k, t, &[(1, "A"), (9, "x"), (10, "y")]);

        // Image checks, where the target makes them.
        let bad = batch(10, 12, vec![upd(12, "t", row(1, "not A"), row(1, "B"))]);
        match (apply(t, &bad.jsonl()), k.checks_images) {
            (Ok(_), false) if k.archive => {
                // Kept as it came; replaying the archive refuses it.
                assert_eq!(seq(t), Some(12));
                let e = t.with_rows(&kv(), SourceKind::Sqlite, &mut |_| Ok(()));
                let e = e.unwrap_err().to_string();
                assert!(e.contains("before image differs"), "{e}");
            }
            (Err(e), true) => {
                assert_eq!(e.kind(), mooncdc::ErrorKind::State, "{}: {e}", k.name);
                assert_eq!(seq(t), Some(10));
                expect_rows(&k, t, &[(1, "A"), (9, "x"), (10, "y")]);
            }
            (Ok(_), false) => expect_rows(&k, t, &[(1, "B"), (9, "x"), (10, "y")]),
            (r, _) => panic!("{}: image check: {r:?}", k.name),
        }

        // A snapshot loads only into a target without a cursor.
        let snap = common::snapshot_jsonl(&[kv_schema("t")], 3);
        let e = t
            .apply_snapshot(&mut snapshot(&snap), &mut |_| {})
            .expect_err("snapshot into a target with a cursor");
        // An archive takes no snapshot at all (a data error: the input).
        let want = if k.archive {
            mooncdc::ErrorKind::Data
        } else {
            mooncdc::ErrorKind::State
        };
        assert_eq!(e.kind(), want, "{}: {e}", k.name);
    }
}

/// A snapshot with rows loads them and its cursor into a fresh target, and
/// the batches after its cursor follow.
#[test]
fn snapshots_load_by_the_contract_for_every_target() {
    let head = common::snapshot_jsonl(&[kv_schema("t")], 5);
    let (header, _) = head.split_once('\n').unwrap();
    let rows: String = [(1, "a"), (2, "b")]
        .iter()
        .map(|(i, v)| {
            format!(
                "{}\n",
                serde_json::json!({"kind": "row", "table": "t", "row": row(*i, v)})
            )
        })
        .collect();
    let snap = format!("{header}\n{rows}{{\"kind\":\"commit\",\"count\":\"2\"}}\n");
    let dir = tempfile::tempdir().unwrap();
    for k in kinds() {
        let mut t = (k.make)(dir.path(), "snap", TargetOptions::default());
        let t = &mut *t;
        if k.archive {
            // Refused, the way on named, nothing made.
            let e = t
                .apply_snapshot(&mut snapshot(&snap), &mut |_| {})
                .unwrap_err();
            assert!(e.to_string().contains("not snapshots"), "{e}");
            assert_eq!(seq(t), None);
            continue;
        }
        let s = t.apply_snapshot(&mut snapshot(&snap), &mut |_| {}).unwrap();
        assert_eq!((s.batches, s.applied), (1, 2), "{}", k.name);
        assert_eq!(seq(t), Some(5), "{}", k.name);
        expect_rows(&k, t, &[(1, "a"), (2, "b")]);
        let next = batch(
            5,
            7,
            vec![del(6, "t", row(1, "a")), ins(7, "t", row(0, "z"))],
        );
        apply(t, &next.jsonl()).unwrap();
        expect_rows(&k, t, &[(0, "z"), (2, "b")]);
    }
}

/// A truncate empties its table at its position in the batch: rows before
/// it go, rows after it stay, a replay (whole or overlapping) brings nothing
/// back, and a truncate of an empty table is harmless.
#[test]
fn a_truncate_empties_the_table_at_its_position_for_every_target() {
    let dir = tempfile::tempdir().unwrap();
    for k in kinds() {
        let mut t = (k.make)(dir.path(), "truncate", TargetOptions::default());
        let t = &mut *t;
        let b1 = batch(
            0,
            3,
            vec![ins(1, "t", row(1, "a")), ins(2, "t", row(2, "b"))],
        );
        apply(t, &b1.jsonl()).unwrap();
        // Rows before and after the truncate in one batch.
        let b2 = batch(
            3,
            8,
            vec![
                ins(4, "t", row(3, "c")),
                upd(5, "t", row(1, "a"), row(1, "A")),
                trunc(6, "t"),
                ins(7, "t", row(2, "new")),
            ],
        );
        let s = apply(t, &b2.jsonl()).unwrap();
        assert_eq!(s.applied, 4, "{}", k.name);
        assert_eq!(seq(t), Some(8), "{}", k.name);
        expect_rows(&k, t, &[(2, "new")]);
        // Replays: the same batches again, then one overlapping the truncate.
        apply(t, &format!("{}{}", b1.jsonl(), b2.jsonl())).unwrap();
        expect_rows(&k, t, &[(2, "new")]);
        let b3 = batch(
            5,
            10,
            vec![
                trunc(6, "t"),
                ins(7, "t", row(2, "new")),
                ins(9, "t", row(9, "z")),
                trunc(10, "t"),
            ],
        );
        let s = apply(t, &b3.jsonl()).unwrap();
        assert_eq!((s.applied, s.skipped), (2, 2), "{}: overlap", k.name);
        expect_rows(&k, t, &[]);
        // After the table was emptied, new rows; a truncate of an empty
        // table then changes nothing but the cursor.
        let b4 = batch(
            10,
            13,
            vec![
                ins(11, "t", row(1, "again")),
                trunc(12, "t"),
                trunc(13, "t"),
            ],
        );
        apply(t, &b4.jsonl()).unwrap();
        expect_rows(&k, t, &[]);
        let b5 = batch(13, 14, vec![ins(14, "t", row(5, "last"))]);
        apply(t, &b5.jsonl()).unwrap();
        expect_rows(&k, t, &[(5, "last")]);
        assert_eq!(seq(t), Some(14), "{}", k.name);
    }
}

/// `t`'s rows read with `schema`.
fn rows_as(t: &dyn AuditedTarget, schema: &J) -> Vec<Row> {
    let s: Schema = serde_json::from_value(schema.clone()).unwrap();
    let mut out = Vec::new();
    t.with_rows(&s, SourceKind::Sqlite, &mut |pull| {
        while let Some(r) = pull()? {
            out.push(r);
        }
        Ok(())
    })
    .unwrap();
    out
}

#[track_caller]
fn expect_rows_as(k: &Kind, t: &dyn AuditedTarget, schema: &J, want: J) {
    let want: Vec<Row> = serde_json::from_value(want).unwrap();
    let got = rows_as(t, schema);
    let same = got.len() == want.len()
        && got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_normalized(y)));
    assert!(same, "{}: rows {got:?}, expected {want:?}", k.name);
}

/// Schema records inside batches: a column added, dropped, renamed, each
/// applied with the event after it; replays change nothing; a change the
/// target cannot follow fails with the cursor and rows unchanged.
#[test]
fn schema_changes_in_the_stream_for_every_target() {
    use common::{int, schema, schema_rec, text, vnull};
    let dir = tempfile::tempdir().unwrap();
    let s1 = kv_schema("t");
    let s2 = schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("v", "TEXT", true),
            ("w", "INTEGER", true),
        ],
        &["id"],
    );
    let s3 = kv_schema("t");
    let s4 = schema(
        "t",
        &[("id", "INTEGER", false), ("x", "TEXT", true)],
        &["id"],
    );
    let b1 = Spec::new(0, 2)
        .schemas(vec![s1.clone()])
        .events(vec![ins(1, "t", row(1, "a")), ins(2, "t", row(2, "b"))]);
    // Added column: rows before it keep NULL there.
    let b2 = Spec::new(2, 6).schemas(vec![s1.clone()]).events(vec![
        ins(3, "t", row(3, "c")),
        schema_rec(s2.clone(), &[]),
        ins(4, "t", json!([int(4), text("d"), int(7)])),
        upd(
            5,
            "t",
            json!([int(1), text("a"), vnull()]),
            json!([int(1), text("a"), int(9)]),
        ),
    ]);
    // Dropped column.
    let b3 = Spec::new(6, 8)
        .schemas(vec![s2.clone()])
        .events(vec![schema_rec(s3.clone(), &[]), ins(8, "t", row(5, "e"))]);
    // Renamed column.
    let b4 = Spec::new(8, 10).schemas(vec![s3.clone()]).events(vec![
        schema_rec(s4.clone(), &[("v", "x")]),
        upd(10, "t", row(2, "b"), row(2, "B")),
    ]);
    for k in kinds() {
        let mut t = (k.make)(dir.path(), "schema_changes", TargetOptions::default());
        let t = &mut *t;
        apply(t, &b1.jsonl()).unwrap();
        apply(t, &b2.jsonl()).unwrap();
        let after_b2 = json!([
            [int(1), text("a"), int(9)],
            [int(2), text("b"), vnull()],
            [int(3), text("c"), vnull()],
            [int(4), text("d"), int(7)]
        ]);
        expect_rows_as(&k, t, &s2, after_b2.clone());
        // A replay of both, and one from inside b2 (its schema record goes
        // with event 4, which the target holds): nothing changes.
        apply(t, &format!("{}{}", b1.jsonl(), b2.jsonl())).unwrap();
        expect_rows_as(&k, t, &s2, after_b2);
        apply(t, &b3.jsonl()).unwrap();
        let after_b3 = json!([
            [int(1), text("a")],
            [int(2), text("b")],
            [int(3), text("c")],
            [int(4), text("d")],
            [int(5), text("e")]
        ]);
        expect_rows_as(&k, t, &s3, after_b3.clone());
        apply(t, &b3.jsonl()).unwrap();
        expect_rows_as(&k, t, &s3, after_b3.clone());
        match (apply(t, &b4.jsonl()), k.name) {
            (Err(e), "clickhouse") => {
                // ClickHouse 18.16 has no RENAME COLUMN: refused, nothing
                // changed, the way forward named.
                assert!(e.to_string().contains("RENAME COLUMN"), "{e}");
                assert_eq!(seq(t), Some(8));
                expect_rows_as(&k, t, &s3, after_b3);
            }
            (Ok(_), _) => {
                assert_eq!(seq(t), Some(10), "{}", k.name);
                expect_rows_as(
                    &k,
                    t,
                    &s4,
                    json!([
                        [int(1), text("a")],
                        [int(2), text("B")],
                        [int(3), text("c")],
                        [int(4), text("d")],
                        [int(5), text("e")]
                    ]),
                );
            }
            (Err(e), name) => panic!("{name}: rename refused: {e}"),
        }
        // A change of the key is refused everywhere, nothing changed.
        let s5 = schema(
            "t",
            &[("id", "INTEGER", false), ("x", "TEXT", false)],
            &["x"],
        );
        let at = seq(t).unwrap();
        let before = schema_rec(s5, &[]);
        let cur = if at == 10 { s4.clone() } else { s3.clone() };
        let b5 = Spec::new(at, at + 1)
            .schemas(vec![cur.clone()])
            .events(vec![before, ins(at + 1, "t", row(6, "f"))]);
        if k.archive {
            // Kept as it came; replaying the archive refuses it.
            apply(t, &b5.jsonl()).unwrap();
            assert_eq!(seq(t), Some(at + 1));
            let e = t.with_rows(
                &serde_json::from_value(cur).unwrap(),
                SourceKind::Sqlite,
                &mut |_| Ok(()),
            );
            assert!(e.unwrap_err().to_string().contains("key"), "{}", k.name);
            continue;
        }
        let e = apply(t, &b5.jsonl()).expect_err("key change");
        assert!(e.to_string().contains("key"), "{}: {e}", k.name);
        assert_eq!(seq(t), Some(at), "{}", k.name);
    }
}

/// A batch header that gives a table another shape than the target holds,
/// with no schema record to say how (a follower started after the change):
/// columns dropped (the rest in order) and columns added at the end are
/// carried, as a schema record would carry them; anything else (a column
/// gone and another new, a move) is refused with cursor and rows unchanged.
#[test]
fn header_drops_and_adds_are_carried_for_every_target() {
    use common::{int, schema, text, vnull};
    let dir = tempfile::tempdir().unwrap();
    let s1 = schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("v", "TEXT", true),
            ("w", "INTEGER", true),
        ],
        &["id"],
    );
    let s2 = schema(
        "t",
        &[("id", "INTEGER", false), ("w", "INTEGER", true)],
        &["id"],
    );
    let s3 = schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("w", "INTEGER", true),
            ("x", "TEXT", true),
        ],
        &["id"],
    );
    let b1 = Spec::new(0, 2).schemas(vec![s1.clone()]).events(vec![
        ins(1, "t", json!([int(1), text("a"), int(7)])),
        ins(2, "t", json!([int(2), text("b"), vnull()])),
    ]);
    // `v` dropped while no capture was reading.
    let b2 = Spec::new(2, 3).schemas(vec![s2.clone()]).events(vec![ins(
        3,
        "t",
        json!([int(3), int(9)]),
    )]);
    // `x` added.
    let b3 = Spec::new(3, 4).schemas(vec![s3.clone()]).events(vec![upd(
        4,
        "t",
        json!([int(2), vnull(), vnull()]),
        json!([int(2), int(5), text("q")]),
    )]);
    let after_b3 = json!([
        [int(1), int(7), vnull()],
        [int(2), int(5), text("q")],
        [int(3), int(9), vnull()]
    ]);
    // Not a pure drop or add: `x` gone and `y` new (a rename?), or moved.
    let renamed = schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("w", "INTEGER", true),
            ("y", "TEXT", true),
        ],
        &["id"],
    );
    let moved = schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("x", "TEXT", true),
            ("w", "INTEGER", true),
        ],
        &["id"],
    );
    let key_dropped = schema("t", &[("w", "INTEGER", false)], &["w"]);
    for k in kinds() {
        let mut t = (k.make)(dir.path(), "header_shapes", TargetOptions::default());
        let t = &mut *t;
        apply(t, &b1.jsonl()).unwrap();
        apply(t, &b2.jsonl()).unwrap_or_else(|e| panic!("{}: pure drop: {e}", k.name));
        expect_rows_as(
            &k,
            t,
            &s2,
            json!([[int(1), int(7)], [int(2), vnull()], [int(3), int(9)]]),
        );
        apply(t, &b3.jsonl()).unwrap_or_else(|e| panic!("{}: pure add: {e}", k.name));
        expect_rows_as(&k, t, &s3, after_b3.clone());
        assert_eq!(seq(t), Some(4), "{}", k.name);
        if k.archive {
            // Kept as it came; replaying the archive refuses it.
            let b = Spec::new(4, 5)
                .schemas(vec![renamed.clone()])
                .events(vec![]);
            apply(t, &b.jsonl()).unwrap();
            let e = t.with_rows(
                &serde_json::from_value(s3.clone()).unwrap(),
                SourceKind::Sqlite,
                &mut |_| Ok(()),
            );
            let e = e.unwrap_err().to_string();
            assert!(e.contains("does not say how one became the other"), "{e}");
            continue;
        }
        for bad in [&renamed, &moved, &key_dropped] {
            let b = Spec::new(4, 5).schemas(vec![bad.clone()]).events(vec![]);
            let e = apply(t, &b.jsonl()).expect_err("ambiguous");
            assert_eq!(e.kind(), mooncdc::ErrorKind::State, "{}: {e}", k.name);
            assert!(
                e.to_string()
                    .contains("does not say how one became the other"),
                "{}: {e}",
                k.name
            );
            assert_eq!(seq(t), Some(4), "{}", k.name);
            expect_rows_as(&k, t, &s3, after_b3.clone());
        }
    }
}
