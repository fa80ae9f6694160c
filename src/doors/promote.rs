//! What `dryrun promote` does for a hook's rewritten command: optionally
//! wait for a reviewer's approval (`--await-approval S`), present a
//! host-prompt token (`--host-prompt-token T`), promote through the
//! engine, and with `--replay-output` print the rehearsal's stdout and
//! stderr and exit with its status, so the agent sees what it expected
//! from its command while only the reviewed change set went live.

use std::io::Write;
use std::time::{Duration, Instant};

use super::{Backend, DoorError, Target};
use crate::record::{RunRecord, RunState};

pub struct PromoteOptions {
    pub replay_output: bool,
    pub host_prompt_token: Option<String>,
    pub await_approval_s: Option<u64>,
    /// `--local-only`: the run's stubbed calls will not be made.
    pub local_only: bool,
}

/// Exit status of a refused promotion (as `dryrun promote`).
const EXIT_REFUSED: i32 = 4;

/// Returns the exit status; `show` renders the promoted run when the
/// output is not replayed.
pub fn promote_for_host(
    target: &Target,
    run_id: &str,
    opts: &PromoteOptions,
    show: impl FnOnce(&RunRecord),
) -> i32 {
    let fail = |e: DoorError| {
        eprintln!("dryrun: {e}");
        match e {
            DoorError::Refused(_) => EXIT_REFUSED,
            DoorError::Invalid(_) => 2,
            DoorError::Failed(_) => 1,
        }
    };
    let backend = match Backend::connect(target) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    if let Some(s) = opts.await_approval_s {
        match await_approval(&backend, run_id, Duration::from_secs(s)) {
            Ok(()) => {}
            Err(code) => return code,
        }
    }
    let r = match backend.promote(run_id, opts.host_prompt_token.as_deref(), opts.local_only) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if !opts.replay_output {
        show(&r);
        return 0;
    }
    replay_output(&r)
}

fn await_approval(backend: &Backend, run_id: &str, wait: Duration) -> Result<(), i32> {
    let start = Instant::now();
    let mut told = false;
    loop {
        let r = backend.run(run_id).map_err(|e| {
            eprintln!("dryrun: {e}");
            1
        })?;
        match r.state {
            RunState::AwaitingApproval => {}
            RunState::Rejected => {
                let note = r
                    .approvals
                    .last()
                    .map(|a| a.note.clone())
                    .unwrap_or_default();
                eprintln!(
                    "dryrun: a reviewer rejected run {run_id}{}; nothing was applied",
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({note})")
                    }
                );
                show_unapplied(&r);
                return Err(EXIT_REFUSED);
            }
            _ => return Ok(()),
        }
        if start.elapsed() >= wait {
            eprintln!(
                "dryrun: no reviewer approved run {run_id} within {} s; nothing was applied (a reviewer runs `dryrun approve {run_id}`)",
                wait.as_secs()
            );
            show_unapplied(&r);
            return Err(EXIT_REFUSED);
        }
        if !told {
            eprintln!(
                "dryrun: run {run_id} needs a reviewer's approval (`dryrun show {run_id}`, `dryrun approve {run_id}`); waiting up to {} s",
                wait.as_secs()
            );
            told = true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A run that was not applied: what its rehearsal printed, so the agent
/// sees what its command did all the same.
fn show_unapplied(r: &RunRecord) {
    let Some(h) = &r.rehearsal else { return };
    eprintln!(
        "dryrun: what the command printed in its rehearsal ({}), not applied:",
        match (h.exit_code, h.signal) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("signal {s}"),
            _ => "no exit status".into(),
        }
    );
    write_output_in_order(h);
}

/// The rehearsal's stdout and stderr on this process's own, in the order
/// the command wrote them (`rehearsal.output_order`).
pub fn write_output_in_order(h: &crate::record::Rehearsal) {
    use crate::model::output::OutputStream;
    use std::os::fd::AsFd;
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    // dryrun's own line before the output went to stderr.
    let mut last = Some(OutputStream::Stderr);
    let mut budget = Duration::from_secs(1);
    for (stream, piece) in h.output_pieces() {
        // One stream (a terminal, `2>&1`, a file) keeps this order as it
        // is written. A host that reads the two pipes apart (Codex) sees
        // pieces written microseconds apart in either order: before the
        // other stream gets the next piece, wait (briefly, at most) until
        // the reader has taken the last one.
        if last.is_some_and(|l| l != stream) {
            match last {
                Some(OutputStream::Stdout) => drained(out.as_fd(), &mut budget),
                _ => drained(err.as_fd(), &mut budget),
            }
        }
        last = Some(stream);
        let _ = match stream {
            OutputStream::Stdout => out.write_all(piece.as_bytes()).and_then(|_| out.flush()),
            OutputStream::Stderr => err.write_all(piece.as_bytes()).and_then(|_| err.flush()),
        };
    }
    // And before dryrun's notes after it, on stderr.
    if last == Some(OutputStream::Stdout) {
        drained(out.as_fd(), &mut budget);
    }
}

/// Until what was written to `fd` has been read, for at most 100 ms and
/// what is left of `budget` (a replay's 1 s in all): a reader that is slow
/// or gone costs the order, never more time.
fn drained(fd: std::os::fd::BorrowedFd<'_>, budget: &mut Duration) {
    let start = Instant::now();
    let limit = (*budget).min(Duration::from_millis(100));
    while crate::engine::unread_bytes(fd).is_ok_and(|n| n > 0) && start.elapsed() < limit {
        std::thread::sleep(Duration::from_micros(100));
    }
    *budget = budget.saturating_sub(start.elapsed());
}

/// Print the rehearsal's output as the command printed it, and exit as it
/// exited (128 + signal for a signal).
fn replay_output(r: &RunRecord) -> i32 {
    let Some(h) = &r.rehearsal else {
        return 0;
    };
    let changes = h
        .changes
        .iter()
        .filter(|c| c.kind != crate::model::ChangeKind::Identical)
        .count();
    eprintln!(
        "dryrun: applied the reviewed change set of run {} ({changes} change(s){}); output below is the rehearsal's",
        r.run_id,
        r.receipt
            .as_ref()
            .map(|rc| format!(", receipt {}", rc.receipt_id))
            .unwrap_or_default()
    );
    // Calls a stub answered in the rehearsal: the output below shows the
    // stub's answer (a merged PR, an applied plan). Unless the live lane
    // re-ran the command, they were never made: say so, before and after
    // the output, so neither the agent nor its person takes them as done.
    let rerun = r
        .live
        .as_ref()
        .is_some_and(|l| l.mode == crate::envelope::LiveMode::Rerun);
    let stubbed = h.would_be_actions.len();
    let not_made = (stubbed > 0 && !rerun).then(|| {
        let shown: Vec<String> = h
            .would_be_actions
            .iter()
            .take(5)
            .map(|a| format!("`{}`", crate::model::text::Shown::message(&a.shown())))
            .collect();
        format!(
            "dryrun: NOT DONE: {stubbed} call(s) with a remote effect were answered by stubs in the rehearsal and were NOT made live ({}); what the output shows of them is the stub's answer",
            if shown.is_empty() {
                "their records could not be read".to_string()
            } else {
                shown.join(", ")
            }
        )
    });
    if let Some(n) = &not_made {
        eprintln!("{n}");
    }
    write_output_in_order(h);
    if h.output_truncated {
        eprintln!("\ndryrun: the output was cut to the run's output limit");
    }
    if let Some(n) = &not_made {
        eprintln!("\n{n}");
    }
    match (h.exit_code, h.signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}
