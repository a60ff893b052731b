//! Parsing node_exporter's real output (testdata/node_exporter.txt,
//! node_exporter 1.5.0 of Debian) with sonde's parser and with the
//! `prometheus-parse` crate (docs/adr/0010), and the same body turned
//! into points (counters' deltas included).

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
    let text = std::str::from_utf8(&body).unwrap();
    g.bench_function("prometheus-parse", |b| {
        b.iter(|| {
            let lines = std::hint::black_box(text).lines().map(|l| Ok(l.to_owned()));
            prometheus_parse::Scrape::parse(lines)
                .unwrap()
                .samples
                .len()
        });
    });
    g.finish();
    check_other_crate();

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

/// What the compared crate reads of lines both formats allow: a name
/// with `:`, a label value with `}` or `,`, an OpenMetrics exemplar.
/// Printed, once, for the ADR.
fn check_other_crate() {
    let lines = [
        "job:requests:rate5m 3",
        "http_requests_total{path=\"/a}b\",code=\"200\"} 1",
        "http_requests_total{path=\"/a,b\",code=\"200\"} 1",
        "foo_total 17.0 1520879607.789 # {id=\"x\"} 5",
    ];
    for line in lines {
        let theirs =
            prometheus_parse::Scrape::parse(std::iter::once(Ok(line.to_string()))).map(|s| {
                s.samples
                    .iter()
                    .map(|x| format!("{} {:?} {:?}", x.metric, x.labels, x.value))
                    .collect::<Vec<_>>()
            });
        let mut ours = Vec::new();
        Parser::new().parse(line.as_bytes(), |s| {
            let labels: Vec<String> = s.labels().map(|(k, v)| format!("{k}={v}")).collect();
            ours.push(format!("{} {labels:?} {}", s.name, s.value));
        });
        eprintln!("{line}\n  prometheus-parse: {theirs:?}\n  sonde: {ours:?}");
    }
}

criterion_group!(benches, parse);
criterion_main!(benches);
