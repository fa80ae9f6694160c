//! Groups in an ordinary user's rehearsal (the self plan).
//!
//! An unprivileged user namespace maps only the caller's own uid and gid,
//! so a file of another group (a setgid team directory) shows inside as
//! the overflow group, and the overlay cannot copy it up to change it:
//! `rm -rf build` fails with EOVERFLOW ("Value too large for defined data
//! type") where it works live. The caller's supplementary groups that the
//! administrator delegates to it in `/etc/subgid` (one line
//! `USER:GID:1` per group) are mapped 1:1 through the setuid `newgidmap`
//! (package `uidmap`), which checks that delegation itself; files of the
//! groups left unmapped, and of other users, are named by the sandbox's
//! init after the command (see `helper/ids.rs`).

use std::io;
use std::process::{Command, Stdio};

/// The setuid helper that writes a delegated gid map.
pub(crate) const NEWGIDMAP: &str = "/usr/bin/newgidmap";
/// Where delegations are listed.
const SUBGID: &str = "/etc/subgid";

/// The groups this process holds besides `gid` that `/etc/subgid`
/// delegates to its user (by name or uid), sorted; none when `newgidmap`
/// is not installed. For the self plan.
pub(crate) fn delegated_groups(uid: u32, gid: u32) -> Vec<u32> {
    if !std::path::Path::new(NEWGIDMAP).exists() {
        return Vec::new();
    }
    let Ok(text) = std::fs::read_to_string(SUBGID) else {
        return Vec::new();
    };
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name);
    let held = nix::unistd::getgroups().unwrap_or_default();
    let mut out: Vec<u32> = held
        .into_iter()
        .map(|g| g.as_raw())
        .filter(|g| *g != gid && delegates(&text, name.as_deref(), uid, *g))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether an `/etc/subgid` text gives `group` to the user `name`/`uid`.
fn delegates(text: &str, name: Option<&str>, uid: u32, group: u32) -> bool {
    text.lines().any(|l| {
        let mut f = l.trim().split(':');
        let (Some(owner), Some(start), Some(count), None) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            return false;
        };
        let ours = Some(owner) == name || owner.parse::<u32>().ok() == Some(uid);
        let (Ok(start), Ok(count)) = (start.parse::<u64>(), count.parse::<u64>()) else {
            return false;
        };
        ours && (start..start.saturating_add(count)).contains(&u64::from(group))
    })
}

/// Write `pid`'s gid map through `newgidmap`: `gid` and each of `groups`
/// to itself. On failure, the error carries its message (nothing was
/// mapped; the caller maps `gid` alone).
pub(super) fn map_groups_with_newgidmap(pid: i32, gid: u32, groups: &[u32]) -> io::Result<()> {
    let mut args = vec![pid.to_string()];
    for g in std::iter::once(&gid).chain(groups) {
        args.extend([g.to_string(), g.to_string(), "1".into()]);
    }
    let out = Command::new(NEWGIDMAP)
        .args(&args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(io::Error::other(format!(
        "{NEWGIDMAP} {}: {}",
        out.status,
        crate::model::text::escape_for_humans(err.trim().as_bytes())
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subgid_lines_delegate_by_name_or_uid() {
        let t = "alice:100000:65536\nalice:1234:1\n1000:2000:2\nbob:5000:1\nbad line\n";
        assert!(delegates(t, Some("alice"), 1000, 1234));
        assert!(delegates(t, Some("alice"), 1000, 2001), "by uid");
        assert!(!delegates(t, Some("alice"), 1000, 2002));
        assert!(!delegates(t, Some("alice"), 1000, 5000), "bob's");
        assert!(delegates(t, Some("alice"), 1000, 100_000));
        assert!(!delegates(t, None, 1001, 1234));
    }
}
