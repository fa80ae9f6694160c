//! A real `dryrun daemon` process for the daemon and live-lane tests, and
//! the process tree read from /proc.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// Everything here needs two identities; as a non-root user it cannot run
/// (the one rule is [`super::require_root`]).
#[allow(unused_imports)]
pub use super::require_root;

/// Name of the test user's primary group (the socket's group here).
pub fn test_group() -> String {
    let (_, gid) = test_user();
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .unwrap()
        .unwrap()
        .name
}

pub struct Daemon {
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    /// A program and its arguments that run the daemon (`nsenter ... --`):
    /// the daemon is started as its last argument.
    pub wrapper: Vec<String>,
}

impl Daemon {
    pub fn start(extra: &[&str]) -> Daemon {
        Self::start_env(extra, &[])
    }

    /// A daemon started through `wrapper` (a program that ends by running
    /// its remaining arguments, such as `nsenter --net=... --`).
    pub fn start_wrapped(wrapper: &[String], extra: &[&str]) -> Daemon {
        Self::start_with(wrapper, extra, &[])
    }

    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::start_with(&[], extra, env)
    }

    fn start_with(wrapper: &[String], extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("dryrun-daemon-")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("run").join("dryrun.sock");
        let state = dir.path().join("state");
        let log = dir.path().join("daemon.log");
        let mut d = Daemon {
            child: None,
            socket,
            state,
            dir,
            log,
            wrapper: wrapper.to_vec(),
        };
        d.spawn(extra, env);
        d
    }

    pub fn spawn(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        let group = test_group();
        let mut c = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        c.env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("DRYRUN_LOG", "info")
            .envs(env.iter().copied())
            .arg("daemon")
            .arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .args(["--socket-group", &group])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap());
        self.child = Some(c.spawn().unwrap());
        let t0 = Instant::now();
        while !health_ok(&self.socket) {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited early ({st}): {}", self.log_text());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "daemon did not come up: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        c.wait().unwrap()
    }

    pub fn restart(&mut self, extra: &[&str]) {
        self.spawn(extra, &[]);
    }

    /// `dryrun daemon` on this one's socket and state directory again, in
    /// the foreground, with an empty environment: how it ended (a daemon
    /// that refuses to start, on a damaged journal, exits at once).
    pub fn start_again_in_foreground(&self) -> std::process::Output {
        Command::new(bin())
            .env_clear()
            .arg("daemon")
            .arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .output()
            .unwrap()
    }

    /// The CLI as root (the reviewer), talking to this daemon.
    pub fn cli_root(&self) -> Command {
        let mut c = Command::new(bin());
        c.env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("DRYRUN_SOCKET", &self.socket)
            .stdin(Stdio::null());
        c
    }

    /// The CLI as the unprivileged test user (the agent).
    pub fn cli_user(&self) -> Command {
        let mut c = as_test_user(bin());
        c.env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("DRYRUN_SOCKET", &self.socket)
            .stdin(Stdio::null());
        c
    }

    /// A request with curl (a real HTTP client), as root or as the user.
    pub fn curl(&self, who: Who, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let mut c = if who == Who::User {
            as_test_user("curl")
        } else {
            Command::new(super::tool("curl", "curl"))
        };
        c.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "--unix-socket"])
            .arg(&self.socket)
            .args(["-X", method])
            .arg(format!("http://dryrun{path}"));
        if let Some(b) = body {
            c.args(["-H", "content-type: application/json", "--data-binary", b]);
        }
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (
            code.trim().parse().unwrap_or(0),
            serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
        )
    }

    /// A GET of a streaming route (Server-Sent Events) for `secs` seconds:
    /// its status and what arrived.
    pub fn curl_stream(&self, who: Who, path: &str, secs: u64) -> (u16, String) {
        let mut c = if who == Who::User {
            as_test_user("curl")
        } else {
            Command::new(super::tool("curl", "curl"))
        };
        c.args(["-sSN", "-o", "-", "-w", "\n%{http_code}", "--max-time"])
            .arg(secs.to_string())
            .arg("--unix-socket")
            .arg(&self.socket)
            .arg(format!("http://dryrun{path}"));
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// `dryrun_workspace_agents_started_total` from `/metrics`, read as `who`.
    pub fn agents_started(&self, who: Who) -> u64 {
        let (code, body) = self.curl(who, "GET", "/metrics", None);
        assert_eq!(code, 200, "{body}");
        let text = body.as_str().expect("metrics are text").to_string();
        text.lines()
            .find_map(|l| l.strip_prefix("dryrun_workspace_agents_started_total "))
            .unwrap_or_else(|| panic!("no agent counter in /metrics:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }

    pub fn journal(&self) -> Vec<Value> {
        std::fs::read_to_string(self.state.join("journal.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| v["body"].clone())
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn health_ok(socket: &Path) -> bool {
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200")
}

/// A workspace owned by the test user (the agent's project).
pub fn user_workspace() -> Ws {
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    std::fs::create_dir_all(ws.dir.join(".git/hooks")).unwrap();
    ws.chown_all();
    ws
}

pub fn run_json(out: std::process::Output) -> Run {
    to_run(out)
}

/// An envelope file (`body`, JSON) the test user can read, in a
/// directory of its own outside any workspace; gone with the `TempDir`.
pub fn agent_envelope_file(body: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("dryrun-agent-env-")
        .tempdir_in("/tmp")
        .unwrap();
    let p = dir.path().join("envelope.json");
    std::fs::write(&p, body).unwrap();
    for q in [dir.path(), p.as_path()] {
        std::fs::set_permissions(q, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, p)
}

pub fn submit_user(d: &Daemon, ws: &Ws, cmd: &str, extra: &[&str]) -> Run {
    submit_as(d, Who::User, &ws.dir, cmd, extra)
}

/// `dryrun execute --json --command CMD EXTRA...` in `dir`, to the daemon,
/// as `who`.
pub fn submit_as(d: &Daemon, who: Who, dir: &Path, cmd: &str, extra: &[&str]) -> Run {
    let mut c = if who == Who::User {
        d.cli_user()
    } else {
        d.cli_root()
    };
    let out = c
        .current_dir(dir)
        .args(["execute", "--json", "--command", cmd])
        .args(extra)
        .output()
        .unwrap();
    run_json(out)
}

pub fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{name}: {cmd}"));
            }
        }
    }
    found
}

/// `(pid, ppid, cmdline)` of every process.
pub fn processes() -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let (Ok(stat), Ok(cmd)) = (
            std::fs::read_to_string(e.path().join("stat")),
            std::fs::read(e.path().join("cmdline")),
        ) else {
            continue;
        };
        let Some(ppid) = ppid_in_stat(&stat) else {
            continue;
        };
        out.push((pid, ppid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
    }
    out
}

/// The children of `pid` whose command line contains `needle`.
pub fn children_of(pid: u32, needle: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, pp, cmd)| *pp == pid && cmd.contains(needle))
        .map(|(p, _, _)| p)
        .collect()
}

/// `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

/// A process's parent pid, from /proc.
pub fn parent_of(pid: u32) -> Option<u32> {
    ppid_in_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The parent pid in a `/proc/PID/stat` line (read after the command
/// name's last `)`: the name may hold spaces and parentheses).
fn ppid_in_stat(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The run's cgroup directories (as `plan_cgroups` names them).
pub fn run_cgroups(run_id: &str) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut v = vec![root.join("dryrun").join(run_id)];
    for c in ["memory", "pids", "cpu"] {
        v.push(root.join(c).join("dryrun").join(run_id));
    }
    v
}

pub fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The daemon's workspace agents serving the test user: forks of its
/// resident sandbox helper (no exec, so their command line is the
/// resident's) running as that user, the only processes of that uid under
/// the resident.
pub fn workspace_agents(d: &Daemon) -> Vec<i32> {
    let (uid, _) = crate::common::test_user();
    let Some(resident) = resident_of(d) else {
        return Vec::new();
    };
    let out = Command::new("pgrep")
        .args(["-P", &resident.to_string(), "-u", &uid.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The daemon's resident sandbox helper.
pub fn resident_of(d: &Daemon) -> Option<u32> {
    children_of(d.pid(), "__sandbox-resident")
        .into_iter()
        .next()
}

/// As the agent: submit a promotion of many small files (one fsync each: it
/// takes seconds, time enough for the agent's shell loop), find the forked
/// workspace agent that serves it and stop it, up to `attempts` times. Its
/// pid and the promotion (still running, its output piped: end it with
/// `wait_with_output`, which reads the pipes, never with `wait` alone).
pub fn stop_own_workspace_agent(d: &Daemon, ws: &Ws, attempts: u32) -> Option<(i32, Child)> {
    let resident = resident_of(d).expect("the daemon's resident sandbox helper");
    let (uid, _) = test_user();
    for attempt in 0..attempts {
        let r = submit_user(
            d,
            ws,
            &format!(
                "mkdir m{attempt} && for i in $(seq 1 1500); do echo $i > m{attempt}/f$i; done"
            ),
            &["--expect-write", &format!("m{attempt}/**")],
        );
        assert_eq!(r.decision(), "promote", "{r:?}");
        let id = run_id(&r);
        // `-P`: only this daemon's workspace agents (the agent sees the
        // resident's pid). An agent already exiting when it is found cannot
        // be stopped: only one seen in state `T` afterwards counts.
        let stopper = as_test_user("bash")
            .arg("-c")
            .arg(format!(
                "for i in $(seq 1 3000); do for q in $(pgrep -P {resident} -u {uid}); do kill -STOP $q 2>/dev/null && sleep 0.005 && grep -q 'State:.T' /proc/$q/status 2>/dev/null && echo $q && exit 0; done; sleep 0.003; done; exit 1"
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let promote = d
            .cli_user()
            .args(["promote", &id])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = stopper.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success()
            && let Some(pid) = text.split_whitespace().next().and_then(|s| s.parse().ok())
        {
            return Some((pid, promote));
        }
        let _ = promote.wait_with_output();
    }
    None
}
