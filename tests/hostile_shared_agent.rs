//! Hostile agent against the shared workspace agent: when a user submits
//! in a workspace whose owner's credentials are exactly its own, the
//! agent that resolved `working_dir` (running as the requester) also reads
//! the workspace policy (`OwnerSession::for_owner_from`).
//!
//! The attacker is the unprivileged uid `dryrun-test` talking to a root
//! daemon (and, where said, a process an administrator gave other ids).
//! Every attack is tried for real and asserted to fail on the host side:
//!
//! - a requester whose effective group is root's (a setgid-root wrapper)
//!   in a workspace an administrator gave with `chown UID DIR` (group 0):
//!   the shared agent must not hold group 0 and read a root-group policy;
//! - a uid with no account entry in such a workspace: the owner's agent
//!   must not hold the directory's group 0 either;
//! - swapping the workspace with a root-owned directory (root's 0600
//!   policy) between the resolve and the policy read (the test goes on
//!   until the swap has landed between the two at least once);
//! - stopping the shared agent, some of them between the two requests:
//!   the user's runs fail in bounded time and root's run is not held up;
//! - killing it, some between the two requests: every run either fails or
//!   was judged with the workspace policy (never judged silently without
//!   it), and the daemon serves on;
//! - many runs at once: no agent outlives its run;
//! - hammering `/metrics` while runs start agents: the counter stays exact.

mod common;
use common::daemon::*;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A workspace policy that makes `frobnicate` a plain read: a run judged by
/// it names `ws.frob` among its reasons.
const FROB_POLICY: &str = "rules:\n - {id: ws.frob, match: {command: frobnicate}, level: READ, score: 0, reason: a harmless tool of this project}\n";
const FROB: &str = "frobnicate --version || true";

fn frob_applied(r: &Run) -> bool {
    r.json["risk"]["reasons"].to_string().contains("ws.frob")
}

fn chown(path: &std::path::Path, spec: &str) {
    let st = Command::new("chown")
        .args(["-R", "-h", spec])
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

fn chmod(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The CLI run with exactly these ids (as an administrator's wrapper
/// would give them) in `dir`.
fn cli_with_ids(d: &Daemon, uid: u32, gid: u32, groups: &[u32], dir: &std::path::Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"));
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        let g: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        c.arg(format!("--groups={}", g.join(",")));
    }
    c.arg("--")
        .arg(bin())
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("DRYRUN_SOCKET", &d.socket)
        .current_dir(dir)
        .stdin(Stdio::null());
    c
}

/// A workspace of the test user's whose policy makes `frobnicate` a read.
fn frob_workspace() -> Ws {
    let ws = user_workspace();
    ws.write(".dryrun/policy.yaml", FROB_POLICY);
    ws.chown_all();
    ws
}

/// The test user submitting `frobnicate` in `ws`, in the background.
fn spawn_frob(d: &Daemon, ws: &Ws) -> std::process::Child {
    d.cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--command", FROB])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// [`cli_with_ids`] submitting `frobnicate`.
fn submit_with_ids(d: &Daemon, uid: u32, gid: u32, groups: &[u32], dir: &std::path::Path) -> Run {
    let out = cli_with_ids(d, uid, gid, groups, dir)
        .args(["execute", "--json", "--command", FROB])
        .output()
        .unwrap();
    run_json(out)
}

/// A workspace of the test user's whose directory an administrator gave
/// with `chown UID DIR` (its group stays 0), with a policy file only
/// root's group may read (`root:root 0640`).
fn admin_chowned_workspace(uid: u32) -> (Ws, std::path::PathBuf) {
    let ws = user_workspace();
    let policy = ws.write(".dryrun/policy.yaml", FROB_POLICY);
    chown(&ws.dir, &format!("{uid}:0"));
    chown(&policy, "0:0");
    chmod(&policy, 0o640);
    (ws, policy)
}

/// A setgid-root requester (effective group 0, not one of its groups) in
/// its own workspace whose group is 0: its credentials and the owner's
/// compare equal only with the owner's real primary group, and the shared
/// agent never reads the root-group policy. Control: once the file is
/// world-readable, the same run is judged by it.
#[test]
fn a_setgid_root_requester_never_lends_group_0_to_the_shared_agent() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let (uid, gid) = test_user();
    let (ws, policy) = admin_chowned_workspace(uid);
    let r = submit_with_ids(&d, uid, 0, &[gid], &ws.dir);
    assert!(
        !frob_applied(&r),
        "a policy only group 0 may read was read for uid {uid}: {r:?}"
    );
    chmod(&policy, 0o644);
    let r = submit_with_ids(&d, uid, 0, &[gid], &ws.dir);
    assert!(
        frob_applied(&r),
        "control: a readable policy must be in force: {r:?}"
    );
}

/// A uid with no account entry (a container's, a dynamic user's) in a
/// directory an administrator gave it with `chown UID DIR` (group 0): the
/// owner's agent must not act with group 0, which that uid never held.
#[test]
fn a_uid_without_an_account_gets_no_group_0_from_its_workspace() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let (_, gid) = test_user();
    let uid = (54321..60000)
        .find(|u| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*u))
                .ok()
                .flatten()
                .is_none()
        })
        .unwrap();
    let (ws, policy) = admin_chowned_workspace(uid);
    // Its own group is the socket's (so that it may connect).
    let r = submit_with_ids(&d, uid, gid, &[], &ws.dir);
    assert!(
        !frob_applied(&r),
        "a policy only group 0 may read was read for uid {uid} (no account): {r:?}"
    );
    chmod(&policy, 0o644);
    let r = submit_with_ids(&d, uid, gid, &[], &ws.dir);
    assert!(
        frob_applied(&r),
        "control: a readable policy must be in force: {r:?}"
    );
    // Its promotions still land, and never with group 0.
    let out = cli_with_ids(&d, uid, gid, &[], &ws.dir)
        .args(["execute", "--json", "--command", "echo hi > made.txt"])
        .args(["--expect-write", "made.txt"])
        .output()
        .unwrap();
    let r = run_json(out);
    assert_eq!(r.decision(), "promote", "{r:?}");
    let out = cli_with_ids(&d, uid, gid, &[], &ws.dir)
        .args(["promote", &run_id(&r)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let made = std::fs::metadata(ws.dir.join("made.txt")).expect("promoted");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(made.uid(), uid);
    assert_ne!(made.gid(), 0, "the promotion wrote with group 0");
}

/// The agent swaps its workspace with a root-owned directory (root's
/// policy, 0600) in a directory it controls, as fast as it can, while it
/// submits: whichever directory the policy read meets, it is never root's
/// read with root's rights, and root's policy never judges the run.
#[test]
fn swapping_the_workspace_for_roots_between_resolve_and_policy_read_fails() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let (uid, gid) = test_user();
    let parent = tempfile::Builder::new()
        .prefix("dryrun-swap-")
        .tempdir_in("/tmp")
        .unwrap();
    let mine = parent.path().join("ws");
    let roots = parent.path().join("other");
    std::fs::create_dir_all(mine.join(".dryrun")).unwrap();
    std::fs::write(mine.join("README.md"), "mine\n").unwrap();
    std::fs::create_dir_all(roots.join(".dryrun")).unwrap();
    let canary = format!("# root-canary-{}\n", random_hex());
    std::fs::write(
        roots.join(".dryrun/policy.yaml"),
        format!("{canary}{FROB_POLICY}"),
    )
    .unwrap();
    chmod(&roots.join(".dryrun/policy.yaml"), 0o600);
    chown(&mine, &format!("{uid}:{gid}"));
    chown(parent.path(), &format!("{uid}:{gid}"));
    chown(&roots, "0:0");
    chmod(parent.path(), 0o755);
    let mut c = as_test_user("bash");
    c.arg("-c")
        .arg(
            "cd \"$1\" && while :; do mv ws t; mv other ws; mv ws other; mv t ws; done 2>/dev/null",
        )
        .arg("swap")
        .arg(parent.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let swapper = Attacker::spawn(c);
    let mut runs: Vec<Run> = Vec::new();
    // Until the swap has landed between a resolve and its policy read at
    // least once (the read finds another directory than the one resolved).
    let raced = |runs: &[Run]| {
        runs.iter()
            .filter(|r| {
                r.json["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("is no longer the directory"))
            })
            .count()
    };
    while runs.len() < 400 && raced(&runs) < 1 {
        let out = d
            .cli_user()
            .current_dir(parent.path())
            .args(["execute", "--json", "--workspace"])
            .arg(&mine)
            .args(["--command", FROB])
            .output()
            .unwrap();
        runs.push(run_json(out));
    }
    swapper.end();
    assert!(
        raced(&runs) >= 1,
        "the swap never landed between a resolve and its policy read in {} runs",
        runs.len()
    );
    for r in &runs {
        assert!(
            !frob_applied(r),
            "root's policy judged the agent's run: {r:?}"
        );
        assert!(
            !format!("{r:?}").contains(canary.trim()),
            "root's file reached the agent: {r:?}"
        );
    }
    let log = d.log_text();
    assert!(!log.contains(canary.trim()), "root's file in the log");
}

/// Signal every workspace agent of the test user's under the daemon's
/// resident as it appears, from a process of that user's (a tight scan of
/// /proc: a shell calling pgrep is too slow to catch an agent that lives a
/// few milliseconds); prints the pids it signalled. With `step_us` above 0
/// the n-th agent is signalled (n mod 16) * `step_us` microseconds after it
/// is seen, so that some are caught after the resolve, in or before the
/// policy read.
fn spawn_signaller(d: &Daemon, sig: &str, step_us: u32) -> Attacker {
    let resident = resident_of(d).expect("the daemon's resident sandbox helper");
    let (uid, _) = test_user();
    let script = format!(
        r#"use Time::HiRes qw(time); $|=1; my %seen; my $n = 0;
while (1) {{ opendir(my $d, "/proc") or next; for my $p (readdir $d) {{
  next unless $p =~ /^\d+$/ && !$seen{{$p}}; my @st = stat("/proc/$p"); next unless @st && $st[4] == {uid};
  open(my $f, "<", "/proc/$p/stat") or next; my $l = <$f>; close $f;
  next unless $l && $l =~ /\)\s+\S+\s+(\d+)/ && $1 == {resident};
  $seen{{$p}} = 1; my $end = time + (($n++ % 16) * {step_us}) / 1e6; while (time < $end) {{}}
  print "$p\n" if kill("{sig}", $p);
}} closedir $d; }}"#
    );
    let mut c = as_test_user("perl");
    c.arg("-e")
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    Attacker::spawn(c)
}

/// A process of the attacker's, in a process group of its own: ended with
/// that whole group (a shell's children too), also when a test fails.
struct Attacker(Option<std::process::Child>);

impl Attacker {
    fn spawn(mut c: Command) -> Attacker {
        use std::os::unix::process::CommandExt;
        c.process_group(0);
        Attacker(Some(c.spawn().unwrap()))
    }

    /// End it; what it printed.
    fn end(mut self) -> String {
        let c = self.0.take().unwrap();
        kill_group(&c);
        let out = c.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn kill_group(c: &std::process::Child) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

impl Drop for Attacker {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            kill_group(&c);
            let _ = c.wait();
        }
    }
}

/// The agent stops its own shared agents (8 runs at once, each stopped a
/// little later than the one before, so that some wait between the resolve
/// and the policy read) while root submits elsewhere: root's run finishes
/// promptly, the agent's runs fail within the agent I/O bound (never hang,
/// never judged without their policy), and the daemon serves on once the
/// stopped agents are gone.
#[test]
fn stopped_shared_agents_neither_hang_the_daemon_nor_hold_up_root() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = frob_workspace();
    let stopper = spawn_signaller(&d, "STOP", 250);
    let t0 = Instant::now();
    let mine: Vec<_> = (0..8).map(|_| spawn_frob(&d, &ws)).collect();
    wait_until("a shared agent stopped", 20, || {
        workspace_agents(&d).iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .is_ok_and(|s| s.contains("State:\tT"))
        })
    });
    let root_ws = Ws::new(Who::Root);
    root_ws.write("README.md", "root\n");
    let t1 = Instant::now();
    let out = d
        .cli_root()
        .current_dir(&root_ws.dir)
        .args(["execute", "--json", "--command", "cat README.md"])
        .output()
        .unwrap();
    let root_run = run_json(out);
    assert_ne!(root_run.json["state"], "failed", "{root_run:?}");
    assert!(
        t1.elapsed() < Duration::from_secs(20),
        "root's run waited {:?} on the agent's stopped agents",
        t1.elapsed()
    );
    let mut failed = Vec::new();
    for m in mine {
        let r = run_json(m.wait_with_output().unwrap());
        if r.json["run_id"].is_null() {
            failed.push(r.json["error"]["message"].to_string());
        } else {
            assert!(
                frob_applied(&r),
                "a run judged without its workspace policy after its agent was stopped: {r:?}"
            );
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(70),
        "the agent's runs hung {:?}",
        t0.elapsed()
    );
    let stopped = stopper.end();
    assert!(
        failed
            .iter()
            .any(|m| m.contains("policy .dryrun/policy.yaml")),
        "no shared agent was stopped between its resolve and the policy read: {failed:#?}"
    );
    for p in stopped
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
    wait_until("the stopped agents gone", 40, || {
        workspace_agents(&d).is_empty()
    });
    let again = submit_user(&d, &ws, FROB, &[]);
    assert!(frob_applied(&again), "the daemon serves on: {again:?}");
}

/// The agent kills every agent of its own as it appears while it submits:
/// each run fails, or was judged with its workspace policy; a run judged
/// without it would be a misread policy (absent instead of unreadable).
#[test]
fn a_killed_shared_agent_never_yields_a_run_judged_without_its_policy() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = frob_workspace();
    let killer = spawn_signaller(&d, "KILL", 250);
    let mut failed = Vec::new();
    for _ in 0..32 {
        let r = submit_user(&d, &ws, FROB, &[]);
        if r.json["run_id"].is_null() {
            failed.push(r.json["error"]["message"].to_string());
            continue;
        }
        assert!(
            frob_applied(&r),
            "a run judged without its workspace policy after its agent was killed: {r:?}"
        );
    }
    let killed = killer.end();
    assert!(
        !killed.trim().is_empty()
            && failed
                .iter()
                .any(|m| m.contains("policy .dryrun/policy.yaml")),
        "no shared agent was killed between its resolve and the policy read: {failed:#?}"
    );
    let r = submit_user(&d, &ws, FROB, &[]);
    assert!(frob_applied(&r), "the daemon serves on: {r:?}");
}

/// Many runs at once, `/metrics` read by the agent in parallel all along:
/// each run costs exactly one agent, none outlives its run, and the
/// counter neither loses nor invents agents (concurrent reads of it must
/// not add the same agents twice).
#[test]
fn concurrent_runs_and_metrics_reads_keep_the_agent_count_exact() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = frob_workspace();
    let before = d.agents_started(Who::User);
    const RUNS: u64 = 12;
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let mut c = as_test_user("bash");
            c.arg("-c")
                .arg(format!(
                    "while :; do curl -s -o /dev/null --unix-socket {} http://dryrun/metrics; done",
                    d.socket.display()
                ))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            Attacker::spawn(c)
        })
        .collect();
    let submitters: Vec<_> = (0..RUNS).map(|_| spawn_frob(&d, &ws)).collect();
    let mut done = 0;
    for s in submitters {
        let r = run_json(s.wait_with_output().unwrap());
        if !r.json["run_id"].is_null() {
            assert!(frob_applied(&r), "{r:?}");
            done += 1;
        }
    }
    for r in readers {
        r.end();
    }
    wait_until("no agent left", 20, || workspace_agents(&d).is_empty());
    let after = d.agents_started(Who::User);
    assert_eq!(done, RUNS, "every run was admitted and judged");
    assert_eq!(after - before, RUNS, "one agent per run, never more");
}
