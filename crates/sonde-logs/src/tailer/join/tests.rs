//! Tests of the joined records: multiline records and container log
//! records never split, lost or repeated by reads and restarts, and flushed
//! when due.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::checkpoint::CheckpointFile;
use crate::container::{self, Format};
use crate::lines::Line;
use crate::multiline::Multiline;
use crate::tailer::test_support::*;
use crate::tailer::{BuildError, FileKey, LineSink, Origin, Tailer, TailerConfig};

/// The text of record `n` of the multiline model: a start line and
/// `n % 4` indented continuation lines.
fn record(n: usize) -> String {
    let mut r = format!("S{n}");
    for i in 0..n % 4 {
        r.push_str(&format!("\n  at frame {n}.{i}"));
    }
    r
}

fn multiline_config(dir: &Path) -> TailerConfig {
    let mut cfg = config(dir, "app.log");
    cfg.multiline = Some(Multiline::new(crate::multiline::Rule::Start("^S".into())));
    cfg
}

#[derive(Debug, Clone)]
enum MlOp {
    /// Appends the next bytes of the file, up to `percent` of what is
    /// left of `records` more records: any cut, mid-line included.
    Write {
        records: usize,
        percent: usize,
    },
    Poll,
    Ack {
        percent: usize,
    },
    Restart {
        acked_percent: usize,
    },
}

fn ml_op() -> impl Strategy<Value = MlOp> {
    prop_oneof![
        3 => (1usize..6, 1usize..=100).prop_map(|(records, percent)| MlOp::Write { records, percent }),
        3 => Just(MlOp::Poll),
        1 => (0usize..=100).prop_map(|percent| MlOp::Ack { percent }),
        1 => (0usize..=100).prop_map(|acked_percent| MlOp::Restart { acked_percent }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the cuts between writes, reads, acknowledgements and
    /// restarts, every multiline record is delivered whole, once, in
    /// order; and the position a sink would store is always the start
    /// of a record.
    #[test]
    fn multiline_records_are_never_split_by_reads_or_restarts(
        ops in proptest::collection::vec(ml_op(), 1..40)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let store = CheckpointFile::new(state.path(), "app").unwrap();
        let log = dir.path().join("app.log");
        let mut cfg = multiline_config(dir.path());
        cfg.read_buffer_bytes = 16;
        let text: String = (0..200).map(|n| record(n) + "\n").collect();
        let mut written = 0;
        let now = Instant::now();
        let mut t = Tailer::new(cfg.clone(), None).unwrap();
        t.rescan(now);
        let mut pending = Collect::default();
        let mut delivered: Vec<String> = Vec::new();
        let ack = |t: &mut Tailer, pending: &mut Collect, delivered: &mut Vec<String>, percent: usize| {
            let acked = pending.0.len() * percent / 100;
            for g in pending.0.drain(..acked) {
                t.ack(g.key, g.end);
                delivered.push(g.text);
            }
        };
        for op in ops {
            match op {
                MlOp::Write { records, percent } => {
                    let rest = &text[written..];
                    let span: usize = rest.split_inclusive('\n').take(records * 4).map(str::len).sum();
                    let n = span * percent / 100;
                    append(&log, &rest.as_bytes()[..n]);
                    written += n;
                }
                MlOp::Poll => {
                    t.rescan(now);
                    prop_assert!(t.poll(now, &mut pending).errors.is_empty());
                    if let Some(p) = t.positions().files.first() {
                        let at = p.offset as usize;
                        prop_assert!(at == 0 || (text.as_bytes()[at - 1] == b'\n' && text.as_bytes()[at] == b'S'),
                            "position {} is inside a record", at);
                    }
                }
                MlOp::Ack { percent } => ack(&mut t, &mut pending, &mut delivered, percent),
                MlOp::Restart { acked_percent } => {
                    ack(&mut t, &mut pending, &mut delivered, acked_percent);
                    store.save(&t.checkpoints()).unwrap();
                    pending = Collect::default();
                    t = Tailer::new(cfg.clone(), store.load().unwrap()).unwrap();
                    t.rescan(now);
                }
            }
        }
        // The rest of the records up to the last one begun, then the
        // last record's timeout.
        let end = text[written..].find("\nS").map_or(text.len(), |i| written + i + 1);
        append(&log, &text.as_bytes()[written..end]);
        drain(&mut t, now, &mut pending);
        t.poll(now + Duration::from_secs(1), &mut pending);
        ack(&mut t, &mut pending, &mut delivered, 100);
        let expected: Vec<String> = text[..end].lines().filter(|l| l.starts_with('S'))
            .map(|l| record(l[1..].parse().unwrap())).collect();
        prop_assert_eq!(delivered, expected);
        prop_assert_eq!(t.bytes_behind(), 0);
    }
}

#[test]
fn a_quiet_record_is_flushed_at_its_timeout_and_the_poll_says_when() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut t = Tailer::new(multiline_config(dir.path()), None).unwrap();
    let mut sink = Collect::default();
    let t0 = Instant::now();
    append(&log, b"S1\n  a\n");
    t.rescan(t0);
    let report = t.poll(t0, &mut sink);
    assert!(sink.0.is_empty(), "the record may go on");
    assert_eq!(report.flush_at, Some(t0 + Duration::from_secs(1)));
    assert_eq!(t.positions().files[0].offset, 0);
    // A continuation within the timeout joins; the timeout restarts.
    let t1 = t0 + Duration::from_millis(900);
    append(&log, b"  b\n");
    let report = t.poll(t1, &mut sink);
    assert_eq!(report.flush_at, Some(t1 + Duration::from_secs(1)));
    assert!(t
        .poll(t1 + Duration::from_millis(999), &mut sink)
        .flush_at
        .is_some());
    let report = t.poll(t1 + Duration::from_secs(1), &mut sink);
    assert_eq!(report.flush_at, None);
    assert_eq!(sink.texts(), ["S1\n  a\n  b"]);
    assert_eq!((sink.0[0].start, sink.0[0].end), (0, 11));
    assert_eq!(t.counters().lines_read, 3);
    assert_eq!(t.counters().multiline_records, 1);
    assert_eq!(t.positions().files[0].offset, 11);
}

#[test]
fn a_rotated_files_last_record_is_flushed_once_it_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut cfg = multiline_config(dir.path());
    cfg.include = vec![format!("{}/app.log*", dir.path().display())];
    cfg.multiline.as_mut().unwrap().timeout = Duration::from_secs(3600);
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    let t0 = Instant::now();
    append(&log, b"S1\n  a\nS2\n  b");
    drain(&mut t, t0, &mut sink);
    assert_eq!(sink.texts(), ["S1\n  a"]);
    fs::rename(&log, dir.path().join("app.log.1")).unwrap();
    drain(&mut t, t0, &mut sink);
    t.poll(t0 + Duration::from_secs(5), &mut sink);
    assert_eq!(sink.texts(), ["S1\n  a", "S2\n  b"]);
    ack_all(&mut t, &sink);
    assert_eq!(t.bytes_behind(), 0);
}

#[test]
fn a_truncated_files_record_is_handed_on_before_it_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let mut t = Tailer::new(multiline_config(dir.path()), None).unwrap();
    let mut sink = Collect::default();
    let now = Instant::now();
    append(&log, b"S1\n  a\n");
    drain(&mut t, now, &mut sink);
    fs::write(&log, b"S9\n").unwrap();
    drain(&mut t, now, &mut sink);
    t.poll(now + Duration::from_secs(1), &mut sink);
    assert_eq!(sink.texts(), ["S1\n  a", "S9"]);
    assert_ne!(sink.0[0].key, sink.0[1].key);
}

#[test]
fn a_bad_multiline_pattern_or_a_zero_limit_is_refused() {
    let mut cfg = TailerConfig::new(vec!["/var/log/*.log".into()]);
    cfg.multiline = Some(Multiline::new(crate::multiline::Rule::Start("^(".into())));
    let err = Tailer::new(cfg.clone(), None).err().unwrap();
    assert!(
        matches!(&err, BuildError::Regex { pattern, .. } if pattern == "^("),
        "{err}"
    );
    let mut m = Multiline::new(crate::multiline::Rule::Start("^S".into()));
    m.max_lines = 0;
    cfg.multiline = Some(m);
    let err = Tailer::new(cfg, None).err().unwrap();
    assert!(matches!(
        err,
        BuildError::Zero {
            key: "multiline.max_lines"
        }
    ));
}

/// A container record as a sink gets it.
#[derive(Debug, Clone, PartialEq)]
struct Rec {
    key: FileKey,
    text: String,
    stream: Option<container::Stream>,
    time: String,
    end: u64,
    hold: bool,
}

#[derive(Default)]
struct Records(Vec<Rec>);

impl LineSink for Records {
    fn line(&mut self, _: &Origin<'_>, line: &Line<'_>) {
        panic!("a container source hands on records, not {line:?}");
    }

    fn record(&mut self, origin: &Origin<'_>, r: &container::Record<'_>) {
        self.0.push(Rec {
            key: origin.key,
            text: String::from_utf8(r.line.bytes.to_vec()).unwrap(),
            stream: r.stream,
            time: String::from_utf8(r.time.to_vec()).unwrap(),
            end: r.line.end,
            hold: r.hold,
        });
    }
}

impl Records {
    /// Acknowledges the first `n` records, and the held ones after
    /// them up to the record that frees them, as a batch would; returns
    /// them.
    fn ack(&mut self, t: &mut Tailer, n: usize) -> Vec<Rec> {
        let mut n = n.min(self.0.len());
        while n > 0 && n < self.0.len() && self.0[n - 1].hold {
            n += 1;
        }
        let acked: Vec<Rec> = self.0.drain(..n).collect();
        for r in &acked {
            t.ack(r.key, r.end);
        }
        acked
    }
}

fn cri_config(dir: &Path) -> TailerConfig {
    let mut cfg = config(dir, "0.log*");
    cfg.format = Format::Cri;
    cfg
}

/// A CRI line of `stream`, partial or final.
fn cri_line(stream: &str, partial: bool, message: &str) -> String {
    let tag = if partial { "P" } else { "F" };
    format!("2024-05-06T07:08:09.123456789Z {stream} {tag} {message}\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Two streams' lines, cut into pieces that interleave, written in
    /// any cuts, read through a small buffer, acknowledged a batch at a
    /// time and restarted anywhere: every line is delivered whole,
    /// once, and in its stream's order.
    #[test]
    fn container_records_are_never_lost_split_or_repeated(
        order in proptest::collection::vec(any::<bool>(), 40..120),
        cuts in proptest::collection::vec(1usize..6, 120),
        ops in proptest::collection::vec(ml_op(), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let store = CheckpointFile::new(state.path(), "app").unwrap();
        let log = dir.path().join("0.log");
        let mut cfg = cri_config(dir.path());
        cfg.read_buffer_bytes = 64;
        // Line k of a stream is `<stream>-<k>-` and padding, in `cuts[k]`
        // pieces; pieces go to the file in `order`, each stream's in
        // its own order.
        let mut next = [(0usize, 0usize); 2];
        let mut text = String::new();
        let mut want: [Vec<String>; 2] = Default::default();
        for &err in &order {
            let s = usize::from(err);
            let (k, piece) = &mut next[s];
            let pieces = cuts[*k % cuts.len()];
            let name = ["stdout", "stderr"][s];
            if *piece == 0 {
                want[s].push((0..pieces).map(|p| format!("{name}-{k}-{p}.")).collect());
            }
            let last = *piece + 1 == pieces;
            text.push_str(&cri_line(name, !last, &format!("{name}-{k}-{piece}.")));
            *piece += 1;
            if last {
                *k += 1;
                *piece = 0;
            }
        }
        // Lines left unfinished at the end are not expected.
        for s in 0..2 {
            if next[s].1 > 0 {
                want[s].pop();
            }
        }
        let now = Instant::now();
        let mut t = Tailer::new(cfg.clone(), None).unwrap();
        let mut pending = Records::default();
        let mut delivered: Vec<Rec> = Vec::new();
        let mut written = 0;
        for op in ops {
            match op {
                MlOp::Write { records, percent } => {
                    let n = ((text.len() - written) * percent / 100).min(records * 40);
                    append(&log, &text.as_bytes()[written..written + n]);
                    written += n;
                }
                MlOp::Poll => {
                    t.rescan(now);
                    prop_assert!(t.poll(now, &mut pending).errors.is_empty());
                }
                MlOp::Ack { percent } => {
                    let n = pending.0.len() * percent / 100;
                    delivered.extend(pending.ack(&mut t, n));
                }
                MlOp::Restart { acked_percent } => {
                    let n = pending.0.len() * acked_percent / 100;
                    delivered.extend(pending.ack(&mut t, n));
                    store.save(&t.checkpoints()).unwrap();
                    pending = Records::default();
                    t = Tailer::new(cfg.clone(), store.load().unwrap()).unwrap();
                    t.rescan(now);
                }
            }
        }
        append(&log, &text.as_bytes()[written..]);
        t.rescan(now);
        for _ in 0..1000 {
            if !t.poll(now, &mut pending).more {
                break;
            }
        }
        // The pieces of lines never finished go at the timeout.
        t.poll(now + container::PARTIAL_WAIT, &mut pending);
        let n = pending.0.len();
        delivered.extend(pending.ack(&mut t, n));
        for (s, stream) in [container::Stream::Stdout, container::Stream::Stderr].into_iter().enumerate() {
            let got: Vec<&str> = delivered.iter()
                .filter(|r| r.stream == Some(stream))
                .map(|r| r.text.as_str())
                .collect();
            // Then at most the pieces of the line left unfinished.
            let unfinished = usize::from(next[s].1 > 0);
            prop_assert_eq!(got.len(), want[s].len() + unfinished, "{:?}", got);
            prop_assert_eq!(&got[..want[s].len()], &want[s][..]);
        }
        prop_assert!(delivered.iter().all(|r| r.time == "2024-05-06T07:08:09.123456789Z"));
        prop_assert_eq!(t.bytes_behind(), 0);
    }
}

#[test]
fn an_open_container_record_waits_for_its_next_piece_then_goes_unfinished() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let mut t = Tailer::new(cri_config(dir.path()), None).unwrap();
    let mut sink = Records::default();
    let t0 = Instant::now();
    let first = cri_line("stdout", true, "half ");
    append(
        &log,
        format!("{first}{}", cri_line("stderr", false, "err")).as_bytes(),
    );
    t.rescan(t0);
    let report = t.poll(t0, &mut sink);
    // The stderr line waits behind the open stdout one.
    assert!(sink.0.is_empty());
    assert_eq!(report.flush_at, Some(t0 + container::PARTIAL_WAIT));
    assert_eq!(t.positions().files[0].offset, 0);
    let report = t.poll(t0 + container::PARTIAL_WAIT, &mut sink);
    assert_eq!(report.flush_at, None);
    let got: Vec<(&str, bool)> = sink.0.iter().map(|r| (r.text.as_str(), r.hold)).collect();
    assert_eq!(got, [("half ", false), ("err", false)]);
    assert_eq!(sink.0[0].end, first.len() as u64);
    assert_eq!(t.counters().unfinished_records, 1);
    // Its last piece, late, is a record of its own.
    append(&log, cri_line("stdout", false, "rest").as_bytes());
    t.poll(t0 + container::PARTIAL_WAIT, &mut sink);
    assert_eq!(sink.0[2].text, "rest");
    assert_eq!(
        (t.counters().lines_read, t.counters().joined_records),
        (3, 0)
    );
}

#[test]
fn a_kubelet_rotation_by_rename_and_gzip_reads_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let mut t = Tailer::new(cri_config(dir.path()), None).unwrap();
    let mut sink = Records::default();
    let now = Instant::now();
    append(
        &log,
        format!(
            "{}{}{}",
            cri_line("stdout", true, "a1 "),
            cri_line("stderr", false, "b"),
            cri_line("stdout", false, "a2")
        )
        .as_bytes(),
    );
    t.rescan(now);
    t.poll(now, &mut sink);
    // The kubelet renames 0.log to 0.log.<timestamp>, the runtime
    // reopens 0.log, and the kubelet compresses the rotated file
    // (0.log.<timestamp>.gz) and removes it uncompressed.
    let rotated = dir.path().join("0.log.20240506-070809");
    fs::rename(&log, &rotated).unwrap();
    append(&log, cri_line("stdout", false, "c").as_bytes());
    t.rescan(now);
    t.poll(now, &mut sink);
    let text = fs::read(&rotated).unwrap();
    fs::write(dir.path().join("0.log.20240506-070809.gz"), gzip(&text)).unwrap();
    fs::remove_file(&rotated).unwrap();
    t.rescan(now);
    t.poll(now + Duration::from_secs(10), &mut sink);
    let got: Vec<&str> = sink.0.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(got, ["a1 a2", "b", "c"]);
    assert_eq!(t.counters().files_skipped, 1);
    assert_eq!(t.counters().rotations, 1);
}

#[test]
fn multiline_and_a_container_format_are_refused_together() {
    let mut cfg = TailerConfig::new(vec!["/var/log/pods/*/*/*.log".into()]);
    cfg.format = Format::DockerJson;
    assert!(Tailer::new(cfg.clone(), None).is_ok());
    cfg.multiline = Some(Multiline::new(crate::multiline::Rule::Start("^S".into())));
    assert!(matches!(
        Tailer::new(cfg, None),
        Err(BuildError::MultilineAndFormat)
    ));
}
