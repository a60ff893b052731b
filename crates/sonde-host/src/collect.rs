//! One collection: every enabled group read from /proc and /sys (under a
//! root that tests point at fixture trees) into a [`Points`] batch.
//!
//! # Counters
//!
//! The kernel's cumulative counters (CPU time, disk and network bytes,
//! stall time) become the increase since the previous collection, sent as
//! `Kind::Count`: the window's sum, as for a StatsD counter. The first
//! collection of a series only keeps its value. A counter that goes
//! backwards (a device removed and added again under the same name, a
//! counter that wrapped, a cgroup made again under the same path) is
//! taken as a new start: nothing is sent for that interval and the new
//! value is kept, so no delta is ever negative. A series not seen in a
//! collection is forgotten. A process is known by its pid and start time,
//! so a reused pid is a new process, not a counter that moved.
//!
//! # Reading by hand
//!
//! The files are parsed by hand ([`crate::parse`]), not with the `procfs`
//! crate. Measured on the same reads (every group, TCP states included,
//! 92 processes; 2026-11-29, docs/BENCHMARKS.md, "Host metrics"): 8.2 to
//! 8.4 ms of CPU a collection by hand, 8.5 to 8.9 ms through `procfs`.
//! Both are mostly the kernel's own work of writing the files; by hand
//! is no slower, reads each file into one reused buffer, parses only
//! the fields reported and adds no dependency.
//!
//! # Processes and cgroups that vanish
//!
//! A process or a cgroup can go between listing it and reading its
//! files: it is skipped, counted in [`Collector::vanished`], and never
//! logged.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sonde_metrics::input::Points;
use sonde_proto::Kind;

use crate::parse;

/// Which groups a collection reads, and how many processes it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Groups {
    /// `system.cpu.time` per CPU and state.
    pub cpu: bool,
    /// `system.cpu.load_average.*`.
    pub load: bool,
    /// `system.memory.*`.
    pub memory: bool,
    /// `system.paging.*` (swap).
    pub paging: bool,
    /// `system.pressure.*` (PSI).
    pub pressure: bool,
    /// `system.disk.*`.
    pub disk: bool,
    /// `system.filesystem.*`.
    pub filesystem: bool,
    /// `system.network.*` per interface.
    pub network: bool,
    /// `system.network.connections` by TCP state. Off by default: reading
    /// `/proc/net/tcp` and `tcp6` makes the kernel walk its whole
    /// established-socket hash table once per file, however few sockets
    /// there are (6.7 ms a collection on a 25 GB host, six times every
    /// other group together; docs/BENCHMARKS.md, "Host metrics").
    pub tcp: bool,
    /// The top processes by CPU and by memory.
    pub processes: bool,
    /// Per-container CPU, memory and I/O from cgroup v2.
    pub containers: bool,
    /// How many processes the top lists hold.
    pub top_processes: usize,
}

impl Default for Groups {
    fn default() -> Self {
        Groups {
            cpu: true,
            load: true,
            memory: true,
            paging: true,
            pressure: true,
            disk: true,
            filesystem: true,
            network: true,
            // Off: see [`Groups::tcp`].
            tcp: false,
            processes: true,
            containers: true,
            top_processes: 10,
        }
    }
}

/// Where the files are: `/proc`, `/sys`, and the mounts file.
#[derive(Debug, Clone)]
pub struct Roots {
    /// `/proc`.
    pub proc: PathBuf,
    /// `/sys`.
    pub sys: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            proc: "/proc".into(),
            sys: "/sys".into(),
        }
    }
}

/// The state kept from one collection to the next.
#[derive(Debug)]
pub struct Collector {
    groups: Groups,
    roots: Roots,
    /// Seconds per clock tick (`1 / sysconf(_SC_CLK_TCK)`).
    tick: f64,
    /// Bytes per page.
    page: u64,
    /// The last value of each counter, by series (name and tags), and
    /// whether the current collection saw it.
    counters: HashMap<String, (u64, bool)>,
    /// Processes by (pid, start ticks): CPU ticks at the last collection.
    procs: HashMap<(u32, u64), u64>,
    buf: String,
    key: String,
    /// Processes and cgroups that went while being read.
    pub vanished: u64,
}

/// A process seen in this collection.
struct Proc {
    pid: u32,
    name: String,
    cpu_delta: u64,
    rss: u64,
}

impl Collector {
    /// A collector of `groups` from the files under `roots`.
    pub fn new(groups: Groups, roots: Roots) -> Collector {
        let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&t| t > 0)
            .map_or(100.0, |t| t as f64);
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .filter(|&p| p > 0)
            .map_or(4096, |p| p as u64);
        Collector {
            groups,
            roots,
            tick: 1.0 / tick,
            page,
            counters: HashMap::new(),
            procs: HashMap::new(),
            buf: String::new(),
            key: String::new(),
            vanished: 0,
        }
    }

    /// Reads every enabled group into `out`.
    pub fn collect(&mut self, out: &mut Points) {
        for c in self.counters.values_mut() {
            c.1 = false;
        }
        let g = self.groups;
        if g.cpu {
            self.cpu(out);
        }
        if g.load {
            self.load(out);
        }
        if g.memory || g.paging {
            self.memory(out);
        }
        if g.pressure {
            self.pressure(out);
        }
        if g.disk {
            self.disk(out);
        }
        if g.filesystem {
            self.filesystem(out);
        }
        if g.network {
            self.network(out);
        }
        if g.tcp {
            self.tcp(out);
        }
        if g.processes && g.top_processes > 0 {
            self.processes(out);
        }
        if g.containers {
            self.containers(out);
        }
        self.counters.retain(|_, c| c.1);
    }

    /// Reads `path` into the reused buffer; false when it cannot be read.
    fn read(&mut self, path: &Path) -> bool {
        self.buf.clear();
        match std::fs::File::open(path) {
            Ok(mut f) => f.read_to_string(&mut self.buf).is_ok(),
            Err(_) => false,
        }
    }

    fn proc_file(&mut self, name: &str) -> Option<String> {
        let path = self.roots.proc.join(name);
        self.read(&path).then(|| std::mem::take(&mut self.buf))
    }

    /// Sends the increase of counter `now` since the last collection,
    /// times `scale`, as a `Count` (see the module docs).
    fn counter(
        &mut self,
        out: &mut Points,
        name: &str,
        tags: &[(&str, &str)],
        now: u64,
        scale: f64,
    ) {
        self.key.clear();
        self.key.push_str(name);
        for (k, v) in tags {
            self.key.push('|');
            self.key.push_str(k);
            self.key.push('=');
            self.key.push_str(v);
        }
        let before = match self.counters.get_mut(self.key.as_str()) {
            Some(c) => std::mem::replace(c, (now, true)).0,
            None => {
                self.counters.insert(self.key.clone(), (now, true));
                return;
            }
        };
        if now >= before {
            out.push(
                Kind::Count,
                name,
                tags.iter().copied(),
                (now - before) as f64 * scale,
            );
        }
    }

    fn cpu(&mut self, out: &mut Points) {
        let Some(text) = self.proc_file("stat") else {
            return;
        };
        let tick = self.tick;
        for (cpu, t) in parse::cpu_stat(&text) {
            for (state, v) in t.states() {
                self.counter(
                    out,
                    "system.cpu.time",
                    &[("cpu", cpu), ("state", state)],
                    v,
                    tick,
                );
            }
        }
        self.buf = text;
    }

    fn load(&mut self, out: &mut Points) {
        let Some(text) = self.proc_file("loadavg") else {
            return;
        };
        if let Some([a, b, c]) = parse::loadavg(&text) {
            out.push(Kind::Store, "system.cpu.load_average.1m", [], a);
            out.push(Kind::Store, "system.cpu.load_average.5m", [], b);
            out.push(Kind::Store, "system.cpu.load_average.15m", [], c);
        }
        self.buf = text;
    }

    fn memory(&mut self, out: &mut Points) {
        let g = self.groups;
        if let Some(text) = self.proc_file("meminfo") {
            if let Some(m) = parse::meminfo(&text) {
                if g.memory {
                    out.push(Kind::Store, "system.memory.limit", [], m.total as f64);
                    for (state, v) in [
                        ("used", m.used()),
                        ("free", m.free),
                        ("buffered", m.buffers),
                        ("cached", m.cached),
                        ("slab_reclaimable", m.slab_reclaimable),
                        ("slab_unreclaimable", m.slab_unreclaimable),
                    ] {
                        out.push(
                            Kind::Store,
                            "system.memory.usage",
                            [("state", state)],
                            v as f64,
                        );
                    }
                    out.push(
                        Kind::Store,
                        "system.memory.available",
                        [],
                        m.available as f64,
                    );
                }
                if g.paging && m.swap_total > 0 {
                    let used = m.swap_total.saturating_sub(m.swap_free);
                    out.push(
                        Kind::Store,
                        "system.paging.usage",
                        [("state", "used")],
                        used as f64,
                    );
                    out.push(
                        Kind::Store,
                        "system.paging.usage",
                        [("state", "free")],
                        m.swap_free as f64,
                    );
                }
            }
            self.buf = text;
        }
        if !g.paging {
            return;
        }
        let Some(text) = self.proc_file("vmstat") else {
            return;
        };
        for (key, attr, value) in [
            ("pswpin", "direction", "in"),
            ("pswpout", "direction", "out"),
            ("pgfault", "type", "minor"),
            ("pgmajfault", "type", "major"),
        ] {
            if let Some(v) = parse::vmstat_value(&text, key) {
                let name = if attr == "direction" {
                    "system.paging.operations"
                } else {
                    "system.paging.faults"
                };
                self.counter(out, name, &[(attr, value)], v, 1.0);
            }
        }
        self.buf = text;
    }

    fn pressure(&mut self, out: &mut Points) {
        for resource in ["cpu", "memory", "io"] {
            let Some(text) = self.proc_file(&format!("pressure/{resource}")) else {
                continue;
            };
            let (some, full) = parse::pressure(&text);
            for (stall, v) in [("some", some), ("full", full)] {
                if let Some(v) = v {
                    self.counter(
                        out,
                        "system.pressure.stall_time",
                        &[("resource", resource), ("stall", stall)],
                        v,
                        1e-6,
                    );
                }
            }
            self.buf = text;
        }
    }

    fn disk(&mut self, out: &mut Points) {
        let Some(text) = self.proc_file("diskstats") else {
            return;
        };
        for (dev, s) in parse::diskstats(&text) {
            for (dir, bytes, ops, ms) in [
                ("read", s.read_bytes, s.reads, s.read_ms),
                ("write", s.write_bytes, s.writes, s.write_ms),
            ] {
                let tags = [("device", dev), ("direction", dir)];
                self.counter(out, "system.disk.io", &tags, bytes, 1.0);
                self.counter(out, "system.disk.operations", &tags, ops, 1.0);
                self.counter(out, "system.disk.operation_time", &tags, ms, 1e-3);
            }
            self.counter(
                out,
                "system.disk.io_time",
                &[("device", dev)],
                s.io_ms,
                1e-3,
            );
        }
        self.buf = text;
    }

    // statvfs's fields are `c_ulong`, 32 bits on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    fn filesystem(&mut self, out: &mut Points) {
        let Some(text) = self.proc_file("self/mounts") else {
            return;
        };
        // The last mount on a point hides those before it.
        let mut seen: Vec<&str> = Vec::new();
        let mounts = parse::mounts(&text);
        for (device, point, kind) in mounts.iter().rev() {
            if !parse::reported_mount(point, kind) || seen.contains(&point.as_str()) {
                continue;
            }
            seen.push(point);
            let Ok(s) = nix::sys::statvfs::statvfs(point.as_str()) else {
                continue;
            };
            let frsize = u64::from(s.fragment_size());
            let blocks = u64::from(s.blocks());
            if blocks == 0 {
                continue;
            }
            let (bfree, bavail) = (u64::from(s.blocks_free()), u64::from(s.blocks_available()));
            // Each state's count of `unit`s, as one point of `name`.
            let mut usage = |name: &str, states: &[(&str, u64)], unit: u64| {
                for &(state, v) in states {
                    let tags = [
                        ("device", device.as_str()),
                        ("mountpoint", point.as_str()),
                        ("type", *kind),
                        ("state", state),
                    ];
                    out.push(Kind::Store, name, tags, v.saturating_mul(unit) as f64);
                }
            };
            usage(
                "system.filesystem.usage",
                &[
                    ("used", blocks.saturating_sub(bfree)),
                    ("free", bavail),
                    ("reserved", bfree.saturating_sub(bavail)),
                ],
                frsize,
            );
            let files = u64::from(s.files());
            if files > 0 {
                let ffree = u64::from(s.files_free());
                usage(
                    "system.filesystem.inodes.usage",
                    &[("used", files.saturating_sub(ffree)), ("free", ffree)],
                    1,
                );
            }
        }
        drop(mounts);
        self.buf = text;
    }

    fn network(&mut self, out: &mut Points) {
        let Some(text) = self.proc_file("net/dev") else {
            return;
        };
        for (dev, n) in parse::net_dev(&text) {
            for (dir, v) in [("receive", n.receive), ("transmit", n.transmit)] {
                let tags = [("device", dev), ("direction", dir)];
                self.counter(out, "system.network.io", &tags, v[0], 1.0);
                self.counter(out, "system.network.packets", &tags, v[1], 1.0);
                self.counter(out, "system.network.errors", &tags, v[2], 1.0);
                self.counter(out, "system.network.dropped", &tags, v[3], 1.0);
            }
        }
        self.buf = text;
    }

    fn tcp(&mut self, out: &mut Points) {
        let mut counts = [0u64; 12];
        let mut any = false;
        for file in ["net/tcp", "net/tcp6"] {
            if let Some(text) = self.proc_file(file) {
                parse::tcp_states(&text, &mut counts);
                any = true;
                self.buf = text;
            }
        }
        if !any {
            return;
        }
        for (state, n) in parse::TCP_STATES.iter().zip(counts) {
            out.push(
                Kind::Store,
                "system.network.connections",
                [("protocol", "tcp"), ("state", *state)],
                n as f64,
            );
        }
    }

    fn processes(&mut self, out: &mut Points) {
        let Ok(dir) = std::fs::read_dir(&self.roots.proc) else {
            return;
        };
        let mut seen = Vec::new();
        let mut path = self.roots.proc.clone();
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            path.push(name);
            path.push("stat");
            let ok = self.read(&path);
            path.pop();
            path.pop();
            if !ok {
                self.vanished += 1;
                continue;
            }
            let Some(s) = parse::proc_stat(&self.buf) else {
                self.vanished += 1;
                continue;
            };
            let key = (pid, s.start_ticks);
            let cpu_delta = match self.procs.insert(key, s.cpu_ticks) {
                Some(before) if s.cpu_ticks >= before => Some(s.cpu_ticks - before),
                _ => None,
            };
            seen.push((key, cpu_delta, s.comm.to_string(), s.rss_pages));
        }
        let live: std::collections::HashSet<(u32, u64)> = seen.iter().map(|s| s.0).collect();
        self.procs.retain(|k, _| live.contains(k));
        let mut procs: Vec<(Proc, bool)> = seen
            .into_iter()
            .map(|((pid, _), d, name, rss)| {
                (
                    Proc {
                        pid,
                        name,
                        cpu_delta: d.unwrap_or(0),
                        rss: rss * self.page,
                    },
                    d.is_some(),
                )
            })
            .collect();
        let n = self.groups.top_processes;
        // Top by CPU: processes seen in the previous collection too.
        procs.sort_unstable_by(|a, b| {
            b.0.cpu_delta
                .cmp(&a.0.cpu_delta)
                .then(a.0.pid.cmp(&b.0.pid))
        });
        let mut pid = itoa_buf();
        for (p, known) in procs.iter().filter(|p| p.1).take(n) {
            debug_assert!(*known);
            let tags = [
                ("process.pid", fmt_u32(&mut pid, p.pid)),
                ("process.executable.name", p.name.as_str()),
            ];
            out.push(
                Kind::Count,
                "process.cpu.time",
                tags,
                p.cpu_delta as f64 * self.tick,
            );
        }
        procs.sort_unstable_by(|a, b| b.0.rss.cmp(&a.0.rss).then(a.0.pid.cmp(&b.0.pid)));
        for (p, _) in procs.iter().take(n) {
            let tags = [
                ("process.pid", fmt_u32(&mut pid, p.pid)),
                ("process.executable.name", p.name.as_str()),
            ];
            out.push(Kind::Store, "process.memory.usage", tags, p.rss as f64);
        }
    }

    /// The root of the cgroup v2 hierarchy: `/sys/fs/cgroup` on a unified
    /// host, `/sys/fs/cgroup/unified` on a hybrid one.
    fn cgroup_root(&self) -> Option<PathBuf> {
        let fs = self.roots.sys.join("fs/cgroup");
        [fs.clone(), fs.join("unified")]
            .into_iter()
            .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.controllers").exists())
    }

    fn containers(&mut self, out: &mut Points) {
        let Some(root) = self.cgroup_root() else {
            return;
        };
        let mut stack = vec![(root.clone(), 0usize)];
        let mut found = Vec::new();
        while let Some((dir, depth)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let path = e.path();
                let rel = path
                    .strip_prefix(&root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                // The form of a /proc/PID/cgroup line, which the
                // profiler's parsers read.
                let line = format!("0::/{rel}\n");
                match sonde_profile::cgroup::container_of_cgroup(&line) {
                    // A container's own cgroup; its children (a runtime's
                    // `container` leaf) are inside its figures already.
                    Some(id) => found.push((path, id, sonde_profile::cgroup::pod_of_cgroup(&line))),
                    None if depth < 8 => stack.push((path, depth + 1)),
                    None => {}
                }
            }
        }
        for (dir, id, pod) in found {
            let mut tags = vec![("container.id", id.as_str())];
            if let Some(p) = &pod {
                tags.push(("k8s.pod.uid", p.as_str()));
            }
            let mut any = false;
            if self.read(&dir.join("cpu.stat")) {
                if let Some(us) = parse::cgroup_cpu_usec(&self.buf) {
                    any = true;
                    self.counter(out, "container.cpu.time", &tags, us, 1e-6);
                }
            }
            if self.read(&dir.join("memory.current")) {
                if let Ok(v) = self.buf.trim().parse::<u64>() {
                    any = true;
                    out.push(
                        Kind::Store,
                        "container.memory.usage",
                        tags.iter().copied(),
                        v as f64,
                    );
                }
            }
            if self.read(&dir.join("io.stat")) {
                any = true;
                let (r, w) = parse::cgroup_io(&self.buf);
                for (dir, v) in [("read", r), ("write", w)] {
                    let mut t = tags.clone();
                    t.push(("direction", dir));
                    self.counter(out, "container.disk.io", &t, v, 1.0);
                }
            }
            if !any {
                self.vanished += 1;
            }
        }
    }
}

fn itoa_buf() -> String {
    String::with_capacity(10)
}

fn fmt_u32(buf: &mut String, v: u32) -> &str {
    use std::fmt::Write;
    buf.clear();
    let _ = write!(buf, "{v}");
    buf.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A /proc and /sys of fixture files under a temporary directory.
    struct Tree(tempfile::TempDir);

    impl Tree {
        fn new() -> Tree {
            Tree(tempfile::tempdir().unwrap())
        }
        fn write(&self, path: &str, text: &str) {
            let p = self.0.path().join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        fn roots(&self) -> Roots {
            Roots {
                proc: self.0.path().join("proc"),
                sys: self.0.path().join("sys"),
            }
        }
    }

    fn only(groups: impl FnOnce(&mut Groups)) -> Groups {
        let mut g = Groups {
            cpu: false,
            load: false,
            memory: false,
            paging: false,
            pressure: false,
            disk: false,
            filesystem: false,
            network: false,
            tcp: false,
            processes: false,
            containers: false,
            top_processes: 10,
        };
        groups(&mut g);
        g
    }

    fn lines(p: &Points) -> Vec<String> {
        let mut v = Vec::new();
        p.each(|p| {
            v.push(format!(
                "{:?} {} {} {}",
                p.kind,
                String::from_utf8_lossy(p.name),
                sonde_metrics::input::tags_text(p.tags),
                match p.value {
                    sonde_proto::Value::Number(n) => n,
                    _ => f64::NAN,
                }
            ));
        });
        v.sort();
        v
    }

    fn net(rx: u64) -> String {
        format!("Inter-| x\n face | y\n  eth0: {rx} 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n")
    }

    #[test]
    fn counters_send_increases_and_start_again_when_they_go_backwards_or_vanish() {
        let t = Tree::new();
        let mut c = Collector::new(only(|g| g.network = true), t.roots());
        let mut out = Points::new();
        t.write("proc/net/dev", &net(1000));
        c.collect(&mut out);
        assert!(out.is_empty(), "the first value is only kept");
        t.write("proc/net/dev", &net(1500));
        c.collect(&mut out);
        assert!(lines(&out)
            .contains(&"Count system.network.io device:eth0,direction:receive 500".to_string()));
        // The device came back: its counter starts again, nothing is sent.
        out.clear();
        t.write("proc/net/dev", &net(200));
        c.collect(&mut out);
        assert!(
            !lines(&out)
                .iter()
                .any(|l| l.contains("system.network.io device:eth0,direction:receive")),
            "{:?}",
            lines(&out)
        );
        out.clear();
        t.write("proc/net/dev", &net(300));
        c.collect(&mut out);
        assert!(lines(&out)
            .contains(&"Count system.network.io device:eth0,direction:receive 100".to_string()));
        // Gone for one collection: forgotten, so its return is a first value.
        t.write("proc/net/dev", "Inter-| x\n face | y\n");
        c.collect(&mut out);
        out.clear();
        t.write("proc/net/dev", &net(5000));
        c.collect(&mut out);
        assert!(
            !lines(&out).iter().any(|l| l.starts_with("Count")),
            "{:?}",
            lines(&out)
        );
    }

    fn stat(pid: u32, name: &str, ticks: u64, start: u64, rss: u64) -> String {
        format!("{pid} ({name}) S 1 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 {start} 1000 {rss}\n")
    }

    #[test]
    fn top_processes_by_cpu_and_memory_and_a_reused_pid_is_a_new_process() {
        let t = Tree::new();
        let mut c = Collector::new(
            only(|g| {
                g.processes = true;
                g.top_processes = 2;
            }),
            t.roots(),
        );
        let page = c.page as f64;
        t.write("proc/10/stat", &stat(10, "busy", 100, 5, 10));
        t.write("proc/11/stat", &stat(11, "idle", 0, 6, 1000));
        t.write("proc/12/stat", &stat(12, "some", 50, 7, 1));
        t.write("proc/self/stat", &stat(1, "not a pid dir", 0, 0, 0));
        let mut out = Points::new();
        c.collect(&mut out);
        // No CPU figure before a process is seen twice; memory at once.
        let l = lines(&out);
        assert!(!l.iter().any(|l| l.contains("process.cpu.time")));
        assert_eq!(
            l.iter()
                .filter(|l| l.contains("process.memory.usage"))
                .count(),
            2
        );
        assert!(l.contains(&format!(
            "Store process.memory.usage process.pid:11,process.executable.name:idle {}",
            1000.0 * page
        )));
        out.clear();
        t.write("proc/10/stat", &stat(10, "busy", 400, 5, 10));
        t.write("proc/12/stat", &stat(12, "some", 60, 7, 1));
        // Pid 11 is now another process, which used more CPU than pid
        // 11 ever did: not a counter that moved.
        t.write("proc/11/stat", &stat(11, "reused", 9999, 99, 2));
        // A process that went between the listing and the read.
        fs::create_dir_all(t.0.path().join("proc/13")).unwrap();
        c.collect(&mut out);
        let l = lines(&out);
        let cpu: Vec<&String> = l
            .iter()
            .filter(|l| l.contains("process.cpu.time"))
            .collect();
        let tick = c.tick;
        assert_eq!(
            cpu,
            [
                &format!(
                    "Count process.cpu.time process.pid:10,process.executable.name:busy {}",
                    300.0 * tick
                ),
                &format!(
                    "Count process.cpu.time process.pid:12,process.executable.name:some {}",
                    10.0 * tick
                ),
            ]
        );
        assert_eq!(c.vanished, 1);
    }

    #[test]
    fn containers_from_cgroup_v2_with_their_pod() {
        let t = Tree::new();
        let id = "4f2c0e1d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d";
        let uid = "1c2e77aa-0b6e-4c4e-9a8f-3d2b1c0a9e8f";
        let pod = format!(
            "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope",
            uid.replace('-', "_")
        );
        t.write("sys/fs/cgroup/cgroup.procs", "1\n");
        t.write("sys/fs/cgroup/cgroup.controllers", "cpu io memory\n");
        t.write("sys/fs/cgroup/system.slice/cpu.stat", "usage_usec 5\n");
        let write = |cpu: u64, mem: u64, w: u64| {
            t.write(&format!("{pod}/cpu.stat"), &format!("usage_usec {cpu}\n"));
            t.write(&format!("{pod}/memory.current"), &format!("{mem}\n"));
            t.write(
                &format!("{pod}/io.stat"),
                &format!("8:0 rbytes=0 wbytes={w} rios=0 wios=1\n"),
            );
            // The runtime's leaf inside the container: not a second one.
            t.write(
                &format!("{pod}/container/cpu.stat"),
                &format!("usage_usec {cpu}\n"),
            );
        };
        write(1_000_000, 4096, 100);
        let mut c = Collector::new(only(|g| g.containers = true), t.roots());
        let mut out = Points::new();
        c.collect(&mut out);
        assert_eq!(
            lines(&out),
            [format!(
                "Store container.memory.usage container.id:{id},k8s.pod.uid:{uid} 4096"
            )]
        );
        out.clear();
        write(3_500_000, 8192, 600);
        c.collect(&mut out);
        assert_eq!(
            lines(&out),
            [
                format!("Count container.cpu.time container.id:{id},k8s.pod.uid:{uid} 2.5"),
                format!("Count container.disk.io container.id:{id},k8s.pod.uid:{uid},direction:read 0"),
                format!("Count container.disk.io container.id:{id},k8s.pod.uid:{uid},direction:write 500"),
                format!("Store container.memory.usage container.id:{id},k8s.pod.uid:{uid} 8192"),
            ]
        );
    }

    #[test]
    fn the_real_host_gives_every_group() {
        let groups = Groups {
            tcp: true,
            ..Groups::default()
        };
        let mut c = Collector::new(groups, Roots::default());
        let mut out = Points::new();
        c.collect(&mut out);
        std::thread::sleep(std::time::Duration::from_millis(50));
        out.clear();
        c.collect(&mut out);
        let l = lines(&out);
        for name in [
            "system.cpu.time",
            "system.cpu.load_average.1m",
            "system.memory.usage",
            "system.memory.limit",
            "system.filesystem.usage",
            "system.network.io",
            "system.network.connections",
            "process.memory.usage",
        ] {
            assert!(
                l.iter().any(|l| l.split(' ').nth(1) == Some(name)),
                "{name} in {l:#?}"
            );
        }
    }
}
