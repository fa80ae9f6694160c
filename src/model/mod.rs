//! The lowest layer: pure data and pure rules shared by every stage of the
//! pipeline. No I/O, no clock, no environment; nothing here imports another
//! module of the crate (a test in `tests/structure.rs` keeps it so).
//!
//! - [`decision`]: `Decision` (ordered; combining is `max`) and `Finding`.
//! - [`advice`]: what to change so a run goes through, by rule.
//! - [`change`]: one entry of the evidence's change list.
//! - [`dir_summary`]: a long change list counted by directory.
//! - [`egress`]: the egress report's entries (`rehearsal.egress`).
//! - [`evidence`]: blocked attempts, limits hit and step outcomes.
//! - [`report`]: what a rehearsal reports (the sandbox's init and the
//!   outer helper), before the engine turns it into the run record.
//! - [`service`]: a declared host service's endpoint (loopback TCP or a
//!   Unix socket path).
//! - [`stubs`]: the stub vocabulary and how a call is matched and answered.
//! - [`mount_table`]: the mount table as data (what is mounted where).
//! - [`live`]: the live lane's mode and network (`apply|rerun`, `none|host`).
//! - [`output`]: the order the command wrote its stdout and stderr in.
//! - [`run_state`]: the states of a run and which verbs each allows.
//! - [`promotion`]: what may never be promoted, the one rule the verdict and
//!   the live lane's planner both call.
//! - [`view`]: writes outside the workspace and what the sandbox hid.
//! - [`waiting`]: who can act on a finding, and whether a run waits for a
//!   person (the one rule of the review queue).
//! - [`variables`]: which environment variables are credentials and which
//!   are configuration, by name.

pub(crate) mod advice;
pub(crate) mod change;
pub(crate) mod decision;
pub(crate) mod deps;
pub(crate) mod dir_summary;
pub(crate) mod egress;
pub(crate) mod evidence;
pub(crate) mod live;
pub(crate) mod mount_table;
pub(crate) mod output;
pub(crate) mod promotion;
pub(crate) mod report;
pub(crate) mod run_state;
pub(crate) mod service;
pub(crate) mod stubs;
pub(crate) mod subcommand;
pub(crate) mod text;
pub(crate) mod variables;
pub(crate) mod view;
pub(crate) mod waiting;

pub(crate) use change::{Change, ChangeKind, FileType};
pub(crate) use decision::{Decision, Finding};
pub(crate) use egress::{DirectAttempt, EgressEntry, EgressHow};
pub(crate) use evidence::{Blocked, BlockedKind, LimitHit, StepOutcome};
pub(crate) use live::{LiveMode, LiveNetwork};
pub(crate) use promotion::Refusal;
pub(crate) use report::{HostReport, RehearsalReport, UnmappedEntry, UnmappedIds};
pub(crate) use run_state::RunState;
pub(crate) use service::ServiceEndpoint;
pub(crate) use view::{Hidden, HiddenKind, OutsideWrite};
