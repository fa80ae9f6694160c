//! Connecting the proxy to an upstream address: the address is checked by
//! [`addr::check`] right before and right after the connect, and a refusal
//! is worded for the record.

use std::net::{IpAddr, SocketAddr};

use super::addr;
use super::proxy::UPSTREAM_TIMEOUT;

/// Why the proxy refuses `name` because of one of its addresses.
pub(super) fn address_refusal(name: &str, a: IpAddr, why: &addr::Refusal) -> String {
    format!(
        "{name} resolves to {a}, {why}; only the system configuration (--egress-resolve) may allow that"
    )
}

/// Why one address was not connected to.
#[derive(Debug)]
pub(super) enum Attempt {
    /// [`addr::check`] refused it, before or after the connect.
    Refused(addr::Refusal),
    /// The connect failed or timed out.
    Failed(String),
}

/// Connect to `a`, checking its address (with [`addr::check`], in the
/// proxy) right before and right after. A connection whose address has
/// become refused in between is closed before anything is sent on it.
pub(super) async fn connect_checked(
    a: SocketAddr,
    check: impl Fn(IpAddr) -> Result<(), addr::Refusal>,
) -> Result<tokio::net::TcpStream, Attempt> {
    check(a.ip()).map_err(Attempt::Refused)?;
    match tokio::time::timeout(UPSTREAM_TIMEOUT, tokio::net::TcpStream::connect(a)).await {
        Ok(Ok(s)) => {
            check(a.ip()).map_err(Attempt::Refused)?;
            Ok(s)
        }
        Ok(Err(e)) => Err(Attempt::Failed(format!("cannot connect to {a}: {e}"))),
        Err(_) => Err(Attempt::Failed(format!("connecting to {a} timed out"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::route::RouteKind;
    use super::*;
    use std::cell::Cell;

    /// Connect to a loopback listener through [`connect_checked`], with a
    /// check that passes `passes` times, then refuses (an address that
    /// becomes the host's while the proxy connects). What came of it, how
    /// often the address was checked, and whether the listener got a
    /// connection.
    fn attempt(passes: u32) -> (Result<(), String>, u32, bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let asked = Cell::new(0);
        let check = |_| {
            let n = asked.get();
            asked.set(n + 1);
            if n < passes {
                Ok(())
            } else {
                Err(addr::Refusal::Route(RouteKind::Local))
            }
        };
        let got = rt.block_on(async {
            match connect_checked(l.local_addr().unwrap(), check).await {
                Ok(_) => Ok(()),
                Err(e) => Err(format!("{e:?}")),
            }
        });
        (got, asked.get(), l.accept().is_ok())
    }

    #[test]
    fn an_address_is_checked_right_before_and_right_after_the_connect() {
        assert_eq!(attempt(2), (Ok(()), 2, true));
        let (got, asked, connected) = attempt(0);
        assert!(got.unwrap_err().contains("Local"));
        assert_eq!((asked, connected), (1, false), "refused before connecting");
        let (got, asked, connected) = attempt(1);
        assert!(got.unwrap_err().contains("Local"), "refused once connected");
        assert_eq!((asked, connected), (2, true));
    }
}
