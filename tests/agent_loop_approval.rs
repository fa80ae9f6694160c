//! Issue 31, item 6: approval where there is one user. Root, in local
//! mode, approves root's own run only as a person at a terminal no process
//! on this machine made: here, a terminal whose other side is held outside
//! the approving process's pid namespace (what `docker exec -it` gives a
//! root container). An agent's ways in are refused, as root and as the
//! test user: no terminal, piped stdin, a pseudo-terminal it allocated
//! (`script`, Python's `pty`, a tmux of its own). Over the daemon the
//! two-identity rule stays.
//!
//! The "outside" terminal is made by the test (script(1), or tmux), and
//! the dryrun that approves runs in a new pid namespace (`unshare --pid
//! --fork --mount-proc`) where the test's processes are not visible: the
//! container's view.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use common::daemon::*;
use common::tmux::Tmux;
use common::*;

fn approvals_in_journal(state: &Path) -> usize {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"kind\":\"approval\""))
        .count()
}

fn record(state: &Path, id: &str) -> Value {
    serde_json::from_slice(&std::fs::read(state.join("runs").join(id).join("record.json")).unwrap())
        .unwrap()
}

/// A run of `ws`'s identity that waits for a person.
fn waiting_run(ws: &Ws) -> String {
    let r = ws.rehearse("echo 'all:' > Makefile", &["--expect-write", "**"]);
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    run_id(&r)
}

/// `shell` (one shell string) under a pseudo-terminal script(1) makes,
/// as `who`; the code shown is typed back. The exit code and the text.
fn at_a_terminal(who: Who, shell: &str) -> (Option<i32>, String) {
    let mut ch = common::terminal::under_a_pty(who, shell).spawn().unwrap();
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
            let _ = stdin.write_all(format!("{code}\n").as_bytes());
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

fn approve_line(ws: &Ws, id: &str) -> String {
    format!(
        "{} --local --state-dir {} approve {id} --note at-the-console",
        bin().display(),
        ws.state.display()
    )
}

/// The approving dryrun in a pid namespace of its own: the terminal's
/// other side (held by the test's script or tmux) is outside it.
fn in_own_pid_namespace(line: &str) -> String {
    format!("unshare --pid --fork --mount-proc {line}")
}

#[test]
fn root_approves_its_own_run_only_at_a_terminal_no_process_here_made() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let ws = Ws::new(Who::Root);
    let id = waiting_run(&ws);

    // The agent with no terminal, and with piped stdin.
    for stdin in [Stdio::null(), Stdio::piped()] {
        let mut ch = ws
            .command()
            .args(["approve", &id])
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(mut i) = ch.stdin.take() {
            let _ = i.write_all(b"yes\nyes\n");
        }
        let out = ch.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("stdin is not a terminal"), "{err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("type this code"));
    }

    // A pseudo-terminal the agent allocated: script(1) and Python's pty.
    let (code, text) = at_a_terminal(Who::Root, &approve_line(&ws, &id));
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("was made by process") && text.contains("(script)"),
        "{text}"
    );
    assert!(!text.contains("type this code"), "{text}");
    let py = format!(
        "import pty, sys; sys.exit(pty.spawn(['/bin/sh', '-c', {:?}]) >> 8)",
        approve_line(&ws, &id)
    );
    let out = Command::new("python3")
        .args(["-c", &py])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("was made by process"), "{text}");
    assert_eq!(approvals_in_journal(&ws.state), 0);
    assert_eq!(record(&ws.state, &id)["state"], "awaiting_approval");

    // A terminal made outside the approving process's pid namespace: the
    // code typed back approves, journaled as a person at the terminal.
    let (code, text) = at_a_terminal(Who::Root, &in_own_pid_namespace(&approve_line(&ws, &id)));
    assert_eq!(code, Some(0), "{text}");
    let r = record(&ws.state, &id);
    assert_eq!(r["state"], "approved", "{r}");
    assert_eq!(r["approvals"][0]["by"]["uid"], 0);
    assert_eq!(
        r["approvals"][0]["authenticated_by"],
        "local_terminal_presence"
    );
    assert_eq!(approvals_in_journal(&ws.state), 1);
}

#[test]
fn a_user_never_approves_its_own_run_even_at_a_terminal_made_elsewhere() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let ws = Ws::new(Who::User);
    let id = waiting_run(&ws);
    // The test user's own pty, and one made outside its pid namespace:
    // refused both ways (a user has `sudo` for a second identity).
    let (code, text) = at_a_terminal(Who::User, &approve_line(&ws, &id));
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("never approve its own run"), "{text}");
    let (u, g) = test_user();
    let line = in_own_pid_namespace(&format!(
        "setpriv --reuid={u} --regid={g} --clear-groups -- {}",
        approve_line(&ws, &id)
    ));
    let (code, text) = at_a_terminal(Who::Root, &line);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("never approve its own run"), "{text}");
    assert_eq!(approvals_in_journal(&ws.state), 0);
}

#[test]
fn over_the_daemon_root_never_approves_roots_own_run() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = Ws::new(Who::Root);
    let r = submit_as(
        &d,
        Who::Root,
        &ws.dir,
        "echo x > Makefile",
        &["--expect-write", "**"],
    );
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    let (st, v) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{}/approve", run_id(&r)),
        Some("{\"note\": \"me\"}"),
    );
    assert_eq!(st, 403, "{v}");
}

#[test]
fn the_review_tui_approves_roots_own_run_only_at_a_terminal_made_elsewhere() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let ws = Ws::new(Who::Root);
    let id = waiting_run(&ws);
    let review = format!(
        "env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin TERM=tmux-256color {} --local --state-dir {} review",
        bin().display(),
        ws.state.display()
    );
    // A tmux the agent started: its server holds the terminal. Refused.
    let tui = Tmux::start("own-tmux", &format!("exec {review}"));
    let s = tui.select(&id);
    assert!(s.contains("approve (your run)"), "{s}");
    tui.keys(&["a"]);
    tui.wait_text("root is the only identity here");
    assert_eq!(record(&ws.state, &id)["state"], "awaiting_approval");
    tui.keys(&["q"]);
    drop(tui);

    // The same screen in its own pid namespace: the code in the note line,
    // typed back, approves.
    let tui = Tmux::start(
        "outside",
        &format!("exec {}", in_own_pid_namespace(&review)),
    );
    tui.select(&id);
    tui.keys(&["a"]);
    let s = tui.wait_text("type this code first to confirm: ");
    let code = s
        .split("type this code first to confirm: ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    // A wrong code approves nothing.
    tui.type_text("WRONG9 note");
    tui.keys(&["Enter"]);
    tui.wait_text("the confirmation code did not match");
    assert_eq!(record(&ws.state, &id)["state"], "awaiting_approval");
    tui.keys(&["a"]);
    let s = tui.wait_text("type this code first to confirm: ");
    let code2 = s
        .split("type this code first to confirm: ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_ne!(code, code2, "a fresh code for each approval");
    tui.type_text(&format!("{code2} looked at it"));
    tui.keys(&["Enter"]);
    tui.wait_text("approved; now approved");
    let r = record(&ws.state, &id);
    assert_eq!(r["state"], "approved", "{r}");
    assert_eq!(r["approvals"][0]["note"], "looked at it");
    assert_eq!(
        r["approvals"][0]["authenticated_by"],
        "local_terminal_presence"
    );
    tui.keys(&["q"]);
}
