//! Shared harness for the threat tests: real binary, real sandbox, real
//! workspaces, run both as root (ids shifted to an unprivileged range) and
//! as an ordinary user created here.
#![allow(dead_code)]

pub mod containers;
pub mod daemon;
pub mod fleet;
pub mod hook;
pub mod leaks;
pub mod net;
pub mod ns;
pub mod pg;
pub mod python;
pub mod terminal;
pub mod tmux;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

pub use serde_json::Value;

/// The unprivileged identity the tests create and use.
pub const TEST_USER: &str = "dryrun-test";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Root,
    User,
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dryrun"))
}

pub fn is_root() -> bool {
    nix_geteuid() == 0
}

fn nix_geteuid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

/// (uid, gid) of the test user, creating it when running as root.
pub fn test_user() -> (u32, u32) {
    static USER: OnceLock<(u32, u32)> = OnceLock::new();
    *USER.get_or_init(|| {
        if !is_root() {
            let m = std::fs::metadata("/proc/self").unwrap();
            return (m.uid(), m.gid());
        }
        let lookup = || -> Option<(u32, u32)> {
            let out = Command::new("id").arg("-u").arg(TEST_USER).output().ok()?;
            let uid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
            let out = Command::new("id").arg("-g").arg(TEST_USER).output().ok()?;
            let gid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
            Some((uid, gid))
        };
        if let Some(ids) = lookup() {
            return ids;
        }
        // Several test binaries may race to create the user.
        let _ = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/bin/bash",
                TEST_USER,
            ])
            .status();
        lookup().expect("test user exists after useradd")
    })
}

/// Identities to run a test as: both when root; when not root only the
/// current user (and the root half is reported as skipped, or fails when
/// DRYRUN_TEST_REQUIRE_ROOT=1 as in CI).
pub fn identities() -> Vec<Who> {
    if is_root() {
        vec![Who::Root, Who::User]
    } else {
        if std::env::var("DRYRUN_TEST_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
            panic!("DRYRUN_TEST_REQUIRE_ROOT=1 but the tests are not running as root");
        }
        eprintln!(
            "SKIP root half: the tests are not running as root, so the shifted-id sandbox cannot be exercised"
        );
        vec![Who::User]
    }
}

/// The one gate of a test that needs root (a second identity, canaries in
/// root's places): true as root; otherwise a failure under CI's pin
/// (`DRYRUN_TEST_REQUIRE_ROOT=1`), else a skip that says why.
pub fn require_root() -> bool {
    if is_root() {
        return true;
    }
    if pinned("DRYRUN_TEST_REQUIRE_ROOT") {
        panic!("DRYRUN_TEST_REQUIRE_ROOT=1 but the tests are not running as root");
    }
    eprintln!(
        "SKIP: this test needs root (a second identity, or canaries in root's places); run the tests as root"
    );
    false
}

/// `VAR=1` is set: one of CI's pins (see `.ci/run`).
fn pinned(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// The directories [`require_tool`] looks for a bare program name in.
const TOOL_PATH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/// The gate of a test that drives `tool` (a bare name looked up on the usual
/// PATH, or an absolute path): true when it is there; otherwise a failure
/// under CI's pin (`DRYRUN_TEST_REQUIRE_TOOLS=1`) naming `debian_package`,
/// the package that provides it, else a skip that says why.
pub fn require_tool(tool: &str, debian_package: &str) -> bool {
    let found = if tool.contains('/') {
        Path::new(tool).exists()
    } else {
        TOOL_PATH.iter().any(|d| Path::new(d).join(tool).exists())
    };
    if !found {
        tool_missing(&format!("{tool} is not installed"), debian_package);
    }
    found
}

/// `tool` for `Command::new` where a test cannot go on without it: the
/// program's name when it is installed, else a failure naming the Debian
/// package that provides it (`tests/run.sh` installs them all), never a
/// bare "No such file or directory" from deep inside a helper.
pub fn tool(tool: &'static str, debian_package: &str) -> &'static str {
    let found = if tool.contains('/') {
        Path::new(tool).exists()
    } else {
        TOOL_PATH.iter().any(|d| Path::new(d).join(tool).exists())
    };
    assert!(
        found,
        "{tool} is not installed: install the Debian package {debian_package} (tests/run.sh does)"
    );
    tool
}

/// A program a test needs is missing or not as the test needs it: a failure
/// under `DRYRUN_TEST_REQUIRE_TOOLS=1`, else a skip, each naming the Debian
/// package that provides it.
pub fn tool_missing(what: &str, debian_package: &str) {
    if pinned("DRYRUN_TEST_REQUIRE_TOOLS") {
        panic!(
            "DRYRUN_TEST_REQUIRE_TOOLS=1 but {what}: install the Debian package {debian_package} (tests/run.sh does)"
        );
    }
    eprintln!("SKIP: {what} (the Debian package {debian_package} provides it)");
}

/// The gate of a test that drives the cgroup v1 `controller` hierarchy
/// (`/sys/fs/cgroup/CONTROLLER`): true when the host mounts it; otherwise
/// a failure under CI's pin (`DRYRUN_EXPECT_CGROUP=v1`), else a skip that
/// says why (a cgroup v2 host has no such hierarchy).
pub fn require_cgroup_v1(controller: &str) -> bool {
    let dir = Path::new("/sys/fs/cgroup").join(controller);
    if dir.join("cgroup.procs").exists() {
        return true;
    }
    let why = format!(
        "this host has no cgroup v1 {controller} hierarchy at {} (a cgroup v2 host has none)",
        dir.display()
    );
    if std::env::var("DRYRUN_EXPECT_CGROUP").is_ok_and(|v| v == "v1") {
        panic!("DRYRUN_EXPECT_CGROUP=v1 but {why}");
    }
    eprintln!("SKIP: {why}");
    false
}

pub struct Ws {
    pub who: Who,
    pub root: tempfile::TempDir,
    pub dir: PathBuf,
    pub state: PathBuf,
}

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

/// The run's id, from its record (a panic naming the record when it has
/// none).
pub fn run_id(r: &Run) -> String {
    r.json["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {r:?}"))
        .to_string()
}

impl Run {
    pub fn decision(&self) -> &str {
        self.json["verdict"]["decision"].as_str().unwrap_or("")
    }
    pub fn out(&self) -> &str {
        self.json["rehearsal"]["stdout"].as_str().unwrap_or("")
    }
    pub fn err(&self) -> &str {
        self.json["rehearsal"]["stderr"].as_str().unwrap_or("")
    }
    pub fn exit_code(&self) -> Option<i64> {
        self.json["rehearsal"]["exit_code"].as_i64()
    }
    pub fn changes(&self) -> Vec<Value> {
        self.json["rehearsal"]["changes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
    pub fn change(&self, path: &str) -> Option<Value> {
        self.changes().into_iter().find(|c| c["path"] == path)
    }
    pub fn limits_hit(&self) -> Vec<String> {
        strings(&self.json["rehearsal"]["limits_hit"])
    }
    pub fn reasons(&self) -> Vec<String> {
        strings(&self.json["verdict"]["reasons"])
    }
    pub fn notes(&self) -> Vec<String> {
        strings(&self.json["verdict"]["notes"])
    }
    pub fn stripped(&self) -> Vec<String> {
        strings(&self.json["rehearsal"]["stripped"])
    }
    pub fn blocked(&self) -> Vec<Value> {
        self.json["rehearsal"]["blocked"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Ws {
    pub fn new(who: Who) -> Ws {
        let root = tempfile::Builder::new()
            .prefix("dryrun-test-")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = root.path().join("ws");
        let state = root.path().join("state");
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&state).unwrap();
        let ws = Ws {
            who,
            root,
            dir,
            state,
        };
        ws.chown_all();
        ws
    }

    /// Give the workspace to the identity that runs dryrun.
    pub fn chown_all(&self) {
        if self.who == Who::User && is_root() {
            let (u, g) = test_user();
            for p in [&self.dir, &self.state] {
                let st = Command::new("chown")
                    .arg("-R")
                    .arg("-h")
                    .arg(format!("{u}:{g}"))
                    .arg(p)
                    .status()
                    .unwrap();
                assert!(st.success());
            }
        }
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        self.chown_all();
        p
    }

    /// A listing of everything in the workspace: type, mode, owner, size,
    /// mtime, content hash or link target. Used to prove a rehearsal left the
    /// real workspace byte-identical.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        snapshot_tree(&self.dir)
    }

    pub fn command(&self) -> Command {
        self.command_via(&[])
    }

    /// [`Ws::command`] started through `wrapper` (a program that ends by
    /// running its remaining arguments, such as `nsenter ... --`), as root,
    /// before the switch to the test user.
    pub fn command_via(&self, wrapper: &[String]) -> Command {
        let user = self.who == Who::User && is_root();
        let c = match (wrapper.split_first(), user) {
            (None, false) => Command::new(bin()),
            (None, true) => as_test_user(bin()),
            (Some((program, args)), user) => {
                let mut c = Command::new(program);
                c.args(args);
                if user {
                    c.args(as_test_user_argv());
                }
                c.arg(bin());
                c
            }
        };
        self.dryrun_env(c)
    }

    /// [`Ws::command`], for a user workspace as the test user with its
    /// supplementary groups from the group database (`setpriv
    /// --init-groups`, as a login gives them) instead of none.
    pub fn command_with_groups(&self) -> Command {
        if self.who != Who::User || !is_root() {
            return self.command();
        }
        let mut argv = as_test_user_argv();
        for a in argv.iter_mut() {
            if a == "--clear-groups" {
                *a = "--init-groups".into();
            }
        }
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).arg(bin());
        self.dryrun_env(c)
    }

    /// [`Ws::command`] with `dryrun` started through `prefix`: a program and
    /// its arguments that end by exec'ing the rest of their argv (the
    /// dryrun binary first), as the same identity (the test user's, for a
    /// user workspace: the prefix runs as that user too).
    pub fn command_through(&self, prefix: &[std::ffi::OsString]) -> Command {
        let Some((program, rest)) = prefix.split_first() else {
            return self.command();
        };
        let mut c = if self.who == Who::User && is_root() {
            as_test_user(program)
        } else {
            Command::new(program)
        };
        c.args(rest).arg(bin());
        self.dryrun_env(c)
    }

    fn dryrun_env(&self, mut c: Command) -> Command {
        c.env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.root.path())
            .env("DRYRUN_STATE_DIR", &self.state)
            // Never reach a daemon that happens to run on this machine.
            .env("DRYRUN_LOCAL", "1")
            .current_dir(&self.dir)
            .stdin(Stdio::null());
        c
    }

    /// `dryrun execute --json ARGS...` in this workspace.
    pub fn execute(&self, args: &[&str]) -> Run {
        let mut c = self.command();
        c.arg("execute").arg("--json").args(args);
        let out = c.output().expect("dryrun runs");
        to_run(out)
    }

    /// Rehearse one shell command, with extra `execute` arguments.
    pub fn rehearse(&self, cmd: &str, extra: &[&str]) -> Run {
        let mut args = vec!["--command", cmd];
        args.extend_from_slice(extra);
        self.execute(&args)
    }

    /// Rehearse and assert the real workspace did not change at all.
    pub fn rehearse_untouched(&self, cmd: &str, extra: &[&str]) -> Run {
        let before = self.snapshot();
        let r = self.rehearse(cmd, extra);
        assert_eq!(
            before,
            self.snapshot(),
            "the real workspace changed during a rehearsal of {cmd:?}"
        );
        r
    }
}

/// The system's PATH, for what the test user runs: root's own PATH may name
/// directories under root's 0700 home first (a pyenv shim for `python3`),
/// where the test user's lookup ends in "Permission denied".
pub const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// `program` run as the unprivileged test user (root only), found on (and
/// with) the system's PATH ([`SYSTEM_PATH`]) unless the caller sets another.
pub fn as_test_user(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let argv = as_test_user_argv();
    let mut c = Command::new(&argv[0]);
    c.env("PATH", SYSTEM_PATH).args(&argv[1..]).arg(program);
    c
}

/// The command line that runs the program after it as the test user:
/// `setpriv ... --`.
pub fn as_test_user_argv() -> Vec<String> {
    let (u, g) = test_user();
    vec![
        "setpriv".into(),
        format!("--reuid={u}"),
        format!("--regid={g}"),
        "--clear-groups".into(),
        "--".into(),
    ]
}

pub fn to_run(out: Output) -> Run {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    Run {
        code: out.status.code().unwrap_or(-1),
        json,
        stdout,
        stderr,
    }
}

pub fn snapshot_tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut m = BTreeMap::new();
    for e in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
    {
        let e = e.unwrap();
        let md = e.path().symlink_metadata().unwrap();
        let ft = md.file_type();
        let what = if ft.is_symlink() {
            format!("link:{}", std::fs::read_link(e.path()).unwrap().display())
        } else if ft.is_file() {
            format!(
                "file:{}",
                blake3::hash(&std::fs::read(e.path()).unwrap()).to_hex()
            )
        } else if ft.is_dir() {
            "dir".to_string()
        } else {
            "other".to_string()
        };
        let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
        let mtime = md.mtime_nsec() + md.mtime() * 1_000_000_000;
        m.insert(
            rel,
            format!(
                "{what} mode={:o} owner={}:{} size={} mtime={mtime}",
                md.mode(),
                md.uid(),
                md.gid(),
                if ft.is_dir() { 0 } else { md.size() }
            ),
        );
    }
    m
}

/// A file on the host outside every workspace, that tests use as a canary.
pub fn host_canary(name: &str, content: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("dryrun-canary-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let p = d.path().join(name);
    std::fs::write(&p, content).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    (d, p)
}

/// The strings of a JSON array (empty when it is not one).
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Single-quote a string for bash.
pub fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The rehearsal ran the command to its end (scripts that use this end with
/// `exit 0`): a failure of dryrun itself is reported as such, with the record.
pub fn assert_ran(who: Who, r: &Run) {
    assert_eq!(
        r.exit_code(),
        Some(0),
        "{who:?}: the command did not run to its end; dryrun exit {}\nstdout: {}\nstderr: {}",
        r.code,
        r.stdout,
        r.stderr
    );
}

/// The would-be actions of a run record.
pub fn actions(r: &Run) -> Vec<Value> {
    r.json["rehearsal"]["would_be_actions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// An executable script in the workspace.
pub fn write_script(ws: &Ws, rel: &str, body: &str) {
    ws.write(rel, body);
    std::fs::set_permissions(ws.dir.join(rel), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `dryrun replay ID --json ARGS...` in the workspace.
pub fn replay(ws: &Ws, id: &str, args: &[&str]) -> Run {
    let mut c = ws.command();
    c.args(["replay", id, "--json"]).args(args);
    to_run(c.output().unwrap())
}

/// The Python interpreter of the tests' virtualenv (`target/py-mcp`, or
/// `DRYRUN_TEST_PY_MCP`; `tests/run.sh` fills it), with `module`
/// importable: made and `pip install`ed (`spec`) here when it is not.
pub fn py_venv_with(module: &str, spec: &str) -> PathBuf {
    let venv = std::env::var_os("DRYRUN_TEST_PY_MCP")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/py-mcp"));
    let py = venv.join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        if !py.exists() {
            let st = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .unwrap();
            assert!(st.success(), "python3 -m venv failed");
        }
        let st = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", spec])
            .status()
            .unwrap();
        assert!(
            st.success(),
            "pip install {spec} failed (tests/run.sh installs it)"
        );
    }
    py
}

/// Run `c` with `input` on its stdin (the whole of it written, or the test
/// fails) and its stdout and stderr captured.
pub fn output_with_stdin(c: &mut Command, input: &[u8]) -> Output {
    let mut ch = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ch.stdin.take().unwrap().write_all(input).unwrap();
    ch.wait_with_output().unwrap()
}

/// `dryrun execute --json --file -` by `c` (its user, environment and
/// directory set by the caller) with `envelope` on its stdin, answered in
/// the background: the command's text is not among the CLI's arguments.
/// The answer is the child's output (`wait_with_output`).
pub fn execute_envelope_in_background(c: &mut Command, envelope: &str) -> Child {
    let mut ch = c
        .args(["execute", "--json", "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ch.stdin
        .take()
        .unwrap()
        .write_all(envelope.as_bytes())
        .unwrap();
    ch
}

/// Eight random bytes in hex: a name or canary value no other test run
/// shares and nothing in a sandbox can guess.
pub fn random_hex() -> String {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Tests of a program with two names use Debian's layout of Python:
/// `/usr/bin/python3` a link to `python3.X` beside it. The versioned name
/// (`python3.11` on Debian 12); `None` (a failure under
/// `DRYRUN_TEST_REQUIRE_TOOLS=1`, else a skip that says why) when the host
/// has no such link.
pub fn python3_versioned_name() -> Option<String> {
    let target = std::fs::read_link("/usr/bin/python3").ok();
    let name = target
        .as_ref()
        .and_then(|t| t.to_str())
        .filter(|t| {
            t.strip_prefix("python3.")
                .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|t| Path::new("/usr/bin").join(t).is_file());
    if name.is_none() {
        tool_missing(
            &format!("/usr/bin/python3 is not a link to a python3.X beside it (it is {target:?})"),
            "python3",
        );
    }
    name.map(String::from)
}

/// A program prefix for [`Ws::command_through`] that runs `dryrun` on a
/// host without Landlock, as far as `dryrun` can tell: a seccomp filter
/// (inherited by everything it starts, the sandbox included) makes the
/// three Landlock system calls fail with ENOSYS, exactly what a kernel
/// without Landlock answers, so the engine's probe finds ABI 0 and, with
/// degraded mode allowed (`DRYRUN_ALLOW_DEGRADED=1`), the sandbox is built
/// as always but with no Landlock ruleset. Nothing in dryrun changes: the
/// control of a test that shows what only Landlock stops. The syscall
/// numbers (444-446) are those of every architecture on the unified
/// syscall table (x86_64, arm64, ...).
pub fn without_landlock() -> Vec<std::ffi::OsString> {
    const SCRIPT: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def ins(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)
prog = b"".join([
    ins(0x20, 0, 0, 0),                 # A = seccomp_data.nr
    ins(0x35, 0, 2, 444),               # A >= landlock_create_ruleset, else allow
    ins(0x25, 1, 0, 446),               # A > landlock_restrict_self: allow
    ins(0x06, 0, 0, 0x00050000 | 38),   # SECCOMP_RET_ERRNO(ENOSYS)
    ins(0x06, 0, 0, 0x7fff0000),        # SECCOMP_RET_ALLOW
])
buf = ctypes.create_string_buffer(prog, len(prog))
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
if libc.prctl(38, 1, 0, 0, 0) != 0:      # PR_SET_NO_NEW_PRIVS
    sys.exit("no_new_privs: " + os.strerror(ctypes.get_errno()))
if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:   # PR_SET_SECCOMP, FILTER
    sys.exit("seccomp: " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])
"#;
    ["/usr/bin/python3", "-c", SCRIPT]
        .into_iter()
        .map(Into::into)
        .collect()
}

/// A probe ran to its end in the rehearsal. Probes in Python that call
/// native code (`ctypes`) or fork are what the classifier asks a person
/// about before anything runs (`exec.inline_code.*`); that is the only
/// thing allowed to hold such a run back: the sandbox's answers are what
/// the probe tests.
pub fn assert_probe_ran(r: &Run, who: impl std::fmt::Debug) {
    assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
    let reasons = r.json["verdict"]["reasons"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        reasons
            .iter()
            .all(|x| x.as_str().unwrap_or("").starts_with("[exec.inline_code.")),
        "{who:?}: {reasons:?}"
    );
}

/// A test file's own system account, (uid, gid, home): created with its
/// home (its own, 0755, so that only dryrun's rules keep others out of it)
/// when missing.
pub fn account_with_home(name: &str, home: &str) -> (u32, u32, std::path::PathBuf) {
    let lookup = || {
        let out = std::process::Command::new("getent")
            .args(["passwd", name])
            .output()
            .ok()?;
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        let f: Vec<&str> = line.trim().split(':').collect();
        Some((
            f.get(2)?.parse().ok()?,
            f.get(3)?.parse().ok()?,
            std::path::PathBuf::from(f.get(5)?),
        ))
    };
    if lookup().is_none() {
        let _ = std::process::Command::new("useradd")
            .args(["--system", "--home-dir", home, "--shell", "/bin/bash", name])
            .status();
    }
    let (u, g, home): (u32, u32, std::path::PathBuf) =
        lookup().unwrap_or_else(|| panic!("the test account {name} exists"));
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(u), Some(g)).unwrap();
    std::fs::set_permissions(
        &home,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    (u, g, home)
}

/// `chown -R -h U:G P`.
pub fn chown_r(p: &std::path::Path, u: u32, g: u32) {
    let st = std::process::Command::new("chown")
        .arg("-R")
        .arg("-h")
        .arg(format!("{u}:{g}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// How an attack on an account's workspace runs: root's engine over a
/// workspace the account owns (the command runs as the account, its home
/// through an id-mapped layer), or the account's own in-process engine
/// (its own ids only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    RootEngine,
    OwnEngine,
}

pub const MODES: [Mode; 2] = [Mode::RootEngine, Mode::OwnEngine];

/// A workspace owned by account `u`:`g`, and the wrapper that runs
/// `dryrun` on it in `mode` (none for root's engine; `setpriv` to the
/// account for its own).
pub fn account_ws(mode: Mode, u: u32, g: u32) -> (Ws, Vec<String>) {
    let ws = Ws::new(Who::Root);
    ws.write("README.md", "hi\n");
    chown_r(&ws.dir, u, g);
    let wrapper = match mode {
        Mode::RootEngine => Vec::new(),
        Mode::OwnEngine => {
            chown_r(&ws.state, u, g);
            vec![
                "setpriv".into(),
                format!("--reuid={u}"),
                format!("--regid={g}"),
                "--clear-groups".into(),
                "--".into(),
            ]
        }
    };
    (ws, wrapper)
}

/// `promote ID` through `c` (a dryrun command already pointed at its
/// engine: a workspace's or a daemon client's), which must succeed.
pub fn promote_ok(mut c: Command, id: &str, what: &str) -> std::process::Output {
    let out = c.args(["promote", id]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: promote {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
