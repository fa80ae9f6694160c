//! The operations themselves, run in-process or in the agent.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::SFlag;

use super::{AccessError, Resolved};
use crate::workspace::apply::{Identity, LocalWorkspace};

use crate::workspace::paths::beneath;

/// Resolve `path` as the calling process sees it: absolute, an existing
/// directory, not `/`; then open the canonical path from `/` refusing every
/// symlink on the way and stat what was opened.
pub(super) fn resolve_here(path: &Path) -> Result<Resolved, AccessError> {
    let shown = path.display().to_string();
    let uid = nix::unistd::geteuid().as_raw();
    if !path.is_absolute() {
        return Err(AccessError::Other {
            path: shown,
            message: "is relative; give an absolute path".into(),
        });
    }
    // Through the host opener (the view's resolver in the binary): from
    // `/`, no symlink followed but by the opener itself, nothing on a
    // mount it does not cross (a FUSE mount another user serves, which
    // could keep this process waiting forever) asked.
    let (canonical, fd) =
        crate::workspace::paths::open_on_host(path, true).map_err(|e| match e.raw_os_error() {
            Some(n) => AccessError::from_errno(&shown, uid, Errno::from_raw(n)),
            None => AccessError::Other {
                path: shown.clone(),
                message: format!("cannot be looked at: {e}"),
            },
        })?;
    if canonical == Path::new("/") {
        return Err(AccessError::Other {
            path: shown,
            message: "the root directory cannot be a workspace; pick a project directory".into(),
        });
    }
    let st = nix::sys::stat::fstat(&fd).map_err(|e| AccessError::from_errno(&shown, uid, e))?;
    if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFDIR.bits() {
        return Err(AccessError::Other {
            path: shown,
            message: "is not a directory".into(),
        });
    }
    Ok(Resolved {
        canonical,
        identity: Identity {
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            gid: st.st_gid,
        },
    })
}

/// Read a regular file below the workspace root: no symlink anywhere, no
/// fifo or device (opened non-blocking, checked on the open file), at most
/// `max` bytes. `Ok(None)` when it does not exist.
pub(super) fn read_here(
    ws: &LocalWorkspace,
    rel: &[u8],
    max: u64,
) -> Result<Option<Vec<u8>>, AccessError> {
    let shown = crate::workspace::paths::escape_for_humans(rel);
    let uid = nix::unistd::geteuid().as_raw();
    let fd = match nix::fcntl::openat2(
        ws.root_fd(),
        OsStr::from_bytes(rel),
        beneath(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(AccessError::from_errno(&shown, uid, e)),
    };
    let st = nix::sys::stat::fstat(&fd).map_err(|e| AccessError::from_errno(&shown, uid, e))?;
    if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
        return Err(AccessError::NotRegular { path: shown });
    }
    if st.st_size as u64 > max {
        return Err(AccessError::TooLarge { path: shown, max });
    }
    let mut out = Vec::with_capacity(st.st_size as usize);
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| AccessError::Other {
            path: shown.clone(),
            message: e.to_string(),
        })?;
    if out.len() as u64 > max {
        return Err(AccessError::TooLarge { path: shown, max });
    }
    Ok(Some(out))
}
