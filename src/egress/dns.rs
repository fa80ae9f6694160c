//! The sandbox's DNS responder, served by the engine on a UDP socket the
//! sandbox's init created at `127.0.0.1:53` of the sandbox's namespace, in
//! every run. It records every name asked for. In a run with an allowlist
//! it answers A queries with an address of the benchmarking range
//! 198.18.0.0/15 that leads nowhere (the namespace has no route), one per
//! name, so that a later direct connection to it can be named in the
//! egress report; other query types get an empty answer. In a run with
//! `network: none` every query is answered REFUSED: the command sees a
//! resolver that will not help (the C library reports a temporary
//! failure, as it did when the resolver was unreachable), and the lookup
//! is recorded by name. Only the question section is read (a few bytes of
//! fixed layout); nothing is ever forwarded to a real resolver.

use std::collections::HashMap;
use std::net::Ipv4Addr;

/// Names (and fake addresses) kept per run; later names are counted.
pub(super) const MAX_NAMES: usize = 256;

/// The fake addresses handed out, by name and by address.
#[derive(Debug, Default)]
pub(super) struct FakeAddrs {
    by_name: HashMap<String, Ipv4Addr>,
    pub by_addr: HashMap<Ipv4Addr, String>,
    /// Names in the order first asked.
    pub names: Vec<String>,
    pub dropped: u64,
}

impl FakeAddrs {
    fn addr_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        if self.names.len() >= MAX_NAMES {
            self.dropped += 1;
            return None;
        }
        let n = self.names.len() as u32 + 1;
        let a = Ipv4Addr::new(198, 18, (n >> 8) as u8, (n & 0xff) as u8);
        self.by_name.insert(name.to_string(), a);
        self.by_addr.insert(a, name.to_string());
        self.names.push(name.to_string());
        Some(a)
    }
}

/// How the responder answers a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// An A query gets a fake address of its own (a run with an allowlist).
    AddressLeadingNowhere,
    /// Every query is refused (`network: none`).
    Refused,
}

/// DNS response code REFUSED.
const RCODE_REFUSED: u8 = 5;

/// The question's name (lowercase, dotted) and where the question ends.
fn read_question(q: &[u8]) -> Option<(String, usize, u16)> {
    let mut i = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = *q.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        if len > 63 || labels.len() > 127 {
            return None;
        }
        let label = q.get(i..i + len)?;
        labels.push(
            label
                .iter()
                .map(|b| {
                    let c = b.to_ascii_lowercase();
                    if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' {
                        c as char
                    } else {
                        '?'
                    }
                })
                .collect(),
        );
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    // qtype and qclass
    q.get(i + 3)?;
    Some((labels.join("."), i + 4, qtype))
}

/// The answer to one datagram, and the name it asked for (`None`: not a
/// query this responder understands; it is dropped unanswered).
pub(super) fn answer(q: &[u8], how: Reply, fake: &mut FakeAddrs) -> Option<(Vec<u8>, String)> {
    if q.len() < 12 || q[2] & 0x80 != 0 || u16::from_be_bytes([q[4], q[5]]) != 1 {
        return None;
    }
    let (name, end, qtype) = read_question(q)?;
    if name.is_empty() {
        return None;
    }
    let addr = if qtype == 1 && how == Reply::AddressLeadingNowhere {
        fake.addr_for(&name)
    } else {
        None
    };
    let rcode = match how {
        Reply::AddressLeadingNowhere => 0,
        Reply::Refused => RCODE_REFUSED,
    };
    let mut r = Vec::with_capacity(end + 16);
    r.extend_from_slice(&q[0..2]);
    // QR, opcode 0, RD copied; RA; rcode.
    r.push(0x80 | (q[2] & 0x01));
    r.push(0x80 | rcode);
    r.extend_from_slice(&[0, 1, 0, addr.is_some() as u8, 0, 0, 0, 0]);
    r.extend_from_slice(&q[12..end]);
    if let Some(a) = addr {
        // Name (pointer to the question), A, IN, TTL 5 s, 4 bytes.
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4]);
        r.extend_from_slice(&a.octets());
    }
    if how == Reply::AddressLeadingNowhere {
        fake.addr_for(&name);
    }
    Some((r, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in name.split('.') {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        q
    }

    #[test]
    fn a_queries_get_a_fake_address_per_name() {
        let mut f = FakeAddrs::default();
        let (r, name) = answer(
            &query("Secret.Attacker.example", 1),
            Reply::AddressLeadingNowhere,
            &mut f,
        )
        .unwrap();
        assert_eq!(name, "secret.attacker.example");
        assert_eq!(&r[0..2], &[0x12, 0x34]);
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), 1, "one answer");
        assert_eq!(&r[r.len() - 4..], &[198, 18, 0, 1]);
        let (r2, _) = answer(
            &query("other.example", 28),
            Reply::AddressLeadingNowhere,
            &mut f,
        )
        .unwrap();
        assert_eq!(u16::from_be_bytes([r2[6], r2[7]]), 0, "AAAA: no answer");
        assert_eq!(f.names, ["secret.attacker.example", "other.example"]);
        assert_eq!(
            f.by_addr.get(&Ipv4Addr::new(198, 18, 0, 1)).unwrap(),
            "secret.attacker.example"
        );
    }

    #[test]
    fn without_network_every_query_is_refused_and_named() {
        let mut f = FakeAddrs::default();
        for qtype in [1, 28, 16] {
            let (r, name) =
                answer(&query("PkgIndex.Example", qtype), Reply::Refused, &mut f).unwrap();
            assert_eq!(name, "pkgindex.example");
            assert_eq!(&r[0..2], &[0x12, 0x34]);
            assert_eq!(r[3] & 0x0f, RCODE_REFUSED, "REFUSED");
            assert_eq!(u16::from_be_bytes([r[6], r[7]]), 0, "no answer");
        }
        assert!(
            f.names.is_empty() && f.by_addr.is_empty(),
            "no fake address"
        );
    }

    #[test]
    fn garbage_is_dropped() {
        let mut f = FakeAddrs::default();
        assert!(answer(&[0; 5], Reply::AddressLeadingNowhere, &mut f).is_none());
        let mut q = query("a.example", 1);
        q.truncate(15);
        assert!(answer(&q, Reply::AddressLeadingNowhere, &mut f).is_none());
    }
}
