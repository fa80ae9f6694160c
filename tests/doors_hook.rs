//! `dryrun hook` as a security boundary, fed the hosts' exact event JSON
//! (as Claude Code 2.1 and Codex 0.169 send it): it fails closed (exit 2,
//! the reason on stderr, nothing on stdout) on garbage, a missing
//! workspace, a dead daemon and a timeout; it denies an agent's own
//! `dryrun` commands; and a host-prompt token is single-use and bound to
//! its run.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::bin;
use common::hook::{HookWs, answer, claude_event, codex_event, hook, hook_ws};

/// Commands that need a person's approval (the classifier's `fs.shred`)
/// and call nothing a stub answers, so their promotion can happen.
const RISKY_A: &str = "shred -n 0 -z a.txt";
/// (On its own file, so promoting A leaves B's rehearsal without drift.)
const RISKY_B: &str = "shred -n 0 -z b.txt";

fn ws() -> HookWs {
    hook_ws("dryrun-hook-")
}

fn blocks(o: &Output, why: &str) {
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(o.stdout.is_empty(), "no answer on stdout when blocking");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(why), "{err}");
}

#[test]
fn garbage_input_blocks() {
    let w = ws();
    for input in [
        &b"not json"[..],
        b"",
        b"{\"hook_event_name\": 3}",
        &[0xff, 0xfe],
    ] {
        blocks(
            &hook(&w, "claude-code", input, &[]),
            "unreadable hook input",
        );
    }
    // A Bash event without a command string, or without a cwd.
    let mut e = claude_event(&w.ws, "ls");
    e["tool_input"]["command"] = serde_json::json!(7);
    blocks(
        &hook(&w, "claude-code", e.to_string().as_bytes(), &[]),
        "tool_input.command",
    );
    let mut e = claude_event(&w.ws, "ls");
    e.as_object_mut().unwrap().remove("cwd");
    blocks(
        &hook(&w, "codex", e.to_string().as_bytes(), &[]),
        "cwd is missing",
    );
}

#[test]
fn missing_workspace_blocks() {
    let w = ws();
    let e = claude_event(&w.ws.join("gone"), "ls");
    blocks(
        &hook(&w, "claude-code", e.to_string().as_bytes(), &[]),
        "gone",
    );
}

#[test]
fn dead_daemon_blocks() {
    let w = ws();
    // A socket file nobody listens on.
    let sock = w.ws.parent().unwrap().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let e = claude_event(&w.ws, "echo hi > b.txt");
    let mut c = Command::new(bin());
    let o = c
        .args(["hook", "claude-code"])
        .env_remove("DRYRUN_LOCAL")
        .env("DRYRUN_SOCKET", &sock)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut ch| {
            ch.stdin
                .take()
                .unwrap()
                .write_all(e.to_string().as_bytes())?;
            ch.wait_with_output()
        })
        .unwrap();
    blocks(&o, "cannot reach the dryrun daemon");
    assert!(!w.ws.join("b.txt").exists());
}

/// A deadline (`DRYRUN_HOOK_DEADLINE_S`) too short for the rehearsal's
/// timeout blocks the call before anything runs, naming both settings.
/// (The deadline reached while waiting: `tests/fidelity_env.rs`.)
#[test]
fn timeout_blocks() {
    let w = ws();
    let e = claude_event(&w.ws, "sleep 20");
    let o = hook(
        &w,
        "claude-code",
        e.to_string().as_bytes(),
        &[("DRYRUN_HOOK_DEADLINE_S", "2")],
    );
    blocks(
        &o,
        "DRYRUN_HOOK_DEADLINE_S=2 leaves a rehearsal of hook.timeout_s = 60 s no room",
    );
    assert!(
        !w.state.join("runs").exists()
            || std::fs::read_dir(w.state.join("runs"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn other_tools_and_events_pass_through_untouched() {
    let w = ws();
    let mut e = claude_event(&w.ws, "ls");
    e["tool_name"] = "Read".into();
    e["tool_input"] = serde_json::json!({"file_path": "/etc/passwd"});
    let o = hook(&w, "claude-code", e.to_string().as_bytes(), &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    let mut e = claude_event(&w.ws, "ls");
    e["hook_event_name"] = "PostToolUse".into();
    let o = hook(&w, "claude-code", e.to_string().as_bytes(), &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    // Codex's apply_patch is a file edit, not a shell command.
    let mut e = codex_event("PreToolUse", &w.ws, "*** Begin Patch");
    e["tool_name"] = "apply_patch".into();
    let o = hook(&w, "codex", e.to_string().as_bytes(), &[]);
    assert!(o.status.success() && o.stdout.is_empty());
}

#[test]
fn an_agent_cannot_run_dryrun_through_its_shell() {
    let w = ws();
    for cmd in [
        "dryrun approve r6b0-1",
        "sh -c 'dryrun promote r6b0-1'",
        "env A=1 /usr/local/bin/dryrun --local approve r6b0-1",
    ] {
        for host in ["claude-code", "codex"] {
            let e = if host == "codex" {
                codex_event("PreToolUse", &w.ws, cmd)
            } else {
                claude_event(&w.ws, cmd)
            };
            let a = answer(&hook(&w, host, e.to_string().as_bytes(), &[]));
            assert_eq!(
                a["hookSpecificOutput"]["permissionDecision"], "deny",
                "{host} {cmd}: {a}"
            );
        }
    }
    // The rewrite's exact shape for a run that does not exist: blocked.
    let forged = format!(
        "{} --local --state-dir {} promote r6b0-1 --replay-output",
        bin().display(),
        w.state.display()
    );
    blocks(
        &hook(
            &w,
            "claude-code",
            claude_event(&w.ws, &forged).to_string().as_bytes(),
            &[],
        ),
        "r6b0-1 does not exist",
    );
    // Nothing was rehearsed for them.
    assert!(
        !w.state.join("runs").exists()
            || std::fs::read_dir(w.state.join("runs")).unwrap().count() == 0
    );
}

/// The ask answer for a risky command, and its rewritten command.
fn ask(w: &HookWs, command: &str) -> (String, String) {
    let a = answer(&hook(
        w,
        "claude-code",
        claude_event(&w.ws, command).to_string().as_bytes(),
        &[],
    ));
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "ask", "{a}");
    assert_eq!(out["updatedInput"]["description"], "d", "other fields kept");
    assert_eq!(out["updatedInput"]["timeout"], 120000);
    let cmd = out["updatedInput"]["command"].as_str().unwrap().to_string();
    let id = cmd
        .split_whitespace()
        .skip_while(|w| *w != "promote")
        .nth(1)
        .unwrap()
        .to_string();
    (id, cmd)
}

fn bash(w: &HookWs, cmd: &str) -> Output {
    Command::new("bash")
        .args(["-c", cmd])
        .current_dir(&w.ws)
        .output()
        .unwrap()
}

#[test]
fn host_prompt_tokens_are_single_use_and_bound_to_their_run() {
    let w = ws();
    std::fs::write(w.ws.join("b.txt"), "content-of-b\n").unwrap();
    let (a, cmd_a) = ask(&w, RISKY_A);
    let (b, cmd_b) = ask(&w, RISKY_B);
    let token_a = cmd_a.rsplit(' ').next().unwrap().to_string();
    // A's token does not approve B.
    let forged = cmd_b.replace(cmd_b.rsplit(' ').next().unwrap(), &token_a);
    let o = bash(&w, &forged);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no valid host-prompt grant"));
    // A made-up token neither.
    let o = bash(&w, &cmd_a.replace(&token_a, &"0".repeat(64)));
    assert_eq!(o.status.code(), Some(4));
    // A wrong guess consumed nothing: A's own yes still works, once.
    let o = bash(&w, &cmd_a);
    assert!(o.status.success(), "{o:?}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(&format!("applied the reviewed change set of run {a}")));
    assert_eq!(bash(&w, &cmd_a).status.code(), Some(4));
    // B's own token still works after the forged attempt? No: a wrong
    // token for B is refused without consuming B's grant.
    assert!(bash(&w, &cmd_b).status.success());
    let _ = b;
    // The rewrite presented to the hook again (a host that re-hooks it)
    // is never allowed on its own say-so: it was spent, so deny.
    let again = answer(&hook(
        &w,
        "claude-code",
        claude_event(&w.ws, &cmd_a).to_string().as_bytes(),
        &[],
    ));
    assert_eq!(again["hookSpecificOutput"]["permissionDecision"], "deny");
    // A second grant for a run is refused (one token per run).
    let o = Command::new(bin())
        .args(["journal", "verify"])
        .env("DRYRUN_LOCAL", "1")
        .env("DRYRUN_STATE_DIR", &w.state)
        .output()
        .unwrap();
    assert!(o.status.success());
}

#[test]
fn a_blocked_run_is_denied_and_never_asked() {
    let w = ws();
    let e = claude_event(&w.ws, "echo x > .mcp.json");
    let a = answer(&hook(&w, "claude-code", e.to_string().as_bytes(), &[]));
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "deny");
    assert!(out.get("updatedInput").is_none());
    let reason = out["permissionDecisionReason"].as_str().unwrap();
    assert!(
        reason.contains("forbidden paths touched: .mcp.json"),
        "{reason}"
    );
    assert!(!w.ws.join(".mcp.json").exists());
}

#[test]
fn codex_answers_follow_its_contract() {
    let w = ws();
    // Promote: allow with updatedInput.command (Codex rejects allow
    // without a rewrite).
    let a = answer(&hook(
        &w,
        "codex",
        codex_event("PreToolUse", &w.ws, "echo hi > b.txt")
            .to_string()
            .as_bytes(),
        &[],
    ));
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "allow");
    let rewrite = out["updatedInput"]["command"].as_str().unwrap().to_string();
    assert!(rewrite.contains(" promote ") && rewrite.ends_with("--replay-output"));
    // Needs approval: no ask in Codex; a rewrite that waits for a reviewer.
    let a = answer(&hook(
        &w,
        "codex",
        codex_event("PreToolUse", &w.ws, RISKY_A)
            .to_string()
            .as_bytes(),
        &[],
    ));
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "allow");
    let waiting = out["updatedInput"]["command"].as_str().unwrap().to_string();
    assert!(waiting.contains("--await-approval 300"), "{waiting}");
    assert!(!waiting.contains("host-prompt-token"));
    // PermissionRequest: only dryrun's own rewrite may go ahead.
    let a = answer(&hook(
        &w,
        "codex",
        codex_event("PermissionRequest", &w.ws, &rewrite)
            .to_string()
            .as_bytes(),
        &[],
    ));
    assert_eq!(
        a["hookSpecificOutput"]["hookEventName"],
        "PermissionRequest"
    );
    assert_eq!(a["hookSpecificOutput"]["decision"]["behavior"], "allow");
    let a = answer(&hook(
        &w,
        "codex",
        codex_event("PermissionRequest", &w.ws, "rm -rf out")
            .to_string()
            .as_bytes(),
        &[],
    ));
    assert_eq!(a["hookSpecificOutput"]["decision"]["behavior"], "deny");
    assert!(
        a["hookSpecificOutput"]["decision"]["message"]
            .as_str()
            .unwrap()
            .len()
            > 10
    );
    // Blocked: deny with a non-empty reason.
    let a = answer(&hook(
        &w,
        "codex",
        codex_event(
            "PreToolUse",
            &w.ws,
            "mkdir -p .codex && echo x > .codex/config.toml",
        )
        .to_string()
        .as_bytes(),
        &[],
    ));
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(
        !a["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_command_outside_the_project_is_denied() {
    let w = ws();
    let home = w.ws.parent().unwrap().to_path_buf();
    let e = claude_event(&home, "echo x > .bashrc");
    let a = answer(&hook(
        &w,
        "claude-code",
        e.to_string().as_bytes(),
        &[("CLAUDE_PROJECT_DIR", w.ws.to_str().unwrap())],
    ));
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(
        a["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("outside the project")
    );
    assert!(!home.join(".bashrc").exists());
}

/// The agent's hook, run as the agent's uid against a daemon: its answer
/// to Claude Code's `PreToolUse` for `command` in `ws`.
fn hook_over_daemon(
    d: &common::daemon::Daemon,
    ws: &common::Ws,
    command: &str,
) -> serde_json::Value {
    let event = claude_event(&ws.dir, command);
    let mut c = d.cli_user();
    c.args(["hook", "claude-code"]);
    answer(&common::output_with_stdin(
        &mut c,
        event.to_string().as_bytes(),
    ))
}

/// A daemon keeps approvals with its reviewers by default: the hook asks
/// the host with a command that waits for a dryrun reviewer (no token),
/// and the person's yes alone applies nothing; once a reviewer (another
/// identity) approves, the waiting command applies the change set.
#[test]
fn over_a_default_daemon_the_yes_waits_for_a_dryrun_reviewer() {
    use common::daemon::{Daemon, user_workspace};
    if !common::daemon::require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("dryrun.yaml", "hook:\n  await_approval_s: 60\n");
    ws.chown_all();
    let a = hook_over_daemon(&d, &ws, "shred -n 0 -z README.md");
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "ask", "{a}");
    let reason = out["permissionDecisionReason"].as_str().unwrap();
    assert!(
        reason.contains("needs a dryrun reviewer's approval"),
        "{reason}"
    );
    let yes = out["updatedInput"]["command"].as_str().unwrap().to_string();
    assert!(yes.contains("--await-approval 60"), "{yes}");
    assert!(!yes.contains("host-prompt-token"), "{yes}");
    assert_eq!(out["updatedInput"]["timeout"], 120_000, "{a}");
    let id = yes
        .split_whitespace()
        .skip_while(|w| *w != "promote")
        .nth(1)
        .unwrap()
        .to_string();
    // The person says yes: the command waits, nothing is applied yet.
    let waiting = common::as_test_user("bash")
        .args(["-c", &yes])
        .current_dir(&ws.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(std::fs::read(ws.dir.join("README.md")).unwrap(), b"hello\n");
    let (_, rec) = d.curl(common::Who::Root, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(rec["state"], "awaiting_approval", "{rec}");
    // A reviewer approves.
    let (code, v) = d.curl(
        common::Who::Root,
        "POST",
        &format!("/v1/runs/{id}/approve"),
        Some(r#"{"note":"ok, send it"}"#),
    );
    assert_eq!(code, 200, "{v}");
    let o = waiting.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    // shred -z left zeros where the text was.
    let shredded = std::fs::read(ws.dir.join("README.md")).unwrap();
    assert!(!shredded.is_empty() && shredded.iter().all(|b| *b == 0));
    let (_, rec) = d.curl(common::Who::Root, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(rec["state"], "promoted", "{rec}");
    assert_ne!(
        rec["approvals"][0]["authenticated_by"], "agent_host_prompt",
        "{rec}"
    );
}

/// Over a daemon whose administrator turned host-prompt approvals on, as
/// an ordinary user (the agent) with root as the reviewer: the grant and
/// the token travel over the socket, the token is bound to the uid it was
/// issued to.
#[test]
fn over_the_daemon_the_host_prompt_yes_promotes_once() {
    use common::daemon::{Daemon, user_workspace};
    let d = Daemon::start(&["--host-prompt-approvals"]);
    let ws = user_workspace();
    let a = hook_over_daemon(&d, &ws, "shred -n 0 -z README.md");
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "ask", "{a}");
    let yes = out["updatedInput"]["command"].as_str().unwrap().to_string();
    assert!(yes.contains("--socket"), "{yes}");
    // Root (another uid) holding the token cannot use it.
    let o = Command::new("bash")
        .args(["-c", &yes])
        .current_dir(&ws.dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    // It was bound to the agent's uid, and a refused attempt consumes
    // nothing: the agent's own yes still works, once.
    let o = common::as_test_user("bash")
        .args(["-c", &yes])
        .current_dir(&ws.dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let id = yes
        .split_whitespace()
        .skip_while(|w| *w != "promote")
        .nth(1)
        .unwrap();
    let (_, rec) = d.curl(common::Who::Root, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(rec["state"], "promoted");
    assert_eq!(rec["approvals"][0]["authenticated_by"], "agent_host_prompt");
    let o = common::as_test_user("bash")
        .args(["-c", &yes])
        .current_dir(&ws.dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
}

/// A command whose local writes may depend on a call a stub answered is
/// never offered as a plain promotion (the live lane would refuse it):
/// both hosts deny it, naming the call and the two ways out.
#[test]
fn stubbed_calls_are_denied_not_offered() {
    let w = ws();
    let cmd = "gh release create v1.13 && echo released > status.txt";
    for (host, event) in [
        ("claude-code", claude_event(&w.ws, cmd)),
        ("codex", codex_event("PreToolUse", &w.ws, cmd)),
    ] {
        let a = answer(&hook(&w, host, event.to_string().as_bytes(), &[]));
        let out = &a["hookSpecificOutput"];
        assert_eq!(out["permissionDecision"], "deny", "{host}: {a}");
        let why = out["permissionDecisionReason"].as_str().unwrap();
        for needle in [
            "gh release create v1.13",
            "--local-only",
            "live.mode: rerun",
        ] {
            assert!(
                why.contains(needle),
                "{host}: {needle:?} missing from {why}"
            );
        }
        assert!(out.get("updatedInput").is_none(), "{host}: no rewrite: {a}");
    }
    assert!(!w.ws.join("status.txt").exists());
}
