//! `[[receivers]]`: where points come in.

use std::collections::HashMap;

use serde::Deserialize;
use sonde_metrics::receiver::Protocol;
use sonde_runtime::addr::ListenAddr;
use sonde_runtime::socket::SocketOptions;
use toml::Spanned;

use super::units::{HumanSize, Listen};
use sonde_config::error::{ConfigError, Source};
use sonde_config::units::socket_mode;

/// The protocol of a receiver.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolName {
    /// metricserver2 msgpack.
    Msgpack,
    /// StatsD / DogStatsD.
    Statsd,
    /// OpenTelemetry's OTLP, over HTTP or gRPC.
    Otlp,
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
    /// OTLP: the receiver's name, the log source its log records go to.
    /// Default `"otlp"`.
    pub name: Option<Spanned<String>>,
    /// OTLP: the most bytes of a request body, before and after
    /// decompression. Default `"4MiB"`.
    pub max_body: Option<Spanned<HumanSize>>,
    /// OTLP: the resource attributes kept as tags and log fields.
    /// Default: see `sonde_otlp_in::metrics::DEFAULT_RESOURCE_ATTRIBUTES`.
    pub resource_attributes: Option<Spanned<Vec<String>>>,
    /// OTLP: the most cumulative series whose previous point is kept.
    /// Default 100000.
    pub max_cumulative_series: Option<Spanned<usize>>,
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
    /// An OTLP receiver's settings.
    pub otlp: Option<sonde_otlp_in::Settings>,
}

/// The error for a file with neither receivers nor log sources.
pub(crate) fn none() -> ConfigError {
    ConfigError::new(
        "receivers",
        "no [[receivers]]: the agent would receive nothing",
        "add one, e.g.\n[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nor a [[logs]] source to tail files, a [[scrape]] target, [profiler], or [host_metrics]",
    )
}

/// Validates the receivers: distinct addresses, a transport each protocol
/// can use, options that apply to the socket kind.
pub(crate) fn check(
    src: Source<'_>,
    sections: &[Spanned<ReceiverSection>],
    allow_non_loopback: bool,
) -> Result<Vec<Receiver>, ConfigError> {
    let mut seen: HashMap<ListenAddr, usize> = HashMap::new();
    let mut receivers = Vec::new();
    for (i, r) in sections.iter().enumerate() {
        let r = r.get_ref();
        let listen = &r.listen.get_ref().0;
        let key = format!("receivers[{i}].listen");
        let line = src.line_of(r.listen.span().start);
        if let Some(first) = seen.insert(listen.clone(), line) {
            return Err(src.error(
                r.listen.span(),
                key,
                format!("{listen} is already used on line {first}"),
                "give each receiver its own address",
            ));
        }
        let protocol = match r.protocol {
            ProtocolName::Msgpack => Protocol::Msgpack,
            ProtocolName::Statsd => Protocol::Statsd,
            ProtocolName::Otlp => Protocol::Otlp,
        };
        let http = matches!(listen, ListenAddr::Http(_) | ListenAddr::Grpc(_));
        if (protocol == Protocol::Otlp) != http {
            return Err(if http {
                src.error(
                    r.listen.span(),
                    key,
                    format!("{listen} serves OTLP, not {}", protocol.as_str()),
                    "write protocol = \"otlp\", or listen on udp://, tcp://, unixgram://, unixseq:// or unix://",
                )
            } else {
                src.error(
                    r.listen.span(),
                    key,
                    "OTLP comes over HTTP or gRPC",
                    "write listen = \"http://127.0.0.1:4318\" (OTLP/HTTP) or \"grpc://127.0.0.1:4317\" (OTLP/gRPC)",
                )
            });
        }
        let otlp = if protocol == Protocol::Otlp {
            Some(otlp_settings(src, i, r)?)
        } else {
            for (field, span) in [
                ("name", r.name.as_ref().map(Spanned::span)),
                ("max_body", r.max_body.as_ref().map(Spanned::span)),
                (
                    "resource_attributes",
                    r.resource_attributes.as_ref().map(Spanned::span),
                ),
                (
                    "max_cumulative_series",
                    r.max_cumulative_series.as_ref().map(Spanned::span),
                ),
            ] {
                if let Some(span) = span {
                    return Err(src.error(
                        span,
                        format!("receivers[{i}].{field}"),
                        "applies to OTLP receivers only",
                        format!("remove `{field}`, or write protocol = \"otlp\""),
                    ));
                }
            }
            None
        };
        if protocol == Protocol::Msgpack
            && matches!(listen, ListenAddr::Tcp(_) | ListenAddr::Unix(_))
        {
            return Err(src.error(
                r.listen.span(),
                key,
                "msgpack needs message boundaries, which a stream does not keep",
                "use udp://, unixgram:// or unixseq://",
            ));
        }
        let mut options = SocketOptions::default();
        if let Some(w) = &r.workers {
            let wkey = format!("receivers[{i}].workers");
            let n = *w.get_ref();
            if !(1..=64).contains(&n) {
                return Err(src.error(
                    w.span(),
                    wkey,
                    format!("{n} workers"),
                    "write a number between 1 and 64",
                ));
            }
            if n > 1 && !matches!(listen, ListenAddr::Udp(_)) {
                return Err(src.error(
                    w.span(),
                    wkey,
                    "several workers share a port with SO_REUSEPORT, which only udp:// supports",
                    "use a udp:// address, or leave `workers` out",
                ));
            }
            options.workers = n;
        }
        if let Some(b) = r.receive_buffer {
            options.receive_buffer = usize::try_from(b.0).unwrap_or(usize::MAX);
        }
        if let Some(m) = &r.mode {
            options.mode = socket_mode(src, m, format!("receivers[{i}].mode"))?;
        }
        if let Some(m) = &r.max_connections {
            if listen.is_datagram() || *m.get_ref() == 0 {
                return Err(src.error(
                    m.span(),
                    format!("receivers[{i}].max_connections"),
                    "applies to stream and seqpacket receivers only, and must be above 0",
                    "write a number above 0 for a tcp://, unix:// or unixseq:// receiver, or leave it out",
                ));
            }
            options.max_connections = *m.get_ref();
        }
        for (field, value) in [("mode", &r.mode), ("owner", &r.owner), ("group", &r.group)] {
            if let (Some(v), None) = (value, listen.unix_path()) {
                return Err(src.error(
                    v.span(),
                    format!("receivers[{i}].{field}"),
                    "applies to unix socket files only (unixgram://, unixseq://, unix://)",
                    format!("remove `{field}`, or listen on a unix socket"),
                ));
            }
        }
        if let Some(addr) = listen.socket_addr() {
            super::check_loopback(allow_non_loopback, addr)
                .map_err(|e| src.at(Some(line), ConfigError { key, ..e }))?;
        }
        receivers.push(Receiver {
            protocol,
            listen: listen.clone(),
            options,
            owner: r.owner.as_ref().map(|o| o.get_ref().clone()),
            group: r.group.as_ref().map(|g| g.get_ref().clone()),
            otlp,
        });
    }
    Ok(receivers)
}

/// The name of an OTLP receiver's log source: its `name`, else `"otlp"`.
pub(crate) fn otlp_source_name(r: &ReceiverSection) -> &str {
    r.name.as_ref().map_or("otlp", |n| n.get_ref().as_str())
}

/// An OTLP receiver's keys, with their defaults.
fn otlp_settings(
    src: Source<'_>,
    i: usize,
    r: &ReceiverSection,
) -> Result<sonde_otlp_in::Settings, ConfigError> {
    let mut s = sonde_otlp_in::Settings::default();
    if let Some(n) = &r.name {
        let name = n.get_ref();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        {
            return Err(src.error(
                n.span(),
                format!("receivers[{i}].name"),
                format!("{name:?} cannot name a log source"),
                "use letters, digits, '_', '-' and '.', like \"otlp\"",
            ));
        }
        s.name.clone_from(name);
    }
    if let Some(b) = &r.max_body {
        let n = b.get_ref().0;
        if !(1024..=(1 << 30)).contains(&n) {
            return Err(src.error(
                b.span(),
                format!("receivers[{i}].max_body"),
                format!("{n} bytes"),
                "write a size between \"1KiB\" and \"1GiB\", like \"4MiB\"",
            ));
        }
        s.max_body = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(a) = &r.resource_attributes {
        s.resource_attributes.clone_from(a.get_ref());
    }
    if let Some(m) = &r.max_cumulative_series {
        if *m.get_ref() == 0 {
            return Err(src.error(
                m.span(),
                format!("receivers[{i}].max_cumulative_series"),
                "0 series",
                "write a number above 0, like 100000",
            ));
        }
        s.max_cumulative_series = *m.get_ref();
    }
    Ok(s)
}
