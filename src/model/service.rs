//! A host service a rehearsal may talk to (`intent.network.services`): a
//! TCP endpoint on the host's loopback (`127.0.0.1:5432`, `[::1]:6379`) or
//! a Unix stream socket's absolute path (`/run/postgresql/.s.PGSQL.5432`).
//! Parsed here, once, for the envelope, the CLI and the system policy; what
//! the system allows is `egress/service.rs`'s decision.

use core::net::{IpAddr, SocketAddr};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::{Component, Path, PathBuf};

/// The longest Unix socket path (`sun_path` holds 108 bytes, NUL included).
pub(crate) const MAX_SOCKET_PATH: usize = 107;

/// One declared host service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceEndpoint {
    /// A TCP port on the host's loopback (`127.0.0.0/8` or `::1`).
    Tcp(SocketAddr),
    /// A Unix stream socket, by its absolute path on the host.
    Unix(PathBuf),
}

impl ServiceEndpoint {
    /// Parse one endpoint; the error says what is wrong and what to write.
    pub fn parse(s: &str) -> Result<ServiceEndpoint, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("is empty; give HOST:PORT on loopback (127.0.0.1:5432, [::1]:6379) or a Unix socket's absolute path".into());
        }
        if t.starts_with('/') {
            return Self::parse_path(t);
        }
        if t.contains("://") {
            return Err(format!(
                "{t:?} looks like a URL; give 127.0.0.1:PORT, [::1]:PORT or a socket path"
            ));
        }
        let addr: SocketAddr = t.parse().map_err(|_| {
            format!(
                "{t:?} is not an address and port on loopback nor an absolute socket path; write 127.0.0.1:5432, [::1]:6379 or /run/postgresql/.s.PGSQL.5432 (names such as localhost are not taken: they may mean either address)"
            )
        })?;
        // One spelling per endpoint: the IPv4 form of a mapped address.
        let ip = match addr.ip() {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        if !ip.is_loopback() {
            return Err(format!(
                "{t:?} is not on the host's loopback; services are loopback endpoints only (a remote host is reached through intent.network.allow)"
            ));
        }
        if addr.port() == 0 {
            return Err(format!("{t:?} has port 0; give the service's port"));
        }
        Ok(ServiceEndpoint::Tcp(SocketAddr::new(ip, addr.port())))
    }

    fn parse_path(t: &str) -> Result<ServiceEndpoint, String> {
        let p = Path::new(t);
        if t.len() > MAX_SOCKET_PATH {
            return Err(format!(
                "the socket path is {} bytes; a Unix socket path has at most {MAX_SOCKET_PATH}",
                t.len()
            ));
        }
        if t.bytes().any(|b| b == 0 || b.is_ascii_control()) {
            return Err("the socket path has a control character".into());
        }
        if p.components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
            || t.contains("//")
            || (t.len() > 1 && t.ends_with('/'))
        {
            return Err(format!(
                "{t:?} is not a plain absolute path (no '.', '..', '//' or trailing '/'); give the socket's path as the service creates it"
            ));
        }
        if p == Path::new("/") {
            return Err("/ is not a socket".into());
        }
        Ok(ServiceEndpoint::Unix(p.to_path_buf()))
    }

    /// The TCP port, for a TCP endpoint.
    pub fn tcp_port(&self) -> Option<u16> {
        match self {
            ServiceEndpoint::Tcp(a) => Some(a.port()),
            ServiceEndpoint::Unix(_) => None,
        }
    }

    /// `(name, port)` as the egress report names it: the address (an IPv6
    /// one in brackets) and the port, or the path and none.
    pub fn report_name(&self) -> (String, Option<u16>) {
        match self {
            ServiceEndpoint::Tcp(SocketAddr::V4(a)) => (a.ip().to_string(), Some(a.port())),
            ServiceEndpoint::Tcp(SocketAddr::V6(a)) => (format!("[{}]", a.ip()), Some(a.port())),
            ServiceEndpoint::Unix(p) => (p.display().to_string(), None),
        }
    }
}

impl std::fmt::Display for ServiceEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceEndpoint::Tcp(a) => write!(f, "{a}"),
            ServiceEndpoint::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Serialize for ServiceEndpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ServiceEndpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ServiceEndpoint::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_endpoints_and_socket_paths_parse() {
        let e = ServiceEndpoint::parse("127.0.0.1:5432").unwrap();
        assert_eq!(e.to_string(), "127.0.0.1:5432");
        assert_eq!(e.tcp_port(), Some(5432));
        let e = ServiceEndpoint::parse("[::1]:6379").unwrap();
        assert_eq!(e.to_string(), "[::1]:6379");
        assert_eq!(
            e.report_name(),
            ("[::1]".to_string(), Some(6379)),
            "named by address and port"
        );
        let e = ServiceEndpoint::parse("[::ffff:127.0.0.1]:80").unwrap();
        assert_eq!(e.to_string(), "127.0.0.1:80");
        let e = ServiceEndpoint::parse("/run/postgresql/.s.PGSQL.5432").unwrap();
        assert_eq!(e.tcp_port(), None);
        assert_eq!(e.report_name().0, "/run/postgresql/.s.PGSQL.5432");
    }

    #[test]
    fn anything_else_is_refused_with_the_reason() {
        for (s, want) in [
            ("", "empty"),
            ("localhost:5432", "localhost are not taken"),
            ("10.0.0.5:5432", "not on the host's loopback"),
            ("[2001:db8::1]:80", "not on the host's loopback"),
            ("127.0.0.1:0", "port 0"),
            ("127.0.0.1", "not an address and port"),
            ("postgres://127.0.0.1:5432", "URL"),
            ("/run/../etc/x.sock", "plain absolute path"),
            ("/run//x.sock", "plain absolute path"),
            ("/run/x/", "plain absolute path"),
            ("/run/a\u{1b}b", "control character"),
            ("/", "not a socket"),
        ] {
            let e = ServiceEndpoint::parse(s).unwrap_err();
            assert!(e.contains(want), "{s:?}: {e}");
        }
        let long = format!("/{}", "a".repeat(MAX_SOCKET_PATH));
        assert!(
            ServiceEndpoint::parse(&long)
                .unwrap_err()
                .contains("at most")
        );
    }
}
