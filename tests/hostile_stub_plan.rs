//! Hostile pass over two changes: the stub table travelling to the sandbox
//! as raw JSON (`StubPlan`), and the supervisor dropping the seccomp
//! listener from its poll once it reports a hang-up alone. Each attack runs
//! as the unprivileged test user through the real binary and the real
//! sandbox; the assertions are on the run record and the host side.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

fn write_envelope(ws: &Ws, name: &str, json: &str) -> PathBuf {
    let p = ws.root.path().join(name);
    std::fs::write(&p, json).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

/// The `network` entries of a run's blocked list.
fn network_details(r: &Run) -> Vec<String> {
    r.blocked()
        .iter()
        .filter(|b| b["kind"] == "network")
        .map(|b| b["detail"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Python that makes a network attempt of every shape the listener sees,
/// each to its own documentation address (198.51.100.N, port 7000+N), from
/// threads, forks, a double fork, a spawned (vfork) child, an exec chain, a
/// process that moved its socket to another descriptor and closed the
/// rest, and sendto, sendmsg and a sendmmsg batch. The main process waits
/// for every one of them before it exits 0.
const SHAPES_PY: &str = r#"
import os, socket, threading, ctypes, time
def tcp(n):
    s = socket.socket()
    try: s.connect(("198.51.100.%d" % n, 7000 + n))
    except OSError: pass
def udp_sendto(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try: s.sendto(b"x", ("198.51.100.%d" % n, 7000 + n))
    except OSError: pass
def udp_sendmsg(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try: s.sendmsg([b"x"], [], 0, ("198.51.100.%d" % n, 7000 + n))
    except OSError: pass
def udp_sendmmsg(n, m):
    libc = ctypes.CDLL(None, use_errno=True)
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    class sin(ctypes.Structure):
        _fields_ = [("fam", ctypes.c_ushort), ("port", ctypes.c_ushort),
                    ("addr", ctypes.c_ubyte * 4), ("zero", ctypes.c_ubyte * 8)]
    class msghdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint),
                    ("iov", ctypes.c_void_p), ("iovlen", ctypes.c_size_t),
                    ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]
    class mmsghdr(ctypes.Structure):
        _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]
    buf = ctypes.create_string_buffer(b"x")
    iov = iovec(ctypes.cast(buf, ctypes.c_void_p), 1)
    addrs, msgs = [], (mmsghdr * 2)()
    for i, k in enumerate((n, m)):
        a = sin(socket.AF_INET, socket.htons(7000 + k), (ctypes.c_ubyte * 4)(198, 51, 100, k))
        addrs.append(a)
        msgs[i].hdr.name = ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
        msgs[i].hdr.namelen = ctypes.sizeof(a)
        msgs[i].hdr.iov = ctypes.cast(ctypes.pointer(iov), ctypes.c_void_p)
        msgs[i].hdr.iovlen = 1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    libc.sendmmsg(s.fileno(), msgs, 2, 0)

# 1-4: threads
ts = [threading.Thread(target=tcp, args=(n,)) for n in (1, 2, 3, 4)]
for t in ts: t.start()
for t in ts: t.join()
kids = []
# 5: a forked child
p = os.fork()
if p == 0:
    tcp(5); os._exit(0)
kids.append(p)
# 6: a double fork; the grandchild tells us through a pipe when it is done
r, w = os.pipe()
p = os.fork()
if p == 0:
    if os.fork() == 0:
        time.sleep(0.2); tcp(6); os.write(w, b"6"); os._exit(0)
    os._exit(0)
os.waitpid(p, 0); os.close(w)
# 7: a spawned child (vfork) through an exec chain: bash -> sh -> bash
sp = os.posix_spawn("/bin/bash", ["bash", "-c", "exec sh -c 'exec bash -c \"echo x > /dev/tcp/198.51.100.7/7007\"'"], dict(os.environ))
kids.append(sp)
# 8: the socket moved to a high descriptor, everything else closed
p = os.fork()
if p == 0:
    s = socket.socket()
    os.dup2(s.fileno(), 900); s.close()
    os.closerange(3, 900)
    t = socket.socket(fileno=900)
    try: t.connect(("198.51.100.8", 7008))
    except OSError: pass
    os._exit(0)
kids.append(p)
# 9, 10, 11, 12: sendto, sendmsg and a sendmmsg batch (13 is its second message)
udp_sendto(9); udp_sendmsg(10)
p = os.fork()
if p == 0:
    udp_sendmmsg(11, 13); os._exit(0)
kids.append(p)
for k in kids: os.waitpid(k, 0)
os.read(r, 1)
# 12: the last attempt, right before the main process exits
tcp(12)
"#;

/// Every shape of network attempt is recorded, whichever process made it
/// and however it got there: none is lost once processes under the filter
/// come and go (the listener's hang-up is reported only when none is left).
#[test]
fn network_attempts_of_every_shape_and_process_are_recorded() {
    let ws = Ws::new(Who::User);
    ws.write("shapes.py", SHAPES_PY);
    let r = ws.rehearse_untouched("python3 shapes.py; exit 0", &[]);
    assert_ran(Who::User, &r);
    let net = network_details(&r);
    for n in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] {
        let dest = format!("198.51.100.{n}:{}", 7000 + n);
        assert!(
            net.iter().any(|d| d.contains(&dest)),
            "the attempt to {dest} was not recorded: {net:?}\nstderr: {}",
            r.err()
        );
    }
    assert_eq!(r.decision(), "blocked", "{:?}", r.json["verdict"]);
    assert!(r.changes().is_empty(), "{:?}", r.changes());
}

/// Many processes racing each other with attempts (200 in all, each to its
/// own destination): every one is either listed or counted, none lost, and
/// no process is left blocked in a notification nobody answers (the run
/// ends well before its timeout).
#[test]
fn a_storm_of_concurrent_attempts_is_all_listed_or_counted() {
    let ws = Ws::new(Who::User);
    ws.write(
        "storm.py",
        r#"
import os, socket
kids = []
for k in range(20):
    p = os.fork()
    if p == 0:
        for i in range(10):
            s = socket.socket()
            try: s.connect(("198.51.100.%d" % (k + 1), 8000 + i))
            except OSError: pass
            s.close()
        os._exit(0)
    kids.append(p)
for p in kids: os.waitpid(p, 0)
print("done")
"#,
    );
    let started = std::time::Instant::now();
    let r = ws.rehearse_untouched("python3 storm.py; exit 0", &["--timeout", "60"]);
    assert_ran(Who::User, &r);
    assert_eq!(r.out(), "done\n", "stderr: {}", r.err());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(40),
        "the run waited for its timeout: an attempt was left unanswered"
    );
    let net = network_details(&r);
    let listed = net.iter().filter(|d| d.starts_with("connect")).count();
    let counted: usize = net
        .iter()
        .filter_map(|d| d.strip_suffix(" more network attempts not listed"))
        .map(|n| n.parse::<usize>().unwrap())
        .sum();
    assert_eq!(listed + counted, 200, "listed {listed}, counted {counted}");
    assert_eq!(r.decision(), "blocked", "{:?}", r.json["verdict"]);
}

/// Hostile strings in an envelope's stub answers (quotes, backslashes, a
/// closing script tag, line and paragraph separators, astral characters,
/// escape sequences and NUL), tools that collide with the policy's and with
/// each other, and a huge number of rules: the raw table reaches the stub
/// unchanged, each stub answers exactly the table's answer, and every
/// would-be action names a rule that is in the table. Nothing the stubs did
/// not make is recorded.
#[test]
fn hostile_stub_answers_travel_unchanged_and_record_only_what_stubs_made() {
    let ws = Ws::new(Who::User);
    let hostile = "q\"uote\\back\\\\slash</script><!-- \u{2028}\u{2029}\u{1F600}\u{feff}$(id)`id`'";
    let mut stubs = serde_json::Map::new();
    // The envelope's `gh pr merge` shadows the policy's rule for it.
    stubs.insert(
        "gh.pr.merge".into(),
        serde_json::json!({"match": {"command": "gh", "subcommand": "pr merge"},
                           "answer": {"stdout": hostile, "stderr": "e\\\"", "exit": 3}}),
    );
    // A second envelope rule for the same tool, and many more rules.
    stubs.insert(
        "x\"y</script>".into(),
        serde_json::json!({"match": {"command": "gh", "subcommand": "issue close"},
                           "answer": {"stdout": "closed\n"}}),
    );
    for i in 0..62 {
        stubs.insert(
            format!("many{i}"),
            serde_json::json!({"match": {"command": format!("tool-{i}")},
                               "answer": {"stdout": format!("{i}\\\"\n")}}),
        );
    }
    let env = serde_json::json!({
        "command": "gh pr merge 1 > merge.out; echo \"exit=$?\"; gh issue close 2; tool-61 a; gh pr view 3 >/dev/null 2>&1; true",
        "working_dir": ws.dir,
        "stubs": stubs,
    });
    let p = write_envelope(&ws, "hostile.json", &env.to_string());
    let r = ws.execute(&["--file", p.to_str().unwrap()]);
    // 64 rules is the envelope's limit: this one must be taken, and run.
    assert_ne!(r.code, 2, "refused up front: {}", r.stderr);
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    assert_eq!(r.out(), "exit=3\nclosed\n61\\\"\n", "stderr: {}", r.err());
    assert!(r.change("merge.out").is_some(), "{:?}", r.changes());
    assert!(
        !ws.dir.join("merge.out").exists(),
        "the rehearsal wrote the workspace"
    );
    let acts = actions(&r);
    let rules: Vec<&str> = acts
        .iter()
        .map(|a| a["rule"].as_str().unwrap_or(""))
        .collect();
    assert!(rules.contains(&"gh.pr.merge"), "{acts:?}");
    assert!(rules.contains(&"x\"y</script>"), "{acts:?}");
    assert!(rules.contains(&"many61"), "{acts:?}");
    for a in &acts {
        let rule = a["rule"].as_str().unwrap_or("");
        assert!(
            stubs.contains_key(rule) || rule.starts_with("gh."),
            "a would-be action names a rule not in the table: {a:?}"
        );
    }
    // The envelope's answer was the one given, byte for byte, not the
    // policy's.
    let merge = acts.iter().find(|a| a["rule"] == "gh.pr.merge").unwrap();
    assert_eq!(merge["source"], "override", "{merge:?}");
    assert_eq!(merge["answer"]["stdout"], hostile, "{merge:?}");
    assert_eq!(merge["answer"]["exit"], 3, "{merge:?}");
    assert_ne!(r.decision(), "promote");

    // A replay of it: the recorded answers travel the same way and come
    // back byte for byte.
    let id = run_id(&r);
    let rr = replay(&ws, &id, &["--novel", "strict"]);
    assert_ne!(rr.json["state"], "failed", "{rr:?}");
    assert_eq!(rr.out(), r.out(), "stderr: {}", rr.err());
    // (The baseline's overrides still win over its recording.)
    let answers =
        |r: &Run| -> Vec<Value> { actions(r).iter().map(|a| a["answer"].clone()).collect() };
    assert_eq!(answers(&rr), answers(&r));
}

/// A NUL or a lone control character in an answer, and a stub id or tool
/// name built to collide with the table's own files: refused before
/// anything runs, or answered exactly; never a stub that fails open or a
/// run that passes with a broken table.
#[test]
fn stub_answers_with_nul_and_path_like_tools_do_not_break_the_table() {
    let ws = Ws::new(Who::User);
    for (stubs, cmd) in [
        (
            r#"{"n": {"match": {"command": "gh"}, "answer": {"stdout": "a\u0000b\n"}}}"#,
            "gh x | od -c | head -1; true",
        ),
        (
            r#"{"n": {"match": {"command": "table.json"}, "answer": {"stdout": "t\n"}}}"#,
            "cat /.dryrun/stubs/table.json >/dev/null && echo readable; table.json; true",
        ),
        (
            r#"{"n": {"match": {"command": "..\\x"}, "answer": {"stdout": "t\n"}}}"#,
            "true",
        ),
        (
            r#"{"n": {"match": {"command": "gh"}, "answer": {"stdout": "\ud83d\ude00"}}}"#,
            "gh; true",
        ),
    ] {
        let env = format!(
            r#"{{"command": {}, "working_dir": "{}", "stubs": {stubs}}}"#,
            serde_json::to_string(cmd).unwrap(),
            ws.dir.display()
        );
        let p = write_envelope(&ws, "nul.json", &env);
        let r = ws.execute(&["--file", p.to_str().unwrap()]);
        if r.code == 2 {
            assert!(
                r.stderr.contains("stub") || r.stderr.contains("match"),
                "{stubs}: {}",
                r.stderr
            );
            continue;
        }
        assert_eq!(r.json["state"], "awaiting_approval", "{stubs}: {r:?}");
        assert_ne!(r.decision(), "promote", "{stubs}: {:?}", r.json["verdict"]);
        if stubs.contains("u0000") {
            assert!(
                r.out().contains("a  \\0   b  \\n"),
                "{stubs}: {:?}",
                r.out()
            );
        }
        if stubs.contains("ude00") {
            assert_eq!(r.out(), "\u{1F600}", "{stubs}");
        }
        for a in actions(&r) {
            assert_eq!(a["rule"], "n", "{stubs}: {a:?}");
        }
    }
}

/// A datagram whose destination says `AF_UNSPEC`: IPv4 UDP takes it as
/// `AF_INET` and sends it (only `connect()` reads `AF_UNSPEC` as "dissolve
/// the association"), so it is an attempt like any other. And a sendmmsg
/// batch sends every message, not just its first: each destination is one.
/// (Both were left out of the record: the first listed nothing, the second
/// only the batch's first destination.)
#[test]
fn finding_unspec_family_datagrams_and_every_batch_message_are_recorded() {
    let ws = Ws::new(Who::User);
    ws.write(
        "unspec.py",
        r#"
import socket, ctypes
libc = ctypes.CDLL(None, use_errno=True)
class sin(ctypes.Structure):
    _fields_ = [("fam", ctypes.c_ushort), ("port", ctypes.c_ushort),
                ("addr", ctypes.c_ubyte * 4), ("zero", ctypes.c_ubyte * 8)]
def unspec(ip, port):
    return sin(0, socket.htons(port), (ctypes.c_ubyte * 4)(*ip), (ctypes.c_ubyte * 8)())
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r.bind(("127.0.0.1", 0))
r.settimeout(2)
port = r.getsockname()[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
a = unspec((127, 0, 0, 1), port)
n = libc.sendto(s.fileno(), b"x", 1, 0, ctypes.byref(a), ctypes.sizeof(a))
try:
    r.recv(16); print("DELIVERED", port)
except OSError:
    print("NOT DELIVERED")
b = unspec((192, 0, 2, 44), 9044)
libc.sendto(s.fileno(), b"x", 1, 0, ctypes.byref(b), ctypes.sizeof(b))
"#,
    );
    ws.write("shapes.py", SHAPES_PY);
    let r = ws.rehearse_untouched("python3 unspec.py; python3 shapes.py; exit 0", &[]);
    assert_ran(Who::User, &r);
    let port = r
        .out()
        .strip_prefix("DELIVERED ")
        .map(|p| p.trim().to_string())
        .unwrap_or_else(|| panic!("the control failed: {:?} {}", r.out(), r.err()));
    let net = network_details(&r);
    for dest in [
        format!("127.0.0.1:{port}"),
        "192.0.2.44:9044".to_string(),
        "198.51.100.11:7011".to_string(),
        "198.51.100.13:7013".to_string(),
    ] {
        assert!(
            net.iter().any(|d| d.contains(&dest)),
            "the attempt to {dest} was not recorded: {net:?}"
        );
    }
}

/// A connect() from a thread other than the process's first: the listener
/// inspects its socket like any other (the notification names the thread,
/// which a plain pidfd cannot be opened for) and lets it meet the cut
/// network and Landlock like the first thread's, instead of refusing it as
/// uninspectable (which the record then said of every thread's attempt,
/// and which would refuse a multithreaded client's connections to a run's
/// egress proxy).
#[test]
fn finding_a_connect_from_a_secondary_thread_is_inspected_not_refused() {
    let ws = Ws::new(Who::User);
    ws.write(
        "thread.py",
        r#"
import socket, threading, errno
def go():
    s = socket.socket()
    try:
        s.connect(("198.51.100.77", 7077)); print("CONNECTED")
    except OSError as e:
        print(errno.errorcode.get(e.errno, e.errno))
t = threading.Thread(target=go); t.start(); t.join()
"#,
    );
    let r = ws.rehearse_untouched("python3 thread.py; exit 0", &[]);
    assert_ran(Who::User, &r);
    // Refused by Landlock (EACCES) or the missing route, not connected.
    assert_ne!(r.out(), "CONNECTED\n", "stderr: {}", r.err());
    let net = network_details(&r);
    assert!(
        net.iter()
            .any(|d| d == "connect stream to 198.51.100.77:7077"),
        "{net:?}"
    );
    assert_eq!(r.decision(), "blocked", "{:?}", r.json["verdict"]);
}

/// Attempts made by background processes right as the command exits (a
/// plain background job, a double fork, a process that has just closed its
/// copy of every descriptor): whichever wins the race, the run never
/// passes as if nothing had tried: the attempt is listed, or the process
/// still running (perhaps waiting in the listener) is killed and blocks the
/// run.
#[test]
fn attempts_racing_the_commands_exit_never_leave_a_clean_run() {
    let ws = Ws::new(Who::User);
    ws.write(
        "bg.py",
        r#"
import os, socket, sys
delay = float(sys.argv[1])
if os.fork() == 0:
    if os.fork() == 0:
        os.closerange(0, 3)
        import time; time.sleep(delay)
        s = socket.socket()
        try: s.connect(("198.51.100.99", 7099))
        except OSError: pass
        os._exit(0)
    os._exit(0)
"#,
    );
    for delay in ["0", "0.001", "0.01", "0.05", "0.3"] {
        for shape in [
            format!("python3 bg.py {delay}; exit 0"),
            format!("(sleep {delay}; exec 3<>/dev/tcp/198.51.100.98/7098) & exit 0"),
        ] {
            let r = ws.rehearse_untouched(&shape, &[]);
            assert_ran(Who::User, &r);
            let net = network_details(&r);
            let reasons = r.reasons().join("\n");
            assert!(
                !net.is_empty() || reasons.contains("background_processes"),
                "{shape}: neither listed nor blocked: {net:?} {reasons}"
            );
            assert_eq!(r.decision(), "blocked", "{shape}: {:?}", r.json["verdict"]);
        }
    }
}

/// A thread blocked in connect() while another thread of the same process
/// ends the whole process at once (`_exit`), as the command's last act.
/// The kernel never performs a connect that P1 has not answered, so no
/// packet leaves; an answered one is always listed. (How often the attempt
/// is cut short, and so missing from the record, is printed: on the test
/// machine most of the time, where a run outside the sandbox would have
/// sent its SYN.)
#[test]
fn an_attempt_cut_short_by_its_own_process_exiting_is_listed_or_never_made() {
    let ws = Ws::new(Who::User);
    ws.write(
        "cut.py",
        r#"
import os, socket, threading, time
def go():
    s = socket.socket(); s.setblocking(False)
    try: s.connect(("198.51.100.55", 7055))
    except OSError: pass
    os.write(1, b"answered\n")
threading.Thread(target=go).start()
time.sleep(0.0002)
os._exit(0)
"#,
    );
    let mut unlisted = 0;
    for _ in 0..10 {
        let r = ws.rehearse_untouched("exec python3 cut.py", &[]);
        assert_ran(Who::User, &r);
        let net = network_details(&r);
        if r.out().contains("answered") {
            assert!(!net.is_empty(), "an answered connect was not listed");
        } else if net.is_empty() {
            unlisted += 1;
            eprintln!("unlisted, decision {}", r.decision());
        }
    }
    // Not a defect the sandbox can close: the kernel drops a notification
    // whose caller died before P1 received it, and never made the call.
    eprintln!("{unlisted} of 10 attempts cut short before P1 answered");
}
