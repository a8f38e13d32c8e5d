//! The stored cursor: `_mooncdc_cursor`, written after a batch's rows.

use super::*;

impl ClickHouse {
    /// Whether `table` holds rows (deleted ones only, with `deleted`) at a
    /// version past the stored cursor, read now: rows of a batch not
    /// finished (an apply writing it, or one stopped amid it).
    pub(super) fn rows_past_cursor(&self, table: &str, deleted: bool) -> Result<bool> {
        let cursor = match self.cursor()? {
            Some(c) => version(SourceKind::of_identity(&c.source), c.sequence())?,
            None => 0,
        };
        let n =
            self.query(
                &format!(
                "SELECT count() FROM {}.{} WHERE {}`_etl_version` > {cursor} FORMAT TabSeparated",
                qi(&self.cfg.database),
                qi(table),
                if deleted { "`_etl_deleted` = 1 AND " } else { "" }
            ),
                None,
                Timeout::Insert,
            )?;
        Ok(String::from_utf8_lossy(&n).trim() != "0")
    }

    /// The stored cursor, if any.
    pub fn cursor(&self) -> Result<Option<Cursor>> {
        // Looked up once: a follower reads the cursor every fraction of a
        // second, and the table, once there, stays.
        if !self.cursor_table.get() && !self.cursor_table_found()? {
            return Ok(None);
        }
        let v = self.query(
            &format!(
                "SELECT source, sequence FROM {}.`_mooncdc_cursor` ORDER BY seq_hi DESC, seq_lo DESC LIMIT 1 FORMAT TabSeparated",
                qi(&self.cfg.database)
            ),
            None,
            Timeout::Schema,
        )?;
        let text = String::from_utf8_lossy(&v);
        let Some(line) = text.lines().next() else {
            return Ok(None);
        };
        let (src, seq) = line
            .split_once('\t')
            .ok_or_else(|| Error::data("the stored cursor row is malformed"))?;
        let seq = crate::wire::model::parse_sequence(seq).map_err(Error::data)?;
        Ok(Some(Cursor::new(tsv_unescape(src), seq)))
    }

    pub(super) fn set_cursor(&self, c: &Cursor) -> Result<()> {
        let mut body = Vec::new();
        for s in [c.source.as_bytes(), c.sequence().to_string().as_bytes()] {
            leb128(&mut body, s.len() as u64);
            body.extend_from_slice(s);
        }
        body.extend(((c.sequence() >> 64) as u64).to_le_bytes());
        body.extend((c.sequence() as u64).to_le_bytes());
        self.query(
            &format!("INSERT INTO {}.`_mooncdc_cursor` (source, sequence, seq_hi, seq_lo) FORMAT RowBinary", qi(&self.cfg.database)),
            Some(body),
            Timeout::Insert,
        )?;
        Ok(())
    }
}
