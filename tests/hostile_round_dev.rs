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

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::daemon::*;
use common::*;

/// The most pseudo-terminals one rehearsal may hold at once (the devpts
/// instance's `max`; kept in step with `src/sandbox/mounts.rs`).
const PTY_CAP: u64 = 32;

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

/// Every pty trick the sandbox's own pseudo-terminals give a command that
/// wants to type into the terminal of the person who started it: a
/// session of its own with one of its ptys as the controlling terminal,
/// `TIOCSTI` there and with high bits in the request, line disciplines
/// (`TIOCSETD`), console redirection (`TIOCCONS`), the peer of a master
/// (`TIOCGPTPEER`), packet mode, every terminal behind `/proc/*/fd`, and
/// device nodes made for the host's terminals in `/dev/shm` and the
/// workspace.
const PTY_TRICKS: &str = r#"
import fcntl, glob, os, struct, sys, termios
line = b"echo INJECTED-9e41\n"
live = sys.argv[1:] == ["live"]
def sti(fd, req=termios.TIOCSTI):
    try:
        for c in line:
            fcntl.ioctl(fd, req, bytes([c]))
        return "yes"
    except OSError as e:
        return e.strerror
def tryio(what, f):
    try:
        print(what, f())
    except OSError as e:
        print(what, e.strerror)
for fd in (0, 1, 2):
    print("fd", fd, sti(fd))
m = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
fcntl.ioctl(m, 0x40045431, struct.pack("i", 0))
n = struct.unpack("i", fcntl.ioctl(m, 0x80045430, struct.pack("i", 0)))[0]
tryio("peer", lambda: os.ttyname(fcntl.ioctl(m, 0x5441, os.O_RDWR)))
tryio("pkt", lambda: fcntl.ioctl(m, termios.TIOCPKT, struct.pack("i", 1)))
tryio("setd", lambda: fcntl.ioctl(m, 0x5423, struct.pack("i", 13)))
tryio("cons", lambda: fcntl.ioctl(m, 0x541D))
tryio("sti-high", lambda: sti(m, termios.TIOCSTI | (1 << 32)))
pid = os.fork()
if pid == 0:
    os.setsid()
    s = os.open("/dev/pts/%d" % n, os.O_RDWR)
    tryio("sctty", lambda: fcntl.ioctl(s, termios.TIOCSCTTY, 1))
    print("sti own", sti(s))
    for p in ["/dev/tty"] + sorted(glob.glob("/proc/[0-9]*/fd/*")):
        try:
            if not os.isatty(os.open(p, os.O_RDWR | os.O_NOCTTY)):
                continue
        except OSError:
            continue
        fd = os.open(p, os.O_RDWR | os.O_NOCTTY)
        print(p, os.ttyname(fd), sti(fd))
    os._exit(0)
os.waitpid(pid, 0)
for d in ["."] if live else ["/dev/shm", "."]:
    for name, dev in [("t0", os.makedev(136, 0)), ("tty", os.makedev(5, 0)), ("c", os.makedev(5, 1)), ("v", os.makedev(4, 1))]:
        p = d + "/node-" + name
        try:
            os.mknod(p, 0o666 | 0o020000, dev)
        except OSError as e:
            print("mknod", p, e.strerror)
            continue
        try:
            fd = os.open(p, os.O_RDWR | os.O_NOCTTY)
            print("node", p, sti(fd))
        except OSError as e:
            print("node", p, "open:", e.strerror)
print("DONE")
"#;

fn loaded_modules() -> String {
    std::fs::read_to_string("/proc/modules").unwrap_or_default()
}

/// The person's terminal (a pty the test made, `script`), as `who`: a shell
/// there runs `dryrun execute` of [`PTY_TRICKS`], then reads, without
/// waiting, what the terminal holds as typed input. `live` runs the tricks
/// without dryrun (the control). What the terminal held, and the tricks'
/// own report.
fn tricks_at_a_terminal(who: Who, live: bool) -> (String, String) {
    let ws = Ws::new(who);
    ws.write("tricks.py", PTY_TRICKS);
    ws.chown_all();
    let cmd = if live {
        "python3 tricks.py live"
    } else {
        "python3 tricks.py"
    };
    let t = common::terminal::at_a_terminal(&ws, who, cmd, live);
    let report = if live { t.seen } else { t.rehearsed.concat() };
    (t.pending, report)
}

/// As root and as the test user at a terminal: nothing the tricks type
/// reaches it, no line discipline's module is loaded, and no device node
/// for a host terminal is left in the workspace. The control: the same
/// program run live at that terminal does type the line in (through the
/// terminal it inherits, `/proc/self/fd`).
#[test]
fn the_sandboxes_ptys_reach_no_persons_terminal() {
    if !require_root() || !require_tool("python3", "python3") {
        return;
    }
    let modules = loaded_modules();
    for who in identities() {
        let (live, said) = tricks_at_a_terminal(who, true);
        assert!(
            live.contains("INJECTED-9e41"),
            "{who:?} control: {live} {said}"
        );
        let (pending, report) = tricks_at_a_terminal(who, false);
        eprintln!("TRICKS {who:?}: {report}");
        assert!(
            report.contains("DONE"),
            "{who:?}: the tricks did not run: {report}"
        );
        assert!(
            report.contains("sti own Operation not permitted"),
            "{report}"
        );
        assert!(report.contains("setd Operation not permitted"), "{report}");
        assert!(report.contains("cons Operation not permitted"), "{report}");
        assert!(
            report.contains("sti-high Operation not permitted"),
            "{report}"
        );
        assert_eq!(pending, "none", "{who:?}: input was injected: {report}");
    }
    for m in ["n_hdlc", "n_gsm", "slip", "ppp_async", "can327"] {
        let line = |s: &str| s.lines().any(|l| l.starts_with(&format!("{m} ")));
        assert!(
            line(&modules) || !line(&loaded_modules()),
            "the line discipline {m} was loaded"
        );
    }
}

/// The command's use of its `/dev/shm`: a canary left there, hard-linked
/// and renamed into the workspace, then the tmpfs filled with 1 MiB files
/// (up to 300: past the 256 MiB cap of the default image) and, with
/// `tmp` set, `/tmp` too.
fn shm_attack(tag: &str, tmp: bool) -> String {
    format!(
        r#"
import os
open("/dev/shm/{tag}", "w").write("x")
for f, what in ((os.link, "link"), (os.rename, "rename")):
    try:
        f("/dev/shm/{tag}", what + "-{tag}")
        print(what, "done")
    except OSError as e:
        print(what, e.strerror)
block = b"z" * (1 << 20)
for d in ["/dev/shm"] + (["/tmp"] if {tmp} else []):
    n, err = 0, "none"
    try:
        for i in range(300):
            open("%s/fill%d" % (d, i), "wb").write(block)
            n += 1
    except OSError as e:
        err = e.strerror
    print("FILL", d, n, err, flush=True)
print("END")
"#,
        tmp = if tmp { "True" } else { "False" }
    )
}

/// `/dev/shm` past its cap, linked or renamed into the workspace, left
/// for the host: the tmpfs refuses past its cap (256 MiB), a link or
/// rename into the workspace is refused (another file system), nothing of
/// it reaches the host's `/dev/shm` or the workspace. As root and the test
/// user. Then through a root daemon with a small memory limit, `/dev/shm`
/// and `/tmp` both filled (the second capped tmpfs is not in the memory
/// ceiling): the command is OOM-killed, the run still complete, the
/// evidence whole, nothing promoted.
#[test]
fn the_sandboxes_dev_shm_stays_its_own_and_capped() {
    if !require_root() || !require_tool("python3", "python3") {
        return;
    }
    let tag = format!("dryrun-shm-{}", random_hex());
    let host_shm = || {
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(&tag) || n.starts_with("fill"))
            .collect::<Vec<_>>()
    };
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("shm.py", &shm_attack(&tag, false));
        ws.chown_all();
        let r = ws.rehearse("python3 shm.py", &["--expect-write", "**"]);
        let out = r.out().to_string();
        eprintln!("SHM {who:?}: {out}");
        assert!(out.contains("END"), "{who:?}: {r:?}");
        assert!(out.contains("link Invalid cross-device link"), "{out}");
        assert!(out.contains("rename Invalid cross-device link"), "{out}");
        let filled: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("FILL /dev/shm "))
            .and_then(|l| l.split(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(filled <= 256, "{who:?}: {filled} MiB in /dev/shm: {out}");
        assert!(out.contains("No space left on device"), "{out}");
        assert!(host_shm().is_empty(), "{who:?}: {:?}", host_shm());
        let names: Vec<String> = r.changes().iter().map(|c| c["path"].to_string()).collect();
        assert!(!names.iter().any(|n| n.contains(&tag)), "{names:?}");
        assert!(!ws.dir.join(format!("link-{tag}")).exists());
        assert!(!ws.dir.join(format!("rename-{tag}")).exists());
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("shm.py", &shm_attack(&tag, true));
    ws.chown_all();
    let body = serde_json::json!({
        "command": "echo more >> README.md; python3 shm.py; echo after",
        "working_dir": ws.dir.display().to_string(),
        "limits": {"memory_mb": 16, "disk_mb": 16, "timeout_s": 60},
        "intent": {"expected_writes": ["*"]},
    })
    .to_string();
    let (_dir, p) = agent_envelope_file(&body);
    let r = run_json(
        d.cli_user()
            .current_dir(&ws.dir)
            .args(["execute", "--json", "--file"])
            .arg(&p)
            .output()
            .unwrap(),
    );
    eprintln!("SHM daemon: {} {:?}", r.out(), r.limits_hit());
    assert_ne!(r.json["state"], "failed", "{}", r.json);
    assert!(r.out().contains("FILL /dev/shm"), "{}", r.json);
    assert!(r.change("README.md").is_some(), "{}", r.json);
    assert_ne!(r.decision(), "promote", "{}", r.json);
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(host_shm().is_empty(), "{:?}", host_shm());
}

/// Give `p` (not followed) the access and modification time `secs`.
fn set_time(p: &Path, secs: i64) {
    let t = nix::sys::time::TimeSpec::new(secs, 0);
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        p,
        &t,
        &t,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
}

fn mtime_of(p: &Path) -> i64 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mtime()
}

/// The time of an identical rewrite goes live in a mutating run: a command
/// whose intent names only `out.txt` touches a make target outside it and
/// a protected hook (an identical rewrite is no write to the verdict, so
/// nothing asks about them) and is promoted. Only what the intent allows
/// takes its new time: the others keep theirs. The control: `stamp`, an
/// expected path, does take it. As root and as the test user.
#[test]
fn an_identical_rewrite_outside_the_intent_keeps_its_time() {
    const OLD: i64 = 1_262_304_000;
    for who in identities() {
        let ws = Ws::new(who);
        for f in ["Makefile", "other.txt", ".git/hooks/pre-commit", "stamp"] {
            set_time(&ws.write(f, "s\n"), OLD);
        }
        // In a script: the classifier does not read it.
        ws.write(
            "t.sh",
            "touch Makefile other.txt .git/hooks/pre-commit stamp\n",
        );
        ws.chown_all();
        let r = ws.rehearse(
            "sh t.sh && echo x > out.txt",
            &["--expect-write", "out.txt", "--expect-write", "stamp"],
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let id = run_id(&r);
        let out = ws.command().args(["promote", &id]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        eprintln!(
            "TIMES {who:?}: {} {:?} {:?} {said}",
            r.decision(),
            r.reasons(),
            out.status
        );
        if out.status.code() != Some(0) {
            // Not promoted at all: nothing was written, times included.
            assert!(!ws.dir.join("out.txt").exists(), "{who:?}: {said}");
        } else {
            assert!(ws.dir.join("out.txt").exists(), "{who:?}: {said}");
            assert!(
                mtime_of(&ws.dir.join("stamp")) > OLD,
                "{who:?}: the control"
            );
        }
        for f in ["Makefile", "other.txt", ".git/hooks/pre-commit"] {
            assert_eq!(
                mtime_of(&ws.dir.join(f)),
                OLD,
                "{who:?}: {f} took a time the intent never allowed ({}): {said}",
                r.decision()
            );
        }
    }
}

/// The client's umask over the HTTP API: hostile values (negative, past
/// 0o777, past 32 bits, a string, a float, a boolean) are refused naming
/// the field and the daemon goes on; a umask of 0 makes world-writable
/// files, and the run says so (`evidence.world_writable`) and waits for a
/// person instead of promoting, as root and as the test user.
#[test]
fn the_callers_umask_cannot_be_turned_against_the_host() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    for who in [Who::User, Who::Root] {
        let ws = if who == Who::User {
            user_workspace()
        } else {
            Ws::new(Who::Root)
        };
        for bad in [
            "-1",
            "512",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "-9223372036854775808",
            "\"077\"",
            "63.5",
            "true",
            "[63]",
        ] {
            let body = format!(
                "{{\"command\": \"touch x\", \"working_dir\": {}, \"caller_umask\": {bad}}}",
                serde_json::json!(ws.dir)
            );
            let (code, rec) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body));
            assert_eq!(code, 400, "{who:?} {bad}: {rec}");
            assert!(
                rec.to_string().contains("caller_umask"),
                "{who:?} {bad}: {rec}"
            );
        }
        assert!(!ws.dir.join("x").exists());
        let body = serde_json::json!({
            "command": "mkdir open && echo x > open/f && echo y > g",
            "working_dir": ws.dir,
            "caller_umask": 0,
            "intent": {"expected_writes": ["**"]},
        });
        let (code, rec) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body.to_string()));
        assert_eq!(code, 200, "{who:?}: {rec}");
        let modes: Vec<(String, u64)> = rec["rehearsal"]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["path"].as_str().unwrap().to_string(),
                    c["mode_after"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        assert!(modes.contains(&("g".into(), 0o666)), "{who:?}: {modes:?}");
        assert!(
            modes.contains(&("open".into(), 0o777)),
            "{who:?}: {modes:?}"
        );
        let text = rec["verdict"].to_string();
        assert!(text.contains("evidence.world_writable"), "{who:?}: {text}");
        assert_ne!(rec["verdict"]["decision"], "promote", "{who:?}: {text}");
        assert!(!ws.dir.join("g").exists(), "{who:?}");
    }
}

/// Times the command gives its files that an i64 of nanoseconds cannot
/// hold or a file system may refuse: before the epoch, year 1, past 2262
/// (saturated to the latest an i64 holds), on a file, a directory and a
/// symlink. The promotion completes, every file is written, the daemon
/// answers after it, as the test user through a root daemon and as root
/// locally.
#[test]
fn hostile_modification_times_break_no_promotion() {
    if !require_root() {
        return;
    }
    const CMD: &str = "printf a > neg && touch -d @-1000000 neg && printf b > year1 \
        && touch -d @-62135596800 year1 && printf c > far && touch -d @99999999999 far \
        && mkdir d && printf e > d/e && touch -d @9223372036 d/e && touch -d @99999999999 d \
        && ln -s far l && touch -h -d @-62135596800 l";
    // What the host's file system keeps of a time (ext4 with small inodes
    // clamps to 1901..2446): the live run's own result.
    let kept = |dir: &Path, secs: i64| {
        let p = dir.join(".time-probe");
        std::fs::write(&p, "").unwrap();
        set_time(&p, secs);
        let got = mtime_of(&p);
        std::fs::remove_file(&p).unwrap();
        got
    };
    let check = |what: &str, dir: &Path| {
        assert_eq!(mtime_of(&dir.join("neg")), -1_000_000, "{what}");
        let year1 = kept(dir, -62_135_596_800);
        assert_eq!(mtime_of(&dir.join("year1")), year1, "{what}");
        assert_eq!(mtime_of(&dir.join("l")), year1, "{what}: the link itself");
        // Saturated in the evidence (i64 nanoseconds end in 2262): an
        // earlier time than the live run's, never an error.
        assert!(mtime_of(&dir.join("far")) >= 9_223_372_036, "{what}");
        assert_eq!(mtime_of(&dir.join("d/e")), 9_223_372_036, "{what}");
        assert_eq!(std::fs::read_to_string(dir.join("d/e")).unwrap(), "e");
        assert_eq!(
            std::fs::read_link(dir.join("l")).unwrap(),
            Path::new("far"),
            "{what}"
        );
    };
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let r = submit_user(&d, &ws, CMD, &["--expect-write", "**"]);
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    promote_ok(d.cli_user(), &run_id(&r), "user via the daemon");
    check("user via the daemon", &ws.dir);
    assert!(health_ok(&d.socket), "the daemon answers");
    let ws = Ws::new(Who::Root);
    let r = ws.rehearse(CMD, &["--expect-write", "**"]);
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    promote_ok(ws.command(), &run_id(&r), "root local");
    check("root local", &ws.dir);
}

/// While a promotion stalls in its content steps, the agent swaps the
/// paths that only take a time (identical rewrites) for a symlink to a
/// root-owned file outside the workspace and a symlink to a root-owned
/// directory holding a file of the same name: the root-owned files keep
/// their times. Then a promotion killed (-9) mid-apply with time steps in
/// its plan: after the restart the workspace is as before, the root-owned
/// files untouched.
#[test]
fn time_steps_never_reach_swapped_in_root_files() {
    if !require_root() {
        return;
    }
    const OLD: i64 = 1_262_304_000;
    let set_old = |p: &Path| set_time(p, OLD);
    const CMD: &str = "touch stamp sub/stamp2 && echo 1 > a1 && echo 2 > a2 && echo 3 > a3";
    let armed = || {
        let ws = user_workspace();
        ws.write("sub/stamp2", "s\n");
        ws.write("stamp", "s\n");
        ws.chown_all();
        for f in ["stamp", "sub/stamp2"] {
            set_old(&ws.dir.join(f));
        }
        let rootdir = ws.root.path().join("rootdir");
        std::fs::create_dir(&rootdir).unwrap();
        for f in ["canary", "stamp2"] {
            std::fs::write(rootdir.join(f), "ROOT\n").unwrap();
            std::fs::set_permissions(rootdir.join(f), std::fs::Permissions::from_mode(0o666))
                .unwrap();
            set_old(&rootdir.join(f));
        }
        (ws, rootdir)
    };
    let swap = |ws: &Ws, rootdir: &Path, dir: bool| {
        std::fs::remove_file(ws.dir.join("stamp")).unwrap();
        std::os::unix::fs::symlink(rootdir.join("canary"), ws.dir.join("stamp")).unwrap();
        if !dir {
            return;
        }
        std::fs::rename(ws.dir.join("sub"), ws.dir.join("sub.moved")).unwrap();
        std::os::unix::fs::symlink(rootdir, ws.dir.join("sub")).unwrap();
    };
    let untouched = |what: &str, rootdir: &Path| {
        for f in ["canary", "stamp2"] {
            assert_eq!(mtime_of(&rootdir.join(f)), OLD, "{what}: root's {f}");
            assert_eq!(std::fs::read_to_string(rootdir.join(f)).unwrap(), "ROOT\n");
        }
    };
    let mut d = Daemon::start_env(&[], &[("DRYRUN_FAULT_APPLY_STALL_MS", "2500")]);
    for dir in [false, true] {
        let (ws, rootdir) = armed();
        let r = submit_user(&d, &ws, CMD, &["--expect-write", "**"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.change("stamp").unwrap()["mtime_after_ns"].is_i64(),
            "{r:?}"
        );
        let p = d
            .cli_user()
            .args(["promote", &run_id(&r)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until("the first steps", 20, || ws.dir.join("a1").exists());
        swap(&ws, &rootdir, dir);
        let out = p.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("SWAP {dir}: {:?} {err}", out.status);
        untouched(&format!("swapped mid-promotion ({dir})"), &rootdir);
        // The link itself may take the time (the owner's agent may touch
        // an entry of its own directory); what it points at never does.
        assert!(matches!(out.status.code(), Some(0 | 4)), "{err}");
    }

    d.kill9();
    let mut d = Daemon::start_env(&[], &[("DRYRUN_FAULT_APPLY_STALL_MS", "60000")]);
    let (ws, rootdir) = armed();
    let r = submit_user(&d, &ws, CMD, &["--expect-write", "**"]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut p = d
        .cli_user()
        .args(["promote", &run_id(&r)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the first steps", 20, || ws.dir.join("a1").exists());
    swap(&ws, &rootdir, true);
    d.kill9();
    let _ = p.wait();
    d.restart(&[]);
    untouched("killed mid-promotion", &rootdir);
    assert!(!ws.dir.join("a1").exists(), "the crash's steps undone");
}
