//! Tests of the read path: partial and overlong lines, one buffer per
//! file and poll, truncations, and gzip files skipped or read.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::checkpoint::CheckpointFile;
use crate::identity::Fingerprint;
use crate::tailer::test_support::*;
use crate::tailer::{Event, Gzip, Tailer, TailerConfig};

#[test]
fn a_partial_line_is_sent_once_completed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    append(&log, b"first\nhalf a ");
    drain(&mut t, now, &mut sink);
    assert_eq!(sink.texts(), ["first"]);
    // Not rotated: it waits however long it stays quiet.
    t.poll(now + Duration::from_secs(3600), &mut sink);
    assert_eq!(sink.texts(), ["first"]);
    append(&log, b"line\r\n");
    drain(&mut t, now, &mut sink);
    assert_eq!(sink.texts(), ["first", "half a line"]);
    assert_eq!((sink.0[1].start, sink.0[1].end), (6, 19));
}

#[test]
fn a_line_over_max_line_bytes_is_cut_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut cfg = config(dir.path(), "*.log");
    cfg.max_line_bytes = 10;
    cfg.read_buffer_bytes = 16; // the long line spans several reads
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    append(&log, format!("{}\nshort\n", "x".repeat(100)).as_bytes());
    drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(sink.texts(), ["x".repeat(10).as_str(), "short"]);
    assert_eq!(sink.0[0].cut, 90);
    assert_eq!(sink.0[1].start, 101);
    assert_eq!(t.counters().lines_truncated, 1);
}

#[test]
fn one_poll_reads_at_most_one_buffer_per_file_and_says_there_is_more() {
    let dir = tempfile::tempdir().unwrap();
    append(&dir.path().join("a.log"), numbered(0, 20).as_bytes());
    append(&dir.path().join("b.log"), numbered(20, 22).as_bytes());
    let mut cfg = config(dir.path(), "*.log");
    cfg.read_buffer_bytes = 100;
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    t.rescan(now);
    let first = t.poll(now, &mut sink);
    assert_eq!(first.bytes, 100 + 2 * "line 2x\n".len() as u64);
    assert!(first.more);
    // a.log holds 10 lines of 7 bytes and 10 of 8: 150 bytes, so the
    // second poll reads its last 50 and there is no more.
    let second = t.poll(now, &mut sink);
    assert_eq!((second.bytes, second.more), (50, false));
    assert_exactly_once_in_order(&sink, 22);
    assert_eq!(t.counters().bytes_read, 150 + 16);
}

#[test]
fn copytruncate_reads_the_lines_after_the_truncation_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut cfg = config(dir.path(), "app.log*");
    cfg.exclude = vec!["*.1".into()];
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    append(&log, numbered(0, 10).as_bytes());
    drain(&mut t, now, &mut sink);
    // logrotate's copytruncate, writes paused during the copy.
    fs::copy(&log, dir.path().join("app.log.1")).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&log, numbered(10, 13).as_bytes());
    drain(&mut t, now, &mut sink);
    assert_exactly_once_in_order(&sink, 13);
    assert_eq!(t.counters().truncations, 1);
    assert_eq!(sink.0.last().unwrap().start, 2 * "line 1x\n".len() as u64);
    assert_eq!(
        t.counters().files_watched,
        1,
        "the excluded copy is not read"
    );
}

#[test]
fn truncation_then_growth_past_the_old_offset_is_read_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    append(&log, numbered(0, 10).as_bytes());
    drain(&mut t, now, &mut sink);
    ack_all(&mut t, &sink);
    let old_key = sink.0[0].key;
    fs::write(&log, numbered(10, 40)).unwrap();
    let events = drain(&mut t, now, &mut sink);
    assert_eq!(events, [Event::Truncated { path: log.clone() }]);
    assert_exactly_once_in_order(&sink, 40);
    assert_eq!(t.counters().truncations, 1);
    assert_eq!(sink.0[10].start, 0);
    assert_ne!(sink.0[10].key, old_key, "a truncated file gets a new key");
    // Acknowledging a line read before the truncation changes nothing.
    t.ack(old_key, sink.0[9].end);
    assert_eq!(t.checkpoints().files[0].offset, 0);
}

#[test]
fn an_empty_file_that_later_grows_is_read_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    fs::write(&log, b"").unwrap();
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    let saved = t.checkpoints();
    assert_eq!(saved.files.len(), 1);
    assert_eq!(saved.files[0].identity.head, Fingerprint::EMPTY);

    // It grows while the tailer runs...
    append(&log, numbered(0, 3).as_bytes());
    drain(&mut t, Instant::now(), &mut sink);
    assert_exactly_once_in_order(&sink, 3);

    // ...and a tailer resuming from the empty checkpoint reads it whole.
    let mut t = Tailer::new(config(dir.path(), "*.log"), Some(saved)).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    assert_exactly_once_in_order(&sink, 3);
    assert_eq!(t.counters().truncations, 0);
}

#[test]
fn a_file_found_empty_that_gzip_then_fills_is_skipped_unread() {
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("app.log.1.gz");
    fs::write(&gz, b"").unwrap();
    let mut t = Tailer::new(config(dir.path(), "app.log*"), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(t.counters().files_watched, 1);
    fs::write(&gz, gzip(&numbered(0, 100).into_bytes())).unwrap();
    let events = drain(&mut t, Instant::now(), &mut sink);
    assert!(sink.0.is_empty(), "no garbage lines: {:?}", sink.texts());
    assert!(events.contains(&Event::Skipped { path: gz }), "{events:?}");
    assert_eq!(t.counters().files_watched, 0);
    assert_eq!(t.counters().files_skipped, 1);
    drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(t.counters().files_skipped, 1);
}

fn gzip_config(dir: &Path) -> TailerConfig {
    let mut cfg = config(dir, "*.gz");
    cfg.gzip = Gzip::Read;
    cfg.read_buffer_bytes = 1000;
    cfg
}

#[test]
fn a_gzip_file_is_read_whole_when_asked_and_resumed_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = CheckpointFile::new(state.path(), "app").unwrap();
    let mut text = numbered(0, 500);
    text.push_str("no newline at the end");
    fs::write(dir.path().join("old.log.gz"), gzip(text.as_bytes())).unwrap();
    let cfg = gzip_config(dir.path());
    let mut t = Tailer::new(cfg.clone(), None).unwrap();
    let mut sink = Collect::default();
    let t0 = Instant::now();
    drain(&mut t, t0, &mut sink);
    assert_eq!(sink.0.len(), 500);
    assert_exactly_once_in_order(&sink, 500);
    assert!(t.bytes_behind() > 0, "nothing acknowledged yet");
    // Acknowledge the first 200 lines, restart: the rest, once.
    for g in &sink.0[..200] {
        t.ack(g.key, g.end);
    }
    store.save(&t.checkpoints()).unwrap();
    let resumed_at = sink.0[199].end;
    assert_eq!(store.load().unwrap().unwrap().files[0].offset, resumed_at);
    let mut t = Tailer::new(cfg.clone(), store.load().unwrap()).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, t0, &mut sink);
    assert_eq!(sink.0.len(), 300);
    assert_eq!(sink.0[0].text, "line 200");
    assert_eq!(sink.0[0].start, resumed_at);
    // Read to its end, the last line is handed back once quiet.
    t.poll(t0 + cfg.rotate_wait, &mut sink);
    assert_eq!(sink.texts().last(), Some(&"no newline at the end"));
    ack_all(&mut t, &sink);
    assert_eq!(t.bytes_behind(), 0);
    assert_eq!(t.counters().files_skipped, 0);
    // Nothing more, however often it is polled.
    let before = sink.0.len();
    drain(&mut t, t0 + cfg.rotate_wait * 2, &mut sink);
    assert_eq!(sink.0.len(), before);
}

#[test]
fn a_file_found_empty_that_gzip_then_fills_is_read_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("app.log.1.gz");
    fs::write(&gz, b"").unwrap();
    let mut t = Tailer::new(gzip_config(dir.path()), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    fs::write(&gz, gzip(numbered(0, 100).as_bytes())).unwrap();
    drain(&mut t, Instant::now(), &mut sink);
    assert_exactly_once_in_order(&sink, 100);
    assert_eq!(t.counters().files_skipped, 0);
}

#[test]
fn a_gzip_file_read_while_gzip_writes_it_gives_every_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log.1.gz");
    let full = gzip(numbered(0, 3000).as_bytes());
    let mut t = Tailer::new(gzip_config(dir.path()), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    // gzip writes its output in pieces; the tailer reads in between.
    let mut f = fs::File::create(&path).unwrap();
    for piece in full.chunks(full.len() / 7 + 1) {
        f.write_all(piece).unwrap();
        drain(&mut t, now, &mut sink);
    }
    drain(&mut t, now, &mut sink);
    assert_exactly_once_in_order(&sink, 3000);
    ack_all(&mut t, &sink);
    assert_eq!(t.bytes_behind(), 0);
}
