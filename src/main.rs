//! `dryrun` binary: dispatch to the sandbox helper before anything else runs
//! (no threads, no runtime), else the CLI.
//!
//! This is the binary's edge, and the one place besides the engine that
//! names the sandbox: the helper, the resident helper, the stub program and
//! the workspace agent are this same binary started with a hidden first
//! argument.
#![deny(unsafe_code)]

/// mimalloc: the classifier and the evidence walk allocate many small
/// strings; the system allocator was a quarter of classification time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Every host look of the workspace goes through the view's resolver.
    dryrun::workspace::install_host_open(dryrun::sandbox::host_open);
    dryrun::phase("main");
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == dryrun::sandbox::HELPER_ARG)
    {
        dryrun::sandbox::run_helper();
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == dryrun::sandbox::RESIDENT_ARG)
    {
        dryrun::sandbox::run_resident_helper(
            std::env::args_os().collect(),
            dryrun::workspace::run_forked_workspace_agent,
        );
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
    if let Some(spec) = std::env::var_os("DRYRUN_LOG") {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        // `DRYRUN_LOG=debug`, `DRYRUN_LOG=warn,dryrun::engine=trace`: a
        // default level and levels per target. (Not `EnvFilter`: its
        // feature makes every regex in the process build a full DFA.)
        let spec = spec.to_string_lossy();
        let filter = spec
            .parse::<tracing_subscriber::filter::Targets>()
            .unwrap_or_else(|e| {
                eprintln!("dryrun: DRYRUN_LOG={spec:?} is not a log filter ({e}); logging at info");
                tracing_subscriber::filter::Targets::new()
                    .with_default(tracing_subscriber::filter::LevelFilter::INFO)
            });
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .finish()
            .with(filter)
            .init();
    }
    let code = dryrun::cli::main_with_args();
    dryrun::phase("exit");
    dryrun::exit_at_once(code);
}
