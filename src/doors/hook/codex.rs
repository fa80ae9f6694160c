//! Codex's command-hook answers. `PreToolUse` takes `deny` (with a
//! non-empty reason) or `allow` together with `updatedInput` (a string
//! `command`); it has no `ask`. `PermissionRequest` takes a decision
//! `{behavior: allow|deny, message}` and no rewrite.
//!
//! Without `ask`, a run that needs approval is answered with a rewrite
//! that waits up to [`AWAIT_APPROVAL_S`] for a dryrun reviewer (`dryrun
//! approve`, another identity) and then applies the reviewed change set;
//! without an approval in time nothing is applied and it exits 4.

use serde_json::{Value, json};

use super::Answer;

/// How long a Codex rewrite waits for a reviewer's approval by default
/// (`hook.await_approval_s` in `dryrun.yaml`).
pub const AWAIT_APPROVAL_S: u64 = 300;

pub fn render(answer: &Answer) -> Option<Value> {
    Some(match answer {
        Answer::PassThrough => return None,
        Answer::Allow { input, reason } => json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": reason,
                "updatedInput": input,
            }
        }),
        // Codex cannot ask in PreToolUse; `decide` never answers Ask for
        // Codex, and were it to, the safe reading is a denial.
        Answer::Ask { reason, .. } | Answer::Deny { reason } => json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }),
    })
}

/// The answer to a `PermissionRequest` event (the same shape in Claude
/// Code and Codex).
pub fn render_permission_request(answer: &Answer) -> Option<Value> {
    let (behavior, message) = match answer {
        Answer::PassThrough => return None,
        Answer::Allow { reason, .. } => ("allow", reason),
        Answer::Ask { reason, .. } | Answer::Deny { reason } => ("deny", reason),
    };
    Some(json!({
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": behavior, "message": message},
        }
    }))
}
