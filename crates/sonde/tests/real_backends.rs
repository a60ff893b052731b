//! The network sinks against the real servers users run: Prometheus
//! (remote write), InfluxDB 1.x, carbon and the OpenTelemetry Collector,
//! started on loopback by
//! tests/common/backends.rs. Values are read back through each server's own
//! query interface and compared with what the file sink wrote for the same
//! windows.
//!
//! The outage tests stop the backend, keep sending for several windows,
//! restart the agent once meanwhile, bring the backend back, and check
//! that every window arrives and that the sink delivered each point once
//! (the servers themselves hide duplicates: Prometheus and InfluxDB store
//! an identical resend once, so the sink's own counters are checked).

mod common;

use std::time::Duration;

use common::backends::{
    or_skip, unix_now, Carbon, Influx, OtelCollector, OtelKind, OtelLog, OtelPoint, Prometheus,
};
use common::*;

/// Fast retries, so that tests do not wait on the default backoff.
const FAST: &str =
    "max_batch_age = \"0s\"\nretry_min_backoff = \"50ms\"\nretry_max_backoff = \"300ms\"\n";

fn wait_window_boundary() {
    // Windows are 1 s: the next boundary is at most a second away.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    std::thread::sleep(Duration::from_millis(1050 - u64::from(now.subsec_millis())));
}

#[test]
fn remote_write_points_are_queryable_in_prometheus() {
    let Some(prom) = or_skip(Prometheus::start()) else {
        return;
    };
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"prometheus_remote_write\"\nurl = \"{}\"\n{FAST}",
            statsd_receiver(udp),
            prom.write_url()
        ),
    );
    udp_send(
        udp,
        b"rw.requests:3|c|#dc:x,path:/a\nrw.temp:21.5|g|#dc:x\nrw.lat:10|ms\nrw.lat:30|ms\n",
    );
    let file = wait_for(
        "the window in the file sink",
        Duration::from_secs(10),
        || {
            let p = agent.points();
            (named(&p, "rw.lat.pct99").len() == 1).then_some(p)
        },
    );
    let at = unix_now() as f64 + 1.0;
    for (name, prom_name) in [
        ("rw.requests", "rw_requests"),
        ("rw.temp", "rw_temp"),
        ("rw.lat.max", "rw_lat_max"),
        ("rw.lat.pct99", "rw_lat_pct99"),
    ] {
        let (tags, value, ts) = named(&file, name)[0].clone();
        let got = wait_for(prom_name, Duration::from_secs(10), || {
            let s = prom.samples(prom_name, 600, at);
            (!s.is_empty()).then_some(s)
        });
        assert_eq!(got.len(), 1, "{prom_name}: {got:?}");
        let (labels, samples) = &got[0];
        assert_eq!(samples, &vec![(ts * 1000, value)], "{prom_name}");
        assert_eq!(labels["__name__"], prom_name);
        for (k, v) in tags.as_object().unwrap() {
            assert_eq!(
                labels[k.as_str()],
                v.as_str().unwrap(),
                "{prom_name} label {k}"
            );
        }
    }
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    assert_eq!(
        m("sonde_sink_failures_total{sink=\"prometheus_remote_write\",reason=\"http_4xx\"}"),
        0.0
    );
}

/// A restart inside a window splits it in two: the stopping run flushes the
/// first part stamped with the window's start, the next run stamps its part
/// with the time it started receiving. Prometheus refuses a second,
/// different value at one timestamp, so both parts must carry their own.
#[test]
fn a_window_split_by_a_restart_keeps_both_parts_in_prometheus() {
    let Some(prom) = or_skip(Prometheus::start()) else {
        return;
    };
    const WINDOW: u64 = 10;
    let udp = free_port();
    let mut agent = Agent::start(
        &format!("{WINDOW}s"),
        &format!(
            "{}[[sinks]]\ntype = \"prometheus_remote_write\"\nurl = \"{}\"\n{FAST}",
            statsd_receiver(udp),
            prom.write_url()
        ),
    );
    let received = |a: &Agent| {
        a.metric(&format!(
            "sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{udp}\",protocol=\"statsd\"}}"
        ))
        .unwrap_or(0.0)
    };
    // Begin early in a window after the run's first (which is stamped
    // with the run's start), so that the stop and the start both fall
    // inside it (a debug build starts in well under a second).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let phase =
        Duration::from_nanos((now.as_nanos() % (u128::from(WINDOW) * 1_000_000_000)) as u64);
    std::thread::sleep(Duration::from_secs(WINDOW) - phase + Duration::from_millis(300));
    udp_send(udp, b"split.n:3|c\n");
    wait_for("the first part received", Duration::from_secs(5), || {
        (received(&agent) >= 1.0).then_some(())
    });
    agent.stop();
    agent.start_again();
    udp_send(udp, b"split.n:4|c\n");
    wait_for("the second part received", Duration::from_secs(5), || {
        (received(&agent) >= 1.0).then_some(())
    });
    // The second part arrives when its window closes.
    let parts = wait_for(
        "both parts in the file sink",
        Duration::from_secs(WINDOW + 10),
        || {
            let p = named(&agent.points(), "split.n");
            (p.len() == 2).then_some(p)
        },
    );
    let (first, second) = ((parts[0].2, parts[0].1), (parts[1].2, parts[1].1));
    let window = i64::try_from(WINDOW).unwrap();
    assert_eq!(
        first.0 % window,
        0,
        "the first part keeps the window's start"
    );
    assert!(
        second.0 > first.0 && second.0 < first.0 + window,
        "the part after the restart is stamped inside the same window, after its start: {parts:?}"
    );
    let want = vec![(first.0 * 1000, 3.0), (second.0 * 1000, 4.0)];
    let got = wait_for("both parts in Prometheus", Duration::from_secs(10), || {
        let s = prom.samples("split_n", 600, unix_now() as f64 + 1.0);
        (s.len() == 1 && s[0].1.len() == 2).then_some(s)
    });
    assert_eq!(got[0].1, want);
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    assert_eq!(
        m("sonde_sink_failures_total{sink=\"prometheus_remote_write\",reason=\"http_4xx\"}"),
        0.0
    );
    assert_eq!(
        m("sonde_sink_dropped_points_total{sink=\"prometheus_remote_write\",reason=\"rejected\"}"),
        0.0
    );
}

#[test]
fn influxdb_points_are_queryable_in_influxdb() {
    let Some(influx) = or_skip(Influx::start()) else {
        return;
    };
    influx.create_db("sonde");
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"influxdb\"\nurl = \"{}\"\ndatabase = \"sonde\"\n{FAST}",
            statsd_receiver(udp),
            influx.url()
        ),
    );
    udp_send(
        udp,
        b"in.requests:3|c|#dc:x,path:/a b\nin.temp:21.5|g\nin.lat:10|ms\n",
    );
    let file = wait_for(
        "the window in the file sink",
        Duration::from_secs(10),
        || {
            let p = agent.points();
            (named(&p, "in.lat.pct99").len() == 1).then_some(p)
        },
    );
    for name in ["in.requests", "in.temp", "in.lat.pct99"] {
        let (tags, value, ts) = named(&file, name)[0].clone();
        let got = wait_for(name, Duration::from_secs(10), || {
            let v = influx.series_values("sonde", name);
            (!v.is_empty()).then_some(v)
        });
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        assert_eq!((got[0].0, got[0].2), (ts, value), "{name}");
        for (k, v) in tags.as_object().unwrap() {
            assert_eq!(got[0].1[k.as_str()], v.as_str().unwrap(), "{name} tag {k}");
        }
    }
    // Compressed with gzip, InfluxDB 1.x's only encoding.
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    let (raw, sent) = (
        m("sonde_sink_bytes_total{sink=\"influxdb\"}"),
        m("sonde_sink_sent_bytes_total{sink=\"influxdb\"}"),
    );
    assert!(sent > 0.0 && sent != raw, "raw {raw} sent {sent}");
}

#[test]
fn graphite_points_land_in_carbon_with_their_tags() {
    let Some(carbon) = or_skip(Carbon::start()) else {
        return;
    };
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"graphite\"\naddress = \"{}\"\n{FAST}",
            statsd_receiver(udp),
            carbon.address()
        ),
    );
    udp_send(udp, b"gr.requests:3|c|#dc:x,path:/a\ngr.plain:7|c\n");
    let file = wait_for(
        "the window in the file sink",
        Duration::from_secs(10),
        || {
            let p = agent.points();
            (named(&p, "gr.plain").len() == 1).then_some(p)
        },
    );
    for (name, metric) in [
        ("gr.requests", "gr.requests;dc=x;path=/a"),
        ("gr.plain", "gr.plain"),
    ] {
        let (_, value, ts) = named(&file, name)[0].clone();
        let got = wait_for(metric, Duration::from_secs(15), || {
            let d = carbon.datapoints(metric, ts - 60, unix_now() + 1);
            (!d.is_empty()).then_some(d)
        });
        // Whisper keeps one value per 10 s slot: the window's.
        assert_eq!(got, vec![(ts - ts % 10, value)], "{metric}");
    }
}

/// One file-sink point and the collector's copies of it (same name,
/// timestamp and attributes = tags).
fn otel_copies<'a>(otel: &'a [OtelPoint], name: &str, tags: &Json, ts: i64) -> Vec<&'a OtelPoint> {
    let tags: common::backends::Labels = tags
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    otel.iter()
        .filter(|p| p.name == name && p.unix_secs == ts && p.attributes == tags)
        .collect()
}

/// Waits until the collector has received every point of `file` whose name
/// passes `wanted`, and checks each arrived once with the file sink's value
/// (to the six decimals the debug exporter prints). Returns what the
/// collector had.
fn wait_otel_matches_file(
    col: &OtelCollector,
    file: &[Json],
    wanted: impl Fn(&str) -> bool,
) -> Vec<OtelPoint> {
    let want: Vec<(String, Json, f64, i64)> = file
        .iter()
        .filter(|p| wanted(p["name"].as_str().unwrap()))
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["tags"].clone(),
                p["value"].as_f64().unwrap(),
                p["timestamp"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(!want.is_empty());
    let otel = wait_for(
        "the file sink's points at the collector",
        Duration::from_secs(10),
        || {
            let otel = col.points();
            want.iter()
                .all(|(name, tags, _, ts)| !otel_copies(&otel, name, tags, *ts).is_empty())
                .then_some(otel)
        },
    );
    for (name, tags, value, ts) in &want {
        let copies = otel_copies(&otel, name, tags, *ts);
        assert_eq!(copies.len(), 1, "{name} {tags} at {ts}: {copies:?}");
        assert_eq!(
            format!("{:.6}", copies[0].value),
            format!("{value:.6}"),
            "{name} {tags} at {ts}"
        );
    }
    otel
}

#[test]
fn otlp_points_reach_the_opentelemetry_collector() {
    let Some(col) = or_skip(OtelCollector::start()) else {
        return;
    };
    let (udp, mp) = (free_port(), free_port());
    // The default compression, gzip.
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:{mp}\"\n\
             [[sinks]]\ntype = \"otlp_http\"\nurl = \"{}\"\n{FAST}",
            statsd_receiver(udp),
            col.metrics_url()
        ),
    );
    udp_send(
        udp,
        b"ot.requests:3|c|#dc:x,path:/a\not.temp:21.5|g|#dc:x\not.lat:10|ms|#dc:x\not.lat:30|ms|#dc:x\n",
    );
    udp_send(
        mp,
        &msgpack_message("counter", "ot.total", "5", "dc=x|host=a", ""),
    );
    let file = wait_for(
        "the window in the file sink",
        Duration::from_secs(10),
        || {
            let p = agent.points();
            (named(&p, "ot.lat.pct99").len() == 1 && !named(&p, "ot.total").is_empty()).then_some(p)
        },
    );
    // Counter, gauge, all ten timer outputs and the msgpack running total.
    assert_eq!(
        file.iter()
            .filter(|p| p["name"].as_str().unwrap().starts_with("ot.lat."))
            .count(),
        10
    );
    let otel = wait_otel_matches_file(&col, &file, |n| n.starts_with("ot."));
    for p in otel.iter().filter(|p| p.name.starts_with("ot.")) {
        if p.name == "ot.total" {
            // A running total: a monotonic cumulative Sum.
            assert_eq!(
                (p.kind, p.monotonic, p.temporality.as_str()),
                (OtelKind::Sum, true, "Cumulative"),
                "{p:?}"
            );
        } else {
            // StatsD counters are per-window sums; gauges and timer outputs
            // are values: all Gauges.
            assert_eq!(p.kind, OtelKind::Gauge, "{p:?}");
        }
    }
    // The running total grows across windows and each arrives as it is.
    udp_send(
        mp,
        &msgpack_message("counter", "ot.total", "2", "dc=x|host=a", ""),
    );
    let file = wait_for("the total of 7", Duration::from_secs(10), || {
        let p = agent.points();
        named(&p, "ot.total")
            .iter()
            .any(|(_, v, _)| *v == 7.0)
            .then_some(p)
    });
    wait_otel_matches_file(&col, &file, |n| n == "ot.total");

    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    for reason in [
        "connect", "timeout", "http_429", "http_5xx", "http_4xx", "http_413", "io", "encode",
    ] {
        assert_eq!(
            m(&format!(
                "sonde_sink_failures_total{{sink=\"otlp_http\",reason=\"{reason}\"}}"
            )),
            0.0,
            "{reason}"
        );
    }
    let (raw, sent) = (
        m("sonde_sink_bytes_total{sink=\"otlp_http\"}"),
        m("sonde_sink_sent_bytes_total{sink=\"otlp_http\"}"),
    );
    assert!(sent > 0.0 && sent != raw, "raw {raw} sent {sent}");
}

#[test]
fn otlp_zstd_is_accepted_by_the_opentelemetry_collector() {
    let Some(col) = or_skip(OtelCollector::start()) else {
        return;
    };
    let udp = free_port();
    let agent = Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"otlp_http\"\nurl = \"{}\"\ncompression = \"zstd\"\n{FAST}",
            statsd_receiver(udp),
            col.metrics_url()
        ),
    );
    udp_send(udp, b"oz.requests:3|c|#dc:x\noz.temp:21.5|g|#dc:x\n");
    let file = wait_for(
        "the window in the file sink",
        Duration::from_secs(10),
        || {
            let p = agent.points();
            (!named(&p, "oz.requests").is_empty()).then_some(p)
        },
    );
    wait_otel_matches_file(&col, &file, |n| n.starts_with("oz."));
    let m = |s: &str| agent.metric(s).unwrap_or(-1.0);
    let (raw, sent) = (
        m("sonde_sink_bytes_total{sink=\"otlp_http\"}"),
        m("sonde_sink_sent_bytes_total{sink=\"otlp_http\"}"),
    );
    assert!(sent > 0.0 && sent != raw, "raw {raw} sent {sent}");
    assert_eq!(
        m("sonde_sink_failures_total{sink=\"otlp_http\",reason=\"http_4xx\"}"),
        0.0
    );
}

/// The outage scenario, for one durable sink. `sink` is its TOML (with a
/// disk buffer); `stop`/`start` take the backend down and up; `arrived`
/// reads back (timestamp, value) of the counter `o.n`.
fn outage(
    sink: &str,
    name: &str,
    mut stop: impl FnMut(),
    mut start: impl FnMut(),
    arrived: impl Fn() -> Vec<(i64, f64)>,
) {
    let udp = free_port();
    let mut agent = Agent::start("1s", &format!("{}{sink}{FAST}", statsd_receiver(udp)));
    let m = |a: &Agent, s: &str| a.metric(s).unwrap_or(-1.0);
    let points = |a: &Agent| m(a, &format!("sonde_sink_points_total{{sink=\"{name}\"}}"));
    let queued = |a: &Agent| m(a, &format!("sonde_sink_queue_batches{{sink=\"{name}\"}}"));
    let mut n = 0u32;
    let mut send_for = |windows: i64| {
        let until = unix_now() + windows;
        while unix_now() < until {
            n += 1;
            udp_send(udp, format!("o.n:{n}|c\n").as_bytes());
            std::thread::sleep(Duration::from_millis(150));
        }
    };
    // Up: two windows go straight through.
    send_for(2);
    wait_for(
        "the first windows delivered",
        Duration::from_secs(10),
        || (points(&agent) >= 2.0).then_some(()),
    );
    // Down: three more windows queue on disk.
    stop();
    send_for(3);
    wait_for("windows queued", Duration::from_secs(10), || {
        (queued(&agent) >= 2.0).then_some(())
    });
    // No data in the window the stop closes early, so that the restarted
    // agent never sends a second point for the same window.
    wait_window_boundary();
    wait_window_boundary();
    let delivered_before = points(&agent);
    agent.stop();
    let produced_before = agent.points().len();
    agent.start_again();
    wait_window_boundary();
    send_for(2);
    wait_window_boundary();
    wait_window_boundary();
    // Up again: everything arrives.
    start();
    let want: Vec<(i64, f64)> = {
        let mut w: Vec<(i64, f64)> = named(&agent.points(), "o.n")
            .into_iter()
            .map(|(_, v, ts)| (ts, v))
            .collect();
        w.sort_by(|a, b| a.partial_cmp(b).unwrap());
        w
    };
    assert!(want.len() >= 6, "{want:?}");
    wait_eq(
        "every window at the backend",
        Duration::from_secs(30),
        || {
            let mut got = arrived();
            got.sort_by(|a, b| a.partial_cmp(b).unwrap());
            (got, want.clone())
        },
        |_| true,
    );
    // Delivered exactly once: what both runs delivered is what both
    // produced (the file sink saw every point the flusher produced).
    let produced = agent.points().len() as f64;
    wait_for("delivered = produced", Duration::from_secs(10), || {
        (delivered_before + points(&agent) == produced).then_some(())
    });
    assert!(agent
        .stderr()
        .contains("disk buffer kept requests from the last run"));
    assert!(produced_before > 0);
    for reason in [
        "queue_full",
        "buffer_full",
        "rejected",
        "shutdown",
        "buffer_error",
    ] {
        assert_eq!(
            m(
                &agent,
                &format!("sonde_sink_dropped_points_total{{sink=\"{name}\",reason=\"{reason}\"}}")
            ),
            0.0,
            "{reason}"
        );
    }
}

#[test]
fn remote_write_keeps_every_window_through_an_outage_and_a_restart() {
    let Some(prom) = or_skip(Prometheus::start()) else {
        return;
    };
    let prom = std::cell::RefCell::new(prom);
    let sink = format!(
        "[[sinks]]\ntype = \"prometheus_remote_write\"\nurl = \"{}\"\nbuffer = {{ type = \"disk\", max_size = \"64MiB\" }}\n",
        prom.borrow().write_url()
    );
    outage(
        &sink,
        "prometheus_remote_write",
        || prom.borrow_mut().stop(),
        || prom.borrow_mut().restart(),
        || {
            let p = prom.borrow();
            p.samples("o_n", 600, unix_now() as f64 + 1.0)
                .into_iter()
                .flat_map(|(_, s)| s)
                .map(|(ms, v)| (ms / 1000, v))
                .collect()
        },
    );
}

#[test]
fn influxdb_keeps_every_window_through_an_outage_and_a_restart() {
    let Some(influx) = or_skip(Influx::start()) else {
        return;
    };
    influx.create_db("sonde");
    let influx = std::cell::RefCell::new(influx);
    let sink = format!(
        "[[sinks]]\ntype = \"influxdb\"\nurl = \"{}\"\ndatabase = \"sonde\"\nbuffer = {{ type = \"disk\", max_size = \"64MiB\" }}\n",
        influx.borrow().url()
    );
    outage(
        &sink,
        "influxdb",
        || influx.borrow_mut().stop(),
        || influx.borrow_mut().restart(),
        || {
            influx
                .borrow()
                .series_values("sonde", "o.n")
                .into_iter()
                .map(|(ts, _, v)| (ts, v))
                .collect()
        },
    );
}

#[test]
fn otlp_keeps_every_window_through_an_outage_and_a_restart() {
    let Some(col) = or_skip(OtelCollector::start()) else {
        return;
    };
    let col = std::cell::RefCell::new(col);
    let sink = format!(
        "[[sinks]]\ntype = \"otlp_http\"\nurl = \"{}\"\nbuffer = {{ type = \"disk\", max_size = \"64MiB\" }}\n",
        col.borrow().metrics_url()
    );
    outage(
        &sink,
        "otlp_http",
        || col.borrow_mut().stop(),
        || col.borrow_mut().restart(),
        || {
            // The debug exporter prints six decimals; the counter's values
            // are integers, so they read back exactly.
            col.borrow()
                .points()
                .into_iter()
                .filter(|p| p.name == "o.n")
                .map(|p| (p.unix_secs, p.value))
                .collect()
        },
    );
}

/// A log source over `otlp_http` into the real Collector: every record
/// once, in order, its multiline body whole, with the resource and record
/// attributes the docs promise; the logs endpoint found beside the
/// metrics one.
#[test]
fn otlp_log_records_reach_the_opentelemetry_collector() {
    let Some(col) = or_skip(OtelCollector::start()) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"web-1\"\n\n\
             [[logs]]\nname = \"app\"\ninclude = [\"{}/*.log\"]\nfields = {{ \"service.name\" = \"api\" }}\n\
             [logs.multiline]\nstart = '^line'\ntimeout = \"200ms\"\n\n\
             [[sinks]]\ntype = \"otlp_http\"\ninputs = [\"app\"]\nurl = \"{}\"\nmax_batch_points = 100\n",
            dir.join("data").display(),
            logs.path().display(),
            col.metrics_url()
        )
    });
    let mut text: String = (0..300).map(|n| format!("line {n:04}\n")).collect();
    text.push_str("line 0300 failed\n  at one\n\tat two\n");
    std::fs::write(&log, &text).unwrap();
    let got: Vec<OtelLog> = wait_for(
        "301 records in the collector",
        Duration::from_secs(20),
        || {
            let got = col.logs();
            (got.len() >= 301).then_some(got)
        },
    );
    let bodies: Vec<&str> = got.iter().map(|l| l.body.as_str()).collect();
    let mut want: Vec<String> = (0..300).map(|n| format!("line {n:04}")).collect();
    want.push("line 0300 failed\n  at one\n\tat two".into());
    assert_eq!(bodies, want, "every record once, in order");
    let last = got.last().unwrap();
    assert_eq!(last.resource["host.name"], "web-1");
    assert_eq!(last.resource["sonde.source"], "app");
    assert_eq!(last.resource["service.name"], "api");
    assert_eq!(last.attributes["log.file.path"], log.display().to_string());
    assert_eq!(last.attributes["log.file.name"], "app.log");
    assert_eq!(
        last.attributes["log.file.record_offset"],
        (text.len() - "line 0300 failed\n  at one\n\tat two\n".len()).to_string()
    );
    wait_for("every byte acknowledged", Duration::from_secs(10), || {
        (agent.metric("sonde_log_bytes_behind{source=\"app\"}") == Some(0.0)).then_some(())
    });
    assert_eq!(
        agent.metric("sonde_sink_records_total{sink=\"otlp_http\"}"),
        Some(301.0)
    );
}

/// A CRI log file over `otlp_http` into the real Collector: each record
/// joined from its pieces, its time the first piece's, its stream and pod
/// as OpenTelemetry's attributes; a malformed line as it is.
#[test]
fn otlp_container_records_carry_their_time_stream_and_pod() {
    let Some(col) = or_skip(OtelCollector::start()) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path().join("pods/shop_web-0_6f1c7a52/nginx");
    std::fs::create_dir_all(&dir).unwrap();
    let _agent = Agent::start_config(|admin, data| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n\
             [[logs]]\nname = \"pods\"\ninclude = [\"{}/pods/*/*/*.log\"]\nformat = \"cri\"\n\n\
             [[sinks]]\ntype = \"otlp_http\"\ninputs = [\"pods\"]\nurl = \"{}\"\n",
            data.join("data").display(),
            logs.path().display(),
            col.metrics_url()
        )
    });
    let long = "x".repeat(20_000);
    let text = format!(
        "2026-11-27T10:00:00.123456789Z stdout P {}\n\
         2026-11-27T11:00:00.5+01:00 stderr F boom\n\
         2026-11-27T10:00:00.200000000Z stdout F {}\n\
         not a cri line\n",
        &long[..16_384],
        &long[16_384..]
    );
    std::fs::write(dir.join("0.log"), text).unwrap();
    let got: Vec<OtelLog> = wait_for(
        "3 records in the collector",
        Duration::from_secs(20),
        || {
            let got = col.logs();
            (got.len() >= 3).then_some(got)
        },
    );
    let bodies: Vec<&str> = got.iter().map(|l| l.body.as_str()).collect();
    assert_eq!(bodies, [long.as_str(), "boom", "not a cri line"]);
    let times: Vec<&str> = got.iter().map(|l| l.timestamp.as_str()).collect();
    assert_eq!(
        times,
        [
            "2026-11-27 10:00:00.123456789 +0000 UTC",
            "2026-11-27 10:00:00.5 +0000 UTC",
            "1970-01-01 00:00:00 +0000 UTC"
        ]
    );
    let pod = [
        ("k8s.namespace.name", "shop"),
        ("k8s.pod.name", "web-0"),
        ("k8s.pod.uid", "6f1c7a52"),
        ("k8s.container.name", "nginx"),
    ];
    for (record, stream) in got.iter().zip([Some("stdout"), Some("stderr"), None]) {
        for (k, v) in pod {
            assert_eq!(record.attributes[k], v, "{k} of {:?}", record.body);
        }
        assert_eq!(
            record.attributes.get("log.iostream").map(String::as_str),
            stream
        );
        assert_eq!(record.attributes["log.file.name"], "0.log");
    }
}

/// Log records through the disk buffer of an `otlp_http` sink while the
/// real Collector is down: stored and acknowledged, kept across a kill of
/// the agent and the deletion of their file, delivered once when both
/// come back.
#[test]
fn otlp_log_records_wait_in_the_disk_buffer_while_the_collector_is_down() {
    let Some(mut col) = or_skip(OtelCollector::start()) else {
        return;
    };
    col.stop();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("app.log");
    let mut agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n\
             [[logs]]\nname = \"app\"\ninclude = [\"{}/*.log\"]\n\n\
             [[sinks]]\ntype = \"otlp_http\"\ninputs = [\"app\"]\nurl = \"{}\"\nmax_batch_points = 100\n\
             retry_min_backoff = \"50ms\"\nretry_max_backoff = \"200ms\"\n\
             buffer = {{ type = \"disk\", max_size = \"16MiB\" }}\n",
            dir.join("data").display(),
            logs.path().display(),
            col.metrics_url()
        )
    });
    let want: Vec<String> = (0..500).map(|n| format!("line {n:04}")).collect();
    std::fs::write(
        &log,
        want.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let m = |a: &Agent, s: &str| a.metric(s).unwrap_or(-1.0);
    wait_for("500 records stored", Duration::from_secs(20), || {
        (m(&agent, "sonde_sink_log_buffer_records{sink=\"otlp_http\"}") == 500.0
            && m(&agent, "sonde_log_bytes_behind{source=\"app\"}") == 0.0)
            .then_some(())
    });
    agent.kill();
    std::fs::remove_file(&log).unwrap();
    col.restart();
    agent.start_again();
    let got: Vec<OtelLog> = wait_for(
        "500 records in the collector",
        Duration::from_secs(20),
        || {
            let got = col.logs();
            (got.len() >= 500).then_some(got)
        },
    );
    let bodies: Vec<&str> = got.iter().map(|l| l.body.as_str()).collect();
    assert_eq!(bodies, want, "every record once, in order");
    wait_for("the buffer empty", Duration::from_secs(10), || {
        (m(&agent, "sonde_sink_log_buffer_records{sink=\"otlp_http\"}") == 0.0).then_some(())
    });
}

/// DogStatsD events and service checks over `otlp_http` into the real
/// Collector: each a record with its text as body, its own time and
/// severity, and its fields as attributes; a malformed one counted.
#[test]
fn dogstatsd_events_reach_the_opentelemetry_collector_as_log_records() {
    let Some(col) = or_skip(OtelCollector::start()) else {
        return;
    };
    let udp = free_port();
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"agent-1\"\n{}\
             [[sinks]]\ntype = \"blackhole\"\n\
             [[sinks]]\ntype = \"otlp_http\"\ninputs = [\"dogstatsd_events\"]\nurl = \"{}\"\n",
            dir.join("data").display(),
            statsd_receiver(udp),
            col.metrics_url()
        )
    });
    udp_send(
        udp,
        b"_e{11,16}:disk filled|/var at 99%\\nnow|d:1700000000|h:db-1|t:error|k:disk|#env:prod,team:st\n\
          ok.count:1|c\n_sc|redis.up|1|#env:prod|m:slow replies\n_e{30,1}:short|x",
    );
    let got: Vec<OtelLog> = wait_for(
        "two records in the collector",
        Duration::from_secs(20),
        || {
            let got = col.logs();
            (got.len() >= 2).then_some(got)
        },
    );
    assert_eq!(got.len(), 2, "{got:?}");
    let (event, check) = (&got[0], &got[1]);
    assert_eq!(event.body, "/var at 99%\nnow");
    assert_eq!(event.resource["host.name"], "agent-1");
    assert_eq!(event.resource["sonde.source"], "dogstatsd_events");
    assert_eq!(event.attributes["type"], "event");
    assert_eq!(event.attributes["title"], "disk filled");
    assert_eq!(event.attributes["alert_type"], "error");
    assert_eq!(event.attributes["priority"], "normal");
    assert_eq!(event.attributes["aggregation_key"], "disk");
    assert_eq!(event.attributes["host.name"], "db-1");
    assert!(event.attributes["tags"].contains("team:st"), "{event:?}");
    assert_eq!(check.body, "slow replies");
    assert_eq!(check.attributes["type"], "service_check");
    assert_eq!(check.attributes["check"], "redis.up");
    assert_eq!(check.attributes["status"], "warning");
    let log = col.log();
    assert!(
        log.contains("Timestamp: 2023-11-14 22:13:20 +0000 UTC"),
        "{log}"
    );
    assert!(
        log.contains("SeverityText: ERROR") && log.contains("SeverityText: WARN"),
        "{log}"
    );
    wait_for(
        "the malformed event counted",
        Duration::from_secs(10),
        || {
            (agent.metric(&format!(
            "sonde_receiver_dropped_total{{receiver=\"udp://127.0.0.1:{udp}\",protocol=\"statsd\",reason=\"malformed_event\"}}"
        )) == Some(1.0))
        .then_some(())
        },
    );
    assert_eq!(
        agent.metric("sonde_log_lines_read_total{source=\"dogstatsd_events\"}"),
        Some(2.0)
    );
}
