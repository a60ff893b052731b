//! Output points: what a flush hands to every sink.
//!
//! # Design
//!
//! A window of 100k series is about half a million points, so their
//! layout is most of the flush's memory. A [`Batch`] stores them by series:
//! one 32-byte group per series (its key, shared with the aggregator, and a
//! timestamp) and its values in one `f64` array, 8 bytes a point, where a
//! point struct with its own name and tags would take 48 and a printable
//! copy of every name and tag. Sinks read [`OutPoint`] views, decoded from
//! the key as they go.

use std::sync::Arc;

use crate::key;

/// A series' identity, borrowed from its key: the name and the tags,
/// sorted by key then value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesRef<'a> {
    name: &'a str,
    /// The tag section of the key: `[key_len u16][key][value_len u16][value]`...
    tags: &'a [u8],
}

impl<'a> SeriesRef<'a> {
    /// The series of a key built by [`crate::key::KeyBuilder`], or `None`
    /// when the bytes are not such a key or the name is not UTF-8.
    /// Bytes after the key (a shard's stored spelling) are ignored.
    pub fn from_key(key: &'a [u8]) -> Option<SeriesRef<'a>> {
        let (name, tags) = key::split_name(key::canonical(key))?;
        let name = std::str::from_utf8(name).ok()?;
        Some(SeriesRef { name, tags })
    }

    /// The metric name, without suffix.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The tags, sorted by key, then value.
    pub fn tags(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut rest = self.tags;
        std::iter::from_fn(move || {
            let k = key::take_field(&mut rest)?;
            let v = key::take_field(&mut rest)?;
            // Keys are UTF-8 checked when their series is created.
            Some((
                std::str::from_utf8(k).unwrap_or_default(),
                std::str::from_utf8(v).unwrap_or_default(),
            ))
        })
    }
}

/// The suffix appended to a series name for one of its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suffix {
    /// The name itself.
    None,
    /// `.rate` (meters).
    Rate,
    /// `.min`.
    Min,
    /// `.max`.
    Max,
    /// `.avg`.
    Avg,
    /// `.sum` (timers and histograms).
    Sum,
    /// `.counter` (a timer's sample count).
    Counter,
    /// `.pct50`.
    Pct50,
    /// `.pct90`.
    Pct90,
    /// `.pct95`.
    Pct95,
    /// `.pct99`.
    Pct99,
    /// `.pct999`.
    Pct999,
    /// `.bucket` (a histogram bucket; the point carries an `le` tag).
    Bucket,
    /// `.count` (a histogram's sample count).
    Count,
}

impl Suffix {
    /// The text appended to the name, with its dot (empty for [`Suffix::None`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Suffix::None => "",
            Suffix::Rate => ".rate",
            Suffix::Min => ".min",
            Suffix::Max => ".max",
            Suffix::Avg => ".avg",
            Suffix::Sum => ".sum",
            Suffix::Counter => ".counter",
            Suffix::Pct50 => ".pct50",
            Suffix::Pct90 => ".pct90",
            Suffix::Pct95 => ".pct95",
            Suffix::Pct99 => ".pct99",
            Suffix::Pct999 => ".pct999",
            Suffix::Bucket => ".bucket",
            Suffix::Count => ".count",
        }
    }
}

/// One output value of one series in one window, borrowed from a [`Batch`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutPoint<'a> {
    /// The series.
    pub series: SeriesRef<'a>,
    /// Which output of the series this is.
    pub suffix: Suffix,
    /// The `le` tag of a histogram bucket.
    pub le: Option<&'a str>,
    /// The value; always finite.
    pub value: f64,
    /// Unix seconds: the window start, or the client's for `ts_store`.
    pub timestamp: i64,
    /// True for running totals that only grow (counters, meter totals,
    /// histogram buckets), so backends with types can say so.
    pub monotonic: bool,
}

impl OutPoint<'_> {
    /// Appends the full name (series name plus suffix) to `out`.
    pub fn write_name(&self, out: &mut String) {
        out.push_str(self.series.name());
        out.push_str(self.suffix.as_str());
    }

    /// The full name as a new string.
    pub fn name(&self) -> String {
        let mut s = String::with_capacity(self.series.name().len() + 8);
        self.write_name(&mut s);
        s
    }

    /// Calls `f` for every tag, sorted by key, with `le` in its place.
    pub fn for_each_tag(&self, mut f: impl FnMut(&str, &str)) {
        let mut le = self.le;
        for (k, v) in self.series.tags() {
            if let Some(l) = le {
                if "le" < k {
                    f("le", l);
                    le = None;
                }
            }
            f(k, v);
        }
        if let Some(l) = le {
            f("le", l);
        }
    }
}

/// Which outputs a group of values stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One value named after the series.
    Plain,
    /// One running total named after the series (monotonic).
    Total,
    /// A meter's `.rate`.
    Rate,
    /// A timer's ten outputs, in [`TIMER_SUFFIXES`] order.
    Timer,
    /// A histogram: one cumulative count per bucket label, then `.sum` and
    /// `.count`, all monotonic.
    Histogram,
}

/// The outputs of a timer, in the order [`Batch::push`] expects them.
pub const TIMER_SUFFIXES: [Suffix; 10] = [
    Suffix::Min,
    Suffix::Max,
    Suffix::Avg,
    Suffix::Sum,
    Suffix::Counter,
    Suffix::Pct50,
    Suffix::Pct90,
    Suffix::Pct95,
    Suffix::Pct99,
    Suffix::Pct999,
];

/// One series' outputs at one timestamp.
#[derive(Clone, Debug, PartialEq)]
struct Group {
    key: Arc<[u8]>,
    timestamp: i64,
    /// Index of the first value in [`Batch::values`].
    first: u32,
    shape: Shape,
    /// Index in [`Batch::labels`] (histograms only).
    labels: u16,
}

/// Everything one window produced, grouped by series.
#[derive(Debug, Default, PartialEq)]
pub struct Batch {
    /// Unix seconds of the window start.
    pub window_start: i64,
    groups: Vec<Group>,
    /// Every value of every group; NaN marks a point dropped as non-finite.
    values: Vec<f64>,
    /// Histogram bucket labels, one entry per distinct set of bounds.
    labels: Vec<Arc<[Arc<str>]>>,
    points: usize,
    non_finite: usize,
}

impl Batch {
    /// An empty batch for the window starting at `window_start`.
    pub fn new(window_start: i64) -> Batch {
        Batch {
            window_start,
            ..Batch::default()
        }
    }

    /// An empty batch with room for `groups` series and `values` values,
    /// so that a window's output grows without reallocating: a doubling
    /// copy of the value array at 250k series holds the old and the new
    /// array, ~16 MiB, at the flush's peak.
    pub fn with_capacity(window_start: i64, groups: usize, values: usize) -> Batch {
        Batch {
            window_start,
            groups: Vec::with_capacity(groups),
            values: Vec::with_capacity(values),
            ..Batch::default()
        }
    }

    /// The number of groups (series) and values the batch holds, for
    /// sizing the next one with [`Batch::with_capacity`].
    pub fn sizes(&self) -> (usize, usize) {
        (self.groups.len(), self.values.len())
    }

    /// Adds the outputs of one series: `values` in the order of `shape`
    /// (for [`Shape::Histogram`], one per label of `labels`, then sum and
    /// count). Non-finite values are dropped and counted.
    ///
    /// # Panics
    ///
    /// When the number of values does not match the shape.
    pub fn push(
        &mut self,
        key: &Arc<[u8]>,
        shape: Shape,
        labels: Option<&Arc<[Arc<str>]>>,
        timestamp: i64,
        values: impl IntoIterator<Item = f64>,
    ) {
        let first = self.values.len();
        for v in values {
            if v.is_finite() {
                self.points += 1;
                self.values.push(v);
            } else {
                self.non_finite += 1;
                self.values.push(f64::NAN);
            }
        }
        let labels = match (shape, labels) {
            (Shape::Histogram, Some(l)) => {
                if !self.labels.last().is_some_and(|last| Arc::ptr_eq(last, l)) {
                    self.labels.push(Arc::clone(l));
                }
                self.labels.len() - 1
            }
            _ => 0,
        };
        let group = Group {
            key: Arc::clone(key),
            timestamp,
            first: first as u32,
            shape,
            labels: labels as u16,
        };
        assert_eq!(
            self.group_len(&group),
            self.values.len() - first,
            "values do not match the shape"
        );
        self.groups.push(group);
    }

    fn group_len(&self, g: &Group) -> usize {
        match g.shape {
            Shape::Plain | Shape::Total | Shape::Rate => 1,
            Shape::Timer => TIMER_SUFFIXES.len(),
            Shape::Histogram => self.labels[usize::from(g.labels)].len() + 2,
        }
    }

    /// Number of points (non-finite values excluded).
    pub fn len(&self) -> usize {
        self.points
    }

    /// True when the window produced no point.
    pub fn is_empty(&self) -> bool {
        self.points == 0
    }

    /// Values dropped because they were not finite.
    pub fn non_finite(&self) -> usize {
        self.non_finite
    }

    /// Every point, grouped by series.
    pub fn points(&self) -> impl Iterator<Item = OutPoint<'_>> + '_ {
        self.groups.iter().flat_map(move |g| {
            let n = self.group_len(g);
            let first = g.first as usize;
            let series = SeriesRef::from_key(&g.key).unwrap_or(SeriesRef {
                name: "",
                tags: &[],
            });
            let labels: &[Arc<str>] = match g.shape {
                Shape::Histogram => &self.labels[usize::from(g.labels)],
                _ => &[],
            };
            self.values[first..first + n]
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_nan())
                .map(move |(j, &value)| {
                    let (suffix, le, monotonic) = match g.shape {
                        Shape::Plain => (Suffix::None, None, false),
                        Shape::Total => (Suffix::None, None, true),
                        Shape::Rate => (Suffix::Rate, None, false),
                        Shape::Timer => (TIMER_SUFFIXES[j], None, false),
                        Shape::Histogram if j < labels.len() => {
                            (Suffix::Bucket, Some(&*labels[j]), true)
                        }
                        Shape::Histogram if j == labels.len() => (Suffix::Sum, None, true),
                        Shape::Histogram => (Suffix::Count, None, true),
                    };
                    OutPoint {
                        series,
                        suffix,
                        le,
                        value,
                        timestamp: g.timestamp,
                        monotonic,
                    }
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, tags: &str) -> Arc<[u8]> {
        let mut b = key::KeyBuilder::default();
        b.build(
            0,
            name.as_bytes(),
            tags.as_bytes(),
            sonde_proto::TagSyntax::Msgpack,
        )
        .unwrap()
        .into()
    }

    #[test]
    fn le_is_listed_in_sorted_position() {
        let mut batch = Batch::new(0);
        let labels: Arc<[Arc<str>]> = vec![Arc::from("2.5"), Arc::from("+Inf")].into();
        batch.push(
            &key("h", "z=1|dc=x"),
            Shape::Histogram,
            Some(&labels),
            0,
            [1.0, 2.0, 3.0, 2.0],
        );
        let p = batch.points().next().unwrap();
        let mut seen = Vec::new();
        p.for_each_tag(|k, v| seen.push(format!("{k}={v}")));
        assert_eq!(seen, ["dc=x", "le=2.5", "z=1"]);
        assert_eq!(p.name(), "h.bucket");
    }

    #[test]
    fn groups_expand_to_named_points_and_skip_non_finite_values() {
        let mut batch = Batch::new(10);
        let labels: Arc<[Arc<str>]> = vec![Arc::from("1"), Arc::from("+Inf")].into();
        let t = key("t", "host=a");
        batch.push(&t, Shape::Timer, None, 10, (1..=10).map(f64::from));
        batch.push(&key("c", ""), Shape::Total, None, 10, [f64::INFINITY]);
        batch.push(&key("m", ""), Shape::Rate, None, 10, [0.5]);
        batch.push(
            &key("h", ""),
            Shape::Histogram,
            Some(&labels),
            10,
            [1.0, 4.0, 9.5, 4.0],
        );
        batch.push(&key("s", ""), Shape::Plain, None, 7, [2.0]);
        assert_eq!((batch.len(), batch.non_finite()), (16, 1));
        let got: Vec<(String, Option<&str>, f64, i64, bool)> = batch
            .points()
            .map(|p| (p.name(), p.le, p.value, p.timestamp, p.monotonic))
            .collect();
        assert_eq!(got.len(), 16);
        assert_eq!(got[0], ("t.min".into(), None, 1.0, 10, false));
        assert_eq!(got[9], ("t.pct999".into(), None, 10.0, 10, false));
        assert_eq!(got[10], ("m.rate".into(), None, 0.5, 10, false));
        assert_eq!(got[11], ("h.bucket".into(), Some("1"), 1.0, 10, true));
        assert_eq!(got[12], ("h.bucket".into(), Some("+Inf"), 4.0, 10, true));
        assert_eq!(got[13], ("h.sum".into(), None, 9.5, 10, true));
        assert_eq!(got[14], ("h.count".into(), None, 4.0, 10, true));
        assert_eq!(got[15], ("s".into(), None, 2.0, 7, false));
        let tags: Vec<_> = batch.points().next().unwrap().series.tags().collect();
        assert_eq!(tags, [("host", "a")]);
    }
}
