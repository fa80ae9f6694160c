//! Threat: writing outside the workspace. Every attack runs inside a real
//! rehearsal; the assertions look at the host.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;

/// A host directory the sandbox can see (the image binds /opt read-only) and
/// that is world-writable on the host, so only the sandbox stops the write.
fn visible_canary_dir() -> tempfile::TempDir {
    std::fs::create_dir_all("/opt").unwrap();
    let d = tempfile::Builder::new()
        .prefix("dryrun-canary-")
        .tempdir_in("/opt")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(d.path().join("canary"), "original").unwrap();
    std::fs::set_permissions(
        d.path().join("canary"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    d
}

#[test]
fn writes_outside_the_workspace_fail_and_leave_the_host_alone() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let canary = visible_canary_dir();
        let c = canary.path().display().to_string();
        let ws = Ws::new(who);
        ws.write("keep.txt", "keep");
        let script = format!(
            "echo pwned > {c}/canary; echo pwned > {c}/new; touch {c}/touched; rm -f {c}/canary; \
             mkdir {c}/d; echo x > /etc/dryrun-pwned; echo x > /usr/dryrun-pwned; \
             echo x >> /etc/passwd; ls {c}; exit 0"
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        // The refused writes are evidence: the command reported them (EROFS).
        assert_eq!(r.code, 4, "{who:?}: {r:?}");
        let writes: Vec<String> = r
            .blocked()
            .iter()
            .filter(|b| b["kind"] == "write")
            .map(|b| b["detail"].as_str().unwrap().to_string())
            .collect();
        assert!(
            writes.iter().any(|d| d.contains("/etc/dryrun-pwned")),
            "{who:?}: {writes:?}"
        );
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[evidence.denied_write]")),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert_eq!(
            std::fs::read_to_string(canary.path().join("canary")).unwrap(),
            "original",
            "{who:?}"
        );
        for name in ["new", "touched", "d"] {
            assert!(
                !canary.path().join(name).exists(),
                "{who:?}: {name} was created on the host"
            );
        }
        assert!(!std::path::Path::new("/etc/dryrun-pwned").exists());
        assert!(!std::path::Path::new("/usr/dryrun-pwned").exists());
        assert!(
            r.err().contains("Read-only file system") || r.err().contains("Permission denied"),
            "{who:?}: {}",
            r.err()
        );
        assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());
    }
}

#[test]
fn symlink_in_the_workspace_cannot_redirect_writes_to_the_host() {
    if !require_root() {
        return;
    }
    for who in identities() {
        let canary = visible_canary_dir();
        let ws = Ws::new(who);
        std::os::unix::fs::symlink(canary.path(), ws.dir.join("out")).unwrap();
        std::os::unix::fs::symlink(canary.path().join("canary"), ws.dir.join("canary-link"))
            .unwrap();
        ws.chown_all();
        let r = ws.rehearse_untouched(
            "echo pwned > out/canary; echo pwned > out/new; echo pwned > canary-link; ln -sf /opt x; echo y > x/z; exit 0",
            &["--expect-write", "**"],
        );
        assert_eq!(
            std::fs::read_to_string(canary.path().join("canary")).unwrap(),
            "original",
            "{who:?}"
        );
        assert!(!canary.path().join("new").exists(), "{who:?}");
        assert!(!std::path::Path::new("/opt/z").exists());
        // The new symlink is evidence, recorded as a link and flagged.
        let x = r
            .change("x")
            .unwrap_or_else(|| panic!("{who:?}: {:?}", r.changes()));
        assert_eq!(x["file_type"], "symlink");
        assert_eq!(x["symlink_target"], "/opt");
        assert_eq!(x["symlink_escapes"], true);
        assert_eq!(r.decision(), "blocked");
    }
}

#[test]
fn the_workspace_is_mounted_at_its_own_absolute_path() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("a.txt", "abc");
        let dir = ws.dir.display().to_string();
        let r = ws.rehearse_untouched(
            &format!("pwd; cat {dir}/a.txt; echo more >> {dir}/a.txt"),
            &["--expect-write", "a.txt"],
        );
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        assert_eq!(r.out(), format!("{dir}\nabc"));
        assert_eq!(r.change("a.txt").unwrap()["kind"], "modified");
        assert_eq!(r.decision(), "promote");
    }
}

/// `/tmp` is the host's, seen through a throwaway layer: the command
/// reads what the host's permissions let its user read there (a
/// world-readable file, not root's private one), writes land in the layer
/// (listed in `outside_writes`, never on the host), and `HOME` is writable.
#[test]
fn tmp_is_the_hosts_read_through_a_throwaway_layer() {
    for who in identities() {
        let tag = random_hex();
        let (d, canary) = host_canary("shared.txt", &format!("host tmp {tag}"));
        let private = d.path().join("private.txt");
        std::fs::write(&private, format!("private {tag}")).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(
            &format!(
                "cat {}; echo; cat {} 2>&1; echo; echo hi > {}; cat {}; echo hi > /tmp/x-{tag} && cat /tmp/x-{tag}; test -d \"$HOME\" && test -w \"$HOME\" && echo home-ok; exit 0",
                canary.display(),
                private.display(),
                canary.display(),
                canary.display()
            ),
            &[],
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let out = r.out();
        assert!(out.contains(&format!("host tmp {tag}")), "{who:?}: {out}");
        // Root's private file: the root engine's own run is root's; the
        // test user's run may not read it, as on the host.
        assert_eq!(
            out.contains(&format!("private {tag}")),
            who == Who::Root,
            "{who:?}: {out}"
        );
        assert!(out.contains("hi"), "{who:?}: {out}");
        // HOME is the caller's: the harness gives each run its workspace's
        // scratch directory, which root can write through the /tmp layer;
        // the test user's is root's private temporary directory, which it
        // could not write live either.
        assert_eq!(out.contains("home-ok"), who == Who::Root, "{who:?}: {out}");
        assert!(r.changes().is_empty());
        assert_eq!(
            std::fs::read_to_string(&canary).unwrap(),
            format!("host tmp {tag}"),
            "{who:?}: the host's /tmp was written"
        );
        assert!(!std::path::Path::new(&format!("/tmp/x-{tag}")).exists());
        let rows = r.json["rehearsal"]["outside_writes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            rows.iter()
                .any(|w| w["path"] == "/tmp" && w["cache"] == true),
            "{who:?}: {rows:?}"
        );
    }
}

/// The common deployment: dryrun runs as root, the workspace belongs to an
/// ordinary user. The command runs as that user's numbers (shifted on the
/// host), can edit the user's files through the idmapped overlay, and its
/// network attempts are still observed.
#[test]
fn root_rehearses_a_workspace_owned_by_an_ordinary_user() {
    if !require_root() {
        return;
    }
    let (uid, gid) = test_user();
    let ws = Ws::new(Who::Root);
    ws.write("notes.txt", "one\n");
    let st = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(&ws.dir)
        .status()
        .unwrap();
    assert!(st.success());
    let r = ws.rehearse_untouched(
        "id -u; id -g; echo two >> notes.txt; echo new > new.txt; stat -c %u:%g new.txt; \
         python3 -c 'import socket; socket.socket().connect_ex((\"192.0.2.1\", 443))'; true",
        &["--expect-write", "*.txt"],
    );
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    let lines: Vec<&str> = r.out().lines().collect();
    assert_eq!(lines[0], uid.to_string(), "{}", r.out());
    assert_eq!(lines[1], gid.to_string(), "{}", r.out());
    assert_eq!(lines[2], format!("{uid}:{gid}"), "{}", r.out());
    assert_eq!(r.change("notes.txt").unwrap()["kind"], "modified");
    assert_eq!(r.change("new.txt").unwrap()["kind"], "created");
    let ids = r.json["rehearsal"]["sandbox"]["ids"].as_str().unwrap();
    assert!(ids.starts_with("shifted"), "{ids}");
    assert!(
        r.blocked()
            .iter()
            .any(|b| b["detail"].as_str().unwrap().contains("192.0.2.1:443")),
        "{:?}",
        r.blocked()
    );
    assert_eq!(r.decision(), "blocked");
}

/// The record's Landlock status is what `restrict_self` returned in the
/// command's own process (carried to the sandbox's init in the hand-over),
/// not what the kernel probe suggests: fully enforced, at the ABI CI pins.
#[test]
fn the_record_shows_landlock_fully_enforced_at_the_pinned_abi() {
    let expected = expected_landlock_abi();
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse("echo hi > out.txt; echo again >> out.txt", &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let sandbox = &r.json["rehearsal"]["sandbox"];
        assert_eq!(sandbox["landlock_abi"], expected, "{who:?}: {sandbox}");
        let status = sandbox["landlock_status"].as_str().unwrap();
        assert!(
            status.contains("fully enforced") && status.contains(&format!("ABI {expected} ")),
            "{who:?}: {status}"
        );
    }
}

/// What only Landlock stops, stopped: the command writing its own
/// `/proc/PID/comm` (procfs is mounted read-write in the sandbox, the file
/// is the process's own, seccomp allows `open` and `write`) and binding a
/// TCP port on the sandbox's own loopback (the network namespace has it,
/// seccomp allows `bind`). Landlock allows writes only beneath the
/// workspace and `/tmp` and, from ABI 4, no TCP bind: both are refused with
/// its EACCES. The control runs the same probe in the same sandbox with
/// Landlock absent (the kernel's Landlock calls made to fail as on a kernel
/// without it, degraded mode allowed: [`without_landlock`]): both succeed
/// there, so it is Landlock, and Landlock alone, that refuses them above.
#[test]
fn what_only_landlock_stops_is_stopped_and_goes_through_without_it() {
    let abi = expected_landlock_abi();
    assert!(abi >= 1, "this test needs Landlock");
    let probe = "if { echo ll-probe > /proc/$$/comm; } 2>/dev/null; \
                 then echo \"comm=written:$(cat /proc/$$/comm)\"; else echo comm=denied; fi; \
                 python3 -c 'import socket\ntry:\n    socket.socket().bind((\"127.0.0.1\", 8123)); print(\"bind=bound\")\nexcept OSError as e: print(\"bind=denied:%d\" % e.errno)'; \
                 exit 0";
    let denied_bind = if abi >= 4 {
        "bind=denied:13"
    } else {
        "bind=bound"
    };
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(probe, &[]);
        assert_ran(who, &r);
        assert_eq!(
            r.out(),
            format!("comm=denied\n{denied_bind}\n"),
            "{who:?}: with Landlock: {}",
            r.json
        );
        assert_eq!(
            r.json["rehearsal"]["sandbox"]["landlock_abi"], abi,
            "{who:?}"
        );

        let mut c = ws.command_through(&without_landlock());
        c.env("DRYRUN_ALLOW_DEGRADED", "1")
            .args(["execute", "--json", "--command", probe]);
        let r = to_run(c.output().unwrap());
        assert_ran(who, &r);
        let sandbox = &r.json["rehearsal"]["sandbox"];
        assert_eq!(sandbox["landlock_abi"], 0, "{who:?}: {sandbox}");
        assert_eq!(
            sandbox["landlock_status"], "not available (degraded mode)",
            "{who:?}: {sandbox}"
        );
        assert_eq!(sandbox["seccomp"], true, "{who:?}: {sandbox}");
        assert_eq!(
            r.out(),
            "comm=written:ll-probe\nbind=bound\n",
            "{who:?}: without Landlock the probe should go through: {}",
            r.json
        );
    }
}

/// The Landlock ABI CI pins (DRYRUN_EXPECT_LANDLOCK_ABI), else what the
/// kernel reports, capped at the newest ABI dryrun knows (7).
fn expected_landlock_abi() -> u64 {
    if let Ok(v) = std::env::var("DRYRUN_EXPECT_LANDLOCK_ABI") {
        return v.parse().expect("DRYRUN_EXPECT_LANDLOCK_ABI is a number");
    }
    eprintln!("note: DRYRUN_EXPECT_LANDLOCK_ABI not set; accepting the kernel's ABI");
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes;print(ctypes.CDLL(None).syscall(444,None,0,1))",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<u64>()
        .unwrap()
        .min(7)
}
