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

/// What [`recognise`] found in a package manager's run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recognised {
    pub managers: Vec<Manager>,
    /// npm ran install scripts as far as its flags tell (the last of
    /// `--ignore-scripts` / `--no-ignore-scripts`; anything unclear: yes).
    /// Only softens the wording: declared install scripts are named
    /// whatever the flags say.
    pub npm_scripts: bool,
    /// Directories a path-named program (`.venv/bin/pip`) is the entry
    /// point of: each must be a virtual environment that existed in the
    /// workspace before the run (its `pyvenv.cfg`), else the run is not a
    /// package manager's.
    pub venv_programs: Vec<String>,
    /// Directories `python -m venv DIR` / `uv venv DIR` create: the only
    /// places a `pyvenv.cfg` the run creates makes a tree.
    pub venv_dirs: Vec<String>,
}

/// The run's commands (the classifier's simple commands, after
/// unwrapping), when every one is a package manager's install (or a `cd`
/// into a subdirectory): the managers used, and what they must find.
/// `None`: not (only) a package manager's run.
pub(crate) fn recognise(commands: &[String]) -> Option<Recognised> {
    let mut r = Recognised::default();
    // The working directory, relative to the workspace (`cd web`).
    let mut cwd = String::new();
    let mut cds = false;
    for c in commands {
        let words: Vec<&str> = c.split_whitespace().collect();
        // `env A=b npm ci` is listed twice: as the wrapper and as `npm ci`.
        let mut w: &[&str] = &words;
        let mut env_scripts = false;
        while let Some((first, rest)) = w.split_first() {
            if *first == "env" || is_assignment(first) {
                if first.to_ascii_lowercase().starts_with("npm_config_") {
                    env_scripts = true;
                }
                w = rest;
            } else {
                break;
            }
        }
        let (prog, args) = w.split_first()?;
        let m = match *prog {
            "cd" => {
                cwd = join_rel(&cwd, single(args)?)?;
                cds = true;
                continue;
            }
            "npm" => {
                let sub = args.iter().find(|a| !a.starts_with('-'))?;
                if !matches!(*sub, "ci" | "install" | "i" | "add" | "clean-install") {
                    return None;
                }
                // npm takes the last word; an environment setting or
                // anything else unclear: scripts ran.
                let mut scripts = true;
                for a in args {
                    match *a {
                        "--ignore-scripts" | "--ignore-scripts=true" => scripts = false,
                        a if a.starts_with("--ignore-scripts")
                            || a.starts_with("--no-ignore-scripts") =>
                        {
                            scripts = true
                        }
                        _ => {}
                    }
                }
                if scripts || env_scripts {
                    r.npm_scripts = true;
                }
                Manager::Npm
            }
            "uv" => match args.first().copied()? {
                "pip" if args.get(1) == Some(&"install") => Manager::Pip,
                "venv" => {
                    let dirs: Vec<&str> = args[1..]
                        .iter()
                        .copied()
                        .filter(|a| !a.starts_with('-'))
                        .collect();
                    let dirs = if dirs.is_empty() { vec![".venv"] } else { dirs };
                    for d in dirs {
                        r.venv_dirs.push(join_rel(&cwd, d)?);
                    }
                    Manager::Venv
                }
                _ => return None,
            },
            p if is_pip(p) => {
                if args.iter().find(|a| !a.starts_with('-')) != Some(&"install") {
                    return None;
                }
                r.venv_programs.extend(venv_dir(p, &cwd)?);
                Manager::Pip
            }
            p if is_python(p) => {
                let (module, rest) = python_module(args)?;
                let m = match (module, rest.first().copied()) {
                    ("pip", Some("install")) => Manager::Pip,
                    ("venv", _) => {
                        let mut i = 0;
                        let mut any = false;
                        while i < rest.len() {
                            let a = rest[i];
                            if a == "--prompt" {
                                i += 1;
                            } else if !a.starts_with('-') {
                                r.venv_dirs.push(join_rel(&cwd, a)?);
                                any = true;
                            }
                            i += 1;
                        }
                        if !any {
                            return None;
                        }
                        Manager::Venv
                    }
                    _ => return None,
                };
                r.venv_programs.extend(venv_dir(p, &cwd)?);
                m
            }
            _ => return None,
        };
        if !r.managers.contains(&m) {
            r.managers.push(m);
        }
    }
    if r.managers.is_empty() {
        return None;
    }
    // After a `cd` the shell's directory is not surely the one followed
    // here (a subshell): a path-named program is not taken on trust then.
    if cds && !r.venv_programs.is_empty() {
        return None;
    }
    r.managers.sort();
    r.venv_programs.sort();
    r.venv_programs.dedup();
    Some(r)
}

/// The one argument of `cd DIR`.
fn single<'a>(args: &[&'a str]) -> Option<&'a str> {
    match args {
        [d] => Some(d),
        _ => None,
    }
}

/// `base/rel` for a relative `rel` without `..`, empty or `-` parts:
/// workspace-relative, normalised (`./x/` is `x`).
fn join_rel(base: &str, rel: &str) -> Option<String> {
    if rel.starts_with('/') || rel.starts_with('~') || rel.starts_with('-') {
        return None;
    }
    let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
    for s in rel.split('/') {
        match s {
            "" | "." => {}
            ".." => return None,
            s if s.contains(['$', '`', '*', '?', '[', '{', '\\', '\'', '"']) => return None,
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

/// Python's own options before `-m MODULE`: the module and its
/// arguments. `None` for `-c CODE`, a script, `-` or an option not known
/// here: everything after those is the program's own argument list.
fn python_module<'a>(args: &'a [&'a str]) -> Option<(&'a str, &'a [&'a str])> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a == "-m" {
            return Some((args.get(i + 1).copied()?, args.get(i + 2..)?));
        }
        if a == "-W" || a == "-X" {
            i += 2;
            continue;
        }
        let flags = a.strip_prefix('-').filter(|f| {
            !f.is_empty() && !f.starts_with('-') && f.bytes().all(|b| b"bBdEiIOPqsSuv".contains(&b))
        });
        if flags.is_some() {
            i += 1;
            continue;
        }
        return None;
    }
    None
}

/// The virtual environment a path-named program belongs to
/// (`.venv/bin/pip` → `.venv`), workspace-relative; none for a bare name.
/// `None`: not a workspace-relative `DIR/bin/NAME`.
fn venv_dir(p: &str, cwd: &str) -> Option<Option<String>> {
    match p.rsplit_once('/') {
        None => Some(None),
        Some((dir, _)) => {
            let root = if dir == "bin" {
                ""
            } else {
                dir.strip_suffix("/bin")?
            };
            let joined = join_rel(cwd, root)?;
            // `bin/pip` at the workspace root: the workspace is no venv.
            if joined.is_empty() {
                return None;
            }
            Some(Some(joined))
        }
    }
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
    /// npm's flags do not say `--ignore-scripts` last: declared install
    /// scripts ran (they are named either way).
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
    /// Files in a tree that run code at every interpreter start: a `.pth`
    /// with an `import` line, `sitecustomize.py`, `usercustomize.py`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_hooks: Vec<String>,
    /// The trees that are virtual environments the run's `python -m venv
    /// DIR` made (their `pyvenv.cfg` created): their own layout
    /// (`pyvenv.cfg`, `bin/activate*`, `bin/python*`, ...) is the venv
    /// module's, not a protected-path write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_venvs: Vec<String>,
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
/// `node_modules` (npm), every virtual environment (a directory the run's
/// `python -m venv DIR` made, its `pyvenv.cfg` created; or one above
/// `lib/pythonX.Y/site-packages` with writes whose `pyvenv.cfg` the run
/// created so or that was a venv before the run: `had_venv`). A tree is
/// never a protected path nor below one (`.git`, `.github`, ...:
/// `protected` names them), whatever the run wrote there.
pub(crate) fn trees(
    changes: &[Change],
    rec: &Recognised,
    had_venv: &dyn Fn(&str) -> bool,
    protected: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let managers = &rec.managers;
    let created_cfg: std::collections::BTreeSet<&str> = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Created && c.file_type == FileType::File)
        .filter_map(|c| c.path.strip_suffix("/pyvenv.cfg"))
        .collect();
    let made_venv = |root: &str| {
        managers.contains(&Manager::Venv)
            && rec.venv_dirs.iter().any(|d| d == root)
            && created_cfg.contains(root)
    };
    let mut candidates: std::collections::BTreeSet<String> = Default::default();
    let mut site_roots: std::collections::BTreeSet<&str> = Default::default();
    for c in changes {
        let p = c.path.as_str();
        if managers.contains(&Manager::Npm) {
            let parts: Vec<&str> = p.split('/').collect();
            if let Some(i) = parts.iter().position(|s| *s == "node_modules") {
                candidates.insert(parts[..=i].join("/"));
            }
        }
        if managers
            .iter()
            .any(|m| matches!(m, Manager::Pip | Manager::Venv))
            && let Some(root) = venv_root_of_site_packages(p)
        {
            site_roots.insert(root);
        }
    }
    for root in &created_cfg {
        if made_venv(root) {
            candidates.insert(root.to_string());
        }
    }
    for root in site_roots {
        if made_venv(root) || had_venv(root) {
            candidates.insert(root.to_string());
        }
    }
    let mut out: Vec<String> = candidates.into_iter().filter(|t| !protected(t)).collect();
    out.sort();
    // Drop trees inside other trees.
    let all = out.clone();
    out.retain(|t| !all.iter().any(|o| o != t && within(t, o)));
    out
}

/// Is `path` part of the layout `python -m venv` gives the new virtual
/// environment `tree`: its `pyvenv.cfg`, `lib64`, and in `bin/` the
/// activation scripts and the interpreter and pip entry points.
pub(crate) fn venv_layout(path: &str, tree: &str) -> bool {
    let Some(rest) = path.strip_prefix(tree).and_then(|r| r.strip_prefix('/')) else {
        return false;
    };
    match rest.strip_prefix("bin/") {
        None => matches!(rest, "pyvenv.cfg" | "lib64"),
        Some(name) => {
            !name.contains('/')
                && (name.starts_with("activate")
                    || name == "Activate.ps1"
                    || is_python(name)
                    || is_pip(name))
        }
    }
}

/// Is `path` inside an installed package's own directory
/// (`node_modules/<pkg>/...`, `.../site-packages/...`)? Only there do a
/// tree's files skip the protected-path list.
pub(crate) fn in_package_dir(path: &str) -> bool {
    if npm_package_dir(path).is_some_and(|d| path.len() > d.len()) {
        return true;
    }
    let parts: Vec<&str> = path.split('/').collect();
    parts
        .iter()
        .position(|s| *s == "site-packages")
        .is_some_and(|i| i + 1 < parts.len() && i >= 2 && parts[i - 2] == "lib")
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
        full(cmds).map(|r| (r.managers, r.npm_scripts))
    }

    fn full(cmds: &[&str]) -> Option<Recognised> {
        recognise(&cmds.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn package_managers_are_recognised_by_their_bare_names() {
        assert_eq!(rec(&["npm ci"]), Some((vec![Manager::Npm], true)));
        assert_eq!(
            rec(&["npm ci --ignore-scripts"]),
            Some((vec![Manager::Npm], false))
        );
        // npm takes the last word: scripts ran.
        for c in [
            "npm ci --ignore-scripts --no-ignore-scripts",
            "npm ci --ignore-scripts --ignore-scripts=false",
            "npm_config_ignore_scripts=false npm ci --ignore-scripts",
        ] {
            assert_eq!(rec(&[c]), Some((vec![Manager::Npm], true)), "{c}");
        }
        let r = full(&["python3 -m venv .venv", ".venv/bin/pip install -e ."]).unwrap();
        assert_eq!(r.managers, vec![Manager::Pip, Manager::Venv]);
        assert_eq!(r.venv_programs, vec![".venv"]);
        assert_eq!(r.venv_dirs, vec![".venv"]);
        assert_eq!(
            full(&["x/bin/python3 -m pip install r"])
                .unwrap()
                .venv_programs,
            vec!["x"]
        );
        assert_eq!(
            full(&["python3 -I -m venv --prompt p ./env/"])
                .unwrap()
                .venv_dirs,
            vec!["env"]
        );
        assert_eq!(full(&["uv venv"]).unwrap().venv_dirs, vec![".venv"]);
        assert_eq!(
            rec(&["env A=1 pip install x", "pip install x"]),
            Some((vec![Manager::Pip], false))
        );
        assert_eq!(
            rec(&["cd web", "npm install"]).unwrap().0,
            vec![Manager::Npm]
        );
        assert_eq!(
            full(&["cd web", "python3 -m venv .venv"])
                .unwrap()
                .venv_dirs,
            vec!["web/.venv"]
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
            &["bin/pip install x"],
            &["cd web"],
            &["cd web", ".venv/bin/pip install x"],
            &["cd ..", "npm ci"],
            &["node_modules/.bin/npm ci"],
            &["python3 -c pass -m venv .venv"],
            &["python3 -c pass -m pip install x"],
            &["python3 s.py -m venv .venv"],
            &["python3 - -m venv .venv"],
            &["python3 -m venv"],
            &["python3 -m venv ../x"],
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
        let all = Recognised {
            managers: vec![Manager::Npm, Manager::Pip, Manager::Venv],
            venv_dirs: vec!["env".into(), ".git".into()],
            ..Default::default()
        };
        let had = |t: &str| t == "v2" || t == ".git";
        let prot = |t: &str| t == ".git" || t.starts_with(".git/");
        assert_eq!(
            trees(&changes, &all, &had, &prot),
            vec!["env", "node_modules", "v2"]
        );
        let npm = Recognised {
            managers: vec![Manager::Npm],
            ..Default::default()
        };
        assert_eq!(trees(&changes, &npm, &had, &prot), vec!["node_modules"]);
        // No venv before the run, none made: no tree.
        assert_eq!(
            trees(&changes, &all, &|_| false, &prot),
            vec!["env", "node_modules"]
        );
        // A venv the run's command did not name, or a protected one.
        let hostile = vec![
            ch(".git/pyvenv.cfg"),
            ch(".git/lib/python3/site-packages/x.py"),
            ch(".git/node_modules/a/package.json"),
            ch("other/pyvenv.cfg"),
        ];
        assert!(trees(&hostile, &all, &had, &prot).is_empty());
        assert!(in_package_dir("node_modules/a/x.js"));
        assert!(in_package_dir(".venv/lib/python3.11/site-packages/a.pth"));
        assert!(!in_package_dir("node_modules/.bin/x"));
        assert!(!in_package_dir("node_modules/a"));
        assert!(!in_package_dir(".venv/bin/pip"));
    }
}
