//! Log source benchmarks: splitting a read buffer into ~150-byte lines
//! (next to `memchr_iter` finding the same newlines, the ceiling), and
//! a tailer reading a file from the page cache into a sink that touches
//! every line, with and without multiline joining; and the same messages
//! as container log files (CRI, docker json-file), per record.
//!
//! Run: `cargo bench -p sonde-logs --bench tail`

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sonde_logs::container::Format;
use sonde_logs::lines::Splitter;
use sonde_logs::multiline::{Multiline, Preset, Rule};
use sonde_logs::{Line, LineSink, Origin, Tailer, TailerConfig};

/// `bytes` of lines of about 150 bytes, like an access log.
fn log_text(bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 200);
    let mut n = 0u64;
    while out.len() < bytes {
        writeln!(
            out,
            "2026-11-25T10:55:03.{:06}Z INFO request done method=GET path=/api/v1/items/{n} status=200 bytes={} took_ms={}",
            n % 1_000_000,
            n * 7 % 100_000,
            n % 997
        )
        .unwrap();
        n += 1;
    }
    out
}

struct Touch(u64);

impl LineSink for Touch {
    fn line(&mut self, _origin: &Origin<'_>, line: &Line<'_>) {
        self.0 += line.bytes.len() as u64 + line.end;
    }
}

fn split(c: &mut Criterion) {
    let text = log_text(256 * 1024);
    let mut group = c.benchmark_group("lines");
    group.throughput(Throughput::Bytes(text.len() as u64));
    // The baseline: finding every newline and nothing else.
    group.bench_function("memchr_iter_256k", |b| {
        b.iter(|| black_box(memchr::memchr_iter(b'\n', black_box(&text)).count()))
    });
    group.bench_function("split_256k", |b| {
        let mut splitter = Splitter::new(0, 1024 * 1024);
        b.iter(|| {
            let mut sum = 0u64;
            splitter.push(black_box(&text), |l| sum += l.bytes.len() as u64);
            black_box(sum)
        })
    });
    group.finish();
}

/// A new tailer reads the file with `config` to its end; the last poll,
/// a second later, hands on a multiline record waiting for its timeout.
fn read_all(config: &TailerConfig) -> u64 {
    let mut tailer = Tailer::new(config.clone(), None).unwrap();
    let now = Instant::now();
    tailer.rescan(now);
    let mut sink = Touch(0);
    while tailer.poll(now, &mut sink).more {}
    tailer.poll(now + Duration::from_secs(1), &mut sink);
    sink.0
}

fn tail(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let text = log_text(64 * 1024 * 1024);
    std::fs::write(dir.path().join("app.log"), &text).unwrap();
    let config = TailerConfig::new(vec![format!("{}/*.log", dir.path().display())]);
    let mut group = c.benchmark_group("tailer");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(10);
    group.bench_function("read_64m", |b| b.iter(|| black_box(read_all(&config))));
    // The same file with multiline rules that make every line a record:
    // the most joining work per byte (each line is tested, and kept until
    // the next line shows it ended).
    for (name, rule) in [
        (
            "read_64m_multiline_start",
            Rule::Start(r"^\d{4}-\d{2}-\d{2}".into()),
        ),
        ("read_64m_multiline_java", Rule::Preset(Preset::Java)),
    ] {
        let mut config = config.clone();
        config.multiline = Some(Multiline::new(rule));
        group.bench_function(name, |b| b.iter(|| black_box(read_all(&config))));
    }
    group.finish();
}

/// `text`'s lines as a container runtime writes them: each a CRI `F` line
/// or a docker json-file object, on stdout, one in eight on stderr; with
/// `long`, every line is also cut into three pieces, as a line of
/// 3 x 16 KiB would be.
fn container_text(text: &[u8], format: Format, long: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() * 2);
    for (n, line) in text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let stream = if n % 8 == 7 { "stderr" } else { "stdout" };
        let time = format!("2026-11-25T10:55:03.{:09}Z", n % 1_000_000_000);
        let third = line.len() / 3;
        let pieces: Vec<&[u8]> = if long {
            vec![&line[..third], &line[third..2 * third], &line[2 * third..]]
        } else {
            vec![line]
        };
        for (i, piece) in pieces.iter().enumerate() {
            let last = i + 1 == pieces.len();
            let piece = std::str::from_utf8(piece).unwrap();
            match format {
                Format::Cri => {
                    let tag = if last { "F" } else { "P" };
                    writeln!(out, "{time} {stream} {tag} {piece}").unwrap();
                }
                _ => {
                    let nl = if last { "\\n" } else { "" };
                    writeln!(
                        out,
                        r#"{{"log":"{piece}{nl}","stream":"{stream}","time":"{time}"}}"#
                    )
                    .unwrap();
                }
            }
        }
    }
    out
}

/// Records per second: the same 16 MiB of messages as plain lines, as
/// CRI and docker json-file lines, and cut into partial pieces.
fn container(c: &mut Criterion) {
    let text = log_text(16 * 1024 * 1024);
    let records = text.iter().filter(|&&b| b == b'\n').count() as u64;
    let mut group = c.benchmark_group("container");
    group.throughput(Throughput::Elements(records));
    group.sample_size(10);
    let cases = [
        ("lines", Format::Lines, false),
        ("cri", Format::Cri, false),
        ("cri_3_pieces", Format::Cri, true),
        ("docker_json", Format::DockerJson, false),
        ("docker_json_3_pieces", Format::DockerJson, true),
    ];
    for (name, format, long) in cases {
        let dir = tempfile::tempdir().unwrap();
        let file = match format {
            Format::Lines => text.clone(),
            _ => container_text(&text, format, long),
        };
        std::fs::write(dir.path().join("0.log"), &file).unwrap();
        let mut config = TailerConfig::new(vec![format!("{}/*.log", dir.path().display())]);
        config.format = format;
        group.bench_function(name, |b| b.iter(|| black_box(read_all(&config))));
    }
    group.finish();
}

criterion_group!(benches, split, tail, container);
criterion_main!(benches);
