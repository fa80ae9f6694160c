//! The home the view makes for a command whose `HOME` it does not show
//! (a directory under `/tmp` or `/var/tmp`), made inside the new root
//! without following anything the host's trees hold.

use std::os::fd::OwnedFd;
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
    let (_, made) = walk_in_root(root, path, |dir, name, last| {
        let mode = if last { 0o700 } else { 0o755 };
        nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(mode))?;
        fchownat(
            dir,
            name,
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(made)
}

/// A layer's mount point inside the new root, walked and made as
/// [`make_dir_in_root`] does (missing directories `0755`, the sandbox's
/// own), opened: the layer is mounted through this descriptor, so a
/// directory the host renames or replaces by a link while the run is set
/// up (the path to a mount beneath the home runs through the home's own
/// layer, which shows the host's tree as it changes) cannot move the
/// mount elsewhere.
pub(super) fn mount_point_in_root(root: &Path, path: &Path) -> Result<OwnedFd, nix::Error> {
    walk_in_root(root, path, |dir, name, _| {
        nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(0o755))
    })
    .map(|(fd, _)| fd)
}

/// A layer's mount point ([`mount_point_in_root`]); for a mount beneath
/// the home whose path in the home changed (a directory became a link),
/// the line that names it instead: that layer is left out.
pub(super) fn layer_mount_point(
    view: &ViewSpec,
    root: &Path,
    path: &Path,
) -> Result<Result<OwnedFd, String>, std::io::Error> {
    match mount_point_in_root(root, path) {
        Ok(fd) => Ok(Ok(fd)),
        Err(e) if beneath_home(view, path) => Ok(Err(format!(
            "hidden:{} (a mount beneath the home whose path in the home changed while the run was set up: {e}; the command sees what the home shows there)",
            path.display()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The walk both share: each component opened beneath the last with no
/// symlink followed, `make` called for a missing one. The last
/// component's descriptor, and whether it was made.
fn walk_in_root(
    root: &Path,
    path: &Path,
    mut make: impl FnMut(&OwnedFd, &std::ffi::OsStr, bool) -> Result<(), nix::Error>,
) -> Result<(OwnedFd, bool), nix::Error> {
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
        dir = match nix::fcntl::openat2(&dir, *name, how()) {
            Ok(fd) => {
                made = false;
                fd
            }
            Err(nix::Error::ENOENT) => {
                make(&dir, name, i + 1 == names.len())?;
                made = true;
                nix::fcntl::openat2(&dir, *name, how())?
            }
            Err(e) => return Err(e),
        };
    }
    Ok((dir, made))
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

/// A layer over a mount the host holds read-only is mounted read-only: a
/// write fails there as it does live.
pub(super) fn read_only(view: &ViewSpec, path: &Path) -> bool {
    view.read_only.iter().any(|p| p == path)
}
