//! The view: what a rehearsal shows of the host, planned in one place.
//!
//! The command sees the world of the user it runs as, read-only, with the
//! secrets taken out: the image's system trees, that user's home, every
//! directory on the command's `PATH`, `/tmp` and `/var/tmp` (the home, the
//! mounts beneath it ([`submounts`]) and the two scratch trees as throwaway
//! layers over the real ones, so writes there are seen and dropped), minus the masks of [`table::MASKS`] (and
//! the policies' own), with the files of [`table::FILTERS`] served without
//! their credential lines. [`plan_view`] computes this once per run from
//! the user, its environment and the policy into a [`ViewSpec`], which
//! the sandbox's helper carries out as given (`helper/view.rs`); after the
//! run, [`explain_hidden`] names what the view hid that the command tried
//! to use. `docs/sandbox-view.md` is the user's guide to all of it.

pub(crate) mod access;
pub(crate) mod filter;
pub(crate) mod resolve;
mod submounts;
pub(crate) mod table;

pub(crate) use resolve::{Looks, Refusal, Resolver};
pub(crate) use submounts::TABLE_ROOM;

use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use self::access::{HostUser, overlaps};
use super::spec::ImageProfile;
use crate::model::{Hidden, HiddenKind};

/// A host directory the view shows, with the (device, inode) it had when
/// the view was planned: the helper refuses to show anything else there.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShownDir {
    pub path: PathBuf,
    #[serde(default)]
    pub identity: Option<(u64, u64)>,
}

/// A directory of the command's `PATH` the view does not show, and the
/// rule that hid it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HiddenDir {
    pub path: PathBuf,
    pub rule: String,
}

/// One masked or filtered path (absolute) and its rule's id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ViewPath {
    pub rule: String,
    pub path: PathBuf,
}

impl ViewPath {
    /// The mask over dryrun's own state directory.
    pub(crate) fn is_state_dir(&self) -> bool {
        self.rule == RULE_STATE
    }
}

/// The view of one run, as the helper carries it out.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ViewSpec {
    /// The host user it shows the world of (the command's uid and
    /// groups): what is looked up after the run is looked up as it.
    #[serde(default)]
    pub user: HostUser,
    /// The home shown (also among `layers`).
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// Throwaway layers over real trees (`/tmp`, `/var/tmp`, the home and
    /// the mounts beneath it), parents first.
    #[serde(default)]
    pub layers: Vec<ShownDir>,
    /// `PATH` directories outside every other shown tree, bound read-only.
    #[serde(default)]
    pub path_binds: Vec<ShownDir>,
    /// `PATH` directories the user could reach on the host that the view
    /// does not show.
    #[serde(default)]
    pub path_hidden: Vec<HiddenDir>,
    #[serde(default)]
    pub masks: Vec<ViewPath>,
    #[serde(default)]
    pub filters: Vec<ViewPath>,
    /// The reasons of rules that are not built in (`mask:policy`, ...).
    #[serde(default)]
    pub other_reasons: Vec<(String, String)>,
    /// The `HOME` the environment names when the view does not show it
    /// and it lies in a throwaway layer: made there, empty, for the command.
    #[serde(default)]
    pub make_home: Option<PathBuf>,
    /// Layers over a mount the host holds read-only: read-only in the
    /// view too, so a write fails there as it does live.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// What the plan could not show, as the record names it
    /// (`hidden:PATH (why)`): mounts beneath the home that are not layers.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The rules of the view that are not tables (ids and reasons).
pub(crate) const RULE_ROOT_HOME: &str = "view.root_home";
pub(crate) const RULE_OTHER_HOME: &str = "view.other_home";
pub(crate) const RULE_TOO_WIDE: &str = "view.too_wide";
pub(crate) const RULE_SYMLINKED: &str = "view.symlinked";
pub(crate) const RULE_HOME_ALIAS: &str = "view.home_alias";
pub(crate) const RULE_OUTSIDE: &str = "view.outside";
const RULE_STATE: &str = "mask:dryrun-state";
const RULE_POLICY: &str = "mask:policy";

fn builtin_reason(rule: &str) -> Option<&'static str> {
    Some(match rule {
        RULE_ROOT_HOME => "root's home is shown to root's own runs only",
        RULE_OTHER_HOME => "another user's home is never shown",
        RULE_TOO_WIDE => {
            "a directory that holds the workspace, a home or dryrun's state is never bound whole"
        }
        RULE_SYMLINKED => "reached through a symlink the view does not show",
        RULE_HOME_ALIAS => {
            "another name of a home (a bind or mount of it, or of a directory above it): a home is shown at its own path only, with its masks"
        }
        RULE_OUTSIDE => {
            "the sandbox shows the system trees, the user's home, the directories on the command's PATH, /tmp, /var/tmp and the workspace, nothing else"
        }
        RULE_STATE => "dryrun's own state: other runs' records, kept content and the journal",
        _ => {
            let (kind, id) = rule.split_once(':')?;
            let t: &[&[table::Entry]] = match kind {
                "mask" => &[table::MASKS],
                "filter" => &[table::FILTERS],
                "cache" => &[table::CACHES, table::CACHE_DIR_NAMES],
                _ => return None,
            };
            return t
                .iter()
                .flat_map(|t| t.iter())
                .find(|e| e.id == id)
                .map(|e| e.reason);
        }
    })
}

impl ViewSpec {
    /// Why `rule` hides (or lists) what it does.
    pub(crate) fn reason(&self, rule: &str) -> String {
        if let Some(r) = builtin_reason(rule) {
            return r.to_string();
        }
        self.other_reasons
            .iter()
            .find(|(id, _)| id == rule)
            .map_or_else(|| "a rule of this view".into(), |(_, r)| r.clone())
    }

    /// The mask covering `path`, if any (its rule).
    pub(crate) fn mask_of(&self, path: &Path) -> Option<&ViewPath> {
        self.masks.iter().find(|m| path.starts_with(&m.path))
    }

    /// Every tree the view shows (besides the image's and the workspace).
    fn shown_trees(&self) -> impl Iterator<Item = &Path> {
        self.layers
            .iter()
            .chain(self.path_binds.iter())
            .map(|d| d.path.as_path())
    }
}

/// A `~/`-relative or absolute path of a table, in the home `home`; `None`
/// for a home path when no home is shown.
fn expand(template: &str, home: Option<&Path>) -> Option<PathBuf> {
    match template.strip_prefix("~/") {
        Some(rel) => home.map(|h| h.join(rel)),
        None => Some(PathBuf::from(template)),
    }
}

/// The caches of a view whose home is `home`: writes beneath them are
/// listed, not judged.
pub(crate) fn cache_rules(home: Option<&Path>) -> super::walk::outside::CacheRules {
    super::walk::outside::CacheRules {
        roots: table::CACHES
            .iter()
            .flat_map(|e| {
                e.paths
                    .iter()
                    .filter_map(move |t| expand(t, home).map(|p| (p, format!("cache:{}", e.id))))
            })
            .collect(),
        dir_names: table::CACHE_DIR_NAMES
            .iter()
            .flat_map(|e| {
                e.paths
                    .iter()
                    .map(|n| (n.to_string(), format!("cache:{}", e.id)))
            })
            .collect(),
    }
}

/// What the view is planned from.
pub(crate) struct ViewRequest<'a> {
    /// The user the command runs as, on the host.
    pub user: &'a HostUser,
    /// The command's environment (its `PATH` and `HOME`).
    pub env: &'a [(String, String)],
    pub workspace: &'a Path,
    /// The engine's state directory: masked wherever the view shows it.
    pub state_dir: &'a Path,
    pub image: &'a ImageProfile,
    /// Masks the system and workspace policies add: (path, reason).
    pub policy_masks: &'a [(String, String)],
    /// Does a directory reach one of these homes by another name than the
    /// home's own path (the engine's one identity rule, shared with the
    /// workspace bound)? Looked at through the resolver given.
    pub reaches_home: &'a dyn Fn(&Resolver, &Path, &[PathBuf]) -> bool,
}

/// The view of one run (see the module's documentation).
pub(crate) fn plan_view(r: &ViewRequest) -> ViewSpec {
    // Every look at the host below goes through it.
    let look = Resolver::new();
    let (home, note) = match shown_home(r, &look) {
        Ok(h) => (Some(h), None),
        Err(note) => (None, note),
    };
    let mut v = ViewSpec {
        user: r.user.clone(),
        home: home.as_ref().map(|h| h.path.clone()),
        notes: note.into_iter().collect(),
        ..Default::default()
    };
    for scratch in ["/tmp", "/var/tmp"] {
        if look
            .open_exact(Path::new(scratch))
            .is_ok_and(|o| o.meta().is_ok_and(|m| m.is_dir()))
        {
            v.layers.push(ShownDir {
                path: scratch.into(),
                identity: None,
            });
        }
    }
    v.layers.extend(home);
    // The mounts beneath the home, as the table lists them.
    if let Some(h) = v.home.clone() {
        let mounts = submounts::read_mount_table();
        submounts::plan_submounts(r, &mut v, &h, &mounts, &look);
    }
    v.layers.sort_by(|a, b| a.path.cmp(&b.path));
    let home = v.home.clone();
    let env = |name: &str| r.env.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    if let Some(path) = env("PATH") {
        plan_path_dirs(r, &mut v, path, &look);
    }
    for e in table::MASKS {
        for p in e.paths.iter().filter_map(|t| expand(t, home.as_deref())) {
            v.masks.push(ViewPath {
                rule: format!("mask:{}", e.id),
                path: p,
            });
        }
    }
    for (t, reason) in r.policy_masks {
        if let Some(p) = expand(t, home.as_deref()) {
            v.masks.push(ViewPath {
                rule: RULE_POLICY.into(),
                path: p,
            });
            if !v.other_reasons.iter().any(|(id, _)| id == RULE_POLICY) {
                v.other_reasons.push((RULE_POLICY.into(), reason.clone()));
            }
        }
    }
    v.masks.push(ViewPath {
        rule: RULE_STATE.into(),
        path: r.state_dir.to_path_buf(),
    });
    for e in table::FILTERS {
        for p in e.paths.iter().filter_map(|t| expand(t, home.as_deref())) {
            v.filters.push(ViewPath {
                rule: format!("filter:{}", e.id),
                path: p,
            });
        }
    }
    if let Some(h) = env("HOME").map(PathBuf::from)
        && h.is_absolute()
        && h.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && h.as_os_str().len() < 4096
        && Some(&h) != home.as_ref()
        && !home.as_ref().is_some_and(|s| h.starts_with(s))
        && !h.starts_with(r.workspace)
        && (h.starts_with("/tmp") || h.starts_with("/var/tmp"))
    {
        v.make_home = Some(h);
    }
    v
}

/// The home of the user the command runs as, when the view can show it:
/// its passwd entry's directory (symlinks resolved), a directory that user
/// owns, outside the image's trees, not the workspace or the state
/// directory and not holding them whole. Else the line that names it, when
/// it was not looked at (on a FUSE mount another user serves).
fn shown_home(r: &ViewRequest, look: &Resolver) -> Result<ShownDir, Option<String>> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(r.user.uid))
        .ok()
        .flatten()
        .ok_or(None)?;
    let opened = look.resolve(&user.dir).map_err(|e| match e {
        Refusal::NotLooked(note) => Some(note),
        Refusal::Io(_) => None,
    })?;
    let home = opened.path.clone();
    let meta = opened.meta().map_err(|_| None)?;
    // The workspace inside the home is the usual case; the home inside the
    // workspace never is (and the workspace bound refuses a home). The
    // state directory inside the home is masked, not a reason to hide it.
    let ok = meta.is_dir()
        && meta.uid() == r.user.uid
        && home != Path::new("/")
        && r.image.covers(&home).is_none()
        && !home.starts_with(r.workspace);
    ok.then(|| ShownDir {
        identity: Some((meta.dev(), meta.ino())),
        path: home,
    })
    .ok_or(None)
}

/// The `PATH` directories the view binds, and those it hides with the
/// rule that hides them (see `docs/sandbox-view.md`).
fn plan_path_dirs(r: &ViewRequest, v: &mut ViewSpec, path: &str, look: &Resolver) {
    let mut others: Option<Vec<(u32, PathBuf)>> = None;
    for d in path.split(':').map(Path::new) {
        if !d.is_absolute() || d.components().any(|c| c == std::path::Component::ParentDir) {
            continue;
        }
        let shown = |p: &Path| {
            p.starts_with(r.workspace)
                || r.image.covers(p).is_some()
                || v.shown_trees().any(|t| p.starts_with(t))
        };
        if shown(d) {
            continue;
        }
        let real = match look.canonicalize(d) {
            Ok(real) => real,
            Err(Refusal::NotLooked(named)) => {
                if !v.notes.contains(&named) {
                    v.notes.push(named);
                }
                continue;
            }
            // Not on the host either: no difference from the live run.
            Err(Refusal::Io(_)) => continue,
        };
        if !r.user.may_search(look, &real) {
            // The host refuses the user there too.
            continue;
        }
        let others = others.get_or_insert_with(|| access::other_homes(r.user.uid));
        let rule = if shown(&real) && real != d {
            Some(RULE_SYMLINKED)
        } else if r.user.uid != 0 && others.iter().any(|(u, h)| *u == 0 && overlaps(&real, h)) {
            Some(RULE_ROOT_HOME)
        } else if others.iter().any(|(u, h)| *u != 0 && overlaps(&real, h)) {
            Some(RULE_OTHER_HOME)
        } else if r.workspace.starts_with(&real)
            || r.state_dir.starts_with(&real)
            || v.home.as_ref().is_some_and(|h| h.starts_with(&real))
        {
            Some(RULE_TOO_WIDE)
        } else if real != d {
            Some(RULE_SYMLINKED)
        } else if (r.reaches_home)(
            look,
            &real,
            &others
                .iter()
                .map(|(_, h)| h.clone())
                .chain(v.home.clone())
                .collect::<Vec<_>>(),
        ) {
            Some(RULE_HOME_ALIAS)
        } else {
            None
        };
        match rule {
            Some(rule) => {
                if !v.path_hidden.iter().any(|h| h.path == d) {
                    v.path_hidden.push(HiddenDir {
                        path: d.to_path_buf(),
                        rule: rule.into(),
                    });
                }
            }
            None => {
                let Ok(meta) = look.open_exact(&real).and_then(|o| Ok(o.meta()?)) else {
                    continue;
                };
                if !v.path_binds.iter().any(|b| real.starts_with(&b.path)) {
                    v.path_binds.retain(|b| !b.path.starts_with(&real));
                    v.path_binds.push(ShownDir {
                        path: real,
                        identity: Some((meta.dev(), meta.ino())),
                    });
                }
            }
        }
    }
    v.path_binds.sort_by(|a, b| a.path.cmp(&b.path));
}

/// After the run: what the command tried to use that the view hid, read
/// from its (redacted) error output: programs `bash` could not find
/// (`NAME: command not found`) that exist in a `PATH` directory the view
/// hid, and absolute paths an error names (`No such file or directory`,
/// `bad interpreter`) that are masked, or exist on the host where the user
/// could reach them but the view does not show them. Nothing is looked up
/// where the user could not look live, so the record tells the user
/// nothing the host would not.
pub(crate) fn explain_hidden(view: &ViewSpec, shown: &Shown, stderr: &[u8]) -> Vec<Hidden> {
    const MAX: usize = 8;
    let user = &view.user;
    let text = String::from_utf8_lossy(stderr);
    let mut out: Vec<Hidden> = Vec::new();
    // Nothing on a FUSE mount another user serves is looked at (its
    // server, the agent's own process perhaps, could never answer).
    let look = Resolver::new();
    let push = |h: Hidden, out: &mut Vec<Hidden>| {
        if out.len() < MAX && !out.iter().any(|o| o.path == h.path) {
            out.push(h);
        }
    };
    for line in text.lines().take(2000) {
        let line = line.trim_end();
        if let Some(name) = missing_program(line) {
            for d in &view.path_hidden {
                let p = d.path.join(name);
                if user.may_run(&look, &p)
                    || look.canonicalize(&p).is_ok_and(|c| user.may_run(&look, &c))
                {
                    let h = Hidden {
                        kind: HiddenKind::Program,
                        path: p.display().to_string(),
                        rule: d.rule.clone(),
                        reason: view.reason(&d.rule),
                        seen: format!("stderr: {name}: command not found"),
                    };
                    push(h, &mut out);
                    break;
                }
            }
            continue;
        }
        if !(line.contains("No such file or directory") || line.contains("bad interpreter")) {
            continue;
        }
        for p in absolute_paths(line) {
            let seen = format!("stderr: {}", line.chars().take(160).collect::<String>());
            if let Some(m) = view.mask_of(&p) {
                let h = Hidden {
                    kind: HiddenKind::Masked,
                    path: p.display().to_string(),
                    rule: m.rule.clone(),
                    reason: view.reason(&m.rule),
                    seen,
                };
                push(h, &mut out);
            } else if let Some(rule) = hidden_by(view, shown, user, &look, &p) {
                let h = Hidden {
                    kind: HiddenKind::Path,
                    path: p.display().to_string(),
                    reason: view.reason(rule),
                    rule: rule.into(),
                    seen,
                };
                push(h, &mut out);
            }
        }
    }
    out
}

/// The trees a run shows besides the view's own: the image's and the
/// workspace.
pub(crate) struct Shown<'a> {
    pub image: &'a ImageProfile,
    pub workspace: &'a Path,
}

/// The program a shell reports missing: `bash: line 1: NAME: command not
/// found`, `sh: 1: NAME: not found`.
fn missing_program(line: &str) -> Option<&str> {
    let head = line
        .strip_suffix(": command not found")
        .or_else(|| line.strip_suffix(": not found"))?;
    let name = head.rsplit(": ").next()?.trim();
    let plain = !name.is_empty()
        && name.len() <= 255
        && !name.contains('/')
        && !name.contains(char::is_whitespace);
    plain.then_some(name)
}

/// Absolute paths a line names (up to three).
fn absolute_paths(line: &str) -> Vec<PathBuf> {
    line.split(|c: char| c.is_whitespace() || matches!(c, ':' | '\'' | '"' | '`' | ','))
        .filter(|w| w.starts_with('/') && w.len() > 1 && !w.contains("/../"))
        .take(3)
        .map(PathBuf::from)
        .collect()
}

/// Why the view does not show `p`, when it exists on the host where the
/// user could reach it (`None` otherwise: no difference from live).
fn hidden_by(
    view: &ViewSpec,
    shown: &Shown,
    user: &HostUser,
    look: &Resolver,
    p: &Path,
) -> Option<&'static str> {
    let in_view = p.starts_with(shown.workspace)
        || shown.image.covers(p).is_some()
        || view.shown_trees().any(|t| p.starts_with(t));
    if in_view || !user.may_use(look, p) {
        return None;
    }
    let others = access::other_homes(user.uid);
    Some(
        if user.uid != 0 && others.iter().any(|(u, h)| *u == 0 && p.starts_with(h)) {
            RULE_ROOT_HOME
        } else if others.iter().any(|(u, h)| *u != 0 && p.starts_with(h)) {
            RULE_OTHER_HOME
        } else {
            RULE_OUTSIDE
        },
    )
}

#[cfg(test)]
mod tests;
