//! A batch's events as pipelined statements: each table's statements
//! prepared, built per event, run many at a time with their results checked
//! in order, and the batch's transaction begun and committed with the cursor.

use super::*;
use crate::wire::Sequence;

/// Statements in flight at most before their results are checked…
pub(super) const PIPELINE: usize = 512;
/// …and the bytes of their values at most (memory bounded by this, not by
/// the size of a batch or of its values).
pub(super) const PIPELINE_BYTES: usize = 16 << 20;

pub(super) fn event_bytes(e: &crate::wire::Event) -> usize {
    let row = |r: &Option<Row>| {
        r.iter()
            .flatten()
            .map(|v| match v {
                Value::Text(s) => 32 + s.len(),
                Value::Blob(b) => 32 + b.len(),
                _ => 32,
            })
            .sum::<usize>()
    };
    2 * (row(&e.before) + row(&e.after))
}

/// One statement waiting to be sent, and what its result must be.
pub(super) struct Op {
    stmt: Statement,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
    /// Rows it must change (`None`: any number).
    expect: Option<u64>,
    sequence: Sequence,
    what: &'static str,
    table: String,
    key: String,
    /// The event names its old row by the key alone.
    key_only: bool,
    /// Applied under `--on-conflict overwrite` (which forces what it can,
    /// but cannot fill a row the target does not hold).
    overwrite: bool,
}

pub(super) async fn run(c: &Client, ops: &mut Vec<Op>) -> Result<()> {
    let results = futures_util::future::join_all(ops.iter().map(|op| async move {
        let params: Vec<&(dyn ToSql + Sync)> = op
            .params
            .iter()
            .map(|p| &**p as &(dyn ToSql + Sync))
            .collect();
        c.execute(&op.stmt, &params).await
    }))
    .await;
    for (op, r) in ops.iter().zip(results) {
        match r {
            Ok(n) if op.expect.is_none_or(|e| e == n) => {}
            Ok(_) if op.overwrite => {
                return Err(Error::state(format!(
                    "event {} ({} on table {:?}, key {}): no stored row has this key, so the values the change left \
                     unchanged cannot be filled; the target does not hold the row the source changed (take a new snapshot)",
                    op.sequence, op.what, op.table, op.key
                )))
            }
            Ok(_) => {
                return Err(Error::state(format!(
                    "event {} ({} on table {:?}, key {}): {}; the target diverges from the source (--on-conflict overwrite forces it)",
                    op.sequence,
                    op.what,
                    op.table,
                    op.key,
                    match (op.what, op.key_only) {
                        ("insert", _) => "the target already holds a row with this key",
                        (_, true) => "no stored row has this key (the change names its old row by the key alone, and its unchanged values are filled from the stored row)",
                        _ => "no stored row has this key and the before image",
                    }
                )))
            }
            Err(e) => {
                return Err(pg_err(&format!(
                    "event {} ({} on table {:?}, key {}) failed",
                    op.sequence, op.what, op.table, op.key
                ))(e))
            }
        }
    }
    ops.clear();
    Ok(())
}

pub(super) fn key_text(t: &Table, row: &Row) -> String {
    let key: Vec<Value> = t.key.iter().map(|&i| row[i].clone()).collect();
    key_text_of(&key)
}

fn key_text_of(key: &[Value]) -> String {
    let mut out = Vec::new();
    crate::wire::value::write_row(&mut out, key);
    String::from_utf8(out).unwrap_or_default()
}

type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// The statements of an update or delete whose old row is known by its key
/// alone (`key`, in key order): the row there must exist (the strict
/// check a whole before image gives is not possible), and an update
/// rewrites only the columns whose values came.
fn keyed_ops<'t>(
    t: &'t Table,
    e: &crate::wire::Event,
    key: &Row,
    overwrite: bool,
) -> Result<Vec<(&'t Statement, Params, Option<u64>)>> {
    let s = Some(e.sequence);
    // The key's values at their columns' places; NULL elsewhere (unused).
    let mut at_key: Row = vec![Value::Null; t.cols.len()];
    for (&i, v) in t.key.iter().zip(key) {
        at_key[i] = v.clone();
    }
    let Some(a) = &e.after else {
        let stmt = if overwrite {
            &t.delete_any
        } else {
            &t.delete_keyed
        };
        let expect = (!overwrite).then_some(1);
        return Ok(vec![(stmt, params(t, &at_key, s)?, expect)]);
    };
    if overwrite && !e.has_unchanged() {
        // Whole: the row at the old key becomes it, or it is inserted.
        let mut p = params(t, &at_key, s)?;
        p.extend(params(t, a, s)?);
        return Ok(vec![(&t.upsert, p, None)]);
    }
    let keep: Vec<bool> = a.iter().map(Value::is_unchanged).collect();
    let sent: Row = (a.iter())
        .map(|v| {
            if v.is_unchanged() {
                Value::Null
            } else {
                v.clone()
            }
        })
        .collect();
    let mut p = params(t, &at_key, s)?;
    p.extend(params(t, &sent, s)?);
    p.push(Box::new(keep));
    // With unchanged values the row must be there to fill them, overwrite
    // or not.
    Ok(vec![(&t.update_keyed, p, Some(1))])
}

/// A row's values as parameters of its table's columns, checked first as
/// COPY's rows are ([`check_row`]).
pub(super) fn params(
    t: &Table,
    row: &Row,
    seq: Option<Sequence>,
) -> Result<Vec<Box<dyn ToSql + Sync + Send>>> {
    super::copy_in::check_row(t, row, seq)?;
    Ok(t.cols.iter().zip(row).map(|(c, v)| param(c, v)).collect())
}

/// The statements for one event.
pub(super) fn event_ops(
    t: &Table,
    e: &crate::wire::Event,
    on_conflict: OnConflict,
) -> Result<Vec<Op>> {
    let op = |stmt: &Statement, p, expect, key: String| Op {
        stmt: stmt.clone(),
        params: p,
        expect,
        sequence: e.sequence,
        what: e.operation.as_str(),
        table: e.table.clone(),
        key,
        key_only: false,
        overwrite: on_conflict == OnConflict::Overwrite,
    };
    let s = Some(e.sequence);
    let overwrite = on_conflict == OnConflict::Overwrite;
    e.check_key(&t.key).map_err(Error::data)?;
    if let Some(k) = &e.before_key {
        return keyed_ops(t, e, k, overwrite).map(|o| {
            o.into_iter()
                .map(|(stmt, p, expect)| Op {
                    key_only: true,
                    ..op(stmt, p, expect, key_text_of(k))
                })
                .collect()
        });
    }
    if e.has_unchanged() {
        // A whole old row fills every unchanged value; a stream that holds
        // both is not what a source writes, but is carried exactly.
        let mut filled = e.clone();
        if let (Some(a), Some(b)) = (filled.after.as_mut(), e.before.as_ref()) {
            for (v, old) in a.iter_mut().zip(b) {
                if v.is_unchanged() {
                    *v = old.clone();
                }
            }
        }
        return event_ops(t, &filled, on_conflict);
    }
    Ok(match (e.operation, &e.before, &e.after) {
        (Operation::Insert, _, Some(a)) => {
            let k = key_text(t, a);
            if overwrite {
                let mut p = params(t, a, s)?;
                p.extend(params(t, a, s)?);
                vec![op(&t.upsert, p, None, k)]
            } else {
                vec![op(&t.insert, params(t, a, s)?, Some(1), k)]
            }
        }
        (Operation::Update, Some(b), Some(a)) => {
            let k = key_text(t, b);
            let mut p = params(t, b, s)?;
            p.extend(params(t, a, s)?);
            if overwrite {
                vec![op(&t.upsert, p, None, k)]
            } else {
                vec![op(&t.update, p, Some(1), k)]
            }
        }
        (Operation::Delete, Some(b), _) => {
            let k = key_text(t, b);
            if overwrite {
                vec![op(&t.delete_any, params(t, b, s)?, None, k)]
            } else {
                vec![op(&t.delete, params(t, b, s)?, Some(1), k)]
            }
        }
        _ => unreachable!("checked images"),
    })
}

/// BEGIN, and the cursor table when it is missing (only then: a role given
/// rights on a `mooncdc` schema made by its DBA need not create anything).
pub(super) async fn begin_with_cursor_table(
    c: &Client,
) -> std::result::Result<(), tokio_postgres::Error> {
    c.batch_execute("BEGIN").await?;
    let exists: bool = c
        .query_one("SELECT to_regclass('mooncdc.cursors') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        c.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS mooncdc; \
             CREATE TABLE IF NOT EXISTS mooncdc.cursors (source text PRIMARY KEY, sequence text NOT NULL)",
        )
        .await?;
    }
    Ok(())
}

/// A deferred key check failing at the commit: which table and key.
pub(super) fn commit_error(e: tokio_postgres::Error) -> Error {
    if let Some(d) = e.as_db_error() {
        if d.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION {
            return Error::state(format!(
                "at the batch's commit, table {}.{} holds a key twice ({}): the batch inserts or moves a row onto a key the target holds; the target diverges from the source (--on-conflict overwrite forces it); nothing of the batch was applied",
                d.schema().unwrap_or("?"),
                d.table().unwrap_or("?"),
                d.detail().unwrap_or("")
            ));
        }
    }
    pg_err("cannot commit the batch")(e)
}

impl PgTarget {
    /// Prepare a table's statements.
    pub(super) async fn statements(
        &self,
        c: &Client,
        schema: Schema,
        qname: String,
        cols: Vec<Col>,
        key: Vec<usize>,
    ) -> Result<Table> {
        let n = cols.len();
        let names: Vec<String> = cols.iter().map(|c| quote_ident(&c.name)).collect();
        let val = |i: usize, p: usize| format!("${p}::{}", cols[i].sql_type);
        let types: Vec<Type> = cols.iter().map(|c| c.param.pg_type()).collect();
        // Equal, as the target compares a stored value with an image: by
        // the type's equality for native classes, by text form otherwise
        // (some types, json for one, have no equality).
        let same = |i: usize, p: usize| match cols[i].class {
            Class::Text => format!(
                "{}::text IS NOT DISTINCT FROM ${p}::{}::text",
                names[i], cols[i].sql_type
            ),
            _ => format!("{} IS NOT DISTINCT FROM {}", names[i], val(i, p)),
        };
        let key_eq = |offset: usize| -> Vec<String> {
            key.iter()
                .map(|&i| format!("{} = {}", names[i], val(i, offset + i + 1)))
                .collect()
        };
        let insert = format!(
            "INSERT INTO {qname} ({}) SELECT {} WHERE NOT EXISTS (SELECT 1 FROM {qname} WHERE {})",
            names.join(", "),
            (0..n).map(|i| val(i, i + 1)).collect::<Vec<_>>().join(", "),
            key_eq(0).join(" AND ")
        );
        // Each statement changes one row, found by ctid: while a batch moves
        // keys through each other (the key is checked at the commit), two
        // rows may hold one key for a moment.
        let image = |offset: usize| -> String {
            key_eq(offset)
                .into_iter()
                .chain(
                    (0..n)
                        .filter(|i| !key.contains(i))
                        .map(|i| same(i, offset + i + 1)),
                )
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        let one_row = format!("(SELECT ctid FROM {qname} WHERE {} LIMIT 1)", image(0));
        // Update: params 1..n the before image, n+1..2n the after image.
        let set = (0..n)
            .map(|i| format!("{} = {}", names[i], val(i, n + i + 1)))
            .collect::<Vec<_>>()
            .join(", ");
        let update = format!("UPDATE {qname} SET {set} WHERE ctid = {one_row}");
        let delete = format!("DELETE FROM {qname} WHERE ctid = {one_row}");
        // --on-conflict overwrite: the row at the before key (the one that
        // has the before image, if any) becomes the after image; with no row
        // at that key, the after image is inserted. Never a row at the after
        // key: in a swap it is another row on its way elsewhere.
        let any_at_key = format!(
            "(SELECT ctid FROM {qname} WHERE {} ORDER BY ({})::int DESC LIMIT 1)",
            key_eq(0).join(" AND "),
            image(0)
        );
        let upsert = format!(
            "WITH u AS (UPDATE {qname} SET {set} WHERE ctid = {any_at_key} RETURNING 1) \
             INSERT INTO {qname} ({}) SELECT {} WHERE NOT EXISTS (SELECT 1 FROM u)",
            names.join(", "),
            (0..n)
                .map(|i| val(i, n + i + 1))
                .collect::<Vec<_>>()
                .join(", "),
        );
        let delete_any = format!("DELETE FROM {qname} WHERE ctid = {any_at_key}");
        let at_key = format!(
            "(SELECT ctid FROM {qname} WHERE {} LIMIT 1)",
            key_eq(0).join(" AND ")
        );
        let keep = 2 * n + 1;
        let set_kept = (0..n)
            .map(|i| {
                format!(
                    "{0} = CASE WHEN ${keep}[{1}] THEN {0} ELSE {2} END",
                    names[i],
                    i + 1,
                    val(i, n + i + 1)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let update_keyed = format!("UPDATE {qname} SET {set_kept} WHERE ctid = {at_key}");
        let delete_keyed = format!("DELETE FROM {qname} WHERE ctid = {at_key}");
        let prep = |sql: String, types: Vec<Type>| async move {
            c.prepare_typed(&sql, &types)
                .await
                .map_err(pg_err("cannot prepare a statement for a target table"))
        };
        let two: Vec<Type> = types.iter().chain(types.iter()).cloned().collect();
        let flagged: Vec<Type> = two.iter().cloned().chain([Type::BOOL_ARRAY]).collect();
        Ok(Table {
            update_keyed: prep(update_keyed, flagged).await?,
            delete_keyed: prep(delete_keyed, types.clone()).await?,
            insert: prep(insert, types.clone()).await?,
            update: prep(update, two.clone()).await?,
            delete: prep(delete, types.clone()).await?,
            upsert: prep(upsert, two).await?,
            delete_any: prep(delete_any, types).await?,
            schema,
            qname,
            cols,
            key,
        })
    }
}
