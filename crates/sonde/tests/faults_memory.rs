//! The packaged unit's memory limit under the worst load its bounds allow:
//! the real agent in a memory cgroup of `MemoryMax=512M` (and
//! `MemoryHigh=384M` where cgroup v2 has it), 250,000 series flooded in
//! over StatsD while two log sources read a 1 GiB backlog, one into a
//! blackhole as fast as it goes and one into an HTTP endpoint that takes
//! connections and never answers. The endpoint holds the sink's requests
//! until its `request_timeout`, so windows queue for the sink (8 at most)
//! and its memory buffer fills to its 64 MiB; the second source stops at
//! its 16 MiB in flight. The agent must not be OOM-killed nor even reach
//! the limit, and it must account for every point of the flood.
//!
//! Needs root (for the cgroup, and the tmpfs that holds the backlog), a
//! writable memory cgroup controller (v1 or v2) and 3 GiB of available
//! memory; CI runs as root. Skipped, with a line that says why, otherwise.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use sonde_testkit::Tmpfs;

const MIB: u64 = 1 << 20;
/// The unit's `MemoryMax=512M` (systemd reads M as MiB) and the
/// DaemonSet's `512Mi`.
const LIMIT: u64 = 512 * MIB;
/// The unit's `MemoryHigh=384M` (cgroup v2 only).
const HIGH: u64 = 384 * MIB;
/// The log backlog.
const BACKLOG: u64 = 1 << 30;
/// Points per datagram the load generator sends, fixed so that datagrams
/// the kernel drops convert to points exactly.
const PER_DATAGRAM: u64 = 10;
/// One point of the load generator's first series, a counter.
const SENTINEL: &[u8] = b"bench.metric_0:1|c|#series:s0,env:prod,region:eu-west-0";

/// A memory cgroup of its own, v1 or v2; its processes are killed and it
/// is removed when dropped, whatever the test did.
struct Cgroup {
    path: PathBuf,
    v2: bool,
}

impl Cgroup {
    /// A new memory cgroup limited to `max` bytes (and `high` on v2), or
    /// `None`, said on standard error, where the test cannot make one.
    fn create(max: u64, high: u64) -> Option<Cgroup> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: the memory cgroup test is skipped");
            return None;
        }
        let name = format!("sonde-test-memory-{}", std::process::id());
        let unified = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(unified.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let parent = if v2 {
            // The root's children get the memory controller only when
            // the root hands it down.
            let _ = std::fs::write(unified.join("cgroup.subtree_control"), "+memory");
            unified.to_path_buf()
        } else {
            unified.join("memory")
        };
        if !parent.join("cgroup.procs").exists() {
            eprintln!(
                "no memory cgroup controller at {}: the memory cgroup test is skipped",
                parent.display()
            );
            return None;
        }
        let path = parent.join(name);
        if let Err(e) = std::fs::create_dir(&path) {
            eprintln!(
                "cannot make {}: {e}: the memory cgroup test is skipped",
                path.display()
            );
            return None;
        }
        let cg = Cgroup { path, v2 };
        let limits: &[(&str, u64)] = if v2 {
            // No swap, as on a host without it: the limit is the RAM.
            &[
                ("memory.max", max),
                ("memory.high", high),
                ("memory.swap.max", 0),
            ]
        } else {
            &[
                ("memory.limit_in_bytes", max),
                ("memory.memsw.limit_in_bytes", max),
            ]
        };
        for &(file, value) in limits {
            let optional = file.contains("swap") || file.contains("memsw");
            if optional && !cg.path.join(file).exists() {
                continue;
            }
            if let Err(e) = std::fs::write(cg.path.join(file), value.to_string()) {
                // A v2 cgroup whose parent does not hand down the memory
                // controller (inside a container, say) has no memory.max.
                eprintln!(
                    "cannot write {value} to {}/{file}: {e}: the memory cgroup test is skipped",
                    cg.path.display()
                );
                return None;
            }
        }
        Some(cg)
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file)).unwrap_or_default()
    }

    /// The value of `key` in a flat keyed file (`memory.stat`,
    /// `memory.events`, v1's `memory.oom_control`).
    fn keyed(&self, file: &str, key: &str) -> Option<u64> {
        self.read(file).lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        })
    }

    /// A command line that moves itself into the cgroup, then runs its
    /// arguments (the agent's command line) in its place.
    fn launcher(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                "echo $$ > {} && exec \"$@\"",
                self.path.join("cgroup.procs").display()
            ),
            "sh".into(),
        ]
    }

    fn pids(&self) -> Vec<i32> {
        self.read("cgroup.procs")
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Memory charged now: the process's pages, the kernel's on its
    /// behalf and the page cache it brought in.
    fn current(&self) -> u64 {
        let file = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        self.read(file).trim().parse().unwrap_or(0)
    }

    /// The most ever charged, where the kernel keeps it (v1; v2 from 5.19).
    fn peak(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        self.read(file).trim().parse().ok()
    }

    /// Anonymous memory now (the heap and stacks; no page cache).
    fn anon(&self) -> u64 {
        let key = if self.v2 { "anon" } else { "rss" };
        self.keyed("memory.stat", key).unwrap_or(0)
    }

    /// Processes the OOM killer killed in the cgroup.
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.keyed(file, "oom_kill")
            .unwrap_or_else(|| panic!("{}/{file} has no oom_kill count", self.path.display()))
    }

    /// How often the limit was hit (v1 `failcnt`, v2 `max` events), and
    /// on v2 how often `memory.high` was passed.
    fn limit_hits(&self) -> (u64, Option<u64>) {
        if self.v2 {
            (
                self.keyed("memory.events", "max").unwrap_or(0),
                self.keyed("memory.events", "high"),
            )
        } else {
            (
                self.read("memory.failcnt").trim().parse().unwrap_or(0),
                None,
            )
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                // SAFETY: kill has no memory preconditions; every pid in
                // the cgroup was started by this test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Err(e) = std::fs::remove_dir(&self.path) {
            eprintln!("cannot remove {}: {e}", self.path.display());
        }
    }
}

/// The highest values seen while the test waits.
#[derive(Debug, Default)]
struct Highs {
    /// The cgroup's charge.
    current: u64,
    /// The cgroup's anonymous memory.
    anon: u64,
    /// The http sink's memory buffer.
    queue_bytes: f64,
}

impl Highs {
    /// Samples the cgroup and the agent's `/metrics` once.
    fn sample(&mut self, cg: &Cgroup, admin: u16) -> Option<BTreeMap<String, f64>> {
        self.current = self.current.max(cg.current());
        self.anon = self.anon.max(cg.anon());
        let m = scrape(admin)?;
        if let Some(&q) = m.get("sonde_sink_queue_bytes{sink=\"http\"}") {
            self.queue_bytes = self.queue_bytes.max(q);
        }
        Some(m)
    }
}

/// The agent's `/metrics`, each series' text to its value.
fn scrape(admin: u16) -> Option<BTreeMap<String, f64>> {
    let text = http_get(admin, "/metrics")?;
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect(),
    )
}

/// The sum of every series of `metric` whose labels contain `filter`.
fn sum(m: &BTreeMap<String, f64>, metric: &str, filter: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| {
            (k.as_str() == metric || k.starts_with(&format!("{metric}{{"))) && k.contains(filter)
        })
        .map(|(_, v)| v)
        .sum()
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// Writes `size` bytes of log lines of 20 to 300 bytes into `path`,
/// 1 MiB a write: 16 different blocks of pseudo-random lines, each block
/// a whole number of lines, in turn.
fn write_backlog(path: &Path, size: u64) {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    const WORDS: &[&str] = &[
        "GET",
        "POST",
        "/api/v1/orders",
        "/healthz",
        "user=",
        "latency_ms=",
        "status=200",
        "status=503",
        "upstream",
        "timeout",
        "retrying",
        "cache",
        "miss",
        "hit",
        "shard",
        "WARN",
        "INFO",
        "ERROR",
        "request_id=",
        "bytes=",
    ];
    let blocks: Vec<Vec<u8>> = (0..16)
        .map(|b| {
            let mut block = Vec::with_capacity(MIB as usize);
            let mut n = 0u64;
            while block.len() < MIB as usize - 400 {
                let want = 20 + (next() % 281) as usize;
                let start = block.len();
                write!(
                    block,
                    "2026-11-28T04:{:02}:{:02}Z b{b} #{n}",
                    n / 60 % 60,
                    n % 60
                )
                .unwrap();
                while block.len() - start < want {
                    let r = next();
                    block.extend_from_slice(WORDS[(r % WORDS.len() as u64) as usize].as_bytes());
                    write!(block, "{} ", r >> 40).unwrap();
                }
                block.truncate(start + want);
                block.push(b'\n');
                n += 1;
            }
            // Pad to exactly 1 MiB with one last line.
            let pad = MIB as usize - block.len() - 1;
            block.extend_from_slice(&vec![b'.'; pad]);
            block.push(b'\n');
            block
        })
        .collect();
    let mut f =
        std::io::BufWriter::with_capacity(MIB as usize, std::fs::File::create(path).unwrap());
    for i in 0..size / MIB {
        f.write_all(&blocks[i as usize % blocks.len()]).unwrap();
    }
    f.flush().unwrap();
}

/// Lines in one round of the 16 blocks, for a rough check of the count.
fn lines_per_mib(path: &Path) -> f64 {
    let mut buf = vec![0u8; 16 * MIB as usize];
    std::fs::File::open(path)
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf.iter().filter(|&&b| b == b'\n').count() as f64 / 16.0
}

#[test]
fn the_series_flood_and_a_1_gib_log_backlog_stay_inside_the_units_memory_max() {
    // The backlog lives on a tmpfs of its own: RAM, not disk, charged to
    // this test's cgroup (which wrote it), not the agent's; the agent's
    // charge is then its own memory alone. 1 GiB of tmpfs, and the agent's
    // 512 MiB, must fit in what the host has free.
    let available = mem_available();
    if available < 3 << 30 {
        eprintln!(
            "{} MiB of memory available: the memory cgroup test needs 3 GiB and is skipped",
            available / MIB
        );
        return;
    }
    let Some(cg) = Cgroup::create(LIMIT, HIGH) else {
        return;
    };
    let Some(logs) = Tmpfs::mount(&format!("{}m", BACKLOG / MIB + 64)) else {
        return;
    };
    let started = Instant::now();
    let backlog = logs.path().join("app.log");
    write_backlog(&backlog, BACKLOG);
    let per_mib = lines_per_mib(&backlog);
    eprintln!(
        "wrote the {} MiB backlog in {:.1?} (~{per_mib:.0} lines a MiB)",
        BACKLOG / MIB,
        started.elapsed()
    );

    // An endpoint that takes connections into its backlog and never
    // answers: each request waits out the sink's request_timeout.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http = stalled.local_addr().unwrap().port();
    let udp = free_port();
    let launcher = cg.launcher();
    let launcher: Vec<&str> = launcher.iter().map(String::as_str).collect();
    // The packaged sonde.toml's memory settings (max_series and every
    // buffer at its default), with a 1 s interval: the sink gets a window
    // every second, so its window queue and buffer reach their bounds
    // within the flood (at the packaged 30 s they would take minutes).
    // Compression off, so that the 64 MiB buffer fills within a window or
    // two rather than ten; its bound is on the bytes it holds either way.
    let mut agent = Agent::start_config_under(&launcher, |admin, dir| {
        format!(
            r#"[agent]
interval = "1s"
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"
max_series = 250000

[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:{udp}"

[[logs]]
name = "backlog"
include = ["{logs}/*.log"]

[[logs]]
name = "held"
include = ["{logs}/*.log"]

[[sinks]]
type = "http"
url = "http://127.0.0.1:{http}/"
inputs = ["metrics", "held"]
compression = "none"

[[sinks]]
type = "blackhole"
inputs = ["backlog"]
"#,
            data = dir.join("data").display(),
            logs = logs.path().display(),
        )
    });
    let pid = agent.child.id();
    assert_eq!(
        cg.pids(),
        vec![pid as i32],
        "the agent is not alone in {}",
        cg.path.display()
    );
    let admin = agent.admin;

    let mut highs = Highs::default();
    let before = highs.sample(&cg, admin).unwrap();

    // The flood: 250,000 series with three tags, 200k points/s for 20 s.
    let mut bench = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(["bench", "--to", &format!("udp://127.0.0.1:{udp}")])
        .args(["--series", "250000", "--tags", "3", "--rate", "200k"])
        .args(["--points-per-datagram", &PER_DATAGRAM.to_string()])
        .args([
            "--duration",
            "20s",
            "--admin",
            &format!("127.0.0.1:{admin}"),
        ])
        .args(["--pid", &pid.to_string(), "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for("sonde bench", Duration::from_secs(60), || {
        highs.sample(&cg, admin);
        std::thread::sleep(Duration::from_millis(250));
        bench.try_wait().unwrap()
    });
    assert!(status.success(), "sonde bench failed");
    let mut out = String::new();
    bench
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let report: Json = serde_json::from_str(&out).unwrap();
    let sent_points = report["points_sent"].as_u64().unwrap();
    let sent_datagrams = report["datagrams_sent"].as_u64().unwrap();
    assert_eq!(sent_points, sent_datagrams * PER_DATAGRAM);
    assert!(
        agent.child.try_wait().unwrap().is_none(),
        "the agent died during the flood; OOM kills: {}: {}",
        cg.oom_kills(),
        agent.stderr()
    );

    // Every datagram sent was read or dropped by the kernel, and every
    // point read was accepted or dropped with a reason. Drops in the
    // kernel reach the agent's counter with the next datagram read: a
    // sentinel of one point (of a series the flood made live, so that
    // max_series does not refuse it) brings them, and is accounted too.
    let sentinel = UdpSocket::bind("127.0.0.1:0").unwrap();
    let delta = |m: &BTreeMap<String, f64>, name: &str| {
        (sum(m, name, "protocol=\"statsd\"") - sum(&before, name, "protocol=\"statsd\"")) as u64
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let (last, kernel, accepted, dropped, sentinels) = loop {
        sentinel.send_to(SENTINEL, ("127.0.0.1", udp)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let m = highs.sample(&cg, admin).unwrap();
        let datagrams = delta(&m, "sonde_receiver_datagrams_total");
        let kernel = delta(&m, "sonde_receiver_kernel_dropped_total");
        let accepted = delta(&m, "sonde_receiver_points_total");
        let dropped = delta(&m, "sonde_receiver_dropped_total");
        let sentinels = (datagrams + kernel).saturating_sub(sent_datagrams);
        let want = (sent_datagrams.saturating_sub(kernel)) * PER_DATAGRAM + sentinels;
        if sentinels > 0 && accepted + dropped == want {
            break (m, kernel, accepted, dropped, sentinels);
        }
        assert!(
            Instant::now() < deadline,
            "the flood is not accounted for: {sent_datagrams} datagrams sent, {datagrams} read, \
             {kernel} dropped by the kernel; points accepted {accepted} + dropped {dropped} = {}, \
             the datagrams read hold {want}",
            accepted + dropped
        );
    };
    let reasons: BTreeMap<&str, f64> = last
        .iter()
        .filter(|(k, v)| k.starts_with("sonde_receiver_dropped_total{") && **v > 0.0)
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    eprintln!(
        "flood: {sent_points} points sent at {:.0}/s in {sent_datagrams} datagrams; agent: {accepted} \
         accepted, {dropped} dropped {reasons:?}, {kernel} datagrams dropped by the kernel, \
         {sentinels} sentinel(s)",
        report["send_rate"].as_f64().unwrap_or(0.0),
    );
    assert!(accepted > 0);
    let series = sum(&last, "sonde_series", "");
    assert!(series <= 250_000.0, "{series} live series");

    // The sink reached both its bounds: its memory buffer full (the
    // oldest requests dropped as buffer_full) and its queue of 8 windows
    // full (windows refused as queue_full). The endpoint holds each
    // attempt for request_timeout (10 s); the sink takes the queued
    // windows into its buffer between attempts.
    let deadline = Instant::now() + Duration::from_secs(45);
    let m = loop {
        std::thread::sleep(Duration::from_millis(250));
        let m = highs.sample(&cg, admin).unwrap();
        // Windows refused count as batches: those after the flood hold
        // no points.
        let full = sum(
            &m,
            "sonde_sink_dropped_points_total",
            "reason=\"buffer_full\"",
        );
        let refused = sum(
            &m,
            "sonde_sink_dropped_batches_total",
            "reason=\"queue_full\"",
        );
        if full > 0.0 && refused > 0.0 {
            break m;
        }
        if Instant::now() > deadline {
            let sink: Vec<_> = m
                .iter()
                .filter(|(k, v)| {
                    k.starts_with("sonde_sink") && k.contains("sink=\"http\"") && **v != 0.0
                })
                .collect();
            panic!("the http sink did not reach both its bounds in 45 s: {sink:?}");
        }
    };
    let sink_drops: BTreeMap<&str, f64> = m
        .iter()
        .filter(|(k, v)| k.starts_with("sonde_sink_dropped_") && **v > 0.0)
        .map(|(k, v)| (k.as_str(), *v))
        .collect();

    // The logs: the blackhole's source read on through the backlog; the
    // stalled sink's source stopped at its 16 MiB in flight.
    let read = |s: &str| sum(&m, "sonde_log_bytes_read_total", &format!("source=\"{s}\""));
    let lines = |s: &str| sum(&m, "sonde_log_lines_read_total", &format!("source=\"{s}\""));
    let behind = |s: &str| sum(&m, "sonde_log_bytes_behind", &format!("source=\"{s}\""));
    eprintln!(
        "logs after {:.0?}: backlog read {} MiB ({} lines), {} MiB behind; held read {} MiB, {} MiB behind",
        started.elapsed(),
        read("backlog") as u64 / MIB,
        lines("backlog"),
        behind("backlog") as u64 / MIB,
        read("held") as u64 / MIB,
        behind("held") as u64 / MIB,
    );
    assert!(
        read("backlog") > 64.0 * MIB as f64 && lines("backlog") > 64.0 * per_mib * 0.9,
        "the backlog source made no progress"
    );
    assert!(behind("backlog") <= (BACKLOG - 64 * MIB) as f64);
    assert!(
        read("held") >= MIB as f64 && read("held") <= 18.0 * MIB as f64,
        "the held source read {} bytes; its in-flight bound is 16 MiB",
        read("held")
    );
    assert!(behind("held") >= (BACKLOG - 18 * MIB) as f64);

    assert!(
        agent.child.try_wait().unwrap().is_none(),
        "the agent is gone: {}",
        agent.stderr()
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
        .unwrap()
        * 1024;
    let peak = cg.peak().unwrap_or(highs.current);
    let (hits, high_events) = cg.limit_hits();
    eprintln!(
        "memory ({}): cgroup peak {} MiB of {} MiB, anonymous at most {} MiB, agent VmHWM {} MiB; \
         limit hit {hits} times, memory.high passed {high_events:?} times; sink buffer at most {} MiB; \
         sink drops {sink_drops:?}; whole test {:.0?}",
        if cg.v2 { "cgroup v2" } else { "cgroup v1" },
        peak / MIB,
        LIMIT / MIB,
        highs.anon / MIB,
        hwm / MIB,
        highs.queue_bytes as u64 / MIB,
        started.elapsed(),
    );
    assert_eq!(cg.oom_kills(), 0, "the OOM killer killed in the cgroup");
    assert!(peak < LIMIT, "peak {peak} bytes at the {LIMIT} limit");
    // Never even at the limit: the kernel did not have to reclaim to keep
    // the agent under it.
    assert_eq!(hits, 0, "the agent reached its memory limit {hits} times");
    agent.kill();
    drop(stalled);
}
