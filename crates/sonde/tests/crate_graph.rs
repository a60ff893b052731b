//! The crate graph of docs/ARCHITECTURE.md is the workspace's: every
//! crate and its workspace dependencies as `cargo metadata` gives them,
//! each crate listed above everything it uses (so no crate uses one above
//! it, and no two import each other).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The graph as the docs draw it, in their order (top first).
fn documented() -> Vec<(String, BTreeSet<String>)> {
    let doc = include_str!("../../../docs/ARCHITECTURE.md");
    let section = doc
        .split("## The crate graph")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a section \"The crate graph\"");
    let block = section.split("```").nth(1).expect("its block");
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (name, deps) = l
                .split_once("->")
                .unwrap_or_else(|| panic!("{l:?} is not NAME -> DEPS"));
            let deps = deps
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(String::from)
                .collect();
            (name.trim().to_string(), deps)
        })
        .collect()
}

/// The graph `cargo metadata` gives: normal dependencies between
/// workspace crates.
fn actual() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap())
                .filter(|d| names.contains(d))
                .map(String::from)
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn the_documented_graph_is_the_workspace_graph() {
    let doc = documented();
    let as_map: Graph = doc.iter().cloned().collect();
    assert_eq!(as_map.len(), doc.len(), "a crate is listed twice");
    assert_eq!(
        as_map,
        actual(),
        "docs/ARCHITECTURE.md \"The crate graph\" differs from cargo metadata"
    );
}

#[test]
fn every_crate_is_listed_above_what_it_uses() {
    let doc = documented();
    for (i, (name, deps)) in doc.iter().enumerate() {
        for d in deps {
            let j = doc.iter().position(|(n, _)| n == d);
            assert!(
                j.is_some_and(|j| j > i),
                "{name} uses {d}, which is not listed below it"
            );
        }
    }
}
