//! What the tailer's tests share: a sink that keeps what it gets, files
//! written as a writer would, and a rescan-and-poll until nothing is left.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{Event, FileKey, LineSink, Origin, Tailer, TailerConfig};
use crate::lines::Line;

/// A sink that keeps every line it gets.
#[derive(Default)]
pub(super) struct Collect(pub(super) Vec<Got>);

/// A line as a sink got it.
#[derive(Debug, Clone)]
pub(super) struct Got {
    pub(super) key: FileKey,
    pub(super) path: PathBuf,
    pub(super) text: String,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) cut: u64,
}

impl LineSink for Collect {
    fn line(&mut self, origin: &Origin<'_>, line: &Line<'_>) {
        self.0.push(Got {
            key: origin.key,
            path: origin.path.to_path_buf(),
            text: String::from_utf8(line.bytes.to_vec()).unwrap(),
            start: line.start,
            end: line.end,
            cut: line.cut_bytes,
        });
    }
}

impl Collect {
    pub(super) fn texts(&self) -> Vec<&str> {
        self.0.iter().map(|g| g.text.as_str()).collect()
    }
}

/// Appends `bytes` to the file at `path`, creating it.
pub(super) fn append(path: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// The defaults, reading the files `include` matches in `dir`.
pub(super) fn config(dir: &Path, include: &str) -> TailerConfig {
    TailerConfig::new(vec![format!("{}/{include}", dir.display())])
}

/// Rescans, then polls until no file has more to read; returns the
/// events.
pub(super) fn drain(t: &mut Tailer, now: Instant, sink: &mut Collect) -> Vec<Event> {
    let report = t.rescan(now);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let mut events = report.events;
    for _ in 0..1000 {
        let report = t.poll(now, sink);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        events.extend(report.events);
        if !report.more {
            return events;
        }
    }
    panic!("poll kept reporting more");
}

/// Acknowledges every line `sink` got.
pub(super) fn ack_all(t: &mut Tailer, sink: &Collect) {
    for g in &sink.0 {
        t.ack(g.key, g.end);
    }
}

/// The lines `line <from>` up to `line <to - 1>`, each with its newline.
pub(super) fn numbered(from: usize, to: usize) -> String {
    (from..to).map(|n| format!("line {n}\n")).collect()
}

/// Checks that `sink` got the numbered lines `0..total`, each once, and
/// each file's in order.
pub(super) fn assert_exactly_once_in_order(sink: &Collect, total: usize) {
    let mut numbers: Vec<usize> = Vec::new();
    let mut last_per_file: HashMap<FileKey, usize> = HashMap::new();
    for g in &sink.0 {
        let n: usize = g.text.strip_prefix("line ").unwrap().parse().unwrap();
        if let Some(prev) = last_per_file.insert(g.key, n) {
            assert!(
                n > prev,
                "line {n} after line {prev} in {}",
                g.path.display()
            );
        }
        numbers.push(n);
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (0..total).collect::<Vec<_>>());
}

/// `text`, compressed as gzip does.
pub(super) fn gzip(text: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text).unwrap();
    e.finish().unwrap()
}
