//! Declared host services: which endpoints a rehearsal may talk to.
//!
//! A run declares the services it needs (`intent.network.services`); the
//! system policy lists the ones that may be rehearsed against
//! (`egress.services`, system policy files only), each marked disposable
//! or not; a few sockets are never rehearsable, whatever any policy says
//! ([`NEVER`], with the reason for each). [`admit`] is the one decision,
//! taken before anything runs (a service the system does not list refuses
//! the run, naming the field) and again when the run's egress starts.
//! `forward.rs` serves the admitted ones.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::model::ServiceEndpoint;

/// One endpoint the system policy lists as rehearsable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRule {
    pub endpoint: ServiceEndpoint,
    /// A throwaway service (a test database rebuilt for each test run):
    /// a rehearsal that talked to it needs no approval for that.
    pub disposable: bool,
}

/// How a never-rehearsable endpoint is recognised.
enum Never {
    /// A Unix socket with this file name, wherever it is.
    FileName(&'static str),
    /// A Unix socket whose file name starts with this.
    FileNamePrefix(&'static str),
    /// A Unix socket at or below this path.
    Below(&'static str),
    /// A Unix socket whose directory's name starts with the first and
    /// whose own name with the second.
    DirAndFile(&'static str, &'static str),
    /// A TCP port on loopback.
    TcpPort(u16),
}

/// Endpoints no policy may make rehearsable: talking to them is not a
/// rehearsal of a command but an act with the host's or the user's full
/// authority. The list and its reasons are the documentation's too
/// (`docs/services.md`).
const NEVER: &[(Never, &str)] = &[
    (
        Never::FileName("docker.sock"),
        "the Docker daemon's socket: whoever talks to it is root on the host (it starts privileged containers with any host path mounted)",
    ),
    (
        Never::FileName("containerd.sock"),
        "containerd's socket: root on the host, as the Docker socket",
    ),
    (
        Never::FileName("podman.sock"),
        "Podman's API socket: the user's containers, and for a rootful Podman root on the host",
    ),
    (
        Never::FileName("dryrun.sock"),
        "dryrun's own daemon socket: a rehearsal could submit, approve or promote runs",
    ),
    (
        Never::FileName("libvirt-sock"),
        "libvirt's socket: virtual machines with the host's devices and disks",
    ),
    (
        Never::FileName("snapd.socket"),
        "snapd's socket: installs and runs software as root",
    ),
    (
        Never::FileName("bus"),
        "a D-Bus bus: starts services, changes systemd units, reads the user's keyring",
    ),
    (
        Never::FileName("system_bus_socket"),
        "the D-Bus system bus: starts services, changes systemd units, talks to polkit",
    ),
    (
        Never::FileNamePrefix("S.gpg-agent"),
        "the GnuPG agent: signs and decrypts with the user's private keys",
    ),
    (
        Never::DirAndFile("ssh-", "agent."),
        "an SSH agent's socket: authenticates as the user anywhere the user's keys open",
    ),
    (
        Never::FileName("ssh-agent.socket"),
        "an SSH agent's socket: authenticates as the user anywhere the user's keys open",
    ),
    (
        Never::FileName("openssh_agent"),
        "an SSH agent's socket: authenticates as the user anywhere the user's keys open",
    ),
    (
        Never::DirAndFile("keyring", ""),
        "the desktop keyring's sockets: the user's stored passwords and SSH keys",
    ),
    (
        Never::DirAndFile("gcr", ""),
        "the desktop keyring's sockets: the user's stored passwords and SSH keys",
    ),
    (
        Never::Below("/run/systemd"),
        "systemd's sockets: units started and stopped, the journal written",
    ),
    (
        Never::Below("/var/run/systemd"),
        "systemd's sockets: units started and stopped, the journal written",
    ),
    (
        Never::Below("/run/dbus"),
        "the D-Bus system bus: starts services, changes systemd units, talks to polkit",
    ),
    (
        Never::Below("/var/run/dbus"),
        "the D-Bus system bus: starts services, changes systemd units, talks to polkit",
    ),
    (
        Never::TcpPort(2375),
        "the Docker daemon's plain TCP port: root on the host",
    ),
    (
        Never::TcpPort(2376),
        "the Docker daemon's TLS port: root on the host",
    ),
];

/// Known paths of the sockets above, compared by inode at connect time: a
/// listed path that is a link or a bind mount of one of them is the same
/// socket under another name.
const NEVER_PATHS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/dryrun/dryrun.sock",
    "/run/dbus/system_bus_socket",
    "/run/systemd/private",
    "/run/snapd.socket",
    "/run/libvirt/libvirt-sock",
];

/// Why `e` is never rehearsable, by its name alone (no I/O).
pub fn never_reason(e: &ServiceEndpoint) -> Option<&'static str> {
    NEVER.iter().find_map(|(n, why)| {
        let hit = match (n, e) {
            (Never::TcpPort(p), ServiceEndpoint::Tcp(a)) => a.port() == *p,
            (Never::FileName(f), ServiceEndpoint::Unix(p)) => {
                p.file_name().is_some_and(|x| x == *f)
            }
            (Never::FileNamePrefix(f), ServiceEndpoint::Unix(p)) => p
                .file_name()
                .is_some_and(|x| x.as_encoded_bytes().starts_with(f.as_bytes())),
            (Never::Below(d), ServiceEndpoint::Unix(p)) => p.starts_with(d),
            (Never::DirAndFile(d, f), ServiceEndpoint::Unix(p)) => {
                let starts = |x: Option<&std::ffi::OsStr>, with: &str| {
                    x.is_some_and(|x| x.as_encoded_bytes().starts_with(with.as_bytes()))
                };
                starts(p.parent().and_then(Path::file_name), d) && starts(p.file_name(), f)
            }
            _ => false,
        };
        hit.then_some(*why)
    })
}

/// Why the socket now at `(dev, ino)` (opened from a listed path) is never
/// rehearsable: it is one of the known dangerous sockets under another
/// name.
pub fn never_by_inode(dev: u64, ino: u64) -> Option<String> {
    never_by_inode_among(NEVER_PATHS, dev, ino)
}

fn never_by_inode_among(paths: &[&str], dev: u64, ino: u64) -> Option<String> {
    paths.iter().find_map(|p| {
        let m = std::fs::metadata(p).ok()?;
        ((m.dev(), m.ino()) == (dev, ino)).then(|| {
            let why = never_reason(&ServiceEndpoint::Unix(Path::new(p).to_path_buf()))
                .unwrap_or("a socket that is never rehearsable");
            format!("it is {p} under another name: {why}")
        })
    })
}

/// The declared services `requested`, each as the system lists it; the
/// first that is not allowed refuses the run with the field that names it
/// and the reason. `workspace`: a Unix socket inside it is refused (the
/// workspace is what the agent writes, so it could put another socket, or
/// a link to one, at that path).
pub fn admit(
    listed: &[ServiceRule],
    requested: &[ServiceEndpoint],
    workspace: &Path,
) -> Result<Vec<ServiceRule>, (String, String)> {
    let mut out = Vec::new();
    for (i, e) in requested.iter().enumerate() {
        let field = format!("intent.network.services[{i}]");
        if let Some(why) = never_reason(e) {
            return Err((field, format!("{e} is never rehearsable: {why}")));
        }
        if let ServiceEndpoint::Unix(p) = e
            && p.starts_with(workspace)
        {
            return Err((
                field,
                format!(
                    "{e} lies inside the workspace {}, which the command under review writes (it could leave another socket, or a link to one, there); run the service with its socket outside the workspace",
                    workspace.display()
                ),
            ));
        }
        match listed.iter().find(|r| &r.endpoint == e) {
            Some(r) => out.push(r.clone()),
            None => {
                return Err((
                    field,
                    format!(
                        "{e} is not a service the system policy lets rehearsals talk to; an administrator lists it under egress.services in a system policy file (/etc/dryrun/policy.d; disposable: true for a throwaway test service), or leave it out and the command cannot reach it"
                    ),
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(s: &str) -> ServiceEndpoint {
        ServiceEndpoint::parse(s).unwrap()
    }

    #[test]
    fn dangerous_sockets_are_never_rehearsable() {
        for s in [
            "/var/run/docker.sock",
            "/run/user/1000/docker.sock",
            "/home/me/.docker/run/docker.sock",
            "/run/containerd/containerd.sock",
            "/run/user/1000/podman/podman.sock",
            "/run/dryrun/dryrun.sock",
            "/run/user/1000/dryrun.sock",
            "/run/user/1000/bus",
            "/run/dbus/system_bus_socket",
            "/run/systemd/private",
            "/run/user/1000/gnupg/S.gpg-agent",
            "/tmp/ssh-XXXXabcd/agent.1234",
            "/run/user/1000/keyring/ssh",
            "/run/user/1000/gcr/ssh",
            "/run/user/1000/openssh_agent",
            "127.0.0.1:2375",
            "[::1]:2376",
        ] {
            assert!(never_reason(&ep(s)).is_some(), "{s}");
        }
        for s in [
            "/run/postgresql/.s.PGSQL.5432",
            "127.0.0.1:5432",
            "/tmp/app.sock",
            "/run/consul/agent.sock",
        ] {
            assert!(never_reason(&ep(s)).is_none(), "{s}");
        }
    }

    #[test]
    fn a_dangerous_socket_under_another_name_is_known_by_its_inode() {
        let d = tempfile::tempdir().unwrap();
        let docker = d.path().join("docker.sock");
        let _l = std::os::unix::net::UnixListener::bind(&docker).unwrap();
        let other = d.path().join("app.sock");
        std::fs::hard_link(&docker, &other).unwrap();
        let m = std::fs::metadata(&other).unwrap();
        let known = [docker.to_str().unwrap()];
        let why = never_by_inode_among(&known, m.dev(), m.ino()).unwrap();
        assert!(
            why.contains("under another name") && why.contains("Docker"),
            "{why}"
        );
        let unrelated = d.path().join("x");
        std::fs::write(&unrelated, b"").unwrap();
        let m = std::fs::metadata(&unrelated).unwrap();
        assert!(never_by_inode_among(&known, m.dev(), m.ino()).is_none());
    }

    #[test]
    fn only_listed_services_are_admitted_with_their_disposability() {
        let listed = vec![
            ServiceRule {
                endpoint: ep("127.0.0.1:5432"),
                disposable: true,
            },
            ServiceRule {
                endpoint: ep("/run/app/app.sock"),
                disposable: false,
            },
        ];
        let ws = Path::new("/home/me/proj");
        let got = admit(
            &listed,
            &[ep("/run/app/app.sock"), ep("127.0.0.1:5432")],
            ws,
        )
        .unwrap();
        assert_eq!((got[0].disposable, got[1].disposable), (false, true));
        let (f, m) = admit(&listed, &[ep("127.0.0.1:5432"), ep("[::1]:5432")], ws).unwrap_err();
        assert_eq!(f, "intent.network.services[1]");
        assert!(m.contains("egress.services"), "{m}");
        let (_, m) = admit(&listed, &[ep("/var/run/docker.sock")], ws).unwrap_err();
        assert!(m.contains("never rehearsable"), "{m}");
        let inside = vec![ServiceRule {
            endpoint: ep("/home/me/proj/.pg/s.sock"),
            disposable: true,
        }];
        let (_, m) = admit(&inside, &[ep("/home/me/proj/.pg/s.sock")], ws).unwrap_err();
        assert!(m.contains("inside the workspace"), "{m}");
    }
}
