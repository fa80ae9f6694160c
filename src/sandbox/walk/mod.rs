//! The evidence walk (`walk_upper_layer`): what a rehearsal changed, read
//! from the overlay's upper layer only. The cost grows with what changed, never with the workspace.
//!
//! Runs inside the sandbox helper after every process of the command is dead,
//! so nothing moves under the walk. Symlinks are recorded, never followed: the
//! upper layer is walked with `lstat` semantics and the lower layer (the real
//! workspace) is looked up with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`.

mod content;
mod deleted;
mod layers;
mod links;
pub(super) mod outside;

pub(super) use links::{LinkLookup, link_leaves_workspace};

use std::collections::HashMap;
use std::fs::Metadata;
use std::io::{self, Read, Seek};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// Overlay's own bookkeeping attributes (mounted with `userxattr`).
const OVERLAY_XATTR_PREFIX: &str = "user.overlay.";
/// At most this many entries are listed under one deleted directory tree.
const MAX_DELETED_EXPANSION: usize = 100_000;
/// At most this many changes are listed; past it the evidence is incomplete
/// and the run hits its `changes` limit. Twice a 50,000-file dependency
/// install; the run record holding this many (with the receipt's copy) stays
/// under `engine::RECORD_MAX_BYTES` for paths of ordinary length.
pub(super) const MAX_CHANGES: usize = 100_000;

use crate::model::change::{Change, ChangeKind, FileType};
use content::{describe_special, hash_created_file, xattr_diff};
use deleted::{expand_lower_dir, expand_opaque, push_deleted};
use layers::{
    LowerEntry, compare_root, fill_mode, lookup_lower, open_lower, open_upper_file, owner,
    perm_bits,
};
use links::symlink_escapes;

/// Where a blob goes: the walker hands over content it hashed so the caller
/// can persist it (the live lane applies exactly these bytes).
pub(super) trait BlobSink {
    fn put(&mut self, hash: &blake3::Hash, len: u64, content: &mut dyn Read) -> io::Result<()>;
    /// Reserve room for `len` bytes (the file's apparent size) before it is
    /// read; false when the run's kept-content budget cannot hold them: the
    /// file is then neither hashed nor kept.
    fn reserve(&mut self, len: u64) -> bool {
        let _ = len;
        true
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DiffError {
    #[error("walking the overlay upper layer at {path}: {source}")]
    Walk { path: PathBuf, source: io::Error },
    #[error("reading {path} from the upper layer: {source}")]
    Upper { path: String, source: io::Error },
    #[error("looking up {path} in the real workspace: {source}")]
    Lower { path: String, source: io::Error },
    #[error("storing content of {path}: {source}")]
    Blob { path: String, source: io::Error },
}

/// Which layer of the overlay a [`LayerOpen`] request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layer {
    Lower,
    Upper,
}

/// Opens files of the overlay's layers on the walk's behalf, with the
/// workspace owner's rights (see `sandbox::reader`): `rel` below the layer's
/// root, never through a symlink.
pub(super) trait LayerOpen {
    fn open(&self, layer: Layer, rel: &Path, flags: OFlag) -> io::Result<OwnedFd>;
}

/// The lower layer as the walk sees it: its root (for metadata of the root
/// itself) and the opener every other access goes through.
struct Lower<'a> {
    root: &'a OwnedFd,
    opener: &'a dyn LayerOpen,
}

/// What the walk found: the changes, whether the list was cut at
/// [`MAX_CHANGES`], and how many entries lay too deep to name (past
/// `PATH_MAX`): left out, and reported as a limit.
pub(super) struct Walked {
    pub changes: Vec<Change>,
    pub truncated: bool,
    pub too_deep: usize,
}

fn too_long(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENAMETOOLONG)
}

/// Walk the upper layer rooted at `upper_root` (a path that may go through a
/// `/proc/self/fd/N` magic link) against the lower layer `lower`.
///
/// `run_uid` is the id the command ran as. Every lower-layer file, and every
/// upper-layer file not owned by `run_uid` (a copy-up of someone else's
/// file, which overlay makes with the mounter's rights), is opened through
/// `opener`, which holds only the workspace owner's rights: what the owner
/// may not read gets no hash and no kept content, only `content_withheld`,
/// and what is hashed and kept is read from the descriptor that was checked.
// Still long: one pass per upper-layer entry, by kind, sharing the walk's state (changes,
// hard-link inodes, the blob sink); a walker struct holding that state is the next split.
pub(super) fn walk_upper_layer(
    upper_root: &Path,
    lower: &OwnedFd,
    workspace: &Path,
    diff_before_max: u64,
    run_uid: Option<u32>,
    opener: &dyn LayerOpen,
    sink: &mut dyn BlobSink,
) -> Result<Walked, DiffError> {
    let lower = Lower {
        root: lower,
        opener,
    };
    let lower = &lower;
    let mut too_deep = 0usize;
    let mut changes = Vec::new();
    let mut inodes: HashMap<(u64, u64), String> = HashMap::new();
    // Directories of the upper layer with no directory at their path in the
    // lower layer (the walk is depth first): nothing below them can be in the
    // lower layer, so their entries are not looked up there (a dependency
    // install's tens of thousands of files would each cost a round trip to
    // the owner-rights reader).
    let mut new_dirs: Vec<PathBuf> = Vec::new();
    // The workspace root itself: its mode, owner and attributes.
    if let Some(root_change) = compare_root(upper_root, lower) {
        changes.push(root_change);
    }
    let walker = walkdir::WalkDir::new(upper_root)
        .follow_links(false)
        .follow_root_links(true)
        .min_depth(1)
        .sort_by_file_name();
    for entry in walker {
        if changes.len() >= MAX_CHANGES {
            changes.sort_by_key(|c| c.path_bytes());
            return Ok(Walked {
                changes,
                truncated: true,
                too_deep,
            });
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) if e.io_error().is_some_and(too_long) => {
                too_deep += 1;
                continue;
            }
            Err(e) => {
                return Err(DiffError::Walk {
                    path: upper_root.to_path_buf(),
                    source: e.into(),
                });
            }
        };
        let rel = entry
            .path()
            .strip_prefix(upper_root)
            .expect("walkdir yields paths under its root");
        let rel_bytes = rel.as_os_str().as_bytes().to_vec();
        let shown = String::from_utf8_lossy(&rel_bytes).into_owned();
        let meta = match entry.path().symlink_metadata() {
            Ok(m) => m,
            Err(e) if too_long(&e) => {
                too_deep += 1;
                continue;
            }
            Err(source) => {
                return Err(DiffError::Upper {
                    path: shown.clone(),
                    source,
                });
            }
        };
        while new_dirs.last().is_some_and(|d| !rel.starts_with(d)) {
            new_dirs.pop();
        }
        let lower_entry = match if new_dirs.is_empty() {
            lookup_lower(lower, rel)
        } else {
            Ok(None)
        } {
            Ok(l) => l,
            Err(e) if too_long(&e) => {
                too_deep += 1;
                continue;
            }
            Err(source) => {
                return Err(DiffError::Lower {
                    path: shown.clone(),
                    source,
                });
            }
        };
        let ft = meta.file_type();

        if ft.is_char_device() && meta.rdev() == 0 {
            // A whiteout: the entry was deleted.
            if let Some(l) = &lower_entry {
                push_deleted(&mut changes, lower, rel, l)?;
            }
            continue;
        }

        if ft.is_dir() {
            if lower_entry
                .as_ref()
                .is_none_or(|l| l.file_type != FileType::Dir && !l.withheld)
            {
                new_dirs.push(rel.to_path_buf());
            }
            compare_dir(
                &mut changes,
                lower,
                rel,
                entry.path(),
                &meta,
                lower_entry.as_ref(),
            )?;
            continue;
        }

        let file_type = if ft.is_file() {
            FileType::File
        } else if ft.is_symlink() {
            FileType::Symlink
        } else {
            FileType::Other
        };
        let mut c = Change::new(&rel_bytes, ChangeKind::Created, file_type);
        fill_mode(&mut c, lower_entry.as_ref(), Some(&meta));
        c.xattrs_changed = if file_type == FileType::Symlink {
            Vec::new()
        } else {
            xattr_diff(entry.path(), lower_entry.as_ref())
        };

        match file_type {
            FileType::File if !sink.reserve(meta.len()) => {
                c.content_not_kept = true;
                c.size_after = Some(meta.len());
            }
            FileType::File => match open_upper_file(entry.path(), rel, &meta, run_uid, lower) {
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                    c.content_withheld = true;
                    c.size_after = Some(meta.len());
                }
                Err(source) => {
                    return Err(DiffError::Upper {
                        path: shown.clone(),
                        source,
                    });
                }
                Ok(mut f) => {
                    let up_err = |source| DiffError::Upper {
                        path: shown.clone(),
                        source,
                    };
                    let (hash, stub_copy_of) =
                        hash_created_file(&mut f, meta.len()).map_err(up_err)?;
                    c.after = Some(hash.to_hex().to_string());
                    c.size_after = Some(meta.len());
                    c.stub_copy_of = stub_copy_of;
                    if meta.nlink() > 1 {
                        let key = (meta.dev(), meta.ino());
                        if let Some(first) = inodes.get(&key) {
                            c.hardlink_of = Some(first.clone());
                        } else {
                            inodes.insert(key, c.path.clone());
                        }
                    }
                    f.seek(io::SeekFrom::Start(0)).map_err(up_err)?;
                    sink.put(&hash, meta.len(), &mut f)
                        .map_err(|source| DiffError::Blob {
                            path: shown.clone(),
                            source,
                        })?;
                }
            },
            FileType::Symlink => {
                let target =
                    std::fs::read_link(entry.path()).map_err(|source| DiffError::Upper {
                        path: shown.clone(),
                        source,
                    })?;
                let tb = target.as_os_str().as_bytes();
                c.after = Some(blake3::hash(tb).to_hex().to_string());
                c.symlink_target = Some(String::from_utf8_lossy(tb).into_owned());
                c.symlink_escapes = symlink_escapes(rel, &target, workspace);
            }
            _ => {
                c.special = Some(describe_special(&meta));
            }
        }

        if let Some(l) = &lower_entry
            && l.file_type == FileType::Dir
        {
            // A directory replaced by a file, link or fifo: everything it
            // held is gone too.
            let mut budget = MAX_DELETED_EXPANSION;
            expand_lower_dir(&mut changes, lower, rel, &mut budget)?;
        }
        match &lower_entry {
            None => {}
            Some(l) => {
                c.before = l.hash.clone();
                c.content_withheld |= l.withheld;
                let same_content =
                    l.file_type == file_type && l.hash == c.after && c.after.is_some();
                c.kind = if !same_content {
                    ChangeKind::Modified
                } else if l.mode != perm_bits(&meta)
                    || l.owner != owner(&meta)
                    || !c.xattrs_changed.is_empty()
                {
                    ChangeKind::Metadata
                } else {
                    ChangeKind::Identical
                };
                if c.kind == ChangeKind::Modified
                    && l.file_type == FileType::File
                    && file_type == FileType::File
                    && l.size <= diff_before_max
                    && !c.content_not_kept
                    && sink.reserve(l.size)
                {
                    // Keep the old content of small files for text diffs.
                    if let Some(h) = &l.hash
                        && let Ok(f) = open_lower(lower, rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK)
                        && let Ok(hash) = blake3::Hash::from_hex(h)
                    {
                        // The blob sink re-hashes what it keeps: a file
                        // swapped since it was hashed is not kept as "before".
                        let mut file = std::fs::File::from(f);
                        sink.put(&hash, l.size, &mut file)
                            .map_err(|source| DiffError::Blob {
                                path: shown.clone(),
                                source,
                            })?;
                    }
                }
            }
        }
        changes.push(c);
    }
    changes.sort_by_key(|c| c.path_bytes());
    let truncated = changes.len() > MAX_CHANGES;
    changes.truncate(MAX_CHANGES);
    Ok(Walked {
        changes,
        truncated,
        too_deep,
    })
}

/// A directory of the upper layer against what the lower layer holds
/// there: created, replacing a non-directory, or changed in metadata; an
/// opaque one hides everything the lower directory held.
fn compare_dir(
    changes: &mut Vec<Change>,
    lower: &Lower,
    rel: &Path,
    path: &Path,
    meta: &Metadata,
    lower_entry: Option<&LowerEntry>,
) -> Result<(), DiffError> {
    let rel_bytes = rel.as_os_str().as_bytes();
    let opaque = xattr::get(path, "user.overlay.opaque")
        .ok()
        .flatten()
        .is_some_and(|v| v == b"y" || v == b"x");
    match lower_entry {
        None => {
            let mut c = Change::new(rel_bytes, ChangeKind::Created, FileType::Dir);
            fill_mode(&mut c, None, Some(meta));
            c.xattrs_changed = xattr_diff(path, None);
            changes.push(c);
        }
        Some(l) if l.file_type != FileType::Dir => {
            let mut c = Change::new(rel_bytes, ChangeKind::Modified, FileType::Dir);
            c.before = l.hash.clone();
            fill_mode(&mut c, Some(l), Some(meta));
            changes.push(c);
        }
        Some(l) => {
            let xch = xattr_diff(path, Some(l));
            if perm_bits(meta) != l.mode || !xch.is_empty() || owner(meta) != l.owner {
                let mut c = Change::new(rel_bytes, ChangeKind::Metadata, FileType::Dir);
                fill_mode(&mut c, Some(l), Some(meta));
                c.xattrs_changed = xch;
                changes.push(c);
            }
            if opaque {
                // Everything the lower directory held and the upper
                // one does not list was removed.
                expand_opaque(changes, lower, rel, path)?;
            }
        }
    }
    Ok(())
}
