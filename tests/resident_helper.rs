//! The daemon's resident sandbox helper: rehearsals are forked from it (no
//! exec of the helper per run), a rehearsal goes on when it is gone, and it
//! and every sandbox it forked end with the daemon. Real daemon, real
//! sandboxes, the process tree read from /proc.

mod common;

use common::daemon::*;
use common::*;
use std::io::Write;
use std::process::{Child, Stdio};

/// `(pid, ppid, cmdline)` of every process.
fn processes() -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let (Ok(stat), Ok(cmd)) = (
            std::fs::read_to_string(e.path().join("stat")),
            std::fs::read(e.path().join("cmdline")),
        ) else {
            continue;
        };
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        else {
            continue;
        };
        out.push((pid, ppid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
    }
    out
}

fn children_of(pid: u32, needle: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, pp, cmd)| *pp == pid && cmd.contains(needle))
        .map(|(p, _, _)| p)
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

/// A `sleep` run submitted as the user, answered in the background.
fn sleeping_run(d: &Daemon, ws: &Ws, tag: &str, secs: u32) -> Child {
    let wd = ws.dir.display().to_string();
    let body = format!(r#"{{"command":"sleep {secs}; : {tag}","working_dir":"{wd}"}}"#);
    let mut ch = d
        .cli_user()
        .args(["execute", "--json", "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ch.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    ch
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
