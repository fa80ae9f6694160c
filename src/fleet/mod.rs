//! The optional fleet store (docs/fleet.md, ADR 0011): many hosts on one
//! PostgreSQL database with one review queue, one policy and anchors of
//! every host's journal. Beside the daemon, used by it and by the command
//! line's `--fleet` clients; never by the engine's decision rules, which
//! it calls like any other door.
//!
//! - `config.rs`: the fleet config (the store, the password file, people);
//! - `db.rs`: connecting (TLS where asked), notifications, migrations;
//! - `host.rs`: a daemon's fleet task: register, publish, apply decisions,
//!   follow the fleet policy, reconnect;
//! - `publish.rs`: the journal (the host's outbox) and run records to rows;
//! - `apply.rs`: a reviewer's decision applied once, or refused, journaled;
//! - `policy.rs`: the fleet policy on a host (cached, minimum version);
//! - `query.rs`: what the `--fleet` commands read and write;
//! - `verify.rs`: `dryrun journal verify --fleet`.

mod apply;
pub mod config;
pub mod db;
mod host;
pub mod policy;
mod publish;
pub mod query;
pub mod verify;

pub use config::{FLEET_CONFIG, FleetSpec};
pub use host::start;

use crate::engine::EngineError;
use crate::journal::JournalError;

/// The sub-directory of a host's state directory the fleet keeps its
/// files in (the host id, the fleet policy it last loaded).
pub const STATE_SUBDIR: &str = "fleet";

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("fleet config: {0}")]
    Config(String),
    /// The store said no (a refusal of `dryrun.decide()`, a permission).
    #[error("fleet store: {0}")]
    Db(String),
    /// The store could not be reached or is not serving now (starting,
    /// stopping, out of connections): try again.
    #[error("fleet store unavailable: {0}")]
    Unavailable(String),
    #[error(
        "the fleet store's schema is version {have} and this dryrun needs {need}: run `dryrun fleet migrate --fleet URL` as the database's owner"
    )]
    Schema { have: i32, need: i32 },
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("fleet policy: {0}")]
    Policy(String),
    #[error(
        "this host's journal disagrees with what it published to the fleet: {0}. It was truncated or rewritten after it was anchored; `dryrun journal verify --fleet URL` says where. Nothing more is published"
    )]
    Diverged(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<tokio_postgres::Error> for FleetError {
    /// The server's own words when it said something (a refusal from
    /// `dryrun.decide()`, a permission), else the client's.
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => {
                let class = &db.code().code()[..2];
                if matches!(class, "08" | "53" | "57") {
                    FleetError::Unavailable(db.message().to_string())
                } else {
                    FleetError::Db(db.message().to_string())
                }
            }
            None => {
                let mut s = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(c) = src {
                    s.push_str(": ");
                    s.push_str(&c.to_string());
                    src = c.source();
                }
                FleetError::Unavailable(s)
            }
        }
    }
}

impl FleetError {
    /// A refusal by the database (`dryrun.decide()` and permissions), as
    /// opposed to a store that could not be reached.
    pub fn is_refusal(&self) -> bool {
        matches!(self, FleetError::Db(_))
    }
}

/// The host id this state directory published as, if it ever did.
pub fn host_id_of(state_dir: &std::path::Path) -> Option<String> {
    let t = std::fs::read_to_string(state_dir.join(STATE_SUBDIR).join("host")).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}
