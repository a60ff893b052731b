//! CPU profiles of the agent itself, on the admin site.
//!
//! The admin site serves `/debug/pprof/profile?seconds=N` (a pprof
//! protobuf, for `go tool pprof`) and `/debug/pprof/flamegraph?seconds=N`
//! (an SVG). Sampling (99 Hz, every thread, via a `SIGPROF` timer) is armed
//! only for the duration of such a request, so it costs nothing otherwise.
//! One profile runs at a time; a second request gets `409 Conflict`.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::CONTENT_TYPE;
use hyper::{Response, StatusCode};

/// Sampling frequency of self-profiles, in Hz: off the 100 Hz tick so
/// samples do not beat against periodic work.
const PROFILE_HZ: i32 = 99;
/// The longest profile a request may ask for.
const MAX_PROFILE_SECS: u64 = 300;

static PROFILING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a profile request returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    /// A pprof protobuf, for `go tool pprof`.
    Pprof,
    /// An SVG flame graph.
    FlameGraph,
}

pub(super) fn seconds_param(query: Option<&str>) -> Result<u64, String> {
    let Some(q) = query else { return Ok(30) };
    for pair in q.split('&') {
        if let Some(v) = pair.strip_prefix("seconds=") {
            return match v.parse::<u64>() {
                Ok(n) if (1..=MAX_PROFILE_SECS).contains(&n) => Ok(n),
                _ => Err(format!(
                    "seconds must be a whole number from 1 to {MAX_PROFILE_SECS}\n"
                )),
            };
        }
    }
    Ok(30)
}

fn plain(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

/// Samples the whole process for `seconds` and encodes the result.
fn take_profile(seconds: u64, format: Format) -> Result<Vec<u8>, String> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(PROFILE_HZ)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| format!("cannot start the profiler: {e}"))?;
    std::thread::sleep(std::time::Duration::from_secs(seconds));
    let report = guard
        .report()
        .build()
        .map_err(|e| format!("cannot build the profile: {e}"))?;
    drop(guard);
    let mut out = Vec::new();
    match format {
        Format::Pprof => {
            use pprof::protos::Message;
            let profile = report
                .pprof()
                .map_err(|e| format!("cannot encode the profile: {e}"))?;
            profile
                .write_to_vec(&mut out)
                .map_err(|e| format!("cannot encode the profile: {e}"))?;
        }
        Format::FlameGraph => {
            if report.data.is_empty() {
                // An idle agent takes no samples; say so rather than send nothing.
                out.extend_from_slice(
                    b"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"600\" height=\"40\">\
                      <text x=\"10\" y=\"25\">no samples: the agent used no CPU while it was profiled</text></svg>\n",
                );
            } else {
                out = own_flame_graph(&report, seconds).into_bytes();
            }
        }
    }
    Ok(out)
}

/// The agent's samples drawn by sonde's own renderer (the one of `sonde
/// profile` and `/profiles`), each thread a root frame: pprof-rs gives
/// each sample's frames leaf first, each frame's inlined functions
/// innermost first.
fn own_flame_graph(report: &pprof::Report, seconds: u64) -> String {
    use sonde_profile::flamegraph::{render, Options};
    use sonde_profile::model::{Function, Process, ProfileBuilder, Root};
    let mut b = ProfileBuilder::new(PROFILE_HZ as u32, 0, seconds * 1_000_000_000);
    for (frames, &count) in &report.data {
        let process = Process {
            pid: std::process::id(),
            name: "sonde".into(),
            tid: frames.thread_id as u32,
            thread: frames.thread_name_or_id(),
            ..Process::default()
        };
        let stack: Vec<Function> = frames
            .frames
            .iter()
            .rev()
            .flat_map(|f| f.iter().rev())
            .map(|s| Function {
                name: s.name(),
                module: "sonde".into(),
            })
            .collect();
        b.add(&process, &stack, count.max(0) as u64);
    }
    render(
        &b.finish(),
        &Options {
            title: format!("sonde's own CPU, {seconds} s"),
            roots: vec![Root::Thread],
            ..Options::default()
        },
    )
}

pub(super) async fn respond(query: Option<String>, format: Format) -> Response<Full<Bytes>> {
    let seconds = match seconds_param(query.as_deref()) {
        Ok(s) => s,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    if PROFILING.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return plain(
            StatusCode::CONFLICT,
            "a profile is already running\n".into(),
        );
    }
    let result = tokio::task::spawn_blocking(move || take_profile(seconds, format)).await;
    PROFILING.store(false, std::sync::atomic::Ordering::Release);
    match result {
        Ok(Ok(body)) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            let ctype = match format {
                Format::Pprof => "application/octet-stream",
                Format::FlameGraph => "image/svg+xml",
            };
            if let Ok(v) = ctype.parse() {
                r.headers_mut().insert(CONTENT_TYPE, v);
            }
            r
        }
        Ok(Err(e)) => plain(StatusCode::INTERNAL_SERVER_ERROR, e + "\n"),
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("profiler task failed: {e}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_seconds_are_bounded() {
        assert_eq!(seconds_param(None), Ok(30));
        assert_eq!(seconds_param(Some("seconds=5")), Ok(5));
        assert_eq!(seconds_param(Some("debug=1&seconds=2")), Ok(2));
        assert!(seconds_param(Some("seconds=0")).is_err());
        assert!(seconds_param(Some("seconds=301")).is_err());
        assert!(seconds_param(Some("seconds=x")).is_err());
    }
}
