//! Which columns a schema change renamed, so that the stream can say it
//! (a `schema` record's `renamed`) instead of a drop and an add.
//!
//! Two exact sources: SQLite rewrites a trigger's column names when a column
//! is renamed, so capture's insert trigger, read before `upgrade` drops it,
//! names each captured column's current name in its old place; and `migrate`
//! runs the application's SQL one statement at a time, and an `ALTER TABLE`
//! statement does one thing, so a statement after which exactly one column
//! has another name in the same place renamed it. What is known is stored
//! with the new table version (`renamed:<tid>` in `_mooncdc_meta`); a version
//! without it (its trigger was gone) has unknown renames, and the read
//! refuses a change that could hide one.

use super::*;
use crate::wire::Rename;

/// Renames by table, composed in order (a→b then b→c is a→c).
#[derive(Debug, Default, Clone)]
pub(super) struct Renames(pub(super) HashMap<String, Vec<Rename>>);

impl Renames {
    pub(super) fn add(&mut self, table: &str, from: &str, to: &str) {
        let list = self.0.entry(table.to_string()).or_default();
        match list.iter_mut().find(|r| r.to == from) {
            Some(r) => r.to = to.to_string(),
            None => list.push(Rename {
                from: from.to_string(),
                to: to.to_string(),
            }),
        }
        list.retain(|r| r.from != r.to);
    }
}

/// The names the insert trigger of `tv` uses now, in the version's column
/// order (`None` when the trigger is gone or not ours).
pub(super) fn trigger_names(conn: &Connection, tv: &TableVersion) -> Result<Option<Vec<String>>> {
    let sql: Option<String> = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = ?1",
            [format!("_mooncdc_{}_ins", tv.tid)],
            |r| r.get(0),
        )
        .optional()
        .map_err(db_err("cannot read a capture trigger"))?;
    let Some(sql) = sql else { return Ok(None) };
    let mut names = Vec::new();
    let b = sql.as_bytes();
    let mut i = 0;
    while let Some(at) = sql[i..].find("NEW.") {
        let mut j = i + at + 4;
        let (open, close) = match b.get(j) {
            Some(b'"') => (b'"', b'"'),
            Some(b'`') => (b'`', b'`'),
            Some(b'[') => (b'[', b']'),
            _ => (0, 0),
        };
        let mut name = Vec::new();
        if open == 0 {
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
                name.push(b[j]);
                j += 1;
            }
        } else {
            j += 1;
            loop {
                match b.get(j) {
                    None => return Ok(None),
                    Some(&c) if c == close => {
                        if close != b']' && b.get(j + 1) == Some(&close) {
                            name.push(c);
                            j += 2;
                        } else {
                            j += 1;
                            break;
                        }
                    }
                    Some(&c) => {
                        name.push(c);
                        j += 1;
                    }
                }
            }
        }
        names.push(
            String::from_utf8(name)
                .map_err(|_| Error::data("a trigger names a column in invalid UTF-8"))?,
        );
        i = j;
    }
    Ok((names.len() == tv.schema.columns.len()).then_some(names))
}

/// The columns of a table now, by position (empty when it does not exist).
fn column_names(conn: &Connection, table: &str) -> Result<Vec<String>> {
    let mut st = conn
        .prepare_cached("SELECT name FROM pragma_table_xinfo(?1) WHERE hidden = 0 ORDER BY cid")
        .map_err(db_err("cannot read a table's columns"))?;
    let v = st
        .query_map([table], |r| r.get::<_, String>(0))
        .map_err(db_err("cannot read a table's columns"))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(db_err("cannot read a table's columns"))?;
    Ok(v)
}

/// Run `sql` one statement at a time, noting each statement that renamed a
/// column of one of `tables`.
pub(super) fn run_noting_renames(
    conn: &Connection,
    sql: &str,
    tables: &[String],
    renames: &mut Renames,
) -> Result<()> {
    let failed = |e| Error::database("the migration failed; nothing of it was kept", e);
    // Columns a statement dropped: added again by a later one, the new
    // column would look like the old to capture (same name, same place at
    // the end), which would keep the old values in every target.
    let mut dropped: HashMap<String, Vec<String>> = HashMap::new();
    let mut batch = rusqlite::Batch::new(conn, sql);
    while let Some(mut st) = batch.next().map_err(failed)? {
        let before: Vec<Vec<String>> = tables
            .iter()
            .map(|t| column_names(conn, t))
            .collect::<Result<_>>()?;
        let mut rows = st.raw_query();
        while rows.next().map_err(failed)?.is_some() {}
        drop(rows);
        for (t, b) in tables.iter().zip(&before) {
            let a = column_names(conn, t)?;
            if a.is_empty() {
                continue;
            }
            if a.len() < b.len() {
                for gone in b.iter().filter(|n| !a.contains(n)) {
                    dropped.entry(t.clone()).or_default().push(gone.clone());
                }
            }
            if let Some(again) = a
                .iter()
                .find(|n| !b.contains(n) && dropped.get(t).is_some_and(|d| d.contains(n)))
            {
                return Err(Error::state(format!(
                    "the migration drops column {again:?} of table {t:?} and adds it again; capture would see the same column and targets would keep its old values: run the drop and the add as two migrations; nothing of it was kept"
                )));
            }
            if a.len() != b.len() {
                continue;
            }
            let differ: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            if let [i] = differ[..] {
                if !b.contains(&a[i]) {
                    renames.add(t, &b[i], &a[i]);
                }
            }
        }
    }
    Ok(())
}

/// Store what is known of a new version's renames.
pub(super) fn store(conn: &Connection, tid: i64, renamed: &[Rename]) -> Result<()> {
    let list: Vec<serde_json::Value> = renamed
        .iter()
        .map(|r| serde_json::json!({"from": r.from, "to": r.to}))
        .collect();
    meta_set(
        conn,
        &format!("renamed:{tid}"),
        &serde_json::Value::Array(list).to_string(),
    )
}

/// What is known of a version's renames (`None`: unknown).
pub(super) fn stored(conn: &Connection, tid: i64) -> Result<Option<Vec<Rename>>> {
    match meta_get(conn, &format!("renamed:{tid}"))? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::data(format!("capture metadata renamed:{tid} is unreadable: {e}"))),
    }
}
