//! `sonde`: the host telemetry agent's command line.

mod profile;
mod run;
mod send;
mod tap;
mod top;

use std::path::PathBuf;

#[cfg(all(feature = "mimalloc", feature = "jemalloc"))]
compile_error!("choose one allocator feature: mimalloc or jemalloc");

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts; `_RJEM_MALLOC_CONF` in the
/// environment still overrides them.
///
/// `dirty_decay_ms:0` returns freed pages to the kernel at once rather
/// than over 10 s. The agent frees a window's sketches and output batch at
/// every flush, and pages kept dirty by one thread's arena cannot serve
/// another's allocations: peak RSS at 250k series fell by about a third
/// with no measurable change in CPU per point (docs/benchmarks/LOG.md,
/// "returning freed pages at once").
///
/// A thin pointer to a NUL-terminated string, as C's `const char *`.
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 17] = b"dirty_decay_ms:0\0";
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use sonde::{client, config};

/// The version and the commit it was built from (`unknown` outside a git
/// checkout), as `sonde --version` prints them.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SONDE_COMMIT"), ")");

/// sonde: a host telemetry agent: metrics, logs and profiles of this host,
/// sent where you choose.
///
/// It receives metrics (StatsD, DogStatsD and msgpack) and aggregates them
/// per window, tails log files, and samples the host's CPU profile; sinks
/// write them to the console, files, Prometheus, OTLP, InfluxDB, Graphite,
/// HTTP, TCP or Kafka. Start with `sonde default-config > sonde.toml`, edit
/// it, check it with `sonde validate sonde.toml`, and run it with `sonde
/// run --config sonde.toml`.
#[derive(Parser)]
#[command(version = VERSION)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent (the default command).
    ///
    /// Without --config it runs the embedded defaults (`sonde
    /// default-config` prints them): msgpack on udp://127.0.0.1:9123 and
    /// unixgram:///tmp/metric.sock, StatsD on udp://127.0.0.1:8125, 30 s
    /// windows printed to the console. The config is checked as `sonde
    /// validate` checks it before anything starts. SIGHUP reloads the
    /// file; SIGTERM and SIGINT flush and stop.
    ///
    /// The agent's own log goes to stderr at level `info`; the SONDE_LOG
    /// environment variable sets another level or filter, as
    /// `SONDE_LOG=debug` or `SONDE_LOG=info,sonde_metrics=debug`.
    Run {
        /// The configuration file (TOML).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// How the agent's own log lines (on stderr) are written: `text`
        /// for people, `json` (one object a line) for a log pipeline.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Check a configuration file without starting anything.
    ///
    /// Checks what the agent would refuse at start: the TOML, every key
    /// and value, how sinks and sources connect, and what the config needs
    /// of this host (users and groups of unix sockets, the directories of
    /// file sinks, agent.data_dir when something keeps data there). Run it
    /// as the user the agent runs as. Exits non-zero naming the key, its
    /// line and the fix.
    Validate {
        /// The configuration file (TOML).
        #[arg(value_name = "FILE", required_unless_present = "config")]
        file: Option<PathBuf>,
        /// The same, as a flag.
        #[arg(long, short, conflicts_with = "file")]
        config: Option<PathBuf>,
    },
    /// Print the embedded default configuration, a starting point for a
    /// file of your own.
    DefaultConfig,
    /// Send one metric point to a running agent.
    Send(send::SendArgs),
    /// Drive a running agent with a load and report loss, CPU and memory.
    ///
    /// Runs the load generator, `sonde-bench` (beside this binary or on
    /// PATH; `cargo build --release -p sonde-bench`), with these arguments:
    /// `sonde bench --help` lists them. The agent itself does not link it.
    #[command(disable_help_flag = true)]
    Bench {
        /// The load generator's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Print the address that signs a browser in to the agent's admin
    /// site.
    ///
    /// With agent.admin_auth = "token", the address carries the token from
    /// agent.admin_token_file once: opening it sets a cookie and leaves
    /// the address without it. Run it as the agent's user, or as a member
    /// of agent.admin_token_group: whoever can read the file can read the
    /// site. Scripts send the token as `Authorization: Bearer TOKEN`
    /// instead (`--token` prints it alone).
    ///
    /// With a unix:// agent.admin_listen it prints the curl command that
    /// reads the site through the socket file (with the token, if asked
    /// for), and says how to forward the file to a port for a browser.
    AdminUrl {
        #[command(flatten)]
        agent: client::AgentArgs,
        /// Print the token alone, for `Authorization: Bearer`.
        #[arg(long)]
        token: bool,
    },
    /// Show what flows through a running agent, refreshed every second:
    /// per receiver points/s and drops by reason, per log source lines/s
    /// and bytes behind, per sink sent/s, queue, retries and errors, and
    /// the metric names with the most points/s.
    ///
    /// It reads the agent's admin site, with the token when the agent
    /// asks for one: run it as the agent's user, or as a member of
    /// agent.admin_token_group.
    Top(top::TopArgs),
    /// Print a sample of the points or log records flowing through a
    /// running agent now, as they were parsed, with their tags or fields.
    ///
    /// Points of every receiver by default; --receiver, --metric and
    /// --source narrow it. The agent keeps up to 1,000 between two polls
    /// (four a second) and counts the rest. Reads the admin site as
    /// `sonde top` does.
    Tap(tap::TapArgs),
    /// Sample every process's stacks for a while and print the functions
    /// that took the most CPU, or read the agent's stored profiles.
    ///
    /// Sampling needs perf-event permission: root, CAP_PERFMON, or
    /// kernel.perf_event_paranoid <= 0.
    Profile(Box<profile::ProfileArgs>),
}

/// `sonde bench`: runs `sonde-bench` with `args` in this process's place.
/// The load generator is a binary of its own so that the agent does not
/// link it (nor the Kafka client its log checker uses).
fn bench(args: &[std::ffi::OsString]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("sonde-bench")))
        .filter(|p| p.is_file());
    let program = beside.unwrap_or_else(|| PathBuf::from("sonde-bench"));
    let e = std::process::Command::new(&program).args(args).exec();
    if e.kind() == std::io::ErrorKind::NotFound {
        anyhow::bail!(
            "sonde bench runs the load generator sonde-bench, which is neither beside this \
             binary nor on PATH: build it with `cargo build --release -p sonde-bench`"
        );
    }
    Err(e).with_context(|| format!("running {}", program.display()))
}

/// Reads a configuration file and checks it, and what it needs of this
/// host ([`config::load`]): `sonde validate`, `sonde run` and every reload.
fn load(path: &PathBuf) -> anyhow::Result<config::Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    config::load(&text).with_context(|| format!("invalid config file {}", path.display()))
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// `2026-11-27T14:58:23.123Z  INFO sonde: profiler running frequency=19`.
    Text,
    /// `{"timestamp":"…","level":"INFO","fields":{"message":"profiler running","frequency":19},"target":"sonde"}`.
    Json,
}

/// The agent's own log on stderr, which journald takes under systemd.
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SONDE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colours for a terminal only, not for a log file or journald.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default = Command::Run {
        config: None,
        log_format: LogFormat::Text,
    };
    let result = match cli.command.unwrap_or(default) {
        Command::Run { config, log_format } => {
            init_logging(log_format);
            match &config {
                Some(path) => load(path),
                None => config::load(config::DEFAULT_CONFIG).context("embedded default config"),
            }
            .and_then(|c| run::run(c, config))
        }
        Command::Validate { file, config } => {
            let config = file.or(config).unwrap_or_default();
            load(&config).map(|c| {
                println!(
                    "{}: ok ({} receivers, {} sinks, {:?} windows, {} log sources)",
                    config.display(),
                    c.receivers.len(),
                    c.sinks.len(),
                    c.aggregate.interval,
                    c.logs.len()
                );
            })
        }
        Command::DefaultConfig => {
            print!("{}", config::DEFAULT_CONFIG);
            Ok(())
        }
        Command::AdminUrl { agent, token } => client::admin_url(&agent, token),
        Command::Send(args) => send::send(&args),
        Command::Bench { args } => bench(&args),
        Command::Top(args) => top::top(&args),
        Command::Tap(args) => tap::tap(&args),
        Command::Profile(args) => profile::profile(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sonde: {e:#}");
            ExitCode::FAILURE
        }
    }
}
