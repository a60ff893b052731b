//! Container runtimes' log files: each line of the file wraps a piece of
//! what a container wrote, with its time and stream, and a long line
//! arrives in pieces that have to be joined again.
//!
//! * [`Format::Cri`], the kubelet's files under `/var/log/pods` (containerd,
//!   CRI-O): `<RFC3339Nano time> <stdout|stderr> <P|F> <message>`. `P`
//!   marks a partial piece (the runtime cut the line, at 16 KiB), `F` the
//!   piece that ends the line.
//! * [`Format::DockerJson`], dockerd's json-file driver:
//!   `{"log":"...\n","stream":"stdout","time":"..."}`, where a `log` that
//!   does not end in `\n` is a partial piece.
//!
//! A [`Joiner`] per file turns pieces into records: one per line the
//! container wrote, its pieces joined (at most `max_bytes`, the rest cut
//! and counted), with the time of its first piece and its stream. The two
//! streams are joined apart, since a runtime interleaves them. A line that
//! does not parse is a record of its own, delivered as it is and counted.
//!
//! # Records and checkpoints
//!
//! Records are handed on in the order of their first piece's offset, so a
//! record that completes while an earlier one of the other stream is still
//! open waits for it. Each record carries the offset a checkpoint may move
//! to once it is delivered, which never passes a piece of a record not yet
//! handed on, nor leaves behind it a piece of one already handed on; so
//! across a restart no record is lost, split or sent twice. Where the two
//! streams' pieces interleave, no offset inside the group satisfies both,
//! and the records before the group's last one carry the offset before the
//! group with [`Record::hold`] set: the caller keeps them in one batch with
//! the last, so that the group is delivered, or redelivered, whole. A
//! group is handed on at once, when its last record is complete.
//!
//! A record left open waits [`PARTIAL_WAIT`] for its next piece (a
//! runtime writes a line's pieces together once it has the line's end);
//! then it is handed on as it is and counted as unfinished, and a piece
//! that comes later starts a record of its own.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::counters::Counters;
use crate::lines::Line;

/// How a log source's lines are read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// Each line is a record as it is.
    #[default]
    Lines,
    /// The kubelet's CRI log format.
    Cri,
    /// dockerd's json-file format.
    DockerJson,
}

/// The stream a container wrote a line to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn parse(s: &[u8]) -> Option<Stream> {
        match s {
            b"stdout" => Some(Stream::Stdout),
            b"stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }
}

/// What one line of a container log file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece<'a> {
    /// When the runtime read it, as written (RFC 3339 with nanoseconds).
    pub time: Cow<'a, [u8]>,
    /// The stream it came from.
    pub stream: Stream,
    /// Whether more pieces of the same line follow.
    pub partial: bool,
    /// The piece of the line, without the newline that ends it.
    pub message: Cow<'a, [u8]>,
}

impl Format {
    /// The piece `line` holds, or `None` when it is not in this format
    /// (and always for [`Format::Lines`]).
    pub fn parse(self, line: &[u8]) -> Option<Piece<'_>> {
        match self {
            Format::Lines => None,
            Format::Cri => parse_cri(line),
            Format::DockerJson => parse_docker(line),
        }
    }
}

/// The longest time a piece may carry: RFC 3339 with nanoseconds and a
/// numeric offset is 35 bytes.
pub const MAX_TIME_BYTES: usize = 40;

/// A record's time (RFC 3339, any offset) in nanoseconds since the Unix
/// epoch; `None` if it is not one or lies before the epoch.
pub fn unix_nanos(time: &str) -> Option<u64> {
    let t: jiff::Timestamp = time.parse().ok()?;
    u64::try_from(t.as_nanosecond()).ok()
}

/// Whether `t` looks like an RFC 3339 time: `YYYY-MM-DDTHH:MM:SS` and more,
/// printable ASCII, at most [`MAX_TIME_BYTES`].
fn is_time(t: &[u8]) -> bool {
    (20..=MAX_TIME_BYTES).contains(&t.len())
        && t.iter().all(u8::is_ascii_graphic)
        && t[4] == b'-'
        && t[7] == b'-'
        && t[10] == b'T'
        && t[13] == b':'
        && t[..4].iter().all(u8::is_ascii_digit)
}

/// `<time> <stream> <tags> <message>`; the tags are `P` or `F`, optionally
/// followed by `:`-separated others, which are ignored.
fn parse_cri(line: &[u8]) -> Option<Piece<'_>> {
    let mut parts = line.splitn(4, |&b| b == b' ');
    let time = parts.next().filter(|t| is_time(t))?;
    let stream = Stream::parse(parts.next()?)?;
    let tags = parts.next()?;
    let partial = match tags.split(|&b| b == b':').next()? {
        b"P" => true,
        b"F" => false,
        _ => return None,
    };
    Some(Piece {
        time: Cow::Borrowed(time),
        stream,
        partial,
        message: Cow::Borrowed(parts.next().unwrap_or_default()),
    })
}

#[derive(serde::Deserialize)]
struct DockerLine<'a> {
    #[serde(borrow)]
    log: Cow<'a, str>,
    #[serde(borrow)]
    stream: Cow<'a, str>,
    #[serde(borrow)]
    time: Cow<'a, str>,
}

fn bytes(s: Cow<'_, str>) -> Cow<'_, [u8]> {
    match s {
        Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
        Cow::Owned(s) => Cow::Owned(s.into_bytes()),
    }
}

fn parse_docker(line: &[u8]) -> Option<Piece<'_>> {
    let d: DockerLine<'_> = serde_json::from_slice(line).ok()?;
    let stream = Stream::parse(d.stream.as_bytes())?;
    if !is_time(d.time.as_bytes()) {
        return None;
    }
    let partial = !d.log.ends_with('\n');
    let mut message = bytes(d.log);
    if !partial {
        match &mut message {
            Cow::Borrowed(m) => *m = &m[..m.len() - 1],
            Cow::Owned(m) => {
                m.pop();
            }
        }
    }
    Some(Piece {
        time: bytes(d.time),
        stream,
        partial,
        message,
    })
}

/// A record a [`Joiner`] hands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The line the container wrote (its pieces joined), or a line that
    /// did not parse, whole; `line.start` is the offset of its first
    /// piece, `line.end` where a checkpoint may move once it is delivered
    /// (see the [module docs](self)), `line.cut_bytes` what was cut.
    pub line: Line<'a>,
    /// The time of its first piece; empty for a line that did not parse.
    pub time: &'a [u8],
    /// Its stream; `None` for a line that did not parse.
    pub stream: Option<Stream>,
    /// Set when the record must be delivered in one batch with the next
    /// one: `line.end` does not move the checkpoint past it.
    pub hold: bool,
}

/// A record being joined, or joined and waiting for an earlier one.
#[derive(Debug, Default)]
struct Building {
    buf: Vec<u8>,
    time: Vec<u8>,
    /// Offset of its first piece's line.
    start: u64,
    /// End offset of its last piece's line.
    last_end: u64,
    cut: u64,
    pieces: u32,
    stream: Option<Stream>,
}

/// How long an open record waits for its next piece; see the
/// [module docs](self).
pub const PARTIAL_WAIT: Duration = Duration::from_secs(5);

/// The records one file is joining; see the [module docs](self).
#[derive(Debug, Default)]
pub struct Joiner {
    /// The open record of each stream: stdout, stderr.
    open: [Option<Building>; 2],
    /// Complete records by their first offset, waiting for an open one
    /// that started before them.
    done: VecDeque<Building>,
    /// Bytes held in `done`.
    done_bytes: usize,
    /// The offset the last record handed on let a checkpoint move to.
    safe: Option<u64>,
    /// The largest end offset of a line of a record handed on.
    delivered_end: u64,
    /// When a piece last went into an open record.
    last_at: Option<Instant>,
    /// Records handed on, cleared, for the next ones to fill: joining
    /// reuses their buffers instead of allocating two per record.
    spare: Vec<Building>,
}

/// How many handed-on records' buffers a [`Joiner`] keeps, and the largest
/// it keeps.
const SPARE: (usize, usize) = (2, 64 << 10);

impl Joiner {
    /// The offset of the first piece of the earliest record not handed
    /// on yet: where reading has to start again after a restart.
    pub fn start(&self) -> Option<u64> {
        let open = self.open.iter().flatten().map(|b| b.start);
        open.chain(self.done.front().map(|b| b.start)).min()
    }

    /// Whether a record is open or waiting.
    pub fn is_empty(&self) -> bool {
        self.open.iter().all(Option::is_none) && self.done.is_empty()
    }

    /// When the open records have waited [`PARTIAL_WAIT`] for their next
    /// piece, if one is open: [`Joiner::flush`] them then.
    pub fn due(&self) -> Option<Instant> {
        let open = self.open.iter().any(Option::is_some);
        self.last_at.filter(|_| open).map(|at| at + PARTIAL_WAIT)
    }

    /// Takes one line of the file in `format`, read at `now`, joining at
    /// most `max_bytes` of a record; hands on through `emit` every record
    /// that can go.
    pub fn push(
        &mut self,
        format: Format,
        line: &Line<'_>,
        (max_bytes, now): (usize, Instant),
        counters: &mut Counters,
        emit: &mut impl FnMut(&Record<'_>),
    ) {
        self.safe.get_or_insert(line.start);
        let piece = format.parse(line.bytes);
        if self.is_empty() && piece.as_ref().is_none_or(|p| !p.partial) {
            self.pass(piece, line, max_bytes, counters, emit);
            return;
        }
        match piece {
            None => {
                counters.malformed_lines += 1;
                let mut b = self.building(line.start, None, b"");
                b.buf.extend_from_slice(line.bytes);
                b.last_end = line.end;
                b.cut = line.cut_bytes;
                b.pieces = 1;
                self.queue(b);
            }
            Some(piece) => {
                let s = piece.stream as usize;
                if self.open[s].is_none() {
                    let b = self.building(line.start, Some(piece.stream), &piece.time);
                    self.open[s] = Some(b);
                }
                let open = self.open[s].get_or_insert_with(Building::default);
                let room = max_bytes.saturating_sub(open.buf.len());
                let kept = piece.message.len().min(room);
                if kept < piece.message.len() && open.cut == 0 {
                    counters.lines_truncated += 1;
                }
                open.buf.extend_from_slice(&piece.message[..kept]);
                open.cut += (piece.message.len() - kept) as u64 + line.cut_bytes;
                open.last_end = line.end;
                open.pieces += 1;
                self.last_at = Some(now);
                if !piece.partial {
                    let b = self.open[s].take().unwrap_or_default();
                    self.queue(b);
                }
            }
        }
        // A record left open (its container stopped mid-line) must not
        // hold the other stream's records back without bound.
        if self.done_bytes > max_bytes {
            self.close_open(counters);
        }
        self.release(line.end, counters, emit);
    }

    /// Hands on a line that is a record of its own (a whole piece, or a
    /// line that did not parse) while nothing is open or waiting, as it
    /// is: no copy, and the checkpoint may move past it. Most lines of a
    /// container log take this path (docs/BENCHMARKS.md, "Container log
    /// formats").
    fn pass(
        &mut self,
        piece: Option<Piece<'_>>,
        line: &Line<'_>,
        max_bytes: usize,
        counters: &mut Counters,
        emit: &mut impl FnMut(&Record<'_>),
    ) {
        self.safe = Some(line.end);
        self.delivered_end = line.end;
        let Some(piece) = piece else {
            counters.malformed_lines += 1;
            emit(&Record {
                line: *line,
                time: b"",
                stream: None,
                hold: false,
            });
            return;
        };
        let kept = piece.message.len().min(max_bytes);
        if kept < piece.message.len() {
            counters.lines_truncated += 1;
        }
        emit(&Record {
            line: Line {
                bytes: &piece.message[..kept],
                start: line.start,
                end: line.end,
                cut_bytes: (piece.message.len() - kept) as u64 + line.cut_bytes,
            },
            time: &piece.time,
            stream: Some(piece.stream),
            hold: false,
        });
    }

    /// Hands on everything: open records as they are (their file is done
    /// with, or they waited too long) and the records behind them.
    /// `consumed` is the end offset of the last line pushed.
    pub fn flush(
        &mut self,
        consumed: u64,
        counters: &mut Counters,
        emit: &mut impl FnMut(&Record<'_>),
    ) {
        self.close_open(counters);
        self.release(consumed, counters, emit);
    }

    /// Forgets everything, as after a truncation.
    pub fn reset(&mut self) {
        *self = Joiner::default();
    }

    /// Drops the records that start below `offset`: they were delivered
    /// before a restart.
    pub fn drop_below(&mut self, offset: u64) {
        for open in &mut self.open {
            if open.as_ref().is_some_and(|b| b.start < offset) {
                *open = None;
            }
        }
        self.done.retain(|b| b.start >= offset);
        self.done_bytes = self.done.iter().map(|b| b.buf.len()).sum();
        if self.safe.is_some_and(|s| s < offset) {
            self.safe = Some(offset);
        }
    }

    /// A record starting at `start`, in a spare buffer if there is one.
    fn building(&mut self, start: u64, stream: Option<Stream>, time: &[u8]) -> Building {
        let mut b = self.spare.pop().unwrap_or_default();
        b.time.extend_from_slice(time);
        b.start = start;
        b.stream = stream;
        b
    }

    /// Keeps a handed-on record's buffers for [`Joiner::building`].
    fn recycle(&mut self, mut b: Building) {
        if self.spare.len() < SPARE.0 && b.buf.capacity() <= SPARE.1 {
            b.buf.clear();
            b.time.clear();
            b.cut = 0;
            b.pieces = 0;
            self.spare.push(b);
        }
    }

    fn close_open(&mut self, counters: &mut Counters) {
        for i in 0..2 {
            if let Some(b) = self.open[i].take() {
                counters.unfinished_records += 1;
                self.queue(b);
            }
        }
    }

    fn queue(&mut self, b: Building) {
        self.done_bytes += b.buf.len();
        let at = self.done.partition_point(|d| d.start < b.start);
        self.done.insert(at, b);
    }

    /// Hands on the waiting records that no open record started before,
    /// up to the last one after which the checkpoint can move past every
    /// piece handed on: a group of interleaved records goes whole, in one
    /// call, so that a caller's batch boundary can respect [`Record::hold`].
    fn release(
        &mut self,
        consumed: u64,
        counters: &mut Counters,
        emit: &mut impl FnMut(&Record<'_>),
    ) {
        let earliest_open = self.open.iter().flatten().map(|b| b.start).min();
        // The first offset not handed on once the first `i` waiting
        // records are.
        let next = |done: &VecDeque<Building>, i: usize| {
            let waiting = done.get(i).map(|d| d.start);
            waiting
                .into_iter()
                .chain(earliest_open)
                .min()
                .unwrap_or(consumed)
        };
        let mut go = 0;
        let mut end = self.delivered_end;
        for (i, b) in self.done.iter().enumerate() {
            if earliest_open.is_some_and(|o| o < b.start) {
                break;
            }
            end = end.max(b.last_end);
            if end <= next(&self.done, i + 1) {
                go = i + 1;
            }
        }
        for _ in 0..go {
            let Some(b) = self.done.pop_front() else {
                break;
            };
            self.done_bytes -= b.buf.len();
            if b.pieces > 1 {
                counters.joined_records += 1;
            }
            self.delivered_end = self.delivered_end.max(b.last_end);
            // The checkpoint may move to the first piece not yet handed
            // on, if no piece handed on lies beyond it.
            let next = next(&self.done, 0);
            let hold = self.delivered_end > next;
            let end = if hold {
                self.safe.unwrap_or(b.start)
            } else {
                next
            };
            self.safe = Some(end);
            emit(&Record {
                line: Line {
                    bytes: &b.buf,
                    start: b.start,
                    end,
                    cut_bytes: b.cut,
                },
                time: &b.time,
                stream: b.stream,
                hold,
            });
            self.recycle(b);
        }
    }
}

/// What a container log file's path says about its container, for
/// the paths the runtimes write:
///
/// * `/var/log/pods/<namespace>_<pod>_<pod uid>/<container>/<n>.log`, the
///   kubelet's (and its rotated `<n>.log.<timestamp>`, gzip'd or not);
/// * `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`, the
///   kubelet's links to them;
/// * `/var/lib/docker/containers/<id>/<id>-json.log`, dockerd's (and its
///   rotated `<id>-json.log.<n>`).
///
/// Only the directory names are matched, so the same trees mounted
/// elsewhere are named too. Any other path names nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerPath<'a> {
    /// The pod's namespace.
    pub namespace: Option<&'a str>,
    /// The pod's name.
    pub pod_name: Option<&'a str>,
    /// The pod's uid.
    pub pod_uid: Option<&'a str>,
    /// The container's name.
    pub container_name: Option<&'a str>,
    /// The container's id.
    pub container_id: Option<&'a str>,
}

/// The keys [`ContainerPath::fields`] names them by, and the record's own
/// `time` and `stream`: the keys a container record has besides a line's.
pub const RECORD_KEYS: [&str; 7] = [
    "time",
    "stream",
    "namespace",
    "pod_name",
    "pod_uid",
    "container_name",
    "container_id",
];

impl<'a> ContainerPath<'a> {
    /// What `path` says; all `None` for a path of no runtime's.
    pub fn parse(path: &'a str) -> ContainerPath<'a> {
        Self::pods(path)
            .or_else(|| Self::links(path))
            .or_else(|| Self::docker(path))
            .unwrap_or_default()
    }

    /// The fields it names, by [`RECORD_KEYS`] names, in that order.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, &'a str)> {
        [
            ("namespace", self.namespace),
            ("pod_name", self.pod_name),
            ("pod_uid", self.pod_uid),
            ("container_name", self.container_name),
            ("container_id", self.container_id),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
    }

    fn pods(path: &'a str) -> Option<Self> {
        let mut parts = path.rsplit('/');
        let file = parts.next()?;
        let container_name = parts.next().filter(|c| !c.is_empty())?;
        let pod_dir = parts.next()?;
        if parts.next()? != "pods" || !file.contains(".log") {
            return None;
        }
        // Namespaces and pod names have no `_`; the uid is last.
        let mut pod = pod_dir.splitn(3, '_');
        let (namespace, pod_name, pod_uid) = (pod.next()?, pod.next()?, pod.next()?);
        if [namespace, pod_name, pod_uid].iter().any(|s| s.is_empty()) {
            return None;
        }
        Some(ContainerPath {
            namespace: Some(namespace),
            pod_name: Some(pod_name),
            pod_uid: Some(pod_uid),
            container_name: Some(container_name),
            container_id: None,
        })
    }

    fn links(path: &'a str) -> Option<Self> {
        let (dir, file) = path.rsplit_once('/')?;
        if !dir.ends_with("/containers") && dir != "containers" {
            return None;
        }
        let stem = file.strip_suffix(".log")?;
        let mut parts = stem.splitn(3, '_');
        let (pod_name, namespace, rest) = (parts.next()?, parts.next()?, parts.next()?);
        let (container_name, id) = rest.rsplit_once('-')?;
        if [pod_name, namespace, container_name]
            .iter()
            .any(|s| s.is_empty())
            || !is_id(id)
        {
            return None;
        }
        Some(ContainerPath {
            namespace: Some(namespace),
            pod_name: Some(pod_name),
            container_name: Some(container_name),
            container_id: Some(id),
            pod_uid: None,
        })
    }

    fn docker(path: &'a str) -> Option<Self> {
        let mut parts = path.rsplit('/');
        let file = parts.next()?;
        let id = parts.next().filter(|id| is_id(id))?;
        if parts.next()? != "containers" || !file.strip_prefix(id)?.starts_with("-json.log") {
            return None;
        }
        Some(ContainerPath {
            container_id: Some(id),
            ..ContainerPath::default()
        })
    }
}

/// Whether `s` is a container id: 64 lowercase hex digits.
fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cri_lines_parse_into_their_parts_and_others_do_not() {
        let p = parse_cri(b"2024-01-02T03:04:05.123456789Z stdout F hello world").unwrap();
        assert_eq!(&*p.time, b"2024-01-02T03:04:05.123456789Z");
        assert_eq!((p.stream, p.partial), (Stream::Stdout, false));
        assert_eq!(&*p.message, b"hello world");
        let p = parse_cri(b"2024-01-02T03:04:05.1+01:00 stderr P:x part ").unwrap();
        assert_eq!(
            (p.stream, p.partial, &*p.message),
            (Stream::Stderr, true, &b"part "[..])
        );
        // An empty line is `F` and nothing, with or without the space.
        for line in [
            &b"2024-01-02T03:04:05Z stdout F "[..],
            b"2024-01-02T03:04:05Z stdout F",
        ] {
            assert_eq!(&*parse_cri(line).unwrap().message, b"");
        }
        for bad in [
            &b"hello"[..],
            b"",
            b"2024-01-02T03:04:05Z stdin F x",
            b"2024-01-02T03:04:05Z stdout X x",
            b"yesterday stdout F x",
            b"2024-01-02T03:04:05Z stdout",
        ] {
            assert_eq!(parse_cri(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn times_in_any_offset_give_nanoseconds_since_the_epoch() {
        let want = 1_704_164_645_123_456_789;
        assert_eq!(unix_nanos("2024-01-02T03:04:05.123456789Z"), Some(want));
        assert_eq!(
            unix_nanos("2024-01-02T04:04:05.123456789+01:00"),
            Some(want)
        );
        assert_eq!(
            unix_nanos("2024-01-02T03:04:05Z"),
            Some(want / 1_000_000_000 * 1_000_000_000)
        );
        for bad in [
            "",
            "2024-01-02",
            "1969-12-31T23:59:59Z",
            "2024-13-02T03:04:05Z",
        ] {
            assert_eq!(unix_nanos(bad), None, "{bad}");
        }
    }

    #[test]
    fn docker_json_lines_parse_with_escapes_and_partials() {
        let p = parse_docker(br#"{"log":"caf\u00e9 \"ok\"\n","stream":"stderr","time":"2024-01-02T03:04:05.000000001Z"}"#)
            .unwrap();
        assert_eq!((p.stream, p.partial), (Stream::Stderr, false));
        assert_eq!(&*p.message, "café \"ok\"".as_bytes());
        let p = parse_docker(
            br#"{"log":"no newline","stream":"stdout","time":"2024-01-02T03:04:05Z"}"#,
        )
        .unwrap();
        assert!(p.partial);
        assert_eq!(&*p.message, b"no newline");
        for bad in [
            &br#"{"log":"x\n","stream":"stdin","time":"2024-01-02T03:04:05Z"}"#[..],
            br#"{"log":"x\n","stream":"stdout"}"#,
            br#"{"log":"x\n","stream":"stdout","time":"now"}"#,
            b"not json",
        ] {
            assert_eq!(parse_docker(bad), None);
        }
    }

    /// A handed-on record: text, stream, start, end, hold.
    type Got = (String, Option<Stream>, u64, u64, bool);

    /// The records a joiner hands on for `lines` (each with its offsets
    /// as a file would give them), and its counters.
    fn join(format: Format, lines: &[&[u8]], max: usize) -> (Vec<Got>, Counters) {
        let mut j = Joiner::default();
        let mut c = Counters::default();
        let mut out = Vec::new();
        let mut emit = |r: &Record<'_>| {
            out.push((
                String::from_utf8_lossy(r.line.bytes).into_owned(),
                r.stream,
                r.line.start,
                r.line.end,
                r.hold,
            ))
        };
        let mut at = 0u64;
        for l in lines {
            let line = Line {
                bytes: l,
                start: at,
                end: at + l.len() as u64 + 1,
                cut_bytes: 0,
            };
            at = line.end;
            j.push(format, &line, (max, Instant::now()), &mut c, &mut emit);
        }
        j.flush(at, &mut c, &mut emit);
        (out, c)
    }

    const T: &str = "2024-01-02T03:04:05.000000000Z";

    fn cri(stream: &str, tag: &str, msg: &str) -> Vec<u8> {
        format!("{T} {stream} {tag} {msg}").into_bytes()
    }

    #[test]
    fn partial_pieces_join_per_stream_and_records_go_in_order_of_their_first_piece() {
        let lines = [
            cri("stdout", "P", "aaa"),
            cri("stdout", "P", "bbb"),
            cri("stderr", "F", "err"),
            cri("stdout", "F", "ccc"),
            cri("stdout", "F", "next"),
        ];
        let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_slice()).collect();
        let (records, c) = join(Format::Cri, &refs, 1 << 20);
        let ends: Vec<u64> = refs
            .iter()
            .scan(0, |at, l| {
                *at += l.len() as u64 + 1;
                Some(*at)
            })
            .collect();
        assert_eq!(
            records,
            [
                // The stdout line, its pieces joined; the stderr line
                // inside it is held until it is whole, and the checkpoint
                // moves past the group with the second record only.
                ("aaabbbccc".into(), Some(Stream::Stdout), 0, 0, true),
                ("err".into(), Some(Stream::Stderr), ends[1], ends[3], false),
                ("next".into(), Some(Stream::Stdout), ends[3], ends[4], false),
            ]
        );
        assert_eq!(
            (c.joined_records, c.malformed_lines, c.unfinished_records),
            (1, 0, 0)
        );
    }

    #[test]
    fn a_record_over_max_bytes_is_cut_and_counted_and_a_malformed_line_goes_raw() {
        let lines = [
            cri("stdout", "P", "0123456789"),
            cri("stdout", "F", "abcdef"),
            b"garbage line".to_vec(),
            cri("stderr", "P", "never finished"),
        ];
        let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_slice()).collect();
        let (records, c) = join(Format::Cri, &refs, 12);
        let texts: Vec<&str> = records.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(texts, ["0123456789ab", "garbage line", "never finish"]);
        assert_eq!(records[1].1, None);
        assert_eq!(
            (c.lines_truncated, c.malformed_lines, c.unfinished_records),
            (2, 1, 1)
        );
    }

    /// Two streams' lines, each cut into pieces, interleaved as a runtime
    /// writes them: which stream each piece comes from, in file order.
    fn interleaved() -> impl Strategy<Value = (Vec<Vec<String>>, Vec<Vec<String>>, Vec<bool>)> {
        let lines = || prop::collection::vec(prop::collection::vec("[a-z]{1,4}", 1..4), 0..6);
        (lines(), lines()).prop_flat_map(|(out, err)| {
            let n = out.iter().chain(&err).map(Vec::len).sum::<usize>();
            (
                Just(out),
                Just(err),
                prop::collection::vec(any::<bool>(), n),
            )
        })
    }

    proptest! {
        /// Acknowledging the records up to any one not held, then
        /// restarting from the checkpoint it carries, gives exactly the
        /// records after it: none lost, none twice, none split.
        #[test]
        fn a_restart_at_any_checkpoint_loses_and_repeats_nothing(
            (out, err, order) in interleaved()
        ) {
            // The file: pieces in an order that keeps each stream's own.
            let mut queues = [out.iter().flat_map(|l| {
                l.iter().enumerate().map(move |(i, p)| (Stream::Stdout, p.clone(), i + 1 < l.len()))
            }).collect::<VecDeque<_>>(), err.iter().flat_map(|l| {
                l.iter().enumerate().map(move |(i, p)| (Stream::Stderr, p.clone(), i + 1 < l.len()))
            }).collect::<VecDeque<_>>()];
            let mut file: Vec<(u64, Vec<u8>)> = Vec::new();
            let mut at = 0;
            for &first in &order {
                let q = if (first && !queues[0].is_empty()) || queues[1].is_empty() { 0 } else { 1 };
                let (stream, piece, partial) = queues[q].pop_front().unwrap();
                let line = cri(stream.as_str(), if partial { "P" } else { "F" }, &piece);
                file.push((at, line.clone()));
                at += line.len() as u64 + 1;
            }
            let run = |from: u64| {
                let mut j = Joiner::default();
                let mut c = Counters::default();
                let mut out = Vec::new();
                let mut emit = |r: &Record<'_>| {
                    out.push((String::from_utf8_lossy(r.line.bytes).into_owned(), r.stream, r.line.end, r.hold))
                };
                // Each push hands on whole groups: its last record holds
                // nothing back.
                let mut whole = true;
                for (start, bytes) in file.iter().filter(|(s, _)| *s >= from) {
                    let line = Line { bytes, start: *start, end: start + bytes.len() as u64 + 1, cut_bytes: 0 };
                    let mut last_hold = None;
                    j.push(Format::Cri, &line, (1 << 20, Instant::now()), &mut c, &mut |r| {
                        last_hold = Some(r.hold);
                        emit(r);
                    });
                    whole &= last_hold != Some(true);
                }
                j.flush(at, &mut c, &mut emit);
                prop_assert!(whole, "a push ended inside a group");
                prop_assert_eq!(c.unfinished_records, 0);
                Ok(out)
            };
            let all = run(0)?;
            // Each stream's lines, whole and in order.
            for (stream, lines) in [(Stream::Stdout, &out), (Stream::Stderr, &err)] {
                let got: Vec<&str> = all.iter().filter(|r| r.1 == Some(stream)).map(|r| r.0.as_str()).collect();
                let want: Vec<String> = lines.iter().map(|l| l.concat()).collect();
                prop_assert_eq!(got, want);
            }
            prop_assert!(all.windows(2).all(|w| w[0].2 <= w[1].2), "checkpoints go back: {:?}", all);
            prop_assert!(all.last().is_none_or(|r| !r.3 && r.2 == at));
            for (k, r) in all.iter().enumerate().filter(|(_, r)| !r.3) {
                let again = run(r.2)?;
                let rest: Vec<_> = all[k + 1..].iter().map(|r| (&r.0, r.1)).collect();
                let again: Vec<_> = again.iter().map(|r| (&r.0, r.1)).collect();
                prop_assert_eq!(again, rest, "restart after record {} at {}", k, r.2);
            }
        }
    }

    #[test]
    fn docker_json_pieces_join_until_a_newline() {
        let lines: Vec<Vec<u8>> = [
            (r#"{"log":"part one ","stream":"stdout","time":"2024-01-02T03:04:05Z"}"#),
            (r#"{"log":"and two\n","stream":"stdout","time":"2024-01-02T03:04:06Z"}"#),
            (r#"{"log":"\n","stream":"stderr","time":"2024-01-02T03:04:07Z"}"#),
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_slice()).collect();
        let (records, c) = join(Format::DockerJson, &refs, 1 << 20);
        let texts: Vec<&str> = records.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(texts, ["part one and two", ""]);
        assert_eq!(c.joined_records, 1);
    }

    #[test]
    fn runtime_paths_name_the_pod_and_container() {
        let p = ContainerPath::parse("/var/log/pods/kube-system_coredns-5d78c9869d-8xq2v_0b2c5a7e-1f3d-4c6b-9a8e-7d6f5e4c3b2a/coredns/0.log");
        assert_eq!(
            p.fields().collect::<Vec<_>>(),
            [
                ("namespace", "kube-system"),
                ("pod_name", "coredns-5d78c9869d-8xq2v"),
                ("pod_uid", "0b2c5a7e-1f3d-4c6b-9a8e-7d6f5e4c3b2a"),
                ("container_name", "coredns"),
            ]
        );
        for rotated in ["1.log.20240102-030405", "1.log.20240102-030405.gz"] {
            let path = format!("/var/log/pods/ns_pod_uid/app/{rotated}");
            assert_eq!(ContainerPath::parse(&path).container_name, Some("app"));
        }
        let id = "3f4e".repeat(16);
        let link = format!("/var/log/containers/web-0_shop_nginx-proxy-{id}.log");
        let p = ContainerPath::parse(&link);
        assert_eq!(
            p.fields().collect::<Vec<_>>(),
            [
                ("namespace", "shop"),
                ("pod_name", "web-0"),
                ("container_name", "nginx-proxy"),
                ("container_id", id.as_str()),
            ]
        );
        for file in [format!("{id}-json.log"), format!("{id}-json.log.3")] {
            let path = format!("/var/lib/docker/containers/{id}/{file}");
            let p = ContainerPath::parse(&path);
            assert_eq!(
                p.fields().collect::<Vec<_>>(),
                [("container_id", id.as_str())]
            );
        }
        for other in [
            "/var/log/app.log".to_string(),
            "/var/log/pods/nounderscore/app/0.log".into(),
            "/var/log/containers/x.log".into(),
            format!("/var/log/containers/a_b_c-{}.log", &id[1..]),
            format!("/var/lib/docker/containers/{id}/other.log"),
            "0.log".into(),
        ] {
            assert_eq!(
                ContainerPath::parse(&other),
                ContainerPath::default(),
                "{other}"
            );
        }
    }
}
