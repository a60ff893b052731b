//! The config parser's tests, one file per section of the file; the
//! helpers every file shares are here.

use super::*;
use sonde_encode::compress::Compression;
use sonde_runtime::socket::SocketOptions;
use sonde_sinks::sender::Delivery;
use std::path::PathBuf;
use std::time::Duration;

mod agent;
mod docs;
mod file;
mod histograms;
mod host_metrics;
mod inputs;
mod profiler;
mod receivers;
mod scrape;
mod sinks;

fn err(text: &str) -> ConfigError {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

/// The key and the line of the error `text` gives.
fn at(text: &str) -> (String, Option<usize>) {
    let e = err(text);
    (e.key, e.line)
}

fn key(k: &str, line: usize) -> (String, Option<usize>) {
    (k.to_string(), Some(line))
}

fn net(extra: &str) -> (Sink, NetSink) {
    let c = parse(&format!("{MIN}[[sinks]]\n{extra}")).unwrap();
    let s = c.sinks.into_iter().nth(1).unwrap();
    let n = s.net.clone().unwrap();
    (s, n)
}

/// One source, "app", on lines 1-3, then `rest`.
fn with_app(rest: &str) -> Result<Config, ConfigError> {
    parse_with_log_sinks(&format!(
        "[[logs]]\nname = \"app\"\ninclude = [\"/var/log/app/*.log\"]\n{rest}"
    ))
}

fn app_err(rest: &str) -> ConfigError {
    match with_app(rest) {
        Ok(_) => panic!("accepted:\n{rest}"),
        Err(e) => e,
    }
}

/// Five lines: a receiver and a console sink.
const MIN: &str = "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"console\"\n";
