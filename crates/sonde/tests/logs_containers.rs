//! Container log files, end to end: the real `sonde` binary reads files
//! written the way the kubelet's runtime (CRI format) and dockerd
//! (json-file) write them, ships them through the Kafka sink to a real
//! broker, and a real consumer checks every record: its message joined
//! whole from its 16 KiB pieces, its time and stream, and its pod and
//! container from the path, once each, across rotation (the kubelet's
//! rename to `0.log.<timestamp>` and gzip; docker's `-json.log.N`) and a
//! restart in the middle of writing. Malformed lines arrive as they were
//! written and are counted.
//!
//! Needs the broker's jars (scripts/install-kafka.sh) and `java`; without
//! them each test says why it is skipped, unless `SONDE_REQUIRE_BACKENDS=1`
//! makes that a failure.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::backends::{Isolation, Kafka, KafkaRecord};
use common::{wait_for, Agent};

/// How long a test waits for every record to arrive.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// Where both runtimes cut a long line.
const PIECE: usize = 16 * 1024;

const POD_UID: &str = "6f1c7a52-9d1e-4b0a-8c43-2f5e7d9a1b30";

/// 64 hex digits, as docker names containers.
fn docker_id() -> String {
    "c0ffee42".repeat(8)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runtime {
    /// The kubelet's CRI files under /var/log/pods.
    Cri,
    /// dockerd's json-file driver under /var/lib/docker/containers.
    Docker,
}

/// One record a consumer must see: its value and its headers besides the
/// path's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Want {
    value: Vec<u8>,
    time: Option<String>,
    stream: Option<&'static str>,
}

/// Writes one container's log file as its runtime does: each line the
/// container writes is cut into pieces of at most 16 KiB, each piece a
/// line of the file stamped with the time it was read; the two streams'
/// pieces interleave; now and then a line that is no line of the format.
struct Container {
    runtime: Runtime,
    dir: PathBuf,
    file: File,
    /// Lines written per stream.
    seq: [u64; 2],
    /// Pieces written: the clock of their times.
    clock: u64,
    /// A deterministic generator of lengths and interleavings.
    rng: u64,
    rotations: u32,
    want: Vec<Want>,
    /// Lines of the file written.
    lines: u64,
    malformed: u64,
    joined: u64,
}

impl Container {
    fn new(root: &Path, runtime: Runtime) -> Container {
        let dir = match runtime {
            Runtime::Cri => root.join(format!("pods/shop_web-0_{POD_UID}/nginx")),
            Runtime::Docker => root.join(format!("containers/{}", docker_id())),
        };
        fs::create_dir_all(&dir).unwrap();
        let file = Container::open(&Container::path_in(&dir, runtime));
        Container {
            runtime,
            dir,
            file,
            seq: [0; 2],
            clock: 0,
            rng: 0x2545_f491_4f6c_dd1d,
            rotations: 0,
            want: Vec::new(),
            lines: 0,
            malformed: 0,
            joined: 0,
        }
    }

    /// The glob a source reads the runtime's files with.
    fn include(root: &Path, runtime: Runtime) -> String {
        match runtime {
            // The DaemonSet's: rotated files too, so that a rotation while
            // the agent is down loses nothing (the .gz ones are skipped).
            Runtime::Cri => format!("{}/pods/*/*/*.log*", root.display()),
            Runtime::Docker => format!("{}/containers/*/*-json.log*", root.display()),
        }
    }

    fn path_in(dir: &Path, runtime: Runtime) -> PathBuf {
        match runtime {
            Runtime::Cri => dir.join("0.log"),
            Runtime::Docker => dir.join(format!("{}-json.log", docker_id())),
        }
    }

    fn path(&self) -> PathBuf {
        Container::path_in(&self.dir, self.runtime)
    }

    fn open(path: &Path) -> File {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    }

    fn next(&mut self) -> u64 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// The time the runtime stamps the next piece with: 1 ms apart.
    fn stamp(&mut self) -> String {
        self.clock += 1;
        Container::time_at(self.clock - 1)
    }

    /// The time of piece `ms` of the file.
    fn time_at(ms: u64) -> String {
        format!(
            "2026-11-27T{:02}:{:02}:{:02}.{:03}456789Z",
            10 + ms / 3_600_000,
            ms / 60_000 % 60,
            ms / 1000 % 60,
            ms % 1000
        )
    }

    /// A line of `stream` (0 stdout, 1 stderr): `<stream> <seq>` and
    /// filler, some of them over one piece, some exactly one piece long,
    /// with characters JSON escapes.
    fn message(&mut self, stream: usize) -> Vec<u8> {
        let name = ["stdout", "stderr"][stream];
        let seq = self.seq[stream];
        self.seq[stream] += 1;
        let head = format!("{name} {seq:08} \"quoted\"\ttab café ");
        let len = match self.next() % 20 {
            0 => PIECE * 2 + 1234,
            // Exactly one piece, and one byte more.
            1 => PIECE - head.len(),
            2 => PIECE + 1 - head.len(),
            3 => 0,
            _ => (self.next() % 200) as usize,
        };
        let mut m = head.into_bytes();
        m.extend((0..len).map(|i| b'a' + (i % 26) as u8));
        m
    }

    /// The file's line for one piece.
    fn piece_line(&mut self, stream: usize, piece: &[u8], last: bool) -> Vec<u8> {
        let time = self.stamp();
        let name = ["stdout", "stderr"][stream];
        match self.runtime {
            Runtime::Cri => {
                let tag = if last { "F" } else { "P" };
                let mut l = format!("{time} {name} {tag} ").into_bytes();
                l.extend_from_slice(piece);
                l.push(b'\n');
                l
            }
            Runtime::Docker => {
                let mut log = String::from_utf8(piece.to_vec()).unwrap();
                if last {
                    log.push('\n');
                }
                let mut l = serde_json::to_vec(&serde_json::json!({
                    "log": log, "stream": name, "time": time,
                }))
                .unwrap();
                l.push(b'\n');
                l
            }
        }
    }

    /// The pieces of `message` of `stream` as lines of the file, and the
    /// record it must arrive as.
    fn pieces(&mut self, stream: usize, message: &[u8]) -> (Vec<Vec<u8>>, Want) {
        // Both runtimes cut at 16 KiB of bytes; keep the test's messages
        // cut on character boundaries (the filler is ASCII, the head short).
        let mut chunks: Vec<&[u8]> = message.chunks(PIECE).collect();
        if message.len().is_multiple_of(PIECE) {
            // A full last piece is partial; an empty final one ends it.
            chunks.push(b"");
        }
        let n = chunks.len();
        let first_time = self.clock;
        let lines: Vec<Vec<u8>> = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| self.piece_line(stream, c, i + 1 == n))
            .collect();
        if n > 1 {
            self.joined += 1;
        }
        let want = Want {
            value: message.to_vec(),
            time: Some(Container::time_at(first_time)),
            stream: Some(["stdout", "stderr"][stream]),
        };
        (lines, want)
    }

    /// Writes `rounds` rounds: a stdout line, sometimes a stderr line
    /// whose pieces interleave with it, sometimes a malformed line; each
    /// round in one write, as the runtime's writes are.
    fn write(&mut self, rounds: u32) {
        let mut out = Vec::new();
        for _ in 0..rounds {
            let m = self.message(0);
            let (mut a, wa) = self.pieces(0, &m);
            let mut order = vec![wa];
            if self.next().is_multiple_of(3) {
                let m = self.message(1);
                let (b, wb) = self.pieces(1, &m);
                // The stderr line starts after the stdout line's first
                // piece, so its record comes second.
                let at = 1 + (self.next() as usize) % a.len();
                let tail = a.split_off(at);
                a.extend(b);
                a.extend(tail);
                order.push(wb);
            }
            for l in &a {
                out.extend_from_slice(l);
            }
            self.lines += a.len() as u64;
            self.want.extend(order);
            if self.next().is_multiple_of(25) {
                let bad = match self.runtime {
                    Runtime::Cri => format!("garbage {} with no time", self.malformed),
                    Runtime::Docker => format!("{{\"log\":\"cut off {}", self.malformed),
                };
                out.extend_from_slice(bad.as_bytes());
                out.push(b'\n');
                self.lines += 1;
                self.want.push(Want {
                    value: bad.into_bytes(),
                    time: None,
                    stream: None,
                });
                self.malformed += 1;
            }
        }
        self.file.write_all(&out).unwrap();
    }

    /// Rotates the file as its runtime's log manager does, between lines.
    fn rotate(&mut self) {
        self.rotations += 1;
        match self.runtime {
            Runtime::Cri => {
                // The kubelet renames 0.log to 0.log.<timestamp>, has the
                // runtime reopen 0.log, and compresses the rotated files
                // but the newest.
                let stamp = |k: u32| format!("0.log.20261127-1000{k:02}");
                fs::rename(self.path(), self.dir.join(stamp(self.rotations))).unwrap();
                if self.rotations > 1 {
                    let older = self.dir.join(stamp(self.rotations - 1));
                    let status = Command::new("gzip").arg(&older).status().unwrap();
                    assert!(status.success(), "gzip {}", older.display());
                }
            }
            Runtime::Docker => {
                // dockerd renames -json.log.N to .N+1 and -json.log to .1.
                let base = self.path();
                let rotated = |k: u32| PathBuf::from(format!("{}.{k}", base.display()));
                for k in (1..self.rotations).rev() {
                    fs::rename(rotated(k), rotated(k + 1)).unwrap();
                }
                fs::rename(&base, rotated(1)).unwrap();
            }
        }
        self.file = Container::open(&self.path());
    }

    /// The headers every record of the container has from its path.
    fn path_headers(&self) -> Vec<(String, String)> {
        let h = |k: &str, v: &str| (k.to_string(), v.to_string());
        match self.runtime {
            Runtime::Cri => vec![
                h("namespace", "shop"),
                h("pod_name", "web-0"),
                h("pod_uid", POD_UID),
                h("container_name", "nginx"),
            ],
            Runtime::Docker => vec![h("container_id", &docker_id())],
        }
    }
}

fn agent(kafka: &Kafka, root: &Path, runtime: Runtime, topic: &str, delivery: &str) -> Agent {
    let include = Container::include(root, runtime);
    let format = match runtime {
        Runtime::Cri => "cri",
        Runtime::Docker => "docker_json",
    };
    let bootstrap = kafka.bootstrap();
    Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

[[logs]]
name = "pods"
include = ["{include}"]
format = "{format}"
fields = {{ cluster = "eu-1" }}
rescan_interval = "500ms"
rotate_wait = "1s"

[[sinks]]
type = "kafka"
inputs = ["pods"]
brokers = ["{bootstrap}"]
topic = "{topic}"
delivery = "{delivery}"
format = "raw"
"#,
            data = dir.join("data").display(),
        )
    })
}

fn metric(agent: &Agent, name: &str) -> Option<f64> {
    agent.metric(&format!("{name}{{source=\"pods\"}}"))
}

/// Waits until the agent has read `lines` lines of the files and
/// acknowledged every byte it found.
fn wait_delivered(agent: &Agent, lines: u64) {
    wait_for("every line read and acknowledged", DELIVERY_TIMEOUT, || {
        let read = metric(agent, "sonde_log_lines_read_total")?;
        let behind = metric(agent, "sonde_log_bytes_behind")?;
        (read >= lines as f64 && behind == 0.0).then_some(())
    });
}

/// Reads the topic and checks that every record `c` wrote arrived once,
/// whole, with its time, stream, path and the source's field.
fn assert_exact(kafka: &Kafka, topic: &str, isolation: Isolation, c: &Container) {
    let records: Vec<KafkaRecord> = kafka.consume(topic, isolation, c.want.len(), DELIVERY_TIMEOUT);
    let mut seen: BTreeMap<&[u8], Vec<&KafkaRecord>> = BTreeMap::new();
    for r in &records {
        seen.entry(r.value.as_slice()).or_default().push(r);
    }
    let short = |v: &[u8]| String::from_utf8_lossy(&v[..v.len().min(60)]).into_owned();
    let path = c.path_headers();
    for w in &c.want {
        let got = seen.remove(w.value.as_slice()).unwrap_or_default();
        assert_eq!(
            got.len(),
            1,
            "{:?} ({} bytes) arrived {} times",
            short(&w.value),
            w.value.len(),
            got.len()
        );
        let headers: Vec<(String, String)> = got[0]
            .headers
            .iter()
            .map(|(k, v)| {
                let v = v.as_deref().unwrap_or_default();
                (k.clone(), String::from_utf8_lossy(v).into_owned())
            })
            .collect();
        let mut want = vec![("cluster".to_string(), "eu-1".to_string())];
        if let (Some(t), Some(s)) = (&w.time, w.stream) {
            want.push(("time".into(), t.clone()));
            want.push(("stream".into(), s.into()));
        }
        want.extend(path.iter().cloned());
        assert_eq!(headers, want, "the headers of {:?}", short(&w.value));
    }
    let extra: Vec<String> = seen.keys().take(5).map(|v| short(v)).collect();
    assert!(extra.is_empty(), "records nobody wrote arrived: {extra:?}");
}

/// Writes, rotates and restarts in the middle: with `exactly_once` the
/// agent is killed while it reads; with `at_least_once` it is stopped.
fn container_logs(runtime: Runtime, exactly_once: bool) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let delivery = if exactly_once {
        "exactly_once"
    } else {
        "at_least_once"
    };
    let topic = format!("containers-{runtime:?}-{delivery}").to_lowercase();
    kafka.create_topic(&topic, 1);
    let mut c = Container::new(root.path(), runtime);
    let mut agent = agent(kafka, root.path(), runtime, &topic, delivery);

    // Writing and rotating while the agent reads: every record counted.
    // Each file is read before the next rotation compresses it, as a
    // kubelet rotating at 10 MiB allows.
    for _ in 0..3 {
        c.write(150);
        wait_delivered(&agent, c.lines);
        c.rotate();
    }
    c.write(50);
    wait_delivered(&agent, c.lines);
    assert_eq!(
        metric(&agent, "sonde_log_malformed_lines_total"),
        Some(c.malformed as f64)
    );
    assert!(c.malformed > 0 && c.joined > 0);
    assert_eq!(
        metric(&agent, "sonde_log_joined_records_total"),
        Some(c.joined as f64)
    );
    assert_eq!(
        metric(&agent, "sonde_log_unfinished_records_total"),
        Some(0.0)
    );

    // A restart in the middle: the agent goes while it reads a backlog of
    // interleaved records, more are written and rotated while it is down.
    let read = metric(&agent, "sonde_log_lines_read_total").unwrap_or(0.0);
    c.write(400);
    wait_for("part of the backlog read", DELIVERY_TIMEOUT, || {
        (metric(&agent, "sonde_log_lines_read_total")? > read).then_some(())
    });
    if exactly_once {
        agent.kill();
    } else {
        agent.stop();
    }
    c.write(100);
    c.rotate();
    c.write(100);
    agent.start_again();
    c.write(100);
    let isolation = if exactly_once {
        Isolation::ReadCommitted
    } else {
        Isolation::ReadUncommitted
    };
    assert_exact(kafka, &topic, isolation, &c);
}

#[test]
fn cri_files_arrive_exact_across_rotation_and_a_stop() {
    container_logs(Runtime::Cri, false);
}

#[test]
fn cri_files_arrive_exactly_once_across_rotation_and_a_kill() {
    container_logs(Runtime::Cri, true);
}

#[test]
fn docker_json_files_arrive_exact_across_rotation_and_a_stop() {
    container_logs(Runtime::Docker, false);
}

#[test]
fn docker_json_files_arrive_exactly_once_across_rotation_and_a_kill() {
    container_logs(Runtime::Docker, true);
}
