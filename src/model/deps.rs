//! Dependency installs: which commands are a package manager's, which
//! paths are its own tree, and the per-package summary the verdict judges
//! (`rehearsal.dependencies`). Pure data and rules: the engine reads the
//! installed metadata (`engine::deps`); the verdict turns a summary into
//! findings (`dependency.*` rules).
//!
//! What counts as "written by the package manager": every simple command
//! of the run is one of [`recognise`]'s forms (a bare `npm ci`, `pip
//! install`, `python3 -m venv`, ...: a program the shell looks up on the
//! `PATH`, never a path like `./npm`), and no directory of the workspace
//! is on that `PATH`. Anything else (a chain with `echo`, a script named
//! `npm` in the workspace) is judged by the ordinary rules, where every
//! installed package's manifest is a protected path.

use serde::{Deserialize, Serialize};

use super::{Change, ChangeKind, FileType};

/// A package manager the run used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Manager {
    /// `npm ci`, `npm install`.
    Npm,
    /// `pip install`, `python -m pip install`, `uv pip install`.
    Pip,
    /// `python -m venv`, `uv venv`.
    Venv,
}

impl Manager {
    pub fn as_str(self) -> &'static str {
        match self {
            Manager::Npm => "npm",
            Manager::Pip => "pip",
            Manager::Venv => "venv",
        }
    }
}

/// The run's commands (the classifier's simple commands, after
/// unwrapping), when every one is a package manager's install (or a `cd`):
/// the managers used, and whether npm ran install scripts (no
/// `--ignore-scripts`). `None`: not (only) a package manager's run.
pub(crate) fn recognise(commands: &[String]) -> Option<(Vec<Manager>, bool)> {
    let mut managers = Vec::new();
    let mut npm_scripts = false;
    for c in commands {
        let words: Vec<&str> = c.split_whitespace().collect();
        // `env A=b npm ci` is listed twice: as the wrapper and as `npm ci`.
        let mut w: &[&str] = &words;
        while let Some((first, rest)) = w.split_first() {
            if *first == "env" || is_assignment(first) {
                w = rest;
            } else {
                break;
            }
        }
        let (prog, args) = w.split_first()?;
        let m = match *prog {
            "cd" => continue,
            "npm" => {
                let sub = args.iter().find(|a| !a.starts_with('-'))?;
                if !matches!(*sub, "ci" | "install" | "i" | "add" | "clean-install") {
                    return None;
                }
                if !args.contains(&"--ignore-scripts") {
                    npm_scripts = true;
                }
                Manager::Npm
            }
            "uv" => match args.first().copied()? {
                "pip" if args.get(1) == Some(&"install") => Manager::Pip,
                "venv" => Manager::Venv,
                _ => return None,
            },
            p if is_pip(p) => {
                if args.iter().find(|a| !a.starts_with('-')) != Some(&"install") {
                    return None;
                }
                Manager::Pip
            }
            p if is_python(p) => {
                let m = args.iter().position(|a| *a == "-m")?;
                match (args.get(m + 1).copied()?, args.get(m + 2).copied()) {
                    ("pip", Some("install")) => Manager::Pip,
                    ("venv", _) => Manager::Venv,
                    _ => return None,
                }
            }
            _ => return None,
        };
        if !managers.contains(&m) {
            managers.push(m);
        }
    }
    if managers.is_empty() {
        return None;
    }
    managers.sort();
    Some((managers, npm_scripts))
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// `pip`, `pip3`, `pip3.11`; or a virtual environment's own
/// (`.venv/bin/pip`: as trusted as the environment it is part of).
fn is_pip(p: &str) -> bool {
    let name = venv_program(p);
    name.is_some_and(|n| {
        n.strip_prefix("pip")
            .is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
    })
}

/// `python`, `python3`, `python3.11`; or a virtual environment's own.
fn is_python(p: &str) -> bool {
    venv_program(p).is_some_and(|n| {
        n.strip_prefix("python")
            .is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
    })
}

/// The program's name: a bare name, or `DIR/bin/NAME` (relative, no `..`:
/// a virtual environment's entry point).
fn venv_program(p: &str) -> Option<&str> {
    match p.rsplit_once('/') {
        None => Some(p),
        Some((dir, name)) => {
            let ok = !dir.starts_with('/')
                && (dir == "bin" || dir.ends_with("/bin"))
                && !dir.split('/').any(|s| s == ".." || s.is_empty());
            ok.then_some(name)
        }
    }
}

/// One installed package: one line of the summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    /// `npm` or `pip`.
    pub manager: String,
    pub name: String,
    /// The installed version (its own metadata).
    pub version: String,
    /// The version the lockfile names for this path (npm), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked: Option<String>,
    /// created | modified | deleted.
    pub kind: String,
    /// Workspace-relative directory of the package (or its metadata).
    pub path: String,
    /// Files of the run inside the package's directory.
    pub files: usize,
    /// Install-time scripts the package declares (`postinstall: node x.js`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub install_scripts: Vec<String>,
    /// Executable files in the package that its `bin` does not declare.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undeclared_executables: Vec<String>,
    /// The path has no entry in the lockfile (npm, a lockfile present).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_in_lockfile: bool,
}

impl Dependency {
    /// `npm leftpad 1.0.0 (created)`.
    pub fn shown(&self) -> String {
        let locked = match &self.locked {
            Some(l) if *l != self.version => format!(", lockfile says {l}"),
            _ => String::new(),
        };
        format!(
            "{} {} {} ({}, {} file(s){locked})",
            self.manager, self.name, self.version, self.kind, self.files
        )
    }
}

/// What a package manager's run left, summarised (`rehearsal.dependencies`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyReport {
    /// The managers the command used.
    pub managers: Vec<Manager>,
    /// npm ran without `--ignore-scripts`: declared install scripts ran.
    #[serde(default)]
    pub npm_scripts_ran: bool,
    /// The package managers' trees (workspace-relative directories).
    pub trees: Vec<String>,
    /// Lockfiles read (workspace-relative).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lockfiles: Vec<String>,
    pub packages: Vec<Dependency>,
    /// Links into a tool bin directory (`node_modules/.bin/x`) that no
    /// installed package declares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undeclared_bin_links: Vec<String>,
    /// Declared bin links (`node_modules/.bin/x`), expected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declared_bin_links: Vec<String>,
}

impl DependencyReport {
    /// Is `path` inside one of the package managers' trees?
    pub fn in_tree(&self, path: &str) -> bool {
        self.trees.iter().any(|t| within(path, t))
    }

    /// Files the managers write beside their trees: the lockfiles, a
    /// build's `*.egg-info` and `build/` (pip, for a local project).
    pub fn beside_tree(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        if self.managers.contains(&Manager::Npm)
            && (matches!(name, "package-lock.json" | "npm-shrinkwrap.json")
                || (name == "package.json" && !path.split('/').any(|s| s == "node_modules")))
        {
            return true;
        }
        self.managers.contains(&Manager::Pip)
            && path
                .split('/')
                .enumerate()
                .any(|(i, s)| s.ends_with(".egg-info") || (i == 0 && s == "build"))
    }
}

/// `path` is `dir` or below it.
pub(crate) fn within(path: &str, dir: &str) -> bool {
    path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The npm package directory a path belongs to (innermost
/// `node_modules/NAME` or `node_modules/@SCOPE/NAME`), if any.
pub(crate) fn npm_package_dir(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').collect();
    let i = parts.iter().rposition(|p| *p == "node_modules")?;
    let first = parts.get(i + 1)?;
    if first.starts_with('.') {
        return None;
    }
    let end = if first.starts_with('@') { i + 3 } else { i + 2 };
    if parts.len() < end {
        return None;
    }
    Some(parts[..end].join("/"))
}

/// The directory holding `node_modules` for a package directory (the
/// project whose lockfile names it): `""` for the workspace root.
pub(crate) fn npm_project_of(pkg_dir: &str) -> &str {
    match pkg_dir.find("node_modules/") {
        Some(0) => "",
        Some(i) => &pkg_dir[..i - 1],
        None => "",
    }
}

/// The package managers' trees in a change list: every top-level
/// `node_modules` (npm), every virtual environment (a directory whose
/// `pyvenv.cfg` the run created, or one above `lib/pythonX.Y/site-packages`
/// with writes).
pub(crate) fn trees(changes: &[Change], managers: &[Manager]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |t: String| {
        if !out.contains(&t) {
            out.push(t);
        }
    };
    for c in changes {
        let p = c.path.as_str();
        if managers.contains(&Manager::Npm) {
            let parts: Vec<&str> = p.split('/').collect();
            if let Some(i) = parts.iter().position(|s| *s == "node_modules") {
                add(parts[..=i].join("/"));
            }
        }
        if managers.contains(&Manager::Venv)
            && let Some(root) = p.strip_suffix("/pyvenv.cfg")
            && c.kind == ChangeKind::Created
        {
            add(root.to_string());
        }
        if managers
            .iter()
            .any(|m| matches!(m, Manager::Pip | Manager::Venv))
            && let Some(root) = venv_root_of_site_packages(p)
        {
            add(root.to_string());
        }
    }
    out.sort();
    // Drop trees inside other trees.
    let all = out.clone();
    out.retain(|t| !all.iter().any(|o| o != t && within(t, o)));
    out
}

/// `X` for `X/lib/pythonN.M/site-packages/...` (X not empty).
fn venv_root_of_site_packages(p: &str) -> Option<&str> {
    let i = p.find("/lib/python")?;
    let rest = &p[i + "/lib/".len()..];
    let (ver, after) = rest.split_once('/')?;
    if !ver.starts_with("python")
        || !(after == "site-packages" || after.starts_with("site-packages/"))
    {
        return None;
    }
    Some(&p[..i])
}

/// The basename of a virtual environment's interpreter link
/// (`X/bin/python`, `python3`, `python3.11`) when `c` is one inside `tree`.
pub(crate) fn is_venv_interpreter_link(c: &Change, tree: &str) -> bool {
    if c.file_type != FileType::Symlink || c.kind == ChangeKind::Deleted {
        return false;
    }
    let Some(rest) = c
        .path
        .strip_prefix(tree)
        .and_then(|r| r.strip_prefix("/bin/"))
    else {
        return false;
    };
    !rest.contains('/') && is_python(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(cmds: &[&str]) -> Option<(Vec<Manager>, bool)> {
        recognise(&cmds.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn package_managers_are_recognised_by_their_bare_names() {
        assert_eq!(rec(&["npm ci"]), Some((vec![Manager::Npm], true)));
        assert_eq!(
            rec(&["npm ci --ignore-scripts"]),
            Some((vec![Manager::Npm], false))
        );
        assert_eq!(
            rec(&["python3 -m venv .venv", ".venv/bin/pip install -e ."]),
            Some((vec![Manager::Pip, Manager::Venv], false))
        );
        assert_eq!(
            rec(&["env A=1 pip install x", "pip install x"]),
            Some((vec![Manager::Pip], false))
        );
        assert_eq!(
            rec(&["cd web", "npm install"]).unwrap().0,
            vec![Manager::Npm]
        );
        // Not a package manager's run.
        for cmds in [
            &["./npm ci"][..],
            &["/tmp/npm ci"],
            &["npm ci", "echo x"],
            &["npm run build"],
            &["pip download x"],
            &["python3 setup.py install"],
            &["../bin/pip install x"],
            &["cd web"],
            &["node_modules/.bin/npm ci"],
        ] {
            assert_eq!(rec(cmds), None, "{cmds:?}");
        }
    }

    #[test]
    fn package_directories_and_trees() {
        assert_eq!(
            npm_package_dir("node_modules/a/lib/x.js").as_deref(),
            Some("node_modules/a")
        );
        assert_eq!(
            npm_package_dir("web/node_modules/@s/b/package.json").as_deref(),
            Some("web/node_modules/@s/b")
        );
        assert_eq!(
            npm_package_dir("node_modules/a/node_modules/c/index.js").as_deref(),
            Some("node_modules/a/node_modules/c")
        );
        assert_eq!(npm_package_dir("node_modules/.bin/x"), None);
        assert_eq!(npm_project_of("web/node_modules/a"), "web");
        assert_eq!(npm_project_of("node_modules/a"), "");
        let ch = |p: &str| Change::new(p.as_bytes(), ChangeKind::Created, FileType::File);
        let changes = vec![
            ch("node_modules/a/package.json"),
            ch("node_modules/a/node_modules/b/package.json"),
            ch("env/pyvenv.cfg"),
            ch("v2/lib/python3.11/site-packages/x.py"),
            ch("Makefile"),
        ];
        assert_eq!(
            trees(&changes, &[Manager::Npm, Manager::Pip, Manager::Venv]),
            vec!["env", "node_modules", "v2"]
        );
        assert_eq!(trees(&changes, &[Manager::Npm]), vec!["node_modules"]);
    }
}
