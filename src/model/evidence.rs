//! What a rehearsal reports besides its changes: attempts the sandbox
//! blocked, limits the run hit, and each step's outcome.
//!
//! Kinds and limit names are closed sets, serialized as the same strings the
//! run record has always held (`"network"`, `"path_depth"`, ...). Every kind
//! ever written by dryrun is listed; a record naming another one does not
//! load (the tests below pin the historical strings).

use serde::{Deserialize, Serialize};

/// What kind of attempt the sandbox blocked.
///
/// Variants are declared in the order of their names, so sorting the typed
/// values sorts as the strings did (the evidence hash depends on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockedKind {
    /// A limit cut the run short (path depth, disk, record size).
    Limit,
    /// A network connection (only loopback exists in the rehearsal).
    Network,
    /// A syscall the seccomp filter denies.
    Seccomp,
    /// A write Landlock or a read-only mount refused.
    Write,
}

impl BlockedKind {
    pub const ALL: [BlockedKind; 4] = [
        BlockedKind::Limit,
        BlockedKind::Network,
        BlockedKind::Seccomp,
        BlockedKind::Write,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BlockedKind::Limit => "limit",
            BlockedKind::Network => "network",
            BlockedKind::Seccomp => "seccomp",
            BlockedKind::Write => "write",
        }
    }

    /// The verdict rule a blocked attempt of this kind produces.
    pub fn rule(self) -> &'static str {
        match self {
            BlockedKind::Network => "evidence.network",
            BlockedKind::Write => "evidence.denied_write",
            // The rule ids records have always carried for these two.
            BlockedKind::Limit | BlockedKind::Seccomp => "evidence.blocked",
        }
    }
}

impl std::fmt::Display for BlockedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt the sandbox blocked (`rehearsal.blocked`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Blocked {
    pub kind: BlockedKind,
    pub detail: String,
}

/// A limit the run hit (`rehearsal.limits_hit`).
///
/// Declared in the order of their names: sorting typed values sorts as the
/// strings did, so the record and the evidence hash are unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitHit {
    /// More changes than the evidence lists.
    Changes,
    /// The upper layer, `/tmp` or the kept-content budget filled up.
    Disk,
    Memory,
    /// Stdout/stderr past `limits.output_kb`.
    Output,
    /// A path deeper than the walk follows.
    PathDepth,
    Pids,
    /// The run record was cut to its size cap.
    Record,
    Timeout,
}

impl LimitHit {
    pub const ALL: [LimitHit; 8] = [
        LimitHit::Changes,
        LimitHit::Disk,
        LimitHit::Memory,
        LimitHit::Output,
        LimitHit::PathDepth,
        LimitHit::Pids,
        LimitHit::Record,
        LimitHit::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LimitHit::Changes => "changes",
            LimitHit::Disk => "disk",
            LimitHit::Memory => "memory",
            LimitHit::Output => "output",
            LimitHit::PathDepth => "path_depth",
            LimitHit::Pids => "pids",
            LimitHit::Record => "record",
            LimitHit::Timeout => "timeout",
        }
    }
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of a multi-step envelope.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepOutcome {
    pub command: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_kinds_serialize_as_the_historical_strings_in_sorted_order() {
        let historical = ["limit", "network", "seccomp", "write"];
        let names: Vec<&str> = BlockedKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, historical);
        for k in BlockedKind::ALL {
            let v = serde_json::to_value(k).unwrap();
            assert_eq!(v, serde_json::Value::String(k.as_str().into()));
            assert_eq!(serde_json::from_value::<BlockedKind>(v).unwrap(), k);
        }
        let mut sorted = BlockedKind::ALL;
        sorted.sort();
        assert_eq!(sorted, BlockedKind::ALL);
    }

    #[test]
    fn an_unknown_blocked_kind_does_not_load() {
        // dryrun never wrote another kind; a record naming one was not
        // written by it, and is refused rather than judged as something else.
        let b = serde_json::from_str::<Blocked>(r#"{"kind":"teleport","detail":"x"}"#);
        assert!(b.is_err());
        let b: Blocked = serde_json::from_str(r#"{"kind":"write","detail":"x"}"#).unwrap();
        assert_eq!(b.kind, BlockedKind::Write);
    }

    #[test]
    fn limit_names_serialize_as_before_and_sort_as_strings() {
        let historical = [
            "changes",
            "disk",
            "memory",
            "output",
            "path_depth",
            "pids",
            "record",
            "timeout",
        ];
        let names: Vec<&str> = LimitHit::ALL.iter().map(|l| l.as_str()).collect();
        assert_eq!(names, historical);
        let mut by_string = historical;
        by_string.sort();
        assert_eq!(by_string, historical, "declaration order is string order");
        for l in LimitHit::ALL {
            let v = serde_json::to_value(l).unwrap();
            assert_eq!(v, serde_json::Value::String(l.as_str().into()));
            assert_eq!(serde_json::from_value::<LimitHit>(v).unwrap(), l);
        }
    }
}
