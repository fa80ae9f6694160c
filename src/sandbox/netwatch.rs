//! Observing network attempts. The command's seccomp filter turns every
//! `connect()` and every `sendto()` with a destination into a user
//! notification; the sandbox's init reads the destination from the caller's
//! memory, records it, and answers. Enforcement does not depend on this: the
//! network namespace has only loopback and Landlock denies TCP. The record is
//! the evidence a reviewer sees (what the command *would* have reached).
//!
//! Answers: pathname unix sockets get EACCES (a socket file in the workspace
//! could belong to a host service), but a `connect()` to a declared Unix
//! service's path, which the init carries out itself
//! ([`NetWatch::connect_service`]); everything else continues into the
//! kernel, which refuses it (no route, or Landlock) unless it is a declared
//! TCP service's listener.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{GetSockOpt, SockaddrLike, sockopt};
use nix::sys::uio::{RemoteIoVec, process_vm_readv};

use super::sys;
use crate::model::{Blocked, BlockedKind, DirectAttempt};

/// At most this many attempts are listed; the rest are counted.
pub(super) const MAX_RECORDED: usize = 64;

pub(super) struct NetWatch {
    pub fd: OwnedFd,
    pub recorded: Vec<Blocked>,
    pub dropped: u64,
    seen: std::collections::HashSet<String>,
    /// Internet destinations (for the egress report), at most
    /// [`MAX_RECORDED`].
    pub direct: Vec<DirectAttempt>,
    /// The sandbox's own services on `127.0.0.1`, not attempts: the DNS
    /// responder on 53 (when the engine serves one) and the egress proxy's
    /// port (in every rehearsal).
    dns_responder: bool,
    proxy_port: Option<u16>,
    /// The declared TCP services' listeners (not attempts: the engine
    /// records their connections, with bytes).
    tcp_services: Vec<std::net::SocketAddr>,
    /// The declared Unix services (set by the init after [`NetWatch::new`]).
    pub unix_services: Vec<super::helper::services::UnixTarget>,
    /// The listener reported that no process is left under the filter:
    /// nothing more can arrive, so the supervisor stops polling it.
    pub hung_up: bool,
}

/// What the kernel will be told.
enum Answer {
    Continue,
    Refuse,
    /// Connect the caller's socket to the Unix service with this index.
    ConnectService(usize),
}

impl NetWatch {
    pub(super) fn new(fd: OwnedFd, egress: Option<&super::spec::EgressPlan>) -> Self {
        NetWatch {
            fd,
            recorded: Vec::new(),
            dropped: 0,
            seen: Default::default(),
            direct: Vec::new(),
            dns_responder: egress.is_some(),
            proxy_port: egress.and_then(|e| e.proxy_port),
            tcp_services: egress
                .map(|e| {
                    e.services
                        .iter()
                        .filter_map(|s| match s {
                            crate::model::ServiceEndpoint::Tcp(a) => Some(*a),
                            crate::model::ServiceEndpoint::Unix(_) => None,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            unix_services: Vec::new(),
            hung_up: false,
        }
    }

    /// Handle one pending notification. Errors only mean the caller vanished.
    ///
    /// The decision never rests on the caller's memory (another thread can
    /// change it between our read and the kernel's): the socket's family and
    /// type come from the descriptor itself (copied out with `pidfd_getfd`),
    /// and the only other input is a length passed in a register. Unix
    /// sockets can reach host services the namespaces do not separate (a
    /// socket file in a tree the image shows), so:
    /// - `connect()` on a unix socket is refused;
    /// - datagrams on a unix socket are refused unless `sendto()` names no
    ///   destination (socketpairs); stream and seqpacket sockets ignore or
    ///   refuse destinations in the kernel, so their sends continue;
    /// - everything else continues into the kernel (no route out of the
    ///   network namespace; Landlock denies TCP).
    ///
    /// The recorded destination is read from memory and labelled as what the
    /// command passed.
    pub(super) fn handle_one(&mut self) {
        let raw = self.fd.as_raw_fd();
        let Ok(req) = sys::notif_receive(raw) else {
            return;
        };
        let pid = req.pid as i32;
        let a = req.data.args;
        // The filter admits the native architecture only (anything else is
        // killed), so notifications carry native numbers.
        let verb = match libc::c_long::from(req.data.nr) {
            libc::SYS_connect => "connect",
            libc::SYS_sendto => "sendto",
            libc::SYS_sendmsg => "sendmsg",
            _ => "sendmmsg",
        };
        let sock = socket_info(pid, a[0] as i32);
        let mut addrs: Vec<Option<Vec<u8>>> = match verb {
            "connect" => vec![read_remote(pid, a[1], a[2].min(128) as usize)],
            "sendto" => vec![read_remote(pid, a[4], a[5].min(128) as usize)],
            "sendmsg" => vec![msg_name(pid, a[1])],
            // A batch sends every message (the kernel takes at most
            // UIO_MAXIOV of them): each names its own destination.
            _ => (0..a[2].min(UIO_MAXIOV))
                .map(|i| msg_name(pid, a[1].wrapping_add(i * MMSGHDR_SIZE)))
                .collect(),
        };
        // IPv4 datagram sockets take an AF_UNSPEC destination as AF_INET and
        // send to it; only connect() reads it as "dissolve the association".
        if verb != "connect" && matches!(sock, Some((libc::AF_INET, _))) {
            for a in addrs.iter_mut().flatten() {
                if a.len() >= 2 && u16::from_ne_bytes([a[0], a[1]]) == libc::AF_UNSPEC as u16 {
                    a[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
                }
            }
        }
        let (answer, record) = match sock {
            None => (Answer::Refuse, addrs.iter().collect()),
            Some((libc::AF_UNIX, ty)) => {
                let names_a_destination = verb != "sendto" || a[5] != 0;
                let service = (verb == "connect")
                    .then(|| self.unix_service(addrs.first().and_then(|x| x.as_deref())))
                    .flatten();
                if let Some(i) = service {
                    (Answer::ConnectService(i), Vec::new())
                } else if verb == "connect" || (ty == libc::SOCK_DGRAM && names_a_destination) {
                    (Answer::Refuse, addrs.iter().collect())
                } else {
                    (Answer::Continue, Vec::new())
                }
            }
            Some((libc::AF_NETLINK, _)) => (Answer::Continue, Vec::new()),
            // A send without a destination goes to the connected peer, whose
            // connect() was already seen.
            Some(_) => (
                Answer::Continue,
                addrs
                    .iter()
                    .filter(|d| verb == "connect" || d.is_some())
                    .filter(|d| !self.is_egress_service(d.as_deref()))
                    .collect::<Vec<_>>(),
            ),
        };
        // Still a live request? (Otherwise the caller is gone.)
        if !sys::notif_id_valid(raw, req.id) {
            return;
        }
        let (val, error, continue_call) = match answer {
            Answer::Refuse => (0, -libc::EACCES, false),
            Answer::Continue => (0, 0, true),
            Answer::ConnectService(i) => match self.connect_service(pid, a[0] as i32, i) {
                Ok(()) => (0, 0, false),
                Err(e) => (0, -e, false),
            },
        };
        let _ = sys::notif_respond(raw, req.id, val, error, continue_call);
        let refused = matches!(answer, Answer::Refuse);
        for addr in record {
            self.record(verb, sock, refused, addr.as_deref());
        }
    }

    /// List one attempt (once per verb and destination).
    fn record(&mut self, verb: &str, sock: Option<(i32, i32)>, refused: bool, addr: Option<&[u8]>) {
        let dest = addr.map(describe_sockaddr).unwrap_or_else(|| Dest {
            text: "a destination it did not name".into(),
            ignore: false,
        });
        if dest.ignore {
            return;
        }
        if let Some(d) = addr.and_then(inet_destination)
            && self.direct.len() < MAX_RECORDED
            && !self.direct.contains(&d)
        {
            self.direct.push(d);
        }
        let kind = match sock {
            Some((_, libc::SOCK_STREAM)) => "stream ",
            Some((_, libc::SOCK_DGRAM)) => "datagram ",
            Some(_) => "",
            None => "(socket not inspectable, refused) ",
        };
        let key = format!("{verb} {}", dest.text);
        if !self.seen.insert(key) {
            return;
        }
        let detail = format!(
            "{verb} {kind}to {}{}",
            dest.text,
            if refused { " (refused)" } else { "" }
        );
        if self.recorded.len() < MAX_RECORDED {
            self.recorded.push(Blocked {
                kind: BlockedKind::Network,
                detail,
            });
        } else {
            self.dropped += 1;
        }
    }
}

impl NetWatch {
    /// `127.0.0.1:53` when the engine serves the DNS responder,
    /// `127.0.0.1:proxy_port` (in every rehearsal), or a declared
    /// TCP service's own address and port.
    fn is_egress_service(&self, addr: Option<&[u8]>) -> bool {
        let Some(d) = addr.and_then(inet_destination) else {
            return false;
        };
        if self
            .tcp_services
            .contains(&std::net::SocketAddr::new(d.addr, d.port))
        {
            return true;
        }
        matches!(
            d,
            DirectAttempt { addr: std::net::IpAddr::V4(ip), port: p }
                if ip == std::net::Ipv4Addr::LOCALHOST
                    && ((self.dns_responder && p == 53) || Some(p) == self.proxy_port)
        )
    }

    /// The declared Unix service a `connect()` destination names, by its
    /// exact absolute path (as read from the caller's memory: only used to
    /// choose, never read again).
    fn unix_service(&self, addr: Option<&[u8]>) -> Option<usize> {
        let a = addr?;
        if a.len() < 3 || u16::from_ne_bytes([a[0], a[1]]) as i32 != libc::AF_UNIX {
            return None;
        }
        let path: Vec<u8> = a[2..].iter().copied().take_while(|b| *b != 0).collect();
        self.unix_services.iter().position(|u| u.path == path)
    }

    /// Connect the caller's socket `sockfd` to Unix service `i`'s socket
    /// file, as the caller asked (the init holds that inode: see
    /// `helper/services.rs`); the errno to answer on failure. The socket
    /// is made non-blocking for the call, so the init never waits on a
    /// full listen queue (the caller gets EAGAIN then, as a non-blocking
    /// caller would).
    fn connect_service(&self, pid: i32, sockfd: i32, i: usize) -> Result<(), i32> {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EACCES);
        let target = self.unix_services.get(i).ok_or(libc::EACCES)?;
        let pidfd = sys::pidfd_open_thread(pid)
            .or_else(|_| sys::pidfd_open(pid))
            .map_err(errno)?;
        let fd = sys::pidfd_getfd(pidfd.as_raw_fd(), sockfd).map_err(errno)?;
        let flags = fcntl(&fd, FcntlArg::F_GETFL).map_err(|e| e as i32)?;
        let flags = OFlag::from_bits_truncate(flags);
        let blocking = !flags.contains(OFlag::O_NONBLOCK);
        if blocking {
            fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).map_err(|e| e as i32)?;
        }
        let at = nix::sys::socket::UnixAddr::new(format!("/proc/self/fd/{}", target.file).as_str())
            .map_err(|e| e as i32);
        let r =
            at.and_then(|at| nix::sys::socket::connect(fd.as_raw_fd(), &at).map_err(|e| e as i32));
        if blocking {
            let _ = fcntl(&fd, FcntlArg::F_SETFL(flags));
        }
        r
    }
}

/// An AF_INET or AF_INET6 destination as address and port.
fn inet_destination(a: &[u8]) -> Option<DirectAttempt> {
    let family = u16::from_ne_bytes([*a.first()?, *a.get(1)?]) as i32;
    match family {
        libc::AF_INET if a.len() >= 8 => Some(DirectAttempt {
            addr: std::net::Ipv4Addr::new(a[4], a[5], a[6], a[7]).into(),
            port: u16::from_be_bytes([a[2], a[3]]),
        }),
        libc::AF_INET6 if a.len() >= 24 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&a[8..24]);
            Some(DirectAttempt {
                addr: std::net::Ipv6Addr::from(o).into(),
                port: u16::from_be_bytes([a[2], a[3]]),
            })
        }
        _ => None,
    }
}

/// (domain, type) of a descriptor of another process. `pid` is the
/// caller's thread id: a thread other than its process's first needs a
/// thread pidfd (a plain one is for leaders only).
fn socket_info(pid: i32, sockfd: i32) -> Option<(i32, i32)> {
    let pidfd = sys::pidfd_open_thread(pid)
        .or_else(|_| sys::pidfd_open(pid))
        .ok()?;
    let fd = sys::pidfd_getfd(pidfd.as_raw_fd(), sockfd).ok()?;
    let ty = match sockopt::SockType.get(&fd).ok()? {
        nix::sys::socket::SockType::Stream => libc::SOCK_STREAM,
        nix::sys::socket::SockType::Datagram => libc::SOCK_DGRAM,
        nix::sys::socket::SockType::SeqPacket => libc::SOCK_SEQPACKET,
        _ => libc::SOCK_RAW,
    };
    let name: nix::sys::socket::SockaddrStorage =
        nix::sys::socket::getsockname(fd.as_raw_fd()).ok()?;
    let domain = name.family().map(|f| f as i32)?;
    Some((domain, ty))
}

/// The most messages one sendmmsg() sends (the kernel's UIO_MAXIOV).
const UIO_MAXIOV: u64 = 1024;
/// `struct mmsghdr`: a msghdr (56 bytes) and the length sent, padded.
const MMSGHDR_SIZE: u64 = 64;

/// The destination a `struct msghdr` at `ptr` names (msg_name at 0,
/// msg_namelen at 8), if any.
fn msg_name(pid: i32, ptr: u64) -> Option<Vec<u8>> {
    let h = read_remote(pid, ptr, 12)?;
    let name = u64::from_ne_bytes(h[0..8].try_into().ok()?);
    let len = u32::from_ne_bytes(h[8..12].try_into().ok()?);
    if name == 0 || len == 0 {
        None
    } else {
        read_remote(pid, name, (len as usize).min(128))
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

struct Dest {
    text: String,
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
                        crate::model::text::escape_for_humans(&name)
                    ),
                    ignore: false,
                }
            } else {
                let name: Vec<u8> = path.iter().copied().take_while(|b| *b != 0).collect();
                Dest {
                    text: format!(
                        "unix socket {}",
                        crate::model::text::escape_for_humans(&name)
                    ),
                    ignore: name.is_empty() || is_libc_lookup_socket(&name),
                }
            }
        }
        libc::AF_UNSPEC => Dest {
            // connect(AF_UNSPEC) dissolves an association; not an attempt.
            text: String::new(),
            ignore: true,
        },
        libc::AF_NETLINK => Dest {
            text: String::new(),
            ignore: true,
        },
        other => Dest {
            text: format!("address family {other}"),
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
