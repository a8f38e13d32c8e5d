//! How two events on one row fold into one (the table in compact.rs), on
//! their canonical lines: a folded line is written from pieces of the two.

use super::*;

/// An event to compact: its canonical line (without the newline) and where
/// its parts are in it.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent<'a> {
    pub line: &'a [u8],
    pub meta: EventMeta,
}

pub(super) fn part(line: &[u8], (a, b): (usize, usize)) -> &[u8] {
    &line[a..b]
}

impl<'a> RawEvent<'a> {
    pub(super) fn table(&self) -> &'a [u8] {
        part(self.line, self.meta.table_json)
    }
    pub(super) fn before(&self) -> Option<&'a [u8]> {
        self.meta.before_at.map(|s| part(self.line, s))
    }
    pub(super) fn after(&self) -> Option<&'a [u8]> {
        self.meta.after_at.map(|s| part(self.line, s))
    }
}

pub(super) enum Fold {
    /// Into one event of this operation: the first's before image (if it
    /// has one) and the second's after image (if it has one).
    Into(Operation),
    Vanish,
    No,
}

pub(super) fn fold(a: RawEvent<'_>, b: RawEvent<'_>) -> Fold {
    use Operation::*;
    // A key-only old row follows whatever came before on its key.
    let follows =
        || b.meta.key_only || matches!((b.before(), a.after()), (Some(x), Some(y)) if x == y);
    match (a.meta.operation, b.meta.operation) {
        (Insert, Update) if follows() => Fold::Into(Insert),
        (Insert, Delete) if follows() => Fold::Vanish,
        (Update, Update) if follows() => Fold::Into(Update),
        (Update, Delete) if follows() => Fold::Into(Delete),
        (Delete, Insert) => Fold::Into(Update),
        _ => Fold::No,
    }
}

/// Write the line of `a` and `b` folded into one `op` event (the sequence
/// of `b`, the before image of `a`, the after image of `b`, as the
/// operation has them) into `out`, newline included; its parts' places.
/// The same bytes as `write_event_line` of that event.
pub(super) fn write_folded(
    out: &mut Vec<u8>,
    op: Operation,
    a: RawEvent<'_>,
    b: RawEvent<'_>,
) -> EventMeta {
    out.clear();
    out.extend_from_slice(EVENT_LINE_PREFIX);
    out.extend_from_slice(b"{\"sequence\":");
    write_seq(out, b.meta.sequence);
    out.extend_from_slice(b",\"table\":");
    let t0 = out.len();
    out.extend_from_slice(b.table());
    let table_json = (t0, out.len());
    let table = if escaped(&b.meta) {
        (t0, t0)
    } else {
        (t0 + 1, out.len() - 1)
    };
    out.extend_from_slice(b",\"operation\":\"");
    out.extend_from_slice(op.as_str().as_bytes());
    out.push(b'"');
    let image = |out: &mut Vec<u8>, name: &[u8], img: Option<&[u8]>| {
        img.map(|img| {
            out.extend_from_slice(name);
            let start = out.len();
            out.extend_from_slice(img);
            (start, out.len())
        })
    };
    let key_only = op != Operation::Insert && a.meta.key_only;
    let (before, before_at) = match op {
        Operation::Insert => (None, None),
        _ if key_only => (a.meta.before, image(out, b",\"before_key\":", a.before())),
        _ => (a.meta.before, image(out, b",\"before\":", a.before())),
    };
    let mut filled = Vec::new();
    let b_after = match (b.after(), a.after()) {
        (Some(new), Some(old)) if b.meta.unchanged => {
            fill_unchanged(new, old, &mut filled);
            Some(&filled[..])
        }
        (new, _) => new,
    };
    let (after, after_at) = match op {
        Operation::Delete => (None, None),
        _ => (b.meta.after, image(out, b",\"after\":", b_after)),
    };
    let unchanged =
        after_at.is_some_and(|s| memchr::memmem::find(part(out, s), UNCHANGED).is_some());
    out.extend_from_slice(b"}}");
    let meta = EventMeta {
        sequence: b.meta.sequence,
        operation: op,
        table,
        table_json,
        before,
        after,
        key_only,
        unchanged,
        before_at,
        after_at,
    };
    debug_assert_eq!(
        event_spans(out),
        Some(meta),
        "a folded line scans as written"
    );
    out.push(b'\n');
    meta
}

/// An unchanged value's spelling: inside a JSON string a `"` is escaped,
/// so these bytes in a canonical image are always this value.
pub(super) const UNCHANGED: &[u8] = b"[\"unchanged\"]";

/// `new` (a canonical after image) into `out` with each unchanged value
/// replaced by the value at its place in `old` (the image before it on the
/// same row, which may hold an unchanged value there too).
fn fill_unchanged(new: &[u8], old: &[u8], out: &mut Vec<u8>) {
    let (mut n, mut o) = (Vec::new(), Vec::new());
    let spans = value_spans(new, &mut n).and(value_spans(old, &mut o));
    if spans.is_none() || n.len() != o.len() {
        // Images of different widths: nothing is filled (a schema record
        // between them ends a run, so this is a stream's own mistake).
        out.extend_from_slice(new);
        return;
    }
    out.push(b'[');
    for (i, (&nv, &ov)) in n.iter().zip(&o).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let v = part(new, nv);
        out.extend_from_slice(if v == UNCHANGED { part(old, ov) } else { v });
    }
    out.push(b']');
}

/// An event line for the compactor: `line` (canonical, without its
/// newline) as a raw event, or `None` for a line the fast scan declines
/// (a truncate, another spelling).
pub(super) fn raw(line: &[u8]) -> Option<RawEvent<'_>> {
    event_spans(line).map(|meta| RawEvent { line, meta })
}

/// A built event (not a truncate) encoded into `buf` as a raw event; an
/// error for an event no stream may hold (images that do not fit its
/// operation, sequence 0), which only a library caller can give.
pub(super) fn encoded<'a>(buf: &'a mut Vec<u8>, e: &Event) -> Result<RawEvent<'a>> {
    e.check_images().map_err(Error::data)?;
    buf.clear();
    write_event_line(buf, e);
    buf.pop();
    Ok(raw(buf).expect("an encoded event with fitting images is canonical"))
}

/// Whether an event's table name has escapes (its `table` range is then
/// empty while its JSON string holds more than the quotes).
pub(super) fn escaped(m: &EventMeta) -> bool {
    m.table.0 == m.table.1 && m.table_json.1 - m.table_json.0 > 2
}

/// The table name of a raw event.
pub(super) fn table_name(e: &RawEvent<'_>) -> Result<String> {
    if !escaped(&e.meta) {
        return Ok(String::from_utf8_lossy(part(e.line, e.meta.table)).into_owned());
    }
    serde_json::from_slice(e.table())
        .map_err(|err| Error::data(format!("an event's table name is unreadable: {err}")))
}
