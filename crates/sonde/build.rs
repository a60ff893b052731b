//! Names the commit the binary is built from, for `sonde --version`:
//! `SONDE_COMMIT` is the short hash of HEAD, or `unknown` outside a git
//! checkout (a source tarball) or without git.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SONDE_COMMIT={commit}");
    // Built again when HEAD moves: a commit, a checkout. Only files that
    // exist are named: cargo reruns the script at every build for a
    // missing one, and rebuilds the binary after it.
    // In a worktree HEAD is the worktree's own, and the branches and
    // packed-refs are the repository's (the common dir).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = PathBuf::from(dir);
        let common =
            git(&["rev-parse", "--git-common-dir"]).map_or_else(|| dir.clone(), PathBuf::from);
        let mut files = vec![dir.join("HEAD"), common.join("packed-refs")];
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            files.push(common.join(head));
        }
        for file in files.iter().filter(|f| f.exists()) {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
