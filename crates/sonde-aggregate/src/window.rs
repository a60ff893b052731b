//! The values of one shard's series for one window ([`Window`]): what each
//! series accumulated ([`Agg`]), per metric type, and which series saw data.

use std::sync::Arc;

use hashbrown::HashSet;
use sonde_proto::{Point, Value};

use crate::config::{AggregateConfig, Bounds};
use crate::error::RecordError;
use crate::key;
use crate::kind::SeriesKind;
use crate::prefetch::prefetch;
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
        // in docs/benchmarks/LOG.md).
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
    pub(crate) fn new(shard: u32) -> Window {
        Window {
            shard,
            values: Vec::new(),
            touched: Vec::new(),
            added: Vec::new(),
            removed: Vec::new(),
            expire: Vec::new(),
        }
    }

    /// The shard this window belongs to (see [`Shard::id`](crate::Shard::id)).
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
    pub(crate) fn prefetch(&self, slot: u32) {
        if let Some(v) = self.values.get(slot as usize) {
            prefetch(v);
        }
    }

    /// Records a point of the series in `slot`. The first point of a window
    /// resets the slot's value from the previous use of this buffer.
    #[inline(always)]
    pub(crate) fn record(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
