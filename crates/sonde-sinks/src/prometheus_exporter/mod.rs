//! `prometheus_exporter`: the latest window in Prometheus text format at
//! `http://{listen}/metrics`.

use std::sync::Arc;

use anyhow::Context;

use crate::sink::{self, Exposition, PrometheusExporter};

use serde::Deserialize;

use crate::descriptor::{Input, Running, Sink, SinkType, Start, Transport};
use sonde_config::{ConfigError, HostPort};

/// `type = "prometheus_exporter"`: `listen` (required) is `HOST:PORT`. Its
/// listener is bound at start, so a reload leaves it as it is.
pub static TYPE: SinkType = SinkType {
    name: "prometheus_exporter",
    accepts: &[Input::Metrics],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &["listen"],
    check,
    start,
    reloads: false,
    host: None,
};

/// The keys of a prometheus_exporter sink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `HOST:PORT` of its scrape endpoint (required).
    listen: HostPort,
}

fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let listen = s
        .typed::<Options>(&[("listen", "\"127.0.0.1:9102\"")])?
        .listen;
    s.listen = Some(listen.0);
    s.name = format!("prometheus_exporter:{}", listen.0);
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let listen = s.listen.context("a prometheus_exporter without `listen`")?;
    let l = sonde_runtime::socket::bind_tcp(listen).map_err(|e| {
        ConfigError::new(
            format!("{}.listen", st.key),
            format!("cannot listen on {listen}: {e}"),
            sonde_config::listen_fix(&e, false),
        )
    })?;
    tracing::info!(address = %listen, "prometheus exporter listening on /metrics");
    let expo = Exposition::default();
    st.exporters.push((l, expo.clone()));
    Ok(sink::spawn(PrometheusExporter::new(expo), Arc::clone(&st.stats))?.into())
}
