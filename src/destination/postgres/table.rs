//! Target tables: where a stream's table lands, its column types, how each
//! value is sent, and the statements that change its rows.

use super::*;

/// How a value of a column is sent: a parameter of a native type (exact,
/// binary) or text the column's type parses (a PostgreSQL source's value in
/// that type's own text form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Param {
    Int8,
    Float8,
    Bool,
    Bytea,
    Text,
}

impl Param {
    pub(super) fn pg_type(self) -> Type {
        match self {
            Param::Int8 => Type::INT8,
            Param::Float8 => Type::FLOAT8,
            Param::Bool => Type::BOOL,
            Param::Bytea => Type::BYTEA,
            Param::Text => Type::TEXT,
        }
    }
}

/// One column of a target table.
#[derive(Debug, Clone)]
pub(super) struct Col {
    pub(super) name: String,
    /// `format_type` of the target column.
    pub(super) sql_type: String,
    pub(super) class: Class,
    pub(super) param: Param,
    pub(super) not_null: bool,
}

/// A target table and its statements.
#[derive(Clone)]
pub(super) struct Table {
    pub(super) schema: Schema,
    /// `"schema"."table"`.
    pub(super) qname: String,
    pub(super) cols: Vec<Col>,
    pub(super) key: Vec<usize>,
    pub(super) insert: Statement,
    pub(super) update: Statement,
    pub(super) delete: Statement,
    /// `--on-conflict overwrite`: before image then after image; updates
    /// the row at the before key or inserts.
    pub(super) upsert: Statement,
    /// `--on-conflict overwrite`: deletes the row at the key, whatever it holds.
    pub(super) delete_any: Statement,
    /// A change whose old row is known by its key alone: the row at the
    /// before key (params 1..n, only the key's used) takes the after image
    /// (n+1..2n), except the columns flagged in param 2n+1 (`bool[]`),
    /// which keep what they hold (unchanged values are not rewritten).
    pub(super) update_keyed: Statement,
    /// The row at the key (params 1..n, only the key's used) deleted.
    pub(super) delete_keyed: Statement,
}

/// Where a stream's table lands: a PostgreSQL source's `schema.table` in
/// that schema (parts read as docs/FORMAT.md "Table names" spells them:
/// `"x.y".z` is table `z` of schema `x.y`), a name without a schema in
/// `public` (as PostgreSQL reads it); a SQLite source's `t` in the URL's
/// `schema=` (default `public`). One stream name, one table: a name not in
/// the one spelling of its parts (`a.b.c`, `"a".b`) is refused, so two
/// stream tables never land in one target table.
pub(super) fn target_name(table: &str, kind: SourceKind, schema: &str) -> Result<(String, String)> {
    match kind {
        SourceKind::Postgres => {
            let (s, t) = crate::wire::names::split(table).map_err(|e| {
                Error::data(format!(
                    "{e}; a PostgreSQL target cannot tell which schema and table it names"
                ))
            })?;
            if !crate::wire::names::is_canonical(table) {
                return Err(Error::data(format!(
                    "table name {table:?} is not spelled as docs/FORMAT.md spells it ({:?}), so another stream name could name the same PostgreSQL table; refused",
                    match &s {
                        Some(s) => crate::wire::names::join(s, &t),
                        None => t.clone(),
                    }
                )));
            }
            Ok((s.unwrap_or_else(|| "public".to_string()), t))
        }
        _ => Ok((schema.to_string(), table.to_string())),
    }
}

/// The column type a new column gets.
pub(super) async fn column_type(
    c: &Client,
    col: &Column,
    kind: SourceKind,
    table: &str,
) -> Result<String> {
    match kind {
        SourceKind::Postgres => {
            // A stream's declared type goes into SQL only if it reads as a
            // type name and nothing else (the stream is data, not code).
            if !type_name_only(&col.decl_type) {
                return Err(Error::data(format!(
                    "table {table:?} column {:?}: the declared type {:?} is not a PostgreSQL type name; refused",
                    col.name, col.decl_type
                )));
            }
            // The source's own type where the target has it (an enum or a
            // domain it lacks becomes text: the values are its text forms).
            let known: Option<String> = c
                .query_one("SELECT to_regtype($1)::text", &[&col.decl_type])
                .await
                .map_err(pg_err("cannot look up a column type"))?
                .get(0);
            let Some(known) = known else {
                return Ok("text".to_string());
            };
            // A `reg*` value names an object of the source's own catalog
            // (`regclass` 't_int8'), which the target need not have: its
            // text form, exactly as the source wrote it, is what is kept.
            if REG_TYPES.contains(&known.trim_end_matches("[]")) {
                return Ok("text".to_string());
            }
            // The name as `format_type` spells it (`INTEGER` is `integer`,
            // `VARCHAR(5)` is `character varying(5)`), so that a table made
            // from it is the one later checks expect: the type and modifier
            // a cast to it has, spelled by the server.
            let st = c
                .prepare(&format!("SELECT NULL::{}", col.decl_type))
                .await
                .map_err(pg_err("cannot look up a column type"))?;
            let (oid, typmod) = st
                .columns()
                .first()
                .map(|k| (k.type_().oid(), k.type_modifier()))
                .ok_or_else(|| Error::state("a type look-up returned no column"))?;
            c.query_one("SELECT format_type($1, $2)", &[&oid, &typmod])
                .await
                .map_err(pg_err("cannot look up a column type"))?
                .try_get::<_, String>(0)
                .map_err(pg_err("cannot look up a column type"))
        }
        _ => match crate::sqlite_util::affinity(&col.decl_type) {
            Affinity::Integer => Ok("bigint".into()),
            Affinity::Real => Ok("double precision".into()),
            Affinity::Text => Ok("text".into()),
            Affinity::Blob => Ok("bytea".into()),
            Affinity::Numeric => Err(Error::data(format!(
                "table {table:?} column {:?} is declared {:?} (NUMERIC affinity), whose values may be integers, reals or text; the PostgreSQL target has no one type that keeps each of them exactly (declare the column INTEGER, REAL, TEXT or BLOB in the source)",
                col.name, col.decl_type
            ))),
        },
    }
}

/// PostgreSQL's object identifier alias types: their values are names in
/// the source's catalog, carried into a target as text.
const REG_TYPES: &[&str] = &[
    "regclass",
    "regcollation",
    "regconfig",
    "regdictionary",
    "regnamespace",
    "regoper",
    "regoperator",
    "regproc",
    "regprocedure",
    "regrole",
    "regtype",
];

/// Whether `s` is only a type name as `format_type` writes them: words and
/// quoted identifiers, dots between them, a type modifier of integers
/// (`numeric(5,-2)`: a negative scale, PostgreSQL 15 and later) and commas
/// in parentheses, `[]` suffixes. Nothing else (no `;`, no other
/// quote, no expression) can appear.
pub(super) fn type_name_only(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let mut words = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'.' => i += 1,
            b'"' => {
                i += 1;
                loop {
                    match b.get(i) {
                        None => return false,
                        Some(b'"') if b.get(i + 1) == Some(&b'"') => i += 2,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                words += 1;
            }
            b'(' => {
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_digit()
                        || b[i] == b','
                        || b[i] == b' '
                        || (b[i] == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
                {
                    i += 1;
                }
                if b.get(i) != Some(&b')') {
                    return false;
                }
                i += 1;
            }
            b'[' => {
                if b.get(i + 1) != Some(&b']') {
                    return false;
                }
                i += 2;
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 => {
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == b'_'
                        || b[i] == b'$'
                        || b[i] >= 0x80)
                {
                    i += 1;
                }
                words += 1;
            }
            _ => return false,
        }
    }
    words > 0
}

fn param_for(class: Class) -> Param {
    match class {
        Class::Integer => Param::Int8,
        Class::Real4 | Class::Real8 => Param::Float8,
        Class::Bool => Param::Bool,
        Class::Blob => Param::Bytea,
        Class::Text => Param::Text,
    }
}

/// The target table as it is: its columns' types (`None`: missing).
pub(super) async fn read_columns(
    c: &Client,
    schema: &str,
    table: &str,
) -> Result<Option<(Vec<Col>, Vec<String>)>> {
    let rows = c
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.atttypid::int8, a.attnotnull \
             FROM pg_attribute a JOIN pg_class r ON r.oid = a.attrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
             WHERE n.nspname = $1 AND r.relname = $2 AND r.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&schema, &table],
        )
        .await
        .map_err(pg_err("cannot read a target table's columns"))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let cols = rows
        .iter()
        .map(|r| {
            let class = class_of(r.get::<_, i64>(2) as u32);
            Col {
                name: r.get(0),
                sql_type: r.get(1),
                class,
                param: param_for(class),
                not_null: r.get(3),
            }
        })
        .collect();
    let key: Vec<String> = c
        .query(
            "SELECT a.attname::text FROM pg_index i \
             JOIN pg_class r ON r.oid = i.indrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum = k.attnum \
             WHERE n.nspname = $1 AND r.relname = $2 AND i.indisprimary ORDER BY k.ord",
            &[&schema, &table],
        )
        .await
        .map_err(pg_err("cannot read a target table's key"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(Some((cols, key)))
}

impl PgTarget {
    /// The table a stream's schema maps to: created when missing (schema
    /// too), else checked (names in order, key); its statements prepared.
    /// With `reshape`, a table whose columns are the schema's first ones
    /// gets the rest added, and one that has columns the schema lacks, and
    /// nothing else different, has them dropped
    /// ([`crate::destination::HeaderShape`]).
    pub(super) async fn ensure(
        &self,
        c: &Client,
        s: &Schema,
        kind: SourceKind,
        reshape: bool,
    ) -> Result<Table> {
        if s.key.is_empty() {
            return Err(Error::data(format!(
                "table {:?} has no key; a PostgreSQL target identifies rows by their key",
                s.table
            )));
        }
        let (ns, name) = target_name(&s.table, kind, &self.schema)?;
        self.claim(&ns, &name, &s.table)?;
        if ns == "mooncdc" {
            return Err(Error::data(format!(
                "table {:?} would land in schema \"mooncdc\", which is MoonCDC's own",
                s.table
            )));
        }
        let qname = format!("{}.{}", quote_ident(&ns), quote_ident(&name));
        let found = read_columns(c, &ns, &name).await?;
        let (cols, key) = match found {
            Some(found) => found,
            None => {
                let mut defs = Vec::new();
                for col in &s.columns {
                    let ty = self.column_type(c, col, kind, &s.table).await?;
                    defs.push(format!(
                        "{} {ty}{}",
                        quote_ident(&col.name),
                        if col.nullable { "" } else { " NOT NULL" }
                    ));
                }
                let keys: Vec<String> = s.key.iter().map(|k| quote_ident(k)).collect();
                // Deferred: a batch may move keys through each other (a swap),
                // as the source's transaction did; checked at its commit.
                c.batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {}; CREATE TABLE {qname} ({}, PRIMARY KEY ({}) DEFERRABLE INITIALLY DEFERRED)",
                    quote_ident(&ns),
                    defs.join(", "),
                    keys.join(", ")
                ))
                .await
                .map_err(pg_err("cannot create a target table"))?;
                read_columns(c, &ns, &name)
                    .await?
                    .ok_or_else(|| Error::state("a created table is not there"))?
            }
        };
        let (cols, key) = if reshape {
            self.reshape(c, s, kind, &qname, (&ns, &name), cols, key)
                .await?
        } else {
            (cols, key)
        };
        let have: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        let want: Vec<&str> = s.columns.iter().map(|c| c.name.as_str()).collect();
        if have != want || key != s.key {
            return Err(Error::state(format!(
                "target table {qname} has columns {have:?} and key {key:?}, but the stream's schema has columns {want:?} and key {:?}; the stream does not say how one became the other (a column renamed or moved, or one dropped and another added, while no capture was reading, say): change the target table the same way and apply again, or give it a new snapshot (docs/OPERATIONS.md, schema changes)",
                s.key
            )));
        }
        {
            // The table must have the types this target gives the stream's
            // columns: a value cast into another type (a shorter varchar, a
            // real for a double) would change without a word.
            for (col, sc) in cols.iter().zip(&s.columns) {
                let want = self.column_type(c, sc, kind, &s.table).await?;
                if col.sql_type != want {
                    return Err(Error::state(format!(
                        "target table {qname} column {:?} is {}, but the stream's {:?} column lands in {want}; a value cast into another type could change: make the column {want}, or give the table a new snapshot",
                        col.name, col.sql_type, sc.decl_type
                    )));
                }
            }
        }
        let key: Vec<usize> = s.key_indices();
        self.statements(c, s.clone(), qname, cols, key).await
    }

    /// [`column_type`], a PostgreSQL source's spellings asked once.
    pub(super) async fn column_type(
        &self,
        c: &Client,
        col: &Column,
        kind: SourceKind,
        table: &str,
    ) -> Result<String> {
        if kind != SourceKind::Postgres {
            return column_type(c, col, kind, table).await;
        }
        let held = self.spellings.borrow().get(&col.decl_type).cloned();
        if let Some(ty) = held {
            return Ok(ty);
        }
        let ty = column_type(c, col, kind, table).await?;
        self.spellings
            .borrow_mut()
            .insert(col.decl_type.clone(), ty.clone());
        Ok(ty)
    }

    /// Columns added at the end, or dropped, as the header says (see
    /// [`PgTarget::ensure`]); any other difference is left for `ensure` to
    /// refuse. Returns the table's columns and key as they are now.
    #[allow(clippy::too_many_arguments)]
    async fn reshape(
        &self,
        c: &Client,
        s: &Schema,
        kind: SourceKind,
        qname: &str,
        (ns, name): (&str, &str),
        cols: Vec<Col>,
        key: Vec<String>,
    ) -> Result<(Vec<Col>, Vec<String>)> {
        let have: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        let mut steps: Vec<String> = Vec::new();
        match crate::destination::HeaderShape::of(&have, Some(&key), s) {
            crate::destination::HeaderShape::Added => {
                for col in &s.columns[have.len()..] {
                    let ty = self.column_type(c, col, kind, &s.table).await?;
                    // Without NOT NULL, as for a schema record: the rows the
                    // table holds get NULL.
                    steps.push(format!(
                        "ALTER TABLE {qname} ADD COLUMN {} {ty}",
                        quote_ident(&col.name)
                    ));
                }
            }
            crate::destination::HeaderShape::Dropped(gone) => {
                for i in gone {
                    steps.push(format!(
                        "ALTER TABLE {qname} DROP COLUMN {}",
                        quote_ident(&cols[i].name)
                    ));
                }
            }
            _ => return Ok((cols, key)),
        }
        // ALTER TABLE refuses a table with deferred checks pending.
        steps.insert(
            0,
            "SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED".into(),
        );
        for sql in steps {
            c.batch_execute(&sql)
                .await
                .map_err(pg_err("cannot change a target table's columns"))?;
        }
        read_columns(c, ns, name)
            .await?
            .ok_or_else(|| Error::state(format!("target table {qname} is gone")))
    }
}

#[cfg(test)]
mod tests {
    use super::type_name_only;

    #[test]
    fn only_type_names_reach_sql() {
        for ok in [
            "integer",
            "numeric(10,2)",
            "numeric(5,-2)",
            "character varying(5)",
            "timestamp(3) with time zone",
            "double precision",
            "text[]",
            "public.mood",
            "\"Mood\"[]",
            "\"we\"\"ird\".\"t y\"",
        ] {
            assert!(type_name_only(ok), "{ok}");
        }
        // Only the shape is checked here; PostgreSQL's to_regtype, which must
        // also accept the name before it is used, refuses the rest
        // ("int default 1" is words, but not a type name).
        assert!(!type_name_only(""));
        assert!(!type_name_only("int); DROP TABLE x; --"));
        assert!(!type_name_only("numeric(1+1)"));
        assert!(!type_name_only("numeric(5,-)"));
        assert!(!type_name_only("numeric(5,--2)"));
        assert!(!type_name_only("int'"));
        assert!(!type_name_only("int -- x"));
        assert!(!type_name_only("\"unterminated"));
    }
}
