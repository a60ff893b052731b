//! DogStatsD events and service checks, the two line shapes that carry a
//! happening rather than a measurement:
//!
//! ```text
//! _e{<title bytes>,<text bytes>}:<title>|<text>[|d:<unix ts>][|h:<host>][|k:<aggregation key>]
//!     [|p:<normal|low>][|s:<source type>][|t:<error|warning|info|success>][|#<tags>]
//! _sc|<name>|<0|1|2|3>[|d:<unix ts>][|h:<host>][|#<tags>][|m:<message>]
//! ```
//!
//! * An event's title and text are cut by the byte lengths in braces, so
//!   either may hold a `|`; the title may not be empty. Clients write a
//!   newline of the text as the two characters `\n`; [`unescape`] turns
//!   them back.
//! * A service check's status is 0 (ok), 1 (warning), 2 (critical) or
//!   3 (unknown); its `m:` message is the last field and runs to the end
//!   of the line, `|` included.
//! * Fields may come in any order; one this parser does not know (`c:`
//!   container IDs, whatever newer clients add) is skipped. A priority or
//!   alert type other than the ones listed is kept as written.
//!
//! A line that breaks these rules is [`DropReason::MalformedEvent`] (or
//! [`DropReason::BadTimestamp`] for a `d:` that is not a unix time).
//! Parsing borrows from the line and never allocates.

use memchr::memchr;

use super::{parse_unix, Split};
use crate::DropReason;

/// A parsed event or service check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Happening<'a> {
    /// `_e{...}`.
    Event(Event<'a>),
    /// `_sc|...`.
    ServiceCheck(ServiceCheck<'a>),
}

/// The fields every happening may carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Common<'a> {
    /// `d:`, seconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// `h:`, the host it is about.
    pub host: Option<&'a [u8]>,
    /// `#`, the tags as written (comma-separated, DogStatsD syntax).
    pub tags: &'a [u8],
}

/// A DogStatsD event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// Never empty.
    pub title: &'a [u8],
    /// As sent (newlines still escaped; see [`unescape`]).
    pub text: &'a [u8],
    /// `p:`, `normal` when absent.
    pub priority: Option<&'a [u8]>,
    /// `t:`, `info` when absent.
    pub alert_type: Option<&'a [u8]>,
    /// `k:`.
    pub aggregation_key: Option<&'a [u8]>,
    /// `s:`.
    pub source_type_name: Option<&'a [u8]>,
    /// Timestamp, host, tags.
    pub common: Common<'a>,
}

/// A DogStatsD service check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCheck<'a> {
    /// The check's name, never empty.
    pub name: &'a [u8],
    /// 0 ok, 1 warning, 2 critical, 3 unknown.
    pub status: u8,
    /// `m:`, as sent (newlines still escaped; see [`unescape`]).
    pub message: Option<&'a [u8]>,
    /// Timestamp, host, tags.
    pub common: Common<'a>,
}

/// Whether `line` is an event or a service check (by its first bytes).
#[inline(always)]
pub fn is_happening(line: &[u8]) -> bool {
    line.starts_with(b"_e{") || line.starts_with(b"_sc|")
}

/// Why `line`, an event or a service check, is dropped when no sink takes
/// it: [`DropReason::Event`] or [`DropReason::ServiceCheck`].
pub fn unrouted(line: &[u8]) -> DropReason {
    if line.starts_with(b"_e{") {
        DropReason::Event
    } else {
        DropReason::ServiceCheck
    }
}

/// Parses one event or service check line, without its terminator.
///
/// # Errors
///
/// [`DropReason::MalformedEvent`] for a line of neither shape, or one that
/// breaks its shape's rules (see the [module docs](self));
/// [`DropReason::BadTimestamp`] for a bad `d:`.
pub fn parse(line: &[u8]) -> Result<Happening<'_>, DropReason> {
    if let Some(rest) = line.strip_prefix(b"_e{") {
        event(rest).map(Happening::Event)
    } else if let Some(rest) = line.strip_prefix(b"_sc|") {
        service_check(rest).map(Happening::ServiceCheck)
    } else {
        Err(DropReason::MalformedEvent)
    }
}

/// `rest` is what follows `_e{`.
fn event(rest: &[u8]) -> Result<Event<'_>, DropReason> {
    const BAD: DropReason = DropReason::MalformedEvent;
    let close = memchr(b'}', rest).ok_or(BAD)?;
    let lengths = &rest[..close];
    let comma = memchr(b',', lengths).ok_or(BAD)?;
    let title_len = length(&lengths[..comma]).ok_or(BAD)?;
    let text_len = length(&lengths[comma + 1..]).ok_or(BAD)?;
    let body = rest[close + 1..].strip_prefix(b":").ok_or(BAD)?;
    if title_len == 0 {
        return Err(BAD);
    }
    // `<title>|<text>`, then the fields.
    let text_at = title_len.checked_add(1).ok_or(BAD)?;
    let end = text_at.checked_add(text_len).ok_or(BAD)?;
    if body.len() < end || body[title_len] != b'|' {
        return Err(BAD);
    }
    let fields = match &body[end..] {
        [] => &[][..],
        [b'|', fields @ ..] => fields,
        _ => return Err(BAD),
    };
    let mut e = Event {
        title: &body[..title_len],
        text: &body[text_at..end],
        priority: None,
        alert_type: None,
        aggregation_key: None,
        source_type_name: None,
        common: Common::default(),
    };
    for field in Split::new(fields, b'|') {
        if e.common.take(field)? {
            continue;
        }
        match field {
            [b'p', b':', v @ ..] => e.priority = Some(v),
            [b't', b':', v @ ..] => e.alert_type = Some(v),
            [b'k', b':', v @ ..] => e.aggregation_key = Some(v),
            [b's', b':', v @ ..] => e.source_type_name = Some(v),
            _ => {}
        }
    }
    Ok(e)
}

/// `rest` is what follows `_sc|`.
fn service_check(rest: &[u8]) -> Result<ServiceCheck<'_>, DropReason> {
    const BAD: DropReason = DropReason::MalformedEvent;
    let pipe = memchr(b'|', rest).ok_or(BAD)?;
    let name = &rest[..pipe];
    let after = &rest[pipe + 1..];
    let (status, fields) = match memchr(b'|', after) {
        Some(p) => (&after[..p], &after[p + 1..]),
        None => (after, &[][..]),
    };
    let status = match status {
        [d @ b'0'..=b'3'] => d - b'0',
        _ => return Err(BAD),
    };
    if name.is_empty() {
        return Err(BAD);
    }
    let mut c = ServiceCheck {
        name,
        status,
        message: None,
        common: Common::default(),
    };
    let mut rest = fields;
    while !rest.is_empty() {
        // The message runs to the end of the line, `|` and all.
        if let Some(m) = rest.strip_prefix(b"m:") {
            c.message = Some(m);
            break;
        }
        let (field, next) = match memchr(b'|', rest) {
            Some(p) => (&rest[..p], &rest[p + 1..]),
            None => (rest, &[][..]),
        };
        c.common.take(field)?;
        rest = next;
    }
    Ok(c)
}

impl<'a> Common<'a> {
    /// Takes `field` if it is one of the common ones; false if not.
    fn take(&mut self, field: &'a [u8]) -> Result<bool, DropReason> {
        match field {
            [b'd', b':', ts @ ..] => {
                self.timestamp = Some(parse_unix(ts).ok_or(DropReason::BadTimestamp)?);
            }
            [b'h', b':', host @ ..] => self.host = Some(host),
            [b'#', tags @ ..] => self.tags = tags,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A length in braces: unsigned digits, under a gigabyte (no line is that
/// long).
fn length(text: &[u8]) -> Option<usize> {
    parse_unix(text)
        .filter(|&n| n < 1_000_000_000)
        .and_then(|n| usize::try_from(n).ok())
}

/// Text with every `\n` written as the two bytes `\` `n` (as DogStatsD
/// clients escape newlines) turned back into a newline.
pub fn unescape(text: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if memchr::memmem::find(text, b"\\n").is_none() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = memchr::memmem::find(rest, b"\\n") {
        out.extend_from_slice(&rest[..at]);
        out.push(b'\n');
        rest = &rest[at + 2..];
    }
    out.extend_from_slice(rest);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(line: &str) -> Event<'_> {
        match parse(line.as_bytes()) {
            Ok(Happening::Event(e)) => e,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    fn sc(line: &str) -> ServiceCheck<'_> {
        match parse(line.as_bytes()) {
            Ok(Happening::ServiceCheck(c)) => c,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    #[test]
    fn an_event_takes_title_and_text_by_their_lengths_and_every_field() {
        let e = ev("_e{5,9}:dep|y|text|with|d:1700000000|h:web-1|k:deploy|p:low|s:ci|t:error|#env:prod,blue|c:ci-42|x:new");
        assert_eq!(e.title, b"dep|y");
        assert_eq!(e.text, b"text|with");
        assert_eq!(e.common.timestamp, Some(1_700_000_000));
        assert_eq!(e.common.host, Some(&b"web-1"[..]));
        assert_eq!(e.aggregation_key, Some(&b"deploy"[..]));
        assert_eq!(e.priority, Some(&b"low"[..]));
        assert_eq!(e.source_type_name, Some(&b"ci"[..]));
        assert_eq!(e.alert_type, Some(&b"error"[..]));
        assert_eq!(e.common.tags, b"env:prod,blue");

        let bare = ev("_e{2,0}:up|");
        assert_eq!((bare.title, bare.text), (&b"up"[..], &b""[..]));
        assert_eq!(bare.common, Common::default());
        assert_eq!(bare.priority, None);
        // Lengths count bytes, not characters.
        let utf8 = ev("_e{2,6}:\u{e9}|\u{e9}t\u{e9}!");
        assert_eq!(utf8.text, "\u{e9}t\u{e9}!".as_bytes());
    }

    #[test]
    fn a_service_check_takes_status_fields_and_a_message_to_the_end() {
        let c =
            sc("_sc|redis.up|2|d:1700000001|h:db-1|#env:dev|m:timed out | after 10s\\nretrying");
        assert_eq!(c.name, b"redis.up");
        assert_eq!(c.status, 2);
        assert_eq!(c.common.timestamp, Some(1_700_000_001));
        assert_eq!(c.common.host, Some(&b"db-1"[..]));
        assert_eq!(c.common.tags, b"env:dev");
        assert_eq!(c.message, Some(&b"timed out | after 10s\\nretrying"[..]));
        let bare = sc("_sc|x|0");
        assert_eq!((bare.status, bare.message), (0, None));
    }

    #[test]
    fn lines_that_break_the_shape_are_malformed_and_bad_times_say_so() {
        let malformed = [
            "_e{}:a|b",
            "_e{1}:a|b",
            "_e{1,x}:a|b",
            "_e{0,1}:|b",
            "_e{2,1}a|b",
            "_e{5,1}:a|b",
            "_e{1,5}:a|b",
            "_e{1,1}:ab|",
            "_e{1,1}:a|bc",
            "_e{1,1}:a|b:",
            "_e{9999999999,1}:a|b",
            "_e{1,18446744073709551615}:a|b",
            "_sc|x",
            "_sc||0",
            "_sc|x|4",
            "_sc|x|01",
            "_sc|x|",
            "_s|x|0",
            "",
        ];
        for line in malformed {
            assert_eq!(
                parse(line.as_bytes()),
                Err(DropReason::MalformedEvent),
                "{line:?}"
            );
        }
        for line in [
            "_e{1,1}:a|b|d:x",
            "_e{1,1}:a|b|d:-5",
            "_sc|x|1|d:",
            "_sc|x|1|d:1.5|m:hi",
        ] {
            assert_eq!(
                parse(line.as_bytes()),
                Err(DropReason::BadTimestamp),
                "{line:?}"
            );
        }
    }

    #[test]
    fn escaped_newlines_are_turned_back() {
        assert_eq!(&*unescape(b"a\\nb\\n"), b"a\nb\n");
        assert!(matches!(
            unescape(b"plain\\t"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(&*unescape(b"\\\\n"), b"\\\n");
    }

    proptest::proptest! {
        #[test]
        fn an_event_written_as_clients_write_it_parses_back(
            title in "[^\n]{1,40}",
            text in "[^\n]{0,80}",
            ts in proptest::option::of(0i64..4_000_000_000),
            tags in "[a-z:,]{0,20}",
        ) {
            let mut line = format!("_e{{{},{}}}:{title}|{text}", title.len(), text.len());
            if let Some(ts) = ts {
                line.push_str(&format!("|d:{ts}"));
            }
            if !tags.is_empty() {
                line.push_str(&format!("|#{tags}"));
            }
            let e = ev(&line);
            proptest::prop_assert_eq!(e.title, title.as_bytes());
            proptest::prop_assert_eq!(e.text, text.as_bytes());
            proptest::prop_assert_eq!(e.common.timestamp, ts);
            proptest::prop_assert_eq!(e.common.tags, tags.as_bytes());
        }

        #[test]
        fn any_line_parses_or_is_refused_without_panic(line in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let mut with_prefix = b"_e{".to_vec();
            with_prefix.extend_from_slice(&line);
            let _ = parse(&with_prefix);
            let mut sc_line = b"_sc|".to_vec();
            sc_line.extend_from_slice(&line);
            let _ = parse(&sc_line);
        }
    }
}
