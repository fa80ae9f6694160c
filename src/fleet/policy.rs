//! The fleet policy on a host: the newest version in the store that this
//! binary can load (at or above the fleet's minimum), kept in the state
//! directory (`fleet/policy.json`) so a host that starts without the store
//! judges with the last version it had, and installed as the system layer
//! (`crate::policy::fleet`). A host whose usable version is older than the
//! fleet's minimum does not start; one that falls below it while running
//! (a new minimum it cannot load) judges nothing until it can.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use super::FleetError;
use crate::policy::fleet::{self as layer, FleetLayer};

const CACHE_FILE: &str = "policy.json";

/// A version as cached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub version: i64,
    pub hash: String,
    pub text: String,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    current: Option<Version>,
    /// The fleet's minimum, as last read.
    minimum: i64,
}

pub struct HostPolicy {
    path: PathBuf,
    state: Mutex<State>,
}

/// BLAKE3 of a policy text, as published.
pub fn text_hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

impl HostPolicy {
    /// What `dir` (the state directory's `fleet/`) cached.
    pub fn new(dir: &Path) -> HostPolicy {
        let path = dir.join(CACHE_FILE);
        let state = crate::state_file::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<State>(&b).ok())
            .filter(|s| {
                // A cache edited by hand (its text not its hash) is not used.
                s.current
                    .as_ref()
                    .is_none_or(|v| text_hash(&v.text) == v.hash)
            })
            .unwrap_or_default();
        HostPolicy {
            path,
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (version, hash) in use, if any.
    pub fn current_version(&self) -> (Option<i64>, Option<String>) {
        let s = self.lock();
        (
            s.current.as_ref().map(|v| v.version),
            s.current.as_ref().map(|v| v.hash.clone()),
        )
    }

    /// Read the store: the minimum, and the newest version this binary can
    /// load (a newer one it cannot is skipped, with a warning). Cached.
    pub async fn refresh(&self, c: &Client) -> Result<(), FleetError> {
        let minimum: i64 = c
            .query_one("SELECT min_policy_version FROM dryrun.settings", &[])
            .await?
            .get(0);
        let have = self.lock().current.as_ref().map_or(0, |v| v.version);
        let rows = c
            .query(
                "SELECT version, text, hash FROM dryrun.policies WHERE version > $1 ORDER BY version DESC",
                &[&have],
            )
            .await?;
        let mut newer = None;
        for row in rows {
            let v = Version {
                version: row.get(0),
                text: row.get(1),
                hash: row.get(2),
            };
            if text_hash(&v.text) != v.hash {
                tracing::warn!(
                    version = v.version,
                    "fleet policy's text does not match its hash; skipped"
                );
                continue;
            }
            match layer::check(v.version, &v.text) {
                Ok(()) => {
                    newer = Some(v);
                    break;
                }
                Err(e) => tracing::warn!(
                    version = v.version,
                    "fleet policy version this host cannot load: {e}"
                ),
            }
        }
        let snapshot = {
            let mut s = self.lock();
            s.minimum = minimum;
            if let Some(v) = newer {
                tracing::info!(version = v.version, "fleet policy loaded");
                s.current = Some(v);
            }
            s.clone()
        };
        let bytes = serde_json::to_vec(&snapshot).expect("serializes");
        let tmp = self.path.with_extension("json.partial");
        std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &self.path))?;
        Ok(())
    }

    /// Refuse to start below the fleet's minimum.
    pub fn require_loaded(&self) -> Result<(), FleetError> {
        let s = self.lock();
        let have = s.current.as_ref().map(|v| v.version);
        if s.minimum > 0 && have.is_none_or(|v| v < s.minimum) {
            return Err(FleetError::Policy(format!(
                "this host can load {} but the fleet's minimum is version {}; it does not start below it (upgrade dryrun here, or publish a version it can load)",
                have.map_or("no version".into(), |v| format!("version {v}")),
                s.minimum
            )));
        }
        Ok(())
    }

    /// Make the version in use this process's system policy layer (or,
    /// below the minimum, refuse every judgement).
    pub fn install(&self) {
        let s = self.lock();
        let have = s.current.as_ref().map(|v| v.version);
        let l = if s.minimum > 0 && have.is_none_or(|v| v < s.minimum) {
            Some(FleetLayer::BelowMinimum {
                have,
                minimum: s.minimum,
            })
        } else {
            s.current.as_ref().map(|v| FleetLayer::Version {
                version: v.version,
                text: v.text.as_str().into(),
            })
        };
        layer::set(l);
    }
}
