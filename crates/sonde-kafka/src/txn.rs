//! A transactional producer: record batches to a few topics, committed
//! or aborted together.
//!
//! [`Transactional::init`] finds the transaction coordinator of the
//! `transactional.id` and takes a producer id and epoch from it, which
//! fences an older producer with the same id and aborts a transaction it
//! left open; sequences start again at 0. A transaction begins with
//! [`Transactional::add_partitions`], takes batches with
//! [`Transactional::produce`] (each waits for its response: one request
//! in flight) and ends with [`Transactional::commit`] or
//! [`Transactional::abort`].
//!
//! Calls retry what may heal (a connection failure, a coordinator or a
//! leader moving, `CONCURRENT_TRANSACTIONS` while the previous
//! transaction completes) with a short backoff for up to the retry time
//! given at creation, resending the same bytes (the same sequence, so a
//! batch the broker had written is not written twice); other errors are
//! returned, after which the caller aborts or calls `init` again and
//! produces the transaction's batches again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::batch::{next_sequence, BatchBuilder, Compressor, Producer};
use crate::client::{begin_produce, producer_refused, retriable, too_large};
use crate::client::{Connection, Dial, Error, DUPLICATE_SEQUENCE};
use crate::cluster::Cluster;

/// Backoff between retries: from this, doubling, up to 1 s.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);

/// Why [`Transactional::produce`] did not deliver a batch.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// The batch is larger than the topic takes: send its records in
    /// smaller batches.
    #[error("record batch too large for the topic")]
    TooLarge,
    /// The broker refused the batch for good (the code); the transaction
    /// may go on without it.
    #[error("kafka refused the batch: {}", crate::client::code_name(*.0))]
    Refused(i16),
    /// The transaction cannot go on: abort it (or `init` again) and send
    /// its batches again.
    #[error(transparent)]
    Failed(#[from] Error),
}

/// A transactional producer. See the module docs.
#[derive(Debug)]
pub struct Transactional {
    id: String,
    transaction_timeout_ms: i32,
    retry_for: Duration,
    cluster: Cluster,
    coordinator: Option<Connection>,
    producer: Option<(i64, i16)>,
    sequences: HashMap<(String, i32), i32>,
    /// Partitions added to the open transaction; `None` when none is open.
    open: Option<Vec<(String, i32)>>,
    request: Vec<u8>,
}

impl Transactional {
    /// A producer for `topics` through `bootstrap`, with
    /// `transactional_id`; the broker aborts a transaction left open
    /// longer than `transaction_timeout`; each call retries what may heal
    /// for up to `retry_for`; connections are opened as `dial` says.
    /// Nothing is connected before [`Transactional::init`].
    pub fn new(
        bootstrap: &[String],
        topics: &[&str],
        transactional_id: &str,
        transaction_timeout: Duration,
        retry_for: Duration,
        dial: Dial,
    ) -> Self {
        Transactional {
            id: transactional_id.to_string(),
            transaction_timeout_ms: i32::try_from(transaction_timeout.as_millis())
                .unwrap_or(i32::MAX),
            retry_for,
            cluster: Cluster::new(bootstrap, topics, dial),
            coordinator: None,
            producer: None,
            sequences: HashMap::new(),
            open: None,
            request: Vec::new(),
        }
    }

    /// The cluster: the topics' partitions and leaders.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Time spent waiting for brokers that throttled, since the last call.
    pub fn take_throttled(&mut self) -> Duration {
        self.cluster.take_throttled()
    }

    /// Reads the metadata again once it is `max_age` old.
    pub fn set_metadata_max_age(&mut self, max_age: Duration) {
        self.cluster.set_max_age(max_age);
    }

    /// True while a transaction is open.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Reads the metadata, finds the coordinator and takes a new producer
    /// id and epoch (fencing an older producer with the same id and
    /// aborting what it left open); sequences start at 0 and no
    /// transaction is open.
    ///
    /// # Errors
    ///
    /// What did not heal within the retry time.
    pub fn init(&mut self) -> Result<(), Error> {
        self.open = None;
        self.producer = None;
        self.sequences.clear();
        self.retry(|t| t.cluster.refresh())?;
        let (id, timeout) = (self.id.clone(), self.transaction_timeout_ms);
        let ids = self.retry(|t| t.coordinator()?.init_producer_id(Some(&id), timeout))?;
        self.producer = Some(ids);
        Ok(())
    }

    /// Begins a transaction if none is open, and adds `partitions` to it
    /// (those not added yet).
    ///
    /// # Errors
    ///
    /// No producer id ([`Transactional::init`] first), or what did not
    /// heal within the retry time.
    pub fn add_partitions(&mut self, partitions: &[(&str, i32)]) -> Result<(), Error> {
        let producer = self.producer()?;
        let open = self.open.get_or_insert_with(Vec::new);
        let new: Vec<(String, i32)> = partitions
            .iter()
            .filter(|(t, p)| !open.iter().any(|(ot, op)| ot == t && op == p))
            .map(|(t, p)| (t.to_string(), *p))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let id = self.id.clone();
        self.retry(|t| {
            let list: Vec<(&str, i32)> = new.iter().map(|(t, p)| (t.as_str(), *p)).collect();
            t.coordinator()?.add_partitions_to_txn(&id, producer, &list)
        })?;
        self.open.get_or_insert_with(Vec::new).extend(new);
        Ok(())
    }

    /// Sends the records of `builder` as one batch to `topic`/`partition`
    /// (added to the transaction first) and waits for the answer.
    ///
    /// # Errors
    ///
    /// See [`ProduceError`]. The builder is emptied either way.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        builder: &mut BatchBuilder,
        compressor: &mut Compressor,
    ) -> Result<(), ProduceError> {
        let (id, epoch) = self.producer()?;
        let key = (topic.to_string(), partition);
        let sequence = self.sequences.get(&key).copied().unwrap_or(0);
        let records = builder.len();
        let producer = Producer {
            id,
            epoch,
            base_sequence: sequence,
        };
        let frame = begin_produce(
            &mut self.request,
            self.cluster.client_id(),
            Some(&self.id),
            -1,
            i32::MAX,
            topic,
            partition,
        );
        if let Err(e) = builder.finish(compressor, producer, &mut self.request) {
            builder.clear();
            return Err(ProduceError::Failed(Error::Io(e)));
        }
        // A retry sends the same bytes again, to the leader of the moment.
        let deadline = Instant::now() + self.retry_for;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let last = Instant::now() >= deadline;
            match self
                .cluster
                .produce(topic, partition, &mut self.request, frame)
            {
                Ok(0 | DUPLICATE_SEQUENCE) => {
                    self.sequences.insert(key, next_sequence(sequence, records));
                    return Ok(());
                }
                Ok(code) if too_large(code) => return Err(ProduceError::TooLarge),
                // A batch that is not written leaves the sequence where it
                // was; a refusal of the producer itself ends the
                // transaction.
                Ok(code) if producer_refused(code) || (retriable(code) && last) => {
                    return Err(ProduceError::Failed(Error::Broker {
                        api: "Produce",
                        code,
                    }));
                }
                Ok(code) if !retriable(code) => return Err(ProduceError::Refused(code)),
                Ok(_) => self.cluster.mark_stale(),
                Err(e) if last => return Err(ProduceError::Failed(e)),
                Err(_) => {}
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Commits the open transaction.
    ///
    /// # Errors
    ///
    /// What did not heal within the retry time: the transaction's outcome
    /// is then unknown to this producer; `init` aborts it if it is still
    /// open.
    pub fn commit(&mut self) -> Result<(), Error> {
        self.end(true)
    }

    /// Aborts the open transaction.
    ///
    /// # Errors
    ///
    /// As [`Transactional::commit`].
    pub fn abort(&mut self) -> Result<(), Error> {
        self.end(false)
    }

    fn end(&mut self, commit: bool) -> Result<(), Error> {
        match &self.open {
            None => return Ok(()),
            // No partition was added (the first add failed): the
            // coordinator has no transaction to end, and would answer
            // `INVALID_TXN_STATE`.
            Some(added) if added.is_empty() => {
                self.open = None;
                return Ok(());
            }
            Some(_) => {}
        }
        let producer = self.producer()?;
        let id = self.id.clone();
        self.retry(|t| t.coordinator()?.end_txn(&id, producer, commit))?;
        self.open = None;
        Ok(())
    }

    fn producer(&self) -> Result<(i64, i16), Error> {
        self.producer.ok_or_else(|| {
            Error::Io(std::io::Error::other(
                "no producer id: the transactional producer is not initialised",
            ))
        })
    }

    /// The coordinator's connection, found and opened if needed.
    fn coordinator(&mut self) -> Result<&mut Connection, Error> {
        if self.coordinator.is_none() {
            if self.cluster.is_stale() {
                self.cluster.refresh()?;
            }
            let leader = self
                .cluster
                .partitions()
                .iter()
                .find_map(|p| p.leader)
                .ok_or(Error::Broker {
                    api: "Metadata",
                    code: 5,
                })?;
            let id = self.id.clone();
            let (_, addr) = self.cluster.connection(leader)?.find_coordinator(&id)?;
            // The coordinator's calls wait for the transaction log:
            // 10 s each whatever the produce requests' timeout.
            let mut dial = self.cluster.dial().clone();
            dial.timeout = Duration::from_secs(10);
            let c = Connection::connect(&addr, &dial)?;
            self.coordinator = Some(c);
        }
        Ok(self.coordinator.as_mut().expect("opened above"))
    }

    /// Calls `f` until it succeeds, fails for good or the retry time
    /// passed, forgetting the coordinator after a failure that may mean it
    /// moved.
    fn retry<T>(&mut self, mut f: impl FnMut(&mut Self) -> Result<T, Error>) -> Result<T, Error> {
        let deadline = Instant::now() + self.retry_for;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let e = match f(self) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let heals = match &e {
                Error::Io(_) | Error::Malformed(_) => {
                    self.coordinator = None;
                    self.cluster.mark_stale();
                    true
                }
                Error::Broker { code, .. } => {
                    if matches!(code, 14..=16) {
                        self.coordinator = None;
                    }
                    retriable(*code)
                }
                // A certificate or a secret does not heal by waiting.
                Error::Unsupported { .. } | Error::Tls { .. } | Error::Auth { .. } => {
                    self.coordinator = None;
                    self.cluster.mark_stale();
                    false
                }
            };
            if !heals || Instant::now() >= deadline {
                return Err(e);
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}
