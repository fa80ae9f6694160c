//! Agent-facing doors over the same requests as the CLI: hooks for agent
//! hosts (Claude Code, Codex), the MCP server, and what `dryrun promote`
//! does for a hook's rewritten command.
//!
//! Everything here reaches the engine through [`Backend`], built by
//! [`Backend::connect`]: the one place that knows whether a daemon (over
//! the CLI's client) or the in-process engine answers.

pub mod hook;
pub mod mcp;
pub mod promote;

use std::path::{Path, PathBuf};

use crate::engine::{Engine, EngineError, EngineOptions, ReviewerAuth};
use crate::envelope::Envelope;
use crate::journal::Actor;
use crate::record::{RunRecord, RunState};

/// What a door asked for went wrong. `Invalid` is the caller's mistake;
/// `Refused` a request the engine will not carry out (wrong state,
/// drift, not allowed); `Failed` anything else.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

impl From<EngineError> for DoorError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Drift(_) | EngineError::Conflict(_) | EngineError::Forbidden(_) => {
                DoorError::Refused(e.to_string())
            }
            e if e.is_invalid_input() => DoorError::Invalid(e.to_string()),
            e => DoorError::Failed(e.to_string()),
        }
    }
}

impl From<crate::cli::client::ClientError> for DoorError {
    fn from(e: crate::cli::client::ClientError) -> Self {
        use crate::cli::client::ClientError;
        match &e {
            ClientError::Api {
                status: 403 | 409, ..
            } => DoorError::Refused(e.to_string()),
            e if e.is_invalid_input() => DoorError::Invalid(e.to_string()),
            _ => DoorError::Failed(e.to_string()),
        }
    }
}

/// Where a door's requests go: the daemon at a socket, or the engine in
/// this process on a state directory. Chosen by the CLI's rules
/// (`--local`, `--socket`/`DRYRUN_SOCKET`, the default socket).
pub enum Target {
    Daemon(PathBuf),
    Local(PathBuf),
}

/// The doors' one way to the engine. Repoint [`Backend::connect`] (or the
/// two implementations below it) to change how every door is served.
pub enum Backend {
    Daemon(crate::cli::client::Client),
    Local(Box<Engine>),
}

impl Backend {
    pub fn connect(target: &Target) -> Result<Backend, DoorError> {
        Ok(match target {
            Target::Daemon(s) => Backend::Daemon(crate::cli::client::Client::new(s)),
            Target::Local(dir) => {
                Backend::Local(Box::new(Engine::open(dir, EngineOptions::default())?))
            }
        })
    }

    /// The global options that make another `dryrun` process reach the
    /// same place (for a hook's rewritten command).
    pub fn global_args(target: &Target) -> Vec<String> {
        match target {
            Target::Daemon(s) => vec!["--socket".into(), s.display().to_string()],
            Target::Local(d) => vec![
                "--local".into(),
                "--state-dir".into(),
                d.display().to_string(),
            ],
        }
    }

    /// Validate the envelope (with this process's rights, like `dryrun
    /// execute`), rehearse it and wait for the verdict.
    pub fn execute(&self, envelope: &Envelope, workspace: &Path) -> Result<RunRecord, DoorError> {
        let access = crate::workspace::owner::OwnerSession::start(
            &crate::workspace::owner::Creds::current(),
        )
        .map_err(|e| DoorError::Failed(e.to_string()))?;
        let spec = envelope
            .clone()
            .validate(Some(workspace), &access)
            .map_err(|e| DoorError::Invalid(e.to_string()))?;
        match self {
            Backend::Daemon(c) => {
                let body = serde_json::to_vec(&spec.envelope_for_submission()).expect("serializes");
                Ok(c.call(
                    "POST",
                    &format!("{}?wait=true", crate::daemon::routes::RUNS),
                    Some(body),
                )?)
            }
            Backend::Local(e) => Ok(e.execute(&spec, &Actor::local())?),
        }
    }

    pub fn run(&self, run_id: &str) -> Result<RunRecord, DoorError> {
        match self {
            Backend::Daemon(c) => Ok(c.call("GET", &crate::daemon::routes::run(run_id), None)?),
            Backend::Local(e) => Ok(e.get(run_id)?),
        }
    }

    pub fn runs(&self, state: Option<RunState>) -> Result<Vec<RunRecord>, DoorError> {
        match self {
            Backend::Daemon(c) => {
                let path = match state {
                    Some(s) => format!("{}?state={}", crate::daemon::routes::RUNS, s.as_str()),
                    None => crate::daemon::routes::RUNS.into(),
                };
                Ok(c.call::<crate::daemon::RunList>("GET", &path, None)?.runs)
            }
            Backend::Local(e) => Ok(e.list(state)?),
        }
    }

    pub fn diff(&self, run_id: &str) -> Result<crate::workspace::textdiff::RunDiff, DoorError> {
        match self {
            Backend::Daemon(c) => {
                Ok(c.call("GET", &crate::daemon::routes::run_diff(run_id), None)?)
            }
            Backend::Local(e) => {
                let r = e.get(run_id)?;
                Ok(crate::workspace::textdiff::run_diff(e, &r))
            }
        }
    }

    /// Issue the single-use token with which the host's prompt approves
    /// `run_id` (see `engine::host_prompt`).
    pub fn grant_host_prompt(&self, run_id: &str, host: &str) -> Result<String, DoorError> {
        match self {
            Backend::Daemon(c) => {
                let body = serde_json::to_vec(&serde_json::json!({"host": host})).expect("json");
                let g: crate::daemon::HostPromptGrant = c.call(
                    "POST",
                    &crate::daemon::routes::run_host_prompt(run_id),
                    Some(body),
                )?;
                Ok(g.token)
            }
            Backend::Local(e) => Ok(e.grant_host_prompt(run_id, &Actor::local(), host)?),
        }
    }

    /// Promote `run_id` (apply its reviewed change set). With a host-prompt
    /// token, the token's approval is recorded and consumed first.
    pub fn promote(
        &self,
        run_id: &str,
        host_prompt_token: Option<&str>,
    ) -> Result<RunRecord, DoorError> {
        match self {
            Backend::Daemon(c) => {
                let body = serde_json::to_vec(&crate::daemon::PromoteBody {
                    env: Default::default(),
                    host_prompt_token: host_prompt_token.map(str::to_string),
                })
                .expect("serializes");
                Ok(c.call(
                    "POST",
                    &crate::daemon::routes::run_promote(run_id),
                    Some(body),
                )?)
            }
            Backend::Local(e) => {
                let actor = Actor::local();
                if let Some(t) = host_prompt_token {
                    e.approve_via_host_prompt(run_id, t, &actor)?;
                }
                Ok(e.promote(
                    run_id,
                    &actor,
                    &ReviewerAuth::LocalTtyConfirmed,
                    &Default::default(),
                )?)
            }
        }
    }
}
