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
pub mod host_metrics;
pub mod logs;
pub mod profiler;
pub mod receivers;
pub mod scrape;
#[cfg(test)]
mod test_sinks;

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use sonde_aggregate::AggregateConfig;
use sonde_log_sources::events::EVENTS_SOURCE;
use toml::Spanned;

pub use self::histograms::{HistogramOverride, HistogramSection};
pub use self::host::{admin_tls_error, check_host};
pub use self::host_metrics::{HostMetrics, HostMetricsSection};
pub use self::logs::{LogSection, LogSource};
pub use self::profiler::{Profiler, ProfilerSection};
pub use self::receivers::{ProtocolName, Receiver, ReceiverSection};
pub use self::scrape::ScrapeSection;
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

# The host's own metrics (docs/INPUTS.md, "Host metrics"): off here.
[host_metrics]
enabled = false
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
    scrape: Vec<Spanned<ScrapeSection>>,
    #[serde(default)]
    sinks: Vec<Spanned<toml::Table>>,
    #[serde(default)]
    histograms: HistogramSection,
    profiler: Option<ProfilerSection>,
    host_metrics: Option<Spanned<HostMetricsSection>>,
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
    /// Prometheus endpoints scraped, in file order.
    pub scrape: Vec<sonde_scrape::Target>,
    /// Sinks, in file order.
    pub sinks: Vec<Sink>,
    /// What the aggregator needs.
    pub aggregate: AggregateConfig,
    /// The host profiler, when `[profiler]` turns it on.
    pub profiler: Option<Profiler>,
    /// The host's metrics, when `[host_metrics]` turns them on.
    pub host_metrics: Option<HostMetrics>,
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
    let host_metrics = host_metrics::check(
        src,
        file.host_metrics.as_ref().map(Spanned::get_ref),
        agent.interval.get_ref().0,
    )?;
    if file.receivers.is_empty()
        && file.logs.is_empty()
        && file.scrape.is_empty()
        && profiler.is_none()
        && host_metrics.is_none()
    {
        return Err(receivers::none());
    }
    if file.sinks.is_empty()
        && !(file.receivers.is_empty() && file.scrape.is_empty() && host_metrics.is_none())
    {
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
    let scrape = scrape::check(src, &file.scrape)?;
    let sinks = sonde_sinks::registry::check(src, registry, &file.sinks, &agent)?;
    let tables = Tables {
        logs: &file.logs,
        sinks: &file.sinks,
        receivers: &file.receivers,
        scrape: &file.scrape,
    };
    routes(src, registry, tables, &logs, &sinks, profiler.is_some())?;
    if let Some(h) = file
        .host_metrics
        .as_ref()
        .filter(|_| host_metrics.is_some())
    {
        if !sinks.iter().any(Sink::takes_metrics) {
            return Err(src.error(
                h.span(),
                "host_metrics",
                "no sink's `inputs` has \"metrics\": the host metrics would go nowhere",
                "add \"metrics\" to the `inputs` of a sink, or write enabled = false in [host_metrics]",
            ));
        }
    }
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
        scrape,
        sinks,
        aggregate,
        profiler,
        host_metrics,
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
    scrape: &'a [Spanned<ScrapeSection>],
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
    profiler: bool,
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
    // Each OTLP receiver's log source, by its name (receivers of one name
    // share it).
    let otlp: Vec<&str> = file
        .receivers
        .iter()
        .filter(|r| r.get_ref().protocol == receivers::ProtocolName::Otlp)
        .map(|r| receivers::otlp_source_name(r.get_ref()))
        .collect();
    for name in &otlp {
        if known.contains(name) {
            return Err(ConfigError::new(
                "receivers",
                format!("{name:?} names both an OTLP receiver's log source and another source"),
                "give the OTLP receiver another name = \"...\", or rename the [[logs]] source",
            ));
        }
    }
    known.extend(otlp.iter().copied());
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
                if (name == EVENTS_SOURCE || otlp.contains(&name.as_str())) && sink.exclusive_logs {
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
                        format!(
                            "write \"metrics\", \"profiles\" or one of {}",
                            source_names()
                        )
                    };
                    return Err(at(
                        i,
                        entry(i, j),
                        format!("{name:?} is not \"metrics\", \"profiles\" or a [[logs]] source"),
                        fix,
                    ));
                }
            }
            if *input == SinkInput::Profiles && !profiler {
                return Err(at(
                    i,
                    entry(i, j),
                    "\"profiles\" takes the profiler's periods, and there is no [profiler]".into(),
                    "add a [profiler] section (docs/PROFILING.md), or remove it from `inputs`"
                        .into(),
                ));
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
                            "{}; metrics go to {}",
                            if sink.kind.accepts.contains(&Input::Logs) {
                                "list the log sources it takes, like inputs = [\"app\"]"
                            } else {
                                "write inputs = [\"profiles\"]"
                            },
                            accepting(registry, Input::Metrics)
                        ),
                    ),
                    Input::Profiles => (
                        "profiles".to_string(),
                        format!(
                            "send them to a sink of a type that takes profiles ({}), or remove \"profiles\" from `inputs`",
                            accepting(registry, Input::Profiles)
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
    if let Some(s) = file.scrape.first() {
        if !sinks.iter().any(Sink::takes_metrics) {
            return Err(src.error(
                s.span(),
                "scrape[0]",
                "no sink's `inputs` has \"metrics\": the scraped points would go nowhere",
                "add \"metrics\" to the `inputs` of a sink, or remove the [[scrape]]",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
