//! [`ConfigError`]: what is wrong, where, and what to write instead.

use std::fmt;
use std::ops::Range;

/// A configuration error: the key it is about, its line, the problem and
/// the fix, as fields, so that `sonde validate` prints every error alike
/// and tests assert on the key and the line rather than on wording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The key as a path from the top of the file: `agent.interval`,
    /// `receivers[0].listen`, `sinks[1].compression` (tables of an array
    /// are counted from 0). A missing section is named by itself
    /// (`receivers`); a TOML syntax error outside any table has an empty
    /// key.
    pub key: String,
    /// The line (from 1) of the key in the file; `None` when the error is
    /// about something the file leaves out.
    pub line: Option<usize>,
    /// That line's text, trimmed, shown under the message.
    pub line_text: Option<String>,
    /// What is wrong, for a person.
    pub problem: String,
    /// What to write instead.
    pub fix: String,
}

impl ConfigError {
    /// An error about `key` with no line (yet); see [`Source::error`].
    pub fn new(key: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            line: None,
            line_text: None,
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    /// `line N: key: problem`, then the line's text and the fix, each on a
    /// line of its own.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.problem)?;
        if let Some(src) = &self.line_text {
            write!(f, "\n    | {src}")?;
        }
        if !self.fix.is_empty() {
            // A fix of several lines (an example table) stays indented.
            write!(f, "\n    fix: {}", self.fix.replace('\n', "\n         "))?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Separates the problem from the fix in the message of a serde error
/// raised by a value's own `Deserialize` (see [`crate::units`]),
/// since serde carries only one string.
pub const FIX_MARK: &str = "\nfix: ";

/// The file's text, to turn byte spans into lines and lines into key
/// paths.
#[derive(Clone, Copy)]
pub struct Source<'a> {
    pub text: &'a str,
}

impl<'a> Source<'a> {
    /// The line (from 1) of a byte offset.
    pub fn line_of(&self, offset: usize) -> usize {
        self.text.as_bytes()[..offset.min(self.text.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// The line of a span; `None` for the empty span that marks a default
    /// (`Spanned::new(0..0, ..)`), which is not in the file.
    pub fn line(&self, span: &Range<usize>) -> Option<usize> {
        (span.end > 0).then(|| self.line_of(span.start))
    }

    /// An error about `key`, at the line of `span` when it is in the file.
    pub fn error(
        &self,
        span: Range<usize>,
        key: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        self.at(self.line(&span), ConfigError::new(key, problem, fix))
    }

    /// `e` placed at `line`, with the line's text.
    pub fn at(&self, line: Option<usize>, mut e: ConfigError) -> ConfigError {
        e.line = line;
        e.line_text = line
            .and_then(|l| self.text.lines().nth(l - 1))
            .map(|s| s.trim().to_string());
        e
    }

    /// The line of `key = ...` in the table that starts at `span` (a
    /// table's own span covers its header too), or the table's first line.
    pub fn key_line(&self, span: &Range<usize>, key: &str) -> Option<usize> {
        let first = self.line(span)?;
        for (i, l) in self.text.lines().enumerate().skip(first - 1) {
            let l = l.trim_start();
            if i + 1 > first && l.starts_with('[') {
                break;
            }
            let bare = l.strip_prefix(key);
            let quoted = l
                .strip_prefix('"')
                .and_then(|r| r.strip_prefix(key))
                .and_then(|r| r.strip_prefix('"'));
            if bare
                .or(quoted)
                .is_some_and(|r| r.trim_start().starts_with('='))
            {
                return Some(i + 1);
            }
        }
        Some(first)
    }

    /// The path of the key on `line`: the table header above it
    /// (`[agent]`, the third `[[sinks]]` as `sinks[2]`) and the key the
    /// line sets, if any.
    pub fn key_path(&self, line: usize) -> String {
        // A line past the end (a span at the end of the file) is in the
        // last table.
        let mut table = String::new();
        for (i, (t, path)) in self.paths().enumerate() {
            if i + 1 == line {
                return path;
            }
            table = t;
        }
        table
    }

    /// The line (from 1) that sets `key` (a path as [`Source::key_path`]
    /// gives it), or the header of the table `key` names; `None` when the
    /// file leaves it out.
    pub fn line_of_key(&self, key: &str) -> Option<usize> {
        if let Some(i) = self.paths().position(|(_, p)| p == key) {
            return Some(i + 1);
        }
        // A key inside an inline table (`sinks[0].tls.ca_file`) is on the
        // line that sets the table (`tls = { ... }`), not a header.
        let mut parent = key;
        while let Some((up, _)) = parent.rsplit_once('.') {
            parent = up;
            if let Some(i) = self
                .paths()
                .position(|(table, p)| p == parent && p != table)
            {
                return Some(i + 1);
            }
        }
        None
    }

    /// The table and the path of each line in turn, as
    /// [`Source::key_path`] gives it.
    fn paths(&self) -> impl Iterator<Item = (String, String)> + '_ {
        let mut table = String::new();
        let mut counts: std::collections::HashMap<String, usize> = Default::default();
        self.text.lines().map(move |l| {
            let l = l.trim();
            if let Some(h) = l.strip_prefix("[[").and_then(|r| r.split_once("]]")) {
                let name = h.0.trim().to_string();
                let n = counts.entry(name.clone()).or_insert(0);
                table = format!("{name}[{n}]");
                *n += 1;
                return (table.clone(), table.clone());
            }
            if let Some(h) = l.strip_prefix('[').and_then(|r| r.split_once(']')) {
                // A table inside the last element of an array of tables
                // (`[logs.multiline]` after the first `[[logs]]`) is
                // `logs[0].multiline`.
                let name = h.0.trim();
                let within = name.rmatch_indices('.').find_map(|(dot, _)| {
                    let n = counts.get(&name[..dot])?;
                    Some(format!("{}[{}]{}", &name[..dot], n - 1, &name[dot..]))
                });
                table = within.unwrap_or_else(|| name.to_string());
                return (table.clone(), table.clone());
            }
            let key = l
                .split_once('=')
                .map(|(k, _)| k.trim().trim_matches('"').to_string())
                .filter(|k| !k.is_empty() && !k.starts_with('#'));
            let path = match (table.is_empty(), key) {
                (_, None) => table.clone(),
                (true, Some(k)) => k,
                (false, Some(k)) => format!("{table}.{k}"),
            };
            (table.clone(), path)
        })
    }

    /// A TOML syntax or type error, placed at the key it names.
    pub fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let msg = e.message().trim_end();
        let (problem, fix) = split_fix(msg);
        let line = e.span().map(|span| match mentioned_key(problem) {
            Some(key) => self.key_line(&span, &key).unwrap_or(1),
            None => self.line_of(span.start),
        });
        let mut key = line.map(|l| self.key_path(l)).unwrap_or_default();
        let missing = quoted_after(problem, "missing field `");
        if let Some(m) = &missing {
            key = if key.is_empty() {
                m.clone()
            } else {
                format!("{key}.{m}")
            };
        }
        let fix = match (fix, missing) {
            (Some(f), _) => f.to_string(),
            (None, Some(m)) => format!("add `{m}` to this table"),
            (None, None) => generic_fix(problem),
        };
        self.at(line, ConfigError::new(key, problem, fix))
    }
}

/// Splits a message made with [`FIX_MARK`].
pub fn split_fix(msg: &str) -> (&str, Option<&str>) {
    match msg.split_once(FIX_MARK) {
        Some((p, f)) => (p, Some(f)),
        None => (msg, None),
    }
}

/// The key a serde message is about: the one in ``unknown field `x` ``.
/// Errors inside a table deserialized as a whole carry the whole table's
/// span; the key is found inside it so that the line is the key's.
fn mentioned_key(msg: &str) -> Option<String> {
    quoted_after(msg, "unknown field `")
}

/// The name in backticks after `prefix` in a serde message.
pub fn quoted_after(msg: &str, prefix: &str) -> Option<String> {
    let rest = &msg[msg.find(prefix)? + prefix.len()..];
    Some(rest[..rest.find('`')?].to_string())
}

/// The fix for serde's own messages, which name the problem only.
pub fn generic_fix(problem: &str) -> String {
    if problem.starts_with("unknown field") {
        "remove the key or correct its spelling (the keys this table takes are listed above)".into()
    } else if problem.starts_with("unknown variant") {
        "write one of the values listed above".into()
    } else if problem.starts_with("invalid type") {
        "write a value of the expected type".into()
    } else {
        "correct the TOML on this line".into()
    }
}
