//! Compaction of events already built (a batch's `Vec<Event>`), through
//! the same folds as the stream's lines.

use super::*;

/// Compact a batch in memory (for tests and library users).
pub fn compact_events(events: Vec<Event>, schemas: &[Schema]) -> Result<Vec<Event>> {
    let sh = shapes(schemas)?;
    let mut c = Compactor::new(HOLD_LIMIT_BYTES);
    let mut lines: Vec<u8> = Vec::new();
    let mut write = |l: &[u8]| {
        lines.extend_from_slice(l);
        Ok(())
    };
    // Events before their table's last truncate are emptied by it.
    let last: HashMap<&str, usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.operation.is_truncate())
        .map(|(i, e)| (e.table.as_str(), i))
        .collect();
    let mut buf = Vec::new();
    let mut name = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if last.get(e.table.as_str()).is_some_and(|&t| i < t) {
            continue;
        }
        if e.operation.is_truncate() {
            buf.clear();
            write_event_line(&mut buf, e);
            name.clear();
            write_json_str(&mut name, &e.table);
            c.push_truncate(&name, &buf, &mut write)?;
            continue;
        }
        let shape = sh
            .get(&e.table)
            .ok_or_else(|| Error::data(format!("no schema for table {:?}", e.table)))?;
        if let Some(k) = &e.before_key {
            if k.len() != shape.key.len() {
                return Err(Error::data(format!(
                    "event {} has {} key values but table {:?} has {} key columns",
                    e.sequence,
                    k.len(),
                    e.table,
                    shape.key.len()
                )));
            }
        }
        for img in [&e.before, &e.after].into_iter().flatten() {
            if img.len() != shape.width {
                return Err(Error::data(format!(
                    "event {} has {} values but table {:?} has {} columns",
                    e.sequence,
                    img.len(),
                    e.table,
                    shape.width
                )));
            }
        }
        c.push(encoded(&mut buf, e)?, shape, &mut write)?;
    }
    c.finish(&mut write)?;
    lines
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            crate::wire::jsonl::parse_record(l)
                .and_then(crate::wire::batch::batch_item)
                .map(|item| match item {
                    Item::Event(e) => e,
                    _ => unreachable!("the compactor writes events"),
                })
        })
        .collect()
}
