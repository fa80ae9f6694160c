//! The state directory allocates and frees as few inodes per run as it can.
//! On a file system without a journal (ext4 here), each inode freed in the
//! last minutes slows every later file creation (ext4's `recently_deleted`
//! check), so a daemon that freed three per run got slower the longer it
//! ran. What is checked, by inode numbers on the host:
//!
//! - a record is replaced by exchanging it with its spare
//!   (`record.json.partial`, the version before): after an approval the
//!   record is the spare's inode and the spare the record's, both whole;
//! - a daemon keeps its cleared in-flight markers (`inflight/.idle-...`)
//!   and renames one into place for the next run: run after run, the same
//!   inode;
//! - the idle markers of a daemon killed with SIGKILL are removed by the
//!   next start, and those of a daemon stopped cleanly by its stop.

mod common;
use common::daemon::*;
use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .ino()
}

/// `inflight/`'s entries: (name, inode).
fn inflight(d: &Daemon) -> Vec<(String, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(d.state.join("inflight"))
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().ino(),
            )
        })
        .collect();
    v.sort();
    v
}

fn record(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not a whole record: {e}", path.display()))
}

#[test]
fn a_records_change_exchanges_it_with_its_spare() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let r = submit_user(
        &d,
        &ws,
        "echo x > .git/hooks/pre-commit",
        &["--expect-write", ".git/**"],
    );
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    let id = run_id(&r);
    let dir = d.state.join("runs").join(&id);
    let (rec, spare) = (dir.join("record.json"), dir.join("record.json.partial"));
    // The spare is an earlier state of the same run, whole.
    let older = record(&spare);
    assert_eq!(older["run_id"], id.as_str());
    assert_ne!(older["state"], "awaiting_approval", "{older}");
    let (rec_ino, spare_ino) = (ino(&rec), ino(&spare));

    let out = d
        .cli_root()
        .args(["approve", &id, "--note", "checked"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(record(&rec)["state"], "approved");
    assert_eq!(record(&spare)["state"], "awaiting_approval");
    assert_eq!(
        (ino(&rec), ino(&spare)),
        (spare_ino, rec_ino),
        "the record and its spare were exchanged, not a new file renamed over the record"
    );
}

#[test]
fn a_daemon_reuses_its_in_flight_markers_and_removes_them_when_it_stops() {
    if !require_root() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let ws = user_workspace();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = submit_user(&d, &ws, "true", &[]);
        assert_eq!(r.json["state"], "rehearsed", "{r:?}");
        let now = inflight(&d);
        assert_eq!(now.len(), 1, "one idle marker, no run's: {now:?}");
        assert!(now[0].0.starts_with(".idle-"), "{now:?}");
        let target = std::fs::read_link(d.state.join("inflight").join(&now[0].0)).unwrap();
        assert!(
            target
                .to_string_lossy()
                .starts_with(&format!("{} ", d.pid())),
            "an idle marker names its daemon: {target:?}"
        );
        seen.push(now[0].1);
    }
    seen.dedup();
    assert_eq!(
        seen.len(),
        1,
        "the same marker inode for every run: {seen:?}"
    );

    // Killed: its idle marker stays until the next start, which removes it
    // (its process is gone) and keeps serving.
    d.kill9();
    assert_eq!(inflight(&d).len(), 1);
    d.restart(&[]);
    let r = submit_user(&d, &ws, "true", &[]);
    assert_eq!(r.json["state"], "rehearsed", "{r:?}");
    let now = inflight(&d);
    assert_eq!(now.len(), 1, "the dead daemon's marker removed: {now:?}");
    assert_ne!(now[0].1, seen[0], "{now:?}");

    // Stopped cleanly: nothing left.
    let status = d.terminate();
    assert!(status.success(), "{status:?}");
    assert!(inflight(&d).is_empty(), "{:?}", inflight(&d));
}
