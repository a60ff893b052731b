//! `sonde profile`: sample the host for a while (or read the running
//! agent's stored profiles with `--since`) and print the top functions, or
//! write pprof, folded stacks and a flame graph; `sonde profile diff`:
//! compare two profiles, files or ranges of the store.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sonde::config::HumanDuration;
use sonde_profile::collect::Stats;
use sonde_profile::cost::{Price, Prices};
use sonde_profile::store::{self, Ago, Store};
use sonde_profile::{flamegraph, pprof, views, Profile, Profiler};

/// Arguments of `sonde profile`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProfileArgs {
    #[command(subcommand)]
    diff: Option<DiffCommand>,
    /// How long to sample.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: HumanDuration,
    /// Samples per second per CPU (1 to 1000). The agent's always-on
    /// profiler samples at 19; a short run samples faster for detail.
    #[arg(long, default_value_t = 99)]
    frequency: u32,
    /// Only these processes (repeat for several); all when absent.
    #[arg(long = "pid")]
    pids: Vec<u32>,
    #[command(flatten)]
    out: Output,
    /// Write the profile as gzip-compressed pprof (`go tool pprof` reads it).
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Write folded stacks (`main;work;hot 752`), one line per stack.
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
    /// Read the running agent's stored profiles from this long ago
    /// (`10m`; units s, m, h, d) instead of sampling.
    #[arg(long, value_parser = store::parse_ago)]
    since: Option<Duration>,
    /// With --since: up to this long ago (default now).
    #[arg(long, value_parser = store::parse_ago, requires = "since")]
    until: Option<Duration>,
    #[command(flatten)]
    store: StoreArgs,
}

/// Where the agent's stored profiles are.
#[derive(Args)]
struct StoreArgs {
    /// The agent's configuration file, for its `agent.data_dir`.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The agent's data directory (overrides --config; default the
    /// embedded defaults' /var/lib/sonde).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

impl StoreArgs {
    fn store(&self) -> anyhow::Result<Store> {
        let data_dir = match (&self.data_dir, &self.config) {
            (Some(d), _) => d.clone(),
            (None, Some(c)) => crate::load(c)?.agent.data_dir,
            (None, None) => sonde::config::AgentSection::default().data_dir,
        };
        Ok(Store::reader(&data_dir))
    }

    /// The merged stored profiles of a span.
    fn read(&self, span: Ago) -> anyhow::Result<Profile> {
        Ok(self.store()?.read_ago(span)?)
    }
}

/// The output options both forms share.
#[derive(Args)]
struct Output {
    /// How many functions to print.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write a flame graph (SVG).
    #[arg(long, value_name = "FILE.svg")]
    flamegraph: Option<PathBuf>,
    /// What one core costs for an hour, with its currency ("0.048 USD"):
    /// the table adds each function's cost a year. Default: the
    /// `[profiler]` key of --config.
    #[arg(long, value_name = "PRICE", value_parser = parse_price)]
    core_cost_per_hour: Option<Price>,
    /// Grams of CO2e one busy core emits in an hour: the table adds each
    /// function's CO2 a year. Default: the `[profiler]` key of --config.
    #[arg(long, value_name = "GRAMS")]
    co2_grams_per_core_hour: Option<f64>,
}

impl Output {
    /// The prices of the flags, else of `[profiler]` in --config.
    fn prices(&self, store: &StoreArgs) -> anyhow::Result<Prices> {
        let configured = match &store.config {
            Some(c) => crate::load(c)?
                .profiler
                .map(|p| p.prices)
                .unwrap_or_default(),
            None => Prices::default(),
        };
        if let Some(g) = self.co2_grams_per_core_hour {
            if !(g.is_finite() && g >= 0.0) {
                bail!("--co2-grams-per-core-hour {g}: must be a number of grams, 0 or more");
            }
        }
        Ok(Prices {
            core_cost_per_hour: self
                .core_cost_per_hour
                .clone()
                .or(configured.core_cost_per_hour),
            co2_grams_per_core_hour: self
                .co2_grams_per_core_hour
                .or(configured.co2_grams_per_core_hour),
        })
    }
}

fn parse_price(s: &str) -> Result<Price, String> {
    s.parse()
}

#[derive(Subcommand)]
enum DiffCommand {
    /// Compare two profiles (pprof files): what grew and what shrank.
    Diff {
        /// The earlier profile: a pprof file, or a range of the agent's
        /// store as AGO..AGO (`20m..10m`: from 20 to 10 minutes ago).
        base: String,
        /// The later profile, likewise (`10m..0s`).
        new: String,
        /// Only these processes (repeat for several); all when absent.
        #[arg(long = "pid")]
        pids: Vec<u32>,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
}

fn parse_duration(s: &str) -> Result<HumanDuration, String> {
    s.parse()
}

/// Runs `sonde profile` or `sonde profile diff`.
pub fn profile(args: &ProfileArgs) -> anyhow::Result<()> {
    if let Some(DiffCommand::Diff {
        base,
        new,
        pids,
        out,
        store,
    }) = &args.diff
    {
        let keep = |p: &sonde_profile::Process| pids.is_empty() || pids.contains(&p.pid);
        let base = read_either(base, store)?.filter(keep);
        let new = read_either(new, store)?.filter(keep);
        return diff(&base, &new, out, &out.prices(store)?);
    }
    if let Some(since) = args.since {
        let until = args.until.unwrap_or(Duration::ZERO);
        if until >= since {
            bail!("--until must be more recent (shorter ago) than --since");
        }
        let profile = args.store.read(Ago { since, until })?;
        let profile = if args.pids.is_empty() {
            profile
        } else {
            profile.filter(|p| args.pids.contains(&p.pid))
        };
        return show(args, profile, None);
    }
    if !(1..=sonde_profile::sampler::MAX_FREQUENCY).contains(&args.frequency) {
        bail!(
            "--frequency {}: must be between 1 and {} samples per second",
            args.frequency,
            sonde_profile::sampler::MAX_FREQUENCY
        );
    }
    let mut profiler = Profiler::start(args.frequency)?;
    let deadline = Instant::now() + args.duration.0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        profiler.poll(left.as_millis().min(100) as i32);
    }
    profiler.stop();
    let (profile, stats) =
        profiler.take_where(|p| args.pids.is_empty() || args.pids.contains(&p.pid));
    show(args, profile, Some(stats))
}

/// Writes the files asked for and prints the top table.
fn show(args: &ProfileArgs, profile: Profile, stats: Option<Stats>) -> anyhow::Result<()> {
    if let Some(path) = &args.pprof {
        write(path, &pprof::encode(&profile))?;
    }
    if let Some(path) = &args.folded {
        write(path, views::folded(&profile).as_bytes())?;
    }
    if let Some(path) = &args.out.flamegraph {
        let options = flamegraph::Options {
            title: format!(
                "sonde profile: {} samples over {:.1} s at {} Hz",
                profile.samples(),
                profile.duration_ns as f64 / 1e9,
                profile.frequency
            ),
            ..Default::default()
        };
        write(path, flamegraph::render(&profile, &options).as_bytes())?;
    }
    let mut top = views::top(&profile, Some(args.out.top));
    views::price_top(&mut top, &args.out.prices(&args.store)?);
    if args.out.json {
        println!("{}", serde_json::to_string(&top)?);
    } else {
        print!("{}", views::top_text(&top, profile.seconds_per_sample()));
        if let Some(stats) = stats {
            let user = stats.user.max(1) as f64;
            eprintln!(
                "user stacks unwound to their entry point: {:.1}% of {}; lost records: {}",
                stats.user_complete as f64 * 100.0 / user,
                stats.user,
                stats.lost
            );
        }
    }
    Ok(())
}

/// A pprof file, or a range `AGO..AGO` of the agent's store.
fn read_either(what: &str, store: &StoreArgs) -> anyhow::Result<Profile> {
    let path = Path::new(what);
    if path.exists() {
        return read_profile(path);
    }
    if what.contains("..") {
        return store.read(Ago::parse(what).map_err(anyhow::Error::msg)?);
    }
    bail!("{what:?} is neither a file nor a range of the agent's store like 20m..10m")
}

fn diff(base: &Profile, new: &Profile, out: &Output, prices: &Prices) -> anyhow::Result<()> {
    if let Some(path) = &out.flamegraph {
        let options = flamegraph::Options {
            title: "sonde profile diff: red grew, blue shrank (widths from the new profile)"
                .to_string(),
            ..Default::default()
        };
        write(
            path,
            flamegraph::render_diff(base, new, &options).as_bytes(),
        )?;
    }
    let mut d = views::diff(base, new, Some(out.top));
    views::price_diff(&mut d, prices);
    if out.json {
        println!("{}", serde_json::to_string(&d)?);
    } else {
        print!("{}", views::diff_text(&d));
    }
    Ok(())
}

fn read_profile(path: &Path) -> anyhow::Result<Profile> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    pprof::decode(&bytes).with_context(|| format!("reading {} as pprof", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
