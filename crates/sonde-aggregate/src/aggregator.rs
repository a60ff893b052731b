//! The flusher's side: merges worker windows at a boundary, keeps the
//! state that outlives a window (running totals, gauges, idle counts) and
//! turns each window into output points.
//!
//! # Design
//!
//! Workers send the values of a window by slot number (see
//! [`crate::shard`]); the aggregator maps each shard's slots to its own
//! series once, when the series is new, and merges by index from then on.
//! A series' key is the worker's allocation, shared, not a copy.

use std::collections::HashMap;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::config::AggregateConfig;
use crate::key;
use crate::kind::SeriesKind;
use crate::point::{Batch, Shape};
use crate::shard::{Shard, NO_SLOT};
use crate::window::{reserve_slots, Agg, HistogramWindow, Window};

#[derive(Debug)]
struct Series {
    /// Shared with the worker's entry and every output group of the series.
    /// `None` for a free slot.
    key: Option<Arc<[u8]>>,
    /// What persists across windows: a counter's or meter's running total,
    /// a StatsD gauge's value (histograms keep theirs in
    /// `Aggregator::histograms`, so every series pays 8 bytes, not 16).
    total: f64,
    /// The flush number that last saw data for this series.
    last_seen: u32,
    /// Index in `pending` and slot of the window value holding this
    /// series' merged data for the open window (valid when the series'
    /// bit in `Aggregator::claimed` is set); a second worker's value is
    /// merged into that one.
    owner: (u32, u32),
    /// Worker slots mapped to this series.
    refs: u16,
    /// Expired: reported no more; freed when no worker slot maps to it.
    expired: bool,
    /// What the series aggregates, as its key's first byte says.
    kind: SeriesKind,
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
    /// Series whose window value did not have the shape of their kind,
    /// and whose window was therefore lost. Always 0 unless the shard and
    /// the flusher disagree about a kind: a bug.
    pub mismatched: usize,
}

/// The aggregator's view of one worker shard.
#[derive(Debug, Default)]
struct Worker {
    /// Shard slot to series index, [`NO_SLOT`] where unmapped.
    map: Vec<u32>,
    /// Slots to free, waiting for a window to travel back with.
    expire: Vec<u32>,
}

/// Merged state of all workers.
#[derive(Debug)]
pub struct Aggregator {
    config: Arc<AggregateConfig>,
    series: Vec<Series>,
    index: HashTable<u32>,
    free: Vec<u32>,
    live: usize,
    workers: HashMap<u32, Worker>,
    /// Windows absorbed since the last flush.
    pending: Vec<Window>,
    /// Windows flushed, ready to go back to their shards.
    done: Vec<Window>,
    /// One bit per series that has a value in the open window's `pending`.
    claimed: Vec<u64>,
    /// Running bucket counts, sum and count of each live histogram series.
    histograms: HashMap<u32, Box<HistogramWindow>>,
    flushes: u32,
    /// Scratch for [`Aggregator::absorb_window`]: series whose slot a
    /// window freed.
    released: Vec<u32>,
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

/// The hash of the key at the front of a shard's stored series.
fn canonical_hash(stored: &[u8]) -> u64 {
    key::hash(key::canonical(stored))
}

/// A histogram's running totals, starting from zero, with the bounds of
/// its first window.
fn empty_histogram(h: &HistogramWindow) -> Box<HistogramWindow> {
    let mut empty = h.clone();
    empty.counts.fill(0);
    empty.sum = 0.0;
    empty.count = 0;
    Box::new(empty)
}

impl Aggregator {
    /// An aggregator with no series.
    pub fn new(config: Arc<AggregateConfig>) -> Aggregator {
        Aggregator {
            config,
            series: Vec::new(),
            index: HashTable::new(),
            free: Vec::new(),
            live: 0,
            workers: HashMap::new(),
            pending: Vec::new(),
            done: Vec::new(),
            claimed: Vec::new(),
            histograms: HashMap::new(),
            released: Vec::new(),
            flushes: 0,
        }
    }

    /// Closes `shard`'s open window and absorbs it, recycling a window of
    /// the same shard that an earlier flush finished with. For callers that
    /// own both sides (tests, benchmarks, a single-threaded pipeline); the
    /// agent sends windows across threads with [`Aggregator::absorb_window`].
    pub fn absorb(&mut self, shard: &mut Shard) {
        let recycled = self
            .done
            .iter()
            .position(|w| w.shard() == shard.id())
            .map(|i| self.done.swap_remove(i));
        let window = shard.take_window(recycled);
        self.absorb_window(window);
    }

    /// Folds a worker's closed window into the open one. The window comes
    /// back from [`Aggregator::take_done`] after the next flush.
    pub fn absorb_window(&mut self, mut w: Window) {
        // Freed at the start of the window, so before any slot reuse in it.
        if !w.removed.is_empty() {
            let worker = self.workers.entry(w.shard()).or_default();
            let mut released = std::mem::take(&mut self.released);
            for slot in w.removed.drain(..) {
                if let Some(g) = worker.map.get_mut(slot as usize) {
                    let g = std::mem::replace(g, NO_SLOT);
                    if g != NO_SLOT {
                        released.push(g);
                    }
                }
            }
            for g in released.drain(..) {
                self.unref(g);
            }
            self.released = released;
        }
        let worker = self.workers.entry(w.shard()).or_default();
        // Taken, not drained: new series are rare once the shard is warm,
        // and a kept capacity would cost 24 bytes a series in every window.
        for (slot, kind, k) in std::mem::take(&mut w.added) {
            let canonical = key::canonical(&k);
            let hash = key::hash(canonical);
            let series = &mut self.series;
            let g = match self.index.find(hash, |&i| {
                series[i as usize].key.as_deref().map(key::canonical) == Some(canonical)
            }) {
                Some(&g) => g,
                None => {
                    let s = Series {
                        key: Some(k),
                        total: 0.0,
                        last_seen: 0,
                        owner: (0, 0),
                        refs: 0,
                        // Not reported until a window gives it data.
                        expired: true,
                        kind,
                    };
                    let g = match self.free.pop() {
                        Some(g) => {
                            series[g as usize] = s;
                            g
                        }
                        None => {
                            reserve_slots(series, series.len() + 1);
                            series.push(s);
                            (series.len() - 1) as u32
                        }
                    };
                    self.index.insert_unique(hash, g, |&i| {
                        series[i as usize].key.as_deref().map_or(0, canonical_hash)
                    });
                    g
                }
            };
            self.series[g as usize].refs += 1;
            let map = &mut worker.map;
            if map.len() <= slot as usize {
                reserve_slots(map, slot as usize + 1);
                map.resize(slot as usize + 1, NO_SLOT);
            }
            map[slot as usize] = g;
        }
        // Two workers with data for one series: merge into the first value.
        let here = self.pending.len() as u32;
        self.claimed.resize(self.series.len().div_ceil(64), 0);
        let slots: Vec<u32> = w.touched_slots().collect();
        for slot in slots {
            let g = worker.map.get(slot as usize).copied().unwrap_or(NO_SLOT);
            if g == NO_SLOT {
                w.untouch(slot);
                continue;
            }
            let s = &mut self.series[g as usize];
            let (word, bit) = (g as usize / 64, 1u64 << (g % 64));
            if self.claimed[word] & bit == 0 {
                self.claimed[word] |= bit;
                s.owner = (here, slot);
                continue;
            }
            let (pi, ps) = s.owner;
            self.pending[pi as usize].values[ps as usize].merge(s.kind, &w.values[slot as usize]);
            w.untouch(slot);
        }
        self.pending.push(w);
    }

    /// Forgets a shard whose worker has stopped (a config reload removed
    /// its receiver), after its last window was flushed: the series only it
    /// fed are freed once they expire, as if every later window were idle.
    pub fn forget_shard(&mut self, shard: u32) {
        let Some(worker) = self.workers.remove(&shard) else {
            return;
        };
        for g in worker.map {
            if g != NO_SLOT {
                self.unref(g);
            }
        }
    }

    /// Drops one worker slot's reference to series `g`, and frees the
    /// series once no slot refers to it and it has expired.
    fn unref(&mut self, g: u32) {
        let s = &mut self.series[g as usize];
        s.refs -= 1;
        if s.refs == 0 && s.expired {
            let hash = s.key.as_deref().map_or(0, canonical_hash);
            s.key = None;
            self.histograms.remove(&g);
            // Its claim on the open window, if any, must not pass to the
            // series that reuses the index.
            if let Some(w) = self.claimed.get_mut(g as usize / 64) {
                *w &= !(1 << (g % 64));
            }
            if let Ok(e) = self.index.find_entry(hash, |&i| i == g) {
                e.remove();
            }
            self.free.push(g);
        }
    }

    /// Windows the last flush finished with, to return to their shards
    /// (match them with [`Window::shard`]).
    pub fn take_done(&mut self) -> impl Iterator<Item = Window> + '_ {
        self.done.drain(..)
    }

    /// Number of live series.
    pub fn series_count(&self) -> usize {
        self.live
    }

    /// Closes the window that started at `window_start` and lasted
    /// `window_secs`, appending its points to `out`, and expires idle series.
    pub fn flush(&mut self, window_start: i64, window_secs: f64, out: &mut Batch) -> FlushStats {
        self.flushes += 1;
        let now = self.flushes;
        let non_finite_before = out.non_finite();
        let expire = self.config.expire_windows;
        let (mut expired, mut mismatched) = (0, 0);
        for (g, s) in self.series.iter_mut().enumerate() {
            let Some(id) = &s.key else { continue };
            // The series' data in this window: `absorb_window` merged every
            // worker's value into the one `owner` names.
            let (word, bit) = (g / 64, 1u64 << (g % 64));
            let claimed = self.claimed.get(word).is_some_and(|w| w & bit != 0);
            // Sketches, sets and timestamp lists are freed rather than kept
            // for the buffer's next window: a buffer waits a whole window
            // idle, and a kept 25-sample sketch is ~650 bytes a timer series
            // against one allocation a window to redo it.
            let mut taken;
            let window = match claimed {
                false => None,
                true => {
                    let (pi, slot) = s.owner;
                    let value = &mut self.pending[pi as usize].values[slot as usize];
                    match value {
                        Agg::Timer(_) | Agg::Set(_) | Agg::Ts(_) => {
                            taken = std::mem::replace(value, Agg::Vacant);
                            Some(&mut taken)
                        }
                        other => Some(other),
                    }
                }
            };
            if window.is_some() {
                if s.expired {
                    // Back after expiring, or new: state starts from zero.
                    s.expired = false;
                    s.total = 0.0;
                    self.live += 1;
                }
                s.last_seen = now;
            } else if s.expired {
                continue;
            } else if now - s.last_seen >= expire {
                s.expired = true;
                self.histograms.remove(&(g as u32));
                expired += 1;
                if s.refs == 0 {
                    // No worker slot left (a worker freed it late): free now.
                    let hash = canonical_hash(id);
                    s.key = None;
                    if let Ok(e) = self.index.find_entry(hash, |&i| i as usize == g) {
                        e.remove();
                    }
                    self.free.push(g as u32);
                }
                continue;
            }
            let mut e = Emit {
                out: &mut *out,
                key: id,
                ts: window_start,
                window_secs,
            };
            let total = &mut s.total;
            let done = match s.kind {
                SeriesKind::Counter => counter(&mut e, window, total),
                SeriesKind::RateCounter => rate_counter(&mut e, window),
                SeriesKind::Meter => meter(&mut e, window, total),
                SeriesKind::Timer => timer(&mut e, window),
                SeriesKind::Store => store(&mut e, window),
                SeriesKind::TsStore => ts_store(&mut e, window),
                SeriesKind::Histogram => histogram(&mut e, window, &mut self.histograms, g as u32),
                SeriesKind::Count => count(&mut e, window),
                SeriesKind::Gauge => gauge(&mut e, window, total),
                SeriesKind::Set => set(&mut e, window),
                SeriesKind::TsSum => ts_sum(&mut e, window),
            };
            if done.is_err() {
                mismatched += 1;
            }
        }
        self.claimed.fill(0);
        self.live -= expired;
        if expired > 0 {
            // Ask the workers to free their slots of the series expired now
            // (only now: an older request may be travelling, and its slot
            // may be reused by then).
            for w in self.workers.values_mut() {
                for (slot, &g) in w.map.iter().enumerate() {
                    let s = self.series.get(g as usize);
                    // Expired now: idle for exactly `expire` flushes.
                    if s.is_some_and(|s| s.expired && s.last_seen + expire == now) {
                        w.expire.push(slot as u32);
                    }
                }
            }
        }
        for mut w in self.pending.drain(..) {
            // Every value of the window was read: the worker starts the
            // next use of this buffer with no slot touched.
            w.touched.fill(0);
            if let Some(worker) = self.workers.get_mut(&w.shard()) {
                w.expire.append(&mut worker.expire);
            }
            self.done.push(w);
        }
        FlushStats {
            series: self.live,
            expired,
            non_finite: out.non_finite() - non_finite_before,
            mismatched,
        }
    }
}

/// One series' outputs for the window being flushed.
struct Emit<'a> {
    out: &'a mut Batch,
    key: &'a Arc<[u8]>,
    /// The window's start.
    ts: i64,
    window_secs: f64,
}

impl Emit<'_> {
    fn push<const N: usize>(&mut self, shape: Shape, values: [f64; N]) {
        self.out.push(self.key, shape, None, self.ts, values);
    }
}

/// A window value of another shape than its series' kind makes. The shard
/// makes each value for the kind of its series (`Agg::reset`), so this is a
/// bug, reported in [`FlushStats::mismatched`] rather than passed over.
#[derive(Debug)]
struct Mismatch;

// One function per series kind: each turns the series' value for the
// window (`None` when it saw no data) and the state it keeps across
// windows into that kind's row of the table in ARCHITECTURE.md ("Metric
// semantics"). Each is called every window until the series expires.

/// The window's sum, 0 for a window without data.
fn window_sum(window: Option<&mut Agg>) -> Result<f64, Mismatch> {
    match window {
        None => Ok(0.0),
        Some(Agg::Sum(v)) => Ok(*v),
        Some(_) => Err(Mismatch),
    }
}

/// msgpack `counter`: `NAME` = the running total since the series appeared.
fn counter(e: &mut Emit<'_>, window: Option<&mut Agg>, total: &mut f64) -> Result<(), Mismatch> {
    *total += window_sum(window)?;
    e.push(Shape::Total, [*total]);
    Ok(())
}

/// msgpack `rate_counter`: `NAME` = the window's sum per second, for a
/// window with data.
fn rate_counter(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    match window {
        None => {}
        Some(Agg::Sum(v)) => e.push(Shape::Plain, [*v / e.window_secs]),
        Some(_) => return Err(Mismatch),
    }
    Ok(())
}

/// msgpack `meter`: `NAME` = the running total as for [`counter`], and
/// `NAME.rate` = the window's sum per second (0 for a window without data).
fn meter(e: &mut Emit<'_>, window: Option<&mut Agg>, total: &mut f64) -> Result<(), Mismatch> {
    let sum = window_sum(window)?;
    *total += sum;
    e.push(Shape::Total, [*total]);
    e.push(Shape::Rate, [sum / e.window_secs]);
    Ok(())
}

/// msgpack `timer`, StatsD `ms`, `h`, `d`: `NAME.min`, `.max`, `.avg`,
/// `.sum`, `.counter` and the percentiles, for a window with data.
fn timer(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    let s = match window {
        None => return Ok(()),
        Some(Agg::Timer(s)) => s,
        Some(_) => return Err(Mismatch),
    };
    // Raw samples kept past the buckets' start move into them here, off
    // the receive thread.
    s.settle();
    let n = s.count();
    let q = s
        .quantiles([0.5, 0.9, 0.95, 0.99, 0.999])
        .map(|q| q.unwrap_or(0.0));
    // The order of `point::TIMER_SUFFIXES`.
    let values = [
        s.min().unwrap_or(0.0),
        s.max().unwrap_or(0.0),
        s.sum() / n,
        s.sum(),
        n,
        q[0],
        q[1],
        q[2],
        q[3],
        q[4],
    ];
    e.push(Shape::Timer, values);
    Ok(())
}

/// msgpack `store`: `NAME` = the window's last value, for a window with data.
fn store(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    match window {
        None => {}
        Some(Agg::Last(v)) => e.push(Shape::Plain, [*v]),
        Some(_) => return Err(Mismatch),
    }
    Ok(())
}

/// The `(timestamp, value)` list of a window with data, as kept by
/// `ts_store` and `ts_sum`; empty for a window without data.
fn per_timestamp(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    match window {
        None => {}
        Some(Agg::Ts(points)) => {
            for &(t, v) in points.iter() {
                e.out.push(e.key, Shape::Plain, None, t, [v]);
            }
        }
        Some(_) => return Err(Mismatch),
    }
    Ok(())
}

/// msgpack `ts_store` (and a StatsD gauge with a client timestamp): `NAME`
/// at each client timestamp, the last value received for it.
fn ts_store(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    per_timestamp(e, window)
}

/// StatsD `c` with a client timestamp: `NAME` at each client timestamp, the
/// sum received for it (after sample-rate scaling).
fn ts_sum(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    per_timestamp(e, window)
}

/// msgpack `histogram`: `NAME.bucket` per bound and `+Inf`, `NAME.sum`,
/// `NAME.count`, all running totals since the series appeared.
fn histogram(
    e: &mut Emit<'_>,
    window: Option<&mut Agg>,
    totals: &mut HashMap<u32, Box<HistogramWindow>>,
    g: u32,
) -> Result<(), Mismatch> {
    match window {
        None => {}
        Some(Agg::Histogram(w)) => {
            let total = totals.entry(g).or_insert_with(|| empty_histogram(w));
            // A config reload that changed the series' bounds: the window's
            // counts do not line up with the running ones, and the running
            // ones are kept until the series expires.
            if total.counts.len() == w.counts.len() {
                total.merge(w);
            }
        }
        Some(_) => return Err(Mismatch),
    }
    if let Some(total) = totals.get(&g) {
        push_histogram(e.out, e.key, total, e.ts);
    }
    Ok(())
}

/// StatsD `c`: `NAME` = the window's sum after sample-rate scaling, for a
/// window with data.
fn count(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    match window {
        None => {}
        Some(Agg::Sum(v)) => e.push(Shape::Plain, [*v]),
        Some(_) => return Err(Mismatch),
    }
    Ok(())
}

/// StatsD `g`: `NAME` = the last value, adjusted by `+n`/`-n`, reported
/// every window until the series expires.
fn gauge(e: &mut Emit<'_>, window: Option<&mut Agg>, value: &mut f64) -> Result<(), Mismatch> {
    match window {
        None => {}
        Some(Agg::GaugeSet(v)) => *value = *v,
        Some(Agg::GaugeDelta(d)) => *value += *d,
        Some(_) => return Err(Mismatch),
    }
    e.push(Shape::Plain, [*value]);
    Ok(())
}

/// StatsD `s`: `NAME` = the number of distinct members, for a window with
/// data.
fn set(e: &mut Emit<'_>, window: Option<&mut Agg>) -> Result<(), Mismatch> {
    match window {
        None => {}
        Some(Agg::Set(members)) => e.push(Shape::Plain, [members.len() as f64]),
        Some(_) => return Err(Mismatch),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::{Kind, Point, TagSyntax, Value};
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
    fn a_series_costs_the_flusher_40_bytes() {
        // tests/memory_budget.rs depends on this size.
        assert_eq!(std::mem::size_of::<Series>(), 40);
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
    fn one_series_from_two_workers_is_merged_into_one_output() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut a = Shard::new(Arc::clone(&c));
        let mut b = Shard::new(Arc::clone(&c));
        for window in 0..2 {
            rec(&mut a, Kind::Counter, "c", Value::Number(1.0));
            rec(&mut b, Kind::Counter, "c", Value::Number(2.0));
            rec(&mut b, Kind::Count, "n", Value::Number(5.0));
            rec(&mut a, Kind::Count, "n", Value::Number(1.0));
            agg.absorb(&mut a);
            agg.absorb(&mut b);
            let out = flush(&mut agg, window * 10);
            assert_eq!(out.len(), 2);
            assert_eq!(out["c"], 3.0 * (window + 1) as f64);
            assert_eq!(out["n"], 6.0);
        }
        assert_eq!(agg.series_count(), 2);
    }

    #[test]
    fn expired_series_are_freed_on_both_sides_and_come_back_from_zero() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        rec(&mut w, Kind::Counter, "old", Value::Number(3.0));
        rec(&mut w, Kind::Counter, "live", Value::Number(1.0));
        agg.absorb(&mut w);
        flush(&mut agg, 0);
        for start in [10, 20, 30] {
            rec(&mut w, Kind::Counter, "live", Value::Number(1.0));
            agg.absorb(&mut w);
            let out = flush(&mut agg, start);
            assert_eq!(out.contains_key("old"), start < 20, "at {start}");
        }
        // Expired at 20; the worker freed its slot when its window came back,
        // and reports it with the window it sends next.
        assert_eq!((agg.series_count(), w.len()), (1, 1));
        assert_eq!(w.window.removed.len(), 1);
        rec(&mut w, Kind::Counter, "old", Value::Number(4.0));
        agg.absorb(&mut w);
        let out = flush(&mut agg, 40);
        assert_eq!((out["old"], out["live"]), (4.0, 4.0));
        assert_eq!((agg.series_count(), w.len()), (2, 2));
        // The freed slots were reused rather than grown.
        assert_eq!((agg.series.len(), w.entries.len()), (2, 2));
    }

    #[test]
    fn a_forgotten_shard_releases_its_series_which_then_expire() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let (mut kept, mut gone) = (Shard::new(Arc::clone(&c)), Shard::new(Arc::clone(&c)));
        rec(&mut kept, Kind::Counter, "shared", Value::Number(1.0));
        rec(&mut gone, Kind::Counter, "shared", Value::Number(2.0));
        rec(&mut gone, Kind::Counter, "only.gone", Value::Number(5.0));
        agg.absorb(&mut kept);
        agg.absorb(&mut gone);
        assert_eq!(flush(&mut agg, 0)["shared"], 3.0);
        // The removed receiver's worker is forgotten after its last window.
        agg.forget_shard(gone.id());
        // Its series report their totals until they expire, then are freed;
        // the series the other worker still feeds lives on.
        for start in [10, 20, 30] {
            rec(&mut kept, Kind::Counter, "shared", Value::Number(1.0));
            agg.absorb(&mut kept);
            let out = flush(&mut agg, start);
            assert_eq!(out.contains_key("only.gone"), start < 20, "at {start}");
        }
        assert_eq!(agg.series_count(), 1);
        assert_eq!(agg.free.len(), 1, "the forgotten series' entry is reusable");
    }

    #[test]
    fn a_series_with_data_after_its_expiry_is_kept_and_restarts_its_total() {
        let c = cfg();
        let mut agg = Aggregator::new(Arc::clone(&c));
        let mut w = Shard::new(Arc::clone(&c));
        rec(&mut w, Kind::Counter, "c", Value::Number(3.0));
        agg.absorb(&mut w);
        flush(&mut agg, 0);
        agg.absorb(&mut w);
        flush(&mut agg, 10);
        agg.absorb(&mut w);
        // Expired here; the request to free the slot travels with the window.
        assert!(!flush(&mut agg, 20).contains_key("c"));
        // Data arrives before the worker applies the request.
        rec(&mut w, Kind::Counter, "c", Value::Number(5.0));
        agg.absorb(&mut w);
        assert_eq!(flush(&mut agg, 30)["c"], 5.0);
        assert_eq!(w.len(), 1);
        rec(&mut w, Kind::Counter, "c", Value::Number(1.0));
        agg.absorb(&mut w);
        assert_eq!(flush(&mut agg, 40)["c"], 6.0);
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
