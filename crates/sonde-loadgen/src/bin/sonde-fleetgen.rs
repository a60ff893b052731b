//! Loads a synthetic fleet's profiles into ClickHouse, as `clickhouse`
//! sinks would write them, and times the fleet's views over them.
//!
//! ```text
//! sonde-fleetgen load --profiles /var/lib/sonde/profiles --hosts 100 --hours 24 \
//!     --url http://127.0.0.1:8123 --database sonde --seed 1
//! sonde-fleetgen measure --store clickhouse://127.0.0.1:8123/sonde --runs 5
//! ```
//!
//! `load` makes each host's 60 s periods from real ones
//! ([`sonde_loadgen::fleet`]) and encodes each with the sink's own
//! [`Rows`], so the rows are byte for byte what agents send (each host's
//! stacks written again every day, as an agent's are); it inserts many
//! periods at once (`INSERT ... FORMAT RowBinary`), the stacks first.
//! `measure` prints each table's rows and compressed bytes per host-day
//! (active parts of `system.parts`), then the median time of the views
//! through [`FleetStore`], the statements `sonde profile --store` runs:
//! the top table (20 rows), the flame graph's stacks and a diff (two whole
//! top tables), over the last hour and the last day of the data, for all
//! hosts and for one.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use sonde_loadgen::fleet::{Fleet, Shape, Source};
use sonde_profile::pprof;
use sonde_sinks::clickhouse::rows::{self, Rows};
use sonde_sinks::clickhouse::schema;
use sonde_sinks::clickhouse::store::{Filter, FleetStore};

#[derive(Parser)]
#[command(
    name = "sonde-fleetgen",
    about = "Load a synthetic fleet's profiles into ClickHouse and time the fleet's views"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Make N hosts' periods from real ones and insert them.
    Load(Load),
    /// Print the tables' sizes and time the views.
    Measure(Measure),
}

#[derive(clap::Args)]
struct Load {
    /// Real periods: an agent's store directory (`DATA_DIR/profiles`) or
    /// `.pb.gz` files; repeatable.
    #[arg(long, required = true)]
    profiles: Vec<PathBuf>,
    /// Hosts.
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// Hours of 60 s periods per host.
    #[arg(long, default_value_t = 24)]
    hours: u64,
    /// The last period ends at this Unix second (rounded down to a
    /// minute); default now.
    #[arg(long)]
    end: Option<u64>,
    /// ClickHouse's HTTP interface.
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    url: String,
    /// The database (created with the sink's tables if absent).
    #[arg(long, default_value = "sonde")]
    database: String,
    /// The seed of every draw.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Share of the source's process names each host runs.
    #[arg(long, default_value_t = 0.75)]
    mix: f64,
    /// Deployed versions (cohorts of hosts whose binaries differ).
    #[arg(long, default_value_t = 3)]
    versions: u32,
    /// Scales every stack's samples (1: the source host's load).
    #[arg(long, default_value_t = 1.0)]
    load: f64,
    /// Which stack rows to insert: `all`, as the agents send them (each
    /// host's stacks again every day), or `new`, each stack once for the
    /// fleet. The tables end the same once merged (the copies collapse);
    /// `new` spares the load the copies' bytes, which are still counted.
    #[arg(long, default_value = "all", value_parser = ["all", "new"])]
    stacks: String,
    /// Sample rows per insert.
    #[arg(long, default_value_t = 2_000_000)]
    batch_rows: usize,
}

#[derive(clap::Args)]
struct Measure {
    /// The store, as `sonde profile --store` names it.
    #[arg(long, default_value = "clickhouse://127.0.0.1:8123/sonde")]
    store: String,
    /// Timed runs of each view (after one untimed).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Untimed runs of each view first.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// The spans, in hours back from the last period's end.
    #[arg(long, value_delimiter = ',', default_value = "1,24")]
    hours: Vec<u64>,
    /// The views to time: `top`, `flamegraph`, `diff`.
    #[arg(long, value_delimiter = ',', default_value = "top,flamegraph,diff")]
    views: Vec<String>,
    /// Time the views of all hosts too, not only those of one.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    all_hosts: bool,
    /// Time the views of one host.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    one_host: bool,
    /// The host of the one-host views; default the first.
    #[arg(long)]
    host: Option<String>,
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Load(a) => load(&a),
        Command::Measure(m) => measure(&m),
    }
}

/// Every period of `paths` (directories of `.pb.gz` files, or files).
fn read_profiles(paths: &[PathBuf]) -> anyhow::Result<Vec<sonde_profile::Profile>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut here: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("listing {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.to_str().is_some_and(|s| s.ends_with(".pb.gz")))
                .collect();
            here.sort();
            files.extend(here);
        } else {
            files.push(p.clone());
        }
    }
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            pprof::decode(&bytes).with_context(|| format!("reading {} as pprof", f.display()))
        })
        .collect()
}

/// One insert: a table and its RowBinary rows.
struct Insert {
    table: &'static str,
    rows: Vec<u8>,
}

fn post(agent: &ureq::Agent, url: &str, query: &str, body: &[u8]) -> anyhow::Result<()> {
    let mut answer = agent
        .post(url)
        .query("query", query)
        .send(body)
        .with_context(|| format!("{url}: {query}"))?;
    let status = answer.status().as_u16();
    if status != 200 {
        let text = answer.body_mut().read_to_string().unwrap_or_default();
        bail!("{url}: {query}: HTTP {status}: {}", text.trim());
    }
    Ok(())
}

fn load(a: &Load) -> anyhow::Result<()> {
    let source = Source::new(&read_profiles(&a.profiles)?);
    if source.periods() == 0 {
        bail!("no samples in {:?}", a.profiles);
    }
    eprintln!(
        "source: {} periods, {} distinct stacks, {:.0} samples a period",
        source.periods(),
        source.stacks(),
        source.samples_per_period()
    );
    let shape = Shape {
        seed: a.seed,
        mix: a.mix,
        versions: a.versions,
        load: a.load,
    };
    let fleet = Fleet::new(source, a.hosts, shape);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(600)))
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}/", a.url.trim_end_matches('/'));
    for ddl in schema::single(&a.database) {
        post(&agent, &url, &ddl, b"")?;
    }
    let end = a.end.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }) / 60
        * 60;
    let minutes = a.hours * 60;
    let first = end - minutes * 60;

    // Inserts run on a thread of their own, so that ClickHouse parses one
    // batch while the next is made; two wait at most (about 2 x 2 x
    // --batch-rows x 60 bytes).
    let (tx, rx) = mpsc::sync_channel::<Insert>(2);
    let db = a.database.clone();
    let sender_url = url.clone();
    let sender = std::thread::spawn(move || -> anyhow::Result<()> {
        for insert in rx {
            let q = format!("INSERT INTO {db}.{} FORMAT RowBinary", insert.table);
            post(&agent, &sender_url, &q, &insert.rows)?;
        }
        Ok(())
    });

    let started = Instant::now();
    let mut rows: Vec<Rows> = fleet.hosts().iter().map(|h| Rows::new(&h.name)).collect();
    let mut profile = fleet.profile();
    let (mut stacks, mut samples) = (Vec::new(), Vec::new());
    let (mut batch_rows, mut stack_rows, mut sample_rows, mut bytes) = (0usize, 0u64, 0u64, 0u64);
    let mut samples_total = 0u64;
    let only_new = a.stacks == "new";
    let mut waited = Duration::ZERO;
    let mut inserted_stacks = 0u64;
    let mut fleet_stacks = std::collections::HashSet::new();
    for minute in 0..minutes {
        for (host, r) in fleet.hosts().iter().zip(rows.iter_mut()) {
            // An agent writes each stack in use again every day (or
            // after a lost request, which a healthy store does not see).
            if (minute + host.phase) % (rows::SENT_FOR.as_secs() / 60) == 0 {
                *r = Rows::new(&host.name);
            }
            fleet.period(host, minute, first + minute * 60, &mut profile);
            samples_total += profile.samples();
            let out = r.period(&profile);
            if only_new {
                let before = fleet_stacks.len();
                new_stacks(&out.stacks, &mut fleet_stacks, &mut stacks);
                inserted_stacks += (fleet_stacks.len() - before) as u64;
            } else {
                stacks.extend_from_slice(&out.stacks);
                inserted_stacks += out.stack_rows as u64;
            }
            samples.extend_from_slice(&out.samples);
            stack_rows += out.stack_rows as u64;
            sample_rows += out.sample_rows as u64;
            batch_rows += out.sample_rows;
            bytes += (out.stacks.len() + out.samples.len()) as u64;
        }
        // An insert of more than about 256 MB of stacks (the hour when
        // every host writes its stacks again) would outgrow the server's
        // memory for one query.
        if batch_rows >= a.batch_rows || stacks.len() >= 256 << 20 || minute + 1 == minutes {
            for (table, part) in [
                ("profile_stacks", &mut stacks),
                ("profile_samples", &mut samples),
            ] {
                if !part.is_empty() {
                    let rows = std::mem::take(part);
                    let t = Instant::now();
                    if tx.send(Insert { table, rows }).is_err() {
                        break;
                    }
                    waited += t.elapsed();
                }
            }
            batch_rows = 0;
        }
        if (minute + 1) % 60 == 0 {
            eprintln!(
                "{:>3} h of {}: {sample_rows} sample rows, {stack_rows} stack rows, {:.0} MB, {:.0} s",
                (minute + 1) / 60,
                a.hours,
                bytes as f64 / 1e6,
                started.elapsed().as_secs_f64()
            );
        }
    }
    drop(tx);
    sender.join().expect("the insert thread panicked")?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} hosts x {} h ({first}..{end}): {} periods, {samples_total} samples, \
         {sample_rows} sample rows, {stack_rows} stack rows, {:.1} MB of RowBinary \
         ({:.0} bytes a host-period), {inserted_stacks} stack rows inserted; \
         loaded in {secs:.0} s ({:.0} rows/s; {:.0} s waiting for ClickHouse)",
        a.hosts,
        a.hours,
        a.hosts as u64 * minutes,
        bytes as f64 / 1e6,
        bytes as f64 / (a.hosts as u64 * minutes) as f64,
        (sample_rows + stack_rows) as f64 / secs,
        waited.as_secs_f64()
    );
    Ok(())
}

/// Appends to `out` the rows of `rows` (`profile_stacks` RowBinary:
/// the id, then two arrays of strings) whose id is not in `seen`.
fn new_stacks(rows: &[u8], seen: &mut std::collections::HashSet<u64>, out: &mut Vec<u8>) {
    fn len(b: &[u8], at: &mut usize) -> usize {
        let (mut n, mut shift) = (0usize, 0);
        loop {
            let byte = b[*at];
            *at += 1;
            n |= usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return n;
            }
            shift += 7;
        }
    }
    let mut at = 0;
    while at < rows.len() {
        let start = at;
        let id = u64::from_le_bytes(rows[at..at + 8].try_into().expect("8 bytes"));
        at += 8;
        for _ in 0..2 {
            for _ in 0..len(rows, &mut at) {
                let n = len(rows, &mut at);
                at += n;
            }
        }
        if seen.insert(id) {
            out.extend_from_slice(&rows[start..at]);
        }
    }
}

/// The median of `runs` timed calls of `f`, after `warmup` untimed, with
/// the last answer.
fn timed<T>(
    warmup: usize,
    runs: usize,
    mut f: impl FnMut() -> anyhow::Result<T>,
) -> anyhow::Result<(Duration, Vec<Duration>, T)> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(runs.max(1));
    let mut last = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        last = Some(f()?);
        times.push(t.elapsed());
    }
    let mut sorted = times.clone();
    sorted.sort();
    let last = last.expect("one run at least");
    Ok((sorted[sorted.len() / 2], times, last))
}

fn measure(m: &Measure) -> anyhow::Result<()> {
    let store = FleetStore::open(&m.store)?;
    let db = m
        .store
        .rsplit_once('/')
        .map_or("sonde", |(_, d)| d)
        .to_string();
    let q = |sql: &str| -> anyhow::Result<String> { Ok(store.query(sql)?.trim().to_string()) };
    let span = q(&format!(
        "SELECT toUInt32(min(period)), toUInt32(max(period)), uniqExact(host) FROM {db}.profile_samples FORMAT TabSeparated"
    ))?;
    let [first, last, hosts] = span.split('\t').collect::<Vec<_>>()[..] else {
        bail!("no samples in {}", store.describe());
    };
    let (first, last, hosts): (u64, u64, u64) = (first.parse()?, last.parse()?, hosts.parse()?);
    let end = last + 60;
    let host_days = hosts as f64 * (end - first) as f64 / 86_400.0;
    println!(
        "{hosts} hosts, {:.1} h: {host_days:.1} host-days",
        (end - first) as f64 / 3600.0
    );
    println!("table            parts        rows   rows/host-day   compressed MB   bytes/host-day   bytes/row   uncompressed MB");
    for table in schema::TABLES {
        let sizes = q(&format!(
            "SELECT count(), sum(rows), sum(data_compressed_bytes), sum(data_uncompressed_bytes) \
             FROM system.parts WHERE active AND database = '{db}' AND table = '{table}' FORMAT TabSeparated"
        ))?;
        let v: Vec<f64> = sizes
            .split('\t')
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let [parts, rows, comp, uncomp] = v[..] else {
            bail!("system.parts answered {sizes:?}");
        };
        println!(
            "{table:<16} {parts:>5} {rows:>11.0} {:>15.0} {:>15.1} {:>16.0} {:>11.2} {:>17.1}",
            rows / host_days,
            comp / 1e6,
            comp / host_days,
            comp / rows.max(1.0),
            uncomp / 1e6
        );
    }
    let host = match &m.host {
        Some(h) => h.clone(),
        None => q(&format!(
            "SELECT min(host) FROM {db}.profile_samples FORMAT TabSeparated"
        ))?,
    };
    println!("view        span  hosts      median ms   runs (ms)   answer");
    for &h in &m.hours {
        let (label, secs) = (format!("{h}h"), h * 3600);
        let mut scopes = Vec::new();
        if m.all_hosts {
            scopes.push(Vec::new());
        }
        if m.one_host {
            scopes.push(vec![host.clone()]);
        }
        for hosts in scopes {
            let filter = Filter {
                from_s: end.saturating_sub(secs),
                until_s: end,
                hosts: hosts.clone(),
                ..Filter::default()
            };
            let scope = if hosts.is_empty() {
                "all"
            } else {
                host.as_str()
            };
            let print = |view: &str, (median, times, answer): (Duration, Vec<Duration>, String)| {
                let runs: Vec<String> =
                    times.iter().map(|t| format!("{}", t.as_millis())).collect();
                println!(
                    "{view:<10} {label:>5}  {scope:<9} {:>10}   {}   {answer}",
                    median.as_millis(),
                    runs.join(" ")
                );
            };
            if m.views.iter().any(|v| v == "top") {
                print(
                    "top",
                    timed(m.warmup, m.runs, || {
                        let t = store.top(&filter, Some(20))?;
                        Ok(format!("{} samples, {} rows", t.samples, t.functions.len()))
                    })?,
                );
            }
            if m.views.iter().any(|v| v == "flamegraph") {
                print(
                    "flamegraph",
                    timed(m.warmup, m.runs, || {
                        let p = store.profile(&filter, false)?;
                        Ok(format!(
                            "{} samples, {} stacks",
                            p.samples(),
                            p.stacks.len()
                        ))
                    })?,
                );
            }
            if m.views.iter().any(|v| v == "diff") {
                print(
                    "diff",
                    timed(m.warmup, m.runs, || {
                        let (a, b) = (store.top(&filter, None)?, store.top(&filter, None)?);
                        Ok(format!(
                            "two tables of {} and {} functions",
                            a.functions.len(),
                            b.functions.len()
                        ))
                    })?,
                );
            }
        }
    }
    Ok(())
}
