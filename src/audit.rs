//! Audit: compare a source's current rows with a target's projection, table
//! by table, in key order (docs/FORMAT.md §9), holding one row of each side at a time.
//!
//! Rows are compared exactly (storage class, bits, bytes) after the database
//! boundary's normalization (REAL zero is +0). Reported: rows missing from the
//! target, extra rows in the target, rows that differ, each with its key, and
//! both cursors. A target behind the source's high water is warned about:
//! differences may then be changes not yet applied.

use crate::destination::{AuditedTarget, PullRow, StoredShape};
use crate::error::{Error, Result};
use crate::source::Source;
use crate::wire::model::write_cursor;
use crate::wire::value::{key_cmp, write_json_str, write_row};
use crate::wire::{Cursor, Row, Schema, Value};
use std::cmp::Ordering;
use std::io::Write;

/// How findings are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuditFormat {
    #[default]
    Text,
    Jsonl,
}

/// Per-table totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableAudit {
    pub table: String,
    pub compared: u64,
    pub missing: u64,
    pub extra: u64,
    pub different: u64,
    /// The target's table has other columns than the source's: its rows were
    /// not compared.
    pub schema_differs: Option<String>,
}

/// The whole audit's result.
#[derive(Debug, Clone, Default)]
pub struct AuditReport {
    pub tables: Vec<TableAudit>,
    pub source_cursor: Option<Cursor>,
    pub target_cursor: Option<Cursor>,
}

impl AuditReport {
    pub fn equal(&self) -> bool {
        self.tables.iter().all(|t| {
            t.missing == 0 && t.extra == 0 && t.different == 0 && t.schema_differs.is_none()
        })
    }
}

struct Findings<'a> {
    out: &'a mut dyn Write,
    format: AuditFormat,
}

impl Findings<'_> {
    fn schema(&mut self, table: &str, message: &str) -> Result<()> {
        let mut b = Vec::new();
        match self.format {
            AuditFormat::Jsonl => {
                b.extend_from_slice(b"{\"kind\":\"schema\",\"table\":");
                write_json_str(&mut b, table);
                b.extend_from_slice(b",\"message\":");
                write_json_str(&mut b, message);
                b.extend_from_slice(b"}\n");
            }
            AuditFormat::Text => {
                b.extend_from_slice(b"schema differs: table ");
                write_json_str(&mut b, table);
                b.extend_from_slice(format!(": {message}\n").as_bytes());
            }
        }
        self.out
            .write_all(&b)
            .map_err(|e| Error::io("cannot write output", e))
    }

    fn row(
        &mut self,
        kind: &str,
        table: &str,
        key: &[Value],
        source: Option<&Row>,
        target: Option<&Row>,
    ) -> Result<()> {
        let mut b = Vec::with_capacity(256);
        match self.format {
            AuditFormat::Jsonl => {
                b.extend_from_slice(b"{\"kind\":");
                write_json_str(&mut b, kind);
                b.extend_from_slice(b",\"table\":");
                write_json_str(&mut b, table);
                b.extend_from_slice(b",\"key\":");
                write_row(&mut b, key);
                if let Some(r) = source {
                    b.extend_from_slice(b",\"source\":");
                    write_row(&mut b, r);
                }
                if let Some(r) = target {
                    b.extend_from_slice(b",\"target\":");
                    write_row(&mut b, r);
                }
                b.extend_from_slice(b"}\n");
            }
            AuditFormat::Text => {
                let what = match kind {
                    "missing" => "missing in target",
                    "extra" => "extra in target",
                    _ => "different",
                };
                b.extend_from_slice(format!("{what}: table ").as_bytes());
                write_json_str(&mut b, table);
                b.extend_from_slice(b" key ");
                write_row(&mut b, key);
                b.push(b'\n');
                if let Some(r) = source {
                    b.extend_from_slice(b"  source: ");
                    write_row(&mut b, r);
                    b.push(b'\n');
                }
                if let Some(r) = target {
                    b.extend_from_slice(b"  target: ");
                    write_row(&mut b, r);
                    b.push(b'\n');
                }
            }
        }
        self.out
            .write_all(&b)
            .map_err(|e| Error::io("cannot write output", e))
    }
}

/// Whether two rows hold the same values; `signed`: the sign of a REAL
/// zero counts (both sides keep it).
fn same_row(a: &[Value], b: &[Value], signed: bool) -> bool {
    a.len() == b.len()
        && (a.iter().zip(b)).all(|(x, y)| match signed {
            true => x.same(y),
            false => x.same_normalized(y),
        })
}

/// Rows of one source table in key order, pushed to a callback that returns
/// false to stop early.
pub type RowFeed<'a> = dyn FnMut(&mut dyn FnMut(Row) -> Result<bool>) -> Result<()> + 'a;

/// Merge-join one table: source rows arrive through `feed`, target rows are
/// pulled from the projection; one row of each side is held at a time.
fn compare_table(
    feed: &mut RowFeed<'_>,
    pull_row: &mut PullRow<'_>,
    s: &Schema,
    signed: bool,
    findings: &mut Findings<'_>,
    seen: &mut u64,
    progress: &mut dyn FnMut(u64),
) -> Result<TableAudit> {
    let mut t = TableAudit {
        table: s.table.clone(),
        ..Default::default()
    };
    let key = s.key_indices();
    // The merge-join is exact only while both sides come in key order
    // (`key_cmp`, docs/FORMAT.md §9): a side
    // whose keys go back is an error, never a list of rows reported
    // missing and extra that are not.
    let mut last_target: Option<Vec<Value>> = None;
    let mut pull = || -> Result<Option<(Vec<Value>, Row)>> {
        let Some(row) = pull_row()? else {
            return Ok(None);
        };
        let k: Vec<Value> = key.iter().map(|&i| row[i].clone()).collect();
        in_key_order("target", &s.table, last_target.as_deref(), &k)?;
        last_target = Some(k.clone());
        Ok(Some((k, row)))
    };
    let mut b = pull()?;
    let mut last_source: Option<Vec<Value>> = None;
    feed(&mut |row: Row| {
        let k: Vec<Value> = key.iter().map(|&i| row[i].clone()).collect();
        in_key_order("source", &s.table, last_source.as_deref(), &k)?;
        last_source = Some(k.clone());
        t.compared += 1;
        *seen += 1;
        if *seen % 65536 == 0 {
            progress(*seen);
        }
        loop {
            match b.take() {
                None => {
                    t.missing += 1;
                    findings.row("missing", &s.table, &k, Some(&row), None)?;
                    return Ok(true);
                }
                Some((tk, trow)) => match key_cmp(&k, &tk) {
                    Ordering::Less => {
                        t.missing += 1;
                        findings.row("missing", &s.table, &k, Some(&row), None)?;
                        b = Some((tk, trow));
                        return Ok(true);
                    }
                    Ordering::Greater => {
                        t.extra += 1;
                        findings.row("extra", &s.table, &tk, None, Some(&trow))?;
                        b = pull()?;
                    }
                    Ordering::Equal => {
                        if !same_row(&row, &trow, signed) {
                            t.different += 1;
                            findings.row("different", &s.table, &k, Some(&row), Some(&trow))?;
                        }
                        b = pull()?;
                        return Ok(true);
                    }
                },
            }
        }
    })?;
    while let Some((tk, trow)) = b.take() {
        t.extra += 1;
        findings.row("extra", &s.table, &tk, None, Some(&trow))?;
        b = pull()?;
    }
    Ok(t)
}

/// A side's next key must not sort before the one it sent last.
fn in_key_order(side: &str, table: &str, last: Option<&[Value]>, k: &[Value]) -> Result<()> {
    match last {
        Some(p) if key_cmp(k, p) == Ordering::Less => {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            write_row(&mut a, p);
            write_row(&mut b, k);
            Err(Error::state(format!(
                "table {table:?} cannot be audited: the {side}'s rows did not come in key order (key {} after {}), so rows would be reported missing and extra that are not; nothing was compared past that point (the two sides order this table's key differently: report it, with the key columns' types)",
                String::from_utf8_lossy(&b),
                String::from_utf8_lossy(&a)
            )))
        }
        _ => Ok(()),
    }
}

/// Compare a source with a target, table by table in key order. Returns the
/// report; the findings are written to `out` as they are found. Neither side
/// is changed: the source is read in one consistent view, the target in one
/// where it has them.
pub fn audit(
    source: &dyn Source,
    target: &mut dyn AuditedTarget,
    tables: &[String],
    format: AuditFormat,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<AuditReport> {
    target.begin_audit()?;
    let mut src = source.audit_rows(tables)?;
    let mut report = AuditReport {
        source_cursor: src.cursor(),
        target_cursor: target.cursor()?,
        ..Default::default()
    };
    // Positions of two different sources say nothing of each other: an
    // audit against the wrong slot or database would compare rows the
    // pipeline never promised to hold.
    if let (Some(s), Some(t)) = (&report.source_cursor, &report.target_cursor) {
        if s.source != t.source {
            return Err(Error::state(format!(
                "the target was filled from source {:?}, and this audit reads source {:?}: their positions say nothing of \
                 each other, so no verdict is given. Audit with the source the target's pipeline reads (PostgreSQL: its \
                 --slot and --publication)",
                t.source, s.source
            )));
        }
    }
    let kind = source.kind();
    let schemas = src.schemas();
    if schemas.is_empty() {
        return Err(Error::state(
            "the source has no table to compare (a PostgreSQL publication with no table, or the wrong --publication, \
             or a SQLite source that captures none): no verdict is given",
        ));
    }
    let mut findings = Findings { out, format };
    let mut seen = 0u64;
    let signed = target.keeps_zero_sign();
    for (i, s) in schemas.into_iter().enumerate() {
        let shape = target.table_shape(&s, kind)?;
        if let Some(msg) = schema_difference(shape.as_ref(), &s)? {
            findings.schema(&s.table, &msg)?;
            report.tables.push(TableAudit {
                table: s.table.clone(),
                schema_differs: Some(msg),
                ..Default::default()
            });
            continue;
        }
        let empty = shape.map(|s| s.empty_for_null).unwrap_or_default();
        let mut t = TableAudit::default();
        target.with_rows(&s, kind, &mut |pull| {
            t = compare_table(
                &mut |f| {
                    // A NULL the target holds as [] (its shape says where)
                    // is compared as [].
                    src.rows(i, &mut |mut row: Row| {
                        for &c in &empty {
                            if row[c].is_null() {
                                row[c] = Value::Text("{}".into());
                            }
                        }
                        f(row)
                    })
                },
                pull,
                &s,
                signed,
                &mut findings,
                &mut seen,
                progress,
            )?;
            Ok(())
        })?;
        report.tables.push(t);
    }
    progress(seen);
    Ok(report)
}

/// How the target's table differs in shape from the source's, if it does.
fn schema_difference(have: Option<&StoredShape>, s: &Schema) -> Result<Option<String>> {
    let want: Vec<String> = s.columns.iter().map(|c| c.name.clone()).collect();
    let Some(have) = have else {
        return Ok(None);
    };
    if have.columns != want || have.key.as_ref().is_some_and(|k| *k != s.key) {
        // Named apart from row differences: what is missing, what is extra,
        // and what looks like a rename (one gone, one new, in one place).
        let missing: Vec<&String> = want.iter().filter(|c| !have.columns.contains(c)).collect();
        let extra: Vec<&String> = have.columns.iter().filter(|c| !want.contains(c)).collect();
        let mut what = Vec::new();
        if !missing.is_empty() {
            what.push(format!("missing in the target: {missing:?}"));
        }
        if !extra.is_empty() {
            what.push(format!("only in the target: {extra:?}"));
        }
        if let ([m], [x]) = (&missing[..], &extra[..]) {
            if want.iter().position(|c| c == *m) == have.columns.iter().position(|c| c == *x) {
                what.push(format!(
                    "perhaps column {x:?} was renamed to {m:?} at the source"
                ));
            }
        }
        if missing.is_empty() && extra.is_empty() && have.columns != want {
            what.push("the same columns in another order".to_string());
        }
        if let Some(k) = have.key.as_ref().filter(|k| **k != s.key) {
            what.push(format!(
                "the key differs ({:?} at the source, {k:?} in the target)",
                s.key
            ));
        }
        return Ok(Some(format!(
            "{}; the source has columns {want:?} (key {:?}), the target {:?}{}",
            what.join("; "),
            s.key,
            have.columns,
            have.key
                .as_ref()
                .map_or(String::new(), |k| format!(" (key {k:?})"))
        )));
    }
    Ok(None)
}

/// Write the summary: per-table counts, both cursors, the verdict.
pub fn write_summary(report: &AuditReport, format: AuditFormat, out: &mut dyn Write) -> Result<()> {
    let mut b = Vec::new();
    let behind = match (&report.source_cursor, &report.target_cursor) {
        (Some(s), Some(t)) => t.source == s.source && t.sequence() < s.sequence(),
        (Some(s), None) => s.sequence() > 0,
        _ => false,
    };
    match format {
        AuditFormat::Jsonl => {
            for t in &report.tables {
                b.extend_from_slice(b"{\"kind\":\"table\",\"table\":");
                write_json_str(&mut b, &t.table);
                b.extend_from_slice(
                    format!(
                        ",\"compared\":{},\"missing\":{},\"extra\":{},\"different\":{},\"columns_differ\":{}}}\n",
                        t.compared, t.missing, t.extra, t.different, t.schema_differs.is_some()
                    )
                    .as_bytes(),
                );
            }
            b.extend_from_slice(b"{\"kind\":\"verdict\",\"equal\":");
            b.extend_from_slice(if report.equal() { b"true" } else { b"false" });
            b.extend_from_slice(b",\"source_cursor\":");
            match &report.source_cursor {
                Some(c) => write_cursor(&mut b, c),
                None => b.extend_from_slice(b"null"),
            }
            b.extend_from_slice(b",\"target_cursor\":");
            match &report.target_cursor {
                Some(c) => write_cursor(&mut b, c),
                None => b.extend_from_slice(b"null"),
            }
            b.extend_from_slice(if behind {
                b",\"target_behind\":true}\n"
            } else {
                b",\"target_behind\":false}\n"
            });
        }
        AuditFormat::Text => {
            for t in &report.tables {
                b.extend_from_slice(b"table ");
                write_json_str(&mut b, &t.table);
                let shape = if t.schema_differs.is_some() {
                    ", columns differ"
                } else {
                    ""
                };
                b.extend_from_slice(
                    format!(
                        ": {} compared, {} missing, {} extra, {} different{shape}\n",
                        crate::log::count(t.compared, "row", "rows"),
                        t.missing,
                        t.extra,
                        t.different
                    )
                    .as_bytes(),
                );
            }
            let c = |c: &Option<Cursor>| {
                c.as_ref()
                    .map_or("none".to_string(), |c| match c.position() {
                        Some(p) => format!("{} ({p})", c.to_json()),
                        None => c.to_json(),
                    })
            };
            b.extend_from_slice(
                format!("source cursor: {}\n", c(&report.source_cursor)).as_bytes(),
            );
            b.extend_from_slice(
                format!("target cursor: {}\n", c(&report.target_cursor)).as_bytes(),
            );
            // Only where it explains something: a PostgreSQL server writes
            // WAL of its own (checkpoints, other databases) past a caught-up
            // target's cursor, so "behind" alone is no doubt about "equal".
            if behind && !report.equal() {
                b.extend_from_slice(b"warning: the target is behind the source's high water; differences may be changes not yet applied\n");
            }
            b.extend_from_slice(if report.equal() {
                b"equal\n"
            } else {
                b"different\n"
            });
        }
    }
    out.write_all(&b)
        .map_err(|e| Error::io("cannot write output", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Column;

    fn run(source: Vec<i64>, target: Vec<i64>) -> Result<TableAudit> {
        let s = Schema {
            table: "t".into(),
            columns: vec![Column {
                name: "id".into(),
                decl_type: "INTEGER".into(),
                nullable: false,
            }],
            key: vec!["id".into()],
        };
        let mut out = Vec::new();
        let mut findings = Findings {
            out: &mut out,
            format: AuditFormat::Text,
        };
        let mut t = target.into_iter();
        let mut pull = || Ok(t.next().map(|k| vec![Value::Integer(k)]));
        let mut feed = |f: &mut dyn FnMut(Row) -> Result<bool>| {
            for k in &source {
                if !f(vec![Value::Integer(*k)])? {
                    break;
                }
            }
            Ok(())
        };
        compare_table(
            &mut feed,
            &mut pull,
            &s,
            false,
            &mut findings,
            &mut 0,
            &mut |_| {},
        )
    }

    #[test]
    fn a_side_out_of_key_order_is_an_error_not_differences() {
        let t = run(vec![1, 2, 3], vec![1, 3]).unwrap();
        assert_eq!((t.compared, t.missing, t.extra), (3, 1, 0));
        let e = run(vec![1, 2, 3], vec![1, 3, 2]).unwrap_err();
        assert!(
            e.message()
                .contains("target's rows did not come in key order"),
            "{}",
            e.message()
        );
        let e = run(vec![2, 1], vec![1, 2]).unwrap_err();
        assert!(
            e.message()
                .contains("source's rows did not come in key order"),
            "{}",
            e.message()
        );
    }
}
