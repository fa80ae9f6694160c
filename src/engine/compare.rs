//! `dryrun diff RUN_A RUN_B`: what differs between two runs' evidence.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Change;
use crate::record::RunRecord;
use crate::workspace::paths::escape_for_humans;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunComparison {
    pub run_a: String,
    pub run_b: String,
    /// Both runs' evidence hashes are equal (nothing below differs).
    pub same_evidence: bool,
    pub evidence_hash_a: String,
    pub evidence_hash_b: String,
    pub exit: Option<ExitDifference>,
    pub changes: ChangeDifferences,
    /// Unified diffs of the outputs, when they differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_diff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_diff: Option<String>,
    pub blocked_only_in_a: Vec<String>,
    pub blocked_only_in_b: Vec<String>,
    pub decision_a: Option<String>,
    pub decision_b: Option<String>,
    /// Would-be actions (stubbed calls) one run made and the other did not,
    /// compared by tool, argv, stdin and answer (exit, stdout, stderr),
    /// counting repeats.
    #[serde(default)]
    pub actions_only_in_a: Vec<ActionSummary>,
    #[serde(default)]
    pub actions_only_in_b: Vec<ActionSummary>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct ActionSummary {
    /// `tool arg1 arg2` (shortened past 200 characters).
    pub call: String,
    pub argv_hash: String,
    pub stdin_blake3: String,
    pub exit: i32,
    /// BLAKE3 of the answer's stdout and stderr.
    #[serde(default)]
    pub answer_blake3: String,
    pub source: String,
}

fn action_summaries(r: &crate::record::Rehearsal) -> Vec<ActionSummary> {
    r.would_be_actions
        .iter()
        .map(|a| ActionSummary {
            call: a.shown(),
            argv_hash: a.argv_hash.clone(),
            stdin_blake3: a.stdin.blake3.clone(),
            exit: a.answer.exit,
            answer_blake3: {
                let mut h = blake3::Hasher::new();
                h.update(&(a.answer.stdout.len() as u64).to_le_bytes());
                h.update(a.answer.stdout.as_bytes());
                h.update(a.answer.stderr.as_bytes());
                h.finalize().to_hex().to_string()
            },
            source: a.source.clone(),
        })
        .collect()
}

/// `a` minus `b`, as multisets (the source of an answer does not count).
fn actions_minus(a: &[ActionSummary], b: &[ActionSummary]) -> Vec<ActionSummary> {
    let key = |x: &ActionSummary| {
        (
            x.argv_hash.clone(),
            x.stdin_blake3.clone(),
            x.exit,
            x.answer_blake3.clone(),
        )
    };
    let mut left: Vec<_> = b.iter().map(key).collect();
    let mut out = Vec::new();
    for x in a {
        match left.iter().position(|k| *k == key(x)) {
            Some(i) => {
                left.swap_remove(i);
            }
            None => out.push(x.clone()),
        }
    }
    out
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExitDifference {
    pub a: Option<i32>,
    pub b: Option<i32>,
    pub signal_a: Option<i32>,
    pub signal_b: Option<i32>,
    pub timed_out_a: bool,
    pub timed_out_b: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ChangeDifferences {
    /// Paths only run A changed.
    pub only_in_a: Vec<ChangeSummary>,
    pub only_in_b: Vec<ChangeSummary>,
    /// Paths both changed, differently.
    pub different: Vec<ChangePair>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChangeSummary {
    pub path: String,
    pub kind: String,
    pub file_type: String,
    pub after: Option<String>,
    pub mode_after: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChangePair {
    pub path: String,
    pub a: ChangeSummary,
    pub b: ChangeSummary,
}

/// A serde enum's wire name (`created`, `file`, ...).
fn wire_name<T: Serialize>(t: &T) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

fn summary(c: &Change) -> ChangeSummary {
    ChangeSummary {
        path: escape_for_humans(&c.path_bytes()),
        kind: wire_name(&c.kind),
        file_type: wire_name(&c.file_type),
        after: c.after.clone(),
        mode_after: c.mode_after,
    }
}

fn text_diff(a: &str, b: &str, label_a: &str, label_b: &str) -> Option<String> {
    if a == b {
        return None;
    }
    Some(
        similar::TextDiff::from_lines(a, b)
            .unified_diff()
            .context_radius(2)
            .header(label_a, label_b)
            .to_string(),
    )
}

/// Compare two runs' evidence.
pub fn compare_runs(a: &RunRecord, b: &RunRecord) -> RunComparison {
    let ra = a.rehearsal.clone().unwrap_or_default();
    let rb = b.rehearsal.clone().unwrap_or_default();
    let map = |v: &[Change]| -> BTreeMap<Vec<u8>, Change> {
        v.iter().map(|c| (c.path_bytes(), c.clone())).collect()
    };
    let (ma, mb) = (map(&ra.changes), map(&rb.changes));
    let mut changes = ChangeDifferences::default();
    for (p, ca) in &ma {
        match mb.get(p) {
            None => changes.only_in_a.push(summary(ca)),
            Some(cb) => {
                let key = |c: &Change| {
                    (
                        c.kind,
                        c.file_type,
                        c.after.clone(),
                        c.mode_after,
                        c.symlink_target.clone(),
                    )
                };
                if key(ca) != key(cb) {
                    changes.different.push(ChangePair {
                        path: escape_for_humans(p),
                        a: summary(ca),
                        b: summary(cb),
                    });
                }
            }
        }
    }
    for (p, cb) in &mb {
        if !ma.contains_key(p) {
            changes.only_in_b.push(summary(cb));
        }
    }
    let exit =
        (ra.exit_code != rb.exit_code || ra.signal != rb.signal || ra.timed_out != rb.timed_out)
            .then_some(ExitDifference {
                a: ra.exit_code,
                b: rb.exit_code,
                signal_a: ra.signal,
                signal_b: rb.signal,
                timed_out_a: ra.timed_out,
                timed_out_b: rb.timed_out,
            });
    let blocked = |r: &crate::record::Rehearsal| -> Vec<String> {
        r.blocked
            .iter()
            .map(|x| format!("{}: {}", x.kind, x.detail))
            .collect()
    };
    let (ba, bb) = (blocked(&ra), blocked(&rb));
    let (aa, ab) = (action_summaries(&ra), action_summaries(&rb));
    RunComparison {
        run_a: a.run_id.clone(),
        run_b: b.run_id.clone(),
        same_evidence: !ra.evidence_hash.is_empty() && ra.evidence_hash == rb.evidence_hash,
        evidence_hash_a: ra.evidence_hash.clone(),
        evidence_hash_b: rb.evidence_hash.clone(),
        exit,
        stdout_diff: text_diff(
            &ra.stdout,
            &rb.stdout,
            &format!("{} stdout", a.run_id),
            &format!("{} stdout", b.run_id),
        ),
        stderr_diff: text_diff(
            &ra.stderr,
            &rb.stderr,
            &format!("{} stderr", a.run_id),
            &format!("{} stderr", b.run_id),
        ),
        blocked_only_in_a: ba.iter().filter(|x| !bb.contains(x)).cloned().collect(),
        blocked_only_in_b: bb.iter().filter(|x| !ba.contains(x)).cloned().collect(),
        decision_a: a.verdict.as_ref().map(|v| v.decision.as_str().to_string()),
        decision_b: b.verdict.as_ref().map(|v| v.decision.as_str().to_string()),
        changes,
        actions_only_in_a: actions_minus(&aa, &ab),
        actions_only_in_b: actions_minus(&ab, &aa),
    }
}
