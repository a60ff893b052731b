//! The tables of a `clickhouse` sink, for ClickHouse 18.16 and later.
//!
//! Profiles take two tables. `profile_stacks` holds each distinct stack
//! once, under a 64-bit id that every agent computes alike from its frames
//! ([`super::rows::stack_id`]); `profile_samples` holds one row per period,
//! host, process, thread name and stack with its count. A thread pool of N
//! threads running the same code is one row a period, not N: rows are keyed
//! by the thread's name, and the thread id is left to the agent's local
//! store, which the live views read.
//!
//! A request sent again after a failure writes the same rows again. Each
//! sample row carries its request's `batch` (an id no other request of
//! any agent has) and `batch_rows` (how many rows the request wrote):
//! the views read a batch that holds more rows than that one row per
//! key ([`super::store`]), so a retry never counts twice. Both tables are also `ReplacingMergeTree`s ordered by their
//! natural key (a stack's id; a sample's period, host, pid, thread,
//! stack and batch), so a merge keeps one copy of each row, and the disk
//! the copies took is given back.
//!
//! Log records take one table, `logs`: a row per record with its time
//! (its own, or when the agent took it), host, source, file, offset,
//! text and fields (two arrays, keys and values, as 18.16 has no `Map`),
//! and an id that names the record across retries and restarts
//! ([`super::logs::record_id`]). It is a `ReplacingMergeTree` ordered by
//! host, source and id, partitioned by day: a record written twice
//! collapses into one, and a query reads each once with `LIMIT 1 BY
//! host, source, id` (or `FINAL`) until the merge.
//!
//! For a cluster ([`cluster`]), each table is created `ON CLUSTER` on
//! every shard with a `Distributed` table over it: samples are sharded by
//! host (a host's retries land on the shard that has the first copy, and
//! a view of one host reads one shard), stacks by their id (every host's
//! copy of a stack lands on one shard and collapses there).

/// The profile tables' names, in the order the DDL creates them.
pub const TABLES: [&str; 2] = ["profile_stacks", "profile_samples"];

/// The log records' table.
pub const LOGS: &str = "logs";

/// The columns of `profile_stacks`, as [`super::rows`] writes them.
const STACKS: &str = "stack_id UInt64, frames Array(String), modules Array(String)";

/// The columns of `profile_samples`, as [`super::rows`] writes them.
const SAMPLES: &str = "period DateTime, duration_ms UInt32, frequency UInt16, host String, \
     pid UInt32, process String, thread String, container String, pod String, \
     stack_id UInt64, samples UInt32, batch UInt64, batch_rows UInt32";

/// The columns of `logs`, as [`super::logs`] writes them.
const LOG_COLUMNS: &str = "time DateTime, host String, source String, file String, \
     file_offset UInt64, id UInt64, message String, \
     field_keys Array(String), field_values Array(String)";

const LOGS_KEY: &str = "PARTITION BY toYYYYMMDD(time) ORDER BY (host, source, id)";

/// The batch ends the key: merges collapse the copies a retry wrote, and
/// only those. An agent restarted within a period writes that period
/// twice, its rows under the same period, host, pid, thread and stack;
/// both batches are samples and both stay.
const SAMPLES_KEY: &str =
    "PARTITION BY toYYYYMMDD(period) ORDER BY (period, host, pid, thread, stack_id, batch)";

/// The statements that create the database and tables on one server,
/// each runnable again (`IF NOT EXISTS`).
pub fn single(db: &str) -> Vec<String> {
    vec![
        format!("CREATE DATABASE IF NOT EXISTS {db}"),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.profile_stacks ({STACKS}) \
             ENGINE = ReplacingMergeTree() ORDER BY stack_id"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.profile_samples ({SAMPLES}) \
             ENGINE = ReplacingMergeTree() {SAMPLES_KEY}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.logs ({LOG_COLUMNS}) \
             ENGINE = ReplacingMergeTree() {LOGS_KEY}"
        ),
    ]
}

/// The statements a DBA runs once for cluster `cluster`: the local tables
/// on every shard (`_local`, replicated within a shard by ZooKeeper, under
/// `/clickhouse/tables/{shard}/...`), and `Distributed` tables of the
/// sink's names over them, which the agents write and the views read.
pub fn cluster(db: &str, cluster: &str) -> Vec<String> {
    let replicated = |table: &str| {
        format!("ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{db}/{table}', '{{replica}}')")
    };
    vec![
        format!("CREATE DATABASE IF NOT EXISTS {db} ON CLUSTER {cluster}"),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.profile_stacks_local ON CLUSTER {cluster} ({STACKS}) \
             ENGINE = {} ORDER BY stack_id",
            replicated("profile_stacks")
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.profile_samples_local ON CLUSTER {cluster} ({SAMPLES}) \
             ENGINE = {} {SAMPLES_KEY}",
            replicated("profile_samples")
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.logs_local ON CLUSTER {cluster} ({LOG_COLUMNS}) \
             ENGINE = {} {LOGS_KEY}",
            replicated("logs")
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.profile_stacks ON CLUSTER {cluster} AS {db}.profile_stacks_local \
             ENGINE = Distributed({cluster}, {db}, profile_stacks_local, stack_id)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.profile_samples ON CLUSTER {cluster} AS {db}.profile_samples_local \
             ENGINE = Distributed({cluster}, {db}, profile_samples_local, cityHash64(host))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.logs ON CLUSTER {cluster} AS {db}.logs_local \
             ENGINE = Distributed({cluster}, {db}, logs_local, cityHash64(host))"
        ),
    ]
}
