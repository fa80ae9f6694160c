//! Threat: reaching the network (or any host service) from a rehearsal.
//! Every attack runs inside a real rehearsal; the assertions look at the host
//! side: the listeners the test opened must have received nothing. Each attack
//! script is first run on the host, outside the sandbox, against a separate
//! listener, to prove the script itself works (so a "nothing arrived" result
//! means the sandbox stopped it, not that the script was broken).

mod common;
use common::*;
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener};
use std::process::Command;
use std::time::Duration;

/// `python3 -c CODE` as a shell word list.
fn py(code: &str) -> String {
    format!("python3 -c {}", sq(code))
}

/// Run an attack script on the host, outside any sandbox (the positive
/// control).
fn run_on_host(script: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("bash runs on the host");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Poll a nonblocking TCP listener ~1 s; every accepted connection with what
/// it sent.
fn tcp_accepted(l: &TcpListener) -> Vec<String> {
    l.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        for _ in 0..100 {
            match l.accept() {
                Ok((mut s, peer)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    let mut buf = [0u8; 256];
                    let n = s.read(&mut buf).unwrap_or(0);
                    got.push(format!(
                        "{peer} sent {:?}",
                        String::from_utf8_lossy(&buf[..n])
                    ));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("accept: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    got
}

/// Poll a nonblocking UDP socket ~1 s; every datagram received.
fn udp_received(s: &UdpSocket) -> Vec<String> {
    s.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        for _ in 0..100 {
            let mut buf = [0u8; 512];
            match s.recv_from(&mut buf) {
                Ok((n, peer)) => got.push(format!(
                    "{peer} sent {:?}",
                    String::from_utf8_lossy(&buf[..n])
                )),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("recv_from: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    got
}

/// Poll a nonblocking unix listener ~1 s; every accepted connection.
fn unix_accepted(l: &UnixListener) -> Vec<String> {
    l.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        for _ in 0..100 {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    let mut buf = [0u8; 256];
                    let n = s.read(&mut buf).unwrap_or(0);
                    got.push(format!(
                        "unix peer sent {:?}",
                        String::from_utf8_lossy(&buf[..n])
                    ));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("accept: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    got
}

/// The host's own addresses other than loopback (and other than IPv6
/// link-local, which needs a scope id): IPv4 from /proc/net/fib_trie ("/32
/// host LOCAL" entries), IPv6 from /proc/net/if_inet6 (global scope).
fn host_non_loopback_addrs() -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = Vec::new();
    if let Ok(trie) = std::fs::read_to_string("/proc/net/fib_trie") {
        let mut last: Option<IpAddr> = None;
        for line in trie.lines() {
            let t = line.trim();
            if let Some(a) = t.strip_prefix("|-- ") {
                last = a.trim().parse().ok();
            } else if t.contains("/32 host LOCAL")
                && let Some(a) = last
                && !a.is_loopback()
                && !v.contains(&a)
            {
                v.push(a);
            }
        }
    }
    if let Ok(inet6) = std::fs::read_to_string("/proc/net/if_inet6") {
        for line in inet6.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 || f[3] != "00" || f[5] == "lo" {
                continue;
            }
            let hex = f[0];
            if hex.len() != 32 {
                continue;
            }
            let mut b = [0u8; 16];
            for (i, byte) in b.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
            }
            let a = IpAddr::from(b);
            if !a.is_loopback() && !v.contains(&a) {
                v.push(a);
            }
        }
    }
    v
}

/// A python literal list of (host, port) pairs.
fn py_targets(t: &[(IpAddr, u16)]) -> String {
    let items: Vec<String> = t.iter().map(|(a, p)| format!("('{a}', {p})")).collect();
    format!("[{}]", items.join(", "))
}

/// Python: TCP connect + send to every target; prints CONNECTED on success.
fn tcp_attack_py(targets: &[(IpAddr, u16)]) -> String {
    py(&format!(
        r#"
import socket
for host, port in {}:
    try:
        s = socket.create_connection((host, port), 3)
        s.sendall(b'dryrun-pwned-tcp')
        print('CONNECTED', host, port)
        s.close()
    except OSError as e:
        print('tcp failed', host, port, e)
"#,
        py_targets(targets)
    ))
}

/// Python: UDP datagrams (sendto, and connect + send) to every target.
fn udp_attack_py(targets: &[(IpAddr, u16)]) -> String {
    py(&format!(
        r#"
import socket
for host, port in {}:
    fam = socket.AF_INET6 if ':' in host else socket.AF_INET
    for way in ('sendto', 'connect'):
        try:
            s = socket.socket(fam, socket.SOCK_DGRAM)
            for i in range(3):
                if way == 'sendto':
                    s.sendto(b'dryrun-pwned-udp', (host, port))
                else:
                    s.connect((host, port))
                    s.send(b'dryrun-pwned-udp')
            print('udp', way, 'sent', host, port)
        except OSError as e:
            print('udp', way, 'failed', host, port, e)
"#,
        py_targets(targets)
    ))
}

/// Python: connect to a unix socket (a path, or an abstract name when
/// `abstract_name` is set) and send; prints CONNECTED on success.
fn unix_attack_py(target: &str, abstract_name: bool) -> String {
    let addr = if abstract_name {
        format!("b'\\x00' + {:?}.encode()", target)
    } else {
        format!("{target:?}")
    };
    py(&format!(
        r#"
import socket
for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
    try:
        s = socket.socket(socket.AF_UNIX, kind)
        s.connect({addr})
        s.sendall(b'dryrun-pwned-unix')
        print('CONNECTED', kind)
    except OSError as e:
        print('unix failed', kind, e)
"#
    ))
}

fn assert_no_connect_output(who: Who, r: &Run) {
    assert!(
        !r.out().contains("CONNECTED"),
        "{who:?}: a connection succeeded inside the sandbox: {}\n{}",
        r.out(),
        r.err()
    );
}

#[test]
fn tcp_to_a_host_loopback_listener_is_not_delivered() {
    for who in identities() {
        let bind = |a: &str| {
            let mut v = vec![TcpListener::bind((a, 0)).unwrap()];
            if let Ok(l6) = TcpListener::bind(("::1", 0)) {
                v.push(l6);
            }
            v
        };
        let script = |ls: &[TcpListener]| {
            let targets: Vec<(IpAddr, u16)> = ls
                .iter()
                .map(|l| (l.local_addr().unwrap().ip(), l.local_addr().unwrap().port()))
                .collect();
            let port = targets[0].1;
            format!(
                "{}; (echo dryrun-pwned-bash > /dev/tcp/127.0.0.1/{port}) && echo BASH-CONNECTED; \
                 exec 5<>/dev/tcp/localhost/{port} && echo BASH-CONNECTED-5; exit 0",
                tcp_attack_py(&targets)
            )
        };

        // Positive control on the host.
        let control = bind("127.0.0.1");
        let out = run_on_host(&script(&control));
        let got: Vec<String> = control.iter().flat_map(tcp_accepted).collect();
        assert!(
            got.len() >= 3,
            "control: the attack script does not reach a host listener: {out}\n{got:?}"
        );

        let ls = bind("127.0.0.1");
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&script(&ls), &[]);
        assert_ran(who, &r);
        let got: Vec<String> = ls.iter().flat_map(tcp_accepted).collect();
        assert!(
            got.is_empty(),
            "{who:?}: the host loopback listener accepted {got:?}; run: {}\n{}",
            r.out(),
            r.err()
        );
        assert_no_connect_output(who, &r);
        assert!(!r.out().contains("BASH-CONNECTED"), "{who:?}: {}", r.out());
        assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());
    }
}

#[test]
fn udp_to_a_host_loopback_socket_is_not_delivered() {
    for who in identities() {
        let bind = || {
            let mut v = vec![UdpSocket::bind("127.0.0.1:0").unwrap()];
            if let Ok(s6) = UdpSocket::bind("[::1]:0") {
                v.push(s6);
            }
            for a in host_non_loopback_addrs() {
                if let Ok(s) = UdpSocket::bind((a, 0)) {
                    v.push(s);
                }
            }
            v
        };
        let script = |ss: &[UdpSocket]| {
            let targets: Vec<(IpAddr, u16)> = ss
                .iter()
                .map(|s| (s.local_addr().unwrap().ip(), s.local_addr().unwrap().port()))
                .collect();
            let port = targets[0].1;
            format!(
                "{}; echo dryrun-pwned-bash > /dev/udp/127.0.0.1/{port}; echo dryrun-pwned-bash > /dev/udp/localhost/{port}; exit 0",
                udp_attack_py(&targets)
            )
        };

        let control = bind();
        let out = run_on_host(&script(&control));
        for s in &control {
            let got = udp_received(s);
            assert!(
                !got.is_empty(),
                "control: the attack script does not reach {:?}: {out}",
                s.local_addr()
            );
        }

        let ss = bind();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&script(&ss), &[]);
        assert_ran(who, &r);
        for s in &ss {
            let got = udp_received(s);
            assert!(
                got.is_empty(),
                "{who:?}: host UDP socket {:?} received {got:?}; run: {}\n{}",
                s.local_addr(),
                r.out(),
                r.err()
            );
        }
        assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());
    }
}

#[test]
fn the_hosts_non_loopback_addresses_are_unreachable() {
    let addrs = host_non_loopback_addrs();
    if addrs.is_empty() {
        eprintln!("SKIP: the host has no non-loopback address");
        return;
    }
    for who in identities() {
        let bind = || -> Vec<TcpListener> {
            addrs
                .iter()
                .filter_map(|a| TcpListener::bind((*a, 0)).ok())
                .collect()
        };
        let script = |ls: &[TcpListener]| {
            let targets: Vec<(IpAddr, u16)> = ls
                .iter()
                .map(|l| (l.local_addr().unwrap().ip(), l.local_addr().unwrap().port()))
                .collect();
            let mut s = tcp_attack_py(&targets);
            for (a, p) in &targets {
                if a.is_ipv4() {
                    s.push_str(&format!(
                        "; (echo dryrun-pwned-bash > /dev/tcp/{a}/{p}) && echo BASH-CONNECTED"
                    ));
                }
            }
            s.push_str("; exit 0");
            s
        };

        let control = bind();
        assert!(!control.is_empty(), "cannot bind any of {addrs:?}");
        let out = run_on_host(&script(&control));
        for l in &control {
            assert!(
                !tcp_accepted(l).is_empty(),
                "control: the attack script does not reach {:?}: {out}",
                l.local_addr()
            );
        }

        let ls = bind();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&script(&ls), &[]);
        assert_ran(who, &r);
        for l in &ls {
            let got = tcp_accepted(l);
            assert!(
                got.is_empty(),
                "{who:?}: the host listener on {:?} accepted {got:?}; run: {}\n{}",
                l.local_addr(),
                r.out(),
                r.err()
            );
        }
        assert_no_connect_output(who, &r);
        assert!(!r.out().contains("BASH-CONNECTED"), "{who:?}: {}", r.out());
        // Every attempt failed inside, one line per target.
        assert_eq!(
            r.out().matches("tcp failed").count(),
            ls.len(),
            "{who:?}: {}",
            r.out()
        );
    }
}

#[test]
fn dns_resolution_fails_inside() {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    assert!(
        !hosts.contains("example.com"),
        "precondition: the host's /etc/hosts names example.com"
    );
    for who in identities() {
        let ws = Ws::new(who);
        let script = format!(
            "getent hosts example.com; echo \"getent=$?\"; getent ahosts example.com; echo \"ahosts=$?\"; {}; exit 0",
            py(r#"
import socket
try:
    print('RESOLVED', socket.getaddrinfo('example.com', 80))
except socket.gaierror as e:
    print('gaierror', e)
except OSError as e:
    print('oserror', e)
"#)
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_ran(who, &r);
        let out = r.out();
        assert!(
            out.lines()
                .any(|l| l.starts_with("getent=") && l != "getent=0"),
            "{who:?}: {out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("ahosts=") && l != "ahosts=0"),
            "{who:?}: {out}"
        );
        assert!(!out.contains("RESOLVED"), "{who:?}: {out}");
        assert!(
            out.contains("gaierror") || out.contains("oserror"),
            "{who:?}: {out}\n{}",
            r.err()
        );
        assert!(
            !out.contains("example.com"),
            "{who:?}: getent printed an address: {out}"
        );
    }
}

#[test]
fn abstract_unix_socket_on_the_host_is_unreachable() {
    for who in identities() {
        let bind = || {
            let name = format!("dryrun-test-{}", random_hex());
            let l =
                UnixListener::bind_addr(&UnixAddr::from_abstract_name(name.as_bytes()).unwrap())
                    .unwrap();
            (name, l)
        };
        let script = |name: &str| format!("{}; exit 0", unix_attack_py(name, true));

        let (cname, control) = bind();
        let out = run_on_host(&script(&cname));
        assert!(
            !unix_accepted(&control).is_empty(),
            "control: the attack script does not reach an abstract socket: {out}"
        );

        let (name, l) = bind();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&script(&name), &[]);
        assert_ran(who, &r);
        let got = unix_accepted(&l);
        assert!(
            got.is_empty(),
            "{who:?}: the abstract socket @{name} accepted {got:?}; run: {}\n{}",
            r.out(),
            r.err()
        );
        assert_no_connect_output(who, &r);
        assert_eq!(
            r.out().matches("unix failed").count(),
            2,
            "{who:?}: {}\n{}",
            r.out(),
            r.err()
        );
    }
}

#[test]
fn unix_socket_placed_in_the_workspace_by_the_host_is_unreachable() {
    for who in identities() {
        let ws = Ws::new(who);
        let path = ws.dir.join("svc.sock");
        let l = UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        ws.chown_all();
        let script = format!(
            "ls -l svc.sock; {}; exit 0",
            unix_attack_py(&path.display().to_string(), false)
        );

        let out = run_on_host(&script);
        assert!(
            !unix_accepted(&l).is_empty(),
            "control: the attack script does not reach {}: {out}",
            path.display()
        );

        let r = ws.rehearse_untouched(&script, &[]);
        assert_ran(who, &r);
        let got = unix_accepted(&l);
        assert!(
            got.is_empty(),
            "{who:?}: the workspace socket accepted {got:?}; run: {}\n{}",
            r.out(),
            r.err()
        );
        assert_no_connect_output(who, &r);
        assert_eq!(
            r.out().matches("unix failed").count(),
            2,
            "{who:?}: {}\n{}",
            r.out(),
            r.err()
        );
    }
}

#[test]
fn only_the_loopback_interface_exists_inside() {
    for who in identities() {
        let ws = Ws::new(who);
        let script = format!(
            "echo '--dev'; cat /proc/net/dev; echo '--py'; {}",
            py("import socket\nfor i, n in socket.if_nameindex(): print('if', n)")
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_ran(who, &r);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {}\n{}", r.out(), r.err());
        let out = r.out();
        let (dev, pyout) = out
            .split_once("--py")
            .unwrap_or_else(|| panic!("{who:?}: {out}"));
        let from_dev: Vec<&str> = dev
            .lines()
            .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim()))
            .filter(|n| !n.is_empty() && !n.contains('|'))
            .collect();
        assert_eq!(from_dev, vec!["lo"], "{who:?}: /proc/net/dev inside: {dev}");
        let from_py: Vec<&str> = pyout
            .lines()
            .filter_map(|l| l.strip_prefix("if "))
            .collect();
        assert_eq!(from_py, vec!["lo"], "{who:?}: if_nameindex inside: {pyout}");
    }
}

#[test]
fn network_is_listed_as_stripped() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched("echo hi", &[]);
        assert_ran(who, &r);
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        let stripped = r.json["rehearsal"]["stripped"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            stripped.iter().any(|s| s == "network"),
            "{who:?}: stripped = {stripped:?}"
        );
        // No attempt, no network evidence.
        assert!(
            !r.blocked().iter().any(|b| b["kind"] == "network"),
            "{who:?}: {:?}",
            r.blocked()
        );
        assert_eq!(r.decision(), "promote", "{who:?}: {:?}", r.json["verdict"]);
    }
}

// ---------------------------------------------------------------------------
// Evidence: a network attempt is recorded and blocks the run. The commands
// below all exit 0, so the network attempt is the only reason to block.

fn assert_network_evidence(who: Who, r: &Run, port: u16) {
    let blocked = r.blocked();
    let net: Vec<&Value> = blocked.iter().filter(|b| b["kind"] == "network").collect();
    assert!(
        !net.is_empty(),
        "{who:?}: no network entry in rehearsal.blocked: {blocked:?}\nstdout: {}\nstderr: {}",
        r.out(),
        r.err()
    );
    assert!(
        net.iter().any(|b| b["detail"]
            .as_str()
            .unwrap_or("")
            .contains(&port.to_string())),
        "{who:?}: no network entry names the port {port}: {net:?}"
    );
    assert_eq!(r.decision(), "blocked", "{who:?}: {:?}", r.json["verdict"]);
    assert_eq!(r.code, 4, "{who:?}: exit code {}", r.code);
    let reasons = r.json["verdict"]["reasons"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        reasons
            .iter()
            .any(|x| x.as_str().unwrap_or("").contains("[evidence.network]")),
        "{who:?}: reasons = {reasons:?}"
    );
    assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());
}

#[test]
fn network_attempt_is_recorded_tcp_to_the_hosts_address() {
    let addrs = host_non_loopback_addrs();
    let Some(addr) = addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
    else {
        eprintln!("SKIP: the host has no non-loopback address");
        return;
    };
    for who in identities() {
        let l = TcpListener::bind((addr, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&format!("{}; exit 0", tcp_attack_py(&[(addr, port)])), &[]);
        assert_ran(who, &r);
        assert!(tcp_accepted(&l).is_empty(), "{who:?}");
        assert_network_evidence(who, &r, port);
    }
}

#[test]
fn network_attempt_is_recorded_tcp_to_loopback() {
    for who in identities() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(
            &format!(
                "{}; exit 0",
                tcp_attack_py(&[(l.local_addr().unwrap().ip(), port)])
            ),
            &[],
        );
        assert_ran(who, &r);
        assert!(tcp_accepted(&l).is_empty(), "{who:?}");
        assert_network_evidence(who, &r, port);
    }
}

#[test]
fn network_attempt_is_recorded_bash_dev_tcp() {
    for who in identities() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(&format!("echo x > /dev/tcp/127.0.0.1/{port}; exit 0"), &[]);
        assert_ran(who, &r);
        assert!(tcp_accepted(&l).is_empty(), "{who:?}");
        assert_network_evidence(who, &r, port);
    }
}

#[test]
fn network_attempt_is_recorded_udp() {
    for who in identities() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(
            &format!(
                "{}; exit 0",
                udp_attack_py(&[(s.local_addr().unwrap().ip(), port)])
            ),
            &[],
        );
        assert_ran(who, &r);
        assert!(udp_received(&s).is_empty(), "{who:?}");
        assert_network_evidence(who, &r, port);
    }
}
