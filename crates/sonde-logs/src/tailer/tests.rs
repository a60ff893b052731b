//! The whole tailer against a model: whatever the interleaving of writes,
//! rotations, rescans, polls, acknowledgements and restarts, every line is
//! delivered once; and which files a poll reads.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::test_support::*;
use super::{Tailer, TailerConfig};
use crate::checkpoint::{CheckpointFile, FileCheckpoint};
use crate::identity::FileId;

#[derive(Debug, Clone)]
enum Op {
    /// Appends lines through the writer's descriptor; with `half`, the
    /// last of them only up to its middle (completed by the next write).
    Write {
        lines: usize,
        half: bool,
    },
    /// Renames app.log.k to app.log.k+1 and app.log to app.log.1.
    Rotate,
    /// The writer finishes its line and reopens app.log (after a
    /// rotation, a new file).
    Reopen,
    Rescan,
    /// [`Tailer::rescan_quick`].
    RescanQuick,
    Poll,
    /// Marks the paths written since the last such poll, as inotify
    /// names them, and polls those ([`Tailer::poll_written`]).
    PollWritten,
    /// Acknowledges a share of the lines read and not yet acknowledged.
    Ack {
        percent: usize,
    },
    /// The writer reopens, then `rotate_wait` passes.
    Wait,
    /// Acknowledges a share of the lines not yet acknowledged, saves the
    /// checkpoints, and starts a new tailer from them.
    Restart {
        acked_percent: usize,
    },
}

fn op(restarts: bool) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..20, any::<bool>()).prop_map(|(lines, half)| Op::Write { lines, half }),
        1 => Just(Op::Rotate),
        1 => Just(Op::Reopen),
        1 => Just(Op::Rescan),
        1 => Just(Op::RescanQuick),
        3 => Just(Op::Poll),
        3 => Just(Op::PollWritten),
        1 => (0usize..=100).prop_map(|percent| Op::Ack { percent }),
        1 => Just(Op::Wait),
        u32::from(restarts) => (0usize..=100).prop_map(|acked_percent| Op::Restart { acked_percent }),
    ]
}

/// Runs `ops` against a writer and a tailer over `include`, and checks
/// that every line written is acknowledged exactly once in the end.
/// With `scan_before_rotate`, a rescan precedes every rotation, as
/// inotify would, so that a glob that does not cover rotated names still
/// sees every file before it is renamed away.
fn run_model(
    ops: Vec<Op>,
    include: &str,
    scan_before_rotate: bool,
    close_idle: Duration,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = CheckpointFile::new(state.path(), "app").unwrap();
    let log = dir.path().join("app.log");
    let mut cfg = config(dir.path(), include);
    cfg.read_buffer_bytes = 64;
    cfg.close_idle = close_idle;
    let mut now = Instant::now();
    // Which name the writer's file has now (0: app.log, k: app.log.k),
    // and the names written since the last PollWritten.
    let mut writer_at = 0;
    let mut written: Vec<PathBuf> = Vec::new();
    // The tailer's layout and checkpoints when the layout last changed.
    let mut layout_seen: Option<(u64, HashMap<FileId, FileCheckpoint>)> = None;
    let mut writer = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log)
        .unwrap();
    let mut t = Tailer::new(cfg.clone(), None).unwrap();
    let (mut n, mut rotations) = (0, 0);
    let mut half_written: Option<String> = None;
    let mut pending = Collect::default();
    let mut delivered: Vec<usize> = Vec::new();
    let ack =
        |t: &mut Tailer, pending: &mut Collect, delivered: &mut Vec<usize>, percent: usize| {
            let acked = pending.0.len() * percent / 100;
            for g in pending.0.drain(..acked) {
                t.ack(g.key, g.end);
                delivered.push(g.text.strip_prefix("line ").unwrap().parse().unwrap());
            }
        };
    let reopen = |writer: &mut File, half_written: &mut Option<String>| {
        // A writer finishes its line before it reopens.
        if let Some(rest) = half_written.take() {
            writer.write_all(rest.as_bytes()).unwrap();
        }
        *writer = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .unwrap();
    };
    for op in ops {
        match op {
            Op::Write { lines, half } => {
                if let Some(rest) = half_written.take() {
                    writer.write_all(rest.as_bytes()).unwrap();
                }
                let mut text = numbered(n, n + lines);
                n += lines;
                if half {
                    let last = format!("line {}\n", n - 1);
                    let cut = text.len() - last.len() / 2;
                    half_written = Some(text.split_off(cut));
                }
                writer.write_all(text.as_bytes()).unwrap();
                written.push(match writer_at {
                    0 => log.clone(),
                    k => dir.path().join(format!("app.log.{k}")),
                });
            }
            // Nothing to rotate until the writer has reopened.
            Op::Rotate if dir.path().join("app.log").exists() => {
                if scan_before_rotate {
                    prop_assert!(t.rescan(now).errors.is_empty());
                }
                for k in (1..=rotations).rev() {
                    let from = dir.path().join(format!("app.log.{k}"));
                    let to = dir.path().join(format!("app.log.{}", k + 1));
                    fs::rename(&from, to).unwrap();
                }
                fs::rename(dir.path().join("app.log"), dir.path().join("app.log.1")).unwrap();
                rotations += 1;
                writer_at += 1;
            }
            Op::Rotate => {}
            Op::Reopen => {
                reopen(&mut writer, &mut half_written);
                writer_at = 0;
            }
            Op::Rescan => prop_assert!(t.rescan(now).errors.is_empty()),
            Op::RescanQuick => prop_assert!(t.rescan_quick(now).errors.is_empty()),
            Op::Poll => prop_assert!(t.poll(now, &mut pending).errors.is_empty()),
            Op::PollWritten => {
                t.mark_written(written.iter().map(PathBuf::as_path));
                written.clear();
                prop_assert!(t.poll_written(now, &mut pending).errors.is_empty());
            }
            Op::Ack { percent } => ack(&mut t, &mut pending, &mut delivered, percent),
            Op::Wait => {
                reopen(&mut writer, &mut half_written);
                writer_at = 0;
                now += cfg.rotate_wait;
            }
            Op::Restart { acked_percent } => {
                ack(&mut t, &mut pending, &mut delivered, acked_percent);
                store.save(&t.checkpoints()).unwrap();
                pending = Collect::default();
                t = Tailer::new(cfg.clone(), store.load().unwrap()).unwrap();
                layout_seen = None;
            }
        }
        // While the layout stays, the open files' checkpoints are all
        // that changed (what the source's saves rely on).
        let by_id = |c: Vec<FileCheckpoint>| -> HashMap<FileId, FileCheckpoint> {
            c.into_iter().map(|c| (c.identity.id, c)).collect()
        };
        match &mut layout_seen {
            Some((layout, seen)) if *layout == t.layout() => {
                seen.extend(by_id(t.open_checkpoints()));
                prop_assert_eq!(&*seen, &by_id(t.checkpoints().files));
            }
            _ => layout_seen = Some((t.layout(), by_id(t.checkpoints().files))),
        }
    }
    reopen(&mut writer, &mut half_written);
    drain(&mut t, now, &mut pending);
    drain(&mut t, now, &mut pending);
    ack(&mut t, &mut pending, &mut delivered, 100);
    delivered.sort_unstable();
    prop_assert_eq!(delivered, (0..n).collect::<Vec<_>>());
    prop_assert_eq!(t.bytes_behind(), 0);
    // Once quiet, every file that is gone from the globs is closed.
    t.rescan(now);
    t.poll(now + cfg.rotate_wait, &mut pending);
    prop_assert!(pending.0.is_empty());
    let open_paths = t.checkpoints().files.len();
    let matching = fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| t.globs.matches(&e.as_ref().unwrap().path()))
        .count();
    prop_assert_eq!(open_paths, matching);
    Ok(())
}

/// With `idle`, files are closed as soon as they are read and
/// acknowledged, so that every later write finds them idle.
fn close_idle(idle: bool) -> Duration {
    if idle {
        Duration::ZERO
    } else {
        TailerConfig::new(Vec::new()).close_idle
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the interleaving of writes, rename rotations, scans,
    /// reads, acknowledgements, waits and restarts, every line written
    /// is acknowledged exactly once in the end.
    #[test]
    fn every_line_is_delivered_once_through_rotations_and_restarts(
        ops in proptest::collection::vec(op(true), 1..40),
        idle in any::<bool>(),
    ) {
        run_model(ops, "app.log*", false, close_idle(idle))?;
    }

    /// The same, with a glob that does not cover rotated names: rotated
    /// files are read to their end through their open descriptors, then
    /// closed. (No restarts: a restarted tailer cannot find them.)
    #[test]
    fn every_line_is_delivered_once_through_descriptors_of_rotated_files(
        ops in proptest::collection::vec(op(false), 1..40),
        idle in any::<bool>(),
    ) {
        run_model(ops, "app.log", true, close_idle(idle))?;
    }
}

#[test]
fn poll_written_reads_the_files_marked_written_and_those_with_a_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    append(&a, b"a0\n");
    append(&b, b"b0\n");
    let mut cfg = config(dir.path(), "*.log");
    cfg.read_buffer_bytes = 8;
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    drain(&mut t, now, &mut sink);
    assert_eq!(sink.texts(), ["a0", "b0"]);
    append(&a, b"a1\na2\na3\na4\n");
    append(&b, b"b1\n");
    // Only a.log was reported written: b.log is not looked at.
    t.mark_written([a.as_path(), dir.path().join("other").as_path()]);
    let report = t.poll_written(now, &mut sink);
    assert!(report.more, "a.log has more than one buffer");
    assert_eq!(sink.texts()[2..], ["a1", "a2"]);
    // Its backlog is read on without another mark; b.log still waits.
    while t.poll_written(now, &mut sink).more {}
    assert_eq!(sink.texts()[2..], ["a1", "a2", "a3", "a4"]);
    // A full poll (a rescan's) reads everything.
    t.poll(now, &mut sink);
    assert_eq!(sink.texts().last(), Some(&"b1"));
    // Marks survive a rescan that changed the files' order.
    fs::remove_file(&a).unwrap();
    drain(&mut t, now, &mut sink);
    append(&b, b"b2\n");
    t.mark_written([b.as_path()]);
    t.poll_written(now, &mut sink);
    assert_eq!(sink.texts().last(), Some(&"b2"));
}
