//! `sonde profile` against real processes: C programs from
//! tests/profile/, built here with `cc`, burn CPU in a known split
//! (`hot` 70%, `cold` 30%, counted in work done, not in time), and the
//! tests check that the profiler sees that split, unwinds to `main` with
//! and without frame pointers, writes pprof, folded stacks and flame
//! graphs that agree with its `--json`, diffs two profiles, catches
//! processes that live 150 ms, and fails clearly where perf events are
//! not permitted (ARCHITECTURE.md, "Profiles: contract").
//!
//! The tests that measure shares take [`exclusive`] so that two of them
//! never burn CPU at once on a small machine.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use common::{sonde, wait_for, Json};

const WAIT: Duration = Duration::from_secs(60);
/// How long a burner lives if nothing kills it first (its guard does).
const BURNER_SECONDS: &str = "60";

/// The test programs, built once per run of this test binary.
struct Programs {
    /// burn.c with frame pointers.
    burn_fp: PathBuf,
    /// burn.c without frame pointers: unwinding must use `.eh_frame`.
    burn_nofp: PathBuf,
    /// burn_nofp without its symbol table (`strip`): nothing in it has a
    /// name, and its code is burn_nofp's, at the same addresses.
    burn_stripped: PathBuf,
    shortburn: PathBuf,
    spawner: PathBuf,
    /// threads.c: threads "spin-a" and "spin-b" in spin_a and spin_b.
    threads: PathBuf,
    /// classes.c: a set split of CPU time over zlib, malloc, page
    /// faults, system calls and a plain loop.
    classes: PathBuf,
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profile");
        fs::create_dir_all(&dir).unwrap();
        let dir = fs::canonicalize(dir).unwrap();
        Programs {
            burn_fp: build(&dir, "burn.c", "burn_fp", "-fno-omit-frame-pointer"),
            burn_nofp: build(&dir, "burn.c", "burn_nofp", "-fomit-frame-pointer"),
            burn_stripped: stripped(&dir, &dir.join("burn_nofp"), "burn_stripped"),
            shortburn: build(&dir, "shortburn.c", "shortburn", "-fno-omit-frame-pointer"),
            spawner: build(&dir, "spawner.c", "spawner", "-fno-omit-frame-pointer"),
            threads: build(&dir, "threads.c", "threads", "-fno-omit-frame-pointer"),
            classes: build_linked(&dir, "classes.c", "classes", &["-lz"]),
        }
    })
}

/// Compiles tests/profile/`source` to `dir`/`name`.
fn build(dir: &Path, source: &str, name: &str, frame_pointers: &str) -> PathBuf {
    compile(dir, source, name, frame_pointers, &[])
}

/// [`build`] with frame pointers, linked with `libs`.
fn build_linked(dir: &Path, source: &str, name: &str, libs: &[&str]) -> PathBuf {
    compile(dir, source, name, "-fno-omit-frame-pointer", libs)
}

fn compile(dir: &Path, source: &str, name: &str, frame_pointers: &str, libs: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/profile")
        .join(source);
    produce(dir, name, |tmp| {
        let mut cc = Command::new("cc");
        cc.args(["-O2", "-g", frame_pointers, "-o"])
            .arg(tmp)
            .arg(&src)
            .args(libs);
        cc
    })
}

/// A copy of `program` without symbols (`strip`), at `dir`/`name`.
fn stripped(dir: &Path, program: &Path, name: &str) -> PathBuf {
    produce(dir, name, |tmp| {
        let mut strip = Command::new("strip");
        strip.arg("-o").arg(tmp).arg(program);
        strip
    })
}

/// Runs the command `make` gives for a temporary path, which it writes,
/// and renames that into place as `dir`/`name`, so that a concurrent run
/// of these tests never executes a half-written file.
fn produce(dir: &Path, name: &str, make: impl FnOnce(&Path) -> Command) -> PathBuf {
    let out = dir.join(name);
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    let mut command = make(&tmp);
    let result = command.output().expect("running the build");
    assert!(
        result.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    fs::rename(&tmp, &out).unwrap();
    out
}

/// The address `nm` gives a function of `program`.
fn address_of(program: &Path, function: &str) -> u64 {
    let out = Command::new("nm")
        .arg(program)
        .output()
        .expect("running nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, _, name) = (f.next()?, f.next()?, f.next()?);
            (name == function).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .unwrap_or_else(|| panic!("no {function} in nm {}", program.display()))
}

/// Serialises the tests that measure shares of the CPU.
fn exclusive() -> MutexGuard<'static, ()> {
    static CPU: Mutex<()> = Mutex::new(());
    CPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A test program, its stdout read line by line; killed on drop.
struct Program {
    child: Child,
    lines: Receiver<String>,
}

impl Program {
    fn start(path: &Path, args: &[&str]) -> Program {
        let mut child = Command::new(path)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Program { child, lines }
    }

    /// A burner (burn.c), once it is running `work`.
    fn burner(path: &Path) -> Program {
        let burner = Program::start(path, &[BURNER_SECONDS]);
        burner.wait_line("phase 1");
        burner
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the program prints `want` as a whole line.
    fn wait_line(&self, want: &str) {
        wait_for(&format!("{want:?} on stdout"), WAIT, || {
            match self.lines.try_recv() {
                Ok(line) => (line == want).then_some(()),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => panic!("the program exited before {want:?}"),
            }
        })
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `sonde profile ARGS --json --top 100000` and returns its output.
fn profile_json(args: &[&str]) -> Json {
    let mut all = vec!["profile"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", "--top", "100000"]);
    let (ok, stdout, stderr) = sonde(&all);
    assert!(ok, "sonde {all:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stdout}"))
}

/// A profile run and the CPU time that went by in its sampling window.
struct Measured {
    top: Json,
    /// Growth of each of `cpu()`'s readings over the window, in seconds.
    window_cpu: Vec<f64>,
}

/// Runs `sonde profile ARGS --json --top 100000`, reading `cpu()` (CPU
/// seconds of the processes under test) every 20 ms meanwhile. The
/// sampling window starts when sonde has its perf events open and lasts
/// the `duration_s` it reports; so what the profiled processes got of
/// the CPU is known even when other work on the host takes its share.
fn profile_measured(args: &[&str], cpu: impl Fn() -> Vec<f64>) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .arg("profile")
        .args(args)
        .args(["--json", "--top", "100000"])
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    let mut readings: Vec<(Instant, Vec<f64>)> = Vec::new();
    let mut opened = None;
    let status = wait_for("sonde profile to finish", WAIT, || {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if opened.is_none() && has_perf_events(&fds) {
            opened = Some(readings.len());
        }
        readings.push((Instant::now(), cpu()));
        None
    });
    let stderr = fs::read_to_string(&err).unwrap();
    assert!(
        status.success(),
        "sonde profile {args:?}: {status}: {stderr}"
    );
    let stdout = fs::read_to_string(&out).unwrap();
    let top: Json =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stdout}"));
    let opened = opened.expect("never saw sonde's perf events open");
    let (start, first) = &readings[opened];
    let end = *start + Duration::from_secs_f64(f64_of(&top["duration_s"]));
    let last = &readings
        .iter()
        .find(|(t, _)| *t >= end)
        .unwrap_or_else(|| readings.last().unwrap())
        .1;
    let window_cpu = last.iter().zip(first).map(|(b, a)| b - a).collect();
    Measured { top, window_cpu }
}

/// Whether the process whose `/proc/PID/fd` is `fds` holds perf events.
fn has_perf_events(fds: &Path) -> bool {
    let Ok(entries) = fs::read_dir(fds) else {
        return false;
    };
    entries
        .flatten()
        .any(|e| fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains("perf_event")))
}

/// Seconds `pid` has run on a CPU (`/proc/PID/schedstat`, in ns).
fn runtime(pid: u32) -> f64 {
    let text = fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .unwrap_or_else(|e| panic!("schedstat of {pid}: {e}"));
    let ns: u64 = text.split_whitespace().next().unwrap().parse().unwrap();
    ns as f64 / 1e9
}

/// CPU seconds of `pid`'s children it has waited for (`cutime` and
/// `cstime` of `/proc/PID/stat`, in the clock ticks of USER_HZ, which is
/// 100 on Linux x86_64).
fn reaped_children_cpu(pid: u32) -> f64 {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("stat of {pid}: {e}"));
    // Fields after the `(comm)`, from the third: cutime is the 16th.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[13].parse::<u64>().unwrap() + fields[14].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// Checks that a process that ran `cpu` seconds in the window got a
/// sample per tick of its CPU: `samples` within 15% (and 10 samples) of
/// `cpu × frequency`.
fn assert_sampled_at_frequency(what: &str, samples: u64, cpu: f64, frequency: f64) {
    let expected = cpu * frequency;
    assert!(
        (samples as f64 - expected).abs() <= 0.15 * expected + 10.0,
        "{what}: {samples} samples for {cpu:.3} CPU-s at {frequency} Hz ({expected:.0} expected)"
    );
}

/// The row of `function` in `module` of a `--json` top table.
fn row<'a>(top: &'a Json, function: &str, module: &Path) -> &'a Json {
    let module = module.to_str().unwrap();
    top["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == function && r["module"] == module)
        .unwrap_or_else(|| panic!("no row for {function} in {module}: {top}"))
}

fn f64_of(v: &Json) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u64_of(v: &Json) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Profiles one burner by pid for 3 s at 99 Hz and checks the sample
/// count, the split and the unwinding.
fn check_one_process(path: &Path) {
    let _cpu = exclusive();
    let burner = Program::burner(path);
    let pid = burner.pid();
    let run = profile_measured(
        &[
            "--duration",
            "3s",
            "--frequency",
            "99",
            "--pid",
            &pid.to_string(),
        ],
        || vec![runtime(pid)],
    );
    let top = &run.top;
    let samples = u64_of(&top["samples"]);
    let cpu = run.window_cpu[0];
    eprintln!("{}: {samples} samples for {cpu:.3} CPU-s", path.display());
    assert_sampled_at_frequency(&path.display().to_string(), samples, cpu, 99.0);
    // Enough for ±10 points to be over 2 standard errors; a busy thread
    // alone on a core gets 297.
    assert!(
        samples >= 100,
        "the burner got {cpu:.2} CPU-s of 3 s: the host is too busy to measure shares"
    );
    let shares: Vec<f64> = top["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| f64_of(&r["self"]))
        .collect();
    assert!(
        shares.windows(2).all(|w| w[0] >= w[1]),
        "not sorted by self: {top}"
    );
    let hot = f64_of(&row(top, "hot", path)["self"]);
    let cold = f64_of(&row(top, "cold", path)["self"]);
    assert!((hot - 0.7).abs() <= 0.1, "hot's self is {hot}: {top}");
    assert!((cold - 0.3).abs() <= 0.1, "cold's self is {cold}: {top}");
    for caller in ["work", "main"] {
        let total = f64_of(&row(top, caller, path)["total"]);
        assert!(total >= 0.9, "{caller}'s total is {total}: {top}");
    }
}

#[test]
fn one_process_with_frame_pointers_shows_its_split_and_unwinds_to_main() {
    check_one_process(&programs().burn_fp);
}

#[test]
fn one_process_without_frame_pointers_shows_its_split_and_unwinds_to_main() {
    check_one_process(&programs().burn_nofp);
}

#[test]
fn a_stripped_binarys_functions_are_named_by_module_and_address() {
    let _cpu = exclusive();
    let p = programs();
    let path = &p.burn_stripped;
    // Where burn_nofp's symbols put hot and cold: the stripped copy's
    // unwind tables must name the same starts.
    let hot = format!("burn_stripped+{:#x}", address_of(&p.burn_nofp, "hot"));
    let cold = format!("burn_stripped+{:#x}", address_of(&p.burn_nofp, "cold"));
    let burner = Program::burner(path);
    let pid = burner.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("stripped.folded");
    let top = profile_json(&[
        "--duration",
        "2s",
        "--pid",
        &pid,
        "--folded",
        folded.to_str().unwrap(),
    ]);
    assert!(u64_of(&top["samples"]) >= 50, "{top}");
    let hot_row = row(&top, &hot, path);
    let cold_row = row(&top, &cold, path);
    assert!(
        f64_of(&hot_row["self"]) > f64_of(&cold_row["self"])
            && f64_of(&hot_row["self"]) + f64_of(&cold_row["self"]) >= 0.9,
        "{top}"
    );
    assert_eq!(top["functions"][0]["function"], hot.as_str(), "{top}");
    // The stacks hold the functions in turn, as a named binary's would.
    let folded = fs::read_to_string(&folded).unwrap();
    assert!(
        folded
            .lines()
            .any(|l| l.contains("__libc_start_main") && l.contains(&format!(";{hot} "))),
        "{folded}"
    );
}

#[test]
fn the_whole_host_shows_each_burners_split_under_its_own_module() {
    let _cpu = exclusive();
    let p = programs();
    let fp = Program::burner(&p.burn_fp);
    let nofp = Program::burner(&p.burn_nofp);
    let pids = [fp.pid(), nofp.pid()];
    // 499 Hz rather than 99: the two burners share the host's cores with
    // whatever else runs there, and each still needs some hundreds of
    // samples for its split to be measured to a few points.
    let frequency = 499.0;
    let run = profile_measured(&["--duration", "3s", "--frequency", "499"], || {
        pids.iter().map(|&pid| runtime(pid)).collect()
    });
    let top = &run.top;
    for (module, cpu) in [&p.burn_fp, &p.burn_nofp].into_iter().zip(run.window_cpu) {
        let what = module.display().to_string();
        let hot = u64_of(&row(top, "hot", module)["self_samples"]);
        let cold = u64_of(&row(top, "cold", module)["self_samples"]);
        eprintln!("{what}: hot {hot}, cold {cold} for {cpu:.3} CPU-s");
        let burned = hot + cold;
        assert_sampled_at_frequency(&what, burned, cpu, frequency);
        assert!(
            burned >= 150,
            "{what} got {cpu:.2} CPU-s: the host is too busy"
        );
        let split = hot as f64 / burned as f64;
        assert!(
            (split - 0.7).abs() <= 0.1,
            "{what}: hot has {hot} samples and cold {cold}"
        );
        let main = u64_of(&row(top, "main", module)["total_samples"]);
        assert!(
            main as f64 >= 0.9 * burned as f64,
            "{what}: main is on {main} of {burned} stacks"
        );
    }
}

/// Whether `go` runs, for `go tool pprof`; prints the skip otherwise.
fn go_found() -> bool {
    let found = Command::new("go")
        .arg("version")
        .env("GOTOOLCHAIN", "local")
        .output()
        .is_ok();
    if !found {
        eprintln!("skipped: `go` is not on PATH, so `go tool pprof` cannot read the profile");
    }
    found
}

#[test]
fn pprof_output_gives_go_tool_pprof_the_same_flat_shares_as_json() {
    let _cpu = exclusive();
    if !go_found() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpu.pb.gz");
    let path = &programs().burn_fp;
    let burner = Program::burner(path);
    let pid = burner.pid().to_string();
    let top = profile_json(&[
        "--duration",
        "2s",
        "--pid",
        &pid,
        "--pprof",
        file.to_str().unwrap(),
    ]);
    drop(burner);
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-nodecount=50"])
        .arg(&file)
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for function in ["hot", "cold"] {
        // `      flat  flat%   sum%        cum   cum%  name`
        let line = text
            .lines()
            .find(|l| l.split_whitespace().last() == Some(function))
            .unwrap_or_else(|| panic!("no {function} in go tool pprof -top:\n{text}"));
        let flat: f64 = line
            .split_whitespace()
            .nth(1)
            .unwrap()
            .trim_end_matches('%')
            .parse()
            .unwrap_or_else(|e| panic!("flat% of {line:?}: {e}"));
        let ours = f64_of(&row(&top, function, path)["self"]) * 100.0;
        assert!(
            (flat - ours).abs() <= 0.1,
            "{function}: go tool pprof says {flat}%, --json {ours}%\n{text}\n{top}"
        );
    }
}

/// The `(name, width in samples, fill)` of every frame of a flame graph.
fn svg_frames(svg: &str) -> Vec<(String, u64, [u8; 3])> {
    svg.split("<g class=\"frame\" ")
        .skip(1)
        .map(|frame| {
            let attr = |name: &str| {
                let start = frame
                    .find(&format!("{name}=\""))
                    .unwrap_or_else(|| panic!("no {name} in {frame}"))
                    + name.len()
                    + 2;
                let len = frame[start..].find('"').unwrap();
                frame[start..start + len].to_string()
            };
            let fill = attr("fill");
            let rgb: Vec<u8> = fill
                .strip_prefix("rgb(")
                .and_then(|f| f.strip_suffix(')'))
                .unwrap_or_else(|| panic!("fill {fill:?}"))
                .split(',')
                .map(|c| c.parse().unwrap())
                .collect();
            (
                attr("data-name"),
                attr("data-w").parse().unwrap(),
                [rgb[0], rgb[1], rgb[2]],
            )
        })
        .collect()
}

#[test]
fn folded_stacks_are_root_first_and_add_up_and_the_flame_graph_draws_them() {
    let _cpu = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (folded, svg) = (dir.path().join("stacks.txt"), dir.path().join("cpu.svg"));
    let path = &programs().burn_nofp;
    let burner = Program::burner(path);
    let pid = burner.pid().to_string();
    let top = profile_json(&[
        "--duration",
        "2s",
        "--pid",
        &pid,
        "--folded",
        folded.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    drop(burner);
    let text = fs::read_to_string(&folded).unwrap();
    let mut sum = 0;
    let mut under_main_work = 0;
    for line in text.lines() {
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no count on {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|e| panic!("count of {line:?}: {e}"));
        sum += count;
        if stack.split(';').rev().take(3).eq(["hot", "work", "main"]) {
            under_main_work += count;
        }
    }
    assert_eq!(sum, u64_of(&top["samples"]), "{text}\n{top}");
    let hot = row(&top, "hot", path);
    let hot_samples = u64_of(&hot["self_samples"]);
    assert!(
        under_main_work as f64 >= 0.9 * hot_samples as f64 && hot_samples > 0,
        "{under_main_work} of hot's {hot_samples} samples are on `…;main;work;hot` lines:\n{text}"
    );

    let svg = fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    let drawn: u64 = svg_frames(&svg)
        .iter()
        .filter(|f| f.0 == "hot")
        .map(|f| f.1)
        .sum();
    let hot_total = u64_of(&hot["total_samples"]);
    assert!(
        drawn <= hot_total && drawn as f64 >= 0.9 * hot_total as f64,
        "the hot frames are {drawn} samples wide, hot is on {hot_total} stacks"
    );
}

#[test]
fn a_diff_of_two_phases_shows_hot_shrinking_and_cold_growing() {
    let _cpu = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (base, new, svg) = (
        dir.path().join("base.pb.gz"),
        dir.path().join("new.pb.gz"),
        dir.path().join("diff.svg"),
    );
    let burner = Program::burner(&programs().burn_fp);
    let pid = burner.pid().to_string();
    let phase = |file: &Path| {
        let file = file.to_str().unwrap();
        // 299 Hz: a few hundred samples per phase even when other work
        // on the host takes half the burner's core.
        let top = profile_json(&[
            "--duration",
            "2s",
            "--frequency",
            "299",
            "--pid",
            &pid,
            "--pprof",
            file,
        ]);
        let samples = u64_of(&top["samples"]);
        assert!(samples >= 150, "{samples} samples: the host is too busy");
    };
    phase(&base);
    // Phase 2 swaps the split to hot 30%, cold 70%.
    let status = Command::new("kill").args(["-USR1", &pid]).status().unwrap();
    assert!(status.success());
    burner.wait_line("phase 2");
    phase(&new);
    drop(burner);

    let (ok, stdout, stderr) = sonde(&[
        "profile",
        "diff",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "--json",
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "profile diff failed: {stderr}");
    let diff: Json = serde_json::from_str(&stdout).unwrap();
    let rows = diff["functions"].as_array().unwrap();
    assert!(rows.len() >= 2, "{diff}");
    let changes: Vec<f64> = rows.iter().map(|r| f64_of(&r["delta"]).abs()).collect();
    assert!(
        changes.windows(2).all(|w| w[0] >= w[1]),
        "not sorted by |delta|: {diff}"
    );
    let delta = |function: &str| {
        let r = rows[..2]
            .iter()
            .find(|r| r["function"] == function)
            .unwrap_or_else(|| panic!("{function} is not one of the top two rows: {diff}"));
        f64_of(&r["delta"])
    };
    assert!(delta("hot") < -0.2, "{diff}");
    assert!(delta("cold") > 0.2, "{diff}");

    // The widest frame of each: cold grew, so red; hot shrank, so blue.
    let frames = svg_frames(&fs::read_to_string(&svg).unwrap());
    let widest = |name: &str| {
        frames
            .iter()
            .filter(|f| f.0 == name)
            .max_by_key(|f| f.1)
            .unwrap_or_else(|| panic!("no {name} frame in the diff flame graph"))
            .2
    };
    let [r, g, b] = widest("cold");
    assert!(r > 200 && g < 150 && b < 150, "cold is rgb({r},{g},{b})");
    let [r, g, b] = widest("hot");
    assert!(b > 200 && r < 150 && g < 150, "hot is rgb({r},{g},{b})");
}

#[test]
fn processes_that_live_150_ms_are_symbolised_and_unwound() {
    let _cpu = exclusive();
    let p = programs();
    // The spawner keeps starting fresh `shortburn`s, one at a time, until
    // it is killed after the profile; its reaped children's CPU time
    // says how much of the window they had.
    let spawner = Program::start(&p.spawner, &[BURNER_SECONDS, p.shortburn.to_str().unwrap()]);
    spawner.wait_line("spawning");
    let pid = spawner.pid();
    let run = profile_measured(&["--duration", "3s", "--frequency", "99"], || {
        vec![reaped_children_cpu(pid)]
    });
    drop(spawner);
    let top = &run.top;
    let cpu = run.window_cpu[0];
    let spin = u64_of(&row(top, "shortburn_spin", &p.shortburn)["self_samples"]);
    eprintln!("shortburn_spin: {spin} samples for {cpu:.2} CPU-s of shortburns");
    // A child's CPU is counted when it is reaped, so the window's edges
    // blur by one child (0.15 s, 15 samples) each.
    let expected = cpu * 99.0;
    assert!(
        expected >= 60.0,
        "the shortburns got {cpu:.2} CPU-s of 3 s: the host is too busy"
    );
    assert!(
        spin as f64 >= 0.85 * expected - 30.0,
        "shortburn_spin has {spin} samples, the shortburns ran {cpu:.2} CPU-s: {top}"
    );
    // Each process lives for 15 samples at most, so these come from many.
    assert!(spin >= 45, "{spin} samples");
    let main = u64_of(&row(top, "main", &p.shortburn)["total_samples"]);
    assert!(
        main as f64 >= 0.9 * spin as f64,
        "shortburn's main is on {main} stacks, shortburn_spin leads {spin}: {top}"
    );
}

#[test]
fn without_permission_it_exits_with_a_message_naming_the_fixes() {
    let paranoid: i32 = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(2);
    if paranoid <= 0 {
        eprintln!("skipped: perf_event_paranoid is {paranoid}, so everyone may profile");
        return;
    }
    if fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: not root, so setpriv cannot drop to nobody");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: no setpriv (util-linux)");
        return;
    }
    let nobody = |program: &Path, args: &[&str]| {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(program)
            .args(args)
            .output()
            .unwrap()
    };
    // nobody must be able to run the binary: copy it where it can if the
    // build directory is closed to it.
    let dir = tempfile::tempdir().unwrap();
    let mut bin = PathBuf::from(env!("CARGO_BIN_EXE_sonde"));
    let test = Path::new("/usr/bin/test");
    if !nobody(test, &["-x", bin.to_str().unwrap()])
        .status
        .success()
    {
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let copy = dir.path().join("sonde");
        fs::copy(&bin, &copy).unwrap();
        fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
        bin = copy;
    }
    let out = nobody(&bin, &["profile", "--duration", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it succeeded as nobody: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("perf_event_paranoid"), "{stderr}");
    assert!(stderr.contains("CAP_PERFMON"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_frequency_outside_1_to_1000_is_refused() {
    for frequency in ["0", "5000"] {
        let (ok, stdout, stderr) =
            sonde(&["profile", "--duration", "1s", "--frequency", frequency]);
        assert!(!ok, "--frequency {frequency} was accepted: {stdout}");
        assert!(
            stderr.contains(&format!("--frequency {frequency}"))
                && stderr.contains("between 1 and 1000"),
            "{stderr}"
        );
    }
}

#[test]
fn a_diff_of_a_file_that_is_not_pprof_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // The smallest valid pprof: a string table holding only "".
    let empty = dir.path().join("empty.pb");
    fs::write(&empty, b"\x32\x00").unwrap();
    let text = dir.path().join("text.pb.gz");
    fs::write(&text, b"this is not a profile\n").unwrap();
    let gzip = dir.path().join("truncated.pb.gz");
    fs::write(&gzip, b"\x1f\x8b\x08\x00 truncated").unwrap();
    for (base, new, bad) in [(&text, &empty, &text), (&empty, &gzip, &gzip)] {
        let (ok, _, stderr) = sonde(&[
            "profile",
            "diff",
            base.to_str().unwrap(),
            new.to_str().unwrap(),
        ]);
        assert!(!ok, "diff {} {} succeeded", base.display(), new.display());
        assert!(stderr.contains(bad.to_str().unwrap()), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let (ok, stdout, stderr) = sonde(&[
        "profile",
        "diff",
        empty.to_str().unwrap(),
        empty.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        ok && stdout.contains("\"functions\":[]"),
        "{stdout}{stderr}"
    );
}

/// An agent with `[profiler]` at `frequency`, each profile covering one
/// second.
fn profiling_agent(frequency: u32, extra: &str) -> common::Agent {
    common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n[profiler]\nfrequency = {frequency}\nperiod = \"1s\"\n{extra}\n",
            dir.join("data").display()
        )
    })
}

/// Waits until the agent has written `n` more profiles than `after`.
fn wait_periods(agent: &common::Agent, after: f64, n: f64) -> f64 {
    wait_for("profiles written", WAIT, || {
        agent
            .metric("sonde_profiler_periods_total")
            .filter(|&p| p >= after + n)
    })
}

#[test]
fn the_agent_stores_a_profile_each_period_that_profile_since_and_diff_read() {
    let _cpu = exclusive();
    let burner = Program::burner(&programs().burn_nofp);
    let pid = burner.pid().to_string();
    let agent = profiling_agent(99, "");
    let data = agent.path("data");
    let data = data.to_str().unwrap();
    let started = Instant::now();
    wait_periods(&agent, 0.0, 2.0);
    assert_eq!(agent.metric("sonde_profiler_running"), Some(1.0));

    // The store so far, as one profile of the burner, once it holds
    // enough samples to judge shares within 10 points (on a busy host the
    // burner gets less than its core, and this takes longer).
    let top = wait_for("200 samples of the burner in the store", WAIT, || {
        let top = profile_json(&["--since", "1m", "--data-dir", data, "--pid", &pid]);
        (u64_of(&top["samples"]) >= 200).then_some(top)
    });
    let periods = agent.metric("sonde_profiler_periods_total").unwrap();
    let module = &programs().burn_nofp;
    let share = |f: &str| f64_of(&row(&top, f, module)["self"]);
    assert!((share("hot") - 0.7).abs() <= 0.1, "{top}");
    assert!((share("cold") - 0.3).abs() <= 0.1, "{top}");
    assert!(f64_of(&row(&top, "main", module)["total"]) >= 0.9, "{top}");

    // Phase 2, then a diff of two ranges of the store around the switch.
    let status = Command::new("kill").args(["-USR1", &pid]).status().unwrap();
    assert!(status.success());
    burner.wait_line("phase 2");
    let switched = Instant::now();
    wait_periods(&agent, periods, 4.0);
    let ago = |t: Instant| t.elapsed().as_secs();
    // Whole periods on either side, leaving out the one holding the switch.
    let base = format!("{}s..{}s", ago(started), ago(switched) + 2);
    let new = format!("{}s..0s", ago(switched).saturating_sub(1));
    let (ok, stdout, stderr) = sonde(&[
        "profile",
        "diff",
        &base,
        &new,
        "--data-dir",
        data,
        "--pid",
        &pid,
        "--json",
    ]);
    assert!(ok, "profile diff {base} {new}: {stderr}");
    let diff: Json = serde_json::from_str(&stdout).unwrap();
    let delta = |function: &str| {
        diff["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["function"] == function)
            .map(|r| f64_of(&r["delta"]))
            .unwrap_or_else(|| panic!("no {function} in {diff}"))
    };
    assert!(delta("hot") < -0.2, "{base} {new}: {diff}");
    assert!(delta("cold") > 0.2, "{base} {new}: {diff}");
    // The agent's first minutes: ten minutes ago is before its first
    // profile, which the command names rather than "no stored profiles".
    let (ok, _, stderr) = sonde(&["profile", "diff", "20m..10m", "10m..0s", "--data-dir", data]);
    assert!(!ok);
    assert!(
        stderr.contains("20m..10m is before the first stored profile, at ")
            && stderr.contains("..0s holds every stored profile"),
        "{stderr}"
    );

    // Its own cost is on /metrics.
    let cpu = agent.metric("sonde_profiler_cpu_seconds_total").unwrap();
    assert!(cpu > 0.0, "profiler CPU {cpu}");
    assert!(
        agent
            .metric("sonde_profiler_symbol_cache_hits_total")
            .unwrap()
            > 0.0
    );
}

#[test]
fn the_store_keeps_only_the_retention() {
    let agent = profiling_agent(19, "retention = \"3s\"");
    wait_periods(&agent, 0.0, 8.0);
    let files = fs::read_dir(agent.path("data").join("profiles"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".pb.gz"))
        })
        .count();
    // The 3 s before the newest file, and the newest.
    assert!((1..=4).contains(&files), "{files} files kept");
}

#[test]
fn reading_a_store_with_nothing_in_the_range_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (ok, _, stderr) = sonde(&["profile", "--since", "10m", "--data-dir", data]);
    assert!(!ok);
    assert!(stderr.contains("no stored profiles"), "{stderr}");
    let (ok, _, stderr) = sonde(&["profile", "diff", "5m..10m", "2m..0s", "--data-dir", data]);
    assert!(!ok);
    assert!(stderr.contains("longer ago to shorter ago"), "{stderr}");
}

/// A profiler period whose first end is at least `margin` away: periods
/// are aligned to the clock, so an agent started now stores its first
/// profile at the next multiple of the period, which for a fixed period
/// may be a second away. At most 10 minutes, so that the page's default
/// range, the last 10 minutes, holds the period's start, which names its
/// profile.
fn period_ending_after(margin: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (margin + 30..=600)
        .rev()
        .find(|p| p - now % p >= margin + 10)
        .unwrap()
}

#[test]
fn before_the_first_profile_the_page_api_and_command_say_when_it_comes_not_that_something_is_wrong()
{
    let chromium = common::browser::chromium();
    let period = period_ending_after(90);
    let agent = common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n[profiler]\nfrequency = 19\nperiod = \"{period}s\"\n",
            dir.join("data").display()
        )
    });
    wait_for("the profiler running", WAIT, || {
        (agent.metric("sonde_profiler_running")? == 1.0).then_some(())
    });
    // The API: a wait, with when it ends.
    let (status, _, body) = admin_request("GET", agent.admin, "/api/profiles/top");
    let body: Json = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["reason"], "waiting", "{body}");
    let in_s = u64_of(&body["next_profile_in_s"]);
    assert!((60..=period).contains(&in_s), "{in_s} of {period}: {body}");
    assert_eq!(
        body["error"],
        format!("the profiler is running; its first profile is stored at the end of its first period, in {in_s} s")
    );
    let (_, _, body) = admin_request("GET", agent.admin, "/api/profiles/diff");
    let body: Json = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["reason"], "before_first", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("20m..10m is before the profiler's first profile"),
        "{body}"
    );

    // The command has no agent to ask, but names the store it read and
    // says when an empty one fills.
    let data = agent.path("data");
    let (ok, _, stderr) = sonde(&[
        "profile",
        "--since",
        "10m",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(!ok);
    let dir = data.join("profiles").display().to_string();
    assert!(
        stderr.contains(&format!("reading 10m..0s from {dir} (--data-dir)"))
            && stderr.contains(&format!("no stored profiles in {dir}: the agent stores its first profile at the end of its first period")),
        "{stderr}"
    );
    let (_, _, stderr) = sonde(&["profile", "--since", "10m"]);
    assert!(
        stderr.contains(
            "/var/lib/sonde/profiles (the default data_dir; --data-dir or --config names another)"
        ),
        "{stderr}"
    );

    // The page: a notice counting down, not an error, and no table.
    let Some(chromium) = chromium else {
        return;
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    fs::create_dir_all(&shots).unwrap();
    let dom = common::browser::render_page(
        &chromium,
        &format!("http://127.0.0.1:{}/profiles", agent.admin),
        Some(&shots.join("profiles-waiting.png")),
    );
    let summary = dom
        .split("<p id=\"summary\" class=\"summary notice\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no notice: {dom}"))
        .split("</p>")
        .next()
        .unwrap();
    let shown: u64 = summary
        .strip_prefix("the profiler is running; its first profile is stored at the end of its first period, in ")
        .and_then(|rest| rest.strip_suffix(" s"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    // Chromium's virtual time runs the countdown ahead of the clock: it
    // has ticked, and not yet reached the end.
    assert!((1..in_s).contains(&shown), "{shown} of {in_s}: {summary}");
    assert!(!dom.contains("summary error"), "{dom}");
    assert!(page_rows(&dom).is_empty());
}

/// The agent's descriptors open on files under `dir`.
fn descriptors_under(agent: &common::Agent, dir: &Path) -> usize {
    fs::read_dir(format!("/proc/{}/fd", agent.child.id()))
        .map(|fds| {
            fds.filter_map(|e| fs::read_link(e.ok()?.path()).ok())
                .filter(|target| target.starts_with(dir))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn the_agent_lets_go_of_a_binary_once_its_processes_have_exited() {
    let _cpu = exclusive();
    let agent = profiling_agent(19, "");
    wait_periods(&agent, 0.0, 1.0);
    // A binary no other process maps, in a directory of its own.
    let dir = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(dir.path()).unwrap();
    let bin = dir.join("burner");
    fs::copy(&programs().burn_nofp, &bin).unwrap();
    let burner = Program::burner(&bin);
    wait_for("the agent to open the burner's binary", WAIT, || {
        (descriptors_under(&agent, &dir) > 0).then_some(())
    });
    wait_for("sonde_profiler_modules to count it", WAIT, || {
        agent.metric("sonde_profiler_modules").filter(|&m| m >= 1.0)
    });
    drop(burner);
    // The period after the exit drops the module and closes its file.
    wait_for("the agent to close the burner's binary", WAIT, || {
        (descriptors_under(&agent, &dir) == 0).then_some(())
    });
    assert!(agent.metric("sonde_profiler_processes").unwrap() >= 1.0);
}

/// A cgroup made for a test under the unified (v2) hierarchy, named as
/// Docker's systemd driver names a container's (`docker-ID.scope`);
/// removed on drop once its processes are gone.
struct ContainerCgroup {
    parent: PathBuf,
    pod_dir: PathBuf,
    dir: PathBuf,
    id: String,
    pod: String,
}

impl ContainerCgroup {
    /// `None` where there is no writable cgroup2 mount (not root, or a
    /// read-only /sys/fs/cgroup).
    fn create() -> Option<ContainerCgroup> {
        let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
        let root = mounts.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let (_, path, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(path))
        })?;
        let id: String = (0..4)
            .map(|i| format!("{:016x}", std::process::id() as u64 * 0x9e37_79b9 + i))
            .collect();
        let pod = format!("1c2e77aa-0b6e-4c4e-9a8f-{:012x}", std::process::id());
        // As the kubelet's systemd cgroup driver names a pod's container.
        let parent = root.join(format!("sonde-test-{}", std::process::id()));
        let pod_dir = parent.join(format!(
            "kubepods-burstable-pod{}.slice",
            pod.replace('-', "_")
        ));
        let dir = pod_dir.join(format!("cri-containerd-{id}.scope"));
        fs::create_dir_all(&dir).ok()?;
        Some(ContainerCgroup {
            parent,
            pod_dir,
            dir,
            id,
            pod,
        })
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for ContainerCgroup {
    fn drop(&mut self) {
        // rmdir fails while a process is still in the cgroup: the kernel
        // moves a killed process out as it exits, a moment after the wait.
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = fs::remove_dir(&self.pod_dir);
        let _ = fs::remove_dir(&self.parent);
    }
}

#[test]
fn samples_of_a_process_in_a_container_carry_its_container_and_pod_and_filter_by_them() {
    let _cpu = exclusive();
    if !go_found() {
        return;
    }
    let Some(cgroup) = ContainerCgroup::create() else {
        eprintln!("skipped: no writable cgroup2 hierarchy (needs root)");
        return;
    };
    let p = programs();
    // One process moved into the container before the profile (read from
    // /proc when first sampled) and one that enters it and then execs
    // during the profile, as a container runtime starts a container.
    let before = Program::burner(&p.burn_fp);
    fs::write(cgroup.procs(), before.pid().to_string()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpu.pb.gz");
    let mut profiling = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(["profile", "--duration", "3s", "--pprof"])
        .arg(&file)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let fds = PathBuf::from(format!("/proc/{}/fd", profiling.id()));
    wait_for("sonde's perf events to open", WAIT, || {
        has_perf_events(&fds).then_some(())
    });
    let script = format!(
        "echo $$ > {} && exec {} {BURNER_SECONDS}",
        cgroup.procs().display(),
        p.burn_nofp.display()
    );
    let after = Program::start(Path::new("/bin/sh"), &["-c", &script]);
    after.wait_line("phase 1");
    let status = wait_for("sonde profile to finish", WAIT, || {
        profiling.try_wait().unwrap()
    });
    assert!(status.success());
    let pids = [before.pid(), after.pid()];
    drop(after);
    // `go tool pprof -tags` lists each label's values with their samples.
    let out = Command::new("go")
        .args(["tool", "pprof", "-tags"])
        .arg(&file)
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof -tags: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(" container:") && text.contains(&cgroup.id),
        "no container label with {} in:\n{text}",
        cgroup.id
    );
    // `  2.99s (50.00%): VALUE` lines: the share of the samples with
    // each value of a label.
    let percent = |value: &str| -> f64 {
        text.lines()
            .find(|l| l.trim_end().ends_with(&format!(": {value}")))
            .and_then(|l| l.split_once('(')?.1.split_once('%'))
            .and_then(|(p, _)| p.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let burners = percent("burn_fp") + percent("burn_nofp");
    let labelled = percent(&cgroup.id);
    // Every sample of both burners, and nothing else of note: the host's
    // other processes are in no container.
    assert!(
        burners >= 30.0 && (labelled - burners).abs() <= 1.0,
        "the burners {pids:?} took {burners}% of the samples, the container label \
         {labelled}%:\n{text}"
    );
    assert_eq!(percent(&cgroup.pod), labelled, "pod_uid label:\n{text}");

    // --container keeps them, by the short id or the pod's uid.
    let file = file.to_str().unwrap();
    let all = profile_json(&["merge", file]);
    let burner_samples: u64 = ["hot", "cold", "work", "main"]
        .iter()
        .flat_map(|f| [row(&all, f, &p.burn_fp), row(&all, f, &p.burn_nofp)])
        .map(|r| u64_of(&r["self_samples"]))
        .sum();
    for id in [&cgroup.id[..12], &cgroup.pod] {
        let kept = profile_json(&["merge", file, "--container", id]);
        let modules: std::collections::BTreeSet<&str> = kept["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["module"].as_str().unwrap())
            .collect();
        let samples = u64_of(&kept["samples"]);
        assert!(
            samples >= burner_samples && samples as f64 <= burner_samples as f64 * 1.02 + 5.0,
            "--container {id}: {samples} samples, the burners' functions {burner_samples}"
        );
        assert!(modules.contains(p.burn_fp.to_str().unwrap()), "{modules:?}");
    }
    let none = profile_json(&["merge", file, "--container", "ffffffffffff"]);
    assert_eq!(u64_of(&none["samples"]), 0);

    // The agent's site and page: the container is on the processes and
    // filters the top table.
    let agent = profiling_agent(99, "");
    let short = &cgroup.id[..12];
    let top = wait_for("100 samples of the container stored", WAIT, || {
        let (_, _, body) = admin_request(
            "GET",
            agent.admin,
            &format!("/api/profiles/top?range=5m..0s&container={short}"),
        );
        let top: Json = serde_json::from_slice(&body).ok()?;
        (top["samples"].as_u64()? >= 100).then_some(top)
    });
    assert!(
        f64_of(&row(&top, "hot", &p.burn_fp)["self"]) >= 0.5,
        "{top}"
    );
    let (_, _, body) = admin_request("GET", agent.admin, "/api/profiles/processes?range=5m..0s");
    let processes: Json = serde_json::from_slice(&body).unwrap();
    let row = processes
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"].as_u64() == Some(pids[0].into()))
        .unwrap_or_else(|| panic!("no burner in {processes}"));
    assert_eq!(
        (&row["container"], &row["pod"]),
        (
            &Json::from(cgroup.id.as_str()),
            &Json::from(cgroup.pod.as_str())
        )
    );
    if let Some(chromium) = common::browser::chromium() {
        let dom = common::browser::render_page(
            &chromium,
            &format!(
                "http://127.0.0.1:{}/profiles?range=5m..0s&container={short}",
                agent.admin
            ),
            None,
        );
        assert_eq!(
            page_rows(&dom).first().map(|r| r.0.as_str()),
            Some("hot"),
            "{dom}"
        );
        assert!(
            dom.contains(&format!("<option value=\"{}\"", cgroup.id)),
            "the container is not offered: {dom}"
        );
    }
    drop(before);
}

#[test]
fn an_agent_without_permission_warns_once_and_goes_on_with_its_metrics() {
    let paranoid: i32 = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(2);
    if paranoid <= 0 || fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: needs root (to drop to nobody) and perf_event_paranoid above 0");
        return;
    }
    let launcher = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ];
    let bin = env!("CARGO_BIN_EXE_sonde");
    let runnable = Command::new(launcher[0])
        .args(&launcher[1..])
        .args(["/usr/bin/test", "-x", bin])
        .status()
        .is_ok_and(|s| s.success());
    if !runnable {
        eprintln!("skipped: nobody cannot run {bin} (or there is no setpriv)");
        return;
    }
    let port = common::free_port();
    let agent = common::Agent::start_config_under(&launcher, |admin, dir| {
        // nobody writes the data_dir and the file sink here.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).unwrap();
        format!(
            "[agent]\ninterval = \"1s\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n{}\n[profiler]\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
            dir.join("data").display(),
            common::statsd_receiver(port),
            dir.join("points.jsonl").display()
        )
    });
    assert_eq!(agent.metric("sonde_profiler_running"), Some(0.0));
    // The metrics job goes on.
    common::udp_send(port, b"jobs.done:3|c");
    wait_for("the counter in the file sink", WAIT, || {
        let points = agent.points();
        common::named(&points, "jobs.done")
            .iter()
            .any(|(_, v, _)| *v == 3.0)
            .then_some(())
    });
    let stderr = agent.stderr();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("profiler off"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("perf_event_paranoid") && warnings[0].contains("CAP_PERFMON"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// An HTTP GET (or another method) on the admin site: status, content
/// type and body.
fn admin_request(method: &str, port: u16, path: &str) -> (u16, String, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("http://127.0.0.1:{port}{path}");
    let mut response = match method {
        "GET" => agent.get(&url).call(),
        "POST" => agent.post(&url).send(""),
        other => panic!("{other}"),
    }
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response.body_mut().read_to_vec().unwrap();
    (response.status().as_u16(), content_type, body)
}

#[test]
fn the_admin_site_serves_the_stored_profiles_as_json_svg_and_pprof() {
    let _cpu = exclusive();
    let burner = Program::burner(&programs().burn_nofp);
    let pid = burner.pid().to_string();
    let agent = profiling_agent(99, "");
    let get = |path: &str| admin_request("GET", agent.admin, path);
    let json = |path: &str| -> Json {
        let (status, content_type, body) = get(path);
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        assert_eq!(content_type, "application/json", "{path}");
        serde_json::from_slice(&body).unwrap()
    };
    // Enough of the burner stored to judge its shares.
    let top = wait_for(
        "200 samples of the burner behind /api/profiles/top",
        WAIT,
        || {
            let (status, _, body) =
                get(&format!("/api/profiles/top?range=5m..0s&pid={pid}&top=500"));
            let top: Json = serde_json::from_slice(&body).ok()?;
            (status == 200 && u64_of(&top["samples"]) >= 200).then_some(top)
        },
    );
    let module = &programs().burn_nofp;
    assert!(
        (f64_of(&row(&top, "hot", module)["self"]) - 0.7).abs() <= 0.1,
        "{top}"
    );
    assert!(f64_of(&row(&top, "main", module)["total"]) >= 0.9, "{top}");
    // The same process by name; the table cut to its top row.
    let by_name = json("/api/profiles/top?range=5m..0s&process=burn_nofp&top=1");
    assert_eq!(by_name["functions"].as_array().unwrap().len(), 1);
    assert_eq!(by_name["functions"][0]["function"], "hot", "{by_name}");

    // The processes in the range, the burner among them by pid and name.
    let processes = json("/api/profiles/processes?range=5m..0s");
    let burner_row = processes
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"].as_u64() == Some(burner.pid().into()))
        .unwrap_or_else(|| panic!("no pid {pid} in {processes}"));
    assert_eq!(burner_row["name"], "burn_nofp");
    assert!(u64_of(&burner_row["samples"]) >= 200);
    // Its one thread, by id and name, holds its samples; the stored
    // profiles name this host.
    assert_eq!(
        burner_row["threads"],
        serde_json::json!([{ "tid": burner.pid(), "name": "burn_nofp", "samples": burner_row["samples"] }])
    );
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(burner_row["host"], host.trim());
    assert_eq!(top["hosts"][0]["host"], host.trim(), "{top}");
    // The thread filter and a graph rooted at process, then thread.
    let by_thread = json(&format!(
        "/api/profiles/top?range=5m..0s&pid={pid}&thread=%5Eburn_nofp%24&top=500"
    ));
    assert!(u64_of(&by_thread["samples"]) >= 200, "{by_thread}");
    let no_thread = json(&format!(
        "/api/profiles/top?range=5m..0s&pid={pid}&thread=nothing"
    ));
    assert_eq!(u64_of(&no_thread["samples"]), 0, "{no_thread}");
    let (_, _, svg) = get(&format!(
        "/api/profiles/flamegraph?range=5m..0s&pid={pid}&by=process,thread"
    ));
    let frames = svg_frames(&String::from_utf8(svg).unwrap());
    let process = format!("burn_nofp ({pid})");
    for root in [process.as_str(), "burn_nofp"] {
        assert!(frames.iter().any(|f| f.0 == root), "no {root} frame");
    }

    // The flame graph and folded stacks name the hot function.
    let (status, content_type, svg) =
        get(&format!("/api/profiles/flamegraph?range=5m..0s&pid={pid}"));
    assert_eq!((status, content_type.as_str()), (200, "image/svg+xml"));
    let svg = String::from_utf8(svg).unwrap();
    assert!(
        svg_frames(&svg).iter().any(|(name, _, _)| name == "hot"),
        "{svg}"
    );
    let (status, _, folded) = get(&format!("/api/profiles/folded?range=5m..0s&pid={pid}"));
    assert_eq!(status, 200);
    let folded = String::from_utf8(folded).unwrap();
    assert!(
        folded
            .lines()
            .any(|l| l.contains(";main;") && l.contains(";hot ")),
        "{folded}"
    );

    // The pprof download: gzip pprof that sonde reads back.
    let (status, _, pb) = get(&format!("/api/profiles/pprof?range=5m..0s&pid={pid}"));
    assert_eq!(status, 200);
    assert_eq!(&pb[..2], &[0x1f, 0x8b]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("range.pb.gz");
    fs::write(&file, &pb).unwrap();
    let (ok, stdout, stderr) = sonde(&[
        "profile",
        "diff",
        file.to_str().unwrap(),
        file.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        ok && stdout.contains("\"function\":\"hot\""),
        "{stdout}{stderr}"
    );

    // A diff of the range against itself moves nothing.
    let diff = json(&format!(
        "/api/profiles/diff?base=5m..0s&new=5m..0s&pid={pid}"
    ));
    let rows = diff["functions"].as_array().unwrap();
    assert!(
        !rows.is_empty() && rows.iter().all(|r| f64_of(&r["delta"]) == 0.0),
        "{diff}"
    );
    let (status, content_type, _) = get(&format!(
        "/api/profiles/diff/flamegraph?base=5m..0s&new=5m..0s&pid={pid}"
    ));
    assert_eq!((status, content_type.as_str()), (200, "image/svg+xml"));

    // Bad requests say what is wrong, in JSON; nothing changes the agent.
    for (path, status, says) in [
        (
            "/api/profiles/top?range=10m..20m",
            400,
            "longer ago to shorter ago",
        ),
        ("/api/profiles/top?range=soon", 400, "not a range"),
        ("/api/profiles/top?pid=abc", 400, "not a process id"),
        ("/api/profiles/top?top=0", 400, "from 1 to"),
        ("/api/profiles/top?seconds=30", 400, "unknown parameter"),
        ("/api/profiles/top?thread=%28", 400, "thread pattern"),
        (
            "/api/profiles/flamegraph?by=pod",
            400,
            "host, process or thread",
        ),
        (
            "/api/profiles/top?range=48h..47h",
            404,
            "48h..47h is before the first stored profile, at ",
        ),
        ("/api/profiles/nothing", 404, "no such path"),
    ] {
        let (got, content_type, body) = get(path);
        let body: Json = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            (got, content_type.as_str()),
            (status, "application/json"),
            "{path}: {body}"
        );
        assert!(
            body["error"].as_str().unwrap().contains(says),
            "{path}: {body}"
        );
    }
    let (status, _, _) = admin_request("POST", agent.admin, "/api/profiles/top");
    assert_eq!(status, 405);
    assert_eq!(agent.metric("sonde_profiler_running"), Some(1.0));
    drop(burner);
}

/// The rows of the page's table: (function, the class of its change cell).
fn page_rows(dom: &str) -> Vec<(String, String)> {
    dom.split("<tr data-function=\"")
        .skip(1)
        .map(|row| {
            let name = row.split('"').next().unwrap().to_string();
            let class = row
                .split("</tr>")
                .next()
                .unwrap()
                .rsplit("<td class=\"")
                .next()
                .and_then(|c| c.split('"').next())
                .unwrap_or("")
                .to_string();
            (name, class)
        })
        .collect()
}

/// Each frame of the page's (first) flame graph: its name and the top of
/// its box.
fn page_frame_tops(dom: &str) -> Vec<(String, f64)> {
    dom.split("<g class=\"frame\" data-name=\"")
        .skip(1)
        .map(|g| {
            let name = g.split('"').next().unwrap().to_string();
            let rect = &g[g.find("<rect").unwrap()..];
            let y = rect
                .split(" y=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            (name, y.parse().unwrap())
        })
        .collect()
}

#[test]
fn the_profiles_page_shows_the_hot_function_and_what_changed_in_chromium() {
    let Some(chromium) = common::browser::chromium() else {
        return;
    };
    let _cpu = exclusive();
    // Long enough for a slow, busy machine; killed on drop.
    let burner = Program::start(&programs().burn_nofp, &["600"]);
    burner.wait_line("phase 1");
    let pid = burner.pid().to_string();
    let agent = profiling_agent(
        99,
        "core_cost_per_hour = \"0.10 USD\"\nco2_grams_per_core_hour = 50.0",
    );
    let started = Instant::now();
    let base_url = format!("http://127.0.0.1:{}", agent.admin);
    wait_for("200 samples of the burner stored", WAIT, || {
        let (_, _, body) = admin_request(
            "GET",
            agent.admin,
            &format!("/api/profiles/top?range=5m..0s&pid={pid}"),
        );
        let top: Json = serde_json::from_slice(&body).ok()?;
        (top["samples"].as_u64()? >= 200).then_some(())
    });
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    fs::create_dir_all(&shots).unwrap();

    // One range: the hot function leads the table and is in the graph.
    let dom = common::browser::render_page(
        &chromium,
        &format!("{base_url}/profiles?range=5m..0s&pid={pid}"),
        Some(&shots.join("profiles.png")),
    );
    let rows = page_rows(&dom);
    assert_eq!(
        rows.first().map(|r| r.0.as_str()),
        Some("hot"),
        "{rows:?}\n{dom}"
    );
    assert!(rows.iter().any(|r| r.0 == "cold"), "{rows:?}");
    assert!(
        dom.contains("<g class=\"frame\" data-name=\"hot\""),
        "{dom}"
    );
    assert!(dom.contains("samples over"), "{dom}");
    // The graph is an icicle: the root on top, where the page shows it
    // first, and every other frame below it.
    assert!(dom.contains("data-layout=\"icicle\""), "{dom}");
    let tops = page_frame_tops(&dom);
    let root = tops.iter().find(|f| f.0 == "all").unwrap().1;
    assert!(tops.iter().all(|f| f.0 == "all" || f.1 > root), "{tops:?}");
    // Priced in [profiler]: a year's cost and CO2 of each function.
    for heading in [">Self USD/year<", ">Total CO2 kg/year<"] {
        assert!(dom.contains(heading), "no {heading} column: {dom}");
    }
    assert!(!dom.contains("class=\"summary error\""), "{dom}");

    // Focused on `work`: its callers run up to main, its callees are the
    // two loops, and the table still holds the whole profile.
    let dom = common::browser::render_page(
        &chromium,
        &format!("{base_url}/profiles?range=5m..0s&pid={pid}&focus=work"),
        Some(&shots.join("profiles-focus.png")),
    );
    let (callers, callees) = dom
        .split_once("Callees of work")
        .unwrap_or_else(|| panic!("no callees graph: {dom}"));
    let callers = callers
        .split_once("Callers of work")
        .unwrap_or_else(|| panic!("no callers graph: {dom}"))
        .1;
    let frame = |graph: &str, name: &str| {
        graph.contains(&format!("<g class=\"frame\" data-name=\"{name}\""))
    };
    assert!(
        frame(callers, "main") && !frame(callers, "hot"),
        "{callers}"
    );
    assert!(
        frame(callees, "hot") && frame(callees, "cold") && !frame(callees, "main"),
        "{callees}"
    );
    assert_eq!(page_rows(&dom).first().map(|r| r.0.as_str()), Some("hot"));

    // The classic layout is a choice: the root at the bottom.
    let dom = common::browser::render_page(
        &chromium,
        &format!("{base_url}/profiles?range=5m..0s&pid={pid}&layout=flame"),
        None,
    );
    assert!(dom.contains("data-layout=\"flame\""), "{dom}");
    let tops = page_frame_tops(&dom);
    let root = tops.iter().find(|f| f.0 == "all").unwrap().1;
    assert!(tops.iter().all(|f| f.0 == "all" || f.1 < root), "{tops:?}");

    // The search hides the rows that do not match and keeps the shares.
    let dom = common::browser::render_page(
        &chromium,
        &format!("{base_url}/profiles?range=5m..0s&pid={pid}&q=cold"),
        None,
    );
    let hot_row = dom
        .split("<tr data-function=\"hot\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no hot row: {dom}"));
    assert!(hot_row.starts_with(" class=\"hidden\""), "{hot_row}");
    let cold_row = dom.split("<tr data-function=\"cold\"").nth(1).unwrap();
    assert!(cold_row.starts_with('>'), "cold is shown: {cold_row}");

    // Phase 2 swaps the shares; the comparison marks hot shrinking and
    // cold growing, in the table and in the differential graph.
    let periods = agent.metric("sonde_profiler_periods_total").unwrap();
    assert!(Command::new("kill")
        .args(["-USR1", &pid])
        .status()
        .unwrap()
        .success());
    burner.wait_line("phase 2");
    let switched = Instant::now();
    wait_periods(&agent, periods, 4.0);
    let ago = |t: Instant| t.elapsed().as_secs();
    let base = format!("{}s..{}s", ago(started) + 1, ago(switched) + 2);
    let new = format!("{}s..0s", ago(switched).saturating_sub(1));
    let dom = common::browser::render_page(
        &chromium,
        &format!("{base_url}/profiles?compare=1&base={base}&new={new}&pid={pid}"),
        Some(&shots.join("profiles-diff.png")),
    );
    let rows = page_rows(&dom);
    let class = |f: &str| rows.iter().find(|r| r.0 == f).map(|r| r.1.clone());
    assert_eq!(
        class("cold").as_deref(),
        Some("grew"),
        "{base} {new}: {rows:?}"
    );
    assert_eq!(
        class("hot").as_deref(),
        Some("shrank"),
        "{base} {new}: {rows:?}"
    );
    assert!(dom.contains(">Change USD/year<"), "{dom}");
    assert!(
        dom.contains("<g class=\"frame\" data-name=\"cold\""),
        "{dom}"
    );
    eprintln!("screenshots in {}", shots.display());
}

#[test]
fn the_profiles_page_filters_by_thread_and_roots_the_graph_at_threads_in_chromium() {
    let Some(chromium) = common::browser::chromium() else {
        return;
    };
    let _cpu = exclusive();
    let program = Program::start(&programs().threads, &["600"]);
    program.wait_line("a running");
    let pid = program.pid().to_string();
    assert!(Command::new("kill")
        .args(["-USR1", &pid])
        .status()
        .unwrap()
        .success());
    program.wait_line("b running");
    let agent = profiling_agent(99, "");
    let top_of = |thread: &str| -> Option<Json> {
        let (_, _, body) = admin_request(
            "GET",
            agent.admin,
            &format!("/api/profiles/top?range=5m..0s&pid={pid}&thread={thread}"),
        );
        serde_json::from_slice(&body).ok()
    };
    wait_for("100 samples of each thread stored", WAIT, || {
        let enough = |t| Some(top_of(t)?["samples"].as_u64()? >= 100);
        (enough("spin-a")? && enough("spin-b")?).then_some(())
    });
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    fs::create_dir_all(&shots).unwrap();
    let dom = common::browser::render_page(
        &chromium,
        &format!(
            "http://127.0.0.1:{}/profiles?range=5m..0s&pid={pid}&thread=%5Espin-a%24&by=process%2Cthread",
            agent.admin
        ),
        Some(&shots.join("profiles-threads.png")),
    );
    assert!(!dom.contains("class=\"summary error\""), "{dom}");
    let rows = page_rows(&dom);
    assert_eq!(
        rows.first().map(|r| r.0.as_str()),
        Some("spin_a"),
        "{rows:?}"
    );
    assert!(!rows.iter().any(|r| r.0 == "spin_b"), "{rows:?}");
    let frame = |name: &str| dom.contains(&format!("<g class=\"frame\" data-name=\"{name}\""));
    assert!(
        frame(&format!("threads ({pid})")) && frame("spin-a"),
        "{dom}"
    );
    assert!(!frame("spin-b") && !frame("spin_b"), "{dom}");
    // The filter box offers the threads' names.
    for name in ["spin-a", "spin-b"] {
        assert!(
            dom.contains(&format!("<option value=\"{name}\"")),
            "no {name} option: {dom}"
        );
    }
}

#[test]
fn the_agent_page_shows_receivers_sinks_series_and_the_profiler_in_chromium() {
    let Some(chromium) = common::browser::chromium() else {
        return;
    };
    let port = common::free_port();
    let agent = common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\ninterval = \"1s\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n{}\n[profiler]\nperiod = \"1s\"\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
            dir.join("data").display(),
            common::statsd_receiver(port),
            dir.join("points.jsonl").display()
        )
    });
    for i in 0..100 {
        common::udp_send(port, format!("page.hits:1|c|#n:{}", i % 5).as_bytes());
    }
    common::udp_send(port, b"not a statsd line");
    wait_for("the points counted and a profile stored", WAIT, || {
        let points = agent.metric(&format!(
            "sonde_receiver_points_total{{receiver=\"udp://127.0.0.1:{port}\",protocol=\"statsd\"}}"
        ))?;
        let periods = agent.metric("sonde_profiler_periods_total")?;
        (points >= 100.0 && periods >= 1.0).then_some(())
    });
    let (status, content_type, body) = admin_request("GET", agent.admin, "/api/metrics");
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    let metrics: Json = serde_json::from_slice(&body).unwrap();
    assert!(metrics["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == "sonde_receiver_points_total"));

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    fs::create_dir_all(&shots).unwrap();
    let dom = common::browser::render_page(
        &chromium,
        &format!("http://127.0.0.1:{}/", agent.admin),
        Some(&shots.join("agent.png")),
    );
    // A table row per receiver and sink, keyed by its name.
    let row = |name: &str| -> String {
        let start = dom
            .find(&format!("<tr data-name=\"{name}\""))
            .unwrap_or_else(|| panic!("no row {name} in {dom}"));
        dom[start..].split("</tr>").next().unwrap().to_string()
    };
    let receiver = row(&format!("udp://127.0.0.1:{port}"));
    assert!(receiver.contains(">statsd<"), "{receiver}");
    assert!(receiver.contains(">100<"), "100 points: {receiver}");
    assert!(
        receiver.contains("malformed"),
        "the bad line's reason: {receiver}"
    );
    let sink = dom
        .split("<tr data-name=\"")
        .find(|r| r.starts_with("file"))
        .unwrap_or_else(|| panic!("no file sink row in {dom}"));
    assert!(sink.contains("<td"), "{sink}");
    assert!(dom.contains("live series of"), "{dom}");
    assert!(dom.contains("class=\"ok\">running<"), "{dom}");
    assert!(dom.contains("updated "), "the page polled: {dom}");
}

#[test]
fn cpu_seconds_cost_and_co2_follow_the_formula_and_unset_prices_add_nothing() {
    let _cpu = exclusive();
    let path = &programs().burn_nofp;
    let burner = Program::burner(path);
    let pid = burner.pid();
    let run = profile_measured(
        &[
            "--duration",
            "3s",
            "--frequency",
            "99",
            "--pid",
            &pid.to_string(),
            "--core-cost-per-hour",
            "0.10 USD",
            "--co2-grams-per-core-hour",
            "50",
        ],
        || vec![runtime(pid)],
    );
    let top = &run.top;
    let cpu = run.window_cpu[0];
    let samples = u64_of(&top["samples"]);
    assert!(
        samples >= 100,
        "the burner got {cpu:.2} CPU-s of 3 s: the host is too busy"
    );
    assert_eq!(top["currency"], "USD", "{top}");
    let hot = row(top, "hot", path);
    let self_cpu_s = f64_of(&hot["self_cpu_s"]);
    // The burner's CPU time in the window, 70% of it in hot: within the
    // share's ±10 points and the sampling error (1/√n) of the docs.
    let error = 0.1 + 1.0 / (u64_of(&hot["self_samples"]) as f64).sqrt();
    assert!(
        (self_cpu_s - 0.7 * cpu).abs() <= error * cpu,
        "hot: {self_cpu_s} CPU-s, the burner ran {cpu:.3} CPU-s: {top}"
    );
    assert!((self_cpu_s - u64_of(&hot["self_samples"]) as f64 / 99.0).abs() < 1e-9);
    // The formula of docs/PROFILING.md, exactly.
    let year = 365.25 * 86_400.0 / f64_of(&top["duration_s"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    for side in ["self", "total"] {
        let cpu_s = f64_of(&hot[format!("{side}_cpu_s")]);
        let cost = f64_of(&hot[format!("{side}_cost")]);
        let co2 = f64_of(&hot[format!("{side}_co2_kg")]);
        assert!(close(cost, cpu_s / 3600.0 * 0.10), "{side} cost: {hot}");
        assert!(
            close(co2, cpu_s / 3600.0 * 50.0 / 1000.0),
            "{side} CO2: {hot}"
        );
        assert!(
            close(f64_of(&hot[format!("{side}_cost_per_year")]), cost * year),
            "{hot}"
        );
        assert!(
            close(f64_of(&hot[format!("{side}_co2_kg_per_year")]), co2 * year),
            "{hot}"
        );
    }
    // Without prices, no cost or CO2 at all.
    let plain = profile_json(&["--duration", "1s", "--pid", &pid.to_string()]);
    assert!(plain.get("currency").is_none(), "{plain}");
    for r in plain["functions"].as_array().unwrap() {
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert!(
            keys.iter()
                .all(|k| !k.contains("cost") && !k.contains("co2")),
            "{keys:?}"
        );
        assert!(r.get("self_cpu_s").is_some(), "{r}");
    }
}

/// Self samples by function name of a `--json` top table.
fn self_by_function(top: &Json) -> std::collections::BTreeMap<String, u64> {
    top["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["function"].as_str().unwrap().to_owned(),
                u64_of(&r["self_samples"]),
            )
        })
        .collect()
}

/// Sums the counts of folded lines by their first `n` frames.
fn folded_by_prefix(text: &str, n: usize) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no count on {line:?}"));
        let prefix: Vec<&str> = stack.split(';').take(n).collect();
        *out.entry(prefix.join(";")).or_default() += count.parse::<u64>().unwrap();
    }
    out
}

#[test]
fn the_thread_filter_keeps_only_the_named_threads_functions() {
    let _cpu = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("threads.pb.gz");
    let program = Program::start(&programs().threads, &[BURNER_SECONDS]);
    program.wait_line("a running");
    let pid = program.pid().to_string();
    // spin-b is born and names itself while sonde samples, so its name
    // comes from the perf stream's fork and comm records; spin-a's was
    // set before, and is read from /proc.
    let child = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(["profile", "--duration", "3s", "--pid", &pid, "--pprof"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    wait_for("sonde's perf events to open", WAIT, || {
        has_perf_events(&fds).then_some(())
    });
    let status = Command::new("kill").args(["-USR1", &pid]).status().unwrap();
    assert!(status.success());
    program.wait_line("b running");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let file = file.to_str().unwrap();
    let all = self_by_function(&profile_json(&["merge", file]));
    let (a, b) = (all["spin_a"], all.get("spin_b").copied().unwrap_or(0));
    assert!(
        a >= 50 && b >= 20,
        "spin_a {a}, spin_b {b} samples: {all:?}"
    );
    let only_a = self_by_function(&profile_json(&["merge", file, "--thread", "^spin-a$"]));
    assert_eq!(only_a.get("spin_a"), Some(&a), "{only_a:?}");
    assert!(!only_a.contains_key("spin_b"), "{only_a:?}");
    // A pattern found anywhere in the name, as grep does.
    let only_b = self_by_function(&profile_json(&["merge", file, "--thread", "n-b"]));
    assert!(!only_b.contains_key("spin_a"), "{only_b:?}");
    // The samples spin-b took before it named itself carry its maker's
    // name: a few at most.
    let named_b = only_b.get("spin_b").copied().unwrap_or(0);
    assert!(
        named_b as f64 >= 0.9 * b as f64,
        "{named_b} of spin_b's {b} samples are under the name spin-b"
    );

    // Rooted at process, then thread.
    let folded = dir.path().join("stacks.txt");
    profile_json(&[
        "merge",
        file,
        "--by",
        "process,thread",
        "--folded",
        folded.to_str().unwrap(),
    ]);
    let by_thread = folded_by_prefix(&fs::read_to_string(&folded).unwrap(), 2);
    let process = format!("threads ({pid})");
    assert!(
        by_thread[&format!("{process};spin-a")] >= a,
        "{by_thread:?}"
    );
    assert!(
        by_thread[&format!("{process};spin-b")] >= named_b,
        "{by_thread:?}"
    );

    // Straight from sampling, the same flag.
    let sampled = self_by_function(&profile_json(&[
        "--duration",
        "1s",
        "--pid",
        &pid,
        "--thread",
        "^spin-b$",
    ]));
    assert!(sampled.contains_key("spin_b"), "{sampled:?}");
    assert!(!sampled.contains_key("spin_a"), "{sampled:?}");
    let bad = sonde(&["profile", "merge", file, "--thread", "spin-("]);
    assert!(
        !bad.0 && bad.2.contains("thread pattern \"spin-(\""),
        "{}",
        bad.2
    );
}

#[test]
fn exports_of_two_hosts_merge_into_one_view_with_each_hosts_totals() {
    let _cpu = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let path = &programs().burn_fp;
    let burner = Program::burner(path);
    let pid = burner.pid().to_string();
    let mut exports = Vec::new();
    for host in ["host-a", "host-b"] {
        let config = dir.path().join(format!("{host}.toml"));
        fs::write(
            &config,
            format!(
                "[agent]\nhostname = \"{host}\"\n[[receivers]]\nprotocol = \"statsd\"\n\
                 listen = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"console\"\n"
            ),
        )
        .unwrap();
        let file = dir.path().join(format!("export-{host}.pb.gz"));
        let top = profile_json(&[
            "--duration",
            "1s",
            "--pid",
            &pid,
            "--config",
            config.to_str().unwrap(),
            "--pprof",
            file.to_str().unwrap(),
        ]);
        let samples = u64_of(&top["samples"]);
        assert!(samples > 0, "{top}");
        assert_eq!(
            top["hosts"],
            serde_json::json!([{ "host": host, "samples": samples }])
        );
        exports.push((host, file.to_str().unwrap().to_owned(), top));
    }
    drop(burner);
    let (a, b) = (&exports[0], &exports[1]);
    let (na, nb) = (u64_of(&a.2["samples"]), u64_of(&b.2["samples"]));

    let (folded, svg) = (dir.path().join("fleet.txt"), dir.path().join("fleet.svg"));
    let merged = profile_json(&[
        "merge",
        &a.1,
        &b.1,
        "--by",
        "host",
        "--folded",
        folded.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(u64_of(&merged["samples"]), na + nb);
    assert_eq!(
        merged["hosts"],
        serde_json::json!([
            { "host": "host-a", "samples": na },
            { "host": "host-b", "samples": nb },
        ])
    );
    // hot's samples add up across the two.
    let hot = |top: &Json| u64_of(&row(top, "hot", path)["self_samples"]);
    assert_eq!(hot(&merged), hot(&a.2) + hot(&b.2));
    // The host is the first frame of every folded stack and of the graph.
    let by_host = folded_by_prefix(&fs::read_to_string(&folded).unwrap(), 1);
    assert_eq!(
        by_host.into_iter().collect::<Vec<_>>(),
        [("host-a".to_owned(), na), ("host-b".to_owned(), nb)]
    );
    let frames = svg_frames(&fs::read_to_string(&svg).unwrap());
    for (host, n) in [("host-a", na), ("host-b", nb)] {
        let widths: Vec<u64> = frames.iter().filter(|f| f.0 == host).map(|f| f.1).collect();
        assert_eq!(widths, [n], "{host}'s frame");
    }
    // One host singled out reads as its export alone.
    let only_b = profile_json(&["merge", &a.1, &b.1, "--host", "host-b"]);
    assert_eq!(self_by_function(&only_b), self_by_function(&b.2));
    assert_eq!(only_b["duration_s"], b.2["duration_s"]);
    assert_eq!(only_b["hosts"], b.2["hosts"]);
    let text = sonde(&["profile", "merge", &a.1, &b.1]);
    assert!(text.0, "{}", text.2);
    for (host, n) in [("host-a", na), ("host-b", nb)] {
        assert!(
            text.1.contains(&format!("host {host}: {n} samples")),
            "{}",
            text.1
        );
    }
}

/// Samples per (pid, leaf function) of `profile`.
fn leaf_counts(profile: &sonde_profile::Profile) -> BTreeMap<(u32, String), u64> {
    let mut out = BTreeMap::new();
    for s in &profile.stacks {
        let pid = profile.processes[s.process as usize].pid;
        let leaf = s.frames.last().map_or(String::new(), |&f| {
            profile.functions[f as usize].name.clone()
        });
        *out.entry((pid, leaf)).or_insert(0) += s.count;
    }
    out
}

#[test]
fn each_period_goes_through_the_opentelemetry_collector_with_the_samples_of_the_local_store() {
    let _cpu = exclusive();
    // The Collector forwards what its OTLP receiver takes to this server.
    let forwarded = common::http_server::Server::start(0, 200);
    let Some(col) = common::backends::or_skip(
        common::backends::OtelCollector::start_with_profiles(forwarded.port),
    ) else {
        return;
    };
    let p = programs();
    let outside = Program::burner(&p.burn_fp);
    let inside = Program::burner(&p.burn_nofp);
    let cgroup = ContainerCgroup::create();
    if let Some(c) = &cgroup {
        fs::write(c.procs(), inside.pid().to_string()).unwrap();
    } else {
        eprintln!("no writable cgroup2 hierarchy (needs root): container.id is not checked");
    }
    let agent = common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"fleet-a\"\n\n\
             [profiler]\nfrequency = 99\nperiod = \"1s\"\n\n\
             [[sinks]]\ntype = \"otlp_http\"\nurl = \"{}\"\ninputs = [\"profiles\"]\n",
            dir.join("data").display(),
            col.metrics_url()
        )
    });
    let pids = [outside.pid(), inside.pid()];
    let decoded = || -> Vec<sonde_profile::otlp::DecodedSample> {
        forwarded
            .accepted()
            .iter()
            .flat_map(|g| sonde_profile::otlp::decode_samples(&g.body).unwrap())
            .collect()
    };
    // Three periods in which both burners were sampled.
    let samples = wait_for(
        "three periods of both burners through the Collector",
        WAIT,
        || {
            let got = decoded();
            let periods: std::collections::BTreeSet<u64> = got
                .iter()
                .filter(|s| {
                    pids.iter().all(|&pid| {
                        got.iter().any(|o| {
                            o.start_ns == s.start_ns
                                && o.attributes
                                    .contains(&("process.pid".into(), pid.to_string()))
                        })
                    })
                })
                .map(|s| s.start_ns)
                .collect();
            (periods.len() >= 3).then_some(got)
        },
    );
    assert!(
        agent
            .metric("sonde_sink_profiles_total{sink=\"otlp_http\"}")
            .unwrap()
            >= 3.0,
        "{}",
        agent.stderr()
    );
    // Each period as the Collector passed it on equals the local store's
    // view of it, function for function, process for process.
    let store = sonde_profile::store::Store::reader(&agent.path("data"));
    let starts: std::collections::BTreeSet<u64> = samples.iter().map(|s| s.start_ns).collect();
    for &start in &starts {
        let mut sent: BTreeMap<(u32, String), u64> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.start_ns == start) {
            let pid = s
                .attributes
                .iter()
                .find(|(k, _)| k == "process.pid")
                .map(|(_, v)| v.parse().unwrap())
                .unwrap();
            *sent.entry((pid, s.frames[0].clone())).or_insert(0) += s.count as u64;
        }
        let (local, files) = store
            .read(start / 1_000_000_000, start / 1_000_000_000 + 1)
            .unwrap();
        assert_eq!(files, 1, "period {start}");
        assert_eq!(sent, leaf_counts(&local), "period {start}");
    }
    // The attributes the semantic conventions name.
    assert!(samples.iter().all(|s| s.host == "fleet-a"));
    let attribute = |s: &sonde_profile::otlp::DecodedSample, key: &str| {
        s.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    for (pid, program) in [(outside.pid(), &p.burn_fp), (inside.pid(), &p.burn_nofp)] {
        let mine: Vec<_> = samples
            .iter()
            .filter(|s| attribute(s, "process.pid") == Some(pid.to_string()))
            .collect();
        assert!(!mine.is_empty());
        let name = program.file_name().unwrap().to_str().unwrap();
        for s in &mine {
            assert_eq!(
                attribute(s, "process.executable.name").as_deref(),
                Some(name)
            );
            assert_eq!(attribute(s, "thread.name").as_deref(), Some(name));
            assert!(attribute(s, "thread.id").is_some());
            let container = attribute(s, "container.id");
            let pod = attribute(s, "k8s.pod.uid");
            match (&cgroup, pid == inside.pid()) {
                (Some(c), true) => {
                    assert_eq!(container.as_deref(), Some(c.id.as_str()));
                    assert_eq!(pod.as_deref(), Some(c.pod.as_str()));
                }
                _ => assert_eq!((container, pod), (None, None)),
            }
        }
    }
    // The Collector's own view: its debug exporter printed the profiles
    // with the period's sample type.
    let log = col.log();
    assert!(log.contains("process.executable.name"), "{log}");
    drop(inside);
    drop(outside);
}

#[test]
fn periods_wait_in_the_disk_buffer_through_an_outage_and_a_kill_and_arrive_once() {
    let _cpu = exclusive();
    let server = common::http_server::Server::start(0, 503);
    let burner = Program::burner(&programs().burn_fp);
    let mut agent = common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n\
             [profiler]\nfrequency = 19\nperiod = \"1s\"\n\n\
             [[sinks]]\ntype = \"otlp_http\"\nurl = \"http://127.0.0.1:{}/v1/metrics\"\ninputs = [\"profiles\"]\n\
             buffer = {{ type = \"disk\" }}\nretry_max_backoff = \"500ms\"\n",
            dir.join("data").display(),
            server.port
        )
    });
    // The backend refuses (503): the periods queue on disk.
    wait_for("three periods in the disk buffer", WAIT, || {
        (agent.metric("sonde_sink_queue_batches{sink=\"otlp_http\"}")? >= 3.0).then_some(())
    });
    agent.kill();
    let stored: Vec<u64> = sonde_profile::store::Store::reader(&agent.path("data"))
        .list()
        .unwrap()
        .iter()
        .map(|e| e.start_s)
        .collect();
    assert!(stored.len() >= 3, "{stored:?}");
    assert!(
        agent.path("data/buffers/otlp_http/profiles").is_dir(),
        "no disk buffer of profiles"
    );
    server
        .status
        .store(200, std::sync::atomic::Ordering::SeqCst);
    agent.start_again();
    let starts = || -> BTreeMap<u64, usize> {
        let mut n = BTreeMap::new();
        for g in server.accepted() {
            let samples = sonde_profile::otlp::decode_samples(&g.body).unwrap();
            let period: std::collections::BTreeSet<u64> =
                samples.iter().map(|s| s.start_ns / 1_000_000_000).collect();
            assert_eq!(period.len(), 1, "one period per request");
            *n.entry(*period.first().unwrap()).or_insert(0) += 1;
        }
        n
    };
    // Every period stored before the kill arrives, once.
    let got = wait_for("every stored period delivered", WAIT, || {
        let got = starts();
        stored.iter().all(|s| got.contains_key(s)).then_some(got)
    });
    for s in &stored {
        assert_eq!(got[s], 1, "period {s} arrived {} times: {got:?}", got[s]);
    }
    let log = agent.stderr();
    assert!(
        log.contains("disk buffer kept requests from the last run"),
        "{log}"
    );
    drop(burner);
}

/// Samples per (period start in seconds, pid, leaf function) in the
/// `clickhouse` sink's tables, each sample row of a batch counted once
/// however many times the batch was written.
fn clickhouse_leaf_counts(
    ch: &common::clickhouse::ClickHouse,
) -> BTreeMap<u64, BTreeMap<(u32, String), u64>> {
    let text = ch.query(
        "SELECT toUInt32(period) AS p, pid, frames[length(frames)] AS leaf, sum(n) FROM \
         (SELECT period, host, pid, thread, stack_id, batch, any(samples) AS n FROM sonde.profile_samples \
          GROUP BY period, host, pid, thread, stack_id, batch) AS samples \
         ALL INNER JOIN (SELECT stack_id, any(frames) AS frames FROM sonde.profile_stacks GROUP BY stack_id) AS stacks \
         USING stack_id GROUP BY p, pid, leaf FORMAT TabSeparated",
    );
    let mut out: BTreeMap<u64, BTreeMap<(u32, String), u64>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        out.entry(f[0].parse().unwrap()).or_default().insert(
            (f[1].parse().unwrap(), f[2].to_string()),
            f[3].parse().unwrap(),
        );
    }
    out
}

#[test]
fn each_period_lands_in_clickhouse_once_through_an_outage_and_a_kill() {
    // Its burner would count in another test's share of the CPU.
    let _cpu = exclusive();
    let Some(mut ch) = common::backends::or_skip(common::clickhouse::ClickHouse::start()) else {
        return;
    };
    let burner = Program::burner(&programs().burn_fp);
    let mut agent = common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"fleet-a\"\n\n\
             [profiler]\nfrequency = 19\nperiod = \"1s\"\n\n\
             [[sinks]]\ntype = \"clickhouse\"\nurl = \"{}\"\ninputs = [\"profiles\"]\n\
             buffer = {{ type = \"disk\" }}\nretry_max_backoff = \"500ms\"\n",
            dir.join("data").display(),
            ch.http_url()
        )
    });
    let delivered = |agent: &common::Agent| {
        agent
            .metric("sonde_sink_profiles_total{sink=\"clickhouse\"}")
            .unwrap_or(0.0)
    };
    wait_for("three periods in ClickHouse", WAIT, || {
        (delivered(&agent) >= 3.0).then_some(())
    });
    // The tables the sink made, with one row per thread name: the
    // burner's one thread is one row per stack and period.
    let tables = ch.query("SELECT name FROM system.tables WHERE database = 'sonde' ORDER BY name");
    assert_eq!(tables, "logs\nprofile_samples\nprofile_stacks\n");
    // ClickHouse away for three periods, and the agent killed in the
    // middle: the periods wait in the disk buffer.
    ch.stop();
    let before = delivered(&agent);
    wait_for("periods queued while ClickHouse is down", WAIT, || {
        (agent.metric("sonde_sink_queue_batches{sink=\"clickhouse\"}")? >= 2.0).then_some(())
    });
    // Killed at any moment: the periods it queued are in its disk
    // buffer, and one it stored but had not queued yet is sent from the
    // store at the next start.
    agent.kill();
    agent.start_again();
    wait_for("a period queued after the restart", WAIT, || {
        (agent.metric("sonde_sink_queue_batches{sink=\"clickhouse\"}")? >= 2.0).then_some(())
    });
    ch.restart();
    let store = sonde_profile::store::Store::reader(&agent.path("data"));
    // The stored periods that have samples: a period without (the host
    // idle once the burner has ended, or a restart a moment before a
    // period's end) is stored but sent nowhere.
    let with_samples = |starts: Vec<u64>| -> Vec<u64> {
        starts
            .into_iter()
            .filter(|&s| !store.read(s, s + 1).unwrap().0.stacks.is_empty())
            .collect()
    };
    let every_stored_period = |ch: &common::clickhouse::ClickHouse| {
        // Every period the agent stored is in ClickHouse, with its samples.
        let deadline = std::time::Instant::now() + WAIT;
        let got = loop {
            let stored = with_samples(store.list().unwrap().iter().map(|e| e.start_s).collect());
            let got = clickhouse_leaf_counts(ch);
            // The newest period may be on its way.
            let missing: Vec<u64> = stored[..stored.len().saturating_sub(1)]
                .iter()
                .filter(|s| !got.contains_key(s))
                .copied()
                .collect();
            if missing.is_empty() {
                break got;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "stored but not in ClickHouse after {WAIT:?}: {missing:?} of {stored:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let stored: Vec<u64> = store.list().unwrap().iter().map(|e| e.start_s).collect();
        for s in stored.iter().filter(|s| got.contains_key(s)) {
            let (local, _) = store.read(*s, s + 1).unwrap();
            assert_eq!(got[s], leaf_counts(&local), "period {s}");
        }
        got
    };
    let got = every_stored_period(&ch);
    assert!(before >= 3.0);
    let log = agent.stderr();
    assert!(
        log.contains("disk buffer kept requests from the last run"),
        "{log}"
    );

    // The kill that lands after a period is stored and before it is
    // queued, made certain: ClickHouse away again, the agent killed, and
    // then its disk buffer of profiles emptied (the periods it queued are
    // now only in the local store) and its record of how far it got
    // moved back to a period ClickHouse has (that one and the next are
    // sent twice).
    ch.stop();
    wait_for("periods queued while ClickHouse is down", WAIT, || {
        (agent.metric("sonde_sink_queue_batches{sink=\"clickhouse\"}")? >= 2.0).then_some(())
    });
    agent.kill();
    let buffer = agent.path("data/buffers/clickhouse/profiles");
    let cursor = buffer.join("queued_through");
    let through: u64 = std::fs::read_to_string(&cursor)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let delivered: Vec<u64> = got.keys().copied().collect();
    let back_to = delivered[delivered.len() - 2];
    assert!(back_to < through);
    std::fs::remove_dir_all(&buffer).unwrap();
    std::fs::create_dir_all(&buffer).unwrap();
    std::fs::write(&cursor, format!("{back_to}\n")).unwrap();
    let unqueued = store
        .list()
        .unwrap()
        .iter()
        .filter(|e| e.start_s > back_to)
        .count();
    assert!(unqueued >= 3, "{unqueued} periods after {back_to}");
    // No merge may collapse the copies before they are counted below.
    ch.restart();
    ch.query("SYSTEM STOP MERGES sonde.profile_samples");
    agent.start_again();
    let resent: Vec<u64> = with_samples(
        store
            .list()
            .unwrap()
            .iter()
            .map(|e| e.start_s)
            .filter(|&s| s > back_to && s <= through)
            .collect(),
    );
    wait_for(
        "the periods after the moved record in ClickHouse",
        WAIT,
        || {
            let got = clickhouse_leaf_counts(&ch);
            resent.iter().all(|s| got.contains_key(s)).then_some(())
        },
    );
    every_stored_period(&ch);
    // The periods sent twice are copies of one batch, counted once above.
    let copied = ch.query(
        "SELECT count() FROM (SELECT batch FROM sonde.profile_samples \
         GROUP BY batch HAVING count() > any(batch_rows))",
    );
    assert!(copied.trim().parse::<u64>().unwrap() >= 1, "{copied}");
    let log = agent.stderr();
    assert!(
        log.contains("sending the stored periods this sink had not queued"),
        "{log}"
    );
    drop(burner);
}

/// The numbers of a TabSeparated answer, row by row, for comparing two
/// engines' answers: integers exactly, fractions to 1e-9.
fn same_answer(a: &str, b: &str) -> bool {
    let rows = |t: &str| -> Vec<Vec<String>> {
        let mut r: Vec<Vec<String>> = t
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect();
        r.sort();
        r
    };
    let (a, b) = (rows(a), rows(b));
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| {
                    p == q
                        || match (p.parse::<f64>(), q.parse::<f64>()) {
                            (Ok(p), Ok(q)) => (p - q).abs() <= 1e-9 * p.abs().max(q.abs()),
                            _ => false,
                        }
                })
        })
}

#[test]
fn the_fleet_store_answers_as_the_local_store_and_the_current_engine_agrees() {
    let _cpu = exclusive();
    let Some(ch) = common::backends::or_skip(common::clickhouse::ClickHouse::start()) else {
        return;
    };
    let Some(chdb) = common::backends::or_skip(common::clickhouse::Chdb::find()) else {
        return;
    };
    let p = programs();
    let one = Program::burner(&p.burn_fp);
    let two = Program::burner(&p.burn_nofp);
    let mut agent = common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"fleet-a\"\n\n\
             [profiler]\nfrequency = 99\nperiod = \"1s\"\n\n\
             [[sinks]]\ntype = \"clickhouse\"\nurl = \"{}\"\ninputs = [\"profiles\"]\n",
            dir.join("data").display(),
            ch.http_url()
        )
    });
    wait_for("three periods in ClickHouse", WAIT, || {
        (agent.metric("sonde_sink_profiles_total{sink=\"clickhouse\"}")? >= 3.0).then_some(())
    });
    // Stopped, the agent has sent its last period: both stores hold the
    // same periods from here on.
    agent.stop();
    let pid = one.pid().to_string();
    drop(one);
    drop(two);
    let data = agent.path("data");
    let data = data.to_str().unwrap();
    let uri = format!(
        "clickhouse://{}/sonde",
        ch.http_url().trim_start_matches("http://")
    );
    let store = |extra: &[&str]| {
        let mut args = vec!["--since", "10m", "--store", &uri];
        args.extend_from_slice(extra);
        profile_json(&args)
    };
    let local = |extra: &[&str]| {
        let mut args = vec!["--since", "10m", "--data-dir", data];
        args.extend_from_slice(extra);
        profile_json(&args)
    };
    // The top table, sample for sample, whole and narrowed.
    for extra in [
        &[][..],
        &["--pid", &pid],
        &["--host", "fleet-a"],
        &["--thread", "^burn_n"],
    ] {
        let (fleet, here) = (store(extra), local(extra));
        assert_eq!(fleet["samples"], here["samples"], "{extra:?}");
        assert_eq!(fleet["hosts"], here["hosts"], "{extra:?}");
        let rows = |top: &Json| {
            function_rows(top, |r| {
                (u64_of(&r["self_samples"]), u64_of(&r["total_samples"]))
            })
        };
        assert_eq!(rows(&fleet), rows(&here), "{extra:?}");
        assert!(u64_of(&here["samples"]) > 0, "{extra:?}: {here}");
    }
    assert_eq!(u64_of(&store(&["--host", "fleet-b"])["samples"]), 0);
    // Folded stacks from the stacks aggregated in ClickHouse.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("fleet.txt"), dir.path().join("local.txt"));
    store(&["--folded", a.to_str().unwrap()]);
    local(&["--folded", b.to_str().unwrap()]);
    let folded = |path: &Path| -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for line in fs::read_to_string(path).unwrap().lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            *out.entry(stack.to_string()).or_insert(0) += n.parse::<u64>().unwrap();
        }
        out
    };
    assert_eq!(folded(&a), folded(&b));
    // A diff of two halves of the stored periods: the same as the local
    // store's, function for function.
    let starts: Vec<u64> = sonde_profile::store::Store::reader(&agent.path("data"))
        .list()
        .unwrap()
        .iter()
        .map(|e| e.start_s)
        .collect();
    let mid = starts[starts.len() / 2];
    let (first, end) = (starts[0], starts[starts.len() - 1] + 1);
    let local_store = sonde_profile::store::Store::reader(&agent.path("data"));
    let here = sonde_profile::views::diff(
        &local_store.read(first, mid).unwrap().0,
        &local_store.read(mid, end).unwrap().0,
        None,
    );
    let fleet = sonde_sinks::clickhouse::store::FleetStore::open(&uri).unwrap();
    let span = |from_s, until_s| sonde_sinks::clickhouse::store::Filter {
        from_s,
        until_s,
        ..Default::default()
    };
    let there = sonde_profile::views::diff_tops(
        &fleet.top(&span(first, mid), None).unwrap(),
        &fleet.top(&span(mid, end), None).unwrap(),
        None,
    );
    let rows = |d: &sonde_profile::views::Diff| -> BTreeMap<(String, String), (f64, f64)> {
        d.functions
            .iter()
            .map(|r| {
                (
                    (r.function.clone(), r.module.clone()),
                    (r.self_base, r.self_new),
                )
            })
            .collect()
    };
    assert_eq!(
        (there.samples_base, there.samples),
        (here.samples_base, here.samples)
    );
    assert_eq!(rows(&there), rows(&here));
    // Split where the periods split above, however recent they all are.
    let age = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .saturating_sub(mid);
    let (base, new) = (format!("10m..{age}s"), format!("{age}s..0s"));
    let (ok, stdout, stderr) = sonde(&["profile", "diff", &base, &new, "--store", &uri, "--json"]);
    assert!(ok, "{stderr}");
    let d: Json = serde_json::from_str(&stdout).unwrap();
    assert!(u64_of(&d["samples_base"]) > 0, "{d}");
    // A retry that wrote a period twice (the server inserted it, the
    // answer was lost): its batch counts once, whatever the filter.
    let fleet = sonde_sinks::clickhouse::store::FleetStore::open(&uri).unwrap();
    let filter = sonde_sinks::clickhouse::store::Filter {
        from_s: 0,
        until_s: u32::MAX.into(),
        ..Default::default()
    };
    assert!(fleet.copies(&filter).unwrap().0.is_empty());
    // No merge collapses the copy before the views see it.
    ch.query("SYSTEM STOP MERGES sonde.profile_samples");
    ch.query(&format!(
        "INSERT INTO sonde.profile_samples SELECT * FROM sonde.profile_samples \
         WHERE period = toDateTime({mid})"
    ));
    let copies = fleet.copies(&filter).unwrap();
    assert_eq!(copies.0.len(), 1, "{copies:?}");
    for extra in [&[][..], &["--pid", &pid]] {
        let (fleet, here) = (store(extra), local(extra));
        assert_eq!(fleet["samples"], here["samples"], "{extra:?}");
        let rows = |top: &Json| function_rows(top, |r| u64_of(&r["self_samples"]));
        assert_eq!(rows(&fleet), rows(&here), "{extra:?}");
    }
    // Every statement of the views on the current engine, on the same
    // rows (the copied batch with them, or what a merge since has left of
    // it: its rows count once either way), answers as on 18.16.
    // The rows as 18.16 holds them: the current engine would collapse a
    // Replacing table's equal rows as it inserts them
    // (`optimize_on_insert`), 18.16 only when it merges.
    let mut setup: Vec<String> = vec!["SET optimize_on_insert = 0".into()];
    setup.extend(sonde_sinks::clickhouse::schema::single("sonde"));
    for table in ["profile_stacks", "profile_samples"] {
        let values = ch.query(&format!("SELECT * FROM sonde.{table} FORMAT Values"));
        setup.push(format!("INSERT INTO sonde.{table} VALUES {values}"));
    }
    let setup: Vec<&str> = setup.iter().map(String::as_str).collect();
    for sql in [
        fleet.top_sql(&filter, &copies),
        fleet.span_sql(&filter, &copies),
        fleet.stacks_sql(&filter, true, &copies),
        fleet.threads_sql(&filter, 10, &copies),
    ] {
        let old = ch.query(&sql);
        let current = chdb
            .query(&setup, &sql)
            .unwrap_or_else(|e| panic!("chDB: {e}\n{sql}"));
        assert!(!old.is_empty(), "{sql}");
        assert!(
            same_answer(&old, &current),
            "ClickHouse 18.16 and the current engine differ (the current one is right):\n{sql}\n18.16:\n{old}\ncurrent:\n{current}"
        );
    }
    // A merge between a view's question for copies and its sums: the
    // copy collapsed, the batch is still read one row per key, and the
    // answer is that of a table that never had the copy.
    let before = ch.query(&fleet.top_sql(&filter, &copies));
    ch.query("SYSTEM START MERGES sonde.profile_samples");
    ch.query("OPTIMIZE TABLE sonde.profile_samples FINAL");
    assert!(fleet.copies(&filter).unwrap().0.is_empty());
    let after = ch.query(&fleet.top_sql(&filter, &copies));
    let plain = ch.query(&fleet.top_sql(&filter, &Default::default()));
    assert!(same_answer(&before, &after), "{before}\n--\n{after}");
    assert!(same_answer(&before, &plain), "{before}\n--\n{plain}");
}

/// Waits until the wall clock is past the second after the newest period
/// the agents under `dirs` stored: a view of `..0s` ends at the current
/// second, so until then it leaves out a period that began in it (the
/// partial one a stopping agent stores).
fn wait_past_the_stored_periods(agents: &[common::Agent]) {
    let newest = agents
        .iter()
        .flat_map(|a| {
            sonde_profile::store::Store::reader(&a.path("data"))
                .list()
                .unwrap()
                .into_iter()
                .map(|e| e.start_s)
        })
        .max()
        .unwrap_or(0);
    wait_for("the clock past the newest stored period", WAIT, || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        (now > newest).then_some(())
    });
}

#[test]
fn three_agents_write_through_a_distributed_table_and_the_fleet_adds_up() {
    let _cpu = exclusive();
    let Some(cluster) = common::backends::or_skip(common::clickhouse::ClickHouseCluster::start(2))
    else {
        return;
    };
    // What `sonde profile schema --cluster sonde` prints, on each shard
    // by hand (ON CLUSTER needs ZooKeeper) and without replication.
    let replicated = regex::Regex::new(r"ReplicatedReplacingMergeTree\([^)]*\)").unwrap();
    for statement in sonde_sinks::clickhouse::schema::cluster("sonde", "sonde") {
        let local = statement.replace(" ON CLUSTER sonde", "");
        cluster.on_each(&replicated.replace(&local, "ReplacingMergeTree()"));
    }
    let p = programs();
    // Two burners (one in a container where cgroup2 is writable) with a
    // known split that swaps halfway, and two named threads.
    let container = ContainerCgroup::create();
    let burners = [Program::burner(&p.burn_fp), Program::burner(&p.burn_nofp)];
    if let Some(c) = &container {
        fs::write(c.procs(), burners[0].pid().to_string()).unwrap();
    }
    let threads = Program::start(&p.threads, &[BURNER_SECONDS]);
    threads.wait_line("a running");
    let servers = cluster.servers();
    let mut agents: Vec<common::Agent> = (0..3)
        .map(|i| {
            let url = servers[i % 2].http_url();
            common::Agent::start_config(|admin, dir| {
                format!(
                    "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"fleet-{i}\"\n\n\
                     [profiler]\nfrequency = 19\nperiod = \"1s\"\n\n\
                     [[sinks]]\ntype = \"clickhouse\"\nurl = \"{url}\"\ninputs = [\"profiles\"]\ncreate_tables = false\n",
                    dir.join("data").display()
                )
            })
        })
        .collect();
    let periods =
        |agent: &common::Agent| agent.metric("sonde_sink_profiles_total{sink=\"clickhouse\"}");
    for agent in &agents {
        wait_for("three periods of each agent", WAIT, || {
            (periods(agent)? >= 3.0).then_some(())
        });
    }
    // Phase 2: hot 30%, cold 70%. The periods before the signal are the
    // diff's base, those after the switch printed its new side.
    let now_s = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let switch_from = now_s().floor() as u64;
    for b in &burners {
        let status = Command::new("kill")
            .args(["-USR1", &b.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    for b in &burners {
        b.wait_line("phase 2");
    }
    let switch_until = now_s().ceil() as u64;
    let before: Vec<f64> = agents.iter().map(|a| periods(a).unwrap()).collect();
    for (agent, before) in agents.iter().zip(before) {
        wait_for("three periods of each agent after the switch", WAIT, || {
            (periods(agent)? >= before + 4.0).then_some(())
        });
    }
    for agent in &mut agents {
        agent.stop();
    }
    drop(burners);
    drop(threads);
    wait_past_the_stored_periods(&agents);
    // An insert into a Distributed table is acknowledged once queued on
    // the server that took it, and reaches its shard in the background:
    // wait until the shards hold every sample the agents stored.
    let stored: u64 = (0..3)
        .map(|i| {
            let data = agents[i].path("data");
            u64_of(
                &profile_json(&["--since", "10m", "--data-dir", data.to_str().unwrap()])["samples"],
            )
        })
        .sum();
    let on_shards = |server: &common::clickhouse::ClickHouse| -> u64 {
        server
            .query(
                "SELECT sum(n) FROM (SELECT period, host, pid, thread, stack_id, any(samples) AS n \
                 FROM sonde.profile_samples_local GROUP BY period, host, pid, thread, stack_id) \
                 FORMAT TabSeparated",
            )
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let deadline = Instant::now() + WAIT;
    loop {
        let seen = servers.iter().map(on_shards).sum::<u64>();
        if seen == stored {
            break;
        }
        if Instant::now() >= deadline {
            let mut ch: BTreeMap<(String, u64), u64> = BTreeMap::new();
            for server in servers {
                for line in server
                    .query(
                        "SELECT host, toUInt32(period), sum(n) FROM (SELECT period, host, pid, thread, stack_id, any(samples) AS n \
                         FROM sonde.profile_samples_local GROUP BY period, host, pid, thread, stack_id) GROUP BY host, period FORMAT TabSeparated",
                    )
                    .lines()
                {
                    let f: Vec<&str> = line.split('\t').collect();
                    *ch.entry((f[0].to_string(), f[1].parse().unwrap())).or_insert(0) += f[2].parse::<u64>().unwrap();
                }
            }
            let mut here: BTreeMap<(String, u64), u64> = BTreeMap::new();
            for (i, a) in agents.iter().enumerate() {
                let store = sonde_profile::store::Store::reader(&a.path("data"));
                for e in store.list().unwrap() {
                    let (p, _) = store.read(e.start_s, e.start_s + 1).unwrap();
                    here.insert((format!("fleet-{i}"), e.start_s), p.samples());
                }
            }
            let differ: Vec<_> = ch
                .keys()
                .chain(here.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| ch.get(k) != here.get(k))
                .map(|k| (k.clone(), ch.get(k).copied(), here.get(k).copied()))
                .collect();
            panic!("after {WAIT:?} the shards hold {seen} samples, the agents stored {stored}; periods that differ (ClickHouse, local): {differ:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let total = |server: &common::clickhouse::ClickHouse, table: &str| -> u64 {
        server
            .query(&format!(
                "SELECT count() FROM sonde.{table} FORMAT TabSeparated"
            ))
            .trim()
            .parse()
            .unwrap()
    };
    for s in servers {
        assert!(
            total(s, "profile_samples_local") > 0,
            "a shard without samples"
        );
    }
    let uri = format!(
        "clickhouse://{}/sonde",
        servers[1].http_url().trim_start_matches("http://")
    );
    let rows = |top: &Json| function_rows(top, |r| u64_of(&r["self_samples"]));
    let local = |i: usize| {
        let data = agents[i].path("data");
        profile_json(&["--since", "10m", "--data-dir", data.to_str().unwrap()])
    };
    // The fleet's top table is the sum of the three local ones, sample
    // for sample; each host's is its agent's.
    let fleet = profile_json(&["--since", "10m", "--store", &uri]);
    let mut sum: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut samples = 0;
    for i in 0..3 {
        let here = local(i);
        samples += u64_of(&here["samples"]);
        for (k, v) in rows(&here) {
            *sum.entry(k).or_insert(0) += v;
        }
        let host = format!("fleet-{i}");
        let there = profile_json(&["--since", "10m", "--store", &uri, "--host", &host]);
        assert_eq!(there["samples"], here["samples"], "{host}");
        assert_eq!(rows(&there), rows(&here), "{host}");
        assert_eq!(there["hosts"][0]["host"], host.as_str());
    }
    assert_eq!(u64_of(&fleet["samples"]), samples);
    assert_eq!(rows(&fleet), sum);
    assert_eq!(
        fleet["hosts"].as_array().unwrap().len(),
        3,
        "{}",
        fleet["hosts"]
    );
    // The flame graph rooted at hosts has one root per host.
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("fleet.txt");
    profile_json(&[
        "--since",
        "10m",
        "--store",
        &uri,
        "--by",
        "host",
        "--folded",
        folded.to_str().unwrap(),
    ]);
    let roots: std::collections::BTreeSet<String> = fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .map(|l| l.split(';').next().unwrap().to_string())
        .collect();
    assert_eq!(roots.len(), 3, "{roots:?}");

    // --thread and --container narrow the fleet as they narrow each host.
    let mut narrowings = vec![vec!["--thread".to_string(), "^spin-a$".to_string()]];
    match &container {
        Some(c) => narrowings.push(vec!["--container".to_string(), c.id.clone()]),
        None => eprintln!("--container not checked: no writable cgroup2 hierarchy (needs root)"),
    }
    for extra in &narrowings {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut args = vec!["--since", "10m", "--store", &uri];
        args.extend_from_slice(&extra);
        let fleet_narrowed = profile_json(&args);
        let (mut sum, mut samples) = (BTreeMap::new(), 0);
        for agent in &agents {
            let data = agent.path("data");
            let mut args = vec!["--since", "10m", "--data-dir", data.to_str().unwrap()];
            args.extend_from_slice(&extra);
            let here = profile_json(&args);
            samples += u64_of(&here["samples"]);
            for (k, v) in rows(&here) {
                *sum.entry(k).or_insert(0) += v;
            }
        }
        assert!(samples > 0, "{extra:?}");
        assert!(samples < u64_of(&fleet["samples"]), "{extra:?}");
        assert_eq!(u64_of(&fleet_narrowed["samples"]), samples, "{extra:?}");
        assert_eq!(rows(&fleet_narrowed), sum, "{extra:?}");
    }

    // A diff across the switch: hot shrank and cold grew in both burners,
    // and each side holds the hosts' samples of its periods.
    let stores: Vec<sonde_profile::store::Store> = agents
        .iter()
        .map(|a| sonde_profile::store::Store::reader(&a.path("data")))
        .collect();
    let starts: Vec<u64> = stores
        .iter()
        .flat_map(|s| s.list().unwrap().into_iter().map(|e| e.start_s))
        .collect();
    let first = *starts.iter().min().unwrap();
    let end = starts.iter().max().unwrap() + 1;
    assert!(first < switch_from && switch_until < end);
    let local_samples = |from: u64, until: u64| -> u64 {
        stores
            .iter()
            .map(|s| {
                let (p, _) = s.read(from, until).unwrap();
                p.stacks.iter().map(|st| st.count).sum::<u64>()
            })
            .sum()
    };
    let fleet_store = sonde_sinks::clickhouse::store::FleetStore::open(&uri).unwrap();
    let span = |from_s, until_s| sonde_sinks::clickhouse::store::Filter {
        from_s,
        until_s,
        ..Default::default()
    };
    let diff = sonde_profile::views::diff_tops(
        &fleet_store.top(&span(first, switch_from), None).unwrap(),
        &fleet_store.top(&span(switch_until, end), None).unwrap(),
        None,
    );
    assert_eq!(diff.samples_base, local_samples(first, switch_from));
    assert_eq!(diff.samples, local_samples(switch_until, end));
    assert_eq!(diff.hosts.len(), 3);
    // However busy the host (the burners' share of it), hot's part of
    // its burner's samples goes from 70% to 30%.
    for burner in [&p.burn_fp, &p.burn_nofp] {
        let row = |function: &str| {
            diff.functions
                .iter()
                .find(|r| r.function == function && Path::new(&r.module) == burner.as_path())
                .unwrap_or_else(|| {
                    panic!(
                        "no {function} of {} in {:?}",
                        burner.display(),
                        diff.functions
                    )
                })
        };
        let (hot, cold) = (row("hot"), row("cold"));
        assert!(hot.delta < 0.0 && cold.delta > 0.0, "{hot:?} {cold:?}");
        let before = hot.self_base / (hot.self_base + cold.self_base);
        let after = hot.self_new / (hot.self_new + cold.self_new);
        assert!(
            before > 0.55 && after < 0.45,
            "hot of {}: {before:.2} of its burner before, {after:.2} after",
            burner.display()
        );
    }

    // Cost a year: the formula of docs/PROFILING.md on the fleet's
    // samples, over the fleet's span.
    let priced = profile_json(&[
        "--since",
        "10m",
        "--store",
        &uri,
        "--core-cost-per-hour",
        "0.10 USD",
    ]);
    assert_eq!(priced["currency"], "USD");
    let year = 365.25 * 86_400.0 / f64_of(&priced["duration_s"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    let mut cpu_here: BTreeMap<(String, String), f64> = BTreeMap::new();
    for i in 0..3 {
        for (key, cpu_s) in function_rows(&local(i), |r| f64_of(&r["self_cpu_s"])) {
            *cpu_here.entry(key).or_insert(0.0) += cpu_s;
        }
    }
    for r in priced["functions"].as_array().unwrap() {
        let key = function_key(r);
        let cpu_s = f64_of(&r["self_cpu_s"]);
        assert!(
            close(cpu_s, cpu_here[&key]),
            "{key:?}: {cpu_s} CPU-s, the hosts {}",
            cpu_here[&key]
        );
        let cost = f64_of(&r["self_cost"]);
        assert!(close(cost, cpu_s / 3600.0 * 0.10), "{r}");
        assert!(close(f64_of(&r["self_cost_per_year"]), cost * year), "{r}");
    }
}

/// The classes of a `--classes --json` view, by name: (share, samples).
fn class_shares(view: &Json) -> BTreeMap<String, (f64, u64)> {
    view["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["class"].as_str().unwrap().to_string(),
                (f64_of(&c["share"]), u64_of(&c["samples"])),
            )
        })
        .collect()
}

#[test]
fn each_class_takes_the_share_of_cpu_its_work_took_and_a_config_rule_adds_a_class() {
    let _cpu = exclusive();
    let p = programs();
    // 30% zlib, 20% malloc churn, 20% page faults, 10% one-byte writes,
    // 20% a plain loop, in CPU time; it prints what each really took.
    let w = Program::start(&p.classes, &["9", "30,20,20,10,20"]);
    w.wait_line("running");
    let pid = w.pid().to_string();
    let view = |extra: &[&str]| {
        let mut args = vec![
            "--duration",
            "3s",
            "--frequency",
            "299",
            "--pid",
            &pid,
            "--classes",
        ];
        args.extend_from_slice(extra);
        profile_json(&args)
    };
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("classes.pb.gz");
    let shipped = view(&["--pprof", export.to_str().unwrap()]);
    // The export read back gives the same classes, and --class keeps one
    // class's stacks for the table.
    let export = export.to_str().unwrap();
    let merged = profile_json(&["merge", export, "--classes"]);
    assert_eq!(class_shares(&merged), class_shares(&shipped));
    let allocation = profile_json(&["merge", export, "--class", "allocation"]);
    assert_eq!(
        u64_of(&allocation["samples"]),
        class_shares(&shipped)["allocation"].1
    );
    let leaves = self_by_function(&allocation);
    assert!(
        leaves.contains_key("_int_malloc") || leaves.contains_key("malloc"),
        "{allocation}"
    );
    let (ok, _, stderr) = sonde(&["profile", "merge", export, "--class", "nonsense"]);
    assert!(!ok && stderr.contains("no such class"), "{stderr}");
    // A rule of the user's own: the plain loop is "arithmetic".
    let config = dir.path().join("sonde.toml");
    fs::write(
        &config,
        "[profiler]\n\n[[profiler.classes]]\nclass = \"arithmetic\"\nfunction = \"^do_plain$\"\n\
         remedy = \"a better algorithm\"\n",
    )
    .unwrap();
    let own = view(&["--config", config.to_str().unwrap()]);
    // What each activity took over the whole run (the split is the same
    // every 20 ms round, so over any 3 s of it).
    let took: BTreeMap<String, f64> = wait_for("the workload's report", WAIT, || {
        let mut got = BTreeMap::new();
        while let Ok(line) = w.lines.try_recv() {
            let (name, secs) = line.split_once(' ').unwrap();
            got.insert(name.to_string(), secs.parse::<f64>().unwrap());
        }
        (got.len() == 5).then_some(got)
    });
    let all: f64 = took.values().sum();
    let took = |a: &str| took[a] / all;

    let samples = u64_of(&shipped["samples"]);
    assert!(samples >= 150, "{samples} samples: the host is too busy");
    let classes = class_shares(&shipped);
    let share = |c: &str| classes.get(c).map_or(0.0, |s| s.0);
    // Within three standard errors of a share of `samples`, plus 4 points
    // for the loops around each activity's calls (the caller's own frames
    // are in no class) and the wrappers not classified.
    let close = |what: &str, got: f64, want: f64| {
        let sigma = (want * (1.0 - want) / samples as f64).sqrt();
        assert!(
            (got - want).abs() <= 3.0 * sigma + 0.04,
            "{what}: {got:.3} of the samples, its work took {want:.3} of the CPU ({samples} samples): {shipped}"
        );
    };
    close("compression", share("compression"), took("deflate"));
    close("allocation", share("allocation"), took("churn"));
    // Giving the pages back is a system call (madvise): page faults and
    // system calls together are the two activities, each the larger part
    // of its own.
    close(
        "page faults and system calls",
        share("page_faults") + share("syscalls"),
        took("fault") + took("write"),
    );
    assert!(share("page_faults") >= 0.5 * took("fault"), "{shipped}");
    assert!(share("syscalls") >= 0.5 * took("write"), "{shipped}");
    close("unclassified", share("unclassified"), took("plain"));
    let rows = shipped["classes"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|c| c["class"] == name).unwrap();
    assert_eq!(row("unclassified")["functions"][0]["name"], "do_plain");
    assert_eq!(rows.last().unwrap()["class"], "unclassified");
    assert!(row("compression")["remedy"]
        .as_str()
        .unwrap()
        .contains("zlib-ng"));
    assert_eq!(row("allocation")["processes"][0]["name"], "classes");
    assert!(row("compression").get("cost_per_year").is_none());
    // The config's class takes the loop out of unclassified.
    let own = class_shares(&own);
    let arithmetic = own.get("arithmetic").map_or(0.0, |s| s.0);
    let n = own.values().map(|s| s.1).sum::<u64>() as f64;
    let sigma = (took("plain") * (1.0 - took("plain")) / n).sqrt();
    assert!(
        (arithmetic - took("plain")).abs() <= 3.0 * sigma + 0.04,
        "arithmetic {arithmetic:.3}, the loop took {:.3}: {own:?}",
        took("plain")
    );
    assert!(
        own.get("unclassified").map_or(0.0, |s| s.0) < 0.1,
        "{own:?}"
    );
}

/// The classes workload, running for `seconds`: phase 1 spends 10% in
/// zlib and 40% in the plain loop, phase 2 (on SIGUSR1) 50% in zlib and
/// 10% in the loop; malloc churn, page faults and one-byte writes take
/// 20%, 20% and 10% in both. Killed on drop.
fn two_phase_classes(seconds: &str) -> Program {
    let w = Program::start(
        &programs().classes,
        &[seconds, "10,20,20,10,40", "50,20,10,10,10"],
    );
    w.wait_line("running");
    w
}

#[test]
fn a_class_diff_shows_what_grew_after_the_workload_changed() {
    let _cpu = exclusive();
    let w = two_phase_classes("30");
    let pid = w.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let phase = |name: &str| {
        let file = dir.path().join(name);
        let top = profile_json(&[
            "--duration",
            "2s",
            "--frequency",
            "299",
            "--pid",
            &pid,
            "--pprof",
            file.to_str().unwrap(),
        ]);
        let samples = u64_of(&top["samples"]);
        assert!(samples >= 100, "{samples} samples: the host is too busy");
        file
    };
    let before = phase("before.pb.gz");
    let status = Command::new("kill").args(["-USR1", &pid]).status().unwrap();
    assert!(status.success());
    w.wait_line("phase 2");
    let after = phase("after.pb.gz");
    drop(w);
    let (ok, stdout, stderr) = sonde(&[
        "profile",
        "diff",
        before.to_str().unwrap(),
        after.to_str().unwrap(),
        "--classes",
        "--json",
        "--core-cost-per-hour",
        "0.10 USD",
    ]);
    assert!(ok, "{stderr}");
    let d: Json = serde_json::from_str(&stdout).unwrap();
    let rows = d["classes"].as_array().unwrap();
    let delta = |class: &str| {
        rows.iter()
            .find(|r| r["class"] == class)
            .map_or(0.0, |r| f64_of(&r["delta"]))
    };
    // Largest change first: zlib's 40 points.
    assert_eq!(rows[0]["class"], "compression", "{d}");
    assert!(delta("compression") > 0.25, "{d}");
    assert!(delta("unclassified") < -0.15, "{d}");
    assert!(delta("page_faults") < 0.0, "{d}");
    assert!(f64_of(&rows[0]["delta_cost_per_year"]) > 0.0, "{d}");
}

/// The segments of the page's classes bar: (class, the link a click
/// follows, the segment's markup up to its end).
fn page_class_segments(dom: &str) -> Vec<(String, String, String)> {
    let Some(bar) = dom.split("<div id=\"class-bar\"").nth(1) else {
        return Vec::new();
    };
    let bar = bar.split("</div>").next().unwrap();
    bar.split("<a data-class=\"")
        .skip(1)
        .map(|a| {
            let name = a.split('"').next().unwrap().to_string();
            let href = a
                .split(" href=\"")
                .nth(1)
                .and_then(|h| h.split('"').next())
                .unwrap_or("")
                .replace("&amp;", "&");
            let markup = a.split("</a>").next().unwrap().to_string();
            (name, href, markup)
        })
        .collect()
}

/// The numbers of a segment's second line ("30.12% · 4.56 USD/year",
/// "+12.3 pp"): the first one.
fn segment_number(markup: &str) -> f64 {
    let line = markup
        .split("<span>")
        .nth(2)
        .unwrap()
        .split("</span>")
        .next()
        .unwrap();
    line.split(['%', ' '])
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn the_admin_site_splits_the_samples_into_classes_keeps_one_class_and_shows_which_grew_on_its_page()
{
    let chromium = common::browser::chromium();
    let _cpu = exclusive();
    let w = two_phase_classes("600");
    let pid = w.pid().to_string();
    let agent = profiling_agent(99, "core_cost_per_hour = \"0.10 USD\"");
    let started = Instant::now();
    let get = |path: &str| admin_request("GET", agent.admin, path);
    let json = |path: &str| -> Json {
        let (status, _, body) = get(path);
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    };
    // Samples of the workload in `range`; each read merges the range's
    // stored periods, so it is asked a few times a period, not in a spin.
    let samples_in = |range: &str| -> u64 {
        let (_, _, body) = get(&format!("/api/profiles/top?range={range}&pid={pid}&top=1"));
        let samples = serde_json::from_slice::<Json>(&body)
            .ok()
            .and_then(|t| t["samples"].as_u64())
            .unwrap_or(0);
        if samples < 200 {
            std::thread::sleep(Duration::from_millis(250));
        }
        samples
    };
    let ago = |t: Instant| t.elapsed().as_secs();
    // 200 samples of phase 1 stored more than 2 s ago, which the
    // comparison's earlier range keeps (it leaves out the 2 s before the
    // switch).
    wait_for("200 samples of phase 1 stored", WAIT, || {
        (samples_in(&format!("{}s..2s", ago(started) + 1)) >= 200).then_some(())
    });
    assert!(Command::new("kill")
        .args(["-USR1", &pid])
        .status()
        .unwrap()
        .success());
    w.wait_line("phase 2");
    let switched = Instant::now();
    // The ranges on either side of the switch, leaving out the period
    // holding it; relative to now, so made again at each use.
    let ranges = || {
        (
            format!("{}s..{}s", ago(started) + 1, ago(switched) + 2),
            format!("{}s..0s", ago(switched).saturating_sub(1)),
        )
    };
    wait_for("200 samples of phase 2 stored", WAIT, || {
        (samples_in(&ranges().1) >= 200).then_some(())
    });
    drop(w);

    // Across the switch, zlib's share grew by its 40 points.
    let (base, new) = ranges();
    let d = json(&format!(
        "/api/profiles/classes/diff?base={base}&new={new}&pid={pid}"
    ));
    assert_eq!(d["classes"][0]["class"], "compression", "{base} {new}: {d}");
    assert!(f64_of(&d["classes"][0]["delta"]) > 0.25, "{d}");

    if let Some(chromium) = &chromium {
        let page = format!("http://127.0.0.1:{}", agent.admin);
        // The bar: a segment per class of the workload, each with its
        // share and cost a year, its remedy in its tooltip. (The agent
        // may yet store a few samples of the workload's exit: shares to
        // half a point.)
        // The page and the API on the same stored samples: the API asked
        // before and after the page's load, until both answers agree.
        let classes_url = format!("/api/profiles/classes?range=10m..0s&pid={pid}");
        let (dom, api) = wait_for("the page and the API on the same samples", WAIT, || {
            let before = json(&classes_url);
            let dom = common::browser::render_page(
                chromium,
                &format!("{page}/profiles?range=10m..0s&pid={pid}"),
                None,
            );
            let after = json(&classes_url);
            (before["samples"] == after["samples"]).then_some((dom, after))
        });
        let classes = class_shares(&api);
        let segments = page_class_segments(&dom);
        let names: std::collections::BTreeSet<&str> =
            segments.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names, classes.keys().map(String::as_str).collect(), "{dom}");
        for (name, _, markup) in &segments {
            let share = segment_number(markup);
            assert!(
                (share - classes[name].0 * 100.0).abs() < 0.5,
                "{name}: {markup}"
            );
            assert!(markup.contains(" USD/year"), "{markup}");
        }
        let (_, link, markup) = segments.iter().find(|s| s.0 == "compression").unwrap();
        assert!(markup.contains("What helps: a faster library"), "{markup}");
        // A click on compression (its link): the table and the flame
        // graph hold its samples alone, its segment is marked, and a
        // second click or "all classes" undoes it.
        let dom = common::browser::render_page(chromium, &format!("{page}{link}"), None);
        assert!(!dom.contains("class=\"summary error\""), "{dom}");
        let rows: std::collections::BTreeSet<String> =
            page_rows(&dom).into_iter().map(|r| r.0).collect();
        let want: std::collections::BTreeSet<String> = json(&format!(
            "/api/profiles/top?range=10m..0s&pid={pid}&class=compression&top=500"
        ))["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["function"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(rows, want, "{link}");
        assert!(
            rows.contains("do_deflate") && !rows.contains("do_plain"),
            "{rows:?}"
        );
        let frame = |name: &str| dom.contains(&format!("<g class=\"frame\" data-name=\"{name}\""));
        assert!(
            frame("do_deflate") && !frame("do_plain") && !frame("do_churn"),
            "{dom}"
        );
        let segments = page_class_segments(&dom);
        let chosen = segments.iter().find(|s| s.0 == "compression").unwrap();
        assert!(chosen.2.contains("class=\"selected\""), "{}", chosen.2);
        assert!(
            !chosen.1.contains("class="),
            "a second click clears it: {}",
            chosen.1
        );
        assert!(
            dom.contains("<a id=\"all-classes\" href=\"/profiles?range=10m..0s&amp;pid="),
            "{dom}"
        );
        // The comparison across the switch: compression's segment grew
        // by its points, the plain loop's (unclassified) shrank.
        let (base, new) = ranges();
        let dom = common::browser::render_page(
            chromium,
            &format!("{page}/profiles?compare=1&base={base}&new={new}&pid={pid}"),
            None,
        );
        let segments = page_class_segments(&dom);
        let segment = |name: &str| {
            segments
                .iter()
                .find(|s| s.0 == name)
                .unwrap_or_else(|| panic!("no {name} segment: {dom}"))
                .2
                .clone()
        };
        let grew = segment("compression");
        assert!(
            grew.contains("class=\"grew\"") && segment_number(&grew) > 25.0,
            "{grew}"
        );
        let shrank = segment("unclassified");
        assert!(
            shrank.contains("class=\"shrank\"") && segment_number(&shrank) < -15.0,
            "{shrank}"
        );
        assert!(dom.contains("compression grew the most, +"), "{dom}");
    }

    // The API's view of the last 10 minutes and the command's, read
    // again until the API's samples were the same before and after the
    // command: then the store did not change under it (the agent may
    // store a few samples of the workload's exit a period or more late).
    let data = agent.path("data");
    let data = data.to_str().unwrap();
    let same_span = |path: String, args: &[&str]| -> (Json, Json) {
        let mut all = vec!["--since", "10m", "--data-dir", data, "--pid", &pid];
        all.extend_from_slice(args);
        wait_for(
            "the store unchanged over a run of the command",
            WAIT,
            || {
                let before = json(&path);
                let cli = profile_json(&all);
                (json(&path)["samples"] == before["samples"]).then_some((before, cli))
            },
        )
    };
    // The API's classes are the command's, of the same store span.
    let (api, cli) = same_span(
        format!("/api/profiles/classes?range=10m..0s&pid={pid}"),
        &["--classes"],
    );
    assert_eq!(class_shares(&api), class_shares(&cli), "{api}\n{cli}");
    assert_eq!(api["samples"], cli["samples"]);
    let classes = class_shares(&api);
    for class in [
        "compression",
        "allocation",
        "page_faults",
        "syscalls",
        "unclassified",
    ] {
        assert!(classes.contains_key(class), "no {class}: {api}");
    }
    assert!(
        api["classes"][0]["cost_per_year"].as_f64().unwrap() > 0.0,
        "{api}"
    );
    // class= keeps that class's samples, stacks whole: the table is the
    // command's --class table, its self time mostly in zlib, its callers
    // above; no other activity's function.
    let (only, cli_only) = same_span(
        format!("/api/profiles/top?range=10m..0s&pid={pid}&class=compression&top=100000"),
        &["--class", "compression"],
    );
    assert_eq!(self_rows(&only), self_rows(&cli_only));
    assert_eq!(u64_of(&only["samples"]), classes["compression"].1);
    let functions = self_by_function(&only);
    assert!(functions.contains_key("do_deflate"), "{only}");
    for other in ["do_plain", "do_churn", "do_fault", "do_write"] {
        assert!(!functions.contains_key(other), "{other} in {only}");
    }
    let most = only["functions"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|r| u64_of(&r["self_samples"]))
        .unwrap();
    assert!(most["module"].as_str().unwrap().contains("libz"), "{most}");
    let (status, _, svg) = get(&format!(
        "/api/profiles/flamegraph?range=10m..0s&pid={pid}&class=unclassified"
    ));
    assert_eq!(status, 200);
    let frames = svg_frames(&String::from_utf8(svg).unwrap());
    assert!(frames.iter().any(|f| f.0 == "do_plain"), "{frames:?}");
    assert!(!frames.iter().any(|f| f.0 == "do_deflate"), "{frames:?}");
    // An unknown class is a 400 naming the classes there are.
    let (status, _, body) = get("/api/profiles/top?range=10m..0s&class=nonsense");
    let body = String::from_utf8(body).unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("no such class") && body.contains("compression, "),
        "{body}"
    );
}

/// A row of a `--json` top table's (function, module).
fn function_key(r: &Json) -> (String, String) {
    (
        r["function"].as_str().unwrap().to_string(),
        r["module"].as_str().unwrap().to_string(),
    )
}

/// `value` of each row of a `--json` top table, by (function, module).
fn function_rows<T>(top: &Json, value: impl Fn(&Json) -> T) -> BTreeMap<(String, String), T> {
    top["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (function_key(r), value(r)))
        .collect()
}

/// Self samples and CPU-seconds by (function, module) of a top table.
fn self_rows(top: &Json) -> BTreeMap<(String, String), (u64, f64)> {
    function_rows(top, |r| {
        (u64_of(&r["self_samples"]), f64_of(&r["self_cpu_s"]))
    })
}

#[test]
fn the_admin_site_answers_from_the_fleet_store_and_its_page_shows_the_fleet_in_chromium() {
    let _cpu = exclusive();
    let Some(mut ch) = common::backends::or_skip(common::clickhouse::ClickHouse::start()) else {
        return;
    };
    let chromium = common::browser::chromium();
    let p = programs();
    let burners = [Program::burner(&p.burn_fp), Program::burner(&p.burn_nofp)];
    let url = ch.http_url();
    // Two hosts and the page's agent: four profilers on a small machine
    // shared with other tests already take a while to store a period.
    let mut agents: Vec<common::Agent> = (0..2)
        .map(|i| {
            common::Agent::start_config(|admin, dir| {
                format!(
                    "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"fleet-{i}\"\n\n\
                     [profiler]\nfrequency = 19\nperiod = \"1s\"\n\n\
                     [[sinks]]\ntype = \"clickhouse\"\nurl = \"{url}\"\ninputs = [\"profiles\"]\n",
                    dir.join("data").display()
                )
            })
        })
        .collect();
    // The agent serving the page profiles its own host into its own
    // store, and reads the fleet's from ClickHouse.
    let uri = format!("clickhouse://{}/sonde", url.trim_start_matches("http://"));
    let viewer = common::Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"viewer\"\n\n\
             [profiler]\nfrequency = 19\nperiod = \"1s\"\ncore_cost_per_hour = \"0.10 USD\"\nstore = \"{uri}\"\n",
            dir.join("data").display()
        )
    });
    for agent in &agents {
        let deadline = Instant::now() + 3 * WAIT;
        while agent
            .metric("sonde_sink_profiles_total{sink=\"clickhouse\"}")
            .is_none_or(|n| n < 2.0)
        {
            assert!(
                Instant::now() < deadline,
                "no two periods of an agent in ClickHouse within {:?}: {}\n{}",
                3 * WAIT,
                agent.stderr(),
                agent
                    .get("/metrics")
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("sink") || l.contains("profiler"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Stopped, each agent has sent its last period: ClickHouse holds
    // what the three local stores hold.
    for agent in &mut agents {
        agent.stop();
    }
    drop(burners);
    wait_past_the_stored_periods(&agents);
    let local = |i: usize| {
        let data = agents[i].path("data");
        profile_json(&["--since", "10m", "--data-dir", data.to_str().unwrap()])
    };
    let locals: Vec<Json> = (0..2).map(local).collect();
    let api = |path: &str| -> (u16, Json) {
        let (status, _, body) = admin_request("GET", viewer.admin, path);
        let json = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&body)));
        (status, json)
    };
    let (status, source) = api("/api/profiles/source");
    assert_eq!(status, 200);
    assert_eq!(source["source"], "fleet");
    assert_eq!(source["store"], uri.as_str());

    // The fleet's top table is the sum of the two hosts' own, sample
    // for sample; host= narrows it to one host's own.
    let (status, fleet) = api("/api/profiles/top?range=10m..0s&top=100000");
    assert_eq!(status, 200, "{fleet}");
    let mut sum: BTreeMap<(String, String), (u64, f64)> = BTreeMap::new();
    for here in &locals {
        for (k, (s, cpu)) in self_rows(here) {
            let e = sum.entry(k).or_insert((0, 0.0));
            e.0 += s;
            e.1 += cpu;
        }
    }
    let samples =
        |rows: &BTreeMap<(String, String), (u64, f64)>| -> BTreeMap<(String, String), u64> {
            rows.iter().map(|(k, v)| (k.clone(), v.0)).collect()
        };
    assert_eq!(
        u64_of(&fleet["samples"]),
        locals.iter().map(|l| u64_of(&l["samples"])).sum::<u64>()
    );
    assert_eq!(samples(&self_rows(&fleet)), samples(&sum));
    let hosts: Vec<(String, u64)> = fleet["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["host"].as_str().unwrap().into(), u64_of(&h["samples"])))
        .collect();
    let expected: Vec<(String, u64)> = (0..2)
        .map(|i| (format!("fleet-{i}"), u64_of(&locals[i]["samples"])))
        .collect();
    assert_eq!(hosts, expected);
    let (_, listed) = api("/api/profiles/hosts?range=10m..0s");
    assert_eq!(listed, fleet["hosts"]);
    for (i, here) in locals.iter().enumerate() {
        let (status, there) = api(&format!(
            "/api/profiles/top?range=10m..0s&top=100000&host=fleet-{i}"
        ));
        assert_eq!(status, 200, "{there}");
        assert_eq!(there["samples"], here["samples"], "fleet-{i}");
        assert_eq!(
            samples(&self_rows(&there)),
            samples(&self_rows(here)),
            "fleet-{i}"
        );
    }
    // A diff of the range with itself: the fleet's samples on both sides,
    // nothing changed; and its graph, the processes and pprof answer.
    let (status, diff) = api("/api/profiles/diff?base=10m..0s&new=10m..0s&top=5");
    assert_eq!(status, 200, "{diff}");
    assert_eq!(diff["samples"], fleet["samples"]);
    assert_eq!(diff["samples_base"], fleet["samples"]);
    assert!(
        diff["functions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| f64_of(&r["delta"]) == 0.0),
        "{diff}"
    );
    for (path, content_type) in [
        (
            "/api/profiles/diff/flamegraph?base=10m..0s&new=5m..0s&by=host",
            "image/svg+xml",
        ),
        (
            "/api/profiles/pprof?range=10m..0s",
            "application/octet-stream",
        ),
    ] {
        let (status, got, body) = admin_request("GET", viewer.admin, path);
        assert_eq!((status, got.as_str()), (200, content_type), "{path}");
        assert!(body.len() > 100, "{path}");
    }
    let (_, processes) = api("/api/profiles/processes?range=10m..0s");
    let burner_hosts: std::collections::BTreeSet<&str> = processes
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "burn_fp")
        .map(|p| p["host"].as_str().unwrap())
        .collect();
    assert_eq!(
        burner_hosts.into_iter().collect::<Vec<_>>(),
        ["fleet-0", "fleet-1"],
        "{processes}"
    );
    // process= keeps one command's processes on every host, as the local
    // stores' filter does.
    let burn_fp = p.burn_fp.file_name().unwrap().to_str().unwrap();
    let select = sonde_profile::select::Select {
        processes: vec![burn_fp.to_string()],
        ..Default::default()
    };
    let kept: u64 = agents
        .iter()
        .map(|a| {
            let store = sonde_profile::store::Store::reader(&a.path("data"));
            let (profile, _) = store.read(0, u64::from(u32::MAX)).unwrap();
            select.apply(profile).samples()
        })
        .sum();
    let (_, narrowed) = api(&format!(
        "/api/profiles/top?range=10m..0s&process={burn_fp}"
    ));
    assert!(kept > 0);
    assert_eq!(u64_of(&narrowed["samples"]), kept, "{narrowed}");
    // The fleet's cost a year: its CPU-seconds (each sample 1/19 s, as
    // on each host) over the fleet's span, a year at that rate.
    assert_eq!(fleet["currency"], "USD", "{fleet}");
    let year = 365.25 * 86_400.0 / f64_of(&fleet["duration_s"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    for r in fleet["functions"].as_array().unwrap() {
        let key = function_key(r);
        let cpu_s = f64_of(&r["self_cpu_s"]);
        assert!(
            close(cpu_s, u64_of(&r["self_samples"]) as f64 / 19.0),
            "{r}"
        );
        assert!(close(cpu_s, sum[&key].1), "{r}: the hosts' {:?}", sum[&key]);
        assert!(
            close(
                f64_of(&r["self_cost_per_year"]),
                cpu_s / 3600.0 * 0.10 * year
            ),
            "{r}"
        );
    }
    // What the fleet store cannot do is a 400 that says so.
    let (status, e) = api("/api/profiles/flamegraph?range=10m..0s&by=process");
    assert_eq!(status, 400, "{e}");
    assert!(e["error"].as_str().unwrap().contains("by=host"), "{e}");
    // The flame graph rooted at hosts: one root per host, from folded
    // stacks that sum to the fleet's samples.
    let (status, _, folded) = admin_request(
        "GET",
        viewer.admin,
        "/api/profiles/folded?range=10m..0s&by=host",
    );
    assert_eq!(status, 200);
    let folded = String::from_utf8(folded).unwrap();
    let mut roots: BTreeMap<String, u64> = BTreeMap::new();
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        *roots
            .entry(stack.split(';').next().unwrap().to_string())
            .or_insert(0) += n.parse::<u64>().unwrap();
    }
    let expected: BTreeMap<String, u64> = expected.into_iter().collect();
    assert_eq!(roots, expected);
    // The fleet's classes are the hosts' added up, class for class, and
    // class= keeps one class's samples of the fleet.
    let (status, classes) = api("/api/profiles/classes?range=10m..0s");
    assert_eq!(status, 200, "{classes}");
    let mut added: BTreeMap<String, u64> = BTreeMap::new();
    for agent in agents.iter().take(2) {
        let data = agent.path("data");
        let here = profile_json(&[
            "--since",
            "10m",
            "--data-dir",
            data.to_str().unwrap(),
            "--classes",
        ]);
        for (class, (_, n)) in class_shares(&here) {
            *added.entry(class).or_insert(0) += n;
        }
    }
    let there: BTreeMap<String, u64> = class_shares(&classes)
        .into_iter()
        .map(|(c, (_, n))| (c, n))
        .collect();
    assert_eq!(there, added, "{classes}");
    let (status, unclassified) =
        api("/api/profiles/top?range=10m..0s&class=unclassified&top=100000");
    assert_eq!(status, 200, "{unclassified}");
    assert_eq!(u64_of(&unclassified["samples"]), there["unclassified"]);
    assert!(self_by_function(&unclassified)["hot"] > 0, "{unclassified}");

    if let Some(chromium) = chromium {
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
        fs::create_dir_all(&shots).unwrap();
        let base_url = format!("http://127.0.0.1:{}", viewer.admin);
        // The fleet: the store named, each host's share, the hot
        // function leading the table, priced for the fleet, and the graph.
        let dom = common::browser::render_page(
            &chromium,
            &format!("{base_url}/profiles?range=10m..0s"),
            Some(&shots.join("profiles-fleet.png")),
        );
        assert!(!dom.contains("class=\"summary error\""), "{dom}");
        // The fleet's classes bar.
        let bar: Vec<String> = page_class_segments(&dom).into_iter().map(|s| s.0).collect();
        assert_eq!(
            bar.iter().collect::<std::collections::BTreeSet<_>>(),
            there.keys().collect(),
            "{dom}"
        );
        assert!(dom.contains(&format!("Fleet store {uri}")), "{dom}");
        let page_hosts: Vec<&str> = dom
            .split("<tr data-host=\"")
            .skip(1)
            .map(|r| r.split('"').next().unwrap())
            .collect();
        let mut sorted = page_hosts.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, ["fleet-0", "fleet-1"], "{dom}");
        for i in 0..2 {
            assert!(
                dom.contains(&format!("<option value=\"fleet-{i}\"")),
                "no fleet-{i} in the host filter: {dom}"
            );
        }
        // The table is the API's, row for row (the page asks for 500).
        let names = |top: &Json| -> Vec<String> {
            top["functions"]
                .as_array()
                .unwrap()
                .iter()
                .take(10)
                .map(|r| r["function"].as_str().unwrap().to_string())
                .collect()
        };
        let page_names = |dom: &str| -> Vec<String> {
            page_rows(dom)
                .into_iter()
                .take(10)
                .map(|r| {
                    r.0.replace("&lt;", "<")
                        .replace("&gt;", ">")
                        .replace("&quot;", "\"")
                        .replace("&amp;", "&")
                })
                .collect()
        };
        assert_eq!(page_names(&dom), names(&fleet), "{dom}");
        assert!(page_rows(&dom).iter().any(|r| r.0 == "hot"), "{dom}");
        assert!(dom.contains(">Fleet self USD/year<"), "{dom}");
        assert!(
            dom.contains(&format!(
                "The fleet: {} samples over",
                u64_of(&fleet["samples"])
            )),
            "{dom}"
        );
        assert!(
            dom.contains("<g class=\"frame\" data-name=\"hot\""),
            "{dom}"
        );
        // The host filter narrows the table to that host's samples.
        let dom = common::browser::render_page(
            &chromium,
            &format!("{base_url}/profiles?range=10m..0s&host=fleet-1"),
            None,
        );
        assert!(!dom.contains("class=\"summary error\""), "{dom}");
        assert!(
            dom.contains(&format!(
                "The fleet: {} samples over",
                u64_of(&locals[1]["samples"])
            )) && dom.contains("on fleet-1."),
            "{dom}"
        );
        assert!(dom.contains("id=\"hosts-section\" hidden"), "{dom}");
        let (_, one) = api("/api/profiles/top?range=10m..0s&top=500&host=fleet-1");
        assert_eq!(page_names(&dom), names(&one), "{dom}");
        assert!(
            dom.contains("<g class=\"frame\" data-name=\"hot\""),
            "{dom}"
        );
        eprintln!("screenshots in {}", shots.display());
    }

    // A store that is down: a 502 naming it, at once.
    ch.stop();
    let asked = Instant::now();
    let (status, e) = api("/api/profiles/top?range=10m..0s");
    assert_eq!(status, 502, "{e}");
    assert_eq!(e["store"], uri.as_str());
    assert!(e["error"].as_str().unwrap().contains(&uri), "{e}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
}
