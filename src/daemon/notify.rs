//! Notifications: when a run starts waiting for a person, the daemon runs
//! the configured command (`dryrun daemon --notify-command PATH`) with the
//! run's review summary as one JSON object on stdin, so a team can bridge
//! the queue to chat or mail. The command is run directly (no shell), as
//! the daemon's user, with a scrubbed environment (`PATH`, `LANG`,
//! `DRYRUN_RUN_ID`, `DRYRUN_EVENT`), and killed past its timeout.
//!
//! It never holds up the engine: it listens to the engine's event stream
//! on its own task and puts each run that starts waiting into a bounded
//! queue; [`MAX_AT_ONCE`] workers run the command for the queue in order,
//! each on a blocking thread. Only when the queue's bound of notifications wait
//! (`--notify-queue`; commands that hang until their timeout, a burst of
//! runs) is one
//! dropped, and then it is counted (`dryrun_notifications_dropped_total`)
//! and logged with the running count. Every failure (spawn, exit status,
//! timeout) is logged as a warning and counted too.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::engine::summary::ReviewSummary;
use crate::record::RunState;

use super::metrics::Metrics;

/// Notification commands running at once, at most.
const MAX_AT_ONCE: usize = 4;

/// Notifications waiting for a free worker, at most, unless configured
/// (`--notify-queue`); past that the newest is dropped and counted.
pub const NOTIFY_QUEUE_DEFAULT: usize = 256;

/// What to run when a run starts waiting for a person.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// An executable, run without a shell.
    pub command: PathBuf,
    /// Killed past this.
    pub timeout: Duration,
    /// Notifications that may wait for a free worker.
    pub queue: usize,
}

/// The JSON on the command's stdin.
#[derive(serde::Serialize)]
struct Notification<'a> {
    /// `awaiting_approval`.
    event: &'a str,
    #[serde(flatten)]
    summary: ReviewSummary,
}

/// Listen to `engine`'s events and notify for each run that starts
/// waiting for a person.
pub(super) fn spawn_notifier(engine: Arc<Engine>, cfg: NotifyConfig, metrics: Arc<Metrics>) {
    let mut events = engine.subscribe();
    let (queue, waiting) = async_channel_bounded(cfg.queue);
    for _ in 0..MAX_AT_ONCE {
        let (engine, cfg, metrics, waiting) = (
            engine.clone(),
            cfg.clone(),
            metrics.clone(),
            waiting.clone(),
        );
        tokio::spawn(async move {
            loop {
                let run_id = {
                    let mut rx = waiting.lock().await;
                    match rx.recv().await {
                        Some(id) => id,
                        None => return,
                    }
                };
                metrics.notifications_queued(-1);
                let (e, c, id) = (engine.clone(), cfg.clone(), run_id.clone());
                let done = tokio::task::spawn_blocking(move || notify_one(&e, &c, &id)).await;
                match done {
                    Ok(Ok(())) => metrics.notification("sent"),
                    Ok(Err(e)) => {
                        metrics.notification("failed");
                        tracing::warn!(run = %run_id, command = %cfg.command.display(), "notification failed: {e}");
                    }
                    Err(e) => {
                        metrics.notification("failed");
                        tracing::warn!(run = %run_id, "notification failed: {e}");
                    }
                }
            }
        });
    }
    let bound = cfg.queue;
    tokio::spawn(async move {
        let mut dropped = 0u64;
        loop {
            let ev = match events.recv().await {
                Ok(ev) => ev,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    metrics.notification_events_missed(n);
                    tracing::warn!(
                        "notifications: {n} state change(s) missed (too many at once); runs waiting are still in the queue (`dryrun runs --state awaiting_approval`)"
                    );
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if ev.state != RunState::AwaitingApproval {
                continue;
            }
            match queue.try_send(ev.run_id.clone()) {
                Ok(()) => metrics.notifications_queued(1),
                Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                    dropped += 1;
                    metrics.notification("dropped");
                    tracing::warn!(run = %ev.run_id, dropped_so_far = dropped, "notification dropped: {bound} notifications are waiting for the command (--notify-queue)");
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
    });
}

/// A bounded queue many workers take from: tokio's mpsc with its one
/// receiver behind a lock (held only while waiting for the next item).
fn async_channel_bounded(
    bound: usize,
) -> (
    tokio::sync::mpsc::Sender<String>,
    Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<String>>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(bound);
    (tx, Arc::new(tokio::sync::Mutex::new(rx)))
}

/// Run the command once for `run_id`; `Err` says what went wrong.
fn notify_one(engine: &Engine, cfg: &NotifyConfig, run_id: &str) -> Result<(), String> {
    let r = engine.get(run_id).map_err(|e| e.to_string())?;
    let body = serde_json::to_vec(&Notification {
        event: "awaiting_approval",
        summary: ReviewSummary::of(&r, Some(engine.approval_expiry())),
    })
    .map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(&cfg.command)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("DRYRUN_RUN_ID", run_id)
        .env("DRYRUN_EVENT", "awaiting_approval")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // On its own thread, so a command that never reads still meets its
        // timeout; one that does not read its stdin is its own business.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        });
    }
    let deadline = Instant::now() + cfg.timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => return Err(format!("it ended with {st}")),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "it did not finish within {} s and was killed",
                    cfg.timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for it: {e}")),
        }
    }
}
