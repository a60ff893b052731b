//! Output points: what a flush hands to every sink.

use std::sync::Arc;

/// A series' identity in printable form, shared by all points of the
/// series (a timer's ten points clone one `Arc`, they do not copy strings).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SeriesId {
    /// The metric name, without suffix.
    pub name: Box<str>,
    /// Tags sorted by key, then value.
    pub tags: Box<[(Box<str>, Box<str>)]>,
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

/// One output value of one series in one window.
#[derive(Clone, Debug, PartialEq)]
pub struct OutPoint {
    /// The series.
    pub series: Arc<SeriesId>,
    /// Which output of the series this is.
    pub suffix: Suffix,
    /// The `le` tag of a histogram bucket.
    pub le: Option<Arc<str>>,
    /// The value; always finite.
    pub value: f64,
    /// Unix seconds: the window start, or the client's for `ts_store`.
    pub timestamp: i64,
    /// True for running totals that only grow (counters, meter totals,
    /// histogram buckets), so backends with types can say so.
    pub monotonic: bool,
}

impl OutPoint {
    /// Appends the full name (series name plus suffix) to `out`.
    pub fn write_name(&self, out: &mut String) {
        out.push_str(&self.series.name);
        out.push_str(self.suffix.as_str());
    }

    /// The full name as a new string.
    pub fn name(&self) -> String {
        let mut s = String::with_capacity(self.series.name.len() + 8);
        self.write_name(&mut s);
        s
    }

    /// Calls `f` for every tag, sorted by key, with `le` in its place.
    pub fn for_each_tag(&self, mut f: impl FnMut(&str, &str)) {
        let mut le = self.le.as_deref();
        for (k, v) in self.series.tags.iter() {
            if let Some(l) = le {
                if "le" < &**k {
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

/// Everything one window produced.
#[derive(Debug, Default, PartialEq)]
pub struct Batch {
    /// Unix seconds of the window start.
    pub window_start: i64,
    /// The points, grouped by series.
    pub points: Vec<OutPoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_is_listed_in_sorted_position() {
        let series = Arc::new(SeriesId {
            name: "h".into(),
            tags: vec![("dc".into(), "x".into()), ("z".into(), "1".into())].into(),
        });
        let p = OutPoint {
            series,
            suffix: Suffix::Bucket,
            le: Some("2.5".into()),
            value: 1.0,
            timestamp: 0,
            monotonic: true,
        };
        let mut seen = Vec::new();
        p.for_each_tag(|k, v| seen.push(format!("{k}={v}")));
        assert_eq!(seen, ["dc=x", "le=2.5", "z=1"]);
        assert_eq!(p.name(), "h.bucket");
    }
}
