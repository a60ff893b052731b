//! The Rust client (`sonde-client`) against the real agent, over unixgram
//! and UDP: what it emits is what the file sink reports.

mod common;

use std::time::Duration;

use common::*;
use sonde_client::{Client, Options};

fn emit_every_type(c: &Client) {
    for _ in 0..10 {
        c.counter("hits", 1.0, &[("host", "a")]).unwrap();
    }
    c.rate_counter("bytes", 600.0, &[]).unwrap();
    c.meter("reqs", 30.0, &[]).unwrap();
    for v in 1..=100 {
        c.timer("latency", f64::from(v), &[("route", "/x")])
            .unwrap();
    }
    c.store("depth", 3.0, &[]).unwrap();
    c.store("depth", 7.0, &[]).unwrap();
    c.ts_store("daily", 42.0, 1_700_000_000, &[]).unwrap();
    c.histogram("size", 5.0, &[]).unwrap();
    c.histogram("size", 500.0, &[]).unwrap();
}

#[test]
fn the_rust_client_is_understood_over_unixgram_and_udp() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("metric.sock");
    let port = free_port();
    let mut agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{}\"\n\
             [[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{port}\"\n",
            sock.display()
        ),
    );
    for (prefix, address) in [
        ("gram", format!("unixgram://{}", sock.display())),
        ("udp", format!("udp://127.0.0.1:{port}")),
    ] {
        let c = Client::new(Options {
            address: Some(address),
            prefix: prefix.into(),
            ..Options::default()
        })
        .unwrap();
        emit_every_type(&c);
        c.close();
        assert_eq!((c.dropped(), c.send_errors()), (0, 0));
    }
    // Per client: 1 summed counter + rate + meter + 100 timers + 2 stores + ts + 2 histograms.
    let per_client = 1 + 1 + 1 + 100 + 2 + 1 + 2;
    wait_for("every point", Duration::from_secs(20), || {
        let text = agent.get("/metrics")?;
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with("sonde_receiver_points_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        (total >= f64::from(2 * per_client)).then_some(())
    });
    agent.stop();
    let p = agent.points();
    for prefix in ["gram", "udp"] {
        let one = |name: &str| {
            let v = named(&p, &format!("{prefix}.{name}"));
            assert_eq!(v.len(), 1, "{prefix}.{name}: {v:?}");
            v[0].clone()
        };
        assert_eq!(one("hits").1, 10.0);
        assert_eq!(one("hits").0, serde_json::json!({"host": "a"}));
        assert!(one("bytes").1 > 0.0);
        assert_eq!(one("reqs").1, 30.0);
        assert_eq!(one("latency.counter").1, 100.0);
        assert_eq!(one("latency.max").1, 100.0);
        assert_eq!(one("depth").1, 7.0);
        assert_eq!((one("daily").1, one("daily").2), (42.0, 1_700_000_000));
        assert_eq!(one("size.count").1, 2.0);
    }
}
