//! The sandbox helper: `dryrun __sandbox-helper`, a fresh exec of our own
//! binary, single-threaded from start to end. It never runs inside a tokio
//! process; the engine spawns it and reads its answer (see `wire`).
//!
//! Process tree and the fixed order of steps (docs/design.md repeats it):
//!
//! ```text
//! engine ──spawn──▶ H (host side)                 ──fork──▶ C ──fork──▶ P1 (pid 1) ──fork──▶ CMD
//! ```
//!
//! H, on the host:
//!  H1. die with the engine (PDEATHSIG), read the spec from stdin, stdin := /dev/null,
//!      close every fd but 0-2.
//!  H2. (root) create the run's cgroups and set their limits.
//!  H3. (root) private mount namespace; detached clone of the workspace mount.
//!  H4. fork C; C unshares a user namespace; H writes its id maps
//!      (root: a shifted unprivileged range, never host 0; user: itself only).
//!  H5. (root) make the clone an idmapped mount through C's user namespace and
//!      attach it at /tmp/lower of H's private namespace.
//!  H6. release C, move it into the cgroups (C waits for that before it
//!      forks P1, so everything of the run is inside); watch it with a pidfd and a watchdog deadline; afterwards
//!      read which cgroup limits were hit, kill leftovers, remove the cgroups,
//!      send the `H` frame.
//!
//! C: becomes id 0 of its user namespace (root plan), unshares mount, pid,
//! net, ipc, uts and cgroup namespaces, forks P1 and waits for it.
//!
//! P1, pid 1 of the new pid namespace, still holding its namespace
//! capabilities:
//!  P1. open the lower layer (O_PATH) before anything is mounted over it.
//!  P2. base tmpfs over /tmp; a size-capped tmpfs for the overlay upper layer
//!      (owner and mode of the workspace root copied onto it).
//!  P3. new root tmpfs; image binds (ro, nosuid, nodev, submounts too); masks.
//!  P4. fresh size-capped /tmp; the workspace overlay at its absolute path.
//!  P5. minimal /dev; new /proc with kernel knobs read-only.
//!  P6. pivot_root, detach the old root, remount / read-only.
//!  P7. hostname, loopback up, nested user namespaces capped to 0.
//!  P8. per step: fork CMD, supervise (output cap, timeout), then kill every
//!      process left in the namespace.
//!  P9. walk the upper layer (evidence), stream blobs and the `R` frame.
//!
//! CMD, before exec:
//!  X1. new session (no controlling terminal), stdin /dev/null, stdout and
//!      stderr to P1's pipes, every other fd closed, cwd = workspace.
//!  X2. rlimits.
//!  X3. supplementary groups cleared, bounding set emptied, securebits locked,
//!      setresgid/setresuid to the run ids, ambient/effective/permitted/
//!      inheritable capabilities cleared.
//!  X4. no_new_privs.
//!  X5. Landlock.
//!  X6. seccomp (last).
//!  X7. execve(bash -c STEP) with the prepared environment only.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, open};
use nix::mount::MsFlags;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{Signal, kill};
use nix::sys::stat::Mode;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid, dup2_stderr, dup2_stdin, dup2_stdout, pipe2};

use super::mounts;
use super::spec::{IdPlan, SandboxSpec};
use super::sys;
use super::wire::{self, Blocked, HostReport, RehearsalReport, SetupFailure, StepOutcome};
use crate::model::{BlockedKind, LimitHit};
use crate::workspace::diff::{BlobSink, walk_upper_layer};

/// The hidden subcommand that starts the helper.
pub const HELPER_ARG: &str = "__sandbox-helper";

/// Where H attaches the idmapped lower layer inside its private namespace.
const STAGE_LOWER: &str = "/tmp/dryrun-lower";
/// Where H attaches this binary for the stubs (root plan).
const STAGE_EXE: &str = "/tmp/dryrun-exe";
/// P1's scratch base (a tmpfs over /tmp in the sandbox's mount namespace).
const BASE: &str = "/tmp";
const OUT_FD: RawFd = 1;
/// Inodes in the upper layer and in /tmp (each a tmpfs): bounds how many
/// entries a command can create, and so the size of the evidence.
const MAX_INODES: u64 = 50_000;

type StageResult<T> = Result<T, (String, String)>;

/// Phase marks (µs since the engine started the run), copied into every
/// forked stage; P1 reports them.
static MARKS: std::sync::Mutex<Vec<(String, u64)>> = std::sync::Mutex::new(Vec::new());
static T0_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn monotonic_ns() -> u64 {
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

fn fail<E: std::fmt::Display>(stage: &str) -> impl FnOnce(E) -> (String, String) + '_ {
    move |e| (stage.to_string(), e.to_string())
}

fn send_failure(stage: &str, message: &str) {
    let f = SetupFailure {
        stage: stage.into(),
        message: message.into(),
    };
    let mut out = FdWriter(OUT_FD);
    let _ = wire::write_json(&mut out, wire::TAG_ERROR, &f);
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
    let code = match host_stage() {
        Ok(()) => 0,
        Err((stage, message)) => {
            send_failure(&stage, &message);
            125
        }
    };
    sys::exit_now(code)
}

fn host_stage() -> StageResult<()> {
    // H1
    sys::die_with_parent().map_err(fail("H1 pdeathsig"))?;
    let mut raw = Vec::new();
    std::io::stdin()
        .lock()
        .take(16 << 20)
        .read_to_end(&mut raw)
        .map_err(fail("H1 read spec"))?;
    let spec: SandboxSpec = serde_json::from_slice(&raw).map_err(fail("H1 parse spec"))?;
    T0_NS.store(spec.t0_ns, std::sync::atomic::Ordering::Relaxed);
    mark("H1 helper started");
    if nix::unistd::getppid().as_raw() != spec.parent_pid {
        return Err((
            "H1".into(),
            "the engine that started this helper is gone".into(),
        ));
    }
    let devnull = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(fail("H1 /dev/null"))?;
    dup2_stdin(&devnull).map_err(fail("H1 stdin"))?;
    drop(devnull);
    // No Rust handle refers to fds >= 3 at this point.
    sys::close_fds_from(3).map_err(fail("H1 close fds"))?;
    // The stubs' interpreter (this binary), opened on the host's mounts
    // before any of ours can cover its path (the workspace staging under
    // /tmp, P1's tmpfs); the forked stages inherit it, the command never
    // does (CMD closes every fd past 4).

    // H2
    mark("H2 cgroups");
    let mut enforcement = Vec::new();
    if let Some(plan) = &spec.cgroup {
        enforcement =
            super::limits::prepare_cgroups(plan, &spec.limits).map_err(fail("H2 cgroups"))?;
    }

    // H3
    mark("H3 mount ns");
    let shifted = matches!(spec.ids, IdPlan::Shifted { .. });
    let mut clone_fd: Option<OwnedFd> = None;
    let mut exe_clone: Option<OwnedFd> = None;
    if shifted {
        unshare(CloneFlags::CLONE_NEWNS).map_err(fail("H3 unshare mount ns"))?;
        mounts::make_rprivate().map_err(fail("H3"))?;
        let fd = sys::open_tree_clone(&spec.workspace).map_err(fail("H3 open_tree workspace"))?;
        check_workspace_identity(&fd, spec.workspace_identity).map_err(fail("H3"))?;
        clone_fd = Some(fd);
        if !spec.stubs.rules.is_empty() {
            // The stubs' interpreter (this binary), staged for P1 beside the
            // lower layer: a mount of H's namespace P1 can open by path.
            let exe = std::fs::read_link("/proc/self/exe").map_err(fail("H3 own exe"))?;
            exe_clone = Some(sys::open_tree_clone(&exe).map_err(fail("H3 open_tree exe"))?);
        }
    }

    // H4
    mark("H4 fork + user ns");
    let (ready_r, ready_w) = pipe2(OFlag::O_CLOEXEC).map_err(fail("H4 pipe"))?;
    let (go_r, go_w) = pipe2(OFlag::O_CLOEXEC).map_err(fail("H4 pipe"))?;
    let started = Instant::now();
    let h_pid = std::process::id() as i32;
    let c = sys::fork_single_threaded().map_err(fail("H4 fork"))?;
    if c == 0 {
        drop(ready_r);
        drop(go_w);
        drop(clone_fd);
        let code = match child_stage(&spec, ready_w, go_r, h_pid) {
            Ok(code) => code,
            Err((stage, message)) => {
                send_failure(&stage, &message);
                125
            }
        };
        sys::exit_now(code);
    }
    drop(ready_w);
    drop(go_r);
    let cpid = Pid::from_raw(c);
    let mut b = [0u8; 1];
    let n = nix::unistd::read(&ready_r, &mut b).map_err(fail("H4 wait for user namespace"))?;
    if n != 1 {
        let _ = waitpid(cpid, None);
        return Err((
            "H4".into(),
            "the sandbox process died before creating its user namespace".into(),
        ));
    }
    write_id_maps(c, &spec.ids).map_err(fail("H4 id maps"))?;

    // H5
    mark("H5 idmapped lower");
    if let Some(fd) = clone_fd.take() {
        let userns =
            std::fs::File::open(format!("/proc/{c}/ns/user")).map_err(fail("H5 userns fd"))?;
        sys::mount_setattr_idmap(
            fd.as_raw_fd(),
            sys::MOUNT_ATTR_IDMAP
                | sys::MOUNT_ATTR_RDONLY
                | sys::MOUNT_ATTR_NOSUID
                | sys::MOUNT_ATTR_NODEV,
            userns.as_raw_fd(),
        )
        .map_err(fail("H5 idmap workspace"))?;
        mounts::mount_tmpfs(Path::new("/tmp"), 65536, 0o755, MsFlags::empty())
            .map_err(fail("H5"))?;
        std::fs::create_dir(STAGE_LOWER).map_err(fail("H5 stage"))?;
        sys::move_mount_to(fd.as_raw_fd(), Path::new(STAGE_LOWER))
            .map_err(fail("H5 attach lower"))?;
        if let Some(e) = exe_clone.take() {
            std::fs::write(STAGE_EXE, b"").map_err(fail("H5 stage exe"))?;
            sys::move_mount_to(e.as_raw_fd(), Path::new(STAGE_EXE))
                .map_err(fail("H5 attach exe"))?;
        }
    }

    // H6
    mark("H6 released");
    nix::unistd::write(&go_w, b"g").map_err(fail("H6 release"))?;
    if let Some(plan) = &spec.cgroup {
        // Moving a process between v1 cgroups waits for an RCU grace period
        // (~10 ms); C creates its namespaces meanwhile and waits for this
        // before it forks anything.
        super::limits::join_cgroups(plan, c).map_err(fail("H6 join cgroups"))?;
        mark("H6 cgroups joined");
        nix::unistd::write(&go_w, b"c").map_err(fail("H6 release"))?;
    }
    drop(go_w);
    let pidfd = sys::pidfd_open(c).map_err(fail("H6 pidfd"))?;
    let watchdog = Duration::from_millis(spec.limits.timeout_ms) + Duration::from_secs(10);
    let mut host = HostReport {
        enforcement,
        ..Default::default()
    };
    loop {
        let left = watchdog.saturating_sub(started.elapsed());
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => {
                // The sandbox's own timeout did not end it: kill the whole
                // namespace by killing its init's parent (P1 dies with C).
                host.killed_by_watchdog = true;
                let _ = kill(cpid, Signal::SIGKILL);
                break;
            }
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(("H6 poll".into(), e.to_string())),
        }
    }
    let _ = waitpid(cpid, None);
    if let Some(plan) = &spec.cgroup {
        let (hit, killed) = super::limits::collect_and_remove(plan);
        host.limits_hit = hit;
        host.leftover_processes_killed = killed;
    }
    let mut out = FdWriter(OUT_FD);
    wire::write_json(&mut out, wire::TAG_HOST, &host).map_err(fail("H6 answer"))?;
    Ok(())
}

fn write_id_maps(child: i32, ids: &IdPlan) -> std::io::Result<()> {
    let base = format!("/proc/{child}");
    match ids {
        IdPlan::Shifted {
            host_base, count, ..
        } => {
            std::fs::write(
                format!("{base}/uid_map"),
                format!("0 {host_base} {count}\n"),
            )?;
            std::fs::write(
                format!("{base}/gid_map"),
                format!("0 {host_base} {count}\n"),
            )?;
        }
        IdPlan::SelfOnly { uid, gid } => {
            std::fs::write(format!("{base}/setgroups"), "deny")?;
            std::fs::write(format!("{base}/uid_map"), format!("{uid} {uid} 1\n"))?;
            std::fs::write(format!("{base}/gid_map"), format!("{gid} {gid} 1\n"))?;
        }
    }
    Ok(())
}

fn child_stage(
    spec: &SandboxSpec,
    ready_w: OwnedFd,
    go_r: OwnedFd,
    h_pid: i32,
) -> StageResult<i32> {
    sys::die_with_parent().map_err(fail("C pdeathsig"))?;
    if nix::unistd::getppid().as_raw() != h_pid {
        return Err(("C".into(), "the host side of the helper is gone".into()));
    }
    unshare(CloneFlags::CLONE_NEWUSER).map_err(fail("C unshare user ns"))?;
    nix::unistd::write(&ready_w, b"r").map_err(fail("C ready"))?;
    drop(ready_w);
    let mut b = [0u8; 1];
    if nix::unistd::read(&go_r, &mut b).map_err(fail("C wait"))? != 1 {
        return Err(("C".into(), "the host side of the helper gave up".into()));
    }
    if let IdPlan::Shifted { .. } = spec.ids {
        nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
            .map_err(fail("C setresgid"))?;
        nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
            .map_err(fail("C setresuid"))?;
        nix::unistd::setgroups(&[]).map_err(fail("C setgroups"))?;
        // Changing credentials clears the parent-death signal: set it again,
        // then make sure H did not die in between.
        sys::die_with_parent().map_err(fail("C pdeathsig"))?;
        if nix::unistd::getppid().as_raw() != h_pid {
            return Err(("C".into(), "the host side of the helper is gone".into()));
        }
    }
    let mut namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    if !spec.network_host {
        namespaces |= CloneFlags::CLONE_NEWNET;
    }
    unshare(namespaces).map_err(fail("C unshare namespaces"))?;
    if spec.cgroup.is_some() && nix::unistd::read(&go_r, &mut b).map_err(fail("C wait"))? != 1 {
        return Err(("C".into(), "the run's cgroups could not be joined".into()));
    }
    drop(go_r);
    // P1 cannot see C (it is outside the new pid namespace); it watches this
    // pipe instead: HUP means C is gone.
    let (alive_r, alive_w) = pipe2(OFlag::O_CLOEXEC).map_err(fail("C pipe"))?;
    let p1 = sys::fork_single_threaded().map_err(fail("C fork init"))?;
    if p1 == 0 {
        drop(alive_w);
        let code = match init_stage(spec, alive_r) {
            Ok(()) => 0,
            Err((stage, message)) => {
                send_failure(&stage, &message);
                125
            }
        };
        sys::exit_now(code);
    }
    loop {
        match waitpid(Pid::from_raw(p1), None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(..)) => return Ok(125),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(("C wait init".into(), e.to_string())),
        }
    }
}

/// Blob sink writing `B` frames to fd 1, within the run's kept-content
/// budget (the host enforces the same number).
struct FrameSink {
    room: u64,
}
impl BlobSink for FrameSink {
    fn reserve(&mut self, len: u64) -> bool {
        match self.room.checked_sub(len) {
            Some(left) => {
                self.room = left;
                true
            }
            None => false,
        }
    }

    fn put(
        &mut self,
        hash: &blake3::Hash,
        len: u64,
        content: &mut dyn Read,
    ) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, FdWriter(OUT_FD));
        wire::write_blob(&mut out, hash, len, content)?;
        out.flush()
    }
}

struct RunIds {
    uid: u32,
    gid: u32,
    shifted: bool,
}

fn init_stage(spec: &SandboxSpec, parent_alive: OwnedFd) -> StageResult<()> {
    sys::die_with_parent().map_err(fail("P pdeathsig"))?;
    let mut pfd = [PollFd::new(parent_alive.as_fd(), PollFlags::POLLIN)];
    if poll(&mut pfd, PollTimeout::ZERO).is_ok_and(|n| n > 0) {
        // C died before the death signal was armed.
        sys::exit_now(125);
    }
    drop(parent_alive);
    let _ = nix::sys::prctl::set_dumpable(false);
    let ids = match spec.ids {
        IdPlan::Shifted {
            run_uid, run_gid, ..
        } => RunIds {
            uid: run_uid,
            gid: run_gid,
            shifted: true,
        },
        IdPlan::SelfOnly { uid, gid } => RunIds {
            uid,
            gid,
            shifted: false,
        },
    };
    let ws = spec.workspace.as_path();

    // P1
    mark("P1 init started");
    mounts::make_rprivate().map_err(fail("P1"))?;
    let lower_path: &Path = if ids.shifted {
        Path::new(STAGE_LOWER)
    } else {
        ws
    };
    let lower = open(
        lower_path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail("P1 open workspace"))?;
    if !ids.shifted {
        check_workspace_identity(&lower, spec.workspace_identity).map_err(fail("P1"))?;
    }
    let lower_root_meta = std::fs::metadata(format!("/proc/self/fd/{}", lower.as_raw_fd()))
        .map_err(fail("P1 stat workspace"))?;
    let lower_proc_path = PathBuf::from(format!("/proc/self/fd/{}", lower.as_raw_fd()));
    // The stubs' interpreter (this binary), opened through this namespace's
    // mounts while its path is still visible (a tmpfs covers /tmp next).
    // The stubs' interpreter, opened through this namespace's mounts while
    // its path is still visible (P2 covers /tmp).
    let exe_owned = if spec.stubs.rules.is_empty() {
        None
    } else if ids.shifted {
        Some(
            open(STAGE_EXE, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(fail("P1 stub interpreter"))?,
        )
    } else {
        Some(super::stubs::open_own_exe().map_err(fail("P1 stub interpreter"))?)
    };
    let exe_fd = exe_owned.as_ref();

    // P2
    mark("P2 upper");
    let base = Path::new(BASE);
    mounts::mount_tmpfs(base, 1 << 20, 0o755, MsFlags::empty()).map_err(fail("P2"))?;
    let upper_mnt = base.join("upper");
    mounts::mkdir_p(&upper_mnt, 0o755).map_err(fail("P2"))?;
    mounts::mount_tmpfs_capped(&upper_mnt, spec.limits.disk_bytes, MAX_INODES, 0o755)
        .map_err(fail("P2 upper"))?;
    let upper = upper_mnt.join("data");
    let work = upper_mnt.join("work");
    mounts::mkdir_p(&work, 0o700).map_err(fail("P2"))?;
    {
        use std::os::unix::fs::MetadataExt;
        mounts::mkdir_p(&upper, lower_root_meta.mode() & 0o7777).map_err(fail("P2"))?;
        // Only possible when the owner is mapped; otherwise the root stays ours.
        let _ = nix::unistd::chown(
            &upper,
            Some(Uid::from_raw(lower_root_meta.uid())),
            Some(Gid::from_raw(lower_root_meta.gid())),
        );
    }
    let empty_file = base.join("empty");
    std::fs::write(&empty_file, b"").map_err(fail("P2 empty file"))?;

    // P3
    mark("P3 image");
    let root = base.join("root");
    mounts::mkdir_p(&root, 0o755).map_err(fail("P3"))?;
    // The stubs' table, serialized once: written into the root, which
    // needs room for it (a replay's holds every recorded call) and a page
    // per script.
    let stub_table_json = if spec.stubs.rules.is_empty() {
        Vec::new()
    } else {
        serde_json::to_vec(&spec.stubs).map_err(fail("P3 stub table"))?
    };
    let stubs_bytes = if stub_table_json.is_empty() {
        0
    } else {
        stub_table_json.len() as u64 + spec.stubs.tools().len() as u64 * 4096 + 4096
    };
    // The image directories of the command's PATH: stubs cover copies of
    // their tools there too, and go on PATH just before the first of them.
    let command_path = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("", |(_, v)| v.as_str());
    let image_path_dirs = super::stubs::image_path_dirs(command_path, &spec.workspace);
    mounts::mount_tmpfs(&root, (1 << 20) + stubs_bytes, 0o755, MsFlags::empty())
        .map_err(fail("P3 root"))?;
    let masked = mounts::build_image(&root, &spec.image, &empty_file).map_err(fail("P3 image"))?;
    let stubbed_tools = if spec.stubs.rules.is_empty() {
        Vec::new()
    } else {
        let exe = exe_fd.ok_or_else(|| {
            (
                "P3 stubs".to_string(),
                "the stub interpreter was not opened".to_string(),
            )
        })?;
        super::stubs::install_stubs(
            &root,
            &spec.stubs,
            &stub_table_json,
            exe,
            ids.uid,
            ids.gid,
            &image_path_dirs,
        )
        .map_err(fail("P3 stubs"))?
    };

    // P4
    mark("P4 tmp + overlay");
    let tmp = root.join("tmp");
    mounts::mkdir_p(&tmp, 0o1777).map_err(fail("P4"))?;
    mounts::mount_tmpfs_capped(&tmp, spec.limits.tmp_bytes, MAX_INODES, 0o1777)
        .map_err(fail("P4 /tmp"))?;
    let home = tmp.join("home");
    mounts::mkdir_p(&home, 0o700).map_err(fail("P4 home"))?;
    let _ = nix::unistd::chown(
        &home,
        Some(Uid::from_raw(ids.uid)),
        Some(Gid::from_raw(ids.gid)),
    );
    let ws_in_root = root.join(ws.strip_prefix("/").unwrap_or(ws));
    std::fs::create_dir_all(&ws_in_root).map_err(fail("P4 workspace mount point"))?;
    mounts::mount_overlay(&ws_in_root, &lower_proc_path, &upper, &work)
        .map_err(fail("P4 overlay"))?;
    let upper_fd = open(
        &upper,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail("P4 upper fd"))?;

    // P5
    mark("P5 dev + proc");
    mounts::build_dev(&root).map_err(fail("P5 /dev"))?;
    mounts::mount_proc(&root).map_err(fail("P5 /proc"))?;

    // P6
    mark("P6 pivot");
    mounts::pivot_into(&root).map_err(fail("P6"))?;
    mounts::remount_ro(Path::new("/")).map_err(fail("P6 ro root"))?;

    // P7
    mark("P7 net + prep");
    nix::unistd::sethostname(&spec.image.hostname).map_err(fail("P7 hostname"))?;
    if !spec.network_host {
        sys::loopback_up().map_err(fail("P7 loopback"))?;
    }
    let nested_userns_capped = std::fs::write("/proc/sys/user/max_user_namespaces", "0").is_ok();

    // Everything CMD needs, prepared before forking.
    let kernel_abi = super::probe::landlock_abi();
    if kernel_abi < spec.landlock.min_abi && !spec.landlock.allow_degraded {
        return Err((
            "P7 landlock".into(),
            format!(
                "the kernel offers Landlock ABI {kernel_abi}, below the required minimum {}",
                spec.landlock.min_abi
            ),
        ));
    }
    let filter = super::seccomp::compile_filter().map_err(fail("P7 seccomp"))?;
    let cg = spec.cgroup.as_ref();
    let cg_mem =
        cg.is_some_and(|c| c.unified.is_some() || c.dirs.iter().any(|(n, _)| n == "memory"));
    let cg_pids =
        cg.is_some_and(|c| c.unified.is_some() || c.dirs.iter().any(|(n, _)| n == "pids"));
    let rlimits = super::limits::rlimit_plan(&spec.limits, cg_mem, cg_pids);
    let env: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| {
            // Stubbed tools are found on PATH before the image's copies
            // (also those the host lacks).
            if k == "PATH" && !stubbed_tools.is_empty() {
                CString::new(format!(
                    "{k}={}",
                    super::stubs::path_with_stubs(v, &image_path_dirs)
                ))
            } else {
                CString::new(format!("{k}={v}"))
            }
        })
        .collect::<Result<_, _>>()
        .map_err(fail("P7 env"))?;
    let shell = CString::new(spec.shell.as_os_str().as_bytes()).map_err(fail("P7 shell"))?;

    let mut report = RehearsalReport {
        landlock_abi: kernel_abi.min(super::landlock::NEWEST_KNOWN_ABI),
        seccomp: true,
        ..Default::default()
    };
    for m in &masked {
        report.stripped.push(format!("masked:{}", m.display()));
    }
    report.stripped.push("network".into());
    for t in &stubbed_tools {
        report.stripped.push(format!("stub:{t}"));
    }
    if !stubbed_tools.is_empty() {
        report.enforcement.push(format!(
            "stubs: {} shadowed by {} (on PATH first and over each copy in the image)",
            stubbed_tools.join(", "),
            super::stubs::STUB_BIN_DIR
        ));
    }
    report.stubbed_tools = stubbed_tools.clone();
    if !nested_userns_capped {
        report
            .enforcement
            .push("nested user namespaces: seccomp only".into());
    } else {
        report
            .enforcement
            .push("nested user namespaces: seccomp + max_user_namespaces=0".into());
    }
    for (_, _, _, d) in &rlimits {
        if let Some(d) = d {
            report.enforcement.push(d.clone());
        }
    }

    // P8
    mark("P8 steps");
    let cx = CmdContext {
        ws,
        ids: &ids,
        rlimits: &rlimits,
        kernel_abi,
        allow_degraded: spec.landlock.allow_degraded,
        network_host: spec.network_host,
        stubs: !report.stubbed_tools.is_empty(),
        filter: &filter,
        env: &env,
        shell: &shell,
    };
    let deadline = Instant::now() + Duration::from_millis(spec.limits.timeout_ms);
    let mut out_buf = OutputBuffer::new(spec.limits.output_bytes);
    let started = Instant::now();
    for step in &spec.steps {
        let outcome = run_step(&cx, step, deadline, &mut out_buf, &mut report)?;
        let failed = outcome.exit_code != Some(0);
        report.exit_code = outcome.exit_code;
        report.signal = outcome.signal;
        report.steps.push(outcome);
        if failed || report.timed_out {
            break;
        }
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    if !report.stubbed_tools.is_empty() {
        let (actions, dropped) = super::stubs::collect_calls(&spec.stubs);
        report.would_be_actions = actions;
        report.would_be_actions_dropped = dropped;
    }
    report.output_truncated = out_buf.truncated;
    if out_buf.truncated {
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
    report
        .blocked
        .extend(denied_writes_reported(&out_buf.stderr));
    report.stdout = out_buf.stdout;
    report.stderr = out_buf.stderr;
    report.landlock_status = if kernel_abi >= 1 {
        format!("ABI {} enforced on the command", report.landlock_abi)
    } else {
        "not available (degraded mode)".into()
    };

    // Disk caps: a full upper layer or /tmp means the run hit its disk limit.
    for (what, fd_or_path) in [
        (
            LimitHit::Disk,
            format!("/proc/self/fd/{}", upper_fd.as_raw_fd()),
        ),
        (LimitHit::Disk, "/tmp".to_string()),
    ] {
        // Full, or so nearly full (under 1 MiB or 1% left) that the last
        // write or allocation that failed is taken to have hit the cap.
        if let Ok(st) = nix::sys::statvfs::statvfs(fd_or_path.as_str())
            && {
                let unit = st.fragment_size().max(1);
                let total = st.blocks().saturating_mul(unit);
                let free = st.blocks_free().saturating_mul(unit);
                st.blocks_free() == 0 || free < (1u64 << 20).max(total / 100)
            }
        {
            report.limits_hit.push(what);
        }
    }
    report.limits_hit.sort();
    report.limits_hit.dedup();

    // P9
    mark("P9 evidence");
    let upper_path = PathBuf::from(format!("/proc/self/fd/{}", upper_fd.as_raw_fd()));
    let mut sink = FrameSink {
        room: super::spec::kept_content_budget(spec.limits.disk_bytes),
    };
    // Lower files, and upper files the command does not own, are opened by a
    // reader holding only the owner's ids (sandbox/reader.rs).
    let reader = super::reader::LayerReader::start(
        &lower,
        &upper_fd,
        ids.uid,
        ids.gid,
        ids.shifted.then_some(spec.reader_groups.as_slice()),
    )
    .map_err(fail("P9 evidence reader"))?;
    let walked = walk_upper_layer(
        &upper_path,
        &lower,
        ws,
        spec.diff_before_max,
        Some(ids.uid),
        &reader,
        &mut sink,
    )
    .map_err(fail("P9 evidence"))?;
    drop(reader);
    report.changes = walked.changes;
    judge_links_in_merged_tree(ws, &mut report.changes);
    if walked.truncated {
        report.limits_hit.push(LimitHit::Changes);
    }
    if walked.too_deep > 0 {
        report.limits_hit.push(LimitHit::PathDepth);
        report.blocked.push(crate::sandbox::wire::Blocked {
            kind: BlockedKind::Limit,
            detail: format!(
                "{} path(s) lie deeper than the evidence walk can name (PATH_MAX); they are left out of the change set",
                walked.too_deep
            ),
        });
    }
    mark("P9 evidence done");
    report.timings_us = MARKS.lock().map(|m| m.clone()).unwrap_or_default();
    let mut out = FdWriter(OUT_FD);
    wire::write_json(&mut out, wire::TAG_REPORT, &report).map_err(fail("P9 answer"))?;
    Ok(())
}

/// A changed symlink escapes when resolving it in the merged tree (the
/// overlay at the workspace path, as it will be live) can leave the
/// workspace: through other links, `..` included, not by its text alone.
fn judge_links_in_merged_tree(ws: &Path, changes: &mut [crate::workspace::diff::Change]) {
    use crate::workspace::diff::{FileType, LinkLookup, link_leaves_workspace};
    use nix::fcntl::{OpenHow, ResolveFlag};
    let Ok(root) = open(
        ws,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        for c in changes
            .iter_mut()
            .filter(|c| c.file_type == FileType::Symlink)
        {
            c.symlink_escapes = true;
        }
        return;
    };
    let mut lookup = |rel: &[u8]| -> LinkLookup {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
        match nix::fcntl::openat2(&root, std::ffi::OsStr::from_bytes(rel), how) {
            Ok(fd) => match nix::sys::stat::fstat(&fd) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                    match nix::fcntl::readlinkat(&fd, "") {
                        Ok(t) => LinkLookup::Link(t.as_bytes().to_vec()),
                        Err(_) => LinkLookup::Unknown,
                    }
                }
                Ok(_) => LinkLookup::Other,
                Err(_) => LinkLookup::Unknown,
            },
            Err(nix::errno::Errno::ENOENT) | Err(nix::errno::Errno::ENOTDIR) => LinkLookup::Missing,
            Err(_) => LinkLookup::Unknown,
        }
    };
    for c in changes.iter_mut().filter(|c| {
        c.file_type == FileType::Symlink && c.kind != crate::workspace::diff::ChangeKind::Deleted
    }) {
        let rel = c.path_bytes();
        let target = match lookup(&rel) {
            LinkLookup::Link(t) => t,
            _ => {
                c.symlink_escapes = true;
                continue;
            }
        };
        if link_leaves_workspace(&rel, &target, ws, &mut lookup) {
            c.symlink_escapes = true;
        }
    }
}

struct CmdContext<'a> {
    ws: &'a Path,
    ids: &'a RunIds,
    rlimits: &'a [(nix::sys::resource::Resource, u64, u64, Option<String>)],
    kernel_abi: u32,
    allow_degraded: bool,
    network_host: bool,
    stubs: bool,
    filter: &'a [libc::sock_filter],
    env: &'a [CString],
    shell: &'a CString,
}

struct OutputBuffer {
    cap: u64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

impl OutputBuffer {
    fn new(cap: u64) -> Self {
        OutputBuffer {
            cap,
            stdout: Vec::new(),
            stderr: Vec::new(),
            truncated: false,
        }
    }
    /// Append; false once the cap is reached (the caller stops reading).
    fn push(&mut self, is_err: bool, data: &[u8]) -> bool {
        let used = (self.stdout.len() + self.stderr.len()) as u64;
        let room = self.cap.saturating_sub(used) as usize;
        let take = data.len().min(room);
        let buf = if is_err {
            &mut self.stderr
        } else {
            &mut self.stdout
        };
        buf.extend_from_slice(&data[..take]);
        if take < data.len() {
            if !self.truncated {
                self.truncated = true;
                let marker = format!("\n[dryrun: output truncated at {} bytes]\n", self.cap);
                buf.extend_from_slice(marker.as_bytes());
            }
            return false;
        }
        true
    }
}

fn run_step(
    cx: &CmdContext,
    step: &str,
    deadline: Instant,
    out: &mut OutputBuffer,
    report: &mut RehearsalReport,
) -> StageResult<StepOutcome> {
    let (out_r, out_w) = pipe2(OFlag::O_CLOEXEC).map_err(fail("P8 pipe"))?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC).map_err(fail("P8 pipe"))?;
    let (hello_r, hello_w) = pipe2(OFlag::O_CLOEXEC).map_err(fail("P8 pipe"))?;
    let (ack_r, ack_w) = pipe2(OFlag::O_CLOEXEC).map_err(fail("P8 pipe"))?;
    let step_c = CString::new(step).map_err(fail("P8 step"))?;
    let started = Instant::now();
    let pid = sys::fork_single_threaded().map_err(fail("P8 fork"))?;
    if pid == 0 {
        drop(out_r);
        drop(err_r);
        drop(hello_r);
        drop(ack_w);
        let e = exec_command(cx, &step_c, [out_w, err_w, hello_w, ack_r]);
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
    let pidfd = sys::pidfd_open(pid).map_err(fail("P8 pidfd"))?;
    // X6 handshake: the command tells us its seccomp listener's fd number,
    // we copy it out of its table, then let it exec.
    let mut watch: Option<super::netwatch::NetWatch> = None;
    let mut num = [0u8; 4];
    if nix::unistd::read(&hello_r, &mut num).map_err(fail("P8 handshake"))? == 4 {
        let fd = sys::pidfd_getfd(pidfd.as_raw_fd(), i32::from_ne_bytes(num))
            .map_err(fail("P8 listener"))?;
        watch = Some(super::netwatch::NetWatch::new(fd));
        nix::unistd::write(&ack_w, b"k").map_err(fail("P8 handshake"))?;
    }
    drop(ack_w);
    drop(hello_r);
    mark("P8 command released");
    let mut streams: Vec<Option<(OwnedFd, bool)>> = vec![Some((out_r, false)), Some((err_r, true))];
    let mut status: Option<WaitStatus> = None;
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_count = Instant::now();
    loop {
        // Reap orphans re-parented to us so zombies do not pile up.
        reap_others(pid, &mut status);
        if last_count.elapsed() >= Duration::from_millis(50) {
            report.max_processes = report.max_processes.max(count_processes());
            last_count = Instant::now();
        }
        if status.is_some() {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            report.timed_out = true;
            break;
        }
        let left = (deadline - now).min(Duration::from_millis(200));
        let mut fds: Vec<PollFd> = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        if let Some(w) = &watch {
            fds.push(PollFd::new(w.fd.as_fd(), PollFlags::POLLIN));
        }
        let watch_slots = fds.len() - 1;
        let mut map = Vec::new();
        for (i, s) in streams.iter().enumerate() {
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
            Err(e) => return Err(("P8 poll".into(), e.to_string())),
        }
        let ready: Vec<(usize, bool)> = fds
            .iter()
            .enumerate()
            .map(|(i, f)| (i, f.revents().is_some_and(|r| !r.is_empty())))
            .collect();
        drop(fds);
        for (i, is_ready) in ready {
            if !is_ready {
                continue;
            }
            if i == 0 {
                if let Ok(st) = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG))
                    && st != WaitStatus::StillAlive
                {
                    status = Some(st);
                }
                continue;
            }
            if i <= watch_slots {
                if let Some(w) = watch.as_mut() {
                    w.handle_one();
                }
                continue;
            }
            let idx = map[i - 1 - watch_slots];
            if !read_stream(&mut streams[idx], &mut buf, out) {
                streams[idx] = None;
            }
        }
    }
    mark("P8 command ended");
    // Whatever is still running when the command ends is left behind.
    let alive = count_processes();
    report.max_processes = report.max_processes.max(alive);
    // The command is over (or out of time): nothing else of it may survive.
    report.leftover_processes_killed += kill_all_and_reap(pid, &mut status);
    mark("P8 namespace emptied");
    // Drain what is left in the pipes: every writer is dead now.
    for s in streams.iter_mut() {
        while s.is_some() {
            if !read_stream(s, &mut buf, out) {
                *s = None;
            }
        }
    }
    if let Some(w) = watch.take() {
        report.blocked.extend(w.recorded);
        if w.dropped > 0 {
            report.blocked.push(Blocked {
                kind: BlockedKind::Network,
                detail: format!("{} more network attempts not listed", w.dropped),
            });
        }
    }
    let (exit_code, signal) = match status {
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
    Ok(StepOutcome {
        command: step.to_string(),
        exit_code,
        signal,
        duration_ms: started.elapsed().as_millis() as u64,
    })
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

/// The directory about to become the lower layer must be the one the engine
/// checked (same device and inode), whatever its path resolves to now.
fn check_workspace_identity(fd: &OwnedFd, expected: (u64, u64)) -> std::io::Result<()> {
    let st = nix::sys::stat::fstat(fd.as_fd()).map_err(std::io::Error::from)?;
    let got = (st.st_dev, st.st_ino);
    if got != expected {
        return Err(std::io::Error::other(format!(
            "the workspace path now leads to another directory (device/inode {got:?}, checked {expected:?}): it was swapped after the check; nothing ran"
        )));
    }
    Ok(())
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
            crate::workspace::paths::escape_for_humans(line.as_bytes())
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

/// X1–X7 in the forked command process. Returns only on failure.
fn exec_command(cx: &CmdContext, step: &CString, fds: [OwnedFd; 4]) -> std::io::Error {
    match prepare_command(cx, fds) {
        Ok(()) => {}
        Err(e) => return e,
    }
    let argv = [
        CString::new("bash").expect("static"),
        CString::new("-c").expect("static"),
        step.clone(),
    ];
    sys::execve(cx.shell, &argv, cx.env)
}

/// Fixed descriptor numbers for the seccomp handshake (closed before exec).
const HELLO_FD: RawFd = 3;
const ACK_FD: RawFd = 4;

fn prepare_command(cx: &CmdContext, fds: [OwnedFd; 4]) -> std::io::Result<()> {
    let [out_w, err_w, hello_w, ack_r] = fds;
    let io = |what: &'static str| {
        move |e: nix::errno::Errno| std::io::Error::other(format!("{what}: {e}"))
    };
    // X1
    nix::unistd::setsid().map_err(io("setsid"))?;

    let devnull = open(
        "/dev/null",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("/dev/null"))?;
    dup2_stdin(&devnull).map_err(io("stdin"))?;
    dup2_stdout(&out_w).map_err(io("stdout"))?;
    dup2_stderr(&err_w).map_err(io("stderr"))?;
    drop(devnull);
    drop(out_w);
    drop(err_w);
    // Move both out of the way first so neither dup2 clobbers the other.
    let high = |fd: &OwnedFd| {
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(100)).map_err(io("dup"))
    };
    let (hello_hi, ack_hi) = (high(&hello_w)?, high(&ack_r)?);
    sys::dup2_raw(hello_hi, HELLO_FD)?;
    sys::dup2_raw(ack_hi, ACK_FD)?;
    drop(hello_w);
    drop(ack_r);
    // Nothing past fd 4 is used from here on; the lower/upper fds and the
    // helper's answer pipe must not reach the command.
    sys::close_fds_from(ACK_FD as u32 + 1)?;
    nix::unistd::chdir(cx.ws).map_err(io("chdir workspace"))?;
    // X2
    for (res, soft, hard, _) in cx.rlimits {
        nix::sys::resource::setrlimit(*res, *soft, *hard).map_err(io("setrlimit"))?;
    }
    // X3
    if cx.ids.shifted {
        nix::unistd::setgroups(&[]).map_err(io("setgroups"))?;
    }
    for cap in 0..=63u64 {
        match sys::capbset_drop(cap as libc::c_ulong) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break, // past the last cap
            Err(e) => return Err(e),
        }
    }
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    sys::set_securebits(
        SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED
            | SECBIT_NO_CAP_AMBIENT_RAISE
            | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
    )?;
    let g = Gid::from_raw(cx.ids.gid);
    let u = Uid::from_raw(cx.ids.uid);
    nix::unistd::setresgid(g, g, g).map_err(io("setresgid"))?;
    nix::unistd::setresuid(u, u, u).map_err(io("setresuid"))?;
    sys::clear_ambient_caps()?;
    // Not dumpable is inherited from P1 (which hides itself) and set again by
    // the credential change above; the command must be reachable by P1 for
    // the seccomp handshake and the network notifications.
    nix::sys::prctl::set_dumpable(true).map_err(io("dumpable"))?;
    for set in [
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
        caps::CapSet::Inheritable,
    ] {
        caps::clear(None, set)
            .map_err(|e| std::io::Error::other(format!("clear capabilities: {e}")))?;
    }
    // X4
    nix::sys::prctl::set_no_new_privs().map_err(io("no_new_privs"))?;
    // X5
    if cx.kernel_abi >= 1 {
        super::landlock::apply_landlock_on_current_thread(
            cx.kernel_abi,
            cx.ws,
            cx.allow_degraded,
            cx.network_host,
            cx.stubs.then_some(Path::new(super::stubs::CALLS_DIR)),
        )
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    // X6
    let listener = super::seccomp::load_seccomp_filter(cx.filter)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    sys::write_all_fd(HELLO_FD, &listener.to_ne_bytes())?;
    let mut ack = [0u8; 1];
    let ack_file = sys::adopt_fd(ACK_FD);
    let _ = nix::unistd::read(&ack_file, &mut ack);
    drop(ack_file);
    sys::close_raw(listener);
    sys::close_raw(HELLO_FD);
    Ok(())
}
