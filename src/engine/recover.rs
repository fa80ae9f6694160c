//! Crash recovery: what a dead process left in flight is settled before
//! the engine does anything else.
//!
//! ```text
//! inflight/<run_id>    a run queued or rehearsing (owner process: pid and start time)
//! txn/<run_id>         a reviewer decision between its journal entry and its record
//! promoting/<run_id>   a promotion in progress (receipt id, owner process)
//! ```
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
use super::store::{RunGuard, Wait, valid_run_id, write_atomic};
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

impl Engine {
    pub(super) fn mark_inflight(&self, run_id: &str) -> Result<(), EngineError> {
        let path = self.state_dir.join("inflight").join(run_id);
        let me = process_identity(std::process::id()).unwrap_or_default();
        // Whole or absent (renamed into place): another process's recovery
        // must never read it half-written, as an empty owner reads as a
        // dead one. Not synced: after a crash there is nobody to protect.
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, me)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| EngineError::storage(path, source))
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

    pub(super) fn clear_inflight(&self, run_id: &str) {
        let _ = std::fs::remove_file(self.state_dir.join("inflight").join(run_id));
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
        let dir = self.state_dir.join("inflight");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let id = e.file_name().to_string_lossy().into_owned();
            if !valid_run_id(&id) {
                continue;
            }
            let owner = std::fs::read_to_string(e.path()).unwrap_or_default();
            let pid: Option<u32> = owner.split(' ').next().and_then(|p| p.parse().ok());
            if pid.is_some_and(|p| process_identity(p).as_deref() == Some(owner.as_str())) {
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
            let Ok(bytes) = std::fs::read(&path) else {
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
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let (rid, _owner) = text.split_once('\n').unwrap_or((text.as_str(), ""));
            let rdir = self.receipt_dir(rid);
            let plan: Option<Plan> = std::fs::read(rdir.join("plan.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let receipt: Option<Receipt> = std::fs::read(rdir.join("receipt.json"))
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
