//! Tests of checkpoints and positions: where a new tailer resumes, and
//! positions taken up from a sink.

use std::time::Instant;

use crate::tailer::test_support::*;
use crate::Tailer;

#[test]
fn positions_name_the_end_of_the_last_line_read_and_resume_there() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut t = Tailer::new(config(dir.path(), "app.log"), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    append(&log, b"one\ntwo\nthr");
    drain(&mut t, now, &mut sink);
    assert_eq!(sink.texts(), ["one", "two"]);
    // Nothing acknowledged: the checkpoint stays at 0, the position is
    // after "two\n", not after the waiting partial line.
    assert_eq!(t.checkpoints().files[0].offset, 0);
    let positions = t.positions();
    assert_eq!(positions.files[0].offset, 8);
    // A tailer resumed from the positions reads the rest once.
    append(&log, b"ee\n");
    let mut resumed = Tailer::new(config(dir.path(), "app.log"), Some(positions)).unwrap();
    let mut rest = Collect::default();
    drain(&mut resumed, now, &mut rest);
    assert_eq!(rest.texts(), ["three"]);
}

#[test]
fn advance_moves_a_file_forward_to_a_later_checkpoint_only() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, numbered(0, 10).as_bytes());
    // Taken after 4 lines: where a sink's stored offsets would be.
    let mut first = Tailer::new(config(dir.path(), "app.log"), None).unwrap();
    let now = Instant::now();
    first.rescan(now);
    let mut ahead = first.positions();
    ahead.files[0].offset = 4 * 7;
    let mut behind = ahead.clone();
    behind.files[0].offset = 7;
    // Another file at another inode is not touched.
    let mut stranger = ahead.clone();
    stranger.files[0].identity.id.ino += 1_000_000;

    // Not read yet: reading skips to the offset.
    let mut t = Tailer::new(config(dir.path(), "app.log"), None).unwrap();
    t.rescan(now);
    assert!(t.advance(&stranger).is_empty());
    let floors = t.advance(&ahead);
    assert_eq!(floors.len(), 1);
    assert_eq!(floors[0].1, 28);
    assert!(t.advance(&behind).is_empty());
    let mut sink = Collect::default();
    drain(&mut t, now, &mut sink);
    assert_eq!(
        sink.texts(),
        (4..10).map(|n| format!("line {n}")).collect::<Vec<_>>()
    );
    assert_eq!(t.checkpoints().files[0].offset, 28);

    // Read already: the lines below the offset are the caller's to
    // drop, reading goes on where it was.
    let mut t = Tailer::new(config(dir.path(), "app.log"), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, now, &mut sink);
    assert_eq!(sink.0.len(), 10);
    let floors = t.advance(&ahead);
    assert_eq!(floors, [(sink.0[0].key, 28)]);
    assert_eq!(t.checkpoints().files[0].offset, 28);
    append(&log, b"line 10\n");
    let mut more = Collect::default();
    drain(&mut t, now, &mut more);
    assert_eq!(more.texts(), ["line 10"]);
}

#[test]
fn a_tailer_stopped_before_its_first_rescan_keeps_the_checkpoints_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    append(&dir.path().join("app.log"), numbered(0, 4).as_bytes());
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut first = Collect::default();
    drain(&mut t, Instant::now(), &mut first);
    t.ack(first.0[1].key, first.0[1].end);
    let saved = t.checkpoints();

    let unscanned = Tailer::new(config(dir.path(), "*.log"), Some(saved.clone())).unwrap();
    assert_eq!(unscanned.checkpoints(), saved);

    let mut t = Tailer::new(config(dir.path(), "*.log"), Some(unscanned.checkpoints())).unwrap();
    let mut second = Collect::default();
    drain(&mut t, Instant::now(), &mut second);
    assert_eq!(second.texts(), ["line 2", "line 3"]);
}
