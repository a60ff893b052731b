//! `[[logs]]`: log sources, the files each one tails.
//!
//! A source's keys are checked here, and its globs by
//! [`sonde_logs::Tailer::new`] itself, so that a pattern this step accepts
//! is one the tailer builds. Which sinks take a source is checked with the
//! sinks, in [`crate::config::parse`].

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use sonde_log_sources::events::EVENTS_SOURCE;
use sonde_logs::container::{self, Format};
use sonde_logs::multiline::{Multiline, Preset, Rule};
use sonde_logs::tailer::{BuildError, Gzip, ReadFrom};
use sonde_logs::{CheckpointFile, Tailer, TailerConfig};
use toml::Spanned;

use super::error::{ConfigError, Source};
use super::units::{HumanDuration, HumanSize};

/// The longest source name: it names the checkpoint file and labels
/// `/metrics`.
pub const MAX_NAME_BYTES: usize = 64;

pub use sonde_config::METRICS_INPUT;

/// The keys a log record has of its own in the `json` format; `fields`
/// may not shadow them.
pub const RECORD_KEYS: &[&str] = &["message", "file", "offset", "host", "source"];

/// `read_from` as written.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReadFromName {
    /// Read files found at the first start from their first byte.
    Beginning,
    /// Read files found at the first start from their end.
    End,
}

/// `gzip` as written.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GzipName {
    /// Leave gzip-compressed files unread.
    Skip,
    /// Decompress and read them.
    Read,
}

/// `format` as written.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FormatName {
    /// Each line is a record.
    Lines,
    /// The kubelet's CRI log files.
    Cri,
    /// dockerd's json-file logs.
    DockerJson,
}

/// `multiline.preset` as written.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PresetName {
    /// Java stack traces.
    Java,
    /// Python tracebacks.
    Python,
}

/// `[logs.multiline]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultilineSection {
    /// A regular expression: a line matching it starts a record, the
    /// others continue it. Either this or `preset`.
    pub start: Option<Spanned<String>>,
    /// Built-in rules: `"java"` or `"python"`. Either this or `start`.
    pub preset: Option<Spanned<PresetName>>,
    /// The most lines in one record. Default 500.
    pub max_lines: Option<Spanned<i64>>,
    /// The most bytes in one record. Default `"1MiB"`.
    pub max_bytes: Option<Spanned<HumanSize>>,
    /// How long a record waits for its next line. Default `"1s"`.
    pub timeout: Option<Spanned<HumanDuration>>,
}

/// `[[logs]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// Names the source in `inputs`, its checkpoint file and the `source`
    /// label on `/metrics`: ASCII letters, digits, `.`, `_` and `-`, not
    /// starting with `.`, at most 64 bytes. Required.
    pub name: Spanned<String>,
    /// Absolute glob patterns of the files to read; `*` stays within one
    /// path component, `**` crosses any number. Required, at least one.
    pub include: Spanned<Vec<Spanned<String>>>,
    /// Glob patterns of files to leave alone: with a `/`, matched against
    /// the whole path, without, against the file name. Default `[]`.
    pub exclude: Option<Spanned<Vec<Spanned<String>>>>,
    /// Where a file found at the agent's first start begins: `"beginning"`
    /// or `"end"`; a file that appears later is read from its beginning.
    /// Default `"beginning"`.
    pub read_from: Option<Spanned<ReadFromName>>,
    /// The longest line sent whole; a longer one is cut there and counted.
    /// Default `"1MiB"`.
    pub max_line_bytes: Option<Spanned<HumanSize>>,
    /// How often the globs are walked again, besides the walks inotify
    /// wakes. Default `"5s"`.
    pub rescan_interval: Option<Spanned<HumanDuration>>,
    /// How long a rotated file stays quiet before its last line without a
    /// newline is sent and, once read to its end, it is closed. Default
    /// `"5s"`.
    pub rotate_wait: Option<Spanned<HumanDuration>>,
    /// How long a file read to its end stays unwritten before its
    /// descriptor is closed; it is opened again when written. Default
    /// `"30s"`.
    pub close_idle: Option<Spanned<HumanDuration>>,
    /// Added to every record: top-level keys in the `json` format, Kafka
    /// headers in `raw`. Default none.
    pub fields: Option<Spanned<BTreeMap<String, String>>>,
    /// Joins the lines of one event (a stack trace) into one record.
    /// Default: every line is a record.
    pub multiline: Option<Spanned<MultilineSection>>,
    /// What to do with gzip-compressed files the globs match: `"skip"`
    /// or `"read"`. Default `"skip"`.
    pub gzip: Option<Spanned<GzipName>>,
    /// How the files' lines are read: `"lines"`, each line a record;
    /// `"cri"`, the kubelet's container log files; `"docker_json"`,
    /// dockerd's. Default `"lines"`.
    pub format: Option<Spanned<FormatName>>,
}

/// A log source, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSource {
    /// Its name.
    pub name: String,
    /// Its files and how they are read: include, exclude, read_from,
    /// max_line_bytes and rotate_wait as configured, the rest as
    /// [`TailerConfig::new`] sets it.
    pub tailer: TailerConfig,
    /// How often the globs are walked again.
    pub rescan_interval: Duration,
    /// Added to every record, sorted by key.
    pub fields: Vec<(String, String)>,
}

/// The default of `rescan_interval` and of `rotate_wait`.
const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// The error for a `[[logs]]` name that is not a plain file name.
fn bad_name(name: &str, why: &str) -> (String, String) {
    (
        format!("{name:?} {why}"),
        format!(
            "write a name of ASCII letters, digits, `.`, `_` and `-`, not starting with `.`, at most {MAX_NAME_BYTES} bytes, like name = \"app\""
        ),
    )
}

/// Checks a source's name: a plain file name (it names the checkpoint
/// file, which [`CheckpointFile::new`] checks the same way), short, and not
/// the name `inputs` keeps for metrics.
fn check_name(name: &str) -> Result<(), (String, String)> {
    if name.len() > MAX_NAME_BYTES {
        return Err(bad_name(
            name,
            &format!("is {} bytes long, over {MAX_NAME_BYTES}", name.len()),
        ));
    }
    if CheckpointFile::new(Path::new(""), name).is_err() {
        return Err(bad_name(
            name,
            "is not a plain file name (it names the source's checkpoint file)",
        ));
    }
    if name == METRICS_INPUT {
        return Err((
            format!("{name:?} is what `inputs` calls the metric windows"),
            "give the source another name, like name = \"app\"".into(),
        ));
    }
    if name == sonde_config::PROFILES_INPUT {
        return Err((
            format!("{name:?} is what `inputs` calls the profiler's periods"),
            "give the source another name, like name = \"app\"".into(),
        ));
    }
    if name == EVENTS_SOURCE {
        return Err((
            format!("{name:?} is what `inputs` calls the DogStatsD events of the statsd receivers"),
            "give the source another name, like name = \"app\"".into(),
        ));
    }
    Ok(())
}

/// Validates one `[[logs]]` table, the `i`th.
fn one(src: Source<'_>, i: usize, s: &LogSection) -> Result<LogSource, ConfigError> {
    let key = |k: &str| format!("logs[{i}].{k}");
    let name = s.name.get_ref();
    check_name(name)
        .map_err(|(problem, fix)| src.error(s.name.span(), key("name"), problem, fix))?;
    let include = s.include.get_ref();
    if include.is_empty() {
        return Err(src.error(
            s.include.span(),
            key("include"),
            "no patterns: the source would read no file",
            "list the files to read, like include = [\"/var/log/app/*.log\"]",
        ));
    }
    let exclude: &[Spanned<String>] = s.exclude.as_ref().map_or(&[], |e| e.get_ref());
    for (j, p) in exclude.iter().enumerate() {
        let pattern = p.get_ref();
        // A pattern with a `/` is matched against the whole (absolute)
        // path, so one that starts with a plain character, like
        // "old/*.log", could never match anything.
        if pattern.contains('/')
            && pattern.starts_with(|c: char| c.is_alphanumeric() || "._-".contains(c))
        {
            return Err(src.error(
                p.span(),
                format!("logs[{i}].exclude[{j}]"),
                format!("{pattern:?} has a `/` but does not start at the root, so it matches no path"),
                format!("write the whole path, like \"/var/log/app/{pattern}\" or \"**/{pattern}\", or a file name alone without `/`"),
            ));
        }
    }
    let mut tailer = TailerConfig::new(include.iter().map(|p| p.get_ref().clone()).collect());
    tailer.exclude = exclude.iter().map(|p| p.get_ref().clone()).collect();
    if let Some(r) = &s.read_from {
        tailer.read_from = match r.get_ref() {
            ReadFromName::Beginning => ReadFrom::Beginning,
            ReadFromName::End => ReadFrom::End,
        };
    }
    if let Some(m) = &s.max_line_bytes {
        let n = m.get_ref().0;
        if n == 0 {
            return Err(src.error(
                m.span(),
                key("max_line_bytes"),
                "0 bytes: no line would fit",
                "write a size above 0, like \"1MiB\" (the default)",
            ));
        }
        tailer.max_line_bytes = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(c) = &s.close_idle {
        tailer.close_idle = c.get_ref().0;
    }
    if let Some(w) = &s.rotate_wait {
        tailer.rotate_wait = w.get_ref().0;
    }
    if let Some(f) = &s.format {
        tailer.format = match f.get_ref() {
            FormatName::Lines => Format::Lines,
            FormatName::Cri => Format::Cri,
            FormatName::DockerJson => Format::DockerJson,
        };
    }
    if let Some(m) = &s.multiline {
        if tailer.format != Format::Lines {
            return Err(src.error(
                m.span(),
                format!("logs[{i}].multiline"),
                "multiline joining with a container log format: the runtime's pieces already make each record",
                "remove the multiline table, or read the files with format = \"lines\"",
            ));
        }
        tailer.multiline = Some(multiline(src, i, m)?);
    }
    if let Some(g) = &s.gzip {
        tailer.gzip = match g.get_ref() {
            GzipName::Skip => Gzip::Skip,
            GzipName::Read => Gzip::Read,
        };
    }
    let rescan_interval = match &s.rescan_interval {
        Some(r) if r.get_ref().0.is_zero() => {
            return Err(src.error(
                r.span(),
                key("rescan_interval"),
                "0s would walk the globs without pause",
                "write a duration above 0, like \"5s\" (the default)",
            ))
        }
        Some(r) => r.get_ref().0,
        None => DEFAULT_WAIT,
    };
    // The tailer checks the globs as it builds them; it does no I/O until
    // its first rescan, so validation stays pure.
    if let Err(e) = Tailer::new(tailer.clone(), None) {
        return Err(tailer_error(src, i, include, exclude, s, e));
    }
    let mut fields = Vec::new();
    if let Some(f) = &s.fields {
        let container = tailer.format != Format::Lines;
        for (k, v) in f.get_ref() {
            let taken = RECORD_KEYS.contains(&k.as_str())
                || (container && container::RECORD_KEYS.contains(&k.as_str()));
            if k.is_empty() || taken {
                let line = src.key_line(&f.span(), k).or_else(|| src.line(&f.span()));
                let container_keys: &[&str] = if container {
                    &container::RECORD_KEYS
                } else {
                    &[]
                };
                let taken = RECORD_KEYS
                    .iter()
                    .chain(container_keys)
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let problem = if k.is_empty() {
                    "a field with an empty name".to_string()
                } else {
                    format!("{k:?} is a key of the record itself")
                };
                let key = if k.is_empty() {
                    format!("logs[{i}].fields")
                } else {
                    format!("logs[{i}].fields.{k}")
                };
                return Err(src.at(
                    line,
                    ConfigError::new(
                        key,
                        problem,
                        format!("name the field anything but {taken} or \"\""),
                    ),
                ));
            }
            fields.push((k.clone(), v.clone()));
        }
    }
    Ok(LogSource {
        name: name.clone(),
        tailer,
        rescan_interval,
        fields,
    })
}

/// Validates `[logs.multiline]` of the `i`th source; the start pattern is
/// compiled by [`Tailer::new`].
fn multiline(
    src: Source<'_>,
    i: usize,
    section: &Spanned<MultilineSection>,
) -> Result<Multiline, ConfigError> {
    let key = |k: &str| format!("logs[{i}].multiline.{k}");
    let m = section.get_ref();
    let rule = match (&m.start, &m.preset) {
        (Some(start), None) => Rule::Start(start.get_ref().clone()),
        (None, Some(p)) => Rule::Preset(match p.get_ref() {
            PresetName::Java => Preset::Java,
            PresetName::Python => Preset::Python,
        }),
        (Some(_), Some(p)) => {
            return Err(src.error(
                p.span(),
                key("preset"),
                "both `start` and `preset`: a record would have two rules",
                "keep one: `start` for a pattern of your own, `preset` for \"java\" or \"python\"",
            ))
        }
        (None, None) => {
            return Err(src.error(
                section.span(),
                format!("logs[{i}].multiline"),
                "no `start` and no `preset`: nothing says where a record starts",
                "add start = '^\\d{4}-\\d{2}-\\d{2}' (a line beginning with a date starts a record) or preset = \"java\" or \"python\"",
            ))
        }
    };
    let mut out = Multiline::new(rule);
    if let Some(n) = &m.max_lines {
        out.max_lines = match usize::try_from(*n.get_ref()) {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(src.error(
                    n.span(),
                    key("max_lines"),
                    format!("{} lines: a record holds at least one", n.get_ref()),
                    "write a count above 0, like 500 (the default)",
                ))
            }
        };
    }
    if let Some(b) = &m.max_bytes {
        if b.get_ref().0 == 0 {
            return Err(src.error(
                b.span(),
                key("max_bytes"),
                "0 bytes: no record would fit",
                "write a size above 0, like \"1MiB\" (the default)",
            ));
        }
        out.max_bytes = usize::try_from(b.get_ref().0).unwrap_or(usize::MAX);
    }
    if let Some(t) = &m.timeout {
        if t.get_ref().0.is_zero() {
            return Err(src.error(
                t.span(),
                key("timeout"),
                "0s would hand on every record before its next line could come",
                "write a duration above 0, like \"1s\" (the default)",
            ));
        }
        out.timeout = t.get_ref().0;
    }
    Ok(out)
}

/// Places a refusal of [`Tailer::new`] at the pattern or key it is about.
fn tailer_error(
    src: Source<'_>,
    i: usize,
    include: &[Spanned<String>],
    exclude: &[Spanned<String>],
    s: &LogSection,
    e: BuildError,
) -> ConfigError {
    let find = |pattern: &str| {
        let at = |list: &[Spanned<String>], name: &str| {
            list.iter()
                .position(|p| p.get_ref() == pattern)
                .map(|j| (format!("logs[{i}].{name}[{j}]"), list[j].span()))
        };
        at(include, "include")
            .or_else(|| at(exclude, "exclude"))
            .unwrap_or_else(|| (format!("logs[{i}].include"), s.include.span()))
    };
    match e {
        BuildError::Glob { pattern, error } => {
            let (key, span) = find(&pattern);
            src.error(
                span,
                key,
                format!("{pattern:?} is not a glob: {}", error.kind()),
                "write a glob like \"/var/log/app/*.log\" or \"/var/log/**/*.log\"; escape a literal `*`, `?`, `[` or `{` as [*], [?], [[] or [{]",
            )
        }
        BuildError::Relative { pattern } => {
            let (key, span) = find(&pattern);
            src.error(
                span,
                key,
                format!("{pattern:?} is not an absolute path"),
                "start the pattern with `/`, like \"/var/log/app/*.log\": a relative one would depend on the agent's working directory",
            )
        }
        BuildError::Set(source) => src.error(
            s.include.span(),
            format!("logs[{i}].include"),
            format!("the patterns together are too large to match: {source}"),
            "use fewer or simpler patterns, or split them over two sources",
        ),
        BuildError::Regex { pattern, error } => {
            let start = s
                .multiline
                .as_ref()
                .and_then(|m| m.get_ref().start.as_ref());
            src.error(
                start.map_or_else(|| s.name.span(), Spanned::span),
                format!("logs[{i}].multiline.start"),
                format!("{pattern:?} is not a regular expression: {error}"),
                "write a pattern in Rust regex syntax, like '^\\d{4}-\\d{2}-\\d{2}' (in single quotes, so that TOML keeps the backslashes)",
            )
        }
        BuildError::MultilineAndFormat => src.error(
            s.name.span(),
            format!("logs[{i}].multiline"),
            "multiline joining with a container log format",
            "remove the multiline table",
        ),
        BuildError::Zero { key } => src.error(
            s.max_line_bytes
                .as_ref()
                .map_or_else(|| s.name.span(), Spanned::span),
            format!("logs[{i}].{key}"),
            format!("{key} is 0"),
            "write a size above 0",
        ),
    }
}

/// Validates the `[[logs]]` tables: each on its own, then distinct names.
pub(crate) fn check(
    src: Source<'_>,
    sections: &[Spanned<LogSection>],
) -> Result<Vec<LogSource>, ConfigError> {
    // Where each name is first written; its line is counted only for an
    // error, as counting lines costs a pass over the text.
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut sources = Vec::with_capacity(sections.len());
    for (i, s) in sections.iter().enumerate() {
        let s = s.get_ref();
        let source = one(src, i, s)?;
        if let Some(first) = names.insert(s.name.get_ref(), s.name.span().start) {
            let first = src.line_of(first);
            return Err(src.error(
                s.name.span(),
                format!("logs[{i}].name"),
                format!(
                    "{:?} is already the name of the source on line {first}",
                    s.name.get_ref()
                ),
                "give each [[logs]] source its own name",
            ));
        }
        sources.push(source);
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_with_log_sinks as parse, Config};

    /// A sink that takes the source "app", after the source's lines.
    const SINK: &str = "[[sinks]]\ntype = \"both\"\ninputs = [\"app\"]\n";

    /// The config of one source whose table holds `keys` (from line 2).
    fn source(keys: &str) -> Result<Config, ConfigError> {
        parse(&format!("[[logs]]\n{keys}{SINK}"))
    }

    fn err(keys: &str) -> ConfigError {
        match source(keys) {
            Ok(_) => panic!("accepted:\n{keys}"),
            Err(e) => e,
        }
    }

    /// The key and line of the error of a source with `keys`.
    fn at(keys: &str) -> (String, Option<usize>) {
        let e = err(keys);
        (e.key, e.line)
    }

    fn key(k: &str, line: usize) -> (String, Option<usize>) {
        (k.to_string(), Some(line))
    }

    const APP: &str = "name = \"app\"\ninclude = [\"/var/log/app/*.log\"]\n";

    #[test]
    fn a_source_with_only_a_name_and_globs_takes_the_contract_defaults() {
        let c = source(APP).unwrap();
        assert!(c.receivers.is_empty());
        let [l] = &c.logs[..] else {
            panic!("{:?}", c.logs)
        };
        assert_eq!(l.name, "app");
        assert_eq!(l.tailer.include, ["/var/log/app/*.log"]);
        assert!(l.tailer.exclude.is_empty());
        assert_eq!(l.tailer.read_from, ReadFrom::Beginning);
        assert_eq!(l.tailer.max_line_bytes, 1 << 20);
        assert_eq!(l.tailer.rotate_wait, Duration::from_secs(5));
        assert_eq!(l.tailer.close_idle, Duration::from_secs(30));
        assert_eq!(l.tailer.gzip, Gzip::Skip);
        assert_eq!(l.rescan_interval, Duration::from_secs(5));
        assert!(l.fields.is_empty());
    }

    #[test]
    fn every_key_is_read_into_the_source() {
        let c = parse(
            "[[logs]]\nname = \"app-1.x_y\"\ninclude = [\"/var/log/app/*.log*\", \"/srv/**/out.log\"]\nexclude = [\"*.gz\", \"/var/log/app/old/*\"]\nread_from = \"end\"\nmax_line_bytes = \"64KiB\"\nrescan_interval = \"500ms\"\nrotate_wait = \"0s\"\nclose_idle = \"2m\"\ngzip = \"read\"\nfields = { service = \"api\", dc = \"x\", \"a b\" = \"\" }\n[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app-1.x_y\"]\n",
        )
        .unwrap();
        let l = &c.logs[0];
        assert_eq!(l.name, "app-1.x_y");
        assert_eq!(l.tailer.include, ["/var/log/app/*.log*", "/srv/**/out.log"]);
        assert_eq!(l.tailer.exclude, ["*.gz", "/var/log/app/old/*"]);
        assert_eq!(l.tailer.read_from, ReadFrom::End);
        assert_eq!(l.tailer.max_line_bytes, 64 << 10);
        assert_eq!(l.tailer.rotate_wait, Duration::ZERO);
        assert_eq!(l.tailer.close_idle, Duration::from_secs(120));
        assert_eq!(l.tailer.gzip, Gzip::Read);
        assert_eq!(l.rescan_interval, Duration::from_millis(500));
        let fields: Vec<(&str, &str)> = l
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(fields, [("a b", ""), ("dc", "x"), ("service", "api")]);
    }

    #[test]
    fn sources_keep_file_order_and_fields_may_be_a_table_of_their_own() {
        let c = parse(
            "[[logs]]\nname = \"b\"\ninclude = [\"/b/*\"]\n[logs.fields]\nteam = \"x\"\n[[logs]]\nname = \"a\"\ninclude = [\"/a/*\"]\n[[sinks]]\ntype = \"both\"\ninputs = [\"a\", \"b\"]\n",
        )
        .unwrap();
        let names: Vec<&str> = c.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(c.logs[0].fields, [("team".to_string(), "x".to_string())]);
    }

    #[test]
    fn names_must_be_plain_short_file_names_other_than_metrics() {
        let inc = "include = [\"/x/*\"]\n";
        for bad in [
            "\"\"",
            "\".app\"",
            "\"a/b\"",
            "\"a b\"",
            "\"..\"",
            "\"é\"",
            "\"metrics\"",
            &format!("\"{}\"", "a".repeat(MAX_NAME_BYTES + 1)),
        ] {
            let e = err(&format!("{inc}name = {bad}\n"));
            assert_eq!((e.key.as_str(), e.line), ("logs[0].name", Some(3)), "{bad}");
            assert!(e.fix.contains("name = \""), "{e}");
        }
        let long = "a".repeat(MAX_NAME_BYTES);
        let c = parse(&format!(
            "[[logs]]\nname = \"{long}\"\n{inc}[[sinks]]\ntype = \"both\"\ninputs = [\"{long}\"]\n"
        ))
        .unwrap();
        assert_eq!(c.logs[0].name, long);
        let e = err(&format!("{inc}name = \"metrics\"\n"));
        assert!(e.problem.contains("metric windows"), "{e}");
    }

    #[test]
    fn a_name_used_twice_names_the_first_line() {
        let e = parse(&format!(
            "[[logs]]\n{APP}[[logs]]\n\nname = \"app\"\ninclude = [\"/b/*\"]\n{SINK}"
        ))
        .unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("logs[1].name", Some(6)));
        assert!(e.problem.contains("line 2"), "{e}");
    }

    #[test]
    fn missing_and_unknown_keys_name_the_key_and_line() {
        assert_eq!(at("include = [\"/x/*\"]\n"), key("logs[0].name", 1));
        assert_eq!(at("name = \"app\"\n"), key("logs[0].include", 1));
        assert_eq!(
            at(&format!("{APP}includes = [\"/y/*\"]\n")),
            key("logs[0].includes", 4)
        );
        assert_eq!(
            at(&format!("{APP}read_from = \"middle\"\n")),
            key("logs[0].read_from", 4)
        );
        assert_eq!(
            at(&format!("{APP}exclude = \"*.gz\"\n")),
            key("logs[0].exclude", 4)
        );
    }

    #[test]
    fn globs_are_checked_as_the_tailer_builds_them() {
        assert_eq!(
            at("name = \"app\"\ninclude = []\n"),
            key("logs[0].include", 3)
        );
        let e = err("name = \"app\"\ninclude = [\"/ok/*\",\n  \"var/log/*.log\"]\n");
        assert_eq!((e.key.as_str(), e.line), ("logs[0].include[1]", Some(4)));
        assert!(e.problem.contains("absolute"), "{e}");
        let e = err("name = \"app\"\ninclude = [\"/var/log/[.log\"]\n");
        assert_eq!((e.key.as_str(), e.line), ("logs[0].include[0]", Some(3)));
        assert!(e.problem.contains("not a glob"), "{e}");
        assert_eq!(
            at(&format!("{APP}exclude = [\"*.gz\", \"{{a\"]\n")),
            key("logs[0].exclude[1]", 4)
        );
        // Excludes may be bare file names: they match the name alone.
        source(&format!(
            "{APP}exclude = [\"*.gz\", \"**/old/*\", \"/a/b\"]\n"
        ))
        .unwrap();
        // A path that does not start at the root would match nothing.
        let e = err(&format!("{APP}exclude = [\"*.gz\", \"old/*.log\"]\n"));
        assert_eq!((e.key.as_str(), e.line), ("logs[0].exclude[1]", Some(4)));
        assert!(e.fix.contains("\"**/old/*.log\""), "{e}");
    }

    #[test]
    fn sizes_and_durations_must_be_above_zero() {
        for (k, v, line) in [
            ("max_line_bytes", "\"0\"", 4),
            ("max_line_bytes", "\"1 MiB\"", 4),
            ("rescan_interval", "\"0s\"", 4),
            ("rescan_interval", "\"5\"", 4),
            ("rotate_wait", "\"soon\"", 4),
            ("gzip", "\"gunzip\"", 4),
        ] {
            assert_eq!(
                at(&format!("{APP}{k} = {v}\n")),
                key(&format!("logs[0].{k}"), line),
                "{k} = {v}"
            );
        }
    }

    #[test]
    fn multiline_takes_a_start_pattern_or_a_preset_and_its_limits() {
        let c = source(&format!(
            "{APP}[logs.multiline]\nstart = '^\\d{{4}}-'\nmax_lines = 20\nmax_bytes = \"64KiB\"\ntimeout = \"250ms\"\n"
        ))
        .unwrap();
        let m = c.logs[0].tailer.multiline.as_ref().unwrap();
        assert_eq!(m.rule, Rule::Start(r"^\d{4}-".into()));
        assert_eq!(
            (m.max_lines, m.max_bytes, m.timeout),
            (20, 64 << 10, Duration::from_millis(250))
        );
        for (name, preset) in [("java", Preset::Java), ("python", Preset::Python)] {
            let c = source(&format!("{APP}multiline = {{ preset = \"{name}\" }}\n")).unwrap();
            let m = c.logs[0].tailer.multiline.as_ref().unwrap();
            assert_eq!(m, &Multiline::new(Rule::Preset(preset)));
        }
        assert_eq!(source(APP).unwrap().logs[0].tailer.multiline, None);
    }

    #[test]
    fn a_multiline_table_needs_one_rule_a_valid_pattern_and_limits_above_zero() {
        let ml = |keys: &str| format!("{APP}[logs.multiline]\n{keys}");
        let e = err(&ml("start = '^('\n"));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("logs[0].multiline.start", Some(5))
        );
        assert!(e.problem.contains("not a regular expression"), "{e}");
        let e = err(&ml("start = '^S'\npreset = \"java\"\n"));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("logs[0].multiline.preset", Some(6))
        );
        let e = err(&ml("timeout = \"1s\"\n"));
        assert_eq!(e.key, "logs[0].multiline");
        assert!(e.fix.contains("preset = \"java\""), "{e}");
        for (k, v) in [
            ("max_lines", "0"),
            ("max_lines", "-3"),
            ("max_bytes", "\"0\""),
            ("timeout", "\"0s\""),
            ("preset", "\"go\""),
            ("starts", "'^S'"),
        ] {
            let keys = if k == "preset" || k == "starts" {
                format!("{k} = {v}\n")
            } else {
                format!("preset = \"java\"\n{k} = {v}\n")
            };
            let e = err(&ml(&keys));
            assert_eq!(e.key, format!("logs[0].multiline.{k}"), "{k} = {v}: {e}");
        }
    }

    #[test]
    fn fields_may_not_take_the_records_own_keys() {
        for k in RECORD_KEYS {
            let e = err(&format!("{APP}\nfields = {{ a = \"1\", {k} = \"2\" }}\n"));
            assert_eq!(
                (e.key.as_str(), e.line),
                (format!("logs[0].fields.{k}").as_str(), Some(5))
            );
            assert!(e.fix.contains("`message`"), "{e}");
        }
        let e = parse(&format!(
            "[[logs]]\n{APP}[logs.fields]\nteam = \"x\"\nhost = \"y\"\n{SINK}"
        ))
        .unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("logs[0].fields.host", Some(6)));
        assert_eq!(
            at(&format!("{APP}fields = {{ \"\" = \"x\" }}\n")),
            key("logs[0].fields", 4)
        );
        assert_eq!(
            at(&format!("{APP}fields = {{ port = 80 }}\n")),
            key("logs[0].fields", 4)
        );
    }

    #[test]
    fn a_container_format_is_read_by_name_alone_and_not_with_multiline() {
        assert_eq!(source(APP).unwrap().logs[0].tailer.format, Format::Lines);
        for (name, format) in [
            ("lines", Format::Lines),
            ("cri", Format::Cri),
            ("docker_json", Format::DockerJson),
        ] {
            let c = source(&format!("{APP}format = \"{name}\"\n")).unwrap();
            assert_eq!(c.logs[0].tailer.format, format);
        }
        let e = err(&format!("{APP}format = \"json\"\n"));
        assert_eq!((e.key.as_str(), e.line), ("logs[0].format", Some(4)));
        let e = err(&format!(
            "{APP}format = \"cri\"\nmultiline = {{ preset = \"java\" }}\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("logs[0].multiline", Some(5)));
        assert!(e.fix.contains("format = \"lines\""), "{e}");
        // A container record has keys of its own that fields may not take;
        // a source of plain lines has not.
        for k in container::RECORD_KEYS {
            let e = err(&format!(
                "{APP}format = \"cri\"\nfields = {{ {k} = \"x\" }}\n"
            ));
            assert_eq!(e.key, format!("logs[0].fields.{k}"));
            assert!(e.fix.contains("`pod_name`"), "{e}");
            assert!(source(&format!("{APP}fields = {{ {k} = \"x\" }}\n")).is_ok());
        }
    }
}
