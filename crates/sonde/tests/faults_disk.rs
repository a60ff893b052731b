//! A full disk under the disk buffers: `agent.data_dir` on a 3 MiB tmpfs,
//! the endpoint down until the buffer has filled the disk, then back. The
//! agent must deliver everything, once, free the disk and go on, with no
//! restart; a restart afterwards sends nothing again. (Mounting needs
//! root; CI runs as root.)

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use common::http_server::{json_lines, Server};
use common::*;
use sonde_testkit::Tmpfs;

/// The `.seg` files under `dir`, recursively.
fn segments(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.unwrap().path())
        .map(|p| {
            if p.is_dir() {
                segments(&p)
            } else {
                usize::from(p.extension().is_some_and(|x| x == "seg"))
            }
        })
        .sum()
}

/// Pseudo-random hex (xorshift), which no codec shrinks.
fn noise(state: &mut u64, len: usize) -> String {
    (0..len)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            char::from_digit((*state % 16) as u32, 16).unwrap()
        })
        .collect()
}

/// Every id the server took in a log record's `message` (`{id} {noise}`),
/// with how often.
fn ids(server: &Server) -> BTreeMap<u64, u32> {
    let mut seen = BTreeMap::new();
    for g in server.accepted() {
        for r in json_lines(&g.body) {
            let id = r["message"]
                .as_str()
                .and_then(|m| m.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{r}"));
            *seen.entry(id).or_default() += 1;
        }
    }
    seen
}

#[test]
fn a_log_disk_buffer_that_filled_the_disk_delivers_everything_once_and_frees_it() {
    let Some(fs) = Tmpfs::mount("3m") else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let hold = PortHold::new();
    let port = hold.port;
    let data = fs.path().join("data");
    let mut agent = Agent::start_config(|admin, _| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

[[logs]]
name = "app"
include = ["{logs}/*.log"]

[[sinks]]
type = "http"
url = "http://127.0.0.1:{port}/"
inputs = ["app"]
compression = "none"
retry_min_backoff = "50ms"
retry_max_backoff = "200ms"
buffer = {{ type = "disk" }}
"#,
            data = data.display(),
            logs = logs.path().display(),
        )
    });
    let m = |a: &Agent, s: &str| a.metric(s).unwrap_or(-1.0);
    // 100,000 lines of ~90 bytes that do not compress: three times the
    // disk.
    const LINES: u64 = 100_000;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut text = String::new();
    for id in 0..LINES {
        text.push_str(&format!("{id} {}\n", noise(&mut rng, 82)));
    }
    std::fs::write(logs.path().join("app.log"), &text).unwrap();
    // The buffer fills the disk and its writer is refused.
    wait_for("the disk full", Duration::from_secs(60), || {
        (fs.used() > (5 << 19)).then_some(())
    });
    // The endpoint comes back: everything arrives, once, and the disk is
    // freed, with no restart.
    drop(hold);
    let server = Server::start(port, 200);
    let seen = wait_for(
        "every line at the endpoint",
        Duration::from_secs(120),
        || {
            let seen = ids(&server);
            (seen.len() as u64 == LINES).then_some(seen)
        },
    );
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(twice.is_empty(), "sent more than once: {twice:?}");
    wait_for(
        "the source caught up and the buffer empty",
        Duration::from_secs(30),
        || {
            (m(&agent, "sonde_log_bytes_behind{source=\"app\"}") == 0.0
                && m(&agent, "sonde_sink_log_buffer_records{sink=\"http\"}") == 0.0
                && segments(&data) == 0)
                .then_some(())
        },
    );
    assert!(fs.used() < 256 << 10, "{} bytes still used", fs.used());
    assert_eq!(
        m(
            &agent,
            "sonde_sink_dropped_records_total{sink=\"http\",reason=\"buffer_error\"}"
        ),
        0.0
    );
    // One warning about the disk, not one a retry.
    let said = agent
        .stderr()
        .matches("cannot write under agent.data_dir")
        .count();
    assert_eq!(said, 1, "{}", agent.stderr());

    // A restart sends nothing again: a line appended after it arrives,
    // and nothing before it came twice.
    agent.restart();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(logs.path().join("app.log"))
        .unwrap();
    writeln!(f, "{LINES} after the restart").unwrap();
    let seen = wait_for(
        "the line after the restart",
        Duration::from_secs(30),
        || {
            let seen = ids(&server);
            seen.contains_key(&LINES).then_some(seen)
        },
    );
    assert_eq!(seen.len() as u64, LINES + 1);
    assert!(
        seen.values().all(|&n| n == 1),
        "a line came twice after the restart"
    );
    server.stop();
}

#[test]
fn a_metric_disk_buffer_on_a_full_disk_keeps_windows_in_memory_and_delivers_them_once() {
    let Some(fs) = Tmpfs::mount("3m") else {
        return;
    };
    let hold = PortHold::new();
    let port = hold.port;
    let udp = free_port();
    let data = fs.path().join("data");
    let agent = Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
interval = "1s"
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

{receiver}
[[sinks]]
type = "file"
path = "{points}"

[[sinks]]
type = "http"
name = "durable"
url = "http://127.0.0.1:{port}/"
compression = "none"
max_batch_age = "0s"
retry_min_backoff = "50ms"
retry_max_backoff = "200ms"
buffer = {{ type = "disk" }}
"#,
            data = data.display(),
            receiver = statsd_receiver(udp),
            points = dir.join("points.jsonl").display(),
        )
    });
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    // 4,000 series a second, about 400 KB of JSON a window: the disk is
    // full within ten windows.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut round = 0u32;
    let mut send_round = || {
        round += 1;
        let mut d = String::new();
        for s in 0..4_000 {
            let line = format!("full.s{s}:{round}|c\n");
            if d.len() + line.len() > 1400 {
                sock.send_to(d.as_bytes(), ("127.0.0.1", udp)).unwrap();
                d.clear();
            }
            d.push_str(&line);
        }
        sock.send_to(d.as_bytes(), ("127.0.0.1", udp)).unwrap();
        std::thread::sleep(Duration::from_millis(250));
    };
    wait_for("the disk full", Duration::from_secs(60), || {
        send_round();
        (fs.used() > (5 << 19)).then_some(())
    });
    // Windows go on while the disk is full, kept in memory.
    wait_for("a refused write", Duration::from_secs(30), || {
        send_round();
        (m("sonde_data_dir_write_errors_total{what=\"buffer\"}") > 0.0
            || agent.stderr().contains("No space left"))
        .then_some(())
    });
    let windows_then = m("sonde_flushes_total");
    wait_for("three more windows", Duration::from_secs(30), || {
        send_round();
        (m("sonde_flushes_total") >= windows_then + 3.0).then_some(())
    });
    // The endpoint comes back: every window the file sink wrote reaches
    // it, once, in order of windows, and the disk is freed.
    drop(hold);
    let server = Server::start(port, 200);
    let key = |p: &Json| {
        (
            p["name"].as_str().unwrap().to_string(),
            p["timestamp"].as_i64().unwrap(),
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut got = BTreeMap::<(String, i64), u32>::new();
        for p in server.accepted().iter().flat_map(|g| json_lines(&g.body)) {
            *got.entry(key(&p)).or_default() += 1;
        }
        let twice: Vec<_> = got.iter().filter(|(_, &n)| n > 1).take(3).collect();
        assert!(twice.is_empty(), "sent more than once: {twice:?}");
        let want: BTreeSet<(String, i64)> = agent.points().iter().map(key).collect();
        let missing: Vec<_> = want.iter().filter(|k| !got.contains_key(*k)).collect();
        let extra = got.keys().filter(|k| !want.contains(*k)).count();
        if missing.is_empty() && extra == 0 {
            assert!(want.len() > 40_000, "{} points", want.len());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} points missing at the endpoint (first {:?}), {extra} it got that no window had",
            missing.len(),
            want.len(),
            missing.iter().take(3).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for reason in ["buffer_full", "buffer_error", "rejected", "shutdown"] {
        assert_eq!(
            m(&format!(
                "sonde_sink_dropped_points_total{{sink=\"durable\",reason=\"{reason}\"}}"
            )),
            0.0,
            "{reason}"
        );
    }
    wait_for(
        "an empty buffer and a freed disk",
        Duration::from_secs(30),
        || {
            (m("sonde_sink_queue_batches{sink=\"durable\"}") == 0.0 && segments(&data) == 0)
                .then_some(())
        },
    );
    // And the sink goes on: a window after the recovery arrives.
    udp_send(udp, b"after.recovery:1|c\n");
    wait_for(
        "a window after the recovery",
        Duration::from_secs(20),
        || {
            server
                .accepted()
                .iter()
                .flat_map(|g| json_lines(&g.body))
                .any(|p| p["name"] == "after.recovery")
                .then_some(())
        },
    );
    server.stop();
}
