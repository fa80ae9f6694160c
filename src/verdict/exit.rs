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
//!
//! A failure the sandbox's own limits caused is not a result either, and
//! where a limit is enforced without the rehearsal seeing it hit (memory
//! and processes as per-process rlimits, when no cgroup enforces them; the
//! CPU-time and file-size rlimits, which kill with SIGXCPU and SIGXFSZ),
//! a failed command whose output says it ran out of that resource is a
//! finding of that limit (`limits.memory`, `limits.pids`, ...: the agent's
//! to fix, by raising the limit). The output is the command's: it can only
//! make its own run block this way, never pass.

use crate::model::{Decision, Finding, RehearsalReport};

/// SIGSYS: what the sandbox's seccomp filter kills a process with.
const SIGSYS: i32 = 31;
/// SIGXCPU, SIGXFSZ: what the CPU-time and file-size rlimits kill with.
const SIGXCPU: i32 = 24;
const SIGXFSZ: i32 = 25;

/// What a program prints when an allocation fails, and when it cannot
/// start a process.
const OUT_OF_MEMORY: &[&str] = &[
    "MemoryError",
    "Cannot allocate memory",
    "out of memory",
    "Out of memory",
    "std::bad_alloc",
    "memory allocation of ",
    "failed to allocate",
];
const OUT_OF_PROCESSES: &[&str] = &[
    "Resource temporarily unavailable",
    "fork: retry",
    "Cannot fork",
    "can't fork",
];

/// A failure the sandbox's rlimits most likely caused, unseen as a limit
/// hit: `(rule, message)`.
fn rlimit_failure(r: &RehearsalReport) -> Option<(&'static str, String)> {
    let enforced = |what: &str| r.enforcement.iter().any(|e| e.starts_with(what));
    let said = |needles: &[&str]| {
        let tail =
            |b: &[u8]| String::from_utf8_lossy(&b[b.len().saturating_sub(64 << 10)..]).into_owned();
        let text = tail(&r.stderr) + &tail(&r.stdout);
        needles
            .iter()
            .find(|n| text.contains(*n))
            .map(|n| n.to_string())
    };
    match r.signal {
        Some(SIGXCPU) => {
            return Some((
                "limits.cpu",
                "the command was killed by SIGXCPU: it used up the rehearsal's CPU time (limits.timeout_s)".into(),
            ));
        }
        Some(SIGXFSZ) => {
            return Some((
                "limits.disk",
                "the command was killed by SIGXFSZ: it wrote a file larger than the rehearsal allows (limits.disk_mb)".into(),
            ));
        }
        _ => {}
    }
    if enforced("memory: rlimit")
        && let Some(n) = said(OUT_OF_MEMORY)
    {
        return Some((
            "limits.memory",
            format!(
                "the command failed saying it ran out of memory ({n:?}) while the rehearsal limited each process's memory (limits.memory_mb, an rlimit here: no cgroup saw it); live it may not have; raise limits.memory_mb"
            ),
        ));
    }
    if enforced("pids: rlimit")
        && let Some(n) = said(OUT_OF_PROCESSES)
    {
        return Some((
            "limits.pids",
            format!(
                "the command failed saying it could not start a process ({n:?}) while the rehearsal limited its processes (limits.pids, an rlimit here); live it may not have; raise limits.pids"
            ),
        ));
    }
    None
}

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
    if !matches!((r.exit_code, r.signal), (Some(0), _))
        && let Some((rule, message)) = rlimit_failure(r)
    {
        return Err(Finding {
            rule: rule.into(),
            decision: Decision::Blocked,
            message,
        });
    }
    let failed = match (r.exit_code, r.signal) {
        (Some(0), _) => return Ok(None),
        (Some(code), _) => format!(
            "the command exited with status {code}{}",
            super::view::exit_status_explained(code, r)
        ),
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
        for (code, sig) in [(None, Some(SIGSYS)), (None, None), (None, Some(SIGXCPU))] {
            let f = exit_status_finding(&report(code, sig), false).unwrap_err();
            assert_eq!(f.decision, Decision::Blocked);
        }
    }

    #[test]
    fn running_out_under_an_unseen_rlimit_is_that_limit() {
        let mut r = report(Some(1), None);
        r.stderr = b"Traceback ...\nMemoryError\n".to_vec();
        // A cgroup enforces memory (and would have seen it): a result.
        r.enforcement = vec!["memory: cgroup v1 (...)".into()];
        assert!(exit_status_finding(&r, false).is_ok());
        // Per-process rlimits: the limit, blocked (the agent's to raise).
        r.enforcement = vec!["memory: rlimit (RLIMIT_DATA, per process)".into()];
        let f = exit_status_finding(&r, false).unwrap_err();
        assert_eq!(
            (f.rule.as_str(), f.decision),
            ("limits.memory", Decision::Blocked)
        );
        r.stderr = b"sh: fork: retry: Resource temporarily unavailable\n".to_vec();
        r.enforcement
            .push("pids: rlimit (RLIMIT_NPROC, per sandbox user)".into());
        assert_eq!(
            exit_status_finding(&r, false).unwrap_err().rule,
            "limits.pids"
        );
        // A success is a success whatever it printed.
        r.exit_code = Some(0);
        assert_eq!(exit_status_finding(&r, false), Ok(None));
    }
}
