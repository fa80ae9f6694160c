//! Landlock for the command: reads anywhere in the (already minimal) root,
//! writes only beneath the workspace and /tmp, and on newer ABIs no TCP bind or
//! connect, no abstract unix sockets or signals leaving the sandbox.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use std::path::Path;

/// The ABI this build knows best.
pub const NEWEST_KNOWN_ABI: u32 = 7;

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("Landlock enforced only {status:?} at ABI {abi}, and degraded mode was not allowed")]
    NotEnforced { status: String, abi: u32 },
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

/// Restrict the calling thread (and everything it execs). `kernel_abi` comes
/// from [`super::probe`]. Returns the effective status for the run record.
pub fn apply_landlock_on_current_thread(
    kernel_abi: u32,
    workspace: &Path,
    allow_degraded: bool,
    network_host: bool,
    stub_calls: Option<&Path>,
) -> Result<String, LandlockError> {
    let abi = abi_from(kernel_abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?;
    if kernel_abi >= 4 && !network_host {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if kernel_abi >= 6 {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    }
    let status = ruleset
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(
            [workspace, Path::new("/tmp")],
            AccessFs::from_all(abi),
        ))?
        .add_rules(path_beneath_rules(
            ["/dev/null", "/dev/zero", "/dev/full"],
            AccessFs::from_file(abi),
        ))?
        .add_rules(path_beneath_rules(stub_calls, AccessFs::from_all(abi)))?
        .restrict_self()?;
    let s = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    };
    if status.ruleset == RulesetStatus::NotEnforced && !allow_degraded {
        return Err(LandlockError::NotEnforced {
            status: s.into(),
            abi: kernel_abi,
        });
    }
    Ok(s.to_string())
}
