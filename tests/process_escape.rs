//! Threat: a rehearsed command reaching past its sandbox through processes,
//! privileges and the kernel: signals to host processes, ptrace, terminal
//! injection, setuid files, mounts and namespaces, kernel knobs, file
//! capabilities, host secrets and the syscalls the seccomp filter denies.
//! Every attack runs inside a real rehearsal; the assertions look at the host
//! or at what the kernel reports.

mod common;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EPERM: i64 = 1;
const ENOSYS: i64 = 38;

/// A shell fragment running a Python script (fed through a here-document,
/// so the script needs no shell quoting).
fn py(script: &str) -> String {
    format!("python3 - <<'DRYRUN_PY_EOF'\n{script}\nDRYRUN_PY_EOF\n")
}

/// The value of the last `key=value` line of `out`.
fn kv(out: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    out.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
}

/// `key=RC ERRNO` lines printed by the Python probes: (rc, errno).
fn rc_errno(r: &Run, key: &str) -> (i64, i64) {
    let v = kv(r.out(), key).unwrap_or_else(|| {
        panic!(
            "no {key}= line in stdout {:?}, stderr {:?}",
            r.out(),
            r.err()
        )
    });
    let mut it = v
        .split_whitespace()
        .map(|x| x.parse::<i64>().unwrap_or_else(|_| panic!("{key}={v}")));
    (it.next().unwrap(), it.next().unwrap())
}

/// Shell exit status printed as `key=N`.
fn shell_rc(r: &Run, key: &str) -> i64 {
    kv(r.out(), key)
        .unwrap_or_else(|| {
            panic!(
                "no {key}= line in stdout {:?}, stderr {:?}",
                r.out(),
                r.err()
            )
        })
        .parse()
        .unwrap()
}

/// Prelude of every ctypes probe: raw syscalls through libc's syscall(2).
const PY_PRELUDE: &str = r#"import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(*args):
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    if r == 0 and args[0] in (56,):
        os._exit(0)  # a child of a clone that should never have happened
    return r, e
def report(key, r, e):
    print("%s=%d %d" % (key, r, e), flush=True)
"#;

/// A long-lived host process, killed and reaped when dropped.
struct Canary(Child);
impl Drop for Canary {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_canary(who: Who) -> Canary {
    let mut c = if who == Who::User && is_root() {
        // Owned by the same host user that runs dryrun: only the sandbox
        // stands between the command and this process.
        let (u, g) = test_user();
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={u}"))
            .arg(format!("--regid={g}"))
            .arg("--clear-groups")
            .arg("--")
            .arg("sleep");
        c
    } else {
        Command::new("sleep")
    };
    c.arg("1000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Canary(c.spawn().expect("spawn the canary"))
}

#[test]
fn signals_cannot_reach_a_host_process() {
    for who in identities() {
        let mut canary = spawn_canary(who);
        let pid = canary.0.id();
        let ws = Ws::new(who);
        let script = format!(
            "kill -9 {pid}; echo kill=$?; kill -TERM {pid}; kill -9 -1; echo killall=$?; {}exit 0",
            py(&format!(
                "import os, signal\nfor s in (signal.SIGKILL, signal.SIGSTOP):\n    try:\n        os.kill({pid}, s)\n        print('pykill=sent', flush=True)\n    except OSError as e:\n        print('pykill=%d' % e.errno, flush=True)\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError as e:\n    pass\n"
            ))
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_ne!(r.json, Value::Null, "{who:?}: no run record: {r:?}");
        // The host view: the canary is still there and still running.
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "{who:?}: the canary {pid} is gone: {r:?}"
        );
        assert!(
            canary.0.try_wait().unwrap().is_none(),
            "{who:?}: the canary {pid} exited: {r:?}"
        );
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = state
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        assert!(
            state == "S" || state == "R",
            "{who:?}: canary state {state} (stopped?)"
        );
        // Inside, the host pid does not exist at all.
        assert_ne!(shell_rc(&r, "kill"), 0, "{who:?}: {}", r.out());
        assert!(!r.out().contains("pykill=sent"), "{who:?}: {}", r.out());
        drop(canary);
    }
}

#[test]
fn ptrace_is_denied_and_the_command_has_no_privileges() {
    for who in identities() {
        let ws = Ws::new(who);
        let probe = format!(
            "{PY_PRELUDE}\nimport sys\ntarget = int(sys.argv[1]) if len(sys.argv) > 1 else 1\n\
             report('traceme', *sc(101, 0, 0, 0, 0))\n\
             report('attach', *sc(101, 16, target, 0, 0))\n\
             report('seize', *sc(101, 0x4206, target, 0, 0))\n\
             report('attach1', *sc(101, 16, 1, 0, 0))\n\
             report('vmread', *sc(310, target, 0, 1, 0, 1, 0))\n"
        );
        let script = format!(
            "sleep 30 & T=$!\n{}\ncat /proc/self/status\nkill %1; exit 0",
            py(&probe).replace("python3 -", "python3 - $T")
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_probe_ran(&r, who);
        for key in ["traceme", "attach", "seize", "attach1", "vmread"] {
            assert_eq!(
                rc_errno(&r, key),
                (-1, EPERM),
                "{who:?}: {key}: {}",
                r.out()
            );
        }
        let status = r.out();
        for (field, want) in [
            ("CapInh", "0000000000000000"),
            ("CapPrm", "0000000000000000"),
            ("CapEff", "0000000000000000"),
            ("CapBnd", "0000000000000000"),
            ("CapAmb", "0000000000000000"),
            ("NoNewPrivs", "1"),
            ("Seccomp", "2"),
        ] {
            let line = status
                .lines()
                .find(|l| l.starts_with(&format!("{field}:")))
                .unwrap_or_else(|| panic!("{who:?}: no {field} in {status}"));
            assert_eq!(
                line.split_whitespace().nth(1),
                Some(want),
                "{who:?}: {line}"
            );
        }
    }
}

#[test]
fn terminal_injection_ioctls_are_denied_by_seccomp() {
    for who in identities() {
        let ws = Ws::new(who);
        // Without the filter these would fail with ENOTTY (stdin is /dev/null,
        // stdout/stderr are pipes); EPERM proves the filter caught them.
        let probe = format!(
            "{PY_PRELUDE}\nimport fcntl\n\
             c = ctypes.c_char(b'x')\n\
             report('sti0', *sc(16, 0, 0x5412, ctypes.addressof(c)))\n\
             report('sti1', *sc(16, 1, 0x5412, ctypes.addressof(c)))\n\
             report('sti_hi', *sc(16, 0, (1 << 32) | 0x5412, ctypes.addressof(c)))\n\
             l = ctypes.c_char(b'\\x0b')\n\
             report('linux0', *sc(16, 0, 0x541C, ctypes.addressof(l)))\n\
             report('linux2', *sc(16, 2, 0x541C, ctypes.addressof(l)))\n\
             try:\n    fcntl.ioctl(0, 0x5412, b'x')\n    print('fcntl=0 0')\nexcept OSError as e:\n    print('fcntl=-1 %d' % e.errno)\n\
             report('tcgets', *sc(16, 0, 0x5401, ctypes.addressof(ctypes.create_string_buffer(64))))\n"
        );
        let r = ws.rehearse_untouched(&format!("{}exit 0", py(&probe)), &[]);
        assert_probe_ran(&r, who);
        for key in ["sti0", "sti1", "sti_hi", "linux0", "linux2", "fcntl"] {
            assert_eq!(
                rc_errno(&r, key),
                (-1, EPERM),
                "{who:?}: {key}: {}",
                r.out()
            );
        }
        // Control: other ioctls still reach the kernel (ENOTTY on /dev/null).
        assert_eq!(rc_errno(&r, "tcgets"), (-1, 25), "{who:?}: {}", r.out());
    }
}

/// The first line of /proc/self/uid_map (or gid_map) printed inside.
fn id_map_lines(out: &str, tag: &str) -> Vec<(u64, u64, u64)> {
    out.lines()
        .filter_map(|l| l.strip_prefix(tag))
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (v[0], v[1], v[2])
        })
        .collect()
}

#[test]
fn setuid_root_files_and_su_give_no_host_root() {
    for who in identities() {
        let ws = Ws::new(who);
        let suid = ws.dir.join("suid-id");
        std::fs::copy("/usr/bin/id", &suid).unwrap();
        ws.chown_all();
        if is_root() {
            // A setuid-root copy, owned by host root, inside the workspace.
            std::os::unix::fs::chown(&suid, Some(0), Some(0)).unwrap();
            std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
            assert_eq!(std::fs::metadata(&suid).unwrap().mode() & 0o7777, 0o4755);
        }
        let script = "echo uid=$(id -u); echo euid_suid=$(./suid-id -u); echo ruid_suid=$(./suid-id -ru); \
                      sed 's/^/UIDMAP /' /proc/self/uid_map; sed 's/^/GIDMAP /' /proc/self/gid_map; \
                      echo made > made-inside.txt; \
                      su -c 'id -u' root </dev/null; echo su=$?; \
                      sudo -n id -u </dev/null; echo sudo=$?; exit 0";
        let r = ws.rehearse_untouched(script, &["--expect-write", "made-inside.txt"]);
        // (su tries syslog's /dev/log, which the verdict may flag as network
        // evidence; the command itself must have run to its end.)
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let uid = kv(r.out(), "uid").unwrap();
        let euid_suid = kv(r.out(), "euid_suid").unwrap();
        // The setuid bit changes nothing: same id as the plain command.
        assert_eq!(
            euid_suid,
            uid,
            "{who:?}: setuid copy ran with another euid: {}",
            r.out()
        );
        assert_ne!(shell_rc(&r, "su"), 0, "{who:?}: {}", r.out());
        assert_ne!(shell_rc(&r, "sudo"), 0, "{who:?}: {}", r.out());
        // Never host uid 0: every id mapped into the sandbox is a host id
        // other than 0 (kernel-visible, from /proc/self/uid_map).
        let uid_map = id_map_lines(r.out(), "UIDMAP ");
        let gid_map = id_map_lines(r.out(), "GIDMAP ");
        assert!(
            !uid_map.is_empty() && !gid_map.is_empty(),
            "{who:?}: {}",
            r.out()
        );
        for (inside, host, count) in uid_map.iter().chain(gid_map.iter()) {
            assert!(
                *host > 0,
                "{who:?}: sandbox id {inside} (+{count}) maps to host 0: {}",
                r.out()
            );
        }
        let ids = r.json["rehearsal"]["sandbox"]["ids"].as_str().unwrap_or("");
        match who {
            Who::User => {
                let (u, _) = test_user();
                assert_ne!(uid, "0", "{who:?}: {}", r.out());
                assert_eq!(uid, u.to_string(), "{who:?}");
                assert_eq!(uid_map, vec![(u as u64, u as u64, 1)], "{who:?}");
            }
            Who::Root => {
                assert!(ids.starts_with("shifted"), "{who:?}: sandbox.ids = {ids:?}");
                for (_, host, _) in uid_map.iter().chain(gid_map.iter()) {
                    assert!(*host >= 1_000_000, "{who:?}: {:?}", uid_map);
                }
                let c = r
                    .change("made-inside.txt")
                    .unwrap_or_else(|| panic!("{who:?}: {:?}", r.changes()));
                assert_eq!(c["kind"], "created", "{who:?}: {c}");
            }
        }
        assert!(
            r.change("made-inside.txt").is_some(),
            "{who:?}: {:?}",
            r.changes()
        );
        let reasons = r.json["verdict"]["reasons"].to_string();
        assert!(
            !reasons.contains("intent.expected_writes"),
            "{who:?}: {reasons}"
        );
    }
}

#[test]
fn the_sandboxed_process_is_never_host_root() {
    // Seen from the host, through /proc/<pid>/status of the running command.
    for who in identities() {
        let ws = Ws::new(who);
        let marker = format!("dryrun-idprobe-{}", random_hex());
        let mut c = ws.command();
        c.arg("execute")
            .arg("--json")
            .arg("--command")
            .arg(format!("exec -a {marker} sleep 60"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = c.spawn().unwrap();
        let found = wait_for(Duration::from_secs(10), || {
            procs_with_argv0(&marker).into_iter().next()
        });
        let status = found.map(|pid| {
            (
                pid,
                std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default(),
            )
        });
        for pid in procs_with_argv0(&marker) {
            let _ = kill9(pid);
        }
        let out = child.wait_with_output().unwrap();
        let (pid, status) = status.unwrap_or_else(|| {
            panic!(
                "{who:?}: the command never appeared: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        let field = |name: &str| -> Vec<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .unwrap_or_else(|| panic!("{who:?}: no {name} in /proc/{pid}/status"))
                .split_whitespace()
                .map(|v| {
                    u64::from_str_radix(v, if name.starts_with("Cap") { 16 } else { 10 }).unwrap()
                })
                .collect()
        };
        for f in ["Uid", "Gid"] {
            for id in field(f) {
                match who {
                    Who::Root => assert!(id >= 1_000_000, "{who:?}: host {f} {id}"),
                    Who::User => {
                        let want = if f == "Uid" {
                            test_user().0
                        } else {
                            test_user().1
                        };
                        assert_eq!(id, want as u64, "{who:?}: host {f}")
                    }
                }
            }
        }
        for f in ["CapEff", "CapPrm", "CapBnd"] {
            assert_eq!(field(f), vec![0], "{who:?}: host view {f}");
        }
    }
}

#[test]
fn chmod_setuid_in_a_rehearsal_is_evidence_and_blocks() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("tool.sh", "#!/bin/sh\necho hi\n");
        let r = ws.rehearse_untouched(
            "chmod 4755 tool.sh && cp tool.sh copy.sh && chmod g+s copy.sh",
            &["--expect-write", "*.sh"],
        );
        let c = r
            .change("tool.sh")
            .unwrap_or_else(|| panic!("{who:?}: {:?}", r.changes()));
        assert_eq!(c["setid"], true, "{who:?}: {c}");
        assert_eq!(
            c["mode_after"].as_u64().map(|m| m & 0o7777),
            Some(0o4755),
            "{who:?}: {c}"
        );
        let c2 = r
            .change("copy.sh")
            .unwrap_or_else(|| panic!("{who:?}: {:?}", r.changes()));
        assert_eq!(c2["setid"], true, "{who:?}: {c2}");
        assert_eq!(r.decision(), "blocked", "{who:?}: {:?}", r.json["verdict"]);
        assert_eq!(r.code, 4, "{who:?}");
        let reasons = r.json["verdict"]["reasons"].to_string();
        assert!(reasons.contains("[evidence.setid]"), "{who:?}: {reasons}");
        // The real file kept its mode.
        assert_eq!(
            std::fs::metadata(ws.dir.join("tool.sh")).unwrap().mode() & 0o7000,
            0
        );
    }
}

#[test]
fn mounts_and_new_namespaces_fail() {
    for who in identities() {
        let ws = Ws::new(who);
        let probe = format!(
            "{PY_PRELUDE}\n\
             f = getattr(os, 'unshare', None)\n\
             if f is not None:\n    try:\n        f(os.CLONE_NEWUSER)\n        print('osunshare=0 0')\n    except OSError as e:\n        print('osunshare=-1 %d' % e.errno)\n\
             else:\n    report('osunshare', *sc(272, 0x10000000))\n\
             report('unshare_user', *sc(272, 0x10000000))\n\
             report('unshare_mnt', *sc(272, 0x00020000))\n\
             report('unshare_net', *sc(272, 0x40000000))\n\
             report('setns', *sc(308, 0, 0))\n"
        );
        let script = format!(
            "mkdir -p /tmp/x; mount -t tmpfs x /tmp/x; echo mount=$?; \
             unshare -U true; echo unshare_U=$?; unshare -m true; echo unshare_m=$?; \
             unshare -Ur true; echo unshare_Ur=$?; unshare -p -f true; echo unshare_p=$?; \
             mount -o remount,rw /; echo remount=$?; touch /dryrun-root-rw; echo rootwrite=$?; \
             mount --bind /tmp /mnt; echo bind=$?; \
             {}grep -c ' /tmp/x ' /proc/self/mounts; exit 0",
            py(&probe)
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        // `touch /dryrun-root-rw` is refused with EROFS, which the command
        // reports: that refused write is evidence and blocks the run.
        assert_eq!(r.code, 4, "{who:?}: {r:?}");
        assert!(
            r.blocked().iter().any(|b| b["kind"] == "write"
                && b["detail"].as_str().unwrap().contains("/dryrun-root-rw")),
            "{who:?}: {:?}",
            r.blocked()
        );
        for key in [
            "mount",
            "unshare_U",
            "unshare_m",
            "unshare_Ur",
            "unshare_p",
            "remount",
            "rootwrite",
            "bind",
        ] {
            assert_ne!(
                shell_rc(&r, key),
                0,
                "{who:?}: {key} succeeded: {}",
                r.out()
            );
        }
        for key in [
            "osunshare",
            "unshare_user",
            "unshare_mnt",
            "unshare_net",
            "setns",
        ] {
            assert_eq!(
                rc_errno(&r, key),
                (-1, EPERM),
                "{who:?}: {key}: {}",
                r.out()
            );
        }
        assert!(
            r.out().trim_end().ends_with('0'),
            "{who:?}: tmpfs mounted at /tmp/x: {}",
            r.out()
        );
        assert!(!Path::new("/dryrun-root-rw").exists());
        assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());
    }
}

#[test]
fn kernel_knobs_under_proc_sys_cannot_be_written() {
    for who in identities() {
        let ws = Ws::new(who);
        let knobs = [
            "/proc/sys/kernel/sysrq",
            "/proc/sys/vm/swappiness",
            "/proc/sys/kernel/core_pattern",
        ];
        let before: Vec<Option<String>> = knobs
            .iter()
            .map(|k| std::fs::read_to_string(k).ok())
            .collect();
        // Write a value that differs from the host's, so a successful write
        // would be visible.
        let swappiness_new = match before[1].as_deref().map(str::trim) {
            Some("7") => "8",
            _ => "7",
        };
        let script = format!(
            "echo 1 > /proc/sys/kernel/sysrq; echo sysrq=$?; \
             echo 3 > /proc/sys/vm/drop_caches; echo drop=$?; \
             echo {swappiness_new} > /proc/sys/vm/swappiness; echo swap=$?; \
             echo '|/tmp/dryrun-pwn' > /proc/sys/kernel/core_pattern; echo core=$?; \
             exit 0"
        );
        let r = ws.rehearse_untouched(&script, &[]);
        let after: Vec<Option<String>> = knobs
            .iter()
            .map(|k| std::fs::read_to_string(k).ok())
            .collect();
        // Restore anything a broken sandbox changed before failing.
        for ((k, b), a) in knobs.iter().zip(&before).zip(&after) {
            if let (Some(b), true) = (b, b.as_ref() != a.as_ref()) {
                let _ = std::fs::write(k, b);
            }
        }
        assert_eq!(before, after, "{who:?}: a host kernel knob changed: {r:?}");
        for key in ["sysrq", "drop", "swap", "core"] {
            assert_ne!(
                shell_rc(&r, key),
                0,
                "{who:?}: {key} write succeeded: {}",
                r.out()
            );
        }
    }
}

#[test]
fn file_capabilities_cannot_be_set() {
    for who in identities() {
        let ws = Ws::new(who);
        let target = ws.write("tool", "#!/bin/sh\n");
        // VFS_CAP_REVISION_2 | EFFECTIVE, permitted = CAP_SETUID (bit 7).
        let probe = "import os, struct\n\
                     blob = struct.pack('<IIIII', 0x02000001, 1 << 7, 0, 0, 0)\n\
                     for name in ('tool', 'new-tool'):\n    \
                         open(name, 'a').close()\n    \
                         try:\n        os.setxattr(name, 'security.capability', blob)\n        print('setcap_%s=0 0' % name.replace('-', '_'))\n    \
                         except OSError as e:\n        print('setcap_%s=-1 %d' % (name.replace('-', '_'), e.errno))\n\
                     print('caps=' + repr(os.listxattr('tool')))\n";
        let r = ws.rehearse_untouched(
            &format!(
                "{}setcap cap_setuid+ep tool; echo setcap_bin=$?; exit 0",
                py(probe)
            ),
            &["--expect-write", "**"],
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        // `setcap` is an ADMIN command for the classifier: the run needs a
        // reviewer whatever the sandbox made of it.
        assert_eq!(r.code, 3, "{who:?}: {:?}", r.reasons());
        for key in ["setcap_tool", "setcap_new_tool"] {
            let (rc, errno) = rc_errno(&r, key);
            assert_eq!(rc, -1, "{who:?}: {key}: {}", r.out());
            assert!(errno == EPERM || errno == 13, "{who:?}: {key}: {}", r.out());
        }
        assert_ne!(shell_rc(&r, "setcap_bin"), 0, "{who:?}: {}", r.out());
        assert!(
            !r.out().contains("security.capability"),
            "{who:?}: {}",
            r.out()
        );
        for c in r.changes() {
            assert!(
                !c["xattrs_changed"]
                    .to_string()
                    .contains("security.capability"),
                "{who:?}: {c}"
            );
        }
        assert!(
            xattr_names(&target)
                .iter()
                .all(|n| n != "security.capability")
        );
    }
}

fn xattr_names(p: &Path) -> Vec<String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import os,sys; print('\\n'.join(os.listxattr(sys.argv[1])))")
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn host_shadow_files_are_masked() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(
            "cat /etc/shadow; echo shadow=$?; cat /etc/gshadow; echo gshadow=$?; \
             wc -c < /etc/shadow; python3 -c \"print(open('/etc/shadow').read())\"; exit 0",
            &[],
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        // The classifier, independently, flags reading a credential store.
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[credential.file]")),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert_ne!(r.decision(), "promote", "{who:?}");
        // Whatever the sandbox shows, no host entry leaks.
        for host_file in ["/etc/shadow", "/etc/gshadow"] {
            if let Ok(text) = std::fs::read_to_string(host_file) {
                for line in text.lines().filter(|l| l.contains(':')) {
                    let name = line.split(':').next().unwrap();
                    assert!(
                        !r.out().contains(&format!("{name}:")),
                        "{who:?}: {host_file} entry for {name} leaked: {}",
                        r.out()
                    );
                }
            }
        }
        let shadow_empty = r.out().lines().any(|l| l.trim() == "0");
        assert!(
            shell_rc(&r, "shadow") != 0 || shadow_empty,
            "{who:?}: {}",
            r.out()
        );
        let stripped = r.json["rehearsal"]["stripped"].to_string();
        assert!(
            stripped.contains("masked:/etc/shadow"),
            "{who:?}: {stripped}"
        );
    }
}

#[test]
fn the_seccomp_deny_list_answers_eperm() {
    const DENIED: &[(&str, i64)] = &[
        ("io_uring_setup", 425),
        ("bpf", 321),
        ("keyctl", 250),
        ("add_key", 248),
        ("perf_event_open", 298),
        ("userfaultfd", 323),
        ("mount", 165),
        ("pivot_root", 155),
        ("kexec_load", 246),
        ("init_module", 175),
        ("personality", 135),
        ("umount2", 166),
        ("ptrace", 101),
        ("open_tree", 428),
        ("fsopen", 430),
        ("process_vm_writev", 311),
        ("unshare", 272),
        ("setns", 308),
        ("reboot", 169),
        ("swapon", 167),
    ];
    for who in identities() {
        let ws = Ws::new(who);
        let mut probe = format!("{PY_PRELUDE}\n");
        for (name, nr) in DENIED {
            // personality(0xffffffff) only queries; EPERM proves the filter.
            let arg0 = if *name == "personality" {
                0xffff_ffffu32 as i64
            } else {
                0
            };
            probe.push_str(&format!(
                "report('{name}', *sc({nr}, {arg0}, 0, 0, 0, 0))\n"
            ));
        }
        probe.push_str("report('getpid_control', *sc(39))\n");
        let script = format!(
            "{}python3 -c 'import ctypes; l = ctypes.CDLL(None); l.syscall.restype = ctypes.c_long; \
             print(\"x32=%d\" % l.syscall(ctypes.c_long(0x40000000 | 39)), flush=True)'; echo x32rc=$?; exit 0",
            py(&probe)
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_probe_ran(&r, who);
        for (name, _) in DENIED {
            assert_eq!(
                rc_errno(&r, name),
                (-1, EPERM),
                "{who:?}: {name}: {}",
                r.out()
            );
        }
        let (pid, _) = rc_errno(&r, "getpid_control");
        assert!(pid > 0, "{who:?}: {}", r.out());
        // The x32 getpid must not succeed: either the process died of SIGSYS
        // (128 + 31) or the call returned -1.
        let x32rc = shell_rc(&r, "x32rc");
        match kv(r.out(), "x32") {
            Some(v) => assert_eq!(v, "-1", "{who:?}: x32 getpid returned {v}: {}", r.out()),
            None => assert_eq!(x32rc, 128 + 31, "{who:?}: {}", r.out()),
        }
    }
}

#[test]
fn clone_with_namespace_flags_and_clone3_are_refused() {
    for who in identities() {
        let ws = Ws::new(who);
        let sigchld = 17;
        let probe = format!(
            "{PY_PRELUDE}\n\
             report('clone_user', *sc(56, 0x10000000 | {sigchld}, 0, 0, 0, 0))\n\
             report('clone_mnt', *sc(56, 0x00020000 | {sigchld}, 0, 0, 0, 0))\n\
             report('clone_pid', *sc(56, 0x20000000 | {sigchld}, 0, 0, 0, 0))\n\
             report('clone_net', *sc(56, 0x40000000 | {sigchld}, 0, 0, 0, 0))\n\
             report('clone_time', *sc(56, 0x80 | {sigchld}, 0, 0, 0, 0))\n\
             args = (ctypes.c_uint64 * 11)()\n\
             args[0] = 0x10000000\n\
             args[4] = {sigchld}\n\
             report('clone3', *sc(435, ctypes.addressof(args), 88))\n\
             report('clone3_null', *sc(435, 0, 0))\n\
             pid = os.fork()\n\
             if pid == 0:\n    os._exit(7)\n\
             print('fork=%d' % (os.waitpid(pid, 0)[1] >> 8))\n"
        );
        let r = ws.rehearse_untouched(&format!("{}exit 0", py(&probe)), &[]);
        assert_probe_ran(&r, who);
        for key in [
            "clone_user",
            "clone_mnt",
            "clone_pid",
            "clone_net",
            "clone_time",
        ] {
            assert_eq!(
                rc_errno(&r, key),
                (-1, EPERM),
                "{who:?}: {key}: {}",
                r.out()
            );
        }
        for key in ["clone3", "clone3_null"] {
            assert_eq!(
                rc_errno(&r, key),
                (-1, ENOSYS),
                "{who:?}: {key}: {}",
                r.out()
            );
        }
        // Control: an ordinary fork still works.
        assert_eq!(
            kv(r.out(), "fork").as_deref(),
            Some("7"),
            "{who:?}: {}",
            r.out()
        );
    }
}

// ---------------------------------------------------------------- helpers

/// Host pids whose argv[0] is exactly `argv0`.
fn procs_with_argv0(argv0: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && cmd.split(|b| *b == 0).next() == Some(argv0.as_bytes())
        {
            out.push(pid);
        }
    }
    out
}

fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill9(pid: i32) -> bool {
    Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success())
}
