//! A hostile agent against root's use of the agent's local state
//! directory. In local mode the state directory belongs to the agent, so
//! its files (records, in-flight markers, promotion plans) are the agent's
//! to forge. A reviewer (root) who opens it — `sudo dryrun approve`, or
//! `dryrun --state-dir ~agent/... show RUN` / `runs` / `promote RUN` as the
//! README's Codex section suggests — must not become the agent's hands.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::hook::{answer, claude_event, hook, hook_ws};
use common::{Value, Who, Ws, as_test_user, bin, test_user};

fn root_cli(state: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("DRYRUN_LOCAL", "1")
        .args(["--local", "--state-dir"])
        .arg(state)
        .stdin(std::process::Stdio::null());
    c
}

fn chown_to_agent(p: &Path) {
    let (u, g) = test_user();
    let st = Command::new("chown")
        .args(["-R", "-h", &format!("{u}:{g}")])
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A directory and a file of root's, outside every workspace.
fn root_target() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("dryrun-rootonly-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = d.path().join("victim.txt");
    std::fs::write(&victim, "root-content\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    (d, victim)
}

/// Attack: the agent promotes a run of its own locally (a real plan and
/// backup in `receipts/`), then forges an "interrupted promotion": a
/// `promoting/RUN` marker naming a new receipt whose `plan.json` names a
/// root-owned directory (its real device, inode, uid 0) and whose backup
/// is content of the agent's choosing. The next `dryrun` root runs on that
/// state directory — even `runs` — recovers the "crash" by restoring the
/// backup into root's directory, as root.
///
/// Fixed: root takes the filesystem identity of the state directory's
/// owner for every local request (not only `approve`), so the restore is
/// refused by the kernel. The same forged plan naming a third user's
/// directory was restored through a workspace agent started as that user
/// (even under `sudo dryrun approve`); a process acting for the state
/// directory's owner now starts no workspace agent for anyone else.
#[test]
fn root_opening_an_agents_state_dir_never_restores_a_forged_plan_into_others_files() {
    if !common::daemon::require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write("a.txt", "agent-chosen\n");
    let r = ws.rehearse("echo new > a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(r.decision(), "promote", "{}", r.err());
    let run_id = r.json["run_id"].as_str().unwrap().to_string();
    let o = ws.command().args(["promote", &run_id]).output().unwrap();
    assert!(o.status.success(), "{o:?}");

    // The positive control first: the same forged plan naming a directory
    // of the agent's own (the state directory's owner) IS restored by the
    // reviewer's first look: the forgery is one recovery acts on, and only
    // whose files it names keeps it out of the others' below.
    let agent = test_user();
    let (dir, victim) = root_target();
    forge_interrupted_promotion_into(&ws, &run_id, 0, dir.path(), agent);
    let _ = root_cli(&ws.state).arg("runs").output().unwrap();
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "agent-chosen\n",
        "the forged plan was not restored even into the agent's own directory: \
         the attack below proves nothing"
    );

    // Root's private directory, then a third user's (`nobody`): root
    // must not restore into either, as root or as that user.
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    for (n, owner) in [
        (1u32, (0u32, 0u32)),
        (2, (nobody.uid.as_raw(), nobody.gid.as_raw())),
    ] {
        let (dir, victim) = root_target();
        forge_interrupted_promotion_into(&ws, &run_id, n, dir.path(), owner);
        // The reviewer looks.
        for args in [
            vec!["runs"],
            vec!["show", &run_id],
            vec!["journal", "verify"],
        ] {
            let _ = root_cli(&ws.state).args(&args).output().unwrap();
            assert_eq!(
                std::fs::read_to_string(&victim).unwrap(),
                "root-content\n",
                "root restored the agent's backup into uid {}'s file ({args:?})",
                owner.0
            );
            let vm = std::fs::metadata(&victim).unwrap();
            assert_eq!(vm.mode() & 0o777, 0o600, "{args:?}");
            assert_eq!(vm.uid(), owner.0);
        }
    }
}

/// [`forge_interrupted_promotion`] into `dir` (from [`root_target`]), which
/// is first given to `owner` (mode 0700 when that is not root).
fn forge_interrupted_promotion_into(ws: &Ws, run_id: &str, n: u32, dir: &Path, owner: (u32, u32)) {
    if owner.0 != 0 {
        let st = Command::new("chown")
            .args(["-R", &format!("{}:{}", owner.0, owner.1)])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success());
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    forge_interrupted_promotion(ws, run_id, n, dir, owner);
}

/// Forge, in the agent's state directory, the leftovers of a promotion
/// of run `run_id` into `dir` (owned by `owner`) that "crashed" before its
/// receipt was journaled: a copy of the real plan and backup of the
/// agent's own promotion, pointed at `dir`.
fn forge_interrupted_promotion(ws: &Ws, run_id: &str, n: u32, dir: &Path, owner: (u32, u32)) {
    let receipts = ws.state.join("receipts");
    let real = std::fs::read_dir(&receipts)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("receipt.json").exists())
        .unwrap();
    // Another receipt id of the same shape, never journaled.
    let rid = {
        let mut name = real.file_name().unwrap().to_string_lossy().into_owned();
        let last = name.pop().unwrap();
        let c = char::from_digit((last.to_digit(16).unwrap() + 1 + n) % 16, 16).unwrap();
        name.push(c);
        name
    };
    let forged = receipts.join(&rid);
    std::fs::create_dir_all(forged.join("backup")).unwrap();
    std::fs::copy(real.join("backup/0"), forged.join("backup/0")).unwrap();
    let mut plan: Value =
        serde_json::from_slice(&std::fs::read(real.join("plan.json")).unwrap()).unwrap();
    let m = std::fs::metadata(dir).unwrap();
    plan["receipt_id"] = Value::from(rid.clone());
    plan["workspace"] = Value::from(dir.display().to_string());
    plan["workspace_identity"] =
        serde_json::json!({"dev": m.dev(), "ino": m.ino(), "uid": owner.0, "gid": owner.1});
    plan["ops"][0]["path"] = Value::from("victim.txt");
    plan["ops"][0]["path_hex"] = Value::from(hex_of(b"victim.txt"));
    plan["ops"][0]["backup"]["owner"] = serde_json::json!([owner.0, owner.1]);
    std::fs::write(forged.join("plan.json"), plan.to_string()).unwrap();
    let promoting = ws.state.join("promoting");
    std::fs::create_dir_all(&promoting).unwrap();
    std::fs::write(promoting.join(run_id), format!("{rid}\n1 1")).unwrap();
    chown_to_agent(&ws.state);
}

/// Attack: the agent replaces its state directory by a link to a root
/// directory (`/etc` on a real host); root's `dryrun --state-dir` (or
/// `sudo dryrun approve`, which judged the owner through the link) creates
/// `runs/`, `inflight/`, `txn/` there and makes it mode 0700.
///
/// Fixed: the owner is the first non-root owner along the path, each
/// component not followed: the link's owner.
#[test]
fn root_never_chmods_or_fills_a_root_directory_through_the_agents_state_link() {
    if !common::daemon::require_root() {
        return;
    }
    let (dir, _victim) = root_target();
    let base = tempfile::Builder::new()
        .prefix("dryrun-agentstate-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_to_agent(base.path());
    let link = base.path().join("state");
    let st = as_test_user("ln")
        .arg("-s")
        .arg(dir.path())
        .arg(&link)
        .status()
        .unwrap();
    assert!(st.success());
    for args in [vec!["runs"], vec!["approve", "r1234abcd-0000000000000000"]] {
        let _ = root_cli(&link).args(&args).output().unwrap();
        let m = std::fs::metadata(dir.path()).unwrap();
        assert_eq!(
            m.mode() & 0o777,
            0o755,
            "{args:?}: root chmodded its directory"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["victim.txt".to_string()], "{args:?}");
    }
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Attack on what the agent is told: a command whose remote call a stub
/// answers (`gh pr merge`) needs approval; after the yes, the hook's
/// rewrite applied the local change set and replayed the rehearsal's
/// output, `✓ Merged pull request`, exit 0, with nothing saying the merge
/// was never made: the agent (and the person reading along) take the
/// stubbed remote call as done.
///
/// Fixed twice over: the hook never offers such a run (a plain apply of
/// stub-dependent work is refused; the reason names the calls), and when a
/// person promotes its local writes anyway (`--local-only`),
/// `--replay-output` names the calls stubs answered and says they were not
/// made live, before and after the replayed output.
#[test]
fn a_replayed_stub_answer_is_never_presented_as_done() {
    use common::daemon::{Daemon, submit_user, user_workspace};
    let w = hook_ws("dryrun-hostile2-");
    let cmd = "gh pr merge 1 --merge && echo merged > merged.txt";
    let a = answer(&hook(
        &w,
        "claude-code",
        claude_event(&w.ws, cmd).to_string().as_bytes(),
        &[],
    ));
    let o = &a["hookSpecificOutput"];
    assert_eq!(o["permissionDecision"], "deny", "{a}");
    let reason = o["permissionDecisionReason"].as_str().unwrap_or("");
    assert!(reason.contains("gh pr merge"), "{a}");
    assert!(!w.ws.join("merged.txt").exists());
    if !common::daemon::require_root() {
        return;
    }
    // A reviewer approves; the agent promotes only the local writes.
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let r = submit_user(&d, &ws, cmd, &["--expect-write", "merged.txt"]);
    assert_eq!(r.decision(), "needs_approval", "{}", r.err());
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let (code, v) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{id}/approve"),
        Some(r#"{"note":"local part only"}"#),
    );
    assert_eq!(code, 200, "{v}");
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["promote", &id, "--local-only", "--replay-output"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(ws.dir.join("merged.txt").exists(), "{out:?}");
    assert!(
        stderr.contains("NOT made live") && stderr.contains("gh pr merge 1 --merge"),
        "the stub's answer was replayed as if the merge happened: {out:?}"
    );
}

/// Attack over the daemon across a restart: while an administrator had
/// host-prompt approvals on, the agent's uid minted a grant for its own
/// run (as any of its processes can) and kept the token; the daemon is
/// restarted with them off (the default). Presenting the token, or racing
/// several promotions with it, approves nothing; the run still waits for
/// a reviewer, and only a reviewer's approval lets it go live.
#[test]
fn a_grant_minted_before_a_restart_with_host_prompts_off_approves_nothing() {
    use common::daemon::{Daemon, submit_user, user_workspace};
    if !common::daemon::require_root() {
        return;
    }
    let mut d = Daemon::start(&["--host-prompt-approvals"]);
    let ws = user_workspace();
    let r = submit_user(
        &d,
        &ws,
        "shred -n 0 -z README.md",
        &["--expect-write", "README.md"],
    );
    assert_eq!(r.decision(), "needs_approval", "{}", r.err());
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let (code, grant) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/host-prompt"),
        Some(r#"{"host":"claude-code"}"#),
    );
    assert_eq!(code, 200, "{grant}");
    let token = grant["token"].as_str().unwrap().to_string();
    d.terminate();
    d.restart(&[]);
    let body = serde_json::json!({ "host_prompt_token": token }).to_string();
    let path = format!("/v1/runs/{id}/promote");
    let racers: Vec<_> = (0..3)
        .map(|_| {
            let (sock, body, path) = (d.socket.clone(), body.clone(), path.clone());
            std::thread::spawn(move || {
                as_test_user("curl")
                    .args(["-sS", "-o", "-", "-w", "\n%{http_code}", "--unix-socket"])
                    .arg(&sock)
                    .args(["-X", "POST", "-H", "content-type: application/json"])
                    .args(["--data-binary", &body])
                    .arg(format!("http://dryrun{path}"))
                    .output()
                    .unwrap()
            })
        })
        .collect();
    for t in racers {
        let o = t.join().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(!text.ends_with("200"), "{text}");
    }
    // The hook's own rewrite with that token, as the agent's shell would run it.
    let o = d
        .cli_user()
        .current_dir(&ws.dir)
        .args([
            "promote",
            &id,
            "--replay-output",
            "--host-prompt-token",
            &token,
        ])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    let (_, rec) = d.curl(Who::Root, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(rec["state"], "awaiting_approval", "{rec}");
    assert_eq!(std::fs::read(ws.dir.join("README.md")).unwrap(), b"hello\n");
    // The waiting form succeeds once a reviewer approves, and not before.
    let waiter = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["promote", &id, "--replay-output", "--await-approval", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(std::fs::read(ws.dir.join("README.md")).unwrap(), b"hello\n");
    let o = d
        .cli_root()
        .args(["approve", &id, "--note", "ok"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let o = waiter.wait_with_output().unwrap();
    let shredded = std::fs::read(ws.dir.join("README.md")).unwrap();
    assert!(
        !shredded.is_empty() && shredded.iter().all(|b| *b == 0),
        "{o:?}"
    );
    let (_, rec) = d.curl(Who::Root, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(rec["state"], "promoted", "{rec}");
    let by: Vec<_> = rec["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["authenticated_by"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(by, vec!["peer_credentials".to_string()], "{rec}");
}

/// Attack: the agent puts a fifo where a run's lock file goes in its local
/// state directory, next to a leftover `txn/RUN`: the start-up recovery
/// of every `dryrun` that opens it (root's `runs`, `show`, `sudo dryrun
/// approve`) opened the lock for writing and hung forever.
///
/// Fixed: the lock is opened without following links, without blocking,
/// and only as a regular file; the command fails, naming the file.
#[test]
fn a_fifo_for_a_run_lock_never_hangs_roots_dryrun() {
    if !common::daemon::require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write("a.txt", "x\n");
    let r = ws.rehearse("echo new > a.txt", &["--expect-write", "a.txt"]);
    let run_id = r.json["run_id"].as_str().unwrap().to_string();
    let lock = ws.state.join("runs").join(&run_id).join("lock");
    let _ = std::fs::remove_file(&lock);
    nix::unistd::mkfifo(&lock, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    std::fs::create_dir_all(ws.state.join("txn")).unwrap();
    std::fs::write(ws.state.join("txn").join(&run_id), "{}").unwrap();
    chown_to_agent(&ws.state);
    for args in [vec!["runs"], vec!["show", &run_id]] {
        let o = Command::new("timeout")
            .arg("20")
            .arg(bin())
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .args(["--local", "--state-dir"])
            .arg(&ws.state)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_ne!(
            o.status.code(),
            Some(124),
            "{args:?}: root's dryrun hung on the agent's fifo"
        );
    }
}

/// Attack over a default daemon (host-prompt approvals off): the person
/// answered no to the Claude Code ask whose yes would have let the
/// command wait for a dryrun reviewer; the agent presents the very same
/// rewritten command again through its shell tool. The hook allowed it
/// without asking ("waits for a reviewer's approval"), so the person's no
/// was overridden: the command waits and goes live on a reviewer's
/// approval the person never agreed to wait for.
///
/// Fixed: in Claude Code the waiting form of a run still awaiting
/// approval is asked again, like the token form.
#[test]
fn a_declined_wait_presented_again_is_asked_again() {
    use common::daemon::{Daemon, user_workspace};
    if !common::daemon::require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let run_hook = |cmd: &str| -> Value {
        let e = claude_event(&ws.dir, cmd).to_string();
        let mut c = as_test_user(bin());
        c.args(["hook", "claude-code"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("DRYRUN_SOCKET", &d.socket)
            .env("CLAUDE_PROJECT_DIR", &ws.dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut ch = c.spawn().unwrap();
        use std::io::Write;
        ch.stdin.take().unwrap().write_all(e.as_bytes()).unwrap();
        let o = ch.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let a = run_hook("shred -n 0 -z README.md");
    let o = &a["hookSpecificOutput"];
    assert_eq!(o["permissionDecision"], "ask", "{a}");
    let waiting = o["updatedInput"]["command"].as_str().unwrap().to_string();
    assert!(waiting.contains("--await-approval"), "{waiting}");
    // The person said no; the agent runs the same command again.
    let again = run_hook(&waiting);
    assert_eq!(
        again["hookSpecificOutput"]["permissionDecision"], "ask",
        "the person's no was overridden: {again}"
    );
}
