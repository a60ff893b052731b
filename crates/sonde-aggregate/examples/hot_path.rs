//! Replays generated datagrams through parse + record, for instruction
//! counting with callgrind (`scripts/callgrind-hot-path.sh`): run it with
//! two pass counts and the difference is the hot path alone.
//!
//! `cargo run --release -p sonde-aggregate --example hot_path -- SHAPE SERIES PASSES`
//! where SHAPE is `statsd` (3 DogStatsD tags, ~1400-byte datagrams),
//! `plain` (StatsD without tags) or `msgpack` (3 tags, 32 KiB bunches).
//! A `-parse` suffix (`statsd-parse`, ...) parses only: the points go to
//! a sink that counts them and folds their fields into a checksum, which
//! splits the hot path's time between the parser and the aggregate.
//! `max_series` is raised to SERIES when that is over the default.

use std::sync::Arc;

use sonde_aggregate::shard::PointBatch;
use sonde_aggregate::{AggregateConfig, Shard};
use sonde_proto::{msgpack, statsd, DropReason, Point, PointSink, Value};

/// Records points as the agent's receive path does: in batches of
/// `shard::BATCH` through [`Shard::record_batch`].
struct Record<'s, 'd> {
    shard: &'s mut Shard,
    recorded: &'s mut u64,
    pending: PointBatch<'d>,
}

impl Record<'_, '_> {
    fn flush(&mut self) {
        let recorded = &mut *self.recorded;
        self.shard.record_batch(self.pending.points(), |_, r| {
            if r.is_ok() {
                *recorded += 1;
            }
        });
        self.pending.clear();
    }
}

impl<'d> PointSink<'d> for Record<'_, 'd> {
    fn point(&mut self, p: &Point<'d>) {
        if self.pending.push(*p) {
            self.flush();
        }
    }
    fn drop(&mut self, _reason: DropReason) {}
}

/// Counts points and folds their fields into a checksum, so that the
/// parser's work cannot be optimised away.
#[derive(Default)]
struct Checksum {
    points: u64,
    sum: u64,
}

impl<'d> PointSink<'d> for Checksum {
    fn point(&mut self, p: &Point<'d>) {
        self.points += 1;
        let value = match p.value {
            Value::Number(v) | Value::Delta(v) => v.to_bits(),
            Value::Member(m) => m.len() as u64,
        };
        self.sum = self
            .sum
            .wrapping_add(value ^ (p.name.len() as u64) << 32 ^ (p.tags.len() as u64) << 48);
    }
    fn drop(&mut self, _reason: DropReason) {}
}

/// StatsD lines in ~1400-byte datagrams: with 3 DogStatsD tags, or with
/// none (`plain`: the series is in the name).
fn statsd_datagrams(series: usize, tags: bool) -> Vec<Vec<u8>> {
    let types = ["c", "c", "c", "c", "g", "g", "ms", "ms", "h", "h"];
    let mut out = Vec::new();
    let mut d = Vec::new();
    for i in 0..series.max(50_000) {
        let s = (i * 7_919) % series;
        let line = if tags {
            format!(
                "bench.metric_{}:{}|{}|#series:s{s},env:prod,region:eu-west-{}",
                s % 100,
                i % 1000,
                types[s % 10],
                s % 3
            )
        } else {
            format!("bench.metric_{s}:{}|{}", i % 1000, types[s % 10])
        };
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

fn msgpack_datagrams(series: usize) -> Vec<Vec<u8>> {
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
    let mut out = Vec::new();
    let mut body = Vec::new();
    let mut n = 0u16;
    let flush = |body: &mut Vec<u8>, n: &mut u16, out: &mut Vec<Vec<u8>>| {
        let mut b = vec![0xdc];
        b.extend_from_slice(&n.to_be_bytes());
        b.append(body);
        out.push(b);
        *n = 0;
    };
    for i in 0..series.max(50_000) {
        let s = (i * 7_919) % series;
        let mut m = Vec::new();
        rmp::encode::write_array_len(&mut m, 6).unwrap();
        let tags = format!("series=s{s}|env=prod|region=eu-west-{}", s % 3);
        for f in [
            "emit",
            types[s % 10],
            &format!("bench.metric_{}", s % 100),
            &(i % 1000).to_string(),
            &tags,
            "",
        ] {
            rmp::encode::write_str(&mut m, f).unwrap();
        }
        if 3 + body.len() + m.len() > 32 * 1024 {
            flush(&mut body, &mut n, &mut out);
        }
        body.extend_from_slice(&m);
        n += 1;
    }
    flush(&mut body, &mut n, &mut out);
    out
}

/// A parser driving a recorder.
type Parse = for<'s, 'd> fn(&'d [u8], &mut Record<'s, 'd>);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let shape = args.get(1).map_or("statsd", String::as_str);
    let series: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let passes: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let (shape, parse_only) = match shape.strip_suffix("-parse") {
        Some(shape) => (shape, true),
        None => (shape, false),
    };
    let (datagrams, parse): (Vec<Vec<u8>>, Parse) = match shape {
        "msgpack" => (msgpack_datagrams(series), |d, r| msgpack::parse(d, r)),
        "plain" => (statsd_datagrams(series, false), |d, r| statsd::parse(d, r)),
        _ => (statsd_datagrams(series, true), |d, r| statsd::parse(d, r)),
    };
    // Room for every series asked for (the agent's default is 250k).
    let config = AggregateConfig {
        max_series: AggregateConfig::default().max_series.max(series),
        ..AggregateConfig::default()
    };
    if parse_only {
        let mut sink = Checksum::default();
        for _ in 0..=passes {
            for d in &datagrams {
                match shape {
                    "msgpack" => msgpack::parse(d, &mut sink),
                    _ => statsd::parse(d, &mut sink),
                }
            }
        }
        println!("{} points parsed, checksum {:x}", sink.points, sink.sum);
        return;
    }
    let mut shard = Shard::new(Arc::new(config));
    let mut recorded = 0;
    // Pass 0 creates the series; it is part of every run, so it cancels out
    // when two runs with different pass counts are subtracted.
    for _ in 0..=passes {
        for d in &datagrams {
            let mut rec = Record {
                shard: &mut shard,
                recorded: &mut recorded,
                pending: PointBatch::default(),
            };
            parse(d, &mut rec);
            rec.flush();
        }
    }
    println!("{recorded} points recorded, {} series", shard.len());
}
