//! A private PostgreSQL cluster for the fleet tests and benchmark: `initdb`
//! into a temporary directory and `pg_ctl` on a loopback port and a Unix
//! socket of its own, as the `postgres` account (the server refuses to run
//! as root); no system service. Roles log in with passwords over TCP
//! (scram-sha-256); the owner over the socket. `tests/run.sh` installs the
//! server (Debian's `postgresql`).
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

pub const OWNER: &str = "dryrun_owner";

pub struct Pg {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// Where the server listens besides loopback (a benchmark's veth).
    pub listen: String,
    bin: PathBuf,
}

/// The newest installed server's binaries (`/usr/lib/postgresql/N/bin`).
pub fn pg_bin() -> Option<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists())
        .collect();
    v.sort_by_key(|p| {
        p.parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    v.pop()
}

/// Is the server installed? (A failure, not a skip, when tools are pinned.)
pub fn require_postgres() -> bool {
    if pg_bin().is_none() {
        tool_missing("the PostgreSQL server (initdb, pg_ctl)", "postgresql");
        return false;
    }
    require_tool("psql", "postgresql-client")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn postgres_ids() -> (u32, u32) {
    let u = nix::unistd::User::from_name("postgres")
        .unwrap()
        .expect("the postgres account (made by the postgresql package)");
    (u.uid.as_raw(), u.gid.as_raw())
}

impl Pg {
    /// A new cluster with database `dryrun`, schema migrated by `dryrun
    /// fleet migrate`, listening on 127.0.0.1 (and `extra_listen`).
    pub fn start(extra_listen: Option<&str>) -> Pg {
        Self::start_with(extra_listen, None)
    }

    /// [`Pg::start`] serving TLS with `tls` (certificate, key: PEM), and
    /// TCP connections only over TLS.
    pub fn start_with(extra_listen: Option<&str>, tls: Option<(&Path, &Path)>) -> Pg {
        let pgbin = pg_bin().expect("postgresql installed");
        let dir = tempfile::Builder::new()
            .prefix("dryrun-pg-")
            .tempdir_in("/tmp")
            .unwrap();
        let (uid, gid) = postgres_ids();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        nix::unistd::chown(
            dir.path(),
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "owner-secret\n").unwrap();
        nix::unistd::chown(&pw, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
        let listen = match extra_listen {
            Some(a) => format!("127.0.0.1,{a}"),
            None => "127.0.0.1".into(),
        };
        let pg = Pg {
            port: free_port(),
            listen,
            bin: pgbin,
            dir,
        };
        let out = pg
            .as_postgres(&pg.bin.join("initdb"))
            .args(["-D"])
            .arg(pg.data())
            .args([
                "-U",
                OWNER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pw.display()))
            .args(["--no-sync", "-E", "UTF8", "--locale=C"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Loopback and the benchmark's addresses, with passwords.
        let hba = pg.data().join("pg_hba.conf");
        let mut text = std::fs::read_to_string(&hba).unwrap();
        if let Some((cert, key)) = tls {
            // Only TLS over TCP: the loopback lines initdb wrote go.
            text = text
                .lines()
                .filter(|l| !l.starts_with("host "))
                .map(|l| format!("{l}\n"))
                .collect();
            text.push_str("hostssl all all 0.0.0.0/0 scram-sha-256\n");
            for (from, name) in [(cert, "server.crt"), (key, "server.key")] {
                let to = pg.data().join(name);
                std::fs::copy(from, &to).unwrap();
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
                nix::unistd::chown(&to, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
            }
            let conf = pg.data().join("postgresql.conf");
            let mut c = std::fs::read_to_string(&conf).unwrap();
            c.push_str("ssl = on\n");
            std::fs::write(&conf, c).unwrap();
        } else {
            text.push_str("host all all 0.0.0.0/0 scram-sha-256\n");
        }
        std::fs::write(&hba, text).unwrap();
        pg.start_server();
        pg.psql("postgres", "CREATE DATABASE dryrun");
        let owner = match tls {
            // Over the socket (no TLS there).
            Some(_) => format!(
                "host={} port={} user={OWNER} dbname=dryrun",
                pg.dir.path().display(),
                pg.port
            ),
            None => pg.url(OWNER, "owner-secret"),
        };
        let out = Command::new(bin())
            .args(["fleet", "--fleet", &owner, "migrate"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "dryrun fleet migrate: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    fn as_postgres(&self, program: &Path) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c.current_dir(self.dir.path());
        c
    }

    /// (Re)start the server on the same data, port and socket.
    pub fn start_server(&self) {
        let out = self
            .as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.log())
            .arg("-o")
            .arg(format!(
                "-p {} -k {} -c listen_addresses={} -c max_connections=200",
                self.port,
                self.dir.path().display(),
                self.listen
            ))
            .args(["-w", "-t", "60", "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
    }

    /// Stop the server the way a crash does (`-m immediate`: no checkpoint,
    /// connections cut; recovery from the WAL at the next start).
    pub fn kill(&self) {
        let _ = self
            .as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }

    /// A connection string for `role` with `password`.
    pub fn url(&self, role: &str, password: &str) -> String {
        format!(
            "postgresql://{role}:{password}@127.0.0.1:{}/dryrun",
            self.port
        )
    }

    /// A connection string for `role` whose password comes from elsewhere.
    pub fn url_no_password(&self, role: &str, host: &str) -> String {
        format!("postgresql://{role}@{host}:{}/dryrun", self.port)
    }

    /// SQL as the owner (over the socket); the output, tuples only.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new("psql")
            .args(["-h"])
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string(), "-U", OWNER, "-d", db])
            .args(["-v", "ON_ERROR_STOP=1", "-tAq", "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn sql(&self, sql: &str) -> String {
        self.psql("dryrun", sql)
    }

    /// A login role in `group` (dryrun_host, dryrun_reviewer,
    /// dryrun_admin) with password `pw-ROLE`.
    pub fn add_role(&self, role: &str, group: &str) {
        self.sql(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}' IN ROLE {group}"
        ));
    }

    /// `role`'s connection string with its password.
    pub fn role_url(&self, role: &str) -> String {
        self.url(role, &format!("pw-{role}"))
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fleet config for a host daemon: its password file (mode 0600) and
/// the people. Returns the config's path (kept in `dir`).
pub fn host_config(dir: &Path, role: &str, people: &str) -> PathBuf {
    let pw = dir.join(format!("{role}.password"));
    std::fs::write(&pw, format!("pw-{role}\n")).unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = dir.join(format!("{role}.fleet.yaml"));
    std::fs::write(
        &cfg,
        format!("password_file: {}\npeople:\n{people}", pw.display()),
    )
    .unwrap();
    cfg
}
