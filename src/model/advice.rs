//! What to change so that a run goes through: one hint per kind of finding
//! that held the run back, for the agent (and the person) reading a block.
//! The one place that maps rule ids to advice; the verdict stores its
//! hints in the record (`verdict.to_change`), and every door shows them.

use super::decision::{Decision, Finding};

/// The hints for `findings` (most severe first, as the verdict sorts
/// them): one per kind of rule that did not let the run through, in that
/// order, each once.
pub(crate) fn to_change(findings: &[Finding]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in findings.iter().filter(|f| f.decision > Decision::Promote) {
        let hint = hint(&f.rule);
        if !out.contains(&hint) {
            out.push(hint);
        }
    }
    out
}

fn hint(rule: &str) -> String {
    let (family, name) = rule.split_once('.').unwrap_or((rule, ""));
    match (family, name) {
        ("intent", "forbidden_paths") => {
            "leave the forbidden paths named above alone: the intent forbids touching them".into()
        }
        ("intent", "read_only") => {
            "the run was declared read_only: run a command that writes nothing, or declare it mutating".into()
        }
        ("intent", "expected_writes") => {
            "write only where the intent expects writes: change the command so it does not write the surprise paths, or have a person widen the intent (expected_writes; for the hooks, the `hook:` section of dryrun.yaml)".into()
        }
        ("protected", _) => {
            "the change touches files where agents persist or escalate (protected paths, executables, directories on a PATH): leave them out of the change, or let a person approve it".into()
        }
        ("evidence", "network") | ("egress", _) => {
            "the rehearsal has no network beyond its allowlist: work offline (vendored or cached dependencies), or declare the hosts the command needs (intent.network.allow)".into()
        }
        ("evidence", "exit_status") => {
            "the command failed: read its output and fix the cause, then run it again".into()
        }
        ("evidence", "background_processes") => {
            "do not leave processes running after the command ends: run them in the foreground and wait for them".into()
        }
        ("evidence", "denied_write") => {
            "the command tried to write outside the workspace and /tmp: keep its writes inside the workspace".into()
        }
        ("evidence", _) => {
            "the change set holds something the live lane will not write as it is (see the reasons): change the command so it does not make it".into()
        }
        ("limits", "timeout") => {
            "the command ran out of time: make it narrower or faster, or raise the run's timeout (timeout_s; for the hooks, hook.timeout_s)".into()
        }
        ("limits", limit) => format!(
            "the command hit its {limit} limit: make it produce less, or raise the limit"
        ),
        ("stubs", _) | ("replay", _) | ("live", _) => {
            "calls with a remote effect were answered by stubs and are not made live: leave them out of the command, or have a person run or approve them".into()
        }
        ("risk", "opaque_one_liner") => {
            "split the one-liner into separate commands, each rehearsed and judged on its own".into()
        }
        _ => format!(
            "the command itself needs a person's approval (rule {rule}): use a less risky command, or wait for a person"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rule: &str, decision: Decision) -> Finding {
        Finding {
            rule: rule.into(),
            decision,
            message: String::new(),
        }
    }

    #[test]
    fn one_hint_per_kind_of_finding_that_held_the_run_back() {
        let hints = to_change(&[
            f("intent.expected_writes", Decision::Blocked),
            f("intent.expected_writes", Decision::Blocked),
            f("limits.output", Decision::Blocked),
            f("fs.shred", Decision::NeedsApproval),
            f("read.shell", Decision::Promote),
        ]);
        assert_eq!(hints.len(), 3, "{hints:?}");
        assert!(hints[0].contains("surprise paths"));
        assert!(hints[1].contains("output limit"));
        assert!(hints[2].contains("rule fs.shred"));
        assert!(to_change(&[f("read.shell", Decision::Promote)]).is_empty());
    }
}
