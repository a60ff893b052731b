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
    // Per client: 1 summed counter + rate + meter + 100 timers + 1 store (the
    // last value) + ts + 2 histograms.
    let per_client = 1 + 1 + 1 + 100 + 1 + 1 + 2;
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

/// The sum of every receiver's `sonde_receiver_points_total` and
/// `sonde_receiver_dropped_total` lines on the agent's `/metrics`.
fn received_and_dropped(agent: &Agent) -> Option<(f64, f64)> {
    let text = agent.get("/metrics")?;
    let total = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Some((
        total("sonde_receiver_points_total{"),
        total("sonde_receiver_dropped_total{"),
    ))
}

#[test]
fn a_hot_loop_of_counters_over_500_series_loses_nothing() {
    // 20,000 increments over 500 series, as fast as a loop can emit them:
    // twice the default buffer of 10,000 entries, but only 500 series, so
    // every increment must be summed into its series' entry (sdk/SPEC.md,
    // Client behaviour). The hour-long interval sends everything in
    // close(), one message per series, so the agent's count of received
    // messages says when all of them have arrived.
    const SENT: usize = 20_000;
    const SERIES: usize = 500;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("metric.sock");
    let mut agent = Agent::start(
        "1h",
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{}\"\n",
            sock.display()
        ),
    );
    let c = Client::new(Options {
        address: Some(format!("unixgram://{}", sock.display())),
        prefix: "burst".into(),
        flush_interval: Duration::from_secs(3600),
        ..Options::default()
    })
    .unwrap();
    let names: Vec<String> = (0..SERIES).map(|i| format!("hits.{i}")).collect();
    for i in 0..SENT {
        c.counter(&names[i % SERIES], 1.0, &[("host", "a")])
            .unwrap();
    }
    c.close();
    assert_eq!(c.send_errors(), 0);
    let (_, agent_dropped) = wait_for("500 messages", Duration::from_secs(20), || {
        received_and_dropped(&agent).filter(|&(received, _)| received >= SERIES as f64)
    });
    assert_eq!(agent_dropped, 0.0, "the agent dropped input");
    agent.stop();

    let points = agent.points();
    let received: f64 = names
        .iter()
        .map(|name| {
            // A counter reports its running total: the last point of the series.
            let p = named(&points, &format!("burst.{name}"));
            assert!(!p.is_empty(), "no point for burst.{name}");
            p[p.len() - 1].1
        })
        .sum();
    let dropped = c.dropped();
    assert_eq!(
        received + dropped as f64,
        SENT as f64,
        "received plus counted drops"
    );
    assert_eq!(dropped, 0, "drops");
}
