//! The evidence walk's reader: a process holding only the workspace owner's
//! ids (no capabilities) that opens files of the overlay's layers for P1.
//!
//! P1 is root of the sandbox's user namespace, and through the idmapped
//! lower layer it could read every file of the workspace, including ones the
//! owner may not (a root-only file in the workspace, one an ACL denies).
//! Everything P1 hashes, keeps or lists of the lower layer, and every upper
//! file the command does not own (a copy-up of someone else's file), is
//! therefore opened by this reader: the kernel checks the owner's rights
//! (mode bits, ACLs, LSMs) at the open, and P1 reads from the very file
//! descriptor that was checked, passed back over a socket pair.
//!
//! The reader is forked at the walk's first open through it
//! ([`LazyLayerReader`]): a walk that opens nothing through it (a run that
//! changed nothing) forks none.
//!
//! Request: `[layer u8][flags u32 LE][path bytes]`; answer: `[errno i32 LE]`
//! with the descriptor attached when the errno is 0.

use std::cell::RefCell;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, recvmsg, sendmsg, socketpair};

use super::sys;
use super::walk::{Layer, LayerOpen};

/// The reader process and P1's end of the socket pair.
pub(super) struct LayerReader {
    sock: OwnedFd,
    pid: libc::pid_t,
}

/// Drop to `uid`/`gid` (and `groups`, when the namespace allows setgroups)
/// with no capabilities left in any set.
fn drop_to_owner(uid: u32, gid: u32, groups: Option<&[u32]>) -> io::Result<()> {
    use nix::unistd::{Gid, Uid};
    if let Some(groups) = groups {
        let g: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
        nix::unistd::setgroups(&g).map_err(io::Error::from)?;
    }
    let g = Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g).map_err(io::Error::from)?;
    let u = Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u).map_err(io::Error::from)?;
    sys::clear_ambient_caps()?;
    for set in [
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
        caps::CapSet::Inheritable,
    ] {
        caps::clear(None, set).map_err(|e| io::Error::other(e.to_string()))?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
    Ok(())
}

/// How the reader opens below a layer's root: beneath it, through no
/// symlink or magic link and no mount crossing, never following the last
/// component, close-on-exec (the same resolution as the host side's opens in
/// `workspace::paths::beneath`; the sandbox imports nothing of the
/// workspace module, so it is written again here).
fn how(flags: nix::fcntl::OFlag) -> nix::fcntl::OpenHow {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .mode(nix::sys::stat::Mode::empty())
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        )
}

fn serve(sock: OwnedFd, lower: &OwnedFd, upper: &OwnedFd) -> ! {
    let mut buf = vec![0u8; 8192];
    loop {
        let n = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(sock.as_raw_fd(), &mut iov, None, MsgFlags::empty()) {
                Ok(m) => m.bytes,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => sys::exit_now(0),
            }
        };
        if n == 0 {
            sys::exit_now(0);
        }
        let answer = if n < 5 {
            Err(nix::errno::Errno::EINVAL)
        } else {
            let root = if buf[0] == 0 { lower } else { upper };
            let flags =
                OFlag::from_bits_truncate(
                    u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]) as i32
                ) & (OFlag::O_PATH | OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NONBLOCK);
            let path = std::ffi::OsStr::from_bytes(&buf[5..n]);
            let path = if path.is_empty() {
                std::ffi::OsStr::new(".")
            } else {
                path
            };
            nix::fcntl::openat2(root.as_fd(), path, how(flags))
        };
        let sent = match &answer {
            Ok(fd) => sys::send_word_with_fd(sock.as_raw_fd(), 0, Some(fd.as_fd())),
            Err(e) => sys::send_word_with_fd(sock.as_raw_fd(), *e as i32, None),
        };
        drop(answer);
        if sent.is_err() {
            sys::exit_now(0);
        }
    }
}

impl LayerReader {
    /// Fork the reader (P1 is single-threaded here), drop it to the owner's
    /// ids, and keep P1's end of the socket pair.
    pub(super) fn start(
        lower: &OwnedFd,
        upper: &OwnedFd,
        uid: u32,
        gid: u32,
        groups: Option<&[u32]>,
    ) -> io::Result<LayerReader> {
        let (mine, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let pid = sys::fork_single_threaded()?;
        if pid == 0 {
            drop(mine);
            if sys::die_with_parent().is_err() || drop_to_owner(uid, gid, groups).is_err() {
                sys::exit_now(125);
            }
            // The credential change reset the death signal: arm it again.
            if sys::die_with_parent().is_err() {
                sys::exit_now(125);
            }
            serve(theirs, lower, upper);
        }
        drop(theirs);
        let r = LayerReader { sock: mine, pid };
        // A first request proves the reader is up and dropped.
        match r.open(Layer::Lower, Path::new("."), OFlag::O_PATH) {
            Ok(_) => Ok(r),
            Err(e) => Err(io::Error::other(format!(
                "the evidence reader did not start: {e}"
            ))),
        }
    }
}

impl LayerOpen for LayerReader {
    fn open(&self, layer: Layer, rel: &Path, flags: OFlag) -> io::Result<OwnedFd> {
        let rel = rel.as_os_str().as_bytes();
        if rel.len() > 8000 {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        let mut req = Vec::with_capacity(5 + rel.len());
        req.push(match layer {
            Layer::Lower => 0u8,
            Layer::Upper => 1u8,
        });
        req.extend_from_slice(&(flags.bits() as u32).to_le_bytes());
        req.extend_from_slice(rel);
        sendmsg::<()>(
            self.sock.as_raw_fd(),
            &[IoSlice::new(&req)],
            &[],
            MsgFlags::empty(),
            None,
        )
        .map_err(io::Error::from)?;
        let Some((errno, fd)) = sys::recv_word_with_fd(self.sock.as_raw_fd())? else {
            return Err(io::Error::other("the evidence reader is gone"));
        };
        match (errno, fd) {
            (0, Some(fd)) => Ok(fd),
            (0, None) => Err(io::Error::other("the evidence reader sent no descriptor")),
            (e, _) => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

impl Drop for LayerReader {
    fn drop(&mut self) {
        let _ = nix::sys::socket::shutdown(self.sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.pid), None);
    }
}

/// The reader as the walk uses it: forked at the first open asked of it (P1
/// is single-threaded and every process of the command is dead by then, as
/// at the walk's start), then kept for every later open. A reader that does
/// not start fails that open and every later one, and the walk's caller
/// takes the failure with [`LazyLayerReader::start_failure`].
pub(super) struct LazyLayerReader<'a> {
    lower: &'a OwnedFd,
    upper: &'a OwnedFd,
    uid: u32,
    gid: u32,
    groups: Option<&'a [u32]>,
    /// Called once, when a reader is up (a phase mark).
    on_start: fn(),
    state: RefCell<Started>,
}

enum Started {
    NotYet,
    Up(LayerReader),
    Failed(Option<io::Error>),
}

impl<'a> LazyLayerReader<'a> {
    pub(super) fn new(
        lower: &'a OwnedFd,
        upper: &'a OwnedFd,
        uid: u32,
        gid: u32,
        groups: Option<&'a [u32]>,
        on_start: fn(),
    ) -> LazyLayerReader<'a> {
        LazyLayerReader {
            lower,
            upper,
            uid,
            gid,
            groups,
            on_start,
            state: RefCell::new(Started::NotYet),
        }
    }

    /// Why the reader did not start, when it was needed and did not.
    pub(super) fn start_failure(&self) -> Option<io::Error> {
        match &mut *self.state.borrow_mut() {
            Started::Failed(e) => Some(
                e.take()
                    .unwrap_or_else(|| io::Error::other("the evidence reader did not start")),
            ),
            _ => None,
        }
    }
}

impl LayerOpen for LazyLayerReader<'_> {
    fn open(&self, layer: Layer, rel: &Path, flags: OFlag) -> io::Result<OwnedFd> {
        let mut state = self.state.borrow_mut();
        if let Started::NotYet = *state {
            *state =
                match LayerReader::start(self.lower, self.upper, self.uid, self.gid, self.groups) {
                    Ok(r) => {
                        (self.on_start)();
                        Started::Up(r)
                    }
                    Err(e) => Started::Failed(Some(e)),
                };
        }
        match &*state {
            Started::Up(r) => r.open(layer, rel, flags),
            // Not a "denied" or "missing" errno: the walk stops on it.
            _ => Err(io::Error::other("the evidence reader did not start")),
        }
    }
}
