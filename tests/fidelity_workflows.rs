//! Fidelity: the rehearsal is the live world. Real workflows on real
//! projects from the package registries (the six sdist and its test suite,
//! the either crate with its dependencies vendored, an npm package and its
//! tests, a git repository made from six with a pre-commit hook), each run
//! directly in one copy and through dryrun (`execute`, then `promote`) in
//! another at the same path, as root and as the unprivileged test user,
//! with the toolchains where those users keep them. The harness is
//! `benches/fidelity/` (the bench `benches/fidelity.sh` drives the same
//! code); method and normalisation: docs/fidelity.md.
//!
//! Each workflow's result is asserted against [`TABLE`]: SAME where the
//! rehearsal is already the live world; elsewhere today's truth, DIFFERENT
//! or REFUSED with a piece of the reason, and the part of issue 30 (V: the
//! view of the user's files and writes outside the workspace; E: the
//! caller's environment and the machine's size; S: loopback services) or
//! the other change that turns it SAME. When that lands, this test fails
//! on the rows it changed, naming them: flip them to `Same`.
//!
//! Controls keep the comparison honest: `control-same` (depends on nothing
//! of the world) must stay SAME, `control-different` (records pid 1's
//! name, which a rehearsal cannot share) must stay DIFFERENT, and
//! `control-refused` (a lookup no allowlist names) must stay REFUSED.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// A workflow's result today, for one identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Now {
    Same,
    /// DIFFERENT; the reasons contain this.
    Different(&'static str),
    /// REFUSED; dryrun's reasons contain this.
    Refused(&'static str),
}

use Now::{Different, Refused, Same};

struct Row {
    workflow: &'static str,
    /// What turns the row SAME ("control": never changes; "-": SAME now).
    until: &'static str,
    root: Now,
    user: Now,
}

const CONTROL: &str = "control";
/// The view (the user's home and PATH read-only, its ~/.gitconfig, writes
/// outside the workspace seen) with the caller's environment (PATH, HOME,
/// VIRTUAL_ENV, no SOURCE_DATE_EPOCH: part E, merged): the caller's PATH
/// and HOME name directories in the home, which the sandbox shows only
/// once part V lands.
const VIEW_AND_ENV: &str = "part V (E merged)";
/// npm's cache directory: HOME is the caller's now (part E), and npm cannot
/// make `~/.npm` there until the view makes the home exist.
const VIEW: &str = "part V (the home exists)";

/// Every workflow the test runs, with its result today. One table: the
/// lead flips rows here as the parts land.
const TABLE: &[Row] = &[
    Row {
        workflow: "control-same",
        until: CONTROL,
        root: Same,
        user: Same,
    },
    Row {
        workflow: "control-different",
        until: CONTROL,
        root: Different("init.txt"),
        user: Different("init.txt"),
    },
    Row {
        workflow: "control-refused",
        until: CONTROL,
        root: Refused("[evidence.network] the command tried to reach unlisted.fidelity.test"),
        user: Refused("[evidence.network] the command tried to reach unlisted.fidelity.test"),
    },
    // cargo from ~/.cargo/bin (rustup in the home).
    Row {
        workflow: "cargo-build",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    Row {
        workflow: "cargo-test",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    Row {
        workflow: "cargo-fmt",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    Row {
        workflow: "cargo-clippy",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    // python from the activated venv (root's made from pyenv's Python).
    Row {
        workflow: "pytest",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    // A failing test suite: a failure is a result (promoted as the live
    // run leaves the workspace, with its exit status), so once V and E let
    // it run it exits 1 in both lanes.
    Row {
        workflow: "pytest-fails",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    // The project's venv: root's links to pyenv's Python in /root (not in
    // the sandbox); the user's to Debian's, so it runs, and with the
    // caller's environment (no SOURCE_DATE_EPOCH=0 any more) pip writes
    // the same timestamp-based byte code as live.
    Row {
        workflow: "pip-install",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    Row {
        workflow: "make",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    // ~/.gitconfig is not there (HOME is the caller's, which the sandbox
    // does not show yet): git asks the host name for an identity (a DNS
    // lookup of `dryrun`, blocked) and gives up.
    Row {
        workflow: "git-commit",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    Row {
        workflow: "git-branch",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    Row {
        workflow: "git-rebase",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    // git stash falls back to its own identity ("git stash <git@stash>")
    // where the user's ~/.gitconfig is hidden: a silent difference.
    Row {
        workflow: "git-stash",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    // npm's update check looks up its registry: with the home's
    // ~/.npm (its last-checked stamp) and ~/.npmrc visible it would not.
    Row {
        workflow: "npm-test",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
    // npm makes its cache in ~/.npm: HOME is the caller's (part E), which
    // does not exist in the sandbox until part V, so the install fails
    // there (ENOENT). Before part E, HOME was an empty /tmp/home and the
    // install went through the allowlist and the pinned stand-in, but
    // installed packages' own package.json and *.config.js matched protected
    // paths at any depth; now a bare `npm ci` is a dependency change, judged
    // per package (docs/dependencies.md, tests/dependency_installs.rs), so
    // only the view stands between this row and SAME.
    Row {
        workflow: "npm-ci",
        until: VIEW,
        root: Same,
        user: Same,
    },
    // SAME before part E (HOME=/tmp/home existed); ~/.npm as npm-ci.
    Row {
        workflow: "npx",
        until: VIEW,
        root: Same,
        user: Same,
    },
    // Part S merged: the envelope declares the service and is accepted,
    // but the command (`python -c` opening a socket) raises
    // [exfil.inline_socket], which waits for a person, and `python` is the
    // venv's in the home (part V).
    Row {
        workflow: "loopback-service",
        until: "part V, and an inline socket to a declared service (no part owns it)",
        root: Refused("[exfil.inline_socket]"),
        user: Refused("[exfil.inline_socket]"),
    },
    // After V and E the write to ~/.cache must also be named in
    // rehearsal.outside_writes (the harness checks it).
    Row {
        workflow: "home-cache",
        until: VIEW_AND_ENV,
        root: Same,
        user: Same,
    },
];

/// What one workflow gave for one identity (a harness JSON result).
fn outcome(results: &[Value], workflow: &str, identity: &str) -> Option<(String, Vec<String>)> {
    results
        .iter()
        .find(|r| r["workflow"] == workflow && r["identity"] == identity)
        .map(|r| {
            (
                r["result"].as_str().unwrap_or("").to_string(),
                strings(&r["reasons"]),
            )
        })
}

fn matches(now: Now, result: &str, reasons: &[String]) -> bool {
    let joined = reasons.join("\n");
    match now {
        Same => result == "SAME",
        Different(why) => result == "DIFFERENT" && joined.contains(why),
        Refused(why) => result == "REFUSED" && joined.contains(why),
    }
}

/// The tools the workflows drive, besides the toolchains in the homes
/// (which the harness sets up and names when one is missing).
fn tools_present() -> bool {
    [
        ("/usr/bin/python3", "python3"),
        ("npm", "npm"),
        ("node", "nodejs"),
        ("git", "git"),
        ("make", "make"),
        ("setpriv", "util-linux"),
        ("getent", "libc-bin"),
    ]
    .iter()
    .all(|(tool, package)| require_tool(tool, package))
}

#[test]
fn real_workflows_match_the_live_run_as_the_table_says() {
    if !require_root() || !tools_present() {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("fidelity.json");
    let names: Vec<&str> = TABLE.iter().map(|r| r.workflow).collect();
    let run = Command::new("/usr/bin/python3")
        .arg(repo.join("benches/fidelity/fidelity.py"))
        .args(["run", "--identities", "root,user", "--workflows"])
        .arg(names.join(","))
        .arg("--dryrun")
        .arg(bin())
        .arg("--json")
        .arg(&json)
        .current_dir(repo)
        .output()
        .expect("the fidelity harness runs");
    let table = String::from_utf8_lossy(&run.stdout);
    println!("{table}");
    assert!(
        run.status.success(),
        "the fidelity harness failed (exit {:?}):\n{}\n{}",
        run.status.code(),
        table,
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        results.len(),
        TABLE.len() * 2,
        "one result per workflow and identity: {results:#?}"
    );
    let mut wrong = Vec::new();
    for row in TABLE {
        for (identity, now) in [("root", row.root), ("user", row.user)] {
            let Some((result, reasons)) = outcome(&results, row.workflow, identity) else {
                wrong.push(format!("{} as {identity}: no result", row.workflow));
                continue;
            };
            if !matches(now, &result, &reasons) {
                let hint = if row.until == CONTROL {
                    " A control changed: the harness or its comparison is broken, not the table."
                        .to_string()
                } else if result == "SAME" {
                    format!(
                        " It is SAME now: if {} landed, flip this row to Same.",
                        row.until
                    )
                } else {
                    String::new()
                };
                wrong.push(format!(
                    "{} as {identity}: expected {now:?} (until: {}), got {result}:\n    {}{hint}",
                    row.workflow,
                    row.until,
                    reasons.join("\n    ")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} workflow result(s) differ from the table in tests/fidelity_workflows.rs:\n{}\n\nthe harness's table:\n{table}",
        wrong.len(),
        wrong.join("\n")
    );
}
