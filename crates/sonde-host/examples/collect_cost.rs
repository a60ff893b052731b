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

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let mut c = Collector::new(Groups::default(), Roots::default());
    let mut out = Points::new();
    c.collect(&mut out);
    let start = thread_cpu();
    let mut points = 0;
    for _ in 0..n {
        out.clear();
        c.collect(&mut out);
        points += out.len();
    }
    let each = (thread_cpu() - start) / n;
    println!(
        "{n} collections: {:.3} ms of CPU each, {} points each",
        each.as_secs_f64() * 1e3,
        points / n as usize
    );
}
