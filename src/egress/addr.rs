//! Which addresses the egress proxy refuses to connect to after resolving
//! an allowed name: anything that leads back to the host or its networks,
//! so that a name an attacker controls cannot be pointed at a host service
//! (DNS rebinding). Only a system pin (`--egress-resolve`) lifts this, for
//! that name and port. [`check`] is the one rule; the proxy applies it to
//! every address of a name, and again to each address right before and
//! right after connecting to it.
//!
//! Three parts, each refusing on its own:
//! - **ranges** ([`range_refusal`]): loopback, unspecified, link-local and
//!   cloud metadata, private and unique-local, CGNAT, multicast and
//!   broadcast, and the IANA special-purpose blocks no public service
//!   answers on (documentation, benchmarking, IETF protocol assignments,
//!   reserved; for IPv6 everything outside global unicast `2000::/3`);
//! - **this host** ([`super::route`]): the kernel's route for the address,
//!   looked up at connect time in the proxy's network namespace, must be
//!   an ordinary unicast route to another host: an address of one of this
//!   host's interfaces (its public IPv4, a global IPv6, any address at all)
//!   routes `local` and is refused, as are broadcast, anycast and
//!   multicast routes and addresses with no route;
//! - **IPv4 inside IPv6**: an IPv6 address that carries an IPv4 address
//!   the network delivers to (IPv4-mapped, NAT64 `64:ff9b::/96`, 6to4
//!   `2002::/16`, Teredo `2001::/32` server and client, an ISATAP
//!   interface id) is refused when that IPv4 address would be, by range
//!   or because it is this host's. The deprecated IPv4-compatible form
//!   `::/96` and the local-use NAT64 prefix `64:ff9b:1::/48` (a site's own
//!   translators; the operator's prefix length, so where the IPv4 address
//!   sits, cannot be read from the address) are refused outright.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::route::{RouteKind, Routes};

/// Why an address is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// In a range that leads back to the host or its networks, or that no
    /// public service answers on.
    Range(&'static str),
    /// The kernel does not route it to another host.
    Route(RouteKind),
    /// The kernel could not say how it routes it (refused: fail closed).
    RouteUnknown(String),
    /// An IPv6 address carrying an IPv4 address that is refused.
    Embedded {
        form: &'static str,
        v4: Ipv4Addr,
        inner: Box<Refusal>,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Range(what) => f.write_str(what),
            Refusal::Route(kind) => f.write_str(match kind {
                RouteKind::Local => "an address of this host (the kernel routes it locally)",
                RouteKind::Broadcast => "a broadcast address of one of this host's networks",
                RouteKind::Anycast => "an anycast address this host answers on",
                RouteKind::Multicast => "a multicast address",
                RouteKind::Unroutable => "an address this host has no route to",
                RouteKind::Unicast => "a unicast address",
                RouteKind::Other(_) => {
                    "an address the kernel routes specially (not as plain unicast)"
                }
            }),
            Refusal::RouteUnknown(e) => write!(
                f,
                "an address whose route the kernel could not give ({e}), refused to be safe"
            ),
            Refusal::Embedded { form, v4, inner } => {
                write!(f, "{form} carrying the IPv4 address {v4}, {inner}")
            }
        }
    }
}

/// Whether the proxy may connect to `ip`, asking `routes` (the kernel, in
/// the proxy's network namespace) about the address itself and about any
/// IPv4 address it carries. `Err` says why not. Ranges are judged first,
/// so a refusal names the range rather than the route where both apply.
pub fn check(ip: IpAddr, routes: &impl Routes) -> Result<(), Refusal> {
    if let Some(r) = range_refusal(ip) {
        return Err(r);
    }
    let (own, carried) = parts(ip);
    for (form, v4) in carried {
        check_route(IpAddr::V4(v4), routes).map_err(|e| embedded(form, v4, e))?;
    }
    match own {
        Some(own) => check_route(own, routes),
        None => Ok(()),
    }
}

/// The first of a name's addresses that is refused, and why: a name is
/// refused as a whole when any of its addresses is (a name an attacker
/// controls may list a public address and a host one, and a client may
/// try them in any order).
pub fn first_refused(addrs: &[IpAddr], routes: &impl Routes) -> Option<(IpAddr, Refusal)> {
    addrs
        .iter()
        .find_map(|a| check(*a, routes).err().map(|w| (*a, w)))
}

/// Why `ip` is refused by what it says by itself (no route lookup), if
/// it is: its range, and the range of any IPv4 address it carries.
pub fn range_refusal(ip: IpAddr) -> Option<Refusal> {
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_none()
        && let Some(r) = refused_v6(v6)
    {
        return Some(r);
    }
    if let IpAddr::V4(v4) = ip {
        return refused_v4(v4).map(Refusal::Range);
    }
    parts(ip)
        .1
        .into_iter()
        .find_map(|(form, v4)| refused_v4(v4).map(|what| embedded(form, v4, Refusal::Range(what))))
}

/// The address the kernel routes a connection to `ip` by (none for an
/// IPv4-mapped address, which is connected to as the IPv4 address it
/// carries), and the IPv4 addresses `ip` carries, each with its form.
fn parts(ip: IpAddr) -> (Option<IpAddr>, Vec<(&'static str, Ipv4Addr)>) {
    match ip {
        IpAddr::V4(_) => (Some(ip), Vec::new()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => (None, vec![("an IPv4-mapped address", v4)]),
            None => (Some(ip), embedded_v4(v6)),
        },
    }
}

fn embedded(form: &'static str, v4: Ipv4Addr, inner: Refusal) -> Refusal {
    Refusal::Embedded {
        form,
        v4,
        inner: Box::new(inner),
    }
}

fn check_route(ip: IpAddr, routes: &impl Routes) -> Result<(), Refusal> {
    match routes.route_kind(ip) {
        Ok(RouteKind::Unicast) => Ok(()),
        Ok(other) => Err(Refusal::Route(other)),
        Err(e) => Err(Refusal::RouteUnknown(e.to_string())),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    let in_24 = |a: u8, b: u8, c: u8| o[0] == a && o[1] == b && o[2] == c;
    Some(if ip == Ipv4Addr::new(169, 254, 169, 254) {
        "a cloud metadata address"
    } else if ip.is_loopback() {
        "a loopback address"
    } else if o[0] == 0 {
        "an unspecified address (0.0.0.0/8, which reaches this host)"
    } else if ip.is_link_local() {
        "a link-local address"
    } else if ip.is_private() {
        "a private address"
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        "a shared (CGNAT) address"
    } else if ip.is_multicast() || ip.is_broadcast() {
        "a multicast or broadcast address"
    } else if in_24(192, 0, 2) || in_24(198, 51, 100) || in_24(203, 0, 113) {
        "a documentation address (no public service answers on it)"
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        "a benchmarking address (the sandbox's own DNS answers)"
    } else if in_24(192, 0, 0) {
        "an IETF protocol-assignment address (192.0.0.0/24)"
    } else if in_24(192, 88, 99) {
        "a 6to4 relay anycast address (deprecated)"
    } else if o[0] >= 240 {
        "a reserved address"
    } else {
        return None;
    })
}

fn refused_v6(ip: Ipv6Addr) -> Option<Refusal> {
    let s = ip.segments();
    let what = if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        "a cloud metadata address"
    } else if ip.is_loopback() {
        "a loopback address"
    } else if ip.is_unspecified() {
        "an unspecified address"
    } else if s[0..6] == [0; 6] {
        "an IPv4-compatible address (::/96, deprecated)"
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        // The NAT64 well-known prefix: judged by the IPv4 address it
        // carries ([`embedded_v4`]).
        return None;
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        "a local-use NAT64 address (64:ff9b:1::/48: a site's own translators, which reach that site's networks)"
    } else if (s[0] & 0xffc0) == 0xfe80 {
        "a link-local address"
    } else if (s[0] & 0xffc0) == 0xfec0 {
        "a site-local address (deprecated)"
    } else if (s[0] & 0xfe00) == 0xfc00 {
        "a private (unique local) address"
    } else if ip.is_multicast() {
        "a multicast address"
    } else if (s[0] & 0xe000) != 0x2000 {
        "a reserved address (outside the global unicast range 2000::/3)"
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000) {
        "a documentation address (2001:db8::/32, 3fff::/20; no public service answers on it)"
    } else if s[0] == 0x2001 && s[1] != 0 && s[1] < 0x200 {
        "an IETF protocol-assignment address (2001::/23: benchmarking, ORCHID, AMT, ...)"
    } else {
        return None;
    };
    Some(Refusal::Range(what))
}

/// The IPv4 addresses an IPv6 address (not IPv4-mapped) carries, with
/// the form that carries each: the network delivers to those too.
fn embedded_v4(ip: Ipv6Addr) -> Vec<(&'static str, Ipv4Addr)> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    let mut out = Vec::new();
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        out.push(("a NAT64 address (64:ff9b::/96)", v4(s[6], s[7])));
    }
    if s[0] == 0x2002 {
        out.push(("a 6to4 address (2002::/16)", v4(s[1], s[2])));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        out.push((
            "a Teredo address (2001::/32) whose server is",
            v4(s[2], s[3]),
        ));
        // The client's address is stored inverted (RFC 4380).
        out.push((
            "a Teredo address (2001::/32) whose client is",
            v4(!s[6], !s[7]),
        ));
    }
    // An ISATAP interface id, under any prefix: [0|2]00:5efe:a.b.c.d.
    if s[4] & 0xfcff == 0 && s[5] == 0x5efe {
        out.push((
            "an ISATAP address (interface id ::5efe:0:0/96)",
            v4(s[6], s[7]),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Routes as a test says: these addresses are this host's, the rest
    /// ordinary unicast.
    struct Fake(Vec<IpAddr>);

    impl Routes for Fake {
        fn route_kind(&self, ip: IpAddr) -> std::io::Result<RouteKind> {
            Ok(if self.0.contains(&ip) {
                RouteKind::Local
            } else {
                RouteKind::Unicast
            })
        }
    }

    /// 11.7.7.7 and 2a0b:4e07:7::7 are this host's.
    fn host() -> Fake {
        Fake(vec![
            "11.7.7.7".parse().unwrap(),
            "2a0b:4e07:7::7".parse().unwrap(),
        ])
    }

    fn refused(a: &str) -> Option<Refusal> {
        check(a.parse().unwrap(), &host()).err()
    }

    #[test]
    fn host_and_private_ranges_are_refused() {
        for a in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "0.1.2.3",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "192.0.0.8",
            "192.88.99.1",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fec0::1",
            "fd00:ec2::254",
            "fc00::1",
            "ff02::1",
            "100::1",
            "5f00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(range_refusal(ip).is_some(), "{a} must be refused by range");
        }
        assert_eq!(
            refused("169.254.169.254").unwrap().to_string(),
            "a cloud metadata address"
        );
    }

    #[test]
    fn documentation_ranges_are_refused() {
        for a in [
            "192.0.2.2",
            "198.51.100.7",
            "203.0.113.255",
            "2001:db8::1",
            "3fff:1::1",
        ] {
            let r = refused(a).unwrap_or_else(|| panic!("{a}"));
            assert!(r.to_string().contains("documentation"), "{a}: {r}");
        }
        assert!(refused("192.0.3.1").is_none());
    }

    #[test]
    fn the_hosts_own_addresses_are_refused_by_route_not_range() {
        for a in ["11.7.7.7", "2a0b:4e07:7::7"] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(range_refusal(ip), None, "{a}: public by range");
            let r = refused(a).unwrap();
            assert_eq!(r, Refusal::Route(RouteKind::Local));
            assert!(r.to_string().contains("this host"), "{r}");
        }
        assert!(refused("11.7.7.8").is_none());
        assert!(refused("2a0b:4e07:7::8").is_none());
    }

    #[test]
    fn every_route_but_unicast_is_refused_and_a_failed_lookup_too() {
        struct Says(std::io::Result<RouteKind>);
        impl Routes for Says {
            fn route_kind(&self, _: IpAddr) -> std::io::Result<RouteKind> {
                match &self.0 {
                    Ok(k) => Ok(*k),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                }
            }
        }
        let ip: IpAddr = "93.184.216.34".parse().unwrap();
        assert!(check(ip, &Says(Ok(RouteKind::Unicast))).is_ok());
        for k in [
            RouteKind::Local,
            RouteKind::Broadcast,
            RouteKind::Anycast,
            RouteKind::Multicast,
            RouteKind::Unroutable,
            RouteKind::Other(10),
        ] {
            assert_eq!(check(ip, &Says(Ok(k))), Err(Refusal::Route(k)));
        }
        let e = check(ip, &Says(Err(std::io::Error::other("boom")))).unwrap_err();
        assert!(matches!(e, Refusal::RouteUnknown(_)), "{e}");
    }

    /// Every IPv6 form that carries an IPv4 address: refused when the IPv4
    /// address is (by range, or because it is this host's), passed when it
    /// is an ordinary public one.
    #[test]
    fn ipv4_inside_ipv6_is_judged_by_the_ipv4_address() {
        for (a, carried) in [
            // IPv4-mapped
            ("::ffff:11.7.7.7", "11.7.7.7"),
            ("::ffff:10.0.0.1", "10.0.0.1"),
            // NAT64, well-known prefix
            ("64:ff9b::b07:707", "11.7.7.7"),
            ("64:ff9b::7f00:1", "127.0.0.1"),
            ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
            // 6to4
            ("2002:b07:707::1", "11.7.7.7"),
            ("2002:c0a8:101::1", "192.168.1.1"),
            // Teredo: server 11.7.7.7, client public
            ("2001:0:b07:707:0:0:a2b4:27dd", "11.7.7.7"),
            // Teredo: server public, client 11.7.7.7 (stored inverted)
            ("2001:0:5db8:d822:8000:f227:f4f8:f8f8", "11.7.7.7"),
            // Teredo: client 127.0.0.1
            ("2001:0:5db8:d822:0:0:80ff:fffe", "127.0.0.1"),
            // ISATAP interface ids, either u/l bit
            ("2606:4700:1::5efe:b07:707", "11.7.7.7"),
            ("2606:4700:1:0:200:5efe:a00:1", "10.0.0.1"),
        ] {
            let r = refused(a).unwrap_or_else(|| panic!("{a} must be refused"));
            match &r {
                Refusal::Embedded { v4, .. } => assert_eq!(v4.to_string(), carried, "{a}"),
                other => panic!("{a}: refused as {other}, not for what it carries"),
            }
            assert!(r.to_string().contains(carried), "{a}: {r}");
        }
        // The same forms carrying ordinary public addresses pass.
        for a in [
            "::ffff:93.184.216.34",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "2001:0:5db8:d822:8000:f227:a2b4:27dd",
            "2606:4700:1::5efe:5db8:d822",
        ] {
            assert_eq!(refused(a), None, "{a}");
        }
    }

    #[test]
    fn ipv6_forms_refused_outright() {
        for (a, want) in [
            ("::b07:707", "IPv4-compatible"),
            ("::7f00:1", "IPv4-compatible"),
            ("64:ff9b:1:b07:7:700::", "local-use NAT64"),
            ("64:ff9b:1::5db8:d822", "local-use NAT64"),
            ("64:ff9b:0:0:1::1", "outside the global unicast range"),
            ("2001:2::1", "IETF protocol-assignment"),
            ("2001:10::1", "IETF protocol-assignment"),
        ] {
            let r = refused(a).unwrap_or_else(|| panic!("{a}"));
            assert!(r.to_string().contains(want), "{a}: {r}");
        }
    }

    #[test]
    fn one_refused_address_refuses_the_name() {
        let a: Vec<IpAddr> = ["93.184.216.34", "2606:4700::1111", "11.7.7.7"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let (ip, why) = first_refused(&a, &host()).unwrap();
        assert_eq!(ip, a[2]);
        assert_eq!(why, Refusal::Route(RouteKind::Local));
        assert!(first_refused(&a[..2], &host()).is_none());
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "93.184.216.34",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.3.1",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            assert_eq!(refused(a), None, "{a}");
        }
    }
}
