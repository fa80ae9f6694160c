//! Issue 31, items 2 and 5: a failure is a result, and a queue people can
//! keep up with.
//!
//! - A command that fails inside its intent is promoted, through every door
//!   (CLI, daemon, hook, MCP), and the workspace afterwards is what the
//!   same command leaves when run live in a copy; the agent gets its exit
//!   status and output. `intent.require_success` asks for the old block.
//! - Only runs a person can decide wait: a plain failure, a missing tool,
//!   a limit never fill the queue; a run its submitter redoes (the same
//!   command in the same workspace) leaves it (another uid's never does);
//!   waiting runs expire after 24 hours by default.
//! - `dryrun gc` fits the state directory into a budget, oldest first, and
//!   never removes what a waiting run, a promotion or a rollback needs, nor
//!   the journal; an agent cannot make it remove another uid's pending
//!   evidence or its own pending run's kept content.
//!
//! Every check is on the host side: the workspace's files, the state
//! directory's files, the exit statuses the doors give.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::daemon::*;
use common::hook::*;
use common::*;

/// What a failing command leaves: one file fixed, one created, one
/// deleted, output on both streams, exit 1 (as `ruff check --fix` does).
const FAILING: &str = "printf 'fixed\\n' > src/a.txt; mkdir -p src/new; printf 'n\\n' > src/new/b.txt; rm src/gone.txt; echo 'out: 1 fixed, 1 left'; echo 'err: 1 error' >&2; exit 1";

/// The workspace's content as the live lane must leave it: type, mode and
/// content of each entry (not times or owners).
fn content(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut m = BTreeMap::new();
    for e in walkdir::WalkDir::new(dir).follow_links(false).min_depth(1) {
        let e = e.unwrap();
        let md = e.path().symlink_metadata().unwrap();
        let what = if md.is_file() {
            blake3::hash(&std::fs::read(e.path()).unwrap())
                .to_hex()
                .to_string()
        } else if md.is_dir() {
            "dir".into()
        } else {
            "other".into()
        };
        m.insert(
            e.path().strip_prefix(dir).unwrap().to_path_buf(),
            format!("{what} {:o}", md.mode() & 0o7777),
        );
    }
    m
}

fn seed(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/a.txt"), "broken\n").unwrap();
    std::fs::write(dir.join("src/gone.txt"), "x\n").unwrap();
}

/// Run `cmd` live with bash in a copy of `dir` made as `who`; the copy's
/// content and the exit status.
fn live_in_copy(who: Who, dir: &Path, cmd: &str) -> (BTreeMap<PathBuf, String>, Option<i32>) {
    let copy = tempfile::Builder::new()
        .prefix("dryrun-live-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        copy.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let target = copy.path().join("ws");
    let mut cp = if who == Who::User {
        as_test_user("cp")
    } else {
        Command::new("cp")
    };
    assert!(
        cp.arg("-a")
            .arg(dir)
            .arg(&target)
            .status()
            .unwrap()
            .success()
    );
    let mut c = if who == Who::User {
        as_test_user("bash")
    } else {
        Command::new("bash")
    };
    let st = c.args(["-c", cmd]).current_dir(&target).status().unwrap();
    (content(&target), st.code())
}

fn user_ws_seeded(who: Who) -> Ws {
    let ws = Ws::new(who);
    seed(&ws.dir);
    ws.chown_all();
    ws
}

#[test]
fn a_failure_inside_its_intent_lands_as_it_would_live_through_the_cli() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let ws = user_ws_seeded(who);
        let (live, live_status) = live_in_copy(who, &ws.dir, FAILING);
        assert_eq!(live_status, Some(1));
        let r = ws.rehearse(FAILING, &["--expect-write", "src/**"]);
        // The decision is promote (exit 0), the status and output kept.
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        assert_eq!(r.decision(), "promote", "{who:?}: {:?}", r.reasons());
        assert_eq!(r.exit_code(), Some(1));
        assert_eq!(r.json["state"], "rehearsed");
        assert!(
            r.notes()
                .iter()
                .any(|n| n.contains("exited with status 1: a result")),
            "{who:?}: {:?}",
            r.notes()
        );
        // The human output says the command failed.
        let human = ws.command().args(["show", &run_id(&r)]).output().unwrap();
        let text = String::from_utf8_lossy(&human.stdout);
        assert!(
            text.contains("decision: promote — the command FAILED (exit status 1)"),
            "{who:?}: {text}"
        );
        // Promoted with the output replayed: the command's own status.
        let out = ws
            .command()
            .args(["promote", &run_id(&r), "--replay-output"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{who:?}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "out: 1 fixed, 1 left\n"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("err: 1 error"));
        assert_eq!(
            content(&ws.dir),
            live,
            "{who:?}: the promoted workspace differs from the live run's"
        );

        // The old behaviour, per task: a non-zero exit blocks, and the run
        // waits for nobody.
        ws.write(
            "dryrun.yaml",
            "tasks:\n  strict:\n    command: \"echo x > src/c.txt; exit 2\"\n    intent: {expected_writes: ['src/**'], require_success: true}\n",
        );
        let before = content(&ws.dir);
        let s = ws.execute(&["--task", "strict"]);
        assert_eq!(s.code, 4, "{who:?}: {s:?}");
        assert_eq!(s.json["state"], "rehearsed");
        assert_eq!(s.json["intent"]["require_success"], true);
        assert!(
            s.reasons()[0].starts_with("[evidence.exit_status] the command exited with status 2"),
            "{:?}",
            s.reasons()
        );
        let p = ws
            .command()
            .args(["promote", &run_id(&s)])
            .output()
            .unwrap();
        assert_eq!(p.status.code(), Some(4), "{who:?}: {p:?}");
        assert_eq!(
            content(&ws.dir),
            before,
            "{who:?}: a blocked run changed the workspace"
        );
    }
}

#[test]
fn a_failure_inside_its_intent_lands_as_it_would_live_through_the_daemon() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_ws_seeded(Who::User);
    let (live, _) = live_in_copy(Who::User, &ws.dir, FAILING);
    let r = submit_user(&d, &ws, FAILING, &["--expect-write", "src/**"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.decision(), "promote");
    assert_eq!(r.exit_code(), Some(1));
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["promote", &run_id(&r), "--replay-output"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "out: 1 fixed, 1 left\n"
    );
    assert_eq!(content(&ws.dir), live);
}

#[test]
fn a_failure_inside_its_intent_lands_as_it_would_live_through_the_hook() {
    if !require_root() {
        return;
    }
    let w = hook_ws("dryrun-q31-hook-");
    seed(&w.ws);
    let (live, _) = live_in_copy(Who::Root, &w.ws, FAILING);
    let a = answer(&hook(
        &w,
        "claude-code",
        claude_event(&w.ws, FAILING).to_string().as_bytes(),
        &[],
    ));
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "allow", "{a}");
    let rewritten = out["updatedInput"]["command"].as_str().unwrap();
    assert!(rewritten.contains(" promote "), "{rewritten}");
    // What the host runs: the rewrite, which applies the change set and
    // exits with the command's status.
    let ran = Command::new("bash")
        .args(["-c", rewritten])
        .current_dir(&w.ws)
        .env("DRYRUN_LOCAL", "1")
        .env("DRYRUN_STATE_DIR", &w.state)
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(1), "{ran:?}");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "out: 1 fixed, 1 left\n"
    );
    assert_eq!(content(&w.ws), live);
}

/// A minimal MCP client over stdio (newline-delimited JSON-RPC).
struct Mcp {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(state: &Path) -> Mcp {
        let mut child = Command::new(bin())
            .arg("mcp")
            .env("DRYRUN_LOCAL", "1")
            .env("DRYRUN_STATE_DIR", state)
            .env_remove("DRYRUN_SOCKET")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp {
            child,
            out,
            next: 1,
        };
        m.call(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "q31", "version": "0"}}),
        );
        m.send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, v: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let mut line = String::new();
            assert!(
                self.out.read_line(&mut line).unwrap() > 0,
                "the MCP server closed"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// A tool's structured result.
    fn tool(&mut self, name: &str, args: Value) -> Value {
        let v = self.call(
            "tools/call",
            serde_json::json!({"name": name, "arguments": args}),
        );
        assert!(v["result"]["isError"] != true, "{name}: {v}");
        v["result"]["structuredContent"].clone()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_failure_inside_its_intent_lands_as_it_would_live_through_mcp() {
    if !require_root() {
        return;
    }
    let w = hook_ws("dryrun-q31-mcp-");
    seed(&w.ws);
    let (live, _) = live_in_copy(Who::Root, &w.ws, FAILING);
    let mut m = Mcp::start(&w.state);
    let r = m.tool(
        "execute",
        serde_json::json!({"command": FAILING, "working_dir": w.ws, "expected_writes": ["src/**"]}),
    );
    assert_eq!(r["decision"], "promote", "{r}");
    assert_eq!(r["exit_code"], 1);
    let next = r["next"].as_str().unwrap();
    assert!(next.contains("failed (exit status 1)"), "{next}");
    assert!(!next.contains("override"), "{next}");
    let p = m.tool("promote", serde_json::json!({"run_id": r["run_id"]}));
    assert_eq!(p["state"], "promoted", "{p}");
    assert_eq!(p["exit_code"], 1, "{p}");
    assert_eq!(content(&w.ws), live);
    // A run stopped by what only the agent can fix: no override hinted.
    let t = m.tool(
        "execute",
        serde_json::json!({"command": "sleep 30", "working_dir": w.ws, "timeout_s": 1}),
    );
    assert_eq!(t["decision"], "blocked", "{t}");
    assert_eq!(t["state"], "rehearsed", "{t}");
    assert!(!t["next"].as_str().unwrap().contains("override"), "{t}");
}

/// `dryrun runs --awaiting --json`: the ids in the review queue.
fn queue(ws: &Ws) -> Vec<String> {
    let o = ws
        .command()
        .args(["runs", "--awaiting", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect()
}

fn record(state: &Path, id: &str) -> Value {
    serde_json::from_slice(&std::fs::read(state.join("runs").join(id).join("record.json")).unwrap())
        .unwrap()
}

#[test]
fn the_queue_holds_only_runs_a_person_can_decide() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let ws = user_ws_seeded(who);
        let all = ["--expect-write", "**"];
        // A plain failure and a missing tool: results, promoted, not queued.
        let fail = ws.rehearse("echo x > src/a.txt; exit 3", &all);
        assert_eq!(
            (fail.code, fail.json["state"].as_str()),
            (0, Some("rehearsed")),
            "{fail:?}"
        );
        let missing = ws.rehearse("no-such-tool-q31 --fix", &all);
        assert_eq!(missing.exit_code(), Some(127));
        assert_eq!(missing.json["state"], "rehearsed", "{missing:?}");
        // A limit: blocked, but nothing for a person: rehearsed, with why.
        let slow = ws.rehearse("sleep 30", &["--timeout", "1"]);
        assert_eq!(slow.code, 4, "{slow:?}");
        assert_eq!(slow.json["state"], "rehearsed", "{slow:?}");
        assert!(
            slow.notes()[0].starts_with("this run does not wait for a person"),
            "{:?}",
            slow.notes()
        );
        // What a person can weigh waits: a protected path.
        let make = ws.rehearse("echo 'all:' > Makefile", &all);
        assert_eq!(make.code, 3, "{make:?}");
        assert_eq!(make.json["state"], "awaiting_approval");
        assert_eq!(queue(&ws), [run_id(&make)], "{who:?}");
    }
}

#[test]
fn a_run_its_agent_redoes_leaves_the_queue_and_another_uids_never_does() {
    if !require_root() {
        return;
    }
    // Locally: the same command in the same workspace supersedes; another
    // workspace or another command does not.
    let ws = user_ws_seeded(Who::User);
    let other = user_ws_seeded(Who::User);
    let first = ws.rehearse("echo 'all:' > Makefile", &["--expect-write", "**"]);
    assert_eq!(first.json["state"], "awaiting_approval");
    let elsewhere = other.execute(&[
        "--command",
        "echo 'all:' > Makefile",
        "--expect-write",
        "**",
        "--workspace",
        other.dir.to_str().unwrap(),
    ]);
    assert_eq!(elsewhere.json["state"], "awaiting_approval");
    let unrelated = ws.rehearse("echo 'x' > Justfile", &["--expect-write", "**"]);
    assert_eq!(unrelated.json["state"], "awaiting_approval");
    assert!(
        record(&ws.state, &run_id(&first))
            .get("superseded_by")
            .is_none()
    );
    let next = ws.rehearse("echo 'all:' > Makefile", &["--expect-write", "**"]);
    let rec = record(&ws.state, &run_id(&first));
    assert_eq!(rec["state"], "awaiting_approval", "the state stays");
    assert_eq!(rec["superseded_by"], run_id(&next).as_str());
    assert!(!queue(&ws).contains(&run_id(&first)));
    let shown = ws
        .command()
        .args(["show", &run_id(&first)])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("superseded by run"),
        "{shown:?}"
    );
    assert!(
        record(&other.state, &run_id(&elsewhere))
            .get("superseded_by")
            .is_none()
    );

    // Over a daemon: root's waiting run in the user's workspace is never
    // superseded by the user's next run there.
    let d = Daemon::start(&[]);
    let uws = user_workspace();
    let root_run = run_json(
        d.cli_root()
            .current_dir(&uws.dir)
            .args([
                "execute",
                "--json",
                "--expect-write",
                "**",
                "--command",
                "echo x > Makefile",
            ])
            .output()
            .unwrap(),
    );
    assert_eq!(root_run.json["state"], "awaiting_approval", "{root_run:?}");
    let user_run = submit_user(&d, &uws, "echo x > Makefile", &["--expect-write", "**"]);
    assert_eq!(user_run.json["state"], "awaiting_approval");
    let redo = submit_user(&d, &uws, "echo x > Makefile", &["--expect-write", "**"]);
    let (_, r) = d.curl(
        Who::Root,
        "GET",
        &format!("/v1/runs/{}", run_id(&root_run)),
        None,
    );
    assert!(r.get("superseded_by").is_none(), "{r}");
    let (_, u) = d.curl(
        Who::Root,
        "GET",
        &format!("/v1/runs/{}", run_id(&user_run)),
        None,
    );
    assert!(u["superseded_by"].is_string(), "{u}");
    let (_, q) = d.curl(Who::Root, "GET", "/v1/runs?state=awaiting_approval", None);
    let ids: Vec<&str> = q["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [run_id(&root_run).as_str(), run_id(&redo).as_str()],
        "{q}"
    );
}

#[test]
fn waiting_runs_expire_after_24_hours_by_default() {
    if !require_root() {
        return;
    }
    let help = Command::new(bin())
        .args(["daemon", "--help"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("[default: 86400]"),
        "{}",
        String::from_utf8_lossy(&help.stdout)
    );
    let ws = Ws::new(Who::Root);
    let mut ids = Vec::new();
    for (i, hours) in [25u64, 23].into_iter().enumerate() {
        // Different workspaces: neither supersedes the other.
        let dir = ws.root.path().join(format!("w{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let r = ws.execute(&[
            "--command",
            "echo x > Makefile",
            "--expect-write",
            "**",
            "--workspace",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
        // Submitted `hours` ago, as its record says.
        let p = ws.state.join("runs").join(run_id(&r)).join("record.json");
        let mut rec: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        let at = std::time::SystemTime::now() - std::time::Duration::from_secs(hours * 3600);
        rec["created_at"] = Value::String(humantime_rfc3339(at));
        std::fs::write(&p, rec.to_string()).unwrap();
        ids.push(run_id(&r));
    }
    let mut c = ws.command();
    c.env_remove("DRYRUN_APPROVAL_EXPIRY_S");
    let q = queue(&ws);
    assert_eq!(q, [ids[1].clone()], "only the 23-hour-old run still waits");
    let old = record(&ws.state, &ids[0]);
    assert_eq!(
        (old["state"].as_str(), old["rejected_because"].as_str()),
        (Some("rejected"), Some("expired"))
    );
}

fn humantime_rfc3339(t: std::time::SystemTime) -> String {
    let s = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{s}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Bytes of every file under `dir` (but runs' lock files, which taking a
/// run's lock makes).
fn files_of(dir: &Path) -> BTreeMap<PathBuf, u64> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() && e.file_name() != "lock")
        .map(|e| (e.path().to_path_buf(), e.metadata().unwrap().len()))
        .collect()
}

fn set_age(state: &Path, id: &str, days_ago: u64) {
    let st = Command::new("touch")
        .arg("-d")
        .arg(format!("{days_ago} days ago"))
        .arg(state.join("runs").join(id))
        .status()
        .unwrap();
    assert!(st.success());
}

fn gc(ws: &Ws, args: &[&str]) -> Value {
    let o = ws
        .command()
        .arg("gc")
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn gc_fits_the_budget_oldest_first_and_keeps_what_pending_runs_need() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let ws = user_ws_seeded(who);
        let big = "head -c 400000 /dev/urandom > src/blob.bin";
        let all = ["--expect-write", "**"];
        // Three finished runs with content, oldest first; one promoted.
        let mut done = Vec::new();
        for _ in 0..3 {
            let r = ws.rehearse(big, &all);
            assert_eq!(r.decision(), "promote", "{r:?}");
            done.push(run_id(&r));
        }
        let p = ws.command().args(["promote", &done[2]]).output().unwrap();
        assert!(p.status.success(), "{p:?}");
        // A waiting run with content, older than all of them, and one its
        // own next run superseded.
        let waiting = ws.rehearse(&format!("{big}; echo x > Makefile"), &all);
        assert_eq!(waiting.json["state"], "awaiting_approval");
        let superseded = waiting.clone_id();
        let fresh = ws.rehearse(&format!("{big}; echo x > Makefile"), &all);
        assert_eq!(fresh.json["state"], "awaiting_approval");
        assert_eq!(
            record(&ws.state, &superseded)["superseded_by"],
            run_id(&fresh).as_str()
        );
        for (i, id) in done.iter().enumerate() {
            set_age(&ws.state, id, 10 - i as u64);
        }
        set_age(&ws.state, &superseded, 20);
        set_age(&ws.state, &run_id(&fresh), 30);
        let journal = std::fs::read(ws.state.join("journal.jsonl")).unwrap();
        let receipts = files_of(&ws.state.join("receipts"));
        let pending_files = |id: &str| files_of(&ws.state.join("runs").join(id));
        let keep_a = pending_files(&superseded);
        let keep_b = pending_files(&run_id(&fresh));
        assert!(
            keep_a
                .keys()
                .any(|p| p.to_string_lossy().contains("/blobs/"))
        );

        // A dry run removes nothing and names the same, even when the
        // engine's hourly housekeeping (with a budget of its own) is due.
        let stamp = ws.state.join(".housekeeping");
        assert!(
            Command::new("touch")
                .arg("-d")
                .arg("2 hours ago")
                .arg(&stamp)
                .status()
                .unwrap()
                .success()
        );
        let before = files_of(&ws.state);
        let o = ws
            .command()
            .args(["gc", "--json", "--budget-mb", "0", "--dry-run"])
            .env("DRYRUN_STATE_BUDGET_MB", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let dry: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(files_of(&ws.state), before);
        let r = gc(&ws, &["--budget-mb", "0"]);
        assert_eq!(dry["removed"], r["removed"]);
        let removed: Vec<(String, String)> = r["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["run_id"].as_str().unwrap().into(),
                    x["what"].as_str().unwrap().into(),
                )
            })
            .collect();
        // Content first, oldest first; then whole runs, never the promoted one.
        let c = |id: &String| (id.clone(), "content".to_string());
        let w = |id: &String| (id.clone(), "run".to_string());
        assert_eq!(
            &removed[..3],
            &[c(&done[0]), c(&done[1]), c(&done[2])],
            "{who:?}: {removed:?}"
        );
        assert!(removed.contains(&w(&done[0])) && removed.contains(&w(&done[1])));
        assert!(
            !removed.contains(&w(&done[2])),
            "a promoted run's record goes: {removed:?}"
        );
        assert_eq!(r["over_budget"], true);
        // What pending runs need, the journal and receipts: untouched.
        assert_eq!(pending_files(&superseded), keep_a, "{who:?}");
        assert_eq!(pending_files(&run_id(&fresh)), keep_b, "{who:?}");
        assert_eq!(
            std::fs::read(ws.state.join("journal.jsonl")).unwrap(),
            journal
        );
        assert_eq!(files_of(&ws.state.join("receipts")), receipts);
        assert!(
            ws.state
                .join("runs")
                .join(&done[2])
                .join("record.json")
                .exists()
        );
        let v = ws.command().args(["journal", "verify"]).output().unwrap();
        assert_eq!(v.status.code(), Some(0), "{v:?}");
    }
}

trait CloneId {
    fn clone_id(&self) -> String;
}
impl CloneId for Run {
    fn clone_id(&self) -> String {
        run_id(self)
    }
}

#[test]
fn an_agent_cannot_make_gc_remove_pending_evidence() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    // Root's waiting run (another uid's pending evidence) and the agent's.
    let rws = Ws::new(Who::Root);
    let root_run = run_json(
        d.cli_root()
            .current_dir(&rws.dir)
            .args([
                "execute",
                "--json",
                "--expect-write",
                "**",
                "--command",
                "head -c 300000 /dev/urandom > data.bin; echo x > Makefile",
            ])
            .output()
            .unwrap(),
    );
    assert_eq!(root_run.json["state"], "awaiting_approval", "{root_run:?}");
    let uws = user_workspace();
    let own = submit_user(
        &d,
        &uws,
        "head -c 300000 /dev/urandom > d.bin; echo x > Makefile",
        &["--expect-write", "**"],
    );
    assert_eq!(own.json["state"], "awaiting_approval", "{own:?}");
    // The agent fills the state directory with finished runs.
    for _ in 0..4 {
        let r = submit_user(
            &d,
            &uws,
            "head -c 300000 /dev/urandom > f.bin",
            &["--expect-write", "**"],
        );
        assert_eq!(r.decision(), "promote", "{r:?}");
    }
    let runs = d.state.join("runs");
    let pending = |id: &str| files_of(&runs.join(id));
    let (root_before, own_before) = (pending(&run_id(&root_run)), pending(&run_id(&own)));
    // The agent asks gc itself, on the daemon's state directory: refused.
    let before = files_of(&d.state);
    let o = as_test_user(bin())
        .args(["gc", "--budget-mb", "0", "--state-dir"])
        .arg(&d.state)
        .env("DRYRUN_LOCAL", "1")
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(files_of(&d.state), before);
    // The collection the daemon makes on its budget (as root): the agent's
    // finished runs go, no pending run loses a file.
    let o = Command::new(bin())
        .args(["gc", "--budget-mb", "0", "--json", "--state-dir"])
        .arg(&d.state)
        .env("DRYRUN_LOCAL", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["removed"].as_array().unwrap().len() >= 4, "{r}");
    assert_eq!(pending(&run_id(&root_run)), root_before);
    assert_eq!(pending(&run_id(&own)), own_before);
    // Redoing it gives the agent nothing: its own pending run, superseded
    // by its next one, keeps its content too.
    let redo = submit_user(
        &d,
        &uws,
        "head -c 300000 /dev/urandom > d.bin; echo x > Makefile",
        &["--expect-write", "**"],
    );
    assert_eq!(
        record(&d.state, &run_id(&own))["superseded_by"],
        run_id(&redo).as_str()
    );
    let o = Command::new(bin())
        .args(["gc", "--budget-mb", "0", "--state-dir"])
        .arg(&d.state)
        .env("DRYRUN_LOCAL", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let blobs = |m: BTreeMap<PathBuf, u64>| -> BTreeMap<PathBuf, u64> {
        m.into_iter()
            .filter(|(p, _)| p.to_string_lossy().contains("/blobs/"))
            .collect()
    };
    assert!(!blobs(own_before.clone()).is_empty());
    assert_eq!(blobs(pending(&run_id(&own))), blobs(own_before));
}
