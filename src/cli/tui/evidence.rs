//! The detail pane's text: a run's evidence in the order a reviewer should
//! read it. Reasons with forbidden paths first; the change tree with
//! ordinary directories collapsed and flagged paths highlighted; diffs of
//! the flagged files before the others; would-be actions with their
//! stdin; network and other blocked attempts; what was stripped; the
//! envelope's note for reviewers. Everything the command or its workspace
//! wrote is escaped: no byte of it reaches the terminal raw.

use std::collections::BTreeSet;

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::app::{Detail, override_required};
use super::tree::{Flag, TreeLine, change_tree};
use crate::model::text::{Shown, escape_for_humans, split_lines};
use crate::model::{BlockedKind, ChangeKind};
use crate::record::RunRecord;

/// Ordinary files' diffs shown before the rest are left to `dryrun diff`.
pub const ORDINARY_DIFFS_SHOWN: usize = 5;
/// Lines of one file's diff shown.
pub const DIFF_LINES_SHOWN: usize = 60;

const RULE_FORBIDDEN: &str = "[intent.forbidden_paths]";

pub fn forbidden_style() -> Style {
    Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
}

pub fn surprise_style() -> Style {
    Style::default()
        .fg(Color::Yellow)
        .add_modifier(Modifier::BOLD)
}

fn heading(s: &str) -> Line<'static> {
    Line::from(Span::styled(
        s.to_string(),
        Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    ))
}

fn plain(s: String) -> Line<'static> {
    Line::from(s)
}

/// A message dryrun composed (a reason, a note, an error), whose embedded
/// names were escaped when it was composed: shown as a message.
fn safe(s: &str) -> String {
    Shown::message(s).to_string()
}

/// Text as someone wrote it (a command, a path, a line of output, stdin,
/// a diff line): everything a terminal would act on or hide made visible.
fn raw(s: &str) -> String {
    Shown::raw(s).to_string()
}

/// Globs or names as someone wrote them, escaped, comma-separated.
fn joined(items: &[String]) -> String {
    items.iter().map(|i| raw(i)).collect::<Vec<_>>().join(", ")
}

/// The verdict's reasons, forbidden paths first, otherwise in the
/// verdict's order (most severe first).
pub fn ordered_reasons(r: &RunRecord) -> Vec<String> {
    let Some(v) = &r.verdict else {
        return Vec::new();
    };
    let (mut first, rest): (Vec<&String>, Vec<&String>) = v
        .reasons
        .iter()
        .partition(|s| s.starts_with(RULE_FORBIDDEN));
    first.extend(rest);
    first.into_iter().cloned().collect()
}

/// How each change is flagged by the verdict.
pub fn flags(r: &RunRecord) -> Vec<Flag> {
    let Some(reh) = &r.rehearsal else {
        return Vec::new();
    };
    let (surprise, forbidden): (BTreeSet<&str>, BTreeSet<&str>) = match &r.verdict {
        Some(v) => (
            v.surprise_paths.iter().map(String::as_str).collect(),
            v.forbidden_paths_touched
                .iter()
                .map(String::as_str)
                .collect(),
        ),
        None => Default::default(),
    };
    reh.changes
        .iter()
        .map(|c| {
            if forbidden.contains(c.path.as_str()) {
                Flag::Forbidden
            } else if surprise.contains(c.path.as_str()) {
                Flag::Surprise
            } else {
                Flag::Ordinary
            }
        })
        .collect()
}

fn mark(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Created => "+",
        ChangeKind::Modified => "M",
        ChangeKind::Deleted => "-",
        ChangeKind::Metadata => "~",
        ChangeKind::Identical => "=",
    }
}

/// The change tree's lines.
pub fn tree_lines(r: &RunRecord, expand_all: bool) -> Vec<Line<'static>> {
    let Some(reh) = &r.rehearsal else {
        return Vec::new();
    };
    let flags = flags(r);
    let tree = change_tree(&reh.changes, |i| flags[i], expand_all);
    tree.iter()
        .map(|t| match t {
            TreeLine::Path { index, flag, .. } => {
                let c = &reh.changes[*index];
                let name = escape_for_humans(&c.path_bytes());
                let ft = format!("{:?}", c.file_type).to_lowercase();
                let indent = "  ";
                let (style, tag) = match flag {
                    Flag::Forbidden => (forbidden_style(), "  FORBIDDEN"),
                    Flag::Surprise => (surprise_style(), "  SURPRISE"),
                    Flag::Ordinary => (Style::default(), ""),
                };
                let mut extra = String::new();
                if let Some(t) = &c.symlink_target {
                    extra.push_str(&format!(" -> {}", raw(t)));
                }
                if c.setid {
                    extra.push_str(" SETID");
                }
                Line::from(vec![
                    Span::raw(format!("{indent}{} ", mark(c.kind))),
                    Span::styled(format!("{name} ({ft}){extra}{tag}"), style),
                ])
            }
            TreeLine::Collapsed {
                dir,
                counts,
                only_here,
                ..
            } => Line::from(Span::styled(
                format!(
                    "  ▸ {dir} … {} {}change(s) collapsed ({}); e expands",
                    counts.total(),
                    if *only_here {
                        "more ordinary "
                    } else {
                        "ordinary "
                    },
                    counts.describe()
                ),
                Style::default().fg(Color::DarkGray),
            )),
        })
        .collect()
}

/// Everything the detail pane shows for `d`, top to bottom.
// Long on purpose: the evidence, section by section in reading order.
pub fn detail_lines(
    d: &Detail,
    expand_all: bool,
    user: &dyn Fn(u32) -> String,
) -> Vec<Line<'static>> {
    let r = &d.record;
    let mut out = Vec::new();
    let task = r
        .task
        .as_deref()
        .map(|t| format!(" · task {}", raw(t)))
        .unwrap_or_default();
    out.push(heading(&format!("run {}{task}", raw(&r.run_id))));
    let who = match &r.submitted_by {
        Some(a) => format!("{} (uid {}, via {})", user(a.uid), a.uid, raw(&a.via)),
        None => "unknown (the record does not say)".into(),
    };
    out.push(plain(format!(
        "submitted by: {who} · at {}",
        raw(&r.created_at)
    )));
    out.push(plain(format!("command: {}", raw(&r.command))));
    for (i, st) in r.steps.iter().flatten().enumerate() {
        out.push(plain(format!("  step {}: {}", i + 1, raw(st))));
    }
    out.push(plain(format!(
        "intent: {} ({})",
        if r.intent.summary.is_empty() {
            "no summary given".to_string()
        } else {
            raw(&r.intent.summary)
        },
        raw(&r.intent.mode)
    )));
    for (label, globs) in [
        ("expected writes", &r.intent.expected_writes),
        ("forbidden paths", &r.intent.forbidden_paths),
        ("network asked for", &r.intent.network),
    ] {
        if !globs.is_empty() {
            out.push(plain(format!("{label}: {}", joined(globs))));
        }
    }
    match &r.intent.reviewer_note {
        Some(n) if !n.is_empty() => out.push(Line::from(vec![
            Span::styled("note for reviewers: ", Style::default().fg(Color::Cyan)),
            Span::raw(raw(n)),
        ])),
        _ => out.push(plain("note for reviewers: none".into())),
    }
    if let Some(risk) = &r.risk {
        out.push(plain(format!(
            "risk: {} (score {})",
            raw(&risk.level),
            risk.score
        )));
    }
    let decision = r
        .verdict
        .as_ref()
        .map(|v| v.decision.as_str())
        .unwrap_or("-");
    let mut state = format!("decision: {decision} · state: {}", r.state.as_str());
    if override_required(r) {
        state.push_str(" · override required (o)");
    }
    out.push(Line::from(Span::styled(
        state,
        if override_required(r) {
            forbidden_style()
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        },
    )));

    out.push(Line::default());
    out.push(heading("Reasons"));
    let reasons = ordered_reasons(r);
    if reasons.is_empty() {
        out.push(plain("  none".into()));
    }
    for s in reasons {
        let style = if s.starts_with(RULE_FORBIDDEN) {
            forbidden_style()
        } else if s.starts_with("[intent.expected_writes]") || s.starts_with("[intent.read_only]") {
            surprise_style()
        } else {
            Style::default()
        };
        out.push(Line::from(Span::styled(format!("  {}", safe(&s)), style)));
    }
    if let Some(v) = &r.verdict {
        for n in &v.notes {
            out.push(plain(format!("  note: {}", safe(n))));
        }
    }

    let Some(reh) = &r.rehearsal else {
        if let Some(e) = &r.error {
            out.push(plain(format!("error: {}", safe(e))));
        }
        return out;
    };
    out.push(Line::default());
    let exit = match (reh.exit_code, reh.signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "none".into(),
    };
    out.push(heading(&format!(
        "Changes ({}) · exit {exit}{}",
        reh.changes.len(),
        if reh.timed_out { " · TIMED OUT" } else { "" }
    )));
    out.extend(tree_lines(r, expand_all));

    out.push(Line::default());
    out.push(heading(&format!(
        "Would-be actions ({}), answered by stubs, NOT made",
        reh.would_be_actions.len()
    )));
    if reh.would_be_actions.is_empty() {
        out.push(plain("  none".into()));
    }
    for a in &reh.would_be_actions {
        out.push(plain(format!(
            "  {} → exit {} ({}, rule {})",
            // The call's words are escaped already (`shown`).
            safe(&a.shown()),
            a.answer.exit,
            raw(&a.source),
            raw(&a.rule)
        )));
        if a.stdin.read {
            out.push(plain(format!(
                "    stdin ({} bytes{}):",
                a.stdin.bytes,
                if a.stdin.bytes as usize > a.stdin.head.len() || a.stdin.truncated {
                    ", first KiB shown"
                } else {
                    ""
                }
            )));
            for l in split_lines(&a.stdin.head).take(20) {
                out.push(plain(format!("    | {}", raw(l))));
            }
        }
    }

    out.push(Line::default());
    let network: Vec<_> = reh
        .blocked
        .iter()
        .filter(|b| b.kind == BlockedKind::Network)
        .collect();
    out.push(heading(&format!("Network attempts ({})", network.len())));
    for b in &network {
        out.push(plain(format!("  {}", safe(&b.detail))));
    }
    let other: Vec<_> = reh
        .blocked
        .iter()
        .filter(|b| b.kind != BlockedKind::Network)
        .collect();
    out.push(heading(&format!(
        "Other blocked attempts ({})",
        other.len()
    )));
    for b in &other {
        out.push(plain(format!("  {}: {}", b.kind, safe(&b.detail))));
    }
    out.push(plain(format!(
        "stripped: {}",
        if reh.stripped.is_empty() {
            "none".into()
        } else {
            joined(&reh.stripped)
        }
    )));
    if !reh.limits_hit.is_empty() {
        let l: Vec<&str> = reh.limits_hit.iter().map(|l| l.as_str()).collect();
        out.push(plain(format!("limits hit: {}", l.join(", "))));
    }
    for why in &reh.incomplete {
        out.push(plain(format!("incomplete: {}", safe(why))));
    }

    out.push(Line::default());
    diff_lines(d, &flags(r), &mut out);

    if !r.approvals.is_empty() {
        out.push(Line::default());
        out.push(heading("Reviews"));
        for a in &r.approvals {
            out.push(plain(format!(
                "  {} by {} at {}{}: {}",
                raw(&a.action),
                user(a.by.uid),
                raw(&a.at),
                if a.overrode_block { " (override)" } else { "" },
                raw(&a.note)
            )));
        }
    }
    out
}

/// Unified diffs: flagged files first, then a few ordinary ones.
fn diff_lines(d: &Detail, flags: &[Flag], out: &mut Vec<Line<'static>>) {
    let diff = match &d.diff {
        Ok(x) => x,
        Err(e) => {
            out.push(heading("Diffs"));
            out.push(plain(format!("  not available: {}", safe(e))));
            return;
        }
    };
    let changes = d
        .record
        .rehearsal
        .as_ref()
        .map(|x| x.changes.as_slice())
        .unwrap_or(&[]);
    let flag_of = |path: &str| {
        changes
            .iter()
            .position(|c| c.path == path)
            .and_then(|i| flags.get(i).copied())
            .unwrap_or(Flag::Ordinary)
    };
    let mut files: Vec<_> = diff
        .files
        .iter()
        .filter(|f| f.diff.is_some() || f.note.is_some())
        .map(|f| (flag_of(&f.path), f))
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    out.push(heading(&format!("Diffs ({} file(s))", files.len())));
    let mut ordinary = 0;
    let mut left = 0;
    for (flag, f) in files {
        if flag == Flag::Ordinary {
            ordinary += 1;
            if ordinary > ORDINARY_DIFFS_SHOWN {
                left += 1;
                continue;
            }
        }
        let style = match flag {
            Flag::Forbidden => forbidden_style(),
            Flag::Surprise => surprise_style(),
            Flag::Ordinary => Style::default().add_modifier(Modifier::BOLD),
        };
        out.push(Line::from(Span::styled(
            format!("── {}", raw(&f.path)),
            style,
        )));
        match (&f.diff, &f.note) {
            (Some(text), _) => {
                let lines: Vec<&str> = split_lines(text).collect();
                for l in lines.iter().take(DIFF_LINES_SHOWN) {
                    let st = if l.starts_with('+') && !l.starts_with("+++") {
                        Style::default().fg(Color::Green)
                    } else if l.starts_with('-') && !l.starts_with("---") {
                        Style::default().fg(Color::Red)
                    } else if l.starts_with("@@") {
                        Style::default().fg(Color::Cyan)
                    } else {
                        Style::default()
                    };
                    out.push(Line::from(Span::styled(raw(l), st)));
                }
                if lines.len() > DIFF_LINES_SHOWN {
                    out.push(plain(format!(
                        "   … {} more line(s); `dryrun diff {}` shows all",
                        lines.len() - DIFF_LINES_SHOWN,
                        raw(&d.record.run_id)
                    )));
                }
            }
            (None, Some(n)) => out.push(plain(format!("   no text diff: {}", safe(n)))),
            (None, None) => {}
        }
    }
    if left > 0 {
        out.push(Line::from(Span::styled(
            format!(
                "… {left} more ordinary diff(s) not shown; `dryrun diff {}` shows all",
                raw(&d.record.run_id)
            ),
            Style::default().fg(Color::DarkGray),
        )));
    }
}
