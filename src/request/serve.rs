//! Carrying a typed request out on an engine: the in-process door, and the
//! daemon's handlers once they have parsed HTTP. Who may see which run is
//! decided by the caller's [`Caller::may_read`] (the daemon: reviewers see
//! every run, anyone else only its own; in-process: the state directory is
//! the caller's).

use crate::engine::authz::{self, Verb};
use crate::engine::{Engine, EngineError, Input, ReviewerAuth, What};
use crate::journal::Actor;
use crate::record::RunRecord;

use super::{
    Compare, Diff, LIST_DEFAULT, LIST_MAX, List, Promote, Replay, Review, Rollback, RunList, Show,
    ShowReceipt, Submit, SubmitReply, VerifyJournal,
};

/// Who asks, and how their identity was established.
#[derive(Debug, Clone)]
pub struct Caller {
    pub actor: Actor,
    pub auth: ReviewerAuth,
}

impl Caller {
    /// The person running the CLI in-process on their own state directory.
    pub fn local() -> Caller {
        Caller {
            actor: Actor::local(),
            auth: ReviewerAuth::LocalTtyConfirmed,
        }
    }

    /// A daemon client, identified by its socket's peer credentials.
    pub fn peer(actor: Actor, approver_group: &str) -> Caller {
        Caller {
            actor,
            auth: ReviewerAuth::PeerCredentials {
                approver_group: approver_group.to_string(),
            },
        }
    }

    /// Does this caller see every run (not only its own)?
    pub fn sees_all(&self) -> bool {
        authz::sees_all(&self.actor, &self.auth)
    }

    /// May this caller see run `r`? (The one rule: [`authz::authorize`].)
    pub fn may_read(&self, r: &RunRecord) -> bool {
        authz::authorize(Verb::See, r, &self.actor, &self.auth).is_ok()
    }

    /// Run `id` when this caller may see it; someone else's run answers
    /// as if absent (ids of others' runs are not disclosed).
    pub fn readable_run(&self, engine: &Engine, id: &str) -> Result<RunRecord, EngineError> {
        let r = engine.get(id)?;
        authz::authorize(Verb::See, &r, &self.actor, &self.auth)?;
        // A waiting run whose time is up expires as it is looked at.
        let r = engine.get_current(id)?;
        authz::authorize(Verb::See, &r, &self.actor, &self.auth)?;
        Ok(r)
    }

    /// Receipt `id` when this caller may see its run; otherwise (and when it
    /// does not exist) the same "no such receipt".
    pub fn readable_receipt(
        &self,
        engine: &Engine,
        id: &str,
    ) -> Result<crate::record::Receipt, EngineError> {
        let missing = || EngineError::not_found(What::Receipt, id);
        let rc = engine.receipt(id).map_err(|_| missing())?;
        let run = engine.get(&rc.run_id).map_err(|_| missing())?;
        if self.may_read(&run) {
            Ok(rc)
        } else {
            Err(missing())
        }
    }
}

/// A request the engine can answer directly.
pub(crate) trait Serve: super::Operation {
    fn serve(&self, engine: &Engine, caller: &Caller) -> Result<Self::Reply, EngineError>;

    /// A request answered from the state directory without opening an
    /// engine (and so without its crash recovery): read-only inspection.
    fn serve_without_engine(
        &self,
        _state_dir: &std::path::Path,
    ) -> Option<Result<Self::Reply, EngineError>> {
        None
    }
}

impl Submit {
    /// The validated envelope, its `working_dir` resolved with the
    /// caller's own rights (in-process: this process's; over the daemon:
    /// the peer's uid and groups), and the session that resolved it (the
    /// engine reads the workspace policy through it when the caller is the
    /// workspace's owner). Both doors validate here.
    pub fn spec_for(
        &self,
        caller: &Caller,
    ) -> Result<
        (
            crate::envelope::EnvelopeSpec,
            crate::workspace::owner::OwnerSession,
        ),
        EngineError,
    > {
        self.spec_for_in(caller, None)
    }

    /// [`Submit::spec_for`], `working_dir` resolved in `view` (a client's
    /// own mount namespace and root) when one is given.
    pub fn spec_for_in(
        &self,
        caller: &Caller,
        view: Option<std::sync::Arc<crate::workspace::owner::view::ClientView>>,
    ) -> Result<
        (
            crate::envelope::EnvelopeSpec,
            crate::workspace::owner::OwnerSession,
        ),
        EngineError,
    > {
        crate::phase("serve: spec_for");
        let access = match caller.auth {
            _ if view.is_some() => crate::workspace::owner::OwnerSession::start_in(
                &crate::workspace::owner::Creds::of_user(caller.actor.uid, caller.actor.gid),
                view,
            )
            .map_err(|e| EngineError::invalid(Input::Workspace, e.to_string()))?,
            ReviewerAuth::LocalTtyConfirmed | ReviewerAuth::LocalPresence => {
                crate::workspace::owner::OwnerSession::start(
                    &crate::workspace::owner::Creds::current(),
                )
                .map_err(|e| EngineError::invalid(Input::Workspace, e.to_string()))?
            }
            // A fleet reviewer never submits: no uid of this host is it.
            ReviewerAuth::PeerCredentials { .. } | ReviewerAuth::Fleet(_) => {
                crate::engine::access_as(&caller.actor)?
            }
        };
        crate::phase("serve: access");
        let spec = self
            .envelope
            .clone()
            .validate(None, &access)
            .map_err(|e| EngineError::invalid(Input::Request, e.to_string()))?;
        crate::phase("serve: validated");
        Ok((spec, access))
    }
}

impl Serve for Submit {
    /// In-process: validate with the caller's own rights, rehearse, judge.
    fn serve(&self, engine: &Engine, caller: &Caller) -> Result<SubmitReply, EngineError> {
        let (spec, access) = self.spec_for(caller)?;
        let r = engine.execute(&spec, &caller.actor, access)?;
        Ok(SubmitReply::Done(Box::new(r)))
    }
}

impl Serve for super::Cancel {
    /// Only a daemon has queued or running rehearsals of other processes.
    fn serve(&self, _engine: &Engine, _caller: &Caller) -> Result<RunRecord, EngineError> {
        Err(EngineError::invalid(
            Input::Request,
            "cancel talks to a daemon; a local rehearsal is cancelled with Ctrl-C (nothing is promoted)",
        ))
    }
}

impl Serve for Replay {
    fn serve(&self, engine: &Engine, caller: &Caller) -> Result<SubmitReply, EngineError> {
        // Only those who may read the baseline may replay it.
        caller.readable_run(engine, self.id.as_str())?;
        let req = self.changes.clone().into_engine_request();
        let r = engine.replay(self.id.as_str(), &req, &caller.actor)?;
        Ok(SubmitReply::Done(Box::new(r)))
    }
}

impl Serve for Show {
    /// The record now (waiting is the daemon's: in-process, nothing else
    /// changes a run while this call runs).
    fn serve(&self, engine: &Engine, caller: &Caller) -> Result<RunRecord, EngineError> {
        caller.readable_run(engine, self.id.as_str())
    }
}

/// The review queue comes oldest first (see `Engine::list_current`).
impl Serve for List {
    fn serve(&self, engine: &Engine, caller: &Caller) -> Result<RunList, EngineError> {
        let mut runs = engine.list_current(self.state)?;
        runs.retain(|r| caller.may_read(r));
        runs.truncate(self.limit.unwrap_or(LIST_DEFAULT).min(LIST_MAX));
        Ok(RunList { runs })
    }
}

impl Serve for Diff {
    fn serve(
        &self,
        engine: &Engine,
        caller: &Caller,
    ) -> Result<crate::engine::textdiff::RunDiff, EngineError> {
        let r = caller.readable_run(engine, self.id.as_str())?;
        Ok(crate::engine::textdiff::run_diff(engine, &r))
    }
}

impl Serve for Compare {
    fn serve(
        &self,
        engine: &Engine,
        caller: &Caller,
    ) -> Result<crate::engine::RunComparison, EngineError> {
        let a = caller.readable_run(engine, self.id.as_str())?;
        let b = caller.readable_run(engine, self.against.as_str())?;
        Ok(crate::engine::compare_runs(&a, &b))
    }
}

impl Serve for Review {
    fn serve(&self, engine: &Engine, caller: &Caller) -> Result<RunRecord, EngineError> {
        // Someone else's run answers "no such run" before any rule about who
        // may review it could tell that it exists.
        caller.readable_run(engine, self.id.as_str())?;
        engine.review(
            self.id.as_str(),
            &caller.actor,
            &caller.auth,
            self.action,
            &self.note,
            self.override_block,
        )
    }
}

impl Serve for Promote {
    fn serve(&self, engine: &Engine, caller: &Caller) -> Result<RunRecord, EngineError> {
        caller.readable_run(engine, self.id.as_str())?;
        if let Some(t) = &self.host_prompt_token {
            engine.approve_via_host_prompt(self.id.as_str(), t, &caller.actor)?;
        }
        engine.promote(
            self.id.as_str(),
            &caller.actor,
            &caller.auth,
            &self.env,
            self.local_only,
        )
    }
}

impl Serve for super::HostPrompt {
    fn serve(
        &self,
        engine: &Engine,
        caller: &Caller,
    ) -> Result<super::HostPromptGrant, EngineError> {
        caller.readable_run(engine, self.id.as_str())?;
        let token = engine.grant_host_prompt(self.id.as_str(), &caller.actor, &self.host)?;
        Ok(super::HostPromptGrant {
            run_id: self.id.as_str().to_string(),
            token,
            expires_in_s: crate::engine::GRANT_TTL_S,
        })
    }
}

impl Serve for ShowReceipt {
    fn serve(
        &self,
        engine: &Engine,
        caller: &Caller,
    ) -> Result<crate::record::Receipt, EngineError> {
        caller.readable_receipt(engine, self.id.as_str())
    }
}

impl Serve for Rollback {
    fn serve(
        &self,
        engine: &Engine,
        caller: &Caller,
    ) -> Result<crate::record::Receipt, EngineError> {
        caller.readable_receipt(engine, self.id.as_str())?;
        engine.rollback(self.id.as_str(), &caller.actor, &caller.auth)
    }
}

impl Serve for VerifyJournal {
    fn serve(
        &self,
        engine: &Engine,
        _caller: &Caller,
    ) -> Result<crate::journal::VerifyReport, EngineError> {
        Ok(engine.journal().verify()?)
    }

    /// Verification only reads: no engine (and no recovery) needed.
    fn serve_without_engine(
        &self,
        state_dir: &std::path::Path,
    ) -> Option<Result<crate::journal::VerifyReport, EngineError>> {
        Some(
            crate::journal::Journal::new(state_dir)
                .verify()
                .map_err(EngineError::from),
        )
    }
}
