//! Hostile agent against this round's changes: the evidence reader forked
//! at the walk's first open, stub and mask binds taking their flags from a
//! sealed source mount, the journal's anchor overwritten in place, and the
//! bounded cgroup clean-up. A root daemon (or root's `execute --local`) and
//! the unprivileged agent uid `dryrun-test`; every attack is attempted for
//! real and checked on the host side. Tests named `finding_*` show a defect
//! found this round (they fail until it is fixed).

mod common;
use common::daemon::*;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An envelope file the agent can read, outside its workspace.
fn envelope_file(body: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("dryrun-h19-env-")
        .tempdir_in("/tmp")
        .unwrap();
    let p = dir.path().join("envelope.json");
    std::fs::write(&p, body).unwrap();
    for q in [dir.path(), p.as_path()] {
        std::fs::set_permissions(q, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, p)
}

fn submit_envelope(d: &Daemon, ws: &Ws, body: &str) -> Run {
    let (_dir, p) = envelope_file(body);
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

fn run_id(r: &Run) -> String {
    r.json["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {r:?}"))
        .to_string()
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
        out.push((fill.to_string(), submit_envelope(d, &ws, &body)));
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

/// FINDING: a command that fills its memory limit with files in the upper
/// layer gets the sandbox's init (P1, in the run's memory cgroup and its
/// largest process) killed by the cgroup's OOM killer. The run fails
/// closed, but its record says only "the sandbox helper ended without a
/// report": neither the error nor `limits_hit` names the memory limit.
#[test]
fn finding_a_run_whose_init_the_memory_limit_killed_names_the_limit() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    for (fill, r) in fill_runs(&d) {
        if r.json["state"] != "failed" {
            continue;
        }
        let named = r.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("memory"))
            || r.limits_hit().contains(&"memory".to_string());
        assert!(named, "{fill}: the cause is not named: {}", r.json);
    }
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
    let acl_set = Command::new("setfacl")
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
            let (_dir, p) = envelope_file(&body);
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

fn verify(state: &Path) -> (Option<i32>, String) {
    let out = Command::new(bin())
        .env_clear()
        .args(["--local", "--state-dir"])
        .arg(state)
        .args(["journal", "verify"])
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// As root: the daemon SIGKILLed while runs are being appended, again and
/// again, and the anchor torn, zeroed, cut or left stale between restarts.
/// Every run a client got an answer for is in the journal after each
/// restart, the chain verifies, the daemon serves; a journal cut short under
/// a valid anchor, or an anchor forged past the end, is named by `verify`
/// and the daemon refuses to extend it.
#[test]
fn crashes_and_torn_or_stale_anchors_lose_no_acknowledged_record() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = user_workspace();
    let head = d.state.join("journal.head");
    let mut acknowledged: Vec<String> = Vec::new();
    for round in 0..4 {
        let kids: Vec<_> = (0..3)
            .map(|i| {
                d.cli_user()
                    .current_dir(&ws.dir)
                    .args(["execute", "--json", "--command"])
                    .arg(format!("echo {round}{i} > f{i}"))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Kill the daemon once the first answer is out; the others race it.
        let mut kids = kids.into_iter();
        let first = run_json(kids.next().unwrap().wait_with_output().unwrap());
        d.kill9();
        for r in std::iter::once(first).chain(kids.map(|k| run_json(k.wait_with_output().unwrap())))
        {
            if let Some(id) = r.json["run_id"].as_str()
                && r.json["state"].is_string()
            {
                acknowledged.push(id.to_string());
            }
        }
        // Damage the anchor the way a crash can.
        let bytes = std::fs::read(&head).unwrap_or_default();
        match round {
            0 => {
                let mut t = bytes.clone();
                for b in t.iter_mut().take(100) {
                    *b = b'x';
                }
                std::fs::write(&head, t).unwrap();
            }
            1 => std::fs::write(&head, vec![0u8; 256]).unwrap(),
            2 => std::fs::write(&head, &bytes[..bytes.len() / 2]).unwrap(),
            _ => {}
        }
        d.restart(&[]);
        let (code, text) = verify(&d.state);
        assert_eq!(code, Some(0), "round {round}: {text}");
        let journal = d.journal();
        for id in &acknowledged {
            assert!(
                journal.iter().any(|b| b["run_id"] == id.as_str()),
                "round {round}: acknowledged run {id} lost from the journal"
            );
        }
        let r = submit_user(&d, &ws, "true", &[]);
        assert_eq!(r.json["state"], "rehearsed", "round {round}: {}", r.json);
        acknowledged.push(run_id(&r));
    }
    d.terminate();
    // Cut the last record off under the current (valid) anchor.
    let jpath = d.state.join("journal.jsonl");
    let full = std::fs::read(&jpath).unwrap();
    let cut = full[..full.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    std::fs::write(&jpath, &full[..cut]).unwrap();
    let (code, text) = verify(&d.state);
    assert_eq!(code, Some(5), "a cut journal passes: {text}");
    assert!(text.contains("truncated"), "{text}");
    let out = Command::new(bin())
        .env_clear()
        .arg("daemon")
        .arg("--socket")
        .arg(&d.socket)
        .arg("--state-dir")
        .arg(&d.state)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the daemon extended a cut journal"
    );
    assert_eq!(std::fs::read(&jpath).unwrap(), &full[..cut]);
}

/// Processes that race the host side's clean-up (a fork loop, stopped
/// processes, ones that ignore every catchable signal, children re-parented
/// as the command ends) are all dead and the run's cgroups gone once the
/// answer is out, through the daemon and root's CLI.
#[test]
fn racing_forks_and_stopped_processes_do_not_outlive_the_run() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let hex = random_hex();
    let tag = format!("h19race{hex}");
    let cmd = format!(
        "T=h19race; \
         (trap '' TERM HUP INT; while :; do (exec -a ${{T}}{hex} sleep 300 &) ; done) >/dev/null 2>&1 & \
         (bash -c \"exec -a ${{T}}{hex} sleep 300\" & p=$!; kill -STOP $p) ; \
         (setsid bash -c \"exec -a ${{T}}{hex} sleep 300\" &) ; \
         sleep 0.5; echo ok > out.txt"
    );
    let uws = user_workspace();
    let rws = Ws::new(Who::Root);
    for via in ["daemon", "root cli"] {
        let r = if via == "daemon" {
            submit_user(&d, &uws, &cmd, &["--expect-write", "*", "--timeout", "30"])
        } else {
            rws.rehearse(&cmd, &["--expect-write", "*", "--timeout", "30"])
        };
        assert!(r.change("out.txt").is_some(), "{via}: {}", r.json);
        let id = run_id(&r);
        wait_until("the racing processes to be gone", 30, || {
            processes_with(&tag).is_empty()
        });
        wait_until("the run's cgroups to be removed", 30, || {
            run_cgroups(&id).iter().all(|p| !p.exists())
        });
    }
}

/// The anchor as the journal writes it: `check` first, padded to 256 bytes.
fn anchor_bytes(seq: u64, hash: &str, start: u64, end: u64) -> Vec<u8> {
    let check = blake3::hash(format!("{seq}\n{hash}\n{start}\n{end}").as_bytes())
        .to_hex()
        .to_string();
    let mut b = serde_json::to_vec(&serde_json::json!({
        "check": check, "seq": seq, "hash": hash, "start": start, "end": end
    }))
    .unwrap();
    b.resize(255, b' ');
    b.push(b'\n');
    b
}

/// As root: an anchor with a valid check that names the last record's
/// place but another hash (a forgery), or a record past the end, is named
/// by `verify` and the daemon will not extend the chain under it; a valid
/// but stale anchor (an older record) is adopted forward with nothing lost.
#[test]
fn a_forged_anchor_is_named_and_a_stale_one_loses_nothing() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = user_workspace();
    let ids: Vec<String> = (0..3)
        .map(|i| run_id(&submit_user(&d, &ws, &format!("echo {i}"), &[])))
        .collect();
    d.terminate();
    let jpath = d.state.join("journal.jsonl");
    let head = d.state.join("journal.head");
    let text = std::fs::read(&jpath).unwrap();
    let mut ranges = Vec::new();
    let mut at = 0u64;
    for line in text.split_inclusive(|b| *b == b'\n') {
        let v: Value = serde_json::from_slice(line).unwrap();
        ranges.push((
            v["body"]["seq"].as_u64().unwrap(),
            v["hash"].as_str().unwrap().to_string(),
            at,
            at + line.len() as u64,
        ));
        at += line.len() as u64;
    }
    let (seq, hash, start, end) = ranges.last().cloned().unwrap();
    let good = std::fs::read(&head).unwrap();
    let forged_hash: String = hash.chars().rev().collect();
    for (what, bytes) in [
        ("another hash", anchor_bytes(seq, &forged_hash, start, end)),
        (
            "a record past the end",
            anchor_bytes(seq + 5, &hash, end, end + 300),
        ),
    ] {
        std::fs::write(&head, &bytes).unwrap();
        let (code, out) = verify(&d.state);
        assert_eq!(code, Some(5), "{what}: verify passes: {out}");
        let st = Command::new(bin())
            .env_clear()
            .arg("daemon")
            .arg("--socket")
            .arg(&d.socket)
            .arg("--state-dir")
            .arg(&d.state)
            .output()
            .unwrap();
        assert_eq!(st.status.code(), Some(1), "{what}: the daemon started");
        assert_eq!(
            std::fs::read(&jpath).unwrap(),
            text,
            "{what}: the journal changed"
        );
    }
    // Stale: the first record's anchor, valid, behind the journal.
    let (s0, h0, a0, e0) = ranges[0].clone();
    std::fs::write(&head, anchor_bytes(s0, &h0, a0, e0)).unwrap();
    let (code, out) = verify(&d.state);
    assert_eq!(
        code,
        Some(0),
        "a stale anchor is not a crash outcome: {out}"
    );
    d.restart(&[]);
    let r = submit_user(&d, &ws, "echo after", &[]);
    assert_eq!(r.json["state"], "rehearsed", "{}", r.json);
    let journal = d.journal();
    for id in ids.iter().chain(std::iter::once(&run_id(&r))) {
        assert!(
            journal.iter().any(|b| b["run_id"] == id.as_str()),
            "{id} lost"
        );
    }
    let (code, out) = verify(&d.state);
    assert_eq!(code, Some(0), "{out}");
    assert_ne!(std::fs::read(&head).unwrap(), good);
}

/// The daemon SIGKILLed while a run's escapees race its clean-up (a fork
/// loop, stopped and detached processes): the restart's recovery kills
/// every one, removes the run's cgroups and marks the run failed.
#[test]
fn a_restart_reaps_racing_escapees_of_an_interrupted_run() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = user_workspace();
    let hex = random_hex();
    let tag = format!("h19rec{hex}");
    let cmd = format!(
        "T=h19rec; \
         (trap '' TERM HUP INT; while :; do (exec -a ${{T}}{hex} sleep 300 &) ; sleep 0.01; done) >/dev/null 2>&1 & \
         (bash -c \"exec -a ${{T}}{hex} sleep 300\" & p=$!; kill -STOP $p) ; \
         (setsid bash -c \"exec -a ${{T}}{hex} sleep 300\" &) ; sleep 300"
    );
    let mut cli = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--command", &cmd, "--timeout", "600"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the escapees to start", 60, || {
        processes_with(&tag).len() >= 3
    });
    d.kill9();
    let _ = cli.wait();
    d.restart(&[]);
    wait_until("the escapees to be gone", 30, || {
        processes_with(&tag).is_empty()
    });
    let c = dryrun::cli::client::Client::new(&d.socket);
    let list: Value = c.call("GET", "/v1/runs", None).unwrap();
    let runs = list["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1, "{list}");
    let id = runs[0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(runs[0]["state"], "failed", "{list}");
    wait_until("the run's cgroups to be removed", 30, || {
        run_cgroups(&id).iter().all(|p| !p.exists())
    });
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

/// The agent cancels its own run while escapees race the clean-up, and
/// again while the walk (and its reader) is busy with many files: nothing
/// of either run is left running, the cgroups go, the runs are failed.
#[test]
fn cancelling_a_run_mid_command_or_mid_walk_leaves_nothing() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let c = dryrun::cli::client::Client::new(&d.socket);
    let hex = random_hex();
    let tag = format!("h19can{hex}");
    let wd = ws.dir.display().to_string();
    let racing = format!(
        "T=h19can; \
         (trap '' TERM HUP INT; while :; do (exec -a ${{T}}{hex} sleep 300 &) ; sleep 0.01; done) >/dev/null 2>&1 & \
         (bash -c \"exec -a ${{T}}{hex} sleep 300\" & p=$!; kill -STOP $p) ; \
         (setsid bash -c \"exec -a ${{T}}{hex} sleep 300\" &) ; sleep 300"
    );
    let walking = format!(
        "mkdir many; cd many; seq 1 100000 | xargs touch; \
         for f in ../README.md; do echo x >> $f; done; : {tag}walk"
    );
    for (what, cmd) in [("command", racing), ("walk", walking)] {
        let body = serde_json::json!({
            "command": cmd, "working_dir": wd, "limits": {"timeout_s": 600}
        })
        .to_string();
        let before: Vec<String> = run_ids(&c);
        let mut cli = execute_envelope_in_background(&mut d.cli_user(), &body);
        wait_until("the run to be listed", 60, || {
            run_ids(&c).len() > before.len()
        });
        let id = run_ids(&c)
            .into_iter()
            .find(|i| !before.contains(i))
            .unwrap();
        if what == "command" {
            wait_until("the escapees to start", 60, || {
                processes_with(&tag).len() >= 3
            });
        } else {
            // The command's shell carries the tag; once it is gone the
            // walk is on.
            wait_until("the command to start", 60, || {
                !processes_with(&tag).is_empty()
            });
            wait_until("the command to end", 60, || processes_with(&tag).is_empty());
        }
        let out = d
            .cli_user()
            .args(["cancel", &id, "--json"])
            .output()
            .unwrap();
        let _ = cli.kill();
        let _ = cli.wait();
        let rec: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert_eq!(
            rec["state"], "failed",
            "{what}: the cancel came too late: {rec}"
        );
        wait_until("the run's processes to be gone", 30, || {
            processes_with(&tag).is_empty()
        });
        wait_until("the run's cgroups to be removed", 30, || {
            run_cgroups(&id).iter().all(|p| !p.exists())
        });
        let r: Value = c.call("GET", &format!("/v1/runs/{id}"), None).unwrap();
        assert!(
            r["state"] == "failed"
                || r["rehearsal"]["changes"]
                    .as_array()
                    .is_some_and(|c| c.len() > 1),
            "{what}: {r}"
        );
    }
}

fn run_ids(c: &dryrun::cli::client::Client) -> Vec<String> {
    let l: Value = c.call("GET", "/v1/runs", None).unwrap();
    l["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r["run_id"].as_str().map(String::from))
        .collect()
}
