//! A reviewer's decision from the fleet store, applied by the run's own
//! host once, or refused, and either way journaled here first: the
//! journal is the truth of what this host did with each decision, so a
//! decision is never applied twice nor lost across a restart of the host
//! or of the store. The engine's one review path does the checks
//! ([`crate::engine::Engine::review_bound`]: the two-identity rule by
//! person, the run's state, the evidence hash the reviewer saw); this
//! module adds only who the role is (the fleet config's people).

use std::collections::HashMap;

use tokio_postgres::Client;

use super::FleetError;
use super::config::People;
use super::host::FleetHost;
use crate::engine::{Engine, FleetReviewer, ReviewAction, ReviewerAuth};
use crate::journal::Actor;

/// A decision waiting for this host.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub id: i64,
    pub run_id: String,
    pub action: String,
    pub evidence_hash: String,
    pub override_block: bool,
    pub note: String,
    pub role: String,
}

/// A decision's outcome as this host's journal records it.
#[derive(Debug, Clone)]
pub(super) struct Ack {
    pub outcome: &'static str,
    pub reason: Option<String>,
    pub seq: u64,
    pub at: String,
}

impl Ack {
    /// The outcome a journal record gives a fleet decision, if it does.
    pub(super) fn of(r: &crate::journal::Published) -> Option<(i64, Ack)> {
        let id = r.data.get("fleet_decision")?.as_i64()?;
        let (outcome, reason) = match r.kind.as_str() {
            "approval" | "rejection" => ("applied", None),
            "fleet_decision_refused" => ("refused", r.data["reason"].as_str().map(String::from)),
            _ => return None,
        };
        Some((
            id,
            Ack {
                outcome,
                reason,
                seq: r.seq,
                at: r.at.clone(),
            },
        ))
    }

    /// Write this outcome to the decision's row (idempotent: only a row
    /// without an outcome changes).
    pub(super) async fn record<C: tokio_postgres::GenericClient>(
        &self,
        c: &C,
        id: i64,
    ) -> Result<(), FleetError> {
        c.execute(
            ACK,
            &[
                &id,
                &self.outcome,
                &self.reason,
                &self.at,
                &(self.seq as i64),
            ],
        )
        .await?;
        Ok(())
    }
}

/// A decision's outcome into its row ($1 id, $2 outcome, $3 reason, $4
/// when, $5 the journal record): only a row without one changes.
pub(super) const ACK: &str = "UPDATE dryrun.decisions SET outcome = $2, outcome_reason = $3, applied_at = $4::text::timestamptz, journal_seq = $5
     WHERE id = $1 AND outcome IS NULL";

/// What happened to a decision here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    Applied,
    Refused(String),
    /// Not about a run of this host: answered in the store only.
    Ignored(String),
}

/// The fleet decisions this host's journal shows it applied or refused.
pub(super) fn processed_decisions(
    engine: &Engine,
) -> Result<HashMap<i64, Option<Ack>>, FleetError> {
    let j = engine.journal();
    let mut out = HashMap::new();
    let mut from = 0;
    loop {
        let recs = j.records_with_hash_from(from, 10_000)?;
        let Some(last) = recs.last() else {
            return Ok(out);
        };
        from = last.end;
        out.extend(
            recs.iter()
                .filter_map(Ack::of)
                .map(|(id, ack)| (id, Some(ack))),
        );
    }
}

/// Apply every pending decision for this host not applied or refused yet.
pub(super) async fn apply_pending(h: &mut FleetHost, c: &Client) -> Result<(), FleetError> {
    let rows = c
        .query(
            "SELECT id, run_id, action, evidence_hash, override_block, note, reviewer_role::text
             FROM dryrun.decisions WHERE host_id = session_user AND outcome IS NULL ORDER BY id",
            &[],
        )
        .await?;
    for row in rows {
        let d = Pending {
            id: row.get(0),
            run_id: row.get(1),
            action: row.get(2),
            evidence_hash: row.get(3),
            override_block: row.get(4),
            note: row.get(5),
            role: row.get(6),
        };
        match h.processed.get(&d.id) {
            // Done here, and the store lost the answer: give it again.
            Some(Some(ack)) => {
                ack.record(c, d.id).await?;
                continue;
            }
            // Done here, its journal record not read back yet.
            Some(None) => continue,
            None => {}
        }
        let (engine, people, host) = (h.engine.clone(), h.spec.people.clone(), h.host_id.clone());
        let id = d.id;
        let outcome = tokio::task::spawn_blocking(move || apply_one(&engine, &people, &host, &d))
            .await
            .map_err(|e| FleetError::Io(std::io::Error::other(e)))?;
        match &outcome {
            Outcome::Applied => tracing::info!(decision = id, "fleet decision applied"),
            Outcome::Refused(why) => tracing::warn!(decision = id, "fleet decision refused: {why}"),
            Outcome::Ignored(why) => {
                tracing::warn!(decision = id, "fleet decision ignored: {why}");
                c.execute(
                    "UPDATE dryrun.decisions SET outcome = 'refused', outcome_reason = $2 WHERE id = $1 AND outcome IS NULL",
                    &[&id, why],
                )
                .await?;
            }
        }
        h.processed.insert(id, None);
    }
    Ok(())
}

/// Who applies fleet decisions in the journal: no uid of this host.
pub(super) fn fleet_actor() -> Actor {
    Actor {
        uid: u32::MAX,
        gid: u32::MAX,
        pid: None,
        via: "fleet".into(),
    }
}

/// Apply `d` or refuse it; journaled either way (a refusal that cannot be
/// journaled is tried again after the next start).
pub(super) fn apply_one(engine: &Engine, people: &People, host: &str, d: &Pending) -> Outcome {
    let actor = fleet_actor();
    // Not a run id this host makes: nothing to look up, nothing to journal
    // it under (the store's answer says why).
    if !crate::engine::valid_run_id(&d.run_id) {
        return Outcome::Ignored(format!("{:?} is not a run id", d.run_id));
    }
    let refuse = |why: String| {
        if let Err(e) = engine.journal_fleet_refusal(&d.run_id, &actor, d.id, &d.role, &why) {
            tracing::warn!(decision = d.id, "could not journal the refusal: {e}");
        }
        Outcome::Refused(why)
    };
    let Some(person) = people.person_of_role(&d.role) else {
        return refuse(format!(
            "role {} is no person's in this host's fleet config (people); its decisions are not applied here",
            d.role
        ));
    };
    let r = match engine.get(&d.run_id) {
        Ok(r) => r,
        Err(e) => return refuse(e.to_string()),
    };
    let submitter = people.submitter(r.submitted_by.as_ref().map(|a| a.uid), host);
    let auth = ReviewerAuth::Fleet(FleetReviewer {
        decision: d.id,
        role: d.role.clone(),
        person: person.to_string(),
        submitter: submitter.person,
    });
    let action = match d.action.as_str() {
        "approve" => ReviewAction::Approve,
        "reject" => ReviewAction::Reject,
        other => return refuse(format!("{other:?} is not a decision")),
    };
    match engine.review_bound(
        &d.run_id,
        &actor,
        &auth,
        action,
        &d.note,
        d.override_block,
        Some(&d.evidence_hash),
    ) {
        Ok(_) => Outcome::Applied,
        Err(e) => refuse(e.to_string()),
    }
}
