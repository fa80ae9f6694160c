//! Reading the call records back: the sandbox's init, after the command's
//! processes are all dead, turns `/.dryrun/calls/` into would-be actions.

use std::io::Read;
use std::path::Path;

use crate::sandbox::spec::StubPlan;

use super::*;

/// The would-be actions the stubs recorded, in call order, and how many
/// records were not kept: unreadable, inconsistent with the run's table
/// (see [`record_is_consistent`]), or past [`MAX_ACTIONS`].
pub(crate) fn collect_calls(plan: &StubPlan) -> (Vec<WouldBeAction>, usize) {
    let Ok(rd) = std::fs::read_dir(CALLS_DIR) else {
        return (Vec::new(), 0);
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    if names.is_empty() {
        return (Vec::new(), 0);
    }
    names.sort();
    // Parsed only when there is a record to check against it. A table
    // that does not parse again keeps none of them.
    let Ok(table) = plan.table() else {
        return (Vec::new(), names.len());
    };
    let mut out = Vec::new();
    let mut dropped = 0;
    for n in names {
        if out.len() >= MAX_ACTIONS {
            dropped += 1;
            continue;
        }
        // The command owns this directory: read regular files only, never
        // through a symlink, and bounded. Anything else named like a record
        // counts as one not kept.
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(Path::new(CALLS_DIR).join(&n))
        else {
            dropped += 1;
            continue;
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            dropped += 1;
            continue;
        }
        let mut text = Vec::new();
        if f.take(RECORD_MAX_BYTES).read_to_end(&mut text).is_err() {
            dropped += 1;
            continue;
        }
        match serde_json::from_slice::<WouldBeAction>(&text) {
            Ok(a) if record_is_consistent(&a, &table) => out.push(a),
            _ => dropped += 1,
        }
    }
    (out, dropped)
}
