//! The command line as a finished tool: a closed pipe ends it quietly,
//! `--json` errors are one JSON object on stdout with the usual exit
//! codes, run ids resolve from a unique prefix or `last`, `runs --limit`,
//! completions that load in bash, a man page, no colour off a terminal,
//! wording that never contradicts itself, and `approve` showing the
//! evidence (who submitted, would-be actions with their stdin) first.

mod common;

use std::process::Command;

use common::daemon::*;
use common::*;
use serde_json::Value;

/// This process's own identity (root when the suite runs as root).
fn me() -> Who {
    if is_root() { Who::Root } else { Who::User }
}

fn dryrun_local(ws: &Ws) -> Command {
    ws.command()
}

#[test]
fn a_closed_pipe_ends_runs_quietly() {
    let ws = Ws::new(me());
    for i in 0..3 {
        let r = ws.rehearse(
            &format!("echo {i} > f{i}.txt"),
            &["--expect-write", "*.txt"],
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    // Many lines, a reader that takes one.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; for i in $(seq 200); do {} runs; done | head -1; echo \"status ${{PIPESTATUS[0]}}\" >&2",
            sq(bin().to_str().unwrap())
        ))
        .env("DRYRUN_STATE_DIR", &ws.state)
        .env("DRYRUN_LOCAL", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panic"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    // One `dryrun runs | head -1` on its own.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{} runs | head -1", sq(bin().to_str().unwrap())))
        .env("DRYRUN_STATE_DIR", &ws.state)
        .env("DRYRUN_LOCAL", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn json_errors_are_one_object_on_stdout_with_the_usual_exit_codes() {
    let ws = Ws::new(me());
    let cases: [(&[&str], i32, &str); 4] = [
        (&["show", "r1-0123456789abcdef", "--json"], 2, "no_such_run"),
        (&["show", "../etc", "--json"], 2, "bad_run_id"),
        (&["runs", "--state", "nope", "--json"], 2, "usage"),
        (&["runs", "--no-such-flag", "--json"], 2, "usage"),
    ];
    for (args, code, want) in cases {
        let out = dryrun_local(&ws).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"));
        assert_eq!(v["error"]["code"], want, "{args:?}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    }
}

#[test]
fn run_ids_resolve_from_a_unique_prefix_or_last_and_runs_takes_a_limit() {
    let ws = Ws::new(me());
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = ws.rehearse(
            &format!("echo {i} > f{i}.txt"),
            &["--expect-write", "*.txt"],
        );
        ids.push(r.json["run_id"].as_str().unwrap().to_string());
    }
    let show = |id: &str| {
        let out = dryrun_local(&ws)
            .args(["show", id, "--json"])
            .output()
            .unwrap();
        (
            out.status.code(),
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
        )
    };
    let newest = ids.last().unwrap();
    assert_eq!(show("last").1["run_id"], newest.as_str());
    // The random tail tells runs apart: a prefix up to a few of its
    // characters is unique.
    let (head, tail) = newest.split_once('-').unwrap();
    let prefix = format!("{head}-{}", &tail[..6]);
    assert_eq!(show(&prefix).1["run_id"], newest.as_str());
    // Runs started in the same second share `head`: ambiguous, or unique.
    let same_second = ids.iter().filter(|i| i.starts_with(head)).count();
    let (code, v) = show(head);
    if same_second > 1 {
        assert_eq!(code, Some(2), "{v}");
        assert_eq!(v["error"]["code"], "ambiguous_run_id", "{v}");
    } else {
        assert_eq!(v["run_id"], newest.as_str());
    }
    let out = dryrun_local(&ws)
        .args(["runs", "--limit", "2", "--json"])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    assert_eq!(runs[0]["run_id"], newest.as_str());
}

#[test]
fn completions_load_in_bash_and_the_man_page_renders() {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source <({} completions bash) && complete -p dryrun",
            sq(bin().to_str().unwrap())
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("dryrun"));
    let out = Command::new(bin()).arg("man").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let man = String::from_utf8_lossy(&out.stdout);
    assert!(man.contains(".TH dryrun"), "{}", &man[..man.len().min(400)]);
    assert!(man.contains("withdraw"), "subcommands are listed");
}

#[test]
fn the_evidence_never_contradicts_itself_and_has_no_colour_off_a_terminal() {
    let ws = Ws::new(me());
    ws.write("secret.txt", "s\n");
    let out = dryrun_local(&ws)
        .args([
            "execute",
            "--command",
            "echo x > secret.txt",
            "--forbid",
            "secret.txt",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains('\u{1b}'),
        "no escape codes in a pipe: {text:?}"
    );
    assert!(
        text.lines()
            .any(|l| l == "decision: blocked" || l.starts_with("decision: blocked —")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("approval: required, as an override")),
        "{text}"
    );
    assert!(!text.contains("approval not required"), "{text}");
    assert!(text.contains("submitted: "), "who submitted it: {text}");
    assert!(
        text.lines()
            .any(|l| l == "state: awaiting_approval (override required)"),
        "{text}"
    );
}

#[test]
fn approve_shows_the_evidence_summary_before_it_acts() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let cmd = "printf 'release notes\\n' | gh release create v1.13 --notes-file - && echo released > status.txt";
    let r = submit_user(&d, &ws, cmd, &["--expect-write", "status.txt"]);
    assert_eq!(r.code, 3, "{r:?}");
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let out = d
        .cli_root()
        .args(["approve", &id[..id.len() - 4], "--note", "ok"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let uid = test_user().0;
    for needle in [
        format!("review run {id}"),
        format!("by uid {uid} (via daemon)"),
        "reasons:".to_string(),
        "changes: 1 created".to_string(),
        "gh release create v1.13 --notes-file - → exit 0 (stub)".to_string(),
        "    | release notes".to_string(),
        "NOT made; promoting needs --local-only".to_string(),
    ] {
        assert!(text.contains(&needle), "{needle:?} missing from\n{text}");
    }
    // The summary comes before the result.
    assert!(
        text.find("review run").unwrap() < text.find("state: approved").unwrap(),
        "{text}"
    );
}
