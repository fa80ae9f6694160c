//! What a rehearsal reports: the sandbox's init writes a
//! [`RehearsalReport`] once every process of the command is dead, the outer
//! helper a [`HostReport`] of what it saw from the host side. The helper
//! sends both as JSON frames (`sandbox::wire`); the verdict judges them, the
//! redactor scrubs the report, and the engine turns them into the run
//! record's `rehearsal` (whose types, [`Change`], [`Blocked`], [`LimitHit`],
//! [`StepOutcome`] and [`WouldBeAction`], are these same model types).

use serde::{Deserialize, Serialize};

use super::change::Change;
use super::evidence::{Blocked, LimitHit, StepOutcome};
use super::stubs::WouldBeAction;

/// What the sandbox's init reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct RehearsalReport {
    pub steps: Vec<StepOutcome>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The order stdout's and stderr's bytes were written in.
    #[serde(default)]
    pub output_order: Vec<super::output::OutputChunk>,
    pub output_truncated: bool,
    pub changes: Vec<Change>,
    pub blocked: Vec<Blocked>,
    pub stripped: Vec<String>,
    pub limits_hit: Vec<LimitHit>,
    /// How each limit is enforced, e.g. `memory: cgroup v1`.
    pub enforcement: Vec<String>,
    pub landlock_abi: u32,
    /// Calls the stubs answered instead of the real tools, in call order.
    #[serde(default)]
    pub would_be_actions: Vec<WouldBeAction>,
    /// Would-be actions past the recording cap (not listed).
    #[serde(default)]
    pub would_be_actions_dropped: usize,
    /// Tools shadowed by a stub in this run.
    #[serde(default)]
    pub stubbed_tools: Vec<String>,
    pub landlock_status: String,
    pub seccomp: bool,
    /// Most processes seen alive at once in the sandbox (init included).
    #[serde(default)]
    pub max_processes: u64,
    /// Processes still running when the command ended, killed by init.
    #[serde(default)]
    pub leftover_processes_killed: u32,
    /// Phase marks in µs since the engine started the run.
    #[serde(default)]
    pub timings_us: Vec<(String, u64)>,
    /// Direct connections to internet addresses (a run with an egress
    /// proxy): what the engine names in the egress report.
    #[serde(default)]
    pub direct: Vec<super::egress::DirectAttempt>,
    /// The egress report, filled in by the engine (never by the sandbox)
    /// before the verdict judges the run.
    #[serde(default)]
    pub egress: Vec<super::egress::EgressEntry>,
    /// An ordinary user's rehearsal that failed: the workspace entries it
    /// could not change because their owner or group is not mapped into
    /// the sandbox (see `sandbox::ids`).
    #[serde(default)]
    pub unmapped: UnmappedIds,
}

/// Workspace entries whose owner or group an ordinary user's rehearsal
/// could not map: the sandbox shows them as the overflow ids and cannot
/// change them (EOVERFLOW), where the live command may.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct UnmappedIds {
    /// The topmost such entries (one whose directory is listed is counted
    /// there), at most [`UnmappedIds::MAX_LISTED`].
    pub entries: Vec<UnmappedEntry>,
    /// Topmost entries past the first [`UnmappedIds::MAX_LISTED`].
    pub more: u64,
    /// The scan stopped at its entry budget: there may be more.
    pub cut: bool,
}

impl UnmappedIds {
    pub const MAX_LISTED: usize = 20;
}

/// One entry of [`UnmappedIds`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UnmappedEntry {
    /// Workspace-relative (`.` for the workspace itself).
    pub path: String,
    pub owner_unmapped: bool,
    pub group_unmapped: bool,
    /// Entries below it that are unmapped too.
    pub beneath: u64,
}

/// What the outer helper saw from the host side.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct HostReport {
    pub limits_hit: Vec<LimitHit>,
    pub enforcement: Vec<String>,
    pub killed_by_watchdog: bool,
    pub leftover_processes_killed: u32,
    /// The host side's own phase marks (µs since the rehearsal's start),
    /// those after its fork too (the sandbox's report carries the ones
    /// before).
    #[serde(default)]
    pub timings_us: Vec<(String, u64)>,
}
