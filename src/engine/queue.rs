//! The review queue: a run a person can usefully decide
//! (`crate::model::waiting`) waits in `awaiting_approval` until a reviewer
//! approves or rejects it, its submitter withdraws it, or it expires.
//! Expiry is checked when a waiting run is read or reviewed through a
//! door, when runs are listed, and periodically by a running daemon
//! ([`Engine::expire_due_runs`]); an expired run ends `rejected` with
//! `rejected_because: expired`, journaled (`run_expired`) before the
//! record changes.
//!
//! Superseded runs: when a submitter runs the same command again in the
//! same workspace, each run of theirs still waiting there with that
//! command gets `superseded_by` (the newer run's id) and
//! leaves the queue view ([`in_review_queue`]): the agent redid it, and a
//! person deciding the old attempt decides nothing it will use. Its state
//! stays, so a reviewer who has it open may still decide it and it still
//! expires. Not journaled: no decision was made. A different command is a
//! different decision and is never superseded (a task name is not enough:
//! clients label unrelated runs with one): doors are asynchronous (an
//! MCP client may go on working while its run waits), so "the agent moved
//! on" alone does not mean it gave a run up. The runs that
//! wait are found through `waiting/<run_id>` markers (made when a run
//! starts waiting, dropped when found stale), so a submission reads the
//! queue, never every record.

use std::time::{Duration, SystemTime};

use super::review::new_nonce;
use super::{Engine, EngineError, entries};
use crate::model::run_state::RejectCause;
use crate::record::{RunRecord, RunState};

/// How long a run waits for a person by default (`dryrun daemon
/// --approval-expiry`, `DRYRUN_APPROVAL_EXPIRY_S`): 24 hours. A run
/// nobody decided within a day is stale: its agent has moved on, and the
/// workspace with it.
pub const DEFAULT_APPROVAL_EXPIRY: Duration = Duration::from_secs(86_400);

/// The verdict's note on a run whose decision is not promote but which
/// does not wait for a person (`crate::model::waiting`).
pub(super) const NOT_FOR_A_PERSON: &str = "this run does not wait for a person: what stopped it (listed in the reasons) is for the agent to fix, by changing the command, its intent or its limits and running it again";

/// When `r`, waiting since it was submitted, expires; `None` when it does
/// not wait or its submission time cannot be read (then it never expires
/// by itself: a reviewer still decides).
pub(crate) fn expires_at(r: &RunRecord, expiry: Duration) -> Option<SystemTime> {
    if !r.state.expires() {
        return None;
    }
    let created = humantime::parse_rfc3339(&r.created_at).ok()?;
    created.checked_add(expiry)
}

/// Is `r` in the review queue: waiting for a person, and not superseded
/// by its submitter's next run? (The queue view of every door: `dryrun
/// runs --awaiting`, `GET /v1/runs?state=awaiting_approval`, `dryrun
/// review`.)
pub fn in_review_queue(r: &RunRecord) -> bool {
    r.state == RunState::AwaitingApproval && r.superseded_by.is_none()
}

/// The refusal of a review that found the run expired.
pub(super) fn expired(r: &RunRecord) -> EngineError {
    EngineError::in_state(
        r.state,
        format!(
            "run {} waited longer than the review queue keeps a run and expired; nothing was approved. Rehearse it again",
            r.run_id
        ),
    )
}

impl Engine {
    /// How long runs wait for a person here.
    pub fn approval_expiry(&self) -> Duration {
        self.opts.approval_expiry
    }

    /// Expire `r` if its time is up; the caller holds the run's lock and
    /// has just read `r`. `Ok(true)`: it expired now (journaled, saved).
    pub(super) fn expire_if_due(&self, r: &mut RunRecord) -> Result<bool, EngineError> {
        let due = expires_at(r, self.opts.approval_expiry).is_some_and(|t| SystemTime::now() >= t);
        if !due {
            return Ok(false);
        }
        let was = r.state;
        r.state = RunState::Rejected;
        r.rejected_because = Some(RejectCause::Expired);
        let nonce = new_nonce();
        let entry = entries::run_expired(r, was, self.opts.approval_expiry, &nonce);
        self.commit_transition(r, &entry, &nonce)?;
        tracing::info!(run = %r.run_id, "a run waiting for approval expired");
        Ok(true)
    }

    /// Run `id`, expired first if its time is up (what a door shows).
    pub fn get_current(&self, id: &str) -> Result<RunRecord, EngineError> {
        let r = self.get(id)?;
        if expires_at(&r, self.opts.approval_expiry).is_none_or(|t| SystemTime::now() < t) {
            return Ok(r);
        }
        let _g = self.lock_run(id)?;
        let mut r = self.get(id)?;
        self.expire_if_due(&mut r)?;
        Ok(r)
    }

    /// Runs as [`Engine::list`] gives them, those whose wait is over
    /// expired first (and left out when they no longer match `state`).
    /// The review queue (`state` awaiting_approval) comes oldest first.
    pub fn list_current(&self, state: Option<RunState>) -> Result<Vec<RunRecord>, EngineError> {
        let now = SystemTime::now();
        let mut out = Vec::new();
        for r in self.list(state)? {
            let due = expires_at(&r, self.opts.approval_expiry).is_some_and(|t| now >= t);
            let r = if due {
                match self.get_current(&r.run_id) {
                    Ok(after) => after,
                    Err(e) => {
                        tracing::warn!(run = %r.run_id, "could not expire: {e}");
                        r
                    }
                }
            } else {
                r
            };
            let queue = state == Some(RunState::AwaitingApproval);
            if state.is_none_or(|s| s == r.state) && (!queue || in_review_queue(&r)) {
                out.push(r);
            }
        }
        if state == Some(RunState::AwaitingApproval) {
            out.reverse();
        }
        Ok(out)
    }

    /// Expire every waiting run whose time is up (a daemon's periodic
    /// check); how many still wait.
    pub fn expire_due_runs(&self) -> usize {
        self.list_current(Some(RunState::AwaitingApproval))
            .map(|q| q.len())
            .unwrap_or(0)
    }
}

impl Engine {
    fn waiting_dir(&self) -> std::path::PathBuf {
        self.state_dir.join("waiting")
    }

    /// Note that run `run_id` waits for a person (best effort: a run
    /// without its marker is never superseded, nothing worse).
    pub(super) fn mark_waiting(&self, run_id: &str) {
        let dir = self.waiting_dir();
        let made = std::fs::create_dir_all(&dir)
            .and_then(|_| std::fs::File::create(dir.join(run_id)).map(drop));
        if let Err(e) = made {
            tracing::warn!(run = %run_id, "could not mark the run as waiting: {e}");
        }
    }

    /// The newer run `newer` was accepted: every run its submitter left
    /// waiting in the same workspace (the same directory, by identity)
    /// with the same command gets `superseded_by`. Runs of other
    /// submitters are never touched, and a run whose lock is held (being
    /// reviewed now) is left as it is.
    pub(super) fn supersede_waiting(&self, newer: &RunRecord) {
        let Some(uid) = newer.submitted_by.as_ref().map(|a| a.uid) else {
            return;
        };
        let Ok(rd) = std::fs::read_dir(self.waiting_dir()) else {
            return;
        };
        for e in rd.flatten() {
            let id = e.file_name().to_string_lossy().into_owned();
            if !super::valid_run_id(&id) || id == newer.run_id {
                continue;
            }
            let stale = || {
                let _ = std::fs::remove_file(e.path());
            };
            let Ok(r) = self.get(&id) else {
                stale();
                continue;
            };
            if r.state != RunState::AwaitingApproval {
                stale();
                continue;
            }
            let same = |r: &RunRecord| {
                r.superseded_by.is_none()
                    && r.submitted_by.as_ref().map(|a| a.uid) == Some(uid)
                    && r.workspace_identity.is_some()
                    && r.workspace_identity == newer.workspace_identity
                    && r.run_id < newer.run_id
                    && r.command == newer.command
            };
            if !same(&r) {
                continue;
            }
            let Ok(Some(_g)) = super::store::RunGuard::acquire(
                &self.run_dir(&id),
                &id,
                super::store::Wait::NotIfHeld,
            ) else {
                continue;
            };
            let Ok(mut r) = self.get(&id) else { continue };
            if r.state != RunState::AwaitingApproval || !same(&r) {
                continue;
            }
            r.superseded_by = Some(newer.run_id.clone());
            match self.save(&r) {
                Ok(()) => stale(),
                Err(e) => tracing::warn!(run = %id, "could not mark the run superseded: {e}"),
            }
        }
    }
}
