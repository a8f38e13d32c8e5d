//! Reading backfill messages from the stream: the state at a position, the
//! events each message stands for, the filter, the notes of positions.

use super::super::batch_out::BatchOut;
use super::super::catalog::Catalog;
use super::super::types::{from_text, Class};
use super::super::{lsn_text, parse_lsn, sequence};
use super::window::{committed_before, read_snapshot, Commits, Verdict, Window, READ_WINDOW};
use super::{class_from_name, kept_columns, key_values, requests, TableIs};
use crate::error::{Error, Result};
use crate::pg::pg_err;
use crate::source::backfill::{key_of, key_positions, pass, reaches_beyond, Reached};
use crate::wire::{Event, Operation, Row, Schema, SchemaChange, Sequence};
use std::collections::{HashMap, VecDeque};
use tokio_postgres::Client;

/// A table as a message describes it: its schema and value classes.
pub(crate) type Described = (Schema, Vec<Class>);

/// A message of ours, as the stream reads it.
#[derive(Debug, serde::Deserialize)]
struct Note {
    kind: String,
    request: i64,
    #[serde(default)]
    chunk: i32,
    table: String,
    /// The table's schema and value classes (requests and chunks).
    #[serde(default)]
    table_is: Option<TableIs>,
    #[serde(default)]
    lower: Option<String>,
    #[serde(default)]
    rows: Vec<Vec<Option<String>>>,
    /// Rows in all (done) and why it ended (failed).
    #[serde(default)]
    rows_total: u64,
    #[serde(default)]
    why: Option<String>,
    /// The publication whose pipeline the request is for (none in messages
    /// written before requests named theirs: every pipeline's).
    #[serde(default)]
    publication: Option<String>,
    /// The snapshot a chunk (or an end) read in, as `pg_current_snapshot()`
    /// gives it; none in a chunk read under the table's lock (an older
    /// MoonCDC), whose rows are the table at its commit.
    #[serde(default)]
    snapshot: Option<String>,
    /// A mark: a chunk without rows that only opens a new window.
    #[serde(default)]
    mark: bool,
}

impl Note {
    /// A message's content as a note; one that cannot be read is an error
    /// naming the message's position.
    fn parse(content: &[u8], commit: u64) -> Result<Note> {
        serde_json::from_slice::<Note>(content).map_err(|e| {
            Error::data(format!(
                "a backfill message at {} is unreadable: {e}",
                lsn_text(commit)
            ))
        })
    }

    /// Where the chunk starts: the key of the one before it (none before
    /// the first).
    fn lower_key(&self, schema: &Schema, classes: &[Class]) -> Result<Reached> {
        Ok(match &self.lower {
            None => Reached::Nothing,
            Some(k) => Reached::UpTo(key_values(schema, classes, k)?),
        })
    }

    /// Whether the note is of another pipeline's request (one that names no
    /// publication is every pipeline's).
    fn for_another(&self, publication: &str) -> bool {
        self.publication
            .as_deref()
            .is_some_and(|p| p != publication)
    }

    /// The table as the note describes it, checked: its schema and value
    /// classes (no schema for an end, which need not describe it).
    fn table_described(&self, commit: u64) -> Result<(Option<Schema>, Vec<Class>)> {
        match &self.table_is {
            Some(t) => {
                t.schema.check().map_err(Error::data)?;
                let classes = t
                    .classes
                    .iter()
                    .map(|c| class_from_name(c))
                    .collect::<Result<Vec<_>>>()?;
                if classes.len() != t.schema.columns.len() || t.schema.table != self.table {
                    return Err(Error::data(format!(
                        "a backfill message at {} describes its table inconsistently",
                        lsn_text(commit)
                    )));
                }
                Ok((Some(t.schema.clone()), classes))
            }
            None if self.kind == "done" || self.kind == "failed" => Ok((None, Vec::new())),
            None => Err(Error::data(format!(
                "a backfill message at {} does not describe its table",
                lsn_text(commit)
            ))),
        }
    }
}

/// Where a request, chunk or end was decoded: noted in the backfill tables
/// (once) before the batch that holds it is written.
enum Seen {
    Request(i64),
    /// A chunk (or mark, or end): carried, or discarded with the key its
    /// request goes back to (JSON text, none before the first chunk) and
    /// its rows.
    Chunk(i64, i32, Option<(Option<String>, i64)>),
    Done(i64),
}

/// What a read knows of backfills: the tables being backfilled and how far
/// each has come at the read's position, and (following) the chunk this
/// follower wrote and waits to see.
#[derive(Default)]
pub(crate) struct Backfills {
    /// Each table being backfilled: what it has reached, and its key's
    /// columns by name (a change's key is taken by these names from the
    /// schema it was decoded with).
    pub(super) reached: HashMap<String, (Reached, Vec<String>)>,
    seen: Vec<Seen>,
    /// Chunks this follower wrote and has not decoded yet: (request, chunk).
    pub(super) in_flight: VecDeque<(i64, i32)>,
    /// Each table's reached key as `mooncdc.backfill` keeps it (JSON text,
    /// none before a chunk is carried): where a discarded chunk's request
    /// goes back to.
    upper_text: HashMap<String, Option<String>>,
    /// Whether a request may be waiting for a chunk.
    pub(super) work: bool,
    pub(super) retry_at: Option<std::time::Instant>,
    /// When the follower last said a chunk waits for the table's lock.
    pub(super) busy_said: Option<std::time::Instant>,
    /// Busy tries in a row (the next waits longer, up to a second).
    pub(super) busy_tries: u32,
    pub(super) progress: crate::source::backfill::Progress,
    /// The publication this read follows: messages of another pipeline's
    /// requests are not this stream's.
    pub(super) publication: String,
    /// Each table's window: the left-out changes since its last backfill
    /// message, which a chunk read without a lock may have to write after
    /// its rows (window.rs).
    windows: HashMap<String, Window>,
    /// The transactions committed since the oldest window opened.
    commits: Commits,
    /// The left-out changes of the transaction being read, by table.
    pending: Vec<Event>,
    /// Windows closed at a position (opened at, closed at) a target may
    /// not hold yet: the slot is confirmed no further than just after
    /// where they opened.
    closed: VecDeque<(u64, u64)>,
    /// When a chunk read again was last said.
    again_said: Option<std::time::Instant>,
    /// The message that opened each table's window: (request, its number,
    /// 0 for the request itself).
    opened_by: HashMap<String, (i64, i32)>,
}

/// Whether a message at commit `lsn` is held by a reader at `start`.
fn held(lsn: &str, start: Sequence) -> Result<bool> {
    Ok(sequence(parse_lsn(lsn)? + 1, 0) <= start)
}

impl Backfills {
    /// The backfills in force at `start`: requests a reader decoded at or
    /// before it and not ended there, each at the last key of its last
    /// chunk at or before it.
    pub(crate) async fn load(c: &Client, publication: &str, start: Sequence) -> Result<Backfills> {
        let mut b = Backfills {
            publication: publication.to_string(),
            ..Backfills::default()
        };
        for r in requests(c, publication).await? {
            if !r.done {
                b.work = true;
            }
            let Some(at) = &r.requested_lsn else { continue };
            if !held(at, start)? {
                continue;
            }
            if let Some(d) = &r.done_lsn {
                // A backfill that failed keeps its table where it stopped.
                if held(d, start)? && r.failed.is_none() {
                    b.reached.remove(&r.table);
                    continue;
                }
            }
            // The table as the backfill last described it (it may be gone
            // from the catalog since).
            let Some(sh) = r
                .described
                .as_deref()
                .and_then(|d| serde_json::from_str::<TableIs>(d).ok())
            else {
                return Err(Error::data(format!(
                    "backfill request {} of table {:?} does not describe its table",
                    r.id, r.table
                )));
            };
            let classes = sh
                .classes
                .iter()
                .map(|c| class_from_name(c))
                .collect::<Result<Vec<_>>>()?;
            let chunks = c
                .query(
                    "SELECT upper_key, lsn::text, discarded, chunk FROM mooncdc.backfill_chunks WHERE request = $1 AND lsn IS NOT NULL ORDER BY chunk",
                    &[&r.id],
                )
                .await
                .map_err(pg_err("cannot read backfill chunks"))?;
            let mut reached = Reached::Nothing;
            let mut text = None;
            // The table's window opened at its last message held.
            let mut window = parse_lsn(at)?;
            let mut by = (r.id, 0);
            for ch in &chunks {
                let lsn: &str = ch.get(1);
                if held(lsn, start)? {
                    window = parse_lsn(lsn)?;
                    by = (r.id, ch.get(3));
                    if !ch.get::<_, bool>(2) {
                        // A mark before any chunk carried has no key.
                        text = ch.get::<_, Option<String>>(0);
                        reached = match &text {
                            Some(k) => Reached::UpTo(key_values(&sh.schema, &classes, k)?),
                            None => Reached::Nothing,
                        };
                    }
                }
            }
            let mut w = Window::new(window);
            w.committed((start >> 64) as u64, 0, Vec::new());
            b.windows.insert(r.table.clone(), w);
            b.upper_text.insert(r.table.clone(), text);
            b.opened_by.insert(r.table.clone(), by);
            b.reached.insert(r.table, (reached, sh.schema.key.clone()));
        }
        Ok(b)
    }

    /// Again after a reconnect, at the position written so far; the chunk
    /// in flight, the work to do and the progress stay.
    pub(crate) async fn reload(
        &mut self,
        c: &Client,
        publication: &str,
        start: Sequence,
    ) -> Result<()> {
        let fresh = Backfills::load(c, publication, start).await?;
        self.reached = fresh.reached;
        self.windows = fresh.windows;
        self.upper_text = fresh.upper_text;
        self.opened_by = fresh.opened_by;
        self.commits.clear();
        self.pending.clear();
        self.seen.clear();
        self.work |= fresh.work;
        Ok(())
    }

    /// Where a read must begin for the windows it loaded: just after the
    /// oldest one's start, unless the slot is confirmed past it (`confirmed`;
    /// the server then begins there, and that window is incomplete: a chunk
    /// at its end is discarded, or the read stops if another reader carried
    /// it). `None`: no window needs reading again.
    pub(crate) fn decode_from(&mut self, confirmed: u64) -> Option<u64> {
        let mut from = None;
        for w in self.windows.values_mut() {
            if !w.keeping() {
                continue;
            }
            let begin = w.start + 1;
            if begin < confirmed {
                *w = Window::incomplete(w.start);
                continue;
            }
            from = Some(from.map_or(begin, |f: u64| f.min(begin)));
        }
        from
    }

    /// The furthest the slot may be confirmed while a target holds `held`:
    /// a window open there must be read again after a restart. `None`: no
    /// limit.
    pub(crate) fn confirm_limit(&mut self, held: u64) -> Option<u64> {
        while self.closed.front().is_some_and(|&(_, end)| end <= held) {
            self.closed.pop_front();
        }
        // Just after the message that opened it: a read from there has it.
        self.closed
            .iter()
            .map(|&(start, _)| start + 1)
            .chain(
                self.windows
                    .values()
                    .filter(|w| w.keeping())
                    .map(|w| w.start + 1),
            )
            .min()
    }

    /// A message of ours in the transaction at `commit` (`ordinal` its
    /// events so far): the events it stands for, with their table's schema
    /// at that point (for the batch to describe, where it has not yet, or
    /// differently).
    pub(crate) fn message(
        &mut self,
        content: &[u8],
        commit: u64,
        ordinal: &mut u64,
    ) -> Result<(Option<Described>, Vec<Event>)> {
        let note = Note::parse(content, commit)?;
        if note.for_another(&self.publication) {
            return Ok((None, Vec::new()));
        }
        let (schema, classes) = note.table_described(commit)?;
        let described = schema.clone().map(|s| (s, classes.clone()));
        let mut events = Vec::new();
        match note.kind.as_str() {
            "request" => self.request_decoded(&note, schema.as_ref(), commit, ordinal, &mut events),
            "chunk" => self.chunk_decoded(
                &note,
                schema.as_ref(),
                &classes,
                commit,
                ordinal,
                &mut events,
            )?,
            "failed" => {
                // The table stays where its chunks reached: its rows beyond
                // are left out until a new request for it.
                self.progress.failed(
                    note.request,
                    &note.table,
                    note.why.as_deref().unwrap_or("no reason given"),
                );
                self.end_decoded(note.request);
            }
            "done" => self.done_decoded(
                &note,
                schema.as_ref(),
                &classes,
                commit,
                ordinal,
                &mut events,
            )?,
            other => {
                return Err(Error::data(format!(
                "a backfill message of kind {other:?} (a newer MoonCDC wrote it; upgrade this one)"
            )))
            }
        }
        Ok((described, events))
    }

    /// A request: its table's truncate, and the table backfilled from no
    /// row on (a follower has a chunk to write).
    fn request_decoded(
        &mut self,
        note: &Note,
        schema: Option<&Schema>,
        commit: u64,
        ordinal: &mut u64,
        events: &mut Vec<Event>,
    ) {
        *ordinal += 1;
        events.push(Event::truncate(
            sequence(commit, *ordinal),
            note.table.clone(),
            Operation::TRUNCATE,
        ));
        let schema = schema.expect("described");
        self.reached
            .insert(note.table.clone(), (Reached::Nothing, schema.key.clone()));
        self.reopen(&note.table, commit);
        self.opened_by.insert(note.table.clone(), (note.request, 0));
        self.upper_text.insert(note.table.clone(), None);
        self.seen.push(Seen::Request(note.request));
        self.work = true;
    }

    /// A chunk: its rows as inserts, then the changes its snapshot did not
    /// see within its range (or nothing at all: discarded). It must belong
    /// to a request this read has seen, have its key, and start where the
    /// chunk before it ended. A mark only opens a new window.
    fn chunk_decoded(
        &mut self,
        note: &Note,
        schema: Option<&Schema>,
        classes: &[Class],
        commit: u64,
        ordinal: &mut u64,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let table = &note.table;
        let Some((reached, key)) = self.reached.get_mut(table) else {
            return Err(Error::data(format!(
                "a backfill chunk of table {table:?} at {} belongs to no request this read has seen",
                lsn_text(commit)
            )));
        };
        let schema = schema.expect("described");
        if &schema.key != key {
            return Err(Error::data(format!(
                "backfill chunk {} of table {table:?} at {} has another key than its request",
                note.chunk,
                lsn_text(commit)
            )));
        }
        let positions = key_positions(schema);
        let lower = note.lower_key(schema, classes)?;
        let mut upper = lower.clone();
        let mut rows = Vec::new();
        chunk_rows(note, classes, &positions, &mut upper, commit, &mut rows)?;
        let verdict = if &lower != reached {
            // Written while the one before it was in flight, which was
            // discarded: every reader discards it too.
            Verdict::Discard("it follows a chunk read again".into())
        } else if note.mark {
            Verdict::Carry(Vec::new())
        } else {
            let w = self.windows.get_mut(table);
            verdict(note, w, &positions, (&lower, Some(&upper)), commit)?
        };
        let upper_text = self.upper_text.entry(table.clone()).or_default();
        let discarded = match verdict {
            Verdict::Carry(after) => {
                for e in rows.into_iter().chain(after) {
                    events.push(renumbered(e, classes.len(), commit, ordinal)?);
                }
                *reached = upper;
                if let Some(last) = note.rows.last() {
                    let key: Vec<Option<String>> =
                        positions.iter().map(|&i| last[i].clone()).collect();
                    *upper_text = Some(serde_json::to_string(&key).expect("JSON"));
                }
                None
            }
            Verdict::Discard(why) => {
                let back = upper_text.clone();
                self.again(note, &why);
                // The range is read again: a follower has a chunk to write.
                self.work = true;
                Some((back, note.rows.len() as i64))
            }
        };
        self.reopen(table, commit);
        self.opened_by
            .insert(table.clone(), (note.request, note.chunk));
        self.seen
            .push(Seen::Chunk(note.request, note.chunk, discarded));
        self.in_flight.retain(|&f| f != (note.request, note.chunk));
        Ok(())
    }

    /// An end: with a snapshot (a chunk that found no row left), the changes
    /// it did not see beyond the reached keys, then every change passes; or
    /// discarded, a chunk is read again.
    fn done_decoded(
        &mut self,
        note: &Note,
        schema: Option<&Schema>,
        classes: &[Class],
        commit: u64,
        ordinal: &mut u64,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        if let (Some(_), Some(schema)) = (&note.snapshot, schema) {
            let Some((reached, key)) = self.reached.get(&note.table) else {
                return Err(Error::data(format!(
                    "the end of a backfill of table {:?} at {} belongs to no request this read has seen",
                    note.table,
                    lsn_text(commit)
                )));
            };
            if &schema.key != key {
                return Err(Error::data(format!(
                    "the end of the backfill of table {:?} at {} has another key than its request",
                    note.table,
                    lsn_text(commit)
                )));
            }
            let (positions, width) = (key_positions(schema), classes.len());
            let lower = note.lower_key(schema, classes)?;
            let w = self.windows.get_mut(&note.table);
            let v = if &lower != reached {
                Verdict::Discard("it follows a chunk read again".into())
            } else {
                verdict(note, w, &positions, (reached, None), commit)?
            };
            match v {
                Verdict::Carry(after) => {
                    for e in after {
                        events.push(renumbered(e, width, commit, ordinal)?);
                    }
                    self.seen.push(Seen::Chunk(note.request, note.chunk, None));
                }
                Verdict::Discard(why) => {
                    self.again(note, &why);
                    // Not the end after all: a follower writes the next chunk.
                    self.work = true;
                    self.reopen(&note.table, commit);
                    self.opened_by
                        .insert(note.table.clone(), (note.request, note.chunk));
                    let back = self.upper_text.get(&note.table).cloned().flatten();
                    self.seen
                        .push(Seen::Chunk(note.request, note.chunk, Some((back, 0))));
                    self.in_flight.retain(|&(r, _)| r != note.request);
                    return Ok(());
                }
            }
        }
        self.progress
            .done(note.request, &note.table, note.rows_total);
        self.reached.remove(&note.table);
        if let Some(w) = self.windows.remove(&note.table) {
            if w.keeping() {
                self.closed.push_back((w.start, commit));
            }
        }
        self.end_decoded(note.request);
        Ok(())
    }

    /// A new window for `table` at `commit` (its message's); the one it
    /// ends is kept track of until a target holds its end.
    fn reopen(&mut self, table: &str, commit: u64) {
        if let Some(old) = self.windows.insert(table.to_string(), Window::new(commit)) {
            if old.keeping() {
                self.closed.push_back((old.start, commit));
            }
        }
    }

    /// Whether a chunk of `table` whose snapshot missed the `committed`
    /// transactions can be written now (window.rs): `Err(None)` to wait
    /// until this read has the request's last message (message `last` of
    /// request `id`), `Err(Some(xid))` when the snapshot missed a commit
    /// this read saw before the window opened (write a mark instead).
    pub(super) fn judge(
        &self,
        table: &str,
        (id, last): (i64, i32),
        committed: &[String],
    ) -> std::result::Result<(), Option<u32>> {
        if committed.is_empty() {
            return Ok(());
        }
        match (self.opened_by.get(table), self.windows.get(table)) {
            (Some(&by), Some(w)) if by == (id, last) => {
                match committed_before(committed, &self.commits, w.start) {
                    Some(x) => Err(Some(x)),
                    None => Ok(()),
                }
            }
            _ => Err(None),
        }
    }

    /// Say (at most every 30 seconds) that a chunk is read again, and why.
    fn again(&mut self, note: &Note, why: &str) {
        if self
            .again_said
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(30))
        {
            self.again_said = Some(std::time::Instant::now());
            crate::log::info(&format!(
                "backfill of table {:?} (request {}): chunk {} is read again ({why})",
                note.table, note.request, note.chunk
            ));
        }
    }

    /// A transaction committed at `commit`: the left-out changes it made
    /// go into the windows of their tables.
    pub(crate) fn committed(&mut self, commit: u64, xid: u32) {
        let pending = std::mem::take(&mut self.pending);
        if self.windows.is_empty() {
            self.commits.clear();
            return;
        }
        self.commits.push(commit, xid);
        let mut by_table: HashMap<String, Vec<Event>> = HashMap::new();
        for e in pending {
            by_table.entry(e.table.clone()).or_default().push(e);
        }
        for (table, w) in self.windows.iter_mut() {
            // A transaction read again from before its window (a read
            // that begins at the oldest window) is not in it.
            if commit <= w.start {
                continue;
            }
            let mine = by_table.remove(table.as_str()).unwrap_or_default();
            w.committed(commit, xid, mine);
        }
        // The follower looks a commit up when a chunk's snapshot missed it
        // (chunk.rs): those of the last READ_WINDOW of WAL are known.
        self.commits.trim(commit.saturating_sub(READ_WINDOW));
    }

    /// A request's end (done or failed): noted with the batch, and a chunk
    /// of it in flight is waited for no more.
    fn end_decoded(&mut self, request: i64) {
        self.seen.push(Seen::Done(request));
        self.in_flight.retain(|&(r, _)| r != request);
    }

    /// The ordinary changes of one source change (a TRUNCATE has several)
    /// as the stream carries them: those of a table being backfilled pass
    /// as far as its chunks reached, judged by the key of the schema they
    /// were decoded with.
    pub(crate) fn pass_all(&mut self, events: Vec<Event>, catalog: &Catalog) -> Result<Vec<Event>> {
        // Nothing backfilled (the usual case): every change passes, and no
        // schema is looked up.
        if self.reached.is_empty() {
            return Ok(events);
        }
        let mut out = Vec::with_capacity(events.len());
        for e in events {
            let Some((r, key)) = self.reached.get(&e.table) else {
                out.push(e);
                continue;
            };
            let schema = catalog
                .by_oid
                .values()
                .map(|(s, _)| s)
                .find(|s| s.table == e.table)
                .ok_or_else(|| {
                    Error::data(format!(
                        "change {} of a table the stream has not described",
                        e.sequence
                    ))
                })?;
            if &schema.key != key {
                return Err(Error::data(format!(
                    "the key of table {:?} changed during its backfill (change {}): resync it (mooncdc-capture backfill --table {} --resync)",
                    e.table, e.sequence, e.table
                )));
            }
            let positions = key_positions(schema);
            // A part left out is kept for the table's window (window.rs).
            if self.windows.get(&e.table).is_some_and(|w| w.keeping())
                && reaches_beyond(&e, &positions, r)
            {
                self.pending.push(e.clone());
            }
            out.extend(pass(e, &positions, r));
        }
        Ok(out)
    }

    /// Note where the messages of the transaction committed at `commit` are,
    /// before its batch is written (a target holding it implies the note).
    pub(crate) async fn commit(&mut self, c: &Client, commit: u64) -> Result<()> {
        if self.seen.is_empty() {
            return Ok(());
        }
        let at = lsn_text(commit);
        // Durable before the batch is written, whatever the server's or the
        // role's synchronous_commit.
        c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit = on")
            .await
            .map_err(pg_err("cannot note where a backfill message is"))?;
        for s in std::mem::take(&mut self.seen) {
            match s {
                Seen::Request(id) => note_request(c, &at, id).await?,
                Seen::Chunk(id, n, discarded) => note_chunk(c, &at, id, n, discarded).await?,
                Seen::Done(id) => {
                    c.execute(
                        "UPDATE mooncdc.backfill SET done_lsn = $1::text::pg_lsn WHERE id = $2 AND done_lsn IS NULL",
                        &[&at, &id],
                    )
                    .await
                    .map_err(pg_err(NOTE_FAILED))?;
                }
            }
        }
        c.batch_execute("COMMIT")
            .await
            .map_err(pg_err("cannot note where a backfill message is"))?;
        Ok(())
    }
}

/// A chunk's rows as inserts of its table (numbered when written): each
/// must be beyond the rows before it, and moves `reached` on to its key.
fn chunk_rows(
    note: &Note,
    classes: &[Class],
    positions: &[usize],
    reached: &mut Reached,
    commit: u64,
    events: &mut Vec<Event>,
) -> Result<()> {
    let table = &note.table;
    for r in &note.rows {
        if r.len() != classes.len() {
            return Err(Error::data(format!(
                "a backfill row of table {table:?} has {} values, the table {}",
                r.len(),
                classes.len()
            )));
        }
        let row: Row = r
            .iter()
            .zip(classes)
            .map(|(v, cls)| from_text(*cls, v.as_deref().map(str::as_bytes)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::data(format!("table {table:?}, backfill row: {e}")))?;
        let key = key_of(&row, positions);
        if reached.covers(&key) {
            return Err(Error::data(format!(
                "a backfill row of table {table:?} at {} is not beyond the rows before it",
                lsn_text(commit)
            )));
        }
        *reached = Reached::UpTo(key);
        events.push(Event {
            sequence: 0,
            table: table.clone(),
            operation: Operation::Insert,
            before: None,
            before_key: None,
            after: Some(row),
        });
    }
    Ok(())
}

/// What a chunk (or an end) read without a lock comes to at the end of its
/// table's window (none: the table was not being backfilled at its start,
/// an error); one read under the lock (no snapshot) is carried as it is.
fn verdict(
    note: &Note,
    window: Option<&mut Window>,
    positions: &[usize],
    range: (&Reached, Option<&Reached>),
    commit: u64,
) -> Result<Verdict> {
    let Some(snapshot) = &note.snapshot else {
        return Ok(Verdict::Carry(Vec::new()));
    };
    let at = lsn_text(commit);
    let snap = read_snapshot(snapshot, &at)?;
    let Some(w) = window else {
        return Err(Error::data(format!(
            "backfill chunk {} of table {:?} at {at} has no window in this read",
            note.chunk, note.table
        )));
    };
    Ok(w.close(commit, &snap, positions, range))
}

/// An event of a chunk's transaction, numbered after `ordinal`: a row of
/// the chunk, or a change of its window (which must have the chunk's
/// columns: no schema change can come between, the chunk's table lock
/// waits for it).
fn renumbered(mut e: Event, width: usize, commit: u64, ordinal: &mut u64) -> Result<Event> {
    let fits = |r: &Option<Row>| r.as_ref().is_none_or(|r| r.len() == width);
    if !fits(&e.before) || !fits(&e.after) {
        return Err(Error::data(format!(
            "a change of table {:?} in a backfill chunk's window has other columns than the chunk (change {})",
            e.table, e.sequence
        )));
    }
    *ordinal += 1;
    e.sequence = sequence(commit, *ordinal);
    Ok(e)
}

/// A note that failed: the two reasons there can be.
const NOTE_FAILED: &str = "cannot note where a backfill message is (a backfill needs capture against the primary, and a follower's role \
     needs SELECT, INSERT and UPDATE on mooncdc.backfill and mooncdc.backfill_chunks: docs/POSTGRES.md, \"Rights\")";

/// Note where chunk `chunk` of request `id` is, and whether it was carried
/// or discarded (then with the key its request goes back to and its rows).
/// Every reader comes to the same for a chunk whose window it read whole;
/// one noted otherwise already was carried by a reader that read a window
/// this one could not (the slot confirmed past its start): stop rather
/// than write a stream that differs from the notes.
async fn note_chunk(
    c: &Client,
    at: &str,
    id: i64,
    chunk: i32,
    discarded: Option<(Option<String>, i64)>,
) -> Result<()> {
    let first = c
        .execute(
            "UPDATE mooncdc.backfill_chunks SET lsn = $1::text::pg_lsn, discarded = $4 \
             WHERE request = $2 AND chunk = $3 AND lsn IS NULL",
            &[&at, &id, &chunk, &discarded.is_some()],
        )
        .await
        .map_err(pg_err(NOTE_FAILED))?
        > 0;
    if first {
        if let Some((lower, rows)) = &discarded {
            // The request goes back to where the chunk began; its next
            // chunk reads the range again.
            c.execute(
                "UPDATE mooncdc.backfill SET upper_key = $2, rows = rows - $3, done = false WHERE id = $1",
                &[&id, lower, rows],
            )
            .await
            .map_err(pg_err(NOTE_FAILED))?;
        }
        return Ok(());
    }
    let noted: Option<bool> = c
        .query_opt(
            "SELECT discarded FROM mooncdc.backfill_chunks WHERE request = $1 AND chunk = $2",
            &[&id, &chunk],
        )
        .await
        .map_err(pg_err(NOTE_FAILED))?
        .map(|r| r.get(0));
    match noted {
        Some(d) if d != discarded.is_some() => Err(Error::state(format!(
            "backfill chunk {chunk} of request {id} (LSN {at}) was {} by another reader and {} by this one, which could not \
             read the chunk's whole window (its slot was confirmed past the window's start); nothing past it was written: \
             request the table's backfill again (mooncdc-capture backfill --table … --resync)",
            if d { "discarded" } else { "carried" },
            if d { "carried" } else { "discarded" },
        ))),
        _ => Ok(()),
    }
}

/// How often a follower waiting for a request to be visible says so.
const REQUEST_VISIBLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Note where request `id`'s message is. The stream can carry a request
/// before the request is visible to other sessions: its commit is in the
/// WAL while it waits for a synchronous standby (`remote_apply`), or the
/// session has not caught up yet. A commit in the WAL always becomes
/// visible (a cancelled wait for a standby leaves it committed), so the
/// request is waited for, as long as it takes, and never skipped: a batch
/// written past a request not noted would leave a restart from the
/// target's cursor without it ("belongs to no request this read has
/// seen"). Every 30 s the wait is named in a warning; a stop asked for
/// meanwhile ends the read before the batch is written. One noted already
/// (its transaction read again) is left as it is.
async fn note_request(c: &Client, at: &str, id: i64) -> Result<()> {
    let mut say_at = std::time::Instant::now() + REQUEST_VISIBLE_WITHIN;
    loop {
        let noted = c
            .execute(
                "UPDATE mooncdc.backfill SET requested_lsn = $1::text::pg_lsn WHERE id = $2 AND requested_lsn IS NULL",
                &[&at, &id],
            )
            .await
            .map_err(pg_err(NOTE_FAILED))?;
        let visible = noted > 0
            || c.query_opt("SELECT 1 FROM mooncdc.backfill WHERE id = $1", &[&id])
                .await
                .map_err(pg_err("cannot read a backfill request"))?
                .is_some();
        if visible {
            return Ok(());
        }
        if crate::util::stop::requested() {
            return Err(Error::state(format!(
                "stopped while backfill request {id} (in the stream at LSN {at}) was not yet visible to this session; \
                 nothing past it was written: start the pipeline again from the target's cursor"
            )));
        }
        if std::time::Instant::now() >= say_at {
            say_at = std::time::Instant::now() + REQUEST_VISIBLE_WITHIN;
            crate::log::warn(
                &format!(
                    "backfill request {id} is in the stream (LSN {at}) but not yet visible to this session: its commit \
                     still waits, most likely for a synchronous standby (synchronous_standby_names); the stream waits \
                     for it, as the application's commits do (pg_stat_replication shows the standbys)"
                ),
                &[("event", "backfill-request-not-visible".into()), ("request", id.into())],
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The table as a message found it, unless the stream says so already: a
/// schema record before the message's events (not the header: a target may
/// hold the table as it was before a change no row change has described
/// yet, and a record says the change). Columns gone or of another type come
/// first, as drops, so no record is ambiguous (a drop and an add that could
/// be a rename). The catalog takes the table too, so a Relation message
/// later finds it the same.
pub(crate) fn describe(
    w: &mut BatchOut<'_>,
    catalog: &mut Catalog,
    s: Schema,
    classes: Vec<Class>,
) -> Result<()> {
    let in_force = w.in_force(&s.table).cloned();
    if let Some(entry) = catalog
        .by_oid
        .values_mut()
        .find(|(k, _)| k.table == s.table)
    {
        *entry = (s.clone(), classes);
    }
    if let Some(x) = &in_force {
        let kept = kept_columns(x, &s)?;
        if &kept != x && kept != s {
            w.pending.push(SchemaChange {
                schema: kept,
                renamed: Vec::new(),
            });
        }
    }
    if in_force.as_ref() != Some(&s) {
        w.pending.push(SchemaChange {
            schema: s,
            renamed: Vec::new(),
        });
    }
    Ok(())
}
