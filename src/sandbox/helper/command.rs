//! CMD, the command's process between fork and exec: X1–X7. Nothing here
//! can send a frame; a failure is written to the command's stderr and the
//! process exits 126 without exec (see `supervise::fork_command`).

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid, dup2_stderr, dup2_stdin, dup2_stdout};

use super::super::landlock::{self, LandlockOutcome};
use super::super::{limits, seccomp, sys};
use super::handshake::{ACK, ACK_FD, HELLO_FD, Hello};
use super::init::CommandPlan;

fn errno(what: &'static str) -> impl Fn(nix::errno::Errno) -> io::Error {
    move |e| io::Error::other(format!("{what}: {e}"))
}

/// X1–X7 in the forked command process. Returns only on failure.
pub(super) fn exec_command(plan: &CommandPlan, step: &CString, fds: [OwnedFd; 4]) -> io::Error {
    match prepare_command(plan, fds) {
        Ok(()) => {}
        Err(e) => return e,
    }
    // X7
    let argv = [
        CString::new("bash").expect("static"),
        CString::new("-c").expect("static"),
        step.clone(),
    ];
    sys::execve(&plan.shell, &argv, &plan.env)
}

/// X1–X6, in this order.
fn prepare_command(plan: &CommandPlan, fds: [OwnedFd; 4]) -> io::Result<()> {
    detach_and_redirect(plan, fds)?;
    apply_rlimits(plan)?;
    drop_privileges(plan)?;
    nix::sys::prctl::set_no_new_privs().map_err(errno("no_new_privs"))?; // X4
    let landlock = apply_landlock(plan)?;
    load_seccomp_and_hand_over(plan, landlock)
}

/// X1: a new session (no controlling terminal), stdin /dev/null, stdout and
/// stderr to P1's pipes, the handshake pipes at their fixed numbers, every
/// other fd closed, cwd = the workspace.
fn detach_and_redirect(plan: &CommandPlan, fds: [OwnedFd; 4]) -> io::Result<()> {
    let [out_w, err_w, hello_w, ack_r] = fds;
    nix::unistd::setsid().map_err(errno("setsid"))?;
    let devnull = open(
        "/dev/null",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno("/dev/null"))?;
    dup2_stdin(&devnull).map_err(errno("stdin"))?;
    dup2_stdout(&out_w).map_err(errno("stdout"))?;
    dup2_stderr(&err_w).map_err(errno("stderr"))?;
    drop(devnull);
    drop(out_w);
    drop(err_w);
    // Move both out of the way first so neither dup2 clobbers the other.
    let high = |fd: &OwnedFd| {
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(100)).map_err(errno("dup"))
    };
    let (hello_hi, ack_hi) = (high(&hello_w)?, high(&ack_r)?);
    sys::dup2_raw(hello_hi, HELLO_FD)?;
    sys::dup2_raw(ack_hi, ACK_FD)?;
    drop(hello_w);
    drop(ack_r);
    // Nothing past fd 4 is used from here on; the lower/upper fds and the
    // helper's answer pipe must not reach the command.
    sys::close_fds_from(ACK_FD as u32 + 1)?;
    nix::unistd::chdir(&plan.ws).map_err(errno("chdir workspace"))
}

/// X2: the planned rlimits (core 0, file size, CPU; processes and memory
/// where no cgroup enforces them). Transparent huge pages as the host has
/// them: the helper's allocator turned them off for the helper's own short
/// life (see `rehearse`), and the flag survives fork and exec.
fn apply_rlimits(plan: &CommandPlan) -> io::Result<()> {
    for (res, soft, hard, _) in &plan.rlimits {
        nix::sys::resource::setrlimit(*res, *soft, *hard).map_err(errno("setrlimit"))?;
    }
    nix::sys::prctl::set_thp_disable(false).map_err(errno("prctl thp"))?;
    // The client's umask: files are created as its own shell creates them.
    nix::sys::stat::umask(Mode::from_bits_truncate(plan.umask & 0o777));
    Ok(())
}

/// X3: supplementary groups set (root plan: the workspace owner's, as the
/// live command holds them; a user's rehearsal keeps the user's own),
/// bounding set emptied, securebits set and locked, the run's ids, every
/// capability set cleared; then the command becomes the OOM killer's
/// first choice ([`limits::offer_to_oom_killer`]).
fn drop_privileges(plan: &CommandPlan) -> io::Result<()> {
    if plan.ids.shifted {
        let groups: Vec<Gid> = plan.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        nix::unistd::setgroups(&groups).map_err(errno("setgroups"))?;
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
    let g = Gid::from_raw(plan.ids.gid);
    let u = Uid::from_raw(plan.ids.uid);
    nix::unistd::setresgid(g, g, g).map_err(errno("setresgid"))?;
    nix::unistd::setresuid(u, u, u).map_err(errno("setresuid"))?;
    sys::clear_ambient_caps()?;
    // Not dumpable is inherited from P1 (which hides itself) and set again by
    // the credential change above; the command must be reachable by P1 for
    // the seccomp handshake and the network notifications.
    nix::sys::prctl::set_dumpable(true).map_err(errno("dumpable"))?;
    for set in [
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
        caps::CapSet::Inheritable,
    ] {
        caps::clear(None, set).map_err(|e| io::Error::other(format!("clear capabilities: {e}")))?;
    }
    // Only now: the /proc/self files of a process that is not dumpable
    // belong to the host's root, out of the command's reach.
    limits::offer_to_oom_killer()
}

/// X5: Landlock, when the kernel has it. Returns what `restrict_self`
/// reported; P1 judges it before the command may exec.
fn apply_landlock(plan: &CommandPlan) -> io::Result<LandlockOutcome> {
    if plan.kernel_abi == 0 {
        return Ok(LandlockOutcome::NONE);
    }
    landlock::apply_landlock_on_current_thread(
        plan.kernel_abi,
        &plan.ws,
        plan.network_host,
        plan.egress_port,
        &plan.service_ports,
        plan.calls_dir,
        &plan.writable,
    )
    .map_err(|e| io::Error::other(e.to_string()))
}

/// X6, last: the precompiled seccomp filter with its listener; the hello to
/// P1 (listener number, Landlock outcome); exec only after P1's ACK.
fn load_seccomp_and_hand_over(plan: &CommandPlan, landlock: LandlockOutcome) -> io::Result<()> {
    let listener =
        seccomp::load_seccomp_filter(&plan.filter).map_err(|e| io::Error::other(e.to_string()))?;
    let hello = Hello { listener, landlock };
    sys::write_all_fd(HELLO_FD, &hello.encode())?;
    let mut ack = [0u8; 1];
    let ack_file = sys::adopt_fd(ACK_FD);
    let got = nix::unistd::read(&ack_file, &mut ack);
    drop(ack_file);
    sys::close_raw(listener);
    sys::close_raw(HELLO_FD);
    if got != Ok(1) || ack[0] != ACK {
        return Err(io::Error::other(
            "the sandbox's init did not let the command run (Landlock or seccomp hand-over refused)",
        ));
    }
    Ok(())
}
