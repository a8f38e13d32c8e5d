//! Inputs: files or standard input opened with their format detected,
//! schema files, cursors and limits from the common options.

use super::*;
use crate::error::{Error, Result};
use crate::wire::{detect, BatchStreamReader, InputFormat, Limits, SnapshotReader};
use std::path::Path;

/// One opened input, of the kind detected.
pub enum Input {
    Batches(BatchStreamReader<DynRead>),
    Snapshot(SnapshotReader<DynRead>),
}

/// The name used in messages for an input path (`-` is standard input).
pub fn input_name(path: Option<&Path>) -> String {
    match path {
        None => "<stdin>".to_string(),
        Some(p) if p == Path::new("-") => "<stdin>".to_string(),
        Some(p) => p.display().to_string(),
    }
}

/// Open a file (or standard input for `None` / `-`) and detect its format.
pub fn open_input(path: Option<&Path>, limits: Limits) -> Result<Input> {
    let name = input_name(path);
    let raw: Box<dyn std::io::Read + Send> = match path {
        Some(p) if p != Path::new("-") => {
            let mut f = std::fs::File::open(p)
                .map_err(|e| Error::io("cannot open input", e).in_file(&name))?;
            // A file with a SHA-256 sidecar (an archive's) is read only
            // when it is what was written (docs/TOOLS.md, "Archives").
            crate::destination::dir::sidecar::check(p, &mut f)?;
            Box::new(f)
        }
        _ => Box::new(std::io::stdin()),
    };
    let (format, reader) =
        detect(raw).map_err(|e| Error::io("cannot read input", e).in_file(&name))?;
    Ok(match format {
        InputFormat::BatchJsonl => Input::Batches(BatchStreamReader::jsonl(reader, name, limits)),
        InputFormat::BatchJson => Input::Batches(BatchStreamReader::json(reader, name, limits)?),
        InputFormat::SnapshotJsonl => Input::Snapshot(SnapshotReader::jsonl(reader, name, limits)),
        InputFormat::SnapshotJson => Input::Snapshot(SnapshotReader::json(reader, name, limits)?),
    })
}

/// Open an input that must be a batch stream.
pub fn open_batches(
    path: Option<&Path>,
    limits: Limits,
    tool: &str,
) -> Result<BatchStreamReader<DynRead>> {
    match open_input(path, limits)? {
        Input::Batches(b) => Ok(b),
        Input::Snapshot(s) => Err(Error::data(format!(
            "this is a snapshot; {tool} reads batch streams"
        ))
        .in_file(s.name())),
    }
}

/// Limits from the common options.
pub fn limits(a: &args::LimitArgs) -> Result<Limits> {
    Limits::new(a.max_line_bytes, a.max_input_bytes)
}

/// Schemas from a file: a snapshot (its header's schemas) or a JSON array of schemas.
pub fn load_schemas(path: &Path, limits: Limits) -> Result<Vec<crate::wire::Schema>> {
    let name = path.display().to_string();
    let text = std::fs::read(path)
        .map_err(|e| Error::io("cannot read the schema file", e).in_file(&name))?;
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let schemas: Vec<crate::wire::Schema> = serde_json::from_slice(&text)
            .map_err(|e| crate::wire::jsonl::json_error(e).in_file(&name))?;
        crate::wire::batch::shapes(&schemas).map_err(|e| e.in_file(&name))?;
        return Ok(schemas);
    }
    match open_input(Some(path), limits)? {
        Input::Snapshot(mut s) => match s.next_item()? {
            Some(crate::wire::SnapItem::Header { schemas, .. }) => Ok(schemas),
            _ => Err(Error::data("snapshot has no header").in_file(&name)),
        },
        Input::Batches(mut b) => match b.next_item()? {
            Some(crate::wire::Item::Header(h)) => h.schemas.ok_or_else(|| {
                Error::data("this batch's header carries no schemas").in_file(&name)
            }),
            _ => Err(Error::data("batch has no header").in_file(&name)),
        },
    }
}

/// A cursor from `--after` JSON text or `--after-file`.
pub fn cursor_arg(text: Option<&str>, file: Option<&Path>) -> Result<Option<crate::wire::Cursor>> {
    if let Some(t) = text {
        if t.trim().is_empty() {
            // Typically `--after "$(mooncdc-apply cursor …)"` on a target
            // that holds no cursor yet.
            return Err(Error::usage(
                "--after is empty: give a cursor as JSON, {\"source\":…,\"sequence\":…} (what mooncdc-apply cursor prints; a target without a cursor needs a snapshot first)",
            ));
        }
        return crate::wire::Cursor::parse_json(t.trim())
            .map(Some)
            .map_err(Error::usage);
    }
    if let Some(f) = file {
        let name = f.display().to_string();
        let t = std::fs::read_to_string(f)
            .map_err(|e| Error::io("cannot read the cursor file", e).in_file(&name))?;
        return crate::wire::Cursor::parse_json(t.trim())
            .map(Some)
            .map_err(|e| Error::data(e).in_file(&name));
    }
    Ok(None)
}
