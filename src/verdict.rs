//! Evidence + intent → decision with reasons.
//!
//! Checks run in a fixed order: forbidden paths first, then writes in a
//! read-only run, writes outside `expected_writes`, protected paths and
//! other files that run code later (a directory on a `PATH`, a new
//! executable), unsafe file kinds, network attempts, limits and exit
//! status (a result, not a block by itself: `exit.rs`). Every finding
//! carries the id of the rule
//! that produced it; the decision is the maximum over findings.

use serde::{Deserialize, Serialize};

use crate::classify::Classification;
use crate::envelope::{EnvelopeSpec, Mode};
use crate::model::{BlockedKind, Change, ChangeKind, FileType, LimitHit, promotion};
pub(crate) use crate::model::{Decision, Finding};
use crate::model::{HostReport, RehearsalReport};
use crate::policy::Level;
use crate::workspace::paths::{PathMatcher, escape_for_humans};

mod deps;
mod exit;
mod fidelity;
mod files;
mod view;
pub(crate) use files::keep_only_judged_times;
use files::{
    is_gitdir_pointer, newly_executable, world_writable_introduced, written_into_path_dir,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    pub surprise_paths: Vec<String>,
    pub forbidden_paths_touched: Vec<String>,
    /// `[rule] message`, most severe first.
    pub reasons: Vec<String>,
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// Context that explains the decision without changing it.
    #[serde(default)]
    pub notes: Vec<String>,
    /// What to change so the run goes through (`model::advice`), one hint
    /// per kind of finding that held it back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_change: Vec<String>,
}

fn show(c: &Change) -> String {
    escape_for_humans(&c.path_bytes())
}

/// Does the change count as a write at all? An identical rewrite (same bytes,
/// same mode, only timestamps) changes nothing a promotion would apply.
fn is_write(c: &Change) -> bool {
    c.kind != ChangeKind::Identical
}

/// What the verdict needs besides the envelope and the evidence.
#[derive(Default)]
pub(crate) struct JudgeContext<'a> {
    /// Paths whose change needs approval even when not forbidden.
    pub protected: Option<&'a PathMatcher>,
    /// The classifier's result for the command.
    pub risk: Option<&'a Classification>,
    /// Directories inside the workspace on a `PATH` that counts
    /// (workspace-relative, `""`: the root; see `engine::bound`).
    pub path_dirs: &'a [String],
    /// A package manager's run, summarised (`model::deps`): files in its
    /// trees are judged per package instead of against protected paths.
    pub deps: Option<&'a crate::model::deps::DependencyReport>,
}

/// [`judge_with`] without a context (the tests' shorthand).
#[cfg(test)]
pub(crate) fn judge(spec: &EnvelopeSpec, r: &RehearsalReport, host: &HostReport) -> Verdict {
    judge_with(spec, r, host, &JudgeContext::default())
}

/// The combined decision: the maximum of the classifier's and the evidence's
/// findings, every one with its rule id.
// Long on purpose: the rule book, rules 0 to 6 in order, each adding to one findings list.
pub(crate) fn judge_with(
    spec: &EnvelopeSpec,
    r: &RehearsalReport,
    host: &HostReport,
    cx: &JudgeContext,
) -> Verdict {
    let mut findings: Vec<Finding> = Vec::new();
    let mut notes = Vec::new();
    let mut add = |rule: &str, decision: Decision, message: String| {
        findings.push(Finding {
            rule: rule.into(),
            decision,
            message,
        })
    };

    // 0. a command that must run again live always needs a human.
    if spec.live.mode == crate::envelope::LiveMode::Rerun {
        add(
            "live.rerun",
            Decision::NeedsApproval,
            format!(
                "the live lane will run this command again (network: {}, host variables: {}); a reviewer must approve",
                match spec.live.network {
                    crate::envelope::LiveNetwork::None => "none",
                    crate::envelope::LiveNetwork::Host => "host",
                },
                if spec.live.env_from_host.is_empty() {
                    "none".to_string()
                } else {
                    spec.live.env_from_host.join(", ")
                }
            ),
        );
    }

    // 0b. shadow stubs: what the command would have done remotely.
    for a in r.would_be_actions.iter().filter(|a| a.source == "novel") {
        add(
            "replay.novel_call",
            Decision::Blocked,
            format!(
                "replay (strict): the recording never saw `{}`; the replay failed at that call",
                a.shown()
            ),
        );
    }
    // Records that could not be read (unparsable, too large, past the cap)
    // were calls answered by a stub all the same.
    if !r.would_be_actions.is_empty() || r.would_be_actions_dropped > 0 {
        let n = r.would_be_actions.len() + r.would_be_actions_dropped;
        let mut shown: Vec<String> = r
            .would_be_actions
            .iter()
            .take(5)
            .map(|a| format!("`{}`", a.shown()))
            .collect();
        if shown.is_empty() {
            shown.push(format!("{n} whose record could not be read"));
        } else if n > shown.len() {
            shown.push(format!("and {} more", n - shown.len()));
        }
        let live = match spec.live.mode {
            crate::envelope::LiveMode::Apply => {
                "the live lane (mode apply) writes only the local changes and will NOT make these calls; declare live.mode: rerun to carry them out"
            }
            crate::envelope::LiveMode::Rerun => {
                "the live lane (mode rerun) will make them for real"
            }
        };
        add(
            "stubs.would_be_action",
            Decision::NeedsApproval,
            format!(
                "{n} call(s) with a remote effect were answered by stubs instead of running: {}; {live}",
                shown.join(", ")
            ),
        );
    }
    if !spec.stubs.is_empty() {
        let ids: Vec<&str> = spec.stubs.iter().map(|s| s.id.as_str()).collect();
        add(
            "stubs.override",
            Decision::NeedsApproval,
            format!(
                "the envelope replaces tool answers ({}): the rehearsal shows where those answers lead, not necessarily what the real tools answer",
                ids.join(", ")
            ),
        );
    }
    if r.blocked.iter().any(|b| b.kind == BlockedKind::Network)
        || r.egress.iter().any(|e| !e.allowed)
    {
        notes.push(
            "the rehearsal is incomplete: the command needed the network and no stub answered, so what it did after that call is not what it does live"
                .to_string(),
        );
    }

    // 1. forbidden paths: any touch, even an identical rewrite.
    let mut forbidden = Vec::new();
    for c in &r.changes {
        if let Some(p) = spec.forbidden.first_match(&c.path_bytes()) {
            forbidden.push(c.path.clone());
            add(
                "intent.forbidden_paths",
                Decision::Blocked,
                format!("{} {} which intent forbids ({p})", verb(c), show(c)),
            );
        }
    }

    // 2./3. read-only runs and expected writes.
    let mut surprises = Vec::new();
    let writes: Vec<&Change> = r.changes.iter().filter(|c| is_write(c)).collect();
    match spec.mode {
        Mode::ReadOnly => {
            for c in &writes {
                surprises.push(c.path.clone());
                add(
                    "intent.read_only",
                    Decision::Blocked,
                    format!("{} {} but the run was declared read_only", verb(c), show(c)),
                );
            }
        }
        Mode::Mutating => {
            let allowed = |c: &Change| spec.expected_writes.matches(&c.path_bytes());
            for c in &writes {
                if allowed(c) || forbidden.contains(&c.path) {
                    continue;
                }
                // A directory created only to hold expected files is part of
                // those writes (a file turned into a directory is not).
                if c.file_type == FileType::Dir && c.kind == ChangeKind::Created {
                    let prefix = format!("{}/", c.path);
                    if writes
                        .iter()
                        .any(|o| o.path.starts_with(&prefix) && allowed(o))
                    {
                        continue;
                    }
                }
                surprises.push(c.path.clone());
                let allowed_desc = if spec.expected_writes.is_empty() {
                    "intent expected no writes".to_string()
                } else {
                    format!(
                        "intent only allowed {}",
                        spec.expected_writes.patterns.join(", ")
                    )
                };
                add(
                    "intent.expected_writes",
                    Decision::Blocked,
                    format!("{} {} but {allowed_desc}", verb(c), show(c)),
                );
            }
        }
    }

    // 3b. protected paths: where agents persist or escalate.
    // A tree's files skip the list only inside a package's own directory,
    // and only when the tree itself is no protected path.
    let in_dep_tree = |c: &Change| deps::in_tree(cx.deps, cx.protected, c);
    let in_dep_package = |c: &Change| deps::in_package(cx.deps, cx.protected, c);
    if let Some(prot) = cx.protected {
        for c in &writes {
            if forbidden.contains(&c.path) || in_dep_package(c) {
                continue;
            }
            if let Some(p) = prot.first_match(&c.path_bytes()) {
                add(
                    "protected.path",
                    Decision::NeedsApproval,
                    format!(
                        "{} {}, a protected path ({p}) where agents persist or escalate",
                        verb(c),
                        show(c)
                    ),
                );
            } else if is_gitdir_pointer(c) {
                add(
                    "protected.path",
                    Decision::NeedsApproval,
                    format!(
                        "{} {}, a protected path (a .git that is not a directory: a gitdir pointer, which can send git to another repository's config and hooks)",
                        verb(c),
                        show(c)
                    ),
                );
            }
        }
    }

    // 3c. files that run code later without a pattern naming them: what
    // lands in a directory on a PATH, and files newly made executable.
    for c in &writes {
        if forbidden.contains(&c.path) {
            continue;
        }
        if let Some(m) = written_into_path_dir(c, cx.path_dirs)
            && !cx
                .deps
                .is_some_and(|d| d.declared_bin_links.contains(&c.path))
        {
            add("protected.on_path", Decision::NeedsApproval, m);
        }
        if let Some(m) = newly_executable(c)
            && !in_dep_tree(c)
        {
            add("protected.executable", Decision::NeedsApproval, m);
        }
    }

    // 3d. a package manager's run, judged by what it installed.
    if let Some(d) = cx.deps {
        for f in deps::dependency_findings(d, &r.changes, &mut notes) {
            add(&f.rule, f.decision, f.message);
        }
    }

    // 4. what the live lane could never write as rehearsed: the same rule
    // (and the same words) the promotion planner uses.
    for c in &r.changes {
        for refusal in promotion::refusals(c) {
            add(refusal.rule(), Decision::Blocked, refusal.message(&show(c)));
        }
        if let Some((rule, what)) = world_writable_introduced(c) {
            add(
                rule,
                Decision::NeedsApproval,
                format!(
                    "{} {} {what} (mode {:o})",
                    verb(c),
                    show(c),
                    c.mode_after.unwrap_or(0) & 0o7777
                ),
            );
        }
        if let Some(other) = &c.hardlink_of {
            notes.push(format!(
                "{} is a hard link of {}",
                show(c),
                escape_for_humans(other.as_bytes())
            ));
        }
    }

    // 5. blocked attempts observed in the sandbox.
    for b in &r.blocked {
        add(
            b.kind.rule(),
            Decision::Blocked,
            format!("{}: {}", b.kind, b.detail),
        );
    }

    // 5a. egress, by name: outside the allowlist blocks; the rest is listed.
    for e in &r.egress {
        let dest = escape_for_humans(e.destination().as_bytes());
        let why = e.reason.as_deref().unwrap_or("");
        if !e.allowed {
            let m = format!(
                "the command tried to reach {dest} ({}): {why}",
                e.how.as_str()
            );
            add("evidence.network", Decision::Blocked, m);
        } else if e.how == crate::model::EgressHow::Proxy {
            notes.push(format!(
                "would have contacted {dest} through the egress proxy ({} bytes out, {} in){}",
                e.bytes_out,
                e.bytes_in,
                if why.is_empty() {
                    String::new()
                } else {
                    format!("; {why}")
                }
            ));
        }
    }

    // 5a, continued: declared host services (real effects), what an ordinary
    // user's rehearsal could not change (unmapped ids), writes outside the
    // workspace and what the sandbox hid (the view).
    for f in fidelity::services(&r.egress, spec.live.mode, &mut notes)
        .into_iter()
        .chain(fidelity::unmapped(&r.unmapped))
        .chain(view::outside_writes(r, &mut notes))
        .chain(view::hidden(r))
    {
        add(&f.rule, f.decision, f.message);
    }

    // 5b. the classifier's judgement of the command itself.
    if let Some(risk) = cx.risk {
        if risk.decision == Decision::Blocked
            && let Some(first) = risk.reasons.first()
            && let Some(rest) = first.strip_prefix("[risk.opaque_one_liner] ")
        {
            add("risk.opaque_one_liner", Decision::Blocked, rest.to_string());
        }
        if risk.requires_approval {
            let mut any = false;
            for f in &risk.findings {
                if f.level >= Level::Admin || f.approval {
                    any = true;
                    let msg = if f.command.is_empty() {
                        f.reason.clone()
                    } else {
                        format!("{} (in: {})", f.reason, f.command)
                    };
                    add(&f.rule, Decision::NeedsApproval, msg);
                }
            }
            if !any {
                add(
                    "risk.score",
                    Decision::NeedsApproval,
                    format!(
                        "the command's risk score {} reaches the approval threshold",
                        risk.score
                    ),
                );
            }
        }
    }

    // 6. limits and exit status.
    let mut hit: Vec<LimitHit> = r
        .limits_hit
        .iter()
        .chain(host.limits_hit.iter())
        .cloned()
        .collect();
    hit.sort();
    hit.dedup();
    for l in &hit {
        add(
            &format!("limits.{l}"),
            Decision::Blocked,
            format!("the rehearsal hit its {l} limit"),
        );
    }
    if host.killed_by_watchdog && !hit.contains(&LimitHit::Timeout) {
        add(
            "limits.timeout",
            Decision::Blocked,
            "the rehearsal was killed by the watchdog".into(),
        );
    }
    match exit::exit_status_finding(r, spec.envelope.intent.require_success) {
        Ok(note) => notes.extend(note),
        Err(f) => add(&f.rule, f.decision, f.message),
    }
    if r.leftover_processes_killed > 0 {
        add(
            "evidence.background_processes",
            Decision::Blocked,
            format!(
                "{} process(es) were still running when the command ended and were killed; \
                 live they would keep running, and a rehearsal cannot show what they would do",
                r.leftover_processes_killed
            ),
        );
    }
    if r.landlock_abi == 0 {
        notes.push(
            "Landlock was not available: the run relied on namespaces and mounts alone".into(),
        );
    }
    let identical = r
        .changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Identical)
        .count();
    if identical > 0 {
        notes.push(format!(
            "{identical} file(s) rewritten with identical content (not counted as writes)"
        ));
    }
    notes.push(if spec.network.is_empty() {
        "the network was cut during the rehearsal (only loopback existed)".into()
    } else {
        let allow: Vec<String> = spec.network.iter().map(|p| p.to_string()).collect();
        format!(
            "the network was reachable only through the run's egress proxy, to {}",
            allow.join(", ")
        )
    });

    findings.sort_by_key(|f| std::cmp::Reverse(f.decision));
    let decision = findings
        .iter()
        .map(|f| f.decision)
        .max()
        .unwrap_or(Decision::Promote);
    if decision == Decision::Promote {
        notes.insert(
            0,
            format!("{} change(s), all within the declared intent", writes.len()),
        );
    }
    surprises.sort();
    surprises.dedup();
    forbidden.sort();
    forbidden.dedup();
    Verdict {
        decision,
        surprise_paths: surprises,
        forbidden_paths_touched: forbidden,
        reasons: findings
            .iter()
            .map(|f| format!("[{}] {}", f.rule, f.message))
            .collect(),
        to_change: crate::model::advice::to_change(&findings),
        findings,
        notes,
    }
}

fn verb(c: &Change) -> &'static str {
    match c.kind {
        ChangeKind::Created => "created",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Metadata => "changed metadata of",
        ChangeKind::Identical => "rewrote",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::parse_envelope;

    /// A change as the walk records it: hashes of what a file or link
    /// held before (unless created) and holds after (unless deleted).
    pub(super) fn change(path: &str, kind: ChangeKind, ft: FileType) -> Change {
        let mut c = Change::new(path.as_bytes(), kind, ft);
        let h = |s: &str| Some(blake3::hash(s.as_bytes()).to_hex().to_string());
        if ft != FileType::Dir {
            if kind != ChangeKind::Created {
                c.before = h("old");
            }
            if kind != ChangeKind::Deleted {
                c.after = h("new");
                if ft == FileType::Symlink {
                    c.symlink_target = Some("new".into());
                }
            }
        }
        c
    }

    pub(super) fn spec(yaml: &str) -> EnvelopeSpec {
        parse_envelope("t", yaml)
            .unwrap()
            .validate(
                Some(std::path::Path::new("/tmp")),
                &crate::workspace::owner::OwnerSession::start(
                    &crate::workspace::owner::Creds::current(),
                )
                .unwrap(),
            )
            .unwrap()
    }

    pub(super) fn ok_report(changes: Vec<Change>) -> RehearsalReport {
        RehearsalReport {
            exit_code: Some(0),
            changes,
            landlock_abi: 7,
            ..Default::default()
        }
    }

    pub(super) fn with_modes(mut c: Change, before: Option<u32>, after: Option<u32>) -> Change {
        c.mode_before = before;
        c.mode_after = after;
        c
    }

    #[test]
    fn world_writable_modes_need_approval() {
        let s = spec("command: x\nintent: {expected_writes: ['**']}\n");
        let cases = [
            (
                ChangeKind::Created,
                FileType::File,
                None,
                Some(0o100666),
                Some("evidence.world_writable"),
            ),
            (
                ChangeKind::Created,
                FileType::File,
                None,
                Some(0o100644),
                None,
            ),
            (
                ChangeKind::Metadata,
                FileType::File,
                Some(0o100644),
                Some(0o100646),
                Some("evidence.world_writable"),
            ),
            (
                ChangeKind::Metadata,
                FileType::Dir,
                Some(0o40755),
                Some(0o40777),
                Some("evidence.world_writable"),
            ),
            (
                ChangeKind::Created,
                FileType::Dir,
                None,
                Some(0o41777),
                Some("evidence.world_writable_sticky"),
            ),
            (
                ChangeKind::Metadata,
                FileType::Dir,
                Some(0o41777),
                Some(0o40777),
                Some("evidence.world_writable"),
            ),
            // Already world-writable before: not introduced by this run.
            (
                ChangeKind::Modified,
                FileType::File,
                Some(0o100666),
                Some(0o100666),
                None,
            ),
            (
                ChangeKind::Metadata,
                FileType::Dir,
                Some(0o40777),
                Some(0o41777),
                None,
            ),
            (
                ChangeKind::Created,
                FileType::Symlink,
                None,
                Some(0o120777),
                None,
            ),
            (
                ChangeKind::Deleted,
                FileType::File,
                Some(0o100666),
                None,
                None,
            ),
        ];
        for (kind, ft, before, after, rule) in cases {
            let c = with_modes(change("d/x", kind, ft), before, after);
            let v = judge(&s, &ok_report(vec![c]), &HostReport::default());
            match rule {
                Some(rule) => {
                    assert_eq!(v.decision, Decision::NeedsApproval, "{kind:?} {after:?}");
                    assert!(
                        v.findings.iter().any(|f| f.rule == rule),
                        "{kind:?} {after:?}: {:?}",
                        v.reasons
                    );
                }
                None => assert_eq!(
                    v.decision,
                    Decision::Promote,
                    "{kind:?} {after:?}: {:?}",
                    v.reasons
                ),
            }
        }
    }

    #[test]
    fn a_git_file_at_any_depth_is_protected() {
        let s = spec("command: x\nintent: {expected_writes: ['**']}\n");
        let prot = PathMatcher::at_any_depth(&[".git/hooks/".into()]).unwrap();
        let cx = JudgeContext {
            protected: Some(&prot),
            ..Default::default()
        };
        for (path, ft, kind, protected) in [
            (".git", FileType::File, ChangeKind::Modified, true),
            ("vendor/lib/.git", FileType::File, ChangeKind::Created, true),
            ("sub/.git", FileType::Symlink, ChangeKind::Created, true),
            ("sub/.git", FileType::Dir, ChangeKind::Created, false),
            ("sub/.git", FileType::File, ChangeKind::Deleted, false),
            ("sub/x.git", FileType::File, ChangeKind::Created, false),
            (
                "a/b/.git/hooks/post-checkout",
                FileType::File,
                ChangeKind::Created,
                true,
            ),
        ] {
            let v = judge_with(
                &s,
                &ok_report(vec![change(path, kind, ft)]),
                &HostReport::default(),
                &cx,
            );
            assert_eq!(
                v.findings.iter().any(|f| f.rule == "protected.path"),
                protected,
                "{path} {ft:?} {kind:?}: {:?}",
                v.reasons
            );
        }
    }

    #[test]
    fn decision_is_ordered() {
        assert!(Decision::Promote < Decision::NeedsApproval);
        assert!(Decision::NeedsApproval < Decision::Blocked);
        assert_eq!(
            [
                Decision::Promote,
                Decision::Blocked,
                Decision::NeedsApproval
            ]
            .iter()
            .max(),
            Some(&Decision::Blocked)
        );
    }

    #[test]
    fn surprise_path_blocks_with_reason() {
        let s = spec("command: x\nintent: {expected_writes: ['blog/*.md']}\n");
        let r = ok_report(vec![
            change("blog/a.md", ChangeKind::Modified, FileType::File),
            change("blog/index.html", ChangeKind::Modified, FileType::File),
        ]);
        let v = judge(&s, &r, &HostReport::default());
        assert_eq!(v.decision, Decision::Blocked);
        assert_eq!(v.surprise_paths, vec!["blog/index.html"]);
        assert!(
            v.reasons[0].contains("touched")
                || v.reasons[0]
                    .contains("modified blog/index.html but intent only allowed blog/*.md"),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn matching_intent_promotes_and_parent_dirs_are_fine() {
        let s = spec("command: x\nintent: {expected_writes: ['dist/**/*.js']}\n");
        let r = ok_report(vec![
            change("dist", ChangeKind::Created, FileType::Dir),
            change("dist/a", ChangeKind::Created, FileType::Dir),
            change("dist/a/x.js", ChangeKind::Created, FileType::File),
            change("notes.txt", ChangeKind::Identical, FileType::File),
        ]);
        let v = judge(&s, &r, &HostReport::default());
        assert_eq!(v.decision, Decision::Promote, "{:?}", v.reasons);
    }

    #[test]
    fn forbidden_read_only_exit_and_limits() {
        let s = spec("command: x\nintent: {mode: read_only, forbidden_paths: ['.git/']}\n");
        let mut r = ok_report(vec![change(
            ".git/config",
            ChangeKind::Identical,
            FileType::File,
        )]);
        r.exit_code = Some(2);
        r.limits_hit = vec![LimitHit::Timeout];
        let v = judge(&s, &r, &HostReport::default());
        assert_eq!(v.decision, Decision::Blocked);
        assert_eq!(v.forbidden_paths_touched, vec![".git/config"]);
        let joined = v.reasons.join("\n");
        assert!(joined.contains("[intent.forbidden_paths]"), "{joined}");
        assert!(!joined.contains("[evidence.exit_status]"), "{joined}");
        assert!(joined.contains("[limits.timeout]"), "{joined}");
        // The exit status is reported, as a result.
        assert!(
            v.notes.iter().any(|n| n.contains("exited with status 2")),
            "{:?}",
            v.notes
        );
    }

    #[test]
    fn a_failure_inside_the_intent_promotes_unless_success_is_required() {
        let mut r = ok_report(vec![change(
            "src/a.py",
            ChangeKind::Modified,
            FileType::File,
        )]);
        r.exit_code = Some(1);
        let s = spec("command: x\nintent: {expected_writes: ['src/**']}\n");
        let v = judge(&s, &r, &HostReport::default());
        assert_eq!(v.decision, Decision::Promote, "{:?}", v.reasons);
        let s = spec("command: x\nintent: {expected_writes: ['src/**'], require_success: true}\n");
        let v = judge(&s, &r, &HostReport::default());
        assert_eq!(v.decision, Decision::Blocked);
        assert!(
            v.reasons[0].starts_with("[evidence.exit_status] the command exited with status 1"),
            "{:?}",
            v.reasons
        );
    }
}
