//! A person's decisions on a run: approve, reject (or withdraw, by its
//! submitter), cancel. Each is authorised by [`super::authz`], journaled
//! (who, when, note) before the record changes.

use super::authz::{self, Verb};
use super::entries::{self, ReviewFacts};
use super::queue::expired;
use super::{Engine, EngineError, Input, ReviewAction, ReviewerAuth, now_rfc3339, unix_now};
use crate::journal::Actor;
use crate::model::run_state::{Approval, RejectCause};
use crate::record::{ApprovalRecord, RunRecord, RunState};

/// The longest note a reviewer may leave.
const NOTE_MAX_BYTES: usize = 4096;

impl Engine {
    /// A reviewer approves or rejects a run. Journaled (who, when, note,
    /// whether a block was overridden) before the record changes.
    pub fn review(
        &self,
        run_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
        action: ReviewAction,
        note: &str,
        override_block: bool,
    ) -> Result<RunRecord, EngineError> {
        self.review_bound(run_id, actor, auth, action, note, override_block, None)
    }

    /// [`Engine::review`] of a decision bound to the evidence its reviewer
    /// saw: with `evidence`, refused unless the run's rehearsal still has
    /// that evidence hash (checked under the run's lock, with its state).
    #[allow(clippy::too_many_arguments)]
    pub fn review_bound(
        &self,
        run_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
        action: ReviewAction,
        note: &str,
        override_block: bool,
        evidence: Option<&str>,
    ) -> Result<RunRecord, EngineError> {
        if note.len() > NOTE_MAX_BYTES {
            return Err(EngineError::invalid(
                Input::Request,
                format!("note: {} bytes; at most {NOTE_MAX_BYTES}", note.len()),
            ));
        }
        let _g = self.lock_run(run_id)?;
        let mut r = self.get(run_id)?;
        if self.expire_if_due(&mut r)? {
            return Err(expired(&r));
        }
        if let Some(seen) = evidence {
            let now = r.rehearsal.as_ref().map(|h| h.evidence_hash.as_str());
            if now != Some(seen) {
                return Err(EngineError::conflict(format!(
                    "run {run_id}: the decision was made on evidence {seen}, but the run's evidence is {}; nothing was applied",
                    now.unwrap_or("(none)")
                )));
            }
        }
        let decision = r.verdict.as_ref().map(|v| v.decision);
        // The submitter rejecting its own run withdraws it: no refund.
        let withdrawing = action == ReviewAction::Withdraw
            || (action == ReviewAction::Reject && authz::is_submitter(&r, actor));
        let overrode = match action {
            ReviewAction::Approve => {
                authz::authorize(Verb::Approve, &r, actor, auth)?;
                let overrode = may_approve(&r, override_block)?;
                r.state = RunState::Approved;
                overrode
            }
            ReviewAction::Reject | ReviewAction::Withdraw => {
                let verb = if action == ReviewAction::Withdraw {
                    Verb::Withdraw
                } else {
                    Verb::Reject
                };
                authz::authorize(verb, &r, actor, auth)?;
                if !r.state.can_reject() {
                    return Err(EngineError::in_state(
                        r.state,
                        format!(
                            "run {run_id} is {}; only a rehearsed run or one awaiting approval can be {}",
                            r.state.as_str(),
                            if withdrawing { "withdrawn" } else { "rejected" }
                        ),
                    ));
                }
                r.state = RunState::Rejected;
                r.rejected_because = Some(if withdrawing {
                    RejectCause::Withdrawn
                } else {
                    RejectCause::Reviewer
                });
                false
            }
        };
        let authenticated_by = match auth {
            ReviewerAuth::PeerCredentials { .. } => "peer_credentials",
            ReviewerAuth::LocalTtyConfirmed => "local_tty_confirmation",
            ReviewerAuth::LocalPresence => "local_terminal_presence",
            ReviewerAuth::Fleet(_) => "fleet_role",
        };
        let fleet = match auth {
            ReviewerAuth::Fleet(f) => Some(crate::record::FleetApproval {
                decision: f.decision,
                role: f.role.clone(),
                person: f.person.clone(),
            }),
            _ => None,
        };
        r.approvals.push(ApprovalRecord {
            action: match action {
                ReviewAction::Approve => "approve".into(),
                ReviewAction::Reject if !withdrawing => "reject".into(),
                ReviewAction::Reject | ReviewAction::Withdraw => "withdraw".into(),
            },
            by: actor.clone(),
            at: now_rfc3339(),
            note: note.to_string(),
            overrode_block: overrode,
            authenticated_by: authenticated_by.into(),
            fleet: fleet.clone(),
        });
        let nonce = new_nonce();
        let entry = entries::review(
            &r,
            actor,
            &ReviewFacts {
                approve: action == ReviewAction::Approve,
                note,
                overrode,
                decision_was: decision,
                authenticated_by,
                submitted_by_uid: r.submitted_by.as_ref().map(|a| a.uid),
                withdrawn: withdrawing,
                txn: &nonce,
                fleet: fleet.as_ref(),
            },
        );
        self.commit_transition(&r, &entry, &nonce)?;
        // Only a reviewer's rejection gives the points back: a submitter
        // that could withdraw after reading the evidence would rehearse
        // without limit.
        if action == ReviewAction::Reject
            && !withdrawing
            && let Some(b) = &self.budget
        {
            let _ = b.refund(run_id, unix_now());
        }
        Ok(r)
    }

    /// Journal that a fleet decision on `run_id` was not applied, and why
    /// (`fleet_decision_refused`): the host's answer to the fleet store,
    /// so it is given once and survives a restart.
    pub fn journal_fleet_refusal(
        &self,
        run_id: &str,
        actor: &Actor,
        decision: i64,
        role: &str,
        reason: &str,
    ) -> Result<(), EngineError> {
        self.journal.append(&entries::fleet_decision_refused(
            run_id, actor, decision, role, reason,
        ))?;
        Ok(())
    }

    /// Journal a cancellation request (who asked) before acting on it.
    pub fn journal_cancel(
        &self,
        run_id: &str,
        actor: &Actor,
        state: RunState,
    ) -> Result<(), EngineError> {
        self.journal
            .append(&entries::run_cancelled(run_id, actor, state))?;
        Ok(())
    }
}

/// Whether `r`'s state and decision let a reviewer approve it; `Ok(true)`
/// when the approval overrides a block (which the reviewer must say).
fn may_approve(r: &RunRecord, override_block: bool) -> Result<bool, EngineError> {
    let run_id = &r.run_id;
    match r.state.approval(r.verdict.as_ref().map(|v| v.decision)) {
        Approval::Allowed => Ok(false),
        Approval::Override if override_block => Ok(true),
        Approval::Override => Err(EngineError::in_state(
            r.state,
            format!(
                "run {run_id} was blocked; approving it overrides the block. Repeat with --override (\"override\": true); the journal records it as an override"
            ),
        )),
        Approval::NotNeeded => Err(EngineError::in_state(
            r.state,
            format!("run {run_id} needs no approval: its decision is promote"),
        )),
        Approval::NotApprovable => Err(EngineError::in_state(
            r.state,
            format!(
                "run {run_id} is {}; only a run awaiting approval (or a blocked run, with --override) can be approved",
                r.state.as_str()
            ),
        )),
    }
}

/// A random id tying a journal entry to its transition file.
pub(super) fn new_nonce() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the kernel's random source works");
    hex::encode(b)
}
