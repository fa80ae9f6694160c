//! `dryrun mcp`: an MCP server on stdio (the official Rust SDK, `rmcp`)
//! exposing the agent's side of dryrun as tools with typed arguments and
//! structured, schema'd results: `execute`, `classify`, `show`, `diff`,
//! `list_runs`, `wait`, `promote`. There is no approval tool: approvals
//! stay with people (`dryrun approve`, `dryrun review`); `promote` carries
//! out only what the engine allows (decision promote, or approved by a
//! reviewer).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::schemars::{self, JsonSchema};
use rmcp::{Json, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};

use super::{Backend, DoorError, Target};
use crate::envelope::{Envelope, Intent, Limits};
use crate::record::{RunRecord, RunState};

/// `execute`'s arguments: the envelope's fields (docs/openapi.yaml, Envelope).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    /// One shell string, run by `bash -c` in the sandbox.
    pub command: String,
    /// The workspace (absolute path); the command runs there.
    pub working_dir: String,
    /// What the command is meant to do (shown to reviewers).
    #[serde(default)]
    pub summary: Option<String>,
    /// `read_only` (any write blocks) or `mutating` (default).
    #[serde(default)]
    pub mode: Option<ModeArg>,
    /// Globs (relative to working_dir) the command is expected to write.
    #[serde(default)]
    pub expected_writes: Vec<String>,
    /// Globs it must never touch.
    #[serde(default)]
    pub forbidden_paths: Vec<String>,
    /// Wall-clock limit, seconds.
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Variables given to the command (nothing else is inherited).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A note for the reviewer.
    #[serde(default)]
    pub reviewer_note: Option<String>,
    /// Names the command may reach through the run's egress proxy (the
    /// network is cut otherwise): `host`, `*.suffix`, either with `:port`
    /// (without one, ports 80 and 443), or a registry preset (`npm`,
    /// `pypi`, `crates`, `goproxy`: the hosts of the registry that tool is
    /// configured to use). Only what the system policy allows is accepted;
    /// a name outside the list fails at once and is named in the evidence.
    #[serde(default)]
    pub network: Vec<String>,
    /// Host services the command talks to (`127.0.0.1:PORT`, `[::1]:PORT`
    /// or a Unix socket's path), as the system policy lists them.
    #[serde(default)]
    pub services: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModeArg {
    ReadOnly,
    Mutating,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunIdArgs {
    /// A run id (`r...`).
    pub run_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyArgs {
    /// The shell string to score (nothing runs).
    pub command: String,
    /// Workspace, for "outside the workspace" findings.
    #[serde(default)]
    pub working_dir: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only runs in this state (queued, running, rehearsed,
    /// awaiting_approval, approved, rejected, promoted, failed).
    #[serde(default)]
    pub state: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    pub run_id: String,
    /// Wait until the run's state is not `state` (default: until it is no
    /// longer queued, running or awaiting approval), at most this long.
    #[serde(default)]
    pub timeout_s: Option<u64>,
    #[serde(default)]
    pub state: Option<String>,
}

/// One change of a run.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChangeOut {
    pub path: String,
    /// created, modified, deleted, metadata or identical.
    pub kind: String,
    /// file, dir, symlink or other.
    pub file_type: String,
}

/// A tool result lists each change up to this many; past it, by directory.
const MCP_CHANGES_LISTED: usize = 200;

/// A run: decision, evidence and what may happen next.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunOut {
    pub run_id: String,
    /// queued, running, rehearsed, awaiting_approval, approved, rejected,
    /// promoted or failed.
    pub state: String,
    /// promote, needs_approval or blocked (null before the verdict).
    pub decision: Option<String>,
    pub command: String,
    pub workspace: String,
    pub risk_level: Option<String>,
    pub risk_score: Option<u32>,
    pub exit_code: Option<i32>,
    /// Each change, up to the first 200 (surprise and forbidden paths are
    /// in their own lists, always in full).
    pub changes: Vec<ChangeOut>,
    /// How many changes the rehearsal made.
    pub changes_total: usize,
    /// Past 200 changes: the change list counted by directory
    /// (`node_modules/ (50,000 created in 2,000 dirs)`).
    pub changes_by_dir: Vec<String>,
    pub surprise_paths: Vec<String>,
    pub forbidden_paths_touched: Vec<String>,
    /// Calls answered by stubs instead of being made.
    pub would_be_actions: Vec<String>,
    /// Attempts refused in the rehearsal (network, writes, limits).
    pub blocked: Vec<String>,
    pub reasons: Vec<String>,
    /// What to change so the run goes through, one hint per kind of
    /// finding that held it back.
    pub to_change: Vec<String>,
    /// stdout and stderr as a terminal showed them: in the order the
    /// command wrote them (redacted like every output dryrun keeps).
    pub output: String,
    pub stdout: String,
    pub stderr: String,
    /// The output was cut at the run's output limit.
    pub output_truncated: bool,
    /// The signal that ended the command, when one did.
    pub signal: Option<i32>,
    /// Set once promoted.
    pub receipt_id: Option<String>,
    pub error: Option<String>,
    /// What the caller can do next.
    pub next: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct RunList {
    pub runs: Vec<RunBrief>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct RunBrief {
    pub run_id: String,
    pub state: String,
    pub decision: Option<String>,
    pub command: String,
    pub created_at: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ClassifyOut {
    pub score: u32,
    /// low, medium, high or critical.
    pub level: String,
    pub requires_approval: bool,
    /// promote, needs_approval or blocked, from the command alone.
    pub decision: String,
    pub reasons: Vec<String>,
    /// Every simple command seen, after unwrapping.
    pub commands: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct DiffOut {
    pub run_id: String,
    /// Unified text diffs of created and modified text files.
    pub files: Vec<FileDiffOut>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct FileDiffOut {
    pub path: String,
    /// The diff, or why there is none (binary, withheld, too large).
    pub diff: String,
}

fn run_out(r: &RunRecord) -> RunOut {
    let h = r.rehearsal.clone().unwrap_or_default();
    let v = r.verdict.as_ref();
    let decision = v.map(|v| v.decision.as_str().to_string());
    let next = match (r.state, v.map(|v| v.decision)) {
        (RunState::Queued | RunState::Running, _) => "wait for the verdict (tool wait)".into(),
        (RunState::Rehearsed, Some(crate::verdict::Decision::Promote)) => match h.exit_code {
            Some(c) if c != 0 => format!(
                "the command failed (exit status {c}) inside its intent: promote it (tool promote) to leave the workspace as the failed command would live, then fix the failure"
            ),
            _ => "promote it (tool promote) to apply exactly this change set".into(),
        },
        (RunState::AwaitingApproval, _) if r.override_required => format!(
            "blocked: change the command or its intent and execute again (only a reviewer's explicit override, `dryrun approve --override {}`, lets it through)",
            r.run_id
        ),
        (RunState::AwaitingApproval, _) => format!(
            "a person must approve it (`dryrun approve {}`); then promote it",
            r.run_id
        ),
        (RunState::Approved, _) => "promote it (tool promote)".into(),
        // Nothing here a person can decide (`model::waiting`): never an
        // override, the agent runs again.
        (RunState::Rehearsed, _) => {
            "not promoted, and nothing for a person to decide: change the command, its intent or its limits and execute again (see reasons)".into()
        }
        (RunState::Promoted, _) => "done: the change set is live".into(),
        (RunState::Rejected, _) => format!(
            "{}: nothing will be applied",
            match r.rejected_because {
                Some(crate::model::run_state::RejectCause::Withdrawn) => "withdrawn",
                Some(crate::model::run_state::RejectCause::Expired) => "expired unreviewed",
                _ => "rejected",
            }
        ),
        (RunState::Failed, _) => "the rehearsal failed; see error".into(),
    };
    RunOut {
        run_id: r.run_id.clone(),
        state: r.state.as_str().into(),
        decision,
        command: r.command.clone(),
        workspace: r.workspace.clone(),
        risk_level: r.risk.as_ref().map(|k| k.level.clone()),
        risk_score: r.risk.as_ref().map(|k| k.score),
        exit_code: h.exit_code,
        changes_total: h.changes.len(),
        changes_by_dir: if h.changes.len() > MCP_CHANGES_LISTED {
            let pairs: Vec<(&str, crate::model::ChangeKind)> = h
                .changes
                .iter()
                .map(|c| (c.path.as_str(), c.kind))
                .collect();
            crate::model::dir_summary::summarise_by_dir(&pairs)
                .iter()
                .map(|g| format!("{} ({})", g.dir, g.counts_text()))
                .collect()
        } else {
            Vec::new()
        },
        changes: h
            .changes
            .iter()
            .take(MCP_CHANGES_LISTED)
            .map(|c| ChangeOut {
                path: c.path.clone(),
                kind: serde_json::to_value(c.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                file_type: serde_json::to_value(c.file_type)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            })
            .collect(),
        surprise_paths: v.map(|v| v.surprise_paths.clone()).unwrap_or_default(),
        forbidden_paths_touched: v
            .map(|v| v.forbidden_paths_touched.clone())
            .unwrap_or_default(),
        would_be_actions: crate::engine::shown_actions(&h.would_be_actions),
        blocked: h
            .blocked
            .iter()
            .map(|b| format!("{}: {}", b.kind.as_str(), b.detail))
            .collect(),
        reasons: v.map(|v| v.reasons.clone()).unwrap_or_default(),
        to_change: v
            .map(|v| crate::model::advice::to_change(&v.findings))
            .unwrap_or_default(),
        output: h.output_text(),
        stdout: h.stdout.clone(),
        stderr: h.stderr.clone(),
        output_truncated: h.output_truncated,
        signal: h.signal,
        receipt_id: r.receipt.as_ref().map(|rc| rc.receipt_id.clone()),
        error: r.error.clone(),
        next,
    }
}

/// The server: one backend shared by every call.
#[derive(Clone)]
pub struct DryrunMcp {
    backend: Arc<Backend>,
    tool_router: ToolRouter<Self>,
}

/// Run a blocking backend call off the async runtime (the daemon client
/// builds its own runtime, the in-process engine runs sandboxes).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DoorError> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("the request was lost (a dryrun thread panicked)".into()),
    }
}

fn parse_state(s: &str) -> Result<RunState, String> {
    RunState::parse(s).ok_or_else(|| {
        format!("state {s:?} is not a run state (queued, running, rehearsed, awaiting_approval, approved, rejected, promoted, failed)")
    })
}

#[tool_router(router = tool_router)]
impl DryrunMcp {
    pub fn new(backend: Backend) -> Self {
        Self::shared(Arc::new(backend))
    }

    /// A server over a backend shared with others (one per HTTP session).
    pub fn shared(backend: Arc<Backend>) -> Self {
        Self {
            backend,
            tool_router: Self::tool_router(),
        }
    }

    /// Rehearse a shell command in dryrun's sandbox over a copy-on-write
    /// view of the workspace and judge what it did against the declared
    /// intent. Nothing touches the real workspace; waits for the verdict.
    #[tool(
        name = "execute",
        description = "Rehearse a shell command in a sandbox over a copy-on-write view of the workspace (network cut but for the names in `network`), compare what it did with the declared intent, and return the verdict (promote, needs_approval, blocked) with its evidence. The real workspace is not written."
    )]
    pub async fn execute(&self, p: Parameters<ExecuteArgs>) -> Result<Json<RunOut>, String> {
        let a = p.0;
        let wd = PathBuf::from(&a.working_dir);
        if !wd.is_absolute() {
            return Err("working_dir must be an absolute path".into());
        }
        let envelope = Envelope {
            command: Some(a.command),
            working_dir: Some(wd.clone()),
            intent: Intent {
                summary: a.summary.unwrap_or_default(),
                mode: match a.mode {
                    Some(ModeArg::ReadOnly) => crate::envelope::Mode::ReadOnly,
                    _ => crate::envelope::Mode::Mutating,
                },
                expected_writes: a.expected_writes,
                forbidden_paths: a.forbidden_paths,
                reviewer_note: a.reviewer_note,
                network: {
                    let mut n = crate::envelope::Network::None;
                    n.add(&a.network);
                    n.add_services(&a.services);
                    n
                },
                ..Default::default()
            },
            limits: Limits {
                timeout_s: a.timeout_s,
                ..Default::default()
            },
            env: a.env,
            ..Default::default()
        };
        let b = self.backend.clone();
        let r = blocking(move || b.execute(&envelope, &wd)).await?;
        Ok(Json(run_out(&r)))
    }

    /// Score a command's risk from a real shell parse, without running it.
    #[tool(
        name = "classify",
        description = "Score a shell command's risk from a real bash parse (every simple command through pipelines, substitutions, sh -c and wrappers) without running it."
    )]
    pub async fn classify(&self, p: Parameters<ClassifyArgs>) -> Result<Json<ClassifyOut>, String> {
        let a = p.0;
        if a.command.trim().is_empty() {
            return Err("command is empty".into());
        }
        if a.working_dir
            .as_deref()
            .is_some_and(|w| !Path::new(w).is_absolute())
        {
            return Err("working_dir must be an absolute path".into());
        }
        let b = self.backend.clone();
        let c = blocking(move || b.classify(&a.command, a.working_dir.as_deref().map(Path::new)))
            .await?;
        Ok(Json(ClassifyOut {
            score: c.score,
            level: c.level.clone(),
            requires_approval: c.requires_approval,
            decision: c.decision.as_str().into(),
            reasons: c.reasons.clone(),
            commands: c.commands.clone(),
        }))
    }

    /// One run's record: state, decision, evidence.
    #[tool(
        name = "show",
        description = "A run's state, decision and evidence: changes, surprise and forbidden paths, would-be actions, blocked attempts, reasons, output."
    )]
    pub async fn show(&self, p: Parameters<RunIdArgs>) -> Result<Json<RunOut>, String> {
        let b = self.backend.clone();
        let id = p.0.run_id;
        let r = blocking(move || b.run(&id)).await?;
        Ok(Json(run_out(&r)))
    }

    /// Unified text diffs of a run's changes.
    #[tool(
        name = "diff",
        description = "Unified text diffs of the files a run created or modified (from the rehearsal's content)."
    )]
    pub async fn diff(&self, p: Parameters<RunIdArgs>) -> Result<Json<DiffOut>, String> {
        let b = self.backend.clone();
        let id = p.0.run_id;
        let rid = id.clone();
        let d = blocking(move || b.diff(&rid)).await?;
        let v = serde_json::to_value(&d).map_err(|e| e.to_string())?;
        let files = v["files"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|f| FileDiffOut {
                path: f["path"].as_str().unwrap_or_default().to_string(),
                diff: f["diff"]
                    .as_str()
                    .or_else(|| f["note"].as_str())
                    .unwrap_or_default()
                    .to_string(),
            })
            .collect();
        Ok(Json(DiffOut { run_id: id, files }))
    }

    /// Runs, newest first.
    #[tool(
        name = "list_runs",
        description = "The caller's runs, newest first, optionally only those in one state."
    )]
    pub async fn list_runs(&self, p: Parameters<ListArgs>) -> Result<Json<RunList>, String> {
        let state = p.0.state.as_deref().map(parse_state).transpose()?;
        let b = self.backend.clone();
        let runs = blocking(move || b.runs(state)).await?;
        Ok(Json(RunList {
            runs: runs
                .iter()
                .map(|r| RunBrief {
                    run_id: r.run_id.clone(),
                    state: r.state.as_str().into(),
                    decision: r.verdict.as_ref().map(|v| v.decision.as_str().into()),
                    command: r.command.clone(),
                    created_at: r.created_at.clone(),
                })
                .collect(),
        }))
    }

    /// Wait for a run to change state (a verdict, or a person's approval).
    #[tool(
        name = "wait",
        description = "Wait (up to timeout_s, default 60, at most 600) until a run leaves `state` (default: until it is no longer queued, running or awaiting approval), then return it."
    )]
    pub async fn wait(&self, p: Parameters<WaitArgs>) -> Result<Json<RunOut>, String> {
        let a = p.0;
        let from = a.state.as_deref().map(parse_state).transpose()?;
        let limit = Duration::from_secs(a.timeout_s.unwrap_or(60).min(600));
        let start = Instant::now();
        loop {
            let b = self.backend.clone();
            let id = a.run_id.clone();
            let r = blocking(move || b.run(&id)).await?;
            let waiting = match from {
                Some(s) => r.state == s,
                None => matches!(
                    r.state,
                    RunState::Queued | RunState::Running | RunState::AwaitingApproval
                ),
            };
            if !waiting || start.elapsed() >= limit {
                return Ok(Json(run_out(&r)));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Apply a run's reviewed change set to the real workspace.
    #[tool(
        name = "promote",
        description = "Apply exactly a run's reviewed change set to the real workspace, with a receipt in the journal. Only for a run whose decision is promote, or that a person approved; this tool never approves anything."
    )]
    pub async fn promote(&self, p: Parameters<RunIdArgs>) -> Result<Json<RunOut>, String> {
        let b = self.backend.clone();
        let id = p.0.run_id;
        let r = blocking(move || b.promote(&id, None, false)).await?;
        Ok(Json(run_out(&r)))
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "dryrun",
    instructions = "dryrun rehearses shell commands in a sandbox before they touch the workspace. Call execute with the command and its intent (expected_writes, forbidden_paths); read the decision; promote a run whose decision is promote. Runs that need approval wait for a person; you cannot approve them."
)]
impl ServerHandler for DryrunMcp {}

/// `dryrun mcp`: serve on stdin/stdout until the client goes away.
pub fn run_mcp(target: Target) -> i32 {
    let backend = match Backend::connect(&target) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("dryrun mcp: {e}");
            return 1;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dryrun mcp: {e}");
            return 1;
        }
    };
    let r = rt.block_on(async move {
        let service = DryrunMcp::new(backend)
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| e.to_string())?;
        service.waiting().await.map_err(|e| e.to_string())?;
        Ok::<(), String>(())
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dryrun mcp: {e}");
            1
        }
    }
}
