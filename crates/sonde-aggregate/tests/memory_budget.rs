//! Memory per live series, counted by a global allocator: the budget of
//! the memory issue, checked on deterministic allocation sizes (not RSS,
//! which depends on the allocator and the machine).
//!
//! Each case records N series of one kind through a worker [`Shard`] into
//! an [`Aggregator`] for three windows, the way the agent does, and
//! measures the live heap once the third window is recorded (both window
//! buffers warm, every series known on both sides) and again while that
//! window's [`Batch`] is alive. Key bytes (the canonical series key, once)
//! are subtracted: they grow with the client's names and tags, everything
//! else is the agent's overhead. Run with `--nocapture` for the figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use sonde_aggregate::key::KeyBuilder;
use sonde_aggregate::{AggregateConfig, Aggregator, Batch, Shard};
use sonde_proto::{Kind, Point, TagSyntax, Value};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Bytes per series beyond the key, in steady state and during a flush.
struct PerSeries {
    steady: f64,
    at_flush: f64,
}

/// The load generator's series (`sonde bench --tags 3`): DogStatsD tags in
/// an unsorted order, so the alias path is the one exercised.
fn measure(kind: Kind, n: usize, samples_per_window: usize) -> PerSeries {
    let config = Arc::new(AggregateConfig::default());
    let series: Vec<(String, String)> = (0..n)
        .map(|s| {
            (
                format!("bench.metric_{}", s % 100),
                format!("series:s{s},env:prod,region:eu-west-{}", s % 3),
            )
        })
        .collect();
    let mut keys = KeyBuilder::default();
    let key_bytes: usize = series
        .iter()
        .map(|(name, tags)| {
            keys.build(
                kind as u8,
                name.as_bytes(),
                tags.as_bytes(),
                TagSyntax::DogStatsd,
            )
            .unwrap()
            .len()
        })
        .sum();
    let base = live();
    let mut shard = Shard::new(Arc::clone(&config));
    let mut agg = Aggregator::new(Arc::clone(&config));
    let per = |bytes: isize| (bytes as f64 - key_bytes as f64) / n as f64;
    let mut result = PerSeries {
        steady: 0.0,
        at_flush: 0.0,
    };
    for window in 0..3 {
        for (i, (name, tags)) in series.iter().enumerate() {
            for k in 0..samples_per_window {
                let point = Point {
                    kind,
                    name: name.as_bytes(),
                    tags: tags.as_bytes(),
                    tag_syntax: TagSyntax::DogStatsd,
                    // Timer samples spread over 1 to 1000 like the load's.
                    value: Value::Number(((k * 37 + i) % 1000 + 1) as f64),
                    sample_rate: 1.0,
                    timestamp: None,
                };
                shard.record(&point).unwrap();
            }
        }
        result.steady = per(live() - base);
        agg.absorb(&mut shard);
        let mut out = Batch::new(window * 10);
        agg.flush(window * 10, 10.0, &mut out);
        result.at_flush = per(live() - base);
        assert_eq!(agg.series_count(), n);
    }
    eprintln!(
        "{kind:?} x {n}: {:.0} B/series steady, {:.0} at flush, beyond {:.0} key bytes",
        result.steady,
        result.at_flush,
        key_bytes as f64 / n as f64
    );
    result
}

/// The budget for a counter series: 200 bytes beyond the key
/// (178 at 100k series). The client's first spelling lives in the key's
/// allocation and its alias is a slot number, so the one-comparison fast
/// path costs the raw tags, 5 bytes and a 4-byte slot, not a second
/// allocation; per-series arrays grow by an eighth, not by doubling
/// (docs/benchmarks/LOG.md, "series memory budget"). While a window is being
/// flushed its output adds about 52 bytes more (8 bytes a value and a
/// 32-byte group per series).
const COUNTER_BUDGET: f64 = 200.0;

/// The budget for a timer series: 4 KiB.
const TIMER_BUDGET: f64 = 4096.0;

#[test]
fn live_series_stay_within_their_memory_budget() {
    // One test function: the allocator's count is process-wide.
    for kind in [Kind::Count, Kind::Counter, Kind::Gauge] {
        let m = measure(kind, 100_000, 1);
        assert!(
            m.steady <= COUNTER_BUDGET,
            "{kind:?}: {:.0} bytes a series over a budget of {COUNTER_BUDGET}",
            m.steady
        );
    }
    let m = measure(Kind::Timer, 20_000, 25);
    assert!(
        m.steady <= TIMER_BUDGET && m.at_flush <= TIMER_BUDGET,
        "timer: {:.0} bytes a series ({:.0} at flush) over {TIMER_BUDGET}",
        m.steady,
        m.at_flush
    );
}
