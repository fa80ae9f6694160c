//! The live lane, for real: a real daemon (root, the reviewer) and the
//! unprivileged test user (the agent) promoting into a real workspace.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::*;
use common::*;

/// The agent's workspace with a few files.
fn project() -> Ws {
    let ws = Ws::new(Who::User);
    ws.write("blog/a.md", "alpha\n");
    ws.write("blog/b.md", "beta\n");
    ws.write("blog/old.md", "old\n");
    ws.write("notes.txt", "keep me\n");
    ws.write("run.sh", "#!/bin/sh\necho hi\n");
    ws
}

const EDIT: &str = "echo A >> blog/a.md; sed -i s/beta/BETA/ blog/b.md; rm blog/old.md; \
    mkdir -p blog/new/deep; echo c > blog/new/deep/c.md; ln -s a.md blog/link.md; chmod 600 run.sh";

fn as_user(d: &Daemon) -> Command {
    d.cli_user()
}

/// Run `cmd` for real, as the test user, in a copy of the workspace: what
/// a promotion must reproduce exactly.
fn reference_result(ws: &Ws, cmd: &str) -> std::collections::BTreeMap<std::path::PathBuf, String> {
    let copy = ws.root.path().join("reference");
    let st = Command::new("cp")
        .arg("-a")
        .arg(&ws.dir)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    let st = as_test_user("bash")
        .args(["-c", cmd])
        .current_dir(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    let snap = snapshot_tree(&copy);
    std::fs::remove_dir_all(&copy).unwrap();
    snap
}

/// Type, mode, owner, content (no times).
fn listing(t: &std::collections::BTreeMap<std::path::PathBuf, String>) -> Vec<(String, String)> {
    t.iter()
        .map(|(p, v)| {
            let kept: Vec<&str> = v.split(' ').filter(|f| !f.starts_with("mtime=")).collect();
            (p.display().to_string(), kept.join(" "))
        })
        .collect()
}

fn promote(d: &Daemon, who: Who, id: &str) -> (i32, Value, String) {
    let mut c = if who == Who::User {
        as_user(d)
    } else {
        d.cli_root()
    };
    let out = c.args(["promote", id, "--json"]).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn promotion_applies_exactly_the_rehearsed_changes_once() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let expected = reference_result(&ws, EDIT);
    let r = submit_user(&d, &ws, EDIT, &["--expect-write", "**"]);
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let (code, rec, err) = promote(&d, Who::User, &id);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rec["state"], "promoted");
    let after = ws.snapshot();
    assert_eq!(
        listing(&after),
        listing(&expected),
        "the promoted workspace differs from running the command for real"
    );
    // Files belong to the workspace owner, never to root or sandbox ids.
    let (u, g) = test_user();
    for e in walkdir::WalkDir::new(&ws.dir).into_iter().flatten() {
        let m = e.path().symlink_metadata().unwrap();
        assert_eq!((m.uid(), m.gid()), (u, g), "{}", e.path().display());
    }
    // The receipt binds what was reviewed and is in the journal.
    let rc = &rec["receipt"];
    let rid = rc["receipt_id"].as_str().unwrap().to_string();
    assert_eq!(rc["run_id"], id.as_str());
    assert_eq!(rc["envelope_hash"], r.json["envelope_hash"]);
    assert_eq!(
        rc["landlock_abi"],
        r.json["rehearsal"]["sandbox"]["landlock_abi"]
    );
    assert!(rc["policy_hash"].as_str().is_some_and(|h| h.len() == 64));
    assert_eq!(
        rc["changes"].as_array().unwrap().len(),
        r.changes().len(),
        "per-path before/after hashes"
    );
    let j = d.journal();
    let p = j.iter().find(|b| b["kind"] == "promotion").unwrap();
    assert_eq!(p["data"]["receipt_id"], rid.as_str());
    assert_eq!(p["data"]["change_set"], rc["change_set"]);
    let out = as_user(&d)
        .args(["receipt", "show", &rid])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("receipt {rid}")));
    // Single use: a second promotion is refused (409) and changes nothing.
    let (code, _, err) = promote(&d, Who::User, &id);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("already promoted") && err.contains("409"),
        "{err}"
    );
    let (st, body) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/promote"), None);
    assert_eq!(st, 409, "{body}");
    assert_eq!(ws.snapshot(), after);
}

#[test]
fn only_a_promotable_or_approved_run_goes_live() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let before = ws.snapshot();
    // Blocked (a write outside the intent): refused.
    let r = submit_user(
        &d,
        &ws,
        "echo x >> notes.txt",
        &["--expect-write", "blog/*"],
    );
    assert_eq!(r.code, 4);
    let (code, _, err) = promote(&d, Who::User, r.json["run_id"].as_str().unwrap());
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("only a run whose decision is promote"),
        "{err}"
    );
    // Awaiting approval: refused until a reviewer approves; then it goes live.
    std::fs::create_dir_all(ws.dir.join(".git/hooks")).unwrap();
    ws.chown_all();
    let before = {
        let mut b = before;
        b.extend(ws.snapshot());
        b
    };
    let r = submit_user(
        &d,
        &ws,
        "echo 'exit 0' > .git/hooks/pre-commit",
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let (code, _, err) = promote(&d, Who::User, &id);
    assert_eq!(code, 4);
    assert!(err.contains("awaiting approval"), "{err}");
    assert_eq!(ws.snapshot(), before);
    let out = d
        .cli_root()
        .args(["approve", &id, "--note", "ok"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let (code, rec, err) = promote(&d, Who::User, &id);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rec["receipt"]["approvals"][0]["by"]["uid"], 0);
    assert_eq!(
        std::fs::read_to_string(ws.dir.join(".git/hooks/pre-commit")).unwrap(),
        "exit 0\n"
    );
}

#[test]
fn drift_in_one_touched_path_aborts_with_nothing_written() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let r = submit_user(&d, &ws, EDIT, &["--expect-write", "**"]);
    assert_eq!(r.code, 0, "{r:?}");
    // Someone edits b.md after the rehearsal.
    std::fs::write(ws.dir.join("blog/b.md"), "beta, edited by a human\n").unwrap();
    let before = ws.snapshot();
    let (code, _, err) = promote(&d, Who::User, r.json["run_id"].as_str().unwrap());
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("blog/b.md") && err.contains("nothing was written"),
        "{err}"
    );
    assert!(
        !err.contains("blog/a.md"),
        "only the drifted path is named: {err}"
    );
    assert_eq!(ws.snapshot(), before, "nothing was written");
    assert!(d.journal().iter().all(|b| b["kind"] != "promotion"));
}

#[test]
fn a_directory_swapped_for_a_symlink_cannot_redirect_a_write() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let r = submit_user(
        &d,
        &ws,
        "echo A >> blog/a.md",
        &["--expect-write", "blog/*"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    // Outside the workspace: a directory holding the same a.md, so content
    // checks alone would pass if paths were followed.
    let (outside_dir, outside) = host_canary("a.md", "alpha\n");
    std::fs::set_permissions(outside_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let swap = format!(
        "mv blog blog.real && ln -s {} blog",
        outside_dir.path().display()
    );
    let st = as_test_user("sh")
        .args(["-c", &swap])
        .current_dir(&ws.dir)
        .status()
        .unwrap();
    assert!(st.success());
    let (code, _, err) = promote(&d, Who::User, r.json["run_id"].as_str().unwrap());
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("symlink"), "{err}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "alpha\n");
    assert_eq!(
        std::fs::read_dir(outside_dir.path()).unwrap().count(),
        1,
        "nothing was created outside"
    );
}

#[test]
fn setid_files_and_special_files_are_never_promoted() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let before = ws.snapshot();
    let r = submit_user(
        &d,
        &ws,
        "mkfifo pipe; echo x > tool; chmod u+s tool; echo fine > fine.txt; \
         mkdir -p vendor; cp /usr/bin/git vendor/git",
        &["--expect-write", "**"],
    );
    assert_eq!(r.code, 4, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    // Even a reviewer's override does not let them through.
    let out = d
        .cli_root()
        .args(["approve", &id, "--override", "--note", "try"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let (code, _, err) = promote(&d, Who::Root, &id);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("tool: a setuid/setgid file is never promoted"),
        "{err}"
    );
    assert!(err.contains("pipe: a fifo"), "{err}");
    // A copy of a stubbed tool is the stub's script in the rehearsal, not
    // the tool it is live.
    assert!(
        err.contains("vendor/git: a copy of a shadow stub's script"),
        "{err}"
    );
    assert!(
        r.reasons()
            .iter()
            .any(|x| x.starts_with("[stubs.copied_stub]") && x.contains("vendor/git")),
        "{:?}",
        r.reasons()
    );
    assert_eq!(
        ws.snapshot(),
        before,
        "nothing was written, not even fine.txt"
    );
}

#[test]
fn rollback_restores_and_refuses_after_a_later_edit() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let original = ws.snapshot();
    let r = submit_user(&d, &ws, EDIT, &["--expect-write", "**"]);
    let (code, rec, err) = promote(&d, Who::User, r.json["run_id"].as_str().unwrap());
    assert_eq!(code, 0, "{err}");
    let rid = rec["receipt"]["receipt_id"].as_str().unwrap().to_string();
    let out = as_user(&d).args(["rollback", &rid]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        listing(&ws.snapshot()),
        listing(&original),
        "rollback restores the workspace exactly"
    );
    let out = as_user(&d).args(["rollback", &rid]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "a receipt rolls back once");
    assert!(d.journal().iter().any(|b| b["kind"] == "rollback"));

    // Promote again (a new rehearsal), then someone edits a promoted file.
    let r = submit_user(&d, &ws, EDIT, &["--expect-write", "**"]);
    let (code, rec, err) = promote(&d, Who::User, r.json["run_id"].as_str().unwrap());
    assert_eq!(code, 0, "{err}");
    let rid = rec["receipt"]["receipt_id"].as_str().unwrap().to_string();
    std::fs::write(ws.dir.join("blog/new/deep/c.md"), "edited later\n").unwrap();
    let before = ws.snapshot();
    let out = as_user(&d).args(["rollback", &rid]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("blog/new/deep/c.md") && err.contains("nothing was rolled back"),
        "{err}"
    );
    assert_eq!(ws.snapshot(), before);
}

#[test]
fn kill9_during_an_apply_leaves_all_or_nothing() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start_env(&[], &[("DRYRUN_FAULT_APPLY_STALL_MS", "60000")]);
    let ws = project();
    let original = ws.snapshot();
    let r = submit_user(&d, &ws, EDIT, &["--expect-write", "**"]);
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let mut promoting = as_user(&d)
        .args(["promote", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The first steps (deletion of old.md, new directories) land, then the
    // apply stalls halfway.
    wait_until("the apply to be halfway", 30, || {
        !ws.dir.join("blog/old.md").exists()
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_ne!(ws.snapshot(), original, "the crash lands mid-apply");
    d.kill9();
    let _ = promoting.wait();
    d.restart(&[]);
    assert_eq!(
        listing(&ws.snapshot()),
        listing(&original),
        "after restart the workspace is exactly as before (content, types, modes, owners)"
    );
    let c = dryrun::cli::client::Client::new(&d.socket);
    let rec: Value = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
    assert_eq!(rec["state"], "rehearsed");
    assert!(rec["receipt"].is_null());
    let j = d.journal();
    assert!(
        j.iter()
            .any(|b| b["kind"] == "promotion_aborted" && b["run_id"] == id.as_str())
    );
    assert!(j.iter().all(|b| b["kind"] != "promotion"));
    let v: Value = c.call("GET", "/v1/journal/verify", None).unwrap();
    assert_eq!(v["ok"], true);
    // And it can still go live, fully, once.
    let expected = reference_result(&ws, EDIT);
    let (code, _, err) = promote(&d, Who::User, &id);
    assert_eq!(code, 0, "{err}");
    assert_eq!(listing(&ws.snapshot()), listing(&expected));
}

#[test]
fn local_mode_promotes_and_rolls_back_too() {
    // As the test user when root (shifted ids, chown), else as ourselves.
    let ws = Ws::new(Who::User);
    ws.write("a.txt", "one\n");
    let r = ws.rehearse("echo two >> a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let out = ws
        .command()
        .args(["promote", &id, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rid = rec["receipt"]["receipt_id"].as_str().unwrap().to_string();
    let out = ws.command().args(["rollback", &rid]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
        "one\n"
    );
}

fn submit_envelope(d: &Daemon, ws: &Ws, yaml: &str) -> Run {
    let ch = execute_envelope_in_background(d.cli_user().current_dir(&ws.dir), yaml);
    to_run(ch.wait_with_output().unwrap())
}

#[test]
fn a_rerun_needs_approval_runs_live_with_what_live_grants_and_applies_matching_writes() {
    if !require_root() {
        return;
    }
    use std::io::Read;
    let d = Daemon::start(&[]);
    let ws = project();
    // A "remote service" on the host's loopback.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let rx = received.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let server = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = String::new();
                    let _ = s.read_to_string(&mut buf);
                    rx.lock().unwrap().push(buf);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    let token = format!("live-token-{}", std::process::id());
    let yaml = format!(
        "command: \"echo done > status.txt; (exec 3<>/dev/tcp/127.0.0.1/{port} && printf '%s' \\\"$LIVE_TOKEN\\\" >&3) 2>/dev/null; true\"\n\
         working_dir: {}\n\
         intent: {{expected_writes: [status.txt]}}\n\
         live: {{mode: rerun, network: host, env_from_host: [LIVE_TOKEN]}}\n",
        ws.dir.display()
    );
    let r = submit_envelope(&d, &ws, &yaml);
    // The rehearsal tried the network (cut) and a rerun always needs a human.
    assert!(r.code == 3 || r.code == 4, "{r:?}");
    assert!(
        r.reasons().iter().any(|x| x.contains("[live.rerun]")),
        "{:?}",
        r.reasons()
    );
    assert_eq!(r.json["live"]["env_from_host"][0], "LIVE_TOKEN");
    assert!(
        received.lock().unwrap().is_empty(),
        "the rehearsal reached the host"
    );
    let id = r.json["run_id"].as_str().unwrap().to_string();
    // Not before approval.
    let out = d
        .cli_user()
        .env("LIVE_TOKEN", &token)
        .args(["promote", &id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let mut approve = d.cli_root();
    approve.args(["approve", &id, "--note", "post the token"]);
    if r.code == 4 {
        approve.arg("--override");
    }
    assert_eq!(approve.output().unwrap().status.code(), Some(0));
    // Without the variable the live run cannot start.
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("LIVE_TOKEN"));
    let out = d
        .cli_user()
        .env("LIVE_TOKEN", &token)
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
    assert_eq!(rec["receipt"]["mode"], "rerun");
    assert!(rec["receipt"]["live_result"]["live_run_id"].is_string());
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("status.txt")).unwrap(),
        "done\n"
    );
    wait_until("the live run's message", 10, || {
        !received.lock().unwrap().is_empty()
    });
    assert_eq!(*received.lock().unwrap(), vec![token.clone()]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    server.join().unwrap();
    // The host variable's value is never stored.
    for e in walkdir::WalkDir::new(&d.state).into_iter().flatten() {
        if e.file_type().is_file() {
            let b = std::fs::read(e.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&b).contains(&token),
                "{}",
                e.path().display()
            );
        }
    }
}

#[test]
fn a_rerun_whose_live_writes_differ_applies_nothing() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let before = ws.snapshot();
    let yaml = format!(
        "command: \"date +%s%N > stamp.txt\"\nworking_dir: {}\nintent: {{expected_writes: [stamp.txt]}}\nlive: {{mode: rerun}}\n",
        ws.dir.display()
    );
    let r = submit_envelope(&d, &ws, &yaml);
    assert_eq!(r.code, 3, "a rerun always needs approval: {r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        d.cli_root()
            .args(["approve", &id])
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("stamp.txt: live result differs") && err.contains("nothing was applied"),
        "{err}"
    );
    assert_eq!(ws.snapshot(), before);
    assert!(d.journal().iter().any(|b| b["kind"] == "rerun_mismatch"));
    assert!(d.journal().iter().all(|b| b["kind"] != "promotion"));
}

/// A rerun approval is spent by its first live execution, whatever its
/// outcome: after a live run whose writes differ, the run has left
/// `approved`, and promoting again runs nothing (a host-side counter that
/// the live command bumps proves it ran exactly once).
#[test]
fn a_rerun_approval_is_spent_by_its_first_live_execution() {
    if !require_root() {
        return;
    }
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let d = Daemon::start(&[]);
    let ws = project();
    // The host-side counter: a listener on the host's loopback that the
    // live run (network: host) reaches once per execution; a rehearsal,
    // with the network cut, never does.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let server = {
        let (count, stop) = (count.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok(_) => {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
    };
    let yaml = format!(
        "command: \"date +%s%N > stamp.txt; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; true\"\n\
         working_dir: {}\nintent: {{expected_writes: [stamp.txt]}}\nlive: {{mode: rerun, network: host}}\n",
        ws.dir.display()
    );
    let r = submit_envelope(&d, &ws, &yaml);
    assert!(r.code == 3 || r.code == 4, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "the rehearsal reached the host"
    );
    let mut approve = d.cli_root();
    approve.args(["approve", &id]);
    if r.code == 4 {
        approve.arg("--override");
    }
    assert_eq!(approve.output().unwrap().status.code(), Some(0));
    let runs_of = |_: &Daemon| {
        std::thread::sleep(Duration::from_millis(300));
        count.load(Ordering::SeqCst)
    };

    // First promotion: the live run executes once, its writes differ.
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("live result differs"), "{err}");
    let live_runs = runs_of(&d);
    assert_eq!(live_runs, 1, "the live command ran {live_runs} times");
    let (st, rec) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(st, 200);
    assert_eq!(rec["state"], "failed", "{rec}");
    assert!(
        rec["error"]
            .as_str()
            .unwrap()
            .contains("spent by its first live execution"),
        "{rec}"
    );
    let live_records = |d: &Daemon| {
        d.journal()
            .iter()
            .filter(|b| b["kind"] == "run_submitted" || b["kind"] == "rerun_started")
            .count()
    };
    let before = live_records(&d);
    assert!(
        d.journal()
            .iter()
            .any(|b| b["kind"] == "rerun_started" && b["run_id"] == id.as_str())
    );

    // Second promotion (CLI and API): refused, nothing runs.
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("is failed"), "{err}");
    let (st, body) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/promote"), None);
    assert_eq!(st, 409, "{body}");
    assert_eq!(live_records(&d), before, "a second live execution started");
    assert_eq!(runs_of(&d), 1, "the live command ran again");
    // A reviewer cannot re-approve a spent run either: rehearse again.
    let out = d.cli_root().args(["approve", &id]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(runs_of(&d), 1, "the live command ran again");
    stop.store(true, Ordering::SeqCst);
    server.join().unwrap();
}

/// Root-owned objects moved into the agent's reach after the checks (the
/// live-lane review's attacks): a promotion never writes, chmods or chowns
/// what the workspace owner could not touch itself.
#[test]
fn someone_elses_objects_swapped_in_are_never_touched() {
    if !require_root() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let stall = 2500;
    let d = Daemon::start_env(&[], &[("DRYRUN_FAULT_APPLY_STALL_MS", "2500")]);
    let root_dir = |ws: &Ws, name: &str, mode: u32| {
        let p = ws.root.path().join(name);
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("f.txt"), "ROOT\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    };
    let fingerprint = |p: &std::path::Path| listing(&snapshot_tree(p));

    // (a) The workspace directory itself replaced by a root-owned one.
    let ws = project();
    let r = submit_user(
        &d,
        &ws,
        "echo payload > dropped.sh",
        &["--expect-write", "*"],
    );
    let victim = root_dir(&ws, "rootcfg", 0o755);
    std::fs::rename(&ws.dir, ws.root.path().join("ws.real")).unwrap();
    std::fs::rename(&victim, &ws.dir).unwrap();
    let before = fingerprint(&ws.dir);
    let (code, _, err) = promote(&d, Who::User, r.json["run_id"].as_str().unwrap());
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("no longer the directory resolved for this run"),
        "{err}"
    );
    assert_eq!(fingerprint(&ws.dir), before);

    // (b) A root-owned 0700 directory appears where a directory is created.
    let ws = project();
    let r = submit_user(
        &d,
        &ws,
        "echo 1 > a1; echo 2 > a2; mkdir -p z/newdir",
        &["--expect-write", "**"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let p = as_user_promote(&d, &id);
    wait_until("the first steps", 20, || ws.dir.join("a2").exists());
    let planted = ws.dir.join("z/newdir");
    std::fs::create_dir(&planted).unwrap();
    std::fs::write(planted.join("secret"), "ROOT\n").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = p.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("owned by uid 0 is in the way"), "{err}");
    let m = std::fs::metadata(&planted).unwrap();
    assert_eq!(
        (m.uid(), m.mode() & 0o7777),
        (0, 0o700),
        "root's directory untouched"
    );

    // (c) A root-owned 0600 file swapped over a file whose mode changes.
    let ws = project();
    let r = submit_user(&d, &ws, "chmod 664 notes.txt", &["--expect-write", "*"]);
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let secret = ws.dir.join(".rootfile");
    std::fs::write(&secret, "TOPSECRET\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = as_user_promote(&d, &id);
    std::thread::sleep(Duration::from_millis(stall / 3));
    std::fs::rename(&secret, ws.dir.join("notes.txt")).unwrap();
    let out = p.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("belongs to uid 0") && err.contains("not changed"),
        "{err}"
    );
    // Root's file was never opened up; the undo put the agent's own file
    // back (replacing an entry of its own directory is within its rights).
    let m = std::fs::metadata(ws.dir.join("notes.txt")).unwrap();
    assert!(
        !(m.uid() == 0 && m.mode() & 0o066 != 0),
        "root's file was opened up"
    );
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("notes.txt")).unwrap(),
        "keep me\n"
    );

    // (d) The agent's directory swapped for a root-owned one mid-apply.
    let ws = project();
    std::fs::create_dir(ws.dir.join("sub")).unwrap();
    ws.write("sub/f.txt", "agent\n");
    let r = submit_user(
        &d,
        &ws,
        "echo pwned > sub/f.txt; echo new > sub/new.txt",
        &["--expect-write", "**"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let rootdir = root_dir(&ws, "rootdir", 0o755);
    let before = fingerprint(&rootdir);
    let p = as_user_promote(&d, &id);
    wait_until("the first write", 20, || {
        std::fs::read_to_string(ws.dir.join("sub/f.txt")).is_ok_and(|t| t == "pwned\n")
    });
    std::fs::rename(ws.dir.join("sub"), ws.root.path().join("sub.agent")).unwrap();
    std::fs::rename(&rootdir, ws.dir.join("sub")).unwrap();
    let out = p.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("belongs to uid 0"), "{err}");
    assert_eq!(
        fingerprint(&ws.dir.join("sub")),
        before,
        "root's directory untouched"
    );

    // (e) A root-owned file swapped in where the promotion only sets a
    // time (the command touched notes.txt): the time is the owner's to
    // set on its own files only; root's file keeps its time and content.
    let ws = project();
    let r = submit_user(
        &d,
        &ws,
        "touch notes.txt; echo 1 > a1; echo 2 > a2; echo 3 > a3",
        &["--expect-write", "*"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let rootfile = ws.root.path().join("rootfile");
    std::fs::write(&rootfile, "ROOT\n").unwrap();
    let st = Command::new("touch")
        .args(["-d", "@1262304000"])
        .arg(&rootfile)
        .status()
        .unwrap();
    assert!(st.success());
    let p = as_user_promote(&d, &id);
    wait_until("the first write", 20, || ws.dir.join("a1").exists());
    std::fs::rename(&rootfile, ws.dir.join("notes.txt")).unwrap();
    let out = p.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let m = std::fs::metadata(ws.dir.join("notes.txt")).unwrap();
    assert_eq!(
        (m.uid(), m.mtime()),
        (0, 1_262_304_000),
        "root's file's time untouched"
    );
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("notes.txt")).unwrap(),
        "ROOT\n"
    );
}

fn as_user_promote(d: &Daemon, id: &str) -> std::process::Child {
    d.cli_user()
        .args(["promote", id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_promoted_run_with_stubbed_calls_says_in_its_receipt_and_journal_that_they_were_not_made() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = project();
    let cmd = "gh pr merge 4 --squash && echo merged > blog/status.md";
    let r = submit_user(&d, &ws, cmd, &["--expect-write", "blog/*.md"]);
    assert_eq!(r.code, 3, "a would-be action needs approval: {r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let ev = r.json["rehearsal"]["evidence_hash"]
        .as_str()
        .unwrap()
        .to_string();
    // The verdict's journal record carries the would-be actions and the
    // evidence hash.
    let j = d.journal();
    let v = j
        .iter()
        .find(|b| b["kind"] == "verdict" && b["run_id"] == id.as_str())
        .unwrap();
    assert_eq!(v["data"]["evidence_hash"], ev.as_str());
    assert_eq!(
        v["data"]["would_be_actions"],
        serde_json::json!(["gh pr merge 4 --squash → exit 0 (stub)"])
    );
    let (st, body) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{id}/approve"),
        Some(r#"{"note":"merge is fine"}"#),
    );
    assert_eq!(st, 200, "{body}");
    // A plain apply would write the call's local consequences as if it
    // had been made: refused, naming the call and the two ways out.
    let (code, rec, err) = promote(&d, Who::User, &id);
    assert_eq!(code, 4, "{err}");
    assert_eq!(rec["error"]["code"], "conflict", "{rec}");
    for needle in [
        "gh pr merge 4 --squash → exit 0 (stub)",
        "--local-only",
        "live.mode: rerun",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from {err}");
    }
    assert!(
        !ws.dir.join("blog/status.md").exists(),
        "nothing was written"
    );
    let (st, body) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/promote"),
        Some("{}"),
    );
    assert_eq!(st, 409, "{body}");
    // Saying so promotes the local writes; the calls are listed as not made.
    let out = as_user(&d)
        .args(["promote", &id, "--local-only", "--json"])
        .output()
        .unwrap();
    let (code, err) = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rec["receipt"]["local_only"], true, "{rec}");
    // Only the local change went live; the receipt says the call was not made.
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("blog/status.md")).unwrap(),
        "merged\n"
    );
    let rc = &rec["receipt"];
    assert_eq!(rc["evidence_hash"], ev.as_str());
    assert_eq!(
        rc["calls_not_made"],
        serde_json::json!(["gh pr merge 4 --squash → exit 0 (stub)"])
    );
    let j = d.journal();
    let p = j.iter().find(|b| b["kind"] == "promotion").unwrap();
    assert_eq!(p["data"]["calls_not_made"], rc["calls_not_made"]);
    assert_eq!(p["data"]["local_only"], true);
    let rid = rc["receipt_id"].as_str().unwrap();
    let out = as_user(&d).args(["receipt", "show", rid]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("NOT made live:\n  gh pr merge 4 --squash → exit 0 (stub)"),
        "{text}"
    );
    // A run without stubbed calls has no such list.
    let r = submit_user(
        &d,
        &ws,
        "echo x > blog/x.md",
        &["--expect-write", "blog/*.md"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let (code, rec, err) = promote(&d, Who::User, r.json["run_id"].as_str().unwrap());
    assert_eq!(code, 0, "{err}");
    assert!(rec["receipt"]["calls_not_made"].is_null(), "{rec}");
}

/// The live lane gives what it writes the modification time the command
/// left in the rehearsal, as the command itself would have: a `touch` of
/// unchanged content (a make stamp) moves it forward, `touch -d`, `cp -p`
/// and `touch -h` set older ones, on files, new directories' entries and
/// symlinks. A read-only run writes nothing, not even a time. Judged on
/// the host's files after the promotion, as root and as the test user.
#[test]
fn promoted_paths_keep_the_times_the_command_gave_them() {
    const OLD: i64 = 1_262_304_000; // 2010-01-01
    for who in identities() {
        let ws = Ws::new(who);
        for f in ["stamp", "old.txt", "ro-stamp"] {
            let p = ws.write(f, "s\n");
            let st = Command::new("touch")
                .args(["-h", "-d", &format!("@{OLD}")])
                .arg(&p)
                .status()
                .unwrap();
            assert!(st.success());
        }
        let mtime = |rel: &str| {
            std::fs::symlink_metadata(ws.dir.join(rel))
                .unwrap_or_else(|e| panic!("{who:?} {rel}: {e}"))
                .mtime()
        };
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let r = ws.rehearse(
            "touch stamp && touch -d @1577836800 old.txt && mkdir -p x && printf n > x/new.txt \
             && touch -d @981158400 x/new.txt && cp -p old.txt x/copy.txt && ln -s new.txt x/l \
             && touch -h -d @1104537600 x/l",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let id = r.json["run_id"].as_str().unwrap().to_string();
        let change = |p: &str| {
            r.json["rehearsal"]["changes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["path"] == p)
                .cloned()
                .unwrap_or_else(|| panic!("{who:?}: no change for {p}: {r:?}"))
        };
        assert_eq!(change("stamp")["kind"], "identical", "{who:?}");
        assert!(
            change("stamp")["mtime_after_ns"].as_i64().is_some(),
            "{who:?}"
        );
        promote_ok(ws.command(), &id, &format!("{who:?}"));
        assert!(
            mtime("stamp") >= started - 1,
            "{who:?}: the touch of stamp went live"
        );
        assert_eq!(mtime("old.txt"), 1_577_836_800, "{who:?}");
        assert_eq!(mtime("x/new.txt"), 981_158_400, "{who:?}");
        assert_eq!(mtime("x/copy.txt"), 1_577_836_800, "{who:?}: cp -p");
        assert_eq!(mtime("x/l"), 1_104_537_600, "{who:?}: the link itself");

        // A read-only run: nothing is written, not even a time.
        let r = ws.rehearse("touch ro-stamp", &["--read-only"]);
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let id = r.json["run_id"].as_str().unwrap().to_string();
        promote_ok(ws.command(), &id, &format!("{who:?}"));
        assert_eq!(
            mtime("ro-stamp"),
            OLD,
            "{who:?}: a read-only run touched nothing"
        );
    }
}
