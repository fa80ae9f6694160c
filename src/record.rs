//! The run record (`schema: "dryrun.run/v1"`). Fields may be added;
//! none of the documented ones may be renamed or removed without a schema bump.

use serde::{Deserialize, Serialize};

use crate::journal::{Actor, Appended};
pub(crate) use crate::model::RunState;
use crate::model::output::{OutputChunk, OutputStream};
use crate::model::{Blocked, Change, ChangeKind, FileType, LimitHit, StepOutcome};
pub(crate) use crate::model::{LiveMode, LiveNetwork};
use crate::verdict::Verdict;

pub(crate) const SCHEMA: &str = "dryrun.run/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentRecord {
    pub summary: String,
    pub mode: String,
    pub expected_writes: Vec<String>,
    pub forbidden_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer_note: Option<String>,
    /// `intent.network.allow` as validated (absent: `network: none`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<String>,
    /// `intent.require_success`: a non-zero exit blocks this run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_success: bool,
    /// `intent.network.services` as validated (absent: none declared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// The registry presets the allowlist named, each with the hosts it
    /// became (in `network`) and where they came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_presets: Vec<String>,
}

/// How the sandbox was built for this run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SandboxRecord {
    pub image: String,
    pub landlock_abi: u32,
    pub landlock_status: String,
    pub seccomp: bool,
    /// e.g. `shifted: sandbox ids 0-65535 are host ids 1000000-1065535`.
    pub ids: String,
    /// How each limit was enforced.
    pub enforcement: Vec<String>,
    pub network: String,
    /// The limits the run had: what it asked for, the engine's defaults
    /// (sized to the machine) for the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::envelope::LimitsSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Rehearsal {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout: String,
    pub stderr: String,
    /// The order stdout and stderr were written in: chunks of each, in
    /// turn (`model::output`). Not part of the evidence hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_order: Vec<OutputChunk>,
    pub output_truncated: bool,
    pub changes: Vec<Change>,
    pub blocked: Vec<Blocked>,
    pub stripped: Vec<String>,
    pub limits_hit: Vec<LimitHit>,
    #[serde(default)]
    pub steps: Vec<StepOutcome>,
    #[serde(default)]
    pub sandbox: SandboxRecord,
    /// Processes still running when the command ended; killed by the
    /// sandbox's init (background jobs never outlive a rehearsal).
    #[serde(default)]
    pub leftover_processes_killed: u32,
    /// Most processes alive at once in the sandbox (its init included).
    #[serde(default)]
    pub max_processes: u64,
    /// Where the time went: phase marks in µs since the run started.
    #[serde(default)]
    pub timings_us: Vec<(String, u64)>,
    /// BLAKE3 over what the command did, without times, ids or paths of the
    /// state directory: same envelope + same workspace content + same policy
    /// gives the same hash (see [`evidence_hash`]).
    #[serde(default)]
    pub evidence_hash: String,
    /// Calls that stubs answered instead of the real tools, in
    /// call order.
    #[serde(default)]
    pub would_be_actions: Vec<crate::model::stubs::WouldBeAction>,
    /// Why the evidence may not show what the command does live (a network
    /// call no stub answered, would-be actions past the recording cap).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete: Vec<String>,
    /// How many secrets were replaced by `[redacted:KIND]` in the output,
    /// would-be actions and blocked attempts, by kind (see `crate::redact`).
    /// The evidence hash covers the redacted texts, never the raw ones.
    #[serde(default)]
    pub redactions: crate::redact::Redactions,
    /// Every destination the command tried to reach, by name (a run whose
    /// intent allows names; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<crate::model::EgressEntry>,
    /// What the command wrote outside the workspace (the throwaway layers
    /// over the home, `/tmp` and `/var/tmp`), by directory; caches listed,
    /// the rest a finding: the live lane applies the workspace only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_writes: Vec<crate::model::OutsideWrite>,
    /// Entries written outside the workspace past the summary's cap.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outside_writes_unlisted: u64,
    /// What the sandbox hid that the command tried to use (a program or a
    /// path the host has, a masked path), each with the rule that hid it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<crate::model::Hidden>,
    /// A package manager's run, one entry per installed package
    /// (`model::deps`); absent for every other run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<crate::model::deps::DependencyReport>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Rehearsal {
    /// The output in the order it was written, each piece tagged with its
    /// stream: what a terminal showed.
    pub fn output_pieces(&self) -> Vec<(OutputStream, &str)> {
        crate::model::output::interleave(&self.stdout, &self.stderr, &self.output_order)
    }

    /// The output as one text, in the order it was written.
    pub fn output_text(&self) -> String {
        crate::model::output::interleaved_text(&self.stdout, &self.stderr, &self.output_order)
    }
}

/// The evidence hash: exit status, output (as redacted: the hash is computed
/// from the record, so anyone holding it can recompute it, and the raw
/// output is never kept), the sorted change list (paths,
/// kinds, types, hashes, modes, link targets), the sorted blocked attempts
/// and limits hit, and each step's exit status. Durations, timings, run ids
/// and enforcement details are left out.
pub(crate) fn evidence_hash(r: &Rehearsal) -> String {
    // Times aside: a run a second later is not another result.
    let mut changes: Vec<String> = r
        .changes
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.mtime_after_ns = None;
            serde_json::to_string(&c).expect("serializes")
        })
        .collect();
    changes.sort();
    let mut blocked: Vec<String> = r
        .blocked
        .iter()
        .map(|b| format!("{}\u{0}{}", b.kind, b.detail))
        .collect();
    blocked.sort();
    let mut limits = r.limits_hit.clone();
    limits.sort();
    let steps: Vec<(Option<i32>, Option<i32>)> =
        r.steps.iter().map(|s| (s.exit_code, s.signal)).collect();
    let mut actions: Vec<String> = r
        .would_be_actions
        .iter()
        .map(|a| serde_json::to_string(a).expect("serializes"))
        .collect();
    actions.sort();
    let mut incomplete = r.incomplete.clone();
    incomplete.sort();
    let mut canonical = serde_json::json!({
        "v": 1,
        "would_be_actions": actions,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "timed_out": r.timed_out,
        "stdout": r.stdout,
        "stderr": r.stderr,
        "output_truncated": r.output_truncated,
        "changes": changes,
        "blocked": blocked,
        "limits_hit": limits,
        "steps": steps,
        "leftover_processes_killed": r.leftover_processes_killed,
        "incomplete": incomplete,
    });
    if !r.outside_writes.is_empty() || !r.hidden.is_empty() {
        // Where and whether a cache, not counts or bytes (a cache's
        // content may carry a date); what was hidden, by rule.
        let mut outside: Vec<String> = r
            .outside_writes
            .iter()
            .map(|w| format!("{} {}", w.path, w.cache))
            .collect();
        outside.sort();
        let mut hidden: Vec<String> = r
            .hidden
            .iter()
            .map(|h| format!("{} {} {}", h.kind.as_str(), h.path, h.rule))
            .collect();
        hidden.sort();
        canonical["outside_writes"] = serde_json::json!(outside);
        canonical["hidden"] = serde_json::json!(hidden);
    }
    if !r.egress.is_empty() {
        // Destinations and decisions, not byte counts (an upstream's
        // answer may carry a date).
        let mut egress: Vec<String> = r
            .egress
            .iter()
            .map(|e| format!("{} {} {}", e.destination(), e.how.as_str(), e.allowed))
            .collect();
        egress.sort();
        canonical["egress"] = serde_json::json!(egress);
    }
    blake3::hash(canonical.to_string().as_bytes())
        .to_hex()
        .to_string()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema: String,
    pub run_id: String,
    pub task: Option<String>,
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<String>>,
    pub workspace: String,
    pub created_at: String,
    pub envelope_hash: String,
    pub intent: IntentRecord,
    /// The classifier's score of the command (the record's `risk`), computed from
    /// the command alone, before and independently of the rehearsal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<crate::classify::Classification>,
    pub rehearsal: Option<Rehearsal>,
    pub verdict: Option<Verdict>,
    pub state: RunState,
    /// The verdict was `blocked`: the run waits in `awaiting_approval`, and
    /// a reviewer may approve it only with an explicit override.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub override_required: bool,
    /// Who closed a `rejected` run: a reviewer, its submitter withdrawing
    /// it, or the review queue's expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_because: Option<crate::model::run_state::RejectCause>,
    /// Why the run failed, when `state` is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The promotion's receipt. Written through a JSON value so its keys
    /// come out sorted, byte for byte as records held it when this field
    /// was an untyped value (see [`serialize_receipt_sorted`]).
    #[serde(serialize_with = "serialize_receipt_sorted")]
    pub receipt: Option<Receipt>,
    /// Who submitted the run (peer credentials, or the local process's ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<crate::journal::Actor>,
    /// Reviewers' decisions on this run, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalRecord>,
    /// How the live lane will carry the run out (the envelope's `live:`;
    /// variable names only, never values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveRecord>,
    /// The workspace directory the rehearsal ran on (device, inode, owner);
    /// the live lane refuses any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_identity: Option<crate::workspace::apply::Identity>,
    /// Set when `workspace` is a path in a client's own mount namespace (a
    /// container), not the host's: where it was resolved (that namespace
    /// and the client's pid). Only the daemon that holds that view
    /// promotes such a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_view: Option<String>,
    /// Set on the live lane's rerun of another run (that run's id). Such a
    /// run is evidence, never promotable itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<String>,
    /// Set on `dryrun replay`'s runs: the recorded run whose tool answers
    /// were replayed, and the novel-call policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<ReplayLink>,
    /// A waiting run its submitter's next run in the same workspace
    /// superseded (that run's id): it stays `awaiting_approval` (approvable,
    /// it still expires) but leaves the review queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// The fleet policy version that judged the run, on a host of a fleet
    /// (docs/fleet.md); absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_policy_version: Option<i64>,
}

/// The run record's `receipt` as records have always held it: the receipt
/// turned into a JSON value first, whose objects keep their keys sorted
/// (the receipt file itself, `receipt.json`, keeps the declaration order).
fn serialize_receipt_sorted<S: serde::Serializer>(
    receipt: &Option<Receipt>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match receipt {
        None => s.serialize_none(),
        Some(rc) => {
            let v = serde_json::to_value(rc).map_err(serde::ser::Error::custom)?;
            s.serialize_some(&v)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayLink {
    pub baseline: String,
    /// `strict`, `stub` or `fuzzy`.
    pub novel: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveRecord {
    pub mode: LiveMode,
    /// `host` only for a rerun.
    pub network: LiveNetwork,
    pub env_from_host: Vec<String>,
}

/// One reviewer decision (also journaled as `approval` / `rejection`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// `approve` or `reject`.
    pub action: String,
    pub by: crate::journal::Actor,
    pub at: String,
    #[serde(default)]
    pub note: String,
    /// True when a reviewer approved a run whose verdict was `blocked`.
    #[serde(default)]
    pub overrode_block: bool,
    /// How the reviewer was authenticated: `peer_credentials` (daemon) or
    /// `local_tty_confirmation` (local mode: a uid other than the submitter's, at a terminal).
    pub authenticated_by: String,
    /// A fleet reviewer's decision (`authenticated_by: fleet_role`): the
    /// decision's id in the fleet store, the PostgreSQL role and the person
    /// the fleet config maps it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetApproval>,
}

/// Who decided a run through the fleet store (docs/fleet.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetApproval {
    /// The decision's id in the fleet store (`dryrun.decisions.id`).
    pub decision: i64,
    /// The PostgreSQL role that made it (the database's authentication).
    pub role: String,
    /// The person the fleet config maps that role to.
    pub person: String,
}

/// The receipt: what went live, bound to what was reviewed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    pub schema: String,
    pub receipt_id: String,
    pub run_id: String,
    pub promoted_at: String,
    pub promoted_by: Actor,
    /// `apply` or `rerun`.
    pub mode: LiveMode,
    pub workspace: String,
    pub command: String,
    pub envelope_hash: String,
    pub policy_hash: Option<String>,
    pub landlock_abi: u32,
    /// BLAKE3 over the sorted change list (the same as the verdict's journal record).
    pub change_set: String,
    /// The rehearsal's `evidence_hash` (what the reviewer saw).
    #[serde(default)]
    pub evidence_hash: String,
    pub changes: Vec<ReceiptChange>,
    /// Set when `changes` was left out of this copy (the journal's record
    /// and the run record's) because the change set is longer than
    /// [`RECEIPT_CHANGES_LISTED`]: how many there are. `change_set` commits
    /// to all of them; `receipts/<id>/receipt.json` and the run record's
    /// `rehearsal.changes` list each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes_total: Option<usize>,
    /// With `changes_total`: the change set counted by directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes_by_dir: Vec<crate::model::dir_summary::DirSummary>,
    /// Mode `apply`: the calls stubs answered in the rehearsal, which the
    /// live lane did NOT make (`gh pr merge 12 → exit 0 (stub)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls_not_made: Vec<String>,
    /// The promoter said `--local-only` (`"local_only": true`): the local
    /// writes went live knowing `calls_not_made` were not made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local_only: bool,
    pub verdict: serde_json::Value,
    pub approvals: Vec<ApprovalRecord>,
    pub live_result: LiveResult,
    /// Where the promotion record sits in the journal (filled once appended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<Appended>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<RolledBack>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReceiptChange {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub kind: ChangeKind,
    pub file_type: FileType,
    pub before: Option<String>,
    pub after: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LiveResult {
    /// Steps that wrote content, types, modes or removed paths.
    pub applied_steps: usize,
    /// Paths given the modification time the command left on them.
    #[serde(default, skip_serializing_if = "is_no_step")]
    pub times_set: usize,
    pub skipped_identical: usize,
    pub notes: Vec<String>,
    /// Mode `rerun`: the run record of the live execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RolledBack {
    pub at: String,
    pub by: Actor,
    pub steps: usize,
}

fn is_no_step(n: &usize) -> bool {
    *n == 0
}

pub(crate) const RECEIPT_SCHEMA: &str = "dryrun.receipt/v1";

/// A receipt copy in the journal or the run record lists each change up to
/// this many; past it, a count and a summary by directory (see
/// [`Receipt::changes_total`]), so a 50,000-file install does not make a
/// journal record of megabytes.
pub(crate) const RECEIPT_CHANGES_LISTED: usize = 1000;

impl Receipt {
    /// This receipt with a long change list replaced by its count and a
    /// summary by directory (the journal's and the run record's copy).
    pub(crate) fn compact(&self) -> Receipt {
        let mut r = self.clone();
        if r.changes.len() > RECEIPT_CHANGES_LISTED {
            let pairs: Vec<(&str, ChangeKind)> = self
                .changes
                .iter()
                .map(|c| (c.path.as_str(), c.kind))
                .collect();
            r.changes_by_dir = crate::model::dir_summary::summarise_by_dir(&pairs);
            r.changes_total = Some(self.changes.len());
            r.changes = Vec::new();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run records as the code before the typed receipt and live mode wrote
    /// them (`tests/fixtures/records/`, made by `dryrun execute`, `promote`
    /// and `rollback` in local mode): each loads, and saving it again gives
    /// the same bytes (the receipt's keys stay sorted).
    #[test]
    fn records_written_before_the_typed_receipt_load_and_save_byte_for_byte() {
        let fixtures = [
            (
                "rehearsed",
                include_str!("../tests/fixtures/records/rehearsed.json"),
            ),
            (
                "promoted",
                include_str!("../tests/fixtures/records/promoted.json"),
            ),
            (
                "promoted-rolled-back",
                include_str!("../tests/fixtures/records/promoted-rolled-back.json"),
            ),
        ];
        for (name, text) in fixtures {
            let r: RunRecord = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let live = r.live.as_ref().expect("a live section");
            assert_eq!(live.mode, LiveMode::Apply, "{name}");
            assert_eq!(live.network, LiveNetwork::None, "{name}");
            let again = serde_json::to_string_pretty(&r).unwrap();
            assert_eq!(again, text, "{name}: saved differently");
            // What went over the API as JSON is the same value.
            assert_eq!(
                serde_json::to_value(&r).unwrap(),
                serde_json::from_str::<serde_json::Value>(text).unwrap(),
                "{name}"
            );
        }

        let rehearsed: RunRecord = serde_json::from_str(fixtures[0].1).unwrap();
        assert_eq!(rehearsed.receipt, None);

        let promoted: RunRecord = serde_json::from_str(fixtures[1].1).unwrap();
        let rc = promoted.receipt.expect("a receipt");
        assert_eq!(rc.schema, RECEIPT_SCHEMA);
        assert_eq!(rc.run_id, promoted.run_id);
        assert_eq!(rc.mode, LiveMode::Apply);
        assert!(rc.receipt_id.starts_with('p'));
        assert!(rc.journal.is_some());
        assert_eq!(rc.rolled_back, None);

        let rolled: RunRecord = serde_json::from_str(fixtures[2].1).unwrap();
        assert!(rolled.receipt.expect("a receipt").rolled_back.is_some());
    }

    #[test]
    fn a_rerun_record_keeps_its_live_strings() {
        let l = LiveRecord {
            mode: LiveMode::Rerun,
            network: LiveNetwork::Host,
            env_from_host: vec!["TOKEN".into()],
        };
        let text = serde_json::to_string(&l).unwrap();
        assert_eq!(
            text,
            r#"{"mode":"rerun","network":"host","env_from_host":["TOKEN"]}"#
        );
        assert_eq!(serde_json::from_str::<LiveRecord>(&text).unwrap(), l);
        assert!(
            serde_json::from_str::<LiveRecord>(
                r#"{"mode":"yolo","network":"none","env_from_host":[]}"#
            )
            .is_err()
        );
    }
}
