//! H, the host side of the helper: H1–H6 (see the module list in `mod.rs`).

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, open};
use nix::mount::MsFlags;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{Signal, kill};
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, dup2_stdin, pipe2};

use super::super::limits;
use super::super::mounts;
use super::super::spec::{IdPlan, SandboxSpec};
use super::super::sys;
use super::super::wire::{self, HostReport};
use super::error::{HelperError, Step};
use super::{FdWriter, OUT_FD, STAGE_EXE, STAGE_LOWER, mark};

fn take_over<E: Into<io::Error>>(op: &'static str) -> impl FnOnce(E) -> HelperError {
    move |e| HelperError::TakeOver {
        op,
        source: e.into(),
    }
}

fn fork_child<E: Into<io::Error>>(op: &'static str) -> impl FnOnce(E) -> HelperError {
    move |e| HelperError::ForkChild {
        op,
        source: e.into(),
    }
}

fn watch<E: Into<io::Error>>(op: &'static str) -> impl FnOnce(E) -> HelperError {
    move |e| HelperError::Watch {
        op,
        source: e.into(),
    }
}

fn idmap<E: Into<io::Error>>(op: &'static str, target: &Path) -> impl FnOnce(E) -> HelperError {
    let target = target.to_path_buf();
    move |e| HelperError::IdmapLower {
        op,
        target,
        source: e.into(),
    }
}

/// H's whole job, step by step.
pub(super) fn run_host_side() -> Result<(), HelperError> {
    let mut spec = take_over_process()?;
    let (mut enforcement, walk_room) = create_run_cgroups(&spec)?;
    // The looks at the workspace and the layers share their judged
    // mounts; nothing of them (the pins) is held past the fork.
    let mut staged = {
        let _looks = crate::sandbox::view::Looks::hold();
        clone_workspace_mount(&spec)?
    };
    // The layers H3 did not look at are named with the plan's own notes.
    spec.view.notes.append(&mut staged.not_looked);
    let child = fork_sandbox_child(&spec, &mut staged, walk_room)?;
    write_id_maps(child.pid, &spec.ids, &spec.mapped_groups)?;
    enforcement.extend(attach_idmapped_lower(child.pid, staged)?);
    release_child(&child)?;
    watch_child(&spec, child, enforcement)
}

/// H1: die with the engine, no signal ignored or blocked, read the spec,
/// stdin := /dev/null, close every inherited fd past 2.
fn take_over_process() -> Result<SandboxSpec, HelperError> {
    sys::die_with_parent().map_err(take_over("pdeathsig"))?;
    sys::reset_ignored_signals().map_err(take_over("signals"))?;
    let mut raw = Vec::new();
    io::stdin()
        .lock()
        .take(16 << 20)
        .read_to_end(&mut raw)
        .map_err(take_over("read spec"))?;
    let spec: SandboxSpec = serde_json::from_slice(&raw).map_err(HelperError::Spec)?;
    super::T0_NS.store(spec.t0_ns, std::sync::atomic::Ordering::Relaxed);
    mark("H1 helper started");
    if nix::unistd::getppid().as_raw() != spec.parent_pid {
        return Err(HelperError::EngineGone);
    }
    let devnull = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(take_over("/dev/null"))?;
    dup2_stdin(&devnull).map_err(take_over("stdin"))?;
    drop(devnull);
    // No Rust handle refers to fds >= 3 at this point (but fd 3, the
    // workspace cloned in a client's view, when the resident made one).
    let staged = super::super::resident::STAGED_IN_VIEW.load(std::sync::atomic::Ordering::Relaxed);
    let first = if staged == 3 { 4 } else { 3 };
    sys::close_fds_from(first).map_err(take_over("close fds"))?;
    if staged == 3 && !spec.client_view {
        sys::close_raw(3);
    }
    super::egress::connect_control(&spec)?;
    Ok(spec)
}

/// H2 (root): the run's cgroups with their limits; returns how each limit
/// is enforced, and the memory limit opened for the init to raise before
/// its walk ([`limits::WalkRoom`]).
fn create_run_cgroups(
    spec: &SandboxSpec,
) -> Result<(Vec<String>, Option<limits::WalkRoom>), HelperError> {
    mark("H2 cgroups");
    let Some(plan) = &spec.cgroup else {
        return Ok((Vec::new(), None));
    };
    limits::prepare_cgroups(plan, &spec.limits).map_err(HelperError::Cgroups)
}

/// Detached mounts H3 takes for H5 to attach (root plan only).
#[derive(Default)]
struct StagedMounts {
    workspace: Option<OwnedFd>,
    /// The stubs' interpreter (this binary), staged for P1 beside the
    /// lower layer: a mount of H's namespace P1 can open by path.
    exe: Option<OwnedFd>,
    /// The build's small stub program beside it, when installed.
    small_exe: Option<OwnedFd>,
    /// Detached clones of the view's throwaway layers' real trees, by
    /// their index in the plan (a tree that moved since is left out).
    view: Vec<(usize, PathBuf, OwnedFd)>,
    /// The lines that name the layers left out unlooked at (on a mount
    /// the resolver does not cross), for the record's `stripped`.
    not_looked: Vec<String>,
}

/// H3 (root): a private mount namespace and a detached clone of the
/// workspace's mount, checked to be the directory the engine checked.
fn clone_workspace_mount(spec: &SandboxSpec) -> Result<StagedMounts, HelperError> {
    mark("H3 mount ns");
    if !matches!(spec.ids, IdPlan::Shifted { .. }) {
        return Ok(StagedMounts::default());
    }
    let clone_err = |op, path: &Path| {
        let path = path.to_path_buf();
        move |e: io::Error| HelperError::CloneWorkspace {
            op,
            path,
            source: e,
        }
    };
    let root = Path::new("/");
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| clone_err("unshare mount ns", root)(e.into()))?;
    mounts::make_rprivate().map_err(|e| clone_err("make-rprivate", root)(io::Error::other(e)))?;
    let fd = if spec.client_view {
        staged_in_view().map_err(clone_err(
            "clone the workspace in the client's mount namespace",
            &spec.workspace,
        ))?
    } else {
        // Reached through the resolver: nothing on a mount it does not
        // cross (a FUSE mount the agent serves, made since the engine
        // looked) is asked.
        let dir = crate::sandbox::view::Resolver::new()
            .open_exact(&spec.workspace)
            .map_err(|e| {
                let e: io::Error = e.into();
                // The engine checked a path without a link on it.
                let e = if e.raw_os_error() == Some(libc::ELOOP) {
                    io::Error::other(
                        "a symbolic link now stands on the path: it was swapped after the check; nothing ran",
                    )
                } else {
                    e
                };
                clone_err("open workspace", &spec.workspace)(e)
            })?;
        sys::open_tree_clone_at(dir.file.as_raw_fd(), sys::Reach::Mount)
            .map_err(clone_err("open_tree workspace", &spec.workspace))?
    };
    check_workspace_identity(&fd, spec.workspace_identity, Step::H3)?;
    let (view, not_looked) = clone_view_layers(spec)?;
    let mut staged = StagedMounts {
        workspace: Some(fd),
        exe: None,
        small_exe: None,
        view,
        not_looked,
    };
    if !spec.stubs.tools.is_empty() {
        let exe_link = Path::new("/proc/self/exe");
        let exe = std::fs::read_link(exe_link).map_err(clone_err("own exe", exe_link))?;
        staged.exe = Some(
            sys::open_tree_clone(&exe, sys::Reach::Mount)
                .map_err(clone_err("open_tree exe", &exe))?,
        );
        // Absent, or not as trusted as this binary: the scripts run it.
        staged.small_exe = crate::sandbox::stubs::open_small_stub()
            .and_then(|fd| sys::open_tree_clone_at(fd.as_raw_fd(), sys::Reach::Mount).ok());
    }
    Ok(staged)
}

/// The workspace's mount as the resident cloned it in the client's mount
/// namespace (fd 3, kept by H1).
fn staged_in_view() -> io::Result<OwnedFd> {
    match super::super::resident::STAGED_IN_VIEW.swap(0, std::sync::atomic::Ordering::Relaxed) {
        3 => Ok(sys::adopt_fd(3)),
        0 => Err(io::Error::other(
            "no clone was made in the client's namespace (not a fork of the resident helper)",
        )),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// H3 (root): detached, non-recursive clones of the view's throwaway
/// layers' real trees (the home, each mount beneath it, `/tmp`,
/// `/var/tmp`), each reached without a symlink and checked to be the
/// directory the plan saw; one that is not is left out (P1 names it), and
/// one on a mount the resolver does not cross too (named here).
#[allow(clippy::type_complexity)]
fn clone_view_layers(
    spec: &SandboxSpec,
) -> Result<(Vec<(usize, PathBuf, OwnedFd)>, Vec<String>), HelperError> {
    let mut out = Vec::new();
    let mut not_looked = Vec::new();
    for (i, l) in spec.view.layers.iter().enumerate() {
        let err = |op| {
            let path = l.path.clone();
            move |source: io::Error| HelperError::StageView { op, path, source }
        };
        let opened = match mounts::open_dir_no_symlinks(&l.path, l.identity) {
            Err(crate::sandbox::view::Refusal::NotLooked(named)) => {
                not_looked.push(named);
                continue;
            }
            opened => opened.map_err(|e| err("open")(e.into())),
        };
        let tree = opened.and_then(|dir| {
            dir.map(|d| sys::open_tree_clone_at(d.as_raw_fd(), sys::Reach::Mount))
                .transpose()
                .map_err(err("clone"))
        });
        // A mount beneath the home that cannot be opened or cloned is left
        // out (P1 names it); the home and the scratch trees fail the run.
        match tree {
            Ok(Some(tree)) => out.push((i, l.path.clone(), tree)),
            Ok(None) => {}
            Err(_) if super::view_home::beneath_home(&spec.view, &l.path) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((out, not_looked))
}

/// The directory about to become the lower layer must be the one the engine
/// checked (same device and inode), whatever its path resolves to now.
pub(super) fn check_workspace_identity(
    fd: &OwnedFd,
    expected: (u64, u64),
    step: Step,
) -> Result<(), HelperError> {
    let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| {
        let (op, path, source) = ("stat workspace", PathBuf::from("."), e.into());
        match step {
            Step::H3 => HelperError::CloneWorkspace { op, path, source },
            _ => HelperError::OpenLower { op, path, source },
        }
    })?;
    let got = (st.st_dev, st.st_ino);
    if got != expected {
        return Err(HelperError::WorkspaceSwapped {
            step,
            got,
            expected,
        });
    }
    Ok(())
}

/// C as H sees it: its pid, the pipe that releases it, the pipe on which
/// P1 says its report is complete, when it started.
struct Child {
    pid: i32,
    go: OwnedFd,
    done: OwnedFd,
    started: Instant,
}

/// H4: fork C and wait until it has unshared its user namespace.
fn fork_sandbox_child(
    spec: &SandboxSpec,
    staged: &mut StagedMounts,
    walk_room: Option<limits::WalkRoom>,
) -> Result<Child, HelperError> {
    mark("H4 fork + user ns");
    let (ready_r, ready_w) = pipe2(OFlag::O_CLOEXEC).map_err(fork_child("pipe"))?;
    let (go_r, go_w) = pipe2(OFlag::O_CLOEXEC).map_err(fork_child("pipe"))?;
    let (done_r, done_w) = pipe2(OFlag::O_CLOEXEC).map_err(fork_child("pipe"))?;
    super::DONE_FD.store(done_w.as_raw_fd(), std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    let h_pid = std::process::id() as i32;
    let c = sys::fork_single_threaded().map_err(fork_child("fork"))?;
    if c == 0 {
        drop(ready_r);
        drop(go_w);
        drop(done_r);
        drop(staged.workspace.take());
        staged.view.clear();
        super::child::run_child(spec, ready_w, go_r, h_pid, walk_room);
    }
    drop(walk_room);
    super::DONE_FD.store(-1, std::sync::atomic::Ordering::Relaxed);
    drop(done_w);
    drop(ready_w);
    drop(go_r);
    let mut b = [0u8; 1];
    let n = nix::unistd::read(&ready_r, &mut b).map_err(fork_child("wait for user namespace"))?;
    if n != 1 {
        let _ = waitpid(Pid::from_raw(c), None);
        return Err(HelperError::ChildDiedEarly);
    }
    Ok(Child {
        pid: c,
        go: go_w,
        done: done_r,
        started,
    })
}

/// H4: C's id maps (root: the shifted range; a user: itself, and the
/// supplementary groups `/etc/subgid` delegates to it, through
/// `newgidmap`; when that fails, the user's own group alone, and P1
/// reports which groups are mapped: see `ids.rs`).
fn write_id_maps(child: i32, ids: &IdPlan, mapped_groups: &[u32]) -> Result<(), HelperError> {
    let base = format!("/proc/{child}");
    let write = |file: &str, text: String| {
        std::fs::write(format!("{base}/{file}"), text)
            .map_err(|source| HelperError::IdMaps { pid: child, source })
    };
    match ids {
        IdPlan::Shifted {
            host_base, count, ..
        } => {
            write("uid_map", format!("0 {host_base} {count}\n"))?;
            write("gid_map", format!("0 {host_base} {count}\n"))?;
        }
        IdPlan::SelfOnly { uid, gid } => {
            write("uid_map", format!("{uid} {uid} 1\n"))?;
            let delegated = match mapped_groups {
                [] => None,
                groups => Some(super::super::ids::map_groups_with_newgidmap(
                    child, *gid, groups,
                )),
            };
            if let Some(Ok(())) = delegated {
                return Ok(());
            }
            if let Some(Err(e)) = delegated {
                // P1 names the groups left unmapped in the record; the
                // reason goes to the helper's stderr.
                eprintln!("dryrun sandbox helper: {e}");
            }
            write("setgroups", "deny".into())?;
            write("gid_map", format!("{gid} {gid} 1\n"))?;
        }
    }
    Ok(())
}

/// H5 (root): the workspace clone becomes an idmapped mount through C's
/// user namespace, attached at [`STAGE_LOWER`] (and the stubs' interpreter
/// at [`STAGE_EXE`]) in H's private namespace.
fn attach_idmapped_lower(child: i32, mut staged: StagedMounts) -> Result<Vec<String>, HelperError> {
    mark("H5 idmapped lower");
    let Some(fd) = staged.workspace.take() else {
        return Ok(Vec::new());
    };
    let userns_path = PathBuf::from(format!("/proc/{child}/ns/user"));
    let userns = std::fs::File::open(&userns_path).map_err(idmap("userns fd", &userns_path))?;
    let lower = Path::new(STAGE_LOWER);
    sys::mount_setattr(
        fd.as_raw_fd(),
        sys::Reach::Mount,
        sys::MOUNT_ATTR_IDMAP
            | sys::MOUNT_ATTR_RDONLY
            | sys::MOUNT_ATTR_NOSUID
            | sys::MOUNT_ATTR_NODEV,
        Some(userns.as_raw_fd()),
    )
    .map_err(idmap("idmap workspace", lower))?;
    let tmp = Path::new("/tmp");
    mounts::mount_tmpfs(tmp, 65536, 0o755, MsFlags::empty())
        .map_err(|e| idmap("tmpfs", tmp)(io::Error::other(e)))?;
    std::fs::create_dir(lower).map_err(idmap("stage", lower))?;
    sys::move_mount_to(fd.as_raw_fd(), lower).map_err(idmap("attach lower", lower))?;
    if let Some(e) = staged.exe.take() {
        let exe = Path::new(STAGE_EXE);
        std::fs::write(exe, b"").map_err(idmap("stage exe", exe))?;
        sys::move_mount_to(e.as_raw_fd(), exe).map_err(idmap("attach exe", exe))?;
    }
    if let Some(e) = staged.small_exe.take() {
        let exe = Path::new(super::STAGE_SMALL_EXE);
        std::fs::write(exe, b"").map_err(idmap("stage stub program", exe))?;
        sys::move_mount_to(e.as_raw_fd(), exe).map_err(idmap("attach stub program", exe))?;
    }
    let mut notes = Vec::new();
    for (i, path, tree) in staged.view {
        let stage = super::view::view_stage(i);
        let ro = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
        let mapped = sys::mount_setattr(
            tree.as_raw_fd(),
            sys::Reach::Mount,
            sys::MOUNT_ATTR_IDMAP | ro,
            Some(userns.as_raw_fd()),
        );
        if let Err(e) = mapped {
            // A filesystem that cannot idmap: shown with the host's ids,
            // which the sandbox does not map (files only their owner may
            // read stay unreadable; nothing more is shown).
            sys::mount_setattr(tree.as_raw_fd(), sys::Reach::Mount, ro, None)
                .map_err(idmap("read-only view layer", &path))?;
            notes.push(format!(
                "view: {} shown without id mapping ({e}): files only their owner may read stay unreadable",
                path.display()
            ));
        }
        std::fs::create_dir(&stage).map_err(idmap("stage", &stage))?;
        sys::move_mount_to(tree.as_raw_fd(), &stage).map_err(idmap("attach view layer", &stage))?;
    }
    Ok(notes)
}

/// H6: let C go on (it joined the run's cgroups itself, right after the
/// fork).
fn release_child(child: &Child) -> Result<(), HelperError> {
    mark("H6 released");
    nix::unistd::write(&child.go, b"g").map_err(watch("release"))?;
    Ok(())
}

/// H6: wait for C with a watchdog (the run's timeout + 10 s), or for P1's
/// word that its report is complete; read the limits hit, kill whatever
/// else is left in the run's cgroups, send the `H` frame; then wait for
/// C and remove the cgroups.
///
/// P1's word lets the answer go out before the sandbox's namespaces are
/// torn down (a mount namespace of some 70 mounts, a network namespace:
/// about 2.5 ms here): the limits are final once the command's processes
/// are gone, and only C and P1, both ending, may still be in the cgroups.
/// Without the word (P1 died, the watchdog fired) H waits for C first, as
/// before. After the `H` frame H no longer dies with the engine: the
/// clean-up is left to finish even when the engine ends at once (the CLI).
fn watch_child(
    spec: &SandboxSpec,
    child: Child,
    enforcement: Vec<String>,
) -> Result<(), HelperError> {
    drop(child.go);
    let cpid = Pid::from_raw(child.pid);
    let pidfd = sys::pidfd_open(child.pid).map_err(watch("pidfd"))?;
    let watchdog = Duration::from_millis(spec.limits.timeout_ms) + Duration::from_secs(10);
    let mut host = HostReport {
        enforcement,
        ..Default::default()
    };
    let mut done = Some(child.done);
    let mut sandbox_done = false;
    loop {
        let left = watchdog.saturating_sub(child.started.elapsed());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        if let Some(d) = &done {
            fds.push(PollFd::new(d.as_fd(), PollFlags::POLLIN));
        }
        let n = poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        );
        let c_ended = fds[0].any().unwrap_or(false);
        let word = fds.get(1).is_some_and(|f| f.any().unwrap_or(false));
        drop(fds);
        match n {
            Ok(0) => {
                // The sandbox's own timeout did not end it: kill the whole
                // namespace by killing its init's parent (P1 dies with C).
                host.killed_by_watchdog = true;
                let _ = kill(cpid, Signal::SIGKILL);
                break;
            }
            Ok(_) if c_ended => break,
            Ok(_) if word => {
                let mut b = [0u8; 1];
                let got = done.as_ref().map(|d| nix::unistd::read(d, &mut b));
                if matches!(got, Some(Ok(1))) && b[0] == b'd' {
                    sandbox_done = true;
                    break;
                }
                // Closed without the word: wait for C alone.
                done = None;
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(watch("poll")(e)),
        }
    }
    if !sandbox_done {
        let _ = waitpid(cpid, None);
    }
    mark("H7 sandbox done");
    if let Some(plan) = &spec.cgroup {
        host.limits_hit = limits::limits_hit(plan);
        // C and P1 (C's only child) are ending on their own; anything else
        // in the run's cgroups now is a leftover.
        let spare: Vec<i32> = if sandbox_done {
            std::iter::once(child.pid)
                .chain(children_of(child.pid))
                .collect()
        } else {
            Vec::new()
        };
        host.leftover_processes_killed = limits::kill_all_but(plan, &spare);
    }
    host.timings_us = super::marks_so_far();
    if !sandbox_done && !host.limits_hit.is_empty() {
        // The sandbox ended without its report (its init killed: a full
        // memory limit picks it, the biggest process left) and may have
        // been cut off mid-frame, so that the `H` frame below cannot be
        // read: the limits go to stderr too, which the engine shows.
        super::super::wire::note_limits_on_stderr(&host.limits_hit);
    }
    send_host_report(&host)?;
    // The answer is out: finish the clean-up even if the engine ends now.
    let _ = nix::sys::prctl::set_pdeathsig(None);
    if sandbox_done {
        let _ = waitpid(cpid, None);
    }
    if let Some(plan) = &spec.cgroup {
        limits::kill_all_but(plan, &[]);
        limits::remove_run_cgroups(plan);
    }
    Ok(())
}

/// The host pids of `pid`'s children.
fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// H6: the `H` frame, last on the helper's stdout.
fn send_host_report(host: &HostReport) -> Result<(), HelperError> {
    let mut out = FdWriter(OUT_FD);
    wire::write_json(&mut out, wire::TAG_HOST, host).map_err(watch("answer"))
}
