//! The `dryrun` command line: parse arguments, build a typed request, send
//! it through the one client ([`Door::send`]) to a daemon or to the
//! in-process engine, render the answer.

/// Every `println!` / `print!` of the CLI's modules (declared below) goes
/// through [`output::stdout`]: a reader that closes the pipe early
/// (`dryrun runs | head -1`) ends the process quietly instead of a panic.
macro_rules! println {
    () => { $crate::cli::output::stdout(format_args!("\n")) };
    ($($t:tt)*) => { $crate::cli::output::stdout(format_args!("{}\n", format_args!($($t)*))) };
}
macro_rules! print {
    ($($t:tt)*) => { $crate::cli::output::stdout(format_args!($($t)*)) };
}

mod args;
mod classify;
mod commands;
mod fleet;
mod gc;
mod ids;
mod output;
mod presence;
mod render;
mod review;
mod screen;
pub mod tui;

/// The way to a daemon (kept here for callers of the former `cli::client`).
pub use crate::request::transport as client;

use std::path::PathBuf;

use clap::{Args, Parser};

use crate::engine::{EngineOptions, default_state_dir};
use crate::request::door::{Door, DoorError, LocalEngine};
use crate::request::serve::Serve;
use args::Cmd;

/// Exit codes of the command line: an internal failure, and invalid input
/// or usage (nothing ran).
pub const EXIT_INTERNAL: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
/// Exit code of `promote` / `rollback` when refused (drift, a change set
/// that must not go live, a run in the wrong state).
pub const EXIT_REFUSED: i32 = 4;
/// Exit code of `dryrun journal verify` when the chain is broken.
pub const EXIT_JOURNAL_BROKEN: i32 = 5;
/// Exit code of `dryrun journal verify` when every record chains but the
/// anchor (`journal.head`) is there and does not check out: the end of the
/// chain cannot be vouched for.
pub const EXIT_JOURNAL_ANCHOR_DAMAGED: i32 = 6;

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

/// Parse and run; returns the process exit code.
pub fn main_with_args() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            if !e.use_stderr() {
                let _ = e.print();
                return 0;
            }
            let _ = e.print();
            // No subcommand to ask: `--json` anywhere asks for a JSON error.
            if std::env::args_os().any(|a| a == "--json") {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                output::json_error("usage", first.trim_start_matches("error: "));
            }
            return EXIT_INVALID;
        }
    };
    if cli.cmd.wants_json() {
        output::set_json_errors();
    }
    commands::run(cli.global, cli.cmd)
}

fn state_dir(g: &GlobalOpts) -> PathBuf {
    g.state_dir.clone().unwrap_or_else(default_state_dir)
}

/// Where this invocation's requests go: `--local` → in-process; an explicit
/// socket → that daemon (an error if it is not there); else the default
/// socket when a daemon answers on it; else in-process.
fn door(g: &GlobalOpts) -> Door {
    Door::choose_with(g.socket.as_deref(), g.local, || LocalEngine {
        state_dir: state_dir(g),
        options: EngineOptions::default(),
    })
}

/// The doors' name for where `d` sends requests (a daemon's socket, or
/// this process's engine on its state directory).
fn target_of(g: &GlobalOpts, d: Door) -> crate::doors::Target {
    match d {
        Door::Daemon(c) => crate::doors::Target::Daemon(c.socket().to_path_buf()),
        Door::Local(_) => crate::doors::Target::Local(state_dir(g)),
    }
}

fn door_with(g: &GlobalOpts, options: EngineOptions) -> Door {
    Door::choose(
        g.socket.as_deref(),
        g.local,
        LocalEngine {
            state_dir: state_dir(g),
            options,
        },
    )
}

fn usage_error(msg: impl std::fmt::Display) -> i32 {
    output::error("usage", &msg.to_string(), EXIT_INVALID)
}

/// Print why a request failed; the exit code for it.
fn failed(e: DoorError) -> i32 {
    let exit = if e.is_invalid_input() {
        EXIT_INVALID
    } else {
        EXIT_INTERNAL
    };
    output::door_error(&e, exit)
}

/// Print why a live-lane request failed; refusals exit 4.
fn refused(e: DoorError) -> i32 {
    if e.is_refusal() {
        output::door_error(&e, EXIT_REFUSED)
    } else {
        failed(e)
    }
}

/// Send one request; on failure, the error is printed and the exit code
/// comes back.
fn send<O: Serve>(door: &Door, op: &O) -> Result<O::Reply, i32> {
    door.send(op).map_err(failed)
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string(v).expect("serializes"));
}

/// The command-line definition (completions and the man page are made from it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
