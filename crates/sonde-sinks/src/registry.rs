//! The registry: every sink type ([`REGISTRY`]), looked up by the name
//! `type` gives it, and the checks of the `[[sinks]]` tables against it
//! ([`check`]). What a type and a configured sink are is in
//! [`crate::descriptor`]. Config validation (`sonde::config::parse` runs
//! [`check`]), the wiring in `sonde run` ([`SinkType::start`]) and the
//! tests that read docs/SINKS.md and docs/CONFIG.md all read the
//! descriptors listed here.
//!
//! How to add a sink type is in the crate's top doc.

use std::collections::HashMap;
use std::net::SocketAddr;

use toml::Spanned;

pub use crate::descriptor::{
    hostname, no_own_keys, Buffer, Input, NetSink, Running, Sink, SinkInput, SinkType, Start,
    Transport,
};
pub use crate::net::{BufferSection, NetSinkSection};
use sonde_config::{AgentSection, ConfigError, Source};
use sonde_config::{METRICS_INPUT, PROFILES_INPUT};

/// Every sink type, by the name `type` gives it.
pub static REGISTRY: &[&SinkType] = &[
    &crate::console::TYPE,
    &crate::file::TYPE,
    &crate::prometheus_exporter::TYPE,
    &crate::prometheus_remote_write::TYPE,
    &crate::otlp_http::TYPE,
    &crate::influxdb::TYPE,
    &crate::graphite::TYPE,
    &crate::http::TYPE,
    &crate::tcp::TYPE,
    &crate::blackhole::TYPE,
    &crate::kafka::TYPE,
    &crate::clickhouse::TYPE,
];

/// The sink type called `name`.
pub fn lookup(name: &str) -> Option<&'static SinkType> {
    REGISTRY.iter().copied().find(|t| t.name == name)
}

/// The names in `registry`, for messages.
fn names(registry: &[&SinkType]) -> String {
    registry
        .iter()
        .map(|t| format!("\"{}\"", t.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The types in `registry` that accept `input`, for messages.
pub fn accepting(registry: &[&SinkType], input: Input) -> String {
    let types: Vec<String> = registry
        .iter()
        .filter(|t| t.accepts.contains(&input))
        .map(|t| format!("\"{}\"", t.name))
        .collect();
    if types.is_empty() {
        "none yet".into()
    } else {
        types.join(", ")
    }
}

/// The error for a file with receivers and no sinks.
pub fn none() -> ConfigError {
    ConfigError::new(
        "sinks",
        "no [[sinks]]: windows would go nowhere",
        "add one, e.g.\n[[sinks]]\ntype = \"console\"",
    )
}

/// Places an error about a key of `sinks[i]`, given relative to the sink,
/// at that key's line.
pub fn place(
    src: Source<'_>,
    i: usize,
    span: &std::ops::Range<usize>,
    e: ConfigError,
) -> ConfigError {
    let first = e.key.split(['.', '[']).next().unwrap_or("");
    let line = if first.is_empty() {
        src.line(span)
    } else {
        src.key_line(span, first)
    };
    let key = if e.key.is_empty() {
        format!("sinks[{i}]")
    } else {
        format!("sinks[{i}].{}", e.key)
    };
    src.at(line, ConfigError { key, ..e })
}

/// Validates one `[[sinks]]` table, with errors relative to it.
fn one(
    registry: &[&'static SinkType],
    table: &toml::Table,
    agent: &AgentSection,
) -> Result<Sink, ConfigError> {
    let ty = match table.get("type") {
        Some(toml::Value::String(t)) => t.as_str(),
        Some(_) => {
            return Err(ConfigError::new(
                "type",
                "`type` is not a string",
                format!("write one of {}", names(registry)),
            ))
        }
        None => {
            return Err(ConfigError::new(
                "",
                "a sink needs a `type`",
                format!("add type = one of {}", names(registry)),
            ))
        }
    };
    let kind = registry
        .iter()
        .copied()
        .find(|t| t.name == ty)
        .ok_or_else(|| {
            ConfigError::new(
                "type",
                format!("{ty:?} is not a sink type"),
                format!("write one of {}", names(registry)),
            )
        })?;
    build(kind, table, agent)
}

/// Validates a `[[sinks]]` table of type `kind`, with errors relative to
/// it: the keys it takes, the common ones of its transport, then its own.
fn build(
    kind: &'static SinkType,
    table: &toml::Table,
    agent: &AgentSection,
) -> Result<Sink, ConfigError> {
    let common = kind.transport.keys();
    let mut own = toml::Table::new();
    let mut rest = toml::Table::new();
    for (k, v) in table {
        if k == "type" || k == "inputs" {
            continue;
        }
        if kind.keys.contains(&k.as_str()) {
            own.insert(k.clone(), v.clone());
        } else if common.contains(&k.as_str()) {
            rest.insert(k.clone(), v.clone());
        } else {
            return Err(ConfigError::new(
                k.as_str(),
                format!("{} sinks take no `{k}`", kind.name),
                not_taken_fix(kind, k, &common),
            ));
        }
    }
    let mut sink = Sink {
        kind,
        name: kind.name.to_string(),
        options: own,
        listen: None,
        net: None,
        inputs: inputs(kind, table.get("inputs"))?,
        exclusive_logs: false,
    };
    if kind.transport != Transport::Local {
        let section: NetSinkSection = toml::Value::Table(rest.clone()).try_into().map_err(|e| {
            let msg = e.message().trim_end();
            let (problem, fix) = sonde_config::error::split_fix(msg);
            // serde names the key of an unknown or missing field but not
            // the one whose value failed: that is the key that fails alone.
            let bad = rest.iter().find(|(k, v)| {
                let alone = toml::Table::from_iter([((*k).clone(), (*v).clone())]);
                toml::Value::Table(alone)
                    .try_into::<NetSinkSection>()
                    .is_err()
            });
            ConfigError::new(
                bad.map(|(k, _)| k.clone()).unwrap_or_default(),
                problem,
                fix.map_or_else(|| sonde_config::error::generic_fix(problem), str::to_string),
            )
        })?;
        let (name, net) = crate::net::check(kind, &section, &agent.data_dir)?;
        sink.name = name;
        sink.net = Some(net);
    }
    (kind.check)(&mut sink)?;
    // A network sink's `name` is read with its other common keys; a local
    // sink's here, over the default its type's check chose.
    if kind.transport == Transport::Local {
        if let Some(v) = rest.get("name") {
            match v.as_str() {
                Some(n) if !n.is_empty() => sink.name = n.to_string(),
                _ => {
                    return Err(ConfigError::new(
                        "name",
                        "`name` is not a non-empty string",
                        format!("write name = \"{}-1\", or leave it out", kind.name),
                    ))
                }
            }
        }
    }
    Ok(sink)
}

/// Validates `inputs` (absent: `["metrics"]`): a non-empty list of
/// distinct names. Whether each names a source, and whether the type
/// accepts it, is checked with the sources ([`sonde_config::parse`]).
fn inputs(kind: &SinkType, value: Option<&toml::Value>) -> Result<Vec<SinkInput>, ConfigError> {
    let example = "inputs = [\"metrics\"], or the names of [[logs]] sources";
    let Some(value) = value else {
        return Ok(vec![SinkInput::Metrics]);
    };
    let Some(list) = value.as_array() else {
        return Err(ConfigError::new(
            "inputs",
            "`inputs` is not a list",
            format!("write {example}"),
        ));
    };
    if list.is_empty() {
        return Err(ConfigError::new(
            "inputs",
            format!(
                "`inputs` is empty: the {} sink would take nothing",
                kind.name
            ),
            format!("write {example}, or remove the sink"),
        ));
    }
    let mut seen = Vec::with_capacity(list.len());
    let mut at: HashMap<&str, usize> = HashMap::with_capacity(list.len());
    for (j, v) in list.iter().enumerate() {
        let Some(name) = v.as_str() else {
            return Err(ConfigError::new(
                format!("inputs[{j}]"),
                format!("a {} where a name was expected", v.type_str()),
                format!("write {example}"),
            ));
        };
        if let Some(first) = at.insert(name, j) {
            return Err(ConfigError::new(
                format!("inputs[{j}]"),
                format!("{name:?} is listed twice, as inputs[{first}] too"),
                "list each input once",
            ));
        }
        seen.push(if name == METRICS_INPUT {
            SinkInput::Metrics
        } else if name == PROFILES_INPUT {
            SinkInput::Profiles
        } else {
            SinkInput::Logs(name.to_string())
        });
    }
    Ok(seen)
}

/// The fix for a key the type does not take.
fn not_taken_fix(kind: &SinkType, key: &str, common: &[&str]) -> String {
    match (kind.transport, key) {
        (Transport::Tcp, "url") => {
            format!(
                "{} connects over TCP: write address = \"HOST:PORT\" instead",
                kind.name
            )
        }
        (Transport::Http, "address") => {
            format!(
                "{} POSTs over HTTP: write url = \"http://HOST:PORT/...\" instead",
                kind.name
            )
        }
        (Transport::Tcp, "headers") => format!("{} is not HTTP: remove `headers`", kind.name),
        _ => {
            let takes: Vec<String> = kind
                .keys
                .iter()
                .chain(common)
                .map(|k| format!("`{k}`"))
                .collect();
            if takes.is_empty() {
                format!("remove it: {} takes only `type`", kind.name)
            } else {
                format!("remove it: {} takes {}", kind.name, takes.join(", "))
            }
        }
    }
}

/// Validates the `[[sinks]]` tables: a type of `registry` each, the keys
/// that type takes, distinct names and listen addresses. What their
/// `inputs` name is checked against the sources by the caller.
pub fn check(
    src: Source<'_>,
    registry: &[&'static SinkType],
    tables: &[Spanned<toml::Table>],
    agent: &AgentSection,
) -> Result<Vec<Sink>, ConfigError> {
    let mut listeners: HashMap<SocketAddr, String> = HashMap::new();
    if let Some(a) = agent.admin() {
        listeners.insert(a, "agent.admin_listen".into());
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut sinks = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let span = t.span();
        let sink = one(registry, t.get_ref(), agent).map_err(|e| place(src, i, &span, e))?;
        if let Some(addr) = sink.listen {
            sonde_config::check_loopback(agent.allow_non_loopback, addr).map_err(|e| {
                place(
                    src,
                    i,
                    &span,
                    ConfigError {
                        key: "listen".into(),
                        ..e
                    },
                )
            })?;
            if let Some(other) = listeners.insert(addr, format!("sinks[{i}].listen")) {
                return Err(place(
                    src,
                    i,
                    &span,
                    ConfigError::new(
                        "listen",
                        format!("{addr} is already used by {other}"),
                        "give each listener its own port",
                    ),
                ));
            }
        }
        // Names label the sinks' series on /metrics: two alike would be
        // one series twice.
        if let Some(j) = names.insert(sink.name.clone(), i) {
            return Err(place(
                src,
                i,
                &span,
                ConfigError::new(
                    "name",
                    format!("{:?} is also the name of sinks[{j}]", sink.name),
                    "give each sink of a type a distinct `name`",
                ),
            ));
        }
        sinks.push(sink);
    }
    Ok(sinks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of the Markdown table in `doc` whose header starts with
    /// `` `type` ``: (type, the cells after it).
    fn rows(doc: &str) -> Vec<(String, Vec<String>)> {
        doc.lines()
            .skip_while(|l| !l.starts_with("| `type` |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<String> = l
                    .trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().to_string())
                    .collect();
                (cells[0].trim_matches('`').to_string(), cells[1..].to_vec())
            })
            .collect()
    }

    /// The values in backticks before any parenthesis: `"`a`, `b` (why)"`
    /// gives a, b.
    fn listed(cell: &str) -> Vec<&str> {
        let cell = cell.split('(').next().unwrap_or("");
        cell.split('`').skip(1).step_by(2).collect()
    }

    #[test]
    fn sinks_md_gives_every_type_the_compressions_keys_and_headers_of_the_registry() {
        let doc = rows(include_str!("../../../docs/SINKS.md"));
        for t in REGISTRY {
            let (_, cells) = doc
                .iter()
                .find(|(name, _)| name == t.name)
                .unwrap_or_else(|| panic!("docs/SINKS.md has no row for {}", t.name));
            let comp = cells.last().unwrap();
            assert_eq!(
                listed(comp),
                t.compressions,
                "docs/SINKS.md's compressions of {} (the default first)",
                t.name
            );
            let row = cells.join(" | ");
            for k in t.keys {
                assert!(
                    row.contains(&format!("`{k}`")),
                    "docs/SINKS.md's {} row does not name its key `{k}`",
                    t.name
                );
            }
            for (h, v) in t.headers {
                assert!(
                    row.contains(&format!("{h}: {v}")),
                    "docs/SINKS.md's {} row does not show its header {h}",
                    t.name
                );
            }
        }
        for (name, _) in &doc {
            assert!(
                lookup(name).is_some(),
                "docs/SINKS.md documents {name}, which is not a sink type"
            );
        }
    }

    #[test]
    fn the_config_reference_lists_every_type() {
        let readme = rows(include_str!("../../../docs/CONFIG.md"));
        for t in REGISTRY {
            assert!(
                readme.iter().any(|(name, _)| name == t.name),
                "docs/CONFIG.md's sinks table has no row for {}",
                t.name
            );
        }
    }

    #[test]
    fn registered_names_are_distinct_and_network_types_have_a_default_compression() {
        for (i, t) in REGISTRY.iter().enumerate() {
            assert!(
                REGISTRY[..i].iter().all(|o| o.name != t.name),
                "{} is registered twice",
                t.name
            );
            assert_eq!(
                t.transport == Transport::Local,
                t.default_compression().is_none(),
                "{}",
                t.name
            );
            assert!(!t.accepts.is_empty(), "{} accepts nothing", t.name);
            for k in t.keys {
                assert!(
                    !t.transport.keys().contains(k) && *k != "type",
                    "{}: `{k}` is a common key too",
                    t.name
                );
            }
        }
    }

    #[test]
    fn the_fixed_headers_are_those_of_the_protocol() {
        assert_eq!(
            crate::prometheus_remote_write::TYPE.headers,
            &[("X-Prometheus-Remote-Write-Version", "0.1.0")]
        );
        assert!(REGISTRY
            .iter()
            .filter(|t| t.name != "prometheus_remote_write")
            .all(|t| t.headers.is_empty()));
    }
}

/// A sink type with a transport of its own, as a message queue's would be:
/// it needs no change outside its own file and its registry line.
#[cfg(test)]
mod own_transport {
    use super::*;

    static QUEUE: SinkType = SinkType {
        name: "queue",
        accepts: &[Input::Metrics],
        transport: Transport::Own,
        compressions: &["none", "zstd"],
        headers: &[],
        keys: &["brokers", "topic"],
        check,
        start,
        reloads: true,
        host: None,
    };

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct QueueOptions {
        brokers: crate::descriptor::NonEmpty,
        topic: crate::descriptor::NonEmpty,
    }

    fn check(s: &mut Sink) -> Result<(), ConfigError> {
        let o: QueueOptions =
            s.typed(&[("brokers", "\"127.0.0.1:9092\""), ("topic", "\"metrics\"")])?;
        let target = format!("{}/{}", &*o.brokers, &*o.topic);
        if let Some(n) = s.net.as_mut() {
            n.target = target;
        }
        Ok(())
    }

    fn start(_: &Sink, _: &mut Start<'_>) -> anyhow::Result<Running> {
        anyhow::bail!("not started in tests")
    }

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn takes_the_common_network_keys_and_its_own() {
        let s = build(
            &QUEUE,
            &table("type = \"queue\"\nbrokers = \"b:9092\"\ntopic = \"m\"\ncompression = \"zstd\"\nbuffer = { type = \"disk\" }\n"),
            &AgentSection::default(),
        )
        .unwrap();
        let n = s.net.unwrap();
        assert_eq!(n.target, "b:9092/m");
        assert_eq!(
            n.compression,
            sonde_encode::compress::Compression::Zstd { level: 1 }
        );
        assert!(matches!(n.buffer, Buffer::Disk { .. }));
        assert_eq!(s.name, "queue");
    }

    #[test]
    fn refuses_url_and_address_and_needs_its_own_keys() {
        let agent = AgentSection::default();
        for (text, key) in [
            (
                "brokers = \"b\"\ntopic = \"m\"\nurl = \"http://a\"\n",
                "url",
            ),
            (
                "brokers = \"b\"\ntopic = \"m\"\naddress = \"a:1\"\n",
                "address",
            ),
            ("brokers = \"b\"\n", "topic"),
        ] {
            let e = build(&QUEUE, &table(text), &agent).unwrap_err();
            assert_eq!(e.key, key, "{e}");
        }
    }
}

/// The `[[sinks]]` tables of a config's text, checked as the config's
/// parser checks them (with the default `[agent]`), for the sink types'
/// tests; their `inputs` are not matched against sources here.
#[cfg(test)]
pub(crate) fn parse(text: &str) -> Result<ParsedSinks, ConfigError> {
    #[derive(serde::Deserialize)]
    struct OnlySinks {
        #[serde(default)]
        sinks: Vec<Spanned<toml::Table>>,
    }
    let src = Source { text };
    let file: OnlySinks = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    let sinks = check(src, REGISTRY, &file.sinks, &AgentSection::default())?;
    Ok(ParsedSinks { sinks })
}

/// What [`parse`] returns.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct ParsedSinks {
    /// The sinks, in the file's order.
    pub sinks: Vec<Sink>,
}
