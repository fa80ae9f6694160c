//! The one client function: a typed request goes to a daemon over its
//! socket, or to an engine in this process. The CLI and the agent doors
//! (hooks, MCP) reach dryrun only through [`Door::send`].

use std::path::{Path, PathBuf};

use crate::engine::{Engine, EngineError, EngineOptions};

use super::serve::{Caller, Serve};
use super::transport::{Client, ClientError};

/// Where requests are carried out.
pub enum Door {
    /// A daemon, over its Unix socket (the caller is who the socket says).
    Daemon(Client),
    /// An engine in this process, on a state directory of the caller's.
    Local(Box<LocalEngine>),
}

/// How the in-process engine is opened.
#[derive(Debug, Clone)]
pub struct LocalEngine {
    pub state_dir: PathBuf,
    pub options: EngineOptions,
}

/// A request that failed: the daemon's answer, or the engine's error.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error(transparent)]
    Daemon(#[from] ClientError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl DoorError {
    /// The caller's mistake (wrong id, state, input, permission) rather than
    /// a failure of dryrun.
    pub fn is_invalid_input(&self) -> bool {
        match self {
            DoorError::Daemon(e) => e.is_invalid_input(),
            DoorError::Engine(e) => e.is_invalid_input(),
        }
    }

    /// Approvals in an agent host's prompt are off on this engine.
    pub fn is_host_prompt_off(&self) -> bool {
        match self {
            DoorError::Daemon(ClientError::Api { code, .. }) => {
                code == super::transport::HOST_PROMPT_OFF
            }
            DoorError::Engine(e) => matches!(e, EngineError::HostPromptOff { .. }),
            _ => false,
        }
    }

    /// Refused because of the run's or workspace's state (drift, a state
    /// that does not allow it): `promote` and `rollback` exit 4 on these.
    pub fn is_refusal(&self) -> bool {
        match self {
            DoorError::Daemon(ClientError::Api { status, .. }) => *status == 409,
            DoorError::Engine(e) => e.is_refusal(),
            _ => false,
        }
    }
}

impl Door {
    /// `local` → in-process; an explicit socket → that daemon (an error when
    /// it does not answer); else the default socket when a daemon answers
    /// on it; else in-process.
    pub fn choose(socket: Option<&Path>, local: bool, engine: LocalEngine) -> Door {
        Door::choose_with(socket, local, || engine)
    }

    /// [`Door::choose`], the local engine made only when it is chosen (its
    /// options read this machine and this process's environment: work a
    /// daemon's client never needs).
    pub fn choose_with(
        socket: Option<&Path>,
        local: bool,
        engine: impl FnOnce() -> LocalEngine,
    ) -> Door {
        if local {
            return Door::Local(Box::new(engine()));
        }
        if let Some(s) = socket {
            return Door::Daemon(Client::new(s));
        }
        let mut candidates = Vec::new();
        if !nix::unistd::geteuid().is_root()
            && let Some(u) = super::transport::user_socket()
        {
            candidates.push(u);
        }
        candidates.push(PathBuf::from(super::transport::SYSTEM_SOCKET));
        for c in candidates {
            if c.exists() {
                if Client::reachable(&c) {
                    return Door::Daemon(Client::new(&c));
                }
                tracing::info!(
                    "{} exists but nobody answers; running in-process",
                    c.display()
                );
            }
        }
        Door::Local(Box::new(engine()))
    }

    pub fn is_daemon(&self) -> bool {
        matches!(self, Door::Daemon(_))
    }

    /// Carry out `op`: its reply, or why not.
    pub fn send<O: Serve>(&self, op: &O) -> Result<O::Reply, DoorError> {
        self.send_as(op, &Caller::local())
    }

    /// [`Door::send`], in-process as `caller` (a local review that proved
    /// a person at the terminal: `ReviewerAuth::LocalPresence`); a daemon
    /// knows its caller from the socket and ignores it.
    pub fn send_as<O: Serve>(&self, op: &O, caller: &Caller) -> Result<O::Reply, DoorError> {
        match self {
            Door::Daemon(c) => Ok(c.send(op)?),
            Door::Local(l) => {
                act_as_state_dir_owner(&l.state_dir)
                    .map_err(|source| EngineError::storage(&l.state_dir, source))?;
                if let Some(r) = op.serve_without_engine(&l.state_dir) {
                    return Ok(r?);
                }
                crate::phase("engine: open");
                let engine = Engine::open(&l.state_dir, l.options.clone())?;
                crate::phase("engine: opened");
                Ok(op.serve(&engine, caller)?)
            }
        }
    }
}

/// Root on a state directory somebody else controls (`sudo dryrun
/// approve`, a reviewer's `dryrun --state-dir ~user/... show`) reads and
/// writes it with that user's filesystem identity and no supplementary
/// groups, in this thread, before the engine opens it: the engine's
/// start-up recovery undoes in-flight promotions named by files there
/// (a forged plan naming a root-owned directory would have root restore
/// "backups" into it), and a link planted there (or the directory itself
/// replaced by a link to `/etc`) would turn root's writes and `chmod`
/// onto the host. The controlling user is the first owner other than
/// root along the path, each component taken as it is (not followed):
/// whoever can replace a component decides what lies below it.
pub fn act_as_state_dir_owner(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let abs = std::path::absolute(dir)?;
    let mut prefix = PathBuf::new();
    let mut owner = None;
    for c in abs.components() {
        prefix.push(c);
        match std::fs::symlink_metadata(&prefix) {
            Ok(m) if m.uid() != 0 => {
                owner = Some((m.uid(), m.gid()));
                break;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(e),
        }
    }
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    let (uid, gid) = (
        nix::unistd::Uid::from_raw(uid),
        nix::unistd::Gid::from_raw(gid),
    );
    nix::unistd::setgroups(&[]).map_err(std::io::Error::from)?;
    nix::unistd::setfsgid(gid);
    nix::unistd::setfsuid(uid);
    // setfsuid reports no error: the second call answers the current value.
    if nix::unistd::setfsuid(uid) != uid || nix::unistd::setfsgid(gid) != gid {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("could not take the filesystem identity of its owner (uid {uid})"),
        ));
    }
    Ok(())
}
