//! The agent's stored profiles over HTTP, on the admin site: what the
//! `/profiles` page draws, and what scripts read (docs/PROFILING.md, "The
//! profiles over HTTP").
//!
//! | path | answers |
//! |---|---|
//! | `/api/profiles/top` | the top functions, the JSON of `sonde profile --json` (with each function's cost and CO2 where `[profiler]` prices them) |
//! | `/api/profiles/diff` | the differential top, the JSON of `sonde profile diff --json` |
//! | `/api/profiles/classes` | the hot-spot classes, the JSON of `sonde profile --classes --json` |
//! | `/api/profiles/classes/diff` | how each class changed, the JSON of `sonde profile diff --classes --json` |
//! | `/api/profiles/flamegraph` | a flame graph (SVG) |
//! | `/api/profiles/diff/flamegraph` | a differential flame graph (SVG) |
//! | `/api/profiles/folded` | folded stacks (text) |
//! | `/api/profiles/pprof` | the merged profile as gzip pprof, to download |
//! | `/api/profiles/processes` | the processes in the range, by samples |
//! | `/api/profiles/hosts` | the hosts in the range, with their samples |
//! | `/api/profiles/source` | where the profiles come from: this host's store, or the fleet store's URI |
//!
//! Parameters: `range=SINCE..UNTIL` (default `10m..0s`) for one profile,
//! `base=` and `new=` (defaults `20m..10m` and `10m..0s`) for a diff, in
//! the units of `sonde profile --since` (s, m, h, d ago); `pid=N`,
//! `process=NAME`, `container=ID` (an id, a prefix of one, or a pod uid)
//! and `host=NAME` (each repeatable) keep only those processes, `thread=PATTERN` only the threads whose name matches the
//! regular expression; `top=N` (default 50) cuts the tables;
//! `focus=FUNCTION` keeps the stacks through that function, cut to start
//! at it (`side=callees`, the default) or turned to run from it to their
//! roots (`side=callers`; the classes take the stacks through it either
//! way); `class=NAME` keeps the samples of one hot-spot class (or
//! `unclassified`), their stacks whole, before `focus` cuts them;
//! `by=process,thread` (any of host, process,
//! thread, outermost first) roots the flame graphs and folded stacks at
//! where each stack ran; `layout=icicle` (the default, the root at the
//! top) or `layout=flame` (the root at the bottom) turns the flame graphs.
//! A bad or unknown parameter is a 400 with
//! a JSON `{"error": ...}` saying what is wrong; a range with no stored
//! profile is a 404 likewise, whose `reason` tells a range the running
//! profiler has yet to fill (`waiting`, with `next_profile_in_s`) or one
//! before the first stored profile (`before_first`) from an empty store
//! (`empty`) or a gap (`none_in_range`). Each request reads and merges
//! the store's files on tokio's blocking pool, off the listener's thread;
//! requests of the same stored files share one read ([`recent`]).
//!
//! With `[profiler] store` set, every path answers from that fleet store
//! instead ([`fleet`]), with the same parameters.

use http_body_util::Full;
use hyper::body::Bytes;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use hyper::header::{HeaderValue, CONTENT_DISPOSITION, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Response, StatusCode};
use sonde_profile::classes::{self, Classifier};
use sonde_profile::cost::Prices;
use sonde_profile::model::parse_roots;
use sonde_profile::select::Select;
use sonde_profile::store::{ago_name, rough_ago, Ago, SpanError, Store};
use sonde_profile::{flamegraph, pprof, views, Focus, Profile, Root};

use sonde_profiler::ProfilerStats;
use sonde_sinks::clickhouse::store::FleetStore;

mod fleet;

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
    /// Which way flame graphs grow from their root.
    layout: flamegraph::Layout,
    /// The hot-spot class whose samples alone are kept.
    class: Option<String>,
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
            // The root at the top: a browser shows the top of an SVG
            // first, and there an icicle has its widest frames.
            layout: flamegraph::Layout::Icicle,
            class: None,
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
                "layout" => q.layout = value.parse().map_err(|e: String| bad(&e))?,
                "top" => {
                    q.top = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_TOP).contains(n))
                        .ok_or_else(|| bad(&format!("a number from 1 to {MAX_TOP}")))?;
                }
                "focus" if !value.is_empty() => q.focus = Some((value.to_string(), side)),
                "focus" => return Err(bad("empty function name")),
                // An empty class is the page's "all classes".
                "class" if value.is_empty() => {}
                "class" => q.class = Some(value.to_string()),
                "side" => {
                    side = match value {
                        "callees" => Focus::Callees,
                        "callers" => Focus::Callers,
                        _ => return Err(bad("callers or callees")),
                    }
                }
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}; known: range, base, new, pid, process, thread, container, host, top, focus, side, by, layout, class"
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

    /// The query as `path` takes it, or a 400's message when `class=`
    /// names no class of `classifier`. The classes views cut a focus's
    /// stacks to start at the function (`side=callees`) whatever `side`
    /// says: a stack turned to run to its root would have its outermost
    /// caller where its innermost frame was, and be classed by that.
    fn for_path(mut self, path: &str, classifier: &Classifier) -> Result<Query, String> {
        if let Some(name) = &self.class {
            if !classifier.knows(name) {
                return Err(format!(
                    "class={name:?}: no such class; the classes are {}",
                    classifier.names()
                ));
            }
        }
        if path.starts_with("/api/profiles/classes") {
            if let Some(focus) = &mut self.focus {
                focus.1 = Focus::Callees;
            }
        }
        Ok(self)
    }

    /// `profile` cut to the class asked for, then seen from the focused
    /// function if there is one: classes are decided on whole stacks,
    /// before focus cuts or turns them.
    fn class_and_focus(&self, profile: Profile, classifier: &Classifier) -> Profile {
        let profile = match &self.class {
            // Checked by `for_path` before any read: an unknown class is
            // a 400, never an empty answer.
            Some(name) => classifier.keep(&profile, name).unwrap_or_default(),
            None => profile,
        };
        match &self.focus {
            Some((name, side)) => profile.focus(name, *side),
            None => profile,
        }
    }

    /// The profile with only the processes and the class asked for, seen
    /// from the focused function if there is one.
    fn keep(&self, profile: Profile, classifier: &Classifier) -> Profile {
        self.class_and_focus(self.select.apply(profile), classifier)
    }

    fn read(
        &self,
        store: &Store,
        classifier: &Classifier,
        span: Ago,
        now: &Now,
    ) -> Result<Profile, Failure> {
        match recent::read(store, span, now.ns / 1_000_000_000) {
            Ok(p) => Ok(self.keep(Profile::clone(&p), classifier)),
            Err(e) => Err(unstored(e, span, now)),
        }
    }
}

/// The store's last few reads, shared by the requests of one page load.
///
/// # Design
///
/// A load of the `/profiles` page asks for the table, the classes, the
/// flame graph and the processes of one range: four requests that each
/// decode and merge every stored period in it, seconds each for a busy
/// host's hour on a small machine. Reads go one at a time through here,
/// and a read of the same stored files (the same start times and sizes)
/// as one of the last [`recent::KEPT`] reads takes a copy of its merged
/// profile instead: one read per range per load. The cost is memory: up
/// to that many merged profiles, for [`recent::KEEP_FOR`] after their
/// read; then a timer on the runtime lets them go, so that an agent
/// whose page was looked at once holds nothing more than before.
mod recent {
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use sonde_profile::store::{Ago, SpanError, Store};
    use sonde_profile::Profile;

    /// How many reads are kept: a comparison's two ranges and one more.
    pub(super) const KEPT: usize = 3;

    /// How long a read is kept: a page load's requests come within a
    /// second or two of each other, however long the first read took.
    pub(super) const KEEP_FOR: Duration = Duration::from_secs(30);

    /// What a read merged: the store's directory and each file's start
    /// and size.
    type Key = (std::path::PathBuf, Vec<(u64, u64)>);

    type Kept = Vec<(Key, Arc<Profile>, Instant)>;

    static RECENT: Mutex<Kept> = Mutex::new(Vec::new());

    /// Lets go of the reads older than [`KEEP_FOR`].
    fn expire(recent: &mut Kept) {
        recent.retain(|(_, _, at)| at.elapsed() < KEEP_FOR);
    }

    /// `span` of `store` as of `now_s`, merged, as [`Store::read_at`]
    /// reads it.
    pub(super) fn read(store: &Store, span: Ago, now_s: u64) -> Result<Arc<Profile>, SpanError> {
        // Held over the read: requests of one load that arrive together
        // wait for the first one's read rather than each reading.
        let mut recent = RECENT.lock().unwrap_or_else(PoisonError::into_inner);
        expire(&mut recent);
        let (from, until) = span.bounds(now_s);
        let key = || -> Result<Key, SpanError> {
            let files = store
                .list()?
                .into_iter()
                .filter(|e| (from..until).contains(&e.start_s))
                .map(|e| (e.start_s, e.bytes))
                .collect();
            Ok((store.path().to_path_buf(), files))
        };
        let before = key()?;
        if let Some(i) = recent.iter().position(|(k, _, _)| *k == before) {
            let hit = recent.remove(i);
            let profile = Arc::clone(&hit.1);
            recent.push(hit);
            return Ok(profile);
        }
        let profile = Arc::new(store.read_at(span, now_s)?);
        // Kept only when no period was stored or removed during the read,
        // so that the profile is of the files its key names.
        if key()? == before {
            if recent.len() == KEPT {
                recent.remove(0);
            }
            recent.push((before, Arc::clone(&profile), Instant::now()));
            // Reads run on the runtime's blocking pool, which has a
            // handle to it; outside one (a unit test) the next read
            // expires what is old.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async {
                    tokio::time::sleep(KEEP_FOR + Duration::from_millis(100)).await;
                    expire(&mut RECENT.lock().unwrap_or_else(PoisonError::into_inner));
                });
            }
        }
        Ok(profile)
    }
}

/// The time of a request and what the profiler is doing then, which
/// explains an empty range.
#[derive(Debug, Clone, Copy)]
struct Now {
    /// Unix nanoseconds.
    ns: u64,
    /// The period being sampled, as Unix nanoseconds `(start, end)`;
    /// `None` while the profiler is off. Its profile is stored at its end
    /// under its start.
    period: Option<(u64, u64)>,
    /// Periods this run of the profiler has stored.
    periods: u64,
    /// Periods it failed to store.
    write_errors: u64,
}

impl Now {
    /// Now, and the profiler's state from its counters.
    fn of(stats: &ProfilerStats) -> Now {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let end = stats.period_end_ns.load(Relaxed);
        let length = stats.period_ns.load(Relaxed);
        Now {
            ns,
            period: (stats.running.load(Relaxed) == 1 && end > 0)
                .then(|| (end.saturating_sub(length), end)),
            periods: stats.periods.load(Relaxed),
            write_errors: stats.write_errors.load(Relaxed),
        }
    }
}

/// The answer to a range without a stored profile: where the profiler is
/// still sampling the period that will fill it, how long that takes, not
/// styled as an error by the page; where it starts before the first
/// stored profile, that; otherwise what the store says.
fn unstored(e: SpanError, span: Ago, now: &Now) -> Failure {
    let not_found = |reason, message: String| Failure {
        status: StatusCode::NOT_FOUND,
        message,
        reason: Some(reason),
        next_profile_in_s: None,
    };
    let empty_store = matches!(e, SpanError::Empty { .. });
    if let (SpanError::Empty { .. } | SpanError::NoneIn { .. }, Some((start, end))) =
        (&e, now.period)
    {
        let (from, until) = span.bounds(now.ns / 1_000_000_000);
        let in_s = end.saturating_sub(now.ns).div_ceil(1_000_000_000);
        let when = if in_s == 0 {
            "now".to_string()
        } else {
            format!("in {in_s} s")
        };
        let failed = if now.write_errors > 0 {
            format!(
                " ({} of its profiles could not be stored so far: see the agent's log)",
                now.write_errors
            )
        } else {
            String::new()
        };
        let first = now.periods == 0;
        let waiting = |reason, message: String| Failure {
            next_profile_in_s: Some(in_s),
            ..not_found(reason, message + &failed)
        };
        if (from..until).contains(&(start / 1_000_000_000)) {
            return waiting(
                "waiting",
                if first {
                    format!("the profiler is running; its first profile is stored at the end of its first period, {when}")
                } else {
                    format!("the profiler is running; the profile of the period in progress is stored at its end, {when}")
                },
            );
        }
        if empty_store && until <= start / 1_000_000_000 {
            return waiting(
                "before_first",
                format!("{span} is before the profiler's first profile, which it stores at the end of its first period, {when}"),
            );
        }
        // A range shorter than a period, after the period's start: the
        // profile is stored under its start, so this range will not hold
        // it; say which will.
        if from > start / 1_000_000_000 {
            let ago = rough_ago(now.ns.saturating_sub(start).div_ceil(1_000_000_000));
            let which = if first {
                "its first profile is stored at the end of its first period"
            } else {
                "the profile of the period in progress is stored at its end"
            };
            return waiting(
                "waiting",
                format!("the profiler is running; {which}, {when}, under the period's start, {ago} ago, before {span}: {ago}..0s will hold it"),
            );
        }
    }
    match e {
        SpanError::Read(e) => Failure {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: e.to_string(),
            reason: None,
            next_profile_in_s: None,
        },
        e @ SpanError::Empty { .. } => not_found("empty", e.to_string()),
        e @ SpanError::BeforeFirst { .. } => not_found("before_first", e.to_string()),
        e @ SpanError::NoneIn { .. } => not_found("none_in_range", e.to_string()),
    }
}

/// A request that cannot be answered: the status and what to say.
#[derive(Debug)]
struct Failure {
    status: StatusCode,
    message: String,
    /// Why a range holds no profile (`waiting`, `before_first`, `empty`,
    /// `none_in_range`), for the page to tell a wait from a fault.
    reason: Option<&'static str>,
    /// For a range the running profiler is filling: when it stores the
    /// profile that will.
    next_profile_in_s: Option<u64>,
}

impl Failure {
    fn new(status: StatusCode, message: String) -> Failure {
        Failure {
            status,
            message,
            reason: None,
            next_profile_in_s: None,
        }
    }
}

/// Whether the admin site routes `path` here.
pub(super) fn handles(path: &str) -> bool {
    path.starts_with("/api/profiles/")
}

/// Answers a request for `path` from `store`, or from the fleet store
/// where there is one, on the blocking pool.
pub(super) async fn respond(
    store: Store,
    prices: Prices,
    classifier: Arc<Classifier>,
    fleet: Option<FleetStore>,
    profiler: Arc<ProfilerStats>,
    path: String,
    query: Option<String>,
) -> Response<Full<Bytes>> {
    if path == "/api/profiles/source" {
        return json(&match &fleet {
            Some(f) => serde_json::json!({
                "source": "fleet",
                "store": f.uri(),
                "server": f.describe(),
            }),
            None => serde_json::json!({ "source": "local" }),
        });
    }
    tokio::task::spawn_blocking(move || {
        let now = Now::of(&profiler);
        match &fleet {
            Some(fleet) => fleet::answer(
                fleet,
                &prices,
                &classifier,
                now.ns / 1_000_000_000,
                &path,
                query.as_deref(),
            ),
            None => answer(&store, &prices, &classifier, &now, &path, query.as_deref()),
        }
    })
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
    classifier: &Classifier,
    now: &Now,
    path: &str,
    query: Option<&str>,
) -> Response<Full<Bytes>> {
    let q = match Query::parse(query).and_then(|q| q.for_path(path, classifier)) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let one = |span| q.read(store, classifier, span, now);
    // Both sides of a diff; one read when they name the same range, so
    // that a period stored between two reads cannot make a range differ
    // from itself.
    let both = || {
        let base = one(q.base)?;
        let new = if q.new == q.base {
            base.clone()
        } else {
            one(q.new)?
        };
        Ok((base, new))
    };
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
                layout: q.layout,
                ..Default::default()
            };
            body(SVG, flamegraph::render(&p, &options))
        }),
        "/api/profiles/folded" => {
            one(q.range).map(|p| body("text/plain; charset=utf-8", views::folded(&p.rooted(&q.by))))
        }
        "/api/profiles/pprof" => one(q.range).map(|p| pprof_download(&p, "sonde", q.range)),
        "/api/profiles/processes" => one(q.range).map(|p| json(&processes(&p))),
        "/api/profiles/hosts" => one(q.range).map(|p| json(&p.hosts())),
        "/api/profiles/diff" => both().map(|(base, new)| {
            let mut diff = views::diff(&base, &new, Some(q.top));
            views::price_diff(&mut diff, prices);
            json(&diff)
        }),
        "/api/profiles/classes" => {
            one(q.range).map(|p| json(&classes::classes(&p, classifier, prices, q.top)))
        }
        "/api/profiles/classes/diff" => both().map(|(base, new)| {
            json(&classes::diff(
                &classes::classes(&base, classifier, prices, q.top),
                &classes::classes(&new, classifier, prices, q.top),
            ))
        }),
        "/api/profiles/diff/flamegraph" => both().map(|(base, new)| {
            let options = flamegraph::Options {
                title: format!(
                    "{} against {}: red grew, blue shrank (widths from the later)",
                    describe(q.new),
                    describe(q.base)
                ),
                roots: q.by.clone(),
                layout: q.layout,
                ..Default::default()
            };
            body(SVG, flamegraph::render_diff(&base, &new, &options))
        }),
        _ => Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("no such path {path:?}"),
        )),
    };
    result.unwrap_or_else(|f| failed(&f))
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

/// `p` as gzip pprof, to download as `{prefix}-SINCE-UNTIL.pb.gz`.
fn pprof_download(p: &Profile, prefix: &str, range: Ago) -> Response<Full<Bytes>> {
    let mut r = body("application/octet-stream", pprof::encode(p));
    let name = format!(
        "attachment; filename=\"{prefix}-{}-{}.pb.gz\"",
        ago_name(range.since),
        ago_name(range.until)
    );
    if let Ok(v) = HeaderValue::from_str(&name) {
        r.headers_mut().insert(CONTENT_DISPOSITION, v);
    }
    r
}

fn json<T: serde::Serialize>(value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(bytes) => body("application/json", bytes),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// A failure as JSON, with `Retry-After` where the profiler will store
/// the profile asked for.
fn failed(f: &Failure) -> Response<Full<Bytes>> {
    let mut body = serde_json::json!({ "error": f.message });
    if let Some(reason) = f.reason {
        body["reason"] = reason.into();
    }
    if let Some(s) = f.next_profile_in_s {
        body["next_profile_in_s"] = s.into();
    }
    let mut r = json(&body);
    *r.status_mut() = f.status;
    if let Some(s) = f.next_profile_in_s {
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(s.max(1)));
    }
    r
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
        assert_eq!(q.layout, flamegraph::Layout::Icicle);
        assert_eq!(
            Query::parse(Some("layout=flame")).unwrap().layout,
            flamegraph::Layout::Flame
        );
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
        assert_eq!(
            Query::parse(Some("class=allocation"))
                .unwrap()
                .class
                .as_deref(),
            Some("allocation")
        );
        assert_eq!(Query::parse(Some("class=")).unwrap().class, None);
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
            ("layout=sideways", "icicle (the root at the top) or flame"),
            ("seconds=30", "unknown parameter \"seconds\""),
        ] {
            let e = Query::parse(Some(query)).unwrap_err();
            assert!(e.contains(says), "{query}: {e}");
        }
    }

    /// The JSON body of an answer.
    fn body_of(r: Response<Full<Bytes>>) -> serde_json::Value {
        use http_body_util::BodyExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt.block_on(r.into_body().collect()).unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn an_empty_range_the_profiler_is_filling_says_when_not_that_something_is_wrong() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::reader(tmp.path());
        // The agent started 18 s into a minute's period.
        let start = 1_800_000_000 / 60 * 60;
        let now = Now {
            ns: (start + 18) * S,
            period: Some((start * S, (start + 60) * S)),
            periods: 0,
            write_errors: 0,
        };
        let ask = |query: &str| {
            let r = answer(
                &store,
                &Prices::default(),
                &Classifier::shipped(),
                &now,
                "/api/profiles/top",
                Some(query),
            );
            let retry = r.headers().get(RETRY_AFTER).cloned();
            (r.status(), retry, body_of(r))
        };
        let (status, retry, body) = ask("range=10m..0s");
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(
            body,
            serde_json::json!({
                "error": "the profiler is running; its first profile is stored at the end of its first period, in 42 s",
                "reason": "waiting",
                "next_profile_in_s": 42,
            })
        );
        assert_eq!(retry.unwrap(), "42");
        // The comparison's earlier range lies before it.
        let (_, _, body) = ask("range=20m..10m");
        assert_eq!(body["reason"], "before_first", "{body}");
        assert_eq!(
            body["error"],
            "20m..10m is before the profiler's first profile, which it stores at the end of its first period, in 42 s"
        );
        // An hour's period started 40 minutes ago: the last 10 minutes
        // will not hold its profile, stored under its start.
        let hourly = Now {
            ns: (start / 3600 * 3600 + 2400) * S,
            period: Some((start / 3600 * 3600 * S, (start / 3600 * 3600 + 3600) * S)),
            ..now
        };
        let r = answer(
            &store,
            &Prices::default(),
            &Classifier::shipped(),
            &hourly,
            "/api/profiles/top",
            None,
        );
        let body = body_of(r);
        assert_eq!(body["reason"], "waiting", "{body}");
        assert_eq!(
            body["error"],
            "the profiler is running; its first profile is stored at the end of its first period, in 1200 s, under the period's start, 40m ago, before 10m..0s: 40m..0s will hold it"
        );
        // Without a profiler the store's own words, an error.
        let off = Now {
            period: None,
            ..now
        };
        let r = answer(
            &store,
            &Prices::default(),
            &Classifier::shipped(),
            &off,
            "/api/profiles/top",
            None,
        );
        assert!(r.headers().get(RETRY_AFTER).is_none());
        let body = body_of(r);
        assert_eq!(body["reason"], "empty", "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("no stored profiles in"),
            "{body}"
        );
        assert!(body.get("next_profile_in_s").is_none());
    }

    /// A store under `dir` that keeps every period it is given.
    fn unbounded_store(dir: &std::path::Path) -> Store {
        Store::new(
            sonde_profile::store::dir(dir),
            sonde_profile::store::Limits {
                retention_s: u64::MAX,
                max_bytes: u64::MAX,
            },
        )
    }

    #[test]
    fn a_range_before_the_first_stored_profile_is_named_and_a_period_in_progress_is_awaited() {
        let tmp = tempfile::tempdir().unwrap();
        let store = unbounded_store(tmp.path());
        let start = 1_800_000_000 / 60 * 60;
        for period in [start - 180, start - 120, start - 60] {
            store
                .write(&sonde_profile::ProfileBuilder::new(19, period * S, 60 * S).finish())
                .unwrap();
        }
        let now = Now {
            ns: (start + 30) * S,
            period: Some((start * S, (start + 60) * S)),
            periods: 3,
            write_errors: 1,
        };
        let ask = |query: &str| {
            body_of(answer(
                &store,
                &Prices::default(),
                &Classifier::shipped(),
                &now,
                "/api/profiles/diff",
                Some(query),
            ))
        };
        let body = ask("base=20m..10m&new=10m..0s");
        assert_eq!(body["reason"], "before_first", "{body}");
        let text = body["error"].as_str().unwrap();
        assert!(
            text.starts_with("20m..10m is before the first stored profile, at ")
                && text.contains("(4m ago)")
                && text.ends_with("4m..0s holds every stored profile"),
            "{text}"
        );
        assert!(body.get("next_profile_in_s").is_none());
        // The last 45 s hold no stored period yet: the one in progress,
        // stored under its start 30 s ago, fills them; a failed write is
        // mentioned.
        let body = ask("base=10m..0s&new=45s..0s");
        assert_eq!(body["reason"], "waiting", "{body}");
        assert_eq!(body["next_profile_in_s"], 30);
        assert_eq!(
            body["error"],
            "the profiler is running; the profile of the period in progress is stored at its end, in 30 s (1 of its profiles could not be stored so far: see the agent's log)"
        );
        // The last 20 s never will: the period in progress is stored
        // under its start, before them.
        let body = ask("base=10m..0s&new=20s..0s");
        assert_eq!(body["reason"], "waiting", "{body}");
        assert!(
            body["error"].as_str().unwrap().contains(
                "under the period's start, 30s ago, before 20s..0s: 30s..0s will hold it"
            ),
            "{body}"
        );
        // With the profiler off, a gap after the newest profile.
        let off = Now {
            period: None,
            ..now
        };
        let body = body_of(answer(
            &store,
            &Prices::default(),
            &Classifier::shipped(),
            &off,
            "/api/profiles/top",
            Some("range=20s..0s"),
        ));
        assert_eq!(body["reason"], "none_in_range", "{body}");
    }

    #[test]
    fn the_classes_view_and_class_filter_answer_from_the_store_and_an_unknown_class_is_a_400() {
        let tmp = tempfile::tempdir().unwrap();
        let store = unbounded_store(tmp.path());
        let start = 1_800_000_000 / 60 * 60;
        let f = |name: &str, module: &str| sonde_profile::Function {
            name: name.into(),
            module: module.into(),
        };
        let (main, work, malloc, deflate) = (
            f("main", "/bin/app"),
            f("work", "/bin/app"),
            f("malloc", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
            f("deflate", "/usr/lib/x86_64-linux-gnu/libz.so.1"),
        );
        let process = sonde_profile::Process {
            pid: 7,
            name: "app".into(),
            tid: 7,
            thread: "app".into(),
            host: String::new(),
            container: String::new(),
            pod: String::new(),
        };
        // Two periods: allocation grows from 10 to 40 of 100 samples.
        for (i, (alloc, zlib)) in [(10, 30), (40, 30)].into_iter().enumerate() {
            let mut b = sonde_profile::ProfileBuilder::new(100, (start + i as u64) * S, S);
            b.add(&process, [&main, &work, &malloc], alloc);
            b.add(&process, [&main, &deflate], zlib);
            b.add(&process, [&main, &work], 100 - alloc - zlib);
            store.write(&b.finish()).unwrap();
        }
        let now = Now {
            ns: (start + 5) * S,
            period: None,
            periods: 2,
            write_errors: 0,
        };
        let ask = |path: &str, query: &str| {
            let r = answer(
                &store,
                &Prices::default(),
                &Classifier::shipped(),
                &now,
                path,
                Some(query),
            );
            (r.status(), body_of(r))
        };
        let (status, c) = ask("/api/profiles/classes", "range=10s..0s");
        assert_eq!(status, StatusCode::OK, "{c}");
        let shares: Vec<(&str, u64)> = c["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["class"].as_str().unwrap(), r["samples"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            shares,
            [
                ("compression", 60),
                ("allocation", 50),
                ("unclassified", 90)
            ]
        );
        assert!(c["classes"][0]["remedy"]
            .as_str()
            .unwrap()
            .contains("zlib-ng"));
        // One class's table: its functions alone, shares of its samples.
        let (status, top) = ask("/api/profiles/top", "range=10s..0s&class=allocation");
        assert_eq!(status, StatusCode::OK, "{top}");
        assert_eq!(top["samples"], 50);
        let names: Vec<&str> = top["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["function"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["malloc", "main", "work"], "{top}");
        // Focused on `work`, the class cut comes first: `work`'s own
        // samples are unclassified, `malloc`'s allocation.
        let (_, top) = ask(
            "/api/profiles/top",
            "range=10s..0s&class=unclassified&focus=work&side=callers",
        );
        assert_eq!(top["samples"], 90, "{top}");
        // Which class grew between the two periods.
        let (status, d) = ask(
            "/api/profiles/classes/diff",
            &format!("base={}s..{}s&new={}s..0s", 5, 4, 4),
        );
        assert_eq!(status, StatusCode::OK, "{d}");
        assert_eq!(d["classes"][0]["class"], "allocation", "{d}");
        assert!((d["classes"][0]["delta"].as_f64().unwrap() - 0.3).abs() < 1e-9);
        // An unknown class is refused with the known ones, on every path.
        for path in [
            "/api/profiles/top",
            "/api/profiles/flamegraph",
            "/api/profiles/folded",
            "/api/profiles/pprof",
            "/api/profiles/diff",
            "/api/profiles/diff/flamegraph",
            "/api/profiles/classes",
        ] {
            let (status, e) = ask(path, "class=nonsense");
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {e}");
            let e = e["error"].as_str().unwrap();
            assert!(
                e.starts_with("class=\"nonsense\": no such class; the classes are compression, ")
                    && e.ends_with(", unclassified"),
                "{path}: {e}"
            );
        }
    }

    #[test]
    fn reads_of_the_same_stored_files_share_one_merge_and_a_new_period_is_read_afresh() {
        let tmp = tempfile::tempdir().unwrap();
        let store = unbounded_store(tmp.path());
        let start = 1_800_000_000 / 60 * 60;
        let process = sonde_profile::Process {
            pid: 7,
            name: "app".into(),
            tid: 7,
            thread: "app".into(),
            host: String::new(),
            container: String::new(),
            pod: String::new(),
        };
        let main = sonde_profile::Function {
            name: "main".into(),
            module: "/bin/app".into(),
        };
        let period = |i: u64| {
            let mut b = sonde_profile::ProfileBuilder::new(100, (start + i) * S, S);
            b.add(&process, [&main], 10);
            store.write(&b.finish()).unwrap();
        };
        period(0);
        period(1);
        let span = Ago::parse("10s..0s").unwrap();
        let first = recent::read(&store, span, start + 5).unwrap();
        let again = recent::read(&store, span, start + 6).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(again.samples(), 20);
        period(2);
        let third = recent::read(&store, span, start + 6).unwrap();
        assert_eq!(third.samples(), 30);
        // A shorter range holds other files: its own read.
        let last = recent::read(&store, Ago::parse("4s..0s").unwrap(), start + 6).unwrap();
        assert_eq!(last.samples(), 10);
    }

    #[test]
    fn ranges_read_as_words_in_their_largest_unit() {
        assert_eq!(describe(minutes(10, 0)), "the last 10m");
        assert_eq!(describe(minutes(120, 60)), "2h to 1h ago");
        assert_eq!(describe(Ago::parse("90s..45s").unwrap()), "90s to 45s ago");
        assert_eq!(describe(Ago::parse("2d..0s").unwrap()), "the last 2d");
    }
}
