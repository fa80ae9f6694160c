//! A package manager's run (`model::deps`), judged by its content: install
//! scripts that ran, executables and bin links no package declares,
//! packages the lockfile does not name or names at another version, code
//! that runs at every interpreter start (a `.pth` with an import line), and
//! writes the install made outside the package manager's tree. Each is one
//! finding per package, with the package named; a clean install from a
//! lockfile with no scripts adds none.

use super::{is_write, show};
use crate::model::deps::DependencyReport;
use crate::model::{Change, Decision, Finding};

/// Is `c` inside one of the run's package-manager trees (a tree that is
/// itself no protected path)?
pub(super) fn in_tree(
    deps: Option<&DependencyReport>,
    protected: Option<&crate::workspace::paths::PathMatcher>,
    c: &Change,
) -> bool {
    deps.is_some_and(|d| {
        d.trees.iter().any(|t| {
            crate::model::deps::within(&c.path, t)
                && protected.is_none_or(|p| p.first_match(t.as_bytes()).is_none())
        })
    })
}

/// Is `c` inside a package's own directory of such a tree, or part of the
/// layout of a virtual environment this run made?
pub(super) fn in_package(
    deps: Option<&DependencyReport>,
    protected: Option<&crate::workspace::paths::PathMatcher>,
    c: &Change,
) -> bool {
    in_tree(deps, protected, c)
        && (crate::model::deps::in_package_dir(&c.path)
            || deps.is_some_and(|d| {
                d.new_venvs
                    .iter()
                    .any(|t| crate::model::deps::venv_layout(&c.path, t))
            }))
}

fn finding(rule: &str, message: String) -> Finding {
    Finding {
        rule: rule.into(),
        decision: Decision::NeedsApproval,
        message,
    }
}

/// The findings of a dependency change, and the summary note.
pub(super) fn dependency_findings(
    d: &DependencyReport,
    changes: &[Change],
    notes: &mut Vec<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let managers: Vec<&str> = d.managers.iter().map(|m| m.as_str()).collect();
    for p in &d.packages {
        let who = format!("{} {} {}", p.manager, p.name, p.version);
        // Named from the package's content, whatever the flags or the
        // configuration say (npm takes the last of them, and reads more).
        if !p.install_scripts.is_empty() {
            let when = if d.npm_scripts_ran {
                "that npm ran during the install"
            } else {
                "(npm was told to skip them; a later flag, the environment or an npmrc can undo that)"
            };
            out.push(finding(
                "dependency.install_script",
                format!(
                    "{who} ({}) declares install scripts {when}: {}; what they did is in the output and the change list",
                    p.path,
                    p.install_scripts.join("; ")
                ),
            ));
        }
        if let Some(l) = &p.locked
            && *l != p.version
        {
            out.push(finding(
                "dependency.lockfile_mismatch",
                format!(
                    "{who} ({}) was installed but the lockfile says version {l}: the lockfile does not describe what was installed",
                    p.path
                ),
            ));
        }
        if p.not_in_lockfile {
            out.push(finding(
                "dependency.not_in_lockfile",
                format!(
                    "{who} ({}) was installed but the lockfile ({}) has no entry for it",
                    p.path,
                    d.lockfiles.join(", ")
                ),
            ));
        }
        if !p.undeclared_executables.is_empty() {
            out.push(finding(
                "dependency.executable",
                format!(
                    "{who} ({}) installed executable file(s) its package.json `bin` does not declare: {}",
                    p.path,
                    p.undeclared_executables.join(", ")
                ),
            ));
        }
    }
    for h in &d.startup_hooks {
        out.push(finding(
            "dependency.startup_hook",
            format!(
                "{h}: the install left code that the environment's Python runs at every start (a .pth with an import line, or a site/usercustomize module)"
            ),
        ));
    }
    for l in &d.undeclared_bin_links {
        out.push(finding(
            "dependency.bin_link",
            format!(
                "{l}: a program on the PATH of every package script that no installed package declares as its `bin`"
            ),
        ));
    }
    for c in changes.iter().filter(|c| is_write(c)) {
        if d.in_tree(&c.path) || d.beside_tree(&c.path) {
            continue;
        }
        out.push(finding(
            "dependency.outside_write",
            format!(
                "{} was written by the install ({}) outside the package manager's tree ({})",
                show(c),
                managers.join(", "),
                if d.trees.is_empty() {
                    "none".to_string()
                } else {
                    d.trees.join(", ")
                }
            ),
        ));
    }
    let mut summary = format!(
        "dependency change by {}: {} package(s)",
        managers.join(", "),
        d.packages.len()
    );
    if !d.packages.is_empty() {
        let shown: Vec<String> = d.packages.iter().take(20).map(|p| p.shown()).collect();
        summary.push_str(": ");
        summary.push_str(&shown.join("; "));
        if d.packages.len() > 20 {
            summary.push_str(&format!("; and {} more", d.packages.len() - 20));
        }
    }
    if !d.lockfiles.is_empty() {
        summary.push_str(&format!(" (checked against {})", d.lockfiles.join(", ")));
    }
    summary.push_str("; files inside an installed package's own directory are judged per package, not against protected paths");
    notes.push(summary);
    out
}
