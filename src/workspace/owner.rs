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
//! - otherwise a fresh exec of this binary (`__workspace-agent UID GID
//!   GROUPS`) that drops to those ids in `main` before anything else runs
//!   (no threads, no runtime), so it holds no capabilities, sets
//!   `no_new_privs`, dies with its parent, and then serves requests on its
//!   stdin/stdout. The kernel's own checks (mode bits, ACLs, LSMs) decide
//!   what it may read or write.
//!
//! Inside either, every path is opened fd-relative from the pinned
//! workspace with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`, regular files only, with size
//! caps, and what is hashed or returned comes from the open file that was
//! checked. Answers from the agent are untrusted input: every frame is
//! bounded and what it sends is re-hashed on this side where it matters.

use std::ffi::OsStr;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{Mode, SFlag};
use serde::{Deserialize, Serialize};

use super::apply::{ApplyError, Backup, Identity, LocalWorkspace, State};

/// Hidden first argument of the agent process.
pub const AGENT_ARG: &str = "__workspace-agent";

/// Largest JSON frame either side accepts.
const MAX_JSON_FRAME: usize = 1 << 20;
/// Largest data chunk either side sends or accepts.
const CHUNK: usize = 64 * 1024;

/// The identity host-side file access acts as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Creds {
    /// A user's ids with the supplementary groups the system database gives
    /// that user (none when the uid has no entry).
    pub fn of_user(uid: u32, gid: u32) -> Creds {
        let mut groups = vec![gid];
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            && let Ok(name) = std::ffi::CString::new(u.name.as_bytes())
            && let Ok(list) = nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid))
        {
            groups = list.into_iter().map(|g| g.as_raw()).collect();
        }
        groups.sort_unstable();
        groups.dedup();
        Creds { uid, gid, groups }
    }

    /// This process's own ids.
    pub fn current() -> Creds {
        let groups = nix::unistd::getgroups()
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default();
        Creds {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            groups,
        }
    }

    /// Whether work for these credentials can run in this process without
    /// giving it more (or other) rights than the user has: this process is
    /// that user, or is root acting for root.
    fn is_this_process(&self) -> bool {
        nix::unistd::geteuid().as_raw() == self.uid
    }
}

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

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Resolve {
        path: PathBuf,
    },
    Open {
        path: PathBuf,
        identity: Identity,
        max_file: u64,
    },
    Read {
        rel_hex: String,
        max: u64,
    },
    State {
        rel_hex: String,
    },
    BackupFile {
        rel_hex: String,
    },
    BackupSymlink {
        rel_hex: String,
    },
    /// Followed by a data stream.
    WriteFile {
        rel_hex: String,
        hash: String,
        mode: u32,
        tag: String,
    },
    MakeDir {
        rel_hex: String,
        mode: u32,
    },
    Symlink {
        rel_hex: String,
        target_hex: String,
        tag: String,
    },
    Remove {
        rel_hex: String,
    },
    Chmod {
        rel_hex: String,
        mode: u32,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
enum Reply {
    Ok,
    Resolved {
        resolved: Resolved,
    },
    State {
        state: State,
    },
    Backup {
        backup: Backup,
    },
    /// A data stream follows.
    Data,
    Absent,
    AccessError {
        error: AccessError,
    },
    ApplyError {
        path: String,
        message: String,
    },
}

// ---------------------------------------------------------------------------
// Framing: [tag u8][len u32 LE][payload]; 'J' JSON, 'D' data chunk, 'E' end.

fn write_frame(w: &mut dyn Write, tag: u8, payload: &[u8]) -> std::io::Result<()> {
    w.write_all(&[tag])?;
    w.write_all(&(payload.len() as u32).to_le_bytes())?;
    w.write_all(payload)
}

fn read_frame(r: &mut dyn Read, max: usize) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the limit of {max}"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok((head[0], buf))
}

fn write_json<T: Serialize>(w: &mut dyn Write, v: &T) -> std::io::Result<()> {
    write_frame(w, b'J', &serde_json::to_vec(v).expect("serializes"))
}

fn read_json<T: for<'de> Deserialize<'de>>(r: &mut dyn Read) -> std::io::Result<T> {
    let (tag, body) = read_frame(r, MAX_JSON_FRAME)?;
    if tag != b'J' {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "expected a control frame",
        ));
    }
    serde_json::from_slice(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}

/// Copy `src` as data frames and an end frame.
fn send_stream(w: &mut dyn Write, src: &mut dyn Read) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match src.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Tell the other side the stream is broken.
                write_frame(w, b'X', b"")?;
                return Err(e);
            }
        };
        if n == 0 {
            return write_frame(w, b'E', b"");
        }
        write_frame(w, b'D', &buf[..n])?;
    }
}

/// A data stream as a reader (ends at the end frame; an abort frame is an
/// error).
struct StreamReader<'a> {
    r: &'a mut dyn Read,
    buf: Vec<u8>,
    pos: usize,
    done: bool,
}

impl<'a> StreamReader<'a> {
    fn new(r: &'a mut dyn Read) -> Self {
        StreamReader {
            r,
            buf: Vec::new(),
            pos: 0,
            done: false,
        }
    }

    /// Consume whatever is left of the stream (so the connection stays in
    /// step after an early error).
    fn drain(&mut self) -> std::io::Result<()> {
        let mut sink = [0u8; 8192];
        while self.read(&mut sink)? > 0 {}
        Ok(())
    }
}

impl Read for StreamReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.done {
                return Ok(0);
            }
            let (tag, body) = read_frame(self.r, CHUNK)?;
            match tag {
                b'D' => {
                    self.buf = body;
                    self.pos = 0;
                }
                b'E' => self.done = true,
                _ => {
                    self.done = true;
                    return Err(std::io::Error::other("the sender aborted the stream"));
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

// ---------------------------------------------------------------------------
// The operations themselves (run in-process or in the agent).

use crate::workspace::paths::beneath;

/// Resolve `path` as the calling process sees it: absolute, an existing
/// directory, not `/`; then open the canonical path from `/` refusing every
/// symlink on the way and stat what was opened.
fn resolve_here(path: &Path) -> Result<Resolved, AccessError> {
    let shown = path.display().to_string();
    let uid = nix::unistd::geteuid().as_raw();
    if !path.is_absolute() {
        return Err(AccessError::Other {
            path: shown,
            message: "is relative; give an absolute path".into(),
        });
    }
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        AccessError::from_errno(
            &shown,
            uid,
            Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })?;
    if canonical == Path::new("/") {
        return Err(AccessError::Other {
            path: shown,
            message: "the root directory cannot be a workspace; pick a project directory".into(),
        });
    }
    let slash = nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| AccessError::from_errno("/", uid, e))?;
    let rel = canonical.strip_prefix("/").unwrap_or(&canonical);
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(&slash, rel, how).map_err(|e| match e {
        Errno::ELOOP => AccessError::Other {
            path: shown.clone(),
            message: "changed while it was being resolved (a component is a symlink now)".into(),
        },
        e => AccessError::from_errno(&shown, uid, e),
    })?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| AccessError::from_errno(&shown, uid, e))?;
    if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFDIR.bits() {
        return Err(AccessError::Other {
            path: shown,
            message: "is not a directory".into(),
        });
    }
    Ok(Resolved {
        canonical,
        identity: Identity {
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            gid: st.st_gid,
        },
    })
}

/// Read a regular file below the workspace root: no symlink anywhere, no
/// fifo or device (opened non-blocking, checked on the open file), at most
/// `max` bytes. `Ok(None)` when it does not exist.
fn read_here(ws: &LocalWorkspace, rel: &[u8], max: u64) -> Result<Option<Vec<u8>>, AccessError> {
    let shown = crate::workspace::paths::escape_for_humans(rel);
    let uid = nix::unistd::geteuid().as_raw();
    let fd = match nix::fcntl::openat2(
        ws.root_fd(),
        OsStr::from_bytes(rel),
        beneath(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(AccessError::from_errno(&shown, uid, e)),
    };
    let st = nix::sys::stat::fstat(&fd).map_err(|e| AccessError::from_errno(&shown, uid, e))?;
    if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
        return Err(AccessError::NotRegular { path: shown });
    }
    if st.st_size as u64 > max {
        return Err(AccessError::TooLarge { path: shown, max });
    }
    let mut out = Vec::with_capacity(st.st_size as usize);
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| AccessError::Other {
            path: shown.clone(),
            message: e.to_string(),
        })?;
    if out.len() as u64 > max {
        return Err(AccessError::TooLarge { path: shown, max });
    }
    Ok(Some(out))
}

// ---------------------------------------------------------------------------
// The client side.

/// How long the root side waits for the agent to take or give one frame.
/// The agent runs as the workspace owner, who may stop it: a stalled agent
/// fails the operation (closed) instead of holding the root side.
const AGENT_IO_TIMEOUT_MS: u16 = 30_000;

/// A pipe end read or written with a deadline per call.
pub(crate) struct Timed<T>(T);

fn wait_for(fd: std::os::fd::BorrowedFd<'_>, events: nix::poll::PollFlags) -> std::io::Result<()> {
    use nix::poll::{PollFd, PollTimeout, poll};
    let mut p = [PollFd::new(fd, events)];
    loop {
        match poll(&mut p, PollTimeout::from(AGENT_IO_TIMEOUT_MS)) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no progress within {} s (stopped?)",
                        AGENT_IO_TIMEOUT_MS / 1000
                    ),
                ));
            }
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

impl Read for Timed<ChildStdout> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsFd;
        wait_for(self.0.as_fd(), nix::poll::PollFlags::POLLIN)?;
        self.0.read(buf)
    }
}

impl Write for Timed<ChildStdin> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsFd;
        wait_for(self.0.as_fd(), nix::poll::PollFlags::POLLOUT)?;
        // At most one pipe page: a pipe that polls writable takes that much
        // without blocking, so a stopped reader cannot stall this write.
        self.0.write(&buf[..buf.len().min(4096)])
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

pub(crate) struct AgentIo {
    child: Child,
    to: BufWriter<Timed<ChildStdin>>,
    from: BufReader<Timed<ChildStdout>>,
    uid: u32,
}

impl AgentIo {
    fn spawn(creds: &Creds) -> Result<AgentIo, AccessError> {
        let fail = |message: String| AccessError::Agent {
            uid: creds.uid,
            message,
        };
        let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
        let groups = creds
            .groups
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut child = Command::new(&exe)
            .arg(AGENT_ARG)
            .arg(creds.uid.to_string())
            .arg(creds.gid.to_string())
            .arg(groups)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| fail(format!("cannot start {}: {e}", exe.display())))?;
        let to = BufWriter::new(Timed(child.stdin.take().expect("piped")));
        let from = BufReader::new(Timed(child.stdout.take().expect("piped")));
        Ok(AgentIo {
            child,
            to,
            from,
            uid: creds.uid,
        })
    }

    fn broken(&self, e: std::io::Error) -> AccessError {
        AccessError::Agent {
            uid: self.uid,
            message: format!("the workspace agent stopped answering ({e})"),
        }
    }

    fn send(&mut self, req: &Request) -> Result<(), AccessError> {
        write_json(&mut self.to, req)
            .and_then(|_| self.to.flush())
            .map_err(|e| self.broken(e))
    }

    fn reply(&mut self) -> Result<Reply, AccessError> {
        read_json(&mut self.from).map_err(|e| self.broken(e))
    }

    fn call(&mut self, req: &Request) -> Result<Reply, AccessError> {
        self.send(req)?;
        self.reply()
    }
}

impl Drop for AgentIo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unexpected(uid: u32, r: Reply) -> AccessError {
    AccessError::Agent {
        uid,
        message: format!(
            "unexpected answer {:?}",
            serde_json::to_string(&r).unwrap_or_default()
        ),
    }
}

/// Host-side file access acting as one user, before (or without) a pinned
/// workspace: resolving a `working_dir`, reading a workspace file.
pub struct OwnerSession {
    creds: Creds,
    agent: Option<Mutex<AgentIo>>,
}

impl OwnerSession {
    pub fn start(creds: &Creds) -> Result<OwnerSession, AccessError> {
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
        })
    }

    /// A session acting as the owner of the workspace `identity` describes
    /// (its uid, gid and that user's groups).
    pub fn for_owner(identity: &Identity) -> Result<OwnerSession, AccessError> {
        OwnerSession::start(&Creds::of_user(identity.uid, identity.gid))
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

/// The real workspace, opened once, acting as its owner: the live lane's
/// every read and write goes through this.
pub(crate) enum Workspace {
    Local(LocalWorkspace),
    Agent {
        io: Mutex<AgentIo>,
        owner: (u32, u32),
    },
}

fn apply_err_from(path: String, message: String) -> ApplyError {
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
        let creds = Creds::of_user(expect.uid, expect.gid);
        let root_err = |message: String| ApplyError::Root {
            path: path.to_path_buf(),
            message,
        };
        if creds.is_this_process() {
            return LocalWorkspace::open(path, expect, max_file).map(Workspace::Local);
        }
        if !nix::unistd::geteuid().is_root() {
            return Err(root_err(format!(
                "belongs to uid {}; this process cannot act for it",
                expect.uid
            )));
        }
        let mut io = AgentIo::spawn(&creds).map_err(|e| root_err(e.to_string()))?;
        match io
            .call(&Request::Open {
                path: path.to_path_buf(),
                identity: *expect,
                max_file,
            })
            .map_err(|e| root_err(e.to_string()))?
        {
            Reply::Ok => {}
            Reply::ApplyError { message, .. } => return Err(root_err(message)),
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
            super::apply::copy_to_backup(&mut stream, dest)?
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
        b.file = super::apply::backup_file_name(dest);
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
}

// ---------------------------------------------------------------------------
// The agent process.

/// Drop to the given ids for good: groups, gid, uid (the kernel clears every
/// capability when a process with uid 0 takes non-zero uids), then
/// `no_new_privs` and the parent-death signal (which a credential change
/// resets, so it is armed after).
fn drop_to(uid: u32, gid: u32, groups: &[u32]) -> Result<(), String> {
    use nix::unistd::{Gid, Uid};
    if uid == 0 {
        return Err("refusing to act as uid 0 through the agent".into());
    }
    let groups: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups).map_err(|e| format!("setgroups: {e}"))?;
    let g = Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g).map_err(|e| format!("setresgid: {e}"))?;
    let u = Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u).map_err(|e| format!("setresuid: {e}"))?;
    for set in [
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
        caps::CapSet::Inheritable,
        caps::CapSet::Ambient,
    ] {
        let held = caps::read(None, set).map_err(|e| format!("reading capabilities: {e}"))?;
        if !held.is_empty() {
            return Err(format!("still holds capabilities {held:?} after the drop"));
        }
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| format!("pdeathsig: {e}"))?;
    if nix::unistd::getppid().as_raw() == 1 {
        return Err("the parent is gone".into());
    }
    Ok(())
}

/// Entry point of `dryrun __workspace-agent UID GID G1,G2,...`; called from
/// `main` before anything else.
pub fn run_workspace_agent() -> ! {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let parsed = (|| -> Option<(u32, u32, Vec<u32>)> {
        let uid = args.first()?.parse().ok()?;
        let gid = args.get(1)?.parse().ok()?;
        let groups = args
            .get(2)?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().ok())
            .collect::<Option<Vec<u32>>>()?;
        Some((uid, gid, groups))
    })();
    let Some((uid, gid, groups)) = parsed else {
        eprintln!("dryrun: {AGENT_ARG} is internal (usage: UID GID GROUPS)");
        std::process::exit(2);
    };
    if let Err(e) = drop_to(uid, gid, &groups) {
        eprintln!("dryrun workspace agent: {e}");
        std::process::exit(125);
    }
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut from = BufReader::new(stdin.lock());
    let mut to = BufWriter::new(stdout.lock());
    let mut ws: Option<LocalWorkspace> = None;
    loop {
        let req: Request = match read_json(&mut from) {
            Ok(r) => r,
            Err(_) => std::process::exit(0),
        };
        if serve_one(req, &mut ws, &mut from, &mut to, uid)
            .and_then(|_| to.flush())
            .is_err()
        {
            std::process::exit(1);
        }
    }
}

fn serve_one(
    req: Request,
    ws: &mut Option<LocalWorkspace>,
    from: &mut dyn Read,
    to: &mut dyn Write,
    uid: u32,
) -> std::io::Result<()> {
    let rel_of = |h: &str| hex::decode(h).unwrap_or_default();
    let apply_reply = |r: Result<(), ApplyError>| match r {
        Ok(()) => Reply::Ok,
        Err(e) => apply_error_reply(e),
    };
    if let Request::Resolve { path } = &req {
        let reply = match resolve_here(path) {
            Ok(resolved) => Reply::Resolved { resolved },
            Err(error) => Reply::AccessError { error },
        };
        return write_json(to, &reply);
    }
    if let Request::Open {
        path,
        identity,
        max_file,
    } = &req
    {
        let reply = match LocalWorkspace::open(path, identity, *max_file) {
            Ok(w) => {
                *ws = Some(w);
                Reply::Ok
            }
            Err(e) => apply_error_reply(e),
        };
        return write_json(to, &reply);
    }
    let Some(w) = ws.as_ref() else {
        if let Request::WriteFile { .. } = req {
            StreamReader::new(from).drain()?;
        }
        return write_json(
            to,
            &Reply::AccessError {
                error: AccessError::Agent {
                    uid,
                    message: "no workspace is open".into(),
                },
            },
        );
    };
    let reply = match req {
        Request::Resolve { .. } | Request::Open { .. } => unreachable!("handled above"),
        Request::Read { rel_hex, max } => match read_here(w, &rel_of(&rel_hex), max) {
            Ok(None) => Reply::Absent,
            Ok(Some(bytes)) => {
                write_json(to, &Reply::Data)?;
                return send_stream(to, &mut bytes.as_slice());
            }
            Err(error) => Reply::AccessError { error },
        },
        Request::State { rel_hex } => match w.state(&rel_of(&rel_hex)) {
            Ok(state) => Reply::State { state },
            Err(e) => apply_error_reply(e),
        },
        Request::BackupFile { rel_hex } => {
            let rel = rel_of(&rel_hex);
            match w.open_regular_for_backup(&rel) {
                Ok((mut f, mut backup)) => {
                    write_json(to, &Reply::Data)?;
                    send_stream(to, &mut f)?;
                    backup.hash = String::new();
                    Reply::Backup { backup }
                }
                Err(e) => apply_error_reply(e),
            }
        }
        Request::BackupSymlink { rel_hex } => match w.backup_symlink(&rel_of(&rel_hex)) {
            Ok(backup) => Reply::Backup { backup },
            Err(e) => apply_error_reply(e),
        },
        Request::WriteFile {
            rel_hex,
            hash,
            mode,
            tag,
        } => {
            let mut s = StreamReader::new(from);
            let r = w.write_file(&rel_of(&rel_hex), &mut s, &hash, mode, w.owner(), &tag);
            s.drain()?;
            apply_reply(r)
        }
        Request::MakeDir { rel_hex, mode } => {
            apply_reply(w.make_dir(&rel_of(&rel_hex), mode, w.owner()))
        }
        Request::Symlink {
            rel_hex,
            target_hex,
            tag,
        } => apply_reply(w.symlink(&rel_of(&rel_hex), &rel_of(&target_hex), w.owner(), &tag)),
        Request::Remove { rel_hex } => apply_reply(w.remove(&rel_of(&rel_hex))),
        Request::Chmod { rel_hex, mode } => apply_reply(w.chmod(&rel_of(&rel_hex), mode)),
    };
    write_json(to, &reply)
}

fn apply_error_reply(e: ApplyError) -> Reply {
    match e {
        ApplyError::Path { path, message } => Reply::ApplyError { path, message },
        other => Reply::ApplyError {
            path: String::new(),
            message: other.to_string(),
        },
    }
}
