//! Hostile agent against this round's sandbox changes: the evidence reader
//! forked at the walk's first open, and stub and mask binds taking their
//! flags from a sealed source mount (the journal's anchor and the cgroup
//! clean-up: hostile_round19_host_side.rs). A root daemon (or root's `execute --local`) and
//! the unprivileged agent uid `dryrun-test`; every attack is attempted for
//! real and checked on the host side. Tests named `finding_*` show a defect
//! found this round (they fail until it is fixed).

mod common;
use common::daemon::*;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn submit_envelope(d: &Daemon, ws: &Ws, body: &str) -> Run {
    let (_dir, p) = agent_envelope_file(body);
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--file"])
        .arg(&p)
        .output()
        .unwrap();
    run_json(out)
}

/// Every byte of every file under `dir`, for canary searches.
fn all_bytes_under(dir: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let Ok(e) = e else { continue };
        if e.file_type().is_file() {
            v.extend(std::fs::read(e.path()).unwrap_or_default());
            v.push(b'\n');
        }
    }
    v
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The memory the upper layer's tmpfs and the command fill, above and
/// below the run's memory limit: whatever dies (the command, the walk's
/// reader at its late fork, init), the run is either complete (both
/// changes, the before-hash of the file it modified) or failed, never
/// promoted with evidence missing; no process or cgroup is left.
fn fill_runs(d: &Daemon) -> Vec<(String, Run)> {
    let ws = user_workspace();
    let mut out = Vec::new();
    for fill in ["40M", "63744K", "64000K", "200M"] {
        let body = format!(
            r#"{{"command": "echo more >> README.md; head -c {fill} /dev/zero > fill; echo done",
                "working_dir": "{}",
                "limits": {{"memory_mb": 64, "disk_mb": 1024, "timeout_s": 60}},
                "intent": {{"expected_writes": ["*"]}}}}"#,
            ws.dir.display()
        );
        out.push((format!("{fill} daemon"), submit_envelope(d, &ws, &body)));
        // Root's in-process CLI over the agent's workspace, on the daemon's
        // state directory (the journal takes both appenders).
        let (_dir, p) = agent_envelope_file(&body);
        let cli = Command::new(bin())
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("DRYRUN_STATE_DIR", &d.state)
            .current_dir(&ws.dir)
            .args(["execute", "--local", "--json", "--file"])
            .arg(&p)
            .output()
            .unwrap();
        out.push((format!("{fill} root cli"), to_run(cli)));
    }
    out
}

#[test]
fn a_full_memory_limit_at_the_walk_fails_the_run_closed() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    for (fill, r) in fill_runs(&d) {
        let state = r.json["state"].as_str().unwrap_or("");
        if state == "failed" {
            assert_ne!(r.decision(), "promote", "{fill}: {}", r.json);
            assert!(
                r.json["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{fill}: a failed run without a reason: {}",
                r.json
            );
        } else {
            let readme = r.change("README.md");
            let before = readme.as_ref().and_then(|c| c["before"].as_str());
            assert!(
                before.is_some() && r.change("fill").is_some(),
                "{fill}: a {state} run with evidence missing: {}",
                r.json
            );
        }
        let id = run_id(&r);
        wait_until("the run's cgroups to be removed", 30, || {
            run_cgroups(&id).iter().all(|p| !p.exists())
        });
        let journal = d.journal();
        assert!(
            journal.iter().any(|b| b["run_id"] == id.as_str()),
            "{fill}: the run is not in the journal"
        );
    }
}

/// The pids limit at its smallest, filled by processes (stopped, detached,
/// ignoring signals) still being killed when the walk forks its reader: the
/// run is complete or failed naming why, never promoted with evidence
/// missing.
#[test]
fn a_full_pids_limit_at_the_walk_fails_the_run_closed() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    for pids in [8, 9, 10] {
        let body = format!(
            r#"{{"command": "echo more >> README.md; for i in 1 2 3 4 5; do (trap '' TERM HUP; setsid sleep 300 &) 2>/dev/null; done; kill -STOP $(pgrep sleep) 2>/dev/null; echo done",
                "working_dir": "{}",
                "limits": {{"pids": {pids}, "timeout_s": 30}},
                "intent": {{"expected_writes": ["*"]}}}}"#,
            ws.dir.display()
        );
        let r = submit_envelope(&d, &ws, &body);
        let state = r.json["state"].as_str().unwrap_or("");
        if state == "failed" {
            assert!(
                r.json["error"].as_str().is_some_and(|e| !e.is_empty()),
                "pids {pids}: a failed run without a reason: {}",
                r.json
            );
        } else {
            let before = r
                .change("README.md")
                .and_then(|c| c["before"].as_str().map(String::from));
            assert!(
                before.is_some(),
                "pids {pids}: a {state} run with evidence missing: {}",
                r.json
            );
        }
        let id = run_id(&r);
        wait_until("the run's cgroups to be removed", 30, || {
            run_cgroups(&id).iter().all(|p| !p.exists())
        });
    }
}

/// Files that fit `disk_mb` count against the run's memory cgroup but never
/// fill it (its ceiling is memory_mb + disk_mb + /tmp): every fill up to
/// 200M in a 64 MiB `memory_mb` is rehearsed whole, through the daemon and
/// root's CLI. (They used to get the sandbox's init OOM-killed, and the
/// run failed.)
#[test]
fn files_that_fit_disk_mb_are_rehearsed_whatever_memory_mb_is() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    for (fill, r) in fill_runs(&d) {
        assert_ne!(r.json["state"], "failed", "{fill}: {}", r.json);
        assert!(r.change("fill").is_some(), "{fill}: {}", r.json);
        assert!(r.limits_hit().is_empty(), "{fill}: {:?}", r.limits_hit());
        assert!(r.out().ends_with("done\n"), "{fill}: {}", r.out());
    }
}

/// A command tries to take back what makes it the OOM killer's first
/// choice (its score, raised before it execs, is beyond its reach: Landlock
/// refuses the write), writes files in the upper layer and `/tmp`, and fills
/// the rest of the run's memory cgroup with hundreds of processes, each
/// smaller than the sandbox's init: the kernel ends the command's
/// processes, never the init. The run is complete (the file is listed),
/// names the memory limit, and is not promoted. (With the command's score
/// left at the init's, the init is killed and the run fails: checked by
/// hand when this was built.)
#[test]
fn a_command_cannot_hand_the_oom_killer_its_init() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let body = format!(
        r#"{{"command": "(echo 0 > /proc/self/oom_score_adj) 2>/dev/null || echo kept; echo more >> README.md; head -c 60M /dev/zero > fill; for i in 1 2 3 4; do head -c 60M /dev/zero > /tmp/f$i; done; for i in $(seq 400); do sleep 5 & done; wait; echo done",
            "working_dir": "{}",
            "limits": {{"memory_mb": 16, "disk_mb": 64, "pids": 512, "timeout_s": 60}},
            "intent": {{"expected_writes": ["*"]}}}}"#,
        ws.dir.display()
    );
    let r = submit_envelope(&d, &ws, &body);
    assert_ne!(r.json["state"], "failed", "{}", r.json);
    assert!(r.out().starts_with("kept\n"), "{}", r.json);
    assert!(
        r.limits_hit().contains(&"memory".to_string()),
        "{:?}: {}",
        r.limits_hit(),
        r.json
    );
    assert!(r.change("fill").is_some(), "{}", r.json);
    assert_ne!(r.decision(), "promote", "{}", r.json);
    let id = run_id(&r);
    wait_until("the run's cgroups to be removed", 30, || {
        run_cgroups(&id).iter().all(|p| !p.exists())
    });
}

/// A root-only file (0600, with a user.* attribute), a file under a root
/// 0700 directory and a file an ACL denies the owner, all in the agent's
/// workspace: renamed, linked, touched or read by the command, their
/// content and attribute values reach neither the record nor the state
/// directory, and no hash of them is taken (the walk's late reader still
/// opens them with the owner's rights). Through the daemon and through
/// root's in-process CLI over the agent's workspace.
#[test]
fn files_the_owner_may_not_read_stay_withheld_whatever_the_command_does() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let canary = format!("h19secret{}", random_hex());
    let xcanary = format!("h19xattr{}", random_hex());
    let secret = ws.dir.join("secret.txt");
    std::fs::write(&secret, &canary).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    xattr::set(&secret, "user.h19", xcanary.as_bytes()).unwrap();
    // Names and values the owner may not even list, on the workspace root
    // and on a file of the owner's that the command changes.
    let mine = ws.dir.join("README.md");
    for p in [ws.dir.as_path(), mine.as_path()] {
        xattr::set(p, "trusted.h19", xcanary.as_bytes()).unwrap();
    }
    let vault = ws.dir.join("vault");
    std::fs::create_dir(&vault).unwrap();
    std::fs::write(vault.join("inner.txt"), &canary).unwrap();
    std::fs::set_permissions(
        vault.join("inner.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(&vault, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Owned by root, readable by all but the agent (an ACL).
    let acl = ws.dir.join("acl.txt");
    std::fs::write(&acl, &canary).unwrap();
    std::fs::set_permissions(&acl, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (uid, _) = test_user();
    let acl_set = Command::new(tool("setfacl", "acl"))
        .args(["-m", &format!("u:{uid}:---")])
        .arg(&acl)
        .status()
        .is_ok_and(|s| s.success());
    assert!(acl_set, "setfacl failed");
    let cmd = "cat secret.txt vault/inner.txt acl.txt; \
               mv secret.txt moved.txt; ln moved.txt linked.txt; \
               mv acl.txt acl-moved.txt; mv vault vault2; \
               touch moved.txt acl-moved.txt; chmod 644 moved.txt; \
               chmod 700 .; chmod 600 README.md; echo more >> README.md; \
               python3 -c \"import os
for f in ['moved.txt', '.', 'README.md', 'acl-moved.txt']:
    for n in os.listxattr(f):
        try: print(n, os.getxattr(f, n))
        except OSError as e: print(n, e)\"; \
               echo new > made.txt; true";
    let root_state = tempfile::Builder::new()
        .prefix("dryrun-h19-state-")
        .tempdir_in("/tmp")
        .unwrap();
    let runs = [
        (
            "daemon",
            submit_user(&d, &ws, cmd, &["--expect-write", "*"]),
        ),
        ("root cli", {
            let out = Command::new(bin())
                .env_clear()
                .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
                .env("DRYRUN_STATE_DIR", root_state.path())
                .current_dir(&ws.dir)
                .args(["execute", "--local", "--json", "--command", cmd])
                .args(["--expect-write", "*"])
                .output()
                .unwrap();
            to_run(out)
        }),
    ];
    for (via, r) in &runs {
        assert!(r.change("made.txt").is_some(), "{via}: {}", r.json);
        let text = r.json.to_string();
        assert!(
            !text.contains(&canary),
            "{via}: the secret is in the record"
        );
        assert!(
            !text.contains(&xcanary),
            "{via}: the attribute is in the record"
        );
        assert!(
            !text.contains("trusted.h19"),
            "{via}: a trusted name is in the record"
        );
        assert!(r.change("README.md").is_some(), "{via}: {}", r.json);
        for path in ["moved.txt", "secret.txt", "acl-moved.txt", "acl.txt"] {
            let c = r.change(path).unwrap_or_else(|| {
                panic!("{via}: the attack on {path} did not happen: {}", r.json)
            });
            assert!(
                c["before"].is_null() && c["after"].is_null() && c["content_withheld"] == true,
                "{via}: a hash of {path}, which the owner may not read: {c}"
            );
        }
    }
    for dir in [d.state.as_path(), root_state.path()] {
        let bytes = all_bytes_under(dir);
        assert!(
            !contains(&bytes, canary.as_bytes()),
            "{dir:?} holds the secret"
        );
        assert!(
            !contains(&bytes, xcanary.as_bytes()),
            "{dir:?} holds the attribute"
        );
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), canary);
}

/// The stubs' sealed scripts and the binds over tools: no unmount, remount
/// or write (also from a nested namespace) reaches the real tool or changes
/// a script, in the step that tries or in the step after; a workspace PATH
/// directory with a link to the real tool and a renamed copy is still
/// answered by the stub; the workspace is untouched.
#[test]
fn stubs_stay_sealed_across_steps_and_workspace_path_tricks() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let attack = "umount /usr/bin/git; umount -l /usr/bin/git; \
                  mount -o remount,rw,bind /usr/bin/git; mount -o remount,rw /.dryrun/stubs/bin; \
                  (echo 'exit 0' >> /.dryrun/stubs/bin/git) && echo WRITTEN; \
                  (echo 'exit 0' >> /usr/bin/git) && echo WRITTEN; \
                  umount -l /.dryrun/stubs/bin; \
                  unshare -rm sh -c 'umount -l /usr/bin/git; umount -l /.dryrun/stubs/bin; \
                    echo x >> /.dryrun/stubs/bin/git && echo WRITTEN'; \
                  mkdir -p bin; ln -sf /usr/bin/git bin/git; cp /usr/bin/git bin/gitcopy; \
                  ln -sf /.dryrun/stubs/bin bin/stubs; true";
    let probe = "head -c 11 /usr/bin/git; echo; head -c 11 /.dryrun/stubs/bin/git; echo; \
                 export PATH=$PWD/bin:$PATH; git push origin main; \
                 bin/git push origin main; true";
    for who in [Who::User, Who::Root] {
        let ws = if who == Who::User {
            user_workspace()
        } else {
            Ws::new(Who::Root)
        };
        let before = ws.snapshot();
        let body = format!(
            r#"{{"steps": [{}, {}], "working_dir": "{}", "intent": {{"expected_writes": ["*"]}}}}"#,
            serde_json::to_string(attack).unwrap(),
            serde_json::to_string(probe).unwrap(),
            ws.dir.display()
        );
        let r = if who == Who::User {
            submit_envelope(&d, &ws, &body)
        } else {
            let (_dir, p) = agent_envelope_file(&body);
            ws.execute(&["--file", p.to_str().unwrap()])
        };
        let text = r.json.to_string();
        let out = format!("{}{}", r.out(), r.err());
        assert!(!out.contains("WRITTEN"), "{who:?}: {text}");
        assert!(
            out.matches("#!/.dryrun/").count() >= 2,
            "{who:?}: the probe step did not see the stub: {text}"
        );
        assert_eq!(before, ws.snapshot(), "{who:?}: the workspace changed");
        assert_ne!(
            r.decision(),
            "promote",
            "{who:?}: a push was promoted: {text}"
        );
    }
}

/// Runs of the same agent at once, in two workspaces: each walk's reader
/// serves its own run only (every before-hash is of that run's workspace),
/// and no reader outlives its run.
#[test]
fn each_runs_reader_serves_that_run_only() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let wss: Vec<Ws> = (0..2)
        .map(|i| {
            let ws = user_workspace();
            ws.write("README.md", &format!("workspace {i} {}\n", random_hex()));
            ws
        })
        .collect();
    let kids: Vec<_> = (0..6)
        .map(|k| {
            let ws = &wss[k % 2];
            let c = d
                .cli_user()
                .current_dir(&ws.dir)
                .args(["execute", "--json", "--command"])
                .arg(format!("echo {k} >> README.md; sleep 0.{k}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (k % 2, c)
        })
        .collect();
    for (i, c) in kids {
        let r = run_json(c.wait_with_output().unwrap());
        let want = blake3::hash(&std::fs::read(wss[i].dir.join("README.md")).unwrap())
            .to_hex()
            .to_string();
        let got = r.change("README.md").map(|c| c["before"].clone());
        assert_eq!(
            got,
            Some(Value::String(want)),
            "workspace {i}: a before-hash of another run's file: {}",
            r.json
        );
        let id = run_id(&r);
        wait_until("the run's cgroups to be removed", 30, || {
            run_cgroups(&id).iter().all(|p| !p.exists())
        });
    }
    let resident: Vec<u32> = processes()
        .into_iter()
        .filter(|(_, ppid, _)| *ppid == d.pid())
        .map(|(p, _, _)| p)
        .collect();
    wait_until("no sandbox left under the daemon's resident", 30, || {
        resident
            .iter()
            .all(|p| processes().iter().all(|(_, pp, _)| pp != p))
    });
}

/// A script the classifier cannot see into runs the real `git` from the
/// stubs' real-root view (no stub answers it) and pushes: the rehearsal
/// still shows the push's network attempt, and the run is not promoted.
#[test]
fn a_stubbed_tool_run_from_the_real_root_still_shows_its_network_attempt() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write(
        "deploy.sh",
        "#!/bin/bash\ncd /tmp && R=/.dryrun/stubs/real-root/usr/bin/git; $R init -q r && cd r \
         && $R -c user.email=a@b -c user.name=a commit -q --allow-empty -m x \
         && $R push https://github.com/example/x HEAD:main >/dev/null 2>&1; echo finished\n",
    );
    std::fs::set_permissions(
        ws.dir.join("deploy.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let r = submit_user(&d, &ws, "./deploy.sh", &["--expect-write", "*"]);
    assert_eq!(r.out(), "finished\n", "{}", r.json);
    assert_ne!(r.decision(), "promote", "{}", r.json);
    // The push's lookup of its host is the attempt: recorded by name (the
    // sandbox's DNS responder serves runs without network too).
    let egress = r.json["rehearsal"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        egress
            .iter()
            .any(|e| e["name"] == "github.com" && e["allowed"] == false)
            || r.blocked().iter().any(|b| b["kind"] == "network"),
        "the real push left no trace: {}",
        r.json
    );
}
