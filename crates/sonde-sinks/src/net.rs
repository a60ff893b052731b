//! What every network sink shares: its keys (name, compression, batching,
//! retries, buffer), their validation, and starting its sender.

use std::path::Path;
use std::sync::Arc;

use crate::logs::buffered;
use crate::logs::deliver::{self, HttpLogs, LogEncoder};
use crate::profiles::{Cursor, ProfileEncoder, ProfileHandle, Profiles};
use crate::sender::{self, disk::Disk, queue::Memory, Delivery, Http, Queue, Tcp};
use crate::sink::SinkStats;
use anyhow::Context;
use serde::Deserialize;
use sonde_encode::compress::Compression;
use sonde_encode::BatchEncoder;
use sonde_runtime::data_dir::DataDirErrors;

use crate::descriptor::{Buffer, NetSink, Running, Sink, SinkType, Start, Transport};
use sonde_config::{ConfigError, HumanDuration, HumanSize};

/// The keys of a network sink that do not depend on its type; which of
/// `url`, `address` and `headers` it takes depends on its transport.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetSinkSection {
    /// Names the sink in logs, `/metrics` and its disk buffer directory.
    /// Default: the type; required when two sinks share a type.
    pub name: Option<String>,
    /// HTTP sinks: where to POST. Required.
    pub url: Option<String>,
    /// TCP sinks: `HOST:PORT`. Required.
    pub address: Option<String>,
    /// HTTP sinks: extra request headers, e.g. `Authorization`. Default none.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// `zstd`, `gzip`, `snappy`, `lz4` or `none`; the default and the
    /// choices are the sink type's ([`SinkType::compressions`]).
    pub compression: Option<String>,
    /// zstd -7..=22 (default 1), gzip 0..=9 (default 1).
    pub compression_level: Option<i32>,
    /// Most points per request. Default 10000.
    pub max_batch_points: Option<usize>,
    /// Most bytes per request before compression. Default `"4MiB"`.
    pub max_batch_bytes: Option<HumanSize>,
    /// How long a partial request waits for more points. Default `"1s"`.
    pub max_batch_age: Option<HumanDuration>,
    /// How long one attempt may take. Default `"10s"`.
    pub request_timeout: Option<HumanDuration>,
    /// First retry delay. Default `"250ms"`.
    pub retry_min_backoff: Option<HumanDuration>,
    /// Longest retry delay. Default `"30s"`.
    pub retry_max_backoff: Option<HumanDuration>,
    /// How long to keep delivering at shutdown. Default `"5s"`.
    pub shutdown_grace: Option<HumanDuration>,
    /// `{ type = "memory", max_size = "64MiB" }` (the default) or
    /// `{ type = "disk", max_size = "1GiB" }`.
    pub buffer: Option<BufferSection>,
}

/// A sink's `buffer = { ... }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferSection {
    /// `"memory"` or `"disk"`. Required.
    #[serde(rename = "type")]
    pub kind: String,
    /// Most bytes kept; the oldest requests go first. Default `"64MiB"` in
    /// memory, `"1GiB"` on disk.
    pub max_size: Option<HumanSize>,
    /// Disk only: `fdatasync` every request before counting it buffered.
    /// Default true.
    pub sync: Option<bool>,
}

/// A memory buffer's size unless the config says (64 MiB).
const MEMORY_DEFAULT: u64 = 64 << 20;

/// The directory of a sink's log disk buffer, under its own.
pub const LOG_BUFFER: &str = "logs";

fn compression_named(name: &str, level: Option<i32>) -> Option<Compression> {
    Some(match name {
        "none" => Compression::None,
        "zstd" => Compression::Zstd {
            level: level.unwrap_or(1),
        },
        "gzip" => Compression::Gzip {
            level: u32::try_from(level.unwrap_or(1)).ok()?,
        },
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        _ => return None,
    })
}

/// Validates the common keys of a network sink of type `kind`; returns its
/// name and settings. Errors name the key relative to the sink.
pub(crate) fn check(
    kind: &SinkType,
    s: &NetSinkSection,
    data_dir: &Path,
) -> Result<(String, NetSink), ConfigError> {
    let type_name = kind.name;
    let comp_name = s
        .compression
        .as_deref()
        .or(kind.default_compression())
        .unwrap_or("none");
    if !kind.compressions.contains(&comp_name) {
        let takes = kind
            .compressions
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ConfigError::new(
            "compression",
            format!("{type_name} does not take {comp_name:?}"),
            format!(
                "write one of {takes}, or leave it out for {:?}",
                kind.compressions[0]
            ),
        ));
    }
    let compression = compression_named(comp_name, s.compression_level)
        .filter(|c| match c {
            Compression::Zstd { level } => (-7..=22).contains(level),
            Compression::Gzip { level } => *level <= 9,
            _ => s.compression_level.is_none(),
        })
        .ok_or_else(|| {
            ConfigError::new(
                "compression_level",
                format!("out of range for {comp_name}"),
                "zstd takes -7 to 22, gzip 0 to 9, the others none: correct it or leave it out",
            )
        })?;
    let target = match kind.transport {
        Transport::Http => {
            let url = s.url.as_deref().ok_or_else(|| {
                ConfigError::new(
                    "url",
                    format!("{type_name} needs a url"),
                    "add url = \"http://HOST:PORT/...\"",
                )
            })?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    "url",
                    format!("{url:?} is not an HTTP URL"),
                    "start it with http:// or https://",
                ));
            }
            url.to_string()
        }
        // The type's own keys name its target; its `check` fills it in.
        Transport::Own | Transport::Local => String::new(),
        Transport::Tcp => {
            let a = s.address.as_deref().ok_or_else(|| {
                ConfigError::new(
                    "address",
                    format!("{type_name} needs an address"),
                    "add address = \"HOST:PORT\", like \"127.0.0.1:2003\"",
                )
            })?;
            match a.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => a.to_string(),
                _ => {
                    return Err(ConfigError::new(
                        "address",
                        format!("{a:?} is not HOST:PORT"),
                        "write a host and a port, like \"127.0.0.1:2003\"",
                    ))
                }
            }
        }
    };
    let name = s.name.clone().unwrap_or_else(|| type_name.to_string());
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        || name.starts_with('.')
    {
        return Err(ConfigError::new(
            "name",
            format!("{name:?} cannot name a buffer directory"),
            "use letters, digits, `_`, `-` and `.`, not first",
        ));
    }
    let d = Delivery::default();
    let delivery = Delivery {
        max_batch_points: s.max_batch_points.unwrap_or(d.max_batch_points),
        max_batch_bytes: s.max_batch_bytes.map_or(d.max_batch_bytes, |b| {
            usize::try_from(b.0).unwrap_or(usize::MAX)
        }),
        max_batch_age: s.max_batch_age.map_or(d.max_batch_age, |x| x.0),
        request_timeout: s.request_timeout.map_or(d.request_timeout, |x| x.0),
        backoff_min: s.retry_min_backoff.map_or(d.backoff_min, |x| x.0),
        backoff_max: s.retry_max_backoff.map_or(d.backoff_max, |x| x.0),
        shutdown_grace: s.shutdown_grace.map_or(d.shutdown_grace, |x| x.0),
    };
    if delivery.max_batch_points == 0 || delivery.max_batch_bytes == 0 {
        let key = if delivery.max_batch_points == 0 {
            "max_batch_points"
        } else {
            "max_batch_bytes"
        };
        return Err(ConfigError::new(
            key,
            "a batch limit of zero would send nothing",
            "write a limit above zero, or leave it out",
        ));
    }
    if delivery.request_timeout.is_zero() || delivery.backoff_min.is_zero() {
        let key = if delivery.request_timeout.is_zero() {
            "request_timeout"
        } else {
            "retry_min_backoff"
        };
        return Err(ConfigError::new(
            key,
            "must be above zero",
            "write a duration above zero, like \"250ms\", or leave it out",
        ));
    }
    let buffer = match &s.buffer {
        None => Buffer::Memory(MEMORY_DEFAULT),
        Some(b) => match b.kind.as_str() {
            "memory" => {
                if b.sync.is_some() {
                    return Err(ConfigError::new(
                        "buffer.sync",
                        "only a disk buffer takes `sync`",
                        "remove `sync`, or write type = \"disk\"",
                    ));
                }
                Buffer::Memory(b.max_size.map_or(MEMORY_DEFAULT, |x| x.0))
            }
            "disk" => Buffer::Disk {
                dir: data_dir.join("buffers").join(&name),
                max_size: b.max_size.map_or(1 << 30, |x| x.0),
                sync: b.sync.unwrap_or(true),
            },
            k => {
                return Err(ConfigError::new(
                    "buffer.type",
                    format!("{k:?} is not a buffer type"),
                    "write \"memory\" or \"disk\"",
                ))
            }
        },
    };
    let content_type_set = s.headers.keys().any(|k| {
        k.eq_ignore_ascii_case("content-type") || k.eq_ignore_ascii_case("content-encoding")
    });
    if content_type_set {
        return Err(ConfigError::new(
            "headers",
            "Content-Type and Content-Encoding are set by the sink",
            "remove them from `headers`",
        ));
    }
    let net = NetSink {
        target,
        headers: s
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        compression,
        delivery,
        buffer,
    };
    Ok((name, net))
}

/// Opens a network sink's buffer, loading what a disk buffer kept from the
/// last run.
fn open_queue(
    name: &str,
    buffer: &Buffer,
    stats: &SinkStats,
    errors: &Arc<DataDirErrors>,
) -> anyhow::Result<Box<dyn Queue>> {
    Ok(match buffer {
        Buffer::Memory(max) => Box::new(Memory::new(*max)),
        // What the disk cannot take (a full or read-only disk) waits in
        // memory, within a memory buffer's default size, and goes to disk
        // once it takes writes again: windows have no source to wait.
        Buffer::Disk {
            dir,
            max_size,
            sync,
        } => Box::new(
            open_disk(name, dir, *max_size, *sync, "requests", stats, errors)?
                .spill_to_memory(MEMORY_DEFAULT),
        ),
    })
}

/// Opens the disk buffer in `dir`, saying what it kept from the last run
/// (counted in `what`: requests of metric points, or log records).
fn open_disk(
    name: &str,
    dir: &Path,
    max_size: u64,
    sync: bool,
    what: &str,
    stats: &SinkStats,
    errors: &Arc<DataDirErrors>,
) -> anyhow::Result<Disk> {
    let (disk, loaded) = Disk::open(dir, max_size, sync).map_err(|e| {
        ConfigError::new(
            "agent.data_dir",
            format!(
                "cannot open the disk buffer of sink {name:?} in {}: {e}",
                dir.display()
            ),
            sonde_config::DATA_DIR_FIX,
        )
    })?;
    if loaded.records > 0 {
        tracing::info!(sink = %name, requests = loaded.records, points_or_records = loaded.points, buffer = %dir.display(), "disk buffer kept {what} from the last run; sending them first");
    }
    if loaded.corrupt > 0 {
        stats
            .corrupt_segments
            .fetch_add(loaded.corrupt, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(sink = %name, segments = loaded.corrupt, buffer = %dir.display(), "disk buffer had torn or corrupt records (a crash while writing?); skipped them");
    }
    Ok(disk.count_errors(Arc::clone(errors)))
}

/// Starts a network sink's sender with `encoder`, over HTTP or TCP as its
/// type says, sending the type's headers.
///
/// # Errors
///
/// A type whose transport is its own starts with [`spawn`] instead.
pub(super) fn start<E: BatchEncoder>(
    s: &Sink,
    encoder: E,
    st: &mut Start<'_>,
) -> anyhow::Result<Running> {
    let n = settings(s)?;
    let timeout = n.delivery.request_timeout;
    match s.kind.transport {
        Transport::Http => {
            let http = http(s, encoder.content_type(), None)?;
            spawn(s, encoder, http, st)
        }
        Transport::Tcp => spawn(s, encoder, Tcp::new(n.target.clone(), timeout), st),
        Transport::Own | Transport::Local => anyhow::bail!(
            "sink type {} brings its own transport: start it with sinks::net::spawn",
            s.kind.name
        ),
    }
}

/// The HTTP transport of sink `s` for bodies of `content_type` to `url`
/// (its `url` unless given): its compression's `Content-Encoding`, its
/// type's headers and the configured ones.
pub(super) fn http(s: &Sink, content_type: &str, url: Option<&str>) -> anyhow::Result<Http> {
    let n = settings(s)?;
    let mut headers = vec![("Content-Type".to_string(), content_type.to_string())];
    if let Some(enc) = n.compression.content_encoding() {
        headers.push(("Content-Encoding".into(), enc.into()));
    }
    headers.extend(
        s.kind
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    headers.extend(n.headers.iter().cloned());
    Ok(Http::new(
        url.unwrap_or(&n.target).to_string(),
        headers,
        n.delivery.request_timeout,
    ))
}

/// Starts the log side of HTTP sink `s`: a thread sending its sources'
/// records encoded by `encoder` to `url` (its `url` unless given), with
/// its compression, batch limits and backoff.
pub(super) fn start_logs(
    s: &Sink,
    encoder: impl LogEncoder,
    url: Option<&str>,
    st: &Start<'_>,
    running: &mut Running,
) -> anyhow::Result<()> {
    let n = settings(s)?;
    let transport = http(s, encoder.content_type(), url)?;
    start_logs_over(s, encoder, transport, url.unwrap_or(&n.target), st, running)
}

/// Starts the log side of network sink `s` over `transport`, which sends
/// each request (compressed with the sink's compression) to `target`:
/// [`start_logs`] for a transport of the sink's own.
pub(super) fn start_logs_over<T: sender::Transport>(
    s: &Sink,
    encoder: impl LogEncoder,
    transport: T,
    target: &str,
    st: &Start<'_>,
    running: &mut Running,
) -> anyhow::Result<()> {
    let n = settings(s)?;
    let logs = HttpLogs {
        compression: n.compression,
        max_records: n.delivery.max_batch_points,
        max_bytes: n.delivery.max_batch_bytes,
        backoff_min: n.delivery.backoff_min,
        backoff_max: n.delivery.backoff_max,
    };
    tracing::info!(sink = %s.name, target = %target, compression = n.compression.name(), "sink sending log records");
    let stats = Arc::clone(&st.stats);
    let (tx, thread) = match &n.buffer {
        Buffer::Memory(_) => deliver::spawn_http(encoder, transport, logs, stats)?,
        Buffer::Disk {
            dir,
            max_size,
            sync,
        } => {
            let disk = open_disk(
                &s.name,
                &dir.join(LOG_BUFFER),
                *max_size,
                *sync,
                "log records",
                &stats,
                &st.data_dir,
            )?;
            let grace = n.delivery.shutdown_grace;
            buffered::spawn_http_buffered(encoder, transport, logs, disk, grace, stats)?
        }
    };
    running.add_logs(st, &tx, thread);
    Ok(())
}

/// Starts a network sink's sender with `encoder` over `transport`: its
/// buffer (loading what a disk buffer kept from the last run), batching,
/// compression and retries.
pub fn spawn<E: BatchEncoder, T: sender::Transport>(
    s: &Sink,
    encoder: E,
    transport: T,
    st: &mut Start<'_>,
) -> anyhow::Result<Running> {
    let n = settings(s)?;
    let stats = Arc::clone(&st.stats);
    let queue = open_queue(&s.name, &n.buffer, &stats, &st.data_dir)?;
    tracing::info!(sink = %s.name, target = %n.target, compression = n.compression.name(), "sink sending");
    Ok(sender::spawn(encoder, n.compression, transport, queue, n.delivery, stats)?.into())
}

pub(super) fn settings(s: &Sink) -> anyhow::Result<&NetSink> {
    s.net
        .as_ref()
        .with_context(|| format!("sink type {} has no network settings", s.kind.name))
}

/// The directory of a sink's disk buffer of profiles, under its own.
pub const PROFILE_BUFFER: &str = "profiles";

/// Starts the profile side of network sink `s`: a sender of its own whose
/// requests (one per period, encoded by `encoder`) go to `url` (its `url`
/// unless given) over HTTP, through a buffer of the sink's kind (a disk
/// buffer in [`PROFILE_BUFFER`] below the sink's directory), with its
/// compression and backoff.
pub(super) fn start_profiles<E: ProfileEncoder>(
    s: &Sink,
    encoder: E,
    url: Option<&str>,
    st: &Start<'_>,
    running: &mut Running,
) -> anyhow::Result<()> {
    let transport = http(s, encoder.content_type(), url)?;
    let compression = settings(s)?.compression;
    start_profiles_over(s, encoder, transport, compression, url, st, running)
}

/// [`start_profiles`] over a transport of the sink type's own, the
/// sender compressing each request with `compression` (none where the
/// encoder compresses the parts itself).
pub(super) fn start_profiles_over<E: ProfileEncoder, T: sender::Transport>(
    s: &Sink,
    encoder: E,
    transport: T,
    compression: Compression,
    target: Option<&str>,
    st: &Start<'_>,
    running: &mut Running,
) -> anyhow::Result<()> {
    let n = settings(s)?;
    let stats = Arc::clone(&st.stats);
    let buffer = match &n.buffer {
        Buffer::Disk {
            dir,
            max_size,
            sync,
        } => Buffer::Disk {
            dir: dir.join(PROFILE_BUFFER),
            max_size: *max_size,
            sync: *sync,
        },
        memory => memory.clone(),
    };
    let queue = open_queue(&s.name, &buffer, &stats, &st.data_dir)?;
    // A disk buffer records how far it got, so that the next start sends
    // the stored periods a kill kept from it (crate::profiles).
    let (cursor, through) = match &buffer {
        Buffer::Disk { dir, .. } => {
            let now_s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let (c, through) = Cursor::open(dir, now_s, Arc::clone(&st.data_dir));
            (Some(c), Some(through))
        }
        Buffer::Memory(_) => (None, None),
    };
    tracing::info!(sink = %s.name, target = %target.unwrap_or(&n.target), compression = n.compression.name(), "sink sending profiles");
    let (tx, thread) = sender::spawn_batcher(
        Profiles::new(encoder).with_cursor(cursor),
        compression,
        transport,
        queue,
        n.delivery,
        Arc::clone(&stats),
    )?;
    running.profiles = Some(ProfileHandle::new(tx, stats, through));
    running.threads.push(thread);
    Ok(())
}
