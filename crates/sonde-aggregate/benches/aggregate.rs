//! Aggregation benchmarks: recording points into live series (1k, 100k
//! and 1M series), parse + record end to end in process, and the window
//! flush of 100k series.
//!
//! Run: `cargo bench -p sonde-aggregate --bench aggregate`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use sonde_aggregate::{AggregateConfig, Aggregator, Batch, Shard};
use sonde_proto::{statsd, DropReason, Kind, Point, PointSink, TagSyntax, Value};

struct Names {
    names: Vec<String>,
    tags: Vec<String>,
}

/// `n` distinct series: 97 metric names times host/series tags.
fn series(n: usize) -> Names {
    Names {
        names: (0..n)
            .map(|i| format!("service.module.metric_{}", i % 97))
            .collect(),
        tags: (0..n)
            .map(|i| format!("env=prod|host=web{}|series=s{i}", i % 50))
            .collect(),
    }
}

fn point<'a>(names: &'a Names, i: usize) -> Point<'a> {
    Point {
        kind: Kind::Count,
        name: names.names[i].as_bytes(),
        tags: names.tags[i].as_bytes(),
        tag_syntax: TagSyntax::Msgpack,
        value: Value::Number(1.0),
        sample_rate: 1.0,
        timestamp: None,
    }
}

fn record(c: &mut Criterion) {
    let mut g = c.benchmark_group("shard/record_existing");
    const BATCH: usize = 10_000;
    for n in [1_000usize, 100_000, 1_000_000] {
        let names = series(n);
        // Room for every series: the largest case is beyond the default limit.
        let config = AggregateConfig {
            max_series: n,
            ..AggregateConfig::default()
        };
        let mut shard = Shard::new(Arc::new(config));
        for i in 0..n {
            shard.record(&point(&names, i)).unwrap();
        }
        // A stride through the series so consecutive points hit different
        // cache lines, as interleaved clients do.
        let order: Vec<usize> = (0..BATCH).map(|k| (k * 7_919) % n).collect();
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(BenchmarkId::new("series", n), |b| {
            b.iter(|| {
                for &i in &order {
                    let _ = shard.record(black_box(&point(&names, i)));
                }
            })
        });
    }
    g.finish();
}

struct Record<'a>(&'a mut Shard);

impl PointSink<'_> for Record<'_> {
    fn point(&mut self, p: &Point<'_>) {
        let _ = self.0.record(p);
    }
    fn drop(&mut self, _reason: DropReason) {}
}

/// Packed StatsD datagrams over `n` series with DogStatsD tags.
fn statsd_datagrams(n: usize, count: usize) -> (Vec<Vec<u8>>, u64) {
    let types = ["c", "c", "c", "c", "g", "g", "ms", "ms", "h", "h"];
    let mut out = Vec::new();
    let mut d = Vec::new();
    let mut i = 0usize;
    while out.len() < count {
        let line = format!(
            "service.metric_{}:{}|{}|#env:prod,region:eu,series:s{}",
            i % 97,
            i % 1000,
            types[i % 10],
            (i * 7_919) % n
        );
        if d.len() + line.len() + 1 > 1400 {
            out.push(std::mem::take(&mut d));
            continue;
        }
        if !d.is_empty() {
            d.push(b'\n');
        }
        d.extend_from_slice(line.as_bytes());
        i += 1;
    }
    let lines = out
        .iter()
        .map(|d| d.iter().filter(|&&b| b == b'\n').count() as u64 + 1)
        .sum();
    (out, lines)
}

fn parse_and_record(c: &mut Criterion) {
    let mut g = c.benchmark_group("statsd/parse_and_record");
    for n in [1_000usize, 10_000, 100_000] {
        // Enough datagrams to touch every series once per pass.
        let (datagrams, lines) = statsd_datagrams(n, (n / 20).max(200));
        let mut shard = Shard::new(Arc::new(AggregateConfig::default()));
        for d in &datagrams {
            statsd::parse(d, &mut Record(&mut shard));
        }
        g.throughput(Throughput::Elements(lines));
        g.bench_function(BenchmarkId::new("series", n), |b| {
            b.iter(|| {
                for d in &datagrams {
                    statsd::parse(black_box(d), &mut Record(&mut shard));
                }
            })
        });
    }
    g.finish();
}

fn flush(c: &mut Criterion) {
    let mut g = c.benchmark_group("window/flush");
    g.sample_size(10);
    let n = 100_000;
    let names = series(n);
    let config = Arc::new(AggregateConfig::default());
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(BenchmarkId::new("series", n), |b| {
        // Steady state: every series known to the worker and the aggregator;
        // each iteration closes one window of the worker's shard.
        let mut agg = Aggregator::new(Arc::clone(&config));
        let shard = std::cell::RefCell::new(Shard::new(Arc::clone(&config)));
        let fill = || {
            let mut shard = shard.borrow_mut();
            for i in 0..n {
                shard.record(&point(&names, i)).unwrap();
            }
        };
        let mut out = Batch::new(0);
        fill();
        agg.absorb(&mut shard.borrow_mut());
        agg.flush(0, 10.0, &mut out);
        b.iter_batched(
            fill,
            |()| {
                out = Batch::new(0);
                agg.absorb(&mut shard.borrow_mut());
                agg.flush(0, 10.0, &mut out);
                out.len()
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, record, parse_and_record, flush);
criterion_main!(benches);
