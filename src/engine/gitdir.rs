//! The workspace root's repository, wherever its own pointer and
//! configuration put the parts git runs: `.git/hooks/` and `.git/config`
//! are protected by pattern, but git runs the hooks of `core.hooksPath`
//! (`scripts/git-hooks/`), reads the config files `include.path` and
//! `includeIf.*.path` name, runs the `core.fsmonitor` program, and takes
//! a `.git` file's `gitdir:` as the repository (`--separate-git-dir`).
//! When those lie inside the workspace, a run that rewrites them changes
//! what the next `git commit` or `git status` runs, exactly as rewriting
//! `.git/hooks/pre-commit` would; so they are protected for the run too
//! (root-anchored patterns added to the policy's for this run).
//!
//! Read before the rehearsal, with the workspace owner's rights through
//! the owner session (no links followed, regular files only, capped), from
//! the workspace as it is: what the run itself changes there (`.git`,
//! `.git/config`) is protected by pattern already. Links are read, never
//! followed: a `.git` that is a link, a hooks directory that is one, and
//! each hook git runs that is one (`pre-commit -> ../../scripts/pre-commit`)
//! name what they point at inside the workspace, and that is protected.

use std::path::{Component, Path, PathBuf};

use crate::workspace::apply::Identity;
use crate::workspace::owner::OwnerSession;

/// The hooks git runs (githooks(5)), by name in the hooks directory.
const HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// The most of one `.git` pointer or config file read.
const MAX_READ: u64 = 1 << 20;
/// Included config files followed, at most (git allows ten levels).
const MAX_INCLUDES: usize = 16;

/// Root-anchored protected patterns for the parts of the workspace root's
/// repository that its pointer and configuration put elsewhere in the
/// workspace (none when there is no repository, or nothing lies
/// elsewhere). Whatever cannot be read is left out: the patterns only add.
pub(super) fn repository_patterns(
    owner: &OwnerSession,
    workspace: &Path,
    identity: &Identity,
) -> Vec<String> {
    let read = |rel: &Path| -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        owner
            .read_file(workspace, identity, rel.as_os_str().as_bytes(), MAX_READ)
            .ok()
            .flatten()
    };
    let links = |rels: &[PathBuf]| -> Vec<Option<PathBuf>> {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let raw: Vec<Vec<u8>> = rels
            .iter()
            .map(|r| r.as_os_str().as_bytes().to_vec())
            .collect();
        owner
            .symlink_targets(workspace, identity, &raw)
            .unwrap_or_else(|_| vec![None; rels.len()])
            .into_iter()
            .map(|t| t.map(|t| PathBuf::from(std::ffi::OsString::from_vec(t))))
            .collect()
    };
    let mut out = Vec::new();
    // A `.git` link or `gitdir:` file names the repository's directory.
    let dot_git = Path::new(".git");
    let named = match links(&[dot_git.to_path_buf()]).pop().flatten() {
        Some(target) => Some(inside(workspace, Path::new(""), &target)),
        None => read(dot_git)
            .map(|text| pointer(&text).and_then(|p| inside(workspace, Path::new(""), &p))),
    };
    let gitdir = match named {
        Some(Some(dir)) => {
            for part in ["config", "config.worktree", "hooks/", "info/", "commondir"] {
                out.push(anchored(&dir, part));
            }
            dir
        }
        // A pointer outside the workspace, or one that names nothing.
        Some(None) => return out,
        None => PathBuf::from(".git"),
    };
    // Its config, and the files it includes.
    let mut configs = vec![gitdir.join("config")];
    let mut seen = 0;
    let mut has_config = false;
    while let Some(cfg) = configs.pop() {
        seen += 1;
        if seen > MAX_INCLUDES {
            break;
        }
        let Some(text) = read(&cfg) else { continue };
        has_config |= seen == 1;
        let cfg_dir = cfg.parent().unwrap_or(Path::new("")).to_path_buf();
        for (key, value) in entries(&String::from_utf8_lossy(&text)) {
            let (base, dir) = match key.as_str() {
                "core.hookspath" => (Path::new(""), true),
                "core.fsmonitor" if !is_bool(&value) => (Path::new(""), false),
                k if k == "include.path"
                    || (k.starts_with("includeif.") && k.ends_with(".path")) =>
                {
                    (cfg_dir.as_path(), false)
                }
                _ => continue,
            };
            let Some(rel) = inside(workspace, base, Path::new(&value)) else {
                continue;
            };
            if key != "core.hookspath" && key != "core.fsmonitor" {
                configs.push(rel.clone());
            }
            out.push(anchored(&rel, if dir { "/" } else { "" }));
        }
    }
    // Its hooks directory, and each hook git runs, when they are links to
    // elsewhere in the workspace (`ln -s ../../scripts/pre-commit`); not
    // asked where there is no repository (no config could be read).
    if !has_config {
        return out;
    }
    let hooks = gitdir.join("hooks");
    let mut asked = vec![hooks.clone()];
    asked.extend(HOOKS.iter().map(|h| hooks.join(h)));
    for (i, (rel, target)) in asked.iter().zip(links(&asked)).enumerate() {
        let Some(target) = target else { continue };
        let base = rel.parent().unwrap_or(Path::new(""));
        if let Some(t) = inside(workspace, base, &target) {
            out.push(anchored(&t, if i == 0 { "/" } else { "" }));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A `.git` file's `gitdir: PATH`.
fn pointer(text: &[u8]) -> Option<PathBuf> {
    let text = String::from_utf8_lossy(text);
    let line = text.lines().next()?;
    let p = line.strip_prefix("gitdir:")?.trim();
    (!p.is_empty()).then(|| PathBuf::from(p))
}

/// `p` (absolute, or relative to `base`, itself relative to the workspace
/// root), as a path relative to the workspace root when it lies inside it
/// (not the root itself); `None` outside, or for `~` paths (a home's).
fn inside(workspace: &Path, base: &Path, p: &Path) -> Option<PathBuf> {
    if p.as_os_str().is_empty() || p.starts_with("~") {
        return None;
    }
    let rel = if p.is_absolute() {
        p.strip_prefix(workspace).ok()?.to_path_buf()
    } else {
        base.join(p)
    };
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// `/REL` + `suffix` as a root-anchored pattern, glob characters of the
/// path escaped.
fn anchored(rel: &Path, suffix: &str) -> String {
    let mut s = String::from("/");
    for ch in rel.to_string_lossy().chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            s.push('\\');
        }
        s.push(ch);
    }
    if !suffix.is_empty() {
        if !suffix.starts_with('/') {
            s.push('/');
        }
        s.push_str(suffix);
    }
    s
}

fn is_bool(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
    )
}

/// A git config file's `section[.subsection].key = value` entries, the
/// section and key lowercased (as git compares them), values unquoted.
fn entries(text: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some(end) = rest.find(']') else { continue };
            let head = rest[..end].trim();
            section = match head.split_once(char::is_whitespace) {
                Some((name, sub)) => format!(
                    "{}.{}",
                    name.to_ascii_lowercase(),
                    sub.trim().trim_matches('"')
                ),
                None => head.to_ascii_lowercase(),
            };
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), unquote(v)),
            None => (line, String::new()),
        };
        out.push((format!("{section}.{}", key.to_ascii_lowercase()), value));
    }
    out
}

/// A config value: comments cut, quotes removed, `\"` and `\\` undone.
fn unquote(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(match n {
                        't' => '\t',
                        'n' => '\n',
                        other => other,
                    });
                }
            }
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_entries_are_read_as_git_reads_them() {
        let e = entries(
            "[core]\n\thooksPath = \"scripts/git hooks\" # here\n\tbare = false\n\
             [includeIf \"gitdir:~/work/\"]\n\tpath = ../shared.gitconfig\n\
             [Include]\n  PATH=extra.cfg\n",
        );
        assert!(e.contains(&("core.hookspath".into(), "scripts/git hooks".into())));
        assert!(e.contains(&(
            "includeif.gitdir:~/work/.path".into(),
            "../shared.gitconfig".into()
        )));
        assert!(e.contains(&("include.path".into(), "extra.cfg".into())));
    }

    #[test]
    fn paths_count_only_inside_the_workspace() {
        let ws = Path::new("/srv/ws");
        let base = Path::new(".git");
        assert_eq!(
            inside(ws, base, Path::new("../shared.gitconfig")),
            Some(PathBuf::from("shared.gitconfig"))
        );
        assert_eq!(
            inside(ws, Path::new(""), Path::new("/srv/ws/tools/hooks")),
            Some(PathBuf::from("tools/hooks"))
        );
        assert_eq!(inside(ws, base, Path::new("../../etc/gitconfig")), None);
        assert_eq!(inside(ws, Path::new(""), Path::new("/etc/hooks")), None);
        assert_eq!(inside(ws, Path::new(""), Path::new("~/hooks")), None);
        assert_eq!(inside(ws, Path::new(""), Path::new(".")), None);
        assert_eq!(
            pointer(b"gitdir: ../repo.git\n"),
            Some(PathBuf::from("../repo.git"))
        );
        assert_eq!(anchored(Path::new("a[1]/h*"), "/"), "/a\\[1\\]/h\\*/");
    }
}
