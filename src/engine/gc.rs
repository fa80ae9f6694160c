//! The state directory's size budget: `dryrun gc`, and the same collection
//! at each housekeeping (an engine's start at most hourly, hourly in a
//! running daemon).
//!
//! What may go, oldest run first (by its directory's last change): first
//! the kept content (`runs/<id>/blobs/`) of runs no pending decision
//! needs, then whole runs (record, envelope, content), until the state
//! directory fits its budget. What never goes, whatever the budget:
//!
//! - the journal, receipts (`receipts/`: a promotion's plan and backups,
//!   what a rollback restores) and everything outside `runs/`;
//! - a run that is queued, running, awaiting approval (superseded or not)
//!   or approved: [`RunState::is_pending`], its content and its record;
//! - the record of a promoted run whose receipt was not rolled back
//!   (a rollback reads it and takes its lock);
//! - a run whose lock is held (a review, promotion or rollback in
//!   progress), one with a promotion or review in flight (`promoting/`,
//!   `txn/`, `inflight/`), and one whose record cannot be read (it may be
//!   a submission being written).
//!
//! Each run is judged and removed under its own lock, re-read under it: a
//! run that starts waiting or is approved meanwhile is not touched. Sizes
//! are apparent sizes (a sparse file counts in full), as the quota counts.

use std::path::Path;

use serde::Serialize;

use super::store::{RunGuard, Wait};
use super::{Engine, EngineError, valid_run_id};
use crate::record::{RunRecord, RunState};

/// The state directory's default size budget: 512 MiB
/// (`dryrun daemon --state-budget-mb`, `DRYRUN_STATE_BUDGET_MB`).
pub const DEFAULT_STATE_BUDGET_BYTES: u64 = 512 << 20;

/// What `dryrun gc` did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub budget_bytes: u64,
    /// The state directory's size before and after (apparent sizes).
    pub before_bytes: u64,
    pub after_bytes: u64,
    /// What was (would be) removed, oldest run first.
    pub removed: Vec<GcRemoval>,
    /// Runs kept whatever the budget because a decision, a promotion or a
    /// rollback needs them.
    pub kept_needed: usize,
    /// Still over the budget after everything that may go went: what is
    /// left is needed.
    pub over_budget: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GcRemoval {
    pub run_id: String,
    /// `content` (the run's kept content) or `run` (the whole run).
    pub what: &'static str,
    pub bytes: u64,
    pub state: Option<RunState>,
}

/// What of a run a pending decision, promotion or rollback needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Everything: it may still be decided, promoted or is in flight.
    All,
    /// Its record (and lock): a rollback of its receipt reads them.
    Record,
    /// Nothing: it may go.
    Nothing,
}

/// The one rule of what a run's state leaves collectable.
fn needs_of(r: &RunRecord) -> Needs {
    if r.state.is_pending() {
        return Needs::All;
    }
    let rollbackable = r
        .receipt
        .as_ref()
        .is_some_and(|rc| rc.rolled_back.is_none());
    if r.state == RunState::Promoted || rollbackable {
        return Needs::Record;
    }
    Needs::Nothing
}

/// A run directory as gc sees it, before its lock is taken.
struct Candidate {
    id: String,
    modified: std::time::SystemTime,
}

/// Apparent size of everything under `dir`, links not followed.
fn tree_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

impl Engine {
    /// Fit the state directory into `budget` (default: the configured
    /// one; `None` and none configured: only report), oldest first, never
    /// touching what a pending decision, promotion or rollback needs.
    pub fn gc(&self, budget: Option<u64>, dry_run: bool) -> Result<GcReport, EngineError> {
        let runs = self.state_dir.join("runs");
        let before = tree_bytes(&self.state_dir);
        let budget_bytes = budget.or(self.opts.retention.state_budget_bytes);
        let mut report = GcReport {
            dry_run,
            budget_bytes: budget_bytes.unwrap_or(u64::MAX),
            before_bytes: before,
            after_bytes: before,
            removed: Vec::new(),
            kept_needed: 0,
            over_budget: false,
        };
        let rd = std::fs::read_dir(&runs).map_err(|source| EngineError::storage(&runs, source))?;
        let mut candidates: Vec<Candidate> = rd
            .flatten()
            .filter_map(|e| {
                let id = e.file_name().to_string_lossy().into_owned();
                let m = std::fs::symlink_metadata(e.path()).ok()?;
                (valid_run_id(&id) && m.is_dir()).then(|| Candidate {
                    id,
                    modified: m.modified().unwrap_or(std::time::UNIX_EPOCH),
                })
            })
            .collect();
        candidates.sort_by(|a, b| a.modified.cmp(&b.modified).then(a.id.cmp(&b.id)));
        let Some(budget) = budget_bytes else {
            return Ok(report);
        };
        let mut size = before;
        let mut needed = std::collections::HashSet::new();
        let mut content_gone = std::collections::HashSet::new();
        // Content first, oldest first; then whole runs, oldest first.
        for whole in [false, true] {
            for c in &candidates {
                if size <= budget {
                    break;
                }
                let dir = self.run_dir(&c.id);
                let target = if whole {
                    dir.clone()
                } else {
                    dir.join("blobs")
                };
                if !target.exists() {
                    continue;
                }
                let Some((mut freed, state)) = self.collect_one(&c.id, &target, whole, dry_run)
                else {
                    needed.insert(c.id.clone());
                    continue;
                };
                // A dry run removed nothing: its content, counted in the
                // first pass, is not counted twice.
                if whole && dry_run && content_gone.contains(&c.id) {
                    freed = freed.saturating_sub(tree_bytes(&dir.join("blobs")));
                }
                if !whole {
                    content_gone.insert(c.id.clone());
                }
                size = size.saturating_sub(freed);
                report.removed.push(GcRemoval {
                    run_id: c.id.clone(),
                    what: if whole { "run" } else { "content" },
                    bytes: freed,
                    state: Some(state),
                });
            }
        }
        report.kept_needed = needed.len();
        report.after_bytes = if dry_run {
            size
        } else {
            tree_bytes(&self.state_dir)
        };
        report.over_budget = report.after_bytes > budget;
        if !dry_run && !report.removed.is_empty() {
            *self.usage.lock().unwrap_or_else(|p| p.into_inner()) = None;
            tracing::info!(
                removed = report.removed.len(),
                before,
                after = report.after_bytes,
                budget,
                "state directory collected to its budget"
            );
        }
        Ok(report)
    }

    /// Remove `target` (run `id`'s content, or the whole run when `whole`)
    /// if nothing needs it, judged under the run's lock from the record
    /// read under it. `None`: kept. Otherwise the bytes freed (or that
    /// would be, `dry_run`) and the run's state.
    fn collect_one(
        &self,
        id: &str,
        target: &Path,
        whole: bool,
        dry_run: bool,
    ) -> Option<(u64, RunState)> {
        let dir = self.run_dir(id);
        // A dry run only reads: it takes no lock (and makes no lock file).
        let _g = if dry_run {
            None
        } else {
            Some(RunGuard::acquire(&dir, id, Wait::NotIfHeld).ok()??)
        };
        let r = self.get(id).ok()?;
        let busy = ["promoting", "txn", "inflight"]
            .iter()
            .any(|d| self.state_dir.join(d).join(id).exists());
        let may = match needs_of(&r) {
            _ if busy => false,
            Needs::All => false,
            Needs::Record => !whole,
            Needs::Nothing => true,
        };
        if !may {
            return None;
        }
        let bytes = tree_bytes(target);
        if !dry_run {
            std::fs::remove_dir_all(target).ok()?;
        }
        Some((bytes, r.state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: &str, receipt: Option<serde_json::Value>) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "schema": crate::record::SCHEMA, "run_id": "r1-0001", "task": null, "command": "true",
            "workspace": "/nowhere", "created_at": "2020-01-01T00:00:00Z",
            "envelope_hash": "", "verdict": null, "receipt": receipt, "rehearsal": null,
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "state": state,
        }))
        .unwrap()
    }

    #[test]
    fn what_a_state_leaves_collectable() {
        for s in ["queued", "running", "awaiting_approval", "approved"] {
            assert_eq!(needs_of(&record(s, None)), Needs::All, "{s}");
        }
        assert_eq!(needs_of(&record("promoted", None)), Needs::Record);
        for s in ["rehearsed", "rejected", "failed"] {
            assert_eq!(needs_of(&record(s, None)), Needs::Nothing, "{s}");
        }
    }
}
