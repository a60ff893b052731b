//! Parsing node_exporter's real output (testdata/node_exporter.txt,
//! node_exporter 1.5.0 of Debian), and the same body turned into points
//! (counters' deltas included).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sonde_metrics::input::Points;
use sonde_scrape::parse::Parser;
use sonde_scrape::state::TargetState;
use sonde_scrape::Target;

fn body() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/node_exporter.txt"
    ))
    .unwrap()
}

fn parse(c: &mut Criterion) {
    let body = body();
    let mut parser = Parser::new();
    let samples = parser.parse(&body, |_| {}).samples;
    let mut g = c.benchmark_group("scrape/parse_node_exporter");
    g.throughput(Throughput::Elements(samples as u64));
    g.bench_function("sonde", |b| {
        b.iter(|| {
            let mut sum = 0.0;
            parser.parse(std::hint::black_box(&body), |s| sum += s.value);
            sum
        });
    });
    g.finish();

    let target = Target {
        url: "http://127.0.0.1:9100/metrics".into(),
        interval: std::time::Duration::from_secs(15),
        timeout: std::time::Duration::from_secs(5),
        job: "node".into(),
        instance: "127.0.0.1:9100".into(),
        labels: vec![("env".into(), "prod".into())],
        max_body_size: 16 << 20,
    };
    let mut state = TargetState::new();
    let mut out = Points::new();
    state.absorb(&target, &body, &mut out);
    let mut g = c.benchmark_group("scrape/absorb_node_exporter");
    g.throughput(Throughput::Elements(samples as u64));
    g.bench_function("points", |b| {
        b.iter(|| {
            out.clear();
            state.absorb(&target, std::hint::black_box(&body), &mut out);
            out.len()
        });
    });
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
