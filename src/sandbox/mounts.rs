//! Building the sandbox's filesystem view inside its own mount namespace.

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::spec::ImageProfile;

#[derive(Debug, thiserror::Error)]
pub(crate) enum MountError {
    #[error("mount {what} at {target}: {source}")]
    Mount {
        what: String,
        target: PathBuf,
        source: io::Error,
    },
    #[error("preparing {path}: {source}")]
    Prepare { path: PathBuf, source: io::Error },
}

impl MountError {
    /// An error preparing `path` (not a mount call's).
    pub(super) fn from_io(path: &Path, e: io::Error) -> MountError {
        perr(path, e)
    }
}

fn merr(what: &str, target: &Path, e: impl Into<io::Error>) -> MountError {
    MountError::Mount {
        what: what.into(),
        target: target.to_path_buf(),
        source: e.into(),
    }
}

fn perr(path: &Path, e: impl Into<io::Error>) -> MountError {
    MountError::Prepare {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

pub(super) fn make_rprivate() -> Result<(), MountError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| merr("--make-rprivate", Path::new("/"), e))
}

pub(super) fn mount_tmpfs(
    target: &Path,
    size_bytes: u64,
    mode: u32,
    extra: MsFlags,
) -> Result<(), MountError> {
    mount_tmpfs_data(target, &format!("size={size_bytes},mode={mode:o}"), extra)
}

/// A tmpfs with a cap on inodes too: empty files cost no blocks, so a size
/// cap alone would not bound how many a command can create.
pub(super) fn mount_tmpfs_capped(
    target: &Path,
    size_bytes: u64,
    inodes: u64,
    mode: u32,
) -> Result<(), MountError> {
    let data = format!("size={size_bytes},nr_inodes={inodes},mode={mode:o}");
    mount_tmpfs_data(target, &data, MsFlags::empty())
}

fn mount_tmpfs_data(target: &Path, data: &str, extra: MsFlags) -> Result<(), MountError> {
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | extra,
        Some(data),
    )
    .map_err(|e| merr("tmpfs", target, e))
}

pub(super) fn mkdir_p(path: &Path, mode: u32) -> Result<(), MountError> {
    std::fs::create_dir_all(path).map_err(|e| perr(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| perr(path, e))
}

/// Flags that must be preserved on a bind remount inside a user namespace
/// (the kernel locks them), read from the mount as it is now.
fn locked_flags(path: &Path) -> MsFlags {
    let mut f = MsFlags::empty();
    if let Ok(st) = nix::sys::statvfs::statvfs(path) {
        use nix::sys::statvfs::FsFlags;
        let fl = st.flags();
        if fl.contains(FsFlags::ST_NOSUID) {
            f |= MsFlags::MS_NOSUID;
        }
        if fl.contains(FsFlags::ST_NODEV) {
            f |= MsFlags::MS_NODEV;
        }
        if fl.contains(FsFlags::ST_NOEXEC) {
            f |= MsFlags::MS_NOEXEC;
        }
        if fl.contains(FsFlags::ST_NOATIME) {
            f |= MsFlags::MS_NOATIME;
        }
        if fl.contains(FsFlags::ST_NODIRATIME) {
            f |= MsFlags::MS_NODIRATIME;
        }
        if fl.contains(FsFlags::ST_RELATIME) {
            f |= MsFlags::MS_RELATIME;
        }
    }
    f
}

/// Remount an existing mount point read-only, nosuid, nodev.
pub(super) fn remount_ro(target: &Path) -> Result<(), MountError> {
    let flags = MsFlags::MS_REMOUNT
        | MsFlags::MS_BIND
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | locked_flags(target);
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>)
        .map_err(|e| merr("read-only remount", target, e))
}

/// Bind `src` (host path) at `root/src`, read-only, nosuid, nodev, including
/// every submount. Host symlinks (merged /usr) are recreated as symlinks.
/// Returns false when the host path does not exist.
pub(super) fn bind_ro_from_host(root: &Path, src: &Path) -> Result<bool, MountError> {
    let meta = match std::fs::symlink_metadata(src) {
        Ok(m) => m,
        Err(_) => return Ok(false),
    };
    let target = root.join(src.strip_prefix("/").unwrap_or(src));
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| perr(parent, e))?;
    }
    if meta.file_type().is_symlink() {
        let link = std::fs::read_link(src).map_err(|e| perr(src, e))?;
        std::os::unix::fs::symlink(&link, &target).map_err(|e| perr(&target, e))?;
        return Ok(true);
    }
    if meta.is_dir() {
        std::fs::create_dir_all(&target).map_err(|e| perr(&target, e))?;
    } else {
        std::fs::write(&target, b"").map_err(|e| perr(&target, e))?;
    }
    // The tree and every mount below it, cloned, made read-only, nosuid,
    // nodev in one call, then attached: no mount table to read, and no
    // moment when a part of it is writable.
    let tree = super::sys::open_tree_clone(src, super::sys::Reach::Tree)
        .map_err(|e| merr("clone", src, e))?;
    super::sys::mount_setattr(
        tree.as_raw_fd(),
        super::sys::Reach::Tree,
        super::sys::MOUNT_ATTR_RDONLY
            | super::sys::MOUNT_ATTR_NOSUID
            | super::sys::MOUNT_ATTR_NODEV,
        None,
    )
    .map_err(|e| merr("read-only", src, e))?;
    super::sys::move_mount_to(tree.as_raw_fd(), &target).map_err(|e| merr("attach", &target, e))?;
    Ok(true)
}

/// Bind the host directory `src` (with every mount below it) at
/// `root/src`, read-only, nosuid, nodev, as [`bind_ro_from_host`] does,
/// but only if `src` is reached without a symlink and is still the
/// directory `identity` names: a path swapped since the view was planned
/// is not shown. Nor is one with a mount below it that the view's
/// resolver would not cross (a FUSE mount another user serves: a look
/// inside the sandbox would wait on its server; a bind without the mounts
/// below it is refused where the sandbox's user namespace holds them
/// locked). The helper's namespace sees no mount made on the host since it
/// was taken, so the table read here is the one the bind would copy. Not
/// shown: `Err` with the lines that name why.
pub(super) fn bind_checked_dir_ro(
    root: &Path,
    src: &Path,
    identity: Option<(u64, u64)>,
) -> Result<Result<(), Vec<String>>, MountError> {
    let Some(fd) =
        open_dir_no_symlinks(src, identity).map_err(|e| merr("open", src, io::Error::from(e)))?
    else {
        return Ok(Err(vec![format!(
            "hidden:{} (it moved or changed since the run was planned)",
            src.display()
        )]));
    };
    match super::view::resolve::refused_below(src) {
        Some(refused) if refused.is_empty() => {}
        refused => {
            let mut named = vec![format!(
                "hidden:{} (not bound: a mount beneath it is not looked at, or the mount table could not be read)",
                src.display()
            )];
            named.extend(refused.unwrap_or_default());
            return Ok(Err(named));
        }
    }
    let tree = super::sys::open_tree_clone_at(fd.as_raw_fd(), super::sys::Reach::Tree)
        .map_err(|e| merr("clone", src, e))?;
    super::sys::mount_setattr(
        tree.as_raw_fd(),
        super::sys::Reach::Tree,
        super::sys::MOUNT_ATTR_RDONLY
            | super::sys::MOUNT_ATTR_NOSUID
            | super::sys::MOUNT_ATTR_NODEV,
        None,
    )
    .map_err(|e| merr("read-only", src, e))?;
    let target = root.join(src.strip_prefix("/").unwrap_or(src));
    std::fs::create_dir_all(&target).map_err(|e| perr(&target, e))?;
    super::sys::move_mount_to(tree.as_raw_fd(), &target).map_err(|e| merr("attach", &target, e))?;
    Ok(Ok(()))
}

/// `path` opened `O_PATH` as a directory with no symlink among its
/// components, through the view's resolver (no mount it does not cross,
/// such as a FUSE mount another user serves, is looked at: refused with
/// the line that names it); `None` when it is missing or no longer the
/// directory `identity` (device, inode) names.
pub(super) fn open_dir_no_symlinks(
    path: &Path,
    identity: Option<(u64, u64)>,
) -> Result<Option<std::os::fd::OwnedFd>, super::view::Refusal> {
    use super::view::Refusal;
    let opened = match super::view::Resolver::new().open_exact(path) {
        Ok(o) => o,
        Err(Refusal::Io(e))
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    use std::os::unix::fs::MetadataExt;
    let meta = opened.meta()?;
    if !meta.is_dir() || identity.is_some_and(|id| id != (meta.dev(), meta.ino())) {
        return Ok(None);
    }
    Ok(Some(opened.file.into()))
}

/// Bind `src` onto `target` (which may be a `/proc/self/fd/N` link to an
/// object opened earlier): the bind takes the flags of `src`'s mount.
pub(super) fn bind_onto(src: &Path, target: &Path) -> Result<(), MountError> {
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| merr("bind", target, e))
}

/// A file or a directory on a mount of its own that is read-only, nosuid
/// and nodev. A bind mount takes the flags of the mount its source is on,
/// so every bind from it (a mask from a sealed empty file, a stub script
/// over a tool from the sealed scripts' directory) is read-only, nosuid and
/// nodev as it is made, with no remount of its own.
pub(super) struct Sealed(PathBuf);

impl Sealed {
    /// Bind `path` onto itself and make that bind read-only, nosuid, nodev.
    pub(super) fn seal(path: &Path) -> Result<Sealed, MountError> {
        mount(
            Some(path),
            path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| merr("seal", path, e))?;
        remount_ro(path)?;
        Ok(Sealed(path.to_path_buf()))
    }
}

/// Hide `path` (inside the new root) behind an empty read-only file or
/// directory (the file: `sealed`, bound over it). Returns false when there
/// is nothing to hide.
pub(super) fn mask_path(root: &Path, path: &Path, sealed: &Sealed) -> Result<bool, MountError> {
    let target = root.join(path.strip_prefix("/").unwrap_or(path));
    let meta = match std::fs::symlink_metadata(&target) {
        Ok(m) => m,
        Err(_) => return Ok(false),
    };
    if meta.file_type().is_symlink() {
        // A symlink in a read-only tree points somewhere we bind or mask on
        // its own; nothing to mount over.
        return Ok(false);
    }
    if meta.is_dir() {
        mount_tmpfs(
            &target,
            4096,
            0o755,
            MsFlags::MS_RDONLY | MsFlags::MS_NOEXEC,
        )?;
    } else {
        // Read-only, nosuid, nodev: taken from the sealed file's mount.
        mount(
            Some(sealed.0.as_path()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| merr("mask", &target, e))?;
    }
    Ok(true)
}

/// Build the read-only image from the profile under `root`; returns the masked
/// paths that existed. `empty_file` is sealed (see [`Sealed`]) and masks
/// every file the profile hides.
pub(super) fn build_image(
    root: &Path,
    image: &ImageProfile,
    empty_file: &Path,
) -> Result<Vec<PathBuf>, MountError> {
    for b in &image.ro_binds {
        bind_ro_from_host(root, b)?;
    }
    let mut masked = Vec::new();
    if image.mask.is_empty() {
        return Ok(masked);
    }
    let empty = Sealed::seal(empty_file)?;
    for m in &image.mask {
        if mask_path(root, m, &empty)? {
            masked.push(m.clone());
        }
    }
    Ok(masked)
}

/// The most pseudo-terminals a sandbox holds at once (its devpts
/// instance's `max`): `script`, `expect` and a test suite's terminal
/// programs need a few each.
pub(super) const PTY_MAX: u32 = 32;

/// A minimal /dev: null, zero, full, random, urandom bound from the host, the
/// usual symlinks; `shm`, a private tmpfs of `shm_bytes` and `shm_inodes`
/// (POSIX shared memory and semaphores: Python's `multiprocessing` locks
/// and process pools need it), and `pts`, a new devpts instance of the
/// sandbox's own with `ptmx` (pseudo-terminals the command makes for
/// itself: `script`, `expect`, a test of a terminal program), nothing else.
pub(super) fn build_dev(root: &Path, shm_bytes: u64, shm_inodes: u64) -> Result<(), MountError> {
    let dev = root.join("dev");
    mkdir_p(&dev, 0o755)?;
    mount_tmpfs(&dev, 65536, 0o755, MsFlags::MS_NOEXEC)?;
    for name in ["null", "zero", "full", "random", "urandom"] {
        let target = dev.join(name);
        std::fs::write(&target, b"").map_err(|e| perr(&target, e))?;
        let src = Path::new("/dev").join(name);
        mount(
            Some(src.as_path()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| merr("device bind", &target, e))?;
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let l = dev.join(name);
        std::os::unix::fs::symlink(to, &l).map_err(|e| perr(&l, e))?;
    }
    let (shm, pts) = (dev.join("shm"), dev.join("pts"));
    for d in [&shm, &pts] {
        mkdir_p(d, 0o755)?;
    }
    let ptmx = dev.join("ptmx");
    std::os::unix::fs::symlink("pts/ptmx", &ptmx).map_err(|e| perr(&ptmx, e))?;
    remount_ro(&dev)?;
    mount_tmpfs_capped(&shm, shm_bytes, shm_inodes, 0o1777)?;
    // A new instance: the host's terminals are not in it, and what the
    // command opens here is its own. Capped: the kernel counts every
    // instance's pseudo-terminals against one host-wide limit
    // (`kernel.pty.max` less the reserve only the host's first mount
    // namespace may use), so an uncapped instance let one command take
    // every pseudo-terminal the host's other sandboxes and containers get.
    let opts = format!("newinstance,ptmxmode=0666,mode=0620,max={PTY_MAX}");
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(opts.as_str()),
    )
    .map_err(|e| merr("devpts", &pts, e))
}

/// A new /proc for the new pid namespace, with the kernel knobs read-only.
pub(super) fn mount_proc(root: &Path) -> Result<(), MountError> {
    let p = root.join("proc");
    mkdir_p(&p, 0o555)?;
    mount(
        Some("proc"),
        &p,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| merr("proc", &p, e))?;
    for sub in ["sys", "sysrq-trigger", "irq", "bus", "fs"] {
        let t = p.join(sub);
        if t.exists() {
            mount(
                Some(&t),
                &t,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|e| merr("proc bind", &t, e))?;
            remount_ro(&t)?;
        }
    }
    Ok(())
}

/// An overlay at `target` (the workspace at its own absolute path, a view
/// layer through its mount point's descriptor), read-only if `read_only`.
pub(super) fn mount_overlay(
    target: &Path,
    lower: &Path,
    upper: &Path,
    work: &Path,
    read_only: bool,
) -> Result<(), MountError> {
    let esc = |p: &Path| {
        p.display()
            .to_string()
            .replace('\\', "\\\\")
            .replace(',', "\\,")
            .replace(':', "\\:")
    };
    let data = format!(
        // `userxattr` (required in a user namespace) also turns redirect_dir
        // and metacopy off: every upper entry holds its whole content and a
        // renamed directory is copied, which the evidence walk relies on.
        "lowerdir={},upperdir={},workdir={},userxattr",
        esc(lower),
        esc(upper),
        esc(work)
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | if read_only {
                MsFlags::MS_RDONLY
            } else {
                MsFlags::empty()
            },
        Some(data.as_str()),
    )
    .map_err(|e| merr("overlay", target, e))
}

/// `pivot_root` into `new_root` and detach the old root entirely.
pub(super) fn pivot_into(new_root: &Path) -> Result<(), MountError> {
    nix::unistd::chdir(new_root).map_err(|e| perr(new_root, e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| merr("pivot_root", new_root, e))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| merr("detach old root", Path::new("/"), e))?;
    nix::unistd::chdir("/").map_err(|e| perr(Path::new("/"), e))?;
    Ok(())
}
