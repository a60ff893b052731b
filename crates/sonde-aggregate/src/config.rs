//! What aggregation needs to know from the configuration.

use std::sync::Arc;
use std::time::Duration;

/// The default histogram bucket bounds: Prometheus' defaults stretched to
/// cover millisecond latencies as well as seconds.
pub const DEFAULT_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
    1000.0,
];

/// Bucket upper bounds of a histogram, with their `le` label values
/// rendered once (the last label is `+Inf`).
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds {
    /// Strictly increasing finite upper bounds.
    pub values: Arc<[f64]>,
    /// One label per bound plus `+Inf`.
    pub labels: Arc<[Arc<str>]>,
}

impl Bounds {
    /// Bounds from a list that the config validation has already checked to
    /// be finite and strictly increasing.
    pub fn new(values: &[f64]) -> Bounds {
        let labels: Vec<Arc<str>> = values
            .iter()
            .map(|v| Arc::from(format_number(*v).as_str()))
            .chain(std::iter::once(Arc::from("+Inf")))
            .collect();
        Bounds {
            values: values.into(),
            labels: labels.into(),
        }
    }
}

/// Formats a number the shortest way that reads back exactly, without a
/// trailing `.0` on integers (`10`, `0.25`, `1e-7`).
pub fn format_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Histogram bounds per metric-name prefix.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramBuckets {
    default: Bounds,
    /// Longest prefix first, so the first match wins.
    overrides: Vec<(Box<[u8]>, Bounds)>,
}

impl Default for HistogramBuckets {
    fn default() -> Self {
        HistogramBuckets::new(Bounds::new(&DEFAULT_BUCKETS), Vec::new())
    }
}

impl HistogramBuckets {
    /// Bounds for every histogram, overridden for names starting with a prefix.
    pub fn new(default: Bounds, overrides: Vec<(String, Bounds)>) -> HistogramBuckets {
        let mut overrides: Vec<(Box<[u8]>, Bounds)> = overrides
            .into_iter()
            .map(|(p, b)| (p.into_bytes().into_boxed_slice(), b))
            .collect();
        overrides.sort_by_key(|o| std::cmp::Reverse(o.0.len()));
        HistogramBuckets { default, overrides }
    }

    /// The bounds for a metric name: the longest matching prefix, else the default.
    pub fn for_name(&self, name: &[u8]) -> &Bounds {
        self.overrides
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
            .map_or(&self.default, |(_, b)| b)
    }
}

/// Aggregation settings shared by every worker and the flusher.
#[derive(Clone, Debug, PartialEq)]
pub struct AggregateConfig {
    /// The window length. Default 30 s.
    pub interval: Duration,
    /// Series that saw no data for this many windows in a row are forgotten.
    /// Default 5.
    pub expire_windows: u32,
    /// Histogram bucket bounds.
    pub histograms: HistogramBuckets,
    /// The most distinct timestamps one `ts_store` series keeps per window;
    /// points at further timestamps are dropped
    /// ([`RecordError::TimestampsFull`](crate::RecordError::TimestampsFull)).
    /// Default 1024.
    pub max_timestamps_per_series: usize,
    /// Distinct members one StatsD set series keeps per window; members
    /// beyond it are dropped
    /// ([`RecordError::SetFull`](crate::RecordError::SetFull)), so that one
    /// set cannot grow without bound (8 bytes and a little hash table each).
    pub max_set_members: usize,
    /// The most live series all worker shards together hold (a series
    /// received by two workers counts twice: it is stored twice). Points
    /// that would create a series beyond it are dropped
    /// ([`RecordError::SeriesLimit`](crate::RecordError::SeriesLimit));
    /// see [`SeriesCount`](crate::shard::SeriesCount). Default
    /// [`DEFAULT_MAX_SERIES`].
    pub max_series: usize,
    /// The most live series one worker shard holds for one metric name,
    /// or `None` for no such limit; points that would create one more are
    /// dropped
    /// ([`RecordError::MetricSeriesLimit`](crate::RecordError::MetricSeriesLimit)).
    /// Default `None`.
    pub max_series_per_metric: Option<u32>,
    /// The longest name plus tag string (as sent) a new series may have;
    /// points of longer ones are dropped
    /// ([`RecordError::KeyTooLong`](crate::RecordError::KeyTooLong)).
    /// Together with `max_series` it bounds the memory keys can take.
    /// Default [`DEFAULT_MAX_KEY_BYTES`].
    pub max_key_bytes: usize,
}

/// The default of [`AggregateConfig::max_key_bytes`]: 4 KiB, ten times a
/// long real key (a name and ten tags of 40 bytes), so only garbage or an
/// unbounded tag value (a URL, a stack trace) reaches it.
pub const DEFAULT_MAX_KEY_BYTES: usize = 4096;

/// The default of [`AggregateConfig::max_series`]: 250,000 series, about
/// 90 MiB peak RSS with three tags a series (docs/BENCHMARKS.md, "Current
/// figures against the peers", from `scripts/peak-rss.sh`), 25 times what
/// a busy host usually holds and well below what would hurt the host.
pub const DEFAULT_MAX_SERIES: usize = 250_000;

impl Default for AggregateConfig {
    fn default() -> Self {
        AggregateConfig {
            interval: Duration::from_secs(30),
            expire_windows: 5,
            histograms: HistogramBuckets::default(),
            max_timestamps_per_series: 1024,
            max_set_members: 65_536,
            max_series: DEFAULT_MAX_SERIES,
            max_series_per_metric: None,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_matching_prefix_chooses_the_bounds() {
        let h = HistogramBuckets::new(
            Bounds::new(&[1.0]),
            vec![
                ("web.".to_string(), Bounds::new(&[2.0])),
                ("web.api.".to_string(), Bounds::new(&[3.0])),
            ],
        );
        assert_eq!(&*h.for_name(b"web.api.latency").values, &[3.0]);
        assert_eq!(&*h.for_name(b"web.page").values, &[2.0]);
        assert_eq!(&*h.for_name(b"db.query").values, &[1.0]);
    }

    #[test]
    fn labels_are_short_and_end_with_inf() {
        let b = Bounds::new(&[0.005, 10.0, 2.5]);
        let labels: Vec<&str> = b.labels.iter().map(|l| &**l).collect();
        assert_eq!(labels, ["0.005", "10", "2.5", "+Inf"]);
    }
}
