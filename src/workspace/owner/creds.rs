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
    /// that user (none when the uid has no entry). `gid` (a workspace
    /// directory's group) is kept only when the user is a member of it, else
    /// the user's primary group replaces it: a directory an administrator
    /// gave with `chown UID DIR` keeps group 0, and the owner's agent must
    /// not hold a group the owner does not.
    pub fn of_user(uid: u32, gid: u32) -> Creds {
        let mut gid = gid;
        let mut groups = vec![gid];
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            && let Ok(name) = std::ffi::CString::new(u.name.as_bytes())
            && let Ok(list) = nix::unistd::getgrouplist(&name, u.gid)
        {
            groups = list.into_iter().map(|g| g.as_raw()).collect();
            if !groups.contains(&gid) {
                gid = u.gid.as_raw();
            }
        }
        groups.sort_unstable();
        groups.dedup();
        Creds { uid, gid, groups }
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
