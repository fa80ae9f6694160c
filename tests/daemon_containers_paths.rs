//! Agents in containers whose workspace is not the host's directory at the
//! same path: the daemon resolves `working_dir` in the client's own mount
//! namespace (its `/proc/PID/root`, pinned by the socket's pidfd, with the
//! client's uid and gid), rehearses that directory and promotes into it,
//! in that view. Clients here live in mount namespaces the tests make
//! (`unshare -m` by root; `unshare -U -r -m` by the test user, root in a
//! user namespace of its own), as they would in a container; the mounts
//! they make live in their namespace only and go with it. Every claim is
//! checked on the host: the directory behind the client's path, the
//! host's directory at that path, canaries.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::containers::*;
use common::daemon::*;
use common::*;
use serde_json::Value;

/// The curl command line that submits `file` (an envelope) and prints the
/// body, a newline and the HTTP status.
fn curl_script(d: &Daemon, file: &Path) -> String {
    format!(
        "curl -sS -o - -w '\\n%{{http_code}}' --unix-socket '{}' -X POST -H 'content-type: application/json' --data-binary @'{}' 'http://dryrun/v1/runs?wait=true'",
        d.socket.display(),
        file.display()
    )
}

fn status_and_body(out: std::process::Output, what: &str) -> (u16, Value) {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
    )
}

/// `setup` (sh) then the submission of `body`, in a fresh mount namespace
/// made by `maker`: root's (`unshare -m`; the client then runs as `client`)
/// or the test user's own (`unshare -U -r -m`; the client is the test
/// user). (HTTP status, body).
fn submit_in_namespace(
    d: &Daemon,
    maker: Who,
    client: Who,
    setup: &str,
    body: &Value,
) -> (u16, Value) {
    let (_keep, file) = agent_envelope_file(&body.to_string());
    let curl = curl_script(d, &file);
    let drop_to = if maker == Who::Root && client == Who::User {
        format!("{} ", as_test_user_argv().join(" "))
    } else {
        String::new()
    };
    let script = format!("set -e; {setup}; exec {drop_to}{curl}");
    let unshare = tool("unshare", "util-linux");
    let mut c = match maker {
        Who::Root => Command::new(unshare),
        Who::User => {
            let mut c = as_test_user(unshare);
            c.args(["-U", "-r"]);
            c
        }
    };
    c.args(["-m", "--propagation", "private", "--", "sh", "-c", &script]);
    status_and_body(c.output().unwrap(), &format!("{maker:?}/{client:?}"))
}

/// A client's mount namespace made by root (`unshare -m`) that outlives
/// one command: `setup`, then it waits until dropped. Commands run in it
/// with `nsenter`.
struct Holder {
    child: Child,
}

impl Holder {
    fn new(setup: &str) -> Holder {
        let script = format!("set -e; {setup}; echo ready; exec cat >/dev/null");
        let mut child = Command::new(tool("unshare", "util-linux"))
            .args(["-m", "--propagation", "private", "--", "sh", "-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "the namespace's setup failed");
        Holder { child }
    }

    /// `script` (sh) in the namespace, as `who`.
    fn run(&self, who: Who, script: &str) -> std::process::Output {
        let mut c = Command::new(tool("nsenter", "util-linux"));
        c.arg("-t").arg(self.child.id().to_string()).arg("-m");
        if who == Who::User {
            let (u, g) = test_user();
            c.args([format!("--setuid={u}"), format!("--setgid={g}")]);
        }
        c.args(["--", "sh", "-c", script]).output().unwrap()
    }

    fn submit(&self, d: &Daemon, who: Who, body: &Value) -> (u16, Value) {
        let (_keep, file) = agent_envelope_file(&body.to_string());
        status_and_body(self.run(who, &curl_script(d, &file)), "in the holder")
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn record(d: &Daemon, id: &str) -> Value {
    let (st, v) = d.curl(Who::Root, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(st, 200, "{v}");
    v
}

fn runs_of(d: &Daemon) -> usize {
    std::fs::read_dir(d.state.join("runs"))
        .map(|r| r.count())
        .unwrap_or(0)
}

/// A workspace on the host bind-mounted at another path in the client's
/// namespace (a pod's volume at its own mount path): rehearsed and
/// promoted in the directory behind the client's path; the host's
/// directory at the client's path stays empty; the record names the
/// client's path and where it was resolved. As root and as the test user
/// (in a user namespace of its own).
#[test]
fn a_workspace_bind_mounted_at_another_path_is_rehearsed_and_promoted_behind_it() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    for who in [Who::Root, Who::User] {
        let ws = Ws::new(who);
        ws.write("README.md", "hello\n");
        let (_t, inside) = empty_dir(who);
        let (st, v) = submit_in_namespace(
            &d,
            who,
            who,
            &format!("mount --bind '{}' '{}'", ws.dir.display(), inside.display()),
            &envelope(&inside),
        );
        assert_eq!(st, 200, "{who:?}: {v}");
        assert_eq!(v["verdict"]["decision"], "promote", "{who:?}: {v}");
        let id = v["run_id"].as_str().unwrap().to_string();
        assert!(!ws.dir.join("a.txt").exists(), "a rehearsal wrote the host");
        let r = record(&d, &id);
        assert_eq!(r["workspace"], inside.display().to_string(), "{r}");
        assert!(
            r["workspace_view"].as_str().unwrap_or("").contains("mnt:["),
            "{r}"
        );
        // A replay runs in the same view, on the same directory (not on
        // the host's directory at the client's path).
        let (st, rp) = d.curl(
            who,
            "POST",
            &format!("/v1/runs/{id}/replay?wait=true"),
            Some("{}"),
        );
        assert_eq!(st, 200, "{who:?}: {rp}");
        assert_eq!(rp["workspace_identity"], r["workspace_identity"], "{rp}");
        assert_eq!(rp["workspace_view"], r["workspace_view"], "{rp}");
        let (st, p) = promote(&d, who, &id);
        assert_eq!(st, 200, "{who:?}: {p}");
        assert_eq!(
            std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
            CONTENT,
            "{who:?}"
        );
        assert_eq!(
            std::fs::read_dir(&inside).unwrap().count(),
            0,
            "{who:?}: the host's directory at the client's path was written"
        );
    }
}

/// A workspace that exists only in the container (a tmpfs mounted in its
/// namespace, an `emptyDir`): rehearsed and promoted there, the result
/// visible from inside the client's namespace, nothing on the host's
/// directory at that path. Root's namespace, as root and with the test
/// user as the client (and owner).
#[test]
fn a_workspace_only_in_the_container_is_promoted_there() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let (u, g) = test_user();
    for who in [Who::Root, Who::User] {
        let (_t, inside) = empty_dir(who);
        let (ou, og) = if who == Who::User { (u, g) } else { (0, 0) };
        let shown = inside.display();
        let holder = Holder::new(&format!(
            "mount -t tmpfs -o mode=0755,uid={ou},gid={og},size=4m tmpfs '{shown}'; echo hello > '{shown}/README.md'; chown {ou}:{og} '{shown}/README.md'"
        ));
        let (st, v) = holder.submit(&d, who, &envelope(&inside));
        assert_eq!(st, 200, "{who:?}: {v}");
        let id = v["run_id"].as_str().unwrap().to_string();
        let (st, p) = promote(&d, who, &id);
        assert_eq!(st, 200, "{who:?}: {p}");
        let seen = holder.run(who, &format!("cat '{shown}/a.txt'"));
        assert_eq!(
            String::from_utf8_lossy(&seen.stdout),
            CONTENT,
            "{who:?}: {}",
            String::from_utf8_lossy(&seen.stderr)
        );
        assert!(
            !inside.join("a.txt").exists(),
            "{who:?}: written on the host"
        );
        assert!(!inside.join("README.md").exists());
    }
}

/// A promotion into a workspace that exists only in the container is
/// rolled back in that view: the file it replaced comes back and the file
/// it created goes, seen from inside the client's namespace; the host's
/// directory at that path stays empty. Root's namespace, root and the
/// test user as the client.
#[test]
fn a_promotion_in_a_clients_view_is_rolled_back_in_that_view() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let (u, g) = test_user();
    for who in [Who::Root, Who::User] {
        let (_t, inside) = empty_dir(who);
        let (ou, og) = if who == Who::User { (u, g) } else { (0, 0) };
        let shown = inside.display();
        let holder = Holder::new(&format!(
            "mount -t tmpfs -o mode=0755,uid={ou},gid={og},size=4m tmpfs '{shown}'; echo hello > '{shown}/README.md'; chown {ou}:{og} '{shown}/README.md'"
        ));
        let body = serde_json::json!({
            "command": "echo changed > README.md && echo from-the-container > a.txt",
            "working_dir": inside,
            "intent": {"expected_writes": ["a.txt", "README.md"]},
        });
        let (st, v) = holder.submit(&d, who, &body);
        assert_eq!(st, 200, "{who:?}: {v}");
        let id = v["run_id"].as_str().unwrap().to_string();
        let (st, p) = promote(&d, who, &id);
        assert_eq!(st, 200, "{who:?}: {p}");
        let rc = p["receipt"]["receipt_id"].as_str().unwrap().to_string();
        let seen = |f: &str| {
            let o = holder.run(who, &format!("cat '{shown}/{f}' 2>&1 || echo absent"));
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        assert_eq!(seen("README.md"), "changed\n", "{who:?}");
        assert_eq!(seen("a.txt"), CONTENT, "{who:?}");
        let (st, r) = d.curl(
            who,
            "POST",
            &format!("/v1/receipts/{rc}/rollback"),
            Some("{}"),
        );
        assert_eq!(st, 200, "{who:?}: {r}");
        assert_eq!(seen("README.md"), "hello\n", "{who:?}: not restored");
        assert!(seen("a.txt").contains("absent"), "{who:?}: a.txt left");
        assert_eq!(
            std::fs::read_dir(&inside).unwrap().count(),
            0,
            "{who:?}: the host's directory at the client's path was written"
        );
        // A receipt rolls back once.
        let (st, r) = d.curl(
            who,
            "POST",
            &format!("/v1/receipts/{rc}/rollback"),
            Some("{}"),
        );
        assert_ne!(st, 200, "{who:?}: {r}");
    }
}

/// Hostile: the test user's container names, as its workspace, a host
/// directory it does not own, bind-mounted at a path it owns in its own
/// namespace: `/etc`, root's home, another user's directory. Refused (the
/// owner rule holds for the directory the client's path names), no run is
/// made, and nothing appears in the directory.
#[test]
fn a_container_binding_a_directory_it_does_not_own_at_its_working_dir_is_refused() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let other = tempfile::Builder::new()
        .prefix("dryrun-other-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(other.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(other.path().join("canary.txt"), "canary\n").unwrap();
    let st = Command::new("chown")
        .args(["-R", "4242:4242"])
        .arg(other.path())
        .status()
        .unwrap();
    assert!(st.success());
    for target in [Path::new("/etc"), Path::new("/root"), other.path()] {
        let (_t, inside) = empty_dir(Who::User);
        let runs = runs_of(&d);
        let (st, v) = submit_in_namespace(
            &d,
            Who::User,
            Who::User,
            // Recursive: a user namespace may not bind a directory without
            // the mounts beneath it (a machine whose /root holds one).
            &format!(
                "mount --rbind '{}' '{}'",
                target.display(),
                inside.display()
            ),
            &envelope(&inside),
        );
        // The owner rule (403), or for root's home the rule that no home is
        // a workspace (400), which the engine checks first.
        let msg = v["error"]["message"].as_str().unwrap_or("");
        match st {
            403 => assert!(
                v["error"]["code"] == "forbidden"
                    && msg.contains("belongs to uid")
                    && msg.contains("may only submit runs for workspaces it owns"),
                "{v}"
            ),
            400 => assert!(
                target == Path::new("/root")
                    && v["error"]["code"] == "invalid_workspace"
                    && msg.contains("home directory of root"),
                "{v}"
            ),
            _ => panic!("{}: {st} {v}", target.display()),
        }
        assert_eq!(runs_of(&d), runs, "{}: a run was made", target.display());
        assert!(!target.join("a.txt").exists(), "{}", target.display());
    }
    assert_eq!(
        std::fs::read_to_string(other.path().join("canary.txt")).unwrap(),
        "canary\n"
    );
}

/// A container with a root of its own (the test user chroots into a
/// directory holding `/usr`, `/dev` and the daemon's socket, as a
/// container runtime pivots into its image), whose `/work` is a symbolic
/// link to an absolute path. The host has a directory of the test user's
/// at that very path (the canary); the container's root has another (the
/// decoy). `setup_link` makes `/work` (sh, `$R` is the root).
fn submit_from_own_root(d: &Daemon, root: &Path, setup_link: &str, body: &Value) -> (u16, Value) {
    std::fs::write(root.join("env.json"), body.to_string()).unwrap();
    chown_to(root, Who::User);
    let r = root.display();
    let sock_dir = d.socket.parent().unwrap().display();
    let script = format!(
        "set -e; R='{r}'; mount --rbind /usr \"$R/usr\"; mount --rbind /dev \"$R/dev\"; mount --bind '{sock_dir}' \"$R/sock\"; {setup_link}; \
         chroot \"$R\" /usr/bin/curl -sS -o - -w '\\n%{{http_code}}' --unix-socket /sock/dryrun.sock -X POST -H 'content-type: application/json' --data-binary @/env.json 'http://dryrun/v1/runs?wait=true'"
    );
    let mut c = as_test_user(tool("unshare", "util-linux"));
    c.args([
        "-U",
        "-r",
        "-m",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    status_and_body(c.output().unwrap(), "from its own root")
}

/// The container's root: `usr`, `dev`, `sock` mount points, `bin`, `lib`,
/// `lib64` as the host has them, and the decoy at `canary`'s path.
fn container_root(canary: &Path) -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::Builder::new()
        .prefix("dryrun-ctr-root-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = t.path().join("root");
    for d in ["usr", "dev", "sock"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    for (l, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        std::os::unix::fs::symlink(to, r.join(l)).unwrap();
    }
    let decoy = r.join(canary.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&decoy).unwrap();
    std::fs::write(decoy.join("README.md"), "decoy\n").unwrap();
    chown_to(&r, Who::User);
    (t, r)
}

/// A symbolic link in the client's view resolves inside the client's
/// root, never the host's: `/work` -> the canary's absolute path is the
/// decoy in the container's root. Rehearsed and promoted there; the
/// host's directory at that path (the test user's own, so no owner rule
/// would stop a daemon that followed the link on the host) is unchanged.
#[test]
fn a_symbolic_link_in_the_clients_view_stays_inside_its_root() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let canary = Ws::new(Who::User);
    canary.write("README.md", "canary\n");
    let before = canary.snapshot();
    let (_t, root) = container_root(&canary.dir);
    let decoy = root.join(canary.dir.strip_prefix("/").unwrap());
    let link = format!("ln -sfn '{}' \"$R/work\"", canary.dir.display());
    let (st, v) = submit_from_own_root(&d, &root, &link, &envelope(Path::new("/work")));
    assert_eq!(st, 200, "{v}");
    let id = v["run_id"].as_str().unwrap().to_string();
    let r = record(&d, &id);
    assert_eq!(r["workspace"], canary.dir.display().to_string(), "{r}");
    let (st, p) = promote(&d, Who::User, &id);
    assert_eq!(st, 200, "{p}");
    assert_eq!(
        std::fs::read_to_string(decoy.join("a.txt")).unwrap(),
        CONTENT
    );
    assert_eq!(
        canary.snapshot(),
        before,
        "the host's directory was written"
    );
}

/// The race: while the client swaps `/work` between links to the
/// canary's path (absolute, and through `..` far past its root), the
/// daemon resolves, rehearses and promotes. Each submission is served in
/// the decoy or refused; the host's directory at that path never changes.
#[test]
fn swapping_the_link_in_the_clients_view_never_reaches_the_host() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let canary = Ws::new(Who::User);
    canary.write("README.md", "canary\n");
    let before = canary.snapshot();
    let (_t, root) = container_root(&canary.dir);
    let decoy = root.join(canary.dir.strip_prefix("/").unwrap());
    let c = canary.dir.display();
    let swapper = format!(
        "ln -sfn '{c}' \"$R/work\"; ( while :; do ln -sfn '{c}' \"$R/w1\"; mv -Tf \"$R/w1\" \"$R/work\"; ln -sfn '../../../../../../../..{c}' \"$R/w2\"; mv -Tf \"$R/w2\" \"$R/work\"; done ) & trap \"kill $!\" EXIT"
    );
    let mut served = 0;
    for _ in 0..4 {
        let (st, v) = submit_from_own_root(&d, &root, &swapper, &envelope(Path::new("/work")));
        assert_eq!(
            canary.snapshot(),
            before,
            "the host's directory was written"
        );
        if st != 200 {
            assert_eq!(v["error"]["code"], "invalid_workspace", "{st} {v}");
            continue;
        }
        served += 1;
        let id = v["run_id"].as_str().unwrap().to_string();
        let (st, p) = promote(&d, Who::User, &id);
        assert_eq!(st, 200, "{p}");
        assert_eq!(
            std::fs::read_to_string(decoy.join("a.txt")).unwrap(),
            CONTENT
        );
        std::fs::remove_file(decoy.join("a.txt")).unwrap();
        assert_eq!(
            canary.snapshot(),
            before,
            "the host's directory was written"
        );
    }
    assert!(served > 0, "no submission was served");
}

/// The daemon holds a client's view while it runs; a daemon started again
/// holds none, so a run rehearsed in a view it no longer has is refused
/// at promotion (`workspace_gone`, resubmit), never promoted on whatever
/// the host has at the client's path.
#[test]
fn a_run_in_a_clients_view_is_not_promoted_after_a_daemon_restart() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    let (_t, inside) = empty_dir(Who::User);
    let (st, v) = submit_in_namespace(
        &d,
        Who::User,
        Who::User,
        &format!("mount --bind '{}' '{}'", ws.dir.display(), inside.display()),
        &envelope(&inside),
    );
    assert_eq!(st, 200, "{v}");
    let id = v["run_id"].as_str().unwrap().to_string();
    d.terminate();
    d.restart(&[]);
    let (st, p) = promote(&d, Who::User, &id);
    assert_eq!(st, 409, "{p}");
    assert!(
        p["error"]["message"]
            .as_str()
            .unwrap()
            .contains("workspace_gone"),
        "{p}"
    );
    assert!(!ws.dir.join("a.txt").exists());
    assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0);
}

/// Hostile: in a container, the process that connected exits and another
/// (its parent, holding the connection) submits; its pid may name anyone
/// by then, so the daemon, which pinned the connecting process with its
/// pidfd, refuses and says why, instead of resolving the path in whatever
/// runs under that pid now. Root's namespace and the test user's.
#[test]
fn a_container_client_that_exits_before_the_daemon_reads_is_refused() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    for who in [Who::Root, Who::User] {
        let (_t, inside) = empty_dir(who);
        let body = envelope(&inside).to_string();
        let request = format!(
            "POST /v1/runs?wait=true HTTP/1.1\r\nHost: dryrun\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
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
        let unshare = tool("unshare", "util-linux");
        let mut c = match who {
            Who::Root => Command::new(unshare),
            Who::User => {
                let mut c = as_test_user(unshare);
                c.args(["-U", "-r"]);
                c
            }
        };
        let out = c
            .args([
                "-m",
                "--propagation",
                "private",
                "--",
                "/usr/bin/python3",
                "-c",
            ])
            .arg(script)
            .arg(&d.socket)
            .arg(&request)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("HTTP/1.1 400"), "{who:?}: {text}");
        assert!(
            text.contains("invalid_workspace") && text.contains("has exited"),
            "{text}"
        );
        assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0);
    }
}

/// Hostile: the container's `/dev/null` is a FIFO no one opens (it could as
/// well be any file the client can see, bound there). The daemon's
/// processes that enter the client's view never look anything up there
/// with root's rights: the owner's agent, forked into the view, takes its
/// `/dev/null` from the host before it enters. Served and promoted; a
/// process that opened the client's one would block, and the submission
/// would fail on the agent's deadline.
#[test]
fn a_containers_own_dev_null_is_never_opened_by_the_daemon() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    let (t, inside) = empty_dir(Who::User);
    let fifo = t.path().join("fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    chown_to(&fifo, Who::User);
    let (st, v) = submit_in_namespace(
        &d,
        Who::User,
        Who::User,
        &format!(
            "mount --bind '{}' /dev/null; mount --bind '{}' '{}'",
            fifo.display(),
            ws.dir.display(),
            inside.display()
        ),
        &envelope(&inside),
    );
    assert_eq!(st, 200, "{v}");
    let id = v["run_id"].as_str().unwrap().to_string();
    let (st, p) = promote(&d, Who::User, &id);
    assert_eq!(st, 200, "{p}");
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
        CONTENT
    );
}
