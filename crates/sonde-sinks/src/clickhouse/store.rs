//! Reading what `clickhouse` sinks wrote: the fleet's views, computed in
//! ClickHouse. A top table is one `GROUP BY` over the samples of the span
//! joined to their stacks' frames, returning one row per function; a
//! flame graph (and folded stacks, pprof) fetches the span's stacks
//! aggregated over hosts and periods, never sample rows. Nothing reads a
//! day of a fleet's rows into the process.
//!
//! Each sample row is counted once however often a retry wrote it. Every
//! row carries its request's `batch` id and row count (`batch_rows`): a
//! view first asks which batches of the span hold more rows than that
//! (one `GROUP BY batch`, empty unless a retry wrote a period twice and no
//! merge has collapsed the copies yet). The rows of every other batch
//! are summed as they are, in one streaming pass; those of a copied batch
//! alone are grouped by their whole key to count each once. No query
//! groups a span's every row by its key, so a day of a fleet is one
//! streaming aggregation per stack, not a hash table of every row. The
//! queries run on ClickHouse 18.16 and on the current engine alike (the
//! tests run each on both): `ALL INNER JOIN` of aliased subqueries, a
//! right side deduplicated by its key, no functions newer than 18.16.
//! They read a `Distributed` table as they read a local one: the outer
//! query joins on the server asked, and the stacks' `IN` is `GLOBAL` (its
//! set is built
//! once there and sent to the shards, as a `Distributed` table needs).

use std::fmt::Write as _;
use std::time::Duration;

use sonde_profile::model::{Function, HostSamples, Process, Profile, ProfileBuilder};
use sonde_profile::views::{Costs, Row, Top};

/// A `clickhouse://HOST[:PORT]/DATABASE` store (`clickhouses://` for
/// HTTPS): the server's HTTP interface (port 8123 by default, 8443 over
/// TLS) and the sink's database (default `sonde`).
#[derive(Debug, Clone)]
pub struct FleetStore {
    uri: String,
    base: String,
    db: String,
    agent: ureq::Agent,
}

/// Which samples a view reads: a span of periods and the filters of
/// `sonde profile` (each list empty for all).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Periods starting at or after this, Unix seconds.
    pub from_s: u64,
    /// Periods starting before this, Unix seconds.
    pub until_s: u64,
    /// Only these hosts.
    pub hosts: Vec<String>,
    /// Only these processes.
    pub pids: Vec<u32>,
    /// Only processes of these command names.
    pub processes: Vec<String>,
    /// Only threads whose name matches this (RE2, ClickHouse's `match`).
    pub thread: Option<String>,
    /// Only the processes of these containers (an id's prefix, or a pod's
    /// uid).
    pub containers: Vec<String>,
}

/// A string as a ClickHouse literal.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The batches a retry wrote more than once ([`FleetStore::copies`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copies(pub Vec<u64>);

impl Copies {
    /// What a view's statement reads its sample rows from: the rows
    /// `cond` keeps, each counted once. Without copies the table itself;
    /// with them, the rows of the other batches as they are and those of
    /// the copied batches one per key (`any()` of each column a copy
    /// repeats), whatever a merge has collapsed of them since.
    fn rows(&self, db: &str, cond: &str) -> String {
        if self.0.is_empty() {
            return format!("{db}.profile_samples WHERE {cond}");
        }
        let list = self
            .0
            .iter()
            .map(|b| format!("toUInt64({b})"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "(SELECT period, duration_ms, frequency, host, pid, process, thread, container, pod, stack_id, samples \
               FROM {db}.profile_samples WHERE {cond} AND batch NOT IN ({list}) \
             UNION ALL \
             SELECT period, any(duration_ms), any(frequency), host, pid, any(process), thread, any(container), \
               any(pod), stack_id, any(samples) \
               FROM {db}.profile_samples WHERE {cond} AND batch IN ({list}) \
               GROUP BY period, host, pid, thread, stack_id, batch) AS rows"
        )
    }
}

impl Filter {
    /// The span's periods as a `WHERE` condition on `profile_samples`.
    fn span(&self) -> String {
        format!(
            "period >= toDateTime({}) AND period < toDateTime({})",
            self.from_s, self.until_s
        )
    }

    /// The filter as a `WHERE` condition on `profile_samples`.
    fn condition(&self) -> String {
        let mut c = self.span();
        let list = |items: Vec<String>| items.join(", ");
        if !self.hosts.is_empty() {
            let _ = write!(
                c,
                " AND host IN ({})",
                list(self.hosts.iter().map(|h| literal(h)).collect())
            );
        }
        if !self.pids.is_empty() {
            let _ = write!(
                c,
                " AND pid IN ({})",
                list(self.pids.iter().map(u32::to_string).collect())
            );
        }
        if !self.processes.is_empty() {
            let _ = write!(
                c,
                " AND process IN ({})",
                list(self.processes.iter().map(|p| literal(p)).collect())
            );
        }
        if let Some(t) = &self.thread {
            let _ = write!(c, " AND match(thread, {})", literal(t));
        }
        if !self.containers.is_empty() {
            let any: Vec<String> = self
                .containers
                .iter()
                .filter(|id| !id.is_empty())
                .map(|id| {
                    format!(
                        "(container != '' AND startsWith(container, {0})) OR pod = {0}",
                        literal(id)
                    )
                })
                .collect();
            let _ = write!(
                c,
                " AND ({})",
                if any.is_empty() {
                    "0".into()
                } else {
                    any.join(" OR ")
                }
            );
        }
        c
    }
}

/// Why a view could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URI is not `clickhouse://HOST[:PORT]/DATABASE`.
    #[error("{0}")]
    Uri(String),
    /// The server could not be asked, or refused the query.
    #[error("ClickHouse at {base}: {message}")]
    Query {
        /// The server's HTTP interface.
        base: String,
        /// What failed, with the server's message.
        message: String,
    },
    /// The answer was not what the query asks for.
    #[error("ClickHouse at {base} answered a row this version of sonde cannot read: {row:?}")]
    Answer {
        /// The server's HTTP interface.
        base: String,
        /// The row.
        row: String,
    },
}

impl FleetStore {
    /// The store `uri` names.
    ///
    /// # Errors
    ///
    /// A URI of another scheme, without a host, or with a database that
    /// is not a plain identifier.
    pub fn open(uri: &str) -> Result<FleetStore, StoreError> {
        let (scheme, port, rest) = if let Some(r) = uri.strip_prefix("clickhouse://") {
            ("http", 8123, r)
        } else if let Some(r) = uri.strip_prefix("clickhouses://") {
            ("https", 8443, r)
        } else {
            return Err(StoreError::Uri(format!(
                "{uri:?} is not a store: write clickhouse://HOST:PORT/DATABASE (clickhouses:// for HTTPS)"
            )));
        };
        let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
        let db = if db.is_empty() {
            "sonde"
        } else {
            db.trim_end_matches('/')
        };
        if authority.is_empty() {
            return Err(StoreError::Uri(format!("{uri:?} names no host")));
        }
        if !db.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(StoreError::Uri(format!(
                "{db:?} in {uri:?} is not a plain ClickHouse database name"
            )));
        }
        let authority = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:{port}")
        };
        let agent = ureq::Agent::config_builder()
            // A server that is down refuses at once; one that is
            // unreachable would otherwise hold a view (and a page's
            // request) for the whole query timeout.
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(120)))
            .http_status_as_error(false)
            .user_agent(concat!("sonde/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(FleetStore {
            uri: uri.to_string(),
            base: format!("{scheme}://{authority}"),
            db: db.to_string(),
            agent,
        })
    }

    /// The URI the store was opened with.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The server's HTTP interface and the database, for messages.
    pub fn describe(&self) -> String {
        format!("{} database {}", self.base, self.db)
    }

    /// The answer to `sql` in TabSeparated.
    ///
    /// # Errors
    ///
    /// The server cannot be reached or refuses the query.
    pub fn query(&self, sql: &str) -> Result<String, StoreError> {
        let failed = |message: String| StoreError::Query {
            base: self.base.clone(),
            message,
        };
        let mut answer = self
            .agent
            .post(&format!("{}/", self.base))
            .send(sql)
            .map_err(|e| failed(e.to_string()))?;
        let status = answer.status().as_u16();
        let body = answer
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .map_err(|e| failed(e.to_string()))?;
        if status != 200 {
            return Err(failed(format!("HTTP {status}: {}", body.trim())));
        }
        Ok(body)
    }

    /// The batches of the span of `filter` that a retry wrote more than
    /// once: none at all unless a retry wrote a request twice and no merge
    /// has collapsed the copies yet. The span's periods only: a batch is
    /// one period of one host, so every row of it is in the span or none
    /// is, whatever the view's other filters keep.
    ///
    /// # Errors
    ///
    /// As [`FleetStore::top`].
    pub fn copies(&self, filter: &Filter) -> Result<Copies, StoreError> {
        let sql = format!(
            "SELECT batch FROM {}.profile_samples WHERE {} \
             GROUP BY batch HAVING count() > any(batch_rows) ORDER BY batch FORMAT TabSeparated",
            self.db,
            filter.span()
        );
        let mut out = Copies::default();
        for line in self.query(&sql)?.lines() {
            out.0.push(line.parse().map_err(|_| self.bad_row(line))?);
        }
        Ok(out)
    }

    /// The statement [`FleetStore::top`] runs: per function, its self and
    /// total samples and CPU-seconds.
    pub fn top_sql(&self, filter: &Filter, copies: &Copies) -> String {
        let db = &self.db;
        let cond = filter.condition();
        let rows = copies.rows(db, &cond);
        format!(
            "SELECT f, m, sum(c * leaf) AS self, sum(c) AS total, sum(cpu * leaf) AS self_cpu, sum(cpu) AS total_cpu \
             FROM (SELECT stack_id, sum(samples) AS c, sum(samples / frequency) AS cpu \
                FROM {rows} GROUP BY stack_id) AS per_stack \
             ALL INNER JOIN \
               (SELECT stack_id, f, m, max(i = length(fr)) AS leaf FROM \
                 (SELECT stack_id, any(frames) AS fr, any(modules) AS mo FROM {db}.profile_stacks \
                  WHERE stack_id GLOBAL IN (SELECT stack_id FROM {db}.profile_samples WHERE {cond}) GROUP BY stack_id) AS stacks \
                ARRAY JOIN fr AS f, mo AS m, arrayEnumerate(fr) AS i GROUP BY stack_id, f, m) AS frames \
             USING stack_id GROUP BY f, m \
             ORDER BY self DESC, total DESC, f, m FORMAT TabSeparated"
        )
    }

    /// The statement of the span's samples per host, and its first period
    /// and end.
    pub fn span_sql(&self, filter: &Filter, copies: &Copies) -> String {
        let db = &self.db;
        let cond = filter.condition();
        let rows = copies.rows(db, &cond);
        format!(
            "SELECT host, sum(samples), toUInt32(min(period)), toUInt64(max(toUInt64(period) * 1000 + duration_ms)) \
             FROM {rows} GROUP BY host ORDER BY host FORMAT TabSeparated"
        )
    }

    /// The statement [`FleetStore::profile`] runs: the span's stacks, their
    /// frames and samples, per host with `by_host`.
    pub fn stacks_sql(&self, filter: &Filter, by_host: bool, copies: &Copies) -> String {
        let db = &self.db;
        let cond = filter.condition();
        let host = if by_host { "host" } else { "''" };
        let rows = copies.rows(db, &cond);
        format!(
            "SELECT h, c, fr, mo FROM \
               (SELECT {host} AS h, stack_id, sum(samples) AS c \
                FROM {rows} GROUP BY h, stack_id) AS per_stack \
             ALL INNER JOIN \
               (SELECT stack_id, any(frames) AS fr, any(modules) AS mo FROM {db}.profile_stacks \
                WHERE stack_id GLOBAL IN (SELECT stack_id FROM {db}.profile_samples WHERE {cond}) GROUP BY stack_id) AS stacks \
             USING stack_id ORDER BY h, c DESC FORMAT TabSeparated"
        )
    }

    /// The statement [`FleetStore::threads`] runs: the samples of each
    /// host's process and thread name, most first.
    pub fn threads_sql(&self, filter: &Filter, n: usize, copies: &Copies) -> String {
        let db = &self.db;
        let cond = filter.condition();
        let rows = copies.rows(db, &cond);
        format!(
            "SELECT host, pid, process, container, pod, thread, sum(samples) AS c \
             FROM {rows} \
             GROUP BY host, pid, process, container, pod, thread \
             ORDER BY c DESC, host, pid, thread, process, container, pod LIMIT {n} FORMAT TabSeparated"
        )
    }

    /// The hosts of the samples `filter` keeps, with each one's samples,
    /// by name.
    ///
    /// # Errors
    ///
    /// As [`FleetStore::top`].
    pub fn hosts(&self, filter: &Filter) -> Result<Vec<HostSamples>, StoreError> {
        Ok(self.span(filter, &self.copies(filter)?)?.0)
    }

    /// The `n` (host, process, thread name) of the samples `filter` keeps
    /// with the most samples, most first: what a page offers to filter by.
    ///
    /// # Errors
    ///
    /// As [`FleetStore::top`].
    pub fn threads(&self, filter: &Filter, n: usize) -> Result<Vec<ThreadSamples>, StoreError> {
        let mut out = Vec::new();
        let copies = self.copies(filter)?;
        for line in self.query(&self.threads_sql(filter, n, &copies))?.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let [host, pid, process, container, pod, thread, samples] = f[..] else {
                return Err(self.bad_row(line));
            };
            out.push(ThreadSamples {
                host: unescape(host),
                pid: pid.parse().map_err(|_| self.bad_row(line))?,
                process: unescape(process),
                container: unescape(container),
                pod: unescape(pod),
                thread: unescape(thread),
                samples: samples.parse().map_err(|_| self.bad_row(line))?,
            });
        }
        Ok(out)
    }

    fn bad_row(&self, row: &str) -> StoreError {
        StoreError::Answer {
            base: self.base.clone(),
            row: row.chars().take(200).collect(),
        }
    }

    /// The span's hosts with their samples, and the span's start and
    /// length in nanoseconds (zero without samples).
    fn span(
        &self,
        filter: &Filter,
        copies: &Copies,
    ) -> Result<(Vec<HostSamples>, u64, u64), StoreError> {
        let text = self.query(&self.span_sql(filter, copies))?;
        let mut hosts = Vec::new();
        let (mut start_s, mut end_ms) = (u64::MAX, 0u64);
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let [host, samples, first, end] = f[..] else {
                return Err(self.bad_row(line));
            };
            let num = |s: &str| s.parse::<u64>().map_err(|_| self.bad_row(line));
            hosts.push(HostSamples {
                host: unescape(host),
                samples: num(samples)?,
            });
            start_s = start_s.min(num(first)?);
            end_ms = end_ms.max(num(end)?);
        }
        if hosts.is_empty() {
            return Ok((hosts, 0, 0));
        }
        let start_ns = start_s * 1_000_000_000;
        Ok((
            hosts,
            start_ns,
            (end_ms * 1_000_000).saturating_sub(start_ns),
        ))
    }

    /// The top table of the span's samples that `filter` keeps: the `n`
    /// functions with the most self samples (all with `None`), computed in
    /// ClickHouse.
    ///
    /// # Errors
    ///
    /// The server cannot be reached, refuses the query or answers rows
    /// that are not the query's.
    pub fn top(&self, filter: &Filter, n: Option<usize>) -> Result<Top, StoreError> {
        let copies = self.copies(filter)?;
        let (hosts, _, duration_ns) = self.span(filter, &copies)?;
        let samples: u64 = hosts.iter().map(|h| h.samples).sum();
        let mut functions = Vec::new();
        let share = |x: u64| {
            if samples == 0 {
                0.0
            } else {
                x as f64 / samples as f64
            }
        };
        let sql = match n {
            Some(n) => self.top_sql(filter, &copies).replace(
                " FORMAT TabSeparated",
                &format!(" LIMIT {n} FORMAT TabSeparated"),
            ),
            None => self.top_sql(filter, &copies),
        };
        for line in self.query(&sql)?.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let [function, module, s, t, s_cpu, t_cpu] = f[..] else {
                return Err(self.bad_row(line));
            };
            let int = |x: &str| x.parse::<u64>().map_err(|_| self.bad_row(line));
            let float = |x: &str| x.parse::<f64>().map_err(|_| self.bad_row(line));
            let (s, t) = (int(s)?, int(t)?);
            functions.push(Row {
                function: unescape(function),
                module: unescape(module),
                self_share: share(s),
                total: share(t),
                self_samples: s,
                total_samples: t,
                self_cpu_s: float(s_cpu)?,
                total_cpu_s: float(t_cpu)?,
                costs: Costs::default(),
            });
        }
        Ok(Top {
            samples,
            duration_s: duration_ns as f64 / 1e9,
            currency: None,
            hosts,
            functions,
        })
    }

    /// The span's stacks that `filter` keeps, summed over periods,
    /// processes and threads (and hosts, unless `by_host`), as a profile
    /// for the flame graph, folded stacks and pprof: one process per host,
    /// named after it.
    ///
    /// # Errors
    ///
    /// As [`FleetStore::top`].
    pub fn profile(&self, filter: &Filter, by_host: bool) -> Result<Profile, StoreError> {
        let copies = self.copies(filter)?;
        let (hosts, start_ns, duration_ns) = self.span(filter, &copies)?;
        let frequency = self
            .query(&format!(
                "SELECT any(frequency) FROM {}.profile_samples WHERE {} FORMAT TabSeparated",
                self.db,
                filter.condition()
            ))?
            .trim()
            .parse()
            .unwrap_or(0);
        let mut b = ProfileBuilder::new(frequency, start_ns, duration_ns);
        let one_host = match hosts.as_slice() {
            [one] => one.host.clone(),
            _ => String::new(),
        };
        let mut frames = Vec::new();
        for line in self
            .query(&self.stacks_sql(filter, by_host, &copies))?
            .lines()
        {
            let f: Vec<&str> = line.split('\t').collect();
            let [host, count, names, modules] = f[..] else {
                return Err(self.bad_row(line));
            };
            let count: u64 = count.parse().map_err(|_| self.bad_row(line))?;
            let names = array(names).ok_or_else(|| self.bad_row(line))?;
            let modules = array(modules).ok_or_else(|| self.bad_row(line))?;
            frames.clear();
            frames.extend(
                names
                    .into_iter()
                    .zip(modules)
                    .map(|(name, module)| Function { name, module }),
            );
            let host = if by_host {
                unescape(host)
            } else {
                one_host.clone()
            };
            let process = Process {
                name: host.clone(),
                host,
                ..Process::default()
            };
            b.add(&process, &frames, count);
        }
        Ok(b.finish())
    }
}

/// The samples of the threads of one name in one process of one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSamples {
    /// The host.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The process's command name.
    pub process: String,
    /// Its container's id, empty outside a container.
    pub container: String,
    /// Its pod's uid, empty outside a pod.
    pub pod: String,
    /// The threads' name.
    pub thread: String,
    /// Their samples.
    pub samples: u64,
}

/// A TabSeparated field, unescaped.
fn unescape(field: &str) -> String {
    if !field.contains('\\') {
        return field.to_string();
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// A TabSeparated `Array(String)`: `['a','b\'c']` (its strings quoted
/// and escaped once, by the array).
fn array(field: &str) -> Option<Vec<String>> {
    let inner = field.strip_prefix('[')?.strip_suffix(']')?;
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let mut s = String::new();
                loop {
                    match chars.next()? {
                        '\\' => {
                            let e = chars.next()?;
                            s.push(match e {
                                't' => '\t',
                                'n' => '\n',
                                'r' => '\r',
                                '0' => '\0',
                                other => other,
                            });
                        }
                        '\'' => break,
                        c => s.push(c),
                    }
                }
                out.push(s);
            }
            ',' => {}
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_uri_names_the_server_and_database() {
        let s = FleetStore::open("clickhouse://ch.example/fleet").unwrap();
        assert_eq!(s.describe(), "http://ch.example:8123 database fleet");
        let s = FleetStore::open("clickhouse://127.0.0.1:18123").unwrap();
        assert_eq!(s.describe(), "http://127.0.0.1:18123 database sonde");
        let s = FleetStore::open("clickhouses://ch:9443/sonde/").unwrap();
        assert_eq!(s.describe(), "https://ch:9443 database sonde");
        for bad in [
            "http://ch:8123/sonde",
            "clickhouse:///sonde",
            "clickhouse://ch/so;de",
        ] {
            assert!(FleetStore::open(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn literals_and_tab_separated_arrays_round_trip() {
        assert_eq!(literal(r"a'b\c"), r"'a\'b\\c'");
        assert_eq!(
            array(r"['main','it\'s','tab\there','back\\slash']").unwrap(),
            ["main", "it's", "tab\there", "back\\slash"]
        );
        assert_eq!(array("[]").unwrap(), Vec::<String>::new());
        assert_eq!(array("['open"), None);
        assert_eq!(unescape(r"a\tb\\c"), "a\tb\\c");
    }

    #[test]
    fn a_filter_names_each_criterion() {
        let f = Filter {
            from_s: 10,
            until_s: 20,
            hosts: vec!["web-1".into(), "o'brien".into()],
            pids: vec![7],
            processes: vec!["nginx".into()],
            thread: Some("^worker".into()),
            containers: vec!["abc".into()],
        };
        let c = f.condition();
        assert!(
            c.starts_with("period >= toDateTime(10) AND period < toDateTime(20)"),
            "{c}"
        );
        assert!(c.contains(r"host IN ('web-1', 'o\'brien')"), "{c}");
        assert!(c.contains("pid IN (7)"), "{c}");
        assert!(c.contains("process IN ('nginx')"), "{c}");
        assert!(c.contains("match(thread, '^worker')"), "{c}");
        assert!(
            c.contains("startsWith(container, 'abc')) OR pod = 'abc'"),
            "{c}"
        );
    }
}
