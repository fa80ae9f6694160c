//! Approvals and the risk budget mean something: the submitter never
//! approves its own run (not locally either: a pseudo-terminal proves a
//! terminal, not a second person), and a withdrawal gives no points back.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;

use common::daemon::*;
use common::*;

fn journal_count(state: &std::path::Path, kind: &str) -> usize {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!("\"kind\":\"{kind}\"")))
        .count()
}

/// `dryrun --local approve ID` under a real pseudo-terminal (script(1)),
/// as `who`, typing back the code it shows (or `answer`). Returns the exit
/// code and everything the terminal showed.
fn approve_at_a_terminal(
    ws: &Ws,
    who: Who,
    id: &str,
    answer: Option<&str>,
) -> (Option<i32>, String) {
    let cmdline = format!(
        "{} --local --state-dir {} approve {id} --note at-the-keyboard",
        bin().display(),
        ws.state.display()
    );
    let mut ch = common::terminal::under_a_pty(who, &cmdline)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TERM", "dumb")
        .spawn()
        .unwrap();
    let mut stdout = ch.stdout.take().unwrap();
    let mut stdin = ch.stdin.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let n = stdout.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some(i) = text.find("type this code to confirm: ")
            && text[i..].contains('>')
        {
            let code = text[i + 27..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            let typed = answer.map(String::from).unwrap_or(code);
            let _ = stdin.write_all(format!("{typed}\n").as_bytes());
            let mut rest = Vec::new();
            let _ = stdout.read_to_end(&mut rest);
            seen.extend_from_slice(&rest);
            break;
        }
    }
    drop(stdin);
    let st = ch.wait().unwrap();
    let mut err = String::new();
    let _ = ch.stderr.take().unwrap().read_to_string(&mut err);
    (
        st.code(),
        String::from_utf8_lossy(&seen).into_owned() + &err,
    )
}

#[test]
fn a_local_approval_by_the_submitters_uid_is_refused_and_another_uid_may_approve() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write(".git/hooks/.keep", "");
    let r = ws.rehearse(
        "echo x > .git/hooks/pre-commit",
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();

    // The agent (the submitter's uid) piping `yes`: refused, before any prompt.
    let mut ch = ws
        .command()
        .args(["approve", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = ch.stdin.take().unwrap().write_all(b"yes\nyes\n");
    let out = ch.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("never approve its own run"), "{err}");
    assert!(err.contains("sudo dryrun"), "{err}");

    // The pty trick: a real terminal, the code read and typed back. Refused
    // all the same, and no code is ever shown.
    let (code, text) = approve_at_a_terminal(&ws, Who::User, &id, None);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("never approve its own run"), "{text}");
    assert!(!text.contains("type this code"), "{text}");
    assert_eq!(journal_count(&ws.state, "approval"), 0);

    // Another uid (root, as `sudo dryrun approve` would be) at a terminal:
    // a wrong code is refused, the right one approves.
    let (code, text) = approve_at_a_terminal(&ws, Who::Root, &id, Some("WRONG1"));
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("did not match"), "{text}");
    assert_eq!(journal_count(&ws.state, "approval"), 0);
    let (code, text) = approve_at_a_terminal(&ws, Who::Root, &id, None);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("approved by uid 0"), "{text}");
    let rec: Value = serde_json::from_slice(
        &std::fs::read(ws.state.join("runs").join(&id).join("record.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["state"], "approved");
    assert_eq!(rec["approvals"][0]["by"]["uid"], 0);
    assert_eq!(journal_count(&ws.state, "approval"), 1);
    // Root worked in the user's state directory with the user's filesystem
    // identity: nothing there belongs to root now.
    let (u, _) = test_user();
    for e in walkdir::WalkDir::new(&ws.state).into_iter().flatten() {
        let m = e.path().symlink_metadata().unwrap();
        assert_eq!(m.uid(), u, "{} belongs to root", e.path().display());
    }
    // The submitter goes on to promote it.
    let out = ws.command().args(["promote", &id]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.dir.join(".git/hooks/pre-commit")).unwrap(),
        "x\n"
    );
}

/// A link planted in the state directory does not turn root's approval
/// into a write on a file the owner could not write.
#[test]
fn a_root_approval_never_writes_through_links_in_the_users_state_dir() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    let r = ws.rehearse("git push --force origin main || true", &[]);
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let victim = ws.root.path().join("root-only.txt");
    std::fs::write(&victim, "ROOT\n").unwrap();
    // In place of the record's spare (the version before, which the next
    // change rewrites).
    let st = as_test_user("ln")
        .arg("-sf")
        .arg(&victim)
        .arg(ws.state.join("runs").join(&id).join("record.json.partial"))
        .status()
        .unwrap();
    assert!(st.success());
    let (_, text) = approve_at_a_terminal(&ws, Who::Root, &id, None);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "ROOT\n",
        "{text}"
    );
}

/// The daemon refuses self-approval too, whatever group the submitter is in.
#[test]
fn the_daemon_refuses_self_approval() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--approver-group", &test_group()]);
    let ws = user_workspace();
    let r = submit_user(&d, &ws, "git push --force origin main || true", &[]);
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap();
    let (st, body) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/approve"), None);
    assert_eq!(st, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("never approve its own run"),
        "{body}"
    );
}

/// Only a reviewer's rejection refunds: the submitter withdrawing (rejecting
/// or cancelling its own run) after reading the evidence gets nothing back.
#[test]
fn a_withdrawal_refunds_no_budget_points() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--budget-points", "25", "--budget-window", "3600"]);
    let ws = user_workspace();
    let wd = ws.dir.display().to_string();
    let body = format!(
        r#"{{"command":"echo x > a.txt","working_dir":"{wd}","intent":{{"expected_writes":["a.txt"]}}}}"#
    );
    let submit = || d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    let (st, first) = submit();
    assert_eq!(st, 200, "{first}");
    let score = first["risk"]["score"].as_u64().unwrap();
    assert!(
        score > 0 && score * 2 <= 25 && score * 3 > 25,
        "score {score}"
    );
    // A reviewer rejects the first: refunded.
    let id = first["run_id"].as_str().unwrap();
    let (st, r) = d.curl(Who::Root, "POST", &format!("/v1/runs/{id}/reject"), None);
    assert_eq!(st, 200, "{r}");
    let (st, second) = submit();
    assert_eq!(st, 200, "{second}");
    let (st, third) = submit();
    assert_eq!(st, 200, "{third}");
    // The submitter withdraws the third: rejected, but no refund.
    let id = third["run_id"].as_str().unwrap();
    let (st, r) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/reject"), None);
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["state"], "rejected");
    let (st, refused) = submit();
    assert_eq!(st, 429, "a withdrawal refunded the budget: {refused}");
    assert_eq!(refused["error"]["code"], "budget_exhausted");
    let j = d.journal();
    let w = j
        .iter()
        .find(|b| b["kind"] == "rejection" && b["run_id"] == id)
        .unwrap();
    assert_eq!(w["data"]["withdrawn_by_submitter"], true);

    // Cancelling one's own running rehearsal refunds nothing either.
    let d = Daemon::start(&["--budget-points", "25", "--budget-window", "3600"]);
    let slow = format!(
        r#"{{"command":"echo x > a.txt; sleep 60","working_dir":"{wd}","intent":{{"expected_writes":["a.txt"]}}}}"#
    );
    let (st, s) = d.curl(Who::User, "POST", "/v1/runs", Some(&slow));
    assert_eq!(st, 202, "{s}");
    let id = s["run_id"].as_str().unwrap().to_string();
    let (_, rec) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}"), None);
    let charged = rec["risk"]["score"].as_u64().unwrap();
    assert!(charged > 0, "{rec}");
    let out = d.cli_user().args(["cancel", &id]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fits = (25 - charged.min(25)) / score;
    let submit = || d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    for i in 0..fits {
        let (st, r) = submit();
        assert_eq!(st, 200, "run {i}: {r}");
    }
    let (st, refused) = submit();
    assert_eq!(st, 429, "the cancellation refunded the budget: {refused}");
}
