//! The configuration file: typed, validated, with errors that name the key,
//! its line and the fix ([`ConfigError`]).
//!
//! Parsing and validation are one pure step ([`parse`]) that returns a
//! [`Config`]; building the agent from it does the I/O and checks nothing
//! again. Each section has its module: [`agent`], [`receivers`],
//! [`logs`], [`histograms`], and the sinks theirs in `sonde_sinks`,
//! where each sink type's keys are described once. What ties sections
//! together (which sink takes which source) is checked here, in [`parse`].
//! What a config needs of the host it runs on (users, groups, writable
//! directories) is checked by [`check_host`], apart, so that [`parse`]
//! stays pure; [`load`] runs both, for `sonde validate` and `sonde run`.

pub mod histograms;
mod host;
pub mod logs;
pub mod profiler;
pub mod receivers;
#[cfg(test)]
mod test_sinks;

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use sonde_aggregate::AggregateConfig;
use sonde_log_sources::events::EVENTS_SOURCE;
use toml::Spanned;

pub use self::histograms::{HistogramOverride, HistogramSection};
pub use self::host::{admin_tls_error, check_host};
pub use self::logs::{LogSection, LogSource};
pub use self::profiler::{Profiler, ProfilerSection};
pub use self::receivers::{ProtocolName, Receiver, ReceiverSection};
pub(crate) use sonde_config::error::Source;
pub use sonde_config::{agent, error, units};
pub use sonde_config::{
    check_loopback, listen_fix, AdminAuth, AdminListen, AdminTls, AgentSection, ConfigError,
    DATA_DIR_FIX,
};
pub use sonde_config::{HostPort, HumanDuration, HumanSize, Listen, UnitError};
use sonde_sinks::registry::SinkType;
pub use sonde_sinks::registry::{Buffer, NetSink, Sink, SinkInput};

/// The configuration `sonde run` uses when no file is given.
pub const DEFAULT_CONFIG: &str = r#"# sonde's embedded defaults: what `sonde run` does without --config.
[agent]
interval = "30s"
admin_listen = "127.0.0.1:8686"

[[receivers]]
protocol = "msgpack"
listen = "udp://127.0.0.1:9123"

[[receivers]]
protocol = "msgpack"
listen = "unixgram:///tmp/metric.sock"

[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:8125"

[[sinks]]
type = "console"
"#;

/// The file as written. `[[sinks]]` tables stay tables here: which keys
/// one takes depends on its `type`, which `sonde_sinks` looks up.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agent: AgentSection,
    #[serde(default)]
    receivers: Vec<Spanned<ReceiverSection>>,
    #[serde(default)]
    logs: Vec<Spanned<LogSection>>,
    #[serde(default)]
    sinks: Vec<Spanned<toml::Table>>,
    #[serde(default)]
    histograms: HistogramSection,
    profiler: Option<ProfilerSection>,
}

/// A validated configuration.
#[derive(Debug)]
pub struct Config {
    /// `[agent]`.
    pub agent: AgentSection,
    /// Receivers, in file order.
    pub receivers: Vec<Receiver>,
    /// Log sources, in file order.
    pub logs: Vec<LogSource>,
    /// Sinks, in file order.
    pub sinks: Vec<Sink>,
    /// What the aggregator needs.
    pub aggregate: AggregateConfig,
    /// The host profiler, when `[profiler]` turns it on.
    pub profiler: Option<Profiler>,
    /// The file's text, to place errors found later ([`Config::error`]).
    text: String,
}

impl Config {
    /// An error about `key` (a path like `receivers[0].listen`), at the
    /// line that sets it when the file does: for problems found after
    /// [`parse`], by [`check_host`] or when the agent starts.
    pub fn error(
        &self,
        key: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        let key = key.into();
        let src = Source { text: &self.text };
        src.at(src.line_of_key(&key), ConfigError::new(key, problem, fix))
    }

    /// [`Config::error`] at the line of `span` (a `Spanned` value's),
    /// for keys [`Config::error`] cannot find by their path, such as
    /// those of an inline table.
    pub(crate) fn error_at(
        &self,
        span: std::ops::Range<usize>,
        key: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        Source { text: &self.text }.error(span, key, problem, fix)
    }
}

/// [`parse`], then [`check_host`]: what `sonde validate` checks and what
/// `sonde run` loads.
///
/// # Errors
///
/// The first problem either finds.
pub fn load(text: &str) -> Result<Config, ConfigError> {
    let config = parse(text)?;
    check_host(&config)?;
    Ok(config)
}

/// Parses and validates a configuration file's text.
///
/// # Errors
///
/// The first problem found, as a [`ConfigError`] naming the key, its line
/// and the fix: TOML syntax, unknown keys, bad durations or addresses,
/// duplicate listen addresses, a protocol on a transport it cannot use, a
/// sink type or key the registry does not know, no receivers and no log
/// sources, receivers and no sinks, bad log source names or globs, sinks'
/// `inputs` that name nothing or a source their type does not take, a
/// source no sink takes, bad histogram bounds.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    parse_with(text, sonde_sinks::registry::REGISTRY)
}

/// [`parse`] with the sink types of `registry`.
fn parse_with(text: &str, registry: &[&'static SinkType]) -> Result<Config, ConfigError> {
    let src = Source { text };
    let file: File = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    let agent = file.agent;
    let max_key_bytes = agent::check(src, &agent)?;
    let profiler = profiler::check(src, file.profiler.as_ref())?;
    if file.receivers.is_empty() && file.logs.is_empty() && profiler.is_none() {
        return Err(receivers::none());
    }
    if file.sinks.is_empty() && !file.receivers.is_empty() {
        return Err(sonde_sinks::registry::none());
    }
    let receivers = receivers::check(src, &file.receivers, agent.allow_non_loopback)?;
    if let Some(a) = agent.admin() {
        check_loopback(agent.allow_non_loopback, a).map_err(|e| {
            src.at(
                src.line(&agent.admin_listen.span()),
                ConfigError {
                    key: "agent.admin_listen".into(),
                    ..e
                },
            )
        })?;
        // Other hosts reaching the admin site would read whole-host
        // profiles: not without the token, and not over plain HTTP, where
        // anyone on the path reads the token and the data.
        let token = agent.admin_auth == AdminAuth::Token;
        let tls = agent.admin_tls.is_some();
        if !(sonde_config::is_loopback(a.ip()) || (token && tls)) {
            let (missing, fix) = match (token, tls) {
                (false, false) => (
                    "agent.admin_auth is \"none\" and agent.admin_tls is not set: they would read every process's profile, over plain HTTP",
                    "set admin_auth = \"token\" and admin_tls = { cert_file = \"...\", key_file = \"...\" } in [agent] (docs/DEPLOY.md), or listen on 127.0.0.1",
                ),
                (false, true) => (
                    "agent.admin_auth is \"none\": they would read every process's profile",
                    "set admin_auth = \"token\" in [agent] (docs/SECURITY.md), or listen on 127.0.0.1",
                ),
                _ => (
                    "agent.admin_tls is not set: the token and every answer would cross the network in plain HTTP",
                    "set admin_tls = { cert_file = \"...\", key_file = \"...\" } in [agent] (docs/DEPLOY.md), or listen on 127.0.0.1",
                ),
            };
            return Err(src.error(
                agent.admin_listen.span(),
                "agent.admin_listen",
                format!("{a} is reachable from other hosts, and {missing}"),
                fix,
            ));
        }
    }
    let receiver_files: Vec<Option<&std::path::Path>> = receivers
        .iter()
        .map(|r| r.listen.unix_path().map(std::path::PathBuf::as_path))
        .collect();
    agent::check_admin_socket(src, &agent, &receiver_files)?;
    let logs = logs::check(src, &file.logs)?;
    let sinks = sonde_sinks::registry::check(src, registry, &file.sinks, &agent)?;
    let tables = Tables {
        logs: &file.logs,
        sinks: &file.sinks,
        receivers: &file.receivers,
    };
    routes(src, registry, tables, &logs, &sinks)?;
    let histograms = histograms::check(src, &file.histograms)?;
    let aggregate = AggregateConfig {
        interval: agent.interval.get_ref().0,
        expire_windows: *agent.expire_windows.get_ref(),
        histograms,
        max_series: *agent.max_series.get_ref(),
        max_series_per_metric: agent.max_series_per_metric.as_ref().map(|m| *m.get_ref()),
        max_key_bytes,
        ..AggregateConfig::default()
    };
    Ok(Config {
        agent,
        receivers,
        logs,
        sinks,
        aggregate,
        profiler,
        text: text.to_string(),
    })
}

/// [`parse`] with sink types that take log lines besides the registry's,
/// for tests.
#[cfg(test)]
pub(crate) fn parse_with_log_sinks(text: &str) -> Result<Config, ConfigError> {
    parse_with(text, &test_sinks::registry())
}

/// The tables [`routes`] places its errors in.
#[derive(Clone, Copy)]
struct Tables<'a> {
    logs: &'a [Spanned<LogSection>],
    sinks: &'a [Spanned<toml::Table>],
    receivers: &'a [Spanned<ReceiverSection>],
}

/// Checks what the sinks' `inputs` name against the sources and the sink
/// types: every name is `metrics` or a source, every sink's type accepts
/// what it takes, every source goes somewhere, a source that must go to
/// one sink alone ([`Sink::exclusive_logs`]) does, and the windows of
/// receivers reach a sink.
fn routes(
    src: Source<'_>,
    registry: &[&'static SinkType],
    file: Tables<'_>,
    logs: &[LogSource],
    sinks: &[Sink],
) -> Result<(), ConfigError> {
    use sonde_sinks::registry::{accepting, place, Input};
    // Errors about an entry of `inputs` are at its line, or at the sink's
    // table when `inputs` is left out (the default).
    let at = |i: usize, key: String, problem: String, fix: String| {
        place(
            src,
            i,
            &file.sinks[i].span(),
            ConfigError::new(key, problem, fix),
        )
    };
    let entry = |i: usize, j: usize| {
        if file.sinks[i].get_ref().contains_key("inputs") {
            format!("inputs[{j}]")
        } else {
            "inputs".into()
        }
    };
    let source_names = || {
        logs.iter()
            .map(|l| format!("\"{}\"", l.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut known: HashSet<&str> = logs.iter().map(|l| l.name.as_str()).collect();
    let statsd = file
        .receivers
        .iter()
        .any(|r| r.get_ref().protocol == receivers::ProtocolName::Statsd);
    if statsd {
        known.insert(EVENTS_SOURCE);
    }
    // Which sink took each source first, to refuse sharing an exclusive one.
    let mut taken: HashMap<&str, usize> = HashMap::new();
    for (i, sink) in sinks.iter().enumerate() {
        for (j, input) in sink.inputs.iter().enumerate() {
            if let SinkInput::Logs(name) = input {
                if name == EVENTS_SOURCE && !statsd {
                    return Err(at(
                        i,
                        entry(i, j),
                        format!("{name:?} takes the DogStatsD events of statsd receivers, and there is none"),
                        "add a [[receivers]] with protocol = \"statsd\", or remove it from `inputs`".into(),
                    ));
                }
                if name == EVENTS_SOURCE && sink.exclusive_logs {
                    return Err(at(
                        i,
                        entry(i, j),
                        format!("{} sinks that deliver exactly once cannot take {name:?}: events come without offsets to store with them", sink.kind.name),
                        "send the events to a sink that delivers at least once".into(),
                    ));
                }
                if !known.contains(name.as_str()) {
                    let fix = if logs.is_empty() {
                        "write \"metrics\", or add a [[logs]] source of this name".to_string()
                    } else {
                        format!("write \"metrics\" or one of {}", source_names())
                    };
                    return Err(at(
                        i,
                        entry(i, j),
                        format!("{name:?} is neither \"metrics\" nor a [[logs]] source"),
                        fix,
                    ));
                }
            }
            let kind = input.kind();
            if !sink.kind.accepts.contains(&kind) {
                let (what, fix) = match kind {
                    Input::Logs => (
                        format!("log source \"{input}\""),
                        format!(
                            "send it to a sink of a type that takes log lines ({}), or remove it from `inputs`",
                            accepting(registry, Input::Logs)
                        ),
                    ),
                    Input::Metrics => (
                        "metric windows".to_string(),
                        format!(
                            "list the log sources it takes, like inputs = [\"app\"]; metrics go to {}",
                            accepting(registry, Input::Metrics)
                        ),
                    ),
                };
                return Err(at(
                    i,
                    entry(i, j),
                    format!("{} sinks do not take {what}", sink.kind.name),
                    fix,
                ));
            }
            if let SinkInput::Logs(name) = input {
                if let Some(k) = taken.get(name.as_str()).copied() {
                    let other = &sinks[k];
                    if sink.exclusive_logs || other.exclusive_logs {
                        let alone = if sink.exclusive_logs { i } else { k };
                        return Err(at(
                            i,
                            entry(i, j),
                            format!(
                                "source {name:?} is taken by sinks[{k}] and sinks[{i}], and sinks[{alone}] ({}) must take it alone",
                                sinks[alone].name
                            ),
                            "send the source to one of them only, or define a second [[logs]] source for the other".into(),
                        ));
                    }
                } else {
                    taken.insert(name, i);
                }
            }
        }
    }
    for (i, l) in file.logs.iter().enumerate() {
        let name = l.get_ref().name.get_ref();
        if !taken.contains_key(name.as_str()) {
            return Err(src.error(
                l.get_ref().name.span(),
                format!("logs[{i}].name"),
                format!("no sink takes source {name:?}: its lines would go nowhere"),
                format!(
                    "add \"{name}\" to the `inputs` of a sink of a type that takes log lines ({})",
                    accepting(registry, Input::Logs)
                ),
            ));
        }
    }
    if let Some(r) = file.receivers.first() {
        if !sinks.iter().any(Sink::takes_metrics) {
            return Err(src.error(
                r.span(),
                "receivers[0]",
                "no sink's `inputs` has \"metrics\": the windows of the receivers would go nowhere",
                "add \"metrics\" to the `inputs` of a sink, or remove the [[receivers]]",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use sonde_encode::compress::Compression;
    use sonde_runtime::socket::SocketOptions;
    use sonde_sinks::sender::Delivery;

    use super::*;

    fn err(text: &str) -> ConfigError {
        match parse(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e,
        }
    }

    /// The key and the line of the error `text` gives.
    fn at(text: &str) -> (String, Option<usize>) {
        let e = err(text);
        (e.key, e.line)
    }

    fn key(k: &str, line: usize) -> (String, Option<usize>) {
        (k.to_string(), Some(line))
    }

    /// Five lines: a receiver and a console sink.
    const MIN: &str = "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"console\"\n";

    fn net(extra: &str) -> (Sink, NetSink) {
        let c = parse(&format!("{MIN}[[sinks]]\n{extra}")).unwrap();
        let s = c.sinks.into_iter().nth(1).unwrap();
        let n = s.net.clone().unwrap();
        (s, n)
    }

    #[test]
    fn a_hostname_is_one_word_of_1_to_253_characters() {
        let c = parse(&format!("[agent]\nhostname = \"web-1\"\n{MIN}")).unwrap();
        assert_eq!(
            c.agent.hostname.as_ref().map(|h| h.get_ref().as_str()),
            Some("web-1")
        );
        assert!(parse(MIN).unwrap().agent.hostname.is_none());
        for bad in ["\"\"", "\"web 1\"", "\"a\\tb\""] {
            assert_eq!(
                at(&format!("[agent]\nhostname = {bad}\n{MIN}")),
                key("agent.hostname", 2),
                "{bad}"
            );
        }
    }

    #[test]
    fn network_sinks_default_to_what_their_backend_accepts() {
        let (s, rw) = net(
            "type = \"prometheus_remote_write\"\nurl = \"http://127.0.0.1:9090/api/v1/write\"\n",
        );
        assert_eq!(
            (s.name.as_str(), rw.compression),
            ("prometheus_remote_write", Compression::Snappy)
        );
        assert_eq!(rw.buffer, Buffer::Memory(64 << 20));
        assert_eq!(rw.delivery, Delivery::default());
        let (_, influx) =
            net("type = \"influxdb\"\nurl = \"http://127.0.0.1:8086/\"\ndatabase = \"my db\"\n");
        assert_eq!(
            influx.target,
            "http://127.0.0.1:8086/write?db=my%20db&precision=s"
        );
        assert_eq!(influx.compression, Compression::Gzip { level: 1 });
        let (s, http) = net("type = \"http\"\nurl = \"https://example.com/in\"\nformat = \"msgpack\"\ncompression_level = 3\n");
        assert_eq!(s.option("format"), Some("msgpack"));
        assert_eq!(http.compression, Compression::Zstd { level: 3 });
        let (_, tcp) = net("type = \"tcp\"\naddress = \"localhost:9000\"\nmax_batch_points = 5\nmax_batch_age = \"0s\"\nbuffer = { type = \"disk\", max_size = \"2GiB\" }\n");
        assert_eq!(
            (tcp.compression, tcp.delivery.max_batch_points),
            (Compression::None, 5)
        );
        assert_eq!(tcp.delivery.max_batch_age, Duration::ZERO);
        assert_eq!(
            tcp.buffer,
            Buffer::Disk {
                dir: PathBuf::from("/var/lib/sonde/buffers/tcp"),
                max_size: 2 << 30,
                sync: true
            }
        );
        let (g, _) =
            net("type = \"graphite\"\naddress = \"127.0.0.1:2003\"\nname = \"carbon-a\"\n");
        assert_eq!((g.name.as_str(), g.kind.name), ("carbon-a", "graphite"));
    }

    #[test]
    fn every_sink_type_takes_a_name_and_no_two_sinks_share_one() {
        for (ty, own) in [
            ("console", ""),
            ("file", "path = \"/tmp/points.jsonl\"\n"),
            ("prometheus_exporter", "listen = \"127.0.0.1:9102\"\n"),
            ("blackhole", ""),
            ("tcp", "address = \"127.0.0.1:9000\"\n"),
        ] {
            let c = parse(&format!(
                "{MIN}[[sinks]]\ntype = \"{ty}\"\n{own}name = \"mine\"\n"
            ))
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert_eq!(c.sinks[1].name, "mine", "{ty}");
        }
        assert_eq!(
            parse(&format!(
                "{MIN}[[sinks]]\ntype = \"file\"\npath = \"/tmp/p\"\n"
            ))
            .unwrap()
            .sinks[1]
                .name,
            "file:/tmp/p"
        );
        // Two consoles would label their series alike on /metrics.
        let e = err(&format!("{MIN}[[sinks]]\ntype = \"console\"\n"));
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].name", Some(6)));
        assert!(e.problem.contains("sinks[0]"), "{e}");
        parse(&format!(
            "{MIN}[[sinks]]\ntype = \"console\"\nname = \"second\"\n"
        ))
        .unwrap();
        assert_eq!(
            at(&format!(
                "{MIN}[[sinks]]\ntype = \"file\"\npath = \"a\"\nname = \"\"\n"
            )),
            key("sinks[1].name", 9)
        );
    }

    #[test]
    fn network_sink_mistakes_name_the_key_and_the_line() {
        // The sink's table starts on line 6, its `type` is on line 7.
        let e = |extra: &str| at(&format!("{MIN}[[sinks]]\n{extra}"));
        let rw = err(&format!(
            "{MIN}[[sinks]]\ntype = \"prometheus_remote_write\"\nurl = \"http://a:1/\"\ncompression = \"zstd\"\n"
        ));
        assert_eq!(
            (rw.key.as_str(), rw.line),
            ("sinks[1].compression", Some(9))
        );
        assert!(rw.fix.contains("\"snappy\""), "{rw}");
        assert_eq!(
            e("type = \"influxdb\"\nurl = \"http://a:1\"\n"),
            key("sinks[1].database", 6)
        );
        let g = err(&format!(
            "{MIN}[[sinks]]\ntype = \"graphite\"\nurl = \"http://a:1\"\n"
        ));
        assert_eq!((g.key.as_str(), g.line), ("sinks[1].url", Some(8)));
        assert!(g.fix.contains("address = "), "{g}");
        let h = err(&format!(
            "{MIN}[[sinks]]\ntype = \"http\"\naddress = \"a:1\"\n"
        ));
        assert_eq!((h.key.as_str(), h.line), ("sinks[1].address", Some(8)));
        assert!(h.fix.contains("url = "), "{h}");
        assert_eq!(
            e("type = \"http\"\nurl = \"ftp://a\"\n"),
            key("sinks[1].url", 8)
        );
        assert_eq!(
            e("type = \"tcp\"\naddress = \"nowhere\"\n"),
            key("sinks[1].address", 8)
        );
        assert_eq!(
            e("type = \"http\"\nurl = \"http://a:1\"\ncompression_level = 40\n"),
            key("sinks[1].compression_level", 9)
        );
        assert_eq!(
            e("type = \"http\"\nurl = \"http://a:1\"\nbuffer = { type = \"tape\" }\n"),
            key("sinks[1].buffer.type", 9)
        );
        assert_eq!(
            e("type = \"http\"\nurl = \"http://a:1\"\nheaders = { \"Content-Type\" = \"x\" }\n"),
            key("sinks[1].headers", 9)
        );
        assert_eq!(
            e("type = \"http\"\nurl = \"http://a:1\"\nbatch_size = 1\n"),
            key("sinks[1].batch_size", 9)
        );
        assert_eq!(
            e("type = \"graphite\"\naddress = \"a:1\"\nheaders = { A = \"b\" }\n"),
            key("sinks[1].headers", 9)
        );
        assert_eq!(
            e("type = \"http\"\nurl = \"http://a:1\"\nformat = \"xml\"\n"),
            key("sinks[1].format", 9)
        );
        assert_eq!(
            e("type = \"tcp\"\naddress = \"a:1\"\nmax_batch_age = \"1 sec\"\n"),
            key("sinks[1].max_batch_age", 9)
        );
        let two = "type = \"http\"\nurl = \"http://a:1\"\n[[sinks]]\ntype = \"http\"\nurl = \"http://b:1\"\n";
        let e2 = err(&format!("{MIN}[[sinks]]\n{two}"));
        assert_eq!((e2.key.as_str(), e2.line), ("sinks[2].name", Some(9)));
        assert!(e2.problem.contains("sinks[1]"), "{e2}");
    }

    #[test]
    fn the_embedded_defaults_parse() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.receivers.len(), 3);
        assert_eq!(c.aggregate.interval, Duration::from_secs(30));
        assert_eq!(c.sinks.len(), 1);
        assert_eq!(c.sinks[0].kind.name, "console");
    }

    #[test]
    fn unknown_keys_name_the_key_and_line() {
        let e = err(&format!(
            "{MIN}[agent]\ninterval = \"10s\"\nintervall = \"5s\"\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("agent.intervall", Some(8)));
        assert_eq!(e.line_text.as_deref(), Some("intervall = \"5s\""));
        assert_eq!(at(&format!("{MIN}path = \"x\"\n")), key("sinks[0].path", 6));
    }

    #[test]
    fn bad_durations_name_the_line_and_the_fix() {
        let e = err(&format!("[agent]\ninterval = \"10 sec\"\n{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.interval", Some(2)));
        assert!(e.problem.contains("\"10 sec\""), "{e}");
        assert!(e.fix.contains("\"10s\""), "{e}");
    }

    #[test]
    fn an_interval_out_of_range_names_its_line() {
        let e = err(&format!("[agent]\n\ninterval = \"10ms\"\n{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.interval", Some(3)));
        assert!(e.fix.contains("\"100ms\""), "{e}");
        assert_eq!(
            at(&format!("[agent]\nexpire_windows = 0\n{MIN}")),
            key("agent.expire_windows", 2)
        );
    }

    #[test]
    fn errors_print_the_line_the_key_the_problem_and_the_fix() {
        let e = err(&format!("[agent]\ninterval = \"10ms\"\n{MIN}"));
        assert_eq!(
            e.to_string(),
            format!(
                "line 2: agent.interval: {}\n    | interval = \"10ms\"\n    fix: {}",
                e.problem, e.fix
            )
        );
        // No line; a fix of several lines stays indented under the message.
        let e = err("[[sinks]]\ntype = \"console\"\n");
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!("receivers: {}\n    fix: add one", e.problem)),
            "{shown}"
        );
        assert!(
            shown.lines().skip(1).all(|l| l.starts_with("    ")),
            "{shown}"
        );
    }

    #[test]
    fn bad_addresses_name_the_line() {
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp:/127.0.0.1\"\n[[sinks]]\ntype = \"console\"\n");
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(3)));
        assert!(e.problem.contains("unknown scheme"), "{e}");
    }

    #[test]
    fn duplicate_listen_addresses_name_both_lines() {
        let e = err(&format!(
            "{MIN}[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:8125\"\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("receivers[1].listen", Some(8)));
        assert!(e.problem.contains("line 3"), "{e}");
    }

    #[test]
    fn msgpack_over_a_stream_is_refused() {
        let e = err("[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"tcp://127.0.0.1:9000\"\n[[sinks]]\ntype = \"console\"\n");
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(3)));
        assert!(e.problem.contains("msgpack"), "{e}");
    }

    #[test]
    fn unknown_sink_types_list_the_registry_and_unknown_keys_are_errors() {
        let e = err(&format!("{MIN}[[sinks]]\ntype = \"nats\"\n"));
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].type", Some(7)));
        assert!(e.problem.contains("nats"), "{e}");
        for t in sonde_sinks::registry::REGISTRY {
            assert!(e.fix.contains(&format!("\"{}\"", t.name)), "{e}");
        }
        assert_eq!(
            at(&format!("{MIN}[[sinks]]\nname = \"x\"\n")),
            key("sinks[1]", 6)
        );
        let e = err(&format!(
            "{MIN}[[sinks]]\ntype = \"file\"\npath = \"a\"\nmode = 1\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].mode", Some(9)));
        assert!(e.fix.contains("`path`"), "{e}");
        assert_eq!(
            at(&format!("{MIN}[[sinks]]\ntype = \"file\"\n")),
            key("sinks[1].path", 6)
        );
    }

    #[test]
    fn histogram_bounds_must_increase() {
        let e = err(&format!("{MIN}[histograms]\nbuckets = [1, 5, 2]\n"));
        assert_eq!((e.key.as_str(), e.line), ("histograms.buckets", Some(7)));
        assert!(e.problem.contains("increasing"), "{e}");
        assert_eq!(
            at(&format!(
                "{MIN}[[histograms.overrides]]\nprefix = \"a\"\nbuckets = []\n"
            )),
            key("histograms.overrides[0].buckets", 8)
        );
        let c = parse(&format!(
            "{MIN}[histograms]\nbuckets = [1, 2]\n[[histograms.overrides]]\nprefix = \"web.\"\nbuckets = [10]\n"
        ))
        .unwrap();
        assert_eq!(&*c.aggregate.histograms.for_name(b"web.x").values, &[10.0]);
        assert_eq!(
            &*c.aggregate.histograms.for_name(b"db.x").values,
            &[1.0, 2.0]
        );
    }

    #[test]
    fn series_limits_default_to_250k_and_no_per_metric_limit() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.aggregate.max_series, 250_000);
        assert_eq!(c.aggregate.max_series_per_metric, None);
        let c = parse(&format!(
            "[agent]\nmax_series = 10\nmax_series_per_metric = 3\n{MIN}"
        ))
        .unwrap();
        assert_eq!(c.aggregate.max_series, 10);
        assert_eq!(c.aggregate.max_series_per_metric, Some(3));
        assert_eq!(
            at(&format!("[agent]\nmax_series = 0\n{MIN}")),
            key("agent.max_series", 2)
        );
        assert_eq!(
            at(&format!("[agent]\n\nmax_series_per_metric = 0\n{MIN}")),
            key("agent.max_series_per_metric", 3)
        );
        assert_eq!(
            at(&format!("[agent]\nmax_series = -1\n{MIN}")),
            key("agent.max_series", 2)
        );
        assert_eq!(parse(MIN).unwrap().aggregate.max_key_bytes, 4096);
        let c = parse(&format!("[agent]\nmax_key_size = \"1KiB\"\n{MIN}")).unwrap();
        assert_eq!(c.aggregate.max_key_bytes, 1024);
        assert_eq!(
            at(&format!("[agent]\nmax_key_size = \"1MiB\"\n{MIN}")),
            key("agent.max_key_size", 2)
        );
        assert_eq!(
            at(&format!("[agent]\nbackground_nice = 20\n{MIN}")),
            key("agent.background_nice", 2)
        );
    }

    #[test]
    fn an_admin_site_other_hosts_reach_needs_the_token_and_tls() {
        let open = "[agent]\nallow_non_loopback = true\nadmin_listen = \"0.0.0.0:8686\"\n";
        let token = "admin_auth = \"token\"\n";
        let tls = "admin_tls = { cert_file = \"/etc/sonde/admin.crt\", key_file = \"/etc/sonde/admin.key\" }\n";
        let e = err(&format!("{open}{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(3)));
        assert!(
            e.problem
                .contains("admin_auth is \"none\" and agent.admin_tls is not set"),
            "{e}"
        );
        assert!(
            e.fix.contains("admin_auth = \"token\" and admin_tls = {"),
            "{e}"
        );
        // The token alone: it would cross the network in the clear.
        let e = err(&format!("{open}{token}{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(3)));
        assert!(e.problem.contains("agent.admin_tls is not set"), "{e}");
        assert!(!e.problem.contains("admin_auth"), "{e}");
        assert!(e.fix.starts_with("set admin_tls = {"), "{e}");
        // TLS alone: anyone who reaches it reads it.
        let e = err(&format!("{open}{tls}{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(3)));
        assert!(e.problem.contains("agent.admin_auth is \"none\""), "{e}");
        assert!(e.fix.starts_with("set admin_auth = \"token\""), "{e}");
        parse(&format!("{open}{token}{tls}{MIN}")).unwrap();
        // Loopback needs neither.
        parse(&format!(
            "[agent]\nadmin_listen = \"127.0.0.1:8686\"\n{MIN}"
        ))
        .unwrap();
    }

    #[test]
    fn a_unix_admin_listen_takes_a_mode_and_a_group_and_no_tls() {
        let unix = "[agent]\nadmin_listen = \"unix:///run/sonde/admin.sock\"\n";
        let c = parse(&format!("{unix}{MIN}")).unwrap();
        assert_eq!(
            c.agent.admin_socket(),
            Some(std::path::Path::new("/run/sonde/admin.sock"))
        );
        assert_eq!(c.agent.admin(), None);
        assert_eq!(c.agent.admin_socket_mode(), 0o660);
        let c = parse(&format!(
            "{unix}admin_socket_mode = \"0600\"\nadmin_socket_group = \"sonde\"\nadmin_auth = \"token\"\n{MIN}"
        ))
        .unwrap();
        assert_eq!(c.agent.admin_socket_mode(), 0o600);
        assert_eq!(c.agent.admin_auth, AdminAuth::Token);

        let e = err(&format!("{unix}admin_socket_mode = \"0999\"\n{MIN}"));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_socket_mode", Some(3))
        );
        assert!(e.fix.contains("\"0660\""), "{e}");
        // TLS on a socket file: refused at admin_tls, in either form.
        let tls = "admin_tls = { cert_file = \"/etc/sonde/admin.crt\", key_file = \"/etc/sonde/admin.key\" }\n";
        let e = err(&format!("{unix}admin_auth = \"token\"\n{tls}{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_tls", Some(4)));
        assert!(
            e.problem
                .starts_with("TLS on the socket file /run/sonde/admin.sock:"),
            "{e}"
        );
        assert!(e.fix.starts_with("remove admin_tls"), "{e}");
        let e = err(&format!(
            "{MIN}{unix}[agent.admin_tls]\ncert_file = \"a.crt\"\nkey_file = \"a.key\"\n"
        ));
        assert_eq!(e.key, "agent.admin_tls");
        assert_eq!(e.line, Some(9));
        // The mode and group of a socket that is not there.
        for key in [
            "admin_socket_mode = \"0660\"",
            "admin_socket_group = \"sonde\"",
        ] {
            let e = err(&format!("[agent]\n{key}\n{MIN}"));
            let field = key.split(' ').next().unwrap();
            assert_eq!(
                (e.key.as_str(), e.line),
                (format!("agent.{field}").as_str(), Some(2))
            );
            assert!(e.fix.contains("unix:///run/sonde/admin.sock"), "{e}");
        }
        // One file, one listener.
        let e = err(&format!(
            "{unix}[[receivers]]\nprotocol = \"statsd\"\nlisten = \"unix:///run/sonde/admin.sock\"\n{MIN}"
        ));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(2)));
        assert!(e.problem.contains("is also receivers[0].listen"), "{e}");
        // Only unix:// of the receivers' schemes, and an absolute path.
        for (addr, says) in [
            ("udp://127.0.0.1:8686", "udp:// is not an admin address"),
            (
                "unixgram:///run/a.sock",
                "unixgram:// is not an admin address",
            ),
            ("unix://run/a.sock", "needs an absolute path"),
        ] {
            let e = err(&format!("[agent]\nadmin_listen = \"{addr}\"\n{MIN}"));
            assert_eq!(
                (e.key.as_str(), e.line),
                ("agent.admin_listen", Some(2)),
                "{addr}"
            );
            assert!(e.to_string().contains(says), "{addr}: {e}");
        }
    }

    #[test]
    fn admin_tls_takes_its_files_in_either_form_of_table_and_no_other_key() {
        let tls = "admin_tls = { cert_file = \"/etc/sonde/admin.crt\", key_file = \"/etc/sonde/admin.key\" }\n";
        let c = parse(&format!("[agent]\n{tls}{MIN}")).unwrap();
        let t = c.agent.admin_tls.as_ref().unwrap();
        assert_eq!(
            t.cert_file.get_ref(),
            &PathBuf::from("/etc/sonde/admin.crt")
        );
        assert!(t.ca_file.is_none());
        assert_eq!(c.agent.admin_scheme(), "https");
        let c = parse(&format!(
            "{MIN}[agent.admin_tls]\ncert_file = \"a.crt\"\nkey_file = \"a.key\"\nca_file = \"ca.pem\"\n"
        ))
        .unwrap();
        let t = c.agent.admin_tls.as_ref().unwrap();
        assert_eq!(
            t.ca_file.as_ref().unwrap().get_ref(),
            &PathBuf::from("ca.pem")
        );
        assert_eq!(parse(MIN).unwrap().agent.admin_scheme(), "http");
        let e = err(&format!(
            "[agent]\nadmin_tls = {{ cert_file = \"a\", key_file = \"b\", key_pass = \"c\" }}\n{MIN}"
        ));
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.problem.contains("unknown field `key_pass`"), "{e}");
        let e = err(&format!(
            "[agent]\nadmin_tls = {{ cert_file = \"a\" }}\n{MIN}"
        ));
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.problem.contains("missing field `key_file`"), "{e}");
    }

    #[test]
    fn listening_beyond_loopback_needs_allow_non_loopback() {
        let recv = |addr: &str| {
            format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"{addr}\"\n[[sinks]]\ntype = \"console\"\n")
        };
        for addr in [
            "udp://0.0.0.0:8125",
            "tcp://[::]:8125",
            "udp://10.1.2.3:8125",
        ] {
            let e = err(&recv(addr));
            assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(3)));
            assert!(e.fix.contains("allow_non_loopback = true"), "{e}");
            parse(&format!(
                "[agent]\nallow_non_loopback = true\n{}",
                recv(addr)
            ))
            .unwrap();
        }
        for addr in [
            "udp://127.0.0.1:8125",
            "udp://127.1.2.3:8125",
            "udp://[::1]:8125",
            "udp://[::ffff:127.0.0.1]:8125",
            "udp://localhost:8125",
            "unixgram:///tmp/x.sock",
        ] {
            parse(&recv(addr)).unwrap_or_else(|e| panic!("{addr}: {e}"));
        }
        let e = err(&format!("[agent]\nadmin_listen = \"0.0.0.0:8686\"\n{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(2)));
        assert!(e.fix.contains("allow_non_loopback"), "{e}");
        assert_eq!(
            at(&format!(
                "{MIN}[[sinks]]\ntype = \"prometheus_exporter\"\nlisten = \"0.0.0.0:9102\"\n"
            )),
            key("sinks[1].listen", 8)
        );
        // A sink's listener may not take the admin listener's address.
        assert_eq!(
            at(&format!(
                "{MIN}[[sinks]]\ntype = \"prometheus_exporter\"\nlisten = \"127.0.0.1:8686\"\n"
            )),
            key("sinks[1].listen", 8)
        );
        // The embedded defaults listen on loopback only.
        assert_eq!(
            parse(DEFAULT_CONFIG).unwrap().agent.admin(),
            Some(([127, 0, 0, 1], 8686).into())
        );
    }

    #[test]
    fn unix_socket_files_take_a_mode_owner_and_group() {
        let unix = "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram:///tmp/m.sock\"\n";
        let c = parse(&format!("{unix}[[sinks]]\ntype = \"console\"\n")).unwrap();
        assert_eq!(c.receivers[0].options.mode, 0o666);
        let c = parse(&format!(
            "{unix}mode = \"0660\"\nowner = \"nobody\"\ngroup = \"0\"\n[[sinks]]\ntype = \"console\"\n"
        ))
        .unwrap();
        assert_eq!(c.receivers[0].options.mode, 0o660);
        assert_eq!(c.receivers[0].owner.as_deref(), Some("nobody"));
        assert_eq!(c.receivers[0].group.as_deref(), Some("0"));
        for bad in ["\"660x\"", "\"1777\"", "\"\"", "\"rw-rw----\""] {
            assert_eq!(
                at(&format!(
                    "{unix}mode = {bad}\n[[sinks]]\ntype = \"console\"\n"
                )),
                key("receivers[0].mode", 4),
                "{bad}"
            );
        }
        let e = err(&MIN.replace(
            "listen = \"udp://127.0.0.1:8125\"\n",
            "listen = \"udp://127.0.0.1:8125\"\nmode = \"0600\"\n",
        ));
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].mode", Some(4)));
        assert!(e.problem.contains("unix socket files only"), "{e}");
    }

    #[test]
    fn an_empty_admin_listen_turns_it_off() {
        let c = parse(&format!("[agent]\nadmin_listen = \"\"\n{MIN}")).unwrap();
        assert!(c.agent.admin().is_none());
    }

    #[test]
    fn no_receivers_or_no_sinks_is_an_error() {
        let e = err("[[sinks]]\ntype = \"console\"\n");
        assert_eq!((e.key.as_str(), e.line), ("receivers", None));
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:1\"\n");
        assert_eq!((e.key.as_str(), e.line), ("sinks", None));
    }

    #[test]
    fn toml_syntax_errors_name_the_line() {
        let e = err(&format!("{MIN}[agent\n"));
        assert_eq!(e.line, Some(6), "{e}");
        let e = err(&format!("[agent]\ninterval = 30s\n{MIN}"));
        assert_eq!((e.key.as_str(), e.line), ("agent.interval", Some(2)));
        let e = err("[[receivers]]\nprotocol = \"statsd\"\n[[sinks]]\ntype = \"console\"\n");
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(1)));
        assert!(e.fix.contains("`listen`"), "{e}");
    }

    #[test]
    fn the_packaged_config_and_each_example_in_it_are_valid() {
        let shipped = include_str!("../../../../packaging/sonde.toml");
        let c = parse(shipped).unwrap();
        // The embedded defaults, the unixgram socket moved out of /tmp.
        let defaults = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.agent.interval, defaults.agent.interval);
        assert_eq!(c.receivers.len(), defaults.receivers.len());
        assert!(c
            .receivers
            .iter()
            .any(|r| r.listen.to_string() == "unixgram:///run/sonde/metric.sock"));
        assert!(c.logs.is_empty() && c.profiler.is_none());
        // The packaged agent guards its admin site; the embedded defaults
        // (a developer's first run) do not yet.
        assert_eq!(c.agent.admin_auth, AdminAuth::Token);
        assert_eq!(defaults.agent.admin_auth, AdminAuth::None);
        // Every commented example uncommented: a sink of each type, both
        // protocols on each transport, a log source of files and one of
        // containers, and the profiler.
        let example = regex::Regex::new(r"^# (\[\[?[a-z.]+\]\]?|[a-z_]+ = .*)$").unwrap();
        let all: String = shipped
            .lines()
            .map(|l| {
                example
                    .captures(l)
                    .map_or(l, |m| m.get(1).unwrap().as_str())
            })
            .flat_map(|l| [l, "\n"])
            .collect();
        let c = parse(&all).unwrap_or_else(|e| panic!("{e}\n{all}"));
        let mut types: Vec<&str> = c.sinks.iter().map(|s| s.kind.name).collect();
        types.sort_unstable();
        let mut registry: Vec<&str> = sonde_sinks::registry::REGISTRY
            .iter()
            .map(|t| t.name)
            .collect();
        registry.sort_unstable();
        assert_eq!(types, registry);
        let mut transports: Vec<String> = c
            .receivers
            .iter()
            .map(|r| r.listen.to_string().split(':').next().unwrap().to_owned())
            .collect();
        transports.sort();
        transports.dedup();
        assert_eq!(transports, ["tcp", "udp", "unix", "unixgram", "unixseq"]);
        assert_eq!(c.logs.len(), 2);
        assert_eq!(c.logs[1].tailer.format, sonde_logs::container::Format::Cri);
        assert!(c.profiler.is_some());
    }

    #[test]
    fn every_example_config_parses() {
        parse(include_str!("../../../../examples/sonde.toml")).unwrap();
        // Every TOML block of the README and docs/CONFIG.md that has
        // receivers is a full config; docs/SINKS.md's blocks are sinks,
        // checked with a receiver.
        let readme = concat!(
            include_str!("../../../../README.md"),
            include_str!("../../../../docs/CONFIG.md")
        );
        let sinks = include_str!("../../../../docs/SINKS.md");
        let mut checked = 0;
        for block in readme.split("```toml\n").skip(1) {
            let block = block.split("```").next().unwrap();
            if block.contains("[[receivers]]") {
                parse(block).unwrap_or_else(|e| {
                    panic!("a README or docs/CONFIG.md block fails: {e}\n{block}")
                });
                checked += 1;
            }
        }
        assert!(
            checked >= 1,
            "docs/CONFIG.md's configuration example was not found"
        );
        let mut checked = 0;
        for block in sinks.split("```toml\n").skip(1) {
            let block = block.split("```").next().unwrap();
            let text = format!(
                "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n{block}"
            );
            parse(&text).unwrap_or_else(|e| panic!("docs/SINKS.md block fails: {e}\n{block}"));
            checked += 1;
        }
        assert!(checked >= 1, "docs/SINKS.md's example was not found");
    }

    #[test]
    fn workers_and_receive_buffers_are_checked() {
        let c = parse("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nworkers = 2\nreceive_buffer = \"16MiB\"\n[[sinks]]\ntype = \"console\"\n").unwrap();
        assert_eq!(
            c.receivers[0].options,
            SocketOptions {
                workers: 2,
                receive_buffer: 16 << 20,
                ..SocketOptions::default()
            }
        );
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"tcp://127.0.0.1:8125\"\nworkers = 2\n[[sinks]]\ntype = \"console\"\n");
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].workers", Some(4)));
        assert!(e.problem.contains("udp://"), "{e}");
        assert_eq!(
            at("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nworkers = 0\n[[sinks]]\ntype = \"console\"\n"),
            key("receivers[0].workers", 4)
        );
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nreceive_buffer = \"8 MB\"\n[[sinks]]\ntype = \"console\"\n");
        assert_eq!(
            (e.key.as_str(), e.line),
            ("receivers[0].receive_buffer", Some(4))
        );
        assert!(e.fix.contains("MiB"), "{e}");
    }

    /// One source, "app", on lines 1-3, then `rest`.
    fn with_app(rest: &str) -> Result<Config, ConfigError> {
        parse_with_log_sinks(&format!(
            "[[logs]]\nname = \"app\"\ninclude = [\"/var/log/app/*.log\"]\n{rest}"
        ))
    }

    fn app_err(rest: &str) -> ConfigError {
        match with_app(rest) {
            Ok(_) => panic!("accepted:\n{rest}"),
            Err(e) => e,
        }
    }

    #[test]
    fn inputs_default_to_metrics_and_keep_their_order() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.sinks[0].inputs, [SinkInput::Metrics]);
        assert!(c.sinks[0].takes_metrics());
        assert!(!c.sinks[0].exclusive_logs);
        assert!(c.logs.is_empty());
        let c = with_app(&format!(
            "{MIN}[[sinks]]\ntype = \"both\"\ninputs = [\"app\", \"metrics\"]\n[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n"
        ))
        .unwrap();
        assert_eq!(
            c.sinks[1].inputs,
            [SinkInput::Logs("app".into()), SinkInput::Metrics]
        );
        assert!(!c.sinks[2].takes_metrics());
        assert_eq!(c.sinks[2].log_sources().collect::<Vec<_>>(), ["app"]);
        // Every transport takes `inputs`.
        let (s, _) = net("type = \"tcp\"\naddress = \"a:1\"\ninputs = [\"metrics\"]\n");
        assert_eq!(s.inputs, [SinkInput::Metrics]);
    }

    #[test]
    fn a_log_only_agent_needs_no_receivers() {
        let c = with_app("[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n").unwrap();
        assert!(c.receivers.is_empty());
        assert_eq!(c.logs.len(), 1);
        // A source that no sink takes, with no sinks at all.
        let e = app_err("");
        assert_eq!((e.key.as_str(), e.line), ("logs[0].name", Some(2)));
        assert!(e.fix.contains("\"both\", \"logs_only\""), "{e}");
    }

    #[test]
    fn a_log_source_sent_to_a_metrics_only_sink_names_the_types_that_take_logs() {
        // The sink's table starts on line 4, `inputs` is on line 7 (8
        // after a key of the type's own).
        for (ty, own) in [
            ("tcp", "address = \"a:1\"\n"),
            ("graphite", "address = \"a:1\"\n"),
            ("prometheus_remote_write", "url = \"http://a:1/\"\n"),
        ] {
            let e = app_err(&format!(
                "[[sinks]]\ntype = \"{ty}\"\n{own}\ninputs = [\"metrics\", \"app\"]\n"
            ));
            let line = 7 + usize::from(!own.is_empty());
            assert_eq!(
                (e.key.as_str(), e.line),
                ("sinks[0].inputs[1]", Some(line)),
                "{ty}"
            );
            assert!(e.problem.contains("\"app\""), "{e}");
            assert!(e.fix.contains("\"both\", \"logs_only\""), "{e}");
            assert!(!e.fix.contains("\"graphite\""), "{e}");
        }
    }

    #[test]
    fn an_input_that_names_nothing_lists_what_exists() {
        let e = app_err("[[sinks]]\ntype = \"both\"\ninputs = [\"ap\"]\n");
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[0]", Some(6)));
        assert!(e.problem.contains("\"ap\""), "{e}");
        assert!(e.fix.contains("\"metrics\" or one of \"app\""), "{e}");
        // Without sources, the fix says how to add one.
        let e = err(&format!("{MIN}inputs = [\"metric\"]\n"));
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[0]", Some(6)));
        assert!(e.fix.contains("[[logs]]"), "{e}");
    }

    #[test]
    fn inputs_must_be_a_non_empty_list_of_distinct_names() {
        assert_eq!(
            at(&format!("{MIN}inputs = []\n")),
            key("sinks[0].inputs", 6)
        );
        assert_eq!(
            at(&format!("{MIN}inputs = \"metrics\"\n")),
            key("sinks[0].inputs", 6)
        );
        assert_eq!(
            at(&format!("{MIN}inputs = [\"metrics\", 1]\n")),
            key("sinks[0].inputs[1]", 6)
        );
        let e = app_err("[[sinks]]\ntype = \"both\"\ninputs = [\"app\", \"metrics\", \"app\"]\n");
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[2]", Some(6)));
        assert!(e.problem.contains("inputs[0]"), "{e}");
        assert_eq!(
            at(&format!("{MIN}inputs = [\"metrics\", \"metrics\"]\n")),
            key("sinks[0].inputs[1]", 6)
        );
    }

    #[test]
    fn receivers_need_a_sink_that_takes_metrics() {
        let e = parse_with_log_sinks(&format!(
            "[[logs]]\nname = \"app\"\ninclude = [\"/a/*\"]\n{}",
            MIN.replace(
                "type = \"console\"\n",
                "type = \"both\"\ninputs = [\"app\"]\n"
            )
        ))
        .unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("receivers[0]", Some(4)));
        assert!(e.fix.contains("\"metrics\""), "{e}");
        // No sinks at all keeps its own message.
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:1\"\n");
        assert_eq!((e.key.as_str(), e.line), ("sinks", None));
        assert!(e.problem.contains("no [[sinks]]"), "{e}");
    }

    #[test]
    fn a_sink_type_without_metrics_needs_inputs() {
        // `inputs` left out: the error is at the sink's table.
        let e = app_err(
            "[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n[[sinks]]\ntype = \"logs_only\"\nname = \"b\"\n",
        );
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs", Some(7)));
        assert!(e.problem.contains("metric windows"), "{e}");
        let e = app_err("[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\", \"metrics\"]\n");
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[1]", Some(6)));
    }

    #[test]
    fn a_source_an_exclusive_sink_takes_goes_to_it_alone() {
        let alone = "[[sinks]]\ntype = \"both\"\nalone = true\ninputs = [\"app\"]\n";
        let other = "[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n";
        let c = with_app(alone).unwrap();
        assert!(c.sinks[0].exclusive_logs);
        // Either order: the error is at the second sink's entry.
        let e = app_err(&format!("{alone}{other}"));
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(10)));
        assert!(e.problem.contains("sinks[0]"), "{e}");
        let e = app_err(&format!("{other}{alone}"));
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(10)));
        assert!(e.problem.contains("sinks[1]"), "{e}");
        // Two sinks that do not need it alone share a source.
        let c = with_app(&format!(
            "{other}{}",
            alone.replace("alone = true", "alone = false")
        ))
        .unwrap();
        assert_eq!(c.sinks.len(), 2);
        // An exclusive sink may take several sources and metrics.
        with_app(&format!(
            "[[logs]]\nname = \"b\"\ninclude = [\"/b/*\"]\n{}",
            alone.replace("[\"app\"]", "[\"app\", \"b\", \"metrics\"]")
        ))
        .unwrap();
    }

    #[test]
    fn dogstatsd_events_need_a_statsd_receiver_and_an_at_least_once_sink() {
        let events = "[[sinks]]\ntype = \"logs_only\"\ninputs = [\"dogstatsd_events\"]\n";
        let c = parse_with_log_sinks(&format!("{MIN}{events}")).unwrap();
        assert_eq!(
            c.sinks[1].log_sources().collect::<Vec<_>>(),
            ["dogstatsd_events"]
        );
        // Only msgpack receivers: no events to take.
        let msgpack = MIN.replace("\"statsd\"", "\"msgpack\"");
        let e = parse_with_log_sinks(&format!("{msgpack}{events}")).unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(8)));
        assert!(e.problem.contains("statsd receivers"), "{e}");
        let alone = "[[sinks]]\ntype = \"both\"\nalone = true\ninputs = [\"dogstatsd_events\"]\n";
        let e = parse_with_log_sinks(&format!("{MIN}{alone}")).unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(9)));
        assert!(e.problem.contains("exactly once"), "{e}");
        // And no [[logs]] source may take the name.
        let e = parse_with_log_sinks(&format!(
            "{MIN}[[logs]]\nname = \"dogstatsd_events\"\ninclude = [\"/a/*\"]\n{events}"
        ))
        .unwrap_err();
        assert_eq!(e.key, "logs[0].name");
        assert!(e.problem.contains("DogStatsD events"), "{e}");
    }

    #[test]
    fn profiler_section_turns_it_on_with_defaults_and_checks_its_keys() {
        assert_eq!(parse(MIN).unwrap().profiler, None);
        let c = parse("[profiler]\n").unwrap();
        assert_eq!(
            c.profiler,
            Some(Profiler {
                frequency: 19,
                period: Duration::from_secs(60),
                retention: Duration::from_secs(24 * 3600),
                max_bytes: 256 << 20,
                prices: Default::default(),
            })
        );
        let priced = parse(
            "[profiler]\ncore_cost_per_hour = \"0.048 USD\"\nco2_grams_per_core_hour = 20.5\n",
        )
        .unwrap()
        .profiler
        .unwrap()
        .prices;
        assert_eq!(priced.core_cost_per_hour.unwrap().to_string(), "0.048 USD");
        assert_eq!(priced.co2_grams_per_core_hour, Some(20.5));
        assert_eq!(c.receivers.len(), 0, "a profiling-only agent is valid");
        assert_eq!(
            parse("[profiler]\nenabled = false\n")
                .map(|_| ())
                .unwrap_err()
                .key,
            "receivers"
        );
        for (text, key, line) in [
            ("[profiler]\nfrequency = 0\n", "profiler.frequency", 2),
            ("[profiler]\nfrequency = 5000\n", "profiler.frequency", 2),
            ("[profiler]\nperiod = \"500ms\"\n", "profiler.period", 2),
            ("[profiler]\nperiod = \"2h\"\n", "profiler.period", 2),
            (
                "[profiler]\nperiod = \"10m\"\nretention = \"5m\"\n",
                "profiler.retention",
                3,
            ),
            ("[profiler]\nmax_size = \"10KiB\"\n", "profiler.max_size", 2),
            (
                "[profiler]\ncore_cost_per_hour = \"0.048\"\n",
                "profiler.core_cost_per_hour",
                2,
            ),
            (
                "[profiler]\nco2_grams_per_core_hour = -1.0\n",
                "profiler.co2_grams_per_core_hour",
                2,
            ),
        ] {
            let e = err(text);
            assert_eq!((e.key.as_str(), e.line), (key, Some(line)), "{text}");
        }
        assert!(err("[profiler]\nfrequncy = 19\n")
            .to_string()
            .contains("frequncy"));
    }

    #[test]
    fn profiling_md_examples_parse() {
        let doc = include_str!("../../../../docs/PROFILING.md");
        let mut checked = 0;
        for block in doc.split("```toml\n").skip(1) {
            let toml = block.split("```").next().unwrap();
            parse(toml).unwrap_or_else(|e| panic!("docs/PROFILING.md block fails: {e}\n{toml}"));
            checked += 1;
        }
        assert!(checked >= 1, "docs/PROFILING.md's example was not found");
    }

    #[test]
    fn deploy_md_admin_site_for_other_hosts_parses() {
        let doc = include_str!("../../../../docs/DEPLOY.md");
        let agent = doc
            .split("```toml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap())
            .find(|b| b.starts_with("[agent]\nallow_non_loopback = true\n"))
            .expect("docs/DEPLOY.md's admin site for other hosts");
        let c = parse(&format!("{agent}{MIN}"))
            .unwrap_or_else(|e| panic!("docs/DEPLOY.md block fails: {e}\n{agent}"));
        assert_eq!(c.agent.admin_scheme(), "https");
        assert_eq!(c.agent.admin_auth, AdminAuth::Token);
    }

    #[test]
    fn deploy_md_admin_site_on_a_socket_file_parses() {
        let doc = include_str!("../../../../docs/DEPLOY.md");
        let agent = doc
            .split("```toml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap())
            .find(|b| b.starts_with("[agent]\nadmin_listen = \"unix://"))
            .expect("docs/DEPLOY.md's admin site on a unix socket file");
        let c = parse(&format!("{agent}{MIN}"))
            .unwrap_or_else(|e| panic!("docs/DEPLOY.md block fails: {e}\n{agent}"));
        assert_eq!(
            c.agent.admin_socket(),
            Some(std::path::Path::new("/run/sonde/admin.sock"))
        );
        assert_eq!(c.agent.admin_socket_mode(), 0o660);
        assert_eq!(c.agent.admin_auth, AdminAuth::Token);
    }

    #[test]
    fn logs_md_examples_parse_and_its_mistake_is_reported_as_shown() {
        let doc = include_str!("../../../../docs/LOGS.md");
        let (mut good, mut bad) = (0, 0);
        for block in doc.split("```toml\n").skip(1) {
            let (toml, after) = block.split_once("```\n").unwrap();
            let shown = after
                .trim_start()
                .strip_prefix("```\n$ sonde validate --config sonde.toml\n")
                .and_then(|r| r.split("```").next());
            match (parse(toml), shown) {
                (Ok(_), None) => good += 1,
                (Err(e), Some(shown)) => {
                    assert_eq!(
                        shown,
                        format!("sonde: invalid config file sonde.toml: {e}\n")
                    );
                    bad += 1;
                }
                (Ok(_), Some(_)) => {
                    panic!("docs/LOGS.md shows an error for a valid config:\n{toml}")
                }
                (Err(e), None) => panic!("docs/LOGS.md block fails: {e}\n{toml}"),
            }
        }
        assert!(
            good >= 1 && bad >= 1,
            "docs/LOGS.md's examples were not found"
        );
    }

    #[test]
    fn logs_md_names_the_types_that_take_log_lines() {
        use sonde_sinks::registry::{Input, REGISTRY};
        let doc = include_str!("../../../../docs/LOGS.md");
        let listed = |start: &str| -> Vec<&str> {
            let (_, rest) = doc.split_once(start).expect(start);
            let para = rest.split("\n\n").next().unwrap();
            para.split('`').skip(1).step_by(2).collect()
        };
        let takes = |logs: bool| -> Vec<&str> {
            REGISTRY
                .iter()
                .filter(|t| t.accepts.contains(&Input::Logs) == logs)
                .map(|t| t.name)
                .collect()
        };
        let mut doc_logs = listed("Types that take log lines:");
        let mut doc_metrics = listed("The other types (");
        let (mut logs, mut metrics) = (takes(true), takes(false));
        for v in [&mut doc_logs, &mut doc_metrics, &mut logs, &mut metrics] {
            v.sort_unstable();
        }
        assert_eq!(doc_logs, logs, "docs/LOGS.md: types that take log lines");
        assert_eq!(
            doc_metrics, metrics,
            "docs/LOGS.md: types that take metrics only"
        );
    }
}
