//! Writing snapshots (docs/FORMAT.md §8): the JSONL lines and the JSON
//! document's pieces, byte for byte as every tool writes them, and
//! [`SnapshotWriter`], which writes a snapshot table by table.

use super::model::{write_cursor, write_schema, write_schemas, Cursor, Schema};
use super::snapshot::{JSONL_FORMAT, JSON_FORMAT};
use super::value::{write_json_str, write_row, Value};

pub fn write_snapshot_header_line(out: &mut Vec<u8>, cursor: &Cursor, schemas: &[Schema]) {
    out.extend_from_slice(b"{\"kind\":\"header\",\"format\":\"");
    out.extend_from_slice(JSONL_FORMAT.as_bytes());
    out.extend_from_slice(b"\",\"cursor\":");
    write_cursor(out, cursor);
    out.extend_from_slice(b",\"schemas\":");
    write_schemas(out, schemas);
    out.extend_from_slice(b"}\n");
}

pub fn write_snapshot_row_line(out: &mut Vec<u8>, table: &str, row: &[Value]) {
    out.extend_from_slice(b"{\"kind\":\"row\",\"table\":");
    write_json_str(out, table);
    out.extend_from_slice(b",\"row\":");
    write_row(out, row);
    out.extend_from_slice(b"}\n");
}

pub fn write_snapshot_commit_line(out: &mut Vec<u8>, count: u64) {
    out.extend_from_slice(b"{\"kind\":\"commit\",\"count\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
    out.extend_from_slice(b"\"}\n");
}

/// The JSON snapshot document's opening, up to its `tables` array.
pub fn write_snapshot_json_open(out: &mut Vec<u8>, cursor: &Cursor) {
    out.extend_from_slice(b"{\"format\":\"");
    out.extend_from_slice(JSON_FORMAT.as_bytes());
    out.extend_from_slice(b"\",\"cursor\":");
    write_cursor(out, cursor);
    out.extend_from_slice(b",\"tables\":[");
}

/// One table's opening in a JSON snapshot, up to its `rows` array.
pub fn write_snapshot_json_table_open(out: &mut Vec<u8>, schema: &Schema) {
    out.extend_from_slice(b"{\"schema\":");
    write_schema(out, schema);
    out.extend_from_slice(b",\"rows\":[");
}

/// Writes a snapshot, JSONL or JSON, one table at a time: every source's
/// snapshot goes through it, so both formats come out the same way.
pub struct SnapshotWriter<'a> {
    out: &'a mut dyn std::io::Write,
    json: bool,
    buf: Vec<u8>,
    tables: u64,
    rows_in_table: u64,
    count: u64,
    table: String,
}

impl<'a> SnapshotWriter<'a> {
    /// Write the header (JSONL) or the document's opening (JSON).
    pub fn begin(
        out: &'a mut dyn std::io::Write,
        json: bool,
        cursor: &Cursor,
        schemas: &[Schema],
    ) -> std::io::Result<Self> {
        let mut buf = Vec::with_capacity(1 << 16);
        if json {
            write_snapshot_json_open(&mut buf, cursor);
        } else {
            write_snapshot_header_line(&mut buf, cursor, schemas);
        }
        out.write_all(&buf)?;
        buf.clear();
        Ok(SnapshotWriter {
            out,
            json,
            buf,
            tables: 0,
            rows_in_table: 0,
            count: 0,
            table: String::new(),
        })
    }

    /// Start a table; its rows follow in key order.
    pub fn table(&mut self, schema: &Schema) -> std::io::Result<()> {
        self.close_table()?;
        if self.json {
            if self.tables > 0 {
                self.buf.push(b',');
            }
            write_snapshot_json_table_open(&mut self.buf, schema);
        }
        self.tables += 1;
        self.rows_in_table = 0;
        self.table = schema.table.clone();
        Ok(())
    }

    pub fn row(&mut self, row: &[Value]) -> std::io::Result<()> {
        if self.json {
            if self.rows_in_table > 0 {
                self.buf.push(b',');
            }
            write_row(&mut self.buf, row);
        } else {
            write_snapshot_row_line(&mut self.buf, &self.table, row);
        }
        self.rows_in_table += 1;
        self.count += 1;
        if self.buf.len() >= 1 << 16 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// A row already encoded as its JSON array of values (see [`write_row`]).
    pub fn raw_row(&mut self, encoded: &[u8]) -> std::io::Result<()> {
        if self.json {
            if self.rows_in_table > 0 {
                self.buf.push(b',');
            }
            self.buf.extend_from_slice(encoded);
        } else {
            self.buf.extend_from_slice(b"{\"kind\":\"row\",\"table\":");
            write_json_str(&mut self.buf, &self.table);
            self.buf.extend_from_slice(b",\"row\":");
            self.buf.extend_from_slice(encoded);
            self.buf.extend_from_slice(b"}\n");
        }
        self.rows_in_table += 1;
        self.count += 1;
        if self.buf.len() >= 1 << 16 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    fn close_table(&mut self) -> std::io::Result<()> {
        if self.json && self.tables > 0 {
            self.buf.extend_from_slice(b"]}");
        }
        Ok(())
    }

    /// Write the commit (JSONL) or close the document (JSON).
    pub fn finish(mut self) -> std::io::Result<u64> {
        self.close_table()?;
        if self.json {
            self.buf.extend_from_slice(b"]}\n");
        } else {
            write_snapshot_commit_line(&mut self.buf, self.count);
        }
        self.out.write_all(&self.buf)?;
        Ok(self.count)
    }
}
