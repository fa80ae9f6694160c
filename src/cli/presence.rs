//! Approval where there is one user: proof that a person is at this
//! process's terminal, and that the terminal is not one a process on this
//! machine (an agent, or anything it started) made.
//!
//! Where the agent runs as root (a root container, a VM whose only user
//! is root) there is no second identity: `sudo` is root again. A local
//! approval of root's own run is then accepted when all of these hold
//! ([`prove_presence`]):
//!
//! 1. stdin is a terminal, it is this process's controlling terminal
//!    (`/dev/tty` is the same device) and this process is in its
//!    foreground process group: a command with piped stdin, or run in the
//!    background of someone's terminal, fails here;
//! 2. the terminal is a console (a virtual console, serial line,
//!    hypervisor console: not a pseudo-terminal), or a pseudo-terminal
//!    whose controlling side (the master) no process visible here holds:
//!    it was made outside this pid namespace (`docker exec -it`, `podman
//!    exec -t`, `kubectl exec -it`, ...), or whose master only the
//!    system's `sshd` holds (an ssh login). Every pseudo-terminal a
//!    process here allocates (`script`, `expect`, Python's `pty`, `tmux`,
//!    `screen`, an agent host's own terminal for its tool) has a master
//!    held by that process, and fails;
//! 3. the person types back a code printed on that terminal after pending
//!    input was discarded (`dryrun approve`), or approves in `dryrun
//!    review`, which shows the code in its note line.
//!
//! What this cannot prove (docs/approvals.md): root on the same machine
//! can inject keystrokes into any terminal (`TIOCSTI`), trace the
//! person's shell, run its own `sshd`, or write the state directory
//! directly. The proof stands against an agent whose commands go through
//! dryrun (hooks, MCP: it has no live shell, its rehearsals have no
//! terminal and cannot write the state directory), not against one with a
//! root shell of its own, which needs no approval to do harm.

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What kind of terminal the person was found at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalKind {
    /// Not a pseudo-terminal: a console, a serial line.
    Console,
    /// A pseudo-terminal made outside this pid namespace.
    OutsidePty,
    /// A pseudo-terminal the system's sshd made for a login.
    SshPty,
}

/// Why this process's terminal proves no person.
#[derive(Debug, thiserror::Error)]
pub enum PresenceError {
    #[error("stdin is not a terminal (piped or redirected input proves no person)")]
    NotATerminal,
    #[error("this process has no controlling terminal, or stdin is not it")]
    NotControlling,
    #[error(
        "this process is not in its terminal's foreground (run it at the prompt, not in the background)"
    )]
    NotForeground,
    #[error(
        "this terminal (pseudo-terminal {index}) was made by process {pid} ({name}) on this machine, which holds its other side and could type into it; an agent can make such a terminal (script, expect, tmux, screen, a pty of its own). Approve at a console, an ssh login, or a terminal from outside the container (docker/podman/kubectl exec -it), not inside tmux or screen"
    )]
    HeldHere { index: u32, pid: u32, name: String },
    #[error(
        "who holds this terminal's other side cannot be checked: the open files of process {pid}, which runs as this user, cannot be read"
    )]
    Unreadable { pid: u32 },
    #[error("checking the terminal: {0}")]
    Io(#[from] std::io::Error),
}

/// Pseudo-terminal slaves: majors 136 to 143 (`UNIX98_PTY_SLAVE_MAJOR`).
fn pty_index(rdev: u64) -> Option<u32> {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    (136..=143)
        .contains(&major)
        .then(|| (major - 136) * 256 + minor)
}

/// A process found holding the master of the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Holder {
    pub pid: u32,
    pub name: String,
    /// Its executable is the system's sshd.
    pub is_sshd: bool,
}

/// The one judgement, over what was found: the terminal's pty index
/// (`None`: not a pseudo-terminal) and the visible processes holding its
/// master.
pub(super) fn judge_terminal(
    pty: Option<u32>,
    holders: &[Holder],
) -> Result<TerminalKind, PresenceError> {
    let Some(index) = pty else {
        return Ok(TerminalKind::Console);
    };
    if holders.is_empty() {
        return Ok(TerminalKind::OutsidePty);
    }
    match holders.iter().find(|h| !h.is_sshd) {
        Some(h) => Err(PresenceError::HeldHere {
            index,
            pid: h.pid,
            name: h.name.clone(),
        }),
        None => Ok(TerminalKind::SshPty),
    }
}

/// Check this process's terminal (see the module's rules 1 and 2).
pub fn prove_presence() -> Result<TerminalKind, PresenceError> {
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(PresenceError::NotATerminal);
    }
    // A controlling terminal at all (opening /dev/tty needs one), and it
    // is stdin's device (`tty_nr` of /proc/self/stat).
    std::fs::File::open("/dev/tty").map_err(|_| PresenceError::NotControlling)?;
    let ours = std::fs::metadata("/proc/self/fd/0")?.rdev();
    if controlling_tty()? != Some((libc::major(ours), libc::minor(ours))) {
        return Err(PresenceError::NotControlling);
    }
    let fg = nix::unistd::tcgetpgrp(stdin.as_fd()).map_err(|_| PresenceError::NotControlling)?;
    if fg != nix::unistd::getpgrp() {
        return Err(PresenceError::NotForeground);
    }
    let pty = pty_index(ours);
    let holders = match pty {
        Some(index) => master_holders(index)?,
        None => Vec::new(),
    };
    judge_terminal(pty, &holders)
}

/// This process's controlling terminal as (major, minor), from field 7
/// (`tty_nr`) of `/proc/self/stat`; `None` without one.
fn controlling_tty() -> Result<Option<(u32, u32)>, PresenceError> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let tty_nr: u32 = rest
        .split_whitespace()
        .nth(4)
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0) as u32;
    if tty_nr == 0 {
        return Ok(None);
    }
    let major = (tty_nr >> 8) & 0xfff;
    let minor = (tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00);
    Ok(Some((major, minor)))
}

/// Every visible process with an open pseudo-terminal master of index
/// `index`. A process running as this user whose files cannot be read is
/// an error (it could be holding it); other users' processes that cannot
/// be read are left out (this user made no terminal as them without a
/// shell of its own: docs/approvals.md).
fn master_holders(index: u32) -> Result<Vec<Holder>, PresenceError> {
    let me = nix::unistd::geteuid().as_raw();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let base = e.path();
        let fds = match std::fs::read_dir(base.join("fd")) {
            Ok(fds) => fds,
            Err(_) => {
                if process_uid(&base) == Some(me) && base.exists() {
                    return Err(PresenceError::Unreadable { pid });
                }
                continue;
            }
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if target != Path::new("/dev/ptmx") && target != Path::new("/dev/pts/ptmx") {
                continue;
            }
            let info = base.join("fdinfo").join(fd.file_name());
            let held = std::fs::read_to_string(info).ok().is_some_and(|t| {
                t.lines()
                    .filter_map(|l| l.strip_prefix("tty-index:"))
                    .any(|v| v.trim().parse::<u32>() == Ok(index))
            });
            if held {
                found.push(Holder {
                    pid,
                    name: std::fs::read_to_string(base.join("comm"))
                        .map(|c| crate::model::text::escape_for_humans(c.trim().as_bytes()))
                        .unwrap_or_default(),
                    is_sshd: is_system_sshd(&base),
                });
                break;
            }
        }
    }
    Ok(found)
}

/// The real uid a process runs as (`/proc/PID/status`).
fn process_uid(base: &Path) -> Option<u32> {
    let status = std::fs::read_to_string(base.join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Is the process's executable the system's sshd: a file named `sshd` or
/// `sshd-session`, owned by root, writable by nobody else, in a directory
/// only root may write?
fn is_system_sshd(base: &Path) -> bool {
    let Ok(exe) = std::fs::read_link(base.join("exe")) else {
        return false;
    };
    let named = exe
        .file_name()
        .is_some_and(|n| n == "sshd" || n == "sshd-session");
    let root_only = |p: &Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0)
    };
    named && root_only(&exe) && exe.parent().is_some_and(root_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32, name: &str, is_sshd: bool) -> Holder {
        Holder {
            pid,
            name: name.into(),
            is_sshd,
        }
    }

    #[test]
    fn only_terminals_made_elsewhere_prove_a_person() {
        assert_eq!(judge_terminal(None, &[]).unwrap(), TerminalKind::Console);
        assert_eq!(
            judge_terminal(Some(3), &[]).unwrap(),
            TerminalKind::OutsidePty
        );
        assert_eq!(
            judge_terminal(Some(3), &[holder(10, "sshd", true)]).unwrap(),
            TerminalKind::SshPty
        );
        for held in [
            vec![holder(11, "script", false)],
            vec![holder(10, "sshd", true), holder(12, "tmux: server", false)],
        ] {
            let e = judge_terminal(Some(3), &held).unwrap_err();
            assert!(matches!(e, PresenceError::HeldHere { .. }), "{e}");
        }
    }

    #[test]
    fn pty_slaves_are_told_from_other_terminals() {
        assert_eq!(pty_index(libc::makedev(136, 5)), Some(5));
        assert_eq!(pty_index(libc::makedev(137, 1)), Some(257));
        assert_eq!(pty_index(libc::makedev(4, 1)), None);
        assert_eq!(pty_index(libc::makedev(5, 1)), None);
    }
}
