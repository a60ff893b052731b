//! `sonde profile` on programs of other runtimes: a Go binary (no
//! `.eh_frame`, frame pointers, Go symbol names in `.symtab`) and a Java
//! program whose hot code is JIT-compiled (no file mapping, named from the
//! perf map `jcmd PID Compiler.perfmap` writes). The programs are in
//! `tests/profile_runtimes/`, with a Go and a Python program for the
//! hot-spot classes; each test is skipped, saying why, when its
//! toolchain is not on PATH.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

const WAIT: Duration = Duration::from_secs(30);

/// Each test keeps a CPU busy while it profiles; held for the whole test
/// so that two of them do not share a small machine's CPUs (which leaves
/// each fewer samples than its shares need).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/profile_runtimes")
        .join(name)
}

/// Whether an executable named `tool` is in a directory of PATH.
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether every tool is on PATH; prints which is missing otherwise.
fn have(tools: &[&str]) -> bool {
    match tools.iter().find(|t| !on_path(t)) {
        Some(t) => {
            eprintln!("skipped: `{t}` is not on PATH (CI installs it, so the test runs there)");
            false
        }
        None => true,
    }
}

/// Runs a command to completion, panicking with its output on failure.
fn run(what: &str, command: &mut Command) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed with {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A program under test, its stdout read line by line on a thread; ended
/// (SIGTERM, then SIGKILL) when dropped, so a JVM removes its files.
struct Program {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
}

impl Program {
    fn start(command: &mut Command, stderr: PathBuf) -> Program {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
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
        Program {
            child,
            lines,
            stderr,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the program prints the line `want`.
    fn wait_line(&self, want: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == want => return,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("timed out after {timeout:?} waiting for {want:?} from the program")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "the program closed its stdout before printing {want:?}: {}",
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                ),
            }
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our child's,
        // not yet reaped, so it names no other process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A run of `sonde profile`, its stdout and stderr in files.
struct Profiling {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Profiling {
    fn start(dir: &Path, args: &[&str]) -> Profiling {
        let stdout = dir.join("profile.json");
        let stderr = dir.join("profile.stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_sonde"))
            .arg("profile")
            .args(args)
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Profiling {
            child,
            stdout,
            stderr,
        }
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the run to end and returns its JSON.
    fn json(&mut self) -> Json {
        let status = wait_for("sonde profile to finish", WAIT, || {
            self.child.try_wait().unwrap()
        });
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(
            status.success(),
            "sonde profile exited with {status}: {stderr}"
        );
        let text = std::fs::read_to_string(&self.stdout).unwrap();
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("sonde profile printed no JSON ({e}): {text}{stderr}"))
    }
}

impl Drop for Profiling {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The row of the first function matching `pred(function, module)`.
fn row(top: &Json, pred: impl Fn(&str, &str) -> bool) -> Option<&Json> {
    top["functions"].as_array().unwrap().iter().find(|r| {
        pred(
            r["function"].as_str().unwrap(),
            r["module"].as_str().unwrap(),
        )
    })
}

fn share(row: Option<&Json>, key: &str) -> f64 {
    row.map_or(0.0, |r| r[key].as_f64().unwrap())
}

/// The fewest samples worth computing shares from: 3 s at 99 Hz is 297
/// samples of a process that has a CPU to itself, and well over 60 of one
/// that shares a busy machine.
const MIN_SAMPLES: u64 = 60;

/// The Go burner built, run, warmed up and profiled for 3 s with `--pid`:
/// `sonde profile --json` and the folded stacks it wrote.
fn profile_go() -> Option<(Json, String)> {
    if !have(&["go"]) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = go_build("burn.go", dir.path());
    Some(profile_program(Command::new(&bin).arg("10"), dir.path()))
}

/// Builds tests/profile_runtimes/`source` into `dir`, offline; returns
/// the binary.
fn go_build(source_name: &str, dir: &Path) -> PathBuf {
    let bin = dir.join(source_name.trim_end_matches(".go"));
    let mut build = Command::new("go");
    build
        .args(["build", "-o"])
        .arg(&bin)
        .arg(source(source_name))
        .current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("GOWORK", "off")
        .env("GOPROXY", "off")
        .env("GOPATH", dir.join("gopath"));
    // The default build cache where there is one (a cold cache costs ~10 s
    // of compiling the runtime), a throwaway one otherwise.
    if std::env::var_os("HOME").is_none() && std::env::var_os("XDG_CACHE_HOME").is_none() {
        build.env("GOCACHE", dir.join("gocache"));
    }
    run("go build", &mut build);
    bin
}

#[test]
fn a_go_programs_hot_loop_is_named_and_its_stacks_reach_main_main() {
    let Some((top, folded)) = profile_go() else {
        return;
    };
    let context = format!("profile: {top}\nfolded stacks:\n{folded}");
    let bin = |module: &str| module.ends_with("/burn");
    let hot = row(&top, |f, m| f == "main.hotLoop" && bin(m));
    assert!(
        hot.is_some(),
        "no main.hotLoop in the burner's module; {context}"
    );
    // 70% of the work; 0.5 is over four standard deviations below at 100
    // samples, over three at the floor of 60.
    assert!(
        share(hot, "self") >= 0.5,
        "main.hotLoop's self share is {}, want about 0.7; {context}",
        share(hot, "self")
    );
    let cold = row(&top, |f, m| f == "main.coldLoop" && bin(m));
    assert!(
        share(cold, "self") >= 0.1,
        "main.coldLoop's self share is {}, want about 0.3; {context}",
        share(cold, "self")
    );
    // Frame pointers carry the unwinding from the loops (a module without
    // .eh_frame) up through main.main to runtime.main.
    let main = row(&top, |f, m| f == "main.main" && bin(m));
    assert!(
        share(main, "total") >= 0.8,
        "main.main is on {} of the stacks, want nearly all; {context}",
        share(main, "total")
    );
}

#[test]
fn a_go_leaf_functions_caller_is_on_its_stacks() {
    let Some((top, folded)) = profile_go() else {
        return;
    };
    let work = row(&top, |f, m| f == "main.work" && m.ends_with("/burn"));
    assert!(
        share(work, "total") >= 0.8,
        "main.work (which calls both loops) is on {} of the stacks, want nearly \
         all; profile: {top}\nfolded stacks:\n{folded}",
        share(work, "total")
    );
}

/// Whether a perf-map name is the Java method `Hot.{method}`: JDK 17 writes
/// `long Hot.hot(long)`, older JDKs (and perf-map-agent) `LHot;::hot`.
fn is_method(name: &str, method: &str) -> bool {
    name.contains(&format!("Hot.{method}("))
        || name.contains(&format!("Hot;::{method}"))
        || name.contains(&format!("Hot::{method}"))
}

/// Removes `/tmp/perf-PID.map` when dropped.
struct PerfMap(PathBuf);

impl Drop for PerfMap {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_java_programs_jit_compiled_hot_method_is_named_from_its_perf_map() {
    if !have(&["javac", "java", "jcmd"]) {
        return;
    }
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    run(
        "javac",
        Command::new("javac")
            .arg("-d")
            .arg(dir.path())
            .arg(source("Hot.java")),
    );
    let java = Program::start(
        Command::new("java")
            .args([
                // Frame pointers in JIT code, so callers unwind.
                "-XX:+PreserveFramePointer",
                "-XX:CompileCommand=quiet",
                "-XX:CompileCommand=dontinline,Hot::*",
                "-cp",
            ])
            .arg(dir.path())
            .args(["Hot", "10"]),
        dir.path().join("java.stderr"),
    );
    let map = PerfMap(PathBuf::from(format!("/tmp/perf-{}.map", java.pid())));
    java.wait_line("ready", WAIT);
    let pid = java.pid().to_string();
    let folded = dir.path().join("folded.txt");
    let mut profiling = Profiling::start(
        dir.path(),
        &[
            "--duration",
            "4s",
            "--pid",
            &pid,
            "--json",
            "--top",
            "30",
            "--folded",
            folded.to_str().unwrap(),
        ],
    );
    // Once the map names the compiled hot (jcmd writes what the code cache
    // holds at the time), it names it for the rest of the run.
    let map_text = wait_for("a perf map naming Hot.hot", WAIT, || {
        run(
            "jcmd Compiler.perfmap",
            Command::new("jcmd").args([&pid, "Compiler.perfmap"]),
        );
        let text = std::fs::read_to_string(&map.0).unwrap_or_default();
        text.lines().any(|l| is_method(l, "hot")).then_some(text)
    });
    assert!(
        profiling.running(),
        "the 4 s profile ended before jcmd wrote the perf map; the test cannot \
         check JIT naming on a machine this slow"
    );
    let top = profiling.json();
    let folded = std::fs::read_to_string(&folded).unwrap_or_default();
    let jit: Vec<&str> = map_text.lines().filter(|l| l.contains("Hot")).collect();
    let context =
        format!("profile: {top}\nfolded stacks:\n{folded}\nperf map lines of Hot: {jit:?}");
    let samples = top["samples"].as_u64().unwrap();
    assert!(
        samples >= MIN_SAMPLES,
        "{samples} samples of the JVM, want at least {MIN_SAMPLES}; {context}"
    );
    let hot = row(&top, |f, m| m == "[jit]" && is_method(f, "hot"));
    assert!(hot.is_some(), "no [jit] row names Hot.hot; {context}");
    // 70% of the work; the JVM's own threads and timing take a little.
    assert!(
        share(hot, "self") >= 0.3,
        "Hot.hot's self share is {}, want about 0.7; {context}",
        share(hot, "self")
    );
    let cold = row(&top, |f, m| m == "[jit]" && is_method(f, "cold"));
    assert!(
        share(cold, "self") >= 0.1,
        "Hot.cold's self share is {}, want about 0.3; {context}",
        share(cold, "self")
    );
    // With -XX:+PreserveFramePointer the compiled hot and cold unwind to
    // their caller, work, compiled once and never inlined. Counted from the
    // folded stacks: work never leads `--top` (no self time), so the
    // table's cut could drop its row.
    let through = |method: &str| -> f64 {
        let (mut with, mut all) = (0, 0);
        for line in folded.lines() {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            let count: u64 = count.parse().unwrap();
            all += count;
            if stack.split(';').any(|f| is_method(f, method)) {
                with += count;
            }
        }
        with as f64 / all.max(1) as f64
    };
    assert!(
        through("work") >= 0.8,
        "Hot.work is on {} of the stacks, want nearly all; {context}",
        through("work")
    );
}

/// The share of the folded stacks on which some frame satisfies `pred`.
fn share_through(folded: &str, pred: impl Fn(&str) -> bool) -> f64 {
    let (mut with, mut all) = (0, 0);
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let count: u64 = count.parse().unwrap();
        all += count;
        if stack.split(';').any(&pred) {
            with += count;
        }
    }
    with as f64 / all.max(1) as f64
}

/// A burner started by `command` (it prints "ready" once both of its
/// functions have run), profiled with `--pid` for 3 s: the JSON and the
/// folded stacks. A perf map it wrote is removed afterwards.
fn profile_program(command: &mut Command, dir: &Path) -> (Json, String) {
    let _serial = one_at_a_time();
    let program = Program::start(command, dir.join("program.stderr"));
    let _map = PerfMap(PathBuf::from(format!("/tmp/perf-{}.map", program.pid())));
    program.wait_line("ready", WAIT);
    let pid = program.pid().to_string();
    let folded = dir.join("folded.txt");
    let top = Profiling::start(
        dir,
        &[
            "--duration",
            "3s",
            "--pid",
            &pid,
            "--json",
            "--top",
            "60",
            "--folded",
            folded.to_str().unwrap(),
        ],
    )
    .json();
    let folded = std::fs::read_to_string(&folded).unwrap_or_default();
    let samples = top["samples"].as_u64().unwrap();
    assert!(
        samples >= MIN_SAMPLES,
        "{samples} samples, want at least {MIN_SAMPLES}: {top}\n{folded}"
    );
    (top, folded)
}

/// A CPython of 3.12 or later (the first with `-X perf`): on PATH, or
/// installed by pyenv; the first candidate that runs (a pyenv shim on
/// PATH may name a version that is not selected).
fn python_with_perf_support() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = ["python3.14", "python3.13", "python3.12"]
        .iter()
        .filter(|name| on_path(name))
        .map(PathBuf::from)
        .collect();
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    if let Some(Ok(versions)) = pyenv.map(|root| std::fs::read_dir(root.join("versions"))) {
        let mut found: Vec<PathBuf> = versions
            .filter_map(|e| Some(e.ok()?.path().join("bin/python3")))
            .collect();
        found.sort();
        candidates.extend(found.into_iter().rev());
    }
    candidates.into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import sys; sys.exit(sys.version_info < (3, 12))"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

#[test]
fn a_python_programs_functions_are_named_from_its_perf_map() {
    let Some(python) = python_with_perf_support() else {
        eprintln!("skipped: no CPython 3.12 or later on PATH or under pyenv");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (top, folded) = profile_program(
        Command::new(&python)
            .args(["-X", "perf"])
            .arg(source("hot.py"))
            .arg("10"),
        dir.path(),
    );
    let context = format!("{python:?}: profile: {top}\nfolded stacks:\n{folded}");
    // CPython 3.12 runs each Python function through a small trampoline
    // the perf map names `py::FUNCTION:FILE`; the interpreter's C
    // functions above it take the self time.
    let python_function = |f: &str, name: &str| {
        f.strip_prefix("py::")
            .is_some_and(|rest| rest.starts_with(&format!("{name}:")) && rest.ends_with("hot.py"))
    };
    let hot = share_through(&folded, |f| python_function(f, "hot"));
    let cold = share_through(&folded, |f| python_function(f, "cold"));
    // 70% and 30% of the work; the interpreter's start and timing take a
    // little.
    assert!(hot >= 0.5, "py::hot is on {hot} of the stacks; {context}");
    assert!(
        cold >= 0.15,
        "py::cold is on {cold} of the stacks; {context}"
    );
    assert!(
        hot + cold >= 0.85,
        "py::hot and py::cold are on {hot} and {cold} of the stacks; {context}"
    );
    let row = row(&top, |f, m| m == "[jit]" && python_function(f, "hot"));
    assert!(row.is_some(), "no [jit] row names py::hot; {context}");
    // The trampolines keep no frame pointer, and neither does a CPython
    // built without them: stepping over them by their return address
    // carries the stacks through work (which calls both) to the
    // interpreter's main.
    let work = share_through(&folded, |f| python_function(f, "work"));
    assert!(
        work >= 0.8,
        "py::work is on {work} of the stacks; {context}"
    );
    let main = share_through(&folded, |f| f == "Py_BytesMain");
    assert!(
        main >= 0.8,
        "Py_BytesMain is on {main} of the stacks; {context}"
    );
}

#[test]
fn a_node_programs_compiled_functions_are_named_from_its_perf_map() {
    if !have(&["node"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (top, folded) = profile_program(
        Command::new("node")
            // V8 writes its perf map; hot and cold stay functions of their
            // own rather than inlined into the loop.
            .args(["--perf-basic-prof", "--no-turbo-inlining"])
            .arg(source("hot.js"))
            .arg("10")
            // V8 also writes an isolate-*.log of its code events here.
            .current_dir(dir.path()),
        dir.path(),
    );
    let context = format!("profile: {top}\nfolded stacks:\n{folded}");
    // V8 names compiled code `JS:*name FILE:LINE:COLUMN` (optimised) or
    // `JS:~name …` (interpreted), older versions `LazyCompile:*name …`.
    let js_function = |f: &str, name: &str| {
        f.split_once(':').is_some_and(|(_, rest)| {
            rest.trim_start_matches(['*', '~', '^', '+'])
                .starts_with(&format!("{name} "))
                && f.contains("hot.js:")
        })
    };
    let hot = row(&top, |f, m| m == "[jit]" && js_function(f, "hot"));
    assert!(hot.is_some(), "no [jit] row names hot; {context}");
    assert!(
        share(hot, "self") >= 0.45,
        "hot's self share is {}, want about 0.7; {context}",
        share(hot, "self")
    );
    let cold = row(&top, |f, m| m == "[jit]" && js_function(f, "cold"));
    assert!(
        share(cold, "self") >= 0.12,
        "cold's self share is {}, want about 0.3; {context}",
        share(cold, "self")
    );
    // V8 keeps frame pointers, so stacks go from the compiled code down
    // through node's own entry into JavaScript.
    let entry = share_through(&folded, |f| f.starts_with("Builtins_JSEntry"));
    assert!(
        entry >= 0.8,
        "Builtins_JSEntry is on {entry} of the stacks; {context}"
    );
}

/// `sonde profile --classes --json` of the program `command` starts (it
/// prints "ready" once running), for 3 s with `--pid`: each class's share
/// by name, and the view.
fn classes_of(
    command: &mut Command,
    dir: &Path,
) -> (std::collections::BTreeMap<String, f64>, Json) {
    let _serial = one_at_a_time();
    let program = Program::start(command, dir.join("program.stderr"));
    program.wait_line("ready", WAIT);
    let pid = program.pid().to_string();
    let view = Profiling::start(
        dir,
        &["--duration", "3s", "--pid", &pid, "--classes", "--json"],
    )
    .json();
    let samples = view["samples"].as_u64().unwrap();
    assert!(
        samples >= MIN_SAMPLES,
        "{samples} samples, want at least {MIN_SAMPLES}: {view}"
    );
    let shares = view["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["class"].as_str().unwrap().to_string(),
                c["share"].as_f64().unwrap(),
            )
        })
        .collect();
    (shares, view)
}

#[test]
fn a_go_programs_slice_growth_is_allocation_and_gc() {
    if !have(&["go"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = go_build("grow.go", dir.path());
    // One P: with several, the runtime's hand-offs between them (futex
    // wakes, preemption signals, the scavenger's madvise) took 25-35% of
    // the samples as locks and syscalls, a share that moved with the
    // machine's load; with one they are under 2% and the test is about
    // the allocator and the collector alone.
    let (shares, view) = classes_of(
        Command::new(&bin).arg("15").env("GOMAXPROCS", "1"),
        dir.path(),
    );
    let share = |c: &str| shares.get(c).copied().unwrap_or(0.0);
    // The loop itself is a few instructions per append (about a third of
    // the samples, unclassified); the rest is growslice, mallocgc and the
    // copy of each growth, and the collector freeing what was dropped.
    // Measured: allocation 0.43-0.44, gc 0.18-0.24.
    let memory = share("allocation") + share("gc") + share("page_faults");
    assert!(
        memory >= 0.5 && share("allocation") >= 0.3 && share("gc") >= 0.08,
        "allocation {:.2}, gc {:.2}, page faults {:.2}: {view}",
        share("allocation"),
        share("gc"),
        share("page_faults")
    );
    let allocation = view["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["class"] == "allocation")
        .unwrap();
    let functions: Vec<&str> = allocation["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        functions
            .iter()
            .any(|f| f.starts_with("runtime.growslice") || f.starts_with("runtime.mallocgc")),
        "{functions:?}"
    );
}

#[test]
fn a_python_programs_zlib_calls_are_compression() {
    if !have(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (shares, view) = classes_of(
        Command::new("python3").arg(source("compress.py")).arg("15"),
        dir.path(),
    );
    let compression = shares.get("compression").copied().unwrap_or(0.0);
    assert!(compression >= 0.6, "compression {compression:.2}: {view}");
}
