//! `http`: a generic HTTP POST of JSON lines or msgpack to `url`.

use sonde_encode::json::Lines;
use sonde_encode::msgpack::Msgpack;

use super::{net, Input, Running, Sink, SinkType, Start, Transport};
use crate::config::ConfigError;

/// `type = "http"`: `format` is `"json"` (JSON lines, the default) or
/// `"msgpack"`.
pub static TYPE: SinkType = SinkType {
    name: "http",
    accepts: &[Input::Metrics],
    transport: Transport::Http,
    compressions: &["zstd", "gzip", "snappy", "lz4", "none"],
    headers: &[],
    keys: &["format"],
    check,
    start,
    reloads: true,
};

fn check(s: &mut Sink) -> Result<(), ConfigError> {
    match s.options.get("format") {
        None => Ok(()),
        Some(toml::Value::String(f)) if f == "json" || f == "msgpack" => Ok(()),
        Some(f) => Err(ConfigError::new(
            "format",
            match f.as_str() {
                Some(f) => format!("{f:?} is not a format"),
                None => "is not a string".into(),
            },
            "write \"json\" or \"msgpack\"",
        )),
    }
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    match s.option("format") {
        Some("msgpack") => net::start(s, Msgpack::new(), st),
        _ => net::start(s, Lines::default(), st),
    }
}
