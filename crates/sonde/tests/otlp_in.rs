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
fn agent_with(receiver: impl Fn(u16, &std::path::Path) -> String) -> (Agent, u16) {
    let port = free_port();
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\ninterval = \"1s\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n{}\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
            dir.join("data").display(),
            receiver(port, dir),
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
    let (agent, port) = agent_with(|p, _| {
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

/// POSTs `body` to the receiver; the status and the `Retry-After`
/// header.
fn post(port: u16, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> (u16, Option<String>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let mut req = agent.post(&format!("http://127.0.0.1:{port}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send(&body[..]).expect("the receiver answers");
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (resp.status().as_u16(), retry)
}

const PROTOBUF: (&str, &str) = ("content-type", "application/x-protobuf");

/// A request of `n` delta counter points named `name`, each of value 1
/// and its own `i` attribute.
fn delta_request(name: &str, n: usize) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum,
    };
    use prost::Message;
    let points = (0..n)
        .map(|i| NumberDataPoint {
            attributes: vec![KeyValue {
                key: "i".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::IntValue(i as i64)),
                }),
                ..Default::default()
            }],
            time_unix_nano: 1,
            value: Some(number_data_point::Value::AsInt(1)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: name.into(),
                    data: Some(Data::Sum(Sum {
                        data_points: points,
                        aggregation_temporality: AggregationTemporality::Delta as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn bodies_over_the_limit_and_malformed_ones_are_refused_and_counted() {
    let (agent, port) = agent_with(|p, _| {
        format!("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:{p}\"\nmax_body = \"64KiB\"\n")
    });
    let listen = format!("receiver=\"http://127.0.0.1:{port}\",protocol=\"otlp\"");
    // Within the limit, gzip: taken.
    let small = delta_request("small", 10);
    assert_eq!(
        post(
            port,
            "/v1/metrics",
            &[PROTOBUF, ("content-encoding", "gzip")],
            gzip(&small)
        ),
        (200, None)
    );
    // Over it as sent.
    let big = delta_request("big", 5_000);
    assert!(big.len() > 64 << 10);
    assert_eq!(post(port, "/v1/metrics", &[PROTOBUF], big.clone()).0, 413);
    // Under it as sent, over it once inflated: a gzip bomb.
    let bomb = gzip(&vec![0u8; 16 << 20]);
    assert!(bomb.len() < 64 << 10);
    assert_eq!(
        post(
            port,
            "/v1/metrics",
            &[PROTOBUF, ("content-encoding", "gzip")],
            bomb
        )
        .0,
        413
    );
    // Not protobuf, not gzip, not a content type it speaks.
    assert_eq!(
        post(port, "/v1/metrics", &[PROTOBUF], vec![0xff; 16]).0,
        400
    );
    assert_eq!(
        post(
            port,
            "/v1/metrics",
            &[PROTOBUF, ("content-encoding", "gzip")],
            small.clone()
        )
        .0,
        400
    );
    assert_eq!(
        post(
            port,
            "/v1/metrics",
            &[("content-type", "text/plain")],
            small
        )
        .0,
        415
    );
    wait_for("the refusals counted", Duration::from_secs(10), || {
        let oversized = agent.metric(&format!(
            "sonde_receiver_dropped_total{{{listen},reason=\"oversized\"}}"
        ));
        let malformed = agent.metric(&format!(
            "sonde_receiver_dropped_total{{{listen},reason=\"malformed\"}}"
        ));
        (oversized == Some(2.0) && malformed == Some(3.0)).then_some(())
    });
    // The one taken reached the sink, whole.
    wait_for(
        "the small request's points",
        Duration::from_secs(10),
        || {
            let points = agent.points();
            let sum: f64 = points
                .iter()
                .filter(|p| p["name"] == "small")
                .map(|p| p["value"].as_f64().unwrap())
                .sum();
            (sum == 10.0).then_some(())
        },
    );
    assert!(agent.points().iter().all(|p| p["name"] != "big"));
}

/// Four clients at once, as fast as the receiver answers: every point of
/// every request answered 200 reaches the sink, and a refusal, if the
/// worker falls behind, is a 429 with `Retry-After` whose points are
/// counted and never recorded. (These requests repeat their series, and
/// on this machine the worker keeps up with the one server thread, so
/// the refusals are rare; they are tested for real by the storm of new
/// series and the log records whose sink is down, below.)
#[test]
fn concurrent_requests_lose_nothing_taken_and_refusals_are_retryable_and_counted() {
    let (agent, port) = agent_with(|p, _| {
        format!("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:{p}\"\n")
    });
    let listen = format!("receiver=\"http://127.0.0.1:{port}\",protocol=\"otlp\"");
    const POINTS: usize = 2_000;
    let body = delta_request("flood", POINTS);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                let (mut taken, mut refused) = (0u64, 0u64);
                for _ in 0..40 {
                    match post(port, "/v1/metrics", &[PROTOBUF], body.clone()) {
                        (200, _) => taken += 1,
                        (429, Some(retry)) => {
                            assert_eq!(retry, "1");
                            refused += 1;
                        }
                        other => panic!("unexpected answer {other:?}"),
                    }
                }
                (taken, refused)
            })
        })
        .collect();
    let (taken, refused) = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert!(taken > 0);
    eprintln!("{taken} requests taken, {refused} refused");
    // Every point of every request answered 200 reached the sink, and
    // nothing of the refused ones.
    let want = (taken * POINTS as u64) as f64;
    wait_for(
        "every point taken in the sink",
        Duration::from_secs(30),
        || {
            let sum: f64 = agent
                .points()
                .iter()
                .filter(|p| p["name"] == "flood")
                .map(|p| p["value"].as_f64().unwrap())
                .sum();
            assert!(sum <= want, "{sum} points in the sink, {want} taken");
            (sum == want).then_some(())
        },
    );
    let counted = agent
        .metric(&format!(
            "sonde_receiver_dropped_total{{{listen},reason=\"queue_full\"}}"
        ))
        .unwrap_or(0.0);
    assert_eq!(
        counted,
        (refused * POINTS as u64) as f64,
        "{taken} taken, {refused} refused"
    );
}

/// A storm of new series: four clients at once, each request 5,000
/// points of a metric name of its own, so that every point is a new
/// series, which the worker records more slowly than the server thread
/// decodes and maps it. The worker's queue fills for real: some requests
/// are answered 429 with `Retry-After: 1`, their points counted as
/// `queue_full` and none recorded. Sent again once the second asked for
/// has passed, as an exporter does, they are taken; in the end every
/// request's 5,000 points are in the sink exactly once. (240,000 series
/// in all, under the default `max_series`; a run here refuses 7 to 9 of
/// the 48 requests.)
#[test]
fn a_storm_of_new_series_fills_the_workers_queue_and_its_refusals_are_retried_without_loss() {
    let (agent, port) = agent_with(|p, _| {
        format!("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:{p}\"\n")
    });
    let listen = format!("receiver=\"http://127.0.0.1:{port}\",protocol=\"otlp\"");
    const POINTS: usize = 5_000;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let (mut taken, mut refused) = (Vec::new(), Vec::new());
                for r in 0..12 {
                    let name = format!("storm{t}.{r}");
                    match post(
                        port,
                        "/v1/metrics",
                        &[PROTOBUF],
                        delta_request(&name, POINTS),
                    ) {
                        (200, None) => taken.push(name),
                        (429, Some(retry)) => {
                            assert_eq!(retry, "1");
                            refused.push(name);
                        }
                        other => panic!("unexpected answer {other:?}"),
                    }
                }
                (taken, refused)
            })
        })
        .collect();
    let (mut taken, mut refused) = (Vec::new(), Vec::new());
    for t in threads {
        let (a, b) = t.join().unwrap();
        taken.extend(a);
        refused.extend(b);
    }
    eprintln!("{} requests taken, {} refused", taken.len(), refused.len());
    assert!(!refused.is_empty(), "the storm filled the worker's queue");
    wait_for(
        "the refused points counted",
        Duration::from_secs(10),
        || {
            let counted = agent.metric(&format!(
                "sonde_receiver_dropped_total{{{listen},reason=\"queue_full\"}}"
            ));
            (counted == Some((refused.len() * POINTS) as f64)).then_some(())
        },
    );
    // Each refused request again, after the second asked for, until taken.
    for name in &refused {
        wait_for("the retry taken", Duration::from_secs(30), || {
            match post(
                port,
                "/v1/metrics",
                &[PROTOBUF],
                delta_request(name, POINTS),
            ) {
                (200, None) => Some(()),
                (429, Some(_)) => {
                    std::thread::sleep(Duration::from_secs(1));
                    None
                }
                other => panic!("unexpected answer {other:?}"),
            }
        });
    }
    // Every request's points in the sink once: 5,000 series of value 1
    // per name, and no other storm point.
    let want: std::collections::BTreeMap<String, f64> = taken
        .iter()
        .chain(&refused)
        .map(|n| (n.clone(), POINTS as f64))
        .collect();
    common::wait_eq(
        "every storm point in the sink",
        Duration::from_secs(60),
        || {
            let mut got = std::collections::BTreeMap::new();
            for p in agent.points() {
                let name = p["name"].as_str().unwrap_or_default();
                if name.starts_with("storm") {
                    *got.entry(name.to_string()).or_insert(0.0) += p["value"].as_f64().unwrap();
                }
            }
            (got, want.clone())
        },
        |_| true,
    );
}

fn flood_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_in/flood.py")
}

/// A logs request of `n` records, the message of record `i` its id
/// `{prefix}-{i}` and 1,000 bytes of padding.
fn logs_request(prefix: &str, n: usize) -> (Vec<String>, Vec<u8>) {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message;
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let records = ids
        .iter()
        .map(|id| LogRecord {
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(format!(
                    "{id} {}",
                    "x".repeat(1000)
                ))),
            }),
            ..Default::default()
        })
        .collect();
    let body = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    (ids, body)
}

/// How many times each record id reached the test server in a request it
/// answered 200: a record's id is its message's first word.
fn delivered(server: &common::http_server::Server) -> std::collections::HashMap<String, usize> {
    let mut seen = std::collections::HashMap::new();
    for got in server.accepted() {
        for r in common::http_server::json_lines(&got.body) {
            let message = r["message"].as_str().unwrap_or_default();
            let id = message.split(' ').next().unwrap_or_default().to_string();
            *seen.entry(id).or_insert(0) += 1;
        }
    }
    seen
}

/// Starts `flood.py` with `args`.
fn flood_py(args: &[&str]) -> std::process::Child {
    Command::new("python3")
        .arg(flood_script())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/setup installs it and the OpenTelemetry SDK)")
}

/// What a finished `flood.py` printed; panics unless it succeeded.
fn flood_py_output(child: std::process::Child) -> (String, String) {
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "flood.py failed ({}): {stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// Over gRPC, a message over `max_body` is refused by tonic before the
/// receiver's services see it, as sent (OUT_OF_RANGE) or once inflated
/// (RESOURCE_EXHAUSTED without a RetryInfo, which exporters do not
/// retry): both are counted as `oversized`, and the small messages
/// around them, plain and gzip, are taken. Messages that do not decode
/// are INVALID_ARGUMENT and counted as `malformed`.
#[test]
fn grpc_messages_over_the_limit_or_that_do_not_decode_are_refused_and_counted() {
    let (agent, port) = agent_with(|p, dir| {
        format!(
            "[[receivers]]\nprotocol = \"otlp\"\nlisten = \"grpc://127.0.0.1:{p}\"\nmax_body = \"64KiB\"\nname = \"big\"\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\ninputs = [\"big\"]\n",
            dir.join("logs.jsonl").display()
        )
    });
    let (out, _) = flood_py_output(flood_py(&[
        "big",
        &format!("127.0.0.1:{port}"),
        &(1 << 20).to_string(),
    ]));
    let answers: Json = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(
        answers,
        serde_json::json!([
            {"code": "OK", "details": false},
            {"code": "OUT_OF_RANGE", "details": false},
            {"code": "RESOURCE_EXHAUSTED", "details": false},
            {"code": "OK", "details": false},
        ])
    );
    let listen = format!("receiver=\"grpc://127.0.0.1:{port}\",protocol=\"otlp\"");
    wait_for("both refusals counted", Duration::from_secs(10), || {
        let oversized = agent.metric(&format!(
            "sonde_receiver_dropped_total{{{listen},reason=\"oversized\"}}"
        ));
        (oversized == Some(2.0)).then_some(())
    });
    assert_eq!(
        agent.metric(&format!(
            "sonde_receiver_dropped_total{{{listen},reason=\"queue_full\"}}"
        )),
        Some(0.0)
    );
    let got = wait_for("the two small records", Duration::from_secs(10), || {
        let r = records(&agent, "logs.jsonl");
        (r.len() >= 2).then_some(r)
    });
    assert_eq!(got.len(), 2, "{got:?}");
    // A message that does not decode, to either service: INVALID_ARGUMENT
    // (exporters do not retry it), counted as malformed; the record after
    // it is taken.
    let (out, _) = flood_py_output(flood_py(&["malformed", &format!("127.0.0.1:{port}")]));
    let answers: Json = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(
        answers,
        serde_json::json!(["INVALID_ARGUMENT", "INVALID_ARGUMENT", "OK"])
    );
    wait_for(
        "both malformed messages counted",
        Duration::from_secs(10),
        || {
            let malformed = agent.metric(&format!(
                "sonde_receiver_dropped_total{{{listen},reason=\"malformed\"}}"
            ));
            (malformed == Some(2.0)).then_some(())
        },
    );
    wait_for("the record after them", Duration::from_secs(10), || {
        (records(&agent, "logs.jsonl").len() == 3).then_some(())
    });
}

/// Log records into a sink whose endpoint is down: the log source stops
/// taking records once 4 MiB wait for the endpoint, its queue fills, and
/// the receivers refuse what does not fit, over HTTP with 429 and
/// `Retry-After: 1`, over gRPC with RESOURCE_EXHAUSTED and a RetryInfo of
/// 1 s, each refused record counted as `queue_full`. The SDK's exporters,
/// refused too, retry. Once the endpoint takes requests, every record
/// answered 200/OK, the SDK's among them, arrives exactly once, and no
/// refused one ever does.
#[test]
fn a_log_flood_into_a_stalled_sink_is_refused_retryably_counted_and_loses_nothing_taken() {
    let server = common::http_server::Server::start(0, 503);
    let (http_port, grpc_port) = (free_port(), free_port());
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n\
             [[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:{http_port}\"\nname = \"flood\"\n\n\
             [[receivers]]\nprotocol = \"otlp\"\nlisten = \"grpc://127.0.0.1:{grpc_port}\"\nname = \"flood\"\n\n\
             [[sinks]]\ntype = \"http\"\ninputs = [\"flood\"]\nurl = \"http://127.0.0.1:{}/logs\"\n\
             compression = \"none\"\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"500ms\"\n\n\
             [[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
            dir.join("data").display(),
            server.port,
            dir.join("points.jsonl").display()
        )
    });
    let queue_full = |listen: &str| {
        agent
            .metric(&format!(
                "sonde_receiver_dropped_total{{receiver=\"{listen}\",protocol=\"otlp\",reason=\"queue_full\"}}"
            ))
            .unwrap_or(0.0)
    };
    let (http, grpc) = (
        format!("http://127.0.0.1:{http_port}"),
        format!("grpc://127.0.0.1:{grpc_port}"),
    );

    // gRPC first: requests of 256 records of about 1 KiB, 8 MiB and more
    // before the queue is full, until two are refused.
    let out = flood_py_output(flood_py(&[
        "grpc",
        &format!("127.0.0.1:{grpc_port}"),
        "g",
        "256",
        "100",
    ]))
    .0;
    let grpc_flood: Json = serde_json::from_str(out.trim()).expect(&out);
    let codes: Vec<&str> = grpc_flood["codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        codes.iter().filter(|c| **c == "RESOURCE_EXHAUSTED").count(),
        2,
        "{codes:?}"
    );
    assert!(
        codes
            .iter()
            .all(|c| *c == "OK" || *c == "RESOURCE_EXHAUSTED"),
        "{codes:?}"
    );
    assert_eq!(grpc_flood["details_delay"], 1.0, "{grpc_flood}");
    assert_eq!(grpc_flood["trailer_delay"], 1.0, "{grpc_flood}");
    let grpc_accepted: Vec<String> = grpc_flood["accepted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        grpc_accepted.len() >= 4 << 10,
        "the source's queue and what it sends hold 8 MiB: {} records taken",
        grpc_accepted.len()
    );
    let grpc_refused = grpc_flood["refused"].as_f64().unwrap();
    assert_eq!(grpc_refused, 512.0);

    // Then HTTP, into the same log source, which is still stalled.
    let (mut http_accepted, mut http_refused) = (Vec::new(), Vec::new());
    for r in 0..8 {
        let (ids, body) = logs_request(&format!("h-{r}"), 256);
        match post(http_port, "/v1/logs", &[PROTOBUF], body) {
            (200, None) => http_accepted.extend(ids),
            (429, Some(retry)) => {
                assert_eq!(retry, "1");
                http_refused.extend(ids);
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert!(
        !http_refused.is_empty(),
        "the queue is full: HTTP is refused too"
    );
    wait_for("every refusal counted", Duration::from_secs(10), || {
        (queue_full(&grpc) == grpc_refused && queue_full(&http) == http_refused.len() as f64)
            .then_some(())
    });

    // The SDK's exporters, over both protocols, while still stalled: each
    // is refused (its records of 300 KB do not fit where one of the 256
    // KiB requests did not), counted, and retries after the 1 s asked for
    // (its own backoff would wait 0.8 to 1.2 s, 2 s, ...).
    let mut sdk_http = flood_py(&[
        "sdk",
        "http",
        &format!("http://127.0.0.1:{http_port}"),
        "sdk-h",
        "10",
    ]);
    let mut sdk_grpc = flood_py(&[
        "sdk",
        "grpc",
        &format!("http://127.0.0.1:{grpc_port}"),
        "sdk-g",
        "10",
    ]);
    wait_for("both SDKs refused", Duration::from_secs(20), || {
        for sdk in [&mut sdk_http, &mut sdk_grpc] {
            if sdk.try_wait().unwrap().is_some() {
                let out = sdk.stdout.take().map(std::io::read_to_string);
                let err = sdk.stderr.take().map(std::io::read_to_string);
                panic!("an SDK ended while the sink is down: {out:?}\n{err:?}");
            }
        }
        (queue_full(&grpc) > grpc_refused && queue_full(&http) > http_refused.len() as f64)
            .then_some(())
    });
    assert!(
        delivered(&server).is_empty(),
        "the endpoint took nothing yet"
    );

    // The endpoint takes requests again: everything taken arrives once.
    server
        .status
        .store(200, std::sync::atomic::Ordering::SeqCst);
    let (out, err) = flood_py_output(sdk_http);
    assert!(out.contains("sent"), "{out}\n{err}");
    assert!(
        err.contains("Too Many Requests"),
        "the HTTP exporter was refused: {err}"
    );
    assert!(
        err.contains("retrying in 1.00s"),
        "the HTTP exporter waited as Retry-After asked: {err}"
    );
    let (out, err) = flood_py_output(sdk_grpc);
    assert!(out.contains("sent"), "{out}\n{err}");
    assert!(
        err.contains("StatusCode.RESOURCE_EXHAUSTED"),
        "the gRPC exporter was refused: {err}"
    );
    assert!(
        err.contains("retrying in 1.00s"),
        "the gRPC exporter waited as the RetryInfo asked: {err}"
    );
    let sdk: Vec<String> = (0..10)
        .flat_map(|i| [format!("sdk-h-{i}"), format!("sdk-g-{i}")])
        .collect();
    let taken: Vec<&String> = grpc_accepted
        .iter()
        .chain(&http_accepted)
        .chain(&sdk)
        .collect();
    let seen = wait_for(
        "every record taken at the endpoint",
        Duration::from_secs(30),
        || {
            let seen = delivered(&server);
            taken
                .iter()
                .all(|id| seen.contains_key(*id))
                .then_some(seen)
        },
    );
    for id in &taken {
        assert_eq!(seen[*id], 1, "{id} arrived more than once");
    }
    assert_eq!(seen.len(), taken.len(), "only the records taken arrived");
    server.stop();
}

/// The records a file sink of log records wrote so far.
fn records(agent: &Agent, file: &str) -> Vec<Json> {
    common::read_points(&agent.path(file))
}

fn expect_sdk_logs(agent: &Agent, file: &str) {
    let got = wait_for(
        "both log records in the sink",
        Duration::from_secs(20),
        || {
            let r = records(agent, file);
            (r.len() >= 2).then_some(r)
        },
    );
    assert_eq!(got.len(), 2, "{got:?}");
    let declined = &got[0];
    assert_eq!(declined["message"], "payment declined");
    assert_eq!(declined["source"], "shop-logs");
    assert_eq!(declined["host"], "web-1");
    assert_eq!(declined["service.name"], "checkout");
    assert_eq!(declined["order.id"], 77);
    assert_eq!(declined["card"], "visa");
    assert_eq!(declined["severity_text"], "WARN");
    assert!(declined.get("process.pid").is_none(), "{declined}");
    let placed = &got[1];
    assert_eq!(placed["message"], "order placed");
    assert_eq!(placed["severity_text"], "INFO");
    assert!(placed.get("card").is_none());
}

#[test]
fn sdk_logs_over_http_reach_the_sinks_that_take_the_receivers_source() {
    let (agent, port) = agent_with(|p, dir| {
        format!(
            "[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:{p}\"\nname = \"shop-logs\"\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\ninputs = [\"shop-logs\"]\n",
            dir.join("logs.jsonl").display()
        )
    });
    python_sends("http", &format!("http://127.0.0.1:{port}"), "logs");
    expect_sdk_logs(&agent, "logs.jsonl");
}

#[test]
fn sdk_metrics_and_logs_over_grpc_arrive_as_over_http() {
    let (agent, port) = agent_with(|p, dir| {
        format!(
            "[[receivers]]\nprotocol = \"otlp\"\nlisten = \"grpc://127.0.0.1:{p}\"\nname = \"shop-logs\"\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\ninputs = [\"shop-logs\"]\n",
            dir.join("logs.jsonl").display()
        )
    });
    let endpoint = format!("http://127.0.0.1:{port}");
    python_sends("grpc", &endpoint, "metrics");
    expect_sdk_metrics(&agent);
    python_sends("grpc", &endpoint, "logs");
    expect_sdk_logs(&agent, "logs.jsonl");
    let listen = format!("receiver=\"grpc://127.0.0.1:{port}\",protocol=\"otlp\"");
    // 5 metric exports and 2 log exports (one per record: the SDK's
    // simple processor).
    assert_eq!(
        agent.metric(&format!("sonde_receiver_datagrams_total{{{listen}}}")),
        Some(7.0)
    );
}

/// A request written by hand in the OTLP JSON mapping (camelCase keys,
/// 64-bit integers as strings, enums as numbers), as curl would send it.
#[test]
fn a_json_request_is_taken_as_its_protobuf_twin() {
    let (agent, port) = agent_with(|p, _| {
        format!("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:{p}\"\n")
    });
    let body = br#"{"resourceMetrics":[{"resource":{"attributes":[
        {"key":"service.name","value":{"stringValue":"billing"}},
        {"key":"process.pid","value":{"intValue":"99"}}]},
      "scopeMetrics":[{"scope":{"name":"hand"},"metrics":[
        {"name":"invoices","sum":{"aggregationTemporality":1,"isMonotonic":true,
          "dataPoints":[{"asInt":"41","timeUnixNano":"1700000000000000000",
            "attributes":[{"key":"currency","value":{"stringValue":"EUR"}}]}]}},
        {"name":"balance","gauge":{"dataPoints":[{"asDouble":-12.5,"timeUnixNano":"1700000000000000000"}]}}]}]}]}"#;
    let json = ("content-type", "application/json");
    assert_eq!(post(port, "/v1/metrics", &[json], body.to_vec()).0, 200);
    // Broken JSON is a 400.
    assert_eq!(
        post(
            port,
            "/v1/metrics",
            &[json],
            b"{\"resourceMetrics\":[".to_vec()
        )
        .0,
        400
    );
    wait_for("the JSON request's points", Duration::from_secs(10), || {
        let points = agent.points();
        let invoices = total(
            &points,
            "invoices",
            &[("service.name", "billing"), ("currency", "EUR")],
        );
        let balance = total(&points, "balance", &[("service.name", "billing")]);
        (invoices == (41.0, 1) && balance == (-12.5, 1)).then_some(())
    });
}

/// `sonde validate` refuses an OTLP receiver on a socket address, another
/// protocol on an http:// one, OTLP keys on a StatsD receiver and a name
/// a `[[logs]]` source has, each naming the key and its fix.
#[test]
fn validate_names_what_is_wrong_with_an_otlp_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let sink = "[[sinks]]\ntype = \"file\"\npath = \"/tmp/x.jsonl\"\n";
    let cases = [
        ("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"udp://127.0.0.1:4318\"\n", "OTLP comes over HTTP or gRPC"),
        ("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"http://127.0.0.1:4318\"\n", "serves OTLP, not statsd"),
        ("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nmax_body = \"1MiB\"\n", "applies to OTLP receivers only"),
        ("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:4318\"\nmax_body = \"10B\"\n", "receivers[0].max_body"),
        ("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:4318\"\nname = \"app\"\n\n[[logs]]\nname = \"app\"\ninclude = [\"/tmp/*.log\"]\n", "names both an OTLP receiver's log source and another source"),
    ];
    for (i, (config, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("{i}.toml"));
        std::fs::write(&path, format!("{config}\n{sink}")).unwrap();
        let (ok, out, err) = common::sonde(&["validate", "--config", path.to_str().unwrap()]);
        assert!(!ok, "{config} was taken: {out}");
        assert!(err.contains(want), "{config}: {err}");
    }
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        format!("[[receivers]]\nprotocol = \"otlp\"\nlisten = \"grpc://127.0.0.1:4317\"\n\n[[receivers]]\nprotocol = \"otlp\"\nlisten = \"http://127.0.0.1:4318\"\n\n{sink}\n[[sinks]]\ntype = \"file\"\npath = \"/tmp/l.jsonl\"\ninputs = [\"otlp\"]\n"),
    )
    .unwrap();
    let (ok, _, err) = common::sonde(&["validate", "--config", good.to_str().unwrap()]);
    assert!(ok, "{err}");
}
