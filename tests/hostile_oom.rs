//! Hostile agent against this round's memory change: the run's memory
//! cgroup's ceiling of memory_mb + disk_mb + /tmp, and the command's OOM
//! score raised to 1000 so a full cgroup ends the command, not the
//! sandbox's init. The unprivileged agent uid `dryrun-test` submits to a
//! root daemon, runs root's in-process CLI over its workspace, and its own
//! CLI; every attack is attempted for real and checked on the host side.
//!
//! Found by this pass (tests `leftover_*`): memory the command leaves
//! charged to the cgroup after its processes die (System V shared memory
//! and message queues, which outlive their makers until the IPC namespace
//! ends; tmpfs attributes, which `disk_mb` does not bound) filled the
//! cgroup, and the walk of the evidence, its only allocator then, got the
//! init OOM-killed: the run failed. Fixed: once the command is gone the
//! init raises the cgroup's ceiling by 32 MiB (through the limit files the
//! host side opened) and removes the IPC objects before it walks.

mod common;
use common::daemon::*;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A System V segment of `argv[1]` MiB (size plus `argv[2]` bytes, a
/// marker), attached, every page written, left behind on exit.
const SHM_PY: &str = r#"import ctypes, sys
l = ctypes.CDLL(None)
l.shmget.restype = ctypes.c_int
l.shmat.restype = ctypes.c_void_p
size = (int(sys.argv[1]) << 20) + int(sys.argv[2])
i = l.shmget(0, size, 0o1600)
a = l.shmat(i, None, 0)
ctypes.memset(a, 1, size)
print("shm", sys.argv[1], flush=True)
"#;

/// Message queues filled (4 messages of 4000 bytes each) until the
/// namespace's limits or the cgroup stop it.
const MSG_PY: &str = r#"import ctypes
l = ctypes.CDLL(None)
buf = ctypes.create_string_buffer(8 + 4000)
ctypes.memset(ctypes.addressof(buf), 1, 8)
n = 0
while True:
    q = l.msgget(0, 0o1600)
    if q < 0: break
    for _ in range(4):
        if l.msgsnd(q, buf, 4000, 0o4000) != 0: break
        n += 1
print("msgs", n, flush=True)
"#;

/// Files in the upper layer carrying 60 KB user.* attributes until the
/// tmpfs refuses (kernel memory `disk_mb` does not bound).
const XATTR_PY: &str = r#"import os
os.makedirs("xa", exist_ok=True)
v = b"v" * 60000
n = 0
try:
    for i in range(100000):
        p = "xa/f%d" % i
        open(p, "w").close()
        for k in range(8):
            os.setxattr(p, "user.k%d" % k, v)
            n += 1
except OSError as e:
    print("stopped", e, flush=True)
print("xattrs", n, flush=True)
"#;

/// `argv[1]` empty files with 200-character names.
const MANY_PY: &str = r#"import os, sys
os.makedirs("many", exist_ok=True)
for i in range(int(sys.argv[1])):
    open("many/%s%06d" % ("n" * 200, i), "w").close()
print("files", sys.argv[1], flush=True)
"#;

/// Every route to a lower score (or a higher one for the init), each
/// attempt's outcome printed; then the score the command ends with.
const SCORE_PY: &str = r#"import os, threading
def attempt(path, value):
    try:
        with open(path, "w") as f:
            f.write(value)
        print("WROTE", path, value)
    except OSError as e:
        print("refused", path, e.errno)
tid = threading.get_native_id()
for p, v in [
    ("/proc/self/oom_score_adj", "0"), ("/proc/self/oom_score_adj", "999"),
    ("/proc/thread-self/oom_score_adj", "0"),
    ("/proc/self/task/%d/oom_score_adj" % tid, "0"),
    ("/proc/self/oom_adj", "0"), ("/proc/self/oom_adj", "-17"),
    ("/proc/%d/oom_score_adj" % os.getppid(), "0"),
    ("/proc/1/oom_score_adj", "1000"), ("/proc/1/oom_adj", "15"),
]:
    attempt(p, v)
print("score", open("/proc/self/oom_score_adj").read().strip())
"#;

/// The agent's workspace with the attack scripts in it.
fn armed_workspace() -> Ws {
    let ws = user_workspace();
    for (name, text) in [
        ("shm.py", SHM_PY),
        ("msg.py", MSG_PY),
        ("xa.py", XATTR_PY),
        ("many.py", MANY_PY),
        ("score.py", SCORE_PY),
    ] {
        ws.write(name, text);
    }
    ws
}

fn body(ws: &Ws, cmd: &str, memory_mb: u64, disk_mb: u64) -> String {
    serde_json::json!({
        "command": cmd,
        "working_dir": ws.dir.display().to_string(),
        "limits": {"memory_mb": memory_mb, "disk_mb": disk_mb, "timeout_s": 60},
        "intent": {"expected_writes": ["*"]},
    })
    .to_string()
}

/// Through the daemon (as the agent) and through root's in-process CLI
/// over the agent's workspace, on the daemon's state directory. Each with
/// the IPC namespaces the host saw the run's processes carrying `marker`
/// in (none looked for when it is 0).
fn both_ways(
    d: &Daemon,
    ws: &Ws,
    body: &str,
    marker: u64,
) -> Vec<(&'static str, Run, Vec<String>)> {
    let (_dir, p) = agent_envelope_file(body);
    let mut daemon = d.cli_user();
    daemon.arg("execute");
    let mut cli = Command::new(bin());
    cli.env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("DRYRUN_STATE_DIR", &d.state)
        .args(["execute", "--local"]);
    let mut out = Vec::new();
    for (via, mut c) in [("daemon", daemon), ("root cli", cli)] {
        c.current_dir(&ws.dir)
            .args(["--json", "--file"])
            .arg(&p)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let (r, seen) = watching_ipc(c, marker);
        out.push((via, r, seen));
    }
    out
}

/// Run `c` to its end; meanwhile note the IPC namespace of every host
/// process whose command line carries ` marker `.
fn watching_ipc(mut c: Command, marker: u64) -> (Run, Vec<String>) {
    let child = c.spawn().unwrap();
    // Its output is read meanwhile (a long record would fill the pipe).
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    let mut seen = Vec::new();
    let needle = format!(" {marker} ");
    while !waiter.is_finished() {
        if marker != 0 {
            for line in processes_with(&needle) {
                let pid = line.split(':').next().unwrap_or("");
                if let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/ipc")) {
                    let ns = ns.display().to_string();
                    if !seen.contains(&ns) {
                        seen.push(ns);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (to_run(waiter.join().unwrap()), seen)
}

/// Every host process's IPC namespace, and the nsfs mounts of the host's
/// mount namespace.
fn live_ipc_namespaces() -> String {
    let mut all = std::fs::read_to_string("/proc/1/mountinfo").unwrap_or_default();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(ns) = std::fs::read_link(e.path().join("ns/ipc")) {
            all.push_str(&ns.display().to_string());
            all.push('\n');
        }
    }
    all
}

/// The marker a run's processes carry in their command lines.
fn marker() -> u64 {
    u64::from_str_radix(&random_hex()[..6], 16).unwrap() | 1
}

/// The run is complete, says it hit memory, has its evidence whole (the
/// README's before-hash beside `also`) and is not promoted; nothing of it
/// is left on the host.
fn assert_complete_and_gone(via: &str, r: &Run, also: &str, marker: u64, seen: &[String]) {
    assert_ne!(r.json["state"], "failed", "{via}: {}", r.json);
    assert!(
        r.limits_hit().contains(&"memory".to_string()),
        "{via}: {:?}: {}",
        r.limits_hit(),
        r.json
    );
    let readme = r.change("README.md").unwrap_or_default();
    assert!(readme["before"].as_str().is_some(), "{via}: {}", r.json);
    assert!(
        r.change(also).is_some(),
        "{via}: {also} missing: {}",
        r.json
    );
    assert_ne!(r.decision(), "promote", "{via}: {}", r.json);
    assert_gone(via, r, marker, seen);
}

fn assert_gone(via: &str, r: &Run, marker: u64, seen: &[String]) {
    let id = run_id(r);
    wait_until("the run's cgroups to be removed", 30, || {
        run_cgroups(&id).iter().all(|p| !p.exists())
    });
    // The run's processes carry the marker in their command lines (the
    // cgroups' removal above already says none is left in them).
    assert!(
        marker == 0 || processes_with(&format!(" {marker} ")).is_empty(),
        "{via}: a process outlived the run"
    );
    // The sandbox's IPC namespace (and the segments in it) ended with the
    // run: no process is in it, nothing holds it mounted.
    assert!(
        marker == 0 || !seen.is_empty(),
        "{via}: the run's processes were not seen"
    );
    wait_until("the run's IPC namespace to end", 30, || {
        let live = live_ipc_namespaces();
        seen.iter().all(|ns| !live.contains(ns.as_str()))
    });
    let host = std::fs::read_link("/proc/self/ns/ipc").unwrap();
    assert!(
        !seen.contains(&host.display().to_string()),
        "{via}: the run shared the host's IPC namespace"
    );
}

/// Shared memory segments the command leaves behind fill the cgroup to
/// its ceiling (each top-up process is OOM-killed, its segment stays), then
/// the command ends. The walk still has room: the run is complete, and the
/// segments end with the run's IPC namespace.
#[test]
fn leftover_shared_memory_does_not_starve_the_walk() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = armed_workspace();
    let m = marker();
    let cmd = format!(
        "echo more >> README.md; python3 shm.py 250 {m}; \
         for i in $(seq 100); do python3 shm.py 1 {m} || break; done; \
         for i in $(seq 100); do head -c 64K /dev/zero > x$i || break; done; echo done"
    );
    for (via, r, seen) in both_ways(&d, &ws, &body(&ws, &cmd, 16, 16), m) {
        assert!(r.out().starts_with("shm 250\n"), "{via}: {}", r.json);
        assert_complete_and_gone(via, &r, "x1", m, &seen);
    }
}

/// The same segments beside 30,000 changes, a walk larger than the init's
/// room: the segments are removed before the walk (the room alone would
/// not hold it), and the run is complete with every change listed.
#[test]
fn leftover_shared_memory_is_removed_before_a_large_walk() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = armed_workspace();
    let m = marker();
    let cmd = format!(
        "echo more >> README.md; python3 many.py 30000; python3 shm.py 200 {m}; \
         for i in $(seq 100); do python3 shm.py 1 {m} || break; done; echo done"
    );
    for (via, r, seen) in both_ways(&d, &ws, &body(&ws, &cmd, 16, 16), m) {
        assert!(r.changes().len() > 30000, "{via}: {}", r.json);
        let first = format!("many/{}000000", "n".repeat(200));
        assert_complete_and_gone(via, &r, &first, m, &seen);
    }
}

/// Message queues (kernel memory) left full by the command: the run is
/// complete, the queues gone with it.
#[test]
fn leftover_message_queues_do_not_starve_the_walk() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = armed_workspace();
    let m = marker();
    let cmd = format!(
        "echo more >> README.md; echo x > made; python3 msg.py {m}; python3 msg.py {m}; echo done"
    );
    for (via, r, seen) in both_ways(&d, &ws, &body(&ws, &cmd, 16, 16), m) {
        assert_complete_and_gone(via, &r, "made", m, &seen);
    }
}

/// Attributes in the upper layer (kernel memory beyond `disk_mb`: the
/// tmpfs bounds them by its inode space) and /tmp's pages fill the cgroup;
/// the command is OOM-killed, the init walks on.
#[test]
fn leftover_attributes_and_tmp_pages_do_not_starve_the_walk() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = armed_workspace();
    let cmd = "echo more >> README.md; python3 xa.py; \
               for i in $(seq 300); do head -c 1M /dev/zero > /tmp/t$i || break; done; echo done";
    for (via, r, seen) in both_ways(&d, &ws, &body(&ws, cmd, 16, 16), 0) {
        assert!(r.out().contains("xattrs "), "{via}: {}", r.json);
        assert_complete_and_gone(via, &r, "xa/f0", 0, &seen);
    }
}

/// A walk larger than the init's room in a cgroup the command left full
/// of what the init cannot remove (attributes, then 20,000 long names,
/// then /tmp's pages): the init may be OOM-killed at the walk; the run is
/// then failed naming the limit, otherwise complete. Never promoted, never
/// with evidence missing, nothing left behind.
#[test]
fn a_walk_bigger_than_the_room_in_a_full_cgroup_fails_closed() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = armed_workspace();
    let cmd = "echo more >> README.md; python3 many.py 20000; python3 xa.py; \
               for i in $(seq 300); do head -c 1M /dev/zero > /tmp/t$i || break; done; echo done";
    for (via, r, seen) in both_ways(&d, &ws, &body(&ws, cmd, 16, 16), 0) {
        if r.json["state"] == "failed" {
            let e = r.json["error"].as_str().unwrap_or("");
            assert!(e.contains("memory"), "{via}: {}", r.json);
        } else {
            assert!(
                r.changes().len() > 20000,
                "{via}: {} changes",
                r.changes().len()
            );
            let readme = r.change("README.md").unwrap_or_default();
            assert!(readme["before"].as_str().is_some(), "{via}: {}", r.json);
        }
        assert_ne!(r.decision(), "promote", "{via}: {}", r.json);
        assert_gone(via, &r, 0, &seen);
    }
}

/// Every route to the command's score: its own file, its thread's, the
/// legacy `oom_adj`, its parent's, the init's (raised, to hand the init to
/// the OOM killer). Each is refused; the host reads 1000 on the command's
/// processes and the init's own score unchanged while the run is alive.
#[test]
fn the_command_cannot_move_any_oom_score() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = armed_workspace();
    let nap = format!("4.{}", marker());
    let cmd = format!("python3 score.py; sleep {nap} & wait");
    let (_dir, p) = agent_envelope_file(&body(&ws, &cmd, 64, 16));
    let mut via_cli = Command::new(bin());
    via_cli
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("DRYRUN_STATE_DIR", &d.state)
        .args(["execute", "--local"]);
    let mut via_daemon = d.cli_user();
    via_daemon.arg("execute");
    for (via, mut c) in [("daemon", via_daemon), ("root cli", via_cli)] {
        let child = c
            .current_dir(&ws.dir)
            .args(["--json", "--file"])
            .arg(&p)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let sleeper = loop {
            let found = processes_with(&format!("sleep {nap}"));
            let exact = format!(": sleep {nap} ");
            let hit = found.iter().find(|l| l.ends_with(&exact));
            if let Some(pid) = hit.and_then(|l| l.split(':').next()) {
                break pid.parse::<u32>().unwrap();
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "{via}: no sleep");
            std::thread::sleep(Duration::from_millis(20));
        };
        let score = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let shell = parent_of(sleeper).unwrap();
        let init = parent_of(shell).unwrap();
        assert_eq!(score(sleeper), "1000", "{via}: the command's sleep");
        assert_eq!(score(shell), "1000", "{via}: the command's shell");
        let init_score = score(init);
        assert_ne!(init_score, "1000", "{via}: the init was handed over");
        let r = to_run(child.wait_with_output().unwrap());
        assert_ne!(r.json["state"], "failed", "{via}: {}", r.json);
        let out = r.out();
        assert!(!out.contains("WROTE"), "{via}: {out}");
        assert_eq!(out.matches("refused ").count(), 9, "{via}: {out}");
        assert!(out.contains("score 1000\n"), "{via}: {out}");
        assert_gone(via, &r, 0, &[]);
    }
}

/// The agent's own CLI (no cgroup: rlimits): segments it leaves behind end
/// with its sandbox's IPC namespace, never outliving the run.
#[test]
fn the_agents_own_runs_leave_no_segment_behind() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write("README.md", "hello\n");
    ws.write("shm.py", SHM_PY);
    let m = marker();
    // In an envelope file: the CLI's own command line (on the host's
    // namespace) must not carry the marker.
    let cmd = format!("python3 shm.py 8 {m}; python3 shm.py 8 {m}; echo more >> README.md");
    let (_dir, p) = agent_envelope_file(&body(&ws, &cmd, 64, 16));
    let mut c = ws.command();
    c.args(["execute", "--json", "--file"])
        .arg(&p)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (r, seen) = watching_ipc(c, m);
    assert_ne!(r.json["state"], "failed", "{}", r.json);
    assert!(r.out().contains("shm 8\nshm 8\n"), "{}", r.json);
    assert!(!seen.is_empty(), "the run's processes were not seen");
    let host = std::fs::read_link("/proc/self/ns/ipc").unwrap();
    assert!(
        !seen.contains(&host.display().to_string()),
        "the run shared the host's IPC namespace"
    );
    wait_until("the run's IPC namespace to end", 30, || {
        let live = live_ipc_namespaces();
        seen.iter().all(|ns| !live.contains(ns.as_str()))
    });
}
