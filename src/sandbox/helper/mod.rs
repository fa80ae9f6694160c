//! The sandbox helper: `dryrun __sandbox-helper`, a fresh exec of our own
//! binary, single-threaded from start to end. It never runs inside a tokio
//! process; the engine spawns it and reads its answer (see `wire`).
//!
//! One file per process of the tree, one function per numbered step, called
//! in order from the process's `run_*` function (docs/design.md repeats the
//! list with the function names):
//!
//! ```text
//! engine ──spawn──▶ H (host.rs) ──fork──▶ C (child.rs) ──fork──▶ P1 (init.rs) ──fork──▶ CMD (command.rs)
//! ```
//!
//! H, on the host:
//!  H1. die with the engine (PDEATHSIG), read the spec from stdin, stdin := /dev/null,
//!      close every fd but 0-2; (egress) connect to the run's proxy (egress.rs).
//!  H2. (root) create the run's cgroups and set their limits.
//!  H3. (root) private mount namespace; detached clone of the workspace mount,
//!      and of the real trees under the view's throwaway layers.
//!  H4. fork C; C unshares a user namespace; H writes its id maps
//!      (root: a shifted unprivileged range, never host 0; user: itself only).
//!  H5. (root) make the clone an idmapped mount through C's user namespace and
//!      attach it at /tmp/dryrun-lower of H's private namespace (the view's
//!      layers at /tmp/dryrun-view-N).
//!  H6. release C; watch it with a pidfd
//!      and a watchdog deadline; afterwards read which cgroup limits were hit,
//!      kill leftovers, remove the cgroups, send the `H` frame.
//!
//! C: (root) moves itself into the run's cgroups first, while single-threaded
//! (see `limits::join_cgroups_self`: no global lock wait), so everything of
//! the run is inside; becomes id 0 of its user namespace (root plan), unshares mount, pid,
//! net, ipc, uts and cgroup namespaces, forks P1 and waits for it.
//!
//! P1, pid 1 of the new pid namespace, still holding its namespace
//! capabilities:
//!  P1. open the lower layer (O_PATH) before anything is mounted over it, and
//!      the view's layers' real trees (view.rs gathers every view step).
//!  P2. base tmpfs over /tmp; a size-capped tmpfs for the overlay upper layer
//!      (owner, mode and user.* attributes of the workspace root copied onto it);
//!      the view's layers' upper layers in a tmpfs of their own.
//!  P3. new root tmpfs; image binds (ro, nosuid, nodev, submounts too); the
//!      image's masks; the view: PATH directories bound read-only, the home,
//!      /tmp and /var/tmp as throwaway layers; the shadow stubs (stubs.rs
//!      gathers every stub step); (egress) resolv.conf.
//!  P4. the workspace overlay at its absolute path; the view's masks and
//!      filtered files over everything, each mask watched.
//!      (services) each Unix service's socket shown at its path (services.rs).
//!  P5. minimal /dev; new /proc with kernel knobs read-only.
//!  P6. pivot_root, detach the old root, remount / read-only.
//!  P7. hostname, loopback up, (egress) the proxy's sockets and the declared
//!      services' listeners created here and handed to the engine, nested user namespaces capped to 0, seccomp
//!      compiled, the command's environment.
//!  P8. per step (supervise.rs): fork CMD, take its hello (seccomp listener,
//!      Landlock outcome), supervise (output cap, timeout), then kill every
//!      process left in the namespace; (memory cgroup) the ceiling raised
//!      for the walk through the limit files H opened; System V objects
//!      removed.
//!  P9. the masks the command opened; (a user's failed run) name the workspace
//!      entries whose ids are not mapped (ids.rs); the view's upper layers
//!      summarised (outside_writes); walk the upper layer (evidence.rs),
//!      stream blobs and the `R` frame.
//!
//! CMD, before exec:
//!  X1. new session (no controlling terminal), stdin /dev/null, stdout and
//!      stderr to P1's pipes, every other fd closed, cwd = workspace.
//!  X2. rlimits.
//!  X3. supplementary groups cleared, bounding set emptied, securebits locked,
//!      setresgid/setresuid to the run ids, ambient/effective/permitted/
//!      inheritable capabilities cleared.
//!  X4. no_new_privs.
//!  X5. Landlock: writes beneath the workspace and the view's throwaway layers
//!      only (what `restrict_self` returned goes to P1 in the hello).
//!  X6. seccomp (last); hello to P1, wait for its acknowledgement.
//!  X7. execve(bash -c STEP) with the prepared environment only.

mod child;
mod command;
mod egress;
mod error;
mod evidence;
mod handshake;
mod host;
mod ids;
mod init;
pub(super) mod services;
mod stubs;
mod supervise;
mod view;
mod view_home;
mod view_listing;

use std::io::Write;
use std::os::fd::RawFd;

use super::sys;
use super::wire::{self, SetupFailure};
pub(crate) use error::HelperError;

/// The hidden subcommand that starts the helper.
pub const HELPER_ARG: &str = "__sandbox-helper";

/// Where H attaches the idmapped lower layer inside its private namespace.
const STAGE_LOWER: &str = "/tmp/dryrun-lower";
/// Where H attaches this binary for the stubs (root plan).
const STAGE_EXE: &str = "/tmp/dryrun-exe";
/// Where H5 stages the small stub program (`dryrun-stub`) beside it.
const STAGE_SMALL_EXE: &str = "/tmp/dryrun-stub-exe";
/// The helper's answer: frames on fd 1.
const OUT_FD: RawFd = 1;

/// Phase marks (µs since the engine started the run), copied into every
/// forked stage; P1 reports them.
static MARKS: std::sync::Mutex<Vec<(String, u64)>> = std::sync::Mutex::new(Vec::new());
static T0_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The write end of H's "done" pipe, inherited by C and P1 through their
/// forks (-1: none). P1 writes one byte to it once its last frame is out;
/// the command never holds it (X closes every descriptor past 4).
static DONE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// P1: tell H that the sandbox's report is complete, so H may send its own
/// (the last frame) without waiting for the namespaces' tear-down.
fn tell_host_done() {
    let fd = DONE_FD.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        let _ = sys::write_all_fd(fd, b"d");
    }
}

pub(crate) fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("monotonic clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn mark(phase: &str) {
    let t0 = T0_NS.load(std::sync::atomic::Ordering::Relaxed);
    let us = monotonic_ns().saturating_sub(t0) / 1000;
    if let Ok(mut m) = MARKS.lock() {
        m.push((phase.to_string(), us));
    }
}

fn marks_so_far() -> Vec<(String, u64)> {
    MARKS.lock().map(|m| m.clone()).unwrap_or_default()
}

/// Send the `E` frame naming the step that failed.
fn send_failure(e: &HelperError) {
    let f = SetupFailure {
        stage: e.stage(),
        message: e.to_string(),
    };
    let mut out = FdWriter(OUT_FD);
    let _ = wire::write_json(&mut out, wire::TAG_ERROR, &f);
}

/// End a stage process: 0 or its own code on success, 125 (after the `E`
/// frame) on failure. Never returns.
fn exit_with(result: Result<i32, HelperError>) -> ! {
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            send_failure(&e);
            125
        }
    };
    sys::exit_now(code)
}

/// A `Write` over a raw fd we do not own (fd 1 in the helper).
struct FdWriter(RawFd);
impl Write for FdWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        sys::write_all_fd(self.0, buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Entry point of the hidden subcommand. Never returns.
pub fn run_helper() -> ! {
    exit_with(host::run_host_side().map(|()| 0))
}
