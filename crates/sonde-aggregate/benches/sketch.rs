//! Timer sketch benchmarks: filling a fresh sketch up to its raw-sample
//! limit, one sample past it (where every timer series of a steady load,
//! at about the same moment of a window, starts its buckets), and to twice
//! the limit; settling such a sketch (the flusher's move of the raw
//! samples into the buckets); and adding to a sketch that already holds
//! buckets.
//!
//! Run: `cargo bench -p sonde-aggregate --bench sketch`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sonde_aggregate::sketch::{Sketch, MAX_SAMPLES};

/// Timer values as the load generator sends them: whole milliseconds,
/// 0 to 999, spread over the range.
fn value(n: usize) -> f64 {
    ((n * 37 + 11) % 1000) as f64
}

fn fill(c: &mut Criterion) {
    let mut g = c.benchmark_group("sketch/fill");
    for n in [MAX_SAMPLES, MAX_SAMPLES + 1, 2 * MAX_SAMPLES] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::new("samples", n), |b| {
            b.iter(|| {
                let mut s = Sketch::default();
                for k in 0..n {
                    s.add(black_box(value(k)), 1.0);
                }
                s
            })
        });
    }
    g.finish();
}

fn settle(c: &mut Criterion) {
    let mut g = c.benchmark_group("sketch/settle");
    let mut full = Sketch::default();
    for k in 0..2 * MAX_SAMPLES {
        full.add(value(k), 1.0);
    }
    g.throughput(Throughput::Elements(MAX_SAMPLES as u64));
    g.bench_function("raw_into_buckets", |b| {
        b.iter_batched(
            || full.clone(),
            |mut s| {
                s.settle();
                s
            },
            criterion::BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn add_bucketed(c: &mut Criterion) {
    let mut g = c.benchmark_group("sketch/add_bucketed");
    const N: usize = 1000;
    let mut s = Sketch::default();
    for k in 0..=MAX_SAMPLES {
        s.add(value(k), 1.0);
    }
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("timer_ms", |b| {
        b.iter(|| {
            for k in 0..N {
                s.add(black_box(value(k)), 1.0);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, fill, settle, add_bucketed);
criterion_main!(benches);
