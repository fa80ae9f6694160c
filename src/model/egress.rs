//! The egress report: one entry per destination a rehearsal tried to reach,
//! by name, and how (through the egress proxy, a direct connection the
//! sandbox cut, or only a DNS lookup).

use serde::{Deserialize, Serialize};

/// How a destination was tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EgressHow {
    /// Through the run's egress proxy (HTTP CONNECT or plain HTTP).
    Proxy,
    /// A connection that ignored the proxy (cut: the sandbox has no route).
    Direct,
    /// Only a name lookup, answered by the sandbox's own DNS responder.
    Dns,
    /// A host service the intent declared (`intent.network.services`) and
    /// the system policy lists: forwarded to the real endpoint.
    Service,
}

impl EgressHow {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressHow::Proxy => "proxy",
            EgressHow::Direct => "direct",
            EgressHow::Dns => "dns",
            EgressHow::Service => "service",
        }
    }
}

/// One destination of `rehearsal.egress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressEntry {
    /// The host name asked for (or the address, when the command named one).
    pub name: String,
    /// The port (none for a DNS lookup).
    pub port: Option<u16>,
    pub how: EgressHow,
    /// Whether the network intent (and the system policy) allow it.
    pub allowed: bool,
    /// Why it was refused or did not complete (none when it went through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes the command sent to it (through the proxy).
    #[serde(default)]
    pub bytes_out: u64,
    /// Bytes it sent back to the command (through the proxy).
    #[serde(default)]
    pub bytes_in: u64,
    /// A host service the system policy marks disposable (a throwaway
    /// test database): talking to it does not need approval.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disposable: bool,
}

impl EgressEntry {
    /// `name:port`, or the name alone for a lookup (or a Unix socket).
    pub fn destination(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A direct connection (or datagram) to an internet address the sandbox's
/// init saw and let the kernel refuse; the engine names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectAttempt {
    pub addr: core::net::IpAddr,
    pub port: u16,
}

/// On the egress proxy's control connection, after the sandbox handed
/// over its sockets: the byte that releases the command (the run's
/// submission is on disk).
pub(crate) const RELEASE_GO: u8 = b'1';
/// The byte that tells the sandbox not to start the command (the
/// submission never reached the journal). Anything else, or the
/// connection closed, means the same.
pub(crate) const RELEASE_STOP: u8 = b'0';
