//! The crate's layering, checked from the source: `src/model/` is the
//! bottom layer (pure data and rules), so it imports no other module of the
//! crate and does no I/O. A `use crate::engine` (or any `crate::X` path
//! other than `crate::model`) in a model file fails this test.

use std::path::{Path, PathBuf};

const MODEL_DIR: &str = "src/model";

/// Paths that mean I/O, a clock, the environment or a system crate.
const MODEL_FORBIDDEN: [&str; 14] = [
    "std::fs",
    "std::process",
    "std::net",
    "std::env",
    "std::thread",
    "SystemTime",
    "Instant",
    "nix::",
    "libc::",
    "tokio::",
    "walkdir::",
    "xattr::",
    "landlock::",
    "getrandom::",
];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Code lines (comments dropped) of a file, with their numbers.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
}

/// Every crate module a line names: `crate::X` in paths and `use` trees.
fn crate_modules(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `dryrun_crate::`, not ours
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        out.push(name);
    }
    out
}

/// What in `src/model/` reaches outside it.
fn model_violations(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for f in rust_files(&root.join(MODEL_DIR)) {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f.strip_prefix(root).unwrap().display().to_string();
        let depth = f
            .strip_prefix(root.join(MODEL_DIR))
            .unwrap()
            .components()
            .count();
        let is_mod_rs = f.file_name().is_some_and(|n| n == "mod.rs");
        for (n, line) in code_lines(&text) {
            for m in crate_modules(line) {
                if m != "model" {
                    bad.push(format!("{rel}:{n}: imports crate::{m}: {}", line.trim()));
                }
            }
            // `super::` out of the model directory: from `model/mod.rs`
            // itself, or `super::super::` from a file directly in it.
            let supers_allowed = if is_mod_rs { depth - 1 } else { depth };
            if line.contains(&"super::".repeat(supers_allowed + 1)) {
                bad.push(format!("{rel}:{n}: climbs out of model/: {}", line.trim()));
            }
            for f in MODEL_FORBIDDEN {
                if line.contains(f) && !line.contains("#[cfg(test)]") {
                    bad.push(format!(
                        "{rel}:{n}: uses {f} (model/ does no I/O): {}",
                        line.trim()
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn the_model_layer_imports_nothing_else_of_the_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad = model_violations(root);
    assert!(
        bad.is_empty(),
        "src/model/ is the bottom layer: pure data and rules, importing no other module of the crate and doing no I/O:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn the_checker_sees_what_it_must() {
    assert_eq!(crate_modules("use crate::engine;"), ["engine"]);
    assert_eq!(
        crate_modules("use crate::{model::Decision, sandbox::wire};"),
        ["model", "sandbox"]
    );
    assert_eq!(
        crate_modules("let x = crate::workspace::paths::escape(y);"),
        ["workspace"]
    );
    assert!(crate_modules("use super::Decision;").is_empty());
    // A checker that finds nothing would pass anything: the model files exist.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(rust_files(&root.join(MODEL_DIR)).len() >= 5);
}
