//! Writes one large, consistent JSONL batch for the benchmarks (`bench/run.sh`).
//!
//! ```text
//! gen_batch MB OUT [SEED] [KEYS]    # at least MB × 10^6 bytes; OUT may be - for stdout
//! ```
//!
//! One table of six columns (integer key, TEXT with some Unicode and JSON
//! escapes, REAL, BLOB, INTEGER, nullable TEXT), with its schema in the header.
//! Changes come in short runs on one row of a bounded key space, as hot rows
//! do, so `mooncdc-compact` has folds to make (insert+update, update+update,
//! update+delete, insert+delete, delete+insert). Every update's and delete's
//! before image is the row's previous after image, so the batch is one a
//! target could apply with image checks on.
//!
//! The header needs the high water before any event is written, so the
//! generator runs twice with the same seed: once to count the events that
//! reach the size, once to write them.

use mooncdc::wire::batch::{write_commit_line, write_event_line, write_header_line};
use mooncdc::wire::{Column, Commit, Cursor, Event, Header, Operation, Schema, Value};
use std::collections::HashMap;
use std::io::Write;

const TABLE: &str = "items";
const SOURCE: &str = "bench:gen_batch";

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic and fast; quality is beside the point.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn text(&mut self, words: u64) -> String {
        const WORDS: &[&str] = &[
            "tea",
            "cake",
            "lemon",
            "Björk",
            "Zoë",
            "naïve",
            "café",
            "李",
            "東京",
            "😀",
            "Ω",
            "straße",
            "O'Brien",
            "\"quoted\"",
            "back\\slash",
            "tab\there",
            "€5",
            "plain",
            "order",
            "blue",
            "large",
            "small",
            "récépissé",
            "Ærø",
        ];
        let mut s = String::new();
        for i in 0..1 + self.below(words) {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(WORDS[self.below(WORDS.len() as u64) as usize]);
        }
        s
    }
    fn price(&mut self) -> f64 {
        // Cents as a decimal fraction: most are not exact binary fractions,
        // so the wire carries full 53-bit significands.
        self.below(10_000_000) as f64 / 100.0
    }
    fn blob(&mut self) -> Vec<u8> {
        (0..self.below(25)).map(|_| self.next() as u8).collect()
    }
    fn qty(&mut self) -> i64 {
        if self.below(10) == 0 {
            self.next() as i64
        } else {
            self.below(1000) as i64
        }
    }
    fn note(&mut self) -> Value {
        if self.below(3) == 0 {
            Value::Null
        } else {
            Value::Text(self.text(6))
        }
    }
}

fn schema() -> Schema {
    let col = |name: &str, ty: &str, nullable: bool| Column {
        name: name.into(),
        decl_type: ty.into(),
        nullable,
    };
    Schema {
        table: TABLE.into(),
        columns: vec![
            col("id", "INTEGER", false),
            col("name", "TEXT", false),
            col("price", "REAL", true),
            col("data", "BLOB", true),
            col("qty", "INTEGER", true),
            col("note", "TEXT", true),
        ],
        key: vec!["id".into()],
    }
}

/// The deterministic change stream: yields events until `keep_going` says stop.
struct Changes {
    rng: Rng,
    keys: u64,
    rows: HashMap<i64, Vec<Value>>,
    run_key: i64,
    run_left: u64,
    sequence: u128,
}

impl Changes {
    fn new(seed: u64, keys: u64) -> Self {
        Changes {
            rng: Rng(seed | 1),
            keys,
            rows: HashMap::new(),
            run_key: 0,
            run_left: 0,
            sequence: 0,
        }
    }

    fn next_event(&mut self) -> Event {
        if self.run_left == 0 {
            self.run_key = 1 + self.rng.below(self.keys) as i64;
            // Mostly single changes, some short bursts on one row.
            self.run_left = match self.rng.below(10) {
                0..=5 => 1,
                6..=7 => 2,
                8 => 3,
                _ => 4,
            };
        }
        self.run_left -= 1;
        self.sequence += 1;
        let id = self.run_key;
        let r = &mut self.rng;
        let (operation, before, after) = match self.rows.remove(&id) {
            None => {
                let row = vec![
                    Value::Integer(id),
                    Value::Text(r.text(4)),
                    Value::Real(r.price()),
                    Value::Blob(r.blob()),
                    Value::Integer(r.qty()),
                    r.note(),
                ];
                (Operation::Insert, None, Some(row))
            }
            Some(old) if r.below(10) < 7 => {
                let mut new = old.clone();
                match r.below(4) {
                    0 => new[2] = Value::Real(r.price()),
                    1 => new[4] = Value::Integer(r.qty()),
                    2 => {
                        new[1] = Value::Text(r.text(4));
                        new[5] = r.note();
                    }
                    _ => {
                        new[2] = Value::Real(r.price());
                        new[3] = Value::Blob(r.blob());
                        new[4] = Value::Integer(r.qty());
                    }
                }
                (Operation::Update, Some(old), Some(new))
            }
            Some(old) => (Operation::Delete, Some(old), None),
        };
        if let Some(a) = &after {
            self.rows.insert(id, a.clone());
        }
        Event {
            sequence: self.sequence,
            table: TABLE.into(),
            operation,
            before,
            before_key: None,
            after,
        }
    }
}

fn header(high_water: u128) -> Header {
    Header {
        start: Cursor::new(SOURCE, 0),
        high_water,
        schemas: Some(vec![schema()]),
        compacted: false,
    }
}

fn commit(count: u64) -> Commit {
    Commit {
        end: Cursor::new(SOURCE, count as u128),
        count,
    }
}

/// Events needed so that the whole batch holds at least `target` bytes.
fn count_events(seed: u64, keys: u64, target: u64) -> u64 {
    let mut line = Vec::with_capacity(1024);
    let mut g = Changes::new(seed, keys);
    let mut n = 0u64;
    let mut bytes = 0u64;
    // The header and commit grow with the count's digits; a generous fixed
    // allowance keeps this pass simple, and the batch ends up slightly larger.
    let frame = {
        write_header_line(&mut line, &header(u64::MAX as u128));
        write_commit_line(&mut line, &commit(u64::MAX));
        line.len() as u64
    };
    while bytes + frame < target {
        line.clear();
        write_event_line(&mut line, &g.next_event());
        bytes += line.len() as u64;
        n += 1;
    }
    n
}

fn write_batch(seed: u64, keys: u64, n: u64, out: &mut dyn Write) -> std::io::Result<u64> {
    let mut line = Vec::with_capacity(1 << 16);
    let mut g = Changes::new(seed, keys);
    let mut written = 0u64;
    write_header_line(&mut line, &header(n as u128));
    for _ in 0..n {
        write_event_line(&mut line, &g.next_event());
        if line.len() >= 1 << 16 {
            out.write_all(&line)?;
            written += line.len() as u64;
            line.clear();
        }
    }
    write_commit_line(&mut line, &commit(n));
    out.write_all(&line)?;
    written += line.len() as u64;
    out.flush()?;
    Ok(written)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| match args.get(i) {
        None => Some(d),
        Some(s) => s.parse().ok(),
    };
    let (Some(mb), Some(out), Some(seed), Some(keys)) =
        (num(0, 0), args.get(1), num(2, 42), num(3, 50_000))
    else {
        eprintln!("usage: gen_batch MB OUT [SEED] [KEYS]");
        std::process::exit(2);
    };
    if mb == 0 || keys == 0 {
        eprintln!("usage: gen_batch MB OUT [SEED] [KEYS]   (MB and KEYS positive)");
        std::process::exit(2);
    }
    let n = count_events(seed, keys, mb * 1_000_000);
    let result = if out == "-" {
        write_batch(seed, keys, n, &mut std::io::stdout().lock())
    } else {
        std::fs::File::create(out)
            .map(std::io::BufWriter::new)
            .and_then(|mut f| write_batch(seed, keys, n, &mut f))
    };
    match result {
        Ok(bytes) => eprintln!("gen_batch: {n} events, {bytes} bytes"),
        Err(e) => {
            eprintln!("gen_batch: cannot write {out}: {e}");
            std::process::exit(1);
        }
    }
}
