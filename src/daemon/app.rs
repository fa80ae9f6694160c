//! Admission and queueing: the daemon's shared state ([`App`]), the
//! caller's peer credentials, bounded slots per daemon and per uid, and the
//! one path that admits, prepares and runs a rehearsal.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::sync::{Notify, Semaphore, watch};

use super::DaemonConfig;
use super::error::ApiError;
use super::metrics::Metrics;
use crate::engine::CancelHandle;
use crate::engine::{Engine, EngineError};
use crate::journal::Actor;
use crate::record::RunState;
use crate::request::Submitted;
use crate::request::serve::Caller;

/// The caller, from SO_PEERCRED (and SO_PEERPIDFD) at accept.
#[derive(Debug, Clone)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    pub known: bool,
    /// The connecting process, pinned (see `peer_ns`).
    pub pidfd: Result<Arc<std::os::fd::OwnedFd>, nix::Error>,
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
                pidfd: super::peer_ns::peer_pidfd(stream).map(Arc::new),
            },
            Err(_) => Peer {
                uid: u32::MAX,
                gid: u32::MAX,
                pid: None,
                known: false,
                pidfd: Err(nix::Error::ENOTCONN),
            },
        }
    }
}

impl Peer {
    pub(super) fn actor(&self) -> Result<Actor, ApiError> {
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
    /// The caller of a request, for every authorisation the requests make:
    /// reviewers (root, the approver group) and the daemon's own user see
    /// every run; anyone else only the runs it submitted.
    pub(super) fn caller(&self, peer: &Peer) -> Result<Caller, ApiError> {
        Ok(Caller::peer(peer.actor()?, &self.cfg.approver_group))
    }
}

/// A run the daemon is working on.
pub(super) struct Active {
    pub(super) cancel_requested: Arc<AtomicBool>,
    pub(super) cancel: Arc<CancelHandle>,
    pub(super) cancel_queued: Arc<Notify>,
    pub(super) started: Arc<AtomicBool>,
    pub(super) done: watch::Receiver<bool>,
}

pub struct App {
    pub(super) engine: Arc<Engine>,
    pub cfg: DaemonConfig,
    slots: Arc<Semaphore>,
    /// Each uid's share of `slots`: at most half of them (at least one).
    slots_by_uid: std::sync::Mutex<HashMap<u32, Arc<Semaphore>>>,
    /// Queued + running.
    pub(super) admitted: AtomicUsize,
    admitted_by_uid: std::sync::Mutex<HashMap<u32, usize>>,
    pub(super) running: AtomicUsize,
    pub(super) active: std::sync::Mutex<HashMap<String, Active>>,
    pub(super) metrics: std::sync::Arc<Metrics>,
    pub(super) shutting_down: AtomicBool,
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
            metrics: std::sync::Arc::new(Metrics::new()),
            shutting_down: AtomicBool::new(false),
            shutdown: Notify::new(),
        })
    }

    /// The most rehearsals one uid runs at once: half the daemon's slots,
    /// at least one; its other runs wait in the queue.
    pub fn running_per_uid(&self) -> usize {
        (self.cfg.max_running / 2).max(1)
    }

    pub(super) fn uid_slots(&self, uid: u32) -> Arc<Semaphore> {
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
pub(super) struct UidSlot {
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

pub(super) async fn blocking<T: Send + 'static>(
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

pub(super) type PrepareFn =
    Box<dyn FnOnce(Arc<Engine>) -> Result<crate::engine::Prepared, EngineError> + Send>;

/// Admission: refuse during shutdown, when the caller's uid holds half the
/// queue, or when the queue is full; else the uid's share of it, given
/// back when dropped.
fn admit(app: &Arc<App>, uid: u32) -> Result<UidSlot, ApiError> {
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
        let n = m.entry(uid).or_insert(0);
        if *n >= uid_cap {
            app.metrics.refused_connection("per_uid_queue_full");
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                format!(
                    "uid {} already has {uid_cap} runs queued or running (half the daemon's capacity); retry later",
                    uid
                ),
            );
            e.retry_after = Some(1);
            return Err(e);
        }
        *n += 1;
    }
    let uid_slot = UidSlot {
        app: app.clone(),
        uid,
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
    Ok(uid_slot)
}

/// Admission (bounded queue, per-uid share), preparation, the queued
/// rehearsal, and the answer (202, or the record with `wait`): one path for
/// submissions and replays.
pub(super) async fn admit_and_run(
    app: Arc<App>,
    actor: crate::journal::Actor,
    wait: bool,
    prepare: PrepareFn,
) -> Result<Response, ApiError> {
    let uid_slot = admit(&app, actor.uid)?;
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
    // The engine's error, if the rehearsal ended in one: what a waiting
    // client hears when the run left no record (its submission never
    // reached the journal).
    let (undone_tx, undone_rx) = tokio::sync::oneshot::channel::<EngineError>();
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
        if let Ok(Err(e)) = outcome {
            let _ = undone_tx.send(e);
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
    let failed = undone_rx.await.ok();
    let engine = app.engine.clone();
    let r = match (blocking(move || engine.get(&run_id)).await, failed) {
        (Ok(r), _) => r,
        // Undone (its submission never reached the journal): the error.
        (Err(_), Some(e)) => return Err(e.into()),
        (Err(e), None) => return Err(e),
    };
    Ok((StatusCode::OK, axum::Json(r)).into_response())
}
