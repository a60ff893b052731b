//! What a producer knows of the cluster for its topics: the brokers, the
//! topics' partitions and their leaders, and one connection per broker,
//! opened when first needed and dropped when it fails.
//!
//! The metadata is asked of any broker already connected, else of the
//! bootstrap addresses in turn; it is refreshed when the producer marks
//! it stale (a leader moved, a connection failed).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::client::{Connection, Dial, Error};

/// One partition of the topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Its index.
    pub id: i32,
    /// The node id of its leader, `None` while it has none.
    pub leader: Option<i32>,
}

/// The cluster as a producer of a few topics sees it.
#[derive(Debug)]
pub struct Cluster {
    bootstrap: Vec<String>,
    /// The topics; the first is the main one ([`Cluster::partitions`]).
    topics: Vec<String>,
    dial: Dial,
    /// Node id to `host:port`.
    brokers: HashMap<i32, String>,
    /// Per topic, in the order of `topics`.
    partitions: Vec<Vec<Partition>>,
    connections: HashMap<i32, Connection>,
    stale: bool,
    /// When the metadata was last read.
    refreshed_at: Option<Instant>,
    /// How old the metadata may grow before it is read again, so that
    /// partitions added and leaders moved are seen without an error.
    max_age: Duration,
    /// Time [`Cluster::produce`] waited for brokers that throttled.
    throttled: Duration,
}

/// How old the metadata may grow by default: Kafka's own clients'
/// `metadata.max.age.ms`.
pub const METADATA_MAX_AGE: Duration = Duration::from_secs(300);

impl Cluster {
    /// A cluster reached through `bootstrap` (`host:port` each), for
    /// `topics` (at least one), each connection opened as `dial` says;
    /// nothing is connected until [`Cluster::refresh`].
    pub fn new(bootstrap: &[String], topics: &[&str], dial: Dial) -> Self {
        Cluster {
            bootstrap: bootstrap.to_vec(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            dial,
            brokers: HashMap::new(),
            partitions: Vec::new(),
            connections: HashMap::new(),
            stale: true,
            refreshed_at: None,
            max_age: METADATA_MAX_AGE,
            throttled: Duration::ZERO,
        }
    }

    /// Reads the metadata again once it is `max_age` old.
    pub fn set_max_age(&mut self, max_age: Duration) {
        self.max_age = max_age;
    }

    /// Time [`Cluster::produce`] waited for throttling brokers since the
    /// last call.
    pub fn take_throttled(&mut self) -> Duration {
        std::mem::take(&mut self.throttled)
    }

    /// The client id its connections give.
    pub fn client_id(&self) -> &str {
        &self.dial.client_id
    }

    /// How its connections are opened.
    pub fn dial(&self) -> &Dial {
        &self.dial
    }

    /// The main topic.
    pub fn topic(&self) -> &str {
        &self.topics[0]
    }

    /// The main topic's partitions, by index, as the last refresh found
    /// them.
    pub fn partitions(&self) -> &[Partition] {
        self.partitions.first().map_or(&[], Vec::as_slice)
    }

    /// The leader of the main topic's `partition`, if it has one.
    pub fn leader(&self, partition: i32) -> Option<i32> {
        self.leader_of(&self.topics[0], partition)
    }

    /// The leader of `topic`'s `partition`, if it has one.
    pub fn leader_of(&self, topic: &str, partition: i32) -> Option<i32> {
        let i = self.topics.iter().position(|t| t == topic)?;
        self.partitions
            .get(i)?
            .iter()
            .find(|p| p.id == partition)
            .and_then(|p| p.leader)
    }

    /// True when the metadata should be asked again before the next send:
    /// marked stale, or older than its maximum age.
    pub fn is_stale(&self) -> bool {
        self.stale
            || self
                .refreshed_at
                .is_none_or(|at| at.elapsed() >= self.max_age)
    }

    /// True when the metadata was marked stale (a leader moved, a
    /// connection failed), not merely old.
    pub fn is_marked_stale(&self) -> bool {
        self.stale
    }

    /// Marks the metadata stale: a leader moved or a broker failed.
    pub fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// Asks the metadata of the topics (creating them where the broker
    /// creates topics on first use), from a connected broker or else the
    /// bootstrap addresses.
    ///
    /// # Errors
    ///
    /// No broker answered (the last error), or the topic has an error
    /// (`UNKNOWN_TOPIC_OR_PARTITION` while it is being created, an
    /// authorisation failure).
    pub fn refresh(&mut self) -> Result<(), Error> {
        let mut last = None;
        let connected: Vec<i32> = self.connections.keys().copied().collect();
        for node in connected {
            let c = self.connections.get_mut(&node).expect("listed above");
            if c.in_flight() > 0 {
                continue;
            }
            let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
            match c.metadata(&topics, true) {
                Ok(m) => return self.take(m),
                Err(e) => {
                    self.connections.remove(&node);
                    last = Some(e);
                }
            }
        }
        let topics: Vec<String> = self.topics.clone();
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        for addr in self.bootstrap.clone() {
            let result =
                Connection::connect(&addr, &self.dial).and_then(|mut c| c.metadata(&topics, true));
            match result {
                Ok(m) => return self.take(m),
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .unwrap_or_else(|| Error::Io(std::io::Error::other("no bootstrap broker configured"))))
    }

    /// The cluster's brokers (node ids, in the order the metadata lists
    /// them), asked of the bootstrap addresses without naming a topic, so
    /// that none is created; [`Cluster::connection`] then reaches each.
    ///
    /// # Errors
    ///
    /// No bootstrap broker answered (the last error).
    pub fn bootstrap_brokers(&mut self) -> Result<Vec<i32>, Error> {
        let mut last = None;
        for addr in self.bootstrap.clone() {
            match Connection::connect(&addr, &self.dial).and_then(|mut c| c.metadata(&[], false)) {
                Ok(m) => {
                    self.brokers = m
                        .brokers
                        .iter()
                        .map(|b| (b.id, format!("{}:{}", b.host, b.port)))
                        .collect();
                    return Ok(m.brokers.iter().map(|b| b.id).collect());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .unwrap_or_else(|| Error::Io(std::io::Error::other("no bootstrap broker configured"))))
    }

    fn take(&mut self, m: crate::client::Metadata) -> Result<(), Error> {
        self.brokers = m
            .brokers
            .iter()
            .map(|b| (b.id, format!("{}:{}", b.host, b.port)))
            .collect();
        // A broker that left, or moved, is connected again when needed.
        let brokers = &self.brokers;
        self.connections.retain(|id, _| brokers.contains_key(id));
        let mut all = Vec::with_capacity(self.topics.len());
        for name in &self.topics {
            let t = m
                .topics
                .iter()
                .find(|t| &t.name == name)
                .ok_or(crate::wire::Malformed("a topic missing from metadata"))?;
            if t.error != 0 {
                return Err(Error::Broker {
                    api: "Metadata",
                    code: t.error,
                });
            }
            let mut partitions: Vec<Partition> = t
                .partitions
                .iter()
                .map(|p| Partition {
                    id: p.id,
                    leader: (p.leader >= 0 && self.brokers.contains_key(&p.leader))
                        .then_some(p.leader),
                })
                .collect();
            partitions.sort_by_key(|p| p.id);
            all.push(partitions);
        }
        self.stale = all.iter().any(Vec::is_empty);
        self.partitions = all;
        self.refreshed_at = Some(Instant::now());
        Ok(())
    }

    /// A producer id and epoch for an idempotent producer, from any
    /// broker of the cluster.
    ///
    /// # Errors
    ///
    /// No broker answered, or the one that did refused.
    pub fn init_producer_id(&mut self) -> Result<(i64, i16), Error> {
        let nodes: Vec<i32> = self.brokers.keys().copied().collect();
        let mut last = None;
        for node in nodes {
            let c = match self.connection(node) {
                Ok(c) if c.in_flight() == 0 => c,
                Ok(_) => continue,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            match c.init_producer_id(None, i32::MAX) {
                Ok(ids) => return Ok(ids),
                Err(e @ Error::Broker { .. }) => return Err(e),
                Err(e) => {
                    self.connections.remove(&node);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::Io(std::io::Error::other("no broker to ask for a producer id"))
        }))
    }

    /// The connection to broker `node`, connecting if needed.
    ///
    /// # Errors
    ///
    /// The broker is unknown or cannot be reached.
    pub fn connection(&mut self, node: i32) -> Result<&mut Connection, Error> {
        if !self.connections.contains_key(&node) {
            let addr = self.brokers.get(&node).ok_or_else(|| {
                Error::Io(std::io::Error::other(format!(
                    "broker {node} is not in the metadata"
                )))
            })?;
            let c = Connection::connect(addr, &self.dial)?;
            self.connections.insert(node, c);
        }
        Ok(self.connections.get_mut(&node).expect("inserted above"))
    }

    /// Sends the produce request `request` (begun by `frame`, for
    /// `topic`'s `partition`) to the partition's leader as the metadata
    /// says now (asked again first when stale) and waits for its answer:
    /// the partition's error code, or the connection's error (the
    /// connection is then closed and the metadata marked stale). Only
    /// with nothing else in flight on that connection.
    ///
    /// # Errors
    ///
    /// No leader (`LEADER_NOT_AVAILABLE`), or the connection failed.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        request: &mut [u8],
        frame: crate::client::ProduceFrame,
    ) -> Result<i16, Error> {
        if self.is_stale() {
            self.refresh()?;
        }
        let node = self.leader_of(topic, partition).ok_or(Error::Broker {
            api: "Metadata",
            code: 5,
        })?;
        let mut waited = Duration::ZERO;
        let sent = self.connection(node).and_then(|c| {
            // A broker that throttled the last answer holds what comes
            // before the time is up: wait here instead.
            if let Some(until) = c.throttled_until() {
                waited = until.saturating_duration_since(Instant::now());
                std::thread::sleep(waited);
            }
            c.send_produce(request, frame)?;
            c.recv_produce()
        });
        self.throttled += waited;
        match sent {
            Ok(r) => Ok(r.first().map_or(0, |p| p.error)),
            Err(e) => {
                self.disconnect(node);
                Err(e)
            }
        }
    }

    /// The connection to `node` if one is open.
    pub fn connected(&mut self, node: i32) -> Option<&mut Connection> {
        self.connections.get_mut(&node)
    }

    /// Closes the connection to `node` (it failed) and marks the metadata
    /// stale.
    pub fn disconnect(&mut self, node: i32) {
        self.connections.remove(&node);
        self.stale = true;
    }
}
