//! The compiled program's shape, checked by running it: a small classic-BPF
//! interpreter evaluates the filter on `seccomp_data` the way the kernel
//! would, for every rule.

use super::*;

const AUDIT_ARCH_I386: u32 = 0x4000_0003;

/// What the filter returns for a call (`nr`, `arch`, `args`).
fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    let word = |off: u32| -> u32 {
        match off {
            0 => nr,
            4 => arch,
            8 | 12 => 0,
            16..=63 => {
                let a = args[((off - 16) / 8) as usize];
                if (off - 16).is_multiple_of(8) {
                    a as u32
                } else {
                    (a >> 32) as u32
                }
            }
            _ => panic!("load outside seccomp_data: {off}"),
        }
    };
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let i = prog[pc];
        pc += 1;
        let cond = |taken: bool| if taken { i.jt as usize } else { i.jf as usize };
        match i.code {
            0x20 => acc = word(i.k),            // ld [k]
            0x54 => acc &= i.k,                 // and #k
            0x05 => pc += i.k as usize,         // ja
            0x15 => pc += cond(acc == i.k),     // jeq #k
            0x25 => pc += cond(acc > i.k),      // jgt #k
            0x35 => pc += cond(acc >= i.k),     // jge #k
            0x45 => pc += cond(acc & i.k != 0), // jset #k
            0x06 => return i.k,                 // ret #k
            c => panic!("instruction {c:#x} at {} not modelled", pc - 1),
        }
    }
}

fn native(prog: &[libc::sock_filter], nr: libc::c_long, args: [u64; 6]) -> u32 {
    run(prog, NATIVE.1, nr as u32, args)
}

const NONE: [u64; 6] = [0; 6];
const ERRNO: u32 = libc::SECCOMP_RET_ERRNO;

#[test]
fn the_architecture_is_checked_first_and_a_foreign_one_is_killed() {
    let prog = build_filter().unwrap();
    assert_eq!((prog[0].code, prog[0].k), (LD_W_ABS, DATA_ARCH));
    assert_eq!((prog[1].code, prog[1].k), (JMP_JEQ_K, NATIVE.1));
    assert_eq!(
        (prog[2].code, prog[2].k),
        (RET_K, libc::SECCOMP_RET_KILL_PROCESS)
    );
    // i386's getpid (20) and i386's numbers of every denied call.
    for nr in [20u32, 26, 21, 310] {
        assert_eq!(
            run(&prog, AUDIT_ARCH_I386, nr, NONE),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_numbers_are_killed() {
    let prog = build_filter().unwrap();
    let x32 = |nr: libc::c_long| nr as u32 | X32_SYSCALL_BIT;
    for nr in [
        libc::SYS_getpid,
        libc::SYS_write,
        libc::SYS_mount,
        libc::SYS_connect,
    ] {
        assert_eq!(
            run(&prog, NATIVE.1, x32(nr), NONE),
            libc::SECCOMP_RET_KILL_PROCESS,
            "x32 {nr}"
        );
    }
    // x32's own numbering of the extra calls (512 and up).
    assert_eq!(
        run(&prog, NATIVE.1, X32_SYSCALL_BIT | 512, NONE),
        libc::SECCOMP_RET_KILL_PROCESS
    );
}

#[test]
fn each_denied_call_answers_eperm_and_ordinary_calls_are_allowed() {
    let prog = build_filter().unwrap();
    for (name, nr) in DENIED_SYSCALLS {
        assert_eq!(
            native(&prog, *nr, NONE),
            ERRNO | libc::EPERM as u32,
            "{name}"
        );
    }
    for nr in [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_openat,
        libc::SYS_execve,
        libc::SYS_getpid,
        libc::SYS_socket,
        libc::SYS_bind,
    ] {
        assert_eq!(native(&prog, nr, NONE), libc::SECCOMP_RET_ALLOW, "{nr}");
    }
}

#[test]
fn argument_rules_ioctl_clone_and_clone3() {
    let prog = build_filter().unwrap();
    let ioctl = |req: u64| native(&prog, libc::SYS_ioctl, [0, req, 0, 0, 0, 0]);
    assert_eq!(ioctl(TIOCSTI), ERRNO | libc::EPERM as u32);
    assert_eq!(ioctl(TIOCLINUX), ERRNO | libc::EPERM as u32);
    assert_eq!(ioctl(TIOCSETD), ERRNO | libc::EPERM as u32);
    assert_eq!(ioctl(TIOCCONS), ERRNO | libc::EPERM as u32);
    // High bits above the 32-bit command do not dodge the rule.
    assert_eq!(
        ioctl(0xdead_beef_0000_0000 | TIOCSTI),
        ERRNO | libc::EPERM as u32
    );
    assert_eq!(ioctl(libc::TCGETS), libc::SECCOMP_RET_ALLOW);
    let clone = |flags: u64| native(&prog, libc::SYS_clone, [flags, 0, 0, 0, 0, 0]);
    for f in NAMESPACE_FLAGS {
        assert_eq!(clone(*f | 17), ERRNO | libc::EPERM as u32, "{f:#x}");
    }
    assert_eq!(clone(17), libc::SECCOMP_RET_ALLOW);
    assert_eq!(
        clone((libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64),
        libc::SECCOMP_RET_ALLOW
    );
    assert_eq!(
        native(&prog, libc::SYS_clone3, NONE),
        ERRNO | libc::ENOSYS as u32
    );
}

#[test]
fn network_calls_become_user_notifications() {
    let prog = build_filter().unwrap();
    let notif = libc::SECCOMP_RET_USER_NOTIF;
    assert_eq!(native(&prog, libc::SYS_connect, NONE), notif);
    assert_eq!(native(&prog, libc::SYS_sendmsg, NONE), notif);
    assert_eq!(native(&prog, libc::SYS_sendmmsg, NONE), notif);
    let sendto = |dest: u64| native(&prog, libc::SYS_sendto, [3, 0, 0, 0, dest, 16]);
    assert_eq!(sendto(0x7fff_0000), notif);
    assert_eq!(sendto(1 << 40), notif, "a destination above 4 GiB");
    assert_eq!(sendto(0), libc::SECCOMP_RET_ALLOW);
    // The placeholder never reaches the kernel.
    assert!(
        prog.iter().all(|i| !(i.code == RET_K
            && i.k & libc::SECCOMP_RET_ACTION_FULL == libc::SECCOMP_RET_TRACE))
    );
}

#[test]
fn the_program_is_built_once_per_process() {
    let a = compiled_filter().unwrap();
    let b = compiled_filter().unwrap();
    assert!(same(&a, &b) && !a.is_empty());
}
