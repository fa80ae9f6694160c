//! The live lane (SPEC §1 step 7, §8): promote a run by applying its
//! reviewed change set to the real workspace, with a single-use receipt in
//! the journal; roll a promotion back.
//!
//! State directory:
//!
//! ```text
//! receipts/<receipt_id>/plan.json      the steps, what each expects before and leaves after
//! receipts/<receipt_id>/backup/<n>     the content each step replaced
//! receipts/<receipt_id>/receipt.json   the receipt (written before it is journaled)
//! promoting/<run_id>                   a promotion in progress (receipt id, owner process)
//! ```
//!
//! Crash safety: the plan and backups are durable before the first write;
//! the receipt is journaled only after the last write. At start-up, a
//! promotion whose receipt is in the journal is completed (the run record
//! marked promoted); any other is undone step by step from the backups. So
//! the workspace ends fully promoted with its receipt, or as it was.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Engine, EngineError, ReviewerAuth, is_approver, now_rfc3339, process_identity};
use crate::journal::{Actor, Entry};
use crate::model::{Change, ChangeKind, FileType, Refusal, promotion};
use crate::record::{
    LiveMode, LiveResult, RECEIPT_SCHEMA, Receipt, ReceiptChange, RolledBack, RunRecord, RunState,
};
use crate::workspace::apply::{Action, ApplyError, Expect, Op, Workspace};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Plan {
    receipt_id: String,
    run_id: String,
    workspace: String,
    workspace_identity: crate::workspace::apply::Identity,
    ops: Vec<Op>,
    started_at: String,
}

/// Receipt ids are ours: `p` + the run id's shape.
pub fn valid_receipt_id(id: &str) -> bool {
    id.len() <= 64
        && id.starts_with('p')
        && id[1..].chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

fn new_receipt_id() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the kernel's random source works");
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("p{secs:x}-{}", hex::encode(b))
}

fn depth(p: &[u8]) -> usize {
    p.iter().filter(|b| **b == b'/').count()
}

fn apply_err(e: ApplyError) -> EngineError {
    EngineError::Conflict(e.to_string())
}

/// Turn the rehearsal's change list into ordered steps, refusing what must
/// never go live. Deletions first (deepest first), then directories and
/// files (shallowest first), then permission changes (deepest first).
fn plan_ops(
    changes: &[Change],
    blobs: &Path,
) -> Result<(Vec<Op>, usize, Vec<String>), EngineError> {
    let mut refusals = Vec::new();
    let mut notes = Vec::new();
    let mut deletions = Vec::new();
    let mut writes = Vec::new();
    let mut modes = Vec::new();
    let mut identical = 0;
    for c in changes {
        let shown = crate::workspace::paths::escape_for_humans(&c.path_bytes());
        // The one rule of what may never go live (the verdict blocks on the
        // same refusals, with the same words).
        let refused = promotion::refusals(c);
        if !refused.is_empty() {
            refusals.extend(refused.iter().map(|r| r.message(&shown)));
            continue;
        }
        if c.kind == ChangeKind::Identical {
            identical += 1;
            continue;
        }
        if let Some(other) = &c.hardlink_of {
            notes.push(format!(
                "{shown} was a hard link of {other} in the rehearsal; it is written as its own file"
            ));
        }
        let rel = c.path_bytes();
        let path_hex = hex::encode(&rel);
        let before = match (c.kind, &c.before, c.mode_before) {
            (ChangeKind::Created, _, _) => Expect::Absent,
            (_, Some(h), m) => Expect::Hashed {
                hash: h.clone(),
                mode: m.filter(|_| c.kind == ChangeKind::Metadata),
            },
            (ChangeKind::Deleted, None, _) if c.file_type == FileType::Dir => Expect::Dir {
                mode: c.mode_before,
            },
            (_, None, m) if c.file_type == FileType::Dir || c.kind == ChangeKind::Metadata => {
                Expect::Dir { mode: m }
            }
            // `promotion::refusals` already refused these; kept so the
            // planner never writes without a check, whatever the model says.
            _ => {
                refusals.push(Refusal::NoBeforeHash.message(&shown));
                continue;
            }
        };
        let op = |action: Action, after: Expect| Op {
            path_hex: path_hex.clone(),
            path: c.path.clone(),
            action,
            expect_before: before.clone(),
            after,
            backup: None,
        };
        match (c.kind, c.file_type) {
            (ChangeKind::Deleted, _) => deletions.push(op(Action::Remove, Expect::Absent)),
            (ChangeKind::Metadata, ft) => {
                let mode = c.mode_after.unwrap_or(0o644);
                let after = match (&before, ft) {
                    (_, FileType::Dir) => Expect::Dir { mode: Some(mode) },
                    (Expect::Hashed { hash, .. }, _) => Expect::Hashed {
                        hash: hash.clone(),
                        mode: Some(mode),
                    },
                    _ => Expect::Dir { mode: Some(mode) },
                };
                if ft != FileType::Symlink {
                    modes.push(op(Action::Chmod { mode }, after));
                }
            }
            (_, FileType::Dir) => {
                let mode = c.mode_after.unwrap_or(0o755);
                writes.push(op(
                    Action::MakeDir { mode: 0o700 },
                    Expect::Dir { mode: None },
                ));
                modes.push(Op {
                    expect_before: Expect::Dir { mode: None },
                    ..op(Action::Chmod { mode }, Expect::Dir { mode: Some(mode) })
                });
            }
            (_, FileType::File) => {
                let Some(hash) = c.after.clone() else {
                    refusals.push(Refusal::NoContentHash.message(&shown));
                    continue;
                };
                let blob = blobs.join(&hash);
                if !blob.is_file() {
                    refusals.push(format!(
                        "{shown}: its content is no longer kept (scratch retention); rehearse again"
                    ));
                    continue;
                }
                let mode = c.mode_after.unwrap_or(0o644) & 0o1777;
                writes.push(op(
                    Action::WriteFile {
                        blob,
                        hash: hash.clone(),
                        mode,
                    },
                    Expect::Hashed {
                        hash,
                        mode: Some(mode),
                    },
                ));
            }
            (_, FileType::Symlink) => {
                let (Some(t), Some(h)) = (&c.symlink_target, &c.after) else {
                    refusals.push(Refusal::SymlinkTargetMissing.message(&shown));
                    continue;
                };
                writes.push(op(
                    Action::Symlink {
                        target_hex: hex::encode(t.as_bytes()),
                    },
                    Expect::Hashed {
                        hash: h.clone(),
                        mode: None,
                    },
                ));
            }
            (_, FileType::Other) => unreachable!("refused above"),
        }
    }
    if !refusals.is_empty() {
        return Err(EngineError::Conflict(format!(
            "the change set cannot be promoted; nothing was written:\n  {}",
            refusals.join("\n  ")
        )));
    }
    deletions.sort_by_key(|o| std::cmp::Reverse(depth(&o.path_bytes())));
    writes.sort_by_key(|o| {
        (
            depth(&o.path_bytes()),
            !matches!(o.action, Action::MakeDir { .. }),
        )
    });
    modes.sort_by_key(|o| std::cmp::Reverse(depth(&o.path_bytes())));
    let mut ops = deletions;
    ops.extend(writes);
    ops.extend(modes);
    Ok((ops, identical, notes))
}

/// Who may promote or roll back: the submitter, root and reviewers (over
/// the daemon); anyone on their own state directory (local).
fn may_carry_out(r: &RunRecord, actor: &Actor, auth: &ReviewerAuth) -> Result<(), EngineError> {
    match auth {
        ReviewerAuth::LocalTtyConfirmed => Ok(()),
        ReviewerAuth::PeerCredentials { approver_group } => {
            let submitter = r.submitted_by.as_ref().map(|a| a.uid);
            if actor.uid == 0
                || submitter == Some(actor.uid)
                || is_approver(actor.uid, approver_group)
            {
                Ok(())
            } else {
                Err(EngineError::Forbidden(format!(
                    "uid {} may not promote run {}: only its submitter, root and reviewers may",
                    actor.uid, r.run_id
                )))
            }
        }
    }
}

impl Engine {
    /// The largest file the live lane hashes or backs up, and the most its
    /// backups of one promotion may take: what one rehearsal may keep (the
    /// disk ceiling plus room for "before" copies), at apparent size.
    fn live_file_cap(&self) -> u64 {
        crate::sandbox::spec::kept_content_budget(self.opts.ceilings.disk_mb << 20)
    }

    fn receipt_dir(&self, rid: &str) -> PathBuf {
        self.state_dir.join("receipts").join(rid)
    }

    fn promoting_marker(&self, run_id: &str) -> PathBuf {
        self.state_dir.join("promoting").join(run_id)
    }

    /// The receipt `id`.
    pub fn receipt(&self, id: &str) -> Result<Receipt, EngineError> {
        if !valid_receipt_id(id) {
            return Err(EngineError::Invalid(format!("{id:?} is not a receipt id")));
        }
        let p = self.receipt_dir(id).join("receipt.json");
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| EngineError::Corrupt {
                path: p,
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(EngineError::NoSuchReceipt(id.to_string()))
            }
            Err(source) => Err(EngineError::State { path: p, source }),
        }
    }

    /// Promote a run: apply its rehearsed change set to the real workspace
    /// (mode `apply`). Refuses unless the decision was promote or a reviewer
    /// approved it, refuses a second promotion, refuses drift, and undoes
    /// itself if any step fails.
    pub fn promote(
        &self,
        run_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
        host_env: &std::collections::BTreeMap<String, String>,
    ) -> Result<RunRecord, EngineError> {
        let lock = self.run_lock(run_id);
        let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut spent = false;
        let result = self.promote_locked(run_id, actor, auth, host_env, &mut spent);
        if let (Err(e), true) = (&result, spent)
            && let Ok(mut r) = self.get(run_id)
            && r.state == RunState::Failed
        {
            // The approval is gone whatever went wrong after the live
            // execution started; the record says why the run ended here.
            r.error = Some(format!("{RERUN_SPENT}; the live lane then failed: {e}"));
            let _ = self.save(&r);
        }
        result
    }

    /// A `live.mode: rerun` approval is spent by the first live execution,
    /// whatever its outcome: before the command runs live, the run leaves
    /// `approved` for `failed` (journaled, durable), so a crash, a failed
    /// live run or a mismatch never leaves an approval to run it again.
    /// Only a successful promotion moves it on to `promoted`.
    fn spend_rerun_approval(&self, r: &mut RunRecord, actor: &Actor) -> Result<(), EngineError> {
        r.state = RunState::Failed;
        r.error = Some(format!(
            "{RERUN_SPENT}; the live execution started at {}",
            now_rfc3339()
        ));
        let nonce = {
            let mut b = [0u8; 16];
            getrandom::fill(&mut b).expect("the kernel's random source works");
            hex::encode(b)
        };
        let entry = Entry {
            kind: "rerun_started".into(),
            run_id: Some(r.run_id.clone()),
            actor: Some(actor.clone()),
            data: serde_json::json!({
                "state": r.state.as_str(),
                "reason": RERUN_SPENT,
                "txn": nonce,
            }),
        };
        self.commit_transition(r, &entry, &nonce)
    }

    fn promote_locked(
        &self,
        run_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
        host_env: &std::collections::BTreeMap<String, String>,
        spent: &mut bool,
    ) -> Result<RunRecord, EngineError> {
        let mut r = self.get(run_id)?;
        may_carry_out(&r, actor, auth)?;
        if let Some(of) = &r.rerun_of {
            return Err(EngineError::Conflict(format!(
                "run {run_id} is the live rerun of {of}: it is evidence, not something to promote"
            )));
        }
        if let Some(rc) = &r.receipt {
            return Err(EngineError::Conflict(format!(
                "run {run_id} was already promoted (receipt {}); a receipt is single-use: rehearse again to promote again",
                rc.receipt_id
            )));
        }
        let decision = r.verdict.as_ref().map(|v| v.decision);
        match (r.state, decision) {
            (s, d) if s.can_promote(d) => {}
            (RunState::AwaitingApproval, _) => {
                return Err(EngineError::Conflict(format!(
                    "run {run_id} is awaiting approval; a reviewer must approve it first"
                )));
            }
            (s, d) => {
                return Err(EngineError::Conflict(format!(
                    "run {run_id} is {} (decision {}); only a run whose decision is promote, or one a reviewer approved, can be promoted",
                    s.as_str(),
                    d.map(|d| d.as_str()).unwrap_or("none")
                )));
            }
        }
        let reh = r.rehearsal.clone().unwrap_or_default();
        if reh.limits_hit.contains(&crate::model::LimitHit::Record) {
            return Err(EngineError::Conflict(format!(
                "run {run_id}'s record was cut to its size cap, so its change list is incomplete; it cannot be promoted. Rehearse a smaller change"
            )));
        }
        let mut mode = LiveMode::Apply;
        let mut live_run: Option<RunRecord> = None;
        let (changes, blobs) = if let Some(env) = self.rerun_envelope(run_id)? {
            if r.state != RunState::Approved {
                return Err(EngineError::Conflict(format!(
                    "run {run_id} declares live.mode: rerun, which always needs a reviewer's approval first"
                )));
            }
            mode = LiveMode::Rerun;
            let extra_env = live_env(&env, host_env)?;
            self.spend_rerun_approval(&mut r, actor)?;
            *spent = true;
            let live = self.rerun_live(run_id, &env, actor, extra_env)?;
            let differences = compare_change_sets(
                &reh.changes,
                &live.rehearsal.clone().unwrap_or_default().changes,
            );
            if !differences.is_empty() {
                self.journal.append(&Entry {
                    kind: "rerun_mismatch".into(),
                    run_id: Some(run_id.to_string()),
                    actor: Some(actor.clone()),
                    data: serde_json::json!({
                        "live_run_id": live.run_id,
                        "differences": super::capped_list(&differences),
                    }),
                })?;
                return Err(EngineError::Drift(format!(
                    "the live rerun ({}) did not write what the rehearsal wrote; nothing was applied:\n  {}",
                    live.run_id,
                    differences
                        .iter()
                        .take(20)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n  ")
                )));
            }
            let blobs = self.run_dir(&live.run_id).join("blobs");
            let changes = live.rehearsal.clone().unwrap_or_default().changes;
            live_run = Some(live);
            (changes, blobs)
        } else {
            (reh.changes.clone(), self.run_dir(run_id).join("blobs"))
        };
        let (mut ops, identical, notes) = plan_ops(&changes, &blobs)?;
        let identity = r.workspace_identity.ok_or_else(|| {
            EngineError::Conflict(format!(
                "run {run_id} does not record which directory it rehearsed; rehearse again"
            ))
        })?;
        let ws = Workspace::open(Path::new(&r.workspace), &identity, self.live_file_cap())
            .map_err(|e| EngineError::Drift(format!("{e}")))?;

        // Drift: every touched path must still hold what the rehearsal saw
        // (checked against the first step on each path).
        let mut drift = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for op in &ops {
            if !seen.insert(op.path_hex.clone()) {
                continue;
            }
            match ws.state(&op.path_bytes()) {
                Ok(now) if op.expect_before.matches(&now) => {}
                Ok(now) => drift.push(format!(
                    "{}: the rehearsal saw {}, the workspace now holds {}",
                    op.path,
                    op.expect_before.describe(),
                    now.describe()
                )),
                Err(e) => drift.push(e.to_string()),
            }
        }
        if !drift.is_empty() {
            drift.dedup();
            return Err(EngineError::Drift(format!(
                "the workspace changed since run {run_id} was rehearsed; nothing was written:\n  {}",
                drift.join("\n  ")
            )));
        }

        // Plan and backups, durable before the first write.
        let rid = new_receipt_id();
        let rdir = self.receipt_dir(&rid);
        let backups = rdir.join("backup");
        std::fs::create_dir_all(&backups).map_err(|source| EngineError::State {
            path: backups.clone(),
            source,
        })?;
        let mut backed_up = 0u64;
        for (i, op) in ops.iter_mut().enumerate() {
            if let Expect::Hashed { hash, .. } = &op.expect_before {
                let rel = op.path_bytes();
                let b = match ws.state(&rel).map_err(apply_err)? {
                    crate::workspace::apply::State::Symlink { .. } => {
                        ws.backup_symlink(&rel).map_err(apply_err)?
                    }
                    _ => ws
                        .backup_file(&rel, &backups.join(i.to_string()))
                        .map_err(apply_err)?,
                };
                backed_up += std::fs::symlink_metadata(backups.join(i.to_string()))
                    .map(|m| m.len())
                    .unwrap_or(0);
                if backed_up > self.live_file_cap() {
                    let _ = std::fs::remove_dir_all(&rdir);
                    return Err(EngineError::Conflict(format!(
                        "backing up what run {run_id} replaces takes more than {} bytes (at apparent size), the most one promotion keeps for rollback; nothing was written",
                        self.live_file_cap()
                    )));
                }
                if &b.hash != hash {
                    let _ = std::fs::remove_dir_all(&rdir);
                    return Err(EngineError::Drift(format!(
                        "{} changed while it was being backed up; nothing was written",
                        op.path
                    )));
                }
                op.backup = Some(b);
            }
        }
        let plan = Plan {
            receipt_id: rid.clone(),
            run_id: run_id.to_string(),
            workspace: r.workspace.clone(),
            workspace_identity: identity,
            ops,
            started_at: now_rfc3339(),
        };
        let receipt = Receipt {
            schema: RECEIPT_SCHEMA.into(),
            receipt_id: rid.clone(),
            run_id: run_id.to_string(),
            promoted_at: now_rfc3339(),
            promoted_by: actor.clone(),
            mode,
            workspace: r.workspace.clone(),
            command: r.command.clone(),
            envelope_hash: r.envelope_hash.clone(),
            policy_hash: r.risk.as_ref().map(|k| k.policy_hash.clone()),
            landlock_abi: reh.sandbox.landlock_abi,
            change_set: super::change_set_hash(&reh.changes),
            evidence_hash: reh.evidence_hash.clone(),
            calls_not_made: if live_run.is_none() {
                super::shown_actions(&reh.would_be_actions)
            } else {
                Vec::new()
            },
            changes: reh
                .changes
                .iter()
                .map(|c| ReceiptChange {
                    path: c.path.clone(),
                    path_hex: c.path_hex.clone(),
                    kind: c.kind,
                    file_type: c.file_type,
                    before: c.before.clone(),
                    after: c.after.clone(),
                })
                .collect(),
            verdict: serde_json::json!({
                "decision": decision.map(|d| d.as_str()),
                "reasons": r.verdict.as_ref().map(|v| v.reasons.clone()).unwrap_or_default(),
            }),
            approvals: r.approvals.clone(),
            live_result: LiveResult {
                applied_steps: plan.ops.len(),
                skipped_identical: identical,
                notes,
                live_run_id: live_run.as_ref().map(|l| l.run_id.clone()),
                exit_code: live_run
                    .as_ref()
                    .and_then(|l| l.rehearsal.as_ref())
                    .and_then(|x| x.exit_code),
            },
            journal: None,
            rolled_back: None,
        };
        super::write_atomic(
            &rdir.join("plan.json"),
            &serde_json::to_vec(&plan).expect("serializes"),
        )
        .and_then(|_| {
            super::write_atomic(
                &rdir.join("receipt.json"),
                &serde_json::to_vec_pretty(&receipt).expect("serializes"),
            )
        })
        .and_then(|_| {
            let m = self.promoting_marker(run_id);
            std::fs::create_dir_all(m.parent().expect("has a parent"))?;
            let me = process_identity(std::process::id()).unwrap_or_default();
            std::fs::write(&m, format!("{rid}\n{me}"))
        })
        .map_err(|source| EngineError::State {
            path: rdir.clone(),
            source,
        })?;

        // Apply; on any failure, undo what was done.
        let stall = std::env::var("DRYRUN_FAULT_APPLY_STALL_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        for (i, op) in plan.ops.iter().enumerate() {
            if let Some(ms) = stall
                && i == plan.ops.len() / 2
            {
                // Fault injection for the crash tests (tests/live_lane.rs).
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            if let Err(e) = op.apply(&ws, &format!("{rid}-{i}")) {
                let undo = self.undo_ops(&ws, &plan.ops[..=i], &backups, &rid);
                let _ = std::fs::remove_file(self.promoting_marker(run_id));
                let _ = std::fs::remove_dir_all(&rdir);
                return Err(EngineError::Conflict(format!(
                    "promotion of run {run_id} failed at {}: {e}; {}",
                    op.path,
                    match undo {
                        Ok(()) => "every step already taken was undone: the workspace is as it was"
                            .to_string(),
                        Err(u) => format!("undoing it also failed: {u}"),
                    }
                )));
            }
        }

        // The receipt goes into the journal before anyone hears of it.
        let appended = match self.journal.append(&Entry {
            kind: "promotion".into(),
            run_id: Some(run_id.to_string()),
            actor: Some(actor.clone()),
            data: serde_json::to_value(&receipt).expect("serializes"),
        }) {
            Ok(a) => a,
            Err(e) => {
                let _ = self.undo_ops(&ws, &plan.ops, &backups, &rid);
                let _ = std::fs::remove_file(self.promoting_marker(run_id));
                let _ = std::fs::remove_dir_all(&rdir);
                return Err(e.into());
            }
        };
        let mut receipt = receipt;
        receipt.journal = Some(appended);
        let _ = super::write_atomic(
            &rdir.join("receipt.json"),
            &serde_json::to_vec_pretty(&receipt).expect("serializes"),
        );
        r.state = RunState::Promoted;
        r.error = None;
        r.receipt = Some(receipt);
        self.save(&r)?;
        let _ = std::fs::remove_file(self.promoting_marker(run_id));
        Ok(r)
    }

    /// Undo steps in reverse, each only where it took effect.
    fn undo_ops(
        &self,
        ws: &Workspace,
        ops: &[Op],
        backups: &Path,
        rid: &str,
    ) -> Result<(), String> {
        let mut failures = Vec::new();
        for (i, op) in ops.iter().enumerate().rev() {
            let rel = op.path_bytes();
            match ws.state(&rel) {
                Ok(now) if op.expect_before.matches(&now) => continue,
                _ => {}
            }
            if let Err(e) = op.undo(ws, backups, &format!("{rid}-u{i}")) {
                failures.push(e.to_string());
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// Restore what a promotion replaced, only where the workspace still
    /// holds what the promotion wrote; otherwise refuse and name the paths.
    pub fn rollback(
        &self,
        receipt_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
    ) -> Result<Receipt, EngineError> {
        let run_id = self.receipt(receipt_id)?.run_id;
        let lock = self.run_lock(&run_id);
        let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut receipt = self.receipt(receipt_id)?;
        let mut r = self.get(&receipt.run_id)?;
        may_carry_out(&r, actor, auth)?;
        if let Some(rb) = &receipt.rolled_back {
            return Err(EngineError::Conflict(format!(
                "receipt {receipt_id} was already rolled back at {}",
                rb.at
            )));
        }
        let rdir = self.receipt_dir(receipt_id);
        let plan: Plan = std::fs::read(rdir.join("plan.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| EngineError::Corrupt {
                path: rdir.join("plan.json"),
                message: "missing or unreadable".into(),
            })?;
        let ws = Workspace::open(
            Path::new(&plan.workspace),
            &plan.workspace_identity,
            self.live_file_cap(),
        )
        .map_err(|e| EngineError::Drift(e.to_string()))?;
        let mut changed = Vec::new();
        for op in &plan.ops {
            match ws.state(&op.path_bytes()) {
                Ok(now) if op.after.matches(&now) => {}
                Ok(now) => changed.push(format!(
                    "{}: the promotion left {}, the workspace now holds {}",
                    op.path,
                    op.after.describe(),
                    now.describe()
                )),
                Err(e) => changed.push(e.to_string()),
            }
        }
        if !changed.is_empty() {
            return Err(EngineError::Drift(format!(
                "the workspace changed since receipt {receipt_id} was promoted; nothing was rolled back:\n  {}",
                changed.join("\n  ")
            )));
        }
        self.undo_ops(&ws, &plan.ops, &rdir.join("backup"), receipt_id)
            .map_err(|e| EngineError::Conflict(format!("rollback of {receipt_id} failed: {e}")))?;
        let rb = RolledBack {
            at: now_rfc3339(),
            by: actor.clone(),
            steps: plan.ops.len(),
        };
        self.journal.append(&Entry {
            kind: "rollback".into(),
            run_id: Some(receipt.run_id.clone()),
            actor: Some(actor.clone()),
            data: serde_json::json!({
                "receipt_id": receipt_id,
                "steps": plan.ops.len(),
                "paths": super::capped_list(&plan.ops.iter().map(|o| o.path.clone()).collect::<Vec<_>>()),
            }),
        })?;
        receipt.rolled_back = Some(rb);
        super::write_atomic(
            &rdir.join("receipt.json"),
            &serde_json::to_vec_pretty(&receipt).expect("serializes"),
        )
        .map_err(|source| EngineError::State {
            path: rdir.clone(),
            source,
        })?;
        r.receipt = Some(receipt.clone());
        self.save(&r)?;
        Ok(receipt)
    }

    /// A promotion whose process died: complete it if its receipt reached
    /// the journal, else undo it. Returns the run ids settled.
    pub(super) fn recover_promotions(&self) -> Result<Vec<String>, EngineError> {
        let mut settled = Vec::new();
        let dir = self.state_dir.join("promoting");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let run_id = e.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let (rid, owner) = text.split_once('\n').unwrap_or((text.as_str(), ""));
            let pid: Option<u32> = owner.split(' ').next().and_then(|p| p.parse().ok());
            if pid.is_some_and(|p| process_identity(p).as_deref() == Some(owner)) {
                continue;
            }
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
                        r.receipt = Some(rc);
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
                    self.journal.append(&Entry {
                        kind: "promotion_aborted".into(),
                        run_id: Some(run_id.clone()),
                        actor: Some(Actor::system()),
                        data: serde_json::json!({
                            "receipt_id": rid,
                            "reason": "the promoting process stopped before its receipt was journaled",
                            "undo": match &outcome { Ok(()) => "complete".to_string(), Err(e) => e.clone() },
                        }),
                    })?;
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

    /// The run's validated envelope when it declares `live.mode: rerun`.
    fn rerun_envelope(
        &self,
        run_id: &str,
    ) -> Result<Option<crate::envelope::EnvelopeSpec>, EngineError> {
        let p = self.run_dir(run_id).join("envelope.json");
        let Ok(bytes) = std::fs::read(&p) else {
            return Ok(None);
        };
        let env: crate::envelope::Envelope =
            serde_json::from_slice(&bytes).map_err(|e| EngineError::Corrupt {
                path: p.clone(),
                message: e.to_string(),
            })?;
        if env.live.as_ref().map(|l| l.mode) != Some(crate::envelope::LiveMode::Rerun) {
            return Ok(None);
        }
        // Resolved as the workspace's owner recorded by the rehearsal.
        let id = self.get(run_id)?.workspace_identity.ok_or_else(|| {
            EngineError::Conflict(format!(
                "run {run_id} does not record which directory it rehearsed; rehearse again"
            ))
        })?;
        let access = crate::workspace::owner::OwnerSession::for_owner(&id)
            .map_err(|e| EngineError::Workspace(e.to_string()))?;
        env.validate(None, &access)
            .map(Some)
            .map_err(|e| EngineError::Workspace(e.to_string()))
    }

    /// Run the command again as `live:` grants, as its own (linked) run.
    fn rerun_live(
        &self,
        run_id: &str,
        spec: &crate::envelope::EnvelopeSpec,
        actor: &Actor,
        extra_env: Vec<(String, String)>,
    ) -> Result<RunRecord, EngineError> {
        let live = super::LiveRun {
            rerun_of: run_id.to_string(),
            network_host: spec.live.network == crate::envelope::LiveNetwork::Host,
            extra_env,
        };
        let prepared = self.prepare_run(spec, actor, Some(&live), None)?;
        let mut rec = self.rehearse_prepared(prepared, None)?;
        if rec.state == RunState::Failed {
            return Err(EngineError::Conflict(format!(
                "the live rerun {} failed: {}; nothing was applied",
                rec.run_id,
                rec.error.as_deref().unwrap_or("unknown error")
            )));
        }
        // Evidence of the live execution, not a run awaiting anything.
        rec.state = RunState::Rehearsed;
        self.save(&rec)?;
        Ok(rec)
    }
}

const RERUN_SPENT: &str = "the rerun approval was spent by its first live execution (one live execution per approval; rehearse again to run it live again)";

/// The host variables `live.env_from_host` names, checked before anything
/// runs: exactly those, all present.
fn live_env(
    spec: &crate::envelope::EnvelopeSpec,
    host_env: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, EngineError> {
    {
        let wanted = &spec.live.env_from_host;
        if let Some(extra) = host_env.keys().find(|k| !wanted.contains(k)) {
            return Err(EngineError::Invalid(format!(
                "env: {extra} is not in the run's live.env_from_host ({}); only those variables are handed to the live run",
                wanted.join(", ")
            )));
        }
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|n| !host_env.contains_key(*n))
            .collect();
        if !missing.is_empty() {
            return Err(EngineError::Invalid(format!(
                "live.env_from_host needs {} from the promoting side's environment; set them and promote again",
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(host_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

/// What differs between the rehearsal's writes and the live rerun's.
fn compare_change_sets(rehearsed: &[Change], live: &[Change]) -> Vec<String> {
    use std::collections::BTreeMap;
    let key = |c: &Change| {
        (
            c.kind,
            c.file_type,
            c.before.clone(),
            c.after.clone(),
            c.mode_after,
            c.symlink_target.clone(),
        )
    };
    let a: BTreeMap<Vec<u8>, _> = rehearsed.iter().map(|c| (c.path_bytes(), key(c))).collect();
    let b: BTreeMap<Vec<u8>, _> = live.iter().map(|c| (c.path_bytes(), key(c))).collect();
    let mut out = Vec::new();
    for (p, ka) in &a {
        let shown = crate::workspace::paths::escape_for_humans(p);
        match b.get(p) {
            None => out.push(format!("{shown}: written in the rehearsal, not live")),
            Some(kb) if kb != ka => out.push(format!(
                "{shown}: live result differs ({:?} {} vs rehearsed {:?} {})",
                kb.0,
                kb.3.as_deref()
                    .map(|h| &h[..12.min(h.len())])
                    .unwrap_or("-"),
                ka.0,
                ka.3.as_deref()
                    .map(|h| &h[..12.min(h.len())])
                    .unwrap_or("-"),
            )),
            Some(_) => {}
        }
    }
    for p in b.keys() {
        if !a.contains_key(p) {
            out.push(format!(
                "{}: written live, not in the rehearsal",
                crate::workspace::paths::escape_for_humans(p)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! The verdict and the planner can never disagree: a change set the
    //! verdict judges `promote` is one `plan_ops` carries out.

    use super::*;
    use crate::model::Decision;
    use crate::model::{HostReport, RehearsalReport};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    fn hash(s: &str) -> String {
        blake3::hash(s.as_bytes()).to_hex().to_string()
    }

    fn arb_change() -> impl Strategy<Value = Change> {
        let kind = prop_oneof![
            Just(ChangeKind::Created),
            Just(ChangeKind::Modified),
            Just(ChangeKind::Deleted),
            Just(ChangeKind::Metadata),
            Just(ChangeKind::Identical),
        ];
        let ft = prop_oneof![
            Just(FileType::File),
            Just(FileType::Dir),
            Just(FileType::Symlink),
            Just(FileType::Other),
        ];
        let xattrs = proptest::sample::subsequence(
            vec![
                "user.a",
                "security.capability",
                "trusted.x",
                "system.posix_acl_access",
            ],
            0..=2,
        );
        (
            (
                "[a-c]{1,2}(/[a-c]{1,2}){0,2}",
                kind,
                ft,
                any::<bool>(),
                any::<bool>(),
                prop::option::of(0o100000u32..0o110000),
                prop::option::of(0o100000u32..0o110000),
            ),
            (
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
                prop::option::weighted(0.1, Just("fifo".to_string())),
                prop::option::weighted(0.1, Just("git".to_string())),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
                xattrs,
                prop::option::weighted(
                    0.8,
                    prop_oneof![Just("t"), Just("/etc/x"), Just("l\u{fffd}")],
                ),
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    (path, kind, ft, has_before, has_after, mode_before, mode_after),
                    (
                        setid,
                        escapes,
                        special,
                        stub,
                        withheld,
                        not_kept,
                        xattrs,
                        target,
                        target_hash_ok,
                    ),
                )| {
                    let mut c = Change::new(path.as_bytes(), kind, ft);
                    c.before = has_before.then(|| hash("before"));
                    c.after = has_after.then(|| hash("after"));
                    c.mode_before = mode_before;
                    c.mode_after = mode_after;
                    c.setid = setid;
                    c.symlink_escapes = escapes;
                    c.special = special;
                    c.stub_copy_of = stub;
                    c.content_withheld = withheld;
                    c.content_not_kept = not_kept;
                    c.xattrs_changed = xattrs.into_iter().map(String::from).collect();
                    if ft == FileType::Symlink {
                        c.symlink_target = target.map(String::from);
                        if let (Some(t), true) = (&c.symlink_target, has_after) {
                            c.after = Some(if target_hash_ok {
                                hash(t)
                            } else {
                                hash("other")
                            });
                        }
                    }
                    c
                },
            )
    }

    #[test]
    fn a_change_set_judged_promote_is_one_the_planner_carries_out() {
        let spec =
            crate::envelope::parse_envelope("t", "command: x\nintent: {expected_writes: ['**']}\n")
                .unwrap()
                .validate(
                    Some(Path::new("/tmp")),
                    &crate::workspace::owner::OwnerSession::start(
                        &crate::workspace::owner::Creds::current(),
                    )
                    .unwrap(),
                )
                .unwrap();
        // Every content hash has its blob: what remains is the rule itself,
        // not retention.
        let blobs = tempfile::tempdir().unwrap();
        for s in ["after", "t", "/etc/x", "l\u{fffd}", "other"] {
            std::fs::write(blobs.path().join(hash(s)), s).unwrap();
        }
        let mut runner = TestRunner::new(Config {
            cases: 2000,
            ..Config::default()
        });
        let (promoted, refused) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
        runner
            .run(&prop::collection::vec(arb_change(), 1..6), |changes| {
                let report = RehearsalReport {
                    exit_code: Some(0),
                    changes: changes.clone(),
                    landlock_abi: 7,
                    ..Default::default()
                };
                let v = crate::verdict::judge(&spec, &report, &HostReport::default());
                let planned = plan_ops(&changes, blobs.path());
                if v.decision == Decision::Promote {
                    promoted.set(promoted.get() + 1);
                    prop_assert!(
                        planned.is_ok(),
                        "judged promote, refused by the planner: {:?}\n{changes:#?}",
                        planned.err()
                    );
                }
                if let Err(e) = &planned {
                    refused.set(refused.get() + 1);
                    prop_assert_eq!(v.decision, Decision::Blocked);
                    // Every line the planner gives is a reason of the verdict.
                    let EngineError::Conflict(text) = e else {
                        return Err(TestCaseError::fail(format!("{e:?}")));
                    };
                    for line in text.lines().skip(1) {
                        let line = line.trim_start();
                        prop_assert!(
                            v.reasons.iter().any(|r| r.ends_with(line)),
                            "{line} is not among {:?}",
                            v.reasons
                        );
                    }
                }
                Ok(())
            })
            .unwrap();
        // The generator reaches both sides.
        let (promoted, refused) = (promoted.get(), refused.get());
        assert!(promoted > 50 && refused > 50, "{promoted} {refused}");
    }
}
