//! Routes: method + path → a typed call into the engine. One error mapping,
//! one JSON error body (`{"error": {"code", "message"}}`), a body size
//! limit, ids validated at the edge, unknown fields rejected.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path as UrlPath, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore, watch};

use super::DaemonConfig;
use super::metrics::Metrics;
use super::routes;
use crate::engine::{Engine, EngineError, ReviewAction, ReviewerAuth, valid_run_id};
use crate::journal::Actor;
use crate::record::RunState;
use crate::sandbox::CancelHandle;

/// Every route the daemon serves, as (method, path pattern from `routes`).
/// docs/openapi.yaml lists the same set; tests/daemon.rs checks both against the live socket.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", routes::RUNS),
    ("GET", routes::RUNS),
    ("GET", routes::RUN),
    ("GET", routes::RUN_DIFF),
    ("POST", routes::RUN_APPROVE),
    ("POST", routes::RUN_REJECT),
    ("POST", routes::RUN_CANCEL),
    ("POST", routes::RUN_PROMOTE),
    ("POST", routes::RUN_REPLAY),
    ("GET", routes::RECEIPT),
    ("POST", routes::RECEIPT_ROLLBACK),
    ("POST", routes::RUN_HOST_PROMPT),
    ("GET", routes::JOURNAL_VERIFY),
    ("GET", routes::HEALTH),
    ("GET", routes::METRICS),
];

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(routes::RUNS, post(submit).get(list))
        .route(routes::RUN, get(show))
        .route(routes::RUN_DIFF, get(diff))
        .route(routes::RUN_APPROVE, post(approve))
        .route(routes::RUN_REJECT, post(reject))
        .route(routes::RUN_CANCEL, post(cancel))
        .route(routes::RUN_PROMOTE, post(promote))
        .route(routes::RUN_HOST_PROMPT, post(host_prompt))
        .route(routes::RUN_REPLAY, post(replay))
        .route(routes::RECEIPT, get(receipt))
        .route(routes::RECEIPT_ROLLBACK, post(rollback))
        .route(routes::JOURNAL_VERIFY, get(journal_verify))
        .route(routes::HEALTH, get(health))
        .route(routes::METRICS, get(metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        // Bodies are read by `read_body` (size and time limits).
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(app.clone(), count))
        .with_state(app)
}

/// The caller, from SO_PEERCRED at accept.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    pub known: bool,
}

impl Peer {
    /// SO_PEERCRED of an accepted connection.
    pub fn from_stream(stream: &tokio::net::UnixStream) -> Self {
        match stream.peer_cred() {
            Ok(c) => Peer {
                uid: c.uid(),
                gid: c.gid(),
                pid: c.pid(),
                known: true,
            },
            Err(_) => Peer {
                uid: u32::MAX,
                gid: u32::MAX,
                pid: None,
                known: false,
            },
        }
    }
}

impl Peer {
    fn actor(&self) -> Result<Actor, ApiError> {
        if !self.known {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "no_peer_credentials",
                "the daemon could not read this connection's peer credentials",
            ));
        }
        Ok(Actor {
            uid: self.uid,
            gid: self.gid,
            pid: self.pid,
            via: "daemon".into(),
        })
    }
}

impl App {
    /// Reviewers (root, the approver group) and the daemon's own user see
    /// every run; anyone else only the runs it submitted.
    fn sees_all(&self, uid: u32) -> bool {
        uid == 0
            || uid == nix::unistd::geteuid().as_raw()
            || crate::engine::is_approver(uid, &self.cfg.approver_group)
    }

    fn may_read(&self, uid: u32, r: &crate::record::RunRecord) -> bool {
        self.sees_all(uid) || r.submitted_by.as_ref().is_some_and(|a| a.uid == uid)
    }
}

fn not_yours(id: &str) -> ApiError {
    // Same answer as a missing run: ids of others' runs are not disclosed.
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_such_run",
        format!("run {id} does not exist"),
    )
}

/// A run the daemon is working on.
struct Active {
    cancel_requested: Arc<AtomicBool>,
    cancel: Arc<CancelHandle>,
    cancel_queued: Arc<Notify>,
    started: Arc<AtomicBool>,
    done: watch::Receiver<bool>,
}

pub struct App {
    engine: Arc<Engine>,
    pub cfg: DaemonConfig,
    slots: Arc<Semaphore>,
    /// Each uid's share of `slots`: at most half of them (at least one).
    slots_by_uid: std::sync::Mutex<HashMap<u32, Arc<Semaphore>>>,
    /// Queued + running.
    admitted: AtomicUsize,
    admitted_by_uid: std::sync::Mutex<HashMap<u32, usize>>,
    running: AtomicUsize,
    active: std::sync::Mutex<HashMap<String, Active>>,
    metrics: Metrics,
    shutting_down: AtomicBool,
    shutdown: Notify,
}

impl App {
    pub fn new(engine: Arc<Engine>, cfg: DaemonConfig) -> Arc<App> {
        Arc::new(App {
            engine,
            slots: Arc::new(Semaphore::new(cfg.max_running.max(1))),
            slots_by_uid: std::sync::Mutex::new(HashMap::new()),
            cfg,
            admitted: AtomicUsize::new(0),
            admitted_by_uid: std::sync::Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            active: std::sync::Mutex::new(HashMap::new()),
            metrics: Metrics::new(),
            shutting_down: AtomicBool::new(false),
            shutdown: Notify::new(),
        })
    }

    /// The most rehearsals one uid runs at once: half the daemon's slots,
    /// at least one; its other runs wait in the queue.
    pub fn running_per_uid(&self) -> usize {
        (self.cfg.max_running / 2).max(1)
    }

    fn uid_slots(&self, uid: u32) -> Arc<Semaphore> {
        let mut m = self.slots_by_uid.lock().unwrap_or_else(|p| p.into_inner());
        // Forget uids with nothing running or waiting (only the map holds them).
        m.retain(|_, s| Arc::strong_count(s) > 1);
        m.entry(uid)
            .or_insert_with(|| Arc::new(Semaphore::new(self.running_per_uid())))
            .clone()
    }

    /// Apply the state directory's retention now.
    pub async fn housekeeping(&self) {
        let engine = self.engine.clone();
        let _ = tokio::task::spawn_blocking(move || engine.collect_garbage()).await;
    }

    pub fn refuse_connection(&self, why: &str) {
        self.metrics.refused_connection(why);
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
    }

    pub async fn shutdown_started(&self) {
        if self.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        self.shutdown.notified().await;
    }

    /// Fail what is queued now; give running rehearsals `grace`, then cancel.
    pub async fn drain(&self, grace: Duration) {
        let snapshot = |only_queued: bool| -> Vec<(Arc<CancelHandle>, Arc<Notify>)> {
            self.active
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .filter(|a| !only_queued || !a.started.load(Ordering::SeqCst))
                .map(|a| (a.cancel.clone(), a.cancel_queued.clone()))
                .collect()
        };
        for (c, n) in snapshot(true) {
            c.cancel();
            n.notify_one();
        }
        let deadline = tokio::time::Instant::now() + grace;
        while self.admitted.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (c, n) in snapshot(false) {
            c.cancel();
            n.notify_one();
        }
        while self.admitted.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One uid's share of the queue, given back when the run is settled (or
/// its submission fails).
struct UidSlot {
    app: Arc<App>,
    uid: u32,
}

impl Drop for UidSlot {
    fn drop(&mut self) {
        let mut m = self
            .app
            .admitted_by_uid
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.uid);
            }
        }
    }
}

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

#[derive(Serialize, Deserialize, Debug)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}
#[derive(Serialize, Deserialize, Debug)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.into(),
                message: self.message,
            },
        };
        let mut r = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// The one mapping from engine errors to HTTP.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let (status, code) = match &e {
            EngineError::Workspace(_) => (StatusCode::BAD_REQUEST, "invalid_workspace"),
            EngineError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            EngineError::Policy(_) => (StatusCode::BAD_REQUEST, "invalid_policy"),
            EngineError::BadRunId(_) => (StatusCode::BAD_REQUEST, "bad_run_id"),
            EngineError::NoSuchRun(_) => (StatusCode::NOT_FOUND, "no_such_run"),
            EngineError::NoSuchReceipt(_) => (StatusCode::NOT_FOUND, "no_such_receipt"),
            EngineError::Drift(_) => (StatusCode::CONFLICT, "drift"),
            EngineError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            EngineError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            EngineError::AboveCeiling(_) => (StatusCode::BAD_REQUEST, "invalid_envelope"),
            EngineError::QuotaExceeded(_) => (StatusCode::INSUFFICIENT_STORAGE, "quota_exceeded"),
            EngineError::BudgetExhausted { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "budget_exhausted")
            }
            EngineError::LandlockTooOld { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "sandbox_unavailable")
            }
            EngineError::State { .. }
            | EngineError::Corrupt { .. }
            | EngineError::Journal(_)
            | EngineError::Budget(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        let retry_after = match &e {
            EngineError::BudgetExhausted { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        };
        if status.is_server_error() {
            tracing::error!("{e}");
        }
        ApiError {
            status,
            code,
            message: e.to_string(),
            retry_after,
        }
    }
}

/// A body must arrive in full within this time (no trickling).
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Read a request body: size-limited, time-limited.
async fn read_body(app: &App, body: axum::body::Body) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let limited = http_body_util::Limited::new(body, app.cfg.max_body_bytes);
    match tokio::time::timeout(BODY_READ_TIMEOUT, limited.collect()).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the request body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "the request body is larger than the daemon accepts ({} KiB, --max-body-kb)",
                app.cfg.max_body_bytes >> 10
            ),
        )),
        Ok(Err(e)) => Err(ApiError::bad("unreadable_body", e.to_string())),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

fn checked_id(id: &str) -> Result<&str, ApiError> {
    if valid_run_id(id) {
        Ok(id)
    } else {
        Err(ApiError::bad(
            "bad_run_id",
            format!(
                "{:?} is not a run id",
                id.chars().take(80).collect::<String>()
            ),
        ))
    }
}

/// Strict query parsing: unknown parameters are an error.
fn query<T: serde::de::DeserializeOwned + Default>(raw: Option<String>) -> Result<T, ApiError> {
    match raw.filter(|q| !q.is_empty()) {
        None => Ok(T::default()),
        Some(q) => serde_urlencoded_strict(&q),
    }
}

fn serde_urlencoded_strict<T: serde::de::DeserializeOwned>(q: &str) -> Result<T, ApiError> {
    serde_urlencoded::from_str(q)
        .map_err(|e| ApiError::bad("invalid_query", format!("query string: {e}")))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("worker failed: {e}"),
        )),
    }
}

async fn count(
    State(app): State<Arc<App>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let r = next.run(req).await;
    app.metrics.http(r.status().as_u16());
    r
}

async fn no_route() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_such_route",
        "no such route; see docs/openapi.yaml",
    )
}

async fn wrong_method() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method; see docs/openapi.yaml",
    )
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SubmitQuery {
    #[serde(default)]
    wait: bool,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Submitted {
    pub run_id: String,
    pub state: RunState,
}

async fn submit(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    RawQuery(q): RawQuery,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let q: SubmitQuery = query(q)?;
    let body = read_body(&app, body).await?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::bad("invalid_envelope", "the body is not UTF-8 JSON"))?;
    if text.trim().is_empty() {
        return Err(ApiError::bad(
            "invalid_envelope",
            "empty body; send an envelope (SPEC §2) as JSON",
        ));
    }
    let env: crate::envelope::Envelope = serde_json::from_str::<serde_json::Value>(text)
        .map_err(|e| ApiError::bad("invalid_envelope", format!("the body is not JSON: {e}")))
        .and_then(|_| {
            crate::envelope::parse_envelope("request body", text)
                .map_err(|e| ApiError::bad("invalid_envelope", e.to_string()))
        })?;
    if env.working_dir.is_none() {
        return Err(ApiError::bad(
            "invalid_envelope",
            "working_dir: required over the API (the daemon does not know your current directory); give the workspace's absolute path",
        ));
    }
    let a = actor.clone();
    admit_and_run(
        app,
        actor,
        q.wait,
        Box::new(move |engine: Arc<Engine>| {
            // working_dir is resolved with the caller's own rights.
            let access = crate::engine::access_as(&a)?;
            let spec = env
                .validate(None, &access)
                .map_err(|e| EngineError::Invalid(e.to_string()))?;
            drop(access);
            // The engine pins the workspace (no symlinks, device and inode) and
            // refuses one the caller does not own.
            engine.prepare(&spec, &a)
        }),
    )
    .await
}

type PrepareFn =
    Box<dyn FnOnce(Arc<Engine>) -> Result<crate::engine::Prepared, EngineError> + Send>;

/// Admission (bounded queue, per-uid share), preparation, the queued
/// rehearsal, and the answer (202, or the record with `wait`): one path for
/// submissions and replays.
async fn admit_and_run(
    app: Arc<App>,
    actor: crate::journal::Actor,
    wait: bool,
    prepare: PrepareFn,
) -> Result<Response, ApiError> {
    if app.shutting_down.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the daemon is shutting down; submit again when it is back",
        ));
    }
    // Admission: bounded queue in front of a bounded number of rehearsals,
    // and no single uid may hold more than half of it.
    let cap = app.cfg.max_running + app.cfg.max_queued;
    let uid_cap = (cap / 2).max(1);
    {
        let mut m = app
            .admitted_by_uid
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let n = m.entry(actor.uid).or_insert(0);
        if *n >= uid_cap {
            app.metrics.refused_connection("per_uid_queue_full");
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                format!(
                    "uid {} already has {uid_cap} runs queued or running (half the daemon's capacity); retry later",
                    actor.uid
                ),
            );
            e.retry_after = Some(1);
            return Err(e);
        }
        *n += 1;
    }
    let uid_slot = UidSlot {
        app: app.clone(),
        uid: actor.uid,
    };
    if app.admitted.fetch_add(1, Ordering::SeqCst) >= cap {
        app.admitted.fetch_sub(1, Ordering::SeqCst);
        app.metrics.refused_queue_full();
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "queue_full",
            format!(
                "{} rehearsals are running and {} are queued (the limits); retry later",
                app.cfg.max_running, app.cfg.max_queued
            ),
        );
        e.retry_after = Some(1);
        return Err(e);
    }
    let engine = app.engine.clone();
    let prepared = blocking(move || prepare(engine)).await;
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            app.admitted.fetch_sub(1, Ordering::SeqCst);
            if e.code == "budget_exhausted" {
                app.metrics.refused_budget();
            }
            return Err(e);
        }
    };
    app.metrics.submitted();
    let run_id = prepared.run_id().to_string();
    let (done_tx, done_rx) = watch::channel(false);
    let active = Active {
        cancel_requested: Arc::new(AtomicBool::new(false)),
        cancel: Arc::new(CancelHandle::default()),
        cancel_queued: Arc::new(Notify::new()),
        started: Arc::new(AtomicBool::new(false)),
        done: done_rx.clone(),
    };
    let (cancel, cancel_queued, started) = (
        active.cancel.clone(),
        active.cancel_queued.clone(),
        active.started.clone(),
    );
    app.active
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(run_id.clone(), active);
    let task_app = app.clone();
    let task_id = run_id.clone();
    let uid_slots = app.uid_slots(actor.uid);
    tokio::spawn(async move {
        let _uid_slot = uid_slot;
        let app = task_app;
        // The uid's share first, then a daemon slot: a uid at its share
        // waits without holding a slot another uid could use.
        let permit = tokio::select! {
            p = async {
                let mine = uid_slots.acquire_owned().await.ok()?;
                let slot = app.slots.clone().acquire_owned().await.ok()?;
                Some((mine, slot))
            } => p,
            _ = cancel_queued.notified() => None,
        };
        let engine = app.engine.clone();
        let outcome = match permit {
            Some(permit) if !cancel.is_cancelled() => {
                started.store(true, Ordering::SeqCst);
                app.running.fetch_add(1, Ordering::SeqCst);
                let c = cancel.clone();
                let r = tokio::task::spawn_blocking(move || {
                    let r = engine.rehearse_prepared(prepared, Some(&c));
                    drop(permit);
                    r
                })
                .await;
                app.running.fetch_sub(1, Ordering::SeqCst);
                r
            }
            _ => {
                let why = if app.shutting_down.load(Ordering::SeqCst) {
                    "the daemon shut down before the rehearsal started; nothing ran; submit it again"
                } else {
                    "cancelled while queued; nothing ran"
                };
                tokio::task::spawn_blocking(move || engine.fail_unstarted(prepared, why)).await
            }
        };
        match &outcome {
            Ok(Ok(r)) => app.metrics.finished(
                r.verdict
                    .as_ref()
                    .map(|v| v.decision.as_str())
                    .unwrap_or("failed"),
            ),
            Ok(Err(e)) => tracing::error!("run {task_id}: {e}"),
            Err(e) => tracing::error!("run {task_id}: worker failed: {e}"),
        }
        app.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&task_id);
        app.admitted.fetch_sub(1, Ordering::SeqCst);
        let _ = done_tx.send(true);
    });

    if !wait {
        return Ok((
            StatusCode::ACCEPTED,
            axum::Json(Submitted {
                run_id,
                state: RunState::Queued,
            }),
        )
            .into_response());
    }
    let mut done = done_rx;
    let _ = done.wait_for(|d| *d).await;
    let engine = app.engine.clone();
    let r = blocking(move || engine.get(&run_id)).await?;
    Ok((StatusCode::OK, axum::Json(r)).into_response())
}

/// `POST /v1/runs/{id}/replay`: rehearse a recorded run again with its
/// recorded tool answers.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    /// A changed envelope (default: the recorded one).
    #[serde(default)]
    envelope: Option<crate::envelope::Envelope>,
    /// A changed command (default: the recorded one).
    #[serde(default)]
    command: Option<String>,
    /// Answer overrides, `TOOL [WORDS]=exit N[; stdout=T][; stderr=T]`.
    #[serde(default)]
    stubs: Vec<String>,
    /// `strict`, `stub` (default) or `fuzzy`.
    #[serde(default)]
    novel: Option<crate::model::stubs::NovelPolicy>,
}

async fn replay(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
    RawQuery(q): RawQuery,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let id = checked_id(&id)?.to_string();
    let q: SubmitQuery = query(q)?;
    let body = read_body(&app, body).await?;
    let req: ReplayBody = optional_json_body(&body)?;
    // Only those who may read the baseline may replay it.
    readable_run(&app, &actor, &id).await?;
    let a = actor.clone();
    admit_and_run(
        app,
        actor,
        q.wait,
        Box::new(move |engine: Arc<Engine>| {
            engine.prepare_replay(
                &id,
                &crate::engine::ReplayRequest {
                    envelope: req.envelope,
                    command: req.command,
                    stubs: req.stubs,
                    novel: req.novel.unwrap_or_default(),
                },
                &a,
            )
        }),
    )
    .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    limit: Option<usize>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct RunList {
    pub runs: Vec<crate::record::RunRecord>,
}

async fn list(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    RawQuery(q): RawQuery,
) -> Result<axum::Json<RunList>, ApiError> {
    let actor = peer.actor()?;
    let q: ListQuery = query(q)?;
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(RunState::parse(s).ok_or_else(|| {
            ApiError::bad(
                "invalid_query",
                format!("state={s:?} is not a run state (queued, running, rehearsed, awaiting_approval, approved, rejected, promoted, failed)"),
            )
        })?),
    };
    let limit = q.limit.unwrap_or(1000).min(10_000);
    let engine = app.engine.clone();
    let mut runs = blocking(move || engine.list(state)).await?;
    if !app.sees_all(actor.uid) {
        runs.retain(|r| app.may_read(actor.uid, r));
    }
    runs.truncate(limit);
    Ok(axum::Json(RunList { runs }))
}

async fn show(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let id = checked_id(&id)?.to_string();
    let r = readable_run(&app, &actor, &id).await?;
    Ok(axum::Json(r).into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DiffQuery {
    /// Compare with this run instead of listing text diffs.
    against: Option<String>,
}

async fn diff(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let id = checked_id(&id)?.to_string();
    let q: DiffQuery = query(q)?;
    if let Some(other) = q.against {
        let other = checked_id(&other)?.to_string();
        let engine = app.engine.clone();
        let app2 = app.clone();
        let cmp = blocking(move || {
            let a = engine.get(&id)?;
            let b = engine.get(&other)?;
            for r in [&a, &b] {
                if !app2.may_read(actor.uid, r) {
                    return Err(EngineError::NoSuchRun(r.run_id.clone()));
                }
            }
            Ok(crate::engine::compare_runs(&a, &b))
        })
        .await?;
        return Ok(axum::Json(cmp).into_response());
    }
    let engine = app.engine.clone();
    let rid = id.clone();
    let app2 = app.clone();
    let d = blocking(move || {
        let r = engine.get(&rid)?;
        if !app2.may_read(actor.uid, &r) {
            return Err(EngineError::NoSuchRun(rid));
        }
        Ok(crate::workspace::textdiff::run_diff(&engine, &r))
    })
    .await?;
    Ok(axum::Json(d).into_response())
}

#[derive(Deserialize, Default, Serialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    #[serde(default)]
    pub note: String,
    /// Approving a blocked run is an override and must say so.
    #[serde(default, rename = "override")]
    pub override_block: bool,
}

/// An optional JSON body: empty (or only white space) means the defaults;
/// otherwise it must parse, and the error names the offending field.
fn optional_json_body<T: serde::de::DeserializeOwned + Default>(
    body: &[u8],
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de)
        .map_err(|e| ApiError::bad("invalid_request", format!("body: {e}")))
}

/// The run `id` when `actor` may read it; someone else's run answers 404,
/// as if absent.
async fn readable_run(
    app: &Arc<App>,
    actor: &Actor,
    id: &str,
) -> Result<crate::record::RunRecord, ApiError> {
    let engine = app.engine.clone();
    let rid = id.to_string();
    let r = blocking(move || engine.get(&rid)).await?;
    if !app.may_read(actor.uid, &r) {
        return Err(not_yours(id));
    }
    Ok(r)
}

/// The receipt `id` when `actor` may read its run; otherwise (and when it
/// does not exist) 404 with the same body.
async fn readable_receipt(
    app: &Arc<App>,
    actor: &Actor,
    id: &str,
) -> Result<crate::engine::Receipt, ApiError> {
    let missing = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_such_receipt",
            format!("receipt {id} does not exist"),
        )
    };
    let engine = app.engine.clone();
    let rid = id.to_string();
    let rc = blocking(move || engine.receipt(&rid))
        .await
        .map_err(|_| missing())?;
    let engine = app.engine.clone();
    let run_id = rc.run_id.clone();
    let record = blocking(move || engine.get(&run_id))
        .await
        .map_err(|_| missing())?;
    if !app.may_read(actor.uid, &record) {
        return Err(missing());
    }
    Ok(rc)
}

async fn review(
    app: Arc<App>,
    peer: Peer,
    id: String,
    body: axum::body::Body,
    action: ReviewAction,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let id = checked_id(&id)?.to_string();
    let b = optional_json_body::<ReviewBody>(&read_body(&app, body).await?)?;
    // Someone else's run answers 404 like a missing one, before any rule
    // about who may review it could tell it exists.
    readable_run(&app, &actor, &id).await?;
    let engine = app.engine.clone();
    let auth = ReviewerAuth::PeerCredentials {
        approver_group: app.cfg.approver_group.clone(),
    };
    let r = blocking(move || engine.review(&id, &actor, &auth, action, &b.note, b.override_block))
        .await?;
    Ok(axum::Json(r).into_response())
}

async fn approve(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    review(app, peer, id, body, ReviewAction::Approve).await
}

async fn reject(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    review(app, peer, id, body, ReviewAction::Reject).await
}

async fn cancel(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let id = checked_id(&id)?.to_string();
    let record = readable_run(&app, &actor, &id).await?;
    let submitter = record.submitted_by.as_ref().map(|a| a.uid);
    if actor.uid != 0
        && submitter != Some(actor.uid)
        && !crate::engine::is_approver(actor.uid, &app.cfg.approver_group)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "uid {} may not cancel run {id}: only its submitter, root and reviewers may",
                actor.uid
            ),
        ));
    }
    let handles = app
        .active
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .map(|a| {
            (
                a.cancel.clone(),
                a.cancel_queued.clone(),
                a.done.clone(),
                a.cancel_requested.clone(),
            )
        });
    let Some((c, n, mut done, requested)) = handles else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "run {id} is {}; only a queued or running run can be cancelled",
                record.state.as_str()
            ),
        ));
    };
    // One cancellation per run is journaled; later requests just wait.
    if !requested.swap(true, Ordering::SeqCst) {
        let engine = app.engine.clone();
        let (rid, st) = (id.clone(), record.state);
        blocking(move || engine.journal_cancel(&rid, &actor, st)).await?;
        c.cancel();
        n.notify_one();
    }
    let _ = done.wait_for(|d| *d).await;
    let engine = app.engine.clone();
    let r = blocking(move || engine.get(&id)).await?;
    Ok((StatusCode::OK, axum::Json(r)).into_response())
}

/// `POST /v1/runs/{id}/promote` body (optional).
#[derive(Deserialize, Default, Serialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct PromoteBody {
    /// Mode `rerun`: values of the variables the run's `live.env_from_host`
    /// names, from the promoting side. Used for the live run only; never
    /// stored or journaled.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// The single-use token of an approval given in an agent host's
    /// prompt (`POST /v1/runs/{id}/host-prompt`): recorded as that
    /// approval and consumed before the promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_prompt_token: Option<String>,
}

async fn promote(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let id = checked_id(&id)?.to_string();
    let bytes = read_body(&app, body).await?;
    let pb: PromoteBody = optional_json_body(&bytes)?;
    // Only those who may read the run may promote it.
    readable_run(&app, &actor, &id).await?;
    let engine = app.engine.clone();
    let auth = ReviewerAuth::PeerCredentials {
        approver_group: app.cfg.approver_group.clone(),
    };
    let r = blocking(move || {
        if let Some(t) = &pb.host_prompt_token {
            engine.approve_via_host_prompt(&id, t, &actor)?;
        }
        engine.promote(&id, &actor, &auth, &pb.env)
    })
    .await?;
    Ok(axum::Json(r).into_response())
}

/// `POST /v1/runs/{id}/host-prompt` body.
#[derive(Deserialize, Serialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct HostPromptBody {
    /// The agent host whose prompt will ask (`claude-code`, `codex`).
    pub host: String,
}

/// The answer: the token, shown once (only its hash is kept).
#[derive(Deserialize, Serialize, Debug)]
pub struct HostPromptGrant {
    pub run_id: String,
    pub token: String,
    pub expires_in_s: u64,
}

async fn host_prompt(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    let id = checked_id(&id)?.to_string();
    let bytes = read_body(&app, body).await?;
    let hb: HostPromptBody = optional_json_body(&bytes)?;
    readable_run(&app, &actor, &id).await?;
    let engine = app.engine.clone();
    let rid = id.clone();
    let token = blocking(move || engine.grant_host_prompt(&rid, &actor, &hb.host)).await?;
    Ok(axum::Json(HostPromptGrant {
        run_id: id,
        token,
        expires_in_s: crate::engine::GRANT_TTL_S,
    })
    .into_response())
}

async fn receipt(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    if !crate::engine::valid_receipt_id(&id) {
        return Err(ApiError::bad("bad_receipt_id", "not a receipt id"));
    }
    let rc = readable_receipt(&app, &actor, &id).await?;
    Ok(axum::Json(rc).into_response())
}

async fn rollback(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let actor = peer.actor()?;
    if !crate::engine::valid_receipt_id(&id) {
        return Err(ApiError::bad("bad_receipt_id", "not a receipt id"));
    }
    readable_receipt(&app, &actor, &id).await?;
    let engine = app.engine.clone();
    let auth = ReviewerAuth::PeerCredentials {
        approver_group: app.cfg.approver_group.clone(),
    };
    let rc = blocking(move || engine.rollback(&id, &actor, &auth)).await?;
    Ok(axum::Json(rc).into_response())
}

async fn journal_verify(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let engine = app.engine.clone();
    let rep = blocking(move || Ok(engine.journal().verify()?)).await?;
    Ok(axum::Json(rep).into_response())
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Health {
    pub status: String,
    pub version: String,
    pub running: usize,
    pub queued: usize,
    pub max_running: usize,
    pub max_queued: usize,
    pub landlock_abi: u32,
}

async fn health(State(app): State<Arc<App>>) -> axum::Json<Health> {
    let admitted = app.admitted.load(Ordering::SeqCst);
    let running = app.running.load(Ordering::SeqCst);
    axum::Json(Health {
        status: if app.shutting_down.load(Ordering::SeqCst) {
            "shutting_down".into()
        } else {
            "ok".into()
        },
        version: env!("CARGO_PKG_VERSION").into(),
        running,
        queued: admitted.saturating_sub(running),
        max_running: app.cfg.max_running,
        max_queued: app.cfg.max_queued,
        landlock_abi: crate::sandbox::probe::landlock_abi(),
    })
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let admitted = app.admitted.load(Ordering::SeqCst);
    let running = app.running.load(Ordering::SeqCst);
    let text = app
        .metrics
        .render(running, admitted.saturating_sub(running));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
