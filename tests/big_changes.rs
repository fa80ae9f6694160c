//! A big change set, for real: a command that writes a 50,000-file
//! "dependency install" is rehearsed in the sandbox (through a real daemon,
//! as the unprivileged test user), approved by root, and promoted into the
//! user's workspace through the owner-credential agent. Every file must land
//! with its content, the journal must verify with a compact promotion
//! record, and the human output must summarise the change list by
//! directory while still naming the one surprise path planted among the
//! files. No timing is asserted here (see benches/bigchange.sh).

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::daemon::*;
use common::*;

const FILES: usize = 50_000;
const DIRS: usize = 2_000;

/// Writes FILES files in DIRS package directories (25 each: a LICENSE the
/// same in every package, an index.js, 23 modules), plus one file outside
/// what the run declares it writes.
const INSTALL: &str = r#"
import os, sys
files, dirs = int(sys.argv[1]), int(sys.argv[2])
per = files // dirs
lic = "Permission is hereby granted, free of charge.\n" * 4
for d in range(dirs):
    pkg = "node_modules/pkg%04d" % d
    os.makedirs(pkg)
    for i in range(per):
        if i == 0:
            name, body = "LICENSE", lic
        elif i == 1:
            name, body = "index.js", "// pkg%04d\n" % d
        else:
            name, body = "m%02d.js" % i, "module.exports = %d;\n" % (d * 100 + i)
        with open(os.path.join(pkg, name), "w") as f:
            f.write(body)
os.makedirs("config", exist_ok=True)
with open("config/planted.txt", "w") as f:
    f.write("not declared\n")
"#;

fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            n += count_files(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

#[test]
fn fifty_thousand_created_files_are_rehearsed_promoted_and_summarised() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("install.py", INSTALL);
    let cmd = format!("python3 install.py {FILES} {DIRS}");
    let r = submit_user(
        &d,
        &ws,
        &cmd,
        &["--expect-write", "node_modules/**", "--timeout", "900"],
    );
    assert!(matches!(r.code, 3 | 4), "{}", r.stderr);
    let id = r.json["run_id"].as_str().unwrap().to_string();
    assert!(r.limits_hit().is_empty(), "{:?}", r.limits_hit());
    let changes = r.changes();
    let created_files = changes
        .iter()
        .filter(|c| {
            c["kind"] == "created"
                && c["file_type"] == "file"
                && c["path"].as_str().unwrap().starts_with("node_modules/")
        })
        .count();
    assert_eq!(created_files, FILES);
    let surprises = strings(&r.json["verdict"]["surprise_paths"]);
    assert!(
        surprises.contains(&"config/planted.txt".to_string())
            && surprises.iter().all(|p| p.starts_with("config")),
        "{surprises:?}"
    );

    // People read a summary by directory, and the surprise path by name.
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["show", &id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  node_modules/ (52,000 created in 2,001 dirs)"),
        "{text}"
    );
    assert!(text.contains("config/planted.txt"), "{text}");
    assert!(text.lines().count() < 200, "{} lines", text.lines().count());

    // Root approves (overriding a block if the surprise blocked it).
    let mut a = d.cli_root();
    a.args(["approve", &id, "--note", "a big install"]);
    if r.code == 4 {
        a.arg("--override");
    }
    let out = a.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["promote", &id, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let receipt = &rec["receipt"];
    // The record's copy of the receipt counts a long change list.
    assert_eq!(receipt["changes_total"], changes.len());
    assert!(receipt["changes"].as_array().is_none_or(|c| c.is_empty()));

    // Every file landed, with its content, owned by the workspace owner.
    let nm = ws.dir.join("node_modules");
    assert_eq!(count_files(&nm), FILES);
    let (uid, _) = test_user();
    for pkg in [0, 1, 999, DIRS - 1] {
        let dir = nm.join(format!("pkg{pkg:04}"));
        let lic = std::fs::read_to_string(dir.join("LICENSE")).unwrap();
        assert_eq!(
            lic,
            "Permission is hereby granted, free of charge.\n".repeat(4)
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("index.js")).unwrap(),
            format!("// pkg{pkg:04}\n")
        );
        let m = dir.join("m24.js");
        assert_eq!(
            std::fs::read_to_string(&m).unwrap(),
            format!("module.exports = {};\n", pkg * 100 + 24)
        );
        assert_eq!(std::fs::metadata(&m).unwrap().uid(), uid);
    }
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("config/planted.txt")).unwrap(),
        "not declared\n"
    );

    // The journal verifies, and its promotion record is compact: a count,
    // the change set's hash and a summary by directory.
    let out = d.cli_root().args(["journal", "verify"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let journal = std::fs::read_to_string(d.state.join("journal.jsonl")).unwrap();
    let largest = journal.lines().map(str::len).max().unwrap();
    assert!(largest < 64 << 10, "a journal record of {largest} bytes");
    let promotion = d
        .journal()
        .into_iter()
        .find(|b| b["kind"] == "promotion")
        .unwrap();
    let data = &promotion["data"];
    assert_eq!(data["changes_total"], changes.len());
    assert_eq!(data["change_set"], receipt["change_set"]);
    let by_dir = data["changes_by_dir"].as_array().unwrap();
    let nm_row = by_dir.iter().find(|g| g["dir"] == "node_modules/").unwrap();
    assert_eq!(nm_row["created"], FILES + DIRS);
    assert_eq!(nm_row["dirs"], DIRS + 1);
}
