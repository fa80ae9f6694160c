//! The sandbox: the only module allowed to use `unsafe` (each block one
//! system call, in `sys`). The engine builds a [`spec::SandboxSpec`], and
//! [`rehearse`] runs it through a fresh exec of this binary (the helper).

pub(crate) mod helper;
mod landlock;
pub(crate) mod limits;
mod mounts;
mod netwatch;
pub(crate) mod probe;
mod reader;
mod seccomp;
pub(crate) mod spec;
pub(crate) mod stubs;
mod sys;
mod walk;
pub(crate) mod wire;

/// The binary's edge: `main.rs` dispatches to the helper (`run_helper`) and
/// to a stub (`run_stub`) by its first argument, before anything else runs.
/// These are the only items of the sandbox outside the crate; inside it,
/// only the engine imports the sandbox.
pub use helper::{HELPER_ARG, run_helper};
pub use stubs::{STUB_ARG_PREFIX, run_stub};

use std::io::Write;
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
    #[error("the rehearsal was cancelled")]
    Cancelled,
}

/// The binary to re-exec as the helper.
fn helper_exe() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into())
}

/// Cancels a rehearsal from another thread: kills the helper, whose death
/// takes the whole sandbox with it (every stage has a parent-death signal
/// and the pid namespace's init dies with it).
#[derive(Debug, Default)]
pub struct CancelHandle {
    cancelled: std::sync::atomic::AtomicBool,
    helper_pid: std::sync::atomic::AtomicI32,
}

impl CancelHandle {
    pub fn cancel(&self) {
        use std::sync::atomic::Ordering;
        self.cancelled.store(true, Ordering::SeqCst);
        let pid = self.helper_pid.load(Ordering::SeqCst);
        if pid > 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Run one rehearsal. Blobs land in `blob_dir`; at most `max_blob_bytes` of
/// them are accepted.
pub fn rehearse(
    spec: &spec::SandboxSpec,
    blob_dir: &Path,
    max_blob_bytes: u64,
    cancel: Option<&CancelHandle>,
) -> Result<(wire::RehearsalReport, wire::HostReport), SandboxError> {
    if cancel.is_some_and(|c| c.is_cancelled()) {
        return Err(SandboxError::Cancelled);
    }
    let exe = helper_exe();
    let mut child = Command::new(&exe)
        .arg(helper::HELPER_ARG)
        .env_clear()
        // No transparent huge pages for the helper's allocator: each 2 MiB
        // page a short-lived helper touches is zeroed whole (about 1.5 ms
        // of CPU per rehearsal in the daemon, measured). The command gets
        // the host's setting back (X2).
        .env("MIMALLOC_ALLOW_THP", "0")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| SandboxError::Spawn {
            exe: exe.display().to_string(),
            source,
        })?;
    if let Some(c) = cancel {
        c.helper_pid
            .store(child.id() as i32, std::sync::atomic::Ordering::SeqCst);
        if c.is_cancelled() {
            let _ = child.kill();
        }
    }
    let spec_json = serde_json::to_vec(spec).map_err(std::io::Error::other)?;
    {
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(&spec_json)?;
    }
    let mut stderr = child.stderr.take().expect("piped stderr");
    let err_reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut s = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut s);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        String::from_utf8_lossy(&s).into_owned()
    });
    let mut stdout = child.stdout.take().expect("piped stdout");
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
        let _ = child.kill();
    }
    let complete = read.as_ref().is_ok_and(|o| {
        o.report.is_some()
            && o.failure.is_none()
            && (last == wire::LastFrame::Report || o.host.is_some())
    });
    if complete {
        if let Some(c) = cancel {
            // The report is in: the run is complete; a late cancel is moot.
            c.helper_pid.store(0, std::sync::atomic::Ordering::SeqCst);
        }
        std::thread::spawn(move || {
            drop(stdout);
            let _ = child.wait();
            let _ = err_reader.join();
        });
        let out = read?;
        return finish(out, String::new(), String::new());
    }
    drop(stdout);
    let status = child.wait()?;
    if let Some(c) = cancel {
        c.helper_pid.store(0, std::sync::atomic::Ordering::SeqCst);
        if c.is_cancelled() {
            let _ = err_reader.join();
            return Err(SandboxError::Cancelled);
        }
    }
    let stderr_text = err_reader.join().unwrap_or_default();
    finish(read?, status.to_string(), stderr_text)
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
