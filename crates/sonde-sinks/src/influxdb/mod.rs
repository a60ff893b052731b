//! `influxdb`: InfluxDB 1.x line protocol, POSTed to
//! `{url}/write?db={database}&precision=s`.

use sonde_encode::influx::LineProtocol;

use serde::Deserialize;

use crate::descriptor::{Input, NonEmpty, Running, Sink, SinkType, Start, Transport};
use crate::net;
use sonde_config::ConfigError;

/// `type = "influxdb"`: `database` (required) names the database.
pub static TYPE: SinkType = SinkType {
    name: "influxdb",
    accepts: &[Input::Metrics],
    transport: Transport::Http,
    // InfluxDB 1.x decodes gzip only.
    compressions: &["gzip", "none"],
    headers: &[],
    keys: &["database"],
    check,
    start,
    reloads: true,
    host: None,
};

/// The keys of an influxdb sink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// The database the points are written to (required).
    database: NonEmpty,
}

/// Puts the database into the URL, percent-encoded.
fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let db = s.typed::<Options>(&[("database", "\"sonde\"")])?.database.0;
    let Some(net) = s.net.as_mut() else {
        return Ok(());
    };
    let mut t = format!("{}/write?db=", net.target.trim_end_matches('/'));
    for b in db.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            t.push(b as char);
        } else {
            t.push_str(&format!("%{b:02X}"));
        }
    }
    t.push_str("&precision=s");
    net.target = t;
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    net::start(s, LineProtocol::new(), st)
}
