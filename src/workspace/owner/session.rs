//! The facades callers use: an [`OwnerSession`] before a workspace is
//! pinned, a [`Workspace`] after, each in-process or through the agent.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::client::{AgentIo, unexpected};
use super::creds::Creds;
use super::local::{read_here, resolve_here};
use super::protocol::{Reply, Request, StreamReader, send_stream};
use super::view::ClientView;
use super::{AccessError, Resolved};
use crate::workspace::apply::{ApplyError, Backup, Identity, LocalWorkspace, State};

/// Host-side file access acting as one user, before (or without) a pinned
/// workspace: resolving a `working_dir`, reading a workspace file.
pub struct OwnerSession {
    creds: Creds,
    agent: Option<Mutex<AgentIo>>,
    /// The client's view it acts in (a container's workspace), if any.
    view: Option<Arc<ClientView>>,
}

impl OwnerSession {
    pub fn start(creds: &Creds) -> Result<OwnerSession, AccessError> {
        OwnerSession::start_in(creds, None)
    }

    /// A session acting as `creds` in `view` (a client's mount namespace and
    /// root; `None`: the host's): always through an agent there.
    pub(crate) fn start_in(
        creds: &Creds,
        view: Option<Arc<ClientView>>,
    ) -> Result<OwnerSession, AccessError> {
        if let Some(v) = &view {
            if !nix::unistd::geteuid().is_root() {
                return Err(AccessError::Agent {
                    uid: creds.uid,
                    message: "only a root daemon reaches a workspace in a client's mount namespace"
                        .into(),
                });
            }
            let agent = AgentIo::spawn_in(creds, Some(v))?;
            return Ok(OwnerSession {
                creds: creds.clone(),
                agent: Some(Mutex::new(agent)),
                view,
            });
        }
        let agent = if creds.is_this_process() {
            None
        } else if nix::unistd::geteuid().is_root() {
            Some(Mutex::new(AgentIo::spawn(creds)?))
        } else {
            return Err(AccessError::Agent {
                uid: creds.uid,
                message: format!(
                    "this process (uid {}) cannot act as another user",
                    nix::unistd::geteuid()
                ),
            });
        };
        Ok(OwnerSession {
            creds: creds.clone(),
            agent,
            view: None,
        })
    }

    /// [`OwnerSession::for_owner`] for the workspace at `path`: in the
    /// client's view it was resolved in, when it is a client's.
    pub fn for_owner_at(identity: &Identity, path: &Path) -> Result<OwnerSession, AccessError> {
        OwnerSession::start_in(
            &Creds::of_owner(identity.uid, identity.gid),
            super::view::find(path, identity),
        )
    }

    /// A session acting as the owner of the workspace `identity` describes
    /// (its uid and that user's groups; see [`Creds::of_owner`]).
    pub fn for_owner(identity: &Identity) -> Result<OwnerSession, AccessError> {
        OwnerSession::start(&Creds::of_owner(identity.uid, identity.gid))
    }

    /// [`OwnerSession::for_owner`], taking `session` itself when it already
    /// acts with exactly the owner's credentials (same uid, gid and groups:
    /// a requester submitting in its own workspace), so that one agent
    /// serves both. The agent keeps nothing between these requests, and its
    /// answers are checked the same way whoever asked first.
    pub fn for_owner_from(
        identity: &Identity,
        mut session: OwnerSession,
    ) -> Result<OwnerSession, AccessError> {
        let owner = Creds::of_owner(identity.uid, identity.gid);
        if session.creds == owner {
            return Ok(session);
        }
        let view = session.view.take();
        drop(session);
        OwnerSession::start_in(&owner, view)
    }

    /// A session that only reads, as the owner, the workspace `identity`
    /// describes: `session` itself when it already acts in this process
    /// with the owner's uid (it reads in-process either way, so the owner's
    /// groups are never looked up in the user database), else
    /// [`OwnerSession::for_owner`]. Not for work that uses the owner's
    /// groups ([`OwnerSession::creds`]): that is [`OwnerSession::for_owner_from`].
    pub fn reader_for_owner(
        identity: &Identity,
        session: OwnerSession,
    ) -> Result<OwnerSession, AccessError> {
        if session.agent.is_none() && session.view.is_none() && session.creds.uid == identity.uid {
            return Ok(session);
        }
        OwnerSession::for_owner(identity)
    }

    pub fn creds(&self) -> &Creds {
        &self.creds
    }

    /// Resolve a `working_dir` with this user's rights.
    pub fn resolve(&self, path: &Path) -> Result<Resolved, AccessError> {
        match &self.agent {
            None => resolve_here(path),
            Some(a) => {
                let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
                match a.call(&Request::Resolve {
                    path: path.to_path_buf(),
                })? {
                    Reply::Resolved { resolved } => Ok(resolved),
                    Reply::AccessError { error } => Err(error),
                    r => Err(unexpected(a.uid, r)),
                }
            }
        }
    }

    /// Read a regular file below a pinned workspace (`None`: absent).
    pub fn read_file(
        &self,
        workspace: &Path,
        identity: &Identity,
        rel: &[u8],
        max: u64,
    ) -> Result<Option<Vec<u8>>, AccessError> {
        let root_err = |e: ApplyError| AccessError::Other {
            path: workspace.display().to_string(),
            message: e.to_string(),
        };
        match &self.agent {
            None => {
                let ws = LocalWorkspace::open(workspace, identity, max).map_err(root_err)?;
                read_here(&ws, rel, max)
            }
            Some(a) => {
                let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
                match a.call(&Request::Open {
                    path: workspace.to_path_buf(),
                    identity: *identity,
                    max_file: max,
                })? {
                    Reply::Ok => {}
                    Reply::ApplyError { path, message } => {
                        return Err(AccessError::Other { path, message });
                    }
                    r => return Err(unexpected(a.uid, r)),
                }
                match a.call(&Request::Read {
                    rel_hex: hex::encode(rel),
                    max,
                })? {
                    Reply::Absent => Ok(None),
                    Reply::AccessError { error } => Err(error),
                    Reply::Data => {
                        let uid = a.uid;
                        let mut out = Vec::new();
                        let mut s = StreamReader::new(&mut a.from);
                        (&mut s).take(max + 1).read_to_end(&mut out).map_err(|e| {
                            AccessError::Agent {
                                uid,
                                message: e.to_string(),
                            }
                        })?;
                        if out.len() as u64 > max {
                            // The agent broke the cap: it is not to be trusted.
                            return Err(AccessError::Agent {
                                uid,
                                message: "sent more than asked for".into(),
                            });
                        }
                        s.drain().map_err(|e| a.broken(e))?;
                        Ok(Some(out))
                    }
                    r => Err(unexpected(a.uid, r)),
                }
            }
        }
    }
}

impl OwnerSession {
    /// The targets of the symbolic links among `rels` below a pinned
    /// workspace, in order: `None` for a path that is absent or not a link
    /// (or below a link: no link is followed to get there).
    pub fn symlink_targets(
        &self,
        workspace: &Path,
        identity: &Identity,
        rels: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, AccessError> {
        let target = |b: Backup| b.symlink_target_hex.and_then(|h| hex::decode(h).ok());
        match &self.agent {
            None => {
                let ws = LocalWorkspace::open(workspace, identity, 0).map_err(|e| {
                    AccessError::Other {
                        path: workspace.display().to_string(),
                        message: e.to_string(),
                    }
                })?;
                Ok(rels
                    .iter()
                    .map(|r| ws.backup_symlink(r).ok().and_then(target))
                    .collect())
            }
            Some(a) => {
                let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
                match a.call(&Request::Open {
                    path: workspace.to_path_buf(),
                    identity: *identity,
                    max_file: 0,
                })? {
                    Reply::Ok => {}
                    Reply::ApplyError { path, message } => {
                        return Err(AccessError::Other { path, message });
                    }
                    r => return Err(unexpected(a.uid, r)),
                }
                let mut out = Vec::with_capacity(rels.len());
                for r in rels {
                    out.push(
                        match a.call(&Request::BackupSymlink {
                            rel_hex: hex::encode(r),
                        })? {
                            Reply::Backup { backup } => target(backup),
                            Reply::ApplyError { .. } => None,
                            r => return Err(unexpected(a.uid, r)),
                        },
                    );
                }
                Ok(out)
            }
        }
    }
}

/// The real workspace, opened once, acting as its owner: the live lane's
/// every read and write goes through this.
pub(crate) enum Workspace {
    Local(LocalWorkspace),
    Agent {
        io: Mutex<AgentIo>,
        owner: (u32, u32),
    },
}

/// The owner's agent's error: about one path, or whole (already naming
/// the workspace it is about).
pub(super) fn apply_err_from(path: String, message: String) -> ApplyError {
    if path.is_empty() {
        return ApplyError::Agent(message);
    }
    ApplyError::Path { path, message }
}

impl Workspace {
    /// Open the workspace as the owner recorded in `expect` (with that
    /// user's groups), checking it is the directory the rehearsal pinned.
    pub(crate) fn open(
        path: &Path,
        expect: &Identity,
        max_file: u64,
    ) -> Result<Workspace, ApplyError> {
        let creds = Creds::of_owner(expect.uid, expect.gid);
        let root_err = |message: String| ApplyError::Root {
            path: path.to_path_buf(),
            message,
        };
        let view = super::view::find(path, expect);
        if view.is_none() && creds.is_this_process() {
            return LocalWorkspace::open(path, expect, max_file).map(Workspace::Local);
        }
        if !nix::unistd::geteuid().is_root() {
            return Err(root_err(format!(
                "belongs to uid {}; this process cannot act for it",
                expect.uid
            )));
        }
        let mut io =
            AgentIo::spawn_in(&creds, view.as_deref()).map_err(|e| root_err(e.to_string()))?;
        match io
            .call(&Request::Open {
                path: path.to_path_buf(),
                identity: *expect,
                max_file,
            })
            .map_err(|e| root_err(e.to_string()))?
        {
            Reply::Ok => {}
            Reply::ApplyError { path, message } => return Err(apply_err_from(path, message)),
            r => return Err(root_err(unexpected(io.uid, r).to_string())),
        }
        Ok(Workspace::Agent {
            io: Mutex::new(io),
            owner: (expect.uid, expect.gid),
        })
    }

    pub(crate) fn owner(&self) -> (u32, u32) {
        match self {
            Workspace::Local(w) => w.owner(),
            Workspace::Agent { owner, .. } => *owner,
        }
    }

    /// One request whose answer is `Ok` or an error.
    fn simple(&self, rel: &[u8], req: Request) -> Result<Reply, ApplyError> {
        let Workspace::Agent { io, .. } = self else {
            unreachable!("only called for the agent")
        };
        let mut io = io.lock().unwrap_or_else(|p| p.into_inner());
        let shown = crate::workspace::paths::escape_for_humans(rel);
        match io
            .call(&req)
            .map_err(|e| apply_err_from(shown.clone(), e.to_string()))?
        {
            Reply::ApplyError { path, message } => Err(apply_err_from(path, message)),
            Reply::AccessError { error } => Err(apply_err_from(shown, error.to_string())),
            r => Ok(r),
        }
    }

    fn expect_ok(&self, rel: &[u8], req: Request) -> Result<(), ApplyError> {
        match self.simple(rel, req)? {
            Reply::Ok => Ok(()),
            r => Err(apply_err_from(
                crate::workspace::paths::escape_for_humans(rel),
                unexpected(0, r).to_string(),
            )),
        }
    }

    /// What is at `rel` now (never following a final symlink).
    pub(crate) fn state(&self, rel: &[u8]) -> Result<State, ApplyError> {
        match self {
            Workspace::Local(w) => w.state(rel),
            Workspace::Agent { .. } => match self.simple(
                rel,
                Request::State {
                    rel_hex: hex::encode(rel),
                },
            )? {
                Reply::State { state } => Ok(state),
                r => Err(apply_err_from(
                    crate::workspace::paths::escape_for_humans(rel),
                    unexpected(0, r).to_string(),
                )),
            },
        }
    }

    /// Copy the regular file at `rel` into `dest` (this process's file),
    /// returning its hash (computed here, over what was written), mode and
    /// owner.
    pub(crate) fn backup_file(&self, rel: &[u8], dest: &Path) -> Result<Backup, ApplyError> {
        let Workspace::Agent { io, .. } = self else {
            let Workspace::Local(w) = self else {
                unreachable!()
            };
            return w.backup_file(rel, dest);
        };
        let shown = crate::workspace::paths::escape_for_humans(rel);
        let mut io = io.lock().unwrap_or_else(|p| p.into_inner());
        match io
            .call(&Request::BackupFile {
                rel_hex: hex::encode(rel),
            })
            .map_err(|e| apply_err_from(shown.clone(), e.to_string()))?
        {
            Reply::Data => {}
            Reply::ApplyError { path, message } => return Err(apply_err_from(path, message)),
            r => return Err(apply_err_from(shown, unexpected(io.uid, r).to_string())),
        }
        let hash = {
            let mut stream = StreamReader::new(&mut io.from);
            crate::workspace::apply::copy_to_backup(&mut stream, dest)?
        };
        let mut b = match io
            .reply()
            .map_err(|e| apply_err_from(shown.clone(), e.to_string()))?
        {
            Reply::Backup { backup } => backup,
            Reply::ApplyError { path, message } => return Err(apply_err_from(path, message)),
            r => return Err(apply_err_from(shown, unexpected(io.uid, r).to_string())),
        };
        b.hash = hash;
        b.file = crate::workspace::apply::backup_file_name(dest);
        Ok(b)
    }

    pub(crate) fn backup_symlink(&self, rel: &[u8]) -> Result<Backup, ApplyError> {
        match self {
            Workspace::Local(w) => w.backup_symlink(rel),
            Workspace::Agent { .. } => match self.simple(
                rel,
                Request::BackupSymlink {
                    rel_hex: hex::encode(rel),
                },
            )? {
                Reply::Backup { backup } => Ok(backup),
                r => Err(apply_err_from(
                    crate::workspace::paths::escape_for_humans(rel),
                    unexpected(0, r).to_string(),
                )),
            },
        }
    }

    /// Write `content` (which must hash to `hash`) atomically at `rel`.
    pub(crate) fn write_file(
        &self,
        rel: &[u8],
        content: &mut dyn Read,
        hash: &str,
        mode: u32,
        owner: (u32, u32),
        tmp_tag: &str,
    ) -> Result<(), ApplyError> {
        let Workspace::Agent { io, .. } = self else {
            let Workspace::Local(w) = self else {
                unreachable!()
            };
            return w.write_file(rel, content, hash, mode, owner, tmp_tag);
        };
        let shown = crate::workspace::paths::escape_for_humans(rel);
        let mut io = io.lock().unwrap_or_else(|p| p.into_inner());
        io.send(&Request::WriteFile {
            rel_hex: hex::encode(rel),
            hash: hash.to_string(),
            mode,
            tag: tmp_tag.to_string(),
        })
        .map_err(|e| apply_err_from(shown.clone(), e.to_string()))?;
        let sent = send_stream(&mut io.to, content).and_then(|_| io.to.flush());
        let reply = io.reply();
        sent.map_err(|e| apply_err_from(shown.clone(), format!("sending its content: {e}")))?;
        match reply.map_err(|e| apply_err_from(shown.clone(), e.to_string()))? {
            Reply::Ok => Ok(()),
            Reply::ApplyError { path, message } => Err(apply_err_from(path, message)),
            r => Err(apply_err_from(shown, unexpected(io.uid, r).to_string())),
        }
    }

    pub(crate) fn make_dir(
        &self,
        rel: &[u8],
        mode: u32,
        owner: (u32, u32),
    ) -> Result<(), ApplyError> {
        match self {
            Workspace::Local(w) => w.make_dir(rel, mode, owner),
            Workspace::Agent { .. } => self.expect_ok(
                rel,
                Request::MakeDir {
                    rel_hex: hex::encode(rel),
                    mode,
                },
            ),
        }
    }

    pub(crate) fn symlink(
        &self,
        rel: &[u8],
        target: &[u8],
        owner: (u32, u32),
        tmp_tag: &str,
    ) -> Result<(), ApplyError> {
        match self {
            Workspace::Local(w) => w.symlink(rel, target, owner, tmp_tag),
            Workspace::Agent { .. } => self.expect_ok(
                rel,
                Request::Symlink {
                    rel_hex: hex::encode(rel),
                    target_hex: hex::encode(target),
                    tag: tmp_tag.to_string(),
                },
            ),
        }
    }

    pub(crate) fn remove(&self, rel: &[u8]) -> Result<(), ApplyError> {
        match self {
            Workspace::Local(w) => w.remove(rel),
            Workspace::Agent { .. } => self.expect_ok(
                rel,
                Request::Remove {
                    rel_hex: hex::encode(rel),
                },
            ),
        }
    }

    /// Make every step taken so far durable: the steps themselves do not
    /// fsync as they go; this syncs what they changed, each once (or the
    /// file system, for a change set of thousands: `durable.rs`). The live
    /// lane calls it once before it journals a receipt, and after an undo.
    pub(crate) fn sync(&self) -> Result<(), ApplyError> {
        match self {
            Workspace::Local(w) => w.sync().map(|_| ()),
            Workspace::Agent { .. } => self.expect_ok(b".", Request::Sync),
        }
    }

    pub(crate) fn chmod(&self, rel: &[u8], mode: u32) -> Result<(), ApplyError> {
        match self {
            Workspace::Local(w) => w.chmod(rel, mode),
            Workspace::Agent { .. } => self.expect_ok(
                rel,
                Request::Chmod {
                    rel_hex: hex::encode(rel),
                    mode,
                },
            ),
        }
    }

    pub(crate) fn set_mtime(&self, rel: &[u8], mtime_ns: i64) -> Result<(), ApplyError> {
        match self {
            Workspace::Local(w) => w.set_mtime(rel, mtime_ns),
            Workspace::Agent { .. } => self.expect_ok(
                rel,
                Request::SetTime {
                    rel_hex: hex::encode(rel),
                    mtime_ns,
                },
            ),
        }
    }
}
