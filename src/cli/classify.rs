//! `dryrun classify`: a command scored without running it, with the
//! workspace's policy read with this process's own rights.

use std::path::PathBuf;

use super::render;
use super::usage_error;

/// `dryrun classify`: exit 0 when no approval is needed, 3 when it is, 4
/// when the classifier alone blocks, 2 on invalid input.
pub(super) fn classify(
    command: String,
    workspace: Option<PathBuf>,
    json: bool,
    explain: bool,
) -> i32 {
    if command.trim().is_empty() {
        return usage_error("the command to classify is empty");
    }
    // The workspace and its policy are read with this process's own rights
    // (a root CLI reads a user's workspace policy as that user).
    let access = match crate::workspace::owner::OwnerSession::start(
        &crate::workspace::owner::Creds::current(),
    ) {
        Ok(a) => a,
        Err(e) => return usage_error(e),
    };
    let resolved = workspace
        .or_else(|| std::env::current_dir().ok())
        .and_then(|w| access.resolve(&w).ok());
    let ws_policy = match &resolved {
        Some(r) => {
            let owner = match crate::workspace::owner::OwnerSession::for_owner(&r.identity) {
                Ok(o) => o,
                Err(e) => return usage_error(e),
            };
            match crate::policy::read_workspace_policy(&owner, &r.canonical, &r.identity) {
                Ok(p) => p,
                Err(e) => return usage_error(e),
            }
        }
        None => None,
    };
    let ws = resolved.map(|r| r.canonical);
    let policy = match crate::policy::Policy::load(&crate::engine::system_policy_dir(), ws_policy) {
        Ok(p) => p,
        Err(e) => return usage_error(e),
    };
    let c = crate::classify::classify(
        &command,
        &policy,
        &crate::classify::Options {
            workspace: ws,
            is_step: false,
        },
    );
    if json && explain {
        let mut v = serde_json::to_value(&c).expect("serializes");
        v["explain"] = serde_json::to_value(c.explain()).expect("serializes");
        println!("{v}");
    } else if json {
        println!("{}", serde_json::to_string(&c).expect("serializes"));
    } else {
        render::print_classification(&command, &c);
        if explain {
            render::print_explanation(&c);
        }
    }
    c.decision.exit_code()
}
