//! A daemon's fleet task. Before the daemon serves: connect (or, with the
//! store unreachable, go on from what this host cached), register, and load
//! the fleet policy (refusing to start below the fleet's minimum). Then, on
//! its own task, for as long as the daemon runs:
//!
//! - publish what the journal holds past the published position (the
//!   journal is the outbox: a host without the store goes on alone, and
//!   catches up from there when the store is back), with the current
//!   summary of every run those records, or the engine's events, touched;
//! - apply each pending decision for this host once (`apply.rs`);
//! - follow `LISTEN dryrun_decision` and `dryrun_policy`, with a poll every
//!   [`POLL_EVERY`] in case a notification was missed;
//! - on any error, reconnect with a growing pause (at most [`BACKOFF_MAX`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;

use super::config::FleetSpec;
use super::db::{self, Db};
use super::policy::HostPolicy;
use super::{FleetError, STATE_SUBDIR};
use crate::engine::Engine;
use crate::journal::Appended;
use crate::record::RunState;

/// Decisions are polled this often besides their notifications, and the
/// host's `last_seen` moves.
const POLL_EVERY: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// After a wake-up by a run's change, what else arrives within this is
/// published with it (a decision is applied at once).
const GATHER: Duration = Duration::from_millis(40);
/// A change no reviewer waits for (a run promoted, failed, refused; the
/// journal's records and group-commit heads) is published within this,
/// together with whatever else changed meanwhile.
const LAZY: Duration = Duration::from_millis(250);
/// Runs remembered as changed while the store is away; past it, every
/// waiting run is published again at the reconnection.
const DIRTY_MAX: usize = 100_000;

/// Where publication stands: the next record to publish.
#[derive(Debug, Clone, Default)]
pub(super) struct Position {
    pub next_seq: u64,
    pub offset: u64,
    /// The hash of record `next_seq - 1` (what the next one's `prev` is).
    pub last_hash: Option<String>,
}

/// What the fleet task keeps between connections.
pub(crate) struct FleetHost {
    pub(super) engine: Arc<Engine>,
    pub(super) spec: FleetSpec,
    pub(super) state_dir: PathBuf,
    /// This host's id: its login role in the store.
    pub(super) host_id: String,
    pub(super) position: Option<Position>,
    /// Runs to publish again (their state changed).
    pub(super) dirty: HashSet<String>,
    pub(super) dirty_overflow: bool,
    /// Journal heads of this process's group commits, to anchor.
    pub(super) heads: VecDeque<Appended>,
    /// Fleet decisions this host applied or refused (from its journal),
    /// with the journal record that says so once it was read back.
    pub(super) processed: HashMap<i64, Option<super::apply::Ack>>,
    pub(super) policy: Arc<HostPolicy>,
    /// Set when the journal disagrees with what was published.
    pub(super) diverged: Option<String>,
    /// Runs whose verdict made them wait, and when (by the journal).
    pub(super) waiting_at: HashMap<String, String>,
    /// Runs whose evidence row is in the store.
    pub(super) with_evidence: HashSet<String>,
    /// This connection's prepared statements.
    pub(super) statements: Option<super::publish::Statements>,
}

/// Connect, register and load the fleet policy, then run the fleet task
/// in the background. Fails (the daemon does not start) when the fleet
/// policy this host can use is older than the fleet's minimum, or when no
/// fleet policy is known at all (the store unreachable and nothing cached).
pub async fn start(
    engine: Arc<Engine>,
    spec: FleetSpec,
    state_dir: PathBuf,
) -> Result<(), FleetError> {
    let dir = state_dir.join(STATE_SUBDIR);
    std::fs::create_dir_all(&dir)?;
    let processed = {
        let e = engine.clone();
        tokio::task::spawn_blocking(move || super::apply::processed_decisions(&e))
            .await
            .map_err(|e| FleetError::Io(std::io::Error::other(e)))??
    };
    let policy = Arc::new(HostPolicy::new(&dir));
    let mut host = FleetHost {
        engine,
        spec,
        state_dir: state_dir.clone(),
        host_id: super::host_id_of(&state_dir).unwrap_or_default(),
        position: None,
        dirty: HashSet::new(),
        dirty_overflow: true,
        heads: VecDeque::new(),
        processed,
        policy,
        diverged: None,
        waiting_at: HashMap::new(),
        with_evidence: HashSet::new(),
        statements: None,
    };
    let mut events = host.engine.subscribe();
    let mut commits = host.engine.journal().subscribe_commits();
    let first = match db::connect(&host.spec).await {
        Ok(mut conn) => match host.hello(&mut conn).await {
            Ok(()) => Some(conn),
            Err(e @ (FleetError::Schema { .. } | FleetError::Policy(_))) => return Err(e),
            Err(e) => {
                tracing::warn!("fleet store: {e}; working alone until it is back");
                None
            }
        },
        Err(e) => {
            tracing::warn!("fleet store unreachable: {e}; working alone until it is back");
            None
        }
    };
    // Without the store: the cached policy, if it is recent enough.
    host.policy.require_loaded()?;
    host.policy.install();
    tokio::spawn(async move {
        let mut conn = first;
        let mut pause = Duration::from_millis(100);
        loop {
            if let Some(c) = conn.take() {
                match host.serve(c, &mut events, &mut commits).await {
                    Ok(()) => return,
                    Err(e) => tracing::warn!("fleet store: {e}; reconnecting"),
                }
                pause = Duration::from_millis(100);
            }
            // Away from the store: remember what changes.
            let until = tokio::time::Instant::now() + pause;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => break,
                    ev = events.recv() => {
                        host.note_event(ev);
                    }
                    h = commits.recv() => host.note_head(h),
                }
            }
            pause = (pause * 2).min(BACKOFF_MAX);
            match db::connect(&host.spec).await {
                Ok(mut c) => match host.hello(&mut c).await {
                    Ok(()) => conn = Some(c),
                    Err(e) => tracing::warn!("fleet store: {e}"),
                },
                Err(e) => tracing::debug!("fleet store still unreachable: {e}"),
            }
        }
    });
    Ok(())
}

impl FleetHost {
    /// After connecting: the schema, who we are, registration, the fleet
    /// policy, where publication stands, notifications.
    async fn hello(&mut self, conn: &mut Db) -> Result<(), FleetError> {
        let c = &conn.client;
        db::check_schema(c).await?;
        let me: String = c.query_one("SELECT session_user::text", &[]).await?.get(0);
        if !self.host_id.is_empty() && self.host_id != me {
            return Err(FleetError::Config(format!(
                "this state directory published as host {} but the fleet URL logs in as {me}; a host keeps its role",
                self.host_id
            )));
        }
        self.host_id = me;
        let dir = self.state_dir.join(STATE_SUBDIR);
        std::fs::write(dir.join("host"), format!("{}\n", self.host_id))?;
        self.policy.refresh(c).await?;
        let (pv, ph) = self.policy.current_version();
        c.execute(
            "INSERT INTO dryrun.hosts (host_id, version, landlock_abi, policy_version, policy_hash, config_hash, last_seen)
             VALUES (session_user, $1, $2, $3, $4, $5, now())
             ON CONFLICT (host_id) DO UPDATE SET version = EXCLUDED.version, landlock_abi = EXCLUDED.landlock_abi,
                policy_version = EXCLUDED.policy_version, policy_hash = EXCLUDED.policy_hash,
                config_hash = EXCLUDED.config_hash, last_seen = now()",
            &[
                &env!("CARGO_PKG_VERSION"),
                &(crate::engine::landlock_abi() as i32),
                &pv,
                &ph,
                &self.spec.config_hash,
            ],
        )
        .await?;
        // The journal is the durable copy of what is published here: a
        // publication the store loses in a crash is published again from
        // it (the position is the store's last event of this host), so
        // this session's commits need not wait for the store's disk.
        c.batch_execute(
            "SET synchronous_commit = off; LISTEN dryrun_decision; LISTEN dryrun_policy",
        )
        .await?;
        self.position = Some(super::publish::find_position(self, c).await?);
        self.statements = Some(super::publish::prepare(c).await?);
        self.with_evidence = c
            .query(
                "SELECT run_id FROM dryrun.evidence WHERE host_id = session_user",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if self.dirty_overflow {
            self.dirty
                .extend(super::publish::waiting_runs(&self.engine).await);
            self.dirty_overflow = false;
        }
        Ok(())
    }

    /// Publish and apply until the connection fails (an error) or the
    /// runtime stops.
    async fn serve(
        &mut self,
        mut conn: Db,
        events: &mut tokio::sync::broadcast::Receiver<crate::model::run_state::RunEvent>,
        commits: &mut tokio::sync::broadcast::Receiver<Appended>,
    ) -> Result<(), FleetError> {
        let mut want_decisions = true;
        let mut poll = tokio::time::interval(POLL_EVERY);
        loop {
            if want_decisions {
                super::apply::apply_pending(self, &conn.client).await?;
                want_decisions = false;
            }
            while super::publish::publish_once(self, &mut conn.client).await? {}
            // Wait for a reason to publish. A run that begins or stops
            // waiting for a person goes out at once (with what else comes
            // within [`GATHER`]); any other change, and the journal's
            // records and group-commit heads, within [`LAZY`], so that a
            // busy host publishes many runs in one transaction.
            let mut lazy: Option<tokio::time::Instant> = None;
            let mut urgent = false;
            while !want_decisions && !urgent {
                let until = lazy.unwrap_or_else(|| tokio::time::Instant::now() + POLL_EVERY);
                tokio::select! {
                    n = conn.notes.recv() => want_decisions |= self.on_note(n, &conn.client).await?,
                    ev = events.recv() => {
                        urgent = self.note_event(ev);
                        lazy.get_or_insert_with(|| tokio::time::Instant::now() + LAZY);
                    }
                    h = commits.recv() => {
                        self.note_head(h);
                        lazy.get_or_insert_with(|| tokio::time::Instant::now() + LAZY);
                    }
                    _ = tokio::time::sleep_until(until), if lazy.is_some() => break,
                    _ = poll.tick() => {
                        want_decisions = true;
                        let published = self.position.as_ref().map_or(-1, |p| p.next_seq as i64 - 1);
                        conn.client
                            .execute(
                                "UPDATE dryrun.hosts SET last_seen = now(), published_seq = $1 WHERE host_id = session_user",
                                &[&published],
                            )
                            .await?;
                    }
                }
            }
            if want_decisions {
                continue;
            }
            // Take whatever else is there at once (one publication for all).
            loop {
                match events.try_recv() {
                    Ok(ev) => {
                        self.note_event(Ok(ev));
                    }
                    Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(n)) => {
                        self.note_event(Err(RecvError::Lagged(n)));
                    }
                    Err(_) => break,
                }
            }
            // Gather what else comes within a moment after an urgent change.
            let until = tokio::time::Instant::now() + GATHER;
            while urgent && !want_decisions {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => break,
                    n = conn.notes.recv() => want_decisions |= self.on_note(n, &conn.client).await?,
                    ev = events.recv() => {
                        self.note_event(ev);
                    }
                    h = commits.recv() => self.note_head(h),
                }
            }
        }
    }

    /// A notification: `Ok(true)` when it is a decision for this host (a
    /// new fleet policy is loaded here and now).
    async fn on_note(
        &mut self,
        n: Option<tokio_postgres::Notification>,
        c: &tokio_postgres::Client,
    ) -> Result<bool, FleetError> {
        let Some(n) = n else {
            return Err(FleetError::Unavailable("the connection closed".into()));
        };
        match n.channel() {
            "dryrun_decision" => Ok(n
                .payload()
                .rsplit_once(' ')
                .is_some_and(|(host, _)| host == self.host_id)),
            "dryrun_policy" => {
                self.policy.refresh(c).await?;
                self.policy.install();
                self.registered_policy(c).await?;
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    async fn registered_policy(&self, c: &tokio_postgres::Client) -> Result<(), FleetError> {
        let (pv, ph) = self.policy.current_version();
        c.execute(
            "UPDATE dryrun.hosts SET policy_version = $1, policy_hash = $2 WHERE host_id = session_user",
            &[&pv, &ph],
        )
        .await?;
        Ok(())
    }

    /// Note a run's change; `true` when reviewers wait for it: the run
    /// now waits for a person, or waited (its evidence row is out).
    fn note_event(&mut self, ev: Result<crate::model::run_state::RunEvent, RecvError>) -> bool {
        match ev {
            // Queued and running are passing states: the journal's
            // `run_submitted` publishes a queued run, its outcome the rest.
            Ok(ev) if matches!(ev.state, RunState::Queued | RunState::Running) => false,
            Ok(ev) => {
                let urgent = ev.state == RunState::AwaitingApproval
                    || self.with_evidence.contains(&ev.run_id);
                if self.dirty.len() < DIRTY_MAX {
                    self.dirty.insert(ev.run_id);
                } else {
                    self.dirty_overflow = true;
                }
                urgent
            }
            Err(RecvError::Lagged(_)) => {
                self.dirty_overflow = true;
                true
            }
            Err(RecvError::Closed) => false,
        }
    }

    fn note_head(&mut self, h: Result<Appended, RecvError>) {
        if let Ok(h) = h {
            if self.heads.len() >= 4096 {
                self.heads.pop_front();
            }
            self.heads.push_back(h);
        }
    }
}
