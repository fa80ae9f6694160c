//! The crate's layering, checked from the source (a small reader of
//! `crate::` paths, since no module-graph tool runs offline here):
//!
//! - `src/model/` is the bottom layer (pure data and rules): it imports no
//!   other module of the crate and does no I/O;
//! - the top-level modules (`model`, `policy`, `engine`, ...) import each
//!   other without a cycle: each `crate::X` path (in `use` lines, `use`
//!   trees over several lines, and paths in code) and each `super::` that
//!   climbs out of a top-level module is an edge, and a cycle fails with the
//!   cycle and the lines that make it;
//! - `sandbox` is a leaf that only the engine imports (and `main.rs`, the
//!   binary's edge, which dispatches to the helper and stub programs before
//!   anything else runs); the sandbox itself imports only `model`;
//! - no source file is longer than [`MAX_FILE_LINES`] lines.

use std::collections::{BTreeMap, BTreeSet};
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
                if uses(line, f) && !line.contains("#[cfg(test)]") {
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

/// Does `line` name `item` (a path or a type) as a whole word: `nix::` is
/// the crate, not the end of `std::os::unix::`.
fn uses(line: &str, item: &str) -> bool {
    line.match_indices(item).any(|(i, _)| {
        !line[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn the_checker_sees_what_it_must() {
    assert!(uses("use nix::unistd::Uid;", "nix::"));
    assert!(uses("let t = std::fs::read(p);", "std::fs"));
    assert!(uses("x(libc::EPERM)", "libc::"));
    assert!(!uses("use std::os::unix::ffi::OsStringExt;", "nix::"));
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

/// An edge of the module graph: `from` imports `to` at `site` (file:line).
#[derive(Debug, Clone)]
struct Edge {
    to: String,
    site: String,
}

/// The file's text with `//` comments blanked (lines kept, so line numbers
/// stay right).
fn without_comments(text: &str) -> String {
    code_lines(text)
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The first names of the top-level items of the `{...}` group that `s`
/// starts with (`{a::b, c::{d, e}}` gives `a`, `c`), over several lines.
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut item_start = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    item_start = true;
                    continue;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => {
                item_start = true;
                continue;
            }
            _ => {}
        }
        if depth == 1 && item_start && !c.is_whitespace() {
            item_start = false;
            let name = ident_at(&s[i..]);
            if !name.is_empty() {
                heads.push(name);
            }
        }
    }
    heads
}

/// The top-level module a file of `src/` belongs to (`src/engine/live.rs`
/// is `engine`), and its module path (`["engine", "live"]`); `None` for the
/// crate roots (`lib.rs`, `main.rs`).
fn module_of(rel: &Path) -> Option<(String, Vec<String>)> {
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let mut path: Vec<String> = parts
        .iter()
        .map(|p| p.trim_end_matches(".rs").to_string())
        .collect();
    if path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    if path.len() == 1 && (path[0] == "lib" || path[0] == "main") {
        return None;
    }
    Some((path[0].clone(), path))
}

/// Every top-level module a file names, with the line: `crate::X` paths
/// (`use` trees included) and `super::` paths that climb to the crate root.
/// Inline modules are only ever `mod tests { ... }` at a file's end: past
/// such a line, one more `super::` is needed to climb.
fn imports_of(text: &str, module_path: &[String]) -> Vec<(usize, String)> {
    let code = without_comments(text);
    let line_at = |i: usize| code[..i].matches('\n').count() + 1;
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let word_before = |i: usize| {
        i > 0
            && (bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b'$')
    };
    for (i, _) in code.match_indices("crate::") {
        if word_before(i) {
            continue; // `$crate::`, `dryrun_crate::`: not a path of ours
        }
        let rest = &code[i + "crate::".len()..];
        let names = if rest.starts_with('{') {
            group_heads(rest)
        } else {
            vec![ident_at(rest)]
        };
        out.extend(names.into_iter().map(|n| (line_at(i), n)));
    }
    let inline_from = code
        .lines()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with("mod ") && t.trim_end().ends_with('{')
        })
        .map(|n| n + 1);
    for (i, _) in code.match_indices("super::") {
        if word_before(i) || code[..i].ends_with("super::") {
            continue; // counted from the first `super::` of the chain
        }
        let mut rest = &code[i..];
        let mut ups = 0usize;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r;
        }
        let line = line_at(i);
        let depth = module_path.len() + usize::from(inline_from.is_some_and(|n| line > n));
        if ups == depth {
            let name = if rest.starts_with('{') {
                group_heads(rest)
            } else {
                vec![ident_at(rest)]
            };
            out.extend(name.into_iter().map(|n| (line, n)));
        }
    }
    out.retain(|(_, n)| !n.is_empty() && n != "self" && n != "super");
    out
}

/// The module graph of `src/`: top-level module -> modules it imports.
fn module_graph(root: &Path) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let src = root.join("src");
    let mut graph: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for f in rust_files(&src) {
        let rel = f.strip_prefix(&src).unwrap();
        let Some((top, path)) = module_of(rel) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).unwrap();
        let node = graph.entry(top.clone()).or_default();
        for (line, to) in imports_of(&text, &path) {
            if to != top {
                node.entry(to)
                    .or_default()
                    .push(format!("src/{}:{line}", rel.display()));
            }
        }
    }
    graph
}

fn edges_of(graph: &BTreeMap<String, BTreeMap<String, Vec<String>>>, from: &str) -> Vec<Edge> {
    graph
        .get(from)
        .map(|m| {
            m.iter()
                .map(|(to, sites)| Edge {
                    to: to.clone(),
                    site: match sites.len() {
                        0..=3 => sites.join(", "),
                        n => format!("{} (and {} more)", sites[..3].join(", "), n - 3),
                    },
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Cycles between top-level modules: for each module on a cycle, the
/// shortest way back to itself, as `a -> b -> a` with the lines of each
/// edge. Each cycle is reported once.
fn module_cycles(graph: &BTreeMap<String, BTreeMap<String, Vec<String>>>) -> Vec<String> {
    let mut seen: BTreeSet<BTreeSet<String>> = BTreeSet::new();
    let mut out = Vec::new();
    for start in graph.keys() {
        // Breadth-first from `start` until it is reached again.
        let mut prev: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut found = None;
        'bfs: while let Some(m) = queue.pop_front() {
            for e in edges_of(graph, &m) {
                if &e.to == start {
                    found = Some((m.clone(), e.site.clone()));
                    break 'bfs;
                }
                if !prev.contains_key(&e.to) && &e.to != start {
                    prev.insert(e.to.clone(), (m.clone(), e.site.clone()));
                    queue.push_back(e.to.clone());
                }
            }
        }
        let Some((last, last_site)) = found else {
            continue;
        };
        let mut chain = vec![(last.clone(), start.clone(), last_site)];
        let mut at = last;
        while &at != start {
            let (p, site) = prev[&at].clone();
            chain.push((p.clone(), at.clone(), site));
            at = p;
        }
        chain.reverse();
        let members: BTreeSet<String> = chain.iter().map(|(a, _, _)| a.clone()).collect();
        if !seen.insert(members) {
            continue;
        }
        let names: Vec<&str> = chain
            .iter()
            .map(|(a, _, _)| a.as_str())
            .chain([start.as_str()])
            .collect();
        let mut text = format!("module cycle: {}", names.join(" -> "));
        for (a, b, site) in &chain {
            text.push_str(&format!("\n    {a} -> {b}: {site}"));
        }
        out.push(text);
    }
    out
}

/// Who imports the sandbox: only the engine may (and `main.rs`, the
/// binary's edge: it dispatches to the helper and stub programs before the
/// CLI starts); the sandbox itself imports only `model`.
fn sandbox_violations(root: &Path) -> Vec<String> {
    let graph = module_graph(root);
    let mut bad = Vec::new();
    for (from, tos) in &graph {
        if from != "engine"
            && let Some(sites) = tos.get("sandbox")
        {
            bad.push(format!("{from} imports sandbox: {}", sites.join(", ")));
        }
    }
    for (to, sites) in graph.get("sandbox").into_iter().flatten() {
        if to != "model" {
            bad.push(format!("sandbox imports {to}: {}", sites.join(", ")));
        }
    }
    // `lib.rs` only declares the modules; it imports none of them.
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    for (line, m) in imports_of(&lib, &[]) {
        if m == "sandbox" {
            bad.push(format!("src/lib.rs:{line} imports sandbox"));
        }
    }
    bad
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = module_graph(root);
    let cycles = module_cycles(&graph);
    let order: Vec<String> = graph
        .iter()
        .map(|(m, tos)| {
            let tos: Vec<&str> = tos.keys().map(String::as_str).collect();
            format!("{m} -> {}", tos.join(", "))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "the top-level modules of src/ must import each other without a cycle (move the shared type down, usually into model/):\n  {}\nthe module graph:\n  {}",
        cycles.join("\n  "),
        order.join("\n  ")
    );
}

#[test]
fn only_the_engine_imports_the_sandbox_and_the_sandbox_imports_only_the_model() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad = sandbox_violations(root);
    assert!(
        bad.is_empty(),
        "sandbox/ is a leaf: only the engine (and main.rs's dispatch) imports it, and it imports only model/ (route what others need through the engine, move shared types into model/):\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn the_graph_reader_sees_what_it_must() {
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let names = |v: Vec<(usize, String)>| v.into_iter().map(|(_, n)| n).collect::<Vec<_>>();
    // `use` trees over several lines, nested groups, `self`.
    let text = "use crate::{\n    model::Decision,\n    sandbox::{self, wire},\n};\n";
    assert_eq!(
        names(imports_of(text, &path(&["engine"]))),
        ["model", "sandbox"]
    );
    // Paths in code, `$crate` and comments left out.
    let text = "let x = crate::workspace::paths::escape(y); // crate::journal\n$crate::cli::x();\n";
    assert_eq!(names(imports_of(text, &path(&["verdict"]))), ["workspace"]);
    // `super::` that climbs to the crate root, and one that does not.
    let text = "use super::super::verdict::judge;\nuse super::Engine;\n";
    assert_eq!(
        names(imports_of(text, &path(&["engine", "live"]))),
        ["verdict"]
    );
    let text = "use super::super::wire;\n";
    assert!(imports_of(text, &path(&["sandbox", "helper", "init"])).is_empty());
    // Inside `mod tests { ... }`, one more `super::`.
    let text = "fn a() {}\nmod tests {\n    use super::super::super::record::X;\n    use super::super::Engine;\n}\n";
    assert_eq!(
        names(imports_of(text, &path(&["engine", "live"]))),
        ["record"]
    );
    // A cycle is found and named with its lines.
    let mut g: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    g.entry("policy".into())
        .or_default()
        .insert("classify".into(), vec!["src/policy/mod.rs:9".into()]);
    g.entry("classify".into())
        .or_default()
        .insert("policy".into(), vec!["src/classify/mod.rs:11".into()]);
    g.entry("classify".into())
        .or_default()
        .insert("model".into(), vec!["src/classify/mod.rs:10".into()]);
    let cycles = module_cycles(&g);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].starts_with("module cycle: classify -> policy -> classify"));
    assert!(cycles[0].contains("src/policy/mod.rs:9"));
    // The real graph has the modules it must, and the engine imports the
    // sandbox (a reader that finds nothing would pass anything).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let real = module_graph(root);
    for m in [
        "model", "policy", "classify", "sandbox", "engine", "daemon", "cli",
    ] {
        assert!(real.contains_key(m), "no module {m} in {real:?}");
    }
    assert!(real["engine"].contains_key("sandbox"));
}

/// The longest a source file may be: past it, split it by concern.
const MAX_FILE_LINES: usize = 800;

#[test]
fn no_source_file_is_over_the_size_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for f in rust_files(&root.join("src")) {
        let n = std::fs::read_to_string(&f).unwrap().lines().count();
        if n > MAX_FILE_LINES {
            long.push(format!(
                "{}: {n} lines",
                f.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines; split them by concern (a directory module with one file per part):\n  {}",
        long.join("\n  ")
    );
}
