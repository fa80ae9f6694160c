//! `dryrun mcp` with the official MCP Python SDK as the client (installed
//! from the Python package registry into `target/py-mcp`, cached): list
//! tools with their schemas, execute, wait, show, diff, list_runs,
//! promote; a run that needs approval cannot be promoted, and there is no
//! tool that approves.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Value, bin};

fn python() -> PathBuf {
    let venv = std::env::var_os("DRYRUN_TEST_PY_MCP")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/py-mcp"));
    let py = venv.join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import mcp"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(st.success(), "python3 -m venv failed");
        let st = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "mcp==2.3.0"])
            .status()
            .unwrap();
        assert!(st.success(), "pip install mcp failed (.ci/run installs it)");
    }
    py
}

#[test]
fn python_sdk_session_lists_executes_waits_shows_and_promotes() {
    let root = tempfile::Builder::new()
        .prefix("dryrun-mcp-")
        .tempdir_in("/tmp")
        .unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "content\n").unwrap();
    let out = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doors/mcp_session.py"))
        .arg(bin())
        .arg(&ws)
        .arg(root.path().join("state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["server"], "dryrun");
    let tools: Vec<&String> = r["tools"].as_object().unwrap().keys().collect();
    assert_eq!(
        tools,
        [
            "classify",
            "diff",
            "execute",
            "list_runs",
            "promote",
            "show",
            "wait"
        ]
    );
    for (name, t) in r["tools"].as_object().unwrap() {
        assert_eq!(t["input"]["type"], "object", "{name}");
        assert_eq!(
            t["output"]["type"], "object",
            "{name} has a structured result"
        );
        assert!(!name.contains("approve"));
    }
    let ex = &r["tools"]["execute"]["input"];
    assert_eq!(ex["additionalProperties"], false);
    for f in [
        "command",
        "working_dir",
        "expected_writes",
        "forbidden_paths",
        "mode",
        "timeout_s",
    ] {
        assert!(ex["properties"].get(f).is_some(), "execute takes {f}");
    }
    let clean = &r["execute_clean"]["structured"];
    assert_eq!(clean["decision"], "promote");
    assert_eq!(clean["state"], "rehearsed");
    assert!(!ws.join("out").exists() || ws.join("out/b.txt").exists());
    assert_eq!(r["wait"]["structured"]["run_id"], clean["run_id"]);
    assert_eq!(r["show"]["structured"]["stdout"], "done\n");
    assert!(
        r["diff"]["structured"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "out/b.txt" && f["diff"].as_str().unwrap().contains("+hello"))
    );
    assert_eq!(r["list"]["structured"]["runs"].as_array().unwrap().len(), 1);
    assert_eq!(r["promote"]["error"], false);
    assert_eq!(r["promote"]["structured"]["state"], "promoted");
    assert_eq!(
        std::fs::read_to_string(ws.join("out/b.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(r["promote_again"]["error"], true);
    assert_eq!(
        r["execute_risky"]["structured"]["decision"],
        "needs_approval"
    );
    assert_eq!(r["promote_risky"]["error"], true);
    assert!(
        r["promote_risky"]["text"][0]
            .as_str()
            .unwrap()
            .contains("awaiting approval")
    );
    assert_eq!(r["classify"]["structured"]["level"], "critical");
    assert_eq!(r["bad_args"]["error"], true);
}
