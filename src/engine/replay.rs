//! `dryrun replay RUN_ID`: rehearse a recorded run again (against today's
//! workspace, or with a changed command or answer overrides), answering each
//! stubbed tool call from the recording.

use super::{Engine, EngineError, Input, Prepared};
use crate::journal::Actor;
use crate::model::stubs::{NovelPolicy, RecordedCall, ReplaySet};
use crate::record::RunRecord;

/// What to change in a replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayRequest {
    /// A changed envelope (the recorded one otherwise; its `working_dir`
    /// defaults to the recorded run's).
    pub envelope: Option<crate::envelope::Envelope>,
    /// A changed command (the recorded one otherwise).
    pub command: Option<String>,
    /// Answer overrides (`--stub 'gh pr merge=exit 1'`): counterfactuals.
    pub stubs: Vec<String>,
    pub novel: NovelPolicy,
}

impl Engine {
    /// Validate and allocate the replay of `baseline` (a new run linked to it).
    pub fn prepare_replay(
        &self,
        baseline: &str,
        req: &ReplayRequest,
        actor: &Actor,
    ) -> Result<Prepared, EngineError> {
        let base = self.get(baseline)?;
        let Some(reh) = base.rehearsal.as_ref() else {
            return Err(EngineError::in_state(
                base.state,
                format!(
                    "run {baseline} has no rehearsal to replay (state {})",
                    base.state.as_str()
                ),
            ));
        };
        let p = self.run_dir(baseline).join("envelope.json");
        let bytes =
            crate::state_file::read(&p).map_err(|source| EngineError::storage(&p, source))?;
        let mut env: crate::envelope::Envelope =
            serde_json::from_slice(&bytes).map_err(|e| EngineError::corrupt(&p, e))?;
        if let Some(new) = &req.envelope {
            let (wd, caller_env, umask) = (
                env.working_dir.take(),
                env.caller_env.take(),
                env.caller_umask.take(),
            );
            env = new.clone();
            if env.working_dir.is_none() {
                env.working_dir = wd;
            }
            // The recorded run's environment and umask, unless the new
            // envelope carries its own.
            if env.caller_env.is_none() {
                env.caller_env = caller_env;
            }
            if env.caller_umask.is_none() {
                env.caller_umask = umask;
            }
        }
        if let Some(c) = &req.command {
            env.command = Some(c.clone());
            env.steps = None;
        }
        for (i, s) in req.stubs.iter().enumerate() {
            let c = crate::policy::stubs::parse_cli_stub(s)
                .map_err(|e| EngineError::invalid(Input::Request, e))?;
            env.stubs.insert(format!("replay-{}", i + 1), c);
        }
        // A run rehearsed in a client's view (a container's workspace) is
        // replayed there, in the same directory, while this daemon holds it.
        let view = match (&base.workspace_view, base.workspace_identity) {
            (Some(_), Some(id)) => {
                super::live::check_view_held(&base, &id)?;
                crate::workspace::owner::view::find(std::path::Path::new(&base.workspace), &id)
            }
            _ => None,
        };
        let access = match &view {
            Some(v) => crate::workspace::owner::OwnerSession::start_in(
                &crate::workspace::owner::Creds::of_user(actor.uid, actor.gid),
                Some(v.clone()),
            )
            .map_err(|e| EngineError::invalid(Input::Workspace, e.to_string()))?,
            None => super::access_as(actor)?,
        };
        let spec = env
            .validate(None, &access)
            .map_err(|e| EngineError::invalid(Input::Request, e.to_string()))?;
        if let Some(v) = &view
            && (spec.workspace.display().to_string() != base.workspace
                || (spec.workspace_identity.dev, spec.workspace_identity.ino) != (v.dev, v.ino))
        {
            return Err(EngineError::invalid(
                Input::Workspace,
                format!(
                    "run {baseline} was rehearsed in a client's own mount namespace; its replay runs in the same workspace ({}), not another",
                    base.workspace
                ),
            ));
        }
        let set = recording_of(&base, reh, req.novel);
        let bytes = serde_json::to_vec(&set).map_or(0, |v| v.len());
        if bytes > crate::sandbox::stubs::MAX_REPLAY_SET_BYTES {
            return Err(EngineError::invalid(
                Input::Request,
                format!(
                    "run {baseline}'s recorded calls take {} KiB, more than a replay carries into the sandbox ({} KiB); replay a run with fewer or smaller calls",
                    bytes / 1024,
                    crate::sandbox::stubs::MAX_REPLAY_SET_BYTES / 1024
                ),
            ));
        }
        self.prepare_run(&spec, actor, None, Some(set))
    }

    /// [`Engine::prepare_replay`] and the rehearsal, in this process.
    pub fn replay(
        &self,
        baseline: &str,
        req: &ReplayRequest,
        actor: &Actor,
    ) -> Result<RunRecord, EngineError> {
        let p = self.prepare_replay(baseline, req, actor)?;
        self.rehearse_prepared(p, None)
    }
}

/// The baseline's answered calls (a strict replay's refusals are not answers).
fn recording_of(base: &RunRecord, reh: &crate::record::Rehearsal, novel: NovelPolicy) -> ReplaySet {
    ReplaySet {
        baseline: base.run_id.clone(),
        novel,
        // One answer per (tool, argv): the first the recording gave.
        calls: reh
            .would_be_actions
            .iter()
            .filter(|a| a.source != "novel")
            .filter({
                let mut seen = std::collections::HashSet::new();
                move |a| seen.insert((a.tool.clone(), a.argv_hash.clone()))
            })
            .map(|a| RecordedCall {
                tool: a.tool.clone(),
                argv_hash: a.argv_hash.clone(),
                argv: a.argv.clone(),
                answer: a.answer.clone(),
            })
            .collect(),
    }
}
