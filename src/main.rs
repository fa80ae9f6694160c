//! `dryrun` binary: dispatch to the sandbox helper before anything else runs
//! (no threads, no runtime), else the CLI.
//!
//! This is the binary's edge, and the one place besides the engine that
//! names the sandbox: the helper, the stub program and the workspace agent
//! are this same binary started with a hidden first argument.
#![deny(unsafe_code)]

fn main() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == dryrun::sandbox::HELPER_ARG)
    {
        dryrun::sandbox::run_helper();
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == dryrun::workspace::AGENT_ARG)
    {
        dryrun::workspace::run_workspace_agent();
    }
    if std::env::args_os().nth(1).is_some_and(|a| {
        a.to_string_lossy()
            .starts_with(dryrun::sandbox::STUB_ARG_PREFIX)
    }) {
        dryrun::sandbox::run_stub(std::env::args_os().collect());
    }
    if std::env::var_os("DRYRUN_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("DRYRUN_LOG"))
            .with_writer(std::io::stderr)
            .init();
    }
    std::process::exit(dryrun::cli::main_with_args());
}
