//! The evidence walk (`walk_upper_layer`): what a rehearsal changed, read
//! from the overlay's upper layer only. The cost grows with what changed, never with the workspace.
//!
//! Runs inside the sandbox helper after every process of the command is dead,
//! so nothing moves under the walk. Symlinks are recorded, never followed: the
//! upper layer is walked with `lstat` semantics and the lower layer (the real
//! workspace) is looked up with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`.

use std::collections::{BTreeMap, HashMap};
use std::fs::Metadata;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;

/// Overlay's own bookkeeping attributes (mounted with `userxattr`).
const OVERLAY_XATTR_PREFIX: &str = "user.overlay.";
/// At most this many entries are listed under one deleted directory tree.
const MAX_DELETED_EXPANSION: usize = 100_000;
/// At most this many changes are listed; past it the evidence is incomplete
/// and the run hits its `changes` limit.
pub(super) const MAX_CHANGES: usize = 20_000;

use crate::model::change::{Change, ChangeKind, FileType};

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
        let lower_entry = match lookup_lower(lower, rel) {
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
            let opaque = xattr::get(entry.path(), "user.overlay.opaque")
                .ok()
                .flatten()
                .is_some_and(|v| v == b"y" || v == b"x");
            match &lower_entry {
                None => {
                    let mut c = Change::new(&rel_bytes, ChangeKind::Created, FileType::Dir);
                    fill_mode(&mut c, None, Some(&meta));
                    c.xattrs_changed = xattr_diff(entry.path(), None);
                    changes.push(c);
                }
                Some(l) if l.file_type != FileType::Dir => {
                    let mut c = Change::new(&rel_bytes, ChangeKind::Modified, FileType::Dir);
                    c.before = l.hash.clone();
                    fill_mode(&mut c, Some(l), Some(&meta));
                    changes.push(c);
                }
                Some(l) => {
                    let xch = xattr_diff(entry.path(), Some(l));
                    if perm_bits(&meta) != l.mode || !xch.is_empty() || owner(&meta) != l.owner {
                        let mut c = Change::new(&rel_bytes, ChangeKind::Metadata, FileType::Dir);
                        fill_mode(&mut c, Some(l), Some(&meta));
                        c.xattrs_changed = xch;
                        changes.push(c);
                    }
                    if opaque {
                        // Everything the lower directory held and the upper
                        // one does not list was removed.
                        expand_opaque(&mut changes, lower, rel, entry.path())?;
                    }
                }
            }
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

/// Open a regular file of the upper layer for hashing: directly when the
/// command's own user owns it (the owner could read it anyway, even after a
/// `chmod 000`), else through the owner-rights opener.
fn open_upper_file(
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
fn compare_root(upper_root: &Path, lower: &Lower) -> Option<Change> {
    let up = std::fs::metadata(upper_root).ok()?;
    let low = nix::sys::stat::fstat(lower.root.as_fd()).ok()?;
    let low_x = open_lower(lower, Path::new("."), OFlag::O_RDONLY | OFlag::O_DIRECTORY)
        .map(|d| read_xattrs_file(&std::fs::File::from(d)))
        .unwrap_or_default();
    let entry = LowerEntry {
        withheld: false,
        file_type: FileType::Dir,
        hash: None,
        mode: low.st_mode & 0o7777,
        owner: (low.st_uid, low.st_gid),
        size: 0,
        xattrs: low_x,
    };
    let xch = xattr_diff(upper_root, Some(&entry));
    if perm_bits(&up) == entry.mode && owner(&up) == entry.owner && xch.is_empty() {
        return None;
    }
    let mut c = Change::new(b".", ChangeKind::Metadata, FileType::Dir);
    fill_mode(&mut c, Some(&entry), Some(&up));
    c.xattrs_changed = xch;
    Some(c)
}

/// What the lower layer holds at a path.
#[derive(Debug, Clone)]
struct LowerEntry {
    /// A file the command's user could not read: no hash taken.
    withheld: bool,
    file_type: FileType,
    hash: Option<String>,
    mode: u32,
    owner: (u32, u32),
    size: u64,
    xattrs: BTreeMap<String, Vec<u8>>,
}

fn perm_bits(m: &Metadata) -> u32 {
    m.mode() & 0o7777
}

fn owner(m: &Metadata) -> (u32, u32) {
    (m.uid(), m.gid())
}

fn fill_mode(c: &mut Change, lower: Option<&LowerEntry>, upper: Option<&Metadata>) {
    c.mode_before = lower.map(|l| l.mode);
    if let Some(m) = upper {
        c.mode_after = Some(perm_bits(m));
        c.setid = perm_bits(m) & 0o6000 != 0 && !m.file_type().is_dir();
    }
}

fn open_lower(lower: &Lower, rel: &Path, flags: OFlag) -> io::Result<OwnedFd> {
    lower.opener.open(Layer::Lower, rel, flags)
}

fn lookup_lower(lower: &Lower, rel: &Path) -> io::Result<Option<LowerEntry>> {
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
    }))
}

fn read_xattrs_file(f: &std::fs::File) -> BTreeMap<String, Vec<u8>> {
    use xattr::FileExt;
    let mut out = BTreeMap::new();
    if let Ok(names) = f.list_xattr() {
        for n in names {
            let name = n.to_string_lossy().into_owned();
            if name.starts_with(OVERLAY_XATTR_PREFIX) {
                continue;
            }
            if let Ok(Some(v)) = f.get_xattr(&n) {
                out.insert(name, v);
            }
        }
    }
    out
}

/// Extended attributes of an upper-layer entry. Overlay keeps its own
/// bookkeeping under `user.overlay.*` and stores attributes the *command* set
/// with that prefix escaped as `user.overlay.overlay.*`: those are reported
/// under the name the command used, never skipped.
fn read_xattrs_path(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    if let Ok(names) = xattr::list(p) {
        for n in names {
            let name = n.to_string_lossy().into_owned();
            let shown = if let Some(rest) = name.strip_prefix("user.overlay.overlay.") {
                format!("{OVERLAY_XATTR_PREFIX}{rest}")
            } else if name.starts_with(OVERLAY_XATTR_PREFIX) {
                continue;
            } else {
                name
            };
            if let Ok(Some(v)) = xattr::get(p, &n) {
                out.insert(shown, v);
            }
        }
    }
    out
}

fn xattr_diff(upper: &Path, lower: Option<&LowerEntry>) -> Vec<String> {
    let up = read_xattrs_path(upper);
    let empty = BTreeMap::new();
    let low = lower.map(|l| &l.xattrs).unwrap_or(&empty);
    let mut names: Vec<String> = up
        .iter()
        .filter(|(k, v)| low.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .chain(low.keys().filter(|k| !up.contains_key(*k)).cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A file of the upper layer: its hash, and the tool it is the shadow-stub
/// script of when it is one (`#!/.dryrun/bin/dryrun __stub-exec TOOL\n`,
/// see `sandbox::stubs`). A file small enough to be a stub script is read
/// once for both.
fn hash_created_file(
    f: &mut std::fs::File,
    size: u64,
) -> io::Result<(blake3::Hash, Option<String>)> {
    const STUB_SCRIPT_MAX: u64 = 256;
    if size > STUB_SCRIPT_MAX {
        let mut h = blake3::Hasher::new();
        h.update_reader(f)?;
        return Ok((h.finalize(), None));
    }
    let mut text = Vec::new();
    f.take(STUB_SCRIPT_MAX + 1).read_to_end(&mut text)?;
    let tool = text
        .strip_prefix(crate::model::stubs::stub_script_prefix().as_bytes())
        .and_then(|rest| std::str::from_utf8(rest).ok())
        .map(|t| t.trim_end().to_string());
    Ok((blake3::hash(&text), tool))
}

fn describe_special(m: &Metadata) -> String {
    let ft = m.file_type();
    let (maj, min) = (libc::major(m.rdev()), libc::minor(m.rdev()));
    if ft.is_fifo() {
        "fifo".into()
    } else if ft.is_socket() {
        "socket".into()
    } else if ft.is_char_device() {
        format!("char device {maj}:{min}")
    } else if ft.is_block_device() {
        format!("block device {maj}:{min}")
    } else {
        "unknown".into()
    }
}

/// Whether a symlink at `rel` with `target` resolves (lexically) outside the
/// workspace.
pub(super) fn symlink_escapes(rel: &Path, target: &Path, workspace: &Path) -> bool {
    if target.is_absolute() {
        return !target.starts_with(workspace);
    }
    let mut depth: i64 = rel.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// What a path of the merged tree is, for [`link_leaves_workspace`].
pub(super) enum LinkLookup {
    /// A symlink with this target.
    Link(Vec<u8>),
    /// Something that is not a symlink.
    Other,
    /// Nothing there.
    Missing,
    /// Could not be looked at.
    Unknown,
}

/// Whether the symlink at `rel` (workspace-relative) with `target`, resolved
/// the way the kernel would in the tree `lookup` describes — through other
/// links, `..` after a link taken physically — can leave the workspace.
///
/// Judged escaping as well: a resolution that needs more than 40 links, a
/// component that cannot be looked at, and a link that resolves to one of
/// its own ancestors (a directory loop, through which a chain of links can
/// climb any number of levels: `sub/up -> ..` makes
/// `sub/up/sub/up/../../..` climb out).
pub(super) fn link_leaves_workspace(
    rel: &[u8],
    target: &[u8],
    workspace: &Path,
    lookup: &mut dyn FnMut(&[u8]) -> LinkLookup,
) -> bool {
    let split = |b: &[u8]| -> Vec<Vec<u8>> {
        b.split(|c| *c == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .map(|c| c.to_vec())
            .collect()
    };
    let ws_parts = split(workspace.as_os_str().as_bytes());
    let parent: Vec<Vec<u8>> = {
        let mut p = split(rel);
        p.pop();
        p
    };
    let mut cur: Vec<Vec<u8>> = parent.clone();
    let mut queue: std::collections::VecDeque<Vec<u8>> = Default::default();
    // Start (or restart, for an absolute target) a resolution.
    let absolute =
        |t: &[u8], cur: &mut Vec<Vec<u8>>, q: &mut std::collections::VecDeque<Vec<u8>>| {
            let parts = split(t);
            if parts.len() < ws_parts.len() || parts[..ws_parts.len()] != ws_parts[..] {
                return false;
            }
            cur.clear();
            for p in parts[ws_parts.len()..].iter().rev() {
                q.push_front(p.clone());
            }
            true
        };
    if target.first() == Some(&b'/') {
        if !absolute(target, &mut cur, &mut queue) {
            return true;
        }
    } else {
        queue.extend(split(target));
    }
    let mut hops = 0;
    while let Some(c) = queue.pop_front() {
        if c == b".." {
            if cur.pop().is_none() {
                return true;
            }
            continue;
        }
        let mut cand = cur.join(&b'/');
        if !cand.is_empty() {
            cand.push(b'/');
        }
        cand.extend_from_slice(&c);
        match lookup(&cand) {
            LinkLookup::Link(t) => {
                hops += 1;
                if hops > 40 {
                    return true;
                }
                if t.first() == Some(&b'/') {
                    if !absolute(&t, &mut cur, &mut queue) {
                        return true;
                    }
                } else {
                    for p in split(&t).into_iter().rev() {
                        queue.push_front(p);
                    }
                }
            }
            LinkLookup::Other | LinkLookup::Missing => cur.push(c),
            LinkLookup::Unknown => return true,
        }
    }
    // A loop: the link lands on its own directory or one above it.
    cur.len() <= parent.len() && parent[..cur.len()] == cur[..]
}

fn push_deleted(
    changes: &mut Vec<Change>,
    lower: &Lower,
    rel: &Path,
    l: &LowerEntry,
) -> Result<(), DiffError> {
    let mut c = Change::new(rel.as_os_str().as_bytes(), ChangeKind::Deleted, l.file_type);
    c.before = l.hash.clone();
    c.content_withheld = l.withheld;
    c.mode_before = Some(l.mode);
    changes.push(c);
    if l.file_type == FileType::Dir {
        let mut budget = MAX_DELETED_EXPANSION;
        expand_lower_dir(changes, lower, rel, &mut budget)?;
    }
    Ok(())
}

/// List what a deleted lower directory held, as deletions.
fn expand_lower_dir(
    changes: &mut Vec<Change>,
    lower: &Lower,
    rel: &Path,
    budget: &mut usize,
) -> Result<(), DiffError> {
    for name in list_lower_dir(lower, rel)? {
        if *budget == 0 {
            return Ok(());
        }
        *budget -= 1;
        let child = rel.join(std::ffi::OsStr::from_bytes(&name));
        if let Some(l) = lookup_lower(lower, &child).map_err(|source| DiffError::Lower {
            path: child.display().to_string(),
            source,
        })? {
            let mut c = Change::new(
                child.as_os_str().as_bytes(),
                ChangeKind::Deleted,
                l.file_type,
            );
            c.before = l.hash.clone();
            c.mode_before = Some(l.mode);
            changes.push(c);
            if l.file_type == FileType::Dir {
                expand_lower_dir(changes, lower, &child, budget)?;
            }
        }
    }
    Ok(())
}

fn list_lower_dir(lower: &Lower, rel: &Path) -> Result<Vec<Vec<u8>>, DiffError> {
    let err = |source: io::Error| DiffError::Lower {
        path: rel.display().to_string(),
        source,
    };
    let fd = open_lower(lower, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY).map_err(err)?;
    let mut names = Vec::new();
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(|e| err(e.into()))?;
    for ent in dir.iter() {
        let ent = ent.map_err(|e| err(e.into()))?;
        let n = ent.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        names.push(n.to_vec());
    }
    names.sort();
    Ok(names)
}

/// An opaque upper directory hides the whole lower directory: the lower
/// children that the upper one does not hold were deleted.
fn expand_opaque(
    changes: &mut Vec<Change>,
    lower: &Lower,
    rel: &Path,
    upper_dir: &Path,
) -> Result<(), DiffError> {
    let mut budget = MAX_DELETED_EXPANSION;
    for name in list_lower_dir(lower, rel)? {
        let os = std::ffi::OsStr::from_bytes(&name);
        if upper_dir.join(os).symlink_metadata().is_ok() {
            continue; // listed by the walk itself
        }
        let child = rel.join(os);
        if let Some(l) = lookup_lower(lower, &child).map_err(|source| DiffError::Lower {
            path: child.display().to_string(),
            source,
        })? {
            if budget == 0 {
                break;
            }
            budget -= 1;
            push_deleted(changes, lower, &child, &l)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree<'a>(
        links: &'a [(&'a str, &'a str)],
        dirs: &'a [&'a str],
    ) -> impl FnMut(&[u8]) -> LinkLookup + 'a {
        move |p: &[u8]| {
            if let Some((_, t)) = links.iter().find(|(l, _)| l.as_bytes() == p) {
                LinkLookup::Link(t.as_bytes().to_vec())
            } else if dirs.iter().any(|d| d.as_bytes() == p) {
                LinkLookup::Other
            } else {
                LinkLookup::Missing
            }
        }
    }

    #[test]
    fn links_are_judged_by_resolution() {
        let ws = Path::new("/home/me/site");
        let esc = |rel: &str, target: &str, links: &[(&str, &str)], dirs: &[&str]| {
            link_leaves_workspace(
                rel.as_bytes(),
                target.as_bytes(),
                ws,
                &mut tree(links, dirs),
            )
        };
        // Plain links inside stay inside.
        assert!(!esc("a/l", "../b/c", &[], &["a", "b"]));
        assert!(!esc("l", "/home/me/site/b", &[], &["b"]));
        // Absolute through `..`: textually under the workspace, resolves out.
        assert!(esc("l", "/home/me/site/../../../../etc/passwd", &[], &[]));
        // A chain through a loop link inside the workspace.
        assert!(esc(
            "x",
            "sub/up/sub/up/../../../../etc/passwd",
            &[("sub/up", "..")],
            &["sub"]
        ));
        // The loop link itself is judged escaping (it lets chains climb).
        assert!(esc("sub/up", "..", &[], &["sub"]));
        assert!(esc("cur", ".", &[], &[]));
        // Through another link that points out.
        assert!(esc("a", "b/x", &[("b", "/etc")], &[]));
        assert!(!esc("a", "b/x", &[("b", "/home/me/site/d")], &["d"]));
        // Too many hops.
        assert!(esc("a", "p", &[("p", "q"), ("q", "p")], &[]));
        // A missing component followed by `..` is taken lexically.
        assert!(esc("l", "nope/../..", &[], &[]));
        assert!(!esc("d/l", "nope/../f", &[], &["d"]));
    }

    #[test]
    fn symlink_escape_detection() {
        let ws = Path::new("/home/me/site");
        assert!(!symlink_escapes(Path::new("a/link"), Path::new("../b"), ws));
        assert!(symlink_escapes(
            Path::new("a/link"),
            Path::new("../../b"),
            ws
        ));
        assert!(symlink_escapes(
            Path::new("link"),
            Path::new("/etc/passwd"),
            ws
        ));
        assert!(!symlink_escapes(
            Path::new("link"),
            Path::new("/home/me/site/x"),
            ws
        ));
        assert!(symlink_escapes(
            Path::new("link"),
            Path::new("a/../../x"),
            ws
        ));
    }
}
