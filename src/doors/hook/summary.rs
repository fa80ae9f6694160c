//! The evidence summary a hook shows the host and its user: paths, kinds
//! and reasons, never file content; and, apart from it, the command's
//! output as a terminal showed it, with what to change.

use crate::model::text::{Shown, split_lines};
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

/// Output shown in a hook's reason at most (the first quarter and the
/// rest from the end; the hosts cut a tool result near there anyway).
const OUTPUT_SHOWN: usize = 24 << 10;

/// The rest of a hook's reason for a run that does not go ahead as it is:
/// what to change, then the rehearsal's stdout and stderr in the order
/// they were written (redacted as in the record, each line in the
/// notation for people, so no terminal control reaches the host's
/// screen), then the exit status again.
pub fn output_and_advice(r: &RunRecord) -> String {
    let mut lines = Vec::new();
    if let Some(v) = &r.verdict {
        for h in crate::model::advice::to_change(&v.findings) {
            lines.push(format!("what to change: {}", Shown::message(&h)));
        }
    }
    let Some(h) = &r.rehearsal else {
        return lines.join("\n");
    };
    let text = h.output_text();
    if text.is_empty() {
        lines.push("output: none (the command printed nothing)".into());
    } else {
        lines.push(format!(
            "output (stdout and stderr in the order the command wrote them, in the rehearsal of run {}):",
            r.run_id
        ));
        let shown = head_and_tail(&text, OUTPUT_SHOWN);
        lines.extend(split_lines(&shown).map(|l| Shown::raw(l).to_string()));
        if h.output_truncated {
            lines.push("[dryrun: the output was cut to the run's output limit]".into());
        }
        lines.push(format!(
            "[exit status: {}]",
            match (h.exit_code, h.signal) {
                (Some(c), _) => c.to_string(),
                (None, Some(s)) => format!("signal {s}"),
                _ => "none".into(),
            }
        ));
    }
    lines.join("\n")
}

/// `text` within `max` bytes: its first quarter and its end, with a line
/// that says how much was left out between them.
fn head_and_tail(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut head = max / 4;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (max - max / 4);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[dryrun: {} bytes of output left out here]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
    .into()
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
