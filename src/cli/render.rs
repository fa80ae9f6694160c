//! Human output: the evidence block. Every path and every byte of command
//! output goes through `escape_for_humans` so nothing the command wrote can
//! move the cursor, recolour or reorder the reviewer's screen.

use super::output::{Colour, paint};
use crate::engine::summary::ReviewSummary;
use crate::engine::textdiff::RunDiff;
use crate::model::Decision;
use crate::model::{Change, ChangeKind};
use crate::record::RunRecord;
use crate::workspace::paths::{escape_for_humans, sanitize_for_terminal};

pub fn esc(s: &str) -> String {
    escape_for_humans(s.as_bytes())
}

fn list(label: &str, items: &[String]) {
    if items.is_empty() {
        println!("{label}: none");
    } else {
        println!("{label}:");
        for i in items {
            println!("  {i}");
        }
    }
}

fn tail(label: &str, text: &str, truncated: bool) {
    if text.is_empty() {
        return;
    }
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(10);
    println!(
        "{label} ({} line(s){}{}):",
        lines.len(),
        if start > 0 { ", last 10 shown" } else { "" },
        if truncated { ", truncated" } else { "" }
    );
    for l in &lines[start..] {
        println!("  | {}", esc(l));
    }
}

// Long on purpose: the evidence screen, section by section in the order it prints.
pub fn print_evidence(r: &RunRecord) {
    let task = r
        .task
        .as_deref()
        .map(|t| format!(" · task {}", esc(t)))
        .unwrap_or_default();
    println!("dryrun run {}{task}", r.run_id);
    println!("command: {}", esc(&r.command));
    if !r.intent.summary.is_empty() {
        println!("intent: {} ({})", esc(&r.intent.summary), r.intent.mode);
    }
    if let Some(a) = &r.submitted_by {
        println!(
            "submitted: {} by uid {} (via {})",
            r.created_at, a.uid, a.via
        );
    }
    if let Some(risk) = &r.risk {
        // The classifier's view of the command alone; whether the run
        // needs approval is the decision's (see `approval_line`).
        println!(
            "risk: {} (score {}){}",
            risk.level,
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
        println!("state: {}", r.state.as_str());
        if let Some(e) = &r.error {
            println!("error: {}", esc(e));
        }
        return;
    };
    let sb = &reh.sandbox;
    let ll = if sb.landlock_abi > 0 {
        format!("landlock ABI {}", sb.landlock_abi)
    } else {
        "landlock: none (degraded)".into()
    };
    println!(
        "sandbox: overlay on {} · net: {} · {ll} · seccomp {}",
        esc(&r.workspace),
        if sb.network.starts_with("egress") {
            "egress proxy (allowlist)"
        } else {
            "none"
        },
        if sb.seccomp { "on" } else { "off" }
    );
    println!("ids: {}", sb.ids);
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
    println!(
        "exit code: {exit} · files changed: {writes} · surprise paths: {} · {} ms{}",
        surprises.len(),
        reh.duration_ms,
        if reh.timed_out { " · TIMED OUT" } else { "" }
    );
    if reh.changes.len() > SUMMARISE_CHANGES_OVER {
        print_changes_by_directory(&reh.changes);
    } else if !reh.changes.is_empty() {
        println!("changes:");
        for c in &reh.changes {
            println!("{}", change_line(c));
        }
    }
    // Show listed paths from the change records' exact bytes.
    let exact = |p: &String| {
        reh.changes
            .iter()
            .find(|c| &c.path == p)
            .map(|c| escape_for_humans(&c.path_bytes()))
            .unwrap_or_else(|| esc(p))
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
            .map(|b| format!("{}: {}", b.kind, sanitize_for_terminal(&b.detail)))
            .collect::<Vec<_>>(),
    );
    let egress = |allowed: bool| -> Vec<String> {
        reh.egress
            .iter()
            .filter(|e| e.allowed == allowed)
            .map(|e| {
                let how = e.how.as_str();
                let dest = sanitize_for_terminal(&e.destination());
                match &e.reason {
                    Some(why) => format!("{dest} ({how}): {}", sanitize_for_terminal(why)),
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
    list(
        "would-be actions (answered by stubs)",
        &reh.would_be_actions
            .iter()
            .zip(&actions)
            .map(|(a, shown)| {
                let mut line = format!(
                    "{} → exit {} ({}, rule {})",
                    sanitize_for_terminal(&a.shown()),
                    a.answer.exit,
                    sanitize_for_terminal(&a.source),
                    sanitize_for_terminal(&a.rule),
                );
                for l in stdin_shown(shown) {
                    line.push('\n');
                    line.push_str(&l);
                }
                line
            })
            .collect::<Vec<_>>(),
    );
    if let Some(l) = &r.replay_of {
        println!("replay of: {} (novel calls: {})", l.baseline, l.novel);
    }
    for why in &reh.incomplete {
        println!("incomplete: {}", sanitize_for_terminal(why));
    }
    println!(
        "stripped: {}",
        if reh.stripped.is_empty() {
            "none".into()
        } else {
            reh.stripped.join(", ")
        }
    );
    println!(
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
            .map(|f| format!(" — {}", sanitize_for_terminal(&f.message)))
            .unwrap_or_default();
        println!("decision: {}{first}", decision_painted(v.decision));
        println!("approval: {}", approval_line(r));
        if v.reasons.len() > 1 || (v.decision != Decision::Promote && !v.reasons.is_empty()) {
            list(
                "reasons",
                &v.reasons
                    .iter()
                    .map(|s| sanitize_for_terminal(s))
                    .collect::<Vec<_>>(),
            );
        }
        list(
            "notes",
            &v.notes
                .iter()
                .map(|s| sanitize_for_terminal(s))
                .collect::<Vec<_>>(),
        );
    }
    print_approvals(r);
    println!("state: {}", state_line(r));
}

/// The decision, coloured on terminals.
fn decision_painted(d: Decision) -> String {
    match d {
        Decision::Promote => paint(d.as_str(), Colour::Green),
        Decision::NeedsApproval => paint(d.as_str(), Colour::Yellow),
        Decision::Blocked => paint(d.as_str(), Colour::Red),
    }
}

/// Whether the run needs a person, from its decision (never the
/// classifier's score alone, so the two lines cannot disagree).
fn approval_line(r: &RunRecord) -> String {
    match r.verdict.as_ref().map(|v| v.decision) {
        Some(Decision::Promote) | None => "not required".into(),
        Some(Decision::NeedsApproval) => {
            format!("required: a reviewer runs `dryrun approve {}`", r.run_id)
        }
        Some(Decision::Blocked) => format!(
            "required, as an override of the block: a reviewer runs `dryrun approve --override {}`",
            r.run_id
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
            out.extend(t.lines().take(20).map(|l| format!("    | {}", esc(l))));
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
        s.run_id,
        s.submitted_at,
        s.submitted_by,
        s.expires_at
            .as_deref()
            .map(|t| format!(" · expires {t}"))
            .unwrap_or_default()
    ));
    out.push(format!("command: {}", esc(&s.command)));
    if !s.intent_summary.is_empty() {
        out.push(format!("intent: {}", esc(&s.intent_summary)));
    }
    if let Some(n) = &s.reviewer_note {
        out.push(format!("note for the reviewer: {}", esc(n)));
    }
    out.push(format!(
        "decision: {}{}",
        s.decision.as_deref().unwrap_or("none"),
        if s.override_required {
            " · approving it overrides the block (--override)"
        } else {
            ""
        }
    ));
    if let (Some(l), Some(n)) = (&s.risk_level, s.risk_score) {
        out.push(format!("risk: {l} (score {n})"));
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
        s.reasons.iter().map(|r| sanitize_for_terminal(r)).collect(),
    );
    section(
        &mut out,
        "forbidden paths touched",
        s.forbidden_paths_touched.iter().map(|p| esc(p)).collect(),
    );
    section(
        &mut out,
        "surprise paths",
        s.surprise_paths.iter().map(|p| esc(p)).collect(),
    );
    let c = &s.changes;
    out.push(format!(
        "changes: {} created · {} modified · {} deleted · {} metadata · {} identical rewrite(s)",
        c.created, c.modified, c.deleted, c.metadata, c.identical
    ));
    for g in &s.changes_by_dir {
        out.push(format!(
            "  {} ({})",
            sanitize_for_terminal(&g.dir),
            g.counts_text()
        ));
    }
    if s.would_be_actions.is_empty() {
        out.push("would-be actions: none".into());
    } else {
        out.push(format!(
            "would-be actions (answered by stubs; live.mode {}: {}):",
            s.live_mode,
            if s.live_mode == "rerun" {
                "made for real after approval"
            } else {
                "NOT made; promoting needs --local-only"
            }
        ));
        for a in &s.would_be_actions {
            out.push(format!("  {}", sanitize_for_terminal(&a.call)));
            out.extend(stdin_shown(a));
        }
    }
    out
}

/// Print [`review_summary_lines`].
pub fn print_review_summary(s: &ReviewSummary) {
    for l in review_summary_lines(s) {
        println!("{l}");
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
    println!(
        "changes: {} (summarised by directory; surprise and forbidden paths are named below; `dryrun show RUN --json` lists each):",
        crate::model::dir_summary::thousands(changes.len()),
    );
    print_dir_summary(&groups);
}

fn print_dir_summary(groups: &[crate::model::dir_summary::DirSummary]) {
    for g in groups {
        println!("  {} ({})", sanitize_for_terminal(&g.dir), g.counts_text());
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
        extra.push(format!("-> {}", esc(t)));
    }
    if c.symlink_escapes {
        extra.push("ESCAPES WORKSPACE".into());
    }
    if let Some(s) = &c.special {
        extra.push(s.clone());
    }
    if let Some(h) = &c.hardlink_of {
        extra.push(format!("hard link of {}", esc(h)));
    }
    if !c.xattrs_changed.is_empty() {
        extra.push(format!("xattrs: {}", c.xattrs_changed.join(", ")));
    }
    let ft = format!("{:?}", c.file_type).to_lowercase();
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!("  ({})", extra.join("; "))
    };
    format!(
        "  {mark} {} [{ft}]{extra}",
        escape_for_humans(&c.path_bytes())
    )
}

fn print_approvals(r: &RunRecord) {
    for a in &r.approvals {
        let verb = match a.action.as_str() {
            "approve" => "approved",
            "withdraw" => "withdrawn",
            _ => "rejected",
        };
        let ov = if a.overrode_block {
            " (override of a blocked verdict)"
        } else {
            ""
        };
        let note = if a.note.is_empty() {
            String::new()
        } else {
            format!(": {}", sanitize_for_terminal(&a.note))
        };
        println!(
            "{verb} by uid {} at {} via {}{ov}{note}",
            a.by.uid, a.at, a.authenticated_by
        );
    }
}

pub fn print_journal_report(r: &crate::journal::VerifyReport) {
    if r.ok {
        println!(
            "journal OK: {} records, head {} ({})",
            r.records,
            r.head.as_deref().unwrap_or("-"),
            r.anchor
        );
    } else if let Some(b) = &r.first_bad {
        println!(
            "journal BROKEN at line {} (record {}): {}",
            b.line,
            b.expected_seq,
            sanitize_for_terminal(&b.problem)
        );
        println!("the {} records before it verify; {}", r.records, r.anchor);
    } else {
        println!(
            "journal NOT VERIFIED: {} records chain, head {}, but {}",
            r.records,
            r.head.as_deref().unwrap_or("-"),
            sanitize_for_terminal(&r.anchor)
        );
    }
    if r.torn_tail_bytes > 0 {
        println!(
            "torn last record: {} bytes of an interrupted write (never acknowledged); removed at the next append",
            r.torn_tail_bytes
        );
    }
    println!("file: {}", esc(&r.path));
}

/// The run list; `queue`: the review queue (oldest first), with who
/// submitted each run and whether it needs an override.
pub fn print_run_list(runs: &[RunRecord], queue: bool) {
    if runs.is_empty() {
        println!(
            "{}",
            if queue {
                "no runs wait for approval"
            } else {
                "no runs"
            }
        );
        return;
    }
    if queue {
        for r in runs {
            let (d, cmd) = decision_and_command(r, 50);
            println!(
                "{}  {}  uid {:<6}  {:<14}{}  {}",
                r.run_id,
                r.created_at,
                r.submitted_by
                    .as_ref()
                    .map(|a| a.uid.to_string())
                    .unwrap_or("-".into()),
                d,
                if r.override_required {
                    " (override)"
                } else {
                    ""
                },
                cmd
            );
        }
        return;
    }
    for r in runs {
        let (d, cmd) = decision_and_command(r, 60);
        println!(
            "{}  {}  {:<17}  {:<14}  {}",
            r.run_id,
            r.created_at,
            r.state.as_str(),
            d,
            cmd
        );
    }
}

pub fn print_diff(d: &RunDiff) {
    if d.files.is_empty() {
        println!("run {}: no changes", d.run_id);
    }
    for f in &d.files {
        match (&f.diff, &f.note) {
            (Some(text), _) => print!("{}", escape_diff(text)),
            (None, Some(n)) => println!("{:?} {} ({n})", f.kind, esc(&f.path)),
            (None, None) => println!("{:?} {}", f.kind, esc(&f.path)),
        }
    }
}

/// Escape each line of a diff but keep the line structure.
fn escape_diff(text: &str) -> String {
    let mut out = String::new();
    for l in text.split_inclusive('\n') {
        let (body, nl) = match l.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (l, ""),
        };
        out.push_str(&esc(body));
        out.push_str(nl);
    }
    out
}

pub fn print_classification(command: &str, c: &crate::classify::Classification) {
    println!("command: {}", esc(command));
    println!(
        "risk: {} (score {}, permission {:?}) · approval {}",
        c.level,
        c.score,
        c.permission,
        if c.requires_approval {
            "required"
        } else {
            "not required"
        }
    );
    println!("decision: {}", c.decision.as_str());
    list(
        "commands",
        &c.commands.iter().map(|s| esc(s)).collect::<Vec<_>>(),
    );
    list(
        "reasons",
        &c.reasons
            .iter()
            .map(|s| sanitize_for_terminal(s))
            .collect::<Vec<_>>(),
    );
}

pub fn print_receipt(rc: &crate::engine::Receipt) {
    println!("receipt {} · run {}", rc.receipt_id, rc.run_id);
    println!("command: {}", esc(&rc.command));
    println!(
        "promoted: {} by uid {} ({}) · mode {}",
        rc.promoted_at, rc.promoted_by.uid, rc.promoted_by.via, rc.mode
    );
    println!("workspace: {}", esc(&rc.workspace));
    println!(
        "applied: {} step(s) · identical rewrites skipped: {} · change set {}",
        rc.live_result.applied_steps,
        rc.live_result.skipped_identical,
        &rc.change_set[..16.min(rc.change_set.len())]
    );
    if rc.changes.len() > SUMMARISE_CHANGES_OVER || rc.changes_total.is_some() {
        let groups = if rc.changes_by_dir.is_empty() {
            let pairs: Vec<(&str, ChangeKind)> = rc
                .changes
                .iter()
                .map(|c| (c.path.as_str(), c.kind))
                .collect();
            crate::model::dir_summary::summarise_by_dir(&pairs)
        } else {
            rc.changes_by_dir.clone()
        };
        println!(
            "changes: {} (summarised by directory; `dryrun receipt show ID --json` lists each):",
            crate::model::dir_summary::thousands(rc.changes_total.unwrap_or(rc.changes.len()))
        );
        print_dir_summary(&groups);
    }
    for c in rc
        .changes
        .iter()
        .take_while(|_| rc.changes.len() <= SUMMARISE_CHANGES_OVER)
    {
        let mark = match c.kind {
            ChangeKind::Created => "+",
            ChangeKind::Modified => "M",
            ChangeKind::Deleted => "-",
            ChangeKind::Metadata => "m",
            ChangeKind::Identical => "=",
        };
        let p = match &c.path_hex {
            Some(h) => escape_for_humans(&hex::decode(h).unwrap_or_default()),
            None => esc(&c.path),
        };
        println!("  {mark} {p}");
    }
    if !rc.calls_not_made.is_empty() {
        println!("calls answered by stubs in the rehearsal and NOT made live:");
        for c in &rc.calls_not_made {
            println!("  {}", sanitize_for_terminal(c));
        }
    }
    for n in &rc.live_result.notes {
        println!("note: {}", sanitize_for_terminal(n));
    }
    if let Some(j) = &rc.journal {
        println!(
            "journal: record {} ({})",
            j.seq,
            &j.hash[..16.min(j.hash.len())]
        );
    }
    if let Some(rb) = &rc.rolled_back {
        println!(
            "rolled back: {} by uid {} ({} step(s) undone)",
            rb.at, rb.by.uid, rb.steps
        );
    }
}

pub fn print_comparison(c: &crate::engine::RunComparison) {
    println!("run A {} · run B {}", c.run_a, c.run_b);
    if c.same_evidence {
        println!(
            "same evidence (hash {})",
            &c.evidence_hash_a[..16.min(c.evidence_hash_a.len())]
        );
        return;
    }
    if let Some(e) = &c.exit {
        let show = |code: Option<i32>, sig: Option<i32>, to: bool| {
            if to {
                "timed out".to_string()
            } else if let Some(s) = sig {
                format!("signal {s}")
            } else {
                code.map_or("-".into(), |x| x.to_string())
            }
        };
        println!(
            "exit: A {} · B {}",
            show(e.a, e.signal_a, e.timed_out_a),
            show(e.b, e.signal_b, e.timed_out_b)
        );
    }
    if c.decision_a != c.decision_b {
        println!(
            "decision: A {} · B {}",
            c.decision_a.as_deref().unwrap_or("-"),
            c.decision_b.as_deref().unwrap_or("-")
        );
    }
    for x in &c.changes.only_in_a {
        println!("only in A: {} {} ({})", x.kind, x.path, x.file_type);
    }
    for x in &c.changes.only_in_b {
        println!("only in B: {} {} ({})", x.kind, x.path, x.file_type);
    }
    let short = |h: &Option<String>| {
        h.as_deref()
            .map(|h| h[..12.min(h.len())].to_string())
            .unwrap_or("-".into())
    };
    for p in &c.changes.different {
        println!(
            "differs: {} · A {} {} · B {} {}",
            p.path,
            p.a.kind,
            short(&p.a.after),
            p.b.kind,
            short(&p.b.after)
        );
    }
    for x in &c.actions_only_in_a {
        println!(
            "would-be action only in A: {} → exit {}",
            sanitize_for_terminal(&x.call),
            x.exit
        );
    }
    for x in &c.actions_only_in_b {
        println!(
            "would-be action only in B: {} → exit {}",
            sanitize_for_terminal(&x.call),
            x.exit
        );
    }
    for b in &c.blocked_only_in_a {
        println!("blocked only in A: {}", sanitize_for_terminal(b));
    }
    for b in &c.blocked_only_in_b {
        println!("blocked only in B: {}", sanitize_for_terminal(b));
    }
    if let Some(d) = &c.stdout_diff {
        print!("{}", escape_diff(d));
    }
    if let Some(d) = &c.stderr_diff {
        print!("{}", escape_diff(d));
    }
}

/// A `runs` line's decision (`-` before the verdict) and its command,
/// escaped and cut to `width` characters with `...`.
fn decision_and_command(r: &RunRecord, width: usize) -> (&'static str, String) {
    let d = r
        .verdict
        .as_ref()
        .map(|v| v.decision.as_str())
        .unwrap_or("-");
    let mut cmd = esc(&r.command);
    if cmd.chars().count() > width {
        cmd = cmd.chars().take(width - 3).collect::<String>() + "...";
    }
    (d, cmd)
}
