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

/// The error for a file with neither receivers nor log sources.
pub(crate) fn none() -> ConfigError {
    ConfigError::new(
        "receivers",
        "no [[receivers]]: the agent would receive nothing",
        "add one, e.g.\n[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nor a [[logs]] source to tail files, a [[scrape]] target, or [profiler]",
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
        });
    }
    Ok(receivers)
}
