//! The host side of dependency installs (`model::deps`): read what the
//! package managers installed (each package's own metadata, from the
//! run's kept content; the lockfile, from the kept content when the run
//! wrote it, else from the workspace with its owner's rights) into the
//! per-package summary the verdict judges, and mark a virtual
//! environment's interpreter links that point at the caller's own
//! interpreter as expected.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::model::deps::{
    self, Dependency, DependencyReport, Manager, npm_package_dir, npm_project_of, within,
};
use crate::model::{Change, ChangeKind, FileType};

/// Metadata files read, at most: bigger ones are not metadata.
const MAX_META: u64 = 1 << 20;
/// Lockfiles read, at most.
const MAX_LOCK: u64 = 32 << 20;

/// Reads a workspace file as its owner (`None`: absent or unreadable).
pub(super) type ReadWorkspace<'a> = &'a dyn Fn(&[u8], u64) -> Option<Vec<u8>>;

/// Where the verdict's evidence reads content from.
pub(super) struct Sources<'a> {
    /// The run's kept content, by hash.
    pub blobs: &'a Path,
    /// A workspace file as its owner reads it (`None`: absent or unreadable).
    pub read_workspace: ReadWorkspace<'a>,
}

fn kept(blobs: &Path, c: &Change, max: u64) -> Option<Vec<u8>> {
    let h = c.after.as_ref()?;
    if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let f = std::fs::File::open(blobs.join(h)).ok()?;
    let mut out = Vec::new();
    use std::io::Read;
    f.take(max + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= max).then_some(out)
}

/// The summary of a package manager's run, or `None` when the run was not
/// (only) a package manager's (`model::deps::recognise`) or a directory of
/// the workspace is on its `PATH` (a bare `npm` could be the workspace's).
///
/// A path-named program (`.venv/bin/pip`) counts only when its directory
/// was a virtual environment in the workspace before the run (its
/// `pyvenv.cfg`, read as the owner reads it); a tree is never a protected
/// path (`protected`) nor below one.
pub(super) fn summarise(
    commands: &[String],
    path_dirs: &[String],
    changes: &[Change],
    src: &Sources,
    protected: &dyn Fn(&str) -> bool,
) -> Option<DependencyReport> {
    if !path_dirs.is_empty() {
        return None;
    }
    let rec = deps::recognise(commands)?;
    let seen = std::cell::RefCell::new(BTreeMap::<String, bool>::new());
    let had = |root: &str| -> bool {
        if let Some(v) = seen.borrow().get(root) {
            return *v;
        }
        let v = !protected(root)
            && (src.read_workspace)(format!("{root}/pyvenv.cfg").as_bytes(), MAX_META).is_some();
        seen.borrow_mut().insert(root.to_string(), v);
        v
    };
    if !rec.venv_programs.iter().all(|d| had(d)) {
        return None;
    }
    let trees = deps::trees(changes, &rec, &had, protected);
    let new_venvs: Vec<String> = trees
        .iter()
        .filter(|t| rec.venv_dirs.contains(t) && by_created_cfg(changes, t))
        .cloned()
        .collect();
    let managers = rec.managers.clone();
    let npm_scripts_ran = rec.npm_scripts;
    let by_path: BTreeMap<&str, &Change> = changes.iter().map(|c| (c.path.as_str(), c)).collect();
    let mut report = DependencyReport {
        managers: managers.clone(),
        npm_scripts_ran,
        trees,
        new_venvs,
        ..Default::default()
    };
    if managers.contains(&Manager::Npm) {
        npm(changes, &by_path, src, &mut report);
    }
    if managers
        .iter()
        .any(|m| matches!(m, Manager::Pip | Manager::Venv))
    {
        pip(changes, &by_path, src, &mut report);
    }
    Some(report)
}

/// Did the run create `tree/pyvenv.cfg`?
fn by_created_cfg(changes: &[Change], tree: &str) -> bool {
    let cfg = format!("{tree}/pyvenv.cfg");
    changes
        .iter()
        .any(|c| c.path == cfg && c.kind == ChangeKind::Created && c.file_type == FileType::File)
}

fn npm(
    changes: &[Change],
    by_path: &BTreeMap<&str, &Change>,
    src: &Sources,
    report: &mut DependencyReport,
) {
    // Package directories with the run's files in them.
    let mut dirs: BTreeMap<String, Vec<&Change>> = BTreeMap::new();
    for c in changes {
        if let Some(d) = npm_package_dir(&c.path) {
            dirs.entry(d).or_default().push(c);
        }
    }
    let mut locks: BTreeMap<String, Option<serde_json::Value>> = BTreeMap::new();
    let mut declared_bins: Vec<(String, String)> = Vec::new();
    for (dir, files) in &dirs {
        let manifest = format!("{dir}/package.json");
        let meta: Option<serde_json::Value> = by_path
            .get(manifest.as_str())
            .filter(|c| c.kind != ChangeKind::Deleted)
            .and_then(|c| kept(src.blobs, c, MAX_META))
            .and_then(|b| serde_json::from_slice(&b).ok());
        let kind = match by_path.get(dir.as_str()).map(|c| c.kind) {
            Some(ChangeKind::Created) => "created",
            Some(ChangeKind::Deleted) => "deleted",
            _ => "modified",
        };
        let str_of = |v: Option<&serde_json::Value>, k: &str| {
            v.and_then(|m| m.get(k))
                .and_then(|x| x.as_str())
                .map(String::from)
        };
        let name = str_of(meta.as_ref(), "name")
            .unwrap_or_else(|| dir.rsplit("node_modules/").next().unwrap_or(dir).into());
        let version = str_of(meta.as_ref(), "version").unwrap_or_else(|| "?".into());
        let mut install_scripts = Vec::new();
        if let Some(scripts) = meta.as_ref().and_then(|m| m.get("scripts")) {
            for k in ["preinstall", "install", "postinstall", "prepare"] {
                if let Some(s) = scripts.get(k).and_then(|s| s.as_str()) {
                    install_scripts.push(format!("{k}: {s}"));
                }
            }
        }
        if install_scripts.iter().all(|s| !s.starts_with("install:"))
            && by_path.contains_key(format!("{dir}/binding.gyp").as_str())
        {
            install_scripts.push("install: node-gyp rebuild (binding.gyp)".into());
        }
        // Declared programs: `bin` as a string (named after the package)
        // or a map.
        let mut bins: Vec<String> = Vec::new();
        match meta.as_ref().and_then(|m| m.get("bin")) {
            Some(serde_json::Value::String(s)) => {
                let short = name.rsplit('/').next().unwrap_or(&name).to_string();
                declared_bins.push((short, norm(s)));
                bins.push(norm(s));
            }
            Some(serde_json::Value::Object(m)) => {
                for (k, v) in m {
                    if let Some(s) = v.as_str() {
                        declared_bins.push((k.clone(), norm(s)));
                        bins.push(norm(s));
                    }
                }
            }
            _ => {}
        }
        let undeclared_executables: Vec<String> = files
            .iter()
            .filter(|c| {
                c.file_type == FileType::File
                    && c.kind != ChangeKind::Deleted
                    && c.mode_after.unwrap_or(0) & 0o111 != 0
                    && npm_package_dir(&c.path).as_deref() == Some(dir.as_str())
            })
            .map(|c| c.path[dir.len() + 1..].to_string())
            .filter(|rel| !bins.contains(rel))
            .collect();
        // The lockfile of the project that holds this node_modules.
        let project = npm_project_of(dir).to_string();
        let lock = locks
            .entry(project.clone())
            .or_insert_with(|| read_lock(&project, by_path, src, report))
            .as_ref();
        let key = if project.is_empty() {
            dir.clone()
        } else {
            dir[project.len() + 1..].to_string()
        };
        let entry = lock
            .and_then(|l| l.get("packages"))
            .and_then(|p| p.get(&key));
        let locked = entry
            .and_then(|e| e.get("version"))
            .and_then(|v| v.as_str())
            .map(String::from);
        report.packages.push(Dependency {
            manager: "npm".into(),
            name,
            version,
            locked,
            kind: kind.into(),
            path: dir.clone(),
            files: files
                .iter()
                .filter(|c| c.file_type != FileType::Dir)
                .count(),
            install_scripts,
            undeclared_executables,
            not_in_lockfile: lock.is_some() && entry.is_none() && kind != "deleted",
        });
    }
    // Links in node_modules/.bin: declared by a package, or not.
    for c in changes {
        let Some((parent, name)) = c.path.rsplit_once('/') else {
            continue;
        };
        if !(parent == "node_modules/.bin" || parent.ends_with("/node_modules/.bin"))
            || c.kind == ChangeKind::Deleted
        {
            continue;
        }
        let modules = &parent[..parent.len() - "/.bin".len()];
        let declared = c.file_type == FileType::Symlink
            && c.symlink_target.as_deref().is_some_and(|t| {
                let Some(rest) = t.strip_prefix("../") else {
                    return false;
                };
                report.packages.iter().any(|p| {
                    let Some(prel) = p
                        .path
                        .strip_prefix(modules)
                        .and_then(|r| r.strip_prefix('/'))
                    else {
                        return false;
                    };
                    rest.strip_prefix(prel)
                        .and_then(|r| r.strip_prefix('/'))
                        .is_some_and(|file| {
                            declared_bins
                                .iter()
                                .any(|(n, f)| n.rsplit('/').next() == Some(name) && f == file)
                        })
                })
            });
        if declared {
            report.declared_bin_links.push(c.path.clone());
        } else {
            report.undeclared_bin_links.push(c.path.clone());
        }
    }
}

/// `./bin/x.js` → `bin/x.js`.
fn norm(s: &str) -> String {
    s.trim_start_matches("./").to_string()
}

fn read_lock(
    project: &str,
    by_path: &BTreeMap<&str, &Change>,
    src: &Sources,
    report: &mut DependencyReport,
) -> Option<serde_json::Value> {
    for name in ["npm-shrinkwrap.json", "package-lock.json"] {
        let rel = if project.is_empty() {
            name.to_string()
        } else {
            format!("{project}/{name}")
        };
        let bytes = match by_path.get(rel.as_str()) {
            Some(c) if c.kind == ChangeKind::Deleted => continue,
            Some(c) => kept(src.blobs, c, MAX_LOCK),
            None => (src.read_workspace)(rel.as_bytes(), MAX_LOCK),
        };
        if let Some(v) = bytes.and_then(|b| serde_json::from_slice(&b).ok()) {
            report.lockfiles.push(rel);
            return Some(v);
        }
    }
    None
}

/// The lines setuptools' own `distutils-precedence.pth` holds (a shim it
/// installs in every environment): expected, not a finding.
const DISTUTILS_PRECEDENCE: [&str; 2] = [
    "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; enabled and __import__('_distutils_hack').add_shim(); ",
    "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'stdlib') == 'local'; enabled and __import__('_distutils_hack').add_shim(); ",
];

/// Does a file the run wrote in a tree run code at every start of the
/// environment's interpreter? A `.pth` in `site-packages` with a line
/// `site` executes (one starting `import ` or `import\t`; plain lines are
/// paths), unless it is setuptools' own shim; `sitecustomize.py`,
/// `usercustomize.py`. Content not kept: yes.
fn startup_hook(c: &Change, src: &Sources) -> bool {
    let name = c.path.rsplit('/').next().unwrap_or(&c.path);
    if matches!(name, "sitecustomize.py" | "usercustomize.py") {
        return true;
    }
    if !name.ends_with(".pth") || !c.path.split('/').any(|s| s == "site-packages") {
        return false;
    }
    let Some(text) = kept(src.blobs, c, MAX_META) else {
        return true;
    };
    let text = String::from_utf8_lossy(&text);
    let code: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("import ") || l.starts_with("import\t"))
        .collect();
    !(code.is_empty()
        || (name == "distutils-precedence.pth"
            && code.len() == 1
            && DISTUTILS_PRECEDENCE
                .iter()
                .any(|k| k.trim_end() == code[0].trim_end())))
}

fn pip(
    changes: &[Change],
    by_path: &BTreeMap<&str, &Change>,
    src: &Sources,
    report: &mut DependencyReport,
) {
    for c in changes {
        if c.kind != ChangeKind::Deleted
            && c.file_type == FileType::File
            && report.in_tree(&c.path)
            && startup_hook(c, src)
        {
            report.startup_hooks.push(c.path.clone());
        }
    }
    for c in changes {
        // A wheel's `NAME-VER.dist-info/METADATA`; a legacy install's or a
        // local project's (`pip install -e .`) `NAME.egg-info/PKG-INFO`.
        let dir = match (
            c.path.strip_suffix("/METADATA"),
            c.path.strip_suffix("/PKG-INFO"),
        ) {
            (Some(d), _) if d.ends_with(".dist-info") && report.in_tree(&c.path) => d,
            (_, Some(d)) if d.ends_with(".egg-info") => d,
            _ => continue,
        };
        if c.kind == ChangeKind::Deleted {
            continue;
        }
        let meta = kept(src.blobs, c, MAX_META).unwrap_or_default();
        let text = String::from_utf8_lossy(&meta);
        let field = |k: &str| {
            text.lines()
                .take_while(|l| !l.is_empty())
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        let base = dir.rsplit('/').next().unwrap_or(dir);
        let name = field("Name:").unwrap_or_else(|| base.into());
        let version = field("Version:").unwrap_or_else(|| "?".into());
        let kind = match by_path.get(dir).map(|c| c.kind) {
            Some(ChangeKind::Created) => "created",
            _ => "modified",
        };
        report.packages.push(Dependency {
            manager: "pip".into(),
            name,
            version,
            locked: None,
            kind: kind.into(),
            path: dir.to_string(),
            files: changes
                .iter()
                .filter(|o| o.file_type != FileType::Dir && within(&o.path, dir))
                .count(),
            install_scripts: Vec::new(),
            undeclared_executables: Vec::new(),
            not_in_lockfile: false,
        });
    }
}

/// The interpreter a bare `python3` (else `python`) names on `path`, its
/// real path.
fn caller_interpreter(path: &str, look: &crate::sandbox::view::Resolver) -> Option<PathBuf> {
    for name in ["python3", "python"] {
        for dir in path.split(':').filter(|d| d.starts_with('/')) {
            let p = Path::new(dir).join(name);
            if let Ok(real) = look.resolve(&p)
                && real.meta().is_ok_and(|m| m.is_file())
            {
                return Some(real.path);
            }
        }
    }
    None
}

/// Mark a virtual environment's interpreter links (`X/bin/python3 ->
/// /usr/bin/python3`) whose target, resolved, is the interpreter a bare
/// `python3` on the command's `PATH` resolves to: what `python3 -m venv`
/// makes, expected rather than an escape. Every other escaping link stays
/// one. Clears any mark first: the engine alone sets it.
pub(super) fn mark_interpreter_links(
    changes: &mut [Change],
    report: Option<&DependencyReport>,
    env: &[(String, String)],
    workspace: &Path,
) {
    for c in changes.iter_mut() {
        c.link_expected = None;
    }
    let Some(report) = report else { return };
    if !report.managers.contains(&Manager::Venv) {
        return;
    }
    let Some(path) = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v) else {
        return;
    };
    // Nothing on a FUSE mount another user serves is looked at: the
    // agent's own stopped server would keep the engine waiting forever.
    let look = crate::sandbox::view::Resolver::new();
    let Some(interp) = caller_interpreter(path, &look) else {
        return;
    };
    if interp.starts_with(workspace) {
        return;
    }
    for c in changes.iter_mut() {
        if !c.symlink_escapes
            || !report
                .trees
                .iter()
                .any(|t| deps::is_venv_interpreter_link(c, t))
        {
            continue;
        }
        let Some(target) = c.symlink_target.as_deref() else {
            continue;
        };
        let t = Path::new(target);
        if !t.is_absolute() {
            continue;
        }
        if look.canonicalize(t).ok().as_deref() == Some(interp.as_path()) {
            c.link_expected = Some(format!(
                "the virtual environment's interpreter: {} is the caller's python3",
                interp.display()
            ));
        }
    }
    // `X/bin/python -> python3`: a sibling name that is itself an expected
    // interpreter link (it escapes only through that one).
    let expected: Vec<String> = changes
        .iter()
        .filter(|c| c.link_expected.is_some())
        .map(|c| c.path.clone())
        .collect();
    for c in changes.iter_mut() {
        if !c.symlink_escapes
            || c.link_expected.is_some()
            || !report
                .trees
                .iter()
                .any(|t| deps::is_venv_interpreter_link(c, t))
        {
            continue;
        }
        let Some(target) = c.symlink_target.as_deref() else {
            continue;
        };
        let Some((dir, _)) = c.path.rsplit_once('/') else {
            continue;
        };
        let sibling = format!("{dir}/{target}");
        if !target.contains('/') && expected.contains(&sibling) {
            c.link_expected = Some(format!(
                "the virtual environment's interpreter: {target} beside it, the caller's python3"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(path: &str, target: &str) -> Change {
        let mut c = Change::new(path.as_bytes(), ChangeKind::Created, FileType::Symlink);
        c.symlink_target = Some(target.into());
        c.symlink_escapes = true;
        c
    }

    #[test]
    fn only_links_to_the_callers_python3_are_expected() {
        let Some(interp) =
            caller_interpreter("/usr/bin:/bin", &crate::sandbox::view::Resolver::new())
        else {
            return;
        };
        let report = DependencyReport {
            managers: vec![Manager::Venv],
            trees: vec![".venv".into()],
            ..Default::default()
        };
        let mut changes = vec![
            link(".venv/bin/python3", &interp.display().to_string()),
            link(".venv/bin/python", "python3"),
            link(".venv/bin/python3.99", "/bin/sh"),
            link(".venv/bin/sh", &interp.display().to_string()),
            link("other/bin/python3", &interp.display().to_string()),
        ];
        changes[4].link_expected = Some("forged".into());
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        mark_interpreter_links(&mut changes, Some(&report), &env, Path::new("/ws"));
        let marked: Vec<bool> = changes.iter().map(|c| c.link_expected.is_some()).collect();
        assert_eq!(marked, vec![true, true, false, false, false]);
        // Without a venv run, nothing is expected.
        mark_interpreter_links(&mut changes, None, &env, Path::new("/ws"));
        assert!(changes.iter().all(|c| c.link_expected.is_none()));
    }
}
