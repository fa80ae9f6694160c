//! The promotion plan: the rehearsal's change list as ordered steps, each
//! with what it expects before and leaves after; what must never go live
//! is refused here with the verdict's words (`model::promotion::refusals`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::engine::EngineError;
use crate::model::{Change, ChangeKind, FileType, Refusal, promotion};
use crate::workspace::apply::{Action, ApplyError, Expect, Op};

/// `receipts/<receipt_id>/plan.json`: durable before the first write, so
/// a promotion cut short is undone step by step at start-up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::engine) struct Plan {
    pub(in crate::engine) receipt_id: String,
    pub(in crate::engine) run_id: String,
    pub(in crate::engine) workspace: String,
    pub(in crate::engine) workspace_identity: crate::workspace::apply::Identity,
    pub(in crate::engine) ops: Vec<Op>,
    pub(in crate::engine) started_at: String,
}

fn depth(p: &[u8]) -> usize {
    p.iter().filter(|b| **b == b'/').count()
}

pub(super) fn apply_err(e: ApplyError) -> EngineError {
    EngineError::conflict(e.to_string())
}

/// Turn the rehearsal's change list into ordered steps, refusing what must
/// never go live. Deletions first (deepest first), then directories and
/// files (shallowest first), then permission changes (deepest first), then
/// the rehearsal's modification times of what the steps wrote and of the
/// files the command rewrote with the same content (a `touch`) where the
/// evidence kept their time (`verdict::keep_only_judged_times`: a mutating
/// run's expected writes only).
pub(super) fn plan_ops(
    changes: &[Change],
    blobs: &Path,
) -> Result<(Vec<Op>, usize, Vec<String>), EngineError> {
    let mut refusals = Vec::new();
    let mut notes = Vec::new();
    let mut steps = Steps::default();
    let mut identical = 0;
    for c in changes {
        let shown = crate::workspace::paths::escape_for_humans(&c.path_bytes());
        // The one rule of what may never go live (the verdict blocks on the
        // same refusals, with the same words).
        let refused = promotion::refusals(c);
        if !refused.is_empty() {
            refusals.extend(refused.iter().map(|r| r.message(&shown)));
            continue;
        }
        if c.kind == ChangeKind::Identical {
            identical += 1;
            if let (Some(t), Some(hash)) = (c.mtime_after_ns, &c.before) {
                let at = Expect::Hashed {
                    hash: hash.clone(),
                    mode: None,
                };
                steps.times.push(time_op(c, t, at));
            }
            continue;
        }
        if let Some(other) = &c.hardlink_of {
            notes.push(format!(
                "{shown} was a hard link of {other} in the rehearsal; it is written as its own file"
            ));
        }
        match steps.add(c, &shown, blobs) {
            Err(refusal) => refusals.push(refusal),
            Ok(after) => {
                if let (Some(t), Some(after)) = (c.mtime_after_ns, after) {
                    steps.times.push(time_op(c, t, after));
                }
            }
        }
    }
    if !refusals.is_empty() {
        return Err(EngineError::conflict(format!(
            "the change set cannot be promoted; nothing was written:\n  {}",
            refusals.join("\n  ")
        )));
    }
    Ok((steps.ordered(), identical, notes))
}

/// What a change's path must hold before its step runs; `None`: nothing
/// to check it against (refused).
fn expect_before(c: &Change) -> Option<Expect> {
    Some(match (c.kind, &c.before, c.mode_before) {
        (ChangeKind::Created, _, _) => Expect::Absent,
        (_, Some(h), m) => Expect::Hashed {
            hash: h.clone(),
            mode: m.filter(|_| c.kind == ChangeKind::Metadata),
        },
        (ChangeKind::Deleted, None, _) if c.file_type == FileType::Dir => Expect::Dir {
            mode: c.mode_before,
        },
        (_, None, m) if c.file_type == FileType::Dir || c.kind == ChangeKind::Metadata => {
            Expect::Dir { mode: m }
        }
        _ => return None,
    })
}

/// The step that gives `c`'s path the rehearsal's modification time `t`,
/// after every other step (`at`: what the path holds by then). Its undo
/// leaves the time alone (a rollback restores content, not times).
fn time_op(c: &Change, t: i64, at: Expect) -> Op {
    Op {
        path_hex: hex::encode(c.path_bytes()),
        path: c.path.clone(),
        action: Action::SetTime { mtime_ns: t },
        expect_before: at.clone(),
        after: at,
        backup: None,
    }
}

/// The steps planned so far, by phase.
#[derive(Default)]
struct Steps {
    deletions: Vec<Op>,
    writes: Vec<Op>,
    modes: Vec<Op>,
    times: Vec<Op>,
}

impl Steps {
    /// Plan one change's steps; `Err`: why it cannot go live. `Ok`: what
    /// the path holds after them (`None`: nothing, a deletion).
    fn add(&mut self, c: &Change, shown: &str, blobs: &Path) -> Result<Option<Expect>, String> {
        // `promotion::refusals` already refused a change without a before
        // state; checked again so the planner never writes without a check,
        // whatever the model says.
        let before = expect_before(c).ok_or_else(|| Refusal::NoBeforeHash.message(shown))?;
        let path_hex = hex::encode(c.path_bytes());
        let op = |action: Action, after: Expect| Op {
            path_hex: path_hex.clone(),
            path: c.path.clone(),
            action,
            expect_before: before.clone(),
            after,
            backup: None,
        };
        let mut last: Option<Expect> = None;
        let mut push = |to: &mut Vec<Op>, o: Op| {
            last = Some(o.after.clone());
            to.push(o);
        };
        match (c.kind, c.file_type) {
            (ChangeKind::Deleted, _) => {
                self.deletions.push(op(Action::Remove, Expect::Absent));
                return Ok(None);
            }
            (ChangeKind::Metadata, ft) => {
                let mode = c.mode_after.unwrap_or(0o644);
                let after = match (&before, ft) {
                    (_, FileType::Dir) => Expect::Dir { mode: Some(mode) },
                    (Expect::Hashed { hash, .. }, _) => Expect::Hashed {
                        hash: hash.clone(),
                        mode: Some(mode),
                    },
                    _ => Expect::Dir { mode: Some(mode) },
                };
                if ft != FileType::Symlink {
                    push(&mut self.modes, op(Action::Chmod { mode }, after));
                }
            }
            (_, FileType::Dir) => {
                let mode = c.mode_after.unwrap_or(0o755);
                push(
                    &mut self.writes,
                    op(Action::MakeDir { mode: 0o700 }, Expect::Dir { mode: None }),
                );
                push(
                    &mut self.modes,
                    Op {
                        expect_before: Expect::Dir { mode: None },
                        ..op(Action::Chmod { mode }, Expect::Dir { mode: Some(mode) })
                    },
                );
            }
            (_, FileType::File) => {
                let Some(hash) = c.after.clone() else {
                    return Err(Refusal::NoContentHash.message(shown));
                };
                let blob = blobs.join(&hash);
                if !blob.is_file() {
                    return Err(format!(
                        "{shown}: its content is no longer kept (scratch retention); rehearse again"
                    ));
                }
                let mode = c.mode_after.unwrap_or(0o644) & 0o1777;
                push(
                    &mut self.writes,
                    op(
                        Action::WriteFile {
                            blob,
                            hash: hash.clone(),
                            mode,
                        },
                        Expect::Hashed {
                            hash,
                            mode: Some(mode),
                        },
                    ),
                );
            }
            (_, FileType::Symlink) => {
                let (Some(t), Some(h)) = (&c.symlink_target, &c.after) else {
                    return Err(Refusal::SymlinkTargetMissing.message(shown));
                };
                push(
                    &mut self.writes,
                    op(
                        Action::Symlink {
                            target_hex: hex::encode(t.as_bytes()),
                        },
                        Expect::Hashed {
                            hash: h.clone(),
                            mode: None,
                        },
                    ),
                );
            }
            (_, FileType::Other) => unreachable!("refused by promotion::refusals"),
        }
        Ok(last)
    }

    /// Deletions (deepest first), then directories before files
    /// (shallowest first), then permission changes (deepest first), then
    /// times (a directory's after every entry in it was written).
    fn ordered(self) -> Vec<Op> {
        let Steps {
            mut deletions,
            mut writes,
            mut modes,
            times,
        } = self;
        deletions.sort_by_key(|o| std::cmp::Reverse(depth(&o.path_bytes())));
        writes.sort_by_key(|o| {
            (
                depth(&o.path_bytes()),
                !matches!(o.action, Action::MakeDir { .. }),
            )
        });
        modes.sort_by_key(|o| std::cmp::Reverse(depth(&o.path_bytes())));
        let mut ops = deletions;
        ops.extend(writes);
        ops.extend(modes);
        ops.extend(times);
        ops
    }
}

#[cfg(test)]
mod tests {
    //! The verdict and the planner can never disagree: a change set the
    //! verdict judges `promote` is one `plan_ops` carries out.

    use super::*;
    use crate::model::Decision;
    use crate::model::{HostReport, RehearsalReport};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    fn hash(s: &str) -> String {
        blake3::hash(s.as_bytes()).to_hex().to_string()
    }

    fn arb_change() -> impl Strategy<Value = Change> {
        let kind = prop_oneof![
            Just(ChangeKind::Created),
            Just(ChangeKind::Modified),
            Just(ChangeKind::Deleted),
            Just(ChangeKind::Metadata),
            Just(ChangeKind::Identical),
        ];
        let ft = prop_oneof![
            Just(FileType::File),
            Just(FileType::Dir),
            Just(FileType::Symlink),
            Just(FileType::Other),
        ];
        let xattrs = proptest::sample::subsequence(
            vec![
                "user.a",
                "security.capability",
                "trusted.x",
                "system.posix_acl_access",
            ],
            0..=2,
        );
        (
            (
                "[a-c]{1,2}(/[a-c]{1,2}){0,2}",
                kind,
                ft,
                any::<bool>(),
                any::<bool>(),
                prop::option::of(0o100000u32..0o110000),
                prop::option::of(0o100000u32..0o110000),
            ),
            (
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
                prop::option::weighted(0.1, Just("fifo".to_string())),
                prop::option::weighted(0.1, Just("git".to_string())),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
                xattrs,
                prop::option::weighted(
                    0.8,
                    prop_oneof![Just("t"), Just("/etc/x"), Just("l\u{fffd}")],
                ),
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    (path, kind, ft, has_before, has_after, mode_before, mode_after),
                    (
                        setid,
                        escapes,
                        special,
                        stub,
                        withheld,
                        not_kept,
                        xattrs,
                        target,
                        target_hash_ok,
                    ),
                )| {
                    let mut c = Change::new(path.as_bytes(), kind, ft);
                    c.before = has_before.then(|| hash("before"));
                    c.after = has_after.then(|| hash("after"));
                    c.mode_before = mode_before;
                    c.mode_after = mode_after;
                    c.setid = setid;
                    c.symlink_escapes = escapes;
                    c.special = special;
                    c.stub_copy_of = stub;
                    c.content_withheld = withheld;
                    c.content_not_kept = not_kept;
                    c.xattrs_changed = xattrs.into_iter().map(String::from).collect();
                    if ft == FileType::Symlink {
                        c.symlink_target = target.map(String::from);
                        if let (Some(t), true) = (&c.symlink_target, has_after) {
                            c.after = Some(if target_hash_ok {
                                hash(t)
                            } else {
                                hash("other")
                            });
                        }
                    }
                    c
                },
            )
    }

    #[test]
    fn a_change_set_judged_promote_is_one_the_planner_carries_out() {
        let spec =
            crate::envelope::parse_envelope("t", "command: x\nintent: {expected_writes: ['**']}\n")
                .unwrap()
                .validate(
                    Some(Path::new("/tmp")),
                    &crate::workspace::owner::OwnerSession::start(
                        &crate::workspace::owner::Creds::current(),
                    )
                    .unwrap(),
                )
                .unwrap();
        // Every content hash has its blob: what remains is the rule itself,
        // not retention.
        let blobs = tempfile::tempdir().unwrap();
        for s in ["after", "t", "/etc/x", "l\u{fffd}", "other"] {
            std::fs::write(blobs.path().join(hash(s)), s).unwrap();
        }
        let mut runner = TestRunner::new(Config {
            cases: 2000,
            ..Config::default()
        });
        let (promoted, refused) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
        runner
            .run(&prop::collection::vec(arb_change(), 1..6), |changes| {
                let report = RehearsalReport {
                    exit_code: Some(0),
                    changes: changes.clone(),
                    landlock_abi: 7,
                    ..Default::default()
                };
                let v = crate::verdict::judge(&spec, &report, &HostReport::default());
                let planned = plan_ops(&changes, blobs.path());
                if v.decision == Decision::Promote {
                    promoted.set(promoted.get() + 1);
                    prop_assert!(
                        planned.is_ok(),
                        "judged promote, refused by the planner: {:?}\n{changes:#?}",
                        planned.err()
                    );
                }
                if let Err(e) = &planned {
                    refused.set(refused.get() + 1);
                    prop_assert_eq!(v.decision, Decision::Blocked);
                    // Every line the planner gives is a reason of the verdict.
                    let EngineError::Conflict { reason: text, .. } = e else {
                        return Err(TestCaseError::fail(format!("{e:?}")));
                    };
                    for line in text.lines().skip(1) {
                        let line = line.trim_start();
                        prop_assert!(
                            v.reasons.iter().any(|r| r.ends_with(line)),
                            "{line} is not among {:?}",
                            v.reasons
                        );
                    }
                }
                Ok(())
            })
            .unwrap();
        // The generator reaches both sides.
        let (promoted, refused) = (promoted.get(), refused.get());
        assert!(promoted > 50 && refused > 50, "{promoted} {refused}");
    }
}
