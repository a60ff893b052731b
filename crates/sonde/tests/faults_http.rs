//! Endpoint faults (issue 35): the real agent, a metric and a log `http`
//! sink, against a test server switched between behaviours: 413 above a
//! size, 429 or 503 with `Retry-After`, 500 for a while, and an answer
//! trickled one byte a second. Each test checks that the agent keeps
//! running, that every point the flusher produced and every line
//! appended is delivered once or counted as dropped with its reason, and
//! that it recovers without a restart within a stated time.
//!
//! The flusher's output is the ledger of points: a `file` sink takes the
//! same windows as the `http` one, and unique series names (`fault.pN`)
//! with `expire_windows = 1` make each point a unique (name, timestamp).
//! Log lines carry unique numbers.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use sonde_encode::compress::Compression;

/// How the server answers a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Ok,
    /// 413 for a body (as sent) over this many bytes, else 200.
    LargerThan(usize),
    /// This status with `Retry-After: secs`.
    Throttle(u16, u64),
    /// 500.
    Fail,
    /// Reads the request, then sends its answer one byte a second for as
    /// long as the mode stays (never finishing it).
    Trickle,
}

/// One request the server read.
#[derive(Clone, Debug)]
struct Seen {
    /// When its head had arrived.
    got: Instant,
    /// When its answer was sent (for a trickle: when the client gave up).
    answered: Instant,
    /// 0 for a trickle.
    status: u16,
    /// The body's size as sent.
    size: usize,
    /// The body, decompressed.
    body: Vec<u8>,
}

#[derive(Clone, Default)]
struct Fault {
    port: u16,
    modes: Arc<Mutex<HashMap<String, Mode>>>,
    seen: Arc<Mutex<BTreeMap<String, Vec<Seen>>>>,
    /// Answers begun in [`Mode::Trickle`].
    trickles: Arc<AtomicUsize>,
}

impl Fault {
    fn start() -> Fault {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let fault = Fault {
            port: listener.local_addr().unwrap().port(),
            ..Fault::default()
        };
        let f = fault.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let f = f.clone();
                std::thread::spawn(move || f.serve(conn));
            }
        });
        fault
    }

    fn set(&self, path: &str, mode: Mode) {
        self.modes.lock().unwrap().insert(path.to_string(), mode);
    }

    fn mode(&self, path: &str) -> Mode {
        *self.modes.lock().unwrap().get(path).unwrap_or(&Mode::Ok)
    }

    fn seen(&self, path: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    /// The bodies answered 2xx, in the order they came.
    fn accepted(&self, path: &str) -> Vec<Vec<u8>> {
        self.seen(path)
            .into_iter()
            .filter(|s| (200..300).contains(&s.status))
            .map(|s| s.body)
            .collect()
    }

    fn count(&self, path: &str, status: u16) -> usize {
        self.seen(path)
            .iter()
            .filter(|s| s.status == status)
            .count()
    }

    /// Serves one connection: HTTP/1.1 with Content-Length bodies, kept
    /// alive.
    fn serve(&self, mut s: TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 << 10];
        loop {
            let end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let got = Instant::now();
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            };
            let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
            while buf.len() < end + len {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let raw: Vec<u8> = buf.drain(..end + len).skip(end).collect();
            let codec = match header("content-encoding").as_deref() {
                None => Compression::None,
                Some("gzip") => Compression::Gzip { level: 6 },
                Some(x) => panic!("unexpected Content-Encoding {x}"),
            };
            let body = codec.decompress(&raw).unwrap();
            let mode = self.mode(&path);
            let (status, extra) = match mode {
                Mode::Ok => (200, String::new()),
                Mode::LargerThan(n) if raw.len() > n => (413, String::new()),
                Mode::LargerThan(_) => (200, String::new()),
                Mode::Throttle(code, secs) => (code, format!("Retry-After: {secs}\r\n")),
                Mode::Fail => (500, String::new()),
                Mode::Trickle => (0, String::new()),
            };
            let answer = if status == 0 {
                self.trickles.fetch_add(1, Ordering::SeqCst);
                let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                let mut sent = 0;
                while self.mode(&path) == Mode::Trickle && sent < answer.len() - 1 {
                    if s.write_all(&answer[sent..sent + 1]).is_err() {
                        break;
                    }
                    sent += 1;
                    // The client's giving up shows as a failed write, or
                    // as the end of its side of the connection.
                    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                    if matches!(s.read(&mut chunk), Ok(0)) {
                        break;
                    }
                }
                None
            } else {
                Some(format!(
                    "HTTP/1.1 {status} Fault\r\nContent-Length: 0\r\n{extra}\r\n"
                ))
            };
            if let Some(a) = &answer {
                if s.write_all(a.as_bytes()).is_err() {
                    return;
                }
            }
            self.seen
                .lock()
                .unwrap()
                .entry(path)
                .or_default()
                .push(Seen {
                    got,
                    answered: Instant::now(),
                    status,
                    size: raw.len(),
                    body,
                });
            if answer.is_none() {
                return;
            }
        }
    }
}

/// An agent with a StatsD receiver on `udp`, a log source on `logs`, a
/// file sink (the ledger), and `http` sinks `m` (metric windows, to
/// `/metrics`) and `l` (log records, to `/logs`) on `port` with `extra`
/// keys each.
fn agent(udp: u16, logs: &Path, port: u16, extra: &str) -> Agent {
    Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
interval = "1s"
expire_windows = 1
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

{receiver}
[[logs]]
name = "app"
include = ["{logs}/*.log"]

[[sinks]]
type = "file"
path = "{points}"

[[sinks]]
type = "http"
name = "m"
url = "http://127.0.0.1:{port}/metrics"
compression = "gzip"
max_batch_age = "0s"
retry_min_backoff = "50ms"
retry_max_backoff = "500ms"
request_timeout = "2s"
shutdown_grace = "1s"
{extra}

[[sinks]]
type = "http"
name = "l"
inputs = ["app"]
url = "http://127.0.0.1:{port}/logs"
compression = "gzip"
retry_min_backoff = "50ms"
retry_max_backoff = "500ms"
request_timeout = "2s"
{extra}
"#,
            data = dir.join("data").display(),
            receiver = statsd_receiver(udp),
            logs = logs.display(),
            points = dir.join("points.jsonl").display(),
        )
    })
}

/// Text no compressor shrinks much: `n` pseudo-random letters.
fn noise(seed: u64, n: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// Sends StatsD counters `fault.p{first}` .. `fault.p{last}`, 20 a
/// datagram.
fn send_points(udp: u16, ids: std::ops::Range<u32>) {
    let ids: Vec<u32> = ids.collect();
    for chunk in ids.chunks(20) {
        let d: String = chunk.iter().map(|i| format!("fault.p{i}:1|c\n")).collect();
        udp_send(udp, d.as_bytes());
    }
}

/// Appends lines `first..last` (each `line N <noise>`) to `log`.
fn append_lines(log: &Path, ids: std::ops::Range<u32>) -> Vec<String> {
    let lines: Vec<String> = ids
        .map(|i| format!("line {i:05} {}", noise(u64::from(i), 40)))
        .collect();
    append(log, &lines);
    lines
}

fn append(log: &Path, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

/// (name, timestamp) of each JSON line of `body`.
fn keys(body: &[u8]) -> Vec<(String, i64)> {
    body.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            let p: Json = serde_json::from_slice(l).unwrap();
            (
                p["name"].as_str().unwrap().to_string(),
                p["timestamp"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The messages of the log records of JSON-lines `bodies`, in order.
fn messages(bodies: &[Vec<u8>]) -> Vec<String> {
    bodies
        .iter()
        .flat_map(|b| {
            b.split(|&c| c == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let r: Json = serde_json::from_slice(l).unwrap();
                    r["message"].as_str().unwrap().to_string()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

const DROP_REASONS: [&str; 6] = [
    "queue_full",
    "buffer_full",
    "rejected",
    "too_large",
    "shutdown",
    "buffer_error",
];

fn m(agent: &Agent, series: &str) -> f64 {
    agent.metric(series).unwrap_or(-1.0)
}

fn dropped(agent: &Agent, sink: &str, what: &str, reason: &str) -> u64 {
    m(
        agent,
        &format!("sonde_sink_dropped_{what}_total{{sink=\"{sink}\",reason=\"{reason}\"}}"),
    ) as u64
}

/// Points produced and delivered, each as (name, timestamp), and the
/// drops of sink `m` by reason.
type Ledger = (Vec<Key>, Vec<Key>, BTreeMap<&'static str, u64>);

/// A point: its name and timestamp.
type Key = (String, i64);

/// Waits (up to `within`) until the metric ledger balances and stays
/// so for a window: every point the file sink holds delivered to
/// `/metrics` or counted dropped by sink `m`. Returns the points produced
/// (name, timestamp) and those delivered, in the order they arrived.
fn metric_ledger(agent: &Agent, fault: &Fault, within: Duration) -> Ledger {
    let mut last: Option<(usize, Instant)> = None;
    let deadline = Instant::now() + within;
    loop {
        let produced: Vec<(String, i64)> = agent
            .points()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["timestamp"].as_i64().unwrap(),
                )
            })
            .collect();
        let delivered: Vec<(String, i64)> = fault
            .accepted("/metrics")
            .iter()
            .flat_map(|b| keys(b))
            .collect();
        let drops: BTreeMap<&'static str, u64> = DROP_REASONS
            .iter()
            .map(|r| (*r, dropped(agent, "m", "points", r)))
            .collect();
        let counted = m(agent, "sonde_sink_points_total{sink=\"m\"}") as u64;
        let balanced = !produced.is_empty()
            && counted == delivered.len() as u64
            && delivered.len() as u64 + drops.values().sum::<u64>() == produced.len() as u64;
        if balanced {
            // The same balance a window later: nothing was still on its way.
            match last {
                Some((n, at))
                    if n == produced.len() && Instant::now() - at > Duration::from_millis(1500) =>
                {
                    return (produced, delivered, drops);
                }
                Some((n, _)) if n == produced.len() => {}
                _ => last = Some((produced.len(), Instant::now())),
            }
        } else {
            last = None;
        }
        assert!(
            Instant::now() < deadline,
            "the metric ledger did not balance within {within:?}: {} points produced, {} delivered \
             ({counted} counted by the sink), dropped {drops:?}, queued {} requests",
            produced.len(),
            delivered.len(),
            m(agent, "sonde_sink_queue_batches{sink=\"m\"}")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Checks the delivered points: no duplicate, each one produced, and
/// the produced ones missing are exactly `missing` (the dropped).
fn check_points(produced: &[(String, i64)], delivered: &[(String, i64)]) -> Vec<(String, i64)> {
    let unique: HashSet<&(String, i64)> = delivered.iter().collect();
    assert_eq!(unique.len(), delivered.len(), "a point delivered twice");
    let produced_set: HashSet<&(String, i64)> = produced.iter().collect();
    assert_eq!(
        produced_set.len(),
        produced.len(),
        "the ledger's keys are unique"
    );
    for d in delivered {
        assert!(produced_set.contains(d), "{d:?} delivered, never produced");
    }
    produced
        .iter()
        .filter(|p| !unique.contains(p))
        .cloned()
        .collect()
}

/// Waits until every line of source `app` is acknowledged, then checks
/// the delivered records: each line once, in order, but the dropped.
fn check_lines(agent: &Agent, fault: &Fault, lines: &[String], within: Duration) -> Vec<String> {
    wait_for("every line acknowledged", within, || {
        (m(agent, "sonde_log_bytes_behind{source=\"app\"}") == 0.0
            && m(agent, "sonde_sink_records_total{sink=\"l\"}") as usize
                == messages(&fault.accepted("/logs")).len())
        .then_some(())
    });
    let got = messages(&fault.accepted("/logs"));
    let unique: HashSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "a line delivered twice");
    let missing: Vec<String> = lines
        .iter()
        .filter(|l| !unique.contains(l))
        .cloned()
        .collect();
    let kept: Vec<&String> = lines.iter().filter(|l| unique.contains(l)).collect();
    assert_eq!(got.iter().collect::<Vec<_>>(), kept, "delivered in order");
    let drops: u64 = DROP_REASONS
        .iter()
        .map(|r| dropped(agent, "l", "records", r))
        .sum();
    assert_eq!(drops, missing.len() as u64, "every line missing is counted");
    missing
}

/// 413 above 1,000 bytes: requests are halved until they fit; the one
/// point and the one line larger than that alone are dropped and counted
/// `too_large`, everything else delivered once.
#[test]
fn an_endpoint_refusing_large_requests_gets_them_in_halves_and_what_is_too_large_alone_is_counted()
{
    let fault = Fault::start();
    fault.set("/metrics", Mode::LargerThan(1000));
    fault.set("/logs", Mode::LargerThan(1000));
    let udp = free_port();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let agent = agent(udp, logs.path(), fault.port, "");

    send_points(udp, 0..300);
    let huge = format!("fault.huge:1|c|#blob:{}\n", noise(7, 3000));
    udp_send(udp, huge.as_bytes());
    let mut lines = append_lines(&log, 0..400);
    let big = format!("big {}", noise(9, 3000));
    append(&log, std::slice::from_ref(&big));
    lines.push(big.clone());
    lines.extend(append_lines(&log, 400..500));

    let (produced, delivered, drops) = metric_ledger(&agent, &fault, Duration::from_secs(30));
    let missing = check_points(&produced, &delivered);
    assert!(!missing.is_empty());
    assert!(
        missing.iter().all(|(n, _)| n == "fault.huge"),
        "{missing:?}"
    );
    assert_eq!(drops["too_large"], missing.len() as u64);
    assert_eq!(drops.values().sum::<u64>(), drops["too_large"]);
    assert!(delivered.len() >= 300);

    let missing = check_lines(&agent, &fault, &lines, Duration::from_secs(20));
    assert_eq!(missing, [big]);
    assert_eq!(dropped(&agent, "l", "records", "too_large"), 1);

    for path in ["/metrics", "/logs"] {
        let seen = fault.seen(path);
        assert!(seen.iter().any(|s| s.status == 413), "{path} was split");
        assert!(
            seen.iter()
                .filter(|s| s.status == 200)
                .all(|s| s.size <= 1000),
            "{path}: only what fits is taken"
        );
    }
    assert!(
        m(
            &agent,
            "sonde_sink_failures_total{sink=\"m\",reason=\"http_413\"}"
        ) > 0.0
    );
    assert!(
        m(
            &agent,
            "sonde_sink_failures_total{sink=\"l\",reason=\"http_413\"}"
        ) > 0.0
    );
    assert_eq!(
        m(&agent, "sonde_sink_retries_total{sink=\"m\"}"),
        0.0,
        "a 413 is not a retry"
    );
    assert!(agent.stderr().contains("sending it in two halves"));
}

/// 429 (metrics) and 503 (logs) with `Retry-After: 2`: the next attempt
/// comes no sooner than 2 s after the answer, though the backoff would
/// retry after 50 ms; then everything is delivered once.
#[test]
fn an_endpoint_asking_to_retry_after_two_seconds_is_not_asked_again_sooner() {
    let fault = Fault::start();
    fault.set("/metrics", Mode::Throttle(429, 2));
    fault.set("/logs", Mode::Throttle(503, 2));
    let udp = free_port();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let agent = agent(udp, logs.path(), fault.port, "");
    send_points(udp, 0..50);
    let lines = append_lines(&log, 0..100);
    wait_for(
        "three throttled answers on each path",
        Duration::from_secs(20),
        || (fault.count("/metrics", 429) >= 3 && fault.count("/logs", 503) >= 3).then_some(()),
    );
    fault.set("/metrics", Mode::Ok);
    fault.set("/logs", Mode::Ok);
    let recovered = Instant::now();
    let (produced, delivered, drops) = metric_ledger(&agent, &fault, Duration::from_secs(40));
    assert!(check_points(&produced, &delivered).is_empty());
    assert_eq!(drops.values().sum::<u64>(), 0);
    assert!(check_lines(&agent, &fault, &lines, Duration::from_secs(10)).is_empty());
    assert!(recovered.elapsed() < Duration::from_secs(20));

    for (path, sink) in [("/metrics", "m"), ("/logs", "l")] {
        let seen = fault.seen(path);
        for pair in seen.windows(2) {
            if pair[0].status == 429 || pair[0].status == 503 {
                let gap = pair[1].got - pair[0].answered;
                assert!(
                    gap >= Duration::from_secs(2),
                    "{path}: asked again after {gap:?}"
                );
            }
        }
        assert!(
            m(
                &agent,
                &format!("sonde_sink_retry_after_waits_total{{sink=\"{sink}\"}}")
            ) >= 3.0
        );
    }
    assert!(
        m(
            &agent,
            "sonde_sink_failures_total{sink=\"m\",reason=\"http_429\"}"
        ) >= 3.0
    );
    assert!(
        m(
            &agent,
            "sonde_sink_failures_total{sink=\"l\",reason=\"http_5xx\"}"
        ) >= 3.0
    );
}

/// 500 for a while: the metric sink's 4 KiB memory buffer fills and drops
/// its oldest requests (counted `buffer_full`), the log source is held
/// back (nothing dropped); once the endpoint answers 200 again, what is
/// queued is delivered, in order, within 10 s, without a restart.
#[test]
fn an_endpoint_failing_for_a_while_fills_the_buffer_and_gets_the_rest_in_order_when_it_recovers() {
    let fault = Fault::start();
    fault.set("/metrics", Mode::Fail);
    fault.set("/logs", Mode::Fail);
    let udp = free_port();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let agent = agent(
        udp,
        logs.path(),
        fault.port,
        "buffer = { type = \"memory\", max_size = \"4KiB\" }",
    );
    let mut lines = Vec::new();
    let mut next = 0;
    wait_for(
        "the metric buffer to drop its oldest",
        Duration::from_secs(40),
        || {
            send_points(udp, next..next + 40);
            lines.extend(append_lines(&log, next..next + 40));
            next += 40;
            std::thread::sleep(Duration::from_millis(300));
            (dropped(&agent, "m", "points", "buffer_full") > 0).then_some(())
        },
    );
    assert!(m(&agent, "sonde_sink_queue_bytes{sink=\"m\"}") <= 4096.0);
    assert!(
        m(&agent, "sonde_log_bytes_behind{source=\"app\"}") > 0.0,
        "the source waits"
    );
    assert!(fault.accepted("/metrics").is_empty() && fault.accepted("/logs").is_empty());
    assert!(
        m(
            &agent,
            "sonde_sink_failures_total{sink=\"m\",reason=\"http_5xx\"}"
        ) >= 2.0
    );

    fault.set("/metrics", Mode::Ok);
    fault.set("/logs", Mode::Ok);
    let recovered = Instant::now();
    wait_for("the metric queue to drain", Duration::from_secs(10), || {
        (m(&agent, "sonde_sink_queue_batches{sink=\"m\"}") == 0.0).then_some(())
    });
    assert!(check_lines(&agent, &fault, &lines, Duration::from_secs(10)).is_empty());
    assert!(
        recovered.elapsed() < Duration::from_secs(10),
        "recovered in {:?}",
        recovered.elapsed()
    );
    let (produced, delivered, drops) = metric_ledger(&agent, &fault, Duration::from_secs(40));
    let missing = check_points(&produced, &delivered);
    assert_eq!(drops["buffer_full"], missing.len() as u64);
    assert_eq!(drops.values().sum::<u64>(), drops["buffer_full"]);
    // Windows reach the endpoint in order.
    let stamps: Vec<i64> = delivered.iter().map(|(_, t)| *t).collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    assert_eq!(dropped(&agent, "l", "records", "buffer_full"), 0);
}

/// An answer trickled one byte a second: each attempt gives up after
/// `request_timeout` (2 s), counted `timeout`, and is retried; the agent
/// answers meanwhile; once the endpoint answers, everything is delivered
/// once. A stop while a request trickles takes the metric sink's
/// `shutdown_grace` (1 s), not the request's timeout or more.
#[test]
fn an_endpoint_trickling_its_answer_times_out_and_holds_neither_the_sink_nor_the_stop() {
    let fault = Fault::start();
    fault.set("/metrics", Mode::Trickle);
    fault.set("/logs", Mode::Trickle);
    let udp = free_port();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let mut agent = agent(udp, logs.path(), fault.port, "");
    send_points(udp, 0..50);
    let lines = append_lines(&log, 0..100);
    wait_for("two timeouts on each sink", Duration::from_secs(30), || {
        (m(
            &agent,
            "sonde_sink_failures_total{sink=\"m\",reason=\"timeout\"}",
        ) >= 2.0
            && m(
                &agent,
                "sonde_sink_failures_total{sink=\"l\",reason=\"timeout\"}",
            ) >= 2.0)
            .then_some(())
    });
    for path in ["/metrics", "/logs"] {
        for s in fault.seen(path) {
            let held = s.answered - s.got;
            assert!(
                held < Duration::from_secs(4),
                "{path}: a request held {held:?}"
            );
        }
    }
    fault.set("/metrics", Mode::Ok);
    fault.set("/logs", Mode::Ok);
    let (produced, delivered, drops) = metric_ledger(&agent, &fault, Duration::from_secs(40));
    assert!(check_points(&produced, &delivered).is_empty());
    assert_eq!(drops.values().sum::<u64>(), 0);
    assert!(check_lines(&agent, &fault, &lines, Duration::from_secs(10)).is_empty());

    // A stop while a metric request trickles: the request in flight runs
    // out its 2 s at most, then the grace (1 s) bounds the rest, every
    // later attempt cut short at its end.
    fault.set("/metrics", Mode::Trickle);
    let before = fault.trickles.load(Ordering::SeqCst);
    send_points(udp, 1000..1010);
    wait_for("a trickling request", Duration::from_secs(10), || {
        (fault.trickles.load(Ordering::SeqCst) > before).then_some(())
    });
    let t = Instant::now();
    agent.stop();
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(4500),
        "the stop took {took:?}, over request_timeout + shutdown_grace"
    );
}
