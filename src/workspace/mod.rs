//! The workspace on the host side: paths and intent globs, the owner's
//! session (every host-side read and write of workspace content) and the
//! live lane's apply and rollback. The evidence walk over the overlay's
//! upper layer runs in the sandbox helper and lives in `sandbox::walk`;
//! text diffs of a run's kept content are `engine::textdiff`.

pub mod apply;
pub mod owner;
pub mod paths;
