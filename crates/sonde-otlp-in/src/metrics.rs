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

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use prost::Message;
use sonde_metrics::input::{write_tag, Points, Shared};
use sonde_proto::Kind;

use crate::wire::{each_fixed64, fields, Malformed, Value};

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

/// How deep arrays and maps may nest in an attribute value: as deep as
/// prost decodes a message.
const MAX_DEPTH: u32 = 100;

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
}

/// An attribute's value, borrowed from the request body.
#[derive(Debug, Clone, Copy)]
enum Any<'a> {
    None,
    /// A string's bytes: a tag keeps them as sent, and the shard refuses
    /// a new series that is not UTF-8 (counted), as it does a StatsD
    /// line's.
    Str(&'a [u8]),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(&'a [u8]),
    /// An `ArrayValue` message.
    Array(&'a [u8]),
    /// A `KeyValueList` message.
    Kvlist(&'a [u8]),
}

/// An `AnyValue` message.
#[inline(always)]
fn any(buf: &[u8]) -> Result<Any<'_>, Malformed> {
    let mut v = Any::None;
    for f in fields(buf) {
        let (tag, x) = f?;
        v = match tag {
            1 => Any::Str(x.bytes()?),
            2 => Any::Bool(x.varint()? != 0),
            3 => Any::Int(x.varint()? as i64),
            4 => Any::Double(x.double()?),
            5 => Any::Array(x.bytes()?),
            6 => Any::Kvlist(x.bytes()?),
            7 => Any::Bytes(x.bytes()?),
            // An index into a profile's string table: no meaning outside
            // one.
            8 => Any::None,
            _ => v,
        };
    }
    Ok(v)
}

/// A `KeyValue` message.
#[inline(always)]
fn key_value(buf: &[u8]) -> Result<(&[u8], Any<'_>), Malformed> {
    // The bytes every SDK writes for a string attribute whose key and
    // value are under 128 bytes: `0a KLEN key 12 ALEN 0a SLEN string`,
    // taken without walking three messages' fields (a third of a point's
    // cost; docs/BENCHMARKS.md, "OTLP in"). Anything else is walked.
    if let [0x0a, klen, rest @ ..] = buf {
        let klen = usize::from(*klen);
        if klen < 0x80 && rest.len() >= klen {
            let (key, rest) = rest.split_at(klen);
            if let [0x12, alen, 0x0a, slen, s @ ..] = rest {
                if *alen < 0x80
                    && usize::from(*alen) == s.len() + 2
                    && usize::from(*slen) == s.len()
                {
                    return Ok((key, Any::Str(s)));
                }
            }
        }
    }
    let mut key: &[u8] = b"";
    let mut value = Any::None;
    for f in fields(buf) {
        match f? {
            (1, x) => key = x.bytes()?,
            (2, x) => value = any(x.bytes()?)?,
            _ => {}
        }
    }
    Ok((key, value))
}

fn utf8(b: &[u8]) -> Result<&str, Malformed> {
    std::str::from_utf8(b).map_err(|_| Malformed("a string is not UTF-8"))
}

/// A borrowed attribute value as a tag value, by the rules of [`render`].
fn render_wire(out: &mut String, value: Any<'_>, depth: u32) -> Result<(), Malformed> {
    if depth > MAX_DEPTH {
        return Err(Malformed("attribute values nest too deep"));
    }
    match value {
        Any::None => {}
        Any::Str(s) => out.push_str(utf8(s)?),
        Any::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Any::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Any::Double(d) => {
            let _ = write!(out, "{d}");
        }
        Any::Bytes(b) => {
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
        }
        Any::Array(a) => {
            out.push('[');
            let mut first = true;
            for f in fields(a) {
                let (tag, x) = f?;
                if tag != 1 {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                render_wire(out, any(x.bytes()?)?, depth + 1)?;
            }
            out.push(']');
        }
        Any::Kvlist(l) => {
            out.push('{');
            let mut first = true;
            for f in fields(l) {
                let (tag, x) = f?;
                if tag != 1 {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                let (k, v) = key_value(x.bytes()?)?;
                out.push_str(utf8(k)?);
                out.push('=');
                render_wire(out, v, depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// An attribute value as a tag value: strings as they are, numbers and
/// booleans as text, bytes in hex, arrays and maps in a JSON-like form.
/// A value other than a string is encoded again and rendered by the
/// rules the metrics mapping applies to the values it reads in place,
/// so that both render alike.
pub fn render(out: &mut String, value: Option<&AnyValue>) {
    match value.and_then(|v| v.value.as_ref()) {
        None => {}
        Some(any_value::Value::StringValue(s)) => out.push_str(s),
        Some(_) => {
            let bytes = value.map(Message::encode_to_vec).unwrap_or_default();
            // What prost just encoded reads back, and nests no deeper
            // than prost decodes.
            if let Ok(v) = any(&bytes) {
                let _ = render_wire(out, v, 0);
            }
        }
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
        }
    }

    /// Cumulative series whose state is kept.
    pub fn series(&self) -> usize {
        self.state.len()
    }

    /// The points of `body`, an `ExportMetricsServiceRequest` in
    /// protobuf, read in place ([`crate::wire`]); the state is not changed
    /// until [`Mapper::commit`].
    ///
    /// # Errors
    ///
    /// When the body is not such a request: nothing of it is taken.
    pub fn map(&mut self, body: &[u8]) -> Result<Mapped, Malformed> {
        self.map_into(body, Points::new())
    }

    /// [`Mapper::map`] into `points`, an empty batch whose memory is
    /// reused ([`sonde_metrics::input::PointsSender::batch`]).
    ///
    /// # Errors
    ///
    /// When the body is not such a request: nothing of it is taken.
    pub fn map_into(&mut self, body: &[u8], points: Points) -> Result<Mapped, Malformed> {
        let mut out = Mapped {
            points,
            ..Mapped::default()
        };
        // About what the points' names and tags take: a guess that saves
        // most of the batch's growing.
        out.points.reserve(body.len() / 64, body.len());
        let mut resource: Vec<u8> = Vec::new();
        let mut scratch = Scratch::default();
        let now = Instant::now();
        for f in fields(body) {
            let (tag, rm) = f?;
            if tag != 1 {
                continue;
            }
            let rm = rm.bytes()?;
            // The resource first, wherever it was written.
            resource.clear();
            let mut rh = self.hasher.build_hasher();
            for f in fields(rm) {
                let (tag, r) = f?;
                if tag != 1 {
                    continue;
                }
                for f in fields(r.bytes()?) {
                    let (tag, kv) = f?;
                    if tag != 1 {
                        continue;
                    }
                    let (k, v) = key_value(kv.bytes()?)?;
                    rh.write(k);
                    rh.write_u8(0xff);
                    scratch.text.clear();
                    render_wire(&mut scratch.text, v, 0)?;
                    rh.write(scratch.text.as_bytes());
                    rh.write_u8(0xfe);
                    if self.keep.iter().any(|x| x.as_bytes() == k) {
                        let text = match v {
                            Any::Str(s) => s,
                            _ => scratch.text.as_bytes(),
                        };
                        write_tag(&mut resource, k, text);
                    }
                }
            }
            let resource_hash = rh.finish();
            for f in fields(rm) {
                let (tag, sm) = f?;
                if tag == 2 {
                    self.scope(
                        sm.bytes()?,
                        resource_hash,
                        &resource,
                        &mut scratch,
                        &mut out,
                        now,
                    )?;
                }
            }
        }
        Ok(out)
    }

    /// One `ScopeMetrics` message.
    fn scope(
        &mut self,
        sm: &[u8],
        resource_hash: u64,
        resource: &[u8],
        scratch: &mut Scratch,
        out: &mut Mapped,
        now: Instant,
    ) -> Result<(), Malformed> {
        let mut sh = self.hasher.build_hasher();
        sh.write_u64(resource_hash);
        for f in fields(sm) {
            let (tag, scope) = f?;
            if tag != 1 {
                continue;
            }
            for f in fields(scope.bytes()?) {
                match f? {
                    (1, name) => sh.write(name.bytes()?),
                    (2, version) => {
                        sh.write_u8(0xff);
                        sh.write(version.bytes()?);
                    }
                    _ => {}
                }
            }
        }
        let scope_hash = sh.finish();
        for f in fields(sm) {
            let (tag, m) = f?;
            if tag != 2 {
                continue;
            }
            let mut cx = Cx {
                mapper: self,
                out: &mut *out,
                resource,
                scope_hash,
                name: "",
                now,
                s: &mut *scratch,
                keyed: false,
            };
            cx.metric(m.bytes()?)?;
        }
        Ok(())
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

/// Buffers reused from point to point of one request.
#[derive(Debug, Default)]
struct Scratch {
    /// A histogram's counts at or below each bound, then +Inf, its sum
    /// and its count; or a sum's value.
    totals: Vec<f64>,
    bounds: Vec<f64>,
    /// The metric's names, by suffix, written once in the batch.
    names: [Option<Shared>; Suffix::ALL.len()],
    /// The point's tags, the resource's then its attributes, written once
    /// in the batch.
    tags: Shared,
    /// An extra tag's value (`le`, `quantile`), or a value being hashed.
    text: String,
}

/// A data point's common fields.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    start: u64,
    time: u64,
    flags: u64,
    /// Where the point's tags begin in the batch ([`Points::tags_begin`]).
    begin: usize,
    /// A hash of its attributes, in order, when the metric is cumulative.
    attrs: u64,
}

/// `DataPointFlags.FLAG_NO_RECORDED_VALUE`.
const NO_RECORDED_VALUE: u64 = 1;
/// `AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE`.
const CUMULATIVE: u64 = 2;

// Field numbers of `Metric`'s data.
const GAUGE: u32 = 5;
const SUM: u32 = 7;
const HISTOGRAM: u32 = 9;
const EXPONENTIAL_HISTOGRAM: u32 = 10;
const SUMMARY: u32 = 11;

/// What follows a metric's name in the name of a point made of it.
#[derive(Debug, Clone, Copy)]
enum Suffix {
    None,
    Bucket,
    Sum,
    Count,
    Min,
    Max,
}

impl Suffix {
    const ALL: [Suffix; 6] = [
        Suffix::None,
        Suffix::Bucket,
        Suffix::Sum,
        Suffix::Count,
        Suffix::Min,
        Suffix::Max,
    ];

    fn text(self) -> &'static str {
        match self {
            Suffix::None => "",
            Suffix::Bucket => ".bucket",
            Suffix::Sum => ".sum",
            Suffix::Count => ".count",
            Suffix::Min => ".min",
            Suffix::Max => ".max",
        }
    }
}

/// One metric's context while mapping.
struct Cx<'m, 'a> {
    mapper: &'m mut Mapper,
    out: &'m mut Mapped,
    /// The kept resource attributes as tags.
    resource: &'m [u8],
    scope_hash: u64,
    name: &'a str,
    now: Instant,
    s: &'m mut Scratch,
    /// Whether the metric's points are cumulative, and their attributes
    /// hashed to find their series' state.
    keyed: bool,
}

impl<'a> Cx<'_, 'a> {
    /// One `Metric` message.
    fn metric(&mut self, m: &'a [u8]) -> Result<(), Malformed> {
        let mut data = None;
        for f in fields(m) {
            match f? {
                (1, name) => self.name = name.str()?,
                (t @ (GAUGE | SUM | HISTOGRAM | EXPONENTIAL_HISTOGRAM | SUMMARY), d) => {
                    data = Some((t, d.bytes()?));
                }
                _ => {}
            }
        }
        self.s.names = Default::default();
        let Some((kind, data)) = data else {
            return Ok(());
        };
        // The temporality and monotonicity follow the points as written.
        let (mut temporality, mut monotonic) = (0, false);
        for f in fields(data) {
            match f? {
                (2, t) => temporality = t.varint()?,
                (3, m) => monotonic = m.varint()? != 0,
                _ => {}
            }
        }
        let cumulative = temporality == CUMULATIVE;
        self.keyed =
            kind == SUMMARY || (cumulative && (kind != GAUGE && (kind != SUM || monotonic)));
        for f in fields(data) {
            let (tag, p) = f?;
            if tag != 1 {
                continue;
            }
            self.out.data_points += 1;
            let p = p.bytes()?;
            match kind {
                GAUGE | SUM => self.number(p, kind == SUM, monotonic, cumulative)?,
                HISTOGRAM => self.histogram(p, cumulative)?,
                EXPONENTIAL_HISTOGRAM => self.exponential(p, cumulative)?,
                _ => self.summary(p)?,
            }
        }
        Ok(())
    }

    /// Reads a point's attribute (field `attrs`) or common field into the
    /// scratch and `head`; false for any other field.
    #[inline(always)]
    fn common(
        &mut self,
        tag: u32,
        v: Value<'a>,
        attrs: u32,
        head: &mut Head,
    ) -> Result<bool, Malformed> {
        match tag {
            2 => head.start = v.fixed64()?,
            3 => head.time = v.fixed64()?,
            t if t == attrs => {
                let (k, a) = key_value(v.bytes()?)?;
                self.attr(head, k, a)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A `NumberDataPoint` of a gauge or a sum.
    fn number(
        &mut self,
        p: &'a [u8],
        sum: bool,
        monotonic: bool,
        cumulative: bool,
    ) -> Result<(), Malformed> {
        let mut head = self.head();
        let mut value = f64::NAN;
        if !self.number_fast(p, &mut head, &mut value)? {
            self.out.points.tags_reset(head.begin);
            head = self.head();
            value = f64::NAN;
            for f in fields(p) {
                let (tag, v) = f?;
                if self.common(tag, v, 7, &mut head)? {
                    continue;
                }
                match tag {
                    4 => value = v.double()?,
                    6 => value = v.fixed64()? as i64 as f64,
                    8 => head.flags = v.varint()?,
                    _ => {}
                }
            }
        }
        if head.flags & NO_RECORDED_VALUE != 0 {
            return Ok(());
        }
        self.s.tags = self.out.points.tags_end(head.begin);
        match (sum, monotonic, cumulative) {
            (true, true, true) => {
                self.s.totals.clear();
                self.s.totals.push(value);
                if self.cumulative(head)? {
                    self.push(Kind::Count, Suffix::None, self.s.totals[0]);
                }
            }
            // A gauge, or an up-down counter's level.
            (false, _, _) | (true, false, true) => self.push(Kind::Store, Suffix::None, value),
            (true, _, false) => self.push(Kind::Count, Suffix::None, value),
        }
        Ok(())
    }

    /// A number point as SDKs write it, read straight through: its
    /// fields in number order, each at most once, `[11 start] [19 time]
    /// [21 double | 31 int] (3a LEN attribute)* [40 flags]`, lengths and
    /// flags under 128. False, with part of it read, when it is laid out
    /// otherwise: it is walked field by field instead. The generic walk's
    /// dispatch on each field's wire type was a third of the mapping's
    /// cost (docs/BENCHMARKS.md, "OTLP in").
    #[inline(always)]
    fn number_fast(
        &mut self,
        mut b: &'a [u8],
        head: &mut Head,
        value: &mut f64,
    ) -> Result<bool, Malformed> {
        fn fixed(b: &mut &[u8], key: u8) -> Option<u64> {
            let (&k, rest) = b.split_first()?;
            if k != key {
                return None;
            }
            let (v, rest) = rest.split_first_chunk::<8>()?;
            *b = rest;
            Some(u64::from_le_bytes(*v))
        }
        if let Some(v) = fixed(&mut b, 0x11) {
            head.start = v;
        }
        if let Some(v) = fixed(&mut b, 0x19) {
            head.time = v;
        }
        if let Some(v) = fixed(&mut b, 0x21) {
            *value = f64::from_bits(v);
        } else if let Some(v) = fixed(&mut b, 0x31) {
            *value = v as i64 as f64;
        }
        while let [0x3a, len, rest @ ..] = b {
            let len = usize::from(*len);
            if len >= 0x80 || len > rest.len() {
                return Ok(false);
            }
            let (kv, rest) = rest.split_at(len);
            let (k, a) = key_value(kv)?;
            self.attr(head, k, a)?;
            b = rest;
        }
        if let [0x40, flags, rest @ ..] = b {
            if *flags < 0x80 {
                head.flags = u64::from(*flags);
                b = rest;
            }
        }
        Ok(b.is_empty())
    }

    /// A `HistogramDataPoint`.
    fn histogram(&mut self, p: &'a [u8], cumulative: bool) -> Result<(), Malformed> {
        self.s.totals.clear();
        self.s.bounds.clear();
        let mut head = self.head();
        let (mut count, mut sum, mut min, mut max) = (0u64, None, None, None);
        for f in fields(p) {
            let (tag, v) = f?;
            if self.common(tag, v, 9, &mut head)? {
                continue;
            }
            match tag {
                4 => count = v.fixed64()?,
                5 => sum = Some(v.double()?),
                6 => {
                    let totals = &mut self.s.totals;
                    each_fixed64(v, |c| {
                        // Counts at or below each bound.
                        let run = totals.last().copied().unwrap_or(0.0) + c as f64;
                        totals.push(run);
                    })?;
                }
                7 => {
                    let bounds = &mut self.s.bounds;
                    each_fixed64(v, |b| bounds.push(f64::from_bits(b)))?;
                }
                10 => head.flags = v.varint()?,
                11 => min = Some(v.double()?),
                12 => max = Some(v.double()?),
                _ => {}
            }
        }
        if head.flags & NO_RECORDED_VALUE != 0 {
            return Ok(());
        }
        self.s.tags = self.out.points.tags_end(head.begin);
        let n = self.s.totals.len();
        self.s.totals.push(sum.unwrap_or(0.0));
        self.s.totals.push(count as f64);
        if !cumulative || self.cumulative(head)? {
            for i in 0..n {
                let le = self.s.bounds.get(i).copied().unwrap_or(f64::INFINITY);
                self.s.text.clear();
                if le == f64::INFINITY {
                    self.s.text.push_str("+Inf");
                } else {
                    let _ = write!(self.s.text, "{le}");
                }
                self.push_extra(Kind::Count, Suffix::Bucket, "le", self.s.totals[i]);
            }
            self.sum_count(sum.is_some(), n);
        }
        self.min_max(min, max);
        Ok(())
    }

    /// An `ExponentialHistogramDataPoint`: its sum, count, min and max.
    fn exponential(&mut self, p: &'a [u8], cumulative: bool) -> Result<(), Malformed> {
        let mut head = self.head();
        let (mut count, mut sum, mut min, mut max) = (0u64, None, None, None);
        for f in fields(p) {
            let (tag, v) = f?;
            if self.common(tag, v, 1, &mut head)? {
                continue;
            }
            match tag {
                4 => count = v.fixed64()?,
                5 => sum = Some(v.double()?),
                10 => head.flags = v.varint()?,
                12 => min = Some(v.double()?),
                13 => max = Some(v.double()?),
                _ => {}
            }
        }
        if head.flags & NO_RECORDED_VALUE != 0 {
            return Ok(());
        }
        self.s.tags = self.out.points.tags_end(head.begin);
        self.s.totals.clear();
        self.s.totals.push(sum.unwrap_or(0.0));
        self.s.totals.push(count as f64);
        if !cumulative || self.cumulative(head)? {
            self.sum_count(sum.is_some(), 0);
        }
        self.min_max(min, max);
        Ok(())
    }

    /// A `SummaryDataPoint`: a level per quantile; its sum and count are
    /// cumulative.
    fn summary(&mut self, p: &'a [u8]) -> Result<(), Malformed> {
        let mut head = self.head();
        let (mut count, mut sum) = (0u64, 0.0);
        let mut quantiles = false;
        for f in fields(p) {
            let (tag, v) = f?;
            if self.common(tag, v, 7, &mut head)? {
                continue;
            }
            match tag {
                4 => count = v.fixed64()?,
                5 => sum = v.double()?,
                // Read below, once the attributes are known.
                6 => quantiles = true,
                8 => head.flags = v.varint()?,
                _ => {}
            }
        }
        if head.flags & NO_RECORDED_VALUE != 0 {
            return Ok(());
        }
        self.s.tags = self.out.points.tags_end(head.begin);
        if quantiles {
            for f in fields(p) {
                let (tag, v) = f?;
                if tag != 6 {
                    continue;
                }
                let (mut q, mut value) = (0.0, 0.0);
                for f in fields(v.bytes()?) {
                    match f? {
                        (1, x) => q = x.double()?,
                        (2, x) => value = x.double()?,
                        _ => {}
                    }
                }
                self.s.text.clear();
                let _ = write!(self.s.text, "{q}");
                self.push_extra(Kind::Store, Suffix::None, "quantile", value);
            }
        }
        self.s.totals.clear();
        self.s.totals.push(sum);
        self.s.totals.push(count as f64);
        if self.cumulative(head)? {
            self.sum_count(true, 0);
        }
        Ok(())
    }

    /// `NAME.sum` (when sent) and `NAME.count` from the totals after the
    /// first `at`.
    fn sum_count(&mut self, sum: bool, at: usize) {
        if sum {
            self.push(Kind::Count, Suffix::Sum, self.s.totals[at]);
        }
        self.push(Kind::Count, Suffix::Count, self.s.totals[at + 1]);
    }

    fn min_max(&mut self, min: Option<f64>, max: Option<f64>) {
        if let Some(v) = min {
            self.push(Kind::Store, Suffix::Min, v);
        }
        if let Some(v) = max {
            self.push(Kind::Store, Suffix::Max, v);
        }
    }

    /// Turns the totals of a cumulative point into the change since the
    /// series' previous point; false when this point only sets the
    /// baseline (or repeats one), or the state has no room for it.
    fn cumulative(&mut self, head: Head) -> Result<bool, Malformed> {
        let mut h = self.mapper.hasher.build_hasher();
        h.write_u64(self.scope_hash);
        h.write(self.name.as_bytes());
        h.write_u8(0xff);
        h.write_u64(head.attrs);
        let key = h.finish();
        let totals = &mut self.s.totals;
        let prev = self
            .out
            .staged
            .get(&key)
            .or_else(|| self.mapper.state.get(&key));
        let next = Prev {
            start: head.start,
            time: head.time,
            values: totals.clone(),
            seen: self.now,
        };
        let counts = match prev {
            None => {
                if self.mapper.state.len() + self.out.staged.len() >= self.mapper.max_series
                    && !room(self.mapper, self.now)
                {
                    self.out.state_full += 1;
                    self.refuse(
                        "the state of cumulative series is full (otlp max_cumulative_series)",
                    );
                    return Ok(false);
                }
                head.start != 0 && head.start >= self.mapper.since
            }
            Some(p) => {
                let reset = p.start != head.start
                    || p.values.len() != totals.len()
                    || totals.last() < p.values.last();
                if reset {
                    true
                } else if head.time <= p.time {
                    return Ok(false);
                } else {
                    for (n, o) in totals.iter_mut().zip(&p.values) {
                        *n = (*n - o).max(0.0);
                    }
                    true
                }
            }
        };
        self.out.staged.insert(key, next);
        Ok(counts)
    }

    fn refuse(&mut self, why: &str) {
        self.out.rejected += 1;
        if self.out.message.is_empty() {
            self.out.message = why.to_string();
        }
    }

    /// A point's head, its tags begun with the resource's.
    fn head(&mut self) -> Head {
        Head {
            begin: self.out.points.tags_begin(self.resource),
            ..Head::default()
        }
    }

    /// Adds an attribute to the point's tags, and to its hash when the
    /// metric is cumulative.
    #[inline(always)]
    fn attr(&mut self, head: &mut Head, key: &[u8], value: Any<'_>) -> Result<(), Malformed> {
        let text = match value {
            Any::Str(s) => s,
            other => {
                self.s.text.clear();
                render_wire(&mut self.s.text, other, 0)?;
                self.s.text.as_bytes()
            }
        };
        self.out.points.tags_push(key, text);
        if self.keyed {
            let h = self.mapper.hasher.hash_one((key, text));
            head.attrs = head.attrs.rotate_left(19) ^ h;
        }
        Ok(())
    }

    /// The metric's name with `suffix`, written once per metric.
    fn name(&mut self, suffix: Suffix) -> Shared {
        let slot = &mut self.s.names[suffix as usize];
        if let Some(n) = slot {
            return n.clone();
        }
        let n = self
            .out
            .points
            .shared_name(self.name.as_bytes(), suffix.text().as_bytes());
        *slot = Some(n.clone());
        n
    }

    /// A point with the extra tag `key` whose value is in the scratch
    /// text.
    fn push_extra(&mut self, kind: Kind, suffix: Suffix, key: &str, value: f64) {
        let tags =
            self.out
                .points
                .shared_tags_with(&self.s.tags, key.as_bytes(), self.s.text.as_bytes());
        self.add(kind, suffix, &tags, value);
    }

    fn push(&mut self, kind: Kind, suffix: Suffix, value: f64) {
        let tags = self.s.tags.clone();
        self.add(kind, suffix, &tags, value);
    }

    fn add(&mut self, kind: Kind, suffix: Suffix, tags: &Shared, value: f64) {
        let name = self.name(suffix);
        if !self.out.points.push_shared(kind, &name, tags, value) {
            self.out.rejected += 1;
            if self.out.message.is_empty() {
                self.out.message =
                    "a value that is not a finite number, or an empty metric name".to_string();
            }
        }
    }
}

/// True when idle series would make room for a new one at commit.
fn room(mapper: &Mapper, now: Instant) -> bool {
    mapper
        .state
        .values()
        .any(|p| now.duration_since(p.seen) >= STATE_IDLE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use prost::Message;

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
    fn cumulative(pid: &str, start: u64, time: u64, value: i64) -> Vec<u8> {
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
                            aggregation_temporality: AggregationTemporality::Cumulative as i32,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    /// Maps and commits; the values and tags of the points made.
    fn send(m: &mut Mapper, req: &[u8]) -> Vec<(f64, String)> {
        let mut mapped = m.map(req).unwrap();
        m.commit(&mut mapped);
        let mut got = Vec::new();
        mapped.points.each(|p| {
            let sonde_proto::Value::Number(v) = p.value else {
                panic!()
            };
            got.push((v, sonde_metrics::input::tags_text(p.tags)));
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
        let mapped = m.map(&cumulative("11", 2_000, 3_000, 1)).unwrap();
        assert_eq!((mapped.rejected, mapped.state_full), (1, 1));
        assert!(mapped.points.is_empty());
    }

    fn any(v: any_value::Value) -> AnyValue {
        AnyValue { value: Some(v) }
    }

    fn attr(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(any(v)),
            ..Default::default()
        }
    }

    /// Every value kind, nested ones too.
    fn values() -> Vec<any_value::Value> {
        use any_value::Value as V;
        use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
        vec![
            V::StringValue("a b".into()),
            V::BoolValue(true),
            V::IntValue(-42),
            V::DoubleValue(0.25),
            V::BytesValue(vec![0, 0xab]),
            V::ArrayValue(ArrayValue {
                values: vec![any(V::IntValue(1)), any(V::StringValue("x".into()))],
            }),
            V::KvlistValue(KeyValueList {
                values: vec![
                    attr("k", V::BoolValue(false)),
                    attr(
                        "n",
                        V::ArrayValue(ArrayValue {
                            values: vec![any(V::DoubleValue(1.5))],
                        }),
                    ),
                ],
            }),
        ]
    }

    #[test]
    fn values_read_in_place_render_as_the_owned_ones() {
        for v in values() {
            let owned = any(v);
            let mut want = String::new();
            render(&mut want, Some(&owned));
            let bytes = owned.encode_to_vec();
            let mut got = String::new();
            render_wire(&mut got, super::any(&bytes).unwrap(), 0).unwrap();
            assert_eq!(got, want);
        }
    }

    /// One metric of `data` in a request from service "api".
    fn request(data: Vec<(&str, Data)>) -> Vec<u8> {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "api"), kv("process.pid", "7")],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: data
                        .into_iter()
                        .map(|(name, d)| Metric {
                            name: name.into(),
                            data: Some(d),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    /// Maps and commits; each point as `kind name tags value`.
    fn lines(m: &mut Mapper, body: &[u8]) -> (Vec<String>, u64) {
        let mut mapped = m.map(body).unwrap();
        m.commit(&mut mapped);
        let mut got = Vec::new();
        mapped.points.each(|p| {
            let sonde_proto::Value::Number(v) = p.value else {
                panic!()
            };
            got.push(format!(
                "{:?} {} {} {v}",
                p.kind,
                String::from_utf8_lossy(p.name),
                sonde_metrics::input::tags_text(p.tags)
            ));
        });
        (got, mapped.rejected)
    }

    #[test]
    fn every_kind_maps_as_the_table_says() {
        use opentelemetry_proto::tonic::metrics::v1::{
            exponential_histogram_data_point::Buckets, summary_data_point::ValueAtQuantile,
            ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
            HistogramDataPoint, Summary, SummaryDataPoint,
        };
        let number =
            |v: number_data_point::Value, attrs: Vec<KeyValue>, flags: u32| NumberDataPoint {
                attributes: attrs,
                start_time_unix_nano: 2_000,
                time_unix_nano: 3_000,
                value: Some(v),
                flags,
                ..Default::default()
            };
        let delta = AggregationTemporality::Delta as i32;
        let typed: Vec<KeyValue> = values()
            .into_iter()
            .enumerate()
            .map(|(i, v)| attr(&format!("t{i}"), v))
            .collect();
        let body = request(vec![
            (
                "temp",
                Data::Gauge(Gauge {
                    data_points: vec![
                        number(number_data_point::Value::AsDouble(21.5), typed, 0),
                        // No recorded value: left out, not refused.
                        number(number_data_point::Value::AsDouble(1.0), vec![], 1),
                    ],
                }),
            ),
            (
                "hits",
                Data::Sum(Sum {
                    data_points: vec![
                        number(
                            number_data_point::Value::AsInt(3),
                            vec![kv("code", "200")],
                            0,
                        ),
                        number(number_data_point::Value::AsDouble(f64::NAN), vec![], 0),
                    ],
                    aggregation_temporality: delta,
                    is_monotonic: true,
                }),
            ),
            (
                "queue",
                Data::Sum(Sum {
                    data_points: vec![number(number_data_point::Value::AsInt(-4), vec![], 0)],
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: false,
                }),
            ),
            (
                "lat",
                Data::Histogram(Histogram {
                    data_points: vec![HistogramDataPoint {
                        attributes: vec![kv("op", "get")],
                        count: 6,
                        sum: Some(20.0),
                        bucket_counts: vec![1, 2, 3],
                        explicit_bounds: vec![1.0, 5.0],
                        min: Some(0.5),
                        max: Some(9.0),
                        ..Default::default()
                    }],
                    aggregation_temporality: delta,
                }),
            ),
            (
                "size",
                Data::ExponentialHistogram(ExponentialHistogram {
                    data_points: vec![ExponentialHistogramDataPoint {
                        count: 4,
                        sum: Some(10.0),
                        scale: 2,
                        positive: Some(Buckets {
                            offset: 1,
                            bucket_counts: vec![4],
                        }),
                        max: Some(3.0),
                        ..Default::default()
                    }],
                    aggregation_temporality: delta,
                }),
            ),
            (
                "rpc",
                Data::Summary(Summary {
                    data_points: vec![SummaryDataPoint {
                        start_time_unix_nano: 2_000,
                        time_unix_nano: 3_000,
                        count: 10,
                        sum: 55.0,
                        quantile_values: vec![
                            ValueAtQuantile {
                                quantile: 0.5,
                                value: 4.0,
                            },
                            ValueAtQuantile {
                                quantile: 0.99,
                                value: 9.5,
                            },
                        ],
                        ..Default::default()
                    }],
                }),
            ),
        ]);
        let mut m = mapper();
        let (got, rejected) = lines(&mut m, &body);
        let r = "service.name:api";
        assert_eq!(
            got,
            [
                format!("Store temp {r},t0:a b,t1:true,t2:-42,t3:0.25,t4:00ab,t5:[1,x],t6:{{k=false,n=[1.5]}} 21.5"),
                format!("Count hits {r},code:200 3"),
                format!("Store queue {r} -4"),
                format!("Count lat.bucket {r},op:get,le:1 1"),
                format!("Count lat.bucket {r},op:get,le:5 3"),
                format!("Count lat.bucket {r},op:get,le:+Inf 6"),
                format!("Count lat.sum {r},op:get 20"),
                format!("Count lat.count {r},op:get 6"),
                format!("Store lat.min {r},op:get 0.5"),
                format!("Store lat.max {r},op:get 9"),
                format!("Count size.sum {r} 10"),
                format!("Count size.count {r} 4"),
                format!("Store size.max {r} 3"),
                format!("Store rpc {r},quantile:0.5 4"),
                format!("Store rpc {r},quantile:0.99 9.5"),
                format!("Count rpc.sum {r} 55"),
                format!("Count rpc.count {r} 10"),
            ]
        );
        // The NaN sum point.
        assert_eq!(rejected, 1);
    }

    #[test]
    fn a_broken_body_is_an_error_never_a_panic() {
        let body = cumulative("1", 2_000, 3_000, 5);
        let mut m = mapper();
        for cut in 1..body.len() {
            // A cut that still ends on a field boundary may decode.
            let _ = m.map(&body[..cut]);
        }
        // Bytes flipped one by one.
        for i in 0..body.len() {
            let mut b = body.clone();
            b[i] ^= 0xa5;
            let _ = m.map(&b);
        }
        assert!(m.map(&[0x0a, 0x7f]).is_err(), "a length past the end");
        // An attribute value nested past the limit.
        let mut v = any(any_value::Value::IntValue(1));
        for _ in 0..MAX_DEPTH + 10 {
            v = any(any_value::Value::ArrayValue(
                opentelemetry_proto::tonic::common::v1::ArrayValue { values: vec![v] },
            ));
        }
        let deep = request(vec![(
            "g",
            Data::Gauge(opentelemetry_proto::tonic::metrics::v1::Gauge {
                data_points: vec![NumberDataPoint {
                    attributes: vec![KeyValue {
                        key: "deep".into(),
                        value: Some(v),
                        ..Default::default()
                    }],
                    value: Some(number_data_point::Value::AsInt(1)),
                    ..Default::default()
                }],
            }),
        )]);
        assert_eq!(
            m.map(&deep).unwrap_err(),
            Malformed("attribute values nest too deep")
        );
    }

    #[test]
    fn a_point_laid_out_otherwise_maps_as_one_in_field_order() {
        let point = NumberDataPoint {
            attributes: vec![kv("code", "200"), kv("route", "/a,b")],
            start_time_unix_nano: 2_000,
            time_unix_nano: 3_000,
            value: Some(number_data_point::Value::AsDouble(1.5)),
            ..Default::default()
        };
        let sum = |p: Vec<u8>| {
            // A Sum of the one point `p`, as bytes: data_points (1),
            // delta temporality (2), monotonic (3).
            let mut sum = vec![0x0a, p.len() as u8];
            sum.extend(p);
            sum.extend([0x10, 1, 0x18, 1]);
            let mut metric = vec![0x0a, 4];
            metric.extend(b"hits");
            metric.extend([0x3a, sum.len() as u8]);
            metric.extend(sum);
            let mut scope = vec![0x12, metric.len() as u8];
            scope.extend(metric);
            let mut rm = vec![0x12, scope.len() as u8];
            rm.extend(scope);
            let mut req = vec![0x0a, rm.len() as u8];
            req.extend(rm);
            req
        };
        let ordered = point.encode_to_vec();
        // The same fields, attributes first and the value last.
        let mut shuffled = Vec::new();
        for a in &point.attributes {
            let a = a.encode_to_vec();
            shuffled.extend([0x3a, a.len() as u8]);
            shuffled.extend(a);
        }
        shuffled.push(0x19);
        shuffled.extend(3_000u64.to_le_bytes());
        shuffled.push(0x11);
        shuffled.extend(2_000u64.to_le_bytes());
        shuffled.push(0x21);
        shuffled.extend(1.5f64.to_le_bytes());
        assert_eq!(shuffled.len(), ordered.len());
        assert_ne!(shuffled, ordered);
        let want = vec!["Count hits code:200,route:/a,b 1.5".to_string()];
        assert_eq!(lines(&mut mapper(), &sum(ordered)), (want.clone(), 0));
        assert_eq!(lines(&mut mapper(), &sum(shuffled)), (want, 0));
    }

    #[test]
    fn bytes_that_are_not_utf8_go_to_the_aggregator_to_judge_unless_in_a_name() {
        let gauge = |name: &[u8], value: &[u8]| {
            let mut kv = vec![
                0x0a,
                1,
                b'k',
                0x12,
                value.len() as u8 + 2,
                0x0a,
                value.len() as u8,
            ];
            kv.extend(value);
            let mut p = vec![0x21];
            p.extend(2.0f64.to_le_bytes());
            p.extend([0x3a, kv.len() as u8]);
            p.extend(kv);
            let mut g = vec![0x0a, p.len() as u8];
            g.extend(p);
            let mut m = vec![0x0a, name.len() as u8];
            m.extend(name);
            m.extend([0x2a, g.len() as u8]);
            m.extend(g);
            let mut scope = vec![0x12, m.len() as u8];
            scope.extend(m);
            let mut rm = vec![0x12, scope.len() as u8];
            rm.extend(scope);
            let mut req = vec![0x0a, rm.len() as u8];
            req.extend(rm);
            req
        };
        let mut m = mapper();
        let mapped = m.map(&gauge(b"temp", b"\xff\xfe")).unwrap();
        let mut tags = Vec::new();
        mapped.points.each(|p| tags.push(p.tags.to_vec()));
        assert_eq!(tags, [b"\x01k\x02\xff\xfe".to_vec()]);
        assert_eq!(
            m.map(&gauge(b"te\xffmp", b"v")).unwrap_err(),
            Malformed("a string is not UTF-8")
        );
    }
}
