//! The command's exit status: a result to report, not a block by itself.
//!
//! A command that fails inside its intent left the workspace as it would
//! live (`cargo test` failing, `ruff check --fix` fixing some and exiting
//! 1, a commit a pre-commit hook refused): promoting its change set keeps
//! the workspace where the live run would have left it, and the agent gets
//! the status and the output. What blocks is what the evidence shows
//! (surprise, forbidden or protected paths, network, limits, ...), judged
//! by the verdict's other checks. Three exceptions, each a finding of rule
//! `evidence.exit_status` that only the agent can act on (see
//! `crate::model::waiting`): the intent asked for success
//! (`intent.require_success`, per task or in the hook section), the
//! sandbox's own seccomp killed the command (SIGSYS: live it would not have
//! died so), or the command never finished (no status at all).

use crate::model::{Decision, Finding, RehearsalReport};

/// SIGSYS: what the sandbox's seccomp filter kills a process with.
const SIGSYS: i32 = 31;

/// What the exit status adds to the verdict: a blocking finding, or a note
/// that says the command failed and what that means for its change set.
pub(super) fn exit_status_finding(
    r: &RehearsalReport,
    require_success: bool,
) -> Result<Option<String>, Finding> {
    let block = |message: String| Finding {
        rule: "evidence.exit_status".into(),
        decision: Decision::Blocked,
        message,
    };
    let failed = match (r.exit_code, r.signal) {
        (Some(0), _) => return Ok(None),
        (Some(code), _) => format!("the command exited with status {code}"),
        (None, Some(SIGSYS)) => {
            return Err(block(
                "the command was killed by signal 31 (SIGSYS), the sandbox's system call filter; live it would not have died so".into(),
            ));
        }
        (None, Some(sig)) => format!("the command was killed by signal {sig}"),
        (None, None) => return Err(block("the command did not finish".into())),
    };
    if require_success {
        return Err(block(format!(
            "{failed}, and the intent requires success (intent.require_success)"
        )));
    }
    Ok(Some(format!(
        "{failed}: a result, not a block; its change set is what the failed command left, as it would live (intent.require_success: true blocks instead)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(exit_code: Option<i32>, signal: Option<i32>) -> RehearsalReport {
        RehearsalReport {
            exit_code,
            signal,
            ..Default::default()
        }
    }

    #[test]
    fn a_failure_is_a_note_unless_success_is_required() {
        assert_eq!(exit_status_finding(&report(Some(0), None), true), Ok(None));
        let note = exit_status_finding(&report(Some(1), None), false)
            .unwrap()
            .unwrap();
        assert!(
            note.starts_with("the command exited with status 1: a result"),
            "{note}"
        );
        let killed = exit_status_finding(&report(None, Some(15)), false)
            .unwrap()
            .unwrap();
        assert!(killed.contains("signal 15"), "{killed}");
        let f = exit_status_finding(&report(Some(2), None), true).unwrap_err();
        assert_eq!(
            (f.rule.as_str(), f.decision),
            ("evidence.exit_status", Decision::Blocked)
        );
        assert!(f.message.contains("status 2"), "{}", f.message);
        // Not the command's doing, or no status: blocked whatever the intent.
        for (code, sig) in [(None, Some(SIGSYS)), (None, None)] {
            let f = exit_status_finding(&report(code, sig), false).unwrap_err();
            assert_eq!(f.decision, Decision::Blocked);
        }
    }
}
