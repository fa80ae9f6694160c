//! A command scored without running it, the same way for every door that
//! offers it (`dryrun classify`, MCP's `classify`): the workspace and its
//! policy read with this process's own rights (a root CLI reads a user's
//! workspace policy as that user), and the system policy's merge taken
//! from the cache a run of this process would use (`policy::cache`), so a
//! classification costs what a run's does, not a parse of the whole YAML
//! default (about 10 ms).

use std::path::{Path, PathBuf};

use crate::classify::Classification;

/// Classify `command` as a run in `workspace` would be (`None`: judged
/// without a workspace: no workspace policy, every path outside).
/// `cache_dir`: where the system policy's merge is kept
/// ([`super::Target::policy_cache_dir`]). The error names what could not
/// be read.
pub fn classify_in(
    command: &str,
    workspace: Option<&Path>,
    cache_dir: Option<&Path>,
) -> Result<Classification, String> {
    use crate::workspace::owner::{Creds, OwnerSession};
    let access = OwnerSession::start(&Creds::current()).map_err(|e| e.to_string())?;
    let resolved = workspace.and_then(|w| access.resolve(w).ok());
    let ws_policy = match &resolved {
        Some(r) => {
            let owner = OwnerSession::for_owner(&r.identity).map_err(|e| e.to_string())?;
            crate::policy::read_workspace_policy(&owner, &r.canonical, &r.identity)
                .map_err(|e| e.to_string())?
        }
        None => None,
    };
    let ws: Option<PathBuf> = resolved.map(|r| r.canonical);
    let policy = crate::policy::Policy::load_cached(
        &crate::engine::system_policy_dir(),
        ws_policy,
        cache_dir,
    )
    .map_err(|e| e.to_string())?;
    Ok(crate::classify::classify(
        command,
        &policy,
        &crate::classify::Options {
            workspace: ws,
            is_step: false,
        },
    ))
}
