//! The agent stopped with SIGSTOP for 60 s and continued, as a host
//! under memory pressure, a debugger or a frozen cgroup does to it: UDP
//! that overflowed the socket meanwhile is counted by the kernel counter,
//! every other point is accounted in exactly one window, the windows
//! around the stop keep their own timestamps, and the log source catches
//! up with what was written meanwhile.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

/// Points per datagram sent while the agent is stopped.
const PER_DATAGRAM: u64 = 10;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

#[test]
fn sixty_seconds_stopped_then_continued_loses_nothing_uncounted_and_merges_no_windows() {
    let udp = free_port();
    let logs = tempfile::tempdir().unwrap();
    let agent = Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
interval = "1s"
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:{udp}"
receive_buffer = "1MiB"

[[logs]]
name = "app"
include = ["{logs}/*.log"]

[[sinks]]
type = "file"
path = "{points}"

[[sinks]]
type = "file"
name = "records"
inputs = ["app"]
path = "{records}"
"#,
            data = dir.join("data").display(),
            logs = logs.path().display(),
            points = dir.join("points.jsonl").display(),
            records = dir.join("records.jsonl").display(),
        )
    });
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    let datagrams = |a: &Agent| {
        a.metric(&format!(
            "sonde_receiver_datagrams_total{{receiver=\"udp://127.0.0.1:{udp}\",protocol=\"statsd\"}}"
        ))
    };
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let send = |d: &[u8]| {
        sock.send_to(d, ("127.0.0.1", udp)).unwrap();
    };
    let mut sent = 0u64;

    send(b"before.stop:1|c\n");
    sent += 1;
    wait_for(
        "the point before the stop in a window",
        Duration::from_secs(10),
        || named(&agent.points(), "before.stop").first().cloned(),
    );

    signal(agent.child.id(), "-STOP");
    let stopped_at = unix_now();
    // While it is stopped: 6,000 datagrams of 10 points, about 8 MiB in
    // the kernel's accounting, past the 1 MiB socket buffer; and log lines.
    let mut during = String::new();
    for _ in 0..PER_DATAGRAM {
        during.push_str("during.stop:1|c|#pad:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n");
    }
    let sent_during = 6_000u64;
    for _ in 0..sent_during {
        send(during.as_bytes());
    }
    sent += sent_during;
    let mut log = std::fs::File::create(logs.path().join("app.log")).unwrap();
    for i in 0..1_000 {
        writeln!(log, "line {i} written while the agent was stopped").unwrap();
    }
    drop(log);
    // The fault itself: 60 s stopped.
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        std::thread::sleep(until - Instant::now());
    }
    signal(agent.child.id(), "-CONT");
    let continued_at = unix_now();

    // The queue is read (the count of datagrams received stops moving);
    // then one more datagram, which carries the kernel's count of those
    // it dropped (SO_RXQ_OVFL comes with the next datagram read).
    let mut last = -1.0;
    wait_for("the socket's queue read", Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(300));
        let now = datagrams(&agent).unwrap_or(-1.0);
        let still = now == last && now > 0.0;
        last = now;
        still.then_some(())
    });
    send(b"after.cont:1|c\n");
    sent += 1;
    let kernel = wait_for("the datagrams accounted", Duration::from_secs(20), || {
        let received = datagrams(&agent)?;
        let kernel = m(&format!(
            "sonde_receiver_kernel_dropped_total{{receiver=\"udp://127.0.0.1:{udp}\",protocol=\"statsd\"}}"
        ));
        (received + kernel == sent as f64).then_some(kernel as u64)
    });
    // The point sent once the queue was read lands in a window of its own
    // time.
    wait_for(
        "the point after the continue in a window",
        Duration::from_secs(20),
        || named(&agent.points(), "after.cont").first().cloned(),
    );
    assert!(kernel > 0, "the socket did not overflow: no drop to count");
    // Every point received is in exactly one window.
    let during_sum = wait_for(
        "the points received in windows",
        Duration::from_secs(20),
        || {
            let sum: f64 = named(&agent.points(), "during.stop")
                .iter()
                .map(|p| p.1)
                .sum();
            (sum as u64 == (sent_during - kernel) * PER_DATAGRAM).then_some(sum)
        },
    );
    assert!(during_sum > 0.0);
    let mut stamps = BTreeMap::<(String, i64), u32>::new();
    for p in agent.points() {
        *stamps
            .entry((
                p["name"].as_str().unwrap().to_string(),
                p["timestamp"].as_i64().unwrap(),
            ))
            .or_default() += 1;
    }
    assert!(
        stamps.values().all(|&n| n == 1),
        "two windows with one timestamp"
    );
    // The windows around the stop keep their own time: the point before
    // it is stamped before it, the point after after it.
    for (_, _, ts) in named(&agent.points(), "before.stop") {
        assert!((ts as f64) < stopped_at, "{ts} {stopped_at}");
    }
    for (_, _, ts) in named(&agent.points(), "after.cont") {
        assert!(
            ts as f64 >= continued_at.floor() - 1.0,
            "{ts} {continued_at}"
        );
    }
    assert_eq!(m("sonde_late_shards_total"), 0.0);
    // The minute stopped is skipped, not flushed window by window.
    assert!(
        m("sonde_skipped_windows_total") >= 55.0,
        "{}",
        m("sonde_skipped_windows_total")
    );
    // The log source catches up.
    wait_for(
        "the lines written while stopped",
        Duration::from_secs(20),
        || {
            let text = std::fs::read_to_string(agent.path("records.jsonl")).unwrap_or_default();
            (text
                .lines()
                .filter(|l| l.contains("written while the agent was stopped"))
                .count()
                == 1_000
                && m("sonde_log_bytes_behind{source=\"app\"}") == 0.0)
                .then_some(())
        },
    );
}
