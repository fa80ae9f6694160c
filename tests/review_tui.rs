//! `dryrun review`, the reviewers' terminal UI, driven for real: a daemon
//! (root) with an agent uid submitting runs, the TUI running in tmux
//! (send-keys in, capture-pane out) as the reviewer and as the submitter,
//! and every decision checked through `dryrun show` and the journal. The
//! screen is also drawn on ratatui's `TestBackend` from the records of
//! real rehearsals.

mod common;

use std::time::{Duration, Instant};

use common::daemon::*;
use common::tmux::Tmux;
use common::*;

/// The shell line that starts `dryrun review` on the daemon, as root or as
/// the test user; it stays on screen after it exits, for the assertions.
fn review_command(d: &Daemon, who: Who) -> String {
    let run_as = match who {
        Who::Root => String::new(),
        Who::User => {
            let (u, g) = test_user();
            format!("setpriv --reuid={u} --regid={g} --clear-groups -- ")
        }
    };
    format!(
        "exec {run_as}env -i PATH=/usr/bin:/bin TERM=tmux-256color DRYRUN_SOCKET={} {} review",
        d.socket.display(),
        bin().display()
    )
}

fn show(d: &Daemon, id: &str) -> Value {
    let out = d.cli_root().args(["show", "--json", id]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_state(d: &Daemon, id: &str, state: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let r = show(d, id);
        if r["state"] == state {
            return r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "run {id} never reached {state}: {r}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 300 reformatted files under `fmt/`, one config outside what the intent
/// expected, one forbidden key: blocked. With a note for reviewers.
fn submit_blocked(d: &Daemon, ws: &Ws) -> Run {
    ws.write("secrets/key", "k\n");
    ws.write(
        "envelope.yaml",
        r#"command: 'mkdir -p fmt config; for i in $(seq 1 300); do echo "x $i" > fmt/f$i.txt; done; echo "admin: true" > config/app.yaml; echo more >> secrets/key'
intent:
  summary: reformat the docs
  mode: mutating
  expected_writes: ["fmt/**"]
  forbidden_paths: ["secrets/"]
  reviewer_note: "only fmt/ should change"
"#,
    );
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--file", "envelope.yaml"])
        .output()
        .unwrap();
    let r = run_json(out);
    assert_eq!(r.decision(), "blocked", "{r:?}");
    r
}

fn submit_needs_approval(d: &Daemon, ws: &Ws, hook: &str) -> Run {
    let r = submit_user(
        d,
        ws,
        &format!("echo x > .git/hooks/{hook}"),
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.decision(), "needs_approval", "{r:?}");
    r
}

#[test]
fn a_reviewer_approves_rejects_and_overrides_from_the_tui() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let approve_me = run_id(&submit_needs_approval(&d, &ws, "pre-commit"));
    let reject_me = run_id(&submit_needs_approval(&d, &ws, "post-commit"));
    let blocked = run_id(&submit_blocked(&d, &ws));

    // After the TUI, the shell records the terminal's modes: raw mode must
    // be gone.
    let modes = d.dir.path().join("stty-after-review");
    let tui = Tmux::start(
        "reviewer",
        &format!(
            "{}; stty -a > {}",
            review_command(&d, Who::Root).trim_start_matches("exec "),
            modes.display()
        ),
    );
    tui.wait_text("3 waiting");

    // The blocked run: the forbidden path first, the 300 files one line,
    // the surprise config on its own, the note for reviewers.
    let s = tui.select(&blocked);
    let line_of = |s: &str, needle: &str| {
        s.lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not on the screen:\n{s}"))
    };
    assert!(
        line_of(&s, "[intent.forbidden_paths]") < line_of(&s, "[intent.expected_writes]"),
        "{s}"
    );
    assert!(
        line_of(&s, "secrets/key (file)  FORBIDDEN")
            < line_of(&s, "config/app.yaml (file)  SURPRISE")
    );
    assert!(
        s.contains("fmt/ … 300 ordinary change(s) collapsed (300 created)"),
        "{s}"
    );
    assert!(!s.contains("fmt/f17.txt (file)"), "{s}");
    assert!(s.contains("only fmt/ should change"), "{s}");
    assert!(s.contains("dryrun-test"), "the submitter is named: {s}");

    // Override it, after the confirmation that says what that means.
    tui.keys(&["o"]);
    let s = tui.wait_text("was BLOCKED");
    assert!(s.contains("journaled as an OVERRIDE"), "{s}");
    assert!(s.contains("applied to the live workspace"), "{s}");
    tui.keys(&["y"]);
    tui.wait_text("Override and approve run");
    tui.type_text("override: the key change is intended");
    tui.keys(&["Enter"]);
    let r = wait_state(&d, &blocked, "approved");
    assert_eq!(r["approvals"][0]["overrode_block"], true, "{r}");
    assert_eq!(
        r["approvals"][0]["note"],
        "override: the key change is intended"
    );
    tui.wait_text("approved (override of the block)");

    // Approve one with a note.
    tui.select(&approve_me);
    tui.keys(&["a"]);
    tui.wait_text("Note (journaled with your identity)");
    tui.type_text("hook reviewed in the TUI");
    tui.keys(&["Enter"]);
    let r = wait_state(&d, &approve_me, "approved");
    assert_eq!(r["approvals"][0]["note"], "hook reviewed in the TUI");
    assert_eq!(r["approvals"][0]["by"]["uid"], 0);
    assert_eq!(r["approvals"][0]["overrode_block"], false);

    // Reject one with a note (R).
    tui.select(&reject_me);
    tui.keys(&["R"]);
    tui.wait_text("Reject run");
    tui.type_text("no new hooks");
    tui.keys(&["Enter"]);
    let r = wait_state(&d, &reject_me, "rejected");
    assert_eq!(r["approvals"][0]["note"], "no new hooks");
    tui.wait_text("0 waiting");

    // The journal holds each decision with its note.
    let j = d.journal();
    let entry = |kind: &str, id: &str| {
        j.iter()
            .find(|e| e["kind"] == kind && e["run_id"] == id)
            .unwrap_or_else(|| panic!("no {kind} of {id} in the journal"))
            .clone()
    };
    let e = entry("approval", &blocked);
    assert_eq!(e["data"]["override_of_block"], true, "{e}");
    assert_eq!(e["data"]["note"], "override: the key change is intended");
    let e = entry("approval", &approve_me);
    assert_eq!(e["data"]["override_of_block"], false, "{e}");
    assert_eq!(e["data"]["note"], "hook reviewed in the TUI");
    assert_eq!(
        entry("rejection", &reject_me)["data"]["note"],
        "no new hooks"
    );

    // q leaves, and the terminal is given back (canonical mode, echo).
    tui.keys(&["q"]);
    let t0 = Instant::now();
    while tui.alive() {
        assert!(t0.elapsed() < Duration::from_secs(10), "q did not quit");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stty = std::fs::read_to_string(&modes).expect("the shell ran stty after the TUI");
    let words: Vec<&str> = stty.split_whitespace().collect();
    assert!(
        words.contains(&"icanon") && words.contains(&"echo"),
        "{stty}"
    );
}

#[test]
fn a_submitter_cannot_approve_its_own_run_from_the_tui() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let own = run_id(&submit_needs_approval(&d, &ws, "pre-push"));
    let blocked = run_id(&submit_blocked(&d, &ws));

    // The agent's uid runs the TUI: it sees its own runs, the approve key
    // is greyed, and pressing it anyway shows the engine's refusal.
    let tui = Tmux::start("submitter", &review_command(&d, Who::User));
    let s = tui.select(&own);
    assert!(s.contains("approve (your run)"), "{s}");
    tui.keys(&["a"]);
    let s = tui.wait_text("never approve its own run");
    assert!(s.contains("refused"), "{s}");
    assert_eq!(show(&d, &own)["state"], "awaiting_approval");

    // Nor override its own blocked run.
    tui.select(&blocked);
    tui.keys(&["o"]);
    tui.wait_for("the refusal of the override", |s| {
        s.contains("never approve its own run") && s.contains(&format!("run {blocked}"))
    });
    let r = show(&d, &blocked);
    assert!(
        r["approvals"].as_array().is_none_or(|a| a.is_empty()),
        "{r}"
    );
    assert_ne!(r["state"], "approved");
    assert!(
        !d.journal().iter().any(|e| e["kind"] == "approval"),
        "an approval was journaled"
    );

    // The daemon goes away: the status line says so, the screen stays.
    let mut d = d;
    d.kill9();
    tui.keys(&["r"]);
    let s = tui.wait_text("listing the queue failed");
    assert!(s.contains("cannot reach the dryrun daemon"), "{s}");
    assert!(tui.alive());
    tui.keys(&["q"]);
}

/// The screen drawn on `TestBackend` from records that real rehearsals
/// wrote (local mode), with their real diffs.
#[test]
fn the_screen_of_real_records_puts_forbidden_first_and_collapses_fmt() {
    let ws = Ws::new(Who::Root);
    ws.write("secrets/key", "k\n");
    let r = ws.rehearse(
        r#"mkdir -p fmt config; for i in $(seq 1 300); do echo "x $i" > fmt/f$i.txt; done; echo "admin: true" > config/app.yaml; echo more >> secrets/key"#,
        &["--expect-write", "fmt/**", "--forbid", "secrets/"],
    );
    assert_eq!(r.decision(), "blocked", "{r:?}");
    let id = run_id(&r);
    let diff = ws.command().args(["diff", "--json", &id]).output().unwrap();
    assert!(diff.status.success());
    let screen = dryrun::cli::tui::render_records_for_test(
        &[r.stdout.trim().to_string()],
        &[(id.clone(), String::from_utf8(diff.stdout).unwrap())],
        u32::MAX,
        "",
        200,
        80,
    );
    let line_of = |needle: &str| {
        screen
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not on the screen:\n{screen}"))
    };
    assert!(line_of("[intent.forbidden_paths]") < line_of("[intent.expected_writes]"));
    assert!(line_of("secrets/key (file)  FORBIDDEN") < line_of("config/app.yaml (file)  SURPRISE"));
    assert!(
        screen.contains("fmt/ … 300 ordinary change(s) collapsed (300 created)"),
        "{screen}"
    );
    // The diffs: the forbidden file's first, with its added line.
    assert!(
        line_of("── secrets/key") < line_of("── config/app.yaml"),
        "{screen}"
    );
    assert!(screen.contains("+more"), "{screen}");
    // e expands every path.
    let expanded = dryrun::cli::tui::render_records_for_test(
        &[r.stdout.trim().to_string()],
        &[],
        u32::MAX,
        "e",
        200,
        400,
    );
    assert!(expanded.contains("fmt/f17.txt (file)"), "{expanded}");
    assert!(!expanded.contains("collapsed"), "{expanded}");
}

#[test]
fn without_a_terminal_review_says_what_to_use_instead() {
    let ws = Ws::new(Who::Root);
    let out = ws.command().arg("review").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(err.contains("dryrun approve"), "{err}");
}

/// Would-be actions with the text they were given on stdin, and network
/// attempts, as a real rehearsal recorded them.
#[test]
fn the_screen_shows_would_be_actions_with_their_stdin_and_network_attempts() {
    let ws = Ws::new(Who::Root);
    let r = ws.rehearse(
        "printf 'release notes\\nline2\\n' | gh release create v1.13 --notes-file - ; (exec 3<>/dev/tcp/192.0.2.1/80) 2>/dev/null; true",
        &[],
    );
    assert_ne!(r.decision(), "promote", "{r:?}");
    let screen = dryrun::cli::tui::render_records_for_test(
        &[r.stdout.trim().to_string()],
        &[],
        u32::MAX,
        "",
        200,
        80,
    );
    assert!(
        screen.contains("Would-be actions (1), answered by stubs, NOT made"),
        "{screen}"
    );
    assert!(
        screen.contains("gh release create v1.13 --notes-file - → exit 0"),
        "{screen}"
    );
    assert!(screen.contains("stdin (20 bytes):"), "{screen}");
    assert!(screen.contains("| release notes"), "{screen}");
    assert!(screen.contains("| line2"), "{screen}");
    assert!(screen.contains("Network attempts (1)"), "{screen}");
    assert!(
        screen.contains("connect stream to 192.0.2.1:80"),
        "{screen}"
    );
    assert!(
        screen.contains("stripped:") && screen.contains("stub:gh"),
        "{screen}"
    );
}

/// Without a daemon: root reviews the test user's local state directory
/// (as `sudo dryrun approve` would) and approves with a note; the same
/// TUI as the submitter's uid is refused.
#[test]
fn in_local_mode_another_uid_approves_and_the_submitter_cannot() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write(".git/hooks/.keep", "");
    let r = ws.rehearse(
        "echo x > .git/hooks/pre-commit",
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.decision(), "needs_approval", "{r:?}");
    let id = run_id(&r);
    let local = |who: Who| {
        let run_as = match who {
            Who::Root => String::new(),
            Who::User => {
                let (u, g) = test_user();
                format!("setpriv --reuid={u} --regid={g} --clear-groups -- ")
            }
        };
        format!(
            "exec {run_as}env -i PATH=/usr/bin:/bin TERM=tmux-256color {} --local --state-dir {} review",
            bin().display(),
            ws.state.display()
        )
    };
    let state = || {
        let out = ws.command().args(["show", "--json", &id]).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };

    let tui = Tmux::start("local-submitter", &local(Who::User));
    tui.select(&id);
    tui.keys(&["a"]);
    tui.wait_text("never approve its own run");
    assert_eq!(state()["state"], "awaiting_approval");
    tui.keys(&["q"]);
    drop(tui);

    let tui = Tmux::start("local-root", &local(Who::Root));
    let s = tui.select(&id);
    assert!(s.contains("local state"), "{s}");
    tui.keys(&["a"]);
    tui.wait_text("Note (journaled with your identity)");
    tui.type_text("local review");
    tui.keys(&["Enter"]);
    tui.wait_text("approved; now approved");
    let r = state();
    assert_eq!(r["state"], "approved", "{r}");
    assert_eq!(r["approvals"][0]["note"], "local review");
    assert_eq!(r["approvals"][0]["by"]["uid"], 0);
    tui.keys(&["q"]);
    // Root wrote there with the owner's filesystem identity.
    use std::os::unix::fs::MetadataExt;
    let (uid, _) = test_user();
    for e in walkdir::WalkDir::new(&ws.state) {
        let e = e.unwrap();
        let m = e.path().symlink_metadata().unwrap();
        assert_eq!(m.uid(), uid, "{} is not the owner's", e.path().display());
    }
}
