//! The pipeline: envelope → classify → rehearse (sandbox) → evidence →
//! verdict → record → journal. The CLI and the daemon call this; neither
//! re-implements a stage.
//!
//! One file per verb or concern: `submit.rs` (prepare a run), `rehearse.rs`
//! (run it in the sandbox and judge it), `review.rs` (approve, reject,
//! cancel), `live/` (promote, rollback), `replay.rs`, `compare.rs`,
//! `queue.rs` (the review queue: oldest first, expiry),
//! `recover.rs` (what a dead process left in flight), `store.rs` (the run
//! store, quota and retention), `entries.rs` (journal entries), `authz.rs`
//! (who may do what), `machine.rs` (the limits' defaults and ceilings,
//! sized to the machine), `error.rs`.
//!
//! Scratch policy: [`Engine::collect_garbage`] (at an engine start, at most
//! hourly, and hourly in a running daemon) deletes the `blobs/` of runs past
//! [`Retention::blob_days`] (default 7) and whole runs past
//! [`Retention::record_days`] (default 30), unless they are awaiting approval
//! or approved, then fits the state directory into its size budget
//! ([`Retention::state_budget_bytes`], `gc.rs`, also `dryrun gc`). Daemon clients have a per-uid quota of what they keep here;
//! a run keeps at most `kept_content_budget(disk_mb)` of content (apparent
//! size) and a record of at most [`RECORD_MAX_BYTES`]. The sandbox's own
//! upper layer and mounts live in its mount namespace and vanish with it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub mod authz;
pub mod bound;
mod compare;
mod deps;
mod egress;
mod entries;
mod error;
mod gc;
mod gitdir;
mod host_prompt;
mod live;
pub mod machine;
mod queue;
mod recover;
mod rehearse;
mod replay;
mod review;
mod run_id;
mod store;
mod submit;
pub mod summary;
pub mod textdiff;

pub use crate::record::Receipt;
/// What the daemon needs of the sandbox, handed on by the engine: the
/// sandbox is a leaf that only the engine imports.
pub(crate) use crate::sandbox::CancelHandle;
/// What a replay of recorded output needs (`doors::promote`): whether the
/// reader of a pipe has taken what was written to it.
pub(crate) use crate::sandbox::unread_bytes;
/// Held around a door's own looks at the host's paths: the resolvers made
/// meanwhile share their judged mounts.
pub(crate) use crate::sandbox::view::Looks;

/// Start the resident sandbox helper for this process's rehearsals (the
/// daemon at its start, the CLI at the start of an in-process command;
/// from the main thread, before any runtime starts): each rehearsal then
/// forks it instead of executing the helper anew. Returns its pid.
pub(crate) fn start_resident_sandbox_helper() -> std::io::Result<()> {
    crate::sandbox::start_resident_helper()?;
    // Workspace agents too are forked from it, not executed.
    crate::workspace::owner::launch_agents_with(launch_agent_from_resident);
    Ok(())
}

/// A workspace agent forked by the resident sandbox helper.
fn launch_agent_from_resident(
    ids: &str,
    view: Option<&crate::workspace::owner::view::ClientView>,
) -> Option<crate::workspace::owner::LaunchedAgent> {
    let w = crate::sandbox::fork_worker_in(ids.as_bytes(), view.map(view_fds))?;
    Some(crate::workspace::owner::LaunchedAgent {
        input: w.input,
        output: w.output,
        handle: Box::new(ForkedAgent(w.pidfd)),
    })
}

/// A client's view as the sandbox takes it.
pub(crate) fn view_fds(
    v: &crate::workspace::owner::view::ClientView,
) -> crate::sandbox::ViewFds<'_> {
    use std::os::fd::AsFd;
    crate::sandbox::ViewFds {
        mnt_ns: v.mnt_ns.as_fd(),
        root: v.root.as_fd(),
        dir: v.dir.as_fd(),
    }
}

/// A forked agent's pidfd.
struct ForkedAgent(std::os::fd::OwnedFd);

impl crate::workspace::owner::AgentHandle for ForkedAgent {
    fn kill(&mut self) {
        let _ = crate::sandbox::kill_worker(&self.0);
    }
}
pub(crate) use crate::sandbox::probe::landlock_abi;
pub use authz::refuse_self_approval;
pub use compare::{RunComparison, compare_runs};
pub use entries::shown_actions;
pub use error::{EngineError, Input, What};
pub use gc::DEFAULT_STATE_BUDGET_BYTES;
pub use host_prompt::GRANT_TTL_S;
pub use live::valid_receipt_id;
pub use queue::{DEFAULT_APPROVAL_EXPIRY, in_review_queue};
pub use replay::ReplayRequest;
pub use run_id::{is_whole_run_id, valid_run_id};
pub use store::default_state_dir;
pub use submit::access_as;

use crate::envelope::EnvelopeSpec;
use crate::journal::Journal;
use crate::record::RunRecord;
use crate::sandbox::spec::{ImageProfile, SandboxSpec};

/// System policy files layered over the shipped default (any may loosen).
pub const SYSTEM_POLICY_DIR: &str = "/etc/dryrun/policy.d";

/// Where this process reads the system policy files: [`SYSTEM_POLICY_DIR`],
/// or `DRYRUN_SYSTEM_POLICY_DIR` from this process's own environment
/// (system configuration, as the daemon's flags are: a daemon's clients
/// and an envelope cannot set it; the in-process engine belongs to its
/// caller anyway). Taken, resolved, only when root alone can change what
/// it holds ([`root_only_dir`]), as `/etc/dryrun` is: a variable an agent
/// host passes on cannot point the hook at a policy the agent wrote, nor
/// at a root directory the agent can swap for its own between the check
/// and the read (one inside a directory of the agent's, or reached
/// through a link it can point elsewhere).
pub fn system_policy_dir() -> PathBuf {
    let named = std::env::var_os("DRYRUN_SYSTEM_POLICY_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    match named.as_deref().map(root_only_dir) {
        Some(Ok(resolved)) => resolved,
        Some(Err(why)) => {
            tracing::warn!(
                "DRYRUN_SYSTEM_POLICY_DIR={} is not system configuration ({why}); using {SYSTEM_POLICY_DIR}",
                named.as_deref().unwrap_or(Path::new("")).display()
            );
            PathBuf::from(SYSTEM_POLICY_DIR)
        }
        None => PathBuf::from(SYSTEM_POLICY_DIR),
    }
}

/// `p` resolved, when root alone can change what it holds: it is a
/// directory owned by root that no one else may write, and every directory
/// above it is owned by root and writable by no one else, or sticky (where
/// others may add entries but not rename or remove root's). Otherwise why
/// not. Nothing on the resolved path can then be swapped by anyone else.
fn root_only_dir(p: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let resolved = std::fs::canonicalize(p).map_err(|e| format!("cannot resolve it: {e}"))?;
    let mut at = Some(resolved.as_path());
    let mut is_the_dir = true;
    while let Some(d) = at {
        let m = std::fs::symlink_metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if !m.is_dir() || m.uid() != 0 {
            return Err(format!("{} is not a directory owned by root", d.display()));
        }
        let writable_by_others = m.mode() & 0o022 != 0;
        let sticky = m.mode() & 0o1000 != 0;
        if writable_by_others && (is_the_dir || !sticky) {
            return Err(format!(
                "{} may be written by others than root",
                d.display()
            ));
        }
        is_the_dir = false;
        at = d.parent();
    }
    Ok(resolved)
}

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
/// lists and texts are cut (and the run cannot be promoted). A change costs
/// about 300 bytes in the record (pretty JSON), so 100,000 changes (the
/// walk's cap) take about 30 MiB; the receipt's copy of a long change list
/// stays in `receipts/<id>/receipt.json`, not in the record.
pub const RECORD_MAX_BYTES: usize = 64 << 20;

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub allow_degraded: bool,
    pub image: ImageProfile,
    pub id_base: u32,
    /// What a run gets for a limit it does not ask for (sized to the
    /// machine: [`machine`]).
    pub defaults: crate::envelope::LimitsSpec,
    /// The most a run may ask for (`dryrun daemon --max-*`).
    pub ceilings: crate::envelope::LimitsSpec,
    /// Who set the ceilings, for error messages: "this daemon's".
    pub ceilings_of: &'static str,
    pub retention: Retention,
    /// Whether an agent host's permission prompt may approve runs (see
    /// `engine::host_prompt`). On for the in-process engine, whose state
    /// belongs to the agent's own uid anyway; off for a daemon unless
    /// `dryrun daemon --host-prompt-approvals` turns it on.
    pub host_prompt_approvals: bool,
    /// The system's egress configuration: `--egress-resolve` pins and the
    /// system policy's always- and never-allowed names.
    pub egress: crate::egress::EgressSystem,
    /// How long a run waits in the review queue before it expires
    /// (default [`DEFAULT_APPROVAL_EXPIRY`]; `DRYRUN_APPROVAL_EXPIRY_S`).
    pub approval_expiry: Duration,
    /// What the engine knows of its caller's environment (in-process:
    /// this process's; a daemon: nothing, its clients' is not its own).
    pub caller: CallerEnv,
}

/// The in-process caller's `$HOME` (a home the workspace bound compares
/// a workspace with) and `PATH` (directories a run must not write into
/// unseen: see `engine::bound::path_dirs_in`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallerEnv {
    pub home: Option<PathBuf>,
    pub path: Option<std::ffi::OsString>,
}

impl CallerEnv {
    /// This process's own `$HOME` and `PATH`.
    pub fn of_this_process() -> Self {
        CallerEnv {
            home: std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            path: std::env::var_os("PATH"),
        }
    }
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
    /// The whole state directory's size budget (`gc.rs`); `None`: none.
    pub state_budget_bytes: Option<u64>,
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
            state_budget_bytes: match std::env::var("DRYRUN_STATE_BUDGET_MB") {
                // 0 (or anything unreadable): no budget.
                Ok(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|mb| *mb > 0)
                    .map(|mb| mb << 20),
                Err(_) => Some(gc::DEFAULT_STATE_BUDGET_BYTES),
            },
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
            defaults: machine::Machine::this().default_limits(),
            ceilings: machine::Machine::this().default_ceilings(),
            ceilings_of: "this engine's",
            retention: Retention::default(),
            host_prompt_approvals: true,
            egress: Default::default(),
            approval_expiry: std::env::var("DRYRUN_APPROVAL_EXPIRY_S")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|s| *s > 0)
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_APPROVAL_EXPIRY),
            caller: CallerEnv::of_this_process(),
        }
    }
}

pub struct Engine {
    state_dir: PathBuf,
    opts: EngineOptions,
    journal: std::sync::Arc<Journal>,
    /// Enforced for daemon clients when set (see [`Engine::enable_budget`]).
    budget: Option<crate::policy::budget::Ledger>,
    /// Bytes each submitting uid keeps under `runs/` (see
    /// [`Engine::usage_of`]); `None` until first needed and after each
    /// housekeeping, which rescans.
    usage: std::sync::Mutex<Option<std::collections::HashMap<u32, u64>>>,
    /// Every saved state of every run, for long polls and the event stream
    /// (nobody listening costs nothing; a slow listener skips, never blocks).
    events: tokio::sync::broadcast::Sender<crate::model::run_state::RunEvent>,
    /// In-flight markers of this process kept for its next runs (a
    /// long-lived engine only: see [`Engine::keep_idle_markers`]).
    idle_markers: Option<std::sync::Mutex<recover::IdleMarkers>>,
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
    /// The system's egress names and pins (options and system policy).
    egress: crate::egress::EgressSystem,
    /// Scrubs what the run prints or hands to stubs of the values it was
    /// given and of credential shapes, before anything is kept.
    redactor: crate::redact::Redactor,
    /// Directories inside the workspace on the owner's or the run's `PATH`
    /// (workspace-relative, `""`: the root).
    path_dirs: Vec<String>,
    /// Where the command's environment came from and what dryrun added.
    command_env: submit::CommandEnvNotes,
    /// The workspace owner's uid, gid and supplementary groups: whose
    /// credentials reach the run's declared services.
    owner: (u32, u32, Vec<u32>),
    /// The run's `run_submitted` journal entry, on its way to the disk:
    /// the command is released only once it is there.
    submitted: crate::journal::Durable,
}

impl Prepared {
    pub fn run_id(&self) -> &str {
        &self.record.run_id
    }
}

/// Approve, reject, or (the submitter) withdraw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewAction {
    Approve,
    Reject,
    Withdraw,
}

/// How a caller's identity was established (what [`authz::authorize`]
/// asks about a reviewer, a promoter, anyone reading a run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewerAuth {
    /// The daemon read the caller's uid from the socket (SO_PEERCRED);
    /// approvers are root and members of `approver_group`.
    PeerCredentials { approver_group: String },
    /// Local mode: the person typed back a code shown on the controlling
    /// terminal. Proves a human at a terminal, not a different identity.
    LocalTtyConfirmed,
    /// Local mode where there is one user (root): on top of the typed-back
    /// code, the terminal is one no process on this machine made (a
    /// console, a pseudo-terminal from outside this pid namespace, an ssh
    /// login; `cli/presence.rs`). Lets root approve root's own run.
    LocalPresence,
    /// A decision made in the fleet store (`crate::fleet`), applied by the
    /// run's own host: the reviewer is a PostgreSQL role (the database
    /// authenticated it) that the fleet config maps to a person.
    Fleet(FleetReviewer),
}

/// A fleet reviewer and the run's submitter, as people (the fleet config's
/// `people`): the two-identity rule compares these, not uids, since the
/// reviewer has no uid on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetReviewer {
    /// The decision's id in the fleet store.
    pub decision: i64,
    pub role: String,
    pub person: String,
    /// The person who submitted the run (or `uid N on HOST` when the fleet
    /// config names none).
    pub submitter: String,
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
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
                .map_err(|source| EngineError::storage(state_dir, source))?;
        }
        std::fs::create_dir_all(&runs).map_err(|source| EngineError::storage(&runs, source))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700));
        }
        for sub in ["inflight", "txn"] {
            let d = state_dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|source| EngineError::storage(d, source))?;
        }
        let e = Engine {
            state_dir: state_dir.to_path_buf(),
            opts,
            journal: std::sync::Arc::new(Journal::new(state_dir)),
            budget: None,
            usage: std::sync::Mutex::new(None),
            events: tokio::sync::broadcast::Sender::new(256),
            idle_markers: None,
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
            crate::sandbox::limits::sweep_stale_cgroups();
            e.collect_garbage();
        }
        Ok(e)
    }

    /// The lock that serializes `run_id`'s transitions (created on first
    /// use; locks nobody holds are dropped as new ones are made).
    /// Hold run `run_id`'s transition lock (review, host-prompt approval,
    /// promotion, rollback) until the guard drops. See [`store::RunGuard`].
    pub(crate) fn lock_run(&self, run_id: &str) -> Result<store::RunGuard, EngineError> {
        let dir = self.run_dir(run_id);
        store::RunGuard::acquire(&dir, run_id, store::Wait::Block)?
            .ok_or_else(|| EngineError::storage(dir, std::io::ErrorKind::WouldBlock.into()))
    }

    /// State changes of runs from now on (see [`crate::model::run_state::RunEvent`]).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<crate::model::run_state::RunEvent> {
        self.events.subscribe()
    }

    fn announce(&self, record: &RunRecord) {
        let _ = self.events.send(crate::model::run_state::RunEvent::of(
            &record.run_id,
            record.state,
            record.submitted_by.as_ref().map(|a| a.uid),
        ));
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
}
