//! Joining the lines of one event (a stack trace, a traceback) into one
//! record.
//!
//! A joiner per file sits between a file's [`Splitter`](crate::lines::Splitter)
//! and the caller's sink. Each line either starts a record or continues the
//! record being built; a record is handed on when the next one starts, when
//! it is full ([`Multiline::max_lines`], [`Multiline::max_bytes`]), when it
//! has been quiet for [`Multiline::timeout`], or when its file is done with
//! (rotated and quiet, truncated). What starts a record is the [`Rule`]:
//!
//! * [`Rule::Start`]: a line matching a regular expression starts a
//!   record; any other line continues it (a file's first line starts one
//!   whatever it is).
//! * [`Preset::Java`]: a line continues the record if it is indented (the
//!   `\tat ...` frames and `\t... 3 more`), starts with `Caused by:` or
//!   `Suppressed:`, is an exception's header (`java.lang.IllegalStateException:
//!   boom`: a dotted class name ending in `Exception`, `Error` or
//!   `Throwable`), or is the level line of java.util.logging's default
//!   two-line format (`SEVERE: ...`). Every other line starts one.
//! * [`Preset::Python`]: a `Traceback (most recent call last):` line and
//!   the indented lines after it continue the record, and so does the
//!   first unindented line after them (the exception, `ValueError: bad`),
//!   with the blank lines and `During handling of the above exception...`
//!   or `The above exception was the direct cause...` lines that chain
//!   tracebacks. Other indented lines continue a record too.
//!
//! A record is the bytes of its lines joined with `\n`, from the first
//! line's start offset to the last line's end offset, so a checkpoint (the
//! end of an acknowledged record) never falls inside one, and a restart
//! reads an unfinished record again from its first line.

use std::time::{Duration, Instant};

use regex::bytes::Regex;

use crate::counters::Counters;
use crate::lines::Line;

/// How lines are joined into records; see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multiline {
    /// What starts a record.
    pub rule: Rule,
    /// The most lines in a record: a record that has them is handed on,
    /// and the next line starts another. Default 500.
    pub max_lines: usize,
    /// The most bytes in a record (its lines and the `\n`s between them):
    /// a line that would take a record past them starts another. A single
    /// line is bounded by `max_line_bytes` alone. Default 1 MiB.
    pub max_bytes: usize,
    /// How long a record waits for its next line: one quiet for this long
    /// is handed on as it is. Default 1 s.
    pub timeout: Duration,
}

impl Multiline {
    /// The defaults, with `rule`.
    pub fn new(rule: Rule) -> Self {
        Self {
            rule,
            max_lines: 500,
            max_bytes: 1024 * 1024,
            timeout: Duration::from_secs(1),
        }
    }
}

/// What starts a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// A line matching this regular expression (Rust `regex` syntax, matched
    /// against the line's bytes anywhere unless anchored with `^`).
    Start(String),
    /// The rules of a language's stack traces.
    Preset(Preset),
}

/// The built-in rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Java (and JVM languages') stack traces.
    Java,
    /// Python tracebacks, chained ones included.
    Python,
}

/// A [`Multiline`] compiled once for all the files of a tailer.
#[derive(Debug)]
pub(crate) struct Matcher {
    kind: Kind,
    max_lines: usize,
    max_bytes: usize,
    timeout: Duration,
}

#[derive(Debug)]
enum Kind {
    Start(Regex),
    Java(Regex),
    Python,
}

/// Java: frames and other indented lines, causes, exception headers, and
/// the second line of java.util.logging's default format.
const JAVA_CONTINUES: &str = r"^(?:[ \t]|(?:Caused by|Suppressed): |(?:[A-Za-z_$][\w$]*\.)+[\w$]*(?:Exception|Error|Throwable)(?::|$)|(?:SEVERE|WARNING|INFO|CONFIG|FINE|FINER|FINEST): )";

const TRACEBACK: &[u8] = b"Traceback (most recent call last):";
const PY_CHAINS: [&[u8]; 2] = [
    b"During handling of the above exception, another exception occurred:",
    b"The above exception was the direct cause of the following exception:",
];

impl Matcher {
    /// Compiles `m`'s rule.
    pub(crate) fn new(m: &Multiline) -> Result<Self, regex::Error> {
        let kind = match &m.rule {
            Rule::Start(pattern) => Kind::Start(Regex::new(pattern)?),
            Rule::Preset(Preset::Java) => Kind::Java(Regex::new(JAVA_CONTINUES)?),
            Rule::Preset(Preset::Python) => Kind::Python,
        };
        Ok(Self {
            kind,
            max_lines: m.max_lines,
            max_bytes: m.max_bytes,
            timeout: m.timeout,
        })
    }

    /// Whether `line` continues the record before it, given what the
    /// file's lines so far left in `state`, which it updates.
    fn continues(&self, state: &mut State, line: &[u8]) -> bool {
        let indented = matches!(line.first(), Some(b' ' | b'\t'));
        match &self.kind {
            Kind::Start(re) => !re.is_match(line),
            Kind::Java(re) => re.is_match(line),
            Kind::Python => {
                if line == TRACEBACK {
                    *state = State::Traceback;
                    return true;
                }
                match *state {
                    _ if indented => true,
                    State::Traceback => {
                        // The first unindented line after the frames: the
                        // exception itself.
                        *state = State::Raised;
                        true
                    }
                    State::Raised if line.is_empty() || PY_CHAINS.contains(&line) => true,
                    _ => {
                        *state = State::Plain;
                        false
                    }
                }
            }
        }
    }
}

/// Where a file's lines are in a Python traceback.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    #[default]
    Plain,
    /// After `Traceback (most recent call last):`, in the frames.
    Traceback,
    /// After the exception line that ends a traceback.
    Raised,
}

/// The record one file is building; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Joiner {
    /// The record's lines joined with `\n`.
    buf: Vec<u8>,
    /// Per line of the record: its start offset and where its bytes start
    /// in `buf`.
    lines: Vec<(u64, usize)>,
    end: u64,
    cut: u64,
    last_at: Option<Instant>,
    state: State,
}

impl Joiner {
    /// The start offset of the record being built, if one is.
    pub(crate) fn start(&self) -> Option<u64> {
        self.lines.first().map(|&(start, _)| start)
    }

    /// When the record being built times out.
    pub(crate) fn due(&self, m: &Matcher) -> Option<Instant> {
        self.last_at.map(|at| at + m.timeout)
    }

    /// Takes `line`, read at `now`: hands on the record it ends (if it
    /// starts a record) or completes (if it fills one) through `emit`.
    pub(crate) fn push(
        &mut self,
        m: &Matcher,
        line: &Line<'_>,
        now: Instant,
        counters: &mut Counters,
        mut emit: impl FnMut(&Line<'_>),
    ) {
        let continues = m.continues(&mut self.state, line.bytes);
        if !self.lines.is_empty() {
            let full = self.lines.len() >= m.max_lines
                || self.buf.len() + 1 + line.bytes.len() > m.max_bytes;
            if continues && !full {
                self.buf.push(b'\n');
                self.add(line, now);
                return;
            }
            if continues {
                counters.multiline_limited += 1;
            }
            self.flush(counters, &mut emit);
        }
        self.add(line, now);
    }

    /// Hands on the record being built, if any.
    pub(crate) fn flush(&mut self, counters: &mut Counters, emit: &mut impl FnMut(&Line<'_>)) {
        let Some(start) = self.start() else {
            return;
        };
        if self.lines.len() > 1 {
            counters.multiline_records += 1;
        }
        emit(&Line {
            bytes: &self.buf,
            start,
            end: self.end,
            cut_bytes: self.cut,
        });
        self.clear();
    }

    /// Forgets the record being built and the traceback state, as after a
    /// truncation.
    pub(crate) fn reset(&mut self) {
        self.clear();
        self.state = State::Plain;
    }

    /// Drops the record's lines that start below `offset` (they were
    /// delivered before; see `Tailer::advance`).
    pub(crate) fn drop_below(&mut self, offset: u64) {
        let keep = self.lines.partition_point(|&(start, _)| start < offset);
        if keep == 0 {
            return;
        }
        if keep == self.lines.len() {
            self.clear();
            return;
        }
        let from = self.lines[keep].1;
        self.buf.drain(..from);
        self.lines.drain(..keep);
        for l in &mut self.lines {
            l.1 -= from;
        }
    }

    fn add(&mut self, line: &Line<'_>, now: Instant) {
        self.lines.push((line.start, self.buf.len()));
        self.buf.extend_from_slice(line.bytes);
        self.end = line.end;
        self.cut += line.cut_bytes;
        self.last_at = Some(now);
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.lines.clear();
        self.cut = 0;
        self.last_at = None;
        // A buffer grown for one huge record is not kept for the file's
        // life.
        if self.buf.capacity() > 64 * 1024 {
            self.buf.shrink_to(64 * 1024);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lines::Splitter;

    /// The records `text` makes, split into lines and joined by `m`, with
    /// the rest flushed at the end.
    fn records(m: &Multiline, text: &str) -> Vec<(String, u64, u64)> {
        let matcher = Matcher::new(m).unwrap();
        let mut joiner = Joiner::default();
        let mut counters = Counters::default();
        let mut out = Vec::new();
        let now = Instant::now();
        let mut keep = |l: &Line<'_>| {
            out.push((String::from_utf8(l.bytes.to_vec()).unwrap(), l.start, l.end));
        };
        let mut splitter = Splitter::new(0, 1 << 20);
        splitter.push(text.as_bytes(), |l| {
            joiner.push(&matcher, l, now, &mut counters, &mut keep)
        });
        joiner.flush(&mut counters, &mut keep);
        out
    }

    fn texts(m: &Multiline, text: &str) -> Vec<String> {
        records(m, text).into_iter().map(|r| r.0).collect()
    }

    #[test]
    fn a_start_pattern_joins_the_lines_up_to_the_next_start() {
        let m = Multiline::new(Rule::Start(r"^\d{4}-".into()));
        let text = "  orphan\n2026-01-01 a\n  more\nand more\n2026-01-02 b\n2026-01-03 c\n x\n";
        let got = records(&m, text);
        assert_eq!(
            got,
            vec![
                ("  orphan".into(), 0, 9),
                ("2026-01-01 a\n  more\nand more".into(), 9, 38),
                ("2026-01-02 b".into(), 38, 51),
                ("2026-01-03 c\n x".into(), 51, 67),
            ]
        );
    }

    #[test]
    fn the_java_preset_keeps_a_stack_trace_with_its_causes() {
        let m = Multiline::new(Rule::Preset(Preset::Java));
        let trace = "2026-11-26 14:00:00 SEVERE request failed\n\
java.lang.IllegalStateException: boom\n\
\tat com.example.App.handle(App.java:10)\n\
\tat com.example.App.main(App.java:4)\n\
Caused by: java.io.IOException: disk full\n\
\tat com.example.Store.write(Store.java:7)\n\
\t... 2 more\n";
        let text = format!(
            "2026-11-26 13:59:59 INFO started\n{trace}Exception in thread \"main\" java.lang.Error\n\tat Main.main(Main.java:1)\nNov 26, 2026 2:00:01 PM Main main\nSEVERE: gone\n"
        );
        assert_eq!(
            texts(&m, &text),
            vec![
                "2026-11-26 13:59:59 INFO started".to_string(),
                trace.trim_end().to_string(),
                "Exception in thread \"main\" java.lang.Error\n\tat Main.main(Main.java:1)".into(),
                "Nov 26, 2026 2:00:01 PM Main main\nSEVERE: gone".into(),
            ]
        );
    }

    #[test]
    fn the_python_preset_keeps_chained_tracebacks_whole() {
        let m = Multiline::new(Rule::Preset(Preset::Python));
        let uncaught = [
            "Traceback (most recent call last):",
            "  File \"u.py\", line 1",
            "SystemExit: 2",
        ]
        .join("\n");
        let logged = [
            "ERROR:root:failed",
            "Traceback (most recent call last):",
            "  File \"t.py\", line 3, in <module>",
            "    {}['x']",
            "KeyError: 'x'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            "  File \"t.py\", line 5, in <module>",
            "    1/0",
            "    ~^~",
            "ZeroDivisionError: division by zero",
        ]
        .join("\n");
        let text = format!("{uncaught}\nINFO:root:before\n{logged}\nWARNING:root:after\n");
        assert_eq!(
            texts(&m, &text),
            vec![
                uncaught,
                "INFO:root:before".into(),
                logged,
                "WARNING:root:after".into()
            ]
        );
    }

    #[test]
    fn a_full_record_is_handed_on_and_the_next_line_starts_another() {
        let mut m = Multiline::new(Rule::Start("^S".into()));
        m.max_lines = 3;
        assert_eq!(
            texts(&m, "S1\na\nb\nc\nd\nS2\n"),
            vec!["S1\na\nb", "c\nd", "S2"]
        );
        m.max_lines = 100;
        m.max_bytes = 6;
        // "S1\nab" is 5 bytes; with "\ncd" it would be 8.
        assert_eq!(
            texts(&m, "S1\nab\ncd\nS2-long-line\nx\n"),
            vec!["S1\nab", "cd", "S2-long-line", "x"]
        );
    }

    #[test]
    fn a_record_counts_its_lines_cut_bytes_and_times_out_from_its_last_line() {
        let m = Matcher::new(&Multiline::new(Rule::Start("^S".into()))).unwrap();
        let mut j = Joiner::default();
        let mut c = Counters::default();
        let t0 = Instant::now();
        let line = |bytes: &'static [u8], start, cut| Line {
            bytes,
            start,
            end: start + bytes.len() as u64 + 1 + cut,
            cut_bytes: cut,
        };
        let mut out = Vec::new();
        j.push(&m, &line(b"S1", 0, 0), t0, &mut c, |_| {
            panic!("nothing ends")
        });
        j.push(
            &m,
            &line(b"ab", 3, 5),
            t0 + Duration::from_millis(700),
            &mut c,
            |_| panic!("nothing ends"),
        );
        assert_eq!(j.start(), Some(0));
        assert_eq!(j.due(&m), Some(t0 + Duration::from_millis(1700)));
        j.flush(&mut c, &mut |l: &Line<'_>| {
            out.push((l.bytes.to_vec(), l.end, l.cut_bytes))
        });
        assert_eq!(out, vec![(b"S1\nab".to_vec(), 11, 5)]);
        assert_eq!((c.multiline_records, c.multiline_limited), (1, 0));
        assert_eq!((j.start(), j.due(&m)), (None, None));
    }

    #[test]
    fn dropping_below_an_offset_keeps_the_lines_after_it() {
        let m = Matcher::new(&Multiline::new(Rule::Start("^S".into()))).unwrap();
        let mut j = Joiner::default();
        let mut c = Counters::default();
        let now = Instant::now();
        let mut s = Splitter::new(0, 1024);
        s.push(b"S1\na\nb\n", |l| j.push(&m, l, now, &mut c, |_| {}));
        j.drop_below(5);
        let mut out = Vec::new();
        j.flush(&mut c, &mut |l: &Line<'_>| {
            out.push((l.bytes.to_vec(), l.start, l.end))
        });
        assert_eq!(out, vec![(b"b".to_vec(), 5, 7)]);
    }
}
