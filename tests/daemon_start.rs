//! The daemon's first start tells the truth about who can reach it and who
//! can approve, and a clean stop leaves nothing behind (no socket, no lock
//! file), for real: a `dryrun daemon` process on a real socket.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::*;
use common::*;

/// Start a daemon with `args`, wait for its socket, stop it with SIGTERM and
/// return its stderr and exit status.
fn start_and_stop(dir: &std::path::Path, args: &[&str]) -> (String, std::process::ExitStatus) {
    let socket = dir.join("run").join("dryrun.sock");
    let log = dir.join("daemon.log");
    let mut child = Command::new(bin())
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .arg("daemon")
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !health_ok(&socket) {
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "daemon exited early ({st}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "daemon did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = child.wait().unwrap();
    (std::fs::read_to_string(&log).unwrap(), st)
}

/// The daemon's start line in its log.
fn start_line(log: &str) -> &str {
    log.lines()
        .find(|l| l.starts_with("dryrun daemon: serving"))
        .unwrap_or_else(|| panic!("no start line: {log}"))
}

fn leftovers(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir.join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_missing_approver_group_and_an_unreachable_socket_are_said_and_a_clean_stop_leaves_nothing() {
    if !require_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("dryrun-start-")
        .tempdir_in("/tmp")
        .unwrap();
    let missing = "dryrun-no-such-approvers";
    assert!(
        nix::unistd::Group::from_name(missing).unwrap().is_none(),
        "the test needs a group that does not exist"
    );
    let (log, st) = start_and_stop(dir.path(), &["--approver-group", missing]);
    assert!(st.success(), "{st}: {log}");
    let line = start_line(&log);
    assert!(
        line.contains(&format!("root only: group {missing} does not exist")),
        "the start line names the missing approver group: {line}"
    );
    assert!(
        !line.contains(&format!("root and group {missing}")),
        "{line}"
    );
    assert!(
        line.contains("only root and group root may connect") && line.contains("no --socket-group"),
        "the start line says agents cannot reach a socket without a group: {line}"
    );
    assert_eq!(
        leftovers(dir.path()),
        Vec::<String>::new(),
        "a clean stop removes the socket and its lock"
    );

    // With a socket group and an approver group that exist, it names them;
    // a second start after the clean stop works (the lock is made again).
    let group = test_group();
    let (log, st) = start_and_stop(
        dir.path(),
        &["--socket-group", &group, "--approver-group", &group],
    );
    assert!(st.success(), "{st}: {log}");
    let line = start_line(&log);
    assert!(
        line.contains(&format!("its owner and group {group} may connect"))
            && line.contains(&format!("approvers: root and group {group}")),
        "{line}"
    );
    assert_eq!(leftovers(dir.path()), Vec::<String>::new());
}

#[test]
fn a_killed_daemons_lock_file_does_not_stop_the_next_start() {
    if !require_root() {
        return;
    }
    let mut a = Daemon::start(&[]);
    let lock = {
        let mut p = a.socket.clone().into_os_string();
        p.push(".lock");
        std::path::PathBuf::from(p)
    };
    assert!(lock.exists(), "a running daemon holds its lock file");
    a.kill9();
    assert!(lock.exists(), "kill -9 leaves the lock file");
    a.restart(&[]);
    assert!(health_ok(&a.socket));
    assert!(a.terminate().success());
    assert!(!lock.exists(), "a clean stop removes it");
    assert!(!a.socket.exists());
}
