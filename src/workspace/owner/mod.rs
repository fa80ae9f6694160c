//! Host-side access to workspace content with the workspace owner's
//! credentials (privilege separation).
//!
//! The daemon may run as root; the files are the agent's. Every host-side
//! touch of workspace content — resolving `working_dir`, reading the
//! workspace policy, the live lane's drift checks, backups, writes and
//! rollback — goes through a [`Workspace`] (or [`OwnerSession`]) that acts
//! with the credentials of the user it is opened for:
//!
//! - when this process already is that user (a user-level daemon or CLI, or
//!   root working on root's own directory), in-process;
//! - otherwise an agent process: a fork of the resident sandbox helper
//!   where this process started one (the daemon, an in-process CLI that
//!   rehearses; see [`launch_agents_with`]), else a fresh exec of this
//!   binary (`__workspace-agent UID GID GROUPS`). Either is single-threaded
//!   with no runtime and drops to those ids before it reads a request, so
//!   it holds no capabilities, sets `no_new_privs`, dies with its parent,
//!   and then serves requests on its stdin/stdout. The kernel's own checks (mode bits, ACLs, LSMs) decide
//!   what it may read or write.
//!
//! Inside either, every path is opened fd-relative from the pinned
//! workspace with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`, regular files only, with size
//! caps, and what is hashed or returned comes from the open file that was
//! checked. Answers from the agent are untrusted input: every frame is
//! bounded and what it sends is re-hashed on this side where it matters.

mod agent;
mod client;
mod creds;
mod local;
mod protocol;
mod session;
pub(crate) mod view;

pub use agent::{run_forked_workspace_agent, run_workspace_agent};
pub(crate) use creds::Creds;
pub(crate) use session::OwnerSession;
pub(crate) use session::Workspace;

use std::path::PathBuf;

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use super::apply::Identity;

/// Hidden first argument of the agent process.
pub const AGENT_ARG: &str = "__workspace-agent";

/// An agent started by a launcher (a fork of the resident sandbox helper):
/// its input and output, and a handle that kills it.
pub(crate) struct LaunchedAgent {
    pub input: std::os::fd::OwnedFd,
    pub output: std::os::fd::OwnedFd,
    pub handle: Box<dyn AgentHandle>,
}

/// What the root side needs of a launched agent besides its pipes.
pub(crate) trait AgentHandle: Send {
    /// Kill it (the very process: never one that reused its pid).
    fn kill(&mut self);
}

/// Starts an agent for `UID GID G1,G2,...` ([`agent::ids_args`] joined by
/// spaces), in a client's view when one is given, or `None`.
pub(crate) type AgentLauncher = fn(&str, Option<&view::ClientView>) -> Option<LaunchedAgent>;

static LAUNCHER: std::sync::OnceLock<AgentLauncher> = std::sync::OnceLock::new();

/// From now on, agents are started by `launcher` (the engine's fork of its
/// resident sandbox helper), and by an exec of this binary when it gives
/// none. Set once per process, by the one that started the resident.
pub(crate) fn launch_agents_with(launcher: AgentLauncher) {
    let _ = LAUNCHER.set(launcher);
}

fn launch(creds: &Creds, view: Option<&view::ClientView>) -> Option<LaunchedAgent> {
    let launcher = LAUNCHER.get()?;
    let mut arg = agent::ids_args(creds).join(" ");
    if view.is_some() {
        arg.push_str(agent::IN_VIEW);
    }
    launcher(&arg, view)
}

/// Workspace agents this process has started, forked or executed.
static AGENTS_STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many workspace agents this process has started (the daemon's
/// `/metrics`: each costs a process per run).
pub(crate) fn agents_started() -> u64 {
    AGENTS_STARTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Largest JSON frame either side accepts.
const MAX_JSON_FRAME: usize = 1 << 20;
/// Largest data chunk either side sends or accepts.
const CHUNK: usize = 64 * 1024;

/// Why host-side access to a workspace failed. Messages name paths (as the
/// requester gave them, or relative to the workspace) and never quote
/// content.
#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AccessError {
    #[error("{path}: no such file or directory")]
    NotFound { path: String },
    #[error("{path}: permission denied for uid {uid}")]
    Denied { path: String, uid: u32 },
    #[error("{path}: is a symlink, or a directory on its path is; not followed")]
    Symlink { path: String },
    #[error("{path}: is not a regular file")]
    NotRegular { path: String },
    #[error("{path}: is larger than {max} bytes")]
    TooLarge { path: String, max: u64 },
    #[error("{path}: {message}")]
    Other { path: String, message: String },
    #[error("workspace access as uid {uid}: {message}")]
    Agent { uid: u32, message: String },
}

impl AccessError {
    fn from_errno(path: &str, uid: u32, e: Errno) -> AccessError {
        let path = path.to_string();
        match e {
            Errno::ENOENT => AccessError::NotFound { path },
            Errno::EACCES | Errno::EPERM => AccessError::Denied { path, uid },
            Errno::ELOOP | Errno::EXDEV => AccessError::Symlink { path },
            e => AccessError::Other {
                path,
                message: e.desc().to_string(),
            },
        }
    }
}

/// A workspace directory as resolved for a requester.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// Absolute, symlinks resolved (as the requester sees them).
    pub canonical: PathBuf,
    pub identity: Identity,
}
