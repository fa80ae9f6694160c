//! The home the view makes for a command whose `HOME` it does not show
//! (a directory under `/tmp` or `/var/tmp`), made inside the new root
//! without following anything the host's trees hold.

use std::path::Path;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open};
use nix::sys::stat::Mode;

use super::super::view::ViewSpec;

/// Makes the directory `path` (absolute, `.`/`..`-free) inside the new
/// root at `root`, one component at a time from the root's descriptor,
/// following no symlink and leaving no component's tree (a planted link
/// in the host's /tmp, seen through its layer, leads nowhere); what it
/// makes belongs to `uid`/`gid`, the last one `0700`. `true` when it made
/// the last component.
pub(super) fn make_dir_in_root(
    root: &Path,
    path: &Path,
    uid: u32,
    gid: u32,
) -> Result<bool, nix::Error> {
    use nix::unistd::{Gid, Uid, fchownat};
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let how = || {
        OpenHow::new().flags(dir_flags).resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
    };
    let mut dir = open(root, dir_flags, Mode::empty())?;
    let names: Vec<&std::ffi::OsStr> = path
        .components()
        .map(|c| match c {
            std::path::Component::RootDir => Ok(None),
            std::path::Component::Normal(n) => Ok(Some(n)),
            _ => Err(nix::Error::EINVAL),
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut made = false;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        dir = match nix::fcntl::openat2(&dir, *name, how()) {
            Ok(fd) => {
                made = false;
                fd
            }
            Err(nix::Error::ENOENT) => {
                let mode = if last { 0o700 } else { 0o755 };
                nix::sys::stat::mkdirat(&dir, *name, Mode::from_bits_truncate(mode))?;
                fchownat(
                    &dir,
                    *name,
                    Some(Uid::from_raw(uid)),
                    Some(Gid::from_raw(gid)),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
                made = true;
                nix::fcntl::openat2(&dir, *name, how())?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(made)
}

/// A mount beneath the home the plan made a layer of its own (not the
/// home, `/tmp` or `/var/tmp`): one the run cannot open or layer is left
/// out and named, never a failed run.
pub(super) fn beneath_home(view: &ViewSpec, path: &Path) -> bool {
    view.home
        .as_ref()
        .is_some_and(|h| path.starts_with(h) && path != h)
}

/// What the command sees instead of a layer the run left out.
pub(super) fn instead_of(view: &ViewSpec, target: &Path) -> &'static str {
    if target == Path::new("/tmp") {
        "a fresh, empty /tmp"
    } else if target == Path::new("/var/tmp") {
        "a fresh, empty /var/tmp"
    } else if beneath_home(view, target) {
        "the directory under the mount"
    } else {
        "an empty directory it cannot write"
    }
}

/// Why a layer planned is not there to open.
pub(super) fn not_opened(view: &ViewSpec, path: &Path) -> String {
    if beneath_home(view, path) {
        format!(
            "hidden:{} (a mount beneath the home that could not be opened as planned; the command sees the directory under it)",
            path.display()
        )
    } else {
        format!(
            "hidden:{} (it moved or changed since the run was planned)",
            path.display()
        )
    }
}

/// A layer over a mount the host holds read-only is made read-only once
/// mounted at `target` (only that attribute changes): a write fails there
/// as it does live. What went wrong, when it could not be.
pub(super) fn read_only(view: &ViewSpec, path: &Path, target: &Path) -> Option<String> {
    use super::super::sys;
    use std::os::fd::AsRawFd;
    if !view.read_only.iter().any(|p| p == path) {
        return None;
    }
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let done = open(target, flags, Mode::empty())
        .map_err(std::io::Error::from)
        .and_then(|fd| {
            sys::mount_setattr(
                fd.as_raw_fd(),
                sys::Reach::Mount,
                sys::MOUNT_ATTR_RDONLY,
                None,
            )
        });
    done.err().map(|e| {
        format!(
            "view: {} is read-only on the host but writable in the rehearsal (it could not be made read-only: {e})",
            path.display()
        )
    })
}
