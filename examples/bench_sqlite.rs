//! The SQLite side of the benchmarks (`bench/run.sh sqlite`).
//!
//! ```text
//! bench_sqlite writes DIR ROWS RUNS         # application writes with and without capture triggers
//! bench_sqlite source DB ROWS before|after  # a source table of ROWS rows, capture installed before or after them
//! bench_sqlite insert-baseline SRC DEST     # the same rows into a fresh table: prepared INSERT, one transaction
//! bench_sqlite version                      # the SQLite library linked in
//! ```
//!
//! Every table is the same five columns (integer key, TEXT with some Unicode,
//! REAL, BLOB, INTEGER) in a WAL database, filled from one seeded generator so
//! that both sides of a comparison write identical rows. Results are printed
//! as tab-separated lines for the harness to tabulate.

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection};
use std::path::{Path, PathBuf};
use std::time::Instant;

const DDL: &str =
    "CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, data BLOB, qty INTEGER)";
const INSERT: &str = "INSERT INTO items(id, name, price, data, qty) VALUES (?1, ?2, ?3, ?4, ?5)";
const UPDATE: &str = "UPDATE items SET name = ?2, price = ?3, data = ?4, qty = ?5 WHERE id = ?1";
/// Rows per application transaction.
const TX_ROWS: i64 = 1000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic and fast.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn name(&mut self) -> String {
        const WORDS: &[&str] = &[
            "tea", "cake", "Björk", "naïve", "café", "李", "東京", "😀", "straße", "O'Brien",
            "plain", "order", "blue", "large",
        ];
        let mut s = String::new();
        for i in 0..1 + self.below(3) {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(WORDS[self.below(WORDS.len() as u64) as usize]);
        }
        s
    }
    /// The four non-key values of a row.
    fn row(&mut self) -> (String, f64, Vec<u8>, i64) {
        let name = self.name();
        let price = self.below(10_000_000) as f64 / 100.0;
        let data: Vec<u8> = (0..16).map(|_| self.next() as u8).collect();
        let qty = self.below(1000) as i64;
        (name, price, data, qty)
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// A fresh WAL database holding the empty table.
fn create(path: &Path) -> Res<()> {
    remove_db(path);
    let c = Connection::open(path)?;
    let mode: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if mode != "wal" {
        return Err(format!("{} did not switch to WAL (got {mode})", path.display()).into());
    }
    c.execute_batch(DDL)?;
    Ok(())
}

/// Insert rows 1..=n in transactions of `TX_ROWS`; seconds taken.
fn insert_rows(c: &mut Connection, n: i64, seed: u64) -> Res<f64> {
    let mut r = Rng(seed | 1);
    let t = Instant::now();
    let mut id = 1;
    while id <= n {
        let tx = c.transaction()?;
        {
            let mut st = tx.prepare_cached(INSERT)?;
            for _ in 0..TX_ROWS.min(n - id + 1) {
                let (name, price, data, qty) = r.row();
                st.execute(params![id, name, price, data, qty])?;
                id += 1;
            }
        }
        tx.commit()?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Update every non-key column of rows 1..=n in transactions of `TX_ROWS`; seconds taken.
fn update_rows(c: &mut Connection, n: i64, seed: u64) -> Res<f64> {
    let mut r = Rng(seed | 1);
    let t = Instant::now();
    let mut id = 1;
    while id <= n {
        let tx = c.transaction()?;
        {
            let mut st = tx.prepare_cached(UPDATE)?;
            for _ in 0..TX_ROWS.min(n - id + 1) {
                let (name, price, data, qty) = r.row();
                st.execute(params![id, name, price, data, qty])?;
                id += 1;
            }
        }
        tx.commit()?;
    }
    Ok(t.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Application writes on two identical databases, one with capture installed.
/// Runs alternate which database goes first, so neither always gets a cold cache.
fn writes(dir: &Path, rows: i64, runs: usize) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    println!("# sync\top\tplain_s\tcaptured_s\trows");
    for sync in ["NORMAL", "FULL"] {
        let mut times: [[Vec<f64>; 2]; 2] = Default::default(); // [op][captured]
        for run in 0..runs {
            let order = if run % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for captured in order {
                let path = dir.join(if captured { "captured.db" } else { "plain.db" });
                create(&path)?;
                if captured {
                    let added = mooncdc::source::sqlite::init(&path, &[])?;
                    if added != ["items"] {
                        return Err(format!("capture init added {added:?}").into());
                    }
                }
                let mut c = Connection::open(&path)?;
                c.execute_batch(&format!("PRAGMA synchronous = {sync}"))?;
                let seed = 7 + run as u64;
                let ins = insert_rows(&mut c, rows, seed)?;
                let upd = update_rows(&mut c, rows, seed + 1000)?;
                times[0][captured as usize].push(ins);
                times[1][captured as usize].push(upd);
                drop(c);
                if captured {
                    let logged: i64 = Connection::open(&path)?.query_row(
                        "SELECT count(*) FROM _mooncdc_log",
                        [],
                        |r| r.get(0),
                    )?;
                    if logged != 2 * rows {
                        return Err(format!(
                            "the change log holds {logged} changes, expected {}",
                            2 * rows
                        )
                        .into());
                    }
                }
                remove_db(&path);
            }
        }
        for (op, t) in ["insert", "update"].iter().zip(times) {
            let [plain, captured] = t;
            println!(
                "{sync}\t{op}\t{:.3}\t{:.3}\t{rows}",
                median(plain),
                median(captured)
            );
        }
    }
    Ok(())
}

/// A source database of `rows` rows, capture installed before or after they are written.
fn source(path: &Path, rows: i64, when: &str) -> Res<()> {
    create(path)?;
    if when == "before" {
        mooncdc::source::sqlite::init(path, &[])?;
    }
    let mut c = Connection::open(path)?;
    insert_rows(&mut c, rows, 99)?;
    drop(c);
    if when == "after" {
        mooncdc::source::sqlite::init(path, &[])?;
    }
    Ok(())
}

/// Copy the source's rows into memory, then time a plain prepared-INSERT loop
/// of them into a fresh table in one transaction (what an apply does at best).
fn insert_baseline(src: &Path, dest: &Path) -> Res<()> {
    let s = Connection::open(src)?;
    let rows: Vec<Vec<Value>> = {
        let mut st = s.prepare("SELECT id, name, price, data, qty FROM items ORDER BY id")?;
        let v = st
            .query_map([], |r| (0..5).map(|i| r.get::<_, Value>(i)).collect())?
            .collect::<Result<_, _>>()?;
        v
    };
    create(dest)?;
    let mut c = Connection::open(dest)?;
    let t = Instant::now();
    let tx = c.transaction()?;
    {
        let mut st = tx.prepare(INSERT)?;
        for row in &rows {
            st.execute(params_from_iter(row.iter()))?;
        }
    }
    tx.commit()?;
    let secs = t.elapsed().as_secs_f64();
    println!("{secs:.3}\t{}", rows.len());
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = |i: usize| args.get(i).map(String::as_str);
    let num = |i: usize| a(i).and_then(|s| s.parse::<i64>().ok()).filter(|&n| n > 0);
    let r = match (a(0), a(1)) {
        (Some("writes"), Some(dir)) => match (num(2), num(3)) {
            (Some(rows), Some(runs)) => writes(Path::new(dir), rows, runs as usize),
            _ => usage(),
        },
        (Some("source"), Some(db)) => match (num(2), a(3)) {
            (Some(rows), Some(w @ ("before" | "after"))) => source(Path::new(db), rows, w),
            _ => usage(),
        },
        (Some("insert-baseline"), Some(src)) => match a(2) {
            Some(dest) => insert_baseline(Path::new(src), Path::new(dest)),
            None => usage(),
        },
        (Some("version"), None) => {
            println!("{}", rusqlite::version());
            Ok(())
        }
        _ => usage(),
    };
    if let Err(e) = r {
        eprintln!("bench_sqlite: {e}");
        std::process::exit(1);
    }
}

fn usage() -> Res<()> {
    eprintln!(
        "usage: bench_sqlite writes DIR ROWS RUNS | source DB ROWS before|after | insert-baseline SRC DEST | version"
    );
    std::process::exit(2);
}
