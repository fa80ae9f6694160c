//! Approve and reject: through a daemon (the reviewer is who the socket
//! says), or in-process, where the person proves they are at a terminal.

use std::io::Read;
use std::path::PathBuf;

use super::screen::Shown;
use super::{EXIT_INVALID, GlobalOpts, door, print_json, render, send, state_dir, usage_error};
use crate::engine::{EngineOptions, ReviewAction, ReviewerAuth};
use crate::request::door::{Door, LocalEngine};
use crate::request::{Review, Show};

/// `dryrun approve` / `dryrun reject`.
pub(super) fn review(
    g: &GlobalOpts,
    run_id: &str,
    action: ReviewAction,
    note: String,
    override_block: bool,
    json: bool,
) -> i32 {
    let mut d = door(g);
    if let Door::Local(_) = d {
        let dir = review_state_dir(g);
        if let Err(msg) = act_as_state_dir_owner(&dir) {
            return usage_error(msg);
        }
        d = Door::Local(Box::new(LocalEngine {
            state_dir: dir,
            options: EngineOptions::default(),
        }));
    }
    // `last` is whatever run is newest when this runs, and any agent can
    // make its own run the newest a moment before: an approval (made
    // without a question over the daemon) must name the run it approves.
    if action == ReviewAction::Approve && run_id == "last" {
        return super::output::error(
            "usage",
            "`approve last` would approve whichever run is newest when it runs, which any submitter can change; give the run's id (or a unique prefix of it)",
            EXIT_INVALID,
        );
    }
    let id = match super::ids::resolve_run_id(&d, run_id) {
        Ok(id) => id,
        Err(code) => return code,
    };
    let mut caller = crate::request::serve::Caller::local();
    if action == ReviewAction::Approve {
        // The evidence before the question, through either door.
        let r = match send(
            &d,
            &Show {
                id: id.clone(),
                wait_s: None,
            },
        ) {
            Ok(r) => r,
            Err(code) => return code,
        };
        if let Door::Local(_) = d {
            // Refused before any prompt: the same uid never approves, but
            // where there is one user (root) a person proves presence.
            match local_reviewer(&r) {
                Ok(auth) => caller.auth = auth,
                Err(e) => return super::output::error("forbidden", &e, EXIT_INVALID),
            }
        }
        if !json {
            render::print_review_summary(&crate::engine::summary::ReviewSummary::of(&r, None));
        }
        if let Door::Local(_) = d
            && let Err(msg) = confirm_on_terminal(&r, override_block)
        {
            return usage_error(msg);
        }
    }
    let op = Review {
        id,
        action,
        note,
        override_block,
    };
    match d.send_as(&op, &caller).map_err(super::failed) {
        Ok(record) => {
            if json {
                print_json(&record);
            } else {
                render::print_evidence(&record);
            }
            0
        }
        Err(code) => code,
    }
}

/// The state directory a local review works on. `sudo dryrun approve ID`
/// (root, started by sudo, no directory named): the invoking user's
/// default state directory, where their local runs wait.
pub(super) fn review_state_dir(g: &GlobalOpts) -> PathBuf {
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

/// Root reviewing in another user's state directory: see
/// [`crate::request::door::act_as_state_dir_owner`].
pub(super) fn act_as_state_dir_owner(dir: &std::path::Path) -> Result<(), String> {
    crate::request::door::act_as_state_dir_owner(dir)
        .map_err(|e| format!("state directory {}: {e}", dir.display()))
}

/// How a local approval of `r` is authenticated: another uid's run, by
/// the typed-back code; root's own run, only with the proof that a person
/// is at a terminal no process here made (`presence.rs`); anyone else's
/// own run never (`sudo` gives a second identity).
pub(super) fn local_reviewer(r: &crate::record::RunRecord) -> Result<ReviewerAuth, String> {
    let me = crate::journal::Actor::local();
    if crate::engine::authz::is_submitter(r, &me)
        && crate::engine::authz::single_user_approval(&me, &ReviewerAuth::LocalPresence)
    {
        return super::presence::prove_presence()
            .map(|_| ReviewerAuth::LocalPresence)
            .map_err(|e| {
                format!(
                    "uid 0 submitted run {}; where root is the only user, root approves its own run only as a person at a terminal no process on this machine made, and this is not one: {e}",
                    r.run_id
                )
            });
    }
    crate::engine::refuse_self_approval(r, &me, &ReviewerAuth::LocalTtyConfirmed)
        .map(|()| ReviewerAuth::LocalTtyConfirmed)
        .map_err(|e| e.to_string())
}

/// Local mode has no second identity: the person proves they are at the
/// terminal by typing back a code printed on it. An agent that pipes `yes`
/// (or anything) into stdin has no terminal to read the code from.
fn confirm_on_terminal(r: &crate::record::RunRecord, override_block: bool) -> Result<(), String> {
    use std::io::{BufRead, IsTerminal, Write};
    const NO_TTY: &str = "a local approval must be typed at an interactive terminal (stdin and /dev/tty), \
        by a user other than the submitter (`sudo dryrun approve`, or the daemon with an approver group; see docs/approvals.md)";
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
    // Input typed before the code was shown answers nothing.
    let _ = nix::sys::termios::tcflush(&tty, nix::sys::termios::FlushArg::TCIFLUSH);
    let mut w = &tty;
    let decision = r
        .verdict
        .as_ref()
        .map(|v| v.decision.as_str())
        .unwrap_or("-");
    let _ = writeln!(
        w,
        "approve run {} ({}; decision {decision}{})\ncommand: {}\ntype this code to confirm: {code}",
        Shown::raw(&r.run_id),
        r.state.as_str(),
        if override_block {
            ", overriding the block"
        } else {
            ""
        },
        Shown::raw(&r.command)
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
