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
pub mod doors;
pub mod engine;
pub mod envelope;
pub mod errtext;
pub mod journal;
pub mod model;
pub mod policy;
pub mod record;
pub mod redact;
#[allow(unsafe_code)]
pub mod sandbox;
pub mod verdict;
pub mod workspace;
