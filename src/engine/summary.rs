//! What a person needs to decide on a run, in one value: the reasons with
//! forbidden paths first, surprise and forbidden paths, change counts, the
//! calls stubs answered (with their stdin when it is text), who submitted
//! it and when it expires. `dryrun approve` prints it before it asks
//! (`cli::render::print_review_summary`), the review UI shows it, and the
//! daemon's notification command receives it as JSON on stdin.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::ChangeKind;
use crate::record::RunRecord;

/// The reason rule that comes first in a summary.
const FORBIDDEN_RULE: &str = "[intent.forbidden_paths]";

/// The evidence a reviewer decides on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewSummary {
    pub run_id: String,
    pub state: String,
    pub decision: Option<String>,
    /// Approving it overrides a block (`approve --override`).
    pub override_required: bool,
    pub command: String,
    pub task: Option<String>,
    pub workspace: String,
    pub intent_summary: String,
    pub reviewer_note: Option<String>,
    /// `uid N (via daemon|local)`, or `unknown`.
    pub submitted_by: String,
    pub submitted_by_uid: Option<u32>,
    pub submitted_at: String,
    /// When a waiting run expires (RFC 3339), if it waits.
    pub expires_at: Option<String>,
    pub risk_level: Option<String>,
    pub risk_score: Option<u32>,
    /// `[rule] message`, forbidden paths first, then as the verdict ordered them.
    pub reasons: Vec<String>,
    pub forbidden_paths_touched: Vec<String>,
    pub surprise_paths: Vec<String>,
    pub changes: ChangeCounts,
    /// The change list counted by directory (`node_modules/`: 50,000
    /// created in 2,000 dirs); flagged paths are in the lists above.
    pub changes_by_dir: Vec<crate::model::dir_summary::DirSummary>,
    pub would_be_actions: Vec<ActionSummary>,
    /// `apply` or `rerun`.
    pub live_mode: String,
}

/// How many changes of each kind the rehearsal made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeCounts {
    pub created: usize,
    pub modified: usize,
    pub deleted: usize,
    pub metadata: usize,
    pub identical: usize,
}

/// One call a stub answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionSummary {
    /// `gh release create v1.13 → exit 0 (stub)`.
    pub call: String,
    /// Bytes it read on stdin (`None`: it did not read stdin).
    pub stdin_bytes: Option<u64>,
    /// What it read, when that is text (the first KiB the record keeps).
    pub stdin_text: Option<String>,
    /// More was read than `stdin_text` shows.
    pub stdin_cut: bool,
}

/// Is `head` text a person can read: valid UTF-8 (but for one character
/// cut in two where the record's first KiB ends, when `cut`) without NUL?
/// Control characters do not make it binary: every door shows them
/// escaped, and a single ESC must not turn a request body into "N bytes
/// (not text)" that the reviewer cannot read.
fn is_text(head: &str, cut: bool) -> bool {
    let head = match head.strip_suffix('\u{fffd}') {
        Some(h) if cut => h,
        _ => head,
    };
    !head.contains('\0') && !head.contains('\u{fffd}')
}

impl ReviewSummary {
    /// The summary of `r`; `expiry`: how long runs wait in this queue.
    pub fn of(r: &RunRecord, expiry: Option<Duration>) -> ReviewSummary {
        let reh = r.rehearsal.clone().unwrap_or_default();
        let v = r.verdict.as_ref();
        let mut reasons: Vec<String> = v.map(|v| v.reasons.clone()).unwrap_or_default();
        // Stable: forbidden paths first, the verdict's order otherwise.
        reasons.sort_by_key(|s| !s.starts_with(FORBIDDEN_RULE));
        let mut changes = ChangeCounts::default();
        for c in &reh.changes {
            match c.kind {
                ChangeKind::Created => changes.created += 1,
                ChangeKind::Modified => changes.modified += 1,
                ChangeKind::Deleted => changes.deleted += 1,
                ChangeKind::Metadata => changes.metadata += 1,
                ChangeKind::Identical => changes.identical += 1,
            }
        }
        let pairs: Vec<(&str, ChangeKind)> = reh
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c.kind))
            .collect();
        let changes_by_dir = crate::model::dir_summary::summarise_by_dir(&pairs);
        let would_be_actions = reh
            .would_be_actions
            .iter()
            .zip(crate::model::promotion::shown_actions(
                &reh.would_be_actions,
            ))
            .map(|(a, call)| {
                let read = a.stdin.read && a.stdin.bytes > 0;
                let cut = a.stdin.bytes > crate::model::stubs::STDIN_HEAD as u64;
                let text = read && is_text(&a.stdin.head, cut);
                ActionSummary {
                    call,
                    stdin_bytes: a.stdin.read.then_some(a.stdin.bytes),
                    stdin_text: text.then(|| a.stdin.head.clone()),
                    stdin_cut: text && cut,
                }
            })
            .collect();
        let expires_at = expiry
            .and_then(|e| super::queue::expires_at(r, e))
            .map(|t| humantime::format_rfc3339_seconds(t).to_string());
        ReviewSummary {
            run_id: r.run_id.clone(),
            state: r.state.as_str().into(),
            decision: v.map(|v| v.decision.as_str().to_string()),
            override_required: r.override_required,
            command: r.command.clone(),
            task: r.task.clone(),
            workspace: r.workspace.clone(),
            intent_summary: r.intent.summary.clone(),
            reviewer_note: r.intent.reviewer_note.clone(),
            submitted_by: r
                .submitted_by
                .as_ref()
                .map(|a| format!("uid {} (via {})", a.uid, a.via))
                .unwrap_or_else(|| "unknown".into()),
            submitted_by_uid: r.submitted_by.as_ref().map(|a| a.uid),
            submitted_at: r.created_at.clone(),
            expires_at,
            risk_level: r.risk.as_ref().map(|k| k.level.clone()),
            risk_score: r.risk.as_ref().map(|k| k.score),
            reasons,
            forbidden_paths_touched: v
                .map(|v| v.forbidden_paths_touched.clone())
                .unwrap_or_default(),
            surprise_paths: v.map(|v| v.surprise_paths.clone()).unwrap_or_default(),
            changes,
            changes_by_dir,
            would_be_actions,
            live_mode: r
                .live
                .as_ref()
                .map(|l| l.mode.as_str())
                .unwrap_or("apply")
                .into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_told_from_binary() {
        assert!(is_text("release notes\nline two\n", false));
        assert!(!is_text("\u{fffd}\u{fffd}PNG", false));
        assert!(!is_text("a\0b", false));
        // Controls are shown escaped, not hidden as "not text".
        assert!(is_text("body \u{1b}[2J", false));
        // A character the first KiB cuts in two.
        assert!(is_text("caf\u{fffd}", true));
        assert!(!is_text("caf\u{fffd}", false));
    }
}
