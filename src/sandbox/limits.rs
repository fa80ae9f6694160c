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
/// The init's room for the walk ([`WalkRoom`]) comes on top once the
/// command is gone.
pub(crate) fn memory_ceiling(limits: &SandboxLimits) -> u64 {
    limits
        .memory_bytes
        .saturating_add(limits.disk_bytes)
        .saturating_add(limits.tmp_bytes)
}

fn ceiling_note(version: &str, limits: &SandboxLimits) -> String {
    format!(
        "memory: cgroup {version} ({} MiB: memory_mb + disk_mb + /tmp; {} MiB more for the init's walk once the command is gone)",
        memory_ceiling(limits) >> 20,
        WALK_ROOM_BYTES >> 20
    )
}

/// The room the sandbox's init gets for the walk once the command is gone
/// ([`WalkRoom`]).
const WALK_ROOM_BYTES: u64 = 32 << 20;

/// The run's memory limit files, opened for writing by the host side (host root)
/// when it made the cgroups and handed down to the sandbox's init, which
/// raises the ceiling by [`WALK_ROOM_BYTES`] once every process of the
/// command is gone, before it walks the evidence. What a command leaves
/// charged to the cgroup after its processes die (tmpfs inodes, names and
/// attributes: kernel memory no `disk_mb` bounds) can fill the cgroup to its
/// ceiling, and the walk, the cgroup's only allocator then, would be
/// OOM-killed: the raise is the room it walks in, and nothing of the
/// command is left to take it. The files are never the command's: its
/// process closes every descriptor past 4 before anything of it runs (X1),
/// and the init gives the room, closing them, before it forks the walk's
/// reader. (A 32 MiB reserve the init touched before the command and
/// unmapped after did the same at 10-20 ms of CPU per run for the page
/// faults; a write here costs microseconds.) A cgroup file opened by the
/// host's root keeps the opener's rights for its writes: the init, in its
/// user namespace, could not open it itself.
pub(crate) struct WalkRoom {
    /// In the order they are raised: v1's `memory.memsw.limit_in_bytes`
    /// must never be below `memory.limit_in_bytes`, so it goes first.
    files: Vec<std::fs::File>,
    /// The raised ceiling, written out ahead: the init allocates nothing
    /// to give the room (an allocation in a full cgroup is what this is
    /// for).
    raised: String,
}

impl WalkRoom {
    /// Raise the ceiling (the caller: the init, once the namespace holds no
    /// process of the command).
    pub(crate) fn give(self) -> std::io::Result<()> {
        use std::io::Write;
        for mut f in &self.files {
            f.write_all(self.raised.as_bytes())?;
        }
        Ok(())
    }
}

/// A cgroup file opened for writing, with `value` written through it; the
/// open file is kept for later writes (the walk's room).
fn open_and_write(p: &Path, value: &str) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(p)?;
    f.write_all(value.as_bytes())?;
    Ok(f)
}

/// Create the cgroups and set the limits. Returns how each limit is
/// enforced, and the files the memory ceiling was written through, kept
/// open as the init's room for the walk ([`WalkRoom`]; none without a
/// memory cgroup).
pub(crate) fn prepare_cgroups(
    plan: &CgroupPlan,
    limits: &SandboxLimits,
) -> std::io::Result<(Vec<String>, Option<WalkRoom>)> {
    let mut how = Vec::new();
    let ceiling = memory_ceiling(limits).to_string();
    let room = |files: Vec<std::fs::File>| {
        (!files.is_empty()).then(|| WalkRoom {
            files,
            raised: memory_ceiling(limits)
                .saturating_add(WALK_ROOM_BYTES)
                .to_string(),
        })
    };
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
        let memory_max = open_and_write(&dir.join("memory.max"), &ceiling)?;
        let _ = write(&dir.join("memory.swap.max"), "0");
        write(&dir.join("pids.max"), &limits.pids.to_string())?;
        if write(
            &dir.join("cpu.max"),
            &format!("{} {CPU_PERIOD_US}", cpu_quota_us(limits)),
        )
        .is_ok()
        {
            how.push(cpu_note("v2", limits));
        }
        how.push(ceiling_note("v2", limits));
        how.push(OOM_NOTE.into());
        how.push("pids: cgroup v2".into());
        how.push(join_method(plan).into());
        return Ok((how, room(vec![memory_max])));
    }
    // Raised in this order: v1's `memory.memsw.limit_in_bytes` must never
    // be below `memory.limit_in_bytes`, so it goes first.
    let mut memory_files = Vec::new();
    for (ctrl, dir) in &plan.dirs {
        std::fs::create_dir_all(dir)?;
        match ctrl.as_str() {
            "memory" => {
                let limit = open_and_write(&dir.join("memory.limit_in_bytes"), &ceiling)?;
                // Only where swap is accounted.
                if let Ok(memsw) =
                    open_and_write(&dir.join("memory.memsw.limit_in_bytes"), &ceiling)
                {
                    memory_files.push(memsw);
                }
                memory_files.push(limit);
                how.push(ceiling_note("v1", limits));
                how.push(OOM_NOTE.into());
            }
            "pids" => {
                write(&dir.join("pids.max"), &limits.pids.to_string())?;
                how.push("pids: cgroup v1".into());
            }
            "cpu" => {
                // `cpus` CPUs' worth of time per period.
                let _ = write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string());
                if write(
                    &dir.join("cpu.cfs_quota_us"),
                    &cpu_quota_us(limits).to_string(),
                )
                .is_ok()
                {
                    how.push(cpu_note("v1", limits));
                }
            }
            _ => {}
        }
    }
    how.push(join_method(plan).into());
    Ok((how, room(memory_files)))
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

/// The CPU controller's period, µs.
const CPU_PERIOD_US: u64 = 100_000;

/// The run's CPU time per [`CPU_PERIOD_US`]: `cpus` CPUs' worth.
fn cpu_quota_us(limits: &SandboxLimits) -> u64 {
    limits.cpus.max(1).saturating_mul(CPU_PERIOD_US)
}

fn cpu_note(version: &str, limits: &SandboxLimits) -> String {
    let n = limits.cpus.max(1);
    format!(
        "cpu: cgroup {version} ({n} CPU{}: {} µs per {CPU_PERIOD_US} µs period)",
        if n == 1 { "" } else { "s" },
        cpu_quota_us(limits)
    )
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

/// How old an empty run cgroup must be before a start of dryrun removes it
/// ([`sweep_stale_cgroups`]). A run's cgroups are empty only between their
/// creation (H2) and C's join, a few milliseconds, and after the run; one
/// still empty this long after its creation belongs to a helper that was
/// killed (its clean-up never ran) or one stopped for that long before C
/// joined, whose join then fails and whose run fails closed saying so.
/// Removing fails anyway on a cgroup with a process in it.
const STALE_CGROUP_AGE: Duration = Duration::from_secs(10 * 60);

/// Remove the empty per-run cgroups older than [`STALE_CGROUP_AGE`], of
/// every dryrun on this host (the cgroups' parent is shared).
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
                let stale = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() > STALE_CGROUP_AGE)
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
    // CPU time adds up over a process's threads: a build's compiler with
    // one thread per CPU spends `cpus` seconds of it per second.
    let cpu = (limits.timeout_ms / 1000 + 2).saturating_mul(limits.cpus.max(1));
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
