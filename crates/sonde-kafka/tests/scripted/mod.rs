//! A scripted Kafka cluster on loopback, for the error paths a real
//! broker cannot be made to take on demand: a coordinator that moves or
//! is loading, a leader that moves, a connection dropped mid-request, a
//! broker that leaves the metadata, partitions added.
//!
//! Each broker is a TCP listener on 127.0.0.1 with a thread per
//! connection that reads requests (header and body through the crate's
//! [`Reader`]), records each one ([`Seen`]) and answers it from the shared
//! [`World`]: by default as a healthy cluster would (the metadata as the
//! world says, `NOT_COORDINATOR` from a broker that is not the
//! transaction coordinator, `NOT_LEADER_OR_FOLLOWER` from one that does
//! not lead the partition, a new epoch at each `InitProducerId`), unless
//! the script holds an [`Act`] for the request's API, which is used once:
//! an error code, or the connection closed without an answer.
//!
//! Only the non-flexible versions sonde speaks are served, and only the
//! APIs a producer uses.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sonde_kafka::batch::decode;
use sonde_kafka::wire::Reader;

pub const PRODUCE: i16 = 0;
pub const METADATA: i16 = 3;
pub const FIND_COORDINATOR: i16 = 10;
pub const API_VERSIONS: i16 = 18;
pub const INIT_PRODUCER_ID: i16 = 22;
pub const ADD_PARTITIONS_TO_TXN: i16 = 24;
pub const END_TXN: i16 = 26;

/// The versions the scripted brokers serve: those of a Kafka 4 broker
/// that sonde speaks.
const VERSIONS: [(i16, i16, i16); 7] = [
    (PRODUCE, 3, 8),
    (METADATA, 4, 8),
    (FIND_COORDINATOR, 0, 2),
    (API_VERSIONS, 0, 3),
    (INIT_PRODUCER_ID, 0, 1),
    (ADD_PARTITIONS_TO_TXN, 0, 2),
    (END_TXN, 0, 2),
];

/// What the script does with the next request of an API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Answer with this error code (for a topic, a partition or the
    /// whole request, as the API carries it).
    Code(i16),
    /// Close the connection without answering.
    Drop,
}

/// How a request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Code(i16),
    Dropped,
}

/// A request a scripted broker received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The broker's node id.
    pub node: i32,
    /// The connection's number, unique in the world.
    pub conn: u64,
    pub api: i16,
    pub version: i16,
    /// InitProducerId, AddPartitionsToTxn, EndTxn, Produce.
    pub transactional_id: Option<String>,
    /// AddPartitionsToTxn, EndTxn; for Produce, the batch's.
    pub producer: Option<(i64, i16)>,
    /// Produce: the batch's base sequence.
    pub sequence: Option<i32>,
    /// Produce: the topic and partition; AddPartitionsToTxn: those added.
    pub partitions: Vec<(String, i32)>,
    /// Produce: the record batch, as sent.
    pub batch: Vec<u8>,
    /// Metadata: the topics asked for, and whether they may be created.
    pub topics: Vec<String>,
    pub auto_create: Option<bool>,
    /// InitProducerId: the transaction timeout.
    pub timeout_ms: Option<i32>,
    /// EndTxn: commit (true) or abort.
    pub commit: Option<bool>,
    /// FindCoordinator: the key.
    pub key: Option<String>,
    pub answer: Answer,
}

/// A topic as the metadata lists it.
#[derive(Clone, Debug)]
pub struct Topic {
    pub name: String,
    pub error: i16,
    /// Partition index and leader (-1: none).
    pub partitions: Vec<(i32, i32)>,
}

/// The cluster's state, which the tests change as they go.
#[derive(Debug, Default)]
pub struct World {
    /// Every listener: node id and port.
    pub ports: HashMap<i32, u16>,
    /// The brokers the metadata lists, in this order.
    pub listed: Vec<i32>,
    pub topics: Vec<Topic>,
    /// The transaction coordinator's node id.
    pub coordinator: i32,
    pub producer_id: i64,
    /// The epoch the last InitProducerId gave.
    pub epoch: i16,
    /// Per API, the acts to use, in order, before the default answers.
    pub script: HashMap<i16, Vec<Act>>,
    pub seen: Vec<Seen>,
    /// Connections the client closed, per node.
    pub closed: HashMap<i32, usize>,
    next_conn: u64,
}

impl World {
    pub fn topic(&mut self, name: &str) -> &mut Topic {
        self.topics.iter_mut().find(|t| t.name == name).unwrap()
    }

    fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        self.topics
            .iter()
            .find(|t| t.name == topic)?
            .partitions
            .iter()
            .find(|p| p.0 == partition)
            .map(|p| p.1)
    }

    /// Queues `acts` for the next requests of `api`.
    pub fn script(&mut self, api: i16, acts: &[Act]) {
        self.script.entry(api).or_default().extend_from_slice(acts);
    }
}

/// A scripted cluster: its brokers' listeners and the world they answer
/// from. Dropping it stops the listeners.
pub struct Scripted {
    world: Arc<Mutex<World>>,
    stop: Arc<AtomicBool>,
    listeners: Vec<(u16, JoinHandle<()>)>,
}

impl Scripted {
    /// Brokers `nodes`, all listed in the metadata, the first the
    /// coordinator, producer id 1000 at epoch -1 (the first
    /// InitProducerId gives 0), and `topics` (name, leader of each
    /// partition by index).
    pub fn start(nodes: &[i32], topics: &[(&str, &[i32])]) -> Scripted {
        let world = Arc::new(Mutex::new(World {
            listed: nodes.to_vec(),
            topics: topics
                .iter()
                .map(|(name, leaders)| Topic {
                    name: name.to_string(),
                    error: 0,
                    partitions: leaders
                        .iter()
                        .enumerate()
                        .map(|(i, l)| (i as i32, *l))
                        .collect(),
                })
                .collect(),
            coordinator: nodes[0],
            producer_id: 1000,
            epoch: -1,
            ..World::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let mut listeners = Vec::new();
        for &node in nodes {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            world.lock().unwrap().ports.insert(node, port);
            let (world, stop) = (world.clone(), stop.clone());
            let accept = std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let world = world.clone();
                    std::thread::spawn(move || serve(node, stream, &world));
                }
            });
            listeners.push((port, accept));
        }
        Scripted {
            world,
            stop,
            listeners,
        }
    }

    /// The world, to read what was seen or change what comes next.
    pub fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap()
    }

    /// `host:port` of broker `node`.
    pub fn addr(&self, node: i32) -> String {
        format!("127.0.0.1:{}", self.world().ports[&node])
    }

    /// The requests seen so far, ApiVersions left out.
    pub fn seen(&self) -> Vec<Seen> {
        self.world()
            .seen
            .iter()
            .filter(|s| s.api != API_VERSIONS)
            .cloned()
            .collect()
    }

    /// The requests of `api` seen so far.
    pub fn seen_api(&self, api: i16) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.api == api).collect()
    }

    /// Forgets the requests seen so far.
    pub fn clear_seen(&self) {
        self.world().seen.clear();
    }

    /// Waits until `cond` holds of the world, failing after 10 s.
    pub fn wait_for(&self, what: &str, mut cond: impl FnMut(&World) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond(&self.world()) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for (port, accept) in self.listeners.drain(..) {
            // Wakes the accept loop, which sees the flag.
            let _ = TcpStream::connect(("127.0.0.1", port));
            let _ = accept.join();
        }
        // A request the broker could not read (it panicked holding the
        // world) fails the test even when the client retried past it.
        if !std::thread::panicking() {
            assert!(
                !self.world.is_poisoned(),
                "a scripted broker failed on a request"
            );
        }
    }
}

/// Serves one connection until the client closes it or the script drops
/// it.
fn serve(node: i32, mut stream: TcpStream, world: &Mutex<World>) {
    let conn = {
        let mut w = world.lock().unwrap();
        w.next_conn += 1;
        w.next_conn
    };
    loop {
        let mut size = [0u8; 4];
        if stream.read_exact(&mut size).is_err() {
            *world.lock().unwrap().closed.entry(node).or_default() += 1;
            return;
        }
        let mut request = vec![0u8; i32::from_be_bytes(size) as usize];
        if stream.read_exact(&mut request).is_err() {
            return;
        }
        let response = answer(node, conn, &request, &mut world.lock().unwrap());
        match response {
            Some(body) => {
                let mut out = Vec::with_capacity(body.len() + 4);
                put_i32(&mut out, body.len() as i32);
                out.extend_from_slice(&body);
                if stream.write_all(&out).is_err() {
                    return;
                }
            }
            None => {
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

fn put_i8(b: &mut Vec<u8>, v: i8) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put_i16(b: &mut Vec<u8>, v: i16) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put_i32(b: &mut Vec<u8>, v: i32) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put_i64(b: &mut Vec<u8>, v: i64) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put_str(b: &mut Vec<u8>, s: &str) {
    put_i16(b, s.len() as i16);
    b.extend_from_slice(s.as_bytes());
}

/// Reads a request, records it and writes its response (correlation id
/// first), or `None` to close the connection.
fn answer(node: i32, conn: u64, request: &[u8], w: &mut World) -> Option<Vec<u8>> {
    let mut r = Reader::new(request);
    let api = r.i16("api").unwrap();
    let version = r.i16("version").unwrap();
    let correlation = r.i32("correlation").unwrap();
    r.nullable_str("client id").unwrap();
    let mut seen = Seen {
        node,
        conn,
        api,
        version,
        transactional_id: None,
        producer: None,
        sequence: None,
        partitions: Vec::new(),
        batch: Vec::new(),
        topics: Vec::new(),
        auto_create: None,
        timeout_ms: None,
        commit: None,
        key: None,
        answer: Answer::Code(0),
    };
    parse(&mut r, &mut seen);
    assert!(r.rest().is_empty(), "bytes after a request of API {api}");
    let (lo, hi) = VERSIONS
        .iter()
        .find(|v| v.0 == api)
        .map(|v| (v.1, v.2))
        .unwrap_or_else(|| panic!("API {api} is not served"));
    assert!(
        (lo..=hi).contains(&version),
        "API {api} version {version} is not served"
    );
    let scripted = match w.script.get_mut(&api) {
        Some(acts) if !acts.is_empty() && api != API_VERSIONS => Some(acts.remove(0)),
        _ => None,
    };
    if scripted == Some(Act::Drop) {
        seen.answer = Answer::Dropped;
        w.seen.push(seen);
        return None;
    }
    let code = match scripted {
        Some(Act::Code(c)) => Some(c),
        _ => None,
    };
    let mut out = Vec::new();
    put_i32(&mut out, correlation);
    let answered = respond(w, &seen, code, &mut out);
    seen.answer = Answer::Code(answered);
    w.seen.push(seen);
    Some(out)
}

fn parse(r: &mut Reader<'_>, s: &mut Seen) {
    match s.api {
        API_VERSIONS => {}
        METADATA => {
            for _ in 0..r.count(2, "topics").unwrap() {
                s.topics.push(r.str("topic").unwrap());
            }
            s.auto_create = Some(r.i8("auto create").unwrap() != 0);
            if s.version >= 8 {
                r.i8("cluster ops").unwrap();
                r.i8("topic ops").unwrap();
            }
        }
        FIND_COORDINATOR => {
            s.key = Some(r.str("key").unwrap());
            if s.version >= 1 {
                assert_eq!(r.i8("key type").unwrap(), 1, "a transaction's key");
            }
        }
        INIT_PRODUCER_ID => {
            s.transactional_id = r.nullable_str("transactional id").unwrap();
            s.timeout_ms = Some(r.i32("timeout").unwrap());
        }
        ADD_PARTITIONS_TO_TXN => {
            s.transactional_id = Some(r.str("transactional id").unwrap());
            s.producer = Some((r.i64("pid").unwrap(), r.i16("epoch").unwrap()));
            for _ in 0..r.count(6, "topics").unwrap() {
                let t = r.str("topic").unwrap();
                for _ in 0..r.count(4, "partitions").unwrap() {
                    s.partitions.push((t.clone(), r.i32("partition").unwrap()));
                }
            }
        }
        END_TXN => {
            s.transactional_id = Some(r.str("transactional id").unwrap());
            s.producer = Some((r.i64("pid").unwrap(), r.i16("epoch").unwrap()));
            s.commit = Some(r.i8("committed").unwrap() != 0);
        }
        PRODUCE => {
            s.transactional_id = r.nullable_str("transactional id").unwrap();
            r.i16("acks").unwrap();
            r.i32("timeout").unwrap();
            assert_eq!(r.count(6, "topics").unwrap(), 1, "one topic a request");
            let t = r.str("topic").unwrap();
            assert_eq!(r.count(8, "partitions").unwrap(), 1, "one partition");
            s.partitions.push((t, r.i32("partition").unwrap()));
            let n = r.i32("records size").unwrap() as usize;
            s.batch = r.bytes(n, "records").unwrap().to_vec();
            let batch = decode(&s.batch).expect("a well-formed batch");
            s.producer = Some((batch.producer.id, batch.producer.epoch));
            s.sequence = Some(batch.producer.base_sequence);
        }
        api => panic!("API {api} is not served"),
    }
}

/// Writes the response body of `s` into `out`, with `code` when the
/// script says so, else as the world has it; returns the error code
/// answered.
fn respond(w: &mut World, s: &Seen, code: Option<i16>, out: &mut Vec<u8>) -> i16 {
    let v = s.version;
    let not_coordinator = || (s.node != w.coordinator).then_some(16);
    match s.api {
        API_VERSIONS => {
            put_i16(out, 0);
            put_i32(out, VERSIONS.len() as i32);
            for (api, lo, hi) in VERSIONS {
                put_i16(out, api);
                put_i16(out, lo);
                put_i16(out, hi);
            }
            if v >= 1 {
                put_i32(out, 0);
            }
            0
        }
        METADATA => {
            put_i32(out, 0); // throttle
            put_i32(out, w.listed.len() as i32);
            for id in &w.listed {
                put_i32(out, *id);
                put_str(out, "127.0.0.1");
                put_i32(out, i32::from(w.ports[id]));
                put_i16(out, -1); // rack
            }
            put_str(out, "scripted");
            put_i32(out, w.listed.first().copied().unwrap_or(-1));
            put_i32(out, s.topics.len() as i32);
            let mut answered = 0;
            for name in &s.topics {
                let topic = w.topics.iter().find(|t| &t.name == name);
                let error = code
                    .or(topic.map(|t| t.error))
                    .unwrap_or(3 /* UNKNOWN_TOPIC_OR_PARTITION */);
                answered = answered.max(error);
                put_i16(out, error);
                put_str(out, name);
                put_i8(out, 0); // internal
                let partitions = match topic {
                    Some(t) if error == 0 => t.partitions.clone(),
                    _ => Vec::new(),
                };
                put_i32(out, partitions.len() as i32);
                for (id, leader) in partitions {
                    put_i16(out, if leader < 0 { 5 } else { 0 });
                    put_i32(out, id);
                    put_i32(out, leader);
                    if v >= 7 {
                        put_i32(out, 0); // leader epoch
                    }
                    let replicas: &[i32] = if leader < 0 { &[] } else { &[leader] };
                    for _ in 0..2 {
                        put_i32(out, replicas.len() as i32);
                        for r in replicas {
                            put_i32(out, *r);
                        }
                    }
                    if v >= 5 {
                        put_i32(out, 0); // offline replicas
                    }
                }
                if v >= 8 {
                    put_i32(out, 0); // topic authorized operations
                }
            }
            if v >= 8 {
                put_i32(out, 0); // cluster authorized operations
            }
            answered
        }
        FIND_COORDINATOR => {
            put_i32(out, 0);
            let error = code.unwrap_or(0);
            put_i16(out, error);
            put_i16(out, -1); // message
            let node = if error == 0 { w.coordinator } else { -1 };
            put_i32(out, node);
            put_str(out, if error == 0 { "127.0.0.1" } else { "" });
            put_i32(out, w.ports.get(&node).map_or(-1, |p| i32::from(*p)));
            error
        }
        INIT_PRODUCER_ID => {
            put_i32(out, 0);
            let error = code
                .or_else(|| s.transactional_id.as_ref().and_then(|_| not_coordinator()))
                .unwrap_or(0);
            put_i16(out, error);
            if error == 0 {
                w.epoch += 1;
                put_i64(out, w.producer_id);
                put_i16(out, w.epoch);
            } else {
                put_i64(out, -1);
                put_i16(out, -1);
            }
            error
        }
        ADD_PARTITIONS_TO_TXN => {
            let error = code.or_else(not_coordinator).unwrap_or(0);
            put_i32(out, 0);
            let mut topics: Vec<&str> = Vec::new();
            for (t, _) in &s.partitions {
                if !topics.contains(&t.as_str()) {
                    topics.push(t);
                }
            }
            put_i32(out, topics.len() as i32);
            for t in topics {
                put_str(out, t);
                let of_t: Vec<i32> = s
                    .partitions
                    .iter()
                    .filter(|(pt, _)| pt == t)
                    .map(|p| p.1)
                    .collect();
                put_i32(out, of_t.len() as i32);
                for p in of_t {
                    put_i32(out, p);
                    put_i16(out, error);
                }
            }
            error
        }
        END_TXN => {
            let error = code.or_else(not_coordinator).unwrap_or(0);
            put_i32(out, 0);
            put_i16(out, error);
            error
        }
        PRODUCE => {
            let (topic, partition) = s.partitions[0].clone();
            let error = code
                .or_else(|| (w.leader(&topic, partition) != Some(s.node)).then_some(6))
                .unwrap_or(0);
            put_i32(out, 1);
            put_str(out, &topic);
            put_i32(out, 1);
            put_i32(out, partition);
            put_i16(out, error);
            put_i64(out, if error == 0 { 0 } else { -1 }); // base offset
            put_i64(out, -1); // log append time
            if v >= 5 {
                put_i64(out, 0); // log start offset
            }
            if v >= 8 {
                put_i32(out, 0); // record errors
                put_i16(out, -1); // message
            }
            put_i32(out, 0); // throttle
            error
        }
        api => panic!("API {api} is not served"),
    }
}
