//! The agent-host doors with the real hosts: Claude Code and Codex, both
//! installed from the npm registry (cached under `target/npm-hosts`),
//! driven offline by a scripted stand-in for the model API on loopback
//! (`tests/doors/scripted_model.py`) whose first turn asks for one shell
//! command. The host runs `dryrun hook ...`; the tests look at the real
//! workspace, the run records, and what the host sent back to the model.
//!
//! Nothing here skips: a host that cannot be installed fails the test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Value, bin, tool};

fn npm_dir() -> PathBuf {
    std::env::var_os("DRYRUN_TEST_NPM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/npm-hosts"))
}

/// Install both hosts once (cached between runs).
fn hosts() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = npm_dir();
        let bins = dir.join("node_modules/.bin");
        if !bins.join("claude").exists() || !bins.join("codex").exists() {
            std::fs::create_dir_all(&dir).unwrap();
            let st = Command::new(tool("npm", "npm"))
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    dir.to_str().unwrap(),
                    // The versions the hooks were checked against.
                    "@anthropic-ai/claude-code@2.1.197",
                    "@openai/codex@0.169.0",
                ])
                .status()
                .expect("npm is needed to install the agent hosts (.ci/run installs it)");
            assert!(st.success(), "npm install of the agent hosts failed");
        }
        for h in ["claude", "codex"] {
            let out = Command::new(bins.join(h))
                .arg("--version")
                .output()
                .unwrap();
            assert!(out.status.success(), "{h} --version failed");
        }
        bins
    })
}

/// The scripted model: a Python stdlib HTTP server on a free loopback port.
struct Model {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Model {
    fn start(dir: &Path, command: &str) -> Model {
        Self::start_script(dir, &[command])
    }

    /// A model that asks for `commands`, one per turn, each after the
    /// previous one's result.
    fn start_script(dir: &Path, commands: &[&str]) -> Model {
        let script = dir.join("script.json");
        std::fs::write(
            &script,
            serde_json::json!({"commands": commands}).to_string(),
        )
        .unwrap();
        let port_file = dir.join("port");
        let log = dir.join("model.jsonl");
        let child = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doors/scripted_model.py"))
            .arg(&port_file)
            .arg(&script)
            .arg(&log)
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let t = Instant::now();
        let port = loop {
            if let Ok(s) = std::fs::read_to_string(&port_file) {
                break s.trim().parse().unwrap();
            }
            assert!(t.elapsed() < Duration::from_secs(10), "model did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        Model { child, port, log }
    }

    /// Every request body the host sent.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["body"].clone())
            .collect()
    }

    /// What the host reported back as the tool's result (Anthropic
    /// `tool_result` blocks or Responses `function_call_output` items).
    fn tool_results(&self) -> Vec<String> {
        let mut out = Vec::new();
        for b in self.requests() {
            for m in b["messages"].as_array().into_iter().flatten() {
                for c in m["content"].as_array().into_iter().flatten() {
                    if c["type"] == "tool_result" {
                        out.push(match &c["content"] {
                            Value::String(s) => s.clone(),
                            v => v.to_string(),
                        });
                    }
                }
            }
            for i in b["input"].as_array().into_iter().flatten() {
                if i["type"] == "function_call_output" {
                    out.push(match &i["output"] {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    });
                }
            }
        }
        out.dedup();
        out
    }

    /// The tool results of the host's last request (the whole
    /// conversation), in order, with whether the host marked each an error.
    fn transcript(&self) -> Vec<(String, bool)> {
        let Some(b) = self.requests().into_iter().rev().find(|b| !b.is_null()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for m in b["messages"].as_array().into_iter().flatten() {
            for c in m["content"].as_array().into_iter().flatten() {
                if c["type"] == "tool_result" {
                    let text = match &c["content"] {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    };
                    out.push((text, c["is_error"] == true));
                }
            }
        }
        for i in b["input"].as_array().into_iter().flatten() {
            if i["type"] == "function_call_output" {
                out.push((i["output"].as_str().unwrap_or("").to_string(), false));
            }
        }
        out
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Scene {
    _root: tempfile::TempDir,
    dir: PathBuf,
    ws: PathBuf,
    state: PathBuf,
    calls: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let root = tempfile::Builder::new()
            .prefix("dryrun-doors-")
            .tempdir_in("/tmp")
            .unwrap();
        let dir = root.path().to_path_buf();
        let ws = dir.join("ws");
        let state = dir.join("state");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "content-of-a\n").unwrap();
        Scene {
            calls: dir.join("hook-calls"),
            _root: root,
            dir,
            ws,
            state,
        }
    }

    /// The hook command as a host runs it (counting its invocations).
    fn hook_command(&self, host: &str) -> String {
        // A scene with its own system policy (`policy.d`) hands it to dryrun.
        let policy = self.dir.join("policy.d");
        let system = if policy.is_dir() {
            format!("DRYRUN_SYSTEM_POLICY_DIR={} ", policy.display())
        } else {
            String::new()
        };
        format!(
            "echo x >> {calls}; {system}DRYRUN_LOCAL=1 DRYRUN_STATE_DIR={state} exec {bin} hook {host}",
            calls = self.calls.display(),
            state = self.state.display(),
            bin = bin().display()
        )
    }

    fn hook_calls(&self) -> usize {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .count()
    }

    fn dryrun(&self) -> Command {
        let mut c = Command::new(bin());
        c.env("DRYRUN_LOCAL", "1")
            .env("DRYRUN_STATE_DIR", &self.state)
            .current_dir(&self.ws);
        c
    }

    fn runs(&self) -> Vec<Value> {
        let out = self.dryrun().args(["runs", "--json"]).output().unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn only_run(&self) -> Value {
        let runs = self.runs();
        assert_eq!(runs.len(), 1, "one rehearsal: {runs:#?}");
        runs[0].clone()
    }

    fn claude(&self, model: &Model) -> Value {
        let settings = self.dir.join("claude-settings.json");
        std::fs::write(
            &settings,
            serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": self.hook_command("claude-code"), "timeout": 120}
            ]}]}})
            .to_string(),
        )
        .unwrap();
        let home = self.dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let out = Command::new(hosts().join("claude"))
            .args(["-p", "do the task", "--output-format", "json"])
            .arg("--settings")
            .arg(&settings)
            .args(["--model", "claude-sonnet-4-5"])
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", &home)
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", model.port),
            )
            .env("ANTHROPIC_API_KEY", "sk-scripted")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "claude failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("claude -p --output-format json")
    }

    fn codex(&self, model: &Model) -> String {
        let home = self.dir.join("codex-home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("config.toml"),
            format!(
                r#"model = "gpt-5"
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.scripted]
name = "scripted"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"

[[hooks.PreToolUse]]
matcher = "Bash"

[[hooks.PreToolUse.hooks]]
type = "command"
command = '{cmd}'
timeout = 120
"#,
                port = model.port,
                cmd = self.hook_command("codex")
            ),
        )
        .unwrap();
        let out = Command::new(hosts().join("codex"))
            .args([
                "exec",
                "--dangerously-bypass-hook-trust",
                "--skip-git-repo-check",
                "do the task",
            ])
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", &home)
            .env("CODEX_HOME", &home)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "codex failed: {text}");
        text
    }
}

fn tree(ws: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = walkdir::WalkDir::new(ws)
        .min_depth(1)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.path().strip_prefix(ws).unwrap().display().to_string(),
                std::fs::read_to_string(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

const CLEAN: &str = "mkdir -p out && echo hello > out/b.txt && echo done";
const SURPRISING: &str = "echo hello > out/b.txt; cat a.txt > notes.txt; echo done";
/// Needs a person's approval (`fs.shred`) and calls nothing a stub answers:
/// a command with stubbed calls is denied, never asked (tests/doors_hook.rs).
const RISKY: &str = "shred -n 0 -z out/keep.txt";

/// The file RISKY overwrites.
fn keep_file(s: &Scene) {
    std::fs::write(s.ws.join("out/keep.txt"), "keep\n").unwrap();
}

fn scoped(s: &Scene) {
    // The workspace's hook intent: the agent may write out/ only.
    std::fs::create_dir_all(s.ws.join("out")).unwrap();
    std::fs::write(
        s.ws.join("dryrun.yaml"),
        "hook:\n  expected_writes: [\"out/**\"]\n  await_approval_s: 2\n",
    )
    .unwrap();
}

#[test]
fn claude_code_clean_command_applies_exactly_the_reviewed_change_set() {
    let s = Scene::new();
    scoped(&s);
    let before = tree(&s.ws);
    let model = Model::start(&s.dir, CLEAN);
    let result = s.claude(&model);
    assert_eq!(result["permission_denials"], serde_json::json!([]));
    let run = s.only_run();
    assert_eq!(run["state"], "promoted", "{run:#?}");
    let mut expected = before.clone();
    expected.push(("out/b.txt".into(), "hello\n".into()));
    expected.sort();
    assert_eq!(tree(&s.ws), expected);
    // The model saw the rehearsal's output, after dryrun's one-line note.
    let results = model.tool_results();
    assert!(
        results.iter().any(|r| r.ends_with("done")
            && r.contains("applied the reviewed change set")
            && r.contains(run["run_id"].as_str().unwrap())),
        "{results:#?}"
    );
    // Claude Code ran the rewritten command without hooking it again.
    assert_eq!(s.hook_calls(), 1);
}

#[test]
fn claude_code_surprising_command_is_denied_with_its_evidence() {
    let s = Scene::new();
    scoped(&s);
    let before = tree(&s.ws);
    let model = Model::start(&s.dir, SURPRISING);
    let result = s.claude(&model);
    assert_eq!(result["permission_denials"].as_array().unwrap().len(), 1);
    assert_eq!(tree(&s.ws), before, "nothing reached the workspace");
    let run = s.only_run();
    assert_eq!(run["verdict"]["decision"], "blocked");
    let results = model.tool_results();
    assert!(
        results
            .iter()
            .any(|r| r.contains("surprise paths: notes.txt")
                && r.contains("[intent.expected_writes]")
                && !r.contains("content-of-a")),
        "{results:#?}"
    );
}

#[test]
fn claude_code_risky_command_is_asked_and_the_yes_promotes_once() {
    let s = Scene::new();
    scoped(&s);
    keep_file(&s);
    let model = Model::start(&s.dir, RISKY);
    let result = s.claude(&model);
    // Non-interactive (-p), the host cannot show its prompt: the ask ends
    // as a permission denial that records the input a yes would run.
    let denials = result["permission_denials"].as_array().unwrap();
    assert_eq!(denials.len(), 1, "{result:#?}");
    let run = s.only_run();
    let id = run["run_id"].as_str().unwrap();
    assert_eq!(run["state"], "awaiting_approval");
    let results = model.tool_results();
    assert!(
        results.iter().any(|r| r.contains("needs your approval")
            && r.contains("shred -n 0 -z out/keep.txt")
            && r.contains("[fs.shred]")
            && r.contains(id)),
        "{results:#?}"
    );
    let yes = denials[0]["tool_input"]["command"].as_str().unwrap();
    assert!(yes.contains(&format!(
        "promote {id} --replay-output --host-prompt-token "
    )));
    // The person's yes: the host runs exactly that input.
    let out = Command::new("bash")
        .args(["-c", yes])
        .current_dir(&s.ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = s.only_run();
    assert_eq!(run["state"], "promoted");
    let approvals = run["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0]["authenticated_by"], "agent_host_prompt");
    // Single use: the same command again is refused.
    let again = Command::new("bash")
        .args(["-c", yes])
        .current_dir(&s.ws)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(4));
    let journal = std::fs::read_to_string(s.state.join("journal.jsonl")).unwrap();
    assert!(journal.contains("\"authenticated_by\":\"agent_host_prompt\""));
    assert!(journal.contains("host_prompt_grant"));
}

#[test]
fn codex_clean_command_applies_exactly_the_reviewed_change_set() {
    let s = Scene::new();
    scoped(&s);
    let before = tree(&s.ws);
    let model = Model::start(&s.dir, CLEAN);
    let _ = s.codex(&model);
    let run = s.only_run();
    assert_eq!(run["state"], "promoted", "{run:#?}");
    let mut expected = before.clone();
    expected.push(("out/b.txt".into(), "hello\n".into()));
    expected.sort();
    assert_eq!(tree(&s.ws), expected);
    let results = model.tool_results();
    assert!(results.iter().any(|r| r.contains("done")), "{results:#?}");
    assert_eq!(s.hook_calls(), 1, "Codex does not hook the rewrite again");
}

#[test]
fn codex_surprising_command_is_denied_with_its_evidence() {
    let s = Scene::new();
    scoped(&s);
    let before = tree(&s.ws);
    let model = Model::start(&s.dir, SURPRISING);
    let _ = s.codex(&model);
    assert_eq!(tree(&s.ws), before);
    let run = s.only_run();
    assert_eq!(run["verdict"]["decision"], "blocked");
    let results = model.tool_results();
    assert!(
        results
            .iter()
            .any(|r| r.contains("surprise paths: notes.txt")),
        "{results:#?}"
    );
}

#[test]
fn codex_risky_command_waits_for_a_reviewer_and_applies_nothing_without_one() {
    let s = Scene::new();
    scoped(&s);
    keep_file(&s);
    let before = tree(&s.ws);
    let model = Model::start(&s.dir, RISKY);
    let _ = s.codex(&model);
    assert_eq!(tree(&s.ws), before);
    let run = s.only_run();
    assert_eq!(run["state"], "awaiting_approval");
    let results = model.tool_results();
    assert!(
        results
            .iter()
            .any(|r| r.contains("no reviewer approved run") && r.contains("nothing was applied")),
        "{results:#?}"
    );
}

/// A small task's loop: run the tests (they fail), fix the code, run them
/// again (they pass). The tests print a header on stdout, then unittest's
/// report on stderr.
const TESTS: &str = "echo '== running tests =='; /usr/bin/python3 -B -m unittest -v test_calc";
const FIX: &str = "sed -i 's/a - b/a + b/' calc.py";

fn calc_project(s: &Scene) {
    std::fs::write(s.ws.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        s.ws.join("test_calc.py"),
        "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
    )
    .unwrap();
}

fn in_order(text: &str, pieces: &[&str]) -> bool {
    let mut at = 0;
    pieces.iter().all(|p| match text[at..].find(p) {
        Some(i) => {
            at += i + p.len();
            true
        }
        None => false,
    })
}

/// What the model received for the three commands: the failing tests'
/// real report (the assertion, in order after the header), the fix
/// applied, the passing tests' report with no dryrun line at all (a run
/// that changed nothing is answered by its output alone).
fn assert_the_model_saw_the_tests(s: &Scene, model: &Model) {
    let t = model.transcript();
    assert_eq!(t.len(), 3, "{t:#?}");
    assert!(
        in_order(
            &t[0].0,
            &[
                "== running tests ==",
                "AssertionError: -1 != 3",
                "FAILED (failures=1)"
            ]
        ),
        "{t:#?}"
    );
    assert!(t[1].0.contains("applied the reviewed change set"), "{t:#?}");
    assert!(
        in_order(
            &t[2].0,
            &["== running tests ==", "test_add", "Ran 1 test", "OK"]
        ),
        "{t:#?}"
    );
    assert!(!t[2].0.contains("dryrun"), "{t:#?}");
    assert!(!t[2].1, "a passing run is no error: {t:#?}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    let runs = s.runs();
    assert_eq!(runs.len(), 3, "{runs:#?}");
    // Newest first: the passing run changed nothing and needs no receipt.
    assert_eq!(runs[0]["state"], "rehearsed", "{runs:#?}");
    assert_eq!(runs[0]["receipt"], Value::Null);
    assert_eq!(runs[1]["state"], "promoted");
}

#[test]
fn claude_code_transcript_shows_the_failing_and_the_passing_tests_output() {
    let s = Scene::new();
    calc_project(&s);
    let model = Model::start_script(&s.dir, &[TESTS, FIX, TESTS]);
    let _ = s.claude(&model);
    assert_the_model_saw_the_tests(&s, &model);
}

#[test]
fn codex_transcript_shows_the_failing_and_the_passing_tests_output() {
    let s = Scene::new();
    calc_project(&s);
    let model = Model::start_script(&s.dir, &[TESTS, FIX, TESTS]);
    let _ = s.codex(&model);
    assert_the_model_saw_the_tests(&s, &model);
}

/// A whole small task through the host: install the project's dependency
/// from a loopback stand-in registry (the hook's `network:` names it; the
/// system policy pins the name to loopback), run the tests (they fail),
/// fix the code, run them again (they pass), commit. The model receives
/// every command's real output; nothing waits for a person; the real
/// workspace ends as the live run would leave it.
struct TaskRegistry {
    server: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for TaskRegistry {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The stand-in registry: a static server for `leftpad-1.0.0.tgz` (made
/// here with `npm pack`), its requests logged; the project, its lockfile
/// naming the tarball with its integrity, a git repository; the system
/// policy pinning `registry.test` to loopback.
fn task_project(s: &Scene) -> TaskRegistry {
    let pkg = s.dir.join("pkg");
    let served = s.dir.join("served/leftpad/-");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::create_dir_all(&served).unwrap();
    std::fs::write(
        pkg.join("package.json"),
        r#"{"name":"leftpad","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(
        pkg.join("index.js"),
        "module.exports = (s, n) => String(s).padStart(n);\n",
    )
    .unwrap();
    sh(
        &pkg,
        &format!(
            "npm pack --silent --pack-destination {} >/dev/null",
            served.display()
        ),
    );
    let tgz = served.join("leftpad-1.0.0.tgz");
    let integrity = String::from_utf8(
        Command::new("python3")
            .args([
                "-c",
                "import base64,hashlib,sys; print('sha512-' + base64.b64encode(hashlib.sha512(open(sys.argv[1],'rb').read()).digest()).decode())",
            ])
            .arg(&tgz)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let port_probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = port_probe.local_addr().unwrap().port();
    drop(port_probe);
    let log = s.dir.join("registry.log");
    let server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--directory")
        .arg(s.dir.join("served"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "registry did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let host = format!("registry.test:{port}");
    let policy = s.dir.join("policy.d");
    std::fs::create_dir_all(&policy).unwrap();
    std::fs::write(
        policy.join("egress.yaml"),
        format!("egress:\n  resolve: ['{host}:127.0.0.1']\n  ceiling: ['{host}']\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = &s.ws;
    std::fs::remove_file(ws.join("a.txt")).unwrap();
    std::fs::write(
        ws.join("package.json"),
        r#"{"name":"calc","version":"1.0.0","scripts":{"test":"node test.js"},"dependencies":{"leftpad":"1.0.0"}}"#,
    )
    .unwrap();
    std::fs::write(
        ws.join("package-lock.json"),
        format!(
            r#"{{"name":"calc","version":"1.0.0","lockfileVersion":3,"requires":true,"packages":{{"":{{"name":"calc","version":"1.0.0","dependencies":{{"leftpad":"1.0.0"}}}},"node_modules/leftpad":{{"version":"1.0.0","resolved":"http://{host}/leftpad/-/leftpad-1.0.0.tgz","integrity":"{}"}}}}}}"#,
            integrity.trim()
        ),
    )
    .unwrap();
    std::fs::write(
        ws.join(".npmrc"),
        format!("registry=http://{host}/\nupdate-notifier=false\naudit=false\nfund=false\n"),
    )
    .unwrap();
    std::fs::write(ws.join(".gitignore"), "node_modules/\n").unwrap();
    std::fs::write(ws.join("calc.js"), "exports.add = (a, b) => a - b;\n").unwrap();
    std::fs::write(
        ws.join("test.js"),
        "const pad = require('leftpad');\nconst { add } = require('./calc');\nconst got = add(1, 2);\nconsole.log(pad('add(1, 2) = ' + got, 16));\nif (got !== 3) { console.error('FAIL: expected 3'); process.exit(1); }\nconsole.log('PASS');\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("dryrun.yaml"),
        format!("hook:\n  network: ['{host}']\n"),
    )
    .unwrap();
    sh(
        ws,
        "git init -q -b main && git config user.name 'Task Tester' && git config user.email tester@example.test && git add -A && git commit -q -m init",
    );
    TaskRegistry { server, port, log }
}

const TASK: &[&str] = &[
    "npm ci",
    "npm test",
    "sed -i 's/a - b/a + b/' calc.js",
    "npm test",
    "git add calc.js && git commit -q -m 'calc: add adds' && git log --oneline -1",
];

fn assert_the_task_went_through(s: &Scene, model: &Model, reg: &TaskRegistry) {
    let t = model.transcript();
    assert_eq!(t.len(), TASK.len(), "{t:#?}");
    let served = std::fs::read_to_string(&reg.log).unwrap_or_default();
    assert!(
        served.contains("GET /leftpad/-/leftpad-1.0.0.tgz"),
        "the stand-in registry (port {}) served nothing: {served}",
        reg.port
    );
    assert!(t[0].0.contains("added 1 package"), "{t:#?}");
    assert!(
        in_order(&t[1].0, &["add(1, 2) = -1", "FAIL: expected 3"]),
        "{t:#?}"
    );
    assert!(t[2].0.contains("applied the reviewed change set"), "{t:#?}");
    assert!(in_order(&t[3].0, &["add(1, 2) = 3", "PASS"]), "{t:#?}");
    assert!(t[4].0.contains("calc: add adds"), "{t:#?}");
    // The real workspace: the dependency installed, the fix committed.
    assert!(s.ws.join("node_modules/leftpad/package.json").is_file());
    let log = Command::new("git")
        .args(["log", "--format=%s %an"])
        .current_dir(&s.ws)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "calc: add adds Task Tester\ninit Task Tester\n"
    );
    // Nothing waits for a person.
    let runs = s.runs();
    assert!(
        runs.iter().all(|r| r["state"] != "needs_approval"),
        "{runs:#?}"
    );
}

#[test]
fn claude_code_does_a_whole_task_with_a_dependency_from_a_loopback_registry() {
    let s = Scene::new();
    let reg = task_project(&s);
    let model = Model::start_script(&s.dir, TASK);
    let _ = s.claude(&model);
    assert_the_task_went_through(&s, &model, &reg);
}

#[test]
fn codex_does_a_whole_task_with_a_dependency_from_a_loopback_registry() {
    let s = Scene::new();
    let reg = task_project(&s);
    let model = Model::start_script(&s.dir, TASK);
    let _ = s.codex(&model);
    assert_the_task_went_through(&s, &model, &reg);
}
