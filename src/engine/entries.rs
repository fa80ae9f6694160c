//! The journal entries the engine writes: one typed kind per event, each
//! built in one place here (the journal's format is `docs/journal-format.md`;
//! the kinds' names on disk do not change).

use crate::journal::{Actor, Entry};
use crate::record::{Receipt, RunRecord, RunState};

/// What happened to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    RunSubmitted,
    Verdict,
    RunFailed,
    RunCancelled,
    Approval,
    HostPromptGrant,
    Rejection,
    RunExpired,
    FleetDecisionRefused,
    RerunStarted,
    RerunMismatch,
    Promotion,
    PromotionAborted,
    Rollback,
}

impl EntryKind {
    /// The kind's name in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::RunSubmitted => "run_submitted",
            EntryKind::Verdict => "verdict",
            EntryKind::RunFailed => "run_failed",
            EntryKind::RunCancelled => "run_cancelled",
            EntryKind::Approval => "approval",
            EntryKind::HostPromptGrant => "host_prompt_grant",
            EntryKind::Rejection => "rejection",
            EntryKind::RunExpired => "run_expired",
            EntryKind::FleetDecisionRefused => "fleet_decision_refused",
            EntryKind::RerunStarted => "rerun_started",
            EntryKind::RerunMismatch => "rerun_mismatch",
            EntryKind::Promotion => "promotion",
            EntryKind::PromotionAborted => "promotion_aborted",
            EntryKind::Rollback => "rollback",
        }
    }
}

fn entry(kind: EntryKind, run_id: &str, actor: Option<&Actor>, data: serde_json::Value) -> Entry {
    Entry {
        kind: kind.as_str().into(),
        run_id: Some(run_id.to_string()),
        actor: actor.cloned(),
        data,
    }
}

/// A single-use token issued for an agent host's prompt to approve a run.
pub(super) fn host_prompt_grant(run_id: &str, actor: &Actor, host: &str, ttl_s: u64) -> Entry {
    entry(
        EntryKind::HostPromptGrant,
        run_id,
        Some(actor),
        serde_json::json!({"host": host, "expires_in_s": ttl_s}),
    )
}

/// An approval given in an agent host's own permission prompt.
pub(super) fn host_prompt_approval(
    r: &RunRecord,
    actor: &Actor,
    note: &str,
    host: &str,
    auth: &str,
    txn: &str,
) -> Entry {
    entry(
        EntryKind::Approval,
        &r.run_id,
        Some(actor),
        serde_json::json!({
            "note": note,
            "override_of_block": false,
            "decision_was": r.verdict.as_ref().map(|v| v.decision.as_str()),
            "state": r.state.as_str(),
            "authenticated_by": auth,
            "host": host,
            "submitted_by_uid": r.submitted_by.as_ref().map(|a| a.uid),
            "withdrawn_by_submitter": false,
            "txn": txn,
        }),
    )
}

/// A run accepted: what it will run, where, with what intent and risk.
pub(super) fn run_submitted(
    record: &RunRecord,
    actor: &Actor,
    risk: &crate::classify::Classification,
) -> Entry {
    let mut e = entry(
        EntryKind::RunSubmitted,
        &record.run_id,
        Some(actor),
        serde_json::json!({
            "task": record.task.as_deref().map(capped_text),
            "command": capped_text(&record.command),
            "steps": record.steps.as_deref().map(capped_list),
            "workspace": record.workspace,
            "envelope_hash": record.envelope_hash,
            "intent": {
                "summary": capped_text(&record.intent.summary),
                "mode": record.intent.mode,
                "expected_writes": capped_list(&record.intent.expected_writes),
                "forbidden_paths": capped_list(&record.intent.forbidden_paths),
            },
            "risk": {"score": risk.score, "level": risk.level, "policy_hash": risk.policy_hash},
        }),
    );
    // Judged under a fleet policy: which version (docs/fleet.md).
    if let (Some(v), Some(data)) = (record.fleet_policy_version, e.data.as_object_mut()) {
        data.insert("fleet_policy_version".into(), v.into());
    }
    e
}

/// A run's outcome: its verdict, or (with no verdict) its failure.
pub(super) fn outcome(r: &RunRecord) -> Entry {
    let (Some(v), Some(reh)) = (&r.verdict, &r.rehearsal) else {
        return run_failed(r, None, None);
    };
    entry(
        EntryKind::Verdict,
        &r.run_id,
        None,
        serde_json::json!({
            "decision": v.decision.as_str(),
            "state": r.state.as_str(),
            "reasons": capped_list(&v.reasons),
            "surprise_paths": capped_list(&v.surprise_paths),
            "forbidden_paths_touched": capped_list(&v.forbidden_paths_touched),
            "exit_code": reh.exit_code,
            "signal": reh.signal,
            "timed_out": reh.timed_out,
            "changes": reh.changes.len(),
            "change_set": change_set_hash(&reh.changes),
            "landlock_abi": reh.sandbox.landlock_abi,
            "risk": r.risk.as_ref().map(|k| serde_json::json!({"score": k.score, "level": k.level})),
            "evidence_hash": reh.evidence_hash,
            "would_be_actions": capped_list(&shown_actions(&reh.would_be_actions)),
            "replay_of": r.replay_of.as_ref().map(|l| &l.baseline),
        }),
    )
}

/// A run that ended `failed` without a verdict; `interrupted`: the state
/// it was in when its process died (settled at start-up by `actor`).
pub(super) fn run_failed(
    r: &RunRecord,
    actor: Option<&Actor>,
    interrupted: Option<RunState>,
) -> Entry {
    let mut data = serde_json::json!({"state": r.state.as_str(), "error": r.error});
    if let Some(was) = interrupted {
        data["interrupted_state"] = was.as_str().into();
    }
    entry(EntryKind::RunFailed, &r.run_id, actor, data)
}

/// Who asked to cancel a run, and when in its life.
pub(super) fn run_cancelled(run_id: &str, actor: &Actor, state: RunState) -> Entry {
    entry(
        EntryKind::RunCancelled,
        run_id,
        Some(actor),
        serde_json::json!({"state_when_cancelled": state.as_str()}),
    )
}

/// A reviewer's approval or rejection (a submitter's withdrawal).
pub(super) struct ReviewFacts<'a> {
    pub approve: bool,
    pub note: &'a str,
    pub overrode: bool,
    pub decision_was: Option<crate::verdict::Decision>,
    pub authenticated_by: &'a str,
    pub submitted_by_uid: Option<u32>,
    pub withdrawn: bool,
    pub txn: &'a str,
    /// A fleet decision: its id, role and person.
    pub fleet: Option<&'a crate::record::FleetApproval>,
}

pub(super) fn review(r: &RunRecord, actor: &Actor, f: &ReviewFacts<'_>) -> Entry {
    let mut e = entry(
        if f.approve {
            EntryKind::Approval
        } else {
            EntryKind::Rejection
        },
        &r.run_id,
        Some(actor),
        serde_json::json!({
            "note": f.note,
            "override_of_block": f.overrode,
            "decision_was": f.decision_was.map(|d| d.as_str()),
            "state": r.state.as_str(),
            "authenticated_by": f.authenticated_by,
            "submitted_by_uid": f.submitted_by_uid,
            "withdrawn_by_submitter": f.withdrawn,
            "txn": f.txn,
        }),
    );
    // Only a fleet decision says which (docs/journal-format.md).
    if let (Some(d), Some(data)) = (f.fleet, e.data.as_object_mut()) {
        data.insert("fleet_decision".into(), d.decision.into());
        data.insert("reviewer_role".into(), d.role.clone().into());
        data.insert("reviewer_person".into(), d.person.clone().into());
    }
    e
}

/// A fleet decision the run's host did not apply, and why.
pub(super) fn fleet_decision_refused(
    run_id: &str,
    actor: &Actor,
    decision: i64,
    role: &str,
    reason: &str,
) -> Entry {
    entry(
        EntryKind::FleetDecisionRefused,
        run_id,
        Some(actor),
        serde_json::json!({
            "fleet_decision": decision,
            "reviewer_role": role,
            "reason": reason,
        }),
    )
}

/// A run that waited for a person longer than the review queue keeps one.
pub(super) fn run_expired(
    r: &RunRecord,
    was: RunState,
    expiry: std::time::Duration,
    txn: &str,
) -> Entry {
    entry(
        EntryKind::RunExpired,
        &r.run_id,
        Some(&Actor::system()),
        serde_json::json!({
            "state_was": was.as_str(),
            "state": r.state.as_str(),
            "decision_was": r.verdict.as_ref().map(|v| v.decision.as_str()),
            "submitted_at": r.created_at,
            "expiry_s": expiry.as_secs(),
            "submitted_by_uid": r.submitted_by.as_ref().map(|a| a.uid),
            "txn": txn,
        }),
    )
}

/// A `live.mode: rerun` approval spent by its first live execution.
pub(super) fn rerun_started(r: &RunRecord, actor: &Actor, reason: &str, txn: &str) -> Entry {
    entry(
        EntryKind::RerunStarted,
        &r.run_id,
        Some(actor),
        serde_json::json!({
            "state": r.state.as_str(),
            "reason": reason,
            "txn": txn,
        }),
    )
}

/// The live rerun wrote something else than the rehearsal.
pub(super) fn rerun_mismatch(
    run_id: &str,
    actor: &Actor,
    live_run_id: &str,
    differences: &[String],
) -> Entry {
    entry(
        EntryKind::RerunMismatch,
        run_id,
        Some(actor),
        serde_json::json!({
            "live_run_id": live_run_id,
            "differences": capped_list(differences),
        }),
    )
}

/// A promotion's receipt, as written to `receipts/`, with a change list
/// longer than `RECEIPT_CHANGES_LISTED` replaced by its count and a summary
/// by directory (`change_set` commits to every change; the run record and
/// `receipts/<id>/receipt.json` list each).
pub(super) fn promotion(run_id: &str, actor: &Actor, receipt: &Receipt) -> Entry {
    entry(
        EntryKind::Promotion,
        run_id,
        Some(actor),
        serde_json::to_value(receipt.compact()).expect("serializes"),
    )
}

/// A promotion whose process stopped before its receipt was journaled,
/// and how undoing it went.
pub(super) fn promotion_aborted(
    run_id: &str,
    receipt_id: &str,
    undo: &Result<(), String>,
) -> Entry {
    entry(
        EntryKind::PromotionAborted,
        run_id,
        Some(&Actor::system()),
        serde_json::json!({
            "receipt_id": receipt_id,
            "reason": "the promoting process stopped before its receipt was journaled",
            "undo": match undo { Ok(()) => "complete".to_string(), Err(e) => e.clone() },
        }),
    )
}

/// A promotion rolled back.
pub(super) fn rollback(run_id: &str, actor: &Actor, receipt_id: &str, paths: &[String]) -> Entry {
    entry(
        EntryKind::Rollback,
        run_id,
        Some(actor),
        serde_json::json!({
            "receipt_id": receipt_id,
            "steps": paths.len(),
            "paths": capped_list(paths),
        }),
    )
}

/// Would-be actions as reviewers read them: `gh pr merge 12 → exit 0 (stub)`.
pub fn shown_actions(actions: &[crate::model::stubs::WouldBeAction]) -> Vec<String> {
    crate::model::promotion::shown_actions(actions)
}

/// BLAKE3 over the sorted (path, kind, before, after) list: what a receipt binds.
pub fn change_set_hash(changes: &[crate::model::Change]) -> String {
    let mut h = blake3::Hasher::new();
    let mut rows: Vec<String> = changes
        .iter()
        .map(|c| serde_json::to_string(c).expect("serializes"))
        .collect();
    rows.sort();
    for r in rows {
        h.update(r.as_bytes());
        h.update(b"\n");
    }
    h.finalize().to_hex().to_string()
}

/// Journal records stay small whatever a command does: long texts and
/// lists are cut, with their full length and BLAKE3 hash kept (the run
/// record holds everything).
const JOURNAL_TEXT_MAX: usize = 4096;
const JOURNAL_LIST_MAX: usize = 50;

fn capped_text(t: &str) -> serde_json::Value {
    if t.len() <= JOURNAL_TEXT_MAX {
        return serde_json::Value::String(t.to_string());
    }
    let mut end = JOURNAL_TEXT_MAX;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    serde_json::json!({
        "text": &t[..end],
        "bytes": t.len(),
        "blake3": blake3::hash(t.as_bytes()).to_hex().to_string(),
    })
}

fn capped_list(v: &[String]) -> serde_json::Value {
    let total: usize = v.iter().map(|s| s.len()).sum();
    if v.len() <= JOURNAL_LIST_MAX && total <= JOURNAL_TEXT_MAX * 4 {
        return serde_json::json!(v);
    }
    let mut h = blake3::Hasher::new();
    for s in v {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    serde_json::json!({
        "first": v.iter().take(JOURNAL_LIST_MAX).map(|s| capped_text(&s.chars().take(512).collect::<String>())).collect::<Vec<_>>(),
        "total": v.len(),
        "blake3": h.finalize().to_hex().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_fields_stay_small_whatever_the_command_does() {
        let many: Vec<String> = (0..10_000)
            .map(|i| {
                format!(
                    "[protected.path] created .github/workflows/{}{i}.yml",
                    "x".repeat(200)
                )
            })
            .collect();
        let v = capped_list(&many);
        let text = serde_json::to_string(&v).unwrap();
        assert!(text.len() < 64 * 1024, "{} bytes", text.len());
        assert_eq!(v["total"], 10_000);
        let small = vec!["a".to_string(), "b".to_string()];
        assert_eq!(capped_list(&small), serde_json::json!(["a", "b"]));
        let long = "é".repeat(10_000);
        let t = capped_text(&long);
        assert_eq!(t["bytes"], long.len());
        assert!(t["text"].as_str().unwrap().len() <= JOURNAL_TEXT_MAX);
    }

    #[test]
    fn a_failed_run_is_one_entry_shape_whoever_settles_it() {
        let mut r: RunRecord = serde_json::from_value(serde_json::json!({
            "schema": crate::record::SCHEMA, "run_id": "r1-0001", "task": null, "command": "true",
            "workspace": "/nowhere", "created_at": "2020-01-01T00:00:00Z",
            "envelope_hash": "", "verdict": null, "receipt": null, "rehearsal": null,
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "state": "failed",
        }))
        .unwrap();
        r.error = Some("boom".into());
        let plain = outcome(&r);
        assert_eq!(plain.kind, "run_failed");
        assert_eq!(
            plain.data,
            serde_json::json!({"state": "failed", "error": "boom"})
        );
        let interrupted = run_failed(&r, Some(&Actor::system()), Some(RunState::Running));
        assert_eq!(
            interrupted.data,
            serde_json::json!({"state": "failed", "error": "boom", "interrupted_state": "running"})
        );
    }
}
