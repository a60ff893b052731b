//! `otlp_http`: OTLP/HTTP metrics to `url`.

use sonde_encode::otlp::Otlp;

use super::{net, Input, Running, Sink, SinkType, Start, Transport};

/// `type = "otlp_http"`.
pub static TYPE: SinkType = SinkType {
    name: "otlp_http",
    accepts: &[Input::Metrics],
    transport: Transport::Http,
    // The OTLP specification requires receivers to take gzip; zstd only
    // some do.
    compressions: &["gzip", "zstd", "none"],
    headers: &[],
    keys: &[],
    check: super::no_own_keys,
    start,
    reloads: true,
};

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let mut e = Otlp::new();
    if let Some(host) = super::hostname() {
        e = e.with_resource([("host.name", host)]);
    }
    net::start(s, e, st)
}
