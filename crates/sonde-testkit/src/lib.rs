//! Test support shared by the crates' tests: [`Tmpfs`], a small file
//! system of a test's own, to fill or make read-only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a new directory, unmounted when dropped (also when
/// the test fails). Mounting needs root; without it [`Tmpfs::mount`] says
/// the test is skipped and returns `None`.
pub struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    /// A tmpfs of `size` (`3m`), or `None` when not running as root.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: a test that needs a tmpfs of its own is skipped");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount -t tmpfs failed although running as root");
        Some(Tmpfs(dir))
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// `mount -o remount,{how}` (`ro`, `rw`).
    pub fn remount(&self, how: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(self.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount -o remount,{how} failed");
    }

    /// Writes a file until the file system says `ENOSPC`, and returns its
    /// path (remove it to free the space).
    pub fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0xa5u8; 64 << 10];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        path
    }

    /// Bytes in use.
    pub fn used(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=used"])
            .arg(self.path())
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a process of the test may still hold a file open.
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}
