//! The seccomp filter loaded last, just before exec: everything a shell
//! command never needs is denied with EPERM, `clone3` answers ENOSYS, and
//! the network calls become user notifications (see `netwatch`).
//!
//! The program is classic BPF compiled in Rust (no C library): seccompiler
//! compiles one rule set per action, and [`link`] joins them behind one
//! prologue of our own that kills a process calling with a foreign
//! architecture (`int 0x80` on x86_64) or with an x32 syscall number, which
//! a deny list keyed on native numbers would otherwise miss. seccompiler
//! has no user-notification action: that rule set is compiled with a marker
//! action that [`link`] rewrites (docs/adr/0010-seccomp-filter-in-rust.md).

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Denied outright (EPERM), by name and native number.
pub const DENIED_SYSCALLS: &[(&str, libc::c_long)] = &[
    ("acct", libc::SYS_acct),
    ("add_key", libc::SYS_add_key),
    ("adjtimex", libc::SYS_adjtimex),
    ("bpf", libc::SYS_bpf),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("clock_settime", libc::SYS_clock_settime),
    ("delete_module", libc::SYS_delete_module),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("finit_module", libc::SYS_finit_module),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fsopen", libc::SYS_fsopen),
    ("fspick", libc::SYS_fspick),
    ("init_module", libc::SYS_init_module),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    ("kcmp", libc::SYS_kcmp),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("kexec_load", libc::SYS_kexec_load),
    ("keyctl", libc::SYS_keyctl),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("mount", libc::SYS_mount),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("move_mount", libc::SYS_move_mount),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    #[cfg(target_arch = "x86_64")]
    ("nfsservctl", libc::SYS_nfsservctl),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("open_tree", libc::SYS_open_tree),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("personality", libc::SYS_personality),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("pivot_root", libc::SYS_pivot_root),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("ptrace", libc::SYS_ptrace),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("reboot", libc::SYS_reboot),
    ("request_key", libc::SYS_request_key),
    ("setns", libc::SYS_setns),
    ("settimeofday", libc::SYS_settimeofday),
    ("swapoff", libc::SYS_swapoff),
    ("swapon", libc::SYS_swapon),
    ("syslog", libc::SYS_syslog),
    ("umount2", libc::SYS_umount2),
    ("unshare", libc::SYS_unshare),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("vhangup", libc::SYS_vhangup),
];

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
/// A terminal's line discipline: setting one makes the kernel load its
/// module when `dev.tty.ldisc_autoload` is on (n_gsm, n_hdlc: old kernel
/// attack surface); the sandbox's own pseudo-terminals are a tty the
/// command can open, so this is refused, with console redirection.
const TIOCSETD: u64 = 0x5423;
const TIOCCONS: u64 = 0x541D;
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

/// The architecture the filter admits (`AUDIT_ARCH_*` of linux/audit.h).
#[cfg(target_arch = "x86_64")]
const NATIVE: (TargetArch, u32) = (TargetArch::x86_64, 0xC000_003E);
#[cfg(target_arch = "aarch64")]
const NATIVE: (TargetArch, u32) = (TargetArch::aarch64, 0xC000_00B7);
#[cfg(target_arch = "riscv64")]
const NATIVE: (TargetArch, u32) = (TargetArch::riscv64, 0xC000_00F3);

/// x32 syscalls are native-arch calls with this bit set in the number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// The placeholder action the notify rule set is compiled with (TRACE with
/// this data; nothing else in the program returns TRACE).
const NOTIFY_MARKER: u32 = libc::SECCOMP_RET_TRACE | 0x4e4f;

// Classic BPF opcodes (linux/bpf_common.h) and seccomp_data offsets.
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x05 | 0x10;
const JMP_JGE_K: u16 = 0x05 | 0x30;
const RET_K: u16 = 0x06;
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

#[derive(Debug, thiserror::Error)]
pub(crate) enum SeccompError {
    #[error("building the seccomp filter ({what}): {source}")]
    Compile {
        what: &'static str,
        source: seccompiler::BackendError,
    },
    #[error("building the seccomp filter: {0}")]
    Link(&'static str),
}

fn ctx<T>(what: &'static str, r: Result<T, seccompiler::BackendError>) -> Result<T, SeccompError> {
    r.map_err(|source| SeccompError::Compile { what, source })
}

/// One rule of one condition.
fn when(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompRule, SeccompError> {
    let c = ctx("condition", SeccompCondition::new(arg, len, op, value))?;
    ctx("rule", SeccompRule::new(vec![c]))
}

type Rules = std::collections::BTreeMap<i64, Vec<SeccompRule>>;

/// The rule sets, each with the action it returns on a match (everything
/// unmatched is allowed). An empty rule list matches the call whatever its
/// arguments; several rules match if any does.
fn rule_sets() -> Result<Vec<(Rules, SeccompAction)>, SeccompError> {
    use SeccompCmpArgLen::{Dword, Qword};
    let mut deny: Rules = DENIED_SYSCALLS
        .iter()
        .map(|(_, nr)| (*nr, Vec::new()))
        .collect();
    // The ioctl request is compared on its low 32 bits (the kernel's `cmd`
    // is an unsigned int), so high garbage does not dodge the rule.
    deny.insert(
        libc::SYS_ioctl,
        [TIOCSTI, TIOCLINUX, TIOCSETD, TIOCCONS]
            .iter()
            .map(|r| when(1, Dword, SeccompCmpOp::Eq, *r))
            .collect::<Result<_, _>>()?,
    );
    deny.insert(
        libc::SYS_clone,
        NAMESPACE_FLAGS
            .iter()
            .map(|f| when(0, Qword, SeccompCmpOp::MaskedEq(*f), *f))
            .collect::<Result<_, _>>()?,
    );
    // clone3 passes its flags in memory where a filter cannot look: make it
    // look unimplemented so libc falls back to clone(2), which is checked.
    let clone3: Rules = [(libc::SYS_clone3, Vec::new())].into();
    // Network attempts are observed, not decided, here: the sandbox's init
    // receives each connect(), sendmsg(), sendmmsg() and each sendto() with
    // an address through the user-notification listener (see `netwatch`).
    let notify: Rules = [
        (libc::SYS_connect, Vec::new()),
        (libc::SYS_sendto, vec![when(4, Qword, SeccompCmpOp::Ne, 0)?]),
        (libc::SYS_sendmsg, Vec::new()),
        (libc::SYS_sendmmsg, Vec::new()),
    ]
    .into();
    Ok(vec![
        (deny, SeccompAction::Errno(libc::EPERM as u32)),
        (clone3, SeccompAction::Errno(libc::ENOSYS as u32)),
        (
            notify,
            SeccompAction::Trace(NOTIFY_MARKER & libc::SECCOMP_RET_DATA),
        ),
    ])
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The architecture check: a call made with another architecture's
/// convention (i386's `int 0x80` on x86_64) or with an x32 number kills
/// the process.
fn prologue() -> Vec<libc::sock_filter> {
    let kill = stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    let mut p = vec![
        stmt(LD_W_ABS, DATA_ARCH),
        jump(JMP_JEQ_K, NATIVE.1, 1, 0),
        kill,
    ];
    if cfg!(target_arch = "x86_64") {
        p.extend([
            stmt(LD_W_ABS, DATA_NR),
            jump(JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
            kill,
        ]);
    }
    p
}

/// Build the whole program: the prologue, then each rule set as compiled by
/// seccompiler, chained. A set's own architecture check (its first three
/// instructions) is dropped, the prologue has made it; its "allow" returns
/// become jumps to the next set (the last one's stay); the notify marker
/// becomes `SECCOMP_RET_USER_NOTIF`. Rewriting an instruction in place
/// keeps every relative jump valid.
pub(super) fn build_filter() -> Result<Vec<libc::sock_filter>, SeccompError> {
    let sets = rule_sets()?;
    let mut out = prologue();
    let n = sets.len();
    for (i, (rules, action)) in sets.into_iter().enumerate() {
        let f = ctx(
            "filter",
            SeccompFilter::new(rules, SeccompAction::Allow, action, NATIVE.0),
        )?;
        let prog = ctx("compile", BpfProgram::try_from(f))?;
        let arch_check = &prologue()[..3];
        let own: Vec<_> = prog.iter().take(3).map(convert).collect();
        if prog.len() < 4 || !same(&own, arch_check) {
            return Err(SeccompError::Link(
                "unexpected program shape from seccompiler",
            ));
        }
        let body = &prog[3..];
        let last = i + 1 == n;
        for (pc, ins) in body.iter().enumerate() {
            let mut ins = convert(ins);
            if ins.code == RET_K && ins.k == libc::SECCOMP_RET_ALLOW && !last {
                ins = stmt(JMP_JA, (body.len() - pc - 1) as u32);
            } else if ins.code == RET_K && ins.k == NOTIFY_MARKER {
                ins.k = libc::SECCOMP_RET_USER_NOTIF;
            }
            out.push(ins);
        }
    }
    if out.len() > 4096 {
        return Err(SeccompError::Link("program longer than the kernel's limit"));
    }
    Ok(out)
}

fn convert(i: &seccompiler::sock_filter) -> libc::sock_filter {
    libc::sock_filter {
        code: i.code,
        jt: i.jt,
        jf: i.jf,
        k: i.k,
    }
}

fn same(a: &[libc::sock_filter], b: &[libc::sock_filter]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x.code, x.jt, x.jf, x.k) == (y.code, y.jt, y.jf, y.k))
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
    let f = build_filter()?;
    Ok(COMPILED.get_or_init(|| f).clone())
}

/// Load the compiled filter on the calling thread; returns the notification
/// listener fd (owned by the caller from here on).
pub(super) fn load_seccomp_filter(prog: &[libc::sock_filter]) -> std::io::Result<i32> {
    super::sys::seccomp_set_filter_with_listener(prog)
}

#[cfg(test)]
mod tests;
