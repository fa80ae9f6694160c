//! What the `--fleet` commands read and write, as the role their
//! connection string logs in as: the review queue and the runs of every
//! host, decisions (through `dryrun.decide()`, which takes the reviewer
//! from the session), the fleet policy, the hosts.

use std::time::Duration;

use serde_json::Value;
use tokio_postgres::Client;

use super::FleetError;

/// Runs of every host, newest first (the queue, `awaiting_approval`,
/// oldest first), as JSON objects.
pub async fn runs(c: &Client, state: Option<&str>, limit: i64) -> Result<Vec<Value>, FleetError> {
    let queue = state == Some("awaiting_approval");
    let order = if queue {
        "waiting_since ASC NULLS LAST, created_at ASC"
    } else {
        "created_at DESC, run_id DESC"
    };
    let sql = format!(
        "SELECT to_jsonb(x) FROM (
            SELECT run_id, host_id::text AS host, state, decision, command, task, workspace, risk_level,
                   submitter_uid, submitter_name, submitter_person, evidence_hash, policy_version,
                   reasons, changes, created_at, waiting_since, updated_at
            FROM dryrun.runs WHERE $1::text IS NULL OR state = $1 ORDER BY {order} LIMIT $2) x"
    );
    let rows = c.query(&sql, &[&state, &limit]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The review queue with each run's evidence, oldest first.
pub async fn queue(c: &Client) -> Result<Vec<Value>, FleetError> {
    let rows = c
        .query(
            "SELECT to_jsonb(x) FROM (
                SELECT r.run_id, r.host_id::text AS host, r.state, r.decision, r.command, r.submitter_person,
                       r.submitter_name, r.evidence_hash, r.policy_version, r.waiting_since,
                       e.summary, e.diffs, e.egress
                FROM dryrun.runs r JOIN dryrun.evidence e USING (run_id)
                WHERE r.state = 'awaiting_approval'
                ORDER BY r.waiting_since ASC NULLS LAST, r.created_at ASC) x",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// One run with its evidence (if it waits), by id or unique prefix.
pub async fn run(c: &Client, id: &str) -> Result<Value, FleetError> {
    let rows = c
        .query(
            "SELECT to_jsonb(x) FROM (
                SELECT r.run_id, r.host_id::text AS host, r.state, r.decision, r.command, r.submitter_person,
                       r.submitter_name, r.evidence_hash, r.policy_version, r.reasons, r.changes,
                       e.summary, e.diffs, e.egress
                FROM dryrun.runs r LEFT JOIN dryrun.evidence e USING (run_id)
                WHERE r.run_id LIKE $1 || '%' ORDER BY r.run_id LIMIT 2) x",
            &[&id],
        )
        .await?;
    match rows.len() {
        1 => Ok(rows[0].get(0)),
        0 => Err(FleetError::Db(format!("no run {id} in the fleet"))),
        _ => Err(FleetError::Db(format!(
            "{id} is the start of more than one run's id; give more of it"
        ))),
    }
}

/// Record a decision (the reviewer: this connection's role). Its id.
pub async fn decide(
    c: &Client,
    run_id: &str,
    approve: bool,
    evidence_hash: &str,
    note: &str,
    override_block: bool,
) -> Result<i64, FleetError> {
    let action = if approve { "approve" } else { "reject" };
    let row = c
        .query_one(
            "SELECT dryrun.decide($1, $2, $3, $4, $5)",
            &[&run_id, &action, &evidence_hash, &note, &override_block],
        )
        .await?;
    Ok(row.get(0))
}

/// A decision's outcome once its host applied or refused it:
/// `Some((outcome, reason))`, or `None` when `wait` passed first.
pub async fn wait_outcome(
    c: &Client,
    id: i64,
    wait: Duration,
) -> Result<Option<(String, Option<String>)>, FleetError> {
    let until = tokio::time::Instant::now() + wait;
    loop {
        let row = c
            .query_one(
                "SELECT outcome, outcome_reason FROM dryrun.decisions WHERE id = $1",
                &[&id],
            )
            .await?;
        if let Some(o) = row.get::<_, Option<String>>(0) {
            return Ok(Some((o, row.get(1))));
        }
        if tokio::time::Instant::now() >= until {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Publish a fleet policy version (checked first by this binary); its
/// version number.
pub async fn publish_policy(c: &Client, text: &str, minimum: bool) -> Result<i64, FleetError> {
    let hash = super::policy::text_hash(text);
    let row = c
        .query_one(
            "SELECT dryrun.publish_policy($1, $2, $3)",
            &[&text, &hash, &minimum],
        )
        .await?;
    Ok(row.get(0))
}

/// Set the fleet's minimum policy version.
pub async fn set_minimum(c: &Client, version: i64) -> Result<(), FleetError> {
    c.execute(
        "UPDATE dryrun.settings SET min_policy_version = $1",
        &[&version],
    )
    .await?;
    c.execute(
        "SELECT pg_notify('dryrun_policy', $1)",
        &[&version.to_string()],
    )
    .await?;
    Ok(())
}

/// Every host: id, version, policy, Landlock ABI, last seen, published.
pub async fn hosts(c: &Client) -> Result<Vec<Value>, FleetError> {
    let rows = c
        .query(
            "SELECT to_jsonb(h) FROM (SELECT host_id::text AS host, version, landlock_abi, policy_version,
                policy_hash, registered_at, last_seen, published_seq FROM dryrun.hosts ORDER BY host_id) h",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
