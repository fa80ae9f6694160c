//! Driving `dryrun hook` as an agent host does: the hosts' exact event
//! JSON (Claude Code 2.1, Codex 0.169) on stdin, the answer on stdout, an
//! in-process engine on a state directory of the test's.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{Value, bin};

/// A project with one file, and the hook's state directory beside it.
pub struct HookWs {
    pub root: tempfile::TempDir,
    pub ws: PathBuf,
    pub state: PathBuf,
}

pub fn hook_ws(prefix: &str) -> HookWs {
    let root = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "content-of-a\n").unwrap();
    HookWs {
        state: root.path().join("state"),
        ws,
        root,
    }
}

pub fn claude_event(cwd: &Path, command: &str) -> Value {
    serde_json::json!({
        "session_id": "9a1f", "transcript_path": "/tmp/t.jsonl", "cwd": cwd,
        "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "d", "timeout": 120000},
        "tool_use_id": "toolu_01"
    })
}

pub fn codex_event(event: &str, cwd: &Path, command: &str) -> Value {
    serde_json::json!({
        "session_id": "01a2", "turn_id": "01a3", "transcript_path": null, "cwd": cwd,
        "hook_event_name": event, "model": "gpt-5", "permission_mode": "bypassPermissions",
        "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "call_1"
    })
}

/// Run `dryrun hook HOST` on `input`. A hook that stops reading early (a
/// huge input) may close its stdin; any other write error fails the test.
pub fn hook(w: &HookWs, host: &str, input: &[u8], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(["hook", host])
        .env("DRYRUN_LOCAL", "1")
        .env("DRYRUN_STATE_DIR", &w.state)
        .env_remove("DRYRUN_SOCKET")
        .env_remove("CLAUDE_PROJECT_DIR")
        .env_remove("DRYRUN_HOOK_WORKSPACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut ch = c.spawn().unwrap();
    if let Err(e) = ch.stdin.take().unwrap().write_all(input) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing the event: {e}"
        );
    }
    ch.wait_with_output().unwrap()
}

/// The hook's answer: exit 0 and one JSON object on stdout.
pub fn answer(o: &Output) -> Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON answer")
}
