//! The first bytes of a `CONNECT` tunnel, read before any of them goes
//! upstream: if they are a TLS ClientHello, the server name it asks for
//! (SNI). A tunnel to an allowed name whose ClientHello names another
//! host (domain fronting: another site behind the allowed name's
//! addresses) is refused by the proxy.
//!
//! A small parser of a fixed layout (RFC 8446 section 4.1.2, RFC 6066
//! section 3), every length checked against what is there: records are
//! reassembled (a ClientHello may be split over several), the handshake
//! message is capped at [`MAX_HELLO`], and anything that does not parse
//! as one ClientHello is reported as malformed (refused: a proxy that
//! cannot read the name must not guess it).

/// The largest ClientHello the proxy reads (real ones are under 2 KiB;
/// post-quantum key shares keep them under 4 KiB).
pub(super) const MAX_HELLO: usize = 16 * 1024;
/// The largest TLS record (2^14 plus the expansion TLS 1.2 allows).
const MAX_RECORD: usize = 16 * 1024 + 2048;
const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
/// Encrypted Client Hello (and the draft ESNI before it): the real name is
/// hidden, so the outer one proves nothing.
const EXT_ECH: [u16; 2] = [0xfe0d, 0xffce];

/// What the first bytes of a tunnel are.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Hello {
    /// Not a TLS handshake (the first byte says so).
    NotTls,
    /// A TLS handshake whose ClientHello is not complete yet.
    NeedMore,
    /// A complete ClientHello: its server name, and whether it carries an
    /// encrypted inner hello.
    Parsed { sni: Option<Vec<u8>>, ech: bool },
    /// A TLS handshake that is not a well-formed ClientHello.
    Malformed(&'static str),
}

/// Read what the tunnel's client sent so far.
pub(super) fn client_hello(buf: &[u8]) -> Hello {
    match buf.first() {
        None => return Hello::NeedMore,
        Some(&HANDSHAKE) => {}
        Some(_) => return Hello::NotTls,
    }
    let mut hs: Vec<u8> = Vec::new();
    let mut off = 0;
    loop {
        let Some(head) = buf.get(off..off + 5) else {
            return Hello::NeedMore;
        };
        if head[0] != HANDSHAKE {
            return Hello::Malformed(
                "a record that is not a handshake before the ClientHello ended",
            );
        }
        if head[1] != 3 {
            return Hello::Malformed("a record version that is not TLS");
        }
        let len = u16::from_be_bytes([head[3], head[4]]) as usize;
        if len == 0 || len > MAX_RECORD {
            return Hello::Malformed("a record length out of range");
        }
        let Some(frag) = buf.get(off + 5..off + 5 + len) else {
            return Hello::NeedMore;
        };
        hs.extend_from_slice(frag);
        off += 5 + len;
        if hs.len() < 4 {
            continue;
        }
        if hs[0] != CLIENT_HELLO {
            return Hello::Malformed("the first handshake message is not a ClientHello");
        }
        let want = u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize;
        if want > MAX_HELLO {
            return Hello::Malformed("a ClientHello larger than the proxy reads");
        }
        if hs.len() >= 4 + want {
            return match parse_body(&hs[4..4 + want]) {
                Ok((sni, ech)) => Hello::Parsed { sni, ech },
                Err(why) => Hello::Malformed(why),
            };
        }
    }
}

/// A cursor over a byte slice; every read is bounds-checked.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("a length past the end of the ClientHello");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<usize, &'static str> {
        Ok(self.take(1)?[0] as usize)
    }
    fn u16(&mut self) -> Result<usize, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }
    /// A vector with a one- or two-byte length.
    fn vec8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u16()?;
        self.take(n)
    }
}

type NameAndEch = (Option<Vec<u8>>, bool);

fn parse_body(body: &[u8]) -> Result<NameAndEch, &'static str> {
    let mut c = Cur(body);
    c.take(2)?; // legacy_version
    c.take(32)?; // random
    if c.vec8()?.len() > 32 {
        return Err("a session id longer than 32 bytes");
    }
    let suites = c.vec16()?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err("a bad cipher suite list");
    }
    if c.vec8()?.is_empty() {
        return Err("no compression methods");
    }
    if c.0.is_empty() {
        return Ok((None, false));
    }
    let exts = c.vec16()?;
    if !c.0.is_empty() {
        return Err("bytes after the extensions");
    }
    let mut e = Cur(exts);
    let (mut sni, mut seen_sni, mut ech) = (None, false, false);
    while !e.0.is_empty() {
        let ty = e.u16()? as u16;
        let data = e.vec16()?;
        if EXT_ECH.contains(&ty) {
            ech = true;
        }
        if ty != EXT_SERVER_NAME {
            continue;
        }
        if seen_sni {
            return Err("two server_name extensions");
        }
        seen_sni = true;
        sni = server_name(data)?;
    }
    Ok((sni, ech))
}

/// The host name of a server_name extension (`None`: an empty one, as a
/// server sends it back; a client that lists names must list one host).
fn server_name(data: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
    if data.is_empty() {
        return Ok(None);
    }
    let mut c = Cur(data);
    let list = c.vec16()?;
    if !c.0.is_empty() {
        return Err("bytes after the server name list");
    }
    let mut l = Cur(list);
    let mut host = None;
    while !l.0.is_empty() {
        let kind = l.u8()?;
        let name = l.vec16()?;
        if kind != 0 {
            continue;
        }
        if host.is_some() {
            return Err("two host names in the server_name extension");
        }
        if name.is_empty() {
            return Err("an empty server name");
        }
        host = Some(name.to_vec());
    }
    host.map(Some)
        .ok_or("a server_name extension without a host name")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello body with the given extensions.
    fn body(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&[7; 32]);
        b.push(0);
        b.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
        let mut e = Vec::new();
        for (ty, d) in exts {
            e.extend_from_slice(&ty.to_be_bytes());
            e.extend_from_slice(&(d.len() as u16).to_be_bytes());
            e.extend_from_slice(d);
        }
        b.extend_from_slice(&(e.len() as u16).to_be_bytes());
        b.extend_from_slice(&e);
        b
    }

    fn sni_ext(name: &[u8]) -> Vec<u8> {
        let mut entry = vec![0];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name);
        let mut d = (entry.len() as u16).to_be_bytes().to_vec();
        d.extend_from_slice(&entry);
        d
    }

    /// Records of at most `chunk` bytes carrying one handshake message.
    fn records(body: &[u8], chunk: usize) -> Vec<u8> {
        let mut hs = vec![CLIENT_HELLO];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(body);
        let mut out = Vec::new();
        for c in hs.chunks(chunk) {
            out.extend_from_slice(&[HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(c.len() as u16).to_be_bytes());
            out.extend_from_slice(c);
        }
        out
    }

    #[test]
    fn the_server_name_is_read_whole_or_in_fragments() {
        let b = body(&[(10, vec![0, 2, 0, 29]), (0, sni_ext(b"Pkgs.Example"))]);
        for chunk in [1, 3, 50, 4000] {
            let r = records(&b, chunk);
            assert_eq!(
                client_hello(&r),
                Hello::Parsed {
                    sni: Some(b"Pkgs.Example".to_vec()),
                    ech: false
                },
                "{chunk}"
            );
            for cut in 0..r.len() {
                assert_eq!(client_hello(&r[..cut]), Hello::NeedMore, "{chunk} {cut}");
            }
        }
        let none = records(&body(&[]), 4000);
        assert_eq!(
            client_hello(&none),
            Hello::Parsed {
                sni: None,
                ech: false
            }
        );
        let ech = records(
            &body(&[(0, sni_ext(b"a.example")), (0xfe0d, vec![1])]),
            4000,
        );
        assert!(matches!(
            client_hello(&ech),
            Hello::Parsed { ech: true, .. }
        ));
    }

    #[test]
    fn anything_but_one_well_formed_client_hello_is_malformed_or_not_tls() {
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(client_hello(b"SSH-2.0-x\r\n"), Hello::NotTls);
        let two = records(
            &body(&[(0, sni_ext(b"a.example")), (0, sni_ext(b"b.example"))]),
            4000,
        );
        assert!(matches!(client_hello(&two), Hello::Malformed(_)));
        let mut d = sni_ext(b"a.example");
        d.extend_from_slice(&[
            0, 0, 9, b'b', b'.', b'e', b'x', b'a', b'm', b'p', b'l', b'e',
        ]);
        let len = (d.len() - 2) as u16;
        d[0..2].copy_from_slice(&len.to_be_bytes());
        let twonames = records(&body(&[(0, d)]), 4000);
        assert!(matches!(client_hello(&twonames), Hello::Malformed(_)));
        // Lengths that point past the end, at every position.
        let good = records(&body(&[(0, sni_ext(b"a.example"))]), 4000);
        for i in 5..good.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[i] = v;
                let _ = client_hello(&bad); // never panics
            }
        }
        let mut huge = vec![HANDSHAKE, 3, 1, 0, 4, CLIENT_HELLO, 0xff, 0xff, 0xff];
        assert!(matches!(client_hello(&huge), Hello::Malformed(_)));
        huge[5] = 2;
        assert!(matches!(client_hello(&huge), Hello::Malformed(_)));
        let mut alert = good.clone();
        alert[0] = 0x15;
        assert_eq!(client_hello(&alert), Hello::NotTls);
    }
}
