//! The pipeline: envelope → rehearse (sandbox) → evidence → verdict → record.
//! The CLI (and later the daemon) call this; neither re-implements a stage.
//!
//! State directory layout (`--state-dir`):
//!
//! ```text
//! runs/<run_id>/record.json   the run record (written atomically)
//! runs/<run_id>/blobs/<hash>  content of created/modified files (+ small "before" files)
//! ```
//!
//! Scratch policy: [`Engine::collect_garbage`] (at an engine start, at most
//! hourly, and hourly in a running daemon) deletes the `blobs/` of runs past
//! [`Retention::blob_days`] (default 7) and whole runs past
//! [`Retention::record_days`] (default 30), unless they are awaiting approval
//! or approved. Daemon clients have a per-uid quota of what they keep here;
//! a run keeps at most `kept_content_budget(disk_mb)` of content (apparent
//! size) and a record of at most [`RECORD_MAX_BYTES`]. The sandbox's own
//! upper layer and mounts live in its mount namespace and vanish with it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

mod compare;
mod host_prompt;
mod live;
mod replay;
pub use crate::record::Receipt;
pub use compare::{RunComparison, compare_runs};
pub use host_prompt::{GRANT_TTL_S, HOST_PROMPT_AUTH};
pub use live::valid_receipt_id;
pub use replay::ReplayRequest;

use crate::envelope::{EnvelopeSpec, Mode};
use crate::journal::{Actor, Entry, Journal};
use crate::model::run_state::Approval;
use crate::record::ApprovalRecord;
use crate::record::{IntentRecord, Rehearsal, RunRecord, RunState, SCHEMA, SandboxRecord};
use crate::sandbox::spec::{IdPlan, ImageProfile, LandlockPlan, SandboxLimits, SandboxSpec};
use crate::sandbox::{self, SandboxError};
use crate::verdict::{self, Decision};

/// System policy files layered over the shipped default (any may loosen).
pub const SYSTEM_POLICY_DIR: &str = "/etc/dryrun/policy.d";

/// Landlock ABI below which dryrun refuses to rehearse unless told to degrade
/// (ABI 4, Linux 6.7: filesystem rules including truncate, plus TCP).
pub const MIN_LANDLOCK_ABI: u32 = 4;
/// First host id of the range sandbox ids map to when dryrun runs as root.
pub const DEFAULT_ID_BASE: u32 = 1_000_000;
pub const ID_COUNT: u32 = 65_536;
const DEFAULT_RETENTION_DAYS: u64 = 7;
/// Records of finished runs are removed after this many days.
pub const DEFAULT_RECORD_RETENTION_DAYS: u64 = 30;
/// Bytes of kept content and records one uid may hold in the state directory.
pub const DEFAULT_QUOTA_PER_UID_BYTES: u64 = 2 << 30;
/// A run record is never written larger than this: past it, the record's
/// lists and texts are cut (and the run cannot be promoted).
pub const RECORD_MAX_BYTES: usize = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("working_dir: {0}")]
    Workspace(String),
    #[error("state directory {path}: {source}")]
    State {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "this kernel offers Landlock ABI {found}; dryrun needs at least ABI {needed} (Linux 6.7). \
         Run with --allow-degraded-sandbox (or DRYRUN_ALLOW_DEGRADED=1) to rehearse with namespaces and seccomp only"
    )]
    LandlockTooOld { found: u32, needed: u32 },
    #[error("run {0} does not exist")]
    NoSuchRun(String),
    #[error("run id {0:?} is not a valid run id")]
    BadRunId(String),
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error("run record {path} is unreadable: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    #[error("{message}")]
    BudgetExhausted { message: String, retry_after_s: u64 },
    #[error("risk budget: {0}")]
    Budget(String),
    /// The caller may not do this (HTTP 403).
    #[error("{0}")]
    Forbidden(String),
    /// The run is not in a state that allows this (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    /// A request field is wrong (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    #[error("receipt {0} does not exist")]
    NoSuchReceipt(String),
    /// The real workspace changed since the rehearsal (HTTP 409, `drift`).
    #[error("{0}")]
    Drift(String),
    /// A limit above the configured ceiling (HTTP 400, nothing runs).
    #[error("{0}")]
    AboveCeiling(String),
    /// The submitter keeps more than its quota in the state directory
    /// (HTTP 507, nothing runs).
    #[error("{0}")]
    QuotaExceeded(String),
}

impl EngineError {
    /// Invalid input (exit 2) versus internal failure (exit 1).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            EngineError::Workspace(_)
                | EngineError::BadRunId(_)
                | EngineError::NoSuchRun(_)
                | EngineError::Policy(_)
                | EngineError::Invalid(_)
                | EngineError::Forbidden(_)
                | EngineError::Conflict(_)
                | EngineError::BudgetExhausted { .. }
                | EngineError::NoSuchReceipt(_)
                | EngineError::Drift(_)
                | EngineError::AboveCeiling(_)
                | EngineError::QuotaExceeded(_)
        )
    }
}

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub allow_degraded: bool,
    pub image: ImageProfile,
    pub id_base: u32,
    /// The most a run may ask for (`dryrun daemon --max-*`).
    pub ceilings: crate::envelope::LimitsSpec,
    /// Who set the ceilings, for error messages: "this daemon's".
    pub ceilings_of: &'static str,
    pub retention: Retention,
}

/// How long the state directory keeps what, and how much one uid may keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Kept content (blobs) of runs not awaiting approval or approved.
    pub blob_days: u64,
    /// Records of finished runs (not awaiting approval or approved).
    pub record_days: u64,
    /// Bytes of records and kept content per submitting uid (daemon
    /// clients); `None`: no quota.
    pub quota_per_uid_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        let days = |var: &str, default: u64| {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(default)
        };
        Retention {
            blob_days: days("DRYRUN_SCRATCH_RETENTION_DAYS", DEFAULT_RETENTION_DAYS),
            record_days: days(
                "DRYRUN_RECORD_RETENTION_DAYS",
                DEFAULT_RECORD_RETENTION_DAYS,
            ),
            quota_per_uid_bytes: Some(DEFAULT_QUOTA_PER_UID_BYTES),
        }
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            allow_degraded: std::env::var("DRYRUN_ALLOW_DEGRADED").is_ok_and(|v| v == "1"),
            image: ImageProfile::default_profile(),
            id_base: std::env::var("DRYRUN_ID_BASE")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|b: &u32| *b >= 65_536)
                .unwrap_or(DEFAULT_ID_BASE),
            ceilings: crate::envelope::DEFAULT_CEILINGS,
            ceilings_of: "this engine's",
            retention: Retention::default(),
        }
    }
}

pub struct Engine {
    state_dir: PathBuf,
    opts: EngineOptions,
    journal: Journal,
    /// Enforced for daemon clients when set (see [`Engine::enable_budget`]).
    budget: Option<crate::policy::budget::Ledger>,
    /// Serializes the transitions of each run (review, promotion, rollback)
    /// within this process: one lock per run, so a slow or stalled
    /// promotion of one run (its workspace agent runs as the agent's user,
    /// who may stop it) never holds up another run's review.
    run_locks:
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<std::sync::Mutex<()>>>>,
    /// Bytes each submitting uid keeps under `runs/` (see
    /// [`Engine::usage_of`]); `None` until first needed and after each
    /// housekeeping, which rescans.
    usage: std::sync::Mutex<Option<std::collections::HashMap<u32, u64>>>,
}

/// What the live lane's rerun adds to a rehearsal.
pub struct LiveRun {
    pub rerun_of: String,
    pub network_host: bool,
    /// Host variables named by `live.env_from_host`, with their values.
    pub extra_env: Vec<(String, String)>,
}

/// A run accepted and journaled, not yet rehearsed.
pub struct Prepared {
    record: RunRecord,
    sspec: SandboxSpec,
    spec: EnvelopeSpec,
    protected: std::sync::Arc<crate::workspace::paths::PathMatcher>,
    risk: crate::classify::Classification,
    ids_desc: String,
    max_blobs: u64,
    blobs: PathBuf,
    /// Scrubs what the run prints or hands to stubs of the values it was
    /// given and of credential shapes, before anything is kept.
    redactor: crate::redact::Redactor,
}

impl Prepared {
    pub fn record(&self) -> &RunRecord {
        &self.record
    }
    pub fn run_id(&self) -> &str {
        &self.record.run_id
    }
}

/// Approve or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewAction {
    Approve,
    Reject,
}

/// How a reviewer's identity was established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewerAuth {
    /// The daemon read the reviewer's uid from the socket (SO_PEERCRED);
    /// approvers are root and members of `approver_group`.
    PeerCredentials { approver_group: String },
    /// Local mode: the person typed back a code shown on the controlling
    /// terminal. Proves a human at a terminal, not a different identity.
    LocalTtyConfirmed,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// The journal record of a run's outcome.
fn verdict_entry(r: &RunRecord) -> Entry {
    match (&r.verdict, &r.rehearsal) {
        (Some(v), Some(reh)) => Entry {
            kind: "verdict".into(),
            run_id: Some(r.run_id.clone()),
            actor: None,
            data: serde_json::json!({
                "decision": v.decision.as_str(),
                "state": r.state.as_str(),
                "reasons": capped_list(&v.reasons),
                "surprise_paths": capped_list(&v.surprise_paths),
                "forbidden_paths_touched": capped_list(&v.forbidden_paths_touched),
                "exit_code": reh.exit_code,
                "signal": reh.signal,
                "timed_out": reh.timed_out,
                "changes": reh.changes.len(),
                "change_set": change_set_hash(&reh.changes),
                "landlock_abi": reh.sandbox.landlock_abi,
                "risk": r.risk.as_ref().map(|k| serde_json::json!({"score": k.score, "level": k.level})),
                "evidence_hash": reh.evidence_hash,
                "would_be_actions": capped_list(&shown_actions(&reh.would_be_actions)),
                "replay_of": r.replay_of.as_ref().map(|l| &l.baseline),
            }),
        },
        _ => Entry {
            kind: "run_failed".into(),
            run_id: Some(r.run_id.clone()),
            actor: None,
            data: serde_json::json!({"state": r.state.as_str(), "error": r.error}),
        },
    }
}

/// Would-be actions as reviewers read them: `gh pr merge 12 → exit 0 (stub)`.
pub fn shown_actions(actions: &[crate::model::stubs::WouldBeAction]) -> Vec<String> {
    actions
        .iter()
        .map(|a| format!("{} → exit {} ({})", a.shown(), a.answer.exit, a.source))
        .collect()
}

/// Journal records stay small whatever a command does: long texts and
/// lists are cut, with their full length and BLAKE3 hash kept (the run
/// record holds everything).
const JOURNAL_TEXT_MAX: usize = 4096;
const JOURNAL_LIST_MAX: usize = 50;

fn capped_text(t: &str) -> serde_json::Value {
    if t.len() <= JOURNAL_TEXT_MAX {
        return serde_json::Value::String(t.to_string());
    }
    let mut end = JOURNAL_TEXT_MAX;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    serde_json::json!({
        "text": &t[..end],
        "bytes": t.len(),
        "blake3": blake3::hash(t.as_bytes()).to_hex().to_string(),
    })
}

fn capped_list(v: &[String]) -> serde_json::Value {
    let total: usize = v.iter().map(|s| s.len()).sum();
    if v.len() <= JOURNAL_LIST_MAX && total <= JOURNAL_TEXT_MAX * 4 {
        return serde_json::json!(v);
    }
    let mut h = blake3::Hasher::new();
    for s in v {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    serde_json::json!({
        "first": v.iter().take(JOURNAL_LIST_MAX).map(|s| capped_text(&s.chars().take(512).collect::<String>())).collect::<Vec<_>>(),
        "total": v.len(),
        "blake3": h.finalize().to_hex().to_string(),
    })
}

/// BLAKE3 over the sorted (path, kind, before, after) list: what a receipt binds.
pub fn change_set_hash(changes: &[crate::workspace::diff::Change]) -> String {
    let mut h = blake3::Hasher::new();
    let mut rows: Vec<String> = changes
        .iter()
        .map(|c| serde_json::to_string(c).expect("serializes"))
        .collect();
    rows.sort();
    for r in rows {
        h.update(r.as_bytes());
        h.update(b"\n");
    }
    h.finalize().to_hex().to_string()
}

/// The submitter never approves its own run, through either door. Over
/// the daemon the uid comes from the socket; locally it is this process's
/// uid: typing back the terminal code proves a terminal, not a second
/// person (an agent can allocate a pseudo-terminal, read the code and type
/// it), so a local approval must come from another uid (`sudo`).
pub fn refuse_self_approval(
    r: &RunRecord,
    actor: &Actor,
    auth: &ReviewerAuth,
) -> Result<(), EngineError> {
    if r.submitted_by.as_ref().map(|a| a.uid) != Some(actor.uid) {
        return Ok(());
    }
    let how = match auth {
        ReviewerAuth::PeerCredentials { .. } => "a different reviewer must".to_string(),
        ReviewerAuth::LocalTtyConfirmed => format!(
            "approve it as another user, e.g. `sudo dryrun --local --state-dir DIR approve {}` with this state directory, \
             or run the daemon, where reviewers are root and the approver group",
            r.run_id
        ),
    };
    Err(EngineError::Forbidden(format!(
        "uid {} submitted run {}; the submitter can never approve its own run: {how}",
        actor.uid, r.run_id
    )))
}

/// Is `uid` root or a member of `group` (by /etc/group membership or as
/// its primary group)?
pub fn is_approver(uid: u32, group: &str) -> bool {
    if uid == 0 {
        return true;
    }
    let Ok(Some(g)) = nix::unistd::Group::from_name(group) else {
        return false;
    };
    let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) else {
        return false;
    };
    u.gid == g.gid || g.mem.contains(&u.name)
}

/// The policy's protected paths as a matcher, built once per policy (glob
/// compilation costs more than classifying a command).
fn protected_matcher(
    policy: &crate::policy::Policy,
) -> Result<std::sync::Arc<crate::workspace::paths::PathMatcher>, EngineError> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Cache = Mutex<HashMap<Vec<String>, Arc<crate::workspace::paths::PathMatcher>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(m) = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&policy.protected_paths)
    {
        return Ok(m.clone());
    }
    let m = Arc::new(
        crate::workspace::paths::PathMatcher::at_any_depth(&policy.protected_paths)
            .map_err(|e| EngineError::Workspace(format!("protected_paths: {e}")))?,
    );
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.len() >= 64 {
        c.clear();
    }
    c.insert(policy.protected_paths.clone(), m.clone());
    Ok(m)
}

/// The workspace directory as checked: device, inode and owner.
struct WorkspaceIdentity {
    dev: u64,
    ino: u64,
    uid: u32,
    gid: u32,
}

impl From<crate::workspace::apply::Identity> for WorkspaceIdentity {
    fn from(i: crate::workspace::apply::Identity) -> Self {
        WorkspaceIdentity {
            dev: i.dev,
            ino: i.ino,
            uid: i.uid,
            gid: i.gid,
        }
    }
}

/// Host-side file access with `actor`'s own rights (for resolving a
/// `working_dir` it names).
pub fn access_as(actor: &Actor) -> Result<crate::workspace::owner::OwnerSession, EngineError> {
    crate::workspace::owner::OwnerSession::start(&crate::workspace::owner::Creds::of_user(
        actor.uid, actor.gid,
    ))
    .map_err(|e| EngineError::Workspace(e.to_string()))
}

fn process_identity(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    // A zombie (or dead) process does no more work on its runs.
    if after.starts_with('Z') || after.starts_with('X') {
        return None;
    }
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{pid} {start}"))
}

/// The default state directory: `/var/lib/dryrun` for root, else
/// `$XDG_STATE_HOME/dryrun` (or `~/.local/state/dryrun`).
pub fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/dryrun");
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("dryrun");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/dryrun")
}

fn new_run_id() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the kernel's random source works");
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("r{secs:x}-{}", hex::encode(b))
}

/// Run ids are generated by us; accept only their shape (no path tricks).
pub fn valid_run_id(id: &str) -> bool {
    id.len() <= 64
        && id.starts_with('r')
        && id
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == '-' || c == 'r')
}

/// Names of the caller's variables that look like credentials: listed as
/// stripped (the sandbox never inherits the caller's environment).
pub fn secret_looking_env_names() -> Vec<String> {
    const MORE_MARKERS: &[&str] = &["AUTH", "SESSION", "COOKIE"];
    const PREFIXES: &[&str] = &[
        "AWS_",
        "GH_",
        "GITHUB_",
        "GOOGLE_",
        "AZURE_",
        "OPENAI_",
        "ANTHROPIC_",
        "SSH_AUTH_SOCK",
        "DOCKER_",
        "KUBECONFIG",
        "NPM_",
        "PYPI_",
        "VAULT_",
    ];
    let mut names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| {
            let up = k.to_ascii_uppercase();
            crate::classify::SECRET_MARKERS
                .iter()
                .chain(MORE_MARKERS)
                .any(|m| up.contains(m))
                || PREFIXES.iter().any(|p| up.starts_with(p))
        })
        .collect();
    names.sort();
    names
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.partial");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

impl Engine {
    pub fn open(state_dir: &Path, opts: EngineOptions) -> Result<Self, EngineError> {
        let runs = state_dir.join("runs");
        if !state_dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state_dir)
                .map_err(|source| EngineError::State {
                    path: state_dir.to_path_buf(),
                    source,
                })?;
        }
        std::fs::create_dir_all(&runs).map_err(|source| EngineError::State {
            path: runs.clone(),
            source,
        })?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700));
        }
        for sub in ["inflight", "txn"] {
            let d = state_dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|source| EngineError::State { path: d, source })?;
        }
        let e = Engine {
            state_dir: state_dir.to_path_buf(),
            opts,
            journal: Journal::new(state_dir),
            budget: None,
            run_locks: std::sync::Mutex::new(std::collections::HashMap::new()),
            usage: std::sync::Mutex::new(None),
        };
        // Runs whose rehearsing process died, and reviewer decisions cut
        // short: settled before anything else happens (cheap: both
        // directories hold only what is in flight).
        e.recover_interrupted()?;
        // Housekeeping at most once an hour, so a start stays O(1).
        let stamp = state_dir.join(".housekeeping");
        let due = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(3600))
            .unwrap_or(true);
        if due {
            let _ = std::fs::write(&stamp, b"");
            sandbox::limits::sweep_stale_cgroups();
            e.collect_garbage();
        }
        Ok(e)
    }

    /// The lock that serializes `run_id`'s transitions (created on first
    /// use; locks nobody holds are dropped as new ones are made).
    pub(crate) fn run_lock(&self, run_id: &str) -> std::sync::Arc<std::sync::Mutex<()>> {
        let mut m = self.run_locks.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, l| std::sync::Arc::strong_count(l) > 1);
        m.entry(run_id.to_string()).or_default().clone()
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Enforce the per-actor risk budget on daemon clients.
    pub fn enable_budget(&mut self, cfg: crate::policy::budget::BudgetConfig) {
        self.budget = Some(crate::policy::budget::Ledger::new(
            &self.state_dir.join("budget.jsonl"),
            cfg,
        ));
    }

    fn mark_inflight(&self, run_id: &str) -> Result<(), EngineError> {
        let path = self.state_dir.join("inflight").join(run_id);
        let me = process_identity(std::process::id()).unwrap_or_default();
        std::fs::write(&path, me).map_err(|source| EngineError::State { path, source })
    }

    fn clear_inflight(&self, run_id: &str) {
        let _ = std::fs::remove_file(self.state_dir.join("inflight").join(run_id));
    }

    /// Settle what a dead process left in flight:
    /// - runs queued or rehearsing when their process died are marked
    ///   `failed` (journaled), and their scratch content is removed;
    /// - a reviewer decision whose journal record was written is applied to
    ///   the run record; one whose record was not is dropped (it was never
    ///   acknowledged).
    ///
    /// Returns the ids of runs marked failed.
    pub fn recover_interrupted(&self) -> Result<Vec<String>, EngineError> {
        let mut failed = Vec::new();
        let dir = self.state_dir.join("inflight");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let id = e.file_name().to_string_lossy().into_owned();
            if !valid_run_id(&id) {
                continue;
            }
            let owner = std::fs::read_to_string(e.path()).unwrap_or_default();
            let pid: Option<u32> = owner.split(' ').next().and_then(|p| p.parse().ok());
            if pid.is_some_and(|p| process_identity(p).as_deref() == Some(owner.as_str())) {
                continue; // its process is alive and still working on it
            }
            if let Ok(mut r) = self.get(&id)
                && r.state.can_fail_interrupted()
            {
                let was = r.state;
                r.state = RunState::Failed;
                r.error = Some(format!(
                    "interrupted: the process rehearsing this run (pid {}) stopped while it was {}; nothing was promoted; submit it again",
                    pid.map_or("?".into(), |p| p.to_string()),
                    was.as_str()
                ));
                let _ = std::fs::remove_dir_all(self.run_dir(&id).join("blobs"));
                sandbox::limits::reap_run_cgroups(&id);
                self.save(&r)?;
                self.journal.append(&Entry {
                    kind: "run_failed".into(),
                    run_id: Some(id.clone()),
                    actor: Some(Actor::system()),
                    data: serde_json::json!({"state": "failed", "error": r.error, "interrupted_state": was.as_str()}),
                })?;
                failed.push(id.clone());
            }
            let _ = std::fs::remove_file(e.path());
        }
        self.recover_promotions()?;
        let dir = self.state_dir.join("txn");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            if let Ok(t) = serde_json::from_slice::<Transition>(&bytes)
                && self.journal.tail_contains(&t.nonce, 8 << 20)?
            {
                self.save(&t.record)?;
            }
            let _ = std::fs::remove_file(&path);
        }
        Ok(failed)
    }

    /// A reviewer approves or rejects a run. Journaled (who, when, note,
    /// whether a block was overridden) before the record changes.
    pub fn review(
        &self,
        run_id: &str,
        actor: &Actor,
        auth: &ReviewerAuth,
        action: ReviewAction,
        note: &str,
        override_block: bool,
    ) -> Result<RunRecord, EngineError> {
        if note.len() > 4096 {
            return Err(EngineError::Invalid(format!(
                "note: {} bytes; at most 4096",
                note.len()
            )));
        }
        let lock = self.run_lock(run_id);
        let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut r = self.get(run_id)?;
        let submitter = r.submitted_by.as_ref().map(|a| a.uid);
        let approver = match auth {
            ReviewerAuth::PeerCredentials { approver_group } => {
                is_approver(actor.uid, approver_group)
            }
            ReviewerAuth::LocalTtyConfirmed => true,
        };
        let group_desc = match auth {
            ReviewerAuth::PeerCredentials { approver_group } => approver_group.clone(),
            ReviewerAuth::LocalTtyConfirmed => String::new(),
        };
        let decision = r.verdict.as_ref().map(|v| v.decision);
        let mut overrode = false;
        // The submitter rejecting its own run withdraws it: no refund.
        let withdrawing = submitter == Some(actor.uid);
        match action {
            ReviewAction::Approve => {
                refuse_self_approval(&r, actor, auth)?;
                if !approver {
                    return Err(EngineError::Forbidden(format!(
                        "uid {} may not approve runs: approvers are root and members of group {group_desc:?}",
                        actor.uid
                    )));
                }
                match r.state.approval(decision) {
                    Approval::Allowed => {}
                    Approval::Override if override_block => {
                        overrode = true;
                    }
                    Approval::Override => {
                        return Err(EngineError::Conflict(format!(
                            "run {run_id} was blocked; approving it overrides the block. Repeat with --override (\"override\": true); the journal records it as an override"
                        )));
                    }
                    Approval::NotNeeded => {
                        return Err(EngineError::Conflict(format!(
                            "run {run_id} needs no approval: its decision is promote"
                        )));
                    }
                    Approval::NotApprovable => {
                        return Err(EngineError::Conflict(format!(
                            "run {run_id} is {}; only a run awaiting approval (or a blocked run, with --override) can be approved",
                            r.state.as_str()
                        )));
                    }
                }
                r.state = RunState::Approved;
            }
            ReviewAction::Reject => {
                if !approver && !withdrawing {
                    return Err(EngineError::Forbidden(format!(
                        "uid {} may not reject runs: reviewers are root and members of group {group_desc:?} (a submitter may withdraw its own run)",
                        actor.uid
                    )));
                }
                if !r.state.can_reject() {
                    return Err(EngineError::Conflict(format!(
                        "run {run_id} is {}; only a rehearsed run or one awaiting approval can be rejected",
                        r.state.as_str()
                    )));
                }
                r.state = RunState::Rejected;
            }
        }
        let at = now_rfc3339();
        let authenticated_by = match auth {
            ReviewerAuth::PeerCredentials { .. } => "peer_credentials",
            ReviewerAuth::LocalTtyConfirmed => "local_tty_confirmation",
        };
        r.approvals.push(ApprovalRecord {
            action: match action {
                ReviewAction::Approve => "approve".into(),
                ReviewAction::Reject => "reject".into(),
            },
            by: actor.clone(),
            at: at.clone(),
            note: note.to_string(),
            overrode_block: overrode,
            authenticated_by: authenticated_by.into(),
        });
        let nonce = {
            let mut b = [0u8; 16];
            getrandom::fill(&mut b).expect("the kernel's random source works");
            hex::encode(b)
        };
        let entry = Entry {
            kind: match action {
                ReviewAction::Approve => "approval".into(),
                ReviewAction::Reject => "rejection".into(),
            },
            run_id: Some(run_id.to_string()),
            actor: Some(actor.clone()),
            data: serde_json::json!({
                "note": note,
                "override_of_block": overrode,
                "decision_was": decision.map(|d| d.as_str()),
                "state": r.state.as_str(),
                "authenticated_by": authenticated_by,
                "submitted_by_uid": submitter,
                "withdrawn_by_submitter": action == ReviewAction::Reject && withdrawing,
                "txn": nonce,
            }),
        };
        self.commit_transition(&r, &entry, &nonce)?;
        // Only a reviewer's rejection gives the points back: a submitter
        // that could withdraw after reading the evidence would rehearse
        // without limit.
        if action == ReviewAction::Reject
            && !withdrawing
            && let Some(b) = &self.budget
        {
            let _ = b.refund(run_id, unix_now());
        }
        Ok(r)
    }

    /// Journal first, then the record; a crash in between is settled by
    /// [`Engine::recover_interrupted`] from the transition file.
    fn commit_transition(
        &self,
        record: &RunRecord,
        entry: &Entry,
        nonce: &str,
    ) -> Result<(), EngineError> {
        let txn = self.state_dir.join("txn").join(&record.run_id);
        let t = Transition {
            nonce: nonce.to_string(),
            record: record.clone(),
        };
        write_atomic(&txn, &serde_json::to_vec(&t).expect("serializes")).map_err(|source| {
            EngineError::State {
                path: txn.clone(),
                source,
            }
        })?;
        if let Err(e) = self.journal.append(entry) {
            let _ = std::fs::remove_file(&txn);
            return Err(e.into());
        }
        self.save(record)?;
        let _ = std::fs::remove_file(&txn);
        Ok(())
    }

    /// Mark a run that never reached the sandbox as failed (cancelled while
    /// queued, or the daemon shutting down).
    pub fn fail_unstarted(&self, p: Prepared, why: &str) -> Result<RunRecord, EngineError> {
        let mut r = p.record;
        r.state = RunState::Failed;
        r.error = Some(why.to_string());
        let _ = std::fs::remove_dir_all(&p.blobs);
        self.save(&r)?;
        self.journal.append(&verdict_entry(&r))?;
        self.clear_inflight(&r.run_id);
        self.count_usage(&r);
        Ok(r)
    }

    /// Journal a cancellation request (who asked) before acting on it.
    pub fn journal_cancel(
        &self,
        run_id: &str,
        actor: &Actor,
        state: RunState,
    ) -> Result<(), EngineError> {
        self.journal.append(&Entry {
            kind: "run_cancelled".into(),
            run_id: Some(run_id.to_string()),
            actor: Some(actor.clone()),
            data: serde_json::json!({"state_when_cancelled": state.as_str()}),
        })?;
        Ok(())
    }

    fn run_dir(&self, id: &str) -> PathBuf {
        self.state_dir.join("runs").join(id)
    }

    pub fn blob_path(&self, id: &str, hash: &str) -> PathBuf {
        self.run_dir(id).join("blobs").join(hash)
    }

    /// Rehearse the envelope and judge it, in this process. A sandbox that
    /// could not be built yields a record in state `failed` (never a silent pass).
    pub fn execute(&self, spec: &EnvelopeSpec, actor: &Actor) -> Result<RunRecord, EngineError> {
        let prepared = self.prepare(spec, actor)?;
        self.rehearse_prepared(prepared, None)
    }

    /// Validate the envelope against this machine, classify the command,
    /// allocate the run and journal its submission. The record is saved in
    /// state `queued`; [`Engine::rehearse_prepared`] carries it on.
    pub fn prepare(&self, spec: &EnvelopeSpec, actor: &Actor) -> Result<Prepared, EngineError> {
        let t_prepare = std::time::Instant::now();
        let r = self.prepare_inner(spec, actor);
        tracing::debug!(elapsed = ?t_prepare.elapsed(), "run prepared");
        r
    }

    fn prepare_inner(&self, spec: &EnvelopeSpec, actor: &Actor) -> Result<Prepared, EngineError> {
        self.prepare_run(spec, actor, None, None)
    }

    /// `live`: the live lane's rerun of another run (network and host
    /// variables as its `live:` section grants; never persisted).
    fn prepare_run(
        &self,
        spec: &EnvelopeSpec,
        actor: &Actor,
        live: Option<&LiveRun>,
        replay: Option<crate::model::stubs::ReplaySet>,
    ) -> Result<Prepared, EngineError> {
        // The configured ceilings first: a run asking for more never starts.
        let mut fitted = spec.clone();
        fitted
            .fit_to_ceilings(&self.opts.ceilings)
            .map_err(|e| {
                EngineError::AboveCeiling(format!(
                    "limits.{}: {} is above {} ceiling of {}; ask for at most {} (the ceiling is `dryrun daemon --max-{}`)",
                    e.field,
                    e.asked,
                    self.opts.ceilings_of,
                    e.ceiling,
                    e.ceiling,
                    e.field.replace('_', "-")
                ))
            })?;
        let spec = &fitted;
        if let Some(tree) = self.opts.image.covers(&spec.workspace) {
            return Err(EngineError::Workspace(format!(
                "{} lies inside {}, which the sandbox image mounts read-only; use a project directory elsewhere",
                spec.workspace.display(),
                tree.display()
            )));
        }
        for special in ["/proc", "/sys", "/dev"] {
            if spec.workspace.starts_with(special) {
                return Err(EngineError::Workspace(format!(
                    "{} lies inside {special}, which the sandbox replaces; use a project directory",
                    spec.workspace.display()
                )));
            }
        }
        if self.state_dir.starts_with(&spec.workspace) {
            return Err(EngineError::Workspace(format!(
                "the state directory {} is inside the workspace {}; choose another --state-dir",
                self.state_dir.display(),
                spec.workspace.display()
            )));
        }
        let abi = sandbox::probe::landlock_abi();
        if abi < MIN_LANDLOCK_ABI && !self.opts.allow_degraded {
            return Err(EngineError::LandlockTooOld {
                found: abi,
                needed: MIN_LANDLOCK_ABI,
            });
        }

        // The workspace as resolved for the requester (no symlinks, device,
        // inode and owner): what the sandbox mounts and runs as.
        let ws_id = WorkspaceIdentity::from(spec.workspace_identity);
        if actor.via == "daemon"
            && actor.uid != 0
            && actor.uid != nix::unistd::geteuid().as_raw()
            && actor.uid != ws_id.uid
        {
            return Err(EngineError::Forbidden(format!(
                "working_dir: {} belongs to uid {}; uid {} may only submit runs for workspaces it owns",
                spec.workspace.display(),
                ws_id.uid,
                actor.uid
            )));
        }
        // The live lane's rerun carries out an approved run: not refused here.
        if actor.via == "daemon" && live.is_none() {
            self.check_quota(actor.uid)?;
        }

        let t0_ns = sandbox::helper::monotonic_ns();
        // The workspace's own policy, read with its owner's rights.
        let owner = crate::workspace::owner::OwnerSession::for_owner(&spec.workspace_identity)
            .map_err(|e| EngineError::Workspace(e.to_string()))?;
        let ws_policy = crate::policy::read_workspace_policy(
            &owner,
            &spec.workspace,
            &spec.workspace_identity,
        )?;
        // The same ids and groups are the evidence walk's reader's.
        let owner_groups = owner.creds().groups.clone();
        drop(owner);
        // Classify first, from the command alone.
        let policy = crate::policy::Policy::load_cached(Path::new(SYSTEM_POLICY_DIR), ws_policy)?;
        let risk = crate::classify::classify_steps(
            &spec.steps,
            spec.uses_steps,
            &policy,
            &crate::classify::Options {
                workspace: Some(spec.workspace.clone()),
                is_step: spec.uses_steps,
            },
        );
        let protected = protected_matcher(&policy)?;

        let run_id = new_run_id();
        let dir = self.run_dir(&run_id);
        let blobs = dir.join("blobs");
        std::fs::create_dir_all(&blobs).map_err(|source| EngineError::State {
            path: blobs.clone(),
            source,
        })?;

        let (ids, ids_desc) = self.plan_ids(&ws_id)?;
        let limits = SandboxLimits {
            timeout_ms: spec.limits.timeout_s * 1000,
            memory_bytes: spec.limits.memory_mb << 20,
            pids: spec.limits.pids,
            output_bytes: spec.limits.output_kb << 10,
            disk_bytes: spec.limits.disk_mb << 20,
            tmp_bytes: self.opts.image.tmp_size_mb << 20,
        };
        let sspec = SandboxSpec {
            run_id: run_id.clone(),
            parent_pid: std::process::id() as i32,
            workspace: spec.workspace.clone(),
            steps: spec.steps.clone(),
            shell: PathBuf::from("/bin/bash"),
            env: {
                let mut env = sandbox_env(spec);
                if let Some(l) = live {
                    env.retain(|(k, _)| !l.extra_env.iter().any(|(n, _)| n == k));
                    env.extend(l.extra_env.iter().cloned());
                }
                env
            },
            limits: limits.clone(),
            ids,
            image: self.opts.image.clone(),
            landlock: LandlockPlan {
                min_abi: MIN_LANDLOCK_ABI,
                allow_degraded: self.opts.allow_degraded,
            },
            cgroup: sandbox::limits::plan_cgroups(&run_id),
            diff_before_max: 256 * 1024,
            t0_ns,
            workspace_identity: (ws_id.dev, ws_id.ino),
            network_host: live.is_some_and(|l| l.network_host),
            reader_groups: owner_groups.into_iter().filter(|g| *g < ID_COUNT).collect(),
            // The live lane's rerun makes the real calls: no stubs there.
            stubs: if live.is_some() {
                crate::model::stubs::StubTable::default()
            } else {
                let mut rules = spec.stubs.clone();
                rules.extend(policy.stubs.iter().cloned());
                crate::model::stubs::StubTable {
                    rules,
                    replay: replay.clone(),
                }
            },
        };

        let record = RunRecord {
            schema: SCHEMA.into(),
            run_id: run_id.clone(),
            task: spec.task.clone(),
            command: spec.command.clone(),
            steps: spec.uses_steps.then(|| spec.steps.clone()),
            workspace: spec.workspace.display().to_string(),
            created_at: now_rfc3339(),
            envelope_hash: spec.envelope_hash(),
            intent: IntentRecord {
                summary: spec.summary.clone(),
                mode: match spec.mode {
                    Mode::ReadOnly => "read_only".into(),
                    Mode::Mutating => "mutating".into(),
                },
                expected_writes: spec.expected_writes.patterns.clone(),
                forbidden_paths: spec.forbidden.patterns.clone(),
                reviewer_note: spec.reviewer_note.clone(),
            },
            risk: Some(risk.clone()),
            rehearsal: None,
            verdict: None,
            state: RunState::Queued,
            error: None,
            receipt: None,
            submitted_by: Some(actor.clone()),
            approvals: Vec::new(),
            live: Some(crate::record::LiveRecord {
                mode: spec.live.mode,
                network: spec.live.network,
                env_from_host: spec.live.env_from_host.clone(),
            }),
            rerun_of: live.map(|l| l.rerun_of.clone()),
            replay_of: replay.as_ref().map(|r| crate::record::ReplayLink {
                baseline: r.baseline.clone(),
                novel: r.novel.as_str().into(),
            }),
            workspace_identity: Some(crate::workspace::apply::Identity {
                dev: ws_id.dev,
                ino: ws_id.ino,
                uid: ws_id.uid,
                gid: ws_id.gid,
            }),
        };
        if let Some(budget) = &self.budget
            && actor.via == "daemon"
            && risk.score > 0
        {
            let now = unix_now();
            budget
                .charge(
                    &format!("uid:{}", actor.uid),
                    &run_id,
                    risk.score as u64,
                    now,
                )
                .map_err(|e| match e {
                    crate::policy::budget::BudgetError::Exhausted { retry_after_s, .. } => {
                        let _ = std::fs::remove_dir_all(&dir);
                        EngineError::BudgetExhausted {
                            message: e.to_string(),
                            retry_after_s,
                        }
                    }
                    other => EngineError::Budget(other.to_string()),
                })?;
        }

        // Kept content, counted at apparent size: the upper layer's size
        // plus a little for "before" copies (see `kept_content_budget`).
        let max_blobs = crate::sandbox::spec::kept_content_budget(limits.disk_bytes);
        self.save(&record)?;
        // The validated envelope, for the live lane (live: section) and replay.
        let env_path = dir.join("envelope.json");
        write_atomic(
            &env_path,
            &serde_json::to_vec(spec.envelope_for_submission()).expect("serializes"),
        )
        .map_err(|source| EngineError::State {
            path: env_path,
            source,
        })?;
        self.mark_inflight(&run_id)?;
        let submitted = Entry {
            kind: "run_submitted".into(),
            run_id: Some(run_id.clone()),
            actor: Some(actor.clone()),
            data: serde_json::json!({
                "task": record.task.as_deref().map(capped_text),
                "command": capped_text(&record.command),
                "steps": record.steps.as_deref().map(capped_list),
                "workspace": record.workspace,
                "envelope_hash": record.envelope_hash,
                "intent": {
                    "summary": capped_text(&record.intent.summary),
                    "mode": record.intent.mode,
                    "expected_writes": capped_list(&record.intent.expected_writes),
                    "forbidden_paths": capped_list(&record.intent.forbidden_paths),
                },
                "risk": {"score": risk.score, "level": risk.level, "policy_hash": risk.policy_hash},
            }),
        };
        if let Err(e) = self.journal.append(&submitted) {
            // Never acknowledged: leave no trace but the error.
            self.clear_inflight(&run_id);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e.into());
        }
        Ok(Prepared {
            record,
            sspec,
            spec: spec.clone(),
            protected,
            risk,
            ids_desc,
            max_blobs,
            blobs,
            redactor: crate::redact::Redactor::new(
                spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                live.iter()
                    .flat_map(|l| l.extra_env.iter())
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            ),
        })
    }

    /// Rehearse a prepared run and judge it; journals the verdict (or the
    /// failure) and returns the final record.
    pub fn rehearse_prepared(
        &self,
        p: Prepared,
        cancel: Option<&sandbox::CancelHandle>,
    ) -> Result<RunRecord, EngineError> {
        let Prepared {
            mut record,
            sspec,
            spec,
            protected,
            risk,
            ids_desc,
            max_blobs,
            blobs,
            redactor,
        } = p;
        let spec = &spec;
        // Time spent queued is not the rehearsal's.
        let mut sspec = sspec;
        sspec.t0_ns = sandbox::helper::monotonic_ns();
        let t0_ns = sspec.t0_ns;
        let run_id = record.run_id.clone();
        record.state = RunState::Running;
        self.save_relaxed(&record)?;
        let t_sandbox = std::time::Instant::now();
        let outcome = sandbox::rehearse(&sspec, &blobs, max_blobs, cancel);
        tracing::debug!(run = %run_id, elapsed = ?t_sandbox.elapsed(), "sandbox returned");
        match outcome {
            Ok((mut report, host)) => {
                report_content_not_kept(&mut report, max_blobs);
                // Before the report is judged, recorded or journaled: the
                // verdict's reasons quote would-be actions and details too.
                let redactions = redactor.scrub_report(&mut report, sspec.limits.output_bytes);
                let verdict = verdict::judge_with(
                    spec,
                    &report,
                    &host,
                    &verdict::JudgeContext {
                        protected: Some(&protected),
                        risk: Some(&risk),
                    },
                );
                let mut stripped = report.stripped.clone();
                // Only the submitter's own variables are named: in-process,
                // this process's environment is the submitter's; a daemon's
                // environment is its own and never named to a client.
                let local = record
                    .submitted_by
                    .as_ref()
                    .is_none_or(|a| a.via == "local");
                if local {
                    for n in secret_looking_env_names() {
                        if !spec.env.contains_key(&n) {
                            stripped.push(format!("env:{n}"));
                        }
                    }
                }
                let mut enforcement = host.enforcement.clone();
                enforcement.extend(report.enforcement.iter().cloned());
                enforcement.push(format!(
                    "timeout: {} s wall clock, whole process tree",
                    spec.limits.timeout_s
                ));
                enforcement.push(format!(
                    "disk: {} MiB upper layer (tmpfs)",
                    spec.limits.disk_mb
                ));
                enforcement.push(format!("output: {} KiB", spec.limits.output_kb));
                let mut limits_hit = report.limits_hit.clone();
                limits_hit.extend(host.limits_hit.iter().cloned());
                limits_hit.sort();
                limits_hit.dedup();
                record.state = RunState::after_verdict(verdict.decision);
                let net = report
                    .blocked
                    .iter()
                    .filter(|b| b.kind == crate::model::BlockedKind::Network)
                    .count();
                record.rehearsal = Some(Rehearsal {
                    exit_code: report.exit_code,
                    signal: report.signal,
                    timed_out: report.timed_out,
                    duration_ms: report.duration_ms,
                    stdout: String::from_utf8_lossy(&report.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&report.stderr).into_owned(),
                    output_truncated: report.output_truncated,
                    changes: report.changes,
                    blocked: report.blocked,
                    stripped,
                    limits_hit,
                    steps: report.steps,
                    leftover_processes_killed: report.leftover_processes_killed
                        + host.leftover_processes_killed,
                    max_processes: report.max_processes,
                    timings_us: {
                        let mut t = report.timings_us.clone();
                        t.push((
                            "engine: answer read".into(),
                            (sandbox::helper::monotonic_ns() - t0_ns) / 1000,
                        ));
                        t
                    },
                    sandbox: SandboxRecord {
                        image: self.opts.image.name.clone(),
                        landlock_abi: report.landlock_abi,
                        landlock_status: report.landlock_status,
                        seccomp: report.seccomp,
                        ids: ids_desc,
                        enforcement,
                        network: if sspec.network_host {
                            "host (the live lane's rerun, as live.network: host grants)".into()
                        } else {
                            "none (new network namespace, loopback only)".into()
                        },
                    },
                    evidence_hash: String::new(),
                    incomplete: {
                        let mut why = Vec::new();
                        if net > 0 {
                            why.push(format!(
                                "the command tried the network {net} time(s) and no stub answered; what it does after those calls differs live"
                            ));
                        }
                        if report.would_be_actions_dropped > 0 {
                            why.push(format!(
                                "{} would-be action record(s) were not kept (unreadable, or past the first {})",
                                report.would_be_actions_dropped,
                                sandbox::stubs::MAX_ACTIONS
                            ));
                        }
                        why
                    },
                    would_be_actions: report.would_be_actions,
                    redactions,
                });
                record.verdict = Some(verdict);
                fit_record(&mut record);
                if let Some(reh) = record.rehearsal.as_mut() {
                    reh.evidence_hash = crate::record::evidence_hash(reh);
                }
            }
            Err(e) => {
                record.state = RunState::Failed;
                record.error = Some(match e {
                    SandboxError::Cancelled => {
                        "cancelled before the rehearsal finished; nothing was promoted".into()
                    }
                    // May quote the helper's stderr.
                    e => redactor
                        .redact_str(&e.to_string(), &mut crate::redact::Redactions::default()),
                });
                let _ = std::fs::remove_dir_all(&blobs);
            }
        }
        let t_commit = std::time::Instant::now();
        // Journal first: a run never shows a final state the journal lacks.
        if let Err(e) = self.journal.append(&verdict_entry(&record)) {
            record.state = RunState::Failed;
            record.error = Some(format!("the verdict could not be journaled: {e}"));
            let _ = self.save(&record);
            self.clear_inflight(&run_id);
            return Err(e.into());
        }
        if sspec.cgroup.is_some() && record.state == RunState::Failed {
            // A cancelled or killed helper cannot remove its cgroups.
            sandbox::limits::reap_run_cgroups(&run_id);
        }
        self.save(&record)?;
        self.clear_inflight(&run_id);
        self.count_usage(&record);
        tracing::debug!(run = %run_id, elapsed = ?t_commit.elapsed(), "verdict saved and journaled");
        Ok(record)
    }

    fn plan_ids(&self, ws: &WorkspaceIdentity) -> Result<(IdPlan, String), EngineError> {
        if nix::unistd::geteuid().is_root() {
            let (uid, gid) = (ws.uid, ws.gid);
            if uid >= ID_COUNT || gid >= ID_COUNT {
                return Err(EngineError::Workspace(format!(
                    "the workspace belongs to {uid}:{gid}; as root, dryrun maps ids 0-{} only: use a workspace owned by a smaller id",
                    ID_COUNT - 1
                )));
            }
            let base = self.opts.id_base;
            Ok((
                IdPlan::Shifted {
                    host_base: base,
                    count: ID_COUNT,
                    run_uid: uid,
                    run_gid: gid,
                },
                format!(
                    "shifted: sandbox ids 0-{} are host ids {base}-{}; the command runs as {uid}:{gid} (host {}:{})",
                    ID_COUNT - 1,
                    base + ID_COUNT - 1,
                    base + uid,
                    base + gid
                ),
            ))
        } else {
            let uid = nix::unistd::geteuid().as_raw();
            let gid = nix::unistd::getegid().as_raw();
            Ok((
                IdPlan::SelfOnly { uid, gid },
                format!("self: the only id inside is the caller's own ({uid}:{gid})"),
            ))
        }
    }

    /// Save without waiting for the disk (intermediate states only).
    fn save_relaxed(&self, record: &RunRecord) -> Result<(), EngineError> {
        let path = self.run_dir(&record.run_id).join("record.json");
        let tmp = path.with_extension("json.partial");
        let bytes = serde_json::to_vec_pretty(record).expect("records serialize");
        if bytes.len() > RECORD_MAX_BYTES {
            return Err(record_too_large(path, bytes.len()));
        }
        std::fs::write(&tmp, &bytes)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|source| EngineError::State { path, source })
    }

    pub fn save(&self, record: &RunRecord) -> Result<(), EngineError> {
        let dir = self.run_dir(&record.run_id);
        std::fs::create_dir_all(&dir).map_err(|source| EngineError::State {
            path: dir.clone(),
            source,
        })?;
        let path = dir.join("record.json");
        let bytes = serde_json::to_vec_pretty(record).expect("records serialize");
        if bytes.len() > RECORD_MAX_BYTES {
            return Err(record_too_large(path, bytes.len()));
        }
        write_atomic(&path, &bytes).map_err(|source| EngineError::State { path, source })
    }

    pub fn get(&self, id: &str) -> Result<RunRecord, EngineError> {
        if !valid_run_id(id) {
            return Err(EngineError::BadRunId(id.into()));
        }
        let path = self.run_dir(id).join("record.json");
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(EngineError::NoSuchRun(id.into()));
            }
            Err(source) => return Err(EngineError::State { path, source }),
        };
        serde_json::from_slice(&text).map_err(|e| EngineError::Corrupt {
            path,
            message: e.to_string(),
        })
    }

    /// All runs, newest first, optionally filtered by state.
    pub fn list(&self, state: Option<RunState>) -> Result<Vec<RunRecord>, EngineError> {
        let runs = self.state_dir.join("runs");
        let mut out = Vec::new();
        let rd = std::fs::read_dir(&runs).map_err(|source| EngineError::State {
            path: runs.clone(),
            source,
        })?;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !valid_run_id(&name) {
                continue;
            }
            if let Ok(r) = self.get(&name)
                && state.is_none_or(|s| s == r.state)
            {
                out.push(r);
            }
        }
        out.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.run_id.cmp(&a.run_id))
        });
        Ok(out)
    }

    /// Housekeeping of `runs/`, by age of the run's last state change (its
    /// directory's modification time): past `blob_days`, a run's kept
    /// content goes; past `record_days`, the whole run (record, envelope,
    /// content) goes. Runs awaiting approval, approved, queued or running
    /// are kept whatever their age. Per-uid usage is counted again after.
    pub fn collect_garbage(&self) {
        let r = &self.opts.retention;
        let blob_age = Duration::from_secs(r.blob_days.saturating_mul(86_400));
        let record_age = Duration::from_secs(r.record_days.saturating_mul(86_400));
        if let Ok(rd) = std::fs::read_dir(self.state_dir.join("runs")) {
            for e in rd.flatten() {
                let dir = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if !valid_run_id(&name) {
                    continue;
                }
                // Only old runs are read at all, so this costs one stat per run.
                let Some(age) = std::fs::symlink_metadata(&dir)
                    .ok()
                    .filter(|m| m.is_dir())
                    .and_then(|m| m.modified().ok())
                    .map(|t| t.elapsed().unwrap_or_default())
                else {
                    continue;
                };
                if age < blob_age.min(record_age) {
                    continue;
                }
                let pending = self.get(&name).is_ok_and(|r| r.state.is_pending());
                if pending {
                    continue;
                }
                if age >= record_age {
                    let _ = std::fs::remove_dir_all(&dir);
                } else if age >= blob_age {
                    let _ = std::fs::remove_dir_all(dir.join("blobs"));
                }
            }
        }
        *self.usage.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Refuse a daemon client that keeps its quota's worth or more.
    fn check_quota(&self, uid: u32) -> Result<(), EngineError> {
        let Some(quota) = self.opts.retention.quota_per_uid_bytes else {
            return Ok(());
        };
        let used = self.usage_of(uid);
        if used < quota {
            return Ok(());
        }
        let r = &self.opts.retention;
        Err(EngineError::QuotaExceeded(format!(
            "uid {uid} keeps {} MiB of run records and kept content in the state directory, at or over its quota of {} MiB (`dryrun daemon --quota-per-uid-mb`); nothing ran. \
             Space comes back as housekeeping removes the kept content of runs older than {} days and the records of finished runs older than {} days (runs awaiting approval or approved are kept: reject the ones you no longer need); \
             an administrator can raise the quota or shorten the retention (`--blob-retention-days`, `--record-retention-days`)",
            used.div_ceil(1 << 20),
            quota >> 20,
            r.blob_days,
            r.record_days
        )))
    }

    /// Bytes `uid`'s runs keep under `runs/` (records, envelopes, kept
    /// content; apparent sizes). Counted once by a scan, then kept up to
    /// date as runs finish.
    pub fn usage_of(&self, uid: u32) -> u64 {
        let mut g = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert_with(|| self.scan_usage())
            .get(&uid)
            .copied()
            .unwrap_or(0)
    }

    fn scan_usage(&self) -> std::collections::HashMap<u32, u64> {
        let mut m = std::collections::HashMap::new();
        for e in std::fs::read_dir(self.state_dir.join("runs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = e.path();
            if let Some(uid) = run_owner(&dir) {
                *m.entry(uid).or_insert(0) += run_dir_bytes(&dir);
            }
        }
        m
    }

    /// Add a settled run's bytes to its submitter's usage.
    fn count_usage(&self, r: &RunRecord) {
        let Some(uid) = r.submitted_by.as_ref().map(|a| a.uid) else {
            return;
        };
        let mut g = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = g.as_mut() {
            *m.entry(uid).or_insert(0) += run_dir_bytes(&self.run_dir(&r.run_id));
        }
    }
}

/// The submitter's uid of the run in `dir`, read without keeping the record.
fn run_owner(dir: &Path) -> Option<u32> {
    #[derive(Deserialize)]
    struct Submitter {
        uid: u32,
    }
    #[derive(Deserialize)]
    struct Owner {
        submitted_by: Option<Submitter>,
    }
    let f = std::fs::File::open(dir.join("record.json")).ok()?;
    let o: Owner = serde_json::from_reader(std::io::BufReader::new(f)).ok()?;
    o.submitted_by.map(|s| s.uid)
}

/// Apparent size of a run directory's files and kept content (a sparse
/// blob counts at its full length).
fn run_dir_bytes(dir: &Path) -> u64 {
    let files = |d: &Path| -> u64 {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    };
    files(dir) + files(&dir.join("blobs"))
}

fn record_too_large(path: PathBuf, len: usize) -> EngineError {
    EngineError::State {
        path,
        source: std::io::Error::other(format!(
            "the record would be {len} bytes, over the {RECORD_MAX_BYTES}-byte cap; not written"
        )),
    }
}

/// Files the walk could not keep within the run's kept-content budget
/// (counted at apparent size, so a sparse file counts at its full length)
/// make the run hit its disk limit, named in `limits_hit` and `blocked`.
fn report_content_not_kept(report: &mut sandbox::wire::RehearsalReport, budget: u64) {
    let not_kept: Vec<&str> = report
        .changes
        .iter()
        .filter(|c| c.content_not_kept)
        .map(|c| c.path.as_str())
        .collect();
    if not_kept.is_empty() {
        return;
    }
    let detail = format!(
        "kept content: {} file(s) did not fit the run's kept-content budget of {} MiB (apparent sizes, so sparse files count in full; the budget follows limits.disk_mb); their content was not kept, so the run cannot be promoted: {}{}",
        not_kept.len(),
        budget >> 20,
        not_kept
            .iter()
            .take(5)
            .map(|p| crate::workspace::paths::sanitize_for_terminal(p))
            .collect::<Vec<_>>()
            .join(", "),
        if not_kept.len() > 5 { ", ..." } else { "" }
    );
    report.blocked.push(sandbox::wire::Blocked {
        kind: crate::model::BlockedKind::Limit,
        detail,
    });
    report.limits_hit.push(crate::model::LimitHit::Disk);
    report.limits_hit.sort();
    report.limits_hit.dedup();
}

/// Hold a finished record under [`RECORD_MAX_BYTES`]: output, then long
/// lists, then the change list are cut until it fits. A record that had to
/// be cut names the `record` limit and is blocked: what was cut cannot be
/// reviewed, so the run is never promoted as is.
fn fit_record(record: &mut RunRecord) {
    const OUTPUT_KEPT: usize = 64 << 10;
    const LIST_KEPT: usize = 1000;
    let size = |r: &RunRecord| serde_json::to_vec_pretty(r).map_or(usize::MAX, |b| b.len());
    let before = size(record);
    // Room for the notes added below.
    let cap = RECORD_MAX_BYTES - (16 << 10);
    if before <= cap {
        return;
    }
    fn cut_text(t: &mut String, max: usize) -> bool {
        if t.len() <= max {
            return false;
        }
        let mut end = max;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t.truncate(end);
        true
    }
    fn cut_list<T>(v: &mut Vec<T>, max: usize) {
        v.truncate(max);
    }
    if let Some(reh) = record.rehearsal.as_mut() {
        let a = cut_text(&mut reh.stdout, OUTPUT_KEPT);
        let b = cut_text(&mut reh.stderr, OUTPUT_KEPT);
        reh.output_truncated |= a || b;
    }
    if size(record) > cap {
        if let Some(v) = record.verdict.as_mut() {
            cut_list(&mut v.surprise_paths, LIST_KEPT);
            cut_list(&mut v.forbidden_paths_touched, LIST_KEPT);
            cut_list(&mut v.reasons, LIST_KEPT);
            cut_list(&mut v.findings, LIST_KEPT);
            cut_list(&mut v.notes, LIST_KEPT);
        }
        if let Some(reh) = record.rehearsal.as_mut() {
            cut_list(&mut reh.blocked, LIST_KEPT);
            cut_list(&mut reh.stripped, LIST_KEPT);
            cut_list(&mut reh.would_be_actions, LIST_KEPT);
            cut_list(&mut reh.incomplete, LIST_KEPT);
        }
    }
    while size(record) > cap {
        let Some(reh) = record.rehearsal.as_mut() else {
            break;
        };
        if reh.changes.is_empty() {
            break;
        }
        let keep = reh.changes.len() / 2;
        reh.changes.truncate(keep);
    }
    let message = format!(
        "the run record would have been {} MiB, over the {} MiB cap: output, long lists and the change list were cut, so this run cannot be reviewed in full or promoted",
        before.div_ceil(1 << 20),
        RECORD_MAX_BYTES >> 20
    );
    if let Some(reh) = record.rehearsal.as_mut() {
        reh.limits_hit.push(crate::model::LimitHit::Record);
        reh.limits_hit.sort();
        reh.limits_hit.dedup();
        reh.blocked.push(sandbox::wire::Blocked {
            kind: crate::model::BlockedKind::Limit,
            detail: message.clone(),
        });
    }
    if let Some(v) = record.verdict.as_mut() {
        v.decision = Decision::Blocked;
        v.reasons.insert(0, format!("[limits.record] {message}"));
        v.findings.insert(
            0,
            crate::model::Finding {
                rule: "limits.record".into(),
                decision: Decision::Blocked,
                message,
            },
        );
        record.state = RunState::Rehearsed;
    }
}

/// A reviewer decision between its journal record and its run record.
#[derive(Debug, Serialize, Deserialize)]
struct Transition {
    nonce: String,
    record: RunRecord,
}

/// The command's environment: a fixed base, then the envelope's `env`.
/// Nothing is inherited from the caller.
pub fn sandbox_env(spec: &EnvelopeSpec) -> Vec<(String, String)> {
    let mut env: std::collections::BTreeMap<String, String> = [
        (
            "PATH",
            "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin",
        ),
        ("HOME", "/tmp/home"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("TZ", "UTC"),
        // Reproducible builds' convention: tools that honour it stamp this
        // instead of the clock, so reruns give the same bytes.
        ("SOURCE_DATE_EPOCH", "0"),
        ("USER", "dryrun"),
        ("LOGNAME", "dryrun"),
        ("SHELL", "/bin/bash"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.insert("PWD".into(), spec.workspace.display().to_string());
    for (k, v) in &spec.env {
        env.insert(k.clone(), v.clone());
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_engine(dir: &Path, quota: Option<u64>) -> Engine {
        let opts = EngineOptions {
            retention: Retention {
                blob_days: 7,
                record_days: 30,
                quota_per_uid_bytes: quota,
            },
            ..EngineOptions::default()
        };
        Engine::open(dir, opts).unwrap()
    }

    /// A run directory as a finished run leaves it, last changed `days` ago.
    fn fake_run(e: &Engine, id: &str, state: &str, uid: u32, days: u64, blob: usize) {
        let dir = e.run_dir(id);
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        let record = serde_json::json!({
            "schema": SCHEMA, "run_id": id, "task": null, "command": "true",
            "workspace": "/nowhere", "created_at": "2020-01-01T00:00:00Z",
            "envelope_hash": "", "rehearsal": null, "verdict": null, "receipt": null,
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "state": state,
            "submitted_by": {"uid": uid, "gid": uid, "via": "daemon"},
        });
        std::fs::write(dir.join("record.json"), record.to_string()).unwrap();
        std::fs::write(dir.join("blobs").join("b"), vec![0u8; blob]).unwrap();
        let when = SystemTime::now() - Duration::from_secs(days * 86_400);
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    #[test]
    fn retention_removes_old_content_then_old_records_but_keeps_pending_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let e = test_engine(tmp.path(), None);
        fake_run(&e, "r1-0001", "rehearsed", 1000, 1, 10);
        fake_run(&e, "r1-0002", "rehearsed", 1000, 10, 10);
        fake_run(&e, "r1-0003", "promoted", 1000, 40, 10);
        fake_run(&e, "r1-0004", "failed", 1000, 40, 10);
        fake_run(&e, "r1-0005", "awaiting_approval", 1000, 400, 10);
        fake_run(&e, "r1-0006", "approved", 1000, 400, 10);
        fake_run(&e, "r1-0007", "rejected", 1000, 31, 10);
        e.collect_garbage();
        let has = |id: &str, sub: &str| e.run_dir(id).join(sub).exists();
        // Young: everything stays.
        assert!(has("r1-0001", "record.json") && has("r1-0001", "blobs"));
        // Past the content retention: content goes, the record stays.
        assert!(has("r1-0002", "record.json") && !has("r1-0002", "blobs"));
        // Past the record retention: the whole run goes.
        for id in ["r1-0003", "r1-0004", "r1-0007"] {
            assert!(!e.run_dir(id).exists(), "{id}");
        }
        // Waiting for a person, or approved: kept whatever their age.
        for id in ["r1-0005", "r1-0006"] {
            assert!(has(id, "record.json") && has(id, "blobs"), "{id}");
        }
        assert_eq!(e.list(None).unwrap().len(), 4);
    }

    #[test]
    fn a_uid_at_its_quota_is_refused_and_others_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let e = test_engine(tmp.path(), Some(1 << 20));
        fake_run(&e, "r1-0001", "rehearsed", 1000, 0, 600 << 10);
        fake_run(&e, "r1-0002", "rehearsed", 1000, 0, 600 << 10);
        fake_run(&e, "r1-0003", "rehearsed", 1001, 0, 10);
        // Apparent sizes: a sparse blob counts in full.
        let sparse = e.run_dir("r1-0003").join("blobs").join("sparse");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(900 << 20)
            .unwrap();
        assert!(e.usage_of(1000) >= 1200 << 10);
        assert!(e.usage_of(1001) >= 900 << 20);
        let err = e.check_quota(1000).unwrap_err();
        assert!(matches!(err, EngineError::QuotaExceeded(_)));
        let msg = err.to_string();
        assert!(msg.contains("quota of 1 MiB"), "{msg}");
        assert!(msg.contains("30 days"), "{msg}");
        assert!(e.check_quota(1002).is_ok());
        // Housekeeping counts again: with the content gone, uid 1000 is
        // under its quota.
        std::fs::remove_dir_all(e.run_dir("r1-0001")).unwrap();
        e.collect_garbage();
        assert!(e.check_quota(1000).is_ok());
    }

    #[test]
    fn an_oversized_record_is_cut_blocked_and_never_written_whole() {
        let change = |i: usize| crate::workspace::diff::Change {
            path: format!("{}/{i}", "d".repeat(2000)),
            ..serde_json::from_value(serde_json::json!({
                "path": "x", "kind": "created", "file_type": "file", "before": null, "after": null
            }))
            .unwrap()
        };
        let mut r: RunRecord = serde_json::from_value(serde_json::json!({
            "schema": SCHEMA, "run_id": "r1-0001", "task": null, "command": "true",
            "workspace": "/nowhere", "created_at": "2020-01-01T00:00:00Z",
            "envelope_hash": "", "verdict": null, "receipt": null,
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "state": "rehearsed", "rehearsal": null,
        }))
        .unwrap();
        r.rehearsal = Some(Rehearsal {
            stdout: "o".repeat(4 << 20),
            changes: (0..6_000).map(change).collect(),
            ..Default::default()
        });
        r.verdict = Some(verdict::Verdict {
            decision: Decision::Promote,
            surprise_paths: Vec::new(),
            forbidden_paths_touched: Vec::new(),
            reasons: Vec::new(),
            findings: Vec::new(),
            notes: Vec::new(),
        });
        assert!(serde_json::to_vec_pretty(&r).unwrap().len() > 12 << 20);
        fit_record(&mut r);
        assert!(serde_json::to_vec_pretty(&r).unwrap().len() <= RECORD_MAX_BYTES);
        let reh = r.rehearsal.as_ref().unwrap();
        assert!(reh.limits_hit.contains(&crate::model::LimitHit::Record));
        assert!(reh.output_truncated);
        let v = r.verdict.as_ref().unwrap();
        assert_eq!(v.decision, Decision::Blocked);
        assert!(
            v.reasons[0].starts_with("[limits.record]"),
            "{:?}",
            v.reasons
        );
        // And the store refuses anything larger, whatever the caller.
        let tmp = tempfile::tempdir().unwrap();
        let e = test_engine(tmp.path(), None);
        r.rehearsal.as_mut().unwrap().stdout = "o".repeat(RECORD_MAX_BYTES);
        assert!(e.save(&r).is_err());
        assert!(!e.run_dir("r1-0001").join("record.json").exists());
    }

    #[test]
    fn journal_fields_stay_small_whatever_the_command_does() {
        let many: Vec<String> = (0..10_000)
            .map(|i| {
                format!(
                    "[protected.path] created .github/workflows/{}{i}.yml",
                    "x".repeat(200)
                )
            })
            .collect();
        let v = capped_list(&many);
        let text = serde_json::to_string(&v).unwrap();
        assert!(text.len() < 64 * 1024, "{} bytes", text.len());
        assert_eq!(v["total"], 10_000);
        let small = vec!["a".to_string(), "b".to_string()];
        assert_eq!(capped_list(&small), serde_json::json!(["a", "b"]));
        let long = "é".repeat(10_000);
        let t = capped_text(&long);
        assert_eq!(t["bytes"], long.len());
        assert!(t["text"].as_str().unwrap().len() <= JOURNAL_TEXT_MAX);
    }
}
