//! Why the aggregator drops a point.

/// Why [`Shard::record`](crate::Shard::record) dropped a point: reasons
/// of the aggregation layer, found once a point parsed. The parsers' own
/// reasons are [`sonde_proto::DropReason`]; the receiver counts both under
/// one set of labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RecordError {
    /// A tag string that cannot be split (a msgpack pair without `=`, an
    /// empty key), found when the point's series is looked up by its tags.
    #[error("tag string cannot be split into pairs")]
    BadTags,
    /// A value the series' kind does not take: a set member for a number
    /// kind, a number for a set, or a gauge adjustment with a client
    /// timestamp (there is no earlier value at that timestamp to adjust).
    #[error("value does not fit the metric kind")]
    BadValue,
    /// A point of a kind kept per client timestamp that carries none.
    #[error("point of a per-timestamp series without a client timestamp")]
    MissingTimestamp,
    /// A name or tag that is not valid UTF-8 (checked when a series is
    /// created).
    #[error("name or tag is not valid UTF-8")]
    InvalidUtf8,
    /// A name or tag over 65535 bytes, or over 65535 tags: more than a
    /// series key can lay out.
    #[error("name or tag over 65535 bytes, or over 65535 tags")]
    FieldTooLong,
    /// A new member of a set that already holds
    /// [`AggregateConfig::max_set_members`](crate::AggregateConfig::max_set_members).
    #[error("set already holds its maximum number of members")]
    SetFull,
    /// A new timestamp of a series that already holds
    /// [`AggregateConfig::max_timestamps_per_series`](crate::AggregateConfig::max_timestamps_per_series)
    /// in the window.
    #[error("series already holds its maximum number of timestamps")]
    TimestampsFull,
    /// A point that would create a series beyond
    /// [`AggregateConfig::max_series`](crate::AggregateConfig::max_series)
    /// (the series already live keep their data).
    #[error("new series beyond the series limit")]
    SeriesLimit,
    /// A point that would create a series beyond
    /// [`AggregateConfig::max_series_per_metric`](crate::AggregateConfig::max_series_per_metric)
    /// for its metric name.
    #[error("new series beyond the series limit of its metric")]
    MetricSeriesLimit,
    /// A point of a new series whose name and tags together are longer
    /// than [`AggregateConfig::max_key_bytes`](crate::AggregateConfig::max_key_bytes).
    #[error("new series with a name and tags over the key size limit")]
    KeyTooLong,
}

impl From<sonde_proto::tags::BadTags> for RecordError {
    fn from(_: sonde_proto::tags::BadTags) -> RecordError {
        RecordError::BadTags
    }
}
