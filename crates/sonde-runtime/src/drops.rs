//! The one set of reasons a receiver reports drops under.
//!
//! Each layer that drops input says why in its own terms: the parsers and
//! the receiver's framing with [`DropReason`], the aggregator with
//! [`RecordError`]. Users see one `reason` label on
//! `sonde_receiver_dropped_total`; this is where both map to it.

use sonde_aggregate::RecordError;
use sonde_proto::DropReason;

/// The `reason` label of `sonde_receiver_dropped_total`, indexable by
/// `as usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropLabel {
    /// See [`DropReason::Truncated`].
    Truncated,
    /// See [`DropReason::Malformed`].
    Malformed,
    /// See [`DropReason::WrongArity`].
    WrongArity,
    /// See [`DropReason::UnknownCommand`].
    UnknownCommand,
    /// See [`DropReason::UnknownType`].
    UnknownType,
    /// [`DropReason::BadValue`], or [`RecordError::BadValue`].
    BadValue,
    /// [`DropReason::BadTimestamp`], or [`RecordError::MissingTimestamp`].
    BadTimestamp,
    /// See [`DropReason::EmptyName`].
    EmptyName,
    /// See [`DropReason::BadSampleRate`].
    BadSampleRate,
    /// See [`DropReason::MalformedLine`].
    MalformedLine,
    /// See [`RecordError::BadTags`].
    BadTags,
    /// See [`RecordError::InvalidUtf8`].
    InvalidUtf8,
    /// See [`DropReason::Event`].
    Event,
    /// See [`DropReason::ServiceCheck`].
    ServiceCheck,
    /// See [`DropReason::MalformedEvent`].
    MalformedEvent,
    /// A well-formed event or service check that a sink takes, dropped
    /// because the records before it are not delivered yet: the queue to
    /// the `dogstatsd_events` source is full (see `logs::events`).
    EventsBehind,
    /// Input too large to take: [`DropReason::Oversized`] (a datagram or
    /// line), or [`RecordError::FieldTooLong`], [`RecordError::SetFull`],
    /// [`RecordError::TimestampsFull`] (a point).
    Oversized,
    /// See [`RecordError::SeriesLimit`].
    SeriesLimit,
    /// See [`RecordError::MetricSeriesLimit`].
    MetricSeriesLimit,
    /// See [`RecordError::KeyTooLong`].
    KeyTooLong,
    /// Points (or log records) an input made itself (OTLP) that found its
    /// worker's queue (or its log source's) full: the request was refused
    /// with a status the client retries (HTTP 429 with `Retry-After`, gRPC
    /// `RESOURCE_EXHAUSTED` with a `RetryInfo`; 503 and `UNAVAILABLE` while
    /// the agent stops), and nothing of it was taken.
    QueueFull,
}

impl DropLabel {
    /// Every label, in the order `/metrics` lists them.
    pub const ALL: [DropLabel; 21] = [
        DropLabel::Truncated,
        DropLabel::Malformed,
        DropLabel::WrongArity,
        DropLabel::UnknownCommand,
        DropLabel::UnknownType,
        DropLabel::BadValue,
        DropLabel::BadTimestamp,
        DropLabel::EmptyName,
        DropLabel::BadSampleRate,
        DropLabel::MalformedLine,
        DropLabel::BadTags,
        DropLabel::InvalidUtf8,
        DropLabel::Event,
        DropLabel::ServiceCheck,
        DropLabel::MalformedEvent,
        DropLabel::EventsBehind,
        DropLabel::Oversized,
        DropLabel::SeriesLimit,
        DropLabel::MetricSeriesLimit,
        DropLabel::KeyTooLong,
        DropLabel::QueueFull,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropLabel::Truncated => "truncated",
            DropLabel::Malformed => "malformed",
            DropLabel::WrongArity => "wrong_arity",
            DropLabel::UnknownCommand => "unknown_command",
            DropLabel::UnknownType => "unknown_type",
            DropLabel::BadValue => "bad_value",
            DropLabel::BadTimestamp => "bad_timestamp",
            DropLabel::EmptyName => "empty_name",
            DropLabel::BadSampleRate => "bad_sample_rate",
            DropLabel::MalformedLine => "malformed_line",
            DropLabel::BadTags => "bad_tags",
            DropLabel::InvalidUtf8 => "invalid_utf8",
            DropLabel::Event => "event",
            DropLabel::ServiceCheck => "service_check",
            DropLabel::MalformedEvent => "malformed_event",
            DropLabel::EventsBehind => "events_behind",
            DropLabel::Oversized => "oversized",
            DropLabel::SeriesLimit => "series_limit",
            DropLabel::MetricSeriesLimit => "metric_series_limit",
            DropLabel::KeyTooLong => "key_too_long",
            DropLabel::QueueFull => "queue_full",
        }
    }
}

impl From<DropReason> for DropLabel {
    fn from(r: DropReason) -> DropLabel {
        match r {
            DropReason::Truncated => DropLabel::Truncated,
            DropReason::Malformed => DropLabel::Malformed,
            DropReason::WrongArity => DropLabel::WrongArity,
            DropReason::UnknownCommand => DropLabel::UnknownCommand,
            DropReason::UnknownType => DropLabel::UnknownType,
            DropReason::BadValue => DropLabel::BadValue,
            DropReason::BadTimestamp => DropLabel::BadTimestamp,
            DropReason::EmptyName => DropLabel::EmptyName,
            DropReason::BadSampleRate => DropLabel::BadSampleRate,
            DropReason::MalformedLine => DropLabel::MalformedLine,
            DropReason::Event => DropLabel::Event,
            DropReason::ServiceCheck => DropLabel::ServiceCheck,
            DropReason::Oversized => DropLabel::Oversized,
            DropReason::MalformedEvent => DropLabel::MalformedEvent,
        }
    }
}

impl From<RecordError> for DropLabel {
    fn from(e: RecordError) -> DropLabel {
        match e {
            RecordError::BadTags => DropLabel::BadTags,
            RecordError::BadValue => DropLabel::BadValue,
            RecordError::MissingTimestamp => DropLabel::BadTimestamp,
            RecordError::InvalidUtf8 => DropLabel::InvalidUtf8,
            RecordError::FieldTooLong | RecordError::SetFull | RecordError::TimestampsFull => {
                DropLabel::Oversized
            }
            RecordError::SeriesLimit => DropLabel::SeriesLimit,
            RecordError::MetricSeriesLimit => DropLabel::MetricSeriesLimit,
            RecordError::KeyTooLong => DropLabel::KeyTooLong,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_listed_in_index_order() {
        for (i, l) in DropLabel::ALL.iter().enumerate() {
            assert_eq!(*l as usize, i, "{l:?}");
        }
    }

    #[test]
    fn parse_reasons_keep_their_own_label() {
        for r in DropReason::ALL {
            assert_eq!(DropLabel::from(r).as_str(), r.as_str());
        }
    }

    #[test]
    fn aggregator_reasons_map_to_the_labels_users_know() {
        let cases = [
            (RecordError::BadTags, "bad_tags"),
            (RecordError::BadValue, "bad_value"),
            (RecordError::MissingTimestamp, "bad_timestamp"),
            (RecordError::InvalidUtf8, "invalid_utf8"),
            (RecordError::FieldTooLong, "oversized"),
            (RecordError::SetFull, "oversized"),
            (RecordError::TimestampsFull, "oversized"),
            (RecordError::SeriesLimit, "series_limit"),
            (RecordError::MetricSeriesLimit, "metric_series_limit"),
            (RecordError::KeyTooLong, "key_too_long"),
        ];
        for (e, label) in cases {
            assert_eq!(DropLabel::from(e).as_str(), label, "{e:?}");
        }
    }
}
