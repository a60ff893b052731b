//! A relative-error quantile sketch (the DDSketch idea) with exact min,
//! max, sum and count.
//!
//! # Design
//!
//! Samples fall into logarithmic buckets: bucket `i` holds the values in
//! `(γ^(i-1), γ^i]`, and a quantile query answers the bucket's midpoint in
//! relative terms, `2γ^i / (γ + 1)`, which is within `(γ-1)/(γ+1)` of any
//! value in the bucket. With [`RELATIVE_ACCURACY`] = 0.9% that keeps every
//! percentile inside the 1% contract of docs/METRICS.md with a margin for
//! float rounding.
//!
//! Memory is bounded by [`MAX_BINS`] per sign: a series whose samples span
//! more than `γ^MAX_BINS` (about 10^8) collapses its lowest buckets into one,
//! trading accuracy at the very low quantiles for a hard size limit.
//!
//! Hand-written rather than taken from a crate because the merge across
//! worker shards, fractional sample weights (StatsD `@rate`) and the exact
//! nearest-rank rule of the contract all have to hold together here.

/// The relative accuracy of every quantile the sketch returns.
pub const RELATIVE_ACCURACY: f64 = 0.009;

/// The most buckets one sign of a sketch keeps.
pub const MAX_BINS: usize = 1024;

/// The heaviest bucket a sparse store keeps (whole counts stay exact in
/// its `f32` weights well past this).
const SPARSE_MAX_WEIGHT: f64 = (1 << 20) as f64;

/// Values closer to zero than this count as zero.
const MIN_MAGNITUDE: f64 = 1e-12;

/// γ = (1 + α) / (1 - α).
fn gamma() -> f64 {
    (1.0 + RELATIVE_ACCURACY) / (1.0 - RELATIVE_ACCURACY)
}

/// Bucketing constants, computed once per process rather than per sample.
struct Mapping {
    inv_ln_gamma: f64,
    gamma: f64,
}

fn mapping() -> &'static Mapping {
    static MAPPING: std::sync::OnceLock<Mapping> = std::sync::OnceLock::new();
    MAPPING.get_or_init(|| Mapping {
        inv_ln_gamma: 1.0 / gamma().ln(),
        gamma: gamma(),
    })
}

fn index_of(magnitude: f64) -> i32 {
    let whole = magnitude as u32;
    if (whole as usize) < SMALL_WHOLE && f64::from(whole) == magnitude {
        return small_whole_indexes()[whole as usize];
    }
    index_by_log(magnitude)
}

fn index_by_log(magnitude: f64) -> i32 {
    ceil_i32(magnitude.ln() * mapping().inv_ln_gamma)
}

/// Whole numbers below this have their bucket index looked up.
const SMALL_WHOLE: usize = 2048;

/// [`index_by_log`] of 0, 1, 2, ... [`SMALL_WHOLE`] - 1, computed once:
/// timer samples are mostly whole milliseconds, and the table (8 KiB)
/// spares them the `ln` (a libm call) of every
/// bucketed sample, the same index by construction ("whole-number samples
/// bucketed by table" in `docs/benchmarks/LOG.md`). Index 0 is never read:
/// magnitudes at or below [`MIN_MAGNITUDE`] are counted as zero.
fn small_whole_indexes() -> &'static [i32; SMALL_WHOLE] {
    static TABLE: std::sync::OnceLock<Box<[i32; SMALL_WHOLE]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0; SMALL_WHOLE]);
        for (i, slot) in t.iter_mut().enumerate().skip(1) {
            *slot = index_by_log(i as f64);
        }
        t
    })
}

/// `x.ceil() as i32`, without the call: x86-64's baseline has no rounding
/// instruction, so `f64::ceil` is a libm call on every sample a sketch
/// buckets ("sketch buckets without a libm `ceil`" in `docs/benchmarks/LOG.md`).
/// Exact for every `x` an index can be (|x| < 2^31), and NaN gives 0 as
/// `as` does.
#[inline]
fn ceil_i32(x: f64) -> i32 {
    let t = x as i32;
    t.saturating_add(i32::from(f64::from(t) < x))
}

fn value_of(index: i32) -> f64 {
    let m = mapping();
    2.0 * m.gamma.powi(index) / (m.gamma + 1.0)
}

/// Bucket weights for one sign.
///
/// # Design
///
/// A timer series usually sees a few dozen samples per window spread over
/// hundreds of buckets (1 ms to 1 s spans 383 of them), so a contiguous
/// array would be mostly zeros: 3 KiB for 25 samples. The store starts
/// sparse, `(index, weight)` pairs sorted by index (8 bytes per occupied
/// bucket, a binary search per sample), and turns contiguous (8 bytes a
/// bucket in the span, one step per sample) when about half the spanned
/// buckets are occupied.
///
/// Sparse weights are `f32`, exact for whole counts up to 2^24; a bucket
/// that grows past [`SPARSE_MAX_WEIGHT`] turns the store contiguous, whose
/// weights are `f64`. Fractional weights (StatsD `@rate`) round at 1e-7
/// relative, far below the sketch's 0.9% bucket width.
#[derive(Clone, Debug, Default, PartialEq)]
struct Store {
    /// Occupied buckets, ascending, while the store is sparse.
    sparse: Vec<(i32, f32)>,
    /// The index of `counts[0]` once dense.
    offset: i32,
    /// Contiguous weights once dense; empty while sparse.
    counts: Vec<f64>,
}

impl Store {
    fn is_dense(&self) -> bool {
        !self.counts.is_empty()
    }

    fn add(&mut self, index: i32, weight: f64) {
        if self.is_dense() {
            return self.add_dense(index, weight);
        }
        match self.sparse.binary_search_by_key(&index, |&(i, _)| i) {
            Ok(at) => {
                let w = f64::from(self.sparse[at].1) + weight;
                if w > SPARSE_MAX_WEIGHT {
                    // Densify first: the f64 array takes the exact sum.
                    self.densify();
                    return self.add_dense(index, weight);
                }
                self.sparse[at].1 = w as f32;
            }
            Err(_) if weight > SPARSE_MAX_WEIGHT => {
                self.densify();
                self.add_dense(index, weight);
            }
            Err(at) => {
                self.sparse.insert(at, (index, weight as f32));
                let (lo, hi) = (self.sparse[0].0, self.sparse[self.sparse.len() - 1].0);
                let span = i64::from(hi) - i64::from(lo) + 1;
                // Some slack so a handful of neighbouring samples stays sparse.
                if 2 * self.sparse.len() as i64 >= span + 8 || span > MAX_BINS as i64 {
                    self.densify();
                }
            }
        }
    }

    /// Moves the sparse buckets into the contiguous array (which applies
    /// the [`MAX_BINS`] collapse).
    fn densify(&mut self) {
        let sparse = std::mem::take(&mut self.sparse);
        // Highest first, so the array is sized once and any collapse folds
        // the lowest buckets.
        for &(i, w) in sparse.iter().rev() {
            self.add_dense(i, f64::from(w));
        }
    }

    fn add_dense(&mut self, index: i32, weight: f64) {
        if self.counts.is_empty() {
            self.offset = index;
            self.counts.push(weight);
            return;
        }
        let mut index = index;
        let high = self.offset + self.counts.len() as i32 - 1;
        if index < self.offset {
            let new_len = (high - index + 1) as usize;
            if new_len > MAX_BINS {
                // Collapse: everything below the lowest kept bucket lands in it.
                index = high - MAX_BINS as i32 + 1;
                if index >= self.offset {
                    self.counts[(index - self.offset) as usize] += weight;
                    return;
                }
            }
            let grow = (self.offset - index) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0.0, grow));
            self.offset = index;
        } else if index > high {
            let new_len = (index - self.offset + 1) as usize;
            if new_len > MAX_BINS {
                let new_offset = index - MAX_BINS as i32 + 1;
                let drop = ((new_offset - self.offset) as usize).min(self.counts.len());
                let folded: f64 = self.counts.drain(..drop).sum();
                self.offset = new_offset;
                if self.counts.is_empty() {
                    self.counts.push(0.0);
                }
                self.counts[0] += folded;
            }
            let len = (index - self.offset + 1) as usize;
            self.counts.resize(len, 0.0);
        }
        self.counts[(index - self.offset) as usize] += weight;
    }

    /// Occupied buckets as `(index, weight)`, ascending by index.
    fn buckets(&self) -> impl DoubleEndedIterator<Item = (i32, f64)> + '_ {
        let dense = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, &w)| (self.offset + i as i32, w));
        self.sparse
            .iter()
            .map(|&(i, w)| (i, f64::from(w)))
            .chain(dense)
            .filter(|&(_, w)| w != 0.0)
    }

    fn merge(&mut self, other: &Store) {
        for (i, w) in other.buckets() {
            self.add(i, w);
        }
    }

    /// Empties the store, keeping its allocations for the next window.
    fn clear(&mut self) {
        self.sparse.clear();
        self.counts.clear();
        self.offset = 0;
    }

    fn heap_bytes(&self) -> usize {
        self.counts.capacity() * std::mem::size_of::<f64>()
            + self.sparse.capacity() * std::mem::size_of::<(i32, f32)>()
    }

    /// Occupied bucket slots (sparse pairs or the contiguous length).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.sparse.len() + self.counts.len()
    }
}

/// The most raw samples a sketch keeps; later samples go into buckets.
pub const MAX_SAMPLES: usize = 64;

/// Bucket stores, allocated once a sketch has more samples than
/// [`MAX_SAMPLES`] or a weighted one.
#[derive(Clone, Debug, Default, PartialEq)]
struct Bins {
    positive: Store,
    negative: Store,
    zero: f64,
}

impl Bins {
    fn add(&mut self, value: f64, weight: f64) {
        if value > MIN_MAGNITUDE {
            self.positive.add(index_of(value), weight);
        } else if value < -MIN_MAGNITUDE {
            self.negative.add(index_of(-value), weight);
        } else {
            self.zero += weight;
        }
    }

    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Bins>() + self.positive.heap_bytes() + self.negative.heap_bytes()
    }
}

/// A mergeable distribution of weighted samples.
///
/// # Design
///
/// Most timer series see a few samples per window (the load generator's
/// 250k series: ~10), so a sketch starts as a list of raw samples in `f32`
/// (4 bytes a sample, exact nearest-rank percentiles within `f32`'s 6e-8)
/// behind a 64-byte header. Samples after the first [`MAX_SAMPLES`], and any
/// weighted sample or value `f32` cannot hold to 1e-7, go into
/// logarithmic buckets. The bucket stores (120 bytes, two signs) are
/// boxed, so a small timer does not pay for them: 25 samples take 192
/// bytes where the bucket stores alone took 408 (docs/benchmarks/LOG.md,
/// "series memory budget"). Min, max, sum and count stay exact in `f64`
/// either way.
///
/// The raw samples stay raw when the buckets start; the flusher moves them
/// over ([`Sketch::settle`]) once it owns the window. Moving them on the
/// receive thread cost every timer series 64 bucket adds in the window it
/// overflowed, all series at about the same moment of a steady load; two
/// per add spread that out, but the receive thread still paid for them
/// ("raw samples settled by the flusher" in `docs/benchmarks/LOG.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct Sketch {
    count: f64,
    sum: f64,
    min: f64,
    max: f64,
    /// Raw samples, unweighted, in arrival order: at most [`MAX_SAMPLES`],
    /// the first of the window unless [`Sketch::settle`] moved them.
    samples: Vec<f32>,
    bins: Option<Box<Bins>>,
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch {
            count: 0.0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            samples: Vec::new(),
            bins: None,
        }
    }
}

/// True when `value` survives a round trip through `f32` to 1e-7.
fn fits_f32(value: f64) -> bool {
    let m = value.abs();
    m == 0.0 || (f64::from(f32::MIN_POSITIVE)..=f64::from(f32::MAX)).contains(&m)
}

impl Sketch {
    /// Adds `value` with `weight` (1 for a plain sample, `1/rate` for a
    /// sampled StatsD timer). Non-finite values and weights are ignored; the
    /// parsers never produce them.
    ///
    /// The first [`MAX_SAMPLES`] unweighted samples stay raw; the sample
    /// after them starts the buckets, which take it and every later one.
    /// No add moves raw samples: see [`Sketch::settle`].
    pub fn add(&mut self, value: f64, weight: f64) {
        if !value.is_finite() || !weight.is_finite() || weight <= 0.0 {
            return;
        }
        match &mut self.bins {
            Some(bins) => bins.add(value, weight),
            None if weight == 1.0 && self.samples.len() < MAX_SAMPLES && fits_f32(value) => {
                self.samples.push(value as f32)
            }
            None => {
                let mut bins = Box::<Bins>::default();
                bins.add(value, weight);
                self.bins = Some(bins);
            }
        }
        self.note(value, weight);
    }

    /// Moves the raw samples into the buckets when there are buckets, and
    /// frees their list. The flusher calls it on the sketches it takes from
    /// a window, before ranking them: ranking a sketch that holds both
    /// copies its buckets first. Changes no figure the sketch reports.
    pub fn settle(&mut self) {
        if self.bins.is_some() && !self.samples.is_empty() {
            self.bins_mut();
        }
    }

    /// Counts `value` into the exact count, sum, min and max.
    fn note(&mut self, value: f64, weight: f64) {
        self.count += weight;
        self.sum += value * weight;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Moves all raw samples into bucket stores, returning them.
    fn bins_mut(&mut self) -> &mut Bins {
        let samples = std::mem::take(&mut self.samples);
        let bins = self.bins.get_or_insert_with(Box::default);
        for &v in &samples {
            bins.add(f64::from(v), 1.0);
        }
        bins
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Sketch) {
        if other.count == 0.0 {
            return;
        }
        match &other.bins {
            None if self.bins.is_none()
                && self.samples.len() + other.samples.len() <= MAX_SAMPLES =>
            {
                self.samples.extend_from_slice(&other.samples);
            }
            _ => {
                let bins = self.bins_mut();
                for &v in &other.samples {
                    bins.add(f64::from(v), 1.0);
                }
                if let Some(o) = &other.bins {
                    bins.positive.merge(&o.positive);
                    bins.negative.merge(&o.negative);
                    bins.zero += o.zero;
                }
            }
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Total weight of the samples (the sample count when unweighted).
    pub fn count(&self) -> f64 {
        self.count
    }

    /// Exact weighted sum of the samples.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Exact smallest sample, or `None` when empty.
    pub fn min(&self) -> Option<f64> {
        (self.count > 0.0).then_some(self.min)
    }

    /// Exact largest sample, or `None` when empty.
    pub fn max(&self) -> Option<f64> {
        (self.count > 0.0).then_some(self.max)
    }

    /// The nearest-rank `q`-quantile (`0 < q <= 1`): the smallest sample
    /// whose rank is at least `ceil(q * count)`, within
    /// [`RELATIVE_ACCURACY`] of the exact value. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.quantiles([q])[0]
    }

    /// [`Sketch::quantile`] for several `qs` at once: raw samples are
    /// sorted once (a copy on the stack), not once per quantile.
    pub fn quantiles<const N: usize>(&self, qs: [f64; N]) -> [Option<f64>; N] {
        if self.count <= 0.0 {
            return [None; N];
        }
        // Shave a relative hair off the rank so that `q * n` landing a float
        // ulp above an integer does not skip to the next sample.
        let target = |q: f64| q.clamp(0.0, 1.0) * self.count * (1.0 - 1e-12);
        let Some(bins) = &self.bins else {
            let mut sorted = [0.0f32; MAX_SAMPLES];
            let sorted = &mut sorted[..self.samples.len()];
            sorted.copy_from_slice(&self.samples);
            sorted.sort_unstable_by(f32::total_cmp);
            return qs.map(|q| {
                let rank = (target(q).ceil() as usize).clamp(1, sorted.len());
                Some(f64::from(sorted[rank - 1]).clamp(self.min, self.max))
            });
        };
        if self.samples.is_empty() {
            return qs.map(|q| Some(self.bucket_quantile(bins, target(q))));
        }
        // Raw samples and buckets, not settled: rank them together, in a
        // copy.
        let mut all = Bins::clone(bins);
        for &v in &self.samples {
            all.add(f64::from(v), 1.0);
        }
        qs.map(|q| Some(self.bucket_quantile(&all, target(q))))
    }

    fn bucket_quantile(&self, bins: &Bins, target: f64) -> f64 {
        let mut seen = 0.0;
        // Ascending order: most negative first (highest negative index).
        for (i, w) in bins.negative.buckets().rev() {
            seen += w;
            if w > 0.0 && seen >= target {
                return (-value_of(i)).clamp(self.min, self.max);
            }
        }
        seen += bins.zero;
        if bins.zero > 0.0 && seen >= target {
            return 0.0f64.clamp(self.min, self.max);
        }
        for (i, w) in bins.positive.buckets() {
            seen += w;
            if w > 0.0 && seen >= target {
                return value_of(i).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// Forgets every sample, keeping the allocations for reuse.
    pub fn clear(&mut self) {
        self.samples.clear();
        if let Some(b) = &mut self.bins {
            b.positive.clear();
            b.negative.clear();
            b.zero = 0.0;
        }
        self.count = 0.0;
        self.sum = 0.0;
        self.min = f64::INFINITY;
        self.max = f64::NEG_INFINITY;
    }

    /// Bytes this sketch holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.samples.capacity() * std::mem::size_of::<f32>()
            + self.bins.as_ref().map_or(0, |b| b.heap_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_get_the_index_the_log_gives() {
        for i in 1..SMALL_WHOLE + 10 {
            let v = i as f64;
            assert_eq!(index_of(v), index_by_log(v), "{v}");
            assert_eq!(index_of(v + 0.5), index_by_log(v + 0.5), "{v}.5");
        }
        assert_eq!(index_of(1e-9), index_by_log(1e-9));
        assert_eq!(index_of(1e300), index_by_log(1e300));
    }

    #[test]
    fn ceil_i32_is_ceil_for_every_index_range_value() {
        let edges = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            1.5,
            -1.5,
            2.0 - 1e-12,
            -36_000.25,
            36_000.75,
        ];
        for x in edges
            .into_iter()
            .chain((-4000..4000).map(|i| f64::from(i) * 0.37))
        {
            assert_eq!(ceil_i32(x), x.ceil() as i32, "{x}");
        }
        assert_eq!(ceil_i32(f64::NAN), 0);
        assert_eq!(ceil_i32(1e300), i32::MAX);
    }
    use proptest::prelude::*;

    fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
        let n = sorted.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        sorted[rank - 1]
    }

    /// The sketch's bucket stores; panics while it holds raw samples.
    fn bins(s: &Sketch) -> &Bins {
        s.bins.as_deref().expect("bucketed")
    }

    fn assert_close(got: f64, want: f64) {
        let err = if want == 0.0 {
            got.abs()
        } else {
            ((got - want) / want).abs()
        };
        assert!(err <= 0.01, "got {got}, want {want}, relative error {err}");
    }

    #[test]
    fn percentiles_of_one_to_a_thousand_are_within_one_percent() {
        let mut s = Sketch::default();
        for v in 1..=1000 {
            s.add(v as f64, 1.0);
        }
        let sorted: Vec<f64> = (1..=1000).map(f64::from).collect();
        for q in [0.5, 0.9, 0.95, 0.99, 0.999] {
            assert_close(s.quantile(q).unwrap(), nearest_rank(&sorted, q));
        }
        assert_eq!(s.min(), Some(1.0));
        assert_eq!(s.max(), Some(1000.0));
        assert_eq!(s.sum(), 500500.0);
        assert_eq!(s.count(), 1000.0);
    }

    #[test]
    fn negative_zero_and_positive_samples_rank_in_order() {
        let mut s = Sketch::default();
        for v in [-50.0, -2.0, 0.0, 0.0, 3.0, 7.0] {
            s.add(v, 1.0);
        }
        assert_eq!(s.quantile(1.0 / 6.0), Some(-50.0));
        assert_close(s.quantile(2.0 / 6.0).unwrap(), -2.0);
        assert_eq!(s.quantile(0.5), Some(0.0));
        assert_close(s.quantile(5.0 / 6.0).unwrap(), 3.0);
        assert_eq!(s.quantile(1.0), Some(7.0));
    }

    #[test]
    fn weights_count_as_repeated_samples() {
        let mut weighted = Sketch::default();
        weighted.add(10.0, 10.0);
        weighted.add(20.0, 10.0);
        assert_eq!(weighted.count(), 20.0);
        assert_eq!(weighted.sum(), 300.0);
        assert_close(weighted.quantile(0.5).unwrap(), 10.0);
        assert_close(weighted.quantile(0.55).unwrap(), 20.0);
    }

    #[test]
    fn memory_stays_bounded_over_a_huge_value_range() {
        let mut s = Sketch::default();
        let mut values = Vec::new();
        let mut v = 1e-9;
        while v < 1e12 {
            s.add(v, 1.0);
            values.push(v);
            v *= 1.001;
        }
        assert!(bins(&s).positive.len() <= MAX_BINS);
        assert!(s.heap_bytes() <= 2 * MAX_BINS * 8 + std::mem::size_of::<Bins>());
        // The top 10^8 of the range keeps its accuracy (p90 is ~8e9 here);
        // only quantiles below the collapsed floor lose it.
        for q in [0.9, 0.99, 0.999] {
            assert_close(s.quantile(q).unwrap(), nearest_rank(&values, q));
        }
    }

    #[test]
    fn a_few_samples_over_a_wide_range_take_a_few_hundred_bytes() {
        let mut s = Sketch::default();
        for k in 0..25 {
            s.add(f64::from(k * 37 % 1000 + 1), 1.0);
        }
        // Raw samples, 4 bytes each in a vector grown to 32.
        assert!(s.bins.is_none());
        assert!(s.heap_bytes() <= 32 * 4, "{} bytes", s.heap_bytes());
        assert_eq!(s.count(), 25.0);
        // Exact: the 13th of the 25 samples in order.
        let mut sorted: Vec<f64> = (0..25).map(|k| f64::from(k * 37 % 1000 + 1)).collect();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(s.quantile(0.5), Some(sorted[12]));
        // Past the raw limit the samples go into sparse buckets, and
        // settling moves the raw ones over: 8 bytes per occupied bucket, of
        // the 383 between 1 and 1000.
        let added = MAX_SAMPLES + MAX_SAMPLES / 2;
        for k in 25..added as i32 {
            s.add(f64::from(k * 37 % 1000 + 1), 1.0);
        }
        s.settle();
        assert!(s.samples.is_empty() && !bins(&s).positive.is_dense());
        assert_eq!(s.samples.capacity(), 0);
        assert!(bins(&s).positive.len() <= added);
    }

    #[test]
    fn samples_past_the_raw_limit_go_to_buckets_and_rank_before_and_after_settling() {
        let value = |k: usize| ((k * 37 + 11) % 1000) as f64;
        let mut s = Sketch::default();
        let mut values = Vec::new();
        let rank_all = |s: &Sketch, values: &[f64]| {
            let mut sorted = values.to_vec();
            sorted.sort_by(f64::total_cmp);
            for q in [0.01, 0.5, 0.9, 0.99, 1.0] {
                assert_close(s.quantile(q).unwrap(), nearest_rank(&sorted, q));
            }
        };
        for k in 0..MAX_SAMPLES + 40 {
            s.add(value(k), 1.0);
            values.push(value(k));
            // No add moves a raw sample: the first MAX_SAMPLES stay raw,
            // the buckets hold the rest.
            assert_eq!(s.samples.len(), (k + 1).min(MAX_SAMPLES));
            let in_buckets: f64 = s
                .bins
                .as_ref()
                .map_or(0.0, |b| b.positive.buckets().map(|(_, w)| w).sum());
            assert_eq!(in_buckets, (k + 1).saturating_sub(MAX_SAMPLES) as f64);
            rank_all(&s, &values);
        }
        let before = s.quantiles([0.01, 0.5, 0.9, 0.99, 1.0]);
        s.settle();
        assert!(s.samples.is_empty() && s.samples.capacity() == 0);
        let in_buckets: f64 = bins(&s).positive.buckets().map(|(_, w)| w).sum();
        assert_eq!(in_buckets, s.count());
        assert_eq!(s.quantiles([0.01, 0.5, 0.9, 0.99, 1.0]), before);
        rank_all(&s, &values);
        // Settling a sketch without buckets keeps its exact raw samples.
        let mut small = Sketch::default();
        small.add(3.0, 1.0);
        small.settle();
        assert_eq!(small.samples, [3.0]);
    }

    #[test]
    fn raw_samples_give_exact_nearest_rank_percentiles() {
        let mut s = Sketch::default();
        let values = [12.5, -3.0, 0.0, 7.25, 1e30, 0.5, 12.5, 99.0, 3.0, 42.0];
        for v in values {
            s.add(v, 1.0);
        }
        assert!(s.bins.is_none());
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let qs = [0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0];
        for (q, got) in qs.iter().zip(s.quantiles(qs)) {
            let want = nearest_rank(&sorted, *q);
            // Within f32's rounding (1e30 is not an f32), clamped to max.
            assert!((got.unwrap() - want).abs() <= want.abs() * 1e-7, "q={q}");
        }
        assert_eq!(s.quantile(1.0), Some(1e30));
        assert_eq!((s.min(), s.sum()), (Some(-3.0), values.iter().sum()));
    }

    #[test]
    fn weighted_or_out_of_range_samples_start_the_buckets() {
        for (value, weight) in [(5.0, 2.0), (1e300, 1.0), (1e-300, 1.0)] {
            let mut s = Sketch::default();
            s.add(3.0, 1.0);
            s.add(value, weight);
            assert!(s.samples == [3.0] && s.bins.is_some(), "{value} x {weight}");
            assert_eq!(s.count(), 1.0 + weight);
            assert_close(s.quantile(1.0).unwrap(), value.max(3.0));
            s.settle();
            assert!(s.samples.is_empty());
            assert_eq!(s.count(), 1.0 + weight);
            assert_close(s.quantile(1.0).unwrap(), value.max(3.0));
        }
    }

    #[test]
    fn merging_raw_samples_stays_raw_until_the_limit() {
        let mut a = Sketch::default();
        let mut b = Sketch::default();
        for v in 0..MAX_SAMPLES / 2 {
            a.add(v as f64, 1.0);
            b.add((v + 100) as f64, 1.0);
        }
        a.merge(&b);
        assert!(a.bins.is_none());
        assert_eq!(a.quantile(1.0), Some((MAX_SAMPLES / 2 + 99) as f64));
        a.merge(&b);
        assert!(a.bins.is_some());
        assert_eq!(a.count(), (MAX_SAMPLES / 2 * 3) as f64);
        let mut all: Vec<f64> = (0..MAX_SAMPLES / 2).map(|v| v as f64).collect();
        for _ in 0..2 {
            all.extend((0..MAX_SAMPLES / 2).map(|v| (v + 100) as f64));
        }
        all.sort_by(f64::total_cmp);
        for q in [0.25, 0.5, 0.99] {
            assert_close(a.quantile(q).unwrap(), nearest_rank(&all, q));
        }
    }

    #[test]
    fn a_dense_range_turns_contiguous_and_keeps_its_quantiles() {
        let mut s = Sketch::default();
        let values: Vec<f64> = (1..=2000).map(f64::from).collect();
        for &v in &values {
            s.add(v, 1.0);
        }
        assert!(bins(&s).positive.is_dense());
        // 1 to 2000 spans 420 buckets; the array may have grown by doubling.
        let limit = 2 * 420 * 8 + std::mem::size_of::<Bins>();
        assert!(s.heap_bytes() <= limit, "{} bytes", s.heap_bytes());
        for q in [0.01, 0.5, 0.99] {
            assert_close(s.quantile(q).unwrap(), nearest_rank(&values, q));
        }
    }

    #[test]
    fn a_cleared_sketch_is_empty_and_keeps_its_memory() {
        let mut s = Sketch::default();
        for v in [1.0, 50.0, -3.0, 0.0] {
            s.add(v, 1.0);
        }
        s.add(2.0, 0.5);
        let bytes = s.heap_bytes();
        s.clear();
        assert_eq!(s, {
            let mut e = Sketch::default();
            let mut b = Bins::default();
            b.positive.sparse = bins(&s).positive.sparse.clone();
            b.negative.sparse = bins(&s).negative.sparse.clone();
            e.bins = Some(Box::new(b));
            e
        });
        assert_eq!((s.count(), s.quantile(0.5)), (0.0, None));
        assert_eq!(s.heap_bytes(), bytes);
        s.add(7.0, 1.0);
        assert_close(s.quantile(1.0).unwrap(), 7.0);
    }

    #[test]
    fn a_heavy_bucket_turns_dense_and_counts_exactly() {
        let mut s = Sketch::default();
        s.add(5.0, 1.0);
        s.add(500.0, 1.0);
        s.add(7.0, 0.5);
        assert!(!bins(&s).positive.is_dense());
        // 2^24 + 1 is not an f32: a sparse weight would lose the 1.
        s.add(5.0, (1u64 << 24) as f64);
        assert!(bins(&s).positive.is_dense());
        s.settle();
        let total: f64 = bins(&s).positive.buckets().map(|(_, w)| w).sum();
        assert_eq!(total, (1u64 << 24) as f64 + 2.5);
        assert_close(s.quantile(1.0).unwrap(), 500.0);
        assert_close(s.quantile(0.5).unwrap(), 5.0);
    }

    #[test]
    fn empty_sketch_has_no_quantiles() {
        let s = Sketch::default();
        assert_eq!(s.quantile(0.5), None);
        assert_eq!(s.min(), None);
    }

    proptest! {
        #[test]
        fn quantiles_stay_within_one_percent_of_nearest_rank(
            values in proptest::collection::vec(-1e6f64..1e6, 1..400),
            split in 0usize..400,
        ) {
            let mut a = Sketch::default();
            let mut b = Sketch::default();
            for (i, &v) in values.iter().enumerate() {
                if i < split { a.add(v, 1.0) } else { b.add(v, 1.0) }
            }
            a.merge(&b);
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            for q in [0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0] {
                let want = nearest_rank(&sorted, q);
                let got = a.quantile(q).unwrap();
                let err = if want.abs() < 1e-12 { got.abs() } else { ((got - want) / want).abs() };
                prop_assert!(err <= 0.01, "q={} got={} want={}", q, got, want);
            }
        }
    }
}
