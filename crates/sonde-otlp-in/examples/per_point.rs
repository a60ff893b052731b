//! CPU per point of OTLP metrics in (protobuf decode, mapping, record into
//! a shard) against the StatsD receiver's (parse, record) for the same
//! points: 1,000 series of a delta counter with three attributes, sent
//! as one 1,000-point request or as 1,000 DogStatsD lines.
//!
//! `cargo run --release -p sonde-otlp-in --example per_point`
//!
//! Best of 5 rounds of 2,000 requests each; figures in docs/BENCHMARKS.md,
//! "OTLP in".

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use prost::Message;
use sonde_aggregate::AggregateConfig;
use sonde_metrics::receiver::{Control, Ingest, Protocol, ReceiverStats};

const SERIES: usize = 1_000;
const ROUNDS: usize = 2_000;

fn kv(k: &str, v: String) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v)),
        }),
        ..Default::default()
    }
}

fn ingest(protocol: Protocol) -> Ingest {
    let (handoff, windows) = sync_channel(4);
    std::mem::forget(windows);
    Ingest::new(
        protocol,
        Arc::new(ReceiverStats::new("bench".into(), protocol.as_str())),
        Arc::new(AggregateConfig::default()),
        Arc::new(Control::default()),
        handoff,
    )
}

fn main() {
    let points = (0..SERIES)
        .map(|i| NumberDataPoint {
            attributes: vec![
                kv("host", format!("web-{}", i % 10)),
                kv("route", format!("/r{}", i % 100)),
                kv("shard", format!("{i}")),
            ],
            time_unix_nano: 1,
            value: Some(number_data_point::Value::AsInt(1)),
            ..Default::default()
        })
        .collect();
    let body = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "app.requests".into(),
                    data: Some(Data::Sum(Sum {
                        data_points: points,
                        aggregation_temporality: AggregationTemporality::Delta as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    let lines: Vec<u8> = (0..SERIES)
        .flat_map(|i| {
            format!(
                "app.requests:1|c|#host:web-{},route:/r{},shard:{i}\n",
                i % 10,
                i % 100
            )
            .into_bytes()
        })
        .collect();

    let mut mapper = sonde_otlp_in::metrics::Mapper::new(vec!["service.name".into()], 100_000, 0);
    let mut otlp = ingest(Protocol::Otlp);
    let mut statsd = ingest(Protocol::Statsd);
    // `per_point MODE ROUNDS`: only that path (otlp, map or statsd) for
    // ROUNDS requests, for callgrind (scripts/callgrind-otlp.sh).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, rounds] = &args[..] {
        let rounds: usize = rounds.parse().expect("ROUNDS is a number");
        for _ in 0..rounds {
            match mode.as_str() {
                "otlp" | "map" => {
                    let mut mapped = mapper.map(&body).unwrap();
                    mapper.commit(&mut mapped);
                    if mode == "otlp" {
                        otlp.record(&mapped.points);
                    }
                }
                "statsd" => statsd.bytes(&lines),
                other => panic!("no mode {other}: otlp, map or statsd"),
            }
        }
        println!("{}", rounds * SERIES);
        return;
    }
    let mut best = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    let per_point = |t: Instant| t.elapsed().as_nanos() as f64 / (ROUNDS * SERIES) as f64;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..ROUNDS {
            let mut mapped = mapper.map(&body).unwrap();
            mapper.commit(&mut mapped);
            otlp.record(&mapped.points);
        }
        let o = per_point(t);
        let t = Instant::now();
        for _ in 0..ROUNDS {
            statsd.bytes(&lines);
        }
        let s = per_point(t);
        // The parts: reading and mapping the request alone, and decoding
        // it into opentelemetry-proto's owned types (which the mapping
        // does not do) for comparison.
        let t = Instant::now();
        for _ in 0..ROUNDS {
            let mut mapped = mapper.map(&body).unwrap();
            mapper.commit(&mut mapped);
            std::hint::black_box(&mapped);
        }
        let m = per_point(t);
        let t = Instant::now();
        for _ in 0..ROUNDS {
            std::hint::black_box(ExportMetricsServiceRequest::decode(&body[..]).unwrap());
        }
        let d = per_point(t);
        best = (best.0.min(o), best.1.min(s), best.2.min(m), best.3.min(d));
    }
    println!(
        "ns per point: otlp {:.0}, statsd {:.0}, ratio {:.2} ({} B protobuf, {} B StatsD per {SERIES} points)",
        best.0,
        best.1,
        best.0 / best.1,
        body.len(),
        lines.len()
    );
    println!(
        "otlp parts: read and map {:.0}, record {:.0}; prost's owned decode alone would be {:.0}",
        best.2,
        best.0 - best.2,
        best.3
    );
}
