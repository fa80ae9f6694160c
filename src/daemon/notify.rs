//! Notifications: when a run starts waiting for a person, the daemon runs
//! the configured command (`dryrun daemon --notify-command PATH`) with the
//! run's review summary as one JSON object on stdin, so a team can bridge
//! the queue to chat or mail. The command is run directly (no shell), as
//! the daemon's user, with a scrubbed environment (`PATH`, `LANG`,
//! `DRYRUN_RUN_ID`, `DRYRUN_EVENT`), and killed past its timeout.
//!
//! It never holds up the engine: it listens to the engine's event stream
//! on its own task, and each command runs on a blocking thread; at most
//! [`MAX_AT_ONCE`] run at once, past that a notification is dropped. Every
//! failure (spawn, exit status, timeout, dropped) is logged as a warning.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::engine::summary::ReviewSummary;
use crate::record::RunState;

/// Notification commands running at once, at most.
const MAX_AT_ONCE: usize = 4;

/// What to run when a run starts waiting for a person.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// An executable, run without a shell.
    pub command: PathBuf,
    /// Killed past this.
    pub timeout: Duration,
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
pub(super) fn spawn_notifier(engine: Arc<Engine>, cfg: NotifyConfig) {
    let mut events = engine.subscribe();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_AT_ONCE));
    tokio::spawn(async move {
        loop {
            let ev = match events.recv().await {
                Ok(ev) => ev,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!("notifications: {n} state change(s) missed (too many at once)");
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if ev.state != RunState::AwaitingApproval {
                continue;
            }
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                tracing::warn!(run = %ev.run_id, "notification dropped: {MAX_AT_ONCE} notification commands are still running");
                continue;
            };
            let (engine, cfg) = (engine.clone(), cfg.clone());
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                if let Err(e) = notify_one(&engine, &cfg, &ev.run_id) {
                    tracing::warn!(run = %ev.run_id, command = %cfg.command.display(), "notification failed: {e}");
                }
            });
        }
    });
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
