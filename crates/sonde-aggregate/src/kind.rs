//! What a series aggregates: the first byte of its key.

use sonde_proto::{Kind, Point};

/// The aggregation a series follows, one per row of the table in
/// ARCHITECTURE.md ("Metric semantics"). Mostly the point's [`Kind`]; a
/// StatsD gauge or count with a client timestamp (`|T`) keeps one value per
/// timestamp instead, so it is a series of its own.
///
/// The discriminants are [`Kind`]'s, then [`SeriesKind::TsSum`]: the byte
/// is the first byte of a series key (see [`crate::key`]), so a point of
/// one name and tags under two kinds makes two series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SeriesKind {
    /// msgpack `counter`: a running total.
    Counter = Kind::Counter as u8,
    /// msgpack `rate_counter`: the window's sum per second.
    RateCounter = Kind::RateCounter as u8,
    /// msgpack `meter`: a running total and the window's sum per second.
    Meter = Kind::Meter as u8,
    /// msgpack `timer`, StatsD `ms`, `h`, `d`: a distribution per window.
    Timer = Kind::Timer as u8,
    /// msgpack `store`: the window's last value.
    Store = Kind::Store as u8,
    /// msgpack `ts_store`, and a StatsD gauge with a client timestamp: the
    /// last value per client timestamp.
    TsStore = Kind::TsStore as u8,
    /// msgpack `histogram`: cumulative counts per configured bound.
    Histogram = Kind::Histogram as u8,
    /// StatsD `c`: the window's sum.
    Count = Kind::Count as u8,
    /// StatsD `g`: a value kept across windows.
    Gauge = Kind::Gauge as u8,
    /// StatsD `s`: distinct members per window.
    Set = Kind::Set as u8,
    /// StatsD `c` with a client timestamp: the sum per client timestamp.
    TsSum = 10,
}

impl SeriesKind {
    /// The series kind a point is recorded under.
    #[inline]
    pub fn of(p: &Point<'_>) -> SeriesKind {
        match (p.kind, p.timestamp) {
            (Kind::Gauge, Some(_)) => SeriesKind::TsStore,
            (Kind::Count, Some(_)) => SeriesKind::TsSum,
            (k, _) => SeriesKind::from(k),
        }
    }

    /// The key byte of this kind.
    #[inline]
    pub fn byte(self) -> u8 {
        self as u8
    }
}

impl From<Kind> for SeriesKind {
    #[inline]
    fn from(k: Kind) -> SeriesKind {
        match k {
            Kind::Counter => SeriesKind::Counter,
            Kind::RateCounter => SeriesKind::RateCounter,
            Kind::Meter => SeriesKind::Meter,
            Kind::Timer => SeriesKind::Timer,
            Kind::Store => SeriesKind::Store,
            Kind::TsStore => SeriesKind::TsStore,
            Kind::Histogram => SeriesKind::Histogram,
            Kind::Count => SeriesKind::Count,
            Kind::Gauge => SeriesKind::Gauge,
            Kind::Set => SeriesKind::Set,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_point_kind_keeps_its_key_byte() {
        for k in Kind::ALL {
            assert_eq!(SeriesKind::from(k).byte(), k as u8, "{k:?}");
        }
        assert!(Kind::from_u8(SeriesKind::TsSum.byte()).is_none());
    }
}
