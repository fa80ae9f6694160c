//! Issue 30, attacked: this round's new surfaces, by a hostile command in a
//! rehearsal (as root and as the test user, the CLI's and a root daemon's).
//!
//! - The sandbox's own `/dev/pts` (a devpts instance) and `/dev/shm` (a
//!   capped tmpfs): pseudo-terminals taken until the host has none left for
//!   anyone else, keystrokes typed into the terminal of the person who
//!   started `dryrun execute` through every pty trick the command has
//!   (a controlling terminal of its own, line disciplines, console
//!   redirection, `/proc/*/fd`, a device node made for a host terminal),
//!   `/dev/shm` filled past its cap, linked or renamed into the workspace.
//! - The modification times the live lane now sets: hostile values.
//! - The client's umask: hostile values over the HTTP API, and a umask of 0
//!   promoting world-writable files unflagged.
//!
//! Every assertion is host-side: the host's pty count, the terminal's input
//! queue, the host's `/dev/shm`, the workspace's files and their modes and
//! times, the daemon's answers.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::daemon::*;
use common::*;

/// The most pseudo-terminals one rehearsal may hold at once (the devpts
/// instance's `max`; kept in step with `src/sandbox/mounts.rs`).
const PTY_CAP: u64 = 128;

fn host_ptys() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/pty/nr")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A command that opens pseudo-terminals (keeping each master, the slave
/// closed) in 4 processes until it is refused or holds `want` in all, then
/// holds them a moment. The host's pty count is the kernel's, for every
/// instance: past 3072 (`kernel.pty.max` 4096 less the 1024 reserved for
/// the host's own `/dev/pts`) no other sandbox, container or devpts outside
/// the host's first mount namespace gets one. The attack stops at 600 so
/// as not to starve whatever else runs on this machine.
const PTY_HOG: &str = r#"
import os, sys, time
want, procs = 600, 4
kids = []
for i in range(procs):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        held, err = [], "none"
        while len(held) < want // procs:
            try:
                m, s = os.openpty()
            except OSError as e:
                err = e.strerror
                break
            os.close(s)
            held.append(m)
        os.write(w, ("%d %s\n" % (len(held), err)).encode())
        time.sleep(1.5)
        os._exit(0)
    os.close(w)
    kids.append(r)
total = 0
for r in kids:
    n, err = os.read(r, 100).decode().split(" ", 1)
    total += int(n)
    print("child", n, err.strip())
print("TOTAL", total)
for _ in kids:
    os.wait()
"#;

/// Runs `f` while a thread samples the host's pty count; the most it saw
/// above the count before.
fn peak_ptys_during(f: impl FnOnce() -> Run) -> (u64, Run) {
    let base = host_ptys();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(base));
    let t = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(host_ptys(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        })
    };
    let r = f();
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    (peak.load(Ordering::Relaxed).saturating_sub(base), r)
}

/// Pseudo-terminals are a host-wide count: one rehearsal holds at most
/// its instance's cap, as root and as the test user, locally and through
/// a root daemon. The control: the same program run live holds all 600.
#[test]
fn a_rehearsal_cannot_take_the_hosts_pseudo_terminals() {
    if !require_root() || !require_tool("python3", "python3") {
        return;
    }
    let ws = Ws::new(Who::Root);
    let hog = ws.write("hog.py", PTY_HOG);
    let live = Command::new("python3").arg(&hog).output().unwrap();
    let live = String::from_utf8_lossy(&live.stdout).into_owned();
    assert!(live.contains("TOTAL 600"), "the control: {live}");
    let check = |what: &str, (peak, r): (u64, Run)| {
        let out = r.out().to_string();
        eprintln!("{what}: peak {peak}: {out}");
        assert!(
            out.contains("TOTAL"),
            "{what}: the attack did not run: {r:?}"
        );
        let total: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("TOTAL "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(total > 0, "{what}: no pseudo-terminal at all: {out}");
        assert!(total <= PTY_CAP, "{what}: held {total}: {out}");
        assert!(peak <= PTY_CAP + 8, "{what}: the host counted {peak} more");
    };
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("hog.py", PTY_HOG);
        check(
            &format!("{who:?} local"),
            peak_ptys_during(|| ws.rehearse("python3 hog.py", &[])),
        );
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("hog.py", PTY_HOG);
    check(
        "user via the daemon",
        peak_ptys_during(|| submit_user(&d, &ws, "python3 hog.py", &[])),
    );
}
