//! Hostile agents in containers whose workspace is at another path: the
//! test user (unprivileged) in a user and mount namespace of its own, as
//! a container gives it, attacks the daemon's client views (the pinned
//! mount namespace, root and directory; the owner's agent forked into the
//! view; the lower layer cloned there; promotion in the view). Every
//! claim is checked on the host: canaries in `/etc`, in another user's
//! directory, in the host's directory at the client's path, and the
//! daemon still serving the other uid.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::containers::*;
use common::daemon::*;
use common::*;
use serde_json::Value;

/// The curl command line that submits `file` (an envelope) and prints the
/// body, a newline and the HTTP status (`-q`: no configuration file).
fn curl_line(socket: &Path, file: &Path) -> String {
    format!(
        "curl -q -sS -o - -w '\\n%{{http_code}}' --unix-socket '{}' -X POST -H 'content-type: application/json' --data-binary @'{}' 'http://dryrun/v1/runs?wait=true'",
        socket.display(),
        file.display()
    )
}

fn status_and_body(text: &str) -> (u16, Value) {
    let (body, code) = text.trim_end().rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
    )
}

/// A namespace that outlives one command: root's (`unshare -m`) or the
/// attacker's own (`unshare -U -r -m` as the test user, root in a user
/// namespace of its own, as in a rootless container). `setup` (sh) runs
/// first; then each [`Ns::run`] is one line of sh run in it, by its maker.
struct Ns {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Ns {
    fn new(maker: Who, setup: &str) -> Ns {
        let unshare = tool("unshare", "util-linux");
        match maker {
            Who::Root => Ns::spawn(Command::new(unshare), setup),
            Who::User => {
                let mut c = as_test_user(unshare);
                c.args(["-U", "-r"]);
                Ns::spawn(c, setup)
            }
        }
    }

    /// The namespace of an unprivileged uid other than the test user's
    /// (as one of the uids a user's subordinate range gives it), with the
    /// test user's group (which may use the daemon's socket here).
    fn of_uid(uid: u32, setup: &str) -> Ns {
        let (_, g) = test_user();
        let mut c = Command::new("setpriv");
        c.env("PATH", SYSTEM_PATH).args([
            format!("--reuid={uid}"),
            format!("--regid={g}"),
            "--clear-groups".into(),
            "--".into(),
            tool("unshare", "util-linux").into(),
            "-U".into(),
            "-r".into(),
        ]);
        Ns::spawn(c, setup)
    }

    fn spawn(mut c: Command, setup: &str) -> Ns {
        let script = format!(
            "set -e; {setup}; set +e; echo ready; while IFS= read -r line; do ( eval \"$line\" ); echo; echo @@done; done"
        );
        let mut child = c
            .args(["-m", "--propagation", "private", "--", "sh", "-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "the namespace's setup failed");
        Ns {
            child,
            input,
            output,
        }
    }

    /// `line` (sh) in the namespace; what it printed.
    fn run(&mut self, line: &str) -> String {
        assert!(!line.contains('\n'));
        writeln!(self.input, "{line}").unwrap();
        let mut out = String::new();
        loop {
            let mut l = String::new();
            assert!(
                self.output.read_line(&mut l).unwrap() > 0,
                "the shell ended"
            );
            if l == "@@done\n" {
                return out;
            }
            out.push_str(&l);
        }
    }

    /// Submit `body` from inside the namespace: (HTTP status, body).
    fn submit(&mut self, d: &Daemon, body: &Value) -> (u16, Value) {
        let (_keep, file) = agent_envelope_file(&body.to_string());
        status_and_body(&self.run(&curl_line(&d.socket, &file)))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory of another user (uid 4242), 0755, holding a canary.
fn other_users_dir() -> tempfile::TempDir {
    let t = tempfile::Builder::new()
        .prefix("dryrun-hc-other-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(t.path().join("canary.txt"), "canary\n").unwrap();
    chown_r(t.path(), 4242, 4242);
    t
}

fn run_id_of(v: &Value) -> String {
    v["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {v}"))
        .to_string()
}

/// Hostile: a client (root, in a container) has a run rehearsed in its
/// view. The attacker binds the same directory (it can read it, not own
/// it) at the same path in its own namespace and submits. Its submission
/// is refused (the owner rule), and the other uid's view must survive it:
/// the victim's run is promoted, into its directory. (A registry that
/// replaced a view of the same path and directory whoever registered it
/// answered the victim `workspace_gone`.)
#[test]
fn a_refused_submission_of_the_same_directory_does_not_drop_another_uids_view() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = Ws::new(Who::Root);
    ws.write("README.md", "hello\n");
    let (_t, inside) = empty_dir(Who::Root);
    let bind = format!("mount --bind '{}' '{}'", ws.dir.display(), inside.display());
    let mut victim = Ns::new(Who::Root, &bind);
    let (st, v) = victim.submit(&d, &envelope(&inside));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["verdict"]["decision"], "promote", "{v}");
    let id = run_id_of(&v);
    let mut attacker = Ns::new(Who::User, &bind);
    for _ in 0..2 {
        let (st, a) = attacker.submit(&d, &envelope(&inside));
        assert_eq!(st, 403, "{a}");
        assert_eq!(a["error"]["code"], "forbidden", "{a}");
    }
    assert!(!ws.dir.join("a.txt").exists());
    let (st, p) = promote(&d, Who::Root, &id);
    assert_eq!(st, 200, "the victim's view was dropped: {p}");
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
        CONTENT
    );
    assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0);
}

/// Hostile: the attacker's own workspace, in its view, holds bind mounts
/// out: `sub` is `/etc`, `other` another user's directory, `mine` the
/// attacker's own other workspace. A run writes into each; the
/// lower layer (the workspace's own mount, cloned) shows the empty
/// directories beneath, and promotion, in the view with the owner's
/// rights, never lands a file in `/etc`, in the other user's directory,
/// nor outside the reviewed directory at all (`mine`: the owner could
/// write there, only the promotion's no-crossing rule stops it).
#[test]
fn bind_mounts_inside_the_workspace_do_not_carry_a_promotion_out() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    for sub in ["sub", "other", "mine"] {
        std::fs::create_dir(ws.dir.join(sub)).unwrap();
    }
    ws.chown_all();
    let other = other_users_dir();
    let mine = Ws::new(Who::User);
    mine.write("README.md", "mine\n");
    let before = mine.snapshot();
    let (_t, inside) = empty_dir(Who::User);
    let (i, o) = (inside.display(), other.path().display());
    let mut attacker = Ns::new(
        Who::User,
        &format!(
            "mount --bind '{}' '{i}'; mount --bind /etc '{i}/sub'; mount --bind '{o}' '{i}/other'; mount --bind '{}' '{i}/mine'",
            ws.dir.display(),
            mine.dir.display()
        ),
    );
    let canary = "dryrun-hc33-canary";
    let body = serde_json::json!({
        "command": format!("ls sub other mine; echo ---; echo pwned > sub/{canary}; echo pwned > other/pwned.txt; echo pwned > mine/pwned.txt"),
        "working_dir": inside,
        "intent": {"expected_writes": [format!("sub/{canary}"), "other/pwned.txt", "mine/pwned.txt"]},
    });
    let (st, v) = attacker.submit(&d, &body);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["verdict"]["decision"], "promote", "{v}");
    let id = run_id_of(&v);
    let (_st, p) = promote(&d, Who::User, &id);
    assert_eq!(
        mine.snapshot(),
        before,
        "promoted outside the workspace: {p}"
    );
    let etc_canary = Path::new("/etc").join(canary);
    let landed = etc_canary.exists();
    let _ = std::fs::remove_file(&etc_canary);
    assert!(!landed, "promoted into /etc: {p}");
    assert_eq!(
        std::fs::read_dir(other.path()).unwrap().count(),
        1,
        "another user's directory was written: {p}"
    );
    assert_eq!(
        std::fs::read_to_string(other.path().join("canary.txt")).unwrap(),
        "canary\n"
    );
    assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0);
    // What the rehearsal saw in `sub` and `other` were the workspace's own
    // empty directories, never what the attacker mounted there.
    let seen = v["rehearsal"]["stdout"].as_str().unwrap_or("");
    let seen = seen.split("---").next().unwrap_or("");
    assert!(
        !seen.contains("passwd") && !seen.contains("canary") && !seen.contains("README"),
        "{seen}"
    );
}

/// Files of the container's own root that a process entering its view
/// could open (the C library's user and group databases and their
/// configuration, time zone, resolver, `/proc/self`, `/proc/sys`): each a
/// FIFO no one writes, so whoever opens one blocks.
const TRAPS: &str = include_str!("fixtures/container_traps.txt");

/// A container root of the attacker's: `usr`, `dev`, `sock` mount points,
/// `bin`, `lib`, `lib64` as the host has them, `ctrwork` (its workspace) and
/// every [`TRAPS`] entry a FIFO. The host has no `/ctrwork`.
fn trapped_root() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::Builder::new()
        .prefix("dryrun-hc-root-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = t.path().join("root");
    for d in ["usr", "dev", "sock", "ctrwork"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    for (l, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        std::os::unix::fs::symlink(to, r.join(l)).unwrap();
    }
    std::fs::write(r.join("ctrwork/README.md"), "hello\n").unwrap();
    for f in TRAPS.lines() {
        let p = r.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let st = Command::new("mkfifo").arg(&p).status().unwrap();
        assert!(st.success());
    }
    chown_to(&r, Who::User);
    (t, r)
}

/// Hostile: the container's root (the attacker's, chrooted into, as a
/// runtime pivots into an image) has a FIFO at every file the owner's
/// agent, forked into the view as root, could open before it drops its
/// rights (or after: it needs none of them). Submitted and promoted; a
/// process that opened any of them would block until the daemon's
/// deadline, and the submission or promotion would fail.
#[test]
fn nothing_in_the_containers_own_root_is_opened_by_the_daemon() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    assert!(!Path::new("/ctrwork").exists(), "the host has a /ctrwork");
    let d = Daemon::start(&[]);
    let (_t, root) = trapped_root();
    let (_keep, file) = agent_envelope_file(&envelope(Path::new("/ctrwork")).to_string());
    std::fs::copy(&file, root.join("env.json")).unwrap();
    chown_to(&root.join("env.json"), Who::User);
    let r = root.display();
    let sock_dir = d.socket.parent().unwrap().display();
    let mut attacker = Ns::new(
        Who::User,
        &format!(
            "mount --rbind /usr '{r}/usr'; mount --rbind /dev '{r}/dev'; mount --bind '{sock_dir}' '{r}/sock'"
        ),
    );
    let line = format!(
        "chroot '{r}' /usr/bin/{}",
        curl_line(Path::new("/sock/dryrun.sock"), Path::new("/env.json"))
    );
    let (st, v) = status_and_body(&attacker.run(&line));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["verdict"]["decision"], "promote", "{v}");
    let (st, p) = promote(&d, Who::User, &run_id_of(&v));
    assert_eq!(st, 200, "{p}");
    assert_eq!(
        std::fs::read_to_string(root.join("ctrwork/a.txt")).unwrap(),
        CONTENT
    );
    assert!(!Path::new("/ctrwork").exists());
}

/// A background loop in an attacker's namespace, killed (by its pid, which
/// it wrote to `pid_file`) when dropped.
struct Loop(PathBuf);

impl Drop for Loop {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
}

/// Hostile: the attacker swaps what is mounted at its `working_dir` (its
/// own workspace, `/etc`, another user's directory, nothing: the host's
/// directory at that path) as fast as it can: while it submits (the
/// daemon's first resolution, the agent's second one and the lower
/// layer's clone may each see another mount), and, for runs rehearsed in
/// its view, while they are promoted. Every submission is served on one
/// directory or refused; a run rehearsed in the view is promoted into its
/// workspace or refused, never into the host's directory at that path;
/// no file ever lands in `/etc` or in the other user's directory.
#[test]
fn swapping_the_mount_at_working_dir_never_lands_a_promotion_elsewhere() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    assert!(!Path::new("/etc/a.txt").exists());
    let d = Daemon::start(&[]);
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    let other = other_users_dir();
    let (t, inside) = empty_dir(Who::User);
    let ctl = t.path().join("ctl");
    std::fs::create_dir(&ctl).unwrap();
    chown_to(&ctl, Who::User);
    let _loop = Loop(ctl.join("pid"));
    let (i, o, w, c) = (
        inside.display(),
        other.path().display(),
        ws.dir.display(),
        ctl.display(),
    );
    // The loop runs until `stop` exists, then says `done`.
    let start = format!(
        "rm -f '{c}/stop' '{c}/done'; ( set +e; while [ ! -e '{c}/stop' ]; do for s in '{w}' /etc '{o}'; do mount --bind \"$s\" '{i}'; umount -l '{i}'; done; done; touch '{c}/done' ) </dev/null >/dev/null 2>&1 & echo $! > '{c}/pid'"
    );
    let stop = format!(
        "touch '{c}/stop'; while [ ! -e '{c}/done' ]; do sleep 0.01; done; echo stopped; while mountpoint -q '{i}'; do umount -l '{i}'; done"
    );
    let mut attacker = Ns::new(Who::User, "true");
    let check = |v: &Value, st: u16| {
        let landed = Path::new("/etc/a.txt").exists();
        let _ = std::fs::remove_file("/etc/a.txt");
        assert!(!landed, "promoted into /etc");
        assert_eq!(std::fs::read_dir(other.path()).unwrap().count(), 1);
        assert_eq!(
            std::fs::read_to_string(other.path().join("canary.txt")).unwrap(),
            "canary\n"
        );
        if st == 200 {
            // In the view: into its workspace, never the host's directory
            // at that path; on the host's directory: there.
            let (yes, no) = match v["workspace_view"].is_string() {
                true => (&ws.dir, &inside),
                false => (&inside, &ws.dir),
            };
            assert_eq!(
                std::fs::read_to_string(yes.join("a.txt")).unwrap_or_default(),
                CONTENT,
                "{v}"
            );
            assert!(!no.join("a.txt").exists(), "{v}");
        }
        for dir in [&ws.dir, &inside] {
            let _ = std::fs::remove_file(dir.join("a.txt"));
        }
    };
    let (mut served, mut promoted) = (0, 0);
    // Submitted while the mount swaps.
    attacker.run(&start);
    for _ in 0..6 {
        let (st, v) = attacker.submit(&d, &envelope(&inside));
        if st == 200 && v["verdict"]["decision"] == "promote" {
            served += 1;
            let (st, _p) = promote(&d, Who::User, &run_id_of(&v));
            check(&v, st);
        } else {
            // Refused, or rehearsed and failed (the mount the lower layer
            // is cloned from was gone): nothing to promote.
            assert!(
                [400, 403].contains(&st) || (st == 200 && v["verdict"]["decision"] != "promote"),
                "{st} {v}"
            );
        }
    }
    assert_eq!(attacker.run(&stop).trim(), "stopped");
    // Rehearsed in the view, promoted while the mount swaps.
    for _ in 0..6 {
        attacker.run(&format!("mount --bind '{w}' '{i}'"));
        let (st, v) = attacker.submit(&d, &envelope(&inside));
        assert_eq!(st, 200, "{v}");
        assert!(v["workspace_view"].is_string(), "{v}");
        attacker.run(&format!("umount -l '{i}'; {start}"));
        let (st, _p) = promote(&d, Who::User, &run_id_of(&v));
        assert_eq!(attacker.run(&stop).trim(), "stopped");
        check(&v, st);
        promoted += usize::from(st == 200);
    }
    eprintln!("served while swapping {served}, promoted while swapping {promoted}");
}

/// The connection's two tricks (python, in the attacker's namespace):
/// `unshare`: the connected process moves to a new mount namespace where
/// `INSIDE` is `TARGET`, then submits; `pass`: it hands the connection
/// (SCM_RIGHTS) to a child in such a namespace, which submits while the
/// connecting process waits.
const CONNECTION_TRICKS: &str = include_str!("fixtures/connection_tricks.py");

/// Hostile: the socket's peer is pinned when it connects, its view read
/// when it submits. The attacker connects from its namespace (where its
/// `working_dir` is its workspace), then either moves the connected
/// process to a namespace where that path is `/etc`, or hands the
/// connection to a child there. Moved: the path is resolved where the
/// pinned process is now (`/etc`, refused by the owner rule). Handed on:
/// resolved in the connecting process's view (its own workspace), never
/// in the child's. `/etc` is never written.
#[test]
fn a_connection_moved_or_handed_to_another_namespace_is_resolved_in_the_connectors_view() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    let (_t, inside) = empty_dir(Who::User);
    let mut attacker = Ns::new(
        Who::User,
        &format!("mount --bind '{}' '{}'", ws.dir.display(), inside.display()),
    );
    let body = envelope(&inside).to_string();
    let request = format!(
        "POST /v1/runs?wait=true HTTP/1.1\r\nHost: dryrun\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let dir = tempfile::Builder::new()
        .prefix("dryrun-hc-py-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (script, req) = (dir.path().join("tricks.py"), dir.path().join("req"));
    std::fs::write(&script, CONNECTION_TRICKS).unwrap();
    std::fs::write(&req, &request).unwrap();
    for mode in ["unshare", "pass"] {
        let out = attacker.run(&format!(
            "/usr/bin/python3 '{}' '{}' \"$(cat '{}')\" '{}' /etc {mode}",
            script.display(),
            d.socket.display(),
            req.display(),
            inside.display()
        ));
        assert!(!Path::new("/etc/a.txt").exists(), "{mode}: {out}");
        match mode {
            "unshare" => assert!(
                out.starts_with("HTTP/1.1 403") && out.contains("may only submit runs"),
                "{out}"
            ),
            _ => {
                assert!(out.starts_with("HTTP/1.1 200"), "{out}");
                let v: Value = serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap_or(""))
                    .unwrap_or(Value::Null);
                let (st, p) = promote(&d, Who::User, &run_id_of(&v));
                assert_eq!(st, 200, "{p}");
                assert_eq!(
                    std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
                    CONTENT
                );
            }
        }
    }
    assert!(!Path::new("/etc/a.txt").exists());
    assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0);
}

/// Another uid's run (root's, in a namespace of its own where its
/// workspace is bound at another path), rehearsed and held in its view:
/// (workspace, the namespace and its mount point, run id).
fn victims_view_run(d: &Daemon) -> (Ws, (Ns, tempfile::TempDir), String) {
    let ws = Ws::new(Who::Root);
    ws.write("README.md", "hello\n");
    let (t, inside) = empty_dir(Who::Root);
    let bind = format!("mount --bind '{}' '{}'", ws.dir.display(), inside.display());
    let mut victim = Ns::new(Who::Root, &bind);
    let (st, v) = victim.submit(d, &envelope(&inside));
    assert_eq!(st, 200, "{v}");
    (ws, (victim, t), run_id_of(&v))
}

/// Hostile: the attacker fills the daemon's registry of held views with
/// its own (one more than a uid may hold: 65 directories of its
/// workspace, each a view) to push out another uid's. The other uid's run
/// is still promoted in its view; the attacker's oldest is what was
/// forgotten (`workspace_gone`).
#[test]
fn one_uid_filling_the_view_registry_never_evicts_another_uids_view() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    const PER_UID: usize = 64;
    let d = Daemon::start(&[]);
    let (victim_ws, _victim, victim_run) = victims_view_run(&d);
    let ws = Ws::new(Who::User);
    for k in 0..=PER_UID {
        ws.write(&format!("d{k}/README.md"), "hello\n");
    }
    let (_t, inside) = empty_dir(Who::User);
    let mut attacker = Ns::new(
        Who::User,
        &format!("mount --bind '{}' '{}'", ws.dir.display(), inside.display()),
    );
    let mut first = None;
    for k in 0..=PER_UID {
        let (st, v) = attacker.submit(&d, &envelope(&inside.join(format!("d{k}"))));
        assert_eq!(st, 200, "{k}: {v}");
        assert!(v["workspace_view"].is_string(), "{v}");
        first.get_or_insert(run_id_of(&v));
    }
    let (st, p) = promote(&d, Who::User, first.as_deref().unwrap());
    assert_eq!(st, 409, "the attacker's oldest view was kept: {p}");
    assert!(p.to_string().contains("workspace_gone"), "{p}");
    let (st, p) = promote(&d, Who::Root, &victim_run);
    assert_eq!(st, 200, "the other uid's view was evicted: {p}");
    assert_eq!(
        std::fs::read_to_string(victim_ws.dir.join("a.txt")).unwrap(),
        CONTENT
    );
}

/// Hostile: a user with a subordinate uid range (as `useradd` gives one)
/// submits from 16 of its uids, 64 views each (what one uid may hold),
/// 1024 in all: the daemon's whole registry. Another uid's view, held
/// before, must survive: when the registry is full, the view forgotten is
/// the oldest of the uid holding the most, never that of a uid holding
/// one.
#[test]
fn many_uids_of_one_attacker_filling_the_registry_never_evict_another_uids_view() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    const UIDS: u32 = 16;
    const PER_UID: usize = 64;
    let d = Daemon::start(&[]);
    let (victim_ws, _victim, victim_run) = victims_view_run(&d);
    let (_, g) = test_user();
    for n in 0..UIDS {
        let uid = 47000 + n;
        let ws = Ws::new(Who::Root);
        for k in 0..PER_UID {
            ws.write(&format!("d{k}/README.md"), "hello\n");
        }
        chown_r(&ws.dir, uid, g);
        let (_t, inside) = empty_dir(Who::Root);
        chown_r(&inside, uid, g);
        let mut attacker = Ns::of_uid(
            uid,
            &format!("mount --bind '{}' '{}'", ws.dir.display(), inside.display()),
        );
        for k in 0..PER_UID {
            let (st, v) = attacker.submit(&d, &envelope(&inside.join(format!("d{k}"))));
            assert_eq!(st, 200, "{uid} {k}: {v}");
            assert!(v["workspace_view"].is_string(), "{v}");
        }
    }
    let (st, p) = promote(&d, Who::Root, &victim_run);
    assert_eq!(st, 200, "the other uid's view was evicted: {p}");
    assert_eq!(
        std::fs::read_to_string(victim_ws.dir.join("a.txt")).unwrap(),
        CONTENT
    );
}

/// Hostile: after a run rehearsed in its view was promoted, the attacker
/// changes what its `working_dir` names there (another directory of its
/// own holding a decoy `a.txt` just like the promoted one, then the
/// host's directory at that path)
/// and asks for a replay of the run and the rollback of its receipt. Each
/// is refused or done on the run's own directory (the replay rehearses
/// it, the rollback removes its `a.txt`); the decoy and the host's
/// directory are untouched.
#[test]
fn replay_and_rollback_after_the_view_changed_touch_only_the_runs_directory() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    let decoy = Ws::new(Who::User);
    decoy.write("a.txt", CONTENT);
    let before = decoy.snapshot();
    let (_t, inside) = empty_dir(Who::User);
    let i = inside.display();
    let mut attacker = Ns::new(
        Who::User,
        &format!("mount --bind '{}' '{i}'", ws.dir.display()),
    );
    let (st, v) = attacker.submit(&d, &envelope(&inside));
    assert_eq!(st, 200, "{v}");
    let id = run_id_of(&v);
    let (st, p) = promote(&d, Who::User, &id);
    assert_eq!(st, 200, "{p}");
    let receipt = p["receipt"]["receipt_id"].as_str().unwrap().to_string();
    let swaps = [
        format!(
            "umount -l '{i}'; mount --bind '{}' '{i}'",
            decoy.dir.display()
        ),
        format!("umount -l '{i}'"),
    ];
    for swap in &swaps {
        attacker.run(swap);
        let (st, r) = d.curl(
            Who::User,
            "POST",
            &format!("/v1/runs/{id}/replay?wait=true"),
            Some("{}"),
        );
        if st == 200 {
            assert_eq!(r["workspace_identity"], v["workspace_identity"], "{r}");
        }
        assert_eq!(decoy.snapshot(), before, "{swap}: replay: {r}");
        assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0, "{r}");
    }
    for swap in &swaps {
        attacker.run(swap);
        let (st, r) = d.curl(
            Who::User,
            "POST",
            &format!("/v1/receipts/{receipt}/rollback"),
            None,
        );
        assert_eq!(decoy.snapshot(), before, "{swap}: rollback: {r}");
        assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0, "{r}");
        if st == 200 {
            assert!(!ws.dir.join("a.txt").exists(), "{r}");
        } else {
            let m = r["error"]["message"].as_str().unwrap_or_default();
            assert_eq!(m.matches(&*inside.display().to_string()).count(), 1, "{m}");
            assert_eq!(
                std::fs::read_to_string(ws.dir.join("a.txt")).unwrap(),
                CONTENT
            );
        }
    }
    // The view as it was: the rollback is done there.
    attacker.run(&format!(
        "umount -l '{i}'; mount --bind '{}' '{i}'",
        ws.dir.display()
    ));
    let (st, r) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/receipts/{receipt}/rollback"),
        None,
    );
    assert_eq!(st, 200, "{r}");
    assert!(!ws.dir.join("a.txt").exists(), "{r}");
    assert_eq!(decoy.snapshot(), before);
}

/// Hostile: the attacker's own home (which no run may have as its
/// workspace: start-up files run code later) bound at its `working_dir`
/// in its view (a path that names no home on the host), then bound
/// inside a workspace of its own, a run writing its `.bashrc` there,
/// approved by a reviewer (who sees `h/.bashrc` in a workspace). The
/// first is refused as a home (compared by device and inode); the second
/// rehearses the workspace's own directory and its promotion does not
/// cross into the home.
#[test]
fn the_attackers_home_in_its_view_is_no_workspace_and_no_way_out() {
    if !require_root() || !require_tool("unshare", "util-linux") {
        return;
    }
    let home = PathBuf::from("/home/dryrun-test");
    assert!(home.is_dir(), "the test user has no home");
    let bashrc = std::fs::read(home.join(".bashrc")).ok();
    let d = Daemon::start(&[]);
    let (_t, inside) = empty_dir(Who::User);
    let i = inside.display();
    let mut attacker = Ns::new(
        Who::User,
        &format!("mount --bind '{}' '{i}'", home.display()),
    );
    let (st, v) = attacker.submit(&d, &envelope(&inside));
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("is the home directory of"), "{v}");
    let ws = Ws::new(Who::User);
    ws.write("h/README.md", "hello\n");
    let line = format!(
        "umount -l '{i}'; mount --bind '{}' '{i}'; mount --bind '{}' '{i}/h'",
        ws.dir.display(),
        home.display()
    );
    attacker.run(&line);
    let body = serde_json::json!({
        "command": "echo 'echo pwned' > h/.bashrc",
        "working_dir": inside,
        "intent": {"expected_writes": ["h/.bashrc"]},
    });
    let (st, v) = attacker.submit(&d, &body);
    assert_eq!(st, 200, "{v}");
    // A start-up file waits for a reviewer, who sees `h/.bashrc` in a
    // workspace and approves it.
    let id = run_id_of(&v);
    if v["state"] == "awaiting_approval" {
        let path = format!("/v1/runs/{id}/approve");
        let (st, a) = d.curl(Who::Root, "POST", &path, Some(r#"{"note": "ok"}"#));
        assert_eq!(st, 200, "{a}");
    }
    let (_st, p) = promote(&d, Who::User, &id);
    let now = std::fs::read(home.join(".bashrc")).ok();
    if bashrc.is_none() {
        let _ = std::fs::remove_file(home.join(".bashrc"));
    }
    assert_eq!(now, bashrc, "{p}");
}
