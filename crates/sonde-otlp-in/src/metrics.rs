//! OTLP metrics onto sonde's kinds.
//!
//! | OTLP | sonde |
//! |---|---|
//! | Sum, monotonic, delta | `NAME` as [`Kind::Count`] |
//! | Sum, monotonic, cumulative | `NAME` as [`Kind::Count`] of the change since the series' previous point |
//! | Sum, not monotonic, cumulative | `NAME` as [`Kind::Store`] |
//! | Sum, not monotonic, delta | `NAME` as [`Kind::Count`] (the window's sum of changes) |
//! | Gauge | `NAME` as [`Kind::Store`] |
//! | Histogram | `NAME.bucket` with `le` per bound and `+Inf` (observations at or below it), `NAME.sum`, `NAME.count` as [`Kind::Count`]; `NAME.min`, `NAME.max` as [`Kind::Store`] when sent |
//! | ExponentialHistogram | `NAME.sum`, `NAME.count` as [`Kind::Count`]; `NAME.min`, `NAME.max` as [`Kind::Store`]; the buckets are not kept |
//! | Summary | `NAME` with a `quantile` tag per quantile as [`Kind::Store`]; `NAME.sum`, `NAME.count` as [`Kind::Count`] of the change (a summary is cumulative) |
//!
//! # Cumulative series
//!
//! A cumulative point carries the total since its `start_time_unix_nano`;
//! sonde's counts are per window, so the [`Mapper`] keeps each series'
//! previous point (keyed by a hash of every resource attribute, the scope,
//! the name and the point's attributes) and sends the difference. The
//! first point of a series counts in full when its start time is after
//! the agent started (the process began counting while sonde listened),
//! else it only sets the baseline. A start time that changes, or a value
//! (a histogram's count) that goes down, is a reset: the new point counts
//! in full. A point no newer than the previous one (a client's retry of a
//! request already taken) counts nothing. At most `max_series` series are
//! kept; series not seen for [`STATE_IDLE`] are let go when the table is
//! full, and a new series that finds it full still is refused (counted in
//! the response's partial success).
//!
//! The state changes only once the batch is queued ([`Mapper::commit`]):
//! a request refused because the worker is behind leaves it as it was, so
//! the client's retry computes the same differences.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, DataPointFlags,
};
use sonde_metrics::input::Points;
use sonde_proto::Kind;

/// How long a cumulative series may go unseen before its state may be let
/// go to make room.
pub const STATE_IDLE: Duration = Duration::from_secs(600);

/// The resource attributes kept as tags unless the config says otherwise.
pub const DEFAULT_RESOURCE_ATTRIBUTES: &[&str] = &[
    "service.name",
    "service.namespace",
    "service.version",
    "deployment.environment",
    "deployment.environment.name",
    "host.name",
    "k8s.namespace.name",
    "k8s.pod.name",
    "k8s.container.name",
];

/// The previous point of a cumulative series.
#[derive(Debug, Clone)]
struct Prev {
    start: u64,
    time: u64,
    /// The totals: a sum's value, or a histogram's bucket counts then its
    /// sum and count.
    values: Vec<f64>,
    seen: Instant,
}

/// What one request became.
#[derive(Debug, Default)]
pub struct Mapped {
    /// The points to record.
    pub points: Points,
    /// Data points refused (a value that is not a number, the cumulative
    /// state full).
    pub rejected: u64,
    /// Of those, refused because the cumulative state was full.
    pub state_full: u64,
    /// Why, for the response's partial success.
    pub message: String,
    /// Data points in the request.
    pub data_points: u64,
    staged: HashMap<u64, Prev>,
}

/// Maps requests to points, keeping the state of cumulative series.
#[derive(Debug)]
pub struct Mapper {
    keep: Vec<String>,
    state: HashMap<u64, Prev>,
    max_series: usize,
    /// Nanoseconds since the epoch at which the agent began listening.
    since: u64,
    hasher: foldhash::fast::FixedState,
    scratch: Attrs,
}

/// Attribute keys and values rendered as text, in one buffer.
#[derive(Debug, Default)]
struct Attrs {
    buf: String,
    spans: Vec<(usize, usize, usize)>,
}

impl Attrs {
    fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
    }

    fn push(&mut self, key: &str, value: Option<&AnyValue>) {
        let start = self.buf.len();
        self.buf.push_str(key);
        let mid = self.buf.len();
        render(&mut self.buf, value);
        self.spans.push((start, mid, self.buf.len()));
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.spans
            .iter()
            .map(|&(a, b, c)| (&self.buf[a..b], &self.buf[b..c]))
    }
}

/// An attribute value as a tag value: strings as they are, numbers and
/// booleans as text, bytes in hex, arrays and maps in a JSON-like form.
pub fn render(out: &mut String, value: Option<&AnyValue>) {
    let Some(v) = value.and_then(|v| v.value.as_ref()) else {
        return;
    };
    match v {
        any_value::Value::StringValue(s) => out.push_str(s),
        any_value::Value::BoolValue(b) => out.push_str(if *b { "true" } else { "false" }),
        any_value::Value::IntValue(i) => {
            let _ = write!(out, "{i}");
        }
        any_value::Value::DoubleValue(d) => {
            let _ = write!(out, "{d}");
        }
        any_value::Value::BytesValue(b) => {
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
        }
        any_value::Value::ArrayValue(a) => {
            out.push('[');
            for (i, v) in a.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(out, Some(v));
            }
            out.push(']');
        }
        any_value::Value::KvlistValue(l) => {
            out.push('{');
            for (i, kv) in l.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&kv.key);
                out.push('=');
                render(out, kv.value.as_ref());
            }
            out.push('}');
        }
        // An index into a profile's string table: no meaning outside one.
        any_value::Value::StringValueStrindex(_) => {}
    }
}

fn hash_attrs(h: &mut impl Hasher, attrs: &[KeyValue], scratch: &mut String) {
    for kv in attrs {
        h.write(kv.key.as_bytes());
        h.write_u8(0xff);
        scratch.clear();
        render(scratch, kv.value.as_ref());
        h.write(scratch.as_bytes());
        h.write_u8(0xfe);
    }
}

fn bound_text(b: f64) -> String {
    if b == f64::INFINITY {
        "+Inf".to_string()
    } else {
        format!("{b}")
    }
}

impl Mapper {
    /// A mapper keeping the resource attributes `keep` as tags and the
    /// state of at most `max_series` cumulative series; `since` is when
    /// the agent began listening (nanoseconds since the epoch).
    pub fn new(keep: Vec<String>, max_series: usize, since: u64) -> Mapper {
        Mapper {
            keep,
            state: HashMap::new(),
            max_series,
            since,
            hasher: foldhash::fast::FixedState::with_seed(0x005e_ed0f_071b),
            scratch: Attrs::default(),
        }
    }

    /// Cumulative series whose state is kept.
    pub fn series(&self) -> usize {
        self.state.len()
    }

    /// The points of `req`; the state is not changed until
    /// [`Mapper::commit`].
    pub fn map(&mut self, req: &ExportMetricsServiceRequest) -> Mapped {
        let mut out = Mapped::default();
        let mut resource = Attrs::default();
        let mut text = String::new();
        let now = Instant::now();
        for rm in &req.resource_metrics {
            resource.clear();
            let mut rh = self.hasher.build_hasher();
            if let Some(r) = &rm.resource {
                for kv in &r.attributes {
                    if self.keep.contains(&kv.key) {
                        resource.push(&kv.key, kv.value.as_ref());
                    }
                }
                hash_attrs(&mut rh, &r.attributes, &mut text);
            }
            let resource_hash = rh.finish();
            for sm in &rm.scope_metrics {
                let mut sh = self.hasher.build_hasher();
                sh.write_u64(resource_hash);
                if let Some(s) = &sm.scope {
                    sh.write(s.name.as_bytes());
                    sh.write_u8(0xff);
                    sh.write(s.version.as_bytes());
                }
                let scope_hash = sh.finish();
                for m in &sm.metrics {
                    let Some(data) = &m.data else { continue };
                    let mut cx = Cx {
                        mapper: self,
                        out: &mut out,
                        resource: &resource,
                        scope_hash,
                        name: &m.name,
                        now,
                        text: &mut text,
                    };
                    cx.metric(data);
                }
            }
        }
        out
    }

    /// Applies the state changes of a mapped request that was queued.
    pub fn commit(&mut self, mapped: &mut Mapped) {
        if mapped.staged.is_empty() {
            return;
        }
        let new = mapped
            .staged
            .keys()
            .filter(|k| !self.state.contains_key(k))
            .count();
        if self.state.len() + new > self.max_series {
            let now = Instant::now();
            self.state
                .retain(|_, p| now.duration_since(p.seen) < STATE_IDLE);
        }
        self.state.extend(mapped.staged.drain());
    }
}

/// One metric's context while mapping.
struct Cx<'a> {
    mapper: &'a mut Mapper,
    out: &'a mut Mapped,
    resource: &'a Attrs,
    scope_hash: u64,
    name: &'a str,
    now: Instant,
    text: &'a mut String,
}

const NO_RECORDED_VALUE: u32 = DataPointFlags::NoRecordedValueMask as u32;
const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;

impl Cx<'_> {
    fn metric(&mut self, data: &Data) {
        match data {
            Data::Gauge(g) => {
                for p in &g.data_points {
                    self.out.data_points += 1;
                    if p.flags & NO_RECORDED_VALUE != 0 {
                        continue;
                    }
                    self.attrs(&p.attributes);
                    self.push(Kind::Store, "", None, number(p.value.as_ref()));
                }
            }
            Data::Sum(s) => {
                let cumulative = s.aggregation_temporality == CUMULATIVE;
                for p in &s.data_points {
                    self.out.data_points += 1;
                    if p.flags & NO_RECORDED_VALUE != 0 {
                        continue;
                    }
                    let v = number(p.value.as_ref());
                    self.attrs(&p.attributes);
                    match (s.is_monotonic, cumulative) {
                        (true, true) => {
                            let key = self.key(&p.attributes);
                            if let Some(d) =
                                self.delta(key, p.start_time_unix_nano, p.time_unix_nano, &[v])
                            {
                                self.push(Kind::Count, "", None, d[0]);
                            }
                        }
                        (false, true) => self.push(Kind::Store, "", None, v),
                        (_, false) => self.push(Kind::Count, "", None, v),
                    }
                }
            }
            Data::Histogram(h) => {
                let cumulative = h.aggregation_temporality == CUMULATIVE;
                for p in &h.data_points {
                    self.out.data_points += 1;
                    if p.flags & NO_RECORDED_VALUE != 0 {
                        continue;
                    }
                    self.attrs(&p.attributes);
                    // Counts at or below each bound, then +Inf, the sum
                    // and the count.
                    let mut totals = Vec::with_capacity(p.bucket_counts.len() + 2);
                    let mut run = 0u64;
                    for c in &p.bucket_counts {
                        run = run.saturating_add(*c);
                        totals.push(run as f64);
                    }
                    totals.push(p.sum.unwrap_or(0.0));
                    totals.push(p.count as f64);
                    let deltas = if cumulative {
                        let key = self.key(&p.attributes);
                        self.delta(key, p.start_time_unix_nano, p.time_unix_nano, &totals)
                    } else {
                        Some(totals)
                    };
                    if let Some(d) = deltas {
                        let n = p.bucket_counts.len();
                        for (i, v) in d[..n].iter().enumerate() {
                            let le = p.explicit_bounds.get(i).copied().unwrap_or(f64::INFINITY);
                            self.push(Kind::Count, ".bucket", Some(("le", &bound_text(le))), *v);
                        }
                        if p.sum.is_some() {
                            self.push(Kind::Count, ".sum", None, d[n]);
                        }
                        self.push(Kind::Count, ".count", None, d[n + 1]);
                    }
                    self.min_max(p.min, p.max);
                }
            }
            Data::ExponentialHistogram(h) => {
                let cumulative = h.aggregation_temporality == CUMULATIVE;
                for p in &h.data_points {
                    self.out.data_points += 1;
                    if p.flags & NO_RECORDED_VALUE != 0 {
                        continue;
                    }
                    self.attrs(&p.attributes);
                    let totals = vec![p.sum.unwrap_or(0.0), p.count as f64];
                    let deltas = if cumulative {
                        let key = self.key(&p.attributes);
                        self.delta(key, p.start_time_unix_nano, p.time_unix_nano, &totals)
                    } else {
                        Some(totals)
                    };
                    if let Some(d) = deltas {
                        if p.sum.is_some() {
                            self.push(Kind::Count, ".sum", None, d[0]);
                        }
                        self.push(Kind::Count, ".count", None, d[1]);
                    }
                    self.min_max(p.min, p.max);
                }
            }
            Data::Summary(s) => {
                for p in &s.data_points {
                    self.out.data_points += 1;
                    if p.flags & NO_RECORDED_VALUE != 0 {
                        continue;
                    }
                    self.attrs(&p.attributes);
                    for q in &p.quantile_values {
                        self.push(
                            Kind::Store,
                            "",
                            Some(("quantile", &format!("{}", q.quantile))),
                            q.value,
                        );
                    }
                    let key = self.key(&p.attributes);
                    if let Some(d) = self.delta(
                        key,
                        p.start_time_unix_nano,
                        p.time_unix_nano,
                        &[p.sum, p.count as f64],
                    ) {
                        self.push(Kind::Count, ".sum", None, d[0]);
                        self.push(Kind::Count, ".count", None, d[1]);
                    }
                }
            }
        }
    }

    fn min_max(&mut self, min: Option<f64>, max: Option<f64>) {
        if let Some(v) = min {
            self.push(Kind::Store, ".min", None, v);
        }
        if let Some(v) = max {
            self.push(Kind::Store, ".max", None, v);
        }
    }

    /// Renders a point's attributes into the scratch tags.
    fn attrs(&mut self, attrs: &[KeyValue]) {
        let s = &mut self.mapper.scratch;
        s.clear();
        for kv in attrs {
            s.push(&kv.key, kv.value.as_ref());
        }
    }

    fn key(&mut self, attrs: &[KeyValue]) -> u64 {
        let mut h = self.mapper.hasher.build_hasher();
        h.write_u64(self.scope_hash);
        h.write(self.name.as_bytes());
        h.write_u8(0xff);
        hash_attrs(&mut h, attrs, self.text);
        h.finish()
    }

    /// The change of a cumulative series since its previous point, or
    /// nothing when this point only sets the baseline (or repeats one).
    fn delta(&mut self, key: u64, start: u64, time: u64, totals: &[f64]) -> Option<Vec<f64>> {
        let prev = self
            .out
            .staged
            .get(&key)
            .or_else(|| self.mapper.state.get(&key));
        let next = Prev {
            start,
            time,
            values: totals.to_vec(),
            seen: self.now,
        };
        let deltas = match prev {
            None => {
                if self.mapper.state.len() + self.out.staged.len() >= self.mapper.max_series
                    && !self.room()
                {
                    self.out.state_full += 1;
                    self.refuse(
                        "the state of cumulative series is full (otlp max_cumulative_series)",
                    );
                    return None;
                }
                (start != 0 && start >= self.mapper.since).then(|| totals.to_vec())
            }
            Some(p) => {
                let reset = p.start != start
                    || p.values.len() != totals.len()
                    || totals.last() < p.values.last();
                if reset {
                    Some(totals.to_vec())
                } else if time <= p.time {
                    return None;
                } else {
                    Some(
                        totals
                            .iter()
                            .zip(&p.values)
                            .map(|(n, o)| (n - o).max(0.0))
                            .collect(),
                    )
                }
            }
        };
        self.out.staged.insert(key, next);
        deltas
    }

    /// True when idle series would make room for a new one at commit.
    fn room(&self) -> bool {
        self.mapper
            .state
            .values()
            .any(|p| self.now.duration_since(p.seen) >= STATE_IDLE)
    }

    fn refuse(&mut self, why: &str) {
        self.out.rejected += 1;
        if self.out.message.is_empty() {
            self.out.message = why.to_string();
        }
    }

    fn push(&mut self, kind: Kind, suffix: &str, extra: Option<(&str, &str)>, value: f64) {
        let name;
        let name = if suffix.is_empty() {
            self.name
        } else {
            name = format!("{}{suffix}", self.name);
            &name
        };
        let tags = self
            .resource
            .iter()
            .chain(self.mapper.scratch.iter())
            .chain(extra);
        if !self.out.points.push(kind, name, tags, value) {
            self.refuse("a value that is not a finite number, or an empty metric name");
        }
    }
}

fn number(v: Option<&number_data_point::Value>) -> f64 {
    match v {
        Some(number_data_point::Value::AsDouble(d)) => *d,
        Some(number_data_point::Value::AsInt(i)) => *i as f64,
        None => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::{
        Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    /// A request of one cumulative monotonic sum point from process `pid`.
    fn cumulative(pid: &str, start: u64, time: u64, value: i64) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "api"), kv("process.pid", pid)],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "hits".into(),
                        data: Some(Data::Sum(Sum {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![kv("code", "200")],
                                start_time_unix_nano: start,
                                time_unix_nano: time,
                                value: Some(number_data_point::Value::AsInt(value)),
                                ..Default::default()
                            }],
                            aggregation_temporality: CUMULATIVE,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// Maps and commits; the values and tags of the points made.
    fn send(m: &mut Mapper, req: &ExportMetricsServiceRequest) -> Vec<(f64, String)> {
        let mut mapped = m.map(req);
        m.commit(&mut mapped);
        let mut got = Vec::new();
        mapped.points.each(|p| {
            let sonde_proto::Value::Number(v) = p.value else {
                panic!()
            };
            got.push((v, String::from_utf8(p.tags.to_vec()).unwrap()));
        });
        got
    }

    fn mapper() -> Mapper {
        Mapper::new(vec!["service.name".into()], 10, 1_000)
    }

    #[test]
    fn cumulative_points_become_the_change_since_the_previous_one() {
        let mut m = mapper();
        // Started after the agent: the first total counts in full.
        assert_eq!(
            send(&mut m, &cumulative("1", 2_000, 3_000, 5)),
            [(5.0, "service.name:api,code:200".to_string())]
        );
        assert_eq!(send(&mut m, &cumulative("1", 2_000, 4_000, 12))[0].0, 7.0);
        // A retry of a point already taken counts nothing.
        assert!(send(&mut m, &cumulative("1", 2_000, 4_000, 12)).is_empty());
        // Another process with the same kept attributes has its own state.
        assert_eq!(send(&mut m, &cumulative("2", 2_500, 4_000, 3))[0].0, 3.0);
        // A reset: the value went down, then a new start time.
        assert_eq!(send(&mut m, &cumulative("1", 2_000, 5_000, 4))[0].0, 4.0);
        assert_eq!(send(&mut m, &cumulative("1", 6_000, 7_000, 9))[0].0, 9.0);
    }

    #[test]
    fn a_series_older_than_the_agent_sets_a_baseline_first() {
        let mut m = mapper();
        assert!(send(&mut m, &cumulative("1", 500, 3_000, 100)).is_empty());
        assert_eq!(send(&mut m, &cumulative("1", 500, 4_000, 130))[0].0, 30.0);
    }

    #[test]
    fn state_is_kept_only_once_committed_and_is_bounded() {
        let mut m = mapper();
        // Mapped, not committed (the queue was full): the retry counts
        // the same change.
        let _ = m.map(&cumulative("1", 2_000, 3_000, 5));
        assert_eq!(send(&mut m, &cumulative("1", 2_000, 3_000, 5))[0].0, 5.0);
        for pid in 2..=10 {
            send(&mut m, &cumulative(&pid.to_string(), 2_000, 3_000, 1));
        }
        assert_eq!(m.series(), 10);
        let mapped = m.map(&cumulative("11", 2_000, 3_000, 1));
        assert_eq!((mapped.rejected, mapped.state_full), (1, 1));
        assert!(mapped.points.is_empty());
    }
}
