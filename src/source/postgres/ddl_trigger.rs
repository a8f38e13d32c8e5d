//! The DDL trigger (`mooncdc-capture init --ddl`): an event trigger that,
//! after each `ALTER TABLE`, writes a transactional logical message (prefix
//! `mooncdc_ddl`) naming the table and the columns the command renamed, so
//! the stream can tell a rename from a drop and an add.
//!
//! Renames are found by column number: `mooncdc.ddl_columns` keeps each
//! table's column names by `attnum` as the trigger last saw them; a number
//! whose name changed was renamed. The table is UNLOGGED, so its rows are
//! never in the WAL (a publication `FOR ALL TABLES` does not stream them);
//! after a crash it is empty, and the first `ALTER TABLE` of each table then
//! says `"renamed":null` (unknown), which the stream treats as no DDL record
//! at all: an ambiguous change still fails closed, never guessed.
//!
//! It also gives a partition attached to (or created under) a table with
//! REPLICA IDENTITY FULL that identity, in the same transaction.
//!
//! Message: `{"table":"schema.table","schema":"schema","name":"table",
//! "renamed":[{"from":"a","to":"b"}],
//! "before":[{"name":"a","type":"text","nullable":true}]}` (`before`: the
//! columns before the command, so a read whose first description of the
//! table comes after the change still knows what it changed from).

use super::PgSource;
use crate::error::{Cause, Error, ErrorKind, Result};
use crate::pg::{pg_err, runtime};

/// The message prefix.
pub(super) const PREFIX: &str = "mooncdc_ddl";

const INSTALL: &str = r#"
CREATE SCHEMA IF NOT EXISTS mooncdc;
DROP TABLE IF EXISTS mooncdc.ddl_columns;
CREATE UNLOGGED TABLE mooncdc.ddl_columns (
    relid oid NOT NULL,
    attnum int2 NOT NULL,
    name name NOT NULL,
    type text NOT NULL,
    not_null boolean NOT NULL,
    PRIMARY KEY (relid, attnum)
);
CREATE OR REPLACE FUNCTION mooncdc.ddl_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
    t oid;
    p oid;
    tag text;
    known boolean;
    renamed jsonb;
    before jsonb;
    readded jsonb;
BEGIN
    FOR t, tag IN
        SELECT DISTINCT objid, command_tag FROM pg_event_trigger_ddl_commands()
        WHERE object_type IN ('table', 'table column') AND objid IS NOT NULL
    LOOP
        -- A partition attached to, or made under, a table whose replica
        -- identity is FULL gets FULL too, in the same transaction: its
        -- deletes and updates then carry their old rows, also when
        -- published through the root.
        FOR p IN
            SELECT pt.relid FROM pg_partition_tree(t) pt JOIN pg_class c ON c.oid = pt.relid
             WHERE c.relreplident <> 'f' AND c.relkind IN ('r', 'p')
               AND EXISTS (SELECT 1 FROM pg_partition_ancestors(pt.relid) a
                           JOIN pg_class ac ON ac.oid = a.relid
                           WHERE a.relid <> pt.relid AND ac.relreplident = 'f')
        LOOP
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', p::regclass);
        END LOOP;
        IF tag = 'ALTER TABLE' THEN
            SELECT EXISTS (SELECT 1 FROM mooncdc.ddl_columns WHERE relid = t) INTO known;
            IF known THEN
                SELECT coalesce(jsonb_agg(jsonb_build_object('from', s.name, 'to', a.attname)
                                          ORDER BY a.attnum), '[]'::jsonb)
                  INTO renamed
                  FROM mooncdc.ddl_columns s
                  JOIN pg_attribute a ON a.attrelid = s.relid AND a.attnum = s.attnum
                 WHERE s.relid = t AND NOT a.attisdropped AND a.attname <> s.name;
                SELECT jsonb_agg(jsonb_build_object('name', name, 'type', type, 'nullable', NOT not_null)
                                 ORDER BY attnum)
                  INTO before
                  FROM mooncdc.ddl_columns WHERE relid = t;
                -- A name now on another column number: dropped and added again.
                SELECT coalesce(jsonb_agg(s.name), '[]'::jsonb)
                  INTO readded
                  FROM mooncdc.ddl_columns s
                  JOIN pg_attribute a ON a.attrelid = s.relid AND a.attname = s.name
                 WHERE s.relid = t AND a.attnum > 0 AND NOT a.attisdropped AND a.attnum <> s.attnum
                   AND NOT EXISTS (SELECT 1 FROM pg_attribute o WHERE o.attrelid = t AND o.attnum = s.attnum
                                   AND NOT o.attisdropped AND o.attname <> s.name);
            ELSE
                renamed := 'null'::jsonb;
                before := 'null'::jsonb;
                readded := '[]'::jsonb;
            END IF;
            PERFORM pg_logical_emit_message(true, 'mooncdc_ddl', jsonb_build_object(
                'table', (SELECT n.nspname || '.' || c.relname FROM pg_class c
                          JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = t),
                'schema', (SELECT n.nspname FROM pg_class c
                           JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = t),
                'name', (SELECT c.relname FROM pg_class c WHERE c.oid = t),
                'renamed', renamed, 'before', before, 'readded', readded)::text);
        END IF;
        DELETE FROM mooncdc.ddl_columns WHERE relid = t;
        INSERT INTO mooncdc.ddl_columns
            SELECT attrelid, attnum, attname, format_type(atttypid, atttypmod), attnotnull
              FROM pg_attribute
             WHERE attrelid = t AND attnum > 0 AND NOT attisdropped;
    END LOOP;
END
$f$;
REVOKE ALL ON FUNCTION mooncdc.ddl_end() FROM PUBLIC;
DROP EVENT TRIGGER IF EXISTS mooncdc_ddl;
CREATE EVENT TRIGGER mooncdc_ddl ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'CREATE TABLE')
    EXECUTE FUNCTION mooncdc.ddl_end();
INSERT INTO mooncdc.ddl_columns
    SELECT a.attrelid, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
       AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'mooncdc')
       AND n.nspname NOT LIKE 'pg\_%'
    ON CONFLICT (relid, attnum) DO NOTHING;
"#;

impl PgSource {
    /// Install (or refresh) the DDL trigger, in one transaction.
    pub fn install_ddl(&self) -> Result<String> {
        runtime()?.block_on(async {
            let mut c = self.client("init --ddl").await?;
            let v: String = c
                .query_one("SHOW server_version_num", &[])
                .await
                .map_err(pg_err("cannot read the server version"))?
                .get(0);
            if v.parse::<u32>().unwrap_or(0) < 140000 {
                return Err(Error::state(
                    "the DDL trigger needs PostgreSQL 14 or later (logical messages in pgoutput)",
                ));
            }
            let tx = c
                .transaction()
                .await
                .map_err(pg_err("cannot begin a transaction"))?;
            tx.batch_execute(INSTALL).await.map_err(|e| {
                let denied = e
                    .as_db_error()
                    .is_some_and(|d| d.code() == &tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE);
                if denied {
                    Error::new(
                        ErrorKind::Database,
                        "installing the DDL trigger needs the right to create event triggers (a superuser in PostgreSQL 15): run mooncdc-capture init --ddl as one; nothing was installed",
                    )
                    .with_source(Cause {
                        text: e.to_string(),
                        inner: e,
                    })
                } else {
                    pg_err("cannot install the DDL trigger")(e)
                }
            })?;
            tx.commit()
                .await
                .map_err(pg_err("cannot install the DDL trigger"))?;
            Ok("DDL trigger installed: ALTER TABLE on captured tables is described in the stream (renames carried)".to_string())
        })
    }
}
