//! Encoding and compressing one realistic window.
//!
//! The batch is what a window of 2,000 series with three tags each
//! produces: 40% counters (one point), 20% gauges (one point), 20% timers
//! (ten points) and 20% histograms (default 17 bounds: 18 buckets, sum and
//! count), 13,200 points in all. `encode/*` turns it into bytes: the
//! whole-window encoders, then every sink's [`BatchEncoder`] pushed one
//! point at a time and finished; `compress/*` compresses its JSON-lines
//! form with each codec and level. Before the groups run, each sink
//! body's size and each codec's ratio on this batch are printed, for the
//! tables in docs/BENCHMARKS.md.
//!
//! ```sh
//! cargo bench -p sonde-encode --bench encode
//! ```

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sonde_aggregate::{key, Batch, Shape};
use sonde_encode::compress::Compression;
use sonde_encode::BatchEncoder;

const SERIES: usize = 2_000;
const TIMESTAMP: i64 = 1_763_800_200;
const BOUNDS: [&str; 17] = [
    "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "25", "50",
    "100", "250", "500", "1000",
];

/// A small deterministic generator, so every run benches the same bytes.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// Values as metrics have them: small integers for counts, a few
    /// decimals for latencies.
    fn value(&mut self) -> f64 {
        if self.next().is_multiple_of(2) {
            (self.next() % 10_000) as f64
        } else {
            (self.next() % 1_000_000) as f64 / 1000.0
        }
    }
}

/// The window, as the flusher hands it to every sink.
fn batch() -> Batch {
    let mut rng = Lcg(42);
    let labels: Arc<[Arc<str>]> = BOUNDS
        .iter()
        .copied()
        .chain(["+Inf"])
        .map(Arc::from)
        .collect();
    let mut batch = Batch::new(TIMESTAMP);
    for i in 0..SERIES {
        let kind = i % 10;
        let family = [
            "http.requests",
            "queue.depth",
            "db.query.latency",
            "rpc.size",
        ][match kind {
            0..=3 => 0,
            4 | 5 => 1,
            6 | 7 => 2,
            _ => 3,
        }];
        let name = format!("svc{}.{family}", i % 7);
        let host = format!("web-{:03}", i % 200);
        let tags = [
            ("env", "prod"),
            ("host", host.as_str()),
            ("region", ["eu-west-1", "us-east-1"][i % 2]),
        ];
        let key: Arc<[u8]> = key::encode(0, &name, &tags).into();
        match kind {
            0..=3 => batch.push(&key, Shape::Total, None, TIMESTAMP, [rng.value()]),
            4 | 5 => batch.push(&key, Shape::Plain, None, TIMESTAMP, [rng.value()]),
            6 | 7 => {
                let values: Vec<f64> = (0..10).map(|_| rng.value()).collect();
                batch.push(&key, Shape::Timer, None, TIMESTAMP, values);
            }
            _ => {
                let mut cumulative = 0.0;
                let mut values: Vec<f64> = (0..labels.len())
                    .map(|_| {
                        cumulative += (rng.next() % 100) as f64;
                        cumulative
                    })
                    .collect();
                values.push(rng.value());
                values.push(cumulative);
                batch.push(&key, Shape::Histogram, Some(&labels), TIMESTAMP, values);
            }
        }
    }
    batch
}

fn encode(c: &mut Criterion) {
    print_sizes();
    let batch = batch();
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(batch.len() as u64));
    let mut out = Vec::new();
    g.bench_function("json_lines", |b| {
        b.iter(|| {
            out.clear();
            sonde_encode::json::encode(black_box(&batch).points(), &mut out);
        })
    });
    g.bench_function("prometheus_text", |b| {
        b.iter(|| {
            out.clear();
            sonde_encode::prometheus::encode(black_box(&batch).points(), &mut out);
        })
    });
    for (name, mut enc) in sink_encoders() {
        // Warm the encoder as a sender's would be after its first batch.
        encode_with(&mut *enc, &batch, &mut out);
        g.bench_function(name, |b| {
            b.iter(|| encode_with(&mut *enc, black_box(&batch), &mut out))
        });
    }
    g.finish();
}

/// Every sink's encoder, by bench name.
fn sink_encoders() -> Vec<(&'static str, Box<dyn BatchEncoder>)> {
    vec![
        (
            "json_lines_encoder",
            Box::new(sonde_encode::json::Lines::default()),
        ),
        ("msgpack", Box::new(sonde_encode::msgpack::Msgpack::new())),
        (
            "remote_write",
            Box::new(sonde_encode::remote_write::RemoteWrite::new()),
        ),
        (
            "otlp",
            Box::new(sonde_encode::otlp::Otlp::new().with_resource([("host.name", "web-001")])),
        ),
        (
            "influx_line",
            Box::new(sonde_encode::influx::LineProtocol::new()),
        ),
        (
            "graphite",
            Box::new(sonde_encode::graphite::Plaintext::new()),
        ),
    ]
}

/// One window through `enc`, as a sender drives it, the body into `out`.
fn encode_with(enc: &mut dyn BatchEncoder, batch: &Batch, out: &mut Vec<u8>) {
    out.clear();
    for p in batch.points() {
        enc.push(&p);
    }
    enc.finish(out);
}

/// Prints each sink body's size for the window, raw and compressed the
/// way its sink would most likely send it.
fn print_sizes() {
    let batch = batch();
    let mut out = Vec::new();
    let mut packed = Vec::new();
    for (name, mut enc) in sink_encoders() {
        encode_with(&mut *enc, &batch, &mut out);
        let mut line = format!("encode: {name}: {} bytes", out.len());
        for codec in [Compression::Zstd { level: 1 }, Compression::Snappy] {
            packed.clear();
            codec.compress(&out, &mut packed).unwrap();
            line.push_str(&format!(", {codec} {} bytes", packed.len()));
        }
        eprintln!("{line}");
    }
}

fn codecs() -> Vec<Compression> {
    let mut v = vec![Compression::Snappy, Compression::Lz4];
    v.extend([-1, 1, 3, 6, 9, 19].map(|level| Compression::Zstd { level }));
    v.extend([1, 6, 9].map(|level| Compression::Gzip { level }));
    v
}

fn compress(c: &mut Criterion) {
    let batch = batch();
    let mut input = Vec::new();
    sonde_encode::json::encode(batch.points(), &mut input);
    eprintln!(
        "compress: {} points, {} bytes of JSON lines",
        batch.len(),
        input.len()
    );
    let mut out = Vec::new();
    for codec in codecs() {
        out.clear();
        codec.compress(&input, &mut out).unwrap();
        eprintln!(
            "compress: {codec}: {} bytes, ratio {:.1}",
            out.len(),
            input.len() as f64 / out.len() as f64
        );
    }
    let mut g = c.benchmark_group("compress");
    g.throughput(Throughput::Bytes(input.len() as u64));
    for codec in codecs() {
        let id = match codec {
            Compression::Zstd { level } => BenchmarkId::new("zstd", level),
            Compression::Gzip { level } => BenchmarkId::new("gzip", level),
            other => BenchmarkId::new(other.name(), "default"),
        };
        g.bench_function(id, |b| {
            b.iter(|| {
                out.clear();
                codec.compress(black_box(&input), &mut out).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, encode, compress);
criterion_main!(benches);
