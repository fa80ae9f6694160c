//! Host-side witnesses for the egress tests: a loopback listener that must
//! never be reached, and a run's egress report.
#![allow(dead_code)]

use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::Duration;

use super::{Run, Value};

/// A plain TCP listener on host loopback that must receive nothing.
pub fn canary_listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    (l, p)
}

/// How many connections the listener took (after a moment for late ones).
pub fn accepted(l: &TcpListener) -> usize {
    std::thread::sleep(Duration::from_millis(300));
    let mut n = 0;
    loop {
        match l.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// The run's `rehearsal.egress` entries.
pub fn egress(r: &Run) -> Vec<Value> {
    r.json["rehearsal"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The host's public-looking IPv4 address in a [`HostNet`] (outside every
/// refused range: only the kernel's route says it is the host's), on a
/// /24 of its own (with a broadcast address, `11.7.7.255`).
pub const HOST_V4: &str = "11.7.7.7";
/// The host's global IPv6 address in a [`HostNet`], on a /64.
pub const HOST_V6: &str = "2a0b:4e07:7::7";

/// A network namespace standing in for the host (`ip netns`), with a veth
/// interface holding [`HOST_V4`] and [`HOST_V6`] and default routes out of
/// it (so other addresses route as ordinary unicast), and the `/etc/hosts`
/// its processes see: how a test answers the proxy's lookups, through the
/// host's ordinary resolver, as an agent's DNS would. Nothing of the
/// machine's own network or `/etc` changes; the namespace is removed when
/// it is dropped.
pub struct HostNet {
    pub name: String,
    dir: tempfile::TempDir,
}

/// `ip ARGS`, which must succeed (a missing `ip` fails naming iproute2).
pub fn ip(args: &[&str]) {
    let out = std::process::Command::new(super::tool("ip", "iproute2"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl HostNet {
    /// The namespace, its processes answered by `hosts` for `/etc/hosts`.
    pub fn new(hosts: &str) -> HostNet {
        let name = format!("dryrun-r3-{}", super::random_hex());
        ip(&["netns", "add", &name]);
        let net = HostNet {
            name,
            dir: tempfile::Builder::new()
                .prefix("dryrun-r3-hosts-")
                .tempdir_in("/tmp")
                .unwrap(),
        };
        net.ip(&["link", "set", "lo", "up"]);
        net.ip(&["link", "add", "dr0", "type", "veth", "peer", "name", "dr1"]);
        net.ip(&["addr", "add", &format!("{HOST_V4}/24"), "dev", "dr0"]);
        net.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{HOST_V6}/64"),
            "dev",
            "dr0",
            "nodad",
        ]);
        net.ip(&["link", "set", "dr0", "up"]);
        net.ip(&["link", "set", "dr1", "up"]);
        net.ip(&["route", "add", "default", "via", "11.7.7.1"]);
        net.ip(&["-6", "route", "add", "default", "via", "2a0b:4e07:7::1"]);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(net.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = net.dir.path().join("hosts");
        std::fs::write(&file, hosts).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        net
    }

    /// `ip -n NAMESPACE ARGS` (more addresses, interfaces, routes).
    pub fn ip(&self, args: &[&str]) {
        ip(&[&["-n", self.name.as_str()], args].concat());
    }

    /// Runs the program after it in the namespace, with the test's
    /// `/etc/hosts` (as root; a switch to the test user may follow).
    pub fn wrapper(&self) -> Vec<String> {
        [
            "nsenter",
            &format!("--net=/run/netns/{}", self.name),
            "--",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
            self.dir.path().join("hosts").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// A host service: a listener on `[::]:port` (every address of the
    /// namespace, IPv4 too), made by a thread that entered the namespace.
    pub fn listen(&self, port: u16) -> TcpListener {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let l = TcpListener::bind(("::", port)).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .join()
        .unwrap()
    }
}

impl Drop for HostNet {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Python in the sandbox: `CONNECT` each target through the proxy and
/// print the proxy's status line.
pub fn connect_each(targets: &[String]) -> String {
    let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let script = format!(
        r#"
import socket
def connect(target):
    s = socket.create_connection(('127.0.0.1', 3128), 30)
    s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (target, target)).encode())
    got = b''
    while b'\r\n\r\n' not in got:
        b = s.recv(4096)
        if not b: break
        got += b
    s.close()
    return got.split(b'\r\n', 1)[0].decode('latin1')
for t in [{}]:
    print(t, '->', connect(t))
"#,
        list.join(", ")
    );
    format!("python3 -c {}", super::sq(&script))
}

/// The status line the sandbox printed for `target`.
pub fn status_of<'a>(r: &'a Run, target: &str) -> &'a str {
    let prefix = format!("{target} -> ");
    r.out()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no answer for {target}: {}\n{}", r.out(), r.err()))
}

/// The proxy entry for `name` on `port`.
pub fn proxy_entry(r: &Run, name: &str, port: u16) -> Value {
    egress(r)
        .into_iter()
        .find(|e| e["name"] == name && e["how"] == "proxy" && e["port"] == port)
        .unwrap_or_else(|| panic!("no proxy entry for {name}:{port}: {:?}", egress(r)))
}
