//! Agents in containers: a client in a mount namespace of its own (made
//! here with `unshare -m`, and `unshare -U -r -m` for the unprivileged
//! user) submits over the daemon's socket. The daemon resolves the
//! client's `working_dir` in the client's namespace (through its
//! `/proc/PID/root`, pinned by the socket's pidfd, with the client's uid
//! and gid): the host's directory at the same path when that is what the
//! client sees (a workspace bind-mounted at the same path, as a pod's
//! hostPath is), else the directory the client sees, rehearsed and
//! promoted in the client's view, never whatever the host has at that
//! path (more in `daemon_containers_paths.rs`). A submission from a
//! connection whose process has exited is refused (its pid may name
//! another process by then). Mounts made here live in the client's
//! namespace only and go with it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::daemon::*;
use common::*;
use serde_json::Value;

/// `setup` (sh), then the submission of `body` with curl, in a new mount
/// namespace: root's (`unshare -m`) or the test user's own (`unshare -U -r
/// -m`, root in it, the test user outside). (HTTP status, body).
fn submit_in_namespace(d: &Daemon, who: Who, setup: &str, body: &Value) -> (u16, Value) {
    let (_keep, file) = agent_envelope_file(&body.to_string());
    let script = format!(
        "set -e; {setup}; exec curl -sS -o - -w '\\n%{{http_code}}' --unix-socket '{}' -X POST -H 'content-type: application/json' --data-binary @'{}' 'http://dryrun/v1/runs?wait=true'",
        d.socket.display(),
        file.display()
    );
    let unshare = tool("unshare", "util-linux");
    let mut c = match who {
        Who::Root => Command::new(unshare),
        Who::User => {
            let mut c = as_test_user(unshare);
            c.args(["-U", "-r"]);
            c
        }
    };
    c.args(["-m", "--propagation", "private", "--", "sh", "-c", &script]);
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{who:?} in a namespace: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
    )
}

fn envelope(wd: &Path) -> Value {
    serde_json::json!({
        "command": "echo from-the-container > a.txt",
        "working_dir": wd,
        "intent": {"expected_writes": ["a.txt"]},
    })
}

fn workspace_for(who: Who) -> Ws {
    let ws = Ws::new(who);
    ws.write("README.md", "hello\n");
    ws
}

/// The workspace bind-mounted at the same path in the client's namespace
/// (a pod's hostPath): rehearsed there and promoted there, for root and
/// for the unprivileged user in a user namespace of its own.
#[test]
fn a_client_in_its_own_mount_namespace_with_the_workspace_at_the_same_path_is_served() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    for who in [Who::Root, Who::User] {
        let ws = workspace_for(who);
        let wd = ws.dir.display().to_string();
        // Its own mount namespace, the workspace bound onto itself (a mount
        // of the client's, the same directory).
        let (st, v) = submit_in_namespace(
            &d,
            who,
            &format!("mount --bind '{wd}' '{wd}'"),
            &envelope(&ws.dir),
        );
        assert_eq!(st, 200, "{who:?}: {v}");
        // The host's directory: no client view is held for it.
        assert!(v.get("workspace_view").is_none(), "{v}");
        let id = v["run_id"].as_str().unwrap().to_string();
        assert!(!ws.dir.join("a.txt").exists(), "a rehearsal wrote the host");
        let caller = if who == Who::Root {
            Who::Root
        } else {
            Who::User
        };
        let (st, p) = d.curl(caller, "POST", &format!("/v1/runs/{id}/promote"), None);
        assert_eq!(st, 200, "{who:?}: {p}");
        assert_eq!(
            std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
            "from-the-container\n",
            "{who:?}"
        );
    }
}

/// The client's namespace has another directory at the workspace's path
/// (its own copy): that directory, the one the client names, is rehearsed
/// and promoted; the host's directory at that path stays as it was.
/// Without the client's view the daemon would rehearse and promote the
/// host's directory, which the client never named.
#[test]
fn a_working_dir_that_is_another_directory_in_the_clients_namespace_is_served_there() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    for who in [Who::Root, Who::User] {
        let ws = workspace_for(who);
        let decoy = workspace_for(who);
        let before = ws.snapshot();
        let (st, v) = submit_in_namespace(
            &d,
            who,
            &format!(
                "mount --bind '{}' '{}'",
                decoy.dir.display(),
                ws.dir.display()
            ),
            &envelope(&ws.dir),
        );
        assert_eq!(st, 200, "{who:?}: {v}");
        assert_eq!(v["workspace"], ws.dir.display().to_string(), "{v}");
        let id = v["run_id"].as_str().unwrap().to_string();
        let (st, p) = d.curl(who, "POST", &format!("/v1/runs/{id}/promote"), None);
        assert_eq!(st, 200, "{who:?}: {p}");
        assert_eq!(
            std::fs::read_to_string(decoy.dir.join("a.txt")).unwrap(),
            "from-the-container\n"
        );
        assert_eq!(
            ws.snapshot(),
            before,
            "{who:?}: the host's directory was written"
        );
    }
}

/// Hostile: the user's namespace puts its workspace at the path of a host
/// directory it cannot reach (root's, mode 0700, holding a secret): what
/// the client sees there (its own workspace) is served; root's directory
/// is never read or written, and no answer says anything of it.
#[test]
fn a_namespace_path_naming_a_host_directory_the_client_cannot_reach_is_never_the_hosts() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = workspace_for(Who::User);
    let outer = tempfile::Builder::new()
        .prefix("dryrun-private-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = outer.path().join("root-only");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("secret-name.txt"), "secret-content\n").unwrap();
    let (st, v) = submit_in_namespace(
        &d,
        Who::User,
        &format!(
            "mount --bind '{}' '{}'",
            ws.dir.display(),
            private.display()
        ),
        &envelope(&private),
    );
    assert_eq!(st, 200, "{v}");
    let id = v["run_id"].as_str().unwrap().to_string();
    let (st, p) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/promote"), None);
    assert_eq!(st, 200, "{p}");
    for text in [v.to_string(), p.to_string()] {
        assert!(
            !text.contains("secret-name") && !text.contains("secret-content"),
            "{text}"
        );
    }
    assert!(!private.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
        "from-the-container\n"
    );
}

/// Hostile: the process that connected exits and another process (its
/// child, holding the connection) submits. The pid the socket names may
/// belong to anyone by then: the daemon, which pinned the connecting
/// process with its pidfd, refuses instead of looking at whatever runs
/// under that pid now. As root and as the user.
#[test]
fn a_submission_whose_connecting_process_has_exited_is_refused() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    for who in [Who::Root, Who::User] {
        let ws = workspace_for(who);
        let body = envelope(&ws.dir).to_string();
        let request = format!(
            "POST /v1/runs?wait=true HTTP/1.1\r\nHost: dryrun\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        // The child connects and exits; the parent, which shares the
        // socket, reaps it and then sends the request.
        let script = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
pid = os.fork()
if pid == 0:
    s.connect(sys.argv[1])
    os._exit(0)
os.waitpid(pid, 0)
s.sendall(sys.argv[2].encode())
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
sys.stdout.write(out.decode())
"#;
        let mut c = match who {
            Who::Root => Command::new("/usr/bin/python3"),
            Who::User => as_test_user("/usr/bin/python3"),
        };
        let out = c
            .args(["-c", script])
            .arg(&d.socket)
            .arg(&request)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.starts_with("HTTP/1.1 400"), "{who:?}: {text}");
        assert!(text.contains("invalid_workspace"), "{text}");
        assert!(text.contains("has exited"), "{text}");
        assert!(!ws.dir.join("a.txt").exists());
    }
}
