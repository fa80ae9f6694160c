//! The fleet config (`/etc/dryrun/fleet.yaml`, or `dryrun daemon
//! --fleet-config FILE`): where the fleet store is, the password file, the
//! TLS root, and the people: which PostgreSQL roles and which Unix
//! accounts are one person. Validated once into a [`FleetSpec`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::FleetError;

/// The system's fleet config, when `--fleet-config` names none.
pub const FLEET_CONFIG: &str = "/etc/dryrun/fleet.yaml";
/// The largest config or password file read.
const FILE_MAX: u64 = 256 << 10;

/// The file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfigFile {
    /// A PostgreSQL connection string (URL or `key=value` form).
    #[serde(default)]
    pub url: Option<String>,
    /// The password of the URL's role, in a file only the daemon's user
    /// may read.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// A PEM file of the certificate authorities a TLS connection trusts
    /// (besides the system's), for `sslmode=require`.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// People by name: their reviewer roles and their accounts.
    #[serde(default)]
    pub people: BTreeMap<String, PersonConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonConfig {
    /// PostgreSQL roles this person logs in to the fleet store as.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Unix account names (on any host of the fleet) this person, or an
    /// agent acting for them, submits runs as.
    #[serde(default)]
    pub accounts: Vec<String>,
}

/// The config, validated.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub url: String,
    pub password: Option<String>,
    pub tls_ca: Option<Vec<u8>>,
    pub people: People,
    /// BLAKE3 of the config file's text (published with the host).
    pub config_hash: String,
}

/// Roles and accounts to people.
#[derive(Debug, Clone, Default)]
pub struct People {
    by_role: BTreeMap<String, String>,
    by_account: BTreeMap<String, String>,
    roles_of: BTreeMap<String, Vec<String>>,
}

/// Who submitted a run, as the fleet sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitter {
    pub uid: Option<u32>,
    pub name: Option<String>,
    /// The person (or `uid N on HOST` / `NAME on HOST` for an account the
    /// config names no person for: someone no reviewer role is).
    pub person: String,
    /// The person's reviewer roles: none of them may decide the run.
    pub roles: Vec<String>,
}

impl People {
    pub fn from_config(people: &BTreeMap<String, PersonConfig>) -> Result<People, FleetError> {
        let mut p = People::default();
        for (name, c) in people {
            for r in &c.roles {
                if let Some(other) = p.by_role.insert(r.clone(), name.clone()) {
                    return Err(FleetError::Config(format!(
                        "people: role {r:?} is both {other:?}'s and {name:?}'s; a role is one person"
                    )));
                }
            }
            for a in &c.accounts {
                if let Some(other) = p.by_account.insert(a.clone(), name.clone()) {
                    return Err(FleetError::Config(format!(
                        "people: account {a:?} is both {other:?}'s and {name:?}'s; an account is one person"
                    )));
                }
            }
            p.roles_of.insert(name.clone(), c.roles.clone());
        }
        Ok(p)
    }

    /// The person a PostgreSQL role is, if the config names one.
    pub fn person_of_role(&self, role: &str) -> Option<&str> {
        self.by_role.get(role).map(String::as_str)
    }

    /// The submitter of a run with `uid` on host `host`.
    pub fn submitter(&self, uid: Option<u32>, host: &str) -> Submitter {
        let name = uid.and_then(|u| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u))
                .ok()
                .flatten()
                .map(|u| u.name)
        });
        let person = name.as_ref().and_then(|n| self.by_account.get(n)).cloned();
        let roles = person
            .as_ref()
            .and_then(|p| self.roles_of.get(p))
            .cloned()
            .unwrap_or_default();
        let person = person.unwrap_or_else(|| match (&name, uid) {
            (Some(n), _) => format!("account {n} on {host}"),
            (None, Some(u)) => format!("uid {u} on {host}"),
            (None, None) => format!("an unknown submitter on {host}"),
        });
        Submitter {
            uid,
            name,
            person,
            roles,
        }
    }
}

impl FleetSpec {
    /// Read the config at `path` (absent: only `url` from the command line),
    /// with `url` from the command line taking the config's place.
    pub fn load(path: Option<&Path>, url: Option<&str>) -> Result<FleetSpec, FleetError> {
        let (text, file) = match path {
            Some(p) => {
                let t = read_private(p, false)?;
                let f: FleetConfigFile = serde_yaml::from_str(&t).map_err(|e| {
                    FleetError::Config(format!(
                        "{}: {}",
                        p.display(),
                        crate::errtext::content_free(&e.to_string())
                    ))
                })?;
                (t, f)
            }
            None => (String::new(), FleetConfigFile::default()),
        };
        let url = url
            .map(str::to_string)
            .or(file.url.clone())
            .ok_or_else(|| {
                FleetError::Config(
                    "no fleet store named: give --fleet URL or `url:` in the fleet config".into(),
                )
            })?;
        let password = match &file.password_file {
            Some(p) => Some(
                read_private(p, true)?
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
            ),
            None => None,
        };
        let tls_ca = match &file.tls_ca_file {
            Some(p) => Some(
                std::fs::read(p)
                    .map_err(|e| FleetError::Config(format!("tls_ca_file {}: {e}", p.display())))?,
            ),
            None => None,
        };
        Ok(FleetSpec {
            url,
            password,
            tls_ca,
            people: People::from_config(&file.people)?,
            config_hash: blake3::hash(text.as_bytes()).to_hex().to_string(),
        })
    }

    /// A spec for a command-line client: the URL alone (its password in
    /// the URL or `PGPASSWORD`; the TLS roots it trusts besides the
    /// system's in the file `PGSSLROOTCERT` names, as for libpq).
    pub fn client(url: &str) -> FleetSpec {
        FleetSpec {
            url: url.to_string(),
            password: std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()),
            tls_ca: std::env::var_os("PGSSLROOTCERT").and_then(|p| std::fs::read(p).ok()),
            people: People::default(),
            config_hash: String::new(),
        }
    }
}

/// A config or password file: a regular file, not through a link, of at
/// most [`FILE_MAX`]; a password file must be the daemon's own and
/// readable by no one else.
fn read_private(path: &Path, secret: bool) -> Result<String, FleetError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let what = if secret {
        "password_file"
    } else {
        "fleet config"
    };
    let f = crate::state_file::open_read(path)
        .map_err(|e| FleetError::Config(format!("{what} {}: {e}", path.display())))?;
    let m = f
        .metadata()
        .map_err(|e| FleetError::Config(format!("{what} {}: {e}", path.display())))?;
    let me = nix::unistd::geteuid().as_raw();
    if secret && (m.uid() != me || m.mode() & 0o077 != 0) {
        return Err(FleetError::Config(format!(
            "password_file {} must belong to the daemon's user (uid {me}) and be readable by it alone (mode 0600 or 0400); it is uid {} mode {:o}",
            path.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    let mut text = String::new();
    f.take(FILE_MAX)
        .read_to_string(&mut text)
        .map_err(|e| FleetError::Config(format!("{what} {}: {e}", path.display())))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_and_an_account_are_one_person_each() {
        let cfg: FleetConfigFile = serde_yaml::from_str(
            "people:\n  alice: {roles: [alice_rev], accounts: [root]}\n  bob: {roles: [bob_rev]}\n",
        )
        .unwrap();
        let p = People::from_config(&cfg.people).unwrap();
        assert_eq!(p.person_of_role("alice_rev"), Some("alice"));
        assert_eq!(p.person_of_role("root"), None);
        let s = p.submitter(Some(0), "h1");
        assert_eq!(
            (s.person.as_str(), s.roles.clone()),
            ("alice", vec!["alice_rev".to_string()])
        );
        let s = p.submitter(Some(4_000_000_000), "h1");
        assert_eq!(s.person, "uid 4000000000 on h1");
        let dup: FleetConfigFile =
            serde_yaml::from_str("people:\n  a: {roles: [x]}\n  b: {roles: [x]}\n").unwrap();
        assert!(People::from_config(&dup.people).is_err());
    }
}
