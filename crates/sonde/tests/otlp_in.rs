//! The OTLP receiver, run for real: the OpenTelemetry Python SDK's
//! exporters (from PyPI; `scripts/setup` installs them) send to the agent,
//! whose file sink shows what it made of each data point.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{free_port, wait_for, Agent, Json};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_in/send.py")
}

/// Runs the SDK script; panics with its output unless it says it sent.
fn python_sends(transport: &str, endpoint: &str, what: &str) {
    let out = Command::new("python3")
        .arg(script())
        .args([transport, endpoint, what])
        .output()
        .expect("python3 runs (scripts/setup installs it and the OpenTelemetry SDK)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("sent"),
        "the SDK script failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An agent with one OTLP receiver at `listen` (its port from `port`)
/// and a file sink, windows of 1 s.
fn agent_with(receiver: impl Fn(u16) -> String) -> (Agent, u16) {
    let port = free_port();
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\ninterval = \"1s\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n{}\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
            dir.join("data").display(),
            receiver(port),
            dir.join("points.jsonl").display()
        )
    });
    (agent, port)
}

fn tags_of(p: &Json) -> Vec<(String, String)> {
    let mut t: Vec<(String, String)> = p["tags"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    t.sort();
    t
}

/// The sum over every window of the points named `name` with exactly
/// `tags`, and how many there were.
fn total(points: &[Json], name: &str, tags: &[(&str, &str)]) -> (f64, usize) {
    let want = sorted(tags);
    points
        .iter()
        .filter(|p| p["name"] == name && tags_of(p) == want)
        .fold((0.0, 0), |(s, n), p| {
            (s + p["value"].as_f64().unwrap(), n + 1)
        })
}

const SERVICE: [(&str, &str); 2] = [("service.name", "checkout"), ("host.name", "web-1")];

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    SERVICE.iter().chain(extra).copied().collect()
}

/// A series' name, tags and the value the sink must show for it.
type Expect = (&'static str, Vec<(&'static str, &'static str)>, f64);

fn sorted(tags: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut w: Vec<_> = tags
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    w.sort();
    w
}

/// What `send.py metrics` sent, as the sink must show it: counts summed
/// over windows, stores as their last value.
fn expect_sdk_metrics(agent: &Agent) {
    let counts: Vec<Expect> = vec![
        ("orders", with(&[("route", "/a")]), 12.0),
        ("requests", with(&[("code", "200")]), 5.0),
        ("latency.count", with(&[("route", "/a")]), 3.0),
        ("latency.sum", with(&[("route", "/a")]), 555.0),
        ("latency.bucket", with(&[("route", "/a"), ("le", "0")]), 0.0),
        ("latency.bucket", with(&[("route", "/a"), ("le", "5")]), 1.0),
        (
            "latency.bucket",
            with(&[("route", "/a"), ("le", "50")]),
            2.0,
        ),
        (
            "latency.bucket",
            with(&[("route", "/a"), ("le", "250")]),
            2.0,
        ),
        (
            "latency.bucket",
            with(&[("route", "/a"), ("le", "500")]),
            3.0,
        ),
        (
            "latency.bucket",
            with(&[("route", "/a"), ("le", "+Inf")]),
            3.0,
        ),
    ];
    let stores: Vec<Expect> = vec![
        ("queue.depth", with(&[]), 7.0),
        ("temperature", with(&[("room", "b")]), 42.5),
        ("latency.min", with(&[("route", "/a")]), 5.0),
        ("latency.max", with(&[("route", "/a")]), 500.0),
    ];
    let points = wait_for(
        "every SDK point in the sink",
        Duration::from_secs(20),
        || {
            let points = agent.points();
            let counts_done = counts
                .iter()
                .all(|(n, t, v)| total(&points, n, t).0 == *v && total(&points, n, t).1 > 0);
            let stores_done = stores.iter().all(|(n, t, v)| {
                let want = sorted(t);
                points
                    .iter()
                    .rfind(|p| p["name"] == *n && tags_of(p) == want)
                    .is_some_and(|p| p["value"].as_f64() == Some(*v))
            });
            (counts_done && stores_done).then_some(points)
        },
    );
    // Nothing but the resource attributes kept by default: no
    // process.pid, no telemetry.sdk.*.
    for p in &points {
        let tags = tags_of(p);
        assert!(
            tags.iter()
                .all(|(k, _)| !k.starts_with("process.") && !k.starts_with("telemetry.")),
            "{p}"
        );
    }
    // The cumulative counter's first point counted once: the SDK began
    // after the agent, so its 2 is a change, and 5 is 2 + 3.
    assert_eq!(total(&points, "requests", &with(&[("code", "200")])).0, 5.0);
}

#[test]
fn sdk_metrics_over_http_arrive_with_their_values_and_attributes() {
    let (agent, port) = agent_with(|p| {
        format!("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:{p}\"\n")
    });
    python_sends("http", &format!("http://127.0.0.1:{port}"), "metrics");
    expect_sdk_metrics(&agent);
    let listen = format!("receiver=\"http://127.0.0.1:{port}\",protocol=\"otlp\"");
    // 5 exports, 27 points made of them (histogram buckets among them).
    assert_eq!(
        agent.metric(&format!("sonde_receiver_datagrams_total{{{listen}}}")),
        Some(5.0)
    );
    assert!(agent.metric(&format!("sonde_receiver_points_total{{{listen}}}")) > Some(20.0));
}
