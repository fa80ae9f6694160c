//! Hostile round 3, egress: a command with a network allowlist points an
//! allowed name (the agent controls its DNS) at an address of the host
//! itself, a public IPv4 or a global IPv6 on one of its interfaces, or at
//! an IPv6 form that carries such an address, to reach a host service
//! bound to every address; tunnels to a port an entry never named; and a
//! run without network looks names up.
//!
//! The host here is a network namespace of the test's own (`ip netns`),
//! with a veth interface holding a public-looking IPv4 address
//! ([`HOST_V4`], a /24 with its broadcast address) and a global IPv6 one
//! ([`HOST_V6`]), default routes out of it (so other addresses route as
//! ordinary unicast), and listeners bound to `::` (every address, both
//! families) that must accept nothing. The daemon (root) and the
//! in-process CLI run in that namespace, in a mount namespace of their own
//! whose `/etc/hosts` is the test's: that is how the test answers the
//! proxy's lookups, through the host's ordinary resolver (`files` before
//! `dns`), as an agent's DNS would. Nothing of the machine's own network
//! or `/etc` changes; the namespace is removed when the test ends.
//!
//! The positive controls: the same listeners are reached through names
//! the system pinned to the same addresses (`--egress-resolve`), so a
//! refusal is the proxy's, not an unreachable setup.

mod common;
use common::daemon::{Daemon, require_root, user_workspace};
use common::net::{
    HOST_V4, HOST_V6, HostNet, accepted, connect_each, egress, proxy_entry, status_of,
};
use common::*;

/// The host service's port.
const PORT: u16 = 7070;

/// `/etc/hosts` as the proxy's resolver reads it: every name the agent
/// controls, and what it answers.
const HOSTS: &str = "\
127.0.0.1 localhost
11.7.7.7 x.test
2a0b:4e07:7::7 v6.x.test
11.7.7.255 bcast.x.test
93.184.216.34 mixed.x.test
11.7.7.7 mixed.x.test
::ffff:11.7.7.7 mapped.x.test
64:ff9b::b07:707 nat64.x.test
2002:b07:707::1 sixtofour.x.test
2001:0:5db8:d822:8000:f227:f4f8:f8f8 teredo.x.test
2001:0:b07:707:0:0:a2b4:27dd teredo-server.x.test
2a0b:4e07:7::5efe:b07:707 isatap.x.test
::b07:707 compat.x.test
11.7.7.7 pinned.test
11.7.7.7 ssh.test
";

/// Each attack name and words its refusal must carry.
const ATTACKS: &[(&str, &[&str])] = &[
    ("x.test", &["11.7.7.7", "an address of this host"]),
    ("v6.x.test", &["2a0b:4e07:7::7", "an address of this host"]),
    ("bcast.x.test", &["11.7.7.255", "broadcast"]),
    ("mixed.x.test", &["11.7.7.7", "an address of this host"]),
    ("mapped.x.test", &["IPv4-mapped", "11.7.7.7", "this host"]),
    ("nat64.x.test", &["NAT64", "11.7.7.7", "this host"]),
    ("sixtofour.x.test", &["6to4", "11.7.7.7", "this host"]),
    (
        "teredo.x.test",
        &["Teredo", "client", "11.7.7.7", "this host"],
    ),
    (
        "teredo-server.x.test",
        &["Teredo", "server", "11.7.7.7", "this host"],
    ),
    ("isatap.x.test", &["ISATAP", "11.7.7.7", "this host"]),
    ("compat.x.test", &["IPv4-compatible"]),
];

/// Every attack was refused by the proxy, for the reason expected, and
/// the pinned names (the controls) got through.
fn assert_refused_for_the_host(label: &str, r: &Run, attacks: &[(&str, &[&str])]) {
    for (name, words) in attacks {
        let target = format!("{name}:{PORT}");
        assert!(
            status_of(r, &target).contains(" 403 "),
            "{label}: {target}: {}",
            r.out()
        );
        let e = proxy_entry(r, name, PORT);
        assert_eq!(e["allowed"], false, "{label}: {e}");
        let why = e["reason"].as_str().unwrap_or("");
        for w in *words {
            assert!(why.contains(w), "{label}: {name}: {w:?} not in {why:?}");
        }
    }
    assert_eq!(r.decision(), "blocked", "{label}: {:?}", r.reasons());
}

#[test]
fn the_proxy_of_a_root_daemon_never_reaches_the_hosts_own_addresses() {
    if !require_root() {
        return;
    }
    let net = HostNet::new(HOSTS);
    let service = net.listen(PORT);
    let pins = [
        format!("pinned.test:{PORT}:{HOST_V4}"),
        format!("pinned6.test:{PORT}:[{HOST_V6}]"),
    ];
    let mut args: Vec<&str> = Vec::new();
    for p in &pins {
        args.extend(["--egress-resolve", p.as_str()]);
    }
    let d = Daemon::start_wrapped(&net.wrapper(), &args);
    let ws = user_workspace();
    let mut targets: Vec<String> = ATTACKS.iter().map(|(n, _)| format!("{n}:{PORT}")).collect();
    // The pin is for its name and port only: the same name on another
    // port resolves as any other name, to the host.
    targets.push(format!("pinned.test:{}", PORT + 1));
    targets.push(format!("pinned.test:{PORT}"));
    targets.push(format!("pinned6.test:{PORT}"));
    let cmd = format!(
        "curl -sS --max-time 30 http://x.test:{PORT}/admin; echo; {}",
        connect_each(&targets)
    );
    let mut c = d.cli_user();
    c.current_dir(&ws.dir)
        .args(["execute", "--json", "--command", &cmd]);
    for t in &targets {
        c.args(["--allow-net", t]);
    }
    let r = to_run(c.output().unwrap());
    assert_ran(Who::User, &r);
    // On the host: the service took exactly the two pinned connections.
    assert_eq!(accepted(&service), 2, "{}\n{}", r.out(), d.log_text());
    assert!(
        r.out()
            .contains("x.test resolves to 11.7.7.7, an address of this host"),
        "the plain request was refused, and said why: {}",
        r.out()
    );
    assert_refused_for_the_host("daemon", &r, ATTACKS);
    let other_port = proxy_entry(&r, "pinned.test", PORT + 1);
    assert_eq!(other_port["allowed"], false, "{other_port}");
    assert!(
        other_port["reason"]
            .as_str()
            .unwrap()
            .contains("an address of this host"),
        "{other_port}"
    );
    for control in ["pinned.test", "pinned6.test"] {
        assert!(
            status_of(&r, &format!("{control}:{PORT}")).contains(" 200 "),
            "{control}: {}",
            r.out()
        );
        assert_eq!(proxy_entry(&r, control, PORT)["allowed"], true);
    }
}

#[test]
fn an_in_process_proxy_never_reaches_the_hosts_own_addresses_as_root_or_user() {
    if !require_root() {
        return;
    }
    let attacks: Vec<(&str, &[&str])> = ATTACKS
        .iter()
        .filter(|(n, _)| ["x.test", "v6.x.test", "nat64.x.test", "teredo.x.test"].contains(n))
        .copied()
        .collect();
    for who in identities() {
        let net = HostNet::new(HOSTS);
        let service = net.listen(PORT);
        let ws = Ws::new(who);
        let mut targets: Vec<String> = attacks.iter().map(|(n, _)| format!("{n}:{PORT}")).collect();
        targets.push(format!("pinned.test:{PORT}"));
        let cmd = connect_each(&targets);
        let pin = format!("pinned.test:{PORT}:{HOST_V4}");
        let mut c = ws.command_via(&net.wrapper());
        c.args([
            "execute",
            "--json",
            "--command",
            &cmd,
            "--egress-resolve",
            &pin,
        ]);
        for t in &targets {
            c.args(["--allow-net", t]);
        }
        let r = to_run(c.output().unwrap());
        assert_ran(who, &r);
        assert_eq!(accepted(&service), 1, "{who:?}: {}", r.out());
        assert_refused_for_the_host(&format!("{who:?}"), &r, &attacks);
        assert!(
            status_of(&r, &format!("pinned.test:{PORT}")).contains(" 200 "),
            "{who:?}: {}",
            r.out()
        );
    }
}

#[test]
fn a_tunnel_to_a_port_an_entry_does_not_name_is_refused() {
    if !require_root() {
        return;
    }
    let net = HostNet::new(HOSTS);
    let ssh = net.listen(22);
    let https = net.listen(443);
    let d = Daemon::start_wrapped(
        &net.wrapper(),
        &[
            "--egress-resolve",
            &format!("ssh.test:22:{HOST_V4}"),
            "--egress-resolve",
            &format!("ssh.test:443:{HOST_V4}"),
        ],
    );
    let ws = user_workspace();
    let run = |allow: &str| {
        let out = d
            .cli_user()
            .current_dir(&ws.dir)
            .args(["execute", "--json", "--allow-net", allow, "--command"])
            .arg(connect_each(&["ssh.test:22".into(), "ssh.test:443".into()]))
            .output()
            .unwrap();
        to_run(out)
    };
    // An entry without a port: the web's ports only.
    let r = run("ssh.test");
    assert_ran(Who::User, &r);
    assert!(
        status_of(&r, "ssh.test:22").contains(" 403 "),
        "{}",
        r.out()
    );
    assert!(
        status_of(&r, "ssh.test:443").contains(" 200 "),
        "{}",
        r.out()
    );
    assert_eq!(accepted(&ssh), 0, "port 22 was reached: {}", r.out());
    assert_eq!(accepted(&https), 1, "the control: {}", r.out());
    let e = proxy_entry(&r, "ssh.test", 22);
    assert_eq!(e["allowed"], false, "{e}");
    let why = e["reason"].as_str().unwrap();
    assert!(
        why.contains("port 22") && why.contains("80 and 443") && why.contains("ssh.test:22"),
        "{why}"
    );
    assert_eq!(r.decision(), "blocked", "{:?}", r.reasons());
    // The same tunnel with the port named in the entry.
    let r = run("ssh.test:22");
    assert_ran(Who::User, &r);
    assert!(
        status_of(&r, "ssh.test:22").contains(" 200 "),
        "{}",
        r.out()
    );
    assert!(
        status_of(&r, "ssh.test:443").contains(" 403 "),
        "{}",
        r.out()
    );
    assert_eq!(accepted(&ssh), 1, "{}", r.out());
    assert_eq!(proxy_entry(&r, "ssh.test", 22)["allowed"], true);
}

/// What a lookup in a run without network must leave in the record: the
/// names, refused, and no datagram to the host's resolver.
fn assert_lookups_named(label: &str, r: &Run) {
    assert!(
        r.out().lines().any(|l| l.starts_with("rc=") && l != "rc=0"),
        "{label}: the lookup failed inside as before: {}",
        r.out()
    );
    assert!(!r.out().contains("RESOLVED"), "{label}: {}", r.out());
    let e = egress(r);
    for name in ["pkgs.example", "files.pkgs.example"] {
        let x = e
            .iter()
            .find(|x| x["name"] == name && x["how"] == "dns")
            .unwrap_or_else(|| panic!("{label}: {name} not named: {e:?}"));
        assert_eq!(x["allowed"], false, "{label}: {x}");
        assert!(x["port"].is_null(), "{label}: {x}");
        assert!(
            x["reason"].as_str().unwrap().contains("network is none"),
            "{label}: {x}"
        );
    }
    for b in r.blocked() {
        let d = b["detail"].as_str().unwrap_or("");
        assert!(
            !d.contains(":53"),
            "{label}: a lookup recorded by address: {d}"
        );
    }
    assert!(
        r.reasons()
            .iter()
            .any(|x| x.starts_with("[evidence.network]") && x.contains("pkgs.example")),
        "{label}: {:?}",
        r.reasons()
    );
    assert_eq!(r.decision(), "blocked", "{label}");
}

const LOOKUPS: &str = "getent hosts pkgs.example; echo rc=$?; \
     python3 -c \"import socket; print('RESOLVED', socket.getaddrinfo('files.pkgs.example', 443))\" 2>/dev/null; true";

#[test]
fn a_lookup_in_a_run_without_network_is_recorded_by_name() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(LOOKUPS, &[]);
        assert_ran(who, &r);
        assert_lookups_named(&format!("{who:?}"), &r);
    }
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let r = common::daemon::submit_user(&d, &ws, LOOKUPS, &[]);
    assert_ran(Who::User, &r);
    assert_lookups_named("daemon", &r);
}
