//! What a changed file is, apart from its path's patterns: a mode that
//! opens it to every user of the host, a gitdir pointer, a file that lands
//! in a directory on a `PATH`, a new program. Each is one function from a
//! change to a finding's message, called from the verdict's rule book.

use super::{show, verb};
use crate::model::{Change, ChangeKind, FileType};
use crate::workspace::paths::escape_for_humans;

/// How open a mode leaves an entry to every other user of the host,
/// ordered: none < a sticky world-writable directory (others may add
/// entries but not remove or rename theirs) < world-writable (others may
/// rewrite the file, or replace anything in the directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum WorldWritable {
    No,
    StickyDir,
    Open,
}

fn world_writable(mode: Option<u32>, ft: FileType) -> WorldWritable {
    let Some(m) = mode else {
        return WorldWritable::No;
    };
    match ft {
        _ if m & 0o002 == 0 => WorldWritable::No,
        FileType::Dir if m & 0o1000 != 0 => WorldWritable::StickyDir,
        FileType::Dir | FileType::File => WorldWritable::Open,
        // A link's mode means nothing; other kinds are blocked anyway.
        FileType::Symlink | FileType::Other => WorldWritable::No,
    }
}

/// The change makes an entry writable by every user of the host (created
/// so, or its mode opened up): anyone else on the machine could then plant
/// or rewrite code in the project (a `conftest.py`, a `*.pth`, a hook).
/// A sticky world-writable directory is flagged too, under its own rule:
/// the sticky bit stops others from removing or renaming entries, not from
/// adding new ones.
pub(super) fn world_writable_introduced(c: &Change) -> Option<(&'static str, &'static str)> {
    if matches!(c.kind, ChangeKind::Deleted | ChangeKind::Identical) {
        return None;
    }
    let after = world_writable(c.mode_after, c.file_type);
    let before = match c.kind {
        ChangeKind::Created => WorldWritable::No,
        _ => world_writable(c.mode_before, c.file_type),
    };
    if after <= before {
        return None;
    }
    Some(match (after, c.file_type) {
        (WorldWritable::StickyDir, _) => (
            "evidence.world_writable_sticky",
            "as a world-writable sticky directory: any user of the host can add files to it",
        ),
        (_, FileType::Dir) => (
            "evidence.world_writable",
            "as a world-writable directory without the sticky bit: any user of the host can add, replace or remove its entries",
        ),
        _ => (
            "evidence.world_writable",
            "as a world-writable file: any user of the host can rewrite it",
        ),
    })
}

/// A file, link or other non-directory created or changed directly in a
/// directory on a `PATH` (one a counted `PATH` names, or one a tool puts
/// there: [`TOOL_PATH_DIRS`]), or such a directory replaced by one: the next
/// shell that looks its name up runs it, outside any rehearsal. Deleting
/// one only lets the next `PATH` entry answer, and a directory in it is
/// never run: neither is flagged.
pub(super) fn written_into_path_dir(c: &Change, path_dirs: &[String]) -> Option<String> {
    if c.kind == ChangeKind::Deleted || c.file_type == FileType::Dir {
        return None;
    }
    let parent = c.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    fn on_path<'a>(dir: &'a str, path_dirs: &'a [String]) -> Option<&'a str> {
        path_dirs
            .iter()
            .find(|d| **d == dir)
            .map(String::as_str)
            .or_else(|| is_tool_path_dir(dir).then_some(dir))
    }
    let (dir, what) = if let Some(d) = on_path(&c.path, path_dirs) {
        (d, "replaced a directory on a PATH with something else")
    } else {
        (on_path(parent, path_dirs)?, "is in a directory on a PATH")
    };
    let dir = if dir.is_empty() {
        "the workspace root (named by a relative PATH entry)".to_string()
    } else {
        format!("{}/", escape_for_humans(dir.as_bytes()))
    };
    Some(format!(
        "{} {}, which {what} ({dir}): a shell that looks its name up runs it later, outside any rehearsal",
        verb(c),
        show(c)
    ))
}

/// Directories (at any depth, workspace-relative) that a tool puts on the
/// `PATH` of everything it runs, whatever the caller's own `PATH` says:
/// npm, yarn, pnpm and bun run every package script (`test`, `build`,
/// `postinstall`) with the package's `node_modules/.bin` (and its
/// ancestors') first, and `npx` looks there first, so a file there named
/// `node` or `git` is what the project's next script runs.
const TOOL_PATH_DIRS: &[&str] = &["node_modules/.bin"];

/// Whether `dir` (workspace-relative) is one of [`TOOL_PATH_DIRS`].
fn is_tool_path_dir(dir: &str) -> bool {
    TOOL_PATH_DIRS.iter().any(|d| {
        dir == *d
            || dir
                .strip_suffix(d)
                .is_some_and(|above| above.ends_with('/'))
    })
}

/// Directories (at any depth) whose files are build or install output:
/// a compiler's binaries, a bundler's output, installed packages and
/// their entry points, byte-code caches, virtual environments. A file
/// made executable there is what the build makes, not a new entry point
/// into the owner's world (what a build runs is guarded at its entry
/// points: `build.rs`, `Makefile`, `package.json`, ... are protected).
pub(crate) const BUILD_OUTPUT_DIRS: &[&str] = &[
    "target",
    "build",
    "dist",
    "node_modules",
    "__pycache__",
    ".venv",
    ".tox",
    ".nox",
];

/// A regular file created executable, or gaining an execute bit, outside
/// [`BUILD_OUTPUT_DIRS`]: a new program someone (or something: a hook, a
/// PATH lookup, a `./x` in a script) runs later, outside any rehearsal.
/// An executable file rewritten keeps its bits and is not flagged here
/// (what runs it is guarded by its own patterns).
pub(super) fn newly_executable(c: &Change) -> Option<String> {
    if c.file_type != FileType::File || matches!(c.kind, ChangeKind::Deleted) {
        return None;
    }
    // Modes are permission bits. What came before counts only for the
    // same regular file: a metadata change, or a rewrite of a file whose
    // content was hashed (a type change, say a directory replaced by a
    // file, has no hash before and counts as new: fails closed).
    let after = c.mode_after.unwrap_or(0) & 0o111;
    let before = match c.kind {
        ChangeKind::Metadata => c.mode_before.unwrap_or(0) & 0o111,
        ChangeKind::Modified if c.before.is_some() => c.mode_before.unwrap_or(0) & 0o111,
        _ => 0,
    };
    if after & !before == 0 {
        return None;
    }
    let dirs = c.path.split('/').rev().skip(1);
    if dirs.into_iter().any(|d| BUILD_OUTPUT_DIRS.contains(&d)) {
        return None;
    }
    let how = if c.kind == ChangeKind::Created {
        "created executable"
    } else {
        "made executable"
    };
    Some(format!(
        "{} {} (mode {:o}): {how} outside build output directories, a new program that runs later, outside any rehearsal",
        verb(c),
        show(c),
        c.mode_after.unwrap_or(0) & 0o7777
    ))
}

/// A `.git` entry (at any depth) that is not a directory: a worktree's or
/// submodule's `gitdir:` file, or a link. Rewriting it points git at a
/// directory whose `config` (`core.fsmonitor`, hooks path) the next
/// `git status` obeys, so creating or changing one is protected whatever
/// the policy's patterns say.
pub(super) fn is_gitdir_pointer(c: &Change) -> bool {
    let name = c.path.rsplit('/').next().unwrap_or(&c.path);
    name == ".git" && c.kind != ChangeKind::Deleted && c.file_type != FileType::Dir
}

/// An identical rewrite is no write to the verdict (nothing about it is
/// judged), yet the live lane gives a mutating run's the time the command
/// left: only where the intent expects writes, outside its forbidden and
/// the protected paths, does that time stay in the evidence. Elsewhere it
/// is dropped, so a promotion sets no time the verdict never weighed (a
/// `touch` of a Makefile or a hook in a script the intent did not name
/// went live unasked).
pub(crate) fn keep_only_judged_times(
    spec: &crate::envelope::EnvelopeSpec,
    protected: Option<&crate::workspace::paths::PathMatcher>,
    changes: &mut [Change],
) {
    for c in changes.iter_mut() {
        if c.kind != ChangeKind::Identical || c.mtime_after_ns.is_none() {
            continue;
        }
        let p = c.path_bytes();
        let judged = spec.mode == crate::envelope::Mode::Mutating
            && spec.expected_writes.matches(&p)
            && !spec.forbidden.matches(&p)
            && !protected.is_some_and(|m| m.matches(&p));
        if !judged {
            c.mtime_after_ns = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{change, ok_report, spec, with_modes};
    use super::super::{Decision, JudgeContext, judge, judge_with};
    use crate::model::{ChangeKind, FileType, HostReport};

    #[test]
    fn files_newly_executable_outside_build_output_need_approval() {
        let s = spec("command: x\nintent: {expected_writes: ['**']}\n");
        let cases = [
            ("run.sh", ChangeKind::Created, None, Some(0o755), true),
            ("a/b/tool", ChangeKind::Created, None, Some(0o700), true),
            ("notes.txt", ChangeKind::Created, None, Some(0o644), false),
            // Gaining a bit, at any depth.
            ("x/y", ChangeKind::Metadata, Some(0o644), Some(0o744), true),
            // Already executable: rewritten, not new.
            (
                "bin2/z",
                ChangeKind::Modified,
                Some(0o755),
                Some(0o755),
                false,
            ),
            // Build output at any depth.
            (
                "target/debug/app",
                ChangeKind::Created,
                None,
                Some(0o755),
                false,
            ),
            (
                "crates/c/target/release/c",
                ChangeKind::Created,
                None,
                Some(0o755),
                false,
            ),
            (
                "web/node_modules/pkg/bin/cli.js",
                ChangeKind::Created,
                None,
                Some(0o755),
                false,
            ),
            // A directory named like one, as the file itself: flagged.
            ("build", ChangeKind::Created, None, Some(0o755), true),
            // A type change (no hash before): new, whatever the old mode.
            ("x/z", ChangeKind::Modified, Some(0o755), Some(0o755), true),
        ];
        for (path, kind, before, after, flagged) in cases {
            let mut c = with_modes(change(path, kind, FileType::File), before, after);
            if path == "x/z" {
                c.before = None;
            }
            let v = judge(&s, &ok_report(vec![c]), &HostReport::default());
            assert_eq!(
                v.findings.iter().any(|f| f.rule == "protected.executable"),
                flagged,
                "{path}: {:?}",
                v.reasons
            );
            if flagged {
                assert!(v.decision >= Decision::NeedsApproval, "{path}");
            }
        }
    }

    #[test]
    fn writes_into_a_path_directory_need_approval() {
        let s = spec("command: x\nintent: {expected_writes: ['**']}\n");
        let dirs = vec!["".to_string(), ".local/bin".to_string()];
        let cx = JudgeContext {
            path_dirs: &dirs,
            ..Default::default()
        };
        for (path, kind, ft, flagged) in [
            (".local/bin/ls", ChangeKind::Created, FileType::File, true),
            (
                ".local/bin/ls",
                ChangeKind::Created,
                FileType::Symlink,
                true,
            ),
            (".local/bin/ls", ChangeKind::Deleted, FileType::File, false),
            (".local/bin/sub", ChangeKind::Created, FileType::Dir, false),
            (
                ".local/bin/sub/x",
                ChangeKind::Created,
                FileType::File,
                false,
            ),
            (".local/bin", ChangeKind::Created, FileType::Symlink, true),
            // The root is on the PATH (a relative entry).
            ("tool", ChangeKind::Created, FileType::File, true),
            // On the PATH of every package script, at any depth.
            (
                "node_modules/.bin/node",
                ChangeKind::Created,
                FileType::Symlink,
                true,
            ),
            (
                "web/node_modules/.bin/git",
                ChangeKind::Modified,
                FileType::File,
                true,
            ),
            (
                "node_modules/pkg/bin/cli.js",
                ChangeKind::Created,
                FileType::File,
                false,
            ),
            (
                "x_node_modules/.bin/y",
                ChangeKind::Created,
                FileType::File,
                false,
            ),
            ("src/main.rs", ChangeKind::Created, FileType::File, false),
        ] {
            let v = judge_with(
                &s,
                &ok_report(vec![change(path, kind, ft)]),
                &HostReport::default(),
                &cx,
            );
            assert_eq!(
                v.findings.iter().any(|f| f.rule == "protected.on_path"),
                flagged,
                "{path} {kind:?} {ft:?}: {:?}",
                v.reasons
            );
        }
    }
}
