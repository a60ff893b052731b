//! Replays StatsD datagrams through a receive worker's whole stage
//! ([`Ingest`]: parse, record, counters), for instruction counting with
//! callgrind (`scripts/callgrind-tap.sh`): what a point costs while
//! nobody watches, while `sonde top` counts metric names, and while
//! `sonde tap` samples points.
//!
//! `cargo run --release -p sonde-metrics --example ingest_tap -- MODE SERIES PASSES`
//! where MODE is `none`, `top` (a names tap), `tap` (a points tap of one
//! metric name in 100) or `tap-all` (a points tap of every point); taps
//! are polled every 100 datagrams, as a client polling four times a
//! second would at 400 datagrams a second.

use std::sync::Arc;

use sonde_aggregate::AggregateConfig;
use sonde_metrics::receiver::ingest::{Control, Ingest, Protocol};
use sonde_metrics::receiver::ReceiverStats;
use sonde_runtime::tap::{Tap, Watch};

/// StatsD lines with 3 DogStatsD tags in ~1400-byte datagrams, as the
/// hot-path example sends them.
fn datagrams(series: usize) -> Vec<Vec<u8>> {
    let types = ["c", "c", "c", "c", "g", "g", "ms", "ms", "h", "h"];
    let mut out = Vec::new();
    let mut d = Vec::new();
    for i in 0..series.max(50_000) {
        let s = (i * 7_919) % series;
        let line = format!(
            "bench.metric_{}:{}|{}|#series:s{s},env:prod,region:eu-west-{}",
            s % 100,
            i % 1000,
            types[s % 10],
            s % 3
        );
        if d.len() + line.len() + 1 > 1400 {
            out.push(std::mem::take(&mut d));
        }
        if !d.is_empty() {
            d.push(b'\n');
        }
        d.extend_from_slice(line.as_bytes());
    }
    out.push(d);
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("none", String::as_str);
    let series: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let passes: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let config = Arc::new(AggregateConfig {
        max_series: AggregateConfig::default().max_series.max(series),
        ..AggregateConfig::default()
    });
    let stats = Arc::new(ReceiverStats::new("udp://127.0.0.1:8125".into(), "statsd"));
    let (handoff, _windows) = std::sync::mpsc::sync_channel(16);
    let tap = Arc::new(Tap::default());
    let session = match mode {
        "none" => None,
        "top" => Some(tap.open(Watch::Names { receiver: None })),
        "tap" => Some(tap.open(Watch::Points {
            receiver: None,
            metric: Some(sonde_runtime::tap::glob("bench.metric_7").unwrap()),
        })),
        "tap-all" => Some(tap.open(Watch::Points {
            receiver: None,
            metric: None,
        })),
        other => panic!("unknown mode {other}: none, top, tap or tap-all"),
    }
    .map(|s| s.expect("a session"));
    let mut ingest = Ingest::new(
        Protocol::Statsd,
        Arc::clone(&stats),
        config,
        Arc::new(Control::default()),
        handoff,
    )
    .tap_to(Arc::clone(&tap));
    let data = datagrams(series);
    let mut shown = 0;
    // Pass 0 creates the series; it is part of every run, so it cancels
    // out when two runs with different pass counts are subtracted.
    for _ in 0..=passes {
        for (i, d) in data.iter().enumerate() {
            ingest.datagram(d);
            ingest.end_batch();
            if i % 100 == 99 {
                if let Some(s) = &session {
                    shown += s.poll()["items"].as_array().map_or(0, Vec::len);
                }
            }
        }
    }
    let points = stats.points.load(std::sync::atomic::Ordering::Relaxed);
    println!("{points} points recorded, {shown} shown");
}
