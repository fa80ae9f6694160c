//! The daemon, for real: a `dryrun daemon` process on a real Unix socket,
//! real HTTP clients (the CLI's hyper client, curl, raw bytes), two real
//! identities (root as the reviewer, the unprivileged test user as the agent).

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::*;
use common::*;

#[test]
fn submit_verdict_and_approval_with_two_identities() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    // The agent (unprivileged) writes a protected path: needs approval.
    let r = submit_user(
        &d,
        &ws,
        "echo 'exit 0' > .git/hooks/pre-commit",
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(r.json["state"], "awaiting_approval");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let (uid, _) = test_user();
    assert_eq!(r.json["submitted_by"]["uid"], uid);
    assert_eq!(r.json["submitted_by"]["via"], "daemon");
    assert!(
        !ws.dir.join(".git/hooks/pre-commit").exists(),
        "a rehearsal never writes the real workspace"
    );

    // The agent approving its own run: 403, and nothing changes.
    let out = d
        .cli_user()
        .args(["approve", &id, "--note", "lgtm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HTTP 403") && err.contains("submitter"),
        "{err}"
    );
    let (st, body) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/approve"),
        Some("{}"),
    );
    assert_eq!(st, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");

    // Root (a reviewer) approves, with a note.
    let out = d
        .cli_root()
        .args(["approve", &id, "--note", "hook is harmless", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["state"], "approved");
    assert_eq!(rec["approvals"][0]["by"]["uid"], 0);
    assert_eq!(rec["approvals"][0]["note"], "hook is harmless");
    assert_eq!(rec["approvals"][0]["authenticated_by"], "peer_credentials");

    // A second approval conflicts.
    let (st, body) = d.curl(Who::Root, "POST", &format!("/v1/runs/{id}/approve"), None);
    assert_eq!(st, 409, "{body}");

    // The journal holds submission, verdict and approval, chained.
    let j = d.journal();
    let kinds: Vec<&str> = j
        .iter()
        .filter(|b| b["run_id"] == id.as_str())
        .map(|b| b["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["run_submitted", "verdict", "approval"]);
    let approval = j.iter().find(|b| b["kind"] == "approval").unwrap();
    assert_eq!(approval["actor"]["uid"], 0);
    assert_eq!(approval["data"]["note"], "hook is harmless");
    assert_eq!(approval["data"]["submitted_by_uid"], uid);
    assert_eq!(approval["data"]["override_of_block"], false);
    let out = d.cli_root().args(["journal", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("journal OK"));

    // The same run read through the daemon and in-process print the same.
    let via_daemon = d.cli_root().args(["show", &id]).output().unwrap();
    let local = Command::new(bin())
        .env_clear()
        .args(["--local", "--state-dir"])
        .arg(&d.state)
        .args(["show", &id])
        .output()
        .unwrap();
    assert_eq!(via_daemon.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&via_daemon.stdout),
        String::from_utf8_lossy(&local.stdout)
    );
    assert!(String::from_utf8_lossy(&via_daemon.stdout).contains("approved by uid 0"));
}

#[test]
fn non_approvers_get_404_self_approval_403_and_blocked_runs_need_an_override() {
    if !require_root() {
        return;
    }
    // A reviewer group that contains the test user: it may approve others'
    // runs, never its own.
    let group = "dryrun-test-reviewers";
    let _ = Command::new("groupadd").args(["--system", group]).status();
    let st = Command::new("gpasswd")
        .args(["-a", TEST_USER, group])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());

    let plain = Daemon::start(&[]);
    let reviewers = Daemon::start(&["--approver-group", group]);
    let root_ws = Ws::new(Who::Root);
    root_ws.write(".git/hooks/.keep", "");

    for d in [&plain, &reviewers] {
        // Root submits a run that needs approval.
        let out = d
            .cli_root()
            .current_dir(&root_ws.dir)
            .args([
                "execute",
                "--json",
                "--command",
                "echo x > .git/hooks/post-merge",
            ])
            .args(["--expect-write", ".git/**"])
            .output()
            .unwrap();
        let r = run_json(out);
        assert_eq!(r.code, 3, "{r:?}");
        let id = r.json["run_id"].as_str().unwrap().to_string();
        let (st, body) = d.curl(
            Who::User,
            "POST",
            &format!("/v1/runs/{id}/approve"),
            Some(r#"{"note":"ok"}"#),
        );
        let (st_read, _) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}"), None);
        let (_, listed) = d.curl(Who::User, "GET", "/v1/runs", None);
        let sees = listed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == id.as_str());
        if std::ptr::eq(d, &plain) {
            // Not a reviewer: others' runs are invisible (404, not listed).
            assert_eq!(st_read, 404);
            assert!(!sees);
            let (st, _) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}/diff"), None);
            assert_eq!(st, 404);
            let (st, _) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/cancel"), None);
            assert_eq!(st, 404);
        } else {
            assert_eq!(st_read, 200);
            assert!(sees);
        }
        if std::ptr::eq(d, &plain) {
            // Not in dryrun-approvers: someone else's run is as missing for
            // approve and reject as for reading (404, not 403).
            assert_eq!(st, 404, "{body}");
            assert_eq!(body["error"]["code"], "no_such_run", "{body}");
            let (st, _) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/reject"), None);
            assert_eq!(st, 404);
        } else {
            assert_eq!(
                st, 200,
                "a reviewer approves another identity's run: {body}"
            );
            assert_eq!(body["approvals"][0]["by"]["uid"], test_user().0);
        }
    }

    // The reviewer's own run: still 403, membership notwithstanding.
    let ws = user_workspace();
    let r = submit_user(
        &reviewers,
        &ws,
        "echo x > .git/hooks/pre-push",
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap();
    let (st, body) = reviewers.curl(Who::User, "POST", &format!("/v1/runs/{id}/approve"), None);
    assert_eq!(st, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("submitter")
    );
    // ...but it may withdraw it.
    let (st, body) = reviewers.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/reject"),
        Some(r#"{"note":"withdrawn"}"#),
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["state"], "rejected");

    // A blocked run: approving it is an explicit, journaled override.
    let r = submit_user(
        &plain,
        &ws,
        "echo x > README.md",
        &["--expect-write", "docs/*"],
    );
    assert_eq!(r.code, 4, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let out = plain.cli_root().args(["approve", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--override"));
    let out = plain
        .cli_root()
        .args([
            "approve",
            &id,
            "--override",
            "--note",
            "README edit is fine",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["approvals"][0]["overrode_block"], true);
    let j = plain.journal();
    let a = j
        .iter()
        .find(|b| b["kind"] == "approval" && b["run_id"] == id.as_str())
        .unwrap();
    assert_eq!(a["data"]["override_of_block"], true);
    assert_eq!(a["data"]["decision_was"], "blocked");

    let _ = Command::new("groupdel").arg(group).status();
}

#[test]
fn bad_requests_get_json_errors_and_nothing_runs() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--max-body-kb", "16"]);
    let ws = user_workspace();
    let wd = ws.dir.display().to_string();
    let cases: Vec<(String, &str, String, u16, &str)> = vec![
        (
            "POST".into(),
            "/v1/runs",
            "{not json".into(),
            400,
            "invalid_envelope",
        ),
        (
            "POST".into(),
            "/v1/runs",
            "".into(),
            400,
            "invalid_envelope",
        ),
        (
            "POST".into(),
            "/v1/runs",
            format!(
                r#"{{"command":"ls","working_dir":"{wd}","intent":{{"expected_write":["a"]}}}}"#
            ),
            400,
            "invalid_envelope",
        ),
        (
            "POST".into(),
            "/v1/runs",
            r#"{"command":"ls"}"#.into(),
            400,
            "invalid_envelope",
        ),
        (
            "POST".into(),
            "/v1/runs",
            r#"{"command":"ls","working_dir":"rel/dir"}"#.into(),
            400,
            "invalid_request",
        ),
        (
            "POST".into(),
            "/v1/runs",
            format!(r#"{{"command":"","working_dir":"{wd}"}}"#),
            400,
            "invalid_request",
        ),
        (
            "POST".into(),
            "/v1/runs",
            format!(
                r#"{{"command":"ls","working_dir":"{wd}","x":"{}"}}"#,
                "a".repeat(20_000)
            ),
            413,
            "body_too_large",
        ),
        (
            "POST".into(),
            "/v1/runs?wait=maybe",
            "{}".into(),
            400,
            "invalid_query",
        ),
        (
            "POST".into(),
            "/v1/runs?colour=red",
            "{}".into(),
            400,
            "invalid_query",
        ),
        (
            "GET".into(),
            "/v1/runs?state=sideways",
            String::new(),
            400,
            "invalid_query",
        ),
        (
            "GET".into(),
            "/v1/runs/..%2f..%2fetc",
            String::new(),
            400,
            "bad_run_id",
        ),
        (
            "GET".into(),
            "/v1/runs/r1234-abcd",
            String::new(),
            404,
            "no_such_run",
        ),
        (
            "POST".into(),
            "/v1/runs/r1234-abcd/approve",
            r#"{"note":"x","sneaky":true}"#.into(),
            400,
            "invalid_request",
        ),
        (
            "DELETE".into(),
            "/v1/runs",
            String::new(),
            405,
            "method_not_allowed",
        ),
        (
            "GET".into(),
            "/v2/everything",
            String::new(),
            404,
            "no_such_route",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let (st, v) = d.curl(
            Who::User,
            &method,
            path,
            (!body.is_empty() || method == "POST").then_some(body.as_str()),
        );
        assert_eq!(st, status, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], code, "{method} {path}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    }
    // The unknown field is named.
    let (_, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs",
        Some(&format!(
            r#"{{"command":"ls","working_dir":"{wd}","intent":{{"expected_write":["a"]}}}}"#
        )),
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expected_write"),
        "{v}"
    );

    // Someone else's workspace: refused before anything runs.
    let root_ws = Ws::new(Who::Root);
    root_ws.write("secret.txt", "root's\n");
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs?wait=true",
        Some(&format!(
            r#"{{"command":"cat secret.txt","working_dir":"{}"}}"#,
            root_ws.dir.display()
        )),
    );
    assert_eq!(st, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("belongs to uid 0")
    );

    // Garbage that is not HTTP: the connection is answered or dropped, the
    // daemon lives on.
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    s.write_all(b"\x00\x01\x02 NOT HTTP\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.read_to_end(&mut sink);
    assert!(health_ok(&d.socket));

    // No run record was created by any of it.
    let runs = std::fs::read_dir(d.state.join("runs")).unwrap().count();
    assert_eq!(runs, 0);
}

#[test]
fn routes_match_the_openapi_document() {
    if !require_root() {
        return;
    }
    let doc: Value = serde_yaml::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.yaml"))
            .unwrap(),
    )
    .unwrap();
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    documented.sort();
    let mut served: Vec<(String, String)> = dryrun::daemon::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    served.sort();
    assert_eq!(
        documented, served,
        "docs/openapi.yaml and the router differ"
    );

    // And the live daemon agrees: every documented route is served (no
    // routing error), every other method on those paths is 405.
    let d = Daemon::start(&[]);
    for (method, path) in &served {
        let p = path.replace("{id}", "r1-1");
        let body = (method == "POST").then_some("{}");
        if p == "/v1/events" {
            // A stream: it answers 200 and stays open.
            let (st, _) = d.curl_stream(Who::Root, &p, 2);
            assert_eq!(st, 200, "{method} {path} is documented but not served");
        } else {
            let (st, v) = d.curl(Who::Root, method, &p, body);
            let code = v["error"]["code"].as_str().unwrap_or("");
            assert!(
                code != "no_such_route" && code != "method_not_allowed" && st != 0,
                "{method} {path} is documented but not served: {st} {v}"
            );
        }
        for other in ["GET", "POST", "PUT", "DELETE"] {
            if served.iter().any(|(m, q)| m == other && q == path) {
                continue;
            }
            let (st, _) = d.curl(Who::Root, other, &p, None);
            assert_eq!(st, 405, "{other} {path} should not be served");
        }
    }
}

#[test]
fn concurrent_submissions_are_bounded() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--max-running", "2", "--max-queued", "6"]);
    let ws = Ws::new(Who::Root);
    let wd = ws.dir.display().to_string();
    let body = format!(r#"{{"command":"sleep 0.3","working_dir":"{wd}"}}"#);
    let pid = d.pid();
    let rss_kb = move || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    let idle_rss = rss_kb();
    let socket = d.socket.clone();
    let handles: Vec<_> = (0..200)
        .map(|_| {
            let socket = socket.clone();
            let body = body.clone();
            std::thread::spawn(move || {
                let c = dryrun::cli::client::Client::new(&socket);
                c.request("POST", "/v1/runs", Some(body.into_bytes()))
                    .map(|r| (r.status, String::from_utf8_lossy(&r.body).into_owned()))
                    .unwrap_or((0, String::new()))
            })
        })
        .collect();
    let mut peak_rss = 0;
    let results: Vec<(u16, String)> = handles
        .into_iter()
        .map(|h| {
            peak_rss = peak_rss.max(rss_kb());
            h.join().unwrap()
        })
        .collect();
    let accepted: Vec<String> = results
        .iter()
        .filter(|(s, _)| *s == 202)
        .map(|(_, b)| {
            serde_json::from_str::<Value>(b).unwrap()["run_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let refused = results.iter().filter(|(s, _)| *s == 429).count();
    assert_eq!(
        accepted.len() + refused,
        200,
        "only 202 and 429 are expected: {:?}",
        results
            .iter()
            .filter(|(s, _)| *s != 202 && *s != 429)
            .take(3)
            .collect::<Vec<_>>()
    );
    assert!(refused > 0, "200 submissions against 8 slots must see 429s");
    // One uid may hold at most half the capacity (8 / 2).
    assert!(
        accepted.len() >= 4,
        "at least a uid's share fills: {}",
        accepted.len()
    );
    // A 429 says why: the run queue was full, or (200 connections at once
    // from one uid) the connection cap was reached before the request.
    for (_, b) in results.iter().filter(|(s, _)| *s == 429) {
        assert!(
            b.contains("queue_full") || b.contains("too_many_connections"),
            "{b}"
        );
    }
    assert!(
        results
            .iter()
            .any(|(s, b)| *s == 429 && b.contains("queue_full")),
        "some submissions reach the queue and find it full"
    );
    // Every accepted run finishes, none fails.
    let c = dryrun::cli::client::Client::new(&d.socket);
    wait_until("accepted runs to finish", 120, || {
        accepted.iter().all(|id| {
            let r: Value = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
            r["state"] == "rehearsed"
        })
    });
    // The counters drop just after the record is saved: wait for them too.
    wait_until("the counters to settle", 10, || {
        let h: Value = c.call("GET", "/v1/health", None).unwrap();
        h["running"] == 0 && h["queued"] == 0
    });
    let m = c.request("GET", "/metrics", None).unwrap();
    let m = String::from_utf8_lossy(&m.body);
    let metric = |reason: &str| -> usize {
        let prefix = format!("dryrun_submissions_refused_total{{reason=\"{reason}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(
        metric("queue_full")
            + metric("per_uid_queue_full")
            + metric("too_many_connections")
            + metric("too_many_connections_per_uid"),
        refused,
        "{m}"
    );
    eprintln!(
        "200 submissions: {} accepted, {refused} refused; daemon RSS idle {idle_rss} KiB, peak {peak_rss} KiB",
        accepted.len()
    );
    assert!(
        peak_rss < 200 * 1024,
        "daemon memory must stay bounded: {peak_rss} KiB"
    );
}

#[test]
fn kill9_during_a_rehearsal_then_restart_cleans_up() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = Ws::new(Who::Root);
    let c = dryrun::cli::client::Client::new(&d.socket);
    // An acknowledged run before the crash.
    let body = format!(
        r#"{{"command":"echo ok","working_dir":"{}"}}"#,
        ws.dir.display()
    );
    let first: Value = c
        .call("POST", "/v1/runs?wait=true", Some(body.into_bytes()))
        .unwrap();
    let marker = format!("dryrun-kill9-canary-{}", std::process::id());
    let body = format!(
        r#"{{"command":"sleep 300; : {marker}","working_dir":"{}"}}"#,
        ws.dir.display()
    );
    let sub: Value = c.call("POST", "/v1/runs", Some(body.into_bytes())).unwrap();
    let id = sub["run_id"].as_str().unwrap().to_string();
    wait_until("the rehearsal to be running", 30, || {
        !processes_with(&marker).is_empty()
    });
    let journal_before = std::fs::read(d.state.join("journal.jsonl")).unwrap();
    d.kill9();
    // Nothing of the run survives its daemon.
    wait_until("sandbox processes to die with the daemon", 10, || {
        processes_with(&marker).is_empty()
    });
    d.restart(&[]);
    let c = dryrun::cli::client::Client::new(&d.socket);
    let r: Value = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
    assert_eq!(r["state"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("interrupted"), "{r}");
    let r1: Value = c
        .call(
            "GET",
            &format!("/v1/runs/{}", first["run_id"].as_str().unwrap()),
            None,
        )
        .unwrap();
    assert_eq!(r1["state"], "rehearsed");
    // Acknowledged records are all there, byte for byte, and the chain holds.
    let journal_after = std::fs::read(d.state.join("journal.jsonl")).unwrap();
    assert!(journal_after.starts_with(&journal_before));
    let v: Value = c.call("GET", "/v1/journal/verify", None).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let j = d.journal();
    assert!(
        j.iter()
            .any(|b| b["kind"] == "run_failed" && b["run_id"] == id.as_str())
    );
    // Nothing left behind: in-flight markers, scratch content, cgroups.
    assert_eq!(
        std::fs::read_dir(d.state.join("inflight")).unwrap().count(),
        0
    );
    assert!(!d.state.join("runs").join(&id).join("blobs").exists());
    for c in ["memory", "pids", "cpu"] {
        assert!(
            !Path::new("/sys/fs/cgroup")
                .join(c)
                .join("dryrun")
                .join(&id)
                .exists(),
            "cgroup {c} of the interrupted run is still there"
        );
    }
    assert!(!Path::new("/sys/fs/cgroup/dryrun").join(&id).exists());
}

/// Start-up recovery kills what is still alive in an interrupted run's
/// cgroups, then removes them: a process put into the run's cgroups after
/// its daemon died (as one the sandbox left behind would be) is SIGKILLed
/// by the restart, and none of the run's cgroup directories is left.
#[test]
fn restart_kills_what_is_left_in_an_interrupted_runs_cgroups_and_removes_them() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = Ws::new(Who::Root);
    let c = dryrun::cli::client::Client::new(&d.socket);
    let marker = format!("dryrun-reap-{}", random_hex());
    let body = format!(
        r#"{{"command":"sleep 300; : {marker}","working_dir":"{}"}}"#,
        ws.dir.display()
    );
    let sub: Value = c.call("POST", "/v1/runs", Some(body.into_bytes())).unwrap();
    let id = sub["run_id"].as_str().unwrap().to_string();
    wait_until("the rehearsal to be running", 30, || {
        !processes_with(&marker).is_empty()
    });
    d.kill9();
    wait_until("sandbox processes to die with the daemon", 10, || {
        processes_with(&marker).is_empty()
    });
    // Nobody removed the run's cgroups: a process of the run's goes in.
    let dirs: Vec<_> = run_cgroups(&id)
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    assert!(
        !dirs.is_empty(),
        "the interrupted run left no cgroup: {:?}",
        run_cgroups(&id)
    );
    let mut leftover = Command::new("sleep")
        .arg("300")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = leftover.id().to_string();
    for dir in &dirs {
        std::fs::write(dir.join("cgroup.procs"), &pid).unwrap();
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|p| p == pid),
            "{}: {procs}",
            dir.display()
        );
    }
    d.restart(&[]);
    let mut status = None;
    let t0 = Instant::now();
    while status.is_none() && t0.elapsed() < Duration::from_secs(10) {
        status = leftover.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(25));
    }
    let Some(status) = status else {
        let _ = leftover.kill();
        let _ = leftover.wait();
        panic!("the restart left a process of the interrupted run alive");
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status}");
    for dir in run_cgroups(&id) {
        assert!(!dir.exists(), "{} is still there", dir.display());
    }
    let c = dryrun::cli::client::Client::new(&d.socket);
    let r: Value = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
    assert_eq!(r["state"], "failed", "{r}");
}

#[test]
fn kill9_during_a_journal_append_loses_no_acknowledged_record() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = Ws::new(Who::Root);
    let c = dryrun::cli::client::Client::new(&d.socket);
    let mut acknowledged = Vec::new();
    for i in 0..3 {
        let body = format!(
            r#"{{"command":"echo {i}","working_dir":"{}"}}"#,
            ws.dir.display()
        );
        let r: Value = c
            .call("POST", "/v1/runs?wait=true", Some(body.into_bytes()))
            .unwrap();
        acknowledged.push(r["run_id"].as_str().unwrap().to_string());
    }
    let before = std::fs::read(d.state.join("journal.jsonl")).unwrap();
    d.kill9();
    // Restart with every journal append stalling halfway through.
    d.spawn(&[], &[("DRYRUN_FAULT_JOURNAL_STALL_MS", "60000")]);
    let socket = d.socket.clone();
    let body = format!(
        r#"{{"command":"echo torn","working_dir":"{}"}}"#,
        ws.dir.display()
    );
    let pending = std::thread::spawn(move || {
        dryrun::cli::client::Client::new(&socket)
            .request("POST", "/v1/runs", Some(body.into_bytes()))
            .map(|r| r.status)
    });
    let jpath = d.state.join("journal.jsonl");
    let before_len = before.len() as u64;
    wait_until("the append to be half written", 30, || {
        std::fs::metadata(&jpath).map(|m| m.len()).unwrap_or(0) > before_len
    });
    d.kill9();
    assert!(
        pending.join().unwrap().is_err(),
        "the submission must not have been acknowledged"
    );
    let torn = std::fs::read(&jpath).unwrap();
    assert!(
        torn.starts_with(&before) && !torn.ends_with(b"\n"),
        "a torn record is on disk"
    );

    // Verification before any repair: intact chain, torn tail reported.
    let out = Command::new(bin())
        .env_clear()
        .args(["--local", "--state-dir"])
        .arg(&d.state)
        .args(["journal", "verify", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["torn_tail_bytes"].as_u64().unwrap() > 0);

    d.restart(&[]);
    let c = dryrun::cli::client::Client::new(&d.socket);
    let v: Value = c.call("GET", "/v1/journal/verify", None).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(
        v["torn_tail_bytes"], 0,
        "the torn record was cut at restart: {v}"
    );
    let after = std::fs::read(&jpath).unwrap();
    assert!(
        after.starts_with(&before),
        "every acknowledged record is intact"
    );
    for id in &acknowledged {
        let r: Value = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
        assert_eq!(r["state"], "rehearsed");
    }
    // The unacknowledged submission did not survive as a live run.
    let list: Value = c.call("GET", "/v1/runs?state=queued", None).unwrap();
    assert_eq!(list["runs"].as_array().unwrap().len(), 0);
    assert_eq!(
        std::fs::read_dir(d.state.join("inflight")).unwrap().count(),
        0
    );
}

#[test]
fn a_flipped_journal_byte_is_named() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = Ws::new(Who::Root);
    let c = dryrun::cli::client::Client::new(&d.socket);
    for i in 0..3 {
        let body = format!(
            r#"{{"command":"echo {i}","working_dir":"{}"}}"#,
            ws.dir.display()
        );
        let _: Value = c
            .call("POST", "/v1/runs?wait=true", Some(body.into_bytes()))
            .unwrap();
    }
    d.terminate();
    let jpath = d.state.join("journal.jsonl");
    let text = std::fs::read(&jpath).unwrap();
    // Record 4 (line 4): flip one byte inside its body.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            text.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    let line4 = &text[starts[3]..starts[4]];
    let off = starts[3] + line4.windows(7).position(|w| w == b"\"kind\":").unwrap() + 8;
    let mut bad = text.clone();
    bad[off] ^= 0x20;
    std::fs::write(&jpath, &bad).unwrap();
    let out = Command::new(bin())
        .env_clear()
        .args(["--local", "--state-dir"])
        .arg(&d.state)
        .args(["journal", "verify"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{s}");
    assert!(
        s.contains("BROKEN at line 4 (record 3)") && s.contains("edited"),
        "{s}"
    );
    // A daemon refuses to start on a damaged journal rather than paper over it.
    d.kill9();
    let out = d.start_again_in_foreground();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("line 4") && err.contains("aside"), "{err}");
    // Nothing was appended to it.
    assert_eq!(std::fs::read(&jpath).unwrap(), bad);
}

/// An anchor that is there and does not check out is tampering or
/// corruption, never the soft "no anchor" case: a flipped byte of
/// `journal.head` fails verification with its own exit code, the daemon
/// refuses to start on it, and once it is moved aside the journal verifies
/// again with the soft warning (control: the same journal, anchor intact,
/// verifies first).
#[test]
fn a_flipped_anchor_byte_fails_verification_with_its_own_code() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = Ws::new(Who::Root);
    let c = dryrun::cli::client::Client::new(&d.socket);
    let body = format!(
        r#"{{"command":"echo a","working_dir":"{}"}}"#,
        ws.dir.display()
    );
    let _: Value = c
        .call("POST", "/v1/runs?wait=true", Some(body.into_bytes()))
        .unwrap();
    d.terminate();
    let state = d.state.clone();
    let verify = || {
        let out = Command::new(bin())
            .env_clear()
            .args(["--local", "--state-dir"])
            .arg(&state)
            .args(["journal", "verify"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.code(), s)
    };
    let (code, s) = verify();
    assert_eq!(code, Some(0), "{s}");
    assert!(s.contains("agrees"), "{s}");
    let hpath = d.state.join("journal.head");
    let good = std::fs::read(&hpath).unwrap();
    // Every byte of the anchor, its padding too: one flip anywhere is caught.
    let json_len = good.iter().position(|b| *b == b'}').unwrap() + 1;
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x01;
        std::fs::write(&hpath, &bad).unwrap();
        let (code, s) = verify();
        assert_eq!(code, Some(6), "byte {i}: {s}");
        assert!(s.contains("NOT VERIFIED") && s.contains("DAMAGED"), "{s}");
    }
    let mut bad = good.clone();
    bad[json_len / 2] ^= 0x01;
    std::fs::write(&hpath, &bad).unwrap();
    d.kill9();
    let out = d.start_again_in_foreground();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("journal.head") && err.contains("aside"),
        "{err}"
    );
    assert_eq!(std::fs::read(&hpath).unwrap(), bad, "kept as evidence");
    // Moved aside: the soft case, and the next start rebuilds it.
    std::fs::rename(&hpath, d.state.join("journal.head.evidence")).unwrap();
    let (code, s) = verify();
    assert_eq!(code, Some(0), "{s}");
    assert!(s.contains("no anchor file"), "{s}");
}

#[test]
fn state_survives_restart_and_cancel_works() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&["--max-running", "1"]);
    let ws = user_workspace();
    let r = submit_user(
        &d,
        &ws,
        "echo x > .git/hooks/pre-commit",
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let st = d.terminate();
    assert!(st.success(), "graceful shutdown: {st} {}", d.log_text());
    assert!(!d.socket.exists(), "the socket is removed at shutdown");
    d.restart(&["--max-running", "1"]);
    let out = d
        .cli_root()
        .args(["runs", "--state", "awaiting_approval", "--json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["run_id"], id.as_str());
    let out = d.cli_root().args(["approve", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));

    // Cancel: one running, one queued behind it.
    let c = dryrun::cli::client::Client::new(&d.socket);
    let wd = ws.dir.display().to_string();
    let long = |tag: &str| {
        let body = format!(r#"{{"command":"sleep 300; : {tag}","working_dir":"{wd}"}}"#);
        execute_envelope_in_background(&mut d.cli_user(), &body)
    };
    let running = long("cancel-running");
    wait_until("the first rehearsal to run", 30, || {
        !processes_with("cancel-running").is_empty()
    });
    let queued = long("cancel-queued");
    let ids = || -> Vec<(String, String)> {
        let l: Value = c.call("GET", "/v1/runs", None).unwrap();
        l["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["run_id"].as_str().unwrap().to_string(),
                    r["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    wait_until("the second run to queue", 30, || {
        ids().iter().any(|(_, s)| s == "queued")
    });
    let qid = ids().into_iter().find(|(_, s)| s == "queued").unwrap().0;
    let rid = ids().into_iter().find(|(_, s)| s == "running").unwrap().0;
    // Root is a reviewer and may cancel; the user cancels its own.
    let out = d
        .cli_user()
        .args(["cancel", &qid, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["state"], "failed");
    assert!(
        rec["error"]
            .as_str()
            .unwrap()
            .contains("cancelled while queued")
    );
    let out = d
        .cli_root()
        .args(["cancel", &rid, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["state"], "failed");
    assert!(rec["error"].as_str().unwrap().contains("cancelled"));
    wait_until("the cancelled sandbox to be gone", 10, || {
        processes_with("cancel-running").is_empty()
    });
    for ch in [running, queued] {
        let out = ch.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1), "a failed run exits 1");
    }
    let j = d.journal();
    assert_eq!(j.iter().filter(|b| b["kind"] == "run_cancelled").count(), 2);
    assert!(c.call::<Value>("GET", "/v1/journal/verify", None).unwrap()["ok"] == true);
}

#[test]
fn one_daemon_per_socket_a_stale_socket_is_replaced_and_socket_activation_works() {
    if !require_root() {
        return;
    }
    let mut a = Daemon::start(&[]);
    // A second daemon on the same socket refuses to start.
    let out = Command::new(bin())
        .env_clear()
        .arg("daemon")
        .arg("--socket")
        .arg(&a.socket)
        .arg("--state-dir")
        .arg(a.dir.path().join("state2"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("another dryrun daemon"));
    assert!(health_ok(&a.socket), "the first daemon is untouched");
    // kill -9 leaves a stale socket file behind; the next start replaces it.
    a.kill9();
    assert!(a.socket.exists());
    a.restart(&[]);
    assert!(health_ok(&a.socket));
    let mode = std::fs::metadata(&a.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&a.socket).unwrap().gid(), test_user().1);
    drop(a);

    // Socket activation: systemd-socket-activate passes fd 3.
    let dir = tempfile::Builder::new()
        .prefix("dryrun-sa-")
        .tempdir_in("/tmp")
        .unwrap();
    let sock = dir.path().join("sa.sock");
    let mut child = Command::new(tool("systemd-socket-activate", "systemd"))
        .arg("-l")
        .arg(&sock)
        .arg(bin())
        .arg("daemon")
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("systemd-socket-activate (package systemd) is installed");
    // The socket's file appears at bind(), a moment before listen(): a
    // connection in between is refused, so wait for a listening socket
    // (a connection refused), not for the file.
    let c = dryrun::cli::client::Client::new(&sock);
    let mut health: Option<Value> = None;
    wait_until("the activated daemon's answer", 30, || {
        health = c.call("GET", "/v1/health", None).ok();
        health.is_some()
    });
    assert_eq!(health.unwrap()["status"], "ok");
    let _ = child.kill();
    let _ = child.wait();
}

// Local approvals (a terminal AND another uid than the submitter's) are
// tested in tests/approvals.rs.

#[test]
fn a_daemon_runs_as_an_ordinary_user() {
    if !require_root() {
        return;
    }
    let (u, g) = test_user();
    let ws = user_workspace();
    let dir = tempfile::Builder::new()
        .prefix("dryrun-userd-")
        .tempdir_in("/tmp")
        .unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let st = Command::new("chown")
        .arg(format!("{u}:{g}"))
        .arg(dir.path())
        .arg(&run)
        .status()
        .unwrap();
    assert!(st.success());
    // XDG_RUNTIME_DIR decides the default socket of a user daemon.
    let mut child = as_test_user(bin())
        .arg("daemon")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("XDG_RUNTIME_DIR", &run)
        .env("DRYRUN_STATE_DIR", dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sock = run.join("dryrun.sock");
    wait_until("the user daemon's socket", 20, || health_ok(&sock));
    // The CLI finds the user daemon by itself (no --socket).
    let out = as_test_user(bin())
        .args([
            "execute",
            "--json",
            "--command",
            "echo hi > out.txt",
            "--expect-write",
            "out.txt",
        ])
        .current_dir(&ws.dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("XDG_RUNTIME_DIR", &run)
        .output()
        .unwrap();
    let r = to_run(out);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json["submitted_by"]["via"], "daemon");
    assert_eq!(r.json["submitted_by"]["uid"], u);
    assert!(
        r.json["rehearsal"]["sandbox"]["ids"]
            .as_str()
            .unwrap()
            .starts_with("self")
    );
    assert!(!ws.dir.join("out.txt").exists());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn systemd_units_verify() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    let socket = std::fs::read_to_string(src.join("dryrun.socket")).unwrap();
    assert!(socket.contains("ListenStream=/run/dryrun/dryrun.sock"));
    assert!(socket.contains("SocketMode=0660"));
    let service = std::fs::read_to_string(src.join("dryrun.service"))
        .unwrap()
        .replace("/usr/local/bin/dryrun", &bin().display().to_string());
    std::fs::write(dir.path().join("dryrun.socket"), socket).unwrap();
    std::fs::write(dir.path().join("dryrun.service"), service).unwrap();
    let out = match Command::new(tool("systemd-analyze", "systemd"))
        .args(["verify", "--man=no"])
        .arg(dir.path().join("dryrun.socket"))
        .arg(dir.path().join("dryrun.service"))
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("systemd-analyze (package systemd) must be installed: {e}"),
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "{err}");
}

#[test]
fn the_risk_budget_is_enforced_per_uid_and_refunded_on_rejection() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--budget-points", "25", "--budget-window", "3600"]);
    let ws = user_workspace();
    let wd = ws.dir.display().to_string();
    // `echo x > a.txt` scores 10 (a write by redirect).
    let body = format!(
        r#"{{"command":"echo x > a.txt","working_dir":"{wd}","intent":{{"expected_writes":["a.txt"]}}}}"#
    );
    let score: u64 = {
        let (st, r) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
        assert_eq!(st, 200, "{r}");
        r["risk"]["score"].as_u64().unwrap()
    };
    assert!(
        score > 0 && score * 2 <= 25 && score * 3 > 25,
        "score {score} does not fit this test's budget"
    );
    let (st, second) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "{second}");
    let (st, refused) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 429, "{refused}");
    assert_eq!(refused["error"]["code"], "budget_exhausted");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("risk budget exhausted")
    );
    // Another identity's budget is its own.
    let root_ws = Ws::new(Who::Root);
    let root_body = format!(
        r#"{{"command":"echo x > a.txt","working_dir":"{}"}}"#,
        root_ws.dir.display()
    );
    let (st, _) = d.curl(Who::Root, "POST", "/v1/runs?wait=true", Some(&root_body));
    assert_eq!(st, 200);
    // A reviewer's rejection gives the points back.
    let id = second["run_id"].as_str().unwrap();
    let (st, r) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{id}/reject"),
        Some(r#"{"note":"no"}"#),
    );
    assert_eq!(st, 200, "{r}");
    let (st, r) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "after the refund: {r}");
}

#[test]
fn graceful_shutdown_fails_queued_runs_and_bounds_running_ones() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&["--max-running", "1", "--shutdown-grace", "1"]);
    let ws = Ws::new(Who::Root);
    let c = dryrun::cli::client::Client::new(&d.socket);
    let tag = format!("shutdown-canary-{}", std::process::id());
    let mut ids = Vec::new();
    for _ in 0..2 {
        let body = format!(
            r#"{{"command":"sleep 300; : {tag}","working_dir":"{}"}}"#,
            ws.dir.display()
        );
        let s: Value = c.call("POST", "/v1/runs", Some(body.into_bytes())).unwrap();
        ids.push(s["run_id"].as_str().unwrap().to_string());
    }
    wait_until("one rehearsal to run", 30, || {
        !processes_with(&tag).is_empty()
    });
    let t0 = Instant::now();
    let st = d.terminate();
    assert!(st.success(), "{st}: {}", d.log_text());
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "shutdown is bounded by the grace period"
    );
    assert!(
        processes_with(&tag).is_empty(),
        "no rehearsal outlives the daemon"
    );
    d.restart(&[]);
    let c = dryrun::cli::client::Client::new(&d.socket);
    let errors: Vec<String> = ids
        .iter()
        .map(|id| {
            let r: Value = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
            assert_eq!(r["state"], "failed", "{r}");
            r["error"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("shut down before the rehearsal started")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.contains("cancelled")), "{errors:?}");
    let v: Value = c.call("GET", "/v1/journal/verify", None).unwrap();
    assert_eq!(v["ok"], true);
}

/// The agent swaps its workspace path for a symlink to a root-only directory
/// after the daemon checked it: the rehearsal must refuse, not read it.
#[test]
fn a_workspace_swapped_after_the_check_is_refused() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--max-running", "1"]);
    let (u, g) = test_user();
    let base = tempfile::Builder::new()
        .prefix("dryrun-swap-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = base.path().join("agent");
    std::fs::create_dir_all(agent.join("a/proj")).unwrap();
    std::fs::create_dir_all(agent.join("busy")).unwrap();
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{u}:{g}"))
        .arg(&agent)
        .status()
        .unwrap();
    assert!(st.success());
    let victim = base.path().join("victim");
    std::fs::create_dir_all(victim.join("proj")).unwrap();
    std::fs::write(victim.join("proj/secret"), "TOPSECRET-victim\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(
        victim.join("proj/secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();

    // Occupy the only slot, then queue the run whose path will be swapped.
    let busy = format!(
        r#"{{"command":"sleep 3","working_dir":"{}"}}"#,
        agent.join("busy").display()
    );
    let (st, _) = d.curl(Who::User, "POST", "/v1/runs", Some(&busy));
    assert_eq!(st, 202);
    let target = format!(
        r#"{{"command":"cat secret; ls -la","working_dir":"{}"}}"#,
        agent.join("a/proj").display()
    );
    let (st, sub) = d.curl(Who::User, "POST", "/v1/runs", Some(&target));
    assert_eq!(st, 202, "{sub}");
    let id = sub["run_id"].as_str().unwrap().to_string();
    let swap = format!(
        "cd {} && mv a a.old && ln -s {} a",
        agent.display(),
        victim.display()
    );
    let st = as_test_user("sh").args(["-c", &swap]).status().unwrap();
    assert!(st.success());
    let c = dryrun::cli::client::Client::new(&d.socket);
    let mut rec = Value::Null;
    wait_until("the swapped run to finish", 60, || {
        rec = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
        rec["state"] != "queued" && rec["state"] != "running"
    });
    let text = rec.to_string();
    assert!(
        !text.contains("TOPSECRET"),
        "the victim's file leaked: {text}"
    );
    assert_eq!(rec["state"], "failed", "{rec}");
    assert!(rec["error"].as_str().unwrap().contains("swapped"), "{rec}");
}

/// A root-only file inside the agent's own workspace: moving it makes the
/// overlay copy it up with the mounter's rights; the evidence must not show
/// what the agent could not read.
#[test]
fn files_the_agent_cannot_read_stay_unread_in_the_evidence() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    std::fs::write(ws.dir.join("rootsecret"), "ROOT-FILE-IN-AGENT-DIR\n").unwrap();
    std::fs::set_permissions(
        ws.dir.join("rootsecret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // (owned by root: chown_all is not called again)
    let r = submit_user(
        &d,
        &ws,
        "cat rootsecret; mv rootsecret renamed; cp renamed copy 2>&1; true",
        &["--expect-write", "**"],
    );
    let text = r.json.to_string();
    assert!(!text.contains("ROOT-FILE"), "leaked in the record: {text}");
    assert!(r.err().contains("Permission denied"), "{}", r.err());
    let renamed = r.change("renamed").expect("the rename is evidence");
    assert_eq!(renamed["content_withheld"], true, "{renamed}");
    assert!(renamed["after"].is_null(), "{renamed}");
    let gone = r.change("rootsecret").unwrap();
    assert_eq!(gone["kind"], "deleted");
    assert_eq!(gone["content_withheld"], true);
    assert!(
        gone["before"].is_null(),
        "no hash of what the agent could not read: {gone}"
    );
    assert!(
        r.reasons()
            .iter()
            .any(|x| x.contains("[evidence.content_withheld]")),
        "{:?}",
        r.reasons()
    );
    let id = r.json["run_id"].as_str().unwrap();
    let (st, diff) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}/diff"), None);
    assert_eq!(st, 200);
    assert!(!diff.to_string().contains("ROOT-FILE"), "{diff}");
    // Nothing of it is in the kept content either.
    for e in walkdir::WalkDir::new(d.state.join("runs").join(id))
        .into_iter()
        .flatten()
    {
        if e.file_type().is_file() {
            let b = std::fs::read(e.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&b).contains("ROOT-FILE"),
                "{}",
                e.path().display()
            );
        }
    }
}

/// Slow or idle clients cannot pin the daemon: a request head must arrive
/// within 10 s, a body too, and shutdown does not wait on idle connections.
#[test]
fn slow_and_idle_connections_are_cut() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&["--shutdown-grace", "1"]);
    let mut slow = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    slow.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut trickle = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    trickle
        .write_all(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"comm")
        .unwrap();
    let t0 = Instant::now();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(25),
        "a partial head is cut after the header timeout, not kept: {waited:?}"
    );
    trickle
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    let _ = trickle.read_to_string(&mut answer);
    assert!(
        answer.contains("408") && answer.contains("body_timeout"),
        "{answer}"
    );
    assert!(health_ok(&d.socket), "the daemon serves others meanwhile");
    // An idle keep-alive connection does not hold up shutdown.
    let _idle = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    let t0 = Instant::now();
    let st = d.terminate();
    assert!(st.success(), "{st}");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
}

#[test]
fn replay_over_the_api_answers_from_the_recording_and_names_novel_calls() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let body = format!(
        r#"{{"command":"gh pr merge 7 && echo merged","working_dir":"{}"}}"#,
        ws.dir.display()
    );
    let (st, base) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "{base}");
    let id = base["run_id"].as_str().unwrap().to_string();
    assert_eq!(base["rehearsal"]["stdout"], "merged\n");
    assert_eq!(base["rehearsal"]["would_be_actions"][0]["source"], "stub");
    // Replay as submitted: answered from the recording.
    let (st, r) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/replay?wait=true"),
        Some("{}"),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["replay_of"]["baseline"], id.as_str());
    assert_eq!(r["rehearsal"]["would_be_actions"][0]["source"], "replay");
    // A changed command under strict: blocked, the novel call named.
    let (st, r) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/replay?wait=true"),
        Some(r#"{"command":"gh pr merge 8 && echo merged","novel":"strict"}"#),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["verdict"]["decision"], "blocked");
    assert!(
        r["verdict"]["reasons"]
            .to_string()
            .contains("gh pr merge 8"),
        "{r}"
    );
    // Unknown fields and bad policies are 400s; nothing runs.
    let (st, e) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/replay"),
        Some(r#"{"novel":"sometimes"}"#),
    );
    assert_eq!(st, 400, "{e}");
    let (st, _) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/replay"),
        Some(r#"{"bogus":1}"#),
    );
    assert_eq!(st, 400);
}

#[test]
fn run_to_run_diff_over_the_api_shows_exactly_the_differences_to_those_who_may_see_both() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let a = submit_user(
        &d,
        &ws,
        "echo 1 > a.txt; echo x > b.txt; gh pr merge 5; echo out-A",
        &[],
    );
    let b = submit_user(
        &d,
        &ws,
        "echo 2 > a.txt; echo y > c.txt; echo out-B; exit 3",
        &[],
    );
    let (ia, ib) = (
        a.json["run_id"].as_str().unwrap().to_string(),
        b.json["run_id"].as_str().unwrap().to_string(),
    );
    let (st, cmp) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/runs/{ia}/diff?against={ib}"),
        None,
    );
    assert_eq!(st, 200, "{cmp}");
    assert_eq!(cmp["same_evidence"], false);
    let paths = |k: &str| -> Vec<String> {
        cmp["changes"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(paths("only_in_a"), ["b.txt"], "{cmp}");
    assert_eq!(paths("only_in_b"), ["c.txt"], "{cmp}");
    assert_eq!(paths("different"), ["a.txt"], "{cmp}");
    assert_eq!(cmp["exit"]["a"], 0);
    assert_eq!(cmp["exit"]["b"], 3);
    assert_eq!(
        cmp["actions_only_in_a"][0]["call"], "gh pr merge 5",
        "{cmp}"
    );
    assert_eq!(cmp["actions_only_in_b"], serde_json::json!([]));
    // The CLI through the daemon prints the same comparison.
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["diff", &ia, &ib, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli, cmp);
    // A run compared with itself has the same evidence.
    let (st, same) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/runs/{ia}/diff?against={ia}"),
        None,
    );
    assert_eq!(st, 200);
    assert_eq!(same["same_evidence"], true, "{same}");
    // Someone else's run cannot be compared (404, as if absent) ...
    let rws = Ws::new(Who::Root);
    let theirs = run_json(
        d.cli_root()
            .current_dir(&rws.dir)
            .args(["execute", "--json", "--command", "echo secret-output"])
            .output()
            .unwrap(),
    );
    let root_run = theirs.json["run_id"].as_str().unwrap().to_string();
    let (st, e) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/runs/{ia}/diff?against={root_run}"),
        None,
    );
    assert_eq!(st, 404, "{e}");
    assert!(!e.to_string().contains("secret-output"), "{e}");
    // ... nor replayed by the user; the reviewer (root) may compare both.
    let (st, _) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{root_run}/replay"),
        Some("{}"),
    );
    assert_eq!(st, 404);
    let (st, cmp) = d.curl(
        Who::Root,
        "GET",
        &format!("/v1/runs/{ia}/diff?against={root_run}"),
        None,
    );
    assert_eq!(st, 200, "{cmp}");
    // Malformed ids and unknown query fields are 400s naming the problem.
    let (st, e) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/runs/{ia}/diff?against=..%2Fetc"),
        None,
    );
    assert_eq!(st, 400, "{e}");
    let (st, e) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/runs/{ia}/diff?agianst={ib}"),
        None,
    );
    assert_eq!(st, 400, "{e}");
    assert!(e["error"]["message"].to_string().contains("agianst"), "{e}");
}
