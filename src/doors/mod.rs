//! Agent-facing doors over the same requests as the CLI: hooks for agent
//! hosts (Claude Code, Codex), the MCP server, and what `dryrun promote`
//! does for a hook's rewritten command.
//!
//! Everything here reaches the engine through [`Backend`], built by
//! [`Backend::connect`]: typed requests sent through `Door::send`, the one
//! client function the CLI uses too.

pub mod classify;
pub mod hook;
pub mod mcp;
pub mod mcp_http;
pub mod promote;

use std::path::{Path, PathBuf};

use crate::engine::EngineOptions;
use crate::envelope::Envelope;
use crate::record::{RunRecord, RunState};
use crate::request::door::{Door, LocalEngine};
use crate::request::{self, RunId};

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

impl From<request::door::DoorError> for DoorError {
    fn from(e: request::door::DoorError) -> Self {
        use crate::request::transport::ClientError;
        let not_allowed = matches!(
            &e,
            request::door::DoorError::Engine(crate::engine::EngineError::NotAllowed { .. })
                | request::door::DoorError::Daemon(ClientError::Api { status: 403, .. })
        );
        if e.is_refusal() || not_allowed {
            DoorError::Refused(e.to_string())
        } else if e.is_invalid_input() {
            DoorError::Invalid(e.to_string())
        } else {
            DoorError::Failed(e.to_string())
        }
    }
}

impl From<request::RequestError> for DoorError {
    fn from(e: request::RequestError) -> Self {
        DoorError::Invalid(e.to_string())
    }
}

/// Where a door's requests go: the daemon at a socket, or the engine in
/// this process on a state directory. Chosen by the CLI's rules
/// (`--local`, `--socket`/`DRYRUN_SOCKET`, the default socket).
#[derive(Debug, Clone)]
pub enum Target {
    Daemon(PathBuf),
    Local(PathBuf),
}

impl Target {
    /// Where this process keeps the system policy's parsed cache (what a
    /// hook reads of the policy before it submits): the in-process
    /// engine's state directory, or (over a daemon, which keeps its own)
    /// the caller's `$XDG_CACHE_HOME/dryrun` (`~/.cache/dryrun`), made
    /// private if missing. The cache is trusted only as the engine trusts
    /// it (`policy::cache`: owned by this uid, written by nobody else);
    /// without one the policy is parsed from its YAML, about 10 ms.
    pub fn policy_cache_dir(&self) -> Option<PathBuf> {
        match self {
            Target::Local(d) => Some(d.clone()),
            Target::Daemon(_) => {
                use std::os::unix::fs::DirBuilderExt;
                let base = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .or_else(|| {
                        std::env::var_os("HOME")
                            .map(PathBuf::from)
                            .filter(|p| p.is_absolute())
                            .map(|h| h.join(".cache"))
                    })?;
                let dir = base.join("dryrun");
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir);
                dir.is_dir().then_some(dir)
            }
        }
    }
}

/// The doors' one way to the engine: the verbs they use, each one typed
/// request sent through [`Door::send`], the same client function the CLI
/// uses.
pub struct Backend {
    door: Door,
    target: Target,
}

impl Backend {
    pub fn connect(target: &Target) -> Result<Backend, DoorError> {
        let door = match target {
            Target::Daemon(s) => Door::Daemon(crate::request::transport::Client::new(s)),
            Target::Local(dir) => Door::Local(Box::new(LocalEngine {
                state_dir: dir.clone(),
                options: EngineOptions::default(),
            })),
        };
        Ok(Backend {
            door,
            target: target.clone(),
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

    /// Rehearse the envelope in `workspace` (unless it names its own) and
    /// wait for the verdict. The command's environment is this process's
    /// (a hook's or an MCP server's: the agent host's, which started it),
    /// filtered by the engine, unless the envelope carries one.
    pub fn execute(&self, envelope: &Envelope, workspace: &Path) -> Result<RunRecord, DoorError> {
        let mut envelope = envelope.clone();
        if envelope.working_dir.is_none() {
            envelope.working_dir = Some(workspace.to_path_buf());
        }
        envelope
            .caller_env
            .get_or_insert_with(crate::caller_env::of_this_process);
        if envelope.caller_umask.is_none() {
            envelope.caller_umask = crate::caller_env::umask_of_this_process();
        }
        crate::phase("hook: sending");
        let reply = self.door.send(&request::Submit {
            envelope,
            wait: true,
        })?;
        reply
            .into_record()
            .ok_or_else(|| DoorError::Failed("the run was queued without a verdict".into()))
    }

    /// Classify `command` as a run in `workspace` would be, without running
    /// it ([`classify::classify_in`], with this door's policy cache).
    pub fn classify(
        &self,
        command: &str,
        workspace: Option<&Path>,
    ) -> Result<crate::classify::Classification, DoorError> {
        let cache = self.target.policy_cache_dir();
        classify::classify_in(command, workspace, cache.as_deref()).map_err(DoorError::Failed)
    }

    pub fn run(&self, run_id: &str) -> Result<RunRecord, DoorError> {
        Ok(self.door.send(&request::Show {
            id: RunId::parse(run_id)?,
            wait_s: None,
        })?)
    }

    pub fn runs(&self, state: Option<RunState>) -> Result<Vec<RunRecord>, DoorError> {
        Ok(self.door.send(&request::List { state, limit: None })?.runs)
    }

    pub fn diff(&self, run_id: &str) -> Result<crate::engine::textdiff::RunDiff, DoorError> {
        Ok(self.door.send(&request::Diff {
            id: RunId::parse(run_id)?,
        })?)
    }

    /// Issue the single-use token with which the host's prompt approves
    /// `run_id` (see `engine::host_prompt`); `None` when the engine keeps
    /// approvals with its reviewers (host-prompt approvals are off).
    pub fn grant_host_prompt(&self, run_id: &str, host: &str) -> Result<Option<String>, DoorError> {
        match self.door.send(&request::HostPrompt {
            id: RunId::parse(run_id)?,
            host: host.to_string(),
        }) {
            Ok(g) => Ok(Some(g.token)),
            Err(e) if e.is_host_prompt_off() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Promote `run_id` (apply its reviewed change set). With a host-prompt
    /// token, the token's approval is recorded and consumed first.
    /// `local_only`: a person said the run's stubbed calls will not be made.
    pub fn promote(
        &self,
        run_id: &str,
        host_prompt_token: Option<&str>,
        local_only: bool,
    ) -> Result<RunRecord, DoorError> {
        Ok(self.door.send(&request::Promote {
            id: RunId::parse(run_id)?,
            env: Default::default(),
            host_prompt_token: host_prompt_token.map(str::to_string),
            local_only,
        })?)
    }
}
