//! Which names a directory of the view holds, read once per directory
//! per run. The masks and their backups name a few hundred paths, most of
//! them absent on any one machine (the credential stores of tools the user
//! does not have); looking each one up costs a path walk in the view's
//! root, where one listing of its directory answers for all its siblings.
//! A listing only ever says "certainly absent": a name it holds, or a
//! directory it could not read whole, is looked up as before. Names are
//! compared with ASCII case ignored, and a directory holding a name that
//! is not ASCII is looked up name by name: on a case-insensitive file
//! system (vfat, or an ext4 directory with casefolding) a lookup of
//! `.ssh` finds `.SSH`, and casefolding maps some non-ASCII letters to
//! ASCII ones (the Kelvin sign to `k`). The names a masked file's backups
//! take are here too: the listings answer for most of them.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};

/// A directory with more entries than this is not listed (its names are
/// looked up one by one).
const MAX_ENTRIES: usize = 4096;

/// The names an editor or a hand-made copy gives a file's backup (the
/// masks cover them too).
pub(super) fn backup_names(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let name = name.to_string_lossy();
    ["{}~", "{}.bak", "{}.orig", "{}.old", ".{}.swp", "#{}#"]
        .iter()
        .map(|f| dir.join(f.replace("{}", &name)))
        .collect()
}

/// What is known of one directory of the view.
enum Known {
    /// It does not exist (or is not a directory): nothing is under it.
    Missing,
    /// Every name it holds.
    Names(HashSet<OsString>),
    /// It could not be read whole.
    Unknown,
}

#[derive(Default)]
pub(super) struct Listings {
    dirs: HashMap<PathBuf, Known>,
}

impl Listings {
    /// False only when `path` (absolute, normalised, in the view under
    /// `root`) certainly does not exist: a directory on its way is
    /// missing, or its directory was read and lacks its name.
    pub(super) fn may_exist(&mut self, root: &OwnedFd, path: &Path) -> bool {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return true;
        };
        if dir.parent().is_some() && !self.may_exist(root, dir) {
            return false;
        }
        let known = self
            .dirs
            .entry(dir.to_path_buf())
            .or_insert_with(|| list(root, dir));
        match known {
            Known::Missing => false,
            Known::Names(names) => names.contains(&name.to_ascii_lowercase()),
            Known::Unknown => true,
        }
    }
}

/// The names `dir` holds, read through the view's root as the masks'
/// own lookups resolve paths (inside the root, no magic links).
fn list(root: &OwnedFd, dir: &Path) -> Known {
    let rel = dir.strip_prefix("/").unwrap_or(dir);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = match nix::fcntl::openat2(root, rel, how) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Known::Missing,
        Err(_) => return Known::Unknown,
    };
    let Ok(mut d) = nix::dir::Dir::from_fd(fd) else {
        return Known::Unknown;
    };
    let mut names = HashSet::new();
    for entry in d.iter() {
        let Ok(entry) = entry else {
            return Known::Unknown;
        };
        if names.len() >= MAX_ENTRIES {
            return Known::Unknown;
        }
        let n = entry.file_name().to_bytes();
        if !n.is_ascii() {
            return Known::Unknown;
        }
        if n != b"." && n != b".." {
            names.insert(std::ffi::OsStr::from_bytes(n).to_ascii_lowercase());
        }
    }
    Known::Names(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_only_when_certain() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("home/u/.config")).unwrap();
        std::fs::write(t.path().join("home/u/.netrc"), "").unwrap();
        std::os::unix::fs::symlink("/home/u/.config", t.path().join("home/u/cfg")).unwrap();
        std::fs::write(t.path().join("home/u/.config/gh"), "").unwrap();
        std::fs::create_dir_all(t.path().join("home/u/.Docker")).unwrap();
        std::fs::create_dir_all(t.path().join("home/v/caf\u{e9}")).unwrap();
        let root = nix::fcntl::open(
            t.path(),
            OFlag::O_PATH | OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        let mut l = Listings::default();
        for (p, may) in [
            ("/home/u/.netrc", true),
            ("/home/u/.netrc~", false),
            ("/home/u/.aws/credentials", false),
            ("/home/u/.aws/sso/cache", false),
            ("/home/u/.config/gh", true),
            ("/home/u/.config/op", false),
            // Through a link inside the root, as the lookups resolve it.
            ("/home/u/cfg/gh", true),
            ("/home/u/cfg/op", false),
            ("/nope/x", false),
            // Case ignored: a case-insensitive lookup would find it.
            ("/home/u/.docker", true),
            // A name that is not ASCII: its directory is not judged.
            ("/home/v/.ssh", true),
        ] {
            assert_eq!(l.may_exist(&root, Path::new(p)), may, "{p}");
        }
    }
}
