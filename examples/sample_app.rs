//! A small application that writes a SQLite database, for the demo and tests:
//! varied types (Unicode TEXT with a BOM, NUL and astral characters, REALs
//! from random bits, BLOBs, mixed classes in an untyped column) and bursts of
//! inserts, updates and deletes, some in transactions that roll back.
//!
//! ```text
//! sample_app create DB [ROWS]      # schema and initial rows
//! sample_app burst DB [CHANGES] [SEED]   # random changes in transactions
//! ```

use rusqlite::{params, Connection};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, good enough for sample data.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn real(&mut self) -> f64 {
        loop {
            let x = f64::from_bits(self.next());
            if x.is_finite() {
                return x;
            }
        }
    }
    fn text(&mut self) -> String {
        const PARTS: &[&str] = &[
            "ann",
            "Björk",
            "李",
            "😀",
            "\u{0}",
            "O'Brien",
            "\"q\"",
            "\\",
            " ",
            "é",
            "\u{10FFFF}",
            "\t",
        ];
        let mut s = String::new();
        if self.below(8) == 0 {
            s.push('\u{FEFF}');
        }
        for _ in 0..1 + self.below(4) {
            s.push_str(PARTS[self.below(PARTS.len() as u64) as usize]);
        }
        s
    }
    fn blob(&mut self) -> Vec<u8> {
        (0..self.below(12)).map(|_| self.next() as u8).collect()
    }
    fn any(&mut self) -> rusqlite::types::Value {
        use rusqlite::types::Value as V;
        match self.below(5) {
            0 => V::Null,
            1 => V::Integer(self.next() as i64),
            2 => V::Real(self.real()),
            3 => V::Text(self.text()),
            _ => V::Blob(self.blob()),
        }
    }
}

fn create(db: &str, rows: u64) -> rusqlite::Result<()> {
    let mut c = Connection::open(db)?;
    c.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, balance REAL, avatar BLOB, note);
         CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, total NUMERIC, placed_at TEXT, big INTEGER);
         CREATE TABLE settings(key TEXT PRIMARY KEY, value) WITHOUT ROWID;",
    )?;
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let tx = c.transaction()?;
    for id in 1..=rows as i64 {
        tx.execute(
            "INSERT INTO customers VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, r.text(), r.real(), r.blob(), r.any()],
        )?;
        tx.execute(
            "INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                id,
                id,
                format!("{}.{:02}", r.below(10000), r.below(100)),
                "2026-11-29T10:00:00Z",
                r.next() as i64
            ],
        )?;
    }
    for k in 0..10 {
        tx.execute(
            "INSERT INTO settings VALUES (?1, ?2)",
            params![format!("key-{k}"), r.any()],
        )?;
    }
    tx.commit()
}

fn burst(db: &str, changes: u64, seed: u64) -> rusqlite::Result<()> {
    let mut c = Connection::open(db)?;
    c.busy_timeout(std::time::Duration::from_secs(30))?;
    let mut r = Rng(seed | 1);
    let mut done = 0;
    while done < changes {
        let tx = c.transaction()?;
        let n = 1 + r.below(20);
        for _ in 0..n {
            let max: i64 = tx.query_row("SELECT coalesce(max(id), 0) FROM customers", [], |x| {
                x.get(0)
            })?;
            match r.below(10) {
                0..=3 => {
                    tx.execute(
                        "INSERT INTO customers VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![max + 1, r.text(), r.real(), r.blob(), r.any()],
                    )?;
                }
                4..=6 => {
                    let id = 1 + r.below(max.max(1) as u64) as i64;
                    tx.execute(
                        "UPDATE customers SET name = ?2, balance = ?3, note = ?4 WHERE id = ?1",
                        params![id, r.text(), r.real(), r.any()],
                    )?;
                }
                7 => {
                    let id = 1 + r.below(max.max(1) as u64) as i64;
                    tx.execute("DELETE FROM customers WHERE id = ?1", [id])?;
                }
                8 => {
                    // A key change.
                    let id = 1 + r.below(max.max(1) as u64) as i64;
                    tx.execute(
                        "UPDATE customers SET id = ?2 WHERE id = ?1",
                        params![id, max + 1000],
                    )?;
                }
                _ => {
                    let k = format!("key-{}", r.below(15));
                    tx.execute(
                        "INSERT INTO settings VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        params![k, r.any()],
                    )?;
                }
            }
        }
        if r.below(6) == 0 {
            tx.rollback()?; // never captured
        } else {
            tx.commit()?;
            done += n;
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let r = match (args.get(1).map(String::as_str), args.get(2)) {
        (Some("create"), Some(db)) => create(db, num(3, 1000)),
        (Some("burst"), Some(db)) => burst(db, num(3, 2000), num(4, 42)),
        _ => {
            eprintln!("usage: sample_app create DB [ROWS] | sample_app burst DB [CHANGES] [SEED]");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("sample_app: {e}");
        std::process::exit(1);
    }
}
