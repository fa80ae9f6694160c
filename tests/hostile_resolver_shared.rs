//! A hostile agent against the judgements the resolvers of one process
//! share (issues 30/31): the mounts a root look crossed are kept judged,
//! each with a descriptor that pins it, while a submission's looks are
//! held, for a second at most. The attacks: keeping those pins (and so
//! another user's mounts, busy to `umount`) past that second through a
//! root hook that waits on its rehearsal; swapping a judged mount for a
//! FUSE mount the agent serves (a lazy unmount, then a mount at the same
//! place) between the engine's plan and the helper's staging, hoping for
//! the old mount's id and verdict; and reaching a pin from inside the
//! rehearsal (`/proc/self/fd`, `/proc/1/fd`).
//!
//! Every attack is judged on the host side: whether the host's `umount`
//! of the mount succeeds while the run goes on, that no canary comes back
//! in what the run reports or keeps, that the run does not wait (each
//! attempt under `timeout`), and that no descriptor the command can see
//! is the host's root or home. The mounts are made in a private mount
//! namespace around the CLI or the hook (`tests/common/ns.rs`), as root
//! and as this file's own account (`dryrun-hres`).

mod common;

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
