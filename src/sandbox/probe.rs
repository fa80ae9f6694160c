//! Kernel feature probes: what this machine can enforce.

/// The Landlock ABI the running kernel offers (0: none).
pub(crate) fn landlock_abi() -> u32 {
    super::sys::landlock_abi_version()
}
