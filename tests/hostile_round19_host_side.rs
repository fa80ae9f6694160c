//! Hostile agent against this round's host-side changes: the journal's
//! anchor overwritten in place (crashes, torn, stale and forged anchors) and
//! the bounded cgroup clean-up (racing escapees at the answer, at a
//! restart's recovery and at a cancel). A root daemon (or root's `execute
//! --local`) and the unprivileged agent uid `dryrun-test`; every outcome is
//! checked on the host side.

mod common;
use common::daemon::*;
use common::*;
use std::path::Path;
use std::process::Command;

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
/// A damaged anchor stops the daemon (named) until it is moved aside; then
/// every run a client got an answer for is in the journal after each
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
        if round < 3 {
            // A damaged anchor is never rebuilt over (it could hide records
            // cut from the end): the daemon refuses to start and names it,
            // and verification fails with its own code, until the operator
            // moves it aside, keeping it as evidence.
            let out = d.start_again_in_foreground();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "round {round}: {err}");
            assert!(err.contains("journal.head"), "round {round}: {err}");
            let (code, text) = verify(&d.state);
            assert_eq!(code, Some(6), "round {round}: {text}");
            std::fs::rename(
                &head,
                d.state.join(format!("journal.head.evidence.{round}")),
            )
            .unwrap();
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
    let out = d.start_again_in_foreground();
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
///
/// The positive control: the command waits on a gate process, and the host
/// opens the gate only once it has seen, while the run is live, the fork
/// loop's children, the stopped process (state `T`) and the detached one;
/// a run whose racers never started (or were gone before the answer) fails
/// here instead of passing.
#[test]
fn racing_forks_and_stopped_processes_do_not_outlive_the_run() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let hex = random_hex();
    let tag = format!("h19race{hex}");
    // Every fork the command needs is made before the fork loop starts (it
    // exhausts the run's pids); then the shell only waits (a builtin) for
    // the gate, which the host kills. The stopped process stops itself once
    // its command line names it (a `kill -STOP` from its parent lands as
    // often before its exec, on a copy of the shell no name finds).
    let cmd = format!(
        "T=h19race; \
         bash -c \"kill -STOP \\$\\$; exec -a ${{T}}{hex}s sleep 300\" & \
         (setsid bash -c \"exec -a ${{T}}{hex}d sleep 300\" &) ; \
         bash -c \"exec -a ${{T}}{hex}g sleep 300\" & g=$! ; \
         (trap '' TERM HUP INT; while :; do (exec -a ${{T}}{hex}f sleep 300 &) ; done) >/dev/null 2>&1 & \
         wait $g; echo ok > out.txt"
    );
    let pids_of = |suffix: &str| -> Vec<u32> {
        processes_with(&format!("{tag}{suffix}"))
            .iter()
            .filter_map(|l| l.split(':').next()?.parse().ok())
            .collect()
    };
    let stopped = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('T'))
        })
    };
    let uws = user_workspace();
    let rws = Ws::new(Who::Root);
    for via in ["daemon", "root cli"] {
        let r = std::thread::scope(|s| {
            let run = s.spawn(|| {
                let extra = ["--expect-write", "*", "--timeout", "30"];
                if via == "daemon" {
                    submit_user(&d, &uws, &cmd, &extra)
                } else {
                    rws.rehearse(&cmd, &extra)
                }
            });
            wait_until(&format!("{via}: the racers, live"), 30, || {
                !pids_of("f").is_empty()
                    && pids_of("s").iter().any(stopped)
                    && !pids_of("d").is_empty()
                    && !pids_of("g").is_empty()
            });
            for g in pids_of("g") {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(g as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            run.join().unwrap()
        });
        assert!(r.change("out.txt").is_some(), "{via}: {}", r.json);
        assert!(
            r.limits_hit().iter().all(|l| l != "timeout"),
            "{via}: the gate was not opened: {}",
            r.json
        );
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
        let st = d.start_again_in_foreground();
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
