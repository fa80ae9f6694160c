//! P1, the sandbox's init (pid 1 of the new pid namespace): the numbered
//! steps P1–P7 that build the sandbox's filesystem view and prepare the
//! command; P8 is in `supervise.rs`, P9 in `evidence.rs`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::MsFlags;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};

use super::super::limits;
use super::super::mounts;
use super::super::spec::{IdPlan, SandboxSpec};
use super::super::wire::RehearsalReport;
use super::super::{landlock, probe, seccomp, sys};
use super::error::{FsError, HelperError, Step};
use super::stubs::StubSetup;
use super::view::ViewSetup;
use super::{STAGE_LOWER, mark};

/// P1's scratch base (a tmpfs over /tmp in the sandbox's mount namespace).
const BASE: &str = "/tmp";
/// Inodes in the upper layer and in /tmp (each a tmpfs): bounds how many
/// entries a command can create, and so the size of the evidence. A
/// dependency install writes tens of thousands of files; 200,000 holds a
/// large one with room, while the change list it produces (at most
/// `walk::MAX_CHANGES` entries, about 500 bytes each in the run record with
/// its receipt) stays within the record's cap.
const MAX_INODES: u64 = 200_000;

/// One rlimit for the command: resource, soft, hard, how the record
/// describes it.
pub(super) type Rlimit = (nix::sys::resource::Resource, u64, u64, Option<String>);

/// The ids the command runs as.
pub(super) struct RunIds {
    pub uid: u32,
    pub gid: u32,
    /// Root plan (a shifted range); otherwise the user's own ids.
    pub shifted: bool,
}

impl RunIds {
    fn of(plan: &IdPlan) -> RunIds {
        match *plan {
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
        }
    }
}

/// The real workspace, opened before anything covers it (P1).
pub(super) struct LowerLayer {
    pub fd: OwnedFd,
    /// The workspace root's mode and owner, copied onto the upper root.
    meta: std::fs::Metadata,
}

impl LowerLayer {
    fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

/// The scratch tmpfs P2 mounts: the overlay's upper and work dirs.
struct Scratch {
    upper: PathBuf,
    work: PathBuf,
    empty_file: PathBuf,
}

/// Everything the command needs (P7), prepared before the first fork.
pub(super) struct CommandPlan {
    pub ws: PathBuf,
    pub ids: RunIds,
    pub rlimits: Vec<Rlimit>,
    pub kernel_abi: u32,
    pub network_host: bool,
    /// The egress proxy's port inside the sandbox: the one TCP port
    /// Landlock lets the command connect to.
    pub egress_port: Option<u16>,
    /// The run's allowlist names anything (else the proxy refuses all).
    pub egress_allows_names: bool,
    /// The declared TCP services' ports: Landlock lets the command connect
    /// to exactly these besides the proxy's.
    pub service_ports: Vec<u16>,
    /// The command's supplementary groups (root plan: the owner's).
    pub groups: Vec<u32>,
    pub calls_dir: Option<&'static Path>,
    /// The throwaway layers outside the workspace (the home, `/tmp`,
    /// `/var/tmp`): Landlock lets the command write beneath them.
    pub writable: Vec<PathBuf>,
    pub filter: Vec<libc::sock_filter>,
    pub env: Vec<CString>,
    pub shell: CString,
    /// The command's umask (the client's).
    pub umask: u32,
}

/// P1's whole life. Never returns.
pub(super) fn run_init(
    spec: &SandboxSpec,
    parent_alive: OwnedFd,
    walk_room: Option<limits::WalkRoom>,
) -> ! {
    super::exit_with(init_main(spec, parent_alive, walk_room).map(|()| 0))
}

fn init_main(
    spec: &SandboxSpec,
    parent_alive: OwnedFd,
    walk_room: Option<limits::WalkRoom>,
) -> Result<(), HelperError> {
    become_init(parent_alive)?;
    let ids = RunIds::of(&spec.ids);
    let lower = open_lower_layer(spec, &ids)?;
    let mut view = ViewSetup::open_lowers(spec, &ids)?;
    let mut stubs = StubSetup::open_interpreter(spec, &ids)?;
    let scratch = mount_upper_layer(spec, &lower, &mut view)?;
    let root = Path::new(BASE).join("root");
    let masked = build_image_root(spec, &root, &scratch, &stubs, &mut view, &ids)?;
    let upper_fd = mount_tmp_and_overlay(spec, &root, &ids, &lower, &scratch, &mut view)?;
    let services_shown = super::services::place_unix_services(spec, &root, Path::new(BASE))?;
    // The stubs last: their view of the real tools is a recursive bind of
    // the root as the command will see it (masks, filtered files, layers,
    // workspace), so it shows nothing the command's own paths do not.
    mark("P4 stubs");
    stubs.install(spec, &root, &ids)?;
    mount_dev_and_proc(spec, &root)?;
    pivot_into_root(&root)?;
    let nested_userns_capped = name_host_and_cut_network(spec)?;
    let plan = prepare_command(spec, ids, &stubs, &view)?;
    let mut report = describe_sandbox(&plan, &masked, &stubs, nested_userns_capped);
    view.describe(&mut report);
    report.enforcement.extend(services_shown);
    report
        .enforcement
        .extend(super::ids::describe_mapped_groups(spec));
    super::egress::await_release(spec)?;
    let output = super::supervise::run_steps(spec, &plan, &mut report)?;
    // Every process of the command is gone (run_steps emptied the namespace).
    give_walk_room(walk_room)?;
    if let Some((path, rule)) = view.moved_mask() {
        return Err(HelperError::MaskMoved { path, rule });
    }
    view.collect_opened_masks(spec, &mut report);
    stubs.collect_calls(spec, &mut report);
    let scratch_trees = view.writable();
    super::supervise::record_output_and_limits(
        spec,
        output,
        &upper_fd,
        &scratch_trees,
        &mut report,
    );
    super::ids::name_unmapped_entries(&plan.ids, &lower, &mut report);
    view.walk_outside(spec, &mut report);
    super::evidence::walk_evidence(spec, &plan.ids, &lower, &upper_fd, &mut report)?;
    super::evidence::send_report(report)?;
    super::tell_host_done();
    Ok(())
}

/// After P8, with no process of the command left: the memory cgroup's
/// ceiling raised first (reading what to remove allocates, and the cgroup
/// may be full), then the namespace's System V objects removed, so what the
/// command left charged to the cgroup cannot starve the walk
/// ([`limits::WalkRoom`]).
fn give_walk_room(walk_room: Option<limits::WalkRoom>) -> Result<(), HelperError> {
    if let Some(room) = walk_room {
        room.give().map_err(|source| HelperError::Supervise {
            op: "raise the memory limit for the walk",
            source,
        })?;
    }
    limits::drop_ipc_objects();
    Ok(())
}

/// Before P1: die with C (and notice if it already died), stay out of
/// reach of the command's ptrace and /proc.
fn become_init(parent_alive: OwnedFd) -> Result<(), HelperError> {
    sys::die_with_parent().map_err(|source| HelperError::BecomeInit {
        op: "pdeathsig",
        source,
    })?;
    let mut pfd = [PollFd::new(parent_alive.as_fd(), PollFlags::POLLIN)];
    if poll(&mut pfd, PollTimeout::ZERO).is_ok_and(|n| n > 0) {
        // C died before the death signal was armed.
        sys::exit_now(125);
    }
    drop(parent_alive);
    let _ = nix::sys::prctl::set_dumpable(false);
    Ok(())
}

/// P1: the lower layer (`O_PATH`) before anything is mounted over it: H's
/// idmapped clone (root plan) or the workspace itself, checked to be the
/// directory the engine checked.
fn open_lower_layer(spec: &SandboxSpec, ids: &RunIds) -> Result<LowerLayer, HelperError> {
    mark("P1 init started");
    let lower_err = |op, path: &Path| {
        let path = path.to_path_buf();
        move |e: io::Error| HelperError::OpenLower {
            op,
            path,
            source: e,
        }
    };
    mounts::make_rprivate()
        .map_err(|e| lower_err("make-rprivate", Path::new("/"))(io::Error::other(e)))?;
    let lower_path: &Path = if ids.shifted {
        Path::new(STAGE_LOWER)
    } else {
        &spec.workspace
    };
    let fd = open(
        lower_path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| lower_err("open workspace", lower_path)(e.into()))?;
    if !ids.shifted {
        super::host::check_workspace_identity(&fd, spec.workspace_identity, Step::P1)?;
    }
    let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let meta = std::fs::metadata(&proc_path)
        .map_err(lower_err("stat workspace", Path::new(&proc_path)))?;
    Ok(LowerLayer { fd, meta })
}

/// P2: a base tmpfs over /tmp (in the sandbox's namespace only) and the
/// size- and inode-capped tmpfs for the overlay's upper and work dirs; the
/// workspace root's mode and owner copied onto the upper root; the view's
/// throwaway layers' upper layers in a tmpfs of their own.
fn mount_upper_layer(
    spec: &SandboxSpec,
    lower: &LowerLayer,
    view: &mut ViewSetup,
) -> Result<Scratch, HelperError> {
    use std::os::unix::fs::MetadataExt;
    mark("P2 upper");
    let step = |op| {
        move |e: mounts::MountError| HelperError::UpperLayer {
            op,
            source: e.into(),
        }
    };
    let base = Path::new(BASE);
    mounts::mount_tmpfs(base, 1 << 20, 0o755, MsFlags::empty()).map_err(step(""))?;
    let upper_mnt = base.join("upper");
    mounts::mkdir_p(&upper_mnt, 0o755).map_err(step(""))?;
    mounts::mount_tmpfs_capped(&upper_mnt, spec.limits.disk_bytes, MAX_INODES, 0o755)
        .map_err(step("upper"))?;
    let upper = upper_mnt.join("data");
    let work = upper_mnt.join("work");
    mounts::mkdir_p(&work, 0o700).map_err(step(""))?;
    mounts::mkdir_p(&upper, lower.meta.mode() & 0o7777).map_err(step(""))?;
    // Only possible when the owner is mapped; otherwise the root stays ours.
    let _ = nix::unistd::chown(
        &upper,
        Some(Uid::from_raw(lower.meta.uid())),
        Some(Gid::from_raw(lower.meta.gid())),
    );
    copy_root_user_xattrs(lower, &upper);
    view.mount_uppers(base, spec.limits.tmp_bytes, MAX_INODES)?;
    let empty_file = base.join("empty");
    std::fs::write(&empty_file, b"").map_err(|e| HelperError::UpperLayer {
        op: "empty file",
        source: FsError::io(&empty_file)(e),
    })?;
    Ok(Scratch {
        upper,
        work,
        empty_file,
    })
}

/// The workspace root's `user.*` attributes onto the upper root, so that
/// the merged root shows them as the real one has them and the walk finds
/// no change the command did not make. Only `user.*`: others cannot be set
/// from inside a user namespace, and overlay's own `user.overlay.*` names
/// steer the overlay. The owner owns the root, so these are the owner's to
/// read. Best effort: an attribute not copied shows as a change of the root.
fn copy_root_user_xattrs(lower: &LowerLayer, upper: &Path) {
    let root = lower.proc_path();
    let Ok(names) = xattr::list_deref(&root) else {
        return;
    };
    for name in names {
        let bytes = name.as_encoded_bytes();
        if !bytes.starts_with(b"user.") || bytes.starts_with(b"user.overlay.") {
            continue;
        }
        if let Ok(Some(value)) = xattr::get_deref(&root, &name) {
            let _ = xattr::set(upper, &name, &value);
        }
    }
}

/// P3: the new root tmpfs (with room for the stubs, installed after P4),
/// the image profile's trees bound read-only (its own masked paths
/// covered), the view (`PATH` directories, the throwaway layers). Returns
/// the image's masked paths.
fn build_image_root(
    spec: &SandboxSpec,
    root: &Path,
    scratch: &Scratch,
    stubs: &StubSetup,
    view: &mut ViewSetup,
    ids: &RunIds,
) -> Result<Vec<PathBuf>, HelperError> {
    mark("P3 image");
    let step = |op| {
        move |e: mounts::MountError| HelperError::ImageRoot {
            op,
            source: e.into(),
        }
    };
    mounts::mkdir_p(root, 0o755).map_err(step(""))?;
    mounts::mount_tmpfs(
        root,
        (1 << 20) + stubs.root_room(spec),
        0o755,
        MsFlags::empty(),
    )
    .map_err(step("root"))?;
    let masked =
        mounts::build_image(root, &spec.image, &scratch.empty_file).map_err(step("image"))?;
    view.mount_view(spec, root, ids)?;
    let scratch_dir = scratch.empty_file.parent().unwrap_or(Path::new(BASE));
    super::egress::point_resolver_at_sandbox(spec, root, scratch_dir)?;
    Ok(masked)
}

/// P4: the workspace overlay at the workspace's own absolute path (and,
/// on a host without a `/tmp` to layer over, a fresh size-capped one,
/// 1777, with the `HOME` the view makes); then the view's masks and
/// filtered files over everything. Returns the upper dir's fd (for P9).
fn mount_tmp_and_overlay(
    spec: &SandboxSpec,
    root: &Path,
    ids: &RunIds,
    lower: &LowerLayer,
    scratch: &Scratch,
    view: &mut ViewSetup,
) -> Result<OwnedFd, HelperError> {
    mark("P4 tmp + overlay");
    let step = |op| move |e: FsError| HelperError::TmpAndOverlay { op, source: e };
    let fresh = view.fresh_scratch();
    for tree in &fresh {
        let dir = root.join(tree.trim_start_matches('/'));
        mounts::mkdir_p(&dir, 0o1777).map_err(|e| step("")(e.into()))?;
        mounts::mount_tmpfs_capped(&dir, spec.limits.tmp_bytes, MAX_INODES, 0o1777)
            .map_err(|e| step(tree)(e.into()))?;
    }
    if fresh.contains(&"/tmp")
        && let Some(h) = spec
            .view
            .make_home
            .as_ref()
            .filter(|h| h.starts_with("/tmp"))
    {
        super::view_home::make_dir_in_root(root, h, ids.uid, ids.gid)
            .map_err(|e| step("home")(FsError::io(h)(e.into())))?;
    }
    let ws = spec.workspace.as_path();
    let ws_in_root = root.join(ws.strip_prefix("/").unwrap_or(ws));
    // Through the home's layer the path to the workspace shows the host's
    // tree as it changes: walked without following a link, mounted through
    // its descriptor.
    let point = super::view_home::mount_point_in_root(root, ws)
        .map_err(|e| step("workspace mount point")(FsError::io(&ws_in_root)(e.into())))?;
    mounts::mount_overlay(
        &super::view::proc_fd(&point),
        &lower.proc_path(),
        &scratch.upper,
        &scratch.work,
        false,
    )
    .map_err(|e| step("overlay")(e.into()))?;
    let upper = open(
        &scratch.upper,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| step("upper fd")(FsError::io(&scratch.upper)(e.into())))?;
    let scratch_dir = scratch.empty_file.parent().unwrap_or(Path::new(BASE));
    mark("P4 masks");
    view.cover_secrets(spec, root, scratch_dir)?;
    Ok(upper)
}

/// P5: a minimal /dev and a new /proc with the kernel knobs read-only.
fn mount_dev_and_proc(spec: &SandboxSpec, root: &Path) -> Result<(), HelperError> {
    mark("P5 dev + proc");
    let step = |op| {
        move |e: mounts::MountError| HelperError::DevAndProc {
            op,
            source: e.into(),
        }
    };
    mounts::build_dev(root, spec.limits.tmp_bytes, MAX_INODES).map_err(step("/dev"))?;
    mounts::mount_proc(root).map_err(step("/proc"))
}

/// P6: `pivot_root` into the new root, detach the old one, remount `/`
/// read-only.
fn pivot_into_root(root: &Path) -> Result<(), HelperError> {
    mark("P6 pivot");
    let step = |op| {
        move |e: mounts::MountError| HelperError::Pivot {
            op,
            source: e.into(),
        }
    };
    mounts::pivot_into(root).map_err(step(""))?;
    mounts::remount_ro(Path::new("/")).map_err(step("ro root"))
}

/// P7: the image's hostname, loopback up (the network namespace has nothing
/// else), nested user namespaces capped at 0. Returns whether the cap took.
fn name_host_and_cut_network(spec: &SandboxSpec) -> Result<bool, HelperError> {
    mark("P7 net + prep");
    let prep = |op| move |e: io::Error| HelperError::Prepare { op, source: e };
    if let Some(h) = &spec.image.hostname {
        nix::unistd::sethostname(h).map_err(|e| prep("hostname")(e.into()))?;
    }
    if !spec.network_host {
        sys::loopback_up().map_err(prep("loopback"))?;
        super::egress::hand_sockets_to_proxy(spec)?;
    }
    Ok(std::fs::write("/proc/sys/user/max_user_namespaces", "0").is_ok())
}

/// P7: everything the command needs, before the first fork: the Landlock
/// promise checked against the kernel, the seccomp filter compiled to BPF,
/// the rlimits, the environment and the shell.
fn prepare_command(
    spec: &SandboxSpec,
    ids: RunIds,
    stubs: &StubSetup,
    view: &ViewSetup,
) -> Result<CommandPlan, HelperError> {
    let prep = |op| {
        move |e: std::ffi::NulError| HelperError::Prepare {
            op,
            source: io::Error::other(e),
        }
    };
    let kernel_abi = probe::landlock_abi();
    if kernel_abi < spec.landlock.min_abi && !spec.landlock.allow_degraded {
        return Err(HelperError::LandlockTooOld {
            offered: kernel_abi,
            required: spec.landlock.min_abi,
        });
    }
    let filter = seccomp::compiled_filter().map_err(HelperError::Seccomp)?;
    let cg = spec.cgroup.as_ref();
    let cg_mem = cg.is_some_and(limits::has_memory_cgroup);
    let cg_pids = cg.is_some_and(limits::has_pids_cgroup);
    let rlimits = limits::rlimit_plan(&spec.limits, cg_mem, cg_pids);
    let env: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| match k.as_str() {
            "PATH" => CString::new(format!("{k}={}", stubs.command_path(v))),
            _ => CString::new(format!("{k}={v}")),
        })
        .collect::<Result<_, _>>()
        .map_err(prep("env"))?;
    let shell = CString::new(spec.shell.as_os_str().as_bytes()).map_err(prep("shell"))?;
    let groups = if ids.shifted {
        spec.reader_groups.clone()
    } else {
        Vec::new()
    };
    Ok(CommandPlan {
        ws: spec.workspace.clone(),
        ids,
        rlimits,
        kernel_abi,
        network_host: spec.network_host,
        egress_port: spec.egress.as_ref().and_then(|e| e.proxy_port),
        egress_allows_names: spec.egress.as_ref().is_some_and(|e| e.allows_names),
        groups,
        service_ports: spec
            .egress
            .iter()
            .flat_map(|e| e.services.iter().filter_map(|s| s.tcp_port()))
            .collect(),
        calls_dir: stubs.calls_dir(),
        writable: view.writable(),
        filter,
        env,
        shell,
        umask: spec.umask,
    })
}

/// The report's description of the sandbox, before any step runs. The
/// Landlock fields are filled from what the commands report (P8).
fn describe_sandbox(
    plan: &CommandPlan,
    masked: &[PathBuf],
    stubs: &StubSetup,
    nested_userns_capped: bool,
) -> RehearsalReport {
    let mut report = RehearsalReport {
        seccomp: true,
        ..Default::default()
    };
    for m in masked {
        report.stripped.push(format!("masked:{}", m.display()));
    }
    report.stripped.push(
        if plan.egress_allows_names {
            "network (only the egress proxy on loopback, to allowlisted names)"
        } else {
            "network"
        }
        .into(),
    );
    stubs.describe(&mut report);
    report.enforcement.push(
        if nested_userns_capped {
            "nested user namespaces: seccomp + max_user_namespaces=0"
        } else {
            "nested user namespaces: seccomp only"
        }
        .into(),
    );
    for (_, _, _, d) in &plan.rlimits {
        if let Some(d) = d {
            report.enforcement.push(d.clone());
        }
    }
    // Until a command reports what Landlock enforced on it.
    let none = landlock::LandlockOutcome::NONE;
    report.landlock_abi = none.abi;
    report.landlock_status = "not applied: no command reached exec".into();
    report
}
