//! One typed request per operation, for every door.
//!
//! The daemon parses HTTP into these values (`parse_*` functions and
//! [`Operation::decode`]), the CLI and the agent doors build them, and one
//! client function ([`door::Door::send`]) carries a request either to a
//! daemon over its socket or to the in-process engine ([`serve`]). Encoding
//! (method, path, query, body) and decoding live side by side here, so the
//! two cannot drift; route paths come from [`routes`].

pub mod door;
pub mod routes;
pub mod serve;
pub mod transport;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::envelope::Envelope;
use crate::model::stubs::NovelPolicy;
use crate::record::{RunRecord, RunState};

/// A request the edge could not turn into an operation: a 400 with a code
/// and a message that names the part at fault (never the daemon's guess).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub code: &'static str,
    pub message: String,
}

impl RequestError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        RequestError {
            code,
            message: message.into(),
        }
    }
}

/// A run id checked at the edge: what the engine generates (ASCII letters,
/// digits and `-`, bounded length).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    pub fn parse(id: &str) -> Result<RunId, RequestError> {
        if crate::engine::valid_run_id(id) {
            Ok(RunId(id.to_string()))
        } else {
            Err(RequestError::new(
                "bad_run_id",
                format!(
                    "{:?} is not a run id",
                    id.chars().take(80).collect::<String>()
                ),
            ))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A receipt id checked at the edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReceiptId(String);

impl ReceiptId {
    pub fn parse(id: &str) -> Result<ReceiptId, RequestError> {
        if crate::engine::valid_receipt_id(id) {
            Ok(ReceiptId(id.to_string()))
        } else {
            Err(RequestError::new("bad_receipt_id", "not a receipt id"))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// HTTP method of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// An operation: how it travels (method, path with query, body) and what
/// comes back.
pub(crate) trait Operation: Sized {
    type Reply: Serialize + serde::de::DeserializeOwned;
    const METHOD: Method;
    /// The concrete path, with its query string.
    fn target(&self) -> String;
    /// The JSON body, if the operation has one.
    fn body(&self) -> Option<Vec<u8>> {
        None
    }
}

// ---------------------------------------------------------------- requests

/// Submit an envelope for rehearsal. With `wait`, the answer is the run
/// record once the verdict is in; otherwise the id and state at once.
#[derive(Debug, Clone)]
pub struct Submit {
    pub envelope: Envelope,
    pub wait: bool,
}

/// The answer to a submission or a replay.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SubmitReply {
    Done(Box<RunRecord>),
    Queued(Submitted),
}

impl SubmitReply {
    /// The record, when the answer carries one.
    pub fn into_record(self) -> Option<RunRecord> {
        match self {
            SubmitReply::Done(r) => Some(*r),
            SubmitReply::Queued(_) => None,
        }
    }
}

/// `202` answer to a submission without `wait`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Submitted {
    pub run_id: String,
    pub state: RunState,
}

impl Operation for Submit {
    type Reply = SubmitReply;
    const METHOD: Method = Method::Post;
    fn target(&self) -> String {
        with_wait(routes::RUNS, self.wait)
    }
    fn body(&self) -> Option<Vec<u8>> {
        Some(serde_json::to_vec(&self.envelope).expect("envelopes serialize"))
    }
}

/// List runs, newest first (`awaiting`: the review queue, oldest first).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct List {
    pub state: Option<RunState>,
    pub limit: Option<usize>,
}

/// `GET /v1/runs` answer.
#[derive(Serialize, Deserialize, Debug)]
pub struct RunList {
    pub runs: Vec<RunRecord>,
}

impl Operation for List {
    type Reply = RunList;
    const METHOD: Method = Method::Get;
    fn target(&self) -> String {
        let mut q = Vec::new();
        if let Some(s) = self.state {
            q.push(format!("state={}", s.as_str()));
        }
        if let Some(n) = self.limit {
            q.push(format!("limit={n}"));
        }
        with_query(routes::RUNS, &q)
    }
}

/// The most runs one list answers.
pub const LIST_MAX: usize = 10_000;
/// How many runs a list answers when no limit is given.
pub const LIST_DEFAULT: usize = 1000;

/// One run's record; with `wait_s`, the answer waits (at most that long)
/// until the run's state differs from its state when the request arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Show {
    pub id: RunId,
    pub wait_s: Option<u64>,
}

/// The longest a long poll may wait.
pub const WAIT_MAX_S: u64 = 600;

impl Operation for Show {
    type Reply = RunRecord;
    const METHOD: Method = Method::Get;
    fn target(&self) -> String {
        let q: Vec<String> = self.wait_s.iter().map(|s| format!("wait={s}")).collect();
        with_query(&routes::run(self.id.as_str()), &q)
    }
}

/// A run's changes as unified text diffs.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    pub id: RunId,
}

impl Operation for Diff {
    type Reply = crate::engine::textdiff::RunDiff;
    const METHOD: Method = Method::Get;
    fn target(&self) -> String {
        routes::run_diff(self.id.as_str())
    }
}

/// What differs between two runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Compare {
    pub id: RunId,
    pub against: RunId,
}

impl Operation for Compare {
    type Reply = crate::engine::RunComparison;
    const METHOD: Method = Method::Get;
    fn target(&self) -> String {
        format!(
            "{}?against={}",
            routes::run_diff(self.id.as_str()),
            routes::encode_id(self.against.as_str())
        )
    }
}

/// `GET /v1/runs/{id}/diff` is either a diff or a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum DiffRequest {
    Diff(Diff),
    Compare(Compare),
}

/// Approve or reject.
pub use crate::engine::ReviewAction;

/// Approve, reject or withdraw a run, with a note (journaled with who).
#[derive(Debug, Clone, PartialEq)]
pub struct Review {
    pub id: RunId,
    pub action: ReviewAction,
    pub note: String,
    /// Approving a blocked run is an override and must say so.
    pub override_block: bool,
}

/// Body of approve and reject.
#[derive(Deserialize, Default, Serialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    #[serde(default)]
    pub note: String,
    #[serde(default, rename = "override")]
    pub override_block: bool,
}

impl Operation for Review {
    type Reply = RunRecord;
    const METHOD: Method = Method::Post;
    fn target(&self) -> String {
        match self.action {
            ReviewAction::Approve => routes::run_approve(self.id.as_str()),
            ReviewAction::Reject => routes::run_reject(self.id.as_str()),
            ReviewAction::Withdraw => routes::run_withdraw(self.id.as_str()),
        }
    }
    fn body(&self) -> Option<Vec<u8>> {
        Some(json(&ReviewBody {
            note: self.note.clone(),
            override_block: self.override_block,
        }))
    }
}

/// Cancel a queued or running rehearsal (a daemon's).
#[derive(Debug, Clone, PartialEq)]
pub struct Cancel {
    pub id: RunId,
}

impl Operation for Cancel {
    type Reply = RunRecord;
    const METHOD: Method = Method::Post;
    fn target(&self) -> String {
        routes::run_cancel(self.id.as_str())
    }
    fn body(&self) -> Option<Vec<u8>> {
        Some(b"{}".to_vec())
    }
}

/// Carry out a promotable (or approved) run.
#[derive(Debug, Clone, PartialEq)]
pub struct Promote {
    pub id: RunId,
    /// Mode `rerun`: values of the host variables the run's
    /// `live.env_from_host` names, from the promoting side; used for the
    /// live run only, never stored or journaled.
    pub env: BTreeMap<String, String>,
    /// The single-use token of an approval given in an agent host's prompt
    /// (see [`HostPrompt`]): recorded as that approval and consumed before
    /// the promotion.
    pub host_prompt_token: Option<String>,
    /// Mode `apply` of a run whose rehearsal answered calls with stubs:
    /// the promoter says those calls will not be made (shown in the
    /// receipt's `calls_not_made` and journaled).
    pub local_only: bool,
}

/// Body of promote.
#[derive(Deserialize, Default, Serialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct PromoteBody {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_prompt_token: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local_only: bool,
}

impl Operation for Promote {
    type Reply = RunRecord;
    const METHOD: Method = Method::Post;
    fn target(&self) -> String {
        routes::run_promote(self.id.as_str())
    }
    fn body(&self) -> Option<Vec<u8>> {
        Some(json(&PromoteBody {
            env: self.env.clone(),
            host_prompt_token: self.host_prompt_token.clone(),
            local_only: self.local_only,
        }))
    }
}

/// Issue the single-use token with which an agent host's own prompt
/// approves a run that needs approval (the run's submitter only; see
/// `dryrun hook`).
#[derive(Debug, Clone, PartialEq)]
pub struct HostPrompt {
    pub id: RunId,
    /// The agent host whose prompt will ask (`claude-code`, `codex`).
    pub host: String,
}

/// Body of host-prompt.
#[derive(Deserialize, Serialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct HostPromptBody {
    pub host: String,
}

/// The answer: the token, shown once (only its hash is kept).
#[derive(Deserialize, Serialize, Debug)]
pub struct HostPromptGrant {
    pub run_id: String,
    pub token: String,
    pub expires_in_s: u64,
}

impl Operation for HostPrompt {
    type Reply = HostPromptGrant;
    const METHOD: Method = Method::Post;
    fn target(&self) -> String {
        routes::run_host_prompt(self.id.as_str())
    }
    fn body(&self) -> Option<Vec<u8>> {
        Some(json(&HostPromptBody {
            host: self.host.clone(),
        }))
    }
}

/// Rehearse a recorded run again with its recorded tool answers.
#[derive(Debug, Clone)]
pub struct Replay {
    pub id: RunId,
    pub changes: ReplayBody,
    pub wait: bool,
}

/// Body of replay: what to change.
#[derive(Deserialize, Serialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// A changed envelope (default: the recorded one).
    #[serde(default)]
    pub envelope: Option<Envelope>,
    /// A changed command (default: the recorded one).
    #[serde(default)]
    pub command: Option<String>,
    /// Answer overrides, `TOOL [WORDS]=exit N[; stdout=T][; stderr=T]`.
    #[serde(default)]
    pub stubs: Vec<String>,
    /// `strict`, `stub` (default) or `fuzzy`.
    #[serde(default)]
    pub novel: Option<NovelPolicy>,
}

impl ReplayBody {
    pub fn into_engine_request(self) -> crate::engine::ReplayRequest {
        crate::engine::ReplayRequest {
            envelope: self.envelope,
            command: self.command,
            stubs: self.stubs,
            novel: self.novel.unwrap_or_default(),
        }
    }
}

impl Operation for Replay {
    type Reply = SubmitReply;
    const METHOD: Method = Method::Post;
    fn target(&self) -> String {
        with_wait(&routes::run_replay(self.id.as_str()), self.wait)
    }
    fn body(&self) -> Option<Vec<u8>> {
        Some(json(&self.changes))
    }
}

/// One promotion receipt.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowReceipt {
    pub id: ReceiptId,
}

impl Operation for ShowReceipt {
    type Reply = crate::record::Receipt;
    const METHOD: Method = Method::Get;
    fn target(&self) -> String {
        routes::receipt(self.id.as_str())
    }
}

/// Undo a promotion.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollback {
    pub id: ReceiptId,
}

impl Operation for Rollback {
    type Reply = crate::record::Receipt;
    const METHOD: Method = Method::Post;
    fn target(&self) -> String {
        routes::receipt_rollback(self.id.as_str())
    }
    fn body(&self) -> Option<Vec<u8>> {
        Some(b"{}".to_vec())
    }
}

/// Verify the journal's hash chain.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyJournal;

impl Operation for VerifyJournal {
    type Reply = crate::journal::VerifyReport;
    const METHOD: Method = Method::Get;
    fn target(&self) -> String {
        routes::JOURNAL_VERIFY.into()
    }
}

// ----------------------------------------------------------------- decoding

/// The query parameters a route takes; any other is a 400.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WaitQuery {
    #[serde(default)]
    wait: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ShowQuery {
    wait: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DiffQuery {
    against: Option<String>,
}

/// Strict query parsing: unknown parameters are an error that names them.
fn query<T: serde::de::DeserializeOwned + Default>(raw: Option<&str>) -> Result<T, RequestError> {
    match raw.filter(|q| !q.is_empty()) {
        None => Ok(T::default()),
        Some(q) => serde_urlencoded::from_str(q)
            .map_err(|e| RequestError::new("invalid_query", format!("query string: {e}"))),
    }
}

/// A route without query parameters: any is a 400.
pub fn parse_no_query(raw: Option<&str>) -> Result<(), RequestError> {
    match raw.filter(|q| !q.is_empty()) {
        None => Ok(()),
        Some(q) => {
            let names: Vec<String> = serde_urlencoded::from_str::<Vec<(String, String)>>(q)
                .map(|v| v.into_iter().map(|(k, _)| k).collect())
                .unwrap_or_default();
            Err(RequestError::new(
                "invalid_query",
                format!(
                    "this route takes no query parameters (got {}); see docs/openapi.yaml",
                    if names.is_empty() {
                        "an unreadable query".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            ))
        }
    }
}

/// An optional JSON body: empty (or only white space) means the defaults;
/// otherwise it must parse, and the error names the offending field.
pub fn optional_json_body<T: serde::de::DeserializeOwned + Default>(
    body: &[u8],
) -> Result<T, RequestError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de)
        .map_err(|e| RequestError::new("invalid_request", format!("body: {e}")))
}

/// `POST /v1/runs`.
pub fn parse_submit(query_s: Option<&str>, body: &[u8]) -> Result<Submit, RequestError> {
    let q: WaitQuery = query(query_s)?;
    let bad = |m: &str| RequestError::new("invalid_envelope", m);
    let text = std::str::from_utf8(body).map_err(|_| bad("the body is not UTF-8 JSON"))?;
    if text.trim().is_empty() {
        return Err(bad(
            "empty body; send an envelope as JSON (docs/openapi.yaml, Envelope)",
        ));
    }
    serde_json::from_str::<serde_json::Value>(text)
        .map_err(|e| RequestError::new("invalid_envelope", format!("the body is not JSON: {e}")))?;
    let envelope = crate::envelope::parse_envelope("request body", text)
        .map_err(|e| RequestError::new("invalid_envelope", e.to_string()))?;
    if envelope.working_dir.is_none() {
        return Err(bad(
            "working_dir: required over the API (the daemon does not know your current directory); give the workspace's absolute path",
        ));
    }
    Ok(Submit {
        envelope,
        wait: q.wait,
    })
}

/// `GET /v1/runs`.
pub fn parse_list(query_s: Option<&str>) -> Result<List, RequestError> {
    let q: ListQuery = query(query_s)?;
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(RunState::parse(s).ok_or_else(|| {
            RequestError::new(
                "invalid_query",
                format!(
                    "state={s:?} is not a run state (queued, running, rehearsed, awaiting_approval, approved, rejected, promoted, failed)"
                ),
            )
        })?),
    };
    Ok(List {
        state,
        limit: q.limit,
    })
}

/// `GET /v1/runs/{id}`.
pub fn parse_show(id: &str, query_s: Option<&str>) -> Result<Show, RequestError> {
    let id = RunId::parse(id)?;
    let q: ShowQuery = query(query_s)?;
    let wait_s = match q.wait.as_deref() {
        None => None,
        // `wait=true` means "as long as the daemon allows".
        Some("true") => Some(WAIT_MAX_S),
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n <= WAIT_MAX_S => Some(n),
            _ => {
                return Err(RequestError::new(
                    "invalid_query",
                    format!(
                        "wait={:?}: give a number of seconds from 0 to {WAIT_MAX_S} (or true)",
                        s.chars().take(40).collect::<String>()
                    ),
                ));
            }
        },
    };
    Ok(Show { id, wait_s })
}

/// `GET /v1/runs/{id}/diff`.
pub fn parse_diff(id: &str, query_s: Option<&str>) -> Result<DiffRequest, RequestError> {
    let id = RunId::parse(id)?;
    let q: DiffQuery = query(query_s)?;
    Ok(match q.against {
        Some(a) => DiffRequest::Compare(Compare {
            id,
            against: RunId::parse(&a)?,
        }),
        None => DiffRequest::Diff(Diff { id }),
    })
}

/// `POST /v1/runs/{id}/approve`, `/reject` and `/withdraw`.
pub fn parse_review(
    id: &str,
    query_s: Option<&str>,
    action: ReviewAction,
    body: &[u8],
) -> Result<Review, RequestError> {
    let id = RunId::parse(id)?;
    parse_no_query(query_s)?;
    let b: ReviewBody = optional_json_body(body)?;
    Ok(Review {
        id,
        action,
        note: b.note,
        override_block: b.override_block,
    })
}

/// `POST /v1/runs/{id}/cancel`.
pub fn parse_cancel(id: &str, query_s: Option<&str>) -> Result<Cancel, RequestError> {
    parse_no_query(query_s)?;
    Ok(Cancel {
        id: RunId::parse(id)?,
    })
}

/// `POST /v1/runs/{id}/promote`.
pub fn parse_promote(
    id: &str,
    query_s: Option<&str>,
    body: &[u8],
) -> Result<Promote, RequestError> {
    let id = RunId::parse(id)?;
    parse_no_query(query_s)?;
    let b: PromoteBody = optional_json_body(body)?;
    Ok(Promote {
        id,
        env: b.env,
        host_prompt_token: b.host_prompt_token,
        local_only: b.local_only,
    })
}

/// `POST /v1/runs/{id}/host-prompt`.
pub fn parse_host_prompt(
    id: &str,
    query_s: Option<&str>,
    body: &[u8],
) -> Result<HostPrompt, RequestError> {
    let id = RunId::parse(id)?;
    parse_no_query(query_s)?;
    let b: HostPromptBody = optional_json_body(body)?;
    Ok(HostPrompt { id, host: b.host })
}

/// `POST /v1/runs/{id}/replay`.
pub fn parse_replay(id: &str, query_s: Option<&str>, body: &[u8]) -> Result<Replay, RequestError> {
    let id = RunId::parse(id)?;
    let q: WaitQuery = query(query_s)?;
    Ok(Replay {
        id,
        changes: optional_json_body(body)?,
        wait: q.wait,
    })
}

/// `GET /v1/receipts/{id}`.
pub fn parse_receipt(id: &str, query_s: Option<&str>) -> Result<ShowReceipt, RequestError> {
    let id = ReceiptId::parse(id)?;
    parse_no_query(query_s)?;
    Ok(ShowReceipt { id })
}

/// `POST /v1/receipts/{id}/rollback`.
pub fn parse_rollback(id: &str, query_s: Option<&str>) -> Result<Rollback, RequestError> {
    let id = ReceiptId::parse(id)?;
    parse_no_query(query_s)?;
    Ok(Rollback { id })
}

// ------------------------------------------------------------------ helpers

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("request bodies serialize")
}

fn with_wait(path: &str, wait: bool) -> String {
    if wait {
        format!("{path}?wait=true")
    } else {
        path.to_string()
    }
}

fn with_query(path: &str, q: &[String]) -> String {
    if q.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", q.join("&"))
    }
}

#[cfg(test)]
mod tests;
