//! Every config the docs show parses (the packaged one, the examples, PROFILING.md, DEPLOY.md, LOGS.md) and says what the docs say.

use super::*;

#[test]
fn the_packaged_config_and_each_example_in_it_are_valid() {
    let shipped = include_str!("../../../../../packaging/sonde.toml");
    let c = parse(shipped).unwrap();
    // The embedded defaults, the unixgram socket moved out of /tmp.
    let defaults = parse(DEFAULT_CONFIG).unwrap();
    assert_eq!(c.agent.interval, defaults.agent.interval);
    assert_eq!(c.receivers.len(), defaults.receivers.len());
    assert!(c
        .receivers
        .iter()
        .any(|r| r.listen.to_string() == "unixgram:///run/sonde/metric.sock"));
    assert!(c.logs.is_empty() && c.profiler.is_none());
    // The packaged agent guards its admin site; the embedded defaults
    // (a developer's first run) do not yet.
    assert_eq!(c.agent.admin_auth, AdminAuth::Token);
    assert_eq!(defaults.agent.admin_auth, AdminAuth::None);
    // Every commented example uncommented: a sink of each type, both
    // protocols on each transport, OTLP over HTTP and gRPC, a scrape
    // target, a log source of files and one of containers, and the
    // profiler.
    let example = regex::Regex::new(r"^# (\[\[?[a-z.]+\]\]?|[a-z_]+ = .*)$").unwrap();
    let all: String = shipped
        .lines()
        .map(|l| {
            example
                .captures(l)
                .map_or(l, |m| m.get(1).unwrap().as_str())
        })
        .flat_map(|l| [l, "\n"])
        .collect();
    let c = parse(&all).unwrap_or_else(|e| panic!("{e}\n{all}"));
    let mut types: Vec<&str> = c.sinks.iter().map(|s| s.kind.name).collect();
    types.sort_unstable();
    let mut registry: Vec<&str> = sonde_sinks::registry::REGISTRY
        .iter()
        .map(|t| t.name)
        .collect();
    registry.sort_unstable();
    assert_eq!(types, registry);
    let mut transports: Vec<String> = c
        .receivers
        .iter()
        .map(|r| r.listen.to_string().split(':').next().unwrap().to_owned())
        .collect();
    transports.sort();
    transports.dedup();
    assert_eq!(
        transports,
        ["grpc", "http", "tcp", "udp", "unix", "unixgram", "unixseq"]
    );
    assert_eq!(c.scrape.len(), 1);
    assert_eq!(c.logs.len(), 2);
    assert_eq!(c.logs[1].tailer.format, sonde_logs::container::Format::Cri);
    assert!(c.profiler.is_some());
}

#[test]
fn every_example_config_parses() {
    parse(include_str!("../../../../../examples/sonde.toml")).unwrap();
    // Every TOML block of the README and docs/CONFIG.md that has
    // receivers or the profiler is a full config; docs/SINKS.md's blocks are sinks,
    // checked with a receiver.
    let readme = concat!(
        include_str!("../../../../../README.md"),
        include_str!("../../../../../docs/CONFIG.md")
    );
    let sinks = include_str!("../../../../../docs/SINKS.md");
    let mut checked = 0;
    for block in readme.split("```toml\n").skip(1) {
        let block = block.split("```").next().unwrap();
        if block.contains("[[receivers]]") || block.contains("[profiler]") {
            parse(block)
                .unwrap_or_else(|e| panic!("a README or docs/CONFIG.md block fails: {e}\n{block}"));
            checked += 1;
        }
    }
    assert!(
        checked >= 1,
        "docs/CONFIG.md's configuration example was not found"
    );
    let mut checked = 0;
    for block in sinks.split("```toml\n").skip(1) {
        let block = block.split("```").next().unwrap();
        // A block with the profiler is whole; the others get a receiver.
        let text = if block.contains("[profiler]") {
            block.to_string()
        } else {
            format!(
                "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n{block}"
            )
        };
        parse(&text).unwrap_or_else(|e| panic!("docs/SINKS.md block fails: {e}\n{block}"));
        checked += 1;
    }
    assert!(checked >= 1, "docs/SINKS.md's example was not found");
}

#[test]
fn profiling_md_examples_parse() {
    let doc = include_str!("../../../../../docs/PROFILING.md");
    let mut checked = 0;
    for block in doc.split("```toml\n").skip(1) {
        let toml = block.split("```").next().unwrap();
        parse(toml).unwrap_or_else(|e| panic!("docs/PROFILING.md block fails: {e}\n{toml}"));
        checked += 1;
    }
    assert!(checked >= 1, "docs/PROFILING.md's example was not found");
}

#[test]
fn deploy_md_admin_site_for_other_hosts_parses() {
    let doc = include_str!("../../../../../docs/DEPLOY.md");
    let agent = doc
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.starts_with("[agent]\nallow_non_loopback = true\n"))
        .expect("docs/DEPLOY.md's admin site for other hosts");
    let c = parse(&format!("{agent}{MIN}"))
        .unwrap_or_else(|e| panic!("docs/DEPLOY.md block fails: {e}\n{agent}"));
    assert_eq!(c.agent.admin_scheme(), "https");
    assert_eq!(c.agent.admin_auth, AdminAuth::Token);
}

#[test]
fn deploy_md_admin_site_on_a_socket_file_parses() {
    let doc = include_str!("../../../../../docs/DEPLOY.md");
    let agent = doc
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.starts_with("[agent]\nadmin_listen = \"unix://"))
        .expect("docs/DEPLOY.md's admin site on a unix socket file");
    let c = parse(&format!("{agent}{MIN}"))
        .unwrap_or_else(|e| panic!("docs/DEPLOY.md block fails: {e}\n{agent}"));
    assert_eq!(
        c.agent.admin_socket(),
        Some(std::path::Path::new("/run/sonde/admin.sock"))
    );
    assert_eq!(c.agent.admin_socket_mode(), 0o660);
    assert_eq!(c.agent.admin_auth, AdminAuth::Token);
}

#[test]
fn logs_md_examples_parse_and_its_mistake_is_reported_as_shown() {
    let doc = include_str!("../../../../../docs/LOGS.md");
    let (mut good, mut bad) = (0, 0);
    for block in doc.split("```toml\n").skip(1) {
        let (toml, after) = block.split_once("```\n").unwrap();
        let shown = after
            .trim_start()
            .strip_prefix("```\n$ sonde validate --config sonde.toml\n")
            .and_then(|r| r.split("```").next());
        match (parse(toml), shown) {
            (Ok(_), None) => good += 1,
            (Err(e), Some(shown)) => {
                assert_eq!(
                    shown,
                    format!("sonde: invalid config file sonde.toml: {e}\n")
                );
                bad += 1;
            }
            (Ok(_), Some(_)) => {
                panic!("docs/LOGS.md shows an error for a valid config:\n{toml}")
            }
            (Err(e), None) => panic!("docs/LOGS.md block fails: {e}\n{toml}"),
        }
    }
    assert!(
        good >= 1 && bad >= 1,
        "docs/LOGS.md's examples were not found"
    );
}

#[test]
fn logs_md_names_the_types_that_take_log_lines() {
    use sonde_sinks::registry::{Input, REGISTRY};
    let doc = include_str!("../../../../../docs/LOGS.md");
    let listed = |start: &str| -> Vec<&str> {
        let (_, rest) = doc.split_once(start).expect(start);
        let para = rest.split("\n\n").next().unwrap();
        para.split('`').skip(1).step_by(2).collect()
    };
    let takes = |logs: bool| -> Vec<&str> {
        REGISTRY
            .iter()
            .filter(|t| t.accepts.contains(&Input::Logs) == logs)
            .map(|t| t.name)
            .collect()
    };
    let mut doc_logs = listed("Types that take log lines:");
    let mut doc_metrics = listed("The other types (");
    let (mut logs, mut metrics) = (takes(true), takes(false));
    for v in [&mut doc_logs, &mut doc_metrics, &mut logs, &mut metrics] {
        v.sort_unstable();
    }
    assert_eq!(doc_logs, logs, "docs/LOGS.md: types that take log lines");
    assert_eq!(
        doc_metrics, metrics,
        "docs/LOGS.md: types that take metrics only"
    );
}
