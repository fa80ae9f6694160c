//! P8, per step: fork the command, take its hello (seccomp listener and
//! Landlock outcome) and let it exec, supervise it (output cap, timeout,
//! network notifications, process count), then kill every process left in
//! the namespace. Afterwards the run's output and limits go into the report.

use crate::model::output::{OutputChunk, OutputStream, record_chunk};
use crate::model::{BlockedKind, LimitHit};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, pipe2};

use super::super::landlock::{self, LandlockOutcome};
use super::super::netwatch::NetWatch;
use super::super::spec::SandboxSpec;
use super::super::sys;
use super::super::wire::{Blocked, RehearsalReport, StepOutcome};
use super::error::HelperError;
use super::handshake::{self, ACK};
use super::init::CommandPlan;
use super::mark;

fn supervise<E: Into<io::Error>>(op: &'static str) -> impl FnOnce(E) -> HelperError {
    move |e| HelperError::Supervise {
        op,
        source: e.into(),
    }
}

/// P8: run the steps in order until one fails or the run times out.
/// Returns the captured output.
pub(super) fn run_steps(
    spec: &SandboxSpec,
    plan: &CommandPlan,
    report: &mut RehearsalReport,
) -> Result<OutputBuffer, HelperError> {
    mark("P8 steps");
    let deadline = Instant::now() + Duration::from_millis(spec.limits.timeout_ms);
    let mut out = OutputBuffer::new(spec.limits.output_bytes);
    let mut landlock_seen: Option<LandlockOutcome> = None;
    let started = Instant::now();
    for step in &spec.steps {
        let (outcome, ll) = run_step(spec, plan, step, deadline, &mut out, report)?;
        if let Some(ll) = ll {
            landlock_seen = Some(landlock_seen.map_or(ll, |seen| seen.weakest(ll)));
        }
        let failed = outcome.exit_code != Some(0);
        report.exit_code = outcome.exit_code;
        report.signal = outcome.signal;
        report.steps.push(outcome);
        if failed || report.timed_out {
            break;
        }
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    if let Some(ll) = landlock_seen {
        report.landlock_abi = ll.abi;
        report.landlock_status = ll.describe();
    }
    Ok(out)
}

/// The command's process as P8 holds it while it runs.
struct Running {
    pid: i32,
    pidfd: OwnedFd,
    streams: Vec<Option<(OwnedFd, bool)>>,
    status: Option<WaitStatus>,
    watch: Option<NetWatch>,
}

/// One step: fork, hand over, supervise, empty the namespace. Returns the
/// step's outcome and what Landlock enforced on its command (`None` when it
/// never reached X6).
fn run_step(
    spec: &SandboxSpec,
    plan: &CommandPlan,
    step: &str,
    deadline: Instant,
    out: &mut OutputBuffer,
    report: &mut RehearsalReport,
) -> Result<(StepOutcome, Option<LandlockOutcome>), HelperError> {
    let started = Instant::now();
    let (mut running, hello_r, ack_w) = fork_command(plan, step)?;
    let promised = plan.kernel_abi.min(landlock::NEWEST_KNOWN_ABI);
    let landlock = take_hello(spec, promised, &mut running, hello_r, ack_w)?;
    mark("P8 command released");
    pump_until_exit(&mut running, deadline, out, report)?;
    mark("P8 command ended");
    // Whatever is still running when the command ends is left behind.
    report.max_processes = report.max_processes.max(count_processes());
    // What it left running gets a moment to end on its own (git's detached
    // auto-maintenance that finds nothing to do, a last job finishing):
    // what ends within it is no background process, and its writes are
    // walked as the command's.
    let grace = (Instant::now() + LEFTOVER_GRACE).min(deadline);
    let_leftovers_end(running.pid, &mut running.status, grace);
    // The command is over (or out of time): nothing else of it may survive.
    report.leftover_processes_killed += kill_all_and_reap(running.pid, &mut running.status);
    mark("P8 namespace emptied");
    // Drain what is left in the pipes: every writer is dead now.
    let mut buf = vec![0u8; 64 * 1024];
    for s in running.streams.iter_mut() {
        while s.is_some() {
            if !read_stream(s, &mut buf, out) {
                *s = None;
            }
        }
    }
    Ok((finish_step(step, running, started, report), landlock))
}

/// Fork the command (X1–X7 run in the child); returns it with P8's ends of
/// the hello and acknowledgement pipes.
fn fork_command(
    plan: &CommandPlan,
    step: &str,
) -> Result<(Running, OwnedFd, OwnedFd), HelperError> {
    let (out_r, out_w) = pipe2(OFlag::O_CLOEXEC).map_err(supervise("pipe"))?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC).map_err(supervise("pipe"))?;
    let (hello_r, hello_w) = pipe2(OFlag::O_CLOEXEC).map_err(supervise("pipe"))?;
    let (ack_r, ack_w) = pipe2(OFlag::O_CLOEXEC).map_err(supervise("pipe"))?;
    let step_c = CString::new(step).map_err(supervise("step"))?;
    let pid = sys::fork_single_threaded().map_err(supervise("fork"))?;
    if pid == 0 {
        drop(out_r);
        drop(err_r);
        drop(hello_r);
        drop(ack_w);
        let e = super::command::exec_command(plan, &step_c, [out_w, err_w, hello_w, ack_r]);
        let _ = sys::write_all_fd(
            2,
            format!("dryrun sandbox: cannot start the command: {e}\n").as_bytes(),
        );
        sys::exit_now(126);
    }
    drop(out_w);
    drop(err_w);
    drop(hello_w);
    drop(ack_r);
    let pidfd = sys::pidfd_open(pid).map_err(supervise("pidfd"))?;
    let running = Running {
        pid,
        pidfd,
        streams: vec![Some((out_r, false)), Some((err_r, true))],
        status: None,
        watch: None,
    };
    Ok((running, hello_r, ack_w))
}

/// The hand-over after X6: copy the command's seccomp listener out of its
/// fd table, check what Landlock enforced on it against the promise, and
/// only then let it exec. A command that ended before its hello (it failed
/// before X6 and never execs) is let be.
fn take_hello(
    spec: &SandboxSpec,
    promised: u32,
    running: &mut Running,
    hello_r: OwnedFd,
    ack_w: OwnedFd,
) -> Result<Option<LandlockOutcome>, HelperError> {
    let Some(hello) = handshake::read_hello(&hello_r).map_err(supervise("handshake"))? else {
        return Ok(None);
    };
    if let Err(e) = landlock::check_promise(
        hello.landlock,
        promised.max(spec.landlock.min_abi),
        spec.landlock.allow_degraded,
    ) {
        // Never acknowledged, the command cannot exec; P1's exit takes the
        // namespace with it.
        let _ = kill(Pid::from_raw(running.pid), Signal::SIGKILL);
        return Err(HelperError::Landlock(e));
    }
    let fd = sys::pidfd_getfd(running.pidfd.as_raw_fd(), hello.listener)
        .map_err(supervise("listener"))?;
    let mut watch = NetWatch::new(fd, spec.egress.as_ref());
    watch.unix_services = super::services::unix_targets();
    running.watch = Some(watch);
    nix::unistd::write(&ack_w, &[ACK]).map_err(supervise("handshake"))?;
    Ok(Some(hello.landlock))
}

/// Supervise the running command until it exits or the deadline passes:
/// read its output (up to the cap), answer network notifications, reap
/// orphans, count processes.
fn pump_until_exit(
    running: &mut Running,
    deadline: Instant,
    out: &mut OutputBuffer,
    report: &mut RehearsalReport,
) -> Result<(), HelperError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_count = Instant::now();
    loop {
        // Reap orphans re-parented to us so zombies do not pile up.
        reap_others(running.pid, &mut running.status);
        if last_count.elapsed() >= Duration::from_millis(50) {
            report.max_processes = report.max_processes.max(count_processes());
            last_count = Instant::now();
        }
        if running.status.is_some() {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            report.timed_out = true;
            return Ok(());
        }
        let left = (deadline - now).min(Duration::from_millis(200));
        let mut fds: Vec<PollFd> = vec![PollFd::new(running.pidfd.as_fd(), PollFlags::POLLIN)];
        if let Some(w) = running.watch.as_ref().filter(|w| !w.hung_up) {
            fds.push(PollFd::new(w.fd.as_fd(), PollFlags::POLLIN));
        }
        let watch_slots = fds.len() - 1;
        let mut map = Vec::new();
        for (i, s) in running.streams.iter().enumerate() {
            if let Some((fd, _)) = s {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                map.push(i);
            }
        }
        let ms = left.as_millis() as i32;
        match poll(
            &mut fds,
            PollTimeout::try_from(ms.max(1)).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(supervise("poll")(e)),
        }
        let ready: Vec<(usize, PollFlags)> = fds
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.revents().filter(|r| !r.is_empty()).map(|r| (i, r)))
            .collect();
        drop(fds);
        for (i, revents) in ready {
            if i == 0 {
                if let Ok(st) = waitpid(Pid::from_raw(running.pid), Some(WaitPidFlag::WNOHANG))
                    && st != WaitStatus::StillAlive
                {
                    running.status = Some(st);
                }
            } else if i <= watch_slots {
                // A notification waits (POLLIN); without one, the listener
                // only says that no process is left under the filter
                // (POLLHUP), and a receive would find nothing: stop polling it.
                if let Some(w) = running.watch.as_mut() {
                    if revents.contains(PollFlags::POLLIN) {
                        w.handle_one();
                    } else {
                        w.hung_up = true;
                    }
                }
            } else {
                let idx = map[i - 1 - watch_slots];
                if !read_stream(&mut running.streams[idx], &mut buf, out) {
                    running.streams[idx] = None;
                }
            }
        }
    }
}

/// The step's outcome; network attempts and a seccomp kill go into the
/// report's blocked list.
fn finish_step(
    step: &str,
    mut running: Running,
    started: Instant,
    report: &mut RehearsalReport,
) -> StepOutcome {
    if let Some(w) = running.watch.take() {
        report.blocked.extend(w.recorded);
        for d in w.direct {
            if !report.direct.contains(&d) {
                report.direct.push(d);
            }
        }
        if w.dropped > 0 {
            report.blocked.push(Blocked {
                kind: BlockedKind::Network,
                detail: format!("{} more network attempts not listed", w.dropped),
            });
        }
    }
    let (exit_code, signal) = match running.status {
        Some(WaitStatus::Exited(_, c)) => (Some(c), None),
        Some(WaitStatus::Signaled(_, s, _)) => (None, Some(s as i32)),
        _ => (None, Some(libc::SIGKILL)),
    };
    if signal == Some(libc::SIGSYS) {
        report.blocked.push(Blocked {
            kind: BlockedKind::Seccomp,
            detail: "the command was killed for a foreign-architecture system call".into(),
        });
    }
    StepOutcome {
        command: step.to_string(),
        exit_code,
        signal,
        duration_ms: started.elapsed().as_millis() as u64,
    }
}

/// The commands' stdout and stderr, under one cap shared by both, and the
/// order their bytes were read in (`model::output`).
pub(super) struct OutputBuffer {
    cap: u64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    order: Vec<OutputChunk>,
    truncated: bool,
}

impl OutputBuffer {
    fn new(cap: u64) -> Self {
        OutputBuffer {
            cap,
            stdout: Vec::new(),
            stderr: Vec::new(),
            order: Vec::new(),
            truncated: false,
        }
    }
    /// Append; false once the cap is reached (the caller stops reading).
    fn push(&mut self, is_err: bool, data: &[u8]) -> bool {
        let used = (self.stdout.len() + self.stderr.len()) as u64;
        let room = self.cap.saturating_sub(used) as usize;
        let take = data.len().min(room);
        let (buf, stream) = if is_err {
            (&mut self.stderr, OutputStream::Stderr)
        } else {
            (&mut self.stdout, OutputStream::Stdout)
        };
        let before = buf.len();
        buf.extend_from_slice(&data[..take]);
        let full = take < data.len();
        if full && !self.truncated {
            self.truncated = true;
            let marker = format!("\n[dryrun: output truncated at {} bytes]\n", self.cap);
            buf.extend_from_slice(marker.as_bytes());
        }
        record_chunk(&mut self.order, stream, (buf.len() - before) as u64);
        !full
    }
}

/// Read once from a stream; false when it is finished (EOF, error, or the
/// output cap was reached, in which case closing our end gives the writer
/// EPIPE/SIGPIPE like `cmd | head`).
fn read_stream(s: &mut Option<(OwnedFd, bool)>, buf: &mut [u8], out: &mut OutputBuffer) -> bool {
    let Some((fd, is_err)) = s else { return false };
    match nix::unistd::read(&*fd, buf) {
        Ok(0) => false,
        Ok(n) => out.push(*is_err, &buf[..n]),
        Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => true,
        Err(_) => false,
    }
}

fn reap_others(main: i32, status: &mut Option<WaitStatus>) {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(st) => {
                if st.pid().map(|p| p.as_raw()) == Some(main) {
                    *status = Some(st);
                }
            }
        }
    }
}

/// As pid 1, `kill(-1, SIGKILL)` reaches every other process of the
/// namespace (orphans, double forks, daemons); then reap them all.
/// Returns how many processes other than the command itself were still
/// running and had to be killed.
/// How long processes the command left behind may take to end on their
/// own before they are killed and counted as background processes.
const LEFTOVER_GRACE: Duration = Duration::from_millis(500);

/// Reaps the processes of the namespace that end before `until`; returns
/// at once when none is left.
fn let_leftovers_end(main: i32, status: &mut Option<WaitStatus>, until: Instant) {
    loop {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(st) => {
                    if st.pid().map(|p| p.as_raw()) == Some(main) && status.is_none() {
                        *status = Some(st);
                    }
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return, // ECHILD: nobody left
            }
        }
        if Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill_all_and_reap(main: i32, status: &mut Option<WaitStatus>) -> u32 {
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    let mut others = 0;
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(st) => {
                if st.pid().map(|p| p.as_raw()) == Some(main) {
                    if status.is_none() {
                        *status = Some(st);
                    }
                } else if matches!(st, WaitStatus::Signaled(_, Signal::SIGKILL, _)) {
                    // Killed by us just now: it was still running. (A process
                    // already exiting from another signal keeps that signal
                    // as its status and is not counted.)
                    others += 1;
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return others, // ECHILD: nobody left
        }
    }
}

/// Processes alive in this pid namespace (including init), from /proc.
fn count_processes() -> u64 {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .as_encoded_bytes()
                        .iter()
                        .all(|b| b.is_ascii_digit())
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// After P8: output, truncation, the limits the run hit (timeout, output,
/// pids, disk) and the writes the command reported refused.
pub(super) fn record_output_and_limits(
    spec: &SandboxSpec,
    out: OutputBuffer,
    upper_fd: &OwnedFd,
    scratch_trees: &[std::path::PathBuf],
    report: &mut RehearsalReport,
) {
    report.output_truncated = out.truncated;
    if out.truncated {
        report.limits_hit.push(LimitHit::Output);
    }
    if report.timed_out {
        report.limits_hit.push(LimitHit::Timeout);
    }
    // The process table of the namespace reached the pids limit (fork fails
    // once the count is one below it).
    if report.max_processes + 1 >= spec.limits.pids {
        report.limits_hit.push(LimitHit::Pids);
    }
    report.blocked.extend(denied_writes_reported(&out.stderr));
    report.stdout = out.stdout;
    report.stderr = out.stderr;
    report.output_order = out.order;
    // Disk caps: a full upper layer or scratch tree (the throwaway layers
    // outside the workspace share one capped tmpfs; a fresh `/tmp` or
    // `/var/tmp` is a capped tmpfs of its own; `/tmp` is always one of
    // them) means the run hit its disk limit.
    let workspace_upper = format!("/proc/self/fd/{}", upper_fd.as_raw_fd());
    let scratch = scratch_trees.iter().filter_map(|p| p.to_str());
    if std::iter::once(workspace_upper.as_str())
        .chain(scratch)
        .any(nearly_full)
    {
        report.limits_hit.push(LimitHit::Disk);
    }
    report.limits_hit.sort();
    report.limits_hit.dedup();
}

/// Full, or so nearly full (under 1 MiB or 1% left) that the last write or
/// allocation that failed is taken to have hit the cap.
fn nearly_full(path: &str) -> bool {
    nix::sys::statvfs::statvfs(path).is_ok_and(|st| {
        let unit = st.fragment_size().max(1);
        let total = st.blocks().saturating_mul(unit);
        let free = st.blocks_free().saturating_mul(unit);
        st.blocks_free() == 0 || free < (1u64 << 20).max(total / 100)
    })
}

/// Writes refused because the target is read-only (outside the workspace and
/// /tmp everything is) surface as EROFS; the command's own error messages are
/// the only place they can be seen without the audit subsystem. EROFS comes
/// only from write attempts, so these lines are specific.
fn denied_writes_reported(stderr: &[u8]) -> Vec<Blocked> {
    const MAX: usize = 20;
    let text = String::from_utf8_lossy(stderr);
    let mut out: Vec<Blocked> = Vec::new();
    for line in text.lines().filter(|l| l.contains("Read-only file system")) {
        let line: String = line.chars().take(200).collect();
        let detail = format!(
            "reported by the command: {}",
            crate::model::text::escape_for_humans(line.as_bytes())
        );
        if out.len() >= MAX {
            break;
        }
        if !out.iter().any(|b| b.detail == detail) {
            out.push(Blocked {
                kind: BlockedKind::Write,
                detail,
            });
        }
    }
    out
}
