//! The workspace on the host side: paths and intent globs, the owner's
//! session (every host-side read and write of workspace content) and the
//! live lane's apply and rollback. The evidence walk over the overlay's
//! upper layer runs in the sandbox helper and lives in `sandbox::walk`;
//! text diffs of a run's kept content are `engine::textdiff`.

pub(crate) mod apply;
pub(crate) mod durable;
mod meta;
pub(crate) mod owner;
pub(crate) mod paths;

/// The binary's edge: `main.rs` dispatches to the workspace agent (the
/// process acting with the workspace owner's credentials) by its first
/// argument.
pub use owner::{AGENT_ARG, run_forked_workspace_agent, run_workspace_agent};
pub use paths::{HostOpen, install_host_open};
