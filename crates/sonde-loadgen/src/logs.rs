//! Numbered log lines: a writer that appends them to files (with rename or
//! copytruncate rotation, like logrotate) and a tally that counts, per
//! file, which of them came back through a log shipper.
//!
//! Every line names its file and its place in that file's sequence:
//!
//! ```text
//! f=2 s=1041 hvkw oqz lbyuemt pq ...\n
//! ```
//!
//! `f=` is the file index (`app-<f>.log`), `s=` the sequence number within
//! that file, from 0, and the rest is filler up to the line length
//! (newline included). A checker reading the shipped records back parses
//! `f` and `s` with [`parse_line`] and feeds them to a [`Tally`], which
//! knows from the writer's [`Summary`] how many lines each file got.
//!
//! The filler is lowercase words cut from a fixed pseudo-random text, so
//! compressors see text that compresses like a log (a few times), not a
//! run of one byte that any codec shrinks to nothing.
//!
//! ```
//! use sonde_loadgen::logs::{parse_line, LineMaker};
//!
//! let maker = LineMaker::new(150);
//! let mut buf = Vec::new();
//! maker.append(&mut buf, 3, 42);
//! assert_eq!(buf.len(), 150);
//! assert_eq!(parse_line(&buf), Some((3, 42)));
//! ```

use sonde_config::{HumanDuration, HumanSize};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a file is rotated when it reaches the rotation size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rotate {
    /// Never rotated.
    None,
    /// `app-<i>.log` is renamed to `app-<i>.log.1` (older generations move
    /// up by one first) and a new `app-<i>.log` is created.
    Rename,
    /// `app-<i>.log` is copied to `app-<i>.log.1` (older generations move
    /// up first), then truncated to 0; writes to it wait for the copy.
    CopyTruncate,
}

impl std::str::FromStr for Rotate {
    type Err = String;

    fn from_str(s: &str) -> Result<Rotate, String> {
        match s {
            "none" => Ok(Rotate::None),
            "rename" => Ok(Rotate::Rename),
            "copytruncate" => Ok(Rotate::CopyTruncate),
            _ => Err(format!(
                "unknown rotation {s:?}: use none, rename or copytruncate"
            )),
        }
    }
}

/// How each line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Wrap {
    /// The line alone.
    #[default]
    Lines,
    /// As a container runtime's CRI log line, a whole piece on stdout:
    /// `<RFC 3339 time> stdout F <line>`; a shipper that reads the format
    /// ships the line alone.
    Cri,
}

impl std::str::FromStr for Wrap {
    type Err = String;

    fn from_str(s: &str) -> Result<Wrap, String> {
        match s {
            "lines" => Ok(Wrap::Lines),
            "cri" => Ok(Wrap::Cri),
            _ => Err(format!("unknown format {s:?}: use lines or cri")),
        }
    }
}

/// The path of file `index`'s active file in `dir`: `dir/app-<index>.log`.
pub fn active_path(dir: &Path, index: u32) -> PathBuf {
    dir.join(format!("app-{index}.log"))
}

/// The path of rotated generation `generation` (1 is the newest) of file
/// `index`: `dir/app-<index>.log.<generation>`, logrotate's naming.
pub fn rotated_path(dir: &Path, index: u32, generation: u32) -> PathBuf {
    dir.join(format!("app-{index}.log.{generation}"))
}

/// Builds numbered lines of a fixed length.
#[derive(Clone, Debug)]
pub struct LineMaker {
    line_bytes: usize,
    filler: Vec<u8>,
    wrap: Wrap,
}

/// Bytes of pseudo-random text the filler is cut from; lines start at
/// different places in it so neighbouring lines differ.
const FILLER_POOL: usize = 64 * 1024;

impl LineMaker {
    /// Lines of `line_bytes` bytes, newline included. A line whose
    /// `f=.. s=.. ` prefix and newline do not fit is longer: the prefix is
    /// never cut.
    pub fn new(line_bytes: usize) -> LineMaker {
        // A fixed seed: the same run writes the same bytes.
        let mut rng = fastrand::Rng::with_seed(0x5eed_1065);
        let pool = FILLER_POOL.max(2 * line_bytes);
        let mut filler = Vec::with_capacity(pool + 16);
        while filler.len() < pool {
            let word = rng.usize(2..9);
            for _ in 0..word {
                filler.push(rng.u8(b'a'..=b'z'));
            }
            filler.push(b' ');
        }
        LineMaker {
            line_bytes,
            filler,
            wrap: Wrap::Lines,
        }
    }

    /// The same lines written as `wrap` says; the wrapping counts in the
    /// line length.
    pub fn wrapped(self, wrap: Wrap) -> LineMaker {
        LineMaker { wrap, ..self }
    }

    /// The configured line length, newline included.
    pub fn line_bytes(&self) -> usize {
        self.line_bytes
    }

    /// Appends line `seq` of file `file` to `buf` and returns its length.
    pub fn append(&self, buf: &mut Vec<u8>, file: u32, seq: u64) -> usize {
        let start = buf.len();
        let mut num = itoa::Buffer::new();
        if self.wrap == Wrap::Cri {
            // A time that moves with the line, nanoseconds padded to nine.
            let nanos = num.format(1_000_000_000 + seq % 1_000_000_000);
            buf.extend_from_slice(b"2026-11-27T10:00:00.");
            buf.extend_from_slice(&nanos.as_bytes()[1..]);
            buf.extend_from_slice(b"Z stdout F ");
        }
        buf.extend_from_slice(b"f=");
        buf.extend_from_slice(num.format(file).as_bytes());
        buf.extend_from_slice(b" s=");
        buf.extend_from_slice(num.format(seq).as_bytes());
        buf.push(b' ');
        let used = buf.len() - start + 1;
        let fill = self.line_bytes.saturating_sub(used);
        // Knuth's multiplicative hash spreads consecutive lines over the pool.
        let span = self.filler.len() - fill;
        let at = (seq.wrapping_mul(2_654_435_761) ^ u64::from(file)) as usize % span.max(1);
        buf.extend_from_slice(&self.filler[at..at + fill]);
        buf.push(b'\n');
        buf.len() - start
    }
}

/// 1,024 numbered lines of `bytes` bytes (no newline) over a short
/// repeated vocabulary: the records the Kafka floor examples produce from
/// memory (`kafka_floor`, `kafka_own_floor`). They compress far better
/// than [`LineMaker`]'s lines (lz4 about 12x, zstd about 60x).
pub fn floor_lines(bytes: usize) -> Vec<Vec<u8>> {
    (0..1024u64)
        .map(|i| {
            let mut l = format!("f=app-0.log s={i:012} ").into_bytes();
            let words = b"lorem ipsum dolor sit amet consectetur adipiscing elit sed do ";
            while l.len() < bytes {
                l.push(words[(l.len() + i as usize) % words.len()]);
            }
            l
        })
        .collect()
}

/// Reads `f` and `s` from the start of a line (the newline and anything
/// after the numbers are ignored). `None` when the line does not start with
/// `f=<digits> s=<digits>` followed by a space or the end.
pub fn parse_line(line: &[u8]) -> Option<(u32, u64)> {
    let rest = line.strip_prefix(b"f=")?;
    let (file, rest) = digits(rest)?;
    let rest = rest.strip_prefix(b" s=")?;
    let (seq, rest) = digits(rest)?;
    match rest.first() {
        None | Some(b' ' | b'\n' | b'\r') => Some((u32::try_from(file).ok()?, seq)),
        Some(_) => None,
    }
}

fn digits(s: &[u8]) -> Option<(u64, &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let mut v = 0u64;
    for &b in &s[..n] {
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some((v, &s[n..]))
}

/// Reads `f` and `s` from a shipped record: the raw line, or a JSON object
/// whose `"message"` holds it. Leading whitespace before `f=` is skipped
/// (some shippers' templates add a space).
///
/// # Design
///
/// A JSON record is first searched for `"message":"f=`: the numbers hold
/// no characters JSON escapes, so they can be read in place. This keeps a
/// checker at hundreds of thousands of records per second even in a debug
/// build; a full JSON parse, about ten times slower, is the fallback for
/// records the search does not fit (spaces around the colon, an escaped
/// key).
pub fn parse_record(value: &[u8]) -> Option<(u32, u64)> {
    let trimmed = value.trim_ascii_start();
    if trimmed.first() == Some(&b'{') {
        const KEY: &[u8] = b"\"message\":\"";
        if let Some(at) = memchr::memmem::find(trimmed, KEY) {
            if let Some(found) = parse_line(trimmed[at + KEY.len()..].trim_ascii_start()) {
                return Some(found);
            }
        }
        #[derive(serde::Deserialize)]
        struct Record<'a> {
            #[serde(borrow)]
            message: std::borrow::Cow<'a, str>,
        }
        let record: Record<'_> = serde_json::from_slice(trimmed).ok()?;
        return parse_line(record.message.trim_start().as_bytes());
    }
    parse_line(trimmed)
}

/// Parses a byte size: what the agent's config takes (a number of bytes,
/// or one with `KiB`, `MiB` or `GiB`: `sonde_config::HumanSize`) and,
/// for rates and totals quoted in MB/s, `KB`, `MB` and `GB` (powers of
/// 1000).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if let Ok(size) = s.parse::<HumanSize>() {
        return Ok(size.0);
    }
    let decimal = [
        ("KB", 1_000),
        ("kB", 1_000),
        ("MB", 1_000_000),
        ("GB", 1_000_000_000),
    ];
    let Some((num, mult)) = decimal
        .iter()
        .find_map(|&(unit, mult)| Some((s.strip_suffix(unit)?, mult)))
    else {
        return Err(format!(
            "{s:?} is not a size: write a whole number of bytes, or one with KiB, MiB, GiB, KB, MB or GB"
        ));
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a size: write a whole number before the unit"))
}

/// Parses a duration as the agent's config takes it: a whole number with
/// `ms`, `s`, `m` or `h` (`sonde_config::HumanDuration`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    s.trim().parse::<HumanDuration>().map(|d| d.0)
}

/// When a write run stops.
#[derive(Clone, Copy, Debug)]
pub enum Amount {
    /// This many bytes over all files together (whole lines; the last line
    /// may pass the mark).
    TotalBytes(u64),
    /// This many lines in every file.
    LinesPerFile(u64),
}

/// A write run.
#[derive(Clone, Debug)]
pub struct WritePlan {
    /// Directory the files are written in (created if missing).
    pub dir: PathBuf,
    /// Number of files, `app-0.log` to `app-<files-1>.log`.
    pub files: u32,
    /// Line length, newline included.
    pub line_bytes: usize,
    /// When to stop.
    pub amount: Amount,
    /// Bytes per second over all files; `None` writes flat out.
    pub rate: Option<u64>,
    /// Rotation scheme.
    pub rotate: Rotate,
    /// A file is rotated once it holds at least this many bytes.
    pub rotate_bytes: u64,
    /// Rotated generations kept (`.1` to `.<keep>`); older ones are deleted.
    pub keep: u32,
    /// Bytes handed to one `write` call per file.
    pub chunk_bytes: usize,
    /// How each line is written.
    pub wrap: Wrap,
    /// With copytruncate: how long no file is written before a copy, so
    /// that a shipper can read what was written last. Lines written after
    /// a shipper's last read and before the truncation exist only in the
    /// copy, which a shipper must not follow (it would read it as a new
    /// file): this is the pause logrotate's documentation asks for.
    pub copytruncate_pause: Duration,
}

/// What one file got.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileSummary {
    /// The file's index (`f=`).
    pub file: u32,
    /// Its active path.
    pub path: PathBuf,
    /// Lines written, so sequence numbers `0..lines`.
    pub lines: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Times it was rotated.
    pub rotations: u64,
}

/// What a write run did; printed as JSON and read back by the checker.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Per file, in index order.
    pub files: Vec<FileSummary>,
    /// Lines over all files.
    pub lines: u64,
    /// Bytes over all files.
    pub bytes: u64,
    /// Seconds from the first write to the last.
    pub seconds: f64,
    /// Write throughput, `bytes / seconds / 1e6`.
    pub mb_per_s: f64,
    /// Whether the run was stopped early (by a signal) before its amount.
    pub stopped_early: bool,
}

/// Why a write run failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file operation failed.
    #[error("{op} {path}: {error}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        error: io::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> WriteError + 'a {
    move |source| WriteError::Io {
        op,
        path: path.to_path_buf(),
        error: source,
    }
}

/// One file being written.
struct Output {
    index: u32,
    path: PathBuf,
    file: File,
    /// Bytes in the active file.
    size: u64,
    next_seq: u64,
    bytes: u64,
    rotations: u64,
}

fn open_append(path: &Path) -> Result<File, WriteError> {
    // O_APPEND: after a copytruncate the next write lands at the new end
    // (0), not at the old offset, which would leave a hole of zeros.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_err("opening", path))
}

impl Output {
    fn rotate(&mut self, plan: &WritePlan) -> Result<(), WriteError> {
        let dir = &plan.dir;
        let i = self.index;
        if plan.rotate == Rotate::None {
            return Ok(());
        }
        if plan.keep == 0 {
            // Nothing kept: the rotated copy would be deleted at once.
            match plan.rotate {
                Rotate::None => {}
                Rotate::Rename => {
                    std::fs::remove_file(&self.path).map_err(io_err("removing", &self.path))?;
                    self.file = open_append(&self.path)?;
                }
                Rotate::CopyTruncate => {
                    std::thread::sleep(plan.copytruncate_pause);
                    self.file
                        .set_len(0)
                        .map_err(io_err("truncating", &self.path))?;
                }
            }
            self.size = 0;
            self.rotations += 1;
            return Ok(());
        }
        // Shift generations up: .keep is dropped, .k becomes .k+1.
        let oldest = rotated_path(dir, i, plan.keep);
        match std::fs::remove_file(&oldest) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing", &oldest)(e)),
        }
        for g in (1..plan.keep).rev() {
            let from = rotated_path(dir, i, g);
            let to = rotated_path(dir, i, g + 1);
            match std::fs::rename(&from, &to) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("renaming", &from)(e)),
            }
        }
        let first = rotated_path(dir, i, 1);
        match plan.rotate {
            Rotate::None => {}
            Rotate::Rename => {
                std::fs::rename(&self.path, &first).map_err(io_err("renaming", &self.path))?;
                self.file = open_append(&self.path)?;
            }
            Rotate::CopyTruncate => {
                // Single-threaded: no line is written during the pause, nor
                // between the copy and the truncation.
                std::thread::sleep(plan.copytruncate_pause);
                std::fs::copy(&self.path, &first).map_err(io_err("copying", &self.path))?;
                self.file
                    .set_len(0)
                    .map_err(io_err("truncating", &self.path))?;
            }
        }
        self.size = 0;
        self.rotations += 1;
        Ok(())
    }
}

/// Writes numbered lines to `plan.files` files round robin, one chunk per
/// file in turn, until the amount is reached or `stop` turns true (checked
/// between chunks). Files already in `plan.dir` are appended to only if
/// empty: an existing non-empty `app-<i>.log` is an error, so a run never
/// mixes two sequences.
///
/// # Errors
///
/// [`WriteError`] when a file cannot be created, written, renamed, copied
/// or truncated.
pub fn write(
    plan: &WritePlan,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Summary, WriteError> {
    std::fs::create_dir_all(&plan.dir).map_err(io_err("creating", &plan.dir))?;
    let maker = LineMaker::new(plan.line_bytes).wrapped(plan.wrap);
    let mut outputs = Vec::with_capacity(plan.files as usize);
    for index in 0..plan.files {
        let path = active_path(&plan.dir, index);
        let file = open_append(&path)?;
        let size = file.metadata().map_err(io_err("reading", &path))?.len();
        if size != 0 {
            return Err(WriteError::Io {
                op: "writing",
                path,
                error: io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "the file is not empty; write into an empty directory",
                ),
            });
        }
        outputs.push(Output {
            index,
            path,
            file,
            size: 0,
            next_seq: 0,
            bytes: 0,
            rotations: 0,
        });
    }
    let mut buf = Vec::with_capacity(plan.chunk_bytes + 2 * plan.line_bytes + 64);
    let start = Instant::now();
    let mut total: u64 = 0;
    let mut stopped_early = false;
    'run: loop {
        let mut progressed = false;
        for out in &mut outputs {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                stopped_early = true;
                break 'run;
            }
            // How many bytes this file may still take.
            let budget = match plan.amount {
                Amount::TotalBytes(t) => t.saturating_sub(total),
                Amount::LinesPerFile(n) => {
                    (n - out.next_seq.min(n)).saturating_mul(plan.line_bytes as u64)
                }
            };
            if budget == 0 {
                continue;
            }
            let to_rotation = match plan.rotate {
                Rotate::None => u64::MAX,
                _ => plan.rotate_bytes.saturating_sub(out.size).max(1),
            };
            let want = budget.min(to_rotation).min(plan.chunk_bytes as u64);
            buf.clear();
            while (buf.len() as u64) < want {
                if let Amount::LinesPerFile(n) = plan.amount {
                    if out.next_seq >= n {
                        break;
                    }
                }
                maker.append(&mut buf, out.index, out.next_seq);
                out.next_seq += 1;
            }
            if buf.is_empty() {
                continue;
            }
            if let Some(rate) = plan.rate {
                // Pace: the bytes written so far (this chunk included) may
                // not be ahead of rate × elapsed.
                let due = Duration::from_secs_f64((total + buf.len() as u64) as f64 / rate as f64);
                let elapsed = start.elapsed();
                if due > elapsed {
                    std::thread::sleep(due - elapsed);
                }
            }
            out.file
                .write_all(&buf)
                .map_err(io_err("writing", &out.path))?;
            let n = buf.len() as u64;
            out.size += n;
            out.bytes += n;
            total += n;
            progressed = true;
            if plan.rotate != Rotate::None && out.size >= plan.rotate_bytes {
                out.rotate(plan)?;
            }
        }
        if !progressed {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let files: Vec<FileSummary> = outputs
        .iter()
        .map(|o| FileSummary {
            file: o.index,
            path: o.path.clone(),
            lines: o.next_seq,
            bytes: o.bytes,
            rotations: o.rotations,
        })
        .collect();
    Ok(Summary {
        lines: files.iter().map(|f| f.lines).sum(),
        bytes: total,
        seconds,
        mb_per_s: if seconds > 0.0 {
            total as f64 / seconds / 1e6
        } else {
            0.0
        },
        stopped_early,
        files,
    })
}

/// A run of missing sequence numbers in one file, both ends included.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    /// The file index.
    pub file: u32,
    /// First missing sequence number.
    pub from: u64,
    /// Last missing sequence number.
    pub to: u64,
}

/// Counts which numbered lines came back, per file: a bit per expected
/// line, so 7 M lines take under 1 MB.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Per file: the bitmap of seen sequence numbers and the expected count.
    files: Vec<(Vec<u64>, u64)>,
    seen: u64,
    unique: u64,
    duplicated: u64,
    unexpected: u64,
    unparsed: u64,
}

/// What a [`Tally`] found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Lines the writer wrote.
    pub expected: u64,
    /// Records that parsed as a line of a known file and sequence.
    pub seen: u64,
    /// Distinct lines seen.
    pub unique: u64,
    /// Expected lines never seen.
    pub lost: u64,
    /// The first runs of lost lines (at most [`Tally::MAX_RANGES`]).
    pub lost_ranges: Vec<Missing>,
    /// Records seen again after their first time.
    pub duplicated: u64,
    /// Records that parsed, but name a file or sequence number the writer
    /// never wrote.
    pub unexpected: u64,
    /// Records that did not parse as a numbered line.
    pub unparsed: u64,
}

impl Tally {
    /// How many runs of lost lines a [`Verdict`] lists.
    pub const MAX_RANGES: usize = 10;

    /// A tally expecting `lines[i]` lines from file `i`.
    pub fn new(lines: &[u64]) -> Tally {
        Tally {
            files: lines
                .iter()
                .map(|&n| (vec![0u64; n.div_ceil(64) as usize], n))
                .collect(),
            seen: 0,
            unique: 0,
            duplicated: 0,
            unexpected: 0,
            unparsed: 0,
        }
    }

    /// Counts one record's value (see [`parse_record`]).
    pub fn record(&mut self, value: &[u8]) {
        match parse_record(value) {
            Some((f, s)) => self.line(f, s),
            None => self.unparsed += 1,
        }
    }

    /// Counts line `seq` of file `file`.
    pub fn line(&mut self, file: u32, seq: u64) {
        let Some((bits, n)) = self.files.get_mut(file as usize) else {
            self.unexpected += 1;
            return;
        };
        if seq >= *n {
            self.unexpected += 1;
            return;
        }
        self.seen += 1;
        let word = &mut bits[(seq / 64) as usize];
        let bit = 1u64 << (seq % 64);
        if *word & bit != 0 {
            self.duplicated += 1;
        } else {
            *word |= bit;
            self.unique += 1;
        }
    }

    /// Lines the writer wrote.
    pub fn expected(&self) -> u64 {
        self.files.iter().map(|(_, n)| n).sum()
    }

    /// Distinct expected lines seen so far.
    pub fn unique(&self) -> u64 {
        self.unique
    }

    /// Whether every expected line has been seen at least once.
    pub fn complete(&self) -> bool {
        self.unique == self.expected()
    }

    /// The counts so far, with the first runs of lost lines.
    pub fn verdict(&self) -> Verdict {
        let mut lost_ranges = Vec::new();
        for (file, (bits, n)) in self.files.iter().enumerate() {
            if lost_ranges.len() >= Self::MAX_RANGES {
                break;
            }
            let mut seq = 0;
            while seq < *n && lost_ranges.len() < Self::MAX_RANGES {
                let word = bits[(seq / 64) as usize];
                if word == u64::MAX && seq % 64 == 0 {
                    seq += 64;
                    continue;
                }
                if word & (1 << (seq % 64)) != 0 {
                    seq += 1;
                    continue;
                }
                let from = seq;
                while seq < *n && bits[(seq / 64) as usize] & (1 << (seq % 64)) == 0 {
                    seq += 1;
                }
                lost_ranges.push(Missing {
                    file: file as u32,
                    from,
                    to: seq - 1,
                });
            }
        }
        let expected = self.expected();
        Verdict {
            expected,
            seen: self.seen,
            unique: self.unique,
            lost: expected - self.unique,
            lost_ranges,
            duplicated: self.duplicated,
            unexpected: self.unexpected,
            unparsed: self.unparsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_line_has_the_asked_length_and_parses_back() {
        let maker = LineMaker::new(150);
        for (f, s) in [(0, 0), (3, 9), (12, 123_456_789), (u32::MAX, u64::MAX)] {
            let mut buf = b"before".to_vec();
            let n = maker.append(&mut buf, f, s);
            let line = &buf[6..];
            assert_eq!(n, 150);
            assert_eq!(line.len(), 150);
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
            assert_eq!(line.last(), Some(&b'\n'));
            assert_eq!(parse_line(line), Some((f, s)));
            assert_eq!(parse_record(&line[..149]), Some((f, s)));
        }
    }

    #[test]
    fn a_line_too_short_for_its_prefix_keeps_the_prefix() {
        let maker = LineMaker::new(4);
        let mut buf = Vec::new();
        maker.append(&mut buf, 1, 22);
        assert_eq!(buf, b"f=1 s=22 \n");
        // A CRI line of the length asked, the line after its prefix.
        let maker = LineMaker::new(150).wrapped(Wrap::Cri);
        buf.clear();
        assert_eq!(maker.append(&mut buf, 1, 22), 150);
        let prefix = b"2026-11-27T10:00:00.000000022Z stdout F ";
        assert_eq!(&buf[..prefix.len()], prefix);
        assert_eq!(parse_line(&buf[prefix.len()..]), Some((1, 22)));
    }

    #[test]
    fn neighbouring_lines_have_different_filler() {
        let maker = LineMaker::new(100);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        maker.append(&mut a, 0, 1);
        maker.append(&mut b, 0, 2);
        assert_ne!(a[10..], b[10..]);
    }

    #[test]
    fn records_that_are_not_numbered_lines_do_not_parse() {
        for bad in [
            &b""[..],
            b"f=",
            b"f=1",
            b"f=1 s=",
            b"f=1 s=x",
            b"f=1s=2",
            b"f=1 s=2x",
            b"x f=1 s=2",
            b"f=99999999999 s=1",
            b"f=1 s=99999999999999999999",
            b"{\"msg\":\"f=1 s=2\"}",
            b"{\"message\":",
        ] {
            assert_eq!(
                parse_record(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_json_record_is_read_from_its_message() {
        let v = br#"{"file":"/x/app-1.log","message":"f=1 s=77 abc"}"#;
        assert_eq!(parse_record(v), Some((1, 77)));
        // Not the fast path's spelling: read by the full parse.
        let v = br#"{"file": "f=9 s=9", "message" : "f=1 s=78 abc"}"#;
        assert_eq!(parse_record(v), Some((1, 78)));
        let v = br#"{"\u006dessage":"f=1 s=79"}"#;
        assert_eq!(parse_record(v), Some((1, 79)));
        assert_eq!(parse_record(b" f=2 s=3 z"), Some((2, 3)));
    }

    #[test]
    fn sizes_and_durations_parse_with_their_units() {
        assert_eq!(parse_bytes("150"), Ok(150));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("2MB"), Ok(2_000_000));
        assert!(parse_bytes("1 parsec").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("é5").is_err());
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5").is_err());
    }

    #[test]
    fn rotated_files_are_named_like_logrotate() {
        let d = Path::new("/logs");
        assert_eq!(active_path(d, 2), Path::new("/logs/app-2.log"));
        assert_eq!(rotated_path(d, 2, 1), Path::new("/logs/app-2.log.1"));
        assert_eq!(rotated_path(d, 0, 5), Path::new("/logs/app-0.log.5"));
    }

    /// Reads every line of file `index` present in `dir` (rotated
    /// generations oldest first, then the active file).
    fn lines_on_disk(dir: &Path, index: u32, keep: u32) -> Vec<(u32, u64)> {
        let mut paths: Vec<PathBuf> = (1..=keep)
            .rev()
            .map(|g| rotated_path(dir, index, g))
            .collect();
        paths.push(active_path(dir, index));
        let mut out = Vec::new();
        for p in paths {
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            for line in bytes.split_inclusive(|&b| b == b'\n') {
                assert_eq!(
                    line.last(),
                    Some(&b'\n'),
                    "{} ends in a partial line",
                    p.display()
                );
                out.push(parse_line(line).unwrap());
            }
        }
        out
    }

    fn plan(dir: &Path, rotate: Rotate, keep: u32) -> WritePlan {
        WritePlan {
            dir: dir.to_path_buf(),
            files: 2,
            line_bytes: 50,
            amount: Amount::LinesPerFile(1000),
            rate: None,
            rotate,
            rotate_bytes: 10_000,
            keep,
            chunk_bytes: 4096,
            copytruncate_pause: Duration::ZERO,
            wrap: Wrap::Lines,
        }
    }

    #[test]
    fn rename_rotation_keeps_every_line_in_order_across_generations() {
        let dir = tempfile::tempdir().unwrap();
        // 1000 lines × 50 B = 50 kB per file, rotated every 10 kB: 5 rotations,
        // all kept.
        let summary = write(
            &plan(dir.path(), Rotate::Rename, 10),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(summary.lines, 2000);
        assert_eq!(summary.bytes, 100_000);
        for f in 0..2 {
            assert_eq!(summary.files[f as usize].lines, 1000);
            assert_eq!(summary.files[f as usize].rotations, 5);
            let got = lines_on_disk(dir.path(), f, 10);
            let want: Vec<(u32, u64)> = (0..1000).map(|s| (f, s)).collect();
            assert_eq!(got, want);
            assert!(rotated_path(dir.path(), f, 5).exists());
            assert!(!rotated_path(dir.path(), f, 6).exists());
        }
    }

    #[test]
    fn rotation_keeps_only_the_newest_generations() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &plan(dir.path(), Rotate::Rename, 2),
            &AtomicBool::new(false),
        )
        .unwrap();
        let got = lines_on_disk(dir.path(), 1, 10);
        // Generations .2 and .1 hold lines 600..1000 (200 lines each), the
        // active file is empty after the last rotation.
        let want: Vec<(u32, u64)> = (600..1000).map(|s| (1, s)).collect();
        assert_eq!(got, want);
        assert!(!rotated_path(dir.path(), 1, 3).exists());
    }

    #[test]
    fn with_nothing_kept_a_rotation_leaves_only_the_newest_lines() {
        let dir = tempfile::tempdir().unwrap();
        for rotate in [Rotate::Rename, Rotate::CopyTruncate] {
            let sub = dir.path().join(format!("{rotate:?}"));
            let mut p = plan(&sub, rotate, 0);
            p.amount = Amount::LinesPerFile(1050);
            let summary = write(&p, &AtomicBool::new(false)).unwrap();
            assert_eq!(summary.files[1].rotations, 5);
            assert!(!rotated_path(&sub, 1, 1).exists());
            let want: Vec<(u32, u64)> = (1000..1050).map(|s| (1, s)).collect();
            assert_eq!(lines_on_disk(&sub, 1, 0), want, "{rotate:?}");
        }
    }

    #[test]
    fn copytruncate_rotation_copies_then_empties_the_active_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = plan(dir.path(), Rotate::CopyTruncate, 10);
        p.amount = Amount::LinesPerFile(1100);
        let summary = write(&p, &AtomicBool::new(false)).unwrap();
        assert_eq!(summary.files[0].rotations, 5);
        let got = lines_on_disk(dir.path(), 0, 10);
        let want: Vec<(u32, u64)> = (0..1100).map(|s| (0, s)).collect();
        assert_eq!(got, want);
        // The active file restarted at 0 and holds the last 100 lines only.
        assert_eq!(
            std::fs::metadata(active_path(dir.path(), 0)).unwrap().len(),
            5000
        );
    }

    #[test]
    fn copytruncate_pauses_before_each_copy() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = plan(dir.path(), Rotate::CopyTruncate, 2);
        p.files = 1;
        p.amount = Amount::LinesPerFile(600);
        p.copytruncate_pause = Duration::from_millis(100);
        let start = Instant::now();
        let summary = write(&p, &AtomicBool::new(false)).unwrap();
        // 600 lines × 50 B rotated every 10 kB: 3 copies, 3 pauses.
        assert_eq!(summary.files[0].rotations, 3);
        assert!(start.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn a_total_is_spread_over_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = plan(dir.path(), Rotate::None, 0);
        p.amount = Amount::TotalBytes(1_000_000);
        let summary = write(&p, &AtomicBool::new(false)).unwrap();
        assert!(summary.bytes >= 1_000_000 && summary.bytes < 1_000_000 + 4096 + 50);
        assert_eq!(summary.lines * 50, summary.bytes);
        let a = summary.files[0].lines as i64;
        let b = summary.files[1].lines as i64;
        assert!((a - b).abs() <= 4096 / 50 + 1, "{a} vs {b}");
    }

    #[test]
    fn a_non_empty_file_is_not_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(active_path(dir.path(), 1), "old\n").unwrap();
        let err = write(&plan(dir.path(), Rotate::None, 0), &AtomicBool::new(false)).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
    }

    #[test]
    fn the_tally_counts_lost_duplicated_and_unexpected_lines() {
        let mut t = Tally::new(&[100, 3]);
        for s in 0..100 {
            if !(10..=12).contains(&s) && s != 99 {
                t.line(0, s);
            }
        }
        t.line(0, 5);
        t.line(1, 0);
        t.line(1, 1);
        t.line(1, 2);
        t.line(1, 2);
        t.line(1, 3);
        t.line(2, 0);
        t.record(b"garbage");
        t.record(br#"{"message":"f=1 s=0 x"}"#);
        let v = t.verdict();
        assert_eq!(v.expected, 103);
        assert_eq!(v.unique, 99);
        assert_eq!(v.lost, 4);
        assert_eq!(
            v.lost_ranges,
            vec![
                Missing {
                    file: 0,
                    from: 10,
                    to: 12
                },
                Missing {
                    file: 0,
                    from: 99,
                    to: 99
                }
            ]
        );
        assert_eq!(v.duplicated, 3);
        assert_eq!(v.seen, 102);
        assert_eq!(v.unexpected, 2);
        assert_eq!(v.unparsed, 1);
        assert!(!t.complete());
    }

    #[test]
    fn the_tally_is_complete_once_every_line_was_seen() {
        let mut t = Tally::new(&[130, 0]);
        for s in (0..130).rev() {
            assert!(!t.complete());
            t.line(0, s);
        }
        assert!(t.complete());
        let v = t.verdict();
        assert_eq!((v.lost, v.duplicated), (0, 0));
        assert!(v.lost_ranges.is_empty());
    }
}
