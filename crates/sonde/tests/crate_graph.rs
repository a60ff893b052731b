//! The crate graph of docs/ARCHITECTURE.md is the workspace's: every
//! crate and its workspace dependencies as `cargo metadata` gives them,
//! each crate listed above everything it uses (so no crate uses one above
//! it, and no two import each other); and inside each crate no module
//! imports one that imports it back.

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

/// A module's path in its crate (`["tailer", "read"]`) from its file.
fn module_of(src: &std::path::Path, file: &std::path::Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The modules a file's code (its tests and comments left out) names
/// through `crate::` or `super::`, each resolved to the longest module
/// path that exists.
fn imports(
    module: &[String],
    text: &str,
    modules: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let code: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let resolve = |mut path: Vec<String>| {
        while !path.is_empty() && !modules.contains(&path) {
            path.pop();
        }
        path
    };
    let words = |rest: &str| -> Vec<String> {
        rest.split("::")
            .map(|w| {
                w.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|w| !w.is_empty() && w.chars().next().is_some_and(|c| c.is_lowercase()))
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        out.insert(resolve(words(&code[i + 7..])));
    }
    // `super` is the parent module (a file's module path without its
    // last part, whether it is `dir/mod.rs` or `dir/name.rs`).
    let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
    for (i, _) in code.match_indices("super::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut path = parent.clone();
        path.extend(words(&code[i + 7..]));
        out.insert(resolve(path));
    }
    out.remove(module);
    out
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut circles = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        let mut files = Vec::new();
        let mut dirs = vec![src.clone()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                if p.is_dir() {
                    if name != "bin" {
                        dirs.push(p);
                    }
                } else if name.ends_with(".rs") && name != "tests.rs" {
                    files.push(p);
                }
            }
        }
        let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for f in &files {
            let m = module_of(&src, f);
            let text = std::fs::read_to_string(f).unwrap();
            edges.insert(m.clone(), imports(&m, &text, &modules));
        }
        for (a, to) in &edges {
            for b in to {
                if a < b && edges.get(b).is_some_and(|back| back.contains(a)) {
                    circles.push(format!(
                        "{}: {} <-> {}",
                        src.display(),
                        a.join("::"),
                        b.join("::")
                    ));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules that import each other:\n{}",
        circles.join("\n")
    );
}
