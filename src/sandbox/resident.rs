//! The resident helper: a single-threaded process the daemon starts once,
//! which forks one helper host side (H) per rehearsal. A rehearsal then pays
//! a fork of a small idle process instead of an exec of this whole binary
//! (dynamic loading, relocations, allocator and runtime start: about 3 ms of
//! latency and 2 ms of CPU each).
//!
//! It is started as an exec of this binary (`__sandbox-resident PID`), from
//! a thread of the engine process that lives as long as the process, before
//! any runtime starts, never forked from the tokio process: by the daemon at
//! its start, and by the CLI at the start of a command that will rehearse
//! in-process, so that the exec runs while the CLI loads its policy and
//! writes the run's first records, off the rehearsal's critical path. (Not a fork of the CLI: the host side
//! and the sandbox's init would then carry the CLI's argv and environment
//! in their memory, and the init's command line is readable inside the
//! sandbox.) It dies with the daemon (parent-death signal, armed before
//! it checks that its parent is the daemon), and every host it forks dies
//! with it, as an exec'd helper dies with the engine.
//!
//! Protocol, over a `SOCK_SEQPACKET` pair that is the resident's stdin:
//! - request: the byte `r`, carrying three descriptors: the read end of the
//!   spec pipe, the write end of the frames pipe, the write end of the
//!   stderr pipe;
//! - answer: the child's pid (`i32` LE) with its pidfd attached, or a
//!   negative errno without one.
//!
//! The forked child makes the three descriptors its 0, 1 and 2 and runs the
//! host side exactly as an exec'd helper does: H1 reads the spec from stdin,
//! checks its parent (here the resident) and closes every other descriptor.
//!
//! It also forks *workers*: the byte `w` followed by the worker's argument
//! (at most [`MAX_WORKER_ARG`] bytes), carrying two descriptors (the read
//! end of the worker's input, the write end of its output); the same answer.
//! The child makes them its 0 and 1, `/dev/null` its 2, closes every other
//! descriptor and calls the worker entry `main` gave the resident with the
//! argument; the workspace agent (`workspace::owner`) is started this way,
//! as an exec of `__workspace-agent ARG` would start it, without the exec.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

use super::sys;

/// The hidden first argument of the resident helper.
pub const RESIDENT_ARG: &str = "__sandbox-resident";

/// How long the engine waits for the resident's answer to a fork request.
const ANSWER_TIMEOUT_S: i64 = 10;

/// The largest argument a worker request carries.
pub const MAX_WORKER_ARG: usize = 16 * 1024;

/// What a forked worker runs: its argument, with its input on fd 0 and its
/// output on fd 1. Given by `main`, which may name every part of the crate.
pub type WorkerEntry = fn(&[u8]) -> !;

/// The resident's worker entry (set once, before it serves).
static WORKER: OnceLock<WorkerEntry> = OnceLock::new();

/// The engine's handle on its resident helper.
struct Resident {
    sock: OwnedFd,
    pid: i32,
}

static RESIDENT: OnceLock<Mutex<Option<Resident>>> = OnceLock::new();

/// The engine's end of a fresh request socket, with the answer deadline
/// set, and the resident's end.
fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (mine, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    // A resident that does not answer within this (stopped, or its fork
    // stuck) is forgotten and the rehearsal starts the helper by exec: it
    // never holds every rehearsal of the daemon.
    let answer_within = nix::sys::time::TimeVal::new(ANSWER_TIMEOUT_S, 0);
    nix::sys::socket::setsockopt(
        &mine,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &answer_within,
    )
    .map_err(io::Error::from)?;
    nix::sys::socket::setsockopt(
        &mine,
        nix::sys::socket::sockopt::SendTimeout,
        &answer_within,
    )
    .map_err(io::Error::from)?;
    Ok((mine, theirs))
}

/// Start the resident helper for this process's rehearsals, on a thread of
/// its own that then lives as long as the process (the resident's
/// parent-death signal follows the thread that started it), so that the
/// exec (about 1.5 ms of the caller's wall time: `spawn` returns only once
/// the child has executed) runs while the caller loads its policy and
/// writes the run's first records. The first request to the resident waits
/// for the start to end. `DRYRUN_RESIDENT_HELPER=0` refuses (every
/// rehearsal then executes the helper: to compare, or to rule the resident
/// out).
pub fn start_resident_helper() -> io::Result<()> {
    if std::env::var_os("DRYRUN_RESIDENT_HELPER").is_some_and(|v| v == "0") {
        return Err(io::Error::other("DRYRUN_RESIDENT_HELPER=0"));
    }
    let mut starting = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if RESIDENT.get().is_some() || starting.is_some() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "this process already has a resident sandbox helper",
        ));
    }
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("dryrun-resident".into())
        .spawn(move || {
            match spawn_resident() {
                Ok(res) => {
                    tracing::debug!(pid = res.pid, "resident sandbox helper started");
                    let _ = RESIDENT.set(Mutex::new(Some(res)));
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "no resident sandbox helper; rehearsals start the helper by exec"
                ),
            }
            drop(started_tx);
            // The resident's parent: this thread must not end before the
            // process does.
            loop {
                std::thread::park();
            }
        })?;
    *starting = Some(started_rx);
    Ok(())
}

/// A resident start under way: disconnected once it has ended.
static STARTING: Mutex<Option<std::sync::mpsc::Receiver<()>>> = Mutex::new(None);

/// Wait for a resident start under way to end (the lock held while
/// waiting: a second caller waits too).
fn settle_start() {
    let mut starting = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rx) = starting.as_ref() {
        let _ = rx.recv();
        *starting = None;
    }
}

/// Execute the resident helper with its end of a fresh request socket.
fn spawn_resident() -> io::Result<Resident> {
    let (mine, theirs) = socket_pair()?;
    let child = super::helper_command(RESIDENT_ARG)
        .arg(std::process::id().to_string())
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        // None of its starter's descriptors but its socket: a hook's caller
        // waiting for the end of the hook's stderr never waits on it.
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id() as i32;
    // Never waited for: it lives as long as this process, and reaping it
    // would only matter after it died, when rehearsals fall back to exec.
    std::mem::forget(child);
    Ok(Resident { sock: mine, pid })
}

/// A host side forked by the resident helper: its pid, its pidfd, and the
/// engine's ends of its three pipes.
pub(super) struct Forked {
    pub pidfd: OwnedFd,
    pub spec_w: OwnedFd,
    pub frames_r: OwnedFd,
    pub stderr_r: OwnedFd,
    /// The resident's pid: the host side's parent.
    pub parent: i32,
}

/// Ask the resident helper for a host side. `None` when there is no
/// resident (the CLI), when it is gone (then it is forgotten and rehearsals
/// fall back to an exec of the helper), or when this one request failed
/// while it lives (it could not fork: pids exhausted; this process is out
/// of descriptors): that rehearsal starts the helper by exec, and the next
/// one asks the resident again.
pub(super) fn fork_host_side(view: Option<ViewFds<'_>>) -> Option<Forked> {
    ask(
        "a host side; this rehearsal starts the helper by exec",
        |res| request(res, view),
    )
}

/// A client's view of the filesystem, for a workspace that exists only in
/// the mount namespace of a client in a container: that namespace
/// (`/proc/PID/ns/mnt`), the client's root and the workspace directory
/// (each an open descriptor the daemon holds while the run lives).
#[derive(Clone, Copy)]
pub struct ViewFds<'a> {
    pub mnt_ns: std::os::fd::BorrowedFd<'a>,
    pub root: std::os::fd::BorrowedFd<'a>,
    pub dir: std::os::fd::BorrowedFd<'a>,
}

/// In a host side forked for a client's view: fd 3, the detached clone of
/// the workspace's mount taken in the client's namespace, or `-errno` when
/// it could not be taken; `0` when the host side serves the host's view.
pub(super) static STAGED_IN_VIEW: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(0);

/// Ask the resident helper, under its lock, with `request`; `what` names
/// the request, and what happens instead, in the warning of a failure
/// while the resident lives. `None` when there is no resident, when it is
/// gone (then it is forgotten) or when this request failed.
fn ask<T>(what: &str, request: impl FnOnce(&Resident) -> Result<T, Failed>) -> Option<T> {
    settle_start();
    let cell = RESIDENT.get()?;
    let mut guard = cell.lock().unwrap_or_else(|e| e.into_inner());
    let res = guard.as_ref()?;
    match request(res) {
        Ok(t) => Some(t),
        Err(Failed::ThisTime(e)) => {
            tracing::warn!(error = %e, "the resident sandbox helper could not fork {what}");
            None
        }
        Err(Failed::Gone(e)) => {
            tracing::warn!(error = %e, "the resident sandbox helper is gone; rehearsals start the helper by exec");
            *guard = None;
            None
        }
    }
}

/// A worker forked by the resident helper: its pidfd and the engine's
/// ends of its input and output.
pub struct ForkedWorker {
    pub pidfd: OwnedFd,
    pub input: OwnedFd,
    pub output: OwnedFd,
}

/// Ask the resident helper for a worker running `arg`. `None` (the caller
/// then starts the worker by exec) as for [`fork_host_side`].
pub fn fork_worker(arg: &[u8]) -> Option<ForkedWorker> {
    fork_worker_in(arg, None)
}

/// [`fork_worker`], the worker running in `view` (the client's mount
/// namespace, its root as the worker's root) when one is given.
pub fn fork_worker_in(arg: &[u8], view: Option<ViewFds<'_>>) -> Option<ForkedWorker> {
    if arg.len() > MAX_WORKER_ARG {
        return None;
    }
    ask("a worker; it is started by exec", |res| {
        request_worker(res, arg, view)
    })
}

/// A fresh pipe (read end, write end), close-on-exec.
fn pipe() -> Result<(OwnedFd, OwnedFd), Failed> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Failed::ThisTime(io::Error::from(e)))
}

fn request_worker(
    res: &Resident,
    arg: &[u8],
    view: Option<ViewFds<'_>>,
) -> Result<ForkedWorker, Failed> {
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let mut fds = vec![in_r.as_raw_fd(), out_w.as_raw_fd()];
    if let Some(v) = view {
        fds.extend([v.mnt_ns.as_raw_fd(), v.root.as_raw_fd()]);
    }
    let pidfd = send_request(res, b'w', arg, &fds)?;
    // The child holds its own copies now.
    drop((in_r, out_w));
    Ok(ForkedWorker {
        pidfd,
        input: in_w,
        output: out_r,
    })
}

/// One request (`kind`, then `arg`, with `fds`): the pidfd of the child
/// the resident forked for it.
fn send_request(res: &Resident, kind: u8, arg: &[u8], fds: &[RawFd]) -> Result<OwnedFd, Failed> {
    let head = [kind];
    sendmsg::<()>(
        res.sock.as_raw_fd(),
        &[IoSlice::new(&head), IoSlice::new(arg)],
        &[ControlMessage::ScmRights(fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| Failed::Gone(e.into()))?;
    let (pid, pidfd) = sys::recv_word_with_fd(res.sock.as_raw_fd())
        .map_err(Failed::Gone)?
        .ok_or_else(|| {
            Failed::Gone(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the resident helper closed its socket",
            ))
        })?;
    match pidfd {
        Some(pidfd) if pid > 0 => Ok(pidfd),
        // A negative errno (its fork failed), or a pid whose pidfd did not
        // arrive (the child then reads an empty input and ends).
        _ => Err(Failed::ThisTime(io::Error::from_raw_os_error(
            pid.saturating_neg().max(1),
        ))),
    }
}

/// Why a request gave no host side.
enum Failed {
    /// The resident answered (or was never asked): it still serves.
    ThisTime(io::Error),
    /// Its socket failed or closed: it is gone.
    Gone(io::Error),
}

fn request(res: &Resident, view: Option<ViewFds<'_>>) -> Result<Forked, Failed> {
    let (spec_r, spec_w) = pipe()?;
    let (frames_r, frames_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    let mut fds = vec![
        spec_r.as_raw_fd(),
        frames_w.as_raw_fd(),
        stderr_w.as_raw_fd(),
    ];
    if let Some(v) = view {
        fds.extend([v.mnt_ns.as_raw_fd(), v.dir.as_raw_fd()]);
    }
    let pidfd = send_request(res, b'r', b"", &fds)?;
    // The child holds its own copies now.
    drop((spec_r, frames_w, stderr_w));
    Ok(Forked {
        pidfd,
        spec_w,
        frames_r,
        stderr_r,
        parent: res.pid,
    })
}

/// The resident helper's life (exec'd: `__sandbox-resident PID`): serve
/// fork requests until the engine closes its end. Exits 125 when it cannot
/// take over the process.
pub fn run_resident_helper(args: Vec<std::ffi::OsString>, worker: WorkerEntry) -> ! {
    let _ = WORKER.set(worker);
    let engine: i32 = args
        .get(2)
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    serve(engine)
}

/// Serve fork requests on stdin for the engine process `engine`, which must
/// be this process's parent.
fn serve(engine: i32) -> ! {
    if sys::die_with_parent().is_err()
        || nix::unistd::getppid().as_raw() != engine
        || sys::close_fds_from(3).is_err()
    {
        sys::exit_now(125);
    }
    // The command's seccomp filter is the same for every run: compiled once
    // here, every forked sandbox inherits it (a failure is met again, and
    // reported, by the sandbox that needs it).
    let _ = super::seccomp::compiled_filter();
    loop {
        reap_exited_hosts();
        if !request_waiting() {
            continue;
        }
        match next_request() {
            Ok(Some(Request {
                kind: b'r', fds, ..
            })) => answer(serve_one(fds)),
            Ok(Some(Request {
                kind: b'w',
                arg,
                fds,
            })) => answer(fork_one_worker(&arg, fds)),
            Ok(Some(_)) => answer(Err(io::Error::from_raw_os_error(libc::EINVAL))),
            Ok(None) => sys::exit_now(0),
            Err(_) => sys::exit_now(125),
        }
    }
}

/// Reap the hosts that ended (their CPU time then counts in this
/// process's children's time, where `benches/daemon.sh` reads it). The
/// engine holds each one's pidfd, so a reaped pid is never signalled.
fn reap_exited_hosts() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(s) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if s == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Whether a request (or the engine's end) is waiting on the socket (fd 0);
/// wakes at least every 100 ms to reap.
fn request_waiting() -> bool {
    sys::poll_readable(0, 100)
}

/// One request as received.
struct Request {
    kind: u8,
    arg: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// The next request; `None` at the end.
fn next_request() -> io::Result<Option<Request>> {
    loop {
        let mut b = vec![0u8; 1 + MAX_WORKER_ARG];
        let mut space = nix::cmsg_space!([RawFd; 5]);
        let mut fds = Vec::new();
        let (n, cut) = {
            let mut iov = [IoSliceMut::new(&mut b)];
            let msg = match recvmsg::<()>(0, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
            {
                Err(nix::errno::Errno::EINTR) => continue,
                r => r.map_err(io::Error::from)?,
            };
            for c in msg.cmsgs().map_err(io::Error::from)? {
                if let ControlMessageOwned::ScmRights(got) = c {
                    fds.extend(got.into_iter().map(sys::adopt_fd));
                }
            }
            let cut = msg
                .flags
                .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
            (msg.bytes, cut)
        };
        if n == 0 {
            return Ok(None);
        }
        if cut {
            // Refused (kind 0): a request cut short is never served.
            return Ok(Some(Request {
                kind: 0,
                arg: Vec::new(),
                fds,
            }));
        }
        return Ok(Some(Request {
            kind: b[0],
            arg: b[1..n].to_vec(),
            fds,
        }));
    }
}

/// Fork one worker on the request's two descriptors (four: then the
/// client's mount namespace and root follow, and the worker runs in that
/// view); its pidfd.
fn fork_one_worker(arg: &[u8], fds: Vec<OwnedFd>) -> io::Result<(i32, OwnedFd)> {
    let Some(entry) = WORKER.get().copied() else {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    };
    if fds.len() != 2 && fds.len() != 4 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let pid = sys::fork_single_threaded()?;
    if pid == 0 {
        // `/dev/null` is this process's, opened before it enters a
        // client's view: nothing is looked up there while it holds root's
        // rights (the client's `/dev/null` could be any file it can see).
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null");
        let ok = null.is_ok_and(|n| sys::dup2_raw(n.as_raw_fd(), 2).is_ok())
            && fds[..2]
                .iter()
                .enumerate()
                .all(|(i, fd)| sys::dup2_raw(fd.as_raw_fd(), i as RawFd).is_ok());
        if !ok {
            sys::exit_now(125);
        }
        if fds.len() == 4 && sys::enter_view(fds[2].as_raw_fd(), fds[3].as_raw_fd()).is_err() {
            sys::exit_now(125);
        }
        // The worker then drops to its user before it reads a request.
        if sys::close_fds_from(3).is_err() {
            sys::exit_now(125);
        }
        entry(arg);
    }
    drop(fds);
    let pidfd = sys::pidfd_open(pid)?;
    Ok((pid, pidfd))
}

/// Fork one host side on the request's descriptors (five: then a
/// client's mount namespace and workspace directory follow); its pidfd.
fn serve_one(fds: Vec<OwnedFd>) -> io::Result<(i32, OwnedFd)> {
    if fds.len() != 3 && fds.len() != 5 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let pid = sys::fork_single_threaded()?;
    if pid == 0 {
        // A client's workspace: its mount cloned from inside the client's
        // namespace, before anything else (H3 checks it is the directory
        // the engine checked).
        let staged =
            (fds.len() == 5).then(|| sys::clone_in_view(fds[3].as_raw_fd(), fds[4].as_raw_fd()));
        // The child: the three descriptors as 0-2, then the host side as
        // an exec'd helper runs it.
        let ok = fds[..3]
            .iter()
            .enumerate()
            .all(|(i, fd)| sys::dup2_raw(fd.as_raw_fd(), i as RawFd).is_ok());
        if !ok {
            sys::exit_now(125);
        }
        drop(fds);
        let mark = match staged {
            None => 0,
            Some(Ok(tree)) => {
                use std::os::fd::IntoRawFd;
                let raw = tree.into_raw_fd();
                if raw != 3 {
                    if sys::dup2_raw(raw, 3).is_err() {
                        sys::exit_now(125);
                    }
                    sys::close_raw(raw);
                }
                3
            }
            Some(Err(e)) => -e.raw_os_error().unwrap_or(libc::EIO),
        };
        STAGED_IN_VIEW.store(mark, std::sync::atomic::Ordering::Relaxed);
        super::run_helper();
    }
    drop(fds);
    // The child cannot have been reaped yet: only this loop reaps, and the
    // pidfd is taken before it runs again.
    let pidfd = sys::pidfd_open(pid)?;
    Ok((pid, pidfd))
}

fn answer(r: io::Result<(i32, OwnedFd)>) {
    let sent = match &r {
        Ok((pid, fd)) => sys::send_word_with_fd(0, *pid, Some(fd.as_fd())),
        Err(e) => sys::send_word_with_fd(0, -e.raw_os_error().unwrap_or(libc::EIO), None),
    };
    if sent.is_err() {
        sys::exit_now(0);
    }
}

/// Kill a forked worker: the very process its pidfd names (its parent, the
/// resident, reaps it).
pub fn kill_worker(pidfd: &OwnedFd) -> io::Result<()> {
    sys::pidfd_kill(pidfd.as_raw_fd())
}
