//! Decisions are ordered values: combining findings is `max`.

use serde::{Deserialize, Serialize};

/// Ordered: combining findings is `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Promote,
    NeedsApproval,
    Blocked,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Promote => "promote",
            Decision::NeedsApproval => "needs_approval",
            Decision::Blocked => "blocked",
        }
    }
    /// `dryrun execute` exit code: 0 promote, 3 needs approval, 4 blocked.
    pub fn exit_code(self) -> i32 {
        match self {
            Decision::Promote => 0,
            Decision::NeedsApproval => 3,
            Decision::Blocked => 4,
        }
    }
}

/// One rule's judgement: every finding names the rule that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: String,
    pub decision: Decision,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combining_decisions_is_max() {
        let combined = [
            Decision::Promote,
            Decision::Blocked,
            Decision::NeedsApproval,
        ]
        .into_iter()
        .max();
        assert_eq!(combined, Some(Decision::Blocked));
        assert_eq!(Decision::NeedsApproval.exit_code(), 3);
    }

    #[test]
    fn decision_is_ordered_and_serializes_as_before() {
        assert!(Decision::Promote < Decision::NeedsApproval);
        assert!(Decision::NeedsApproval < Decision::Blocked);
        for d in [
            Decision::Promote,
            Decision::NeedsApproval,
            Decision::Blocked,
        ] {
            assert_eq!(
                serde_json::to_value(d).unwrap(),
                serde_json::Value::String(d.as_str().into())
            );
        }
    }
}
