//! `otlp_http`: OTLP/HTTP metrics to `url`, and log records and the
//! profiler's periods to the logs and profiles endpoints beside it.

mod logs;
mod profiles;

pub use logs::{OtlpLogs, OTEL_NAMES};
pub use profiles::OtlpProfiles;

use sonde_encode::otlp::Otlp;

use serde::Deserialize;

use crate::descriptor::{Input, NonEmpty, Running, Sink, SinkType, Start, Transport};
use crate::net;
use sonde_config::ConfigError;

/// `type = "otlp_http"`: `url` is the metrics endpoint
/// (`http://HOST:4318/v1/metrics`); `logs_url`, default `url` with its
/// final `/v1/metrics` made `/v1/logs` (or `url` itself when it does not
/// end so), the logs endpoint; `profiles_url`, likewise with
/// `/v1development/profiles`, the profiles endpoint.
pub static TYPE: SinkType = SinkType {
    name: "otlp_http",
    accepts: &[Input::Metrics, Input::Logs, Input::Profiles],
    transport: Transport::Http,
    // The OTLP specification requires receivers to take gzip; zstd only
    // some do.
    compressions: &["gzip", "zstd", "none"],
    headers: &[],
    keys: &["logs_url", "profiles_url"],
    check,
    start,
    reloads: true,
    host: None,
};

/// The keys of an otlp_http sink.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// The logs endpoint, when not beside the metrics one.
    logs_url: Option<NonEmpty>,
    /// The profiles endpoint, when not beside the metrics one.
    profiles_url: Option<NonEmpty>,
}

const EXAMPLES: &[(&str, &str)] = &[
    ("logs_url", "\"http://127.0.0.1:4318/v1/logs\""),
    (
        "profiles_url",
        "\"http://127.0.0.1:4318/v1development/profiles\"",
    ),
];

fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let o: Options = s.typed(EXAMPLES)?;
    for (key, url) in [("logs_url", &o.logs_url), ("profiles_url", &o.profiles_url)] {
        if let Some(url) = url.as_deref() {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    key,
                    format!("{url:?} is not an HTTP URL"),
                    "start it with http:// or https://",
                ));
            }
        }
    }
    Ok(())
}

/// Where sink `s` sends what goes to the endpoint at `path` beside its
/// metrics one (`/v1/logs`), unless `set` says.
fn beside(set: Option<&NonEmpty>, s: &Sink, path: &str) -> Option<String> {
    if let Some(url) = set {
        return Some(url.0.clone());
    }
    let url = &s.net.as_ref()?.target;
    Some(match url.strip_suffix("/v1/metrics") {
        Some(base) => format!("{base}{path}"),
        None => url.clone(),
    })
}

/// Where the log records of sink `s`, with options `o`, go.
fn logs_url(o: &Options, s: &Sink) -> Option<String> {
    beside(o.logs_url.as_ref(), s, "/v1/logs")
}

/// Where the profiles of sink `s`, with options `o`, go.
fn profiles_url(o: &Options, s: &Sink) -> Option<String> {
    beside(o.profiles_url.as_ref(), s, "/v1development/profiles")
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let e = Otlp::new().with_resource([("host.name", st.host.to_string())]);
    let mut running = net::start(s, e, st)?;
    let o: Options = s.typed(EXAMPLES)?;
    if !st.sources.is_empty() {
        let url = logs_url(&o, s);
        net::start_logs(s, OtlpLogs::default(), url.as_deref(), st, &mut running)?;
    }
    if s.takes_profiles() {
        let url = profiles_url(&o, s);
        let encoder = OtlpProfiles::new(st.host);
        net::start_profiles(s, encoder, url.as_deref(), st, &mut running)?;
    }
    Ok(running)
}

#[cfg(test)]
mod tests {
    use crate::registry::parse;

    const SOURCE: &str = "[[logs]]\nname = \"app\"\ninclude = [\"/var/log/*.log\"]\n\n";

    fn logs_url(sink: &str) -> Option<String> {
        let c = parse(&format!(
            "{SOURCE}[[sinks]]\ntype = \"otlp_http\"\ninputs = [\"app\"]\n{sink}"
        ))
        .unwrap();
        super::logs_url(&c.sinks[0].typed(super::EXAMPLES).unwrap(), &c.sinks[0])
    }

    #[test]
    fn logs_go_beside_the_metrics_endpoint_unless_told_otherwise() {
        assert_eq!(
            logs_url("url = \"http://c:4318/v1/metrics\"\n").as_deref(),
            Some("http://c:4318/v1/logs")
        );
        assert_eq!(
            logs_url("url = \"http://c:4318/otlp/v1/logs\"\n").as_deref(),
            Some("http://c:4318/otlp/v1/logs")
        );
        assert_eq!(
            logs_url("url = \"http://c:4318/v1/metrics\"\nlogs_url = \"https://l/ingest\"\n")
                .as_deref(),
            Some("https://l/ingest")
        );
        let e = parse(&format!(
            "{SOURCE}[[sinks]]\ntype = \"otlp_http\"\ninputs = [\"app\"]\nurl = \"http://c/v1/metrics\"\nlogs_url = \"c:4318\"\n"
        ))
        .unwrap_err();
        assert_eq!(e.key, "sinks[0].logs_url");
        // Log records may go through a disk buffer.
        assert!(parse(&format!(
            "{SOURCE}[[sinks]]\ntype = \"otlp_http\"\ninputs = [\"app\"]\nurl = \"http://c/v1/metrics\"\nbuffer = {{ type = \"disk\" }}\n"
        ))
        .is_ok());
    }
}
