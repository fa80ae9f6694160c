//! Human output besides the evidence block: the run list, diffs and
//! comparisons, the journal's verification, classifications and receipts.
//! The same rules as the evidence block: fields through [`Shown`], lines
//! through `say!`.

use super::{
    ChangeKind, RunRecord, SUMMARISE_CHANGES_OVER, Shown, escape_for_humans, head, list, msg,
    print_dir_summary, raw, say, split_lines,
};
use crate::engine::textdiff::RunDiff;

pub fn print_journal_report(r: &crate::journal::VerifyReport) {
    if r.ok {
        say!(
            "journal OK: {} records, head {} ({})",
            r.records,
            Shown::raw(r.head.as_deref().unwrap_or("-")),
            Shown::message(&r.anchor)
        );
    } else if let Some(b) = &r.first_bad {
        say!(
            "journal BROKEN at line {} (record {}): {}",
            b.line,
            b.expected_seq,
            Shown::message(&b.problem)
        );
        say!(
            "the {} records before it verify; {}",
            r.records,
            Shown::message(&r.anchor)
        );
    } else {
        say!(
            "journal NOT VERIFIED: {} records chain, head {}, but {}",
            r.records,
            Shown::raw(r.head.as_deref().unwrap_or("-")),
            Shown::message(&r.anchor)
        );
    }
    if r.torn_tail_bytes > 0 {
        say!(
            "torn last record: {} bytes of an interrupted write (never acknowledged); removed at the next append",
            r.torn_tail_bytes
        );
    }
    say!("file: {}", Shown::raw(&r.path));
}

/// The run list; `queue`: the review queue (oldest first), with who
/// submitted each run and whether it needs an override.
pub fn print_run_list(runs: &[RunRecord], queue: bool) {
    if runs.is_empty() {
        say!(
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
            say!(
                "{}  {}  uid {:<6}  {:<14}{}  {}",
                Shown::raw(&r.run_id),
                Shown::raw(&r.created_at),
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
        say!(
            "{}  {}  {:<17}  {:<14}  {}",
            Shown::raw(&r.run_id),
            Shown::raw(&r.created_at),
            r.state.as_str(),
            d,
            cmd
        );
    }
}

pub fn print_diff(d: &RunDiff) {
    if d.files.is_empty() {
        say!("run {}: no changes", Shown::raw(&d.run_id));
    }
    for f in &d.files {
        match (&f.diff, &f.note) {
            (Some(text), _) => print_text_diff(text),
            (None, Some(n)) => say!(
                "{:?} {} ({})",
                f.kind,
                Shown::raw(&f.path),
                Shown::message(n)
            ),
            (None, None) => say!("{:?} {}", f.kind, Shown::raw(&f.path)),
        }
    }
}

/// A unified diff, line by line, each line shown as it will land (only
/// controls made visible): a tab in the file is `⟦TAB⟧`, a literal `\t`
/// stays `\t`.
fn print_text_diff(text: &str) {
    for l in split_lines(text) {
        say!("{}", Shown::raw(l));
    }
}

pub fn print_classification(command: &str, c: &crate::classify::Classification) {
    say!("command: {}", Shown::raw(command));
    say!(
        "risk: {} (score {}, permission {:?}) · approval {}",
        Shown::raw(&c.level),
        c.score,
        c.permission,
        if c.requires_approval {
            "required"
        } else {
            "not required"
        }
    );
    say!("decision: {}", c.decision.as_str());
    list(
        "commands",
        &c.commands.iter().map(|s| raw(s)).collect::<Vec<_>>(),
    );
    list(
        "reasons",
        &c.reasons.iter().map(|s| msg(s)).collect::<Vec<_>>(),
    );
}

/// `dryrun classify --explain`: each finding with its rule id, the
/// principle the rule comes from, its level and score.
pub fn print_explanation(c: &crate::classify::Classification) {
    let explained = c.explain();
    if explained.is_empty() {
        say!("explain: no finding (only reads; nothing to judge)");
        return;
    }
    say!("explain:");
    for e in explained {
        say!(
            "  [{}] {:?} {} · principle: {} ({})",
            Shown::raw(&e.rule),
            e.level,
            e.score,
            Shown::raw(
                serde_json::to_value(e.principle)
                    .expect("serializes")
                    .as_str()
                    .unwrap_or_default()
            ),
            Shown::raw(e.principle_text)
        );
        say!("      {}", msg(&e.reason));
        if !e.command.is_empty() {
            say!("      in: {}", raw(&e.command));
        }
    }
}

pub fn print_receipt(rc: &crate::engine::Receipt) {
    say!(
        "receipt {} · run {}",
        Shown::raw(&rc.receipt_id),
        Shown::raw(&rc.run_id)
    );
    say!("command: {}", Shown::raw(&rc.command));
    say!(
        "promoted: {} by uid {} ({}) · mode {}",
        Shown::raw(&rc.promoted_at),
        rc.promoted_by.uid,
        Shown::raw(&rc.promoted_by.via),
        rc.mode
    );
    say!("workspace: {}", Shown::raw(&rc.workspace));
    say!(
        "applied: {} step(s){} · identical rewrites skipped: {} · change set {}",
        rc.live_result.applied_steps,
        match rc.live_result.times_set {
            0 => String::new(),
            n => format!(" · times set: {n}"),
        },
        rc.live_result.skipped_identical,
        head(&rc.change_set, 16)
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
        say!(
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
            None => raw(&c.path),
        };
        say!("  {mark} {p}");
    }
    if !rc.calls_not_made.is_empty() {
        say!("calls answered by stubs in the rehearsal and NOT made live:");
        for c in &rc.calls_not_made {
            say!("  {}", Shown::message(c));
        }
    }
    for n in &rc.live_result.notes {
        say!("note: {}", Shown::message(n));
    }
    if let Some(j) = &rc.journal {
        say!("journal: record {} ({})", j.seq, head(&j.hash, 16));
    }
    if let Some(rb) = &rc.rolled_back {
        say!(
            "rolled back: {} by uid {} ({} step(s) undone)",
            Shown::raw(&rb.at),
            rb.by.uid,
            rb.steps
        );
    }
}

// Long on purpose: one section per kind of difference, in reading order.
pub fn print_comparison(c: &crate::engine::RunComparison) {
    say!(
        "run A {} · run B {}",
        Shown::raw(&c.run_a),
        Shown::raw(&c.run_b)
    );
    if c.same_evidence {
        say!("same evidence (hash {})", head(&c.evidence_hash_a, 16));
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
        say!(
            "exit: A {} · B {}",
            show(e.a, e.signal_a, e.timed_out_a),
            show(e.b, e.signal_b, e.timed_out_b)
        );
    }
    if c.decision_a != c.decision_b {
        say!(
            "decision: A {} · B {}",
            Shown::raw(c.decision_a.as_deref().unwrap_or("-")),
            Shown::raw(c.decision_b.as_deref().unwrap_or("-"))
        );
    }
    // Paths in the comparison are escaped already (`compare_runs`).
    for (side, xs) in [("A", &c.changes.only_in_a), ("B", &c.changes.only_in_b)] {
        for x in xs {
            say!(
                "only in {side}: {} {} ({})",
                Shown::raw(&x.kind),
                Shown::message(&x.path),
                Shown::raw(&x.file_type)
            );
        }
    }
    let short = |h: &Option<String>| h.as_deref().map(|h| head(h, 12)).unwrap_or("-".into());
    for p in &c.changes.different {
        say!(
            "differs: {} · A {} {} · B {} {}",
            Shown::message(&p.path),
            Shown::raw(&p.a.kind),
            short(&p.a.after),
            Shown::raw(&p.b.kind),
            short(&p.b.after)
        );
    }
    for (side, actions) in [("A", &c.actions_only_in_a), ("B", &c.actions_only_in_b)] {
        for x in actions {
            say!(
                "would-be action only in {side}: {} → exit {}",
                Shown::message(&x.call),
                x.exit
            );
        }
    }
    for b in &c.blocked_only_in_a {
        say!("blocked only in A: {}", Shown::message(b));
    }
    for b in &c.blocked_only_in_b {
        say!("blocked only in B: {}", Shown::message(b));
    }
    if let Some(d) = &c.stdout_diff {
        print_text_diff(d);
    }
    if let Some(d) = &c.stderr_diff {
        print_text_diff(d);
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
    let mut cmd = raw(&r.command);
    if cmd.chars().count() > width {
        cmd = cmd.chars().take(width - 3).collect();
        // Never half an escape: cut before an escape the width splits.
        if let Some(open) = cmd.rfind(crate::model::text::OPEN)
            && !cmd[open..].contains(crate::model::text::CLOSE)
        {
            cmd.truncate(open);
        }
        cmd.push_str("...");
    }
    (d, cmd)
}
