//! Files that run code later (issue 29, hostile round 3): every family of
//! docs/protected-paths.md, each entry written by a real command through
//! the real binary, at the workspace root and at depth, as root and as an
//! ordinary user. Each entry is named by a `protected.path` finding and the
//! run needs approval; an ordinary file written beside them is named by
//! none, and a run of lookalikes alone is promoted. The two checks that
//! need no pattern: files newly made executable outside build output
//! (`protected.executable`) and anything written into a directory on a
//! `PATH` (`protected.on_path`: the caller's, the rehearsal's own, and the
//! per-user `~/.local/bin` and `~/bin` of the owner and the caller).

mod common;
use common::*;

/// (family, entries): one file per entry, written at the root and below
/// `sub/dir/`. The findings are all here (`.ssh/authorized_keys`,
/// `.config/autostart/x.desktop`, `Cargo.toml`, `Justfile`, ...).
const FAMILIES: &[(&str, &[&str])] = &[
    (
        "shell and session start-up",
        &[
            ".bashrc",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".bash_aliases",
            ".bash_completion",
            ".bash_completion.d/x",
            ".local/share/bash-completion/completions/x",
            ".profile",
            ".inputrc",
            ".zshrc",
            ".zshenv",
            ".zprofile",
            ".zlogin",
            ".zlogout",
            ".config/zsh/.zshrc",
            ".oh-my-zsh/custom/x.zsh",
            ".kshrc",
            ".mkshrc",
            ".cshrc",
            ".tcshrc",
            ".login",
            ".logout",
            ".config/fish/config.fish",
            ".config/fish/conf.d/x.fish",
            ".config/nushell/config.nu",
            ".xonshrc",
            ".config/xonsh/rc.xsh",
            ".tmux.conf",
            ".config/tmux/tmux.conf",
            ".screenrc",
            ".xinitrc",
            ".xsession",
            ".xsessionrc",
            ".xprofile",
            ".pam_environment",
            ".config/environment.d/90-x.conf",
            ".config/autostart/x.desktop",
            ".config/plasma-workspace/env/x.sh",
            ".config/systemd/user/x.service",
            ".local/share/systemd/user/x.timer",
            ".local/share/dbus-1/services/x.service",
            ".local/share/applications/x.desktop",
            ".config/mimeapps.list",
            ".mailcap",
            ".local/bin/ls",
        ],
    ),
    (
        "login and remote access",
        &[
            ".ssh/authorized_keys",
            ".ssh/config",
            ".ssh/rc",
            ".ssh/environment",
            ".rhosts",
            ".shosts",
            ".k5login",
            ".k5users",
            ".forward",
            ".netrc",
            ".gnupg/gpg-agent.conf",
        ],
    ),
    (
        "VCS configuration and hooks",
        &[
            ".gitconfig",
            ".config/git/config",
            ".config/git/attributes",
            ".git-credentials",
            ".hgrc",
            ".hg/hgrc",
            ".config/hg/hgrc",
            ".config/jj/config.toml",
            "lefthook.yaml",
            ".lefthook.yaml",
        ],
    ),
    (
        "build and task entry points",
        &[
            "Cargo.toml",
            "rust-toolchain",
            "CMakeLists.txt",
            "cmake/x.cmake",
            "CMakePresets.json",
            "CMakeUserPresets.json",
            "build.gradle",
            "build.gradle.kts",
            "settings.gradle",
            "gradle.properties",
            "gradle/wrapper/gradle-wrapper.properties",
            "gradlew",
            "gradlew.bat",
            ".gradle/init.d/x.init",
            "pom.xml",
            ".mvn/extensions.xml",
            ".mvn/jvm.config",
            "mvnw",
            "mvnw.cmd",
            ".m2/settings.xml",
            "build.sbt",
            "project/plugins.sbt",
            "meson.build",
            "meson_options.txt",
            "meson.options",
            "BUILD",
            "BUILD.bazel",
            "WORKSPACE",
            "WORKSPACE.bazel",
            "MODULE.bazel",
            "defs.bzl",
            ".bazelrc",
            ".bazelversion",
            "SConstruct",
            "SConscript",
            "build.zig",
            "build.zig.zon",
            "go.mod",
            "go.work",
            "Justfile",
            "JUSTFILE",
            ".justfile",
            "mod.just",
            "Taskfile.yml",
            "Taskfile.yaml",
            "taskfile.yml",
            "Taskfile.dist.yml",
            "rules.mk",
            "x.mak",
            "Makefile.am",
            "Makefile.in",
            "configure",
            "configure.ac",
            "autogen.sh",
            "tasks.rake",
            "x.gemspec",
            "Containerfile",
            "docker-compose.yaml",
            "compose.yml",
            "Vagrantfile",
            "Tiltfile",
            "Earthfile",
            "Procfile",
            "Gruntfile.js",
            "gulpfile.js",
        ],
    ),
    (
        "environment loaders",
        &[
            ".envrc",
            "mise.toml",
            ".mise.toml",
            "mise.local.toml",
            ".mise.local.toml",
            ".mise/config.toml",
            "mise/config.toml",
            ".config/mise/config.toml",
            ".rtx.toml",
            ".tool-versions",
            "flake.nix",
            "shell.nix",
            "default.nix",
            "devenv.nix",
            "devenv.yaml",
        ],
    ),
    (
        "package-manager and tool configuration",
        &[
            ".npm-init.js",
            ".yarn/releases/yarn-4.cjs",
            ".yarn/plugins/x.cjs",
            ".pnpmfile.cjs",
            "pnpm-workspace.yaml",
            "bunfig.toml",
            "deno.json",
            "deno.jsonc",
            "composer.json",
            "pip.conf",
            "pip.ini",
            ".pypirc",
            "pytest.ini",
            ".bundle/config",
            ".gemrc",
            ".kube/config",
            ".aws/config",
            ".aws/credentials",
            ".docker/config.json",
            ".docker/cli-plugins/docker-x",
            ".config/gcloud/configurations/config_default",
            ".config/gh/config.yml",
            ".terraformrc",
            "terraform.rc",
            ".cargo/bin/cargo-x",
            ".cargo/env",
            ".cargo/credentials.toml",
        ],
    ),
    (
        "editor, REPL and agent configuration",
        &[
            ".vimrc",
            ".gvimrc",
            ".exrc",
            ".nvimrc",
            ".nvim.lua",
            ".vim/plugin/x.vim",
            ".config/nvim/init.lua",
            ".emacs",
            ".emacs.el",
            ".emacs.d/init.el",
            ".config/emacs/init.el",
            ".dir-locals.el",
            ".config/helix/languages.toml",
            ".config/Code/User/settings.json",
            ".zed/tasks.json",
            ".config/zed/settings.json",
            ".ipython/profile_default/startup/x.py",
            ".jupyter/jupyter_server_config.py",
            ".irbrc",
            ".pryrc",
            ".psqlrc",
            ".sqliterc",
            ".gdbinit",
            ".lldbinit",
            ".Rprofile",
            "vite.config.js",
            "jest.config.js",
            "webpack.config.cjs",
            "eslint.config.mjs",
            "vitest.config.mts",
            "tailwind.config.ts",
            "karma.conf.js",
            ".eslintrc.js",
            ".prettierrc.cjs",
            ".babelrc.js",
            ".mocharc.js",
            "babel.config.json",
            ".aider.conf.yml",
            ".continue/config.json",
            ".roo/rules/x.md",
            ".kiro/steering/x.md",
            ".windsurf/rules/x.md",
            ".amazonq/rules/x.md",
            ".github/prompts/x.prompt.md",
        ],
    ),
];

/// Where each entry is written besides the root.
const DEEP: &str = "sub/dir";

/// Ordinary files written beside the entries: named by no finding.
const ORDINARY: &[&str] = &["notes.txt", "sub/dir/notes.txt", "sub/dir/src/lib.rs"];

fn protected_reason_for(r: &Run, path: &str) -> bool {
    r.reasons()
        .iter()
        .any(|x| x.starts_with("[protected.path]") && x.contains(&format!(" {path}, ")))
}

/// Any `protected.*` finding that names `path`.
fn named_protected(r: &Run, path: &str) -> Vec<String> {
    r.reasons()
        .into_iter()
        .filter(|x| x.starts_with("[protected.") && x.contains(&format!(" {path}")))
        .filter(|x| {
            // ` path,` or ` path ` exactly, not a longer path.
            let at = x.find(&format!(" {path}")).unwrap() + 1 + path.len();
            matches!(x[at..].chars().next(), Some(',' | ' ' | ':'))
        })
        .collect()
}

/// A script that writes `paths` (creating their directories).
fn plant(paths: &[String]) -> String {
    paths
        .iter()
        .map(|p| {
            let dir = p.rsplit_once('/').map(|(d, _)| d).unwrap_or(".");
            format!("mkdir -p {} && echo planted > {}\n", sq(dir), sq(p))
        })
        .collect::<String>()
        + "exit 0\n"
}

/// Attack: with intent `**`, a command writes every entry of a family at
/// the root and at depth. Each is named, the run needs approval (exit 3),
/// and the ordinary files beside them are named by nothing.
#[test]
fn every_file_that_runs_code_later_needs_approval_at_the_root_and_at_depth() {
    for who in identities() {
        for (family, entries) in FAMILIES {
            let ws = Ws::new(who);
            let mut paths: Vec<String> = Vec::new();
            for e in *entries {
                paths.push(e.to_string());
                paths.push(format!("{DEEP}/{e}"));
            }
            paths.extend(ORDINARY.iter().map(|p| p.to_string()));
            ws.write("plant.sh", &plant(&paths));
            let r = ws.rehearse_untouched("bash plant.sh", &["--expect-write", "**"]);
            assert_ran(who, &r);
            assert_eq!(r.code, 3, "{who:?} {family}: {:#?}", r.reasons());
            assert_eq!(r.decision(), "needs_approval", "{who:?} {family}");
            let missing: Vec<&String> = paths
                .iter()
                .filter(|p| !ORDINARY.contains(&p.as_str()))
                .filter(|p| !protected_reason_for(&r, p))
                .collect();
            assert!(
                missing.is_empty(),
                "{who:?} {family}: not protected: {missing:?}\n{:#?}",
                r.reasons()
            );
            for o in ORDINARY {
                let named = named_protected(&r, o);
                assert!(named.is_empty(), "{who:?} {family}: {o} named: {named:?}");
            }
        }
    }
}

/// Lookalikes of the entries (a suffix, another case where case matters,
/// a document about them) are ordinary files: promoted.
#[test]
fn lookalikes_of_files_that_run_code_later_are_promoted() {
    for who in identities() {
        let ws = Ws::new(who);
        let paths: Vec<String> = [
            "Cargo.toml.orig",
            "CMakeLists.txt.bak",
            "pom.xml.bak",
            "vite.config.json",
            "docs/BUILDING.md",
            "docs/justfile.md",
            "notes/bashrc.md",
            "ssh-notes.txt",
            "go.sum",
            "src/configure.rs",
            "build/output.txt",
            "sub/dir/.vimrc.md",
            "sub/dir/settings.gradle.md",
            "sub/dir/profile",
            "sub/dir/local/bin/ls",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        ws.write("plant.sh", &plant(&paths));
        let r = ws.rehearse_untouched("bash plant.sh", &["--expect-write", "**"]);
        assert_ran(who, &r);
        assert_eq!(r.code, 0, "{who:?}: {:#?}", r.reasons());
    }
}

/// Attack: a new program outside build output (created executable, or an
/// existing file gaining an execute bit), at the root and at depth. Named
/// by `protected.executable`; the same in `target/`, `build/`, `dist/`,
/// `node_modules/` is the build's output, and an executable rewritten
/// keeps its bits: neither is named.
#[test]
fn files_newly_made_executable_need_approval_outside_build_output() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("old.txt", "x\n");
        ws.write("sub/dir/old.txt", "x\n");
        write_script(&ws, "tools/existing.sh", "#!/bin/sh\n");
        let r = ws.rehearse_untouched(
            "printf '#!/bin/sh\\n' > run && chmod +x run \
             && mkdir -p sub/dir && printf x > sub/dir/tool && chmod 700 sub/dir/tool \
             && chmod u+x old.txt && chmod a+x sub/dir/old.txt \
             && for d in target/debug build dist node_modules/p/bin sub/dir/target/release; do \
                  mkdir -p $d && printf x > $d/app && chmod +x $d/app; done \
             && echo more >> tools/existing.sh && printf x > notes.txt",
            &["--expect-write", "**"],
        );
        assert_ran(who, &r);
        assert_eq!(r.code, 3, "{who:?}: {:#?}", r.reasons());
        let exec = |p: &str| {
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[protected.executable]") && x.contains(&format!(" {p} (")))
        };
        for p in ["run", "sub/dir/tool", "old.txt", "sub/dir/old.txt"] {
            assert!(exec(p), "{who:?}: {p} not named: {:#?}", r.reasons());
        }
        for p in [
            "target/debug/app",
            "build/app",
            "dist/app",
            "node_modules/p/bin/app",
            "sub/dir/target/release/app",
            "tools/existing.sh",
            "notes.txt",
        ] {
            assert!(!exec(p), "{who:?}: {p} named: {:#?}", r.reasons());
        }
        // Control: build output and a rewritten executable alone promote.
        let r = ws.rehearse_untouched(
            "mkdir -p target/debug && printf x > target/debug/app && chmod +x target/debug/app \
             && echo more >> tools/existing.sh && printf x > notes.txt",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 0, "{who:?}: {:#?}", r.reasons());
    }
}

fn on_path(r: &Run, p: &str) -> bool {
    r.reasons()
        .iter()
        .any(|x| x.starts_with("[protected.on_path]") && x.contains(&format!(" {p}, ")))
}

/// Attack: a file dropped into a directory inside the workspace that a
/// `PATH` names (not executable, not matching any pattern): the caller's
/// own `PATH`, the rehearsal's (`env.PATH` in the envelope), and the
/// caller's `~/.local/bin` when the workspace is `~/.local`. Named by
/// `protected.on_path`; the same file in a directory on no `PATH` is not.
#[test]
fn files_written_into_a_directory_on_a_path_need_approval() {
    for who in identities() {
        let ws = Ws::new(who);
        let cmd =
            "mkdir -p tools/bin tools/lib && printf x > tools/bin/ls && printf x > tools/lib/ls";
        // The caller's PATH.
        let out = ws
            .command()
            .env(
                "PATH",
                format!(
                    "/usr/bin:/bin:/usr/sbin:/sbin:{}/tools/bin",
                    ws.dir.display()
                ),
            )
            .args([
                "execute",
                "--json",
                "--expect-write",
                "**",
                "--command",
                cmd,
            ])
            .output()
            .unwrap();
        let r = to_run(out);
        assert_ran(who, &r);
        assert_eq!(r.code, 3, "{who:?}: {:#?}", r.reasons());
        assert!(on_path(&r, "tools/bin/ls"), "{who:?}: {:#?}", r.reasons());
        assert!(!on_path(&r, "tools/lib/ls"), "{who:?}: {:#?}", r.reasons());
        // The rehearsal's own PATH, from the envelope.
        let env = ws.root.path().join("env.yaml");
        std::fs::write(
            &env,
            format!(
                "command: 'mkdir -p scripts && printf x > scripts/git && printf x > notes.txt'\n\
                 intent: {{expected_writes: ['**']}}\n\
                 env: {{PATH: '{}/scripts:/usr/bin:/bin'}}\n",
                ws.dir.display()
            ),
        )
        .unwrap();
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        assert_ran(who, &r);
        assert_eq!(r.code, 3, "{who:?}: {:#?}", r.reasons());
        assert!(on_path(&r, "scripts/git"), "{who:?}: {:#?}", r.reasons());
        assert!(!on_path(&r, "notes.txt"), "{who:?}: {:#?}", r.reasons());
        // The caller's ~/.local/bin, the workspace being ~/.local.
        let home = ws.dir.join("h");
        std::fs::create_dir_all(home.join(".local")).unwrap();
        ws.chown_all();
        let out = ws
            .command()
            .env("HOME", &home)
            .args(["execute", "--json", "--expect-write", "**", "--workspace"])
            .arg(home.join(".local"))
            .args([
                "--command",
                "mkdir -p bin share && printf x > bin/ls && printf x > share/ls",
            ])
            .output()
            .unwrap();
        let r = to_run(out);
        assert_ran(who, &r);
        assert_eq!(r.code, 3, "{who:?}: {:#?}", r.reasons());
        assert!(on_path(&r, "bin/ls"), "{who:?}: {:#?}", r.reasons());
        assert!(!on_path(&r, "share/ls"), "{who:?}: {:#?}", r.reasons());
        // Control: the same writes, no PATH naming them: promoted.
        let r = ws.rehearse_untouched(cmd, &["--expect-write", "**"]);
        assert_eq!(r.code, 0, "{who:?}: {:#?}", r.reasons());
    }
}
