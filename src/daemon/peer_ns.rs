//! Clients in containers: an agent in a mount namespace of its own (a pod,
//! `unshare -m`) submits over the daemon's socket bind-mounted into it, and
//! its `working_dir` is a path in *its* namespace. This module finds the
//! directory the client means: the path resolved under the client's root
//! (`/proc/PID/root`, `RESOLVE_IN_ROOT`, no magic links) with the client's
//! uid and gid. When the same path names the same directory (device and
//! inode) on the host, the workspace is a host directory as for any
//! client; otherwise the daemon keeps the client's view (its mount
//! namespace, root and the directory, as open descriptors:
//! `workspace::owner::view`), and the workspace is resolved again,
//! rehearsed and promoted in it, never on whatever the host has at that
//! path.
//!
//! The client's process is pinned by the pidfd the kernel gives for the
//! socket's peer (`SO_PEERPIDFD`, taken at accept): its `/proc/PID` is
//! opened, then the pidfd must still show the process alive (after the
//! namespace, root and directory are opened from it), so a pid reused
//! after the client exited is never mistaken for it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::stat::Mode;

use crate::engine::EngineError;
use crate::engine::Input;
use crate::workspace::owner::view::ClientView;

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

/// Where the client's `working_dir` is to be reached. `None`: on the host
/// (the client shares the daemon's mount namespace, or the path names the
/// same directory, device and inode, in both); otherwise the client's own
/// view, pinned: its mount namespace, its root and the directory as the
/// client resolves it (under its root, no magic links, with its uid and
/// gid), taken from its `/proc/PID` while the pidfd shows the process
/// alive. `pid`/`pidfd`: the socket's peer; `uid`/`gid`: its credentials.
pub(super) fn client_view(
    pid: Option<i32>,
    pidfd: Result<&OwnedFd, nix::Error>,
    uid: u32,
    gid: u32,
    working_dir: &Path,
) -> Result<Option<ClientView>, EngineError> {
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
            return Ok(None);
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
        return Ok(None);
    }
    // The namespace and root, from the directory pinned above.
    let opened = |name: &str, flags: OFlag| {
        nix::fcntl::openat(&proc_dir, name, flags | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|_| gone())
    };
    let mnt_ns = opened("ns/mnt", OFlag::O_RDONLY)?;
    let root = opened("root", OFlag::O_PATH | OFlag::O_DIRECTORY)?;
    let resolved = std::thread::scope(|s| {
        s.spawn(|| resolve_as(&root, uid, gid, working_dir))
            .join()
            .unwrap_or_else(|_| Err("the check panicked".into()))
    });
    if !alive(pidfd) {
        return Err(gone());
    }
    let shown = working_dir.display();
    let (dir, client, host) =
        resolved.map_err(|e| refused(format!("{shown} as your mount namespace shows it: {e}")))?;
    if host == Some(client) {
        return Ok(None);
    }
    if !nix::unistd::geteuid().is_root() {
        return Err(refused(format!(
            "{shown} in your mount namespace is another directory than {shown} on this host; only a root daemon rehearses a workspace in a client's own mount namespace, so bind-mount it at the same path on the host and in the container"
        )));
    }
    Ok(Some(ClientView {
        mnt_ns,
        root,
        dir,
        pid,
        uid,
        mnt_ns_id: theirs.1,
        dev: client.0,
        ino: client.1,
    }))
}

/// `path` below the client's `root`, opened with the client's uid and gid
/// as this thread's filesystem ids (a thread of its own: `setfsuid` is per
/// thread, and dropping to a non-zero fsuid drops root's file capabilities
/// for the thread): the directory, its device and inode, and the device
/// and inode the same path names on the host (`None` when it names
/// nothing there the client may reach).
type Resolved = (OwnedFd, (u64, u64), Option<(u64, u64)>);

fn resolve_as(root: &OwnedFd, uid: u32, gid: u32, path: &Path) -> Result<Resolved, String> {
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
    let rel = path.strip_prefix("/").unwrap_or(path);
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let id = |fd: &OwnedFd| {
        nix::sys::stat::fstat(fd)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|e| e.desc().to_string())
    };
    let fd = nix::fcntl::openat2(root, rel, how).map_err(|e| e.desc().to_string())?;
    let client = id(&fd)?;
    let host = nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .and_then(|slash| nix::fcntl::openat2(&slash, rel, how).ok())
    .and_then(|h| id(&h).ok());
    Ok((fd, client, host))
}
