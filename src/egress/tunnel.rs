//! A `CONNECT` tunnel: the command's first bytes are held back until the
//! proxy knows what they are. A TLS ClientHello must name the tunnel's own
//! host (or none); one that names another host (domain fronting: another
//! site served behind the allowed name's addresses), hides its name (ECH)
//! or does not parse is refused, and so is anything but TLS to port 443.
//! Everything after the first bytes is spliced through and counted, not
//! read. The upstream's bytes flow from the start (a protocol where the
//! server speaks first still works on other ports).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::proxy::{Counters, Counting, Shared};
use super::tls::{self, Hello};
use super::{malformed_name, normalize_name};
use crate::model::EgressHow;

/// A ClientHello, once begun, must be complete within this.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// The most the proxy buffers while waiting for a ClientHello (records of
/// one byte each carry a maximal hello in about six times its size).
const MAX_PEEK: usize = 8 * tls::MAX_HELLO;
/// The port whose tunnels must carry TLS.
const HTTPS_PORT: u16 = 443;

/// One tunnel to an allowed, connected destination.
pub(super) struct Tunnel<'a> {
    pub name: &'a str,
    pub port: u16,
    pub counters: Arc<Counters>,
}

/// What the command's first bytes allow.
enum Peek {
    /// Send these and splice the rest.
    Pass(Vec<u8>),
    /// Refused: the destination to report (as shown) and why.
    Refuse(String, String),
    /// The command closed the tunnel before saying anything decisive.
    Closed,
}

impl Tunnel<'_> {
    /// Check the first bytes, then splice the client and the upstream until
    /// both sides are done; a refusal is recorded and closes both.
    pub(super) async fn splice_checked<C>(
        self,
        client: C,
        upstream: tokio::net::TcpStream,
        shared: &Shared,
    ) where
        C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut cr, cw) = tokio::io::split(client);
        let (mut ur, mut uw) = upstream.into_split();
        let mut cw = Counting {
            inner: cw,
            read: self.counters.clone(),
            read_is_out: true,
        };
        let down = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut ur, &mut cw).await;
            let _ = cw.shutdown().await;
        });
        let first = match self.peek(&mut cr).await {
            Peek::Pass(b) => b,
            Peek::Closed => {
                down.abort();
                return;
            }
            Peek::Refuse(shown, why) => {
                down.abort();
                shared.record(&shown, Some(self.port), EgressHow::Proxy, false, Some(why));
                return;
            }
        };
        if uw.write_all(&first).await.is_ok() {
            self.counters
                .out
                .fetch_add(first.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let mut cr = Counting {
                inner: cr,
                read: self.counters.clone(),
                read_is_out: true,
            };
            let _ = tokio::io::copy(&mut cr, &mut uw).await;
            let _ = uw.shutdown().await;
            let _ = down.await;
        } else {
            down.abort();
        }
    }

    async fn peek<R: AsyncRead + Unpin>(&self, cr: &mut R) -> Peek {
        let mut buf = Vec::with_capacity(2048);
        let mut chunk = [0u8; 4096];
        // The first read waits as long as the command likes.
        match cr.read(&mut chunk).await {
            Ok(0) | Err(_) => return Peek::Closed,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        let deadline = Instant::now() + HELLO_TIMEOUT;
        loop {
            match tls::client_hello(&buf) {
                Hello::NotTls if self.port == HTTPS_PORT => {
                    return self.refuse(format!(
                        "the tunnel to {}:{} did not begin with a TLS ClientHello (the proxy checks the server name of every tunnel to port {HTTPS_PORT})",
                        self.name, self.port
                    ));
                }
                Hello::NotTls => return Peek::Pass(buf),
                Hello::Parsed { sni, ech } => return self.check(sni, ech, buf),
                Hello::Malformed(why) => {
                    return self.refuse(format!(
                        "a malformed TLS ClientHello ({why}) in the tunnel to {}:{}",
                        self.name, self.port
                    ));
                }
                Hello::NeedMore if buf.len() >= MAX_PEEK => {
                    return self.refuse(format!(
                        "a TLS ClientHello over {MAX_PEEK} bytes in the tunnel to {}:{}",
                        self.name, self.port
                    ));
                }
                Hello::NeedMore => {}
            }
            match tokio::time::timeout_at(deadline, cr.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Peek::Closed,
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                Err(_) => {
                    return self.refuse(format!(
                        "the TLS ClientHello in the tunnel to {}:{} was not complete within {} s",
                        self.name,
                        self.port,
                        HELLO_TIMEOUT.as_secs()
                    ));
                }
            }
        }
    }

    fn refuse(&self, why: String) -> Peek {
        Peek::Refuse(self.name.to_string(), why)
    }

    fn check(&self, sni: Option<Vec<u8>>, ech: bool, buf: Vec<u8>) -> Peek {
        if ech {
            return self.refuse(format!(
                "the TLS ClientHello in the tunnel to {}:{} carries an encrypted inner hello (ECH), which hides the server name",
                self.name, self.port
            ));
        }
        let Some(sni) = sni else {
            return Peek::Pass(buf);
        };
        let sni = normalize_name(&String::from_utf8_lossy(&sni));
        if let Some((shown, why)) = malformed_name(&sni) {
            return Peek::Refuse(
                shown,
                format!(
                    "named as the TLS server (SNI) in the tunnel to {}:{}, and {why}",
                    self.name, self.port
                ),
            );
        }
        if sni != self.name {
            return Peek::Refuse(
                sni,
                format!(
                    "named as the TLS server (SNI) in a tunnel to {}:{}: another site behind an allowed name's addresses (domain fronting); a tunnel's server name must be its CONNECT host",
                    self.name, self.port
                ),
            );
        }
        Peek::Pass(buf)
    }
}
