//! The blackhole sink's log side: it acknowledges every batch as it
//! arrives and counts its records, for benchmarks and for trying a source
//! out. (Its metric side is [`crate::sink::Discard`].)

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::sink::SinkStats;
use sonde_log_sources::LogBatch;

/// Starts a blackhole for log batches: send them to the returned sender.
/// The thread exits once every sender is dropped.
///
/// # Errors
///
/// The thread could not be spawned.
pub fn spawn(stats: Arc<SinkStats>) -> io::Result<(Sender<Arc<LogBatch>>, JoinHandle<()>)> {
    let (tx, rx) = channel::<Arc<LogBatch>>();
    let thread = std::thread::Builder::new()
        .name(format!("sink {} logs", stats.name))
        .spawn(move || {
            for batch in rx {
                stats.batches.fetch_add(1, Relaxed);
                stats.records.fetch_add(batch.len() as u64, Relaxed);
                stats.bytes_raw.fetch_add(batch.bytes() as u64, Relaxed);
                batch.ack();
            }
        })?;
    Ok((tx, thread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_batch_is_acknowledged_and_counted() {
        let stats = Arc::new(SinkStats::new("null".into()));
        let (tx, thread) = spawn(Arc::clone(&stats)).unwrap();
        let (done_tx, done_rx) = channel();
        let info = sonde_log_sources::SourceInfo {
            name: "app".into(),
            host: "h".into(),
            fields: Vec::new(),
        };
        for seq in 0..3 {
            let lines: &[(&str, u64, &[u8])] = &[("/a.log", 0, b"one"), ("/a.log", 4, b"two")];
            tx.send(Arc::new(LogBatch::for_test(
                info.clone(),
                seq,
                lines,
                1,
                done_tx.clone(),
            )))
            .unwrap();
        }
        drop(tx);
        thread.join().unwrap();
        let acked: Vec<u64> = done_rx.try_iter().collect();
        assert_eq!(acked, [0, 1, 2]);
        assert_eq!(stats.records.load(Relaxed), 6);
        assert_eq!(stats.bytes_raw.load(Relaxed), 18);
    }
}
