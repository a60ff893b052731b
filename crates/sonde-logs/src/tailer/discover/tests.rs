//! Tests of the globs: what they match, across directories and through
//! symbolic links, and the patterns refused.

use std::fs;
use std::time::Instant;

use crate::identity::FileId;
use crate::tailer::test_support::*;
use crate::tailer::{BuildError, Tailer, TailerConfig};

#[test]
fn globs_cross_directories_with_double_star_and_excludes_apply() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("a/b/c");
    fs::create_dir_all(&deep).unwrap();
    append(&deep.join("deep.log"), b"deep\n");
    append(&dir.path().join("top.log"), b"top\n");
    append(&dir.path().join("a/old.log.gz"), b"gz\n");
    append(&dir.path().join("a/b/notes.txt"), b"txt\n");
    let mut cfg = config(dir.path(), "**/*.log*");
    cfg.exclude = vec!["*.gz".into()];
    let mut t = Tailer::new(cfg, None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    let mut texts = sink.texts();
    texts.sort();
    assert_eq!(texts, ["deep", "top"]);

    // One `*` stays within its directory.
    let mut t = Tailer::new(config(dir.path(), "*/*.log"), None).unwrap();
    let mut sink = Collect::default();
    append(&dir.path().join("a/one.log"), b"one level\n");
    drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(sink.texts(), ["one level"]);
}

#[test]
fn a_symbolic_link_in_the_glob_is_read_as_the_file_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("container.log");
    append(&target, b"from the container\n");
    std::os::unix::fs::symlink(&target, dir.path().join("pod.log")).unwrap();
    let mut t = Tailer::new(config(dir.path(), "*.log"), None).unwrap();
    let mut sink = Collect::default();
    drain(&mut t, Instant::now(), &mut sink);
    assert_eq!(sink.texts(), ["from the container"]);
    assert_eq!(sink.0[0].path, dir.path().join("pod.log"));
    let meta = fs::metadata(&target).unwrap();
    assert_eq!(t.checkpoints().files[0].identity.id, FileId::of(&meta));
}

#[test]
fn an_invalid_glob_is_refused_with_its_pattern() {
    let err = Tailer::new(TailerConfig::new(vec!["/var/log/[.log".into()]), None)
        .err()
        .unwrap();
    assert!(matches!(&err, BuildError::Glob { pattern, .. } if pattern == "/var/log/[.log"));
    assert!(
        err.to_string()
            .starts_with("invalid glob \"/var/log/[.log\": "),
        "{err}"
    );
}

#[test]
fn a_relative_include_is_refused() {
    let err = Tailer::new(TailerConfig::new(vec!["logs/*.log".into()]), None)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "include pattern \"logs/*.log\" is not an absolute path"
    );
}
