//! Wiring: binds every socket first (so a bad address fails the start),
//! then starts sinks, receive workers, the flusher and the HTTP thread, and
//! waits for signals.
//!
//! # Reload
//!
//! SIGHUP reads the config file again. A file that does not parse or
//! validate is refused with a log line and the running config stays. Else
//! receivers and sinks whose settings did not change keep running with
//! their data (series, windows, buffers); removed ones stop (a receiver
//! hands its open window to the flusher first; a sink delivers what it has,
//! its disk buffer staying for later); added ones start, and a new sink gets
//! every window flushed from the moment the reload began. `[agent]`,
//! `[histograms]`, `[[logs]]`, `[profiler]`, `[host_metrics]`, `prometheus_exporter` sinks and sinks that
//! take log sources apply at the next start; a reload that changes them
//! says so in the log. One part of `[agent]` does apply: with
//! `agent.admin_tls` set (and its files unchanged in the config), the
//! certificate and key files are read again, so that a renewed
//! certificate is served from the next handshake on; files that do not
//! load are refused with a log line and the old pair stays.
//! `[[scrape]]` targets apply at once: unchanged ones keep their
//! counters, added ones start, removed ones stop (see `run/scrape.rs`).
//!
//! # Under systemd
//!
//! With `$NOTIFY_SOCKET` set (a unit of `Type=notify`), the agent says
//! `READY=1` once every receiver is bound, every log source watches its
//! directories and has scanned its globs, and the admin site answers,
//! `RELOADING=1` then `READY=1` around a SIGHUP, and `STOPPING=1` when a
//! stop begins (sd_notify(3)); without it, nothing.
//!
//! # Clean shutdown
//!
//! On SIGTERM or SIGINT the log sources stop reading, wait up to 10 s for
//! their sinks to acknowledge what was sent, and save their checkpoints;
//! then the flusher closes the open window early and
//! flushes it; the workers hand over their last shards and exit (removing
//! their unix socket files); the `dogstatsd_events` source sends the
//! events they took and waits for its sinks; the sinks deliver what is queued, for up to
//! their `shutdown_grace`, and exit; then the admin site's socket file,
//! if it listens on one, is removed, and `run` returns.

mod scrape;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use sd_notify::NotifyState;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use sonde::config::{self, Config, ConfigError, Receiver, Sink};
use sonde_admin::http::{self, Site};
use sonde_admin::telemetry::Telemetry;
use sonde_aggregate::AggregateConfig;
use sonde_log_sources::events::{EventQueue, EVENTS_SOURCE};
use sonde_log_sources::{self as logs, LogInput, LogStats, RunningSource, SourceInfo};
use sonde_metrics::flusher::{self, Flusher, FlusherCommand};
use sonde_metrics::receiver::{self, Bound, Control, Handoff, Ingest, ReceiverStats};
use sonde_sinks::registry::Start;
use sonde_sinks::sink::{SinkHandle, SinkStats};

/// Shards that may wait for the flusher before a worker blocks: two
/// windows of a generous number of workers.
const SHARD_QUEUE: usize = 64;

/// A receiver's running workers.
struct RunningReceiver {
    config: Receiver,
    retire: Arc<AtomicBool>,
    stats: Arc<ReceiverStats>,
    workers: Vec<JoinHandle<()>>,
}

/// A running sink.
struct RunningSink {
    config: Sink,
    stats: Arc<SinkStats>,
    threads: Vec<JoinHandle<()>>,
}

/// What starting receivers needs.
struct Ctx {
    aggregate: Arc<AggregateConfig>,
    control: Arc<Control>,
    shard_tx: SyncSender<Handoff>,
    telemetry: Arc<Telemetry>,
    /// Where StatsD workers send DogStatsD events, when a sink takes them.
    events: Option<EventQueue>,
    /// Where OTLP receivers send log records, by source name, for the
    /// sources a sink takes.
    otlp_logs: OtlpQueues,
}

/// Binds a receiver's sockets (resolving the unix file's owner and group).
fn bind(r: &Receiver) -> anyhow::Result<Vec<Bound>> {
    let mut options = r.options;
    if let Some(o) = &r.owner {
        options.owner = Some(
            sonde_runtime::socket::user_id(o)
                .with_context(|| format!("owner {o:?} of the socket file of {}", r.listen))?,
        );
    }
    if let Some(g) = &r.group {
        options.group = Some(
            sonde_runtime::socket::group_id(g)
                .with_context(|| format!("group {g:?} of the socket file of {}", r.listen))?,
        );
    }
    let socks = receiver::bind(&r.listen, options)?;
    let first = &socks[0];
    tracing::info!(
        receiver = %first.local_addr(),
        protocol = r.protocol.as_str(),
        workers = socks.len(),
        receive_buffer = first.receive_buffer(),
        "listening"
    );
    Ok(socks)
}

/// A receiver that cannot bind, as an error at its `listen` with the fix;
/// other errors (its socket file's owner or group, which loading the
/// config checks) as they are.
fn bind_error(config: &Config, i: usize, r: &Receiver, e: anyhow::Error) -> anyhow::Error {
    let fix = match e.downcast_ref::<receiver::BindError>() {
        Some(receiver::BindError::Io { error, .. }) => {
            config::listen_fix(error, r.listen.unix_path().is_some())
        }
        Some(receiver::BindError::InUse(_)) => {
            "another process (a second agent?) serves that socket file: stop it, or choose another path"
        }
        Some(receiver::BindError::NotSocket(_)) => {
            "listen on a path of its own: the agent replaces a stale socket file there, never another file"
        }
        None => return e,
    };
    config
        .error(format!("receivers[{i}].listen"), format!("{e:#}"), fix)
        .into()
}

/// A start error that names a key ([`sonde_sinks::registry::Start::key`]), placed
/// at the key's line; others as they are.
fn placed(config: &Config, e: anyhow::Error) -> anyhow::Error {
    match e.downcast::<ConfigError>() {
        Ok(c) => config.error(c.key, c.problem, c.fix).into(),
        Err(e) => e,
    }
}

/// A log source whose checkpoint directory cannot be made, as an error
/// at `agent.data_dir` with the fix; other errors as they are.
fn checkpoint_error(config: &Config, e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<logs::source::StartError>() {
        Some(logs::source::StartError::Dir { .. }) => config
            .error("agent.data_dir", format!("{e:#}"), config::DATA_DIR_FIX)
            .into(),
        _ => e,
    }
}

/// The admin token, read or made at `agent.admin_token_file`, when
/// `agent.admin_auth = "token"`.
fn admin_token(config: &Config) -> anyhow::Result<Option<sonde_admin::http::Token>> {
    if config.agent.admin_auth != config::AdminAuth::Token {
        return Ok(None);
    }
    let path = config.agent.admin_token_file();
    let fix = "make its directory writable by the user sonde runs as, or set agent.admin_token_file to a path it can write";
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            config.error(
                "agent.admin_token_file",
                format!("cannot make {}: {e}", dir.display()),
                fix,
            )
        })?;
    }
    let group = match &config.agent.admin_token_group {
        Some(g) => Some(sonde_runtime::socket::group_id(g.get_ref()).map_err(|e| {
            config.error(
                "agent.admin_token_group",
                e.to_string(),
                "name a group of this host (`getent group` lists them)",
            )
        })?),
        None => None,
    };
    let token = sonde_admin::http::Token::load_or_create(&path, group)
        .map_err(|e| config.error("agent.admin_token_file", e.to_string(), fix))?;
    tracing::info!(
        token_file = %path.display(),
        "the admin site asks for its token (everything but /health); `sonde admin-url` prints the address that signs a browser in"
    );
    Ok(Some(token))
}

/// Binds the admin site's listener: a TCP port, or a unix socket file
/// with its mode and group (a stale file replaced, as receivers do).
fn bind_admin(config: &Config, listen: &config::AdminListen) -> anyhow::Result<http::Listener> {
    let off = "; or write admin_listen = \"\" to turn the admin listener off";
    let path = match listen {
        config::AdminListen::Tcp(addr) => {
            return http::bind(*addr).map(Into::into).map_err(|e| {
                config
                    .error(
                        "agent.admin_listen",
                        format!("cannot listen on {addr}: {e}"),
                        format!("{}{off}", config::listen_fix(&e, false)),
                    )
                    .into()
            })
        }
        config::AdminListen::Unix(path) => path,
    };
    let group = match &config.agent.admin_socket_group {
        Some(g) => Some(sonde_runtime::socket::group_id(g.get_ref()).map_err(|e| {
            config.error(
                "agent.admin_socket_group",
                e.to_string(),
                "name a group of this host (`getent group` lists them)",
            )
        })?),
        None => None,
    };
    let options = receiver::SocketOptions {
        mode: config.agent.admin_socket_mode(),
        group,
        ..receiver::SocketOptions::default()
    };
    http::bind_unix(path, options).map_err(|e| {
        let fix = match &e {
            receiver::BindError::Io { error, .. } => config::listen_fix(error, true),
            receiver::BindError::InUse(_) => {
                "another process (a second agent?) serves that socket file: stop it, or choose another path"
            }
            receiver::BindError::NotSocket(_) => {
                "listen on a path of its own: the agent replaces a stale socket file there, never another file"
            }
        };
        config
            .error("agent.admin_listen", e.to_string(), format!("{fix}{off}"))
            .into()
    })
}

/// The admin site's certificate and key (`agent.admin_tls`), read at
/// start.
fn admin_tls(config: &Config) -> anyhow::Result<Option<http::Tls>> {
    let Some(t) = &config.agent.admin_tls else {
        return Ok(None);
    };
    http::Tls::load(t.cert_file.get_ref(), t.key_file.get_ref())
        .map(Some)
        .map_err(|e| config::admin_tls_error(config, &e).into())
}

/// On SIGHUP: the admin site's certificate and key read again, when the
/// running site serves TLS from the same files (other changes to
/// `admin_tls` apply at the next start, as the rest of `[agent]`).
fn reload_admin_tls(old: &Config, new: &Config, running: Option<&http::Tls>) {
    let (Some(tls), Some(files)) = (running, &new.agent.admin_tls) else {
        return;
    };
    if old.agent.admin_tls.as_ref() != Some(files) {
        return;
    }
    match tls.reload(files.cert_file.get_ref(), files.key_file.get_ref()) {
        Ok(()) => tracing::info!(
            cert_file = %files.cert_file.get_ref().display(),
            "SIGHUP: the admin site's certificate and key read again"
        ),
        // The config loader read these files a moment ago; this is
        // reached only when they changed in between.
        Err(e) => tracing::error!(
            error = %e,
            "SIGHUP: the admin site's certificate and key are refused; the running ones stay"
        ),
    }
}

/// Starts the workers of a bound receiver.
fn spawn_receiver(r: &Receiver, socks: Vec<Bound>, ctx: &Ctx) -> anyhow::Result<RunningReceiver> {
    // Workers of one receiver share its counters.
    let stats = Arc::new(ReceiverStats::new(
        socks[0].local_addr().to_string(),
        r.protocol.as_str(),
    ));
    if let Some(b) = socks[0].receive_buffer() {
        stats.receive_buffer.store(b as u64, Ordering::Relaxed);
    }
    let retire = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    let new_ingest = || {
        Ingest::new(
            r.protocol,
            Arc::clone(&stats),
            Arc::clone(&ctx.aggregate),
            Arc::clone(&ctx.control),
            ctx.shard_tx.clone(),
        )
        .tap_to(Arc::clone(&ctx.telemetry.tap))
    };
    if let Some(settings) = &r.otlp {
        let ingest = new_ingest();
        let (socket, _) = socks
            .into_iter()
            .next()
            .context("an OTLP receiver without its socket")?
            .into_parts();
        let (flag, control) = (Arc::clone(&retire), Arc::clone(&ctx.control));
        let stop = Box::new(move || {
            flag.load(Ordering::Acquire) || control.shutdown.load(Ordering::Acquire)
        });
        let logs = ctx
            .otlp_logs
            .iter()
            .find(|(n, _)| *n == settings.name)
            .map(|(_, q)| q.clone());
        let grpc = matches!(r.listen, sonde_runtime::addr::ListenAddr::Grpc(_));
        workers = sonde_otlp_in::spawn(socket.into(), grpc, settings.clone(), ingest, stop, logs)?;
        lock(&ctx.telemetry.receivers).push(Arc::clone(&stats));
        return Ok(RunningReceiver {
            config: r.clone(),
            retire,
            stats,
            workers,
        });
    }
    for b in socks {
        let ingest = new_ingest()
            .retire_on(Arc::clone(&retire))
            .events_to(match r.protocol {
                receiver::Protocol::Statsd => ctx.events.clone(),
                receiver::Protocol::Msgpack | receiver::Protocol::Otlp => None,
            });
        workers.push(receiver::spawn(b, ingest)?);
    }
    lock(&ctx.telemetry.receivers).push(Arc::clone(&stats));
    Ok(RunningReceiver {
        config: r.clone(),
        retire,
        stats,
        workers,
    })
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stops a receiver: its workers hand over their open windows and exit.
fn retire(r: RunningReceiver, telemetry: &Telemetry) {
    r.retire.store(true, Ordering::Release);
    for w in r.workers {
        let _ = w.join();
    }
    lock(&telemetry.receivers).retain(|s| !Arc::ptr_eq(s, &r.stats));
    tracing::info!(receiver = %r.config.listen, "receiver stopped");
}

/// A started sink: where the flusher sends it windows (if it takes
/// them), its ends for the log sources it takes, and what the agent keeps.
struct Started {
    windows: Option<SinkHandle>,
    profiles: Option<sonde_sinks::profiles::ProfileHandle>,
    logs: Vec<(String, LogInput)>,
    running: RunningSink,
}

/// Starts a sink as its type says (an exporter's listener goes to
/// `exporters`). `stats` carries the counters of the sink it replaces, if any;
/// `sources` describes every log source of the config.
fn start_sink(
    s: &Sink,
    exporters: &mut Vec<(std::net::TcpListener, sonde_sinks::sink::Exposition)>,
    stats: Option<Arc<SinkStats>>,
    sources: &[SourceInfo],
    host: &str,
    key: &str,
    data_dir: &Arc<sonde_runtime::data_dir::DataDirErrors>,
) -> anyhow::Result<Started> {
    let stats = stats.unwrap_or_else(|| Arc::new(SinkStats::new(s.name.clone())));
    let taken: Vec<SourceInfo> = s
        .log_sources()
        .filter_map(|name| sources.iter().find(|i| i.name == name).cloned())
        .collect();
    let mut start = Start {
        stats: Arc::clone(&stats),
        exporters,
        sources: &taken,
        host,
        key,
        data_dir: Arc::clone(data_dir),
    };
    let running = (s.kind.start)(s, &mut start)?;
    let windows = if s.takes_metrics() {
        Some(
            running
                .windows
                .with_context(|| format!("sink {} started without its window input", s.name))?,
        )
    } else {
        // Dropping the handle ends the sink's window thread, if it has one.
        None
    };
    let profiles = if s.takes_profiles() {
        Some(
            running
                .profiles
                .with_context(|| format!("sink {} started without its profile input", s.name))?,
        )
    } else {
        None
    };
    Ok(Started {
        windows,
        profiles,
        logs: running.logs,
        running: RunningSink {
            config: s.clone(),
            stats,
            threads: running.threads,
        },
    })
}

/// The host this agent names: `agent.hostname`, else the kernel's host
/// name.
pub(crate) fn agent_host(config: &Config) -> String {
    match &config.agent.hostname {
        Some(h) => h.get_ref().clone(),
        None => sonde_sinks::hostname().unwrap_or_else(|| "localhost".into()),
    }
}

/// What records of each log source carry besides the line: the
/// `[[logs]]` sources in order, then `dogstatsd_events` if a sink takes it.
fn source_infos(config: &Config) -> Vec<SourceInfo> {
    let host = agent_host(config);
    let mut infos: Vec<SourceInfo> = config
        .logs
        .iter()
        .map(|l| SourceInfo {
            name: l.name.clone(),
            host: host.clone(),
            fields: l.fields.clone(),
        })
        .collect();
    if config
        .sinks
        .iter()
        .any(|s| s.log_sources().any(|n| n == EVENTS_SOURCE))
    {
        infos.push(SourceInfo {
            name: EVENTS_SOURCE.into(),
            host: host.clone(),
            fields: Vec::new(),
        });
    }
    for name in otlp_sources(config) {
        infos.push(SourceInfo {
            name,
            host: host.clone(),
            fields: Vec::new(),
        });
    }
    infos
}

/// The log sources of the OTLP receivers that a sink takes, each once.
fn otlp_sources(config: &Config) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in &config.receivers {
        if let Some(o) = &r.otlp {
            let taken = config
                .sinks
                .iter()
                .any(|s| s.log_sources().any(|n| n == o.name));
            if taken && !names.contains(&o.name) {
                names.push(o.name.clone());
            }
        }
    }
    names
}

/// The OTLP receivers' log queues, by source name.
type OtlpQueues = Vec<(String, EventQueue)>;

/// Starts the log source of each OTLP receiver name a sink takes, with
/// the ends its sinks handed out; returns the queues for the receivers.
fn start_otlp_sources(
    config: &Config,
    infos: &[SourceInfo],
    inputs: Inputs,
    telemetry: &Telemetry,
) -> anyhow::Result<(OtlpQueues, Vec<RunningSource>, Inputs)> {
    let mut queues = Vec::new();
    let mut running = Vec::new();
    let mut inputs = inputs;
    for name in otlp_sources(config) {
        let Some(info) = infos.iter().find(|i| i.name == name) else {
            continue;
        };
        let (mine, rest): (Vec<_>, Vec<_>) = inputs.into_iter().partition(|(n, _)| *n == name);
        inputs = rest;
        let stats = Arc::new(LogStats::new(name.clone()));
        lock(&telemetry.logs).push(Arc::clone(&stats));
        let (queue, source) = logs::events::spawn(
            info.clone(),
            mine.into_iter().map(|(_, i)| i).collect(),
            stats,
        )
        .with_context(|| format!("starting the OTLP log source {name:?}"))?;
        tracing::info!(source = %name, "log source running");
        queues.push((name, queue));
        running.push(source);
    }
    Ok((queues, running, inputs))
}

/// The ends sinks hand out for log sources, by source name.
type Inputs = Vec<(String, LogInput)>;

/// Starts the `dogstatsd_events` source if a sink takes it (its info is
/// the last of `infos`), with the ends its sinks handed out; returns the
/// queue for the StatsD workers.
fn start_events(
    infos: &[SourceInfo],
    inputs: Inputs,
    telemetry: &Telemetry,
) -> anyhow::Result<Option<(EventQueue, RunningSource)>> {
    let Some(info) = infos.iter().find(|i| i.name == EVENTS_SOURCE) else {
        return Ok(None);
    };
    let sinks = inputs
        .into_iter()
        .filter(|(n, _)| n == EVENTS_SOURCE)
        .map(|(_, i)| i)
        .collect();
    let stats = Arc::new(LogStats::new(EVENTS_SOURCE.into()));
    lock(&telemetry.logs).push(Arc::clone(&stats));
    let started = logs::events::spawn(info.clone(), sinks, stats)
        .context("starting the dogstatsd_events source")?;
    tracing::info!(source = EVENTS_SOURCE, "log source running");
    Ok(Some(started))
}

/// Starts every `[[logs]]` source, each with the ends its sinks handed
/// out; returns the ends of the sources it does not start.
fn start_sources(
    config: &Config,
    infos: &[SourceInfo],
    mut inputs: Inputs,
    telemetry: &Telemetry,
) -> anyhow::Result<(Vec<RunningSource>, Inputs)> {
    let mut running = Vec::new();
    for (l, info) in config.logs.iter().zip(infos) {
        let (mine, rest): (Vec<_>, Vec<_>) = inputs.into_iter().partition(|(n, _)| *n == l.name);
        inputs = rest;
        let stats = Arc::new(LogStats::new(l.name.clone()));
        lock(&telemetry.logs).push(Arc::clone(&stats));
        let source = logs::SourceConfig {
            info: info.clone(),
            tailer: l.tailer.clone(),
            rescan_interval: l.rescan_interval,
            checkpoint_dir: config.agent.data_dir.join("checkpoints"),
            max_in_flight_bytes: logs::source::MAX_IN_FLIGHT_BYTES,
            tap: Arc::clone(&telemetry.tap),
            data_dir: Arc::clone(&telemetry.data_dir),
        };
        let sinks = mine.into_iter().map(|(_, i)| i).collect();
        running.push(
            logs::spawn(source, sinks, stats)
                .with_context(|| format!("starting log source {:?}", l.name))?,
        );
        tracing::info!(source = %l.name, include = ?l.tailer.include, "log source running");
    }
    Ok((running, inputs))
}

/// How long the start waits for the log sources' first scans before it
/// says the agent is ready all the same.
const SOURCES_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until every log source watches its directories and has scanned
/// its globs, so that the agent answers `/health` (and tells systemd
/// READY=1) only once every file its globs match is open, and one created
/// afterwards will be reported by inotify. A first scan takes
/// milliseconds; one slower than [`SOURCES_READY_WAIT`] (a vast tree on a
/// slow disk) is logged and the start goes on.
fn wait_ready(sources: &mut [RunningSource], config: &Config) {
    let deadline = std::time::Instant::now() + SOURCES_READY_WAIT;
    for (source, l) in sources.iter_mut().zip(&config.logs) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !source.wait_ready(left) {
            tracing::warn!(
                source = %l.name,
                waited = ?SOURCES_READY_WAIT,
                "log source still scanning its globs; the agent says it is ready without it"
            );
        }
    }
}

/// Starts the host profiler when `[profiler]` asks for it. Without
/// perf-event permission it logs once, with what to change, and the agent
/// goes on without it.
fn start_profiler(
    config: &Config,
    telemetry: &Telemetry,
    outputs: Vec<Arc<dyn sonde_profiler::Output>>,
) -> Option<sonde_profiler::Running> {
    let p = config.profiler.as_ref()?;
    let store = sonde_profile::store::Store::new(
        sonde_profile::store::dir(&config.agent.data_dir),
        sonde_profile::store::Limits {
            retention_s: p.retention.as_secs(),
            max_bytes: p.max_bytes,
        },
    );
    let settings = sonde_profiler::Settings {
        frequency: p.frequency,
        period: p.period,
        store,
        host: agent_host(config),
        data_dir: Arc::clone(&telemetry.data_dir),
        outputs,
    };
    match sonde_profiler::spawn(settings, Arc::clone(&telemetry.profiler)) {
        Ok(running) => {
            tracing::info!(
                frequency = p.frequency,
                period = ?p.period,
                dir = %sonde_profile::store::dir(&config.agent.data_dir).display(),
                "profiler running"
            );
            Some(running)
        }
        Err(e) => {
            tracing::warn!("profiler off: {e}");
            None
        }
    }
}

/// The `[host_metrics]` input: its collecting thread and the worker that
/// records its batches.
struct RunningHost {
    collector: sonde_host::Running,
    worker: JoinHandle<()>,
}

/// Starts `[host_metrics]` when the config turns it on: a worker of
/// [`sonde_metrics::input::spawn_worker`] with a receiver's counters
/// (shown on `/metrics` as `listen="host_metrics"`), and the thread that
/// feeds it every `interval`.
fn start_host_metrics(config: &Config, ctx: &Ctx) -> anyhow::Result<Option<RunningHost>> {
    let Some(h) = &config.host_metrics else {
        return Ok(None);
    };
    let stats = Arc::new(ReceiverStats::new("host_metrics".into(), "host_metrics"));
    let ingest = Ingest::new(
        receiver::Protocol::Statsd,
        Arc::clone(&stats),
        Arc::clone(&ctx.aggregate),
        Arc::clone(&ctx.control),
        ctx.shard_tx.clone(),
    )
    .tap_to(Arc::clone(&ctx.telemetry.tap));
    // Two batches may wait: one collection never waits on the last.
    let (tx, worker) = sonde_metrics::input::spawn_worker("host-metrics-worker".into(), ingest, 2)
        .context("starting the host_metrics worker")?;
    lock(&ctx.telemetry.receivers).push(stats);
    let collector = sonde_host::Collector::new(h.groups, sonde_host::Roots::default());
    let collector =
        sonde_host::spawn(collector, h.interval, tx).context("starting host_metrics")?;
    tracing::info!(interval = ?h.interval, "host metrics running");
    Ok(Some(RunningHost { collector, worker }))
}

/// Tells systemd (through `$NOTIFY_SOCKET`, set for a unit of
/// Type=notify) where the agent is; nothing without the variable.
fn notify(state: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, state) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// Runs the agent until SIGTERM or SIGINT; SIGHUP reloads `path`.
pub fn run(config: Config, path: Option<PathBuf>) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .context("installing signal handlers")?;
    let aggregate = Arc::new(config.aggregate.clone());
    let control = Arc::new(Control::default());
    let telemetry = Arc::new(Telemetry {
        worker_series: Arc::clone(&control.series),
        max_series: aggregate.max_series,
        ..Telemetry::default()
    });

    // Before any background thread starts (the sinks start next).
    sonde_runtime::priority::set_background_nice(
        i32::try_from(*config.agent.background_nice.get_ref()).unwrap_or(0),
    );
    let mut bound = Vec::new();
    // The first window covers the time from here (see sonde_metrics::flusher).
    let receiving_since = std::time::SystemTime::now();
    for (i, r) in config.receivers.iter().enumerate() {
        let socks = bind(r).map_err(|e| bind_error(&config, i, r, e))?;
        bound.push((r, socks));
    }

    let mut sites = Vec::new();
    let mut admin_site = None;
    // Kept to read a renewed certificate on SIGHUP.
    let mut admin_tls_handle = None;
    if let Some(listen) = config.agent.admin_listen.get_ref() {
        let l = bind_admin(&config, listen)?;
        let tls = admin_tls(&config)?;
        match listen {
            config::AdminListen::Tcp(admin) => tracing::info!(
                address = %format!("{}://{admin}", config.agent.admin_scheme()),
                "admin listening on /health and /metrics"
            ),
            config::AdminListen::Unix(path) => tracing::info!(
                socket = %path.display(),
                mode = %format!("{:04o}", config.agent.admin_socket_mode()),
                "admin listening on /health and /metrics (`curl --unix-socket {} http://sonde/metrics`)",
                path.display()
            ),
        }
        let auth = admin_token(&config)?;
        admin_tls_handle.clone_from(&tls);
        let admin = sonde_admin::http::Admin {
            auth,
            tls,
            telemetry: Arc::clone(&telemetry),
            profiles: sonde_profile::store::Store::reader(&config.agent.data_dir),
            prices: config
                .profiler
                .as_ref()
                .map(|p| p.prices.clone())
                .unwrap_or_default(),
            // Each rule was checked when the config was loaded.
            classes: Arc::new(
                sonde_profile::classes::Classifier::with(
                    config.profiler.as_ref().map_or(&[][..], |p| &p.classes),
                )
                .context("profiler.classes")?,
            ),
            fleet: match config.profiler.as_ref().and_then(|p| p.store.as_deref()) {
                // Checked when the config was loaded.
                Some(uri) => Some(
                    sonde_sinks::clickhouse::store::FleetStore::open(uri)
                        .with_context(|| format!("profiler.store {uri:?}"))?,
                ),
                None => None,
            },
        };
        admin_site = Some((l, Site::Admin(Arc::new(admin))));
    }
    if !config.logs.is_empty() {
        // A source opens every file its globs match when it finds them.
        match sonde_runtime::raise_open_files_limit() {
            Ok((before, after)) if after > before => {
                tracing::info!(from = before, to = after, "open files limit raised");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot raise the open files limit"),
        }
    }
    let infos = source_infos(&config);
    let host = agent_host(&config);
    let mut handles: Vec<Box<dyn flusher::Output>> = Vec::new();
    let mut profile_outputs: Vec<Arc<dyn sonde_profiler::Output>> = Vec::new();
    let mut sinks = Vec::new();
    let mut log_inputs = Vec::new();
    for (i, s) in config.sinks.iter().enumerate() {
        let started = start_sink(
            s,
            &mut sites,
            None,
            &infos,
            &host,
            &format!("sinks[{i}]"),
            &telemetry.data_dir,
        )
        .map_err(|e| placed(&config, e))?;
        lock(&telemetry.sinks).push(Arc::clone(&started.running.stats));
        handles.extend(
            started
                .windows
                .map(|h| Box::new(h) as Box<dyn flusher::Output>),
        );
        profile_outputs.extend(
            started
                .profiles
                .map(|h| Arc::new(h) as Arc<dyn sonde_profiler::Output>),
        );
        log_inputs.extend(started.logs);
        sinks.push(started.running);
    }
    let (mut sources, rest) = start_sources(&config, &infos, log_inputs, &telemetry)
        .map_err(|e| checkpoint_error(&config, e))?;
    wait_ready(&mut sources, &config);
    let (otlp_logs, otlp_sources, rest) = start_otlp_sources(&config, &infos, rest, &telemetry)?;
    let (events, events_source) = start_events(&infos, rest, &telemetry)?.unzip();

    let (shard_tx, shard_rx) = sync_channel(SHARD_QUEUE);
    let ctx = Ctx {
        aggregate: Arc::clone(&aggregate),
        control: Arc::clone(&control),
        shard_tx,
        telemetry: Arc::clone(&telemetry),
        events,
        otlp_logs,
    };
    let mut receivers = Vec::new();
    for (r, socks) in bound {
        receivers.push(spawn_receiver(r, socks, &ctx)?);
    }
    let mut scrapes = scrape::start(&config.scrape, &ctx)?;
    let host_metrics = start_host_metrics(&config, &ctx)?;
    let profiler = start_profiler(&config, &telemetry, profile_outputs);
    // Removes the admin site's socket file when dropped, as `run` returns.
    let _serving = http::serve(
        admin_site
            .into_iter()
            .chain(
                sites
                    .into_iter()
                    .map(|(l, expo)| (l.into(), Site::Exporter(expo))),
            )
            .collect(),
    )?;

    let (cmd_tx, cmd_rx) = flusher::command_channel();
    let flusher = Flusher {
        config: Arc::clone(&aggregate),
        control,
        shards: shard_rx,
        commands: cmd_rx,
        sinks: handles,
        stats: Arc::clone(&telemetry.flush),
        receiving_since,
    };
    let flusher = std::thread::Builder::new()
        .name("flusher".into())
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            flusher.run()
        })?;
    tracing::info!(interval = ?aggregate.interval, "sonde running");
    // Every receiver is bound, every log source has scanned and the admin
    // site answers: a systemd unit of Type=notify counts the agent started
    // from here.
    notify(&[NotifyState::Ready, NotifyState::Status("running")]);

    let mut current = config;
    for sig in signals.forever() {
        if sig == SIGHUP {
            if let Ok(now) = NotifyState::monotonic_usec_now() {
                notify(&[NotifyState::Reloading, now]);
            }
            match &path {
                None => tracing::info!("SIGHUP: running the embedded defaults; nothing to reload"),
                Some(p) => match crate::load(p) {
                    Err(e) => tracing::error!(
                        error = format!("{e:#}"),
                        "SIGHUP: the new config is refused; the running one stays"
                    ),
                    Ok(new) => {
                        reload_admin_tls(&current, &new, admin_tls_handle.as_ref());
                        reload(&current, &new, &ctx, &cmd_tx, &mut receivers, &mut sinks);
                        scrape::reload(&mut scrapes, &new.scrape, &ctx);
                        current = new;
                    }
                },
            }
            notify(&[NotifyState::Ready]);
            continue;
        }
        tracing::info!(signal = sig, "stopping: flushing the open window");
        notify(&[NotifyState::Stopping]);
        break;
    }
    // Sources first: each waits for its sinks to acknowledge what it sent,
    // saves its checkpoints and lets go of the sinks.
    for source in sources {
        source.stop();
    }
    let _ = cmd_tx.send(FlusherCommand::Shutdown);
    let _ = flusher.join();
    for r in receivers {
        for w in r.workers {
            let _ = w.join();
        }
    }
    if let Some(s) = scrapes {
        scrape::stop(s, &ctx);
    }
    // Its worker handed over its last window with the receivers'.
    if let Some(h) = host_metrics {
        let _ = h.worker.join();
        h.collector.stop();
    }
    // After the receivers, so that the events they took are sent.
    if let Some(e) = events_source {
        e.stop();
    }
    for s in otlp_sources {
        s.stop();
    }
    // Writes the partial period and sends it to the sinks that take
    // profiles, then lets go of them.
    if let Some(p) = profiler {
        p.stop();
    }
    for s in sinks {
        for t in s.threads {
            let _ = t.join();
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Applies a new config to the running agent; see the module docs.
fn reload(
    old: &Config,
    new: &Config,
    ctx: &Ctx,
    cmd: &Sender<FlusherCommand>,
    receivers: &mut Vec<RunningReceiver>,
    sinks: &mut Vec<RunningSink>,
) {
    if new.aggregate != old.aggregate
        || new.agent.admin_listen.get_ref() != old.agent.admin_listen.get_ref()
        || new.agent.admin_socket_mode() != old.agent.admin_socket_mode()
        || new.agent.admin_socket_group.as_ref().map(|g| g.get_ref())
            != old.agent.admin_socket_group.as_ref().map(|g| g.get_ref())
        || new.agent.data_dir != old.agent.data_dir
        || new.agent.background_nice.get_ref() != old.agent.background_nice.get_ref()
        || new.agent.admin_auth != old.agent.admin_auth
        || new.agent.admin_token_file != old.agent.admin_token_file
        || new.agent.admin_token_group.as_ref().map(|g| g.get_ref())
            != old.agent.admin_token_group.as_ref().map(|g| g.get_ref())
        || new.agent.admin_tls != old.agent.admin_tls
    {
        tracing::warn!("SIGHUP: changes to [agent] and [histograms] apply at the next start");
    }
    if new.logs != old.logs {
        tracing::warn!("SIGHUP: changes to [[logs]] apply at the next start");
    }
    if new.profiler != old.profiler {
        tracing::warn!("SIGHUP: changes to [profiler] apply at the next start");
    }
    if new.host_metrics != old.host_metrics {
        tracing::warn!("SIGHUP: changes to [host_metrics] apply at the next start");
    }
    // Sinks whose type does not reload stay as they are, and so do sinks
    // that take log sources (the sources keep running with them) or the
    // profiler's periods (its outputs are fixed when it starts).
    let changes =
        |s: &Sink| s.kind.reloads && s.log_sources().next().is_none() && !s.takes_profiles();
    let fixed =
        |c: &Config| -> Vec<Sink> { c.sinks.iter().filter(|s| !changes(s)).cloned().collect() };
    let (fixed_old, fixed_new) = (fixed(old), fixed(new));
    if fixed_old != fixed_new {
        let types: std::collections::BTreeSet<&str> = fixed_old
            .iter()
            .chain(&fixed_new)
            .map(|s| s.kind.name)
            .collect();
        tracing::warn!(
            types = ?types,
            "SIGHUP: changes to sinks of these types apply at the next start"
        );
    }

    // Receivers.
    let (keep, gone): (Vec<_>, Vec<_>) = std::mem::take(receivers)
        .into_iter()
        .partition(|r| new.receivers.contains(&r.config));
    *receivers = keep;
    let added: Vec<&Receiver> = new
        .receivers
        .iter()
        .filter(|r| !receivers.iter().any(|k| &k.config == *r))
        .collect();
    // A new receiver on an address still held by a removed one can only
    // bind once that one has stopped.
    let mut later = Vec::new();
    let mut early = Vec::new();
    for r in added {
        if gone.iter().any(|g| g.config.listen == r.listen) {
            later.push(r);
        } else {
            match bind(r) {
                Ok(socks) => early.push((r, socks)),
                Err(e) => {
                    tracing::error!(receiver = %r.listen, error = format!("{e:#}"), "SIGHUP: cannot start receiver")
                }
            }
        }
    }
    for g in gone {
        retire(g, &ctx.telemetry);
    }
    for r in later {
        match bind(r) {
            Ok(socks) => early.push((r, socks)),
            Err(e) => {
                tracing::error!(receiver = %r.listen, error = format!("{e:#}"), "SIGHUP: cannot start receiver")
            }
        }
    }
    for (r, socks) in early {
        match spawn_receiver(r, socks, ctx) {
            Ok(running) => receivers.push(running),
            Err(e) => {
                tracing::error!(receiver = %r.listen, error = format!("{e:#}"), "SIGHUP: cannot start receiver")
            }
        }
    }

    // Sinks.
    let (keep, gone): (Vec<_>, Vec<_>) = std::mem::take(sinks)
        .into_iter()
        .partition(|s| !changes(&s.config) || new.sinks.contains(&s.config));
    *sinks = keep;
    let added: Vec<&Sink> = new
        .sinks
        .iter()
        .filter(|s| changes(s) && !sinks.iter().any(|k| &k.config == *s))
        .collect();
    let _ = cmd.send(FlusherCommand::HoldFor(
        added.iter().map(|s| s.name.clone()).collect(),
    ));
    let _ = cmd.send(FlusherCommand::RemoveSinks(
        gone.iter().map(|s| s.stats.name.clone()).collect(),
    ));
    // A removed sink delivers what it has (its disk buffer, if any, is free
    // for a new sink of the same name afterwards).
    let mut old_stats = Vec::new();
    for g in gone {
        for t in g.threads {
            let _ = t.join();
        }
        tracing::info!(sink = %g.stats.name, "sink stopped");
        lock(&ctx.telemetry.sinks).retain(|s| !Arc::ptr_eq(s, &g.stats));
        old_stats.push(g.stats);
    }
    let mut handles: Vec<Box<dyn flusher::Output>> = Vec::new();
    let mut failed = Vec::new();
    for s in added {
        let name = s.name.clone();
        // The same name keeps its counters.
        let stats = old_stats.iter().find(|o| o.name == name).cloned();
        let key = new
            .sinks
            .iter()
            .position(|n| std::ptr::eq(n, s))
            .map_or_else(|| "sinks".to_string(), |i| format!("sinks[{i}]"));
        // [agent] changes apply at the next start: the old host name.
        match start_sink(
            s,
            &mut Vec::new(),
            stats,
            &[],
            &agent_host(old),
            &key,
            &ctx.telemetry.data_dir,
        )
        .map_err(|e| placed(new, e))
        {
            Ok(started) => {
                lock(&ctx.telemetry.sinks).push(Arc::clone(&started.running.stats));
                handles.extend(
                    started
                        .windows
                        .map(|h| Box::new(h) as Box<dyn flusher::Output>),
                );
                sinks.push(started.running);
            }
            Err(e) => {
                tracing::error!(sink = %name, error = format!("{e:#}"), "SIGHUP: cannot start sink");
                failed.push(name);
            }
        }
    }
    let _ = cmd.send(FlusherCommand::RemoveSinks(failed));
    let _ = cmd.send(FlusherCommand::AddSinks(handles));
    tracing::info!(
        receivers = receivers.len(),
        sinks = sinks.len(),
        "SIGHUP: config reloaded"
    );
}
