//! The SHA-256 sidecar of an archive file: `FILE.sha256` beside `FILE`,
//! one line as `sha256sum` writes it (`<64 hex digits>  <name>`), so
//! `sha256sum -c *.sha256` checks an archive too. Every tool that reads a
//! file with a sidecar checks it first ([`check`]), so a file damaged in
//! storage is named instead of replayed (docs/TOOLS.md, "Archives").

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The sidecar's path: the file's with `.sha256` added.
pub fn path_of(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".sha256");
    PathBuf::from(p)
}

/// The SHA-256 of what `r` holds from where it is, in hex.
pub fn digest(r: &mut dyn Read) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(hex::encode(h.finalize())),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The sidecar's line for a file named `name` whose digest is `hex`.
pub fn line(hex: &str, name: &str) -> String {
    format!("{hex}  {name}\n")
}

/// When `path` has a sidecar, check that `file` (opened from `path`, read
/// from its start) has the digest it records, and rewind `file`; without a
/// sidecar, nothing is checked. A mismatch is a data error naming the file.
pub fn check(path: &Path, file: &mut std::fs::File) -> Result<()> {
    let side = path_of(path);
    let side_name = side.display().to_string();
    let text = match std::fs::File::open(&side) {
        Ok(f) => {
            let mut t = Vec::new();
            // A sidecar is one short line; more is not a sidecar.
            f.take(4096)
                .read_to_end(&mut t)
                .map_err(|e| Error::io("cannot read the SHA-256 sidecar", e).in_file(&side_name))?;
            t
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("cannot open the SHA-256 sidecar", e).in_file(&side_name)),
    };
    let recorded = std::str::from_utf8(&text)
        .ok()
        .and_then(|t| t.split_whitespace().next())
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| {
            Error::data(
                "not a SHA-256 sidecar: it should hold 64 hex digits, two spaces and the file's name (as sha256sum writes)",
            )
            .in_file(&side_name)
        })?;
    let name = path.display().to_string();
    let got = digest(file).map_err(|e| Error::io("cannot read input", e).in_file(&name))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io("cannot read input", e).in_file(&name))?;
    if got != recorded {
        return Err(Error::data(format!(
            "the file's SHA-256 is {got} but its sidecar {side_name} records {recorded}: it was changed or damaged after it was written, so it is not read; restore it from a copy (or, when the change is known to be right, write a new sidecar with sha256sum)"
        ))
        .in_file(&name));
    }
    Ok(())
}
