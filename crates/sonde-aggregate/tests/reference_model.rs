//! Property: what `Shard` and `Aggregator` flush is what a naive model of
//! the table in ARCHITECTURE.md ("Metric semantics") computes from the
//! plain list of points: every kind, over a few series, two workers and
//! several windows, with series expiring and coming back.
//!
//! The model keeps every point of a window in a list and computes each row
//! from it directly: no sketch, no merge, no slots. Percentiles are the
//! exact nearest-rank values and the aggregator's must lie within 1% of
//! them; every other value must be equal.
//!
//! "Last value" is ordered only within one worker, so the points of a
//! series whose outputs depend on order (`store`, `ts_store`, gauges) all
//! go to one worker; the others are spread over both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod common;

use common::TestPoint;
use proptest::prelude::*;
use sonde_aggregate::{
    AggregateConfig, Aggregator, Batch, Bounds, HistogramBuckets, RecordError, Shard,
};
use sonde_proto::Kind;

const WINDOW_SECS: f64 = 10.0;
const START: i64 = 1_700_000_000;
const EXPIRE_WINDOWS: u32 = 2;
const BOUNDS: [f64; 3] = [1.0, 5.0, 25.0];
const LABELS: [&str; 4] = ["1", "5", "25", "+Inf"];
/// Percentile suffixes and their quantile in thousandths.
const QUANTILES: [(&str, u64); 5] = [
    (".pct50", 500),
    (".pct90", 900),
    (".pct95", 950),
    (".pct99", 990),
    (".pct999", 999),
];

/// One generated point, and the worker that receives it.
#[derive(Clone, Debug)]
struct P {
    point: TestPoint,
    /// The worker that receives it, for series whose order does not matter.
    worker: bool,
}

impl std::ops::Deref for P {
    type Target = TestPoint;
    fn deref(&self) -> &TestPoint {
        &self.point
    }
}

impl P {
    /// What the series aggregates, as the table's rows tell them apart.
    fn row(&self) -> Row {
        match (self.kind, self.ts) {
            (Kind::Gauge, Some(_)) | (Kind::TsStore, _) => Row::TsStore,
            (Kind::Count, Some(_)) => Row::TsSum,
            (Kind::Counter, _) => Row::Counter,
            (Kind::RateCounter, _) => Row::RateCounter,
            (Kind::Meter, _) => Row::Meter,
            (Kind::Timer, _) => Row::Timer,
            (Kind::Store, _) => Row::Store,
            (Kind::Histogram, _) => Row::Histogram,
            (Kind::Count, None) => Row::Count,
            (Kind::Gauge, None) => Row::Gauge,
            (Kind::Set, _) => Row::Set,
        }
    }

    /// The series: its row of the table, name and sorted tags.
    fn series(&self) -> Series {
        let mut tags: Vec<(String, String)> = self
            .tags
            .split(['|', ' '])
            .filter(|t| !t.is_empty())
            .map(|t| {
                let (k, v) = t.split_once('=').unwrap_or((t, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        tags.sort();
        let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        (self.row(), self.name.to_string(), tags.join(","))
    }

    /// True when the order of the series' points changes its output.
    fn ordered(&self) -> bool {
        matches!(self.row(), Row::Store | Row::TsStore | Row::Gauge)
    }
}

/// The rows of the semantics table (a StatsD count with a client
/// timestamp keeps a sum per timestamp).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Row {
    Counter,
    RateCounter,
    Meter,
    Timer,
    Store,
    TsStore,
    Histogram,
    Count,
    Gauge,
    Set,
    TsSum,
}

type Series = (Row, String, String);

fn point() -> impl Strategy<Value = P> {
    (
        proptest::sample::select(Kind::ALL.to_vec()),
        proptest::sample::select(vec!["a", "web.latency"]),
        // One series in three spellings, and two others.
        proptest::sample::select(vec!["", "h=1", "h=1|z=3", "z=3|h=1", "z=3 h=1"]),
        -40i32..40,
        any::<bool>(),
        proptest::sample::select(vec!["u1", "u2", "u3"]),
        // Powers of two: the scaled values stay exact.
        proptest::sample::select(vec![1.0, 0.5, 0.25]),
        proptest::option::of(START..START + 3),
        any::<bool>(),
    )
        .prop_map(
            |(kind, name, tags, value, delta, member, rate, ts, worker)| P {
                point: TestPoint {
                    kind,
                    name,
                    tags,
                    value: f64::from(value),
                    delta: delta && kind == Kind::Gauge,
                    member,
                    // StatsD counts and timers scale by their sample rate.
                    sample_rate: match kind {
                        Kind::Count | Kind::Timer => rate,
                        _ => 1.0,
                    },
                    ts: match kind {
                        Kind::TsStore => Some(ts.unwrap_or(START)),
                        Kind::Count | Kind::Gauge => ts,
                        _ => None,
                    },
                },
                worker,
            },
        )
}

/// Many samples of one timer series and one histogram series in a
/// window, so that the percentiles' ranks fall on different samples and
/// every bucket fills: a window of a few dozen mixed points rarely gives
/// one series more than a handful.
fn burst() -> impl Strategy<Value = Vec<P>> {
    proptest::collection::vec(
        (
            proptest::sample::select(vec![Kind::Timer, Kind::Histogram]),
            -1000i32..1000,
            proptest::sample::select(vec![1.0, 0.5, 0.25]),
            any::<bool>(),
        )
            .prop_map(|(kind, value, rate, worker)| P {
                point: TestPoint {
                    kind,
                    name: "busy",
                    tags: "h=1",
                    value: f64::from(value),
                    delta: false,
                    member: "",
                    sample_rate: if kind == Kind::Timer { rate } else { 1.0 },
                    ts: None,
                },
                worker,
            }),
        0..200,
    )
}

/// A window: a few mixed points over every kind, then maybe a burst.
fn window() -> impl Strategy<Value = Vec<P>> {
    (proptest::collection::vec(point(), 0..24), burst()).prop_map(|(mut mixed, burst)| {
        mixed.extend(burst);
        mixed
    })
}

/// An output row: full name, sorted tags, `le`, timestamp.
type Key = (String, String, Option<String>, i64);

/// A window's rows, values sorted per key.
type Rows = BTreeMap<Key, Vec<f64>>;

fn push(rows: &mut Rows, s: &Series, suffix: &str, le: Option<&str>, ts: i64, v: f64) {
    rows.entry((
        format!("{}{suffix}", s.1),
        s.2.clone(),
        le.map(String::from),
        ts,
    ))
    .or_default()
    .push(v);
}

/// The exact nearest-rank quantile of weighted samples (whole weights):
/// the smallest sample whose cumulative weight reaches
/// `ceil(thousandths / 1000 * total)`, in integers.
fn nearest_rank(samples: &[(f64, u64)], thousandths: u64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u64 = sorted.iter().map(|s| s.1).sum();
    let rank = (thousandths * total).div_ceil(1000).max(1);
    let mut seen = 0;
    for &(v, w) in &sorted {
        seen += w;
        if seen >= rank {
            return v;
        }
    }
    sorted.last().map_or(0.0, |s| s.0)
}

/// What a series keeps across windows, in the model.
#[derive(Default)]
struct Kept {
    last_seen: u32,
    /// Counter and meter totals, gauge values.
    total: f64,
    /// Histogram running counts per bucket (not cumulative), sum, count.
    buckets: [u64; 4],
    sum: f64,
    count: u64,
}

/// The model: every window's expected drops and rows.
fn model(windows: &[Vec<P>]) -> (Vec<Vec<Result<(), RecordError>>>, Vec<Rows>) {
    let mut live: BTreeMap<Series, Kept> = BTreeMap::new();
    let (mut results, mut out) = (Vec::new(), Vec::new());
    for (w, points) in windows.iter().enumerate() {
        let flush = w as u32 + 1;
        let start = START + 10 * w as i64;
        // A gauge adjustment with a client timestamp has no value to adjust.
        let accepted = |p: &P| !(p.delta && p.ts.is_some());
        results.push(
            points
                .iter()
                .map(|p| match accepted(p) {
                    true => Ok(()),
                    false => Err(RecordError::BadValue),
                })
                .collect(),
        );
        let mut by_series: BTreeMap<Series, Vec<&P>> = BTreeMap::new();
        for p in points.iter().filter(|p| accepted(p)) {
            by_series.entry(p.series()).or_default().push(p);
        }
        // The points of one worker, then the other's: the order the
        // aggregator sees them in (only used for ordered series, which
        // one worker receives).
        let mut rows = Rows::new();
        let all: BTreeSet<Series> = live.keys().chain(by_series.keys()).cloned().collect();
        for s in all {
            let ps = by_series.get(&s).map(Vec::as_slice).unwrap_or(&[]);
            if ps.is_empty() {
                let idle = live
                    .get(&s)
                    .is_some_and(|k| flush - k.last_seen >= EXPIRE_WINDOWS);
                if idle {
                    live.remove(&s);
                    continue;
                }
            }
            let kept = live.entry(s.clone()).or_default();
            if !ps.is_empty() {
                kept.last_seen = flush;
            }
            let sum: f64 = ps.iter().map(|p| p.value / p.sample_rate).sum();
            match s.0 {
                Row::Counter => {
                    kept.total += sum;
                    push(&mut rows, &s, "", None, start, kept.total);
                }
                Row::RateCounter if !ps.is_empty() => {
                    push(&mut rows, &s, "", None, start, sum / WINDOW_SECS);
                }
                Row::Meter => {
                    kept.total += sum;
                    push(&mut rows, &s, "", None, start, kept.total);
                    push(&mut rows, &s, ".rate", None, start, sum / WINDOW_SECS);
                }
                Row::Store if !ps.is_empty() => {
                    let last = ps.last().map_or(0.0, |p| p.value);
                    push(&mut rows, &s, "", None, start, last);
                }
                Row::Gauge => {
                    for p in ps {
                        match p.delta {
                            true => kept.total += p.value,
                            false => kept.total = p.value,
                        }
                    }
                    push(&mut rows, &s, "", None, start, kept.total);
                }
                Row::Timer if !ps.is_empty() => {
                    // Sample rates are 1, 1/2 or 1/4: whole weights.
                    let samples: Vec<(f64, u64)> = ps
                        .iter()
                        .map(|p| (p.value, (1.0 / p.sample_rate) as u64))
                        .collect();
                    let n = samples.iter().map(|s| s.1).sum::<u64>() as f64;
                    let total: f64 = samples.iter().map(|s| s.0 * s.1 as f64).sum();
                    let min = samples.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
                    let max = samples
                        .iter()
                        .map(|s| s.0)
                        .fold(f64::NEG_INFINITY, f64::max);
                    for (suffix, v) in [
                        (".min", min),
                        (".max", max),
                        (".avg", total / n),
                        (".sum", total),
                        (".counter", n),
                    ] {
                        push(&mut rows, &s, suffix, None, start, v);
                    }
                    for (suffix, q) in QUANTILES {
                        push(
                            &mut rows,
                            &s,
                            suffix,
                            None,
                            start,
                            nearest_rank(&samples, q),
                        );
                    }
                }
                Row::Histogram => {
                    for p in ps {
                        let bucket = BOUNDS.iter().filter(|&&b| b < p.value).count();
                        kept.buckets[bucket] += 1;
                        kept.sum += p.value;
                        kept.count += 1;
                    }
                    let mut cumulative = 0;
                    for (label, n) in LABELS.iter().zip(kept.buckets) {
                        cumulative += n;
                        push(
                            &mut rows,
                            &s,
                            ".bucket",
                            Some(label),
                            start,
                            cumulative as f64,
                        );
                    }
                    push(&mut rows, &s, ".sum", None, start, kept.sum);
                    push(&mut rows, &s, ".count", None, start, kept.count as f64);
                }
                Row::Count if !ps.is_empty() => {
                    push(&mut rows, &s, "", None, start, sum);
                }
                Row::Set if !ps.is_empty() => {
                    let members: BTreeSet<&str> = ps.iter().map(|p| p.member).collect();
                    push(&mut rows, &s, "", None, start, members.len() as f64);
                }
                Row::TsStore | Row::TsSum => {
                    let mut by_ts: BTreeMap<i64, f64> = BTreeMap::new();
                    for p in ps {
                        let ts = p.ts.unwrap_or_default();
                        match s.0 {
                            Row::TsSum => *by_ts.entry(ts).or_default() += p.value / p.sample_rate,
                            _ => _ = by_ts.insert(ts, p.value),
                        }
                    }
                    for (ts, v) in by_ts {
                        push(&mut rows, &s, "", None, ts, v);
                    }
                }
                Row::RateCounter | Row::Store | Row::Timer | Row::Count | Row::Set => {}
            }
        }
        for v in rows.values_mut() {
            v.sort_by(f64::total_cmp);
        }
        out.push(rows);
    }
    (results, out)
}

fn config() -> Arc<AggregateConfig> {
    Arc::new(AggregateConfig {
        interval: std::time::Duration::from_secs(10),
        expire_windows: EXPIRE_WINDOWS,
        histograms: HistogramBuckets::new(Bounds::new(&BOUNDS), Vec::new()),
        ..AggregateConfig::default()
    })
}

/// The real thing: two workers' shards and the aggregator.
fn aggregate(windows: &[Vec<P>]) -> (Vec<Vec<Result<(), RecordError>>>, Vec<Rows>) {
    let config = config();
    let mut shards = [
        Shard::new(Arc::clone(&config)),
        Shard::new(Arc::clone(&config)),
    ];
    let mut agg = Aggregator::new(Arc::clone(&config));
    let (mut results, mut out) = (Vec::new(), Vec::new());
    for (w, points) in windows.iter().enumerate() {
        let mut window_results = Vec::new();
        for p in points {
            let worker = match p.ordered() {
                // By series, so that its points keep their order.
                true => usize::from(p.name.len() % 2 == 0),
                false => usize::from(p.worker),
            };
            window_results.push(shards[worker].record(&p.point()));
        }
        results.push(window_results);
        for shard in &mut shards {
            agg.absorb(shard);
        }
        let start = START + 10 * w as i64;
        let mut batch = Batch::new(start);
        let stats = agg.flush(start, WINDOW_SECS, &mut batch);
        assert_eq!(stats.mismatched, 0);
        let mut rows = Rows::new();
        for p in batch.points() {
            let tags: Vec<String> = p.series.tags().map(|(k, v)| format!("{k}={v}")).collect();
            rows.entry((
                p.name(),
                tags.join(","),
                p.le.map(String::from),
                p.timestamp,
            ))
            .or_default()
            .push(p.value);
        }
        for v in rows.values_mut() {
            v.sort_by(f64::total_cmp);
        }
        out.push(rows);
    }
    (results, out)
}

/// Equal rows, percentiles within 1% of the exact nearest rank.
fn agree(got: &Rows, want: &Rows) -> Result<(), String> {
    let got_keys: Vec<&Key> = got.keys().collect();
    let want_keys: Vec<&Key> = want.keys().collect();
    if got_keys != want_keys {
        return Err(format!("rows differ:\n got {got:?}\nwant {want:?}"));
    }
    for (key, want_values) in want {
        let got_values = &got[key];
        let close = |g: f64, w: f64| match key.0.contains(".pct") {
            true => (g - w).abs() <= 0.01 * w.abs(),
            false => g == w,
        };
        let same = got_values.len() == want_values.len()
            && got_values
                .iter()
                .zip(want_values)
                .all(|(&g, &w)| close(g, w));
        if !same {
            return Err(format!("{key:?}: got {got_values:?}, want {want_values:?}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_aggregator_agrees_with_the_reference_model(
        windows in proptest::collection::vec(window(), 1..7),
    ) {
        let (got_results, got_rows) = aggregate(&windows);
        let (want_results, want_rows) = model(&windows);
        prop_assert_eq!(got_results, want_results);
        for (w, (got, want)) in got_rows.iter().zip(&want_rows).enumerate() {
            if let Err(e) = agree(got, want) {
                return Err(TestCaseError::fail(format!("window {w}: {e}")));
            }
        }
    }
}
