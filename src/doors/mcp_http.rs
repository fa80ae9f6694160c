//! `dryrun mcp --http ADDR`: the same MCP server over Streamable HTTP on a
//! loopback address, for clients that speak only HTTP.
//!
//! A loopback port is reachable by every local user and by web pages in a
//! local browser, while the server acts with the rights of the uid that
//! started it. So:
//! - only loopback addresses are accepted for `ADDR`;
//! - each connection's peer is looked up in the kernel's socket table
//!   (`/proc/net/tcp`, `/proc/net/tcp6`: the uid that owns the client's
//!   end) and served only when it is this process's own uid; any other
//!   peer, or one that cannot be identified, is closed unanswered;
//! - the `Host` header must name this loopback host (no DNS rebinding) and
//!   a browser `Origin`, when present, must be this server's own (rmcp's
//!   checks): a web page elsewhere cannot drive it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::mcp::DryrunMcp;
use super::{Backend, Target};

/// Why `dryrun mcp --http` cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum McpHttpError {
    #[error(
        "--http {0}: not a loopback address and port (give e.g. 127.0.0.1:8765, or port 0 for any free one)"
    )]
    NotLoopback(String),
    #[error("--http {addr}: cannot listen: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Setup(String),
}

/// Parse `--http`'s value: a loopback socket address.
pub fn parse_loopback(s: &str) -> Result<SocketAddr, McpHttpError> {
    match s.parse::<SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => Ok(a),
        _ => Err(McpHttpError::NotLoopback(s.to_string())),
    }
}

/// The uid owning the client end of the TCP connection `peer` -> `local`
/// (`None` when the kernel's table has no such connection).
pub fn peer_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let table = match peer.ip() {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    let (want_local, want_remote) = (proc_net_addr(peer), proc_net_addr(local));
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
        (f.len() > 7 && f[1] == want_local && f[2] == want_remote)
            .then(|| f[7].parse().ok())
            .flatten()
    })
}

/// An address as the kernel prints it in `/proc/net/tcp*`: each 32-bit
/// word of the address in host byte order, in hex, then the port.
fn proc_net_addr(a: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match a.ip() {
        IpAddr::V4(ip) => vec![ip.octets()],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut s: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    s.push_str(&format!(":{:04X}", a.port()));
    s
}

/// Serve MCP over Streamable HTTP at `addr` (path `/mcp`) until killed.
pub fn run_mcp_http(target: Target, addr: SocketAddr) -> Result<(), McpHttpError> {
    let backend =
        Arc::new(Backend::connect(&target).map_err(|e| McpHttpError::Setup(e.to_string()))?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| McpHttpError::Setup(format!("cannot start the runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| McpHttpError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| McpHttpError::Bind { addr, source })?;
        let me = nix::unistd::geteuid().as_raw();
        // The names this server answers to, with and without its port;
        // a browser's Origin is accepted only from these.
        let port = local.port();
        let ip = match local.ip() {
            IpAddr::V6(ip) => format!("[{ip}]"),
            IpAddr::V4(ip) => ip.to_string(),
        };
        let hosts = [
            "localhost".to_string(),
            local.ip().to_string(),
            format!("localhost:{port}"),
            format!("{ip}:{port}"),
        ];
        let origins = [
            format!("http://localhost:{port}"),
            format!("http://{ip}:{port}"),
        ];
        let service = StreamableHttpService::new(
            move || Ok(DryrunMcp::shared(backend.clone())),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default()
                .with_allowed_hosts(hosts)
                .with_allowed_origins(origins)
                .enforce_origin_validation(),
        );
        eprintln!("dryrun mcp: serving MCP (Streamable HTTP) at http://{local}/mcp to uid {me}");
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("mcp: accept: {e}");
                    continue;
                }
            };
            match peer_uid(peer, local) {
                Some(uid) if uid == me => {}
                other => {
                    tracing::warn!(
                        "mcp: refused a connection from {peer} (uid {}): only uid {me} may use this server",
                        other.map_or("unknown".to_string(), |u| u.to_string())
                    );
                    drop(stream);
                    continue;
                }
            }
            let svc = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
                if let Err(e) = conn {
                    tracing::debug!("mcp: connection from {peer}: {e}");
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_served() {
        assert!(parse_loopback("127.0.0.1:0").is_ok());
        assert!(parse_loopback("[::1]:8765").is_ok());
        for bad in ["0.0.0.0:8765", "192.168.1.2:80", "localhost:80", "8765", ""] {
            assert!(parse_loopback(bad).is_err(), "{bad}");
        }
    }

    /// The lookup finds this process's own connection, and its uid.
    #[test]
    fn a_connection_is_traced_to_its_uid() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = l.local_addr().unwrap();
        let c = std::net::TcpStream::connect(local).unwrap();
        let (_s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        assert_eq!(peer_uid(peer, local), Some(nix::unistd::geteuid().as_raw()));
        // A connection that does not exist: unknown.
        let nobody: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(peer_uid(nobody, local), None);
    }
}
