//! The backend harness (tests/common/backends.rs) against the real servers,
//! without sonde: what a test writes with each backend's own protocol comes
//! back through the harness's readers, also after a stop and restart.
//!
//! Needs the Debian packages `prometheus`, `influxdb` and `graphite-carbon`,
//! and the collector `scripts/build-otelcol.sh` builds; without them each
//! test prints why it is skipped, unless
//! `SONDE_REQUIRE_BACKENDS=1` makes that a failure.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::backends::{
    self, or_skip, unix_now, Carbon, Influx, Labels, OtelCollector, OtelKind, OtelPoint, Prometheus,
};
use common::wait_for;

// The remote-write 1.0 messages (prometheus/prompb field numbers), as the
// prometheus_remote_write sink's encoder defines them.
use sonde_encode::remote_write::prompb;

/// One series for a WriteRequest: labels (sorted, as the spec requires)
/// and (timestamp ms, value) samples.
fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> prompb::TimeSeries {
    let mut labels: Vec<prompb::Label> = labels
        .iter()
        .map(|(n, v)| prompb::Label {
            name: n.to_string(),
            value: v.to_string(),
        })
        .collect();
    labels.sort_by(|a, b| a.name.cmp(&b.name));
    prompb::TimeSeries {
        labels,
        samples: samples
            .iter()
            .map(|&(timestamp, value)| prompb::Sample { value, timestamp })
            .collect(),
    }
}

/// POSTs a snappy-compressed WriteRequest with the remote-write headers;
/// returns the status and body.
fn remote_write(url: &str, timeseries: Vec<prompb::TimeSeries>) -> (u16, String) {
    use prost::Message;
    let body = prompb::WriteRequest {
        timeseries,
        ..Default::default()
    }
    .encode_to_vec();
    let compressed = snap::raw::Encoder::new().compress_vec(&body).unwrap();
    let mut resp = backends::http()
        .post(url)
        .header("Content-Type", "application/x-protobuf")
        .header("Content-Encoding", "snappy")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .send(&compressed[..])
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Whole seconds, 10 s aligned, a few minutes back: inside Prometheus'
/// lookback and carbon's retention, never in the future.
fn base_secs() -> i64 {
    (unix_now() - 120) / 10 * 10
}

fn refused(address: &str) -> bool {
    TcpStream::connect(address).is_err()
}

#[test]
fn prometheus_receives_remote_write_and_returns_every_sample() {
    let Some(prom) = or_skip(Prometheus::start()) else {
        return;
    };
    let t = base_secs() * 1000;
    let (status, body) = remote_write(
        &prom.write_url(),
        vec![
            series(
                &[("__name__", "harness_requests"), ("host", "a")],
                &[(t, 1.0), (t + 10_000, 2.5), (t + 20_000, -3.0)],
            ),
            series(
                &[("__name__", "harness_requests"), ("host", "b")],
                &[(t + 20_000, 7.0)],
            ),
        ],
    );
    assert_eq!(status, 204, "{body}");

    let now = unix_now() as f64;
    assert_eq!(
        prom.samples("harness_requests", 3600, now),
        vec![
            (
                labels(&[("__name__", "harness_requests"), ("host", "a")]),
                vec![(t, 1.0), (t + 10_000, 2.5), (t + 20_000, -3.0)]
            ),
            (
                labels(&[("__name__", "harness_requests"), ("host", "b")]),
                vec![(t + 20_000, 7.0)]
            ),
        ]
    );
    // An instant query sees each series' latest sample.
    let mut latest = prom.query("harness_requests", now);
    latest.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        latest,
        vec![
            (
                labels(&[("__name__", "harness_requests"), ("host", "a")]),
                -3.0
            ),
            (
                labels(&[("__name__", "harness_requests"), ("host", "b")]),
                7.0
            ),
        ]
    );
    assert_eq!(
        prom.query("sum(harness_requests)", now),
        vec![(Labels::new(), 4.0)]
    );
}

#[test]
fn prometheus_keeps_its_data_across_stop_and_restart() {
    let Some(mut prom) = or_skip(Prometheus::start()) else {
        return;
    };
    let t = base_secs() * 1000;
    let name = [("__name__", "harness_outage")];
    assert_eq!(
        remote_write(&prom.write_url(), vec![series(&name, &[(t, 1.0)])]).0,
        204
    );
    let address = prom.write_url()[7..].split('/').next().unwrap().to_string();

    prom.stop();
    assert!(refused(&address), "Prometheus still listens after stop()");
    prom.restart();

    assert_eq!(
        remote_write(&prom.write_url(), vec![series(&name, &[(t + 10_000, 2.0)])]).0,
        204
    );
    assert_eq!(
        prom.samples("harness_outage", 3600, unix_now() as f64),
        vec![(labels(&name), vec![(t, 1.0), (t + 10_000, 2.0)])]
    );
}

#[test]
fn influxdb_stores_line_protocol_and_returns_it() {
    let Some(influx) = or_skip(Influx::start()) else {
        return;
    };
    influx.create_db("sonde");
    let t = base_secs();
    let lines = format!(
        "harness_cpu,host=a,dc=x value=1.5 {t}\n\
         harness_cpu,host=b,dc=x value=-2 {t}\n\
         harness_cpu,host=a,dc=x value=3 {}\n\
         harness_cpu value=4 {}\n",
        t + 10,
        t + 20
    );
    let mut resp = backends::http()
        .post(format!("{}/write", influx.url()))
        .query("db", "sonde")
        .query("precision", "s")
        .send(lines.as_bytes())
        .unwrap();
    let status = resp.status().as_u16();
    assert_eq!(status, 204, "{}", resp.body_mut().read_to_string().unwrap());

    let ax = labels(&[("dc", "x"), ("host", "a")]);
    let bx = labels(&[("dc", "x"), ("host", "b")]);
    assert_eq!(
        influx.series_values("sonde", "harness_cpu"),
        vec![
            (t, ax.clone(), 1.5),
            (t, bx, -2.0),
            (t + 10, ax, 3.0),
            (t + 20, Labels::new(), 4.0),
        ]
    );
    assert_eq!(
        influx.query("sonde", "SELECT sum(value) FROM harness_cpu")["results"][0]["series"][0]
            ["values"][0][1],
        6.5
    );
    assert!(influx
        .series_values("sonde", "no_such_measurement")
        .is_empty());
}

#[test]
fn influxdb_keeps_its_data_across_stop_and_restart() {
    let Some(mut influx) = or_skip(Influx::start()) else {
        return;
    };
    influx.create_db("sonde");
    let t = base_secs();
    let write = |influx: &Influx, line: String| {
        let status = backends::http()
            .post(format!("{}/write?db=sonde&precision=s", influx.url()))
            .send(line.as_bytes())
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(status, 204);
    };
    write(&influx, format!("harness_outage value=1 {t}\n"));
    let address = influx.url()[7..].to_string();

    influx.stop();
    assert!(refused(&address), "InfluxDB still listens after stop()");
    influx.restart();

    write(&influx, format!("harness_outage value=2 {}\n", t + 10));
    assert_eq!(
        influx.series_values("sonde", "harness_outage"),
        vec![(t, Labels::new(), 1.0), (t + 10, Labels::new(), 2.0)]
    );
}

#[test]
fn carbon_stores_plain_and_tagged_lines_in_whisper() {
    let Some(carbon) = or_skip(Carbon::start()) else {
        return;
    };
    let t = base_secs();
    carbon.send_lines(&format!(
        "harness.plain 1.5 {t}\n\
         harness.plain 2 {}\n\
         harness.tagged;host=a;dc=x 3 {t}\n\
         harness.tagged;dc=x;host=a 4 {}\n\
         harness.tagged;host=b 5 {t}\n",
        t + 10,
        t + 10
    ));
    let (from, until) = (t - 60, unix_now());
    let read = |metric: &str, n: usize| {
        wait_for(
            &format!("{n} datapoints of {metric} in whisper"),
            Duration::from_secs(10),
            || Some(carbon.datapoints(metric, from, until)).filter(|p| p.len() >= n),
        )
    };
    assert_eq!(read("harness.plain", 2), vec![(t, 1.5), (t + 10, 2.0)]);
    // Tag order does not matter: carbon sorts the tags, so both lines land
    // in one series, readable by either spelling.
    assert_eq!(
        read("harness.tagged;dc=x;host=a", 2),
        vec![(t, 3.0), (t + 10, 4.0)]
    );
    assert_eq!(
        carbon.datapoints("harness.tagged;host=a;dc=x", from, until),
        vec![(t, 3.0), (t + 10, 4.0)]
    );
    assert_eq!(read("harness.tagged;host=b", 1), vec![(t, 5.0)]);

    let plain = carbon.whisper_path("harness.plain");
    assert!(plain.ends_with("harness/plain.wsp"), "{}", plain.display());
    let tagged = carbon.whisper_path("harness.tagged;host=a;dc=x");
    let rel = tagged.strip_prefix(carbon.dir()).unwrap();
    assert!(
        rel.starts_with("storage/whisper/_tagged") && tagged.exists(),
        "{}",
        tagged.display()
    );
}

#[test]
fn carbon_keeps_its_data_across_stop_and_restart() {
    let Some(mut carbon) = or_skip(Carbon::start()) else {
        return;
    };
    let t = base_secs();
    carbon.send_lines(&format!("harness.outage 1 {t}\n"));
    let until = unix_now();
    wait_for(
        "the first datapoint in whisper",
        Duration::from_secs(10),
        || {
            Some(()).filter(|()| {
                !carbon
                    .datapoints("harness.outage", t - 60, until)
                    .is_empty()
            })
        },
    );

    carbon.stop();
    assert!(
        refused(&carbon.address()),
        "carbon still listens after stop()"
    );
    carbon.restart();

    carbon.send_lines(&format!("harness.outage 2 {}\n", t + 10));
    let points = wait_for(
        "both datapoints in whisper",
        Duration::from_secs(10),
        || Some(carbon.datapoints("harness.outage", t - 60, unix_now())).filter(|p| p.len() >= 2),
    );
    assert_eq!(points, vec![(t, 1.0), (t + 10, 2.0)]);
}

#[test]
fn dropping_a_backend_kills_it_and_removes_its_dir() {
    let Some(influx) = or_skip(Influx::start()) else {
        return;
    };
    let address = influx.url()[7..].to_string();
    let dir = influx.dir().to_path_buf();
    assert!(!refused(&address));
    drop(influx);
    assert!(refused(&address), "InfluxDB still listens after drop");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn a_missing_binary_names_its_debian_package() {
    let err = backends::find_binary(
        "Frobnicator",
        "frob-server",
        "/nonexistent/frobd",
        "sonde-test-no-such-binary",
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("Frobnicator is not installed") && msg.contains("`frob-server`"),
        "{msg}"
    );
}

/// The debug exporter's text as v0.150.0 prints it, collector log lines
/// around it.
const DEBUG_OUTPUT: &str = "2026-11-23T00:00:46.045Z\tinfo\tMetrics\t{\"data points\": 2}
2026-11-23T00:00:46.045Z\tinfo\tResourceMetrics #0
Resource SchemaURL: 
Resource attributes:
     -> host.name: Str(vm)
ScopeMetrics #0
ScopeMetrics SchemaURL: 
InstrumentationScope sonde 0.1.0
Metric #0
Descriptor:
     -> Name: ot.total
     -> Description: 
     -> Unit: 
     -> DataType: Sum
     -> IsMonotonic: true
     -> AggregationTemporality: Cumulative
NumberDataPoints #0
Data point attributes:
     -> dc: Str(x)
     -> path: Str(/a b)
StartTimestamp: 1970-01-01 00:00:00 +0000 UTC
Timestamp: 2026-11-23 00:00:45 +0000 UTC
Value: 5.000000
Metric #1
Descriptor:
     -> Name: ot.temp
     -> Description: 
     -> Unit: 
     -> DataType: Gauge
NumberDataPoints #0
StartTimestamp: 1970-01-01 00:00:00 +0000 UTC
Timestamp: 2024-02-29 23:59:59.5 +0000 UTC
Value: 21.500000
\t{\"otelcol.signal\": \"metrics\"}
";

#[test]
fn the_collectors_debug_output_parses_into_points() {
    let labels = |kv: &[(&str, &str)]| -> Labels {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        backends::parse_debug_output(DEBUG_OUTPUT),
        vec![
            OtelPoint {
                name: "ot.total".into(),
                kind: OtelKind::Sum,
                monotonic: true,
                temporality: "Cumulative".into(),
                attributes: labels(&[("dc", "x"), ("path", "/a b")]),
                unix_secs: 1_795_392_045,
                value: 5.0,
            },
            OtelPoint {
                name: "ot.temp".into(),
                kind: OtelKind::Gauge,
                monotonic: false,
                temporality: String::new(),
                attributes: Labels::new(),
                unix_secs: 1_709_251_199,
                value: 21.5,
            },
        ]
    );
}

/// The collector takes an OTLP/HTTP request built here from the official
/// definitions (no sonde involved) and the debug output gives it back;
/// it listens on its HTTP port only, and stops and restarts cleanly.
#[test]
fn otel_collector_prints_what_it_receives() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
        Sum,
    };
    use prost::Message;

    let Some(mut col) = or_skip(OtelCollector::start()) else {
        return;
    };
    let t = base_secs();
    let point = NumberDataPoint {
        attributes: vec![KeyValue {
            key: "dc".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("x".into())),
            }),
            ..Default::default()
        }],
        time_unix_nano: t as u64 * 1_000_000_000,
        value: Some(number_data_point::Value::AsDouble(7.25)),
        ..Default::default()
    };
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "harness.total".into(),
                    data: Some(Data::Sum(Sum {
                        data_points: vec![point],
                        aggregation_temporality: 2,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let post = |col: &OtelCollector| {
        let resp = backends::http()
            .post(col.metrics_url())
            .header("Content-Type", "application/x-protobuf")
            .send(&req.encode_to_vec()[..])
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
    };
    let want = OtelPoint {
        name: "harness.total".into(),
        kind: OtelKind::Sum,
        monotonic: true,
        temporality: "Cumulative".into(),
        attributes: [("dc".to_string(), "x".to_string())].into(),
        unix_secs: t,
        value: 7.25,
    };
    post(&col);
    wait_for(
        "the point in the debug output",
        Duration::from_secs(10),
        || (col.points() == vec![want.clone()]).then_some(()),
    );
    // Stop (SIGTERM, clean exit) and restart on the same port: the log is
    // appended, so the first run's point stays readable.
    col.stop();
    col.restart();
    post(&col);
    wait_for("the second point", Duration::from_secs(10), || {
        (col.points() == vec![want.clone(), want.clone()]).then_some(())
    });
    // Only the OTLP/HTTP port: no gRPC receiver, no internal metrics
    // endpoint.
    let port = col
        .metrics_url()
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(col.listening(), vec![format!("127.0.0.1:{port}")]);
    let dir = col.dir().to_path_buf();
    drop(col);
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// What Prometheus does with a resent or late window, which the outage
/// tests rely on: an identical resend is accepted and stored once (so
/// Prometheus alone cannot show a duplicate; check the sink's counters), a
/// different value for a stored timestamp and a sample older than the
/// series' newest are refused with 400, which a sink must not retry.
#[test]
fn prometheus_stores_an_identical_resend_once_and_refuses_out_of_order() {
    let Some(prom) = or_skip(Prometheus::start()) else {
        return;
    };
    let t = base_secs() * 1000;
    let name = [("__name__", "harness_resend")];
    let write = |ts: i64, v: f64| remote_write(&prom.write_url(), vec![series(&name, &[(ts, v)])]);
    assert_eq!(write(t + 10_000, 1.0).0, 204);
    assert_eq!(write(t + 10_000, 1.0).0, 204);
    assert_eq!(
        write(t + 10_000, 2.0),
        (400, "duplicate sample for timestamp\n".into())
    );
    assert_eq!(write(t, 3.0), (400, "out of order sample\n".into()));
    assert_eq!(
        prom.samples("harness_resend", 3600, unix_now() as f64),
        vec![(labels(&name), vec![(t + 10_000, 1.0)])]
    );
}
