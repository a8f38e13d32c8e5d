//! Installing and keeping capture current: the change log, the table
//! versions, the triggers; `init`, `verify`, `upgrade`.

use super::*;

pub(super) fn log_width(conn: &Connection) -> Result<usize> {
    let n: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM pragma_table_info('{LOG}') WHERE name GLOB 'v[0-9]*'"),
            [],
            |r| r.get(0),
        )
        .map_err(db_err("cannot read the change log"))?;
    Ok(n as usize)
}

/// The widest table capture takes: the log holds `seq`, `tid`, `op` and two
/// values a column (old and new), within SQLite's default limit of 2000
/// columns a table.
pub const MAX_CAPTURED_COLUMNS: usize = (2000 - 3) / 2;

/// Make the log wide enough for `schema` (two values a column).
pub(super) fn widen_log(conn: &Connection, schema: &Schema) -> Result<()> {
    let n = schema.columns.len();
    if n > MAX_CAPTURED_COLUMNS {
        return Err(Error::data(format!(
            "table {:?} has {n} columns; SQLite capture takes tables of at most {MAX_CAPTURED_COLUMNS} columns (its change log holds two values a column, within SQLite's limit of 2000); leave it out of capture (init --table names the tables to capture)",
            schema.table
        )));
    }
    let needed = 2 * n;
    let have = log_width(conn)?;
    for i in have..needed {
        conn.execute_batch(&format!("ALTER TABLE {LOG} ADD COLUMN v{i}"))
            .map_err(db_err("cannot widen the change log"))?;
    }
    Ok(())
}

pub(super) fn schema_json(s: &Schema) -> String {
    let mut out = Vec::new();
    write_schema(&mut out, s);
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// The trigger statements for one table version, exactly as `verify` expects them.
pub fn trigger_sql(tv: &TableVersion) -> [(String, String); 3] {
    let t = quote_ident(&tv.schema.table);
    let n = tv.schema.columns.len();
    let before_cols: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    let after_cols: Vec<String> = (n..2 * n).map(|i| format!("v{i}")).collect();
    let old: Vec<String> = tv
        .schema
        .columns
        .iter()
        .map(|c| format!("OLD.{}", quote_ident(&c.name)))
        .collect();
    let new: Vec<String> = tv
        .schema
        .columns
        .iter()
        .map(|c| format!("NEW.{}", quote_ident(&c.name)))
        .collect();
    let tid = tv.tid;
    let name = |op: &str| format!("_mooncdc_{tid}_{op}");
    [
        (
            name("ins"),
            format!(
                "CREATE TRIGGER {} AFTER INSERT ON {t} BEGIN INSERT INTO {LOG}(tid, op, {}) VALUES ({tid}, 1, {}); END",
                quote_ident(&name("ins")),
                after_cols.join(", "),
                new.join(", ")
            ),
        ),
        (
            name("upd"),
            format!(
                "CREATE TRIGGER {} AFTER UPDATE ON {t} BEGIN INSERT INTO {LOG}(tid, op, {}, {}) VALUES ({tid}, 2, {}, {}); END",
                quote_ident(&name("upd")),
                before_cols.join(", "),
                after_cols.join(", "),
                old.join(", "),
                new.join(", ")
            ),
        ),
        (
            name("del"),
            format!(
                "CREATE TRIGGER {} AFTER DELETE ON {t} BEGIN INSERT INTO {LOG}(tid, op, {}) VALUES ({tid}, 3, {}); END",
                quote_ident(&name("del")),
                before_cols.join(", "),
                old.join(", ")
            ),
        ),
    ]
}

/// Record a table version and install its triggers. `replaces`: it takes
/// over from an older version (a schema change): a marker row in the log
/// (`op` 4) is the point where it does, so that the read says the change
/// there (schema records) and a position at or after it has the new shape.
/// A version's takeover position is noted as `since:<tid>`.
pub(super) fn install_version(
    conn: &Connection,
    schema: Schema,
    replaces: bool,
) -> Result<TableVersion> {
    conn.execute(
        &format!("INSERT INTO {TABLES}(name, schema, current) VALUES (?1, ?2, 1)"),
        params![schema.table, schema_json(&schema)],
    )
    .map_err(db_err("cannot record the captured table"))?;
    let tv = TableVersion {
        tid: conn.last_insert_rowid(),
        schema,
        current: true,
    };
    let since = if replaces {
        conn.execute(
            &format!("INSERT INTO {LOG}(tid, op) VALUES (?1, {MARKER_OP})"),
            [tv.tid],
        )
        .map_err(db_err("cannot log the schema change"))?;
        conn.last_insert_rowid().max(0) as Sequence
    } else {
        high_water(conn)?
    };
    meta_set(conn, &format!("since:{}", tv.tid), &since.to_string())?;
    widen_log(conn, &tv.schema)?;
    for (_, sql) in trigger_sql(&tv) {
        conn.execute_batch(&sql)
            .map_err(db_err("cannot create a capture trigger"))?;
    }
    Ok(tv)
}

/// The log's `op` of a schema-change marker.
pub(super) const MARKER_OP: i64 = 4;

pub(super) fn drop_triggers(conn: &Connection, tid: i64) -> Result<()> {
    for op in ["ins", "upd", "del"] {
        conn.execute_batch(&format!(
            "DROP TRIGGER IF EXISTS {}",
            quote_ident(&format!("_mooncdc_{tid}_{op}"))
        ))
        .map_err(db_err("cannot drop a capture trigger"))?;
    }
    Ok(())
}

/// Install capture (or add tables to it). With no tables named, every user
/// table not yet captured. Returns the tables newly captured.
pub fn init(path: &Path, tables: &[String]) -> Result<Vec<String>> {
    let mut conn = open_existing(path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err("cannot begin a transaction"))?;
    let added = init_in(&tx, tables)?;
    tx.commit().map_err(db_err("cannot commit"))?;
    Ok(added)
}

/// [`init`] inside the caller's write transaction.
pub(super) fn init_in(tx: &Connection, tables: &[String]) -> Result<Vec<String>> {
    if !is_installed(tx)? {
        tx.execute_batch(&format!(
            "CREATE TABLE {META}(key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE {TABLES}(tid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, schema TEXT NOT NULL, current INTEGER NOT NULL);
             CREATE TABLE {LOG}(seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, op INTEGER NOT NULL);"
        ))
        .map_err(db_err("cannot create the capture tables"))?;
        meta_set(tx, "identity", &format!("sqlite:{}", random_uuid()?))?;
        meta_set(tx, "version", &CAPTURE_VERSION.to_string())?;
        meta_set(tx, "acknowledged", "0")?;
    }
    let captured = current_tables(tx)?;
    let wanted: Vec<String> = if tables.is_empty() {
        user_tables(tx)?
    } else {
        for t in tables {
            if t.starts_with(RESERVED_PREFIX) {
                return Err(Error::usage(format!(
                    "table {t:?} belongs to MoonCDC and cannot be captured"
                )));
            }
        }
        tables.to_vec()
    };
    let mut added = Vec::new();
    for name in wanted {
        if captured.contains_key(&name) {
            continue;
        }
        let schema = table_schema(tx, &name)?;
        install_version(tx, schema, false)?;
        added.push(name);
    }
    Ok(added)
}

/// Differences between the installed capture and what it should be; empty when current.
pub fn verify(path: &Path) -> Result<Vec<String>> {
    let conn = open_existing(path)?;
    require_installed(&conn, path)?;
    drift_in(&conn)
}

/// What differs from what this version would install, read on `conn` (in
/// the caller's transaction).
pub(super) fn drift_in(conn: &Connection) -> Result<Vec<String>> {
    let mut drift = Vec::new();
    let version = meta_get(conn, "version")?.unwrap_or_default();
    if version != CAPTURE_VERSION.to_string() {
        drift.push(format!(
            "capture version is {version:?}, this build installs {CAPTURE_VERSION} (run upgrade)"
        ));
    }
    let mut st = conn
        .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_mooncdc\\_%' ESCAPE '\\'")
        .map_err(db_err("cannot read triggers"))?;
    let mut installed: HashMap<String, String> = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(db_err("cannot read triggers"))?
        .collect::<std::result::Result<_, _>>()
        .map_err(db_err("cannot read triggers"))?;
    for (name, tv) in current_tables(conn)? {
        if !crate::sqlite_util::table_exists(conn, &name)? {
            drift.push(format!(
                "table {name:?} no longer exists (dropped or renamed; run upgrade to stop capturing it)"
            ));
            continue;
        }
        match table_schema(conn, &name) {
            Ok(now) if now != tv.schema => drift.push(format!(
                "table {name:?} changed since capture was installed (columns or key differ; run upgrade)"
            )),
            Ok(_) => {}
            Err(e) => drift.push(format!("table {name:?}: {}", e.full_message())),
        }
        for (tname, sql) in trigger_sql(&tv) {
            match installed.remove(&tname) {
                None => drift.push(format!(
                    "trigger {tname} of table {name:?} is missing (run upgrade)"
                )),
                Some(s) if s != sql => drift.push(format!(
                    "trigger {tname} of table {name:?} was altered (run upgrade)"
                )),
                Some(_) => {}
            }
        }
    }
    for (tname, _) in installed {
        drift.push(format!(
            "trigger {tname} does not belong to the current capture (run upgrade)"
        ));
    }
    Ok(drift)
}

/// Rebuild triggers for the current schemas and version. Changed tables get a
/// new version; their unacknowledged changes keep decoding with the old one.
/// Returns a line per action taken.
pub fn upgrade(path: &Path) -> Result<Vec<String>> {
    upgrade_with(path, None)
}

/// Run the application's schema change `sql` and rebuild capture for it in
/// one transaction: no change is ever logged with a stale column list, and
/// `DROP COLUMN` works (no trigger names the column while it runs). The SQL
/// must only change schemas: rows it changed would not be captured, so a
/// migration that changes rows is refused and nothing of it is kept.
pub fn migrate(path: &Path, sql: &str) -> Result<Vec<String>> {
    upgrade_with(path, Some(sql))
}

fn upgrade_with(path: &Path, migration: Option<&str>) -> Result<Vec<String>> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err("cannot begin a transaction"))?;
    let mut actions = Vec::new();
    // Columns renamed since capture last looked: the triggers SQLite rewrote
    // name them (read before they are dropped).
    let mut renames = super::renames::Renames::default();
    let mut known: HashMap<String, bool> = HashMap::new();
    let captured = current_tables(&tx)?;
    for (name, tv) in &captured {
        let names = super::renames::trigger_names(&tx, tv)?;
        known.insert(name.clone(), names.is_some());
        for (c, n) in tv.schema.columns.iter().zip(names.iter().flatten()) {
            if &c.name != n {
                renames.add(name, &c.name, n);
            }
        }
    }
    // Drop every MoonCDC trigger, then install the current ones.
    let names: Vec<String> = {
        let mut st = tx
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_mooncdc\\_%' ESCAPE '\\'")
            .map_err(db_err("cannot read triggers"))?;
        let v = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(db_err("cannot read triggers"))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(db_err("cannot read triggers"))?;
        v
    };
    for n in names {
        tx.execute_batch(&format!("DROP TRIGGER {}", quote_ident(&n)))
            .map_err(db_err("cannot drop a trigger"))?;
    }
    // The application's schema change, with no trigger in its way.
    if let Some(sql) = migration {
        let before = tx.total_changes();
        let tables: Vec<String> = captured.keys().cloned().collect();
        super::renames::run_noting_renames(&tx, sql, &tables, &mut renames)?;
        let changed = tx.total_changes() - before;
        if changed > 0 {
            return Err(Error::state(format!(
                "the migration changed {changed} rows, which capture would not log; migrate runs schema changes only (run data changes after it, where capture logs them); nothing of it was kept"
            )));
        }
        actions.push("migration run".into());
    }
    // With no trigger naming it, the log can be rebuilt.
    if rebuild_v1_log(&tx)? {
        actions.push("change log rebuilt without AUTOINCREMENT (capture version 2)".into());
    }
    for (name, tv) in current_tables(&tx)? {
        if !crate::sqlite_util::table_exists(&tx, &name)? {
            // Dropped (or renamed): stop capturing it. Its logged changes
            // still decode with their version.
            tx.execute(
                &format!("UPDATE {TABLES} SET current = 0 WHERE tid = ?1"),
                [tv.tid],
            )
            .map_err(db_err("cannot retire a table version"))?;
            actions.push(format!(
                "table {name:?} no longer exists: no longer captured (capture a renamed table with init --table)"
            ));
            continue;
        }
        let now = table_schema(&tx, &name)?;
        if now == tv.schema {
            drop_triggers(&tx, tv.tid)?;
            widen_log(&tx, &tv.schema)?;
            for (_, sql) in trigger_sql(&tv) {
                tx.execute_batch(&sql)
                    .map_err(db_err("cannot create a capture trigger"))?;
            }
        } else {
            tx.execute(
                &format!("UPDATE {TABLES} SET current = 0 WHERE tid = ?1"),
                [tv.tid],
            )
            .map_err(db_err("cannot retire a table version"))?;
            let nv = install_version(&tx, now, true)?;
            let renamed = renames.0.get(&name).cloned().unwrap_or_default();
            if known.get(&name).copied().unwrap_or(false) {
                super::renames::store(&tx, nv.tid, &renamed)?;
            }
            for r in &renamed {
                actions.push(format!(
                    "table {name:?}: column {:?} renamed to {:?}",
                    r.from, r.to
                ));
            }
            let synced = log_added_columns(&tx, &tv.schema, &nv, &renamed)?;
            actions.push(format!(
                "table {name:?}: schema changed, now captured as version {} (earlier changes keep version {}){}",
                nv.tid,
                tv.tid,
                if synced > 0 {
                    format!("; {synced} rows logged with their values in the added columns")
                } else {
                    String::new()
                }
            ));
        }
    }
    meta_set(&tx, "version", &CAPTURE_VERSION.to_string())?;
    tx.commit().map_err(db_err("cannot commit"))?;
    actions.push("triggers rebuilt".into());
    Ok(actions)
}

/// SQLite lets a non-INTEGER primary key of a rowid table hold NULL; such a
/// row cannot be identified, so it is refused where it is read.
pub(super) fn null_key(s: &Schema, row: &[crate::wire::Value]) -> std::result::Result<(), String> {
    for (k, i) in s.key.iter().zip(s.key_indices()) {
        if row[i].is_null() {
            return Err(format!(
                "primary key column {k:?} is NULL (SQLite allows that in rowid tables; MoonCDC cannot identify such a row: make the column NOT NULL)"
            ));
        }
    }
    Ok(())
}

/// After columns were added to a table, log for every row whose added columns
/// are not all NULL an update from "added columns NULL" to the row as it is:
/// a projection adds the columns empty, and these updates give them the values
/// the source has (defaults, and whatever was written between the ALTER and
/// the upgrade, which the old triggers could not see). Returns the rows logged.
pub(super) fn log_added_columns(
    conn: &Connection,
    old: &Schema,
    new: &TableVersion,
    renamed: &[crate::wire::Rename],
) -> Result<u64> {
    // The old columns under their new names.
    let names_old: Vec<&str> = old
        .columns
        .iter()
        .map(|c| {
            renamed
                .iter()
                .find(|r| r.from == c.name)
                .map_or(c.name.as_str(), |r| r.to.as_str())
        })
        .collect();
    let cols = &new.schema.columns;
    let added: Vec<usize> = (0..cols.len())
        .filter(|&i| !names_old.contains(&cols[i].name.as_str()))
        .collect();
    // Only pure additions can be expressed this way (columns kept in place).
    let kept_in_place = cols
        .iter()
        .take(names_old.len())
        .map(|c| c.name.as_str())
        .eq(names_old.iter().copied());
    if added.is_empty() || !kept_in_place {
        return Ok(0);
    }
    let n = cols.len();
    let quoted: Vec<String> = cols.iter().map(|c| quote_ident(&c.name)).collect();
    let nonnull: Vec<String> = added
        .iter()
        .map(|&i| format!("{} IS NOT NULL", quote_ident(&cols[i].name)))
        .collect();
    let before: Vec<String> = (0..n)
        .map(|i| {
            if added.contains(&i) {
                "NULL".to_string()
            } else {
                quoted[i].clone()
            }
        })
        .collect();
    let logcols: Vec<String> = (0..2 * n).map(|i| format!("v{i}")).collect();
    let sql = format!(
        "INSERT INTO {LOG}(tid, op, {}) SELECT {}, 2, {}, {} FROM {} WHERE {}",
        logcols.join(", "),
        new.tid,
        before.join(", "),
        quoted.join(", "),
        quote_ident(&new.schema.table),
        nonnull.join(" OR ")
    );
    let rows = conn
        .execute(&sql, [])
        .map_err(db_err("cannot log the added columns' values"))?;
    Ok(rows as u64)
}

/// A version 1 log used AUTOINCREMENT; copy it into a plain rowid table,
/// keeping every row and, as its newest row, the high water (a placeholder
/// row at the high water if acknowledgement had deleted the newest one).
pub(super) fn rebuild_v1_log(conn: &Connection) -> Result<bool> {
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [LOG],
            |r| r.get(0),
        )
        .map_err(db_err("cannot read the change log's definition"))?;
    if !sql.to_ascii_uppercase().contains("AUTOINCREMENT") {
        return Ok(false);
    }
    let hw = high_water(conn)? as i64;
    let cols: Vec<String> = (0..log_width(conn)?).map(|i| format!(", v{i}")).collect();
    let cols = cols.concat();
    conn.execute_batch(&format!(
        "CREATE TABLE _mooncdc_log_v2(seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, op INTEGER NOT NULL{cols});
         INSERT INTO _mooncdc_log_v2 SELECT * FROM {LOG};
         INSERT INTO _mooncdc_log_v2(seq, tid, op) SELECT {hw}, 0, 0 WHERE NOT EXISTS (SELECT 1 FROM _mooncdc_log_v2 WHERE seq >= {hw}) AND {hw} > 0;
         DROP TABLE {LOG};
         ALTER TABLE _mooncdc_log_v2 RENAME TO {LOG};"
    ))
    .map_err(db_err("cannot rebuild the change log"))?;
    Ok(true)
}
