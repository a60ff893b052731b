//! Tests of rescans: files followed through rename rotation, resumed by
//! identity after a restart, started where their checkpoint or
//! `read_from` says, and skipped when compressed.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use crate::checkpoint::{CheckpointFile, Checkpoints};
use crate::identity::FINGERPRINT_BYTES;
use crate::tailer::discover::Walk;
use crate::tailer::test_support::*;
use crate::tailer::{Event, ReadFrom, Start, Tailer};

fn rename_rotation_while_appending(include: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut t = Tailer::new(config(dir.path(), include), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    let mut n = 0;
    let mut events = Vec::new();
    for rotation in 0..6 {
        let mut writer = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .unwrap();
        for burst in 0..4 {
            writer.write_all(numbered(n, n + 50).as_bytes()).unwrap();
            n += 50;
            // Poll at varying points: sometimes mid-file, sometimes not
            // until after the rotation.
            if (rotation + burst) % 3 == 0 {
                events.extend(drain(&mut t, now, &mut sink));
            }
        }
        for k in (1..rotation + 1).rev() {
            let from = dir.path().join(format!("app.log.{k}"));
            if from.exists() {
                fs::rename(&from, dir.path().join(format!("app.log.{}", k + 1))).unwrap();
            }
        }
        fs::rename(&log, dir.path().join("app.log.1")).unwrap();
        // The writer has not reopened yet: it goes on through its old
        // descriptor, into the rotated file.
        writer.write_all(numbered(n, n + 10).as_bytes()).unwrap();
        n += 10;
        if rotation % 2 == 0 {
            events.extend(drain(&mut t, now, &mut sink));
        }
    }
    events.extend(drain(&mut t, now, &mut sink));
    events.extend(drain(&mut t, now, &mut sink));
    assert_exactly_once_in_order(&sink, n);
    // With the glob over rotated names the old file is seen renamed;
    // without, it is seen gone.
    let log_1 = dir.path().join("app.log.1");
    let renamed = Event::Renamed {
        from: log.clone(),
        to: log_1,
    };
    let gone = Event::Gone {
        path: log.clone(),
        deleted: false,
    };
    let expected = if include.contains('*') { renamed } else { gone };
    assert!(events.contains(&expected), "{events:?}");
    assert!(t.counters().rotations >= 6, "{:?}", t.counters());
    assert_eq!(t.counters().lines_read, n as u64);
}

#[test]
fn rename_rotation_while_appending_reads_every_line_once_with_a_glob_over_rotated_names() {
    rename_rotation_while_appending("app.log*");
}

#[test]
fn rename_rotation_while_appending_reads_every_line_once_through_the_open_descriptor() {
    rename_rotation_while_appending("app.log");
}

#[test]
fn a_new_tailer_resumes_at_the_acknowledged_offset() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = CheckpointFile::new(state.path(), "app").unwrap();
    let log = dir.path().join("app.log");
    append(&log, numbered(0, 10).as_bytes());
    let mut t = Tailer::new(config(dir.path(), "*.log"), store.load().unwrap()).unwrap();
    let mut first = Collect::default();
    drain(&mut t, Instant::now(), &mut first);
    assert_eq!(first.0.len(), 10);
    // Only six lines were delivered before the agent stopped.
    for g in &first.0[..6] {
        t.ack(g.key, g.end);
    }
    store.save(&t.checkpoints()).unwrap();
    drop(t);

    append(&log, numbered(10, 15).as_bytes());
    let mut t = Tailer::new(config(dir.path(), "*.log"), store.load().unwrap()).unwrap();
    let mut second = Collect::default();
    let events = drain(&mut t, Instant::now(), &mut second);
    assert_eq!(
        events,
        [Event::Opened {
            path: log.clone(),
            offset: first.0[6].start,
            from: Start::Checkpoint
        }]
    );
    let mut delivered = Collect(first.0[..6].to_vec());
    delivered.0.extend(second.0.iter().cloned());
    assert_exactly_once_in_order(&delivered, 15);
    assert_eq!(second.0[0].start, first.0[6].start);
}

#[test]
fn files_rotated_while_no_tailer_runs_are_found_by_identity_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let rotated = |k: usize| dir.path().join(format!("app.log.{k}"));
    append(&log, numbered(0, 10).as_bytes());
    let mut t = Tailer::new(config(dir.path(), "app.log*"), None).unwrap();
    let mut first = Collect::default();
    drain(&mut t, Instant::now(), &mut first);
    for g in &first.0[..4] {
        t.ack(g.key, g.end);
    }
    assert_eq!(t.bytes_behind(), 6 * "line 0\n".len() as u64);
    let saved = t.checkpoints();
    drop(t);

    // Three rotations while down; the first file gets more lines before
    // its first rotation, each new file some of its own.
    append(&log, numbered(10, 12).as_bytes());
    let mut n = 12;
    for _ in 0..3 {
        for k in (1..3).rev() {
            if rotated(k).exists() {
                fs::rename(rotated(k), rotated(k + 1)).unwrap();
            }
        }
        fs::rename(&log, rotated(1)).unwrap();
        append(&log, numbered(n, n + 5).as_bytes());
        n += 5;
    }

    let mut t = Tailer::new(config(dir.path(), "app.log*"), Some(saved)).unwrap();
    let mut second = Collect::default();
    drain(&mut t, Instant::now(), &mut second);
    let mut delivered = Collect(first.0[..4].to_vec());
    delivered.0.extend(second.0.iter().cloned());
    assert_exactly_once_in_order(&delivered, n);
    let resumed = second.0.iter().find(|g| g.text == "line 4").unwrap();
    assert_eq!(resumed.path, rotated(3));
    assert_eq!(resumed.start, first.0[4].start);
    ack_all(&mut t, &second);
    assert_eq!(t.bytes_behind(), 0);
}

#[test]
fn a_file_cut_below_its_checkpoint_while_no_tailer_runs_is_read_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, numbered(0, 300).as_bytes());
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    ack_all(&mut t, &sink);
    let saved = t.checkpoints();
    drop(t);
    // Cut to a size past the fingerprint but below the checkpoint: the
    // head still matches, the size does not.
    let size = fs::metadata(&log).unwrap().len();
    let cut = "line 0\n".len() as u64 * 10
        + "line 10\n".len() as u64 * 90
        + "line 100\n".len() as u64 * 100;
    assert!(cut < size && cut > FINGERPRINT_BYTES as u64);
    fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(cut)
        .unwrap();

    let mut t = Tailer::new(config(dir.path(), "*.log"), Some(saved)).unwrap();
    let mut sink = Collect::default();
    let events = drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(
        events,
        [Event::Opened {
            path: log.clone(),
            offset: 0,
            from: Start::Truncated
        }]
    );
    assert_exactly_once_in_order(&sink, 200);
    assert_eq!(t.counters().truncations, 1);
}

#[test]
fn files_shorter_than_the_fingerprint_with_identical_heads_resume_each_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    append(&a, b"same banner\n");
    append(&b, b"same banner\n");
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    ack_all(&mut t, &sink);
    let saved = t.checkpoints();
    assert!(saved.files.iter().all(|f| f.identity.head.len == 12));
    drop(t);

    // Both grow past the fingerprint's size while nothing runs.
    let long = "y".repeat(2000);
    append(&a, format!("a {long}\n").as_bytes());
    append(&b, b"b two\n");
    let mut t = Tailer::new(config(dir.path(), "*.log"), Some(saved)).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    let mut got: Vec<(String, &str)> = sink
        .0
        .iter()
        .map(|g| {
            (
                g.path.file_name().unwrap().to_string_lossy().into_owned(),
                &g.text[..5],
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [("a.log".to_owned(), "a yyy"), ("b.log".to_owned(), "b two")]
    );
    // The fingerprint grew with the file.
    let a_cp = t
        .checkpoints()
        .files
        .into_iter()
        .find(|f| f.path.ends_with("a.log"))
        .unwrap();
    assert_eq!(a_cp.identity.head.len as usize, FINGERPRINT_BYTES);
}

#[test]
fn read_from_end_skips_what_files_hold_at_the_first_start_only() {
    let dir = tempfile::tempdir().unwrap();
    append(&dir.path().join("old.log"), b"before start\n");
    let mut cfg = config(dir.path(), "*.log");
    cfg.read_from = ReadFrom::End;
    let mut t = Tailer::new(cfg.clone(), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    assert!(sink.0.is_empty());
    append(&dir.path().join("old.log"), b"after start\n");
    append(&dir.path().join("new.log"), b"new file\n");
    drain(&mut t, Instant::now(), &mut sink);
    let mut texts = sink.texts();
    texts.sort();
    assert_eq!(texts, ["after start", "new file"]);

    // With checkpoints, a file they do not know was created while the
    // agent was down: read from its beginning.
    append(&dir.path().join("later.log"), b"while down\n");
    let mut t = Tailer::new(cfg, Some(Checkpoints::default())).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    let mut texts = sink.texts();
    texts.sort();
    assert_eq!(
        texts,
        ["after start", "before start", "new file", "while down"]
    );
}

#[test]
fn read_from_end_reads_a_line_being_written_at_the_start_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, b"before start\nbeing wri");
    let mut cfg = config(dir.path(), "*.log");
    cfg.read_from = ReadFrom::End;
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    let events = drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(
        events,
        [Event::Opened {
            path: log.clone(),
            offset: 13,
            from: Start::End
        }]
    );
    append(&log, b"tten\n");
    drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(sink.texts(), ["being written"]);
}

#[test]
fn a_new_file_at_a_reused_inode_is_read_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, b"the first file's first line\n");
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    ack_all(&mut t, &sink);
    let saved = t.checkpoints();
    let old_ino = fs::metadata(&log).unwrap().ino();

    // Deleted, read and closed, then a new file takes the path.
    fs::remove_file(&log).unwrap();
    let now = Instant::now();
    drain(&mut t, now, &mut sink);
    let later = now + Duration::from_secs(5);
    t.poll(later, &mut sink);
    assert_eq!(t.counters().files_watched, 0);
    append(&log, b"a second file, longer than the first one was\n");
    let reused = fs::metadata(&log).unwrap().ino() == old_ino;
    drain(&mut t, later, &mut sink);
    assert_eq!(
        sink.texts().last(),
        Some(&"a second file, longer than the first one was")
    );
    assert_eq!(sink.0.last().unwrap().start, 0);

    // A tailer resuming from the first file's checkpoint does not
    // resume the second file in its middle.
    let mut t = Tailer::new(config(dir.path(), "*.log"), Some(saved)).unwrap();
    let mut sink = Collect::default();
    let events = drain(&mut t, later, &mut sink);
    assert_eq!(
        sink.texts(),
        ["a second file, longer than the first one was"]
    );
    if reused {
        assert_eq!(events[0], Event::Reused { path: log.clone() });
    }
    // ext4 hands the freed inode to the next file at once, so on an ext4
    // /tmp this is the reuse case, and a resume at the first file's
    // offset would have started mid-line. Filesystems that do not reuse
    // at once (tmpfs) still check that the new file is read whole; the
    // rule itself is checked on constructed identities in `identity`.
    eprintln!("inode reused: {reused}");
}

#[test]
fn gzip_compressed_files_are_skipped_once_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    append(&dir.path().join("app.log"), b"plain line\n");
    // What logrotate's `compress` leaves: an older generation, gzipped.
    let gz = dir.path().join("app.log.2.gz");
    fs::write(&gz, gzip(b"an old line\n")).unwrap();
    let mut t = Tailer::new(config(dir.path(), "app.log*"), None).unwrap();
    let mut sink = Collect::default();
    let events = drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(sink.texts(), ["plain line"]);
    assert!(
        events.contains(&Event::Skipped { path: gz.clone() }),
        "{events:?}"
    );
    assert_eq!(t.counters().files_skipped, 1);
    assert_eq!(t.counters().files_watched, 1);
    // Later rescans neither open it again nor report it again.
    let events = drain(&mut t, Instant::now(), &mut sink);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(t.counters().files_skipped, 1);
    assert_eq!(t.checkpoints().files.len(), 1);
}

#[test]
fn a_gone_file_found_again_after_it_was_closed_resumes_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    append(&log, b"one\ntwo\n");
    let cfg = config(dir.path(), "*.log");
    let mut t = Tailer::new(cfg.clone(), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    drain(&mut t, now, &mut sink);
    ack_all(&mut t, &sink);
    // Out of the globs (as a rescan that missed it would see it),
    // quiet, acknowledged: closed.
    let away = dir.path().join("a.away");
    fs::rename(&log, &away).unwrap();
    drain(&mut t, now, &mut sink);
    let events = drain(&mut t, now + cfg.rotate_wait, &mut sink);
    assert!(
        events.contains(&Event::Closed { path: log.clone() }),
        "{events:?}"
    );
    assert_eq!(t.counters().files_watched, 0);
    // Back under the globs, grown: only the new line is read.
    fs::rename(&away, &log).unwrap();
    append(&log, b"three\n");
    drain(&mut t, now + cfg.rotate_wait, &mut sink);
    assert_eq!(sink.texts(), ["one", "two", "three"]);
}

#[test]
fn a_file_a_walk_meets_twice_under_renames_is_opened_once() {
    // A walk stats `a.log.1` while it is still another file, and by the
    // time it is opened a rotation has moved `a.log` there; the walk
    // then meets the moved file again at its new name. Both paths lead
    // to one inode: it must be read once.
    let dir = tempfile::tempdir().unwrap();
    let moved = dir.path().join("a.log.1");
    append(&moved, b"one\ntwo\n");
    let other = dir.path().join("elsewhere");
    append(&other, b"x\n");
    let mut t = Tailer::new(config(dir.path(), "a.log*"), None).unwrap();
    let now = Instant::now();
    let found = vec![
        (moved.clone(), fs::metadata(&other).unwrap()),
        (moved.clone(), fs::metadata(&moved).unwrap()),
    ];
    let walk = Walk {
        found,
        known: Vec::new(),
        others: HashMap::new(),
    };
    let report = t.take(walk, Vec::new(), now);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(t.counters().files_watched, 1);
    let mut sink = Collect::default();
    while t.poll(now, &mut sink).more {}
    assert_eq!(sink.texts(), ["one", "two"]);
}
