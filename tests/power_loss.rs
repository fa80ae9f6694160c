//! A stop of the machine (power loss, kernel crash) loses the writes that
//! were not synced: a run's first record, its in-flight marker. Modelled
//! with real processes: `dryrun execute` killed with SIGKILL mid-rehearsal,
//! then, on disk, what the page cache had not written yet taken away and
//! `boot.json` left naming an earlier boot. The next start must report
//! every journaled run as failed with the reason, journal it, keep the
//! journal verifiable and promote nothing.

mod common;

use std::process::{Child, Stdio};

use common::daemon::{processes_with, require_root, wait_until};
use common::*;
use serde_json::Value;

fn journal_bodies(ws: &Ws) -> Vec<Value> {
    std::fs::read_to_string(ws.state.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["body"].clone())
        .collect()
}

/// The id of the run journaled as submitted with `needle` in its command.
fn submitted_id(ws: &Ws, needle: &str) -> Option<String> {
    journal_bodies(ws)
        .into_iter()
        .find(|b| {
            b["kind"] == "run_submitted"
                && b["data"]["command"]
                    .as_str()
                    .is_some_and(|c| c.contains(needle))
        })
        .and_then(|b| b["run_id"].as_str().map(String::from))
}

/// `dryrun execute` of a long command, started.
struct Long {
    child: Child,
    marker: String,
}

fn start_long(ws: &Ws, tag: &str) -> Long {
    let marker = format!("dryrun-power-loss-{tag}-{}", std::process::id());
    let child = ws
        .command()
        .args(["execute", "--json", "--command"])
        .arg(format!("sleep 300; : {marker}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Long { child, marker }
}

impl Long {
    /// Its run's id, once it is journaled and its sandbox runs.
    fn running(&self, ws: &Ws) -> String {
        wait_until("the rehearsal to run", 60, || {
            submitted_id(ws, &self.marker).is_some() && !processes_with(&self.marker).is_empty()
        });
        submitted_id(ws, &self.marker).unwrap()
    }

    /// SIGKILL, and its sandbox gone with it.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        wait_until("the sandbox to die with its parent", 10, || {
            processes_with(&self.marker).is_empty()
        });
    }
}

fn show(ws: &Ws, id: &str) -> Value {
    let out = ws.command().args(["show", id, "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "show {id}: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn runs_whose_unsynced_files_a_power_loss_took_are_failed_with_the_reason() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::Root);
    ws.write("keep.txt", "as it was\n");
    // An acknowledged run before the stop: it stays as it was.
    let settled = ws.rehearse("echo ok > keep.txt", &["--expect-write", "keep.txt"]);
    assert_eq!(settled.decision(), "promote", "{settled:?}");
    let settled_id = settled.json["run_id"].as_str().unwrap().to_string();
    let before = ws.snapshot();

    // Three rehearsals at once (each command's start would settle runs
    // that an earlier kill left), then all killed.
    let longs: Vec<Long> = ["missing", "torn", "running"]
        .iter()
        .map(|t| start_long(&ws, t))
        .collect();
    let ids: Vec<String> = longs.iter().map(|l| l.running(&ws)).collect();
    longs.into_iter().for_each(Long::kill);
    let [missing, torn, running] = [&ids[0], &ids[1], &ids[2]].map(String::clone);
    // A kill leaves the marker, a link naming the dead owner.
    let inflight = ws.state.join("inflight");
    for id in [&missing, &torn, &running] {
        let m = inflight.join(id);
        assert!(m.symlink_metadata().unwrap().is_symlink(), "{id}");
    }

    // What the power loss took: the markers, one record entirely, one cut
    // in half; the third record is still the `running` one.
    for e in std::fs::read_dir(&inflight).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let record = |id: &str| ws.state.join("runs").join(id).join("record.json");
    std::fs::remove_file(record(&missing)).unwrap();
    let bytes = std::fs::read(record(&torn)).unwrap();
    std::fs::write(record(&torn), &bytes[..bytes.len() / 2]).unwrap();
    let r: Value = serde_json::from_slice(&std::fs::read(record(&running)).unwrap()).unwrap();
    assert_eq!(r["state"], "running");
    // ... and the machine started again: `boot.json` names another boot.
    let boot_path = ws.state.join("boot.json");
    let mut boot: Value = serde_json::from_slice(&std::fs::read(&boot_path).unwrap()).unwrap();
    boot["boot_id"] = "an-earlier-boot".into();
    std::fs::write(&boot_path, boot.to_string()).unwrap();

    // The next start settles all three.
    for (id, words) in [
        (&missing, &["aborted", "it was missing"][..]),
        (&torn, &["aborted", "it was cut short"][..]),
        (&running, &["interrupted", "while this run was running"][..]),
    ] {
        let r = show(&ws, id);
        assert_eq!(r["state"], "failed", "{id}: {r}");
        let error = r["error"].as_str().unwrap_or_default();
        for w in words
            .iter()
            .chain(&["machine stopped", "nothing was promoted"])
        {
            assert!(error.contains(w), "{id}: {w:?} not in {error:?}");
        }
        assert_eq!(r["run_id"], id.as_str());
        assert!(r["command"].as_str().unwrap().contains("sleep 300"), "{r}");
    }
    let boot: Value = serde_json::from_slice(&std::fs::read(&boot_path).unwrap()).unwrap();
    let now = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(boot["boot_id"], now.trim());

    // Journaled once each, even though every command opened the engine.
    let bodies = journal_bodies(&ws);
    for id in [&missing, &torn, &running] {
        let failed: Vec<_> = bodies
            .iter()
            .filter(|b| b["kind"] == "run_failed" && b["run_id"] == id.as_str())
            .collect();
        assert_eq!(failed.len(), 1, "{id}: {failed:?}");
    }
    let out = ws
        .command()
        .args(["journal", "verify", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["torn_tail_bytes"], 0, "{v}");

    // Nothing went live, and none of them can.
    assert_eq!(before, ws.snapshot());
    for id in [&missing, &torn, &running] {
        let out = ws.command().args(["promote", id]).output().unwrap();
        assert_ne!(out.status.code(), Some(0), "{id} was promoted");
    }
    assert_eq!(before, ws.snapshot());
    assert_eq!(show(&ws, &settled_id)["state"], settled.json["state"]);
    assert_eq!(
        std::fs::read_dir(&inflight).unwrap().count(),
        0,
        "no marker is left"
    );
}

/// Within one boot a killed process's runs are found by their markers,
/// whatever `boot.json` holds; and a marker whose process lives is left.
#[test]
fn without_a_restart_the_markers_decide_and_a_live_owner_is_left_alone() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::Root);
    let first = start_long(&ws, "same-boot");
    let killed = first.running(&ws);
    first.kill();
    let live = start_long(&ws, "live");
    let live_id = live.running(&ws);

    let r = show(&ws, &killed);
    assert_eq!(r["state"], "failed", "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(error.contains("interrupted"), "{error}");
    assert!(!error.contains("machine stopped"), "{error}");
    assert_eq!(show(&ws, &live_id)["state"], "running");
    let m = ws.state.join("inflight").join(&live_id);
    assert!(m.symlink_metadata().is_ok(), "the live run's marker stays");

    live.kill();
    assert_eq!(show(&ws, &live_id)["state"], "failed");
    let out = ws
        .command()
        .args(["journal", "verify", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
}
