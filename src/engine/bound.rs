//! The workspace bound: which directories may be a workspace at all, and
//! what no run may touch whatever its intent says. One decision, made in
//! [`super::Engine::prepare`]'s path for every door (CLI, daemon API, MCP,
//! hooks) and for replays and reruns alike.
//!
//! A workspace's change set goes live with its owner's rights. A workspace
//! that is a home directory (or holds one, or is `/`) puts every file that
//! runs code later for that account within a run's reach: shell start-up
//! files, `~/.ssh/authorized_keys`, `~/.config/systemd/user/`, `~/.local/bin`.
//! A list of such files is always one entry short, so the directory itself
//! is refused unless the *system* policy allows it
//! (`workspace_bound: {allow_homes: true}`; a workspace policy cannot).
//!
//! Homes are compared by what they are on disk, not by how a path spells
//! them: both sides resolved (symlinks, `..`, trailing slashes), and both
//! placed on their filesystem through the mount table, so a bind mount of
//! a home (or of a directory above one) anywhere at or below the workspace
//! counts as that home. Which homes count, and what "contains" means for
//! a home that does not exist, is in `docs/protected-paths.md`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::model::mount_table::{MOUNTINFO, MountLine, MountTable};
use crate::sandbox::view::Resolver;

/// Paths (intent-glob semantics: relative to the workspace root) that
/// every run is forbidden to touch, through every door, whatever its
/// envelope says: dryrun's own configuration in the workspace and the
/// agent hosts' settings. A run that rewrote them would switch its own
/// guard off (a `hook:` intent that allows everything, a host settings
/// file without the hook, an MCP server of the agent's choosing).
pub const BUILTIN_FORBIDDEN: &[&str] = &[
    "dryrun.yaml",
    ".dryrun/",
    ".claude/",
    ".codex/",
    ".mcp.json",
];

/// The password database read for every account's home.
const PASSWD: &str = "/etc/passwd";
/// The mount table of this process's mount namespace.
/// The largest password database or mount table read.
const TABLE_MAX: u64 = 16 << 20;

/// Why a directory cannot be a workspace.
#[derive(Debug, thiserror::Error)]
pub enum BoundError {
    #[error(
        "{} is the root directory: every home directory and every file that runs code later is inside it; use a project directory",
        shown(workspace)
    )]
    Root { workspace: PathBuf },
    #[error(
        "{} is the home directory of {account} ({}){}: a run there could write files that run code later for that account (shell start-up files, ~/.ssh/authorized_keys, ~/.config/autostart, ~/.local/bin, ...). Use a project directory inside it, or, if a home must be a workspace, allow it in a system policy file ({ALLOW_HINT}); a workspace's own policy cannot",
        shown(workspace),
        shown(home),
        via(exposed, workspace)
    )]
    IsHome {
        workspace: PathBuf,
        account: String,
        home: PathBuf,
        exposed: PathBuf,
    },
    #[error(
        "{} contains the home directory of {account} ({}{}): a run there could write files that run code later for that account (shell start-up files, ~/.ssh/authorized_keys, ~/.local/bin, ...). Use a project directory that holds no home, or, if this is intended, allow it in a system policy file ({ALLOW_HINT}); a workspace's own policy cannot",
        shown(workspace),
        shown(home),
        via(exposed, home)
    )]
    ContainsHome {
        workspace: PathBuf,
        account: String,
        home: PathBuf,
        exposed: PathBuf,
    },
    /// The check itself could not be made: fail closed.
    #[error(
        "cannot tell whether {} is or holds a home directory: {what} {path}: {message}; nothing ran",
        shown(workspace)
    )]
    Unreadable {
        workspace: PathBuf,
        what: &'static str,
        path: &'static str,
        message: String,
    },
}

/// How a system policy allows homes as workspaces.
const ALLOW_HINT: &str = "/etc/dryrun/policy.d/*.yaml: `workspace_bound: {allow_homes: true}`";

fn shown(p: &Path) -> String {
    crate::workspace::paths::escape_for_humans(p.as_os_str().as_bytes())
}

/// ", reached as EXPOSED" unless that is `shown_as` itself.
fn via(exposed: &Path, shown_as: &Path) -> String {
    if exposed == shown_as {
        String::new()
    } else {
        format!(", reached as {}", shown(exposed))
    }
}

/// One account's home directory, as the password database (or the
/// caller's `$HOME`) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub account: String,
    pub path: PathBuf,
}

/// Every home directory the bound compares a workspace with: each entry
/// of `/etc/passwd`, the homes of `uids` as the system resolves them
/// (accounts from other sources, such as a directory service), and
/// `extra` (the caller's `$HOME`, where the engine knows it). A home that
/// is `/`, empty or relative is no home: many service accounts have `/`,
/// and `/` is never a workspace anyway.
fn known_homes(uids: &[u32], extra: &[Home]) -> Result<Vec<Home>, String> {
    let text = read_capped(Path::new(PASSWD))?;
    let mut homes: Vec<Home> = parse_passwd(&text);
    for uid in uids {
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*uid)) {
            homes.push(Home {
                account: u.name,
                path: u.dir,
            });
        }
    }
    homes.extend(extra.iter().cloned());
    homes.retain(|h| h.path.is_absolute() && normalize(&h.path) != Path::new("/"));
    homes.sort_by(|a, b| a.path.cmp(&b.path).then(a.account.cmp(&b.account)));
    homes.dedup_by(|a, b| a.path == b.path);
    Ok(homes)
}

fn parse_passwd(text: &[u8]) -> Vec<Home> {
    text.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .filter_map(|l| {
            let f: Vec<&[u8]> = l.split(|b| *b == b':').collect();
            (f.len() >= 7).then(|| Home {
                account: String::from_utf8_lossy(f[0]).into_owned(),
                path: PathBuf::from(OsStr::from_bytes(f[5])),
            })
        })
        .collect()
}

fn read_capped(p: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut out = Vec::with_capacity(crate::sandbox::view::TABLE_ROOM);
    std::fs::File::open(p)
        .and_then(|f| f.take(TABLE_MAX + 1).read_to_end(&mut out))
        .map_err(|e| e.to_string())?;
    if out.len() as u64 > TABLE_MAX {
        return Err(format!("larger than {TABLE_MAX} bytes"));
    }
    Ok(out)
}

/// `.` and `..` taken out without touching the disk (`..` at `/` stays `/`).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Where `p` is, or would be: its deepest existing ancestor with every
/// symlink resolved, then the rest of its components. A home that does
/// not exist is compared by the place it would have once created. A
/// directory `look` does not cross (on a FUSE mount another user serves)
/// counts as one that does not exist: placed by its path.
fn place(look: &Resolver, p: &Path) -> PathBuf {
    place_with(p, &|c| look.canonicalize(c).ok())
}

/// [`place`], with `resolve` resolving a path that exists.
fn place_with(p: &Path, resolve: &dyn Fn(&Path) -> Option<PathBuf>) -> PathBuf {
    let p = normalize(p);
    let mut rest: Vec<OsString> = Vec::new();
    let mut cur: &Path = &p;
    loop {
        if let Some(mut c) = resolve(cur) {
            for r in rest.iter().rev() {
                c.push(r);
            }
            return c;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return p,
        }
    }
}

/// The mount table, read whole (a table larger than the cap is an error:
/// the bound cannot be judged on part of it).
fn read_mounts() -> Result<MountTable, String> {
    Ok(MountTable::parse(
        &read_capped(Path::new(MOUNTINFO))?,
        usize::MAX,
    ))
}

/// The device and inode of `p`, following links (`None`: it does not
/// exist or cannot be looked at).
fn dev_ino(look: &Resolver, p: &Path) -> Option<(u64, u64)> {
    look.metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// May a run have `workspace` (resolved, with its device and inode) as its
/// workspace? `allow_homes`: the system policy's `workspace_bound`.
/// `homes`: [`known_homes`]. `/` is never allowed.
pub fn check_workspace(
    workspace: &Path,
    identity: (u64, u64),
    homes: &[Home],
    allow_homes: bool,
) -> Result<(), BoundError> {
    let workspace = normalize(workspace);
    let look = Resolver::new();
    if workspace == Path::new("/") || dev_ino(&look, Path::new("/")) == Some(identity) {
        return Err(BoundError::Root { workspace });
    }
    if allow_homes {
        return Ok(());
    }
    let mounts = read_mounts().map_err(|message| BoundError::Unreadable {
        workspace: workspace.clone(),
        what: "the mount table",
        path: MOUNTINFO,
        message,
    })?;
    match home_within(&look, &workspace, identity, homes, &mounts) {
        None => Ok(()),
        Some((h, exposed)) => {
            let (account, home) = (h.account.clone(), h.path.clone());
            Err(if exposed == workspace {
                BoundError::IsHome {
                    workspace,
                    account,
                    home,
                    exposed,
                }
            } else {
                BoundError::ContainsHome {
                    workspace,
                    account,
                    home,
                    exposed,
                }
            })
        }
    }
}

/// The first home that `workspace` is or holds, and where in the
/// workspace it is reached.
fn home_within<'h>(
    look: &Resolver,
    workspace: &Path,
    identity: (u64, u64),
    homes: &'h [Home],
    mounts: &MountTable,
) -> Option<(&'h Home, PathBuf)> {
    let ws_fs = mounts.locate(workspace);
    let below: Vec<&MountLine> = mounts.at_or_below(workspace).collect();
    for h in homes {
        let at = place(look, &h.path);
        if at == Path::new("/") {
            continue;
        }
        // The same directory (a bind mount of the home is one).
        if dev_ino(look, &at) == Some(identity) {
            return Some((h, workspace.to_path_buf()));
        }
        // Below it as resolved paths go.
        if at.starts_with(workspace) {
            return Some((h, at));
        }
        let Some(home_fs) = mounts.locate(&at) else {
            continue;
        };
        // The workspace is, on the home's filesystem, a directory above
        // the home (the workspace is a bind of such a directory).
        if let Some(ws_fs) = &ws_fs
            && ws_fs.dev == home_fs.dev
            && let Ok(rest) = home_fs.path.strip_prefix(&ws_fs.path)
        {
            return Some((h, workspace.join(rest)));
        }
        // A mount at or below the workspace shows the home, or a
        // directory above it.
        for m in &below {
            if m.dev == home_fs.dev
                && let Ok(rest) = home_fs.path.strip_prefix(&m.root)
            {
                return Some((h, m.point.join(rest)));
            }
        }
    }
    None
}

/// Does `dir` (absolute, resolved) reach one of `homes` under another
/// name than the home's own path: is it one (a bind mount of a home has
/// the home's identity), hold one (a mount at or below it of a home or of
/// a directory above one), or lie inside one on the same filesystem? What
/// the rehearsal's view binds read-only (a `PATH` directory) must not
/// show a home past the masks that apply at the home's own path. Fails
/// closed: when `dir` or the mount table cannot be read, it counts as
/// reaching one.
pub(crate) fn reaches_a_home_by_another_name(
    look: &Resolver,
    dir: &Path,
    homes: &[PathBuf],
) -> bool {
    let (Some(identity), Ok(mounts)) = (dev_ino(look, dir), read_mounts()) else {
        return true;
    };
    let homes: Vec<Home> = homes
        .iter()
        .map(|p| Home {
            account: String::new(),
            path: p.clone(),
        })
        .collect();
    if home_within(look, dir, identity, &homes, &mounts).is_some() {
        return true;
    }
    let Some(here) = mounts.locate(dir) else {
        return true;
    };
    homes.iter().any(|h| {
        let at = place(look, &h.path);
        at != Path::new("/")
            && !dir.starts_with(&at)
            && mounts
                .locate(&at)
                .is_some_and(|home| home.dev == here.dev && here.path.starts_with(&home.path))
    })
}

/// The workspace bound for a run: `workspace` (resolved, with its
/// identity) must be neither `/` nor a home nor hold one, unless the
/// system policy (read from `system_policy_dir()`, cached under
/// `cache_dir`) allows homes. `submitter_uid`'s home and `caller_home`
/// (the in-process caller's `$HOME`) count besides the password
/// database's. Every submission goes through this ([`super::Engine`]'s
/// preparation of a run); a door that reads the workspace before it
/// submits (the hooks read `dryrun.yaml`) calls it first, through
/// [`check_here`].
pub fn check(
    workspace: &Path,
    identity: &crate::workspace::apply::Identity,
    submitter_uid: u32,
    caller_home: Option<&Path>,
    cache_dir: Option<&Path>,
) -> Result<(), super::EngineError> {
    let homes = homes_for(workspace, identity.uid, submitter_uid, caller_home)?;
    let id = (identity.dev, identity.ino);
    // The policy can only widen the bound (`allow_home_workspaces`): a
    // workspace the narrow bound admits is admitted without reading it.
    if check_workspace(workspace, id, &homes, false).is_ok() {
        return Ok(());
    }
    let system = crate::policy::Policy::load_cached(&super::system_policy_dir(), None, cache_dir)?;
    check_workspace(workspace, id, &homes, system.allow_home_workspaces)?;
    Ok(())
}

/// [`check`] for `workspace` as this process resolves it, submitted by
/// this process with its own `$HOME` (the system policy's cache under
/// `cache_dir`, a state directory, when there is one).
pub fn check_here(workspace: &Path, cache_dir: Option<&Path>) -> Result<(), super::EngineError> {
    use crate::workspace::owner::{Creds, OwnerSession};
    let resolved = OwnerSession::start(&Creds::current())
        .and_then(|me| me.resolve(workspace))
        .map_err(|e| super::EngineError::invalid(super::Input::Workspace, e.to_string()))?;
    check(
        &resolved.canonical,
        &resolved.identity,
        nix::unistd::geteuid().as_raw(),
        super::CallerEnv::of_this_process().home.as_deref(),
        cache_dir,
    )
}

/// The homes the bound compares `workspace` with: the password
/// database's, the workspace owner's and the submitter's as the system
/// resolves them, and `caller_home` (the in-process caller's `$HOME`).
pub fn homes_for(
    workspace: &Path,
    owner_uid: u32,
    submitter_uid: u32,
    caller_home: Option<&Path>,
) -> Result<Vec<Home>, BoundError> {
    let extra: Vec<Home> = caller_home
        .map(|p| Home {
            account: "the caller ($HOME)".into(),
            path: p.to_path_buf(),
        })
        .into_iter()
        .collect();
    known_homes(&[owner_uid, submitter_uid], &extra).map_err(|message| BoundError::Unreadable {
        workspace: workspace.to_path_buf(),
        what: "the password database",
        path: PASSWD,
        message,
    })
}

/// The intent's forbidden paths with [`BUILTIN_FORBIDDEN`] added (each
/// once): what every run is judged against.
pub fn with_builtin_forbidden(patterns: &[String]) -> Vec<String> {
    let mut out = patterns.to_vec();
    for p in BUILTIN_FORBIDDEN {
        if !out.iter().any(|x| x == p) {
            out.push(p.to_string());
        }
    }
    out
}

/// The directories inside `workspace` that a `PATH` names, relative to
/// the workspace root (`""`: the root itself), each once. `paths`: the
/// `PATH` values that count (the rehearsal's own, the in-process caller's)
/// and `dirs`: single directories (the owner's `~/.local/bin` and
/// `~/bin`). A relative entry (`.`, an empty one, `bin`) names a
/// directory of wherever the shell is: in the workspace, the workspace's.
pub fn path_dirs_in(workspace: &Path, paths: &[&OsStr], dirs: &[PathBuf]) -> Vec<String> {
    let workspace = normalize(workspace);
    let mut out: Vec<String> = Vec::new();
    let mut add = |rel: &Path| {
        let s = String::from_utf8_lossy(rel.as_os_str().as_bytes()).into_owned();
        if !out.contains(&s) {
            out.push(s);
        }
    };
    // An entry on a FUSE mount another user serves is placed without
    // looking at anything on it (its server, the agent's own process
    // perhaps, could keep the engine waiting forever).
    let look = Resolver::new();
    let entries = paths
        .iter()
        .flat_map(|p| p.as_bytes().split(|b| *b == b':'))
        .map(|e| PathBuf::from(OsStr::from_bytes(e)))
        .chain(dirs.iter().cloned());
    // The rehearsal's PATH and the caller's are usually the same, and a
    // PATH often names a directory twice: each entry is placed once.
    let mut placed: Vec<PathBuf> = Vec::new();
    for e in entries {
        if placed.contains(&e) {
            continue;
        }
        placed.push(e.clone());
        let abs = if e.is_absolute() {
            place_with(&e, &|c| look.canonicalize(c).ok())
        } else {
            normalize(&workspace.join(&e))
        };
        if let Ok(rel) = abs.strip_prefix(&workspace) {
            add(rel);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(account: &str, p: &str) -> Home {
        Home {
            account: account.into(),
            path: p.into(),
        }
    }

    #[test]
    fn passwd_lines_give_homes_and_slash_is_no_home() {
        let h = parse_passwd(
            b"root:x:0:0:root:/root:/bin/bash\n# c\nsvc:x:998:998::/:/usr/sbin/nologin\nbad line\nu:x:1000:1000:U,,,:/home/u:/bin/zsh\n",
        );
        assert_eq!(
            h,
            vec![
                home("root", "/root"),
                home("svc", "/"),
                home("u", "/home/u")
            ]
        );
    }

    /// A bind mount of a home, or of a directory above one, at or below a
    /// workspace: found through the mount table, whatever the paths say.
    #[test]
    fn binds_of_homes_and_of_their_parents_are_found() {
        let m = MountTable::parse(
            b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
              31 22 8:2 / /home rw - ext4 /dev/sda2 rw\n\
              40 22 8:2 /u /srv/ws/bind rw - ext4 /dev/sda2 rw\n\
              41 22 8:2 / /srv/all rw - ext4 /dev/sda2 rw\n",
            usize::MAX,
        );
        let homes = [home("u", "/home/u")];
        let none = (0, 0);
        let look = Resolver::new();
        // A bind of the home below the workspace.
        let (_, at) = home_within(&look, Path::new("/srv/ws"), none, &homes, &m).unwrap();
        assert_eq!(at, Path::new("/srv/ws/bind"));
        // The workspace is a bind of the directory above the home.
        let (_, at) = home_within(&look, Path::new("/srv/all"), none, &homes, &m).unwrap();
        assert_eq!(at, Path::new("/srv/all/u"));
        // By path.
        let (_, at) = home_within(&look, Path::new("/home"), none, &homes, &m).unwrap();
        assert_eq!(at, Path::new("/home/u"));
        // Elsewhere: none.
        assert!(home_within(&look, Path::new("/srv/other"), none, &homes, &m).is_none());
        assert!(home_within(&look, Path::new("/home/u/proj"), none, &homes, &m).is_none());
    }

    #[test]
    fn a_home_that_does_not_exist_is_placed_where_it_would_be() {
        assert_eq!(
            place(&Resolver::new(), Path::new("/nonexistent-dryrun-x/a/../b")),
            Path::new("/nonexistent-dryrun-x/b")
        );
    }

    #[test]
    fn path_dirs_inside_the_workspace_relative_to_its_root() {
        let ws = Path::new("/srv/ws-dryrun-test");
        let path =
            OsStr::new("/usr/bin:/srv/ws-dryrun-test/bin:.:tools/bin::/srv/ws-dryrun-test/x/../y/");
        let dirs = path_dirs_in(
            ws,
            &[path],
            &[PathBuf::from("/srv/ws-dryrun-test/.local/bin")],
        );
        assert_eq!(dirs, vec!["", ".local/bin", "bin", "tools/bin", "y"]);
        assert!(path_dirs_in(ws, &[OsStr::new("/usr/bin:/bin")], &[]).is_empty());
    }

    #[test]
    fn builtin_forbidden_are_added_once() {
        let f = with_builtin_forbidden(&["secrets/".into(), ".mcp.json".into()]);
        assert_eq!(f.iter().filter(|p| *p == ".mcp.json").count(), 1);
        assert!(f.iter().any(|p| p == "dryrun.yaml"));
        assert_eq!(f[0], "secrets/");
    }
}
