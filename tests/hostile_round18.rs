//! Hostile agent against this round's changes: the host side's early answer
//! on the sandbox init's done pipe, the image's recursive read-only clone,
//! the CLI's resident helper, and the seccomp program compiled once per
//! process. A root daemon (or root's `execute --local`) and the
//! unprivileged agent uid `dryrun-test`; every attack is attempted for real
//! and checked on the host side.

mod common;
use common::daemon::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Escapees of every kind (double fork, setsid, ignoring TERM/HUP, a new
/// process group, one started as the command ends) must be dead once the
/// early answer is out and must not keep the run's cgroups alive; the run
/// still has its late evidence.
#[test]
fn escapees_do_not_outlive_the_early_answer() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let hex = random_hex();
    let tag = format!("h18esc{hex}");
    let cmd = format!(
        "export T=h18esc; trap '' TERM HUP; \
         (setsid bash -c 'trap \"\" TERM HUP; exec -a ${{T}}{hex}a sleep 300' &) ; \
         (sh -c '(bash -c \"exec -a ${{T}}{hex}b sleep 300\" &) ; exit 0' &) ; \
         nohup bash -c 'exec -a ${{T}}{hex}c sleep 300' >/dev/null 2>&1 & \
         (sleep 0.2; bash -c 'exec -a ${{T}}{hex}d sleep 300') & \
         sleep 0.6; cat /proc/[0-9]*/cmdline | tr '\\0' '\\n' | grep -c \"^${{T}}{hex}[a-d]$\"; \
         echo late > late.txt"
    );
    let root_ws = Ws::new(Who::Root);
    for via_daemon in [true, false] {
        let r = if via_daemon {
            submit_user(&d, &ws, &cmd, &[])
        } else {
            root_ws.rehearse(&cmd, &[])
        };
        escapees_are_gone(&r, &tag);
    }
}

fn escapees_are_gone(r: &Run, tag: &str) {
    assert_eq!(r.exit_code(), Some(0), "{}", r.json);
    assert!(r.change("late.txt").is_some(), "{:?}", r.changes());
    assert_eq!(
        r.out().trim(),
        "4",
        "the escapees did not start: {}",
        r.json
    );
    let killed = r.json["rehearsal"]["leftover_processes_killed"]
        .as_u64()
        .unwrap_or(0);
    assert!(killed >= 3, "leftovers under-reported: {}", r.json);
    wait_until("the escapees to be gone", 30, || {
        processes_with(tag).is_empty()
    });
    let id = r.json["run_id"].as_str().unwrap().to_string();
    wait_until("the run's cgroups to be removed", 30, || {
        run_cgroups(&id).iter().all(|p| !p.exists())
    });
}

/// A host submount (tmpfs, writable, dev/suid allowed) inside an image tree
/// is read-only, nosuid and nodev in the sandbox, like the tree itself; no
/// write, remount (also from a nested user namespace) reaches the host.
#[test]
fn image_trees_and_their_submounts_stay_read_only() {
    if !require_root() {
        return;
    }
    let sub = PathBuf::from(format!("/usr/share/dryrun-h18-{}", random_hex()));
    std::fs::create_dir(&sub).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "rw,suid,dev,mode=1777", "h18sub"])
        .arg(&sub)
        .status()
        .unwrap();
    assert!(st.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _guard = Unmount(sub.clone());
    let s = sub.display().to_string();
    for who in identities() {
        let ws = Ws::new(who);
        let cmd = format!(
            "touch {s}/x; touch /usr/x; touch /etc/x; \
             mount -o remount,rw {s}; mount -o remount,bind,rw /usr; \
             unshare -rm sh -c 'mount -o remount,bind,rw {s}; touch {s}/y; \
               mount -t tmpfs t {s}; touch {s}/z' ; \
             touch {s}/w; grep -E ' (/usr|/etc)[ /]' /proc/self/mountinfo; true"
        );
        let r = ws.rehearse(&cmd, &[]);
        assert!(
            r.out().contains(&s),
            "{who:?}: the submount is not in the sandbox: {}",
            r.json
        );
        for line in r
            .out()
            .lines()
            .filter(|l| l.contains(" /usr") || l.contains(" /etc"))
        {
            let opts = line.split_whitespace().nth(5).unwrap_or("");
            let opts: Vec<&str> = opts.split(',').collect();
            for want in ["ro", "nosuid", "nodev"] {
                assert!(
                    opts.contains(&want),
                    "{who:?}: an image mount is not {want}: {line}"
                );
            }
        }
        for f in ["x", "y", "z", "w"] {
            assert!(!sub.join(f).exists(), "{who:?}: {f} reached the host");
        }
        assert!(!Path::new("/usr/x").exists() && !Path::new("/etc/x").exists());
    }
}

/// The root CLI's resident helper: started with a clean environment and no
/// descriptor of the CLI but its socket; nothing of the CLI's environment
/// is visible from the sandbox; the agent uid cannot read it; it dies with
/// the CLI (even SIGKILLed), and the sandbox with it.
#[test]
fn a_root_clis_resident_is_out_of_reach_and_dies_with_it() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::Root);
    let canary = format!("h18secret{}", random_hex());
    let hex = random_hex();
    let tag = format!("h18res{hex}");
    let mut c = ws.command();
    c.env("H18_ROOT_SECRET", &canary)
        .args(["execute", "--json", "--command"])
        .arg(format!(
            "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' \
             | grep -c 'h18[s]ecret'; ls -l /proc/[0-9]*/fd/ 2>/dev/null; \
             T=h18res; exec bash -c \"exec -a ${{T}}{hex} sleep 300\""
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut cli = c.spawn().unwrap();
    let cli_pid = cli.id();
    wait_until("the command to start", 60, || {
        !processes_with(&tag).is_empty()
    });
    let resident: Vec<u32> = processes_with(&format!("__sandbox-resident {cli_pid}"))
        .iter()
        .filter_map(|l| l.split(':').next()?.parse().ok())
        .filter(|p: &u32| parent_of(*p) == Some(cli_pid))
        .collect();
    assert_eq!(resident.len(), 1, "{resident:?}");
    let res = resident[0];
    let env = std::fs::read(format!("/proc/{res}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&env).contains(&canary),
        "the resident carries the CLI's environment"
    );
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{res}/fd"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        fds.len() <= 4,
        "the resident holds the CLI's descriptors: {fds:?}"
    );
    let peek = as_test_user("cat")
        .arg(format!("/proc/{res}/environ"))
        .output()
        .unwrap();
    assert!(
        !peek.status.success(),
        "the agent read the resident's environ"
    );
    let pk = as_test_user("kill")
        .arg("-STOP")
        .arg(res.to_string())
        .output()
        .unwrap();
    assert!(!pk.status.success(), "the agent could signal the resident");
    // The CLI dies hard: its resident and the sandbox follow.
    let _ = Command::new("kill")
        .args(["-KILL", &cli_pid.to_string()])
        .status();
    let _ = cli.wait();
    wait_until("the resident to die with the CLI", 30, || !alive(res));
    wait_until("the sandbox to die with the CLI", 30, || {
        processes_with(&tag).is_empty()
    });
}

/// The command sees nothing of the CLI's environment or argv, and the
/// CLI's resident is gone once the CLI has answered.
#[test]
fn the_sandbox_sees_nothing_of_the_cli_and_the_resident_ends_with_it() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let canary = format!("h18secret{}", random_hex());
        let mut c = ws.command();
        c.env("H18_ROOT_SECRET", &canary)
            .args([
                "execute",
                "--json",
                "--command",
                "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; done 2>/dev/null \
                 | tr '\\0' '\\n' | grep -c 'h18[s]ecret'; true",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let cli = c.spawn().unwrap();
        let cli_pid = cli.id();
        let r = to_run(cli.wait_with_output().unwrap());
        wait_until("the CLI's resident to end with it", 30, || {
            processes_with(&format!("__sandbox-resident {cli_pid}")).is_empty()
        });
        assert!(r.json.is_object(), "{who:?}: {r:?}");
        assert!(
            !r.out().contains(&canary),
            "{who:?}: the sandbox read the CLI: {}",
            r.out()
        );
        assert_eq!(r.out().trim(), "0", "{who:?}: {}", r.json);
    }
}

/// The seccomp program is compiled once per process: the second, third...
/// rehearsal a daemon's resident forks (and a CLI's) still has it: the
/// blocked calls stay blocked. Both `unshare` calls are refused by the
/// filter itself (EPERM: without it, the sandbox's `max_user_namespaces=0`
/// would answer ENOSPC), no namespace is made, and the probe ran to its end.
#[test]
fn every_run_of_a_process_gets_the_full_filter() {
    if !require_root() {
        return;
    }
    let probe = "unshare -rm sh -c 'mount -t tmpfs t /tmp && echo MOUNTED'; \
                 unshare -U true && echo USERNS; echo PROBED";
    let check = |who: &str, r: &Run| {
        assert_eq!(r.exit_code(), Some(0), "{who}: {}", r.json);
        assert_eq!(r.out(), "PROBED\n", "{who}: {}", r.json);
        assert_eq!(
            r.err()
                .matches("unshare failed: Operation not permitted")
                .count(),
            2,
            "{who}: each unshare must be refused by seccomp's EPERM: {}",
            r.err()
        );
    };
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    for i in 0..3 {
        check(
            &format!("daemon run {i}"),
            &submit_user(&d, &ws, probe, &[]),
        );
    }
    for who in identities() {
        check(&format!("{who:?} CLI"), &Ws::new(who).rehearse(probe, &[]));
    }
}

/// A detached process (setsid, its parent gone) runs into the pids limit
/// while the command's shell lives on; the shell ends, the early answer
/// goes out: the limit hit and the leftover are both in the record.
#[test]
fn a_limit_hit_by_a_detached_process_is_in_the_early_answer() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let bomb = "import os, time\n\
                while True:\n\
                \x20   try:\n\
                \x20       if os.fork() == 0:\n\
                \x20           time.sleep(300); os._exit(0)\n\
                \x20   except OSError:\n\
                \x20       break\n\
                open('/tmp/hit', 'w').close()\n\
                time.sleep(300)\n";
    ws.write(".bomb.py", bomb);
    let cmd = "(setsid python3 .bomb.py &); \
               while [ ! -e /tmp/hit ]; do sleep 0.05; done; echo hit";
    let dir = tempfile::Builder::new()
        .prefix("dryrun-h18-env-")
        .tempdir_in("/tmp")
        .unwrap();
    let env = dir.path().join("envelope.yaml");
    std::fs::write(
        &env,
        format!(
            "command: {}\nworking_dir: {}\nlimits:\n  pids: 32\n  timeout_s: 30\n",
            serde_json::to_string(cmd).unwrap(),
            serde_json::to_string(&ws.dir.display().to_string()).unwrap()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path(), env.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--file"])
        .arg(&env)
        .output()
        .unwrap();
    let r = run_json(out);
    assert_eq!(r.out().trim(), "hit", "{}", r.json);
    assert!(
        r.limits_hit().contains(&"pids".to_string()),
        "the pids limit hit is missing: {}",
        r.json
    );
    let killed = r.json["rehearsal"]["leftover_processes_killed"]
        .as_u64()
        .unwrap_or(0);
    assert!(killed >= 2, "leftovers under-reported: {}", r.json);
    let id = r.json["run_id"].as_str().unwrap().to_string();
    wait_until("the run's cgroups to be removed", 30, || {
        run_cgroups(&id).iter().all(|p| !p.exists())
    });
}
