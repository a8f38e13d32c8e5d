//! One target table: creating or extending it from a stream's schema, and
//! writing events to it with image checks.

use super::*;

pub(super) struct TableSql {
    pub(super) schema: Schema,
    /// The target columns' affinities, by position.
    pub(super) affinity: Vec<Affinity>,
    pub(super) key: Vec<usize>,
    pub(super) insert: String,
    pub(super) replace: String,
    pub(super) select: String,
    pub(super) update: String,
    pub(super) delete: String,
    pub(super) truncate: String,
}

impl TableSql {
    pub(super) fn new(schema: Schema, affinity: Vec<Affinity>) -> Self {
        let t = quote_ident(&schema.table);
        let cols: Vec<String> = schema
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect();
        let n = cols.len();
        let key = schema.key_indices();
        let marks: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
        let key_where = |first: usize| {
            key.iter()
                .enumerate()
                .map(|(j, &i)| format!("{} = ?{}", cols[i], first + j))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        let sets: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ?{}", i + 1))
            .collect();
        TableSql {
            insert: format!(
                "INSERT INTO {t}({}) VALUES ({})",
                cols.join(", "),
                marks.join(", ")
            ),
            replace: format!(
                "INSERT OR REPLACE INTO {t}({}) VALUES ({})",
                cols.join(", "),
                marks.join(", ")
            ),
            select: format!("SELECT {} FROM {t} WHERE {}", cols.join(", "), key_where(1)),
            update: format!(
                "UPDATE {t} SET {} WHERE {}",
                sets.join(", "),
                key_where(n + 1)
            ),
            delete: format!("DELETE FROM {t} WHERE {}", key_where(1)),
            truncate: format!("DELETE FROM {t}"),
            key,
            schema,
            affinity,
        }
    }

    /// Refuse a row whose values the target columns' affinities would turn
    /// into another class (a TEXT `'123'` under NUMERIC affinity, say): the
    /// projection would differ from the source without a word.
    pub(super) fn check_classes(&self, row: &[Value], at: &dyn Fn() -> String) -> Result<()> {
        for (i, v) in row.iter().enumerate() {
            let a = self.affinity.get(i).copied().unwrap_or(Affinity::Blob);
            if !keeps_class(a, v) {
                return Err(Error::data(format!(
                    "{}: table {:?} column {:?} has {} affinity in the target, which would store this {} value as another class; recreate that target table with the column declared without a type",
                    at(),
                    self.schema.table,
                    self.schema.columns[i].name,
                    format!("{a:?}").to_uppercase(),
                    v.class_name()
                )));
            }
        }
        Ok(())
    }

    pub(super) fn key_of<'a>(&self, row: &'a [Value]) -> Vec<&'a Value> {
        self.key.iter().map(|&i| &row[i]).collect()
    }

    /// The key of the row an update or delete changes: its whole before
    /// image's, or its `before_key`.
    pub(super) fn old_key<'a>(&self, e: &'a Event) -> Vec<&'a Value> {
        e.old_key(&self.key)
            .expect("an update or delete with a checked before image")
    }
}

/// An after image with its unchanged values taken from the stored row
/// (`None` when it has none to fill).
pub(super) fn fill(after: Option<&Row>, stored: &[Value]) -> Option<Row> {
    let after = after.filter(|a| a.iter().any(Value::is_unchanged))?;
    Some(
        (after.iter().zip(stored))
            .map(|(v, s)| {
                if v.is_unchanged() {
                    s.clone()
                } else {
                    v.clone()
                }
            })
            .collect(),
    )
}

/// A key as the messages show it: its values in their wire spelling.
pub(super) fn show_key(key: &[&Value]) -> String {
    let row: Row = key.iter().map(|v| (*v).clone()).collect();
    let mut out = Vec::new();
    crate::wire::value::write_row(&mut out, &row);
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn same_row(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_normalized(y))
}

pub(super) fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

/// Create the table if missing; add trailing columns the stream has and the
/// table lacks; with `drop`, drop the columns the table has and the stream's
/// schema lacks when that is all that differs (a pure drop,
/// [`crate::destination::HeaderShape`]); refuse any other difference.
/// Returns the table's SQL for the stream's schema, with the target
/// columns' affinities.
pub(super) fn ensure_table(
    conn: &Connection,
    s: &Schema,
    kind: crate::wire::SourceKind,
    drop: bool,
) -> Result<TableSql> {
    if s.key.is_empty() {
        return Err(Error::data(format!(
            "table {:?} has no key; a SQLite projection identifies rows by their key",
            s.table
        )));
    }
    if s.table.starts_with(RESERVED_PREFIX) {
        return Err(Error::data(format!(
            "table name {:?} is reserved for MoonCDC",
            s.table
        )));
    }
    if !table_exists(conn, &s.table)? {
        let mut defs: Vec<String> = s
            .columns
            .iter()
            .map(|c| {
                let ty = column_type(&c.decl_type, kind);
                let mut d = quote_ident(&c.name);
                if !ty.is_empty() {
                    d.push(' ');
                    d.push_str(&ty);
                }
                if !c.nullable {
                    d.push_str(" NOT NULL");
                }
                d
            })
            .collect();
        defs.push(format!(
            "PRIMARY KEY ({})",
            s.key
                .iter()
                .map(|k| quote_ident(k))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        conn.execute_batch(&format!(
            "CREATE TABLE {} ({})",
            quote_ident(&s.table),
            defs.join(", ")
        ))
        .map_err(db_err("cannot create a target table"))?;
        let affinity = s
            .columns
            .iter()
            .map(|c| affinity(&column_type(&c.decl_type, kind)))
            .collect();
        return Ok(TableSql::new(s.clone(), affinity));
    }
    let mut have = table_schema(conn, &s.table)?;
    let names = |sc: &Schema| {
        sc.columns
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let hn = names(&have);
    let hr: Vec<&str> = hn.iter().map(String::as_str).collect();
    let shape = crate::destination::HeaderShape::of(&hr, Some(&have.key), s);
    if let (crate::destination::HeaderShape::Dropped(gone), true) = (&shape, drop) {
        // Columns dropped at the source while no capture was reading: the
        // header says so as plainly as a schema record would.
        for &i in gone {
            conn.execute_batch(&format!(
                "ALTER TABLE {} DROP COLUMN {}",
                quote_ident(&s.table),
                quote_ident(&hn[i])
            ))
            .map_err(db_err("cannot drop a column of a target table"))?;
        }
        have = table_schema(conn, &s.table)?;
    }
    let (hn, sn) = (names(&have), names(s));
    if have.key != s.key || hn.len() > sn.len() || hn[..] != sn[..hn.len()] {
        return Err(Error::state(format!(
            "target table {:?} has columns {:?} and key {:?}, but the stream's schema has columns {:?} and key {:?}; the stream does not say how one became the other (a column renamed or moved, or one dropped and another added, while no capture was reading, say): change the target table the same way and apply again, or give it a new snapshot (docs/OPERATIONS.md, schema changes)",
            s.table, hn, have.key, sn, s.key
        )));
    }
    let mut affinities: Vec<Affinity> = have
        .columns
        .iter()
        .map(|c| affinity(&c.decl_type))
        .collect();
    for c in &s.columns[hn.len()..] {
        let ty = column_type(&c.decl_type, kind);
        conn.execute_batch(&format!(
            "ALTER TABLE {} ADD COLUMN {} {}",
            quote_ident(&s.table),
            quote_ident(&c.name),
            ty
        ))
        .map_err(db_err("cannot add a column to a target table"))?;
        affinities.push(affinity(&ty));
    }
    Ok(TableSql::new(s.clone(), affinities))
}

/// Apply the existing-rows policy to a table a snapshot is about to load.
pub(super) fn empty_or_replace(
    conn: &Connection,
    table: &str,
    existing: ExistingRows,
) -> Result<()> {
    let q = quote_ident(table);
    match existing {
        ExistingRows::Keep => {}
        ExistingRows::Replace => {
            conn.execute(&format!("DELETE FROM {q}"), [])
                .map_err(db_err("cannot empty a target table"))?;
        }
        ExistingRows::Refuse => {
            let held: bool = conn
                .query_row(&format!("SELECT EXISTS (SELECT 1 FROM {q})"), [], |r| {
                    r.get(0)
                })
                .map_err(db_err("cannot read a target table"))?;
            if held {
                return Err(crate::destination::existing_rows_error(table));
            }
        }
    }
    Ok(())
}

pub(super) fn existing_table(conn: &Connection, table: &str) -> Result<TableSql> {
    if !table_exists(conn, table)? {
        return Err(Error::data(format!(
            "table {table:?} is not in the target and the stream carries no schema for it"
        )));
    }
    let s = table_schema(conn, table)?;
    let affinity = s.columns.iter().map(|c| affinity(&c.decl_type)).collect();
    Ok(TableSql::new(s, affinity))
}

pub(super) fn insert_row(
    conn: &Connection,
    t: &TableSql,
    sql: &str,
    row: &Row,
    seq: Option<u128>,
) -> Result<()> {
    insert_rows(conn, t, sql, [(row, seq)])
}

/// Insert rows (each with its event's sequence, `None` for a snapshot row)
/// with one look-up of the prepared statement.
pub(super) fn insert_rows<'a>(
    conn: &Connection,
    t: &TableSql,
    sql: &str,
    rows: impl IntoIterator<Item = (&'a Row, Option<u128>)>,
) -> Result<()> {
    let mut st = conn
        .prepare_cached(sql)
        .map_err(db_err("cannot prepare an insert"))?;
    for (row, seq) in rows {
        st.execute(params_from_iter(row.iter().map(Bind))).map_err(|e| {
            let at = match seq {
                Some(s) => format!("event {s}"),
                None => "snapshot row".to_string(),
            };
            if is_constraint(&e) {
                Error::state(format!(
                    "{at}: insert into table {:?} of a key the target already holds, or a value its constraints refuse; the target diverges from the source (--on-conflict overwrite forces it)",
                    t.schema.table
                ))
                .with_source(e)
            } else {
                Error::database(format!("{at}: cannot insert into table {:?}", t.schema.table), e)
            }
        })?;
    }
    Ok(())
}

pub(super) fn stored_row(conn: &Connection, t: &TableSql, key: &[&Value]) -> Result<Option<Row>> {
    let mut st = conn
        .prepare_cached(&t.select)
        .map_err(db_err("cannot prepare a lookup"))?;
    let n = t.schema.columns.len();
    st.query_row(params_from_iter(key.iter().map(|v| Bind(v))), |r| {
        Ok(row_values(r, 0, n))
    })
    .optional()
    .map_err(db_err("cannot look up a row"))?
    .transpose()
    .map_err(|e| Error::data(format!("stored row of table {:?}: {e}", t.schema.table)))
}

/// What applying an event did.
pub(super) enum Applied {
    Done,
    /// A key-changing update whose new key another row still holds (legal
    /// mid-transaction under a deferred key, e.g. a swap): the old row is gone
    /// and the new one waits until its key is free.
    Parked(Row),
}

pub(super) fn apply_event(
    conn: &Connection,
    t: &TableSql,
    e: &Event,
    on_conflict: OnConflict,
) -> Result<Applied> {
    let diverge = |what: &str| {
        Error::state(format!(
            "event {} ({} on table {:?}): {what}; the target diverges from the source (--on-conflict overwrite forces it)",
            e.sequence,
            e.operation.as_str(),
            e.table
        ))
    };
    match (e.operation, on_conflict) {
        // Emptied in the batch's transaction, like every other change.
        (Operation::Truncate { .. }, _) => {
            conn.prepare_cached(&t.truncate)
                .and_then(|mut st| st.execute([]))
                .map_err(db_err("cannot empty a table for a truncate"))?;
            Ok(Applied::Done)
        }
        (Operation::Insert, OnConflict::Error) => insert_row(
            conn,
            t,
            &t.insert,
            e.after.as_ref().expect("insert"),
            Some(e.sequence),
        )
        .map(|_| Applied::Done),
        (Operation::Insert, OnConflict::Overwrite) => insert_row(
            conn,
            t,
            &t.replace,
            e.after.as_ref().expect("insert"),
            Some(e.sequence),
        )
        .map(|_| Applied::Done),
        (Operation::Update | Operation::Delete, OnConflict::Error) => {
            let key = t.old_key(e);
            let stored = match stored_row(conn, t, &key)? {
                None if e.before.is_none() => {
                    return Err(diverge(&format!(
                    "no stored row has the old key {} (the change names the row by its key alone)",
                    show_key(&key)
                )))
                }
                None => return Err(diverge("no stored row has the before image's key")),
                Some(row) if e.before.as_ref().is_some_and(|b| !same_row(&row, b)) => {
                    return Err(diverge("the stored row differs from the before image"))
                }
                Some(row) => row,
            };
            let filled = fill(e.after.as_ref(), &stored);
            match filled.as_ref().or(e.after.as_ref()) {
                None => {
                    let mut st = conn
                        .prepare_cached(&t.delete)
                        .map_err(db_err("cannot prepare a delete"))?;
                    st.execute(params_from_iter(key.iter().map(|v| Bind(v))))
                        .map_err(db_err("cannot delete a row"))?;
                }
                Some(after) => {
                    let key_changes = t.key_of(after).iter().zip(&key).any(|(a, b)| !a.same(b));
                    let mut st = conn
                        .prepare_cached(&t.update)
                        .map_err(db_err("cannot prepare an update"))?;
                    let binds = after.iter().chain(key.iter().copied()).map(Bind);
                    match st.execute(params_from_iter(binds)) {
                        Ok(_) => {}
                        Err(err)
                            if is_constraint(&err)
                                && key_changes
                                && stored_row(conn, t, &t.key_of(after))?.is_some() =>
                        {
                            let mut del = conn
                                .prepare_cached(&t.delete)
                                .map_err(db_err("cannot prepare a delete"))?;
                            del.execute(params_from_iter(key.iter().map(|v| Bind(v))))
                                .map_err(db_err("cannot delete a row"))?;
                            return Ok(Applied::Parked(after.clone()));
                        }
                        Err(err) if is_constraint(&err) => {
                            return Err(diverge("a constraint refuses the new row").with_source(err))
                        }
                        Err(err) => return Err(Error::database("cannot update a row", err)),
                    }
                }
            }
            Ok(Applied::Done)
        }
        (Operation::Update | Operation::Delete, OnConflict::Overwrite) => {
            let key = t.old_key(e);
            let filled = match e.has_unchanged() {
                false => None,
                true => match stored_row(conn, t, &key)? {
                    Some(stored) => fill(e.after.as_ref(), &stored),
                    None => {
                        return Err(Error::state(format!(
                            "event {} (update on table {:?}): no stored row has the old key {}, so its unchanged values cannot be filled; \
                             the target does not hold the row the source changed (take a new snapshot)",
                            e.sequence,
                            e.table,
                            show_key(&key)
                        )))
                    }
                },
            };
            let mut st = conn
                .prepare_cached(&t.delete)
                .map_err(db_err("cannot prepare a delete"))?;
            st.execute(params_from_iter(key.iter().map(|v| Bind(v))))
                .map_err(db_err("cannot delete a row"))?;
            if let Some(after) = filled.as_ref().or(e.after.as_ref()) {
                insert_row(conn, t, &t.replace, after, Some(e.sequence))?;
            }
            Ok(Applied::Done)
        }
    }
}

/// Insert parked rows whose keys are free now; keep the others.
pub(super) fn retry_parked(
    conn: &Connection,
    tables: &HashMap<String, TableSql>,
    parked: &mut Vec<(String, Row, u128)>,
) -> Result<()> {
    let mut i = 0;
    while i < parked.len() {
        let (table, row, _) = &parked[i];
        let t = &tables[table];
        if stored_row(conn, t, &t.key_of(row))?.is_none() {
            insert_row(conn, t, &t.insert, row, Some(parked[i].2))?;
            parked.swap_remove(i);
        } else {
            i += 1;
        }
    }
    Ok(())
}
