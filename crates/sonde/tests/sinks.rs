//! The network sinks against servers in the test: batching, compression,
//! headers, retries, refusals, reconnects and the disk buffer across an
//! outage and a restart. (The sinks against real Prometheus, InfluxDB and
//! carbon are in `backends.rs`.)

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::http_server::{json_lines, Server};
use common::*;

#[test]
fn http_sink_posts_compressed_json_lines_with_its_headers() {
    let server = Server::start(0, 200);
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"http\"\nurl = \"http://127.0.0.1:{}/ingest\"\ncompression = \"zstd\"\nmax_batch_points = 3\nmax_batch_age = \"0s\"\nheaders = {{ Authorization = \"Bearer s3cret\" }}\n",
            statsd_receiver(udp),
            server.port
        ),
    );
    udp_send(udp, b"h.a:1|c\nh.b:2|c\nh.c:3|c\nh.d:4|c\nh.e:5|c|#dc:x\n");
    let got = wait_for("five points over http", Duration::from_secs(10), || {
        let got = server.accepted();
        (got.iter().map(|g| json_lines(&g.body).len()).sum::<usize>() >= 5).then_some(got)
    });
    // Five points, at most three a request.
    assert!(got.len() >= 2, "{} requests", got.len());
    for g in &got {
        assert_eq!(g.headers["content-encoding"], "zstd");
        assert_eq!(g.headers["content-type"], "application/x-ndjson");
        assert_eq!(g.headers["authorization"], "Bearer s3cret");
        assert!(json_lines(&g.body).len() <= 3);
    }
    let sent: Vec<Json> = got.iter().flat_map(|g| json_lines(&g.body)).collect();
    // Exactly what the file sink wrote for the same window.
    let file = wait_for("the file sink", Duration::from_secs(5), || {
        let p = agent.points();
        (p.len() >= 5).then_some(p)
    });
    let key = |p: &Json| p.to_string();
    let mut a: Vec<String> = sent.iter().map(key).collect();
    let mut b: Vec<String> = file.iter().map(key).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    wait_for("sink counters", Duration::from_secs(5), || {
        (m("sonde_sink_points_total{sink=\"http\"}") == 5.0).then_some(())
    });
    assert!(m("sonde_sink_batches_total{sink=\"http\"}") >= 2.0);
    assert!(m("sonde_sink_sent_bytes_total{sink=\"http\"}") > 0.0);
    assert!(m("sonde_sink_bytes_total{sink=\"http\"}") > 0.0);
    server.stop();
}

#[test]
fn http_sink_sends_msgpack_when_asked() {
    let server = Server::start(0, 200);
    let udp = free_port();
    let _agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"http\"\nurl = \"http://127.0.0.1:{}/\"\nformat = \"msgpack\"\ncompression = \"none\"\n",
            statsd_receiver(udp),
            server.port
        ),
    );
    udp_send(udp, b"m.a:7|c|#k:v\n");
    let g = wait_for("a msgpack request", Duration::from_secs(10), || {
        server.accepted().into_iter().next()
    });
    assert_eq!(g.headers["content-type"], "application/msgpack");
    assert!(!g.headers.contains_key("content-encoding"));
    // An array of one map with the JSON contract's fields.
    let mut rd = &g.body[..];
    assert_eq!(rmp::decode::read_array_len(&mut rd).unwrap(), 1);
    assert_eq!(rmp::decode::read_map_len(&mut rd).unwrap(), 4);
    let mut buf = [0u8; 64];
    assert_eq!(rmp::decode::read_str(&mut rd, &mut buf).unwrap(), "name");
    assert_eq!(rmp::decode::read_str(&mut rd, &mut buf).unwrap(), "m.a");
    server.stop();
}

#[test]
fn http_sink_retries_server_errors_and_drops_refusals_with_the_servers_message() {
    let server = Server::start(0, 503);
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"http\"\nurl = \"http://127.0.0.1:{}/\"\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"200ms\"\n",
            statsd_receiver(udp),
            server.port
        ),
    );
    udp_send(udp, b"r.a:1|c\n");
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    wait_for("three retries", Duration::from_secs(10), || {
        (m("sonde_sink_retries_total{sink=\"http\"}") >= 3.0).then_some(())
    });
    assert!(m("sonde_sink_failures_total{sink=\"http\",reason=\"http_5xx\"}") >= 3.0);
    assert_eq!(m("sonde_sink_queue_batches{sink=\"http\"}"), 1.0);
    // The backend recovers: the same request goes through, once.
    server.status.store(200, Ordering::SeqCst);
    let got = wait_for("the retried request", Duration::from_secs(10), || {
        let g = server.accepted();
        (!g.is_empty()).then_some(g)
    });
    assert_eq!(named(&json_lines(&got[0].body), "r.a").len(), 1);
    // A refusal is not retried: dropped, counted, logged with its reason.
    server.status.store(400, Ordering::SeqCst);
    udp_send(udp, b"r.b:1|c\n");
    wait_for("a rejected point", Duration::from_secs(10), || {
        (m("sonde_sink_dropped_points_total{sink=\"http\",reason=\"rejected\"}") >= 1.0)
            .then_some(())
    });
    assert!(agent.stderr().contains("test server says: no thanks"));
    let before = server.got.lock().unwrap().len();
    let retries = m("sonde_sink_retries_total{sink=\"http\"}");
    // Windows with no points send nothing, so nothing new may arrive.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(server.got.lock().unwrap().len(), before);
    assert_eq!(m("sonde_sink_retries_total{sink=\"http\"}"), retries);
    server.stop();
}

#[test]
fn tcp_sink_reconnects_after_the_listener_goes_away() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"tcp\"\naddress = \"127.0.0.1:{port}\"\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"200ms\"\n",
            statsd_receiver(udp)
        ),
    );
    let read_lines = |l: &TcpListener, want: usize| {
        let (conn, _) = l.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut r = BufReader::new(conn);
        let mut lines = Vec::new();
        while lines.len() < want {
            let mut line = String::new();
            assert!(
                r.read_line(&mut line).unwrap() > 0,
                "connection closed early"
            );
            lines.push(serde_json::from_str::<Json>(&line).unwrap());
        }
        (r, lines)
    };
    udp_send(udp, b"t.a:1|c\n");
    let (first_conn, lines) = read_lines(&listener, 1);
    assert_eq!(lines[0]["name"], "t.a");
    // The backend goes away, connection and listener both.
    drop(first_conn);
    drop(listener);
    udp_send(udp, b"t.b:2|c\n");
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    wait_for("a failed connect", Duration::from_secs(10), || {
        (m("sonde_sink_failures_total{sink=\"tcp\",reason=\"connect\"}") >= 1.0).then_some(())
    });
    // It comes back on the same port: the queued point arrives.
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (_conn, lines) = read_lines(&listener, 1);
    assert_eq!(lines[0]["name"], "t.b");
    assert_eq!(lines[0]["value"], 2);
}

/// (timestamp, value) of every point named `name`, sorted: a multiset, so
/// that a window closed early by a restart and reopened counts twice in
/// both the sink and the reference.
fn windows(points: &[Json], name: &str) -> Vec<(i64, f64)> {
    let mut v: Vec<(i64, f64)> = named(points, name)
        .into_iter()
        .map(|(_, v, ts)| (ts, v))
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

#[test]
fn disk_buffer_keeps_every_window_through_an_outage_and_a_restart() {
    // The backend is down from the start.
    let hold = PortHold::new();
    let port = hold.port;
    let udp = free_port();
    let mut agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"http\"\nname = \"durable\"\nurl = \"http://127.0.0.1:{port}/\"\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"200ms\"\nmax_batch_age = \"0s\"\nbuffer = {{ type = \"disk\", max_size = \"64MiB\" }}\n",
            statsd_receiver(udp)
        ),
    );
    let m = |a: &Agent, s: &str| a.metric(s).unwrap_or(-1.0);
    let mut n = 0;
    let mut send_until = |a: &Agent, cond: &dyn Fn(&Agent) -> bool| {
        wait_for("windows to queue", Duration::from_secs(20), || {
            n += 1;
            udp_send(udp, format!("o.n:{n}|c\n").as_bytes());
            std::thread::sleep(Duration::from_millis(100));
            cond(a).then_some(())
        });
    };
    send_until(&agent, &|a| {
        m(a, "sonde_sink_queue_batches{sink=\"durable\"}") >= 3.0
    });
    assert!(agent.path("data/buffers/durable").is_dir());
    // A restart in the middle of the outage: the buffer is kept and loaded.
    agent.restart();
    assert!(agent
        .stderr()
        .contains("disk buffer kept requests from the last run"));
    // Two more windows with data from the restarted agent.
    let before = windows(&agent.points(), "o.n").len();
    send_until(&agent, &|a| windows(&a.points(), "o.n").len() >= before + 2);
    // Every point sent is in some flushed window before the backend returns.
    let total = f64::from((1..=n).sum::<u32>());
    wait_for("the last window flushed", Duration::from_secs(5), || {
        let sum: f64 = windows(&agent.points(), "o.n").iter().map(|w| w.1).sum();
        (sum == total).then_some(())
    });
    // The backend returns; nothing more is sent. Every window the agent
    // produced (the file sink's record) arrives, none twice.
    let server = Server::start(port, 200);
    drop(hold);
    let want = |a: &Agent| windows(&a.points(), "o.n");
    wait_eq(
        "every window at the backend",
        Duration::from_secs(20),
        || {
            let got: Vec<Json> = server
                .accepted()
                .iter()
                .flat_map(|g| json_lines(&g.body))
                .collect();
            (windows(&got, "o.n"), want(&agent))
        },
        |want| want.len() >= 4,
    );
    wait_for("an empty buffer", Duration::from_secs(5), || {
        (m(&agent, "sonde_sink_queue_batches{sink=\"durable\"}") == 0.0).then_some(())
    });
    assert_eq!(
        m(
            &agent,
            "sonde_sink_dropped_points_total{sink=\"durable\",reason=\"buffer_full\"}"
        ),
        0.0
    );
    server.stop();
}

#[test]
fn a_full_memory_buffer_drops_the_oldest_and_counts_them() {
    let hold = PortHold::new();
    let port = hold.port;
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/\"\ncompression = \"none\"\nmax_batch_age = \"0s\"\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"100ms\"\nbuffer = {{ type = \"memory\", max_size = \"300B\" }}\n",
            statsd_receiver(udp)
        ),
    );
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    let mut n = 0;
    wait_for("drops", Duration::from_secs(20), || {
        n += 1;
        udp_send(udp, format!("f.n:{n}|c\n").as_bytes());
        std::thread::sleep(Duration::from_millis(200));
        (m("sonde_sink_dropped_points_total{sink=\"http\",reason=\"buffer_full\"}") >= 2.0)
            .then_some(())
    });
    // The buffer holds at most 300 bytes: the newest request or two.
    assert!(m("sonde_sink_queue_bytes{sink=\"http\"}") <= 300.0);
    let server = Server::start(port, 200);
    drop(hold);
    wait_for("the queue to drain", Duration::from_secs(10), || {
        (m("sonde_sink_queue_batches{sink=\"http\"}") == 0.0).then_some(())
    });
    // Every point produced is either delivered or counted as dropped.
    let produced = agent.points().len() as f64;
    wait_for(
        "delivered + dropped = produced",
        Duration::from_secs(5),
        || {
            let (sent, dropped) = (
                m("sonde_sink_points_total{sink=\"http\"}"),
                m("sonde_sink_dropped_points_total{sink=\"http\",reason=\"buffer_full\"}"),
            );
            (sent + dropped == agent.points().len() as f64).then_some(())
        },
    );
    assert!(produced > 0.0);
    server.stop();
}

#[test]
fn otlp_sink_posts_metrics_the_official_definitions_decode() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    use prost::Message;

    let server = Server::start(0, 200);
    let udp = free_port();
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\ninterval = \"1s\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"metrics-host\"\n\n\
             {}[[sinks]]\ntype = \"otlp_http\"\nurl = \"http://127.0.0.1:{}/v1/metrics\"\nmax_batch_age = \"0s\"\n\n\
             [[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
            dir.join("data").display(),
            statsd_receiver(udp),
            server.port,
            dir.join("points.jsonl").display()
        )
    });
    udp_send(udp, b"ot.requests:3|c|#dc:x\not.temp:21.5|g\n");
    let g = wait_for("an OTLP request", Duration::from_secs(10), || {
        server.accepted().into_iter().next()
    });
    assert_eq!(g.headers["content-type"], "application/x-protobuf");
    assert_eq!(g.headers["content-encoding"], "gzip");
    let req = ExportMetricsServiceRequest::decode(&g.body[..]).unwrap();
    let rm = &req.resource_metrics[0];
    let host = &rm.resource.as_ref().unwrap().attributes[0];
    assert_eq!(host.key, "host.name");
    assert_eq!(
        host.value.as_ref().unwrap().value,
        Some(Any::StringValue("metrics-host".into())),
        "agent.hostname names the host"
    );
    let file = agent.points();
    let mut seen = 0;
    for m in &rm.scope_metrics[0].metrics {
        let (points, monotonic) = match m.data.as_ref().unwrap() {
            Data::Sum(s) => (&s.data_points, s.is_monotonic),
            Data::Gauge(g) => (&g.data_points, false),
            other => panic!("unexpected {other:?}"),
        };
        for p in points {
            let Some(Value::AsDouble(v)) = p.value else {
                panic!("{p:?}")
            };
            let want = named(&file, &m.name);
            assert_eq!(want.len(), 1, "{}", m.name);
            let (tags, value, ts) = &want[0];
            assert_eq!((v, p.time_unix_nano), (*value, *ts as u64 * 1_000_000_000));
            for a in &p.attributes {
                let Some(Any::StringValue(s)) = a.value.as_ref().and_then(|v| v.value.clone())
                else {
                    panic!("{a:?}")
                };
                assert_eq!(tags[&a.key], s.as_str());
            }
            assert!(
                !monotonic,
                "StatsD counters are per-window sums, not running totals"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 2);
    server.stop();
}

#[test]
fn sighup_reloads_receivers_and_sinks_keeping_what_did_not_change() {
    let a = free_port();
    let mut agent = Agent::start(
        "1s",
        &format!("[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{a}\"\n"),
    );
    let hup = |agent: &Agent| {
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &agent.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    let count = |agent: &Agent, what: &str| agent.stderr().matches(what).count();
    let total = |agent: &Agent| {
        named(&agent.points(), "kept.total")
            .last()
            .map(|p| p.1)
            .unwrap_or(0.0)
    };
    // A running total on the receiver that will stay.
    udp_send(a, &msgpack_message("counter", "kept.total", "5", "", ""));
    wait_for("the first total", Duration::from_secs(10), || {
        (total(&agent) == 5.0).then_some(())
    });

    // Reload: one receiver and an http sink more.
    let server = Server::start(0, 200);
    let b = free_port();
    let cfg = std::fs::read_to_string(agent.path("sonde.toml")).unwrap();
    let more = format!(
        "{cfg}\n[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{b}\"\n\n[[sinks]]\ntype = \"http\"\nurl = \"http://127.0.0.1:{}/\"\nmax_batch_age = \"0s\"\n",
        server.port
    );
    std::fs::write(agent.path("sonde.toml"), &more).unwrap();
    hup(&agent);
    wait_for("the reload", Duration::from_secs(10), || {
        (count(&agent, "config reloaded") == 1).then_some(())
    });
    udp_send(b, b"new.receiver:1|c\n");
    udp_send(a, &msgpack_message("counter", "kept.total", "2", "", ""));
    // The kept receiver's series kept its total; the new receiver works;
    // the new sink gets the windows.
    wait_for("the total to continue", Duration::from_secs(10), || {
        (total(&agent) == 7.0).then_some(())
    });
    wait_for("the new receiver's point", Duration::from_secs(10), || {
        (!named(&agent.points(), "new.receiver").is_empty()).then_some(())
    });
    wait_for("the new sink", Duration::from_secs(10), || {
        server
            .accepted()
            .iter()
            .any(|g| !named(&json_lines(&g.body), "new.receiver").is_empty())
            .then_some(())
    });

    // A broken file is refused; everything keeps running.
    std::fs::write(agent.path("sonde.toml"), format!("{more}\n[[sinks]\n")).unwrap();
    hup(&agent);
    wait_for("the refusal", Duration::from_secs(10), || {
        (count(&agent, "the new config is refused") == 1).then_some(())
    });
    udp_send(b, b"still.there:1|c\n");
    wait_for(
        "the receiver to still work",
        Duration::from_secs(10),
        || (!named(&agent.points(), "still.there").is_empty()).then_some(()),
    );

    // Back to the first config: the added receiver hands over what it
    // received and stops, and its counters leave /metrics.
    udp_send(b, b"last.words:1|c\n");
    std::fs::write(agent.path("sonde.toml"), &cfg).unwrap();
    hup(&agent);
    wait_for("the second reload", Duration::from_secs(10), || {
        (count(&agent, "config reloaded") == 2).then_some(())
    });
    wait_for(
        "the retired receiver's last point",
        Duration::from_secs(10),
        || (!named(&agent.points(), "last.words").is_empty()).then_some(()),
    );
    let metrics = agent.get("/metrics").unwrap();
    assert!(!metrics.contains(&format!("127.0.0.1:{b}")), "{metrics}");
    assert!(!metrics.contains("sink=\"http\""));
    assert!(agent.stderr().contains("receiver stopped"));
    agent.stop();
    server.stop();
}

#[test]
fn sigterm_drops_and_counts_what_a_memory_buffer_could_not_deliver() {
    // The backend never comes up; the grace period is short.
    let hold = PortHold::new();
    let port = hold.port;
    let udp = free_port();
    let mut agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/\"\nmax_batch_age = \"0s\"\nshutdown_grace = \"300ms\"\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"100ms\"\n",
            statsd_receiver(udp)
        ),
    );
    udp_send(udp, b"gone.a:1|c\ngone.b:1|c\n");
    wait_for("a queued request", Duration::from_secs(10), || {
        (agent.metric("sonde_sink_queue_batches{sink=\"http\"}")? >= 1.0).then_some(())
    });
    let started = std::time::Instant::now();
    agent.stop();
    // It waited for the grace period, not longer than the harness allows.
    assert!(started.elapsed() < Duration::from_secs(10));
    let log = agent.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("stopping with undelivered requests in memory"))
        .unwrap_or_else(|| panic!("no shutdown drop logged: {log}"));
    // Every point the flusher produced (the file sink's record) is in it.
    let produced = agent.points().len();
    assert!(
        line.contains(&format!("lost={produced} points")),
        "{line} vs {produced} points"
    );
}

/// A log source's records over the http sink: JSON lines, compressed,
/// held through an outage (the source waits, nothing is lost), and a
/// refused request counted rather than retried.
#[test]
fn http_sink_posts_log_records_and_holds_them_through_an_outage() {
    let server = Server::start(0, 503);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"web-1\"\n\n\
             [[logs]]\nname = \"app\"\ninclude = [\"{}/*.log\"]\nfields = {{ env = \"test\" }}\n\n\
             [[sinks]]\ntype = \"http\"\ninputs = [\"app\"]\nurl = \"http://127.0.0.1:{}/logs\"\n\
             compression = \"gzip\"\nmax_batch_points = 400\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"200ms\"\n",
            dir.join("data").display(),
            logs.path().display(),
            server.port
        )
    });
    let text: String = (0..1000).map(|n| format!("line {n:04}\n")).collect();
    std::fs::write(&log, &text).unwrap();
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    wait_for("two retries", Duration::from_secs(10), || {
        (m("sonde_sink_retries_total{sink=\"http\"}") >= 2.0).then_some(())
    });
    // The source brings its counters to /metrics every 100 ms.
    wait_for(
        "every byte read and none acknowledged",
        Duration::from_secs(10),
        || (m("sonde_log_bytes_behind{source=\"app\"}") == text.len() as f64).then_some(()),
    );
    server.status.store(200, Ordering::SeqCst);
    wait_for("every line acknowledged", Duration::from_secs(10), || {
        (m("sonde_log_bytes_behind{source=\"app\"}") == 0.0).then_some(())
    });
    let got = server.accepted();
    assert!(got.len() >= 3, "1000 records in requests of at most 400");
    let mut messages = Vec::new();
    for g in &got {
        assert_eq!(g.headers["content-type"], "application/x-ndjson");
        assert_eq!(g.headers["content-encoding"], "gzip");
        let records = json_lines(&g.body);
        assert!(records.len() <= 400);
        for r in records {
            assert_eq!(r["host"], "web-1");
            assert_eq!(r["source"], "app");
            assert_eq!(r["env"], "test");
            assert_eq!(r["file"], log.display().to_string());
            messages.push(r["message"].as_str().unwrap().to_string());
        }
    }
    let want: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(messages, want, "every line once, in order");
    assert_eq!(m("sonde_sink_records_total{sink=\"http\"}"), 1000.0);
    // A refusal is not retried: the records are counted as dropped and
    // the source goes on.
    server.status.store(400, Ordering::SeqCst);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"refused\n"))
        .unwrap();
    wait_for(
        "the refused record counted",
        Duration::from_secs(10),
        || {
            (m("sonde_sink_dropped_records_total{sink=\"http\",reason=\"rejected\"}") == 1.0
                && m("sonde_log_bytes_behind{source=\"app\"}") == 0.0)
                .then_some(())
        },
    );
    assert!(agent.stderr().contains("test server says: no thanks"));
    server.stop();
}

/// With a disk buffer, the http sink takes log records off their source
/// while the endpoint is down (the checkpoint moves on), and the records
/// survive a kill of the agent and the deletion of their file.
#[test]
fn http_sink_disk_buffer_keeps_log_records_through_a_kill_and_a_deleted_file() {
    let server = Server::start(0, 503);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let mut agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n\
             [[logs]]\nname = \"app\"\ninclude = [\"{}/*.log\"]\n\n\
             [[sinks]]\ntype = \"http\"\ninputs = [\"app\"]\nurl = \"http://127.0.0.1:{}/logs\"\n\
             compression = \"zstd\"\nmax_batch_points = 300\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"200ms\"\n\
             buffer = {{ type = \"disk\", max_size = \"16MiB\" }}\n",
            dir.join("data").display(),
            logs.path().display(),
            server.port
        )
    });
    let text: String = (0..1000).map(|n| format!("line {n:04}\n")).collect();
    std::fs::write(&log, &text).unwrap();
    let m = |a: &Agent, s: &str| a.metric(s).unwrap_or(-1.0);
    wait_for(
        "every line stored and acknowledged while the endpoint is down",
        Duration::from_secs(10),
        || {
            (m(&agent, "sonde_sink_log_buffer_records{sink=\"http\"}") == 1000.0
                && m(&agent, "sonde_log_bytes_behind{source=\"app\"}") == 0.0
                && m(&agent, "sonde_sink_retries_total{sink=\"http\"}") >= 1.0)
                .then_some(())
        },
    );
    assert!(server.accepted().is_empty());
    // Only the buffer has the lines now.
    agent.kill();
    std::fs::remove_file(&log).unwrap();
    server.status.store(200, Ordering::SeqCst);
    agent.start_again();
    wait_for("the buffer drained", Duration::from_secs(10), || {
        (m(&agent, "sonde_sink_log_buffer_records{sink=\"http\"}") == 0.0
            && m(&agent, "sonde_sink_records_total{sink=\"http\"}") == 1000.0)
            .then_some(())
    });
    let mut messages = Vec::new();
    for g in server.accepted() {
        assert_eq!(g.headers["content-encoding"], "zstd");
        for r in json_lines(&g.body) {
            assert_eq!(r["file"], log.display().to_string());
            messages.push(r["message"].as_str().unwrap().to_string());
        }
    }
    let want: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(messages, want, "every line once, in order");
    assert!(agent
        .stderr()
        .contains("disk buffer kept log records from the last run"));
    agent.stop();
    server.stop();
}
