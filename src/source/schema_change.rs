//! What a table's schema change was, from the schema before it and the one
//! after it, as `schema` records — or a refusal when the source cannot say
//! exactly.
//!
//! Two column lists alone do not say everything: a column gone and another
//! new in one change may be a rename or a drop and an add, and only the
//! source's record of the change (PostgreSQL's DDL trigger, SQLite's
//! `migrate` or its rewritten triggers) says which. Without one, such a
//! change fails closed. A column dropped and added again under the same name
//! moves to the end of the list and loses its values: it is carried as a
//! drop followed by an add. A type change is carried only when every value
//! keeps its exact text (integer widenings, longer or unbounded `varchar`,
//! more `numeric` digits with the same scale).

use crate::error::{Error, Result};
use crate::wire::{Rename, Schema, SchemaChange};

/// The records for `old` → `new`; `renamed` comes from the source's record
/// of the same change when there is one (`Some`, possibly empty: the change
/// is then known to rename exactly these columns). `fix` says how to make
/// such changes describable, for the refusal of an ambiguous one.
pub fn classify(
    old: &Schema,
    new: &Schema,
    renamed: Option<&[Rename]>,
    fix: &str,
) -> Result<Vec<SchemaChange>> {
    let t = &new.table;
    let told = renamed.is_some();
    let renamed = renamed.unwrap_or(&[]);
    let old_name = |n: &str| -> String {
        renamed
            .iter()
            .find(|r| r.to == n)
            .map_or(n.to_string(), |r| r.from.clone())
    };
    // Walk the new columns: one that was there before (under its old name),
    // after the last one matched and before any new column, kept its place;
    // any other is new (or added again after a drop).
    let mut at = 0usize;
    let mut adding = false;
    let mut kept: Vec<(usize, usize)> = Vec::new(); // (old index, new index)
    for (j, c) in new.columns.iter().enumerate() {
        let on = old_name(&c.name);
        match old.columns.iter().position(|o| o.name == on) {
            Some(i) if i >= at && !adding => {
                kept.push((i, j));
                at = i + 1;
            }
            _ => adding = true,
        }
    }
    let gone: Vec<&str> = old
        .columns
        .iter()
        .enumerate()
        .filter(|(i, _)| !kept.iter().any(|(k, _)| k == i))
        .map(|(_, c)| c.name.as_str())
        .collect();
    let added: Vec<&str> = new
        .columns
        .iter()
        .enumerate()
        .filter(|(j, _)| !kept.iter().any(|(_, k)| k == j))
        .map(|(_, c)| c.name.as_str())
        .collect();
    let readded: Vec<&str> = added.iter().copied().filter(|a| gone.contains(a)).collect();
    let truly_gone: Vec<&str> = gone
        .iter()
        .copied()
        .filter(|g| !readded.contains(g))
        .collect();
    let truly_added: Vec<&str> = added
        .iter()
        .copied()
        .filter(|a| !readded.contains(a))
        .collect();
    if !told && !truly_gone.is_empty() && !truly_added.is_empty() {
        return Err(Error::state(format!(
            "table {t:?}: columns {truly_gone:?} are gone and {truly_added:?} are new in one schema change; that may be a rename, which the source's record cannot tell from a drop and an add, so nothing of it was written. {fix}; to go on from here, give the targets a new snapshot (docs/OPERATIONS.md, schema changes)"
        )));
    }
    for &(i, j) in &kept {
        let (a, b) = (&old.columns[i].decl_type, &new.columns[j].decl_type);
        if !widening(a, b) {
            return Err(Error::state(format!(
                "table {t:?} column {:?}: its type changes from {a} to {b}, which would change stored values or their text; the targets cannot follow it in place, so nothing of it was written. Give the targets a new snapshot (docs/OPERATIONS.md, schema changes)",
                new.columns[j].name
            )));
        }
    }
    let mut out = Vec::new();
    if !readded.is_empty() {
        // Dropped first, then added again at the end (NULL for old rows).
        let mut mid = old.clone();
        mid.columns.retain(|c| !readded.contains(&c.name.as_str()));
        mid.key.retain(|k| !readded.contains(&k.as_str()));
        out.push(SchemaChange {
            schema: mid,
            renamed: Vec::new(),
        });
    }
    out.push(SchemaChange {
        schema: new.clone(),
        renamed: renamed.to_vec(),
    });
    Ok(out)
}

/// Whether a column of type `a` may become `b` with every value's text
/// unchanged.
pub fn widening(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let int_rank = |t: &str| match t {
        "smallint" => Some(1),
        "integer" => Some(2),
        "bigint" => Some(3),
        _ => None,
    };
    if let (Some(x), Some(y)) = (int_rank(a), int_rank(b)) {
        return x < y;
    }
    let varchar = |t: &str| -> Option<Option<u32>> {
        if t == "character varying" {
            return Some(None);
        }
        t.strip_prefix("character varying(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|n| n.parse().ok())
            .map(Some)
    };
    if let Some(Some(n)) = varchar(a) {
        return match varchar(b) {
            Some(Some(m)) => m >= n,
            Some(None) => true,
            None => b == "text",
        };
    }
    if varchar(a) == Some(None) {
        return b == "text";
    }
    let numeric = |t: &str| -> Option<(u32, u32)> {
        let r = t.strip_prefix("numeric(")?.strip_suffix(')')?;
        let (p, s) = r.split_once(',')?;
        Some((p.trim().parse().ok()?, s.trim().parse().ok()?))
    };
    if let (Some((p, s)), Some((q, r))) = (numeric(a), numeric(b)) {
        return s == r && q >= p;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Column;

    const FIX: &str =
        "To carry such changes, install the DDL trigger before them (mooncdc-capture init --ddl)";

    fn classify(
        old: &Schema,
        new: &Schema,
        renamed: Option<&[Rename]>,
    ) -> Result<Vec<SchemaChange>> {
        super::classify(old, new, renamed, FIX)
    }

    fn s(cols: &[(&str, &str)]) -> Schema {
        Schema {
            table: "public.t".into(),
            columns: cols
                .iter()
                .map(|(n, t)| Column {
                    name: n.to_string(),
                    decl_type: t.to_string(),
                    nullable: *n != "id",
                })
                .collect(),
            key: vec!["id".into()],
        }
    }

    #[test]
    fn adds_drops_and_widenings_are_carried() {
        let old = s(&[("id", "integer"), ("a", "text"), ("b", "integer")]);
        let add = s(&[
            ("id", "integer"),
            ("a", "text"),
            ("b", "integer"),
            ("c", "text"),
        ]);
        assert_eq!(classify(&old, &add, None).unwrap().len(), 1);
        let drop = s(&[("id", "integer"), ("b", "integer")]);
        assert_eq!(classify(&old, &drop, None).unwrap().len(), 1);
        let widen = s(&[("id", "bigint"), ("a", "text"), ("b", "bigint")]);
        assert_eq!(classify(&old, &widen, None).unwrap().len(), 1);
    }

    #[test]
    fn ambiguous_and_narrowing_changes_fail_closed() {
        let old = s(&[("id", "integer"), ("a", "text"), ("b", "integer")]);
        let renamed = s(&[("id", "integer"), ("c", "text"), ("b", "integer")]);
        let e = classify(&old, &renamed, None).unwrap_err().to_string();
        assert!(e.contains("may be a rename") && e.contains("--ddl"), "{e}");
        let r = [Rename {
            from: "a".into(),
            to: "c".into(),
        }];
        let ok = classify(&old, &renamed, Some(&r)).unwrap();
        assert_eq!(ok[0].renamed, r);
        let narrow = s(&[("id", "integer"), ("a", "text"), ("b", "smallint")]);
        let e = classify(&old, &narrow, None).unwrap_err().to_string();
        assert!(e.contains("from integer to smallint"), "{e}");
    }

    #[test]
    fn a_column_dropped_and_added_again_is_two_records() {
        let old = s(&[("id", "integer"), ("a", "text"), ("b", "integer")]);
        let new = s(&[("id", "integer"), ("b", "integer"), ("a", "text")]);
        let r = classify(&old, &new, None).unwrap();
        assert_eq!(r.len(), 2);
        let names: Vec<&str> = r[0]
            .schema
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["id", "b"]);
    }

    #[test]
    fn widenings() {
        for (a, b) in [
            ("smallint", "integer"),
            ("integer", "bigint"),
            ("character varying(5)", "character varying(9)"),
            ("character varying(5)", "text"),
            ("character varying(5)", "character varying"),
            ("numeric(5,2)", "numeric(9,2)"),
        ] {
            assert!(widening(a, b), "{a} -> {b}");
        }
        for (a, b) in [
            ("bigint", "integer"),
            ("integer", "text"),
            ("real", "double precision"),
            ("character varying(9)", "character varying(5)"),
            ("numeric(5,2)", "numeric(9,3)"),
            ("text", "character varying(5)"),
        ] {
            assert!(!widening(a, b), "{a} -> {b}");
        }
    }
}
