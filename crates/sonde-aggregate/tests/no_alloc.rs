//! Parsing a datagram and recording its points into series that already
//! exist allocates nothing: the per-point hot path is allocation free.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use sonde_aggregate::shard::PointBatch;
use sonde_aggregate::{AggregateConfig, Shard};
use sonde_proto::{msgpack, statsd, DropReason, Point, PointSink};

struct Counting;

thread_local! {
    /// Allocations made by this thread. Per thread because the test
    /// harness's own thread allocates now and then (its channel waits),
    /// which made a process-wide count fail under load.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the slot may be gone while a thread exits.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Records as the agent's receive path does: batches of `shard::BATCH` points
/// through `Shard::record_batch`, kept on the stack.
struct Record<'s, 'd> {
    shard: &'s mut Shard,
    recorded: &'s mut usize,
    pending: PointBatch<'d>,
}

impl<'s> Record<'s, '_> {
    fn new(shard: &'s mut Shard, recorded: &'s mut usize) -> Self {
        Record {
            shard,
            recorded,
            pending: PointBatch::default(),
        }
    }

    fn flush(&mut self) {
        let recorded = &mut *self.recorded;
        self.shard.record_batch(self.pending.points(), |_, r| {
            r.unwrap();
            *recorded += 1;
        });
        self.pending.clear();
    }
}

impl<'d> PointSink<'d> for Record<'_, 'd> {
    fn point(&mut self, p: &Point<'d>) {
        if self.pending.push(*p) {
            self.flush();
        }
    }
    fn drop(&mut self, reason: DropReason) {
        panic!("unexpected drop {reason:?}");
    }
}

/// Parses one input into `shard`; returns the points recorded.
fn feed(shard: &mut Shard, input: &[u8], msgpack: bool) -> usize {
    let mut recorded = 0;
    let mut rec = Record::new(shard, &mut recorded);
    if msgpack {
        msgpack::parse(input, &mut rec);
    } else {
        statsd::parse(input, &mut rec);
    }
    rec.flush();
    recorded
}

fn msgpack_bunch() -> Vec<u8> {
    let mut out = vec![0xdc, 0, 0];
    let mut n = 0u16;
    for (ty, name, value, tags) in [
        ("counter", "web.requests", "1", "host=a|dc=x|path=/api"),
        ("timer", "web.latency", "12.5", "dc=x|host=a"),
        ("store", "queue.depth", "3", ""),
        ("histogram", "size", "700", "k=v"),
        ("meter", "bytes", "1024", "host=a"),
    ] {
        for _ in 0..20 {
            rmp::encode::write_array_len(&mut out, 6).unwrap();
            for f in ["emit", ty, name, value, tags, ""] {
                rmp::encode::write_str(&mut out, f).unwrap();
            }
            n += 1;
        }
    }
    out[1..3].copy_from_slice(&n.to_be_bytes());
    out
}

const STATSD: &[u8] = b"api.hits:1|c|#env:prod,region:eu,series:s1\n\
api.hits:1|c|@0.5|#region:eu,env:prod,series:s1\n\
api.queue:5|g|#env:prod\napi.queue:+2|g|#env:prod\n\
api.ms:3:4:5|ms|#env:prod\napi.users:alice|s\napi.dist:9|d\n";

#[test]
fn a_warm_shard_records_known_series_without_allocating() {
    let bunch = msgpack_bunch();
    let mut shard = Shard::new(Arc::new(AggregateConfig::default()));
    let start = allocations();
    // Warm up: create the series and let every buffer reach its size. A
    // timer keeps up to `MAX_SAMPLES` raw samples a window, then starts its
    // bucket stores (one allocation a window, like the sketch itself);
    // `api.dist` gets one sample a pass, so warm up past that.
    for _ in 0..=sonde_aggregate::sketch::MAX_SAMPLES {
        feed(&mut shard, &bunch, true);
        feed(&mut shard, STATSD, false);
    }
    let before = allocations();
    // The counter is live: creating the series did allocate.
    assert!(before - start >= 9, "warm-up allocated {}", before - start);
    let mut points = 0;
    for _ in 0..100 {
        points += feed(&mut shard, &bunch, true);
        points += feed(&mut shard, STATSD, false);
    }
    let allocations = allocations() - before;
    assert_eq!(points, 100 * (100 + 9));
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for {points} points"
    );
}
