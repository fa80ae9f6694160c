//! C, the helper's child: it becomes id 0 of a new user namespace (root
//! plan), unshares the sandbox's other namespaces, forks P1 and waits for it.

use std::io;
use std::os::fd::OwnedFd;

use nix::fcntl::OFlag;
use nix::sched::{CloneFlags, unshare};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid, pipe2};

use super::super::limits::{self, WalkRoom};
use super::super::spec::{CgroupPlan, IdPlan, SandboxSpec};
use super::super::sys;
use super::error::HelperError;

fn ns<E: Into<io::Error>>(op: &'static str) -> impl FnOnce(E) -> HelperError {
    move |e| HelperError::Namespaces {
        op,
        source: e.into(),
    }
}

/// C's whole life; exits with P1's code (125 after an `E` frame).
pub(super) fn run_child(
    spec: &SandboxSpec,
    ready_w: OwnedFd,
    go_r: OwnedFd,
    h_pid: i32,
    walk_room: Option<WalkRoom>,
) -> ! {
    super::exit_with(child_main(spec, ready_w, go_r, h_pid, walk_room))
}

fn child_main(
    spec: &SandboxSpec,
    ready_w: OwnedFd,
    go_r: OwnedFd,
    h_pid: i32,
    walk_room: Option<WalkRoom>,
) -> Result<i32, HelperError> {
    die_with_host(h_pid)?;
    if let Some(plan) = &spec.cgroup {
        join_run_cgroups(plan)?;
    }
    enter_user_namespace(ready_w, &go_r)?;
    if let IdPlan::Shifted { .. } = spec.ids {
        become_namespace_root(h_pid)?;
    }
    unshare_sandbox_namespaces(spec)?;
    drop(go_r);
    // `_alive` stays open while C lives: P1 reads C's death from its HUP.
    let (p1, _alive) = fork_init(spec, walk_room)?;
    wait_for_init(p1)
}

/// (root) C moves itself into the run's cgroups while it is still host root
/// and single-threaded (just forked), before anything else of the run
/// exists: everything it forks later is inside.
fn join_run_cgroups(plan: &CgroupPlan) -> Result<(), HelperError> {
    limits::join_cgroups_self(plan).map_err(HelperError::CgroupsNotJoined)
}

/// Die with H, and make sure H did not die before that was armed.
fn die_with_host(h_pid: i32) -> Result<(), HelperError> {
    sys::die_with_parent().map_err(ns("pdeathsig"))?;
    if nix::unistd::getppid().as_raw() != h_pid {
        return Err(HelperError::HostGone);
    }
    Ok(())
}

/// A new user namespace; tell H (which writes the id maps) and wait for it.
fn enter_user_namespace(ready_w: OwnedFd, go_r: &OwnedFd) -> Result<(), HelperError> {
    unshare(CloneFlags::CLONE_NEWUSER).map_err(ns("unshare user ns"))?;
    nix::unistd::write(&ready_w, b"r").map_err(ns("ready"))?;
    drop(ready_w);
    let mut b = [0u8; 1];
    if nix::unistd::read(go_r, &mut b).map_err(ns("wait"))? != 1 {
        return Err(HelperError::HostGaveUp);
    }
    Ok(())
}

/// Root plan: become id 0 of the namespace (the shifted range's base).
fn become_namespace_root(h_pid: i32) -> Result<(), HelperError> {
    nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
        .map_err(ns("setresgid"))?;
    nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
        .map_err(ns("setresuid"))?;
    nix::unistd::setgroups(&[]).map_err(ns("setgroups"))?;
    // Changing credentials clears the parent-death signal: set it again,
    // then make sure H did not die in between.
    die_with_host(h_pid)
}

/// Mount, pid, ipc, uts, cgroup and (unless the live lane asks for the
/// host's) network namespaces.
fn unshare_sandbox_namespaces(spec: &SandboxSpec) -> Result<(), HelperError> {
    let mut namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    if !spec.network_host {
        namespaces |= CloneFlags::CLONE_NEWNET;
    }
    unshare(namespaces).map_err(ns("unshare namespaces"))
}

/// Fork P1, pid 1 of the new pid namespace. Returns its pid and the write
/// end of the pipe P1 watches.
fn fork_init(
    spec: &SandboxSpec,
    walk_room: Option<WalkRoom>,
) -> Result<(i32, OwnedFd), HelperError> {
    // P1 cannot see C (it is outside the new pid namespace); it watches this
    // pipe instead: HUP means C is gone.
    let (alive_r, alive_w) = pipe2(OFlag::O_CLOEXEC).map_err(ns("pipe"))?;
    let p1 = sys::fork_single_threaded().map_err(ns("fork init"))?;
    if p1 == 0 {
        drop(alive_w);
        super::init::run_init(spec, alive_r, walk_room);
    }
    drop(walk_room);
    drop(alive_r);
    Ok((p1, alive_w))
}

fn wait_for_init(p1: i32) -> Result<i32, HelperError> {
    loop {
        match waitpid(Pid::from_raw(p1), None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(..)) => return Ok(125),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ns("wait init")(e)),
        }
    }
}
