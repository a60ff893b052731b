//! Prometheus remote write 1.0: a protobuf `WriteRequest`, one
//! `TimeSeries` per point.
//!
//! [`RemoteWrite`] appends each point as a length-delimited `timeseries`
//! field (number 1) of the request as it is pushed, so the body grows by
//! one encoded series at a time, [`BatchEncoder::bytes`] is exact and no
//! list of series is ever kept. The sink sends the body snappy-compressed
//! (block format, [`crate::compress::Compression::Snappy`]): remote write
//! 1.0 accepts nothing else, with the headers `Content-Encoding: snappy`
//! and `X-Prometheus-Remote-Write-Version: 0.1.0`.
//!
//! # Names and labels
//!
//! * `__name__` is the full name (series name and suffix) with every
//!   character outside `[a-zA-Z0-9_:]` replaced by `_`, and a `_` in front
//!   of a leading digit ([`crate::prometheus::sanitize_name`]).
//! * A tag key becomes a label name the same way, without `:`
//!   ([`crate::prometheus::sanitize_label`]). Names starting with `__` are
//!   reserved for Prometheus's own labels, so such a tag key gets the
//!   prefix `key`: a tag `__name__` arrives as label `key__name__` and
//!   cannot overwrite the metric name (the prefix the Prometheus OTLP
//!   translator uses for label names it must move out of the way).
//! * Label values are kept as they are (UTF-8); a tag with an empty value
//!   is left out, since Prometheus reads an empty label as an absent one.
//! * Labels are sorted by name, as Prometheus requires. When two tag keys
//!   sanitise to the same label name (`a.b` and `a_b`), or a histogram
//!   series carries its own `le` tag, **the first one in tag order is
//!   kept** and the others are dropped, because a series with a duplicate
//!   label is rejected whole.
//!
//! The sample is the point's value at the point's timestamp in
//! milliseconds. Metric metadata (`WriteRequest.metadata`, field 3) is
//! not sent: remote write 1.0 does not require it, and the counter/gauge
//! distinction survives in the names Prometheus users query anyway.
//!
//! ```
//! use prost::Message;
//! use sonde_aggregate::{key, OutPoint, SeriesRef, Suffix};
//! use sonde_encode::remote_write::{prompb, RemoteWrite};
//! use sonde_encode::BatchEncoder;
//!
//! let key = key::encode(0, "web.api.latency", &[("host", "a")]);
//! let series = SeriesRef::from_key(&key).unwrap();
//! let p = OutPoint { series, suffix: Suffix::Pct99, le: None, value: 12.5, timestamp: 1763800200, monotonic: false };
//! let mut enc = RemoteWrite::new();
//! enc.push(&p);
//! let mut body = Vec::new();
//! enc.finish(&mut body);
//! let req = prompb::WriteRequest::decode(&body[..]).unwrap();
//! assert_eq!(req.timeseries[0].labels[0].value, "web_api_latency_pct99");
//! assert_eq!(req.timeseries[0].samples[0].timestamp, 1763800200_000);
//! ```

use sonde_aggregate::OutPoint;

use crate::prometheus::{sanitize_label, sanitize_name};
use crate::{BatchEncoder, Body, Half};

/// The messages of Prometheus's `prompb/types.proto` and `remote.proto`
/// that remote write 1.0 uses, with the same field numbers.
pub mod prompb {
    /// The request body: a list of series.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        /// The series, each with its samples (field 1).
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
        /// Metric metadata (field 3); sonde sends none.
        #[prost(message, repeated, tag = "3")]
        pub metadata: Vec<MetricMetadata>,
    }

    /// One series: its labels, sorted by name, and its samples.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        /// Labels, sorted by name, `__name__` among them (field 1).
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        /// Samples, oldest first (field 2).
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }

    /// One label.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// The label name (field 1).
        #[prost(string, tag = "1")]
        pub name: String,
        /// The label value (field 2).
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// One value at one time.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// The value (field 1).
        #[prost(double, tag = "1")]
        pub value: f64,
        /// Unix milliseconds (field 2).
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }

    /// Type, help and unit of a metric family.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MetricMetadata {
        /// The metric type, as Prometheus's `MetricType` enum numbers it
        /// (0 unknown, 1 counter, 2 gauge, ...) (field 1).
        #[prost(int32, tag = "1")]
        pub r#type: i32,
        /// The metric family name (field 2).
        #[prost(string, tag = "2")]
        pub metric_family_name: String,
        /// The help text (field 4).
        #[prost(string, tag = "4")]
        pub help: String,
        /// The unit (field 5).
        #[prost(string, tag = "5")]
        pub unit: String,
    }
}

use prompb::{Label, Sample, TimeSeries};

/// The remote write [`BatchEncoder`]: one `TimeSeries` per point,
/// encoded as it is pushed.
///
/// # Design
///
/// Each point is built in one reused [`TimeSeries`] whose label strings
/// keep their capacity from point to point (a pool of spare labels), then
/// encoded by prost into the body; a warm encoder allocates only when a
/// point has more or longer labels than any before it.
#[derive(Debug, Default)]
pub struct RemoteWrite {
    body: Body,
    /// The series being encoded.
    series: TimeSeries,
    /// Labels not in use, kept for their string capacity.
    spare: Vec<Label>,
    /// The full name before sanitising.
    name: String,
}

impl RemoteWrite {
    /// An empty encoder.
    pub fn new() -> RemoteWrite {
        RemoteWrite::default()
    }
}

/// A label from the pool, emptied.
fn take_label(spare: &mut Vec<Label>) -> Label {
    let mut l = spare.pop().unwrap_or_default();
    l.name.clear();
    l.value.clear();
    l
}

impl BatchEncoder for RemoteWrite {
    fn push(&mut self, p: &OutPoint<'_>) {
        let RemoteWrite {
            body: Body { buf: body, points },
            series,
            spare,
            name,
        } = self;
        spare.append(&mut series.labels);

        let mut l = take_label(spare);
        l.name.push_str("__name__");
        name.clear();
        p.write_name(name);
        sanitize_name(name, &mut l.value);
        series.labels.push(l);

        p.for_each_tag(|k, v| {
            if v.is_empty() {
                return;
            }
            let mut l = take_label(spare);
            sanitize_label(k, &mut l.name);
            if l.name.starts_with("__") {
                l.name.insert_str(0, "key");
            }
            l.value.push_str(v);
            series.labels.push(l);
        });
        // Stable: among labels with one name, tag order decides, and
        // dedup keeps the first.
        series.labels.sort_by(|a, b| a.name.cmp(&b.name));
        series
            .labels
            .dedup_by(|later, first| later.name == first.name);

        series.samples.clear();
        series.samples.push(Sample {
            value: p.value,
            timestamp: p.timestamp.saturating_mul(1000),
        });
        prost::encoding::message::encode(1, series, body);
        *points += 1;
    }

    fn points(&self) -> usize {
        self.body.points
    }

    fn bytes(&self) -> usize {
        self.body.buf.len()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.body.finish(out);
    }

    fn content_type(&self) -> &'static str {
        "application/x-protobuf"
    }

    /// The body is a run of `timeseries` fields, one per point, so a cut
    /// between two of them leaves two valid requests, bytes untouched.
    fn split(body: &[u8]) -> Option<[Half; 2]> {
        use prost::encoding::{decode_key, decode_varint, WireType};
        let mut ends = Vec::new();
        let mut rd = body;
        while !rd.is_empty() {
            let (tag, wire) = decode_key(&mut rd).ok()?;
            if tag != 1 || wire != WireType::LengthDelimited {
                return None;
            }
            let len = usize::try_from(decode_varint(&mut rd).ok()?).ok()?;
            rd = rd.get(len..)?;
            ends.push(body.len() - rd.len());
        }
        crate::split_at_ends(body, &ends)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, point};
    use prost::Message;
    use sonde_aggregate::Suffix;

    fn encode(points: &[OutPoint<'_>]) -> Vec<u8> {
        testing::encode(&mut RemoteWrite::new(), points)
    }

    #[test]
    fn a_split_body_is_two_requests_of_the_points_halves() {
        testing::split_matches_encoding_the_halves(RemoteWrite::new);
        assert_eq!(
            RemoteWrite::split(&[0x1a, 0x00, 0x1a, 0x00]),
            None,
            "metadata, not series"
        );
        assert_eq!(
            RemoteWrite::split(&[0x0a, 0x00, 0x0a, 0x05]),
            None,
            "cut short"
        );
    }

    fn labels(ts: &TimeSeries) -> Vec<(&str, &str)> {
        ts.labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect()
    }

    #[test]
    fn a_two_point_batch_matches_golden_bytes() {
        let body = encode(&[
            point("up", &[], 1.0, 1),
            point("a.b", &[("dc", ""), ("host", "h")], 0.5, 2),
        ]);
        #[rustfmt::skip]
        let want: &[u8] = &[
            // WriteRequest.timeseries (1), 30 bytes
            0x0a, 0x1e,
              // TimeSeries.labels (1), 14 bytes: __name__ = up
              0x0a, 0x0e,
                0x0a, 0x08, b'_', b'_', b'n', b'a', b'm', b'e', b'_', b'_',
                0x12, 0x02, b'u', b'p',
              // TimeSeries.samples (2), 12 bytes: value 1.0 (double), timestamp 1000
              0x12, 0x0c,
                0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f,
                0x10, 0xe8, 0x07,
            // WriteRequest.timeseries (1), 42 bytes
            0x0a, 0x2a,
              // __name__ = a_b
              0x0a, 0x0f,
                0x0a, 0x08, b'_', b'_', b'n', b'a', b'm', b'e', b'_', b'_',
                0x12, 0x03, b'a', b'_', b'b',
              // host = h (dc left out: empty value)
              0x0a, 0x09,
                0x0a, 0x04, b'h', b'o', b's', b't',
                0x12, 0x01, b'h',
              // value 0.5, timestamp 2000
              0x12, 0x0c,
                0x09, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f,
                0x10, 0xd0, 0x0f,
        ];
        assert_eq!(body, want);
    }

    #[test]
    fn the_body_decodes_with_sorted_sanitised_labels() {
        let mut bucket = point(
            "9lives.lat-ms",
            &[("Zone", "z"), ("a.b", "ü \"q\""), ("__name__", "evil")],
            3.0,
            1763800200,
        );
        bucket.suffix = Suffix::Bucket;
        bucket.le = Some("+Inf");
        bucket.monotonic = true;
        let body = encode(&[bucket, point("x:y", &[("1st", "v")], -0.25, 7)]);
        let req = prompb::WriteRequest::decode(&body[..]).unwrap();
        assert_eq!(req.timeseries.len(), 2);
        assert_eq!(
            labels(&req.timeseries[0]),
            [
                ("Zone", "z"),
                ("__name__", "_9lives_lat_ms_bucket"),
                ("a_b", "ü \"q\""),
                ("key__name__", "evil"),
                ("le", "+Inf"),
            ]
        );
        assert_eq!(
            req.timeseries[0].samples,
            [Sample {
                value: 3.0,
                timestamp: 1_763_800_200_000
            }]
        );
        assert_eq!(
            labels(&req.timeseries[1]),
            [("_1st", "v"), ("__name__", "x:y")]
        );
        assert_eq!(req.timeseries[1].samples[0].value, -0.25);
        assert!(req.metadata.is_empty());
    }

    #[test]
    fn colliding_label_names_keep_the_first_tag() {
        // Tags are sorted by key: "a.b" < "a_b", so "a.b"'s value wins.
        let mut p = point(
            "m",
            &[("a.b", "first"), ("a_b", "second"), ("le", "mine")],
            1.0,
            0,
        );
        p.le = Some("5");
        let req = prompb::WriteRequest::decode(&encode(&[p])[..]).unwrap();
        assert_eq!(
            labels(&req.timeseries[0]),
            [("__name__", "m"), ("a_b", "first"), ("le", "mine")]
        );
    }

    #[test]
    fn bytes_is_the_exact_body_size_and_finish_starts_a_new_batch() {
        let mut enc = RemoteWrite::new();
        let mut out = Vec::new();
        enc.finish(&mut out);
        assert!(out.is_empty(), "an empty batch is an empty WriteRequest");
        for i in 0..3 {
            enc.push(&point("m", &[("host", "a")], f64::from(i), 10));
        }
        assert_eq!(enc.points(), 3);
        let size = enc.bytes();
        enc.finish(&mut out);
        assert_eq!(out.len(), size);
        assert_eq!((enc.points(), enc.bytes()), (0, 0));
        let req = prompb::WriteRequest::decode(&out[..]).unwrap();
        assert_eq!(req.timeseries.len(), 3);
        assert_eq!(req.timeseries[2].samples[0].value, 2.0);
    }

    #[test]
    fn extreme_timestamps_saturate_instead_of_overflowing() {
        let req =
            prompb::WriteRequest::decode(&encode(&[point("m", &[], 1.0, i64::MAX)])[..]).unwrap();
        assert_eq!(req.timeseries[0].samples[0].timestamp, i64::MAX);
    }
}
