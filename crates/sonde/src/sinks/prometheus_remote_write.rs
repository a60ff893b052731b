//! `prometheus_remote_write`: Prometheus remote write 1.0 to `url`.

use sonde_encode::remote_write::RemoteWrite;

use super::{net, Input, Running, Sink, SinkType, Start, Transport};
use crate::config::ConfigError;

/// `type = "prometheus_remote_write"`.
pub static TYPE: SinkType = SinkType {
    name: "prometheus_remote_write",
    accepts: &[Input::Metrics],
    transport: Transport::Http,
    // Remote write 1.0 mandates snappy (block format).
    compressions: &["snappy"],
    headers: &[("X-Prometheus-Remote-Write-Version", "0.1.0")],
    keys: &[],
    check,
    start,
    reloads: true,
};

fn check(_: &mut Sink) -> Result<(), ConfigError> {
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    net::start(s, RemoteWrite::new(), st)
}
