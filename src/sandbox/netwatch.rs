//! Observing network attempts. The command's seccomp filter turns every
//! `connect()` and every `sendto()` with a destination into a user
//! notification; the sandbox's init reads the destination from the caller's
//! memory, records it, and answers. Enforcement does not depend on this: the
//! network namespace has only loopback and Landlock denies TCP. The record is
//! the evidence a reviewer sees (what the command *would* have reached).
//!
//! Answers: pathname unix sockets get EACCES (a socket file in the workspace
//! could belong to a host service); everything else continues into the
//! kernel, which refuses it (no route, or Landlock).

use std::os::fd::{AsRawFd, OwnedFd};

use libseccomp::{ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags, ScmpSyscall};
use nix::sys::socket::{GetSockOpt, sockopt};
use nix::sys::uio::{RemoteIoVec, process_vm_readv};

use super::sys;
use super::wire::Blocked;

/// At most this many attempts are listed; the rest are counted.
pub const MAX_RECORDED: usize = 64;

pub struct NetWatch {
    pub fd: OwnedFd,
    connect: ScmpSyscall,
    pub recorded: Vec<Blocked>,
    pub dropped: u64,
    seen: std::collections::HashSet<String>,
}

impl NetWatch {
    pub fn new(fd: OwnedFd) -> Self {
        NetWatch {
            fd,
            connect: ScmpSyscall::from_name("connect").expect("connect exists"),
            recorded: Vec::new(),
            dropped: 0,
            seen: Default::default(),
        }
    }

    /// Handle one pending notification. Errors only mean the caller vanished.
    pub fn handle_one(&mut self) {
        let raw = self.fd.as_raw_fd();
        let Ok(req) = ScmpNotifReq::receive(raw) else {
            return;
        };
        let is_connect = req.data.syscall == self.connect;
        let (ptr, len) = if is_connect {
            (req.data.args[1], req.data.args[2])
        } else {
            (req.data.args[4], req.data.args[5])
        };
        let sockfd = req.data.args[0] as i32;
        let addr = read_remote(req.pid as i32, ptr, len.min(128) as usize);
        let kind = socket_kind(req.pid as i32, sockfd);
        // The memory we read is only trustworthy if the request is still live.
        if libseccomp::notify_id_valid(raw, req.id).is_err() {
            return;
        }
        let dest = addr
            .as_deref()
            .map(describe_sockaddr)
            .unwrap_or_else(|| Dest {
                text: "an unreadable address".into(),
                deny: false,
                ignore: false,
            });
        let resp = if dest.deny {
            ScmpNotifResp::new_error(req.id, -libc::EACCES, ScmpNotifRespFlags::empty())
        } else {
            ScmpNotifResp::new_continue(req.id, ScmpNotifRespFlags::CONTINUE)
        };
        let _ = resp.respond(raw);
        if dest.ignore {
            return;
        }
        let verb = if is_connect { "connect" } else { "sendto" };
        let key = format!("{verb} {}", dest.text);
        if !self.seen.insert(key) {
            return;
        }
        let detail = format!("{verb} {kind}to {}", dest.text);
        if self.recorded.len() < MAX_RECORDED {
            self.recorded.push(Blocked {
                kind: "network".into(),
                detail,
            });
        } else {
            self.dropped += 1;
        }
    }
}

fn read_remote(pid: i32, ptr: u64, len: usize) -> Option<Vec<u8>> {
    if ptr == 0 || len < 2 {
        return None;
    }
    let mut buf = vec![0u8; len];
    let mut local = [std::io::IoSliceMut::new(&mut buf)];
    let remote = [RemoteIoVec {
        base: ptr as usize,
        len,
    }];
    let n = process_vm_readv(nix::unistd::Pid::from_raw(pid), &mut local, &remote).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn socket_kind(pid: i32, sockfd: i32) -> &'static str {
    let Ok(pidfd) = sys::pidfd_open(pid) else {
        return "";
    };
    let Ok(fd) = sys::pidfd_getfd(pidfd.as_raw_fd(), sockfd) else {
        return "";
    };
    match sockopt::SockType.get(&fd) {
        Ok(nix::sys::socket::SockType::Stream) => "tcp/stream ",
        Ok(nix::sys::socket::SockType::Datagram) => "udp/datagram ",
        _ => "",
    }
}

struct Dest {
    text: String,
    deny: bool,
    ignore: bool,
}

fn describe_sockaddr(a: &[u8]) -> Dest {
    let family = u16::from_ne_bytes([a[0], a[1]]) as i32;
    match family {
        libc::AF_INET if a.len() >= 8 => {
            let port = u16::from_be_bytes([a[2], a[3]]);
            let ip = std::net::Ipv4Addr::new(a[4], a[5], a[6], a[7]);
            Dest {
                text: format!(
                    "{ip}:{port}{}",
                    if ip.is_loopback() { " (loopback)" } else { "" }
                ),
                deny: false,
                ignore: false,
            }
        }
        libc::AF_INET6 if a.len() >= 24 => {
            let port = u16::from_be_bytes([a[2], a[3]]);
            let mut o = [0u8; 16];
            o.copy_from_slice(&a[8..24]);
            let ip = std::net::Ipv6Addr::from(o);
            Dest {
                text: format!(
                    "[{ip}]:{port}{}",
                    if ip.is_loopback() { " (loopback)" } else { "" }
                ),
                deny: false,
                ignore: false,
            }
        }
        libc::AF_UNIX => {
            let path = &a[2..];
            if path.first() == Some(&0) {
                let name: Vec<u8> = path[1..].iter().copied().take_while(|b| *b != 0).collect();
                Dest {
                    text: format!(
                        "unix abstract socket @{}",
                        crate::workspace::paths::escape_for_humans(&name)
                    ),
                    deny: false,
                    ignore: false,
                }
            } else {
                let name: Vec<u8> = path.iter().copied().take_while(|b| *b != 0).collect();
                Dest {
                    text: format!(
                        "unix socket {}",
                        crate::workspace::paths::escape_for_humans(&name)
                    ),
                    deny: true,
                    ignore: name.is_empty() || is_libc_lookup_socket(&name),
                }
            }
        }
        libc::AF_UNSPEC => Dest {
            // connect(AF_UNSPEC) dissolves an association; not an attempt.
            text: String::new(),
            deny: false,
            ignore: true,
        },
        libc::AF_NETLINK => Dest {
            text: String::new(),
            deny: false,
            ignore: true,
        },
        other => Dest {
            text: format!("address family {other}"),
            deny: false,
            ignore: false,
        },
    }
}

/// Sockets the C library probes on its own for user, group and host lookups
/// (nscd, systemd-userdb, sssd). They are denied like any other pathname
/// socket but not reported: every `ls -l` would otherwise look like a
/// network attempt.
fn is_libc_lookup_socket(path: &[u8]) -> bool {
    const PREFIXES: &[&[u8]] = &[
        b"/var/run/nscd/",
        b"/run/nscd/",
        b"/run/systemd/userdb/",
        b"/var/lib/sss/pipes/",
    ];
    PREFIXES.iter().any(|p| path.starts_with(p))
}
