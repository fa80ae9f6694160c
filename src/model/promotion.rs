//! What may never be promoted: the one rule the verdict and the live lane's
//! planner both call, so a run judged `promote` is a run the planner can
//! carry out.
//!
//! [`refusals`] looks at one change of the evidence and lists why the live
//! lane could never write it as rehearsed. The verdict turns every refusal
//! into a `blocked` finding (rule [`Refusal::rule`]); the planner refuses
//! the whole change set with the same texts ([`Refusal::message`]). A
//! reviewer's override approves a blocked run, it does not make such a change
//! promotable: the planner still refuses it.
//!
//! What the planner may still refuse besides these is not a property of the
//! change but of the state directory at promotion time (kept content removed
//! by retention, a workspace that drifted since the rehearsal).
//!
//! [`check_stubbed_calls`] is the one rule of stubbed work: a run whose
//! rehearsal answered calls with stubs (would-be actions) is not promoted in
//! `live.mode: apply` as if those calls had happened. Its local writes go
//! live only when the promotion says so (`--local-only`), and then the calls
//! that will not be made are shown and journaled. Every door's promotion
//! reaches the live lane, which asks this rule; the agent-host hook asks it
//! before it offers a promotion.

use super::change::{Change, ChangeKind, FileType};
use super::live::LiveMode;
use super::stubs::WouldBeAction;
use super::text::{Shown, escape_for_humans};

/// One reason a change can never be promoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A symlink that resolves outside the workspace.
    SymlinkEscapes { target: String },
    /// A setuid or setgid file.
    SetId { mode: u32 },
    /// A copy of a shadow stub's script: live it would be the real tool.
    StubCopy { tool: String },
    /// A fifo, socket or device.
    SpecialFile { what: String },
    /// Its content did not fit the kept-content budget: no hash, no blob.
    ContentNotKept,
    /// The command's user could not read it: no hash, no blob.
    ContentWithheld,
    /// A `security.*` or `trusted.*` attribute changed.
    PrivilegedXattr { name: String },
    /// Other extended attributes changed (their values are not kept).
    XattrsNotKept { names: Vec<String> },
    /// What it replaced has no recorded hash to check before writing.
    NoBeforeHash,
    /// A file written without a hash of its new content.
    NoContentHash,
    /// A symlink whose target was not recorded.
    SymlinkTargetMissing,
    /// A symlink whose target is not valid UTF-8 (the record holds it lossily).
    SymlinkTargetInexact,
}

impl Refusal {
    /// The verdict rule id this refusal is reported under.
    pub(crate) fn rule(&self) -> &'static str {
        match self {
            Refusal::SymlinkEscapes { .. } => "evidence.symlink_escape",
            Refusal::SetId { .. } => "evidence.setid",
            Refusal::StubCopy { .. } => "stubs.copied_stub",
            Refusal::SpecialFile { .. } => "evidence.special_file",
            Refusal::ContentNotKept => "evidence.content_not_kept",
            Refusal::ContentWithheld => "evidence.content_withheld",
            Refusal::PrivilegedXattr { .. } | Refusal::XattrsNotKept { .. } => "evidence.xattrs",
            Refusal::NoBeforeHash => "evidence.no_before_hash",
            Refusal::NoContentHash => "evidence.no_content_hash",
            Refusal::SymlinkTargetMissing | Refusal::SymlinkTargetInexact => {
                "evidence.symlink_target"
            }
        }
    }

    /// The text both the verdict and the planner give; `shown` is the
    /// change's path as escaped for people.
    pub(crate) fn message(&self, shown: &str) -> String {
        match self {
            Refusal::SymlinkEscapes { target } => format!(
                "{shown}: a symlink pointing outside the workspace ({}) is never promoted",
                escape_for_humans(target.as_bytes())
            ),
            Refusal::SetId { mode } => {
                format!("{shown}: a setuid/setgid file is never promoted (mode {mode:o})")
            }
            Refusal::StubCopy { tool } => {
                let tool = escape_for_humans(tool.as_bytes());
                format!(
                    "{shown}: a copy of a shadow stub's script, which stands in for {tool} in the rehearsal (live it would be the real {tool}), is never promoted"
                )
            }
            Refusal::SpecialFile { what } => {
                format!(
                    "{shown}: a {} is never promoted",
                    escape_for_humans(what.as_bytes())
                )
            }
            Refusal::ContentNotKept => format!(
                "{shown}: its content did not fit the run's kept-content budget and was not kept, so it cannot be verified or promoted"
            ),
            Refusal::ContentWithheld => format!(
                "{shown}: its content was withheld from the evidence (the command's user cannot read it), so it cannot be verified or promoted"
            ),
            Refusal::PrivilegedXattr { name } => format!(
                "{shown}: the {} attribute is never promoted",
                escape_for_humans(name.as_bytes())
            ),
            Refusal::XattrsNotKept { names } => format!(
                "{shown}: extended attribute changes ({}) cannot be promoted (their values are not kept)",
                names
                    .iter()
                    .map(|n| escape_for_humans(n.as_bytes()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Refusal::NoBeforeHash => {
                format!("{shown}: the rehearsal recorded no content hash for what it replaced")
            }
            Refusal::NoContentHash => format!("{shown}: no content was kept for it"),
            Refusal::SymlinkTargetMissing => {
                format!("{shown}: the symlink's target was not recorded")
            }
            Refusal::SymlinkTargetInexact => format!(
                "{shown}: the symlink's target is not valid UTF-8 and cannot be rebuilt exactly"
            ),
        }
    }
}

/// Why `c` can never be promoted; empty when the live lane can write it.
///
/// Kinds of file that never go live (setid, special, escaping symlinks,
/// stub copies) are refused whatever the change, an identical rewrite
/// included. The rest concerns what the planner writes, so an identical
/// rewrite (which it skips) is not refused for it.
pub(crate) fn refusals(c: &Change) -> Vec<Refusal> {
    let mut out = Vec::new();
    if c.symlink_escapes && c.link_expected.is_none() {
        out.push(Refusal::SymlinkEscapes {
            target: c.symlink_target.clone().unwrap_or_default(),
        });
    }
    if c.setid {
        out.push(Refusal::SetId {
            mode: c.mode_after.unwrap_or(0),
        });
        return out;
    }
    if let Some(tool) = &c.stub_copy_of {
        out.push(Refusal::StubCopy { tool: tool.clone() });
        return out;
    }
    if c.kind != ChangeKind::Deleted && (c.file_type == FileType::Other || c.special.is_some()) {
        out.push(Refusal::SpecialFile {
            what: c.special.clone().unwrap_or_else(|| "special file".into()),
        });
        return out;
    }
    if c.kind == ChangeKind::Identical {
        return out;
    }
    if c.content_not_kept {
        out.push(Refusal::ContentNotKept);
        return out;
    }
    if c.content_withheld {
        out.push(Refusal::ContentWithheld);
        return out;
    }
    if let Some(x) = c
        .xattrs_changed
        .iter()
        .find(|x| x.starts_with("security.") || x.starts_with("trusted."))
    {
        out.push(Refusal::PrivilegedXattr { name: x.clone() });
        return out;
    }
    if !c.xattrs_changed.is_empty() {
        out.push(Refusal::XattrsNotKept {
            names: c.xattrs_changed.clone(),
        });
        return out;
    }
    if !has_before(c) {
        out.push(Refusal::NoBeforeHash);
        return out;
    }
    match (c.kind, c.file_type) {
        (ChangeKind::Created | ChangeKind::Modified, FileType::File) if c.after.is_none() => {
            out.push(Refusal::NoContentHash);
        }
        (ChangeKind::Created | ChangeKind::Modified, FileType::Symlink) => {
            match (&c.symlink_target, &c.after) {
                (Some(t), Some(h)) => {
                    if blake3::hash(t.as_bytes()).to_hex().as_str() != h {
                        out.push(Refusal::SymlinkTargetInexact);
                    }
                }
                _ => out.push(Refusal::SymlinkTargetMissing),
            }
        }
        _ => {}
    }
    out
}

/// A plain `apply` promotion of a run whose local writes may depend on
/// calls that stubs answered: refused, naming the calls and the two ways out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StubbedCallsRefusal {
    /// The calls as reviewers read them (`gh release create v1.13 → exit 0 (stub)`).
    pub(crate) calls: Vec<String>,
}

impl StubbedCallsRefusal {
    /// The refusal as every door shows it.
    pub(crate) fn message(&self, run_id: &str) -> String {
        const SHOWN: usize = 10;
        let mut calls: Vec<String> = self
            .calls
            .iter()
            .take(SHOWN)
            .map(|c| format!("  {}", Shown::message(c)))
            .collect();
        if self.calls.len() > SHOWN {
            calls.push(format!("  and {} more", self.calls.len() - SHOWN));
        }
        format!(
            "run {run_id}'s rehearsal answered {} call(s) with stubs; live.mode apply would write their local consequences without making them:\n{}\n\
             Promote with --local-only (\"local_only\": true) to apply the local writes and journal these calls as not made, \
             or declare live.mode: rerun so they are made for real after approval; nothing was written",
            self.calls.len(),
            calls.join("\n")
        )
    }
}

/// Calls the rehearsal's stubs answered, as reviewers read them.
pub(crate) fn shown_actions(actions: &[WouldBeAction]) -> Vec<String> {
    actions
        .iter()
        .map(|a| {
            format!(
                "{} → exit {} ({})",
                a.shown(),
                a.answer.exit,
                escape_for_humans(a.source.as_bytes())
            )
        })
        .collect()
}

/// The one rule of stubbed work at promotion. `Ok`: the calls this
/// promotion will NOT make (empty for `rerun`, which makes them, and for a
/// run without would-be actions); `Err`: a plain `apply` of a run with
/// would-be actions, which must say `local_only`.
pub(crate) fn check_stubbed_calls(
    mode: LiveMode,
    actions: &[WouldBeAction],
    local_only: bool,
) -> Result<Vec<String>, StubbedCallsRefusal> {
    if mode == LiveMode::Rerun || actions.is_empty() {
        return Ok(Vec::new());
    }
    let calls = shown_actions(actions);
    if local_only {
        Ok(calls)
    } else {
        Err(StubbedCallsRefusal { calls })
    }
}

/// Can the planner check what the change replaces before writing it? A
/// created entry replaces nothing; otherwise a content hash, or a
/// directory (checked by kind and mode), or a metadata change (checked by
/// mode) is needed.
fn has_before(c: &Change) -> bool {
    c.kind == ChangeKind::Created
        || c.before.is_some()
        || c.file_type == FileType::Dir
        || c.kind == ChangeKind::Metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(kind: ChangeKind, ft: FileType) -> Change {
        let mut c = Change::new(b"a/b", kind, ft);
        c.before = Some("0".repeat(64));
        c.after = Some("1".repeat(64));
        c
    }

    #[test]
    fn stubbed_calls_need_local_only_in_apply() {
        let call: WouldBeAction = serde_json::from_value(serde_json::json!({
            "tool": "gh", "argv": ["gh", "release", "create", "v1.13"], "argv_hash": "",
            "cwd": "/w", "stdin": {"read": false, "bytes": 0, "blake3": "", "head": ""},
            "env_names": [], "rule": "gh-release", "source": "stub",
            "answer": {"exit": 0, "stdout": "", "stderr": ""}
        }))
        .unwrap();
        let one = std::slice::from_ref(&call);
        assert_eq!(check_stubbed_calls(LiveMode::Apply, &[], false), Ok(vec![]));
        assert_eq!(check_stubbed_calls(LiveMode::Rerun, one, false), Ok(vec![]));
        let refused = check_stubbed_calls(LiveMode::Apply, one, false).unwrap_err();
        let m = refused.message("r1-1");
        assert!(m.contains("gh release create v1.13 → exit 0 (stub)"), "{m}");
        assert!(
            m.contains("--local-only") && m.contains("live.mode: rerun"),
            "{m}"
        );
        assert_eq!(
            check_stubbed_calls(LiveMode::Apply, one, true),
            Ok(vec!["gh release create v1.13 → exit 0 (stub)".to_string()])
        );
    }

    #[test]
    fn an_ordinary_change_is_promotable() {
        for kind in [
            ChangeKind::Created,
            ChangeKind::Modified,
            ChangeKind::Deleted,
            ChangeKind::Metadata,
            ChangeKind::Identical,
        ] {
            for ft in [FileType::File, FileType::Dir] {
                assert_eq!(refusals(&change(kind, ft)), vec![], "{kind:?} {ft:?}");
            }
        }
    }

    #[test]
    fn every_kind_of_refusal() {
        let mut c = change(ChangeKind::Created, FileType::File);
        c.setid = true;
        c.mode_after = Some(0o104755);
        assert_eq!(refusals(&c), vec![Refusal::SetId { mode: 0o104755 }]);
        assert_eq!(
            refusals(&c)[0].message("a/b"),
            "a/b: a setuid/setgid file is never promoted (mode 104755)"
        );

        let mut c = change(ChangeKind::Created, FileType::Other);
        c.special = Some("fifo".into());
        assert_eq!(refusals(&c)[0].message("p"), "p: a fifo is never promoted");
        c.kind = ChangeKind::Deleted;
        c.file_type = FileType::File;
        assert_eq!(refusals(&c), vec![], "deleting a fifo is fine");

        let mut c = change(ChangeKind::Modified, FileType::File);
        c.content_withheld = true;
        assert_eq!(refusals(&c), vec![Refusal::ContentWithheld]);
        c.kind = ChangeKind::Deleted;
        assert_eq!(refusals(&c), vec![Refusal::ContentWithheld]);

        let mut c = change(ChangeKind::Metadata, FileType::File);
        c.xattrs_changed = vec!["user.a".into(), "security.capability".into()];
        assert_eq!(
            refusals(&c),
            vec![Refusal::PrivilegedXattr {
                name: "security.capability".into()
            }]
        );
        c.xattrs_changed = vec!["user.a".into()];
        assert_eq!(refusals(&c)[0].rule(), "evidence.xattrs");

        let mut c = change(ChangeKind::Created, FileType::Symlink);
        c.symlink_target = Some("/etc/passwd".into());
        c.symlink_escapes = true;
        c.after = Some(blake3::hash(b"/etc/passwd").to_hex().to_string());
        assert_eq!(
            refusals(&c)[0].message("leak"),
            "leak: a symlink pointing outside the workspace (/etc/passwd) is never promoted"
        );
        c.symlink_escapes = false;
        assert_eq!(refusals(&c), vec![]);
        c.after = Some("f".repeat(64));
        assert_eq!(refusals(&c), vec![Refusal::SymlinkTargetInexact]);
        c.symlink_target = None;
        assert_eq!(refusals(&c), vec![Refusal::SymlinkTargetMissing]);

        let mut c = change(ChangeKind::Modified, FileType::File);
        c.before = None;
        assert_eq!(refusals(&c), vec![Refusal::NoBeforeHash]);
        let mut c = change(ChangeKind::Created, FileType::File);
        c.after = None;
        assert_eq!(refusals(&c), vec![Refusal::NoContentHash]);

        let mut c = change(ChangeKind::Identical, FileType::File);
        c.stub_copy_of = Some("git".into());
        assert_eq!(refusals(&c)[0].rule(), "stubs.copied_stub");
        c.stub_copy_of = None;
        c.content_withheld = true;
        assert_eq!(refusals(&c), vec![], "an identical rewrite writes nothing");
    }
}
