//! The fleet policy layer. On a host that is part of a fleet
//! (`crate::fleet`, docs/fleet.md), the system policy is the fleet's: a
//! versioned text in the fleet store that every host loads. It takes the
//! place of this host's own system files (`/etc/dryrun/policy.d`), which
//! may then only tighten it, with the same rules as a workspace's policy.
//! Set by the daemon's fleet task when a version is loaded; process-wide,
//! as the system policy directory is. Unset (every other process), nothing
//! changes.

use std::sync::{Arc, RwLock};

use super::{Policy, PolicyError};

/// What the fleet says the system policy is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetLayer {
    /// Version `version` of the fleet policy, its text.
    Version { version: i64, text: Arc<str> },
    /// The newest version this host can load is older than the fleet's
    /// minimum: nothing is judged (every submission is refused, naming why).
    BelowMinimum { have: Option<i64>, minimum: i64 },
}

static LAYER: RwLock<Option<Arc<FleetLayer>>> = RwLock::new(None);

/// Install (or with `None`, remove) the fleet layer for this process.
pub fn set(layer: Option<FleetLayer>) {
    *LAYER.write().unwrap_or_else(|p| p.into_inner()) = layer.map(Arc::new);
}

pub(super) fn current() -> Option<Arc<FleetLayer>> {
    LAYER.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The name a fleet policy version goes by in a policy's sources.
pub fn layer_name(version: i64) -> String {
    format!("fleet policy v{version}")
}

/// Can this binary use `text` as the fleet policy (a system layer over the
/// shipped default)? The error names what it cannot.
pub fn check(version: i64, text: &str) -> Result<(), PolicyError> {
    let mut files = Policy::shipped_layers();
    files.push((layer_name(version), text.to_string()));
    Policy::layered(&files, None).map(drop)
}

/// The refusal while the host is below the fleet's minimum.
pub(super) fn below_minimum(have: Option<i64>, minimum: i64) -> PolicyError {
    PolicyError::Unreadable {
        file: "the fleet policy".into(),
        message: format!(
            "this host can load {} but the fleet's minimum is version {minimum}: nothing is judged until it loads that version (upgrade dryrun on this host, or publish a version it can load)",
            match have {
                Some(v) => format!("version {v}"),
                None => "no version".into(),
            }
        ),
    }
}
