//! The live lane: promote a run by applying its reviewed change set to the
//! real workspace, with a single-use receipt in the journal (`plan.rs`
//! turns the change set into steps, `rerun.rs` runs a `live.mode: rerun`
//! command again, `rollback.rs` undoes a promotion).
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
//! Crash safety: the plan, backups and marker are durable before the first
//! write; the receipt is journaled only after the last write, once what
//! the steps changed is durable (`workspace::durable`). At start-up, a
//! promotion whose receipt is in the journal is completed (the run record
//! marked promoted); any other is undone step by step from the backups. So
//! the workspace ends fully promoted with its receipt, or as it was.

use std::path::{Path, PathBuf};

mod plan;
mod rerun;
mod rollback;

pub(super) use plan::Plan;
use plan::{apply_err, plan_ops};
use rerun::{RERUN_SPENT, compare_change_sets, live_env};

use super::authz::{self, Verb};
use super::recover::process_identity;
use super::store::write_atomic;
use super::{Engine, EngineError, ReviewerAuth, What, entries, now_rfc3339};
use crate::journal::Actor;
use crate::model::{Change, promotion};
use crate::record::{
    LiveMode, LiveResult, RECEIPT_SCHEMA, Receipt, ReceiptChange, Rehearsal, RunRecord, RunState,
};
use crate::workspace::apply::{Action, Expect, Op, Workspace};

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

/// How the promoter asked for the promotion.
struct How<'a> {
    /// Mode `rerun`: the host variables the run's `live.env_from_host` names.
    host_env: &'a std::collections::BTreeMap<String, String>,
    /// The promoter said the stubbed calls will not be made.
    local_only: bool,
}

/// What a promotion writes: the rehearsal's change set (mode `apply`), or
/// the live rerun's, which matched it (mode `rerun`).
struct ToApply {
    mode: LiveMode,
    changes: Vec<Change>,
    blobs: PathBuf,
    live_run: Option<RunRecord>,
}

impl Engine {
    /// The largest file the live lane hashes or backs up, and the most its
    /// backups of one promotion may take: what one rehearsal may keep (the
    /// disk ceiling plus room for "before" copies), at apparent size.
    pub(super) fn live_file_cap(&self) -> u64 {
        crate::sandbox::spec::kept_content_budget(self.opts.ceilings.disk_mb << 20)
    }

    pub(super) fn receipt_dir(&self, rid: &str) -> PathBuf {
        self.state_dir.join("receipts").join(rid)
    }

    fn promoting_marker(&self, run_id: &str) -> PathBuf {
        self.state_dir.join("promoting").join(run_id)
    }

    /// The receipt `id`.
    pub fn receipt(&self, id: &str) -> Result<Receipt, EngineError> {
        if !valid_receipt_id(id) {
            return Err(EngineError::BadId {
                what: What::Receipt,
                id: id.to_string(),
            });
        }
        let p = self.receipt_dir(id).join("receipt.json");
        match crate::state_file::read(&p) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| EngineError::corrupt(p, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(EngineError::not_found(What::Receipt, id))
            }
            Err(source) => Err(EngineError::storage(p, source)),
        }
    }

    /// Promote a run: apply its rehearsed change set to the real workspace
    /// (mode `apply`). Refuses unless the decision was promote or a reviewer
    /// approved it, refuses a second promotion, refuses drift, refuses a
    /// plain apply of a run whose stubbed calls would not be made (unless
    /// `local_only` says so: [`promotion::check_stubbed_calls`]), and undoes
    /// itself if any step fails.
    pub fn promote(
        &self,
        run_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
        host_env: &std::collections::BTreeMap<String, String>,
        local_only: bool,
    ) -> Result<RunRecord, EngineError> {
        let _g = self.lock_run(run_id)?;
        let mut spent = false;
        let how = How {
            host_env,
            local_only,
        };
        let result = self.promote_locked(run_id, actor, auth, &how, &mut spent);
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

    /// The promotion's steps in order: check, plan, drift, back up, write
    /// the plan, apply, journal the receipt, record it.
    fn promote_locked(
        &self,
        run_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
        how: &How<'_>,
        spent: &mut bool,
    ) -> Result<RunRecord, EngineError> {
        let mut r = self.get(run_id)?;
        authz::authorize(Verb::Promote, &r, actor, auth)?;
        check_promotable(&r)?;
        if let Ok(left) = crate::state_file::read_to_string(&self.promoting_marker(run_id)) {
            // An earlier promotion whose undo failed (see
            // `undo_failed_promotion`): its plan and backups wait for the
            // start-up recovery, and are never stacked up by retries.
            let rid = left.lines().next().unwrap_or_default();
            return Err(EngineError::conflict(format!(
                "an earlier promotion of run {run_id} (receipt directory {rid}) could not be undone yet; the daemon's next start undoes it, then the run can be promoted"
            )));
        }
        let reh = r.rehearsal.clone().unwrap_or_default();
        // The one rule of stubbed work, before anything runs or is written.
        let mode = r.live.as_ref().map(|l| l.mode).unwrap_or_default();
        let calls_not_made =
            promotion::check_stubbed_calls(mode, &reh.would_be_actions, how.local_only)
                .map_err(|refusal| EngineError::in_state(r.state, refusal.message(run_id)))?;
        let to_apply = self.what_to_apply(&mut r, &reh, actor, how.host_env, spent)?;
        let (ops, identical, notes) = plan_ops(&to_apply.changes, &to_apply.blobs)?;
        crate::phase("promote: planned");
        let identity = r.workspace_identity.ok_or_else(|| {
            EngineError::conflict(format!(
                "run {run_id} does not record which directory it rehearsed; rehearse again"
            ))
        })?;
        check_view_held(&r, &identity)?;
        let ws = Workspace::open(Path::new(&r.workspace), &identity, self.live_file_cap())
            .map_err(|e| EngineError::drift(format!("{e}")))?;
        check_drift(&ws, &ops, run_id)?;
        crate::phase("promote: drift checked");

        // Plan and backups, durable before the first write.
        let rid = new_receipt_id();
        let rdir = self.receipt_dir(&rid);
        let ops = self.back_up(&ws, ops, &rdir, run_id)?;
        crate::phase("promote: backed up");
        let plan = Plan {
            receipt_id: rid.clone(),
            run_id: run_id.to_string(),
            workspace: r.workspace.clone(),
            workspace_identity: identity,
            ops,
            started_at: now_rfc3339(),
        };
        let times_set = plan
            .ops
            .iter()
            .filter(|o| matches!(o.action, Action::SetTime { .. }))
            .count();
        let result = LiveResult {
            applied_steps: plan.ops.len() - times_set,
            times_set,
            skipped_identical: identical,
            notes,
            live_run_id: to_apply.live_run.as_ref().map(|l| l.run_id.clone()),
            exit_code: to_apply
                .live_run
                .as_ref()
                .and_then(|l| l.rehearsal.as_ref())
                .and_then(|x| x.exit_code),
        };
        let mut receipt = new_receipt(&r, &reh, actor, &rid, to_apply.mode, result);
        if to_apply.live_run.is_none() {
            receipt.calls_not_made = calls_not_made;
            receipt.local_only = how.local_only;
        }
        self.write_plan(&rdir, &plan, &receipt)?;
        crate::phase("promote: plan written");
        self.apply_plan(&ws, &plan, &rdir)?;
        crate::phase("promote: applied");
        let receipt = self.journal_receipt(&ws, &plan, &rdir, actor, receipt)?;
        crate::phase("promote: journaled");
        r.state = RunState::Promoted;
        r.error = None;
        // The record lists every change in `rehearsal.changes` already; its
        // copy of the receipt is the journal's (a long list summarised).
        r.receipt = Some(receipt.compact());
        self.save(&r)?;
        crate::phase("promote: saved");
        let _ = std::fs::remove_file(self.promoting_marker(run_id));
        Ok(r)
    }

    /// The rehearsal's change set (mode `apply`); for `live.mode: rerun`,
    /// the approval is spent, the command runs live, and its writes must be
    /// the rehearsal's.
    fn what_to_apply(
        &self,
        r: &mut RunRecord,
        reh: &Rehearsal,
        actor: &Actor,
        host_env: &std::collections::BTreeMap<String, String>,
        spent: &mut bool,
    ) -> Result<ToApply, EngineError> {
        let run_id = r.run_id.clone();
        let Some(env) = self.rerun_envelope(&run_id)? else {
            return Ok(ToApply {
                mode: LiveMode::Apply,
                changes: reh.changes.clone(),
                blobs: self.run_dir(&run_id).join("blobs"),
                live_run: None,
            });
        };
        if r.state != RunState::Approved {
            return Err(EngineError::in_state(
                r.state,
                format!(
                    "run {run_id} declares live.mode: rerun, which always needs a reviewer's approval first"
                ),
            ));
        }
        let extra_env = live_env(&env, host_env)?;
        self.spend_rerun_approval(r, actor)?;
        *spent = true;
        let live = self.rerun_live(&run_id, &env, actor, extra_env)?;
        let live_changes = live.rehearsal.clone().unwrap_or_default().changes;
        let differences = compare_change_sets(&reh.changes, &live_changes);
        if !differences.is_empty() {
            self.journal.append(&entries::rerun_mismatch(
                &run_id,
                actor,
                &live.run_id,
                &differences,
            ))?;
            return Err(EngineError::drift(format!(
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
        Ok(ToApply {
            mode: LiveMode::Rerun,
            changes: live_changes,
            blobs: self.run_dir(&live.run_id).join("blobs"),
            live_run: Some(live),
        })
    }

    /// Keep what each step replaces, in `rdir/backup/`, and check it is
    /// still what the rehearsal saw.
    fn back_up(
        &self,
        ws: &Workspace,
        mut ops: Vec<Op>,
        rdir: &Path,
        run_id: &str,
    ) -> Result<Vec<Op>, EngineError> {
        let backups = rdir.join("backup");
        std::fs::create_dir_all(&backups)
            .map_err(|source| EngineError::storage(&backups, source))?;
        let mut backed_up = 0u64;
        let mut files = Vec::new();
        for (i, op) in ops.iter_mut().enumerate() {
            let Expect::Hashed { hash, .. } = &op.expect_before else {
                continue;
            };
            if matches!(op.action, Action::SetTime { .. }) {
                continue; // changes no content: nothing to keep
            }
            let rel = op.path_bytes();
            let b = match ws.state(&rel).map_err(apply_err)? {
                crate::workspace::apply::State::Symlink { .. } => {
                    ws.backup_symlink(&rel).map_err(apply_err)?
                }
                _ => {
                    files.push(backups.join(i.to_string()));
                    ws.backup_file(&rel, files.last().expect("pushed"))
                        .map_err(apply_err)?
                }
            };
            backed_up += std::fs::symlink_metadata(backups.join(i.to_string()))
                .map(|m| m.len())
                .unwrap_or(0);
            if backed_up > self.live_file_cap() {
                let _ = std::fs::remove_dir_all(rdir);
                return Err(EngineError::conflict(format!(
                    "backing up what run {run_id} replaces takes more than {} bytes (at apparent size), the most one promotion keeps for rollback; nothing was written",
                    self.live_file_cap()
                )));
            }
            if &b.hash != hash {
                let _ = std::fs::remove_dir_all(rdir);
                return Err(EngineError::drift(format!(
                    "{} changed while it was being backed up; nothing was written",
                    op.path
                )));
            }
            op.backup = Some(b);
        }
        crate::phase("promote: backups written");
        if let Err(e) = sync_backups(&backups, &files) {
            let _ = std::fs::remove_dir_all(rdir);
            return Err(e);
        }
        Ok(ops)
    }

    /// The plan, the receipt and the in-progress marker, durable before
    /// the first write to the workspace.
    fn write_plan(&self, rdir: &Path, plan: &Plan, receipt: &Receipt) -> Result<(), EngineError> {
        write_atomic(
            &rdir.join("plan.json"),
            &serde_json::to_vec(plan).expect("serializes"),
        )
        .and_then(|_| {
            write_atomic(
                &rdir.join("receipt.json"),
                &serde_json::to_vec_pretty(receipt).expect("serializes"),
            )
        })
        .and_then(|_| {
            let m = self.promoting_marker(&plan.run_id);
            std::fs::create_dir_all(m.parent().expect("has a parent"))?;
            let me = process_identity(std::process::id()).unwrap_or_default();
            // Durable before the first write too: a stop of the machine
            // mid-promotion leaves the marker that finds the plan.
            std::fs::write(&m, format!("{}\n{me}", plan.receipt_id))?;
            std::fs::File::open(&m)?.sync_all()?;
            std::fs::File::open(m.parent().expect("has a parent"))?.sync_all()
        })
        .map_err(|source| EngineError::storage(rdir, source))
    }

    /// Apply every step; on any failure, undo what was done.
    fn apply_plan(&self, ws: &Workspace, plan: &Plan, rdir: &Path) -> Result<(), EngineError> {
        let (rid, run_id) = (&plan.receipt_id, &plan.run_id);
        let stall = std::env::var("DRYRUN_FAULT_APPLY_STALL_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        // The middle of the steps that write content (the times come last).
        let middle = plan
            .ops
            .iter()
            .filter(|o| !matches!(o.action, Action::SetTime { .. }))
            .count()
            / 2;
        for (i, op) in plan.ops.iter().enumerate() {
            if let Some(ms) = stall
                && i == middle
            {
                // Fault injection for the crash tests (tests/live_lane.rs).
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            if let Err(e) = op.apply(ws, &format!("{rid}-{i}")) {
                let undo = self.undo_failed_promotion(ws, plan, i + 1, rdir);
                return Err(EngineError::conflict(format!(
                    "promotion of run {run_id} failed at {}: {e}; {}",
                    op.path,
                    match undo {
                        Ok(()) => "every step already taken was undone: the workspace is as it was"
                            .to_string(),
                        Err(u) => u,
                    }
                )));
            }
        }
        crate::phase("promote: steps taken");
        // What every step changed, synced once (`workspace::durable`): the
        // promotion is on disk before its receipt is journaled.
        if let Err(e) = ws.sync() {
            let undo = self.undo_failed_promotion(ws, plan, plan.ops.len(), rdir);
            return Err(EngineError::conflict(format!(
                "promotion of run {run_id} could not be made durable: {e}; {}",
                match undo {
                    Ok(()) => "every step was undone: the workspace is as it was".to_string(),
                    Err(u) => u,
                }
            )));
        }
        Ok(())
    }

    /// Undo the first `taken` steps of a promotion that failed. The
    /// workspace agent runs as the workspace owner, who may have killed or
    /// stopped it (that may be why the step failed): when the undo through
    /// it fails, it is tried once more through a fresh agent. When that
    /// fails too, the plan, its backups and the in-progress marker are
    /// kept, so the next start-up recovery undoes the rest: a failed undo
    /// never deletes what it would need to restore the workspace.
    fn undo_failed_promotion(
        &self,
        ws: &Workspace,
        plan: &Plan,
        taken: usize,
        rdir: &Path,
    ) -> Result<(), String> {
        let (ops, rid) = (&plan.ops[..taken], &plan.receipt_id);
        let backups = rdir.join("backup");
        let undone = self.undo_ops(ws, ops, &backups, rid).or_else(|_| {
            let fresh = Workspace::open(
                Path::new(&plan.workspace),
                &plan.workspace_identity,
                self.live_file_cap(),
            )
            .map_err(|e| e.to_string())?;
            self.undo_ops(&fresh, ops, &backups, rid)
        });
        match undone {
            Ok(()) => {
                let _ = std::fs::remove_file(self.promoting_marker(&plan.run_id));
                let _ = std::fs::remove_dir_all(rdir);
                Ok(())
            }
            Err(u) => Err(format!(
                "undoing it also failed ({u}); its plan and backups are kept (receipt directory {rid}), and the daemon's next start undoes what remains"
            )),
        }
    }

    /// The receipt goes into the journal before anyone hears of it; if it
    /// cannot, the promotion is undone.
    fn journal_receipt(
        &self,
        ws: &Workspace,
        plan: &Plan,
        rdir: &Path,
        actor: &Actor,
        mut receipt: Receipt,
    ) -> Result<Receipt, EngineError> {
        let run_id = &plan.run_id;
        let appended = match self
            .journal
            .append(&entries::promotion(run_id, actor, &receipt))
        {
            Ok(a) => a,
            Err(e) => {
                let _ = self.undo_failed_promotion(ws, plan, plan.ops.len(), rdir);
                return Err(e.into());
            }
        };
        receipt.journal = Some(appended);
        let _ = write_atomic(
            &rdir.join("receipt.json"),
            &serde_json::to_vec_pretty(&receipt).expect("serializes"),
        );
        Ok(receipt)
    }
}

/// Make the backups durable before the first write to the workspace: each
/// backup file, then the directories that name them (`backup/`, the
/// receipt's, `receipts/`); one sync of the file system instead when there
/// are thousands (the rule: `workspace::durable`).
fn sync_backups(backups: &Path, files: &[PathBuf]) -> Result<(), EngineError> {
    let rdir = backups.parent().expect("receipts/<id>/backup");
    let dirs = [backups, rdir, rdir.parent().expect("receipts/<id>")];
    let synced = if crate::workspace::durable::one_by_one(files.len() + dirs.len()) {
        let all: Vec<&Path> = files.iter().map(|f| f.as_path()).chain(dirs).collect();
        crate::workspace::durable::each_at_once(&all, |p| {
            std::fs::File::open(p).and_then(|f| f.sync_all())
        })
        .map_err(|(_, e)| e)
    } else {
        std::fs::File::open(backups).and_then(|d| Ok(nix::unistd::syncfs(&d)?))
    };
    synced.map_err(|source| EngineError::storage(backups, source))
}

/// Refuse a run the live lane must not carry out: a rerun's evidence, one
/// already promoted, one not promoted or approved, one cut to its cap.
fn check_promotable(r: &RunRecord) -> Result<(), EngineError> {
    let run_id = &r.run_id;
    if let Some(of) = &r.rerun_of {
        return Err(EngineError::conflict(format!(
            "run {run_id} is the live rerun of {of}: it is evidence, not something to promote"
        )));
    }
    if let Some(rc) = &r.receipt {
        return Err(EngineError::in_state(
            r.state,
            format!(
                "run {run_id} was already promoted (receipt {}); a receipt is single-use: rehearse again to promote again",
                rc.receipt_id
            ),
        ));
    }
    let decision = r.verdict.as_ref().map(|v| v.decision);
    match (r.state, decision) {
        (s, d) if s.can_promote(d) => {}
        (RunState::AwaitingApproval, _) if r.override_required => {
            return Err(EngineError::in_state(
                r.state,
                format!(
                    "run {run_id} was blocked and waits for a reviewer's explicit override (`dryrun approve --override {run_id}`); only a run whose decision is promote, or one a reviewer approved, can be promoted"
                ),
            ));
        }
        (RunState::AwaitingApproval, _) => {
            return Err(EngineError::in_state(
                r.state,
                format!("run {run_id} is awaiting approval; a reviewer must approve it first"),
            ));
        }
        (s, d) => {
            return Err(EngineError::in_state(
                s,
                format!(
                    "run {run_id} is {} (decision {}); only a run whose decision is promote, or one a reviewer approved, can be promoted",
                    s.as_str(),
                    d.map(|d| d.as_str()).unwrap_or("none")
                ),
            ));
        }
    }
    // A change list known to be incomplete is never promoted, override or
    // not: what it left out would silently never go live, under a receipt
    // that claims the run's change set.
    use crate::model::LimitHit;
    let hit = |l: LimitHit| {
        r.rehearsal
            .as_ref()
            .is_some_and(|x| x.limits_hit.contains(&l))
    };
    let why = if hit(LimitHit::Record) {
        "its record was cut to its size cap"
    } else if hit(LimitHit::Changes) {
        "the evidence walk stopped listing at its cap on changes (the changes limit)"
    } else if hit(LimitHit::PathDepth) {
        "paths deeper than the evidence walk can name were left out (the path_depth limit)"
    } else {
        return Ok(());
    };
    Err(EngineError::conflict(format!(
        "run {run_id}'s change list is incomplete: {why}; it cannot be promoted. Rehearse a smaller change"
    )))
}

/// Drift: every touched path must still hold what the rehearsal saw
/// (checked against the first step on each path).
fn check_drift(ws: &Workspace, ops: &[Op], run_id: &str) -> Result<(), EngineError> {
    let mut drift = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for op in ops {
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
    if drift.is_empty() {
        return Ok(());
    }
    drift.dedup();
    Err(EngineError::drift(format!(
        "the workspace changed since run {run_id} was rehearsed; nothing was written:\n  {}",
        drift.join("\n  ")
    )))
}

/// The receipt of a promotion about to be applied (its journal position
/// is added once it is journaled).
fn new_receipt(
    r: &RunRecord,
    reh: &Rehearsal,
    actor: &Actor,
    rid: &str,
    mode: LiveMode,
    live_result: LiveResult,
) -> Receipt {
    let live = live_result.live_run_id.is_some();
    Receipt {
        schema: RECEIPT_SCHEMA.into(),
        receipt_id: rid.to_string(),
        run_id: r.run_id.clone(),
        promoted_at: now_rfc3339(),
        promoted_by: actor.clone(),
        mode,
        workspace: r.workspace.clone(),
        command: r.command.clone(),
        envelope_hash: r.envelope_hash.clone(),
        policy_hash: r.risk.as_ref().map(|k| k.policy_hash.clone()),
        landlock_abi: reh.sandbox.landlock_abi,
        change_set: entries::change_set_hash(&reh.changes),
        evidence_hash: reh.evidence_hash.clone(),
        calls_not_made: if live {
            Vec::new()
        } else {
            entries::shown_actions(&reh.would_be_actions)
        },
        local_only: false,
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
        changes_total: None,
        changes_by_dir: Vec::new(),
        verdict: serde_json::json!({
            "decision": r.verdict.as_ref().map(|v| v.decision.as_str()),
            "reasons": r.verdict.as_ref().map(|v| v.reasons.clone()).unwrap_or_default(),
        }),
        approvals: r.approvals.clone(),
        live_result,
        journal: None,
        rolled_back: None,
    }
}

/// A run rehearsed in a client's view (a container's workspace) is
/// promoted only in that view, which this daemon holds while it runs.
pub(in crate::engine) fn check_view_held(
    r: &crate::record::RunRecord,
    identity: &crate::workspace::apply::Identity,
) -> Result<(), EngineError> {
    let Some(where_) = &r.workspace_view else {
        return Ok(());
    };
    if crate::workspace::owner::view::find(Path::new(&r.workspace), identity).is_some() {
        return Ok(());
    }
    Err(EngineError::conflict(format!(
        "workspace_gone: run {} rehearsed {} as {where_} shows it, and this daemon no longer holds that view (it restarted, or the view was forgotten); submit the command again",
        r.run_id, r.workspace
    )))
}
