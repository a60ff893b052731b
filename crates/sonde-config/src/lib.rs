//! The parts of the agent's configuration that the sinks share with the
//! config file's parser: the error that names a key, its line and a fix
//! ([`error`]), durations, sizes and addresses as written ([`units`]),
//! the `[agent]` section ([`agent`]) and the checks of listen addresses.
//!
//! The whole file is parsed by the `sonde` binary (`sonde::config`),
//! which checks each `[[sinks]]` table with the sink registry of
//! `sonde-sinks`; both build on this crate, so neither imports the other
//! back.

pub mod agent;
pub mod error;
pub mod units;

pub use agent::{AdminAuth, AdminListen, AdminTls, AgentSection};
pub use error::{ConfigError, Source};
pub use units::{HostPort, HumanDuration, HumanSize, Listen, UnitError};

/// The name `inputs` gives the metric windows, so no source may take it.
pub const METRICS_INPUT: &str = "metrics";

/// The name `inputs` gives the profiler's periods, so no source may take it.
pub const PROFILES_INPUT: &str = "profiles";

/// The fix for an `agent.data_dir` the agent cannot make or write.
pub const DATA_DIR_FIX: &str = "make it writable by the user sonde runs as (e.g. `sudo install -d -o sonde /var/lib/sonde`), or set agent.data_dir to a directory it can write";

/// True for addresses only this host can reach: `127.0.0.0/8`, `::1`,
/// and IPv4 loopback mapped into IPv6.
pub fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Refuses a network listen address other hosts can reach, unless
/// `agent.allow_non_loopback` says so. The caller names the key and line.
///
/// # Errors
///
/// A reachable address, with the fix.
pub fn check_loopback(allowed: bool, addr: std::net::SocketAddr) -> Result<(), ConfigError> {
    if allowed || is_loopback(addr.ip()) {
        return Ok(());
    }
    Err(ConfigError::new(
        "",
        format!("{addr} is reachable from other hosts"),
        "listen on 127.0.0.1 or ::1, or set `allow_non_loopback = true` in [agent] to allow it",
    ))
}

/// The fix for a listen address the agent could not bind at start (`unix`
/// for a unix socket file), by what the OS said.
pub fn listen_fix(e: &std::io::Error, unix: bool) -> &'static str {
    use std::io::ErrorKind;
    match (e.kind(), unix) {
        (ErrorKind::AddrInUse, false) => {
            "another process listens there (`ss -ltunp` shows which): stop it, or choose another port"
        }
        (ErrorKind::PermissionDenied, false) => {
            "a port below 1024 needs root or CAP_NET_BIND_SERVICE: choose a port above 1023, or give sonde the capability"
        }
        (ErrorKind::AddrNotAvailable, false) => {
            "the address is not one of this host's: write 127.0.0.1, ::1 or one that `ip addr` lists"
        }
        (_, true) => {
            "make the socket file's directory writable by the user sonde runs as, or listen on a path in one it can write (like /run/sonde)"
        }
        _ => "choose another address",
    }
}
