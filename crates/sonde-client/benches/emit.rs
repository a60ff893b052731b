//! What one emit costs the calling thread.
//!
//! A client sends to a loopback UDP socket that nobody reads (sends
//! succeed; the kernel discards what overflows), with an hour-long flush
//! interval. Each case emits in a timed loop and calls `flush()` untimed
//! every 10,000 emits, so the buffer never fills and no emit takes the drop
//! path: the figures are the emit path alone. Cases: a counter and a store
//! on one series, a counter cycling over 500 series (a hot loop over many
//! keys), and a timer, which is buffered per emit.
//!
//! ```sh
//! cargo bench -p sonde-client --bench emit
//! ```

use std::hint::black_box;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sonde_client::{Client, Options};

/// Emits between two untimed flushes: the default buffer size.
const BATCH: u64 = 10_000;

const TAGS: [(&str, &str); 3] = [("host", "web-17"), ("dc", "eu-west"), ("svc", "checkout")];

fn emit(c: &mut Criterion) {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let client = Client::new(Options {
        address: Some(format!("udp://{}", sink.local_addr().unwrap())),
        prefix: "bench".into(),
        buffer_size: usize::try_from(BATCH).unwrap(),
        flush_interval: Duration::from_secs(3600),
    })
    .unwrap();
    let series: Vec<String> = (0..500).map(|i| format!("requests.{i}")).collect();

    let mut group = c.benchmark_group("client/emit");
    group.throughput(Throughput::Elements(1));
    let mut case = |name: &str, f: &dyn Fn(&Client, u64)| {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut i = 0;
                while i < iters {
                    let n = BATCH.min(iters - i);
                    let start = Instant::now();
                    for k in i..i + n {
                        f(&client, k);
                    }
                    timed += start.elapsed();
                    client.flush();
                    i += n;
                }
                timed
            });
        });
    };
    case("counter_one_series", &|c, _| {
        c.counter("requests", black_box(1.0), &TAGS).unwrap();
    });
    case("counter_500_series", &|c, k| {
        let name = &series[usize::try_from(k % 500).unwrap()];
        c.counter(name, black_box(1.0), &TAGS).unwrap();
    });
    case("store_one_series", &|c, _| {
        c.store("depth", black_box(7.0), &TAGS).unwrap();
    });
    case("timer_one_series", &|c, _| {
        c.timer("latency", black_box(12.5), &TAGS).unwrap();
    });
    group.finish();
    assert_eq!(client.dropped(), 0, "an emit took the drop path");
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).sample_size(30);
    targets = emit
}
criterion_main!(benches);
