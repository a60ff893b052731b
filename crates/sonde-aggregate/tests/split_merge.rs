//! Property: aggregating a stream in one shard gives the same batches as
//! splitting it across several shards (worker threads) and merging them
//! in the flusher, through the same `Shard::take_window` /
//! `Aggregator::absorb_window` / `Aggregator::flush` path the agent uses.
//!
//! Values are small integers and sample rates powers of two, so every sum
//! is exact in any order and batches compare exactly, except percentiles:
//! each comes from a sketch within 1% of the exact nearest-rank value
//! (ARCHITECTURE.md), and merged sketches may bucket differently from one
//! sketch, so two percentiles may differ by up to 2%.
//!
//! Commutative kinds (sums, timers, histograms, sets) are split any way.
//! Last-value kinds (msgpack `store` and `ts_store`, StatsD gauges) depend
//! on the order of points, which across worker threads is the order the
//! flusher absorbs their windows; so for those the split is contiguous and
//! absorbed in stream order, the order a single shard saw.

use std::sync::Arc;

mod common;

use proptest::prelude::*;
use sonde_aggregate::{AggregateConfig, Aggregator, Batch, Shard};
use sonde_proto::Kind;

use common::TestPoint as P;

impl P {
    fn commutative(&self) -> bool {
        !matches!(self.kind, Kind::Store | Kind::TsStore | Kind::Gauge)
    }
}

fn kinds(commutative_only: bool) -> BoxedStrategy<Kind> {
    let all: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| !commutative_only || !matches!(k, Kind::Store | Kind::TsStore | Kind::Gauge))
        .collect();
    proptest::sample::select(all).boxed()
}

fn point(commutative_only: bool) -> impl Strategy<Value = P> {
    (
        kinds(commutative_only),
        proptest::sample::select(vec!["a", "b", "web.latency"]),
        // The same series spelled in other tag orders, and other series.
        proptest::sample::select(vec!["", "h=1", "h=2", "h=1|z=3", "z=3 h=1"]),
        -1000i32..1000,
        any::<bool>(),
        proptest::sample::select(vec!["alice", "bob", "carol"]),
        proptest::sample::select(vec![1.0, 0.5, 0.25]),
        proptest::option::of(1_700_000_000i64..1_700_000_004),
    )
        .prop_map(|(kind, name, tags, v, delta, member, rate, ts)| {
            let ts = match kind {
                // ts_store needs a client timestamp; a StatsD count may
                // have one (then it is summed per timestamp).
                Kind::TsStore => Some(ts.unwrap_or(1_700_000_000)),
                Kind::Count | Kind::Gauge => ts,
                _ => None,
            };
            // Sample rates apply to StatsD kinds only.
            let rate = if matches!(kind, Kind::Count | Kind::Timer) {
                rate
            } else {
                1.0
            };
            P {
                kind,
                name,
                tags,
                value: f64::from(v),
                delta,
                member,
                sample_rate: rate,
                ts,
            }
        })
}

/// A point of a batch, comparable: name, tags, suffix, `le`, timestamp,
/// value.
type Row = (
    String,
    Vec<(String, String)>,
    String,
    Option<String>,
    i64,
    f64,
);

fn rows(batch: &Batch) -> Vec<Row> {
    let mut rows: Vec<Row> = batch
        .points()
        .map(|p| {
            (
                p.series.name().to_string(),
                p.series
                    .tags()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                p.suffix.as_str().to_string(),
                p.le.map(str::to_string),
                p.timestamp,
                p.value,
            )
        })
        .collect();
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rows
}

/// Records each window's points into `shards` shards as `assign` says, and
/// flushes every window through one aggregator. Returns each window's rows.
fn run(windows: &[Vec<P>], shards: usize, assign: impl Fn(usize, usize) -> usize) -> Vec<Vec<Row>> {
    let config = Arc::new(AggregateConfig::default());
    let mut workers: Vec<Shard> = (0..shards)
        .map(|_| Shard::new(Arc::clone(&config)))
        .collect();
    let mut agg = Aggregator::new(Arc::clone(&config));
    let mut out = Vec::new();
    for (w, points) in windows.iter().enumerate() {
        for (i, p) in points.iter().enumerate() {
            // Points the aggregator refuses are refused the same way in
            // every shard; the batches show it.
            let _ = workers[assign(i, points.len())].record(&p.point());
        }
        // Absorbed in shard order: the order of a contiguous split.
        for s in &mut workers {
            agg.absorb(s);
        }
        let start = 1_700_000_000 + 10 * w as i64;
        let mut batch = Batch::new(start);
        agg.flush(start, 10.0, &mut batch);
        out.push(rows(&batch));
    }
    out
}

fn assert_same(single: &[Vec<Row>], split: &[Vec<Row>]) -> Result<(), TestCaseError> {
    for (w, (a, b)) in single.iter().zip(split).enumerate() {
        prop_assert_eq!(a.len(), b.len(), "window {}: {:?}\nvs {:?}", w, a, b);
        for (x, y) in a.iter().zip(b) {
            let (xv, yv) = (x.5, y.5);
            let (x0, y0) = ((&x.0, &x.1, &x.2, &x.3, x.4), (&y.0, &y.1, &y.2, &y.3, y.4));
            prop_assert_eq!(x0, y0, "window {}", w);
            if x.2.contains("pct") {
                prop_assert!(
                    (xv - yv).abs() <= 0.02 * xv.abs().max(yv.abs()) + 1e-9,
                    "window {} {:?}: {} vs {}",
                    w,
                    x0,
                    xv,
                    yv
                );
            } else {
                prop_assert_eq!(xv, yv, "window {} {:?}", w, x0);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Any assignment of points to shards, for kinds whose merge does not
    /// depend on order.
    #[test]
    fn any_split_of_commutative_kinds_merges_to_the_single_shard_result(
        windows in prop::collection::vec(prop::collection::vec(point(true), 0..150), 1..4),
        shards in 2usize..5,
        seed in any::<u64>(),
    ) {
        let single = run(&windows, 1, |_, _| 0);
        let split = run(&windows, shards, |i, _| {
            // A cheap deterministic hash of (seed, i) picks the shard.
            let h = (seed ^ i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (h >> 32) as usize % shards
        });
        assert_same(&single, &split)?;
    }

    /// Every kind, split into contiguous runs absorbed in stream order.
    #[test]
    fn a_contiguous_split_of_every_kind_merges_to_the_single_shard_result(
        windows in prop::collection::vec(prop::collection::vec(point(false), 0..150), 1..4),
        shards in 2usize..5,
    ) {
        prop_assume!(windows.iter().flatten().any(|p| !p.commutative()));
        let single = run(&windows, 1, |_, _| 0);
        let split = run(&windows, shards, |i, len| i * shards / len.max(1));
        assert_same(&single, &split)?;
    }
}
