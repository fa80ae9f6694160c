//! Landlock for the command: reads anywhere in the (already minimal) root,
//! writes only beneath the workspace, /tmp and the view's other throwaway
//! layers (the home, /var/tmp), and on newer ABIs no TCP bind or
//! connect (but connect to the egress proxy's port, in a run with a network
//! allowlist, and to the declared TCP services' ports), no abstract unix
//! sockets or signals leaving the sandbox.
//!
//! The command applies the ruleset (X5) and reports what `restrict_self`
//! returned ([`LandlockOutcome`]) to the sandbox's init, which checks it
//! against the promise ([`check_promise`]) before it lets the command exec
//! and records it.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use std::path::Path;

/// The ABI this build knows best.
pub const NEWEST_KNOWN_ABI: u32 = 7;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LandlockError {
    #[error("Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error(
        "Landlock was {status} on the command at ABI {abi}, below the promised ABI {promised} fully enforced, and degraded mode was not allowed (--allow-degraded-sandbox)"
    )]
    NotEnforced {
        status: Enforcement,
        abi: u32,
        promised: u32,
    },
}

/// How much of the ruleset the kernel enforced (`RulesetStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Enforcement {
    Not = 0,
    Partially = 1,
    Fully = 2,
}

impl Enforcement {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Enforcement::Fully => "fully enforced",
            Enforcement::Partially => "partially enforced",
            Enforcement::Not => "not enforced",
        }
    }
    pub(crate) fn to_byte(self) -> u8 {
        self as u8
    }
    pub(crate) fn from_byte(b: u8) -> Option<Enforcement> {
        match b {
            0 => Some(Enforcement::Not),
            1 => Some(Enforcement::Partially),
            2 => Some(Enforcement::Fully),
            _ => None,
        }
    }
}

impl std::fmt::Display for Enforcement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `restrict_self` reported for the command: the enforcement and the
/// ABI the ruleset was enforced at (0 when nothing was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LandlockOutcome {
    pub status: Enforcement,
    pub abi: u32,
}

impl LandlockOutcome {
    /// Landlock was not applied at all (the kernel has none: degraded mode).
    pub(super) const NONE: LandlockOutcome = LandlockOutcome {
        status: Enforcement::Not,
        abi: 0,
    };

    /// The weaker of two outcomes (steps of one run are judged together).
    pub(super) fn weakest(self, other: LandlockOutcome) -> LandlockOutcome {
        if (other.status, other.abi) < (self.status, self.abi) {
            other
        } else {
            self
        }
    }

    /// The record's `landlock_status` text.
    pub(super) fn describe(self) -> String {
        if self.abi == 0 {
            return "not available (degraded mode)".into();
        }
        format!("ABI {} {} on the command", self.abi, self.status)
    }
}

fn abi_from(v: u32) -> ABI {
    match v.min(NEWEST_KNOWN_ABI) {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

fn abi_number(abi: ABI) -> u32 {
    match abi {
        ABI::Unsupported => 0,
        ABI::V1 => 1,
        ABI::V2 => 2,
        ABI::V3 => 3,
        ABI::V4 => 4,
        ABI::V5 => 5,
        ABI::V6 => 6,
        _ => NEWEST_KNOWN_ABI,
    }
}

/// The ABI a restriction was enforced at: the ABI the ruleset was built for,
/// capped by what the crate found the kernel to offer.
fn enforced_abi(requested: u32, status: &landlock::RestrictionStatus) -> u32 {
    if status.ruleset == RulesetStatus::NotEnforced {
        return 0;
    }
    match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => requested.min(abi_number(effective_abi)),
        _ => 0,
    }
}

/// Restrict the calling thread (and everything it execs). `kernel_abi` comes
/// from [`super::probe`]. Returns what `restrict_self` reported; whether
/// that is enough is [`check_promise`]'s decision.
pub(super) fn apply_landlock_on_current_thread(
    kernel_abi: u32,
    workspace: &Path,
    network_host: bool,
    egress_port: Option<u16>,
    service_ports: &[u16],
    stub_calls: Option<&Path>,
    throwaway: &[std::path::PathBuf],
) -> Result<LandlockOutcome, LandlockError> {
    let requested = kernel_abi.min(NEWEST_KNOWN_ABI);
    let abi = abi_from(requested);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?;
    if kernel_abi >= 4 && !network_host {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if kernel_abi >= 6 {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    }
    let mut created = ruleset.create()?;
    if let Some(port) = egress_port
        && kernel_abi >= 4
        && !network_host
    {
        // The egress proxy's listener (the only TCP port anything listens
        // on in the sandbox's loopback-only namespace).
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    if kernel_abi >= 4 && !network_host {
        // The declared services' listeners on the sandbox's own loopback
        // (its namespace has nothing else, so a port is the service).
        for port in service_ports {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
    }
    let status = created
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(
            [workspace, Path::new("/tmp")]
                .into_iter()
                .chain(throwaway.iter().map(|p| p.as_path())),
            AccessFs::from_all(abi),
        ))?
        .add_rules(path_beneath_rules(
            ["/dev/null", "/dev/zero", "/dev/full"],
            AccessFs::from_file(abi),
        ))?
        // The sandbox's own shared memory and pseudo-terminals (`mounts::build_dev`).
        .add_rules(path_beneath_rules(["/dev/shm"], AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(["/dev/pts"], AccessFs::from_file(abi)))?
        .add_rules(path_beneath_rules(stub_calls, AccessFs::from_all(abi)))?
        .restrict_self()?;
    let enforcement = match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Fully,
        RulesetStatus::PartiallyEnforced => Enforcement::Partially,
        RulesetStatus::NotEnforced => Enforcement::Not,
    };
    Ok(LandlockOutcome {
        status: enforcement,
        abi: enforced_abi(requested, &status),
    })
}

/// The promise: the ruleset fully enforced at `promised` (the kernel's ABI,
/// capped at [`NEWEST_KNOWN_ABI`]), or degraded mode allowed.
pub(super) fn check_promise(
    outcome: LandlockOutcome,
    promised: u32,
    allow_degraded: bool,
) -> Result<(), LandlockError> {
    let promised = promised.min(NEWEST_KNOWN_ABI);
    if allow_degraded || (outcome.status == Enforcement::Fully && outcome.abi >= promised) {
        return Ok(());
    }
    Err(LandlockError::NotEnforced {
        status: outcome.status,
        abi: outcome.abi,
        promised,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: Enforcement, abi: u32) -> LandlockOutcome {
        LandlockOutcome { status, abi }
    }

    #[test]
    fn only_the_promised_abi_fully_enforced_passes_without_degraded_mode() {
        assert!(check_promise(outcome(Enforcement::Fully, 7), 7, false).is_ok());
        assert!(check_promise(outcome(Enforcement::Fully, 7), 9, false).is_ok());
        let e = check_promise(outcome(Enforcement::Partially, 7), 7, false).unwrap_err();
        assert!(e.to_string().contains("partially enforced"), "{e}");
        assert!(check_promise(outcome(Enforcement::Fully, 5), 7, false).is_err());
        assert!(check_promise(LandlockOutcome::NONE, 7, false).is_err());
        assert!(check_promise(LandlockOutcome::NONE, 7, true).is_ok());
    }

    #[test]
    fn the_weakest_outcome_of_a_run_is_recorded() {
        let full = outcome(Enforcement::Fully, 7);
        let partial = outcome(Enforcement::Partially, 7);
        assert_eq!(full.weakest(partial), partial);
        assert_eq!(partial.weakest(full), partial);
        assert_eq!(full.weakest(LandlockOutcome::NONE), LandlockOutcome::NONE);
        assert_eq!(full.describe(), "ABI 7 fully enforced on the command");
        assert_eq!(
            LandlockOutcome::NONE.describe(),
            "not available (degraded mode)"
        );
    }

    #[test]
    fn enforcement_survives_the_handshake_byte() {
        for e in [Enforcement::Not, Enforcement::Partially, Enforcement::Fully] {
            assert_eq!(Enforcement::from_byte(e.to_byte()), Some(e));
        }
        assert_eq!(Enforcement::from_byte(9), None);
    }
}
