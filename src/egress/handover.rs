//! The hand-over on the proxy's control connection: the sockets the
//! sandbox made in its network namespace come in (checked to be what the
//! sandbox's init makes), and one byte goes back that releases the
//! command once the run's submission is on disk.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use super::forward::{ServiceListener, adopt};
use super::proxy::{PROXY_PORT, ReceiveFds};
use super::service::ServiceRule;
use crate::model::egress::{RELEASE_GO, RELEASE_STOP};

/// Says when the run's submission is on disk (`Some(true)`) or never will
/// be (`Some(false)`).
pub type Release = tokio::sync::watch::Receiver<Option<bool>>;

/// Accept the helper's connection (same uid only) and take its sockets:
/// the TCP listener, then the UDP socket, then one listener per declared
/// service, in the plan's order.
///
/// Then the release: once `release` says the run's submission is on disk,
/// the helper hears [`RELEASE_GO`] on the same connection and may start
/// the command; if it never will be, [`RELEASE_STOP`], and the connection
/// is closed (the helper fails closed on anything but the go).
pub(super) async fn take_sockets(
    control: std::os::unix::net::UnixListener,
    receive: ReceiveFds,
    rules: Vec<ServiceRule>,
    mut release: Release,
) -> io::Result<HandedOver> {
    let control = tokio::net::UnixListener::from_std(control)?;
    let (conn, _) = control.accept().await?;
    let cred = conn.peer_cred()?;
    if cred.uid() != nix::unistd::geteuid().as_raw() {
        return Err(io::Error::other(format!(
            "the control socket was reached by uid {}, not the helper",
            cred.uid()
        )));
    }
    let conn = conn.into_std()?;
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(600)))?;
    let (mut conn, fds) = tokio::task::spawn_blocking(move || receive(&conn).map(|f| (conn, f)))
        .await
        .map_err(io::Error::other)??;
    let expected = 2 + rules.len();
    if fds.len() != expected {
        return Err(io::Error::other(format!(
            "expected {expected} sockets, got {}",
            fds.len()
        )));
    }
    let mut fds = fds.into_iter();
    let (Some(t), Some(u)) = (fds.next(), fds.next()) else {
        return Err(io::Error::other("no proxy listener or DNS socket"));
    };
    let service_fds: Vec<OwnedFd> = fds.collect();
    let t = std::net::TcpListener::from(t);
    let u = std::net::UdpSocket::from(u);
    // Served only if they are what the sandbox's init makes: a listener
    // and a UDP socket on loopback (never a socket of the host's that a
    // confused helper passed on).
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    let kind = |fd: std::os::fd::BorrowedFd<'_>| getsockopt(&fd, sockopt::SockType).ok();
    let ua = u.local_addr()?;
    if kind(u.as_fd()) != Some(SockType::Datagram) || !ua.ip().is_loopback() || ua.port() != 53 {
        return Err(io::Error::other(format!(
            "the socket handed over is not the DNS responder's socket on the sandbox's loopback ({ua})"
        )));
    }
    let listening = getsockopt(&t, sockopt::AcceptConn).unwrap_or(false);
    let ta = t.local_addr()?;
    if kind(t.as_fd()) != Some(SockType::Stream)
        || !listening
        || !ta.ip().is_loopback()
        || ta.port() != PROXY_PORT
    {
        return Err(io::Error::other(format!(
            "the socket handed over is not the proxy's listener on the sandbox's loopback ({ta})"
        )));
    }
    t.set_nonblocking(true)?;
    u.set_nonblocking(true)?;
    let services = service_fds
        .into_iter()
        .zip(&rules)
        .map(|(fd, rule)| adopt(fd, rule))
        .collect::<io::Result<Vec<_>>>()?;
    let durable = release
        .wait_for(Option::is_some)
        .await
        .map(|v| *v == Some(true))
        .unwrap_or(false);
    conn.write_all(&[if durable { RELEASE_GO } else { RELEASE_STOP }])?;
    if !durable {
        return Err(io::Error::other(
            "the run's submission did not reach the journal, so the sandbox was told not to start the command",
        ));
    }
    Ok((
        tokio::net::TcpListener::from_std(t)?,
        tokio::net::UdpSocket::from_std(u)?,
        services,
    ))
}

/// What the sandbox handed over: the proxy's listener, the DNS socket,
/// the services' listeners.
pub(super) type HandedOver = (
    tokio::net::TcpListener,
    tokio::net::UdpSocket,
    Vec<ServiceListener>,
);
