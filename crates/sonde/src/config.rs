//! The configuration file: typed, validated, with errors that name the key
//! and its line.
//!
//! Parsing and validation are one pure step ([`parse`]) that returns a
//! [`Config`]; building the agent from it does the I/O and checks nothing
//! again.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use sonde_aggregate::{AggregateConfig, Bounds, HistogramBuckets};
use sonde_encode::compress::Compression;
use sonde_io::addr::ListenAddr;
use sonde_io::receiver::Protocol;
use sonde_io::receiver::SocketOptions;
use sonde_io::sender::Delivery;
use toml::Spanned;

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

/// A duration written as `"500ms"`, `"10s"`, `"5m"` or `"1h"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("{s:?} is not a duration: write a whole number with a unit, like \"10s\", \"500ms\", \"5m\" or \"1h\"")
        };
        let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().map_err(|_| bad())?;
        let d = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        Ok(HumanDuration(d))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

/// A size written as `"512KiB"`, `"8MiB"`, `"1GiB"` or a number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanSize(pub u64);

impl FromStr for HumanSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("{s:?} is not a size: write a whole number with a unit, like \"512KiB\", \"8MiB\" or \"1GiB\"")
        };
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().map_err(|_| bad())?;
        let mult: u64 = match unit {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            _ => return Err(bad()),
        };
        n.checked_mul(mult).map(HumanSize).ok_or_else(bad)
    }
}

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

/// A listen address, checked while parsing so the error points at its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen(pub ListenAddr);

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Listen).map_err(de::Error::custom)
    }
}

/// A `HOST:PORT` socket address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPort(pub std::net::SocketAddr);

impl<'de> Deserialize<'de> for HostPort {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use std::net::ToSocketAddrs;
        let s = String::deserialize(d)?;
        s.to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(HostPort)
            .ok_or_else(|| {
                de::Error::custom(format!("{s:?} is not HOST:PORT, like \"127.0.0.1:8686\""))
            })
    }
}

fn default_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn default_admin() -> Option<HostPort> {
    Some(HostPort(([127, 0, 0, 1], 8686).into()))
}
fn default_data_dir() -> PathBuf {
    PathBuf::from("/var/lib/sonde")
}
fn default_expire() -> u32 {
    5
}
fn default_max_series() -> Spanned<usize> {
    Spanned::new(0..0, sonde_aggregate::config::DEFAULT_MAX_SERIES)
}

/// `[agent]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// The aggregation window, aligned to the wall clock. Default `"30s"`.
    #[serde(default = "default_interval")]
    pub interval: HumanDuration,
    /// Address of `/health` and `/metrics`. Default `"127.0.0.1:8686"`.
    #[serde(default = "default_admin", deserialize_with = "admin_listen")]
    pub admin_listen: Option<HostPort>,
    /// Where disk buffers live (`buffers/{sink name}/`). Default
    /// `"/var/lib/sonde"`.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Windows without data after which a series is forgotten. Default 5.
    #[serde(default = "default_expire")]
    pub expire_windows: u32,
    /// The most live series the receive workers hold together; points for
    /// new series beyond it are dropped (reason `series_limit`) and the
    /// series already live keep their data. Default 250000 (about 150 MiB).
    #[serde(default = "default_max_series")]
    pub max_series: Spanned<usize>,
    /// The most live series one metric name may have in one receive worker;
    /// beyond it, points for its new series are dropped (reason
    /// `metric_series_limit`). Default: no limit.
    pub max_series_per_metric: Option<Spanned<u32>>,
    /// Lets receivers, `admin_listen` and Prometheus exporters listen on
    /// addresses other than loopback (`127.0.0.0/8`, `::1`), where other
    /// hosts can reach them. Default `false`: such a config is refused.
    #[serde(default)]
    pub allow_non_loopback: bool,
    /// The longest name plus tag string (as sent) of a new series; points
    /// of longer ones are dropped (reason `key_too_long`). Default `"4KiB"`.
    pub max_key_size: Option<Spanned<HumanSize>>,
    /// How much nicer (lower in priority) than the receive threads the
    /// flusher, sink and HTTP threads run, 0 to 19, so that flushing a
    /// window never takes the CPU from receiving when they share a core;
    /// 0 runs every thread alike. Default 10.
    #[serde(default = "default_background_nice")]
    pub background_nice: Spanned<i64>,
}

/// `admin_listen = ""` turns the admin listener off.
fn admin_listen<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HostPort>, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Ok(None);
    }
    HostPort::deserialize(de::value::StrDeserializer::<de::value::Error>::new(&s))
        .map(Some)
        .map_err(de::Error::custom)
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            interval: default_interval(),
            admin_listen: default_admin(),
            data_dir: default_data_dir(),
            expire_windows: default_expire(),
            max_series: default_max_series(),
            max_series_per_metric: None,
            allow_non_loopback: false,
            max_key_size: None,
            background_nice: default_background_nice(),
        }
    }
}

fn default_background_nice() -> Spanned<i64> {
    Spanned::new(0..0, i64::from(sonde_io::priority::DEFAULT_BACKGROUND_NICE))
}

/// The protocol of a receiver.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolName {
    /// metricserver2 msgpack.
    Msgpack,
    /// StatsD / DogStatsD.
    Statsd,
}

/// `[[receivers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverSection {
    /// `msgpack` or `statsd`. Required.
    pub protocol: ProtocolName,
    /// `udp://HOST:PORT`, `unixgram:///path`, `unixseq:///path`, and for
    /// StatsD also `unix:///path` and `tcp://HOST:PORT`. Required.
    pub listen: Spanned<Listen>,
    /// Receive threads, each with its own socket on the same port
    /// (`SO_REUSEPORT`); UDP only. Default 1.
    pub workers: Option<Spanned<usize>>,
    /// Receive buffer of datagram sockets (`SO_RCVBUFFORCE` when running as
    /// root, else `SO_RCVBUF` capped by `net.core.rmem_max`). Default `"8MiB"`.
    pub receive_buffer: Option<HumanSize>,
    /// Permission bits of a unix socket file, in octal, like `"0660"`.
    /// Default `"0666"`: SDK processes run as many users.
    pub mode: Option<Spanned<String>>,
    /// Owner of a unix socket file: a user name or uid. Default: the agent's.
    pub owner: Option<Spanned<String>>,
    /// Group of a unix socket file: a group name or gid. Default: the agent's.
    pub group: Option<Spanned<String>>,
    /// Stream and seqpacket receivers: the most open connections; more are
    /// closed at once and counted. Default 1024.
    pub max_connections: Option<Spanned<usize>>,
}

/// `[[sinks]]`, by `type`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SinkSection {
    /// Human-readable lines on standard output.
    Console {},
    /// JSON lines appended to `path`.
    File {
        /// The file. Required.
        path: PathBuf,
    },
    /// The latest window in Prometheus text format at `http://{listen}/metrics`.
    PrometheusExporter {
        /// `HOST:PORT` to serve on. Required.
        listen: HostPort,
    },
    /// Prometheus remote write 1.0.
    PrometheusRemoteWrite(NetSinkSection),
    /// OTLP/HTTP metrics.
    OtlpHttp(NetSinkSection),
    /// InfluxDB 1.x line protocol over HTTP.
    Influxdb(NetSinkSection),
    /// Graphite plaintext over TCP.
    Graphite(NetSinkSection),
    /// A generic HTTP POST of JSON lines or msgpack.
    Http(NetSinkSection),
    /// JSON lines over a persistent TCP connection.
    Tcp(NetSinkSection),
}

/// The keys of a network sink (every `type` but console, file and
/// prometheus_exporter). Which apply to which type is checked in [`parse`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetSinkSection {
    /// Names the sink in logs, `/metrics` and its disk buffer directory.
    /// Default: the type; required when two sinks share a type.
    pub name: Option<String>,
    /// HTTP sinks: where to POST.
    pub url: Option<String>,
    /// TCP sinks (graphite, tcp): `HOST:PORT`.
    pub address: Option<String>,
    /// influxdb: the database. Required.
    pub database: Option<String>,
    /// http: `"json"` (JSON lines, the default) or `"msgpack"`.
    pub format: Option<String>,
    /// HTTP sinks: extra request headers, e.g. `Authorization`.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// `zstd`, `gzip`, `snappy`, `lz4` or `none`; the default and the
    /// choices depend on what the backend accepts.
    pub compression: Option<String>,
    /// zstd -7..=22 (default 1), gzip 0..=9 (default 1).
    pub compression_level: Option<i32>,
    /// Most points per request. Default 10000.
    pub max_batch_points: Option<usize>,
    /// Most bytes per request before compression. Default `"4MiB"`.
    pub max_batch_bytes: Option<HumanSize>,
    /// How long a partial request waits for more points. Default `"1s"`.
    pub max_batch_age: Option<HumanDuration>,
    /// How long one attempt may take. Default `"10s"`.
    pub request_timeout: Option<HumanDuration>,
    /// First retry delay. Default `"250ms"`.
    pub retry_min_backoff: Option<HumanDuration>,
    /// Longest retry delay. Default `"30s"`.
    pub retry_max_backoff: Option<HumanDuration>,
    /// How long to keep delivering at shutdown. Default `"5s"`.
    pub shutdown_grace: Option<HumanDuration>,
    /// `{ type = "memory", max_size = "64MiB" }` (the default) or
    /// `{ type = "disk", max_size = "1GiB" }`.
    pub buffer: Option<BufferSection>,
}

/// A sink's `buffer = { ... }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferSection {
    /// `"memory"` or `"disk"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Most bytes kept; the oldest requests go first. Default `"64MiB"` in
    /// memory, `"1GiB"` on disk.
    pub max_size: Option<HumanSize>,
    /// Disk only: `fdatasync` every request before counting it buffered.
    /// Default true.
    pub sync: Option<bool>,
}

/// Where a network sink keeps requests not yet delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// In memory, at most this many bytes.
    Memory(u64),
    /// In `{agent.data_dir}/buffers/{name}`.
    Disk {
        /// The sink's directory.
        dir: PathBuf,
        /// Most bytes.
        max_size: u64,
        /// `fdatasync` per request.
        sync: bool,
    },
}

/// What a network sink speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetKind {
    /// Remote write 1.0 to `url`.
    PrometheusRemoteWrite,
    /// OTLP/HTTP to `url`.
    OtlpHttp,
    /// InfluxDB 1.x; the URL already carries `/write?db=..&precision=s`.
    Influxdb,
    /// Graphite plaintext to `address`.
    Graphite,
    /// A generic POST to `url`; msgpack when true, else JSON lines.
    Http {
        /// `format = "msgpack"`.
        msgpack: bool,
    },
    /// JSON lines to `address`.
    Tcp,
}

/// A network sink, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct NetSink {
    /// Its name.
    pub name: String,
    /// Its wire format.
    pub kind: NetKind,
    /// The URL (HTTP sinks) or `HOST:PORT` (TCP sinks).
    pub target: String,
    /// Extra HTTP headers.
    pub headers: Vec<(String, String)>,
    /// The compression.
    pub compression: Compression,
    /// Batching, retries, shutdown.
    pub delivery: Delivery,
    /// Its buffer.
    pub buffer: Buffer,
}

/// A sink, validated.
#[derive(Clone, Debug, PartialEq)]
pub enum Sink {
    /// `console`.
    Console,
    /// `file`.
    File(PathBuf),
    /// `prometheus_exporter`.
    PrometheusExporter(std::net::SocketAddr),
    /// Every network sink.
    Net(NetSink),
}

impl SinkSection {
    fn type_name(&self) -> &'static str {
        match self {
            SinkSection::Console {} => "console",
            SinkSection::File { .. } => "file",
            SinkSection::PrometheusExporter { .. } => "prometheus_exporter",
            SinkSection::PrometheusRemoteWrite(_) => "prometheus_remote_write",
            SinkSection::OtlpHttp(_) => "otlp_http",
            SinkSection::Influxdb(_) => "influxdb",
            SinkSection::Graphite(_) => "graphite",
            SinkSection::Http(_) => "http",
            SinkSection::Tcp(_) => "tcp",
        }
    }
}

fn compression_named(name: &str, level: Option<i32>) -> Option<Compression> {
    Some(match name {
        "none" => Compression::None,
        "zstd" => Compression::Zstd {
            level: level.unwrap_or(1),
        },
        "gzip" => Compression::Gzip {
            level: u32::try_from(level.unwrap_or(1)).ok()?,
        },
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        _ => return None,
    })
}

/// Validates one network sink. `key` is `sinks[i]`.
fn net_sink(
    text: &str,
    span: std::ops::Range<usize>,
    key: &str,
    type_name: &'static str,
    s: &NetSinkSection,
    data_dir: &std::path::Path,
) -> Result<NetSink, ConfigError> {
    let err = |field: &str, msg: String| at(text, span.clone(), &format!("{key}.{field}"), msg);
    let http = matches!(
        type_name,
        "prometheus_remote_write" | "otlp_http" | "influxdb" | "http"
    );
    // (default compression, the ones the backend accepts)
    let (default_comp, accepted): (&str, &[&str]) = match type_name {
        // Remote write 1.0 mandates snappy (block format).
        "prometheus_remote_write" => ("snappy", &["snappy"]),
        // The OTLP spec requires receivers to take gzip; zstd only some do.
        "otlp_http" => ("gzip", &["gzip", "zstd", "none"]),
        // InfluxDB 1.x decodes gzip only.
        "influxdb" => ("gzip", &["gzip", "none"]),
        // carbon reads plain text.
        "graphite" => ("none", &["none"]),
        "http" => ("zstd", &["zstd", "gzip", "snappy", "lz4", "none"]),
        // A stream of frames: snappy's block format cannot be streamed.
        _ => ("none", &["none", "zstd", "gzip", "lz4"]),
    };
    let comp_name = s.compression.as_deref().unwrap_or(default_comp);
    if !accepted.contains(&comp_name) {
        return Err(err(
            "compression",
            format!(
                "{type_name} takes {} (got {comp_name:?})",
                accepted
                    .iter()
                    .map(|c| format!("\"{c}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let compression = compression_named(comp_name, s.compression_level)
        .filter(|c| match c {
            Compression::Zstd { level } => (-7..=22).contains(level),
            Compression::Gzip { level } => *level <= 9,
            _ => s.compression_level.is_none(),
        })
        .ok_or_else(|| {
            err(
                "compression_level",
                format!("out of range for {comp_name}: zstd takes -7 to 22, gzip 0 to 9, the others none"),
            )
        })?;
    let target = if http {
        if s.address.is_some() {
            return Err(err(
                "address",
                format!("{type_name} takes `url`, not `address`"),
            ));
        }
        let url = s.url.as_deref().ok_or_else(|| {
            err(
                "url",
                format!("{type_name} needs a url, like \"http://127.0.0.1:8080/...\""),
            )
        })?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(err(
                "url",
                format!("{url:?} must start with http:// or https://"),
            ));
        }
        url.to_string()
    } else {
        if s.url.is_some() {
            return Err(err(
                "url",
                format!("{type_name} takes `address` (HOST:PORT), not `url`"),
            ));
        }
        let a = s.address.as_deref().ok_or_else(|| {
            err(
                "address",
                format!("{type_name} needs an address, like \"127.0.0.1:2003\""),
            )
        })?;
        match a.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => a.to_string(),
            _ => return Err(err("address", format!("{a:?} is not HOST:PORT"))),
        }
    };
    if !http && !s.headers.is_empty() {
        return Err(err(
            "headers",
            format!("{type_name} is not HTTP and takes no headers"),
        ));
    }
    if s.database.is_some() && type_name != "influxdb" {
        return Err(err(
            "database",
            "only the influxdb sink takes `database`".into(),
        ));
    }
    if s.format.is_some() && type_name != "http" {
        return Err(err("format", "only the http sink takes `format`".into()));
    }
    let kind = match type_name {
        "prometheus_remote_write" => NetKind::PrometheusRemoteWrite,
        "otlp_http" => NetKind::OtlpHttp,
        "influxdb" => NetKind::Influxdb,
        "graphite" => NetKind::Graphite,
        "http" => match s.format.as_deref().unwrap_or("json") {
            "json" => NetKind::Http { msgpack: false },
            "msgpack" => NetKind::Http { msgpack: true },
            f => return Err(err("format", format!("{f:?}: use \"json\" or \"msgpack\""))),
        },
        _ => NetKind::Tcp,
    };
    let target = if kind == NetKind::Influxdb {
        let db = s
            .database
            .as_deref()
            .filter(|d| !d.is_empty())
            .ok_or_else(|| {
                err(
                    "database",
                    "influxdb needs a database, like \"sonde\"".into(),
                )
            })?;
        let mut t = format!("{}/write?db=", target.trim_end_matches('/'));
        for b in db.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                t.push(b as char);
            } else {
                t.push_str(&format!("%{b:02X}"));
            }
        }
        t.push_str("&precision=s");
        t
    } else {
        target
    };
    let name = s.name.clone().unwrap_or_else(|| type_name.to_string());
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        || name.starts_with('.')
    {
        return Err(err(
            "name",
            format!("{name:?}: use letters, digits, `_`, `-` and `.`"),
        ));
    }
    let d = Delivery::default();
    let delivery = Delivery {
        max_batch_points: s.max_batch_points.unwrap_or(d.max_batch_points),
        max_batch_bytes: s.max_batch_bytes.map_or(d.max_batch_bytes, |b| {
            usize::try_from(b.0).unwrap_or(usize::MAX)
        }),
        max_batch_age: s.max_batch_age.map_or(d.max_batch_age, |x| x.0),
        request_timeout: s.request_timeout.map_or(d.request_timeout, |x| x.0),
        backoff_min: s.retry_min_backoff.map_or(d.backoff_min, |x| x.0),
        backoff_max: s.retry_max_backoff.map_or(d.backoff_max, |x| x.0),
        shutdown_grace: s.shutdown_grace.map_or(d.shutdown_grace, |x| x.0),
    };
    if delivery.max_batch_points == 0 || delivery.max_batch_bytes == 0 {
        return Err(err(
            "max_batch_points",
            "batch limits must be above zero".into(),
        ));
    }
    if delivery.request_timeout.is_zero() || delivery.backoff_min.is_zero() {
        return Err(err(
            "request_timeout",
            "request_timeout and retry_min_backoff must be above zero".into(),
        ));
    }
    let buffer = match &s.buffer {
        None => Buffer::Memory(64 << 20),
        Some(b) => match b.kind.as_str() {
            "memory" => {
                if b.sync.is_some() {
                    return Err(err("buffer.sync", "only a disk buffer takes `sync`".into()));
                }
                Buffer::Memory(b.max_size.map_or(64 << 20, |x| x.0))
            }
            "disk" => Buffer::Disk {
                dir: data_dir.join("buffers").join(&name),
                max_size: b.max_size.map_or(1 << 30, |x| x.0),
                sync: b.sync.unwrap_or(true),
            },
            k => {
                return Err(err(
                    "buffer.type",
                    format!("{k:?}: use \"memory\" or \"disk\""),
                ))
            }
        },
    };
    let content_type_set = s.headers.keys().any(|k| {
        k.eq_ignore_ascii_case("content-type") || k.eq_ignore_ascii_case("content-encoding")
    });
    if content_type_set {
        return Err(err(
            "headers",
            "Content-Type and Content-Encoding are set by the sink".into(),
        ));
    }
    Ok(NetSink {
        name,
        kind,
        target,
        headers: s
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        compression,
        delivery,
        buffer,
    })
}

/// `[[histograms.overrides]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistogramOverride {
    /// Metric names starting with this use `buckets`. Required.
    pub prefix: String,
    /// Upper bounds, strictly increasing. Required.
    pub buckets: Spanned<Vec<f64>>,
}

/// `[histograms]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct HistogramSection {
    /// Bucket upper bounds for every histogram. Default:
    /// 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 25 50 100 250 500 1000.
    pub buckets: Option<Spanned<Vec<f64>>>,
    /// Per-prefix bounds; the longest matching prefix wins. Default none.
    #[serde(default)]
    pub overrides: Vec<HistogramOverride>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agent: AgentSection,
    #[serde(default)]
    receivers: Vec<Spanned<ReceiverSection>>,
    #[serde(default)]
    sinks: Vec<Spanned<SinkSection>>,
    #[serde(default)]
    histograms: HistogramSection,
}

/// A receiver, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receiver {
    /// The protocol.
    pub protocol: Protocol,
    /// The address.
    pub listen: ListenAddr,
    /// Workers, socket buffer, unix file mode (owner and group are
    /// resolved to ids when the agent starts, from `owner` and `group`).
    pub options: SocketOptions,
    /// User name or uid for the unix socket file.
    pub owner: Option<String>,
    /// Group name or gid for the unix socket file.
    pub group: Option<String>,
}

/// A validated configuration.
#[derive(Debug)]
pub struct Config {
    /// `[agent]`.
    pub agent: AgentSection,
    /// Receivers, in file order.
    pub receivers: Vec<Receiver>,
    /// Sinks, in file order.
    pub sinks: Vec<Sink>,
    /// What the aggregator needs.
    pub aggregate: AggregateConfig,
}

/// A configuration error, with the line it is on when known.
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line of the key an error is about. Errors inside a tagged table
/// (`[[sinks]]`) carry the whole table's span; the key named in the
/// message (`unknown field `x``, or `type` for an unknown variant) is found
/// inside it so the line points at the key, not the table header.
fn refine_line(text: &str, span: std::ops::Range<usize>, msg: &str) -> usize {
    let quoted = |prefix: &str| {
        let rest = &msg[msg.find(prefix)? + prefix.len()..];
        Some(rest[..rest.find('`')?].to_string())
    };
    let key = quoted("unknown field `")
        .or_else(|| quoted("unknown variant `").map(|_| "type".to_string()));
    let first = line_of(text, span.start);
    if let Some(key) = key {
        // The table runs until the next header.
        for (i, l) in text.lines().enumerate().skip(first - 1) {
            let l = l.trim_start();
            if i + 1 > first && l.starts_with('[') {
                break;
            }
            if l.strip_prefix(key.as_str())
                .is_some_and(|r| r.trim_start().starts_with('='))
            {
                return i + 1;
            }
        }
    }
    first
}

fn at(text: &str, span: std::ops::Range<usize>, key: &str, msg: impl fmt::Display) -> ConfigError {
    ConfigError(format!("line {}: {key}: {msg}", line_of(text, span.start)))
}

fn bounds(text: &str, key: &str, b: &Spanned<Vec<f64>>) -> Result<Bounds, ConfigError> {
    let v = b.get_ref();
    if v.is_empty() {
        return Err(at(text, b.span(), key, "needs at least one bound"));
    }
    if v.iter().any(|x| !x.is_finite()) || v.windows(2).any(|w| w[0] >= w[1]) {
        return Err(at(
            text,
            b.span(),
            key,
            "bounds must be finite and strictly increasing (+Inf is added for you)",
        ));
    }
    Ok(Bounds::new(v))
}

/// True for addresses only this host can reach: `127.0.0.0/8`, `::1`,
/// and IPv4 loopback mapped into IPv6.
fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Refuses a network listen address other hosts can reach, unless
/// `agent.allow_non_loopback` says so. `line` 0 means unknown.
fn check_loopback(
    allowed: bool,
    key: &str,
    addr: Option<std::net::SocketAddr>,
    line: usize,
) -> Result<(), ConfigError> {
    let Some(addr) = addr else { return Ok(()) };
    if allowed || is_loopback(addr.ip()) {
        return Ok(());
    }
    let at = if line == 0 {
        String::new()
    } else {
        format!("line {line}: ")
    };
    Err(ConfigError(format!(
        "{at}{key}: {addr} is reachable from other hosts; listen on 127.0.0.1 or ::1, \
         or set `allow_non_loopback = true` in [agent] to allow it"
    )))
}

/// Parses an octal permission string like `"0660"`.
fn socket_mode(text: &str, m: &Spanned<String>, key: &str) -> Result<u32, ConfigError> {
    let s = m.get_ref();
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(v) if v <= 0o777 && !digits.is_empty() => Ok(v),
        _ => Err(at(
            text,
            m.span(),
            key,
            format!("{s:?} is not a file mode: write octal permission bits, like \"0660\""),
        )),
    }
}

/// Parses and validates a configuration file's text.
///
/// # Errors
///
/// A message naming the key, its line and what to write instead: TOML
/// syntax, unknown keys, bad durations or addresses, duplicate listen
/// addresses, a protocol on a transport it cannot use, no receivers or no
/// sinks, bad histogram bounds.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let file: File = toml::from_str(text).map_err(|e| {
        let msg = e.message().trim_end().to_string();
        match e.span() {
            Some(span) => {
                let line = refine_line(text, span, &msg);
                let src = text.lines().nth(line - 1).unwrap_or("").trim();
                ConfigError(format!("line {line}: {msg}\n    | {src}"))
            }
            None => ConfigError(msg),
        }
    })?;
    let agent = file.agent;
    if agent.interval.0 < Duration::from_millis(100)
        || agent.interval.0 > Duration::from_secs(86_400)
    {
        return Err(ConfigError(
            "agent.interval: must be between \"100ms\" and \"24h\"".into(),
        ));
    }
    if agent.expire_windows == 0 {
        return Err(ConfigError(
            "agent.expire_windows: must be at least 1".into(),
        ));
    }
    if *agent.max_series.get_ref() == 0 {
        return Err(at(
            text,
            agent.max_series.span(),
            "agent.max_series",
            "must be at least 1",
        ));
    }
    if let Some(m) = &agent.max_series_per_metric {
        if *m.get_ref() == 0 {
            return Err(at(
                text,
                m.span(),
                "agent.max_series_per_metric",
                "must be at least 1 (leave it out for no limit)",
            ));
        }
    }
    let mut max_key_bytes = sonde_aggregate::config::DEFAULT_MAX_KEY_BYTES;
    if let Some(m) = &agent.max_key_size {
        max_key_bytes = usize::try_from(m.get_ref().0).unwrap_or(usize::MAX);
        if !(16..=(64 << 10)).contains(&max_key_bytes) {
            return Err(at(
                text,
                m.span(),
                "agent.max_key_size",
                "must be between \"16B\" and \"64KiB\"",
            ));
        }
    }
    if !(0..=19).contains(agent.background_nice.get_ref()) {
        return Err(at(
            text,
            agent.background_nice.span(),
            "agent.background_nice",
            "must be between 0 (same priority as receiving) and 19 (lowest)",
        ));
    }
    if file.receivers.is_empty() {
        return Err(ConfigError(
            "no [[receivers]]: add one, e.g.\n[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"".into(),
        ));
    }
    if file.sinks.is_empty() {
        return Err(ConfigError(
            "no [[sinks]]: add one, e.g.\n[[sinks]]\ntype = \"console\"".into(),
        ));
    }
    let mut seen: HashMap<ListenAddr, usize> = HashMap::new();
    let mut receivers = Vec::new();
    for (i, r) in file.receivers.iter().enumerate() {
        let r = r.get_ref();
        let listen = &r.listen.get_ref().0;
        let key = format!("receivers[{i}].listen");
        let line = line_of(text, r.listen.span().start);
        if let Some(first) = seen.insert(listen.clone(), line) {
            return Err(at(
                text,
                r.listen.span(),
                &key,
                format!("{listen} is already used on line {first}"),
            ));
        }
        let protocol = match r.protocol {
            ProtocolName::Msgpack => Protocol::Msgpack,
            ProtocolName::Statsd => Protocol::Statsd,
        };
        if protocol == Protocol::Msgpack
            && matches!(listen, ListenAddr::Tcp(_) | ListenAddr::Unix(_))
        {
            return Err(at(
                text,
                r.listen.span(),
                &key,
                "msgpack needs message boundaries: use udp://, unixgram:// or unixseq://",
            ));
        }
        let mut options = SocketOptions::default();
        if let Some(w) = &r.workers {
            let key = format!("receivers[{i}].workers");
            let n = *w.get_ref();
            if !(1..=64).contains(&n) {
                return Err(at(text, w.span(), &key, "must be between 1 and 64"));
            }
            if n > 1 && !matches!(listen, ListenAddr::Udp(_)) {
                return Err(at(
                    text,
                    w.span(),
                    &key,
                    "several workers share a port with SO_REUSEPORT, which only udp:// supports",
                ));
            }
            options.workers = n;
        }
        if let Some(b) = r.receive_buffer {
            options.receive_buffer = usize::try_from(b.0).unwrap_or(usize::MAX);
        }
        if let Some(m) = &r.mode {
            options.mode = socket_mode(text, m, &format!("receivers[{i}].mode"))?;
        }
        if let Some(m) = &r.max_connections {
            if listen.is_datagram() || *m.get_ref() == 0 {
                return Err(at(
                    text,
                    m.span(),
                    &format!("receivers[{i}].max_connections"),
                    "takes a number above 0, for tcp://, unix:// and unixseq:// receivers",
                ));
            }
            options.max_connections = *m.get_ref();
        }
        for (field, value) in [("mode", &r.mode), ("owner", &r.owner), ("group", &r.group)] {
            if let (Some(v), None) = (value, listen.unix_path()) {
                return Err(at(
                    text,
                    v.span(),
                    &format!("receivers[{i}].{field}"),
                    "applies to unix socket files only (unixgram://, unixseq://, unix://)",
                ));
            }
        }
        check_loopback(agent.allow_non_loopback, &key, listen.socket_addr(), line)?;
        receivers.push(Receiver {
            protocol,
            listen: listen.clone(),
            options,
            owner: r.owner.as_ref().map(|o| o.get_ref().clone()),
            group: r.group.as_ref().map(|g| g.get_ref().clone()),
        });
    }
    if let Some(a) = agent.admin_listen {
        check_loopback(agent.allow_non_loopback, "agent.admin_listen", Some(a.0), 0)?;
    }
    for (i, s) in file.sinks.iter().enumerate() {
        if let SinkSection::PrometheusExporter { listen } = s.get_ref() {
            let key = format!("sinks[{i}].listen");
            let line = line_of(text, s.span().start);
            check_loopback(agent.allow_non_loopback, &key, Some(listen.0), line)?;
        }
    }
    let mut exporters: HashMap<std::net::SocketAddr, usize> = HashMap::new();
    if let Some(a) = agent.admin_listen {
        exporters.insert(a.0, 0);
    }
    let mut sinks = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, s) in file.sinks.iter().enumerate() {
        let key = format!("sinks[{i}]");
        let sink = match s.get_ref() {
            SinkSection::Console {} => Sink::Console,
            SinkSection::File { path } => Sink::File(path.clone()),
            SinkSection::PrometheusExporter { listen } => {
                if exporters.insert(listen.0, i + 1).is_some() {
                    return Err(at(
                        text,
                        s.span(),
                        &format!("{key}.listen"),
                        format!("{} is already used by another listener", listen.0),
                    ));
                }
                Sink::PrometheusExporter(listen.0)
            }
            SinkSection::PrometheusRemoteWrite(n)
            | SinkSection::OtlpHttp(n)
            | SinkSection::Influxdb(n)
            | SinkSection::Graphite(n)
            | SinkSection::Http(n)
            | SinkSection::Tcp(n) => {
                let net = net_sink(
                    text,
                    s.span(),
                    &key,
                    s.get_ref().type_name(),
                    n,
                    &agent.data_dir,
                )?;
                if let Some(j) = names.insert(net.name.clone(), i) {
                    return Err(at(
                        text,
                        s.span(),
                        &format!("{key}.name"),
                        format!(
                            "{:?} is also the name of sinks[{j}]; give each a distinct `name`",
                            net.name
                        ),
                    ));
                }
                Sink::Net(net)
            }
        };
        sinks.push(sink);
    }
    let mut overrides = Vec::new();
    for (i, o) in file.histograms.overrides.iter().enumerate() {
        overrides.push((
            o.prefix.clone(),
            bounds(
                text,
                &format!("histograms.overrides[{i}].buckets"),
                &o.buckets,
            )?,
        ));
    }
    let default = match &file.histograms.buckets {
        Some(b) => bounds(text, "histograms.buckets", b)?,
        None => Bounds::new(&sonde_aggregate::config::DEFAULT_BUCKETS),
    };
    let aggregate = AggregateConfig {
        interval: agent.interval.0,
        expire_windows: agent.expire_windows,
        histograms: HistogramBuckets::new(default, overrides),
        max_series: *agent.max_series.get_ref(),
        max_series_per_metric: agent.max_series_per_metric.as_ref().map(|m| *m.get_ref()),
        max_key_bytes,
        ..AggregateConfig::default()
    };
    Ok(Config {
        agent,
        receivers,
        sinks,
        aggregate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    const MIN: &str = "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"console\"\n";

    fn net(extra: &str) -> NetSink {
        let c = parse(&format!("{MIN}[[sinks]]\n{extra}")).unwrap();
        match c.sinks.into_iter().nth(1) {
            Some(Sink::Net(n)) => n,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn network_sinks_default_to_what_their_backend_accepts() {
        let rw = net(
            "type = \"prometheus_remote_write\"\nurl = \"http://127.0.0.1:9090/api/v1/write\"\n",
        );
        assert_eq!(
            (rw.name.as_str(), rw.compression),
            ("prometheus_remote_write", Compression::Snappy)
        );
        assert_eq!(rw.buffer, Buffer::Memory(64 << 20));
        assert_eq!(rw.delivery, Delivery::default());
        let influx =
            net("type = \"influxdb\"\nurl = \"http://127.0.0.1:8086/\"\ndatabase = \"my db\"\n");
        assert_eq!(
            influx.target,
            "http://127.0.0.1:8086/write?db=my%20db&precision=s"
        );
        assert_eq!(influx.compression, Compression::Gzip { level: 1 });
        let http = net("type = \"http\"\nurl = \"https://example.com/in\"\nformat = \"msgpack\"\ncompression_level = 3\n");
        assert_eq!(http.kind, NetKind::Http { msgpack: true });
        assert_eq!(http.compression, Compression::Zstd { level: 3 });
        let tcp = net("type = \"tcp\"\naddress = \"localhost:9000\"\nmax_batch_points = 5\nmax_batch_age = \"0s\"\nbuffer = { type = \"disk\", max_size = \"2GiB\" }\n");
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
        let g = net("type = \"graphite\"\naddress = \"127.0.0.1:2003\"\nname = \"carbon-a\"\n");
        assert_eq!((g.name.as_str(), g.kind), ("carbon-a", NetKind::Graphite));
    }

    #[test]
    fn network_sink_mistakes_name_the_key_and_the_fix() {
        let e = |extra: &str| err(&format!("{MIN}[[sinks]]\n{extra}"));
        assert!(e(
            "type = \"prometheus_remote_write\"\nurl = \"http://a:1/\"\ncompression = \"zstd\"\n"
        )
        .contains("sinks[1].compression: prometheus_remote_write takes \"snappy\""));
        assert!(e("type = \"influxdb\"\nurl = \"http://a:1\"\n").contains("sinks[1].database"));
        assert!(e("type = \"graphite\"\nurl = \"http://a:1\"\n").contains("takes `address`"));
        assert!(e("type = \"http\"\naddress = \"a:1\"\n").contains("takes `url`"));
        assert!(e("type = \"http\"\nurl = \"ftp://a\"\n").contains("http:// or https://"));
        assert!(e("type = \"tcp\"\naddress = \"nowhere\"\n").contains("not HOST:PORT"));
        assert!(
            e("type = \"http\"\nurl = \"http://a:1\"\ncompression_level = 40\n")
                .contains("compression_level")
        );
        assert!(
            e("type = \"http\"\nurl = \"http://a:1\"\nbuffer = { type = \"tape\" }\n")
                .contains("buffer.type")
        );
        assert!(e(
            "type = \"http\"\nurl = \"http://a:1\"\nheaders = { \"Content-Type\" = \"x\" }\n"
        )
        .contains("set by the sink"));
        assert!(e("type = \"http\"\nurl = \"http://a:1\"\nbatch_size = 1\n")
            .contains("unknown field `batch_size`"));
        let two = "type = \"http\"\nurl = \"http://a:1\"\n[[sinks]]\ntype = \"http\"\nurl = \"http://b:1\"\n";
        assert!(e(two).contains("sinks[2].name: \"http\" is also the name of sinks[1]"));
    }

    #[test]
    fn the_embedded_defaults_parse() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.receivers.len(), 3);
        assert_eq!(c.aggregate.interval, Duration::from_secs(30));
        assert!(matches!(c.sinks[..], [Sink::Console]));
    }

    #[test]
    fn unknown_keys_name_the_key_and_line() {
        let e = err(&format!(
            "{MIN}[agent]\ninterval = \"10s\"\nintervall = \"5s\"\n"
        ));
        assert!(e.contains("line 8"), "{e}");
        assert!(e.contains("intervall"), "{e}");
        let e = err(&format!("{MIN}path = \"x\"\n"));
        assert!(e.contains("line 6") && e.contains("path"), "{e}");
    }

    #[test]
    fn bad_durations_name_the_line_and_the_fix() {
        let e = err(&format!("[agent]\ninterval = \"10 sec\"\n{MIN}"));
        assert!(e.contains("line 2") && e.contains("\"10s\""), "{e}");
    }

    #[test]
    fn bad_addresses_name_the_line() {
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp:/127.0.0.1\"\n[[sinks]]\ntype = \"console\"\n");
        assert!(e.contains("line 3") && e.contains("unknown scheme"), "{e}");
    }

    #[test]
    fn duplicate_listen_addresses_name_both_lines() {
        let e = err(&format!(
            "{MIN}[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:8125\"\n"
        ));
        assert!(e.contains("line 8") && e.contains("line 3"), "{e}");
    }

    #[test]
    fn msgpack_over_a_stream_is_refused() {
        let e = err("[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"tcp://127.0.0.1:9000\"\n[[sinks]]\ntype = \"console\"\n");
        assert!(e.contains("line 3") && e.contains("msgpack"), "{e}");
    }

    #[test]
    fn unknown_sink_types_and_sink_keys_are_errors() {
        let e = err(&format!("{MIN}[[sinks]]\ntype = \"kafka\"\n"));
        assert!(e.contains("line 7") && e.contains("kafka"), "{e}");
        let e = err(&format!(
            "{MIN}[[sinks]]\ntype = \"file\"\npath = \"a\"\nmode = 1\n"
        ));
        assert!(e.contains("mode"), "{e}");
    }

    #[test]
    fn histogram_bounds_must_increase() {
        let e = err(&format!("{MIN}[histograms]\nbuckets = [1, 5, 2]\n"));
        assert!(e.contains("line 7") && e.contains("increasing"), "{e}");
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
        let e = err(&format!("[agent]\nmax_series = 0\n{MIN}"));
        assert!(
            e.contains("line 2") && e.contains("agent.max_series"),
            "{e}"
        );
        let e = err(&format!("[agent]\n\nmax_series_per_metric = 0\n{MIN}"));
        assert!(
            e.contains("line 3") && e.contains("agent.max_series_per_metric"),
            "{e}"
        );
        assert!(err(&format!("[agent]\nmax_series = -1\n{MIN}")).contains("line 2"));
        assert_eq!(parse(MIN).unwrap().aggregate.max_key_bytes, 4096);
        let c = parse(&format!("[agent]\nmax_key_size = \"1KiB\"\n{MIN}")).unwrap();
        assert_eq!(c.aggregate.max_key_bytes, 1024);
        let e = err(&format!("[agent]\nmax_key_size = \"1MiB\"\n{MIN}"));
        assert!(
            e.contains("line 2") && e.contains("agent.max_key_size"),
            "{e}"
        );
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
            assert!(
                e.contains("line 3")
                    && e.contains("receivers[0].listen")
                    && e.contains("allow_non_loopback = true"),
                "{e}"
            );
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
        assert!(
            e.contains("agent.admin_listen") && e.contains("allow_non_loopback"),
            "{e}"
        );
        let e = err(&format!(
            "{MIN}[[sinks]]\ntype = \"prometheus_exporter\"\nlisten = \"0.0.0.0:9102\"\n"
        ));
        assert!(e.contains("line 6") && e.contains("sinks[1].listen"), "{e}");
        // The embedded defaults listen on loopback only.
        assert_eq!(
            parse(DEFAULT_CONFIG).unwrap().agent.admin_listen.unwrap().0,
            ([127, 0, 0, 1], 8686).into()
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
            let e = err(&format!(
                "{unix}mode = {bad}\n[[sinks]]\ntype = \"console\"\n"
            ));
            assert!(
                e.contains("line 4") && e.contains("receivers[0].mode"),
                "{bad}: {e}"
            );
        }
        let e = err(&MIN.replace(
            "listen = \"udp://127.0.0.1:8125\"\n",
            "listen = \"udp://127.0.0.1:8125\"\nmode = \"0600\"\n",
        ));
        assert!(
            e.contains("line 4") && e.contains("unix socket files only"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_admin_listen_turns_it_off() {
        let c = parse(&format!("[agent]\nadmin_listen = \"\"\n{MIN}")).unwrap();
        assert!(c.agent.admin_listen.is_none());
    }

    #[test]
    fn no_receivers_or_no_sinks_is_an_error() {
        assert!(err("[[sinks]]\ntype = \"console\"\n").contains("no [[receivers]]"));
        assert!(
            err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:1\"\n")
                .contains("no [[sinks]]")
        );
    }

    #[test]
    fn every_example_config_parses() {
        parse(include_str!("../../../examples/sonde.toml")).unwrap();
        // Every TOML block of the README that has receivers is a full config.
        let readme = include_str!("../../../README.md");
        let mut checked = 0;
        for block in readme.split("```toml\n").skip(1) {
            let block = block.split("```").next().unwrap();
            if block.contains("[[receivers]]") {
                parse(block).unwrap_or_else(|e| panic!("README block fails: {e}\n{block}"));
                checked += 1;
            }
        }
        assert!(
            checked >= 1,
            "the README's configuration example was not found"
        );
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
        assert!(e.contains("line 4") && e.contains("udp://"), "{e}");
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nworkers = 0\n[[sinks]]\ntype = \"console\"\n");
        assert!(e.contains("line 4"), "{e}");
        let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nreceive_buffer = \"8 MB\"\n[[sinks]]\ntype = \"console\"\n");
        assert!(e.contains("line 4") && e.contains("MiB"), "{e}");
    }

    #[test]
    fn sizes_take_binary_units() {
        for (s, n) in [
            ("512", 512),
            ("4KiB", 4096),
            ("8MiB", 8 << 20),
            ("1GiB", 1 << 30),
        ] {
            assert_eq!(s.parse::<HumanSize>().unwrap().0, n);
        }
        for s in ["", "MiB", "1.5MiB", "8MB", "99999999999999GiB"] {
            assert!(s.parse::<HumanSize>().is_err(), "{s}");
        }
    }

    #[test]
    fn durations_take_the_usual_units() {
        for (s, d) in [
            ("500ms", 500),
            ("10s", 10_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
        ] {
            assert_eq!(
                s.parse::<HumanDuration>().unwrap().0,
                Duration::from_millis(d)
            );
        }
        for s in ["", "10", "s", "1.5s", "-1s", "10 s"] {
            assert!(s.parse::<HumanDuration>().is_err(), "{s}");
        }
    }
}
