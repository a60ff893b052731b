//! `sonde-bench` (run as `sonde bench`): the load generator's command
//! line; the work is in `sonde-loadgen`. A binary of its own, so that the
//! agent links neither the load generator nor the Kafka client its log
//! checker uses.

use std::io::IsTerminal;
use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use sonde_loadgen::procfs::sum_of;
use sonde_loadgen::shape::{Mix, Protocol, Shape};
use sonde_loadgen::{Load, Scrape, Target};
use sonde_runtime::addr::ListenAddr;

use sonde::config::HumanDuration;

/// The wire protocol to send.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Wire {
    /// metricserver2 msgpack (default address udp://127.0.0.1:9123).
    Msgpack,
    /// StatsD text (default address udp://127.0.0.1:8125).
    Statsd,
}

/// Drive a running agent with a load and report loss, CPU and memory.
#[derive(Parser, Debug)]
#[command(name = "sonde bench", bin_name = "sonde bench", version)]
pub struct BenchArgs {
    /// The protocol.
    #[arg(long, value_enum, default_value = "statsd")]
    pub protocol: Wire,
    /// The agent's address (udp:// or unixgram://); default: the protocol's UDP port.
    #[arg(long)]
    pub to: Option<String>,
    /// Points per second, e.g. 500000, 500k, 1M; omit to send flat out.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// How long to send.
    #[arg(long, default_value = "10s", value_parser = str::parse::<HumanDuration>)]
    pub duration: HumanDuration,
    /// Distinct series.
    #[arg(long, default_value_t = 1000)]
    pub series: usize,
    /// Tags per point (the first is the series id).
    #[arg(long, default_value_t = 0)]
    pub tags: usize,
    /// Points per datagram; 0 packs as many as fit in --max-bytes.
    #[arg(long, default_value_t = 0)]
    pub points_per_datagram: usize,
    /// Largest datagram in bytes: 1400 (one MTU) or up to 32768 (msgpack bunches).
    #[arg(long, default_value_t = 1400)]
    pub max_bytes: usize,
    /// Type mix `counter:gauge:timer[:histogram]`.
    #[arg(long, default_value = "4:2:2:2")]
    pub mix: Mix,
    /// The agent's admin address for its counters; "none" for an agent without one.
    #[arg(long, default_value = "127.0.0.1:8686")]
    pub admin: String,
    /// The agent's config: its counters are read from the admin site it
    /// names, with the admin token if it asks for one (instead of
    /// --admin).
    #[arg(long, short, conflicts_with = "admin")]
    pub config: Option<std::path::PathBuf>,
    /// The agent's process id; default: the process that owns the target socket.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1e3),
        Some('m' | 'M') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a rate like 500000, 500k or 1M"))?;
    if v > 0.0 && v.is_finite() {
        Ok(v * mult)
    } else {
        Err(format!("{s:?} must be positive"))
    }
}

/// Runs the load and prints the report.
fn bench(a: &BenchArgs) -> anyhow::Result<()> {
    if a.max_bytes == 0 || a.max_bytes > 65_000 {
        bail!("--max-bytes must be between 1 and 65000");
    }
    let to = a.to.clone().unwrap_or_else(|| match a.protocol {
        Wire::Msgpack => "udp://127.0.0.1:9123".into(),
        Wire::Statsd => "udp://127.0.0.1:8125".into(),
    });
    let target = match to
        .parse::<ListenAddr>()
        .with_context(|| format!("--to {to}"))?
    {
        ListenAddr::Udp(a) => Target::Udp(a),
        ListenAddr::Unixgram(p) => Target::Unixgram(p),
        other => {
            bail!("--to {other}: the load generator sends datagrams: use udp:// or unixgram://")
        }
    };
    let admin = match (&a.config, a.admin.as_str()) {
        (Some(config), _) => {
            let client = sonde::client::AgentArgs {
                config: Some(config.clone()),
            }
            .client()?;
            Some(Scrape(std::sync::Arc::new(move |metric| {
                sum_of(&client.get("/metrics").ok()?, metric)
            })))
        }
        (None, "none" | "") => None,
        (None, s) => Some(Scrape::open(
            s.parse::<SocketAddr>()
                .with_context(|| format!("--admin {s}: expected HOST:PORT or none"))?,
        )),
    };
    let pid = a.pid.or_else(|| match &target {
        Target::Udp(a) => sonde_loadgen::procfs::udp_owner(a.port()),
        Target::Unixgram(p) => sonde_loadgen::procfs::unix_owner(p),
    });
    if pid.is_none() {
        eprintln!("sonde bench: no process owns the target socket; CPU and memory will be n/a (give --pid)");
    }
    let load = Load {
        target,
        shape: Shape {
            protocol: match a.protocol {
                Wire::Msgpack => Protocol::Msgpack,
                Wire::Statsd => Protocol::Statsd,
            },
            series: a.series,
            tags: a.tags,
            points_per_datagram: a.points_per_datagram,
            max_bytes: a.max_bytes,
            mix: a.mix,
        },
        rate: a.rate,
        duration: a.duration.0,
        admin,
        pid,
        progress: !a.json && std::io::stderr().is_terminal(),
    };
    let report = load.run()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    match bench(&BenchArgs::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sonde bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
