//! The CPU one collection of every group costs on this host: N
//! collections (default 200) of the real /proc and /sys, timed with the
//! thread's CPU clock. `cargo run --release -p sonde-host --example
//! collect_cost [N]`; docs/BENCHMARKS.md, "Host metrics".

use sonde_host::{Collector, Groups, Roots};
use sonde_metrics::input::Points;

fn thread_cpu() -> std::time::Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    std::time::Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

/// The CPU of `n` collections of `groups`, each, and the points each.
fn cost(groups: Groups, n: u32) -> (std::time::Duration, usize) {
    let mut c = Collector::new(groups, Roots::default());
    let mut out = Points::new();
    c.collect(&mut out);
    let start = thread_cpu();
    let mut points = 0;
    for _ in 0..n {
        out.clear();
        c.collect(&mut out);
        points += out.len();
    }
    ((thread_cpu() - start) / n, points / n as usize)
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let none = Groups {
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
    type Switch = fn(&mut Groups);
    let groups: [(&str, Switch); 11] = [
        ("cpu", |g| g.cpu = true),
        ("load", |g| g.load = true),
        ("memory", |g| g.memory = true),
        ("paging", |g| g.paging = true),
        ("pressure", |g| g.pressure = true),
        ("disk", |g| g.disk = true),
        ("filesystem", |g| g.filesystem = true),
        ("network", |g| g.network = true),
        ("tcp", |g| g.tcp = true),
        ("processes", |g| g.processes = true),
        ("containers", |g| g.containers = true),
    ];
    for (name, on) in groups {
        let mut g = none;
        on(&mut g);
        let (each, points) = cost(g, n);
        println!(
            "{name:>12}: {:8.3} ms of CPU, {points} points",
            each.as_secs_f64() * 1e3
        );
    }
    let (each, points) = cost(Groups::default(), n);
    println!(
        "{:>12}: {:8.3} ms of CPU, {points} points ({n} collections each)",
        "all",
        each.as_secs_f64() * 1e3
    );
}
