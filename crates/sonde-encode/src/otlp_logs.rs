//! OTLP/HTTP logs: a protobuf `ExportLogsServiceRequest`, POSTed to
//! `/v1/logs`.
//!
//! A request holds the records of one log source: one `ResourceLogs`
//! whose resource attributes are given to [`OtlpLogs::begin`] (sonde
//! passes `host.name`, `sonde.source` and the source's fields), one
//! `ScopeLogs` whose scope is `sonde` and this crate's version, and one
//! `LogRecord` per record:
//!
//! * `body`: the record's text as a string (invalid UTF-8 replaced by
//!   U+FFFD; a multiline record's lines joined with `\n`);
//! * `observed_time_unix_nano`: when the record was encoded;
//!   `time_unix_nano`: the time the record carries where its format has
//!   one (a container runtime's), else 0, "unknown";
//! * attributes `log.file.path` and `log.file.name` (OpenTelemetry's
//!   semantic conventions for log files) and `log.file.record_offset`, the
//!   file offset of the record's first byte, as an integer (the name the
//!   Collector's `filelog` receiver gives it), then the record's own
//!   string attributes (a container record's stream and pod).
//!
//! A record with a [`RecordMeta`] (a DogStatsD event or service check) has
//! no file attributes: its `time_unix_nano` is its timestamp, its severity
//! is set when it has one, and its attributes are the meta's (a list as an
//! array of strings), then `host.name` when it names its own host.
//!
//! Each record is encoded once, when pushed, into the scope's buffer;
//! [`OtlpLogs::finish`] writes the wrappers, whose lengths come first,
//! around it.

use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;

use crate::otlp::proto::{self, AnyValue, AnyValueKind as Value, ArrayValue, KeyValue};
use crate::otlp::{field_len, set_attribute};
use crate::record::{AttrValue, RecordMeta};
use crate::Half;

/// `opentelemetry.proto.logs.v1.LogRecord`, the fields sonde sets (the
/// common messages are the metrics encoder's).
#[derive(Clone, PartialEq, prost::Message)]
struct LogRecord {
    #[prost(fixed64, tag = "1")]
    time_unix_nano: u64,
    #[prost(int32, tag = "2")]
    severity_number: i32,
    #[prost(string, tag = "3")]
    severity_text: String,
    #[prost(message, optional, tag = "5")]
    body: Option<AnyValue>,
    #[prost(message, repeated, tag = "6")]
    attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "11")]
    observed_time_unix_nano: u64,
}

// Field numbers of the wrappers written by hand around the records.
const REQUEST_RESOURCE_LOGS: u32 = 1;
const RESOURCE_LOGS_RESOURCE: u32 = 1;
const RESOURCE_LOGS_SCOPE_LOGS: u32 = 2;
const SCOPE_LOGS_SCOPE: u32 = 1;
const SCOPE_LOGS_LOG_RECORDS: u32 = 2;

/// The attributes every record of a file has: path, name and offset.
const FILE_ATTRIBUTES: usize = 3;

fn string(k: &str, v: &str) -> KeyValue {
    let mut kv = KeyValue::default();
    set_attribute(&mut kv, k, v);
    kv
}

/// One record, as [`OtlpLogs::push`] takes it.
#[derive(Clone, Copy, Debug)]
pub struct LogRecordIn<'a> {
    /// The record's bytes.
    pub body: &'a [u8],
    /// The path its file was read at.
    pub path: &'a str,
    /// The file offset of its first byte.
    pub offset: u64,
    /// When it was read or encoded, in nanoseconds since the Unix epoch.
    pub observed_unix_nano: u64,
    /// When it happened, in nanoseconds since the Unix epoch; 0 when
    /// unknown.
    pub time_unix_nano: u64,
    /// String attributes after the file's.
    pub attributes: &'a [(&'a str, &'a str)],
    /// What it says about itself, if it was not read from a file.
    pub meta: Option<&'a RecordMeta>,
}

/// Encodes requests of OTLP log records; see the [module docs](self).
#[derive(Debug)]
pub struct OtlpLogs {
    resource: proto::Resource,
    scope: proto::InstrumentationScope,
    /// The `log_records` fields of the scope, concatenated.
    records: Vec<u8>,
    count: usize,
    /// The record being encoded, its strings reused from record to record.
    record: LogRecord,
}

impl Default for OtlpLogs {
    fn default() -> Self {
        Self::new()
    }
}

impl OtlpLogs {
    /// An encoder; [`OtlpLogs::begin`] starts its first request.
    pub fn new() -> Self {
        Self {
            resource: proto::Resource::default(),
            scope: proto::InstrumentationScope {
                name: "sonde".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            records: Vec::new(),
            count: 0,
            record: LogRecord {
                time_unix_nano: 0,
                severity_number: 0,
                severity_text: String::new(),
                body: Some(AnyValue {
                    value: Some(Value::StringValue(String::new())),
                }),
                attributes: vec![
                    string("log.file.path", ""),
                    string("log.file.name", ""),
                    KeyValue {
                        key: "log.file.record_offset".to_owned(),
                        value: Some(AnyValue {
                            value: Some(Value::IntValue(0)),
                        }),
                    },
                ],
                observed_time_unix_nano: 0,
            },
        }
    }

    /// Starts a request (dropping records pushed since the last
    /// [`OtlpLogs::finish`]) whose records share the resource `attributes`.
    pub fn begin<'a>(&mut self, attributes: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.resource.attributes = attributes.into_iter().map(|(k, v)| string(k, v)).collect();
        self.records.clear();
        self.count = 0;
    }

    /// Adds one record to the request.
    pub fn push(&mut self, r: &LogRecordIn<'_>) {
        if let Some(meta) = r.meta {
            encode_record(&mut self.records, &with_meta(r, meta));
            self.count += 1;
            return;
        }
        let set = |v: &mut Option<AnyValue>, text: &str| {
            if let Some(AnyValue {
                value: Some(Value::StringValue(s)),
            }) = v
            {
                s.clear();
                s.push_str(text);
            }
        };
        set(&mut self.record.body, &String::from_utf8_lossy(r.body));
        let name = r.path.rsplit('/').next().unwrap_or(r.path);
        let attributes = &mut self.record.attributes;
        attributes.truncate(FILE_ATTRIBUTES + r.attributes.len());
        let [path, file, offset, ..] = &mut attributes[..] else {
            unreachable!("three attributes, set in new()");
        };
        set(&mut path.value, r.path);
        set(&mut file.value, name);
        offset.value = Some(AnyValue {
            value: Some(Value::IntValue(i64::try_from(r.offset).unwrap_or(i64::MAX))),
        });
        // The record's own, in the key-values of the record before where
        // there are some, so that their strings are reused.
        for (i, &(k, v)) in r.attributes.iter().enumerate() {
            match attributes.get_mut(FILE_ATTRIBUTES + i) {
                Some(kv) => {
                    kv.key.clear();
                    kv.key.push_str(k);
                    set(&mut kv.value, v);
                }
                None => attributes.push(string(k, v)),
            }
        }
        self.record.time_unix_nano = r.time_unix_nano;
        self.record.observed_time_unix_nano = r.observed_unix_nano;
        encode_record(&mut self.records, &self.record);
        self.count += 1;
    }

    /// Records in the request.
    pub fn records(&self) -> usize {
        self.count
    }

    /// The request's encoded size so far, give or take its wrappers' few
    /// bytes.
    pub fn bytes(&self) -> usize {
        self.records.len()
    }

    /// Appends the request to `out`; the next one starts empty with the
    /// same resource.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let scope_logs = field_len(self.scope.encoded_len()) + self.records.len();
        let resource_logs = field_len(self.resource.encoded_len()) + field_len(scope_logs);
        encode_key(REQUEST_RESOURCE_LOGS, WireType::LengthDelimited, out);
        encode_varint(resource_logs as u64, out);
        encode_key(RESOURCE_LOGS_RESOURCE, WireType::LengthDelimited, out);
        encode_varint(self.resource.encoded_len() as u64, out);
        let _ = self.resource.encode(out);
        encode_key(RESOURCE_LOGS_SCOPE_LOGS, WireType::LengthDelimited, out);
        encode_varint(scope_logs as u64, out);
        encode_key(SCOPE_LOGS_SCOPE, WireType::LengthDelimited, out);
        encode_varint(self.scope.encoded_len() as u64, out);
        let _ = self.scope.encode(out);
        out.extend_from_slice(&self.records);
        self.records.clear();
        self.count = 0;
    }

    /// Cuts a body [`OtlpLogs::finish`] wrote into two requests, each
    /// valid alone: the first with half its records (rounded down), the
    /// second with the rest, in order, each with the body's resource and
    /// scope. For an endpoint that refuses a request as too large (HTTP
    /// 413). `None` for fewer than two records, or a body not of this
    /// shape.
    pub fn split(body: &[u8]) -> Option<[Half; 2]> {
        let req = split::Request::decode(body).ok()?;
        let [rl] = &req.resource_logs[..] else {
            return None;
        };
        let [sl] = &rl.scope_logs[..] else {
            return None;
        };
        let total = sl.log_records.len();
        if total < 2 {
            return None;
        }
        let first = total / 2;
        let wrap = |records: &[Vec<u8>]| Half {
            body: split::Request {
                resource_logs: vec![split::ResourceLogs {
                    resource: rl.resource.clone(),
                    scope_logs: vec![split::ScopeLogs {
                        scope: sl.scope.clone(),
                        log_records: records.to_vec(),
                    }],
                }],
            }
            .encode_to_vec(),
            points: records.len(),
        };
        Some([
            wrap(&sl.log_records[..first]),
            wrap(&sl.log_records[first..]),
        ])
    }
}

/// The wrappers of a request as [`OtlpLogs::split`] reads them: the
/// resource, scope and records as their encoded bytes, the fields in tag
/// order, so that encoding gives the bytes [`OtlpLogs::finish`] writes.
mod split {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Request {
        #[prost(message, repeated, tag = "1")]
        pub resource_logs: Vec<ResourceLogs>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ResourceLogs {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub resource: Option<Vec<u8>>,
        #[prost(message, repeated, tag = "2")]
        pub scope_logs: Vec<ScopeLogs>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ScopeLogs {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub scope: Option<Vec<u8>>,
        #[prost(bytes = "vec", repeated, tag = "2")]
        pub log_records: Vec<Vec<u8>>,
    }
}

/// Appends `record` as one `log_records` field of a `ScopeLogs`.
fn encode_record(records: &mut Vec<u8>, record: &LogRecord) {
    encode_key(SCOPE_LOGS_LOG_RECORDS, WireType::LengthDelimited, records);
    encode_varint(record.encoded_len() as u64, records);
    // Encoding into a Vec cannot run out of room.
    let _ = record.encode(records);
}

/// The record of `r`, whose meta is `meta`: built afresh, as such records
/// are few (events, not lines).
fn with_meta(r: &LogRecordIn<'_>, meta: &RecordMeta) -> LogRecord {
    let any = |v: Value| AnyValue { value: Some(v) };
    let mut attributes: Vec<KeyValue> = meta
        .attributes
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.to_string(),
            value: Some(match v {
                AttrValue::Str(s) => any(Value::StringValue(s.clone())),
                AttrValue::Int(n) => any(Value::IntValue(*n)),
                AttrValue::List(l) => any(Value::ArrayValue(ArrayValue {
                    values: l
                        .iter()
                        .map(|s| any(Value::StringValue(s.clone())))
                        .collect(),
                })),
            }),
        })
        .collect();
    if let Some(h) = &meta.host {
        attributes.push(string("host.name", h));
    }
    LogRecord {
        time_unix_nano: u64::try_from(meta.timestamp)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000),
        severity_number: meta.severity.map_or(0, |s| s.number()),
        severity_text: meta
            .severity
            .map_or_else(String::new, |s| s.as_str().to_owned()),
        body: Some(any(Value::StringValue(
            String::from_utf8_lossy(r.body).into_owned(),
        ))),
        attributes,
        observed_time_unix_nano: r.observed_unix_nano,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;

    fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> V {
        v.as_ref().unwrap().value.clone().unwrap()
    }

    /// The body of records `texts`, each at offset 10 times its index.
    fn body_of(texts: &[&str]) -> Vec<u8> {
        let mut e = OtlpLogs::new();
        e.begin([("host.name", "web-1")]);
        for (i, t) in texts.iter().enumerate() {
            e.push(&LogRecordIn {
                body: t.as_bytes(),
                path: "/a.log",
                offset: 10 * i as u64,
                observed_unix_nano: 7,
                time_unix_nano: 0,
                attributes: &[],
                meta: None,
            });
        }
        let mut out = Vec::new();
        e.finish(&mut out);
        out
    }

    #[test]
    fn a_split_body_is_two_requests_of_the_records_halves() {
        let [a, b] = OtlpLogs::split(&body_of(&["0", "1", "2", "3", "4"])).unwrap();
        assert_eq!((a.points, b.points), (2, 3));
        assert_eq!(a.body, body_of(&["0", "1"]));
        // The second half's records keep their own offsets.
        let req = ExportLogsServiceRequest::decode(&b.body[..]).unwrap();
        let records = &req.resource_logs[0].scope_logs[0].log_records;
        let bodies: Vec<V> = records.iter().map(|r| text(&r.body)).collect();
        assert_eq!(bodies, ["2", "3", "4"].map(|t| V::StringValue(t.into())));
        assert_eq!(OtlpLogs::split(&body_of(&["alone"])), None);
        assert_eq!(OtlpLogs::split(b"\x0a\x05"), None);
    }

    #[test]
    fn records_decode_with_the_official_definitions() {
        let mut e = OtlpLogs::new();
        e.begin([("host.name", "web-1"), ("sonde.source", "app")]);
        for (i, body) in [&b"GET / 200"[..], b"boom\n  at x", b"bad \xff"]
            .iter()
            .enumerate()
        {
            e.push(&LogRecordIn {
                body,
                path: "/var/log/app/a.log",
                offset: 100 * i as u64,
                observed_unix_nano: 1_700_000_000_000_000_000 + i as u64,
                time_unix_nano: 0,
                attributes: &[],
                meta: None,
            });
        }
        assert_eq!(e.records(), 3);
        let mut out = Vec::new();
        e.finish(&mut out);
        let req = ExportLogsServiceRequest::decode(&out[..]).unwrap();
        let [rl] = &req.resource_logs[..] else {
            panic!("{req:?}")
        };
        let attrs: Vec<(String, V)> = rl
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| (kv.key.clone(), text(&kv.value)))
            .collect();
        assert_eq!(
            attrs,
            [
                ("host.name".to_string(), V::StringValue("web-1".into())),
                ("sonde.source".to_string(), V::StringValue("app".into()))
            ]
        );
        let [sl] = &rl.scope_logs[..] else {
            panic!("{rl:?}")
        };
        assert_eq!(sl.scope.as_ref().unwrap().name, "sonde");
        let bodies: Vec<V> = sl.log_records.iter().map(|r| text(&r.body)).collect();
        assert_eq!(
            bodies,
            [
                V::StringValue("GET / 200".into()),
                V::StringValue("boom\n  at x".into()),
                V::StringValue("bad \u{fffd}".into())
            ]
        );
        let r = &sl.log_records[2];
        assert_eq!(r.observed_time_unix_nano, 1_700_000_000_000_000_002);
        assert_eq!(r.time_unix_nano, 0);
        let attrs: Vec<(&str, V)> = r
            .attributes
            .iter()
            .map(|kv| (kv.key.as_str(), text(&kv.value)))
            .collect();
        assert_eq!(
            attrs,
            [
                ("log.file.path", V::StringValue("/var/log/app/a.log".into())),
                ("log.file.name", V::StringValue("a.log".into())),
                ("log.file.record_offset", V::IntValue(200)),
            ]
        );
        // The encoder starts empty after a finish.
        e.push(&LogRecordIn {
            body: b"next",
            path: "/a",
            offset: 0,
            observed_unix_nano: 1,
            time_unix_nano: 0,
            attributes: &[],
            meta: None,
        });
        let mut next = Vec::new();
        e.finish(&mut next);
        let req = ExportLogsServiceRequest::decode(&next[..]).unwrap();
        assert_eq!(req.resource_logs[0].scope_logs[0].log_records.len(), 1);
    }

    #[test]
    fn a_record_with_meta_has_its_time_severity_and_attributes_and_no_file() {
        use crate::record::Severity;
        let meta = RecordMeta {
            host: Some("db-1".into()),
            timestamp: 1_700_000_000,
            severity: Some(Severity::Warn),
            attributes: vec![
                ("type", AttrValue::Str("event".into())),
                ("priority", AttrValue::Int(3)),
                (
                    "tags",
                    AttrValue::List(vec!["env:dev".into(), "blue".into()]),
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect(),
        };
        let mut e = OtlpLogs::new();
        e.begin([("host.name", "web-1")]);
        e.push(&LogRecordIn {
            body: b"disk full",
            path: "",
            offset: 0,
            observed_unix_nano: 5,
            time_unix_nano: 0,
            attributes: &[],
            meta: Some(&meta),
        });
        let mut out = Vec::new();
        e.finish(&mut out);
        let req = ExportLogsServiceRequest::decode(&out[..]).unwrap();
        let r = &req.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(text(&r.body), V::StringValue("disk full".into()));
        assert_eq!(r.time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(r.observed_time_unix_nano, 5);
        assert_eq!((r.severity_number, r.severity_text.as_str()), (13, "WARN"));
        let keys: Vec<&str> = r.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, ["type", "priority", "tags", "host.name"]);
        assert_eq!(text(&r.attributes[1].value), V::IntValue(3));
        let V::ArrayValue(tags) = text(&r.attributes[2].value) else {
            panic!("{:?}", r.attributes[2]);
        };
        let tags: Vec<V> = tags
            .values
            .iter()
            .map(|v| v.value.clone().unwrap())
            .collect();
        assert_eq!(
            tags,
            [
                V::StringValue("env:dev".into()),
                V::StringValue("blue".into())
            ]
        );
        assert_eq!(text(&r.attributes[3].value), V::StringValue("db-1".into()));
    }

    #[test]
    fn a_records_own_time_and_attributes_follow_the_files_and_do_not_linger() {
        let mut e = OtlpLogs::new();
        e.begin([("host.name", "node-1")]);
        let pod = [("log.iostream", "stderr"), ("k8s.pod.name", "web-0")];
        for (attributes, time) in [(&pod[..], 42), (&pod[..1], 43), (&[][..], 0)] {
            e.push(&LogRecordIn {
                body: b"x",
                path: "/var/log/pods/a/b/0.log",
                offset: 0,
                observed_unix_nano: 1,
                time_unix_nano: time,
                attributes,
                meta: None,
            });
        }
        let mut out = Vec::new();
        e.finish(&mut out);
        let req = ExportLogsServiceRequest::decode(&out[..]).unwrap();
        let records = &req.resource_logs[0].scope_logs[0].log_records;
        let keys = |i: usize| -> Vec<&str> {
            records[i]
                .attributes
                .iter()
                .map(|a| a.key.as_str())
                .collect()
        };
        let file = ["log.file.path", "log.file.name", "log.file.record_offset"];
        assert_eq!(
            keys(0),
            [&file[..], &["log.iostream", "k8s.pod.name"]].concat()
        );
        assert_eq!(
            text(&records[0].attributes[4].value),
            V::StringValue("web-0".into())
        );
        assert_eq!(keys(1), [&file[..], &["log.iostream"]].concat());
        assert_eq!(keys(2), file);
        let times: Vec<u64> = records.iter().map(|r| r.time_unix_nano).collect();
        assert_eq!(times, [42, 43, 0]);
    }
}
