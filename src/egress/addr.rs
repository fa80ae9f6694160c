//! Which addresses the egress proxy refuses to connect to after resolving
//! an allowed name: anything that leads back to the host or its networks
//! (loopback, link-local and cloud metadata, private ranges, CGNAT,
//! multicast, reserved), so that a name an attacker controls cannot be
//! pointed at a host service (DNS rebinding). Only a system pin
//! (`--egress-resolve`) lifts this, for that name and port.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is refused, or `None` when it is a public address.
pub fn refused_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return refused_v4(v4);
            }
            refused_v6(v6)
        }
    }
}

/// The first of a name's resolved addresses that is refused, and why: a
/// name is refused as a whole when any of its addresses is (a name an
/// attacker controls may list a public address and a loopback one, and a
/// client may try them in any order).
pub fn first_refused(addrs: &[IpAddr]) -> Option<(IpAddr, &'static str)> {
    addrs
        .iter()
        .find_map(|a| refused_address(*a).map(|w| (*a, w)))
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    Some(if ip == Ipv4Addr::new(169, 254, 169, 254) {
        "a cloud metadata address"
    } else if ip.is_loopback() {
        "a loopback address"
    } else if ip.is_unspecified() || o[0] == 0 {
        "an unspecified address"
    } else if ip.is_link_local() {
        "a link-local address"
    } else if ip.is_private() {
        "a private address"
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        "a shared (CGNAT) address"
    } else if ip.is_multicast() || ip.is_broadcast() {
        "a multicast or broadcast address"
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        "a benchmarking address (the sandbox's own DNS answers)"
    } else if o[0] >= 240 || (o[0] == 192 && o[1] == 0 && o[2] == 0) {
        "a reserved address"
    } else {
        return None;
    })
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    Some(
        if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
            "a cloud metadata address"
        } else if ip.is_loopback() {
            "a loopback address"
        } else if ip.is_unspecified() {
            "an unspecified address"
        } else if (s[0] & 0xffc0) == 0xfe80 {
            "a link-local address"
        } else if (s[0] & 0xfe00) == 0xfc00 {
            "a private (unique local) address"
        } else if ip.is_multicast() {
            "a multicast address"
        } else if s[0] == 0x64 && s[1] == 0xff9b {
            // NAT64 can embed any IPv4 address; refused rather than decoded.
            "a NAT64 address"
        } else if ip.to_ipv4().is_some() {
            "an IPv4-compatible address"
        } else {
            return None;
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_private_ranges_are_refused() {
        for a in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
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
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fc00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::7f00:1",
            "ff02::1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(refused_address(ip).is_some(), "{a} must be refused");
        }
        assert_eq!(
            refused_address("169.254.169.254".parse().unwrap()),
            Some("a cloud metadata address")
        );
    }

    #[test]
    fn one_refused_address_refuses_the_name() {
        let a: Vec<IpAddr> = ["93.184.216.34", "2606:4700::1111", "::ffff:10.0.0.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let (ip, why) = first_refused(&a).unwrap();
        assert_eq!(ip, a[2]);
        assert_eq!(why, "a private address");
        assert!(first_refused(&a[..2]).is_none());
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "93.184.216.34",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(refused_address(ip), None, "{a}");
        }
    }
}
