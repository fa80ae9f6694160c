//! Who may do what to a run: one place for every verb and both doors.
//!
//! Over the daemon, the caller's uid comes from the socket (SO_PEERCRED):
//! reviewers are root and members of the approver group; the daemon's own
//! user sees every run. In-process (local mode), the caller works on its
//! own state directory and may do anything but approve its own run.

use super::{EngineError, ReviewerAuth, What};
use crate::journal::Actor;
use crate::record::RunRecord;

/// What a caller asks to do with a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Read its record, diff, receipt; replay it.
    See,
    Approve,
    /// Reject (a reviewer; its submitter's rejection is a withdrawal).
    Reject,
    /// Withdraw a waiting run: its submitter only.
    Withdraw,
    Promote,
    Rollback,
    Cancel,
}

/// May `actor`, known through `auth`, do `verb` to run `r`? A run the
/// caller may not see is answered as absent ([`EngineError::NotFound`]).
pub fn authorize(
    verb: Verb,
    r: &RunRecord,
    actor: &Actor,
    auth: &ReviewerAuth,
) -> Result<(), EngineError> {
    let group = match auth {
        ReviewerAuth::PeerCredentials { approver_group } => Some(approver_group.as_str()),
        ReviewerAuth::LocalTtyConfirmed | ReviewerAuth::LocalPresence | ReviewerAuth::Fleet(_) => {
            None
        }
    };
    let submitter = is_submitter_as(r, actor, auth);
    let reviewer = group.is_none_or(|g| is_approver(actor.uid, g));
    match verb {
        Verb::See => {
            if sees_all(actor, auth) || submitter {
                Ok(())
            } else {
                Err(EngineError::not_found(What::Run, &r.run_id))
            }
        }
        Verb::Approve => {
            refuse_self_approval(r, actor, auth)?;
            if reviewer {
                return Ok(());
            }
            Err(EngineError::not_allowed(format!(
                "uid {} may not approve runs: approvers are root and members of group {:?}",
                actor.uid,
                group.unwrap_or_default()
            )))
        }
        Verb::Reject => {
            if reviewer || submitter {
                return Ok(());
            }
            Err(EngineError::not_allowed(format!(
                "uid {} may not reject runs: reviewers are root and members of group {:?} (a submitter may withdraw its own run)",
                actor.uid,
                group.unwrap_or_default()
            )))
        }
        Verb::Withdraw => {
            if submitter {
                return Ok(());
            }
            Err(EngineError::not_allowed(format!(
                "uid {} did not submit run {}; only its submitter may withdraw it (a reviewer rejects it: `dryrun reject`)",
                actor.uid, r.run_id
            )))
        }
        // Promoting and rolling back are refused with the same words they
        // always had.
        Verb::Promote | Verb::Rollback | Verb::Cancel => {
            if actor.uid == 0 || submitter || reviewer {
                return Ok(());
            }
            let what = if verb == Verb::Cancel {
                "cancel"
            } else {
                "promote"
            };
            Err(EngineError::not_allowed(format!(
                "uid {} may not {what} run {}: only its submitter, root and reviewers may",
                actor.uid, r.run_id
            )))
        }
    }
}

/// Does `actor` see every run (not only the ones it submitted)? Root,
/// reviewers and the engine's own user over the daemon; anyone locally.
pub fn sees_all(actor: &Actor, auth: &ReviewerAuth) -> bool {
    match auth {
        ReviewerAuth::LocalTtyConfirmed | ReviewerAuth::LocalPresence | ReviewerAuth::Fleet(_) => {
            true
        }
        ReviewerAuth::PeerCredentials { approver_group } => {
            actor.uid == 0
                || actor.uid == nix::unistd::geteuid().as_raw()
                || is_approver(actor.uid, approver_group)
        }
    }
}

/// Did `actor`'s uid submit `r`?
pub fn is_submitter(r: &RunRecord, actor: &Actor) -> bool {
    r.submitted_by.as_ref().map(|a| a.uid) == Some(actor.uid)
}

/// Is the caller `r`'s submitter? By uid on this host; a fleet reviewer
/// (who has no uid here) by person, as the fleet config maps roles and
/// accounts to people.
fn is_submitter_as(r: &RunRecord, actor: &Actor, auth: &ReviewerAuth) -> bool {
    match auth {
        ReviewerAuth::Fleet(f) => f.person == f.submitter,
        _ => is_submitter(r, actor),
    }
}

/// May `actor` submit a run for a workspace owned by `workspace_uid`? A
/// daemon client only for its own workspaces (root and the daemon's own
/// user for any).
pub(super) fn may_submit_for(
    actor: &Actor,
    workspace: &std::path::Path,
    workspace_uid: u32,
) -> Result<(), EngineError> {
    if actor.via == "daemon"
        && actor.uid != 0
        && actor.uid != nix::unistd::geteuid().as_raw()
        && actor.uid != workspace_uid
    {
        return Err(EngineError::not_allowed(format!(
            "working_dir: {} belongs to uid {workspace_uid}; uid {} may only submit runs for workspaces it owns",
            workspace.display(),
            actor.uid
        )));
    }
    Ok(())
}

/// The submitter never approves its own run, through either door, with
/// one exception. Over the daemon the uid comes from the socket; locally
/// it is this process's uid: typing back the terminal code proves a
/// terminal, not a second person (an agent can allocate a pseudo-terminal,
/// read the code and type it), so a local approval must come from another
/// uid (`sudo`). The exception: where there is one user, root, no other
/// identity exists (`sudo` is root again); root's own run is approved
/// locally by a person at a terminal no process here made
/// ([`ReviewerAuth::LocalPresence`]; docs/approvals.md).
pub fn refuse_self_approval(
    r: &RunRecord,
    actor: &Actor,
    auth: &ReviewerAuth,
) -> Result<(), EngineError> {
    if !is_submitter_as(r, actor, auth) || single_user_approval(actor, auth) {
        return Ok(());
    }
    let how = match auth {
        ReviewerAuth::PeerCredentials { .. } => "a different reviewer must".to_string(),
        ReviewerAuth::Fleet(f) => {
            return Err(EngineError::not_allowed(format!(
                "role {} belongs to {}, who submitted run {}; the submitter can never approve its own run: a different reviewer must",
                f.role, f.person, r.run_id
            )));
        }
        ReviewerAuth::LocalTtyConfirmed | ReviewerAuth::LocalPresence if actor.uid == 0 => {
            "root is the only identity here (sudo is root again): approve as a person at a terminal no process on this machine made, \
             a console, an ssh login or one from outside the container (`docker exec -it ... dryrun review`), with `dryrun review` or `dryrun approve`; \
             or say yes in the agent host's own prompt (docs/approvals.md)"
                .to_string()
        }
        ReviewerAuth::LocalTtyConfirmed | ReviewerAuth::LocalPresence => format!(
            "approve it as another user, e.g. `sudo dryrun --local --state-dir DIR approve {}` with this state directory, \
             or run the daemon, where reviewers are root and the approver group",
            r.run_id
        ),
    };
    Err(EngineError::not_allowed(format!(
        "uid {} submitted run {}; the submitter can never approve its own run: {how}",
        actor.uid, r.run_id
    )))
}

/// The one-user exception to the two-identity rule: root approving its own
/// run, locally, with the terminal proof. Never over the daemon (it may
/// serve several users), never another uid (`sudo` gives it a second
/// identity).
pub fn single_user_approval(actor: &Actor, auth: &ReviewerAuth) -> bool {
    *auth == ReviewerAuth::LocalPresence && actor.uid == 0 && actor.via == "local"
}

/// Is `uid` root or a member of `group` (by /etc/group membership or as
/// its primary group)?
pub fn is_approver(uid: u32, group: &str) -> bool {
    if uid == 0 {
        return true;
    }
    let Ok(Some(g)) = nix::unistd::Group::from_name(group) else {
        return false;
    };
    let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) else {
        return false;
    };
    u.gid == g.gid || g.mem.contains(&u.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(uid: u32) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "schema": crate::record::SCHEMA, "run_id": "r1-0001", "task": null, "command": "true",
            "workspace": "/nowhere", "created_at": "2020-01-01T00:00:00Z",
            "envelope_hash": "", "verdict": null, "receipt": null, "rehearsal": null,
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "state": "awaiting_approval",
            "submitted_by": {"uid": uid, "gid": uid, "via": "daemon"},
        }))
        .unwrap()
    }

    fn daemon_actor(uid: u32) -> Actor {
        Actor {
            uid,
            gid: uid,
            pid: None,
            via: "daemon".into(),
        }
    }

    #[test]
    fn every_verb_asks_the_same_questions() {
        let peer = ReviewerAuth::PeerCredentials {
            approver_group: "no-such-group-for-dryrun-tests".into(),
        };
        let r = run_of(4242);
        let (submitter, stranger, root) = (daemon_actor(4242), daemon_actor(4343), daemon_actor(0));
        // A stranger's questions are answered as if the run were absent.
        assert!(matches!(
            authorize(Verb::See, &r, &stranger, &peer),
            Err(EngineError::NotFound { .. })
        ));
        for verb in [Verb::Promote, Verb::Rollback, Verb::Cancel, Verb::Reject] {
            assert!(authorize(verb, &r, &submitter, &peer).is_ok(), "{verb:?}");
            assert!(authorize(verb, &r, &root, &peer).is_ok(), "{verb:?}");
            assert!(
                matches!(
                    authorize(verb, &r, &stranger, &peer),
                    Err(EngineError::NotAllowed { .. })
                ),
                "{verb:?}"
            );
        }
        // The submitter never approves, through either door; root does.
        for auth in [&peer, &ReviewerAuth::LocalTtyConfirmed] {
            let e = authorize(Verb::Approve, &r, &submitter, auth).unwrap_err();
            assert!(e.to_string().contains("never approve its own run"), "{e}");
        }
        assert!(authorize(Verb::Approve, &r, &root, &peer).is_ok());
        assert!(authorize(Verb::Approve, &r, &stranger, &peer).is_err());
        // Only the submitter withdraws, even root.
        assert!(authorize(Verb::Withdraw, &r, &submitter, &peer).is_ok());
        for who in [&stranger, &root] {
            let e = authorize(Verb::Withdraw, &r, who, &peer).unwrap_err();
            assert!(e.to_string().contains("only its submitter"), "{e}");
        }
        // Locally, anyone else may.
        assert!(
            authorize(
                Verb::Approve,
                &r,
                &stranger,
                &ReviewerAuth::LocalTtyConfirmed
            )
            .is_ok()
        );
    }
}
