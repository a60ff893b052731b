//! `sonde profile`: sample the host for a while (or read the running
//! agent's stored profiles with `--since`) and print the top functions, or
//! write pprof, folded stacks and a flame graph; `sonde profile diff`:
//! compare two profiles, files or ranges of the store; `sonde profile
//! merge`: read exports of several hosts as one.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sonde::config::HumanDuration;
use sonde_profile::classes::{self, Classifier};
use sonde_profile::collect::Stats;
use sonde_profile::cost::{Price, Prices};
use sonde_profile::select::Select;
use sonde_profile::store::{self, Ago, Store};
use sonde_profile::{flamegraph, pprof, views, Profile, Profiler, Root};
use sonde_sinks::clickhouse::store::{Filter, FleetStore};

/// Arguments of `sonde profile`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProfileArgs {
    #[command(subcommand)]
    command: Option<ProfileCommand>,
    /// How long to sample.
    #[arg(long, default_value = "10s", value_parser = str::parse::<HumanDuration>)]
    duration: HumanDuration,
    /// Samples per second per CPU (1 to 1000). The agent's always-on
    /// profiler samples at 19; a short run samples faster for detail.
    #[arg(long, default_value_t = 99)]
    frequency: u32,
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    out: Output,
    #[command(flatten)]
    files: Files,
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

/// Which stacks to keep.
#[derive(Args)]
struct SelectArgs {
    /// Only these processes (repeat for several); all when absent.
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Only threads whose name matches this regular expression (found
    /// anywhere in the name; `^worker-[0-9]+$` for the whole name).
    #[arg(long, value_name = "PATTERN")]
    thread: Option<String>,
    /// Only the stacks of this host (repeat for several).
    #[arg(long = "host", value_name = "NAME")]
    hosts: Vec<String>,
    /// Only the processes of this container: its id or a prefix of it
    /// (the 12 digits `docker ps` shows), or its Kubernetes pod's uid
    /// (repeat for several).
    #[arg(long = "container", value_name = "ID")]
    containers: Vec<String>,
}

impl SelectArgs {
    fn select(&self) -> anyhow::Result<Select> {
        Ok(Select {
            pids: self.pids.clone(),
            processes: Vec::new(),
            thread: match &self.thread {
                Some(t) => Some(Select::thread_pattern(t).map_err(anyhow::Error::msg)?),
                None => None,
            },
            hosts: self.hosts.clone(),
            containers: self.containers.clone(),
        })
    }
}

/// The files a profile can be written to.
#[derive(Args)]
struct Files {
    /// Write the profile as gzip-compressed pprof (`go tool pprof` reads it).
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Write folded stacks (`main;work;hot 752`), one line per stack.
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
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
    /// Read the fleet's profiles from the tables `clickhouse` sinks write,
    /// `clickhouse://HOST:PORT/DATABASE` (with --since): the views are
    /// computed there.
    #[arg(long, value_name = "URI", conflicts_with = "data_dir")]
    store: Option<String>,
}

impl StoreArgs {
    /// The `[profiler]` of --config, for its prices and class rules.
    fn profiler(&self) -> anyhow::Result<Option<sonde::config::Profiler>> {
        Ok(match &self.config {
            Some(c) => sonde::client::read_config(c)?.profiler,
            None => None,
        })
    }

    /// The store, and where its data_dir came from, in words.
    fn store(&self) -> anyhow::Result<(Store, String)> {
        let (data_dir, from) = match (&self.data_dir, &self.config) {
            (Some(d), _) => (d.clone(), "--data-dir".to_string()),
            (None, Some(c)) => (
                sonde::client::read_config(c)?.agent.data_dir,
                format!("agent.data_dir of {}", c.display()),
            ),
            (None, None) => (
                sonde::config::AgentSection::default().data_dir,
                "the default data_dir; --data-dir or --config names another".to_string(),
            ),
        };
        Ok((Store::reader(&data_dir), from))
    }

    /// The merged stored profiles of a span. Says on standard error which
    /// store it reads and why that one, since without --config or
    /// --data-dir it is a default the user may not know of; an error
    /// names the store too.
    fn read(&self, span: Ago) -> anyhow::Result<Profile> {
        let (store, from) = self.store()?;
        eprintln!("reading {span} from {} ({from})", store.path().display());
        Ok(store.read_ago(span)?)
    }

    /// The host a profile taken now names: --config's `agent.hostname`,
    /// else the kernel's host name.
    fn host(&self) -> anyhow::Result<String> {
        let configured = match &self.config {
            Some(c) => sonde::client::read_config(c)?
                .agent
                .hostname
                .map(|h| h.into_inner()),
            None => None,
        };
        Ok(configured
            .or_else(sonde_sinks::hostname)
            .unwrap_or_else(|| "localhost".into()))
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
    /// Root the flame graph and folded stacks at where each stack ran:
    /// `host`, `process`, `thread` or several, outermost first
    /// (`process,thread`).
    #[arg(long, value_name = "ROOTS", value_delimiter = ',')]
    by: Vec<Root>,
    /// Which way the flame graph grows: `flame` (the root at the bottom,
    /// as flamegraph.pl draws it) or `icicle` (the root at the top, as on
    /// the agent's /profiles page, which a browser shows first).
    #[arg(long, value_name = "LAYOUT", default_value = "flame", value_parser = parse_layout)]
    layout: flamegraph::Layout,
    /// What one core costs for an hour, with its currency ("0.048 USD"):
    /// the table adds each function's cost a year. Default: the
    /// `[profiler]` key of --config.
    #[arg(long, value_name = "PRICE", value_parser = parse_price)]
    core_cost_per_hour: Option<Price>,
    /// Grams of CO2e one busy core emits in an hour: the table adds each
    /// function's CO2 a year. Default: the `[profiler]` key of --config.
    #[arg(long, value_name = "GRAMS")]
    co2_grams_per_core_hour: Option<f64>,
    /// Print the hot-spot classes (compression, allocation, page faults,
    /// system calls, ...) instead of the top functions: each class's
    /// share, CPU-seconds and cost a year, its top functions and
    /// processes, and its remedy; with `diff`, how each class changed.
    /// The rules of --config's `[[profiler.classes]]` come first.
    #[arg(long)]
    classes: bool,
    /// Keep only the samples of one hot-spot class (see --classes; or
    /// `unclassified`), their stacks whole, for every view and file.
    #[arg(long, value_name = "CLASS")]
    class: Option<String>,
}

impl Output {
    /// The shipped class rules after those of `[[profiler.classes]]` in
    /// --config.
    fn classifier(&self, store: &StoreArgs) -> anyhow::Result<Classifier> {
        let rules = store.profiler()?.map(|p| p.classes).unwrap_or_default();
        Ok(Classifier::with(&rules)?)
    }

    /// `profile` cut to the class of --class, if given.
    fn only_class(&self, profile: Profile, store: &StoreArgs) -> anyhow::Result<Profile> {
        let Some(name) = &self.class else {
            return Ok(profile);
        };
        let classifier = self.classifier(store)?;
        classifier.keep(&profile, name).ok_or_else(|| {
            let names: Vec<&str> = classifier
                .classes()
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            anyhow::anyhow!(
                "--class {name}: no such class; the classes are {}, and {}",
                names.join(", "),
                classes::UNCLASSIFIED
            )
        })
    }

    /// Prints `view` as one JSON object with --json, else as `text` makes
    /// it.
    fn print<T: serde::Serialize>(&self, view: &T, text: fn(&T) -> String) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string(view)?);
        } else {
            print!("{}", text(view));
        }
        Ok(())
    }

    /// Prints the classes of `profile`.
    fn print_classes(&self, profile: &Profile, store: &StoreArgs) -> anyhow::Result<()> {
        let c = classes::classes(profile, &self.classifier(store)?, &self.prices(store)?, 5);
        self.print(&c, classes::classes_text)
    }

    /// Prints how the classes changed from `base` to `new`.
    fn print_class_diff(
        &self,
        base: &Profile,
        new: &Profile,
        store: &StoreArgs,
    ) -> anyhow::Result<()> {
        let (classifier, prices) = (self.classifier(store)?, self.prices(store)?);
        let d = classes::diff(
            &classes::classes(base, &classifier, &prices, 5),
            &classes::classes(new, &classifier, &prices, 5),
        );
        self.print(&d, classes::diff_text)
    }

    /// The prices of the flags, else of `[profiler]` in --config.
    fn prices(&self, store: &StoreArgs) -> anyhow::Result<Prices> {
        let configured = store.profiler()?.map(|p| p.prices).unwrap_or_default();
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

fn parse_layout(s: &str) -> Result<flamegraph::Layout, String> {
    s.parse()
}

#[derive(Subcommand)]
enum ProfileCommand {
    /// Compare two profiles (pprof files): what grew and what shrank.
    Diff {
        /// The earlier profile: a pprof file, or a range of the agent's
        /// store as AGO..AGO (`20m..10m`: from 20 to 10 minutes ago).
        base: String,
        /// The later profile, likewise (`10m..0s`).
        new: String,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Read pprof exports of several hosts (or periods) as one profile:
    /// one top table with each host's samples, one flame graph (`--by
    /// host` roots it at the hosts).
    Merge {
        /// The exports, each a gzip pprof file. An export without a host
        /// label is named after its file (`web-1` for `web-1.pb.gz`).
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        written: Files,
        // Not StoreArgs: merge reads no store, so --data-dir would do
        // nothing.
        /// The agent's configuration file, for the prices of its
        /// `[profiler]` (see --core-cost-per-hour).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Print the ClickHouse statements that create the tables of a
    /// `clickhouse` sink, for a DBA who creates them by hand: on one
    /// server, or with --cluster on every shard with `Distributed` tables
    /// over them.
    Schema {
        /// The database of the tables.
        #[arg(long, default_value = "sonde")]
        database: String,
        /// The cluster of the server's `remote_servers` to create them on
        /// (`ON CLUSTER`, `ReplicatedReplacingMergeTree`, `Distributed`).
        #[arg(long)]
        cluster: Option<String>,
    },
}

/// Runs `sonde profile`, `sonde profile diff` or `sonde profile merge`.
pub fn profile(args: &ProfileArgs) -> anyhow::Result<()> {
    match &args.command {
        Some(ProfileCommand::Diff {
            base,
            new,
            select,
            out,
            store,
        }) => {
            if let Some(uri) = &store.store {
                let range = |what: &str| {
                    Ago::parse(what).map_err(|e| {
                        anyhow::anyhow!("{e}: with --store, diff compares two ranges like 20m..10m")
                    })
                };
                return fleet_diff(uri, range(base)?, range(new)?, select, out, store);
            }
            let select = select.select()?;
            let base = select.apply(read_either(base, store)?);
            let new = select.apply(read_either(new, store)?);
            return class_or_plain_diff(base, new, out, store);
        }
        Some(ProfileCommand::Merge {
            files,
            select,
            out,
            written,
            config,
        }) => {
            let store = StoreArgs {
                config: config.clone(),
                data_dir: None,
                store: None,
            };
            let profile = merge(files, &select.select()?)?;
            let title = format!(
                "sonde profile merge: {} samples from {} hosts",
                profile.samples(),
                profile.hosts().len()
            );
            return show(profile, out, written, &store, None, title);
        }
        Some(ProfileCommand::Schema { database, cluster }) => {
            use sonde_sinks::clickhouse::schema;
            let statements = match cluster {
                None => schema::single(database),
                Some(c) => schema::cluster(database, c),
            };
            for s in statements {
                println!("{s};\n");
            }
            return Ok(());
        }
        None => {}
    }
    let select = args.select.select()?;
    if let Some(since) = args.since {
        let until = args.until.unwrap_or(Duration::ZERO);
        if until >= since {
            bail!("--until must be more recent (shorter ago) than --since");
        }
        if let Some(uri) = &args.store.store {
            return fleet(uri, Ago { since, until }, args);
        }
        let profile = select.apply(args.store.read(Ago { since, until })?);
        let title = format!(
            "sonde profile: {} samples stored from {} s to {} s ago",
            profile.samples(),
            since.as_secs(),
            until.as_secs()
        );
        return show(profile, &args.out, &args.files, &args.store, None, title);
    }
    if !(1..=sonde_profile::sampler::MAX_FREQUENCY).contains(&args.frequency) {
        bail!(
            "--frequency {}: must be between 1 and {} samples per second",
            args.frequency,
            sonde_profile::sampler::MAX_FREQUENCY
        );
    }
    let mut profiler = Profiler::start(args.frequency, &args.store.host()?)?;
    let deadline = Instant::now() + args.duration.0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        profiler.poll(left.as_millis().min(100) as i32);
    }
    profiler.stop();
    // Only the processes asked for are symbolised; threads and hosts are
    // known once they are.
    let pids = &args.select.pids;
    let (profile, stats) = profiler.take_where(|p| pids.is_empty() || pids.contains(&p.pid));
    let profile = select.apply(profile);
    let title = format!(
        "sonde profile: {} samples over {:.1} s at {} Hz",
        profile.samples(),
        profile.duration_ns as f64 / 1e9,
        profile.frequency
    );
    show(
        profile,
        &args.out,
        &args.files,
        &args.store,
        Some(stats),
        title,
    )
}

/// `sonde profile --store clickhouse://...`: the top table computed in
/// ClickHouse, and the flame graph, folded stacks and pprof from the
/// span's stacks aggregated there.
fn fleet(uri: &str, span: Ago, args: &ProfileArgs) -> anyhow::Result<()> {
    let fleet = FleetStore::open(uri)?;
    let filter = fleet_filter(span, &args.select)?;
    let out = &args.out;
    if out.by.iter().any(|r| *r != Root::Host) {
        bail!("the fleet store sums each stack over processes and threads: --by takes only host there");
    }
    eprintln!("reading {span} from {}", fleet.describe());
    let files = &args.files;
    if files.pprof.is_some() || files.folded.is_some() || out.flamegraph.is_some() {
        let profile = fleet.profile(&filter, !out.by.is_empty())?;
        let title = format!(
            "sonde profile: {} samples of the fleet from {} s to {} s ago",
            profile.samples(),
            span.since.as_secs(),
            span.until.as_secs()
        );
        write_files(&profile, out, files, title)?;
    }
    if out.classes || out.class.is_some() {
        // The span's stacks as ClickHouse sums them (one row per distinct
        // stack and host, never the rows of each period), classified here.
        let profile = fleet.profile(&filter, true)?;
        let title = format!(
            "sonde profile: {} samples of the fleet from {} s to {} s ago",
            profile.samples(),
            span.since.as_secs(),
            span.until.as_secs()
        );
        return show(profile, out, files, &args.store, None, title);
    }
    let mut top = fleet.top(&filter, Some(out.top))?;
    views::price_top(&mut top, &out.prices(&args.store)?);
    if out.json {
        println!("{}", serde_json::to_string(&top)?);
    } else {
        let per_sample = if top.samples == 0 {
            0.0
        } else {
            top.functions.iter().map(|r| r.self_cpu_s).sum::<f64>()
                / top
                    .functions
                    .iter()
                    .map(|r| r.self_samples)
                    .sum::<u64>()
                    .max(1) as f64
        };
        print!("{}", views::top_text(&top, per_sample));
    }
    Ok(())
}

/// The samples of `span` that `select` keeps, in a fleet store.
fn fleet_filter(span: Ago, s: &SelectArgs) -> anyhow::Result<Filter> {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let (from_s, until_s) = span.bounds(now_s);
    Ok(Filter {
        from_s,
        until_s,
        hosts: s.hosts.clone(),
        pids: s.pids.clone(),
        processes: Vec::new(),
        thread: s.thread.clone(),
        containers: s.containers.clone(),
    })
}

/// `sonde profile diff BASE NEW --store clickhouse://...`: each range's
/// per-function samples computed in ClickHouse, compared here; a
/// differential flame graph from each range's stacks aggregated there.
fn fleet_diff(
    uri: &str,
    base: Ago,
    new: Ago,
    select: &SelectArgs,
    out: &Output,
    store: &StoreArgs,
) -> anyhow::Result<()> {
    let fleet = FleetStore::open(uri)?;
    if out.by.iter().any(|r| *r != Root::Host) {
        bail!("the fleet store sums each stack over processes and threads: --by takes only host there");
    }
    let (fb, fnew) = (fleet_filter(base, select)?, fleet_filter(new, select)?);
    eprintln!("comparing {base} with {new} in {}", fleet.describe());
    if out.classes || out.class.is_some() {
        let (b, n) = (fleet.profile(&fb, true)?, fleet.profile(&fnew, true)?);
        return class_or_plain_diff(b, n, out, store);
    }
    if let Some(path) = &out.flamegraph {
        let by_host = !out.by.is_empty();
        let (b, n) = (fleet.profile(&fb, by_host)?, fleet.profile(&fnew, by_host)?);
        write_diff_flamegraph(path, &b, &n, out)?;
    }
    let mut d = views::diff_tops(
        &fleet.top(&fb, None)?,
        &fleet.top(&fnew, None)?,
        Some(out.top),
    );
    views::price_diff(&mut d, &out.prices(store)?);
    out.print(&d, views::diff_text)
}

/// The exports merged, each named by its host label or else its file,
/// and each cut to what `select` keeps first: an export left with no
/// samples is left out, so that its period does not widen the merged one
/// (`--host web-2` reads as web-2's export alone).
fn merge(files: &[PathBuf], select: &Select) -> anyhow::Result<Profile> {
    let mut merged: Option<(Profile, &Path)> = None;
    for path in files {
        let mut p = read_profile(path)?;
        if p.processes.iter().all(|p| p.host.is_empty()) {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let host = name.split('.').next().unwrap_or(name);
            for process in &mut p.processes {
                process.host = host.to_owned();
            }
        }
        let p = select.apply(p);
        if p.samples() == 0 {
            continue;
        }
        merged = Some(match merged {
            None => (p, path),
            Some((m, first)) => {
                if m.frequency != p.frequency {
                    bail!(
                        "{} was sampled at {} Hz and {} at {} Hz: the samples of one stand for \
                         more CPU time than the other's, so they do not add up; merge exports \
                         of one frequency",
                        first.display(),
                        m.frequency,
                        path.display(),
                        p.frequency
                    );
                }
                (m.merge(&p), first)
            }
        });
    }
    Ok(merged.map(|(m, _)| m).unwrap_or_default())
}

/// The diff of `base` and `new` (each cut to --class, if given): of the
/// classes with --classes, else of the functions.
fn class_or_plain_diff(
    base: Profile,
    new: Profile,
    out: &Output,
    store: &StoreArgs,
) -> anyhow::Result<()> {
    let (base, new) = (out.only_class(base, store)?, out.only_class(new, store)?);
    if out.classes {
        if let Some(path) = &out.flamegraph {
            write_diff_flamegraph(path, &base, &new, out)?;
        }
        return out.print_class_diff(&base, &new, store);
    }
    diff(&base, &new, out, &out.prices(store)?)
}

/// Writes the files asked for and prints the top table.
fn show(
    profile: Profile,
    out: &Output,
    files: &Files,
    store: &StoreArgs,
    stats: Option<Stats>,
    title: String,
) -> anyhow::Result<()> {
    let profile = out.only_class(profile, store)?;
    write_files(&profile, out, files, title)?;
    if out.classes {
        return out.print_classes(&profile, store);
    }
    let mut top = views::top(&profile, Some(out.top));
    views::price_top(&mut top, &out.prices(store)?);
    if out.json {
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

/// Writes the pprof, folded stacks and flame graph asked for.
fn write_files(
    profile: &Profile,
    out: &Output,
    files: &Files,
    title: String,
) -> anyhow::Result<()> {
    if let Some(path) = &files.pprof {
        write(path, &pprof::encode(profile))?;
    }
    if let Some(path) = &files.folded {
        write(path, views::folded(&profile.rooted(&out.by)).as_bytes())?;
    }
    if let Some(path) = &out.flamegraph {
        let options = flamegraph::Options {
            title,
            roots: out.by.clone(),
            layout: out.layout,
            ..Default::default()
        };
        write(path, flamegraph::render(profile, &options).as_bytes())?;
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
        write_diff_flamegraph(path, base, new, out)?;
    }
    let mut d = views::diff(base, new, Some(out.top));
    views::price_diff(&mut d, prices);
    out.print(&d, views::diff_text)
}

/// Writes the differential flame graph of `base` and `new` to `path`.
fn write_diff_flamegraph(
    path: &Path,
    base: &Profile,
    new: &Profile,
    out: &Output,
) -> anyhow::Result<()> {
    let options = flamegraph::Options {
        title: "sonde profile diff: red grew, blue shrank (widths from the new profile)"
            .to_string(),
        roots: out.by.clone(),
        layout: out.layout,
        ..Default::default()
    };
    write(
        path,
        flamegraph::render_diff(base, new, &options).as_bytes(),
    )
}

fn read_profile(path: &Path) -> anyhow::Result<Profile> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    pprof::decode(&bytes).with_context(|| format!("reading {} as pprof", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_profile::{Function, Process, ProfileBuilder};

    fn export(dir: &Path, name: &str, host: &str, frequency: u32) -> PathBuf {
        let mut b = ProfileBuilder::new(frequency, 0, 1_000_000_000);
        let process = Process {
            pid: 1,
            name: "app".into(),
            host: host.into(),
            ..Default::default()
        };
        let main = Function {
            name: "main".into(),
            module: "/bin/app".into(),
        };
        b.add(&process, [&main], 5);
        let path = dir.join(name);
        std::fs::write(&path, pprof::encode(&b.finish())).unwrap();
        path
    }

    #[test]
    fn an_export_without_a_host_is_named_after_its_file_and_frequencies_must_agree() {
        let dir = tempfile::tempdir().unwrap();
        let named = export(dir.path(), "a.pb.gz", "web-1", 19);
        let unnamed = export(dir.path(), "web-7.pb.gz", "", 19);
        let all = Select::default();
        let merged = merge(&[named.clone(), unnamed.clone()], &all).unwrap();
        let hosts: Vec<(String, u64)> = merged
            .hosts()
            .into_iter()
            .map(|h| (h.host, h.samples))
            .collect();
        assert_eq!(hosts, [("web-1".into(), 5), ("web-7".into(), 5)]);
        let faster = export(dir.path(), "b.pb.gz", "web-2", 99);
        let e = merge(&[named.clone(), faster.clone()], &all)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at 19 Hz") && e.contains("at 99 Hz"), "{e}");
        // Filtered out first, an export neither counts nor clashes.
        let web_7 = Select {
            hosts: vec!["web-7".into()],
            ..Select::default()
        };
        let alone = merge(&[named, faster, unnamed], &web_7).unwrap();
        assert_eq!(alone.samples(), 5);
        assert_eq!(alone.frequency, 19);
    }
}
