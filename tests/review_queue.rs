//! The review queue, through a real daemon with an agent uid (the test
//! user) and a reviewer uid (root): every run whose decision is not
//! promote waits in `awaiting_approval` (a blocked one with
//! `override_required`), oldest first; its submitter, and only its
//! submitter, withdraws it; a waiting run expires (journaled); a
//! configured command is told when a run starts waiting.

mod common;

use std::time::Duration;

use common::daemon::*;
use common::*;
use serde_json::Value;

/// A run that needs approval (a call a stub answered).
fn needs_approval(d: &Daemon, ws: &Ws) -> String {
    let r = submit_user(
        d,
        ws,
        "gh pr merge 4 && echo x > a.txt",
        &["--expect-write", "a.txt"],
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    assert!(r.json.get("override_required").is_none(), "{r:?}");
    r.json["run_id"].as_str().unwrap().to_string()
}

/// A blocked run (a forbidden path touched).
fn blocked(d: &Daemon, ws: &Ws) -> String {
    let r = submit_user(d, ws, "echo x > secret.txt", &["--forbid", "secret.txt"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    assert_eq!(r.json["override_required"], true, "{r:?}");
    r.json["run_id"].as_str().unwrap().to_string()
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn blocked_and_needs_approval_runs_wait_oldest_first_and_only_the_submitter_withdraws() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let first = blocked(&d, &ws);
    std::thread::sleep(Duration::from_millis(1100));
    let second = needs_approval(&d, &ws);
    let promoted = submit_user(&d, &ws, "echo x > a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(promoted.code, 0, "{promoted:?}");

    // The API and the CLI list the queue oldest first, for the reviewer
    // and (its own runs) for the agent.
    let (st, v) = d.curl(Who::Root, "GET", "/v1/runs?state=awaiting_approval", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(ids(&v["runs"]), [first.clone(), second.clone()]);
    let out = d
        .cli_user()
        .args(["runs", "--awaiting", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&listed), [first.clone(), second.clone()]);
    let out = d.cli_root().args(["runs", "--awaiting"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with(&first) && lines[0].contains("(override)"),
        "{text}"
    );
    assert!(lines[1].starts_with(&second), "{text}");

    // A blocked run is approved only with the explicit override.
    let (st, v) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{first}/approve"),
        Some("{}"),
    );
    assert_eq!(st, 409, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--override"),
        "{v}"
    );

    // Only the submitter withdraws: not root, the reviewer.
    let (st, v) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{second}/withdraw"),
        Some("{}"),
    );
    assert_eq!(st, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only its submitter"),
        "{v}"
    );
    let out = d
        .cli_user()
        .args(["withdraw", &second, "--note", "wrong branch", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["state"], "rejected", "{r}");
    assert_eq!(r["rejected_because"], "withdrawn", "{r}");
    let j = d.journal();
    let w = j
        .iter()
        .find(|e| e["kind"] == "rejection" && e["run_id"] == second.as_str())
        .expect("the withdrawal is journaled");
    assert_eq!(w["data"]["withdrawn_by_submitter"], true);
    assert_eq!(w["data"]["note"], "wrong branch");
    // It left the queue; a withdrawn run cannot be withdrawn again.
    let (_, v) = d.curl(Who::Root, "GET", "/v1/runs?state=awaiting_approval", None);
    assert_eq!(ids(&v["runs"]), std::slice::from_ref(&first));
    let (st, _) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{second}/withdraw"),
        None,
    );
    assert_eq!(st, 409);

    // The reviewer overrides the blocked run.
    let (st, v) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{first}/approve"),
        Some(r#"{"note":"ok","override":true}"#),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "approved");
    assert_eq!(v["approvals"][0]["overrode_block"], true, "{v}");
}

#[test]
fn a_waiting_run_expires_and_the_expiry_is_journaled() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--approval-expiry", "3"]);
    let ws = user_workspace();
    let id = needs_approval(&d, &ws);
    // The daemon's own check expires it without anyone looking.
    wait_until("the run to expire", 30, || {
        d.journal()
            .iter()
            .any(|e| e["kind"] == "run_expired" && e["run_id"] == id.as_str())
    });
    let (st, r) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["state"], "rejected", "{r}");
    assert_eq!(r["rejected_because"], "expired", "{r}");
    let j = d.journal();
    let e = j
        .iter()
        .find(|e| e["kind"] == "run_expired" && e["run_id"] == id.as_str())
        .unwrap();
    assert_eq!(e["data"]["state_was"], "awaiting_approval", "{e}");
    assert_eq!(e["data"]["expiry_s"], 3, "{e}");
    // Nobody approves an expired run.
    let (st, v) = d.curl(Who::Root, "POST", &format!("/v1/runs/{id}/approve"), None);
    assert_eq!(st, 409, "{v}");
    let (_, v) = d.curl(Who::Root, "GET", "/v1/runs?state=awaiting_approval", None);
    assert!(ids(&v["runs"]).is_empty(), "{v}");
    // The journal still verifies.
    let (st, v) = d.curl(Who::Root, "GET", "/v1/journal/verify", None);
    assert_eq!(st, 200);
    assert_eq!(v["ok"], true, "{v}");
}

#[test]
fn the_notification_command_gets_the_summary_of_a_run_that_starts_waiting() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let got = dir.path().join("notified.json");
    let script = dir.path().join("notify.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat > {0}.tmp && echo \"$DRYRUN_RUN_ID\" >> {0}.id && mv {0}.tmp {0}\n",
            got.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start(&["--notify-command", script.to_str().unwrap()]);
    let ws = user_workspace();
    let cmd = "printf 'release notes\\nline two\\n' | gh release create v1.13 --notes-file - && echo released > status.txt";
    let r = submit_user(&d, &ws, cmd, &["--expect-write", "status.txt"]);
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    wait_until("the notification", 30, || got.exists());
    let v: Value = serde_json::from_slice(&std::fs::read(&got).unwrap()).unwrap();
    assert_eq!(v["event"], "awaiting_approval", "{v}");
    assert_eq!(v["run_id"], id.as_str(), "{v}");
    assert_eq!(v["decision"], "needs_approval", "{v}");
    assert_eq!(v["submitted_by_uid"], test_user().0, "{v}");
    assert!(v["expires_at"].is_string(), "{v}");
    let action = &v["would_be_actions"][0];
    assert!(
        action["call"]
            .as_str()
            .unwrap()
            .starts_with("gh release create v1.13"),
        "{v}"
    );
    assert_eq!(action["stdin_text"], "release notes\nline two\n", "{v}");
    assert_eq!(
        std::fs::read_to_string(format!("{}.id", got.display())).unwrap(),
        format!("{id}\n")
    );
}

#[test]
fn a_failing_notification_command_is_logged_and_holds_nothing_up() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hang.sh");
    std::fs::write(&script, "#!/bin/sh\nsleep 60\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start(&[
        "--notify-command",
        script.to_str().unwrap(),
        "--notify-timeout",
        "1",
    ]);
    let ws = user_workspace();
    let t0 = std::time::Instant::now();
    let id = needs_approval(&d, &ws);
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    wait_until("the timeout to be logged", 30, || {
        d.log_text().contains("notification failed")
    });
    let log = d.log_text();
    assert!(log.contains(&id) && log.contains("killed"), "{log}");
}
