//! Routes: method + path → a typed call into the engine. One error mapping,
//! one JSON error body (`{"error": {"code", "message"}}`), a body size
//! limit, ids validated at the edge, unknown fields rejected.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

use super::app::{App, admit_and_run, blocking};
use super::call::{Call, RunCall};
use super::error::ApiError;
use super::routes;
use crate::engine::authz::{self, Verb};
use crate::engine::{Engine, ReviewAction};
use crate::request::{self, DiffRequest};

/// Every route the daemon serves, as (method, path pattern from `routes`).
/// docs/openapi.yaml lists the same set; tests/daemon.rs checks both against the live socket.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", routes::RUNS),
    ("GET", routes::RUNS),
    ("GET", routes::RUN),
    ("GET", routes::RUN_DIFF),
    ("POST", routes::RUN_APPROVE),
    ("POST", routes::RUN_REJECT),
    ("POST", routes::RUN_WITHDRAW),
    ("POST", routes::RUN_CANCEL),
    ("POST", routes::RUN_PROMOTE),
    ("POST", routes::RUN_HOST_PROMPT),
    ("POST", routes::RUN_REPLAY),
    ("GET", routes::RECEIPT),
    ("POST", routes::RECEIPT_ROLLBACK),
    ("GET", routes::EVENTS),
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
        .route(routes::RUN_WITHDRAW, post(withdraw))
        .route(routes::RUN_CANCEL, post(cancel))
        .route(routes::RUN_PROMOTE, post(promote))
        .route(routes::RUN_HOST_PROMPT, post(host_prompt))
        .route(routes::RUN_REPLAY, post(replay))
        .route(routes::RECEIPT, get(receipt))
        .route(routes::RECEIPT_ROLLBACK, post(rollback))
        .route(routes::EVENTS, get(events))
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
/// A body must arrive in full within this time (no trickling).
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Read a request body: size-limited, time-limited.
async fn read_body(app: &App, body: Body) -> Result<Bytes, ApiError> {
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

async fn submit(c: Call, body: Body) -> Result<Response, ApiError> {
    crate::phase("daemon: submit");
    let body = read_body(&c.app, body).await?;
    let op = request::parse_submit(c.query(), &body)?;
    let Call {
        app, caller, peer, ..
    } = c;
    let actor = caller.actor.clone();
    admit_and_run(
        app,
        actor,
        op.wait,
        Box::new(move |engine: Arc<Engine>| {
            // A client in a container: its working_dir is resolved in its
            // own mount namespace, and unless that is the host's directory
            // at the same path, rehearsed and promoted in that view.
            let view = match &op.envelope.working_dir {
                Some(wd) => super::peer_ns::client_view(
                    peer.pid,
                    peer.pidfd.as_deref().map_err(|e| *e),
                    peer.uid,
                    peer.gid,
                    wd,
                )?
                .map(Arc::new),
                None => None,
            };
            crate::phase("daemon: client view");
            let (spec, access) = op.spec_for_in(&caller, view.clone())?;
            if let Some(v) = &view {
                let id = spec.workspace_identity;
                if (id.dev, id.ino) != (v.dev, v.ino) {
                    return Err(crate::engine::EngineError::invalid(
                        crate::engine::Input::Workspace,
                        "working_dir changed while it was being resolved in your mount namespace; submit again",
                    ));
                }
                crate::workspace::owner::view::register(&spec.workspace, v.clone());
            }
            // The engine pins the workspace (no symlinks, device and inode) and
            // refuses one the caller does not own.
            // A client that waits hears of the run with its verdict: the
            // submission's sync runs while the run waits for its sandbox.
            let prepared = engine.prepare(&spec, &caller.actor, access, op.wait);
            if let (Err(_), Some(v)) = (&prepared, &view) {
                crate::workspace::owner::view::forget(v);
            }
            prepared
        }),
    )
    .await
}

/// `POST /v1/runs/{id}/replay`: rehearse a recorded run again with its
/// recorded tool answers.
async fn replay(c: RunCall, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&c.app, body).await?;
    let op = request::parse_replay(&c.id, c.query(), &body)?;
    // Only those who may read the baseline may replay it.
    let (engine, who, rid) = (c.app.engine.clone(), c.caller.clone(), op.id.clone());
    blocking(move || who.readable_run(&engine, rid.as_str())).await?;
    let Call { app, caller, .. } = c.call;
    let a = caller.actor.clone();
    admit_and_run(
        app,
        caller.actor,
        op.wait,
        Box::new(move |engine: Arc<Engine>| {
            engine.prepare_replay(op.id.as_str(), &op.changes.into_engine_request(), &a)
        }),
    )
    .await
}

async fn list(c: Call) -> Result<Response, ApiError> {
    c.serve(request::parse_list(c.query())?).await
}

/// `GET /v1/runs/{id}`; with `?wait=SECONDS`, answers when the run's state
/// differs from its state when the request arrived, or when the time is up
/// (then with the unchanged record).
async fn show(c: RunCall) -> Result<Response, ApiError> {
    let op = request::parse_show(&c.id, c.query())?;
    // Listen before reading, so no change between the two is missed.
    let mut events = c.app.engine.subscribe();
    let first = c.run(op.clone()).await?;
    let Some(wait_s) = op.wait_s else {
        return Ok(axum::Json(first).into_response());
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_s);
    loop {
        let ev = tokio::select! {
            ev = tokio::time::timeout_at(deadline, events.recv()) => ev,
            _ = c.app.shutdown_started() => break,
        };
        match ev {
            Err(_) => break,
            Ok(Ok(ev)) if ev.run_id == op.id.as_str() && ev.state != first.state => break,
            Ok(Ok(_)) => continue,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                // Missed some: look at the record itself.
                let now = c.run(op.clone()).await?;
                if now.state != first.state {
                    return Ok(axum::Json(now).into_response());
                }
            }
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => break,
        }
    }
    c.serve(op).await
}

/// `GET /v1/events`: Server-Sent Events, one `state` event per state a run
/// reaches from now on (`{"run_id", "state"}`), for the caller's own runs
/// (a reviewer: every run). The stream opens with the comment
/// `: subscribed`, sent once the subscription exists: a client that has
/// read it misses no later state. A comment every 15 s keeps idle
/// connections open. A client that falls behind gets a `lagged` event with how many
/// it missed, and should re-list.
async fn events(c: Call) -> Result<Response, ApiError> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    request::parse_no_query(c.query())?;
    let Call { app, caller, .. } = c;
    let rx = app.engine.subscribe();
    let subscribed = futures_util::stream::once(async {
        Ok::<_, std::convert::Infallible>(Event::default().comment("subscribed"))
    });
    let stream =
        futures_util::stream::unfold((rx, caller, app), |(mut rx, caller, app)| async move {
            loop {
                let ev = tokio::select! {
                    ev = rx.recv() => ev,
                    _ = app.shutdown_started() => return None,
                };
                let out = match ev {
                    Ok(ev) => {
                        let visible =
                            caller.sees_all() || ev.submitter_uid == Some(caller.actor.uid);
                        if !visible {
                            continue;
                        }
                        Event::default()
                            .event("state")
                            .json_data(&ev)
                            .unwrap_or_else(|_| Event::default().comment("unserializable event"))
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        Event::default().event("lagged").data(n.to_string())
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                };
                return Some((Ok::<_, std::convert::Infallible>(out), (rx, caller, app)));
            }
        });
    Ok(Sse::new(futures_util::StreamExt::chain(subscribed, stream))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

async fn diff(c: RunCall) -> Result<Response, ApiError> {
    match request::parse_diff(&c.id, c.query())? {
        DiffRequest::Diff(op) => c.serve(op).await,
        DiffRequest::Compare(op) => c.serve(op).await,
    }
}

async fn review(c: RunCall, body: Body, action: ReviewAction) -> Result<Response, ApiError> {
    let body = read_body(&c.app, body).await?;
    c.serve(request::parse_review(&c.id, c.query(), action, &body)?)
        .await
}

async fn approve(c: RunCall, body: Body) -> Result<Response, ApiError> {
    review(c, body, ReviewAction::Approve).await
}

async fn reject(c: RunCall, body: Body) -> Result<Response, ApiError> {
    review(c, body, ReviewAction::Reject).await
}

/// `POST /v1/runs/{id}/withdraw`: the submitter takes its waiting run
/// out of the review queue.
async fn withdraw(c: RunCall, body: Body) -> Result<Response, ApiError> {
    review(c, body, ReviewAction::Withdraw).await
}

async fn cancel(c: RunCall) -> Result<Response, ApiError> {
    let op = request::parse_cancel(&c.id, c.query())?;
    let Call { app, caller, .. } = c.call;
    let id = op.id.as_str().to_string();
    let (engine, c, rid) = (app.engine.clone(), caller.clone(), id.clone());
    let record = blocking(move || c.readable_run(&engine, &rid)).await?;
    authz::authorize(Verb::Cancel, &record, &caller.actor, &caller.auth)?;
    let actor = caller.actor;
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

async fn promote(c: RunCall, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&c.app, body).await?;
    c.serve(request::parse_promote(&c.id, c.query(), &body)?)
        .await
}

/// `POST /v1/runs/{id}/host-prompt`: the token an agent host's prompt
/// approves a run with (its submitter's hook only).
async fn host_prompt(c: RunCall, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&c.app, body).await?;
    c.serve(request::parse_host_prompt(&c.id, c.query(), &body)?)
        .await
}

async fn receipt(c: RunCall) -> Result<Response, ApiError> {
    c.serve(request::parse_receipt(&c.id, c.query())?).await
}

async fn rollback(c: RunCall) -> Result<Response, ApiError> {
    c.serve(request::parse_rollback(&c.id, c.query())?).await
}

async fn journal_verify(c: Call) -> Result<Response, ApiError> {
    request::parse_no_query(c.query())?;
    c.serve(request::VerifyJournal).await
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

async fn health(
    State(app): State<Arc<App>>,
    RawQuery(q): RawQuery,
) -> Result<axum::Json<Health>, ApiError> {
    request::parse_no_query(q.as_deref())?;
    let admitted = app.admitted.load(Ordering::SeqCst);
    let running = app.running.load(Ordering::SeqCst);
    Ok(axum::Json(Health {
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
        landlock_abi: crate::engine::landlock_abi(),
    }))
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
