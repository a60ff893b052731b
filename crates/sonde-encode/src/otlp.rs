//! OTLP/HTTP metrics: a protobuf `ExportMetricsServiceRequest`, POSTed to
//! `/v1/metrics`.
//!
//! The body has one `ResourceMetrics` (with the resource attributes given
//! to [`Otlp::with_resource`], none by default) holding one
//! `ScopeMetrics` whose scope is `sonde` and this crate's version. Points
//! of the same name and kind share one `Metric`, in the order each name
//! was first pushed:
//!
//! * running totals ([`OutPoint::monotonic`]) are a `Sum` with
//!   `is_monotonic = true` and `aggregation_temporality = CUMULATIVE` (2);
//! * everything else is a `Gauge`.
//!
//! A name that arrives as both kinds (a timer's `.sum` and a histogram's
//! `.sum` under one base name) gives two `Metric`s of that name, one of
//! each kind, rather than mixing kinds in one.
//!
//! Each point is a `NumberDataPoint` with `as_double` = the value,
//! `time_unix_nano` = the timestamp in nanoseconds (negative timestamps
//! are sent as 0), no `start_time_unix_nano` (sonde does not keep when a
//! running total started), and one string attribute per tag, keys and
//! values as they are (OTLP allows any UTF-8, dots included, and empty
//! values). A key that occurs twice (a histogram series with its own `le`
//! tag) keeps its first value, since attribute keys must be unique.
//!
//! Compression: the OTLP/HTTP specification requires receivers to accept
//! `gzip`; the OpenTelemetry Collector also accepts `zstd`, `snappy`,
//! `lz4` and `deflate`.
//!
//! ```
//! use sonde_aggregate::{key, OutPoint, SeriesRef, Suffix};
//! use sonde_encode::otlp::Otlp;
//! use sonde_encode::BatchEncoder;
//!
//! let key = key::encode(0, "web.requests", &[("host", "a")]);
//! let series = SeriesRef::from_key(&key).unwrap();
//! let p = OutPoint { series, suffix: Suffix::None, le: None, value: 3.0, timestamp: 1763800200, monotonic: true };
//! let mut enc = Otlp::new().with_resource([("host.name", "web-1")]);
//! enc.push(&p);
//! let size = enc.bytes();
//! let mut body = Vec::new();
//! enc.finish(&mut body);
//! assert_eq!(body.len(), size);
//! ```
//!
//! # Design
//!
//! Grouping by name means a point cannot be appended to the body as it
//! arrives: each data point is encoded once, when pushed, into its
//! metric's own buffer, and [`BatchEncoder::finish`] writes the wrappers
//! (whose lengths come first) around those buffers. Every encoded length
//! is tracked as points arrive, so [`BatchEncoder::bytes`] is exact in
//! O(1). Metric buffers and their names are kept from one batch to the
//! next (those a batch did not use are dropped at its end), so a warm
//! encoder allocates only for names it has not seen in the last batch.

use hashbrown::HashMap;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;
use sonde_aggregate::OutPoint;

use crate::{BatchEncoder, Half};

/// The messages of the official OTLP `.proto` files that sonde sends, with
/// the same field numbers and field order (prost encodes in declaration
/// order, so these give the same bytes as the official definitions); the
/// logs encoder ([`crate::otlp_logs`]) shares the common ones.
pub(crate) mod proto {
    /// `opentelemetry.proto.common.v1.KeyValue`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    /// `opentelemetry.proto.common.v1.AnyValue`, string, integer and
    /// array values.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "AnyValueKind", tags = "1, 3, 5")]
        pub value: Option<AnyValueKind>,
    }

    /// `opentelemetry.proto.common.v1.ArrayValue`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ArrayValue {
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<AnyValue>,
    }

    /// The `value` oneof of `AnyValue`, its variants named as the proto
    /// names them.
    #[allow(clippy::enum_variant_names)]
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum AnyValueKind {
        #[prost(string, tag = "1")]
        StringValue(String),
        #[prost(int64, tag = "3")]
        IntValue(i64),
        #[prost(message, tag = "5")]
        ArrayValue(ArrayValue),
    }

    /// `opentelemetry.proto.common.v1.InstrumentationScope`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    /// `opentelemetry.proto.resource.v1.Resource`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    /// `opentelemetry.proto.metrics.v1.NumberDataPoint`, double values.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NumberDataPoint {
        #[prost(message, repeated, tag = "7")]
        pub attributes: Vec<KeyValue>,
        #[prost(fixed64, tag = "3")]
        pub time_unix_nano: u64,
        #[prost(oneof = "NumberValue", tags = "4")]
        pub value: Option<NumberValue>,
    }

    /// The `value` oneof of `NumberDataPoint`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum NumberValue {
        #[prost(double, tag = "4")]
        AsDouble(f64),
    }
}

use proto::{AnyValue, AnyValueKind, KeyValue, NumberDataPoint, NumberValue};

// Field numbers of the wrappers written by hand around the data points.
const REQUEST_RESOURCE_METRICS: u32 = 1;
const RESOURCE_METRICS_RESOURCE: u32 = 1;
const RESOURCE_METRICS_SCOPE_METRICS: u32 = 2;
const SCOPE_METRICS_SCOPE: u32 = 1;
const SCOPE_METRICS_METRICS: u32 = 2;
const METRIC_NAME: u32 = 1;
const METRIC_GAUGE: u32 = 5;
const METRIC_SUM: u32 = 7;
const DATA_POINTS: u32 = 1;
const SUM_AGGREGATION_TEMPORALITY: u32 = 2;
const SUM_IS_MONOTONIC: u32 = 3;
/// `AGGREGATION_TEMPORALITY_CUMULATIVE`.
const CUMULATIVE: i32 = 2;
/// `aggregation_temporality` and `is_monotonic` of a `Sum`: two bytes each.
const SUM_FIELDS_LEN: usize = 4;

/// The encoded size of a length-delimited field (`tag` < 16) holding `len` bytes.
pub(crate) fn field_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// One `Metric` being built: its name, kind and encoded data points.
#[derive(Debug, Default)]
struct MetricBuf {
    name: String,
    sum: bool,
    /// Concatenated `data_points` fields.
    points: Vec<u8>,
}

impl MetricBuf {
    /// The body of the `Gauge` or `Sum`.
    fn data_len(&self) -> usize {
        self.points.len() + if self.sum { SUM_FIELDS_LEN } else { 0 }
    }

    /// The body of the `Metric`.
    fn len(&self) -> usize {
        field_len(self.name.len()) + field_len(self.data_len())
    }
}

/// The OTLP/HTTP metrics [`BatchEncoder`].
#[derive(Debug)]
pub struct Otlp {
    resource: proto::Resource,
    scope: proto::InstrumentationScope,
    /// Metrics of this batch in first-push order, then unused ones from
    /// the last batch.
    metrics: Vec<MetricBuf>,
    /// How many of `metrics` this batch uses (the first `used`).
    used: usize,
    /// Name to index in `metrics`, one map per kind.
    gauges: HashMap<String, usize>,
    sums: HashMap<String, usize>,
    /// Sum of `field_len(metric.len())` over the used metrics.
    metrics_len: usize,
    points: usize,
    /// The data point being encoded, with spare attributes for their
    /// string capacity.
    point: NumberDataPoint,
    spare: Vec<KeyValue>,
    name: String,
}

impl Default for Otlp {
    fn default() -> Otlp {
        Otlp::new()
    }
}

impl Otlp {
    /// An encoder with no resource attributes.
    pub fn new() -> Otlp {
        Otlp {
            resource: proto::Resource::default(),
            scope: proto::InstrumentationScope {
                name: "sonde".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            metrics: Vec::new(),
            used: 0,
            gauges: HashMap::new(),
            sums: HashMap::new(),
            metrics_len: 0,
            points: 0,
            point: NumberDataPoint::default(),
            spare: Vec::new(),
            name: String::new(),
        }
    }

    /// Sets the resource's attributes (string values), for example
    /// `host.name`; they describe the agent's host, sent once per request.
    pub fn with_resource<K: Into<String>, V: Into<String>>(
        mut self,
        attributes: impl IntoIterator<Item = (K, V)>,
    ) -> Otlp {
        self.resource.attributes = attributes
            .into_iter()
            .map(|(k, v)| KeyValue {
                key: k.into(),
                value: Some(AnyValue {
                    value: Some(AnyValueKind::StringValue(v.into())),
                }),
            })
            .collect();
        self
    }

    fn scope_metrics_len(&self) -> usize {
        field_len(self.scope.encoded_len()) + self.metrics_len
    }

    fn resource_metrics_len(&self) -> usize {
        field_len(self.resource.encoded_len()) + field_len(self.scope_metrics_len())
    }

    /// The index of the metric `self.name` of this kind, made the next
    /// used one if this batch has not used it yet.
    fn metric(&mut self, sum: bool) -> usize {
        let map = if sum {
            &mut self.sums
        } else {
            &mut self.gauges
        };
        let i = match map.get(self.name.as_str()) {
            Some(&i) => i,
            None => {
                self.metrics.push(MetricBuf {
                    name: self.name.clone(),
                    sum,
                    points: Vec::new(),
                });
                map.insert(self.name.clone(), self.metrics.len() - 1);
                self.metrics.len() - 1
            }
        };
        if i < self.used {
            return i;
        }
        // First point of this metric in the batch: move it to the end of
        // the used ones, fixing the index of the one it swaps with.
        let j = self.used;
        self.metrics.swap(i, j);
        if i != j {
            let other = &self.metrics[i];
            let map = if other.sum {
                &mut self.sums
            } else {
                &mut self.gauges
            };
            if let Some(slot) = map.get_mut(other.name.as_str()) {
                *slot = i;
            }
            let map = if sum {
                &mut self.sums
            } else {
                &mut self.gauges
            };
            if let Some(slot) = map.get_mut(self.name.as_str()) {
                *slot = j;
            }
        }
        self.used += 1;
        self.metrics_len += field_len(self.metrics[j].len());
        j
    }
}

/// Sets `kv` to a string attribute, reusing its strings.
pub(crate) fn set_attribute(kv: &mut KeyValue, k: &str, v: &str) {
    kv.key.clear();
    kv.key.push_str(k);
    if let Some(AnyValue {
        value: Some(AnyValueKind::StringValue(s)),
    }) = &mut kv.value
    {
        s.clear();
        s.push_str(v);
        return;
    }
    kv.value = Some(AnyValue {
        value: Some(AnyValueKind::StringValue(v.to_owned())),
    });
}

impl BatchEncoder for Otlp {
    fn push(&mut self, p: &OutPoint<'_>) {
        let point = &mut self.point;
        let spare = &mut self.spare;
        spare.append(&mut point.attributes);
        p.for_each_tag(|k, v| {
            if point.attributes.last().is_some_and(|last| last.key == k) {
                return;
            }
            let mut kv = spare.pop().unwrap_or_default();
            set_attribute(&mut kv, k, v);
            point.attributes.push(kv);
        });
        point.time_unix_nano = u64::try_from(p.timestamp)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000);
        point.value = Some(NumberValue::AsDouble(p.value));

        self.name.clear();
        p.write_name(&mut self.name);
        let i = self.metric(p.monotonic);
        let m = &mut self.metrics[i];
        let before = field_len(m.len());
        prost::encoding::message::encode(DATA_POINTS, &self.point, &mut m.points);
        self.metrics_len = self.metrics_len - before + field_len(m.len());
        self.points += 1;
    }

    fn points(&self) -> usize {
        self.points
    }

    fn bytes(&self) -> usize {
        if self.points == 0 {
            return 0;
        }
        field_len(self.resource_metrics_len())
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.points > 0 {
            out.reserve(self.bytes());
            encode_key(REQUEST_RESOURCE_METRICS, WireType::LengthDelimited, out);
            encode_varint(self.resource_metrics_len() as u64, out);
            prost::encoding::message::encode(RESOURCE_METRICS_RESOURCE, &self.resource, out);
            encode_key(
                RESOURCE_METRICS_SCOPE_METRICS,
                WireType::LengthDelimited,
                out,
            );
            encode_varint(self.scope_metrics_len() as u64, out);
            prost::encoding::message::encode(SCOPE_METRICS_SCOPE, &self.scope, out);
            for m in &self.metrics[..self.used] {
                encode_key(SCOPE_METRICS_METRICS, WireType::LengthDelimited, out);
                encode_varint(m.len() as u64, out);
                prost::encoding::string::encode(METRIC_NAME, &m.name, out);
                let tag = if m.sum { METRIC_SUM } else { METRIC_GAUGE };
                encode_key(tag, WireType::LengthDelimited, out);
                encode_varint(m.data_len() as u64, out);
                out.extend_from_slice(&m.points);
                if m.sum {
                    prost::encoding::int32::encode(SUM_AGGREGATION_TEMPORALITY, &CUMULATIVE, out);
                    prost::encoding::bool::encode(SUM_IS_MONOTONIC, &true, out);
                }
            }
        }
        // Keep what this batch used for the next one; forget the rest.
        for m in self.metrics.drain(self.used..) {
            let map = if m.sum {
                &mut self.sums
            } else {
                &mut self.gauges
            };
            map.remove(m.name.as_str());
        }
        for m in &mut self.metrics {
            m.points.clear();
        }
        self.used = 0;
        self.metrics_len = 0;
        self.points = 0;
    }

    fn content_type(&self) -> &'static str {
        "application/x-protobuf"
    }

    /// Cuts the run of data points, in the order of the body's metrics,
    /// after its middle one: a metric whose points straddle the cut goes
    /// into both halves with its share of them. The resource and scope
    /// are copied into each half.
    fn split(body: &[u8]) -> Option<[Half; 2]> {
        let req = split::Request::decode(body).ok()?;
        let [rm] = &req.resource_metrics[..] else {
            return None;
        };
        let [sm] = &rm.scope_metrics[..] else {
            return None;
        };
        let mut total = 0;
        for m in &sm.metrics {
            total += m.data()?.data_points.len();
        }
        if total < 2 {
            return None;
        }
        let first = total / 2;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut before = 0;
        for m in &sm.metrics {
            let n = m.data()?.data_points.len();
            if before + n <= first {
                a.push(m.clone());
            } else if before >= first {
                b.push(m.clone());
            } else {
                let (x, y) = m.cut(first - before);
                a.push(x);
                b.push(y);
            }
            before += n;
        }
        let wrap = |metrics, points| Half {
            body: split::Request {
                resource_metrics: vec![split::ResourceMetrics {
                    resource: rm.resource.clone(),
                    scope_metrics: vec![split::ScopeMetrics {
                        scope: sm.scope.clone(),
                        metrics,
                    }],
                }],
            }
            .encode_to_vec(),
            points,
        };
        Some([wrap(a, first), wrap(b, total - first)])
    }
}

/// The wrappers of a request as [`Otlp::split`] reads them: the resource,
/// scope and data points as their encoded bytes, and the fields in tag
/// order, so that encoding gives the bytes [`Otlp::finish`] writes.
mod split {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Request {
        #[prost(message, repeated, tag = "1")]
        pub resource_metrics: Vec<ResourceMetrics>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ResourceMetrics {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub resource: Option<Vec<u8>>,
        #[prost(message, repeated, tag = "2")]
        pub scope_metrics: Vec<ScopeMetrics>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ScopeMetrics {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub scope: Option<Vec<u8>>,
        #[prost(message, repeated, tag = "2")]
        pub metrics: Vec<Metric>,
    }

    /// A `Metric` holding a `Gauge` (field 5) or a `Sum` (field 7).
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Metric {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "5")]
        pub gauge: Option<Data>,
        #[prost(message, optional, tag = "7")]
        pub sum: Option<Data>,
    }

    /// A `Gauge`, or a `Sum` with its two fields more.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Data {
        #[prost(bytes = "vec", repeated, tag = "1")]
        pub data_points: Vec<Vec<u8>>,
        #[prost(int32, tag = "2")]
        pub aggregation_temporality: i32,
        #[prost(bool, tag = "3")]
        pub is_monotonic: bool,
    }

    impl Metric {
        /// Its gauge or sum; `None` for both or neither.
        pub(super) fn data(&self) -> Option<&Data> {
            match (&self.gauge, &self.sum) {
                (Some(d), None) | (None, Some(d)) => Some(d),
                _ => None,
            }
        }

        /// The metric with its first `k` points, and with the rest.
        pub(super) fn cut(&self, k: usize) -> (Metric, Metric) {
            let (mut a, mut b) = (self.clone(), self.clone());
            for d in [&mut a.gauge, &mut a.sum].into_iter().flatten() {
                d.data_points.truncate(k);
            }
            for d in [&mut b.gauge, &mut b.sum].into_iter().flatten() {
                d.data_points.drain(..k);
            }
            (a, b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, encode};
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1 as common;
    use opentelemetry_proto::tonic::metrics::v1 as metrics;
    use opentelemetry_proto::tonic::resource::v1 as resource;
    use sonde_aggregate::Suffix;

    #[test]
    fn a_split_body_is_two_requests_of_the_points_halves() {
        testing::split_matches_encoding_the_halves(|| {
            Otlp::new().with_resource([("host.name", "web-1")])
        });
        // Points of one metric on both sides of the cut.
        let points: Vec<OutPoint<'static>> = (0..5)
            .map(|i| testing::point("x", &[("i", &i.to_string())], 1.0, 5))
            .chain([testing::point("y", &[], 2.0, 5)])
            .collect();
        let whole = encode(&mut Otlp::new(), &points);
        let [a, b] = Otlp::split(&whole).unwrap();
        assert_eq!((a.points, b.points), (3, 3));
        assert_eq!(a.body, encode(&mut Otlp::new(), &points[..3]));
        assert_eq!(b.body, encode(&mut Otlp::new(), &points[3..]));
        assert_eq!(Otlp::split(&encode(&mut Otlp::new(), &points[..1])), None);
        assert_eq!(Otlp::split(b"\x0a\x05"), None, "cut short");
    }

    fn point(
        name: &str,
        tags: &[(&str, &str)],
        value: f64,
        timestamp: i64,
        monotonic: bool,
    ) -> OutPoint<'static> {
        OutPoint {
            monotonic,
            ..testing::point(name, tags, value, timestamp)
        }
    }

    fn kv(k: &str, v: &str) -> common::KeyValue {
        common::KeyValue {
            key: k.into(),
            value: Some(common::AnyValue {
                value: Some(common::any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    fn dp(attrs: &[(&str, &str)], value: f64, seconds: u64) -> metrics::NumberDataPoint {
        metrics::NumberDataPoint {
            attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
            time_unix_nano: seconds * 1_000_000_000,
            value: Some(metrics::number_data_point::Value::AsDouble(value)),
            ..Default::default()
        }
    }

    fn gauge(name: &str, points: Vec<metrics::NumberDataPoint>) -> metrics::Metric {
        metrics::Metric {
            name: name.into(),
            data: Some(metrics::metric::Data::Gauge(metrics::Gauge {
                data_points: points,
            })),
            ..Default::default()
        }
    }

    fn sum(name: &str, points: Vec<metrics::NumberDataPoint>) -> metrics::Metric {
        metrics::Metric {
            name: name.into(),
            data: Some(metrics::metric::Data::Sum(metrics::Sum {
                data_points: points,
                aggregation_temporality: metrics::AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        }
    }

    fn request(
        resource: Vec<common::KeyValue>,
        metrics: Vec<metrics::Metric>,
    ) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![metrics::ResourceMetrics {
                resource: Some(resource::Resource {
                    attributes: resource,
                    ..Default::default()
                }),
                scope_metrics: vec![metrics::ScopeMetrics {
                    scope: Some(common::InstrumentationScope {
                        name: "sonde".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }

    fn batch() -> Vec<OutPoint<'static>> {
        let mut bucket = point("db.lat", &[("host", "a")], 4.0, 1763800200, true);
        bucket.suffix = Suffix::Bucket;
        bucket.le = Some("0.5");
        vec![
            point(
                "web.hits",
                &[("host", "a"), ("dc", "x")],
                3.0,
                1763800200,
                true,
            ),
            point("queue.depth", &[("q", "")], 12.5, 1763800200, false),
            bucket,
            point("web.hits", &[("host", "b")], 4.0, 1763800200, true),
            point("web.hits", &[], 0.25, 1763800230, false),
        ]
    }

    fn expected() -> ExportMetricsServiceRequest {
        const T: u64 = 1763800200;
        request(
            vec![kv("host.name", "web-1")],
            vec![
                sum(
                    "web.hits",
                    vec![
                        dp(&[("dc", "x"), ("host", "a")], 3.0, T),
                        dp(&[("host", "b")], 4.0, T),
                    ],
                ),
                gauge("queue.depth", vec![dp(&[("q", "")], 12.5, T)]),
                sum(
                    "db.lat.bucket",
                    vec![dp(&[("host", "a"), ("le", "0.5")], 4.0, T)],
                ),
                gauge("web.hits", vec![dp(&[], 0.25, T + 30)]),
            ],
        )
    }

    #[test]
    fn the_body_decodes_with_the_official_definitions() {
        let mut enc = Otlp::new().with_resource([("host.name", "web-1")]);
        let body = encode(&mut enc, &batch());
        let got = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
        assert_eq!(got, expected());
    }

    #[test]
    fn the_body_is_byte_for_byte_what_the_official_encoder_writes() {
        let mut enc = Otlp::new().with_resource([("host.name", "web-1")]);
        let body = encode(&mut enc, &batch());
        assert_eq!(body, expected().encode_to_vec());
    }

    #[test]
    fn a_tiny_request_matches_golden_bytes() {
        let body = encode(&mut Otlp::new(), &[point("m", &[], 1.0, 1, false)]);
        let version = env!("CARGO_PKG_VERSION").as_bytes();
        let scope_len = 2 + 5 + 2 + version.len();
        // Metric: name "m" (3 bytes) + gauge (2 + 20): 25 bytes.
        // Data point: time (9 bytes) + as_double (9 bytes): 18 bytes.
        let mut want = vec![0x0a, (2 + 2 + 2 + scope_len + 2 + 25) as u8];
        want.extend([0x0a, 0x00]); // an empty resource
        want.extend([0x12, (2 + scope_len + 2 + 25) as u8]); // scope_metrics
        want.extend([0x0a, scope_len as u8, 0x0a, 0x05]);
        want.extend(b"sonde");
        want.extend([0x12, version.len() as u8]);
        want.extend(version);
        want.extend([0x12, 25, 0x0a, 0x01, b'm']); // metrics: name "m"
        want.extend([0x2a, 20, 0x0a, 18]); // gauge (5), data_points (1)
        want.extend([0x19, 0x00, 0xca, 0x9a, 0x3b, 0, 0, 0, 0]); // time_unix_nano 1e9
        want.extend([0x21, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]); // as_double 1.0
        assert_eq!(body, want);
    }

    #[test]
    fn a_warm_encoder_orders_metrics_by_first_push_in_each_batch() {
        let mut enc = Otlp::new();
        let first = encode(
            &mut enc,
            &[
                point("a", &[], 1.0, 0, false),
                point("b", &[], 2.0, 0, false),
            ],
        );
        assert_eq!(
            ExportMetricsServiceRequest::decode(&first[..]).unwrap(),
            request(
                vec![],
                vec![
                    gauge("a", vec![dp(&[], 1.0, 0)]),
                    gauge("b", vec![dp(&[], 2.0, 0)])
                ]
            )
        );
        // b first now, a not at all, c new.
        let second = encode(
            &mut enc,
            &[
                point("b", &[], 3.0, 0, false),
                point("c", &[], 4.0, 0, false),
                point("b", &[], 5.0, 0, false),
            ],
        );
        assert_eq!(
            ExportMetricsServiceRequest::decode(&second[..]).unwrap(),
            request(
                vec![],
                vec![
                    gauge("b", vec![dp(&[], 3.0, 0), dp(&[], 5.0, 0)]),
                    gauge("c", vec![dp(&[], 4.0, 0)])
                ]
            )
        );
        assert_eq!(enc.metrics.len(), 2, "a was forgotten");
        let third = encode(&mut enc, &[point("a", &[], 6.0, 0, false)]);
        assert_eq!(
            ExportMetricsServiceRequest::decode(&third[..]).unwrap(),
            request(vec![], vec![gauge("a", vec![dp(&[], 6.0, 0)])])
        );
    }

    #[test]
    fn an_empty_batch_is_an_empty_request() {
        let mut enc = Otlp::new();
        assert_eq!(enc.bytes(), 0);
        let mut out = Vec::new();
        enc.finish(&mut out);
        assert!(out.is_empty());
        assert_eq!(
            ExportMetricsServiceRequest::decode(&out[..]).unwrap(),
            ExportMetricsServiceRequest::default()
        );
    }

    #[test]
    fn a_duplicate_tag_key_keeps_its_first_value_and_odd_input_does_not_panic() {
        let mut p = point("h", &[("le", "mine")], 1.0, -5, true);
        p.suffix = Suffix::Bucket;
        p.le = Some("+Inf");
        let body = encode(
            &mut Otlp::new(),
            &[p, point("", &[("", "")], 1e300, i64::MAX, false)],
        );
        let got = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
        let ms = &got.resource_metrics[0].scope_metrics[0].metrics;
        assert_eq!(ms[0], sum("h.bucket", vec![dp(&[("le", "mine")], 1.0, 0)]));
        assert_eq!(
            ms[1],
            gauge(
                "",
                vec![metrics::NumberDataPoint {
                    time_unix_nano: u64::MAX,
                    ..dp(&[("", "")], 1e300, 0)
                }]
            )
        );
    }
}
