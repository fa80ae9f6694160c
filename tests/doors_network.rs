//! Network through every door: the CLI, the daemon's HTTP API, the MCP
//! server and the agent hosts' hook (the `hook:` section of `dryrun.yaml`)
//! each ask for a loopback stand-in registry, by name and by the `npm`
//! preset (the registry the caller's npmrc names), within a system policy
//! that pins the name (`egress.resolve`) and bounds what a run may ask for
//! (`egress.ceiling`). The tool reaches the registry (the stand-in counts
//! the requests, host side) and the run promotes; an entry beyond the
//! ceiling is refused before anything runs, naming the entry and the
//! setting; a name outside the allowlist fails at once (far under the
//! run's timeout) and the record names it. As root and as the
//! unprivileged test user. (The Python client's door is tested by its own
//! pytest suite, `tests/doors_python_client.rs`.)

mod common;
use common::daemon::Daemon;
use common::net::egress;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAME: &str = "registry.test";
const TIMEOUT_S: u64 = 60;

/// A stand-in npm registry on host loopback serving `demo-pkg` metadata
/// for any path (npm asks for `/demo-pkg`); records each request line.
struct Registry {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Registry {
    fn start() -> Registry {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let s = s.clone();
                std::thread::spawn(move || {
                    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut req = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let first = String::from_utf8_lossy(&req)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string();
                    s.lock().unwrap().push(first);
                    let body = format!(
                        "{{\"name\":\"demo-pkg\",\"dist-tags\":{{\"latest\":\"1.0.0\"}},\"versions\":{{\"1.0.0\":{{\"name\":\"demo-pkg\",\"version\":\"1.0.0\",\"dist\":{{\"tarball\":\"http://{NAME}:{port}/demo-pkg/-/demo-pkg-1.0.0.tgz\"}}}}}}}}"
                    );
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Registry { port, seen }
    }

    fn requests(&self) -> usize {
        std::thread::sleep(Duration::from_millis(200));
        self.seen.lock().unwrap().len()
    }

    fn host(&self) -> String {
        format!("{NAME}:{}", self.port)
    }
}

/// A system policy directory (root-owned, 0755, as
/// `DRYRUN_SYSTEM_POLICY_DIR` requires): the stand-in's name pinned to
/// host loopback, and the ceiling: that name on its port, nothing else.
fn system_policy(reg: &Registry) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-net-policy-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = d.path().join("egress.yaml");
    std::fs::write(
        &f,
        format!(
            "egress:\n  resolve: ['{h}:127.0.0.1']\n  ceiling: ['{h}']\n",
            h = reg.host()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    d
}

/// The command the doors run: npm asks the registry its npmrc names for
/// demo-pkg's version and writes it down (a change to promote).
const NPM_VIEW: &str = "npm view demo-pkg version --cache /tmp/npm-cache --update-notifier=false --no-audit --no-fund > version.txt";

/// A workspace whose project npmrc names the stand-in (what the `npm`
/// preset reads, as the user the command runs as).
fn npm_workspace(who: Who, reg: &Registry) -> Ws {
    let ws = Ws::new(who);
    ws.write(".npmrc", &format!("registry=http://{}/\n", reg.host()));
    ws
}

fn assert_reached_and_promoted(who: Who, r: &Value, reg: &Registry, before: usize) {
    assert_eq!(
        r["verdict"]["decision"], "promote",
        "{who:?}: {}",
        r["verdict"]
    );
    assert_eq!(
        r["rehearsal"]["exit_code"], 0,
        "{who:?}: {}",
        r["rehearsal"]
    );
    assert!(reg.requests() > before, "{who:?}: the registry saw nothing");
    let e = r["rehearsal"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        e.iter()
            .any(|x| x["name"] == NAME && x["allowed"] == true && x["how"] == "proxy"),
        "{who:?}: {e:?}"
    );
}

fn cli_execute(ws: &Ws, policy: &Path, args: &[&str]) -> (Run, std::process::Output) {
    let out = ws
        .command()
        .env("DRYRUN_SYSTEM_POLICY_DIR", policy)
        .arg("execute")
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    (to_run(out.clone()), out)
}

#[test]
fn the_cli_reaches_the_registry_by_name_and_by_preset() {
    if !require_tool("npm", "npm") {
        return;
    }
    let reg = Registry::start();
    let policy = system_policy(&reg);
    for who in identities() {
        for entry in ["npm".to_string(), reg.host()] {
            let ws = npm_workspace(who, &reg);
            let before = reg.requests();
            let (r, _) = cli_execute(
                &ws,
                policy.path(),
                &[
                    "--command",
                    NPM_VIEW,
                    "--allow-net",
                    &entry,
                    "--expect-write",
                    "version.txt",
                    "--timeout",
                    "120",
                ],
            );
            assert_ran(who, &r);
            assert_reached_and_promoted(who, &r.json, &reg, before);
            assert_eq!(r.json["intent"]["network"][0], reg.host(), "{entry}");
            if entry == "npm" {
                let p = r.json["intent"]["network_presets"][0].as_str().unwrap();
                assert!(p.contains("registry= in the project's .npmrc"), "{p}");
            }
            let c = r.change("version.txt").unwrap();
            assert_eq!(c["kind"], "created");
        }
    }
}

#[test]
fn an_entry_beyond_the_ceiling_is_refused_naming_it_and_the_setting() {
    let reg = Registry::start();
    let policy = system_policy(&reg);
    for who in identities() {
        let ws = npm_workspace(who, &reg);
        // A name, the right name on another port, and a preset whose
        // configuration names a host beyond the ceiling.
        for (entry, named) in [
            ("beyond.test", "beyond.test"),
            (&*format!("{NAME}:1"), &*format!("{NAME}:1")),
        ] {
            let (r, out) = cli_execute(
                &ws,
                policy.path(),
                &["--command", "true", "--allow-net", entry],
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{who:?} {entry}: {err} {r:?}");
            assert!(
                err.contains(named)
                    && err.contains("egress.ceiling")
                    && err.contains("intent.network.allow"),
                "{who:?}: {err}"
            );
        }
        ws.write(".npmrc", "registry=http://elsewhere.test/\n");
        let (_, out) = cli_execute(
            &ws,
            policy.path(),
            &["--command", "true", "--allow-net", "npm"],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{who:?}: {err}");
        assert!(
            err.contains("preset npm")
                && err.contains("elsewhere.test")
                && err.contains("egress.ceiling"),
            "{who:?}: {err}"
        );
        assert_eq!(reg.requests(), 0, "nothing ran");
    }
}

/// Presets are read as data (the environment, the project's and the
/// user's npmrc), never by running npm; the system policy's
/// `egress.presets` wins over them; a preset nothing configures is refused
/// at once, naming the preset and that setting; a symlinked npmrc is not
/// read. The stand-in sees no request: nothing ran.
#[test]
fn presets_are_read_as_data_and_the_system_policy_wins() {
    let reg = Registry::start();
    let policy = system_policy(&reg);
    let with_presets = system_policy(&reg);
    let f = with_presets.path().join("egress.yaml");
    let mut text = std::fs::read_to_string(&f).unwrap();
    text.push_str(&format!("  presets:\n    npm: ['{}']\n", reg.host()));
    std::fs::write(&f, text).unwrap();
    let home = tempfile::Builder::new()
        .prefix("dryrun-net-home-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |ws: &Ws, policy: &Path, env: &[(&str, String)]| {
        let mut c = ws.command();
        c.env("DRYRUN_SYSTEM_POLICY_DIR", policy)
            .env("HOME", home.path())
            .env_remove("npm_config_registry")
            .env_remove("NPM_CONFIG_REGISTRY");
        for (k, v) in env {
            c.env(k, v);
        }
        let t0 = Instant::now();
        let out = c
            .args([
                "execute",
                "--json",
                "--command",
                "true",
                "--allow-net",
                "npm",
            ])
            .output()
            .unwrap();
        (out, t0.elapsed())
    };
    for who in identities() {
        let ws = Ws::new(who);
        // Nothing configures it: refused fast, naming the setting.
        let (out, took) = run(&ws, policy.path(), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{who:?}: {err}");
        assert!(
            err.contains("preset npm") && err.contains("egress.presets.npm"),
            "{who:?}: {err}"
        );
        assert!(took < Duration::from_secs(5), "{who:?}: {took:?}");
        // The caller's environment.
        let (out, _) = run(
            &ws,
            policy.path(),
            &[("npm_config_registry", format!("http://{}/", reg.host()))],
        );
        let r = to_run(out);
        assert_eq!(r.json["intent"]["network"][0], reg.host(), "{who:?}");
        let note = r.json["intent"]["network_presets"][0].as_str().unwrap();
        assert!(note.contains("npm_config_registry"), "{note}");
        // The system policy wins over the project's npmrc.
        ws.write(".npmrc", "registry=http://elsewhere.test/\n");
        let (out, _) = run(&ws, with_presets.path(), &[]);
        let r = to_run(out);
        assert_eq!(r.json["intent"]["network"][0], reg.host(), "{who:?}");
        let note = r.json["intent"]["network_presets"][0].as_str().unwrap();
        assert!(note.contains("egress.presets"), "{note}");
        // A symlinked npmrc is not read.
        std::fs::remove_file(ws.dir.join(".npmrc")).unwrap();
        ws.write("npmrc", &format!("registry=http://{}/\n", reg.host()));
        std::os::unix::fs::symlink("npmrc", ws.dir.join(".npmrc")).unwrap();
        let (out, _) = run(&ws, policy.path(), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{who:?}: {err}");
        assert!(err.contains("is a symlink"), "{who:?}: {err}");
        assert_eq!(reg.requests(), 0, "nothing ran");
    }
}

#[test]
fn a_name_outside_the_allowlist_fails_fast_and_is_named() {
    if !require_tool("npm", "npm") {
        return;
    }
    let reg = Registry::start();
    let policy = system_policy(&reg);
    for who in identities() {
        let ws = npm_workspace(who, &reg);
        let cmd = format!(
            "npm view demo-pkg version --registry http://unlisted.test:{p}/ --cache /tmp/npm-cache --update-notifier=false; \
             curl -sS http://unlisted-too.test:{p}/x; true",
            p = reg.port
        );
        let t0 = Instant::now();
        let (r, _) = cli_execute(
            &ws,
            policy.path(),
            &[
                "--command",
                &cmd,
                "--allow-net",
                "npm",
                "--timeout",
                &TIMEOUT_S.to_string(),
            ],
        );
        let took = t0.elapsed();
        assert_ran(who, &r);
        assert!(
            took < Duration::from_secs(TIMEOUT_S / 4),
            "{who:?}: {took:?} (the run's timeout is {TIMEOUT_S} s)"
        );
        assert!(r.limits_hit().is_empty(), "{who:?}: {:?}", r.limits_hit());
        let e = egress(&r);
        for name in ["unlisted.test", "unlisted-too.test"] {
            let x = e
                .iter()
                .find(|x| x["name"] == name)
                .unwrap_or_else(|| panic!("{who:?}: {name} not named: {e:?}"));
            assert_eq!(x["allowed"], false, "{x}");
        }
        assert_eq!(r.decision(), "blocked", "{who:?}");
        assert!(
            r.reasons().iter().any(|x| x.contains("unlisted.test")),
            "{:?}",
            r.reasons()
        );
        assert_eq!(reg.requests(), 0, "{who:?}: the registry was reached");
    }
}

#[test]
fn the_daemon_api_takes_network_by_name_and_preset_within_the_ceiling() {
    if !require_tool("npm", "npm") {
        return;
    }
    let reg = Registry::start();
    let policy = system_policy(&reg);
    let d = Daemon::start_env(
        &[],
        &[("DRYRUN_SYSTEM_POLICY_DIR", policy.path().to_str().unwrap())],
    );
    for who in identities() {
        for entry in [
            serde_json::json!(["npm"]),
            serde_json::json!({"allow": [reg.host()]}),
        ] {
            let ws = if who == Who::User {
                let ws = common::daemon::user_workspace();
                ws.write(".npmrc", &format!("registry=http://{}/\n", reg.host()));
                ws
            } else {
                npm_workspace(who, &reg)
            };
            let before = reg.requests();
            let body = serde_json::json!({
                "command": NPM_VIEW,
                "working_dir": ws.dir,
                "intent": {"expected_writes": ["version.txt"], "network": entry},
                "limits": {"timeout_s": 120},
            });
            let (code, r) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body.to_string()));
            assert_eq!(code, 200, "{who:?}: {r}\n{}", d.log_text());
            assert_reached_and_promoted(who, &r, &reg, before);
        }
        let ws = npm_workspace(who, &reg);
        let body = serde_json::json!({
            "command": "true", "working_dir": ws.dir,
            "intent": {"network": ["beyond.test"]},
        });
        let (code, r) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body.to_string()));
        assert_eq!(code, 400, "{who:?}: {r}");
        let m = r["error"]["message"].as_str().unwrap_or_default();
        assert!(
            m.contains("beyond.test") && m.contains("egress.ceiling"),
            "{m}"
        );
    }
}

/// `dryrun mcp` on stdio, one `tools/call execute`, the structured result.
fn mcp_execute(who: Who, ws: &Ws, policy: &Path, args: Value) -> Value {
    let mut c = if who == Who::User {
        as_test_user(bin())
    } else {
        Command::new(bin())
    };
    let mut ch = c
        .arg("mcp")
        .env("DRYRUN_LOCAL", "1")
        .env("DRYRUN_STATE_DIR", &ws.state)
        .env("DRYRUN_SYSTEM_POLICY_DIR", policy)
        .env_remove("DRYRUN_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = ch.stdin.take().unwrap();
    for m in [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "doors-network", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "execute", "arguments": args}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    let mut answer = Value::Null;
    for line in BufReader::new(ch.stdout.take().unwrap()).lines() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap_or(Value::Null);
        if v["id"] == 2 {
            answer = v;
            break;
        }
    }
    drop(stdin);
    let _ = ch.wait();
    answer["result"].clone()
}

#[test]
fn mcp_execute_takes_network_by_name_and_preset_and_refuses_beyond_the_ceiling() {
    if !require_tool("npm", "npm") {
        return;
    }
    let reg = Registry::start();
    let policy = system_policy(&reg);
    for who in identities() {
        for entry in ["npm".to_string(), reg.host()] {
            let ws = npm_workspace(who, &reg);
            let before = reg.requests();
            let r = mcp_execute(
                who,
                &ws,
                policy.path(),
                serde_json::json!({"command": NPM_VIEW, "working_dir": ws.dir,
                    "expected_writes": ["version.txt"], "network": [entry], "timeout_s": 120}),
            );
            let s = &r["structuredContent"];
            assert_eq!(s["decision"], "promote", "{who:?} {entry}: {r}");
            assert_eq!(s["exit_code"], 0, "{r}");
            assert!(reg.requests() > before, "{who:?}: the registry saw nothing");
        }
        let ws = npm_workspace(who, &reg);
        let r = mcp_execute(
            who,
            &ws,
            policy.path(),
            serde_json::json!({"command": "true", "working_dir": ws.dir, "network": ["beyond.test"]}),
        );
        assert_eq!(r["isError"], true, "{r}");
        let text = r.to_string();
        assert!(
            text.contains("beyond.test") && text.contains("egress.ceiling"),
            "{text}"
        );
    }
}

#[test]
fn the_hook_section_takes_network_by_name_and_preset() {
    if !require_tool("npm", "npm") {
        return;
    }
    let reg = Registry::start();
    let policy = system_policy(&reg);
    for who in identities() {
        for (network, expect_allow) in [
            ("[npm]".to_string(), true),
            (format!("{{allow: ['{}']}}", reg.host()), true),
            ("[beyond.test]".to_string(), false),
        ] {
            let ws = npm_workspace(who, &reg);
            ws.write("dryrun.yaml", &format!("hook:\n  network: {network}\n"));
            let before = reg.requests();
            let event = common::hook::claude_event(&ws.dir, NPM_VIEW);
            let mut c = if who == Who::User {
                as_test_user(bin())
            } else {
                Command::new(bin())
            };
            c.args(["hook", "claude-code"])
                .env("DRYRUN_LOCAL", "1")
                .env("DRYRUN_STATE_DIR", &ws.state)
                .env("DRYRUN_SYSTEM_POLICY_DIR", policy.path())
                .env_remove("DRYRUN_SOCKET")
                .env_remove("CLAUDE_PROJECT_DIR");
            let out = output_with_stdin(&mut c, event.to_string().as_bytes());
            if expect_allow {
                let a = common::hook::answer(&out);
                let o = &a["hookSpecificOutput"];
                assert_eq!(o["permissionDecision"], "allow", "{who:?} {network}: {a}");
                assert!(
                    reg.requests() > before,
                    "{who:?} {network}: registry untouched"
                );
            } else {
                // Claude Code's blocking answer: exit 2, the reason on stderr.
                let why = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(2), "{who:?}: {why}");
                assert!(
                    why.contains("beyond.test") && why.contains("egress.ceiling"),
                    "{why}"
                );
                assert_eq!(reg.requests(), before);
            }
        }
    }
}
