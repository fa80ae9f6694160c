//! Approvals given in an agent host's own permission prompt (Claude Code's
//! `ask`): the hook that rehearsed a run asks the engine for a grant, a
//! single-use token bound to that run, and puts it into the command the
//! host runs when the person says yes. Presenting the token approves the
//! run (journaled as approved via the agent host's prompt) and is consumed
//! before anything is promoted, so it works once, for that run only.
//!
//! Who may ask: the engine cannot tell the hook from any other process
//! running as the agent's uid, which could ask for a grant and present it
//! itself. So grants are given only where
//! `EngineOptions::host_prompt_approvals` says so: in-process (the state directory is the
//! agent's own anyway) and on a daemon started with
//! `--host-prompt-approvals`; otherwise [`EngineError::HostPromptOff`] and
//! the run waits for a reviewer.
//!
//! Only the token's BLAKE3 hash is kept (`<state>/host-prompt/<run_id>`),
//! with the time it was issued; a grant expires after [`GRANT_TTL_S`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Engine, EngineError, Input, entries, now_rfc3339, unix_now};
use crate::journal::Actor;
use crate::record::{ApprovalRecord, RunRecord, RunState};
use crate::verdict::Decision;

/// How long a grant stays usable: the person answers the host's prompt
/// within this time or the hook must rehearse again.
pub const GRANT_TTL_S: u64 = 3600;

/// `authenticated_by` of an approval given in the agent host's prompt.
pub const HOST_PROMPT_AUTH: &str = "agent_host_prompt";

#[derive(Serialize, Deserialize)]
struct Grant {
    token_blake3: String,
    issued_at: u64,
    host: String,
    issued_to_uid: u32,
}

fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 32
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Engine {
    fn grant_path(&self, run_id: &str) -> PathBuf {
        self.state_dir.join("host-prompt").join(run_id)
    }

    /// Issue the single-use token for run `run_id`, which must be awaiting
    /// approval with the decision `needs_approval` (never a blocked run:
    /// that takes a reviewer's override) and have been submitted by
    /// `actor`. One grant per run: a second request is refused, so a token
    /// that was shown once cannot be replaced by one somebody else learns.
    pub fn grant_host_prompt(
        &self,
        run_id: &str,
        actor: &Actor,
        host: &str,
    ) -> Result<String, EngineError> {
        if !valid_host(host) {
            return Err(EngineError::invalid(
                Input::Request,
                format!(
                    "host: {host:?} is not an agent host name (lowercase letters, digits, '-')"
                ),
            ));
        }
        if !self.opts.host_prompt_approvals {
            return Err(EngineError::HostPromptOff {
                run_id: run_id.to_string(),
            });
        }
        let _g = self.lock_run(run_id)?;
        let r = self.get(run_id)?;
        if r.submitted_by.as_ref().map(|a| a.uid) != Some(actor.uid) {
            return Err(EngineError::not_allowed(format!(
                "uid {} did not submit run {run_id}; only the submitter's hook asks its host's prompt",
                actor.uid
            )));
        }
        let decision = r.verdict.as_ref().map(|v| v.decision);
        if r.state != RunState::AwaitingApproval || decision != Some(Decision::NeedsApproval) {
            return Err(EngineError::conflict(format!(
                "run {run_id} is {} (decision {}); a host prompt can only approve a run awaiting approval whose decision is needs_approval",
                r.state.as_str(),
                decision.map(|d| d.as_str()).unwrap_or("none")
            )));
        }
        let path = self.grant_path(run_id);
        if path.exists() {
            return Err(EngineError::conflict(format!(
                "run {run_id} already has a host-prompt grant; rehearse again for a new one"
            )));
        }
        let token = {
            let mut b = [0u8; 32];
            getrandom::fill(&mut b).expect("the kernel's random source works");
            hex::encode(b)
        };
        let grant = Grant {
            token_blake3: blake3::hash(token.as_bytes()).to_hex().to_string(),
            issued_at: unix_now(),
            host: host.to_string(),
            issued_to_uid: actor.uid,
        };
        let dir = self.state_dir.join("host-prompt");
        std::fs::create_dir_all(&dir).map_err(|source| EngineError::storage(&dir, source))?;
        super::store::write_atomic(&path, &serde_json::to_vec(&grant).expect("serializes"))
            .map_err(|source| EngineError::storage(&path, source))?;
        self.journal.append(&entries::host_prompt_grant(
            run_id,
            actor,
            host,
            GRANT_TTL_S,
        ))?;
        Ok(token)
    }

    /// The person said yes in the host's prompt: check `token` against the
    /// run's grant, consume the grant (before anything else, so a failure
    /// later never leaves it usable), and record the approval. The caller
    /// then promotes the run as usual.
    pub fn approve_via_host_prompt(
        &self,
        run_id: &str,
        token: &str,
        actor: &Actor,
    ) -> Result<RunRecord, EngineError> {
        // A grant issued before the daemon restarted with them off
        // approves nothing.
        if !self.opts.host_prompt_approvals {
            return Err(EngineError::HostPromptOff {
                run_id: run_id.to_string(),
            });
        }
        let _g = self.lock_run(run_id)?;
        let path = self.grant_path(run_id);
        let refused = || {
            EngineError::not_allowed(format!(
                "no valid host-prompt grant for run {run_id}: the token is wrong, spent or expired (a grant is single-use and bound to the run it was issued for)"
            ))
        };
        let grant: Grant = match crate::state_file::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|_| refused())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(refused()),
            Err(source) => return Err(EngineError::storage(path, source)),
        };
        let presented = blake3::hash(token.as_bytes()).to_hex().to_string();
        // Constant-time comparison of the hashes (blake3::Hash's Eq is).
        let matches = blake3::Hash::from_hex(&grant.token_blake3)
            .map(|h| h == blake3::Hash::from_hex(&presented).expect("hex we made"))
            .unwrap_or(false);
        // The wrong token or the wrong uid consumes nothing.
        if !matches || actor.uid != grant.issued_to_uid {
            return Err(refused());
        }
        // Consumed now, whatever happens next.
        std::fs::remove_file(&path).map_err(|source| EngineError::storage(&path, source))?;
        if unix_now().saturating_sub(grant.issued_at) > GRANT_TTL_S {
            return Err(refused());
        }
        let mut r = self.get(run_id)?;
        let decision = r.verdict.as_ref().map(|v| v.decision);
        if r.state != RunState::AwaitingApproval || decision != Some(Decision::NeedsApproval) {
            return Err(EngineError::conflict(format!(
                "run {run_id} is {}; a host prompt approves only a run awaiting approval",
                r.state.as_str()
            )));
        }
        r.state = RunState::Approved;
        let at = now_rfc3339();
        let note = format!("approved in the {} permission prompt", grant.host);
        r.approvals.push(ApprovalRecord {
            action: "approve".into(),
            by: actor.clone(),
            at,
            note: note.clone(),
            overrode_block: false,
            authenticated_by: HOST_PROMPT_AUTH.into(),
            fleet: None,
        });
        let nonce = {
            let mut b = [0u8; 16];
            getrandom::fill(&mut b).expect("the kernel's random source works");
            hex::encode(b)
        };
        let entry =
            entries::host_prompt_approval(&r, actor, &note, &grant.host, HOST_PROMPT_AUTH, &nonce);
        self.commit_transition(&r, &entry, &nonce)?;
        Ok(r)
    }
}
