//! A hostile agent against the mounts beneath the home (issue 30): each
//! mount beneath the shown home is a throwaway layer of its own, planned
//! from the planner's mount table and mounted inside the new root. The
//! attacks: binds that are other names of a home (the home itself, its
//! masked directories, another user's home, `/home`, root's `.ssh`);
//! credentials on mounts at masked paths and beneath masked directories;
//! the directories on the path to a mount point swapped (with another
//! one, with a symlink to another user's home) while runs are planned;
//! mount points whose names the mount table escapes, or that are long; a
//! root daemon serving two users with mounts beneath their homes; a FUSE
//! mount the agent serves itself, its server stopped (beneath the home,
//! over the home, the workspace or a `PATH` directory, beneath one, and
//! made after the plan); and writes beneath a layer (read-only ones, hard
//! links and renames across layers).
//!
//! Every attack is judged on the host side: canaries of unique random
//! content never appear in anything the run reports or keeps in its state
//! directory, host files are unchanged, and nothing is written outside
//! the workspace on the host. The mounts are made in a private mount
//! namespace around the CLI or the daemon (`tests/common/ns.rs`), as root
//! and as this file's own account (`dryrun-hsub`), so the host's mount
//! table never holds them.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::daemon::*;
use common::leaks::*;
use common::*;

/// The tests share one account's home: one test at a time.
static HOME_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

const HSUB_USER: &str = "dryrun-hsub";

fn lock() -> std::sync::MutexGuard<'static, ()> {
    HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// This file's own account: (uid, gid, home), created (home 0755) when
/// missing.
fn hsub_user() -> (u32, u32, PathBuf) {
    static U: OnceLock<(u32, u32, PathBuf)> = OnceLock::new();
    U.get_or_init(|| common::account_with_home(HSUB_USER, "/home/dryrun-hsub"))
        .clone()
}

/// Paths a test made, removed (files, then directories, innermost first)
/// when it ends.
struct Made(Vec<PathBuf>);

impl Drop for Made {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = std::fs::remove_file(p)
                .or_else(|_| std::fs::remove_dir_all(p))
                .or_else(|_| std::fs::remove_dir(p));
        }
    }
}

impl Made {
    /// A directory (and its missing parents), owned by `owner`.
    fn dir(&mut self, p: &Path, owner: Option<(u32, u32)>) -> PathBuf {
        let mut missing = Vec::new();
        let mut d = p.to_path_buf();
        while !d.exists() {
            missing.push(d.clone());
            if !d.pop() {
                break;
            }
        }
        for d in missing.into_iter().rev() {
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
            if let Some((u, g)) = owner {
                std::os::unix::fs::chown(&d, Some(u), Some(g)).unwrap();
            }
            self.0.push(d);
        }
        p.to_path_buf()
    }

    /// A file with `content` and `mode`, owned by `owner`.
    fn file(&mut self, p: &Path, content: &str, mode: u32, owner: Option<(u32, u32)>) {
        self.dir(p.parent().unwrap(), owner);
        std::fs::write(p, content).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some((u, g)) = owner {
            std::os::unix::fs::chown(p, Some(u), Some(g)).unwrap();
        }
        self.0.push(p.to_path_buf());
    }
}

fn account() -> Option<(u32, u32)> {
    let (u, g, _) = hsub_user();
    Some((u, g))
}

/// The wrapper that runs `dryrun` in a private mount namespace after
/// `setup` (a `sh -c` script whose `$1`, `$2`, ... are `args`), as
/// `mode` says (root's engine, or the account's own through `setpriv`).
fn in_ns(setup: &str, args: &[String], mode_wrapper: &[String]) -> Vec<String> {
    let script = format!("{setup} && shift {} && exec \"$@\"", args.len());
    let mut all = vec!["hsub".to_string()];
    all.extend(args.iter().cloned());
    let mut w = ns::in_private_mount_ns(&script, &all);
    w.extend(mode_wrapper.iter().cloned());
    w
}

/// `mount --bind SRC DST` for each pair, as a script and its arguments
/// from `$first` on.
fn binds(pairs: &[(&Path, &Path)], first: usize) -> (String, Vec<String>) {
    let mut script = Vec::new();
    let mut args = Vec::new();
    for (i, (src, dst)) in pairs.iter().enumerate() {
        let (a, b) = (first + 2 * i, first + 2 * i + 1);
        script.push(format!("mount --bind \"${{{a}}}\" \"${{{b}}}\""));
        args.push(src.display().to_string());
        args.push(dst.display().to_string());
    }
    (script.join(" && "), args)
}

/// A workspace of this file's account, and the wrapper for `mode`.
fn account_ws(mode: Mode) -> (Ws, Vec<String>) {
    let (u, g, _) = hsub_user();
    common::account_ws(mode, u, g)
}

/// `dryrun execute --json --file` of `cmd`, as the account (HOME its
/// home, PATH the system's).
fn attack(ws: &Ws, wrapper: &[String], cmd: &str) -> Run {
    attack_with_path(ws, wrapper, cmd, "/usr/bin:/bin")
}

/// [`attack`] with the command's `PATH`.
fn attack_with_path(ws: &Ws, wrapper: &[String], cmd: &str, path: &str) -> Run {
    let (u, g, home) = hsub_user();
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                  "env": {"HOME": home, "PATH": path}});
    chown_r(&ws.dir, u, g);
    execute_envelope(ws, wrapper, &body)
}

/// `stripped` names `p` as hidden, with `why` in its reason.
fn named(r: &Run, p: &Path, why: &str) -> bool {
    r.stripped()
        .iter()
        .any(|s| s.starts_with(&format!("hidden:{} (", p.display())) && s.contains(why))
}

/// The run ran its command (it was not refused or failed before).
fn assert_command_ran(what: &str, r: &Run, marker: &str) {
    assert!(
        r.out().contains(marker),
        "{what}: the command did not run: {r:?}"
    );
}

/// Attack 1: Binds beneath the account's home that are other names of a home:
/// the home itself, its `.ssh` (masked) and `.aws`, another user's home
/// (its 0644 file: the account could read it live), `/home`, and root's
/// `.ssh`. Each is named (`view.home_alias`, or not shown at all), and
/// none of their canaries comes back, through root's engine and the
/// account's own.
#[test]
fn home_alias_binds_beneath_the_home_show_no_secret() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hsub_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let ssh_key = format!("HSUBSSH-{tag}");
    let aws_key = format!("HSUBAWS-{tag}");
    let other = format!("HSUBOTHER-{tag}");
    let rootkey = format!("HSUBROOT-{tag}");
    made.file(
        &home.join(format!(".ssh/id-{tag}")),
        &format!("{ssh_key}\n"),
        0o600,
        account(),
    );
    made.file(
        &home.join(".aws/credentials"),
        &format!("[default]\naws_secret_access_key = {aws_key}\n"),
        0o600,
        account(),
    );
    let other_home = test_home();
    made.file(
        &other_home.join(format!(".hsub-other-{tag}")),
        &format!("{other}\n"),
        0o644,
        None,
    );
    made.dir(Path::new("/root/.ssh"), None);
    made.file(
        &PathBuf::from(format!("/root/.ssh/hsub-{tag}")),
        &format!("{rootkey}\n"),
        0o644,
        None,
    );
    let points: Vec<(&str, PathBuf)> = vec![
        ("alias-home", home.clone()),
        ("alias-ssh", home.join(".ssh")),
        ("alias-aws", home.join(".aws")),
        ("alias-other", other_home.clone()),
        ("alias-homes", PathBuf::from("/home")),
        ("alias-rootssh", PathBuf::from("/root/.ssh")),
    ];
    let mut pairs = Vec::new();
    for (name, src) in &points {
        let dst = made.dir(&home.join(format!("{name}-{tag}")), account());
        pairs.push((src.clone(), dst));
    }
    let refs: Vec<(&Path, &Path)> = pairs
        .iter()
        .map(|(a, b)| (a.as_path(), b.as_path()))
        .collect();
    let (setup, args) = binds(&refs, 1);
    let cmd = format!(
        "for d in ~/alias-*-{tag}; do ls -laR \"$d\" 2>&1 | head -50; \
         find \"$d\" -maxdepth 3 -type f -name '*{tag}*' -exec cat {{}} + 2>&1 | rev; \
         cat \"$d\"/credentials \"$d\"/.aws/credentials \"$d\"/.ssh/id-{tag} \"$d\"/id-{tag} \"$d\"/hsub-{tag} 2>&1 | rev; done; \
         cat ~/alias-homes-{tag}/dryrun-hsub/.ssh/id-{tag} ~/alias-homes-{tag}/*/.hsub-other-{tag} 2>&1 | rev; echo HSUB-RAN; exit 0"
    );
    for mode in MODES {
        let (ws, mode_wrapper) = account_ws(mode);
        let wrapper = in_ns(&setup, &args, &mode_wrapper);
        let r = attack(&ws, &wrapper, &cmd);
        let what = format!("{mode:?}");
        assert_command_ran(&what, &r, "HSUB-RAN");
        for s in [&ssh_key, &aws_key, &other, &rootkey] {
            assert_nowhere(&what, &r, &ws.state, s);
        }
        for (_, dst) in &pairs {
            assert!(
                named(&r, dst, ""),
                "{what}: {} is not named: {:?}",
                dst.display(),
                r.stripped()
            );
        }
        if mode == Mode::RootEngine {
            for (name, dst) in &pairs {
                assert!(
                    named(&r, dst, "view.home_alias"),
                    "{what}: {name:?} not named as an alias: {:?}",
                    r.stripped()
                );
            }
        }
    }
}

/// Attack 2: Credentials on mounts at masked paths and beneath masked
/// directories: a tmpfs at `~/.ssh` holding a key, `~/.aws` a bind of a
/// tree with `credentials` (masked) and `config` (filtered), a bind
/// beneath `~/.gnupg`, and `~/.config` a bind of a tree holding
/// `gcloud/` and `gh/hosts.yml`. The masks hold inside each layer (and on
/// the layers the account's own run shows without its home), the filter
/// takes the key out, and a hard link out of a masked tree is refused.
#[test]
fn masks_hold_on_and_inside_mounts_beneath_the_home() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home) = hsub_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let src = made.dir(
        &PathBuf::from(format!("/var/tmp/hsub-masks-{tag}")),
        account(),
    );
    let secrets: Vec<String> = ["SSH", "AWSCRED", "AWSCONF", "GPG", "GCLOUD", "GH"]
        .iter()
        .map(|s| format!("HSUB{s}-{tag}"))
        .collect();
    made.file(
        &src.join("aws/credentials"),
        &format!("[default]\naws_secret_access_key = {}\n", secrets[1]),
        0o600,
        account(),
    );
    made.file(
        &src.join("aws/config"),
        &format!(
            "[default]\nregion = eu-west-1\naws_secret_access_key = {}\n",
            secrets[2]
        ),
        0o600,
        account(),
    );
    made.file(
        &src.join("gpg/key.key"),
        &format!("{}\n", secrets[3]),
        0o600,
        account(),
    );
    made.file(
        &src.join("config/gcloud/credentials.db"),
        &format!("{}\n", secrets[4]),
        0o600,
        account(),
    );
    made.file(
        &src.join("config/gh/hosts.yml"),
        &format!("github.com:\n    oauth_token: {}\n", secrets[5]),
        0o600,
        account(),
    );
    made.file(
        &src.join("config/tool/settings"),
        "kept\n",
        0o644,
        account(),
    );
    let ssh = made.dir(&home.join(".ssh"), account());
    let aws = made.dir(&home.join(".aws"), account());
    let gpg = made.dir(&home.join(".gnupg/private-keys-v1.d"), account());
    let config = made.dir(&home.join(".config"), account());
    let (binds_script, mut args) = binds(
        &[
            (&src.join("aws"), &aws),
            (&src.join("gpg"), &gpg),
            (&src.join("config"), &config),
        ],
        1,
    );
    let n = args.len();
    args.push(ssh.display().to_string());
    args.push(secrets[0].clone());
    args.push(format!("{u}:{g}"));
    let setup = format!(
        "{binds_script} && mount -t tmpfs -o mode=0700 hsub \"${{{a}}}\" && \
         printf '%s\\n' \"${{{b}}}\" > \"${{{a}}}/id_ed25519\" && chmod 600 \"${{{a}}}/id_ed25519\" && \
         chown -R \"${{{c}}}\" \"${{{a}}}\"",
        a = n + 1,
        b = n + 2,
        c = n + 3
    );
    let cmd = format!(
        "for d in ~/.ssh ~/.aws ~/.gnupg ~/.config; do ls -laR \"$d\" 2>&1 | head -40; \
         grep -ra . \"$d\" 2>/dev/null | rev; done; cat ~/.aws/config; cat ~/.config/tool/settings; \
         ln ~/.aws/credentials ~/hl-{tag} 2>&1; ln ~/.ssh/id_ed25519 /tmp/hl-{tag} 2>&1; cat ~/hl-{tag} /tmp/hl-{tag} 2>&1 | rev; \
         echo HSUB-RAN; exit 0"
    );
    for mode in MODES {
        let (ws, mode_wrapper) = account_ws(mode);
        let wrapper = in_ns(&setup, &args, &mode_wrapper);
        let r = attack(&ws, &wrapper, &cmd);
        let what = format!("{mode:?}");
        assert_command_ran(&what, &r, "HSUB-RAN");
        for s in &secrets {
            assert_nowhere(&what, &r, &ws.state, s);
        }
        let stripped = r.stripped();
        for masked in [
            home.join(".ssh"),
            home.join(".aws/credentials"),
            home.join(".gnupg"),
            home.join(".config/gcloud"),
            home.join(".config/gh/hosts.yml"),
        ] {
            assert!(
                stripped.contains(&format!("masked:{}", masked.display())),
                "{what}: {} is not masked: {stripped:?}",
                masked.display()
            );
        }
        assert!(
            r.out().contains("region = eu-west-1") && r.out().contains("kept"),
            "{what}: the layers are not shown: {r:?}"
        );
    }
    assert!(
        !home.join(format!("hl-{tag}")).exists() && !Path::new(&format!("/tmp/hl-{tag}")).exists()
    );
}

/// Swaps `a` and `b` (`renameat2(RENAME_EXCHANGE)`) as fast as it can
/// until `stop`.
fn swapper(a: PathBuf, b: PathBuf, stop: &'static AtomicBool) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            if nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                &a,
                nix::fcntl::AT_FDCWD,
                &b,
                nix::fcntl::RenameFlags::RENAME_EXCHANGE,
            )
            .is_ok()
            {
                n += 1;
            }
        }
        n
    })
}

/// Attack 3a: A race on the path to a mount point: while runs are planned and
/// set up, the directories holding a harmless mount (`~/race-a/m`) and an
/// alias of the home's `.ssh` (`~/race-b/m`) are swapped again and again,
/// and a directory holding another mount (`~/race-c/m`) is swapped with a
/// symlink to a directory of another user's home holding an `m` of its
/// own (what the home's owner can do with its own directories). Whatever
/// the planner read and whatever it found, the key and the other user's
/// file never come back.
#[test]
fn swapping_the_directories_above_a_mount_point_shows_no_alias() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hsub_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let key = format!("HSUBRACEKEY-{tag}");
    let other = format!("HSUBRACEOTHER-{tag}");
    made.file(
        &home.join(format!(".ssh/id-{tag}")),
        &format!("{key}\n"),
        0o600,
        account(),
    );
    let harmless = made.dir(
        &PathBuf::from(format!("/var/tmp/hsub-race-{tag}")),
        account(),
    );
    made.file(&harmless.join("harmless"), "HARMLESS\n", 0o644, account());
    let other_dir = made.dir(&test_home().join(format!("hsub-race-{tag}")), None);
    made.file(
        &other_dir.join("m/other"),
        &format!("{other}\n"),
        0o644,
        None,
    );
    let a = made.dir(&home.join(format!("race-a-{tag}/m")), account());
    let b = made.dir(&home.join(format!("race-b-{tag}/m")), account());
    let c = made.dir(&home.join(format!("race-c-{tag}/m")), account());
    let link = home.join(format!("race-ln-{tag}"));
    std::os::unix::fs::symlink(&other_dir, &link).unwrap();
    made.0.push(link.clone());
    // Mounts planned before the raced ones (their names sort first) widen
    // the time between the planner's reading of the mount table and its
    // look at the raced paths, as a busy host's would.
    let pads: Vec<PathBuf> = (0..20)
        .map(|i| made.dir(&home.join(format!("race-0pad-{i:02}-{tag}")), account()))
        .collect();
    let ssh = home.join(".ssh");
    let mut pairs: Vec<(&Path, &Path)> = vec![(&harmless, &a), (&ssh, &b), (&harmless, &c)];
    pairs.extend(pads.iter().map(|p| (harmless.as_path(), p.as_path())));
    let (setup, args) = binds(&pairs, 1);
    let cmd = format!(
        "cat ~/race-a-{tag}/m/* ~/race-b-{tag}/m/* ~/race-c-{tag}/m/* ~/race-ln-{tag}/m/* 2>&1 | rev; \
         ls -la ~/race-*-{tag}/m/ 2>&1; echo HSUB-RAN; exit 0"
    );
    static STOP: AtomicBool = AtomicBool::new(false);
    STOP.store(false, Ordering::Relaxed);
    let swaps = [
        swapper(
            a.parent().unwrap().into(),
            b.parent().unwrap().into(),
            &STOP,
        ),
        swapper(c.parent().unwrap().into(), link.clone(), &STOP),
    ];
    let mut runs = Vec::new();
    for i in 0..24 {
        let (ws, mode_wrapper) = account_ws(Mode::RootEngine);
        let wrapper = in_ns(&setup, &args, &mode_wrapper);
        runs.push((i, attack(&ws, &wrapper, &cmd), ws));
    }
    STOP.store(true, Ordering::Relaxed);
    let swapped: Vec<u64> = swaps.into_iter().map(|h| h.join().unwrap()).collect();
    // Put the directories back where they were made, for the clean-up.
    for (x, y) in [
        (a.parent().unwrap(), b.parent().unwrap()),
        (c.parent().unwrap(), link.as_path()),
    ] {
        if std::fs::symlink_metadata(x).is_ok_and(|m| m.file_type().is_symlink()) {
            nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                x,
                nix::fcntl::AT_FDCWD,
                y,
                nix::fcntl::RenameFlags::RENAME_EXCHANGE,
            )
            .unwrap();
        }
    }
    assert!(swapped.iter().all(|n| *n > 100), "{swapped:?}");
    for (i, r, ws) in &runs {
        let what = format!("run {i}");
        assert_command_ran(&what, r, "HSUB-RAN");
        assert_nowhere(&what, r, &ws.state, &key);
        assert_nowhere(&what, r, &ws.state, &other);
    }
    assert!(std::fs::read_dir(other_dir.join("m")).unwrap().count() == 1);
}

/// Attack 3b: Mount points whose names the mount table escapes (a space, a
/// newline, a backslash, a literal `\040`, a terminal escape) and a long
/// one (about 3,000 bytes deep): each is shown at its own name (its
/// canary read there) or named, the run goes on, nothing is made on the
/// host under an unescaped name, and no raw control character reaches
/// the record's text form.
#[test]
fn mount_points_with_escaped_or_long_names_are_shown_as_they_are() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hsub_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let src = made.dir(
        &PathBuf::from(format!("/var/tmp/hsub-esc-{tag}")),
        account(),
    );
    made.file(
        &src.join("canary"),
        &format!("ESC-{tag}\n"),
        0o644,
        account(),
    );
    let root = made.dir(&home.join(format!("esc-{tag}")), account());
    let long: PathBuf = (0..14)
        .map(|i| format!("{i:02}{}", "L".repeat(200)))
        .collect();
    let names = [
        "sp ace".to_string(),
        "new\nline".to_string(),
        "back\\slash".to_string(),
        "oct\\040al".to_string(),
        "esc\u{1b}]0;title\u{7}\u{1b}[2J".to_string(),
        long.display().to_string(),
    ];
    let mut points = Vec::new();
    for n in &names {
        points.push(made.dir(&root.join(n), account()));
    }
    let before = snapshot_tree(&root);
    let pairs: Vec<(&Path, &Path)> = points
        .iter()
        .map(|p| (src.as_path(), p.as_path()))
        .collect();
    let (setup, args) = binds(&pairs, 1);
    // The command finds each mount point by listing, so no name needs
    // quoting in it.
    let cmd =
        "find ~/esc-* -name canary -exec cat {} + 2>&1 | sort | uniq -c; echo HSUB-RAN; exit 0";
    for mode in MODES {
        let (ws, mode_wrapper) = account_ws(mode);
        let wrapper = in_ns(&setup, &args, &mode_wrapper);
        let r = attack(&ws, &wrapper, cmd);
        let what = format!("{mode:?}");
        assert_command_ran(&what, &r, "HSUB-RAN");
        let shown = r
            .out()
            .lines()
            .find(|l| l.contains(&format!("ESC-{tag}")))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        let unnamed: Vec<&PathBuf> = points.iter().filter(|p| !named(&r, p, "")).collect();
        assert!(
            shown + (points.len() - unnamed.len()) >= points.len(),
            "{what}: {shown} shown, named {:?}: {}\n{:?}",
            points.len() - unnamed.len(),
            r.out(),
            r.stripped()
        );
        if mode == Mode::RootEngine {
            assert_eq!(
                shown,
                points.len(),
                "{what}: {}\n{:?}",
                r.out(),
                r.stripped()
            );
        }
        let text = ws
            .command_via(&wrapper)
            .args(["show", &run_id(&r)])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout).into_owned()
            + &String::from_utf8_lossy(&text.stderr);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{what}: `dryrun show` prints a raw control character:\n{text:?}"
        );
    }
    assert_eq!(before, snapshot_tree(&root), "the host's home changed");
    assert!(!root.join("oct al").exists());
}

/// Attack 4: A root daemon serving two users at once, each with a mount beneath
/// its home (a 0644 canary under a 0755 home: each could read the other's
/// live): each run sees its own mount's canary and nothing of the other's.
#[test]
fn a_root_daemon_shows_each_user_its_own_mounts_only() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hsub_user();
    let th = test_home();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let (tu, tg) = test_user();
    let src_a = made.dir(
        &PathBuf::from(format!("/var/tmp/hsub-two-a-{tag}")),
        account(),
    );
    made.file(
        &src_a.join("canary"),
        &format!("TWOA-{tag}\n"),
        0o644,
        account(),
    );
    let src_b = made.dir(
        &PathBuf::from(format!("/var/tmp/hsub-two-b-{tag}")),
        Some((tu, tg)),
    );
    made.file(
        &src_b.join("canary"),
        &format!("TWOB-{tag}\n"),
        0o644,
        Some((tu, tg)),
    );
    let pa = made.dir(&home.join(format!("mnt-{tag}")), account());
    let pb = made.dir(&th.join(format!("mnt-{tag}")), Some((tu, tg)));
    let (setup, args) = binds(&[(&src_a, &pa), (&src_b, &pb)], 1);
    let d = Daemon::start_wrapped(&in_ns(&setup, &args, &[]), &[]);
    let look = format!(
        "sleep 2; cat /home/*/mnt-{tag}/canary {} {} 2>&1; ls -la /home/*/ 2>&1 | grep mnt; echo HSUB-RAN; exit 0",
        pa.display(),
        pb.display()
    );
    let (ws_a, _) = account_ws(Mode::RootEngine);
    let body = serde_json::json!({"command": look, "working_dir": ws_a.dir,
                                  "env": {"HOME": home, "PATH": "/usr/bin:/bin"}});
    let (_k, file) = agent_envelope_file(&body.to_string());
    let a = d
        .cli_root()
        .current_dir(&ws_a.dir)
        .args(["execute", "--json", "--file"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ws_b = user_workspace();
    let r_b = submit_user(&d, &ws_b, &look, &[]);
    let r_a = run_json(a.wait_with_output().unwrap());
    for (what, r, mine, theirs) in [
        ("the account", &r_a, "TWOA", "TWOB"),
        ("the test user", &r_b, "TWOB", "TWOA"),
    ] {
        assert_command_ran(what, r, "HSUB-RAN");
        assert!(
            r.out().contains(&format!("{mine}-{tag}")),
            "{what}: its own mount is not shown: {r:?}"
        );
        // One daemon keeps both runs: the other's record holds its own
        // canary, this one's nothing of it.
        let secret = format!("{theirs}-{tag}");
        assert!(
            !leaked(&reported(r), &secret),
            "{what}: {secret} came back: {r:?}"
        );
        let id = run_id(r);
        let hits: Vec<PathBuf> = files_holding(&d.state, &secret)
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(&id))
            .collect();
        assert!(hits.is_empty(), "{what}: {secret} stored in {hits:?}");
    }
}

/// Attack 5: A FUSE mount the agent serves itself beneath its home (`bindfs`
/// through the setuid `fusermount`), its server stopped so that whatever
/// touches the mount waits: once as FUSE allows by default (root is
/// refused), once with `allow_other` (a host whose `/etc/fuse.conf` says
/// `user_allow_other`; here a copy bound over it in the test's namespace,
/// and a `/dev/fuse` anyone may open, as most hosts have it, over this
/// machine's root-only one). A second such mount lies outside the view,
/// on the command's `PATH` (directly and through a link) and named in its
/// errors, where the engine looks for what the view hid. Root's engine
/// finishes the run, names the mount, and shows nothing of it. Needs `bindfs` (Debian package
/// `bindfs`, which brings `fuse`).
#[test]
fn a_stopped_fuse_mount_the_agent_serves_keeps_no_root_run_waiting() {
    let _l = lock();
    if !require_root() {
        return;
    }
    // `bindfs` brings `fuse` and its setuid fusermount.
    if !require_tool("bindfs", "bindfs") {
        return;
    }
    let (u, g, home) = hsub_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let src = made.dir(&home.join(format!("fuse-src-{tag}")), account());
    made.file(
        &src.join("canary"),
        &format!("FUSE-{tag}\n"),
        0o644,
        account(),
    );
    let point = made.dir(&home.join(format!("fuse-{tag}")), account());
    // And one outside the view, where the command's errors make the
    // engine look for what the view hid.
    let outside = made.dir(&PathBuf::from(format!("/srv/hsub-fuse-{tag}")), account());
    made.dir(&src.join("bin"), account());
    // A link to it, for the command's PATH.
    let link = PathBuf::from(format!("/srv/hsub-fuse-link-{tag}"));
    std::os::unix::fs::symlink(outside.join("bin"), &link).unwrap();
    made.0.push(link.clone());
    let path = format!(
        "/usr/bin:/bin:{}:{}",
        outside.join("bin").display(),
        link.display()
    );
    let conf = made.dir(&PathBuf::from(format!("/var/tmp/hsub-fuse-{tag}")), None);
    made.file(&conf.join("fuse.conf"), "user_allow_other\n", 0o644, None);
    let cmd = format!(
        "ls -la ~/fuse-{tag}; cat ~/fuse-{tag}/canary ~/fuse-{tag}/nope {o}/canary {o}/nope; hsub-tool-{tag}; echo HSUB-RAN; exit 0",
        o = outside.display()
    );
    // A virtual environment made with the FUSE directory first on PATH:
    // the engine resolves the caller's `python3` to judge the venv's
    // interpreter links, and must not look at the mount for it.
    let venv_path = format!("{}:/usr/bin:/bin", outside.join("bin").display());
    let venv_cmd = format!("python3 -m venv --without-pip venv-{tag}");
    for (case, (allow_other, path, cmd)) in [
        (false, &path, &cmd),
        (true, &path, &cmd),
        (true, &venv_path, &venv_cmd),
    ]
    .into_iter()
    .enumerate()
    {
        let pidfile = conf.join(format!("pid-{case}"));
        // bindfs asks for allow_other unless told not to; fusermount
        // grants it only with user_allow_other in /etc/fuse.conf.
        let (opts, conf_bind) = if allow_other {
            ("-o allow_other", "mount --bind \"$1\" /etc/fuse.conf && ")
        } else {
            ("--no-allow-other", "")
        };
        // The server runs in the foreground in the background of the
        // namespace's shell; once the mount is there, it is stopped.
        let setup = format!(
            "{conf_bind}mount -t tmpfs hsub \"$5\" && \
             mknod -m 666 \"$5/fuse\" c 10 229 && mount --bind \"$5/fuse\" /dev/fuse && \
             (for p in \"$3\" \"$6\"; do setpriv --reuid={u} --regid={g} --clear-groups -- bindfs -f {opts} \"$2\" \"$p\" & echo $! >> \"$4\"; done) && \
             for i in $(seq 1 100); do grep -q \" $3 \" /proc/self/mountinfo && grep -q \" $6 \" /proc/self/mountinfo && break; sleep 0.1; done; \
             grep -q \" $3 \" /proc/self/mountinfo && grep -q \" $6 \" /proc/self/mountinfo && kill -STOP $(cat \"$4\")"
        );
        let args = vec![
            conf.join("fuse.conf").display().to_string(),
            src.display().to_string(),
            point.display().to_string(),
            pidfile.display().to_string(),
            made.dir(&conf.join(format!("dev-{case}")), None)
                .display()
                .to_string(),
            outside.display().to_string(),
        ];
        let (ws, mode_wrapper) = account_ws(Mode::RootEngine);
        let mut wrapper = vec!["timeout".to_string(), "60".to_string()];
        wrapper.extend(in_ns(&setup, &args, &mode_wrapper));
        let t0 = Instant::now();
        let r = attack_with_path(&ws, &wrapper, cmd, path);
        let took = t0.elapsed();
        let pids: Vec<i32> = std::fs::read_to_string(&pidfile)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        for pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let what = format!("allow_other {allow_other}: {cmd}");
        assert_eq!(
            pids.len(),
            2,
            "{what}: the FUSE servers did not start: {r:?}"
        );
        assert!(
            took < Duration::from_secs(55),
            "{what}: the run waited on the stopped server ({took:?}): {r:?}"
        );
        if cmd == &venv_cmd {
            // It ran, and the venv's links were judged (the look that
            // must not touch the mount).
            let managers = &r.json["rehearsal"]["dependencies"]["managers"];
            assert_eq!(managers, &serde_json::json!(["venv"]), "{what}: {r:?}");
        } else {
            assert_command_ran(&what, &r, "HSUB-RAN");
        }
        assert_nowhere(&what, &r, &ws.state, &format!("FUSE-{tag}"));
        assert!(named(&r, &point, ""), "{what}: {:?}", r.stripped());
    }
}

/// Attack 6: Writes beneath a layer: a new file, a changed one, a removed one, a
/// rename and a hard link from the layer into the home's layer (across
/// layers), a link within it, a mode change; and writes into a read-only
/// mount (a file, a directory, a mode). None reaches the host's trees;
/// the writable layer's are listed in `outside_writes` under its path
/// and make the run need approval; the read-only one refuses each.
#[test]
fn writes_beneath_a_layer_stay_in_the_rehearsal_and_are_listed() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hsub_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let src = made.dir(&PathBuf::from(format!("/var/tmp/hsub-rw-{tag}")), account());
    made.file(&src.join("kept"), "original\n", 0o644, account());
    made.file(&src.join("gone"), "original\n", 0o644, account());
    made.file(&src.join("moved"), "original\n", 0o644, account());
    let rw = made.dir(&home.join(format!("rw-{tag}")), account());
    let ro = made.dir(&home.join(format!("ro-{tag}")), account());
    let before_src = snapshot_tree(&src);
    let before_home = snapshot_tree(&home);
    let (binds_script, args) = binds(&[(&src, &rw), (&src, &ro)], 1);
    let setup = format!("{binds_script} && mount -o remount,bind,ro \"$4\"");
    let r_ = rw.display();
    let o_ = ro.display();
    let cmd = format!(
        "echo new > {r_}/new-{tag}; echo changed >> {r_}/kept; rm {r_}/gone; \
         mv {r_}/moved ~/moved-{tag}; ln {r_}/kept ~/linked-{tag} 2>&1; ln {r_}/kept {r_}/inner-{tag}; chmod 600 {r_}/kept; \
         (echo x > {o_}/ro-new-{tag}) 2>/dev/null && echo RO-WROTE; mkdir {o_}/ro-dir-{tag} 2>/dev/null && echo RO-MKDIR; \
         chmod 600 {o_}/kept 2>/dev/null && echo RO-CHMOD; cat {r_}/kept; echo HSUB-RAN; exit 0"
    );
    for mode in MODES {
        let (ws, mode_wrapper) = account_ws(mode);
        let wrapper = in_ns(&setup, &args, &mode_wrapper);
        let r = attack(&ws, &wrapper, &cmd);
        let what = format!("{mode:?}");
        assert_command_ran(&what, &r, "HSUB-RAN");
        assert_eq!(
            before_src,
            snapshot_tree(&src),
            "{what}: the mounted tree changed"
        );
        assert_eq!(
            before_home,
            snapshot_tree(&home),
            "{what}: the real home changed"
        );
        for w in ["RO-WROTE", "RO-MKDIR", "RO-CHMOD"] {
            assert!(!r.out().contains(w), "{what}: {w}: {}", r.out());
        }
        if r.out().contains("original\nchanged") {
            let rows = r.json["rehearsal"]["outside_writes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                rows.iter()
                    .any(|w| Path::new(w["path"].as_str().unwrap_or("")).starts_with(&rw)),
                "{what}: the layer's writes are not listed: {rows:?}"
            );
            assert!(
                r.reasons()
                    .iter()
                    .any(|m| m.starts_with("[view.outside_writes]"))
                    && r.decision() != "promote",
                "{what}: decision {}: {:?}",
                r.decision(),
                r.reasons()
            );
        } else {
            assert!(named(&r, &rw, ""), "{what}: {r:?}");
        }
    }
    let left: Vec<PathBuf> = [
        home.join(format!("moved-{tag}")),
        home.join(format!("linked-{tag}")),
        src.join(format!("new-{tag}")),
        src.join(format!("inner-{tag}")),
    ]
    .into_iter()
    .filter(|p| p.exists())
    .collect();
    assert!(left.is_empty(), "written on the host: {left:?}");
}

/// The setup (a `sh -c` script for [`in_ns`], with its arguments from
/// `$1`) of a FUSE mount the account serves with `allow_other` at each of
/// `points` (`bindfs` of `src`; `/etc/fuse.conf` saying
/// `user_allow_other` and a `/dev/fuse` anyone may open, in the test's
/// namespace only), its servers stopped once the mounts are there, their
/// pids in `pidfile`. `after`: a shell condition the mounts wait for, in
/// the background of the namespace's shell (the CLI is started at once);
/// `None`: made before the CLI starts.
fn stopped_fuse(
    conf: &Path,
    src: &Path,
    points: &[PathBuf],
    pidfile: &Path,
    dev: &Path,
    after: Option<&str>,
) -> (String, Vec<String>) {
    let (u, g, _) = hsub_user();
    let mut args = vec![
        conf.join("fuse.conf").display().to_string(),
        src.display().to_string(),
        pidfile.display().to_string(),
        dev.display().to_string(),
    ];
    let first = args.len() + 1;
    args.extend(points.iter().map(|p| p.display().to_string()));
    let all: Vec<String> = (first..first + points.len())
        .map(|i| format!("\"${{{i}}}\""))
        .collect();
    let mounted: Vec<String> = (first..first + points.len())
        .map(|i| format!("grep -q \" ${{{i}}} \" /proc/self/mountinfo"))
        .collect();
    let mounted = mounted.join(" && ");
    let serve = format!(
        "for p in {all}; do setpriv --reuid={u} --regid={g} --clear-groups -- bindfs -f -o allow_other,nonempty \"$2\" \"$p\" & echo $! >> \"$3\"; done; \
         for i in $(seq 1 100); do {mounted} && break; sleep 0.1; done; \
         {mounted} && kill -STOP $(cat \"$3\")",
        all = all.join(" ")
    );
    let serve = match after {
        None => serve,
        Some(cond) => format!(
            "(for i in $(seq 1 3000); do {cond} && break; sleep 0.01; done; {serve}) >/dev/null 2>&1 & true"
        ),
    };
    let setup = format!(
        "mount --bind \"$1\" /etc/fuse.conf && mount -t tmpfs hsub \"$4\" && \
         mknod -m 666 \"$4/fuse\" c 10 229 && mount --bind \"$4/fuse\" /dev/fuse && {{ {serve} ; }}"
    );
    (setup, args)
}

/// Kills the stopped servers whose pids `pidfile` holds; how many.
fn kill_servers(pidfile: &Path) -> usize {
    let pids: Vec<i32> = std::fs::read_to_string(pidfile)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for pid in &pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    pids.len()
}

/// Attack 7: A FUSE mount the agent serves over its own home, or over its
/// workspace (both directories it owns, so `fusermount` lets it mount
/// there), or beneath a `PATH` directory outside the home (named as a
/// tool the stubs cover), with `allow_other` and its server stopped; and
/// the same mount over the home, and over a `PATH` directory the plan
/// binds, made only after the engine planned the view (while the sandbox
/// helper is held at its first `unshare`, by `strace`'s delay), so that no
/// reading of the mount table before can know it. Root's engine (the CLI,
/// and a root daemon for the home) finishes within 20 s, names what it did
/// not look at (a workspace it cannot look at is refused, named), and
/// shows nothing of the mount. Each case waited until killed (40 s)
/// before the resolver.
#[test]
fn a_stopped_fuse_mount_over_the_home_or_the_workspace_keeps_no_root_run_waiting() {
    let _l = lock();
    if !require_root() {
        return;
    }
    if !require_tool("bindfs", "bindfs") || !require_tool("strace", "strace") {
        return;
    }
    let (_, _, home) = hsub_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let src = made.dir(
        &PathBuf::from(format!("/var/tmp/hsub-fsrc-{tag}")),
        account(),
    );
    made.file(
        &src.join("canary"),
        &format!("FUSEHOME-{tag}\n"),
        0o644,
        account(),
    );
    let conf = made.dir(&PathBuf::from(format!("/var/tmp/hsub-fhome-{tag}")), None);
    made.file(&conf.join("fuse.conf"), "user_allow_other\n", 0o644, None);
    // A PATH directory outside the home the account owns: bound by the
    // plan, covered once the plan is made.
    let bin = made.dir(
        &PathBuf::from(format!("/srv/hsub-fpath-{tag}/bin")),
        account(),
    );
    let path = format!("/usr/bin:/bin:{}", bin.display());
    let cmd = format!(
        "cat ~/canary canary {}/canary; ls -la ~; echo HSUB-RAN; exit 0",
        bin.display()
    );
    for (case, (over, later, daemon)) in [
        ("home", false, false),
        ("workspace", false, false),
        ("home", true, false),
        ("PATH directory", true, false),
        ("home", false, true),
        ("tool in a PATH directory", false, false),
    ]
    .into_iter()
    .enumerate()
    {
        let (ws, _) = account_ws(Mode::RootEngine);
        let point = if over == "home" {
            home.clone()
        } else if over == "PATH directory" {
            bin.clone()
        } else if over == "tool in a PATH directory" {
            // Beneath a PATH directory the view binds with the mounts
            // below it: where the stubs look for the tools they cover.
            made.dir(&bin.join("git"), account())
        } else {
            ws.dir.clone()
        };
        let pidfile = conf.join(format!("pid-{case}"));
        let dev = made.dir(&conf.join(format!("dev-{case}")), None);
        // The sandbox helper at its first unshare of a mount namespace
        // (after the plan), as strace's log shows it.
        let log = conf.join(format!("strace-{case}"));
        let helper_held = format!("grep -qs 'unshare(CLONE_NEWNS' '{}'", log.display());
        let (setup, args) = stopped_fuse(
            &conf,
            &src,
            std::slice::from_ref(&point),
            &pidfile,
            &dev,
            later.then_some(helper_held.as_str()),
        );
        let what = format!("over the {over}, made later {later}, daemon {daemon}");
        let served;
        let t0 = Instant::now();
        let r = if daemon {
            let d = Daemon::start_wrapped(&in_ns(&setup, &args, &[]), &[]);
            let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                          "env": {"HOME": home, "PATH": path}});
            let (_k, file) = agent_envelope_file(&body.to_string());
            let t0 = Instant::now();
            let child = d
                .cli_root()
                .current_dir(&ws.dir)
                .args(["execute", "--json", "--file"])
                .arg(&file)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id() as i32;
            let done = std::sync::Arc::new(AtomicBool::new(false));
            let watch = done.clone();
            std::thread::spawn(move || {
                while t0.elapsed() < Duration::from_secs(40) {
                    if watch.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            });
            let r = run_json(child.wait_with_output().unwrap());
            done.store(true, Ordering::SeqCst);
            served = kill_servers(&pidfile);
            drop(d);
            r
        } else {
            let mut mode_wrapper = Vec::new();
            if later {
                // The helper held 3 s at its first unshare: the mount
                // appears then, long after the view was planned.
                mode_wrapper.extend(["strace", "-f", "-qq", "-o"].map(String::from));
                mode_wrapper.push(log.display().to_string());
                mode_wrapper.extend(["-e", "trace=unshare", "-e"].map(String::from));
                mode_wrapper.push("inject=unshare:delay_enter=3000000:when=1".into());
            }
            let mut all: Vec<String> = ["timeout", "-s", "KILL", "40"].map(String::from).into();
            all.extend(in_ns(&setup, &args, &mode_wrapper));
            let r = attack_with_path(&ws, &all, &cmd, &path);
            served = kill_servers(&pidfile);
            r
        };
        assert_eq!(served, 1, "{what}: the FUSE server did not start: {r:?}");
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(20),
            "{what}: the run waited on the stopped server ({took:?}): {r:?}"
        );
        assert_nowhere(&what, &r, &ws.state, &format!("FUSEHOME-{tag}"));
        if over != "workspace" {
            assert_command_ran(&what, &r, "HSUB-RAN");
            assert!(named(&r, &point, "FUSE"), "{what}: {:?}", r.stripped());
        } else {
            // Refused, and named: nothing ran in a workspace the engine
            // could not look at.
            assert!(
                r.code != 0,
                "{what}: a workspace the engine cannot look at ran: {r:?}"
            );
            let not_looked = format!("hidden:{} (on a FUSE mount", point.display());
            assert!(r.stdout.contains(&not_looked), "{what}: {r:?}");
        }
    }
}
