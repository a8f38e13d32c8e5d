//! Run the fuzz targets on stable Rust, without libFuzzer.
//!
//! ```text
//! replay TARGET|all [PATH...]                  run every input once (files or folders)
//! replay TARGET|all --mutate SECONDS [PATH...] also mutate the inputs at random for SECONDS
//! ```
//!
//! Without paths, a target reads `fuzz/seeds/<target>/` (the committed seed and
//! regression corpus) and `fuzz/corpus/<target>/` (what cargo-fuzz has found),
//! those that exist. A panic is a failure: the input is printed in hex, written
//! to `fuzz/artifacts/<target>/crash-<hash>` when it came from mutation, and the
//! exit status is 1. Mutation here is blind (no coverage feedback): it is a
//! smoke test for machines without a nightly toolchain, not a substitute for
//! `cargo +nightly fuzz run`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Tokens that reach the decoders' deeper states: the same file libFuzzer gets
/// with `-dict=fuzz/mooncdc.dict`.
const DICT: &str = include_str!("../../mooncdc.dict");

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn usage() -> ExitCode {
    let names: Vec<_> = mooncdc_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    eprintln!(
        "usage: replay TARGET|all [--mutate SECONDS] [PATH...]\ntargets: {}",
        names.join(", ")
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(which) = args.next() else {
        return usage();
    };
    let mut mutate: Option<Duration> = None;
    let mut paths = Vec::new();
    while let Some(a) = args.next() {
        if a == "--mutate" {
            match args.next().and_then(|s| s.parse::<u64>().ok()) {
                Some(s) => mutate = Some(Duration::from_secs(s)),
                None => return usage(),
            }
        } else {
            paths.push(PathBuf::from(a));
        }
    }
    let targets: Vec<(&str, fn(&[u8]))> = mooncdc_fuzz::TARGETS
        .iter()
        .copied()
        .filter(|(n, _)| which == "all" || *n == which)
        .collect();
    if targets.is_empty() {
        return usage();
    }
    // Keep the panic message (the property that broke) but print it once, with
    // the input, instead of for every mutated input that trips it.
    std::panic::set_hook(Box::new(|info| {
        LAST_PANIC.with(|p| *p.borrow_mut() = info.to_string());
    }));

    let mut failed = false;
    for (name, f) in targets {
        let dirs = if paths.is_empty() {
            vec![
                fuzz_dir().join("seeds").join(name),
                fuzz_dir().join("corpus").join(name),
            ]
        } else {
            paths.clone()
        };
        let inputs = match load(&dirs) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("replay: {e}");
                return ExitCode::from(2);
            }
        };
        let mut crashes = 0usize;
        for (path, data) in &inputs {
            if let Some(msg) = run_one(f, data) {
                crashes += 1;
                report(name, &path.display().to_string(), data, &msg);
            }
        }
        eprintln!("{name}: {} inputs replayed, {crashes} failed", inputs.len());
        if let Some(budget) = mutate {
            crashes += mutate_for(name, f, &inputs, budget);
        }
        failed |= crashes > 0;
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Run a target on one input: the panic message if it panicked.
fn run_one(f: fn(&[u8]), data: &[u8]) -> Option<String> {
    match catch_unwind(AssertUnwindSafe(|| f(data))) {
        Ok(()) => None,
        Err(_) => Some(LAST_PANIC.with(|p| std::mem::take(&mut *p.borrow_mut()))),
    }
}

fn report(target: &str, origin: &str, data: &[u8], msg: &str) {
    eprintln!(
        "CRASH in {target} on {origin}\n  {msg}\n  input ({} bytes, hex): {}",
        data.len(),
        hex(data)
    );
    eprintln!("  input (lossy text): {:?}", String::from_utf8_lossy(data));
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file under the given files and folders (missing paths are skipped,
/// so a target with no corpus yet runs on nothing).
fn load(paths: &[PathBuf]) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    fn walk(p: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) -> std::io::Result<()> {
        if p.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(p)?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()?;
            entries.sort();
            for e in entries {
                walk(&e, out)?;
            }
        } else if p.is_file() {
            out.push((p.to_path_buf(), std::fs::read(p)?));
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        walk(p, &mut out)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------- blind mutation

/// xorshift64*: enough randomness for mutation, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// The tokens of a libFuzzer dictionary: `"..."` lines with `\\`, `\"`, `\xNN`.
fn dictionary() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for line in DICT.lines() {
        let line = line.trim();
        let (Some(start), Some(end)) = (line.find('"'), line.rfind('"')) else {
            continue;
        };
        if line.starts_with('#') || end <= start {
            continue;
        }
        let body = line[start + 1..end].as_bytes();
        let mut tok = Vec::new();
        let mut i = 0;
        while i < body.len() {
            match body[i] {
                b'\\' if body.get(i + 1) == Some(&b'x') && i + 3 < body.len() => {
                    let h = std::str::from_utf8(&body[i + 2..i + 4]).unwrap_or("00");
                    tok.push(u8::from_str_radix(h, 16).unwrap_or(0));
                    i += 4;
                }
                b'\\' if i + 1 < body.len() => {
                    tok.push(body[i + 1]);
                    i += 2;
                }
                b => {
                    tok.push(b);
                    i += 1;
                }
            }
        }
        out.push(tok);
    }
    out
}

fn mutate(rng: &mut Rng, pool: &[Vec<u8>], dict: &[Vec<u8>]) -> Vec<u8> {
    let mut d = pool[rng.below(pool.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let len = d.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                d[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                d[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                d.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                d.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let piece = d[i..i + n].to_vec();
                let at = rng.below(len + 1);
                d.splice(at..at, piece);
            }
            5 | 6 if !dict.is_empty() => {
                let tok = &dict[rng.below(dict.len())];
                let at = rng.below(len + 1);
                if rng.below(2) == 0 || len == 0 {
                    d.splice(at..at, tok.iter().copied());
                } else {
                    // Overwrite a run of the same length, to replace a token.
                    let end = (at + tok.len()).min(len);
                    d.splice(at..end, tok.iter().copied());
                }
            }
            _ if pool.len() > 1 => {
                let other = &pool[rng.below(pool.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                d.truncate(cut);
                d.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    d.truncate(1 << 16);
    d
}

fn mutate_for(name: &str, f: fn(&[u8]), inputs: &[(PathBuf, Vec<u8>)], budget: Duration) -> usize {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut rng = Rng(seed);
    let dict = dictionary();
    let mut pool: Vec<Vec<u8>> = inputs.iter().map(|(_, d)| d.clone()).collect();
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let deadline = Instant::now() + budget;
    let (mut runs, mut crashes) = (0u64, 0usize);
    let artifacts = fuzz_dir().join("artifacts").join(name);
    while Instant::now() < deadline {
        for _ in 0..256 {
            let d = mutate(&mut rng, &pool, &dict);
            runs += 1;
            if let Some(msg) = run_one(f, &d) {
                crashes += 1;
                let file = artifacts.join(format!("crash-{:016x}", fnv1a(&d)));
                let _ = std::fs::create_dir_all(&artifacts);
                let _ = std::fs::write(&file, &d);
                report(name, &file.display().to_string(), &d, &msg);
                if crashes >= 10 {
                    eprintln!("{name}: stopping after 10 failures");
                    return crashes;
                }
            } else if rng.below(64) == 0 && pool.len() < 4096 {
                // Without coverage feedback, keep a few mutants to drift further.
                pool.push(d);
            }
        }
    }
    eprintln!(
        "{name}: {runs} mutated inputs in {}s (seed {seed:#x}), {crashes} failed",
        budget.as_secs()
    );
    crashes
}

fn fnv1a(d: &[u8]) -> u64 {
    d.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
