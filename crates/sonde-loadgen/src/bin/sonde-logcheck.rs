//! Reads a Kafka topic from the beginning and counts, per file, the
//! numbered lines `sonde-logwrite` wrote that are missing or repeated.
//!
//! ```text
//! sonde-logcheck --brokers 127.0.0.1:9092 --topic logs --expect summary.json
//! ```
//!
//! A record is the raw line, or a JSON object whose `"message"` holds it.
//! Reading stops when every expected line was seen and every partition is
//! at its end (so duplicates already in the topic are counted too), or when
//! no record arrived for `--idle` (only then with `--until-idle`). The verdict is printed as JSON; the
//! exit status is 0 when nothing was lost (and, with `--exactly-once`,
//! nothing duplicated), 1 otherwise, 2 when the check could not run.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::Message;
use sonde_loadgen::logs::{self, Summary, Tally, Verdict};

#[derive(Parser)]
#[command(
    name = "sonde-logcheck",
    about = "Count the numbered lines of a sonde-logwrite run that a Kafka topic lost or duplicated"
)]
struct Args {
    /// Bootstrap servers, comma separated.
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    /// The topic to read.
    #[arg(long)]
    topic: String,
    /// The JSON summary sonde-logwrite printed.
    #[arg(long)]
    expect: PathBuf,
    /// read_uncommitted (every record) or read_committed (only records of
    /// committed transactions and records outside transactions).
    #[arg(long, default_value = "read_uncommitted")]
    isolation: String,
    /// Stop when no record arrived for this long (also how long to wait
    /// for the topic to exist).
    #[arg(long, default_value = "5s", value_parser = logs::parse_duration)]
    idle: Duration,
    /// Read until no record arrived for --idle even when every line was
    /// seen, to count duplicates a shipper sends late (after a restart).
    #[arg(long)]
    until_idle: bool,
    /// Before reading, wait until the topic's end offsets add up to the
    /// expected line count (or stop growing for --idle), and report when:
    /// a timing that costs the checker nothing per record, so a benchmark
    /// is not bounded by the checker's own speed.
    #[arg(long)]
    wait_offsets: bool,
    /// Fail (exit 1) on duplicates too, not only on lost lines.
    #[arg(long)]
    exactly_once: bool,
}

#[derive(serde::Serialize)]
struct Report {
    #[serde(flatten)]
    verdict: Verdict,
    /// Records read (parsed or not).
    records: u64,
    partitions: usize,
    /// Seconds from the start of the check until the last record that
    /// added a line not seen before.
    last_new_line_s: f64,
    /// With --wait-offsets: seconds from the start until the topic held as
    /// many records as lines expected (`null` if it never did).
    offsets_reached_s: Option<f64>,
    /// Seconds the check ran.
    seconds: f64,
    /// Whether every expected line was seen.
    complete: bool,
    /// Errors the consumer reported (other than end of partition).
    consumer_errors: u64,
}

fn fail(msg: String) -> ! {
    eprintln!("sonde-logcheck: {msg}");
    std::process::exit(2);
}

fn main() {
    let args = Args::parse();
    if !matches!(
        args.isolation.as_str(),
        "read_committed" | "read_uncommitted"
    ) {
        fail(format!(
            "--isolation {:?}: use read_committed or read_uncommitted",
            args.isolation
        ));
    }
    let summary: Summary = std::fs::read(&args.expect)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| fail(format!("reading {}: {e}", args.expect.display())));
    let mut expected = vec![
        0u64;
        summary
            .files
            .iter()
            .map(|f| f.file as usize + 1)
            .max()
            .unwrap_or(0)
    ];
    for f in &summary.files {
        expected[f.file as usize] = f.lines;
    }
    let mut tally = Tally::new(&expected);

    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("group.id", "sonde-logcheck")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", &args.isolation)
        .set("fetch.max.bytes", "104857600")
        .set("max.partition.fetch.bytes", "16777216")
        .create()
        .unwrap_or_else(|e| fail(format!("creating a consumer: {e}")));

    let start = Instant::now();
    // The topic may not exist yet when the check starts alongside the
    // shipper (Kafka creates it at the first record).
    let partitions: Vec<i32> = loop {
        let found = consumer
            .fetch_metadata(Some(&args.topic), Duration::from_secs(2))
            .ok()
            .and_then(|m| {
                let t = m.topics().iter().find(|t| t.name() == args.topic)?;
                (t.error().is_none() && !t.partitions().is_empty())
                    .then(|| t.partitions().iter().map(|p| p.id()).collect())
            });
        if let Some(p) = found {
            break p;
        }
        if start.elapsed() > args.idle {
            fail(format!(
                "topic {} not found on {} within {:?}",
                args.topic, args.brokers, args.idle
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let offsets_reached_s = if args.wait_offsets {
        wait_offsets(&consumer, &args, &partitions, tally.expected(), start)
    } else {
        None
    };
    let mut assignment = rdkafka::TopicPartitionList::new();
    for &p in &partitions {
        assignment
            .add_partition_offset(&args.topic, p, rdkafka::Offset::Beginning)
            .unwrap_or_else(|e| fail(format!("assigning partition {p}: {e}")));
    }
    consumer
        .assign(&assignment)
        .unwrap_or_else(|e| fail(format!("assigning {}: {e}", args.topic)));

    let mut records = 0u64;
    let mut consumer_errors = 0u64;
    let mut at_end = BTreeSet::new();
    let mut last_activity = Instant::now();
    let mut last_new_line = start;
    loop {
        if !args.until_idle && tally.complete() && at_end.len() == partitions.len() {
            break;
        }
        if last_activity.elapsed() > args.idle {
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                records += 1;
                last_activity = Instant::now();
                let before = tally.unique();
                tally.record(m.payload().unwrap_or_default());
                if tally.unique() != before {
                    last_new_line = last_activity;
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => {
                consumer_errors += 1;
                eprintln!("sonde-logcheck: reading {}: {e}", args.topic);
            }
        }
    }
    let verdict = tally.verdict();
    let ok = verdict.lost == 0 && (!args.exactly_once || verdict.duplicated == 0);
    let report = Report {
        verdict,
        records,
        partitions: partitions.len(),
        last_new_line_s: (last_new_line - start).as_secs_f64(),
        offsets_reached_s,
        seconds: start.elapsed().as_secs_f64(),
        complete: tally.complete(),
        consumer_errors,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("a report serialises")
    );
    std::process::exit(if ok { 0 } else { 1 });
}

/// Polls the end offsets of `partitions` until they add up to `expected`
/// records; returns the seconds since `start` then, or `None` when their
/// sum did not grow for `--idle`. The start offsets are taken as 0: the
/// topic is fresh and nothing is deleted from it during a run.
fn wait_offsets(
    consumer: &BaseConsumer,
    args: &Args,
    partitions: &[i32],
    expected: u64,
    start: Instant,
) -> Option<f64> {
    let mut last = 0u64;
    let mut last_growth = Instant::now();
    loop {
        let mut sum = 0u64;
        for &p in partitions {
            match consumer.fetch_watermarks(&args.topic, p, Duration::from_secs(5)) {
                Ok((_, high)) => sum += u64::try_from(high).unwrap_or(0),
                Err(e) => eprintln!("sonde-logcheck: end offset of partition {p}: {e}"),
            }
        }
        if sum >= expected {
            return Some(start.elapsed().as_secs_f64());
        }
        if sum > last {
            last = sum;
            last_growth = Instant::now();
        } else if last_growth.elapsed() > args.idle {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
