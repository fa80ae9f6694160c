//! Hostile round 3, the attacker's own round (issue 29, "Done means"): an
//! unprivileged agent (the tests' `dryrun-test` user) owning its workspace
//! and its local state directory, against what this round changed: the
//! workspace bound, the files that run code later, the terminal notation,
//! the journal's anchor, and root reading the agent's state directory (the
//! README's `sudo dryrun show` reviewer flow). Every attack is judged on
//! the host: a command that returns instead of hanging, a finding in the
//! record, bytes on the reviewer's screen, a home that stays untouched.
//!
//! Findings of this round (each test says what it found and how it was
//! fixed): a fifo or oversized file in place of a record, a kept blob or the
//! journal hung root's `dryrun runs`, `show`, `diff` and `journal verify`;
//! build and environment entry points of whole ecosystems (.NET, Swift,
//! Elixir, a virtual environment's activation, Yarn's loader, ...) and
//! `node_modules/.bin`, on the PATH of every package script, went live
//! without a person; invisible characters outside the notation's list
//! (variation selectors) reached the screen; a `DRYRUN_SYSTEM_POLICY_DIR`
//! reached through a directory or link the agent controls was taken.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// `dryrun --local --state-dir STATE ARGS...` as root (the reviewer),
/// given up on after a generous time: a command that hangs fails the test
/// instead of hanging it (the answer is expected at once).
fn root_on_state(state: &Path, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(bin())
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .args(["--local", "--state-dir"])
        .arg(state)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The agent puts a fifo where `p` was (as itself, in its own directory).
fn agent_fifo(p: &Path) {
    let st = as_test_user("sh")
        .arg("-c")
        .arg("rm -f \"$0\" && mkfifo \"$0\"")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Root's command returned by itself (exit 124: `timeout` ended it).
fn assert_returned(what: &str, o: &Output) {
    assert_ne!(
        o.status.code(),
        Some(124),
        "{what}: root's dryrun hung on the agent's fifo: {}",
        text(o)
    );
}

/// Attack (found): the agent replaces files of its local state directory
/// by fifos: a kept blob, the journal's anchor, then the run's record and
/// the journal itself. Root, reviewing there (`sudo dryrun runs`, `show`,
/// `diff`, `journal verify`), blocked forever on the first read (only the
/// run lock had been made safe). Fixed: every state file is opened through
/// one function (`state_file`): never through a link, never waiting on a
/// fifo, regular files only, reads capped. Without it this test hangs at
/// the first `diff` (and fails at the timeout).
#[test]
fn fifos_in_an_agents_state_directory_never_hang_roots_review() {
    if !common::daemon::require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write("a.txt", "old\n");
    let r = ws.rehearse("echo new-content > a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(r.decision(), "promote", "{}", r.stderr);
    let id = run_id(&r);
    let run_dir = ws.state.join("runs").join(&id);
    // The positive control: root reads the intact directory, and the diff
    // comes from the kept blob the attack replaces.
    let o = root_on_state(&ws.state, &["diff", &id]);
    assert!(
        o.status.success() && text(&o).contains("+new-content"),
        "{}",
        text(&o)
    );
    let o = root_on_state(&ws.state, &["journal", "verify"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let blob = std::fs::read_dir(run_dir.join("blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read(p).is_ok_and(|b| b == b"new-content\n"))
        .expect("the new content is kept");

    agent_fifo(&blob);
    agent_fifo(&ws.state.join("journal.head"));
    let o = root_on_state(&ws.state, &["diff", &id]);
    assert_returned("diff (blob)", &o);
    let o = root_on_state(&ws.state, &["show", &id]);
    assert_returned("show", &o);
    assert!(text(&o).contains("echo new-content"), "{}", text(&o));
    let o = root_on_state(&ws.state, &["journal", "verify"]);
    assert_returned("journal verify (anchor)", &o);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(
        text(&o).contains("journal.head") && text(&o).contains("not a regular file"),
        "{}",
        text(&o)
    );

    agent_fifo(&run_dir.join("record.json"));
    agent_fifo(&ws.state.join("journal.jsonl"));
    for args in [
        vec!["runs"],
        vec!["show", &id],
        vec!["diff", &id],
        vec!["journal", "verify"],
    ] {
        let o = root_on_state(&ws.state, &args);
        assert_returned(&format!("{args:?} (record, journal)"), &o);
    }
}
