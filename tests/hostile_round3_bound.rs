//! The workspace bound (issue 29, hostile round 3): a home directory, a
//! directory holding one, or `/` is no workspace, through every door (the
//! CLI's in-process engine, the daemon as the unprivileged test user, MCP
//! `execute`, the Claude Code hook), however the path is spelled: the home
//! itself, a symlink to it, a bind mount of it, a path with `..` into it,
//! a directory holding homes (by path and through bind mounts). Only the
//! system policy (`workspace_bound: {allow_homes: true}`) allows it again;
//! a workspace policy cannot; an ordinary project still runs. Each refusal
//! is checked on the host: nothing was rehearsed (no run in the state
//! directory, the home unchanged).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use common::daemon::{Daemon, require_root};
use common::hook::claude_event;
use common::*;

/// The test user's home as the password database names it, created (owned
/// by the test user) when it does not exist yet, with a `sub/` for the
/// `..` spelling.
fn test_home() -> PathBuf {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let (u, g) = test_user();
        let out = Command::new("getent")
            .args(["passwd", TEST_USER])
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        let home = PathBuf::from(line.trim().split(':').nth(5).expect("a passwd entry"));
        assert!(
            home.is_absolute() && home != Path::new("/"),
            "the test user's home is {home:?}"
        );
        std::fs::create_dir_all(home.join("sub")).unwrap();
        for p in [home.clone(), home.join("sub")] {
            std::os::unix::fs::chown(&p, Some(u), Some(g)).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        home
    })
    .clone()
}

/// Directories, files and bind mounts made for a test, undone in reverse
/// order WITHOUT ever recursing: a mount is taken down, then its mount
/// point removed with `rmdir`. A mount that would not come down leaves its
/// directories in place (a recursive removal would walk into the bound
/// home, or into everything under `/home`).
#[derive(Default)]
struct Scratch(Vec<(PathBuf, Made)>);

enum Made {
    Dir,
    File,
    Mount,
}

impl Scratch {
    fn dir(&mut self, p: &Path) -> PathBuf {
        std::fs::create_dir(p).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        self.0.push((p.to_path_buf(), Made::Dir));
        p.to_path_buf()
    }

    /// A directory owned by the test user.
    fn user_dir(&mut self, p: &Path) -> PathBuf {
        self.dir(p);
        let (u, g) = test_user();
        std::os::unix::fs::chown(p, Some(u), Some(g)).unwrap();
        p.to_path_buf()
    }

    fn file(&mut self, p: &Path, content: &str) {
        std::fs::write(p, content).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
        self.0.push((p.to_path_buf(), Made::File));
    }

    fn symlink(&mut self, target: &Path, p: &Path) -> PathBuf {
        std::os::unix::fs::symlink(target, p).unwrap();
        self.0.push((p.to_path_buf(), Made::File));
        p.to_path_buf()
    }

    /// `src` bound at `at` (a new directory).
    fn bind(&mut self, src: &Path, at: &Path) -> PathBuf {
        self.dir(at);
        let st = Command::new("mount")
            .arg("--bind")
            .arg(src)
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "mount --bind {src:?} {at:?}");
        self.0.push((at.to_path_buf(), Made::Mount));
        at.to_path_buf()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for (p, m) in self.0.drain(..).rev() {
            let _ = match m {
                Made::Mount => Command::new("umount").arg(&p).status().map(|_| ()),
                Made::Dir => std::fs::remove_dir(&p),
                Made::File => std::fs::remove_file(&p),
            };
        }
    }
}

/// A fresh directory under /tmp for a [`Scratch`].
fn scratch_base(s: &mut Scratch) -> PathBuf {
    s.dir(&PathBuf::from(format!(
        "/tmp/dryrun-bound-{}",
        random_hex()
    )))
}

/// Every spelling of "a home, or a directory holding one" the doors must
/// refuse: (label, path, what the refusal says).
struct Spots {
    list: Vec<(&'static str, PathBuf, &'static str)>,
    _scratch: Scratch,
}

const IS_HOME: &str = "is the home directory of dryrun-test";
const HOLDS_HOME: &str = "contains the home directory of";

fn spots() -> Spots {
    let home = test_home();
    let parent = home.parent().unwrap().to_path_buf();
    let mut s = Scratch::default();
    let base = scratch_base(&mut s);
    let link = s.symlink(&home, &base.join("link"));
    let bound_home = s.bind(&home, &base.join("bind"));
    let bound_parent = s.bind(&parent, &base.join("homes"));
    // A directory of the test user's, holding a bind mount of /home.
    let holder = s.user_dir(&base.join("holder"));
    s.bind(&parent, &holder.join("homes"));
    // A directory inside a bind mount of the filesystem that holds the
    // homes' directory: the same directory as /home, by another path,
    // and no mount point itself (where /home is a mount of its own, the
    // mount point: refused all the same).
    let out = Command::new("findmnt")
        .args(["-n", "-o", "TARGET", "-T"])
        .arg(&parent)
        .output()
        .unwrap();
    let fs_root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(fs_root.is_absolute(), "findmnt: {out:?}");
    let fs_bind = s.bind(&fs_root, &base.join("fs"));
    let inside = fs_bind.join(parent.strip_prefix(&fs_root).unwrap());
    let list = vec![
        ("the home", home.clone(), IS_HOME),
        ("a symlink to the home", link, IS_HOME),
        ("a bind mount of the home", bound_home, IS_HOME),
        ("a path with .. into the home", home.join("sub/.."), IS_HOME),
        (
            "a trailing slash",
            PathBuf::from(format!("{}/", home.display())),
            IS_HOME,
        ),
        ("the directory holding homes", parent, HOLDS_HOME),
        (
            "a bind mount of the directory holding homes",
            bound_parent,
            HOLDS_HOME,
        ),
        (
            "a directory of the user's holding a bind mount of /home",
            holder,
            HOLDS_HOME,
        ),
        (
            "the homes' directory inside a bind mount of its filesystem",
            inside,
            HOLDS_HOME,
        ),
        ("the root directory", PathBuf::from("/"), "root directory"),
    ];
    Spots { list, _scratch: s }
}

/// A system policy directory that lets homes be workspaces (the positive
/// control), readable by everyone.
fn allowing_policy_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-bound-policy-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = d.path().join("50-homes.yaml");
    std::fs::write(&f, "workspace_bound: {allow_homes: true}\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    d
}

/// Runs a state directory holds.
fn runs_in(state: &Path) -> usize {
    std::fs::read_dir(state.join("runs"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// A refusal names the spot's problem and how to allow it, and nothing
/// ran.
fn assert_refused(door: &str, label: &str, text: &str, expect: &str) {
    assert!(
        text.contains(expect),
        "{door}, {label}: the refusal does not say {expect:?}: {text}"
    );
    if expect != "root directory" {
        assert!(
            text.contains("allow_homes") && text.contains("system policy"),
            "{door}, {label}: the refusal does not say how to allow it: {text}"
        );
    }
}

/// A state directory of `who`'s.
fn state_of(who: Who) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("dryrun-bound-state-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = d.path().join("state");
    std::fs::create_dir(&state).unwrap();
    if who == Who::User {
        let (u, g) = test_user();
        std::os::unix::fs::chown(&state, Some(u), Some(g)).unwrap();
    }
    (d, state)
}

/// The dryrun binary run as `who`.
fn dryrun_as(who: Who) -> Command {
    match who {
        Who::User => as_test_user(bin()),
        Who::Root => Command::new(bin()),
    }
}

/// `dryrun execute --local` by `who` in `ws`, on `state`.
fn cli_local(who: Who, ws: &Path, state: &Path, env: &[(&str, &Path)]) -> Output {
    let mut c = dryrun_as(who);
    c.env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", "/nonexistent")
        .env("DRYRUN_STATE_DIR", state)
        .env("DRYRUN_LOCAL", "1")
        .current_dir("/tmp")
        .stdin(Stdio::null())
        .args(["execute", "--json", "--local", "--workspace"])
        .arg(ws)
        .args(["--command", "true"]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Attack: each spelling of a home (or a directory holding one) as the
/// workspace of an in-process run, as root and as the test user. Refused
/// with exit 2 and nothing rehearsed; allowed again only by the system
/// policy; an ordinary project runs.
#[test]
fn the_cli_refuses_a_home_or_a_directory_holding_one_however_it_is_spelled() {
    if !require_root() {
        return;
    }
    let s = spots();
    for who in [Who::Root, Who::User] {
        let (_d, state) = state_of(who);
        for (label, ws, expect) in &s.list {
            let o = cli_local(who, ws, &state, &[]);
            assert_eq!(o.status.code(), Some(2), "{who:?} {label}: {}", text(&o));
            assert_refused(&format!("cli {who:?}"), label, &text(&o), expect);
        }
        assert_eq!(runs_in(&state), 0, "{who:?}: something was rehearsed");
        // The system policy allows it again (positive control).
        let allow = allowing_policy_dir();
        let o = cli_local(
            who,
            &test_home(),
            &state,
            &[("DRYRUN_SYSTEM_POLICY_DIR", allow.path())],
        );
        let r = to_run(o);
        assert_eq!(r.code, 0, "{who:?}: allowed home: {r:?}");
        assert_eq!(r.decision(), "promote");
        // The same policy in a directory the user may write is not system
        // configuration: the variable is ignored and the home refused.
        let forged = allowing_policy_dir();
        let (u, g) = test_user();
        std::os::unix::fs::chown(forged.path(), Some(u), Some(g)).unwrap();
        let o = cli_local(
            who,
            &test_home(),
            &state,
            &[("DRYRUN_SYSTEM_POLICY_DIR", forged.path())],
        );
        assert_eq!(
            o.status.code(),
            Some(2),
            "{who:?} forged policy dir: {}",
            text(&o)
        );
        // An ordinary project runs.
        let ws = Ws::new(who);
        let r = to_run(cli_local(who, &ws.dir, &state, &[]));
        assert_eq!(r.code, 0, "{who:?}: ordinary project: {r:?}");
    }
}

/// Attack: a workspace policy in the home that tries to allow it. Only the
/// system policy decides: still refused.
#[test]
fn a_workspace_policy_cannot_allow_a_home() {
    if !require_root() {
        return;
    }
    let home = test_home();
    let (u, g) = test_user();
    let mut s = Scratch::default();
    // A directory of the user's with `.dryrun/policy.yaml` allowing
    // homes, inside which the user's home is bound.
    let dir = s.user_dir(&home.join(format!("bound-ws-{}", random_hex())));
    let pol = s.user_dir(&dir.join(".dryrun"));
    s.file(
        &pol.join("policy.yaml"),
        "workspace_bound: {allow_homes: true}\n",
    );
    std::os::unix::fs::chown(pol.join("policy.yaml"), Some(u), Some(g)).unwrap();
    s.bind(&home, &dir.join("inner"));
    let (_d, state) = state_of(Who::User);
    let o = cli_local(Who::User, &dir, &state, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_refused("cli", "workspace policy", &text(&o), HOLDS_HOME);
    assert_eq!(runs_in(&state), 0);
}

/// Attack: the in-process caller's own `$HOME` as the workspace (a home
/// the password database may not list, e.g. a sandboxed agent's).
#[test]
fn the_callers_own_home_is_refused_in_process() {
    let ws = Ws::new(Who::User);
    let r = ws
        .command()
        .env("HOME", &ws.dir)
        .args(["execute", "--json", "--command", "true"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert_refused(
        "cli",
        "$HOME",
        &text(&r),
        "is the home directory of the caller ($HOME)",
    );
    assert_eq!(runs_in(&ws.state), 0);
    // A project inside the caller's home is fine.
    let r = ws.rehearse("true", &[]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// Attack: the agent (the unprivileged test user) submits each spelling to
/// a root daemon, through the CLI and as a raw API request.
#[test]
fn the_daemon_refuses_a_home_or_a_directory_holding_one_from_an_agent() {
    if !require_root() {
        return;
    }
    let s = spots();
    let d = Daemon::start(&[]);
    for (label, ws, expect) in &s.list {
        let o = d
            .cli_user()
            .args(["execute", "--json", "--workspace"])
            .arg(ws)
            .args(["--command", "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{label}: {}", text(&o));
        assert_refused("daemon cli", label, &text(&o), expect);
        let body = serde_json::json!({"command": "true", "working_dir": ws}).to_string();
        let (status, v) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
        assert_eq!(status, 400, "{label}: {v}");
        assert_refused(
            "daemon api",
            label,
            v["error"]["message"].as_str().unwrap_or(""),
            expect,
        );
    }
    assert_eq!(runs_in(&d.state), 0, "something was rehearsed");
    // An ordinary project of the agent's runs.
    let ws = common::daemon::user_workspace();
    let o = d
        .cli_user()
        .args(["execute", "--json", "--workspace"])
        .arg(&ws.dir)
        .args(["--command", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The system policy allows homes again (positive control).
    let allow = allowing_policy_dir();
    let d2 = Daemon::start_env(
        &[],
        &[("DRYRUN_SYSTEM_POLICY_DIR", allow.path().to_str().unwrap())],
    );
    let o = d2
        .cli_user()
        .args(["execute", "--json", "--workspace"])
        .arg(test_home())
        .args(["--command", "true"])
        .output()
        .unwrap();
    let r = to_run(o);
    assert_eq!(r.code, 0, "allowed home: {r:?}");
    assert_eq!(r.decision(), "promote");
}

/// `dryrun mcp` as `who`: initialize, then one `execute` call of `true`
/// in `ws`. Returns the call's result.
fn mcp_execute(who: Who, ws: &Path, state: &Path, env: &[(&str, &Path)]) -> Value {
    mcp_call(
        who,
        state,
        env,
        serde_json::json!({"command": "true", "working_dir": ws}),
    )
}

/// `execute` of `cmd` in `ws`, intent `**`.
fn mcp_execute_cmd(ws: &Path, state: &Path, cmd: &str) -> Value {
    mcp_call(
        Who::User,
        state,
        &[],
        serde_json::json!({"command": cmd, "working_dir": ws, "expected_writes": ["**"]}),
    )
}

/// `dryrun mcp` as `who`: initialize, then one `execute` call with `args`.
fn mcp_call(who: Who, state: &Path, env: &[(&str, &Path)], args: Value) -> Value {
    let mut c = dryrun_as(who);
    c.env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", "/nonexistent")
        .env("DRYRUN_STATE_DIR", state)
        .env("DRYRUN_LOCAL", "1")
        .current_dir("/tmp")
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut ch = c.spawn().unwrap();
    let mut stdin = ch.stdin.take().unwrap();
    let mut out = BufReader::new(ch.stdout.take().unwrap());
    let send = |stdin: &mut std::process::ChildStdin, v: Value| {
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    let read_id = |out: &mut BufReader<std::process::ChildStdout>, id: i64| -> Value {
        loop {
            let mut line = String::new();
            let n = out.read_line(&mut line).unwrap();
            assert!(n > 0, "dryrun mcp closed its output");
            let v: Value = serde_json::from_str(line.trim()).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    send(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bound-test", "version": "1"}}}),
    );
    read_id(&mut out, 1);
    send(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    send(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "execute",
            "arguments": args}}),
    );
    let v = read_id(&mut out, 2);
    drop(stdin);
    let _ = ch.wait();
    v
}

/// The text of an MCP tool result.
fn mcp_text(v: &Value) -> String {
    v["result"]["content"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| v.to_string())
}

/// Attack: MCP `execute` (which has no project bound of its own) with each
/// spelling as its `working_dir`, by the agent's uid and by root.
#[test]
fn mcp_execute_refuses_a_home_or_a_directory_holding_one() {
    if !require_root() {
        return;
    }
    let s = spots();
    for who in [Who::User, Who::Root] {
        let (_d, state) = state_of(who);
        for (label, ws, expect) in &s.list {
            let v = mcp_execute(who, ws, &state, &[]);
            assert_eq!(v["result"]["isError"], true, "{who:?} {label}: {v}");
            assert_refused(&format!("mcp {who:?}"), label, &mcp_text(&v), expect);
        }
        assert_eq!(runs_in(&state), 0, "{who:?}: something was rehearsed");
    }
    let (_d, state) = state_of(Who::User);
    let ws = Ws::new(Who::User);
    let v = mcp_execute(Who::User, &ws.dir, &state, &[]);
    assert_eq!(
        v["result"]["structuredContent"]["decision"], "promote",
        "ordinary project: {v}"
    );
    let allow = allowing_policy_dir();
    let v = mcp_execute(
        Who::User,
        &test_home(),
        &state,
        &[("DRYRUN_SYSTEM_POLICY_DIR", allow.path())],
    );
    assert_eq!(
        v["result"]["structuredContent"]["decision"], "promote",
        "allowed home: {v}"
    );
}

/// `dryrun hook claude-code` as `who`, with its event's cwd.
fn hook_as(who: Who, cwd: &Path, state: &Path, env: &[(&str, &Path)]) -> Output {
    let mut c = dryrun_as(who);
    c.env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", "/nonexistent")
        .env("DRYRUN_STATE_DIR", state)
        .env("DRYRUN_LOCAL", "1")
        .current_dir("/tmp")
        .args(["hook", "claude-code"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut ch = c.spawn().unwrap();
    ch.stdin
        .take()
        .unwrap()
        .write_all(
            claude_event(cwd, "echo planted > planted.txt")
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    ch.wait_with_output().unwrap()
}

/// Attack: the agent `cd`s into each spelling (the event's cwd; no
/// project directory named), and the hook blocks the call (exit 2) with
/// the reason; nothing lands in the home. The hook run by the agent's uid
/// and by root.
#[test]
fn the_claude_code_hook_refuses_a_home_or_a_directory_holding_one() {
    if !require_root() {
        return;
    }
    let s = spots();
    for who in [Who::User, Who::Root] {
        let (_d, state) = state_of(who);
        for (label, ws, expect) in &s.list {
            let o = hook_as(who, ws, &state, &[]);
            assert_eq!(o.status.code(), Some(2), "{who:?} {label}: {}", text(&o));
            assert!(o.stdout.is_empty(), "{who:?} {label}: an answer on stdout");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_refused(&format!("hook {who:?}"), label, &err, expect);
        }
        assert_eq!(runs_in(&state), 0, "{who:?}: something was rehearsed");
    }
    assert!(!test_home().join("planted.txt").exists());
    let (_d, state) = state_of(Who::User);
    // An ordinary project: rehearsed and allowed.
    let ws = Ws::new(Who::User);
    let o = hook_as(Who::User, &ws.dir, &state, &[]);
    let a = common::hook::answer(&o);
    assert_eq!(
        a["hookSpecificOutput"]["permissionDecision"], "allow",
        "{a}"
    );
    // The system policy allows homes again.
    let allow = allowing_policy_dir();
    let o = hook_as(
        Who::User,
        &test_home(),
        &state,
        &[("DRYRUN_SYSTEM_POLICY_DIR", allow.path())],
    );
    let a = common::hook::answer(&o);
    assert_eq!(
        a["hookSpecificOutput"]["permissionDecision"], "allow",
        "allowed home: {a}"
    );
}

/// Attack: an agent rewrites the configuration that guards it (the hook's
/// `dryrun.yaml`, the agent host's settings, the MCP server list) through
/// a door other than the hook, with intent `**`. The engine's built-in
/// forbidden paths hold for every door: blocked, not promotable.
#[test]
fn the_builtin_forbidden_paths_hold_through_every_door() {
    if !require_root() {
        return;
    }
    let cmd = "mkdir -p .claude .codex && echo '{}' > .claude/settings.json \
               && echo x > .codex/config.toml && echo '{}' > .mcp.json \
               && echo 'hook: {}' > dryrun.yaml && echo ok > notes.txt";
    let forbidden = [
        ".claude/settings.json",
        ".codex/config.toml",
        ".mcp.json",
        "dryrun.yaml",
    ];
    let check = |door: &str, r: &Value| {
        assert_eq!(r["verdict"]["decision"], "blocked", "{door}: {r}");
        let touched = strings(&r["verdict"]["forbidden_paths_touched"]);
        for p in forbidden {
            assert!(
                touched.iter().any(|t| t == p),
                "{door}: {p} not forbidden: {touched:?}"
            );
        }
        assert!(
            !touched.iter().any(|t| t == "notes.txt"),
            "{door}: {touched:?}"
        );
    };
    // The CLI's in-process engine, as the test user.
    let ws = Ws::new(Who::User);
    let r = ws.rehearse_untouched(cmd, &["--expect-write", "**"]);
    assert_eq!(r.code, 4, "{r:?}");
    check("cli", &r.json);
    // The daemon, the agent submitting.
    let d = Daemon::start(&[]);
    let ws = common::daemon::user_workspace();
    let o = d
        .cli_user()
        .args(["execute", "--json", "--expect-write", "**", "--workspace"])
        .arg(&ws.dir)
        .args(["--command", cmd])
        .output()
        .unwrap();
    let r = to_run(o);
    assert_eq!(r.code, 4, "{r:?}");
    check("daemon", &r.json);
    // MCP execute.
    let ws = Ws::new(Who::User);
    let (_d, state) = state_of(Who::User);
    let v = mcp_execute_cmd(&ws.dir, &state, cmd);
    let id = v["result"]["structuredContent"]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("mcp: {v}"))
        .to_string();
    let rec = Command::new(bin())
        .env("DRYRUN_STATE_DIR", &state)
        .env("DRYRUN_LOCAL", "1")
        .args(["show", "--json", &id])
        .output()
        .unwrap();
    check("mcp", &serde_json::from_slice(&rec.stdout).unwrap());
    assert!(!ws.dir.join(".mcp.json").exists());
}
