//! Writes under `agent.data_dir` that failed: counted per writer on
//! `/metrics` (`sonde_data_dir_write_errors_total{what}`) and logged with
//! the path and a fix, at most once a minute per writer, so that a full
//! or read-only disk is said clearly without filling the log.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// What under `data_dir` failed to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// A sink's disk buffer (`buffers/`): records, acknowledgements,
    /// segment files.
    Buffer,
    /// A log source's checkpoints (`checkpoints/`).
    Checkpoint,
    /// The profile store (`profiles/`).
    Profile,
    // The Kafka sink's exactly-once positions have no writer here: they
    // are committed to Kafka with the lines (sonde-sinks, kafka/exactly_once.rs),
    // and the checkpoint file is only a floor under them.
}

impl What {
    /// Every writer, in label order.
    pub const ALL: [What; 3] = [What::Buffer, What::Checkpoint, What::Profile];

    /// The `what` label.
    pub fn as_str(self) -> &'static str {
        match self {
            What::Buffer => "buffer",
            What::Checkpoint => "checkpoint",
            What::Profile => "profile",
        }
    }
}

/// How often one writer's failures are logged.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// The failed writes under `data_dir`, per [`What`].
#[derive(Debug)]
pub struct DataDirErrors {
    errors: [AtomicU64; What::ALL.len()],
    /// Milliseconds after `origin` of each writer's last log line, plus
    /// one (zero: never).
    logged: [AtomicU64; What::ALL.len()],
    origin: Instant,
}

impl Default for DataDirErrors {
    fn default() -> Self {
        DataDirErrors {
            errors: Default::default(),
            logged: Default::default(),
            origin: Instant::now(),
        }
    }
}

/// What to do about `error`, for the log line.
fn fix(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            "free space on agent.data_dir's file system (or give it more); sonde goes on by itself once there is room"
        }
        Some(libc::EROFS) => {
            "agent.data_dir's file system is read-only: remount it read-write; sonde goes on by itself"
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            "give the agent's user write permission on agent.data_dir; sonde goes on by itself"
        }
        Some(libc::ENOENT) => "agent.data_dir or a directory in it was removed; sonde makes it again",
        _ => "check agent.data_dir's file system (dmesg may say more)",
    }
}

impl DataDirErrors {
    /// Counts a failed write of `what` at `path`, and logs it unless this
    /// writer's last line is less than [`LOG_EVERY`] old.
    pub fn failed(&self, what: What, path: &Path, error: &io::Error) {
        let i = what as usize;
        let total = self.errors[i].fetch_add(1, Relaxed) + 1;
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        let last = self.logged[i].load(Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= LOG_EVERY.as_millis() as u64;
        if due
            && self.logged[i]
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            tracing::warn!(
                what = what.as_str(),
                path = %path.display(),
                %error,
                failures = total,
                fix = fix(error),
                "cannot write under agent.data_dir (said at most once a minute; sonde_data_dir_write_errors_total counts each)"
            );
        }
    }

    /// Failed writes of `what` so far.
    pub fn count(&self, what: What) -> u64 {
        self.errors[what as usize].load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_is_counted_and_each_writer_has_its_own_count() {
        let e = DataDirErrors::default();
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        for _ in 0..3 {
            e.failed(
                What::Buffer,
                Path::new("/var/lib/sonde/buffers/x/ack"),
                &full,
            );
        }
        e.failed(
            What::Checkpoint,
            Path::new("/var/lib/sonde/checkpoints/app"),
            &full,
        );
        assert_eq!(e.count(What::Buffer), 3);
        assert_eq!(e.count(What::Checkpoint), 1);
        assert_eq!(e.count(What::Profile), 0);
        assert!(fix(&full).contains("free space"));
        assert!(fix(&io::Error::from_raw_os_error(libc::EROFS)).contains("read-only"));
    }
}
