//! The evidence summary a hook shows the host and its user: paths, kinds
//! and reasons, never file content or the command's output.

use crate::model::text::Shown;
use crate::record::RunRecord;

/// Text as someone wrote it (a path, a directory), in the one notation for
/// people (`model::text`): the host shows this summary to its user.
pub(crate) fn esc(s: &str) -> String {
    Shown::raw(s).to_string()
}

/// Paths as someone wrote them, each escaped.
fn paths(items: &[String]) -> Vec<String> {
    items.iter().map(|p| esc(p)).collect()
}

pub(super) fn changes_line(r: &RunRecord) -> String {
    let changes = r
        .rehearsal
        .as_ref()
        .map(|h| {
            h.changes
                .iter()
                .filter(|c| c.kind != crate::model::ChangeKind::Identical)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if changes.is_empty() {
        return "no files changed".into();
    }
    let shown: Vec<String> = changes
        .iter()
        .take(8)
        .map(|c| {
            let k = match c.kind {
                crate::model::ChangeKind::Created => "A",
                crate::model::ChangeKind::Modified => "M",
                crate::model::ChangeKind::Deleted => "D",
                crate::model::ChangeKind::Metadata => "m",
                crate::model::ChangeKind::Identical => "=",
            };
            format!("{k} {}", esc(&c.path))
        })
        .collect();
    let more = changes.len().saturating_sub(shown.len());
    if more > 0 {
        // A long list by directory (flagged paths are named on their own
        // lines of the summary).
        let pairs: Vec<(&str, crate::model::ChangeKind)> =
            changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        let by_dir: Vec<String> = crate::model::dir_summary::summarise_by_dir(&pairs)
            .iter()
            .map(|g| format!("{} ({})", esc(&g.dir), g.counts_text()))
            .collect();
        return format!(
            "{} file(s) changed: {}, and {more} more; by directory: {}",
            changes.len(),
            shown.join(", "),
            by_dir.join("; ")
        );
    }
    format!("{} file(s) changed: {}", changes.len(), shown.join(", "))
}

/// A short evidence summary: paths, kinds and reasons, never file content
/// or the command's output.
pub fn evidence_summary(r: &RunRecord, what: &str) -> String {
    let mut lines = vec![format!("dryrun run {}: {what}.", r.run_id)];
    lines.push(format!("changes: {}", changes_line(r)));
    if let Some(v) = &r.verdict {
        if !v.forbidden_paths_touched.is_empty() {
            lines.push(format!(
                "forbidden paths touched: {}",
                list(&paths(&v.forbidden_paths_touched))
            ));
        }
        if !v.surprise_paths.is_empty() {
            lines.push(format!(
                "surprise paths: {}",
                list(&paths(&v.surprise_paths))
            ));
        }
    }
    if let Some(h) = &r.rehearsal {
        if !h.would_be_actions.is_empty() {
            let acts = crate::engine::shown_actions(&h.would_be_actions);
            lines.push(format!(
                "would-be actions (answered by stubs, not made): {}",
                list(&acts)
            ));
        }
        let net: Vec<String> = h
            .blocked
            .iter()
            .filter(|b| b.kind == crate::model::BlockedKind::Network)
            .map(|b| b.detail.clone())
            .collect();
        if !net.is_empty() {
            lines.push(format!("network attempts: {}", list(&net)));
        }
        let other: Vec<String> = h
            .blocked
            .iter()
            .filter(|b| b.kind != crate::model::BlockedKind::Network)
            .map(|b| format!("{}: {}", b.kind.as_str(), b.detail))
            .collect();
        if !other.is_empty() {
            lines.push(format!("blocked attempts: {}", list(&other)));
        }
        lines.push(format!(
            "exit status: {}",
            match (h.exit_code, h.signal) {
                (Some(c), _) => c.to_string(),
                (None, Some(s)) => format!("signal {s}"),
                _ => "none".into(),
            }
        ));
    }
    if let Some(k) = &r.risk {
        lines.push(format!(
            "risk: {} (score {}){}",
            esc(&k.level),
            k.score,
            if k.reasons.is_empty() {
                String::new()
            } else {
                format!(": {}", list(&k.reasons))
            }
        ));
    }
    if let Some(v) = &r.verdict
        && !v.reasons.is_empty()
    {
        lines.push(format!("reasons: {}", list(&v.reasons)));
    }
    let mut s = lines.join("\n");
    if s.len() > 3000 {
        let mut cut = 3000;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(&format!(" … (dryrun show {})", r.run_id));
    }
    s
}

/// Messages dryrun composed (reasons, calls, details) or names escaped
/// already, at most six, shown as messages.
pub(super) fn list(items: &[String]) -> String {
    let shown: Vec<String> = items
        .iter()
        .take(6)
        .map(|s| Shown::message(s).to_string())
        .collect();
    let more = items.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{}; and {more} more", shown.join("; "))
    } else {
        shown.join("; ")
    }
}
