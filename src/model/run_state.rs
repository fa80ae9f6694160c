//! The states of a run and the verbs each allows.
//!
//! ```text
//! queued ─▶ running ─▶ rehearsed (decision promote) ─────────▶ promoted
//!                  │   (or a decision only the agent can act on:
//!                  │    it does not wait; see `waiting`)
//!                  ├─▶ awaiting_approval ─▶ approved ─▶ promoted
//!                  │   (a person can decide it: needs_approval;  ▲
//!                  │    blocked: override_required, approve --override)
//!                  │        │
//!                  ▼        ▼
//!                failed   rejected (by a reviewer, withdrawn by its
//!                                   submitter, or expired: see RejectCause)
//! ```
//!
//! Records written before the review queue existed hold blocked runs in
//! `rehearsed`, as do runs that did not wait because only their agent can
//! act on what stopped them; they stay approvable with the override and
//! rejectable, but never enter the queue or expire.

use serde::{Deserialize, Serialize};

use super::{Decision, Finding};

/// Does a run with this decision need an explicit override to be approved
/// (the record's `override_required`)?
pub(crate) fn override_required(decision: Decision) -> bool {
    decision == Decision::Blocked
}

/// Why a run ended `rejected` (the record's `rejected_because`): the state
/// name stays the one clients know; the cause says who closed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectCause {
    /// A reviewer rejected it.
    Reviewer,
    /// Its submitter withdrew it.
    Withdrawn,
    /// Nobody decided within the configured time.
    Expired,
}

impl RejectCause {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectCause::Reviewer => "reviewer",
            RejectCause::Withdrawn => "withdrawn",
            RejectCause::Expired => "expired",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Accepted by the daemon, waiting for a rehearsal slot.
    Queued,
    /// Being rehearsed.
    Running,
    Rehearsed,
    AwaitingApproval,
    Approved,
    Rejected,
    Promoted,
    Failed,
}

/// A run reached a state (the daemon's event stream and long polls).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunEvent {
    pub run_id: String,
    pub state: RunState,
    /// Who submitted the run: who else may see this event is decided from
    /// it; never sent to clients.
    #[serde(skip)]
    pub submitter_uid: Option<u32>,
}

impl RunEvent {
    pub(crate) fn of(run_id: &str, state: RunState, submitter_uid: Option<u32>) -> RunEvent {
        RunEvent {
            run_id: run_id.to_string(),
            state,
            submitter_uid,
        }
    }
}

/// What approving a run in some state means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// The run waits for a reviewer: approving it is the ordinary path.
    Allowed,
    /// The run was blocked: approving it overrides the block (only with
    /// an explicit override, journaled as one).
    Override,
    /// The run's decision is promote: it needs no approval.
    NotNeeded,
    /// Nothing in this state can be approved.
    NotApprovable,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        RunState::Queued,
        RunState::Running,
        RunState::Rehearsed,
        RunState::AwaitingApproval,
        RunState::Approved,
        RunState::Rejected,
        RunState::Promoted,
        RunState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Rehearsed => "rehearsed",
            RunState::AwaitingApproval => "awaiting_approval",
            RunState::Approved => "approved",
            RunState::Rejected => "rejected",
            RunState::Promoted => "promoted",
            RunState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The state a rehearsal ends in, given its verdict: a run waits for a
    /// person only when a person can usefully decide it
    /// ([`super::waiting::waits_for_person`]; a blocked one approvable only
    /// with an override, see [`override_required`]); every other run ends
    /// `rehearsed` with its decision (promote, or what the agent must fix
    /// by running again).
    pub fn after_verdict(decision: Decision, findings: &[Finding]) -> Self {
        if super::waiting::waits_for_person(decision, findings) {
            RunState::AwaitingApproval
        } else {
            RunState::Rehearsed
        }
    }

    /// The rehearsal has not finished (queued or running): a process may
    /// still be working on it.
    pub fn is_in_flight(self) -> bool {
        matches!(self, RunState::Queued | RunState::Running)
    }

    /// Still waiting on something (a slot, a rehearsal, a reviewer, a
    /// promotion): retention keeps it.
    pub fn is_pending(self) -> bool {
        self.is_in_flight() || matches!(self, RunState::AwaitingApproval | RunState::Approved)
    }

    /// May the live lane carry the run out? A rehearsed run whose decision
    /// is promote, or one a reviewer approved.
    pub fn can_promote(self, decision: Option<Decision>) -> bool {
        matches!(
            (self, decision),
            (RunState::Rehearsed, Some(Decision::Promote)) | (RunState::Approved, _)
        )
    }

    /// What approving the run would mean (see [`Approval`]).
    pub fn approval(self, decision: Option<Decision>) -> Approval {
        match (self, decision) {
            (RunState::AwaitingApproval | RunState::Rehearsed, Some(Decision::Blocked)) => {
                Approval::Override
            }
            (RunState::AwaitingApproval, _) => Approval::Allowed,
            (RunState::Rehearsed, _) => Approval::NotNeeded,
            _ => Approval::NotApprovable,
        }
    }

    /// May a reviewer approve it (with `override_block` for a blocked run)?
    pub fn can_approve(self, decision: Option<Decision>, override_block: bool) -> bool {
        match self.approval(decision) {
            Approval::Allowed => true,
            Approval::Override => override_block,
            Approval::NotNeeded | Approval::NotApprovable => false,
        }
    }

    /// May it be rejected (or withdrawn by its submitter)? Only a rehearsed
    /// run or one awaiting approval.
    pub fn can_reject(self) -> bool {
        matches!(self, RunState::AwaitingApproval | RunState::Rehearsed)
    }

    /// May a submitter withdraw it? The same states a reviewer may reject.
    pub fn can_withdraw(self) -> bool {
        self.can_reject()
    }

    /// Does a run waiting in this state expire (see [`RejectCause::Expired`])?
    pub fn expires(self) -> bool {
        self == RunState::AwaitingApproval
    }

    /// May an interrupted rehearsal be marked failed (crash recovery)?
    pub fn can_fail_interrupted(self) -> bool {
        self.is_in_flight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_as_the_record_writes_them() {
        for s in RunState::ALL {
            assert_eq!(RunState::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::String(s.as_str().into())
            );
        }
        assert_eq!(RunState::parse("nope"), None);
    }

    #[test]
    fn promotion_needs_promote_or_an_approval() {
        use Decision::*;
        for s in RunState::ALL {
            for d in [None, Some(Promote), Some(NeedsApproval), Some(Blocked)] {
                let want =
                    s == RunState::Approved || (s == RunState::Rehearsed && d == Some(Promote));
                assert_eq!(s.can_promote(d), want, "{s:?} {d:?}");
            }
        }
    }

    #[test]
    fn approval_and_rejection() {
        use Decision::*;
        assert!(RunState::AwaitingApproval.can_approve(Some(NeedsApproval), false));
        assert!(!RunState::AwaitingApproval.can_approve(Some(Blocked), false));
        assert!(RunState::AwaitingApproval.can_approve(Some(Blocked), true));
        assert!(override_required(Blocked) && !override_required(NeedsApproval));
        assert!(!RunState::Rehearsed.can_approve(Some(Blocked), false));
        assert!(RunState::Rehearsed.can_approve(Some(Blocked), true));
        assert!(!RunState::Rehearsed.can_approve(Some(Promote), true));
        assert_eq!(
            RunState::Rehearsed.approval(Some(Promote)),
            Approval::NotNeeded
        );
        for s in [
            RunState::Queued,
            RunState::Running,
            RunState::Approved,
            RunState::Rejected,
            RunState::Promoted,
            RunState::Failed,
        ] {
            assert!(!s.can_approve(Some(Blocked), true), "{s:?}");
            assert!(!s.can_reject(), "{s:?}");
        }
        assert!(RunState::Rehearsed.can_reject());
        assert!(RunState::AwaitingApproval.can_reject());
    }

    #[test]
    fn verdicts_lead_to_states_and_pending_states_are_kept() {
        let person = |d| {
            vec![Finding {
                rule: "protected.path".into(),
                decision: d,
                message: String::new(),
            }]
        };
        let failure = vec![Finding {
            rule: "evidence.exit_status".into(),
            decision: Decision::Blocked,
            message: String::new(),
        }];
        assert_eq!(
            RunState::after_verdict(Decision::NeedsApproval, &person(Decision::NeedsApproval)),
            RunState::AwaitingApproval
        );
        assert_eq!(
            RunState::after_verdict(Decision::Blocked, &person(Decision::Blocked)),
            RunState::AwaitingApproval
        );
        assert_eq!(
            RunState::after_verdict(Decision::Blocked, &failure),
            RunState::Rehearsed
        );
        assert_eq!(
            RunState::after_verdict(Decision::Promote, &[]),
            RunState::Rehearsed
        );
        let pending: Vec<RunState> = RunState::ALL
            .into_iter()
            .filter(|s| s.is_pending())
            .collect();
        assert_eq!(
            pending,
            [
                RunState::Queued,
                RunState::Running,
                RunState::AwaitingApproval,
                RunState::Approved
            ]
        );
        assert!(RunState::Queued.can_fail_interrupted());
        assert!(!RunState::Rehearsed.can_fail_interrupted());
    }
}
