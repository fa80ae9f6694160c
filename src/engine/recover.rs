//! Crash recovery: what a dead process left in flight is settled before
//! the engine does anything else.
//!
//! ```text
//! inflight/<run_id>    a run queued or rehearsing (a symbolic link naming its owner
//!                      process: pid and start time)
//! txn/<run_id>         a reviewer decision between its journal entry and its record
//! promoting/<run_id>   a promotion in progress (receipt id, owner process)
//! boot.json            the machine's boot id at the last start-up recovery, and
//!                      the journal's length then
//! ```
//!
//! A process killed at any point leaves its writes in the page cache, and
//! its in-flight markers find its runs. A stop of the machine may lose
//! what was not synced (the rules: `store.rs`), markers included; the boot
//! id in `boot.json` then differs from the kernel's, and the journal
//! records written since the last boot's start-up are read for runs
//! submitted but not settled.
//!
//! Decisions and promotions are made holding the run's lock (see
//! [`RunGuard`]), so what `txn/` and `promoting/` hold for a run whose lock
//! another live process holds is work in progress, not a leftover: it is
//! skipped. Several `dryrun` commands may open the same local state
//! directory at once; each one's start-up recovery leaves the others' work
//! alone.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::live::{Plan, valid_receipt_id};
use super::run_id::valid_run_id;
use super::store::{RunGuard, Wait, write_atomic};
use super::{Engine, EngineError, entries};
use crate::journal::{Actor, Entry};
use crate::record::{Receipt, RunRecord, RunState};
use crate::sandbox;
use crate::workspace::apply::Workspace;

/// A reviewer decision between its journal record and its run record.
#[derive(Debug, Serialize, Deserialize)]
struct Transition {
    nonce: String,
    record: RunRecord,
}

/// Where [`Engine::recover_after_restart`] keeps the boot it last ran in.
const BOOT_FILE: &str = "boot.json";

#[derive(Debug, Serialize, Deserialize)]
struct BootMark {
    boot_id: String,
    /// The journal's length when this boot's first engine started: the
    /// runs this boot submits are journaled after it.
    journal_from: u64,
}

/// A start-up recovery after a restart of the machine, in progress.
struct Restart {
    _lock: nix::fcntl::Flock<std::fs::File>,
    boot_id: String,
    /// The last boot's runs were settled: its markers are all dead.
    lost_runs_settled: bool,
}

/// The kernel's id of this boot of the machine (new at every start).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What the journal's `run_submitted` record says of a run whose own
/// record was lost: enough to show it, and why it failed.
fn record_from_submission(b: &crate::journal::Body) -> RunRecord {
    let d = &b.data;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let list = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let record = serde_json::json!({
        "schema": crate::record::SCHEMA,
        "run_id": b.run_id,
        "task": d["task"].as_str(),
        "command": text(&d["command"]),
        "steps": d["steps"].as_array().map(|_| list(&d["steps"])),
        "workspace": text(&d["workspace"]),
        "created_at": b.at,
        "envelope_hash": text(&d["envelope_hash"]),
        "intent": {
            "summary": text(&d["intent"]["summary"]),
            "mode": text(&d["intent"]["mode"]),
            "expected_writes": list(&d["intent"]["expected_writes"]),
            "forbidden_paths": list(&d["intent"]["forbidden_paths"]),
        },
        "rehearsal": null, "verdict": null, "receipt": null,
        "state": RunState::Failed.as_str(),
        "submitted_by": b.actor,
    });
    serde_json::from_value(record).expect("a record built of a record's fields reads back")
}

/// `pid` and its start time, the identity of a live process (a pid alone
/// may be reused); `None` for a dead or zombie one.
pub(super) fn process_identity(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    // A zombie (or dead) process does no more work on its runs.
    if after.starts_with('Z') || after.starts_with('X') {
        return None;
    }
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{pid} {start}"))
}

/// The pid an in-flight marker names, and whether that process is alive:
/// the marker's link target (a file's content in markers of older
/// versions) is its pid and start time.
fn marker_owner(marker: &Path) -> (Option<u32>, bool) {
    let owner = std::fs::read_link(marker)
        .map(|t| t.to_string_lossy().into_owned())
        .or_else(|_| crate::state_file::read_to_string(marker))
        .unwrap_or_default();
    let pid: Option<u32> = owner.split(' ').next().and_then(|p| p.parse().ok());
    let alive = pid.is_some_and(|p| process_identity(p).as_deref() == Some(owner.as_str()));
    (pid, alive)
}

/// This process's [`process_identity`], read once (a daemon marks every
/// run with it; it changes only in a forked child, which reads its own).
fn own_identity() -> String {
    static OWN: std::sync::OnceLock<(u32, String)> = std::sync::OnceLock::new();
    let pid = std::process::id();
    match OWN.get() {
        Some((p, me)) if *p == pid => me.clone(),
        _ => match process_identity(pid) {
            Some(me) => {
                let _ = OWN.set((pid, me.clone()));
                me
            }
            None => String::new(),
        },
    }
}

/// Markers a long-lived engine keeps between runs, under names that are
/// no run id (`inflight/.idle-PID-START-N`, skipped by every scan): each is a link
/// whose target names this process, exactly what the next run's marker
/// must say, so marking a run renames one into place and clearing renames
/// it back. No inode is allocated or freed per run (on a file system
/// without a journal every inode freed in the last minutes slows each
/// later file creation). Those of a dead process are removed by the next
/// start's recovery.
#[derive(Default)]
pub(super) struct IdleMarkers {
    names: Vec<std::path::PathBuf>,
    next: u64,
}

/// At most this many idle markers are kept (the daemon's runs in flight
/// at once are bounded far below).
const MAX_IDLE_MARKERS: usize = 512;

const IDLE_MARKER_PREFIX: &str = ".idle-";

impl Engine {
    /// Keep cleared in-flight markers for later runs ([`IdleMarkers`]):
    /// for an engine that serves many runs (the daemon). A CLI's engine
    /// serves one and removes its marker.
    pub fn keep_idle_markers(&mut self) {
        self.idle_markers = Some(std::sync::Mutex::new(IdleMarkers::default()));
    }

    /// Made before the run's submission is journaled, and not synced: a
    /// symbolic link whose target names the owner, so it appears whole
    /// (another process's recovery must never read an empty owner, which
    /// reads as a dead one) in one call, with no file to write; or an idle
    /// marker of this process's, renamed into place (as whole).
    pub(super) fn mark_inflight(&self, run_id: &str) -> Result<(), EngineError> {
        let path = self.state_dir.join("inflight").join(run_id);
        if let Some(idle) = &self.idle_markers {
            let taken = idle.lock().unwrap_or_else(|p| p.into_inner()).names.pop();
            if let Some(name) = taken
                && std::fs::rename(&name, &path).is_ok()
            {
                return Ok(());
            }
        }
        let me = own_identity();
        std::os::unix::fs::symlink(me, &path).map_err(|source| EngineError::storage(path, source))
    }

    pub(super) fn clear_inflight(&self, run_id: &str) {
        let path = self.state_dir.join("inflight").join(run_id);
        if let Some(idle) = &self.idle_markers {
            let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.names.len() < MAX_IDLE_MARKERS {
                // Named after this process too: never another's name.
                let name = self.state_dir.join("inflight").join(format!(
                    "{IDLE_MARKER_PREFIX}{}-{}",
                    own_identity().replace(' ', "-"),
                    idle.next
                ));
                idle.next += 1;
                if std::fs::rename(&path, &name).is_ok() {
                    idle.names.push(name);
                    return;
                }
            }
        }
        let _ = std::fs::remove_file(path);
    }

    /// Remove this process's idle markers (a daemon's clean stop).
    pub fn drop_idle_markers(&self) {
        if let Some(idle) = &self.idle_markers {
            for name in idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .names
                .drain(..)
            {
                let _ = std::fs::remove_file(name);
            }
        }
    }

    /// The run's lock if no live process holds it; `None` while one does
    /// (its work in `txn/` or `promoting/` is in progress). A run whose
    /// directory is gone has nothing left to settle but its files here.
    fn lock_if_free(&self, run_id: &str) -> Result<Option<Option<RunGuard>>, EngineError> {
        match RunGuard::acquire(&self.run_dir(run_id), run_id, Wait::NotIfHeld) {
            Ok(Some(g)) => Ok(Some(Some(g))),
            Ok(None) => Ok(None),
            Err(EngineError::NotFound { .. } | EngineError::BadId { .. }) => Ok(Some(None)),
            Err(e) => Err(e),
        }
    }

    /// Settle what a dead process left in flight:
    /// - runs queued or rehearsing when their process died are marked
    ///   `failed` (journaled), and their scratch content is removed;
    /// - a reviewer decision whose journal record was written is applied to
    ///   the run record; one whose record was not is dropped (it was never
    ///   acknowledged).
    ///
    /// Returns the ids of runs marked failed.
    pub fn recover_interrupted(&self) -> Result<Vec<String>, EngineError> {
        let mut failed = Vec::new();
        // After a restart of the machine, one process settles what the
        // last boot left, holding a lock until `boot.json` names this boot
        // (after the markers below: no run of this boot starts before).
        let restart = self.recover_after_restart(&mut failed)?;
        let restarted = restart.as_ref().is_some_and(|r| r.lost_runs_settled);
        let dir = self.state_dir.join("inflight");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let id = e.file_name().to_string_lossy().into_owned();
            if id.starts_with(IDLE_MARKER_PREFIX) {
                // Another process's idle marker: removed once that process
                // is gone (a live one may rename it into place any time).
                if !marker_owner(&e.path()).1 {
                    let _ = std::fs::remove_file(e.path());
                }
                continue;
            }
            if !valid_run_id(&id) {
                continue;
            }
            let (pid, alive) = marker_owner(&e.path());
            // No process of an earlier boot is alive, whatever its pid.
            if !restarted && alive {
                continue; // its process is alive and still working on it
            }
            if let Ok(mut r) = self.get(&id)
                && r.state.can_fail_interrupted()
            {
                let was = r.state;
                r.state = RunState::Failed;
                r.error = Some(format!(
                    "interrupted: the process rehearsing this run (pid {}) stopped while it was {}; nothing was promoted; submit it again",
                    pid.map_or("?".into(), |p| p.to_string()),
                    was.as_str()
                ));
                let _ = std::fs::remove_dir_all(self.run_dir(&id).join("blobs"));
                sandbox::limits::reap_run_cgroups(&id);
                self.save(&r)?;
                self.journal
                    .append(&entries::run_failed(&r, Some(&Actor::system()), Some(was)))?;
                failed.push(id.clone());
            }
            let _ = std::fs::remove_file(e.path());
        }
        if let Some(r) = restart {
            self.mark_boot(r)?;
        }
        self.recover_promotions()?;
        let dir = self.state_dir.join("txn");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            let run_id = e.file_name().to_string_lossy().into_owned();
            if !valid_run_id(&run_id) {
                continue; // a transition being written (`.partial`)
            }
            let Some(_g) = self.lock_if_free(&run_id)? else {
                continue; // a live process is committing it
            };
            let Ok(bytes) = crate::state_file::read(&path) else {
                continue;
            };
            if let Ok(t) = serde_json::from_slice::<Transition>(&bytes)
                && self.journal.tail_contains(&t.nonce, 8 << 20)?
            {
                self.save(&t.record)?;
            }
            let _ = std::fs::remove_file(&path);
        }
        Ok(failed)
    }

    /// After a restart of the machine (the kernel's boot id is not the one
    /// `boot.json` names): every run whose `run_submitted` record the
    /// journal gained since the last boot's start-up and whose record is
    /// missing, cut short, or still queued or running is marked `failed`,
    /// with the reason, and that is journaled. `Some`: this process holds
    /// the lock that keeps others waiting until [`Engine::mark_boot`].
    fn recover_after_restart(
        &self,
        failed: &mut Vec<String>,
    ) -> Result<Option<Restart>, EngineError> {
        let path = self.state_dir.join(BOOT_FILE);
        let now = boot_id();
        let read = || {
            crate::state_file::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<BootMark>(&b).ok())
        };
        if read().is_some_and(|m| m.boot_id == now) {
            return Ok(None); // the common case: one small read
        }
        let dir = self.state_dir.join("inflight");
        let lock = std::fs::File::open(&dir)
            .map_err(|source| EngineError::storage(&dir, source))
            .and_then(|f| {
                nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
                    .map_err(|(_, e)| EngineError::storage(&dir, e.into()))
            })?;
        let mark = read();
        if mark.as_ref().is_some_and(|m| m.boot_id == now) {
            return Ok(None); // another process did it meanwhile
        }
        // No mark: a new state directory, or one of a version that synced
        // every write; nothing can have been lost.
        if let Some(m) = &mark {
            self.settle_lost_runs(m.journal_from, failed)?;
        }
        Ok(Some(Restart {
            _lock: lock,
            boot_id: now,
            lost_runs_settled: mark.is_some(),
        }))
    }

    /// `boot.json` names this boot, and the journal's length now: this
    /// boot's runs are journaled after it. Synced, once per boot.
    fn mark_boot(&self, r: Restart) -> Result<(), EngineError> {
        let path = self.state_dir.join(BOOT_FILE);
        let next = BootMark {
            boot_id: r.boot_id,
            journal_from: self.journal.len()?,
        };
        write_atomic(&path, &serde_json::to_vec(&next).expect("serializes"))
            .map_err(|source| EngineError::storage(&path, source))
    }

    /// [`Engine::recover_after_restart`]'s work: the runs submitted in the
    /// journal from byte `from` on that a stop of the machine left unsettled.
    fn settle_lost_runs(&self, from: u64, failed: &mut Vec<String>) -> Result<(), EngineError> {
        let mut seen = std::collections::HashSet::new();
        for b in self.journal.records_from(from)? {
            let Some(id) = b.run_id.clone().filter(|i| valid_run_id(i)) else {
                continue;
            };
            if b.kind != entries::EntryKind::RunSubmitted.as_str() || !seen.insert(id.clone()) {
                continue;
            }
            let (mut r, was, error) = match self.get(&id) {
                Ok(r) if !r.state.can_fail_interrupted() => continue,
                Ok(r) => {
                    let was = r.state;
                    let error = format!(
                        "interrupted: the machine stopped (power loss or crash) while this run was {}; nothing was promoted; submit it again",
                        was.as_str()
                    );
                    (r, Some(was), error)
                }
                Err(e) => {
                    let what = match e {
                        EngineError::NotFound { .. } => "it was missing",
                        _ => "it was cut short",
                    };
                    let error = format!(
                        "aborted: the machine stopped (power loss or crash) before this run's record reached the disk ({what}; its submission is in the journal); nothing was promoted; submit it again"
                    );
                    (record_from_submission(&b), None, error)
                }
            };
            r.state = RunState::Failed;
            r.error = Some(error);
            let _ = std::fs::remove_dir_all(self.run_dir(&id).join("blobs"));
            self.save(&r)?;
            self.journal
                .append(&entries::run_failed(&r, Some(&Actor::system()), was))?;
            failed.push(id);
        }
        Ok(())
    }

    /// A promotion whose process died: complete it if its receipt reached
    /// the journal, else undo it. Returns the run ids settled.
    fn recover_promotions(&self) -> Result<Vec<String>, EngineError> {
        let mut settled = Vec::new();
        let dir = self.state_dir.join("promoting");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let run_id = e.file_name().to_string_lossy().into_owned();
            let Some(_g) = self.lock_if_free(&run_id)? else {
                continue; // its promotion is in progress in a live process
            };
            // Read under the lock: a promotion that finished meanwhile
            // removed it.
            let Ok(text) = crate::state_file::read_to_string(&e.path()) else {
                continue;
            };
            let (rid, _owner) = text.split_once('\n').unwrap_or((text.as_str(), ""));
            let rdir = self.receipt_dir(rid);
            let plan: Option<Plan> = crate::state_file::read(&rdir.join("plan.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let receipt: Option<Receipt> = crate::state_file::read(&rdir.join("receipt.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let journaled = valid_receipt_id(rid)
                && self
                    .journal
                    .tail_contains(&format!("\"receipt_id\":\"{rid}\""), 8 << 20)?;
            match (plan, receipt, journaled) {
                (Some(_), Some(rc), true) => {
                    if let Ok(mut r) = self.get(&run_id) {
                        r.state = RunState::Promoted;
                        r.receipt = Some(rc.compact());
                        self.save(&r)?;
                    }
                }
                (Some(plan), _, false) => {
                    let outcome = Workspace::open(
                        Path::new(&plan.workspace),
                        &plan.workspace_identity,
                        self.live_file_cap(),
                    )
                    .map_err(|e| e.to_string())
                    .and_then(|ws| self.undo_ops(&ws, &plan.ops, &rdir.join("backup"), rid));
                    self.journal
                        .append(&entries::promotion_aborted(&run_id, rid, &outcome))?;
                    if outcome.is_ok() {
                        let _ = std::fs::remove_dir_all(&rdir);
                    }
                }
                _ => {
                    let _ = std::fs::remove_dir_all(&rdir);
                }
            }
            let _ = std::fs::remove_file(e.path());
            settled.push(run_id);
        }
        Ok(settled)
    }

    /// Journal first, then the record; a crash in between is settled by
    /// [`Engine::recover_interrupted`] from the transition file.
    pub(super) fn commit_transition(
        &self,
        record: &RunRecord,
        entry: &Entry,
        nonce: &str,
    ) -> Result<(), EngineError> {
        let txn = self.state_dir.join("txn").join(&record.run_id);
        let t = Transition {
            nonce: nonce.to_string(),
            record: record.clone(),
        };
        write_atomic(&txn, &serde_json::to_vec(&t).expect("serializes"))
            .map_err(|source| EngineError::storage(&txn, source))?;
        if let Err(e) = self.journal.append(entry) {
            let _ = std::fs::remove_file(&txn);
            return Err(e.into());
        }
        self.save(record)?;
        let _ = std::fs::remove_file(&txn);
        Ok(())
    }
}
