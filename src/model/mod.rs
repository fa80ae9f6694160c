//! The lowest layer: pure data and pure rules shared by every stage of the
//! pipeline. No I/O, no clock, no environment; nothing here imports another
//! module of the crate (a test in `tests/structure.rs` keeps it so).
//!
//! - [`decision`]: `Decision` (ordered; combining is `max`) and `Finding`.
//! - [`change`]: one entry of the evidence's change list.
//! - [`evidence`]: blocked attempts, limits hit and step outcomes.
//! - [`report`]: what a rehearsal reports (the sandbox's init and the
//!   outer helper), before the engine turns it into the run record.
//! - [`stubs`]: the stub vocabulary and how a call is matched and answered.
//! - [`live`]: the live lane's mode and network (`apply|rerun`, `none|host`).
//! - [`run_state`]: the states of a run and which verbs each allows.
//! - [`promotion`]: what may never be promoted, the one rule the verdict and
//!   the live lane's planner both call.

pub mod change;
pub mod decision;
pub mod evidence;
pub mod live;
pub mod promotion;
pub mod report;
pub mod run_state;
pub mod stubs;
pub mod text;

pub use change::{Change, ChangeKind, FileType};
pub use decision::{Decision, Finding};
pub use evidence::{Blocked, BlockedKind, LimitHit, StepOutcome};
pub use live::{LiveMode, LiveNetwork};
pub use promotion::Refusal;
pub use report::{HostReport, RehearsalReport};
pub use run_state::RunState;
