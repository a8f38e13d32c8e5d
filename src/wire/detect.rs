//! Input format detection.
//!
//! A JSONL record always has a top-level `"kind"`; a JSON document never does
//! and names its format in `"format"`. The detector reads ahead at most the
//! first line (or 1 MiB of it), looks at the top-level members of the first
//! object, and hands back a reader that still yields every byte.

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use std::fmt;
use std::io::{BufRead, BufReader, Read};

/// The four inputs MoonCDC tools read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    BatchJsonl,
    BatchJson,
    SnapshotJsonl,
    SnapshotJson,
}

impl InputFormat {
    pub fn is_snapshot(self) -> bool {
        matches!(self, InputFormat::SnapshotJsonl | InputFormat::SnapshotJson)
    }
}

const PEEK: usize = 1 << 20;

/// What the first object's top-level members say.
#[derive(Default)]
struct Probe {
    kind: bool,
    format: Option<String>,
}

/// Records what it sees into the probe as it goes, so that a parse that
/// fails later (the peeked text ends, say) still tells what was seen.
struct ProbeVisitor<'a>(&'a mut Probe);

impl<'de> Visitor<'de> for ProbeVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key::<String>()? {
            match k.as_str() {
                "kind" => {
                    self.0.kind = true;
                    map.next_value::<IgnoredAny>()?;
                }
                "format" => self.0.format = Some(map.next_value::<String>()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Detect the format of `input`, returning it with a reader over all its bytes.
/// Anything that is not recognisably a JSON document is treated as JSONL, so
/// that the JSONL decoder reports the precise error.
pub fn detect<R: Read + Send + 'static>(
    mut input: R,
) -> std::io::Result<(InputFormat, Box<dyn BufRead + Send>)> {
    let mut head = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    while head.len() < PEEK && !head.contains(&b'\n') {
        let n = match input.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let first_line = match head.iter().position(|&b| b == b'\n') {
        Some(i) => &head[..i],
        None => &head[..],
    };
    let probe = probe(first_line);
    let format = match probe {
        Some(p) if p.kind => {
            if p.format.as_deref() == Some(super::snapshot::JSONL_FORMAT) {
                InputFormat::SnapshotJsonl
            } else {
                InputFormat::BatchJsonl
            }
        }
        Some(p) => match p.format.as_deref() {
            Some(super::snapshot::JSON_FORMAT) => InputFormat::SnapshotJson,
            Some(_) => InputFormat::BatchJson,
            // An object whose format was not in view: a pretty-printed
            // document, if it starts an object at all.
            None if starts_object(&head) && !single_line_object(first_line) => {
                probe_whole_head(&head)
            }
            None => InputFormat::BatchJsonl,
        },
        None => InputFormat::BatchJsonl,
    };
    let reader = BufReader::with_capacity(1 << 16, std::io::Cursor::new(head).chain(input));
    Ok((format, Box::new(reader)))
}

/// The top-level members seen in `text`; `None` if it does not start an object.
fn probe(text: &[u8]) -> Option<Probe> {
    if !starts_object(text) {
        return None;
    }
    let mut p = Probe::default();
    let mut de = serde_json::Deserializer::from_slice(text);
    let _ = de.deserialize_map(ProbeVisitor(&mut p));
    Some(p)
}

fn starts_object(b: &[u8]) -> bool {
    b.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{')
}

fn single_line_object(line: &[u8]) -> bool {
    serde_json::from_slice::<IgnoredAny>(line).is_ok()
}

/// A multi-line document: look at its members across the whole peeked text.
fn probe_whole_head(head: &[u8]) -> InputFormat {
    match probe(head).and_then(|p| p.format) {
        Some(f) if f == super::snapshot::JSON_FORMAT => InputFormat::SnapshotJson,
        _ => InputFormat::BatchJson,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt_of(s: &str) -> InputFormat {
        detect(std::io::Cursor::new(s.as_bytes().to_vec()))
            .unwrap()
            .0
    }

    #[test]
    fn detects_each_format() {
        assert_eq!(
            fmt_of("{\"kind\":\"header\",\"format\":\"mooncdc.jsonl.v1\"}\n"),
            InputFormat::BatchJsonl
        );
        assert_eq!(
            fmt_of("{\"format\":\"mooncdc.snapshot-jsonl.v1\",\"kind\":\"header\"}\n{}"),
            InputFormat::SnapshotJsonl
        );
        assert_eq!(
            fmt_of("{\"format\":\"mooncdc.batch.v1\",\"events\":[]}"),
            InputFormat::BatchJson
        );
        assert_eq!(
            fmt_of("{\n  \"format\": \"mooncdc.snapshot.v1\",\n  \"tables\": []\n}\n"),
            InputFormat::SnapshotJson
        );
        assert_eq!(fmt_of(""), InputFormat::BatchJsonl);
        assert_eq!(fmt_of("garbage\n"), InputFormat::BatchJsonl);
    }

    #[test]
    fn reader_yields_every_byte() {
        let text = "{\"kind\":\"header\"}\nsecond line\n";
        let (_, mut r) = detect(std::io::Cursor::new(text.as_bytes().to_vec())).unwrap();
        let mut all = String::new();
        r.read_to_string(&mut all).unwrap();
        assert_eq!(all, text);
    }
}
