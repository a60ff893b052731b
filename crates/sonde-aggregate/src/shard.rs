//! Per-worker series storage.
//!
//! Each receive thread owns one [`Shard`] and records every point it parses
//! into it; nothing else touches the shard. So the hot path takes no lock
//! and makes no cross-thread hand-off per point.
//!
//! # Design
//!
//! The shard's series (keys, raw spellings, hash tables) persist across
//! windows; only the values of the open window travel. At a boundary the
//! worker swaps its [`Window`] (one small value per series, a bit per
//! series that saw data, and the series created since the last boundary)
//! for one the flusher has finished with. The flusher keeps a map from
//! each shard's slot numbers to its own series, so it merges by index:
//! no key is hashed, compared or copied again after the window that
//! created the series, and a series allocates only when it is new.
//!
//! Expiry is decided by the flusher, which sees every worker. It returns
//! the slots of expired series with a recycled window; the worker frees
//! those that saw no data since, and reports them freed with its next
//! window, so both sides drop the series without a lock.
//!
//! A point finds its series by its spelling, the bytes as the client sent
//! them (`spelling`: their hash, their comparison with a stored series,
//! the aliases of other tag orders); its value goes into the open
//! [`Window`]; a new series is admitted under the series limits (`limits`,
//! [`SeriesCount`]).

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use hashbrown::HashTable;
use sonde_proto::Point;

use crate::config::AggregateConfig;
use crate::error::RecordError;
use crate::key::{self, KeyBuilder};
use crate::kind::SeriesKind;
use crate::limits::{admit, release, PerMetric};
use crate::prefetch::prefetch_bytes;
use crate::spelling::{first_spelling_hash, raw_hash, spelled_as, syntax_byte, Alias, MAX_ALIASES};
use crate::window::reserve_slots;

pub use crate::limits::SeriesCount;
pub use crate::window::{HistogramWindow, Window};

/// One series of a shard: 16 bytes, and one allocation laid out by
/// [`key::stored`]: the canonical key, then the client's first spelling.
/// `None` for a free slot. Shared with the flusher, which keeps the same
/// allocation for its series and every output group. Neither hash is kept:
/// both are recomputed when a table grows.
///
/// # Design
///
/// The spelling is stored so that a hit costs one probe and a comparison
/// of the name and the raw tags. Reading it back from the canonical key in
/// the client's tag order instead saved those bytes but added about half
/// again to the instructions of a point (`scripts/callgrind-hot-path.sh`
/// on statsd:10000), so it was dropped. Kept in the key's allocation, the
/// first spelling costs its raw tags and 5 bytes, and its alias a 4-byte
/// slot number (docs/benchmarks/LOG.md, "series memory budget").
pub(crate) type Entry = Option<Arc<[u8]>>;

/// Points [`Shard::record_batch`] looks up together. 16 overlaps the
/// misses of a packed 1400-byte StatsD datagram's worth of lines.
pub const BATCH: usize = 16;

/// Points of one input waiting for [`Shard::record_batch`], kept on the
/// stack: a receive path fills it as the parser finds points and records
/// it when full and when the input ends.
///
/// # Design
///
/// The slots start uninitialised: a receive path makes a batch per
/// datagram, and filling 16 points (1,408 bytes) with a placeholder was a
/// `memcpy` per datagram, paid once per point when each datagram carries
/// one ("point batch without a placeholder fill" in `docs/benchmarks/LOG.md`).
pub struct PointBatch<'d> {
    points: [MaybeUninit<Point<'d>>; BATCH],
    /// The first `len` slots are initialised.
    len: usize,
}

impl Default for PointBatch<'_> {
    #[inline]
    fn default() -> Self {
        PointBatch {
            points: [const { MaybeUninit::uninit() }; BATCH],
            len: 0,
        }
    }
}

impl std::fmt::Debug for PointBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.points()).finish()
    }
}

impl<'d> PointBatch<'d> {
    /// Adds `p`; returns `true` when the batch is now full.
    ///
    /// # Panics
    ///
    /// When the batch was already full.
    #[inline]
    pub fn push(&mut self, p: Point<'d>) -> bool {
        self.points[self.len].write(p);
        self.len += 1;
        self.len == BATCH
    }

    /// The points added since the last [`PointBatch::clear`].
    #[inline]
    pub fn points(&self) -> &[Point<'d>] {
        let init = &self.points[..self.len];
        // SAFETY: `push` wrote each of the first `len` slots before counting
        // it, and `MaybeUninit<T>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(init.as_ptr().cast::<Point<'d>>(), init.len()) }
    }

    /// Empties the batch. `Point` is `Copy`: nothing to drop.
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// The canonical key of a stored series.
fn key_of(stored: &[u8]) -> &[u8] {
    key::stored_parts(stored).0
}

fn key_hash(entries: &[Entry], i: u32) -> u64 {
    entries[i as usize]
        .as_deref()
        .map_or(0, |s| key::hash(key_of(s)))
}

/// Slot number meaning "no series".
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// Gives every shard its own number, so the flusher can tell their slot
/// numbers apart.
static NEXT_SHARD: AtomicU32 = AtomicU32::new(0);

/// A worker's series and the open window's values.
///
/// # Design
///
/// Entries live in a vector; three hash tables of slot numbers find them.
/// The canonical table is keyed by the series key (name plus sorted tags),
/// the alias table by the bytes as the client first sent them (kept in the
/// entry's allocation), and a small table of further spellings by other
/// tag orders. A point first tries the alias table: one hash of the raw
/// bytes, one probe, one comparison, no tag splitting or sorting. Only a
/// miss builds the canonical key (`scripts/callgrind-hot-path.sh` measures
/// the difference).
#[derive(Debug)]
pub struct Shard {
    id: u32,
    pub(crate) entries: Vec<Entry>,
    /// Spellings known per slot (the first one included), up to
    /// [`MAX_ALIASES`].
    spellings: Vec<u8>,
    index: HashTable<u32>,
    /// The first spelling of each series, by [`raw_hash`].
    aliases: HashTable<u32>,
    /// Further spellings.
    extra: HashTable<Alias>,
    keys: KeyBuilder,
    config: Arc<AggregateConfig>,
    pub(crate) window: Window,
    /// Free slots in `entries`.
    free: Vec<u32>,
    /// Live series of every shard, for [`AggregateConfig::max_series`].
    live: Arc<SeriesCount>,
    /// For [`AggregateConfig::max_series_per_metric`].
    per_metric: PerMetric,
}

impl Drop for Shard {
    fn drop(&mut self) {
        self.live.sub(self.len());
    }
}

impl Shard {
    /// An empty shard, alone under [`AggregateConfig::max_series`].
    pub fn new(config: Arc<AggregateConfig>) -> Shard {
        Shard::with_count(config, Arc::default())
    }

    /// An empty shard that shares [`AggregateConfig::max_series`] with
    /// every other shard made with the same `live` count.
    pub fn with_count(config: Arc<AggregateConfig>, live: Arc<SeriesCount>) -> Shard {
        let id = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
        Shard {
            id,
            entries: Vec::new(),
            spellings: Vec::new(),
            index: HashTable::new(),
            aliases: HashTable::new(),
            extra: HashTable::new(),
            keys: KeyBuilder::default(),
            config,
            window: Window::new(id),
            free: Vec::new(),
            live,
            per_metric: PerMetric::default(),
        }
    }

    /// This shard's number, unique in the process.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Records one parsed point.
    ///
    /// # Errors
    ///
    /// The reason the point was dropped: unsplittable tags, a name or tag
    /// that is not UTF-8 (checked only when the series is new), a field over
    /// 65535 bytes, a new series' name and tags over
    /// [`AggregateConfig::max_key_bytes`], a `ts_store` series over its
    /// timestamp limit, or a new
    /// series over [`AggregateConfig::max_series`] or
    /// [`AggregateConfig::max_series_per_metric`].
    pub fn record(&mut self, p: &Point<'_>) -> Result<(), RecordError> {
        let kind = SeriesKind::of(p);
        self.record_hashed(p, kind, raw_hash(kind, p))
    }

    /// Records `points` in order, as [`Shard::record`] would one by one,
    /// calling `done` with each point's index and result.
    ///
    /// # Design
    ///
    /// With 100k live series the lookups of one point are a chain of cache
    /// misses: the alias table's control bytes, its slot, the entry, the
    /// stored spelling, the window value. `perf annotate` of the agent at
    /// 100k DogStatsD series put most of `record`'s samples on those loads
    /// (docs/benchmarks/LOG.md, "looking a batch of points up together"). Here
    /// each step is taken for every point of the batch before the next
    /// step, so the misses of up to [`BATCH`] points are in flight at once:
    /// the probes are independent loads the CPU overlaps, and the entries,
    /// spellings and values they lead to are prefetched. The last step is
    /// the ordinary one, checking everything again, so a candidate that is
    /// wrong (a 7-bit tag collision, or a series this batch created) costs
    /// only the slow path, never a wrong result.
    pub fn record_batch(
        &mut self,
        points: &[Point<'_>],
        mut done: impl FnMut(usize, Result<(), RecordError>),
    ) {
        for chunk_start in (0..points.len()).step_by(BATCH) {
            let chunk = &points[chunk_start..points.len().min(chunk_start + BATCH)];
            let mut kinds = [SeriesKind::Counter; BATCH];
            let mut hashes = [0u64; BATCH];
            let mut slots = [NO_SLOT; BATCH];
            for (i, p) in chunk.iter().enumerate() {
                kinds[i] = SeriesKind::of(p);
                hashes[i] = raw_hash(kinds[i], p);
            }
            // Candidates by the table's tag alone: no load depends on another
            // point's, so the probes overlap.
            for i in 0..chunk.len() {
                slots[i] = self
                    .aliases
                    .find(hashes[i], |_| true)
                    .map_or(NO_SLOT, |&s| s);
            }
            for &slot in &slots[..chunk.len()] {
                if let Some(Some(stored)) = self.entries.get(slot as usize) {
                    prefetch_bytes(stored);
                    self.window.prefetch(slot);
                }
            }
            for (i, p) in chunk.iter().enumerate() {
                let (kind, slot) = (kinds[i], slots[i]);
                let syntax = syntax_byte(p.tag_syntax);
                let result = match self.entries.get(slot as usize) {
                    Some(Some(stored)) if spelled_as(stored, kind.byte(), syntax, p) => {
                        let key = key_of(stored);
                        self.window.record(slot, kind, key, p, &self.config)
                    }
                    _ => self.record_hashed(p, kind, hashes[i]),
                };
                done(chunk_start + i, result);
            }
        }
    }

    /// [`Shard::record`] with the kind and spelling hash computed.
    fn record_hashed(
        &mut self,
        p: &Point<'_>,
        kind: SeriesKind,
        raw: u64,
    ) -> Result<(), RecordError> {
        // Fast path: this exact spelling was seen before.
        let syntax = syntax_byte(p.tag_syntax);
        let entries = &self.entries;
        let first = self.aliases.find(raw, |&i| {
            entries[i as usize]
                .as_deref()
                .is_some_and(|s| spelled_as(s, kind.byte(), syntax, p))
        });
        if let Some(&slot) = first {
            let key = entries[slot as usize].as_deref().map_or(&[][..], key_of);
            return self.window.record(slot, kind, key, p, &self.config);
        }
        if let Some(a) = self.extra.find(raw, |a| a.matches(kind.byte(), p)) {
            let key = entries[a.entry as usize].as_deref().map_or(&[][..], key_of);
            return self.window.record(a.entry, kind, key, p, &self.config);
        }
        // Checked only for series not found by spelling: a known series
        // was created under the same limit.
        if p.name.len() + p.tags.len() > self.config.max_key_bytes {
            return Err(RecordError::KeyTooLong);
        }
        if p.name.len() > usize::from(u16::MAX) {
            return Err(RecordError::FieldTooLong);
        }
        self.keys.build(kind.byte(), p.name, p.tags, p.tag_syntax)?;
        let key = self.keys.key();
        let hash = key::hash(key);
        let entries = &mut self.entries;
        let found = self.index.find(hash, |&i| {
            entries[i as usize].as_deref().map(key_of) == Some(key)
        });
        if let Some(&i) = found {
            let known = &mut self.spellings[i as usize];
            if *known < MAX_ALIASES {
                *known += 1;
                self.extra
                    .insert_unique(raw, Alias::new(kind.byte(), p, i), Alias::hash);
            }
            return self.window.record(i, kind, key, p, &self.config);
        }
        if std::str::from_utf8(p.name).is_err() || std::str::from_utf8(p.tags).is_err() {
            return Err(RecordError::InvalidUtf8);
        }
        // A shard that has numbered every slot it can holds no more series:
        // the series limit of its slot numbers.
        let slot = match self.free.last() {
            Some(&slot) => slot,
            None => u32::try_from(entries.len())
                .ok()
                .filter(|&s| s != NO_SLOT)
                .ok_or(RecordError::SeriesLimit)?,
        };
        admit(&self.live, &mut self.per_metric, &self.config, p.name)?;
        // A point the new series cannot take leaves no series behind.
        if let Err(e) = self.window.record(slot, kind, key, p, &self.config) {
            release(&self.live, &mut self.per_metric, &self.config, p.name);
            return Err(e);
        }
        let stored = key::stored(key, syntax, p.tags);
        if self.free.pop().is_some() {
            entries[slot as usize] = Some(Arc::clone(&stored));
            self.spellings[slot as usize] = 1;
        } else {
            reserve_slots(entries, entries.len() + 1);
            entries.push(Some(Arc::clone(&stored)));
            reserve_slots(&mut self.spellings, entries.len());
            self.spellings.push(1);
        }
        self.window.added.push((slot, kind, stored));
        self.index
            .insert_unique(hash, slot, |&j| key_hash(entries, j));
        self.aliases.insert_unique(raw, slot, |&j| {
            entries[j as usize]
                .as_deref()
                .map_or(0, first_spelling_hash)
        });
        Ok(())
    }

    /// Number of live series.
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// True when the shard holds no series.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the open window: returns its values and starts the next one
    /// in `recycled` (a window the flusher has finished with, or a new one).
    /// Series the flusher expired through `recycled` that received no data
    /// since are freed here, and reported in the next window.
    pub fn take_window(&mut self, recycled: Option<Window>) -> Window {
        let mut next = recycled
            .filter(|w| w.shard() == self.id)
            .unwrap_or_else(|| Window::new(self.id));
        next.added.clear();
        next.removed.clear();
        let mut freed_extra = false;
        for slot in std::mem::take(&mut next.expire) {
            let Some(e) = self.entries.get_mut(slot as usize) else {
                continue;
            };
            // Data since the flusher's decision revives the series instead.
            if e.is_none() || self.window.is_touched(slot) {
                continue;
            }
            let Some(stored) = e.take() else { continue };
            let name = key::split_name(key_of(&stored)).map_or(&[][..], |(n, _)| n);
            release(&self.live, &mut self.per_metric, &self.config, name);
            let hash = key::hash(key_of(&stored));
            if let Ok(found) = self.index.find_entry(hash, |&i| i == slot) {
                found.remove();
            }
            let hash = first_spelling_hash(&stored);
            if let Ok(found) = self.aliases.find_entry(hash, |&i| i == slot) {
                found.remove();
            }
            freed_extra |= self.spellings[slot as usize] > 1;
            self.spellings[slot as usize] = 0;
            self.free.push(slot);
            next.removed.push(slot);
        }
        if freed_extra {
            let entries = &self.entries;
            self.extra.retain(|a| entries[a.entry as usize].is_some());
        }
        std::mem::replace(&mut self.window, next)
    }
}

#[cfg(test)]
mod tests {
    use sonde_proto::{Kind, TagSyntax, Value};

    use super::*;
    use crate::window::Agg;

    fn point<'a>(kind: Kind, name: &'a str, tags: &'a str, value: Value<'a>) -> Point<'a> {
        Point {
            kind,
            name: name.as_bytes(),
            tags: tags.as_bytes(),
            tag_syntax: TagSyntax::Msgpack,
            value,
            sample_rate: 1.0,
            timestamp: None,
        }
    }

    /// Spellings with a fast-path alias.
    fn known(s: &Shard) -> usize {
        s.aliases.len() + s.extra.len()
    }

    #[test]
    fn a_point_batch_gives_back_what_was_pushed_until_cleared() {
        let mut batch = PointBatch::default();
        assert!(batch.points().is_empty());
        let names: Vec<String> = (0..BATCH).map(|i| format!("m{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let full = batch.push(point(Kind::Counter, name, "", Value::Number(i as f64)));
            assert_eq!(full, i + 1 == BATCH);
        }
        let got: Vec<_> = batch.points().iter().map(|p| (p.name, p.value)).collect();
        let want: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_bytes(), Value::Number(i as f64)))
            .collect();
        assert_eq!(got, want);
        assert_eq!(format!("{batch:?}").matches("Point").count(), BATCH);
        batch.clear();
        assert!(batch.points().is_empty());
        batch.push(point(Kind::Counter, "again", "", Value::Number(1.0)));
        assert_eq!(batch.points()[0].name, b"again");
    }

    #[test]
    fn a_value_is_16_bytes_and_an_entry_16() {
        // Two values and one entry per series: the budget in
        // tests/memory_budget.rs depends on these sizes.
        assert_eq!(std::mem::size_of::<Agg>(), 16);
        assert_eq!(std::mem::size_of::<Entry>(), 16);
    }

    #[test]
    fn the_same_series_in_any_tag_order_is_one_entry() {
        let mut s = Shard::new(Arc::default());
        s.record(&point(Kind::Counter, "m", "a=1|b=2", Value::Number(1.0)))
            .unwrap();
        s.record(&point(Kind::Counter, "m", "b=2 a=1", Value::Number(2.0)))
            .unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.window.values[0], Agg::Sum(3.0));
    }

    #[test]
    fn every_spelling_up_to_the_limit_gets_an_alias_of_its_series() {
        let mut s = Shard::new(Arc::default());
        let many: Vec<String> = (0..17).map(|i| format!("k{i}=v")).collect();
        let many = many.join("|");
        for tags in [
            "a=1 b=2",
            "b=2|a=1",
            "a=1 b=2",
            many.as_str(),
            many.as_str(),
        ] {
            s.record(&point(Kind::Counter, "m", tags, Value::Number(1.0)))
                .unwrap();
        }
        assert_eq!(s.len(), 2);
        assert_eq!(s.window.values[0], Agg::Sum(3.0));
        assert_eq!(s.window.values[1], Agg::Sum(2.0));
        assert_eq!(known(&s), 3);
        for tags in ["b=2 a=1", "a=1|b=2", "b=2 a=1"] {
            s.record(&point(Kind::Counter, "m", tags, Value::Number(1.0)))
                .unwrap();
        }
        assert_eq!(s.window.values[0], Agg::Sum(6.0));
        assert_eq!(known(&s), 5);
        assert_eq!(s.spellings[0], MAX_ALIASES);
    }

    #[test]
    fn series_that_differ_only_in_a_tag_value_stay_apart_on_the_fast_path() {
        let mut s = Shard::new(Arc::default());
        for _ in 0..3 {
            for (tags, v) in [("b=2|a=1", 1.0), ("b=3|a=1", 10.0), ("a=1|b=2", 100.0)] {
                s.record(&point(Kind::Counter, "m", tags, Value::Number(v)))
                    .unwrap();
            }
        }
        assert_eq!(s.len(), 2);
        assert_eq!(s.window.values[0], Agg::Sum(303.0));
        assert_eq!(s.window.values[1], Agg::Sum(30.0));
        assert_eq!(known(&s), 3);
    }

    #[test]
    fn aliases_still_hit_after_their_table_grew() {
        let mut s = Shard::new(Arc::default());
        let tags: Vec<String> = (0..5000).map(|i| format!("z={i}|a=x")).collect();
        for _ in 0..2 {
            for t in &tags {
                s.record(&point(Kind::Counter, "m", t, Value::Number(1.0)))
                    .unwrap();
            }
        }
        // A miss after a rehash with wrong hashes would add a second alias.
        assert_eq!((s.len(), known(&s)), (5000, 5000));
        assert!(s.spellings.iter().all(|&n| n == 1));
        assert!(s.window.values.iter().all(|v| *v == Agg::Sum(2.0)));
    }

    #[test]
    fn invalid_utf8_names_are_dropped_when_new() {
        let mut s = Shard::new(Arc::default());
        let mut p = point(Kind::Counter, "m", "", Value::Number(1.0));
        p.name = b"\xff\xfe";
        assert_eq!(s.record(&p), Err(RecordError::InvalidUtf8));
        assert!(s.is_empty());
        assert!(s.window.added.is_empty());
    }

    #[test]
    fn a_set_keeps_at_most_max_set_members_distinct_members_a_window() {
        let config = AggregateConfig {
            max_set_members: 3,
            ..AggregateConfig::default()
        };
        let mut s = Shard::new(Arc::new(config));
        let mut rec =
            |m: &str| s.record(&point(Kind::Set, "users", "", Value::Member(m.as_bytes())));
        for m in ["a", "b", "c", "a"] {
            rec(m).unwrap();
        }
        // A fourth distinct member is dropped; members already in still count.
        assert_eq!(rec("d"), Err(RecordError::SetFull));
        assert_eq!(rec("b"), Ok(()));
        assert!(matches!(&s.window.values[0], Agg::Set(m) if m.len() == 3));
    }

    #[test]
    fn gauge_deltas_after_a_set_apply_to_it() {
        let mut s = Shard::new(Arc::default());
        for v in [Value::Delta(5.0), Value::Number(10.0), Value::Delta(-3.0)] {
            s.record(&point(Kind::Gauge, "g", "", v)).unwrap();
        }
        assert_eq!(s.window.values[0], Agg::GaugeSet(7.0));
    }

    #[test]
    fn sampled_counts_scale_up() {
        let mut s = Shard::new(Arc::default());
        let mut p = point(Kind::Count, "c", "", Value::Number(1.0));
        p.sample_rate = 0.1;
        s.record(&p).unwrap();
        assert_eq!(s.window.values[0], Agg::Sum(10.0));
    }

    #[test]
    fn a_closed_window_lists_new_series_and_the_next_starts_from_zero() {
        let mut s = Shard::new(Arc::default());
        s.record(&point(Kind::Counter, "a", "", Value::Number(1.0)))
            .unwrap();
        s.record(&point(Kind::Counter, "b", "", Value::Number(2.0)))
            .unwrap();
        let first = s.take_window(None);
        assert_eq!(first.added.len(), 2);
        assert_eq!(first.touched_slots().collect::<Vec<_>>(), [0, 1]);
        // Reuse the first buffer as the flusher would hand it back.
        let mut back = first;
        back.added.clear();
        back.touched.fill(0);
        s.record(&point(Kind::Counter, "b", "", Value::Number(5.0)))
            .unwrap();
        let second = s.take_window(Some(back));
        assert!(second.added.is_empty(), "known series are not sent again");
        assert_eq!(second.touched_slots().collect::<Vec<_>>(), [1]);
        assert_eq!(second.values[1], Agg::Sum(5.0));
        // The recycled buffer still holds 2.0 for "b": the first point of the
        // window resets it.
        s.record(&point(Kind::Counter, "b", "", Value::Number(1.0)))
            .unwrap();
        assert_eq!(s.window.values[1], Agg::Sum(1.0));
    }

    #[test]
    fn expired_slots_are_freed_unless_they_saw_data_and_then_reused() {
        let mut s = Shard::new(Arc::default());
        for name in ["a", "b"] {
            s.record(&point(Kind::Counter, name, "x=1", Value::Number(1.0)))
                .unwrap();
        }
        let mut back = s.take_window(None);
        back.added.clear();
        back.touched.fill(0);
        back.expire = vec![0, 1];
        // "b" came back after the flusher's decision: it stays.
        s.record(&point(Kind::Counter, "b", "x=1", Value::Number(1.0)))
            .unwrap();
        let w = s.take_window(Some(back));
        assert!(w.removed.is_empty());
        assert_eq!(s.window.removed, [0]);
        assert_eq!(s.len(), 1);
        // A new series takes the free slot, with a fresh value.
        s.record(&point(Kind::Timer, "c", "", Value::Number(4.0)))
            .unwrap();
        assert_eq!(s.window.added.len(), 1);
        assert_eq!(s.window.added[0].0, 0);
        assert!(matches!(s.window.values[0], Agg::Timer(_)));
        // The old spelling of "a" no longer resolves to slot 0.
        s.record(&point(Kind::Counter, "a", "x=1", Value::Number(1.0)))
            .unwrap();
        assert_eq!(s.window.added.last().unwrap().0, 2);
        assert_eq!(s.len(), 3);
    }

    fn limited(max_series: usize, per_metric: Option<u32>) -> Arc<AggregateConfig> {
        Arc::new(AggregateConfig {
            max_series,
            max_series_per_metric: per_metric,
            ..AggregateConfig::default()
        })
    }

    fn counter(s: &mut Shard, name: &str, tags: &str) -> Result<(), RecordError> {
        s.record(&point(Kind::Counter, name, tags, Value::Number(1.0)))
    }

    #[test]
    fn shards_sharing_a_count_stop_creating_series_at_the_global_limit() {
        let config = limited(3, None);
        let live = Arc::new(SeriesCount::default());
        let mut a = Shard::with_count(Arc::clone(&config), Arc::clone(&live));
        let mut b = Shard::with_count(Arc::clone(&config), Arc::clone(&live));
        counter(&mut a, "m", "i=1").unwrap();
        counter(&mut b, "m", "i=2").unwrap();
        counter(&mut a, "m", "i=3").unwrap();
        assert_eq!(counter(&mut b, "m", "i=4"), Err(RecordError::SeriesLimit));
        assert_eq!(counter(&mut a, "n", ""), Err(RecordError::SeriesLimit));
        assert_eq!((a.len(), b.len(), live.get()), (2, 1, 3));
        // Series already live keep taking points, on either path.
        counter(&mut a, "m", "i=1").unwrap();
        counter(&mut b, "m", "i=2").unwrap();
        assert_eq!(a.window.values[0], Agg::Sum(2.0));
        // A dropped shard gives its series back.
        drop(a);
        assert_eq!(live.get(), 1);
        counter(&mut b, "m", "i=4").unwrap();
    }

    #[test]
    fn an_expired_series_gives_its_place_back() {
        let mut s = Shard::new(limited(1, Some(1)));
        counter(&mut s, "a", "").unwrap();
        assert_eq!(counter(&mut s, "b", ""), Err(RecordError::SeriesLimit));
        let mut back = s.take_window(None);
        back.touched.fill(0);
        back.expire = vec![0];
        s.take_window(Some(back));
        assert_eq!(s.live.get(), 0);
        counter(&mut s, "b", "").unwrap();
        counter(&mut s, "a", "x=1").unwrap_err();
    }

    #[test]
    fn the_per_metric_limit_holds_one_name_and_spares_the_others() {
        let mut s = Shard::new(limited(100, Some(2)));
        counter(&mut s, "hot", "i=1").unwrap();
        counter(&mut s, "hot", "i=2").unwrap();
        assert_eq!(
            counter(&mut s, "hot", "i=3"),
            Err(RecordError::MetricSeriesLimit)
        );
        // Another kind of the same name counts against the same name.
        assert_eq!(
            s.record(&point(Kind::Timer, "hot", "", Value::Number(1.0))),
            Err(RecordError::MetricSeriesLimit)
        );
        counter(&mut s, "cold", "i=1").unwrap();
        counter(&mut s, "hot", "i=2").unwrap();
        assert_eq!((s.len(), s.live.get()), (3, 3));
    }

    #[test]
    fn a_new_series_whose_first_point_fails_takes_no_budget() {
        let mut s = Shard::new(limited(1, Some(1)));
        // A ts_store point without a timestamp creates no series.
        let p = point(Kind::TsStore, "t", "", Value::Number(1.0));
        assert_eq!(s.record(&p), Err(RecordError::MissingTimestamp));
        assert_eq!(s.live.get(), 0);
        counter(&mut s, "t", "").unwrap();
    }

    #[test]
    fn a_new_series_with_a_key_over_max_key_bytes_is_dropped() {
        let mut s = Shard::new(Arc::new(AggregateConfig {
            max_key_bytes: 11,
            ..AggregateConfig::default()
        }));
        counter(&mut s, "name", "a=1|b=2").unwrap();
        assert_eq!(
            counter(&mut s, "name", "a=1|b=22"),
            Err(RecordError::KeyTooLong)
        );
        assert_eq!(
            counter(&mut s, "a_long_name1", ""),
            Err(RecordError::KeyTooLong)
        );
        // The known series, in another tag order, still takes points.
        counter(&mut s, "name", "b=2 a=1").unwrap();
        assert_eq!((s.len(), s.window.values[0].clone()), (1, Agg::Sum(2.0)));
    }
}
