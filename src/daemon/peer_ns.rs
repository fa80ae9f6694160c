//! Clients in containers: an agent in a mount namespace of its own (a pod,
//! `unshare -m`) submits over the daemon's socket bind-mounted into it, and
//! its `working_dir` is a path in *its* namespace. The daemon resolves the
//! path on the host (with the client's rights, as for every client) and
//! rehearses and promotes that directory; this module makes sure it is the
//! directory the client means: the same path in the client's namespace,
//! reached through the client's `/proc/PID/root` with the client's uid and
//! gid, must be the same directory (device and inode). Otherwise the
//! submission is refused, never rehearsed against whatever the host has at
//! that path.
//!
//! The client's process is pinned by the pidfd the kernel gives for the
//! socket's peer (`SO_PEERPIDFD`, taken at accept): its `/proc/PID` is
//! opened, then the pidfd must still show the process alive, so a pid
//! reused after the client exited is never mistaken for it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::stat::Mode;

use crate::engine::EngineError;
use crate::engine::Input;

/// The peer's pidfd, from the accepted socket: `Err(ENOPROTOOPT)` on a
/// kernel without `SO_PEERPIDFD` (before 6.5); another error when the
/// peer is gone.
pub(super) fn peer_pidfd(stream: &tokio::net::UnixStream) -> Result<OwnedFd, nix::Error> {
    nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerPidfd)
}

fn refused(reason: impl Into<String>) -> EngineError {
    EngineError::invalid(Input::Workspace, reason)
}

/// Is the process behind `pidfd` still running? (A pidfd polls readable
/// once its process has exited.)
fn alive(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(nix::poll::poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

fn ns_of(dir: &OwnedFd) -> nix::Result<(u64, u64)> {
    let st = nix::sys::stat::fstatat(dir, "ns/mnt", nix::fcntl::AtFlags::empty())?;
    Ok((st.st_dev, st.st_ino))
}

/// Check that `working_dir`, as the client's process sees it, is the
/// directory `host` (device, inode) the daemon resolved on the host.
/// `pid`/`pidfd`: the socket's peer; `uid`/`gid`: its credentials.
pub(super) fn same_directory(
    pid: Option<i32>,
    pidfd: Result<&OwnedFd, nix::Error>,
    uid: u32,
    gid: u32,
    working_dir: &Path,
    host: (u64, u64),
) -> Result<(), EngineError> {
    let gone = || {
        refused(
            "the process that connected has exited; submit from the process that holds the connection",
        )
    };
    let pidfd = match pidfd {
        Ok(fd) => fd,
        // A kernel without SO_PEERPIDFD: the client cannot be pinned; its
        // working_dir is taken as a host path.
        Err(nix::Error::ENOPROTOOPT) => {
            tracing::debug!("no SO_PEERPIDFD: working_dir taken as a host path");
            return Ok(());
        }
        Err(_) => return Err(gone()),
    };
    let Some(pid) = pid.filter(|p| *p > 0) else {
        return Err(refused(
            "the daemon cannot see the submitting process (it runs in a pid namespace the daemon's is not an ancestor of); run the daemon in the host's pid namespace (hostPID in Kubernetes)",
        ));
    };
    let proc_dir = nix::fcntl::open(
        format!("/proc/{pid}").as_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    );
    // Opened first, checked second: if the pidfd's process is still alive
    // now, /proc/PID was its directory when it was opened (a pid is reused
    // only after its process is gone).
    let proc_dir = match proc_dir {
        Ok(d) if alive(pidfd) => d,
        _ => return Err(gone()),
    };
    let mine = nix::sys::stat::stat("/proc/self/ns/mnt")
        .map(|st| (st.st_dev, st.st_ino))
        .map_err(|e| refused(format!("the daemon's own mount namespace: {e}")))?;
    let theirs = ns_of(&proc_dir).map_err(|_| gone())?;
    if theirs == mine {
        return Ok(());
    }
    let client_view = std::thread::scope(|s| {
        s.spawn(|| resolve_as(&proc_dir, uid, gid, working_dir))
            .join()
            .unwrap_or_else(|_| Err("the check panicked".into()))
    });
    if !alive(pidfd) {
        return Err(gone());
    }
    let shown = working_dir.display();
    match client_view {
        Ok(id) if id == host => Ok(()),
        Ok(_) => Err(refused(format!(
            "{shown} in your mount namespace is another directory than {shown} on this host; dryrun rehearses a container's workspace only when it is bind-mounted at the same path on the host and in the container"
        ))),
        Err(e) => Err(refused(format!(
            "{shown} as your mount namespace shows it: {e}"
        ))),
    }
}

/// `path` below the root of the process at `proc_dir`, opened with the
/// client's uid and gid as this thread's filesystem ids (a thread of its
/// own: `setfsuid` is per thread, and dropping to a non-zero fsuid drops
/// root's file capabilities for the thread).
fn resolve_as(proc_dir: &OwnedFd, uid: u32, gid: u32, path: &Path) -> Result<(u64, u64), String> {
    use nix::unistd::{Gid, Uid, setfsgid, setfsuid};
    setfsgid(Gid::from_raw(gid));
    setfsuid(Uid::from_raw(uid));
    // setfsuid answers the previous value: the second call shows the first
    // took effect.
    if setfsuid(Uid::from_raw(uid)) != Uid::from_raw(uid)
        || setfsgid(Gid::from_raw(gid)) != Gid::from_raw(gid)
    {
        return Err("could not take the client's identity".into());
    }
    let root = nix::fcntl::openat(
        proc_dir,
        "root",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("its root: {}", e.desc()))?;
    let rel = path.strip_prefix("/").unwrap_or(path);
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(&root, rel, how).map_err(|e| e.desc().to_string())?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| e.desc().to_string())?;
    Ok((st.st_dev, st.st_ino))
}
