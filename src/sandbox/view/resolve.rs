//! Every look a root engine takes at the host's paths on a user's behalf
//! (the home, `PATH` directories, mount points, masked paths, what a
//! command's errors name, the layers the helper opens) goes through one
//! [`Resolver`]: a path is opened component by component from a pinned
//! descriptor with `openat2(O_PATH, RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS
//! | RESOLVE_NO_MAGICLINKS)`, so a mount crossing stops (`EXDEV`) before
//! anything on the mount is asked. The crossing is then opened alone
//! (`O_PATH`: the mount's filesystem is not called), which pins the mount
//! (its id cannot be reused while the descriptor lives), its id is read
//! from the VFS (`statx` `STATX_MNT_ID` with `AT_STATX_DONT_SYNC`; FUSE
//! answers it without asking its server), and the mount table, read
//! after the pin, judges it: a FUSE mount another user serves, or a mount
//! the table does not list, is not crossed. Whatever is made or mounted
//! after any earlier reading of the table is judged as it is when the
//! look reaches it.
//!
//! A FUSE filesystem answers through the process that serves it, which
//! any user may start (`fusermount` is setuid) and stop: on a host whose
//! `/etc/fuse.conf` says `user_allow_other`, a look by root at anything
//! on it (a stat, an open, the lookup of a name in it) may wait forever.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};

use super::submounts::read_mount_table;
use crate::model::mount_table::MountTable;

/// Why a path was not resolved.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// It does not exist, is not what was asked (a symlink where none may
    /// be, a file where a directory must be), or could not be opened.
    Io(io::Error),
    /// It lies on or through a mount the resolver does not cross: the
    /// line the record names it by (`hidden:PATH (...)`).
    NotLooked(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Io(e) => e.fmt(f),
            Refusal::NotLooked(note) => f.write_str(note),
        }
    }
}

impl From<Errno> for Refusal {
    fn from(e: Errno) -> Self {
        Refusal::Io(e.into())
    }
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Self {
        Refusal::Io(e)
    }
}

impl From<Refusal> for io::Error {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Io(e) => e,
            Refusal::NotLooked(note) => io::Error::other(note),
        }
    }
}

/// A path opened `O_PATH` (on a mount the resolver crossed), and its
/// resolved path.
pub(crate) struct Opened {
    pub path: PathBuf,
    pub file: File,
}

impl Opened {
    /// Its metadata (not following a symlink it is).
    pub(crate) fn meta(&self) -> io::Result<std::fs::Metadata> {
        self.file.metadata()
    }
}

/// A mount crossed once, judged crossable by the table read after it was
/// pinned. A refusal is not kept: it would pin a mount the look never
/// enters (another user's FUSE mount, whose `umount` would be refused
/// `EBUSY` meanwhile) and is judged again when met again.
struct Judged {
    id: u64,
    /// Who looked (its own FUSE mounts are crossed) and whether the mount
    /// was the look's own root: the same mount may be judged otherwise
    /// for another.
    me: u32,
    root: bool,
    /// Holds the mount (and so its id) while the verdict is kept.
    _pin: OwnedFd,
}

/// The verdicts of the mounts crossed by the resolvers of one submission.
/// Each is kept with its pin, so the id it is kept under names the same
/// mount for as long as the verdict is used: a mount made later has
/// another id and is judged by a table read after it was pinned. Shared
/// by the resolvers made while one is alive ([`Looks::hold`]), for a
/// second at most: what is held pins mounts, and a user's `umount` of one
/// must not stay refused (`EBUSY`) for longer than a submission's looks.
/// A set older than that is emptied (its pins closed) by the next look
/// that uses it, and keeps nothing more; holders keep it only around
/// their looks (never while a rehearsal runs or an approval is awaited).
struct Judgements {
    made: Instant,
    list: Mutex<Vec<Judged>>,
}

const SHARED_FOR: Duration = Duration::from_secs(1);

static SHARED: Mutex<Weak<Judgements>> = Mutex::new(Weak::new());

/// The judgements resolvers made now share: the living ones if they are
/// young enough, else new ones.
fn shared() -> Arc<Judgements> {
    let mut current = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(j) = current.upgrade() {
        if j.made.elapsed() < SHARED_FOR {
            return j;
        }
        // Past its second, still held (a submission's looks that wait):
        // its pins are let go now, not when its last holder ends.
        j.list.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
    let j = Arc::new(Judgements {
        made: Instant::now(),
        list: Mutex::new(Vec::new()),
    });
    *current = Arc::downgrade(&j);
    j
}

/// Held for a submission's planning (the hook's checks, the engine's
/// preparation): the resolvers made meanwhile share one set of judged
/// mounts instead of reading the mount table again for each.
pub(crate) struct Looks(#[allow(dead_code)] Arc<Judgements>);

impl Looks {
    pub(crate) fn hold() -> Looks {
        Looks(shared())
    }
}

/// See the module's documentation. It keeps the verdicts of the mounts it
/// crossed (pinned), shared with the other resolvers of a submission.
pub(crate) struct Resolver {
    judged: Arc<Judgements>,
    /// The effective user: its own FUSE mounts are crossed.
    me: u32,
}

impl Default for Resolver {
    fn default() -> Self {
        Self::new()
    }
}

const MAX_LINKS: usize = 40;

impl Resolver {
    pub(crate) fn new() -> Resolver {
        Resolver {
            judged: shared(),
            me: nix::unistd::geteuid().as_raw(),
        }
    }

    /// `p` (absolute) with its symlinks resolved, as `canonicalize` does.
    pub(crate) fn canonicalize(&self, p: &Path) -> Result<PathBuf, Refusal> {
        self.resolve(p).map(|o| o.path)
    }

    /// `p` (absolute) opened with its symlinks resolved (a final symlink
    /// too).
    pub(crate) fn resolve(&self, p: &Path) -> Result<Opened, Refusal> {
        self.walk(p, true, None)
    }

    /// `p` (absolute, without `..`) opened with no symlink among its
    /// components: one is `ELOOP`.
    pub(crate) fn open_exact(&self, p: &Path) -> Result<Opened, Refusal> {
        self.walk(p, false, None)
    }

    /// [`Self::open_exact`], with `enter` asked about each directory before
    /// a name in it is looked up (`false`: `EACCES`).
    pub(crate) fn open_exact_through(
        &self,
        p: &Path,
        enter: &mut dyn FnMut(&std::fs::Metadata) -> bool,
    ) -> Result<Opened, Refusal> {
        self.walk(p, false, Some(enter))
    }

    /// The metadata of `p` following its symlinks (`metadata`).
    pub(crate) fn metadata(&self, p: &Path) -> Result<std::fs::Metadata, Refusal> {
        Ok(self.resolve(p)?.meta()?)
    }

    fn walk(
        &self,
        p: &Path,
        follow: bool,
        mut enter: Option<&mut dyn FnMut(&std::fs::Metadata) -> bool>,
    ) -> Result<Opened, Refusal> {
        if !p.is_absolute() {
            return Err(Refusal::Io(io::Error::from(io::ErrorKind::InvalidInput)));
        }
        let root = nix::fcntl::open(
            "/",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        self.judge(&root, p, Path::new("/"), true)?;
        let mut stack: Vec<(PathBuf, File)> = vec![(PathBuf::from("/"), File::from(root))];
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, p, follow)?;
        let mut links = 0;
        while let Some(name) = todo.pop() {
            let (at, dir) = stack.last().expect("the root stays");
            if name == ".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            if let Some(enter) = enter.as_mut()
                && !enter(&dir.metadata()?)
            {
                return Err(Refusal::Io(io::Error::from_raw_os_error(libc::EACCES)));
            }
            let next = at.join(&name);
            let fd = self.step(dir, &name, p, &next)?;
            let file = File::from(fd);
            let meta = file.metadata()?;
            if !meta.file_type().is_symlink() {
                stack.push((next, file));
                continue;
            }
            if !follow {
                return Err(Refusal::Io(io::Error::from_raw_os_error(libc::ELOOP)));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(Refusal::Io(io::Error::from_raw_os_error(libc::ELOOP)));
            }
            let target = nix::fcntl::readlinkat(&file, "")?;
            let target = Path::new(&target);
            if target.is_absolute() {
                stack.truncate(1);
            }
            push_components(&mut todo, target, true)?;
        }
        let (path, file) = stack.pop().expect("the root stays");
        Ok(Opened { path, file })
    }

    /// `name` opened `O_PATH` in `dir`, not followed; a mount there
    /// crossed only when judged so. `asked`: the path the caller asked
    /// for, `next`: where `name` is.
    fn step(
        &self,
        dir: &File,
        name: &OsStr,
        asked: &Path,
        next: &Path,
    ) -> Result<OwnedFd, Refusal> {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let no_links = ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS;
        let how = OpenHow::new()
            .flags(flags)
            .resolve(no_links | ResolveFlag::RESOLVE_NO_XDEV);
        match nix::fcntl::openat2(dir.as_fd(), name, how) {
            Ok(fd) => Ok(fd),
            Err(Errno::EXDEV) => {
                // A mount at `name`: opened alone (its filesystem is not
                // asked for an `O_PATH` open of its root), then judged.
                let fd = nix::fcntl::openat2(
                    dir.as_fd(),
                    name,
                    OpenHow::new().flags(flags).resolve(no_links),
                )?;
                self.judge(&fd, asked, next, false)?;
                Ok(fd)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// May the mount `fd` is on be crossed? `point`: where it was met;
    /// `root`: it is this process's own root, where every walk starts.
    fn judge(&self, fd: &OwnedFd, asked: &Path, point: &Path, root: bool) -> Result<(), Refusal> {
        let id = mount_id(fd).map_err(Refusal::Io)?;
        let mut judged = self.judged.list.lock().unwrap_or_else(|p| p.into_inner());
        // Past its second the set keeps no pin: what it held is let go,
        // and each look judges for itself (its own `fd` pins the mount).
        let fresh = self.judged.made.elapsed() < SHARED_FOR;
        if !fresh {
            judged.clear();
        }
        if judged
            .iter()
            .any(|j| j.id == id && j.me == self.me && j.root == root)
        {
            return Ok(());
        }
        // Read after the pin: the line with this id is this mount's.
        let refused = verdict(&read_mount_table(), id, self.me, root);
        if refused.is_none() && fresh {
            judged.push(Judged {
                id,
                me: self.me,
                root,
                _pin: fd.try_clone().map_err(Refusal::Io)?,
            });
        }
        drop(judged);
        match refused {
            None => Ok(()),
            Some(what) => Err(Refusal::NotLooked(not_looked(asked, &what, point))),
        }
    }
}

/// The lines that name the mounts strictly beneath `dir`, as the mount
/// table lists them now, that a look would not cross (what a bind of
/// `dir` with the mounts below it would carry along); `None` when the
/// table cannot be read.
pub(crate) fn refused_below(dir: &Path) -> Option<Vec<String>> {
    let table = read_mount_table();
    if table.0.is_empty() {
        return None;
    }
    let me = nix::unistd::geteuid().as_raw();
    let below = table
        .0
        .iter()
        .filter(|l| l.point.starts_with(dir) && l.point != dir);
    Some(
        below
            .filter_map(|l| {
                let what = verdict(&table, l.id, me, false)?;
                Some(not_looked(&l.point, &what, &l.point))
            })
            .collect(),
    )
}

/// The line that names `asked` as not looked at: on `what` at `point`.
fn not_looked(asked: &Path, what: &str, point: &Path) -> String {
    format!(
        "hidden:{} (on {what} at {}: not looked at, its server could keep the run waiting)",
        asked.display(),
        point.display()
    )
}

/// Why the mount `id` is not crossed by a look as `me`, as `table` lists
/// it: a FUSE mount another user serves, or one the table does not list;
/// `None`: it is crossed.
fn verdict(table: &MountTable, id: u64, me: u32, root: bool) -> Option<String> {
    let Some(line) = table.0.iter().find(|l| l.id == id) else {
        // This process's own root, inside a mount whose point is above
        // it (a look from within a client's view, chrooted there), is not
        // listed: it is where the process lives, not a crossing.
        if root {
            return None;
        }
        return Some("a mount the mount table does not list (made since it was read)".into());
    };
    match line.fuse {
        Some(served) if served != Some(me) => Some(format!(
            "a FUSE mount served by {}",
            served.map_or("a user the mount table does not name".into(), |u| format!(
                "uid {u}"
            ))
        )),
        _ => None,
    }
}

/// `p`'s components onto `todo` (last first, so they pop in order); `..`
/// only where links are followed.
fn push_components(todo: &mut Vec<OsString>, p: &Path, follow: bool) -> Result<(), Refusal> {
    for c in p.components().rev() {
        match c {
            Component::Normal(n) => todo.push(n.to_os_string()),
            Component::ParentDir if follow => todo.push("..".into()),
            Component::ParentDir => {
                return Err(Refusal::Io(io::Error::from(io::ErrorKind::InvalidInput)));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The id of the mount `fd` is on, from the VFS: `statx` asking for the
/// mount id only, without syncing (a FUSE filesystem answers neither
/// from its server), else `/proc/self/fdinfo` (a FUSE mount that refuses
/// this user `statx` altogether).
fn mount_id(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: all-zero bytes are a valid `statx` (plain integers).
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a NUL-terminated literal; `fd` is open for the
    // call; the kernel writes one `statx` through the pointer to `st`.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_DONT_SYNC,
            libc::STATX_MNT_ID,
            &mut st,
        )
    };
    if r == 0 && st.stx_mask & libc::STATX_MNT_ID != 0 {
        return Ok(st.stx_mnt_id);
    }
    let mut info = String::new();
    std::io::Read::read_to_string(
        &mut super::submounts::open_proc_file(Path::new(&format!(
            "/proc/self/fdinfo/{}",
            fd.as_raw_fd()
        )))?,
        &mut info,
    )?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no mount id for a descriptor"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resolving follows links as `canonicalize` does, `..` after a link
    /// included; the exact open refuses any link and `..`.
    #[test]
    fn resolves_as_canonicalize_and_exact_refuses_links() {
        let t = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(base.join("real/bin")).unwrap();
        std::os::unix::fs::symlink("real/bin", base.join("rel")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("abs")).unwrap();
        let r = Resolver::new();
        for p in [
            base.join("rel"),
            base.join("abs/bin"),
            base.join("rel/../bin/./"),
            base.join("real/bin"),
        ] {
            assert_eq!(
                r.canonicalize(&p).unwrap(),
                std::fs::canonicalize(&p).unwrap(),
                "{p:?}"
            );
        }
        assert!(matches!(
            r.canonicalize(&base.join("nope")),
            Err(Refusal::Io(_))
        ));
        assert!(r.open_exact(&base.join("real/bin")).is_ok());
        for p in [
            base.join("rel"),
            base.join("abs/bin"),
            base.join("real/../real"),
        ] {
            assert!(matches!(r.open_exact(&p), Err(Refusal::Io(_))), "{p:?}");
        }
        // A directory refused on the way.
        let mut seen = 0;
        let refused = r.open_exact_through(&base.join("real/bin"), &mut |_| {
            seen += 1;
            seen < 3
        });
        assert!(refused.is_err());
        // Mounts met on the way (the root's, this tree's) are judged once.
        let judged = r.judged.list.lock().unwrap();
        assert!(!judged.is_empty());
    }

    /// The tests that make or replace the shared set, one at a time.
    static SHARING: Mutex<()> = Mutex::new(());

    /// The resolvers made while a submission's looks are held share one
    /// set of judged mounts: the second finds the root judged by the first
    /// and reads no table for it.
    #[test]
    fn the_resolvers_of_one_submission_share_their_judgements() {
        let _one = SHARING.lock().unwrap_or_else(|p| p.into_inner());
        let looks = Looks::hold();
        let (a, b) = (Resolver::new(), Resolver::new());
        assert!(Arc::ptr_eq(&a.judged, &looks.0) && Arc::ptr_eq(&b.judged, &looks.0));
        a.canonicalize(Path::new("/")).unwrap();
        let root = b
            .judged
            .list
            .lock()
            .unwrap()
            .iter()
            .any(|j| j.root && j.me == b.me);
        assert!(
            root,
            "the root judged by the first resolver is the second's"
        );
    }

    /// A set past its second keeps no pin: what it held is let go at the
    /// next look, and nothing more is kept.
    #[test]
    fn a_set_past_its_second_keeps_no_pin() {
        let young = Resolver::new();
        young.canonicalize(Path::new("/")).unwrap();
        let held = std::mem::take(&mut *young.judged.list.lock().unwrap());
        assert!(!held.is_empty());
        let old = Resolver {
            judged: Arc::new(Judgements {
                made: Instant::now() - SHARED_FOR,
                list: Mutex::new(held),
            }),
            me: young.me,
        };
        old.canonicalize(Path::new("/")).unwrap();
        assert!(old.judged.list.lock().unwrap().is_empty());
    }

    /// A set past its second that its holders keep (a submission's looks
    /// that wait) lets its pins go when a newer set is made, whoever
    /// makes it.
    #[test]
    fn a_held_set_past_its_second_is_emptied_by_the_next_set() {
        let _one = SHARING.lock().unwrap_or_else(|p| p.into_inner());
        let young = Resolver::new();
        young.canonicalize(Path::new("/")).unwrap();
        let held = std::mem::take(&mut *young.judged.list.lock().unwrap());
        assert!(!held.is_empty());
        let stale = Arc::new(Judgements {
            made: Instant::now() - SHARED_FOR,
            list: Mutex::new(held),
        });
        *SHARED.lock().unwrap() = Arc::downgrade(&stale);
        let next = Looks::hold();
        assert!(!Arc::ptr_eq(&next.0, &stale));
        assert!(stale.list.lock().unwrap().is_empty());
    }

    /// A FUSE mount another user serves (named or not) and a mount the
    /// table does not list are refused; any other mount, the user's own
    /// FUSE mounts included, is crossed.
    #[test]
    fn the_verdict_refuses_foreign_fuse_and_unlisted_mounts() {
        let table = MountTable::parse(
            b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
              44 22 0:60 / /home/u rw - fuse.bindfs bindfs rw,user_id=1000,group_id=1000\n\
              45 22 0:61 / /srv/f rw - fuse sshfs rw\n",
            usize::MAX,
        );
        assert_eq!(verdict(&table, 22, 1000, false), None);
        assert_eq!(verdict(&table, 44, 1000, false), None);
        let theirs = verdict(&table, 44, 0, false).unwrap();
        assert!(theirs.contains("FUSE mount served by uid 1000"), "{theirs}");
        let unnamed = verdict(&table, 45, 1000, false).unwrap();
        assert!(
            unnamed.contains("a user the mount table does not name"),
            "{unnamed}"
        );
        // This process's own root, unlisted (a chroot into a client's
        // view): where the walk starts, not a crossing.
        assert_eq!(verdict(&table, 46, 0, true), None);
        let unlisted = verdict(&table, 46, 0, false).unwrap();
        assert!(unlisted.contains("does not list"), "{unlisted}");
    }

    /// The mount id read without syncing is the one the table lists for
    /// the root.
    #[test]
    fn the_mount_id_is_the_tables() {
        let fd = nix::fcntl::open(
            "/",
            OFlag::O_PATH | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        let id = mount_id(&fd).unwrap();
        let table = read_mount_table();
        assert!(
            table
                .0
                .iter()
                .any(|l| l.id == id && l.point == Path::new("/"))
        );
    }
}
