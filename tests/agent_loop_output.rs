//! The agent's loop through dryrun: the model sees what a terminal would
//! have shown. For every decision the hook's answer carries the command's
//! stdout and stderr in the order they were written (redacted, capped),
//! its exit status and, for a block, the reasons and what to change; the
//! replay of a promoted run keeps that order; a run that changed nothing
//! is answered by a replay of its output that runs nothing (no promotion,
//! no receipt, no "applied" line) and is journaled all the same. MCP and
//! the Python client return the same.
//!
//! The output order is made deterministic by `order.py`: after each write
//! it waits until the sandbox has read that stream's pipe empty
//! (`FIONREAD`), so the next write comes after it in any reading.
//!
//! As root (ids shifted) and as the unprivileged test user, each.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::hook::{answer, claude_event, codex_event};
use common::*;

/// Writes its pieces in this order, each read by the sandbox before the
/// next is written, then creates the files named after the exit status.
/// The key is split over two writes (two chunks): redacted all the same.
const ORDER_PY: &str = r#"import fcntl, os, struct, sys, termios, time

def drained(fd):
    while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]:
        time.sleep(0.001)

for fd, text in [
    (2, "Running unittests src/lib.rs\n"),
    (1, "test calc::adds ... FAILED\nkey AKIAABCD"),
    (1, "EFGHIJKLMNOP in the log\n"),
    (2, "error: test failed, to rerun pass `--lib`\n"),
    (1, "done\n"),
]:
    os.write(fd, text.encode())
    drained(fd)
for name in sys.argv[2:]:
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    open(name, "w").write("written\n")
sys.exit(int(sys.argv[1]))
"#;

/// The pieces of ORDER_PY's output as the record keeps them, in order.
const IN_ORDER: [&str; 5] = [
    "Running unittests src/lib.rs",
    "test calc::adds ... FAILED",
    "key [redacted:aws_access_key] in the log",
    "error: test failed, to rerun pass `--lib`",
    "done",
];
const SECRET: &str = "AKIAABCDEFGHIJKLMNOP";

fn order_cmd(exit: i32, files: &[&str]) -> String {
    let mut c = format!("/usr/bin/python3 order.py {exit}");
    for f in files {
        c.push(' ');
        c.push_str(f);
    }
    c
}

/// Asserts that `text` holds the pieces in order and never the secret.
fn assert_in_order(text: &str, pieces: &[&str]) {
    assert!(
        !text.contains(SECRET),
        "the secret reached the answer: {text}"
    );
    let mut at = 0;
    for p in pieces {
        match text[at..].find(p) {
            Some(i) => at += i + p.len(),
            None => panic!("{p:?} missing or out of order in:\n{text}"),
        }
    }
}

/// A workspace (owned by `who`) with ORDER_PY and a hook intent that
/// expects writes under out/ only.
fn workspace(who: Who) -> Ws {
    let ws = Ws::new(who);
    ws.write("order.py", ORDER_PY);
    ws.write("a.txt", "content-of-a\n");
    ws.write(
        "dryrun.yaml",
        "hook:\n  expected_writes: [\"out/**\"]\n  await_approval_s: 1\n",
    );
    std::fs::create_dir_all(ws.dir.join("out")).unwrap();
    ws.chown_all();
    ws
}

/// `dryrun hook HOST` as the workspace's identity, on `event`.
fn hook(ws: &Ws, host: &str, event: &Value) -> Value {
    let mut c = ws.command();
    c.args(["hook", host]);
    answer(&output_with_stdin(&mut c, event.to_string().as_bytes()))
}

/// The host running a rewritten command (as the workspace's identity),
/// stdout and stderr on one pipe as a terminal has them.
fn run_rewrite(ws: &Ws, command: &str) -> Output {
    let mut c = if ws.who == Who::User && is_root() {
        as_test_user("bash")
    } else {
        Command::new("bash")
    };
    c.arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .current_dir(&ws.dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn runs(ws: &Ws) -> Vec<Value> {
    let o = ws.command().args(["runs", "--json"]).output().unwrap();
    assert!(o.status.success());
    serde_json::from_slice(&o.stdout).unwrap()
}

fn run(ws: &Ws, id: &str) -> Value {
    let o = ws.command().args(["show", id, "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn journal(ws: &Ws) -> Vec<Value> {
    std::fs::read_to_string(ws.state.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["body"].clone())
        .collect()
}

fn newest_run_id(ws: &Ws) -> String {
    runs(ws)[0]["run_id"].as_str().unwrap().to_string()
}

#[test]
fn every_decision_carries_the_output_in_the_order_it_was_written() {
    for who in identities() {
        let ws = workspace(who);

        // blocked: a surprise write. The reason carries the evidence, what
        // to change, then the output in order and the exit status.
        let cmd = format!("touch notes.txt; {}", order_cmd(3, &[]));
        let a = hook(&ws, "claude-code", &claude_event(&ws.dir, &cmd));
        let out = &a["hookSpecificOutput"];
        assert_eq!(out["permissionDecision"], "deny", "{who:?}: {a}");
        let reason = out["permissionDecisionReason"].as_str().unwrap();
        assert_in_order(reason, &["surprise paths: notes.txt", "what to change: "]);
        assert_in_order(reason, &IN_ORDER);
        assert!(reason.contains("[exit status: 3]"), "{reason}");
        // Codex: the same reason in its deny.
        let a = hook(&ws, "codex", &codex_event("PreToolUse", &ws.dir, &cmd));
        let reason = a["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_in_order(reason, &IN_ORDER);

        // needs_approval (a protected path): Claude Code's ask shows the
        // output to the person (and, under -p, to the model); the yes
        // applies and replays it in order.
        let cmd = order_cmd(0, &[".github/workflows/ci.yml"]);
        let dryrun_yaml = "hook:\n  await_approval_s: 1\n";
        std::fs::write(ws.dir.join("dryrun.yaml"), dryrun_yaml).unwrap();
        ws.chown_all();
        let a = hook(&ws, "claude-code", &claude_event(&ws.dir, &cmd));
        let out = &a["hookSpecificOutput"];
        assert_eq!(out["permissionDecision"], "ask", "{who:?}: {a}");
        let reason = out["permissionDecisionReason"].as_str().unwrap();
        assert_in_order(reason, &["needs your approval", "what to change: "]);
        assert_in_order(reason, &IN_ORDER);
        let yes = out["updatedInput"]["command"].as_str().unwrap();
        let o = run_rewrite(&ws, yes);
        assert!(o.status.success(), "{who:?}: {}", text(&o));
        assert_in_order(&text(&o), &["applied the reviewed change set"]);
        assert_in_order(&text(&o), &IN_ORDER);
        assert!(ws.dir.join(".github/workflows/ci.yml").exists());
        // Codex waits for a reviewer; none comes: nothing is applied, and
        // the output is shown all the same.
        let cmd = order_cmd(0, &[".github/workflows/other.yml"]);
        let a = hook(&ws, "codex", &codex_event("PreToolUse", &ws.dir, &cmd));
        assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "allow");
        let wait = a["hookSpecificOutput"]["updatedInput"]["command"]
            .as_str()
            .unwrap();
        let o = run_rewrite(&ws, wait);
        assert_eq!(o.status.code(), Some(4), "{who:?}: {}", text(&o));
        assert_in_order(&text(&o), &["nothing was applied", "not applied:"]);
        assert_in_order(&text(&o), &IN_ORDER);
        assert!(!ws.dir.join(".github/workflows/other.yml").exists());

        // promote (a change under out/): the rewrite applies the change
        // set and replays the output in order, with its exit status.
        std::fs::write(
            ws.dir.join("dryrun.yaml"),
            "hook:\n  expected_writes: [\"out/**\"]\n",
        )
        .unwrap();
        ws.chown_all();
        let cmd = order_cmd(0, &["out/result.txt"]);
        for host in ["claude-code", "codex"] {
            let _ = std::fs::remove_file(ws.dir.join("out/result.txt"));
            let event = if host == "codex" {
                codex_event("PreToolUse", &ws.dir, &cmd)
            } else {
                claude_event(&ws.dir, &cmd)
            };
            let a = hook(&ws, host, &event);
            let out = &a["hookSpecificOutput"];
            assert_eq!(out["permissionDecision"], "allow", "{who:?} {host}: {a}");
            let rewrite = out["updatedInput"]["command"].as_str().unwrap();
            assert!(rewrite.contains(" promote r"), "{rewrite}");
            let o = run_rewrite(&ws, rewrite);
            assert!(o.status.success(), "{who:?} {host}: {}", text(&o));
            assert_in_order(&text(&o), &["applied the reviewed change set"]);
            assert_in_order(&text(&o), &IN_ORDER);
            assert_eq!(
                std::fs::read_to_string(ws.dir.join("out/result.txt")).unwrap(),
                "written\n"
            );
        }
    }
}

/// A run whose rehearsal changed nothing: the rewrite is a replay of its
/// output by shell builtins (no dryrun process, no promotion), the run
/// stays `rehearsed` without a receipt, nothing says "applied", and the
/// journal has its submission and verdict.
#[test]
fn a_run_that_changed_nothing_is_answered_by_its_output_alone() {
    for who in identities() {
        let ws = workspace(who);
        for host in ["claude-code", "codex"] {
            let cmd = order_cmd(0, &[]);
            let event = if host == "codex" {
                codex_event("PreToolUse", &ws.dir, &cmd)
            } else {
                claude_event(&ws.dir, &cmd)
            };
            let a = hook(&ws, host, &event);
            let out = &a["hookSpecificOutput"];
            assert_eq!(out["permissionDecision"], "allow", "{who:?} {host}: {a}");
            let replay = out["updatedInput"]["command"].as_str().unwrap();
            let id = newest_run_id(&ws);
            assert!(
                replay.starts_with(&format!(": dryrun replay {id}; printf %s '")),
                "{replay}"
            );
            assert!(
                !replay.contains(bin().to_str().unwrap()),
                "no dryrun process"
            );
            assert!(!replay.contains(SECRET), "{replay}");
            let o = run_rewrite(&ws, replay);
            assert!(o.status.success(), "{}", text(&o));
            assert_eq!(
                text(&o),
                "Running unittests src/lib.rs\ntest calc::adds ... FAILED\nkey [redacted:aws_access_key] in the log\nerror: test failed, to rerun pass `--lib`\ndone\n",
                "the output alone, in order"
            );
            let r = run(&ws, &id);
            assert_eq!(r["state"], "rehearsed", "{r:#}");
            assert_eq!(r["receipt"], Value::Null);
            let kinds: Vec<String> = journal(&ws)
                .iter()
                .filter(|e| e["run_id"] == id.as_str())
                .map(|e| e["kind"].as_str().unwrap_or("").to_string())
                .collect();
            assert_eq!(kinds, ["run_submitted", "verdict"], "{who:?} {host}");
        }
        let receipts = ws.state.join("receipts");
        assert!(
            !receipts.exists() || std::fs::read_dir(&receipts).unwrap().next().is_none(),
            "no receipt for a run that changed nothing"
        );
    }
}

/// The replay carries hostile output: quotes, substitutions, newlines and
/// backslashes that would run code if they ever left their quotes. Run by
/// the host's shell, it prints them and runs nothing; a replay edited by
/// the agent (another text, a command appended) is denied when presented
/// to the hook, and a genuine one presented again is allowed.
#[test]
fn a_replay_runs_nothing_whatever_the_output_holds() {
    for who in identities() {
        let ws = workspace(who);
        let canary = ws.root.path().join("pwned");
        let hostile = format!(
            "it's '$(touch {c})' `touch {c}` \\' '\\'' ; touch {c}; exit 0\n\"$(touch {c})\"\n'; touch {c}; echo '\n",
            c = canary.display()
        );
        ws.write("hostile.txt", &hostile);
        let a = hook(
            &ws,
            "claude-code",
            &claude_event(&ws.dir, "cat hostile.txt"),
        );
        let replay = a["hookSpecificOutput"]["updatedInput"]["command"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(replay.starts_with(": dryrun replay "), "{replay}");
        let o = run_rewrite(&ws, &replay);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(text(&o), hostile, "printed as it was");
        assert!(!canary.exists(), "{who:?}: the replay ran something");

        // Presented to the hook again: the genuine replay is allowed (it
        // is what dryrun renders for that run) ...
        let again = hook(&ws, "claude-code", &claude_event(&ws.dir, &replay));
        assert_eq!(again["hookSpecificOutput"]["permissionDecision"], "allow");
        // ... an edited one is not.
        for forged in [
            format!("{replay}; touch {}", canary.display()),
            replay.replacen("it", "IT", 1),
            replay.replacen("printf %s", &format!("touch {} #", canary.display()), 1),
        ] {
            for (host, event) in [
                ("claude-code", claude_event(&ws.dir, &forged)),
                ("codex", codex_event("PermissionRequest", &ws.dir, &forged)),
            ] {
                let a = hook(&ws, host, &event);
                let out = &a["hookSpecificOutput"];
                let denied =
                    out["permissionDecision"] == "deny" || out["decision"]["behavior"] == "deny";
                assert!(denied, "{who:?} {host}: {forged}: {a}");
            }
        }
        assert!(!canary.exists());
    }
}

/// A long output is capped in the hook's reason: its head and its tail,
/// with a line that says how much was left out between them.
#[test]
fn the_output_in_a_hook_answer_is_capped_to_its_head_and_tail() {
    for who in identities() {
        let ws = workspace(who);
        let a = hook(
            &ws,
            "claude-code",
            &claude_event(&ws.dir, "seq 1 30000; touch notes.txt"),
        );
        let reason = a["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert!(reason.len() < 40 << 10, "{} bytes", reason.len());
        assert_in_order(
            reason,
            &[
                "\n1\n2\n3\n",
                "bytes of output left out here",
                "\n29999\n30000\n",
            ],
        );
    }
}

/// `dryrun promote --replay-output` prints stdout and stderr in the order
/// the command wrote them, whatever reads them.
#[test]
fn promote_replay_output_keeps_the_order() {
    for who in identities() {
        let ws = workspace(who);
        let r = ws.rehearse(&order_cmd(0, &["out/x.txt"]), &["--expect-write", "out/**"]);
        assert_eq!(r.decision(), "promote", "{r:?}");
        let id = run_id(&r);
        // Two writes to stdout in a row are one chunk.
        let streams: Vec<&str> = r.json["rehearsal"]["output_order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["stream"].as_str().unwrap())
            .collect();
        assert_eq!(streams, ["stderr", "stdout", "stderr", "stdout"]);
        let mut c = ws.command();
        c.args(["promote", &id, "--replay-output"]);
        // One pipe for both, as a terminal.
        let (reader, writer) = std::io::pipe().unwrap();
        c.stdout(writer.try_clone().unwrap()).stderr(writer);
        let mut child = c.spawn().unwrap();
        drop(c);
        let mut all = String::new();
        std::io::Read::read_to_string(&mut { reader }, &mut all).unwrap();
        assert!(child.wait().unwrap().success(), "{all}");
        assert_in_order(&all, &IN_ORDER);
    }
}

/// MCP's `execute`, `show` and `wait` return the output in order (and
/// redacted), the exit status, the reasons and what to change.
#[test]
fn mcp_returns_the_output_in_order_with_what_to_change() {
    let py = py_mcp();
    for who in identities() {
        let ws = workspace(who);
        // The server (the engine) runs as the identity under test.
        let prefix = if who == Who::User && is_root() {
            as_test_user_argv()
        } else {
            Vec::new()
        };
        let out = Command::new(&py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doors/mcp_output.py"))
            .arg(bin())
            .arg(&ws.dir)
            .arg(&ws.state)
            .arg(order_cmd(3, &["notes.txt"]))
            .args(prefix)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{who:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        for tool in ["execute", "show", "wait"] {
            let s = &r[tool];
            assert_eq!(s["decision"], "blocked", "{tool}: {s:#}");
            assert_eq!(s["exit_code"], 3, "{tool}");
            assert_in_order(s["output"].as_str().unwrap(), &IN_ORDER);
            assert!(!s.to_string().contains(SECRET));
            let hints = strings(&s["to_change"]);
            assert!(
                hints.iter().any(|h| h.contains("surprise paths")),
                "{tool}: {hints:?}"
            );
            assert!(
                strings(&s["reasons"])
                    .iter()
                    .any(|r| r.contains("notes.txt"))
            );
        }
    }
}

/// The Python client's `Run` has the output in order, the exit status and
/// what to change, against a real daemon, for root's client and for an
/// ordinary user's.
#[test]
fn the_python_client_returns_the_output_in_order_with_what_to_change() {
    use common::daemon::{Daemon, user_workspace};
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python");
    for who in [Who::Root, Who::User] {
        let ws = if who == Who::User {
            user_workspace()
        } else {
            Ws::new(Who::Root)
        };
        ws.write("order.py", ORDER_PY);
        ws.chown_all();
        let program = r#"
import json, sys
from dryrun_client import Client, Envelope, Intent
c = Client(sys.argv[1])
r = c.execute(Envelope(command=sys.argv[3], working_dir=sys.argv[2],
                       intent=Intent(expected_writes=["out/**"])))
again = c.run(r.run_id)
print(json.dumps({"decision": r.decision, "exit_code": r.exit_code, "output": r.output,
                  "to_change": r.to_change, "reasons": r.reasons, "again": again.output}))
"#;
        let mut c = if who == Who::User {
            as_test_user("/usr/bin/python3")
        } else {
            Command::new("/usr/bin/python3")
        };
        let out = c
            .args(["-c", program])
            .arg(&d.socket)
            .arg(&ws.dir)
            .arg(order_cmd(3, &["notes.txt"]))
            .env("PYTHONPATH", &client)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{who:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["decision"], "blocked", "{r:#}");
        assert_eq!(r["exit_code"], 3);
        assert_in_order(r["output"].as_str().unwrap(), &IN_ORDER);
        assert_eq!(r["again"], r["output"]);
        assert!(
            strings(&r["to_change"])
                .iter()
                .any(|h| h.contains("surprise paths")),
            "{r:#}"
        );
    }
}

/// The MCP Python SDK's interpreter (`target/py-mcp`, installed by
/// `.ci/run` or here, cached).
fn py_mcp() -> std::path::PathBuf {
    py_venv_with("mcp", "mcp==2.3.0")
}
