//! Per-worker window storage.
//!
//! Each receive thread owns one [`Shard`] and records every point it parses
//! into it; nothing else touches the shard until the window closes, when the
//! worker hands it to the flusher whole. So the hot path takes no lock and
//! makes no cross-thread hand-off per point, and allocates only when a
//! series is new to this window.

use std::sync::Arc;

use hashbrown::{HashSet, HashTable};
use sonde_proto::{DropReason, Kind, Point, TagSyntax, Value};

use crate::config::{AggregateConfig, Bounds};
use crate::key::{self, KeyBuilder, KIND_TS_SUM};
use crate::sketch::Sketch;

/// Counts per histogram bucket for one window (not cumulative).
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramWindow {
    pub(crate) bounds: Bounds,
    /// One count per bound, plus the `+Inf` bucket.
    pub(crate) counts: Box<[u64]>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl HistogramWindow {
    fn new(bounds: &Bounds) -> Self {
        HistogramWindow {
            bounds: bounds.clone(),
            counts: vec![0; bounds.values.len() + 1].into_boxed_slice(),
            sum: 0.0,
            count: 0,
        }
    }

    fn add(&mut self, v: f64) {
        let i = self.bounds.values.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    pub(crate) fn merge(&mut self, other: &HistogramWindow) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

/// What one series accumulated in one window.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Agg {
    /// Counters, rate counters, meters, StatsD counts.
    Sum(f64),
    /// msgpack `store`.
    Last(f64),
    /// StatsD gauge: the last absolute value seen (if any) with the
    /// adjustments that came after it.
    Gauge {
        set: Option<f64>,
        delta: f64,
    },
    Timer(Box<Sketch>),
    Histogram(Box<HistogramWindow>),
    Set(Box<HashSet<u64>>),
    /// `(timestamp, value)`: last value per timestamp, or the sum for
    /// [`KIND_TS_SUM`].
    Ts(Vec<(i64, f64)>),
}

impl Agg {
    fn new(kind: u8, name: &[u8], config: &AggregateConfig) -> Agg {
        match Kind::from_u8(kind) {
            Some(Kind::Store) => Agg::Last(0.0),
            Some(Kind::Gauge) => Agg::Gauge {
                set: None,
                delta: 0.0,
            },
            Some(Kind::Timer) => Agg::Timer(Box::default()),
            Some(Kind::Histogram) => Agg::Histogram(Box::new(HistogramWindow::new(
                config.histograms.for_name(name),
            ))),
            Some(Kind::Set) => Agg::Set(Box::default()),
            Some(Kind::TsStore) => Agg::Ts(Vec::new()),
            _ if kind == KIND_TS_SUM => Agg::Ts(Vec::new()),
            _ => Agg::Sum(0.0),
        }
    }

    fn record(&mut self, kind: u8, p: &Point<'_>, max_ts: usize) -> Result<(), DropReason> {
        match (self, p.value) {
            (Agg::Sum(s), Value::Number(v)) => *s += v / p.sample_rate,
            (Agg::Last(l), Value::Number(v)) => *l = v,
            (Agg::Gauge { set, delta }, Value::Number(v)) => {
                *set = Some(v);
                *delta = 0.0;
            }
            (Agg::Gauge { set, delta }, Value::Delta(d)) => match set {
                Some(s) => *s += d,
                None => *delta += d,
            },
            (Agg::Timer(s), Value::Number(v)) => s.add(v, 1.0 / p.sample_rate),
            (Agg::Histogram(h), Value::Number(v)) => h.add(v),
            (Agg::Set(s), Value::Member(m)) => {
                s.insert(key::hash(m));
            }
            (Agg::Ts(points), Value::Number(v)) => {
                let ts = p.timestamp.ok_or(DropReason::BadTimestamp)?;
                let v = if kind == KIND_TS_SUM {
                    v / p.sample_rate
                } else {
                    v
                };
                let full = points.len() >= max_ts;
                match points.iter_mut().find(|(t, _)| *t == ts) {
                    Some((_, old)) if kind == KIND_TS_SUM => *old += v,
                    Some((_, old)) => *old = v,
                    None if full => return Err(DropReason::Oversized),
                    None => points.push((ts, v)),
                }
            }
            _ => return Err(DropReason::BadValue),
        }
        Ok(())
    }

    /// Folds `other` (the same series, same window, another worker) into self.
    pub(crate) fn merge(&mut self, kind: u8, other: Agg) {
        match (self, other) {
            (Agg::Sum(a), Agg::Sum(b)) => *a += b,
            (Agg::Last(a), Agg::Last(b)) => *a = b,
            (Agg::Gauge { set, delta }, Agg::Gauge { set: s2, delta: d2 }) => match s2 {
                Some(s2) => {
                    *set = Some(s2);
                    *delta = 0.0;
                }
                None => match set {
                    Some(s) => *s += d2,
                    None => *delta += d2,
                },
            },
            (Agg::Timer(a), Agg::Timer(b)) => a.merge(&b),
            (Agg::Histogram(a), Agg::Histogram(b)) => a.merge(&b),
            (Agg::Set(a), Agg::Set(b)) => a.extend(b.iter()),
            (Agg::Ts(a), Agg::Ts(b)) => {
                for (ts, v) in b {
                    match a.iter_mut().find(|(t, _)| *t == ts) {
                        Some((_, old)) if kind == KIND_TS_SUM => *old += v,
                        Some((_, old)) => *old = v,
                        None => a.push((ts, v)),
                    }
                }
            }
            // Same key means same kind byte, so the variants always match.
            _ => {}
        }
    }
}

/// One series' window accumulation.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) hash: u64,
    pub(crate) key: Box<[u8]>,
    pub(crate) agg: Agg,
    /// Raw spellings of this series in the alias table.
    aliases: u8,
}

/// A series as a client spelled it: kind, syntax, name and the tag string
/// exactly as received, pointing at the entry it resolved to.
#[derive(Debug)]
struct Alias {
    hash: u64,
    /// `[kind][syntax][name_len u16][name][raw tags]`.
    raw: Box<[u8]>,
    entry: u32,
}

/// Raw spellings kept per series. Clients nearly always repeat one tag
/// order; a client that shuffles tags still resolves through the canonical
/// key, it just does not get a fast-path alias for every order.
const MAX_ALIASES: u8 = 4;

fn syntax_byte(s: TagSyntax) -> u8 {
    match s {
        TagSyntax::Msgpack => 0,
        TagSyntax::DogStatsd => 1,
    }
}

fn raw_hash(kind: u8, p: &Point<'_>) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = key::hash_state().build_hasher();
    h.write_u8(kind);
    h.write_u8(syntax_byte(p.tag_syntax));
    h.write_usize(p.name.len());
    h.write(p.name);
    h.write(p.tags);
    h.finish()
}

impl Alias {
    fn matches(&self, kind: u8, p: &Point<'_>) -> bool {
        let n = p.name.len();
        self.raw.len() == 4 + n + p.tags.len()
            && self.raw[0] == kind
            && self.raw[1] == syntax_byte(p.tag_syntax)
            && self.raw[2..4] == (n as u16).to_le_bytes()
            && self.raw[4..4 + n] == *p.name
            && self.raw[4 + n..] == *p.tags
    }

    fn new(hash: u64, kind: u8, p: &Point<'_>, entry: u32) -> Alias {
        let mut raw = Vec::with_capacity(4 + p.name.len() + p.tags.len());
        raw.push(kind);
        raw.push(syntax_byte(p.tag_syntax));
        raw.extend_from_slice(&(p.name.len() as u16).to_le_bytes());
        raw.extend_from_slice(p.name);
        raw.extend_from_slice(p.tags);
        Alias {
            hash,
            raw: raw.into(),
            entry,
        }
    }
}

/// A worker's storage for the open window.
///
/// # Design
///
/// Entries live in a vector; two hash tables of indices find them. The
/// canonical table is keyed by the series key (name plus sorted tags), the
/// alias table by the bytes as the client sent them. A point first tries
/// the alias table: one hash of the raw bytes, one probe, one comparison,
/// no tag splitting or sorting. Only a miss builds the canonical key
/// (`scripts/callgrind-hot-path.sh` measures the difference).
#[derive(Debug)]
pub struct Shard {
    pub(crate) entries: Vec<Entry>,
    index: HashTable<u32>,
    aliases: HashTable<Alias>,
    keys: KeyBuilder,
    config: Arc<AggregateConfig>,
}

impl Shard {
    /// An empty shard.
    pub fn new(config: Arc<AggregateConfig>) -> Shard {
        Shard {
            entries: Vec::new(),
            index: HashTable::new(),
            aliases: HashTable::new(),
            keys: KeyBuilder::default(),
            config,
        }
    }

    /// Records one parsed point.
    ///
    /// # Errors
    ///
    /// The reason the point was dropped: unsplittable tags, a name or tag
    /// that is not UTF-8 (checked only when the series is new), a field over
    /// 65535 bytes, or a `ts_store` series over its timestamp limit.
    pub fn record(&mut self, p: &Point<'_>) -> Result<(), DropReason> {
        let kind = match (p.kind, p.timestamp) {
            (Kind::Gauge, Some(_)) => Kind::TsStore as u8,
            (Kind::Count, Some(_)) => KIND_TS_SUM,
            (k, _) => k as u8,
        };
        let max_ts = self.config.max_timestamps_per_series;
        // Fast path: this exact spelling was seen before.
        let raw = raw_hash(kind, p);
        if let Some(a) = self.aliases.find(raw, |a| a.matches(kind, p)) {
            let i = a.entry as usize;
            return self.entries[i].agg.record(kind, p, max_ts);
        }
        if p.name.len() > usize::from(u16::MAX) {
            return Err(DropReason::Oversized);
        }
        let key = self.keys.build(kind, p.name, p.tags, p.tag_syntax)?;
        let hash = key::hash(key);
        let entries = &mut self.entries;
        if let Some(&i) = self.index.find(hash, |&i| *entries[i as usize].key == *key) {
            let e = &mut entries[i as usize];
            if e.aliases < MAX_ALIASES {
                e.aliases += 1;
                self.aliases
                    .insert_unique(raw, Alias::new(raw, kind, p, i), |a| a.hash);
            }
            return e.agg.record(kind, p, max_ts);
        }
        if std::str::from_utf8(p.name).is_err() || std::str::from_utf8(p.tags).is_err() {
            return Err(DropReason::InvalidUtf8);
        }
        let mut agg = Agg::new(kind, p.name, &self.config);
        agg.record(kind, p, max_ts)?;
        let i = u32::try_from(entries.len()).map_err(|_| DropReason::Oversized)?;
        entries.push(Entry {
            hash,
            key: key.into(),
            agg,
            aliases: 1,
        });
        self.index
            .insert_unique(hash, i, |&j| entries[j as usize].hash);
        self.aliases
            .insert_unique(raw, Alias::new(raw, kind, p, i), |a| a.hash);
        Ok(())
    }

    /// Number of series recorded in this window.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes every entry out, leaving the shard empty with its capacity.
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, Entry> {
        self.index.clear();
        self.aliases.clear();
        self.entries.drain(..)
    }

    /// Folds every series of `other` into this shard, leaving `other` empty
    /// with its capacity kept for reuse.
    pub fn absorb(&mut self, other: &mut Shard) {
        for mut entry in other.drain() {
            let entries = &mut self.entries;
            match self
                .index
                .find(entry.hash, |&i| entries[i as usize].key == entry.key)
            {
                Some(&i) => {
                    let mine = &mut entries[i as usize];
                    mine.agg.merge(entry.key[0], entry.agg);
                }
                None => {
                    // Merged shards are looked up by canonical key only.
                    entry.aliases = 0;
                    let hash = entry.hash;
                    let i = entries.len() as u32;
                    entries.push(entry);
                    self.index
                        .insert_unique(hash, i, |&j| entries[j as usize].hash);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::TagSyntax;

    fn point<'a>(kind: Kind, name: &'a str, tags: &'a str, value: Value<'a>) -> Point<'a> {
        Point {
            kind,
            name: name.as_bytes(),
            tags: tags.as_bytes(),
            tag_syntax: TagSyntax::Msgpack,
            value,
            sample_rate: 1.0,
            timestamp: None,
        }
    }

    #[test]
    fn the_same_series_in_any_tag_order_is_one_entry() {
        let mut s = Shard::new(Arc::default());
        s.record(&point(Kind::Counter, "m", "a=1|b=2", Value::Number(1.0)))
            .unwrap();
        s.record(&point(Kind::Counter, "m", "b=2 a=1", Value::Number(2.0)))
            .unwrap();
        assert_eq!(s.len(), 1);
        let e = &s.entries[0];
        assert_eq!(e.agg, Agg::Sum(3.0));
    }

    #[test]
    fn invalid_utf8_names_are_dropped_when_new() {
        let mut s = Shard::new(Arc::default());
        let mut p = point(Kind::Counter, "m", "", Value::Number(1.0));
        p.name = b"\xff\xfe";
        assert_eq!(s.record(&p), Err(DropReason::InvalidUtf8));
        assert!(s.is_empty());
    }

    #[test]
    fn gauge_deltas_after_a_set_apply_to_it() {
        let mut s = Shard::new(Arc::default());
        for v in [Value::Delta(5.0), Value::Number(10.0), Value::Delta(-3.0)] {
            s.record(&point(Kind::Gauge, "g", "", v)).unwrap();
        }
        let e = &s.entries[0];
        assert_eq!(
            e.agg,
            Agg::Gauge {
                set: Some(7.0),
                delta: 0.0
            }
        );
    }

    #[test]
    fn absorbing_sums_counters_and_keeps_distinct_series() {
        let mut a = Shard::new(Arc::default());
        let mut b = Shard::new(Arc::default());
        a.record(&point(Kind::Counter, "m", "", Value::Number(1.0)))
            .unwrap();
        b.record(&point(Kind::Counter, "m", "", Value::Number(2.0)))
            .unwrap();
        b.record(&point(Kind::Counter, "n", "", Value::Number(5.0)))
            .unwrap();
        a.absorb(&mut b);
        assert!(b.is_empty());
        assert_eq!(a.len(), 2);
        let total: f64 = a
            .entries
            .iter()
            .map(|e| match e.agg {
                Agg::Sum(v) => v,
                _ => 0.0,
            })
            .sum();
        assert_eq!(total, 8.0);
    }

    #[test]
    fn sampled_counts_scale_up() {
        let mut s = Shard::new(Arc::default());
        let mut p = point(Kind::Count, "c", "", Value::Number(1.0));
        p.sample_rate = 0.1;
        s.record(&p).unwrap();
        let e = &s.entries[0];
        assert_eq!(e.agg, Agg::Sum(10.0));
    }
}
