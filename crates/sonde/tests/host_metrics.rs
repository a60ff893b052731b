//! `[host_metrics]`: the agent run for real with a file sink, its points
//! checked against what the test reads from /proc and /sys around the
//! run and against Debian's prometheus-node-exporter scraped in the same
//! run, and against load the test makes itself: bytes over loopback, a
//! file written and synced, a busy process of a name of its own, a cgroup
//! v2 container with a pod uid.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, http_get, named, wait_for, Agent, Json};

const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";

/// A node_exporter on a loopback port, killed when dropped.
struct NodeExporter {
    child: Child,
    port: u16,
}

impl NodeExporter {
    fn start() -> NodeExporter {
        assert!(
            Path::new(NODE_EXPORTER).exists(),
            "{NODE_EXPORTER} is missing: scripts/setup installs it (apt-get install prometheus-node-exporter)"
        );
        let port = free_port();
        let child = Command::new(NODE_EXPORTER)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // Debian's build leaves lo out by default.
            .arg("--collector.netdev.device-exclude=^$")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let n = NodeExporter { child, port };
        wait_for("node_exporter to answer", Duration::from_secs(20), || {
            http_get(n.port, "/metrics")
        });
        n
    }

    /// The value of the first series whose text starts with `start` and
    /// holds every one of `has`.
    fn value(&self, start: &str, has: &[&str]) -> f64 {
        let text = http_get(self.port, "/metrics").expect("node_exporter answers");
        text.lines()
            .filter(|l| l.starts_with(start) && has.iter().all(|h| l.contains(h)))
            .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()))
            .unwrap_or_else(|| panic!("no {start} {has:?} in node_exporter's answer"))
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `lo`'s transmitted bytes in /proc/net/dev.
fn lo_transmit() -> u64 {
    let text = std::fs::read_to_string("/proc/net/dev").unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("lo:"))
        .unwrap();
    let f: Vec<u64> = line
        .split_once(':')
        .unwrap()
        .1
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    f[8]
}

/// Every CPU's ticks (user to steal) in /proc/stat, and how many CPUs.
fn cpu_ticks() -> (u64, usize) {
    let text = std::fs::read_to_string("/proc/stat").unwrap();
    let mut total = 0;
    let mut cpus = 0;
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let name = f.next().unwrap_or("");
        if name.len() > 3 && name.starts_with("cpu") {
            cpus += 1;
            total += f.take(8).map(|v| v.parse::<u64>().unwrap()).sum::<u64>();
        }
    }
    (total, cpus)
}

fn mem_total() -> f64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024.0
}

/// The size of the filesystem of `/` as statfs(2) gives it (`stat -f`).
fn root_size() -> f64 {
    let out = Command::new("stat")
        .args(["-f", "-c", "%b %S", "/"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut f = text.split_whitespace().map(|v| v.parse::<f64>().unwrap());
    f.next().unwrap() * f.next().unwrap()
}

fn tag<'a>(tags: &'a Json, k: &str) -> &'a str {
    tags[k].as_str().unwrap_or("")
}

fn sum(points: &[Json], name: &str, keep: impl Fn(&Json) -> bool) -> f64 {
    named(points, name)
        .iter()
        .filter(|(t, _, _)| keep(t))
        .map(|(_, v, _)| v)
        .sum()
}

/// A cgroup v2 container the test makes, with a pod, under the unified
/// hierarchy's root: removed when dropped (its processes gone first).
struct Container {
    dirs: Vec<PathBuf>,
    id: String,
    pod: String,
}

impl Container {
    /// `None` where there is no writable cgroup v2 hierarchy.
    fn make() -> Option<Container> {
        let root = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.join("cgroup.controllers").exists())?;
        let pid = std::process::id();
        let pod = format!("5a3e1c2b-0000-4000-8000-{pid:012x}");
        let id = format!("{:064x}", u128::from(pid) * 0x9e37_79b9);
        let slice = root.join(format!("sonde-test-pod{}.slice", pod.replace('-', "_")));
        let scope = slice.join(format!("cri-containerd-{id}.scope"));
        std::fs::create_dir_all(&scope).ok()?;
        Some(Container {
            dirs: vec![scope, slice],
            id,
            pod,
        })
    }

    fn enter(&self, pid: u32) {
        std::fs::write(self.dirs[0].join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        for d in &self.dirs {
            // A process that has just been reaped leaves its cgroup a
            // moment later.
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(d).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A process named `sonde-hm-busy` (the name of the link it is started
/// through) that keeps a CPU busy, killed when dropped.
struct Busy(Child);

impl Busy {
    fn start(dir: &Path) -> Busy {
        let link = dir.join("sonde-hm-busy");
        std::os::unix::fs::symlink("/usr/bin/yes", &link).unwrap();
        Busy(Command::new(&link).stdout(Stdio::null()).spawn().unwrap())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_agent() -> Agent {
    Agent::start_config(|admin, dir| {
        format!(
            "[agent]\ninterval = \"2s\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n\
             [host_metrics]\ninterval = \"1s\"\ntop_processes = 10\ntcp = true\n\n\
             [[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
            dir.join("data").display(),
            dir.join("points.jsonl").display()
        )
    })
}

/// The agent's log lines at WARN or ERROR.
fn complaints(agent: &Agent) -> Vec<String> {
    agent
        .stderr()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(String::from)
        .collect()
}

#[test]
fn host_metrics_agree_with_proc_sys_node_exporter_and_the_load_the_test_makes() {
    let ne = NodeExporter::start();
    let (ticks_before, cpus) = cpu_ticks();
    let lo_before = lo_transmit();
    let ne_lo_before = ne.value("node_network_transmit_bytes_total{", &["device=\"lo\""]);
    let mut agent = start_agent();

    // A window with increases: the counters' first values are kept, so
    // what the test does from here is inside the agent's figures.
    wait_for("a window of lo's bytes", Duration::from_secs(20), || {
        let p = agent.points();
        (!named(&p, "system.network.io").is_empty()).then_some(())
    });
    let measured_from = Instant::now();

    // Bytes over loopback.
    const SENT: usize = 4 << 20;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut n = 0;
        let mut buf = vec![0; 64 << 10];
        loop {
            match s.read(&mut buf).unwrap() {
                0 => return n,
                k => n += k,
            }
        }
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&vec![7u8; SENT]).unwrap();
    drop(s);
    assert_eq!(reader.join().unwrap(), SENT);

    // A file written and synced to the disk under the target directory.
    const WRITTEN: usize = 8 << 20;
    let file_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut f = std::fs::File::create(file_dir.path().join("written")).unwrap();
    f.write_all(&vec![1u8; WRITTEN]).unwrap();
    f.sync_all().unwrap();
    drop(f);

    // A busy process, in a container of a pod when cgroup v2 lets the
    // test make one.
    let busy = Busy::start(agent.dir.path());
    let busy_pid = busy.0.id();
    let container = Container::make();
    if let Some(c) = &container {
        c.enter(busy_pid);
    } else {
        eprintln!(
            "no writable cgroup v2 hierarchy: the container part is checked on fixtures only"
        );
    }

    let pid = busy_pid.to_string();
    wait_for(
        "the loopback bytes, the file's bytes, the busy process and its container",
        Duration::from_secs(30),
        || {
            let p = agent.points();
            let lo = sum(&p, "system.network.io", |t| {
                tag(t, "device") == "lo" && tag(t, "direction") == "transmit"
            });
            let written = sum(&p, "system.disk.io", |t| tag(t, "direction") == "write");
            let busy = sum(&p, "process.cpu.time", |t| {
                tag(t, "process.pid") == pid && tag(t, "process.executable.name") == "sonde-hm-busy"
            });
            let contained = container.as_ref().is_none_or(|c| {
                sum(&p, "container.cpu.time", |t| {
                    tag(t, "container.id") == c.id && tag(t, "k8s.pod.uid") == c.pod
                }) > 0.5
            });
            (lo >= SENT as f64 && written >= WRITTEN as f64 && busy > 0.5 && contained)
                .then_some(())
        },
    );
    drop(busy);
    let measured_for = measured_from.elapsed();
    let host_points = agent
        .metric("sonde_receiver_points_total{receiver=\"host_metrics\",protocol=\"host_metrics\"}")
        .unwrap();
    assert!(host_points > 100.0, "{host_points}");
    let ne_lo_after = ne.value("node_network_transmit_bytes_total{", &["device=\"lo\""]);
    agent.stop();
    drop(container);
    let (ticks_after, _) = cpu_ticks();
    let lo_after = lo_transmit();
    let p = agent.points();

    // lo: at least what the test sent, at most what the kernel counted
    // over the run (node_exporter's scrapes bound the run as well, from
    // before the start to just before the stop).
    let lo = sum(&p, "system.network.io", |t| {
        tag(t, "device") == "lo" && tag(t, "direction") == "transmit"
    });
    assert!(lo >= SENT as f64, "{lo}");
    assert!(
        lo <= (lo_after - lo_before) as f64,
        "{lo} > {}",
        lo_after - lo_before
    );
    let ne_lo = ne_lo_after - ne_lo_before;
    assert!(ne_lo >= SENT as f64, "node_exporter saw {ne_lo}");

    // CPU: each collection adds about a second per CPU over its states,
    // so a window holds a whole number of seconds per CPU; over the run,
    // no more than the kernel counted, and no less than the time measured
    // here less two intervals at each end.
    let mut per_window: BTreeMap<(i64, String), f64> = BTreeMap::new();
    for (t, v, ts) in named(&p, "system.cpu.time") {
        *per_window
            .entry((ts, tag(&t, "cpu").to_string()))
            .or_default() += v;
    }
    assert!(per_window.len() >= 2 * cpus, "{per_window:?}");
    // The first increase is from the agent's start to the first whole
    // second.
    let first = per_window.keys().map(|k| k.0).min().unwrap();
    for ((ts, cpu), secs) in per_window.iter().filter(|(k, _)| k.0 != first) {
        let whole = secs.round();
        assert!(
            whole >= 1.0 && (secs - whole).abs() < 0.2,
            "window {ts} {cpu}: {secs} s is not a whole number of 1 s collections"
        );
    }
    let cpu_total: f64 = per_window.values().sum();
    let kernel = (ticks_after - ticks_before) as f64 / 100.0;
    assert!(
        cpu_total <= kernel + 0.05 * cpus as f64,
        "{cpu_total} > {kernel}"
    );
    let least = (measured_for.as_secs_f64() - 2.0).max(0.0) * cpus as f64;
    assert!(cpu_total >= least, "{cpu_total} < {least}");

    // Memory and the root filesystem's size: the same as /proc/meminfo,
    // statfs(2) and node_exporter.
    let limit: Vec<f64> = named(&p, "system.memory.limit")
        .iter()
        .map(|x| x.1)
        .collect();
    assert!(!limit.is_empty());
    let total = mem_total();
    assert!(limit.iter().all(|&v| v == total), "{limit:?} vs {total}");
    assert_eq!(total, ne.value("node_memory_MemTotal_bytes ", &[]));
    let last_ts = named(&p, "system.filesystem.usage")
        .iter()
        .map(|x| x.2)
        .max()
        .unwrap();
    let root: f64 = named(&p, "system.filesystem.usage")
        .iter()
        .filter(|(t, _, ts)| *ts == last_ts && tag(t, "mountpoint") == "/")
        .map(|x| x.1)
        .sum();
    assert_eq!(root, root_size());
    assert_eq!(
        root,
        ne.value("node_filesystem_size_bytes{", &["mountpoint=\"/\""])
    );
    // The other levels are there with their attributes.
    for (name, key) in [
        ("system.memory.usage", "state"),
        ("system.network.connections", "state"),
        ("system.cpu.load_average.1m", ""),
    ] {
        let got = named(&p, name);
        assert!(!got.is_empty(), "{name}");
        assert!(
            key.is_empty() || got.iter().all(|(t, _, _)| !tag(t, key).is_empty()),
            "{name}"
        );
    }
    assert_eq!(complaints(&agent), Vec::<String>::new());
}

#[test]
fn processes_that_exit_while_being_read_cost_no_log_line() {
    let mut agent = start_agent();
    let points = || {
        agent
            .metric(
                "sonde_receiver_points_total{receiver=\"host_metrics\",protocol=\"host_metrics\"}",
            )
            .unwrap_or(0.0)
    };
    // Thousands of processes that live a moment, across several
    // collections, each of which lists /proc and reads every process.
    let churn = Command::new("sh")
        .args([
            "-c",
            "i=0; while [ $i -lt 4000 ]; do /bin/true; i=$((i+1)); done",
        ])
        .spawn()
        .unwrap();
    let mut churn = scopeguard(churn);
    let start = points();
    let collections = Instant::now();
    wait_for(
        "four collections during the churn",
        Duration::from_secs(30),
        || (collections.elapsed() > Duration::from_secs(4) && points() > start).then_some(()),
    );
    let _ = churn.0.wait();
    agent.stop();
    assert!(!named(&agent.points(), "process.memory.usage").is_empty());
    assert_eq!(complaints(&agent), Vec::<String>::new());
}

/// A child killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scopeguard(c: Child) -> Guard {
    Guard(c)
}
