//! What an archive folder holds, read from its files: their intervals (from
//! their names), the cursor (the end of the last file) and the schemas in
//! force there.

use super::DirConfig;
use crate::error::{Error, Result};
use crate::wire::model::parse_sequence;
use crate::wire::{BatchStreamReader, Cursor, Item, Limits, Schema, Sequence};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The hidden prefix of the archive's temporary files and its lock.
pub(super) const HIDDEN: &str = ".mooncdc-archive";

/// A batch file of the archive, with the interval its name gives.
#[derive(Debug, Clone)]
pub(super) struct ArchiveFile {
    pub path: PathBuf,
    pub start: Sequence,
    pub end: Sequence,
}

/// The name of the file holding `start` to `end`: split's names, so an
/// archive `mooncdc-split --output-dir` made is one too.
pub(super) fn name(prefix: &str, start: Sequence, end: Sequence) -> String {
    format!("{prefix}-{start}-{end}.jsonl")
}

pub(super) fn interval(prefix: &str, name: &str) -> Option<(Sequence, Sequence)> {
    let rest = name
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .strip_suffix(".jsonl")?;
    let (s, e) = rest.split_once('-')?;
    let (s, e) = (parse_sequence(s).ok()?, parse_sequence(e).ok()?);
    (s <= e).then_some((s, e))
}

/// The folder's entries, `[]` when it does not exist.
pub(super) fn entries(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    let name = dir.display().to_string();
    match std::fs::read_dir(dir) {
        Ok(it) => it
            .map(|e| e.map_err(|e| Error::io("cannot list the archive", e).in_file(&name)))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io("cannot list the archive", e).in_file(&name)),
    }
}

/// The file that ends last (of two that end at the same place, the one
/// that starts later: an empty batch written after the other).
pub(super) fn last_file(c: &DirConfig) -> Result<Option<ArchiveFile>> {
    Ok(last_of(&entries(&c.path)?, &c.prefix))
}

/// [`last_file`] among entries already listed.
pub(super) fn last_of(entries: &[std::fs::DirEntry], prefix: &str) -> Option<ArchiveFile> {
    let mut last: Option<ArchiveFile> = None;
    for e in entries {
        let Some((start, end)) = e.file_name().to_str().and_then(|n| interval(prefix, n)) else {
            continue;
        };
        if last
            .as_ref()
            .is_none_or(|l| (end, start) > (l.end, l.start))
        {
            last = Some(ArchiveFile {
                path: e.path(),
                start,
                end,
            });
        }
    }
    last
}

/// The cursor the archive holds: the end of its last file, read from that
/// file's commit line (the name has no source). Read-only.
pub(super) fn read_cursor(c: &DirConfig) -> Result<Option<Cursor>> {
    match last_file(c)? {
        Some(f) => end_of(&f, &mut open(&f.path)?).map(Some),
        None => Ok(None),
    }
}

pub(super) fn open(path: &Path) -> Result<std::fs::File> {
    std::fs::File::open(path)
        .map_err(|e| Error::io("cannot open", e).in_file(&path.display().to_string()))
}

/// The end cursor of `f`: its last line, a commit line whose end is the
/// one its name says.
pub(super) fn end_of(f: &ArchiveFile, file: &mut std::fs::File) -> Result<Cursor> {
    let name = f.path.display().to_string();
    let io = |e| Error::io("cannot read", e).in_file(&name);
    let len = file.metadata().map_err(io)?.len();
    let from = len.saturating_sub(1 << 16);
    file.seek(SeekFrom::Start(from)).map_err(io)?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).map_err(io)?;
    let not_whole = || {
        Error::data(format!(
            "this archive file does not end with the commit line of a batch ending at {}: it is not whole, or was changed after it was written; move it out of the archive (the archive then ends at the file before it)",
            f.end
        ))
        .in_file(&name)
    };
    let body = tail.strip_suffix(b"\n").ok_or_else(not_whole)?;
    let last = match memchr::memrchr(b'\n', body) {
        Some(i) => &body[i + 1..],
        None => body,
    };
    #[derive(serde::Deserialize)]
    struct CommitLine {
        kind: String,
        end: Cursor,
    }
    match serde_json::from_slice::<CommitLine>(last) {
        Ok(c) if c.kind == "commit" && c.end.sequence() == f.end => Ok(c.end),
        _ => Err(not_whole()),
    }
}

/// The schemas in force at the end of `f` (its last header's, with the
/// schema records after it), read through the stream reader, which checks
/// the whole file.
pub(super) fn schemas_at_end(f: &ArchiveFile) -> Result<Option<Vec<Schema>>> {
    let name = f.path.display().to_string();
    let file = open(&f.path)?;
    let mut r = BatchStreamReader::jsonl(
        std::io::BufReader::with_capacity(1 << 16, file),
        name,
        // Written here, under whatever line limit the apply had.
        Limits::new(Some(u64::MAX), None)?,
    );
    let mut schemas = None;
    while let Some(item) = r.next_item()? {
        match item {
            Item::Header(h) => schemas = h.schemas,
            Item::Schema(c) => {
                if let Some(s) = schemas.as_mut() {
                    crate::wire::put_in_force(s, &mut vec![c]);
                }
            }
            Item::Event(_) | Item::Message(_) | Item::Commit(_) => {}
        }
    }
    Ok(schemas)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_give_intervals_of_their_prefix_only() {
        use super::interval;
        assert_eq!(interval("batch", "batch-0-12.jsonl"), Some((0, 12)));
        assert_eq!(interval("batch", "batch-5-5.jsonl"), Some((5, 5)));
        assert_eq!(interval("batch", "batch-9-5.jsonl"), None);
        assert_eq!(interval("batch", "batch-x-1-2.jsonl"), None);
        assert_eq!(interval("batch", "batch-01-2.jsonl"), None);
        assert_eq!(interval("batch", "batch-1-2.jsonl.sha256"), None);
        assert_eq!(interval("batch", "users-1-2.jsonl"), None);
        assert_eq!(interval("a-b", "a-b-3-4.jsonl"), Some((3, 4)));
        assert_eq!(super::name("batch", 3, 40), "batch-3-40.jsonl");
    }
}
