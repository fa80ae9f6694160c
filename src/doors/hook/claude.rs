//! Claude Code's command-hook answer: `hookSpecificOutput` of a
//! `PreToolUse` event with `permissionDecision` allow / ask / deny, its
//! reason, and `updatedInput` (the whole tool input, rewritten).

use serde_json::{Value, json};

use super::Answer;

pub fn render(answer: &Answer) -> Option<Value> {
    let (decision, reason, input) = match answer {
        Answer::PassThrough => return None,
        Answer::Allow { input, reason } => ("allow", reason, Some(input)),
        Answer::Ask { input, reason } => ("ask", reason, Some(input)),
        Answer::Deny { reason } => ("deny", reason, None),
    };
    let mut out = json!({
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    });
    if let Some(i) = input {
        out["updatedInput"] = i.clone();
    }
    Some(json!({ "hookSpecificOutput": out }))
}
