//! dryrun: a dry-run lane for shell commands proposed by AI agents.
//!
//! Modules follow the pipeline: `model` (pure data and rules, at the
//! bottom) → `envelope` → `sandbox` (rehearse) → `workspace` (evidence) →
//! `verdict` → `engine` (which ties them together) → `cli`. Only `sandbox`
//! may use `unsafe`. See `docs/design.md` for the module map.
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// mimalloc: the classifier and the evidence walk allocate many small
/// strings; the system allocator was a quarter of classification time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod classify;
pub mod cli;
pub mod daemon;
pub(crate) mod engine;
pub(crate) mod envelope;
pub(crate) mod errtext;
pub(crate) mod journal;
pub(crate) mod model;
pub mod policy;
pub(crate) mod record;
pub(crate) mod redact;
#[allow(unsafe_code)]
pub mod sandbox;
pub(crate) mod verdict;
pub mod workspace;
