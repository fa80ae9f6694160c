//! The sandbox: the only module allowed to use `unsafe` (each block one
//! system call, in `sys`). The engine builds a [`spec::SandboxSpec`], and
//! [`rehearse`] runs it through a fresh exec of this binary (the helper), or
//! in the daemon through a fork of the resident helper (`resident`).

pub(crate) mod helper;
pub(crate) mod ids;
mod landlock;
pub(crate) mod limits;
mod mounts;
mod netwatch;
pub(crate) mod probe;
mod reader;
mod resident;
mod seccomp;
pub(crate) mod service;
pub(crate) mod spec;
pub(crate) mod stubs;
mod sys;
pub(crate) mod view;
pub(crate) use sys::become_on_this_thread;
mod walk;
pub(crate) mod wire;

/// The binary's edge: `main.rs` dispatches to the helper (`run_helper`) and
/// to a stub (`run_stub`) by its first argument, before anything else runs.
/// These are the only items of the sandbox outside the crate; inside it,
/// only the engine imports the sandbox.
pub use helper::{HELPER_ARG, run_helper};
pub use resident::{
    ForkedWorker, MAX_WORKER_ARG, RESIDENT_ARG, ViewFds, WorkerEntry, fork_worker, fork_worker_in,
    kill_worker, run_resident_helper, start_resident_helper,
};
pub use stubs::{STUB_ARG_PREFIX, run_small_stub, run_stub};

/// A path on the host opened through the view's resolver (`follow`: its
/// symlinks resolved; else none may be on the way): its resolved path and
/// an `O_PATH` descriptor; a mount the resolver does not cross is an error
/// with the line that names it. What the binary installs for the
/// workspace's looks (`workspace::install_host_open`).
pub fn host_open(
    p: &std::path::Path,
    follow: bool,
) -> std::io::Result<(std::path::PathBuf, std::os::fd::OwnedFd)> {
    let look = view::Resolver::new();
    let opened = if follow {
        look.resolve(p)
    } else {
        look.open_exact(p)
    }?;
    Ok((opened.path, opened.file.into()))
}

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

pub use landlock::NEWEST_KNOWN_ABI;
pub use seccomp::DENIED_SYSCALLS;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot start the sandbox helper ({exe}): {source}")]
    Spawn { exe: String, source: std::io::Error },
    #[error("talking to the sandbox helper: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    #[error("sandbox setup failed at step {stage}: {message}")]
    Setup { stage: String, message: String },
    #[error("the sandbox helper ended without a report (status {status}); its stderr: {stderr}")]
    NoReport { status: String, stderr: String },
    #[error(
        "the run hit its limits ({limits}) and the sandbox ended without its report: {detail}{}",
        limit_killed_hint(limits)
    )]
    LimitKilled { limits: String, detail: String },
    #[error("the rehearsal was cancelled")]
    Cancelled,
}

/// Why a full memory limit can end a sandbox without its report.
fn limit_killed_hint(limits: &str) -> &'static str {
    if limits.split(", ").any(|l| l == "memory") {
        " (the run's memory cgroup holds the command's memory and the files it wrote, in the upper layer and /tmp, up to memory_mb + disk_mb + /tmp; the command is the OOM killer's first choice, so a sandbox that ended this way lost its init to what the command left charged to the cgroup, with a walk larger than the 32 MiB room the init gets once the command is gone)"
    } else {
        ""
    }
}

/// The binary to re-exec as the helper.
fn helper_exe() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into())
}

/// An exec of this binary as the helper or the resident helper (`arg`):
/// no environment, `/` as its directory, and no transparent huge pages for
/// its allocator (each 2 MiB page a short-lived helper touches would be
/// zeroed whole; the build already makes that the default, this keeps it
/// for a build without `.cargo/config.toml`). The command gets the host's
/// setting back (X2).
fn helper_command(arg: &str) -> Command {
    let mut c = Command::new(helper_exe());
    c.arg(arg)
        .env_clear()
        .env("MIMALLOC_ALLOW_THP", "0")
        .current_dir("/");
    c
}

/// Cancels a rehearsal from another thread: kills the helper, whose death
/// takes the whole sandbox with it (every stage has a parent-death signal
/// and the pid namespace's init dies with it).
#[derive(Debug, Default)]
pub struct CancelHandle {
    cancelled: std::sync::atomic::AtomicBool,
    helper: std::sync::Mutex<Option<Killer>>,
}

/// How to kill the running helper: an exec'd child by pid (not reaped
/// before it is disarmed), a resident helper's fork by pidfd (the resident
/// reaps it at once, so its pid could name another process later).
#[derive(Debug, Clone)]
enum Killer {
    Pid(i32),
    PidFd(std::sync::Arc<OwnedFd>),
}

impl Killer {
    fn kill(&self) {
        match self {
            Killer::Pid(pid) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Killer::PidFd(fd) => {
                let _ = sys::pidfd_kill(fd.as_raw_fd());
            }
        }
    }
}

impl CancelHandle {
    pub fn cancel(&self) {
        use std::sync::atomic::Ordering;
        self.cancelled.store(true, Ordering::SeqCst);
        if let Some(k) = self.lock().as_ref() {
            k.kill();
        }
    }
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Killer>> {
        self.helper.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The helper is running: a cancel kills it from now on (at once if
    /// the cancel came first).
    fn arm(&self, k: Killer) {
        let mut g = self.lock();
        if self.is_cancelled() {
            k.kill();
        }
        *g = Some(k);
    }
    fn disarm(&self) {
        *self.lock() = None;
    }
}

/// The running helper process: an exec of this binary, or a fork of the
/// resident helper (see `resident`).
enum HelperProcess {
    Exec(std::process::Child),
    Forked(std::sync::Arc<OwnedFd>),
}

impl HelperProcess {
    fn killer(&self) -> Killer {
        match self {
            HelperProcess::Exec(c) => Killer::Pid(c.id() as i32),
            HelperProcess::Forked(fd) => Killer::PidFd(fd.clone()),
        }
    }
    /// Wait for its end; its exit status as text.
    fn wait(self) -> String {
        match self {
            HelperProcess::Exec(mut c) => c
                .wait()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| format!("unknown ({e})")),
            HelperProcess::Forked(fd) => {
                use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
                loop {
                    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                    match poll(&mut fds, PollTimeout::NONE) {
                        Err(nix::errno::Errno::EINTR) => continue,
                        _ => break,
                    }
                }
                "exited (its status went to the resident helper)".into()
            }
        }
    }
}

/// Start the helper: a fork of the resident helper when this process has
/// one, else an exec. Returns it with its stdin, stdout and stderr, and the
/// pid its host side will see as its parent.
fn start_helper(
    view: Option<ViewFds<'_>>,
) -> Result<(HelperProcess, [std::fs::File; 3], i32), SandboxError> {
    if let Some(f) = resident::fork_host_side(view) {
        let pipes = [f.spec_w, f.frames_r, f.stderr_r].map(std::fs::File::from);
        return Ok((
            HelperProcess::Forked(std::sync::Arc::new(f.pidfd)),
            pipes,
            f.parent,
        ));
    }
    if view.is_some() {
        // Only a fork of the resident takes a client's view along.
        return Err(SandboxError::Spawn {
            exe: "the resident sandbox helper".into(),
            source: std::io::Error::other(
                "a workspace in a client's mount namespace is rehearsed only by the daemon's resident helper, which is gone; restart the daemon",
            ),
        });
    }
    let exe = helper_exe();
    let mut child = helper_command(helper::HELPER_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| SandboxError::Spawn {
            exe: exe.display().to_string(),
            source,
        })?;
    let pipes = [
        std::fs::File::from(OwnedFd::from(child.stdin.take().expect("piped stdin"))),
        std::fs::File::from(OwnedFd::from(child.stdout.take().expect("piped stdout"))),
        std::fs::File::from(OwnedFd::from(child.stderr.take().expect("piped stderr"))),
    ];
    Ok((HelperProcess::Exec(child), pipes, std::process::id() as i32))
}

/// Run one rehearsal. Blobs land in `blob_dir`; at most `max_blob_bytes` of
/// them are accepted.
/// How many bytes written to `fd` (a pipe) its reader has not taken yet;
/// an error where the question does not apply.
pub fn unread_bytes(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<usize> {
    sys::unread_bytes(fd)
}

/// `_exit(code)`: no exit handlers, no flushing (see [`crate::exit_at_once`]).
pub fn exit_process_now(code: i32) -> ! {
    sys::exit_now(code)
}

pub fn rehearse(
    spec: &spec::SandboxSpec,
    blob_dir: &Path,
    max_blob_bytes: u64,
    cancel: Option<&CancelHandle>,
    view: Option<ViewFds<'_>>,
) -> Result<(wire::RehearsalReport, wire::HostReport), SandboxError> {
    if cancel.is_some_and(|c| c.is_cancelled()) {
        return Err(SandboxError::Cancelled);
    }
    let (helper, [mut stdin, mut stdout, mut stderr], parent) = start_helper(view)?;
    if let Some(c) = cancel {
        c.arm(helper.killer());
    }
    let disarm = || {
        if let Some(c) = cancel {
            c.disarm();
        }
    };
    // The host side checks that its parent is the one named here.
    let spec = spec::SandboxSpec {
        parent_pid: parent,
        ..spec.clone()
    };
    let spec_json = serde_json::to_vec(&spec).map_err(std::io::Error::other)?;
    let written = stdin.write_all(&spec_json);
    drop(stdin);
    let err_reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut s = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut s);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        String::from_utf8_lossy(&s).into_owned()
    });
    if let Err(e) = written {
        helper.killer().kill();
        disarm();
        let _ = helper.wait();
        let _ = err_reader.join();
        return Err(e.into());
    }
    // The run is complete once the helper's last frame is in: without
    // cgroups that is the report (by then every process of the run is dead:
    // P1 killed and reaped them before walking the upper layer); with them,
    // the host side's report, sent after it read the limits hit and removed
    // the cgroups. The namespaces' teardown and the helper's exit need not
    // be waited for; the helper is reaped in the background.
    let last = if spec.cgroup.is_none() {
        wire::LastFrame::Report
    } else {
        wire::LastFrame::Host
    };
    let read = wire::read_frames(&mut stdout, blob_dir, max_blob_bytes, last);
    if read.is_err() {
        helper.killer().kill();
    }
    let complete = read.as_ref().is_ok_and(|o| {
        o.report.is_some()
            && o.failure.is_none()
            && (last == wire::LastFrame::Report || o.host.is_some())
    });
    if complete {
        // The report is in: the run is complete; a late cancel is moot.
        disarm();
        std::thread::spawn(move || {
            drop(stdout);
            let _ = helper.wait();
            let _ = err_reader.join();
        });
        let out = read?;
        return finish(out, String::new(), String::new());
    }
    drop(stdout);
    let status = helper.wait();
    disarm();
    if cancel.is_some_and(|c| c.is_cancelled()) {
        let _ = err_reader.join();
        return Err(SandboxError::Cancelled);
    }
    let stderr_text = err_reader.join().unwrap_or_default();
    match read {
        Ok(out) => finish(out, status, stderr_text),
        // Cut off mid-frame (the sandbox's init killed while it sent kept
        // content): the host side's frame is lost in it, its note is not.
        Err(e) => Err(match wire::limits_noted_in(&stderr_text) {
            Some(limits) => SandboxError::LimitKilled {
                limits,
                detail: e.to_string(),
            },
            None => e.into(),
        }),
    }
}

fn finish(
    out: wire::HelperOutput,
    status: String,
    stderr: String,
) -> Result<(wire::RehearsalReport, wire::HostReport), SandboxError> {
    if !out.bad_blobs.is_empty() {
        return Err(SandboxError::NoReport {
            status,
            stderr: format!(
                "content blobs failed their hash check: {}",
                out.bad_blobs.join(", ")
            ),
        });
    }
    if let Some(f) = out.failure {
        return Err(SandboxError::Setup {
            stage: f.stage,
            message: f.message,
        });
    }
    match (out.report, out.host) {
        (Some(r), h) => Ok((r, h.unwrap_or_default())),
        (None, Some(h)) if !h.limits_hit.is_empty() => Err(SandboxError::LimitKilled {
            limits: wire::limit_names(&h.limits_hit),
            detail: format!("status {status}"),
        }),
        (None, _) => Err(SandboxError::NoReport { status, stderr }),
    }
}

/// The egress proxy's side of the hand-over (see `helper/egress.rs`): the
/// sockets the sandbox's init created in the sandbox's network namespace,
/// received on the proxy's control connection.
pub fn receive_egress_sockets(
    conn: &std::os::unix::net::UnixStream,
) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
    use std::os::fd::AsRawFd;
    sys::recv_fds(conn.as_raw_fd())
}
