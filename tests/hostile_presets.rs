//! A hostile agent against network presets and the ceiling. Presets are
//! read from the tool's configuration for the user the command runs as,
//! host side, before the sandbox exists: the workspace is the agent's, so
//! nothing in it may run there, and whatever the configuration names must
//! meet `egress.ceiling` (refused fast, named). A loopback listener on the
//! host counts every connection: it must accept none. As root and as the
//! unprivileged test user, through the CLI and the daemon's HTTP API.

mod common;
use common::daemon::Daemon;
use common::*;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const NAME: &str = "registry.test";

/// A host loopback listener counting the connections it accepts.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Listener {
    fn start() -> Listener {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let a = accepted.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                a.fetch_add(1, Ordering::SeqCst);
                drop(c);
            }
        });
        Listener { port, accepted }
    }
    fn accepted(&self) -> usize {
        std::thread::sleep(Duration::from_millis(300));
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A system policy: `registry.test:PORT` pinned to loopback and the only
/// entry of the ceiling.
fn system_policy(port: u16, ceiling: bool) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-hd-policy-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = d.path().join("egress.yaml");
    let mut text = format!("egress:\n  resolve: ['{NAME}:{port}:127.0.0.1']\n");
    if ceiling {
        text.push_str(&format!("  ceiling: ['{NAME}:{port}']\n"));
    }
    std::fs::write(&f, text).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    d
}

/// A directory anyone may write: the payload's canary lands here if it
/// ran on the host.
fn canary_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-hd-canary-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    d
}

fn cli(ws: &Ws, policy: &Path, env: &[(&str, String)], args: &[&str]) -> std::process::Output {
    let mut c = ws.command();
    c.env("DRYRUN_SYSTEM_POLICY_DIR", policy);
    for (k, v) in env {
        c.env(k, v);
    }
    c.arg("execute").arg("--json").args(args).output().unwrap()
}

/// A Python package `pip` in the workspace: `python3 -c` (how the `pypi`
/// preset asks pip) puts the working directory first on `sys.path`.
fn plant_pip(ws: &Ws, canary: &Path, port: u16) {
    ws.write(
        "pip/__init__.py",
        &format!(
            "import os, socket\nopen({c:?}, 'w').write(str(os.getuid()))\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=2); s.sendall(b'GET /pwned HTTP/1.0\\r\\n\\r\\n'); s.close()\nexcept Exception:\n    pass\n",
            c = canary.display().to_string()
        ),
    );
}

/// What ran on the host, if anything (the canary, the listener's count
/// since `before`): collected per identity, asserted at the end.
fn ran_on_the_host(
    who: Who,
    what: &str,
    canary: &Path,
    l: &Listener,
    before: usize,
    failures: &mut Vec<String>,
) {
    let ran = std::fs::read_to_string(canary).ok();
    let n = l.accepted() - before;
    if ran.is_some() || n != 0 {
        failures.push(format!(
            "{who:?}: ATTACK SUCCEEDED ({what}): workspace code ran on the host outside the sandbox (canary: uid {ran:?}; the loopback listener the policy does not allow accepted {n} connection(s))"
        ));
    }
}

#[test]
fn the_pypi_preset_runs_no_workspace_code_on_the_host_cli() {
    let l = Listener::start();
    let policy = system_policy(l.port, true);
    let mut failures = Vec::new();
    for who in identities() {
        let before = l.accepted();
        let cd = canary_dir();
        let canary = cd.path().join("pwned");
        let ws = Ws::new(who);
        plant_pip(&ws, &canary, l.port);
        let out = cli(
            &ws,
            policy.path(),
            &[],
            &["--command", "true", "--allow-net", "pypi"],
        );
        eprintln!("{who:?}: {}", String::from_utf8_lossy(&out.stderr));
        ran_on_the_host(who, "pypi preset, CLI", &canary, &l, before, &mut failures);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_pypi_preset_runs_no_workspace_code_on_the_host_daemon() {
    let l = Listener::start();
    let policy = system_policy(l.port, true);
    let d = Daemon::start_env(
        &[],
        &[("DRYRUN_SYSTEM_POLICY_DIR", policy.path().to_str().unwrap())],
    );
    let mut failures = Vec::new();
    for who in identities() {
        let before = l.accepted();
        let cd = canary_dir();
        let canary = cd.path().join("pwned");
        let ws = if who == Who::User {
            common::daemon::user_workspace()
        } else {
            Ws::new(who)
        };
        plant_pip(&ws, &canary, l.port);
        let body = serde_json::json!({
            "command": "true", "working_dir": ws.dir,
            "intent": {"network": ["pypi"]},
        });
        let (code, r) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body.to_string()));
        eprintln!("{who:?}: {code} {r}");
        ran_on_the_host(
            who,
            "pypi preset, daemon API",
            &canary,
            &l,
            before,
            &mut failures,
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The caller's `PATH` names a workspace directory first: the `npm`
/// preset's `npm config get registry` must not run the workspace's `npm`.
#[test]
fn the_npm_preset_runs_no_workspace_npm_from_the_callers_path() {
    let l = Listener::start();
    let policy = system_policy(l.port, true);
    let mut failures = Vec::new();
    for who in identities() {
        let before = l.accepted();
        let cd = canary_dir();
        let canary = cd.path().join("pwned");
        let ws = Ws::new(who);
        write_script(
            &ws,
            "bin/npm",
            &format!(
                "#!/bin/sh\nid -u > {c}\ncurl -s -m 2 http://127.0.0.1:{p}/npm-pwned >/dev/null 2>&1\necho http://{NAME}:{p}/\n",
                c = canary.display(),
                p = l.port
            ),
        );
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            ws.dir.join("bin").display()
        );
        let out = cli(
            &ws,
            policy.path(),
            &[("PATH", path)],
            &["--command", "true", "--allow-net", "npm"],
        );
        eprintln!("{who:?}: {}", String::from_utf8_lossy(&out.stderr));
        ran_on_the_host(
            who,
            "npm preset, caller PATH",
            &canary,
            &l,
            before,
            &mut failures,
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A workspace npmrc naming hosts beyond the ceiling in disguise: each is
/// refused before anything runs (exit 2, fast), naming the host and the
/// setting; the listener accepts nothing.
#[test]
fn a_hostile_npmrc_is_refused_fast_and_named() {
    let l = Listener::start();
    let policy = system_policy(l.port, true);
    let p = l.port;
    for who in identities() {
        let ws = Ws::new(who);
        for (url, named) in [
            (format!("http://127.0.0.1:{p}/"), format!("127.0.0.1:{p}")),
            ("http://169.254.169.254/".into(), "169.254.169.254".into()),
            (
                format!("http://{NAME}:{p}@127.0.0.1:{p}/"),
                format!("127.0.0.1:{p}"),
            ),
            (format!("http://[::1]:{p}/"), "::1".into()),
            (
                format!("http://{NAME}.evil.test:{p}/"),
                format!("{NAME}.evil.test"),
            ),
            (
                format!("http://{NAME}:{p}/ http://evil.test/"),
                "evil.test".into(),
            ),
        ] {
            ws.write(".npmrc", &format!("registry={url}\n"));
            let t0 = Instant::now();
            let out = cli(
                &ws,
                policy.path(),
                &[],
                &["--command", "true", "--allow-net", "npm"],
            );
            let err = String::from_utf8_lossy(&out.stderr);
            if out.status.code() == Some(2) {
                // Named and refused (no tool runs to read the preset).
                assert!(
                    err.contains("preset npm")
                        && err.contains(&named)
                        && (err.contains("egress.ceiling") || err.contains("is an IP address")),
                    "{who:?} {url}: {err}"
                );
            } else {
                // Only acceptable if the entry became one inside the ceiling.
                let r = to_run(out.clone());
                let net = strings(&r.json["intent"]["network"]);
                assert!(
                    net.iter().all(|e| e == &format!("{NAME}:{p}")),
                    "{who:?} {url}: allowed {net:?}: {err}"
                );
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "{who:?} {url}");
            assert_eq!(
                l.accepted(),
                0,
                "{who:?} {url}: the listener accepted a connection ({:?}): {err}",
                out.status.code()
            );
        }
    }
}

/// Without a ceiling any name may be asked for, but the proxy must not
/// connect to the host's loopback (a name resolving there, or a literal).
#[test]
fn asking_for_host_loopback_reaches_nothing() {
    if !require_tool("curl", "curl") {
        return;
    }
    let l = Listener::start();
    let policy = system_policy(l.port, false);
    let p = l.port;
    for who in identities() {
        let ws = Ws::new(who);
        for entry in [format!("127.0.0.1:{p}"), format!("localhost:{p}")] {
            let host = entry.clone();
            let cmd = format!(
                "curl --noproxy '' -sS -m 5 http://{host}/x; curl -sS -m 5 http://{host}/y; true"
            );
            let out = cli(
                &ws,
                policy.path(),
                &[],
                &["--command", &cmd, "--allow-net", &entry, "--timeout", "60"],
            );
            let r = to_run(out.clone());
            eprintln!(
                "{who:?} {entry}: {} {} {:?}",
                out.status,
                r.decision(),
                r.json["rehearsal"]["egress"]
            );
            assert_eq!(
                l.accepted(),
                0,
                "{who:?} {entry}: the host's loopback was reached"
            );
        }
    }
}

/// The hook door: the project's own `dryrun.yaml` (the agent's file) asks
/// for `network: [pypi]`; the hook reads the preset before its rehearsal.
#[test]
fn the_pypi_preset_runs_no_workspace_code_on_the_host_hook() {
    let l = Listener::start();
    let policy = system_policy(l.port, true);
    let mut failures = Vec::new();
    for who in identities() {
        let before = l.accepted();
        let cd = canary_dir();
        let canary = cd.path().join("pwned");
        let ws = Ws::new(who);
        plant_pip(&ws, &canary, l.port);
        ws.write("dryrun.yaml", "hook:\n  network: [pypi]\n");
        let event = common::hook::claude_event(&ws.dir, "true");
        let mut c = if who == Who::User {
            as_test_user(bin())
        } else {
            std::process::Command::new(bin())
        };
        c.args(["hook", "claude-code"])
            .env("DRYRUN_LOCAL", "1")
            .env("DRYRUN_STATE_DIR", &ws.state)
            .env("DRYRUN_SYSTEM_POLICY_DIR", policy.path())
            .env_remove("DRYRUN_SOCKET")
            .env_remove("CLAUDE_PROJECT_DIR");
        let out = output_with_stdin(&mut c, event.to_string().as_bytes());
        eprintln!(
            "{who:?}: {:?} {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        ran_on_the_host(who, "pypi preset, hook", &canary, &l, before, &mut failures);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
