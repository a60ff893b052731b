//! The ClickHouse harness (tests/common/clickhouse.rs) against the real
//! servers, without sonde: Debian's clickhouse-server 18.16 alone and as a
//! two-shard cluster, and the current engine through chDB, each answering
//! the same SQL.
//!
//! Needs the Debian package `clickhouse-server` and a Python with
//! `chdb-core` (`scripts/setup` installs both); without them each test
//! prints why it is skipped, unless `SONDE_REQUIRE_BACKENDS=1` makes that
//! a failure.

mod common;

use std::time::Duration;

use common::backends::or_skip;
use common::clickhouse::{Chdb, ClickHouse, ClickHouseCluster, CLUSTER};
use common::wait_for;

/// The table every test writes: per host and metric, values.
const DDL: [&str; 2] = [
    "CREATE DATABASE IF NOT EXISTS sonde_test",
    "CREATE TABLE sonde_test.points (host String, name String, value UInt64) \
     ENGINE = MergeTree ORDER BY (host, name)",
];

/// Rows as TabSeparated: host-{i%3}, metric-{i%2}, value i.
fn tsv_rows(n: u64) -> String {
    (0..n)
        .map(|i| format!("host-{}\tmetric-{}\t{i}\n", i % 3, i % 2))
        .collect()
}

/// The same rows' sums per host, as the GROUP BY query answers them.
fn expected_sums(n: u64) -> String {
    let mut sums = [0u64; 3];
    let mut counts = [0u64; 3];
    for i in 0..n {
        sums[(i % 3) as usize] += i;
        counts[(i % 3) as usize] += 1;
    }
    (0..3)
        .map(|h| format!("host-{h}\t{}\t{}\n", counts[h], sums[h]))
        .collect()
}

const SUMS: &str =
    "SELECT host, count(), sum(value) FROM sonde_test.points GROUP BY host ORDER BY host";

#[test]
fn one_server_keeps_its_rows_through_a_stop_and_a_kill() {
    let Some(mut ch) = or_skip(ClickHouse::start()) else {
        return;
    };
    assert_eq!(ch.query("SELECT version()").trim(), "18.16.1");
    // Only the three configured ports, all on IPv4 loopback.
    let p = ch.ports();
    let mut want = vec![
        format!("127.0.0.1:{}", p.http),
        format!("127.0.0.1:{}", p.tcp),
        format!("127.0.0.1:{}", p.interserver),
    ];
    want.sort();
    assert_eq!(ch.listening(), want);
    assert!(ch.http_url().starts_with("http://127.0.0.1:"));

    for stmt in DDL {
        ch.query(stmt);
    }
    // TabSeparated and JSONEachRow, each carried in the POST body.
    ch.query(&format!(
        "INSERT INTO sonde_test.points FORMAT TabSeparated\n{}",
        tsv_rows(90)
    ));
    let json: String = (90..100)
        .map(|i| {
            format!(
                "{{\"host\":\"host-{}\",\"name\":\"metric-{}\",\"value\":{i}}}\n",
                i % 3,
                i % 2
            )
        })
        .collect();
    ch.query(&format!(
        "INSERT INTO sonde_test.points FORMAT JSONEachRow\n{json}"
    ));
    assert_eq!(ch.query(SUMS), expected_sums(100));

    // Errors come back as the server's text.
    let err = ch
        .try_query("SELECT nope FROM sonde_test.points")
        .unwrap_err();
    assert!(err.contains("Unknown identifier: nope"), "{err}");

    ch.stop();
    assert!(!ch.ping());
    ch.restart();
    assert_eq!(ch.query(SUMS), expected_sums(100));
    ch.kill();
    assert!(!ch.ping());
    ch.restart();
    assert_eq!(ch.query(SUMS), expected_sums(100));
    assert_eq!(ch.listening(), want, "the same ports after restarts");
}

#[test]
fn a_distributed_table_spreads_rows_over_two_shards_and_reads_them_all() {
    let Some(cluster) = or_skip(ClickHouseCluster::start(2)) else {
        return;
    };
    // Each server sees both shards of the cluster `sonde`.
    for server in cluster.servers() {
        let shards = server.query(&format!(
            "SELECT shard_num, host_address, port FROM system.clusters \
             WHERE cluster = '{CLUSTER}' ORDER BY shard_num"
        ));
        let want: String = cluster
            .servers()
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{}\t127.0.0.1\t{}\n", i + 1, s.ports().tcp))
            .collect();
        assert_eq!(shards, want);
    }
    // ON CLUSTER needs ZooKeeper in 18.16: the harness runs DDL on each.
    let err = cluster.servers()[0]
        .try_query(&format!("CREATE DATABASE sonde_test ON CLUSTER {CLUSTER}"))
        .unwrap_err();
    assert!(
        err.contains("DDL background thread is not initialized"),
        "{err}"
    );
    for stmt in DDL {
        cluster.on_each(stmt);
    }
    cluster.on_each(&format!(
        "CREATE TABLE sonde_test.points_all AS sonde_test.points \
         ENGINE = Distributed({CLUSTER}, sonde_test, points, rand())"
    ));

    // 1000 rows through the Distributed table of shard 1; it forwards them
    // in the background (insert_distributed_sync is 0).
    cluster.servers()[0].query(&format!(
        "INSERT INTO sonde_test.points_all FORMAT TabSeparated\n{}",
        tsv_rows(1000)
    ));
    let counts = wait_for("1000 rows on the shards", Duration::from_secs(20), || {
        let counts: Vec<u64> = cluster
            .servers()
            .iter()
            .map(|s| {
                s.query("SELECT count() FROM sonde_test.points")
                    .trim()
                    .parse()
                    .unwrap()
            })
            .collect();
        (counts.iter().sum::<u64>() == 1000).then_some(counts)
    });
    assert!(
        counts.iter().all(|&c| c > 0),
        "a shard got nothing: {counts:?}"
    );
    eprintln!("rows per shard: {counts:?}");
    // Either server's Distributed table reads both shards.
    for server in cluster.servers() {
        assert_eq!(
            server.query(&SUMS.replace("sonde_test.points", "sonde_test.points_all")),
            expected_sums(1000)
        );
    }
}

#[test]
fn chdb_answers_the_same_sql_as_the_server() {
    let Some(chdb) = or_skip(Chdb::find()) else {
        return;
    };
    let Some(ch) = or_skip(ClickHouse::start()) else {
        return;
    };
    let insert = format!(
        "INSERT INTO sonde_test.points FORMAT TabSeparated\n{}",
        tsv_rows(300)
    );
    let mut setup: Vec<&str> = DDL.to_vec();
    setup.push(&insert);
    for stmt in &setup {
        ch.query(stmt);
    }
    let on_server = ch.query(SUMS);
    assert_eq!(on_server, expected_sums(300));
    assert_eq!(chdb.query(&setup, SUMS).unwrap(), on_server);
    let version = chdb.query(&[], "SELECT version()").unwrap();
    eprintln!("chDB's engine: {}", version.trim());
    // A failing statement comes back as the engine's error text.
    let err = chdb
        .query(&setup, "SELECT nope FROM sonde_test.points")
        .unwrap_err();
    assert!(err.contains("nope"), "{err}");
}

/// The shape of a stack-trace schema on both engines: stacks keyed by a
/// UInt64 id with an Array(String) of frames, and samples with
/// LowCardinality strings, which 18.16 creates only with the experimental
/// setting and the current engine refuses the setting of.
#[test]
fn a_stacks_schema_runs_on_the_server_and_on_chdb_but_low_cardinality_differs() {
    let Some(chdb) = or_skip(Chdb::find()) else {
        return;
    };
    let Some(ch) = or_skip(ClickHouse::start()) else {
        return;
    };
    let stacks = [
        "CREATE DATABASE IF NOT EXISTS prof",
        "CREATE TABLE prof.stacks (stack_id UInt64, frames Array(String)) \
         ENGINE = ReplacingMergeTree ORDER BY stack_id",
        "INSERT INTO prof.stacks FORMAT JSONEachRow\n\
         {\"stack_id\":1,\"frames\":[\"main\",\"work\",\"hot\"]}\n\
         {\"stack_id\":2,\"frames\":[\"main\",\"work\",\"cold\"]}\n\
         {\"stack_id\":1,\"frames\":[\"main\",\"work\",\"hot\"]}\n",
    ];
    let samples = "CREATE TABLE prof.samples (host LowCardinality(String), \
                   stack_id UInt64, count UInt64) ENGINE = MergeTree ORDER BY (host, stack_id)";
    let insert_samples =
        "INSERT INTO prof.samples FORMAT TabSeparated\na\t1\t70\na\t2\t30\nb\t1\t5\n";
    // The joined subquery needs its alias on 26.9
    // (joined_subquery_requires_alias).
    let query = "SELECT arrayStringConcat(s.frames, ';') AS folded, sum(count) \
                 FROM prof.samples \
                 INNER JOIN (SELECT stack_id, any(frames) AS frames FROM prof.stacks \
                 GROUP BY stack_id) AS s USING stack_id GROUP BY folded ORDER BY folded";
    let want = "main;work;cold\t30\nmain;work;hot\t75\n";
    // ANY INNER JOIN changed meaning (ClickHouse 20.x): 18.16 keeps every
    // left row with any one right row; 26.9 keeps one row per key of
    // either side, so host b's 5 samples of stack 1 are dropped.
    let any_inner = "SELECT arrayStringConcat(frames, ';') AS folded, sum(count) \
                     FROM prof.samples ANY INNER JOIN prof.stacks USING stack_id \
                     GROUP BY folded ORDER BY folded";

    for stmt in stacks {
        ch.query(stmt);
    }
    let err = ch.try_query(samples).unwrap_err();
    assert!(
        err.contains("allow_experimental_low_cardinality_type"),
        "{err}"
    );
    ch.query_with(samples, &[("allow_experimental_low_cardinality_type", "1")]);
    ch.query(insert_samples);
    assert_eq!(ch.query(query), want);
    assert_eq!(ch.query(any_inner), want);

    let mut setup = stacks.to_vec();
    setup.extend([samples, insert_samples]);
    assert_eq!(chdb.query(&setup, query).unwrap(), want);
    assert_eq!(
        chdb.query(&setup, any_inner).unwrap(),
        "main;work;cold\t30\nmain;work;hot\t70\n"
    );
    let err = chdb
        .query(
            &["SET allow_experimental_low_cardinality_type = 1"],
            "SELECT 1",
        )
        .unwrap_err();
    assert!(err.contains("Unknown setting"), "{err}");
}
