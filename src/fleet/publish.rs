//! Publication: the journal past the published position becomes
//! `dryrun.events` rows (each record's sequence number, hash, predecessor,
//! kind, run and state: the runs' state transitions, and the chain the
//! anchors pin), the runs those records or the engine's events touched are
//! upserted into `dryrun.runs` from their records, a run waiting for a
//! person gets its evidence row (redacted, capped), the journal heads of
//! group commits become `dryrun.anchors`, and the outcome of each fleet
//! decision the records carry is written back to `dryrun.decisions`: all
//! in one transaction per batch. Every statement is idempotent (a batch
//! cut short by a crash or a lost connection is published again whole).

use std::collections::HashSet;

use serde_json::{Value, json};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use super::FleetError;
use super::host::{FleetHost, Position};
use crate::engine::Engine;
use crate::journal::Published;
use crate::record::{RunRecord, RunState};

/// Records per batch.
const BATCH: usize = 500;
/// Evidence caps: a file's diff, all diffs, egress entries.
const DIFF_FILE_MAX: usize = 8 << 10;
const DIFFS_MAX: usize = 64 << 10;
const EGRESS_MAX: usize = 200;
const REASONS_MAX: usize = 100;
/// Runs with more changes than this get no diffs (their summary counts
/// them by directory).
const DIFF_FILES_MAX: usize = 200;

/// Where publication stands, from the store (its last event of this host)
/// and the local journal (where that record ends, and that it is the same).
pub(super) async fn find_position(h: &FleetHost, c: &Client) -> Result<Position, FleetError> {
    let row = c
        .query_opt(
            "SELECT seq, hash FROM dryrun.events WHERE host_id = session_user ORDER BY seq DESC LIMIT 1",
            &[],
        )
        .await?;
    let last: Option<(i64, String)> = row.map(|r| (r.get(0), r.get(1)));
    if let (Some(p), Some((seq, hash))) = (&h.position, &last)
        && p.next_seq == *seq as u64 + 1
        && p.last_hash.as_deref() == Some(hash.as_str())
    {
        return Ok(p.clone());
    }
    let engine = h.engine.clone();
    let want = last.clone();
    tokio::task::spawn_blocking(move || -> Result<Position, FleetError> {
        let j = engine.journal();
        let Some((seq, hash)) = want else {
            return Ok(Position::default());
        };
        let seq = seq as u64;
        let offset = j.offset_after(Some(seq))?.ok_or_else(|| {
            FleetError::Diverged(format!(
                "the fleet holds its record {seq} but the journal has no such record"
            ))
        })?;
        let start = if seq == 0 {
            0
        } else {
            j.offset_after(Some(seq - 1))?.unwrap_or(0)
        };
        let mine = j.records_with_hash_from(start, 1)?;
        match mine.first() {
            Some(r) if r.seq == seq && r.hash == hash => Ok(Position {
                next_seq: seq + 1,
                offset,
                last_hash: Some(hash),
            }),
            _ => Err(FleetError::Diverged(format!(
                "its record {seq} is not the one it published (hash {})",
                &hash[..hash.len().min(12)]
            ))),
        }
    })
    .await
    .map_err(|e| FleetError::Io(std::io::Error::other(e)))?
}

/// The ids of the runs waiting for a person here.
pub(super) async fn waiting_runs(engine: &std::sync::Arc<Engine>) -> Vec<String> {
    let e = engine.clone();
    tokio::task::spawn_blocking(move || {
        e.list_current(Some(RunState::AwaitingApproval))
            .map(|v| v.into_iter().map(|r| r.run_id).collect())
            .unwrap_or_default()
    })
    .await
    .unwrap_or_default()
}

/// A run's row, and its evidence while it waits.
struct RunRow {
    record: RunRecord,
    summary: Value,
    evidence: Option<(Value, Value, Value)>,
}

/// One batch: `Ok(true)` when more remains.
pub(super) async fn publish_once(h: &mut FleetHost, c: &mut Client) -> Result<bool, FleetError> {
    if let Some(why) = &h.diverged {
        return Err(FleetError::Diverged(why.clone()));
    }
    let Some(pos) = h.position.clone() else {
        return Ok(false);
    };
    if h.dirty_overflow {
        h.dirty.extend(waiting_runs(&h.engine).await);
        h.dirty_overflow = false;
    }
    let engine = h.engine.clone();
    let from = pos.offset;
    let recs =
        tokio::task::spawn_blocking(move || engine.journal().records_with_hash_from(from, BATCH))
            .await
            .map_err(|e| FleetError::Io(std::io::Error::other(e)))??;
    if recs.is_empty() && h.dirty.is_empty() {
        return Ok(false);
    }
    // The journal goes on from where it was published, or it was changed.
    if let Some(first) = recs.first()
        && (first.seq != pos.next_seq || pos.last_hash.as_ref().is_some_and(|p| *p != first.prev))
    {
        let why = format!(
            "after its published record {} comes record {} with prev {}",
            pos.next_seq as i64 - 1,
            first.seq,
            &first.prev[..first.prev.len().min(12)]
        );
        h.diverged = Some(why.clone());
        return Err(FleetError::Diverged(why));
    }
    let mut ids: Vec<String> = recs.iter().filter_map(|r| r.run_id.clone()).collect();
    ids.extend(h.dirty.iter().cloned());
    let ids: Vec<String> = ids
        .into_iter()
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    // When each run began to wait, by its host's verdict (kept until the
    // run's record, saved just after, is published waiting).
    if h.waiting_at.len() > 10_000 {
        h.waiting_at.clear();
    }
    h.waiting_at.extend(
        recs.iter()
            .filter(|r| r.kind == "verdict" && r.data["state"] == "awaiting_approval")
            .filter_map(|r| Some((r.run_id.clone()?, r.at.clone()))),
    );
    let waiting_at = &h.waiting_at;
    let rows = {
        let engine = h.engine.clone();
        tokio::task::spawn_blocking(move || {
            ids.iter()
                .filter_map(|id| engine.get(id).ok())
                .map(|r| run_row(&engine, r))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| FleetError::Io(std::io::Error::other(e)))?
    };
    let last = recs.last().cloned();
    let st = h
        .statements
        .clone()
        .ok_or_else(|| FleetError::Unavailable("not connected".into()))?;
    // The batch's parameters first, then one transaction whose statements
    // are sent together (pipelined): three round trips a batch,
    // one statement for all its runs.
    let mut runs = RunColumns::default();
    let mut evidence_params: Vec<Vec<Param>> = Vec::new();
    let mut not_waiting: Vec<String> = Vec::new();
    for row in &rows {
        let r = &row.record;
        let sub = h
            .spec
            .people
            .submitter(r.submitted_by.as_ref().map(|a| a.uid), &h.host_id);
        runs.push(r, &row.summary, sub, waiting_at.get(&r.run_id).cloned());
        match &row.evidence {
            Some((summary, diffs, egress)) => evidence_params.push(vec![
                Box::new(r.run_id.clone()),
                Box::new(summary.clone()),
                Box::new(diffs.clone()),
                Box::new(egress.clone()),
            ]),
            None if h.with_evidence.contains(&r.run_id) => not_waiting.push(r.run_id.clone()),
            None => {}
        }
    }
    let run_params = (!rows.is_empty()).then(|| runs.into_params());
    let acks: Vec<(i64, super::apply::Ack)> =
        recs.iter().filter_map(super::apply::Ack::of).collect();
    let ack_params: Vec<Vec<Param>> = acks
        .iter()
        .map(|(id, a)| -> Vec<Param> {
            vec![
                Box::new(*id),
                Box::new(a.outcome.to_string()),
                Box::new(a.reason.clone()),
                Box::new(a.at.clone()),
                Box::new(a.seq as i64),
            ]
        })
        .collect();
    let events_params = (!recs.is_empty()).then(|| events_params(&recs));
    let published = last.as_ref().map(|l| l.seq);
    let anchor_params: Option<Vec<Param>> = last.as_ref().map(|l| {
        // The heads of group commits up to here; at least the last record.
        let mut heads: Vec<(i64, String)> = h
            .heads
            .iter()
            .filter(|a| a.seq <= l.seq && a.seq >= pos.next_seq)
            .map(|a| (a.seq as i64, a.hash.clone()))
            .collect();
        if heads.last().is_none_or(|x| x.0 != l.seq as i64) {
            heads.push((l.seq as i64, l.hash.clone()));
        }
        let (s, hs): (Vec<i64>, Vec<String>) = heads.into_iter().unzip();
        vec![Box::new(s) as Param, Box::new(hs)]
    });
    let not_waiting_params: Vec<Param> = vec![Box::new(not_waiting.clone())];
    let mut work: Vec<(&tokio_postgres::Statement, Vec<&(dyn ToSql + Sync)>)> = Vec::new();
    if let Some(p) = &events_params {
        work.push((&st.events, refs(p)));
    }
    if let Some(p) = &run_params {
        work.push((&st.upsert_run, refs(p)));
    }
    work.extend(
        evidence_params
            .iter()
            .map(|p| (&st.upsert_evidence, refs(p))),
    );
    if !not_waiting.is_empty() {
        work.push((&st.delete_evidence, refs(&not_waiting_params)));
    }
    work.extend(ack_params.iter().map(|p| (&st.ack, refs(p))));
    if let Some(p) = &anchor_params {
        work.push((&st.anchors, refs(p)));
    }
    let tx = c.transaction().await?;
    futures_util::future::try_join_all(work.iter().map(|(s, p)| tx.execute(*s, p))).await?;
    tx.commit().await?;
    if let Some(l) = last {
        h.position = Some(Position {
            next_seq: l.seq + 1,
            offset: l.end,
            last_hash: Some(l.hash),
        });
    }
    if let Some(p) = published {
        h.heads.retain(|a| a.seq > p);
    }
    for (id, ack) in acks {
        h.processed.insert(id, Some(ack));
    }
    for row in &rows {
        h.dirty.remove(&row.record.run_id);
        if row.record.state == RunState::AwaitingApproval {
            h.waiting_at.remove(&row.record.run_id);
        }
        if row.evidence.is_some() {
            h.with_evidence.insert(row.record.run_id.clone());
        }
    }
    for id in &not_waiting {
        h.with_evidence.remove(id);
    }
    // Runs whose record is gone (collected) are not published again.
    h.dirty
        .retain(|id| rows.iter().any(|r| &r.record.run_id == id));
    Ok(recs.len() == BATCH)
}

/// Every run of a batch in one statement (one row per element of the
/// arrays `RunColumns` makes, in its order).
const UPSERT_RUN: &str = "INSERT INTO dryrun.runs (run_id, state, decision, command, task, workspace, intent, reasons, changes,
    risk_level, submitter_uid, submitter_name, submitter_person, submitter_roles, evidence_hash, policy_version,
    policy_hash, created_at, waiting_since, waiting_visible_at, updated_at)
SELECT t.id, t.st, t.dec, t.cmd, t.task, t.ws, t.intent, t.reasons, t.changes, t.risk, t.uid, t.name, t.person,
    ARRAY(SELECT jsonb_array_elements_text(t.roles))::name[], t.ehash, t.pv, t.ph, t.created::timestamptz,
    CASE WHEN t.st = 'awaiting_approval' THEN coalesce(t.waiting::timestamptz, clock_timestamp()) END,
    CASE WHEN t.st = 'awaiting_approval' THEN clock_timestamp() END, clock_timestamp()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::jsonb[],
    $9::jsonb[], $10::text[], $11::int8[], $12::text[], $13::text[], $14::jsonb[], $15::text[], $16::int8[],
    $17::text[], $18::text[], $19::text[])
    AS t(id, st, dec, cmd, task, ws, intent, reasons, changes, risk, uid, name, person, roles, ehash, pv, ph, created, waiting)
ON CONFLICT (run_id) DO UPDATE SET state = EXCLUDED.state, decision = EXCLUDED.decision, reasons = EXCLUDED.reasons,
    changes = EXCLUDED.changes, risk_level = EXCLUDED.risk_level, submitter_person = EXCLUDED.submitter_person,
    submitter_roles = EXCLUDED.submitter_roles, evidence_hash = EXCLUDED.evidence_hash,
    policy_version = EXCLUDED.policy_version, policy_hash = EXCLUDED.policy_hash,
    waiting_since = coalesce(dryrun.runs.waiting_since, EXCLUDED.waiting_since),
    waiting_visible_at = coalesce(dryrun.runs.waiting_visible_at, EXCLUDED.waiting_visible_at),
    updated_at = clock_timestamp()
WHERE dryrun.runs.host_id = session_user";

/// A batch's runs as the columns of [`UPSERT_RUN`].
#[derive(Default)]
struct RunColumns {
    id: Vec<String>,
    state: Vec<String>,
    decision: Vec<Option<String>>,
    command: Vec<String>,
    task: Vec<Option<String>>,
    workspace: Vec<String>,
    intent: Vec<Value>,
    reasons: Vec<Value>,
    changes: Vec<Value>,
    risk: Vec<Option<String>>,
    uid: Vec<Option<i64>>,
    name: Vec<Option<String>>,
    person: Vec<String>,
    roles: Vec<Value>,
    evidence_hash: Vec<Option<String>>,
    policy_version: Vec<Option<i64>>,
    policy_hash: Vec<Option<String>>,
    created: Vec<String>,
    waiting: Vec<Option<String>>,
}

impl RunColumns {
    fn push(
        &mut self,
        r: &RunRecord,
        summary: &Value,
        sub: super::config::Submitter,
        waiting: Option<String>,
    ) {
        let verdict = r.verdict.as_ref();
        let reasons: Vec<&String> = verdict
            .map(|v| v.reasons.iter().take(REASONS_MAX).collect())
            .unwrap_or_default();
        self.id.push(r.run_id.clone());
        self.state.push(r.state.as_str().to_string());
        self.decision
            .push(verdict.map(|v| v.decision.as_str().to_string()));
        self.command.push(r.command.clone());
        self.task.push(r.task.clone());
        self.workspace.push(r.workspace.clone());
        self.intent
            .push(serde_json::to_value(&r.intent).unwrap_or(Value::Null));
        self.reasons.push(json!(reasons));
        self.changes.push(summary["changes"].clone());
        self.risk.push(r.risk.as_ref().map(|k| k.level.clone()));
        self.uid.push(sub.uid.map(i64::from));
        self.name.push(sub.name);
        self.person.push(sub.person);
        self.roles.push(json!(sub.roles));
        self.evidence_hash
            .push(r.rehearsal.as_ref().map(|x| x.evidence_hash.clone()));
        self.policy_version.push(r.fleet_policy_version);
        self.policy_hash
            .push(r.risk.as_ref().map(|k| k.policy_hash.clone()));
        self.created.push(r.created_at.clone());
        self.waiting.push(waiting);
    }

    fn into_params(self) -> Vec<Param> {
        vec![
            Box::new(self.id),
            Box::new(self.state),
            Box::new(self.decision),
            Box::new(self.command),
            Box::new(self.task),
            Box::new(self.workspace),
            Box::new(self.intent),
            Box::new(self.reasons),
            Box::new(self.changes),
            Box::new(self.risk),
            Box::new(self.uid),
            Box::new(self.name),
            Box::new(self.person),
            Box::new(self.roles),
            Box::new(self.evidence_hash),
            Box::new(self.policy_version),
            Box::new(self.policy_hash),
            Box::new(self.created),
            Box::new(self.waiting),
        ]
    }
}

const UPSERT_EVIDENCE: &str = "INSERT INTO dryrun.evidence (run_id, summary, diffs, egress) VALUES ($1, $2, $3, $4)
ON CONFLICT (run_id) DO UPDATE SET summary = EXCLUDED.summary, diffs = EXCLUDED.diffs, egress = EXCLUDED.egress";

/// A batch parameter.
type Param = Box<dyn ToSql + Sync + Send>;

/// Parameters as a statement takes them.
fn refs(v: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    v.iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// The records as the columns of `dryrun.events` (one `unnest` insert).
fn events_params(recs: &[Published]) -> Vec<Param> {
    let seq: Vec<i64> = recs.iter().map(|r| r.seq as i64).collect();
    let hash: Vec<String> = recs.iter().map(|r| r.hash.clone()).collect();
    let prev: Vec<String> = recs.iter().map(|r| r.prev.clone()).collect();
    let kind: Vec<String> = recs.iter().map(|r| r.kind.clone()).collect();
    let run: Vec<Option<String>> = recs.iter().map(|r| r.run_id.clone()).collect();
    let state: Vec<Option<String>> = recs
        .iter()
        .map(|r| r.data["state"].as_str().map(String::from))
        .collect();
    let at: Vec<String> = recs.iter().map(|r| r.at.clone()).collect();
    vec![
        Box::new(seq),
        Box::new(hash),
        Box::new(prev),
        Box::new(kind),
        Box::new(run),
        Box::new(state),
        Box::new(at),
    ]
}

/// The statements a publication uses, prepared once per connection.
#[derive(Clone)]
pub(super) struct Statements {
    events: tokio_postgres::Statement,
    upsert_run: tokio_postgres::Statement,
    upsert_evidence: tokio_postgres::Statement,
    delete_evidence: tokio_postgres::Statement,
    ack: tokio_postgres::Statement,
    anchors: tokio_postgres::Statement,
}

pub(super) async fn prepare(c: &Client) -> Result<Statements, FleetError> {
    Ok(Statements {
        events: c
            .prepare(
                "INSERT INTO dryrun.events (seq, hash, prev, kind, run_id, state, at)
                 SELECT s, h, p, k, r, st, a::timestamptz
                 FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) AS t(s, h, p, k, r, st, a)
                 ON CONFLICT DO NOTHING",
            )
            .await?,
        upsert_run: c.prepare(UPSERT_RUN).await?,
        upsert_evidence: c.prepare(UPSERT_EVIDENCE).await?,
        delete_evidence: c
            .prepare("DELETE FROM dryrun.evidence WHERE run_id = ANY($1)")
            .await?,
        ack: c.prepare(super::apply::ACK).await?,
        anchors: c
            .prepare(
                "INSERT INTO dryrun.anchors (seq, hash) SELECT * FROM unnest($1::int8[], $2::text[]) ON CONFLICT DO NOTHING",
            )
            .await?,
    })
}

/// The row of `r` (with evidence while it waits for a person).
fn run_row(engine: &Engine, r: RunRecord) -> RunRow {
    let summary = crate::engine::summary::ReviewSummary::of(&r, Some(engine.approval_expiry()));
    let summary = serde_json::to_value(&summary).unwrap_or(Value::Null);
    let evidence = crate::engine::in_review_queue(&r).then(|| {
        let diffs = capped_diffs(engine, &r);
        let egress: Vec<Value> = r
            .rehearsal
            .as_ref()
            .map(|h| {
                h.egress
                    .iter()
                    .take(EGRESS_MAX)
                    .filter_map(|e| serde_json::to_value(e).ok())
                    .collect()
            })
            .unwrap_or_default();
        (summary.clone(), Value::Array(diffs), Value::Array(egress))
    });
    RunRow {
        record: r,
        summary,
        evidence,
    }
}

/// Diffs of small text files, each at most [`DIFF_FILE_MAX`], all at most
/// [`DIFFS_MAX`], with credential shapes redacted.
fn capped_diffs(engine: &Engine, r: &RunRecord) -> Vec<Value> {
    // A long change list is shown by directory (the summary); no diffs.
    if r.rehearsal
        .as_ref()
        .is_none_or(|h| h.changes.len() > DIFF_FILES_MAX)
    {
        return Vec::new();
    }
    let d = crate::engine::textdiff::run_diff(engine, r);
    let redactor = crate::redact::Redactor::default();
    let mut tally = Default::default();
    let mut total = 0;
    let mut out = Vec::new();
    for f in d.files {
        let Some(text) = f.diff.as_deref() else {
            continue;
        };
        if text.len() > DIFF_FILE_MAX || total + text.len() > DIFFS_MAX {
            out.push(json!({"path": f.path, "kind": f.kind, "diff": null, "cut": true}));
            continue;
        }
        total += text.len();
        let shown = redactor.redact_str(text, &mut tally);
        out.push(json!({"path": f.path, "kind": f.kind, "diff": shown}));
    }
    out
}
