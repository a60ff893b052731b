//! End-to-end tests of the `sonde` binary over real sockets.

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(20);

fn unix_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn counters_are_running_totals_across_two_windows() {
    let port = free_port();
    let agent = Agent::start(
        "2s",
        &format!("[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{port}\"\n"),
    );
    udp_send(
        port,
        &msgpack_message("counter", "web.requests", "3", "host=a", ""),
    );
    let first = wait_for("the first total", WAIT, || {
        named(&agent.points(), "web.requests")
            .into_iter()
            .find(|p| p.1 == 3.0)
    });
    assert_eq!(first.0, serde_json::json!({"host": "a"}));
    udp_send(
        port,
        &msgpack_message("counter", "web.requests", "4", "host=a", ""),
    );
    let second = wait_for("the second total", WAIT, || {
        named(&agent.points(), "web.requests")
            .into_iter()
            .find(|p| p.1 == 7.0)
    });
    assert!(
        second.2 > first.2,
        "windows advance: {} then {}",
        first.2,
        second.2
    );
    // The run's first window is stamped with the time it started
    // receiving; every later one with its start, aligned to 2 s.
    assert_eq!(
        second.2 % 2,
        0,
        "timestamps are window starts, aligned to 2 s"
    );
    // Every window in between reported the running total, never a reset.
    for (_, v, ts) in named(&agent.points(), "web.requests") {
        assert!(v == 3.0 || v == 7.0, "value {v} at {ts}");
    }
}

#[test]
fn timer_percentiles_match_exact_values_within_one_percent() {
    let port = free_port();
    let mut agent = Agent::start(
        "1h",
        &format!("[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{port}\"\n"),
    );
    // 1,000 samples in a fixed pseudo-random order, sent as bunches of 50.
    let mut values: Vec<u32> = (1..=1000).map(|i| (i * 7919) % 1009 + 1).collect();
    let mut state = 12345u64;
    for i in (1..values.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        values.swap(i, (state >> 33) as usize % (i + 1));
    }
    for chunk in values.chunks(50) {
        let msgs: Vec<Vec<u8>> = chunk
            .iter()
            .map(|v| msgpack_message("timer", "db.query", &v.to_string(), "db=main", ""))
            .collect();
        udp_send(port, &msgpack_bunch(&msgs));
    }
    wait_for("1000 points received", WAIT, || {
        (agent.metric(&format!("sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"msgpack\"}}"))? >= 1000.0).then_some(())
    });
    agent.stop();
    let points = agent.points();
    let mut sorted = values.clone();
    sorted.sort_unstable();
    let exact = |q: f64| f64::from(sorted[((q * 1000.0).ceil() as usize).clamp(1, 1000) - 1]);
    let get = |suffix: &str| {
        let p = named(&points, &format!("db.query.{suffix}"));
        assert_eq!(p.len(), 1, "one {suffix} point: {p:?}");
        p[0].1
    };
    for (suffix, q) in [
        ("pct50", 0.5),
        ("pct90", 0.9),
        ("pct95", 0.95),
        ("pct99", 0.99),
        ("pct999", 0.999),
    ] {
        let (got, want) = (get(suffix), exact(q));
        assert!(
            (got - want).abs() / want <= 0.01,
            "{suffix}: got {got}, exact {want}"
        );
    }
    assert_eq!(get("counter"), 1000.0);
    assert_eq!(get("min"), f64::from(sorted[0]));
    assert_eq!(get("max"), f64::from(sorted[999]));
    let sum: u32 = values.iter().sum();
    assert_eq!(get("sum"), f64::from(sum));
    assert!((get("avg") - f64::from(sum) / 1000.0).abs() < 1e-9);
}

#[test]
fn tag_order_does_not_split_a_series() {
    let port = free_port();
    let mut agent = Agent::start(
        "1h",
        &format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{port}\"\n"),
    );
    udp_send(
        port,
        b"api.hits:1|c|#region:eu,env:prod\napi.hits:2|c|#env:prod,region:eu",
    );
    udp_send(port, b"api.hits:4|c|#region:eu,env:prod");
    wait_for("3 points", WAIT, || {
        (agent.metric(&format!("sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\"}}"))? >= 3.0).then_some(())
    });
    agent.stop();
    let hits = named(&agent.points(), "api.hits");
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(
        hits[0].0,
        serde_json::json!({"env": "prod", "region": "eu"})
    );
    assert_eq!(hits[0].1, 7.0);
}

#[test]
fn malformed_input_is_counted_and_good_neighbours_are_kept() {
    let (mp, sd) = (free_port(), free_port());
    let mut agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{mp}\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{sd}\"\n"
        ),
    );
    // A bunch: good, unknown type, wrong arity, bad value, good.
    let mut wrong_arity = Vec::new();
    rmp::encode::write_array_len(&mut wrong_arity, 3).unwrap();
    for f in ["emit", "counter", "x"] {
        rmp::encode::write_str(&mut wrong_arity, f).unwrap();
    }
    let bunch = msgpack_bunch(&[
        msgpack_message("counter", "good.one", "1", "", ""),
        msgpack_message("gauge", "bad.type", "1", "", ""),
        wrong_arity,
        msgpack_message("counter", "bad.value", "abc", "", ""),
        msgpack_message("counter", "good.two", "2", "", ""),
    ]);
    udp_send(mp, &bunch);
    // Truncated datagram, and plain garbage.
    udp_send(mp, &bunch[..bunch.len() - 3]);
    udp_send(mp, b"\xc1\xff\x00garbage");
    udp_send(
        sd,
        b"good.three:3|c\nnot a metric\n:1|c\ngood.four:4|g\nx:abc|c\ny:1|zz\n_e{1,1}:a|b",
    );
    let dropped = |port: u16, proto: &str, reason: &str| {
        agent.metric(&format!(
            "sonde_receiver_dropped_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"{proto}\",reason=\"{reason}\"}}"
        ))
    };
    wait_for("statsd drops counted", WAIT, || {
        (dropped(sd, "statsd", "event")? >= 1.0).then_some(())
    });
    wait_for("msgpack datagrams counted", WAIT, || {
        (agent.metric(&format!("sonde_receiver_datagrams_total{{receiver=\"udp://127.0.0.1:{mp}\",protocol=\"msgpack\"}}"))? >= 3.0).then_some(())
    });
    assert_eq!(dropped(mp, "msgpack", "unknown_type"), Some(2.0));
    assert_eq!(dropped(mp, "msgpack", "wrong_arity"), Some(2.0));
    assert_eq!(dropped(mp, "msgpack", "bad_value"), Some(2.0));
    assert_eq!(dropped(mp, "msgpack", "truncated"), Some(1.0));
    assert_eq!(dropped(sd, "statsd", "malformed_line"), Some(1.0));
    assert_eq!(dropped(sd, "statsd", "empty_name"), Some(1.0));
    assert_eq!(dropped(sd, "statsd", "bad_value"), Some(1.0));
    assert_eq!(dropped(sd, "statsd", "unknown_type"), Some(1.0));
    agent.stop();
    let points = agent.points();
    // good.one arrived twice (the truncated copy still had it), good.two once.
    assert_eq!(named(&points, "good.one")[0].1, 2.0);
    assert_eq!(named(&points, "good.two")[0].1, 2.0);
    assert_eq!(named(&points, "good.three")[0].1, 3.0);
    assert_eq!(named(&points, "good.four")[0].1, 4.0);
    assert!(named(&points, "bad.value").is_empty());
}

#[test]
fn sigterm_flushes_the_open_window_and_removes_socket_files() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("metric.sock");
    // A stale socket file, as a crashed run leaves it: bound, never removed.
    drop(std::os::unix::net::UnixDatagram::bind(&sock).unwrap());
    assert!(sock.exists());
    let started = unix_secs();
    let mut agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{}\"\n",
            sock.display()
        ),
    );
    let s = std::os::unix::net::UnixDatagram::unbound().unwrap();
    s.send_to(
        &msgpack_message("store", "queue.depth", "17", "q=jobs", ""),
        &sock,
    )
    .unwrap();
    wait_for("the point received", WAIT, || {
        (agent.metric(&format!(
            "sonde_receiver_points_total{{receiver=\"unixgram://{}\",protocol=\"msgpack\"}}",
            sock.display()
        ))? >= 1.0)
            .then_some(())
    });
    assert!(
        agent.points().is_empty(),
        "nothing is written before the window closes"
    );
    agent.stop();
    // Rounded up to the second.
    let stopped = unix_secs() + 1;
    let p = named(&agent.points(), "queue.depth");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].1, 17.0);
    // The open window is the run's first: stamped with the time the agent
    // started receiving, rounded up to the second (or the hour, should one
    // have begun since).
    assert!(
        (started..=stopped).contains(&p[0].2),
        "{} not within [{started}, {stopped}]",
        p[0].2
    );
    assert!(!sock.exists(), "socket file removed on exit");
}

#[test]
fn a_live_socket_file_is_not_stolen() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("live.sock");
    let _live = std::os::unix::net::UnixDatagram::bind(&sock).unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nadmin_listen = \"\"\n[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{}\"\n[[sinks]]\ntype = \"console\"\n",
            sock.display()
        ),
    )
    .unwrap();
    let (ok, _, err) = sonde(&["run", "--config", cfg.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("another process"), "{err}");
}

#[test]
fn every_transport_delivers_points() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let (udp_mp, udp_sd, tcp_sd) = (free_port(), free_port(), free_port());
    let mut agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{udp_mp}\"\n\
             [[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{d}/gram.sock\"\n\
             [[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixseq://{d}/seq.sock\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{udp_sd}\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"unix://{d}/stream.sock\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"tcp://127.0.0.1:{tcp_sd}\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"unixseq://{d}/sdseq.sock\"\n"
        ),
    );
    let sends: [(&str, String, &str); 7] = [
        (
            "msgpack",
            format!("udp://127.0.0.1:{udp_mp}"),
            "via.udp.msgpack",
        ),
        (
            "msgpack",
            format!("unixgram://{d}/gram.sock"),
            "via.unixgram",
        ),
        ("msgpack", format!("unixseq://{d}/seq.sock"), "via.unixseq"),
        (
            "statsd",
            format!("udp://127.0.0.1:{udp_sd}"),
            "via.udp.statsd",
        ),
        (
            "statsd",
            format!("unix://{d}/stream.sock"),
            "via.unix.stream",
        ),
        ("statsd", format!("tcp://127.0.0.1:{tcp_sd}"), "via.tcp"),
        (
            "statsd",
            format!("unixseq://{d}/sdseq.sock"),
            "via.unixseq.statsd",
        ),
    ];
    for (proto, to, name) in &sends {
        let (ok, _, err) = sonde(&[
            "send",
            "--protocol",
            proto,
            "--to",
            to,
            "counter",
            name,
            "5",
            "--tag",
            "t=1",
        ]);
        assert!(ok, "send {name}: {err}");
    }
    // A TCP client that streams many lines in pieces, with a line split
    // across writes and no newline before EOF.
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", tcp_sd)).unwrap();
    tcp.write_all(b"tcp.lines:1|c\ntcp.lines:2|").unwrap();
    tcp.flush().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    tcp.write_all(b"c\ntcp.lines:3|c").unwrap();
    drop(tcp);
    wait_for("all points received", WAIT, || {
        let text = agent.get("/metrics")?;
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with("sonde_receiver_points_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        (total >= 10.0).then_some(())
    });
    agent.stop();
    let points = agent.points();
    for (_, _, name) in &sends {
        let p = named(&points, name);
        assert_eq!(p.len(), 1, "{name}: {p:?}");
        assert_eq!(p[0].1, 5.0, "{name}");
        assert_eq!(p[0].0, serde_json::json!({"t": "1"}), "{name}");
    }
    assert_eq!(named(&points, "tcp.lines")[0].1, 6.0);
    for f in ["gram.sock", "seq.sock", "stream.sock", "sdseq.sock"] {
        assert!(!dir.path().join(f).exists(), "{f} removed");
    }
}

#[test]
fn all_metric_types_follow_the_semantics_table() {
    let (mp, sd) = (free_port(), free_port());
    let mut agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{mp}\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{sd}\"\n\
             [histograms]\nbuckets = [10, 100]\n[[histograms.overrides]]\nprefix = \"fine.\"\nbuckets = [1]\n"
        ),
    );
    udp_send(
        mp,
        &msgpack_bunch(&[
            msgpack_message("meter", "m.meter", "30", "", ""),
            msgpack_message("rate_counter", "m.rate", "60", "", ""),
            msgpack_message("store", "m.store", "1", "", ""),
            msgpack_message("store", "m.store", "2", "", ""),
            msgpack_message("ts_store", "m.ts", "5", "", "1700000000"),
            msgpack_message("ts_store", "m.ts", "6", "", "1700000060"),
            msgpack_message("histogram", "m.hist", "5", "", ""),
            msgpack_message("histogram", "m.hist", "50", "", ""),
            msgpack_message("histogram", "m.hist", "500", "", ""),
            msgpack_message("histogram", "fine.hist", "0.5", "", ""),
        ]),
    );
    udp_send(sd, b"s.gauge:10|g\ns.gauge:+5|g\ns.gauge:-3|g\ns.set:a|s\ns.set:b|s\ns.set:a|s\ns.count:1|c|@0.5\ns.ms:10:20:30|ms\ns.dist:7|d");
    wait_for("points received", WAIT, || {
        (agent.metric(&format!(
            "sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{sd}\",protocol=\"statsd\"}}"
        ))? >= 11.0)
            .then_some(())
    });
    agent.stop();
    let p = agent.points();
    let one = |name: &str| {
        let v = named(&p, name);
        assert_eq!(v.len(), 1, "{name}: {v:?}");
        v[0].1
    };
    assert_eq!(one("m.meter"), 30.0);
    assert!(
        one("m.meter.rate") > 0.0,
        "rate over the elapsed part of the window"
    );
    assert!(one("m.rate") > 0.0);
    assert_eq!(one("m.store"), 2.0);
    let ts: Vec<(f64, i64)> = named(&p, "m.ts").iter().map(|x| (x.1, x.2)).collect();
    assert_eq!(ts, vec![(5.0, 1700000000), (6.0, 1700000060)]);
    let buckets: Vec<(String, f64)> = named(&p, "m.hist.bucket")
        .iter()
        .map(|x| (x.0["le"].as_str().unwrap().to_string(), x.1))
        .collect();
    assert_eq!(
        buckets,
        vec![
            ("10".into(), 1.0),
            ("100".into(), 2.0),
            ("+Inf".into(), 3.0)
        ]
    );
    assert_eq!(one("m.hist.sum"), 555.0);
    assert_eq!(one("m.hist.count"), 3.0);
    assert_eq!(
        named(&p, "fine.hist.bucket").len(),
        2,
        "the prefix override applies"
    );
    assert_eq!(one("s.gauge"), 12.0);
    assert_eq!(one("s.set"), 2.0);
    assert_eq!(one("s.count"), 2.0);
    assert_eq!(one("s.ms.counter"), 3.0);
    assert_eq!(one("s.ms.sum"), 60.0);
    assert_eq!(one("s.dist.max"), 7.0);
}

#[test]
fn the_prometheus_exporter_serves_the_latest_window() {
    let (sd, prom) = (free_port(), free_port());
    let agent = Agent::start(
        "1s",
        &format!(
            "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{sd}\"\n\
             [[sinks]]\ntype = \"prometheus_exporter\"\nlisten = \"127.0.0.1:{prom}\"\n"
        ),
    );
    udp_send(sd, b"web.api-latency:12|g|#host:a,dc.name:x");
    let text = wait_for("the exporter to show the gauge", WAIT, || {
        http_get(prom, "/metrics").filter(|t| t.contains("web_api_latency{"))
    });
    assert!(text.contains("# TYPE web_api_latency gauge\n"), "{text}");
    assert!(
        text.contains("web_api_latency{dc_name=\"x\",host=\"a\"} 12\n"),
        "{text}"
    );
    drop(agent);
}

#[test]
fn admin_metrics_report_series_flushes_and_sinks() {
    let sd = free_port();
    let agent = Agent::start(
        "1s",
        &format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{sd}\"\n"),
    );
    udp_send(sd, b"a:1|c\nb:1|g");
    wait_for("a flush with two series", WAIT, || {
        (agent.metric("sonde_series")? == 2.0).then_some(())
    });
    let text = agent.get("/metrics").unwrap();
    for needle in [
        "sonde_flushes_total ",
        "sonde_flush_duration_seconds ",
        &format!("sonde_receiver_datagrams_total{{receiver=\"udp://127.0.0.1:{sd}\",protocol=\"statsd\"}} 1"),
        &format!("sonde_sink_errors_total{{sink=\"file:{}\"}} 0", agent.out.display()),
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    assert!(agent.get("/nope").is_none());
}

#[test]
fn validate_names_the_problem_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("sonde.toml");
    std::fs::write(&bad, "[agent]\ninterval = \"30\"\n").unwrap();
    let (ok, _, err) = sonde(&["validate", "--config", bad.to_str().unwrap()]);
    assert!(!ok);
    // Exactly what docs/CONFIG.md shows.
    let readme = include_str!("../../../docs/CONFIG.md");
    let shown = readme
        .split("$ sonde validate --config sonde.toml\n")
        .nth(1)
        .and_then(|r| r.split("```").next())
        .expect("docs/CONFIG.md shows `sonde validate` output");
    let shown = shown.replace(
        "config file sonde.toml",
        &format!("config file {}", bad.display()),
    );
    assert_eq!(err, shown);
    let good = dir.path().join("good.toml");
    std::fs::write(&good, sonde(&["default-config"]).1).unwrap();
    let (ok, out, err) = sonde(&["validate", "--config", good.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("ok (3 receivers, 1 sinks"), "{out}");
}

#[test]
fn bench_reports_what_the_agent_accounted() {
    let port = free_port();
    let agent = Agent::start(
        "1h",
        &format!("[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{port}\"\n"),
    );
    let (ok, out, err) = sonde(&[
        "bench",
        "--protocol",
        "msgpack",
        "--to",
        &format!("udp://127.0.0.1:{port}"),
        "--rate",
        "20k",
        "--duration",
        "1s",
        "--series",
        "500",
        "--tags",
        "2",
        "--max-bytes",
        "32768",
        "--admin",
        &format!("127.0.0.1:{}", agent.admin),
        "--pid",
        &agent.child.id().to_string(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let r: Json = serde_json::from_str(&out).unwrap();
    let sent = r["points_sent"].as_u64().unwrap();
    assert!(
        (10_000..=30_000).contains(&sent),
        "sent {sent} at 20k/s for 1s"
    );
    assert_eq!(r["points_accounted"].as_u64(), Some(sent), "{out}");
    assert_eq!(r["loss_percent"].as_f64(), Some(0.0));
    assert!(r["agent_cpu_seconds"].as_f64().is_some());
    assert!(r["agent_peak_rss_bytes"].as_u64().unwrap() > 1_000_000);
    // The agent's own counter agrees.
    assert_eq!(
        agent.metric(&format!("sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"msgpack\"}}")),
        Some(sent as f64)
    );
}

#[test]
fn several_workers_share_a_udp_port_and_their_counts_add_up() {
    let port = free_port();
    let mut agent = Agent::start(
        "1h",
        &format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{port}\"\nworkers = 2\nreceive_buffer = \"4MiB\"\n"),
    );
    // A thread takes its name once it runs, which may be a moment after
    // the agent answers /health.
    let receive_threads = || {
        std::fs::read_dir(format!("/proc/{}/task", agent.child.id()))
            .unwrap()
            .filter(|t| {
                let comm = std::fs::read_to_string(t.as_ref().unwrap().path().join("comm"))
                    .unwrap_or_default();
                comm.starts_with("recv udp")
            })
            .count()
    };
    wait_for("two receive threads", Duration::from_secs(10), || {
        (receive_threads() == 2).then_some(())
    });
    assert_eq!(receive_threads(), 2, "two receive threads");
    // As root SO_RCVBUFFORCE grants what was asked, and what /metrics and
    // the log say is what the socket holds (`ss -m` shows it as rb).
    let labels = format!("{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\"}}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(
            agent.metric(&format!("sonde_receiver_receive_buffer_bytes{labels}")),
            Some(4194304.0)
        );
        assert!(agent.stderr().contains("receive_buffer=4194304"));
        let ss = std::process::Command::new("ss")
            .args(["-ulmnH", &format!("sport = :{port}")])
            .output();
        if let Some(ss) = ss.ok().filter(|o| o.status.success()) {
            let text = String::from_utf8_lossy(&ss.stdout);
            assert_eq!(text.matches("rb4194304").count(), 2, "{text}");
        }
    }
    // Many source ports, so the kernel spreads them over both sockets.
    for _ in 0..40 {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..25 {
            s.send_to(b"w.hits:1|c\nw.gauge:5|g", ("127.0.0.1", port))
                .unwrap();
        }
    }
    wait_for("2000 points", WAIT, || {
        (agent.metric(&format!("sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\"}}"))? >= 2000.0).then_some(())
    });
    agent.stop();
    let p = agent.points();
    assert_eq!(
        named(&p, "w.hits"),
        vec![(serde_json::json!({}), 1000.0, named(&p, "w.hits")[0].2)]
    );
    assert_eq!(named(&p, "w.gauge")[0].1, 5.0);
}

/// GET returning (status line, body bytes).
fn http_get_raw(port: u16, path: &str) -> (String, Vec<u8>) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&resp[..split]).into_owned();
    (
        head.lines().next().unwrap().to_string(),
        resp[split + 4..].to_vec(),
    )
}

#[test]
fn the_agent_profiles_itself_on_request() {
    let port = free_port();
    let agent = Agent::start(
        "1h",
        &format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{port}\"\n"),
    );
    let admin = agent.admin;
    // Load for the agent to spend CPU on while it is profiled.
    let load = std::thread::spawn(move || {
        let to = format!("udp://127.0.0.1:{port}");
        sonde(&[
            "bench",
            "--to",
            &to,
            "--rate",
            "100k",
            "--duration",
            "10s",
            "--admin",
            "none",
            "--json",
        ])
    });
    // The profiles start once the load reaches the agent (the load
    // generator builds its datagrams first).
    let points = format!(
        "sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\"}}"
    );
    wait_for("the load at the agent", Duration::from_secs(30), || {
        (agent.metric(&points).unwrap_or(0.0) > 0.0).then_some(())
    });
    // Two overlapping profiles: exactly one runs, the other is refused.
    let a = std::thread::spawn(move || http_get_raw(admin, "/debug/pprof/profile?seconds=2"));
    let b = std::thread::spawn(move || http_get_raw(admin, "/debug/pprof/profile?seconds=2"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let (ok, refused) = if a.0.contains("200") { (a, b) } else { (b, a) };
    assert!(ok.0.contains("200"), "{}", ok.0);
    assert!(refused.0.contains("409"), "{}", refused.0);
    assert!(String::from_utf8_lossy(&refused.1).contains("already running"));
    let (status, svg) = http_get_raw(admin, "/debug/pprof/flamegraph?seconds=1");
    assert!(status.contains("200"), "{status}");
    let svg = String::from_utf8(svg).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("</svg>"),
        "an SVG flame graph: {svg}"
    );
    // Drawn by sonde's own renderer, as `sonde profile` draws the host's.
    assert!(svg.contains("own CPU, 1 s"), "{svg}");
    let (status, _) = http_get_raw(admin, "/debug/pprof/profile?seconds=0");
    assert!(status.contains("400"), "{status}");
    let (load_ok, _, load_err) = load.join().unwrap();
    assert!(load_ok, "{load_err}");
    // The real consumer reads the profile, where Go is installed (it is in CI).
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let f = agent.path("cpu.pb");
        std::fs::write(&f, &ok.1).unwrap();
        let out = std::process::Command::new("go")
            .args(["tool", "pprof", "-raw"])
            .arg(&f)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "go tool pprof: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("PeriodType: cpu"), "{text}");
        assert!(
            text.contains("statsd"),
            "the profile shows the parser at work: {text}"
        );
    }
}

/// Each thread of `pid` as (name, nice), from `/proc/PID/task`.
fn thread_nices(pid: u32) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = t.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the `(comm)`: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let nice = rest.split(' ').nth(16).unwrap().parse().unwrap();
        out.push((comm.trim().to_string(), nice));
    }
    out
}

#[test]
fn flusher_sink_and_http_threads_run_nicer_than_the_receive_threads() {
    let sd = free_port();
    let agent = Agent::start(
        "1s",
        &format!("background_nice = 7\n{}", statsd_receiver(sd)),
    );
    let own = thread_nices(std::process::id())[0].1;
    let threads = wait_for("every background thread started", WAIT, || {
        let t = thread_nices(agent.child.id());
        let has = |p: &str| t.iter().any(|(n, _)| n.starts_with(p));
        (has("flusher") && has("sink ") && has("http") && has("recv ")).then_some(t)
    });
    for (name, nice) in &threads {
        let want = if ["flusher", "sink ", "http"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            (own + 7).min(19)
        } else {
            own
        };
        assert_eq!(*nice, want, "thread {name:?} in {threads:?}");
    }
    // The value is checked when the config is read.
    let bad = agent.path("bad.toml");
    std::fs::write(
        &bad,
        "[agent]\nbackground_nice = 20\n[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:1\"\n[[sinks]]\ntype = \"console\"\n",
    )
    .unwrap();
    let (ok, _, err) = sonde(&["validate", "--config", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("line 2") && err.contains("agent.background_nice"),
        "{err}"
    );
}

/// The next datagram on `socket` as text (its read timeout set).
fn next_notice(socket: &std::os::unix::net::UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no notice from sonde: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn under_systemd_it_is_ready_once_bound_notifies_reloads_and_stops_and_logs_json() {
    let dir = tempfile::tempdir().unwrap();
    let notify = std::os::unix::net::UnixDatagram::bind(dir.path().join("notify")).unwrap();
    notify.set_read_timeout(Some(WAIT)).unwrap();
    let (port, admin) = (free_port(), free_port());
    let config = dir.path().join("sonde.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n{}\n[[sinks]]\ntype = \"console\"\n",
            dir.path().join("data").display(),
            statsd_receiver(port)
        ),
    )
    .unwrap();
    let stderr = dir.path().join("stderr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(["run", "--log-format", "json", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", dir.path().join("notify"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    // READY=1 comes once the receivers are bound and the admin site
    // answers: a unit of Type=notify orders what follows it after this.
    assert_eq!(next_notice(&notify), "READY=1\nSTATUS=running\n");
    assert!(
        std::net::UdpSocket::bind(("127.0.0.1", port)).is_err(),
        "the receiver's port is not bound at READY"
    );
    assert!(http_get(admin, "/health").is_some_and(|b| b.starts_with("ok")));

    let pid = child.id().to_string();
    let kill = |signal: &str| {
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    kill("-HUP");
    let reloading = next_notice(&notify);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    assert_eq!(next_notice(&notify), "READY=1\n");
    kill("-TERM");
    assert_eq!(next_notice(&notify), "STOPPING=1\n");
    assert!(child.wait().unwrap().success());

    // --log-format json: one object a line, each with its level and message.
    let log = std::fs::read_to_string(&stderr).unwrap();
    let messages: Vec<String> = log
        .lines()
        .map(|line| {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(
                v["level"].is_string() && v["timestamp"].is_string(),
                "{line}"
            );
            v["fields"]["message"].as_str().unwrap().to_owned()
        })
        .collect();
    for said in ["sonde running", "SIGHUP: config reloaded"] {
        assert!(
            messages.iter().any(|m| m == said),
            "no {said:?} in {messages:?}"
        );
    }
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let (ok, stdout, _) = sonde(&["--version"]);
    assert!(ok);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let commit = head.as_deref().unwrap_or("unknown");
    assert_eq!(
        stdout.trim(),
        format!("sonde {} ({commit})", env!("CARGO_PKG_VERSION"))
    );
}

/// `sonde send` fails, saying why, where its point would not be
/// aggregated: a value or sample rate the agent drops, or no agent there.
#[test]
fn send_fails_for_points_the_agent_drops_and_when_nothing_listens() {
    let port = free_port();
    let to = format!("udp://127.0.0.1:{port}");
    let cases: [(&[&str], &str); 4] = [
        (&["counter", "web.bad", "abc"], "bad_value"),
        (&["counter", "web.bad", "NaN"], "bad_value"),
        (
            &["counter", "web.bad", "1", "--rate", "0"],
            "bad_sample_rate",
        ),
        (&["counter", "web.ok", "1"], "nothing listens at"),
    ];
    for (args, said) in cases {
        let mut all = vec!["send", "--protocol", "statsd", "--to", &to];
        all.extend_from_slice(args);
        let (ok, _, err) = sonde(&all);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = format!("unixgram://{}/none.sock", dir.path().display());
    let (ok, _, err) = sonde(&["send", "--to", &sock, "counter", "web.ok", "1"]);
    assert!(!ok && err.contains("nothing listens at"), "{err}");

    // With the agent there, the same good point goes through.
    let agent = Agent::start(
        "1h",
        &format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"{to}\"\n"),
    );
    let (ok, _, err) = sonde(&[
        "send",
        "--protocol",
        "statsd",
        "--to",
        &to,
        "counter",
        "web.ok",
        "1",
    ]);
    assert!(ok, "{err}");
    wait_for("the point", WAIT, || {
        (agent.metric(&format!(
            "sonde_receiver_points_total{{receiver=\"{to}\",protocol=\"statsd\"}}"
        ))? == 1.0)
            .then_some(())
    });
}
