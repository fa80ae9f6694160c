//! The seccomp filter loaded last, just before exec: everything a shell
//! command never needs is denied with EPERM. libseccomp validates the
//! architecture (foreign-arch syscalls such as `int 0x80` kill the process)
//! and rejects x32 syscall numbers on x86_64.

use libseccomp::{ScmpAction, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};

/// Denied outright (EPERM).
pub const DENIED_SYSCALLS: &[&str] = &[
    "acct",
    "add_key",
    "adjtimex",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "delete_module",
    "fanotify_init",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "personality",
    "pidfd_getfd",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "swapoff",
    "swapon",
    "syslog",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "vhangup",
];

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

#[derive(Debug, thiserror::Error)]
#[error("building the seccomp filter ({what}): {source}")]
pub(crate) struct SeccompError {
    what: String,
    source: Box<dyn std::error::Error + Send + Sync>,
}

fn ctx<T, E: std::error::Error + Send + Sync + 'static>(
    what: &str,
    r: Result<T, E>,
) -> Result<T, SeccompError> {
    r.map_err(|source| SeccompError {
        what: what.to_string(),
        source: Box::new(source),
    })
}

/// Build the filter (not yet loaded).
pub(super) fn build_filter() -> Result<ScmpFilterContext, SeccompError> {
    let eperm = ScmpAction::Errno(libc::EPERM);
    let mut f = ctx("new filter", ScmpFilterContext::new(ScmpAction::Allow))?;
    // no_new_privs is set explicitly by the helper before this point.
    ctx("nnp", f.set_ctl_nnp(false))?;
    ctx("bad arch", f.set_act_badarch(ScmpAction::KillProcess))?;
    for name in DENIED_SYSCALLS {
        // A name unknown to this libseccomp/arch (e.g. nfsservctl) is skipped.
        if let Ok(sc) = ScmpSyscall::from_name(name) {
            ctx(name, f.add_rule(eperm, sc))?;
        }
    }
    let ioctl = ctx("ioctl", ScmpSyscall::from_name("ioctl"))?;
    for req in [TIOCSTI, TIOCLINUX] {
        ctx(
            "ioctl tty",
            f.add_rule_conditional(
                eperm,
                ioctl,
                &[ScmpArgCompare::new(
                    1,
                    ScmpCompareOp::MaskedEqual(0xffff_ffff),
                    req,
                )],
            ),
        )?;
    }
    let clone = ctx("clone", ScmpSyscall::from_name("clone"))?;
    for flag in NAMESPACE_FLAGS {
        ctx(
            "clone namespaces",
            f.add_rule_conditional(
                eperm,
                clone,
                &[ScmpArgCompare::new(
                    0,
                    ScmpCompareOp::MaskedEqual(*flag),
                    *flag,
                )],
            ),
        )?;
    }
    // Network attempts are observed, not decided, here: the sandbox's init
    // receives each connect() and each sendto() with an address through a
    // user-notification listener and records it (see `netwatch`).
    let connect = ctx("connect", ScmpSyscall::from_name("connect"))?;
    ctx("connect notify", f.add_rule(ScmpAction::Notify, connect))?;
    let sendto = ctx("sendto", ScmpSyscall::from_name("sendto"))?;
    ctx(
        "sendto notify",
        f.add_rule_conditional(
            ScmpAction::Notify,
            sendto,
            &[ScmpArgCompare::new(4, ScmpCompareOp::NotEqual, 0)],
        ),
    )?;
    for name in ["sendmsg", "sendmmsg"] {
        let sc = ctx(name, ScmpSyscall::from_name(name))?;
        ctx(name, f.add_rule(ScmpAction::Notify, sc))?;
    }
    // clone3 passes its flags in memory where a filter cannot look: make it
    // look unimplemented so libc falls back to clone(2), which is checked.
    ctx(
        "clone3",
        f.add_rule(
            ScmpAction::Errno(libc::ENOSYS),
            ctx("clone3", ScmpSyscall::from_name("clone3"))?,
        ),
    )?;
    Ok(f)
}

/// The filter compiled to classic BPF, once per process: the resident
/// helper compiles it before it forks any host side, so a forked sandbox's
/// init finds it ready; an executed helper compiles it in its init. Each
/// command then makes one `seccomp()` call after its fork.
pub(super) fn compiled_filter() -> Result<Vec<libc::sock_filter>, SeccompError> {
    static COMPILED: std::sync::OnceLock<Vec<libc::sock_filter>> = std::sync::OnceLock::new();
    if let Some(f) = COMPILED.get() {
        return Ok(f.clone());
    }
    let f = compile_filter()?;
    Ok(COMPILED.get_or_init(|| f).clone())
}

fn compile_filter() -> Result<Vec<libc::sock_filter>, SeccompError> {
    let f = build_filter()?;
    let (r, w) = ctx("pipe", nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC))?;
    ctx("export", f.export_bpf(&w))?;
    drop(w);
    let mut bytes = Vec::new();
    ctx(
        "read exported filter",
        std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut bytes),
    )?;
    let insn = std::mem::size_of::<libc::sock_filter>();
    Ok(bytes
        .chunks_exact(insn)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// Load the compiled filter on the calling thread; returns the notification
/// listener fd (owned by the caller from here on).
pub(super) fn load_seccomp_filter(prog: &[libc::sock_filter]) -> std::io::Result<i32> {
    super::sys::seccomp_set_filter_with_listener(prog)
}
