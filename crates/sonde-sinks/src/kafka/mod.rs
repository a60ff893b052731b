//! `kafka`: log lines (one record per line) to a Kafka topic, with
//! `acks=all`.
//!
//! * [`at_least_once`]: sonde's own producer ([`sonde_kafka`]) for every
//!   source of the sink; a batch is acknowledged to its source once Kafka
//!   acknowledged each of its requests.
//! * [`exactly_once`]: one transactional producer of sonde's own per
//!   source; the records of whole batches and the source's read positions
//!   go into Kafka in one transaction, and the positions are read back
//!   from Kafka at start.
//! * [`metrics`]: metric windows, one record per point, through the
//!   network sinks' sender and sonde's own idempotent producer.
//! * [`record`]: what a record holds (`format`).
//! * [`security`]: `tls` and `sasl`.
//!
//! One client serves every side: sonde's own ([`sonde_kafka`]), which
//! also creates the exactly-once offsets topic and reads it back.
//!
//! # How the common network keys map
//!
//! Log lines (both deliveries) take `max_batch_points`, `request_timeout`,
//! the backoffs and the compression (see [`at_least_once`]);
//! `shutdown_grace` bounds the flush at shutdown. Metric windows go
//! through the network sender as every network sink's do (`max_batch_age`,
//! `max_batch_points`, `max_batch_bytes`, the memory buffer, the backoffs),
//! and the producer compresses each record batch with `compression`. A
//! disk buffer is refused: lines wait in their files (the source stops
//! reading while Kafka is away), so a second copy on disk would buy
//! nothing.

pub mod at_least_once;
pub mod exactly_once;
pub mod metrics;
pub mod record;
pub mod security;

use self::metrics::PointFormat;
use serde::Deserialize;

use crate::descriptor::{Buffer, Input, NonEmpty, Running, Sink, SinkType, Start, Transport};
use sonde_config::units::HumanDuration;
use sonde_config::ConfigError;
use std::time::Duration;

/// `type = "kafka"`: `brokers` and `topic` (required), `format`,
/// `delivery`, `offsets_topic`, `metrics_topic`, `metrics_format`.
pub static TYPE: SinkType = SinkType {
    name: "kafka",
    accepts: &[Input::Metrics, Input::Logs],
    transport: Transport::Own,
    // lz4 first: of Kafka's codecs it costs the producer the least CPU per
    // byte (log lines compress about 3x with it, zstd 1 does a little
    // better for about twice the CPU), and shipping is CPU on the
    // monitored host, while broker disk is the cheaper resource.
    compressions: &["lz4", "zstd", "gzip", "snappy", "none"],
    headers: &[],
    keys: &[
        "brokers",
        "topic",
        "format",
        "delivery",
        "offsets_topic",
        "metrics_topic",
        "metrics_format",
        "tls",
        "sasl",
        "metadata_max_age",
    ],
    check,
    start,
    reloads: true,
    host: Some(security::check_host),
};

/// What a record's value holds (`format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The line's bytes; the source's `fields` as headers.
    #[default]
    Raw,
    /// `{"message","file","offset","host","source", fields...}`.
    Json,
}

/// What the sink promises (`delivery`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Every line at least once: batches are acknowledged once Kafka
    /// acknowledged their records.
    #[default]
    AtLeastOnce,
    /// Every line exactly once, as a `read_committed` consumer sees it.
    ExactlyOnce,
}

/// A kafka sink's own keys, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `brokers`: `host:port` each.
    pub brokers: Vec<String>,
    /// `topic`.
    pub topic: String,
    /// `format`: default raw.
    pub format: Format,
    /// `delivery`: default at least once.
    pub mode: Mode,
    /// `offsets_topic`: default `"sonde-offsets"`.
    pub offsets_topic: String,
    /// `metrics_topic`: where metric points go; default `topic`.
    pub metrics_topic: String,
    /// `metrics_format`: default json.
    pub metrics_format: PointFormat,
    /// `tls` and `sasl`.
    pub security: security::Security,
    /// `metadata_max_age`: how old the cluster's metadata may grow before
    /// it is read again (default 5 minutes, Kafka's own clients').
    pub metadata_max_age: Duration,
}

/// A kafka sink's own keys, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    brokers: Vec<String>,
    topic: NonEmpty,
    #[serde(default)]
    format: Format,
    #[serde(default)]
    delivery: Mode,
    offsets_topic: Option<NonEmpty>,
    metrics_topic: Option<NonEmpty>,
    #[serde(default)]
    metrics_format: PointFormat,
    tls: Option<security::TlsOptions>,
    sasl: Option<security::SaslOptions>,
    metadata_max_age: Option<HumanDuration>,
}

/// The offsets topic when `offsets_topic` is not set.
pub const DEFAULT_OFFSETS_TOPIC: &str = "sonde-offsets";

/// A Kafka topic name: 1 to 249 of letters, digits, `.`, `_` and `-`, and
/// neither `.` nor `..` (the broker's own rule).
fn topic_named(key: &str, t: &str) -> Result<String, ConfigError> {
    let ok = !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(t.to_string())
    } else {
        Err(ConfigError::new(
            key,
            format!("{t:?} cannot name a Kafka topic"),
            "use 1 to 249 letters, digits, `.`, `_` and `-`",
        ))
    }
}

/// Checks one entry of `brokers`: `HOST:PORT`, with no scheme and no
/// path (`kafka://a:9092` would be taken for a host named `kafka://a` and
/// fail every lookup at run time); the error is the fix.
fn broker(b: &str) -> Result<(), String> {
    if let Some((scheme, rest)) = b.split_once("://") {
        return Err(format!("write {rest:?}, without {scheme}://"));
    }
    let ok = match b.rsplit_once(':') {
        Some((h, p)) => {
            let bracketed = h.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
            let host_ok = match bracketed {
                Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
                None => {
                    !h.is_empty()
                        && h.bytes()
                            .all(|c| c.is_ascii_alphanumeric() || b"-._".contains(&c))
                }
            };
            host_ok && p.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err("write each broker as \"HOST:PORT\", like \"127.0.0.1:9092\" or \"kafka-1.example.com:9092\" (an IPv6 address in brackets: \"[::1]:9092\")".into())
    }
}

/// Reads the sink's own keys.
///
/// # Errors
///
/// A [`ConfigError`] naming the key (relative to the sink).
pub fn settings(s: &Sink) -> Result<Settings, ConfigError> {
    let example = "[\"127.0.0.1:9092\"]";
    let o: Options = s.typed(&[
        ("brokers", example),
        ("topic", "\"logs\""),
        ("offsets_topic", "\"sonde-offsets\""),
        ("metrics_topic", "\"metrics\""),
        security::EXAMPLES[0],
        security::EXAMPLES[1],
        ("metadata_max_age", "\"5m\""),
    ])?;
    if o.brokers.is_empty() {
        return Err(ConfigError::new(
            "brokers",
            "`brokers` is not a list of \"HOST:PORT\"",
            format!("write brokers = {example}"),
        ));
    }
    for (i, b) in o.brokers.iter().enumerate() {
        broker(b).map_err(|fix| {
            ConfigError::new(
                format!("brokers[{i}]"),
                format!("{b:?} is not \"HOST:PORT\""),
                fix,
            )
        })?;
    }
    let topic = topic_named("topic", &o.topic)?;
    let mode = o.delivery;
    let offsets_topic = match &o.offsets_topic {
        None => DEFAULT_OFFSETS_TOPIC.to_string(),
        Some(_) if mode == Mode::AtLeastOnce => {
            return Err(ConfigError::new(
                "offsets_topic",
                "only delivery = \"exactly_once\" keeps offsets in Kafka",
                "remove `offsets_topic`, or write delivery = \"exactly_once\"",
            ))
        }
        Some(t) => topic_named("offsets_topic", t)?,
    };
    let metrics_topic = match &o.metrics_topic {
        None => topic.clone(),
        Some(t) => topic_named("metrics_topic", t)?,
    };
    if mode == Mode::ExactlyOnce {
        // The key the user wrote last among the two that collide.
        let clash = if offsets_topic == topic {
            Some("topic")
        } else if offsets_topic == metrics_topic {
            Some("metrics_topic")
        } else {
            None
        };
        if let Some(other) = clash {
            let key = if o.offsets_topic.is_some() {
                "offsets_topic"
            } else {
                other
            };
            return Err(ConfigError::new(
                key,
                format!("`{other}` and `offsets_topic` name the same topic, {offsets_topic:?}"),
                "give the offsets a topic of their own",
            ));
        }
    }
    let security = security::check(o.tls.as_ref(), o.sasl.as_ref())?;
    let metadata_max_age = o
        .metadata_max_age
        .map_or(sonde_kafka::cluster::METADATA_MAX_AGE, |d| d.0);
    if metadata_max_age < Duration::from_secs(1) {
        return Err(ConfigError::new(
            "metadata_max_age",
            "`metadata_max_age` under a second would ask the metadata before every request",
            "write a duration of a second or more, like metadata_max_age = \"5m\"",
        ));
    }
    Ok(Settings {
        brokers: o.brokers,
        topic,
        format: o.format,
        mode,
        offsets_topic,
        metrics_topic,
        metrics_format: o.metrics_format,
        security,
        metadata_max_age,
    })
}

/// Checks the keys of the sink.
fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let k = settings(s)?;
    // A transaction commits a source's positions with its lines: another
    // sink of the same source would move the source on by its own acks.
    s.exclusive_logs = k.mode == Mode::ExactlyOnce;
    let Some(net) = s.net.as_mut() else {
        return Ok(());
    };
    if let Buffer::Disk { .. } = net.buffer {
        return Err(ConfigError::new(
            "buffer",
            "kafka keeps no disk buffer: the lines wait in their files while Kafka is away",
            "remove `buffer`, or write buffer = { type = \"memory\", max_size = \"64MiB\" } to bound the metric windows waiting for Kafka",
        ));
    }
    net.target = format!("{}/{}", k.brokers.join(","), k.topic);
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let k = settings(s).map_err(|e| anyhow::anyhow!("sink {}: {e}", s.name))?;
    let net = s
        .net
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("sink {} has no network settings", s.name))?;
    // Each side has producers of its own: only the sides the sink takes
    // start.
    let mut running = match k.mode {
        _ if st.sources.is_empty() => Running {
            windows: None,
            profiles: None,
            logs: Vec::new(),
            threads: Vec::new(),
        },
        Mode::AtLeastOnce => at_least_once::start(&k, net, st)?,
        Mode::ExactlyOnce => exactly_once::start(&k, net, st)?,
    };
    if s.takes_metrics() {
        let windows = metrics::start(s, &k, k.metrics_format, net, st)?;
        running.windows = windows.windows;
        running.threads.extend(windows.threads);
    }
    Ok(running)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::parse;
    use sonde_encode::compress::Compression;

    const HEAD: &str = "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"kafka\"\n";

    fn sink(keys: &str) -> Result<Sink, ConfigError> {
        parse(&format!("{HEAD}{keys}")).map(|mut c| c.sinks.remove(0))
    }

    #[test]
    fn defaults_are_raw_at_least_once_and_lz4() {
        let s = sink("brokers = [\"k1:9092\", \"k2:9092\"]\ntopic = \"logs\"\n").unwrap();
        assert_eq!(
            settings(&s).unwrap(),
            Settings {
                brokers: vec!["k1:9092".into(), "k2:9092".into()],
                topic: "logs".into(),
                format: Format::Raw,
                mode: Mode::AtLeastOnce,
                offsets_topic: DEFAULT_OFFSETS_TOPIC.into(),
                metrics_topic: "logs".into(),
                metrics_format: PointFormat::Json,
                security: Default::default(),
                metadata_max_age: Duration::from_secs(300),
            }
        );
        assert!(!s.exclusive_logs);
        let net = s.net.as_ref().unwrap();
        assert_eq!(net.compression, Compression::Lz4);
        assert_eq!(net.target, "k1:9092,k2:9092/logs");
    }

    #[test]
    fn exactly_once_json_with_an_offsets_topic_and_zstd() {
        let s = sink("brokers = [\"k:9092\"]\ntopic = \"logs\"\nformat = \"json\"\ndelivery = \"exactly_once\"\noffsets_topic = \"pos\"\ncompression = \"zstd\"\ncompression_level = 3\n").unwrap();
        let k = settings(&s).unwrap();
        assert_eq!((k.format, k.mode), (Format::Json, Mode::ExactlyOnce));
        assert!(s.exclusive_logs);
        assert_eq!(k.offsets_topic, "pos");
        assert_eq!(
            s.net.as_ref().unwrap().compression,
            Compression::Zstd { level: 3 }
        );
    }

    #[test]
    fn brokers_are_host_port_without_a_scheme() {
        let e = parse(&format!(
            "{HEAD}brokers = [\"kafka://127.0.0.1:9092\"]\ntopic = \"logs\"\n"
        ))
        .unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].brokers[0]", Some(6)));
        assert!(e.problem.contains("\"kafka://127.0.0.1:9092\""), "{e}");
        assert_eq!(e.fix, "write \"127.0.0.1:9092\", without kafka://");
        for bad in [
            "127.0.0.1",
            "127.0.0.1:0",
            "127.0.0.1:99999",
            ":9092",
            "a b:9092",
            "k/1:9092",
            "::1:9092",
            "[nope]:9092",
        ] {
            let e = sink(&format!("brokers = [{bad:?}]\ntopic = \"logs\"\n")).unwrap_err();
            assert_eq!(e.key, "sinks[0].brokers[0]", "{bad}");
            assert!(e.fix.contains("\"HOST:PORT\""), "{bad}: {e}");
        }
        for good in [
            "127.0.0.1:9092",
            "kafka-1.example.com:9092",
            "[::1]:9092",
            "k_2:1",
        ] {
            sink(&format!("brokers = [{good:?}]\ntopic = \"logs\"\n"))
                .unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    #[test]
    fn every_bad_key_is_named_at_its_line() {
        let ok = "brokers = [\"k:9092\"]\ntopic = \"logs\"\n";
        for (keys, key, line) in [
            ("topic = \"logs\"\n", "sinks[0].brokers", 4),
            (
                "brokers = \"k:9092\"\ntopic = \"logs\"\n",
                "sinks[0].brokers",
                6,
            ),
            ("brokers = []\ntopic = \"logs\"\n", "sinks[0].brokers", 6),
            (
                "brokers = [\"k:9092\", \"nope\"]\ntopic = \"logs\"\n",
                "sinks[0].brokers[1]",
                6,
            ),
            (
                "brokers = [9092]\ntopic = \"logs\"\n",
                "sinks[0].brokers[0]",
                6,
            ),
            ("brokers = [\"k:9092\"]\n", "sinks[0].topic", 4),
            (
                "brokers = [\"k:9092\"]\ntopic = \"a b\"\n",
                "sinks[0].topic",
                7,
            ),
            (&format!("{ok}format = \"xml\"\n"), "sinks[0].format", 8),
            (
                &format!("{ok}delivery = \"twice\"\n"),
                "sinks[0].delivery",
                8,
            ),
            (&format!("{ok}delivery = 1\n"), "sinks[0].delivery", 8),
            (
                &format!("{ok}offsets_topic = \"pos\"\n"),
                "sinks[0].offsets_topic",
                8,
            ),
            (
                &format!("{ok}delivery = \"exactly_once\"\noffsets_topic = \"logs\"\n"),
                "sinks[0].offsets_topic",
                9,
            ),
            (
                &format!("{ok}compression = \"brotli\"\n"),
                "sinks[0].compression",
                8,
            ),
            (
                &format!("{ok}buffer = {{ type = \"disk\" }}\n"),
                "sinks[0].buffer",
                8,
            ),
            (&format!("{ok}url = \"http://k\"\n"), "sinks[0].url", 8),
            (&format!("{ok}address = \"k:1\"\n"), "sinks[0].address", 8),
            (
                &format!("{ok}max_batch_age = \"soon\"\n"),
                "sinks[0].max_batch_age",
                8,
            ),
        ] {
            let e = sink(keys).unwrap_err();
            assert_eq!((e.key.as_str(), e.line), (key, Some(line)), "{keys}\n{e}");
            assert!(!e.fix.is_empty(), "{e}");
        }
    }
}
