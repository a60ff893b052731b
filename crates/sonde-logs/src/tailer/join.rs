//! How a tailer's lines become records: each line as it is, or through a
//! file's [multiline](crate::multiline) or [container](crate::container)
//! joiner, as [`TailerConfig::multiline`] and [`TailerConfig::format`]
//! say; and [`Hand`], which counts each line read and hands it to the
//! file's joiner and on to the caller's sink.

use std::time::Instant;

use super::config::{BuildError, TailerConfig};
use super::report::{LineSink, Origin, PollReport};
use crate::container::{self, Format};
use crate::counters::Counters;
use crate::lines::Line;
use crate::multiline::{self, Matcher, Rule};

/// How a tailer's lines become records, for all its files.
#[derive(Debug)]
pub(super) enum Join {
    /// Each line is a record.
    Lines,
    /// By [`TailerConfig::multiline`].
    Multiline(Matcher),
    /// By a container [`TailerConfig::format`].
    Container(Format),
}

impl Join {
    /// The joining `config` asks for.
    ///
    /// # Errors
    ///
    /// `multiline` together with a container `format`, a zero multiline
    /// limit, or a start pattern that is not a regular expression.
    pub(super) fn new(config: &TailerConfig) -> Result<Self, BuildError> {
        Ok(match &config.multiline {
            None if config.format == Format::Lines => Join::Lines,
            None => Join::Container(config.format),
            Some(_) if config.format != Format::Lines => {
                return Err(BuildError::MultilineAndFormat)
            }
            Some(m) if m.max_lines == 0 => {
                return Err(BuildError::Zero {
                    key: "multiline.max_lines",
                })
            }
            Some(m) if m.max_bytes == 0 => {
                return Err(BuildError::Zero {
                    key: "multiline.max_bytes",
                })
            }
            Some(m) => Join::Multiline(Matcher::new(m).map_err(|source| BuildError::Regex {
                pattern: match &m.rule {
                    Rule::Start(p) => p.clone(),
                    Rule::Preset(p) => format!("{p:?}"),
                },
                error: source,
            })?),
        })
    }
}

/// The record one file is building, by its tailer's [`Join`].
#[derive(Debug)]
pub(super) enum Joining {
    Lines,
    Multiline(multiline::Joiner),
    Container(container::Joiner),
}

impl Joining {
    /// A file's joining, with nothing built yet.
    pub(super) fn new(join: &Join) -> Self {
        match join {
            Join::Lines => Joining::Lines,
            Join::Multiline(_) => Joining::Multiline(multiline::Joiner::default()),
            Join::Container(_) => Joining::Container(container::Joiner::default()),
        }
    }

    /// The start offset of the earliest record not handed on yet.
    pub(super) fn start(&self) -> Option<u64> {
        match self {
            Joining::Lines => None,
            Joining::Multiline(j) => j.start(),
            Joining::Container(j) => j.start(),
        }
    }

    /// When the record being built times out.
    pub(super) fn due(&self, join: &Join) -> Option<Instant> {
        match (self, join) {
            (Joining::Multiline(j), Join::Multiline(m)) => j.due(m),
            (Joining::Container(j), _) => j.due(),
            _ => None,
        }
    }

    /// Drops what starts below `offset`: delivered before a restart.
    pub(super) fn drop_below(&mut self, offset: u64) {
        match self {
            Joining::Lines => {}
            Joining::Multiline(j) => j.drop_below(offset),
            Joining::Container(j) => j.drop_below(offset),
        }
    }

    /// Forgets everything, as after a truncation.
    pub(super) fn reset(&mut self) {
        match self {
            Joining::Lines => {}
            Joining::Multiline(j) => j.reset(),
            Joining::Container(j) => j.reset(),
        }
    }
}

/// Where a poll's lines go: counted, then through the file's [`Joining`],
/// to the sink.
pub(super) struct Hand<'c, S> {
    pub(super) counters: &'c mut Counters,
    pub(super) report: &'c mut PollReport,
    pub(super) join: &'c Join,
    pub(super) max_line_bytes: usize,
    pub(super) now: Instant,
    pub(super) sink: &'c mut S,
}

impl<S: LineSink> Hand<'_, S> {
    /// Counts `line` and hands it to `joining`, which passes on each
    /// record it completes; without a joiner, the line is the record.
    pub(super) fn line(&mut self, joining: &mut Joining, origin: &Origin<'_>, line: &Line<'_>) {
        count(self.counters, self.report, line);
        let sink = &mut *self.sink;
        match (joining, self.join) {
            (Joining::Multiline(j), Join::Multiline(m)) => {
                j.push(m, line, self.now, self.counters, |record| {
                    sink.line(origin, record);
                });
            }
            (Joining::Container(j), &Join::Container(format)) => {
                let limits = (self.max_line_bytes, self.now);
                j.push(format, line, limits, self.counters, &mut |record| {
                    sink.record(origin, record);
                });
            }
            _ => sink.line(origin, line),
        }
    }

    /// Hands on the record `joining` is building, if any; `consumed` is
    /// the end offset of the file's last line pushed.
    pub(super) fn flush(&mut self, joining: &mut Joining, origin: &Origin<'_>, consumed: u64) {
        let sink = &mut *self.sink;
        match joining {
            Joining::Lines => {}
            Joining::Multiline(j) => j.flush(self.counters, &mut |record: &Line<'_>| {
                sink.line(origin, record);
            }),
            Joining::Container(j) => j.flush(consumed, self.counters, &mut |record| {
                sink.record(origin, record);
            }),
        }
    }
}

/// Counts a line read, in the tailer's counters and the poll's report.
fn count(counters: &mut Counters, report: &mut PollReport, line: &Line<'_>) {
    counters.lines_read += 1;
    report.lines += 1;
    if line.is_cut() {
        counters.lines_truncated += 1;
    }
}

#[cfg(test)]
mod tests;
