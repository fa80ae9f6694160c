//! Raw system calls that neither `nix` nor `libc` wrap. Every `unsafe` block is
//! exactly one system call with a `SAFETY:` line.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;

fn cstr(p: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// What a mount call reaches: the mount alone, or it and every mount below
/// it (`AT_RECURSIVE`).
#[derive(Clone, Copy)]
pub(super) enum Reach {
    Mount,
    Tree,
}

impl Reach {
    fn flag(self) -> libc::c_uint {
        match self {
            Reach::Mount => 0,
            Reach::Tree => libc::AT_RECURSIVE as libc::c_uint,
        }
    }
}

/// `open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)`, with
/// `AT_RECURSIVE` for [`Reach::Tree`]: a detached copy of the mount at
/// `path` (and of every mount below it).
pub(super) fn open_tree_clone(path: &Path, reach: Reach) -> io::Result<OwnedFd> {
    let c = cstr(path)?;
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; the
    // kernel returns a new fd or -1.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | reach.flag() | libc::O_CLOEXEC as libc::c_uint,
        )
    })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `open_tree(fd, "", AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)`
/// (with `AT_RECURSIVE` for [`Reach::Tree`]): a detached copy of the
/// mount at the directory `fd` (an `O_PATH` descriptor) refers to, so the
/// tree cloned is the one that was opened and checked, whatever its path
/// leads to now.
pub(super) fn open_tree_clone_at(fd: RawFd, reach: Reach) -> io::Result<OwnedFd> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let empty = c"";
    // SAFETY: `empty` is a valid NUL-terminated string; `fd` is an open
    // descriptor the caller owns; the kernel returns a new fd or -1.
    let out = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd,
            empty.as_ptr(),
            OPEN_TREE_CLONE
                | libc::AT_EMPTY_PATH as libc::c_uint
                | reach.flag()
                | libc::O_CLOEXEC as libc::c_uint,
        )
    })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(out as RawFd) })
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(super) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `mount_setattr(fd, "", AT_EMPTY_PATH, {attr_set, userns_fd})`, with
/// `AT_RECURSIVE` for [`Reach::Tree`]. `userns_fd` only with
/// `MOUNT_ATTR_IDMAP`.
pub(super) fn mount_setattr(
    mount_fd: RawFd,
    reach: Reach,
    attr_set: u64,
    userns_fd: Option<RawFd>,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns_fd.map_or(0, |fd| fd as u64),
    };
    let empty = c"";
    // SAFETY: `attr` and `empty` live across the call and the size passed is
    // the size of the struct the kernel reads.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            mount_fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | reach.flag(),
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    Ok(())
}

/// `move_mount(fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH)`: attach a
/// detached mount at `target`.
pub(super) fn move_mount_to(mount_fd: RawFd, target: &Path) -> io::Result<()> {
    let c = cstr(target)?;
    let empty = c"";
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    // SAFETY: both strings are valid for the duration of the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mount_fd,
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })?;
    Ok(())
}

/// `pidfd_open(pid, 0)`.
/// How many bytes written to `fd` its reader has not taken yet
/// (`FIONREAD`: a pipe's contents; 0 for a terminal's output or a file
/// written at its end).
pub(super) fn unread_bytes(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at
    // `n`, alive for the call; `fd` is open for the call's duration.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) } as libc::c_long)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

pub(super) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments; returns a new fd or -1.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_open(tid, PIDFD_THREAD)`: a pidfd for any thread, not only a
/// thread group's leader (Linux 6.9 and later; earlier kernels refuse the
/// flag).
pub(super) fn pidfd_open_thread(tid: libc::pid_t) -> io::Result<OwnedFd> {
    // PIDFD_THREAD is O_EXCL.
    // SAFETY: plain integer arguments; returns a new fd or -1.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, tid, libc::O_EXCL) })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_getfd(pidfd, targetfd, 0)`: a copy of another process's fd.
pub(super) fn pidfd_getfd(pidfd: RawFd, target: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only; returns a new fd or -1.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, target, 0) })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `dup2(old, new)` onto a fixed descriptor number.
pub(super) fn dup2_raw(old: RawFd, new: RawFd) -> io::Result<()> {
    // SAFETY: integer arguments only; `new` is a number the caller reserved.
    let r = unsafe { libc::dup2(old, new) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Close one raw fd that no Rust handle owns.
pub(super) fn close_raw(fd: RawFd) {
    // SAFETY: the caller guarantees no Rust object owns `fd`.
    unsafe { libc::close(fd) };
}

/// Adopt a raw fd returned by a C library as an `OwnedFd`.
pub(super) fn adopt_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller passes an fd it exclusively owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, prog)`:
/// install a filter (no_new_privs must already be set) and get its
/// user-notification listener.
pub(super) fn seccomp_set_filter_with_listener(prog: &[libc::sock_filter]) -> io::Result<RawFd> {
    const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
    const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel
    // copies the program.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    })?;
    Ok(fd as RawFd)
}

/// `SECCOMP_IOCTL_NOTIF_RECV`: wait for the next user notification.
pub(super) fn notif_receive(listener: RawFd) -> io::Result<libc::seccomp_notif> {
    // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `req` is a valid, writable seccomp_notif for the call.
    check(unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) }.into())?;
    Ok(req)
}

/// `SECCOMP_IOCTL_NOTIF_ID_VALID`: is the notification still pending (its
/// caller alive and waiting)?
pub(super) fn notif_id_valid(listener: RawFd, id: u64) -> bool {
    // SAFETY: the kernel reads one u64 from `id`.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0 }
}

/// `SECCOMP_IOCTL_NOTIF_SEND`: answer notification `id` with a return value,
/// an errno (negative, or 0), or `continue_call` (let the kernel run it).
pub(super) fn notif_respond(
    listener: RawFd,
    id: u64,
    val: i64,
    error: i32,
    continue_call: bool,
) -> io::Result<()> {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags: if continue_call {
            libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
        } else {
            0
        },
    };
    // SAFETY: `resp` is a valid seccomp_notif_resp for the call.
    check(unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) }.into())?;
    Ok(())
}

/// `close_range(first, ~0, 0)`: close every fd from `first` up.
pub(super) fn close_fds_from(first: u32) -> io::Result<()> {
    // SAFETY: closes descriptors only; the caller owns no Rust handle to them
    // that it still uses (documented at every call site).
    check(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) })?;
    Ok(())
}

/// The Landlock ABI version the running kernel offers (0 when Landlock is
/// absent or disabled).
pub(super) fn landlock_abi_version() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attr, size 0 and the VERSION flag the call only
    // returns an integer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 { 0 } else { v as u32 }
}

/// Bring the loopback interface of the current network namespace up.
pub(super) fn loopback_up() -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io::Error::from)?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    req.ifr_ifru.ifru_flags =
        (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: `req` is a valid ifreq that lives across the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set the secure bits of the current thread (`prctl(PR_SET_SECUREBITS)`).
pub(super) fn set_securebits(bits: libc::c_ulong) -> io::Result<()> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drop one capability from the bounding set (`prctl(PR_CAPBSET_DROP)`).
pub(super) fn capbset_drop(cap: libc::c_ulong) -> io::Result<()> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clear the ambient capability set.
pub(super) fn clear_ambient_caps() -> io::Result<()> {
    // SAFETY: integer arguments only.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fork()`. Only called from the single-threaded sandbox helper.
///
/// Returns 0 in the child and the child's pid in the parent.
pub(super) fn fork_single_threaded() -> io::Result<libc::pid_t> {
    // SAFETY: the helper process is single-threaded (it is a fresh exec of our
    // binary that never starts threads), so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// `execve(path, argv, envp)`; returns only on failure.
pub(super) fn execve(path: &CString, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: argv/envp are NULL-terminated arrays of pointers into CStrings
    // that outlive the call.
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    io::Error::last_os_error()
}

/// `_exit(code)`: leave a forked child without running destructors or atexit
/// handlers that belong to the parent.
pub(super) fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// Become the child reaper's victim when our parent dies.
pub(super) fn die_with_parent() -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(io::Error::from)
}

/// Write all of `buf` to a raw fd (used where std handles are not set up).
pub(super) fn write_all_fd(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a valid readable slice for its length.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Receive file descriptors sent with `SCM_RIGHTS` on a unix stream (one
/// `recvmsg`); each becomes ours (close-on-exec).
pub(super) fn recv_fds(sock: RawFd) -> io::Result<Vec<OwnedFd>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut buf = [0u8; 16];
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    // The proxy's listener, the DNS socket and one listener per service.
    let mut space = nix::cmsg_space!([RawFd; 24]);
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let mut out = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // Each received descriptor is new in this process and owned
            // by nobody else.
            out.extend(fds.into_iter().map(adopt_fd));
        }
    }
    if out.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the sandbox's helper closed the egress control connection before handing over its sockets",
        ));
    }
    Ok(out)
}

/// `poll` one descriptor this process keeps open for its whole life (the
/// resident helper's socket, fd 0) for input, up to `timeout_ms`.
pub(super) fn poll_readable(fd: RawFd, timeout_ms: u16) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    // SAFETY: the caller names a descriptor that stays open while this
    // borrow lives (the call's duration).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::from(timeout_ms)), Ok(n) if n > 0)
}

/// `pidfd_send_signal(pidfd, SIGKILL, NULL, 0)`: kill the very process the
/// pidfd names (never a later process that reused its pid).
pub(super) fn pidfd_kill(pidfd: RawFd) -> io::Result<()> {
    // SAFETY: integer arguments and a null siginfo pointer, which the call
    // accepts.
    check(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(|_| ())
}

/// Send a 4-byte answer (an `i32`, little-endian) on a seqpacket socket,
/// with a descriptor attached when there is one.
pub(super) fn send_word_with_fd(
    sock: RawFd,
    word: i32,
    fd: Option<std::os::fd::BorrowedFd<'_>>,
) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::os::fd::AsRawFd;
    let raw = fd.map(|f| [f.as_raw_fd()]);
    let cmsgs: Vec<ControlMessage<'_>> = raw
        .as_ref()
        .map(|r| vec![ControlMessage::ScmRights(r)])
        .unwrap_or_default();
    sendmsg::<()>(
        sock,
        &[io::IoSlice::new(&word.to_le_bytes())],
        &cmsgs,
        MsgFlags::empty(),
        None,
    )
    .map(|_| ())
    .map_err(io::Error::from)
}

/// Receive what [`send_word_with_fd`] sent: the word and the descriptor (if
/// any; close-on-exec, ours). `None` when the peer closed its end.
pub(super) fn recv_word_with_fd(sock: RawFd) -> io::Result<Option<(i32, Option<OwnedFd>)>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut ans = [0u8; 4];
    let mut iov = [io::IoSliceMut::new(&mut ans)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let mut fd = None;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(got) = c {
            for f in got {
                // Just received with SCM_RIGHTS: owned by nothing else (a
                // second one is closed here).
                fd.get_or_insert(adopt_fd(f));
            }
        }
    }
    if msg.bytes != 4 {
        return Ok(None);
    }
    Ok(Some((i32::from_le_bytes(ans), fd)))
}

/// Every ignored signal back to its default, and no signal blocked. An
/// ignored signal survives fork and exec, so whatever started the daemon
/// ignored (a shell's background job ignores SIGINT and SIGQUIT, `nohup`
/// SIGHUP) would otherwise reach the sandboxed command, and a helper forked
/// from the resident would differ from an exec'd one. Handlers are left
/// alone (exec resets them; the runtime's own are needed).
pub(super) fn reset_ignored_signals() -> io::Result<()> {
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `sigaction` is plain old data; all-zero is a valid value.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a query (null new action) into a valid, writable struct.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            continue; // a number the C library reserves
        }
        if old.sa_sigaction == libc::SIG_IGN {
            // SAFETY: installs SIG_DFL for a valid signal; no handler code.
            if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
                return Err(io::Error::last_os_error());
            }
        }
    }
    nix::sys::signal::SigSet::empty()
        .thread_set_mask()
        .map_err(io::Error::from)
}

/// This thread's supplementary groups, group and user ids, in that order
/// (raw `setgroups`, `setresgid`, `setresuid`: the C library's wrappers
/// change every thread of the process, these only the calling one). The
/// thread cannot change back: a thread that calls this is one that ends.
pub(crate) fn become_on_this_thread(uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    let list: Vec<libc::gid_t> = groups.to_vec();
    // SAFETY: `list` outlives the call and holds `list.len()` gids.
    check(unsafe { libc::syscall(libc::SYS_setgroups, list.len(), list.as_ptr()) })?;
    // SAFETY: integer arguments only.
    check(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) })?;
    // SAFETY: integer arguments only.
    check(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) })?;
    Ok(())
}

/// Enter the mount namespace `ns` (a `/proc/PID/ns/mnt` descriptor) and
/// make `root` (a directory in it) this process's root and working
/// directory: paths then resolve as that process sees them. Single-threaded
/// callers only (a mount namespace is joined by the whole `fs` state).
pub(super) fn enter_view(ns: RawFd, root: RawFd) -> io::Result<()> {
    // SAFETY: `ns` is an open descriptor the caller owns for the call.
    let ns = unsafe { std::os::fd::BorrowedFd::borrow_raw(ns) };
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNS)?;
    // SAFETY: `root` is an open descriptor the caller owns for the call.
    nix::unistd::fchdir(unsafe { std::os::fd::BorrowedFd::borrow_raw(root) })?;
    nix::unistd::chroot(".")?;
    nix::unistd::chdir("/")?;
    Ok(())
}

/// A detached clone of the mount at the directory `dir` (an `O_PATH`
/// descriptor into the mount namespace `ns`), taken from inside that
/// namespace (the kernel clones only mounts of the caller's own), then
/// back in this process's namespace (`setns` resets the root and working
/// directory to its root). Single-threaded callers only.
pub(super) fn clone_in_view(ns: RawFd, dir: RawFd) -> io::Result<OwnedFd> {
    let own = nix::fcntl::open(
        "/proc/self/ns/mnt",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: `ns` is an open descriptor the caller owns for the call.
    let theirs = unsafe { std::os::fd::BorrowedFd::borrow_raw(ns) };
    nix::sched::setns(theirs, nix::sched::CloneFlags::CLONE_NEWNS)?;
    let tree = open_tree_clone_at(dir, Reach::Mount);
    // Back home whatever the clone gave; a process that cannot return is
    // of no further use.
    if nix::sched::setns(&own, nix::sched::CloneFlags::CLONE_NEWNS).is_err() {
        exit_now(125);
    }
    tree
}

/// What `statx` says of an object opened `O_PATH` (not followed).
pub(super) struct MountPointStat {
    pub dir: bool,
    pub dev: u64,
    pub ino: u64,
    /// The id of the mount it is on, when it is that mount's root (a
    /// kernel that does not say is `None`: not a root known to be one).
    pub root_of_mount: Option<u64>,
}

/// `statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
/// STATX_TYPE | STATX_INO | STATX_MNT_ID)`.
pub(super) fn statx_mount_point(f: &std::fs::File) -> io::Result<MountPointStat> {
    use std::os::fd::AsRawFd;
    // SAFETY: all-zero bytes are a valid `statx` (plain integers).
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a NUL-terminated literal and `f` open for the
    // call; the kernel writes one `statx` through the pointer, which
    // points at `st`.
    check(unsafe {
        libc::statx(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT,
            libc::STATX_TYPE | libc::STATX_INO | libc::STATX_MNT_ID,
            &mut st,
        )
    } as libc::c_long)?;
    let root = libc::STATX_ATTR_MOUNT_ROOT as u64;
    let is_root = st.stx_attributes_mask & root != 0 && st.stx_attributes & root != 0;
    Ok(MountPointStat {
        dir: u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR,
        dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
        ino: st.stx_ino,
        root_of_mount: (is_root && st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id),
    })
}
