//! Crash safety of the disk buffer: a child process pushes and acknowledges
//! requests as fast as it can and is killed with SIGKILL at a random
//! moment, many times over the same buffer. After every kill the buffer
//! must open, hold its records in order, hold every request pushed and not
//! acknowledged, and hold none whose acknowledgement completed.
//!
//! The child logs each operation to a journal only after the operation
//! returned, so the journal is a lower bound of what reached the buffer.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sonde_sinks::sender::disk::Disk;
use sonde_sinks::sender::{Queue, Request};

const CHILD: &str = "SONDE_CRASH_CHILD_DIR";

fn body(n: u64) -> Vec<u8> {
    // Sizes vary so that records straddle page and segment boundaries.
    let len = 16 + (n as usize * 7919) % 1500;
    let mut b = n.to_le_bytes().to_vec();
    b.resize(len, (n % 251) as u8);
    b
}

fn number(r: &Request) -> u64 {
    let n = u64::from_le_bytes(r.body[..8].try_into().unwrap());
    assert_eq!(r.body, body(n), "record {n} came back altered");
    n
}

/// The child: push numbered requests forever, acknowledging about as many.
fn child(dir: &Path) -> ! {
    let (mut d, _) = Disk::open(&dir.join("buffer"), 1 << 30, false).unwrap();
    let mut journal = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("journal"))
        .unwrap();
    // Numbers grow across children: start past everything journaled.
    let journal_text = std::fs::read_to_string(dir.join("journal")).unwrap_or_default();
    let mut n = journal_text
        .lines()
        .filter_map(|l| l.split_once(' ')?.1.parse::<u64>().ok())
        .max()
        .map_or(0, |m| m + 1_000);
    let mut rng = fastrand::Rng::new();
    loop {
        n += 1;
        let dropped = d
            .push(Request {
                body: body(n),
                points: 1,
                raw_bytes: 0,
            })
            .unwrap();
        assert_eq!(
            dropped.batches, 0,
            "the buffer is large enough for the test"
        );
        journal.write_all(format!("push {n}\n").as_bytes()).unwrap();
        // Zero, one or two acknowledgements a push: the buffer stays short
        // but is rarely empty.
        for _ in 0..rng.u8(..3) {
            let Some(front) = d.front().unwrap().map(number) else {
                break;
            };
            d.pop().unwrap();
            journal
                .write_all(format!("pop {front}\n").as_bytes())
                .unwrap();
        }
    }
}

#[test]
fn sigkill_at_random_moments_never_corrupts_or_loses_the_disk_buffer() {
    if let Some(dir) = std::env::var_os(CHILD) {
        child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let rounds = 40;
    // What earlier kills cut off from the journal: a completed pop or push.
    let (mut popped_unjournaled, mut pushed_unjournaled) = (BTreeSet::new(), BTreeSet::new());
    for round in 0..rounds {
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sigkill_at_random_moments_never_corrupts_or_loses_the_disk_buffer",
                "--nocapture",
            ])
            .env(CHILD, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.u64(5..60)));
        c.kill().unwrap();
        let status = c.wait().unwrap();
        assert!(
            !status.success(),
            "round {round}: the child exited by itself: {status}"
        );

        let journal = std::fs::read_to_string(dir.path().join("journal")).unwrap_or_default();
        let mut pushed = BTreeSet::new();
        let mut popped = BTreeSet::new();
        // One write per line; a last line without its newline was cut.
        for l in journal
            .split_inclusive('\n')
            .filter_map(|l| l.strip_suffix('\n'))
        {
            match l.split_once(' ') {
                Some(("push", n)) => pushed.insert(n.parse::<u64>().unwrap()),
                Some(("pop", n)) => popped.insert(n.parse::<u64>().unwrap()),
                // A journal line torn by the kill.
                _ => continue,
            };
        }
        pushed.extend(&pushed_unjournaled);
        popped.extend(&popped_unjournaled);
        // Read the buffer from a copy, so the next child carries on with
        // the real one untouched.
        let copy = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(dir.path().join("buffer")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
        }
        let (mut d, loaded) = Disk::open(copy.path(), 1 << 30, false)
            .unwrap_or_else(|e| panic!("round {round}: the buffer does not open: {e}"));
        let mut got = Vec::new();
        while let Some(r) = d.front().unwrap() {
            got.push(number(r));
            d.pop().unwrap();
        }
        assert_eq!(loaded.records as usize, got.len());
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "round {round}: records out of order: {got:?}"
        );
        let got: BTreeSet<u64> = got.into_iter().collect();
        // Pushed and never acknowledged: all there, except that the kill
        // may have fallen between a pop and its journal line, which lets
        // the one request at the front go.
        let pending: Vec<u64> = pushed.difference(&popped).copied().collect();
        let missing: Vec<u64> = pending
            .iter()
            .filter(|n| !got.contains(n))
            .copied()
            .collect();
        assert!(
            missing.is_empty() || (missing.len() == 1 && missing[0] == pending[0]),
            "round {round}: requests {missing:?} were pushed, never acknowledged, and are gone"
        );
        // Nothing beyond what was journaled, but the one push the kill may
        // have cut off from its journal line.
        let unjournaled: Vec<&u64> = got.iter().filter(|n| !pushed.contains(n)).collect();
        assert!(
            unjournaled.len() <= 1
                && unjournaled
                    .iter()
                    .all(|n| pushed.last().is_none_or(|l| *n > l)),
            "round {round}: records {unjournaled:?} were never pushed"
        );
        popped_unjournaled.extend(missing);
        pushed_unjournaled.extend(unjournaled);
        for n in &popped {
            assert!(
                !got.contains(n),
                "round {round}: request {n} was acknowledged and came back"
            );
        }
    }
}
