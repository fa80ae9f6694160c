//! The live lane's metadata steps on the real workspace: a path's
//! permission bits, and the modification time the rehearsal left on it.
//! Reached like every other step (`apply.rs`): the parent directory through
//! `openat2` beneath the workspace root, the last component never followed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;

use super::apply::{ApplyError, LocalWorkspace, perr};
use crate::workspace::paths::beneath as how;

impl LocalWorkspace {
    pub(crate) fn chmod(&self, rel: &[u8], mode: u32) -> Result<(), ApplyError> {
        // An O_PATH handle: its owner is checked without needing to read it,
        // and the mode is changed on that very inode (through its
        // /proc/self/fd link, which names the open file, not a path).
        let fd = if rel == b"." {
            nix::fcntl::openat2(&self.root, ".", how(OFlag::O_PATH | OFlag::O_DIRECTORY))
        } else {
            let (dir, name) = self.parent(rel)?;
            nix::fcntl::openat(
                &dir,
                OsStr::from_bytes(&name),
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
        }
        .map_err(|e| perr(rel, e))?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| perr(rel, e))?;
        if st.st_uid != self.owner.0 {
            return Err(perr(
                rel,
                format!(
                    "belongs to uid {}, not the workspace owner: its mode is not changed",
                    st.st_uid
                ),
            ));
        }
        if st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits() {
            return Err(perr(rel, "is a symlink: its mode is not changed"));
        }
        use std::os::fd::AsRawFd;
        self.note().inode(rel);
        nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
            Mode::from_bits_truncate(mode & 0o1777),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(|e| perr(rel, e))
    }

    /// Give `rel` (not followed when a symlink) the modification time
    /// `mtime_ns` (nanoseconds since the epoch), its access time left
    /// alone. A file the owner may write but does not own cannot take an
    /// explicit time (the kernel allows that to its owner only) and gets
    /// the current one, as a `touch` of it would; a time that cannot be
    /// set at all leaves the path as the step before wrote it, never
    /// undoes the promotion (a time is not content).
    pub(crate) fn set_mtime(&self, rel: &[u8], mtime_ns: i64) -> Result<(), ApplyError> {
        let t = TimeSpec::new(
            mtime_ns.div_euclid(1_000_000_000),
            mtime_ns.rem_euclid(1_000_000_000),
        );
        self.note().inode(rel);
        let set = |mtime: &TimeSpec| -> nix::Result<()> {
            if rel == b"." {
                let fd = nix::fcntl::openat2(
                    &self.root,
                    ".",
                    how(OFlag::O_RDONLY | OFlag::O_DIRECTORY),
                )?;
                nix::sys::stat::futimens(&fd, &TimeSpec::UTIME_OMIT, mtime)
            } else {
                let (dir, name) = self.parent(rel).map_err(|_| Errno::ENOENT)?;
                nix::sys::stat::utimensat(
                    &dir,
                    OsStr::from_bytes(&name),
                    &TimeSpec::UTIME_OMIT,
                    mtime,
                    UtimensatFlags::NoFollowSymlink,
                )
            }
        };
        let not_set = |e: Errno| {
            let path = crate::workspace::paths::escape_for_humans(rel);
            tracing::warn!(%path, error = %e, "modification time not set");
        };
        match set(&t) {
            Ok(()) => Ok(()),
            // The path is not where the steps put it: drift, as for any step.
            Err(e @ (Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV)) => {
                Err(perr(rel, format!("setting its modification time: {e}")))
            }
            Err(Errno::EPERM | Errno::EACCES) => {
                if let Err(e) = set(&TimeSpec::UTIME_NOW) {
                    not_set(e);
                }
                Ok(())
            }
            // A time this file system cannot hold, say.
            Err(e) => {
                not_set(e);
                Ok(())
            }
        }
    }
}
