//! OTLP log records as records of the receiver's log source (named by its
//! `name`, `"otlp"` by default), routed like a `[[logs]]` source's lines
//! to every sink whose `inputs` names it.
//!
//! A record's message is its body (a string as it is; another value
//! rendered as [`crate::metrics::render`] renders a tag). Its attributes,
//! in this order: the kept resource attributes, the record's own
//! attributes, `severity_text` when sent, `trace_id` and `span_id` in hex
//! when sent, `event_name` when sent. A key that a record's fixed keys
//! take (`message`, `host`, `source`, `file`, `offset`, `timestamp`)
//! gets the prefix `attributes.`. Its time is `time_unix_nano`, else
//! `observed_time_unix_nano`, else when it arrived (seconds); its host is
//! the resource's `host.name`, else the agent's; its severity comes from
//! `severity_number`: 17 and above ERROR, 13 to 16 WARN, 9 to 12 INFO,
//! none below.

use std::borrow::Cow;
use std::fmt::Write as _;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use sonde_encode::record::{AttrValue, RecordMeta, Severity};
use sonde_log_sources::events::EventRecord;

use crate::metrics::render;

/// Keys of the JSON record that attributes may not take.
const FIXED: [&str; 6] = ["message", "host", "source", "file", "offset", "timestamp"];

fn key(k: &str) -> Cow<'static, str> {
    if FIXED.contains(&k) {
        Cow::Owned(format!("attributes.{k}"))
    } else {
        Cow::Owned(k.to_string())
    }
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    let mut s = String::new();
    render(&mut s, v);
    s
}

fn attribute(kv: &KeyValue) -> (Cow<'static, str>, AttrValue) {
    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::IntValue(i)) => AttrValue::Int(*i),
        _ => AttrValue::Str(text(kv.value.as_ref())),
    };
    (key(&kv.key), value)
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The records of `req`, each with the bytes it counts for against the
/// source's queue; `keep` names the resource attributes kept and `now` is
/// the time of arrival (seconds since the epoch).
pub fn records(
    req: &ExportLogsServiceRequest,
    keep: &[String],
    now: i64,
) -> Vec<(usize, EventRecord)> {
    let mut out = Vec::new();
    for rl in &req.resource_logs {
        let resource: Vec<&KeyValue> = rl
            .resource
            .as_ref()
            .map(|r| {
                r.attributes
                    .iter()
                    .filter(|kv| keep.contains(&kv.key))
                    .collect()
            })
            .unwrap_or_default();
        let host = rl.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == "host.name")
                .map(|kv| text(kv.value.as_ref()))
        });
        for sl in &rl.scope_logs {
            for r in &sl.log_records {
                let message = text(r.body.as_ref()).into_bytes();
                let mut attributes: Vec<(Cow<'static, str>, AttrValue)> = resource
                    .iter()
                    .map(|kv| attribute(kv))
                    .chain(r.attributes.iter().map(attribute))
                    .collect();
                if !r.severity_text.is_empty() {
                    attributes.push((
                        "severity_text".into(),
                        AttrValue::Str(r.severity_text.clone()),
                    ));
                }
                if !r.trace_id.is_empty() {
                    attributes.push(("trace_id".into(), AttrValue::Str(hex(&r.trace_id))));
                }
                if !r.span_id.is_empty() {
                    attributes.push(("span_id".into(), AttrValue::Str(hex(&r.span_id))));
                }
                if !r.event_name.is_empty() {
                    attributes.push(("event_name".into(), AttrValue::Str(r.event_name.clone())));
                }
                let nanos = if r.time_unix_nano != 0 {
                    r.time_unix_nano
                } else {
                    r.observed_time_unix_nano
                };
                let timestamp = if nanos == 0 {
                    now
                } else {
                    i64::try_from(nanos / 1_000_000_000).unwrap_or(now)
                };
                let severity = match r.severity_number {
                    17.. => Some(Severity::Error),
                    13..=16 => Some(Severity::Warn),
                    9..=12 => Some(Severity::Info),
                    _ => None,
                };
                // What the record holds, as a line's length counts for a
                // line: its message and its attributes' text.
                let size = message.len()
                    + attributes
                        .iter()
                        .map(|(k, v)| k.len() + v.to_text().len())
                        .sum::<usize>();
                let meta = RecordMeta {
                    host: host.clone(),
                    timestamp,
                    severity,
                    attributes,
                };
                out.push((size, EventRecord::new(message, meta)));
            }
        }
    }
    out
}
