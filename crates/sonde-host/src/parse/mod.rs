//! The text of each /proc and /sys file this crate reads, parsed into
//! plain values. Pure: no I/O, so each parser is tested on fixture text.
//!
//! Every parser skips a line it does not understand rather than fail: a
//! kernel that adds a column or a line must not cost the other values.

/// One CPU's line of `/proc/stat`, in clock ticks (`USER_HZ`). Guest
/// time is already inside `user` and `nice` (proc(5)), so it is not
/// added again.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTicks {
    /// `user`.
    pub user: u64,
    /// `nice`.
    pub nice: u64,
    /// `system`.
    pub system: u64,
    /// `idle`.
    pub idle: u64,
    /// `iowait`.
    pub wait: u64,
    /// `irq`.
    pub interrupt: u64,
    /// `softirq`.
    pub softirq: u64,
    /// `steal`.
    pub steal: u64,
}

impl CpuTicks {
    /// Each field with the `state` attribute OpenTelemetry's hostmetrics
    /// gives it.
    pub fn states(&self) -> [(&'static str, u64); 8] {
        [
            ("user", self.user),
            ("nice", self.nice),
            ("system", self.system),
            ("idle", self.idle),
            ("wait", self.wait),
            ("interrupt", self.interrupt),
            ("softirq", self.softirq),
            ("steal", self.steal),
        ]
    }
}

/// The per-CPU lines of `/proc/stat` (`cpu0`, `cpu1`, ...; not the
/// `cpu` total), as (cpu name, ticks).
pub fn cpu_stat(text: &str) -> Vec<(&str, CpuTicks)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let name = f.next()?;
            if name.len() <= 3 || !name.starts_with("cpu") {
                return None;
            }
            let mut n = || f.next().and_then(|v| v.parse::<u64>().ok());
            let t = CpuTicks {
                user: n()?,
                nice: n()?,
                system: n()?,
                idle: n()?,
                wait: n().unwrap_or(0),
                interrupt: n().unwrap_or(0),
                softirq: n().unwrap_or(0),
                steal: n().unwrap_or(0),
            };
            Some((name, t))
        })
        .collect()
}

/// `/proc/loadavg`: the 1, 5 and 15 minute load averages.
pub fn loadavg(text: &str) -> Option<[f64; 3]> {
    let mut f = text.split_ascii_whitespace();
    let mut n = || f.next().and_then(|v| v.parse::<f64>().ok());
    Some([n()?, n()?, n()?])
}

/// The value of `key` in `/proc/meminfo`-style text (`Key:   123 kB`),
/// in bytes when the line says `kB`.
pub fn meminfo_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let mut f = rest.split_ascii_whitespace();
        let v: u64 = f.next()?.parse().ok()?;
        Some(if f.next() == Some("kB") { v * 1024 } else { v })
    })
}

/// What `/proc/meminfo` says of memory and swap, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Meminfo {
    /// `MemTotal`.
    pub total: u64,
    /// `MemFree`.
    pub free: u64,
    /// `MemAvailable`.
    pub available: u64,
    /// `Buffers`.
    pub buffers: u64,
    /// `Cached`.
    pub cached: u64,
    /// `SReclaimable`.
    pub slab_reclaimable: u64,
    /// `SUnreclaim`.
    pub slab_unreclaimable: u64,
    /// `SwapTotal`.
    pub swap_total: u64,
    /// `SwapFree`.
    pub swap_free: u64,
}

impl Meminfo {
    /// Memory in use: what is neither free, nor buffers, nor page cache,
    /// nor reclaimable slab (as `free(1)` and OpenTelemetry's hostmetrics
    /// count it); 0 rather than negative.
    pub fn used(&self) -> u64 {
        self.total
            .saturating_sub(self.free)
            .saturating_sub(self.buffers)
            .saturating_sub(self.cached)
            .saturating_sub(self.slab_reclaimable)
    }
}

/// Parses `/proc/meminfo`; `None` without `MemTotal`.
pub fn meminfo(text: &str) -> Option<Meminfo> {
    let v = |k| meminfo_value(text, k).unwrap_or(0);
    Some(Meminfo {
        total: meminfo_value(text, "MemTotal")?,
        free: v("MemFree"),
        available: v("MemAvailable"),
        buffers: v("Buffers"),
        cached: v("Cached"),
        slab_reclaimable: v("SReclaimable"),
        slab_unreclaimable: v("SUnreclaim"),
        swap_total: v("SwapTotal"),
        swap_free: v("SwapFree"),
    })
}

/// The value of `key` in `/proc/vmstat` (`key value` lines).
pub fn vmstat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// `total=` of the `some` and `full` lines of a `/proc/pressure/*` file,
/// in microseconds (`full` is `None` where the kernel has no such line,
/// as for CPU before 5.13).
pub fn pressure(text: &str) -> (Option<u64>, Option<u64>) {
    let total = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))?
            .split_ascii_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse()
            .ok()
    };
    (total("some "), total("full "))
}

/// One device's line of `/proc/diskstats` (Documentation/admin-guide/
/// iostats.rst). Sectors are 512 bytes whatever the device's own sector
/// size.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DiskStats {
    /// Reads completed.
    pub reads: u64,
    /// Bytes read (sectors read × 512).
    pub read_bytes: u64,
    /// Milliseconds spent reading.
    pub read_ms: u64,
    /// Writes completed.
    pub writes: u64,
    /// Bytes written (sectors written × 512).
    pub write_bytes: u64,
    /// Milliseconds spent writing.
    pub write_ms: u64,
    /// Milliseconds the device had I/O in flight.
    pub io_ms: u64,
}

/// The devices of `/proc/diskstats` worth reporting, as (name, stats):
/// whole disks and device-mapper and md devices, not partitions (their
/// I/O is their disk's already), loop, ram or zram devices, nor devices
/// that never did any I/O.
pub fn diskstats(text: &str) -> Vec<(&str, DiskStats)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let _major = f.next()?;
            let _minor = f.next()?;
            let name = f.next()?;
            let v: Vec<u64> = f.take(10).map_while(|v| v.parse().ok()).collect();
            if v.len() < 10 || !reported_disk(name) {
                return None;
            }
            let s = DiskStats {
                reads: v[0],
                read_bytes: v[2].saturating_mul(512),
                read_ms: v[3],
                writes: v[4],
                write_bytes: v[6].saturating_mul(512),
                write_ms: v[7],
                io_ms: v[9],
            };
            (s.reads != 0 || s.writes != 0).then_some((name, s))
        })
        .collect()
}

/// Whether a block device is a disk to report: not loop, ram, zram or
/// floppy devices, and not a partition (`sda1`, `vda2`, `nvme0n1p1`,
/// `mmcblk0p1`).
pub fn reported_disk(name: &str) -> bool {
    let skip = ["loop", "ram", "zram", "fd"];
    if skip.iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }) {
        return false;
    }
    let trailing = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let stem = &name[..name.len() - trailing];
    if trailing > 0 {
        // nvme0n1p2, mmcblk0p1: a `p` between digits.
        if let Some(before) = stem.strip_suffix('p') {
            if before.ends_with(|c: char| c.is_ascii_digit())
                && (before.starts_with("nvme") || before.starts_with("mmcblk"))
            {
                return false;
            }
        }
        // sda1, vdb3, xvda1, hdc2: letters after a two-letter kind.
        for kind in ["sd", "vd", "hd", "xvd"] {
            if let Some(letters) = stem.strip_prefix(kind) {
                if !letters.is_empty() && letters.bytes().all(|b| b.is_ascii_lowercase()) {
                    return false;
                }
            }
        }
    }
    true
}

/// One interface's line of `/proc/net/dev`, received then transmitted.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NetDev {
    /// Bytes, packets, errors and drops received.
    pub receive: [u64; 4],
    /// Bytes, packets, errors and drops transmitted.
    pub transmit: [u64; 4],
}

/// The interfaces of `/proc/net/dev`, as (name, counters).
pub fn net_dev(text: &str) -> Vec<(&str, NetDev)> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let v: Vec<u64> = rest
                .split_ascii_whitespace()
                .map_while(|v| v.parse().ok())
                .collect();
            if v.len() < 16 {
                return None;
            }
            Some((
                name.trim(),
                NetDev {
                    receive: [v[0], v[1], v[2], v[3]],
                    transmit: [v[8], v[9], v[10], v[11]],
                },
            ))
        })
        .collect()
}

/// The TCP states of include/net/tcp_states.h, by number, as
/// OpenTelemetry's hostmetrics names them.
pub const TCP_STATES: [&str; 12] = [
    "ESTABLISHED",
    "SYN_SENT",
    "SYN_RECV",
    "FIN_WAIT_1",
    "FIN_WAIT_2",
    "TIME_WAIT",
    "CLOSE",
    "CLOSE_WAIT",
    "LAST_ACK",
    "LISTEN",
    "CLOSING",
    "NEW_SYN_RECV",
];

/// Adds the sockets of `/proc/net/tcp` or `/proc/net/tcp6` to `counts`,
/// by state (`counts[i]` for [`TCP_STATES`]`[i]`): the fourth column,
/// `st`, in hexadecimal from 1.
pub fn tcp_states(text: &str, counts: &mut [u64; 12]) {
    for l in text.lines().skip(1) {
        let Some(st) = l.split_ascii_whitespace().nth(3) else {
            continue;
        };
        if let Ok(n) = u8::from_str_radix(st, 16) {
            if (1..=12).contains(&n) {
                counts[usize::from(n - 1)] += 1;
            }
        }
    }
}

/// What `/proc/PID/stat` says of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcStat<'a> {
    /// The command name (`comm`, at most 15 bytes), between the
    /// parentheses.
    pub comm: &'a str,
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
    /// When the process started, in clock ticks since boot: with the pid,
    /// what tells a process from a later one given the same pid.
    pub start_ticks: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

/// Parses `/proc/PID/stat`. The name may hold spaces and parentheses, so
/// it ends at the last `)`; the fields after it are counted from there.
pub fn proc_stat(text: &str) -> Option<ProcStat<'_>> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?;
    // From field 3 (state) on: utime is field 14, stime 15, starttime 22,
    // rss 24 (proc(5)), so indices 11, 12, 19 and 21 here.
    let f: Vec<&str> = text[close + 1..]
        .split_ascii_whitespace()
        .take(22)
        .collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        comm,
        cpu_ticks: n(11)? + n(12)?,
        start_ticks: n(19)?,
        rss_pages: n(21)?,
    })
}

/// A mount of `/proc/self/mounts`: device, mount point, type. The kernel
/// writes a space, tab, newline or backslash in a path as an octal
/// escape (`\040`), undone here.
pub fn mounts(text: &str) -> Vec<(String, String, &str)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let device = unescape(f.next()?);
            let point = unescape(f.next()?);
            let kind = f.next()?;
            Some((device, point, kind))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Filesystem types that hold no disk space of their own (the kernel's
/// views, cgroups, and others' mounts): not reported. `tmpfs` is
/// reported: a full `/run` or `/dev/shm` is a real outage.
pub const PSEUDO_FILESYSTEMS: &[&str] = &[
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "fusectl",
    "hugetlbfs",
    "mqueue",
    "nsfs",
    "overlay",
    "proc",
    "pstore",
    "rpc_pipefs",
    "securityfs",
    "selinuxfs",
    "squashfs",
    "sysfs",
    "tracefs",
];

/// Whether a mount is reported: not a [`PSEUDO_FILESYSTEMS`] type, and
/// not under `/proc`, `/sys` or `/dev` (bind mounts of the kernel's
/// views) nor a container runtime's layers.
pub fn reported_mount(point: &str, kind: &str) -> bool {
    if PSEUDO_FILESYSTEMS.contains(&kind) {
        return false;
    }
    let under = |dir: &str| point == dir || point.starts_with(&format!("{dir}/"));
    !(under("/proc")
        || under("/sys")
        || under("/dev")
        || point.starts_with("/var/lib/docker/")
        || point.starts_with("/var/lib/containers/storage/")
        || point.starts_with("/run/containerd/"))
}

/// The read and written bytes of a cgroup's `io.stat`, summed over its
/// devices (`MAJ:MIN rbytes=.. wbytes=.. ...` lines).
pub fn cgroup_io(text: &str) -> (u64, u64) {
    let (mut r, mut w) = (0u64, 0u64);
    for f in text.split_ascii_whitespace() {
        if let Some(v) = f.strip_prefix("rbytes=") {
            r = r.saturating_add(v.parse().unwrap_or(0));
        } else if let Some(v) = f.strip_prefix("wbytes=") {
            w = w.saturating_add(v.parse().unwrap_or(0));
        }
    }
    (r, w)
}

/// `usage_usec` of a cgroup's `cpu.stat`, in microseconds.
pub fn cgroup_cpu_usec(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests;
