//! A client's view: the workspace of a client in a container (a mount
//! namespace of its own) that is not the host's directory at the same
//! path. The daemon pins the client's mount namespace, its root and the
//! workspace directory as open descriptors when it accepts the submission
//! (`daemon::peer_ns`), and every host-side touch of that workspace (the
//! owner's agent, the sandbox's lower layer, promotion) happens in that
//! view: an agent forked into the client's namespace with the client's
//! root as its own, the lower layer cloned from inside that namespace.
//!
//! The daemon holds a view while it runs (at most [`MAX_VIEWS`], the
//! oldest forgotten first); a run whose view it no longer holds (a daemon
//! restart) cannot be promoted: `workspace_gone`.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::workspace::apply::Identity;

/// How many client views a daemon holds at once, and for one submitting
/// uid (each pins a mount namespace, and with it the container's mounts).
pub(crate) const MAX_VIEWS: usize = 1024;
pub(crate) const MAX_VIEWS_PER_UID: usize = 64;

/// A client's mount namespace, root and workspace directory, pinned.
#[derive(Debug)]
pub(crate) struct ClientView {
    pub mnt_ns: OwnedFd,
    pub root: OwnedFd,
    /// The workspace directory (`O_PATH`), resolved in the client's view
    /// with the client's uid and gid.
    pub dir: OwnedFd,
    /// The client's pid (in the daemon's pid namespace) when it submitted.
    pub pid: i32,
    /// The client's uid (its socket credentials).
    pub uid: u32,
    /// The inode of the client's mount namespace (`/proc/PID/ns/mnt`).
    pub mnt_ns_id: u64,
    /// The directory's device and inode.
    pub dev: u64,
    pub ino: u64,
}

impl ClientView {
    /// Where the workspace was resolved, for records and messages.
    pub(crate) fn describe(&self) -> String {
        format!(
            "the mount namespace mnt:[{}] of pid {}",
            self.mnt_ns_id, self.pid
        )
    }
}

static VIEWS: Mutex<Vec<(PathBuf, Arc<ClientView>)>> = Mutex::new(Vec::new());

/// Hold `view` for the workspace at `path` (the path as the client
/// resolved it); it replaces an older view of the same directory at the
/// same path held for the same uid (never another uid's: a view is held
/// before the owner rule is checked, and any uid that can read a
/// directory can bind it at the path another uid's container uses). Past
/// [`MAX_VIEWS_PER_UID`] views of its uid, its oldest is forgotten (its
/// runs can no longer be promoted: `workspace_gone`); past [`MAX_VIEWS`]
/// in all, the oldest of the uid holding the most (the newcomer's own on
/// a tie), so that a user submitting from many uids (a subordinate uid
/// range) pushes out its own views, never those of a uid holding few.
pub(crate) fn register(path: &Path, view: Arc<ClientView>) {
    let mut v = VIEWS.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|(p, w)| !(p == path && w.dev == view.dev && w.ino == view.ino && w.uid == view.uid));
    if v.iter().filter(|(_, w)| w.uid == view.uid).count() >= MAX_VIEWS_PER_UID
        && let Some(i) = v.iter().position(|(_, w)| w.uid == view.uid)
    {
        v.remove(i);
    }
    if v.len() >= MAX_VIEWS {
        let mut held: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        for (_, w) in v.iter() {
            *held.entry(w.uid).or_default() += 1;
        }
        let (mut heaviest, mut most) = (view.uid, held.get(&view.uid).copied().unwrap_or(0) + 1);
        for (_, w) in v.iter() {
            if held[&w.uid] > most {
                (heaviest, most) = (w.uid, held[&w.uid]);
            }
        }
        let i = v.iter().position(|(_, w)| w.uid == heaviest).unwrap_or(0);
        v.remove(i);
    }
    v.push((path.to_path_buf(), view));
}

/// Stop holding `view` (a submission refused after it was registered).
pub(crate) fn forget(view: &Arc<ClientView>) {
    let mut v = VIEWS.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|(_, w)| !Arc::ptr_eq(w, view));
}

/// The view the workspace at `path` with identity `id` was resolved in,
/// when it is a client's (`None`: a host directory). Only a view whose
/// client may submit for that workspace counts (its owner, or root): a
/// view another uid had held for its own submission of the same
/// directory, refused by the owner rule, never carries the owner's runs.
pub(crate) fn find(path: &Path, id: &Identity) -> Option<Arc<ClientView>> {
    let v = VIEWS.lock().unwrap_or_else(|p| p.into_inner());
    v.iter()
        .rev()
        .find(|(p, w)| {
            p == path && w.dev == id.dev && w.ino == id.ino && (w.uid == id.uid || w.uid == 0)
        })
        .map(|(_, w)| w.clone())
}
