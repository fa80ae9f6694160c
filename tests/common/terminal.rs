//! A command run at a terminal the test makes (the person's terminal,
//! through `script`), live or rehearsed by `dryrun execute` in-process;
//! afterwards, read without waiting, the input the terminal holds: a line
//! the command typed into it (`TIOCSTI`) would be run by the person's
//! shell once dryrun exits.

use std::io::Read;
use std::process::{Command, Stdio};

use super::*;

/// `shell` (one shell string) run by script(1) under a pseudo-terminal it
/// makes, as `who`, its streams piped, `TERM=dumb`, from `/`.
pub fn under_a_pty(who: Who, shell: &str) -> Command {
    let mut c = if who == Who::User {
        as_test_user("script")
    } else {
        Command::new(tool("script", "bsdutils"))
    };
    c.args(["-qfec", shell, "/dev/null"])
        .env("TERM", "dumb")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// What the terminal showed and held, and what each rehearsal printed.
pub struct AtTerminal {
    /// The input the terminal holds afterwards (`none`, or its bytes).
    pub pending: String,
    /// Everything the terminal showed.
    pub seen: String,
    /// Each run's `rehearsal.stdout` in `ws`'s state directory (empty live).
    pub rehearsed: Vec<String>,
}

/// Run `cmd` (a shell line, in `ws`, as `who`) at a terminal: live, or
/// through `dryrun execute --command CMD --expect-write '**'`.
pub fn at_a_terminal(ws: &Ws, who: Who, cmd: &str, live: bool) -> AtTerminal {
    let drain = ws.write(
        "drain.py",
        "import os, fcntl\nfcntl.fcntl(0, fcntl.F_SETFL, os.O_NONBLOCK)\ntry:\n    print('PENDING:' + repr(os.read(0, 4096)))\nexcept BlockingIOError:\n    print('PENDING:none')\n",
    );
    let run = if live {
        cmd.to_string()
    } else {
        format!(
            "DRYRUN_LOCAL=1 DRYRUN_STATE_DIR={state} HOME={home} {bin} execute --command '{cmd}' --expect-write '**'",
            state = ws.state.display(),
            home = ws.state.parent().unwrap().display(),
            bin = bin().display(),
        )
    };
    let shell = format!(
        "cd {dir} && {run}; python3 {drain}",
        dir = ws.dir.display(),
        drain = drain.display(),
    );
    let mut ch = under_a_pty(who, &shell).spawn().unwrap();
    // The terminal's input stays open until the shell is done: its end
    // would be read as an end of file ahead of anything injected.
    let stdin = ch.stdin.take().unwrap();
    let mut seen = String::new();
    ch.stdout.take().unwrap().read_to_string(&mut seen).unwrap();
    drop(stdin);
    let _ = ch.wait();
    let pending = seen
        .lines()
        .find_map(|l| l.trim().strip_prefix("PENDING:"))
        .unwrap_or_else(|| panic!("the drain did not run: {seen}"))
        .to_string();
    let rehearsed = if live {
        Vec::new()
    } else {
        std::fs::read_dir(ws.state.join("runs"))
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("record.json")).ok())
            .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
            .map(|v| {
                v["rehearsal"]["stdout"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    AtTerminal {
        pending,
        seen,
        rehearsed,
    }
}
