//! A decoder for the `pgoutput` logical replication messages (protocol
//! versions 1, 2 and 4, without two-phase), as PostgreSQL documents them
//! under "Logical Replication Message Formats". Every read is checked: a
//! short, oversized or unknown message is an error, never a panic.
//!
//! With streaming (protocol 2 and later), a transaction in progress comes
//! in blocks between Stream Start and Stream Stop, and each of its row,
//! relation, type and logical messages carries the (sub)transaction's xid
//! right after its tag; [`in_stream`] takes that xid off, leaving the
//! message as protocol 1 has it, so one decoder reads both.

use std::fmt;

/// One column of a Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelColumn {
    pub key: bool,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

/// A table's description, sent before its first row change in a session and
/// again when it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
    pub replica_identity: u8,
    pub columns: Vec<RelColumn>,
}

/// One value of a tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Null,
    /// An unchanged TOASTed value that the server did not send.
    Unchanged,
    Text(Vec<u8>),
    Binary(Vec<u8>),
}

pub type Tuple = Vec<Cell>;

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Begin {
        final_lsn: u64,
        timestamp: i64,
        xid: u32,
    },
    Commit {
        flags: u8,
        commit_lsn: u64,
        end_lsn: u64,
        timestamp: i64,
    },
    Origin {
        lsn: u64,
        name: String,
    },
    Relation(Relation),
    Type {
        oid: u32,
        namespace: String,
        name: String,
    },
    Insert {
        relation: u32,
        new: Tuple,
    },
    /// `old` is the key (`K`) or the whole old row (`O`), when sent.
    Update {
        relation: u32,
        old: Option<(u8, Tuple)>,
        new: Tuple,
    },
    Delete {
        relation: u32,
        old: (u8, Tuple),
    },
    Truncate {
        options: u8,
        relations: Vec<u32>,
    },
    Message {
        flags: u8,
        lsn: u64,
        prefix: String,
        content: Vec<u8>,
    },
    /// A block of a streamed transaction in progress begins.
    StreamStart {
        xid: u32,
        first_segment: bool,
    },
    /// The block ends.
    StreamStop,
    /// A streamed transaction committed.
    StreamCommit {
        xid: u32,
        flags: u8,
        commit_lsn: u64,
        end_lsn: u64,
        timestamp: i64,
    },
    /// A streamed transaction (`subxid == xid`) or one of its
    /// subtransactions rolled back. With `streaming = parallel` (protocol 4)
    /// the abort's position and time follow; they are not needed here.
    StreamAbort {
        xid: u32,
        subxid: u32,
    },
}

/// A message inside a stream block: the xid of the (sub)transaction it
/// belongs to, and the message without it (as protocol 1 has it). Stream
/// control messages and anything else carry no xid: `None`.
pub fn in_stream(buf: &[u8]) -> Result<Option<(u32, Vec<u8>)>, DecodeError> {
    match buf.first() {
        Some(b'I' | b'U' | b'D' | b'T' | b'R' | b'Y' | b'M') => {}
        _ => return Ok(None),
    }
    if buf.len() < 5 {
        return Err(DecodeError(format!(
            "a streamed message needs a transaction id after its tag, but has {} bytes",
            buf.len()
        )));
    }
    let xid = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let mut plain = Vec::with_capacity(buf.len() - 4);
    plain.push(buf[0]);
    plain.extend_from_slice(&buf[5..]);
    Ok(Some((xid, plain)))
}

/// Decode a message that may be large, taking a logical message's content
/// from `buf` itself instead of copying it (a 40 MiB message then stands in
/// memory once, not twice).
pub fn decode_owned(mut buf: Vec<u8>) -> Result<Message, DecodeError> {
    if buf.first() != Some(&b'M') {
        return decode(&buf);
    }
    let mut r = Reader { buf: &buf, pos: 1 };
    let (flags, lsn, prefix, len) = r.message_head()?;
    let start = r.pos;
    r.take(len, "Message content")?;
    if r.pos != buf.len() {
        return Err(DecodeError(format!(
            "{} bytes after the end of a Message",
            buf.len() - r.pos
        )));
    }
    buf.drain(..start);
    Ok(Message::Message {
        flags,
        lsn,
        prefix,
        content: buf,
    })
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed pgoutput message: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// Most columns a table can have in PostgreSQL.
const MAX_COLUMNS: usize = 1664;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                DecodeError(format!(
                    "{what} needs {n} bytes at offset {} but the message has {}",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn string(&mut self, what: &str) -> Result<String, DecodeError> {
        let rest = &self.buf[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| DecodeError(format!("{what} is not NUL-terminated")))?;
        let s = std::str::from_utf8(&rest[..n])
            .map_err(|_| DecodeError(format!("{what} is not valid UTF-8")))?
            .to_string();
        self.pos += n + 1;
        Ok(s)
    }
    fn done(&self, what: &str) -> Result<(), DecodeError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(DecodeError(format!(
                "{what} has {} unexpected trailing bytes",
                self.buf.len() - self.pos
            )))
        }
    }
    fn tuple(&mut self) -> Result<Tuple, DecodeError> {
        let n = self.u16("tuple column count")? as usize;
        if n > MAX_COLUMNS {
            return Err(DecodeError(format!(
                "tuple has {n} columns, more than PostgreSQL allows"
            )));
        }
        let mut cells = Vec::with_capacity(n);
        for i in 0..n {
            let kind = self.u8("tuple column kind")?;
            cells.push(match kind {
                b'n' => Cell::Null,
                b'u' => Cell::Unchanged,
                b't' | b'b' => {
                    let len = self.u32("tuple value length")? as usize;
                    let v = self.take(len, "tuple value")?.to_vec();
                    if kind == b't' {
                        Cell::Text(v)
                    } else {
                        Cell::Binary(v)
                    }
                }
                other => {
                    return Err(DecodeError(format!(
                        "column {} has unknown kind byte 0x{other:02x}",
                        i + 1
                    )))
                }
            });
        }
        Ok(cells)
    }
}

/// The messages with a body of their own, each read whole.
impl Reader<'_> {
    /// A Relation: the table and its columns.
    fn relation(&mut self) -> Result<Relation, DecodeError> {
        let oid = self.u32("Relation id")?;
        let namespace = self.string("Relation namespace")?;
        let name = self.string("Relation name")?;
        let replica_identity = self.u8("Relation replica identity")?;
        let n = self.u16("Relation column count")? as usize;
        if n > MAX_COLUMNS {
            return Err(DecodeError(format!(
                "Relation has {n} columns, more than PostgreSQL allows"
            )));
        }
        let mut columns = Vec::with_capacity(n);
        for _ in 0..n {
            let flags = self.u8("Relation column flags")?;
            columns.push(RelColumn {
                key: flags & 1 == 1,
                name: self.string("Relation column name")?,
                type_oid: self.u32("Relation column type")?,
                type_modifier: self.u32("Relation column type modifier")? as i32,
            });
        }
        Ok(Relation {
            oid,
            namespace,
            name,
            replica_identity,
            columns,
        })
    }

    fn insert(&mut self) -> Result<Message, DecodeError> {
        let relation = self.u32("Insert relation id")?;
        match self.u8("Insert tuple marker")? {
            b'N' => Ok(Message::Insert {
                relation,
                new: self.tuple()?,
            }),
            other => Err(DecodeError(format!(
                "Insert expects 'N', got 0x{other:02x}"
            ))),
        }
    }

    /// An Update: the old row or key if sent ('O' or 'K'), then the new.
    fn update(&mut self) -> Result<Message, DecodeError> {
        let relation = self.u32("Update relation id")?;
        let mut marker = self.u8("Update tuple marker")?;
        let old = if marker == b'K' || marker == b'O' {
            let kind = marker;
            let t = self.tuple()?;
            marker = self.u8("Update new tuple marker")?;
            Some((kind, t))
        } else {
            None
        };
        if marker != b'N' {
            return Err(DecodeError(format!(
                "Update expects 'N', got 0x{marker:02x}"
            )));
        }
        Ok(Message::Update {
            relation,
            old,
            new: self.tuple()?,
        })
    }

    fn delete(&mut self) -> Result<Message, DecodeError> {
        let relation = self.u32("Delete relation id")?;
        let kind = self.u8("Delete tuple marker")?;
        if kind != b'K' && kind != b'O' {
            return Err(DecodeError(format!(
                "Delete expects 'K' or 'O', got 0x{kind:02x}"
            )));
        }
        Ok(Message::Delete {
            relation,
            old: (kind, self.tuple()?),
        })
    }

    fn truncate(&mut self) -> Result<Message, DecodeError> {
        let n = self.u32("Truncate relation count")? as usize;
        let options = self.u8("Truncate options")?;
        if n > self.buf.len() / 4 {
            return Err(DecodeError(format!(
                "Truncate claims {n} relations in {} bytes",
                self.buf.len()
            )));
        }
        let mut relations = Vec::with_capacity(n);
        for _ in 0..n {
            relations.push(self.u32("Truncate relation id")?);
        }
        Ok(Message::Truncate { options, relations })
    }

    /// A logical message up to its content: flags, LSN, prefix, and the
    /// content's length.
    fn message_head(&mut self) -> Result<(u8, u64, String, usize), DecodeError> {
        Ok((
            self.u8("Message flags")?,
            self.u64("Message LSN")?,
            self.string("Message prefix")?,
            self.u32("Message length")? as usize,
        ))
    }
}

/// Decode one message.
pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let tag = r.u8("message tag")?;
    let m = match tag {
        b'B' => Message::Begin {
            final_lsn: r.u64("Begin final LSN")?,
            timestamp: r.u64("Begin timestamp")? as i64,
            xid: r.u32("Begin xid")?,
        },
        b'C' => Message::Commit {
            flags: r.u8("Commit flags")?,
            commit_lsn: r.u64("Commit LSN")?,
            end_lsn: r.u64("Commit end LSN")?,
            timestamp: r.u64("Commit timestamp")? as i64,
        },
        b'O' => Message::Origin {
            lsn: r.u64("Origin LSN")?,
            name: r.string("Origin name")?,
        },
        b'R' => Message::Relation(r.relation()?),
        b'Y' => Message::Type {
            oid: r.u32("Type id")?,
            namespace: r.string("Type namespace")?,
            name: r.string("Type name")?,
        },
        b'I' => r.insert()?,
        b'U' => r.update()?,
        b'D' => r.delete()?,
        b'T' => r.truncate()?,
        b'M' => {
            let (flags, lsn, prefix, len) = r.message_head()?;
            let content = r.take(len, "Message content")?.to_vec();
            Message::Message {
                flags,
                lsn,
                prefix,
                content,
            }
        }
        b'S' => Message::StreamStart {
            xid: r.u32("Stream Start xid")?,
            first_segment: r.u8("Stream Start first segment")? == 1,
        },
        b'E' => Message::StreamStop,
        b'c' => Message::StreamCommit {
            xid: r.u32("Stream Commit xid")?,
            flags: r.u8("Stream Commit flags")?,
            commit_lsn: r.u64("Stream Commit LSN")?,
            end_lsn: r.u64("Stream Commit end LSN")?,
            timestamp: r.u64("Stream Commit timestamp")? as i64,
        },
        b'A' => {
            let m = Message::StreamAbort {
                xid: r.u32("Stream Abort xid")?,
                subxid: r.u32("Stream Abort subtransaction xid")?,
            };
            // streaming = parallel adds the abort LSN and time.
            if buf.len() == 25 {
                r.u64("Stream Abort LSN")?;
                r.u64("Stream Abort timestamp")?;
            }
            m
        }
        other => return Err(DecodeError(format!("unknown message tag 0x{other:02x}"))),
    };
    r.done("message")?;
    Ok(m)
}

#[cfg(test)]
mod tests;
