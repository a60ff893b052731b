//! The flusher's side: merges worker shards at a window boundary, keeps the
//! state that outlives a window (running totals, gauges, idle counts) and
//! turns each window into output points.

use std::sync::Arc;

use hashbrown::HashTable;
use sonde_proto::Kind;

use crate::config::AggregateConfig;
use crate::key::KIND_TS_SUM;
use crate::point::{Batch, Shape};
use crate::shard::{Agg, HistogramWindow, Shard};

/// Totals that persist across windows.
#[derive(Debug)]
enum Persist {
    /// Window-only kinds: nothing survives the window.
    Nothing,
    /// Counter and meter running totals.
    Total(f64),
    /// A StatsD gauge's current value.
    Gauge(f64),
    /// A histogram's running bucket counts, sum and count.
    Histogram(Box<HistogramWindow>),
}

#[derive(Debug)]
struct Series {
    hash: u64,
    /// Shared with every output group of the series, never copied per point.
    key: Arc<[u8]>,
    /// The flush number that last saw data for this series.
    last_seen: u64,
    persist: Persist,
}

/// What one flush did, for the agent's own metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Live series after the flush.
    pub series: usize,
    /// Series forgotten because they were idle too long.
    pub expired: usize,
    /// Points dropped because their value was not finite.
    pub non_finite: usize,
}

/// Merged state of all workers.
#[derive(Debug)]
pub struct Aggregator {
    config: Arc<AggregateConfig>,
    window: Shard,
    series: HashTable<Series>,
    flushes: u64,
}

fn push_histogram(out: &mut Batch, key: &Arc<[u8]>, h: &HistogramWindow, ts: i64) {
    let mut cumulative = 0;
    let buckets = h.counts.iter().map(move |c| {
        cumulative += c;
        cumulative as f64
    });
    let values = buckets.chain([h.sum, h.count as f64]);
    out.push(key, Shape::Histogram, Some(&h.bounds.labels), ts, values);
}

impl Aggregator {
    /// An aggregator with no series.
    pub fn new(config: Arc<AggregateConfig>) -> Aggregator {
        Aggregator {
            window: Shard::new(Arc::clone(&config)),
            config,
            series: HashTable::new(),
            flushes: 0,
        }
    }

    /// Folds a worker's window into the current one, leaving `shard` empty
    /// (with its capacity) so the worker can reuse it.
    pub fn absorb(&mut self, shard: &mut Shard) {
        self.window.absorb(shard);
    }

    /// Number of live series.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Closes the window that started at `window_start` and lasted
    /// `window_secs`, appending its points to `out`, and expires idle series.
    pub fn flush(&mut self, window_start: i64, window_secs: f64, out: &mut Batch) -> FlushStats {
        self.flushes += 1;
        let now = self.flushes;
        let non_finite_before = out.non_finite();
        for entry in self.window.drain() {
            let kind = entry.key[0];
            let series = match self.series.find_mut(entry.hash, |s| *s.key == *entry.key) {
                Some(s) => s,
                None => {
                    let persist = match (Kind::from_u8(kind), &entry.agg) {
                        (Some(Kind::Counter | Kind::Meter), _) => Persist::Total(0.0),
                        (Some(Kind::Gauge), _) => Persist::Gauge(0.0),
                        (Some(Kind::Histogram), Agg::Histogram(h)) => {
                            let mut empty = (**h).clone();
                            empty.counts.fill(0);
                            empty.sum = 0.0;
                            empty.count = 0;
                            Persist::Histogram(Box::new(empty))
                        }
                        _ => Persist::Nothing,
                    };
                    let hash = entry.hash;
                    self.series
                        .insert_unique(
                            hash,
                            Series {
                                hash,
                                key: entry.key.into(),
                                last_seen: now,
                                persist,
                            },
                            |s| s.hash,
                        )
                        .into_mut()
                }
            };
            series.last_seen = now;
            let id = &series.key;
            let ts = window_start;
            match (Kind::from_u8(kind), entry.agg, &mut series.persist) {
                (Some(Kind::Counter), Agg::Sum(v), Persist::Total(t)) => *t += v,
                (Some(Kind::Meter), Agg::Sum(v), Persist::Total(t)) => {
                    *t += v;
                    out.push(id, Shape::Rate, None, ts, [v / window_secs]);
                }
                (Some(Kind::RateCounter), Agg::Sum(v), _) => {
                    out.push(id, Shape::Plain, None, ts, [v / window_secs])
                }
                (Some(Kind::Count), Agg::Sum(v), _) => out.push(id, Shape::Plain, None, ts, [v]),
                (Some(Kind::Store), Agg::Last(v), _) => out.push(id, Shape::Plain, None, ts, [v]),
                (Some(Kind::Gauge), Agg::Gauge { set, delta }, Persist::Gauge(g)) => {
                    *g = set.unwrap_or(*g + delta);
                }
                (Some(Kind::Timer), Agg::Timer(s), _) => {
                    let n = s.count();
                    let q = |q| s.quantile(q).unwrap_or(0.0);
                    // The order of `point::TIMER_SUFFIXES`.
                    let values = [
                        s.min().unwrap_or(0.0),
                        s.max().unwrap_or(0.0),
                        s.sum() / n,
                        s.sum(),
                        n,
                        q(0.5),
                        q(0.9),
                        q(0.95),
                        q(0.99),
                        q(0.999),
                    ];
                    out.push(id, Shape::Timer, None, ts, values);
                }
                (Some(Kind::Histogram), Agg::Histogram(w), Persist::Histogram(total))
                    if total.counts.len() == w.counts.len() =>
                {
                    total.merge(&w)
                }
                (Some(Kind::Set), Agg::Set(members), _) => {
                    out.push(id, Shape::Plain, None, ts, [members.len() as f64])
                }
                (Some(Kind::TsStore), Agg::Ts(points), _) => {
                    for (t, v) in points {
                        out.push(id, Shape::Plain, None, t, [v]);
                    }
                }
                (None, Agg::Ts(points), _) if kind == KIND_TS_SUM => {
                    for (t, v) in points {
                        out.push(id, Shape::Plain, None, t, [v]);
                    }
                }
                _ => {}
            }
        }
        // Persistent outputs are reported every window, idle or not, until
        // the series expires.
        let expire = u64::from(self.config.expire_windows);
        let mut expired = 0;
        self.series.retain(|s| {
            let idle = now - s.last_seen;
            if idle >= expire {
                expired += 1;
                return false;
            }
            let ts = window_start;
            match &s.persist {
                Persist::Nothing => {}
                Persist::Total(t) => {
                    out.push(&s.key, Shape::Total, None, ts, [*t]);
                    if idle > 0 && s.key[0] == Kind::Meter as u8 {
                        out.push(&s.key, Shape::Rate, None, ts, [0.0]);
                    }
                }
                Persist::Gauge(g) => out.push(&s.key, Shape::Plain, None, ts, [*g]),
                Persist::Histogram(h) => push_histogram(out, &s.key, h, ts),
            }
            true
        });
        FlushStats {
            series: self.series.len(),
            expired,
            non_finite: out.non_finite() - non_finite_before,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::{Point, TagSyntax, Value};
    use std::collections::BTreeMap;

    fn cfg() -> Arc<AggregateConfig> {
        Arc::new(AggregateConfig {
            interval: std::time::Duration::from_secs(10),
            expire_windows: 2,
            ..AggregateConfig::default()
        })
    }

    fn rec(shard: &mut Shard, kind: Kind, name: &str, value: Value<'_>) {
        shard
            .record(&Point {
                kind,
                name: name.as_bytes(),
                tags: b"host=a",
                tag_syntax: TagSyntax::Msgpack,
                value,
                sample_rate: 1.0,
                timestamp: None,
            })
            .unwrap();
    }

    fn flush(agg: &mut Aggregator, start: i64) -> BTreeMap<String, f64> {
        let mut out = Batch::new(start);
        agg.flush(start, 10.0, &mut out);
        out.points()
            .map(|p| {
                let mut n = p.name();
                if let Some(le) = &p.le {
                    n.push_str(&format!("{{le={le}}}"));
                }
                (n, p.value)
            })
            .collect()
    }

    #[test]
    fn counters_are_running_totals_across_windows() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        rec(&mut w, Kind::Counter, "c", Value::Number(3.0));
        agg.absorb(&mut w);
        assert_eq!(flush(&mut agg, 0)["c"], 3.0);
        rec(&mut w, Kind::Counter, "c", Value::Number(4.0));
        agg.absorb(&mut w);
        assert_eq!(flush(&mut agg, 10)["c"], 7.0);
        // Idle: the total is still reported until expiry.
        assert_eq!(flush(&mut agg, 20)["c"], 7.0);
        assert!(!flush(&mut agg, 30).contains_key("c"));
        assert_eq!(agg.series_count(), 0);
    }

    #[test]
    fn meters_report_total_and_rate() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        rec(&mut w, Kind::Meter, "m", Value::Number(50.0));
        agg.absorb(&mut w);
        let out = flush(&mut agg, 0);
        assert_eq!((out["m"], out["m.rate"]), (50.0, 5.0));
        let out = flush(&mut agg, 10);
        assert_eq!((out["m"], out["m.rate"]), (50.0, 0.0));
    }

    #[test]
    fn rate_counters_and_stores_report_only_their_window() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        rec(&mut w, Kind::RateCounter, "r", Value::Number(20.0));
        rec(&mut w, Kind::Store, "s", Value::Number(1.0));
        rec(&mut w, Kind::Store, "s", Value::Number(9.0));
        agg.absorb(&mut w);
        let out = flush(&mut agg, 0);
        assert_eq!((out["r"], out["s"]), (2.0, 9.0));
        assert!(flush(&mut agg, 10).is_empty());
    }

    #[test]
    fn gauges_persist_and_adjust_across_windows() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        rec(&mut w, Kind::Gauge, "g", Value::Number(42.0));
        agg.absorb(&mut w);
        assert_eq!(flush(&mut agg, 0)["g"], 42.0);
        rec(&mut w, Kind::Gauge, "g", Value::Delta(-2.0));
        agg.absorb(&mut w);
        assert_eq!(flush(&mut agg, 10)["g"], 40.0);
        assert_eq!(flush(&mut agg, 20)["g"], 40.0);
    }

    #[test]
    fn timers_expand_to_ten_points() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        for v in 1..=100 {
            rec(&mut w, Kind::Timer, "t", Value::Number(f64::from(v)));
        }
        agg.absorb(&mut w);
        let out = flush(&mut agg, 0);
        assert_eq!(out.len(), 10);
        assert_eq!(out["t.min"], 1.0);
        assert_eq!(out["t.max"], 100.0);
        assert_eq!(out["t.sum"], 5050.0);
        assert_eq!(out["t.avg"], 50.5);
        assert_eq!(out["t.counter"], 100.0);
        for (name, want) in [
            ("t.pct50", 50.0),
            ("t.pct90", 90.0),
            ("t.pct99", 99.0),
            ("t.pct999", 100.0),
        ] {
            assert!(
                (out[name] - want).abs() / want <= 0.01,
                "{name} = {}",
                out[name]
            );
        }
    }

    #[test]
    fn histograms_are_cumulative_per_bound_and_over_time() {
        let c = Arc::new(AggregateConfig {
            histograms: crate::config::HistogramBuckets::new(
                crate::config::Bounds::new(&[1.0, 5.0]),
                Vec::new(),
            ),
            ..(*cfg()).clone()
        });
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        for v in [0.5, 1.0, 3.0, 7.0] {
            rec(&mut w, Kind::Histogram, "h", Value::Number(v));
        }
        agg.absorb(&mut w);
        let out = flush(&mut agg, 0);
        assert_eq!(out["h.bucket{le=1}"], 2.0);
        assert_eq!(out["h.bucket{le=5}"], 3.0);
        assert_eq!(out["h.bucket{le=+Inf}"], 4.0);
        assert_eq!(out["h.sum"], 11.5);
        assert_eq!(out["h.count"], 4.0);
        rec(&mut w, Kind::Histogram, "h", Value::Number(2.0));
        agg.absorb(&mut w);
        let out = flush(&mut agg, 10);
        assert_eq!(out["h.bucket{le=5}"], 4.0);
        assert_eq!(out["h.count"], 5.0);
    }

    #[test]
    fn sets_count_distinct_members() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut a = Shard::new(Arc::clone(&c));
        let mut b = Shard::new(Arc::clone(&c));
        for m in ["u1", "u2", "u1"] {
            rec(&mut a, Kind::Set, "users", Value::Member(m.as_bytes()));
        }
        rec(&mut b, Kind::Set, "users", Value::Member(b"u3"));
        rec(&mut b, Kind::Set, "users", Value::Member(b"u2"));
        agg.absorb(&mut a);
        agg.absorb(&mut b);
        assert_eq!(flush(&mut agg, 0)["users"], 3.0);
    }

    #[test]
    fn ts_store_keeps_the_last_value_per_client_timestamp() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        for (ts, v) in [(100, 1.0), (200, 2.0), (100, 3.0)] {
            w.record(&Point {
                kind: Kind::TsStore,
                name: b"ts",
                tags: b"",
                tag_syntax: TagSyntax::Msgpack,
                value: Value::Number(v),
                sample_rate: 1.0,
                timestamp: Some(ts),
            })
            .unwrap();
        }
        agg.absorb(&mut w);
        let mut out = Batch::new(0);
        agg.flush(0, 10.0, &mut out);
        let got: Vec<(i64, f64)> = out.points().map(|p| (p.timestamp, p.value)).collect();
        assert_eq!(got, vec![(100, 3.0), (200, 2.0)]);
    }

    #[test]
    fn non_finite_results_are_dropped_and_counted() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        rec(&mut w, Kind::Count, "big", Value::Number(f64::MAX));
        rec(&mut w, Kind::Count, "big", Value::Number(f64::MAX));
        agg.absorb(&mut w);
        let mut out = Batch::new(0);
        let stats = agg.flush(0, 10.0, &mut out);
        assert!(out.is_empty());
        assert_eq!(stats.non_finite, 1);
    }
}
