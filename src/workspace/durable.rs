//! Making the live lane's writes durable: exactly what a promotion (or its
//! undo) wrote, not the whole file system.
//!
//! A `syncfs` waits for every dirty page of the file system, not just the
//! promotion's: on a disk shared with builds it took seconds for a
//! promotion of a few hundred files (another process's gigabytes of
//! object files were written first). So each step notes what it changed:
//! the file or directory it wrote (its data and inode: content, mode,
//! owner) and the directory whose entries it changed (a rename, a new or
//! removed name). [`sync`] then `fsync`s exactly those, once each, from
//! several threads at once: on a file system without a journal every
//! `fsync` ends in a flush of the disk's cache (about 3 ms each on a busy
//! disk), and flushes asked for together are merged into one.
//!
//! A whole-file-system `syncfs` is still the way when targeted syncs
//! cannot cover it or would cost more:
//!
//! - a symbolic link was made: a link cannot be opened, so its inode cannot
//!   be `fsync`ed, and only a journaling file system commits it with its
//!   directory's entry (ext4 without a journal does not);
//! - more than [`MOST_TARGETED`] paths: one `fsync` each, with the disk's
//!   cache flush each implies, would cost more than one `syncfs`;
//! - a path that cannot be opened for its `fsync` (a mode that denies the
//!   owner, a special file now in its place): rather than skip it.
//!
//! A path gone again (a later step removed it) needs nothing: its removal
//! is its parent directory's entry, which is synced.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::apply::{ApplyError, LocalWorkspace};
use super::paths::beneath;

/// The most paths synced one by one; above it, one `syncfs`.
pub(crate) const MOST_TARGETED: usize = 1024;

/// One rule for every caller (the workspace's steps, the state directory's
/// backups): sync `n` paths one by one, or the whole file system.
pub(crate) fn one_by_one(n: usize) -> bool {
    n <= MOST_TARGETED
}

/// What the steps taken since the last [`sync`] changed.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Workspace-relative paths to `fsync` (`.` is the root).
    paths: BTreeSet<Vec<u8>>,
    /// Why only a `syncfs` makes them durable, when it is so.
    whole: Option<&'static str>,
}

impl Pending {
    /// The file or directory at `rel` was written (content, mode, owner).
    pub(crate) fn inode(&mut self, rel: &[u8]) {
        if self.paths.len() <= MOST_TARGETED {
            self.paths.insert(rel.to_vec());
        }
    }

    /// The file or directory at `rel` was written, and its name made.
    pub(crate) fn written(&mut self, rel: &[u8]) {
        self.inode(rel);
        self.entry(rel);
    }

    /// A name in `rel`'s directory was added, replaced or removed.
    pub(crate) fn entry(&mut self, rel: &[u8]) {
        let parent = match rel.iter().rposition(|b| *b == b'/') {
            Some(i) => &rel[..i],
            None => b".",
        };
        self.inode(parent);
    }

    /// A symbolic link was made at `rel`.
    pub(crate) fn symlink(&mut self, rel: &[u8]) {
        self.entry(rel);
        self.whole = Some("a symbolic link has no handle of its own to fsync");
    }
}

impl LocalWorkspace {
    /// Note what a step changed, for the next [`LocalWorkspace::sync`].
    pub(super) fn note(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make every step taken since the last sync durable: what they
    /// changed, one by one, or the file system (see [`sync`]).
    pub(crate) fn sync(&self) -> Result<Synced, ApplyError> {
        let pending = std::mem::take(&mut *self.note());
        sync(self.root_fd(), pending).map_err(|e| ApplyError::Root {
            path: std::path::PathBuf::from("."),
            message: format!("syncing the promoted files to disk: {e}"),
        })
    }
}

/// How a [`sync`] made the steps durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Synced {
    /// An `fsync` of each of these paths (sorted).
    OneByOne(Vec<Vec<u8>>),
    /// One `syncfs` of the workspace's file system, and why.
    WholeFileSystem(String),
}

/// Make what `pending` names durable, beneath `root`.
pub(crate) fn sync(root: &OwnedFd, pending: Pending) -> Result<Synced, Errno> {
    let why = match pending.whole {
        Some(why) => Some(why.to_string()),
        None if !one_by_one(pending.paths.len()) => Some(format!(
            "more than {MOST_TARGETED} paths changed: one sync of the file system costs less"
        )),
        None => None,
    };
    if let Some(why) = why {
        nix::unistd::syncfs(root)?;
        return Ok(Synced::WholeFileSystem(why));
    }
    let paths: Vec<Vec<u8>> = pending.paths.into_iter().collect();
    if let Err((rel, e)) = each_at_once(&paths, |rel| fsync_beneath(root, rel)) {
        nix::unistd::syncfs(root)?;
        return Ok(Synced::WholeFileSystem(format!(
            "{} could not be opened for its fsync ({e})",
            super::paths::escape_for_humans(rel)
        )));
    }
    Ok(Synced::OneByOne(paths))
}

/// How many `fsync`s are in flight at once.
const AT_ONCE: usize = 16;

/// Call `f` on every item, from up to [`AT_ONCE`] threads; the first
/// failure (by item order) and its item, after all have run.
pub(crate) fn each_at_once<T: Sync, E: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<(), E> + Sync,
) -> Result<(), (&T, E)> {
    let chunk = items.len().div_ceil(AT_ONCE).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let workers: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    let mut first = None;
                    for it in part {
                        if let Err(e) = f(it) {
                            first.get_or_insert((it, e));
                        }
                    }
                    first
                })
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|w| w.join().expect("an fsync thread does not panic"))
            .next()
            .map_or(Ok(()), Err)
    })
}

/// `fsync` the file or directory at `rel`, reached without symlinks; a
/// path no longer there needs none.
fn fsync_beneath(root: &OwnedFd, rel: &[u8]) -> Result<(), Errno> {
    if rel == b"." {
        return nix::unistd::fsync(root);
    }
    let open = |flags| nix::fcntl::openat2(root, OsStr::from_bytes(rel), beneath(flags));
    let fd = match open(OFlag::O_RDONLY | OFlag::O_NONBLOCK) {
        // Write-only to its owner: a write handle syncs it as well.
        Err(Errno::EACCES) => open(OFlag::O_WRONLY | OFlag::O_NONBLOCK),
        other => other,
    };
    match fd {
        Ok(fd) => nix::unistd::fsync(&fd),
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(dir: &std::path::Path) -> OwnedFd {
        std::fs::File::open(dir).unwrap().into()
    }

    #[test]
    fn each_changed_path_and_directory_is_synced_once() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/f"), "x").unwrap();
        let mut p = Pending::default();
        p.inode(b"a/b/f");
        p.entry(b"a/b/f");
        p.entry(b"a/b/g");
        p.inode(b"a/b");
        p.entry(b"a/b");
        p.entry(b"top");
        p.entry(b"a/gone/h");
        let got = sync(&root(t.path()), p).unwrap();
        let want: Vec<Vec<u8>> = [".", "a", "a/b", "a/b/f", "a/gone"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(got, Synced::OneByOne(want));
    }

    /// The steps themselves note what they change: a step that forgot
    /// would leave its file or its name to the page cache.
    #[test]
    fn every_kind_of_step_notes_what_it_changed() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/old")).unwrap();
        std::fs::write(t.path().join("a/f"), "x").unwrap();
        std::fs::write(t.path().join("g"), "y").unwrap();
        let m = std::fs::metadata(t.path()).unwrap();
        let id = super::super::apply::Identity {
            dev: m.dev(),
            ino: m.ino(),
            uid: m.uid(),
            gid: m.gid(),
        };
        let ws = LocalWorkspace::open(t.path(), &id, 1 << 20).unwrap();
        let own = ws.owner();
        let hash = blake3::hash(b"new").to_hex().to_string();
        ws.write_file(b"a/f", &mut &b"new"[..], &hash, 0o644, own, "t1")
            .unwrap();
        ws.make_dir(b"a/d", 0o755, own).unwrap();
        ws.remove(b"a/old").unwrap();
        ws.chmod(b"g", 0o600).unwrap();
        let want: Vec<Vec<u8>> = ["a", "a/d", "a/f", "g"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(ws.sync().unwrap(), Synced::OneByOne(want));
        // Taken: the next sync has nothing left to do.
        assert_eq!(ws.sync().unwrap(), Synced::OneByOne(Vec::new()));
        ws.symlink(b"a/l", b"f", own, "t2").unwrap();
        assert!(matches!(ws.sync().unwrap(), Synced::WholeFileSystem(_)));
    }

    #[test]
    fn a_symlink_or_too_many_paths_sync_the_whole_file_system() {
        let t = tempfile::tempdir().unwrap();
        let mut p = Pending::default();
        p.inode(b"f");
        p.symlink(b"d/l");
        assert!(matches!(
            sync(&root(t.path()), p).unwrap(),
            Synced::WholeFileSystem(why) if why.contains("symbolic link")
        ));
        let mut p = Pending::default();
        for i in 0..=MOST_TARGETED + 5 {
            p.inode(format!("f{i}").as_bytes());
        }
        assert!(matches!(
            sync(&root(t.path()), p).unwrap(),
            Synced::WholeFileSystem(why) if why.contains("more than")
        ));
    }

    #[test]
    fn a_path_that_cannot_be_opened_is_not_skipped() {
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", t.path().join("l")).unwrap();
        let mut p = Pending::default();
        p.inode(b"l");
        assert!(matches!(
            sync(&root(t.path()), p).unwrap(),
            Synced::WholeFileSystem(why) if why.contains("could not be opened")
        ));
    }
}
