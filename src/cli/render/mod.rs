//! Human output: the evidence block. Every field of a record is shown with
//! [`Shown`] (text as written: `raw`; a message dryrun composed: `message`)
//! and every line goes out through the screen (`say!`), so nothing the
//! command, the workspace or whoever can edit a record wrote can move the
//! cursor, recolour or reorder the reviewer's screen.

use super::screen::{Shown, decision_line, say, split_lines};
use crate::engine::summary::ReviewSummary;
use crate::model::Decision;
use crate::model::{Change, ChangeKind};
use crate::record::RunRecord;
use crate::workspace::paths::escape_for_humans;

mod lists;
pub use lists::{
    print_classification, print_comparison, print_diff, print_explanation, print_journal_report,
    print_receipt, print_run_list,
};

/// Text as someone wrote it, escaped for a terminal.
fn raw(s: &str) -> String {
    Shown::raw(s).to_string()
}

/// A message dryrun composed, made safe for a terminal.
fn msg(s: &str) -> String {
    Shown::message(s).to_string()
}

/// The first `n` characters of an id or hash (a forged record's may not be
/// ASCII), escaped.
fn head(s: &str, n: usize) -> String {
    raw(&s.chars().take(n).collect::<String>())
}

/// A labelled list; `items` are escaped already.
fn list(label: &str, items: &[String]) {
    if items.is_empty() {
        say!("{label}: none");
    } else {
        say!("{label}:");
        for i in items {
            say!("  {i}");
        }
    }
}

/// The last lines of a multi-line text (output), each line escaped.
fn tail(label: &str, text: &str, truncated: bool) {
    if text.is_empty() {
        return;
    }
    let lines: Vec<&str> = split_lines(text).collect();
    let start = lines.len().saturating_sub(10);
    say!(
        "{label} ({} line(s){}{}):",
        lines.len(),
        if start > 0 { ", last 10 shown" } else { "" },
        if truncated { ", truncated" } else { "" }
    );
    for l in &lines[start..] {
        say!("  | {}", Shown::raw(l));
    }
}

/// Globs, names or steps as someone wrote them, escaped, comma-separated.
fn joined(items: &[String]) -> String {
    items.iter().map(|i| raw(i)).collect::<Vec<_>>().join(", ")
}

// Long on purpose: the evidence screen, section by section in the order it prints.
pub fn print_evidence(r: &RunRecord) {
    let task = r
        .task
        .as_deref()
        .map(|t| format!(" · task {}", Shown::raw(t)))
        .unwrap_or_default();
    say!("dryrun run {}{task}", Shown::raw(&r.run_id));
    say!("command: {}", Shown::raw(&r.command));
    if let Some(steps) = &r.steps {
        for (i, st) in steps.iter().enumerate() {
            say!("  step {}: {}", i + 1, Shown::raw(st));
        }
    }
    if !r.intent.summary.is_empty() {
        say!(
            "intent: {} ({})",
            Shown::raw(&r.intent.summary),
            Shown::raw(&r.intent.mode)
        );
    }
    print_intent_globs(r);
    if let Some(a) = &r.submitted_by {
        say!(
            "submitted: {} by uid {} (via {})",
            Shown::raw(&r.created_at),
            a.uid,
            Shown::raw(&a.via)
        );
    }
    if let Some(risk) = &r.risk {
        // The classifier's view of the command alone; whether the run
        // needs approval is the decision's (see `approval_line`).
        say!(
            "risk: {} (score {}){}",
            Shown::raw(&risk.level),
            risk.score,
            if risk.requires_approval {
                " · the command alone asks for approval"
            } else {
                ""
            }
        );
    }
    let Some(reh) = &r.rehearsal else {
        print_approvals(r);
        say!("state: {}", r.state.as_str());
        if let Some(e) = &r.error {
            say!("error: {}", Shown::message(e));
        }
        return;
    };
    let sb = &reh.sandbox;
    let ll = if sb.landlock_abi > 0 {
        format!("landlock ABI {}", sb.landlock_abi)
    } else {
        "landlock: none (degraded)".into()
    };
    say!(
        "sandbox: overlay on {} · net: {} · {ll} · seccomp {}",
        Shown::raw(&r.workspace),
        if sb.network.starts_with("egress") {
            "egress proxy (allowlist)"
        } else {
            "none"
        },
        if sb.seccomp { "on" } else { "off" }
    );
    say!("ids: {}", Shown::raw(&sb.ids));
    let exit = match (reh.exit_code, reh.signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "none".into(),
    };
    let writes = reh
        .changes
        .iter()
        .filter(|c| c.kind != ChangeKind::Identical)
        .count();
    let (surprises, forbidden) = r
        .verdict
        .as_ref()
        .map(|v| (v.surprise_paths.clone(), v.forbidden_paths_touched.clone()))
        .unwrap_or_default();
    say!(
        "exit code: {exit} · files changed: {writes} · surprise paths: {} · {} ms{}",
        surprises.len(),
        reh.duration_ms,
        if reh.timed_out { " · TIMED OUT" } else { "" }
    );
    if reh.changes.len() > SUMMARISE_CHANGES_OVER {
        print_changes_by_directory(&reh.changes);
    } else if !reh.changes.is_empty() {
        say!("changes:");
        for c in &reh.changes {
            say!("{}", change_line(c));
        }
    }
    // Show listed paths from the change records' exact bytes.
    let exact = |p: &String| {
        reh.changes
            .iter()
            .find(|c| &c.path == p)
            .map(|c| escape_for_humans(&c.path_bytes()))
            .unwrap_or_else(|| raw(p))
    };
    list(
        "surprise paths",
        &surprises.iter().map(exact).collect::<Vec<_>>(),
    );
    list(
        "forbidden paths touched",
        &forbidden.iter().map(exact).collect::<Vec<_>>(),
    );
    list(
        "blocked attempts",
        &reh.blocked
            .iter()
            .map(|b| format!("{}: {}", b.kind, Shown::message(&b.detail)))
            .collect::<Vec<_>>(),
    );
    list(
        "written outside the workspace (not applied live)",
        &reh.outside_writes
            .iter()
            .map(|w| {
                format!(
                    "{} ({} entr{}, {} B{})",
                    raw(&w.path),
                    w.count,
                    if w.count == 1 { "y" } else { "ies" },
                    w.bytes,
                    match &w.cache_rule {
                        Some(rule) => format!(", {rule}: listed only"),
                        None => ", a finding".into(),
                    }
                )
            })
            .collect::<Vec<_>>(),
    );
    list(
        "hidden by the sandbox",
        &reh.hidden
            .iter()
            .map(|h| msg(&h.describe()))
            .collect::<Vec<_>>(),
    );
    let egress = |allowed: bool| -> Vec<String> {
        reh.egress
            .iter()
            .filter(|e| e.allowed == allowed)
            .map(|e| {
                let how = e.how.as_str();
                let dest = raw(&e.destination());
                match &e.reason {
                    Some(why) => format!("{dest} ({how}): {}", Shown::message(why)),
                    None => format!("{dest} ({how}, {} B out, {} B in)", e.bytes_out, e.bytes_in),
                }
            })
            .collect()
    };
    if !reh.egress.is_empty() {
        list("would have contacted (egress proxy)", &egress(true));
        list("network refused (outside the allowlist)", &egress(false));
    }
    let actions = ReviewSummary::of(r, None).would_be_actions;
    if reh.would_be_actions.is_empty() {
        say!("would-be actions (answered by stubs): none");
    } else {
        say!("would-be actions (answered by stubs):");
    }
    for (a, shown) in reh.would_be_actions.iter().zip(&actions) {
        // `shown()` is the call with its words escaped already.
        say!(
            "  {} → exit {} ({}, rule {})",
            Shown::message(&a.shown()),
            a.answer.exit,
            Shown::raw(&a.source),
            Shown::raw(&a.rule),
        );
        for l in stdin_shown(shown) {
            say!("{l}");
        }
    }
    if let Some(l) = &r.replay_of {
        say!(
            "replay of: {} (novel calls: {})",
            Shown::raw(&l.baseline),
            Shown::raw(&l.novel)
        );
    }
    for why in &reh.incomplete {
        say!("incomplete: {}", Shown::message(why));
    }
    say!(
        "stripped: {}",
        if reh.stripped.is_empty() {
            "none".into()
        } else {
            joined(&reh.stripped)
        }
    );
    say!(
        "limits hit: {}",
        if reh.limits_hit.is_empty() {
            "none".into()
        } else {
            reh.limits_hit
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    tail("stdout", &reh.stdout, reh.output_truncated);
    tail("stderr", &reh.stderr, reh.output_truncated);
    if let Some(v) = &r.verdict {
        let first = v
            .findings
            .first()
            .map(|f| format!(" — {}", Shown::message(&f.message)))
            .or_else(|| failed_line(reh))
            .unwrap_or_default();
        decision_line("decision: ", v.decision, &first);
        say!("approval: {}", approval_line(r));
        if v.reasons.len() > 1 || (v.decision != Decision::Promote && !v.reasons.is_empty()) {
            list(
                "reasons",
                &v.reasons.iter().map(|s| msg(s)).collect::<Vec<_>>(),
            );
        }
        list("notes", &v.notes.iter().map(|s| msg(s)).collect::<Vec<_>>());
    }
    print_approvals(r);
    say!("state: {}", state_line(r));
}

/// A failed command whose run is promoted: said on the decision line, so
/// nobody takes the promotion for a success.
fn failed_line(reh: &crate::record::Rehearsal) -> Option<String> {
    let status = match (reh.exit_code, reh.signal) {
        (Some(0), _) | (None, None) => return None,
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
    };
    Some(format!(
        " — the command FAILED ({status}); promoting applies what it left, as the live run would have"
    ))
}

/// What the intent declared beyond its summary: the globs the verdict
/// judged the changes by, the network it asked for, its note for reviewers.
fn print_intent_globs(r: &RunRecord) {
    let i = &r.intent;
    if !i.expected_writes.is_empty() {
        say!("expected writes: {}", joined(&i.expected_writes));
    }
    if !i.forbidden_paths.is_empty() {
        say!("forbidden paths: {}", joined(&i.forbidden_paths));
    }
    if !i.network.is_empty() {
        say!("network asked for: {}", joined(&i.network));
    }
    if let Some(n) = i.reviewer_note.as_deref().filter(|n| !n.is_empty()) {
        say!("note for the reviewer: {}", Shown::raw(n));
    }
}

/// Whether the run needs a person, from its decision (never the
/// classifier's score alone, so the two lines cannot disagree).
fn approval_line(r: &RunRecord) -> String {
    let id = Shown::raw(&r.run_id);
    match r.verdict.as_ref().map(|v| v.decision) {
        Some(Decision::Promote) | None => "not required".into(),
        Some(Decision::NeedsApproval) => {
            format!("required: a reviewer runs `dryrun approve {id}`")
        }
        Some(Decision::Blocked) => format!(
            "required, as an override of the block: a reviewer runs `dryrun approve --override {id}`"
        ),
    }
}

/// The state, with why a rejected run was closed and whether a waiting
/// one needs an override.
fn state_line(r: &RunRecord) -> String {
    let mut s = r.state.as_str().to_string();
    if r.state == crate::record::RunState::AwaitingApproval && r.override_required {
        s.push_str(" (override required)");
    }
    if let Some(c) = r.rejected_because {
        s.push_str(&format!(" ({})", c.as_str()));
    }
    if let Some(by) = &r.superseded_by {
        s.push_str(&format!(
            " (superseded by run {}: out of the review queue)",
            Shown::raw(by)
        ));
    }
    s
}

/// A would-be action's stdin as reviewers read it: the text when it is
/// text, else its size.
fn stdin_shown(a: &crate::engine::summary::ActionSummary) -> Vec<String> {
    match (&a.stdin_text, a.stdin_bytes) {
        (Some(t), Some(n)) => {
            let mut out = vec![format!(
                "    stdin ({n} bytes{}):",
                if a.stdin_cut { ", first KiB shown" } else { "" }
            )];
            out.extend(
                split_lines(t)
                    .take(20)
                    .map(|l| format!("    | {}", Shown::raw(l))),
            );
            out
        }
        (None, Some(n)) if n > 0 => vec![format!("    stdin: {n} bytes (not text)")],
        _ => Vec::new(),
    }
}

/// The evidence a reviewer decides on, as lines (forbidden paths first),
/// for `dryrun approve` and the review UI.
pub fn review_summary_lines(s: &ReviewSummary) -> Vec<String> {
    let mut out = Vec::new();
    out.push(format!(
        "review run {} · submitted {} by {}{}",
        Shown::raw(&s.run_id),
        Shown::raw(&s.submitted_at),
        Shown::message(&s.submitted_by),
        s.expires_at
            .as_deref()
            .map(|t| format!(" · expires {}", Shown::raw(t)))
            .unwrap_or_default()
    ));
    out.push(format!("command: {}", Shown::raw(&s.command)));
    if !s.intent_summary.is_empty() {
        out.push(format!("intent: {}", Shown::raw(&s.intent_summary)));
    }
    if let Some(n) = &s.reviewer_note {
        out.push(format!("note for the reviewer: {}", Shown::raw(n)));
    }
    out.push(format!(
        "decision: {}{}",
        Shown::raw(s.decision.as_deref().unwrap_or("none")),
        if s.override_required {
            " · approving it overrides the block (--override)"
        } else {
            ""
        }
    ));
    if let (Some(l), Some(n)) = (&s.risk_level, s.risk_score) {
        out.push(format!("risk: {} (score {n})", Shown::raw(l)));
    }
    let section = |out: &mut Vec<String>, label: &str, items: Vec<String>| {
        if items.is_empty() {
            out.push(format!("{label}: none"));
        } else {
            out.push(format!("{label}:"));
            out.extend(items.into_iter().map(|i| format!("  {i}")));
        }
    };
    section(
        &mut out,
        "reasons",
        s.reasons.iter().map(|r| msg(r)).collect(),
    );
    section(
        &mut out,
        "forbidden paths touched",
        s.forbidden_paths_touched.iter().map(|p| raw(p)).collect(),
    );
    section(
        &mut out,
        "surprise paths",
        s.surprise_paths.iter().map(|p| raw(p)).collect(),
    );
    let c = &s.changes;
    out.push(format!(
        "changes: {} created · {} modified · {} deleted · {} metadata · {} identical rewrite(s)",
        c.created, c.modified, c.deleted, c.metadata, c.identical
    ));
    for g in &s.changes_by_dir {
        out.push(format!("  {} ({})", Shown::raw(&g.dir), g.counts_text()));
    }
    if s.would_be_actions.is_empty() {
        out.push("would-be actions: none".into());
    } else {
        out.push(format!(
            "would-be actions (answered by stubs; live.mode {}: {}):",
            Shown::raw(&s.live_mode),
            if s.live_mode == "rerun" {
                "made for real after approval"
            } else {
                "NOT made; promoting needs --local-only"
            }
        ));
        for a in &s.would_be_actions {
            out.push(format!("  {}", Shown::message(&a.call)));
            out.extend(stdin_shown(a));
        }
    }
    out
}

/// Print [`review_summary_lines`].
pub fn print_review_summary(s: &ReviewSummary) {
    for l in review_summary_lines(s) {
        say!("{l}");
    }
}

/// One line of the evidence's change list: kind mark, path, file type and
/// what else changed.
/// Past this many changes, the human output lists them by directory (the
/// JSON record always lists each; surprise and forbidden paths are listed
/// in full below either way).
const SUMMARISE_CHANGES_OVER: usize = 40;

/// Changes counted by directory (the deepest grouping that stays short:
/// `node_modules/ (50,000 created in 2,000 dirs)`).
fn print_changes_by_directory(changes: &[Change]) {
    let pairs: Vec<(&str, ChangeKind)> =
        changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    let groups = crate::model::dir_summary::summarise_by_dir(&pairs);
    say!(
        "changes: {} (summarised by directory; surprise and forbidden paths are named below; `dryrun show RUN --json` lists each):",
        crate::model::dir_summary::thousands(changes.len()),
    );
    print_dir_summary(&groups);
}

fn print_dir_summary(groups: &[crate::model::dir_summary::DirSummary]) {
    for g in groups {
        say!("  {} ({})", Shown::raw(&g.dir), g.counts_text());
    }
}

fn change_line(c: &Change) -> String {
    let mark = match c.kind {
        ChangeKind::Created => "+",
        ChangeKind::Modified => "M",
        ChangeKind::Deleted => "-",
        ChangeKind::Metadata => "~",
        ChangeKind::Identical => "=",
    };
    let mut extra = Vec::new();
    if c.kind == ChangeKind::Metadata
        && let (Some(b), Some(a)) = (c.mode_before, c.mode_after)
        && a != b
    {
        extra.push(format!("mode {b:o} -> {a:o}"));
    }
    if c.setid {
        extra.push("SETID".into());
    }
    if let Some(t) = &c.symlink_target {
        extra.push(format!("-> {}", Shown::raw(t)));
    }
    if c.symlink_escapes {
        extra.push("ESCAPES WORKSPACE".into());
    }
    if let Some(s) = &c.special {
        extra.push(raw(s));
    }
    if let Some(h) = &c.hardlink_of {
        extra.push(format!("hard link of {}", Shown::raw(h)));
    }
    if !c.xattrs_changed.is_empty() {
        extra.push(format!("xattrs: {}", joined(&c.xattrs_changed)));
    }
    let ft = format!("{:?}", c.file_type).to_lowercase();
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!("  ({})", extra.join("; "))
    };
    format!("  {mark} {} [{ft}]{extra}", Shown::bytes(&c.path_bytes()))
}

fn print_approvals(r: &RunRecord) {
    for a in &r.approvals {
        let verb = match a.action.as_str() {
            "approve" => "approved".into(),
            "withdraw" => "withdrawn".into(),
            "reject" => "rejected".into(),
            other => raw(other),
        };
        let ov = if a.overrode_block {
            " (override of a blocked verdict)"
        } else {
            ""
        };
        let note = if a.note.is_empty() {
            String::new()
        } else {
            format!(": {}", Shown::raw(&a.note))
        };
        say!(
            "{verb} by uid {} at {} via {}{ov}{note}",
            a.by.uid,
            Shown::raw(&a.at),
            Shown::raw(&a.authenticated_by)
        );
    }
}
