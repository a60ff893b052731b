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

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::{HashSet, HashTable};
use sonde_proto::{Point, TagSyntax, Value};

use crate::config::{AggregateConfig, Bounds};
use crate::error::RecordError;
use crate::key::{self, KeyBuilder};
use crate::kind::SeriesKind;
use crate::sketch::Sketch;

/// Counts per histogram bucket for one window (not cumulative).
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramWindow {
    pub(crate) bounds: Bounds,
    /// One count per bound, plus the `+Inf` bucket.
    pub(crate) counts: Box<[u64]>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl HistogramWindow {
    fn new(bounds: &Bounds) -> Self {
        HistogramWindow {
            bounds: bounds.clone(),
            counts: vec![0; bounds.values.len() + 1].into_boxed_slice(),
            sum: 0.0,
            count: 0,
        }
    }

    fn add(&mut self, v: f64) {
        let bounds = &self.bounds.values[..];
        // The bucket is the number of bounds below `v` (they increase
        // strictly). Counted outright for the usual dozen bounds: the
        // compiler vectorizes it, where a binary search mispredicts about
        // half its branches on varied values ("histogram bucket by count"
        // in docs/BENCHMARKS.md).
        let i = if bounds.len() <= 32 {
            bounds.iter().filter(|&&b| b < v).count()
        } else {
            bounds.partition_point(|&b| b < v)
        };
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    pub(crate) fn merge(&mut self, other: &HistogramWindow) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

/// What one series accumulated in one window. 16 bytes: the window
/// buffers hold one per series, twice (one open, one being flushed).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Agg {
    /// A slot with no value yet (a buffer shorter than the shard).
    Vacant,
    /// Counters, rate counters, meters, StatsD counts.
    Sum(f64),
    /// msgpack `store`.
    Last(f64),
    /// StatsD gauge that received an absolute value: the value with the
    /// adjustments after it applied.
    GaugeSet(f64),
    /// StatsD gauge that received only adjustments: their sum.
    GaugeDelta(f64),
    Timer(Box<Sketch>),
    Histogram(Box<HistogramWindow>),
    Set(Box<HashSet<u64>>),
    /// `(timestamp, value)`: last value per timestamp, or the sum for
    /// [`SeriesKind::TsSum`]. Boxed (clippy's `box_collection` allowed) to keep
    /// every other kind's value at 16 bytes: a `Vec` inline would make it 32.
    #[allow(clippy::box_collection)]
    Ts(Box<Vec<(i64, f64)>>),
}

impl Agg {
    fn new(kind: SeriesKind, name: &[u8], config: &AggregateConfig) -> Agg {
        match kind {
            SeriesKind::Counter
            | SeriesKind::RateCounter
            | SeriesKind::Meter
            | SeriesKind::Count => Agg::Sum(0.0),
            SeriesKind::Store => Agg::Last(0.0),
            SeriesKind::Gauge => Agg::GaugeDelta(0.0),
            SeriesKind::Timer => Agg::Timer(Box::default()),
            SeriesKind::Histogram => Agg::Histogram(Box::new(HistogramWindow::new(
                config.histograms.for_name(name),
            ))),
            SeriesKind::Set => Agg::Set(Box::default()),
            SeriesKind::TsStore | SeriesKind::TsSum => Agg::Ts(Box::default()),
        }
    }

    /// Empties the value for a new window, keeping its allocation when it
    /// already has the shape `kind` needs (a slot reused by a series of
    /// another kind, or a vacant one, gets a new value).
    fn reset(&mut self, kind: SeriesKind, name: &[u8], config: &AggregateConfig) {
        use SeriesKind as K;
        // Any other pair is a value of another shape: made anew below.
        let fits = match (&mut *self, kind) {
            (Agg::Sum(v), K::Counter | K::RateCounter | K::Meter | K::Count) => {
                *v = 0.0;
                true
            }
            (Agg::Last(v), K::Store) => {
                *v = 0.0;
                true
            }
            (Agg::Timer(s), K::Timer) => {
                s.clear();
                true
            }
            (Agg::Histogram(h), K::Histogram)
                if Arc::ptr_eq(&h.bounds.values, &config.histograms.for_name(name).values) =>
            {
                h.counts.fill(0);
                h.sum = 0.0;
                h.count = 0;
                true
            }
            (Agg::Set(m), K::Set) => {
                m.clear();
                true
            }
            (Agg::Ts(t), K::TsStore | K::TsSum) => {
                t.clear();
                true
            }
            _ => false,
        };
        if !fits {
            *self = Agg::new(kind, name, config);
        }
    }

    #[inline(always)]
    fn record(
        &mut self,
        kind: SeriesKind,
        p: &Point<'_>,
        config: &AggregateConfig,
    ) -> Result<(), RecordError> {
        let max_ts = config.max_timestamps_per_series;
        match (self, p.value) {
            (Agg::Sum(s), Value::Number(v)) => *s += v / p.sample_rate,
            (Agg::Last(l), Value::Number(v)) => *l = v,
            (g @ (Agg::GaugeSet(_) | Agg::GaugeDelta(_)), Value::Number(v)) => {
                *g = Agg::GaugeSet(v)
            }
            (Agg::GaugeSet(s) | Agg::GaugeDelta(s), Value::Delta(d)) => *s += d,
            (Agg::Timer(s), Value::Number(v)) => s.add(v, 1.0 / p.sample_rate),
            (Agg::Histogram(h), Value::Number(v)) => h.add(v),
            (Agg::Set(s), Value::Member(m)) => {
                let h = key::hash(m);
                if s.len() >= config.max_set_members && !s.contains(&h) {
                    return Err(RecordError::SetFull);
                }
                s.insert(h);
            }
            (Agg::Ts(points), Value::Number(v)) => {
                let ts = p.timestamp.ok_or(RecordError::MissingTimestamp)?;
                let v = if kind == SeriesKind::TsSum {
                    v / p.sample_rate
                } else {
                    v
                };
                let full = points.len() >= max_ts;
                match points.iter_mut().find(|(t, _)| *t == ts) {
                    Some((_, old)) if kind == SeriesKind::TsSum => *old += v,
                    Some((_, old)) => *old = v,
                    None if full => return Err(RecordError::TimestampsFull),
                    None => points.push((ts, v)),
                }
            }
            _ => return Err(RecordError::BadValue),
        }
        Ok(())
    }

    /// Folds `other` (the same series, same window, another worker) into self.
    pub(crate) fn merge(&mut self, kind: SeriesKind, other: &Agg) {
        match (self, other) {
            (Agg::Sum(a), Agg::Sum(b)) => *a += b,
            (Agg::Last(a), Agg::Last(b)) => *a = *b,
            (g @ (Agg::GaugeSet(_) | Agg::GaugeDelta(_)), Agg::GaugeSet(b)) => {
                *g = Agg::GaugeSet(*b)
            }
            (Agg::GaugeSet(a) | Agg::GaugeDelta(a), Agg::GaugeDelta(b)) => *a += b,
            (Agg::Timer(a), Agg::Timer(b)) => a.merge(b),
            (Agg::Histogram(a), Agg::Histogram(b)) => a.merge(b),
            (Agg::Set(a), Agg::Set(b)) => a.extend(b.iter()),
            (Agg::Ts(a), Agg::Ts(b)) => {
                for &(ts, v) in b.iter() {
                    match a.iter_mut().find(|(t, _)| *t == ts) {
                        Some((_, old)) if kind == SeriesKind::TsSum => *old += v,
                        Some((_, old)) => *old = v,
                        None => a.push((ts, v)),
                    }
                }
            }
            // Same key means same kind byte, so the variants always match.
            _ => {}
        }
    }
}

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

/// A further spelling of a series (another tag order): kind, syntax, name
/// and the tag string exactly as received, pointing at the entry it
/// resolved to. Rare: clients nearly always repeat one order.
#[derive(Debug)]
struct Alias {
    /// `[kind][syntax][name_len u16][name][raw tags]`.
    raw: Box<[u8]>,
    entry: u32,
}

/// Raw spellings kept per series. Clients nearly always repeat one tag
/// order; a client that shuffles tags still resolves through the canonical
/// key, it just does not get a fast-path alias for every order.
const MAX_ALIASES: u8 = 4;

fn syntax_byte(s: TagSyntax) -> u8 {
    match s {
        TagSyntax::Msgpack => 0,
        TagSyntax::DogStatsd => 1,
    }
}

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
/// one ("point batch without a placeholder fill" in `docs/BENCHMARKS.md`).
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

/// Asks the CPU to bring the cache lines of `bytes` in (up to three: a
/// stored spelling is ~100 to 200 bytes). A hint only: it never faults.
#[inline(always)]
fn prefetch_bytes(bytes: &[u8]) {
    let start = bytes.as_ptr();
    for offset in [0, 64, 128] {
        if offset < bytes.len() {
            prefetch(start.wrapping_add(offset));
        }
    }
}

#[inline(always)]
fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(at.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above; `prfm` is a hint.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) at, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = at;
}

#[inline(always)]
fn raw_hash(kind: SeriesKind, p: &Point<'_>) -> u64 {
    spelling_hash(kind.byte(), syntax_byte(p.tag_syntax), p.name, p.tags)
}

/// The hash of a spelling: kind, syntax, name and raw tags, under a
/// random seed per process.
///
/// # Design
///
/// Hand written, rather than `foldhash` fed three writes, because it is on
/// every point's path: each write of a `Hasher` is a mixing step with its
/// own length dispatch, and the three cost several times the work of one
/// pass over the bytes ("spelling hash in one pass" in
/// `docs/BENCHMARKS.md`). This takes 16 bytes per folded multiply (the
/// 64x64->128-bit product folded to 64 bits, as foldhash and wyhash do),
/// chained through the name, and apart through the tags. The table only
/// needs a well-spread hash; equal hashes are always confirmed by
/// comparing the bytes. Both lengths are mixed in, so moving bytes between
/// name and tags changes the input.
#[inline(always)]
fn spelling_hash(kind: u8, syntax: u8, name: &[u8], tags: &[u8]) -> u64 {
    let [k0, k1] = *spelling_seeds();
    let head = u64::from(kind) | u64::from(syntax) << 8 | (name.len() as u64) << 16;
    // Name and tags in two independent chains, joined at the end: the
    // multiplies of one do not wait for the other's.
    let name_part = fold_bytes(k0 ^ head, name, k1);
    let tags_part = fold_bytes(k1 ^ tags.len() as u64, tags, k0);
    fold(name_part, tags_part)
}

/// The two seeds of [`spelling_hash`], drawn once per process from the
/// key hasher's random state.
fn spelling_seeds() -> &'static [u64; 2] {
    static SEEDS: std::sync::OnceLock<[u64; 2]> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        use std::hash::BuildHasher;
        let state = key::hash_state();
        // Odd, so that no seed zeroes a product.
        [state.hash_one(1u8) | 1, state.hash_one(2u8) | 1]
    })
}

/// The 64x64->128-bit product of `x` and `y`, folded to 64 bits.
#[inline(always)]
fn fold(x: u64, y: u64) -> u64 {
    let full = u128::from(x) * u128::from(y);
    full as u64 ^ (full >> 64) as u64
}

/// Folds `bytes` into `acc`, 16 bytes a step; the last step reads the last
/// 16 bytes (overlapping the one before), and inputs under 16 bytes are
/// read as two overlapping halves.
#[inline(always)]
fn fold_bytes(acc: u64, bytes: &[u8], k: u64) -> u64 {
    let n = bytes.len();
    let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let half = |b: &[u8]| u64::from(u32::from_le_bytes(b[..4].try_into().unwrap_or([0; 4])));
    let (lo, hi) = if n > 16 {
        let mut acc = acc;
        // Every whole 16 bytes but the last, then the last 16.
        let (steps, _) = bytes[..n - 1].as_chunks::<16>();
        for step in steps {
            acc = fold(acc ^ word(&step[..8]), k ^ word(&step[8..]));
        }
        let last = &bytes[n - 16..];
        return fold(acc ^ word(last), k ^ word(&last[8..]));
    } else if n >= 8 {
        (word(bytes), word(&bytes[n - 8..]))
    } else if n >= 4 {
        (half(bytes), half(&bytes[n - 4..]))
    } else if n > 0 {
        (
            u64::from(bytes[0]) | u64::from(bytes[n / 2]) << 8,
            u64::from(bytes[n - 1]),
        )
    } else {
        (0, 0)
    };
    fold(acc ^ lo, k ^ hi)
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

/// The hash [`raw_hash`] gave the first spelling of a stored series.
fn first_spelling_hash(stored: &[u8]) -> u64 {
    let (key, syntax, tags) = key::stored_parts(stored);
    let name = key::split_name(key).map_or(&[][..], |(n, _)| n);
    spelling_hash(key[0], syntax, name, tags)
}

/// True when `p` (recorded as `kind`) is spelled as the first spelling of
/// the stored series: same kind, syntax, name and raw tag bytes.
///
/// The key's head is compared field by field: compared as a slice against
/// a `[kind, len_lo, len_hi]` built on the stack, the 2-byte reload of the
/// byte and 2-byte stores that built it stalled on store forwarding, and
/// was the hottest load of `record_batch` in `perf annotate` of
/// `hot_path statsd 10000` ("StatsD values kept in registers" in
/// `docs/BENCHMARKS.md`).
#[inline]
fn spelled_as(stored: &[u8], kind: u8, syntax: u8, p: &Point<'_>) -> bool {
    let (key, syn, tags) = key::stored_parts(stored);
    let n = p.name.len();
    match key {
        [k, lo, hi, name @ ..] => {
            same_bytes(tags, p.tags)
                && syn == syntax
                && *k == kind
                && u16::from_le_bytes([*lo, *hi]) == n as u16
                && name.get(..n) == Some(p.name)
        }
        _ => false,
    }
}

/// `a == b`, without a `memcmp` call when both are empty.
///
/// An empty slice's pointer may be dangling (`&[]` is at address 1), and
/// glibc's AVX-512 `memcmp` reads its bytes with a masked load even for
/// length 0. A masked load whose masked-out bytes lie on an unmapped page
/// has its fault suppressed by a microcode assist that costs hundreds of
/// cycles on Intel CPUs: for points without tags, that assist was a large
/// share of the agent's CPU at plain-1k ("empty tags without a memcmp" in
/// `docs/BENCHMARKS.md`).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// Makes room in a per-slot array for `len` elements, growing by an eighth
/// rather than doubling: the per-slot arrays are most of a series' memory
/// besides its key, and a doubled array is on average ~30% unused. The
/// extra copying is paid once per new series, never per point.
pub(crate) fn reserve_slots<T>(v: &mut Vec<T>, len: usize) {
    if len > v.capacity() {
        let want = len.max(v.capacity() + v.capacity() / 8).max(64);
        v.reserve_exact(want - v.len());
    }
}

impl Alias {
    fn new(kind: u8, p: &Point<'_>, entry: u32) -> Alias {
        let mut raw = Vec::with_capacity(4 + p.name.len() + p.tags.len());
        raw.push(kind);
        raw.push(syntax_byte(p.tag_syntax));
        raw.extend_from_slice(&(p.name.len() as u16).to_le_bytes());
        raw.extend_from_slice(p.name);
        raw.extend_from_slice(p.tags);
        Alias {
            raw: raw.into(),
            entry,
        }
    }

    fn matches(&self, kind: u8, p: &Point<'_>) -> bool {
        let n = p.name.len();
        self.raw.len() == 4 + n + p.tags.len()
            && self.raw[0] == kind
            && self.raw[1] == syntax_byte(p.tag_syntax)
            && self.raw[2..4] == (n as u16).to_le_bytes()
            && self.raw[4..4 + n] == *p.name
            && self.raw[4 + n..] == *p.tags
    }

    /// The hash [`raw_hash`] gave the point this alias was made from.
    fn hash(&self) -> u64 {
        let n = usize::from(u16::from_le_bytes([self.raw[2], self.raw[3]]));
        let (name, tags) = self.raw[4..].split_at(n);
        spelling_hash(self.raw[0], self.raw[1], name, tags)
    }
}

/// Slot number meaning "no series".
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// The values of one shard for one window, on its way between the worker
/// and the flusher.
///
/// Slots are the shard's series numbers. The worker fills `values` and
/// `touched`, and lists the series it created or freed; the flusher reads
/// and clears them, and may ask for slots to be freed with `expire`.
#[derive(Debug)]
pub struct Window {
    shard: u32,
    pub(crate) values: Vec<Agg>,
    /// One bit per slot that received data in this window.
    pub(crate) touched: Vec<u64>,
    /// Series created in this window: slot, kind and key.
    pub(crate) added: Vec<(u32, SeriesKind, Arc<[u8]>)>,
    /// Slots freed at the start of this window (their series expired).
    pub(crate) removed: Vec<u32>,
    /// On the way back: slots whose series the flusher expired.
    pub(crate) expire: Vec<u32>,
}

impl Window {
    fn new(shard: u32) -> Window {
        Window {
            shard,
            values: Vec::new(),
            touched: Vec::new(),
            added: Vec::new(),
            removed: Vec::new(),
            expire: Vec::new(),
        }
    }

    /// The shard this window belongs to (see [`Shard::id`]).
    pub fn shard(&self) -> u32 {
        self.shard
    }

    pub(crate) fn is_touched(&self, slot: u32) -> bool {
        let (word, bit) = (slot as usize / 64, slot % 64);
        self.touched.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    /// Slots that received data, ascending.
    pub(crate) fn touched_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.touched.iter().enumerate().flat_map(|(i, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let bit = w.trailing_zeros();
                    w &= w - 1;
                    i as u32 * 64 + bit
                })
            })
        })
    }

    pub(crate) fn untouch(&mut self, slot: u32) {
        if let Some(w) = self.touched.get_mut(slot as usize / 64) {
            *w &= !(1 << (slot % 64));
        }
    }

    /// Brings the value of `slot` into the cache ahead of [`Window::record`].
    #[inline(always)]
    fn prefetch(&self, slot: u32) {
        if let Some(v) = self.values.get(slot as usize) {
            prefetch(v);
        }
    }

    /// Records a point of the series in `slot`. The first point of a window
    /// resets the slot's value from the previous use of this buffer.
    #[inline(always)]
    fn record(
        &mut self,
        slot: u32,
        kind: SeriesKind,
        key: &[u8],
        p: &Point<'_>,
        config: &AggregateConfig,
    ) -> Result<(), RecordError> {
        let i = slot as usize;
        let (word, bit) = (i / 64, 1u64 << (slot % 64));
        if self.touched.get(word).is_none_or(|w| w & bit == 0) {
            if self.values.len() <= i {
                reserve_slots(&mut self.values, i + 1);
                self.values.resize(i + 1, Agg::Vacant);
            }
            if self.touched.len() <= word {
                self.touched.resize(word + 1, 0);
            }
            let name = key::split_name(key).map_or(&[][..], |(n, _)| n);
            self.values[i].reset(kind, name, config);
            self.values[i].record(kind, p, config)?;
            self.touched[word] |= bit;
            return Ok(());
        }
        self.values[i].record(kind, p, config)
    }
}

/// The live series of every worker shard of an agent, against which
/// [`AggregateConfig::max_series`] is enforced.
///
/// # Design
///
/// One atomic shared by all shards, touched only when a shard creates or
/// frees a series, never for a point of a series it already has: the hot
/// path stays free of shared writes, and creating a series (a key
/// allocation, three hash-table inserts) costs far more than one
/// `fetch_add`. A point that would create a series over the limit only
/// reads the counter, so a flood of new series keeps the cache line shared
/// instead of bouncing it between workers. The limit is exact: a shard
/// that raced past it gives its increment back.
///
/// Per-shard budgets (`max_series / workers` each) would need no shared
/// write at all, but would refuse series on a busy worker while an idle
/// one has room; the atomic costs less than a series' key allocation.
#[derive(Debug, Default)]
pub struct SeriesCount(AtomicUsize);

impl SeriesCount {
    /// Series currently held by the shards sharing this count.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Takes one series from the budget, unless `max` are live.
    fn try_add(&self, max: usize) -> bool {
        if self.0.load(Ordering::Relaxed) >= max {
            return false;
        }
        if self.0.fetch_add(1, Ordering::Relaxed) >= max {
            self.0.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn sub(&self, n: usize) {
        if n != 0 {
            self.0.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// Live series per metric name in one shard, by the name's hash (a 64-bit
/// collision would make two names share a budget; at most a few thousand
/// names live in a shard, so it does not happen in practice). Kept only
/// when [`AggregateConfig::max_series_per_metric`] is set: 16 bytes and a
/// control byte per distinct name.
#[derive(Debug, Default)]
struct PerMetric(HashTable<(u64, u32)>);

impl PerMetric {
    fn count(&self, hash: u64) -> u32 {
        self.0.find(hash, |e| e.0 == hash).map_or(0, |e| e.1)
    }

    fn add(&mut self, hash: u64) {
        match self.0.find_mut(hash, |e| e.0 == hash) {
            Some(e) => e.1 += 1,
            None => {
                self.0.insert_unique(hash, (hash, 1), |e| e.0);
            }
        }
    }

    fn remove(&mut self, hash: u64) {
        if let Ok(mut e) = self.0.find_entry(hash, |e| e.0 == hash) {
            e.get_mut().1 -= 1;
            if e.get().1 == 0 {
                e.remove();
            }
        }
    }
}

/// Admits a new series of metric `name` under both limits, counting it.
fn admit(
    live: &SeriesCount,
    per_metric: &mut PerMetric,
    config: &AggregateConfig,
    name: &[u8],
) -> Result<(), RecordError> {
    let Some(max) = config.max_series_per_metric else {
        return match live.try_add(config.max_series) {
            true => Ok(()),
            false => Err(RecordError::SeriesLimit),
        };
    };
    let hash = key::hash(name);
    if per_metric.count(hash) >= max {
        return Err(RecordError::MetricSeriesLimit);
    }
    if !live.try_add(config.max_series) {
        return Err(RecordError::SeriesLimit);
    }
    per_metric.add(hash);
    Ok(())
}

/// Gives a series of metric `name` back to both limits.
fn release(live: &SeriesCount, per_metric: &mut PerMetric, config: &AggregateConfig, name: &[u8]) {
    live.sub(1);
    if config.max_series_per_metric.is_some() {
        per_metric.remove(key::hash(name));
    }
}

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
            .filter(|w| w.shard == self.id)
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
    use super::*;
    use sonde_proto::{Kind, TagSyntax};

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
    fn the_spelling_hash_reads_every_byte_of_name_and_tags_and_where_they_split() {
        // Every length from 0 to 40 (each path of `fold_bytes`), every byte
        // changed in turn, and every split of the same bytes between name
        // and tags: all distinct hashes (a 64-bit collision among these few
        // thousand would be a bug, not bad luck).
        let mut seen = std::collections::HashSet::new();
        let mut count = 0;
        let mut add = |h: u64| {
            count += 1;
            seen.insert(h);
        };
        let text: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for len in 0..=text.len() {
            let bytes = &text[..len];
            for split in 0..=len {
                let (name, tags) = bytes.split_at(split);
                add(spelling_hash(7, 1, name, tags));
            }
            for at in 0..len {
                let mut changed = bytes.to_vec();
                changed[at] ^= 0x20;
                add(spelling_hash(7, 1, &changed, b"env:prod"));
                add(spelling_hash(7, 1, b"m", &changed));
            }
        }
        add(spelling_hash(3, 1, b"m", b"env:prod"));
        add(spelling_hash(7, 0, b"m", b"env:prod"));
        assert_eq!(seen.len(), count);
        // The same input, the same hash.
        assert_eq!(
            spelling_hash(7, 1, b"name", b"a:b,c:d"),
            spelling_hash(7, 1, b"name", b"a:b,c:d")
        );
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
    fn a_histogram_sample_lands_in_its_le_bucket_whatever_the_bound_count() {
        // 12 bounds take the counting path, 40 the binary search.
        for n in [1usize, 12, 32, 33, 40] {
            let values: Vec<f64> = (1..=n).map(|i| i as f64 * 2.5).collect();
            let mut h = HistogramWindow::new(&crate::config::Bounds::new(&values));
            let samples = [-1.0, 0.0, 2.5, 2.6, 5.0, 49.9, 50.0, 1e9, f64::MIN_POSITIVE];
            for v in samples {
                h.add(v);
            }
            let mut want = vec![0u64; n + 1];
            for v in samples {
                // `le`: the first bound at or above the sample, else +Inf.
                want[values.iter().position(|&b| v <= b).unwrap_or(n)] += 1;
            }
            assert_eq!(&h.counts[..], &want[..], "{n} bounds");
        }
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
