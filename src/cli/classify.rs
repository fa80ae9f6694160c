//! `dryrun classify`: a command scored without running it, with the
//! workspace's policy read with this process's own rights.

use std::path::PathBuf;

use super::render;
use super::usage_error;

/// `dryrun classify`: exit 0 when no approval is needed, 3 when it is, 4
/// when the classifier alone blocks, 2 on invalid input.
pub(super) fn classify(
    g: &super::GlobalOpts,
    command: String,
    workspace: Option<PathBuf>,
    json: bool,
    explain: bool,
) -> i32 {
    if command.trim().is_empty() {
        return usage_error("the command to classify is empty");
    }
    let workspace = workspace.or_else(|| std::env::current_dir().ok());
    // The system policy's merge from the cache a run through the same
    // door would use (the in-process engine's state directory, or the
    // caller's cache directory beside a daemon).
    let cache = super::target_of(g, super::door(g)).policy_cache_dir();
    let c =
        match crate::doors::classify::classify_in(&command, workspace.as_deref(), cache.as_deref())
        {
            Ok(c) => c,
            Err(e) => return usage_error(e),
        };
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
