//! `sonde tap` and `sonde top` against a running agent whose admin site
//! asks for its token: tap shows the exact points and records sent, top's
//! numbers agree with `/metrics`, and neither works without the token.

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, msgpack_bunch, msgpack_message, udp_send, wait_for, Agent};
use serde_json::{json, Value};

/// An agent with a StatsD and a msgpack receiver, a log source `app`
/// over `logs/*.log`, a blackhole sink and the admin token on.
fn agent(statsd: u16, msgpack: u16) -> Agent {
    Agent::start_config(|admin, dir| {
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"
admin_auth = "token"

[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:{statsd}"

[[receivers]]
protocol = "msgpack"
listen = "udp://127.0.0.1:{msgpack}"

[[logs]]
name = "app"
include = ["{logs}/*.log"]
fields = {{ team = "payments" }}

[[sinks]]
type = "blackhole"
inputs = ["metrics", "app"]
"#,
            data = dir.join("data").display(),
            logs = dir.join("logs").display(),
        )
    })
}

/// The value of one line of `/metrics`, read with the admin token.
fn metric(agent: &Agent, series: &str) -> Option<f64> {
    let token = std::fs::read_to_string(agent.path("data/admin.token")).ok()?;
    let text = ureq::get(&format!("http://127.0.0.1:{}/metrics", agent.admin))
        .header("Authorization", &format!("Bearer {}", token.trim()))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

/// `sonde ARGS --config` the agent's config, its stdout piped.
fn spawn(agent: &Agent, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(args)
        .arg("--config")
        .arg(agent.path("sonde.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `send` every 50 ms until `child` exits (it opens its tap at some
/// point in between, and shows what came after), then returns its stdout
/// lines, parsed as JSON.
fn lines_while(mut child: Child, mut send: impl FnMut()) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(
                status.success(),
                "{status}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
        }
        assert!(Instant::now() < deadline, "the command did not finish");
        send();
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn tap_shows_the_points_sent_as_parsed_with_their_tags_and_values() {
    let (statsd, msgpack) = (free_port(), free_port());
    let agent = agent(statsd, msgpack);

    // One datagram: what the tap shows of it is the whole datagram, in
    // order, less the metric the glob leaves out.
    let datagram = b"checkout.latency:12.5|ms|@0.5|#env:prod,az:eu-1\nother.metric:1|c\ncheckout.items:3|c|#env:prod\ncheckout.open:-2|g\n";
    let tap = spawn(
        &agent,
        &["tap", "--metric", "checkout.*", "--limit", "3", "--json"],
    );
    let items = lines_while(tap, || udp_send(statsd, datagram));
    assert_eq!(
        items,
        [
            json!({"receiver": format!("udp://127.0.0.1:{statsd}"), "protocol": "statsd",
                   "name": "checkout.latency", "kind": "timer", "value": 12.5,
                   "sample_rate": 0.5, "tags": {"env": "prod", "az": "eu-1"}}),
            json!({"receiver": format!("udp://127.0.0.1:{statsd}"), "protocol": "statsd",
                   "name": "checkout.items", "kind": "count", "value": 3.0,
                   "tags": {"env": "prod"}}),
            json!({"receiver": format!("udp://127.0.0.1:{statsd}"), "protocol": "statsd",
                   "name": "checkout.open", "kind": "gauge", "delta": -2.0}),
        ]
    );

    // --receiver msgpack sees the msgpack points only, StatsD ones sent
    // alongside left out.
    let bunch = msgpack_bunch(&[
        msgpack_message("timer", "rpc.time", "7", "method=get|dc=a", ""),
        msgpack_message("ts_store", "queue.depth", "40", "q=jobs", "1700000000"),
    ]);
    let tap = spawn(
        &agent,
        &["tap", "--receiver", "msgpack", "--limit", "2", "--json"],
    );
    let items = lines_while(tap, || {
        udp_send(statsd, b"noise:1|c\n");
        udp_send(msgpack, &bunch);
    });
    let shown: Vec<_> = items
        .iter()
        .map(|i| {
            (
                i["name"].clone(),
                i["kind"].clone(),
                i["value"].clone(),
                i["tags"].clone(),
                i["timestamp"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                json!("rpc.time"),
                json!("timer"),
                json!(7.0),
                json!({"method": "get", "dc": "a"}),
                Value::Null
            ),
            (
                json!("queue.depth"),
                json!("ts_store"),
                json!(40.0),
                json!({"q": "jobs"}),
                json!(1700000000)
            ),
        ]
    );
    // The text form says the same for people.
    let tap = spawn(
        &agent,
        &["tap", "--metric", "checkout.items", "--limit", "1"],
    );
    let out = {
        let mut child = tap;
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline);
            udp_send(statsd, datagram);
            std::thread::sleep(Duration::from_millis(50));
        }
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    };
    assert_eq!(
        out,
        format!("udp://127.0.0.1:{statsd}  checkout.items{{env=prod}} count 3.0\n")
    );
    // Every tap ended with its command: none is left for the data path
    // to serve.
    wait_for("the taps to end", Duration::from_secs(20), || {
        (metric(&agent, "sonde_admin_taps") == Some(0.0)).then_some(())
    });
}

#[test]
fn tap_shows_the_records_a_log_source_sends_with_their_fields() {
    let agent = agent(free_port(), free_port());
    let log = agent.path("logs/app.log");
    let tap = spawn(
        &agent,
        &["tap", "--source", "app", "--limit", "2", "--json"],
    );
    let mut n = 0;
    let items = lines_while(tap, || {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        writeln!(f, "payment {n} accepted").unwrap();
        n += 1;
    });
    assert_eq!(items.len(), 2);
    let first: u32 = items[0]["record"]["message"]
        .as_str()
        .and_then(|m| m.split(' ').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{:?}", items[0]));
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["source"], "app");
        let r = &item["record"];
        assert_eq!(
            r["message"],
            format!("payment {} accepted", first + i as u32),
            "{r}"
        );
        assert_eq!(r["team"], "payments", "{r}");
        assert_eq!(r["file"], log.display().to_string(), "{r}");
    }
}

/// Sends `per_tick` StatsD points every 10 ms, `a.hot` three times as
/// often as `b.warm`, until `stop` is set; returns the points sent.
fn steady_load(port: u16, stop: &std::sync::atomic::AtomicBool) -> u64 {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let datagram = b"a.hot:1|c\na.hot:1|c\na.hot:1|c\nb.warm:1|c\n";
    let mut sent = 0;
    let start = Instant::now();
    let mut tick = 0u32;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        sock.send_to(datagram, ("127.0.0.1", port)).unwrap();
        sent += 4;
        tick += 1;
        let next = start + Duration::from_millis(10) * tick;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    sent
}

fn sum(frame: &Value, table: &str, key: &str) -> f64 {
    frame[table]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[key].as_f64().unwrap())
        .sum()
}

#[test]
fn top_agrees_with_the_metrics_endpoint_and_ranks_metric_names() {
    let (statsd, msgpack) = (free_port(), free_port());
    let agent = agent(statsd, msgpack);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let load = s.spawn(|| steady_load(statsd, &stop));
        let top = spawn(
            &agent,
            &["top", "--json", "--count", "3", "--interval", "1"],
        );
        let frames = lines_while(top, || {});
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sent = load.join().unwrap();
        assert_eq!(frames.len(), 3);
        for f in &frames {
            // 400 points a second are sent; a loaded machine may send
            // fewer, never more.
            let rate = sum(f, "receivers", "points_per_s");
            assert!((150.0..=480.0).contains(&rate), "{rate}: {f}");
            let names = f["metrics"].as_array().unwrap();
            assert_eq!(names[0]["name"], "a.hot", "{f}");
            assert_eq!(names[1]["name"], "b.warm", "{f}");
            let ratio = names[0]["points_per_s"].as_f64().unwrap()
                / names[1]["points_per_s"].as_f64().unwrap();
            assert!((2.5..=3.5).contains(&ratio), "{ratio}: {f}");
        }
        // Between two frames, the total moved by the rate times the time.
        for w in frames.windows(2) {
            let moved =
                sum(&w[1], "receivers", "points_total") - sum(&w[0], "receivers", "points_total");
            let rate = sum(&w[1], "receivers", "points_per_s") * w[1]["seconds"].as_f64().unwrap();
            assert!((moved - rate).abs() < 1.0, "{moved} {rate}");
        }
        // Once the load stops, top's totals are /metrics' own.
        let label = format!("sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{statsd}\",protocol=\"statsd\"}}");
        let total = wait_for("every point counted", Duration::from_secs(20), || {
            metric(&agent, &label).filter(|&v| v == sent as f64)
        });
        let top = spawn(
            &agent,
            &["top", "--json", "--count", "1", "--interval", "0.5"],
        );
        let frames = lines_while(top, || {});
        assert_eq!(sum(&frames[0], "receivers", "points_total"), total);
        assert_eq!(sum(&frames[0], "receivers", "points_per_s"), 0.0);
    });
}

#[test]
fn another_local_user_cannot_tap_or_top() {
    let agent = agent(free_port(), free_port());
    // The config where any user can read it; the token stays in the
    // agent's data_dir, readable by the agent's user only.
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        shared.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = shared.path().join("sonde.toml");
    std::fs::copy(agent.path("sonde.toml"), &config).unwrap();
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    for args in [&["tap", "--limit", "1"][..], &["top", "--count", "1"][..]] {
        let out = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_sonde"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .output();
        let Ok(out) = out else {
            eprintln!("setpriv is not installed: skipped");
            return;
        };
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("reading the admin token"), "{args:?}: {err}");
    }
    // And the site gives nothing without the token.
    assert_eq!(common::http_get(agent.admin, "/api/tap?what=points"), None);
    assert_eq!(agent.metric("sonde_admin_taps"), None, "the token is asked");
}

#[test]
fn bench_reads_the_counters_of_an_agent_that_asks_for_its_token() {
    let statsd = free_port();
    let agent = agent(statsd, free_port());
    let (ok, out, err) = common::sonde(&[
        "bench",
        "--to",
        &format!("udp://127.0.0.1:{statsd}"),
        "--rate",
        "5k",
        "--duration",
        "1s",
        "--config",
        agent.path("sonde.toml").to_str().unwrap(),
        "--pid",
        &agent.child.id().to_string(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let sent = r["points_sent"].as_u64().unwrap();
    assert!(sent > 0, "{out}");
    assert_eq!(r["points_accounted"].as_u64(), Some(sent), "{out}");
}
