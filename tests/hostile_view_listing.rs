//! A hostile agent against two latency shortcuts (issues 30 and 31): the
//! view's masks answered by directory listings, and the hook's guard that
//! lets a command through without a parse when its text cannot name
//! dryrun.
//!
//! The listings: credential files planted beside every trick a listing
//! could be fooled by (more than 4096 siblings, case twins, names with a
//! newline, non-ASCII and invalid UTF-8 names, parents that are relative,
//! absolute and looping symlinks, a directory its owner may search but
//! not list, backups of masked files, a host process churning the
//! directories during set-up, `HOME` spelled other ways, a workspace
//! inside the home), read by the command (through root's engine, the
//! account's own and a root daemon), copied into the workspace and
//! reversed; judged on the host side: each secret's unique content is in
//! nothing the run reports and in no file of its state directory.
//!
//! The guard: spellings of `dryrun approve` that reach the binary through
//! the shell's pattern matching (extended globs, globs, brace expansion)
//! must be denied like the plain one.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use common::hook::*;
use common::leaks::*;
use common::*;

/// The tests share one account's home: one test at a time.
static HOME_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

const HVL_USER: &str = "dryrun-hvl";

fn lock() -> std::sync::MutexGuard<'static, ()> {
    HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// This file's own account: (uid, gid, home).
fn hvl_user() -> (u32, u32, PathBuf) {
    static U: OnceLock<(u32, u32, PathBuf)> = OnceLock::new();
    U.get_or_init(|| common::account_with_home(HVL_USER, "/home/dryrun-hvl"))
        .clone()
}

/// What [`plant`] planted: the paths a command reads the credentials by,
/// their contents, and the decoy.
type Plants = (Vec<&'static str>, Vec<String>, String);

/// The account's ids, a fresh home with the credentials planted in it
/// (each with content of this run's own), and [`plant`]'s paths, secrets
/// and decoy.
fn planted() -> (u32, u32, PathBuf, Plants) {
    let (u, g, _) = hvl_user();
    let home = fresh_home();
    let planted = plant(&home, &random_hex());
    (u, g, home, planted)
}

/// A fresh home for the account (its own, 0755).
fn fresh_home() -> PathBuf {
    let (u, g, home) = hvl_user();
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(u), Some(g)).unwrap();
    home
}

/// A file of the account's (0600), its missing directories made.
fn put(p: &Path, content: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Everything under the home owned by the account.
fn own_home() {
    let (u, g, home) = hvl_user();
    chown_r(&home, u, g);
}

/// Files under `dir` holding `needle` (records, kept content, journal).
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| {
            e.file_type().is_file()
                && std::fs::read(e.path())
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .map(|e| e.path().to_path_buf())
        .collect()
}

/// `dryrun execute --json --file` of `cmd` in `dir` with `HOME=home`.
fn attack_in(ws: &Ws, wrapper: &[String], dir: &Path, home: &str, cmd: &str) -> Run {
    let (u, g, _) = hvl_user();
    let body = serde_json::json!({"command": cmd, "working_dir": dir,
                                  "env": {"HOME": home, "PATH": "/usr/bin:/bin"}});
    let p = ws.root.path().join(format!("attack-{}.json", random_hex()));
    std::fs::write(&p, body.to_string()).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    chown_r(&ws.dir, u, g);
    to_run(
        ws.command_via(wrapper)
            .args(["execute", "--json", "--file"])
            .arg(&p)
            .output()
            .unwrap(),
    )
}

/// The command that reads each of `rels` (relative to `~`) every way:
/// `cat`, reversed, and copied into the workspace.
fn reader(rels: &[&str]) -> String {
    rels.iter()
        .enumerate()
        .map(|(i, rel)| format!("cat ~/{rel}; rev ~/{rel}; cat ~/{rel} > leak-{i}.txt"))
        .collect::<Vec<_>>()
        .join("; ")
        + "; exit 0"
}

/// The run ran, showed `decoy` (the directories were served), and no
/// secret of `secrets` is in its answer or its state directory.
fn assert_masked(what: &str, r: &Run, state: &Path, decoy: &str, secrets: &[String]) {
    assert_eq!(r.exit_code(), Some(0), "{what}: {r:?}");
    let all = reported(r);
    assert!(
        all.contains(decoy),
        "{what}: the decoy was not read:\n{all}"
    );
    assert_no_secret(what, r, state, secrets);
}

/// No secret of `secrets` in the run's answer or its state directory.
fn assert_no_secret(what: &str, r: &Run, state: &Path, secrets: &[String]) {
    let all = reported(r);
    for s in secrets {
        assert!(!leaked(&all, s), "{what}: {s} came back:\n{all}");
        let hits = files_holding(state, s);
        assert!(hits.is_empty(), "{what}: {s} stored in {hits:?}");
    }
}

/// Plants credential files beside every trick a listing could be fooled
/// by; returns the paths the command reads (relative to `~`) and their
/// secrets. The decoy (`~/.aws/CREDENTIALS`, not a masked name on a
/// case-sensitive file system) must be read.
fn plant(home: &Path, tag: &str) -> Plants {
    let secret = |w: &str| format!("HVL{w}-{tag}");
    let mut secrets = Vec::new();
    let mut rels = Vec::new();
    std::fs::create_dir_all(home.join("real-kube")).unwrap();
    std::os::unix::fs::symlink("real-kube", home.join(".kube")).unwrap();
    std::fs::create_dir_all(home.join("abs-docker")).unwrap();
    std::os::unix::fs::symlink(home.join("abs-docker"), home.join(".docker")).unwrap();
    let mut plant_one = |rel: &'static str, w: &str| {
        put(&home.join(rel), format!("{}\n", secret(w)).as_bytes());
        secrets.push(secret(w));
        rels.push(rel);
    };
    // A key in a masked directory.
    plant_one(".ssh/id_ed25519", "SSH");
    // A masked file and its backups among more than 4096 siblings (twice
    // the cap: a listing cut at the cap would miss one of the seven), a
    // case twin and a name with a newline.
    plant_one(".aws/credentials", "AWS");
    plant_one(".aws/credentials~", "AWSTILDE");
    plant_one(".aws/credentials.bak", "AWSBAK");
    plant_one(".aws/credentials.orig", "AWSORIG");
    plant_one(".aws/credentials.old", "AWSOLD");
    plant_one(".aws/.credentials.swp", "AWSSWP");
    plant_one(".aws/#credentials#", "AWSHASH");
    for i in 0..8200 {
        put(&home.join(format!(".aws/profile.{i:04}")), b"x\n");
    }
    let decoy = format!("HVLDECOY-{tag}");
    put(
        &home.join(".aws/CREDENTIALS"),
        format!("{decoy}\n").as_bytes(),
    );
    put(&home.join(".aws/credentials\nx"), b"x\n");
    // Non-ASCII and invalid UTF-8 names beside a masked file.
    plant_one(".config/gh/hosts.yml", "GH");
    put(&home.join(".config/gh/caf\u{e9}"), b"x\n");
    put(
        &home
            .join(".config/gh")
            .join(std::ffi::OsStr::from_bytes(b"\xff\xfe")),
        b"x\n",
    );
    // Parents that are relative and absolute symlinks (written through).
    plant_one(".kube/config", "KUBE");
    plant_one(".docker/config.json", "DOCKER");
    // A parent that loops.
    std::fs::create_dir_all(home.join(".config")).unwrap();
    std::os::unix::fs::symlink("containers", home.join(".config/containers")).unwrap();
    // A masked file and its editor's backups.
    plant_one(".netrc", "NETRC");
    plant_one(".netrc~", "NETRCBAK");
    plant_one("..netrc.swp", "NETRCSWP");
    plant_one("#.netrc#", "NETRCHASH");
    // A directory its owner may search but not list.
    plant_one(".config/git/credentials", "GITCRED");
    own_home();
    std::fs::set_permissions(
        home.join(".config/git"),
        std::fs::Permissions::from_mode(0o100),
    )
    .unwrap();
    (rels, secrets, decoy)
}

/// Every listing trick at once, through root's engine and the account's
/// own: no secret comes back, none is copied into the workspace.
#[test]
fn listing_tricks_leave_every_mask_in_place() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home, (rels, secrets, decoy)) = planted();
    let mut cmd = reader(&rels);
    cmd = format!("cat ~/.aws/CREDENTIALS; {cmd}");
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode, u, g);
        let r = attack_in(&ws, &wrapper, &ws.dir, home.to_str().unwrap(), &cmd);
        assert_masked(&format!("{mode:?}"), &r, &ws.state, &decoy, &secrets);
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// `HOME` spelled other ways (a trailing `/.`, a climb through `..`, a
/// symlink to it) and a workspace inside the home: the masks follow.
#[test]
fn a_home_spelled_otherwise_or_holding_the_workspace_keeps_its_masks() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home, (rels, secrets, decoy)) = planted();
    let link_dir = tempfile::Builder::new()
        .prefix("dryrun-hvl-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(link_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = link_dir.path().join("h");
    std::os::unix::fs::symlink(&home, &link).unwrap();
    let cmd = format!("cat ~/.aws/CREDENTIALS; {}", reader(&rels));
    let h = home.display().to_string();
    for spelled in [
        format!("{h}/."),
        format!("{h}/"),
        format!("/home/../{}", h.trim_start_matches('/')),
    ] {
        for mode in MODES {
            let (ws, wrapper) = account_ws(mode, u, g);
            let r = attack_in(&ws, &wrapper, &ws.dir, &spelled, &cmd);
            assert_masked(
                &format!("HOME={spelled} {mode:?}"),
                &r,
                &ws.state,
                &decoy,
                &secrets,
            );
        }
    }
    // A symlink to the home: refused at set-up today, or served masked.
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode, u, g);
        let spelled = link.display().to_string();
        let r = attack_in(&ws, &wrapper, &ws.dir, &spelled, &cmd);
        assert_no_secret(&format!("HOME={spelled} {mode:?}"), &r, &ws.state, &secrets);
    }
    // The workspace is a directory of the home.
    let inside = home.join("proj");
    std::fs::create_dir_all(&inside).unwrap();
    chown_r(&inside, u, g);
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode, u, g);
        let r = attack_in(&ws, &wrapper, &inside, &h, &cmd);
        assert_masked(
            &format!("workspace in home {mode:?}"),
            &r,
            &ws.state,
            &decoy,
            &secrets,
        );
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// A host process churns the masked directories (creating, renaming and
/// removing siblings) while runs set up their views: the secrets, present
/// throughout, stay masked in every run.
#[test]
fn directories_churned_during_set_up_keep_their_masks() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home, (rels, secrets, decoy)) = planted();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        let home = home.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for d in [".ssh", ".aws", "."] {
                    let a = home.join(d).join(format!("churn-{}", i % 64));
                    let b = home.join(d).join(format!("churn-r{}", i % 64));
                    let _ = std::fs::write(&a, b"c");
                    let _ = std::fs::rename(&a, &b);
                    let _ = std::fs::remove_file(&b);
                }
                i += 1;
            }
        })
    };
    let cmd = format!("cat ~/.aws/CREDENTIALS; {}", reader(&rels));
    for round in 0..3 {
        for mode in MODES {
            let (ws, wrapper) = account_ws(mode, u, g);
            let r = attack_in(&ws, &wrapper, &ws.dir, home.to_str().unwrap(), &cmd);
            assert_masked(
                &format!("round {round} {mode:?}"),
                &r,
                &ws.state,
                &decoy,
                &secrets,
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    let _ = std::fs::remove_dir_all(&home);
}

/// Spellings of `dryrun approve` the shell turns into the binary's name by
/// pattern matching: extended globs (on after `shopt -s extglob`, and
/// written with no character the guard's shortcut looks for), globs and
/// brace expansion. Each is denied by the guard, for both hosts.
#[test]
fn dryrun_spelled_as_a_pattern_is_denied() {
    let w = hook_ws("dryrun-hvl-hook-");
    let exe = bin();
    let dir = exe.parent().unwrap().display().to_string();
    for cmd in [
        "shopt -s extglob\ndry@(run) approve r6b0-1".to_string(),
        "shopt -s extglob\ndry+(run) approve r6b0-1".to_string(),
        "shopt -s extglob\ndry!(x)un approve r6b0-1".to_string(),
        format!("shopt -s extglob\n{dir}/dr@(y)run approve r6b0-1"),
        "dry?un approve r6b0-1".to_string(),
        format!("{dir}/dr[y]run --local promote r6b0-1"),
        format!("{dir}/dry* approve r6b0-1"),
        "dr{y,}run approve r6b0-1".to_string(),
        "env A=1 dr{y,x}run approve r6b0-1".to_string(),
    ] {
        for host in ["claude-code", "codex"] {
            let e = if host == "codex" {
                codex_event("PreToolUse", &w.ws, &cmd)
            } else {
                claude_event(&w.ws, &cmd)
            };
            let a = answer(&hook(&w, host, e.to_string().as_bytes(), &[]));
            assert_eq!(
                a["hookSpecificOutput"]["permissionDecision"], "deny",
                "{host} {cmd:?}: {a}"
            );
        }
    }
    // A test command and a plain one still go through.
    for cmd in ["[ -f a.txt ] && echo yes", "ls -l"] {
        let a = answer(&hook(
            &w,
            "claude-code",
            claude_event(&w.ws, cmd).to_string().as_bytes(),
            &[],
        ));
        assert_ne!(
            a["hookSpecificOutput"]["permissionDecision"], "deny",
            "{cmd}: {a}"
        );
    }
}

/// A directory of the home the account may search but not list (root's,
/// 0711, as a site's provisioning may leave it): the account's own engine
/// cannot list it (its namespace's capabilities do not reach root's
/// files), the command still opens the masked file in it by name. The
/// masks hold in both engines.
#[test]
fn a_directory_only_searchable_keeps_its_masks() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home, (rels, secrets, decoy)) = planted();
    for dir in [".config/gh", ".aws"] {
        std::os::unix::fs::chown(home.join(dir), Some(0), Some(0)).unwrap();
        std::fs::set_permissions(home.join(dir), std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    let cmd = format!(
        "ls ~/.config/gh || echo unlisted; cat ~/.aws/CREDENTIALS; {}",
        reader(&rels)
    );
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode, u, g);
        let r = attack_in(&ws, &wrapper, &ws.dir, home.to_str().unwrap(), &cmd);
        assert!(r.out().contains("unlisted"), "{mode:?}: {r:?}");
        assert_masked(&format!("{mode:?}"), &r, &ws.state, &decoy, &secrets);
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// The same tricks through a root daemon: root's client submits the
/// account's workspace with the account's `HOME` (as a tool running for
/// the account does), and a root-owned 0711 directory stands in the home.
#[test]
fn a_root_daemon_keeps_every_mask_in_place() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home, (rels, secrets, decoy)) = planted();
    std::os::unix::fs::chown(home.join(".config/gh"), Some(0), Some(0)).unwrap();
    std::fs::set_permissions(
        home.join(".config/gh"),
        std::fs::Permissions::from_mode(0o711),
    )
    .unwrap();
    let d = common::daemon::Daemon::start(&[]);
    let (ws, _) = account_ws(Mode::RootEngine, u, g);
    let cmd = format!("cat ~/.aws/CREDENTIALS; {}", reader(&rels));
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                  "env": {"HOME": home, "PATH": "/usr/bin:/bin"}});
    let (_k, file) = common::daemon::agent_envelope_file(&body.to_string());
    let out = d
        .cli_root()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--file"])
        .arg(&file)
        .output()
        .unwrap();
    let r = common::daemon::run_json(out);
    assert_masked("root daemon", &r, &d.state, &decoy, &secrets);
    let _ = std::fs::remove_dir_all(&home);
}
