//! The series limits: [`AggregateConfig::max_series`] over every shard
//! ([`SeriesCount`]), and [`AggregateConfig::max_series_per_metric`] within
//! one.

use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::HashTable;

use crate::config::AggregateConfig;
use crate::error::RecordError;
use crate::key;

/// The live series of every worker shard of an agent, against which
/// [`AggregateConfig::max_series`] is enforced.
///
/// # Design
///
/// One atomic shared by all shards, touched only when a shard creates or
/// frees a series, never for a point of a series it already has: the hot
/// path stays free of shared writes, and creating a series (a key
/// allocation, three hash-table inserts) costs far more than one
/// `fetch_add`. A point that would create a series over the limit only
/// reads the counter, so a flood of new series keeps the cache line shared
/// instead of bouncing it between workers. The limit is exact: a shard
/// that raced past it gives its increment back.
///
/// Per-shard budgets (`max_series / workers` each) would need no shared
/// write at all, but would refuse series on a busy worker while an idle
/// one has room; the atomic costs less than a series' key allocation.
#[derive(Debug, Default)]
pub struct SeriesCount(AtomicUsize);

impl SeriesCount {
    /// Series currently held by the shards sharing this count.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Takes one series from the budget, unless `max` are live.
    fn try_add(&self, max: usize) -> bool {
        if self.0.load(Ordering::Relaxed) >= max {
            return false;
        }
        if self.0.fetch_add(1, Ordering::Relaxed) >= max {
            self.0.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub(crate) fn sub(&self, n: usize) {
        if n != 0 {
            self.0.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// Live series per metric name in one shard, by the name's hash (a 64-bit
/// collision would make two names share a budget; at most a few thousand
/// names live in a shard, so it does not happen in practice). Kept only
/// when [`AggregateConfig::max_series_per_metric`] is set: 16 bytes and a
/// control byte per distinct name.
#[derive(Debug, Default)]
pub(crate) struct PerMetric(HashTable<(u64, u32)>);

impl PerMetric {
    fn count(&self, hash: u64) -> u32 {
        self.0.find(hash, |e| e.0 == hash).map_or(0, |e| e.1)
    }

    fn add(&mut self, hash: u64) {
        match self.0.find_mut(hash, |e| e.0 == hash) {
            Some(e) => e.1 += 1,
            None => {
                self.0.insert_unique(hash, (hash, 1), |e| e.0);
            }
        }
    }

    fn remove(&mut self, hash: u64) {
        if let Ok(mut e) = self.0.find_entry(hash, |e| e.0 == hash) {
            e.get_mut().1 -= 1;
            if e.get().1 == 0 {
                e.remove();
            }
        }
    }
}

/// Admits a new series of metric `name` under both limits, counting it.
pub(crate) fn admit(
    live: &SeriesCount,
    per_metric: &mut PerMetric,
    config: &AggregateConfig,
    name: &[u8],
) -> Result<(), RecordError> {
    let Some(max) = config.max_series_per_metric else {
        return match live.try_add(config.max_series) {
            true => Ok(()),
            false => Err(RecordError::SeriesLimit),
        };
    };
    let hash = key::hash(name);
    if per_metric.count(hash) >= max {
        return Err(RecordError::MetricSeriesLimit);
    }
    if !live.try_add(config.max_series) {
        return Err(RecordError::SeriesLimit);
    }
    per_metric.add(hash);
    Ok(())
}

/// Gives a series of metric `name` back to both limits.
pub(crate) fn release(
    live: &SeriesCount,
    per_metric: &mut PerMetric,
    config: &AggregateConfig,
    name: &[u8],
) {
    live.sub(1);
    if config.max_series_per_metric.is_some() {
        per_metric.remove(key::hash(name));
    }
}
