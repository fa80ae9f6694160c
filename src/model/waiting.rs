//! Who can act on a verdict's finding, and the one rule of the review
//! queue: a run waits for a person only when a person can usefully decide
//! it.
//!
//! A finding is either something a person can weigh (a surprise path, a
//! forbidden or protected path, the network, a call a stub answered, the
//! command's risk: approving it means "yes, that is fine") or something
//! only the agent can fix by running again (an exit status it asked to
//! block on, a limit the rehearsal hit, processes it left behind, the
//! sandbox's own kill): no approval makes such a rehearsal say more than
//! it did. A run whose decision is not promote waits only when at least
//! one finding that made it so is a person's; otherwise it ends
//! `rehearsed` with its decision, and the agent sees why and runs again.
//!
//! Rule ids not named here are a person's: a new kind of finding waits
//! for one until it is entered in [`weigher`] (failing towards a person
//! deciding, never towards a finding nobody sees).

use super::{Decision, Finding};

/// Who can usefully act on a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Weigher {
    /// A person can weigh it: approving the run is a meaningful answer.
    Person,
    /// Only the agent can act on it, by changing the command or its
    /// limits and running again.
    Agent,
}

/// The rules whose findings only the agent can act on.
const AGENT_RULES: &[&str] = &[
    // A non-zero exit where the intent asked for success
    // (`intent.require_success`), a kill by the sandbox's seccomp, a
    // command that never finished.
    "evidence.exit_status",
    // Limits and the walk's own caps, and what they cut short.
    "evidence.blocked",
    // Processes left running: a rehearsal cannot show what they would do.
    "evidence.background_processes",
    // A strict replay that met a call its recording never saw.
    "replay.novel_call",
];

/// Who can usefully act on a finding of rule `rule`.
pub(crate) fn weigher(rule: &str) -> Weigher {
    if rule.starts_with("limits.") || AGENT_RULES.contains(&rule) {
        Weigher::Agent
    } else {
        Weigher::Person
    }
}

/// The one rule of the review queue: does a run with this decision and
/// these findings wait for a person? Only when its decision is not
/// promote and a finding that raised it above promote is a person's.
pub(crate) fn waits_for_person(decision: Decision, findings: &[Finding]) -> bool {
    decision != Decision::Promote
        && findings
            .iter()
            .any(|f| f.decision > Decision::Promote && weigher(&f.rule) == Weigher::Person)
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
    fn only_findings_a_person_can_weigh_make_a_run_wait() {
        use Decision::*;
        // A plain failure, a limit, left-over processes: the agent's.
        for rule in [
            "evidence.exit_status",
            "limits.timeout",
            "limits.memory",
            "limits.record",
            "evidence.blocked",
            "evidence.background_processes",
            "replay.novel_call",
        ] {
            assert_eq!(weigher(rule), Weigher::Agent, "{rule}");
            assert!(!waits_for_person(Blocked, &[f(rule, Blocked)]), "{rule}");
        }
        // What a person can weigh, and anything not named.
        for rule in [
            "intent.expected_writes",
            "intent.forbidden_paths",
            "protected.path",
            "evidence.network",
            "stubs.would_be_action",
            "risk.score",
            "evidence.symlink_escape",
            "some.future_rule",
        ] {
            assert_eq!(weigher(rule), Weigher::Person, "{rule}");
            assert!(
                waits_for_person(NeedsApproval, &[f(rule, NeedsApproval)]),
                "{rule}"
            );
        }
        // One person's finding among the agent's: it waits.
        assert!(waits_for_person(
            Blocked,
            &[
                f("evidence.exit_status", Blocked),
                f("protected.path", NeedsApproval)
            ]
        ));
        // A promote never waits, and a person's finding that did not raise
        // the decision (a promote-level one) does not make it wait.
        assert!(!waits_for_person(Promote, &[f("protected.path", Promote)]));
        assert!(!waits_for_person(
            Blocked,
            &[f("limits.timeout", Blocked), f("protected.path", Promote)]
        ));
    }
}
