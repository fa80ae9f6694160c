//! The identity host-side file access acts as.

use serde::{Deserialize, Serialize};

/// The identity host-side file access acts as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Creds {
    /// A user's ids with the supplementary groups the system database gives
    /// that user (none when the uid has no entry). `gid` (a requester's
    /// own group, from its socket credentials) is kept only when the user
    /// is a member of it, else the user's primary group replaces it.
    pub fn of_user(uid: u32, gid: u32) -> Creds {
        Creds::with_groups(uid, gid, gid)
    }

    /// The owner of a workspace directory whose group is `dir_gid`. That
    /// group is no evidence of what the owner holds: a directory an
    /// administrator gave with `chown UID DIR` keeps group 0. It is kept
    /// only when the system database makes the user a member of it; a uid
    /// with no entry there acts with the kernel's overflow group (which
    /// owns nothing), never with the directory's.
    pub fn of_owner(uid: u32, dir_gid: u32) -> Creds {
        Creds::with_groups(uid, dir_gid, overflow_gid())
    }

    /// `gid` when the user's entry lists it, the user's primary group when
    /// it does not, `orphan_gid` (alone) when the uid has no entry.
    fn with_groups(uid: u32, gid: u32, orphan_gid: u32) -> Creds {
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            && let Ok(name) = std::ffi::CString::new(u.name.as_bytes())
            && let Ok(list) = nix::unistd::getgrouplist(&name, u.gid)
        {
            let mut groups: Vec<u32> = list.into_iter().map(|g| g.as_raw()).collect();
            let gid = if groups.contains(&gid) {
                gid
            } else {
                u.gid.as_raw()
            };
            groups.sort_unstable();
            groups.dedup();
            return Creds { uid, gid, groups };
        }
        Creds {
            uid,
            gid: orphan_gid,
            groups: vec![orphan_gid],
        }
    }

    /// This process's own ids.
    pub fn current() -> Creds {
        let groups = nix::unistd::getgroups()
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default();
        Creds {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            groups,
        }
    }

    /// Whether work for these credentials can run in this process without
    /// giving it more (or other) rights than the user has: this process is
    /// that user, or is root acting for root.
    pub(super) fn is_this_process(&self) -> bool {
        nix::unistd::geteuid().as_raw() == self.uid
    }
}

/// The group ids with no mapping show as (`/proc/sys/kernel/overflowgid`,
/// 65534 unless changed).
fn overflow_gid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/overflowgid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65534)
}
