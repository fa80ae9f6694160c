//! The root side of the agent: spawning it and talking to it with a
//! deadline on every frame.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};

use nix::errno::Errno;

use super::creds::Creds;
use super::protocol::{Reply, Request, read_json, write_json};
use super::{AGENT_ARG, AccessError, LaunchedAgent};

/// How long the root side waits for the agent to take or give one frame.
/// The agent runs as the workspace owner, who may stop it: a stalled agent
/// fails the operation (closed) instead of holding the root side.
pub(super) const AGENT_IO_TIMEOUT_MS: u16 = 30_000;

/// A pipe end read or written with a deadline per call. Both ends share
/// `dead`: once the agent missed a deadline, closed its end or failed a
/// call, every later call on either end fails at once. Its frames are out
/// of step from then on, and an agent stopped on purpose must cost the
/// root side one deadline, not one per remaining step of a promotion or
/// its undo.
pub(crate) struct Timed<T> {
    end: T,
    dead: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl<T> Timed<T> {
    fn check_alive(&self) -> std::io::Result<()> {
        if self.dead.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the workspace agent failed an earlier call and is not used again",
            ));
        }
        Ok(())
    }

    /// `r`, marking the agent dead when it is an error or the end of its
    /// output.
    fn watch(&self, r: std::io::Result<usize>, want: usize) -> std::io::Result<usize> {
        if r.as_ref().map_or(true, |n| *n == 0 && want > 0) {
            self.dead.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        r
    }
}

pub(super) fn wait_for(
    fd: std::os::fd::BorrowedFd<'_>,
    events: nix::poll::PollFlags,
) -> std::io::Result<()> {
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

impl Read for Timed<File> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsFd;
        self.check_alive()?;
        let r = wait_for(self.end.as_fd(), nix::poll::PollFlags::POLLIN)
            .and_then(|()| self.end.read(buf));
        self.watch(r, buf.len())
    }
}

impl Write for Timed<File> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsFd;
        self.check_alive()?;
        // At most one pipe page: a pipe that polls writable takes that much
        // without blocking, so a stopped reader cannot stall this write.
        let r = wait_for(self.end.as_fd(), nix::poll::PollFlags::POLLOUT)
            .and_then(|()| self.end.write(&buf[..buf.len().min(4096)]));
        self.watch(r, buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.check_alive()?;
        self.end.flush()
    }
}

pub(crate) struct AgentIo {
    process: AgentProcess,
    pub(super) to: BufWriter<Timed<File>>,
    pub(super) from: BufReader<Timed<File>>,
    pub(super) uid: u32,
}

/// How the agent was started: an exec of this binary, or a fork of the
/// resident sandbox helper (see [`super::launch_agents_with`]).
enum AgentProcess {
    Executed(Child),
    Launched(Box<dyn super::AgentHandle>),
}

impl AgentIo {
    pub(super) fn spawn(creds: &Creds) -> Result<AgentIo, AccessError> {
        AgentIo::spawn_in(creds, None)
    }

    /// [`AgentIo::spawn`], the agent running in a client's view (its mount
    /// namespace, its root): only a fork of the resident helper can.
    pub(super) fn spawn_in(
        creds: &Creds,
        view: Option<&super::view::ClientView>,
    ) -> Result<AgentIo, AccessError> {
        let fail = |message: String| AccessError::Agent {
            uid: creds.uid,
            message,
        };
        // Root acting with another user's filesystem identity (on that
        // user's local state directory, see
        // `request::door::act_as_state_dir_owner`) works for that user
        // only: a plan or record there names whatever workspace its owner
        // wrote, and must not become a third user's hands.
        let fsuid = nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u32::MAX)).as_raw();
        if fsuid != 0 && fsuid != creds.uid {
            return Err(fail(format!(
                "this process acts for uid {fsuid} (the owner of the state directory it works on) and will not act as another user"
            )));
        }
        // A fork of the resident sandbox helper where this process has one
        // (the same program, without an exec of this whole binary), else an
        // exec.
        let (process, to, from) = match super::launch(creds, view) {
            Some(LaunchedAgent {
                input,
                output,
                handle,
            }) => (
                AgentProcess::Launched(handle),
                File::from(input),
                File::from(output),
            ),
            None if view.is_some() => {
                return Err(fail(
                    "a workspace in a client's mount namespace is reached only through the daemon's resident helper, which is gone; restart the daemon".into(),
                ));
            }
            None => {
                let mut child = Self::exec(creds).map_err(|e| fail(e.to_string()))?;
                let to = OwnedFd::from(child.stdin.take().expect("piped"));
                let from = OwnedFd::from(child.stdout.take().expect("piped"));
                (
                    AgentProcess::Executed(child),
                    File::from(to),
                    File::from(from),
                )
            }
        };
        super::AGENTS_STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dead = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let to = BufWriter::new(Timed {
            end: to,
            dead: dead.clone(),
        });
        let from = BufReader::new(Timed { end: from, dead });
        Ok(AgentIo {
            process,
            to,
            from,
            uid: creds.uid,
        })
    }

    /// An exec of this binary as the agent.
    fn exec(creds: &Creds) -> std::io::Result<Child> {
        let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
        Command::new(&exe)
            .arg(AGENT_ARG)
            .args(super::agent::ids_args(creds))
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| std::io::Error::other(format!("cannot start {}: {e}", exe.display())))
    }

    pub(super) fn broken(&self, e: std::io::Error) -> AccessError {
        AccessError::Agent {
            uid: self.uid,
            message: format!("the workspace agent stopped answering ({e})"),
        }
    }

    pub(super) fn send(&mut self, req: &Request) -> Result<(), AccessError> {
        write_json(&mut self.to, req)
            .and_then(|_| self.to.flush())
            .map_err(|e| self.broken(e))
    }

    pub(super) fn reply(&mut self) -> Result<Reply, AccessError> {
        read_json(&mut self.from).map_err(|e| self.broken(e))
    }

    pub(super) fn call(&mut self, req: &Request) -> Result<Reply, AccessError> {
        self.send(req)?;
        self.reply()
    }
}

impl Drop for AgentIo {
    fn drop(&mut self) {
        match &mut self.process {
            AgentProcess::Executed(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            AgentProcess::Launched(handle) => handle.kill(),
        }
    }
}

pub(super) fn unexpected(uid: u32, r: Reply) -> AccessError {
    AccessError::Agent {
        uid,
        message: format!(
            "unexpected answer {:?}",
            serde_json::to_string(&r).unwrap_or_default()
        ),
    }
}
