mod common;
use common::*;

// Adversarial review: attacks run from inside a real rehearsal, as root
// (shifted ids) and as an ordinary user, with the assertions made on the
// host side (listeners, the real workspace, the run record). The second
// half are the review's findings (attacks that first succeeded), kept as
// regression tests now that they are fixed.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener};

/// `python3 -c CODE` as a shell word list.
fn py(code: &str) -> String {
    format!("python3 -c {}", sq(code))
}

/// `(path, kind, file_type)` of every change.
fn summary(r: &Run) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = r
        .changes()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or("").to_string(),
                c["kind"].as_str().unwrap_or("").to_string(),
                c["file_type"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Every datagram queued on a nonblocking host socket.
fn datagrams(s: &UnixDatagram) -> Vec<String> {
    s.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    for _ in 0..1000 {
        match s.recv(&mut buf) {
            Ok(n) => got.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("recv: {e}"),
        }
    }
    got
}

/// How many connections wait in a nonblocking host listener's queue. The
/// rehearsal is over when this is called, so whatever it sent is queued.
fn queued_connections(l: &UnixListener) -> usize {
    l.set_nonblocking(true).unwrap();
    let mut n = 0;
    for _ in 0..1000 {
        match l.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("accept: {e}"),
        }
    }
    n
}

/// A directory under /opt (bound read-only into the default image), so a
/// host socket there is visible inside the sandbox. Needs root.
fn visible_host_dir() -> tempfile::TempDir {
    std::fs::create_dir_all("/opt").unwrap();
    let d = tempfile::Builder::new()
        .prefix("dryrun-adv-")
        .tempdir_in("/opt")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

// ---------------------------------------------------------------------------
// Attacks the sandbox defeats.
// ---------------------------------------------------------------------------

/// Overlay treats a 0:0 character device in the upper layer as a whiteout;
/// the evidence walk does too. Creating one (or any device) from inside must
/// fail, so a command cannot forge deletions or hide entries.
#[test]
fn whiteouts_and_devices_cannot_be_created_in_the_workspace() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("keep.txt", "keep\n");
        let code = r#"
import os, errno
for name, dev in (("keep.txt", 0), ("new-whiteout", 0), ("null2", os.makedev(1, 3))):
    try:
        os.mknod(name, 0o600 | 0o020000, dev)
        print("MKNOD-OK", name)
    except OSError as e:
        print("mknod-failed", name, errno.errorcode.get(e.errno))
"#;
        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(code)), &["--read-only"]);
        assert_ran(who, &r);
        assert!(!r.out().contains("MKNOD-OK"), "{who:?}: {}", r.out());
        assert_eq!(
            r.out().matches("mknod-failed").count(),
            3,
            "{who:?}: {}\n{}",
            r.out(),
            r.err()
        );
        assert!(r.changes().is_empty(), "{who:?}: {:#?}", r.changes());
        assert_eq!(r.decision(), "promote", "{who:?}: {:?}", r.reasons());
    }
}

/// The sandbox's init holds the helper's answer pipe (fd 1) and the lower and
/// upper layers; it must be out of the command's reach: no signals, no
/// /proc/1/{fd,root,cwd,environ,mem,maps}. A command that could write to
/// /proc/1/fd/1 could forge the `R` frame.
#[test]
fn the_sandbox_init_is_out_of_reach() {
    for who in identities() {
        let ws = Ws::new(who);
        let code = r#"
import os, signal
for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGSTOP, signal.SIGSEGV, signal.SIGPIPE):
    try:
        os.kill(1, sig)
        print("SIGNALLED", sig)
    except OSError as e:
        print("kill-refused", int(sig), e.errno)
for p in ("/proc/1/environ", "/proc/1/mem", "/proc/1/maps"):
    try:
        print("READ", p, open(p, "rb").read(64))
    except OSError as e:
        print("read-refused", p, e.errno)
for p in ("/proc/1/fd", "/proc/1/root/", "/proc/1/cwd/"):
    try:
        print("LISTED", p, os.listdir(p))
    except OSError as e:
        print("list-refused", p, e.errno)
for n in range(0, 8):
    try:
        fd = os.open("/proc/1/fd/%d" % n, os.O_WRONLY)
        os.write(fd, b'R{"forged":true}\n')
        print("WROTE", n)
    except OSError as e:
        print("open-refused", n, e.errno)
"#;
        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(code)), &[]);
        assert_ran(who, &r);
        let out = r.out();
        for bad in ["SIGNALLED", "READ ", "LISTED", "WROTE"] {
            assert!(!out.contains(bad), "{who:?}: {bad} in {out}");
        }
        assert_eq!(out.matches("kill-refused").count(), 5, "{who:?}: {out}");
        assert_eq!(out.matches("read-refused").count(), 3, "{who:?}: {out}");
        assert_eq!(out.matches("list-refused").count(), 3, "{who:?}: {out}");
        assert_eq!(out.matches("open-refused").count(), 8, "{who:?}: {out}");
        // The record is the helper's own, intact.
        assert_eq!(r.json["rehearsal"]["exit_code"], 0, "{who:?}: {}", r.stdout);
        // The verdict is the honest one: nothing the rehearsal saw holds
        // the run back; only the classifier asks, because inline code that
        // signals processes has an effect it cannot see before it runs.
        assert!(
            r.reasons()
                .iter()
                .all(|x| x.starts_with("[exec.inline_code")),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert_eq!(r.decision(), "needs_approval", "{who:?}: {:?}", r.reasons());
    }
}

/// The network observer in init reads each connect()'s address from the
/// caller's memory. Hostile calls (NULL, unmapped and kernel pointers, zero,
/// short and huge lengths, an address straddling a PROT_NONE page, a bad fd,
/// a pipe, unknown families, a flood of distinct addresses, the socket closed
/// by another thread during the call) must neither crash nor hang it.
#[test]
fn hostile_connect_calls_do_not_disturb_the_observer() {
    for who in identities() {
        let ws = Ws::new(who);
        let code = r#"
import ctypes, errno, mmap, os, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.connect.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep = []
def buf(b):
    x = ctypes.create_string_buffer(b)
    keep.append(x)
    return ctypes.addressof(x)
def c(name, fd, ptr, ln):
    r = libc.connect(fd, ptr, ln)
    print("call", name, r, errno.errorcode.get(ctypes.get_errno()), flush=True)
inet = b"\x02\x00\x00\x50\x7f\x00\x00\x01" + b"\x00" * 8
s = socket.socket()
c("null", s.fileno(), None, 16)
c("unmapped", s.fileno(), 0xdeadbeef000, 16)
c("kernel", s.fileno(), 0xffffffff81000000, 16)
c("len0", s.fileno(), buf(inet), 0)
c("len1", s.fileno(), buf(inet), 1)
c("huge", s.fileno(), buf(inet), 0xffffffff)
c("badfd", 9999, buf(inet), 16)
r, w = os.pipe()
c("pipe", r, buf(inet), 16)
m = mmap.mmap(-1, 8192)
base = ctypes.addressof(ctypes.c_char.from_buffer(m))
ctypes.memmove(base + 4092, inet[:4], 4)
libc.mprotect(base + 4096, 4096, 0)
c("straddle", s.fileno(), base + 4092, 16)
for fam in (16, 17, 38, 40, 0xffff):
    c("family%d" % fam, s.fileno(), buf(bytes([fam & 0xff, fam >> 8]) + b"\x00" * 14), 16)
for port in range(1, 2001):
    d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        d.connect(("10.0.0.1", port))
    except OSError:
        pass
    d.close()
for i in range(500):
    t = socket.socket()
    f = t.fileno()
    th = threading.Thread(target=os.close, args=(f,))
    th.start()
    libc.connect(f, buf(inet), 16)
    th.join()
    t.detach()
print("OBSERVER-SURVIVED")
"#;
        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(code)), &[]);
        assert_ran(who, &r);
        assert!(
            r.out().contains("OBSERVER-SURVIVED"),
            "{who:?}: {}\n{}",
            r.out(),
            r.err()
        );
        assert_eq!(r.out().matches("call ").count(), 14, "{who:?}: {}", r.out());
        let network = r
            .blocked()
            .iter()
            .filter(|b| b["kind"] == "network")
            .count();
        assert!(network >= 60, "{who:?}: {:?}", r.blocked());
        assert!(
            r.blocked()
                .iter()
                .any(|b| b["detail"].as_str().unwrap_or("").contains("not listed")),
            "{who:?}: the flood beyond the listing cap must be counted: {:?}",
            r.blocked()
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
    }
}

/// A host datagram socket placed in the workspace is not reachable through
/// the overlay, with connect(), sendto() or the unobserved sendmsg().
#[test]
fn a_host_datagram_socket_in_the_workspace_is_unreachable() {
    for who in identities() {
        let ws = Ws::new(who);
        let path = ws.dir.join("svc-dgram.sock");
        let host = UnixDatagram::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        ws.chown_all();
        let code = format!(
            r#"
import socket
p = {p:?}
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for name, fn in (("sendto", lambda: s.sendto(b"pwned-sendto", p)),
                 ("sendmsg", lambda: s.sendmsg([b"pwned-sendmsg"], [], 0, p))):
    try:
        fn()
        print("SENT", name)
    except OSError as e:
        print("send-failed", name, e.errno)
try:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.connect(p)
    c.send(b"pwned-connect")
    print("SENT connect")
except OSError as e:
    print("send-failed connect", e.errno)
"#,
            p = path.display().to_string()
        );
        // Positive control: the script reaches the socket from the host.
        let ctl = std::process::Command::new("python3")
            .arg("-c")
            .arg(&code)
            .output()
            .unwrap();
        assert_eq!(
            datagrams(&host).len(),
            3,
            "control: {}",
            String::from_utf8_lossy(&ctl.stdout)
        );

        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(&code)), &[]);
        assert_ran(who, &r);
        let got = datagrams(&host);
        assert!(got.is_empty(), "{who:?}: the host socket received {got:?}");
        assert!(!r.out().contains("SENT"), "{who:?}: {}", r.out());
        assert_eq!(r.out().matches("send-failed").count(), 3, "{who:?}");
    }
}

// ---------------------------------------------------------------------------
// Findings of the review: attacks that succeeded before their fix.
// ---------------------------------------------------------------------------

/// A host datagram socket in a directory the image shows (/opt here) is
/// reached with sendmsg(): only connect() and sendto() are observed, and the
/// network namespace does not separate pathname unix sockets. The run is
/// promoted and its record says nothing.
#[test]

fn sendmsg_to_a_host_unix_socket_in_the_image_is_not_delivered() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let d = visible_host_dir();
        let path = d.path().join("svc-dgram.sock");
        let host = UnixDatagram::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let code = format!(
            "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
             s.sendmsg([b'pwned-sendmsg'], [], 0, {:?})\nprint('sent')",
            path.display().to_string()
        );
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(&code)), &[]);
        assert_ran(who, &r);
        let got = datagrams(&host);
        assert!(
            got.is_empty(),
            "{who:?}: the host socket received {got:?}; decision {}",
            r.decision()
        );
        assert_ne!(r.decision(), "promote", "{who:?}: {:?}", r.blocked());
    }
}

/// connect() is observed with SECCOMP_USER_NOTIF_FLAG_CONTINUE: init reads
/// the address, then the kernel reads it again. A second thread flipping the
/// buffer between an AF_INET address (what init sees and records) and the
/// path of a host socket (what the kernel connects to) reaches a host stream
/// socket in an image tree, and the record names the wrong destination.
#[test]

fn racing_the_connect_address_does_not_reach_a_host_unix_socket() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let d = visible_host_dir();
        let path = d.path().join("svc.sock");
        let host = UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let code = format!(
            r#"
import ctypes, socket, struct, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.connect.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]
unix = struct.pack("H", 1) + {p:?}.encode() + b"\x00"
inet = (struct.pack("H", 2) + struct.pack(">H", 9) + bytes([127, 0, 0, 1])).ljust(len(unix), b"\x00")
buf = ctypes.create_string_buffer(inet, len(unix))
stop = []
def flip():
    while not stop:
        ctypes.memmove(buf, unix, len(unix))
        ctypes.memmove(buf, inet, len(unix))
t = threading.Thread(target=flip)
t.start()
won = 0
for i in range(20000):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if libc.connect(s.fileno(), ctypes.addressof(buf), len(unix)) == 0:
        s.sendall(b"pwned-toctou")
        won = 1
        break
    s.close()
stop.append(1)
t.join()
print("won", won, "after", i + 1)
"#,
            p = path.display().to_string()
        );
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(&code)), &[]);
        assert_ran(who, &r);
        assert_eq!(
            queued_connections(&host),
            0,
            "{who:?}: the host socket accepted a connection: {}; blocked: {:?}",
            r.out(),
            r.blocked()
        );
    }
}

/// Replacing a directory by a file (or symlink) lists only the new file as
/// `modified`: the deleted contents of the directory are not listed, so a
/// forbidden path inside it is never matched and the run is promoted.
#[test]

fn replacing_a_directory_by_a_file_lists_its_deleted_contents() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("certs/server.pem", "-----BEGIN PRIVATE KEY-----\n");
        let r = ws.rehearse_untouched(
            "rm -rf certs && echo x > certs",
            &["--expect-write", "**", "--forbid", "**/*.pem"],
        );
        assert_ran(who, &r);
        assert!(
            summary(&r).contains(&(
                "certs/server.pem".to_string(),
                "deleted".to_string(),
                "file".to_string()
            )),
            "{who:?}: {:?}",
            summary(&r)
        );
        assert_eq!(r.decision(), "blocked", "{who:?}: {:?}", r.reasons());
    }
}

/// The verdict excuses a directory change when an expected write lies below
/// it ("a directory created to hold expected files"), whatever the change
/// is: replacing an unexpected *file* by a directory holding an expected
/// file deletes the file's content and is promoted.
#[test]

fn replacing_an_unexpected_file_by_a_directory_is_a_surprise() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("Makefile", "all:\n\ttrue\n");
        let r = ws.rehearse_untouched(
            "rm Makefile && mkdir Makefile && echo notes > Makefile/x.md",
            &["--expect-write", "**/*.md"],
        );
        assert_ran(who, &r);
        assert_eq!(r.decision(), "blocked", "{who:?}: {:?}", summary(&r));
        assert!(
            strings(&r.json["verdict"]["surprise_paths"]).contains(&"Makefile".to_string()),
            "{who:?}: {:?}",
            r.json["verdict"]
        );
    }
}

/// Overlay (6.7+) lets a command set `user.overlay.*` xattrs through the
/// mount: it stores them escaped as `user.overlay.overlay.*` on the upper
/// layer, and the walk ignores every `user.overlay.` name. The change is
/// invisible: a file whose only change is such an xattr is `identical`, a
/// directory is not listed, and a read-only run is promoted.
#[test]

fn overlay_named_xattrs_set_by_the_command_are_evidence() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("f.txt", "hi\n");
        ws.write("sub/a", "a\n");
        let code = r#"
import os
os.setxattr("f.txt", "user.overlay.payload", b"x" * 200)
os.setxattr("sub", "user.overlay.opaque", b"y")
print("set", os.listxattr("f.txt"), os.listxattr("sub"), sorted(os.listdir("sub")))
"#;
        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(code)), &["--read-only"]);
        assert_ran(who, &r);
        // Not a real opaque marker: the lower child is still visible.
        assert!(r.out().contains("['a']"), "{who:?}: {}", r.out());
        assert_ne!(
            r.decision(),
            "promote",
            "{who:?}: xattr writes in a read-only run were not seen: {:?}",
            summary(&r)
        );
    }
}

/// The walk starts below the upper layer's root, so changes to the workspace
/// root directory itself (mode, user xattrs) never appear.
#[test]

fn changes_to_the_workspace_root_directory_are_evidence() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("f.txt", "hi\n");
        let code = "import os\nos.chmod('.', 0o777)\nos.setxattr('.', 'user.evil', b'1')\nprint(oct(os.stat('.').st_mode))";
        let r = ws.rehearse_untouched(&format!("{}; exit 0", py(code)), &["--read-only"]);
        assert_ran(who, &r);
        assert!(r.out().contains("0o40777"), "{who:?}: {}", r.out());
        assert_ne!(
            r.decision(),
            "promote",
            "{who:?}: a world-writable workspace root went unseen"
        );
    }
}

/// Empty files take no tmpfs blocks, so `disk_mb` does not bound how many a
/// command creates; every one becomes a change in the record. 150,000 empty
/// files with long names (a few seconds) make a record of ~180 MB on the
/// host and an engine of ~0.5 GB; within the default 60 s timeout a command
/// reaches millions.
#[test]

fn the_number_of_changes_is_bounded() {
    for who in identities() {
        let ws = Ws::new(who);
        let code = r#"
import os
os.mkdir("m")
for i in range(150000):
    os.close(os.open("m/%07d%s" % (i, "x" * 200), os.O_CREAT | os.O_WRONLY, 0o644))
print("created")
"#;
        let r = ws.rehearse(&format!("{}; exit 0", py(code)), &[]);
        let mut state_bytes = 0u64;
        for e in walkdir::WalkDir::new(&ws.state) {
            let e = e.unwrap();
            if e.file_type().is_file() {
                state_bytes += e.metadata().unwrap().len();
            }
        }
        // 150,000 entries with 208-byte names: the change list stops at
        // its cap and the run record at its own (64 MiB, with room for
        // 100,000 changes of long names); the envelope, the journal's
        // compact entries and the run's other files add little.
        assert!(
            r.changes().len() <= 100_000,
            "{who:?}: {} changes listed",
            r.changes().len()
        );
        assert!(
            state_bytes < 72 << 20,
            "{who:?}: one run stored {state_bytes} bytes on the host ({} changes, stdout {} bytes)",
            r.changes().len(),
            r.stdout.len()
        );
    }
}
