//! `http`: a generic HTTP POST to `url`: metric windows as JSON lines or
//! msgpack, log records as JSON lines
//! (`{"message","file","offset","host","source", fields...}`).

use crate::logs::deliver::JsonLines;
use sonde_encode::json::Lines;
use sonde_encode::msgpack::Msgpack;

use serde::Deserialize;

use crate::descriptor::{Input, Running, Sink, SinkType, Start, Transport};
use crate::net;
use sonde_config::ConfigError;

/// `type = "http"`: `format` is `"json"` (JSON lines, the default) or
/// `"msgpack"` (metric windows only).
pub static TYPE: SinkType = SinkType {
    name: "http",
    accepts: &[Input::Metrics, Input::Logs],
    transport: Transport::Http,
    compressions: &["zstd", "gzip", "snappy", "lz4", "none"],
    headers: &[],
    keys: &["format"],
    check,
    start,
    reloads: true,
    host: None,
};

/// The keys of an http sink.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// How metric windows are written; log records are JSON lines.
    #[serde(default)]
    format: Format,
}

/// `format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Format {
    /// JSON lines.
    #[default]
    Json,
    /// msgpack (metric windows only).
    Msgpack,
}

const EXAMPLES: &[(&str, &str)] = &[("format", "\"json\" or \"msgpack\"")];

fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let o: Options = s.typed(EXAMPLES)?;
    if o.format == Format::Msgpack && s.log_sources().next().is_some() {
        return Err(ConfigError::new(
            "format",
            "log records go as JSON lines; msgpack is for metric windows only",
            "remove format = \"msgpack\", or send the log sources to a sink of their own",
        ));
    }
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let o: Options = s.typed(EXAMPLES)?;
    let mut running = match o.format {
        Format::Msgpack => net::start(s, Msgpack::new(), st)?,
        Format::Json => net::start(s, Lines::default(), st)?,
    };
    if !st.sources.is_empty() {
        net::start_logs(s, JsonLines::default(), None, st, &mut running)?;
    }
    Ok(running)
}

#[cfg(test)]
mod tests {
    use crate::registry::parse;

    const SOURCE: &str = "[[logs]]\nname = \"app\"\ninclude = [\"/var/log/*.log\"]\n\n";

    #[test]
    fn log_records_go_as_json_lines_through_any_buffer() {
        let sink = |extra: &str| {
            format!("{SOURCE}[[sinks]]\ntype = \"http\"\ninputs = [\"app\"]\nurl = \"http://127.0.0.1:9/\"\n{extra}")
        };
        assert!(parse(&sink("")).is_ok());
        let e = parse(&sink("format = \"msgpack\"\n")).unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].format", Some(9)));
        assert!(parse(&sink("buffer = { type = \"disk\" }\n")).is_ok());
        // Metric windows alone may go as msgpack.
        let metrics = "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n\n[[sinks]]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/\"\nformat = \"msgpack\"\nbuffer = { type = \"disk\" }\n";
        assert!(parse(metrics).is_ok(), "{:?}", parse(metrics).err());
    }
}
