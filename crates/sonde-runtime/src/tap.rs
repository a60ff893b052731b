//! Live samples of what flows through the agent: the points receivers
//! parse and the records log sources send (`sonde tap`), and the metric
//! names with the most points (`sonde top`), served by the admin site's
//! `/api/tap`.
//!
//! A client opens a [`Session`] with what it wants to see ([`Watch`]) and
//! then polls it; the session keeps what flowed since the last poll, up
//! to [`MAX_ITEMS`] items and [`MAX_BYTES`] bytes (what does not fit is
//! counted as skipped), and ends [`IDLE_END`] after its last poll.
//!
//! # Cost
//!
//! With no session open, a receive worker pays one relaxed atomic load per
//! datagram it parses ([`Tap::watching`]) and a log source one per batch
//! it sends: the parse-and-record path is otherwise untouched
//! (docs/BENCHMARKS.md, "sonde tap and sonde top"). With a session open, a
//! worker parses each datagram a second time for the sessions, outside
//! the recording path, so that what `sonde tap` shows is what the parser
//! found and the aggregation is not slowed by a branch per point.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value as Json};
use sonde_proto::tags::{split, TagSpan};
use sonde_proto::{DropReason, Point, PointSink, Value};

/// Items a session holds between two polls; later ones are skipped
/// (counted) until the client polls.
pub const MAX_ITEMS: usize = 1000;

/// Bytes of items a session holds between two polls.
pub const MAX_BYTES: usize = 1 << 20;

/// Distinct metric names a [`Watch::Names`] session counts between two
/// polls; points of names past them are counted together as `other`.
pub const MAX_NAMES: usize = 10_000;

/// Sessions open at once.
pub const MAX_SESSIONS: usize = 8;

/// How long a session lives without a poll.
pub const IDLE_END: Duration = Duration::from_secs(10);

/// What a session wants to see.
#[derive(Debug)]
pub enum Watch {
    /// Points as parsed, of every receiver or of those whose listen
    /// address or protocol is `receiver`, with a name matching `metric`.
    Points {
        /// A listen address as `/metrics` shows it, or `statsd` or
        /// `msgpack`.
        receiver: Option<String>,
        /// A glob over the metric name (`*`, `?`, `[...]`, [`glob`]).
        metric: Option<regex::bytes::Regex>,
    },
    /// Log records as the sinks get them, of every source or of `source`.
    Records {
        /// A `[[logs]]` name.
        source: Option<String>,
    },
    /// Points per metric name, of every receiver or of `receiver`.
    Names {
        /// As for [`Watch::Points`].
        receiver: Option<String>,
    },
}

impl Watch {
    fn receiver(&self) -> Option<&Option<String>> {
        match self {
            Watch::Points { receiver, .. } | Watch::Names { receiver } => Some(receiver),
            Watch::Records { .. } => None,
        }
    }
}

/// The matcher of a metric-name glob: `*` any run of characters, `?`
/// one, `[...]` one of a class, `{a,b}` either; `.` and `/` are plain
/// characters. The glob becomes an anchored byte regex, which finds the
/// glob's literal parts with `memchr` (docs/BENCHMARKS.md, "sonde tap and
/// sonde top").
///
/// # Errors
///
/// A glob that does not parse, with what is wrong.
pub fn glob(glob: &str) -> Result<regex::bytes::Regex, String> {
    let g = globset::GlobBuilder::new(glob)
        .literal_separator(false)
        .build()
        .map_err(|e| e.to_string())?;
    regex::bytes::Regex::new(g.regex()).map_err(|e| e.to_string())
}

/// True if `filter` (a receiver's address or its protocol) picks the
/// receiver listening at `listen` with `protocol`.
fn picks(filter: &Option<String>, listen: &str, protocol: &str) -> bool {
    filter
        .as_deref()
        .is_none_or(|f| f == listen || f == protocol)
}

/// What a session gathered since its last poll.
#[derive(Debug, Default)]
struct Gathered {
    items: VecDeque<Json>,
    bytes: usize,
    skipped: u64,
    names: HashMap<Box<[u8]>, u64, foldhash::fast::RandomState>,
    other: u64,
}

/// One client's view.
#[derive(Debug)]
pub struct Session {
    id: u64,
    watch: Watch,
    /// Set while the session holds [`MAX_ITEMS`] or [`MAX_BYTES`]: items
    /// are then counted, not rendered.
    full: AtomicBool,
    gathered: Mutex<Gathered>,
    last_poll: Mutex<Instant>,
    since: Mutex<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    /// The session's number, which the client polls it by.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Adds `item` (of `bytes` bytes rendered), or counts it skipped.
    fn add(&self, g: &mut Gathered, item: Json, bytes: usize) {
        if g.items.len() >= MAX_ITEMS || g.bytes + bytes > MAX_BYTES {
            g.skipped += 1;
            self.full.store(true, Relaxed);
        } else {
            g.items.push_back(item);
            g.bytes += bytes;
        }
    }

    /// What was gathered since the last poll, as the admin site answers
    /// it, and a fresh start.
    pub fn poll(&self) -> Json {
        let now = Instant::now();
        *lock(&self.last_poll) = now;
        let seconds = {
            let mut since = lock(&self.since);
            let s = now.duration_since(*since).as_secs_f64();
            *since = now;
            s
        };
        let g = std::mem::take(&mut *lock(&self.gathered));
        self.full.store(false, Relaxed);
        let mut out = json!({ "session": self.id, "seconds": seconds, "skipped": g.skipped });
        if let Watch::Names { .. } = self.watch {
            let mut names: Vec<(Box<[u8]>, u64)> = g.names.into_iter().collect();
            names.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            names.truncate(50);
            out["names"] = names
                .into_iter()
                .map(|(n, c)| json!({ "name": String::from_utf8_lossy(&n), "points": c }))
                .collect();
            out["other"] = json!(g.other);
        } else {
            out["items"] = Json::Array(g.items.into());
        }
        out
    }
}

/// The sessions of one agent; receivers, log sources and the admin site
/// share it.
#[derive(Debug, Default)]
pub struct Tap {
    open: AtomicUsize,
    sessions: Mutex<(u64, Vec<Arc<Session>>)>,
}

/// Why a session was not opened.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{MAX_SESSIONS} taps are open already; close one or wait {} s for an idle one to end", IDLE_END.as_secs())]
pub struct TooManySessions;

impl Tap {
    /// True while a session is open: the only thing the data path asks
    /// when nobody watches.
    #[inline]
    pub fn watching(&self) -> bool {
        self.open.load(Relaxed) != 0
    }

    /// Opens a session.
    ///
    /// # Errors
    ///
    /// [`MAX_SESSIONS`] are open.
    pub fn open(&self, watch: Watch) -> Result<Arc<Session>, TooManySessions> {
        self.end_idle(Instant::now());
        let mut s = lock(&self.sessions);
        if s.1.len() >= MAX_SESSIONS {
            return Err(TooManySessions);
        }
        s.0 += 1;
        let now = Instant::now();
        let session = Arc::new(Session {
            id: s.0,
            watch,
            full: AtomicBool::new(false),
            gathered: Mutex::default(),
            last_poll: Mutex::new(now),
            since: Mutex::new(now),
        });
        s.1.push(Arc::clone(&session));
        self.open.store(s.1.len(), Relaxed);
        Ok(session)
    }

    /// The open session numbered `id`.
    pub fn session(&self, id: u64) -> Option<Arc<Session>> {
        self.end_idle(Instant::now());
        lock(&self.sessions).1.iter().find(|s| s.id == id).cloned()
    }

    /// Ends the sessions not polled for [`IDLE_END`] before `now`; the
    /// admin site calls it every second and at every tap request.
    pub fn end_idle(&self, now: Instant) {
        let mut s = lock(&self.sessions);
        s.1.retain(|x| now.duration_since(*lock(&x.last_poll)) < IDLE_END);
        self.open.store(s.1.len(), Relaxed);
    }

    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// The sessions that take points of the receiver at `listen`, as a
    /// parser's sink; `None` if no session wants them.
    pub fn points<'t, 'd>(&self, listen: &'t str, protocol: &'t str) -> Option<TapPoints<'t, 'd>> {
        let sessions: Vec<Arc<Session>> = lock(&self.sessions)
            .1
            .iter()
            .filter(|s| {
                s.watch
                    .receiver()
                    .is_some_and(|r| picks(r, listen, protocol))
            })
            .cloned()
            .collect();
        if sessions.is_empty() {
            return None;
        }
        let n = sessions.len();
        Some(TapPoints {
            listen,
            protocol,
            sessions,
            items: vec![Vec::new(); n],
            names: Vec::new(),
            skipped: vec![0; n],
            spans: Vec::new(),
        })
    }

    /// Offers the records of a batch of the log source `name` to the
    /// sessions that take them: `records` yields them, `render` writes
    /// one as the JSON record the sinks get (it is called only for
    /// sessions with room, so an idle tap renders nothing).
    pub fn records<R, I>(&self, name: &str, records: impl Fn() -> I, mut render: R)
    where
        I: Iterator,
        R: FnMut(&mut Vec<u8>, I::Item),
    {
        let sessions: Vec<Arc<Session>> = lock(&self.sessions)
            .1
            .iter()
            .filter(|s| matches!(&s.watch, Watch::Records { source } if source.as_ref().is_none_or(|x| x == name)))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for s in sessions {
            let mut g = lock(&s.gathered);
            for record in records() {
                if s.full.load(Relaxed) {
                    g.skipped += 1;
                    continue;
                }
                out.clear();
                render(&mut out, record);
                let record: Json = serde_json::from_slice(&out)
                    .unwrap_or_else(|_| Json::String(String::from_utf8_lossy(&out).into_owned()));
                s.add(
                    &mut g,
                    json!({ "source": name, "record": record }),
                    out.len(),
                );
            }
        }
    }
}

/// A parser's sink that hands the points it is given to the sessions that
/// take them ([`Tap::points`]); [`TapPoints::finish`] delivers them.
#[derive(Debug)]
pub struct TapPoints<'t, 'd> {
    listen: &'t str,
    protocol: &'t str,
    sessions: Vec<Arc<Session>>,
    /// Per session, its points of this datagram, rendered.
    items: Vec<Vec<(Json, usize)>>,
    /// The names of this datagram's points, if a session counts them.
    names: Vec<&'d [u8]>,
    /// Per session, points not rendered because it was full.
    skipped: Vec<u64>,
    spans: Vec<TagSpan>,
}

impl TapPoints<'_, '_> {
    /// Hands what this datagram held to the sessions.
    pub fn finish(self) {
        for (s, (items, skipped)) in self
            .sessions
            .iter()
            .zip(self.items.into_iter().zip(self.skipped))
        {
            let mut g = lock(&s.gathered);
            g.skipped += skipped;
            for (item, bytes) in items {
                s.add(&mut g, item, bytes);
            }
            if let Watch::Names { .. } = s.watch {
                for &name in &self.names {
                    if let Some(c) = g.names.get_mut(name) {
                        *c += 1;
                    } else if g.names.len() < MAX_NAMES {
                        g.names.insert(name.into(), 1);
                    } else {
                        g.other += 1;
                    }
                }
            }
        }
    }

    /// `point` as `sonde tap` shows it.
    fn render(&mut self, p: &Point<'_>) -> (Json, usize) {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut o = Map::new();
        o.insert("receiver".into(), json!(self.listen));
        o.insert("protocol".into(), json!(self.protocol));
        o.insert("name".into(), json!(text(p.name)));
        o.insert("kind".into(), json!(p.kind.as_str()));
        match p.value {
            Value::Number(v) => o.insert("value".into(), json!(v)),
            Value::Delta(v) => o.insert("delta".into(), json!(v)),
            Value::Member(m) => o.insert("member".into(), json!(text(m))),
        };
        if !p.tags.is_empty() {
            let tags = match split(p.tags, p.tag_syntax, &mut self.spans) {
                Ok(()) => Json::Object(
                    self.spans
                        .iter()
                        .map(|s| (text(s.key(p.tags)), json!(text(s.value(p.tags)))))
                        .collect(),
                ),
                // The aggregation drops such a point; the tap shows what
                // came.
                Err(_) => json!(text(p.tags)),
            };
            o.insert("tags".into(), tags);
        }
        if p.sample_rate != 1.0 {
            o.insert("sample_rate".into(), json!(p.sample_rate));
        }
        if let Some(t) = p.timestamp {
            o.insert("timestamp".into(), json!(t));
        }
        let bytes = 96 + p.name.len() + 2 * p.tags.len();
        (Json::Object(o), bytes)
    }
}

impl<'d> PointSink<'d> for TapPoints<'_, 'd> {
    fn point(&mut self, p: &Point<'d>) {
        // Where this point's rendering is: (session, item).
        let mut rendered: Option<(usize, usize)> = None;
        let mut named = false;
        for i in 0..self.sessions.len() {
            match &self.sessions[i].watch {
                Watch::Points { metric, .. } => {
                    if self.sessions[i].full.load(Relaxed) {
                        // Counted, so that a client sees how much it
                        // missed.
                        self.skipped[i] += 1;
                        continue;
                    }
                    if metric.as_ref().is_some_and(|g| !g.is_match(p.name)) {
                        continue;
                    }
                    // Rendered once; a second session copies the first's.
                    let item = match rendered {
                        Some((j, k)) => self.items[j][k].clone(),
                        None => self.render(p),
                    };
                    rendered.get_or_insert((i, self.items[i].len()));
                    self.items[i].push(item);
                }
                // Counted in `finish`, for every names session at once.
                Watch::Names { .. } if !named => {
                    self.names.push(p.name);
                    named = true;
                }
                Watch::Names { .. } => {}
                Watch::Records { .. } => {}
            }
        }
    }

    fn drop(&mut self, _reason: DropReason) {}

    fn event(&mut self, _line: &'d [u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(g: &str) -> Option<regex::bytes::Regex> {
        Some(super::glob(g).unwrap())
    }

    #[test]
    fn sessions_see_the_points_they_ask_for_and_nobody_watching_costs_a_load() {
        let tap = Tap::default();
        assert!(!tap.watching());
        assert!(tap.points("udp://127.0.0.1:8125", "statsd").is_none());
        let all = tap
            .open(Watch::Points {
                receiver: None,
                metric: None,
            })
            .unwrap();
        let api = tap
            .open(Watch::Points {
                receiver: Some("statsd".into()),
                metric: glob("api.*"),
            })
            .unwrap();
        let other = tap
            .open(Watch::Points {
                receiver: Some("msgpack".into()),
                metric: None,
            })
            .unwrap();
        let names = tap.open(Watch::Names { receiver: None }).unwrap();
        assert!(tap.watching());
        let mut sink = tap.points("udp://127.0.0.1:8125", "statsd").unwrap();
        sonde_proto::statsd::parse(
            b"api.hits:3|c|@0.5|#env:prod,az:b\ndb.time:12.5|ms\napi.hits:1|c|#env:dev\nbad line\n",
            &mut sink,
        );
        sink.finish();
        let a = all.poll();
        assert_eq!(a["items"].as_array().unwrap().len(), 3, "{a}");
        assert_eq!(a["items"][0]["name"], "api.hits");
        assert_eq!(a["items"][0]["kind"], "count");
        assert_eq!(a["items"][0]["value"], 3.0);
        assert_eq!(a["items"][0]["sample_rate"], 0.5);
        assert_eq!(a["items"][0]["tags"], json!({"env": "prod", "az": "b"}));
        assert_eq!(a["items"][1]["name"], "db.time");
        let b = api.poll();
        let got: Vec<_> = b["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["tags"]["env"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, ["prod", "dev"]);
        assert_eq!(other.poll()["items"], json!([]));
        let n = names.poll();
        assert_eq!(
            n["names"],
            json!([{"name": "api.hits", "points": 2}, {"name": "db.time", "points": 1}])
        );
        // A poll starts afresh.
        assert_eq!(all.poll()["items"], json!([]));
    }

    #[test]
    fn a_session_holds_a_bounded_amount_and_counts_the_rest() {
        let tap = Tap::default();
        let s = tap
            .open(Watch::Points {
                receiver: None,
                metric: None,
            })
            .unwrap();
        let data: String = (0..MAX_ITEMS + 250)
            .map(|i| format!("m{i}:1|c\n"))
            .collect();
        let mut sink = tap.points("udp://x", "statsd").unwrap();
        sonde_proto::statsd::parse(data.as_bytes(), &mut sink);
        sink.finish();
        // The session filled up in `finish`; the next datagram is counted
        // without being rendered.
        let mut sink = tap.points("udp://x", "statsd").unwrap();
        sonde_proto::statsd::parse(b"late:1|c\n", &mut sink);
        sink.finish();
        let p = s.poll();
        assert_eq!(p["items"].as_array().unwrap().len(), MAX_ITEMS);
        assert_eq!(p["skipped"], 251);
    }

    #[test]
    fn metric_globs_match_whole_names_with_dots_and_slashes_as_plain_characters() {
        let cases: [(&str, &str, bool); 9] = [
            ("api.*", "api.hits", true),
            ("api.*", "api.v2/hits", true),
            ("api.*", "xapi.hits", false),
            ("api.*", "api", false),
            ("db.?ime", "db.time", true),
            ("{web,db}.time", "web.time", true),
            ("{web,db}.time", "dns.time", false),
            ("checkout.items", "checkout.items", true),
            ("checkout.items", "checkout.itemsx", false),
        ];
        for (g, name, want) in cases {
            assert_eq!(
                super::glob(g).unwrap().is_match(name.as_bytes()),
                want,
                "{g} {name}"
            );
        }
        assert!(super::glob("api.[").is_err());
    }

    #[test]
    fn sessions_are_capped_and_end_when_nobody_polls() {
        let tap = Tap::default();
        let open: Vec<_> = (0..MAX_SESSIONS)
            .map(|_| tap.open(Watch::Names { receiver: None }).unwrap())
            .collect();
        assert_eq!(
            tap.open(Watch::Names { receiver: None }).unwrap_err(),
            TooManySessions
        );
        assert!(tap.session(open[3].id()).is_some());
        tap.end_idle(Instant::now() + IDLE_END);
        assert!(!tap.watching());
        assert!(tap.session(open[3].id()).is_none());
        assert!(tap.open(Watch::Names { receiver: None }).is_ok());
    }
}
