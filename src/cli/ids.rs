//! Run ids as people type them: a whole id, a unique prefix of one, or
//! `last` (the newest run the caller sees). Resolved against the runs the
//! caller may list, through the same door as the request that follows.

use super::{EXIT_INVALID, output, send};
use crate::engine::is_whole_run_id;
use crate::request::door::Door;
use crate::request::{LIST_MAX, List, RunId};

/// The word for the newest run.
const LAST: &str = "last";

/// The run `text` names; on failure the error is printed (exit 2).
pub(super) fn resolve_run_id(door: &Door, text: &str) -> Result<RunId, i32> {
    // A whole id the engine generates is used as it is, without listing.
    if text != LAST && is_whole_run_id(text) {
        return RunId::parse(text).map_err(|e| output::error(e.code, &e.message, EXIT_INVALID));
    }
    if text != LAST {
        RunId::parse(text).map_err(|e| output::error(e.code, &e.message, EXIT_INVALID))?;
    }
    let limit = if text == LAST { 1 } else { LIST_MAX };
    let runs = send(
        door,
        &List {
            state: None,
            limit: Some(limit),
        },
    )?
    .runs;
    if text == LAST {
        return match runs.first() {
            Some(r) => {
                RunId::parse(&r.run_id).map_err(|e| output::error(e.code, &e.message, EXIT_INVALID))
            }
            None => Err(output::error(
                "no_such_run",
                "`last`: there are no runs yet",
                EXIT_INVALID,
            )),
        };
    }
    let matching: Vec<&str> = runs
        .iter()
        .map(|r| r.run_id.as_str())
        .filter(|id| id.starts_with(text))
        .collect();
    match matching.as_slice() {
        [] => Err(output::error(
            "no_such_run",
            &format!("no run id starts with {text:?}"),
            EXIT_INVALID,
        )),
        [one] => RunId::parse(one).map_err(|e| output::error(e.code, &e.message, EXIT_INVALID)),
        many if many.contains(&text) => {
            RunId::parse(text).map_err(|e| output::error(e.code, &e.message, EXIT_INVALID))
        }
        many => Err(output::error(
            "ambiguous_run_id",
            &format!(
                "{text:?} is the start of {} run ids ({}{}); give more of the id",
                many.len(),
                many.iter().take(5).copied().collect::<Vec<_>>().join(", "),
                if many.len() > 5 { ", ..." } else { "" }
            ),
            EXIT_INVALID,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_ids_are_told_from_prefixes() {
        assert!(is_whole_run_id("r6b0c026f-cf9b36601e342489e"));
        // A generated id's first 16 digits are a prefix, not a whole id.
        assert!(!is_whole_run_id("r6b0c026f-cf9b36601e342489"));
        assert!(!is_whole_run_id("r6924b1c2-0123"));
        assert!(!is_whole_run_id("r6924b1c2"));
        assert!(!is_whole_run_id("last"));
    }
}
