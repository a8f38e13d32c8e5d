//! `mooncdc-apply cleanup`: the replacing engine's cleanup merge, which
//! removes deleted rows (and the older versions of their keys) from
//! storage on tables whose engine knows `_etl_deleted`
//! (docs/CLICKHOUSE.md, "Deleted rows and cleanup").

use super::*;

/// What the cleanup did to one table.
#[derive(Debug, Clone)]
pub struct Cleaned {
    /// The ClickHouse table.
    pub table: String,
    /// Rows and deleted rows (markers included) before and after.
    pub before: (u64, u64),
    pub after: (u64, u64),
    /// Why it was left alone, when it was.
    pub skipped: Option<String>,
}

impl ClickHouse {
    /// Run the cleanup merge on every replacing table of the database (or
    /// those of the source tables named), one at a time; `done` hears of
    /// each table as it is finished. The merge has a day: it rewrites the
    /// whole table, and a client that gave up early would leave it running
    /// while a retry started another.
    pub fn cleanup(&self, only: &[String], done: &mut dyn FnMut(&Cleaned)) -> Result<()> {
        let db = qi(&self.cfg.database);
        let v = self.query(
            &format!(
                "SELECT name, engine_full FROM system.tables WHERE database = {} AND engine LIKE '%ReplacingMergeTree' ORDER BY name FORMAT TabSeparated",
                sql_string(&self.cfg.database)
            ),
            None,
            Timeout::Schema,
        )?;
        let tables: Vec<(String, String)> = String::from_utf8_lossy(&v)
            .lines()
            .filter_map(|l| {
                let (n, e) = l.split_once('\t')?;
                Some((tsv_unescape(n), tsv_unescape(e)))
            })
            .collect();
        let wanted: Vec<String> = only.iter().map(|t| self.stored(&table_name(t))).collect();
        for (t, w) in only.iter().zip(&wanted) {
            if !tables.iter().any(|(n, _)| n == w) {
                return Err(Error::usage(format!(
                    "source table {t:?} has no replacing table in ClickHouse database {} (looked for {w})",
                    self.cfg.database
                )));
            }
        }
        let setting = "allow_experimental_replacing_merge_with_cleanup";
        let gated = {
            let v = self.query(
                &format!(
                    "SELECT count() FROM system.merge_tree_settings WHERE name = {} FORMAT TabSeparated",
                    sql_string(setting)
                ),
                None,
                Timeout::Schema,
            )?;
            String::from_utf8_lossy(&v).trim() == "1"
        };
        let on = self.on_cluster();
        for (name, engine_full) in tables {
            if !wanted.is_empty() && !wanted.contains(&name) {
                continue;
            }
            // Reads go through the table a target writes (the Distributed
            // one on a cluster); the merge runs on the table that stores.
            let shown = match &self.cluster {
                Some(_) => match name.strip_suffix("_local") {
                    Some(t) => t.to_string(),
                    None => continue,
                },
                None => name.clone(),
            };
            let count = || -> Result<(u64, u64)> {
                let v = self.query(
                    &format!(
                        "SELECT count(), countIf(`_etl_deleted` = 1) FROM {db}.{} FORMAT TabSeparated",
                        qi(&shown)
                    ),
                    None,
                    Timeout::Insert,
                )?;
                let v = String::from_utf8_lossy(&v);
                let bad =
                    || Error::data(format!("ClickHouse answered {v:?} to a count of {shown}"));
                let mut f = v
                    .trim()
                    .split('\t')
                    .map(|x| x.parse::<u64>().map_err(|_| bad()));
                Ok((f.next().ok_or_else(bad)??, f.next().ok_or_else(bad)??))
            };
            let params = engine_full
                .split_once("ReplacingMergeTree(")
                .and_then(|(_, r)| r.split_once(')'))
                .map_or("", |(p, _)| p);
            if !params.contains("_etl_deleted") {
                let c = count()?;
                done(&Cleaned {
                    table: shown,
                    before: c,
                    after: c,
                    skipped: Some(
                        "made without the deleted-row column (an earlier MoonCDC, or a server before 23.2): FINAL still returns its deleted rows and the cleanup merge cannot remove them; query its __current view, or move it to a table of the current engine (docs/CLICKHOUSE.md, Deleted rows and cleanup)".into(),
                    ),
                });
                continue;
            }
            let before = count()?;
            // Deleted rows past the cursor (read now: a follower moves it
            // while earlier tables merge) are a batch's that is not finished
            // (an apply writing it, or one stopped amid it): its re-run
            // reads them for the changes it names by key alone, so they stay.
            if self.rows_past_cursor(&shown, true)? {
                done(&Cleaned {
                    table: shown,
                    before,
                    after: before,
                    skipped: Some(
                        "it holds deleted rows past the cursor, of a batch not finished (an apply writing it, or one stopped amid it), whose re-run reads them: apply to the end of that batch, then clean up (docs/CLICKHOUSE.md, Deleted rows and cleanup)".into(),
                    ),
                });
                continue;
            }
            if gated && !engine_full.contains(&format!("{setting} = 1")) {
                self.query(
                    &format!(
                        "ALTER TABLE {db}.{}{on} MODIFY SETTING {setting} = 1",
                        qi(&name)
                    ),
                    None,
                    Timeout::Ddl,
                )?;
            }
            self.query(
                &format!("OPTIMIZE TABLE {db}.{}{on} FINAL CLEANUP", qi(&name)),
                None,
                Timeout::Merge,
            )?;
            let after = count()?;
            done(&Cleaned {
                table: shown,
                before,
                after,
                skipped: None,
            });
        }
        Ok(())
    }
}
