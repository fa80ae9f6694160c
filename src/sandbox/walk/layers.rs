//! Opening the overlay's layers: upper-layer files for hashing, lower-layer
//! entries looked up fd-relative, never through a symlink.

use std::collections::BTreeMap;
use std::fs::Metadata;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::fcntl::OFlag;

use super::content::{read_xattrs_deref, read_xattrs_file, xattr_names_differing};
use super::{Layer, Lower, OVERLAY_XATTR_PREFIX};
use crate::model::change::{Change, ChangeKind, FileType};

/// Open a regular file of the upper layer for hashing: directly when the
/// command's own user owns it (the owner could read it anyway, even after a
/// `chmod 000`), else through the owner-rights opener.
pub(super) fn open_upper_file(
    path: &Path,
    rel: &Path,
    meta: &Metadata,
    run_uid: Option<u32>,
    lower: &Lower,
) -> io::Result<std::fs::File> {
    if run_uid.is_none_or(|u| meta.uid() == u) {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
    } else {
        lower
            .opener
            .open(Layer::Upper, rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK)
            .map(std::fs::File::from)
    }
}

/// The upper root starts as a copy of the lower root's mode and owner; any
/// difference (or an attribute) is a change of the workspace directory
/// itself, reported as `.`.
pub(super) fn compare_root(upper_root: &Path, lower: &Lower) -> Option<Change> {
    let up = std::fs::metadata(upper_root).ok()?;
    let low = nix::sys::stat::fstat(lower.root.as_fd()).ok()?;
    let low_x = if lower_root_may_have_xattrs(lower) {
        open_lower(lower, Path::new("."), OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map(|d| read_xattrs_file(&std::fs::File::from(d)))
            .unwrap_or_default()
    } else {
        BTreeMap::new()
    };
    let entry = LowerEntry {
        withheld: false,
        file_type: FileType::Dir,
        hash: None,
        mode: low.st_mode & 0o7777,
        owner: (low.st_uid, low.st_gid),
        size: 0,
        xattrs: low_x,
        mtime_ns: low
            .st_mtime
            .saturating_mul(1_000_000_000)
            .saturating_add(low.st_mtime_nsec),
    };
    // The upper root is named by its `/proc/self/fd` link: read what it
    // leads to (P2 gave it the lower root's own `user.*` attributes).
    let xch = xattr_names_differing(&read_xattrs_deref(upper_root), Some(&entry));
    if perm_bits(&up) == entry.mode && owner(&up) == entry.owner && xch.is_empty() {
        return None;
    }
    let mut c = Change::new(b".", ChangeKind::Metadata, FileType::Dir);
    fill_mode(&mut c, Some(&entry), Some(&up));
    c.xattrs_changed = xch;
    Some(c)
}

/// Whether the lower root has an attribute to read. The names are listed on
/// the walk's own handle: listing names opens nothing and checks no
/// permission (the owner may list them too). The values are read through
/// the reader, as every other lower content is; a root with no names (the
/// usual case) needs no reader. A listing that fails counts as "may have".
fn lower_root_may_have_xattrs(lower: &Lower) -> bool {
    use std::os::fd::AsRawFd;
    let root = format!("/proc/self/fd/{}", lower.root.as_raw_fd());
    match xattr::list_deref(root) {
        Ok(mut names) => names.any(|n| !n.as_bytes().starts_with(OVERLAY_XATTR_PREFIX.as_bytes())),
        Err(_) => true,
    }
}

/// What the lower layer holds at a path.
#[derive(Debug, Clone)]
pub(super) struct LowerEntry {
    /// A file the command's user could not read: no hash taken.
    pub(super) withheld: bool,
    pub(super) file_type: FileType,
    pub(super) hash: Option<String>,
    pub(super) mode: u32,
    pub(super) owner: (u32, u32),
    pub(super) size: u64,
    pub(super) xattrs: BTreeMap<String, Vec<u8>>,
    /// Modification time, nanoseconds since the epoch.
    pub(super) mtime_ns: i64,
}

/// `m`'s modification time in nanoseconds since the epoch.
pub(super) fn mtime_ns(m: &Metadata) -> i64 {
    m.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.mtime_nsec())
}

pub(super) fn perm_bits(m: &Metadata) -> u32 {
    m.mode() & 0o7777
}

pub(super) fn owner(m: &Metadata) -> (u32, u32) {
    (m.uid(), m.gid())
}

pub(super) fn fill_mode(c: &mut Change, lower: Option<&LowerEntry>, upper: Option<&Metadata>) {
    c.mode_before = lower.map(|l| l.mode);
    if let Some(m) = upper {
        c.mode_after = Some(perm_bits(m));
        // A time the command left that the workspace did not have.
        let t = mtime_ns(m);
        if lower.is_none_or(|l| l.mtime_ns != t) {
            c.mtime_after_ns = Some(t);
        }
        c.setid = perm_bits(m) & 0o6000 != 0 && !m.file_type().is_dir();
    }
}

pub(super) fn open_lower(lower: &Lower, rel: &Path, flags: OFlag) -> io::Result<OwnedFd> {
    lower.opener.open(Layer::Lower, rel, flags)
}

pub(super) fn lookup_lower(lower: &Lower, rel: &Path) -> io::Result<Option<LowerEntry>> {
    let fd = match open_lower(lower, rel, OFlag::O_PATH) {
        Ok(fd) => fd,
        // Missing, or a parent component that is (was) a symlink or file:
        // nothing at this path in the lower layer.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP) | Some(libc::EXDEV)
            ) =>
        {
            return Ok(None);
        }
        // The owner may not look there: whatever is there stays unknown.
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            return Ok(Some(LowerEntry {
                withheld: true,
                file_type: FileType::Other,
                hash: None,
                mode: 0,
                owner: (u32::MAX, u32::MAX),
                size: 0,
                xattrs: BTreeMap::new(),
                mtime_ns: 0,
            }));
        }
        Err(e) => return Err(e),
    };
    let st = nix::sys::stat::fstat(fd.as_fd()).map_err(io::Error::from)?;
    let fmt = st.st_mode & libc::S_IFMT;
    let file_type = match fmt {
        libc::S_IFREG => FileType::File,
        libc::S_IFDIR => FileType::Dir,
        libc::S_IFLNK => FileType::Symlink,
        _ => FileType::Other,
    };
    let mut xattrs = BTreeMap::new();
    let mut withheld = false;
    let hash = match file_type {
        FileType::File => match open_lower(lower, rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK) {
            Ok(f) => {
                let mut file = std::fs::File::from(f);
                // The file read must be the file looked up.
                let st2 = nix::sys::stat::fstat(file.as_fd()).map_err(io::Error::from)?;
                if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
                    return Err(io::Error::other("it changed while it was being read"));
                }
                xattrs = read_xattrs_file(&file);
                let mut h = blake3::Hasher::new();
                h.update_reader(&mut file)?;
                Some(h.finalize().to_hex().to_string())
            }
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                withheld = true;
                None
            }
            Err(e) => return Err(e),
        },
        FileType::Symlink => {
            let t = nix::fcntl::readlinkat(fd.as_fd(), "").map_err(io::Error::from)?;
            Some(blake3::hash(t.as_bytes()).to_hex().to_string())
        }
        FileType::Dir => {
            if let Ok(d) = open_lower(lower, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
                xattrs = read_xattrs_file(&std::fs::File::from(d));
            }
            None
        }
        FileType::Other => None,
    };
    Ok(Some(LowerEntry {
        withheld,
        file_type,
        hash,
        mode: st.st_mode & 0o7777,
        owner: (st.st_uid, st.st_gid),
        size: st.st_size as u64,
        xattrs,
        mtime_ns: st
            .st_mtime
            .saturating_mul(1_000_000_000)
            .saturating_add(st.st_mtime_nsec),
    }))
}
