//! Headless Chromium for the tests of the admin site's pages: loads a
//! page, lets its scripts and requests run, and returns the DOM (and a
//! screenshot).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Headless Chromium (Debian's `chromium`), or `None` with the reason
/// printed; CI (`SONDE_REQUIRE_BACKENDS=1`) fails instead.
pub fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("SONDE_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("SONDE_REQUIRE_BACKENDS").is_none(),
        "no Chromium at {} (apt-get install chromium)",
        path.display()
    );
    eprintln!(
        "skipped: no Chromium at {} (apt-get install chromium)",
        path.display()
    );
    None
}

/// How long one run of Chromium may take. A page renders in a few
/// seconds; headless Chromium with a virtual time budget now and then
/// never exits on a loaded machine, and is then killed and run again.
const RUN_DEADLINE: Duration = Duration::from_secs(90);

/// Runs Chromium as `command` says, its stdout read as it comes (a DOM
/// larger than a pipe's buffer would otherwise block it); `None` when it
/// did not exit within [`RUN_DEADLINE`] (it is killed).
fn run_within_deadline(mut command: Command) -> Option<(ExitStatus, String, String)> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + RUN_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (stdout.join().unwrap(), stderr.join().unwrap());
    status.map(|s| (s, out, err))
}

/// Loads `url` in headless Chromium, lets its scripts and requests run,
/// and returns the DOM; with `screenshot`, also saves the page as a PNG.
pub fn render_page(chromium: &Path, url: &str, screenshot: Option<&Path>) -> String {
    let run = |extra: &[String]| {
        // A run that hangs gets one more try, in a fresh profile.
        for _ in 0..2 {
            let profile = tempfile::tempdir().unwrap();
            let mut command = Command::new(chromium);
            command
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    // Virtual time waits for the page's fetches before it ends.
                    "--virtual-time-budget=20000",
                    "--window-size=1400,1100",
                ])
                .arg(format!("--user-data-dir={}", profile.path().display()))
                .args(extra)
                .arg(url);
            let Some((status, stdout, stderr)) = run_within_deadline(command) else {
                eprintln!("chromium {extra:?} {url}: no exit within {RUN_DEADLINE:?}; killed");
                continue;
            };
            assert!(status.success(), "chromium {extra:?} {url}: {stderr}");
            return stdout;
        }
        panic!("chromium {extra:?} {url}: hung twice, {RUN_DEADLINE:?} each");
    };
    if let Some(png) = screenshot {
        run(&[format!("--screenshot={}", png.display())]);
        assert!(
            fs::metadata(png).is_ok_and(|m| m.len() > 10_000),
            "{}",
            png.display()
        );
    }
    run(&["--dump-dom".to_string()])
}
