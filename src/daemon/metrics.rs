//! Prometheus (OpenMetrics text) counters for `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

pub struct Metrics {
    registry: Registry,
    http: Family<StatusLabel, Counter>,
    submitted: Counter,
    finished: Family<DecisionLabel, Counter>,
    refused: Family<ReasonLabel, Counter>,
    running: Gauge,
    queued: Gauge,
    agents: Counter,
    notifications: Family<OutcomeLabel, Counter>,
    notifications_waiting: Gauge,
    notification_events_missed: Counter,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("dryrun");
        let http = Family::<StatusLabel, Counter>::default();
        let submitted = Counter::default();
        let finished = Family::<DecisionLabel, Counter>::default();
        let refused = Family::<ReasonLabel, Counter>::default();
        let running = Gauge::default();
        let queued = Gauge::default();
        let agents = Counter::default();
        let notifications = Family::<OutcomeLabel, Counter>::default();
        let notifications_waiting = Gauge::default();
        let notification_events_missed = Counter::default();
        registry.register(
            "notifications",
            "Notification commands (--notify-command) by outcome: sent, failed, dropped (the queue was full)",
            notifications.clone(),
        );
        registry.register(
            "notifications_queued",
            "Notifications waiting for a free notification command",
            notifications_waiting.clone(),
        );
        registry.register(
            "notification_events_missed",
            "State changes the notifier missed because too many came at once",
            notification_events_missed.clone(),
        );
        registry.register("http_responses", "HTTP responses by status", http.clone());
        registry.register(
            "runs_submitted",
            "Runs accepted for rehearsal",
            submitted.clone(),
        );
        registry.register(
            "runs_finished",
            "Rehearsals finished, by decision (failed when no verdict)",
            finished.clone(),
        );
        registry.register(
            "submissions_refused",
            "Submissions refused before rehearsal, by reason",
            refused.clone(),
        );
        registry.register(
            "rehearsals_running",
            "Rehearsals running now",
            running.clone(),
        );
        registry.register(
            "runs_queued",
            "Runs waiting for a rehearsal slot",
            queued.clone(),
        );
        registry.register(
            "workspace_agents_started",
            "Workspace agents started (processes acting with a user's rights on the host side)",
            agents.clone(),
        );
        Metrics {
            registry,
            http,
            submitted,
            finished,
            refused,
            running,
            queued,
            agents,
            notifications,
            notifications_waiting,
            notification_events_missed,
        }
    }

    pub fn notification(&self, outcome: &str) {
        self.notifications
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
    }
    pub fn notifications_queued(&self, delta: i64) {
        self.notifications_waiting.inc_by(delta);
    }
    pub fn notification_events_missed(&self, n: u64) {
        self.notification_events_missed.inc_by(n);
    }

    pub fn http(&self, status: u16) {
        self.http.get_or_create(&StatusLabel { status }).inc();
    }
    pub fn submitted(&self) {
        self.submitted.inc();
    }
    pub fn finished(&self, decision: &str) {
        self.finished
            .get_or_create(&DecisionLabel {
                decision: decision.into(),
            })
            .inc();
    }
    pub fn refused_queue_full(&self) {
        self.refused(&"queue_full");
    }
    pub fn refused_connection(&self, why: &str) {
        self.refused(&why);
    }
    pub fn refused_budget(&self) {
        self.refused(&"budget_exhausted");
    }
    fn refused(&self, reason: &&str) {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    pub fn render(&self, running: usize, queued: usize) -> String {
        self.running.set(running as i64);
        self.queued.set(queued as i64);
        self.agents_started_now(crate::workspace::owner::agents_started());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Bring the agent counter up to `started`. Renders run concurrently
    /// (one per `/metrics` request): each must add only what no other added.
    fn agents_started_now(&self, started: u64) {
        // Never a read then an add: two renders between them would both
        // add the same agents.
        self.agents
            .inner()
            .fetch_max(started, std::sync::atomic::Ordering::Relaxed);
    }
}
