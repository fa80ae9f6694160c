//! Installing the stubs: what the sandbox's init does, before pivot_root,
//! to put a stub script over every copy of a stubbed tool.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;

// ---------------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub(crate) enum StubInstallError {
    #[error("installing stubs: {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn ioerr(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StubInstallError {
    let path = path.to_path_buf();
    move |source| StubInstallError::Io { what, path, source }
}

fn bind_file(src: &Path, target: &Path, mounted_at: &Path) -> Result<(), StubInstallError> {
    bind_only(src, target)?;
    remount_ro(mounted_at)
}

/// Bind `src` over `target`, nothing more: the new mount takes the flags of
/// the mount `src` is on (a bind copies them), so a source on a read-only,
/// nosuid, nodev mount gives a read-only, nosuid, nodev bind without a
/// remount of its own.
fn bind_only(src: &Path, target: &Path) -> Result<(), StubInstallError> {
    use nix::mount::{MsFlags, mount};
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| ioerr("bind", target)(e.into()))
}

/// A mount step's error as this step's (`what` at `path`).
fn mount_err(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(crate::sandbox::mounts::MountError) -> StubInstallError {
    let err = ioerr(what, path);
    move |e| err(std::io::Error::other(e.to_string()))
}

fn remount_ro(target: &Path) -> Result<(), StubInstallError> {
    crate::sandbox::mounts::remount_ro(target).map_err(mount_err("read-only remount", target))
}

/// The directories to search, each looked up once inside the root: the
/// default PATH directories and the command's image PATH usually name the
/// same ones, and `/bin` is often `/usr/bin`. A directory that leads where
/// an earlier one did is left out (every file found in it would be found
/// again, and covered once anyway), as is one that is not there (nothing
/// can be found in it): the files found, and their order, are the same as
/// when every name is searched in every directory as given.
struct Dirs<'a> {
    open_in_root: &'a dyn Fn(&str) -> nix::Result<std::os::fd::OwnedFd>,
    /// Each directory as given, and where it leads.
    looked_up: Vec<(String, Place)>,
    /// Each small directory's names, read once (see [`Dirs::may_hold`]).
    listed: Vec<(String, Option<HashSet<OsString>>)>,
}

/// A search directory of at most this size (`st_size`: a block or two of
/// a disk file system's directory, some hundreds of entries on a tmpfs)
/// is read once instead of looked up tool by tool; a larger one (`/usr/bin`)
/// costs more to read than the tools' lookups.
const LIST_MAX_BYTES: i64 = 8192;

/// The names `dir` (found inside the root) holds, ASCII case ignored, when
/// it is small and every name is ASCII; `None` otherwise (look each tool
/// up). On a case-insensitive directory a lookup of `git` finds `GIT`, and
/// casefolding maps some non-ASCII letters to ASCII ones: such a name makes
/// the listing say nothing.
fn small_dir_names(root: &std::os::fd::OwnedFd, dir: &str) -> Option<HashSet<OsString>> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    use std::os::unix::ffi::OsStrExt;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(root, dir.trim_start_matches('/'), how).ok()?;
    if nix::sys::stat::fstat(&fd).ok()?.st_size > LIST_MAX_BYTES {
        return None;
    }
    let mut d = nix::dir::Dir::from_fd(fd).ok()?;
    let mut names = HashSet::new();
    for entry in d.iter() {
        let n = entry.ok()?.file_name().to_bytes().to_vec();
        if !n.is_ascii() {
            return None;
        }
        names.insert(std::ffi::OsStr::from_bytes(&n).to_ascii_lowercase());
    }
    Some(names)
}

/// Where a directory of the search leads inside the root.
#[derive(Clone, PartialEq)]
enum Place {
    Missing,
    At(PathBuf),
    /// There, but its place could not be read: searched, never merged.
    Unnamed,
}

impl Dirs<'_> {
    fn place_of(&mut self, dir: &str) -> Place {
        if let Some((_, place)) = self.looked_up.iter().find(|(d, _)| d == dir) {
            return place.clone();
        }
        let place = match (self.open_in_root)(dir.trim_start_matches('/')) {
            Err(_) => Place::Missing,
            Ok(fd) => std::fs::read_link(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            ))
            .map_or(Place::Unnamed, Place::At),
        };
        self.looked_up.push((dir.to_string(), place.clone()));
        place
    }

    /// False only when `dir` certainly holds no `tool`: it is small and was
    /// read, and the name is not among its entries. A directory changing
    /// while the stubs go on is no different from one changing between two
    /// lookups.
    fn may_hold(&mut self, root: &std::os::fd::OwnedFd, dir: &str, tool: &str) -> bool {
        let i = match self.listed.iter().position(|(d, _)| d == dir) {
            Some(i) => i,
            None => {
                self.listed
                    .push((dir.to_string(), small_dir_names(root, dir)));
                self.listed.len() - 1
            }
        };
        self.listed[i].1.as_ref().is_none_or(|names| {
            names.contains(std::ffi::OsStr::new(tool).to_ascii_lowercase().as_os_str())
        })
    }

    /// `dirs` in order, without those that are missing or lead where an
    /// earlier one did.
    fn distinct<'d>(&mut self, dirs: impl Iterator<Item = &'d str>) -> Vec<&'d str> {
        let mut places: Vec<PathBuf> = Vec::new();
        let mut out = Vec::new();
        for d in dirs {
            match self.place_of(d) {
                Place::Missing => {}
                Place::Unnamed => out.push(d),
                Place::At(place) => {
                    if !places.contains(&place) {
                        places.push(place);
                        out.push(d);
                    }
                }
            }
        }
        out
    }
}

/// Open this binary by its path in the current mount namespace (a bind
/// from `/proc/self/exe` itself fails: that mount belongs to the namespace
/// the helper was started in), checking it is the same file.
pub(crate) fn open_own_exe() -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    let path = std::fs::read_link("/proc/self/exe")?;
    let fd = nix::fcntl::open(
        &path,
        OFlag::O_PATH | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let a = nix::sys::stat::fstat(&fd)?;
    let b = nix::sys::stat::stat("/proc/self/exe")?;
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
        return Err(std::io::Error::other(format!(
            "{} is no longer the running binary",
            path.display()
        )));
    }
    Ok(fd)
}

/// The build's small stub program (`dryrun-stub`) beside this binary, when
/// it is there and as trusted as this binary: a regular file (not a link)
/// of this binary's owner, executable as this binary is, writable by no
/// one else. `None` otherwise: the scripts then run this binary.
pub(crate) fn open_small_stub() -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    let path = exe.parent()?.join(SMALL_STUB_NAME);
    let fd = nix::fcntl::open(
        &path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    let small = nix::sys::stat::fstat(&fd).ok()?;
    let me = nix::sys::stat::stat("/proc/self/exe").ok()?;
    let kind = libc::S_IFMT;
    let trusted = small.st_mode & kind == libc::S_IFREG
        && small.st_uid == me.st_uid
        && small.st_mode & 0o022 == 0
        && small.st_mode & 0o111 == me.st_mode & 0o111;
    trusted.then_some(fd)
}

/// The stub programs to bind into the sandbox, opened by the helper.
pub(crate) struct Interpreters<'a> {
    /// This binary.
    pub dryrun: &'a std::os::fd::OwnedFd,
    /// The build's small stub program ([`open_small_stub`]), when installed.
    pub small: Option<&'a std::os::fd::OwnedFd>,
}

/// Install the run's stubs under `root` (the future `/`): a read-only view
/// of the image as it is before any stub (the real tools, [`REAL_ROOT`]),
/// the interpreter, the table, a script per tool on PATH and over each copy
/// in the image, and the calls directory.
// Long on purpose: a fixed sequence of mount steps under the new root, in the order
// they must happen (the real tools' view before any stub covers a tool).
pub(crate) fn install_stubs(
    root: &Path,
    tools: &[String],
    table_json: &[u8],
    interpreters: Interpreters<'_>,
    run_uid: u32,
    run_gid: u32,
    image_path_dirs: &[String],
) -> Result<(), StubInstallError> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    for d in [STUB_BIN_DIR, REAL_ROOT, CALLS_DIR, "/.dryrun/bin"] {
        std::fs::create_dir_all(at(d)).map_err(ioerr("mkdir", &at(d)))?;
    }
    // The real tools: the whole image, recursively, before anything covers
    // a tool (mounts are private, so later binds do not reach this view).
    // Its own top is made read-only; the image's trees already are.
    let real_root = at(REAL_ROOT);
    {
        use nix::mount::{MsFlags, mount};
        mount(
            Some(root),
            &real_root,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| ioerr("recursive bind", &real_root)(e.into()))?;
        remount_ro(&real_root)?;
    }
    // Both interpreters: the small program hands a call it should not
    // decide (a table of another build) to this binary. The scripts name
    // the small one when it is there.
    let interpreter = match interpreters.small {
        Some(_) => SMALL_STUB_INTERPRETER,
        None => STUB_INTERPRETER,
    };
    for (fd, inside) in std::iter::once((interpreters.dryrun, STUB_INTERPRETER))
        .chain(interpreters.small.map(|s| (s, SMALL_STUB_INTERPRETER)))
    {
        let interp = at(inside);
        std::fs::write(&interp, b"").map_err(ioerr("create", &interp))?;
        bind_file(
            Path::new(&format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(fd)
            )),
            &interp,
            &interp,
        )?;
    }
    let table_path = at(STUB_TABLE);
    std::fs::write(&table_path, table_json).map_err(ioerr("write", &table_path))?;
    std::fs::set_permissions(&table_path, std::fs::Permissions::from_mode(0o644))
        .map_err(ioerr("chmod", &table_path))?;
    // The command writes its calls here (its own small tmpfs; Landlock
    // allows it), the init reads them afterwards.
    let calls = at(CALLS_DIR);
    crate::sandbox::mounts::mount_tmpfs_capped(
        &calls,
        CALLS_DIR_BYTES,
        MAX_ACTIONS as u64 + 64,
        0o1777,
    )
    .map_err(mount_err("tmpfs", &calls))?;
    let _ = nix::unistd::chown(
        &calls,
        Some(nix::unistd::Uid::from_raw(run_uid)),
        Some(nix::unistd::Gid::from_raw(run_gid)),
    );

    let root_fd = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| ioerr("open", root)(e.into()))?;
    // Resolved inside the new root: an absolute symlink in the image
    // (/bin -> /usr/bin) must not lead to the host's tree.
    let open_in_root = |rel: &str| {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        nix::fcntl::openat2(&root_fd, rel, how)
    };
    // The files behind the tools that can never be stubbed (the sandbox's
    // shell among them): a tool that is only another name for one of them
    // (`/usr/bin/rbash -> bash`) must not cover it.
    let mut dirs = Dirs {
        open_in_root: &open_in_root,
        looked_up: Vec::new(),
        listed: Vec::new(),
    };
    let default_dirs = dirs.distinct(PATH_DIRS.iter().copied());
    let mut protected: Vec<(libc::dev_t, libc::ino_t)> = Vec::new();
    for t in NEVER_STUBBED {
        for d in &default_dirs {
            if !dirs.may_hold(&root_fd, d, t) {
                continue;
            }
            let rel = format!("{}/{t}", d.trim_start_matches('/'));
            if let Some(st) = open_in_root(&rel)
                .ok()
                .and_then(|fd| nix::sys::stat::fstat(&fd).ok())
            {
                protected.push((st.st_dev, st.st_ino));
            }
        }
    }
    // Every script is written, then their directory becomes a read-only,
    // nosuid, nodev mount of its own: each bind of a script over a tool
    // below takes those flags from it, with no remount per bind.
    for tool in tools {
        let script = at(&format!("{STUB_BIN_DIR}/{tool}"));
        std::fs::write(
            &script,
            format!("{}{tool}\n", stub_script_prefix(interpreter)),
        )
        .map_err(ioerr("write", &script))?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(ioerr("chmod", &script))?;
    }
    let bin_dir = at(STUB_BIN_DIR);
    crate::sandbox::mounts::Sealed::seal(&bin_dir).map_err(mount_err("seal", &bin_dir))?;
    for tool in tools {
        let script = at(&format!("{STUB_BIN_DIR}/{tool}"));
        let mut seen: Vec<PathBuf> = Vec::new();
        let search = dirs.distinct(
            PATH_DIRS
                .iter()
                .copied()
                .chain(extra_dirs(tool).iter().copied())
                .chain(image_path_dirs.iter().map(String::as_str)),
        );
        for dir in search {
            if !dirs.may_hold(&root_fd, dir, tool) {
                continue;
            }
            let rel = format!("{}/{tool}", dir.trim_start_matches('/'));
            let Ok(fd) = open_in_root(&rel) else {
                continue;
            };
            let Ok(st) = nix::sys::stat::fstat(&fd) else {
                continue;
            };
            if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mode & 0o111 == 0 {
                continue;
            }
            let fd_path = PathBuf::from(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            ));
            let Ok(resolved) = std::fs::read_link(&fd_path) else {
                continue;
            };
            if seen.contains(&resolved) {
                continue;
            }
            // Mounted through the handle (what was checked); read-only,
            // nosuid and nodev from the scripts' sealed directory.
            if !resolved.starts_with(root) || protected.contains(&(st.st_dev, st.st_ino)) {
                continue;
            }
            bind_only(&script, &fd_path)?;
            seen.push(resolved);
        }
    }
    Ok(())
}

/// The directories of the command's `PATH` (the envelope's, or the fixed
/// base's) that come from the image: absolute, outside the workspace and
/// `/tmp`. Copies of a stubbed tool there are covered too.
pub(crate) fn image_path_dirs(path: &str, workspace: &Path) -> Vec<String> {
    path.split(':')
        .filter(|d| {
            let p = Path::new(d);
            p.is_absolute()
                && !p.starts_with(workspace)
                && !p.starts_with("/tmp")
                && !p.starts_with(STUB_ROOT)
                && !d.split('/').any(|c| c == "..")
        })
        .map(str::to_string)
        .collect()
}

/// The command's `PATH` with the stubs' directory in it: just before the
/// first image directory (`image`, from [`image_path_dirs`]), so the
/// command's own directories (a wrapper in `./bin`, `node_modules/.bin`)
/// come first as they do live, and the stub's passthrough can look for the
/// real tool after its own place.
pub(crate) fn path_with_stubs(path: &str, image: &[String]) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut placed = false;
    for d in path.split(':') {
        if !placed && image.iter().any(|i| i == d) {
            out.push(STUB_BIN_DIR);
            placed = true;
        }
        out.push(d);
    }
    if !placed {
        out.push(STUB_BIN_DIR);
    }
    out.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_fd(p: &Path) -> std::os::fd::OwnedFd {
        nix::fcntl::open(
            p,
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap()
    }

    /// A small directory is read once and answers for the tools it lacks
    /// (ASCII case ignored, as a case-insensitive directory's lookup
    /// would); one with a name that is not ASCII, or a large one, answers
    /// for nothing.
    #[test]
    fn a_small_directory_rules_out_the_tools_it_lacks() {
        let t = tempfile::tempdir().unwrap();
        let bin = t.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("Git"), "").unwrap();
        std::fs::write(bin.join("aws"), "").unwrap();
        let odd = t.path().join("odd");
        std::fs::create_dir(&odd).unwrap();
        std::fs::write(odd.join("caf\u{e9}"), "").unwrap();
        let big = t.path().join("big");
        std::fs::create_dir(&big).unwrap();
        for i in 0..2000 {
            std::fs::write(big.join(format!("tool-with-a-long-name-{i}")), "").unwrap();
        }
        let root = root_fd(t.path());
        let none = |_: &str| Err(nix::errno::Errno::ENOENT);
        let mut dirs = Dirs {
            open_in_root: &none,
            looked_up: Vec::new(),
            listed: Vec::new(),
        };
        assert!(dirs.may_hold(&root, "/bin", "git"));
        assert!(dirs.may_hold(&root, "/bin", "aws"));
        assert!(!dirs.may_hold(&root, "/bin", "curl"));
        assert!(dirs.may_hold(&root, "/odd", "curl"));
        assert!(dirs.may_hold(&root, "/big", "curl"));
        // Not there at all: looked up (and found missing) as before.
        assert!(dirs.may_hold(&root, "/missing", "curl"));
        assert_eq!(dirs.listed.len(), 4);
    }
}
