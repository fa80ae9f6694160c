//! Hostile agent against the workspace agents a root daemon forks from its
//! resident sandbox helper (instead of executing the binary): the agent is
//! the unprivileged uid `dryrun-test`, owns its workspace, and catches the
//! forked agent serving its own promotion (it runs as the agent's uid after
//! the drop, so the agent may find it with `pgrep -P RESIDENT -u UID` and
//! stop it with `kill -STOP`).
//!
//! Attacks, each asserted to fail on the host side:
//! - reading the forked agent's memory, environment or descriptors through
//!   /proc, or attaching to it with ptrace (it holds a copy of the root
//!   resident's memory);
//! - finding a descriptor of the resident, of the daemon or of another
//!   run leaked into it (checked by root through /proc);
//! - killing it in the middle of a promotion: the promotion fails with a
//!   message and the daemon keeps serving;
//! - keeping it alive past the daemon (stopped when the daemon dies);
//! - a workspace directory whose group is root's (`chown UID DIR` by an
//!   administrator leaves group 0): the agent acting for its owner must not
//!   hold group 0, which the owner does not.

mod common;
use common::daemon::*;
use common::*;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};

/// The daemon's resident sandbox helper (it has one).
fn daemon_resident(d: &Daemon) -> u32 {
    resident_of(d).expect("the daemon's resident sandbox helper")
}

/// As the agent: stop the forked workspace agent serving its own
/// promotion (see [`stop_own_workspace_agent`]).
fn stop_own_agent(d: &Daemon, ws: &Ws) -> (i32, Child) {
    stop_own_workspace_agent(d, ws, 4).expect("the agent never caught its workspace agent")
}

fn kill(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// `Name:\tv1\tv2...` of `/proc/PID/status`.
fn status_field(pid: i32, name: &str) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// The agent tries to read its forked workspace agent (a copy of root's
/// resident helper) through /proc and ptrace; root checks what it holds;
/// then the agent kills it in the middle of the promotion.
#[test]
fn a_forked_workspace_agent_is_opaque_holds_nothing_and_fails_closed() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let (uid, gid) = test_user();
    let resident = daemon_resident(&d);
    let (pid, promote) = stop_own_agent(&d, &ws);

    // The agent's own process, yet not dumpable: its /proc files are
    // root's, and ptrace is refused.
    for what in [
        "environ",
        "mem",
        "maps",
        "auxv",
        "fd/0",
        "cwd/",
        "root/etc/hostname",
    ] {
        let out = as_test_user("head")
            .args(["-c", "64"])
            .arg(format!("/proc/{pid}/{what}"))
            .output()
            .unwrap();
        assert!(
            !out.status.success() && out.stdout.is_empty(),
            "the agent read /proc/{pid}/{what} of its workspace agent: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let ls = as_test_user("ls")
        .arg(format!("/proc/{pid}/fd"))
        .output()
        .unwrap();
    assert!(!ls.status.success(), "listed the agent's descriptors");
    let st = as_test_user("timeout")
        .args(["10", tool("strace", "strace"), "-p", &pid.to_string()])
        .args(["-e", "trace=none"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr).into_owned();
    assert!(
        !st.status.success() && err.contains("Operation not permitted"),
        "the agent attached to its workspace agent: {err}"
    );
    // Nor the resident (root's).
    let r = as_test_user("head")
        .args(["-c", "64"])
        .arg(format!("/proc/{resident}/environ"))
        .output()
        .unwrap();
    assert!(!r.status.success() && r.stdout.is_empty());

    // Root's view: a child of the resident, the owner's ids and groups
    // only, no capability, no_new_privs, and only its own two pipes and
    // /dev/null (nothing of the resident, the daemon or another run).
    assert_eq!(parent_of(pid as u32), Some(resident));
    assert_eq!(status_field(pid, "Uid"), vec![uid; 4]);
    assert_eq!(status_field(pid, "Gid"), vec![gid; 4]);
    let groups = status_field(pid, "Groups");
    // The owner's groups as the group database lists them (the fidelity
    // tests make the test user a member of team groups).
    let listed = Command::new("id").args(["-G", TEST_USER]).output().unwrap();
    let listed: Vec<u32> = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .collect();
    assert!(
        groups.iter().all(|g| *g == gid || listed.contains(g)) && !groups.contains(&0),
        "groups {groups:?} (the owner's: {listed:?})"
    );
    for cap in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(
            status.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {status}"
        );
    }
    assert_eq!(status_field(pid, "NoNewPrivs"), vec![1]);
    let mut fds: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path()).unwrap_or_default();
            (
                e.file_name().to_string_lossy().into_owned(),
                target.display().to_string(),
            )
        })
        .collect();
    fds.sort();
    // Past those, only what it opened itself after the drop: the
    // workspace (its root, a file it writes).
    assert!(fds.len() >= 3, "{fds:?}");
    assert!(fds[0].0 == "0" && fds[0].1.starts_with("pipe:"), "{fds:?}");
    assert!(fds[1].0 == "1" && fds[1].1.starts_with("pipe:"), "{fds:?}");
    assert!(fds[2].0 == "2" && fds[2].1 == "/dev/null", "{fds:?}");
    let ws_dir = ws.dir.display().to_string();
    assert!(
        fds[3..].iter().all(|(_, t)| t.starts_with(&ws_dir)),
        "a descriptor the workspace agent did not open itself: {fds:?}"
    );

    // While the agent holds it stopped, the resident serves others: root's
    // run in root's workspace is rehearsed (a host side the resident forks).
    let root_ws = Ws::new(Who::Root);
    let out = d
        .cli_root()
        .current_dir(&root_ws.dir)
        .args(["execute", "--json", "--command", "echo r > r.txt"])
        .args(["--expect-write", "r.txt"])
        .output()
        .unwrap();
    let rr = run_json(out);
    assert_eq!(rr.decision(), "promote", "{rr:?}");
    assert!(alive(resident));

    // The agent kills it mid-promotion: the promotion fails with a message
    // (never reported promoted) and the daemon serves on.
    kill(pid, nix::sys::signal::Signal::SIGKILL);
    let out = promote.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "promoted after its agent was killed: {err}"
    );
    assert!(!err.trim().is_empty(), "no message");
    wait_until("the killed agent is reaped", 10, || !alive(pid as u32));
    assert!(health_ok(&d.socket));
    let again = submit_user(
        &d,
        &ws,
        "echo x > again.txt",
        &["--expect-write", "again.txt"],
    );
    assert_eq!(again.decision(), "promote", "{again:?}");
    let p = d
        .cli_user()
        .args(["promote", &run_id(&again)])
        .output()
        .unwrap();
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("again.txt")).unwrap(),
        "x\n"
    );
    // No workspace agent of the agent's uid is left under the resident.
    let left: Vec<u32> = processes()
        .into_iter()
        .filter(|(p, pp, _)| *pp == resident && owner_uid(*p) == Some(uid))
        .map(|(p, _, _)| p)
        .collect();
    assert!(left.iter().all(|p| !alive(*p)), "left {left:?}");
}

fn owner_uid(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// The agent keeps its workspace agent stopped and waits for the daemon to
/// die: the agent dies with it (the resident's parent-death signal, then
/// the agent's), nothing of the agent's uid outlives the daemon as a child
/// of root's helper.
#[test]
fn a_stopped_workspace_agent_dies_with_the_daemon() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = user_workspace();
    let resident = daemon_resident(&d);
    let (pid, promote) = stop_own_agent(&d, &ws);
    d.kill9();
    wait_until("the resident dies with the daemon", 20, || !alive(resident));
    wait_until("the workspace agent dies with the resident", 20, || {
        !alive(pid as u32)
    });
    let out = promote.wait_with_output().unwrap();
    assert!(!out.status.success());
}

/// A daemon and the agent's workspace as an administrator gives it with
/// `chown UID DIR`: the agent's, in group 0 (root's), which the agent is
/// not in.
fn root_group_workspace() -> (Daemon, Ws) {
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let (uid, gid) = test_user();
    assert_ne!(gid, 0);
    std::os::unix::fs::chown(&ws.dir, Some(uid), Some(0)).unwrap();
    (d, ws)
}

/// An administrator gave a directory to the agent with `chown UID DIR`,
/// which leaves its group root's. The workspace agent acting for its owner
/// must hold the owner's groups, never group 0 the owner lacks (a process
/// with group 0 reads every `root:root 0640` file, and chowns what it
/// writes to group 0).
#[test]
fn a_root_group_workspace_gives_the_agent_no_root_group() {
    if !require_root() {
        return;
    }
    let (d, ws) = root_group_workspace();
    let (uid, gid) = test_user();
    let (pid, promote) = stop_own_agent(&d, &ws);
    let groups = status_field(pid, "Groups");
    let gids = status_field(pid, "Gid");
    kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = promote.wait_with_output();
    assert!(
        !groups.contains(&0) && !gids.contains(&0),
        "the workspace agent of uid {uid} holds group 0: Gid {gids:?} Groups {groups:?}"
    );
    // Nothing the promotions wrote belongs to group 0.
    let out = Command::new("find")
        .arg(&ws.dir)
        .args(["-mindepth", "1", "-group", "0"])
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(found.trim().is_empty(), "group 0 files: {found}");
    // The workspace still promotes, with the owner's own group.
    let r = submit_user(&d, &ws, "echo g > g.txt", &["--expect-write", "g.txt"]);
    assert_eq!(r.decision(), "promote", "{r:?}");
    let p = d
        .cli_user()
        .args(["promote", &run_id(&r)])
        .output()
        .unwrap();
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let m = std::fs::metadata(ws.dir.join("g.txt")).unwrap();
    assert_eq!((m.uid(), m.gid()), (uid, gid));
}

/// The same directory (group 0, given with `chown UID DIR`) holding a
/// `root:root 0640` file: the command in the sandbox runs with its owner's
/// own group, not the directory's, so it cannot read the file through the
/// group bits (the idmapped lower shows it with the sandbox's group 0), and
/// the evidence walk's reader, with the same ids, keeps no hash or content
/// of it when the command renames it away.
#[test]
fn a_root_group_workspace_gives_the_command_and_the_reader_no_root_group() {
    if !require_root() {
        return;
    }
    let (d, ws) = root_group_workspace();
    let (_, gid) = test_user();
    let canary = format!("rootgroup{}", random_hex());
    let secret = ws.dir.join("rootgroup.txt");
    std::fs::write(&secret, &canary).unwrap();
    std::os::unix::fs::chown(&secret, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let r = submit_user(
        &d,
        &ws,
        "id -g; cat rootgroup.txt; mv rootgroup.txt moved.txt",
        &["--expect-write", "*"],
    );
    let out = r.out().to_string();
    assert_eq!(
        out.lines().next(),
        Some(gid.to_string().as_str()),
        "{}",
        r.json
    );
    let record = r.json.to_string();
    assert!(
        !record.contains(&canary),
        "the root-group file was read: {record}"
    );
    for c in r.changes() {
        if c["path"] == "rootgroup.txt" || c["path"] == "moved.txt" {
            assert!(c["before"].is_null() && c["after"].is_null(), "{c}");
        }
    }
    let state = Command::new("grep")
        .args(["-rl", &canary])
        .arg(&d.state)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&state.stdout).trim().is_empty(),
        "the root-group file's content is in the state directory"
    );
}

/// A world-writable directory of root's, which the agent may write in: a
/// run for it would make the resident fork an agent for uid 0 (refused by
/// the drop) or act as root. The daemon refuses the run itself; nothing
/// lands there and no agent of uid 0 is asked for.
#[test]
fn a_root_owned_workspace_gets_no_agent() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let dir = tempfile::Builder::new()
        .prefix("dryrun-rootws-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let out = d
        .cli_user()
        .current_dir(dir.path())
        .args(["execute", "--json", "--command", "echo r > r.txt"])
        .args(["--expect-write", "r.txt"])
        .output()
        .unwrap();
    let r = run_json(out);
    assert!(
        r.json["run_id"].as_str().is_none(),
        "a run was accepted for root's directory: {r:?}"
    );
    assert!(r.stderr.contains("belongs to uid 0"), "{r:?}");
    assert!(!dir.path().join("r.txt").exists());
    assert!(health_ok(&d.socket));
}

/// The agent races its workspace agents' start: through whole promotions
/// (one fork each, several agents a run), a loop of its own uid tries every
/// process of that uid under the resident, reading its descriptors and
/// environment the moment it appears. The fork is root's until the drop,
/// and after it the process is not dumpable: nothing is ever read.
#[test]
fn racing_an_agents_start_reads_nothing() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let (uid, _) = test_user();
    let resident = daemon_resident(&d);
    let racer = as_test_user("bash")
        .arg("-c")
        .arg(format!(
            "seen=0; for i in $(seq 1 20000); do for q in $(pgrep -P {resident} -u {uid}); do seen=1; \
             ls -l /proc/$q/fd/ 2>/dev/null | grep -q -- '->' && echo FD $q; \
             head -c 64 /proc/$q/environ 2>/dev/null | grep -qa . && echo ENV $q; done; \
             [ -e /tmp/stop-racer-{resident} ] && break; done; echo seen=$seen"
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for n in 0..3 {
        let r = submit_user(
            &d,
            &ws,
            &format!("mkdir r{n} && for i in $(seq 1 800); do echo $i > r{n}/f$i; done"),
            &["--expect-write", &format!("r{n}/**")],
        );
        assert_eq!(r.decision(), "promote", "{r:?}");
        let p = d
            .cli_user()
            .args(["promote", &run_id(&r)])
            .output()
            .unwrap();
        assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    }
    let stop = format!("/tmp/stop-racer-{resident}");
    std::fs::write(&stop, "").unwrap();
    let out = racer.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&stop);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !text.contains("FD ") && !text.contains("ENV "),
        "the agent read a workspace agent's descriptors or environment: {text}"
    );
    // The race was real: the loop saw the agents.
    assert!(text.contains("seen=1"), "{text}");
}
