//! Threat and fidelity: host services on loopback (`intent.network.services`).
//! A rehearsal reaches exactly the services it declares and the system
//! policy lists, with its bytes recorded and its real effects named; it
//! reaches nothing else: an unlisted or never-rehearsable endpoint refuses
//! the run before anything runs, an undeclared connection is cut, a link
//! in place of a listed socket is not followed, and a command racing its
//! own `connect()` arguments cannot turn the declared socket into another.
//! Host-side listeners are the witnesses (what they accepted, and as whom).

mod common;
use common::net::egress;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A service on the host: answers each connection's first line `L` with
/// `pong:L`, and remembers how many connections it took and (Unix) the
/// peer's uid.
struct Service {
    accepted: Arc<AtomicUsize>,
    peers: Arc<Mutex<Vec<u32>>>,
}

impl Service {
    fn count(&self) -> usize {
        // Connections are answered in the accepting thread: once the run
        // is over, every one it made has been counted.
        self.accepted.load(Ordering::SeqCst)
    }
}

fn answer<S: std::io::Read + Write>(s: S) {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    if r.read_line(&mut line).is_ok() {
        let _ = r.get_mut().write_all(format!("pong:{line}").as_bytes());
    }
}

fn tcp_service() -> (Service, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let s = Service {
        accepted: Arc::default(),
        peers: Arc::default(),
    };
    let n = s.accepted.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            n.fetch_add(1, Ordering::SeqCst);
            answer(c);
        }
    });
    (s, port)
}

/// A Unix stream service at `path` (any user may connect).
fn unix_service(path: &Path) -> Service {
    let l = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = Service {
        accepted: Arc::default(),
        peers: Arc::default(),
    };
    let (n, peers) = (s.accepted.clone(), s.peers.clone());
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            n.fetch_add(1, Ordering::SeqCst);
            let cred = nix::sys::socket::getsockopt(&c, nix::sys::socket::sockopt::PeerCredentials)
                .unwrap();
            peers.lock().unwrap().push(cred.uid());
            answer(c);
        }
    });
    s
}

/// A directory for sockets, outside any workspace, that every user can
/// enter (root-owned, 0755).
fn socket_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-svc-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A system policy directory (root-owned, 0755, as the engine requires of
/// `DRYRUN_SYSTEM_POLICY_DIR`) holding `yaml`.
fn policy_dir(yaml: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-svc-policy-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = d.path().join("services.yaml");
    std::fs::write(&f, yaml).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    d
}

fn services_policy(entries: &[(&str, bool)]) -> tempfile::TempDir {
    let mut y = String::from("egress:\n  services:\n");
    for (e, disposable) in entries {
        y.push_str(&format!(
            "    - {{endpoint: \"{e}\", disposable: {disposable}}}\n"
        ));
    }
    policy_dir(&y)
}

/// The client the rehearsed command runs: for each `tcp:HOST:PORT` or
/// `unix:PATH` argument, send `ping\n` and print the answer; exit 3 at the
/// first failure.
const CLIENT: &str = r#"
import socket, sys
for a in sys.argv[1:]:
    kind, _, where = a.partition(":")
    try:
        if kind == "tcp":
            host, _, port = where.rpartition(":")
            s = socket.create_connection((host, int(port)), timeout=20)
        else:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(20)
            s.connect(where)
        s.sendall(b"ping\n")
        print(s.recv(100).decode().strip(), flush=True)
    except OSError as e:
        print(f"{a}: {e}", flush=True)
        sys.exit(3)
"#;

fn workspace(who: Who) -> Ws {
    let ws = Ws::new(who);
    ws.write("client.py", CLIENT);
    ws
}

/// `dryrun execute --json` in `ws` under the system policy in `policy`.
fn execute(ws: &Ws, policy: &Path, args: &[&str]) -> Run {
    let mut c = ws.command();
    c.env("DRYRUN_SYSTEM_POLICY_DIR", policy)
        .arg("execute")
        .arg("--json")
        .args(args);
    to_run(c.output().unwrap())
}

fn service_entry<'a>(e: &'a [Value], name: &str) -> &'a Value {
    e.iter()
        .find(|x| x["name"] == name && x["how"] == "service")
        .unwrap_or_else(|| panic!("no service entry {name}: {e:?}"))
}

#[test]
fn a_declared_listed_service_is_reached_recorded_and_needs_approval() {
    let dir = socket_dir();
    let sock = dir.path().join("app.sock");
    let unix = unix_service(&sock);
    let (tcp, port) = tcp_service();
    let tcp_ep = format!("127.0.0.1:{port}");
    let sock_s = sock.to_str().unwrap();
    let policy = services_policy(&[(&tcp_ep, false), (sock_s, false)]);
    let mut expected_accepts = 0;
    for who in identities() {
        let ws = workspace(who);
        let r = execute(
            &ws,
            policy.path(),
            &[
                "--service",
                &tcp_ep,
                "--service",
                sock_s,
                "--command",
                &format!("python3 client.py tcp:{tcp_ep} unix:{sock_s}"),
            ],
        );
        expected_accepts += 1;
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert_eq!(r.out().matches("pong:ping").count(), 2, "{who:?}: {r:?}");
        assert_eq!(r.code, 3, "{who:?}: a real service needs approval: {r:?}");
        let reasons = r.reasons().join("\n");
        assert!(
            reasons.contains("[evidence.service]")
                && reasons.contains(&tcp_ep)
                && reasons.contains(sock_s)
                && reasons.contains("not undone"),
            "{who:?}: {reasons}"
        );
        let e = egress(&r);
        let t = service_entry(&e, "127.0.0.1");
        assert_eq!(t["port"], port, "{t}");
        let u = service_entry(&e, sock_s);
        assert!(u["port"].is_null(), "{u}");
        for x in [t, u] {
            // "ping\n" out, "pong:ping\n" back, counted on the host side.
            assert_eq!(
                (x["bytes_out"].as_u64(), x["bytes_in"].as_u64()),
                (Some(5), Some(10)),
                "{x}"
            );
            assert_eq!(x["allowed"], true);
            assert!(x.get("disposable").is_none(), "{x}");
        }
        assert_eq!(r.json["intent"]["services"].as_array().unwrap().len(), 2);
        assert_eq!(tcp.count(), expected_accepts, "{who:?}");
        assert_eq!(unix.count(), expected_accepts, "{who:?}");
        // The service saw the workspace's owner, never anyone else.
        let owner = if who == Who::User { test_user().0 } else { 0 };
        assert_eq!(unix.peers.lock().unwrap().last(), Some(&owner), "{who:?}");
    }
}

#[test]
fn a_disposable_service_is_noted_and_the_run_promotes() {
    let (tcp, port) = tcp_service();
    let tcp_ep = format!("127.0.0.1:{port}");
    let policy = services_policy(&[(&tcp_ep, true)]);
    for who in identities() {
        let ws = workspace(who);
        let r = execute(
            &ws,
            policy.path(),
            &[
                "--service",
                &tcp_ep,
                "--expect-write",
                "answer.txt",
                "--command",
                &format!("python3 client.py tcp:{tcp_ep} > answer.txt"),
            ],
        );
        assert_eq!(r.code, 0, "{who:?}: {r:?}");
        assert_eq!(r.decision(), "promote");
        assert!(r.change("answer.txt").is_some(), "{:?}", r.changes());
        let e = egress(&r);
        assert_eq!(service_entry(&e, "127.0.0.1")["disposable"], true);
        assert!(
            r.notes().iter().any(|n| n.contains("disposable")),
            "{:?}",
            r.notes()
        );
    }
    assert_eq!(tcp.count(), identities().len());
}

#[test]
fn an_unlisted_or_never_rehearsable_service_refuses_the_run_before_anything_runs() {
    let (canary, port) = tcp_service();
    let listed = tcp_service().1;
    let policy = services_policy(&[(&format!("127.0.0.1:{listed}"), true)]);
    for who in identities() {
        let ws = workspace(who);
        let before = ws.snapshot();
        for (service, want) in [
            (
                format!("127.0.0.1:{port}"),
                "not a service the system policy",
            ),
            (format!("[::1]:{listed}"), "not a service the system policy"),
            ("/var/run/docker.sock".to_string(), "never rehearsable"),
            (
                "/run/user/1000/docker.sock".to_string(),
                "never rehearsable",
            ),
            ("/run/dryrun/dryrun.sock".to_string(), "never rehearsable"),
            ("10.0.0.1:5432".to_string(), "loopback"),
            (
                format!("{}/x.sock", ws.dir.display()),
                "inside the workspace",
            ),
        ] {
            let r = execute(
                &ws,
                policy.path(),
                &[
                    "--service",
                    &service,
                    "--command",
                    &format!("python3 client.py tcp:127.0.0.1:{port}"),
                ],
            );
            assert_eq!(r.code, 2, "{who:?} {service}: {r:?}");
            assert!(
                r.stderr.contains("intent.network.services[0]") && r.stderr.contains(want),
                "{who:?} {service}: {}",
                r.stderr
            );
        }
        assert_eq!(before, ws.snapshot());
        assert!(
            std::fs::read_dir(ws.state.join("runs"))
                .map(|d| d.count() == 0)
                .unwrap_or(true),
            "{who:?}: a refused run was rehearsed"
        );
    }
    assert_eq!(canary.count(), 0, "the unlisted service was reached");
}

#[test]
fn a_policy_cannot_make_the_docker_socket_rehearsable() {
    let dir = socket_dir();
    let docker = dir.path().join("docker.sock");
    let canary = unix_service(&docker);
    let d = docker.to_str().unwrap();
    let policy = services_policy(&[(d, true)]);
    let ws = workspace(Who::Root);
    let r = execute(
        &ws,
        policy.path(),
        &[
            "--service",
            d,
            "--command",
            &format!("python3 client.py unix:{d}"),
        ],
    );
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("egress.services[0].endpoint") && r.stderr.contains("never rehearsable"),
        "{}",
        r.stderr
    );
    // Nor under another name: a listed path that is a link to it is not
    // followed, and the run says the service did not answer.
    let link = dir.path().join("app.sock");
    std::os::unix::fs::symlink(&docker, &link).unwrap();
    let l = link.to_str().unwrap();
    let policy = services_policy(&[(l, true)]);
    for who in identities() {
        let ws = workspace(who);
        let r = execute(
            &ws,
            policy.path(),
            &[
                "--service",
                l,
                "--command",
                &format!("python3 client.py unix:{l}"),
            ],
        );
        assert_eq!(r.exit_code(), Some(3), "{who:?}: {r:?}");
        let e = egress(&r);
        let x = service_entry(&e, l);
        assert!(
            x["reason"].as_str().unwrap_or("").contains("symbolic link"),
            "{x}"
        );
        assert!(
            r.reasons().iter().any(|m| m.contains("did not answer")),
            "{:?}",
            r.reasons()
        );
    }
    assert_eq!(canary.count(), 0, "the docker-like socket was reached");
}

#[test]
fn an_undeclared_connection_to_a_listed_service_is_cut_and_named() {
    let dir = socket_dir();
    let sock = dir.path().join("app.sock");
    let unix = unix_service(&sock);
    let (tcp, port) = tcp_service();
    let tcp_ep = format!("127.0.0.1:{port}");
    let sock_s = sock.to_str().unwrap();
    let policy = services_policy(&[(&tcp_ep, true), (sock_s, true)]);
    for who in identities() {
        let ws = workspace(who);
        for target in [format!("tcp:{tcp_ep}"), format!("unix:{sock_s}")] {
            let r = execute(
                &ws,
                policy.path(),
                &["--command", &format!("python3 client.py {target}")],
            );
            assert_eq!(r.exit_code(), Some(3), "{who:?} {target}: {r:?}");
            assert_eq!(r.decision(), "blocked", "{who:?} {target}");
            // Named, with how to declare it.
            let endpoint = target.split_once(':').unwrap().1;
            assert!(
                r.notes().iter().any(|n| n.contains("lists as rehearsable")
                    && n.contains(&format!("--service {endpoint}"))),
                "{who:?} {target}: {:?}",
                r.notes()
            );
        }
        // Declared with --allow-net instead: still not a service.
        let r = execute(
            &ws,
            policy.path(),
            &[
                "--allow-net",
                "pkgs.example",
                "--command",
                &format!("python3 client.py tcp:{tcp_ep}"),
            ],
        );
        assert_eq!(r.exit_code(), Some(3), "{who:?}: {r:?}");
        assert!(
            r.blocked().iter().any(|b| b["detail"]
                .as_str()
                .unwrap_or("")
                .contains(&format!(":{port}")))
                || egress(&r)
                    .iter()
                    .any(|e| e["port"] == port && e["allowed"] == false),
            "{who:?}: the attempt is not named: {r:?}"
        );
    }
    assert_eq!(
        tcp.count(),
        0,
        "an undeclared connection reached the TCP service"
    );
    assert_eq!(
        unix.count(),
        0,
        "an undeclared connection reached the Unix service"
    );
}

/// The command races its own `connect()`: one thread flips the address
/// buffer between the declared socket's path and a host socket the sandbox
/// shows (in `/opt`, which the image binds read-only: a bind, not an
/// overlay, so the socket there is connectable) while another connects in
/// a loop. Whatever the init read, the connection goes to the declared
/// service or nowhere.
#[test]
fn a_connect_racing_its_own_address_never_reaches_another_socket() {
    const RACE: &str = r#"
import ctypes, socket, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
svc, other = sys.argv[1].encode(), sys.argv[2].encode()
class SA(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("path", ctypes.c_char * 108)]
sa = SA(); sa.family = socket.AF_UNIX
bufs = [p + b"\0" * (108 - len(p)) for p in (svc, other)]
stop = False
def flip():
    while not stop:
        for b in bufs:
            ctypes.memmove(ctypes.addressof(sa) + 2, b, 108)
t = threading.Thread(target=flip); t.start()
ok = 0
for i in range(int(sys.argv[3])):
    s = socket.socket(socket.AF_UNIX)
    if libc.connect(s.fileno(), ctypes.byref(sa), ctypes.sizeof(sa)) == 0:
        ok += 1
    s.close()
stop = True; t.join()
print("connected", ok)
"#;
    let dir = socket_dir();
    let sock = dir.path().join("app.sock");
    let service = unix_service(&sock);
    let sock_s = sock.to_str().unwrap();
    let policy = services_policy(&[(sock_s, true)]);
    for who in identities() {
        let ws = workspace(who);
        ws.write("race.py", RACE);
        let opt = tempfile::Builder::new()
            .prefix("dryrun-test-canary-")
            .tempdir_in("/opt")
            .unwrap();
        std::fs::set_permissions(opt.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let other: PathBuf = opt.path().join("other.sock");
        let canary = unix_service(&other);
        let r = execute(
            &ws,
            policy.path(),
            &[
                "--service",
                sock_s,
                "--command",
                &format!("python3 race.py {sock_s} {} 3000", other.display()),
            ],
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let ok: usize = r
            .out()
            .trim()
            .strip_prefix("connected ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{r:?}"));
        // Positive control: the race did reach the declared service.
        assert!(ok > 0, "{who:?}: no connect succeeded: {r:?}");
        assert_eq!(canary.count(), 0, "{who:?}: the other socket was reached");
    }
    assert!(service.count() > 0);
}

#[test]
fn through_a_root_daemon_the_service_sees_the_agent_never_root() {
    use common::daemon::{Daemon, require_root, submit_user, user_workspace};
    if !require_root() {
        return;
    }
    let dir = socket_dir();
    let sock = dir.path().join("app.sock");
    let unix = unix_service(&sock);
    let (tcp, port) = tcp_service();
    let tcp_ep = format!("127.0.0.1:{port}");
    let sock_s = sock.to_str().unwrap();
    let policy = services_policy(&[(&tcp_ep, false), (sock_s, true)]);
    let d = Daemon::start_env(
        &[],
        &[("DRYRUN_SYSTEM_POLICY_DIR", policy.path().to_str().unwrap())],
    );
    let ws = user_workspace();
    ws.write("client.py", CLIENT);
    let r = submit_user(
        &d,
        &ws,
        &format!("python3 client.py tcp:{tcp_ep} unix:{sock_s}"),
        &["--service", &tcp_ep, "--service", sock_s],
    );
    assert_eq!(r.exit_code(), Some(0), "{r:?}\n{}", d.log_text());
    assert_eq!(r.out().matches("pong:ping").count(), 2, "{r:?}");
    assert_eq!(r.code, 3, "{r:?}");
    let e = egress(&r);
    assert_eq!(service_entry(&e, "127.0.0.1")["bytes_in"], 10);
    assert_eq!(service_entry(&e, sock_s)["bytes_out"], 5);
    assert_eq!((tcp.count(), unix.count()), (1, 1));
    assert_eq!(
        unix.peers.lock().unwrap().as_slice(),
        &[test_user().0],
        "the root daemon connected with its own credentials"
    );
    // An unlisted service through the daemon: refused before anything runs.
    let r = submit_user(&d, &ws, "true", &["--service", "127.0.0.1:9"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("intent.network.services[0]"),
        "{}",
        r.stderr
    );
}
