//! Hostile agent against the host side of big change sets (root daemon,
//! agent uid `dryrun-test`, a workspace the agent owns): one `syncfs` per
//! promotion, content stored once per hash, lower lookups skipped under
//! new directories, long change lists summarised. Every test asserts on
//! the host: canaries unchanged, nothing written outside the workspace,
//! the daemon answering, the journal verifying, the live workspace either
//! exactly the reviewed change set or as it was.
//!
//! Attacks that WORKED before their fix: killing or stopping the
//! workspace agent that serves the agent's own promotion (it runs as
//! the agent's uid) left half a change set with its backups deleted, and a
//! stopped one made every undo step wait its time limit; a change list cut
//! at its cap was promoted after an override.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::daemon::*;
use common::*;

/// A snapshot without times (an undo changes directories' mtimes).
fn listing(dir: &Path) -> BTreeMap<PathBuf, String> {
    snapshot_tree(dir)
        .into_iter()
        .map(|(p, v)| {
            let kept: Vec<&str> = v.split(' ').filter(|f| !f.starts_with("mtime=")).collect();
            (p, kept.join(" "))
        })
        .collect()
}

/// The paths whose listing differs (at most a few, for the message).
fn differing(a: &BTreeMap<PathBuf, String>, b: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&PathBuf> = a.keys().chain(b.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| k.display().to_string())
        .collect();
    let n = diff.len();
    let mut shown: Vec<String> = diff.into_iter().take(5).collect();
    if n > 5 {
        shown.push(format!("and {} more", n - 5));
    }
    shown
}

fn promote_bg(d: &Daemon, id: &str) -> Child {
    d.cli_user()
        .args(["promote", id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a command printed, both streams.
fn said(out: &std::process::Output) -> String {
    let (o, e) = (&out.stdout, &out.stderr);
    format!(
        "{}{}",
        String::from_utf8_lossy(o),
        String::from_utf8_lossy(e)
    )
}

/// Wait for a child, at most `secs`: `None` when it was still running
/// (then it is killed).
fn wait_bounded(mut c: Child, secs: u64) -> Option<(i32, String)> {
    let t0 = Instant::now();
    loop {
        if c.try_wait().unwrap().is_some() {
            let out = c.wait_with_output().unwrap();
            return Some((out.status.code().unwrap_or(-1), said(&out)));
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = c.kill();
            let _ = c.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn approve(d: &Daemon, id: &str, over: bool) {
    let mut a = d.cli_root();
    a.args(["approve", id, "--note", "reviewed"]);
    if over {
        a.arg("--override");
    }
    let out = a.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
}

fn journal_verifies(d: &Daemon) {
    let out = d.cli_root().args(["journal", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "journal verify: {}", said(&out));
    assert!(health_ok(&d.socket), "the daemon stopped answering");
}

/// A workspace with `n` files `m/fNNN` ("old") that the run below rewrites,
/// and the run's command: rewrite them all, create `n` more in `n/`.
fn rewrite_workspace(n: usize) -> (Ws, String) {
    let ws = user_workspace();
    std::fs::create_dir(ws.dir.join("m")).unwrap();
    for i in 0..n {
        std::fs::write(ws.dir.join(format!("m/f{i:03}")), "old\n").unwrap();
    }
    ws.chown_all();
    let cmd = format!(
        "mkdir n && for i in $(seq -w 0 {last}); do echo new > m/f$i; echo $i > n/f$i; done",
        last = n - 1
    );
    (ws, cmd)
}

/// A promotion of `n` rewritten files, stalled halfway; its agents just got `signal`.
struct Halfway {
    d: Daemon,
    ws: Ws,
    original: BTreeMap<PathBuf, String>,
    promotion: Child,
    agents: Vec<i32>,
}

fn signal_agents_halfway_through_a_promotion(n: usize, signal: &str) -> Halfway {
    let d = Daemon::start_env(&[], &[("DRYRUN_FAULT_APPLY_STALL_MS", "4000")]);
    let (ws, cmd) = rewrite_workspace(n);
    let r = submit_user(&d, &ws, &cmd, &["--expect-write", "**"]);
    assert_eq!(r.decision(), "promote", "{r:?}");
    let original = listing(&ws.dir);
    let promotion = promote_bg(&d, &run_id(&r));
    // Ops: n/, the rewritten m/ files, the new files: halfway, m/ is rewritten.
    let last = ws.dir.join(format!("m/f{:03}", n - 1));
    wait_until("the apply to stall halfway", 60, || {
        std::fs::read_to_string(&last).is_ok_and(|s| s == "new\n")
    });
    let agents = workspace_agents(&d);
    assert!(!agents.is_empty(), "no workspace agent found");
    for pid in &agents {
        let st = as_test_user("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "the agent may signal its own workspace agent");
    }
    Halfway {
        d,
        ws,
        original,
        promotion,
        agents,
    }
}

/// The agent SIGKILLs its own workspace agent while the promotion is
/// halfway (the apply stalls there): the steps already taken must be undone
/// (with a fresh agent) or kept for recovery, never left half-applied with
/// their backups deleted.
#[test]
fn killing_the_workspace_agent_mid_promotion_leaves_the_workspace_as_it_was() {
    if !require_root() {
        return;
    }
    let mut h = signal_agents_halfway_through_a_promotion(300, "-KILL");
    let (ws, original) = (&h.ws, &h.original);
    let (code, text) = wait_bounded(h.promotion, 120).expect("the promotion answered");
    assert_ne!(code, 0, "{text}");
    // Undone through a fresh agent, at once.
    let diff = differing(&listing(&ws.dir), original);
    assert!(
        diff.is_empty(),
        "{diff:?}: {}",
        &text[..text.len().min(2000)]
    );
    // And still so after a restart's recovery.
    h.d.kill9();
    h.d.restart(&[]);
    let diff = differing(&listing(&h.ws.dir), &h.original);
    assert!(
        diff.is_empty(),
        "the workspace is half promoted after its workspace agent was killed: {diff:?}; promote said: {}",
        &text[..text.len().min(2000)]
    );
    assert!(h.d.journal().iter().all(|b| b["kind"] != "promotion"));
    journal_verifies(&h.d);
}

/// The agent SIGSTOPs its workspace agent halfway: the root side gives up
/// on it after its time limit, and the undo must not wait that limit again
/// for every one of hundreds of steps (hours, holding the run and a daemon
/// thread): it answers, and the workspace ends as it was.
#[test]
fn a_stopped_workspace_agent_mid_promotion_does_not_hold_the_daemon_for_hours() {
    if !require_root() {
        return;
    }
    let mut h = signal_agents_halfway_through_a_promotion(200, "-STOP");
    // One agent time limit (30 s) for the stalled step, then the undo: far
    // less than 200 steps times that limit.
    let answered = wait_bounded(h.promotion, 150);
    for pid in &h.agents {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let (code, text) = answered.expect("the promotion answered while its agent stayed stopped");
    assert_ne!(code, 0, "{text}");
    h.d.kill9();
    h.d.restart(&[]);
    let diff = differing(&listing(&h.ws.dir), &h.original);
    assert!(
        diff.is_empty(),
        "{diff:?}; promote said: {}",
        &text[..text.len().min(2000)]
    );
    journal_verifies(&h.d);
}

/// A directory holding `names` (0666, "CANARY"), mode `mode`, root's: what
/// the agent points a swapped-in symlink at.
fn canary_dir(mode: u32, names: &[String]) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-canary-")
        .tempdir_in("/tmp")
        .unwrap();
    for n in names {
        let p = d.path().join(n);
        std::fs::write(&p, "CANARY\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

/// While a 3,000-file promotion stalls halfway, the agent swaps package
/// directories for symlinks: one already written (the undo must not follow
/// it), two not yet written, to a directory it may write itself and to a
/// root-only one. Nothing outside the workspace changes; the daemon answers
/// and the journal verifies, with no promotion in it.
#[test]
fn directories_swapped_for_symlinks_mid_promotion_never_lead_outside() {
    if !require_root() {
        return;
    }
    let d = Daemon::start_env(&[], &[("DRYRUN_FAULT_APPLY_STALL_MS", "3000")]);
    let ws = user_workspace();
    let names: Vec<String> = (0..30).map(|f| format!("f{f:02}")).collect();
    let open = canary_dir(0o777, &names);
    let shut = canary_dir(0o755, &names);
    let (open_before, shut_before) = (snapshot_tree(open.path()), snapshot_tree(shut.path()));
    let r = submit_user(
        &d,
        &ws,
        "for d in $(seq -w 0 99); do mkdir d$d; for f in $(seq -w 0 29); do echo $d$f > d$d/f$f; done; done",
        &["--expect-write", "**"],
    );
    assert_eq!(r.decision(), "promote", "{r:?}");
    let p = promote_bg(&d, &run_id(&r));
    // 100 directories, then files in order: halfway, d00..d49 are written.
    wait_until("the apply to stall halfway", 60, || {
        ws.dir.join("d49/f29").exists()
    });
    let swap = format!(
        "chmod 500 d01 && mv d00 d00.moved && ln -s {o} d00 && mv d98 d98.moved && ln -s {s} d98 && mv d99 d99.moved && ln -s {o} d99",
        o = open.path().display(),
        s = shut.path().display()
    );
    let st = as_test_user("bash")
        .arg("-c")
        .arg(&swap)
        .current_dir(&ws.dir)
        .status()
        .unwrap();
    assert!(st.success());
    let (code, text) = wait_bounded(p, 120).expect("the promotion answered");
    assert_ne!(code, 0, "{text}");
    assert_eq!(snapshot_tree(open.path()), open_before, "{text}");
    assert_eq!(snapshot_tree(shut.path()), shut_before, "{text}");
    // The undo could not remove what it wrote in d01 (the agent made it
    // read-only): its plan and backups wait for the next start, and a
    // retry does not stack up another.
    let (code, again) = wait_bounded(promote_bg(&d, &run_id(&r)), 60).unwrap();
    assert_ne!(code, 0, "{again}");
    assert!(again.contains("could not be undone yet"), "{again}");
    assert!(d.journal().iter().all(|b| b["kind"] != "promotion"));
    journal_verifies(&d);
}

/// The daemon is SIGKILLed halfway through promoting a big change set
/// (2,000 created, 300 rewritten, 100 deleted): after a restart the
/// workspace is exactly as it was and the journal says the promotion was
/// aborted; promoting again lands every change as the record lists it.
#[test]
fn a_daemon_killed_mid_promotion_of_a_big_change_set_is_all_or_nothing() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start_env(&[], &[("DRYRUN_FAULT_APPLY_STALL_MS", "60000")]);
    let ws = user_workspace();
    for dir in ["m", "x"] {
        std::fs::create_dir(ws.dir.join(dir)).unwrap();
    }
    for i in 0..300 {
        std::fs::write(ws.dir.join(format!("m/f{i:03}")), "old\n").unwrap();
    }
    for i in 0..100 {
        std::fs::write(ws.dir.join(format!("x/f{i:03}")), "gone\n").unwrap();
    }
    ws.chown_all();
    let original = listing(&ws.dir);
    let r = submit_user(
        &d,
        &ws,
        "rm x/*; mkdir n; for i in $(seq -w 0 299); do echo new$i > m/f$i; done; for i in $(seq -w 0 1999); do echo $i > n/f$i; done",
        &["--expect-write", "**"],
    );
    assert_eq!(r.decision(), "promote", "{r:?}");
    let id = run_id(&r);
    let p = promote_bg(&d, &id);
    // 100 deletions, n/, 300 rewrites, then the new files: halfway is n/f0799.
    wait_until("the apply to stall halfway", 60, || {
        ws.dir.join("n/f0799").exists()
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(!differing(&listing(&ws.dir), &original).is_empty());
    d.kill9();
    let _ = wait_bounded(p, 30);
    d.restart(&[]);
    let diff = differing(&listing(&ws.dir), &original);
    assert!(diff.is_empty(), "half promoted after the restart: {diff:?}");
    assert!(
        d.journal()
            .iter()
            .any(|b| b["kind"] == "promotion_aborted" && b["run_id"] == id.as_str())
    );
    assert!(d.journal().iter().all(|b| b["kind"] != "promotion"));
    journal_verifies(&d);
    // Promoted again, fully.
    let (code, text) = wait_bounded(promote_bg(&d, &id), 120).unwrap();
    assert_eq!(code, 0, "{text}");
    assert_live_is_the_change_set(&d, &ws, &id);
    journal_verifies(&d);
}

/// Every change of the run's record (the reviewed list) is what the live
/// workspace holds: content hash, mode, type, owner; the journal's
/// promotion names the receipt's change-set hash and count.
fn assert_live_is_the_change_set(d: &Daemon, ws: &Ws, id: &str) {
    let out = d.cli_user().args(["show", "--json", id]).output().unwrap();
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let changes = rec["rehearsal"]["changes"].as_array().unwrap();
    let (uid, _) = test_user();
    for c in changes {
        let rel = hex::decode(c["path_hex"].as_str().unwrap_or_default())
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| c["path"].as_str().unwrap().as_bytes().to_vec());
        let p = ws
            .dir
            .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&rel));
        let shown = c["path"].as_str().unwrap();
        let m = std::fs::symlink_metadata(&p);
        if c["kind"] == "deleted" {
            assert!(m.is_err(), "{shown} is still there");
            continue;
        }
        let m = m.unwrap_or_else(|e| panic!("{shown}: {e}"));
        assert_eq!(m.uid(), uid, "{shown} is not the workspace owner's");
        assert_eq!(m.mode() & 0o6000, 0, "{shown} has set-id bits");
        if c["file_type"] == "file" {
            let h = blake3::hash(&std::fs::read(&p).unwrap())
                .to_hex()
                .to_string();
            assert_eq!(c["after"].as_str(), Some(h.as_str()), "{shown}");
            if let Some(mode) = c["mode_after"].as_u64() {
                assert_eq!(m.mode() & 0o777, mode as u32 & 0o777, "{shown}");
            }
        }
    }
    let rc = &rec["receipt"];
    let promotion = d
        .journal()
        .into_iter()
        .find(|b| b["kind"] == "promotion" && b["run_id"] == id)
        .expect("a promotion in the journal");
    assert_eq!(promotion["data"]["change_set"], rc["change_set"]);
    let total = promotion["data"]["changes_total"]
        .as_u64()
        .or(promotion["data"]["changes"]
            .as_array()
            .map(|a| a.len() as u64));
    assert_eq!(total, Some(changes.len() as u64));
}

/// Writes 1,200 files under node_modules/ and, among them, names meant to
/// hide a path from a reviewer reading the summary by directory: a newline
/// forging a summary line, a terminal escape, a 255-byte name, invalid
/// UTF-8, and a forbidden `.git/hooks/` file.
const HIDE: &str = r#"
import os
for d in range(40):
    os.makedirs("node_modules/p%02d" % d)
    for f in range(30):
        with open("node_modules/p%02d/m%02d.js" % (d, f), "w") as fh:
            fh.write("x%d\n" % (d * 100 + f))
os.makedirs(b"node_modules/p00/evil\n  node_modules/ (1 created)", exist_ok=True)
for name in [b"conf/x\n  node_modules/ (1,200 created in 40 dirs)", b"conf/\x1b[2Jcls", b"conf/" + b"L" * 255, b"conf/bad\xff", b".git/hooks/pre-commit"]:
    os.makedirs(os.path.dirname(name), exist_ok=True)
    with open(name, "wb") as fh:
        fh.write(b"surprise\n")
with open(b"node_modules/p00/evil\n  node_modules/ (1 created)/a.js", "w") as fh:
    fh.write("y\n")
"#;

/// Among 1,200 changes summarised by directory, every surprise and
/// forbidden path is still named (escaped, on its own line), nothing of the
/// names reaches the terminal raw, and after an override the live
/// workspace holds exactly the record's change list, whose hash and count
/// the journal binds.
#[test]
fn hostile_names_among_many_changes_are_named_and_the_promotion_is_the_change_set() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("hide.py", HIDE);
    let r = submit_user(
        &d,
        &ws,
        "python3 hide.py",
        &["--expect-write", "node_modules/**", "--forbid", ".git/"],
    );
    assert_eq!(r.code, 4, "{}", r.stderr);
    let id = run_id(&r);
    let surprises = strings(&r.json["verdict"]["surprise_paths"]);
    for want in ["conf/x\n", "conf/\u{1b}[2Jcls", "conf/LLLL", "conf/bad"] {
        assert!(
            surprises.iter().any(|s| s.starts_with(want)),
            "{want:?} is not a surprise: {surprises:?}"
        );
    }
    let forbidden = strings(&r.json["verdict"]["forbidden_paths_touched"]);
    assert!(
        forbidden.iter().any(|p| p.starts_with(".git/hooks")),
        "{forbidden:?}"
    );
    for args in [vec!["show", id.as_str()], vec!["runs"]] {
        let out = d.cli_user().args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            !text.contains('\u{1b}'),
            "{args:?}: a raw escape reached the terminal"
        );
        if args[0] != "show" {
            continue;
        }
        assert!(text.lines().count() < 120, "{} lines", text.lines().count());
        for shown in [
            "conf/x⟦LF⟧  node_modules/ (1,200 created in 40 dirs)",
            "conf/⟦ESC⟧[2Jcls",
            "conf/bad⟦0xFF⟧",
            ".git/hooks/pre-commit",
        ] {
            assert!(
                text.lines().any(|l| l.trim_start().starts_with(shown)),
                "{shown} is not named on its own line:\n{text}"
            );
        }
        // The forged summary line never stands on a line of its own.
        assert!(
            !text
                .lines()
                .any(|l| l == "  node_modules/ (1,200 created in 40 dirs)"
                    || l == "  node_modules/ (1 created)"),
            "{text}"
        );
    }
    approve(&d, &id, true);
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_live_is_the_change_set(&d, &ws, &id);
    assert_eq!(
        std::fs::read(
            ws.dir.join(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"conf/bad\xff")
            )
        )
        .unwrap(),
        b"surprise\n"
    );
    journal_verifies(&d);
}

/// One content under several names and modes, a hard link, a file chowned
/// to another sandbox id, a setgid directory turned plain: stored once by
/// hash, promoted with each file's own reviewed mode, all owned by the
/// workspace owner, none set-id.
#[test]
fn content_shared_by_hash_is_promoted_with_each_files_own_mode_and_owner() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    // In a build output directory: an executable made there needs no
    // approval (a new program anywhere else would: `protected.executable`).
    let cmd = "mkdir -p dist && for f in a b c; do echo same > dist/$f; done; chmod 644 dist/a; chmod 755 dist/b; chmod 600 dist/c; \
               ln dist/a dist/h; echo same > dist/o && chown 1234:1234 dist/o; exit 0";
    let r = submit_user(
        &d,
        &ws,
        cmd,
        &["--expect-write", "dist/**", "--expect-write", "dist"],
    );
    assert_eq!(r.decision(), "promote", "{r:?}");
    let id = run_id(&r);
    let hashes: std::collections::HashSet<String> = r
        .changes()
        .iter()
        .filter(|c| c["file_type"] == "file")
        .map(|c| c["after"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(hashes.len(), 1, "{:?}", r.changes());
    let blobs = d.state.join("runs").join(&id).join("blobs");
    let stored: Vec<_> = std::fs::read_dir(&blobs)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    // Stored once (the store may keep "before" copies of nothing here).
    assert!(stored.len() <= 1, "{stored:?}");
    // The agent cannot put other bytes under that name.
    let h = hashes.iter().next().unwrap();
    let st = as_test_user("bash")
        .arg("-c")
        .arg(format!("echo evil > {}", blobs.join(h).display()))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!st.success(), "the agent wrote into root's blob store");
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_live_is_the_change_set(&d, &ws, &id);
    let mode = |n: &str| {
        std::fs::metadata(ws.dir.join("dist").join(n))
            .unwrap()
            .mode()
            & 0o7777
    };
    assert_eq!((mode("a"), mode("b"), mode("c")), (0o644, 0o755, 0o600));
    let ino = |n: &str| {
        std::fs::metadata(ws.dir.join("dist").join(n))
            .unwrap()
            .ino()
    };
    assert_ne!(ino("a"), ino("h"), "a hard link was promoted as a link");
    journal_verifies(&d);
}

/// Special files and privileges the live workspace must never get: a
/// fifo, a socket, a setuid file, a setgid directory, user and security
/// xattrs, a 20 GiB sparse file, a device node (mknod is refused in the
/// sandbox). Even after a reviewer's override the promotion writes
/// nothing.
#[test]
fn special_files_setid_bits_and_xattrs_never_reach_the_live_workspace() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let original = listing(&ws.dir);
    let script = r#"
import os, socket, stat
os.makedirs("sp/gdir")
for f in ["ok", "suid", "x", "sec"]:
    with open("sp/" + f, "w") as fh:
        fh.write(f + "\n")
os.chmod("sp/suid", 0o4755)
os.chmod("sp/gdir", 0o2775)
os.mkfifo("sp/fifo")
socket.socket(socket.AF_UNIX).bind("sp/sock")
os.setxattr("sp/x", "user.grant", b"1")
try:
    os.setxattr("sp/sec", "security.capability", b"\x01\x00\x00\x02" + b"\xff" * 16)
except OSError as e:
    print("security xattr:", e.errno)
try:
    os.mknod("sp/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    print("mknod worked")
except OSError as e:
    print("mknod:", e.errno)
with open("sp/sparse", "w") as fh:
    fh.truncate(20 << 30)
"#;
    ws.write("sp.py", script);
    let r = submit_user(&d, &ws, "python3 sp.py", &["--expect-write", "**"]);
    assert!(!r.out().contains("mknod worked"), "{}", r.out());
    assert_eq!(r.code, 4, "{r:?}");
    let id = run_id(&r);
    approve(&d, &id, true);
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    for named in ["sp/fifo", "sp/sock", "sp/suid", "sp/x"] {
        assert!(err.contains(named), "{named} not refused: {err}");
    }
    let mut now = listing(&ws.dir);
    now.remove(Path::new("sp.py"));
    assert_eq!(
        differing(&now, &original),
        Vec::<String>::new(),
        "the refused promotion wrote something"
    );
    assert!(d.journal().iter().all(|b| b["kind"] != "promotion"));
    // Alone, a setgid directory (with a file in it) goes live without the
    // bit, and nothing promoted carries an extended attribute.
    let r = submit_user(
        &d,
        &ws,
        "mkdir g && chmod 2775 g && echo x > g/f",
        &["--expect-write", "g/**", "--expect-write", "g"],
    );
    let id = run_id(&r);
    if r.code != 0 {
        approve(&d, &id, r.code == 4);
    }
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_live_is_the_change_set(&d, &ws, &id);
    for p in ["g", "g/f"].map(|p| ws.dir.join(p)) {
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o6000, 0, "{} is set-id", p.display());
        assert_eq!(xattr::list(&p).unwrap().count(), 0, "{}", p.display());
    }
    journal_verifies(&d);
}

/// Between rehearsal and promotion the agent changes the live workspace
/// in touched paths the walk looked up cheaply or not at all: it creates a
/// directory the run created (whose entries the walk never looked up in
/// the workspace), and renames a directory the run writes in, putting
/// other content in its place. Each promotion is refused with nothing
/// written; the agent's files stay as it left them.
#[test]
fn a_workspace_changed_in_touched_paths_after_the_rehearsal_is_refused() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("pkg/x", "1\n");
    ws.write("pkg/keep", "k\n");
    let fresh = submit_user(
        &d,
        &ws,
        "mkdir -p newdir/sub && for i in $(seq 1 50); do echo $i > newdir/sub/f$i; done",
        &["--expect-write", "newdir/**", "--expect-write", "newdir"],
    );
    let moved = submit_user(
        &d,
        &ws,
        "echo 2 > pkg/x && rm pkg/keep",
        &["--expect-write", "pkg/*"],
    );
    for r in [&fresh, &moved] {
        assert_eq!(r.decision(), "promote", "{r:?}");
    }
    let agent = |script: &str| {
        let st = as_test_user("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&ws.dir)
            .status()
            .unwrap();
        assert!(st.success(), "{script}");
    };
    agent("mkdir -p newdir/sub && echo mine > newdir/sub/f7 && echo mine > newdir/other");
    agent("mv pkg pkg.old && mkdir pkg && echo 3 > pkg/x && echo k > pkg/keep");
    let before = listing(&ws.dir);
    for r in [&fresh, &moved] {
        let out = d.cli_user().args(["promote", &run_id(r)]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{err}");
        assert!(err.contains("changed since run"), "{err}");
        assert_eq!(differing(&listing(&ws.dir), &before), Vec::<String>::new());
    }
    assert!(d.journal().iter().all(|b| b["kind"] != "promotion"));
    journal_verifies(&d);
}

/// More than 100,000 changes: the walk lists the first 100,000 and the run
/// hits its `changes` limit (blocked). A reviewer's override must not
/// promote that cut list: the rest of what the command did (here a file
/// whose name sorts last) would silently never go live, and the receipt
/// would claim the run's change set.
#[test]
fn a_change_list_cut_at_its_cap_is_never_promoted_even_after_an_override() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let r = submit_user(
        &d,
        &ws,
        "python3 -c 'import os\nfor d in range(100):\n os.mkdir(\"c%02d\" % d)\n for f in range(1001):\n  open(\"c%02d/%04d\" % (d, f), \"w\").close()' && echo last > zz_last",
        &["--expect-write", "**", "--timeout", "600"],
    );
    assert!(
        r.limits_hit().contains(&"changes".to_string()),
        "{:?}",
        r.limits_hit()
    );
    assert!(r.change("zz_last").is_none());
    let id = run_id(&r);
    approve(&d, &id, r.code == 4);
    let before = listing(&ws.dir);
    let out = d.cli_user().args(["promote", &id]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "a cut change list was promoted");
    assert!(err.contains("incomplete"), "{err}");
    assert_eq!(differing(&listing(&ws.dir), &before), Vec::<String>::new());
    journal_verifies(&d);
}

/// The live workspace holds a hard link to root's world-writable file
/// outside it; a run rewrites that name (chmod is refused: root's), and replaces a
/// directory by an opaque one. Promoting and rolling back never write
/// through the link: root's file keeps its content, mode and owner.
#[test]
fn a_hard_link_out_of_the_workspace_is_replaced_never_written_through() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let (_keep, canary) = host_canary("root.conf", "ROOT\n");
    ws.write("o/old1", "1\n");
    let link = as_test_user("ln")
        .arg(&canary)
        .arg(ws.dir.join("linked"))
        .status();
    assert!(
        link.unwrap().success(),
        "protected_hardlinks refused a 0666 file"
    );
    let before = snapshot_tree(canary.parent().unwrap());
    let r = submit_user(
        &d,
        &ws,
        "echo agent > linked && rm -rf o && mkdir o && echo n > o/new",
        &["--expect-write", "**"],
    );
    assert!(
        r.change("o/old1").is_some_and(|c| c["kind"] == "deleted"),
        "{}",
        r.stderr
    );
    assert_eq!(r.decision(), "promote", "{:?}", r.reasons());
    let out = d
        .cli_user()
        .args(["promote", &run_id(&r), "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_live_is_the_change_set(&d, &ws, &run_id(&r));
    assert_eq!(
        snapshot_tree(canary.parent().unwrap()),
        before,
        "promoted through the link"
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rc = rec["receipt"]["receipt_id"].as_str().unwrap().to_string();
    let out = d.cli_user().args(["rollback", &rc]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(snapshot_tree(canary.parent().unwrap()), before, "{err}");
    journal_verifies(&d);
}
