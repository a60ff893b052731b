//! What a sink type is and what a configured sink is: [`SinkType`], the
//! descriptor each type's folder declares once, and [`Sink`], one
//! `[[sinks]]` table as the registry validated it (with [`NetSink`], the
//! common keys of a network sink). The registry ([`crate::registry`])
//! and every type's folder import this module; it imports neither.

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use sonde_config::error::quoted_after;
use sonde_config::{ConfigError, METRICS_INPUT, PROFILES_INPUT};
use sonde_encode::compress::Compression;
use sonde_log_sources::{LogInput, SourceInfo};

use crate::sender::Delivery;
use crate::sink::{Exposition, SinkHandle, SinkStats};

/// [`SinkType::check`] of a type with no keys of its own.
pub fn no_own_keys(_: &mut Sink) -> Result<(), ConfigError> {
    Ok(())
}

/// This host's name (the kernel's node name): OTLP's `host.name`, the
/// `host` of log records.
pub fn hostname() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let h = h.trim();
    (!h.is_empty()).then(|| h.to_string())
}

/// What a sink type can take: what its `inputs` may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Flushed metric windows.
    Metrics,
    /// The lines of log sources.
    Logs,
    /// The profiler's periods.
    Profiles,
}

/// One entry of a sink's `inputs`, validated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SinkInput {
    /// `"metrics"`: the flushed metric windows.
    Metrics,
    /// The lines of the `[[logs]]` source of this name.
    Logs(String),
    /// `"profiles"`: each period's profile from `[profiler]`.
    Profiles,
}

impl SinkInput {
    /// What a sink type must accept to take this input.
    pub fn kind(&self) -> Input {
        match self {
            SinkInput::Metrics => Input::Metrics,
            SinkInput::Logs(_) => Input::Logs,
            SinkInput::Profiles => Input::Profiles,
        }
    }
}

impl fmt::Display for SinkInput {
    /// As written in `inputs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkInput::Metrics => f.write_str(METRICS_INPUT),
            SinkInput::Logs(name) => f.write_str(name),
            SinkInput::Profiles => f.write_str(PROFILES_INPUT),
        }
    }
}

/// How a sink reaches its backend; this decides which common keys it takes
/// ([`Transport::keys`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Requests POSTed to `url`.
    Http,
    /// A persistent TCP connection to `address`.
    Tcp,
    /// A connection of the type's own (a message queue's client, say):
    /// the type takes the common network keys but no `url` or `address`,
    /// names its target with keys of its own, and its `start` hands its
    /// transport to [`crate::net::spawn`].
    Own,
    /// Nothing leaves the host (console, file) or the backend comes to the
    /// agent (the Prometheus exporter): no batching, buffer or retries.
    Local,
}

/// Keys every sink takes, whatever its transport: what it takes
/// (`inputs`) and its name on `/metrics` and in logs (`name`).
const COMMON_KEYS: &[&str] = &["inputs", "name"];

/// Keys of every network sink: compression, batching, retries and buffer
/// (see [`NetSinkSection`]).
const NET_KEYS: &[&str] = &[
    "compression",
    "compression_level",
    "max_batch_points",
    "max_batch_bytes",
    "max_batch_age",
    "request_timeout",
    "retry_min_backoff",
    "retry_max_backoff",
    "shutdown_grace",
    "buffer",
];

impl Transport {
    /// The keys every sink of this transport takes, besides `type`.
    pub fn keys(self) -> Vec<&'static str> {
        let own: &[&str] = match self {
            Transport::Http => &["url", "headers"],
            Transport::Tcp => &["address"],
            Transport::Own | Transport::Local => &[],
        };
        let net = if self == Transport::Local {
            &[]
        } else {
            NET_KEYS
        };
        COMMON_KEYS.iter().chain(own).chain(net).copied().collect()
    }
}

/// What starting a sink gets: its counters, where a listening sink puts
/// its HTTP site, and the log sources it takes.
pub struct Start<'a> {
    /// The sink's counters on `/metrics`.
    pub stats: Arc<SinkStats>,
    /// Listeners the agent's HTTP thread serves.
    pub exporters: &'a mut Vec<(TcpListener, Exposition)>,
    /// The log sources whose lines it takes (its `inputs` other than
    /// `metrics`), with what records carry besides the line.
    pub sources: &'a [SourceInfo],
    /// The host the agent names (`agent.hostname`, else the kernel's
    /// host name): OTLP's `host.name`.
    pub host: &'a str,
    /// The sink's table in the config (`sinks[1]`), to name the key a
    /// failure to start is about: a start error that is a
    /// [`ConfigError`] names the key and the fix, and the agent places it
    /// at its line.
    pub key: &'a str,
    /// Where a disk buffer counts the writes the disk refused.
    pub data_dir: Arc<sonde_runtime::data_dir::DataDirErrors>,
}

/// A started sink.
#[derive(Debug)]
pub struct Running {
    /// Where the flusher sends windows. A sink that does not take
    /// `metrics` gets none: the agent drops this handle and its window
    /// thread, if any, ends.
    pub windows: Option<SinkHandle>,
    /// Where the profiler sends each period, when it takes `profiles`.
    pub profiles: Option<crate::profiles::ProfileHandle>,
    /// Its end for each log source of [`Start::sources`], by source name.
    pub logs: Vec<(String, LogInput)>,
    /// Its threads; each ends once the sink's inputs are dropped and what it
    /// holds is delivered.
    pub threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Adds a log thread taking every source of `st` through `tx`.
    pub(crate) fn add_logs(
        &mut self,
        st: &Start<'_>,
        tx: &std::sync::mpsc::Sender<Arc<sonde_log_sources::LogBatch>>,
        thread: JoinHandle<()>,
    ) {
        for source in st.sources {
            let input = LogInput {
                tx: tx.clone(),
                restored: None,
                positions: false,
            };
            self.logs.push((source.name.clone(), input));
        }
        self.threads.push(thread);
    }
}

/// A sink of windows only, as `crate::sink::spawn` starts one.
impl From<(SinkHandle, JoinHandle<()>)> for Running {
    fn from((windows, thread): (SinkHandle, JoinHandle<()>)) -> Self {
        Running {
            windows: Some(windows),
            profiles: None,
            logs: Vec::new(),
            threads: vec![thread],
        }
    }
}

/// A sink type's check of the host ([`SinkType::host`]).
pub type HostCheck = fn(&Sink) -> Result<(), ConfigError>;

/// One sink type; see the module docs.
pub struct SinkType {
    /// The value of `type`.
    pub name: &'static str,
    /// What its sinks' `inputs` may name: metric windows, log lines or
    /// both.
    pub accepts: &'static [Input],
    /// How it reaches its backend.
    pub transport: Transport,
    /// The `compression` values its backend accepts, the default first;
    /// empty for local sinks.
    pub compressions: &'static [&'static str],
    /// Headers of the protocol sent with every request, besides
    /// `Content-Type` (the encoder's) and `Content-Encoding` (the
    /// compression's).
    pub headers: &'static [(&'static str, &'static str)],
    /// Keys of its own, besides `type` and its transport's.
    pub keys: &'static [&'static str],
    /// Checks its own keys, kept in [`Sink::options`], and fills in what
    /// they decide (a name, a target, a listen address, whether it takes
    /// its log sources alone: [`Sink::exclusive_logs`]). Errors name the
    /// key relative to the sink (`database`); the caller places them.
    pub check: fn(&mut Sink) -> Result<(), ConfigError>,
    /// Starts a validated sink of this type.
    pub start: fn(&Sink, &mut Start<'_>) -> anyhow::Result<Running>,
    /// False when a reload leaves running sinks of this type as they are
    /// (a listener bound at start); changes apply at the next start.
    pub reloads: bool,
    /// Checks what a sink of this type needs of the host (the files it
    /// reads), apart from [`SinkType::check`], which stays a pure parse
    /// (docs/adr/0003): run by `sonde validate` and at every start. Errors
    /// name the key relative to the sink; the caller places them.
    pub host: Option<HostCheck>,
}

impl SinkType {
    /// The compression used when `compression` is not set.
    pub fn default_compression(&self) -> Option<&'static str> {
        self.compressions.first().copied()
    }
}

impl PartialEq for SinkType {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl fmt::Debug for SinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A sink, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Sink {
    /// Its type.
    pub kind: &'static SinkType,
    /// Its name in logs, on `/metrics` and for its disk buffer.
    pub name: String,
    /// The keys of its own ([`SinkType::keys`]) as written.
    pub options: toml::Table,
    /// Where it listens, if it does: checked against loopback and the
    /// agent's other listeners.
    pub listen: Option<SocketAddr>,
    /// A network sink's target, compression, batching and buffer.
    pub net: Option<NetSink>,
    /// What it takes, in the order of `inputs` (default `["metrics"]`),
    /// without duplicates.
    pub inputs: Vec<SinkInput>,
    /// True when a log source it takes must go to it alone (its type's
    /// `check` decides: a delivery that commits a source's offsets with
    /// its records cannot share the source). Default false.
    pub exclusive_logs: bool,
}

impl Sink {
    /// True when the flusher sends it metric windows.
    pub fn takes_metrics(&self) -> bool {
        self.inputs.contains(&SinkInput::Metrics)
    }

    /// True when the profiler sends it each period.
    pub fn takes_profiles(&self) -> bool {
        self.inputs.contains(&SinkInput::Profiles)
    }

    /// The names of the log sources it takes, in `inputs` order.
    pub fn log_sources(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().filter_map(|i| match i {
            SinkInput::Logs(name) => Some(name.as_str()),
            SinkInput::Metrics | SinkInput::Profiles => None,
        })
    }

    /// Its own keys ([`SinkType::keys`]) read into `T`: a struct with
    /// `#[serde(deny_unknown_fields)]` and a field per key, so a type's
    /// options are typed where they are read. An error names the key (and
    /// the index in a list, `brokers[1]`), which the registry places on
    /// its line, and its fix writes the key as `examples` show it.
    ///
    /// # Errors
    ///
    /// A key missing, of the wrong type, not one of its choices, or
    /// unknown.
    pub fn typed<T: serde::de::DeserializeOwned>(
        &self,
        examples: &[(&str, &str)],
    ) -> Result<T, ConfigError> {
        let value = toml::Value::Table(self.options.clone());
        serde_path_to_error::deserialize(value).map_err(|e| {
            let key = option_key(e.path());
            option_error(self.kind.name, key, &e.into_inner().to_string(), examples)
        })
    }

    /// The string value of one of its own keys.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).and_then(toml::Value::as_str)
    }
}

/// Where a network sink keeps requests not yet delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// In memory, at most this many bytes.
    Memory(u64),
    /// In `{agent.data_dir}/buffers/{name}`; an HTTP sink's log records
    /// in a buffer of their own below it ([`crate::net::LOG_BUFFER`]), of the same
    /// size.
    Disk {
        /// The sink's directory.
        dir: PathBuf,
        /// Most bytes.
        max_size: u64,
        /// `fdatasync` per request.
        sync: bool,
    },
}

/// A network sink's settings, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct NetSink {
    /// The URL (HTTP sinks) or `HOST:PORT` (TCP sinks).
    pub target: String,
    /// Extra HTTP headers from the config.
    pub headers: Vec<(String, String)>,
    /// The compression.
    pub compression: Compression,
    /// Batching, retries, shutdown.
    pub delivery: Delivery,
    /// Its buffer.
    pub buffer: Buffer,
}

/// The key a [`serde_path_to_error::Path`] names: `key`, `key[1]`,
/// `key.sub`.
fn option_key(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut key = String::new();
    for s in path.iter() {
        match s {
            Segment::Seq { index } => key.push_str(&format!("[{index}]")),
            Segment::Map { key: k } | Segment::Enum { variant: k } => {
                if !key.is_empty() {
                    key.push('.');
                }
                key.push_str(k);
            }
            Segment::Unknown => {}
        }
    }
    key
}

/// A serde error of a sink's own keys as a [`ConfigError`]: serde names
/// the field that is missing or unknown in its message, the path names
/// the one of the wrong type or value.
fn option_error(kind: &str, key: String, message: &str, examples: &[(&str, &str)]) -> ConfigError {
    // toml ends its messages with the key ("in `brokers`"), which the
    // error names on its own.
    let message = message.split("\nin `").next().unwrap_or(message).trim_end();
    let example = |k: &str| {
        let base = k.split(['[', '.']).next().unwrap_or(k);
        examples.iter().find(|(e, _)| *e == base).map(|(_, v)| *v)
    };
    // An entry of a list is written as the whole list's example shows.
    let write = |k: &str| match example(k) {
        Some(v) => match k.split_once('[') {
            Some((base, _)) => format!("write {base} = {v}"),
            None => format!("write {k} = {v}"),
        },
        None => format!("see the keys of {kind} in docs/SINKS.md"),
    };
    // A field of an inline table (`sasl.username`) is named with the
    // table, and the fix writes the whole table as its example shows.
    let within = |field: &str| {
        if key.is_empty() {
            field.to_string()
        } else if key.ends_with(&format!(".{field}")) || key == field {
            key.clone()
        } else {
            format!("{key}.{field}")
        }
    };
    if let Some(field) = quoted_after(message, "missing field `") {
        let full = within(&field);
        let fix = match (example(&full), full.split_once('.')) {
            (Some(v), None) => format!("add {full} = {v}"),
            (Some(v), Some((table, _))) => format!("write {table} = {v}"),
            (None, _) => format!("add `{full}`"),
        };
        return ConfigError::new(full.clone(), format!("{kind} needs `{full}`"), fix);
    }
    if let Some(field) = quoted_after(message, "unknown field `") {
        let full = within(&field);
        return ConfigError::new(
            full.clone(),
            format!("`{full}` is not a key of {kind}"),
            format!("remove `{full}`"),
        );
    }
    if let Some(value) = quoted_after(message, "unknown variant `") {
        let choices: Vec<String> = message
            .split_once("expected")
            .map(|(_, e)| {
                e.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(|c| format!("\"{c}\""))
                    .collect()
            })
            .unwrap_or_default();
        return ConfigError::new(
            key.clone(),
            format!("{value:?} is not a {key} of {kind}"),
            format!("write {key} = {}", choices.join(" or ")),
        );
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        let expected = rest.split_once(", expected ").map_or("", |(_, e)| e);
        let what = match expected {
            "a string" | "string only" => "a string".to_string(),
            "a boolean" => "true or false".to_string(),
            "a sequence" => "a list".to_string(),
            e => e.to_string(),
        };
        return ConfigError::new(key.clone(), format!("`{key}` is not {what}"), write(&key));
    }
    let (problem, fix) = sonde_config::error::split_fix(message);
    let problem = if problem.starts_with("is ") {
        format!("`{key}` {problem}")
    } else {
        format!("`{key}`: {problem}")
    };
    ConfigError::new(
        key.clone(),
        problem,
        fix.map_or_else(|| write(&key), str::to_string),
    )
}

/// A string option that must not be empty (a path, a database, a topic).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct NonEmpty(pub String);

impl TryFrom<String> for NonEmpty {
    type Error = &'static str;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s.is_empty() {
            Err("is empty")
        } else {
            Ok(NonEmpty(s))
        }
    }
}

impl std::ops::Deref for NonEmpty {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use crate::registry::parse;

    /// The key, line, problem and fix of the error `sink`'s keys make.
    fn error(sink: &str) -> (String, Option<usize>, String, String) {
        let e = parse(&format!("# a sink\n[[sinks]]\n{sink}")).unwrap_err();
        (e.key, e.line, e.problem, e.fix)
    }

    #[test]
    fn typed_options_name_the_key_its_line_and_what_to_write() {
        let kafka = "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\n";
        assert_eq!(
            error(kafka),
            (
                "sinks[0].topic".into(),
                Some(2),
                "kafka needs `topic`".into(),
                "add topic = \"logs\"".into()
            )
        );
        assert_eq!(
            error(&format!("{kafka}topic = \"t\"\nformat = \"xml\"\n")),
            (
                "sinks[0].format".into(),
                Some(6),
                "\"xml\" is not a format of kafka".into(),
                "write format = \"raw\" or \"json\"".into()
            )
        );
        assert_eq!(
            error("type = \"kafka\"\ntopic = \"t\"\nbrokers = [\"a:1\", 2]\n"),
            (
                "sinks[0].brokers[1]".into(),
                Some(5),
                "`brokers[1]` is not a string".into(),
                "write brokers = [\"127.0.0.1:9092\"]".into()
            )
        );
        let (key, line, problem, fix) = error("type = \"file\"\npath = \"\"\n");
        assert_eq!((key.as_str(), line), ("sinks[0].path", Some(4)));
        assert_eq!(problem, "`path` is empty");
        assert_eq!(fix, "write path = \"/var/log/sonde/metrics.jsonl\"");
        let (key, line, problem, _) = error("type = \"http\"\nurl = \"http://a/\"\nformat = 5\n");
        assert_eq!((key.as_str(), line), ("sinks[0].format", Some(5)));
        assert_eq!(problem, "`format` is not a string");
        let (key, _, problem, fix) =
            error("type = \"prometheus_exporter\"\nlisten = \"nowhere\"\n");
        assert_eq!(key, "sinks[0].listen");
        assert!(problem.contains("nowhere"), "{problem}");
        assert!(!fix.is_empty());
    }
}
