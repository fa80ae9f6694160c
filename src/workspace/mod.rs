//! The workspace side of a rehearsal: paths and intent globs, the evidence
//! walk over the overlay's upper layer, and text diffs of a run's changes.

pub mod apply;
pub mod diff;
pub mod owner;
pub mod paths;
pub mod textdiff;
