//! Wiring: binds every socket first (so a bad address fails the start),
//! then starts sinks, receive workers, the flusher and the HTTP thread, and
//! waits for SIGTERM or SIGINT.
//!
//! # Clean shutdown
//!
//! On a signal the flusher closes the open window early and flushes it;
//! the workers hand over their last shards and exit (removing their unix
//! socket files); the sinks write what is queued and exit; then `run`
//! returns.

use std::sync::mpsc::sync_channel;
use std::sync::Arc;

use anyhow::Context;
use signal_hook::consts::{SIGINT, SIGTERM};
use sonde_io::flusher::{self, Flusher, FlusherCommand};
use sonde_io::http::{self, Site};
use sonde_io::ingest::{Control, Ingest};
use sonde_io::receiver;
use sonde_io::sink::{self, Console, Exposition, PrometheusExporter};
use sonde_io::telemetry::{ReceiverStats, SinkStats, Telemetry};

use sonde::config::{Buffer, Config, NetKind, NetSink, Sink};
use sonde_encode::BatchEncoder;
use sonde_io::sender::{self, disk::Disk, queue::Memory, Http, Queue, Tcp};
use sonde_io::sink::SinkHandle;
use std::thread::JoinHandle;

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(config: Config) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .context("installing signal handlers")?;
    let aggregate = Arc::new(config.aggregate);
    let control = Arc::new(Control::default());
    let mut telemetry = Telemetry {
        worker_series: Arc::clone(&control.series),
        max_series: aggregate.max_series,
        ..Telemetry::default()
    };

    let mut bound = Vec::new();
    for r in &config.receivers {
        let mut options = r.options;
        if let Some(o) = &r.owner {
            options.owner = Some(
                receiver::user_id(o)
                    .with_context(|| format!("owner {o:?} of the socket file of {}", r.listen))?,
            );
        }
        if let Some(g) = &r.group {
            options.group = Some(
                receiver::group_id(g)
                    .with_context(|| format!("group {g:?} of the socket file of {}", r.listen))?,
            );
        }
        let socks = receiver::bind(&r.listen, options)?;
        let first = &socks[0];
        tracing::info!(
            receiver = %first.local_addr(),
            protocol = r.protocol.as_str(),
            workers = socks.len(),
            receive_buffer = first.receive_buffer().map(|b| b / 2),
            "listening"
        );
        bound.push((r, socks));
    }

    let mut sites = Vec::new();
    if let Some(admin) = config.agent.admin_listen {
        let l = http::bind(admin.0)
            .with_context(|| format!("cannot listen on agent.admin_listen {}", admin.0))?;
        tracing::info!(address = %admin.0, "admin listening on /health and /metrics");
        sites.push((l, Site::Admin(Arc::default())));
    }
    let mut sinks = Vec::new();
    let mut sink_threads = Vec::new();
    for s in &config.sinks {
        let (name, handle) = match s {
            Sink::Console => {
                let stats = Arc::new(SinkStats::new("console".into()));
                (stats.clone(), sink::spawn(Console::default(), stats)?)
            }
            Sink::File(path) => {
                let f = sink::File::open(path)
                    .with_context(|| format!("opening file sink {}", path.display()))?;
                let stats = Arc::new(SinkStats::new(format!("file:{}", path.display())));
                (stats.clone(), sink::spawn(f, stats)?)
            }
            Sink::PrometheusExporter(listen) => {
                let l = http::bind(*listen)
                    .with_context(|| format!("cannot listen on prometheus_exporter {listen}"))?;
                tracing::info!(address = %listen, "prometheus exporter listening on /metrics");
                let expo = Exposition::default();
                sites.push((l, Site::Exporter(expo.clone())));
                let stats = Arc::new(SinkStats::new(format!("prometheus_exporter:{listen}")));
                (
                    stats.clone(),
                    sink::spawn(PrometheusExporter::new(expo), stats)?,
                )
            }
            Sink::Net(n) => {
                let stats = Arc::new(SinkStats::new(n.name.clone()));
                (stats.clone(), start_net(n, stats)?)
            }
        };
        telemetry.sinks.push(name);
        sinks.push(handle.0);
        sink_threads.push(handle.1);
    }

    // Two windows' worth of shards can queue without blocking a worker.
    let threads: usize = bound.iter().map(|(_, s)| s.len()).sum();
    let (shard_tx, shard_rx) = sync_channel(2 * threads + 2);
    let mut workers = Vec::new();
    for (r, socks) in bound {
        // Workers of one receiver share its counters.
        let stats = Arc::new(ReceiverStats::new(
            socks[0].local_addr().to_string(),
            r.protocol.as_str(),
        ));
        if let Some(b) = socks[0].receive_buffer() {
            // Linux reports double the usable size (bookkeeping).
            stats
                .receive_buffer
                .store(b as u64 / 2, std::sync::atomic::Ordering::Relaxed);
        }
        telemetry.receivers.push(Arc::clone(&stats));
        for b in socks {
            let ingest = Ingest::new(
                r.protocol,
                Arc::clone(&stats),
                Arc::clone(&aggregate),
                Arc::clone(&control),
                shard_tx.clone(),
            );
            workers.push(receiver::spawn(b, ingest)?);
        }
    }
    drop(shard_tx);

    let telemetry = Arc::new(telemetry);
    for site in &mut sites {
        if let Site::Admin(t) = &mut site.1 {
            *t = Arc::clone(&telemetry);
        }
    }
    http::serve(sites)?;

    let (cmd_tx, cmd_rx) = flusher::command_channel();
    let flusher = Flusher {
        config: Arc::clone(&aggregate),
        control,
        shards: shard_rx,
        commands: cmd_rx,
        workers: workers.len(),
        sinks,
        stats: Arc::clone(&telemetry.flush),
    };
    let flusher = std::thread::Builder::new()
        .name("flusher".into())
        .spawn(move || flusher.run())?;
    tracing::info!(interval = ?aggregate.interval, "sonde running");

    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "stopping: flushing the open window");
    }
    let _ = cmd_tx.send(FlusherCommand::Shutdown);
    let _ = flusher.join();
    for w in workers {
        let _ = w.join();
    }
    for s in sink_threads {
        let _ = s.join();
    }
    tracing::info!("stopped");
    Ok(())
}

/// Starts a network sink's sender: its buffer (loading what a disk buffer
/// kept from the last run), its encoder and its transport.
fn start_net(n: &NetSink, stats: Arc<SinkStats>) -> anyhow::Result<(SinkHandle, JoinHandle<()>)> {
    let queue: Box<dyn Queue> = match &n.buffer {
        Buffer::Memory(max) => Box::new(Memory::new(*max)),
        Buffer::Disk {
            dir,
            max_size,
            sync,
        } => {
            let (disk, loaded) = Disk::open(dir, *max_size, *sync).with_context(|| {
                format!(
                    "opening the disk buffer of sink {:?} in {} (set agent.data_dir to a writable directory)",
                    n.name,
                    dir.display()
                )
            })?;
            if loaded.records > 0 {
                tracing::info!(sink = %n.name, requests = loaded.records, points = loaded.points, "disk buffer kept requests from the last run; sending them first");
            }
            if loaded.corrupt > 0 {
                stats
                    .corrupt_segments
                    .fetch_add(loaded.corrupt, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(sink = %n.name, segments = loaded.corrupt, "disk buffer had torn or corrupt records (a crash while writing?); skipped them");
            }
            Box::new(disk)
        }
    };
    let http = |content_type: &str, extra: &[(&str, &str)]| {
        let mut headers = vec![("Content-Type".to_string(), content_type.to_string())];
        if let Some(enc) = n.compression.content_encoding() {
            headers.push(("Content-Encoding".into(), enc.into()));
        }
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        headers.extend(n.headers.iter().cloned());
        Http::new(n.target.clone(), headers, n.delivery.request_timeout)
    };
    let tcp = || Tcp::new(n.target.clone(), n.delivery.request_timeout);
    let (c, d) = (n.compression, n.delivery);
    fn go<E: BatchEncoder, T: sender::Transport>(
        e: E,
        c: sonde_encode::compress::Compression,
        t: T,
        q: Box<dyn Queue>,
        d: sender::Delivery,
        stats: Arc<SinkStats>,
    ) -> anyhow::Result<(SinkHandle, JoinHandle<()>)> {
        Ok(sender::spawn(e, c, t, q, d, stats)?)
    }
    tracing::info!(sink = %n.name, target = %n.target, compression = n.compression.name(), "sink sending");
    match n.kind {
        NetKind::Http { msgpack: false } => {
            let e = sonde_encode::json::Lines::default();
            let t = http(e.content_type(), &[]);
            go(e, c, t, queue, d, stats)
        }
        NetKind::Http { msgpack: true } => {
            let e = sonde_encode::msgpack::Msgpack::new();
            let t = http(e.content_type(), &[]);
            go(e, c, t, queue, d, stats)
        }
        NetKind::PrometheusRemoteWrite => {
            let e = sonde_encode::remote_write::RemoteWrite::new();
            let t = http(
                e.content_type(),
                &[("X-Prometheus-Remote-Write-Version", "0.1.0")],
            );
            go(e, c, t, queue, d, stats)
        }
        NetKind::OtlpHttp => {
            let mut e = sonde_encode::otlp::Otlp::new();
            if let Some(host) = hostname() {
                e = e.with_resource([("host.name", host)]);
            }
            let t = http(e.content_type(), &[]);
            go(e, c, t, queue, d, stats)
        }
        NetKind::Influxdb => {
            let e = sonde_encode::influx::LineProtocol::new();
            let t = http(e.content_type(), &[]);
            go(e, c, t, queue, d, stats)
        }
        NetKind::Graphite => {
            let e = sonde_encode::graphite::Plaintext::new();
            go(e, c, tcp(), queue, d, stats)
        }
        NetKind::Tcp => go(
            sonde_encode::json::Lines::default(),
            c,
            tcp(),
            queue,
            d,
            stats,
        ),
    }
}

/// This host's name (the kernel's node name), for the OTLP resource's
/// `host.name`.
fn hostname() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let h = h.trim();
    (!h.is_empty()).then(|| h.to_string())
}
