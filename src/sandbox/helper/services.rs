//! The run's declared host services, inside the sandbox (`spec.egress`'s
//! `services`, admitted by the engine against the system policy):
//!
//! - P4b (after the overlay and `/tmp`, before the root turns read-only):
//!   for a Unix socket service, P1 binds a listening socket in its own
//!   scratch tmpfs and shows it at the service's path: bind-mounted over
//!   what the image shows there (the host's socket, seen read-only), or
//!   onto a new empty file where the path's deepest existing directory is
//!   on the new root's tmpfs or the sandbox's `/tmp`; anywhere else it is
//!   not shown at that path, and a `connect()` to the path reaches it all
//!   the same (below). Paths are resolved inside the new root
//!   (`RESOLVE_IN_ROOT`), so an absolute link in the image (`/var/run` →
//!   `/run`) leads where it leads inside, never to the host's tree.
//!   P1 keeps an `O_PATH` descriptor of each socket file.
//! - P7: for a TCP service, a listener on its loopback address and port in
//!   the sandbox's own network namespace. Every service's listener goes to
//!   the engine with the proxy's sockets, in the plan's order (`egress.rs`).
//! - P8: the command's `connect()` to a Unix service's path is carried out
//!   by P1 (`netwatch.rs`, which refuses every other pathname socket): P1
//!   connects the command's own socket to the inode it holds
//!   (`/proc/self/fd/N`), so what the command's memory says afterwards, or
//!   what it renamed, cannot send the connection anywhere else.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::mount::MsFlags;
use nix::sys::stat::{Mode, SFlag, fstat, mkdirat};

use super::super::spec::SandboxSpec;
use super::error::HelperError;
use crate::model::ServiceEndpoint;

/// One Unix service's socket: its listener until P7 hands it over, and
/// the socket file P1 connects the command to.
struct UnixService {
    path: PathBuf,
    listener: Option<OwnedFd>,
    file: OwnedFd,
}

/// P1's Unix services, from P4b to the end (P1 is single-threaded).
static UNIX: Mutex<Vec<UnixService>> = Mutex::new(Vec::new());

/// A Unix service for the network watcher: the path the command names, and
/// the socket file to connect it to.
pub(crate) struct UnixTarget {
    pub path: Vec<u8>,
    pub file: std::os::fd::RawFd,
}

fn prep(op: &'static str) -> impl Fn(io::Error) -> HelperError {
    move |source| HelperError::Prepare { op, source }
}

/// P4b: each Unix service's listener, shown at its path where it can be.
/// Returns the record's lines about where each was shown.
pub(super) fn place_unix_services(
    spec: &SandboxSpec,
    root: &Path,
    scratch: &Path,
) -> Result<Vec<String>, HelperError> {
    let Some(plan) = &spec.egress else {
        return Ok(Vec::new());
    };
    let mut notes = Vec::new();
    let mut slot = UNIX.lock().unwrap_or_else(|p| p.into_inner());
    for (i, e) in plan.services.iter().enumerate() {
        let ServiceEndpoint::Unix(path) = e else {
            continue;
        };
        let file = scratch.join(format!("service-{i}.sock"));
        let l = std::os::unix::net::UnixListener::bind(&file).map_err(prep("service socket"))?;
        // Whoever the command runs as may connect to it (as to the host's).
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o777))
            .map_err(prep("service socket"))?;
        let opath = nix::fcntl::open(
            &file,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| prep("service socket")(e.into()))?;
        notes.push(match show_at(root, path, &file) {
            Ok(()) => format!("service {e}: shown at its path inside the sandbox"),
            Err(why) => format!(
                "service {e}: not shown at its path inside the sandbox ({why}); connect() to that path reaches it"
            ),
        });
        slot.push(UnixService {
            path: path.clone(),
            listener: Some(OwnedFd::from(l)),
            file: opath,
        });
    }
    Ok(notes)
}

/// Bind-mount `socket` at `path` inside `root`, over what is there, or
/// onto a new empty file in a directory of the root's tmpfs or `/tmp`.
fn show_at(root: &Path, path: &Path, socket: &Path) -> Result<(), String> {
    let in_root = |rel: &Path| {
        openat2(
            nix::fcntl::AT_FDCWD,
            root,
            OpenHow::new().flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC),
        )
        .and_then(|r| {
            let how = OpenHow::new()
                .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
                .resolve(ResolveFlag::RESOLVE_IN_ROOT);
            openat2(&r, rel, how)
        })
    };
    let rel: PathBuf = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let target = match in_root(&rel) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => make_target(&rel, &in_root)?,
        Err(e) => return Err(format!("{e}")),
    };
    let kind = fstat(&target).map_err(|e| e.to_string())?.st_mode & SFlag::S_IFMT.bits();
    if kind == SFlag::S_IFDIR.bits() {
        return Err("a directory is there".into());
    }
    let at = format!("/proc/self/fd/{}", target.as_raw_fd());
    nix::mount::mount(
        Some(socket),
        at.as_str(),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| format!("bind mount: {e}"))
}

/// An empty file at `rel`, its missing directories made, where the deepest
/// existing directory is on the root's own tmpfs or the sandbox's `/tmp`
/// (never in an image tree, the workspace or any other mount).
fn make_target(
    rel: &Path,
    in_root: &dyn Fn(&Path) -> nix::Result<OwnedFd>,
) -> Result<OwnedFd, String> {
    let dev = |fd: &OwnedFd| fstat(fd).map(|s| s.st_dev).ok();
    let writable_devs: Vec<u64> = [Path::new(""), Path::new("tmp")]
        .iter()
        .filter_map(|p| in_root(p).ok().and_then(|fd| dev(&fd)))
        .collect();
    let parts: Vec<&std::ffi::OsStr> = rel.iter().collect();
    let (name, dirs) = parts.split_last().ok_or("no file name")?;
    let mut depth = dirs.len();
    let mut dir = loop {
        let p: PathBuf = dirs[..depth].iter().collect();
        match in_root(&p) {
            Ok(fd) => break fd,
            Err(_) if depth > 0 => depth -= 1,
            Err(e) => return Err(e.to_string()),
        }
    };
    if !dev(&dir).is_some_and(|d| writable_devs.contains(&d)) {
        let existing: PathBuf = dirs[..depth].iter().collect();
        return Err(format!(
            "/{} is in a tree the image shows read-only",
            existing.display()
        ));
    }
    for d in &dirs[depth..] {
        mkdirat(&dir, *d, Mode::from_bits_truncate(0o755)).map_err(|e| e.to_string())?;
        dir = openat(
            &dir,
            *d,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| e.to_string())?;
    }
    openat(
        &dir,
        *name,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o666),
    )
    .map_err(|e| e.to_string())
}

/// P7: every service's listener in the plan's order: a TCP listener
/// made now in the sandbox's network namespace, a Unix one from P4b.
pub(super) fn listeners(spec: &SandboxSpec) -> Result<Vec<OwnedFd>, HelperError> {
    let Some(plan) = &spec.egress else {
        return Ok(Vec::new());
    };
    let mut unix = UNIX.lock().unwrap_or_else(|p| p.into_inner());
    let mut unix_iter = unix.iter_mut();
    let mut out = Vec::new();
    for e in &plan.services {
        match e {
            ServiceEndpoint::Tcp(addr) => {
                let l = std::net::TcpListener::bind(addr).map_err(|e| {
                    prep("service listener")(io::Error::new(
                        e.kind(),
                        format!("cannot listen on {addr} inside the sandbox: {e}"),
                    ))
                })?;
                out.push(OwnedFd::from(l));
            }
            ServiceEndpoint::Unix(_) => {
                let l = unix_iter
                    .next()
                    .and_then(|u| u.listener.take())
                    .ok_or_else(|| prep("service listener")(io::Error::other("not made")))?;
                out.push(l);
            }
        }
    }
    Ok(out)
}

/// P8: the Unix services for the network watcher.
pub(crate) fn unix_targets() -> Vec<UnixTarget> {
    let unix = UNIX.lock().unwrap_or_else(|p| p.into_inner());
    unix.iter()
        .map(|u| UnixTarget {
            path: u.path.as_os_str().as_encoded_bytes().to_vec(),
            file: u.file.as_fd().as_raw_fd(),
        })
        .collect()
}
