//! The promises of docs/RELIABILITY.md, checked against the real binary on
//! loopback: limits hold, every input is accounted for, unsafe configs are
//! refused.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(30);

/// Sends statsd lines over UDP in datagrams of at most `max_bytes`, and
/// waits after each `chunk` datagrams until the agent has read them all,
/// so the kernel never drops one (the count stays exact however slow the
/// agent is, e.g. in a debug build). Returns the datagrams sent.
struct Sender<'a> {
    agent: &'a Agent,
    socket: UdpSocket,
    port: u16,
    sent: u64,
    buf: Vec<u8>,
}

impl<'a> Sender<'a> {
    fn new(agent: &'a Agent, port: u16) -> Self {
        Sender {
            agent,
            socket: UdpSocket::bind("127.0.0.1:0").unwrap(),
            port,
            sent: 0,
            buf: Vec::with_capacity(8192),
        }
    }

    fn datagrams_metric(&self) -> String {
        format!(
            "sonde_receiver_datagrams_total{{receiver=\"udp://127.0.0.1:{}\",protocol=\"statsd\"}}",
            self.port
        )
    }

    fn line(&mut self, line: &str) {
        if self.buf.len() + line.len() + 1 > 8000 {
            self.flush_datagram();
        }
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.push(b'\n');
    }

    fn flush_datagram(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        self.socket
            .send_to(&self.buf, ("127.0.0.1", self.port))
            .unwrap();
        self.buf.clear();
        self.sent += 1;
        if self.sent.is_multiple_of(64) {
            self.wait_read();
        }
    }

    /// Waits until the agent has counted every datagram sent.
    fn wait_read(&mut self) {
        self.flush_datagram();
        let (metric, sent) = (self.datagrams_metric(), self.sent as f64);
        wait_for("the agent to read every datagram", WAIT, || {
            (self.agent.metric(&metric)? >= sent).then_some(())
        });
    }
}

fn dropped(agent: &Agent, port: u16, reason: &str) -> f64 {
    agent
        .metric(&format!(
            "sonde_receiver_dropped_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\",reason=\"{reason}\"}}"
        ))
        .unwrap()
}

/// Peak resident memory of a process, in bytes.
fn vm_hwm(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// The sum of every window's value of `name` with tag `tag` (StatsD counts
/// are per window).
fn total(points: &[Json], name: &str, tag: (&str, &str)) -> f64 {
    named(points, name)
        .iter()
        .filter(|(tags, _, _)| tags[tag.0] == tag.1)
        .map(|(_, v, _)| v)
        .sum()
}

/// The flood: a million distinct series against `agent.max_series = 20000`.
/// The limit holds exactly, the series that were live before keep
/// aggregating through it, every dropped point is counted, the log gets a
/// bounded number of sampled lines, and peak memory stays near what 20,000
/// series cost instead of growing with the flood.
#[test]
fn a_flood_of_new_series_stops_at_max_series_and_old_series_keep_working() {
    const MAX: usize = 20_000;
    const OLD: usize = 100;
    const FLOOD: usize = 1_000_000;
    let port = free_port();
    let mut agent = Agent::start(
        "1s",
        &format!(
            "max_series = {MAX}\nexpire_windows = 1000\n\n[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{port}\"\n"
        ),
    );
    let pid = agent.child.id();
    let mut send = Sender::new(&agent, port);
    for i in 0..OLD {
        send.line(&format!("old.hits:1|c|#i:{i}"));
    }
    send.wait_read();
    let before_flood = vm_hwm(pid);

    let start = std::time::Instant::now();
    for s in 0..FLOOD {
        send.line(&format!("flood.m:1|c|#s:{s}"));
        // The old series keep getting points during the flood.
        if s % 10_000 == 0 {
            for i in 0..OLD {
                send.line(&format!("old.hits:1|c|#i:{i}"));
            }
        }
    }
    send.wait_read();
    let flood_time = start.elapsed();
    let after_flood = vm_hwm(pid);
    let rounds = 1 + FLOOD / 10_000;

    // Exactly MAX series live; every other flood point dropped and counted.
    let admitted = MAX - OLD;
    assert_eq!(agent.metric("sonde_worker_series"), Some(MAX as f64));
    assert_eq!(agent.metric("sonde_max_series"), Some(MAX as f64));
    assert_eq!(
        dropped(&agent, port, "series_limit"),
        (FLOOD - admitted) as f64
    );
    let points = agent
        .metric(&format!(
            "sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\"}}"
        ))
        .unwrap();
    assert_eq!(points, (admitted + OLD * rounds) as f64);

    agent.stop();
    let out = agent.points();
    for i in [0, OLD / 2, OLD - 1] {
        let i = i.to_string();
        assert_eq!(
            total(&out, "old.hits", ("i", &i)),
            rounds as f64,
            "old series i={i} lost points"
        );
    }
    let flood_series = named(&out, "flood.m")
        .iter()
        .map(|(tags, _, _)| tags["s"].as_str().unwrap().to_string())
        .collect::<std::collections::HashSet<_>>();
    assert_eq!(flood_series.len(), admitted);

    // One log line per 10 s at most, each naming the metric.
    let log = agent.stderr();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("points for new series dropped"))
        .collect();
    let allowed = 1 + flood_time.as_secs() as usize / 10 + 1;
    assert!(
        !lines.is_empty() && lines.len() <= allowed,
        "{} limit lines in {flood_time:?}:\n{log}",
        lines.len()
    );
    assert!(lines[0].contains("flood.m"), "{}", lines[0]);

    // Memory: without the limit the million series would take hundreds of
    // MiB (docs/benchmarks/LOG.md, "series memory budget"). With it, the 19,900
    // admitted series grew the peak by 7 MiB in a debug build. 32 MiB
    // leaves room for allocator and flush noise, and fails if anything
    // keeps even 32 bytes per rejected series.
    let growth = after_flood.saturating_sub(before_flood);
    eprintln!(
        "flood of {FLOOD} series in {flood_time:?}: VmHWM {} MiB before, {} MiB after",
        before_flood >> 20,
        after_flood >> 20
    );
    assert!(
        growth < 32 << 20,
        "peak RSS grew by {} MiB during the flood",
        growth >> 20
    );
}

/// What the agent must do with one unit of input: aggregate it as this
/// many points, or drop it (once) for this reason.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Points(u64),
    Drop(&'static str),
}
use Expect::{Drop, Points};

/// Adds up the expectations of one receiver.
#[derive(Default)]
struct Ledger {
    points: u64,
    drops: std::collections::BTreeMap<&'static str, u64>,
}

impl Ledger {
    fn expect(&mut self, e: Expect) {
        match e {
            Points(n) => self.points += n,
            Drop(reason) => *self.drops.entry(reason).or_default() += 1,
        }
    }

    fn units(&self) -> u64 {
        self.points + self.drops.values().sum::<u64>()
    }
}

/// The receiver's points and its drops by every reason, from `/metrics`.
fn accounted(agent: &Agent, receiver: &str, protocol: &str) -> Option<(u64, Vec<(String, u64)>)> {
    let text = agent.get("/metrics")?;
    let labels = format!("receiver=\"{receiver}\",protocol=\"{protocol}\"");
    let points = text.lines().find_map(|l| {
        l.strip_prefix(&format!("sonde_receiver_points_total{{{labels}}} "))
            .and_then(|v| v.parse().ok())
    })?;
    let prefix = format!("sonde_receiver_dropped_total{{{labels},reason=\"");
    let drops = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (reason, value) = rest.split_once("\"} ")?;
            Some((reason.to_string(), value.parse().ok()?))
        })
        .filter(|(_, v)| *v > 0)
        .collect::<std::collections::BTreeMap<String, u64>>();
    Some((points, drops.into_iter().collect()))
}

/// Waits until a receiver has accounted for every unit it was sent, then
/// checks that the split matches the ledger exactly: received =
/// aggregated + dropped by reason.
fn check_ledger(agent: &Agent, receiver: &str, protocol: &str, ledger: &Ledger) {
    let (points, drops) = wait_for(
        &format!("{receiver} to account for its input"),
        WAIT,
        || {
            let (p, d) = accounted(agent, receiver, protocol)?;
            (p + d.iter().map(|(_, v)| v).sum::<u64>() >= ledger.units()).then_some((p, d))
        },
    );
    let want: Vec<(String, u64)> = ledger
        .drops
        .iter()
        .map(|(r, n)| (r.to_string(), *n))
        .collect();
    assert_eq!(
        (points, &drops),
        (ledger.points, &want),
        "{receiver}: (aggregated, dropped by reason) differ from what was sent"
    );
}

/// Every line, message and datagram sent to the agent, good or bad, is
/// accounted for exactly once on `/metrics`: as aggregated points or as a
/// drop with its reason. Sent over four transports so that the receivers'
/// own drops (oversized datagrams and lines) are covered with the parsers'
/// and the aggregator's (limits, tags, UTF-8).
#[test]
fn every_input_is_aggregated_or_dropped_by_reason_exactly_once() {
    let (sd, mp, tcp) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("statsd.sock");
    let agent = Agent::start(
        "1s",
        &format!(
            "max_series = 40\nmax_series_per_metric = 10\n\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{sd}\"\n\
             [[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{mp}\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"unixgram://{}\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"tcp://127.0.0.1:{tcp}\"\n",
            sock.display()
        ),
    );

    // StatsD over UDP: one line per unit, all in one datagram.
    let mut statsd = Ledger::default();
    let mut datagram = Vec::new();
    let hot: Vec<String> = (0..15).map(|i| format!("hot.m:1|c|#i:{i}")).collect();
    let mut lines: Vec<(&[u8], Expect)> = vec![
        (b"ok.count:2|c|#env:prod", Points(1)),
        (b"ok.gauge:5|g", Points(1)),
        (b"ok.timer:1:2:3|ms", Points(3)),
        (b"ok.set:alice|s", Points(1)),
        (b"ok.dist:4|d|@0.5", Points(1)),
        // Aggregated, but their sum overflows: the output point is dropped
        // at flush (sonde_non_finite_dropped_total, checked below).
        (b"big.c:1e308|c", Points(1)),
        (b"big.c:1e308|c", Points(1)),
        (b"not a metric", Drop("malformed_line")),
        (b":1|c", Drop("empty_name")),
        (b"x:1|zz", Drop("unknown_type")),
        (b"x:abc|c", Drop("bad_value")),
        (b"x:nan|c", Drop("bad_value")),
        (b"x:inf|g", Drop("bad_value")),
        (b"x:1e400|ms", Drop("bad_value")),
        (b"x:1:nan|ms", Drop("bad_value")),
        (b"x:1|c|@2", Drop("bad_sample_rate")),
        (b"x:1|c|@0", Drop("bad_sample_rate")),
        (b"x\xff:1|c", Drop("invalid_utf8")),
        (b"_e{1,1}:a|b", Drop("event")),
        (b"_sc|check|0", Drop("service_check")),
    ];
    // A tag value over agent.max_key_size (4 KiB by default).
    let long = format!("long.tag:1|c|#url:{}", "x".repeat(5000));
    lines.push((long.as_bytes(), Drop("key_too_long")));
    for (i, l) in hot.iter().enumerate() {
        let e = if i < 10 {
            Points(1)
        } else {
            Drop("metric_series_limit")
        };
        lines.push((l.as_bytes(), e));
    }
    for (line, e) in &lines {
        datagram.extend_from_slice(line);
        datagram.push(b'\n');
        statsd.expect(*e);
    }
    udp_send(sd, &datagram);

    // msgpack over UDP: a bunch with one bad message of every kind, a
    // truncated copy and garbage.
    let mut msgpack = Ledger::default();
    let mut wrong_arity = Vec::new();
    rmp::encode::write_array_len(&mut wrong_arity, 3).unwrap();
    for f in ["emit", "counter", "x"] {
        rmp::encode::write_str(&mut wrong_arity, f).unwrap();
    }
    let mut unknown_command = msgpack_message("counter", "x", "1", "", "");
    // "emit" -> "emix"
    let at = unknown_command.iter().position(|&b| b == b't').unwrap();
    unknown_command[at] = b'x';
    let messages: Vec<(Vec<u8>, Expect)> = vec![
        (
            msgpack_message("counter", "mp.ok", "1", "host=a", ""),
            Points(1),
        ),
        (
            msgpack_message("timer", "mp.timer", "2.5", "", ""),
            Points(1),
        ),
        (
            msgpack_message("gauge", "x", "1", "", ""),
            Drop("unknown_type"),
        ),
        (wrong_arity, Drop("wrong_arity")),
        (unknown_command, Drop("unknown_command")),
        (
            msgpack_message("counter", "x", "abc", "", ""),
            Drop("bad_value"),
        ),
        (
            msgpack_message("counter", "x", "nan", "", ""),
            Drop("bad_value"),
        ),
        (
            msgpack_message("store", "x", "-inf", "", ""),
            Drop("bad_value"),
        ),
        (
            msgpack_message("counter", "", "1", "", ""),
            Drop("empty_name"),
        ),
        (
            msgpack_message("counter", "x", "1", "novalue", ""),
            Drop("bad_tags"),
        ),
        (
            msgpack_message("ts_store", "x", "1", "", ""),
            Drop("bad_timestamp"),
        ),
        (
            msgpack_message("ts_store", "x", "1", "", "soon"),
            Drop("bad_timestamp"),
        ),
    ];
    let bunch = msgpack_bunch(&messages.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>());
    for (_, e) in &messages {
        msgpack.expect(*e);
    }
    udp_send(mp, &bunch);
    // Two messages, the second cut short: the unreadable tail is one drop.
    let pair = msgpack_bunch(&[
        msgpack_message("counter", "mp.trunc", "1", "", ""),
        msgpack_message("counter", "mp.trunc", "1", "", ""),
    ]);
    udp_send(mp, &pair[..pair.len() - 3]);
    msgpack.expect(Points(1));
    msgpack.expect(Drop("truncated"));
    udp_send(mp, b"\xc1\xff\x00garbage");
    msgpack.expect(Drop("malformed"));

    // StatsD over a unix datagram socket: a datagram longer than the
    // agent's 64 KiB slot is one oversized drop, whatever it holds.
    let mut unixgram = Ledger::default();
    let u = std::os::unix::net::UnixDatagram::unbound().unwrap();
    u.send_to(&b"big:1|c\n".repeat(100 * 1024 / 8), &sock)
        .unwrap();
    unixgram.expect(Drop("oversized"));
    u.send_to(b"ux.ok:1|c\n", &sock).unwrap();
    unixgram.expect(Points(1));

    // StatsD over TCP: a line longer than 64 KiB is one oversized drop,
    // and the lines after it are parsed.
    let mut stream = Ledger::default();
    {
        use std::io::Write;
        let mut c = std::net::TcpStream::connect(("127.0.0.1", tcp)).unwrap();
        c.write_all(&vec![b'a'; 100 * 1024]).unwrap();
        c.write_all(b"\ntcp.ok:1|c\ntcp.ok:2|c").unwrap();
    }
    stream.expect(Drop("oversized"));
    stream.expect(Points(2));
    // The same when no single read holds more than 64 KiB of the line: the
    // agent reads 60 KiB, then the rest with the newline.
    {
        use std::io::Write;
        let reads = format!(
            "sonde_receiver_datagrams_total{{receiver=\"tcp://127.0.0.1:{tcp}\",protocol=\"statsd\"}}"
        );
        let before = wait_for("tcp reads", WAIT, || agent.metric(&reads));
        let mut c = std::net::TcpStream::connect(("127.0.0.1", tcp)).unwrap();
        c.write_all(&vec![b'b'; 60 * 1024]).unwrap();
        wait_for("the first part to be read", WAIT, || {
            (agent.metric(&reads)? > before).then_some(())
        });
        c.write_all(&vec![b'b'; 10 * 1024]).unwrap();
        c.write_all(b"\ntcp.ok:4|c\n").unwrap();
    }
    stream.expect(Drop("oversized"));
    stream.expect(Points(1));

    let udp = |p: u16| format!("udp://127.0.0.1:{p}");
    let ugram = format!("unixgram://{}", sock.display());
    let tcpa = format!("tcp://127.0.0.1:{tcp}");
    check_ledger(&agent, &udp(sd), "statsd", &statsd);
    check_ledger(&agent, &udp(mp), "msgpack", &msgpack);
    check_ledger(&agent, &ugram, "statsd", &unixgram);
    check_ledger(&agent, &tcpa, "statsd", &stream);

    // The global limit: 40 series, of which the input above created 21
    // (6 ok.* and big.c, 10 hot.m, 3 msgpack, 1 unixgram, 1 tcp); 50 new
    // names get the rest.
    let live = agent.metric("sonde_worker_series").unwrap() as u64;
    assert_eq!(live, 21);
    let flood: Vec<u8> = (0..50)
        .flat_map(|i| format!("cold.m{i}:1|c\n").into_bytes())
        .collect();
    udp_send(sd, &flood);
    for i in 0..50 {
        statsd.expect(if i < 40 - live {
            Points(1)
        } else {
            Drop("series_limit")
        });
    }
    check_ledger(&agent, &udp(sd), "statsd", &statsd);
    assert_eq!(agent.metric("sonde_worker_series"), Some(40.0));

    // Output side: the overflowing counter's point is dropped and counted
    // at flush, every other series is written.
    wait_for("the overflowing sum to be counted", WAIT, || {
        (agent.metric("sonde_non_finite_dropped_total")? >= 1.0).then_some(())
    });
    let out = wait_for("the flushed points", WAIT, || {
        let p = agent.points();
        (!named(&p, "tcp.ok").is_empty() && !named(&p, "cold.m0").is_empty()).then_some(p)
    });
    assert!(named(&out, "big.c").is_empty());
    let sum = |name: &str| named(&out, name).iter().map(|p| p.1).sum::<f64>();
    assert_eq!(sum("tcp.ok"), 7.0);
    assert_eq!(sum("ux.ok"), 1.0);
    assert_eq!(sum("ok.count"), 2.0);
    assert_eq!(named(&out, "mp.trunc").len(), 1);
}

/// The agent refuses to listen where other hosts can reach it unless the
/// config says so explicitly, and the error names the key to set.
#[test]
fn a_config_listening_beyond_loopback_is_refused_without_allow_non_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sonde.toml");
    let body = "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://0.0.0.0:0\"\n\n[[sinks]]\ntype = \"console\"\n";
    std::fs::write(&path, body).unwrap();
    let p = path.to_str().unwrap();
    for cmd in ["validate", "run"] {
        let (ok, _, stderr) = sonde(&[cmd, "--config", p]);
        assert!(!ok, "{cmd} accepted a wildcard address");
        assert!(
            stderr.contains("receivers[0].listen") && stderr.contains("allow_non_loopback = true"),
            "{cmd}: {stderr}"
        );
    }
    std::fs::write(&path, format!("[agent]\nallow_non_loopback = true\n{body}")).unwrap();
    let (ok, _, stderr) = sonde(&["validate", "--config", p]);
    assert!(ok, "{stderr}");
}

/// Unix socket files get mode 0666 by default (SDKs run as other users),
/// or the configured mode, owner and group. Changing the owner needs root;
/// without it the test gives the file its own user and group.
#[test]
fn unix_socket_files_get_the_configured_mode_owner_and_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let here = std::fs::metadata(dir.path()).unwrap();
    let (uid, gid) = if root {
        (1, 1)
    } else {
        (here.uid(), here.gid())
    };
    let (open, closed) = (dir.path().join("open.sock"), dir.path().join("closed.sock"));
    let agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{}\"\n\
             [[receivers]]\nprotocol = \"statsd\"\nlisten = \"unixgram://{}\"\n\
             mode = \"0620\"\nowner = \"{uid}\"\ngroup = \"{gid}\"\n",
            open.display(),
            closed.display()
        ),
    );
    let meta = |p: &std::path::Path| std::fs::metadata(p).unwrap();
    assert_eq!(meta(&open).permissions().mode() & 0o777, 0o666);
    assert_eq!(meta(&closed).permissions().mode() & 0o777, 0o620);
    assert_eq!((meta(&closed).uid(), meta(&closed).gid()), (uid, gid));
    drop(agent);
}

/// Under overload the kernel drops datagrams the agent cannot read in
/// time; the agent exports how many, so that every datagram sent is either
/// read and parsed or counted as a kernel drop.
#[test]
fn datagrams_the_kernel_drops_under_overload_are_counted() {
    let port = free_port();
    let agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{port}\"\nreceive_buffer = \"4KiB\"\n"
        ),
    );
    let labels = format!("{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\"}}");
    let granted = agent
        .metric(&format!("sonde_receiver_receive_buffer_bytes{labels}"))
        .unwrap();
    assert!(granted > 0.0 && granted < 65536.0, "granted {granted}");
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let datagram = b"ov.c:1|c\n".repeat(100);
    let mut sent = 0u64;
    for _ in 0..5000 {
        socket.send_to(&datagram, ("127.0.0.1", port)).unwrap();
        sent += 1;
    }
    // A drop count rides on the next datagram read, so keep sending small
    // probes until every datagram is accounted for.
    let metric = |name: &str| agent.metric(&format!("{name}{labels}"));
    let (read, dropped) = wait_for("datagrams read + kernel drops = sent", WAIT, || {
        socket.send_to(b"probe:1|c\n", ("127.0.0.1", port)).unwrap();
        sent += 1;
        std::thread::sleep(Duration::from_millis(20));
        let read = metric("sonde_receiver_datagrams_total")?;
        let dropped = metric("sonde_receiver_kernel_dropped_total")?;
        // The last probe may still be in flight.
        (read + dropped + 1.0 >= sent as f64).then_some((read, dropped))
    });
    assert!(dropped > 0.0, "no kernel drops with a 4 KiB buffer");
    assert!(read + dropped == sent as f64 || read + dropped + 1.0 == sent as f64);
    // Every datagram read was parsed: 100 points per burst datagram, one
    // per probe.
    let probes = sent - 5000;
    assert!(probes < 100);
    let points = metric("sonde_receiver_points_total").unwrap() as u64;
    assert_eq!(points / 100 + points % 100, read as u64, "points {points}");
    eprintln!("sent {sent}, read {read}, kernel drops {dropped}, buffer {granted}");
    assert!(agent.metric("sonde_host_udp_rcvbuf_errors_total").unwrap() >= dropped);
}

#[test]
fn a_stream_receiver_keeps_at_most_max_connections_open() {
    use std::io::{Read, Write};
    let port = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"tcp://127.0.0.1:{port}\"\nmax_connections = 3\n"
        ),
    );
    let receiver = format!("receiver=\"tcp://127.0.0.1:{port}\",protocol=\"statsd\"");
    let metric = |name: &str| agent.metric(&format!("{name}{{{receiver}}}"));
    let mut kept = Vec::new();
    for i in 0..3 {
        kept.push(std::net::TcpStream::connect(("127.0.0.1", port)).unwrap());
        wait_for("the connection accepted", Duration::from_secs(5), || {
            (metric("sonde_receiver_connections_total")? == f64::from(i + 1)).then_some(())
        });
    }
    // The fourth is closed as soon as it is accepted.
    let mut extra = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(
        extra.read(&mut buf).unwrap_or(0),
        0,
        "the extra connection stays open"
    );
    wait_for("the refusal counted", Duration::from_secs(5), || {
        (metric("sonde_receiver_connections_refused_total")? == 1.0).then_some(())
    });
    // The kept connections still deliver.
    for (i, c) in kept.iter_mut().enumerate() {
        writeln!(c, "conn.{i}:1|c").unwrap();
    }
    wait_for("their points", Duration::from_secs(5), || {
        (metric("sonde_receiver_points_total")? == 3.0).then_some(())
    });
}
