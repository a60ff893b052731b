//! What one target's scrapes remember between them: each counter's last
//! value, so that a scrape's points are the counters' deltas.
//!
//! # Mapping
//!
//! | sample | point |
//! |---|---|
//! | counter (`foo` in 0.0.4, `foo_total` in OpenMetrics) | `Kind::Count`: the increase since the last scrape |
//! | histogram `_bucket` (with `le`), `_sum`, `_count` | `Kind::Count`: each its increase, as a counter |
//! | summary `_sum`, `_count` | `Kind::Count`: each its increase |
//! | summary quantiles (`foo{quantile="0.9"}`) | `Kind::Store`: the value |
//! | gauge, untyped, unknown, info, stateset, gauge histogram | `Kind::Store`: the value |
//! | `_created` | nothing (a start time, not a measurement) |
//!
//! A counter's first scrape gives no point: there is nothing to take the
//! increase from (the value since the target started would land in one
//! window as if it all happened there). A value below the last one is a
//! reset (the target restarted): the increase is the new value, as
//! Prometheus' `rate()` takes it. A series absent from a scrape is
//! forgotten, so that the state holds what the target exposes now and no
//! more; if it comes back its next scrape is a first one again.

use std::collections::HashMap;

use sonde_metrics::input::Points;
use sonde_proto::Kind;

use crate::parse::{MetricType, Parser, Role, Sample, Summary};
use crate::Target;

/// A counter's last value and the scrape that saw it.
#[derive(Clone, Copy, Debug)]
struct Last {
    value: f64,
    scrape: u64,
}

/// One target's counters between scrapes, and the parser's buffers.
#[derive(Debug, Default)]
pub struct TargetState {
    last: HashMap<Box<[u8]>, Last>,
    scrape: u64,
    parser: Parser,
    key: Vec<u8>,
}

/// What a scrape's body gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Absorbed {
    /// The parser's count of samples and bad lines.
    pub parsed: Summary,
    /// Samples whose value cannot be a point (NaN, infinite), dropped.
    pub not_finite: usize,
}

impl TargetState {
    /// No counter seen yet.
    pub fn new() -> TargetState {
        TargetState::default()
    }

    /// Counters remembered (series of the last scrape that are counters).
    pub fn counters(&self) -> usize {
        self.last.len()
    }

    /// Parses `body`, a scrape of `target`, into `out`: a point per
    /// sample as the module docs map it, each with the sample's labels
    /// and the target's (`job`, `instance`, the configured ones). A
    /// sample's own label that has the name of one of the target's is
    /// kept as `exported_NAME`, as Prometheus does by default.
    pub fn absorb(&mut self, target: &Target, body: &[u8], out: &mut Points) -> Absorbed {
        self.scrape += 1;
        let scrape = self.scrape;
        let mut not_finite = 0;
        let last = &mut self.last;
        let key = &mut self.key;
        let parsed = self.parser.parse(body, |s| {
            let kind = match (s.family.ty, s.family.role) {
                (_, Role::Created) => return,
                (MetricType::Counter, _)
                | (MetricType::Histogram, _)
                | (MetricType::Summary, Role::Sum | Role::Count) => Kind::Count,
                _ => Kind::Store,
            };
            if !s.value.is_finite() {
                not_finite += 1;
                return;
            }
            let value = if kind == Kind::Count {
                key.clear();
                key.extend_from_slice(s.name.as_bytes());
                for (k, v) in s.labels() {
                    key.push(0xff);
                    key.extend_from_slice(k.as_bytes());
                    key.push(0xfe);
                    key.extend_from_slice(v.as_bytes());
                }
                match last.get_mut(key.as_slice()) {
                    Some(l) => {
                        let delta = if s.value >= l.value {
                            s.value - l.value
                        } else {
                            s.value
                        };
                        *l = Last {
                            value: s.value,
                            scrape,
                        };
                        delta
                    }
                    None => {
                        last.insert(
                            key.as_slice().into(),
                            Last {
                                value: s.value,
                                scrape,
                            },
                        );
                        return;
                    }
                }
            } else {
                s.value
            };
            push(out, target, kind, s, value);
        });
        self.last.retain(|_, l| l.scrape == scrape);
        Absorbed { parsed, not_finite }
    }
}

/// Adds the point of sample `s`, with the target's labels.
fn push(out: &mut Points, target: &Target, kind: Kind, s: &Sample<'_>, value: f64) {
    if s.labels().any(|(k, _)| target.has_label(k)) {
        let renamed: Vec<(String, &str)> = s
            .labels()
            .map(|(k, v)| {
                if target.has_label(k) {
                    (format!("exported_{k}"), v)
                } else {
                    (k.to_string(), v)
                }
            })
            .collect();
        out.push(
            kind,
            s.name,
            renamed
                .iter()
                .map(|(k, v)| (k.as_str(), *v))
                .chain(target.tags()),
            value,
        );
    } else {
        out.push(kind, s.name, s.labels().chain(target.tags()), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn target() -> Target {
        Target {
            url: "http://127.0.0.1:9100/metrics".into(),
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(5),
            job: "node".into(),
            instance: "127.0.0.1:9100".into(),
            labels: vec![("env".into(), "test".into())],
            max_body_size: 1 << 20,
        }
    }

    fn points(b: &Points) -> Vec<String> {
        let mut out = Vec::new();
        b.each(|p| {
            out.push(format!(
                "{:?} {} {} {:?}",
                p.kind,
                String::from_utf8_lossy(p.name),
                sonde_metrics::input::tags_text(p.tags),
                p.value
            ));
        });
        out
    }

    #[test]
    fn counters_give_deltas_from_the_second_scrape_and_a_drop_is_a_reset() {
        let t = target();
        let mut st = TargetState::new();
        let mut out = Points::new();
        let body = |v: u32| {
            format!("# TYPE reqs counter\nreqs{{code=\"200\"}} {v}\n# TYPE temp gauge\ntemp 21.5\n")
        };
        st.absorb(&t, body(100).as_bytes(), &mut out);
        assert_eq!(
            points(&out),
            ["Store temp job:node,instance:127.0.0.1:9100,env:test Number(21.5)"]
        );
        for (v, want) in [(130, 30.0), (130, 0.0), (5, 5.0), (12, 7.0)] {
            out.clear();
            st.absorb(&t, body(v).as_bytes(), &mut out);
            assert_eq!(
                points(&out)[0],
                format!("Count reqs code:200,job:node,instance:127.0.0.1:9100,env:test Number({want:?})")
            );
        }
    }

    #[test]
    fn histograms_and_summaries_map_as_documented() {
        let t = target();
        let mut st = TargetState::new();
        let mut out = Points::new();
        let body = |n: u32| {
            format!(
                "# TYPE lat histogram\nlat_bucket{{le=\"0.1\"}} {n}\nlat_bucket{{le=\"+Inf\"}} {}\nlat_sum {}\nlat_count {}\nlat_created 1.6e9\n\
# TYPE rpc summary\nrpc{{quantile=\"0.5\"}} 0.25\nrpc_sum {n}\nrpc_count {n}\n",
                n * 2,
                n * 3,
                n * 2
            )
        };
        st.absorb(&t, body(10).as_bytes(), &mut out);
        assert_eq!(
            points(&out),
            ["Store rpc quantile:0.5,job:node,instance:127.0.0.1:9100,env:test Number(0.25)"]
        );
        out.clear();
        st.absorb(&t, body(11).as_bytes(), &mut out);
        let tags = "job:node,instance:127.0.0.1:9100,env:test";
        assert_eq!(
            points(&out),
            [
                format!("Count lat_bucket le:0.1,{tags} Number(1.0)"),
                format!("Count lat_bucket le:+Inf,{tags} Number(2.0)"),
                format!("Count lat_sum {tags} Number(3.0)"),
                format!("Count lat_count {tags} Number(2.0)"),
                format!("Store rpc quantile:0.5,{tags} Number(0.25)"),
                format!("Count rpc_sum {tags} Number(1.0)"),
                format!("Count rpc_count {tags} Number(1.0)"),
            ]
        );
    }

    #[test]
    fn a_series_gone_from_a_scrape_is_forgotten_and_labels_that_clash_are_renamed() {
        let t = target();
        let mut st = TargetState::new();
        let mut out = Points::new();
        st.absorb(
            &t,
            b"# TYPE a counter\na 1\n# TYPE b counter\nb 1\n",
            &mut out,
        );
        assert_eq!(st.counters(), 2);
        st.absorb(&t, b"# TYPE a counter\na 2\n", &mut out);
        assert_eq!(st.counters(), 1);
        out.clear();
        let r = st.absorb(&t, b"g{job=\"other\",x=\"1\"} 3\nbad NaN\n", &mut out);
        assert_eq!(r.not_finite, 1);
        assert_eq!(
            points(&out),
            ["Store g exported_job:other,x:1,job:node,instance:127.0.0.1:9100,env:test Number(3.0)"]
        );
    }
}
