//! `dryrun gc`: fit a state directory into its size budget, oldest first,
//! never touching what a pending decision, promotion or rollback needs
//! (the rules: `engine/gc.rs`). It works on the state directory itself
//! (`--state-dir`, or the default), in this process, like a daemon's own
//! hourly housekeeping; root on a user's state directory acts with the
//! owner's filesystem identity, as a local review does.

use super::screen::say;
use super::{EXIT_INTERNAL, GlobalOpts, print_json, usage_error};
use crate::engine::{Engine, EngineOptions};

/// `dryrun gc [--budget-mb M] [--dry-run] [--json]`: the exit code.
pub(super) fn gc(g: &GlobalOpts, budget_mb: Option<u64>, dry_run: bool, json: bool) -> i32 {
    let dir = super::review::review_state_dir(g);
    if !dir.is_dir() {
        return usage_error(format!(
            "state directory {} does not exist (give --state-dir DIR)",
            dir.display()
        ));
    }
    if let Err(msg) = super::review::act_as_state_dir_owner(&dir) {
        return usage_error(msg);
    }
    // Opened with no retention of its own: the engine's start-up
    // housekeeping must not collect anything (a `--dry-run` removes
    // nothing); the collection is the one below.
    let mut options = EngineOptions::default();
    let configured = options.retention.state_budget_bytes;
    options.retention = crate::engine::Retention {
        blob_days: u64::MAX,
        record_days: u64::MAX,
        quota_per_uid_bytes: None,
        state_budget_bytes: None,
    };
    let engine = match Engine::open(&dir, options) {
        Ok(e) => e,
        Err(e) => return super::output::error("internal", &e.to_string(), EXIT_INTERNAL),
    };
    let budget = budget_mb.map(|m| m.saturating_mul(1 << 20)).or(configured);
    let report = match engine.gc(budget, dry_run) {
        Ok(r) => r,
        Err(e) => return super::output::error("internal", &e.to_string(), EXIT_INTERNAL),
    };
    if json {
        print_json(&report);
        return 0;
    }
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1 << 20));
    let verb = if dry_run { "would remove" } else { "removed" };
    say!(
        "state directory {}: {} (budget {})",
        super::screen::Shown::raw(&dir.display().to_string()),
        mib(report.before_bytes),
        if report.budget_bytes == u64::MAX {
            "none".to_string()
        } else {
            mib(report.budget_bytes)
        }
    );
    for r in &report.removed {
        say!(
            "  {verb} {} of run {} ({}, {})",
            r.what,
            super::screen::Shown::raw(&r.run_id),
            r.state.map(|s| s.as_str()).unwrap_or("-"),
            mib(r.bytes)
        );
    }
    say!(
        "{} {} item(s); {} after; {} run(s) kept because a decision, promotion or rollback needs them{}",
        verb,
        report.removed.len(),
        mib(report.after_bytes),
        report.kept_needed,
        if report.over_budget {
            "; still over the budget: what is left is needed (the journal and receipts are never collected)"
        } else {
            ""
        }
    );
    0
}
