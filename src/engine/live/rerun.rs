//! `live.mode: rerun`: the command runs again, as `live:` grants
//! (network, host variables), as its own linked run; its writes must match
//! the rehearsal's before anything is applied. The approval is spent by
//! the first live execution.

use crate::engine::{Engine, EngineError, Input, LiveRun, entries, now_rfc3339};
use crate::journal::Actor;
use crate::model::Change;
use crate::record::{RunRecord, RunState};

pub(super) const RERUN_SPENT: &str = "the rerun approval was spent by its first live execution (one live execution per approval; rehearse again to run it live again)";

impl Engine {
    /// A `live.mode: rerun` approval is spent by the first live execution,
    /// whatever its outcome: before the command runs live, the run leaves
    /// `approved` for `failed` (journaled, durable), so a crash, a failed
    /// live run or a mismatch never leaves an approval to run it again.
    /// Only a successful promotion moves it on to `promoted`.
    pub(super) fn spend_rerun_approval(
        &self,
        r: &mut RunRecord,
        actor: &Actor,
    ) -> Result<(), EngineError> {
        r.state = RunState::Failed;
        r.error = Some(format!(
            "{RERUN_SPENT}; the live execution started at {}",
            now_rfc3339()
        ));
        let nonce = crate::engine::review::new_nonce();
        let entry = entries::rerun_started(r, actor, RERUN_SPENT, &nonce);
        self.commit_transition(r, &entry, &nonce)
    }

    /// The run's validated envelope when it declares `live.mode: rerun`.
    pub(super) fn rerun_envelope(
        &self,
        run_id: &str,
    ) -> Result<Option<crate::envelope::EnvelopeSpec>, EngineError> {
        let p = self.run_dir(run_id).join("envelope.json");
        let Ok(bytes) = crate::state_file::read(&p) else {
            return Ok(None);
        };
        let env: crate::envelope::Envelope =
            serde_json::from_slice(&bytes).map_err(|e| EngineError::corrupt(&p, e))?;
        if env.live.as_ref().map(|l| l.mode) != Some(crate::envelope::LiveMode::Rerun) {
            return Ok(None);
        }
        // Resolved as the workspace's owner recorded by the rehearsal.
        let rec = self.get(run_id)?;
        let id = rec.workspace_identity.ok_or_else(|| {
            EngineError::conflict(format!(
                "run {run_id} does not record which directory it rehearsed; rehearse again"
            ))
        })?;
        super::check_view_held(&rec, &id)?;
        let access = crate::workspace::owner::OwnerSession::for_owner_at(
            &id,
            std::path::Path::new(&rec.workspace),
        )
        .map_err(|e| EngineError::invalid(Input::Workspace, e.to_string()))?;
        env.validate(None, &access)
            .map(Some)
            .map_err(|e| EngineError::invalid(Input::Workspace, e.to_string()))
    }

    /// Run the command again as `live:` grants, as its own (linked) run.
    pub(super) fn rerun_live(
        &self,
        run_id: &str,
        spec: &crate::envelope::EnvelopeSpec,
        actor: &Actor,
        extra_env: Vec<(String, String)>,
    ) -> Result<RunRecord, EngineError> {
        let live = LiveRun {
            rerun_of: run_id.to_string(),
            network_host: spec.live.network == crate::envelope::LiveNetwork::Host,
            extra_env,
        };
        let prepared = self.prepare_run(spec, actor, Some(&live), None)?;
        let mut rec = self.rehearse_prepared(prepared, None)?;
        if rec.state == RunState::Failed {
            return Err(EngineError::in_state(
                RunState::Failed,
                format!(
                    "the live rerun {} failed: {}; nothing was applied",
                    rec.run_id,
                    rec.error.as_deref().unwrap_or("unknown error")
                ),
            ));
        }
        // Evidence of the live execution, not a run awaiting anything.
        rec.state = RunState::Rehearsed;
        self.save(&rec)?;
        Ok(rec)
    }
}

/// The host variables `live.env_from_host` names, checked before anything
/// runs: exactly those, all present.
pub(super) fn live_env(
    spec: &crate::envelope::EnvelopeSpec,
    host_env: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, EngineError> {
    {
        let wanted = &spec.live.env_from_host;
        if let Some(extra) = host_env.keys().find(|k| !wanted.contains(k)) {
            // Only a shell identifier is ever named.
            let extra = if crate::model::text::is_shell_identifier(extra) {
                extra.clone()
            } else {
                "a variable whose name is not a shell identifier".into()
            };
            return Err(EngineError::invalid(
                Input::Request,
                format!(
                    "env: {extra} is not in the run's live.env_from_host ({}); only those variables are handed to the live run",
                    wanted.join(", ")
                ),
            ));
        }
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|n| !host_env.contains_key(*n))
            .collect();
        if !missing.is_empty() {
            return Err(EngineError::invalid(
                Input::Request,
                format!(
                    "live.env_from_host needs {} from the promoting side's environment; set them and promote again",
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Ok(host_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

/// What differs between the rehearsal's writes and the live rerun's.
pub(super) fn compare_change_sets(rehearsed: &[Change], live: &[Change]) -> Vec<String> {
    use std::collections::BTreeMap;
    let key = |c: &Change| {
        (
            c.kind,
            c.file_type,
            c.before.clone(),
            c.after.clone(),
            c.mode_after,
            c.symlink_target.clone(),
        )
    };
    let a: BTreeMap<Vec<u8>, _> = rehearsed.iter().map(|c| (c.path_bytes(), key(c))).collect();
    let b: BTreeMap<Vec<u8>, _> = live.iter().map(|c| (c.path_bytes(), key(c))).collect();
    let mut out = Vec::new();
    for (p, ka) in &a {
        let shown = crate::workspace::paths::escape_for_humans(p);
        match b.get(p) {
            None => out.push(format!("{shown}: written in the rehearsal, not live")),
            Some(kb) if kb != ka => out.push(format!(
                "{shown}: live result differs ({:?} {} vs rehearsed {:?} {})",
                kb.0,
                kb.3.as_deref()
                    .map(|h| &h[..12.min(h.len())])
                    .unwrap_or("-"),
                ka.0,
                ka.3.as_deref()
                    .map(|h| &h[..12.min(h.len())])
                    .unwrap_or("-"),
            )),
            Some(_) => {}
        }
    }
    for p in b.keys() {
        if !a.contains_key(p) {
            out.push(format!(
                "{}: written live, not in the rehearsal",
                crate::workspace::paths::escape_for_humans(p)
            ));
        }
    }
    out
}
