//! `sonde top`: what flows through a running agent, refreshed every
//! second: per receiver points/s and drops by reason, per log source
//! lines/s and bytes behind, per sink sent/s, queue, retries and errors,
//! and the metric names with the most points/s.
//!
//! The rates are differences of the counters of the admin site's
//! `/api/metrics` between two reads, so they agree with `/metrics`; the
//! metric names come from a `names` tap (`/api/tap?what=names`), which the
//! agent counts only while it is open.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use sonde::client::{AgentArgs, Client};

/// `sonde top`.
#[derive(clap::Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    agent: AgentArgs,
    /// Seconds between two refreshes.
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    interval: f64,
    /// Stop after this many refreshes (default: until interrupted).
    #[arg(long)]
    count: Option<u64>,
    /// One JSON object per refresh instead of the table.
    #[arg(long)]
    json: bool,
    /// Metric names shown.
    #[arg(long, default_value_t = 10)]
    names: usize,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err("a number of seconds from 0.1 to 3600".into()),
    }
}

/// Which samples of a metric count, by their labels.
type Also<'a> = dyn Fn(&[(String, String)]) -> bool + 'a;

/// The counters of one read of `/api/metrics`: metric name → the label
/// value that says whose (receiver, sink, source) and any other labels →
/// value.
type Counters = BTreeMap<String, BTreeMap<Vec<(String, String)>, f64>>;

fn counters(text: &str) -> anyhow::Result<Counters> {
    let v: Value = serde_json::from_str(text).context("the agent's /api/metrics")?;
    let mut out = Counters::new();
    for m in v["metrics"].as_array().into_iter().flatten() {
        let name = m["name"].as_str().unwrap_or_default().to_string();
        let samples = out.entry(name).or_default();
        for s in m["samples"].as_array().into_iter().flatten() {
            let labels = s["labels"]
                .as_object()
                .map(|l| {
                    l.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            samples.insert(labels, s["value"].as_f64().unwrap_or(0.0));
        }
    }
    Ok(out)
}

/// One refresh: rates between two reads, and the gauges of the later.
struct Frame<'a> {
    old: &'a Counters,
    new: &'a Counters,
    seconds: f64,
}

impl Frame<'_> {
    /// Who has samples of `metric`, by the value of `label`, in order.
    fn who(&self, metric: &str, label: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .new
            .get(metric)
            .into_iter()
            .flat_map(|s| s.keys())
            .filter_map(|l| l.iter().find(|(k, _)| k == label).map(|(_, v)| v.clone()))
            .collect();
        v.dedup();
        v
    }

    /// The sum of `metric`'s samples whose `label` is `value` (and whose
    /// other labels pass `also`) in `c`.
    fn sum(c: &Counters, metric: &str, label: &str, value: &str, also: &Also<'_>) -> f64 {
        c.get(metric)
            .into_iter()
            .flatten()
            .filter(|(l, _)| l.iter().any(|(k, v)| k == label && v == value) && also(l))
            .map(|(_, v)| v)
            .sum()
    }

    /// The rate of a counter, per second.
    fn rate(&self, metric: &str, label: &str, value: &str) -> f64 {
        self.rate_if(metric, label, value, &|_| true)
    }

    fn rate_if(&self, metric: &str, label: &str, value: &str, also: &Also<'_>) -> f64 {
        let d = Self::sum(self.new, metric, label, value, also)
            - Self::sum(self.old, metric, label, value, also);
        // A counter that went back is one that a reload made anew.
        d.max(0.0) / self.seconds
    }

    /// A gauge's value now.
    fn gauge(&self, metric: &str, label: &str, value: &str) -> f64 {
        Self::sum(self.new, metric, label, value, &|_| true)
    }

    /// Per reason, the rate of a counter with a `reason` label, the
    /// non-zero ones only.
    fn reasons(&self, metric: &str, label: &str, value: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for l in self.new.get(metric).into_iter().flat_map(|s| s.keys()) {
            if !l.iter().any(|(k, v)| k == label && v == value) {
                continue;
            }
            if let Some((_, reason)) = l.iter().find(|(k, _)| k == "reason") {
                let r = self.rate_if(metric, label, value, &|x| {
                    x.iter().any(|(k, v)| k == "reason" && v == reason)
                });
                if r > 0.0 {
                    out.insert(reason.clone(), r);
                }
            }
        }
        out
    }

    fn json(&self, names: &Value) -> Value {
        let receivers: Vec<Value> = self
            .who("sonde_receiver_points_total", "receiver")
            .iter()
            .map(|r| {
                json!({
                    "receiver": r,
                    "points_per_s": self.rate("sonde_receiver_points_total", "receiver", r),
                    "points_total": self.gauge("sonde_receiver_points_total", "receiver", r),
                    "bytes_per_s": self.rate("sonde_receiver_bytes_total", "receiver", r),
                    "drops_per_s": self.reasons("sonde_receiver_dropped_total", "receiver", r),
                    "kernel_drops_per_s": self.rate("sonde_receiver_kernel_dropped_total", "receiver", r),
                })
            })
            .collect();
        let sources: Vec<Value> = self
            .who("sonde_log_lines_read_total", "source")
            .iter()
            .map(|s| {
                json!({
                    "source": s,
                    "lines_per_s": self.rate("sonde_log_lines_read_total", "source", s),
                    "lines_total": self.gauge("sonde_log_lines_read_total", "source", s),
                    "bytes_per_s": self.rate("sonde_log_bytes_read_total", "source", s),
                    "bytes_behind": self.gauge("sonde_log_bytes_behind", "source", s),
                    "files": self.gauge("sonde_log_files_watched", "source", s),
                })
            })
            .collect();
        let sinks: Vec<Value> = self
            .who("sonde_sink_batches_total", "sink")
            .iter()
            .map(|s| {
                let mut drops = self.reasons("sonde_sink_dropped_points_total", "sink", s);
                for (k, v) in self.reasons("sonde_sink_dropped_records_total", "sink", s) {
                    *drops.entry(k).or_default() += v;
                }
                json!({
                    "sink": s,
                    "points_per_s": self.rate("sonde_sink_points_total", "sink", s),
                    "points_total": self.gauge("sonde_sink_points_total", "sink", s),
                    "records_per_s": self.rate("sonde_sink_records_total", "sink", s),
                    "sent_bytes_per_s": self.rate("sonde_sink_sent_bytes_total", "sink", s),
                    "queue_batches": self.gauge("sonde_sink_queue_batches", "sink", s),
                    "buffered_records": self.gauge("sonde_sink_log_buffer_records", "sink", s),
                    "retries_per_s": self.rate("sonde_sink_retries_total", "sink", s),
                    "errors_per_s": self.rate("sonde_sink_errors_total", "sink", s),
                    "drops_per_s": drops,
                })
            })
            .collect();
        json!({
            "seconds": self.seconds,
            "series": self.new.get("sonde_series").and_then(|s| s.values().next()).copied().unwrap_or(0.0),
            "receivers": receivers,
            "sources": sources,
            "sinks": sinks,
            "metrics": names,
        })
    }
}

/// A rate as a person reads it: `0`, `12.5`, `1234`, `12.3k`, `4.56M`.
fn human(v: f64) -> String {
    match v {
        0.0 => "0".into(),
        v if v < 10.0 => format!("{v:.1}"),
        v if v < 10_000.0 => format!("{v:.0}"),
        v if v < 10_000_000.0 => format!("{:.1}k", v / 1e3),
        v => format!("{:.2}M", v / 1e6),
    }
}

fn reasons(r: &Value) -> String {
    r.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k} {}", human(v.as_f64().unwrap_or(0.0))))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

/// The frame as a table.
fn table(base: &str, frame: &Value, names: usize) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "sonde top  {base}  every {:.1} s  {} series  (Ctrl-C to stop)\n",
        f(frame, "seconds"),
        f(frame, "series")
    );
    let _ = writeln!(
        o,
        "{:<34} {:>10} {:>10} {:>10}  DROPS/S",
        "RECEIVER", "POINTS/S", "BYTES/S", "KERNEL/S"
    );
    for r in frame["receivers"].as_array().into_iter().flatten() {
        let _ = writeln!(
            o,
            "{:<34} {:>10} {:>10} {:>10}  {}",
            r["receiver"].as_str().unwrap_or_default(),
            human(f(r, "points_per_s")),
            human(f(r, "bytes_per_s")),
            human(f(r, "kernel_drops_per_s")),
            reasons(&r["drops_per_s"])
        );
    }
    if frame["sources"].as_array().is_some_and(|s| !s.is_empty()) {
        let _ = writeln!(
            o,
            "\n{:<34} {:>10} {:>10} {:>12} {:>6}",
            "LOG SOURCE", "LINES/S", "BYTES/S", "BYTES BEHIND", "FILES"
        );
        for s in frame["sources"].as_array().into_iter().flatten() {
            let _ = writeln!(
                o,
                "{:<34} {:>10} {:>10} {:>12} {:>6}",
                s["source"].as_str().unwrap_or_default(),
                human(f(s, "lines_per_s")),
                human(f(s, "bytes_per_s")),
                f(s, "bytes_behind"),
                f(s, "files")
            );
        }
    }
    let _ = writeln!(
        o,
        "\n{:<34} {:>10} {:>10} {:>10} {:>7} {:>9} {:>8}  DROPS/S",
        "SINK", "POINTS/S", "RECORDS/S", "SENT B/S", "QUEUE", "RETRIES/S", "ERRORS/S"
    );
    for s in frame["sinks"].as_array().into_iter().flatten() {
        let _ = writeln!(
            o,
            "{:<34} {:>10} {:>10} {:>10} {:>7} {:>9} {:>8}  {}",
            s["sink"].as_str().unwrap_or_default(),
            human(f(s, "points_per_s")),
            human(f(s, "records_per_s")),
            human(f(s, "sent_bytes_per_s")),
            f(s, "queue_batches") + f(s, "buffered_records"),
            human(f(s, "retries_per_s")),
            human(f(s, "errors_per_s")),
            reasons(&s["drops_per_s"])
        );
    }
    let _ = writeln!(o, "\n{:<46} {:>10}", "METRIC", "POINTS/S");
    for m in frame["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .take(names)
    {
        let _ = writeln!(
            o,
            "{:<46} {:>10}",
            m["name"].as_str().unwrap_or_default(),
            human(f(m, "points_per_s"))
        );
    }
    o
}

/// Opens a `names` tap, or says why the table will have no names.
fn open_names(client: &Client) -> Option<u64> {
    let v: Value = serde_json::from_str(&client.get("/api/tap?what=names").ok()?).ok()?;
    v["session"].as_u64()
}

/// The names a `names` tap counted since its last poll, with their
/// points per second; reopens the tap if the agent ended it (a restart).
fn poll_names(client: &Client, session: &mut Option<u64>) -> Value {
    let polled = session.and_then(|id| client.get(&format!("/api/tap?session={id}")).ok());
    let Some(text) = polled else {
        *session = open_names(client);
        return json!([]);
    };
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    let seconds = f(&v, "seconds").max(1e-3);
    v["names"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| json!({ "name": n["name"], "points_per_s": f(n, "points") / seconds }))
        .collect()
}

/// `sonde top`.
pub fn top(args: &TopArgs) -> anyhow::Result<()> {
    let client = args.agent.client()?;
    let mut old = counters(&client.get("/api/metrics")?)?;
    let mut session = open_names(&client);
    let mut at = Instant::now();
    let tty = std::io::stdout().is_terminal() && !args.json;
    let mut shown = 0;
    while args.count.is_none_or(|c| shown < c) {
        std::thread::sleep(Duration::from_secs_f64(args.interval));
        let new = counters(&client.get("/api/metrics")?)?;
        let names = poll_names(&client, &mut session);
        let now = Instant::now();
        let frame = Frame {
            old: &old,
            new: &new,
            seconds: now.duration_since(at).as_secs_f64(),
        }
        .json(&names);
        let mut out = std::io::stdout().lock();
        if args.json {
            writeln!(out, "{frame}")?;
        } else {
            if tty {
                // Home and clear: the table replaces the last one.
                write!(out, "\x1b[H\x1b[2J")?;
            }
            writeln!(out, "{}", table(client.base(), &frame, args.names))?;
        }
        out.flush()?;
        old = new;
        at = now;
        shown += 1;
    }
    Ok(())
}
