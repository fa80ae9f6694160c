//! A hostile agent against the judgements the resolvers of one process
//! share (issues 30/31): the mounts a root look crossed are kept judged,
//! each with a descriptor that pins it, while a submission's looks are
//! held, for a second at most. The attacks: keeping those pins (and so
//! another user's mounts, busy to `umount`) past that second through a
//! root hook that waits on its rehearsal; swapping a judged mount for a
//! FUSE mount the agent serves (a lazy unmount, then a mount at the same
//! place) between the engine's plan and the helper's staging, hoping for
//! the old mount's id and verdict; reaching a pin from inside the
//! rehearsal (`/proc/self/fd`, `/proc/1/fd`); and keeping another user's
//! mount busy through a root daemon, with a flood of submissions or with
//! one that waits while it is prepared.
//!
//! Every attack is judged on the host side: whether the host's `umount`
//! of the mount succeeds while the run goes on, that no canary comes back
//! in what the run reports or keeps, that the run does not wait (each
//! attempt under `timeout`), and that no descriptor the command can see
//! is the host's root or home. The mounts are made in a private mount
//! namespace around the CLI or the hook (`tests/common/ns.rs`), as root
//! and as this file's own account (`dryrun-hres`).

mod common;

use common::leaks::*;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;

/// The tests share one account's home: one test at a time.
static HOME_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// This file's own account: (uid, gid, home).
fn hres_user() -> (u32, u32, PathBuf) {
    static U: OnceLock<(u32, u32, PathBuf)> = OnceLock::new();
    U.get_or_init(|| common::account_with_home("dryrun-hres", "/home/dryrun-hres"))
        .clone()
}

/// Paths a test made, removed (innermost first) when it ends.
struct Made(Vec<PathBuf>);

impl Drop for Made {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
        }
    }
}

impl Made {
    /// A new directory, 0755, owned by `owner`.
    fn dir(&mut self, p: &Path, owner: Option<(u32, u32)>) -> PathBuf {
        std::fs::create_dir_all(p).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Some((u, g)) = owner {
            std::os::unix::fs::chown(p, Some(u), Some(g)).unwrap();
        }
        self.0.push(p.to_path_buf());
        p.to_path_buf()
    }
}

fn account() -> Option<(u32, u32)> {
    let (u, g, _) = hres_user();
    Some((u, g))
}

/// The script (for `sh -c`, its arguments `$1`..) that makes a `/dev/fuse`
/// anyone may open in the test's namespace (on a tmpfs at `$dev`) and has
/// the account serve `bindfs` of `$src` at `$point` in the background,
/// waiting until the mount is listed.
fn serve_fuse(dev: usize, src: usize, point: usize) -> String {
    let (u, g, _) = hres_user();
    format!(
        "mount -t tmpfs hres \"${dev}\" && mknod -m 666 \"${dev}/fuse\" c 10 229 && \
         mount --bind \"${dev}/fuse\" /dev/fuse && \
         {{ setpriv --reuid={u} --regid={g} --clear-groups -- bindfs -f --no-allow-other \"${src}\" \"${point}\" >/dev/null 2>&1 & }} && \
         for i in $(seq 1 100); do grep -q \" ${point} \" /proc/self/mountinfo && break; sleep 0.1; done && \
         grep -q \" ${point} \" /proc/self/mountinfo"
    )
}

/// Attack 2: a root hook (in-process engine) whose `HOME` is a tmpfs and
/// whose `PATH` holds a directory on a FUSE mount the account serves,
/// rehearsing a command that takes five seconds. The hook's looks cross
/// the tmpfs (and meet the FUSE mount, refused); 2.5 s in, while the
/// rehearsal goes on, the namespace's root unmounts both without `-l`.
/// Each `umount` must succeed: a judgement's pin outlives neither its
/// second nor, for a mount not crossed, the look. Found: the hook held
/// its shared judgements (and their pins) until it answered, through the
/// whole rehearsal: both unmounts were refused `EBUSY`.
#[test]
fn a_root_hooks_judgements_pin_no_mount_past_their_second() {
    let _l = lock();
    if !require_root() || !require_tool("bindfs", "bindfs") {
        return;
    }
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let base = made.dir(&PathBuf::from(format!("/srv/hres-pin-{tag}")), None);
    let home = made.dir(&base.join("home"), None);
    let src = made.dir(&base.join("src"), account());
    made.dir(&src.join("bin"), account());
    let point = made.dir(&base.join("fuse"), account());
    let dev = made.dir(&base.join("dev"), None);
    let res = base.join("umounts");
    let w = common::hook::hook_ws("hres-pin-");
    let script = format!(
        "mount -t tmpfs hres \"$1\" && {fuse} && \
         {{ (sleep 2.5; for m in \"$1\" \"$3\"; do if umount \"$m\" 2>/dev/null; then echo \"umounted $m\"; else echo \"busy $m\"; fi; done > \"$5\") >/dev/null 2>&1 & }} && \
         shift 5 && exec \"$@\"",
        fuse = serve_fuse(4, 2, 3)
    );
    let args: Vec<String> = [&home, &src, &point, &dev, &res]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut c = Command::new("timeout");
    c.arg("60")
        .args(ns::in_private_mount_ns(
            &script,
            &[vec!["hres".to_string()], args].concat(),
        ))
        .arg(bin())
        .args(["hook", "claude-code"])
        .env("DRYRUN_LOCAL", "1")
        .env("DRYRUN_STATE_DIR", &w.state)
        .env("HOME", &home)
        .env(
            "PATH",
            format!("/usr/bin:/bin:{}", point.join("bin").display()),
        )
        .env_remove("DRYRUN_SOCKET")
        .env_remove("CLAUDE_PROJECT_DIR")
        .env_remove("DRYRUN_HOOK_WORKSPACE")
        .current_dir(&w.ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let event = common::hook::claude_event(&w.ws, "sleep 5; echo HRES-RAN");
    let t0 = Instant::now();
    let mut ch = c.spawn().unwrap();
    ch.stdin
        .take()
        .unwrap()
        .write_all(event.to_string().as_bytes())
        .unwrap();
    let o = ch.wait_with_output().unwrap();
    let took = t0.elapsed();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(took < Duration::from_secs(55), "the hook waited: {stderr}");
    assert!(
        took > Duration::from_secs(4),
        "the rehearsal did not run ({took:?}): {stderr}"
    );
    let umounts = std::fs::read_to_string(&res).unwrap_or_default();
    for m in [&home, &point] {
        assert!(
            umounts.contains(&format!("umounted {}", m.display())),
            "{} stayed busy while the hook waited on its rehearsal: {umounts:?}; {stderr}",
            m.display()
        );
    }
}

/// `dryrun execute` of `cmd` by root's engine on a workspace of the
/// account (`HOME` its home), in a private mount namespace after `setup`
/// (its arguments from `$1`), under `timeout -s KILL 40`; `held`: a
/// strace log, the sandbox helper then held 3 s at its first `unshare`
/// of a mount namespace (after the engine's plan).
fn root_run(setup: &str, args: &[String], held: Option<&Path>, cmd: &str) -> (Ws, Run, Duration) {
    let (u, g, home) = hres_user();
    let (ws, _) = common::account_ws(Mode::RootEngine, u, g);
    let mut inner: Vec<String> = Vec::new();
    if let Some(log) = held {
        inner.extend(["strace", "-f", "-qq", "-o"].map(String::from));
        inner.push(log.display().to_string());
        inner.extend(["-e", "trace=unshare", "-e"].map(String::from));
        inner.push("inject=unshare:delay_enter=3000000:when=1".into());
    }
    let script = format!("{setup} && shift {} && exec \"$@\"", args.len());
    let mut wrapper: Vec<String> = ["timeout", "-s", "KILL", "40"].map(String::from).into();
    wrapper.extend(ns::in_private_mount_ns(
        &script,
        &[vec!["hres".to_string()], args.to_vec()].concat(),
    ));
    wrapper.extend(inner);
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                  "env": {"HOME": home, "PATH": "/usr/bin:/bin"}});
    chown_r(&ws.dir, u, g);
    let t0 = Instant::now();
    let r = execute_envelope(&ws, &wrapper, &body);
    (ws, r, t0.elapsed())
}

/// Kills the server whose pid `pidfile` holds; whether there was one.
fn kill_server(pidfile: &Path) -> bool {
    let pid: Option<i32> = std::fs::read_to_string(pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    if let Some(pid) = pid {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    pid.is_some()
}

/// Attack 1: the account's home a tmpfs, judged crossable by root's
/// engine; after the plan (the helper held at its first `unshare`), it is
/// lazily unmounted and a FUSE mount the account serves (`allow_other`,
/// its server then stopped, a canary in it) is made at the same place:
/// the kernel hands a freed mount id out again (the lowest free one), so
/// the new mount may carry the old one's id, and its verdict. The run
/// ends within 20 s, runs its command, and the canary comes back nowhere;
/// the ids both mounts had are printed. Held: the pin a verdict is kept
/// with keeps the old id from being handed out while the verdict lives,
/// and the helper is another process, which judges for itself.
#[test]
fn a_judged_mount_swapped_for_a_fuse_mount_at_its_place_is_not_crossed() {
    let _l = lock();
    if !require_root() || !require_tool("bindfs", "bindfs") || !require_tool("strace", "strace") {
        return;
    }
    let (u, g, home) = hres_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let base = made.dir(&PathBuf::from(format!("/var/tmp/hres-swap-{tag}")), None);
    let src = made.dir(&base.join("src"), account());
    std::fs::write(src.join("canary"), format!("SWAPPED-{tag}\n")).unwrap();
    std::fs::set_permissions(src.join("canary"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(src.join("canary"), Some(u), Some(g)).unwrap();
    std::fs::write(base.join("fuse.conf"), "user_allow_other\n").unwrap();
    let dev = made.dir(&base.join("dev"), None);
    let (log, pidfile, ids) = (base.join("strace"), base.join("pid"), base.join("ids"));
    let swap = format!(
        "(for i in $(seq 1 3000); do grep -qs 'unshare(CLONE_NEWNS' \"$5\" && break; sleep 0.01; done; \
          grep \" $1 \" /proc/self/mountinfo | cut -d' ' -f1 > \"$7\"; umount -l \"$1\"; \
          setpriv --reuid={u} --regid={g} --clear-groups -- bindfs -f -o allow_other \"$2\" \"$1\" & echo $! > \"$3\"; \
          for i in $(seq 1 100); do grep -q \" $1 \" /proc/self/mountinfo && break; sleep 0.05; done; \
          grep \" $1 \" /proc/self/mountinfo | cut -d' ' -f1 >> \"$7\"; kill -STOP $(cat \"$3\")) >/dev/null 2>&1 &"
    );
    let setup = format!(
        "mount -t tmpfs -o uid={u},gid={g},mode=0755 hres \"$1\" && mount --bind \"$6\" /etc/fuse.conf && \
         mount -t tmpfs hres \"$4\" && mknod -m 666 \"$4/fuse\" c 10 229 && mount --bind \"$4/fuse\" /dev/fuse && \
         {{ {swap} }}"
    );
    let args: Vec<String> = [
        &home,
        &src,
        &pidfile,
        &dev,
        &log,
        &base.join("fuse.conf"),
        &ids,
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect();
    let cmd = "cat ~/canary; ls -la ~; echo HRES-RAN; exit 0";
    let (ws, r, took) = root_run(&setup, &args, Some(&log), cmd);
    let served = kill_server(&pidfile);
    let ids = std::fs::read_to_string(&ids).unwrap_or_default();
    eprintln!("mount ids at the home, before and after the swap: {ids:?}");
    assert!(served, "the FUSE server did not start: {r:?}");
    assert!(
        took < Duration::from_secs(20),
        "the run waited on the stopped server ({took:?}): {r:?}"
    );
    assert!(
        r.out().contains("HRES-RAN"),
        "the command did not run: {r:?}"
    );
    assert_nowhere("swapped home", &r, &ws.state, &format!("SWAPPED-{tag}"));
}

/// Attack 3: the account's home a tmpfs (judged and pinned by root's
/// engine and the helper's staging); the command lists every descriptor
/// it and the sandbox's init hold (`/proc/self/fd`, `/proc/1/fd`) with the
/// device and inode each is. None is the host's root, `/home` or the
/// home's mount (as the namespace saw them before the run).
#[test]
fn no_pin_of_the_hosts_mounts_is_reachable_from_the_rehearsal() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home) = hres_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let base = made.dir(&PathBuf::from(format!("/var/tmp/hres-fds-{tag}")), None);
    let seen = base.join("seen");
    let setup = format!(
        "mount -t tmpfs -o uid={u},gid={g},mode=0755 hres \"$1\" && stat -c %d:%i / /home \"$1\" > \"$2\""
    );
    let args = vec![home.display().to_string(), seen.display().to_string()];
    let cmd = "for f in /proc/self/fd/* /proc/1/fd/*; do echo \"FD $f $(stat -L -c %d:%i \"$f\" 2>/dev/null) $(readlink \"$f\" 2>/dev/null)\"; done; echo HRES-RAN";
    let (_ws, r, took) = root_run(&setup, &args, None, cmd);
    assert!(took < Duration::from_secs(35), "{r:?}");
    assert!(
        r.out().contains("HRES-RAN"),
        "the command did not run: {r:?}"
    );
    let hosts: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    let fds: Vec<&str> = r.out().lines().filter(|l| l.starts_with("FD ")).collect();
    assert!(!fds.is_empty(), "{r:?}");
    eprintln!("descriptors seen from the rehearsal: {fds:#?}");
    for l in &fds {
        for h in &hosts {
            assert!(
                !l.split(' ').any(|w| w == h),
                "a descriptor of the host's {h} is reachable from the rehearsal: {l}"
            );
        }
    }
}

/// Attack 2, through a root daemon: the test user (the agent) keeps
/// submissions flowing (three at a time, five seconds) whose `PATH` goes
/// through a tmpfs the account (another user) has mounted, so that root's
/// looks cross it again and again; meanwhile the namespace's root tries
/// `umount` (not lazy) every 0.1 s from 1.5 s in. It must succeed within
/// two seconds: a pin is kept for one submission's looks, never
/// handed on from one to the next.
#[test]
fn a_flood_of_submissions_keeps_no_other_users_mount_busy() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, _) = hres_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let base = made.dir(&PathBuf::from(format!("/var/tmp/hres-flood-{tag}")), None);
    let victim = made.dir(&PathBuf::from(format!("/srv/hres-victim-{tag}")), account());
    let (go, res) = (base.join("go"), base.join("umount"));
    let setup = format!(
        "mount -t tmpfs -o uid={u},gid={g},mode=0755 hres \"$1\" && mkdir \"$1/bin\" && \
         {{ (for i in $(seq 1 3000); do test -e \"$2\" && break; sleep 0.01; done; sleep 1.5; \
             for i in $(seq 1 60); do if umount \"$1\" 2>/dev/null; then echo \"umounted after $i\"; exit; fi; sleep 0.1; done; \
             echo busy) > \"$3\" 2>/dev/null & }}"
    );
    let args = [&victim, &go, &res].map(|p| p.display().to_string());
    let script = format!("{setup} && shift 3 && exec \"$@\"");
    let wrapper =
        ns::in_private_mount_ns(&script, &[vec!["hres".to_string()], args.to_vec()].concat());
    let d = common::daemon::Daemon::start_wrapped(&wrapper, &[]);
    let ws = common::daemon::user_workspace();
    let path = format!("/usr/bin:/bin:{}", victim.join("bin").display());
    let t0 = Instant::now();
    std::fs::write(&go, "").unwrap();
    let runs: usize = std::thread::scope(|s| {
        let floods: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while t0.elapsed() < Duration::from_secs(5) {
                        let o = d
                            .cli_user()
                            .env("PATH", &path)
                            .current_dir(&ws.dir)
                            .args(["execute", "--json", "--command", "true"])
                            .output()
                            .unwrap();
                        n += usize::from(o.status.code().is_some());
                    }
                    n
                })
            })
            .collect();
        floods.into_iter().map(|f| f.join().unwrap()).sum()
    });
    let umount = std::fs::read_to_string(&res).unwrap_or_default();
    eprintln!("{runs} submissions in 5 s; the victim's umount: {umount:?}");
    drop(d);
    let tries: Option<u32> = umount
        .trim()
        .strip_prefix("umounted after ")
        .and_then(|n| n.parse().ok());
    assert!(
        tries.is_some_and(|n| n <= 20),
        "the other user's mount stayed busy while the agent's submissions flowed: {umount:?} ({runs} submissions)"
    );
}

/// Attack 2, one submission that waits: the test user (the agent) serves
/// a FUSE mount over its workspace's `.dryrun` and stops the server, so
/// that the engine's read of the workspace policy (through the agent that
/// acts as the owner) waits for its deadline while the engine prepares;
/// its `PATH` goes through a tmpfs the account (another user) has
/// mounted. From 1.5 s in, the namespace's root tries `umount` (not lazy)
/// every 0.1 s: it must succeed within two seconds. Held: the agent
/// crosses no mount on the policy's path, and the submission is refused
/// at once (`invalid_policy`), so nothing waits holding judgements.
#[test]
fn a_submission_that_waits_keeps_no_other_users_mount_busy() {
    let _l = lock();
    if !require_root() || !require_tool("bindfs", "bindfs") {
        return;
    }
    let (u, g, _) = hres_user();
    let (tu, tg) = test_user();
    let tag = random_hex();
    let mut made = Made(Vec::new());
    let base = made.dir(&PathBuf::from(format!("/var/tmp/hres-wait-{tag}")), None);
    let victim = made.dir(&PathBuf::from(format!("/srv/hres-victim-{tag}")), account());
    let src = made.dir(&base.join("src"), Some((tu, tg)));
    let dev = made.dir(&base.join("dev"), None);
    let ws = common::daemon::user_workspace();
    let point = ws.dir.join(".dryrun");
    std::fs::create_dir_all(&point).unwrap();
    std::os::unix::fs::chown(&point, Some(tu), Some(tg)).unwrap();
    let (go, res, pid) = (base.join("go"), base.join("umount"), base.join("pid"));
    let setup = format!(
        "mount -t tmpfs -o uid={u},gid={g},mode=0755 hres \"$1\" && mkdir \"$1/bin\" && \
         mount -t tmpfs hres \"$4\" && mknod -m 666 \"$4/fuse\" c 10 229 && mount --bind \"$4/fuse\" /dev/fuse && \
         {{ setpriv --reuid={tu} --regid={tg} --clear-groups -- bindfs -f --no-allow-other \"$5\" \"$6\" >/dev/null 2>&1 & echo $! > \"$7\"; }} && \
         for i in $(seq 1 100); do grep -q \" $6 \" /proc/self/mountinfo && break; sleep 0.1; done && \
         grep -q \" $6 \" /proc/self/mountinfo && kill -STOP $(cat \"$7\") && \
         {{ (for i in $(seq 1 3000); do test -e \"$2\" && break; sleep 0.01; done; sleep 1.5; \
             for i in $(seq 1 60); do if umount \"$1\" 2>/dev/null; then echo \"umounted after $i\"; exit; fi; sleep 0.1; done; \
             echo busy) > \"$3\" 2>/dev/null & }}"
    );
    let args = [&victim, &go, &res, &dev, &src, &point, &pid].map(|p| p.display().to_string());
    let script = format!("{setup} && shift 7 && exec \"$@\"");
    let wrapper =
        ns::in_private_mount_ns(&script, &[vec!["hres".to_string()], args.to_vec()].concat());
    let d = common::daemon::Daemon::start_wrapped(&wrapper, &[]);
    let path = format!("/usr/bin:/bin:{}", victim.join("bin").display());
    std::fs::write(&go, "").unwrap();
    let t0 = Instant::now();
    let o = d
        .cli_user()
        .env("PATH", &path)
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--command", "true"])
        .output()
        .unwrap();
    let took = t0.elapsed();
    let served = kill_server(&pid);
    // Let the probe finish when the submission did not wait.
    for _ in 0..80 {
        if std::fs::read_to_string(&res).is_ok_and(|s| !s.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let umount = std::fs::read_to_string(&res).unwrap_or_default();
    eprintln!(
        "the submission took {took:?} ({:?}: {}); the victim's umount: {umount:?}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    drop(d);
    assert!(served, "the FUSE server did not start");
    let tries: Option<u32> = umount
        .trim()
        .strip_prefix("umounted after ")
        .and_then(|n| n.parse().ok());
    assert!(
        tries.is_some_and(|n| n <= 20),
        "the other user's mount stayed busy while the submission waited: {umount:?} (it took {took:?})"
    );
}
