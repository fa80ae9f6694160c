//! Attacks on the view (what a rehearsal shows of the host): every masked
//! credential store and history file of a home, read directly, listed by
//! content, through `/proc/self/root`, `/proc/PID/cwd`, a symlink and a
//! hard link in the workspace; root's home and other users' homes, by
//! path, through the PATH and through symlinks in the home; a root daemon
//! serving two users. Each attack is checked on the host side: the
//! canary's random content appears nowhere in what the run reports.
//!
//! The homes attacked belong to an account of these tests' own
//! (`dryrun-view`, with a home of its own), so that planting credential
//! files never touches a home other tests use.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::daemon::*;
use common::leaks::*;
use common::*;

/// The tests share one view user's home (a hard link one test makes
/// would fail another's run): one test at a time.
static HOME_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

const VIEW_USER: &str = "dryrun-view";

/// Every path of the view's built-in mask table that lies in a home
/// (`src/sandbox/view/table.rs`; a unit test there checks that this list
/// names each of them), and whether it is a directory.
const HOME_MASKS: &[(&str, bool)] = &[
    ("~/.ssh", true),
    ("~/.gnupg", true),
    ("~/.password-store", true),
    ("~/.local/share/keyrings", true),
    ("~/.local/share/kwalletd", true),
    ("~/.config/kwalletrc", false),
    ("~/.config/1Password", true),
    ("~/.config/op", true),
    ("~/.config/Bitwarden", true),
    ("~/.config/Bitwarden CLI", true),
    ("~/.config/keepassxc", true),
    ("~/.mozilla", true),
    ("~/.thunderbird", true),
    ("~/.config/google-chrome", true),
    ("~/.config/chromium", true),
    ("~/.config/BraveSoftware", true),
    ("~/.config/microsoft-edge", true),
    ("~/.config/vivaldi", true),
    ("~/.config/opera", true),
    ("~/snap/firefox", true),
    ("~/snap/chromium", true),
    ("~/.var/app/org.mozilla.firefox", true),
    ("~/.var/app/com.google.Chrome", true),
    ("~/.aws/credentials", false),
    ("~/.aws/sso/cache", true),
    ("~/.aws/cli/cache", true),
    ("~/.config/gcloud", true),
    ("~/.azure", true),
    ("~/.oci", true),
    ("~/.config/doctl", true),
    ("~/.config/hcloud", true),
    ("~/.terraform.d/credentials.tfrc.json", false),
    ("~/.vault-token", false),
    ("~/.config/flyctl", true),
    ("~/.terraformrc", false),
    ("~/.s3cfg", false),
    ("~/.config/rclone/rclone.conf", false),
    ("~/.cache/huggingface/token", false),
    ("~/.cache/huggingface/stored_tokens", false),
    ("~/.huggingface/token", false),
    ("~/.kaggle/kaggle.json", false),
    ("~/.config/sops/age", true),
    ("~/.age", true),
    ("~/.config/age", true),
    ("~/.kube", true),
    ("~/.docker/config.json", false),
    ("~/.config/containers/auth.json", false),
    ("~/.netrc", false),
    ("~/_netrc", false),
    ("~/.git-credentials", false),
    ("~/.config/git/credentials", false),
    ("~/.config/gh/hosts.yml", false),
    ("~/.config/glab-cli/config.yml", false),
    ("~/.config/hub", false),
    ("~/.config/tea/config.yml", false),
    ("~/.cargo/credentials.toml", false),
    ("~/.cargo/credentials", false),
    ("~/.gem/credentials", false),
    ("~/.config/composer/auth.json", false),
    ("~/.composer/auth.json", false),
    ("~/.m2/settings-security.xml", false),
    ("~/.local/share/pypoetry/auth.toml", false),
    ("~/.config/pypoetry/auth.toml", false),
    ("~/.pgpass", false),
    ("~/.my.cnf", false),
    ("~/.mylogin.cnf", false),
    ("~/.claude/.credentials.json", false),
    ("~/.claude.json", false),
    ("~/.claude/history.jsonl", false),
    ("~/.claude/projects", true),
    ("~/.codex/auth.json", false),
    ("~/.codex/history.jsonl", false),
    ("~/.codex/sessions", true),
    ("~/.config/github-copilot", true),
    ("~/.gemini/oauth_creds.json", false),
    ("~/.aider.conf.yml", false),
    ("~/.bash_history", false),
    ("~/.zsh_history", false),
    ("~/.zhistory", false),
    ("~/.histfile", false),
    ("~/.sh_history", false),
    ("~/.ksh_history", false),
    ("~/.local/share/fish/fish_history", false),
    ("~/.config/fish/fish_history", false),
    ("~/.python_history", false),
    ("~/.node_repl_history", false),
    ("~/.irb_history", false),
    ("~/.pry_history", false),
    ("~/.psql_history", false),
    ("~/.mysql_history", false),
    ("~/.sqlite_history", false),
    ("~/.rediscli_history", false),
    ("~/.lesshst", false),
    ("~/.viminfo", false),
    ("~/.Rhistory", false),
    ("~/.julia/logs/repl_history.jl", false),
];

/// This file's own account: (uid, gid, home). Created (with its home,
/// 0755, so that only the view's rules keep others out of it) when
/// missing.
fn view_user() -> (u32, u32, PathBuf) {
    static U: OnceLock<(u32, u32, PathBuf)> = OnceLock::new();
    U.get_or_init(|| common::account_with_home(VIEW_USER, "/home/dryrun-view"))
        .clone()
}

/// A workspace of this file's account, and how to run `dryrun` on it.
fn account_ws(mode: Mode) -> (Ws, Vec<String>) {
    let (u, g, _) = view_user();
    common::account_ws(mode, u, g)
}

/// `dryrun execute --json --file` of `cmd` with the account's `HOME`.
fn attack(ws: &Ws, wrapper: &[String], cmd: &str, path: &str) -> Run {
    let (_, _, home) = view_user();
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                  "env": {"HOME": home, "PATH": path}});
    execute_envelope(ws, wrapper, &body)
}

fn expand(home: &Path, p: &str) -> PathBuf {
    home.join(p.strip_prefix("~/").unwrap())
}

/// Plant a canary at every masked path of the home: a file holding it, or
/// a directory holding a file (`key`) with it. Returns the paths planted.
fn plant_masks(tag: &str) -> Vec<PathBuf> {
    let (u, g, home) = view_user();
    let mut planted = Vec::new();
    for (i, (p, dir)) in HOME_MASKS.iter().enumerate() {
        let path = expand(&home, p);
        let file = if *dir { path.join("key") } else { path.clone() };
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("CANARY-{tag}-{i}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        planted.push(path);
    }
    chown_r(&home, u, g);
    planted
}

/// Every masked path of the home, with a canary in it, read, listed,
/// searched by content, reached through `/proc/self/root`,
/// `/proc/PID/cwd` and symlinks in the workspace: nothing of any canary
/// comes back, as root's engine runs the account and as its own.
#[test]
fn every_masked_path_of_a_home_is_unreadable() {
    let _home = HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !require_root() {
        return;
    }
    let (_, _, home) = view_user();
    let tag = random_hex();
    let planted = plant_masks(&tag);
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        let mut script = String::from("exec 2>&1\n");
        for p in &planted {
            let q = sq(&p.display().to_string());
            script.push_str(&format!(
                "cat {q} {q}/key /proc/self/root{q} /proc/self/root{q}/key; ls -la {q}\n"
            ));
        }
        script.push_str(&format!(
            "grep -rs \"CANARY\"\"-{tag}\" \"$HOME\" /tmp /var/tmp /proc/self/root\"$HOME\"\n\
             (cd \"$HOME/.ssh\" && sleep 3) & sleep 1; cat /proc/$!/cwd/key; ls /proc/$!/cwd/\n\
             cat ws-link-ssh ws-link-aws ws-link-dir/key\nexit 0\n"
        ));
        write_script(&ws, "attack.sh", &script);
        for (name, to) in [
            ("ws-link-ssh", home.join(".ssh/key")),
            ("ws-link-aws", home.join(".aws/credentials")),
            ("ws-link-dir", home.join(".gnupg")),
        ] {
            std::os::unix::fs::symlink(&to, ws.dir.join(name)).unwrap();
        }
        let (u, g, _) = view_user();
        chown_r(&ws.dir, u, g);
        let r = attack(&ws, &wrapper, "./attack.sh", "/usr/bin:/bin");
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        let all = reported(&r);
        assert!(
            !all.contains(&format!("CANARY-{tag}")),
            "{mode:?}: a masked canary came back:\n{all}"
        );
        let stripped = r.stripped();
        for p in &planted {
            let want = format!("masked:{}", p.display());
            assert!(
                stripped.contains(&want),
                "{mode:?}: {want} not in {stripped:?}"
            );
        }
        // The reads of masked paths are named as what the sandbox hid.
        assert!(
            r.json["rehearsal"]["hidden"]
                .as_array()
                .is_some_and(|h| h.iter().any(|h| h["kind"] == "masked")),
            "{mode:?}: {}",
            r.json["rehearsal"]["hidden"]
        );
    }
}

/// A hard link in the workspace to a masked file (or a filtered one) is
/// the one name a path mask cannot cover: the run fails closed before
/// anything runs, naming the file and the fix, and the canary never
/// comes back.
#[test]
fn a_hard_link_to_a_masked_file_fails_the_run_closed() {
    let _home = HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !require_root() {
        return;
    }
    let (u, g, home) = view_user();
    let tag = random_hex();
    plant_masks(&tag);
    let npmrc = home.join(".npmrc");
    std::fs::write(
        &npmrc,
        format!(
            "registry=https://registry.invalid/\n//registry.invalid/:_authToken=NPMTOKEN-{tag}\n"
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&npmrc, Some(u), Some(g)).unwrap();
    for (target, linked) in [(home.join(".ssh/key"), ".ssh"), (npmrc.clone(), ".npmrc")] {
        for mode in MODES {
            let (ws, wrapper) = account_ws(mode);
            std::fs::hard_link(&target, ws.dir.join("innocent.txt")).unwrap();
            let r = attack(&ws, &wrapper, "cat innocent.txt; exit 0", "/usr/bin:/bin");
            let all = reported(&r);
            assert!(
                !all.contains(&tag),
                "{mode:?} {linked}: the linked file came back:\n{all}"
            );
            assert_eq!(r.json["state"], "failed", "{mode:?} {linked}: {r:?}");
            let err = r.json["error"].as_str().unwrap_or_default();
            assert!(
                err.contains("hard links") && err.contains(linked),
                "{mode:?} {linked}: {err}"
            );
            std::fs::remove_file(ws.dir.join("innocent.txt")).unwrap();
        }
    }
    std::fs::remove_file(&npmrc).unwrap();
}

/// A filtered file shows its settings and none of its credential lines.
#[test]
fn a_filtered_file_keeps_its_settings_and_loses_its_tokens() {
    let _home = HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !require_root() {
        return;
    }
    let (u, g, home) = view_user();
    let tag = random_hex();
    let npmrc = home.join(".npmrc");
    std::fs::write(
        &npmrc,
        format!("registry=https://registry.invalid/\n//registry.invalid/:_authToken=NPMTOKEN-{tag}\nsave-exact=true\n"),
    )
    .unwrap();
    std::fs::set_permissions(&npmrc, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&npmrc, Some(u), Some(g)).unwrap();
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        let r = attack(
            &ws,
            &wrapper,
            "cat ~/.npmrc; stat -c %a ~/.npmrc",
            "/usr/bin:/bin",
        );
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        assert_eq!(
            r.out().trim_end(),
            "registry=https://registry.invalid/\nsave-exact=true\n600",
            "{mode:?}"
        );
        assert!(!reported(&r).contains(&tag), "{mode:?}");
        let want = format!(
            "filtered:{} (1 line with credentials removed)",
            npmrc.display()
        );
        assert!(r.stripped().contains(&want), "{mode:?}: {:?}", r.stripped());
    }
    std::fs::remove_file(&npmrc).unwrap();
}

/// Symlinks and a hard link the home holds into root's files show
/// nothing of them: a symlink resolves in the view (where root's home is
/// not), a masked target is empty, and a hard link to root's private file
/// is root's file, which the command's ids may not read.
#[test]
fn links_in_a_home_to_roots_files_show_nothing() {
    let _home = HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !require_root() {
        return;
    }
    let (u, g, home) = view_user();
    let tag = random_hex();
    let canary = PathBuf::from(format!("/root/dryrun-view-canary-{tag}"));
    std::fs::write(&canary, format!("ROOT-{tag}\n")).unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600)).unwrap();
    let links = home.join(format!("links-{tag}"));
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(&canary, links.join("to-root")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", links.join("to-shadow")).unwrap();
    std::fs::hard_link(&canary, links.join("hard-root")).unwrap();
    std::os::unix::fs::chown(&links, Some(u), Some(g)).unwrap();
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        let d = links.display();
        let r = attack(
            &ws,
            &wrapper,
            &format!("cat {d}/to-root {d}/hard-root; wc -c < {d}/to-shadow; exit 0"),
            "/usr/bin:/bin",
        );
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        assert!(
            !reported(&r).contains(&format!("ROOT-{tag}")),
            "{mode:?}: {r:?}"
        );
        assert_eq!(
            r.out().trim_end(),
            "0",
            "{mode:?}: /etc/shadow through the link: {r:?}"
        );
        assert!(
            r.err().contains("Permission denied"),
            "{mode:?}: {}",
            r.err()
        );
    }
    std::fs::remove_dir_all(&links).unwrap();
    std::fs::remove_file(&canary).unwrap();
}

/// A root daemon serving two users: the test user's run sees neither
/// root's home nor the other account's (absent, not merely denied: the
/// other home is world-readable), not even through directories it puts on
/// its PATH; the other account's run (submitted by root for its
/// workspace) sees its own home and not the test user's.
#[test]
fn a_root_daemon_shows_each_user_its_own_home_only() {
    let _home = HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !require_root() {
        return;
    }
    let (vu, vg, vhome) = view_user();
    let tag = random_hex();
    let root_canary = PathBuf::from(format!("/root/dryrun-view-canary-{tag}"));
    std::fs::write(&root_canary, format!("ROOT-{tag}\n")).unwrap();
    let bin = vhome.join(format!("bin-{tag}"));
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join(format!("other-tool-{tag}"));
    std::fs::write(&tool, format!("#!/bin/sh\necho OTHER-{tag}\n")).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let other_canary = vhome.join(format!("canary-{tag}"));
    std::fs::write(&other_canary, format!("OTHER-{tag}\n")).unwrap();
    std::fs::set_permissions(&other_canary, std::fs::Permissions::from_mode(0o644)).unwrap();
    chown_r(&bin, vu, vg);
    std::os::unix::fs::chown(&other_canary, Some(vu), Some(vg)).unwrap();
    // Live, the test user could read the other account's canary and run
    // its tool: only the view keeps them out.
    let live = as_test_user("cat").arg(&other_canary).output().unwrap();
    assert!(
        String::from_utf8_lossy(&live.stdout).contains("OTHER-"),
        "{live:?}"
    );

    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let test_home = PathBuf::from(
        String::from_utf8_lossy(
            &Command::new("getent")
                .args(["passwd", TEST_USER])
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .split(':')
        .nth(5)
        .unwrap(),
    );
    let cmd = format!(
        "ls -d /root 2>&1; cat {} 2>&1; ls -A /home; cat {} 2>&1; other-tool-{tag} 2>&1; exit 0",
        root_canary.display(),
        other_canary.display()
    );
    let path = format!("/root:/root/.cargo/bin:{}:/usr/bin:/bin", bin.display());
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                  "env": {"HOME": test_home, "PATH": path}});
    let (_keep, file) = agent_envelope_file(&body.to_string());
    let r = run_json(
        d.cli_user()
            .current_dir(&ws.dir)
            .args(["execute", "--json", "--file"])
            .arg(&file)
            .output()
            .unwrap(),
    );
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    let all = reported(&r);
    assert!(
        !all.contains(&format!("ROOT-{tag}")) && !all.contains(&format!("OTHER-{tag}")),
        "{all}"
    );
    let out = r.out();
    assert!(
        out.contains("ls: cannot access '/root': No such file or directory"),
        "{out}"
    );
    assert!(
        !out.contains("Permission denied"),
        "absent, not denied: {out}"
    );
    let homes: Vec<&str> = out
        .lines()
        .filter(|l| !l.contains(' ') && !l.is_empty())
        .collect();
    let own = test_home
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        homes,
        vec![own.as_str()],
        "/home holds only the user's own home: {out}"
    );
    let hidden = strings(&r.json["rehearsal"]["stripped"]);
    assert!(
        hidden.contains(&format!("hidden:{} (view.other_home)", bin.display()))
            && !hidden.iter().any(|h| h.starts_with("hidden:/root")),
        "{hidden:?}"
    );

    // The other account's run, through the same daemon.
    let (ws2, _) = account_ws(Mode::RootEngine);
    let cmd2 = format!(
        "cat {}; ls -A {} 2>&1; exit 0",
        other_canary.display(),
        test_home.display()
    );
    let body = serde_json::json!({"command": cmd2, "working_dir": ws2.dir,
                                  "env": {"HOME": vhome, "PATH": "/usr/bin:/bin"}});
    let (_keep2, file2) = agent_envelope_file(&body.to_string());
    let r2 = run_json(
        d.cli_root()
            .current_dir(&ws2.dir)
            .args(["execute", "--json", "--file"])
            .arg(&file2)
            .output()
            .unwrap(),
    );
    assert_eq!(r2.exit_code(), Some(0), "{r2:?}");
    assert!(
        r2.out().contains(&format!("OTHER-{tag}")),
        "its own home: {r2:?}"
    );
    assert!(
        r2.out().contains("No such file or directory"),
        "{}",
        r2.out()
    );
    std::fs::remove_dir_all(&bin).unwrap();
    std::fs::remove_file(&other_canary).unwrap();
    std::fs::remove_file(&root_canary).unwrap();
}
