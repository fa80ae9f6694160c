//! Protected paths: where an agent persists (code that runs later, for the
//! owner, outside any rehearsal). Each is attempted by a real command at
//! depth, as root and as an ordinary user: the run needs approval, names
//! the path and the pattern, and cannot be promoted without a reviewer.

mod common;
use common::*;

/// Every protected path of the issue, placed below the workspace root
/// (and at the root where that is the only place it means anything).
const NESTED: &[&str] = &[
    "a/b/.git/hooks/pre-commit",
    ".git/hooks/post-checkout",
    "sub/.git/config",
    ".git/info/attributes",
    ".git/modules/lib/config",
    ".git/modules/lib/hooks/post-merge",
    ".git/modules/lib/modules/inner/config",
    ".git/worktrees/feature/config.worktree",
    "vendor/x/.gitmodules",
    "docs/.gitattributes",
    "web/.husky/pre-commit",
    "tools/.githooks/pre-push",
    "svc/.envrc",
    "svc/.pre-commit-config.yaml",
    "sub/pkg/package.json",
    "sub/Makefile",
    "sub/makefile",
    "sub/GNUmakefile",
    "tests/unit/conftest.py",
    "py/setup.py",
    "py/setup.cfg",
    "py/pyproject.toml",
    "py/tox.ini",
    "py/noxfile.py",
    ".venv/lib/python3.12/site-packages/evil.pth",
    "lib/sitecustomize.py",
    "lib/usercustomize.py",
    "crates/c/build.rs",
    "crates/c/.cargo/config.toml",
    "crates/c/.cargo/config",
    "web/.npmrc",
    "web/.yarnrc",
    "web/.yarnrc.yml",
    "pkg/CLAUDE.md",
    "pkg/AGENTS.md",
    "pkg/GEMINI.md",
    "pkg/.cursorrules",
    "pkg/.cursor/rules/x.mdc",
    "pkg/.claude/settings.json",
    "pkg/.gemini/settings.json",
    "pkg/.codex/config.toml",
    "pkg/.github/copilot-instructions.md",
    "pkg/.github/workflows/ci.yml",
    "pkg/.vscode/settings.json",
    "pkg/.vscode/tasks.json",
    "pkg/.mcp.json",
    "pkg/.idea/workspace.xml",
    "sub/.dryrun/policy.yaml",
];

fn protected_reason_for(r: &Run, path: &str) -> bool {
    r.reasons()
        .iter()
        .any(|x| x.starts_with("[protected.path]") && x.contains(&format!(" {path}, ")))
}

#[test]
fn every_protected_path_at_any_depth_needs_approval() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("README.md", "hi\n");
        let script: String = NESTED
            .iter()
            .map(|p| {
                let dir = p.rsplit_once('/').map(|(d, _)| d).unwrap_or(".");
                format!("mkdir -p '{dir}' && echo planted > '{p}'\n")
            })
            .collect();
        ws.write("plant.sh", &script);
        let r = ws.rehearse_untouched("bash plant.sh", &["--expect-write", "**"]);
        assert_ran(who, &r);
        assert_eq!(r.code, 3, "{who:?}: {:?}", r.reasons());
        assert_eq!(r.decision(), "needs_approval");
        let missing: Vec<&&str> = NESTED
            .iter()
            .filter(|p| !protected_reason_for(&r, p))
            .collect();
        assert!(
            missing.is_empty(),
            "{who:?}: not protected: {missing:?}\n{:#?}",
            r.reasons()
        );
        // The reason names the pattern that matched.
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.contains(" sub/pkg/package.json, a protected path (package.json)")),
            "{:#?}",
            r.reasons()
        );
        // Never promoted without a reviewer.
        let id = r.json["run_id"].as_str().unwrap();
        let before = ws.snapshot();
        let out = ws.command().args(["promote", id]).output().unwrap();
        assert_eq!(out.status.code(), Some(4), "{who:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("awaiting approval"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(ws.snapshot(), before);
    }
}

/// Ordinary files next to the protected ones promote: the patterns match
/// whole names, not prefixes.
#[test]
fn lookalikes_are_not_protected() {
    let ws = Ws::new(Who::User);
    let r = ws.rehearse_untouched(
        "mkdir -p sub/.git.d docs && echo x > sub/package.json.bak && echo x > docs/Makefile.md \
         && echo x > sub/.git.d/config && echo x > notes.pth.txt && echo x > .github-notes \
         && mkdir -p examples && echo x > examples/dryrun.yaml",
        &["--expect-write", "**"],
    );
    assert_eq!(r.code, 0, "{:?}", r.reasons());
}

/// A `.git` that is a file is a gitdir pointer: rewriting it sends the
/// owner's next `git status` to a directory whose config the agent wrote
/// (`core.fsmonitor` runs a command). Created, modified or turned into a
/// link, at the root or deeper: approval.
#[test]
fn a_git_file_that_redirects_the_gitdir_needs_approval() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write(".git", "gitdir: /home/me/src/main/.git/worktrees/ws\n");
        ws.write("lib/.git", "gitdir: ../.git/modules/lib\n");
        let r = ws.rehearse_untouched(
            "mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > evil/config \
             && echo 'gitdir: evil' > .git && ln -sfn ../evil lib/.git \
             && mkdir -p new && echo 'gitdir: ../evil' > new/.git",
            &["--expect-write", "**"],
        );
        assert_ran(who, &r);
        assert_eq!(r.code, 3, "{who:?}: {:?}", r.reasons());
        for p in [".git", "lib/.git", "new/.git"] {
            assert!(
                r.reasons().iter().any(|x| x.starts_with("[protected.path]")
                    && x.contains(&format!(
                        " {p}, a protected path (a .git that is not a directory"
                    ))),
                "{who:?} {p}: {:#?}",
                r.reasons()
            );
        }
    }
}

/// The workspace's `.dryrun/` is protected whatever the policy files say
/// (at the root, where dryrun reads it, it is forbidden to every run: the
/// engine's built-in forbidden paths), and a workspace policy adds
/// patterns (a leading `/` anchors one at the root).
#[test]
fn dryrun_dir_is_always_protected_and_a_workspace_policy_only_adds() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write(
            ".dryrun/policy.yaml",
            "protected_paths: [\"deploy/\", \"/release.txt\"]\n",
        );
        let r = ws.rehearse_untouched(
            "echo 'rules: []' > .dryrun/policy.yaml",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 4, "{who:?}: {:?}", r.reasons());
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[intent.forbidden_paths]")
                    && x.contains(" .dryrun/policy.yaml which intent forbids (.dryrun/)")),
            "{:?}",
            r.reasons()
        );
        let r = ws.rehearse_untouched(
            "mkdir -p sub/.dryrun && echo 'rules: []' > sub/.dryrun/policy.yaml",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 3, "{who:?}: {:?}", r.reasons());
        assert!(
            protected_reason_for(&r, "sub/.dryrun/policy.yaml"),
            "{:?}",
            r.reasons()
        );
        let r = ws.rehearse_untouched(
            "mkdir -p x/deploy && echo 1 > x/deploy/run.sh && echo 1 > release.txt",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 3, "{who:?}: {:?}", r.reasons());
        assert!(
            protected_reason_for(&r, "x/deploy/run.sh"),
            "{:?}",
            r.reasons()
        );
        assert!(protected_reason_for(&r, "release.txt"), "{:?}", r.reasons());
        // Anchored: the same name deeper is not protected.
        let r = ws.rehearse_untouched(
            "mkdir -p x && echo 1 > x/release.txt",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 0, "{who:?}: {:?}", r.reasons());
    }
}
