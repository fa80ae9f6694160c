//! Every step of the view in the sandbox's init, in one place, carried
//! out as the engine planned it (`sandbox::view::ViewSpec`): P1 opens the
//! throwaway layers' real trees, P2 makes their upper layers, P3 binds the
//! `PATH` directories and mounts the layers, P4 covers the masked paths
//! and serves the filtered files (and watches the masks), after P8 the
//! masks the command opened are named, and P9 summarises what it wrote
//! outside the workspace. Nothing here decides what to show: the plan did.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::stat::Mode;

use super::super::mounts::{self, MountError};
use super::super::spec::SandboxSpec;
use super::super::view::filter::{filter_credentials, git_include_paths};
use super::super::walk::outside::{OutsideLayer, summarise_outside_writes};
use super::super::wire::RehearsalReport;
use super::error::{FsError, HelperError};
use super::init::RunIds;
use super::view_home;
use super::view_listing::{Listings, backup_names};
use crate::model::{Hidden, HiddenKind};

/// The largest file served filtered; a larger one is masked instead.
const FILTER_MAX_BYTES: u64 = 256 * 1024;
/// How deep git includes are followed, and how many files they add.
const GIT_INCLUDE_DEPTH: usize = 4;
const GIT_INCLUDES_MAX: usize = 16;
/// The filter rule of the user's git configuration.
const GIT_FILTER_RULE: &str = "filter:gitconfig";
/// Entries of masked directories whose link counts are checked per run.
const LINK_SCAN_BUDGET: usize = 4096;
/// The view's own scratch tmpfs (empty files and directories for the
/// masks, the filtered copies).
const VIEW_SCRATCH_BYTES: u64 = 4 << 20;

/// Where H attaches the `i`-th throwaway layer's real tree (root plan).
pub(super) fn view_stage(i: usize) -> PathBuf {
    PathBuf::from(format!("/tmp/dryrun-view-{i}"))
}

pub(super) fn proc_fd(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn in_root(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

/// One throwaway layer: the host tree it covers, its real tree (the
/// lower layer) and its upper and work directories.
struct Layer {
    target: PathBuf,
    lower: OwnedFd,
    meta: std::fs::Metadata,
    upper: PathBuf,
    work: PathBuf,
}

/// The view as the init carries it out.
pub(super) struct ViewSetup {
    layers: Vec<Layer>,
    /// The outside layers' tmpfs (its index-named directories hold each
    /// layer's upper), for the walk after the pivot.
    outside: Option<OwnedFd>,
    made: Vec<PathBuf>,
    watches: Option<Inotify>,
    watched: Vec<(WatchDescriptor, PathBuf, String)>,
    stripped: Vec<String>,
    shown: Vec<String>,
    /// Masked and filtered files inside a throwaway layer, as the host's
    /// tree held them when the masks went on: (layer, path in the layer,
    /// inode, link count, path, rule). A host rename would leave the
    /// mask on the old name ([`ViewSetup::moved_mask`]).
    layered_files: Vec<(usize, PathBuf, u64, u64, PathBuf, String)>,
    /// The trees planned as throwaway layers that the kernel refused.
    left_out: Vec<PathBuf>,
}

fn view_err(op: &'static str) -> impl Fn(MountError) -> HelperError {
    move |e| HelperError::View {
        op,
        source: e.into(),
    }
}

fn masks_mount(op: &'static str) -> impl Fn(MountError) -> HelperError {
    move |e| HelperError::Masks {
        op,
        source: e.into(),
    }
}

fn mask_err(op: &'static str, path: &Path) -> impl Fn(std::io::Error) -> HelperError {
    let path = path.to_path_buf();
    move |e| HelperError::Masks {
        op,
        source: FsError::io(&path)(e),
    }
}

impl ViewSetup {
    /// P1: the layers' real trees, before P2 covers `/tmp`: H's idmapped
    /// clones (root plan; a layer H left out is not there) or the trees,
    /// reached without a symlink and checked to be what the plan saw.
    pub(super) fn open_lowers(spec: &SandboxSpec, ids: &RunIds) -> Result<Self, HelperError> {
        let mut v = ViewSetup {
            layers: Vec::new(),
            outside: None,
            made: Vec::new(),
            watches: None,
            watched: Vec::new(),
            stripped: Vec::new(),
            shown: Vec::new(),
            layered_files: Vec::new(),
            left_out: Vec::new(),
        };
        for (i, l) in spec.view.layers.iter().enumerate() {
            let opened = if ids.shifted {
                let stage = view_stage(i);
                match open(
                    &stage,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd) => Some(fd),
                    Err(nix::errno::Errno::ENOENT) => None,
                    Err(e) => {
                        return Err(HelperError::OpenView {
                            op: "open staged layer",
                            path: stage,
                            source: e.into(),
                        });
                    }
                }
            } else {
                match mounts::open_dir_no_symlinks(&l.path, l.identity) {
                    Err(_) if view_home::beneath_home(&spec.view, &l.path) => None,
                    opened => opened.map_err(|source| HelperError::OpenView {
                        op: "open layer",
                        path: l.path.clone(),
                        source: source.into(),
                    })?,
                }
            };
            let Some(lower) = opened else {
                v.stripped.push(view_home::not_opened(&spec.view, &l.path));
                continue;
            };
            let meta =
                std::fs::metadata(proc_fd(&lower)).map_err(|source| HelperError::OpenView {
                    op: "stat layer",
                    path: l.path.clone(),
                    source,
                })?;
            v.layers.push(Layer {
                target: l.path.clone(),
                lower,
                meta,
                upper: PathBuf::new(),
                work: PathBuf::new(),
            });
        }
        Ok(v)
    }

    /// The scratch trees P4 makes fresh, size-capped and writable as the
    /// host's are: `/tmp` when it is not a throwaway layer (the host has
    /// none, or its tree was refused), `/var/tmp` when its tree was refused.
    pub(super) fn fresh_scratch(&self) -> Vec<&'static str> {
        let covers = |tree: &str| self.layers.iter().any(|l| l.target == Path::new(tree));
        let left_out = |tree: &str| self.left_out.iter().any(|t| t == Path::new(tree));
        let mut fresh = Vec::new();
        if !covers("/tmp") {
            fresh.push("/tmp");
        }
        if left_out("/var/tmp") {
            fresh.push("/var/tmp");
        }
        fresh
    }

    /// Where the command may write outside the workspace: the layers, the fresh scratch trees.
    pub(super) fn writable(&self) -> Vec<PathBuf> {
        let layers = self.layers.iter().map(|l| l.target.clone());
        layers
            .chain(self.fresh_scratch().into_iter().map(PathBuf::from))
            .collect()
    }

    /// P2: one size- and inode-capped tmpfs for every layer's upper and
    /// work directories; each upper root takes its real tree's mode and
    /// owner, so the merged root looks as the real one does.
    pub(super) fn mount_uppers(
        &mut self,
        base: &Path,
        bytes: u64,
        inodes: u64,
    ) -> Result<(), HelperError> {
        if self.layers.is_empty() {
            return Ok(());
        }
        let step = |e: MountError| HelperError::UpperLayer {
            op: "outside layers",
            source: e.into(),
        };
        let dir = base.join("outside");
        mounts::mkdir_p(&dir, 0o755).map_err(step)?;
        mounts::mount_tmpfs_capped(&dir, bytes, inodes, 0o755).map_err(step)?;
        for (i, l) in self.layers.iter_mut().enumerate() {
            let d = dir.join(i.to_string());
            l.upper = d.join("data");
            l.work = d.join("work");
            mounts::mkdir_p(&l.work, 0o700).map_err(step)?;
            mounts::mkdir_p(&l.upper, 0o755).map_err(step)?;
            // Only possible when the owner is mapped; else the root stays ours.
            let _ = nix::unistd::chown(
                &l.upper,
                Some(nix::unistd::Uid::from_raw(l.meta.uid())),
                Some(nix::unistd::Gid::from_raw(l.meta.gid())),
            );
            mounts::mkdir_p(&l.upper, l.meta.mode() & 0o7777).map_err(step)?;
        }
        let fd = open(
            &dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| HelperError::UpperLayer {
            op: "outside layers",
            source: FsError::io(&dir)(e.into()),
        })?;
        self.outside = Some(fd);
        Ok(())
    }

    /// P3: the `PATH` directories bound read-only, the throwaway layers
    /// (parents first), and the `HOME` the plan asks for.
    pub(super) fn mount_view(
        &mut self,
        spec: &SandboxSpec,
        root: &Path,
        ids: &RunIds,
    ) -> Result<(), HelperError> {
        let mut bound = 0;
        for b in &spec.view.path_binds {
            match mounts::bind_checked_dir_ro(root, &b.path, b.identity) {
                Ok(Ok(())) => bound += 1,
                Ok(Err(named)) => self.stripped.extend(named),
                Err(e) => self.stripped.push(format!(
                    "hidden:{} (could not be bound: {e})",
                    b.path.display()
                )),
            }
        }
        self.stripped.extend(spec.view.notes.iter().cloned());
        for h in &spec.view.path_hidden {
            self.stripped
                .push(format!("hidden:{} ({})", h.path.display(), h.rule));
        }
        let mut kept = Vec::with_capacity(self.layers.len());
        for l in std::mem::take(&mut self.layers) {
            let point = view_home::layer_mount_point(&spec.view, root, &l.target);
            let target = match point.map_err(|e| {
                view_err("layer mount point")(MountError::from_io(&in_root(root, &l.target), e))
            })? {
                Ok(fd) => fd,
                Err(named) => {
                    self.stripped.push(named);
                    continue;
                }
            };
            let ro = view_home::read_only(&spec.view, &l.target);
            // The kernel refuses some real trees as a lower layer (one with
            // a mount of another layer's tree: a home bound under /tmp; in
            // the caller's namespace, a home holding mounts). The run goes on
            // without it, named: /tmp and /var/tmp are then fresh (P4), a mount
            // beneath the home the directory under it, another tree an empty
            // directory the command cannot write.
            let lower = proc_fd(&l.lower);
            match mounts::mount_overlay(&proc_fd(&target), &lower, &l.upper, &l.work, ro) {
                Ok(()) => kept.push(l),
                Err(e) => {
                    self.left_out.push(l.target.clone());
                    let instead = view_home::instead_of(&spec.view, &l.target);
                    self.stripped.push(format!("hidden:{} (the host's tree could not be layered: {e}; the command sees {instead} instead)", l.target.display()));
                }
            }
        }
        self.layers = kept;
        if let Some(h) = &spec.view.make_home
            && super::view_home::make_dir_in_root(root, h, ids.uid, ids.gid)
                .map_err(|e| view_err("home")(MountError::from_io(h, e.into())))?
        {
            self.made.push(h.clone());
        }
        let layers: Vec<String> = self
            .layers
            .iter()
            .map(|l| l.target.display().to_string())
            .collect();
        self.shown.push(format!(
            "view: {} as throwaway layers over the host's (writes listed in outside_writes, then dropped); {bound} PATH director{} bound read-only",
            if layers.is_empty() { "nothing".into() } else { layers.join(", ") },
            if bound == 1 { "y" } else { "ies" }
        ));
        Ok(())
    }

    /// P4, over everything the command will see (the workspace too): the
    /// masks (an empty read-only file or directory over each masked path
    /// the view holds, resolved inside the new root) and the filtered
    /// copies, then a watch on each mask. A masked or filtered file with
    /// another name (a hard link) fails the run: its content would show
    /// under that name.
    pub(super) fn cover_secrets(
        &mut self,
        spec: &SandboxSpec,
        root: &Path,
        scratch: &Path,
    ) -> Result<(), HelperError> {
        let root_fd = open(
            root,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| mask_err("open root", root)(e.into()))?;
        let mut budget = LINK_SCAN_BUDGET;
        let mut targets: Vec<Target> = Vec::new();
        let mut listed = Listings::default();
        for m in &spec.view.masks {
            if !listed.may_exist(&root_fd, &m.path) {
                continue;
            }
            let Some(fd) = resolve(&root_fd, &m.path, OFlag::O_PATH) else {
                continue;
            };
            let st = nix::sys::stat::fstat(&fd).map_err(|e| mask_err("stat", &m.path)(e.into()))?;
            if targets.iter().any(|t| t.id == (st.st_dev, st.st_ino)) {
                continue;
            }
            let dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            // dryrun's own state holds no secret of the user's that a link
            // could carry out, and grows with every run: not scanned.
            if dir && !m.is_state_dir() {
                if let Some((rel, links)) = linked_file_in(&proc_fd(&fd), &mut budget) {
                    return Err(linked(&m.path.join(rel), &m.rule, links));
                }
            } else if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink > 1 {
                return Err(linked(&m.path, &m.rule, st.st_nlink as u64));
            }
            targets.push(Target {
                path: m.path.clone(),
                rule: m.rule.clone(),
                fd,
                id: (st.st_dev, st.st_ino),
                content: if dir { Content::Dir } else { Content::Empty },
            });
        }
        if budget == 0 {
            self.stripped.push(format!(
                "masked directories: link counts checked for their first {LINK_SCAN_BUDGET} entries only"
            ));
        }
        // Backups an editor left beside a masked file hold what it holds.
        let masked_files: Vec<(PathBuf, String)> = targets
            .iter()
            .filter(|t| matches!(t.content, Content::Empty))
            .map(|t| (t.path.clone(), t.rule.clone()))
            .collect();
        for (path, rule) in &masked_files {
            mask_backups(&root_fd, &mut listed, path, rule, &mut targets)?;
        }
        // The filtered files, and the files a filtered git configuration
        // includes (git reads them as it reads the file itself).
        let mut queue: std::collections::VecDeque<(super::super::view::ViewPath, usize)> =
            spec.view.filters.iter().map(|f| (f.clone(), 0)).collect();
        let mut includes_left = GIT_INCLUDES_MAX;
        while let Some((f, depth)) = queue.pop_front() {
            if spec.view.mask_of(&f.path).is_some() {
                continue;
            }
            let copy = if listed.may_exist(&root_fd, &f.path) {
                filtered_copy(&root_fd, &f)?
            } else {
                FilteredCopy::absent()
            };
            if copy.exists {
                mask_backups(&root_fd, &mut listed, &f.path, &f.rule, &mut targets)?;
            }
            if let Some(t) = copy.target
                && !targets.iter().any(|x| x.id == t.id)
            {
                targets.push(t);
            }
            if depth >= GIT_INCLUDE_DEPTH {
                continue;
            }
            for inc in copy.includes {
                let path = if let Some(rest) = inc.strip_prefix("~/") {
                    match &spec.view.home {
                        Some(h) => h.join(rest),
                        None => continue,
                    }
                } else if Path::new(&inc).is_absolute() {
                    PathBuf::from(inc)
                } else {
                    f.path.parent().unwrap_or(Path::new("/")).join(inc)
                };
                if includes_left == 0 {
                    break;
                }
                includes_left -= 1;
                queue.push_back((
                    super::super::view::ViewPath {
                        rule: f.rule.clone(),
                        path,
                    },
                    depth + 1,
                ));
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        for t in targets
            .iter()
            .filter(|t| !matches!(t.content, Content::Dir))
        {
            if let Some(found) = self.in_layer(&t.path) {
                self.layered_files.push((
                    found.0,
                    found.1,
                    found.2,
                    found.3,
                    t.path.clone(),
                    t.rule.clone(),
                ));
            }
        }
        let dir = scratch.join("view");
        mounts::mkdir_p(&dir, 0o755).map_err(masks_mount("scratch"))?;
        mounts::mount_tmpfs(
            &dir,
            VIEW_SCRATCH_BYTES,
            0o755,
            nix::mount::MsFlags::empty(),
        )
        .map_err(masks_mount("scratch"))?;
        for (i, t) in targets.iter().enumerate() {
            t.write(&dir.join(i.to_string()))?;
        }
        mounts::Sealed::seal(&dir).map_err(masks_mount("seal"))?;
        let watches = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).ok();
        for (i, t) in targets.iter().enumerate() {
            let src = dir.join(i.to_string());
            mounts::bind_onto(&src, &proc_fd(&t.fd)).map_err(masks_mount("cover"))?;
            match &t.content {
                Content::Filtered { removed, .. } => self.stripped.push(format!(
                    "filtered:{} ({removed} line{} with credentials removed)",
                    t.path.display(),
                    if *removed == 1 { "" } else { "s" }
                )),
                _ => {
                    self.stripped.push(format!("masked:{}", t.path.display()));
                    if let Some(w) = watches
                        .as_ref()
                        .and_then(|n| n.add_watch(&src, AddWatchFlags::IN_OPEN).ok())
                    {
                        self.watched.push((w, t.path.clone(), t.rule.clone()));
                    }
                }
            }
        }
        self.watches = watches;
        Ok(())
    }

    /// The file at `path` in the host's tree of the throwaway layer that
    /// shows it: (layer, path in the layer, inode, link count).
    fn in_layer(&self, path: &Path) -> Option<(usize, PathBuf, u64, u64)> {
        let (i, l) = self
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| path.starts_with(&l.target))
            .max_by_key(|(_, l)| l.target.components().count())?;
        let rel = path.strip_prefix(&l.target).ok()?.to_path_buf();
        let st = lower_stat(&l.lower, &rel)?;
        Some((i, rel, st.st_ino, st.st_nlink))
    }

    /// After the command: a masked or filtered file of a throwaway layer
    /// that the host renamed, removed or linked while the run went on
    /// (its mask stayed on the old name; the new one was not masked).
    pub(super) fn moved_mask(&self) -> Option<(PathBuf, String)> {
        self.layered_files
            .iter()
            .find(|(layer, rel, ino, links, _, _)| {
                lower_stat(&self.layers[*layer].lower, rel)
                    .is_none_or(|st| st.st_ino != *ino || st.st_nlink != *links)
            })
            .map(|(_, _, _, _, path, rule)| (path.clone(), rule.clone()))
    }

    /// What the record says of the view (before P8).
    pub(super) fn describe(&self, report: &mut RehearsalReport) {
        report.stripped.extend(self.stripped.iter().cloned());
        report.enforcement.extend(self.shown.iter().cloned());
    }

    /// After P8: the masks the command opened (read or listed).
    pub(super) fn collect_opened_masks(&self, spec: &SandboxSpec, report: &mut RehearsalReport) {
        let Some(n) = &self.watches else {
            return;
        };
        let mut seen: Vec<&WatchDescriptor> = Vec::new();
        while let Ok(events) = n.read_events() {
            if events.is_empty() {
                break;
            }
            for e in events {
                if let Some((wd, _, _)) = self.watched.iter().find(|(w, _, _)| *w == e.wd)
                    && !seen.contains(&wd)
                {
                    seen.push(wd);
                }
            }
        }
        for (wd, path, rule) in &self.watched {
            if seen.contains(&wd) {
                report.hidden.push(Hidden {
                    kind: HiddenKind::Masked,
                    path: path.display().to_string(),
                    rule: rule.clone(),
                    reason: spec.view.reason(rule),
                    seen: "opened by the command".into(),
                });
            }
        }
    }

    /// P9: what the command wrote outside the workspace, by directory.
    pub(super) fn walk_outside(&self, spec: &SandboxSpec, report: &mut RehearsalReport) {
        let Some(outside) = &self.outside else {
            return;
        };
        let base = proc_fd(outside);
        let layers: Vec<OutsideLayer> = self
            .layers
            .iter()
            .map(|l| OutsideLayer {
                target: &l.target,
                // Its own upper, wherever it was in the plan (P3 may have
                // left layers before it out).
                upper: base
                    .join(
                        l.upper
                            .parent()
                            .and_then(|d| d.file_name())
                            .unwrap_or_default(),
                    )
                    .join("data"),
                lower: &l.lower,
            })
            .collect();
        let caches = super::super::view::cache_rules(spec.view.home.as_deref());
        let (rows, unlisted) = summarise_outside_writes(&layers, &caches, &self.made);
        report.outside_writes = rows;
        report.outside_writes_unlisted = unlisted;
    }
}

/// What covers a masked or filtered path.
enum Content {
    Empty,
    Dir,
    Filtered {
        bytes: Vec<u8>,
        removed: usize,
        meta: nix::sys::stat::FileStat,
    },
}

/// A path to cover, resolved inside the new root.
struct Target {
    path: PathBuf,
    rule: String,
    fd: OwnedFd,
    id: (u64, u64),
    content: Content,
}

impl Target {
    /// Its cover, in the view's scratch directory (sealed afterwards).
    fn write(&self, at: &Path) -> Result<(), HelperError> {
        let err = mask_err("write cover", at);
        match &self.content {
            Content::Dir => {
                std::fs::create_dir(at).map_err(&err)?;
                set_mode(at, 0o555).map_err(&err)
            }
            Content::Empty => {
                std::fs::write(at, b"").map_err(&err)?;
                set_mode(at, 0o444).map_err(&err)
            }
            Content::Filtered { bytes, meta, .. } => {
                std::fs::write(at, bytes).map_err(&err)?;
                let _ = nix::unistd::chown(
                    at,
                    Some(nix::unistd::Uid::from_raw(meta.st_uid)),
                    Some(nix::unistd::Gid::from_raw(meta.st_gid)),
                );
                set_mode(at, meta.st_mode & 0o777).map_err(&err)
            }
        }
    }
}

fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// `rel` in a host tree opened as `dir`, not following links.
fn lower_stat(dir: &OwnedFd, rel: &Path) -> Option<nix::sys::stat::FileStat> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    let fd = nix::fcntl::openat2(dir, rel, how).ok()?;
    nix::sys::stat::fstat(&fd).ok()
}

/// `path` opened inside the new root (`RESOLVE_IN_ROOT`: a symlink, a
/// dotfile manager's, resolves within the view, never to the host), with
/// `flags`; `None` when the view holds nothing there.
fn resolve(root: &OwnedFd, path: &Path, flags: OFlag) -> Option<OwnedFd> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(root, rel, how).ok()
}

/// What the view found at a filtered path.
struct FilteredCopy {
    /// The path holds a regular file.
    exists: bool,
    /// Its filtered copy, when it has credential lines (one without any is
    /// served as it is).
    target: Option<Target>,
    /// For a git configuration, the files it includes, as written.
    includes: Vec<String>,
}

impl FilteredCopy {
    /// Nothing at the path.
    fn absent() -> Self {
        FilteredCopy {
            exists: false,
            target: None,
            includes: Vec::new(),
        }
    }
}

/// A filtered copy of `f`, when the view holds it as a regular file.
fn filtered_copy(
    root: &OwnedFd,
    f: &super::super::view::ViewPath,
) -> Result<FilteredCopy, HelperError> {
    use std::io::Read;
    let mut found = FilteredCopy::absent();
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let Some(fd) = resolve(root, &f.path, flags) else {
        return Ok(found);
    };
    let st = nix::sys::stat::fstat(&fd).map_err(|e| mask_err("stat", &f.path)(e.into()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(found);
    }
    found.exists = true;
    if st.st_nlink > 1 {
        return Err(linked(&f.path, &f.rule, st.st_nlink as u64));
    }
    let mut bytes = Vec::new();
    let mut file = std::fs::File::from(fd);
    (&mut file)
        .take(FILTER_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(mask_err("read", &f.path))?;
    let content = if bytes.len() as u64 > FILTER_MAX_BYTES {
        // Too large to go through line by line: masked whole.
        Content::Empty
    } else {
        if f.rule == GIT_FILTER_RULE {
            found.includes = git_include_paths(&bytes);
        }
        let (out, removed) = filter_credentials(&bytes);
        if removed == 0 {
            return Ok(found);
        }
        Content::Filtered {
            bytes: out,
            removed,
            meta: st,
        }
    };
    found.target = Some(Target {
        path: f.path.clone(),
        rule: f.rule.clone(),
        fd: OwnedFd::from(file),
        id: (st.st_dev, st.st_ino),
        content,
    });
    Ok(found)
}

/// Masks the backups of `path` (a masked or filtered file) the view holds,
/// under the same rule.
fn mask_backups(
    root: &OwnedFd,
    listed: &mut Listings,
    path: &Path,
    rule: &str,
    targets: &mut Vec<Target>,
) -> Result<(), HelperError> {
    for b in backup_names(path) {
        if !listed.may_exist(root, &b) {
            continue;
        }
        let Some(fd) = resolve(root, &b, OFlag::O_PATH) else {
            continue;
        };
        let st = nix::sys::stat::fstat(&fd).map_err(|e| mask_err("stat", &b)(e.into()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG
            || targets.iter().any(|t| t.id == (st.st_dev, st.st_ino))
        {
            continue;
        }
        if st.st_nlink > 1 {
            return Err(linked(&b, rule, st.st_nlink as u64));
        }
        targets.push(Target {
            path: b,
            rule: rule.into(),
            fd,
            id: (st.st_dev, st.st_ino),
            content: Content::Empty,
        });
    }
    Ok(())
}

fn linked(path: &Path, rule: &str, links: u64) -> HelperError {
    HelperError::MaskLinked {
        path: path.to_path_buf(),
        rule: rule.into(),
        links,
    }
}

/// A regular file with more than one name beneath `dir` (its path
/// relative to `dir` and its link count), looking at no more than
/// `budget` entries (spent as it goes).
fn linked_file_in(dir: &Path, budget: &mut usize) -> Option<(PathBuf, u64)> {
    let rd = std::fs::read_dir(dir).ok()?;
    for e in rd.flatten() {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if m.is_file() && m.nlink() > 1 {
            return Some((PathBuf::from(e.file_name()), m.nlink()));
        }
        if m.is_dir()
            && let Some((rel, n)) = linked_file_in(&e.path(), budget)
        {
            return Some((Path::new(&e.file_name()).join(rel), n));
        }
    }
    None
}
