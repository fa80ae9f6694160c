//! Rolling a promotion back: restore what it replaced, only where the
//! workspace still holds what it wrote; undo steps (also for a promotion
//! that failed or was cut short).

use std::path::Path;

use super::Plan;
use crate::engine::authz::{self, Verb};
use crate::engine::store::write_atomic;
use crate::engine::{Engine, EngineError, ReviewerAuth, entries, now_rfc3339};
use crate::journal::Actor;
use crate::record::{Receipt, RolledBack};
use crate::workspace::apply::{Op, Workspace};

impl Engine {
    /// Undo steps in reverse, each only where it took effect.
    pub(in crate::engine) fn undo_ops(
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
        // The steps are not fsync'd one by one: the undo is made durable here.
        if let Err(e) = ws.sync() {
            failures.push(e.to_string());
        }
        if failures.is_empty() {
            return Ok(());
        }
        // Named up to a few: a failure of every step of a big change set
        // is one cause, not a message of megabytes.
        const SHOWN: usize = 5;
        let more = failures.len().saturating_sub(SHOWN);
        failures.truncate(SHOWN);
        if more > 0 {
            failures.push(format!("and {more} more"));
        }
        Err(failures.join("; "))
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
        let _g = self.lock_run(&run_id)?;
        let mut receipt = self.receipt(receipt_id)?;
        let mut r = self.get(&receipt.run_id)?;
        authz::authorize(Verb::Rollback, &r, actor, auth)?;
        if let Some(rb) = &receipt.rolled_back {
            return Err(EngineError::in_state(
                r.state,
                format!("receipt {receipt_id} was already rolled back at {}", rb.at),
            ));
        }
        let rdir = self.receipt_dir(receipt_id);
        let plan: Plan = crate::state_file::read(&rdir.join("plan.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| EngineError::corrupt(rdir.join("plan.json"), "missing or unreadable"))?;
        let ws = Workspace::open(
            Path::new(&plan.workspace),
            &plan.workspace_identity,
            self.live_file_cap(),
        )
        .map_err(|e| EngineError::drift(e.to_string()))?;
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
            return Err(EngineError::drift(format!(
                "the workspace changed since receipt {receipt_id} was promoted; nothing was rolled back:\n  {}",
                changed.join("\n  ")
            )));
        }
        self.undo_ops(&ws, &plan.ops, &rdir.join("backup"), receipt_id)
            .map_err(|e| EngineError::conflict(format!("rollback of {receipt_id} failed: {e}")))?;
        let rb = RolledBack {
            at: now_rfc3339(),
            by: actor.clone(),
            steps: plan.ops.len(),
        };
        let paths: Vec<String> = plan.ops.iter().map(|o| o.path.clone()).collect();
        self.journal.append(&entries::rollback(
            &receipt.run_id,
            actor,
            receipt_id,
            &paths,
        ))?;
        receipt.rolled_back = Some(rb);
        write_atomic(
            &rdir.join("receipt.json"),
            &serde_json::to_vec_pretty(&receipt).expect("serializes"),
        )
        .map_err(|source| EngineError::storage(&rdir, source))?;
        r.receipt = Some(receipt.compact());
        self.save(&r)?;
        Ok(receipt)
    }
}
