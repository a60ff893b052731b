//! Tests of what becomes of a file: deleted or rotated files read to
//! their end, their last line handed back once quiet, then closed.

use std::fs;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::tailer::test_support::*;
use crate::tailer::{Event, Tailer};

#[test]
fn a_file_deleted_while_open_is_read_to_its_end_then_closed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut cfg = config(dir.path(), "*.log");
    cfg.read_buffer_bytes = 64;
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    append(&log, numbered(0, 5).as_bytes());
    drain(&mut t, now, &mut sink);
    append(&log, numbered(5, 100).as_bytes());
    fs::remove_file(&log).unwrap();
    let events = drain(&mut t, now, &mut sink);
    assert_eq!(
        events,
        [Event::Gone {
            path: log.clone(),
            deleted: true
        }]
    );
    assert_exactly_once_in_order(&sink, 100);
    assert_eq!(t.counters().rotations, 0, "a deletion is no rotation");
    // Kept open while lines are unacknowledged, even when quiet.
    let later = now + Duration::from_secs(5);
    t.poll(later, &mut sink);
    assert_eq!(t.counters().files_watched, 1);
    ack_all(&mut t, &sink);
    t.poll(now + Duration::from_secs(1), &mut sink);
    assert_eq!(
        t.counters().files_watched,
        1,
        "not quiet for rotate_wait yet"
    );
    let report = t.poll(later, &mut sink);
    assert_eq!(report.events, [Event::Closed { path: log.clone() }]);
    assert_eq!(t.counters().files_watched, 0);
    assert!(t.checkpoints().files.is_empty());
}

#[test]
fn a_rotated_files_last_line_is_sent_as_is_after_rotate_wait() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut t = Tailer::new(config(dir.path(), "app.log"), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    append(&log, b"whole\nno newline");
    drain(&mut t, now, &mut sink);
    fs::rename(&log, dir.path().join("app.log.1")).unwrap();
    let events = drain(&mut t, now, &mut sink);
    assert_eq!(
        events,
        [Event::Gone {
            path: log.clone(),
            deleted: false
        }]
    );
    assert_eq!(sink.texts(), ["whole"]);
    assert_eq!(t.counters().rotations, 1);
    t.poll(now + Duration::from_secs(5), &mut sink);
    assert_eq!(sink.texts(), ["whole", "no newline"]);
    assert_eq!(sink.0[1].end, 16);
    ack_all(&mut t, &sink);
    t.poll(now + Duration::from_secs(5), &mut sink);
    assert_eq!(
        t.counters().files_watched,
        0,
        "renamed out of the glob, read and quiet: closed"
    );
}

#[test]
fn a_file_first_seen_rotated_keeps_its_unfinished_line_until_it_rotates_again() {
    // Written and renamed before any scan: the tailer cannot tell it
    // from a live file whose writer is in the middle of a line.
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("app.log.1");
    append(&first, b"whole\nno newline");
    append(&dir.path().join("app.log"), b"live\n");
    let mut t = Tailer::new(config(dir.path(), "app.log*"), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    drain(&mut t, now, &mut sink);
    ack_all(&mut t, &sink);
    let hour = now + Duration::from_secs(3600);
    drain(&mut t, hour, &mut sink);
    let mut texts = sink.texts();
    texts.sort();
    assert_eq!(texts, ["live", "whole"], "it waits for its newline");

    // The next rotation (or its deletion) says its writer is gone.
    for (k, gone) in [(2, false), (3, true)] {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("app.log.1");
        append(&first, b"whole\nno newline");
        let mut t = Tailer::new(config(dir.path(), "app.log*"), None).unwrap();
        let mut sink = Collect::default();
        drain(&mut t, now, &mut sink);
        ack_all(&mut t, &sink);
        if gone {
            fs::remove_file(&first).unwrap();
        } else {
            fs::rename(&first, dir.path().join(format!("app.log.{k}"))).unwrap();
        }
        drain(&mut t, hour, &mut sink);
        assert_eq!(sink.texts(), ["whole"], "quiet for rotate_wait first");
        t.poll(hour + Duration::from_secs(5), &mut sink);
        assert_eq!(sink.texts(), ["whole", "no newline"], "deleted: {gone}");
    }
}

#[test]
fn rotate_wait_counts_from_the_rotation_not_from_the_last_write() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut writer = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log)
        .unwrap();
    writer.write_all(b"before\n").unwrap();
    let mut t = Tailer::new(config(dir.path(), "app.log"), None).unwrap();
    let mut sink = Collect::default();
    let start = Instant::now();
    drain(&mut t, start, &mut sink);
    ack_all(&mut t, &sink);

    // Quiet for an hour, then rotated; the writer has not reopened yet.
    let later = start + Duration::from_secs(3600);
    fs::rename(&log, dir.path().join("app.log.1")).unwrap();
    drain(&mut t, later, &mut sink);
    assert_eq!(t.counters().files_watched, 1, "just rotated: kept open");
    writer.write_all(b"after the rename\n").unwrap();
    drain(&mut t, later + Duration::from_secs(1), &mut sink);
    assert_eq!(sink.texts(), ["before", "after the rename"]);
    ack_all(&mut t, &sink);
    t.poll(later + Duration::from_secs(6), &mut sink);
    assert_eq!(t.counters().files_watched, 0);
}
