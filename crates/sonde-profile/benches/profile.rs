//! The profiler's cost per sample: unwinding (framehop over the copied
//! stack) and symbolising (blazesym, with a cold and a warm cache).
//!
//! The samples are real: the bench samples its own burner thread, which
//! sorts with glibc's `qsort` under a few levels of recursion, for one
//! second at 999 Hz, and replays the records. It needs perf-event
//! permission (root, CAP_PERFMON or perf_event_paranoid <= 0) and says so
//! otherwise. Figures: docs/BENCHMARKS.md, "The
//! profiler".

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sonde_profile::collect::Collector;
use sonde_profile::perf::Events;
use sonde_profile::record::{self, Record};
use sonde_profile::symbolize::Symbols;

extern "C" fn compare(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
    // SAFETY: qsort passes pointers to two elements of the u64 array below.
    let (a, b) = unsafe { (*(a as *const u64), *(b as *const u64)) };
    a.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .cmp(&b.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as libc::c_int
}

#[inline(never)]
fn sort_at_depth(depth: u32, data: &mut [u64]) {
    if depth == 0 {
        // SAFETY: data is a live, exclusive slice of u64 and compare reads
        // only elements of it.
        unsafe {
            libc::qsort(data.as_mut_ptr().cast(), data.len(), 8, Some(compare));
        }
    } else {
        sort_at_depth(black_box(depth - 1), data);
    }
}

/// One second of this process's samples, as record bytes in time order.
fn capture() -> Vec<Vec<u8>> {
    let stop = Arc::new(AtomicBool::new(false));
    let burner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut data: Vec<u64> = (0..50_000).collect();
            while !stop.load(Ordering::Relaxed) {
                sort_at_depth(4, &mut data);
                data.reverse();
            }
        })
    };
    let mut events = match Events::open(999) {
        Ok(e) => e,
        Err(e) => panic!("the profile bench samples the host: {e}"),
    };
    events.enable();
    let pid = std::process::id();
    let mut records = Vec::new();
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end {
        events.wait(100);
        events.drain_bytes(|bytes| match record::parse(bytes) {
            Some(Record::Sample(s)) if s.pid != pid => {}
            _ => records.push(bytes.to_vec()),
        });
    }
    events.disable();
    stop.store(true, Ordering::Relaxed);
    burner.join().unwrap();
    records
}

fn replay(collector: &mut Collector, records: &[Vec<u8>]) {
    for r in records {
        if let Some(r) = record::parse(r) {
            collector.record(r);
        }
    }
}

fn bench(c: &mut Criterion) {
    let records = capture();
    let samples = records
        .iter()
        .filter(|r| matches!(record::parse(r), Some(Record::Sample(_))))
        .count() as u64;
    let mut group = c.benchmark_group("profile");
    group.throughput(Throughput::Elements(samples));
    // The process table and modules are read at the first sample; the
    // bench measures the steady state after that.
    let mut collector = Collector::new();
    replay(&mut collector, &records);
    let (stacks, stats) = collector.take();
    eprintln!(
        "{samples} samples, {} distinct stacks, {:.1}% unwound to the end, {:.1} frames a stack",
        stacks.len(),
        stats.user_complete as f64 * 100.0 / stats.user.max(1) as f64,
        stacks
            .iter()
            .map(|((_, f), n)| f.len() as f64 * *n as f64)
            .sum::<f64>()
            / samples.max(1) as f64
    );
    group.bench_function("unwind_sample", |b| {
        b.iter(|| {
            replay(&mut collector, &records);
            black_box(collector.take());
        })
    });
    replay(&mut collector, &records);
    let (stacks, _) = collector.take();
    if std::env::var_os("SONDE_BENCH_ROOTS").is_some() {
        let p = Symbols::new().profile(collector.modules(), &stacks, 999, 0, 1);
        let mut roots: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &p.stacks {
            let names: Vec<&str> = s
                .frames
                .iter()
                .take(3)
                .map(|&f| p.function(f).name.as_str())
                .collect();
            *roots.entry(names.join(";")).or_default() += s.count;
        }
        eprintln!("stacks by their three outermost frames: {roots:#?}");
    }
    group.bench_function("symbolise_cold", |b| {
        b.iter_batched(
            Symbols::new,
            |mut symbols| black_box(symbols.profile(collector.modules(), &stacks, 999, 0, 1)),
            BatchSize::PerIteration,
        )
    });
    let mut symbols = Symbols::new();
    symbols.profile(collector.modules(), &stacks, 999, 0, 1);
    group.bench_function("symbolise_warm", |b| {
        b.iter(|| black_box(symbols.profile(collector.modules(), &stacks, 999, 0, 1)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
