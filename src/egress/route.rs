//! How the kernel would route a connection to an address, asked at the
//! moment the proxy is about to connect (and again once it has): one
//! `RTM_GETROUTE` request over a `NETLINK_ROUTE` socket, the same lookup
//! `ip route get ADDR` makes. The reply's route type says whether the
//! address is this host's own (`local`), a broadcast or anycast address of
//! one of its networks, or an ordinary `unicast` destination elsewhere.
//!
//! Why a route lookup and not a list of the interfaces' addresses: the
//! route is what the kernel itself consults when the proxy connects, so it
//! also covers what an address list misses: a whole prefix routed to the
//! host (`ip route add local 203.0.113.0/24 dev lo`, "AnyIP"), the
//! broadcast address of an attached network, addresses added or removed
//! since the last look, and policy routing (the lookup runs with the
//! proxy's own uid and no mark, as its connections do).
//!
//! The netlink socket is opened by the thread that is about to connect, so
//! the answer is about the network namespace the proxy's connections are
//! made in (a socket takes its creator's namespace). The request is a fixed
//! layout of a few bytes and only one byte of the reply is read: no crate
//! is needed for that, and none is pulled in.

use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recvfrom, sendto,
    setsockopt, socket, sockopt,
};

/// What the kernel does with a connection to an address (`rtm_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// Sent to another host: the only kind the proxy connects to.
    Unicast,
    /// Delivered to this host itself.
    Local,
    /// A broadcast address of an attached network.
    Broadcast,
    /// An anycast address this host answers on.
    Anycast,
    Multicast,
    /// No route, or a route that drops or refuses (blackhole, unreachable,
    /// prohibit, throw).
    Unroutable,
    /// Any other type (NAT, external resolver): not a plain destination.
    Other(u8),
}

impl RouteKind {
    fn from_rtm_type(t: u8) -> RouteKind {
        match t {
            libc::RTN_UNICAST => RouteKind::Unicast,
            libc::RTN_LOCAL => RouteKind::Local,
            libc::RTN_BROADCAST => RouteKind::Broadcast,
            libc::RTN_ANYCAST => RouteKind::Anycast,
            libc::RTN_MULTICAST => RouteKind::Multicast,
            libc::RTN_BLACKHOLE | libc::RTN_UNREACHABLE | libc::RTN_PROHIBIT | libc::RTN_THROW => {
                RouteKind::Unroutable
            }
            other => RouteKind::Other(other),
        }
    }
}

/// The route lookup, as a seam: the proxy asks the kernel ([`Kernel`]);
/// unit tests answer for it.
pub trait Routes {
    /// How a connection to `ip` would be routed now.
    fn route_kind(&self, ip: IpAddr) -> io::Result<RouteKind>;
}

/// The kernel's answer, in the calling thread's network namespace.
#[derive(Debug, Default, Clone, Copy)]
pub struct Kernel;

/// `struct nlmsghdr` and `struct rtmsg`, in bytes.
const NLMSG_HDR: usize = 16;
const RTMSG: usize = 12;
/// `rtm_type`'s offset in a reply.
const RTM_TYPE_AT: usize = NLMSG_HDR + 7;
/// Messages read for one answer before giving up (the socket is new and
/// private: the first is the answer).
const MAX_REPLIES: usize = 8;
/// The kernel answers a route request at once; a socket that says nothing
/// for this long is a failure (and the address is refused).
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

impl Routes for Kernel {
    fn route_kind(&self, ip: IpAddr) -> io::Result<RouteKind> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        let timeout = nix::sys::time::TimeVal::new(REPLY_TIMEOUT.as_secs() as _, 0);
        setsockopt(&fd, sockopt::ReceiveTimeout, &timeout)?;
        let mut seq = [0u8; 4];
        getrandom::fill(&mut seq).expect("the kernel's random source works");
        let seq = u32::from_ne_bytes(seq);
        let req = route_request(ip, seq);
        sendto(
            fd.as_raw_fd(),
            &req,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )?;
        let mut buf = [0u8; 4096];
        for _ in 0..MAX_REPLIES {
            let (n, from) = recvfrom::<NetlinkAddr>(fd.as_raw_fd(), &mut buf)?;
            // Only the kernel (port 0) answers; anything else is ignored.
            if from.is_some_and(|a| a.pid() == 0)
                && let Some(r) = parse_route_reply(&buf[..n], seq)
            {
                return r;
            }
        }
        Err(io::Error::other(
            "netlink route lookup: no answer to the request among the replies",
        ))
    }
}

/// An `RTM_GETROUTE` request for `ip`: header, `rtmsg` (family, full-length
/// destination), one `RTA_DST` attribute.
fn route_request(ip: IpAddr, seq: u32) -> Vec<u8> {
    let (family, addr): (u8, Vec<u8>) = match ip {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
    };
    let attr_len = 4 + addr.len();
    let len = NLMSG_HDR + RTMSG + attr_len;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&libc::RTM_GETROUTE.to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // rtm_family, rtm_dst_len, src_len, tos, table, protocol, scope, type; flags
    m.extend_from_slice(&[family, (addr.len() * 8) as u8, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    m.extend_from_slice(&libc::RTA_DST.to_ne_bytes());
    m.extend_from_slice(&addr);
    m
}

/// The route type in a reply to request `seq`; `None` for a message that
/// is not the answer (another sequence number); an error reply, or a reply
/// too short to hold a route, is an error.
fn parse_route_reply(b: &[u8], seq: u32) -> Option<io::Result<RouteKind>> {
    let bad = |why: &str| Some(Err(io::Error::other(format!("netlink route reply: {why}"))));
    if b.len() < NLMSG_HDR {
        return bad("shorter than its header");
    }
    let len = u32::from_ne_bytes(b[0..4].try_into().ok()?) as usize;
    let ty = u16::from_ne_bytes(b[4..6].try_into().ok()?);
    let got_seq = u32::from_ne_bytes(b[8..12].try_into().ok()?);
    if got_seq != seq {
        return None;
    }
    if len > b.len() || len < NLMSG_HDR {
        return bad("a length that does not fit the message");
    }
    match ty as libc::c_int {
        libc::NLMSG_ERROR if len >= NLMSG_HDR + 4 => {
            let e = i32::from_ne_bytes(b[NLMSG_HDR..NLMSG_HDR + 4].try_into().ok()?);
            Some(match -e {
                // No route at all: nothing the proxy may connect to.
                libc::ENETUNREACH | libc::EHOSTUNREACH => Ok(RouteKind::Unroutable),
                0 => Err(io::Error::other(
                    "netlink route reply: an acknowledgement, not a route",
                )),
                errno => Err(io::Error::from_raw_os_error(errno)),
            })
        }
        t if t == libc::RTM_NEWROUTE as libc::c_int && len >= NLMSG_HDR + RTMSG => {
            Some(Ok(RouteKind::from_rtm_type(b[RTM_TYPE_AT])))
        }
        _ => bad("neither a route nor an error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(ty: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDR + body.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn the_request_is_a_getroute_for_the_whole_address() {
        let r = route_request("203.0.113.9".parse().unwrap(), 7);
        assert_eq!(r.len(), 36);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 36);
        assert_eq!(u16::from_ne_bytes(r[4..6].try_into().unwrap()), 26);
        assert_eq!((r[16], r[17]), (libc::AF_INET as u8, 32));
        assert_eq!(&r[32..36], &[203, 0, 113, 9]);
        let r = route_request("2001:db8::1".parse().unwrap(), 7);
        assert_eq!((r.len(), r[16], r[17]), (48, libc::AF_INET6 as u8, 128));
    }

    #[test]
    fn replies_give_the_route_type_or_an_error() {
        let mut rt = [0u8; RTMSG];
        for (t, want) in [
            (libc::RTN_UNICAST, RouteKind::Unicast),
            (libc::RTN_LOCAL, RouteKind::Local),
            (libc::RTN_BROADCAST, RouteKind::Broadcast),
            (libc::RTN_ANYCAST, RouteKind::Anycast),
            (libc::RTN_BLACKHOLE, RouteKind::Unroutable),
            (libc::RTN_NAT, RouteKind::Other(libc::RTN_NAT)),
        ] {
            rt[7] = t;
            let m = reply(libc::RTM_NEWROUTE, 5, &rt);
            assert_eq!(parse_route_reply(&m, 5).unwrap().unwrap(), want);
        }
        // Another request's answer is skipped.
        assert!(parse_route_reply(&reply(libc::RTM_NEWROUTE, 6, &rt), 5).is_none());
        let unreach = reply(2, 5, &(-libc::ENETUNREACH).to_ne_bytes());
        assert_eq!(
            parse_route_reply(&unreach, 5).unwrap().unwrap(),
            RouteKind::Unroutable
        );
        let perm = reply(2, 5, &(-libc::EPERM).to_ne_bytes());
        assert!(parse_route_reply(&perm, 5).unwrap().is_err());
        let short = reply(libc::RTM_NEWROUTE, 5, &rt[..4]);
        assert!(parse_route_reply(&short, 5).unwrap().is_err());
        assert!(parse_route_reply(&[0u8; 8], 5).unwrap().is_err());
    }

    #[test]
    fn the_kernel_routes_loopback_locally() {
        // The tests' namespace has loopback up, hence its local route.
        let k = Kernel;
        assert_eq!(
            k.route_kind("127.0.0.1".parse().unwrap()).unwrap(),
            RouteKind::Local
        );
    }
}
