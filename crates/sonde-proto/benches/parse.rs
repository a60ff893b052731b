//! Parser benchmarks: msgpack bunches, packed StatsD datagrams, and tag
//! splitting at sizes 1 B to 1 KiB (SIMD index against the scalar loop).
//!
//! Run: `cargo bench -p sonde-proto --bench parse`, or only the tag table:
//! `cargo bench -p sonde-proto --bench parse -- tags/split`

use std::hint::black_box;

mod common {
    pub mod tag_input;
}
use common::tag_input::tag_string;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sonde_proto::tags::{self, Backend, TagSpan};
use sonde_proto::{msgpack, statsd, DropReason, Point, PointSink, TagSyntax};

/// Counts what the parser produces, touching each point so nothing is
/// optimised away.
#[derive(Default)]
struct Count(u64);

impl PointSink<'_> for Count {
    fn point(&mut self, p: &Point<'_>) {
        self.0 += p.name.len() as u64 + p.tags.len() as u64;
    }
    fn drop(&mut self, _reason: DropReason) {
        self.0 += 1;
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    rmp::encode::write_str(out, s).unwrap();
}

/// A bunch as metricserver2 SDKs send it: array16 of messages, under 32 KiB.
fn msgpack_bunch(tags_per_point: usize) -> (Vec<u8>, u64) {
    let types = [
        "counter",
        "counter",
        "counter",
        "counter",
        "store",
        "store",
        "timer",
        "timer",
        "histogram",
        "histogram",
    ];
    let mut body = Vec::new();
    let mut n = 0u16;
    loop {
        let mut msg = Vec::new();
        rmp::encode::write_array_len(&mut msg, 6).unwrap();
        let i = usize::from(n);
        let tags: Vec<String> = (0..tags_per_point)
            .map(|t| format!("tag{t}=value{}", (i + t) % 17))
            .collect();
        for f in [
            "emit",
            types[i % types.len()],
            &format!("service.module.metric_{}", i % 97),
            &format!("{}.25", i % 1000),
            &tags.join("|"),
            "",
        ] {
            write_str(&mut msg, f);
        }
        if 3 + body.len() + msg.len() >= 32 * 1024 {
            break;
        }
        body.extend_from_slice(&msg);
        n += 1;
    }
    let mut out = vec![0xdc];
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(&body);
    (out, u64::from(n))
}

/// StatsD lines packed into a ~1400-byte datagram, DogStatsD tags.
fn statsd_packed(tags_per_point: usize) -> (Vec<u8>, u64) {
    let types = ["c", "c", "c", "c", "g", "g", "ms", "ms", "h", "h"];
    let mut out = Vec::new();
    let mut n = 0u64;
    loop {
        let i = n as usize;
        let mut line = format!(
            "service.module.metric_{}:{}|{}",
            i % 97,
            i % 1000,
            types[i % types.len()]
        );
        if tags_per_point > 0 {
            let tags: Vec<String> = (0..tags_per_point)
                .map(|t| format!("tag{t}:value{}", (i + t) % 17))
                .collect();
            line.push_str("|#");
            line.push_str(&tags.join(","));
        }
        if out.len() + line.len() + 1 > 1400 {
            break;
        }
        if !out.is_empty() {
            out.push(b'\n');
        }
        out.extend_from_slice(line.as_bytes());
        n += 1;
    }
    (out, n)
}

fn parsers(c: &mut Criterion) {
    let mut g = c.benchmark_group("msgpack/parse_bunch");
    for tags in [0, 3] {
        let (bunch, points) = msgpack_bunch(tags);
        g.throughput(Throughput::Elements(points));
        g.bench_with_input(BenchmarkId::new("tags", tags), &bunch, |b, bunch| {
            b.iter(|| {
                let mut sink = Count::default();
                msgpack::parse(black_box(bunch), &mut sink);
                sink.0
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("statsd/parse_packed");
    for tags in [0, 3] {
        let (datagram, points) = statsd_packed(tags);
        g.throughput(Throughput::Elements(points));
        g.bench_with_input(BenchmarkId::new("tags", tags), &datagram, |b, d| {
            b.iter(|| {
                let mut sink = Count::default();
                statsd::parse(black_box(d), &mut sink);
                sink.0
            })
        });
    }
    g.finish();
}

/// Tag splitting at 1 B to 1 KiB: the byte-at-a-time loop against the
/// dispatched SIMD index, plus the other backends this CPU has (msgpack
/// only, to keep the run short).
fn tag_split(c: &mut Criterion) {
    let mut g = c.benchmark_group("tags/split");
    g.measurement_time(std::time::Duration::from_secs(2));
    g.warm_up_time(std::time::Duration::from_secs(1));
    let mut spans: Vec<TagSpan> = Vec::with_capacity(128);
    for (name, syntax) in [
        ("msgpack", TagSyntax::Msgpack),
        ("dogstatsd", TagSyntax::DogStatsd),
    ] {
        for size in [1usize, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] {
            let raw = tag_string(size, syntax);
            assert_eq!(raw.len(), size, "tag string of {size} bytes");
            let mut expected = Vec::new();
            tags::split_scalar(&raw, syntax, &mut expected).expect("bench input is valid");
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{name}/scalar"), size),
                &raw,
                |b, raw| {
                    b.iter(|| {
                        let _ = tags::split_scalar(black_box(raw), syntax, &mut spans);
                        spans.len()
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("{name}/simd"), size),
                &raw,
                |b, raw| {
                    b.iter(|| {
                        let _ = tags::split(black_box(raw), syntax, &mut spans);
                        spans.len()
                    })
                },
            );
            // The filter may skip the benches above: check the SIMD path on
            // this input directly.
            tags::split(&raw, syntax, &mut spans).expect("bench input is valid");
            assert_eq!(spans, expected, "{name} {size}");
            if syntax != TagSyntax::Msgpack {
                continue;
            }
            for &backend in Backend::ALL {
                if !backend.is_available() || backend == Backend::detected() {
                    continue;
                }
                let id = BenchmarkId::new(format!("{name}/{backend:?}").to_lowercase(), size);
                g.bench_with_input(id, &raw, |b, raw| {
                    b.iter(|| {
                        let _ = tags::split_with(backend, black_box(raw), syntax, &mut spans);
                        spans.len()
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, parsers, tag_split);
criterion_main!(benches);
