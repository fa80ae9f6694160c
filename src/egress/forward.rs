//! Serving a run's declared services: the sandbox's init creates, for each
//! admitted service, a listening socket inside the sandbox (a TCP listener
//! on the same loopback address and port in the sandbox's own network
//! namespace, or a Unix stream socket shown at the same path) and hands it
//! over with the proxy's sockets; here each connection the command makes
//! is joined to a new connection to the real endpoint, made with the
//! workspace owner's credentials (see `sandbox/service.rs`), and its bytes
//! are counted each way into `rehearsal.egress` (`how: service`).
//!
//! A Unix endpoint is opened without following a link in its last
//! component, must be a socket, and must not be one of the never-rehearsable
//! sockets under another name (compared by inode); the connection goes to
//! the inode so checked (`/proc/self/fd/N`), not to the path again.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use nix::fcntl::{OFlag, open, openat};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
use nix::sys::stat::Mode;
use tokio::io::{AsyncRead, AsyncWrite};

use super::proxy::{Counting, MAX_CLIENTS, Shared, UPSTREAM_TIMEOUT};
use super::service::{ServiceRule, never_by_inode};
use crate::model::{EgressHow, ServiceEndpoint};

/// What a connection attempt does (see `sandbox::service`).
pub type ConnectWork = Box<dyn FnOnce() -> io::Result<OwnedFd> + Send>;
/// Runs a [`ConnectWork`] as `(uid, gid, groups)`: the sandbox provides
/// it (taking other credentials is the sandbox's kind of code).
pub type ConnectAs = fn(u32, u32, &[u32], ConnectWork) -> io::Result<OwnedFd>;

/// The run's admitted services and whose credentials reach them.
#[derive(Clone)]
pub struct ServiceSet {
    pub rules: Vec<ServiceRule>,
    /// The workspace owner: uid, gid, supplementary groups.
    pub owner: (u32, u32, Vec<u32>),
    pub connect_as: ConnectAs,
}

/// One service's listener as the sandbox handed it over.
pub(super) enum ServiceListener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// Take a socket the sandbox handed over for `rule`, if it is what the
/// sandbox's init makes for it: a listening stream socket, on the
/// service's own loopback address and port for TCP, a Unix one for a path.
pub(super) fn adopt(fd: OwnedFd, rule: &ServiceRule) -> io::Result<ServiceListener> {
    use nix::sys::socket::{getsockopt, sockopt};
    let stream = getsockopt(&fd, sockopt::SockType).ok() == Some(SockType::Stream);
    let listening = getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false);
    let bad = |what: String| {
        io::Error::other(format!(
            "the socket handed over for the service {} is not {what}",
            rule.endpoint
        ))
    };
    if !stream || !listening {
        return Err(bad("a listening stream socket".into()));
    }
    match &rule.endpoint {
        ServiceEndpoint::Tcp(addr) => {
            let l = std::net::TcpListener::from(fd);
            if l.local_addr()? != *addr {
                return Err(bad(format!("a listener on {addr}")));
            }
            l.set_nonblocking(true)?;
            Ok(ServiceListener::Tcp(tokio::net::TcpListener::from_std(l)?))
        }
        ServiceEndpoint::Unix(_) => {
            let l = std::os::unix::net::UnixListener::from(fd);
            if l.local_addr()?.as_pathname().is_none() {
                return Err(bad("a Unix socket with a path".into()));
            }
            l.set_nonblocking(true)?;
            Ok(ServiceListener::Unix(tokio::net::UnixListener::from_std(
                l,
            )?))
        }
    }
}

/// Accept the command's connections to one service until the run ends.
pub(super) async fn serve_service(
    listener: ServiceListener,
    rule: ServiceRule,
    shared: Arc<Shared>,
    set: Arc<ServiceSet>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        // At the cap nothing more is accepted: further connections wait
        // in the sandbox's own listen queue.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let accepted: io::Result<Box<dyn Duplex>> = match &listener {
            ServiceListener::Tcp(l) => l.accept().await.map(|(s, _)| Box::new(s) as _),
            ServiceListener::Unix(l) => l.accept().await.map(|(s, _)| Box::new(s) as _),
        };
        let Ok(client) = accepted else { continue };
        let (rule, shared, set) = (rule.clone(), shared.clone(), set.clone());
        tokio::spawn(async move {
            let _slot = slot;
            join_upstream(client, &rule, &shared, &set).await;
        });
    }
}

/// A byte stream either way (the command's side, or the service's).
trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// One connection of the command's: connect to the real endpoint as the
/// owner, then copy both ways, counted.
async fn join_upstream(
    client: Box<dyn Duplex>,
    rule: &ServiceRule,
    shared: &Shared,
    set: &ServiceSet,
) {
    let counters = shared.record_service(rule);
    let (name, port) = rule.endpoint.report_name();
    let (uid, gid, groups) = set.owner.clone();
    let (endpoint, connect_as) = (rule.endpoint.clone(), set.connect_as);
    let opened = tokio::time::timeout(
        UPSTREAM_TIMEOUT,
        tokio::task::spawn_blocking(move || {
            connect_as(
                uid,
                gid,
                &groups,
                Box::new(move || connect_upstream(&endpoint)),
            )
        }),
    )
    .await;
    let upstream: io::Result<Box<dyn Duplex>> = match opened {
        Ok(Ok(Ok(fd))) => into_stream(fd, &rule.endpoint),
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(e)) => Err(io::Error::other(e)),
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "timed out")),
    };
    let mut upstream = match upstream {
        Ok(u) => u,
        Err(e) => {
            let why = format!("the host service could not be reached: {e}");
            shared.record(&name, port, EgressHow::Service, true, Some(why));
            return;
        }
    };
    let mut client = Counting {
        inner: client,
        read: counters,
        read_is_out: true,
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

fn into_stream(fd: OwnedFd, endpoint: &ServiceEndpoint) -> io::Result<Box<dyn Duplex>> {
    Ok(match endpoint {
        ServiceEndpoint::Tcp(_) => {
            let s = std::net::TcpStream::from(fd);
            s.set_nonblocking(true)?;
            Box::new(tokio::net::TcpStream::from_std(s)?)
        }
        ServiceEndpoint::Unix(_) => {
            let s = std::os::unix::net::UnixStream::from(fd);
            s.set_nonblocking(true)?;
            Box::new(tokio::net::UnixStream::from_std(s)?)
        }
    })
}

/// Connect to the real endpoint, with whatever credentials this thread
/// holds (the owner's: see [`ConnectAs`]).
fn connect_upstream(endpoint: &ServiceEndpoint) -> io::Result<OwnedFd> {
    match endpoint {
        ServiceEndpoint::Tcp(addr) => {
            std::net::TcpStream::connect_timeout(addr, UPSTREAM_TIMEOUT).map(OwnedFd::from)
        }
        ServiceEndpoint::Unix(path) => {
            let (dir, name) = match (path.parent(), path.file_name()) {
                (Some(d), Some(n)) => (d, n),
                _ => return Err(io::Error::other("not a socket path")),
            };
            let dir_fd = open(
                dir,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            let sock_file = openat(
                &dir_fd,
                name,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            let md = nix::sys::stat::fstat(&sock_file)?;
            let kind = md.st_mode & libc::S_IFMT;
            if kind != libc::S_IFSOCK {
                return Err(io::Error::other(if kind == libc::S_IFLNK {
                    "the path is a symbolic link, not a socket (links are not followed)"
                } else {
                    "the path is not a socket"
                }));
            }
            let (dev, ino) = std::fs::metadata(format!("/proc/self/fd/{}", sock_file.as_raw_fd()))
                .map(|m| (m.dev(), m.ino()))?;
            if let Some(why) = never_by_inode(dev, ino) {
                return Err(io::Error::other(format!("refused: {why}")));
            }
            let s = socket(
                AddressFamily::Unix,
                SockType::Stream,
                SockFlag::SOCK_CLOEXEC,
                None,
            )?;
            let at =
                UnixAddr::new(format!("/proc/self/fd/{}", sock_file.as_fd().as_raw_fd()).as_str())?;
            connect(s.as_raw_fd(), &at)?;
            Ok(s)
        }
    }
}
