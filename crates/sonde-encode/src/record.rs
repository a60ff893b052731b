//! What a log record that was not read from a file says about itself: a
//! DogStatsD event or service check carries its own time, host, severity
//! and attributes, where a line of a file has only its path and offset.
//! Every log encoder writes these the same way: the JSON record as
//! top-level keys, OTLP as the record's time, severity and attributes,
//! Kafka's raw format as headers.

use std::borrow::Cow;

/// A record's own time, host, severity and attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMeta {
    /// The host the record is about, where it names one (an event's
    /// `h:`); the agent's host otherwise.
    pub host: Option<String>,
    /// When it happened, seconds since the Unix epoch.
    pub timestamp: i64,
    /// How severe, for encoders that have a severity (OTLP).
    pub severity: Option<Severity>,
    /// Its attributes, in the order encoders write them.
    pub attributes: Vec<(Cow<'static, str>, AttrValue)>,
}

/// The value of a [`RecordMeta`] attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A list of strings (tags).
    List(Vec<String>),
}

impl AttrValue {
    /// The value as one string (a list comma-joined), for encodings that
    /// have only strings (Kafka headers).
    pub fn to_text(&self) -> String {
        match self {
            AttrValue::Str(s) => s.clone(),
            AttrValue::Int(n) => n.to_string(),
            AttrValue::List(l) => l.join(","),
        }
    }
}

/// A record's severity, on OpenTelemetry's scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// `INFO`, 9.
    Info,
    /// `WARN`, 13.
    Warn,
    /// `ERROR`, 17.
    Error,
}

impl Severity {
    /// OpenTelemetry's `SeverityNumber`.
    pub fn number(self) -> i32 {
        match self {
            Severity::Info => 9,
            Severity::Warn => 13,
            Severity::Error => 17,
        }
    }

    /// OpenTelemetry's short name.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
            Severity::Error => "ERROR",
        }
    }
}
