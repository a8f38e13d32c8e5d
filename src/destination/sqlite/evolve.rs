//! Schema changes carried in the stream (`schema` records), applied to a
//! projection table in the batch's transaction.
//!
//! The table must hold the schema in force before the change (checked first:
//! names, order and key); then dropped columns are dropped, renamed ones
//! renamed (through temporary names, so swaps work), added ones added at the
//! end. A column whose nullability is relaxed (NOT NULL dropped at the
//! source) makes the table be rebuilt, since SQLite cannot drop a NOT NULL
//! in place. What a projection cannot follow fails before anything changes:
//! a new key, a reordering, a type whose affinity differs.

use super::*;

/// Bring `s.table` from `old` (the stream's schema in force before the
/// change; `None` when the table is new to the stream) to the change's
/// schema. Returns the table's SQL for the new schema.
pub(super) fn evolve_table(
    conn: &Connection,
    old: Option<&Schema>,
    c: &crate::wire::SchemaChange,
    kind: crate::wire::SourceKind,
) -> Result<TableSql> {
    let new = &c.schema;
    let t = &new.table;
    let Some(old) = old else {
        // A table the stream had not described: create it (or check it).
        return ensure_table(conn, new, kind, false);
    };
    let have = table_schema(conn, t)?;
    let names = |s: &Schema| s.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    if names(&have) == names(new) && have.key == new.key && names(old) != names(new) {
        // Already made (the change came again, as a merged stream may
        // bring it): nothing to do.
        return ensure_table(conn, new, kind, false);
    }
    if names(&have) != names(old) || have.key != old.key {
        return Err(Error::state(format!(
            "schema change of table {t:?}: the target table has columns {:?} and key {:?}, but the stream's schema before the change has columns {:?} and key {:?}; the target diverges from the source (give it a new snapshot)",
            names(&have),
            have.key,
            names(old),
            old.key
        )));
    }
    let cant = |what: String| {
        Error::state(format!(
            "schema change of table {t:?}: {what}, which a SQLite projection cannot follow in place; give the target a new snapshot of the table (docs/OPERATIONS.md, schema changes)"
        ))
    };
    let new_key: Vec<Option<&str>> = old.key.iter().map(|k| c.new_name(k)).collect();
    if new_key
        .iter()
        .map(|k| k.unwrap_or(""))
        .ne(new.key.iter().map(String::as_str))
    {
        return Err(cant(format!(
            "the key changes from {:?} to {:?}",
            old.key, new.key
        )));
    }
    // The order after dropping, renaming in place and adding at the end.
    let from = c.sources(old);
    let mut order: Vec<usize> = Vec::new();
    for (i, oc) in old.columns.iter().enumerate() {
        if c.new_name(&oc.name).is_some() {
            let j = from.iter().position(|f| *f == Some(i)).expect("kept");
            order.push(j);
        }
    }
    order.extend((0..new.columns.len()).filter(|j| from[*j].is_none()));
    if order.iter().copied().ne(0..new.columns.len()) {
        return Err(cant(format!(
            "the columns are reordered (to {:?})",
            names(new)
        )));
    }
    let mut rebuild = false;
    for (j, f) in from.iter().enumerate() {
        let Some(i) = *f else { continue };
        let (was, is) = (
            affinity(&have.columns[i].decl_type),
            affinity(&column_type(&new.columns[j].decl_type, kind)),
        );
        if !have.columns[i].decl_type.is_empty() && was != is {
            return Err(cant(format!(
                "column {:?} changes type from {:?} to {:?} (affinity {was:?} to {is:?})",
                new.columns[j].name, old.columns[i].decl_type, new.columns[j].decl_type
            )));
        }
        if !have.columns[i].nullable
            && new.columns[j].nullable
            && !new.key.contains(&new.columns[j].name)
        {
            rebuild = true;
        }
    }
    let q = quote_ident(t);
    let exec = |sql: String| {
        conn.execute_batch(&sql)
            .map_err(db_err("cannot change a target table's schema"))
    };
    for oc in &old.columns {
        if c.new_name(&oc.name).is_none() {
            exec(format!(
                "ALTER TABLE {q} DROP COLUMN {}",
                quote_ident(&oc.name)
            ))?;
        }
    }
    let temp = |i: usize| format!("{RESERVED_PREFIX}_rename_{i}");
    for (i, r) in c.renamed.iter().enumerate() {
        exec(format!(
            "ALTER TABLE {q} RENAME COLUMN {} TO {}",
            quote_ident(&r.from),
            quote_ident(&temp(i))
        ))?;
    }
    for (i, r) in c.renamed.iter().enumerate() {
        exec(format!(
            "ALTER TABLE {q} RENAME COLUMN {} TO {}",
            quote_ident(&temp(i)),
            quote_ident(&r.to)
        ))?;
    }
    for (j, nc) in new.columns.iter().enumerate() {
        if from[j].is_none() {
            exec(format!(
                "ALTER TABLE {q} ADD COLUMN {} {}",
                quote_ident(&nc.name),
                column_type(&nc.decl_type, kind)
            ))?;
        }
    }
    if rebuild {
        rebuild_relaxed(conn, new)?;
    }
    // The table now has the new schema's names, in order: check it and
    // build its SQL as for any header.
    ensure_table(conn, new, kind, false)
}

/// Recreate the table with NOT NULL kept only where the new schema keeps
/// it, copying every row as it is (same declared types, so no value changes
/// class).
fn rebuild_relaxed(conn: &Connection, new: &Schema) -> Result<()> {
    let have = table_schema(conn, &new.table)?;
    let q = quote_ident(&new.table);
    let tmp = quote_ident(&format!("{RESERVED_PREFIX}_rebuild"));
    let mut defs: Vec<String> = have
        .columns
        .iter()
        .zip(&new.columns)
        .map(|(h, n)| {
            let mut d = quote_ident(&h.name);
            if !h.decl_type.is_empty() {
                d.push(' ');
                d.push_str(&h.decl_type);
            }
            // NOT NULL stays only where the table had it and the new
            // schema keeps it (a column just added holds NULLs).
            if !n.nullable && !h.nullable {
                d.push_str(" NOT NULL");
            }
            d
        })
        .collect();
    defs.push(format!(
        "PRIMARY KEY ({})",
        have.key
            .iter()
            .map(|k| quote_ident(k))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let cols = have
        .columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect::<Vec<_>>()
        .join(", ");
    conn.execute_batch(&format!(
        "CREATE TABLE {tmp} ({}); INSERT INTO {tmp} ({cols}) SELECT {cols} FROM {q}; DROP TABLE {q}; ALTER TABLE {tmp} RENAME TO {q};",
        defs.join(", ")
    ))
    .map_err(db_err("cannot rebuild a target table to relax NOT NULL"))
}
