//! Headless Chromium for the tests of the admin site's pages: loads a
//! page, lets its scripts and requests run, and returns the DOM (and a
//! screenshot).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Loads `url` in headless Chromium, lets its scripts and requests run,
/// and returns the DOM; with `screenshot`, also saves the page as a PNG.
pub fn render_page(chromium: &Path, url: &str, screenshot: Option<&Path>) -> String {
    let profile = tempfile::tempdir().unwrap();
    let run = |extra: &[String]| {
        let out = Command::new(chromium)
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
            .arg(url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "chromium {extra:?} {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
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
