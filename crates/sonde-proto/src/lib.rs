//! Wire formats of sonde: the metricserver2 msgpack protocol and StatsD /
//! DogStatsD text, plus the tag splitters both need.
//!
//! Everything here is synchronous and does no I/O, so it can be fuzzed and
//! benchmarked on its own. Parsers read a borrowed datagram and push
//! borrowed [`Point`]s into a [`PointSink`] that the caller owns: the parser
//! drives, the sink receives. Nothing is allocated per point; names, tags
//! and set members stay slices of the input buffer.
//!
//! Bad input never stops a parser. Each malformed message or line is
//! reported once through [`PointSink::drop`] with a [`DropReason`], and the
//! parser carries on with the next message of the bunch or the next line of
//! the datagram.
//!
//! ```
//! use sonde_proto::{statsd, DropReason, Point, PointSink, Value};
//!
//! #[derive(Default)]
//! struct Collect(Vec<(String, f64)>, usize);
//! impl PointSink<'_> for Collect {
//!     fn point(&mut self, p: &Point<'_>) {
//!         if let Value::Number(v) = p.value {
//!             self.0.push((String::from_utf8_lossy(p.name).into_owned(), v));
//!         }
//!     }
//!     fn drop(&mut self, _reason: DropReason) {
//!         self.1 += 1;
//!     }
//! }
//!
//! let mut sink = Collect::default();
//! statsd::parse(b"web.hits:1|c\ngarbage\nweb.ms:12.5|ms", &mut sink);
//! assert_eq!(sink.0, vec![("web.hits".to_string(), 1.0), ("web.ms".to_string(), 12.5)]);
//! assert_eq!(sink.1, 1);
//! ```
#![deny(missing_docs)]

pub mod msgpack;
pub mod number;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod simd;
pub mod statsd;
pub mod tags;

/// The metric type of a point, as the aggregator needs it.
///
/// The first seven are the msgpack (metricserver2) types; the last three
/// exist only in StatsD. StatsD timers, histograms and distributions all map
/// to [`Kind::Timer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// msgpack `counter`: reported as a running total since the series appeared.
    Counter = 0,
    /// msgpack `rate_counter`: reported as the window's sum per second.
    RateCounter = 1,
    /// msgpack `meter`: a running total plus a per-second rate.
    Meter = 2,
    /// msgpack `timer`, StatsD `ms`, `h` and `d`: a distribution of samples.
    Timer = 3,
    /// msgpack `store`: the last value received in the window.
    Store = 4,
    /// msgpack `ts_store`: the last value per client timestamp.
    TsStore = 5,
    /// msgpack `histogram`: counts per configured bucket bound.
    Histogram = 6,
    /// StatsD `c`: the window's sum after sample-rate scaling.
    Count = 7,
    /// StatsD `g`: the last value, kept across windows; `+n`/`-n` adjust it.
    Gauge = 8,
    /// StatsD `s`: the number of distinct members seen in the window.
    Set = 9,
}

impl Kind {
    /// Every kind, in discriminant order.
    pub const ALL: [Kind; 10] = [
        Kind::Counter,
        Kind::RateCounter,
        Kind::Meter,
        Kind::Timer,
        Kind::Store,
        Kind::TsStore,
        Kind::Histogram,
        Kind::Count,
        Kind::Gauge,
        Kind::Set,
    ];

    /// The kind for a discriminant byte, as stored in series keys.
    pub fn from_u8(byte: u8) -> Option<Kind> {
        Kind::ALL.get(usize::from(byte)).copied()
    }

    /// A short lowercase name (`counter`, `gauge`, ...), used in vectors and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::RateCounter => "rate_counter",
            Kind::Meter => "meter",
            Kind::Timer => "timer",
            Kind::Store => "store",
            Kind::TsStore => "ts_store",
            Kind::Histogram => "histogram",
            Kind::Count => "count",
            Kind::Gauge => "gauge",
            Kind::Set => "set",
        }
    }
}

/// How the raw tag string of a point is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagSyntax {
    /// metricserver2: `k=v` pairs separated by `|` or a space.
    Msgpack,
    /// DogStatsD: `k:v` pairs separated by `,`; a tag without `:` has an empty value.
    DogStatsd,
    /// The agent's own inputs (host metrics, scraping, OTLP): each tag its
    /// key and then its value, each after its length as a LEB128 varint.
    /// Any bytes, nothing to escape: an input writes a tag with two
    /// copies, where a separated syntax would have it look for its
    /// separators first.
    Prefixed,
}

/// The value carried by a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// A finite number: a sample, an increment or a gauge's new value.
    Number(f64),
    /// A StatsD gauge adjustment (`+n` or `-n`): added to the previous value.
    Delta(f64),
    /// A StatsD set member, as received.
    Member(&'a [u8]),
}

/// One data point, borrowed from the datagram it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point<'a> {
    /// The metric type.
    pub kind: Kind,
    /// The full metric name; never empty.
    pub name: &'a [u8],
    /// The raw tag string as received (possibly empty), in `tag_syntax`.
    pub tags: &'a [u8],
    /// How `tags` is written.
    pub tag_syntax: TagSyntax,
    /// The value; always finite.
    pub value: Value<'a>,
    /// StatsD `@rate` in `(0, 1]`; `1.0` when absent and for msgpack.
    pub sample_rate: f64,
    /// Client timestamp in unix seconds: msgpack `ts_store`'s `TS`, StatsD `|T`.
    pub timestamp: Option<i64>,
}

/// Receives what a parser finds: the parser drives, the sink is called once
/// per good point and once per dropped message or line.
///
/// The lifetime is the input's: a sink may keep the points of one call to
/// a parser (the agent's recorder collects a few before it looks their
/// series up together, so that their cache misses overlap).
pub trait PointSink<'a> {
    /// Called for every well-formed point, in input order.
    fn point(&mut self, point: &Point<'a>);
    /// Called once for every message, line or tag string that was dropped.
    fn drop(&mut self, reason: DropReason);
    /// Called for every DogStatsD event or service check line (without
    /// its terminator), unparsed: a sink that routes them parses it with
    /// [`statsd::event::parse`]. By default it is counted as dropped
    /// ([`statsd::event::unrouted`]).
    fn event(&mut self, line: &'a [u8]) {
        self.drop(statsd::event::unrouted(line));
    }
}

/// Why a parser (or the receiver framing its input) dropped a message or
/// line. Each reason is exported as a label value, so the set is closed and
/// every variant is reachable from some input. Points that parse but that
/// the aggregator refuses (series limits, tags that do not split) have
/// reasons of their own in `sonde-aggregate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// msgpack data ended in the middle of a value.
    Truncated = 0,
    /// msgpack data that is not an array, or an element of the wrong msgpack type.
    Malformed = 1,
    /// A msgpack message that is not an array of exactly 6 elements.
    WrongArity = 2,
    /// A msgpack command other than `emit`.
    UnknownCommand = 3,
    /// A metric type that neither protocol defines.
    UnknownType = 4,
    /// A value that is not a finite number.
    BadValue = 5,
    /// A timestamp that is not an integer, or a `ts_store` without one.
    BadTimestamp = 6,
    /// An empty metric name.
    EmptyName = 7,
    /// A StatsD `@rate` that is not a number in `(0, 1]`.
    BadSampleRate = 8,
    /// A StatsD line without `name:value|type` shape.
    MalformedLine = 9,
    /// A DogStatsD event (`_e{...}`) that no sink takes (`inputs =
    /// ["dogstatsd_events"]`): counted and ignored.
    Event = 10,
    /// A DogStatsD service check (`_sc|...`) that no sink takes: counted
    /// and ignored.
    ServiceCheck = 11,
    /// A datagram larger than the receive buffer, or a stream line too
    /// long: input the receiver cannot frame into whole messages or lines.
    Oversized = 12,
    /// A DogStatsD event or service check that breaks its shape
    /// ([`statsd::event`]).
    MalformedEvent = 13,
}

impl DropReason {
    /// Every reason, in discriminant order.
    pub const ALL: [DropReason; 14] = [
        DropReason::Truncated,
        DropReason::Malformed,
        DropReason::WrongArity,
        DropReason::UnknownCommand,
        DropReason::UnknownType,
        DropReason::BadValue,
        DropReason::BadTimestamp,
        DropReason::EmptyName,
        DropReason::BadSampleRate,
        DropReason::MalformedLine,
        DropReason::Event,
        DropReason::ServiceCheck,
        DropReason::Oversized,
        DropReason::MalformedEvent,
    ];

    /// The snake_case label value used on `/metrics` and in test vectors.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::Malformed => "malformed",
            DropReason::WrongArity => "wrong_arity",
            DropReason::UnknownCommand => "unknown_command",
            DropReason::UnknownType => "unknown_type",
            DropReason::BadValue => "bad_value",
            DropReason::BadTimestamp => "bad_timestamp",
            DropReason::EmptyName => "empty_name",
            DropReason::BadSampleRate => "bad_sample_rate",
            DropReason::MalformedLine => "malformed_line",
            DropReason::Event => "event",
            DropReason::ServiceCheck => "service_check",
            DropReason::Oversized => "oversized",
            DropReason::MalformedEvent => "malformed_event",
        }
    }
}
