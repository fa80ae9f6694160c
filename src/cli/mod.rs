//! The `dryrun` command line. Parses arguments, builds an envelope, and hands
//! it to the engine; renders the result.

mod render;

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::engine::{Engine, EngineError, EngineOptions, default_state_dir};
use crate::envelope::{self, Envelope, EnvelopeError, Mode};
use crate::record::RunState;

/// Exit codes (SPEC §3).
pub const EXIT_INTERNAL: i32 = 1;
pub const EXIT_INVALID: i32 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "dryrun",
    version,
    about = "Rehearse shell commands in a sandbox, compare what they did with what they declared, then promote",
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalOpts,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug, Clone)]
pub struct GlobalOpts {
    /// Daemon socket (also DRYRUN_SOCKET). The daemon is not part of this
    /// version: the engine always runs in-process.
    #[arg(long, global = true, env = "DRYRUN_SOCKET", hide_env_values = true)]
    socket: Option<PathBuf>,
    /// State directory of the in-process engine (also DRYRUN_STATE_DIR).
    #[arg(long, global = true, env = "DRYRUN_STATE_DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Rehearse a command in the sandbox and judge it against its intent.
    Execute(ExecuteArgs),
    /// Score a shell command's risk from a real parse, without running it.
    Classify {
        /// The shell string (as `bash -c` would run it).
        command: String,
        /// Workspace (for "outside the workspace" and its policy file).
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// List runs, newest first.
    Runs {
        /// Only runs in this state (rehearsed, awaiting_approval, approved,
        /// rejected, promoted, failed).
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show a run's record.
    Show {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Show a run's changes as unified diffs.
    Diff {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct ExecuteArgs {
    /// A task from dryrun.yaml at the workspace root.
    #[arg(long, conflicts_with_all = ["file", "command"])]
    task: Option<String>,
    /// An envelope file (YAML or JSON; `-` for stdin).
    #[arg(long, conflicts_with = "command")]
    file: Option<PathBuf>,
    /// A shell string, run by `bash -c`.
    #[arg(long)]
    command: Option<String>,
    /// The workspace (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// A path glob the command is expected to write (repeatable).
    #[arg(long = "expect-write", value_name = "GLOB")]
    expect_write: Vec<String>,
    /// A path glob the command must never touch (repeatable).
    #[arg(long = "forbid", value_name = "GLOB")]
    forbid: Vec<String>,
    /// Declare the run read-only: any write blocks it.
    #[arg(long)]
    read_only: bool,
    /// Wall-clock limit in seconds.
    #[arg(long, value_name = "S")]
    timeout: Option<u64>,
    /// Print the run record as one JSON object.
    #[arg(long)]
    json: bool,
    /// Run the engine in-process even if a daemon socket exists.
    #[arg(long)]
    local: bool,
    /// Rehearse even when the kernel's Landlock is below the minimum ABI.
    #[arg(long)]
    allow_degraded_sandbox: bool,
}

/// Parse and run; returns the process exit code.
pub fn main_with_args() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_INVALID } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    run(cli)
}

fn state_dir(g: &GlobalOpts) -> PathBuf {
    g.state_dir.clone().unwrap_or_else(default_state_dir)
}

fn open_engine(g: &GlobalOpts, allow_degraded: bool) -> Result<Engine, EngineError> {
    let mut opts = EngineOptions::default();
    opts.allow_degraded |= allow_degraded;
    Engine::open(&state_dir(g), opts)
}

fn usage_error(msg: impl std::fmt::Display) -> i32 {
    eprintln!("dryrun: {msg}");
    EXIT_INVALID
}

fn engine_error(e: EngineError) -> i32 {
    eprintln!("dryrun: {e}");
    if e.is_invalid_input() {
        EXIT_INVALID
    } else {
        EXIT_INTERNAL
    }
}

fn run(cli: Cli) -> i32 {
    if cli.global.socket.is_some() {
        tracing::debug!("a daemon socket was given; this version always runs in-process");
    }
    match cli.cmd {
        Cmd::Execute(a) => execute(&cli.global, a),
        Cmd::Classify {
            command,
            workspace,
            json,
        } => classify(command, workspace, json),
        Cmd::Runs { state, json } => {
            let filter = match state.as_deref().map(|s| (s, RunState::parse(s))) {
                None => None,
                Some((_, Some(s))) => Some(s),
                Some((s, None)) => {
                    return usage_error(format!(
                        "--state {s:?} is not a run state; use rehearsed, awaiting_approval, approved, rejected, promoted or failed"
                    ));
                }
            };
            let engine = match open_engine(&cli.global, false) {
                Ok(e) => e,
                Err(e) => return engine_error(e),
            };
            match engine.list(filter) {
                Ok(runs) => {
                    if json {
                        println!("{}", serde_json::to_string(&runs).expect("serializes"));
                    } else {
                        render::print_run_list(&runs);
                    }
                    0
                }
                Err(e) => engine_error(e),
            }
        }
        Cmd::Show { run_id, json } => {
            let engine = match open_engine(&cli.global, false) {
                Ok(e) => e,
                Err(e) => return engine_error(e),
            };
            match engine.get(&run_id) {
                Ok(r) => {
                    if json {
                        println!("{}", serde_json::to_string(&r).expect("serializes"));
                    } else {
                        render::print_evidence(&r);
                    }
                    0
                }
                Err(e) => engine_error(e),
            }
        }
        Cmd::Diff { run_id, json } => {
            let engine = match open_engine(&cli.global, false) {
                Ok(e) => e,
                Err(e) => return engine_error(e),
            };
            match engine.get(&run_id) {
                Ok(r) => {
                    let d = crate::workspace::textdiff::run_diff(&engine, &r);
                    if json {
                        println!("{}", serde_json::to_string(&d).expect("serializes"));
                    } else {
                        render::print_diff(&d);
                    }
                    0
                }
                Err(e) => engine_error(e),
            }
        }
    }
}

/// `dryrun classify`: exit 0 when no approval is needed, 3 when it is, 4
/// when the classifier alone blocks, 2 on invalid input.
fn classify(command: String, workspace: Option<PathBuf>, json: bool) -> i32 {
    if command.trim().is_empty() {
        return usage_error("the command to classify is empty");
    }
    let ws = workspace
        .or_else(|| std::env::current_dir().ok())
        .and_then(|w| std::fs::canonicalize(w).ok());
    let policy = match crate::policy::Policy::load(
        Path::new(crate::engine::SYSTEM_POLICY_DIR),
        ws.as_deref(),
    ) {
        Ok(p) => p,
        Err(e) => return usage_error(e),
    };
    let c = crate::classify::classify(
        &command,
        &policy,
        &crate::classify::Options {
            workspace: ws,
            is_step: false,
        },
    );
    if json {
        println!("{}", serde_json::to_string(&c).expect("serializes"));
    } else {
        render::print_classification(&command, &c);
    }
    c.decision.exit_code()
}

fn read_envelope_file(path: &Path) -> Result<Envelope, EnvelopeError> {
    let (name, text) = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .take(4 << 20)
            .read_to_string(&mut s)
            .map_err(|source| EnvelopeError::Read {
                path: path.into(),
                source,
            })?;
        ("<stdin>".to_string(), s)
    } else {
        let s = std::fs::read_to_string(path).map_err(|source| EnvelopeError::Read {
            path: path.into(),
            source,
        })?;
        (path.display().to_string(), s)
    };
    envelope::parse_envelope(&name, &text)
}

fn execute(g: &GlobalOpts, a: ExecuteArgs) -> i32 {
    let cwd = match std::env::current_dir() {
        Ok(c) => c,
        Err(e) => return usage_error(format!("cannot read the current directory: {e}")),
    };
    let workspace = match &a.workspace {
        Some(w) if w.is_absolute() => w.clone(),
        Some(w) => cwd.join(w),
        None => cwd.clone(),
    };
    let loaded: Result<Envelope, EnvelopeError> = if let Some(t) = &a.task {
        envelope::load_task(&workspace, t)
    } else if let Some(f) = &a.file {
        read_envelope_file(f).map(|mut e| {
            if e.working_dir.is_none() && a.workspace.is_some() {
                e.working_dir = Some(workspace.clone());
            }
            e
        })
    } else if let Some(c) = &a.command {
        Ok(Envelope {
            command: Some(c.clone()),
            working_dir: Some(workspace.clone()),
            ..Default::default()
        })
    } else {
        return usage_error("give --task NAME, --file ENVELOPE or --command 'SHELL STRING'");
    };
    let mut env = match loaded {
        Ok(e) => e,
        Err(e) => return usage_error(e),
    };
    env.intent
        .expected_writes
        .extend(a.expect_write.iter().cloned());
    env.intent.forbidden_paths.extend(a.forbid.iter().cloned());
    if a.read_only {
        env.intent.mode = Mode::ReadOnly;
    }
    if let Some(t) = a.timeout {
        env.limits.timeout_s = Some(t);
    }
    let spec = match env.validate(Some(&workspace)) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    let engine = match open_engine(g, a.allow_degraded_sandbox) {
        Ok(e) => e,
        Err(e) => return engine_error(e),
    };
    let record = match engine.execute(&spec) {
        Ok(r) => r,
        Err(e) => return engine_error(e),
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&record).expect("records serialize")
        );
    } else {
        render::print_evidence(&record);
    }
    match (&record.state, &record.verdict) {
        (RunState::Failed, _) => {
            if !a.json {
                eprintln!(
                    "dryrun: the rehearsal could not run: {}",
                    record.error.as_deref().unwrap_or("unknown error")
                );
            }
            EXIT_INTERNAL
        }
        (_, Some(v)) => v.decision.exit_code(),
        (_, None) => EXIT_INTERNAL,
    }
}
