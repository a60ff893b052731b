//! `clickhouse`: the profiler's periods and log records into ClickHouse
//! tables ([`schema`]), over its HTTP interface. Each period is one
//! request of the sink's sender (queued, buffered in memory or on disk,
//! retried), which its transport writes as one `INSERT ... FORMAT
//! RowBinary` per table, the stacks first. Log records go in requests of
//! `logs` rows ([`logs`]) as the other HTTP log sinks send theirs
//! (`crate::logs`): a batch is acknowledged to its source once
//! ClickHouse has inserted every row of it (or, with a disk buffer, once
//! it is stored there).

pub mod logs;
pub mod rows;
pub mod schema;
pub mod store;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use serde::Deserialize;
use sonde_encode::compress::Compression;
use sonde_profile::Profile;

use crate::descriptor::{Input, NonEmpty, Running, Sink, SinkType, Start, Transport};
use crate::net;
use crate::profiles::ProfileEncoder;
use crate::sender::{self, Http, SendError, Transport as _};
use crate::sink::SinkStats;
use sonde_config::ConfigError;

/// `type = "clickhouse"`: `url` is the server's HTTP interface
/// (`http://HOST:8123`), `database` (default `"sonde"`) holds the tables,
/// created at the first request unless `create_tables = false`.
pub static TYPE: SinkType = SinkType {
    name: "clickhouse",
    accepts: &[Input::Profiles, Input::Logs],
    transport: Transport::Http,
    // ClickHouse 18.16 decodes gzip and deflate request bodies.
    compressions: &["gzip", "none"],
    headers: &[],
    keys: &["database", "create_tables"],
    check,
    start,
    reloads: true,
    host: None,
};

/// The keys of a clickhouse sink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// The database of the tables. Default `"sonde"`.
    database: Option<NonEmpty>,
    /// Create the database and tables if absent. Default true.
    create_tables: Option<bool>,
}

const EXAMPLES: &[(&str, &str)] = &[("database", "\"sonde\""), ("create_tables", "true")];

/// The database of sink `s`.
fn database(o: &Options) -> &str {
    o.database.as_deref().unwrap_or("sonde")
}

fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let o: Options = s.typed(EXAMPLES)?;
    let db = database(&o);
    if !db.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        || db.as_bytes()[0].is_ascii_digit()
    {
        return Err(ConfigError::new(
            "database",
            format!("{db:?} is not a plain ClickHouse identifier"),
            "use letters, digits and `_`, not a digit first, like database = \"sonde\"",
        ));
    }
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let o: Options = s.typed(EXAMPLES)?;
    let n = net::settings(s)?;
    let db = database(&o).to_string();
    let create = o.create_tables.unwrap_or(true);
    let target = format!("{} database {db}", n.target);
    let mut running = Running {
        windows: None,
        profiles: None,
        logs: Vec::new(),
        threads: Vec::new(),
    };
    if s.takes_profiles() {
        let encoder = ChProfiles {
            rows: rows::Rows::new(st.host),
            compression: n.compression,
            stats: Arc::clone(&st.stats),
            lost: 0,
        };
        net::start_profiles_over(
            s,
            encoder,
            ClickHouseHttp::new(s, &db, create)?,
            Compression::None,
            Some(&target),
            st,
            &mut running,
        )?;
    }
    if s.log_sources().next().is_some() {
        let insert = insert(s, &db, schema::LOGS, n.compression.content_encoding())?;
        let transport = ClickHouseLogs {
            insert,
            create: create.then(|| Create::new(s, &db)).transpose()?,
        };
        net::start_logs_over(
            s,
            logs::ChLogs::default(),
            transport,
            &target,
            st,
            &mut running,
        )?;
    }
    Ok(running)
}

/// The first bytes of a request of this sink: its framing, version 1.
const MAGIC: &[u8; 4] = b"SCH1";

/// A period as one request: for each table with rows, the table's index
/// in [`schema::TABLES`] (one byte), the length of its part (four bytes,
/// little-endian) and the part, its `RowBinary` rows compressed as the
/// sink's `compression` says.
///
/// A stack is written once, in the first period that has it. When a
/// request is lost (dropped for a full buffer, refused, or its disk
/// segment found corrupt) the stacks it carried may be missing, so the
/// next period writes every stack it has again.
#[derive(Debug)]
struct ChProfiles {
    rows: rows::Rows,
    compression: Compression,
    stats: Arc<SinkStats>,
    /// The losses seen so far.
    lost: u64,
}

impl ChProfiles {
    /// Periods dropped and disk segments skipped so far.
    fn losses(&self) -> u64 {
        let s = &self.stats;
        s.dropped_profiles
            .iter()
            .map(|n| n.load(Relaxed))
            .sum::<u64>()
            + s.corrupt_segments.load(Relaxed)
    }
}

impl ProfileEncoder for ChProfiles {
    fn encode(&mut self, profile: &Profile, out: &mut Vec<u8>) {
        let lost = self.losses();
        if lost != self.lost {
            self.lost = lost;
            self.rows.forget_sent();
        }
        let rows = self.rows.period(profile);
        out.extend_from_slice(MAGIC);
        for (table, part) in [(0u8, &rows.stacks), (1, &rows.samples)] {
            if part.is_empty() {
                continue;
            }
            let mut body = Vec::with_capacity(part.len() / 4);
            if self.compression.compress(part, &mut body).is_err() {
                // Compressing into memory fails only on allocation: send
                // the part as it is, which the header then says.
                body.clone_from(part);
                out.push(table | 0x80);
            } else {
                out.push(table);
            }
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&body);
        }
    }

    fn content_type(&self) -> &'static str {
        "application/octet-stream"
    }
}

/// One part of a request: the table's index in [`schema::TABLES`],
/// whether the rows are compressed, and the rows.
type Part<'a> = (usize, bool, &'a [u8]);

/// The parts of a request, as [`ChProfiles`] frames them.
fn parts(body: &[u8]) -> Result<Vec<Part<'_>>, String> {
    let mut rest = body
        .strip_prefix(MAGIC)
        .ok_or("not a request of this sink (no SCH1 header)")?;
    let mut out = Vec::new();
    while let Some((&head, after)) = rest.split_first() {
        let table = usize::from(head & 0x7f);
        if table >= schema::TABLES.len() || after.len() < 4 {
            return Err(format!("a part of table {table} cut short"));
        }
        let len = u32::from_le_bytes(after[..4].try_into().expect("4 bytes")) as usize;
        let part = after[4..]
            .get(..len)
            .ok_or("a part longer than the request")?;
        out.push((table, head & 0x80 == 0, part));
        rest = &after[4 + len..];
    }
    Ok(out)
}

/// The POST of sink `s` that runs `INSERT INTO {db}.{table} FORMAT
/// RowBinary` on bodies of `encoding` (`None`: plain).
fn insert(s: &Sink, db: &str, table: &str, encoding: Option<&str>) -> anyhow::Result<Http> {
    let n = net::settings(s)?;
    let query = format!("INSERT INTO {db}.{table} FORMAT RowBinary");
    let url = format!(
        "{}/?query={}",
        n.target.trim_end_matches('/'),
        encode_query(&query)
    );
    Ok(Http::new(
        url,
        headers(s, encoding)?,
        n.delivery.request_timeout,
    ))
}

/// The headers of sink `s`'s requests with bodies of `encoding`.
fn headers(s: &Sink, encoding: Option<&str>) -> anyhow::Result<Vec<(String, String)>> {
    let n = net::settings(s)?;
    let mut h = vec![(
        "Content-Type".to_string(),
        "application/octet-stream".to_string(),
    )];
    if let Some(e) = encoding {
        h.push(("Content-Encoding".into(), e.into()));
    }
    h.extend(n.headers.iter().cloned());
    Ok(h)
}

/// The `CREATE ... IF NOT EXISTS` statements still to run, and where: run
/// before the first insert, and again from the one that failed.
struct Create {
    http: Http,
    statements: Vec<String>,
}

impl Create {
    fn new(s: &Sink, db: &str) -> anyhow::Result<Create> {
        let n = net::settings(s)?;
        Ok(Create {
            http: Http::new(
                format!("{}/", n.target.trim_end_matches('/')),
                headers(s, None)?,
                n.delivery.request_timeout,
            ),
            statements: schema::single(db),
        })
    }

    /// Runs the statements not run yet; `Ok` once all have run.
    fn run(slot: &mut Option<Create>) -> Result<(), SendError> {
        if let Some(c) = slot {
            while let Some(first) = c.statements.first() {
                c.http.send(first.as_bytes())?;
                c.statements.remove(0);
            }
            *slot = None;
        }
        Ok(())
    }
}

/// Writes each part of a request into its table with one POST, and
/// creates the tables first when asked.
struct ClickHouseHttp {
    /// Per table, the POSTs of its compressed parts and of its plain ones.
    inserts: Vec<(Http, Http)>,
    create: Option<Create>,
}

impl ClickHouseHttp {
    fn new(s: &Sink, db: &str, create_tables: bool) -> anyhow::Result<Self> {
        let n = net::settings(s)?;
        let inserts = schema::TABLES
            .iter()
            .map(|table| {
                Ok((
                    insert(s, db, table, n.compression.content_encoding())?,
                    insert(s, db, table, None)?,
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        let create = create_tables.then(|| Create::new(s, db)).transpose()?;
        Ok(ClickHouseHttp { inserts, create })
    }
}

/// Writes a request of log records into `logs` with one POST, and
/// creates the tables first when asked.
struct ClickHouseLogs {
    insert: Http,
    create: Option<Create>,
}

impl sender::Transport for ClickHouseLogs {
    fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        Create::run(&mut self.create)?;
        self.insert.send(body)
    }

    fn stop_by(&mut self, deadline: Instant) {
        self.insert.stop_by(deadline);
        if let Some(c) = &mut self.create {
            c.http.stop_by(deadline);
        }
    }
}

/// `s` percent-encoded for a URL's query.
fn encode_query(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

impl sender::Transport for ClickHouseHttp {
    fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        Create::run(&mut self.create)?;
        let parts =
            parts(body).map_err(|e| SendError::new(crate::sink::FailReason::Rejected, e))?;
        for (table, compressed, part) in parts {
            let (zipped, plain) = &mut self.inserts[table];
            if compressed {
                zipped.send(part)?;
            } else {
                plain.send(part)?;
            }
        }
        Ok(())
    }

    fn stop_by(&mut self, deadline: Instant) {
        for (a, b) in &mut self.inserts {
            a.stop_by(deadline);
            b.stop_by(deadline);
        }
        if let Some(c) = &mut self.create {
            c.http.stop_by(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_frames_each_tables_rows_and_reads_back() {
        let stats = Arc::new(SinkStats::new("clickhouse".into()));
        let mut e = ChProfiles {
            rows: rows::Rows::new("h"),
            compression: Compression::Gzip { level: 1 },
            stats: Arc::clone(&stats),
            lost: 0,
        };
        let mut b =
            sonde_profile::model::ProfileBuilder::new(19, 1_700_000_000_000_000_000, 1_000_000_000);
        let p = sonde_profile::model::Process {
            pid: 1,
            name: "p".into(),
            tid: 1,
            thread: "t".into(),
            host: String::new(),
            container: String::new(),
            pod: String::new(),
        };
        let f = sonde_profile::model::Function {
            name: "main".into(),
            module: "/bin/p".into(),
        };
        b.add(&p, [&f], 5);
        let profile = b.finish();
        let mut body = Vec::new();
        e.encode(&profile, &mut body);
        let got = parts(&body).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[0].1), (0, true));
        assert_eq!((got[1].0, got[1].1), (1, true));
        let samples = Compression::Gzip { level: 1 }.decompress(got[1].2).unwrap();
        // The rows, but for the batch id (8 bytes) and row count (4) that
        // end the one row.
        let want = rows::Rows::new("h").period(&profile).samples;
        assert_eq!(samples.len(), want.len());
        assert_eq!(samples[..want.len() - 12], want[..want.len() - 12]);
        // The next period has no new stack: one part.
        let mut body = Vec::new();
        e.encode(&profile, &mut body);
        assert_eq!(parts(&body).unwrap().len(), 1);
        // A period lost: the next writes its stacks again.
        stats.dropped_profiles[crate::sink::SinkDrop::BufferFull as usize].fetch_add(1, Relaxed);
        let mut body = Vec::new();
        e.encode(&profile, &mut body);
        assert_eq!(parts(&body).unwrap().len(), 2);
        let mut body = Vec::new();
        e.encode(&profile, &mut body);
        assert_eq!(parts(&body).unwrap().len(), 1);
        // Anything else is refused, not a panic.
        assert!(parts(b"nope").is_err());
        assert!(parts(b"SCH1\x00\xff\xff\xff\xff").is_err());
        assert!(parts(b"SCH1\x07\x00\x00\x00\x00").is_err());
        assert!(parts(b"SCH1\x01\x00").is_err());
    }
}
