//! The `dryrun` command line. Parses arguments, builds an envelope, and hands
//! it to the engine; renders the result.

pub mod client;
mod render;

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::daemon::routes;
use crate::engine::{
    Engine, EngineError, EngineOptions, ReviewAction, ReviewerAuth, default_state_dir,
};
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
    /// Daemon socket (also DRYRUN_SOCKET). Without it, the default socket is
    /// used when a daemon listens there, else the engine runs in-process.
    /// For `dryrun daemon`: where to listen.
    #[arg(long, global = true, env = "DRYRUN_SOCKET", hide_env_values = true)]
    socket: Option<PathBuf>,
    /// State directory of the in-process engine or of the daemon (also
    /// DRYRUN_STATE_DIR).
    #[arg(long, global = true, env = "DRYRUN_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Run the engine in-process even if a daemon is listening (also DRYRUN_LOCAL=1).
    #[arg(long, global = true, env = "DRYRUN_LOCAL", value_parser = clap::builder::BoolishValueParser::new())]
    local: bool,
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
    /// Show a run's changes as unified diffs; with a second run, what
    /// differs between the two runs.
    Diff {
        run_id: String,
        /// Compare with this run: changes, exit status, output.
        other: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Approve a run awaiting approval (a reviewer; never its submitter).
    Approve {
        run_id: String,
        /// Why (journaled with your identity).
        #[arg(long)]
        note: Option<String>,
        /// Approve a run whose verdict was `blocked` (journaled as an override).
        #[arg(long = "override")]
        override_block: bool,
        #[arg(long)]
        json: bool,
    },
    /// Reject a run (a reviewer, or its submitter withdrawing it).
    Reject {
        run_id: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Carry out a promotable (or approved) run: apply its reviewed change
    /// set to the real workspace, with a receipt in the journal.
    Promote {
        run_id: String,
        #[arg(long)]
        json: bool,
        /// After promoting, print the rehearsal's stdout and stderr and exit
        /// with its status (the form an agent-host hook rewrites a command to).
        #[arg(long)]
        replay_output: bool,
        /// The single-use token of an approval given in the agent host's
        /// prompt (issued by `dryrun hook` for this run only).
        #[arg(long, value_name = "TOKEN")]
        host_prompt_token: Option<String>,
        /// Wait up to S seconds for a reviewer's approval first.
        #[arg(long, value_name = "S")]
        await_approval: Option<u64>,
    },
    /// Undo a promotion: restore what it replaced, if nothing changed since.
    Rollback {
        receipt_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Receipts of promotions.
    Receipt {
        #[command(subcommand)]
        cmd: ReceiptCmd,
    },
    /// Cancel a queued or running rehearsal (daemon only).
    Cancel {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// The hash-chained journal.
    Journal {
        #[command(subcommand)]
        cmd: JournalCmd,
    },
    /// Serve the API on a Unix socket (SPEC §6).
    Daemon(DaemonArgs),
    /// Agent-host hook: a tool-call event as JSON on stdin, the answer as
    /// JSON on stdout (exit 2 blocks). See README, Doors.
    Hook {
        #[arg(value_enum)]
        host: HookHost,
    },
    /// MCP server on stdio: execute, classify, show, diff, list_runs, wait,
    /// promote (no approvals). See README, Doors.
    Mcp,
    /// Rehearse a recorded run again, answering its stubbed tool calls from
    /// the recording (against today's workspace, a changed command, or
    /// changed answers).
    Replay {
        run_id: String,
        /// Replay with this envelope instead of the recorded one (its
        /// working_dir defaults to the recorded run's).
        #[arg(long, value_name = "ENVELOPE")]
        file: Option<PathBuf>,
        /// Replay this command instead of the recorded one.
        #[arg(long)]
        command: Option<String>,
        /// Replace a tool's answer (counterfactual), e.g. 'gh pr merge=exit 1'.
        #[arg(
            long = "stub",
            value_name = "TOOL [WORDS]=exit N[; stdout=T][; stderr=T]"
        )]
        stub: Vec<String>,
        /// A call the recording never saw: strict (the replay fails naming
        /// it), stub (the default stub's answer), fuzzy (the nearest
        /// recorded call of the same tool).
        #[arg(long, default_value = "stub", value_parser = ["strict", "stub", "fuzzy"])]
        novel: String,
        #[arg(long)]
        json: bool,
    },
}

/// The agent hosts `dryrun hook` speaks to.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum HookHost {
    ClaudeCode,
    Codex,
}

#[derive(Subcommand, Debug)]
enum ReceiptCmd {
    /// Print a receipt.
    Show {
        receipt_id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum JournalCmd {
    /// Walk the chain; name the first bad record. Exit 0 when intact, 5 when not.
    Verify {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct DaemonArgs {
    /// Group allowed to connect (the socket is mode 0660).
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// Group whose members (and root) may approve and reject.
    #[arg(long, value_name = "GROUP", default_value = "dryrun-approvers")]
    approver_group: String,
    /// Rehearsals at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    max_running: Option<usize>,
    /// Submissions waiting beyond those; past it, 429 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_queued: usize,
    /// Largest request body accepted.
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    max_body_kb: usize,
    /// Seconds running rehearsals get to finish at shutdown before they are cancelled.
    #[arg(long, value_name = "S", default_value_t = 30)]
    shutdown_grace: u64,
    /// Risk points each client uid may spend per window (0: no budget).
    #[arg(long, value_name = "POINTS", default_value_t = 1000)]
    budget_points: u64,
    /// The budget's sliding window.
    #[arg(long, value_name = "S", default_value_t = 3600)]
    budget_window: u64,
    /// Rehearse even when the kernel's Landlock is below the minimum ABI.
    #[arg(long)]
    allow_degraded_sandbox: bool,
    /// Ceiling of limits.timeout_s; a run asking for more is refused (400).
    #[arg(long, value_name = "S", default_value_t = crate::envelope::DEFAULT_CEILINGS.timeout_s)]
    max_timeout_s: u64,
    /// Ceiling of limits.memory_mb.
    #[arg(long, value_name = "MIB", default_value_t = crate::envelope::DEFAULT_CEILINGS.memory_mb)]
    max_memory_mb: u64,
    /// Ceiling of limits.pids.
    #[arg(long, value_name = "N", default_value_t = crate::envelope::DEFAULT_CEILINGS.pids)]
    max_pids: u64,
    /// Ceiling of limits.output_kb.
    #[arg(long, value_name = "KIB", default_value_t = crate::envelope::DEFAULT_CEILINGS.output_kb)]
    max_output_kb: u64,
    /// Ceiling of limits.disk_mb (also bounds what one run keeps).
    #[arg(long, value_name = "MIB", default_value_t = crate::envelope::DEFAULT_CEILINGS.disk_mb)]
    max_disk_mb: u64,
    /// Records and kept content each client uid may keep in the state
    /// directory; past it, submissions are refused (507). 0: no quota.
    #[arg(long, value_name = "MIB", default_value_t = crate::engine::DEFAULT_QUOTA_PER_UID_BYTES >> 20)]
    quota_per_uid_mb: u64,
    /// Days the kept content of runs not awaiting approval is kept.
    #[arg(long, value_name = "DAYS")]
    blob_retention_days: Option<u64>,
    /// Days the records of finished runs are kept.
    #[arg(long, value_name = "DAYS")]
    record_retention_days: Option<u64>,
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
    /// Rehearse even when the kernel's Landlock is below the minimum ABI.
    #[arg(long)]
    allow_degraded_sandbox: bool,
    /// Replace a tool's answer for this run, e.g. 'gh pr merge=exit 1' or
    /// 'curl=exit 22; stderr=curl: (22) 500' (repeatable; see README, stubs).
    #[arg(
        long = "stub",
        value_name = "TOOL [WORDS]=exit N[; stdout=T][; stderr=T]"
    )]
    stub: Vec<String>,
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

/// Where a subcommand's work happens: a daemon, or this process.
enum Door {
    Daemon(client::Client),
    Local,
}

/// `--local` → in-process; an explicit socket → that daemon (an error if it
/// is not there); else the default socket when a daemon answers on it; else
/// in-process.
fn door(g: &GlobalOpts) -> Door {
    if g.local {
        return Door::Local;
    }
    if let Some(s) = &g.socket {
        return Door::Daemon(client::Client::new(s));
    }
    let mut candidates = Vec::new();
    if !nix::unistd::geteuid().is_root()
        && let Some(u) = crate::daemon::user_socket()
    {
        candidates.push(u);
    }
    candidates.push(PathBuf::from("/run/dryrun/dryrun.sock"));
    for c in candidates {
        if c.exists() {
            if client::Client::reachable(&c) {
                return Door::Daemon(client::Client::new(&c));
            }
            tracing::info!(
                "{} exists but nobody answers; running in-process",
                c.display()
            );
        }
    }
    Door::Local
}

/// Where the doors (`hook`, `mcp`, a hook's `promote`) send requests: the
/// same choice as every other subcommand.
fn doors_target(g: &GlobalOpts) -> crate::doors::Target {
    match door(g) {
        Door::Daemon(c) => crate::doors::Target::Daemon(c.socket().to_path_buf()),
        Door::Local => crate::doors::Target::Local(state_dir(g)),
    }
}

fn client_error(e: client::ClientError) -> i32 {
    eprintln!("dryrun: {e}");
    if e.is_invalid_input() {
        EXIT_INVALID
    } else {
        EXIT_INTERNAL
    }
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string(v).expect("serializes"));
}

/// Exit code of `dryrun journal verify` when the chain is broken.
pub const EXIT_JOURNAL_BROKEN: i32 = 5;

fn run(cli: Cli) -> i32 {
    let g = cli.global.clone();
    match cli.cmd {
        Cmd::Execute(a) => execute(&g, a),
        Cmd::Classify {
            command,
            workspace,
            json,
        } => classify(command, workspace, json),
        Cmd::Daemon(a) => daemon(&g, a),
        Cmd::Replay {
            run_id,
            file,
            command,
            stub,
            novel,
            json,
        } => {
            let envelope = match file.as_deref().map(read_envelope_file).transpose() {
                Ok(e) => e,
                Err(e) => return usage_error(e),
            };
            replay(&g, run_id, envelope, command, stub, &novel, json)
        }
        Cmd::Runs { state, json } => {
            if let Some(s) = &state
                && RunState::parse(s).is_none()
            {
                return usage_error(format!(
                    "--state {s:?} is not a run state; use queued, running, rehearsed, awaiting_approval, approved, rejected, promoted or failed"
                ));
            }
            let runs = match door(&g) {
                Door::Daemon(c) => {
                    let path = match &state {
                        Some(s) => format!("{}?state={s}", routes::RUNS),
                        None => routes::RUNS.into(),
                    };
                    match c.call::<crate::daemon::RunList>("GET", &path, None) {
                        Ok(l) => l.runs,
                        Err(e) => return client_error(e),
                    }
                }
                Door::Local => {
                    let engine = match open_engine(&g, false) {
                        Ok(e) => e,
                        Err(e) => return engine_error(e),
                    };
                    match engine.list(state.as_deref().and_then(RunState::parse)) {
                        Ok(r) => r,
                        Err(e) => return engine_error(e),
                    }
                }
            };
            if json {
                print_json(&runs);
            } else {
                render::print_run_list(&runs);
            }
            0
        }
        Cmd::Show { run_id, json } => match fetch_run(&g, &run_id) {
            Ok(r) => {
                if json {
                    print_json(&r);
                } else {
                    render::print_evidence(&r);
                }
                0
            }
            Err(code) => code,
        },
        Cmd::Diff {
            run_id,
            other: Some(other),
            json,
        } => {
            let cmp = match door(&g) {
                Door::Daemon(c) => match c.call::<crate::engine::RunComparison>(
                    "GET",
                    &format!(
                        "{}?against={}",
                        routes::run_diff(&run_id),
                        routes::encode_id(&other)
                    ),
                    None,
                ) {
                    Ok(x) => x,
                    Err(e) => return client_error(e),
                },
                Door::Local => {
                    let pair =
                        open_engine(&g, false).and_then(|e| Ok((e.get(&run_id)?, e.get(&other)?)));
                    match pair {
                        Ok((a, b)) => crate::engine::compare_runs(&a, &b),
                        Err(e) => return engine_error(e),
                    }
                }
            };
            if json {
                print_json(&cmp);
            } else {
                render::print_comparison(&cmp);
            }
            0
        }
        Cmd::Diff {
            run_id,
            other: None,
            json,
        } => {
            let d = match door(&g) {
                Door::Daemon(c) => {
                    match c.call::<crate::workspace::textdiff::RunDiff>(
                        "GET",
                        &routes::run_diff(&run_id),
                        None,
                    ) {
                        Ok(d) => d,
                        Err(e) => return client_error(e),
                    }
                }
                Door::Local => {
                    let engine = match open_engine(&g, false) {
                        Ok(e) => e,
                        Err(e) => return engine_error(e),
                    };
                    match engine.get(&run_id) {
                        Ok(r) => crate::workspace::textdiff::run_diff(&engine, &r),
                        Err(e) => return engine_error(e),
                    }
                }
            };
            if json {
                print_json(&d);
            } else {
                render::print_diff(&d);
            }
            0
        }
        Cmd::Approve {
            run_id,
            note,
            override_block,
            json,
        } => review(
            &g,
            &run_id,
            ReviewAction::Approve,
            note.unwrap_or_default(),
            override_block,
            json,
        ),
        Cmd::Reject { run_id, note, json } => review(
            &g,
            &run_id,
            ReviewAction::Reject,
            note.unwrap_or_default(),
            false,
            json,
        ),
        Cmd::Promote {
            run_id,
            json,
            replay_output,
            host_prompt_token,
            await_approval,
        } if replay_output || host_prompt_token.is_some() || await_approval.is_some() => {
            crate::doors::promote::promote_for_host(
                &doors_target(&g),
                &run_id,
                &crate::doors::promote::PromoteOptions {
                    replay_output,
                    host_prompt_token,
                    await_approval_s: await_approval,
                },
                |r| show_promoted(r, json),
            )
        }
        Cmd::Hook { host } => crate::doors::hook::run_hook(
            match host {
                HookHost::ClaudeCode => crate::doors::hook::Host::ClaudeCode,
                HookHost::Codex => crate::doors::hook::Host::Codex,
            },
            doors_target(&g),
        ),
        Cmd::Mcp => crate::doors::mcp::run_mcp(doors_target(&g)),
        Cmd::Promote { run_id, json, .. } => {
            // Mode `rerun`: hand over the host variables the run's live:
            // section names, from this process's environment.
            let host_env =
                |r: &crate::record::RunRecord| -> std::collections::BTreeMap<String, String> {
                    r.live
                        .as_ref()
                        .filter(|l| l.mode == crate::record::LiveMode::Rerun)
                        .map(|l| {
                            l.env_from_host
                                .iter()
                                .filter_map(|n| std::env::var(n).ok().map(|v| (n.clone(), v)))
                                .collect()
                        })
                        .unwrap_or_default()
                };
            let r = match door(&g) {
                Door::Daemon(c) => {
                    let rec = match c.call::<crate::record::RunRecord>(
                        "GET",
                        &routes::run(&run_id),
                        None,
                    ) {
                        Ok(r) => r,
                        Err(e) => return live_error_client(e),
                    };
                    let body = serde_json::to_vec(&crate::daemon::PromoteBody {
                        env: host_env(&rec),
                        host_prompt_token: None,
                    })
                    .expect("serializes");
                    c.call::<crate::record::RunRecord>(
                        "POST",
                        &routes::run_promote(&run_id),
                        Some(body),
                    )
                }
                Door::Local => {
                    return match open_engine(&g, false).and_then(|e| {
                        let env = e.get(&run_id).map(|r| host_env(&r))?;
                        e.promote(
                            &run_id,
                            &crate::journal::Actor::local(),
                            &ReviewerAuth::LocalTtyConfirmed,
                            &env,
                        )
                    }) {
                        Ok(r) => {
                            show_promoted(&r, json);
                            0
                        }
                        Err(e) => live_error_engine(e),
                    };
                }
            };
            match r {
                Ok(r) => {
                    show_promoted(&r, json);
                    0
                }
                Err(e) => live_error_client(e),
            }
        }
        Cmd::Rollback { receipt_id, json } => {
            let r = match door(&g) {
                Door::Daemon(c) => c.call::<crate::engine::Receipt>(
                    "POST",
                    &routes::receipt_rollback(&receipt_id),
                    Some(b"{}".to_vec()),
                ),
                Door::Local => {
                    return match open_engine(&g, false).and_then(|e| {
                        e.rollback(
                            &receipt_id,
                            &crate::journal::Actor::local(),
                            &ReviewerAuth::LocalTtyConfirmed,
                        )
                    }) {
                        Ok(rc) => {
                            show_receipt(&rc, json);
                            0
                        }
                        Err(e) => live_error_engine(e),
                    };
                }
            };
            match r {
                Ok(rc) => {
                    show_receipt(&rc, json);
                    0
                }
                Err(e) => live_error_client(e),
            }
        }
        Cmd::Receipt {
            cmd: ReceiptCmd::Show { receipt_id, json },
        } => {
            let r = match door(&g) {
                Door::Daemon(c) => match c.call::<crate::engine::Receipt>(
                    "GET",
                    &routes::receipt(&receipt_id),
                    None,
                ) {
                    Ok(r) => r,
                    Err(e) => return client_error(e),
                },
                Door::Local => match open_engine(&g, false).and_then(|e| e.receipt(&receipt_id)) {
                    Ok(r) => r,
                    Err(e) => return engine_error(e),
                },
            };
            show_receipt(&r, json);
            0
        }
        Cmd::Cancel { run_id, json } => match door(&g) {
            Door::Daemon(c) => {
                match c.call::<crate::record::RunRecord>(
                    "POST",
                    &routes::run_cancel(&run_id),
                    Some(b"{}".to_vec()),
                ) {
                    Ok(r) => {
                        if json {
                            print_json(&r);
                        } else {
                            render::print_evidence(&r);
                        }
                        0
                    }
                    Err(e) => client_error(e),
                }
            }
            Door::Local => usage_error(
                "cancel talks to a daemon; a local rehearsal is cancelled with Ctrl-C (nothing is promoted)",
            ),
        },
        Cmd::Journal {
            cmd: JournalCmd::Verify { json },
        } => {
            let rep = match door(&g) {
                Door::Daemon(c) => {
                    match c.call::<crate::journal::VerifyReport>(
                        "GET",
                        routes::JOURNAL_VERIFY,
                        None,
                    ) {
                        Ok(r) => r,
                        Err(e) => return client_error(e),
                    }
                }
                Door::Local => {
                    // Verification only reads: no engine (and no recovery) needed.
                    let j = crate::journal::Journal::new(&state_dir(&g));
                    match j.verify() {
                        Ok(r) => r,
                        Err(e) => {
                            eprintln!("dryrun: {e}");
                            return EXIT_INTERNAL;
                        }
                    }
                }
            };
            if json {
                print_json(&rep);
            } else {
                render::print_journal_report(&rep);
            }
            if rep.ok { 0 } else { EXIT_JOURNAL_BROKEN }
        }
    }
}

/// Exit code of `promote` / `rollback` when refused (drift, a change set
/// that must not go live, a run in the wrong state).
pub const EXIT_REFUSED: i32 = 4;

fn show_promoted(r: &crate::record::RunRecord, json: bool) {
    if json {
        print_json(r);
        return;
    }
    match &r.receipt {
        Some(rc) => render::print_receipt(rc),
        None => render::print_evidence(r),
    }
}

fn show_receipt(rc: &crate::engine::Receipt, json: bool) {
    if json {
        print_json(rc);
    } else {
        render::print_receipt(rc);
    }
}

fn live_error_engine(e: EngineError) -> i32 {
    eprintln!("dryrun: {e}");
    match e {
        EngineError::Drift(_) | EngineError::Conflict(_) => EXIT_REFUSED,
        e if e.is_invalid_input() => EXIT_INVALID,
        _ => EXIT_INTERNAL,
    }
}

fn live_error_client(e: client::ClientError) -> i32 {
    eprintln!("dryrun: {e}");
    match &e {
        client::ClientError::Api { status: 409, .. } => EXIT_REFUSED,
        e if e.is_invalid_input() => EXIT_INVALID,
        _ => EXIT_INTERNAL,
    }
}

fn fetch_run(g: &GlobalOpts, run_id: &str) -> Result<crate::record::RunRecord, i32> {
    match door(g) {
        Door::Daemon(c) => c
            .call("GET", &routes::run(run_id), None)
            .map_err(client_error),
        Door::Local => {
            let engine = open_engine(g, false).map_err(engine_error)?;
            engine.get(run_id).map_err(engine_error)
        }
    }
}

fn review(
    g: &GlobalOpts,
    run_id: &str,
    action: ReviewAction,
    note: String,
    override_block: bool,
    json: bool,
) -> i32 {
    let path = match action {
        ReviewAction::Approve => routes::run_approve(run_id),
        ReviewAction::Reject => routes::run_reject(run_id),
    };
    let record = match door(g) {
        Door::Daemon(c) => {
            let body = serde_json::to_vec(&crate::daemon::ReviewBody {
                note,
                override_block,
            })
            .expect("serializes");
            match c.call::<crate::record::RunRecord>("POST", &path, Some(body)) {
                Ok(r) => r,
                Err(e) => return client_error(e),
            }
        }
        Door::Local => {
            let dir = review_state_dir(g);
            if let Err(msg) = act_as_state_dir_owner(&dir) {
                return usage_error(msg);
            }
            let engine = match Engine::open(&dir, EngineOptions::default()) {
                Ok(e) => e,
                Err(e) => return engine_error(e),
            };
            let r = match engine.get(run_id) {
                Ok(r) => r,
                Err(e) => return engine_error(e),
            };
            // Refused before any prompt: the same uid never approves.
            if action == ReviewAction::Approve
                && let Err(e) = crate::engine::refuse_self_approval(
                    &r,
                    &crate::journal::Actor::local(),
                    &ReviewerAuth::LocalTtyConfirmed,
                )
            {
                return engine_error(e);
            }
            if action == ReviewAction::Approve
                && let Err(msg) = confirm_on_terminal(&r, override_block)
            {
                return usage_error(msg);
            }
            match engine.review(
                run_id,
                &crate::journal::Actor::local(),
                &ReviewerAuth::LocalTtyConfirmed,
                action,
                &note,
                override_block,
            ) {
                Ok(r) => r,
                Err(e) => return engine_error(e),
            }
        }
    };
    if json {
        print_json(&record);
    } else {
        render::print_evidence(&record);
    }
    0
}

/// The state directory a local review works on. `sudo dryrun approve ID`
/// (root, started by sudo, no directory named): the invoking user's
/// default state directory, where their local runs wait.
fn review_state_dir(g: &GlobalOpts) -> PathBuf {
    if g.state_dir.is_none()
        && nix::unistd::geteuid().is_root()
        && let Some(uid) = std::env::var("SUDO_UID")
            .ok()
            .and_then(|u| u.parse::<u32>().ok())
            .filter(|u| *u != 0)
        && let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
    {
        return user.dir.join(".local/state/dryrun");
    }
    state_dir(g)
}

/// Root reviewing in another user's state directory (`sudo dryrun approve`)
/// reads and writes it with that owner's filesystem credentials and no
/// supplementary groups: a link the owner planted there (a record's
/// temporary file, the journal) cannot turn root's writes onto a file the
/// owner could not write itself. The approval is still root's (the actor
/// is the effective uid).
fn act_as_state_dir_owner(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let Ok(m) = std::fs::metadata(dir) else {
        return Ok(());
    };
    if m.uid() == 0 {
        return Ok(());
    }
    let (uid, gid) = (
        nix::unistd::Uid::from_raw(m.uid()),
        nix::unistd::Gid::from_raw(m.gid()),
    );
    nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    nix::unistd::setfsgid(gid);
    nix::unistd::setfsuid(uid);
    // setfsuid reports no error: the second call answers the current value.
    if nix::unistd::setfsuid(uid) != uid || nix::unistd::setfsgid(gid) != gid {
        return Err(format!(
            "could not take the filesystem identity of {}'s owner (uid {})",
            dir.display(),
            m.uid()
        ));
    }
    Ok(())
}

/// Local mode has no second identity: the person proves they are at the
/// terminal by typing back a code printed on it. An agent that pipes `yes`
/// (or anything) into stdin has no terminal to read the code from.
fn confirm_on_terminal(r: &crate::record::RunRecord, override_block: bool) -> Result<(), String> {
    use std::io::{BufRead, IsTerminal, Write};
    const NO_TTY: &str = "a local approval must be typed at an interactive terminal (stdin and /dev/tty), \
        by a user other than the submitter (`sudo dryrun approve`, or the daemon with an approver group; see README, Approvals)";
    if !std::io::stdin().is_terminal() {
        return Err(NO_TTY.into());
    }
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|_| NO_TTY.to_string())?;
    const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
    let mut raw = [0u8; 6];
    getrandom::fill(&mut raw).map_err(|e| e.to_string())?;
    let code: String = raw
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    let mut w = &tty;
    let decision = r
        .verdict
        .as_ref()
        .map(|v| v.decision.as_str())
        .unwrap_or("-");
    let _ = writeln!(
        w,
        "approve run {} ({}; decision {decision}{})\ncommand: {}\ntype this code to confirm: {code}",
        r.run_id,
        r.state.as_str(),
        if override_block {
            ", overriding the block"
        } else {
            ""
        },
        render::esc(&r.command)
    );
    let _ = write!(w, "> ");
    let _ = w.flush();
    let mut line = String::new();
    std::io::BufReader::new(&tty)
        .take(256)
        .read_line(&mut line)
        .map_err(|e| format!("reading the confirmation from /dev/tty: {e}"))?;
    if line.trim().eq_ignore_ascii_case(&code) {
        Ok(())
    } else {
        Err("the confirmation code did not match; nothing was approved".into())
    }
}

fn daemon(g: &GlobalOpts, a: DaemonArgs) -> i32 {
    // A long-lived process: have the allocator hand freed memory back to the
    // kernel at once (its default delay keeps ~40 MB of rehearsal-time
    // garbage resident). mimalloc reads this before main, so re-exec once;
    // a systemd socket-activation fd and LISTEN_PID survive the exec.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        use std::os::unix::process::CommandExt;
        let err = std::process::Command::new(
            std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into()),
        )
        .args(std::env::args_os().skip(1))
        .env("MIMALLOC_PURGE_DELAY", "0")
        .exec();
        tracing::warn!("could not re-exec with MIMALLOC_PURGE_DELAY=0: {err}");
    }
    let socket = g
        .socket
        .clone()
        .unwrap_or_else(crate::daemon::default_socket);
    let mut cfg = crate::daemon::DaemonConfig::new(socket, state_dir(g));
    cfg.socket_group = a.socket_group;
    cfg.approver_group = a.approver_group;
    if let Some(n) = a.max_running {
        if n == 0 {
            return usage_error("--max-running must be at least 1");
        }
        cfg.max_running = n;
    }
    cfg.max_queued = a.max_queued;
    cfg.max_body_bytes = a.max_body_kb.max(1) << 10;
    cfg.shutdown_grace = std::time::Duration::from_secs(a.shutdown_grace);
    cfg.budget = (a.budget_points > 0).then_some(crate::policy::budget::BudgetConfig {
        points: a.budget_points,
        window_s: a.budget_window.max(1),
    });
    cfg.allow_degraded = a.allow_degraded_sandbox;
    cfg.ceilings = crate::envelope::LimitsSpec {
        timeout_s: a.max_timeout_s,
        memory_mb: a.max_memory_mb,
        pids: a.max_pids,
        output_kb: a.max_output_kb,
        disk_mb: a.max_disk_mb,
    };
    let lowest = crate::envelope::LIMIT_MINIMA.fields();
    let highest = crate::envelope::LIMIT_MAXIMA.fields();
    for (((field, v), (_, lo)), (_, hi)) in
        cfg.ceilings.fields().into_iter().zip(lowest).zip(highest)
    {
        if v < lo || v > hi {
            return usage_error(format!(
                "--max-{}: {v} is out of range; use a value from {lo} to {hi}",
                field.replace('_', "-")
            ));
        }
    }
    cfg.retention.quota_per_uid_bytes =
        (a.quota_per_uid_mb > 0).then_some(a.quota_per_uid_mb.saturating_mul(1 << 20));
    if let Some(d) = a.blob_retention_days {
        cfg.retention.blob_days = d;
    }
    if let Some(d) = a.record_retention_days {
        cfg.retention.record_days = d;
    }
    match crate::daemon::run_daemon(cfg) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dryrun daemon: {e}");
            EXIT_INTERNAL
        }
    }
}

/// `dryrun classify`: exit 0 when no approval is needed, 3 when it is, 4
/// when the classifier alone blocks, 2 on invalid input.
fn classify(command: String, workspace: Option<PathBuf>, json: bool) -> i32 {
    if command.trim().is_empty() {
        return usage_error("the command to classify is empty");
    }
    // The workspace and its policy are read with this process's own rights
    // (a root CLI reads a user's workspace policy as that user).
    let access = match crate::workspace::owner::OwnerSession::start(
        &crate::workspace::owner::Creds::current(),
    ) {
        Ok(a) => a,
        Err(e) => return usage_error(e),
    };
    let resolved = workspace
        .or_else(|| std::env::current_dir().ok())
        .and_then(|w| access.resolve(&w).ok());
    let ws_policy = match &resolved {
        Some(r) => {
            let owner = match crate::workspace::owner::OwnerSession::for_owner(&r.identity) {
                Ok(o) => o,
                Err(e) => return usage_error(e),
            };
            match crate::policy::read_workspace_policy(&owner, &r.canonical, &r.identity) {
                Ok(p) => p,
                Err(e) => return usage_error(e),
            }
        }
        None => None,
    };
    let ws = resolved.map(|r| r.canonical);
    let policy =
        match crate::policy::Policy::load(Path::new(crate::engine::SYSTEM_POLICY_DIR), ws_policy) {
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
    for (i, s) in a.stub.iter().enumerate() {
        match crate::policy::stubs::parse_cli_stub(s) {
            Ok(c) => {
                env.stubs.insert(format!("cli-{}", i + 1), c);
            }
            Err(e) => return usage_error(e),
        }
    }
    let access = match crate::workspace::owner::OwnerSession::start(
        &crate::workspace::owner::Creds::current(),
    ) {
        Ok(a) => a,
        Err(e) => return usage_error(e),
    };
    let spec = match env.validate(Some(&workspace), &access) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    let record = match door(g) {
        Door::Daemon(c) => {
            if a.allow_degraded_sandbox {
                return usage_error(
                    "--allow-degraded-sandbox applies to in-process runs; a daemon decides for itself (dryrun daemon --allow-degraded-sandbox), or pass --local",
                );
            }
            let body = serde_json::to_vec(&spec.envelope_for_submission()).expect("serializes");
            match c.call::<crate::record::RunRecord>(
                "POST",
                &format!("{}?wait=true", routes::RUNS),
                Some(body),
            ) {
                Ok(r) => r,
                Err(e) => return client_error(e),
            }
        }
        Door::Local => {
            let engine = match open_engine(g, a.allow_degraded_sandbox) {
                Ok(e) => e,
                Err(e) => return engine_error(e),
            };
            match engine.execute(&spec, &crate::journal::Actor::local()) {
                Ok(r) => r,
                Err(e) => return engine_error(e),
            }
        }
    };
    report_run(&record, a.json)
}

/// `dryrun replay`: through the daemon or in-process, like `execute`.
fn replay(
    g: &GlobalOpts,
    run_id: String,
    envelope: Option<Envelope>,
    command: Option<String>,
    stubs: Vec<String>,
    novel: &str,
    json: bool,
) -> i32 {
    let novel = match novel {
        "strict" => crate::model::stubs::NovelPolicy::Strict,
        "fuzzy" => crate::model::stubs::NovelPolicy::Fuzzy,
        _ => crate::model::stubs::NovelPolicy::Stub,
    };
    for s in &stubs {
        if let Err(e) = crate::policy::stubs::parse_cli_stub(s) {
            return usage_error(e);
        }
    }
    let record = match door(g) {
        Door::Daemon(c) => {
            let body = serde_json::json!({
                "envelope": envelope,
                "command": command,
                "stubs": stubs,
                "novel": novel.as_str(),
            });
            match c.call::<crate::record::RunRecord>(
                "POST",
                &format!("{}?wait=true", routes::run_replay(&run_id)),
                Some(serde_json::to_vec(&body).expect("serializes")),
            ) {
                Ok(r) => r,
                Err(e) => return client_error(e),
            }
        }
        Door::Local => {
            let engine = match open_engine(g, false) {
                Ok(e) => e,
                Err(e) => return engine_error(e),
            };
            let req = crate::engine::ReplayRequest {
                envelope,
                command,
                stubs,
                novel,
            };
            match engine.replay(&run_id, &req, &crate::journal::Actor::local()) {
                Ok(r) => r,
                Err(e) => return engine_error(e),
            }
        }
    };
    report_run(&record, json)
}

/// Print a finished run and map it to `execute`'s exit codes.
fn report_run(record: &crate::record::RunRecord, json: bool) -> i32 {
    if json {
        println!(
            "{}",
            serde_json::to_string(record).expect("records serialize")
        );
    } else {
        render::print_evidence(record);
    }
    match (&record.state, &record.verdict) {
        (RunState::Failed, _) => {
            if !json {
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
