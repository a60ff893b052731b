//! `prometheus_remote_write`: Prometheus remote write 1.0 to `url`.

use sonde_encode::remote_write::RemoteWrite;

use crate::descriptor::{Input, Running, Sink, SinkType, Start, Transport};
use crate::net;

/// `type = "prometheus_remote_write"`.
pub static TYPE: SinkType = SinkType {
    name: "prometheus_remote_write",
    accepts: &[Input::Metrics],
    transport: Transport::Http,
    // Remote write 1.0 mandates snappy (block format).
    compressions: &["snappy"],
    headers: &[("X-Prometheus-Remote-Write-Version", "0.1.0")],
    keys: &[],
    check: crate::descriptor::no_own_keys,
    start,
    reloads: true,
    host: None,
};

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    net::start(s, RemoteWrite::new(), st)
}
