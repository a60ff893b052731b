//! Batches of lines on their way from a source to its sinks, and the
//! acknowledgements on their way back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use sonde_encode::record::RecordMeta;
use sonde_logs::container::{self, ContainerPath, Format, Stream};
use sonde_logs::identity::FileId;
use sonde_logs::{Checkpoints, FileKey, Line, LineSink, Origin};

/// What every record of a source carries besides its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    /// The source's name (`[[logs]] name`).
    pub name: String,
    /// The host name, as records name it.
    pub host: String,
    /// `fields`, sorted by key: top-level keys of a JSON record, headers of
    /// a raw one.
    pub fields: Vec<(String, String)>,
}

/// One line of a [`LogBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// The line without its newline (and without a `\r` before it); cut at
    /// `max_line_bytes`.
    pub bytes: &'a [u8],
    /// The path its file was at when the line was read; empty for a
    /// record not read from a file.
    pub path: &'a str,
    /// The file offset of the line's first byte.
    pub offset: u64,
    /// Its file's device and inode; `None` for a record not read from a
    /// file.
    pub file: Option<FileId>,
    /// What a record not read from a file (a DogStatsD event) says about
    /// itself; `None` for lines of files.
    pub meta: Option<&'a RecordMeta>,
    /// What a record of a container log file says besides its line;
    /// `None` for a source of plain lines.
    pub container: Option<ContainerLine<'a>>,
}

/// What a record of a container log file ([`Format::Cri`],
/// [`Format::DockerJson`]) says besides its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerLine<'a> {
    /// When the runtime read it, RFC 3339 as the runtime wrote it; empty
    /// for a line that did not parse.
    pub time: &'a str,
    /// Its stream; `None` for a line that did not parse.
    pub stream: Option<Stream>,
    /// What its file's path says about its container
    /// ([`ContainerPath::fields`]): `(key, value)`s.
    pub path_fields: &'a [(&'static str, Box<str>)],
}

/// A path's [`ContainerPath::fields`], owned.
type PathFields = Box<[(&'static str, Box<str>)]>;

#[derive(Debug, Clone, Copy)]
struct Span {
    /// Index into `LogBatch::paths`.
    path: u32,
    /// The line's length; a container record's time follows it in
    /// `LogBatch::data`.
    len: u32,
    /// Where the line's bytes start in `LogBatch::data`.
    at: usize,
    offset: u64,
    /// The length of a container record's time.
    time_len: u8,
    /// A container record's stream.
    stream: Option<Stream>,
}

impl Span {
    fn line(path: usize, at: usize, len: usize, offset: u64) -> Span {
        Span {
            // Paths are per batch, lines at most `max_line_bytes`: both
            // far below 4 Gi.
            path: u32::try_from(path).unwrap_or(u32::MAX),
            len: u32::try_from(len).unwrap_or(u32::MAX),
            at,
            offset,
            time_len: 0,
            stream: None,
        }
    }

    fn end(&self) -> usize {
        self.at + self.len as usize
    }
}

/// Lines of one source, read together, shared by every sink that takes
/// the source. Each of those sinks calls [`LogBatch::ack`] once it has
/// delivered every line; the last call hands the batch back to the source,
/// which then advances the files' checkpoints past its lines.
///
/// The lines' bytes sit in one buffer, so a batch costs two allocations
/// however many lines it holds, and those two go back to the source's
/// pool when the batch's last holder drops it.
#[derive(Debug)]
pub struct LogBatch {
    source: Arc<SourceInfo>,
    seq: u64,
    /// The lines, as the builder collected them.
    parts: Parts,
    positions: Option<Checkpoints>,
    pending: AtomicUsize,
    done: Option<Sender<u64>>,
    pool: Option<Arc<Pool>>,
}

impl Drop for LogBatch {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give(
                std::mem::take(&mut self.parts.data),
                std::mem::take(&mut self.parts.spans),
            );
        }
    }
}

/// How many batches' buffers a [`Pool`] keeps.
const POOL_KEEP: usize = 4;

/// The buffers of batches that were dropped, for the next batches to fill.
///
/// # Design
///
/// A new buffer's pages are mapped on first write, one page fault each
/// (and jemalloc, run with `dirty_decay_ms:0`, unmaps freed pages at once):
/// faulting in a fresh 1 MiB batch per MiB read took half the source's CPU
/// on the blackhole path (docs/benchmarks/LOG.md, "log batches in reused
/// buffers"). Reused buffers are already mapped. The pool keeps
/// [`POOL_KEEP`] batches' buffers (about 5 MiB), enough while batches are
/// delivered as fast as they are read; the source empties it when it goes
/// idle ([`BatchBuilder::trim`]). A lock per batch, not per line.
#[derive(Debug, Default)]
struct Pool {
    free: Mutex<Vec<(Vec<u8>, Vec<Span>)>>,
}

impl Pool {
    fn give(&self, mut data: Vec<u8>, mut spans: Vec<Span>) {
        if data.capacity() == 0 {
            return;
        }
        data.clear();
        spans.clear();
        if let Ok(mut free) = self.free.lock() {
            if free.len() < POOL_KEEP {
                free.push((data, spans));
            }
        }
    }

    fn take(&self) -> Option<(Vec<u8>, Vec<Span>)> {
        self.free.lock().ok()?.pop()
    }

    fn clear(&self) {
        if let Ok(mut free) = self.free.lock() {
            free.clear();
        }
    }
}

impl LogBatch {
    /// The source the lines come from.
    pub fn source(&self) -> &SourceInfo {
        &self.source
    }

    /// The batch's number: the source numbers its batches from 0, in the
    /// order it read them.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The lines, in the order they were read (file order within a file).
    pub fn lines(&self) -> impl ExactSizeIterator<Item = LogLine<'_>> + '_ {
        self.lines_in(0..self.parts.spans.len())
    }

    /// The lines `range` (indices into [`LogBatch::lines`]), without
    /// walking the ones before it.
    ///
    /// # Panics
    ///
    /// When `range` runs past the batch's lines.
    pub fn lines_in(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl ExactSizeIterator<Item = LogLine<'_>> + '_ {
        self.parts.spans[range.clone()]
            .iter()
            .zip(range)
            .map(|(s, i)| LogLine {
                bytes: &self.parts.data[s.at..s.end()],
                path: &self.parts.paths[s.path as usize],
                offset: s.offset,
                file: self.parts.keys[s.path as usize].map(|(_, id)| id),
                meta: self.parts.metas.get(i),
                container: self.parts.path_fields.get(s.path as usize).map(|f| {
                    let time = &self.parts.data[s.end()..s.end() + usize::from(s.time_len)];
                    ContainerLine {
                        // Times are ASCII (`container::MAX_TIME_BYTES`).
                        time: std::str::from_utf8(time).unwrap_or_default(),
                        stream: s.stream,
                        path_fields: f,
                    }
                }),
            })
    }

    /// How many lines.
    pub fn len(&self) -> usize {
        self.parts.spans.len()
    }

    /// Whether it holds no line.
    pub fn is_empty(&self) -> bool {
        self.parts.spans.is_empty()
    }

    /// The lines' bytes, newlines not counted (and container records'
    /// times counted).
    pub fn bytes(&self) -> usize {
        self.parts.data.len()
    }

    /// For sinks that store offsets with the lines they deliver (Kafka
    /// transactions): the source's read positions right after this batch's
    /// lines, set on the last batch of each read round when a sink of the
    /// source asked for them ([`super::LogInput::positions`]). A sink that
    /// stores these with every line up to and including this batch's stores
    /// a consistent resume point.
    pub fn positions(&self) -> Option<&Checkpoints> {
        self.positions.as_ref()
    }

    /// Tells the source that this sink delivered every line of the batch.
    /// Call it once per sink; the batch's lines are acknowledged to the
    /// source once every sink it was sent to has called it.
    pub fn ack(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(done) = &self.done {
                // A source that stopped no longer waits for it.
                let _ = done.send(self.seq);
            }
        }
    }

    /// Per file, the end offset of its last line in the batch: what the
    /// source acknowledges to its tailer.
    pub(crate) fn ends(&self) -> &[(FileKey, u64)] {
        &self.parts.ends
    }

    /// Drops the lines of each file of `floors` that start below its
    /// offset (they were delivered before; see `Tailer::advance`).
    pub(crate) fn drop_below(&mut self, floors: &[(FileKey, u64)]) {
        debug_assert!(
            self.parts.metas.is_empty(),
            "records with meta have no file"
        );
        let keys = &self.parts.keys;
        self.parts.spans.retain(|s| {
            let floor =
                keys[s.path as usize].and_then(|(k, _)| floors.iter().find(|(f, _)| *f == k));
            floor.is_none_or(|&(_, at)| s.offset >= at)
        });
    }
}

/// Collects the lines a tailer pushes into batches of about `max_bytes`
/// (a batch closes after the line that reaches it, unless it is a
/// container record held for the next: [`container::Record::hold`]).
/// Batches come out unarmed: the source arms each ([`LogBatch::arm`]) as
/// it sends it.
pub(crate) struct BatchBuilder {
    source: Arc<SourceInfo>,
    /// Whether the source reads container log files, whose paths name
    /// their containers.
    container: bool,
    max_bytes: usize,
    next_seq: u64,
    current: Parts,
    /// Batches filled during the current poll, ready to go.
    full: Vec<LogBatch>,
    pool: Arc<Pool>,
}

/// The lines of a batch: what a [`BatchBuilder`] fills and a [`LogBatch`]
/// then holds.
#[derive(Debug, Default)]
struct Parts {
    /// The lines' bytes, one after another (a container line's time after
    /// it).
    data: Vec<u8>,
    /// Where each line is in `data`, and its file.
    spans: Vec<Span>,
    paths: Vec<Arc<str>>,
    /// The file of each entry of `paths`, in this run and across runs.
    keys: Vec<Option<(FileKey, FileId)>>,
    /// For a container source, what each entry of `paths` says about its
    /// container; empty otherwise.
    path_fields: Vec<PathFields>,
    /// Per file in the batch, the end offset of its last line.
    ends: Vec<(FileKey, u64)>,
    /// Empty for lines of files; else one per span.
    metas: Vec<RecordMeta>,
    /// While building: the file of the last line, whose path the next line
    /// of the same file shares.
    last: Option<FileKey>,
}

impl BatchBuilder {
    /// A builder for the lines of `source`, whose files are in `format`.
    pub(crate) fn new(source: Arc<SourceInfo>, format: Format, max_bytes: usize) -> Self {
        Self {
            source,
            container: format != Format::Lines,
            max_bytes,
            next_seq: 0,
            current: Parts::default(),
            full: Vec::new(),
            pool: Arc::default(),
        }
    }

    /// Frees the buffers kept for the next batches: for a source with
    /// nothing in flight and nothing read.
    pub(crate) fn trim(&mut self) {
        self.pool.clear();
    }

    /// Readies the current batch's buffers for its first line: reused
    /// ones from the pool, or new ones sized for a whole batch so that
    /// they do not grow (and copy) line by line.
    #[cold]
    fn open(&mut self) {
        let c = &mut self.current;
        match self.pool.take() {
            Some((data, spans)) => {
                c.data = data;
                c.spans = spans;
            }
            None => {
                // A batch closes after the line that reaches max_bytes:
                // room for one more line of a usual length.
                c.data = Vec::with_capacity(self.max_bytes + (64 << 10));
                c.spans = Vec::with_capacity(self.max_bytes / 128);
            }
        }
    }

    /// The batches filled so far, then the lines collected since as one
    /// more batch, if there are any.
    pub(crate) fn take(&mut self) -> Vec<LogBatch> {
        self.close();
        std::mem::take(&mut self.full)
    }

    fn close(&mut self) {
        if self.current.spans.is_empty() {
            return;
        }
        let parts = std::mem::take(&mut self.current);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.full.push(LogBatch {
            source: Arc::clone(&self.source),
            seq,
            parts,
            positions: None,
            pending: AtomicUsize::new(0),
            done: None,
            pool: Some(Arc::clone(&self.pool)),
        });
    }
}

impl BatchBuilder {
    /// Adds a record that was not read from a file, with what it says
    /// about itself (a DogStatsD event): a batch holds either these or
    /// lines of files.
    pub(crate) fn record(&mut self, bytes: &[u8], meta: RecordMeta) {
        if self.current.data.capacity() == 0 {
            self.open();
        }
        let c = &mut self.current;
        debug_assert!(c.ends.is_empty(), "a batch of lines of files");
        if c.paths.is_empty() {
            c.paths.push(Arc::from(""));
            c.keys.push(None);
        }
        c.spans.push(Span::line(0, c.data.len(), bytes.len(), 0));
        c.data.extend_from_slice(bytes);
        c.metas.push(meta);
        if c.data.len() >= self.max_bytes {
            self.close();
        }
    }
}

impl BatchBuilder {
    /// Adds `line` of `origin`'s file; returns its span, to complete.
    fn push(&mut self, origin: &Origin<'_>, line: &Line<'_>) -> &mut Span {
        if self.current.data.capacity() == 0 {
            self.open();
        }
        let c = &mut self.current;
        if c.last != Some(origin.key) {
            let path: Arc<str> = Arc::from(origin.path.to_string_lossy());
            if self.container {
                let fields = ContainerPath::parse(&path).fields();
                c.path_fields
                    .push(fields.map(|(k, v)| (k, Box::from(v))).collect());
            }
            c.paths.push(path);
            c.keys.push(Some((origin.key, origin.file)));
            c.last = Some(origin.key);
        }
        c.spans.push(Span::line(
            c.paths.len() - 1,
            c.data.len(),
            line.bytes.len(),
            line.start,
        ));
        c.data.extend_from_slice(line.bytes);
        match c.ends.iter_mut().find(|(k, _)| *k == origin.key) {
            Some((_, end)) => *end = line.end,
            None => c.ends.push((origin.key, line.end)),
        }
        // Just pushed.
        let last = c.spans.len() - 1;
        &mut c.spans[last]
    }
}

impl LineSink for BatchBuilder {
    fn line(&mut self, origin: &Origin<'_>, line: &Line<'_>) {
        self.push(origin, line);
        if self.current.data.len() >= self.max_bytes {
            self.close();
        }
    }

    fn record(&mut self, origin: &Origin<'_>, record: &container::Record<'_>) {
        let span = self.push(origin, &record.line);
        // The joiner keeps times to `container::MAX_TIME_BYTES`.
        let time = &record.time[..record.time.len().min(usize::from(u8::MAX))];
        span.time_len = time.len() as u8;
        span.stream = record.stream;
        self.current.data.extend_from_slice(time);
        if self.current.data.len() >= self.max_bytes && !record.hold {
            self.close();
        }
    }
}

impl LogBatch {
    /// Readies a batch to be sent to `pending` sinks, the last ack going to
    /// `done`, with the source's read positions if a sink asked for them.
    pub(crate) fn arm(
        &mut self,
        pending: usize,
        done: &Sender<u64>,
        positions: Option<Checkpoints>,
    ) {
        *self.pending.get_mut() = pending;
        self.done = Some(done.clone());
        self.positions = positions;
    }

    /// A batch of `(path, offset, line)`s, for the tests of sinks: it sends
    /// `seq` into `done` after `pending` acks.
    pub fn for_test(
        source: SourceInfo,
        seq: u64,
        lines: &[(&str, u64, &[u8])],
        pending: usize,
        done: Sender<u64>,
    ) -> LogBatch {
        let mut data = Vec::new();
        let mut spans = Vec::new();
        let mut paths: Vec<Arc<str>> = Vec::new();
        for (path, offset, bytes) in lines {
            let p = match paths.iter().position(|p| &**p == *path) {
                Some(i) => i,
                None => {
                    paths.push(Arc::from(*path));
                    paths.len() - 1
                }
            };
            spans.push(Span::line(p, data.len(), bytes.len(), *offset));
            data.extend_from_slice(bytes);
        }
        LogBatch {
            source: Arc::new(source),
            seq,
            parts: Parts {
                data,
                spans,
                keys: vec![None; paths.len()],
                paths,
                ..Parts::default()
            },
            positions: None,
            pending: AtomicUsize::new(pending),
            done: Some(done),
            pool: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::time::Instant;

    use sonde_logs::{Tailer, TailerConfig};

    use super::*;

    fn info() -> Arc<SourceInfo> {
        Arc::new(SourceInfo {
            name: "app".into(),
            host: "h".into(),
            fields: Vec::new(),
        })
    }

    /// Where a batch's bytes live: its first line's first byte.
    fn base(b: &LogBatch) -> *const u8 {
        b.lines().next().unwrap().bytes.as_ptr()
    }

    #[test]
    fn a_dropped_batch_gives_its_buffer_to_a_later_one_until_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut file = std::fs::File::create(&path).unwrap();
        let write = |file: &mut std::fs::File, from: usize| {
            let text: String = (from..from + 1000)
                .map(|n| format!("line {n:06}\n"))
                .collect();
            file.write_all(text.as_bytes()).unwrap();
        };
        let mut tailer = Tailer::new(
            TailerConfig::new(vec![format!("{}/*.log", dir.path().display())]),
            None,
        )
        .unwrap();
        tailer.rescan(Instant::now());
        // Batches of about 4 KiB: each poll of 12 KiB fills three.
        let mut builder = BatchBuilder::new(info(), Format::Lines, 4096);
        write(&mut file, 0);
        tailer.poll(Instant::now(), &mut builder);
        let first = builder.take();
        assert_eq!(first.len(), 3);
        let bases: Vec<*const u8> = first.iter().map(base).collect();
        drop(first);

        write(&mut file, 1000);
        tailer.poll(Instant::now(), &mut builder);
        let second = builder.take();
        assert!(
            second.iter().all(|b| bases.contains(&base(b))),
            "a batch got a new buffer while dropped ones were kept"
        );
        let lines: Vec<&[u8]> = second
            .iter()
            .flat_map(|b| b.lines())
            .map(|l| l.bytes)
            .collect();
        assert_eq!(lines.len(), 1000);
        assert_eq!(lines[0], b"line 001000");
        assert_eq!(lines[999], b"line 001999");
        drop(second);

        assert_eq!(builder.pool.free.lock().unwrap().len(), 3);
        builder.trim();
        assert!(builder.pool.free.lock().unwrap().is_empty());
    }

    #[test]
    fn container_records_carry_time_stream_and_pod_and_a_held_one_shares_its_batch() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("pods/shop_web-0_0b2c/nginx");
        std::fs::create_dir_all(&logs).unwrap();
        let t = "2024-05-06T07:08:09.000000001Z";
        // A stdout line in two pieces around a whole stderr line: the
        // stdout record is held for the stderr one.
        let text = format!(
            "{t} stdout P one \n{t} stderr F two\n{t} stdout F more\nnot cri\n{t} stdout F three\n"
        );
        std::fs::write(logs.join("0.log"), text).unwrap();
        let mut cfg = TailerConfig::new(vec![format!("{}/pods/*/*/*.log", dir.path().display())]);
        cfg.format = Format::Cri;
        let mut tailer = Tailer::new(cfg, None).unwrap();
        tailer.rescan(Instant::now());
        // Every record fills a batch.
        let mut builder = BatchBuilder::new(info(), Format::Cri, 1);
        tailer.poll(Instant::now(), &mut builder);
        let batches = builder.take();
        let got: Vec<Vec<(String, Option<Stream>, String)>> = batches
            .iter()
            .map(|b| {
                b.lines()
                    .map(|l| {
                        let c = l.container.unwrap();
                        let text = String::from_utf8(l.bytes.to_vec()).unwrap();
                        (text, c.stream, c.time.to_string())
                    })
                    .collect()
            })
            .collect();
        let rec = |text: &str, stream, time: &str| (text.to_string(), stream, time.to_string());
        assert_eq!(
            got,
            [
                vec![
                    rec("one more", Some(Stream::Stdout), t),
                    rec("two", Some(Stream::Stderr), t)
                ],
                vec![rec("not cri", None, "")],
                vec![rec("three", Some(Stream::Stdout), t)],
            ]
        );
        let line = batches[0].lines().next().unwrap();
        let fields: Vec<(&str, &str)> = line
            .container
            .unwrap()
            .path_fields
            .iter()
            .map(|(k, v)| (*k, &**v))
            .collect();
        assert_eq!(
            fields,
            [
                ("namespace", "shop"),
                ("pod_name", "web-0"),
                ("pod_uid", "0b2c"),
                ("container_name", "nginx")
            ]
        );
        // The first batch moves the checkpoint past both of its records'
        // pieces, and no further.
        let third_line = format!("{t} stdout P one \n{t} stderr F two\n{t} stdout F more\n").len();
        assert_eq!(batches[0].ends()[0].1, third_line as u64);
        assert_eq!(tailer.counters().malformed_lines, 1);
    }
}
