//! The transactional producer ([`Transactional`]) and the cluster's
//! metadata ([`Cluster`]) against scripted brokers (`scripted/mod.rs`):
//! the requests sonde sends (API, node, transactional id, producer id and
//! epoch, sequences) and what it makes of the answers a real broker gives
//! only now and then: a coordinator loading or moving, concurrent
//! transactions, a leader moving, a connection dropped mid-request, a
//! broker leaving the metadata, partitions added.

mod scripted;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use scripted::{Act, Answer, Scripted, Seen};
use scripted::{ADD_PARTITIONS_TO_TXN, END_TXN, FIND_COORDINATOR, INIT_PRODUCER_ID, METADATA};
use scripted::{API_VERSIONS, PRODUCE};
use sonde_encode::compress::Compression;
use sonde_kafka::batch::decode;
use sonde_kafka::client::begin_produce;
use sonde_kafka::{BatchBuilder, Cluster, Compressor, Dial, Error, Partition, Producer};
use sonde_kafka::{ProduceError, Transactional};

const TXN_ID: &str = "sonde-scripted";
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

fn dial() -> Dial {
    Dial::plain("scripted", Duration::from_secs(5))
}

/// A transactional producer of topic `t`, bootstrapped from broker 1.
fn producer(s: &Scripted, retry_for: Duration) -> Transactional {
    Transactional::new(&[s.addr(1)], &["t"], TXN_ID, TXN_TIMEOUT, retry_for, dial())
}

/// Sends `n` records to `t`/`partition`.
fn send(p: &mut Transactional, partition: i32, n: usize) -> Result<(), ProduceError> {
    let mut b = BatchBuilder::transactional();
    for i in 0..n {
        b.push_value(
            1_764_300_000_000 + i as i64,
            format!("record {i}").as_bytes(),
        );
    }
    let mut c = Compressor::new(Compression::None).unwrap();
    p.produce("t", partition, &mut b, &mut c)
}

/// API, node and answer of each request.
fn trace(seen: &[Seen]) -> Vec<(i16, i32, Answer)> {
    seen.iter().map(|s| (s.api, s.node, s.answer)).collect()
}

fn broker_code(e: &Error) -> Option<(&'static str, i16)> {
    match e {
        Error::Broker { api, code } => Some((api, *code)),
        _ => None,
    }
}

const OK: Answer = Answer::Code(0);

#[test]
fn init_finds_the_coordinator_and_each_init_fences_the_epoch_before() {
    let s = Scripted::start(&[1, 2], &[("t", &[1, 2])]);
    s.world().coordinator = 2;
    let mut p = producer(&s, Duration::from_secs(5));

    // Nothing is sent before init.
    assert!(p.add_partitions(&[("t", 0)]).is_err());
    assert!(matches!(send(&mut p, 0, 1), Err(ProduceError::Failed(_))));
    assert!(s.seen().is_empty());

    p.init().unwrap();
    let seen = s.seen();
    // The metadata from the bootstrap broker, the coordinator asked of the
    // first partition's leader, the producer id of the coordinator.
    assert_eq!(
        trace(&seen),
        [
            (METADATA, 1, OK),
            (FIND_COORDINATOR, 1, OK),
            (INIT_PRODUCER_ID, 2, OK)
        ]
    );
    assert_eq!(seen[0].topics, ["t"]);
    assert_eq!(seen[0].auto_create, Some(true));
    assert_eq!(seen[1].key.as_deref(), Some(TXN_ID));
    assert_eq!(seen[2].transactional_id.as_deref(), Some(TXN_ID));
    assert_eq!(seen[2].timeout_ms, Some(60_000));
    assert!(!p.is_open());

    s.clear_seen();
    p.add_partitions(&[("t", 0), ("t", 1)]).unwrap();
    assert!(p.is_open());
    send(&mut p, 0, 3).unwrap();
    send(&mut p, 0, 2).unwrap();
    send(&mut p, 1, 1).unwrap();
    let adds = s.seen_api(ADD_PARTITIONS_TO_TXN);
    assert_eq!(trace(&adds), [(ADD_PARTITIONS_TO_TXN, 2, OK)]);
    assert_eq!(adds[0].producer, Some((1000, 0)));
    assert_eq!(adds[0].transactional_id.as_deref(), Some(TXN_ID));
    assert_eq!(adds[0].partitions, [("t".into(), 0), ("t".into(), 1)]);
    let produced = s.seen_api(PRODUCE);
    let nodes: Vec<i32> = produced.iter().map(|s| s.node).collect();
    let sequences: Vec<Option<i32>> = produced.iter().map(|s| s.sequence).collect();
    assert_eq!(nodes, [1, 1, 2], "each partition's leader");
    assert_eq!(sequences, [Some(0), Some(3), Some(0)], "per partition");
    for s in &produced {
        assert_eq!(s.producer, Some((1000, 0)));
        assert_eq!(s.transactional_id.as_deref(), Some(TXN_ID));
        assert!(decode(&s.batch).unwrap().transactional);
    }

    p.commit().unwrap();
    assert!(!p.is_open());
    let ends = s.seen_api(END_TXN);
    assert_eq!(trace(&ends), [(END_TXN, 2, OK)]);
    assert_eq!(ends[0].commit, Some(true));
    assert_eq!(ends[0].producer, Some((1000, 0)));
    // With no transaction open, commit and abort send nothing.
    p.commit().unwrap();
    p.abort().unwrap();
    assert_eq!(s.seen_api(END_TXN).len(), 1);

    // A transaction left open, then init again: a new epoch (which
    // fences the old one at the broker), no transaction open, and
    // sequences from 0 again.
    p.add_partitions(&[("t", 0)]).unwrap();
    send(&mut p, 0, 1).unwrap();
    p.init().unwrap();
    assert!(!p.is_open());
    s.clear_seen();
    p.add_partitions(&[("t", 0)]).unwrap();
    send(&mut p, 0, 1).unwrap();
    p.abort().unwrap();
    let seen = s.seen();
    assert_eq!(
        trace(&seen),
        [
            (ADD_PARTITIONS_TO_TXN, 2, OK),
            (PRODUCE, 1, OK),
            (END_TXN, 2, OK)
        ]
    );
    assert!(seen.iter().all(|s| s.producer == Some((1000, 1))));
    assert_eq!(seen[1].sequence, Some(0));
    assert_eq!(seen[2].commit, Some(false));
}

#[test]
fn a_loading_coordinator_and_concurrent_transactions_are_retried_until_they_heal() {
    let s = Scripted::start(&[1], &[("t", &[1])]);
    let mut p = producer(&s, Duration::from_secs(10));
    s.world().script(
        INIT_PRODUCER_ID,
        &[Act::Code(14), Act::Code(14)], // COORDINATOR_LOAD_IN_PROGRESS
    );
    p.init().unwrap();
    let inits = s.seen_api(INIT_PRODUCER_ID);
    let answers: Vec<Answer> = inits.iter().map(|s| s.answer).collect();
    assert_eq!(answers, [Answer::Code(14), Answer::Code(14), OK]);
    assert!(inits
        .iter()
        .all(|s| s.transactional_id.as_deref() == Some(TXN_ID)));

    // CONCURRENT_TRANSACTIONS: the last transaction is still completing.
    s.world()
        .script(ADD_PARTITIONS_TO_TXN, &[Act::Code(51), Act::Code(51)]);
    p.add_partitions(&[("t", 0)]).unwrap();
    let adds = s.seen_api(ADD_PARTITIONS_TO_TXN);
    let answers: Vec<Answer> = adds.iter().map(|s| s.answer).collect();
    assert_eq!(answers, [Answer::Code(51), Answer::Code(51), OK]);
    for a in &adds {
        assert_eq!(a.producer, Some((1000, 0)));
        assert_eq!(a.partitions, [("t".into(), 0)]);
    }
    // Added once: not again.
    p.add_partitions(&[("t", 0)]).unwrap();
    assert_eq!(s.seen_api(ADD_PARTITIONS_TO_TXN).len(), 3);

    send(&mut p, 0, 1).unwrap();
    s.world().script(END_TXN, &[Act::Code(51)]);
    p.commit().unwrap();
    let ends = s.seen_api(END_TXN);
    assert_eq!(
        trace(&ends),
        [(END_TXN, 1, Answer::Code(51)), (END_TXN, 1, OK)]
    );
    assert!(ends.iter().all(|e| e.commit == Some(true)));
    assert!(!p.is_open());
}

#[test]
fn not_coordinator_looks_the_coordinator_up_again() {
    let s = Scripted::start(&[1, 2], &[("t", &[1])]);
    let mut p = producer(&s, Duration::from_secs(10));
    p.init().unwrap();

    // The coordinator moves to broker 2: broker 1 answers NOT_COORDINATOR.
    s.world().coordinator = 2;
    s.clear_seen();
    p.add_partitions(&[("t", 0)]).unwrap();
    assert_eq!(
        trace(&s.seen()),
        [
            (ADD_PARTITIONS_TO_TXN, 1, Answer::Code(16)),
            (FIND_COORDINATOR, 1, OK),
            (ADD_PARTITIONS_TO_TXN, 2, OK)
        ]
    );

    // And back, while the coordinator is elected: FindCoordinator answers
    // COORDINATOR_NOT_AVAILABLE once.
    s.world().coordinator = 1;
    s.world().script(FIND_COORDINATOR, &[Act::Code(15)]);
    s.clear_seen();
    p.commit().unwrap();
    assert_eq!(
        trace(&s.seen()),
        [
            (END_TXN, 2, Answer::Code(16)),
            (FIND_COORDINATOR, 1, Answer::Code(15)),
            (FIND_COORDINATOR, 1, OK),
            (END_TXN, 1, OK)
        ]
    );
    assert!(s.seen_api(END_TXN).iter().all(|e| e.commit == Some(true)));
}

#[test]
fn a_connection_dropped_mid_request_is_sent_again_with_the_same_sequence() {
    let s = Scripted::start(&[1], &[("t", &[1])]);
    let mut p = producer(&s, Duration::from_secs(10));
    p.init().unwrap();
    p.add_partitions(&[("t", 0)]).unwrap();
    send(&mut p, 0, 2).unwrap();

    s.world().script(PRODUCE, &[Act::Drop]);
    s.clear_seen();
    send(&mut p, 0, 3).unwrap();
    let seen = s.seen();
    // The failed connection is dropped and the metadata asked again before
    // the same batch goes out on a new connection.
    assert_eq!(
        trace(&seen),
        [
            (PRODUCE, 1, Answer::Dropped),
            (METADATA, 1, OK),
            (PRODUCE, 1, OK)
        ]
    );
    assert_eq!(seen[0].sequence, Some(2));
    assert_eq!(seen[0].batch, seen[2].batch, "the same bytes");
    assert_ne!(seen[0].conn, seen[2].conn);
    s.clear_seen();
    send(&mut p, 0, 1).unwrap();
    assert_eq!(s.seen_api(PRODUCE)[0].sequence, Some(5));

    // EndTxn dropped: the outcome is unknown, and asking again for the
    // same one is safe.
    s.world().script(END_TXN, &[Act::Drop]);
    s.clear_seen();
    p.commit().unwrap();
    let seen = s.seen();
    assert_eq!(
        trace(&seen),
        [
            (END_TXN, 1, Answer::Dropped),
            (METADATA, 1, OK),
            (FIND_COORDINATOR, 1, OK),
            (END_TXN, 1, OK)
        ]
    );
    assert_eq!(seen[0].commit, Some(true));
    assert_eq!(seen[3].commit, Some(true));
    assert_eq!(seen[3].producer, Some((1000, 0)));
}

#[test]
fn a_leader_that_moved_is_found_in_fresh_metadata() {
    let s = Scripted::start(&[1, 2], &[("t", &[1, 1])]);
    let mut p = producer(&s, Duration::from_secs(10));
    p.init().unwrap();
    p.add_partitions(&[("t", 0)]).unwrap();
    send(&mut p, 0, 2).unwrap();
    assert_eq!(p.cluster().leader(0), Some(1));

    s.world().topic("t").partitions[0].1 = 2;
    s.clear_seen();
    send(&mut p, 0, 1).unwrap();
    let seen = s.seen();
    assert_eq!(
        trace(&seen),
        [
            (PRODUCE, 1, Answer::Code(6)), // NOT_LEADER_OR_FOLLOWER
            (METADATA, 1, OK),
            (PRODUCE, 2, OK)
        ]
    );
    assert_eq!(seen[0].sequence, Some(2));
    assert_eq!(seen[0].batch, seen[2].batch);
    assert_eq!(p.cluster().leader(0), Some(2));
    s.clear_seen();
    send(&mut p, 0, 1).unwrap();
    assert_eq!(trace(&s.seen()), [(PRODUCE, 2, OK)]);
    assert_eq!(s.seen()[0].sequence, Some(3));
}

#[test]
fn errors_that_do_not_heal_are_returned_without_a_retry() {
    let s = Scripted::start(&[1], &[("t", &[1])]);
    // A retry would show as a second request (none comes for 30 s).
    let mut p = producer(&s, Duration::from_secs(30));
    p.init().unwrap();

    // TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    s.world().script(ADD_PARTITIONS_TO_TXN, &[Act::Code(53)]);
    let e = p.add_partitions(&[("t", 0)]).unwrap_err();
    assert_eq!(broker_code(&e), Some(("AddPartitionsToTxn", 53)));
    assert_eq!(s.seen_api(ADD_PARTITIONS_TO_TXN).len(), 1);
    // Nothing was added at the coordinator, so ending the transaction
    // asks nothing of it (it would answer INVALID_TXN_STATE).
    p.abort().unwrap();
    assert!(!p.is_open());
    assert!(s.seen_api(END_TXN).is_empty());

    p.add_partitions(&[("t", 0)]).unwrap();
    s.clear_seen();
    // INVALID_RECORD: the batch is refused and its sequence not used.
    s.world().script(PRODUCE, &[Act::Code(87)]);
    assert!(matches!(send(&mut p, 0, 4), Err(ProduceError::Refused(87))));
    // MESSAGE_TOO_LARGE: smaller batches would do.
    s.world().script(PRODUCE, &[Act::Code(10)]);
    assert!(matches!(send(&mut p, 0, 4), Err(ProduceError::TooLarge)));
    send(&mut p, 0, 2).unwrap();
    let sequences: Vec<Option<i32>> = s.seen_api(PRODUCE).iter().map(|s| s.sequence).collect();
    assert_eq!(sequences, [Some(0), Some(0), Some(0)]);

    // DUPLICATE_SEQUENCE_NUMBER: written before, so delivered.
    s.world().script(PRODUCE, &[Act::Code(46)]);
    send(&mut p, 0, 1).unwrap();
    // PRODUCER_FENCED: the transaction cannot go on.
    s.world().script(PRODUCE, &[Act::Code(90)]);
    match send(&mut p, 0, 1) {
        Err(ProduceError::Failed(e)) => assert_eq!(broker_code(&e), Some(("Produce", 90))),
        other => panic!("{other:?}"),
    }
    let sequences: Vec<Option<i32>> = s.seen_api(PRODUCE).iter().map(|s| s.sequence).collect();
    assert_eq!(sequences, [Some(0), Some(0), Some(0), Some(2), Some(3)]);

    // INVALID_PRODUCER_EPOCH at commit.
    s.world().script(END_TXN, &[Act::Code(47)]);
    let e = p.commit().unwrap_err();
    assert_eq!(broker_code(&e), Some(("EndTxn", 47)));
    assert_eq!(s.seen_api(END_TXN).len(), 1);
    assert!(p.is_open(), "the outcome is the caller's to settle");
}

#[test]
fn what_does_not_heal_within_the_retry_time_is_returned() {
    let s = Scripted::start(&[1], &[("t", &[1])]);
    let retry_for = Duration::from_secs(1);
    let mut p = producer(&s, retry_for);
    s.world().script(INIT_PRODUCER_ID, &[Act::Code(15); 1000]);
    let start = Instant::now();
    let e = p.init().unwrap_err();
    let took = start.elapsed();
    assert_eq!(broker_code(&e), Some(("InitProducerId", 15)));
    assert!(took >= retry_for, "gave up after {took:?}");
    assert!(took < retry_for + Duration::from_secs(3), "{took:?}");
    let tries = s.seen_api(INIT_PRODUCER_ID).len();
    assert!(tries >= 3, "{tries} tries");

    s.world().script.clear();
    p.init().unwrap();
    p.add_partitions(&[("t", 0)]).unwrap();
    // NOT_ENOUGH_REPLICAS for good.
    s.world().script(PRODUCE, &[Act::Code(19); 1000]);
    s.clear_seen();
    let start = Instant::now();
    match send(&mut p, 0, 2) {
        Err(ProduceError::Failed(e)) => assert_eq!(broker_code(&e), Some(("Produce", 19))),
        other => panic!("{other:?}"),
    }
    let took = start.elapsed();
    assert!(took >= retry_for, "gave up after {took:?}");
    assert!(took < retry_for + Duration::from_secs(3), "{took:?}");
    let produced = s.seen_api(PRODUCE);
    assert!(produced.len() >= 3, "{} tries", produced.len());
    assert!(produced
        .iter()
        .all(|s| s.sequence == Some(0) && s.batch == produced[0].batch));
}

/// A produce request for `t`/0 with two records.
fn produce_request() -> (Vec<u8>, sonde_kafka::client::ProduceFrame) {
    let mut buf = Vec::new();
    let frame = begin_produce(&mut buf, "scripted", None, -1, 5_000, "t", 0);
    let mut b = BatchBuilder::new();
    b.push_value(1, b"a");
    b.push_value(2, b"b");
    b.finish(
        &mut Compressor::new(Compression::None).unwrap(),
        Producer::NONE,
        &mut buf,
    )
    .unwrap();
    (buf, frame)
}

/// An address nothing listens on.
fn dead_address() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[test]
fn refresh_reads_the_brokers_partitions_and_leaders() {
    let s = Scripted::start(&[1, 2], &[("t", &[2, 1, -1]), ("u", &[1])]);
    {
        let mut w = s.world();
        w.topic("t").partitions.reverse();
        // A leader the metadata does not list among its brokers.
        w.topic("u").partitions.push((1, 7));
    }
    let mut c = Cluster::new(&[s.addr(1)], &["t", "u"], dial());
    assert!(c.is_stale());
    assert!(c.partitions().is_empty());
    c.refresh().unwrap();
    assert!(!c.is_stale());
    let p = |id, leader| Partition { id, leader };
    assert_eq!(
        c.partitions(),
        [p(0, Some(2)), p(1, Some(1)), p(2, None)],
        "by index"
    );
    assert_eq!(c.topic(), "t");
    assert_eq!(c.leader(0), Some(2));
    assert_eq!(c.leader(2), None);
    assert_eq!(c.leader_of("u", 0), Some(1));
    assert_eq!(c.leader_of("u", 1), None);
    assert_eq!(c.leader_of("u", 5), None);
    assert_eq!(c.leader_of("v", 0), None);
    let metas = s.seen_api(METADATA);
    assert_eq!(metas.len(), 1);
    assert_eq!(metas[0].topics, ["t", "u"]);
    assert_eq!(metas[0].auto_create, Some(true));
    c.mark_stale();
    assert!(c.is_stale());

    // Partitions added are seen at the next refresh, not before.
    s.world().topic("t").partitions.extend([(3, 2), (4, 1)]);
    assert_eq!(c.partitions().len(), 3);
    c.refresh().unwrap();
    assert_eq!(c.partitions().len(), 5);
    assert_eq!(c.leader(3), Some(2));
    assert_eq!(c.leader(4), Some(1));
}

#[test]
fn bootstrap_brokers_tries_each_address_and_names_no_topic() {
    let s = Scripted::start(&[1, 2, 3], &[("t", &[1])]);
    s.world().listed = vec![3, 1, 2];
    let dead = dead_address();
    let mut c = Cluster::new(&[dead.clone(), s.addr(2)], &["t"], dial());
    assert_eq!(c.bootstrap_brokers().unwrap(), [3, 1, 2]);
    let metas = s.seen_api(METADATA);
    assert_eq!(trace(&metas), [(METADATA, 2, OK)]);
    assert!(metas[0].topics.is_empty(), "no topic named, none created");
    assert_eq!(metas[0].auto_create, Some(false));
    // Each broker is reached where the metadata says.
    c.connection(3).unwrap();
    assert!(c.connected(3).is_some());
    assert!(s
        .world()
        .seen
        .iter()
        .any(|s| s.api == API_VERSIONS && s.node == 3));

    assert!(Cluster::new(&[dead], &["t"], dial())
        .bootstrap_brokers()
        .is_err());
    let e = Cluster::new(&[], &["t"], dial())
        .bootstrap_brokers()
        .unwrap_err();
    assert!(e.to_string().contains("no bootstrap broker"), "{e}");
}

#[test]
fn a_broker_that_left_the_metadata_is_disconnected() {
    let s = Scripted::start(&[1, 2], &[("t", &[1, 2])]);
    let mut c = Cluster::new(&[s.addr(1)], &["t"], dial());
    c.refresh().unwrap();
    c.connection(1).unwrap();
    c.connection(2).unwrap();
    {
        let mut w = s.world();
        w.listed = vec![1];
        w.topic("t").partitions[1].1 = 1;
    }
    c.mark_stale();
    c.refresh().unwrap();
    assert!(c.connected(2).is_none());
    assert!(c.connected(1).is_some());
    assert_eq!(c.leader(1), Some(1));
    s.wait_for("broker 2's connection closed", |w| {
        w.closed.get(&2) == Some(&1)
    });
    let e = c.connection(2).unwrap_err();
    assert!(
        e.to_string().contains("broker 2 is not in the metadata"),
        "{e}"
    );
}

#[test]
fn a_broker_that_fails_the_metadata_request_is_dropped_for_the_bootstrap_ones() {
    let s = Scripted::start(&[1, 2], &[("t", &[1])]);
    let mut c = Cluster::new(&[s.addr(2)], &["t"], dial());
    c.refresh().unwrap();
    c.connection(1).unwrap();
    s.clear_seen();
    s.world().script(METADATA, &[Act::Drop]);
    c.refresh().unwrap();
    assert_eq!(
        trace(&s.seen()),
        [(METADATA, 1, Answer::Dropped), (METADATA, 2, OK)]
    );
    assert!(c.connected(1).is_none());
    assert!(!c.is_stale());
}

#[test]
fn a_topic_error_is_returned_and_a_topic_without_partitions_stays_stale() {
    let s = Scripted::start(&[1], &[("t", &[1])]);
    let mut c = Cluster::new(&[s.addr(1)], &["t"], dial());
    s.world().topic("t").error = 29; // TOPIC_AUTHORIZATION_FAILED
    let e = c.refresh().unwrap_err();
    assert_eq!(broker_code(&e), Some(("Metadata", 29)));
    assert!(c.is_stale());

    {
        let mut w = s.world();
        w.topic("t").error = 0;
        w.topic("t").partitions.clear();
    }
    c.refresh().unwrap();
    assert!(c.partitions().is_empty());
    assert!(c.is_stale(), "asked again until the topic has partitions");
    s.world().topic("t").partitions.push((0, 1));
    c.refresh().unwrap();
    assert!(!c.is_stale());

    // A topic the cluster does not have.
    let mut c = Cluster::new(&[s.addr(1)], &["t", "nope"], dial());
    let e = c.refresh().unwrap_err();
    assert_eq!(broker_code(&e), Some(("Metadata", 3)));
}

#[test]
fn produce_asks_stale_metadata_first_and_a_failed_send_marks_it_stale() {
    let s = Scripted::start(&[1, 2], &[("t", &[2])]);
    let mut c = Cluster::new(&[s.addr(1)], &["t"], dial());
    let (mut request, frame) = produce_request();
    assert_eq!(c.produce("t", 0, &mut request, frame).unwrap(), 0);
    assert_eq!(trace(&s.seen()), [(METADATA, 1, OK), (PRODUCE, 2, OK)]);
    assert!(!c.is_stale());

    // The partition's error code comes back for the caller to act on.
    s.world().script(PRODUCE, &[Act::Code(6)]);
    assert_eq!(c.produce("t", 0, &mut request, frame).unwrap(), 6);
    assert!(c.connected(2).is_some());

    // A failed connection is closed and the metadata marked stale.
    s.world().script(PRODUCE, &[Act::Drop]);
    assert!(matches!(
        c.produce("t", 0, &mut request, frame),
        Err(Error::Io(_))
    ));
    assert!(c.connected(2).is_none());
    assert!(c.is_stale());

    // No leader: LEADER_NOT_AVAILABLE, and nothing sent.
    s.world().topic("t").partitions[0].1 = -1;
    s.clear_seen();
    let e = c.produce("t", 0, &mut request, frame).unwrap_err();
    assert_eq!(broker_code(&e), Some(("Metadata", 5)));
    assert_eq!(trace(&s.seen()), [(METADATA, 1, OK)]);

    // An idempotent producer's id, from any broker.
    s.world().topic("t").partitions[0].1 = 2;
    let (id, epoch) = c.init_producer_id().unwrap();
    assert_eq!((id, epoch), (1000, 0));
    let inits = s.seen_api(INIT_PRODUCER_ID);
    assert_eq!(inits.len(), 1);
    assert_eq!(inits[0].transactional_id, None);
    assert_eq!(inits[0].timeout_ms, Some(i32::MAX));
    // A refusal is returned, not tried on the next broker.
    s.world().script(INIT_PRODUCER_ID, &[Act::Code(87)]);
    let e = c.init_producer_id().unwrap_err();
    assert_eq!(broker_code(&e), Some(("InitProducerId", 87)));
    assert_eq!(s.seen_api(INIT_PRODUCER_ID).len(), 2);
}
