//! dryrun: a dry-run lane for shell commands proposed by AI agents.
//!
//! Modules follow the pipeline, and imports point down it: `model` (pure
//! data and rules, at the bottom) → `errtext`, `workspace` (host-side file
//! access), `policy`, `envelope` → `classify` → `sandbox` (a leaf only the
//! engine uses) → `verdict`, `redact`, `state_file`, `journal`, `record` →
//! `engine` → `daemon` → `cli`. Only `sandbox` may use `unsafe`. `tests/structure.rs`
//! keeps the graph free of cycles; `docs/design.md` has the module map.
//!
//! Visibility: modules and items are `pub(crate)` unless the binary
//! (`main.rs`), the integration tests or the benches need them, and
//! `unreachable_pub` keeps it so; `engine`, `daemon` and `cli` are exempt
//! until their restructuring lands (see `docs/design.md`).
#![deny(unsafe_code)]
#![warn(unreachable_pub)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// mimalloc: the classifier and the evidence walk allocate many small
/// strings; the system allocator was a quarter of classification time.
/// Declared by the `dryrun` binary, not here: the stub interpreter's own
/// binary keeps the C library's allocator (mimalloc's first arena is about
/// a hundred page faults of a call that allocates a few kilobytes).
#[cfg(test)]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// Public: the classifier tests and benches call it.
pub mod classify;
// Public: the binary's `main`; the daemon tests use `cli::client::Client`.
pub(crate) mod caller_env;
#[allow(unreachable_pub)]
pub mod cli;
// Public: the daemon tests check `daemon::ROUTES` against docs/openapi.yaml.
#[allow(unreachable_pub)]
pub mod daemon;
#[allow(unreachable_pub)]
pub(crate) mod doors;
#[allow(unreachable_pub)]
pub(crate) mod egress;
#[allow(unreachable_pub)]
pub(crate) mod engine;
pub(crate) mod envelope;
pub(crate) mod errtext;
#[allow(unreachable_pub)]
pub(crate) mod fleet;
/// The fleet config as the daemon loads it: the Kubernetes manifests' test
/// loads the fleet Secret's config with it.
pub use fleet::config::FleetSpec;
pub(crate) mod journal;
pub(crate) mod model;
// Public: the classifier tests and benches build policies.
pub mod policy;
pub(crate) mod record;
pub(crate) mod redact;
#[allow(unreachable_pub)]
pub(crate) mod request;
pub(crate) mod state_file;
// Public: the binary's edge dispatches to the helper and stub programs.
#[allow(unsafe_code)]
pub mod sandbox;
pub(crate) mod verdict;
// Public: the binary's edge dispatches to the workspace agent.
pub mod workspace;

/// With `DRYRUN_PHASES` set, print `phase LABEL MONOTONIC_US` on stderr:
/// where a process's time goes, for `benches/` and profiling. Nothing
/// otherwise (one load of a cached flag).
pub fn phase(label: &str) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("DRYRUN_PHASES").is_some()) {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
            .unwrap_or(0);
        eprintln!("phase {label} {t}");
    }
}

/// End the process with `code` once what it printed is out: stdout and
/// stderr flushed, then `_exit`, without the C library's exit handlers
/// (the allocator's end-of-process collection of every heap, about half a
/// millisecond of a short command such as a hook's). Rust runs no
/// destructors at `std::process::exit` either; nothing of dryrun's needs
/// an exit handler.
pub fn exit_at_once(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().lock().flush();
    let _ = std::io::stderr().lock().flush();
    sandbox::exit_process_now(code)
}
