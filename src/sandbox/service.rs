//! The host side of a declared service's connection: made with the
//! workspace owner's credentials, never the daemon's, so that a service
//! that tells its clients apart (a Unix socket's peer credentials, a
//! database's peer authentication, a socket file's permissions) sees the
//! user the live command runs as, and a root daemon lends nothing of root.

use std::io;
use std::os::fd::OwnedFd;

use super::sys;

/// What a connection attempt does, on whichever thread holds the right
/// credentials.
pub(crate) type ConnectWork = Box<dyn FnOnce() -> io::Result<OwnedFd> + Send>;

/// Run `work` as `uid`/`gid` with `groups`: on a thread of its own that
/// takes those credentials first (and ends with them) when this process
/// is root; in this thread otherwise (an ordinary user's engine is the
/// owner already, and could not change).
pub(crate) fn connect_as_owner(
    uid: u32,
    gid: u32,
    groups: &[u32],
    work: ConnectWork,
) -> io::Result<OwnedFd> {
    if !nix::unistd::geteuid().is_root() {
        return work();
    }
    let groups = groups.to_vec();
    std::thread::Builder::new()
        .name("dryrun-service".into())
        .spawn(move || {
            sys::become_on_this_thread(uid, gid, &groups)?;
            work()
        })?
        .join()
        .map_err(|_| io::Error::other("the service connection's thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root, the work runs with the owner's ids and nothing of root's
    /// (and this thread keeps its own).
    #[test]
    fn the_work_runs_as_the_owner_and_the_caller_stays_itself() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let s = seen.clone();
        let r = connect_as_owner(
            4242,
            4343,
            &[4444],
            Box::new(move || {
                let status = std::fs::read_to_string("/proc/thread-self/status")?;
                *s.lock().unwrap() = Some(status);
                Err(io::Error::other("done"))
            }),
        );
        assert!(r.is_err());
        let status = seen.lock().unwrap().take().unwrap();
        let line = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap()
                .to_string()
        };
        assert!(line("Uid:").split_whitespace().skip(1).all(|v| v == "4242"));
        assert!(line("Gid:").split_whitespace().skip(1).all(|v| v == "4343"));
        assert_eq!(line("Groups:").split_whitespace().nth(1), Some("4444"));
        assert!(line("CapEff:").ends_with("0000000000000000"));
        assert!(
            nix::unistd::geteuid().is_root(),
            "this thread is still root"
        );
    }
}
