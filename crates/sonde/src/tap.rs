//! `sonde tap`: a sample of the points or log records flowing through a
//! running agent now, as they were parsed, with their tags or fields.
//!
//! It opens a tap on the admin site (`/api/tap`) and polls it four times
//! a second; the agent keeps up to 1,000 items between two polls and
//! counts the rest, which `sonde tap` reports on stderr.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use sonde::client::AgentArgs;

/// `sonde tap`.
#[derive(clap::Args, Debug)]
pub struct TapArgs {
    #[command(flatten)]
    agent: AgentArgs,
    /// Only the points of this receiver: its listen address as /metrics
    /// names it (udp://127.0.0.1:8125), or a protocol (statsd, msgpack).
    #[arg(long, conflicts_with = "source")]
    receiver: Option<String>,
    /// Log records of this [[logs]] source instead of points.
    #[arg(long)]
    source: Option<String>,
    /// Log records of every source instead of points.
    #[arg(long, conflicts_with_all = ["receiver", "metric", "source"])]
    records: bool,
    /// Only the metrics whose name matches this glob (`api.*`).
    #[arg(long, conflicts_with = "source")]
    metric: Option<String>,
    /// Stop after this many points or records (default: until
    /// interrupted).
    #[arg(long)]
    limit: Option<u64>,
    /// One JSON object per line instead of the text form.
    #[arg(long)]
    json: bool,
}

/// How often the tap is polled.
const POLL: Duration = Duration::from_millis(250);

/// A point or a record as a person reads it.
fn text(item: &Value) -> String {
    if let Some(record) = item.get("record") {
        return format!("{}  {record}", item["source"].as_str().unwrap_or_default());
    }
    let mut s = format!(
        "{}  {}",
        item["receiver"].as_str().unwrap_or_default(),
        item["name"].as_str().unwrap_or_default()
    );
    match &item["tags"] {
        Value::Object(tags) => {
            let t: Vec<String> = tags
                .iter()
                .map(|(k, v)| match v.as_str() {
                    Some("") => k.clone(),
                    Some(v) => format!("{k}={v}"),
                    None => k.clone(),
                })
                .collect();
            s += &format!("{{{}}}", t.join(","));
        }
        Value::String(raw) => s += &format!("{{{raw}}} (tags that do not split)"),
        _ => {}
    }
    s += &format!(" {}", item["kind"].as_str().unwrap_or_default());
    for (k, prefix) in [("value", ""), ("delta", "delta "), ("member", "member ")] {
        if let Some(v) = item.get(k) {
            s += &format!(
                " {prefix}{}",
                v.as_str().map_or_else(|| v.to_string(), str::to_string)
            );
        }
    }
    if let Some(r) = item.get("sample_rate") {
        s += &format!(" @{r}");
    }
    if let Some(t) = item.get("timestamp") {
        s += &format!(" ts={t}");
    }
    s
}

/// `sonde tap`.
pub fn tap(args: &TapArgs) -> anyhow::Result<()> {
    let client = args.agent.client()?;
    let mut query = form_query(args);
    let opened: Value = serde_json::from_str(&client.get(&format!("/api/tap?{query}"))?)
        .context("the agent's /api/tap")?;
    let id = opened["session"]
        .as_u64()
        .context("the agent opened no tap")?;
    query = format!("session={id}");
    let mut shown = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        std::thread::sleep(POLL);
        let v: Value = serde_json::from_str(&client.get(&format!("/api/tap?{query}"))?)
            .context("the agent's /api/tap")?;
        for item in v["items"].as_array().into_iter().flatten() {
            if args.json {
                writeln!(out, "{item}")?;
            } else {
                writeln!(out, "{}", text(item))?;
            }
            shown += 1;
            if args.limit.is_some_and(|l| shown >= l) {
                return Ok(out.flush()?);
            }
        }
        out.flush()?;
        if let Some(n) = v["skipped"].as_u64().filter(|&n| n > 0) {
            eprintln!(
                "sonde tap: {n} more were not shown (the agent keeps 1,000 between two polls)"
            );
        }
    }
}

/// The query that opens the tap `args` asks for.
fn form_query(args: &TapArgs) -> String {
    let mut q = url_query();
    if args.source.is_some() || args.records {
        q.append_pair("what", "records");
    } else {
        q.append_pair("what", "points");
    }
    for (k, v) in [
        ("receiver", &args.receiver),
        ("source", &args.source),
        ("metric", &args.metric),
    ] {
        if let Some(v) = v {
            q.append_pair(k, v);
        }
    }
    q.finish()
}

fn url_query() -> form_urlencoded::Serializer<'static, String> {
    form_urlencoded::Serializer::new(String::new())
}
