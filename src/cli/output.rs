//! Where the command line's output goes: stdout that tolerates a reader
//! closing the pipe early, errors as text on stderr and (with `--json`)
//! also as one JSON object on stdout, colour only on terminals and never with
//! `NO_COLOR`, and the progress line while a rehearsal runs.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::request::door::DoorError;
use crate::request::transport::ClientError;

/// Errors go to stdout as JSON (`--json` was given).
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

pub(super) fn set_json_errors() {
    JSON_ERRORS.store(true, Ordering::Relaxed);
}

/// Write to stdout; a closed pipe ends the process quietly with status 0
/// (the reader has what it wanted), any other write error with status 1.
pub fn stdout(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "dryrun: writing to stdout: {e}");
        std::process::exit(super::EXIT_INTERNAL);
    }
}

/// The JSON error body, the same shape as the daemon's.
#[derive(serde::Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(serde::Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: &'a str,
}

/// Report an error (`code`: a stable word, as the API's) and return `exit`.
pub fn error(code: &str, message: &str, exit: i32) -> i32 {
    error_for(code, message, message, exit)
}

/// Report an error: on stderr as `human` says it; with `--json` also as one
/// JSON object on stdout (`{"error": {"code", "message"}}`, the daemon's
/// shape). Returns `exit`.
fn error_for(code: &str, message: &str, human: &str, exit: i32) -> i32 {
    if JSON_ERRORS.load(Ordering::Relaxed) {
        json_error(code, message);
    }
    // Errors name files, runs and fields an agent chose: through the screen.
    super::screen::warn(&format!("dryrun: {human}"));
    exit
}

/// The JSON error object alone, on stdout.
pub fn json_error(code: &str, message: &str) {
    let body = ErrorBody {
        error: ErrorDetail { code, message },
    };
    println!("{}", serde_json::to_string(&body).expect("serializes"));
}

/// Report a failed request with the daemon's code (or the one the daemon
/// would have given for the in-process engine's error).
pub fn door_error(e: &DoorError, exit: i32) -> i32 {
    let human = e.to_string();
    match e {
        DoorError::Daemon(ClientError::Api { code, message, .. }) => {
            error_for(code, message, &human, exit)
        }
        DoorError::Daemon(ClientError::Connect { .. }) => {
            error_for("daemon_unreachable", &human, &human, exit)
        }
        DoorError::Daemon(ClientError::Http { .. }) => {
            error_for("daemon_error", &human, &human, exit)
        }
        DoorError::Engine(err) => {
            error_for(crate::daemon::engine_status(err).1, &human, &human, exit)
        }
    }
}

/// Colour for people: only when stdout is a terminal and `NO_COLOR` is
/// unset or empty (and the terminal is not `dumb`).
pub fn colour_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        && std::io::stdout().is_terminal()
}

/// A colour of the evidence screen.
#[derive(Debug, Clone, Copy)]
pub enum Colour {
    Red,
    Yellow,
    Green,
}

/// `text` in `colour` when colour is enabled; `text` is already escaped.
pub fn paint(text: &str, colour: Colour) -> String {
    if !colour_enabled() {
        return text.to_string();
    }
    let code = match colour {
        Colour::Red => "31;1",
        Colour::Yellow => "33;1",
        Colour::Green => "32",
    };
    format!("\u{1b}[{code}m{text}\u{1b}[0m")
}

/// A line on stderr, redrawn every second while a rehearsal runs, when
/// stderr is a terminal; cleared when dropped.
pub struct Progress {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    pub fn start(what: String) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress {
                stop: None,
                thread: None,
            };
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            loop {
                let _ = write!(
                    std::io::stderr(),
                    "\r\u{1b}[2Kdryrun: {what} · {} s",
                    t0.elapsed().as_secs()
                );
                match rx.recv_timeout(std::time::Duration::from_secs(1)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                    _ => break,
                }
            }
            let _ = write!(std::io::stderr(), "\r\u{1b}[2K");
        });
        Progress {
            stop: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
