//! The live lane's file operations: apply a reviewed change set to the real
//! workspace, and undo it.
//!
//! Every path is reached from a handle on the workspace root with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV)` for its parent directory, and the last component is
//! only ever used with `*at` calls that do not follow it. A workspace whose
//! directories were swapped for symlinks after the rehearsal cannot redirect
//! a write: the lookup fails and the promotion is undone.
//!
//! Files are replaced atomically (written to a temporary name beside the
//! target, renamed over it) and get the workspace owner's ids. Each step
//! notes what it changed; [`LocalWorkspace::sync`] makes exactly that
//! durable (`durable.rs`) before the receipt is journaled, so a crash
//! before then is undone from the plan and backups (durable before).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::{Gid, Uid, UnlinkatFlags};
use serde::{Deserialize, Serialize};

pub(crate) use super::owner::Workspace;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    #[error("{path}: {message}")]
    Path { path: String, message: String },
    #[error("workspace {path}: {message}")]
    Root { path: PathBuf, message: String },
    #[error("{0}")]
    Agent(String), // an error the owner's agent reported whole
    #[error("backup {path}: {source}")]
    Backup {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(super) fn perr(path: &[u8], message: impl std::fmt::Display) -> ApplyError {
    ApplyError::Path {
        path: crate::workspace::paths::escape_for_humans(path),
        message: message.to_string(),
    }
}

/// What is (or must be) at a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum State {
    Absent,
    /// A regular file with this content hash and permission bits.
    File {
        hash: String,
        mode: u32,
    },
    Dir {
        mode: u32,
    },
    Symlink {
        target_hash: String,
    },
    /// Anything else (fifo, socket, device): never written, never expected.
    Other,
}

impl State {
    pub(crate) fn describe(&self) -> String {
        match self {
            State::Absent => "nothing".into(),
            State::File { hash, mode } => {
                format!("a file {} (mode {mode:o})", &hash[..12.min(hash.len())])
            }
            State::Dir { mode } => format!("a directory (mode {mode:o})"),
            State::Symlink { target_hash } => {
                format!("a symlink {}", &target_hash[..12.min(target_hash.len())])
            }
            State::Other => "a special file".into(),
        }
    }
}

/// One step of a promotion, with what must be there before and what will
/// be there after.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Op {
    /// Workspace-relative path, exact bytes (hex).
    pub path_hex: String,
    /// Shown to humans.
    pub path: String,
    pub action: Action,
    /// What the rehearsal saw (checked before anything is written).
    pub expect_before: Expect,
    /// What the promotion leaves.
    pub after: Expect,
    /// The replaced content, kept for undo and rollback (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<Backup>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Backup {
    /// File name inside the receipt's backup directory (regular files).
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub hash: String,
    #[serde(default)]
    pub mode: u32,
    pub owner: (u32, u32),
    /// The replaced symlink's target (hex), when it was a symlink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target_hex: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub(crate) enum Action {
    /// Write this blob (BLAKE3 `hash`) as a regular file.
    WriteFile {
        blob: PathBuf,
        hash: String,
        mode: u32,
    },
    MakeDir {
        mode: u32,
    },
    Symlink {
        target_hex: String,
    },
    Remove,
    Chmod {
        mode: u32,
    },
    /// Give the path the rehearsal's modification time (after every
    /// other step; `meta.rs`).
    SetTime {
        mtime_ns: i64,
    },
}

/// A state to compare with, loose where the rehearsal recorded less.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case")]
pub(crate) enum Expect {
    Absent,
    /// A regular file with this content hash, or a symlink whose target
    /// hashes to it (the rehearsal records both as one hash).
    Hashed {
        hash: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    Dir {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
}

impl Expect {
    pub(crate) fn matches(&self, s: &State) -> bool {
        match (self, s) {
            (Expect::Absent, State::Absent) => true,
            (Expect::Hashed { hash, mode }, State::File { hash: h, mode: m }) => {
                hash == h && mode.is_none_or(|x| x == *m)
            }
            (Expect::Hashed { hash, .. }, State::Symlink { target_hash }) => hash == target_hash,
            (Expect::Dir { mode }, State::Dir { mode: m }) => mode.is_none_or(|x| x == *m),
            _ => false,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Expect::Absent => "nothing".into(),
            Expect::Hashed { hash, .. } => format!("content {}", &hash[..12.min(hash.len())]),
            Expect::Dir { .. } => "a directory".into(),
        }
    }
}

/// The workspace directory as the rehearsal pinned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub gid: u32,
}

/// The real workspace, opened once, in this process with this process's
/// rights (see `owner::Workspace`, which picks this or an agent holding the
/// owner's credentials).
pub(crate) struct LocalWorkspace {
    pub(super) root: OwnedFd,
    /// Ids promoted files get (the workspace root's owner); applied only
    /// when we may (running as root).
    pub(super) owner: (u32, u32),
    chown: bool,
    /// Regular files larger than this are neither hashed nor backed up.
    max_file: u64,
    /// What the steps changed since the last sync (`durable.rs`).
    pub(super) pending: std::sync::Mutex<super::durable::Pending>,
}

use crate::workspace::paths::beneath as how;

/// Copy `src` into the new file `dest`, returning the BLAKE3 of what was
/// written. Not fsync'd: the caller syncs the backup directory's file
/// system once, after the last backup and before the first write.
pub(crate) fn copy_to_backup(src: &mut dyn Read, dest: &Path) -> Result<String, ApplyError> {
    let bk = |source| ApplyError::Backup {
        path: dest.to_path_buf(),
        source,
    };
    let mut out = std::fs::File::create(dest).map_err(bk)?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match src.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(bk(e)),
        };
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(bk)?;
    }
    Ok(h.finalize().to_hex().to_string())
}

/// A backup's file name inside the receipt's backup directory.
pub(crate) fn backup_file_name(dest: &Path) -> String {
    dest.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|b| *b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (b".", rel),
    }
}

fn hash_reader(r: &mut dyn Read) -> std::io::Result<String> {
    let mut h = blake3::Hasher::new();
    h.update_reader(r)?;
    Ok(h.finalize().to_hex().to_string())
}

impl LocalWorkspace {
    /// Open the workspace root from `/` without following any symlink, and
    /// check it is the very directory the rehearsal pinned (device, inode,
    /// owner): a workspace path pointed at another directory since then is
    /// refused.
    pub(crate) fn open(
        path: &Path,
        expect: &Identity,
        max_file: u64,
    ) -> Result<LocalWorkspace, ApplyError> {
        let root_err = |m: String| ApplyError::Root {
            path: path.to_path_buf(),
            message: m,
        };
        // Through the host opener (no symlink, nothing on a mount the
        // view's resolver does not cross), then opened for reading.
        let (_, pinned) = crate::workspace::paths::open_on_host(path, false)
            .map_err(|e| root_err(format!("{e} (is a component of the path a symlink?)")))?;
        let root = nix::fcntl::openat(
            &pinned,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| root_err(e.to_string()))?;
        let st = nix::sys::stat::fstat(&root).map_err(|e| root_err(e.to_string()))?;
        let got = Identity {
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            gid: st.st_gid,
        };
        if got != *expect {
            return Err(root_err(format!(
                "is no longer the directory resolved for this run (device/inode/owner {}:{} {}:{} now, {}:{} {}:{} then); nothing is read or written",
                got.dev, got.ino, got.uid, got.gid, expect.dev, expect.ino, expect.uid, expect.gid
            )));
        }
        Ok(LocalWorkspace {
            root,
            owner: (st.st_uid, st.st_gid),
            chown: nix::unistd::geteuid().is_root(),
            max_file,
            pending: Default::default(),
        })
    }

    pub(crate) fn owner(&self) -> (u32, u32) {
        self.owner
    }

    fn check_size(&self, rel: &[u8], size: i64) -> Result<(), ApplyError> {
        if size as u64 > self.max_file {
            return Err(perr(
                rel,
                format!(
                    "is {size} bytes (apparent size), more than the live lane hashes or backs up ({}); nothing is written",
                    self.max_file
                ),
            ));
        }
        Ok(())
    }

    /// The pinned root directory.
    pub(crate) fn root_fd(&self) -> &OwnedFd {
        &self.root
    }

    fn parent_raw(&self, rel: &[u8]) -> Result<nix::Result<(OwnedFd, Vec<u8>)>, ApplyError> {
        let (dir, name) = split(rel);
        if name.is_empty() || name == b"." || name == b".." {
            return Err(perr(rel, "not a path below the workspace"));
        }
        Ok(nix::fcntl::openat2(
            &self.root,
            OsStr::from_bytes(dir),
            how(OFlag::O_RDONLY | OFlag::O_DIRECTORY),
        )
        .map(|fd| (fd, name.to_vec())))
    }

    /// The parent directory of `rel`, reached without symlinks, and owned by
    /// the workspace owner (checked on the opened handle, which every later
    /// step uses): a directory of someone else's swapped in is refused, so
    /// nothing is done there that the owner could not do itself.
    pub(super) fn parent(&self, rel: &[u8]) -> Result<(OwnedFd, Vec<u8>), ApplyError> {
        let (fd, name) = self.parent_lookup(rel)?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| perr(rel, e))?;
        if st.st_uid != self.owner.0 {
            return Err(perr(
                rel,
                format!(
                    "its directory belongs to uid {}, not the workspace owner {}: nothing is written there",
                    st.st_uid, self.owner.0
                ),
            ));
        }
        if st.st_mode & 0o1000 != 0 {
            return Err(perr(
                rel,
                "its directory is sticky (shared): nothing is written there",
            ));
        }
        Ok((fd, name))
    }

    fn parent_lookup(&self, rel: &[u8]) -> Result<(OwnedFd, Vec<u8>), ApplyError> {
        self.parent_raw(rel)?.map_err(|e| {
            perr(
                rel,
                match e {
                    Errno::ELOOP | Errno::EXDEV => format!(
                        "a directory on its path is a symlink or leaves the workspace ({e}); nothing is written through it"
                    ),
                    Errno::ENOTDIR => format!(
                        "a component of its path is no longer a directory (a symlink or a file now; {e}); nothing is written through it"
                    ),
                    _ => format!("cannot open its directory: {e}"),
                },
            )
        })
    }

    /// What is at `rel` now (never following a final symlink).
    pub(crate) fn state(&self, rel: &[u8]) -> Result<State, ApplyError> {
        if rel == b"." {
            let st = nix::sys::stat::fstat(&self.root).map_err(|e| perr(rel, e))?;
            return Ok(State::Dir {
                mode: st.st_mode & 0o7777,
            });
        }
        let (dir, name) = match self.parent_raw(rel)? {
            Ok(x) => x,
            // A missing parent means the path is absent.
            Err(Errno::ENOENT) => return Ok(State::Absent),
            Err(_) => self.parent(rel)?,
        };
        let name = OsStr::from_bytes(&name);
        let st = match nix::sys::stat::fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(State::Absent),
            Err(e) => return Err(perr(rel, e)),
        };
        let mode = st.st_mode & 0o7777;
        Ok(
            match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
                SFlag::S_IFREG => {
                    self.check_size(rel, st.st_size)?;
                    let fd = nix::fcntl::openat(
                        &dir,
                        name,
                        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| perr(rel, e))?;
                    let mut f = std::fs::File::from(fd);
                    State::File {
                        hash: hash_reader(&mut f).map_err(|e| perr(rel, e))?,
                        mode,
                    }
                }
                SFlag::S_IFDIR => State::Dir { mode },
                SFlag::S_IFLNK => {
                    let t = nix::fcntl::readlinkat(&dir, name).map_err(|e| perr(rel, e))?;
                    State::Symlink {
                        target_hash: blake3::hash(t.as_bytes()).to_hex().to_string(),
                    }
                }
                _ => State::Other,
            },
        )
    }

    /// Open the regular file at `rel` for a backup: the open file and its
    /// mode and owner (hash and file name left to the caller).
    pub(crate) fn open_regular_for_backup(
        &self,
        rel: &[u8],
    ) -> Result<(std::fs::File, Backup), ApplyError> {
        let (dir, name) = self.parent(rel)?;
        let fd = nix::fcntl::openat(
            &dir,
            OsStr::from_bytes(&name),
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| perr(rel, e))?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| perr(rel, e))?;
        if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
            return Err(perr(rel, "is no longer a regular file"));
        }
        self.check_size(rel, st.st_size)?;
        Ok((
            std::fs::File::from(fd),
            Backup {
                file: String::new(),
                hash: String::new(),
                mode: st.st_mode & 0o7777,
                owner: (st.st_uid, st.st_gid),
                symlink_target_hex: None,
            },
        ))
    }

    /// Copy the regular file at `rel` into `dest`, returning its hash, mode
    /// and owner (for undo).
    pub(crate) fn backup_file(&self, rel: &[u8], dest: &Path) -> Result<Backup, ApplyError> {
        let (mut src, mut b) = self.open_regular_for_backup(rel)?;
        b.hash = copy_to_backup(&mut src, dest)?;
        b.file = backup_file_name(dest);
        Ok(b)
    }

    /// Record the symlink at `rel` (its target and owner), for undo.
    pub(crate) fn backup_symlink(&self, rel: &[u8]) -> Result<Backup, ApplyError> {
        let (dir, name) = self.parent(rel)?;
        let name = OsStr::from_bytes(&name);
        let st = nix::sys::stat::fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| perr(rel, e))?;
        let t = nix::fcntl::readlinkat(&dir, name).map_err(|e| perr(rel, e))?;
        Ok(Backup {
            file: String::new(),
            hash: blake3::hash(t.as_bytes()).to_hex().to_string(),
            mode: 0,
            owner: (st.st_uid, st.st_gid),
            symlink_target_hex: Some(hex::encode(t.as_bytes())),
        })
    }

    /// Remove whatever is at `name` in `dir` when it is in the way of a
    /// different type (an empty directory, or a file/symlink).
    fn clear_for(&self, dir: &OwnedFd, name: &OsStr, want_dir: bool) -> nix::Result<()> {
        match nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let is_dir = st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits();
                if is_dir && !want_dir {
                    nix::unistd::unlinkat(dir, name, UnlinkatFlags::RemoveDir)
                } else if !is_dir && want_dir {
                    nix::unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)
                } else {
                    Ok(())
                }
            }
            Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Write `content` (which must hash to `hash`) atomically at `rel`.
    pub(crate) fn write_file(
        &self,
        rel: &[u8],
        content: &mut dyn Read,
        hash: &str,
        mode: u32,
        owner: (u32, u32),
        tmp_tag: &str,
    ) -> Result<(), ApplyError> {
        let (dir, name) = self.parent(rel)?;
        let name = OsStr::from_bytes(&name);
        let tmp = format!(".dryrun-{tmp_tag}.tmp");
        let _ = nix::unistd::unlinkat(&dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        let fd = nix::fcntl::openat(
            &dir,
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| perr(rel, format!("creating a temporary file beside it: {e}")))?;
        let result = (|| -> Result<(), ApplyError> {
            let mut f = std::fs::File::from(fd);
            let mut h = blake3::Hasher::new();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = content.read(&mut buf).map_err(|e| perr(rel, e))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                f.write_all(&buf[..n]).map_err(|e| perr(rel, e))?;
            }
            let got = h.finalize().to_hex().to_string();
            if got != hash {
                return Err(perr(
                    rel,
                    format!("the kept content hashes to {got}, not {hash}: refusing to write it"),
                ));
            }
            // Permission bits only: set-id bits are never promoted.
            nix::sys::stat::fchmod(f.as_fd(), Mode::from_bits_truncate(mode & 0o1777))
                .map_err(|e| perr(rel, e))?;
            if self.chown {
                nix::unistd::fchown(
                    f.as_fd(),
                    Some(Uid::from_raw(owner.0)),
                    Some(Gid::from_raw(owner.1)),
                )
                .map_err(|e| perr(rel, e))?;
            }
            self.clear_for(&dir, name, false)
                .map_err(|e| perr(rel, format!("removing the directory in its place: {e}")))?;
            nix::fcntl::renameat(&dir, tmp.as_str(), &dir, name).map_err(|e| perr(rel, e))?;
            self.note().written(rel);
            Ok(())
        })();
        if result.is_err() {
            let _ = nix::unistd::unlinkat(&dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        result?;
        Ok(())
    }

    pub(crate) fn make_dir(
        &self,
        rel: &[u8],
        mode: u32,
        owner: (u32, u32),
    ) -> Result<(), ApplyError> {
        let (dir, name) = self.parent(rel)?;
        let name = OsStr::from_bytes(&name);
        self.clear_for(&dir, name, true)
            .map_err(|e| perr(rel, format!("removing the file in its place: {e}")))?;
        self.note().written(rel);
        let created = match nix::sys::stat::mkdirat(&dir, name, Mode::from_bits_truncate(0o700)) {
            Ok(()) => true,
            Err(Errno::EEXIST) => {
                // Someone else's directory in the way is refused before it
                // is opened (the owner may not even be able to open it).
                let st = nix::sys::stat::fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map_err(|e| perr(rel, e))?;
                if st.st_uid != self.owner.0 {
                    return Err(perr(
                        rel,
                        format!(
                            "a directory owned by uid {} is in the way: nothing is changed there",
                            st.st_uid
                        ),
                    ));
                }
                false
            }
            Err(e) => return Err(perr(rel, e)),
        };
        let d = nix::fcntl::openat(
            &dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| perr(rel, e))?;
        let st = nix::sys::stat::fstat(&d).map_err(|e| perr(rel, e))?;
        // Ours (just made, still root's) or the owner's; anything else was
        // put there by someone and is not ours to take over.
        let ours = created && st.st_uid == nix::unistd::geteuid().as_raw();
        if !ours && st.st_uid != self.owner.0 {
            return Err(perr(
                rel,
                format!(
                    "a directory owned by uid {} is in the way: nothing is changed there",
                    st.st_uid
                ),
            ));
        }
        nix::sys::stat::fchmod(&d, Mode::from_bits_truncate(mode & 0o1777))
            .map_err(|e| perr(rel, e))?;
        if self.chown {
            nix::unistd::fchown(
                &d,
                Some(Uid::from_raw(owner.0)),
                Some(Gid::from_raw(owner.1)),
            )
            .map_err(|e| perr(rel, e))?;
        }
        Ok(())
    }

    pub(crate) fn symlink(
        &self,
        rel: &[u8],
        target: &[u8],
        owner: (u32, u32),
        tmp_tag: &str,
    ) -> Result<(), ApplyError> {
        let (dir, name) = self.parent(rel)?;
        let name = OsStr::from_bytes(&name);
        let tmp = format!(".dryrun-{tmp_tag}.lnk");
        self.note().symlink(rel);
        let _ = nix::unistd::unlinkat(&dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        nix::unistd::symlinkat(OsStr::from_bytes(target), &dir, tmp.as_str())
            .map_err(|e| perr(rel, e))?;
        // Change the owner of the link we made through a handle on it, never
        // by name (the name could be swapped for someone else's file).
        let r = nix::fcntl::openat(
            &dir,
            tmp.as_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .and_then(|l| {
            let st = nix::sys::stat::fstat(&l)?;
            if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFLNK.bits() {
                return Err(Errno::EEXIST);
            }
            if self.chown {
                nix::unistd::fchownat(
                    &l,
                    "",
                    Some(Uid::from_raw(owner.0)),
                    Some(Gid::from_raw(owner.1)),
                    AtFlags::AT_EMPTY_PATH | AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
            }
            Ok(())
        })
        .and_then(|_| self.clear_for(&dir, name, false))
        .and_then(|_| nix::fcntl::renameat(&dir, tmp.as_str(), &dir, name));
        if let Err(e) = r {
            let _ = nix::unistd::unlinkat(&dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(perr(rel, e));
        }
        Ok(())
    }

    pub(crate) fn remove(&self, rel: &[u8]) -> Result<(), ApplyError> {
        let (dir, name) = self.parent(rel)?;
        let name = OsStr::from_bytes(&name);
        let st = match nix::sys::stat::fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(perr(rel, e)),
        };
        let flag = if st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits() {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        self.note().entry(rel);
        nix::unistd::unlinkat(&dir, name, flag).map_err(|e| perr(rel, e))?;
        Ok(())
    }
}

impl Op {
    pub(crate) fn path_bytes(&self) -> Vec<u8> {
        hex::decode(&self.path_hex).unwrap_or_else(|_| self.path.as_bytes().to_vec())
    }

    /// Carry the step out.
    pub(crate) fn apply(&self, ws: &Workspace, tag: &str) -> Result<(), ApplyError> {
        let rel = self.path_bytes();
        let owner = ws.owner();
        match &self.action {
            Action::WriteFile { blob, hash, mode } => {
                let mut f = std::fs::File::open(blob)
                    .map_err(|e| perr(&rel, format!("kept content {}: {e}", blob.display())))?;
                ws.write_file(&rel, &mut f, hash, *mode, owner, tag)
            }
            Action::MakeDir { mode } => ws.make_dir(&rel, *mode, owner),
            Action::Symlink { target_hex } => {
                let target = hex::decode(target_hex).map_err(|e| perr(&rel, e))?;
                ws.symlink(&rel, &target, owner, tag)
            }
            Action::Remove => ws.remove(&rel),
            Action::Chmod { mode } => ws.chmod(&rel, *mode),
            Action::SetTime { mtime_ns } => ws.set_mtime(&rel, *mtime_ns),
        }
    }

    /// Put back what was there before (from the backup for a file or a
    /// symlink). Call for a step that was applied, even partly.
    pub(crate) fn undo(&self, ws: &Workspace, backups: &Path, tag: &str) -> Result<(), ApplyError> {
        let rel = self.path_bytes();
        if matches!(self.action, Action::SetTime { .. }) {
            return Ok(()); // times are not restored (content, types, modes, owners are)
        }
        match (&self.expect_before, &self.backup) {
            (Expect::Absent, _) => ws.remove(&rel),
            (Expect::Hashed { .. }, Some(b)) => match &b.symlink_target_hex {
                Some(t) => {
                    let target = hex::decode(t).map_err(|e| perr(&rel, e))?;
                    ws.symlink(&rel, &target, ws.owner(), tag)
                }
                None => {
                    let p = backups.join(&b.file);
                    let mut f = std::fs::File::open(&p)
                        .map_err(|e| perr(&rel, format!("backup {}: {e}", p.display())))?;
                    // Restored files belong to the workspace owner, like
                    // promoted ones.
                    ws.write_file(&rel, &mut f, &b.hash, b.mode, ws.owner(), tag)
                }
            },
            (Expect::Hashed { mode: Some(m), .. }, None) => {
                // A metadata-only step on a file: the content never changed.
                ws.chmod(&rel, *m)
            }
            (Expect::Hashed { .. }, None) => Err(perr(&rel, "no backup of what was replaced")),
            (Expect::Dir { mode }, _) => {
                let m = mode.unwrap_or(0o755);
                if matches!(ws.state(&rel)?, State::Dir { .. }) {
                    ws.chmod(&rel, m)
                } else {
                    ws.make_dir(&rel, m, ws.owner())
                }
            }
        }
    }
}
