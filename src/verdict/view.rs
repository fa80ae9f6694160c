//! The view's evidence, one check each: writes outside the workspace
//! (caches listed, the rest a finding, since the live lane applies the
//! workspace's change set only) and what the sandbox hid that the command
//! tried to use.

use crate::model::{Decision, Finding, HiddenKind, OutsideWrite, RehearsalReport};
use crate::workspace::paths::escape_for_humans;

/// Rows named in one message; the rest are counted.
const SHOWN: usize = 5;

fn row(w: &OutsideWrite) -> String {
    let what = match w.examples.as_slice() {
        [one] if w.count == 1 => format!(
            "{}/{}",
            w.path.trim_end_matches('/'),
            escape_for_humans(one.as_bytes())
        ),
        _ => format!(
            "{} ({} entr{}: {})",
            w.path,
            w.count,
            if w.count == 1 { "y" } else { "ies" },
            w.examples
                .iter()
                .map(|e| escape_for_humans(e.as_bytes()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{what}, {} B", w.bytes)
}

fn listed(rows: &[&OutsideWrite], more: u64) -> String {
    let mut shown: Vec<String> = rows.iter().take(SHOWN).map(|w| row(w)).collect();
    let rest = rows.len().saturating_sub(SHOWN);
    if rest > 0 {
        shown.push(format!(
            "{rest} more director{}",
            if rest == 1 { "y" } else { "ies" }
        ));
    }
    if more > 0 {
        shown.push(format!("{more} more entries not listed"));
    }
    shown.join("; ")
}

/// Writes outside the workspace: outside a cache, a finding (the run
/// needs approval); into caches, a note.
pub(super) fn outside_writes(r: &RehearsalReport, notes: &mut Vec<String>) -> Vec<Finding> {
    let (caches, others): (Vec<&OutsideWrite>, Vec<&OutsideWrite>) =
        r.outside_writes.iter().partition(|w| w.cache);
    if !caches.is_empty() {
        notes.push(format!(
            "wrote into caches outside the workspace (listed only, not applied live): {}",
            listed(&caches, 0)
        ));
    }
    if others.is_empty() && r.outside_writes_unlisted == 0 {
        return Vec::new();
    }
    vec![Finding {
        rule: "view.outside_writes".into(),
        decision: Decision::NeedsApproval,
        message: format!(
            "wrote outside the workspace: {}; the live lane applies the workspace's change set only, so these writes will not happen live (run the command yourself if they are wanted)",
            listed(&others, r.outside_writes_unlisted)
        ),
    }]
}

/// What the sandbox hid that the command tried to use: the rehearsal did
/// not see what the live run would.
pub(super) fn hidden(r: &RehearsalReport) -> Vec<Finding> {
    r.hidden
        .iter()
        .take(SHOWN)
        .map(|h| Finding {
            rule: "view.hidden".into(),
            decision: Decision::NeedsApproval,
            message: format!(
                "the rehearsal differs from the live run: {}",
                escape_for_humans(h.describe().as_bytes())
            ),
        })
        .collect()
}

/// What an exit status 127 ("command not found") means when the view hid
/// the program: said with the status itself.
pub(super) fn exit_status_explained(code: i32, r: &RehearsalReport) -> String {
    if code != 127 {
        return String::new();
    }
    match r.hidden.iter().find(|h| h.kind == HiddenKind::Program) {
        Some(h) => format!(
            " (command not found: {} is on the host, but the sandbox hid it: rule {}, {})",
            escape_for_humans(h.path.as_bytes()),
            h.rule,
            h.reason
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Hidden;

    fn w(path: &str, cache: bool, ex: &[&str], count: u64) -> OutsideWrite {
        OutsideWrite {
            path: path.into(),
            count,
            bytes: 10,
            cache,
            cache_rule: cache.then(|| "cache:xdg-cache".into()),
            examples: ex.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn caches_are_notes_and_other_writes_need_approval() {
        let mut r = RehearsalReport {
            outside_writes: vec![w("/h/.cache", true, &["tool"], 2)],
            ..Default::default()
        };
        let mut notes = Vec::new();
        assert!(outside_writes(&r, &mut notes).is_empty());
        assert!(notes[0].contains("/h/.cache"), "{notes:?}");
        r.outside_writes.push(w("/h", false, &[".gitconfig"], 1));
        let f = outside_writes(&r, &mut Vec::new());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].decision, Decision::NeedsApproval);
        assert!(
            f[0].message.contains("/h/.gitconfig, 10 B"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("will not happen live"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn exit_127_names_the_hidden_program() {
        let r = RehearsalReport {
            hidden: vec![Hidden {
                kind: HiddenKind::Program,
                path: "/home/a/bin/tool".into(),
                rule: "view.other_home".into(),
                reason: "another user's home is never shown".into(),
                seen: "stderr".into(),
            }],
            ..Default::default()
        };
        let m = exit_status_explained(127, &r);
        assert!(
            m.contains("/home/a/bin/tool") && m.contains("view.other_home"),
            "{m}"
        );
        assert_eq!(exit_status_explained(1, &r), "");
        assert_eq!(hidden(&r).len(), 1);
    }
}
