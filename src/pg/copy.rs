//! COPY's output decoded to wire values: the binary form where every
//! column's type has one read here (REAL bits as stored, integers, bytes),
//! else the text form.

use super::*;

/// A column's binary COPY form, for the types read in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bin {
    /// int2, int4, int8 (told apart by their length).
    Int,
    Float4,
    Float8,
    Bool,
    Bytea,
    /// text and varchar: the UTF-8 bytes.
    Text,
}

/// The binary form of a declared type (`format_type`'s text), if read here.
pub(crate) fn bin_of(decl: &str) -> Option<Bin> {
    Some(match decl {
        "bigint" | "integer" | "smallint" => Bin::Int,
        "real" => Bin::Float4,
        "double precision" => Bin::Float8,
        "boolean" => Bin::Bool,
        "bytea" => Bin::Bytea,
        "text" => Bin::Text,
        // `character varying(20)[]` is an array: its binary form is not text.
        d if d == "character varying"
            || d.strip_prefix("character varying(")
                .and_then(|r| r.strip_suffix(')'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit())) =>
        {
            Bin::Text
        }
        _ => return None,
    })
}

/// One value of binary COPY, as the text path would give it.
fn from_binary(b: Bin, v: &[u8]) -> std::result::Result<Value, String> {
    let real = |x: f64| {
        if x.is_finite() {
            // The sign of zero too: PostgreSQL keeps it.
            Ok(Value::Real(x))
        } else {
            // Named as PostgreSQL writes it, as the text form's message does.
            let name = if x.is_nan() {
                "NaN"
            } else if x > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            };
            Err(format!(
                "REAL value {name} cannot be carried (only finite REAL values can)"
            ))
        }
    };
    Ok(match (b, v.len()) {
        (Bin::Int, 2) => Value::Integer(i16::from_be_bytes([v[0], v[1]]).into()),
        (Bin::Int, 4) => Value::Integer(i32::from_be_bytes(v.try_into().expect("4 bytes")).into()),
        (Bin::Int, 8) => Value::Integer(i64::from_be_bytes(v.try_into().expect("8 bytes"))),
        (Bin::Float4, 4) => real(f32::from_be_bytes(v.try_into().expect("4 bytes")).into())?,
        (Bin::Float8, 8) => real(f64::from_be_bytes(v.try_into().expect("8 bytes")))?,
        (Bin::Bool, 1) => Value::Integer(i64::from(v[0] != 0)),
        (Bin::Bytea, _) => Value::Blob(v.to_vec()),
        (Bin::Text, _) => Value::Text(
            std::str::from_utf8(v)
                .map_err(|_| "value is not valid UTF-8".to_string())?
                .to_string(),
        ),
        (b, n) => return Err(format!("binary COPY gave {n} bytes for a {b:?} value")),
    })
}

/// What the start of a binary COPY buffer holds.
#[derive(Debug, PartialEq)]
enum BinStep {
    /// Not all of the next item yet.
    More,
    /// The header, of so many bytes.
    Header(usize),
    /// A row, of so many bytes.
    Row(usize, Row),
    /// The trailer (2 bytes).
    Trailer(usize),
}

/// Read the next item of binary COPY at the start of `b`: the header first,
/// then rows with one field per column (`kinds`), then the trailer.
fn binary_step(b: &[u8], header_read: bool, kinds: &[Bin]) -> std::result::Result<BinStep, String> {
    if !header_read {
        const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
        if b.len() < SIGNATURE.len() + 8 {
            return Ok(BinStep::More);
        }
        if &b[..SIGNATURE.len()] != SIGNATURE {
            return Err("has no signature".into());
        }
        let at = SIGNATURE.len();
        let flags = u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        // Bits 16-31 are critical: a reader that does not know one must stop
        // (bit 16: OIDs included).
        if flags >> 16 != 0 {
            return Err(format!(
                "has header flags {flags:#x} this reader does not know"
            ));
        }
        let ext = u32::from_be_bytes(b[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
        if b.len() < at + 8 + ext {
            return Ok(BinStep::More);
        }
        return Ok(BinStep::Header(at + 8 + ext));
    }
    if b.len() < 2 {
        return Ok(BinStep::More);
    }
    let n = i16::from_be_bytes([b[0], b[1]]);
    if n == -1 {
        return Ok(BinStep::Trailer(2));
    }
    if n < 0 || n as usize != kinds.len() {
        return Err(format!("row has {n} fields, not {}", kinds.len()));
    }
    let mut at = 2;
    let mut row = Vec::with_capacity(kinds.len());
    for &k in kinds {
        if b.len() < at + 4 {
            return Ok(BinStep::More);
        }
        let len = i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        at += 4;
        if len == -1 {
            row.push(Value::Null);
            continue;
        }
        if len < 0 {
            return Err(format!("gave a field of length {len}"));
        }
        let len = len as usize;
        if b.len() < at + len {
            return Ok(BinStep::More);
        }
        row.push(from_binary(k, &b[at..at + len])?);
        at += len;
    }
    Ok(BinStep::Row(at, row))
}

/// Rows of a `COPY … TO STDOUT` stream, decoded to wire values.
pub struct CopyRows {
    pub(crate) stream: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
    pub(crate) classes: Vec<Class>,
    pub(crate) table: String,
    pub(crate) buf: Vec<u8>,
    /// Where the next row starts in `buf`: rows are read in place, and what
    /// was read is dropped once per chunk, not once per row.
    pub(crate) pos: usize,
    pub(crate) done: bool,
    /// COPY's binary form, with each column's reading; `None`: text form.
    pub(crate) binary: Option<Vec<Bin>>,
    /// Whether the binary form's header was read.
    pub(crate) header_read: bool,
}

impl CopyRows {
    pub fn new(
        stream: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
        classes: Vec<Class>,
        table: String,
    ) -> Self {
        CopyRows {
            stream,
            classes,
            table,
            buf: Vec::new(),
            pos: 0,
            done: false,
            binary: None,
            header_read: false,
        }
    }

    /// The next row of binary COPY in `buf`, if it is all there:
    /// `Some(None)` at the trailer.
    fn binary_row(&mut self) -> Result<Option<Option<Row>>> {
        let kinds = self.binary.as_ref().expect("binary form");
        loop {
            let step = binary_step(&self.buf[self.pos..], self.header_read, kinds)
                .map_err(|e| Error::data(format!("table {:?}: binary COPY {e}", self.table)))?;
            match step {
                BinStep::More => return Ok(None),
                BinStep::Header(n) => {
                    self.pos += n;
                    self.header_read = true;
                }
                BinStep::Row(n, row) => {
                    self.pos += n;
                    return Ok(Some(Some(row)));
                }
                BinStep::Trailer(n) => {
                    self.pos += n;
                    return Ok(Some(None));
                }
            }
        }
    }

    pub async fn next(&mut self) -> Result<Option<Row>> {
        loop {
            if self.binary.is_some() {
                match self.binary_row()? {
                    Some(Some(row)) => return Ok(Some(row)),
                    // The trailer: nothing may follow it.
                    Some(None) => {
                        self.done = true;
                        self.binary = None;
                        self.buf.drain(..self.pos);
                        self.pos = 0;
                        while let Some(chunk) = self.stream.next().await {
                            self.buf
                                .extend_from_slice(&chunk.map_err(pg_err("COPY failed"))?);
                        }
                        if !self.buf.is_empty() {
                            return Err(Error::data(format!(
                                "table {:?}: binary COPY goes on after its trailer",
                                self.table
                            )));
                        }
                        return Ok(None);
                    }
                    None => {}
                }
            } else if let Some(i) = memchr::memchr(b'\n', &self.buf[self.pos..]) {
                let line = &self.buf[self.pos..self.pos + i];
                self.pos += i + 1;
                let fields = copy_fields(line)
                    .map_err(|e| Error::data(format!("table {:?}: {e}", self.table)))?;
                if fields.len() != self.classes.len() {
                    return Err(Error::data(format!(
                        "table {:?}: COPY row has {} fields",
                        self.table,
                        fields.len()
                    )));
                }
                let row = fields
                    .iter()
                    .zip(&self.classes)
                    .map(|(f, c)| from_text(*c, f.as_deref()))
                    .collect::<std::result::Result<Row, String>>()
                    .map_err(|e| Error::data(format!("table {:?}: {e}", self.table)))?;
                return Ok(Some(row));
            }
            // Everything before `pos` was read: drop it before reading more.
            self.buf.drain(..self.pos);
            self.pos = 0;
            if self.done {
                if !self.buf.is_empty() {
                    return Err(Error::data(format!(
                        "table {:?}: COPY ended inside a row",
                        self.table
                    )));
                }
                if self.binary.is_some() {
                    return Err(Error::data(format!(
                        "table {:?}: binary COPY ended without its trailer",
                        self.table
                    )));
                }
                return Ok(None);
            }
            match self.stream.next().await {
                Some(chunk) => self
                    .buf
                    .extend_from_slice(&chunk.map_err(pg_err("COPY failed"))?),
                None => self.done = true,
            }
        }
    }
}

#[cfg(test)]
mod binary_tests {
    use super::{bin_of, binary_step, from_binary, Bin, BinStep};
    use crate::wire::Value;

    /// A binary COPY stream: header (with an extension area), rows, trailer.
    fn copy_bytes(rows: &[Vec<Option<Vec<u8>>>], flags: u32) -> Vec<u8> {
        let mut b = b"PGCOPY\n\xff\r\n\0".to_vec();
        b.extend(flags.to_be_bytes());
        b.extend(3u32.to_be_bytes());
        b.extend([9, 9, 9]);
        for r in rows {
            b.extend((r.len() as i16).to_be_bytes());
            for f in r {
                match f {
                    None => b.extend((-1i32).to_be_bytes()),
                    Some(v) => {
                        b.extend((v.len() as i32).to_be_bytes());
                        b.extend(v);
                    }
                }
            }
        }
        b.extend((-1i16).to_be_bytes());
        b
    }

    /// Read a stream that arrives `chunk` bytes at a time, as `CopyRows` does.
    fn read_all(bytes: &[u8], kinds: &[Bin], chunk: usize) -> Result<Vec<Vec<Value>>, String> {
        let (mut buf, mut fed, mut pos, mut header, mut rows) = (Vec::new(), 0, 0, false, vec![]);
        loop {
            match binary_step(&buf[pos..], header, kinds)? {
                BinStep::More => {
                    assert!(fed < bytes.len(), "more asked for at the end");
                    let n = chunk.min(bytes.len() - fed);
                    buf.extend_from_slice(&bytes[fed..fed + n]);
                    fed += n;
                }
                BinStep::Header(n) => {
                    pos += n;
                    header = true;
                }
                BinStep::Row(n, r) => {
                    pos += n;
                    rows.push(r);
                }
                BinStep::Trailer(n) => {
                    assert_eq!(pos + n, buf.len(), "the trailer ends what was fed");
                    return Ok(rows);
                }
            }
        }
    }

    #[test]
    fn binary_copy_read_in_any_pieces() {
        let kinds = [Bin::Int, Bin::Text, Bin::Float8, Bin::Bytea];
        let rows = vec![
            vec![
                Some(7i64.to_be_bytes().to_vec()),
                Some("é\u{1F600}".as_bytes().to_vec()),
                Some(0.1f64.to_be_bytes().to_vec()),
                Some(vec![]),
            ],
            vec![Some(i64::MIN.to_be_bytes().to_vec()), None, None, None],
        ];
        let bytes = copy_bytes(&rows, 0);
        let want = vec![
            vec![
                Value::Integer(7),
                Value::Text("é\u{1F600}".into()),
                Value::Real(0.1),
                Value::Blob(vec![]),
            ],
            vec![
                Value::Integer(i64::MIN),
                Value::Null,
                Value::Null,
                Value::Null,
            ],
        ];
        for chunk in [1, 2, 3, 7, 19, bytes.len()] {
            let got = read_all(&bytes, &kinds, chunk).unwrap();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!(g.iter().zip(w).all(|(a, b)| a.same(b)), "{g:?} {w:?}");
            }
        }
        // Refused: OIDs (a critical header flag), a row of the wrong width, a
        // negative length other than -1 (NULL).
        let e = read_all(&copy_bytes(&rows, 1 << 16), &kinds, 5).unwrap_err();
        assert!(e.contains("header flags"), "{e}");
        let e = read_all(&copy_bytes(&rows[1..], 0), &kinds[..3], 5).unwrap_err();
        assert!(e.contains("4 fields, not 3"), "{e}");
        let mut bad = copy_bytes(&rows[1..], 0);
        let at = 19 + 3 + 2 + 4 + 8;
        bad[at..at + 4].copy_from_slice(&(-2i32).to_be_bytes());
        let e = read_all(&bad, &kinds, 64).unwrap_err();
        assert!(e.contains("length -2"), "{e}");
        // Not a binary COPY at all.
        assert!(binary_step(b"id\tname\n1\ta\n\\.\n........", false, &kinds).is_err());
    }

    #[test]
    fn binary_values_read_as_the_text_form_gives_them() {
        assert_eq!(bin_of("integer"), Some(Bin::Int));
        assert_eq!(bin_of("character varying(20)"), Some(Bin::Text));
        assert_eq!(bin_of("numeric(10,2)"), None);
        assert_eq!(bin_of("integer[]"), None);
        assert_eq!(bin_of("character varying(20)[]"), None);
        assert_eq!(bin_of("character varying[]"), None);
        assert_eq!(bin_of("character varying"), Some(Bin::Text));
        assert_eq!(bin_of("text[]"), None);
        assert_eq!(
            from_binary(Bin::Int, &(-2i16).to_be_bytes()),
            Ok(Value::Integer(-2))
        );
        assert_eq!(
            from_binary(Bin::Int, &i32::MIN.to_be_bytes()),
            Ok(Value::Integer(i32::MIN.into()))
        );
        assert_eq!(
            from_binary(Bin::Int, &i64::MAX.to_be_bytes()),
            Ok(Value::Integer(i64::MAX))
        );
        let x = f64::from_bits(0x0000_0000_0000_0001);
        assert_eq!(
            from_binary(Bin::Float8, &x.to_be_bytes()),
            Ok(Value::Real(x))
        );
        assert!(from_binary(Bin::Float8, &(-0.0f64).to_be_bytes())
            .unwrap()
            .same(&Value::Real(-0.0)));
        assert_eq!(
            from_binary(Bin::Float4, &1.1f32.to_be_bytes()),
            Ok(Value::Real(f64::from(1.1f32)))
        );
        assert_eq!(from_binary(Bin::Bool, &[1]), Ok(Value::Integer(1)));
        assert_eq!(
            from_binary(Bin::Bytea, &[0, 255]),
            Ok(Value::Blob(vec![0, 255]))
        );
        assert_eq!(
            from_binary(Bin::Text, "é\u{1F600}".as_bytes()),
            Ok(Value::Text("é\u{1F600}".into()))
        );
        assert!(from_binary(Bin::Text, &[0xc3])
            .unwrap_err()
            .contains("UTF-8"));
        assert!(from_binary(Bin::Float8, &f64::INFINITY.to_be_bytes())
            .unwrap_err()
            .contains("Infinity"));
        assert!(from_binary(Bin::Float4, &f32::NAN.to_be_bytes())
            .unwrap_err()
            .contains("NaN"));
        assert!(from_binary(Bin::Int, &[1, 2, 3]).is_err());
    }
}
