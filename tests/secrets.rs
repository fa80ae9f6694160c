//! Threat: reading the host's secrets from a rehearsal: files in home
//! directories, credential files under /etc, host service sockets, the
//! caller's environment, and whatever dryrun itself inherited (stdin, a
//! terminal, open file descriptors). Every attack runs inside a real
//! rehearsal; the assertions compare with what the host really holds.

mod common;
use common::*;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Removes a host path (file or directory) when dropped.
struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Run a prepared `dryrun execute --json ...` command and assert the real
/// workspace did not change.
fn run_untouched(ws: &Ws, mut c: Command) -> Run {
    let before = ws.snapshot();
    let out = c.output().expect("dryrun runs");
    let r = to_run(out);
    assert_eq!(
        before,
        ws.snapshot(),
        "the real workspace changed during a rehearsal"
    );
    r
}

fn everything(r: &Run) -> String {
    format!("{}\n{}\n{}", r.out(), r.err(), r.stdout)
}

#[test]
fn canaries_in_host_home_directories_are_invisible() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let secret = format!("dryrun-home-secret-{}", random_hex());
        let root_canary = PathBuf::from(format!("/root/.dryrun-canary-{}", random_hex()));
        std::fs::write(&root_canary, &secret).unwrap();
        std::fs::set_permissions(&root_canary, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _c1 = Cleanup(root_canary.clone());
        std::fs::create_dir_all("/home").unwrap();
        let home_dir = PathBuf::from(format!("/home/dryrun-canary-{}", random_hex()));
        std::fs::create_dir(&home_dir).unwrap();
        let _c2 = Cleanup(home_dir.clone());
        std::fs::set_permissions(&home_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let home_canary = home_dir.join(".netrc");
        std::fs::write(&home_canary, &secret).unwrap();
        std::fs::set_permissions(&home_canary, std::fs::Permissions::from_mode(0o644)).unwrap();

        let ws = Ws::new(who);
        let (rc, hc) = (
            root_canary.display().to_string(),
            home_canary.display().to_string(),
        );
        let script = format!(
            "ls -a /root; echo \"ls-root=$?\"; ls -a /home; echo \"ls-home=$?\"; \
             cat {rc} {hc}; cat /proc/1/root{rc} /proc/self/root{hc}; \
             cat /root/../root/$(basename {rc}); cd / && cat .{hc}; \
             exit 0"
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_ran(who, &r);
        let all = everything(&r);
        assert!(
            !all.contains(&secret),
            "{who:?}: a home-directory canary was read inside: {all}"
        );
        assert!(
            r.out()
                .lines()
                .any(|l| l.starts_with("ls-root=") && l != "ls-root=0"),
            "{who:?}: /root is listable: {}",
            r.out()
        );
        assert!(
            r.out()
                .lines()
                .any(|l| l.starts_with("ls-home=") && l != "ls-home=0"),
            "{who:?}: /home is listable: {}",
            r.out()
        );
        assert!(
            r.err().contains("No such file or directory"),
            "{who:?}: {}",
            r.err()
        );
        assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());
    }
}

#[test]
fn no_run_directories_and_no_host_sockets_inside() {
    if !require_root() {
        return;
    }
    for who in identities() {
        // A host service socket, world-connectable, where services live.
        std::fs::create_dir_all("/run").unwrap();
        let sock = PathBuf::from(format!("/run/dryrun-canary-{}.sock", random_hex()));
        let l = UnixListener::bind(&sock).unwrap();
        let _c = Cleanup(sock.clone());
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
        l.set_nonblocking(true).unwrap();

        let ws = Ws::new(who);
        let s = sock.display().to_string();
        let script = format!(
            "ls -a /run; echo \"ls-run=$?\"; ls -a /var/run; echo \"ls-var-run=$?\"; \
             for p in /run/docker.sock /var/run/docker.sock /run/dbus/system_bus_socket /var/run/dbus/system_bus_socket \
                      /run/containerd/containerd.sock /run/systemd/private /run/user /run/postgresql /run/dryrun {s}; do \
               test -e \"$p\" && echo \"VISIBLE $p\"; done; \
             python3 -c {}; \
             find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>/dev/null | python3 -c {}; \
             exit 0",
            sq(&format!(
                "import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n    s.connect({s:?})\n    s.sendall(b'pwned')\n    print('CONNECTED')\nexcept OSError as e:\n    print('failed', e)"
            )),
            // Every socket visible anywhere inside: none may be connectable.
            sq(
                "import socket, sys\nfor p in sys.stdin.read().split():\n    print('SOCKET', p)\n    for k in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):\n        try:\n            s = socket.socket(socket.AF_UNIX, k)\n            s.connect(p)\n            print('CONNECTED', p, k)\n        except OSError as e:\n            print('refused', p, k, e)"
            )
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_ran(who, &r);
        let out = r.out();
        assert!(
            out.lines()
                .any(|l| l.starts_with("ls-run=") && l != "ls-run=0"),
            "{who:?}: /run exists inside: {out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("ls-var-run=") && l != "ls-var-run=0"),
            "{who:?}: /var/run exists inside: {out}"
        );
        assert!(!out.contains("VISIBLE"), "{who:?}: {out}");
        assert!(!out.contains("CONNECTED"), "{who:?}: {out}");
        assert!(!out.contains(&format!("SOCKET {s}")), "{who:?}: {out}");
        let mut accepted = 0;
        for _ in 0..10 {
            for _ in 0..100 {
                match l.accept() {
                    Ok(_) => accepted += 1,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("accept: {e}"),
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            accepted, 0,
            "{who:?}: the host socket {s} accepted a connection from the sandbox"
        );
    }
}

#[test]
fn host_socket_in_a_visible_host_directory_is_unreachable() {
    // The default image binds /opt read-only; a socket there is visible, and
    // connecting to a socket needs no write access to the mount.
    if !require_root() {
        return;
    }
    for who in identities() {
        std::fs::create_dir_all("/opt").unwrap();
        let d = tempfile::Builder::new()
            .prefix("dryrun-canary-")
            .tempdir_in("/opt")
            .unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let sock = d.path().join("agent.sock");
        let l = UnixListener::bind(&sock).unwrap();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
        l.set_nonblocking(true).unwrap();
        let code = format!(
            "import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n    s.connect({:?})\n    s.sendall(b'pwned')\n    print('CONNECTED')\nexcept OSError as e:\n    print('failed', e)",
            sock.display().to_string()
        );
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&format!("python3 -c {}; exit 0", sq(&code)), &[]);
        assert_ran(who, &r);
        let mut accepted = 0;
        for _ in 0..10 {
            for _ in 0..100 {
                match l.accept() {
                    Ok(_) => accepted += 1,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("accept: {e}"),
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            accepted,
            0,
            "{who:?}: the host socket accepted a connection; run: {}\n{}",
            r.out(),
            r.err()
        );
        assert!(!r.out().contains("CONNECTED"), "{who:?}: {}", r.out());
        assert!(
            r.out().contains("failed"),
            "{who:?}: {}\n{}",
            r.out(),
            r.err()
        );
    }
}

const CANARY_VARS: &[&str] = &[
    "DRYRUN_CANARY_SECRET_TOKEN",
    "DRYRUN_CANARY_DB_SECRET",
    "DRYRUN_CANARY_API_KEY",
];

/// The dryrun command with secret-looking canary variables set on the
/// dryrun process (the caller).
fn with_canary_env(ws: &Ws, value: &str) -> Command {
    let mut c = ws.command();
    for v in CANARY_VARS {
        c.env(v, format!("{value}-{v}"));
    }
    c
}

/// The caller's environment reaches the command filtered: its
/// secret-looking variables are nowhere in the sandbox (not in any
/// process's environment or command line, nor pid 1's), its plain ones are.
#[test]
fn secret_looking_caller_variables_do_not_reach_the_command() {
    for who in identities() {
        let ws = Ws::new(who);
        let value = format!("canary{}", random_hex());
        let plain = format!("plain{}", random_hex());
        let mut c = with_canary_env(&ws, &value);
        c.env("PLAIN_SETTING", &plain);
        let script = "env; echo '--environ'; cat /proc/*/environ | tr '\\0' '\\n'; echo '--cmdline'; \
                      cat /proc/*/cmdline | tr '\\0' ' '; echo; echo '--pid1'; cat /proc/1/environ | tr '\\0' '\\n'; \
                      echo '--py'; python3 -c 'import os; print(dict(os.environ))'; exit 0";
        c.arg("execute").arg("--json").arg("--command").arg(script);
        let r = run_untouched(&ws, c);
        assert_ran(who, &r);
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let all = everything(&r);
        assert!(
            !all.contains(&value),
            "{who:?}: a canary value reached the sandbox: {all}"
        );
        assert!(
            !r.out().contains("DRYRUN_CANARY"),
            "{who:?}: a canary name reached the sandbox: {}",
            r.out()
        );
        // The shell and env ran: the command saw the caller's environment,
        // filtered (the test's CLI runs with HOME at the workspace's parent).
        let home = format!("HOME={}", ws.root.path().display());
        assert!(r.out().lines().any(|l| l == home), "{who:?}: {}", r.out());
        assert!(
            r.out()
                .lines()
                .any(|l| l == format!("PLAIN_SETTING={plain}")),
            "{who:?}: a plain caller variable did not reach the command: {}",
            r.out()
        );
    }
}

#[test]
fn pid1_environ_does_not_hold_the_callers_environment() {
    for who in identities() {
        let ws = Ws::new(who);
        let value = format!("canary{}", random_hex());
        let mut c = with_canary_env(&ws, &value);
        c.arg("execute").arg("--json").arg("--command").arg(
            "cat /proc/1/environ | tr '\\0' '\\n'; echo \"rc=$?\"; xxd /proc/1/environ 2>/dev/null | head -50; \
             for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done; exit 0",
        );
        let r = run_untouched(&ws, c);
        assert_ran(who, &r);
        let all = everything(&r);
        assert!(!all.contains(&value), "{who:?}: {all}");
        // (The names do appear in the record, as stripped; not in the output.)
        let output = format!("{}{}", r.out(), r.err());
        assert!(!output.contains("DRYRUN_CANARY"), "{who:?}: {output}");
    }
}

#[test]
fn secret_looking_caller_variables_are_listed_as_stripped() {
    for who in identities() {
        let ws = Ws::new(who);
        let value = format!("canary{}", random_hex());
        let mut c = with_canary_env(&ws, &value);
        c.arg("execute").arg("--json").arg("--command").arg("true");
        let r = run_untouched(&ws, c);
        assert_ran(who, &r);
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let s = r.stripped();
        for v in CANARY_VARS {
            assert!(
                s.contains(&format!("env:{v}")),
                "{who:?}: env:{v} not in stripped = {s:?}"
            );
        }
        // Names are listed, never values.
        assert!(
            !r.stdout.contains(&value),
            "{who:?}: a canary value appears in the run record"
        );
    }
}

#[test]
fn envelope_env_reaches_the_command() {
    for who in identities() {
        let ws = Ws::new(who);
        let host_value = format!("host{}", random_hex());
        let cmd = "echo \"FOO=$FOO\"; echo \"TOKEN=$DRYRUN_CANARY_SECRET_TOKEN\"; tr '\\0' '\\n' < /proc/self/environ | grep -E '^(FOO|DRYRUN_CANARY)'; exit 0";
        let envelope = format!(
            "command: {}\nworking_dir: {}\nenv:\n  FOO: bar\n  DRYRUN_CANARY_SECRET_TOKEN: from-envelope\n",
            serde_json::to_string(cmd).unwrap(),
            serde_json::to_string(&ws.dir.display().to_string()).unwrap()
        );
        let file = ws.root.path().join("envelope.yaml");
        std::fs::write(&file, envelope).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c = with_canary_env(&ws, &host_value);
        c.arg("execute").arg("--json").arg("--file").arg(&file);
        let r = run_untouched(&ws, c);
        assert_ran(who, &r);
        // Using a variable named like a credential needs a reviewer.
        assert_eq!(r.code, 3, "{who:?}: {r:?}");
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[credential.variable]")),
            "{who:?}: {:?}",
            r.reasons()
        );
        let out = r.out();
        assert!(out.contains("FOO=bar"), "{who:?}: {out}");
        // The value reached the command; the record holds it redacted
        // (the values a run is given never reach its logs).
        assert!(
            out.contains("TOKEN=[redacted:env:DRYRUN_CANARY_SECRET_TOKEN]"),
            "{who:?}: {out}"
        );
        assert!(!everything(&r).contains("from-envelope"), "{who:?}: {out}");
        assert!(
            out.lines().any(|l| l == "FOO=bar"),
            "{who:?}: FOO missing from /proc/self/environ: {out}"
        );
        assert!(
            !everything(&r).contains(&host_value),
            "{who:?}: a host value reached the command: {out}"
        );
    }
}

fn host_lines(p: &str) -> Vec<String> {
    std::fs::read_to_string(p)
        .map(|s| {
            s.lines()
                .map(String::from)
                .filter(|l| l.trim().len() > 3)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn etc_shadow_is_masked() {
    let shadow = host_lines("/etc/shadow");
    if shadow.is_empty() {
        eprintln!(
            "note: the host's /etc/shadow is unreadable or empty; checking emptiness inside only"
        );
    }
    for who in identities() {
        let ws = Ws::new(who);
        let script = "cat /etc/shadow; echo \"--rc=$?\"; echo \"size=$(stat -c %s /etc/shadow 2>/dev/null)\"; \
                      echo '--gshadow'; cat /etc/gshadow; echo '--bypass'; \
                      umount /etc/shadow 2>/dev/null; umount -l /etc/shadow 2>/dev/null; \
                      cat /proc/self/root/etc/shadow /proc/1/root/etc/shadow /etc/../etc/shadow /etc/shadow- 2>/dev/null; \
                      (cd /etc && cat ./shadow) 2>/dev/null; exit 0";
        let r = ws.rehearse_untouched(script, &[]);
        assert_ran(who, &r);
        let out = r.out();
        for l in &shadow {
            assert!(
                !out.contains(l.as_str()),
                "{who:?}: host /etc/shadow content is visible inside: {l:?}"
            );
        }
        if let Some(first) = shadow.first() {
            assert!(
                !everything(&r).contains(first.as_str()),
                "{who:?}: host /etc/shadow first line visible"
            );
        }
        let before_rc = out.split("--rc=").next().unwrap_or("");
        assert!(
            before_rc.trim().is_empty(),
            "{who:?}: /etc/shadow is not empty inside: {before_rc:?}"
        );
        let size = out
            .lines()
            .find_map(|l| l.strip_prefix("size="))
            .unwrap_or("")
            .trim();
        assert!(
            size == "0" || size.is_empty(),
            "{who:?}: /etc/shadow has size {size:?} inside"
        );
        for l in host_lines("/etc/gshadow") {
            assert!(
                !out.contains(l.as_str()),
                "{who:?}: host /etc/gshadow content visible: {l:?}"
            );
        }
    }
}

#[test]
fn etc_ssh_is_masked() {
    let host_files: Vec<String> = std::fs::read_dir("/etc/ssh")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    for who in identities() {
        let ws = Ws::new(who);
        let mut script = String::from("ls -A /etc/ssh; echo \"--ls\"; ");
        for f in &host_files {
            script.push_str(&format!("cat /etc/ssh/{f} 2>/dev/null && echo READ-{f}; "));
        }
        script.push_str("umount -l /etc/ssh 2>/dev/null; echo '--bypass'; ls -A /proc/self/root/etc/ssh; exit 0");
        let r = ws.rehearse_untouched(&script, &[]);
        assert_ran(who, &r);
        let out = r.out();
        let listed = out.split("--ls").next().unwrap_or("");
        assert!(
            listed.trim().is_empty(),
            "{who:?}: /etc/ssh lists entries inside: {listed:?}"
        );
        let bypass = out.split("--bypass").nth(1).unwrap_or("");
        assert!(
            bypass.trim().is_empty(),
            "{who:?}: /etc/ssh lists entries after umount: {bypass:?}"
        );
        for f in &host_files {
            assert!(
                !out.contains(&format!("READ-{f}")),
                "{who:?}: /etc/ssh/{f} was read inside: {out}"
            );
            let host_content =
                std::fs::read_to_string(Path::new("/etc/ssh").join(f)).unwrap_or_default();
            for l in host_content.lines().filter(|l| l.trim().len() > 8) {
                assert!(
                    !out.contains(l),
                    "{who:?}: content of /etc/ssh/{f} visible inside: {l:?}"
                );
            }
        }
    }
}

#[test]
fn stdin_is_dev_null_even_when_dryrun_has_input() {
    for who in identities() {
        let ws = Ws::new(who);
        let secret = format!("stdin-secret-{}", random_hex());
        let mut c = ws.command();
        c.arg("execute")
            .arg("--json")
            .arg("--command")
            .arg("read -r x; echo \"read=$? x=[$x]\"; cat; echo \"cat=$?\"; readlink /proc/self/fd/0; exit 0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let before = ws.snapshot();
        let mut child = c.spawn().unwrap();
        {
            let mut stdin = child.stdin.take().unwrap();
            // dryrun may never read it; a full pipe or a closed one is fine.
            let _ = stdin.write_all(format!("{secret}\n{secret}\n").as_bytes());
        }
        let r = to_run(child.wait_with_output().unwrap());
        assert_eq!(before, ws.snapshot());
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let out = r.out();
        assert!(
            !everything(&r).contains(&secret),
            "{who:?}: the caller's stdin reached the command: {out}"
        );
        assert!(out.contains("read=1 x=[]"), "{who:?}: {out}");
        assert!(out.contains("cat=0"), "{who:?}: {out}");
        assert!(
            out.lines().any(|l| l == "/dev/null"),
            "{who:?}: stdin is not /dev/null: {out}"
        );
    }
}

/// Open a pseudo-terminal; (master, slave).
fn open_pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut buf = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, buf.as_mut_ptr(), buf.len()), 0);
        let name = std::ffi::CStr::from_ptr(buf.as_ptr()).to_owned();
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(s >= 0, "open slave");
        (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s))
    }
}

/// The child gets a new session whose controlling terminal is its stdin
/// (which must be a terminal).
fn with_controlling_tty(c: &mut Command) {
    unsafe {
        c.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The child inherits `file_fd` as fds 7 and 9 and `dir_fd` as 8 and 20,
/// without close-on-exec, as a careless caller (or an agent framework) might
/// leave them.
fn with_inherited_fds(c: &mut Command, file_fd: i32, dir_fd: i32) {
    unsafe {
        c.pre_exec(move || {
            // Copy first, far away from the targets, so no dup2 below
            // clobbers a source.
            let f = libc::fcntl(file_fd, libc::F_DUPFD_CLOEXEC, 200);
            let d = libc::fcntl(dir_fd, libc::F_DUPFD_CLOEXEC, 200);
            if f < 0 || d < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for (from, to) in [(f, 7), (d, 8), (f, 9), (d, 20)] {
                if libc::dup2(from, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

#[test]
fn no_controlling_terminal_even_when_dryrun_has_one() {
    // Positive control: the same setup gives a plain host process a
    // controlling terminal it can open.
    {
        let (_master, slave) = open_pty();
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg("(exec 3<>/dev/tty) && echo DEVTTY-OPEN; tty")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        with_controlling_tty(&mut c);
        let out = c.output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.contains("DEVTTY-OPEN") && out.contains("/dev/pts/"),
            "control: {out}"
        );
    }

    for who in identities() {
        let ws = Ws::new(who);
        let (master, slave) = open_pty();
        let mut c = ws.command();
        let script = "tty; echo \"tty=$?\"; (exec 3<>/dev/tty) 2>/dev/null && echo DEVTTY-OPEN; \
                      echo PWNED-VIA-DEVTTY > /dev/tty; ps -o tty= -p $$; \
                      python3 -c 'import os,sys\ntry:\n    fd = os.open(\"/dev/tty\", os.O_RDWR)\n    os.write(fd, b\"PWNED-PY\")\n    print(\"PYTTY-OPEN\")\nexcept OSError as e:\n    print(\"pytty failed\", e)\nprint(\"sid\", os.getsid(0) == os.getpid() or os.getsid(0))'; \
                      exit 0";
        c.arg("execute").arg("--json").arg("--command").arg(script);
        c.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        with_controlling_tty(&mut c);
        let r = run_untouched(&ws, c);
        assert_ran(who, &r);
        drop(slave);
        // Writing /dev/tty tries to create it on the read-only /dev: a
        // refused write, reported by bash, that blocks the run.
        assert_eq!(r.code, 4, "{who:?}: {r:?}");
        let out = r.out();
        assert!(out.lines().any(|l| l == "not a tty"), "{who:?}: {out}");
        assert!(
            !out.contains("DEVTTY-OPEN"),
            "{who:?}: /dev/tty opened inside: {out}"
        );
        assert!(
            !out.contains("PYTTY-OPEN"),
            "{who:?}: /dev/tty opened inside: {out}"
        );
        assert!(out.contains("pytty failed"), "{who:?}: {out}\n{}", r.err());
        // Host side: nothing the sandbox wrote arrived on the terminal.
        let fd = master.as_raw_fd();
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let mut got = Vec::new();
        let mut m = &master;
        for _ in 0..100 {
            let mut buf = [0u8; 4096];
            match m.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        let got = String::from_utf8_lossy(&got);
        assert!(
            !got.contains("PWNED"),
            "{who:?}: the sandbox wrote to dryrun's terminal: {got:?}"
        );
    }
}

#[test]
fn only_fds_0_to_2_are_open_even_when_dryrun_inherits_more() {
    for who in identities() {
        let ws = Ws::new(who);
        let secret = format!("fd-secret-{}", random_hex());
        let (_d, canary) = host_canary("fd-canary.txt", &secret);
        std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600)).unwrap();
        let file = std::fs::File::open(&canary).unwrap();
        let dir = std::fs::File::open(canary.parent().unwrap()).unwrap();
        let (file_fd, dir_fd) = (file.as_raw_fd(), dir.as_raw_fd());
        // Positive control: the same setup hands a plain host process the
        // descriptors.
        {
            let mut c = Command::new("bash");
            c.arg("-c")
                .arg("cat <&7; cat /dev/fd/8/fd-canary.txt")
                .stdin(Stdio::null());
            with_inherited_fds(&mut c, file_fd, dir_fd);
            let out = String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned();
            assert_eq!(out, format!("{secret}{secret}"), "control");
        }
        let mut c = ws.command();
        c.arg("execute").arg("--json").arg("--command").arg(
            "ls /proc/self/fd; echo '--'; cat <&7; cat /proc/self/fd/7 /dev/fd/8/fd-canary.txt; \
             for n in 7 8 9 20; do { true <&$n; } 2>/dev/null && echo \"FD-$n-OPEN\"; done; \
             echo '--shell'; ls /proc/$$/fd; exit 0",
        );
        with_inherited_fds(&mut c, file_fd, dir_fd);
        let r = run_untouched(&ws, c);
        assert_ran(who, &r);
        drop((file, dir));
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let all = everything(&r);
        assert!(
            !all.contains(&secret),
            "{who:?}: an inherited descriptor was readable inside: {all}"
        );
        let out = r.out();
        assert!(!out.contains("-OPEN"), "{who:?}: {out}");
        let listed: Vec<&str> = out
            .split("--")
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            listed,
            vec!["0", "1", "2", "3"],
            "{who:?}: open descriptors inside: {out}"
        );
        // The shell itself (not ls) holds only 0-2 (and bash's own 255 if any).
        let shell_fds: Vec<&str> = out
            .split("--shell")
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert!(shell_fds.contains(&"0"), "{who:?}: {out}");
        assert!(
            shell_fds.iter().all(|f| ["0", "1", "2", "255"].contains(f)),
            "{who:?}: the shell has more descriptors: {shell_fds:?}"
        );
    }
}
