//! The engine's errors, one variant per cause. What HTTP status and JSON
//! error code each becomes is decided once, at the API edge
//! (`daemon/error.rs`); what exit code, in `cli/`.

use std::path::PathBuf;

use crate::record::RunState;

/// What an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Run,
    Receipt,
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            What::Run => "run",
            What::Receipt => "receipt",
        })
    }
}

/// Which part of a request was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// `working_dir`: where it is, who owns it, what the sandbox can mount.
    Workspace,
    /// A request field or a submitted envelope (a note, a stub override,
    /// the variables handed to a live rerun, an envelope that does not
    /// validate).
    Request,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No such run or receipt, or one the caller may not see (answered
    /// the same, so ids of others' runs are not disclosed).
    #[error("{what} {id} does not exist")]
    NotFound { what: What, id: String },
    /// An id not of the engine's making (no path tricks).
    #[error("{}", bad_id_message(*what, id))]
    BadId { what: What, id: String },
    /// The caller may not do this to this run.
    #[error("{reason}")]
    NotAllowed { reason: String },
    /// The run (in `state`, when its state is what refuses) or what it
    /// holds does not allow this now.
    #[error("{reason}")]
    Conflict {
        state: Option<RunState>,
        reason: String,
    },
    /// The real workspace changed since the rehearsal.
    #[error("{reason}")]
    Drift { reason: String },
    /// A request was wrong; nothing ran.
    #[error("{}{reason}", input_prefix(*input))]
    Invalid { input: Input, reason: String },
    /// The workspace is outside the workspace bound (a home directory, a
    /// directory holding one, `/`); nothing ran.
    #[error("working_dir: {0}")]
    Bound(#[from] super::bound::BoundError),
    /// The system or workspace policy does not load.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// A limit above the configured ceiling; nothing runs.
    #[error(
        "limits.{field}: {asked} is above {ceilings_of} ceiling of {ceiling}; ask for at most {ceiling} ({})",
        ceiling_source(ceilings_of, field)
    )]
    AboveCeiling {
        field: &'static str,
        asked: u64,
        ceiling: u64,
        /// Who set the ceilings: "this daemon's".
        ceilings_of: &'static str,
    },
    /// The submitter keeps its quota's worth or more in the state
    /// directory; nothing runs.
    #[error(
        "uid {uid} keeps {} MiB of run records and kept content in the state directory, at or over its quota of {} MiB (`dryrun daemon --quota-per-uid-mb`); nothing ran. \
         Space comes back as housekeeping removes the kept content of runs older than {blob_days} days and the records of finished runs older than {record_days} days (runs awaiting approval or approved are kept: reject the ones you no longer need); \
         an administrator can raise the quota or shorten the retention (`--blob-retention-days`, `--record-retention-days`)",
        used_bytes.div_ceil(1 << 20),
        quota_bytes >> 20
    )]
    QuotaExceeded {
        uid: u32,
        used_bytes: u64,
        quota_bytes: u64,
        blob_days: u64,
        record_days: u64,
    },
    /// Approvals in an agent host's prompt are off on this engine: the
    /// run waits for a reviewer.
    #[error(
        "approvals in an agent host's permission prompt are off on this daemon: a process running as the agent's uid could ask for and present the grant itself, so run {run_id} waits for a dryrun reviewer (`dryrun approve {run_id}` by another identity); an administrator who trusts every process of the agent's uid can turn them on with `dryrun daemon --host-prompt-approvals`"
    )]
    HostPromptOff { run_id: String },
    /// The submitter spent its risk budget; retry later.
    #[error("{message}")]
    BudgetExhausted { message: String, retry_after_s: u64 },
    /// This kernel cannot give the sandbox dryrun promises.
    #[error(
        "this kernel offers Landlock ABI {found}; dryrun needs at least ABI {needed} (Linux 6.7). \
         Run with --allow-degraded-sandbox (or DRYRUN_ALLOW_DEGRADED=1) to rehearse with namespaces and seccomp only"
    )]
    LandlockTooOld { found: u32, needed: u32 },
    /// Internal: reading or writing the state directory failed.
    #[error("state directory {path}: {source}")]
    Storage {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Internal: a file of the state directory does not parse.
    #[error("run record {path} is unreadable: {message}")]
    Corrupt { path: PathBuf, message: String },
    /// Internal: the journal could not be read or appended to.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// Internal: the risk budget's ledger failed.
    #[error("risk budget: {0}")]
    BudgetLedger(#[source] crate::policy::budget::BudgetError),
}

fn bad_id_message(what: What, id: &str) -> String {
    match what {
        What::Run => format!("run id {id:?} is not a valid run id"),
        What::Receipt => format!("{id:?} is not a receipt id"),
    }
}

fn input_prefix(input: Input) -> &'static str {
    match input {
        Input::Workspace => "working_dir: ",
        Input::Request => "",
    }
}

impl EngineError {
    pub(crate) fn not_found(what: What, id: &str) -> Self {
        EngineError::NotFound {
            what,
            id: id.to_string(),
        }
    }

    pub(crate) fn not_allowed(reason: impl Into<String>) -> Self {
        EngineError::NotAllowed {
            reason: reason.into(),
        }
    }

    /// Refused because the run is in `state`.
    pub(crate) fn in_state(state: RunState, reason: impl Into<String>) -> Self {
        EngineError::Conflict {
            state: Some(state),
            reason: reason.into(),
        }
    }

    /// Refused because of what the run holds (not its state).
    pub(crate) fn conflict(reason: impl Into<String>) -> Self {
        EngineError::Conflict {
            state: None,
            reason: reason.into(),
        }
    }

    pub(crate) fn drift(reason: impl Into<String>) -> Self {
        EngineError::Drift {
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(input: Input, reason: impl Into<String>) -> Self {
        EngineError::Invalid {
            input,
            reason: reason.into(),
        }
    }

    pub(crate) fn storage(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Storage {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, message: impl ToString) -> Self {
        EngineError::Corrupt {
            path: path.into(),
            message: message.to_string(),
        }
    }

    /// Invalid input (exit 2) versus internal failure (exit 1).
    pub fn is_invalid_input(&self) -> bool {
        !self.is_internal() && !matches!(self, EngineError::LandlockTooOld { .. })
    }

    /// The engine (or the state directory under it) failed; the caller did
    /// nothing wrong.
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            EngineError::Storage { .. }
                | EngineError::Corrupt { .. }
                | EngineError::Journal(_)
                | EngineError::BudgetLedger(_)
        )
    }

    /// The live lane refused (the run's state, its change set, or a
    /// changed workspace): nothing was written.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            EngineError::Conflict { .. } | EngineError::Drift { .. }
        )
    }
}

/// Where a ceiling comes from, for [`EngineError::AboveCeiling`].
fn ceiling_source(ceilings_of: &str, field: &str) -> String {
    if ceilings_of.contains("daemon") {
        format!(
            "the ceiling is `dryrun daemon --max-{}`",
            field.replace('_', "-")
        )
    } else {
        "an in-process engine's ceilings are sized to this machine: see docs/environment.md".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_thing() {
        assert_eq!(
            EngineError::not_found(What::Run, "r1-2").to_string(),
            "run r1-2 does not exist"
        );
        assert_eq!(
            EngineError::not_found(What::Receipt, "p1-2").to_string(),
            "receipt p1-2 does not exist"
        );
        assert_eq!(
            EngineError::BadId {
                what: What::Run,
                id: "x/".into()
            }
            .to_string(),
            "run id \"x/\" is not a valid run id"
        );
        assert_eq!(
            EngineError::invalid(Input::Workspace, "gone").to_string(),
            "working_dir: gone"
        );
        let e = EngineError::AboveCeiling {
            field: "memory_mb",
            asked: 9000,
            ceiling: 4096,
            ceilings_of: "this daemon's",
        };
        assert_eq!(
            e.to_string(),
            "limits.memory_mb: 9000 is above this daemon's ceiling of 4096; ask for at most 4096 (the ceiling is `dryrun daemon --max-memory-mb`)"
        );
        assert!(e.is_invalid_input());
        assert!(
            !EngineError::LandlockTooOld {
                found: 1,
                needed: 4
            }
            .is_invalid_input()
        );
    }
}
