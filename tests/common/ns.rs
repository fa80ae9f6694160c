//! Mounts a test makes for one dryrun process only.

/// A command prefix that runs the rest in a private mount namespace of its
/// own after `script` (a `sh -c` script whose `$0`, `$1`, ... are `args`
/// and which `shift`s them away before its `exec "$@"`): what it mounts
/// is seen by that process and its children, never by the host.
pub fn in_private_mount_ns(script: &str, args: &[String]) -> Vec<String> {
    [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(args.iter().cloned())
    .collect()
}
