//! The agent's stored profiles over HTTP, on the admin site: what the
//! `/profiles` page draws, and what scripts read (docs/PROFILING.md, "The
//! profiles over HTTP").
//!
//! | path | answers |
//! |---|---|
//! | `/api/profiles/top` | the top functions, the JSON of `sonde profile --json` (with each function's cost and CO2 where `[profiler]` prices them) |
//! | `/api/profiles/diff` | the differential top, the JSON of `sonde profile diff --json` |
//! | `/api/profiles/flamegraph` | a flame graph (SVG) |
//! | `/api/profiles/diff/flamegraph` | a differential flame graph (SVG) |
//! | `/api/profiles/folded` | folded stacks (text) |
//! | `/api/profiles/pprof` | the merged profile as gzip pprof, to download |
//! | `/api/profiles/processes` | the processes in the range, by samples |
//!
//! Parameters: `range=SINCE..UNTIL` (default `10m..0s`) for one profile,
//! `base=` and `new=` (defaults `20m..10m` and `10m..0s`) for a diff, in
//! the units of `sonde profile --since` (s, m, h, d ago); `pid=N`,
//! `process=NAME`, `container=ID` (an id, a prefix of one, or a pod uid)
//! and `host=NAME` (each repeatable) keep only those processes, `thread=PATTERN` only the threads whose name matches the
//! regular expression; `top=N` (default 50) cuts the tables;
//! `focus=FUNCTION` keeps the stacks through that function, cut to start
//! at it (`side=callees`, the default) or turned to run from it to their
//! roots (`side=callers`); `by=process,thread` (any of host, process,
//! thread, outermost first) roots the flame graphs and folded stacks at
//! where each stack ran. A bad or unknown parameter is a 400 with
//! a JSON `{"error": ...}` saying what is wrong; a range with no stored
//! profile is a 404 likewise. Each request reads and merges the store's
//! files on tokio's blocking pool, off the listener's thread.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, CONTENT_DISPOSITION, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use sonde_profile::cost::Prices;
use sonde_profile::model::parse_roots;
use sonde_profile::select::Select;
use sonde_profile::store::{Ago, SpanError, Store};
use sonde_profile::{flamegraph, pprof, views, Focus, Profile, Root};

/// The most rows a table may ask for.
const MAX_TOP: usize = 100_000;

/// What a request asks for.
#[derive(Debug)]
struct Query {
    range: Ago,
    base: Ago,
    new: Ago,
    select: Select,
    top: usize,
    /// A function to see the profile from, and from which side.
    focus: Option<(String, Focus)>,
    /// What flame graphs and folded stacks are rooted at.
    by: Vec<Root>,
}

fn minutes(since: u64, until: u64) -> Ago {
    Ago {
        since: std::time::Duration::from_secs(since * 60),
        until: std::time::Duration::from_secs(until * 60),
    }
}

impl Query {
    fn parse(query: Option<&str>) -> Result<Query, String> {
        let mut q = Query {
            range: minutes(10, 0),
            base: minutes(20, 10),
            new: minutes(10, 0),
            select: Select::default(),
            top: 50,
            focus: None,
            by: Vec::new(),
        };
        let mut side = Focus::Callees;
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let value = value.as_ref();
            let bad = |what: &str| format!("{key}={value:?}: {what}");
            match key.as_ref() {
                "range" => q.range = Ago::parse(value).map_err(|e| bad(&e))?,
                "base" => q.base = Ago::parse(value).map_err(|e| bad(&e))?,
                "new" => q.new = Ago::parse(value).map_err(|e| bad(&e))?,
                "pid" => q
                    .select
                    .pids
                    .push(value.parse().map_err(|_| bad("not a process id"))?),
                "process" if !value.is_empty() => q.select.processes.push(value.to_string()),
                "process" => return Err(bad("empty process name")),
                "host" if !value.is_empty() => q.select.hosts.push(value.to_string()),
                "container" if !value.is_empty() => q.select.containers.push(value.to_string()),
                "container" => return Err(bad("empty container id")),
                "host" => return Err(bad("empty host name")),
                // An empty pattern is the page's empty filter box.
                "thread" if value.is_empty() => {}
                "thread" => q.select.thread = Some(Select::thread_pattern(value)?),
                "by" => q.by = parse_roots(value).map_err(|e| bad(&e))?,
                "top" => {
                    q.top = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_TOP).contains(n))
                        .ok_or_else(|| bad(&format!("a number from 1 to {MAX_TOP}")))?;
                }
                "focus" if !value.is_empty() => q.focus = Some((value.to_string(), side)),
                "focus" => return Err(bad("empty function name")),
                "side" => {
                    side = match value {
                        "callees" => Focus::Callees,
                        "callers" => Focus::Callers,
                        _ => return Err(bad("callers or callees")),
                    }
                }
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}; known: range, base, new, pid, process, thread, container, host, top, focus, side, by"
                    ))
                }
            }
        }
        // `side` may come before or after `focus`.
        if let Some(focus) = &mut q.focus {
            focus.1 = side;
        }
        Ok(q)
    }

    /// The profile with only the processes asked for, seen from the
    /// focused function if there is one.
    fn keep(&self, profile: Profile) -> Profile {
        let profile = self.select.apply(profile);
        match &self.focus {
            Some((name, side)) => profile.focus(name, *side),
            None => profile,
        }
    }

    fn read(&self, store: &Store, span: Ago) -> Result<Profile, Failure> {
        match store.read_ago(span) {
            Ok(p) => Ok(self.keep(p)),
            Err(e @ SpanError::Empty { .. }) => Err(Failure(StatusCode::NOT_FOUND, e.to_string())),
            Err(e) => Err(Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        }
    }
}

/// A request that cannot be answered: the status and what to say.
struct Failure(StatusCode, String);

/// Whether the admin site routes `path` here.
pub(super) fn handles(path: &str) -> bool {
    path.starts_with("/api/profiles/")
}

/// Answers a request for `path` from `store`, on the blocking pool.
pub(super) async fn respond(
    store: Store,
    prices: Prices,
    path: String,
    query: Option<String>,
) -> Response<Full<Bytes>> {
    tokio::task::spawn_blocking(move || answer(&store, &prices, &path, query.as_deref()))
        .await
        .unwrap_or_else(|e| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("reading the profiles failed: {e}"),
            )
        })
}

fn answer(
    store: &Store,
    prices: &Prices,
    path: &str,
    query: Option<&str>,
) -> Response<Full<Bytes>> {
    let q = match Query::parse(query) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let one = |span| q.read(store, span);
    let result = match path {
        "/api/profiles/top" => one(q.range).map(|p| {
            let mut top = views::top(&p, Some(q.top));
            views::price_top(&mut top, prices);
            json(&top)
        }),
        "/api/profiles/flamegraph" => one(q.range).map(|p| {
            let options = flamegraph::Options {
                title: format!("{} samples, {}", p.samples(), describe(q.range)),
                roots: q.by.clone(),
                ..Default::default()
            };
            body(SVG, flamegraph::render(&p, &options))
        }),
        "/api/profiles/folded" => {
            one(q.range).map(|p| body("text/plain; charset=utf-8", views::folded(&p.rooted(&q.by))))
        }
        "/api/profiles/pprof" => one(q.range).map(|p| {
            let mut r = body("application/octet-stream", pprof::encode(&p));
            let name = format!(
                "attachment; filename=\"sonde-{}-{}.pb.gz\"",
                ago_name(q.range.since),
                ago_name(q.range.until)
            );
            if let Ok(v) = HeaderValue::from_str(&name) {
                r.headers_mut().insert(CONTENT_DISPOSITION, v);
            }
            r
        }),
        "/api/profiles/processes" => one(q.range).map(|p| json(&processes(&p))),
        "/api/profiles/diff" => {
            one(q.base)
                .and_then(|base| Ok((base, one(q.new)?)))
                .map(|(base, new)| {
                    let mut diff = views::diff(&base, &new, Some(q.top));
                    views::price_diff(&mut diff, prices);
                    json(&diff)
                })
        }
        "/api/profiles/diff/flamegraph" => one(q.base)
            .and_then(|base| Ok((base, one(q.new)?)))
            .map(|(base, new)| {
                let options = flamegraph::Options {
                    title: format!(
                        "{} against {}: red grew, blue shrank (widths from the later)",
                        describe(q.new),
                        describe(q.base)
                    ),
                    roots: q.by.clone(),
                    ..Default::default()
                };
                body(SVG, flamegraph::render_diff(&base, &new, &options))
            }),
        _ => Err(Failure(
            StatusCode::NOT_FOUND,
            format!("no such path {path:?}"),
        )),
    };
    result.unwrap_or_else(|Failure(status, message)| error(status, &message))
}

const SVG: &str = "image/svg+xml";

/// One process of a profile, its samples and its threads', for the
/// page's filters.
#[derive(Debug, serde::Serialize)]
struct ProcessRow<'a> {
    host: &'a str,
    pid: u32,
    name: &'a str,
    container: &'a str,
    pod: &'a str,
    samples: u64,
    /// By samples, most first.
    threads: Vec<ThreadRow<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct ThreadRow<'a> {
    tid: u32,
    name: &'a str,
    samples: u64,
}

fn processes(p: &Profile) -> Vec<ProcessRow<'_>> {
    let mut samples = vec![0u64; p.processes.len()];
    for s in &p.stacks {
        samples[s.process as usize] += s.count;
    }
    // A Process of a profile is one thread of a process on a host.
    let mut rows: std::collections::HashMap<(&str, u32, &str, &str), ProcessRow<'_>> =
        Default::default();
    for (t, samples) in p.processes.iter().zip(samples) {
        let row = rows
            .entry((&t.host, t.pid, &t.name, &t.container))
            .or_insert_with(|| ProcessRow {
                host: &t.host,
                pid: t.pid,
                name: &t.name,
                container: &t.container,
                pod: &t.pod,
                samples: 0,
                threads: Vec::new(),
            });
        row.samples += samples;
        row.threads.push(ThreadRow {
            tid: t.tid,
            name: &t.thread,
            samples,
        });
    }
    let mut rows: Vec<ProcessRow<'_>> = rows.into_values().collect();
    for row in &mut rows {
        row.threads
            .sort_by(|a, b| b.samples.cmp(&a.samples).then(a.tid.cmp(&b.tid)));
    }
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then((a.host, a.pid).cmp(&(b.host, b.pid)))
    });
    rows
}

/// `10m..0s` as words: "the last 10m", "20m to 10m ago".
fn describe(span: Ago) -> String {
    if span.until.is_zero() {
        format!("the last {}", ago_name(span.since))
    } else {
        format!("{} to {} ago", ago_name(span.since), ago_name(span.until))
    }
}

/// A duration in its largest whole unit: `90s`, `10m`, `2h`, `1d`.
fn ago_name(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".to_string(),
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn json<T: serde::Serialize>(value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(bytes) => body("application/json", bytes),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut r = json(&serde_json::json!({ "error": message }));
    *r.status_mut() = status;
    r
}

fn body(content_type: &'static str, bytes: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(bytes.into()));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_parse_with_defaults_and_bad_ones_say_why() {
        let q = Query::parse(None).unwrap();
        assert_eq!(
            (q.range, q.base, q.new),
            (minutes(10, 0), minutes(20, 10), minutes(10, 0))
        );
        assert_eq!(q.top, 50);
        let q = Query::parse(Some(
            "range=1h..30m&pid=7&pid=9&process=my%20app&top=5&side=callers&focus=std%3A%3Avec&thread=%5Eworker&host=web-1&by=process,thread&container=4f2c0e1d9a8b",
        ))
        .unwrap();
        assert_eq!(q.focus, Some(("std::vec".to_string(), Focus::Callers)));
        assert_eq!(q.range, minutes(60, 30));
        assert_eq!(q.select.pids, [7, 9]);
        assert_eq!(q.select.processes, ["my app"]);
        assert_eq!(q.select.hosts, ["web-1"]);
        assert_eq!(q.select.containers, ["4f2c0e1d9a8b"]);
        assert_eq!(
            q.select.thread.as_ref().map(|t| t.as_str()),
            Some("^worker")
        );
        assert_eq!(q.by, [Root::Process, Root::Thread]);
        assert_eq!(q.top, 5);
        for (query, says) in [
            ("range=10m..20m", "longer ago to shorter ago"),
            ("range=yesterday", "not a range"),
            ("base=5x..0s", "not a duration"),
            ("pid=-1", "not a process id"),
            ("pid=nginx", "not a process id"),
            ("top=0", "from 1 to 100000"),
            ("top=many", "from 1 to 100000"),
            ("process=", "empty process name"),
            ("focus=", "empty function name"),
            ("side=up", "callers or callees"),
            ("thread=worker-(", "thread pattern \"worker-(\""),
            ("host=", "empty host name"),
            ("container=", "empty container id"),
            ("by=pod", "expected host, process or thread"),
            ("seconds=30", "unknown parameter \"seconds\""),
        ] {
            let e = Query::parse(Some(query)).unwrap_err();
            assert!(e.contains(says), "{query}: {e}");
        }
    }

    #[test]
    fn ranges_read_as_words_in_their_largest_unit() {
        assert_eq!(describe(minutes(10, 0)), "the last 10m");
        assert_eq!(describe(minutes(120, 60)), "2h to 1h ago");
        assert_eq!(describe(Ago::parse("90s..45s").unwrap()), "90s to 45s ago");
        assert_eq!(describe(Ago::parse("2d..0s").unwrap()), "the last 2d");
    }
}
