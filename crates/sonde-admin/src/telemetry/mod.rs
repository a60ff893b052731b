//! The agent's own telemetry: the metrics of the admin listener's
//! `/metrics`.
//!
//! Each component owns the counters it updates: a receiver its
//! [`ReceiverStats`], a sink or sender its [`SinkStats`], the flusher its
//! [`FlushStats`]. [`Telemetry`] holds a
//! reference to each, and [`Telemetry::render`] writes them in the
//! Prometheus text format by walking [`METRICS`], the table of every
//! metric's name, type, help and source. Rendering only reads atomics, so a
//! scrape never waits for a receiver or a sink.

mod metrics;

pub use metrics::{Kind, Metric, Source, Value, METRICS};

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use sonde_aggregate::SeriesCount;
use sonde_encode::prometheus::escape_label_value;
use sonde_runtime::drops::DropLabel;

use sonde_log_sources::LogStats;
use sonde_metrics::flusher::FlushStats;
use sonde_metrics::receiver::ReceiverStats;
use sonde_sinks::sink::{FailReason, SinkDrop, SinkStats};

/// Everything `/metrics` shows.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// One per running receiver; a config reload adds and removes some.
    pub receivers: Mutex<Vec<Arc<ReceiverStats>>>,
    /// One per running sink; a config reload adds and removes some.
    pub sinks: Mutex<Vec<Arc<SinkStats>>>,
    /// One per log source.
    pub logs: Mutex<Vec<Arc<LogStats>>>,
    /// The flusher's counters.
    pub flush: Arc<FlushStats>,
    /// Live series of the receive workers, which `agent.max_series` limits.
    pub worker_series: Arc<SeriesCount>,
    /// `agent.max_series`.
    pub max_series: usize,
    /// The host profiler's counters (zeros while it is off).
    pub profiler: Arc<sonde_profiler::ProfilerStats>,
    /// Admin site requests refused for a missing or wrong token.
    pub admin_unauthorized: std::sync::atomic::AtomicU64,
    /// Admin site requests refused for their size: a request target over
    /// 8 KiB (414), a head over 16 KiB (431), a form over 4 KiB (413).
    pub admin_too_large: std::sync::atomic::AtomicU64,
    /// Admin site connections refused (503) while 64 were open.
    pub admin_connections_refused: std::sync::atomic::AtomicU64,
    /// What `sonde tap` and `sonde top` watch.
    pub tap: Arc<sonde_runtime::tap::Tap>,
    /// Failed writes under `agent.data_dir`.
    pub data_dir: Arc<sonde_runtime::data_dir::DataDirErrors>,
    /// Admin site connections closed because their TLS handshake failed
    /// or took over 10 s.
    pub admin_tls_handshake_failures: std::sync::atomic::AtomicU64,
}

impl Telemetry {
    /// Renders every metric of [`METRICS`] in the Prometheus text format.
    pub fn render(&self) -> String {
        let snmp = std::fs::read_to_string("/proc/net/snmp").ok();
        self.render_with(snmp.as_deref())
    }

    /// [`Telemetry::render`], with the host's `/proc/net/snmp` text (or
    /// `None` where there is none) passed in.
    fn render_with(&self, snmp: Option<&str>) -> String {
        let mut text = Text {
            out: String::new(),
            name: "",
        };
        self.walk(snmp, &mut text);
        text.out
    }

    /// Every metric of [`METRICS`] as JSON, for the admin site's
    /// `/api/metrics` and the agent page: `{"metrics": [{"name", "type",
    /// "help", "samples": [{"labels": {...}, "value": N}]}]}`, the same
    /// metrics and samples as [`Telemetry::render`].
    pub fn to_json(&self) -> serde_json::Value {
        let snmp = std::fs::read_to_string("/proc/net/snmp").ok();
        self.json_with(snmp.as_deref())
    }

    fn json_with(&self, snmp: Option<&str>) -> serde_json::Value {
        let mut json = Json(Vec::new());
        self.walk(snmp, &mut json);
        serde_json::json!({ "metrics": json.0 })
    }

    /// Walks [`METRICS`], handing each metric and its samples to `out`.
    fn walk(&self, snmp: Option<&str>, out: &mut dyn Emit) {
        let receivers = self
            .receivers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let logs = self.logs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for m in METRICS {
            let host = match m.source {
                Source::HostUdp(field) => match snmp.and_then(|t| parse_snmp(t, "Udp:", field)) {
                    Some(v) => Some(v),
                    None => continue,
                },
                _ => None,
            };
            out.metric(m);
            match m.source {
                Source::Receiver(get) => {
                    for r in &receivers {
                        let labels = [("receiver", r.listen.as_str()), ("protocol", r.protocol)];
                        out.sample(&labels, Value::Int(get(r)));
                    }
                }
                Source::ReceiverDrops => {
                    for r in &receivers {
                        for reason in DropLabel::ALL {
                            let labels = [
                                ("receiver", r.listen.as_str()),
                                ("protocol", r.protocol),
                                ("reason", reason.as_str()),
                            ];
                            out.sample(&labels, Value::Int(r.dropped(reason)));
                        }
                    }
                }
                Source::Agent(get) => out.sample(&[], get(self)),
                Source::DataDir => {
                    for w in sonde_runtime::data_dir::What::ALL {
                        out.sample(&[("what", w.as_str())], Value::Int(self.data_dir.count(w)));
                    }
                }
                Source::HostUdp(_) => {
                    if let Some(v) = host {
                        out.sample(&[], Value::Int(v));
                    }
                }
                Source::Sink(get) => {
                    for s in &sinks {
                        out.sample(&[("sink", &s.name)], Value::Int(get(s)));
                    }
                }
                Source::SinkFloat(get) => {
                    for s in &sinks {
                        out.sample(&[("sink", &s.name)], Value::Float(get(s)));
                    }
                }
                Source::SinkFailures => {
                    for s in &sinks {
                        for r in FailReason::ALL {
                            let v = s.failures[r as usize].load(Relaxed);
                            out.sample(&[("sink", &s.name), ("reason", r.as_str())], Value::Int(v));
                        }
                    }
                }
                Source::SinkDrops(get) => {
                    for s in &sinks {
                        for d in SinkDrop::ALL {
                            let v = get(s)[d as usize].load(Relaxed);
                            out.sample(&[("sink", &s.name), ("reason", d.as_str())], Value::Int(v));
                        }
                    }
                }
                Source::Log(get) => {
                    for l in &logs {
                        out.sample(&[("source", &l.source)], Value::Int(get(l)));
                    }
                }
            }
        }
    }
}

/// What the walk over [`METRICS`] writes to: a metric, then its samples.
trait Emit {
    fn metric(&mut self, m: &'static Metric);
    fn sample(&mut self, labels: &[(&str, &str)], value: Value);
}

/// The Prometheus text format.
struct Text {
    out: String,
    /// The metric whose samples follow.
    name: &'static str,
}

impl Emit for Text {
    fn metric(&mut self, m: &'static Metric) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {help}\n# TYPE {name} {kind}",
            name = m.name,
            help = m.help,
            kind = m.kind.as_str()
        );
        self.name = m.name;
    }

    /// One line: `name{label="value",...} value`.
    fn sample(&mut self, labels: &[(&str, &str)], value: Value) {
        let o = &mut self.out;
        o.push_str(self.name);
        if !labels.is_empty() {
            o.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                let _ = write!(o, "{k}=\"{}\"", escape_label_value(v));
            }
            o.push('}');
        }
        let _ = writeln!(o, " {value}");
    }
}

/// JSON: each metric an object with its samples.
struct Json(Vec<serde_json::Value>);

impl Emit for Json {
    fn metric(&mut self, m: &'static Metric) {
        self.0.push(serde_json::json!({
            "name": m.name,
            "type": m.kind.as_str(),
            "help": m.help,
            "samples": [],
        }));
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: Value) {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
            .collect();
        let value = match value {
            Value::Int(v) => serde_json::Value::from(v),
            // A whole number as one (`0`, not `0.0`), as the text
            // exposition writes it.
            Value::Float(v) if v.fract() == 0.0 && (0.0..9e15).contains(&v) => {
                serde_json::Value::from(v as u64)
            }
            Value::Float(v) => serde_json::Value::from(v),
        };
        if let Some(samples) = self.0.last_mut().and_then(|m| m["samples"].as_array_mut()) {
            samples.push(serde_json::json!({ "labels": labels, "value": value }));
        }
    }
}

/// One field of `proto`'s lines of `/proc/net/snmp` (a header line of
/// names, then a line of values).
fn parse_snmp(text: &str, proto: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(proto));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\nUdp: 10 2 7 9 5\nUdpLite: InDatagrams\nUdpLite: 0\n";

    #[test]
    fn snmp_fields_are_found_by_name() {
        assert_eq!(parse_snmp(SNMP, "Udp:", "RcvbufErrors"), Some(5));
        assert_eq!(parse_snmp(SNMP, "Udp:", "InErrors"), Some(7));
        assert_eq!(parse_snmp(SNMP, "Udp:", "Nope"), None);
    }

    /// Two receivers and two sinks with every counter set to something.
    fn busy_agent() -> Telemetry {
        let r = Arc::new(ReceiverStats::new("udp://127.0.0.1:8125".into(), "statsd"));
        r.datagrams.store(11, Relaxed);
        r.bytes.store(1200, Relaxed);
        r.points.store(33, Relaxed);
        r.connections.store(2, Relaxed);
        r.connections_refused.store(1, Relaxed);
        r.kernel_drops.store(4, Relaxed);
        r.receive_buffer.store(8 << 20, Relaxed);
        r.drops[DropLabel::BadValue as usize].store(5, Relaxed);
        // A label value that needs escaping.
        let r2 = Arc::new(ReceiverStats::new(
            "unix:///tmp/a\"b.sock".into(),
            "msgpack",
        ));
        r2.points.store(7, Relaxed);
        let s = Arc::new(SinkStats::new("http:one".into()));
        s.batches.store(3, Relaxed);
        s.points.store(300, Relaxed);
        s.errors.store(1, Relaxed);
        s.bytes_raw.store(4000, Relaxed);
        s.bytes_sent.store(1000, Relaxed);
        s.retries.store(2, Relaxed);
        s.retry_after_waits.store(1, Relaxed);
        s.queue_batches.store(1, Relaxed);
        s.queue_bytes.store(500, Relaxed);
        s.corrupt_segments.store(1, Relaxed);
        s.log_buffer_records.store(40, Relaxed);
        s.log_buffer_bytes.store(2048, Relaxed);
        s.failures[FailReason::ServerError as usize].store(2, Relaxed);
        s.failures[FailReason::TooLarge as usize].store(3, Relaxed);
        s.count_drop(SinkDrop::TooLarge, 1, 1);
        s.count_drop(SinkDrop::BufferFull, 1, 100);
        s.records.store(77, Relaxed);
        s.dropped_records[SinkDrop::Rejected as usize].store(2, Relaxed);
        let l = Arc::new(LogStats::new("app".into()));
        l.files_watched.store(3, Relaxed);
        l.files_open.store(2, Relaxed);
        l.files_reopened.store(9, Relaxed);
        l.bytes_read.store(15_000, Relaxed);
        l.lines_read.store(100, Relaxed);
        l.lines_truncated.store(1, Relaxed);
        l.multiline_records.store(6, Relaxed);
        l.multiline_limited.store(7, Relaxed);
        l.files_skipped.store(8, Relaxed);
        l.malformed_lines.store(11, Relaxed);
        l.joined_records.store(12, Relaxed);
        l.unfinished_records.store(13, Relaxed);
        l.truncations.store(2, Relaxed);
        l.rotations.store(4, Relaxed);
        l.bytes_behind.store(150, Relaxed);
        l.checkpoint_errors.store(1, Relaxed);
        l.corrupt_checkpoints.store(1, Relaxed);
        l.watch_overflows.store(5, Relaxed);
        let t = Telemetry {
            receivers: Mutex::new(vec![r, r2]),
            sinks: Mutex::new(vec![s, Arc::new(SinkStats::new("console".into()))]),
            logs: Mutex::new(vec![l]),
            max_series: 100_000,
            ..Telemetry::default()
        };
        let f = &t.flush;
        f.flushes.store(9, Relaxed);
        f.series.store(42, Relaxed);
        f.expired.store(3, Relaxed);
        f.non_finite.store(1, Relaxed);
        f.points.store(420, Relaxed);
        f.last_duration_ns.store(1_250_000, Relaxed);
        f.late_shards.store(2, Relaxed);
        let p = &t.profiler;
        p.running.store(1, Relaxed);
        p.samples.store(1140, Relaxed);
        p.user_stacks.store(1100, Relaxed);
        p.user_stacks_complete.store(1089, Relaxed);
        p.lost.store(3, Relaxed);
        p.symbol_hits.store(9000, Relaxed);
        p.symbol_misses.store(250, Relaxed);
        p.periods.store(12, Relaxed);
        p.write_errors.store(1, Relaxed);
        p.store_bytes.store(48_000, Relaxed);
        p.processes.store(180, Relaxed);
        p.modules.store(95, Relaxed);
        p.symbol_cache_entries.store(4_200, Relaxed);
        p.cpu_ns.store(70_500_000, Relaxed);
        t.admin_unauthorized.store(3, Relaxed);
        t.admin_too_large.store(1, Relaxed);
        t.admin_connections_refused.store(2, Relaxed);
        t.admin_tls_handshake_failures.store(4, Relaxed);
        t
    }

    #[test]
    fn the_exposition_matches_the_golden_file_byte_for_byte() {
        // The names, HELP and TYPE lines and labels are an interface:
        // dashboards and alerts use them. Change the golden file only
        // together with the docs that name the metrics.
        let got = busy_agent().render_with(Some(SNMP));
        let want = include_str!("../../testdata/admin-metrics.prom");
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "line {}", i + 1);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn the_json_holds_the_same_metrics_and_samples_as_the_text() {
        let agent = busy_agent();
        let text = agent.render_with(Some(SNMP));
        let json = agent.json_with(Some(SNMP));
        let metrics = json["metrics"].as_array().unwrap();
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(metrics.len(), types);
        // Each text sample line, rebuilt from the JSON.
        let mut lines = Vec::new();
        for m in metrics {
            for s in m["samples"].as_array().unwrap() {
                let labels: Vec<String> = s["labels"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v.as_str().unwrap())))
                    .collect();
                let labels = if labels.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", labels.join(","))
                };
                lines.push(format!(
                    "{}{labels} {}",
                    m["name"].as_str().unwrap(),
                    s["value"]
                ));
            }
        }
        // JSON objects keep their keys sorted: compare each line with its
        // labels sorted (no test label value holds `",`).
        let sorted = |line: &str| -> String {
            let Some((name, rest)) = line.split_once('{') else {
                return line.to_string();
            };
            let (labels, value) = rest.rsplit_once("} ").unwrap();
            let mut labels: Vec<String> = labels
                .split("\",")
                .map(|l| l.trim_end_matches('"').to_string() + "\"")
                .collect();
            labels.sort();
            format!("{name}{{{}}} {value}", labels.join(","))
        };
        let want: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(sorted)
            .collect();
        let got: Vec<String> = lines.iter().map(|l| sorted(l)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn host_metrics_are_left_out_where_proc_net_snmp_is_missing() {
        let text = busy_agent().render_with(None);
        assert!(!text.contains("sonde_host_udp"), "{text}");
        assert!(text.contains("# TYPE sonde_flush_duration_seconds gauge\n"));
    }

    #[test]
    fn metric_names_are_unique_and_counters_end_in_total() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
        for m in METRICS {
            assert!(m.name.starts_with("sonde_"), "{}", m.name);
            assert_eq!(
                m.name.ends_with("_total"),
                m.kind == Kind::Counter,
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn published_counts_show_up_by_receiver_and_reason() {
        let stats = Arc::new(ReceiverStats::new("udp://127.0.0.1:1".into(), "statsd"));
        let mut local = sonde_metrics::receiver::LocalCounts {
            points: 5,
            ..Default::default()
        };
        local.drops[DropLabel::BadValue as usize] = 2;
        local.publish(&stats);
        assert_eq!(local.points, 0);
        let t = Telemetry {
            receivers: Mutex::new(vec![stats]),
            ..Telemetry::default()
        };
        let text = t.render();
        assert!(text.contains(
            "sonde_receiver_points_total{receiver=\"udp://127.0.0.1:1\",protocol=\"statsd\"} 5\n"
        ));
        assert!(text.contains("reason=\"bad_value\"} 2\n"));
    }
}
