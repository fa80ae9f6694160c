//! Resource limits: cgroups where dryrun may create them (root: v1
//! controllers or a v2 hierarchy with the controllers enabled), rlimits
//! otherwise and always as a second line.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::spec::{CgroupPlan, SandboxLimits};
use crate::model::LimitHit;

const V1_ROOT: &str = "/sys/fs/cgroup";

/// Decide where a run's cgroups go. `None` when this process cannot create
/// cgroups (not root, or no usable controllers).
pub(crate) fn plan_cgroups(run_id: &str) -> Option<CgroupPlan> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let root = Path::new(V1_ROOT);
    // cgroup v2 with controllers available at the root.
    if let Ok(ctrl) = std::fs::read_to_string(root.join("cgroup.controllers")) {
        if ctrl.split_whitespace().any(|c| c == "memory")
            && ctrl.split_whitespace().any(|c| c == "pids")
        {
            return Some(CgroupPlan {
                dirs: Vec::new(),
                unified: Some(root.join("dryrun").join(run_id)),
            });
        }
        return None;
    }
    let mut dirs = Vec::new();
    for c in ["memory", "pids", "cpu"] {
        let d = root.join(c);
        if d.join("cgroup.procs").exists() {
            dirs.push((c.to_string(), d.join("dryrun").join(run_id)));
        }
    }
    if dirs.is_empty() {
        None
    } else {
        Some(CgroupPlan {
            dirs,
            unified: None,
        })
    }
}

fn write(p: &Path, v: &str) -> std::io::Result<()> {
    std::fs::write(p, v)
}

/// The run's memory cgroup's ceiling. The files a run writes live in
/// memory (the upper layer is a tmpfs of `disk_bytes`, `/tmp` one of
/// `tmp_bytes`) and the kernel charges their pages to the cgroup of the
/// process that wrote them, beside the processes' own memory: the ceiling
/// is the sum, so files that fit their own caps never push the run over
/// its memory limit, and the processes' memory and the files together
/// never exceed it. (A ceiling of `memory_bytes` alone let a command that
/// wrote more files than `memory_mb` fill the cgroup with pages nothing can
/// reclaim, and the OOM killer then ended the sandbox.)
/// The sandbox's init's reserve ([`WalkReserve`]) is added on top.
pub(crate) fn memory_ceiling(limits: &SandboxLimits) -> u64 {
    limits
        .memory_bytes
        .saturating_add(limits.disk_bytes)
        .saturating_add(limits.tmp_bytes)
        .saturating_add(WALK_RESERVE_BYTES)
}

fn ceiling_note(version: &str, limits: &SandboxLimits) -> String {
    format!(
        "memory: cgroup {version} ({} MiB: memory_mb + disk_mb + /tmp + {} MiB the init keeps for the walk)",
        memory_ceiling(limits) >> 20,
        WALK_RESERVE_BYTES >> 20
    )
}

/// What the sandbox's init holds in the run's memory cgroup while the
/// command runs, and gives back once the command's processes are gone.
const WALK_RESERVE_BYTES: u64 = 32 << 20;

/// Memory the sandbox's init touches (so it is charged to the run's memory
/// cgroup) before it forks the command, and unmaps when every process of
/// the command is gone, before it walks the evidence. What a command leaves
/// charged to the cgroup after its processes die (tmpfs inodes and names,
/// attributes, SysV shared memory and message queues: kernel memory no
/// `disk_mb` bounds) can fill the cgroup to its ceiling, and the walk, the
/// cgroup's only allocator then, would be OOM-killed: the reserve is the
/// room it walks in. Not inherited by the command (`MADV_DONTFORK`).
pub(crate) struct WalkReserve(Option<(*mut libc::c_void, usize)>);

impl WalkReserve {
    /// Hold the reserve when the run has a memory cgroup (otherwise, or
    /// when the mapping fails, nothing is held).
    pub(crate) fn hold(memory_cgroup: bool) -> WalkReserve {
        if !memory_cgroup {
            return WalkReserve(None);
        }
        let len = WALK_RESERVE_BYTES as usize;
        // SAFETY: a fresh private anonymous mapping, written only here and
        // unmapped only by `release`.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return WalkReserve(None);
            }
            libc::madvise(p, len, libc::MADV_DONTFORK);
            std::ptr::write_bytes(p.cast::<u8>(), 1, len);
            WalkReserve(Some((p, len)))
        }
    }

    /// Give the reserve back to the run's cgroup.
    pub(crate) fn release(self) {
        if let Some((p, len)) = self.0 {
            // SAFETY: the mapping made by `hold`, unmapped once.
            unsafe { libc::munmap(p, len) };
        }
    }
}

/// Create the cgroups and set the limits. Returns how each limit is enforced.
pub(crate) fn prepare_cgroups(
    plan: &CgroupPlan,
    limits: &SandboxLimits,
) -> std::io::Result<Vec<String>> {
    let mut how = Vec::new();
    if let Some(dir) = &plan.unified {
        let parent = dir.parent().expect("run cgroup has a parent");
        std::fs::create_dir_all(parent)?;
        let _ = write(
            &parent
                .parent()
                .unwrap_or(parent)
                .join("cgroup.subtree_control"),
            "+memory +pids +cpu",
        );
        let _ = write(&parent.join("cgroup.subtree_control"), "+memory +pids +cpu");
        std::fs::create_dir_all(dir)?;
        write(&dir.join("memory.max"), &memory_ceiling(limits).to_string())?;
        let _ = write(&dir.join("memory.swap.max"), "0");
        write(&dir.join("pids.max"), &limits.pids.to_string())?;
        let _ = write(&dir.join("cpu.max"), "100000 100000");
        how.push(ceiling_note("v2", limits));
        how.push(OOM_NOTE.into());
        how.push("pids: cgroup v2".into());
        how.push(join_method(plan).into());
        return Ok(how);
    }
    for (ctrl, dir) in &plan.dirs {
        std::fs::create_dir_all(dir)?;
        match ctrl.as_str() {
            "memory" => {
                let ceiling = memory_ceiling(limits).to_string();
                write(&dir.join("memory.limit_in_bytes"), &ceiling)?;
                let _ = write(&dir.join("memory.memsw.limit_in_bytes"), &ceiling);
                how.push(ceiling_note("v1", limits));
                how.push(OOM_NOTE.into());
            }
            "pids" => {
                write(&dir.join("pids.max"), &limits.pids.to_string())?;
                how.push("pids: cgroup v1".into());
            }
            "cpu" => {
                // One CPU's worth of time per period.
                let _ = write(&dir.join("cpu.cfs_period_us"), "100000");
                if write(&dir.join("cpu.cfs_quota_us"), "100000").is_ok() {
                    how.push("cpu: cgroup v1 (1 core)".into());
                }
            }
            _ => {}
        }
    }
    how.push(join_method(plan).into());
    Ok(how)
}

/// Move the calling process (and so everything it forks later) into the
/// cgroups. The caller must be single-threaded.
///
/// On v1 this writes `0` to each controller's `tasks` file: the kernel moves
/// the calling thread alone and skips the global threadgroup lock, whose
/// write side waits for an RCU grace period (7–15 ms here). A single-threaded
/// process is its one thread, so this moves the whole process. On v2 a
/// domain cgroup takes only whole processes (`cgroup.procs`), and that write
/// pays the wait.
pub(crate) fn join_cgroups_self(plan: &CgroupPlan) -> std::io::Result<()> {
    if let Some(dir) = &plan.unified {
        return write(&dir.join("cgroup.procs"), "0");
    }
    for (_, dir) in &plan.dirs {
        write(&dir.join("tasks"), "0")?;
    }
    Ok(())
}

const OOM_NOTE: &str = "oom: the command's processes are the OOM killer's first choice (oom_score_adj 1000), the sandbox's init is not";

/// Whether the run has a memory cgroup.
pub(crate) fn has_memory_cgroup(plan: &CgroupPlan) -> bool {
    plan.unified.is_some() || plan.dirs.iter().any(|(c, _)| c == "memory")
}

/// Whether the run has a pids cgroup.
pub(crate) fn has_pids_cgroup(plan: &CgroupPlan) -> bool {
    plan.unified.is_some() || plan.dirs.iter().any(|(c, _)| c == "pids")
}

/// The calling process (the command, before it execs) and everything it
/// forks become the OOM killer's first choice: when the run's memory
/// cgroup is full the kernel ends the command, not the sandbox's init,
/// which still has the evidence to walk and report (and under memory
/// pressure on the host, a rehearsal goes before the host's own
/// processes). Raising one's own score needs no privilege. The command
/// cannot take it back: Landlock (X5, next) refuses its writes under
/// `/proc`, and below the score it started with the kernel asks for
/// `CAP_SYS_RESOURCE` in the host's namespace. Shielding the init instead
/// (a score of -1000) would need that capability in the host side, which a
/// root daemon in a container may not have.
pub(crate) fn offer_to_oom_killer() -> std::io::Result<()> {
    write(Path::new("/proc/self/oom_score_adj"), "1000")
        .map_err(|e| std::io::Error::other(format!("oom_score_adj: {e}")))
}

/// Remove every System V shared memory segment, message queue and
/// semaphore set of the sandbox's IPC namespace, once the command's
/// processes are gone: they outlive the processes that made them (until
/// the namespace ends with the init) and stay charged to the run's memory
/// cgroup, outside `disk_mb`, taking the room the walk needs. Called by the
/// init, which owns the namespace.
pub(crate) fn drop_ipc_objects() {
    for table in ["shm", "msg", "sem"] {
        let text = std::fs::read_to_string(format!("/proc/sysvipc/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let Some(id) = line.split_whitespace().nth(1).and_then(|w| w.parse().ok()) else {
                continue;
            };
            // SAFETY: IPC_RMID takes no buffer; an id gone meanwhile is an
            // error ignored.
            unsafe {
                match table {
                    "shm" => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    "msg" => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    _ => libc::semctl(id, 0, libc::IPC_RMID),
                };
            }
        }
    }
}

/// How the run joins its cgroups, for the record's enforcement list.
pub(crate) fn join_method(plan: &CgroupPlan) -> &'static str {
    if plan.unified.is_some() {
        "cgroup join: v2 cgroup.procs (waits for the threadgroup lock)"
    } else {
        "cgroup join: v1 single-thread self-move (no threadgroup lock)"
    }
}

fn read_kv(p: &Path, key: &str) -> u64 {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(key)).then(|| it.next().and_then(|v| v.parse().ok()).unwrap_or(0))
        })
        .unwrap_or(0)
}

/// The limits the run's processes hit (its memory cgroup's OOM kills, its
/// pids cgroup refusing a fork), as the cgroups count them now.
pub(crate) fn limits_hit(plan: &CgroupPlan) -> Vec<LimitHit> {
    let mut hit = Vec::new();
    if let Some(u) = &plan.unified {
        if read_kv(&u.join("memory.events"), "oom_kill") > 0 {
            hit.push(LimitHit::Memory);
        }
        if read_kv(&u.join("pids.events"), "max") > 0 {
            hit.push(LimitHit::Pids);
        }
    }
    for (ctrl, dir) in &plan.dirs {
        match ctrl.as_str() {
            "memory" if read_kv(&dir.join("memory.oom_control"), "oom_kill") > 0 => {
                hit.push(LimitHit::Memory);
            }
            "pids" if read_kv(&dir.join("pids.events"), "max") > 0 => {
                hit.push(LimitHit::Pids);
            }
            _ => {}
        }
    }
    hit.sort();
    hit.dedup();
    hit
}

fn run_cgroup_dirs(plan: &CgroupPlan) -> Vec<PathBuf> {
    plan.dirs
        .iter()
        .map(|(_, d)| d.clone())
        .chain(plan.unified.iter().cloned())
        .collect()
}

/// How often the clean-up of a run's cgroups looks again: the host side's
/// first kill is before its answer, so a leftover that dies at once costs
/// that answer at most this.
const CLEANUP_POLL: Duration = Duration::from_millis(10);

/// How long each step of the clean-up (killed processes gone from the run's
/// cgroups; the cgroups removed) goes on before it gives up, for the host
/// side after a run and for recovery alike: one bound, sized by the slowest
/// ordinary case. A SIGKILLed process leaves its cgroups only once it has
/// freed its memory; measured on a busy 2-core host: 0.25-0.45 s for 1 GiB (a
/// run's default memory limit), 1.1 s for 4 GiB, 2.6 s for 8 GiB (the default
/// ceiling), so 5 s covers a run that filled the ceiling, with room for a
/// busier host. Past it is only a process that does not die (stuck in the
/// kernel): the host side's answer goes out anyway, and the cgroups are left
/// to `sweep_stale_cgroups`.
const CLEANUP_WAIT: Duration = Duration::from_secs(5);

/// Call `done` every [`CLEANUP_POLL`] until it says so or [`CLEANUP_WAIT`]
/// has passed.
fn poll_cleanup(mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() && start.elapsed() < CLEANUP_WAIT {
        std::thread::sleep(CLEANUP_POLL);
    }
}

/// SIGKILL every process in the run's cgroups except this one and `spare`
/// (host pids), until none is left; how many distinct processes it killed.
pub(crate) fn kill_all_but(plan: &CgroupPlan, spare: &[i32]) -> u32 {
    let me = std::process::id() as i32;
    let dirs = run_cgroup_dirs(plan);
    let mut killed = std::collections::BTreeSet::new();
    poll_cleanup(|| {
        let mut any = false;
        for dir in &dirs {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                if pid == me || spare.contains(&pid) {
                    continue;
                }
                any = true;
                if nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .is_ok()
                {
                    killed.insert(pid);
                }
            }
        }
        !any
    });
    killed.len() as u32
}

/// Remove the run's (empty) cgroups, retrying while their last processes
/// finish exiting.
pub(crate) fn remove_run_cgroups(plan: &CgroupPlan) {
    let dirs = run_cgroup_dirs(plan);
    poll_cleanup(|| {
        dirs.iter()
            .all(|d| std::fs::remove_dir(d).is_ok() || !d.exists())
    });
}

/// Kill whatever is left in an interrupted run's cgroups and remove them
/// (recovery after a crash, or a run whose helper was killed): the host
/// side's own clean-up, with nothing spared.
pub(crate) fn reap_run_cgroups(run_id: &str) {
    let Some(plan) = plan_cgroups(run_id) else {
        return;
    };
    kill_all_but(&plan, &[]);
    remove_run_cgroups(&plan);
}

pub(crate) fn sweep_stale_cgroups() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let mut bases = vec![Path::new(V1_ROOT).join("dryrun")];
    for c in ["memory", "pids", "cpu"] {
        bases.push(Path::new(V1_ROOT).join(c).join("dryrun"));
    }
    for b in bases {
        if let Ok(rd) = std::fs::read_dir(&b) {
            for e in rd.flatten() {
                // A run that is just starting has an empty cgroup too: only
                // sweep ones that are clearly stale.
                let stale = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(24 * 3600))
                    .unwrap_or(false);
                if stale {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
    }
}

/// rlimits for the command: always no core dumps, a file-size cap and a CPU
/// time cap; processes and memory only when no cgroup enforces them. Returns
/// `(resource, soft, hard, description)`; applied by the command's process.
pub(crate) fn rlimit_plan(
    limits: &SandboxLimits,
    cgroup_memory: bool,
    cgroup_pids: bool,
) -> Vec<(nix::sys::resource::Resource, u64, u64, Option<String>)> {
    use nix::sys::resource::Resource;
    let cpu = limits.timeout_ms / 1000 + 2;
    let mut plan = vec![
        (Resource::RLIMIT_CORE, 0, 0, None),
        (
            Resource::RLIMIT_FSIZE,
            limits.disk_bytes,
            limits.disk_bytes,
            None,
        ),
        (
            Resource::RLIMIT_CPU,
            cpu,
            cpu + 1,
            Some(format!("cpu: rlimit ({cpu} s of CPU time)")),
        ),
    ];
    if !cgroup_pids {
        plan.push((
            Resource::RLIMIT_NPROC,
            limits.pids,
            limits.pids,
            Some("pids: rlimit (RLIMIT_NPROC, per sandbox user)".into()),
        ));
    }
    if !cgroup_memory {
        plan.push((
            Resource::RLIMIT_DATA,
            limits.memory_bytes,
            limits.memory_bytes,
            Some("memory: rlimit (RLIMIT_DATA, per process)".into()),
        ));
    }
    plan
}
