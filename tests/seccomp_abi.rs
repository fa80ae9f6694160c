//! The seccomp filter's architecture check, attacked from inside a
//! rehearsal: machine code that makes a syscall with i386's convention
//! (`int 0x80`) or with an x32 number (`__X32_SYSCALL_BIT`) must kill the
//! process (SIGSYS) instead of reaching the kernel, where a deny list keyed
//! on x86_64 numbers would not see it. A control makes the same call the
//! native way from the same kind of code page, so a failure to run code is
//! not mistaken for the filter.
#![cfg(target_arch = "x86_64")]

mod common;
use common::*;

/// A Python program that runs `code` (x86_64 machine code returning in
/// rax) from an executable page and prints `key=<rax>`.
fn run_code(key: &str, code: &[u8]) -> String {
    let bytes: Vec<String> = code.iter().map(|b| b.to_string()).collect();
    format!(
        "python3 - <<'DRYRUN_PY_EOF'\n\
         import ctypes, mmap\n\
         m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n\
         m.write(bytes([{}]))\n\
         f = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n\
         print('{key}=%d' % f(), flush=True)\n\
         DRYRUN_PY_EOF\n\
         echo {key}rc=$?\n",
        bytes.join(", ")
    )
}

/// `mov eax, NR; <insn>; ret`.
fn call(nr: u32, insn: [u8; 2]) -> Vec<u8> {
    let mut c = vec![0xb8];
    c.extend(nr.to_le_bytes());
    c.extend(insn);
    c.push(0xc3);
    c
}

const SYSCALL: [u8; 2] = [0x0f, 0x05];
const INT80: [u8; 2] = [0xcd, 0x80];
const SIGSYS_EXIT: &str = "159";

fn value(out: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    out.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
}

#[test]
fn foreign_architecture_and_x32_syscalls_are_killed() {
    if !require_tool("/usr/bin/python3", "python3") {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let script = format!(
            "{}{}{}exit 0",
            // getpid: 39 on x86_64 through `syscall`, 20 on i386 through
            // `int 0x80`, 39 with the x32 bit through `syscall`.
            run_code("native", &call(39, SYSCALL)),
            run_code("i386", &call(20, INT80)),
            run_code("x32", &call(0x4000_0000 | 39, SYSCALL)),
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_probe_ran(&r, who);
        let out = r.out();
        let native: i64 = value(out, "native")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{who:?}: the control did not run: {out} {}", r.err()));
        assert!(native > 0, "{who:?}: native getpid returned {native}");
        assert_eq!(
            value(out, "nativerc").as_deref(),
            Some("0"),
            "{who:?}: {out}"
        );
        for key in ["i386", "x32"] {
            assert_eq!(
                value(out, key),
                None,
                "{who:?}: the {key} getpid returned instead of killing: {out}"
            );
            assert_eq!(
                value(out, &format!("{key}rc")).as_deref(),
                Some(SIGSYS_EXIT),
                "{who:?}: the {key} call must die of SIGSYS: {out}"
            );
        }
    }
}
