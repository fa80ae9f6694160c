//! Kernel feature probes: what this machine can enforce.

use serde::Serialize;

/// The Landlock ABI the running kernel offers (0: none).
pub fn landlock_abi() -> u32 {
    super::sys::landlock_abi_version()
}

#[derive(Debug, Clone, Serialize)]
pub struct Features {
    pub landlock_abi: u32,
    pub unprivileged_userns: bool,
    pub cgroup: String,
    pub seccomp: bool,
}

pub fn probe_features() -> Features {
    let userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0)
        && std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
            .map(|s| s.trim() != "0")
            .unwrap_or(true);
    let cgroup = if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "v2"
    } else if std::path::Path::new("/sys/fs/cgroup/memory").exists() {
        "v1"
    } else {
        "none"
    };
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    Features {
        landlock_abi: landlock_abi(),
        unprivileged_userns: userns,
        cgroup: cgroup.into(),
        seccomp,
    }
}
