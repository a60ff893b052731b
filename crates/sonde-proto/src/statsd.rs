//! StatsD and DogStatsD text.
//!
//! A datagram is one or more lines separated by `\n` (a trailing `\r` is
//! stripped, empty lines are skipped):
//!
//! ```text
//! name:value[:value...]|type[|@rate][|#tags][|T<unix ts>][|c:<container>]
//! ```
//!
//! * `type` is `c` (count), `g` (gauge), `ms`, `h` or `d` (all three are a
//!   timer) or `s` (set).
//! * Several `:`-separated values make one point each, sharing the rest of
//!   the line. A set's value is one member however many `:` it holds.
//! * A gauge value written with a sign (`+4`, `-2`) is a
//!   [`Value::Delta`]; without one, the new value.
//! * After the type, fields may come in any order. `@rate` must be in
//!   `(0, 1]` and is passed on, not applied: scaling is the aggregator's
//!   job. `#tags` are passed on raw, in [`TagSyntax::DogStatsd`]. `T` is a
//!   unix timestamp. Fields the agent does not know (`c:` container IDs,
//!   `e:`, `card:` and whatever newer clients add) are skipped, so new
//!   clients keep working.
//! * DogStatsD events (`_e{`) and service checks (`_sc|`) go to
//!   [`PointSink::event`] whole; [`event`] parses them.
//!
//! A bad line is one drop; the other lines of the datagram are unaffected.
//! A line is checked whole before any of its points is emitted, so a line
//! yields either all its points or one drop.
//!
//! [`parse`] finds the delimiters with a structural index (one pass of SIMD
//! compares per 64 bytes, AVX2 or SSE2 on x86-64, NEON on aarch64, chosen at
//! run time, see [`Backend`]); [`parse_reference`] is the
//! `memchr`-per-field parser it replaced, kept as the reference the index
//! is tested and fuzzed against and as the fallback on other targets.

use crate::number::{parse_f64, parse_i64};
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::simd;
use crate::tags::Backend;
use crate::{DropReason, Kind, Point, PointSink, TagSyntax, Value};
use memchr::memchr;

pub mod event;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod index;

/// Parses one datagram and pushes every point and drop into `sink`, in
/// input order.
///
/// Uses [`Backend::detected`]. Never panics and never allocates.
pub fn parse<'a>(datagram: &'a [u8], sink: &mut impl PointSink<'a>) {
    // SAFETY: `detected` only returns backends this CPU supports.
    unsafe { run(Backend::detected(), datagram, sink) }
}

/// Same contract as [`parse`], with the delimiter search of `backend`
/// ([`Backend::Memchr`] is [`parse_reference`]); for benchmarks and tests
/// that compare the backends.
///
/// # Panics
///
/// If `backend` is not [available](Backend::is_available) on this CPU.
pub fn parse_with<'a>(backend: Backend, datagram: &'a [u8], sink: &mut impl PointSink<'a>) {
    assert!(
        backend.is_available(),
        "statsd parsing backend {backend:?} is not supported by this CPU"
    );
    // SAFETY: checked just above.
    unsafe { run(backend, datagram, sink) }
}

/// # Safety
///
/// `backend` must be [available](Backend::is_available).
#[inline]
unsafe fn run<'a>(backend: Backend, datagram: &'a [u8], sink: &mut impl PointSink<'a>) {
    match backend {
        Backend::Memchr => parse_reference(datagram, sink),
        // SAFETY: every x86-64 CPU has SSE2.
        #[cfg(target_arch = "x86_64")]
        Backend::Sse2 => unsafe { index::parse::<simd::Sse2>(datagram, sink) },
        // SAFETY: the caller promises that the backend is available.
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 | Backend::Avx512 => unsafe { parse_avx2(datagram, sink) },
        // SAFETY: every aarch64 CPU has NEON.
        #[cfg(target_arch = "aarch64")]
        Backend::Neon => unsafe { index::parse::<simd::Neon>(datagram, sink) },
    }
}

/// The AVX2 index, with the whole line walk (inlined here) compiled for
/// the CPUs that have AVX2: every one of them also has BMI1, BMI2 and
/// LZCNT, which [`Backend::Avx2`] checks too. The walk finds each field
/// with a variable shift and a trailing-zero count; baseline x86-64 makes
/// those `shl`/`shr` by `cl` and `bsf`, where BMI gives `shlx` and
/// `tzcnt` ("StatsD walk compiled for AVX2 CPUs" in `docs/benchmarks/LOG.md`).
///
/// # Safety
///
/// The CPU must have every feature named here.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
unsafe fn parse_avx2<'a>(datagram: &'a [u8], sink: &mut impl PointSink<'a>) {
    // SAFETY: the caller's promise covers AVX2.
    unsafe { index::parse::<simd::Avx2>(datagram, sink) }
}

/// Same contract as [`parse`], finding every field with its own `memchr`.
///
/// The parser [`parse`] replaced (about eight `memchr` calls on short
/// fields per line; "StatsD parsing on the structural index" in
/// `docs/benchmarks/LOG.md`): kept as the obviously correct reference that
/// every index backend is tested and fuzzed against, and as the portable
/// fallback ([`Backend::Memchr`]).
pub fn parse_reference<'a>(datagram: &'a [u8], sink: &mut impl PointSink<'a>) {
    for line in Split::new(datagram, b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        if let Err(reason) = parse_line(line, sink) {
            sink.drop(reason);
        }
    }
}

/// Parses one non-empty line without its terminator.
///
/// Checks run left to right (shape, name, type, fields, values) and the
/// first failure is the reason reported.
fn parse_line<'a>(line: &'a [u8], sink: &mut impl PointSink<'a>) -> Result<(), DropReason> {
    if event::is_happening(line) {
        sink.event(line);
        return Ok(());
    }
    // The name ends at the first `:`, the values at the first `|`. Looking
    // for the `|` first keeps a `:` inside the tags from being taken as the
    // name separator on a line that has none (`name|c|#k:v`).
    let pipe = memchr(b'|', line).ok_or(DropReason::MalformedLine)?;
    let head = &line[..pipe];
    let colon = memchr(b':', head).ok_or(DropReason::MalformedLine)?;
    let name = &head[..colon];
    let values = &head[colon + 1..];
    if name.is_empty() {
        return Err(DropReason::EmptyName);
    }

    let mut fields = Split::new(&line[pipe + 1..], b'|');
    let kind = kind_of(fields.next().unwrap_or_default())?;
    let mut extras = Extras::default();
    for field in fields {
        extras.take(field)?;
    }
    emit(
        kind,
        name,
        values,
        || memchr(b':', values).is_some(),
        &extras,
        sink,
    )
}

/// The metric type a StatsD type field names.
#[inline(always)]
pub(crate) fn kind_of(ty: &[u8]) -> Result<Kind, DropReason> {
    Ok(match ty {
        b"c" => Kind::Count,
        b"g" => Kind::Gauge,
        b"ms" | b"h" | b"d" => Kind::Timer,
        b"s" => Kind::Set,
        _ => return Err(DropReason::UnknownType),
    })
}

/// What the fields after the type say about a line's points.
pub(crate) struct Extras<'a> {
    sample_rate: f64,
    tags: &'a [u8],
    timestamp: Option<i64>,
}

impl Default for Extras<'_> {
    fn default() -> Self {
        Extras {
            sample_rate: 1.0,
            tags: &[],
            timestamp: None,
        }
    }
}

impl<'a> Extras<'a> {
    /// Reads one field (without its `|`).
    #[inline(always)]
    pub(crate) fn take(&mut self, field: &'a [u8]) -> Result<(), DropReason> {
        match field.split_first() {
            Some((b'@', rate)) => {
                self.sample_rate = parse_f64(rate)
                    .filter(|r| *r > 0.0 && *r <= 1.0)
                    .ok_or(DropReason::BadSampleRate)?;
            }
            Some((b'#', raw)) => self.tags = raw,
            Some((b'T', ts)) => {
                self.timestamp = Some(parse_unix(ts).ok_or(DropReason::BadTimestamp)?);
            }
            // `c:` (container ID), `e:`, `card:`, empty fields, and anything
            // a newer client sends.
            _ => {}
        }
        Ok(())
    }
}

/// Hands the points of a parsed line to `sink`: one per value of `values`
/// (`several` says whether it holds a `:`; asked only for numeric types),
/// or the set member.
#[inline(always)]
pub(crate) fn emit<'a>(
    kind: Kind,
    name: &'a [u8],
    values: &'a [u8],
    several: impl FnOnce() -> bool,
    extras: &Extras<'a>,
    sink: &mut impl PointSink<'a>,
) -> Result<(), DropReason> {
    let point = |value| Point {
        kind,
        name,
        tags: extras.tags,
        tag_syntax: TagSyntax::DogStatsd,
        value,
        sample_rate: extras.sample_rate,
        timestamp: extras.timestamp,
    };
    if kind == Kind::Set {
        if values.is_empty() {
            return Err(DropReason::BadValue);
        }
        sink.point(&point(Value::Member(values)));
        return Ok(());
    }
    // Nearly every line carries one value: parse it once.
    if !several() {
        let value = parse_value(kind, values).ok_or(DropReason::BadValue)?;
        sink.point(&point(value));
        return Ok(());
    }
    // Validate every value before emitting any, so a bad value drops the
    // whole line. Parsing twice is cheaper than storing: lines with more
    // than one value are rare and short.
    for text in Split::new(values, b':') {
        parse_value(kind, text).ok_or(DropReason::BadValue)?;
    }
    for text in Split::new(values, b':') {
        if let Some(value) = parse_value(kind, text) {
            sink.point(&point(value));
        }
    }
    Ok(())
}

/// The value of a numeric line: a gauge's signed text is an adjustment.
///
/// Inlined: returned from a call, the 24-byte `Option<Value>` went through
/// the stack, and the caller's wider reloads of the narrower stores the
/// callee wrote stalled on store forwarding. `perf annotate` of
/// `hot_path statsd 10000` put half the parse's samples on one such load
/// ("StatsD values kept in registers" in `docs/benchmarks/LOG.md`).
#[inline(always)]
pub(crate) fn parse_value(kind: Kind, text: &[u8]) -> Option<Value<'static>> {
    let number = parse_f64(text)?;
    // Only a gauge gives the sign a meaning of its own; for the others
    // `-5` is just a negative sample.
    if kind == Kind::Gauge && matches!(text.first(), Some(b'+' | b'-')) {
        Some(Value::Delta(number))
    } else {
        Some(Value::Number(number))
    }
}

/// A `T` field: unsigned digits only, since a sign in a unix timestamp is a
/// client bug rather than a date before 1970.
pub(crate) fn parse_unix(text: &[u8]) -> Option<i64> {
    if text.first().is_some_and(u8::is_ascii_digit) {
        parse_i64(text)
    } else {
        None
    }
}

/// Splits on one byte with `memchr`, yielding empty pieces too (like
/// `<[u8]>::split`, which searches byte by byte).
struct Split<'a> {
    rest: Option<&'a [u8]>,
    delimiter: u8,
}

impl<'a> Split<'a> {
    fn new(text: &'a [u8], delimiter: u8) -> Self {
        Split {
            rest: Some(text),
            delimiter,
        }
    }
}

impl<'a> Iterator for Split<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        match memchr(self.delimiter, rest) {
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An owned copy of what the sink saw.
    #[derive(Clone, Debug, PartialEq)]
    enum Seen {
        Point {
            kind: Kind,
            name: String,
            tags: String,
            value: Val,
            sample_rate: f64,
            timestamp: Option<i64>,
        },
        Drop(DropReason),
    }

    #[derive(Clone, Debug, PartialEq)]
    enum Val {
        Number(f64),
        Delta(f64),
        Member(String),
    }

    #[derive(Default)]
    struct Collect(Vec<Seen>);

    impl PointSink<'_> for Collect {
        fn point(&mut self, p: &Point<'_>) {
            assert_eq!(p.tag_syntax, TagSyntax::DogStatsd);
            // The parser passes names, tags and set members on as bytes,
            // UTF-8 or not; non-UTF-8 ones are kept apart, as hex.
            let text = |b: &[u8]| {
                String::from_utf8(b.to_vec())
                    .unwrap_or_else(|e| format!("<not utf-8 {:02x?}>", e.into_bytes()))
            };
            self.0.push(Seen::Point {
                kind: p.kind,
                name: text(p.name),
                tags: text(p.tags),
                value: match p.value {
                    Value::Number(v) => Val::Number(v),
                    Value::Delta(v) => Val::Delta(v),
                    Value::Member(m) => Val::Member(text(m)),
                },
                sample_rate: p.sample_rate,
                timestamp: p.timestamp,
            });
        }
        fn drop(&mut self, reason: DropReason) {
            self.0.push(Seen::Drop(reason));
        }
    }

    fn run(text: &str) -> Vec<Seen> {
        run_bytes(text.as_bytes())
    }

    fn run_bytes(bytes: &[u8]) -> Vec<Seen> {
        let mut sink = Collect::default();
        parse(bytes, &mut sink);
        sink.0
    }

    /// A point with no tags, rate 1 and no timestamp.
    fn pt(kind: Kind, name: &str, value: Val) -> Seen {
        Seen::Point {
            kind,
            name: name.into(),
            tags: String::new(),
            value,
            sample_rate: 1.0,
            timestamp: None,
        }
    }

    fn with(mut seen: Seen, tags: &str, rate: f64, ts: Option<i64>) -> Seen {
        if let Seen::Point {
            tags: t,
            sample_rate,
            timestamp,
            ..
        } = &mut seen
        {
            *t = tags.into();
            *sample_rate = rate;
            *timestamp = ts;
        }
        seen
    }

    fn drop(reason: DropReason) -> Seen {
        Seen::Drop(reason)
    }

    use Val::{Delta, Member, Number};

    #[test]
    fn every_type_maps_to_its_kind() {
        assert_eq!(
            run("a:1|c\nb:2|g\nc:3|ms\nd:4|h\ne:5|d\nf:x|s"),
            vec![
                pt(Kind::Count, "a", Number(1.0)),
                pt(Kind::Gauge, "b", Number(2.0)),
                pt(Kind::Timer, "c", Number(3.0)),
                pt(Kind::Timer, "d", Number(4.0)),
                pt(Kind::Timer, "e", Number(5.0)),
                pt(Kind::Set, "f", Member("x".into())),
            ]
        );
    }

    #[test]
    fn unknown_type_is_dropped() {
        for line in ["a:1|x", "a:1|", "a:1|C", "a:1|msx", "a:1|c "] {
            assert_eq!(run(line), vec![drop(DropReason::UnknownType)], "{line}");
        }
    }

    #[test]
    fn multi_value_line_emits_one_point_per_value() {
        let want: Vec<Seen> = [1.0, 2.5, -3.0]
            .into_iter()
            .map(|v| with(pt(Kind::Timer, "lat", Number(v)), "a:b", 0.5, Some(7)))
            .collect();
        assert_eq!(run("lat:1:2.5:-3|ms|@0.5|#a:b|T7"), want);
    }

    #[test]
    fn one_bad_value_drops_the_whole_line() {
        assert_eq!(
            run("lat:1:x:3|ms\nok:1|c"),
            vec![
                drop(DropReason::BadValue),
                pt(Kind::Count, "ok", Number(1.0))
            ]
        );
        assert_eq!(run("lat:1::3|ms"), vec![drop(DropReason::BadValue)]);
        assert_eq!(run("lat:1:|ms"), vec![drop(DropReason::BadValue)]);
    }

    #[test]
    fn bad_or_empty_or_non_finite_value_is_bad_value() {
        for line in [
            "a:|c",
            "a:x|c",
            "a:nan|g",
            "a:inf|ms",
            "a:1e999|c",
            "a: 1|c",
            "a:|s",
        ] {
            assert_eq!(run(line), vec![drop(DropReason::BadValue)], "{line}");
        }
    }

    #[test]
    fn signed_gauge_values_are_deltas_and_unsigned_are_values() {
        assert_eq!(
            run("g:-10|g\ng:+4|g\ng:4|g\ng:+1:2:-0.5|g"),
            vec![
                pt(Kind::Gauge, "g", Delta(-10.0)),
                pt(Kind::Gauge, "g", Delta(4.0)),
                pt(Kind::Gauge, "g", Number(4.0)),
                pt(Kind::Gauge, "g", Delta(1.0)),
                pt(Kind::Gauge, "g", Number(2.0)),
                pt(Kind::Gauge, "g", Delta(-0.5)),
            ]
        );
    }

    #[test]
    fn signs_mean_nothing_special_outside_gauges() {
        assert_eq!(
            run("c:-2|c\nt:+3|ms"),
            vec![
                pt(Kind::Count, "c", Number(-2.0)),
                pt(Kind::Timer, "t", Number(3.0))
            ]
        );
    }

    #[test]
    fn set_member_is_the_whole_value_text_including_colons() {
        assert_eq!(
            run("users:alice|s\nips:10.0.0.1:8080|s\nn:-1.5|s"),
            vec![
                pt(Kind::Set, "users", Member("alice".into())),
                pt(Kind::Set, "ips", Member("10.0.0.1:8080".into())),
                pt(Kind::Set, "n", Member("-1.5".into())),
            ]
        );
    }

    #[test]
    fn sample_rate_is_passed_on_unapplied() {
        assert_eq!(
            run("a:10|c|@0.1\nb:10|c|@1"),
            vec![
                with(pt(Kind::Count, "a", Number(10.0)), "", 0.1, None),
                pt(Kind::Count, "b", Number(10.0)),
            ]
        );
    }

    #[test]
    fn sample_rate_outside_zero_to_one_is_dropped() {
        for line in [
            "a:1|c|@0",
            "a:1|c|@1.5",
            "a:1|c|@-0.5",
            "a:1|c|@",
            "a:1|c|@x",
            "a:1|c|@nan",
        ] {
            assert_eq!(run(line), vec![drop(DropReason::BadSampleRate)], "{line}");
        }
    }

    #[test]
    fn dogstatsd_tags_are_passed_on_raw_including_valueless_tags() {
        assert_eq!(
            run("a:1|c|#env:prod,urgent,,:odd"),
            vec![with(
                pt(Kind::Count, "a", Number(1.0)),
                "env:prod,urgent,,:odd",
                1.0,
                None
            )]
        );
        assert_eq!(
            run("a:1|c|#"),
            vec![pt(Kind::Count, "a", Number(1.0))],
            "an empty # field is no tags"
        );
    }

    #[test]
    fn timestamp_field_is_read() {
        assert_eq!(
            run("a:1|g|T1656581400"),
            vec![with(
                pt(Kind::Gauge, "a", Number(1.0)),
                "",
                1.0,
                Some(1_656_581_400)
            )]
        );
    }

    #[test]
    fn bad_timestamp_is_dropped() {
        for line in [
            "a:1|c|T",
            "a:1|c|Tsoon",
            "a:1|c|T-5",
            "a:1|c|T+5",
            "a:1|c|T1.5",
            "a:1|c|T99999999999999999999",
        ] {
            assert_eq!(run(line), vec![drop(DropReason::BadTimestamp)], "{line}");
        }
    }

    #[test]
    fn fields_after_the_type_may_come_in_any_order() {
        let want = vec![with(pt(Kind::Count, "a", Number(2.0)), "k:v", 0.5, Some(9))];
        for line in [
            "a:2|c|@0.5|#k:v|T9",
            "a:2|c|T9|#k:v|@0.5",
            "a:2|c|#k:v|T9|@0.5",
        ] {
            assert_eq!(run(line), want, "{line}");
        }
    }

    #[test]
    fn unknown_extension_fields_and_container_ids_are_skipped() {
        assert_eq!(
            run("a:1|c|c:83c0a99c0a54c0c|#k:v|e:abc|card:high||x"),
            vec![with(pt(Kind::Count, "a", Number(1.0)), "k:v", 1.0, None)]
        );
    }

    #[test]
    fn crlf_line_ends_and_empty_lines_are_handled_silently() {
        assert_eq!(
            run("a:1|c\r\n\r\n\nb:2|c\r\n"),
            vec![
                pt(Kind::Count, "a", Number(1.0)),
                pt(Kind::Count, "b", Number(2.0))
            ]
        );
        assert_eq!(run(""), vec![]);
        assert_eq!(run("\n\r\n"), vec![]);
    }

    #[test]
    fn only_one_trailing_carriage_return_is_stripped() {
        assert_eq!(run("a:1|c\r\r"), vec![drop(DropReason::UnknownType)]);
    }

    #[test]
    fn events_and_service_checks_are_counted_and_ignored() {
        assert_eq!(
            run("_e{5,4}:title|text|#k:v\n_sc|db.up|0|#k:v\na:1|c"),
            vec![
                drop(DropReason::Event),
                drop(DropReason::ServiceCheck),
                pt(Kind::Count, "a", Number(1.0)),
            ]
        );
    }

    #[test]
    fn lines_without_colon_or_pipe_are_malformed() {
        for line in ["garbage", "a:1", "a|c", "a|c|#k:v", "|"] {
            assert_eq!(run(line), vec![drop(DropReason::MalformedLine)], "{line}");
        }
    }

    #[test]
    fn empty_name_is_dropped() {
        assert_eq!(run(":1|c"), vec![drop(DropReason::EmptyName)]);
    }

    #[test]
    fn name_may_hold_anything_but_colon_pipe_and_newline() {
        assert_eq!(
            run("web.api-latency_ms{x=y} #@:1|c"),
            vec![pt(Kind::Count, "web.api-latency_ms{x=y} #@", Number(1.0))]
        );
    }

    #[test]
    fn a_bad_line_does_not_affect_its_neighbours() {
        assert_eq!(
            run("a:1|c\nnope\nb:2|q\nc:3|c|@2\n:4|c\nd:5|c|Tx\ne:z|c\nf:6|c"),
            vec![
                pt(Kind::Count, "a", Number(1.0)),
                drop(DropReason::MalformedLine),
                drop(DropReason::UnknownType),
                drop(DropReason::BadSampleRate),
                drop(DropReason::EmptyName),
                drop(DropReason::BadTimestamp),
                drop(DropReason::BadValue),
                pt(Kind::Count, "f", Number(6.0)),
            ]
        );
    }

    #[test]
    fn non_utf8_bytes_pass_through_for_the_aggregator_to_judge() {
        let mut count = 0;
        struct Count<'a>(&'a mut usize);
        impl PointSink<'_> for Count<'_> {
            fn point(&mut self, p: &Point<'_>) {
                assert_eq!(p.name, b"\xff\xfe");
                assert_eq!(p.tags, b"k:\x80");
                *self.0 += 1;
            }
            fn drop(&mut self, reason: DropReason) {
                panic!("dropped {reason:?}");
            }
        }
        parse(b"\xff\xfe:1|c|#k:\x80", &mut Count(&mut count));
        assert_eq!(count, 1);
    }

    /// Everything a sink saw, bytes and bits exactly, for comparing two
    /// parsers on arbitrary (also non-UTF-8) input.
    #[derive(Debug, Default, PartialEq)]
    struct Exact(Vec<String>);

    impl PointSink<'_> for Exact {
        fn point(&mut self, p: &Point<'_>) {
            let value = match p.value {
                Value::Number(v) => format!("n{:x}", v.to_bits()),
                Value::Delta(v) => format!("d{:x}", v.to_bits()),
                Value::Member(m) => format!("m{m:?}"),
            };
            self.0.push(format!(
                "{:?} {:?} {:?} {:?} {value} {:x} {:?}",
                p.kind,
                p.name,
                p.tags,
                p.tag_syntax,
                p.sample_rate.to_bits(),
                p.timestamp
            ));
        }
        fn drop(&mut self, reason: DropReason) {
            self.0.push(format!("drop {reason:?}"));
        }
    }

    /// Checks every available backend, and `parse`, against the reference.
    fn assert_backends_agree(datagram: &[u8]) {
        let mut want = Exact::default();
        parse_reference(datagram, &mut want);
        let mut got = Exact::default();
        parse(datagram, &mut got);
        assert_eq!(
            got,
            want,
            "parse on {:?}",
            String::from_utf8_lossy(datagram)
        );
        for &backend in Backend::ALL {
            if backend.is_available() {
                let mut got = Exact::default();
                parse_with(backend, datagram, &mut got);
                assert_eq!(
                    got,
                    want,
                    "{backend:?} on {:?}",
                    String::from_utf8_lossy(datagram)
                );
            }
        }
    }

    #[test]
    fn backends_agree_on_the_unit_test_inputs() {
        for text in [
            "a:1|c\nb:2|g\nc:3|ms\nd:4|h\ne:5|d\nf:x|s",
            "lat:1:2.5:-3|ms|@0.5|#a:b|T7",
            "lat:1:x:3|ms\nok:1|c",
            "a:1|c|c:83c0a99c0a54c0c|#k:v|e:abc|card:high||x",
            "a:1|c\r\n\r\n\nb:2|c\r\n",
            "a:1|c\r\r",
            "_e{5,4}:title|text|#k:v\n_sc|db.up|0|#k:v\na:1|c",
            "a:1|c\nnope\nb:2|q\nc:3|c|@2\n:4|c\nd:5|c|Tx\ne:z|c\nf:6|c",
            "garbage\na:1\na|c\na|c|#k:v\n|\n\r\n\r",
        ] {
            assert_backends_agree(text.as_bytes());
        }
    }

    #[test]
    fn datagrams_longer_than_a_chunk_are_split_between_lines() {
        // Lines of every length around the chunk size, so that a chunk ends
        // inside a line, right after a `\n`, on a `\r`, or on a line with
        // no `\n` in the whole chunk.
        for line_len in [1usize, 7, 63, 64, 65, 1000, 2046, 2047, 2048, 2049, 5000] {
            for total in [2047, 2048, 2049, 4095, 4096, 4097, 9000] {
                let mut d = Vec::new();
                let mut i = 0;
                while d.len() < total {
                    let head = format!("m{i}:{i}|c|#");
                    let pad = line_len.saturating_sub(head.len()).max(1);
                    d.extend_from_slice(head.as_bytes());
                    d.extend(std::iter::repeat_n(b'k', pad));
                    d.extend_from_slice(if i % 3 == 0 { b"\r\n" } else { b"\n" });
                    i += 1;
                }
                d.truncate(total);
                assert_backends_agree(&d);
            }
        }
    }

    // ---- property tests ----

    #[derive(Clone, Debug)]
    struct Line {
        name: String,
        ty: &'static str,
        values: Vec<(f64, Option<char>)>,
        member: String,
        rate: Option<f64>,
        tags: Option<String>,
        ts: Option<u32>,
        extra: Vec<String>,
        order: Vec<usize>,
    }

    impl Line {
        fn kind(&self) -> Kind {
            match self.ty {
                "c" => Kind::Count,
                "g" => Kind::Gauge,
                "s" => Kind::Set,
                _ => Kind::Timer,
            }
        }

        fn text(&self) -> String {
            let values = if self.kind() == Kind::Set {
                self.member.clone()
            } else {
                let one = |(v, sign): &(f64, Option<char>)| match sign {
                    Some(s) => format!("{s}{}", v.abs()),
                    None => v.abs().to_string(),
                };
                self.values.iter().map(one).collect::<Vec<_>>().join(":")
            };
            let mut fields: Vec<String> = Vec::new();
            if let Some(rate) = self.rate {
                fields.push(format!("@{rate}"));
            }
            if let Some(tags) = &self.tags {
                fields.push(format!("#{tags}"));
            }
            if let Some(ts) = self.ts {
                fields.push(format!("T{ts}"));
            }
            fields.extend(self.extra.iter().cloned());
            let mut line = format!("{}:{values}|{}", self.name, self.ty);
            for &i in &self.order {
                if let Some(f) = fields.get(i % fields.len().max(1)) {
                    line.push('|');
                    line.push_str(f);
                }
            }
            // Every field at least once: re-adding one twice is harmless,
            // since the values are equal.
            for f in &fields {
                line.push('|');
                line.push_str(f);
            }
            line
        }

        fn expected(&self) -> Vec<Seen> {
            let point = |value| Seen::Point {
                kind: self.kind(),
                name: self.name.clone(),
                tags: self.tags.clone().unwrap_or_default(),
                value,
                sample_rate: self.rate.unwrap_or(1.0),
                timestamp: self.ts.map(i64::from),
            };
            if self.kind() == Kind::Set {
                return vec![point(Member(self.member.clone()))];
            }
            self.values
                .iter()
                .map(|&(v, sign)| match sign {
                    // Only a gauge reads the sign as "adjust".
                    Some('-') if self.kind() == Kind::Gauge => point(Delta(-v.abs())),
                    Some(_) if self.kind() == Kind::Gauge => point(Delta(v.abs())),
                    Some('-') => point(Number(-v.abs())),
                    _ => point(Number(v.abs())),
                })
                .collect()
        }
    }

    fn any_line() -> impl Strategy<Value = Line> {
        let finite = any::<f64>().prop_filter("finite", |v| v.is_finite());
        (
            "[a-zA-Z0-9.][a-zA-Z0-9._#@ -]{0,20}",
            proptest::sample::select(vec!["c", "g", "ms", "h", "d", "s"]),
            proptest::collection::vec(
                (
                    finite,
                    proptest::option::of(prop_oneof![Just('+'), Just('-')]),
                ),
                1..4,
            ),
            "[^|\n]{0,10}[^|\n\r]",
            proptest::option::of((1u32..=1_000_000).prop_map(|n| f64::from(n) / 1_000_000.0)),
            proptest::option::of("[a-z0-9:,._/ -]{0,30}"),
            proptest::option::of(any::<u32>()),
            proptest::collection::vec("(c|e|card|x):[a-z0-9]{0,8}", 0..3),
            proptest::collection::vec(0usize..8, 0..4),
        )
            .prop_map(
                |(name, ty, values, member, rate, tags, ts, extra, order)| Line {
                    name,
                    ty,
                    values,
                    member,
                    rate,
                    tags,
                    ts,
                    extra,
                    order,
                },
            )
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(
            prop_oneof![Just(b'|'), Just(b':'), Just(b'\n'), Just(b'@'), Just(b'#'), Just(b'T'), Just(b'1'), any::<u8>()],
            0..120,
        )) {
            // A datagram without a newline is at most one point or drop per value.
            let seen = run_bytes(&bytes);
            prop_assert!(seen.len() <= bytes.len());
        }

        #[test]
        fn every_backend_agrees_with_the_reference_on_delimiter_soup(bytes in proptest::collection::vec(
            prop_oneof![
                4 => proptest::sample::select(b"\n\r|:@#T.,cgmshd_e{}+-0123456789".to_vec()),
                1 => any::<u8>(),
            ],
            0..300,
        )) {
            assert_backends_agree(&bytes);
        }

        #[test]
        fn every_backend_agrees_with_the_reference_across_chunks(
            lines in proptest::collection::vec(
                (any_line(), proptest::collection::vec(
                    proptest::sample::select(b"\n\r|:@#T.,cgms1".to_vec()), 0..4)),
                1..80,
            ),
        ) {
            // Well-formed lines with delimiter noise, long enough to need
            // several chunks.
            let mut d = Vec::new();
            for (line, noise) in &lines {
                d.extend_from_slice(line.text().as_bytes());
                d.extend_from_slice(noise);
                d.push(b'\n');
            }
            assert_backends_agree(&d);
        }

        #[test]
        fn well_formed_lines_come_back_exactly(
            lines in proptest::collection::vec(any_line(), 1..8),
            crlf in any::<bool>(),
        ) {
            let sep = if crlf { "\r\n" } else { "\n" };
            let text = lines.iter().map(Line::text).collect::<Vec<_>>().join(sep);
            let want: Vec<Seen> = lines.iter().flat_map(Line::expected).collect();
            prop_assert_eq!(run(&text), want, "{:?}", text);
        }
    }
}
