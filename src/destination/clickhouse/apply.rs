//! Applying batch streams and snapshots: rows held until a commit is
//! checked, then sent in bounded inserts, then the cursor.

use super::*;
use crate::destination::driver::{apply_batches, BatchHooks, SnapshotHooks};

/// Every (column, type) a table has in any state its batch goes through.
fn allowed(segs: &[Segment]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for s in segs {
        let layouts = s.change.iter().map(|(o, _)| o).chain([&s.layout]);
        for l in layouts {
            for c in l.expected_columns() {
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// A table's rows of one batch under one layout; `change` is made first.
pub(super) struct Segment {
    pub(super) change: Option<(Layout, SchemaChange)>,
    pub(super) layout: Layout,
    pub(super) held: Held,
}

impl Segment {
    fn new(change: Option<(Layout, SchemaChange)>, layout: Layout) -> Segment {
        Segment {
            change,
            layout,
            held: Held::new(),
        }
    }
}

impl ClickHouse {
    /// Apply a batch stream. Batches before the stored cursor are skipped; a
    /// gap or another source fails before anything of that batch is written
    /// (`destination/driver.rs`).
    pub fn apply_stream<R: BufRead>(
        &mut self,
        input: &mut BatchStreamReader<R>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let held = self.cursor()?;
        let mut committed = ApplyStats::default();
        let mut batches = Batches {
            target: self,
            layouts: HashMap::new(),
            bufs: HashMap::new(),
            deferred: HashMap::new(),
            fill: Default::default(),
            busy: None,
        };
        let result = apply_batches(&mut batches, input, held, &mut committed, progress);
        self.committed = committed;
        result
    }

    /// A schema record becomes a segment, made before its rows at the
    /// commit (checked there, before any row of the batch is sent).
    fn queue_change(
        &self,
        c: SchemaChange,
        layouts: &mut HashMap<String, Layout>,
        bufs: &mut HashMap<String, Vec<Segment>>,
        kind: SourceKind,
    ) -> Result<()> {
        let table = c.schema.table.clone();
        let segs = bufs.entry(table.clone()).or_default();
        let new = match layouts.get(&table) {
            Some(old) => {
                // Columns keep the types they had (a `String` column made
                // by an earlier MoonCDC stays one through a change).
                let mut new = self.typing(&c.schema, kind);
                new.keep_types_of(old, &c);
                // And as the table has them: a replay after an apply killed
                // amid this change finds columns under their new names.
                if self.native_types() {
                    new.keep_earlier_types(&self.columns_typed(&self.stored(&new.name))?);
                }
                segs.push(Segment::new(Some((old.clone(), c)), new.clone()));
                new
            }
            None => {
                let new = self.layout(&c.schema, kind)?;
                self.ensure(&new)?;
                segs.push(Segment::new(None, new.clone()));
                new
            }
        };
        layouts.insert(table, new);
        Ok(())
    }

    /// `ensure` for the header's tables; a table whose columns differ is
    /// noted in `deferred` (see `apply_stream`), any other failure is one.
    /// `Ok(false)`: a stop was asked for between two tables.
    /// `drop`: a batch that does not overlap the cursor, whose header is the
    /// tables' shape now (see [`ClickHouse::ensure_or_mismatch`]).
    fn ensure_all(
        &self,
        in_force: &mut Vec<Schema>,
        kind: SourceKind,
        layouts: &mut HashMap<String, Layout>,
        deferred: &mut HashMap<String, Error>,
        drop: bool,
    ) -> Result<bool> {
        let all: Vec<Layout> = in_force
            .iter()
            .map(|s| self.layout(s, kind))
            .collect::<Result<_>>()?;
        self.check_names(&all)?;
        for (s, l) in in_force.drain(..).zip(all) {
            // A stop between two tables: the batch ends here, no row and no
            // cursor written (the tables made so far stay, empty of it).
            if crate::util::stop::requested() {
                return Ok(false);
            }
            if let Some(mismatch) = self.ensure_or_mismatch(&l, drop)? {
                deferred.insert(s.table.clone(), mismatch);
            }
            layouts.insert(s.table.clone(), l);
        }
        Ok(true)
    }

    /// Whether the table is already past segment `k`: a column its rows
    /// have is gone or has another type, made so by a later change of the
    /// same batch. Then an apply was killed after sending those rows and
    /// making that change (rows go out before the next change is made), so
    /// they are not sent again (their encoding would not even fit).
    fn passed(&self, segs: &[Segment], k: usize) -> Result<bool> {
        if segs[k].held.spool.is_empty() && segs[k].held.truncates.is_empty() {
            return Ok(false);
        }
        // Only a later change of the batch can have moved the table past
        // these rows: without one (most batches) the server is not asked.
        if segs[k + 1..].iter().all(|s| s.change.is_none()) {
            return Ok(false);
        }
        let have = self.columns_typed(&segs[k].layout.name)?;
        let off: Vec<String> = segs[k]
            .layout
            .expected_columns()
            .into_iter()
            .filter(|c| !have.contains(c))
            .map(|(n, _)| n)
            .collect();
        if off.is_empty() {
            return Ok(false);
        }
        let changed_later = |n: &str| {
            segs[k + 1..].iter().any(|s| match &s.change {
                Some((old, c)) => {
                    let ty = |l: &Layout, n: &str| {
                        l.expected_columns()
                            .into_iter()
                            .find(|(c, _)| c == n)
                            .map(|(_, t)| t)
                    };
                    c.new_name(n) != Some(n) || ty(old, n) != ty(&s.layout, n)
                }
                None => false,
            })
        };
        if off.iter().all(|n| changed_later(n)) {
            Ok(true)
        } else {
            Err(Error::state(format!(
                "ClickHouse table {} does not have columns {off:?} as rows of this batch need them; the target diverges from the source (give it a new snapshot)",
                segs[k].layout.name
            )))
        }
    }

    /// Load a snapshot into a target holding no cursor; rows take the version
    /// of the snapshot's cursor, so every later change supersedes them. They
    /// are held until the commit line, then sent, then the cursor
    /// (`destination/driver.rs`).
    pub fn apply_snapshot<R: BufRead>(
        &mut self,
        input: &mut SnapshotReader<R>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut committed = ApplyStats::default();
        let mut load = Load {
            target: self,
            layouts: HashMap::new(),
            bufs: HashMap::new(),
        };
        let result =
            crate::destination::driver::apply_snapshot(&mut load, input, &mut committed, progress);
        self.committed = committed;
        result
    }
}

/// One apply's state between the driver's steps (`destination/driver.rs`):
/// each table's layout in force, and its rows held in segments (a schema
/// change starts a new segment, made at the commit before the segment's
/// rows are sent); tables whose columns did not match the header (a replay
/// after an apply killed amid a schema change), checked at the commit
/// against every state the batch takes the table through.
struct Batches<'a> {
    target: &'a mut ClickHouse,
    layouts: HashMap<String, Layout>,
    bufs: HashMap<String, Vec<Segment>>,
    deferred: HashMap<String, Error>,
    /// Old rows and unchanged values filled (`fill.rs`).
    fill: super::fill::Fill,
    /// From a batch's header to its cursor: a stop waits for the commit.
    busy: Option<crate::util::stop::Busy>,
}

impl BatchHooks for Batches<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        drop(self.busy.replace(crate::util::stop::Busy::new()));
        self.target.prepare_writes()?;
        self.layouts.clear();
        self.bufs.clear();
        self.deferred.clear();
        self.fill.begin();
        self.target.cursor()
    }

    fn header(&mut self, h: &crate::wire::Header) -> Result<()> {
        if h.schemas.is_none() {
            return Err(Error::data(
                "a ClickHouse target needs the tables' schemas in the batch header",
            ));
        }
        Ok(())
    }

    fn tables(
        &mut self,
        in_force: &mut Vec<Schema>,
        kind: SourceKind,
        replay: bool,
    ) -> Result<bool> {
        self.target.ensure_all(
            in_force,
            kind,
            &mut self.layouts,
            &mut self.deferred,
            !replay,
        )
    }

    fn schema_change<R: BufRead>(
        &mut self,
        c: SchemaChange,
        kind: SourceKind,
        _input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        let table = c.schema.table.clone();
        if let Some(segs) = self.bufs.get_mut(&table) {
            self.fill.resolve(self.target, &table, segs)?;
        }
        let old = self.layouts.get(&table).cloned();
        let sources = old.as_ref().map(|o| c.sources(&o.schema));
        self.target
            .queue_change(c, &mut self.layouts, &mut self.bufs, kind)?;
        if let (Some(old), Some(sources), Some(new)) = (old, sources, self.layouts.get(&table)) {
            self.fill.after_change(&table, &old, new, &sources);
        }
        Ok(())
    }

    fn event<R: BufRead>(&mut self, e: Event, input: &mut BatchStreamReader<R>) -> Result<()> {
        // The name is copied only for a table's first event.
        if !self.bufs.contains_key(&e.table) {
            self.bufs.insert(e.table.clone(), Vec::new());
        }
        let segs = self.bufs.get_mut(&e.table).expect("just made");
        if segs.is_empty() {
            segs.push(Segment::new(None, self.layouts[&e.table].clone()));
        }
        if e.operation.is_truncate() {
            self.fill.truncate(self.target, &e.table, segs)?;
            let seg = segs.last_mut().expect("a segment");
            // Checked now, so a sequence the versions cannot hold fails
            // before anything is written.
            version(seg.layout.kind, e.sequence)?;
            seg.held.truncates.push(e.sequence);
            return Ok(());
        }
        let key = &segs.last().expect("a segment").layout.key;
        e.check_key(key).map_err(Error::data)?;
        if self.fill.takes(&e) {
            return self.fill.event(self.target, segs, e);
        }
        let seg = segs.last_mut().expect("a segment");
        let held = &mut seg.held;
        self.target.encode_event(&seg.layout, &mut held.row, &e)?;
        held.take_row(self.target.cfg.max_insert_bytes)?;
        // Freed on the reading thread, which made it.
        input.recycle(Item::Event(e));
        Ok(())
    }

    /// Rows are held until the commit: nothing waits to be written.
    fn flush<R: BufRead>(&mut self, _input: &mut BatchStreamReader<R>) -> Result<()> {
        Ok(())
    }

    fn commit(&mut self, end: Option<&Cursor>) -> Result<()> {
        self.fill.finish(self.target, &mut self.bufs)?;
        let ch = &*self.target;
        // Before anything is written: each changed table must be in one of
        // the states the batch takes it through.
        for (t, segs) in &self.bufs {
            let changed = segs.iter().any(|s| s.change.is_some());
            if let Some(err) = self.deferred.remove(t).filter(|_| !changed) {
                return Err(err);
            }
            let allowed = allowed(segs);
            for s in segs {
                if let Some((old, change)) = &s.change {
                    ch.evolve(old, change, &s.layout, &allowed, true)?;
                }
            }
        }
        if let Some((_, err)) = self.deferred.drain().next() {
            return Err(err);
        }
        // The batch is valid: now its schema changes and rows go out, then
        // its cursor; a stop asked for meanwhile waits. On a cluster, first:
        // every shard has a quorum answering.
        if !self.bufs.is_empty() || end.is_some() {
            ch.replicas_answer()?;
        }
        for segs in self.bufs.values_mut() {
            let allowed = allowed(segs);
            for k in 0..segs.len() {
                if let Some((old, change)) = &segs[k].change {
                    ch.evolve(old, change, &segs[k].layout, &allowed, false)?;
                }
                if ch.passed(segs, k)? {
                    continue;
                }
                let seg = &mut segs[k];
                ch.flush(&seg.layout, &mut seg.held)?;
            }
        }
        self.bufs.clear();
        if let Some(end) = end {
            ch.set_cursor(end)?;
        }
        drop(self.busy.take());
        Ok(())
    }

    /// No transaction: what was held is dropped (the tables a header made
    /// stay, empty of the batch); the cursor did not move.
    fn rollback(&mut self) {
        self.bufs.clear();
        drop(self.busy.take());
    }
}

/// One snapshot load's state between the driver's steps: each table's
/// layout, and its rows held until the commit line.
struct Load<'a> {
    target: &'a mut ClickHouse,
    layouts: HashMap<String, Layout>,
    bufs: HashMap<String, Held>,
}

impl SnapshotHooks for Load<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        if self.target.options.existing_rows == ExistingRows::Replace
            && self.target.cluster.is_some()
        {
            // TRUNCATE of a replicated table leaves ZooKeeper's record of
            // the last quorum insert naming a part no replica has, and every
            // read that asks for sequential consistency fails from then on
            // (18.16).
            return Err(Error::usage(
                "--existing-rows replace is not available on a cluster target (TRUNCATE breaks its quorum reads); drop the tables on the cluster (DROP TABLE … ON CLUSTER: <table>__current, <table>, <table>_local) and load the snapshot again",
            ));
        }
        self.target.prepare_writes()?;
        self.target.cursor()
    }

    fn tables(&mut self, schemas: &[Schema], kind: SourceKind) -> Result<()> {
        let ch = &*self.target;
        let all: Vec<Layout> = schemas
            .iter()
            .map(|s| ch.layout(s, kind))
            .collect::<Result<_>>()?;
        ch.check_names(&all)?;
        for (s, l) in schemas.iter().zip(all) {
            ch.ensure(&l)?;
            if ch.options.existing_rows == ExistingRows::Refuse && ch.holds_rows(&l.name)? {
                return Err(crate::destination::existing_rows_error(&s.table));
            }
            self.layouts.insert(s.table.clone(), l);
        }
        Ok(())
    }

    fn row<R: BufRead>(
        &mut self,
        table: String,
        row: Row,
        cursor: &Cursor,
        input: &mut SnapshotReader<R>,
    ) -> Result<()> {
        let l = &self.layouts[&table];
        // The name is copied only for a table's first row.
        if !self.bufs.contains_key(&table) {
            self.bufs.insert(table.clone(), Held::new());
        }
        let held = self.bufs.get_mut(&table).expect("just made");
        self.target
            .encode(l, &mut held.row, "insert", &row, cursor.sequence(), true)?;
        held.take_row(self.target.cfg.max_insert_bytes)?;
        // Freed on the reading thread, which made it.
        input.recycle(SnapItem::Row { table, row });
        Ok(())
    }

    fn commit<R: BufRead>(
        &mut self,
        cursor: &Cursor,
        _input: &mut SnapshotReader<R>,
    ) -> Result<()> {
        let ch = &*self.target;
        // Emptied only now that the snapshot is known to be whole: a bad one
        // leaves the tables as they were. No cursor is stored yet, so a
        // crash from here on is mended by loading the snapshot again. A stop
        // asked for meanwhile waits until the cursor is written.
        let busy = crate::util::stop::Busy::new();
        if ch.options.existing_rows == ExistingRows::Replace {
            for l in self.layouts.values() {
                ch.query(
                    &format!("TRUNCATE TABLE {}.{}", qi(&ch.cfg.database), qi(&l.name)),
                    None,
                    Timeout::Ddl,
                )?;
            }
        }
        ch.replicas_answer()?;
        for (t, held) in self.bufs.iter_mut() {
            ch.flush(&self.layouts[t], held)?;
        }
        self.bufs.clear();
        ch.set_cursor(cursor)?;
        drop(busy);
        Ok(())
    }

    /// No transaction: the rows held are dropped, nothing was written.
    fn rollback(&mut self) {
        self.bufs.clear();
    }
}
