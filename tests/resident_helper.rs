//! The resident sandbox helper (the daemon's, and the CLI's for an
//! in-process run): rehearsals are forked from it (no exec of the helper per
//! run), a rehearsal goes on when it is gone, and it and every sandbox it
//! forked end with the process that started it. Real daemon, real
//! sandboxes, the process tree read from /proc.

mod common;

use common::daemon::*;
use common::*;
use std::process::Child;

/// A `sleep` run submitted as the user, answered in the background.
fn sleeping_run(d: &Daemon, ws: &Ws, tag: &str, secs: u32) -> Child {
    background_run(d, ws, &format!("sleep {secs}; : {tag}"))
}

/// `command` submitted as the user in `ws`, answered in the background.
fn background_run(d: &Daemon, ws: &Ws, command: &str) -> Child {
    let wd = ws.dir.display().to_string();
    let body = serde_json::json!({ "command": command, "working_dir": wd }).to_string();
    execute_envelope_in_background(&mut d.cli_user(), &body)
}

fn the_resident(d: &Daemon) -> u32 {
    let mut found = Vec::new();
    wait_until("the resident helper to start", 10, || {
        found = children_of(d.pid(), "__sandbox-resident");
        !found.is_empty()
    });
    assert_eq!(found.len(), 1, "one resident helper: {found:?}");
    found[0]
}

#[test]
fn rehearsals_are_forked_from_the_resident_helper_not_executed() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let resident = the_resident(&d);
    let ws = user_workspace();
    let run = sleeping_run(&d, &ws, "resident-fork", 3);
    // The sandboxed command runs; the host side that watches it is a child
    // of the resident helper, and the daemon executed no helper.
    wait_until("the rehearsal to run", 30, || {
        !processes_with("resident-fork").is_empty()
    });
    let hosts = children_of(resident, "");
    assert!(!hosts.is_empty(), "no host side under the resident helper");
    assert!(
        children_of(d.pid(), "__sandbox-helper").is_empty(),
        "the daemon executed a helper: {:?}",
        processes()
            .into_iter()
            .filter(|(_, pp, _)| *pp == d.pid())
            .collect::<Vec<_>>()
    );
    let out = run.wait_with_output().unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["verdict"]["decision"], "promote", "{rec}");
    assert_eq!(rec["rehearsal"]["exit_code"], 0, "{rec}");
}

#[test]
fn rehearsals_go_on_by_exec_when_the_resident_helper_is_killed() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let resident = the_resident(&d);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(resident as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("the resident helper to die", 10, || !alive(resident));
    let ws = user_workspace();
    for i in 0..2 {
        let r = submit_user(
            &d,
            &ws,
            &format!("echo {i} > f{i}"),
            &["--expect-write", "*"],
        );
        assert_eq!(r.decision(), "promote", "{r:?}");
        assert_eq!(r.json["rehearsal"]["exit_code"], 0, "{r:?}");
    }
    assert!(
        d.log_text().contains("resident sandbox helper is gone"),
        "{}",
        d.log_text()
    );
}

#[test]
fn the_resident_helper_and_its_sandboxes_end_with_the_daemon() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let resident = the_resident(&d);
    let ws = user_workspace();
    let mut run = sleeping_run(&d, &ws, "resident-orphan", 300);
    wait_until("the rehearsal to run", 30, || {
        !processes_with("resident-orphan").is_empty()
    });
    let hosts = children_of(resident, "");
    assert!(!hosts.is_empty());
    d.kill9();
    wait_until(
        "the resident helper, its hosts and the command to end",
        15,
        || {
            !alive(resident)
                && hosts.iter().all(|h| !alive(*h))
                && processes_with("resident-orphan").is_empty()
        },
    );
    let _ = run.kill();
    let _ = run.wait();
}

/// The resident helper forks root processes on request: an agent (the test
/// user) must not be able to reach its socket, signal it or read it.
#[test]
fn an_agent_cannot_reach_signal_or_read_the_resident_helper() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let resident = the_resident(&d);
    let out = as_test_user("bash")
        .arg("-c")
        .arg(format!(
            "exec 3<>/proc/{resident}/fd/0 && echo opened-socket; \
             kill -0 {resident} && echo signalled; \
             cat /proc/{resident}/environ && echo read-environ; \
             ls /proc/{resident}/fd && echo listed-fds; true"
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for what in ["opened-socket", "signalled", "read-environ", "listed-fds"] {
        assert!(!text.contains(what), "the agent {what}: {text}");
    }
    assert!(alive(resident), "the resident helper survived");
    // And it still serves the daemon.
    let ws = user_workspace();
    let r = submit_user(&d, &ws, "true", &[]);
    assert_eq!(r.decision(), "promote", "{r:?}");
}

/// A resident helper that stops answering (stopped here; a fork stuck on
/// memory would look the same) must not hold every rehearsal of the
/// daemon: after its answer deadline the engine forgets it and executes
/// the helper, and the run completes.
#[test]
fn a_resident_helper_that_stops_answering_is_forgotten_and_runs_go_on() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let resident = the_resident(&d);
    let pid = nix::unistd::Pid::from_raw(resident as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let ws = user_workspace();
    let first = submit_user(&d, &ws, "echo a > a", &["--expect-write", "*"]);
    let second = submit_user(&d, &ws, "echo b > b", &["--expect-write", "*"]);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    for r in [&first, &second] {
        assert_eq!(r.decision(), "promote", "{r:?}");
        assert_eq!(r.json["rehearsal"]["exit_code"], 0, "{r:?}");
    }
    assert!(
        d.log_text().contains("resident sandbox helper is gone"),
        "{}",
        d.log_text()
    );
}

/// What a process inherits that a sandbox could show: its status flags,
/// signal dispositions, umask, limits, environment, directory and
/// descriptors (pipe numbers elided).
fn inherited_state(pid: u32) -> String {
    let p = format!("/proc/{pid}");
    let status = std::fs::read_to_string(format!("{p}/status")).unwrap();
    let keep = [
        "Umask",
        "SigBlk",
        "SigIgn",
        "SigCgt",
        "THP_enabled",
        "NoNewPrivs",
        "Seccomp",
        "CapInh",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "Uid",
        "Gid",
        "Groups",
    ];
    let mut out: Vec<String> = status
        .lines()
        .filter(|l| keep.iter().any(|k| l.starts_with(&format!("{k}:"))))
        .map(String::from)
        .collect();
    out.push(std::fs::read_to_string(format!("{p}/limits")).unwrap());
    out.push(std::fs::read_to_string(format!("{p}/environ")).unwrap());
    out.push(std::fs::read_to_string(format!("{p}/oom_score_adj")).unwrap());
    out.push(format!(
        "{:?}",
        std::fs::read_link(format!("{p}/cwd")).unwrap()
    ));
    out.push(format!(
        "{:?}",
        std::fs::read_link(format!("{p}/root")).unwrap()
    ));
    let mut fds: Vec<String> = std::fs::read_dir(format!("{p}/fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            let to = std::fs::read_link(e.path()).unwrap_or_default();
            let to = to.to_string_lossy();
            let kind = to.split(':').next().unwrap_or("").to_string();
            format!("{} -> {kind}", e.file_name().to_string_lossy())
        })
        .collect();
    fds.sort();
    out.extend(fds);
    out.join("\n")
}

/// What the command sees of its own process, pipe and mount ids elided.
const PROBE: &str = "grep -E '^(Umask|Seccomp|NoNewPrivs|Cap|THP_enabled|Sig(Blk|Ign|Cgt)|Uid|Gid|Groups|NSpid)' /proc/self/status; \
     ulimit -a; umask; pwd; env | sort; cat /proc/self/oom_score_adj /proc/self/loginuid; echo; \
     ls -l /proc/$$/fd > $TMPDIR/fds; awk 'NR>1 {print $9, $10, $11}' $TMPDIR/fds | sed 's/[0-9][0-9]*]/N]/'; \
     awk '{print $5, $6}' /proc/self/mountinfo; sleep 2; : parity-probe";

/// The probe tagged for one caller: tests of this file run at once, and
/// each must wait for its own probe's command, not another test's.
fn probe_tagged(tag: &str) -> String {
    format!("{PROBE}-{tag}")
}

/// What the host side of a probe rehearsal inherited, what its command
/// saw, and the record's sandbox block.
fn probe_sandbox(d: &Daemon, forked: bool) -> (String, String, String) {
    let ws = user_workspace();
    let wd = ws.dir.display().to_string();
    let tag = if forked {
        "daemon-forked"
    } else {
        "daemon-execd"
    };
    let ch = background_run(d, &ws, &probe_tagged(tag));
    probed(ch, &wd, tag, || {
        if forked {
            children_of(the_resident(d), "")
        } else {
            children_of(d.pid(), "__sandbox-helper")
        }
    })
}

/// The same probe, run in-process by the CLI (as the test user), its host
/// side forked from the CLI's own resident helper or executed.
fn probe_cli_sandbox(forked: bool) -> (String, String, String) {
    let ws = Ws::new(Who::User);
    let wd = ws.dir.display().to_string();
    let mut c = ws.command();
    if !forked {
        c.env("DRYRUN_RESIDENT_HELPER", "0");
    }
    let tag = if forked { "cli-forked" } else { "cli-execd" };
    let body = serde_json::json!({ "command": probe_tagged(tag) }).to_string();
    let ch = execute_envelope_in_background(&mut c, &body);
    let cli = ch.id();
    probed(ch, &wd, tag, || {
        if forked {
            children_of(cli, "__sandbox-resident")
                .into_iter()
                .flat_map(|r| children_of(r, ""))
                .collect()
        } else {
            children_of(cli, "__sandbox-helper")
        }
    })
}

/// Read the probe's host side (found by `hosts`) while it runs, then its
/// record: (host side, what the command saw, the sandbox block).
fn probed(
    ch: Child,
    wd: &str,
    tag: &str,
    hosts: impl Fn() -> Vec<u32>,
) -> (String, String, String) {
    let mut found = Vec::new();
    wait_until("the probe to run", 30, || {
        found = hosts();
        !found.is_empty() && !processes_with(&format!("parity-probe-{tag}")).is_empty()
    });
    assert_eq!(found.len(), 1, "{found:?}");
    let host = inherited_state(found[0]);
    let out = ch.wait_with_output().unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["rehearsal"]["exit_code"], 0, "{rec}");
    // The workspaces differ by name only. The command's environment is its
    // caller's (each probe's client names its own socket, state directory,
    // home and helper setting): those lines are the callers', not the
    // sandbox's.
    let seen = rec["rehearsal"]["stdout"]
        .as_str()
        .unwrap()
        .replace(wd, "WS")
        .lines()
        .filter(|l| !l.starts_with("DRYRUN_") && !l.starts_with("HOME="))
        .collect::<Vec<_>>()
        .join("\n");
    // The environment line counts the caller's variables (see above).
    let mut sandbox = rec["rehearsal"]["sandbox"].clone();
    if let Some(e) = sandbox["enforcement"].as_array_mut() {
        e.retain(|l| !l.as_str().is_some_and(|l| l.starts_with("environment: ")));
    }
    let sandbox = sandbox.to_string().replace(wd, "WS");
    (host, seen, sandbox)
}

/// A rehearsal forked from the resident helper must run in exactly the
/// sandbox an executed helper builds: the same host-side inheritance
/// (signals, umask, limits, THP flag, environment, directory) and the same
/// view from inside (seccomp, no-new-privs, capabilities, limits, umask,
/// descriptors, mounts).
#[test]
fn a_forked_rehearsal_has_exactly_the_sandbox_of_an_executed_one() {
    if !require_root() {
        return;
    }
    let forked = Daemon::start(&[]);
    let execd = Daemon::start_env(&[], &[("DRYRUN_RESIDENT_HELPER", "0")]);
    let (fh, fs, fsb) = probe_sandbox(&forked, true);
    let (eh, es, esb) = probe_sandbox(&execd, false);
    assert_eq!(fh, eh, "the host side inherits differently");
    assert_eq!(fs, es, "the command sees a different sandbox");
    assert_eq!(fsb, esb, "the records' sandbox blocks differ");
    // Whatever the daemon's starter ignored (a background job ignores
    // SIGINT and SIGQUIT, `nohup` SIGHUP), nothing is ignored or blocked
    // on the host side or for the command.
    // (Signals 32 and 33 are the C library's own, out of its reach: not
    // checked.)
    for (what, text) in [("host side", &fh), ("command", &fs)] {
        for field in ["SigIgn", "SigBlk"] {
            let mask = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{field}:\t")))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or_else(|| panic!("{what}: no {field} in {text}"));
            assert_eq!(mask & 0x7fff_ffff, 0, "{what}: {field} {mask:#x}");
        }
    }
}

/// The CLI's in-process runs have the same resident helper: started (an
/// exec, as the user who runs the CLI) when the command starts, the
/// rehearsal's host side forked from it, and its sandbox exactly the one an
/// executed helper builds.
#[test]
fn a_cli_run_forks_its_rehearsal_from_a_resident_helper_of_its_own() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    let body = serde_json::json!({ "command": "sleep 3; : cli-resident" }).to_string();
    let ch = execute_envelope_in_background(&mut ws.command(), &body);
    let cli = ch.id();
    wait_until("the rehearsal to run", 30, || {
        !processes_with("cli-resident").is_empty()
    });
    let residents = children_of(cli, "__sandbox-resident");
    assert_eq!(residents.len(), 1, "{:?}", processes());
    let (uid, _) = test_user();
    let status = std::fs::read_to_string(format!("/proc/{}/status", residents[0])).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:")
                && l.split_whitespace().skip(1).all(|u| u == uid.to_string())),
        "the resident runs as the CLI's user: {status}"
    );
    assert_eq!(children_of(residents[0], "").len(), 1, "one host side");
    assert!(children_of(cli, "__sandbox-helper").is_empty());
    let out = ch.wait_with_output().unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["verdict"]["decision"], "promote", "{rec}");
    assert_eq!(rec["rehearsal"]["exit_code"], 0, "{rec}");
    wait_until("the CLI's resident helper to end with it", 10, || {
        !alive(residents[0])
    });
    let (fh, fs, fsb) = probe_cli_sandbox(true);
    let (eh, es, esb) = probe_cli_sandbox(false);
    assert_eq!(fh, eh, "the host side inherits differently");
    assert_eq!(fs, es, "the command sees a different sandbox");
    assert_eq!(fsb, esb, "the records' sandbox blocks differ");
}

/// A pids cgroup (v1) holding one process, removed on drop.
struct PidsJail(std::path::PathBuf);

impl PidsJail {
    fn hold(pid: u32, max: &str) -> PidsJail {
        let dir = std::path::PathBuf::from(format!(
            "/sys/fs/cgroup/pids/dryrun-test-resident-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pids.max"), max).unwrap();
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        PidsJail(dir)
    }
    fn set_max(&self, max: &str) {
        std::fs::write(self.0.join("pids.max"), max).unwrap();
    }
}

impl Drop for PidsJail {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
        for p in procs.lines() {
            let _ = std::fs::write("/sys/fs/cgroup/pids/cgroup.procs", p);
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// An agent that exhausts the processes the resident helper may fork (a
/// fork bomb up to the pid limit; here a pids cgroup of one) must neither
/// fail the rehearsal nor cost the daemon its resident helper for good:
/// the run goes on by exec, and once forks succeed again rehearsals are
/// forked from the same resident helper.
#[test]
fn a_resident_helper_that_cannot_fork_is_kept_and_the_run_goes_on_by_exec() {
    // The pids jail is a cgroup v1 pids group.
    if !require_root() || !require_cgroup_v1("pids") {
        return;
    }
    let d = Daemon::start(&[]);
    let resident = the_resident(&d);
    let ws = user_workspace();
    let jail = PidsJail::hold(resident, "1");
    let r = submit_user(&d, &ws, "echo x > f", &["--expect-write", "*"]);
    assert_eq!(r.decision(), "promote", "{r:?}");
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert!(alive(resident));
    jail.set_max("max");
    let run = sleeping_run(&d, &ws, "resident-after-eagain", 2);
    wait_until("the rehearsal to run", 30, || {
        !processes_with("resident-after-eagain").is_empty()
    });
    assert!(
        !children_of(resident, "").is_empty(),
        "the rehearsal after a failed fork was not forked from the resident helper; log: {}",
        d.log_text()
    );
    let out = run.wait_with_output().unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["rehearsal"]["exit_code"], 0, "{rec}");
    drop(jail);
}

/// The resident helper is this unprivileged binary: a user who starts it by
/// hand gets a process of their own that refuses a parent other than the
/// one named and a stdin that is not a socket (exit 125), and no privilege.
#[test]
fn a_user_starting_the_resident_helper_by_hand_gets_nothing() {
    if !require_root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(bin()).unwrap().permissions().mode();
    assert_eq!(mode & 0o6000, 0, "the binary is set-id: {mode:o}");
    let b = bin().display().to_string();
    let out = as_test_user("bash")
        .arg("-c")
        .arg(format!(
            "{b} __sandbox-resident 1 </dev/null; echo wrong-parent=$?; \
             {b} __sandbox-resident $$ </dev/null; echo not-a-socket=$?; \
             {b} __sandbox-resident $$ </dev/null & wait $!; echo bg=$?"
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["wrong-parent=125", "not-a-socket=125", "bg=125"] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// Many rehearsals at once through the one resident helper: each is forked
/// (none by exec), every one completes, and the resident reaps them all.
#[test]
fn concurrent_rehearsals_all_fork_from_the_resident_and_are_reaped() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--max-running", "8", "--max-queued", "8"]);
    let resident = the_resident(&d);
    let wss: Vec<Ws> = (0..6).map(|_| user_workspace()).collect();
    let runs: Vec<Child> = wss
        .iter()
        .enumerate()
        .map(|(i, ws)| sleeping_run(&d, ws, &format!("resident-many-{i}"), 1))
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(rec["rehearsal"]["exit_code"], 0, "{rec}");
    }
    assert!(!d.log_text().contains("resident sandbox helper is gone"));
    wait_until("the resident to reap its hosts", 10, || {
        children_of(resident, "").is_empty()
    });
    assert!(alive(resident));
}

/// Cancelling a forked rehearsal kills that sandbox through its pidfd and
/// nothing else: another run forked from the same resident goes on, and a
/// second cancel after the host was reaped (its pid free for reuse) kills
/// no process.
#[test]
fn cancelling_a_forked_rehearsal_kills_only_that_sandbox() {
    if !require_root() {
        return;
    }
    // Two slots per uid.
    let d = Daemon::start(&["--max-running", "4"]);
    let resident = the_resident(&d);
    let ws = user_workspace();
    let victim = sleeping_run(&d, &ws, "resident-cancel-me", 300);
    wait_until("the first rehearsal to run", 30, || {
        !processes_with("resident-cancel-me").is_empty()
    });
    let (st, runs) = d.curl(Who::Root, "GET", "/v1/runs", None);
    assert_eq!(st, 200, "{runs}");
    let id = runs["runs"][0]["run_id"].as_str().unwrap().to_string();
    let other = user_workspace();
    let keeper = sleeping_run(&d, &other, "resident-keep-me", 3);
    wait_until("the second rehearsal to run", 30, || {
        !processes_with("resident-keep-me").is_empty()
    });
    let cancel = || {
        d.cli_root()
            .args(["cancel", &id, "--json"])
            .output()
            .unwrap()
    };
    assert_eq!(cancel().status.code(), Some(0));
    wait_until("the cancelled sandbox to be gone", 10, || {
        processes_with("resident-cancel-me").is_empty()
    });
    let _ = cancel();
    let out = keeper.wait_with_output().unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["rehearsal"]["exit_code"], 0, "{rec}");
    let _ = victim.wait_with_output();
    assert!(alive(resident));
    let r = submit_user(&d, &ws, "true", &[]);
    assert_eq!(r.decision(), "promote", "{r:?}");
}

/// The host side answers once the sandbox's init says its report is out.
/// A command that writes that word on every descriptor it can name, and
/// into the init's descriptors through /proc, must not make the answer go
/// out before the evidence: its file changes and its output are all in the
/// record, as root and as the user.
#[test]
fn a_command_cannot_make_the_host_side_answer_before_the_evidence() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(
            "for fd in $(seq 3 255); do (printf d >&$fd) 2>/dev/null; done; \
             for f in /proc/1/fd/* /proc/[0-9]*/fd/*; do (printf d > \"$f\") 2>/dev/null; done; \
             sleep 0.5; echo written > after.txt; echo all-done",
            &[],
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {}", r.json);
        assert!(r.out().contains("all-done"), "{who:?}: {:?}", r.out());
        assert!(
            r.change("after.txt").is_some(),
            "{who:?}: the change made after the attempts is missing: {:?}",
            r.changes()
        );
        let phases: Vec<String> = r.json["rehearsal"]["timings_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_str().unwrap_or("").to_string())
            .collect();
        assert!(
            phases.iter().any(|p| p == "P9 evidence done"),
            "{who:?}: {phases:?}"
        );
    }
}
