mod common;
use common::*;

// The command line as executable documentation: what a user
// types, what comes back, and which exit code. Invalid input exits 2 with a
// message that names the field, and nothing runs.

use std::path::PathBuf;
use std::process::Output;

/// `dryrun ARGS...` in this workspace, as this identity.
fn dryrun(ws: &Ws, args: &[&str]) -> Output {
    ws.command().args(args).output().expect("dryrun runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An envelope file next to (not inside) the workspace.
fn envelope_file(ws: &Ws, name: &str, text: &str) -> PathBuf {
    let p = ws.root.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The runs recorded in this workspace's state directory.
fn runs_json(ws: &Ws, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["runs", "--json"];
    args.extend_from_slice(extra);
    let o = dryrun(ws, &args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{:?}: dryrun runs: {}",
        ws.who,
        stderr(&o)
    );
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    v.as_array()
        .cloned()
        .unwrap_or_else(|| panic!("runs --json is not an array: {v}"))
}

/// Exit 2, every `needles` in the message, no run recorded; on stdout
/// nothing, or with `--json` one JSON error object.
fn assert_invalid(ws: &Ws, o: &Output, needles: &[&str], what: &str) {
    let who = ws.who;
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{who:?} {what}: stdout {} stderr {err}",
        stdout(o)
    );
    assert_stdout_empty_or_json_error(o, &format!("{who:?} {what}"));
    for n in needles {
        assert!(
            err.contains(n),
            "{who:?} {what}: {n:?} not in the message: {err}"
        );
    }
    assert!(
        runs_json(ws, &[]).is_empty(),
        "{who:?} {what}: a run was recorded for invalid input"
    );
}

#[test]
fn execute_without_a_command_source_is_a_usage_error() {
    for who in identities() {
        let ws = Ws::new(who);
        let o = dryrun(&ws, &["execute", "--json"]);
        assert_invalid(&ws, &o, &["--command", "--task", "--file"], "no command");
        let o = dryrun(&ws, &["execute"]);
        assert_invalid(&ws, &o, &["--command"], "no command, human");
    }
}

#[test]
fn conflicting_or_unknown_arguments_are_usage_errors() {
    for who in identities() {
        let ws = Ws::new(who);
        for (args, what) in [
            (
                vec!["execute", "--json", "--command", "true", "--task", "x"],
                "--command with --task",
            ),
            (
                vec!["execute", "--json", "--command", "true", "--file", "e.yaml"],
                "--command with --file",
            ),
            (
                vec!["execute", "--json", "--command", "true", "--bogus"],
                "unknown flag",
            ),
            (
                vec![
                    "execute",
                    "--json",
                    "--command",
                    "true",
                    "--timeout",
                    "soon",
                ],
                "non-numeric timeout",
            ),
            (vec!["frobnicate"], "unknown subcommand"),
        ] {
            let o = dryrun(&ws, &args);
            assert_invalid(&ws, &o, &[], what);
        }
        let o = dryrun(&ws, &["--help"]);
        assert_eq!(o.status.code(), Some(0), "{who:?}");
        assert!(stdout(&o).contains("execute"), "{who:?}: {}", stdout(&o));
    }
}

#[test]
fn invalid_command_line_intent_names_the_field() {
    for who in identities() {
        let ws = Ws::new(who);
        for (extra, needles) in [
            (vec!["--command", ""], vec!["command", "empty"]),
            (vec!["--command", "   "], vec!["command", "empty"]),
            (
                vec!["--command", "true", "--expect-write", "../x"],
                vec!["intent.expected_writes", "../x"],
            ),
            (
                vec!["--command", "true", "--forbid", "/etc"],
                vec!["intent.forbidden_paths", "/etc"],
            ),
            (
                vec!["--command", "true", "--timeout", "0"],
                vec!["limits.timeout_s"],
            ),
            (
                vec!["--command", "true", "--read-only", "--expect-write", "a"],
                vec!["intent.expected_writes", "read_only"],
            ),
            (
                vec!["--command", "true", "--workspace", "/definitely/not/here"],
                vec!["working_dir"],
            ),
        ] {
            let mut args = vec!["execute", "--json"];
            args.extend_from_slice(&extra);
            let o = dryrun(&ws, &args);
            assert_invalid(&ws, &o, &needles, &format!("{extra:?}"));
        }
    }
}

#[test]
fn invalid_envelope_files_name_the_field() {
    for who in identities() {
        let ws = Ws::new(who);
        let wd = ws.dir.display().to_string();
        let cases: Vec<(&str, String, Vec<&str>)> = vec![
            (
                "typo.yaml",
                format!("command: ls\nworking_dir: {wd}\nintnet:\n  summary: typo\n"),
                vec!["unknown field", "intnet"],
            ),
            (
                "nested-typo.json",
                format!(
                    "{{\"command\": \"ls\", \"working_dir\": \"{wd}\", \"intent\": {{\"sumary\": \"x\"}}}}"
                ),
                vec!["unknown field", "sumary", "intent"],
            ),
            (
                "relative.yaml",
                "command: ls\nworking_dir: rel/dir\n".into(),
                vec!["working_dir", "relative"],
            ),
            (
                "climb.yaml",
                format!("command: ls\nworking_dir: {wd}\nintent:\n  expected_writes: ['../x']\n"),
                vec!["intent.expected_writes", ".."],
            ),
            (
                "timeout.yaml",
                format!("command: ls\nworking_dir: {wd}\nlimits: {{timeout_s: 0}}\n"),
                vec!["limits.timeout_s"],
            ),
            (
                "empty.yaml",
                format!("command: ''\nworking_dir: {wd}\n"),
                vec!["command", "empty"],
            ),
            (
                "missing.yaml",
                format!("working_dir: {wd}\nintent: {{summary: nothing}}\n"),
                vec!["command", "missing"],
            ),
            (
                "mode.yaml",
                format!("command: ls\nworking_dir: {wd}\nintent: {{mode: yolo}}\n"),
                vec!["yolo"],
            ),
        ];
        for (name, text, needles) in cases {
            let p = envelope_file(&ws, name, &text);
            let o = dryrun(&ws, &["execute", "--json", "--file", p.to_str().unwrap()]);
            assert_invalid(&ws, &o, &needles, name);
        }
        let o = dryrun(
            &ws,
            &["execute", "--json", "--file", "/definitely/not/here.yaml"],
        );
        assert_invalid(
            &ws,
            &o,
            &["/definitely/not/here.yaml"],
            "missing envelope file",
        );
    }
}

#[test]
fn a_valid_envelope_file_runs() {
    for who in identities() {
        let ws = Ws::new(who);
        let wd = ws.dir.display().to_string();
        let p = envelope_file(
            &ws,
            "ok.yaml",
            &format!(
                "task: make-out\ncommand: echo built > out.txt\nworking_dir: {wd}\nintent:\n  summary: build\n  expected_writes: [out.txt]\n"
            ),
        );
        let r = ws.execute(&["--file", p.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        assert_eq!(r.decision(), "promote", "{who:?}");
        assert_eq!(r.json["task"], "make-out", "{who:?}");
        assert_eq!(r.json["intent"]["summary"], "build", "{who:?}");
        assert_eq!(
            r.change("out.txt").map(|c| c["kind"].clone()),
            Some(Value::from("created")),
            "{who:?}"
        );
        assert!(
            !ws.dir.join("out.txt").exists(),
            "{who:?}: a rehearsal wrote the real workspace"
        );
    }
}

const TASKS: &str = "\
tasks:
  build:
    command: echo built > out.txt
    intent:
      summary: Build the thing
      expected_writes: [out.txt]
  test:
    command: 'true'
  bad:
    command: 'true'
    working_dir: /tmp
";

#[test]
fn tasks_come_from_dryrun_yaml() {
    for who in identities() {
        let ws = Ws::new(who);
        let o = dryrun(&ws, &["execute", "--json", "--task", "build"]);
        assert_invalid(&ws, &o, &["dryrun.yaml"], "no dryrun.yaml");

        ws.write("dryrun.yaml", TASKS);
        let o = dryrun(&ws, &["execute", "--json", "--task", "nope"]);
        assert_invalid(&ws, &o, &["\"nope\"", "bad, build, test"], "--task nope");

        let o = dryrun(&ws, &["execute", "--json", "--task", "bad"]);
        assert_invalid(&ws, &o, &["tasks.bad.working_dir"], "task with working_dir");

        let r = ws.rehearse_untouched_task("build");
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        assert_eq!(r.json["task"], "build", "{who:?}");
        assert_eq!(r.json["command"], "echo built > out.txt", "{who:?}");
        assert_eq!(r.json["intent"]["summary"], "Build the thing", "{who:?}");
        assert_eq!(r.decision(), "promote", "{who:?}");
        assert_eq!(
            r.change("out.txt").map(|c| c["kind"].clone()),
            Some(Value::from("created")),
            "{who:?}"
        );
    }
}

trait TaskRun {
    fn rehearse_untouched_task(&self, name: &str) -> Run;
}

impl TaskRun for Ws {
    fn rehearse_untouched_task(&self, name: &str) -> Run {
        let before = self.snapshot();
        let r = self.execute(&["--task", name]);
        assert_eq!(
            before,
            self.snapshot(),
            "the real workspace changed during task {name}"
        );
        r
    }
}

/// Without `--json` an error leaves stdout empty; with it, stdout is one
/// JSON object, `{"error": {"code", "message"}}`.
fn assert_stdout_empty_or_json_error(o: &Output, what: &str) {
    if o.stdout.is_empty() {
        return;
    }
    let text = stdout(o);
    assert_eq!(text.lines().count(), 1, "{what}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    assert!(v["error"]["code"].is_string(), "{what}: {v}");
    assert!(v["error"]["message"].is_string(), "{what}: {v}");
}

#[test]
fn show_and_diff_of_unknown_runs_are_usage_errors() {
    for who in identities() {
        let ws = Ws::new(who);
        for args in [
            vec!["show", "nonexistent-id"],
            vec!["show", "r0-0000000000000000"],
            vec!["show", "../../etc/passwd"],
            vec!["show", "nonexistent-id", "--json"],
            vec!["diff", "nonexistent-id"],
            vec!["diff", "r0-0000000000000000", "--json"],
        ] {
            let o = dryrun(&ws, &args);
            assert_eq!(o.status.code(), Some(2), "{who:?} {args:?}: {}", stderr(&o));
            assert_stdout_empty_or_json_error(&o, &format!("{who:?} {args:?}"));
            assert!(
                stderr(&o).contains(args[1]),
                "{who:?} {args:?}: the message names the id: {}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn runs_with_an_unknown_state_is_a_usage_error() {
    for who in identities() {
        let ws = Ws::new(who);
        let o = dryrun(&ws, &["runs", "--state", "bogus"]);
        assert_eq!(o.status.code(), Some(2), "{who:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{who:?}");
        let err = stderr(&o);
        assert!(
            err.contains("bogus") && err.contains("awaiting_approval"),
            "{who:?}: {err}"
        );
    }
}

#[test]
fn runs_lists_a_run_after_one_execute() {
    for who in identities() {
        let ws = Ws::new(who);
        assert!(runs_json(&ws, &[]).is_empty(), "{who:?}");
        let o = dryrun(&ws, &["runs"]);
        assert_eq!(o.status.code(), Some(0), "{who:?}");

        let r = ws.rehearse_untouched("echo hi", &[]);
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let id = r.json["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{who:?}: {r:?}"))
            .to_string();

        let all = runs_json(&ws, &[]);
        assert_eq!(all.len(), 1, "{who:?}: {all:?}");
        assert_eq!(all[0]["run_id"], id.as_str(), "{who:?}");
        assert_eq!(all[0]["state"], "rehearsed", "{who:?}");
        assert_eq!(all[0]["command"], "echo hi", "{who:?}");
        let rehearsed = runs_json(&ws, &["--state", "rehearsed"]);
        assert_eq!(rehearsed.len(), 1, "{who:?}");
        assert!(
            runs_json(&ws, &["--state", "promoted"]).is_empty(),
            "{who:?}"
        );

        // Human listing names the run.
        let o = dryrun(&ws, &["runs"]);
        assert!(stdout(&o).contains(&id), "{who:?}: {}", stdout(&o));

        // The stored record is the one execute printed.
        let o = dryrun(&ws, &["show", &id, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(shown, r.json, "{who:?}");
        let o = dryrun(&ws, &["show", &id]);
        assert_eq!(o.status.code(), Some(0), "{who:?}");
        assert!(
            stdout(&o).starts_with(&format!("dryrun run {id}")),
            "{who:?}: {}",
            stdout(&o)
        );

        // A second run is listed newest first.
        let r2 = ws.rehearse_untouched("echo again", &[]);
        let all = runs_json(&ws, &[]);
        assert_eq!(all.len(), 2, "{who:?}");
        let ids: Vec<&str> = all.iter().filter_map(|r| r["run_id"].as_str()).collect();
        assert!(
            ids.contains(&id.as_str()) && ids.contains(&r2.json["run_id"].as_str().unwrap()),
            "{who:?}: {ids:?}"
        );
    }
}

/// Exactly one JSON object on stdout, one line, nothing around it.
fn assert_one_json_object(who: Who, o: &Output, what: &str) -> Value {
    let text = String::from_utf8(o.stdout.clone())
        .unwrap_or_else(|e| panic!("{who:?} {what}: stdout not UTF-8: {e}"));
    let mut values = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    let first = values
        .next()
        .unwrap_or_else(|| panic!("{who:?} {what}: no JSON on stdout: {text:?}"))
        .unwrap_or_else(|e| panic!("{who:?} {what}: {e}: {text:?}"));
    let rest = &text[values.byte_offset()..];
    assert!(
        rest.trim().is_empty(),
        "{who:?} {what}: more after the object: {rest:?}"
    );
    assert!(values.next().is_none(), "{who:?} {what}");
    assert!(first.is_object(), "{who:?} {what}: {first}");
    assert!(
        text.ends_with('\n') && text.trim_end().lines().count() == 1,
        "{who:?} {what}: {text:?}"
    );
    assert!(
        !text.starts_with(char::is_whitespace),
        "{who:?} {what}: {text:?}"
    );
    first
}

#[test]
fn json_output_is_exactly_one_object() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("a.txt", "a\n");
        // The command's own output, even JSON-looking, stays inside the record.
        let cmd = "echo to-stdout; echo to-stderr >&2; printf '{\"fake\":1}\\n'";
        for (extra, code) in [(vec![], 0), (vec!["--read-only"], 0)] {
            let mut args = vec!["execute", "--json", "--command", cmd];
            args.extend_from_slice(&extra);
            let o = dryrun(&ws, &args);
            assert_eq!(o.status.code(), Some(code), "{who:?}: {}", stderr(&o));
            let v = assert_one_json_object(who, &o, "promoted run");
            assert_eq!(v["schema"], "dryrun.run/v1", "{who:?}");
            assert_eq!(
                v["rehearsal"]["stdout"], "to-stdout\n{\"fake\":1}\n",
                "{who:?}"
            );
            assert_eq!(v["rehearsal"]["stderr"], "to-stderr\n", "{who:?}");
            assert!(v["run_id"].is_string(), "{who:?}");
        }
        // A blocked run (exit 4) and a failing command.
        let o = dryrun(
            &ws,
            &[
                "execute",
                "--json",
                "--command",
                "echo x > a.txt; echo done",
            ],
        );
        assert_eq!(o.status.code(), Some(4), "{who:?}: {}", stderr(&o));
        let v = assert_one_json_object(who, &o, "blocked run");
        assert_eq!(v["verdict"]["decision"], "blocked", "{who:?}");
        // A failing command is a result: promote (exit 0), the status kept.
        let o = dryrun(&ws, &["execute", "--json", "--command", "echo out; exit 7"]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        let v = assert_one_json_object(who, &o, "failing command");
        assert_eq!(v["rehearsal"]["exit_code"], 7, "{who:?}");
        assert_eq!(v["verdict"]["decision"], "promote", "{who:?}: {v}");
        // Unless it asks for success: blocked, and it waits for nobody.
        let o = dryrun(
            &ws,
            &[
                "execute",
                "--json",
                "--require-success",
                "--command",
                "echo out; exit 7",
            ],
        );
        assert_eq!(o.status.code(), Some(4), "{who:?}: {}", stderr(&o));
        let v = assert_one_json_object(who, &o, "failing command");
        assert_eq!(v["state"], "rehearsed", "{who:?}: {v}");
        assert!(
            v["verdict"]["reasons"].as_array().unwrap().iter().any(|r| r
                .as_str()
                .unwrap()
                .starts_with("[evidence.exit_status] the command exited with status 7")),
            "{who:?}: {v}"
        );

        // Other JSON outputs follow the same rule.
        let id = v["run_id"].as_str().unwrap().to_string();
        let o = dryrun(&ws, &["show", &id, "--json"]);
        assert_one_json_object(who, &o, "show --json");
        let o = dryrun(&ws, &["diff", &id, "--json"]);
        assert_one_json_object(who, &o, "diff --json");
    }
}

#[test]
fn human_output_is_the_evidence_block() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("blog/a.md", "# a\n");
        ws.write("blog/index.html", "<h1>\n");
        let before = ws.snapshot();
        let o = dryrun(
            &ws,
            &[
                "execute",
                "--command",
                "echo more >> blog/a.md; echo x >> blog/index.html",
                "--expect-write",
                "blog/*.md",
            ],
        );
        assert_eq!(before, ws.snapshot(), "{who:?}: the real workspace changed");
        assert_eq!(o.status.code(), Some(4), "{who:?}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(
            serde_json::from_str::<Value>(text.trim()).is_err(),
            "{who:?}: human output is not JSON"
        );
        for line in [
            "changes:",
            "  M blog/a.md [file]",
            "  M blog/index.html [file]",
            "surprise paths:",
            "  blog/index.html",
            "forbidden paths touched: none",
            "state: awaiting_approval (override required)",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{who:?}: {line:?} missing from\n{text}"
            );
        }
        for prefix in [
            "dryrun run r",
            "command: ",
            "sandbox: ",
            "exit code: 0 · files changed: 2 · surprise paths: 1",
            "decision: blocked",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(prefix)),
                "{who:?}: no line starting {prefix:?} in\n{text}"
            );
        }
        assert!(
            text.contains("[intent.expected_writes] modified blog/index.html but intent only allowed blog/*.md"),
            "{who:?}: {text}"
        );
    }
}
