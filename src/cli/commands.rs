//! One function per subcommand: build the typed request, send it through
//! the one client, render the answer.

use std::io::Read;
use std::path::Path;

use super::args::{Cmd, DaemonArgs, ExecuteArgs, HookHost, JournalCmd, ReceiptCmd};
use super::screen::{Shown, say_err};
use super::{
    EXIT_INTERNAL, EXIT_JOURNAL_BROKEN, GlobalOpts, door, door_with, print_json, refused, render,
    send, state_dir, usage_error,
};
use crate::engine::{EngineOptions, ReviewAction};
use crate::envelope::{self, Envelope, EnvelopeError, Mode};
use crate::record::{RunRecord, RunState};
use crate::request::door::Door;
use crate::request::{
    Cancel, Compare, Diff, List, Promote, ReceiptId, Replay, ReplayBody, Rollback, RunId, Show,
    ShowReceipt, Submit, VerifyJournal,
};

// Long on purpose: one match arm per subcommand, each a call.
pub(super) fn run(g: GlobalOpts, cmd: Cmd) -> i32 {
    match cmd {
        Cmd::Execute(a) => execute(&g, a),
        Cmd::Classify {
            command,
            workspace,
            json,
            explain,
        } => super::classify::classify(&g, command, workspace, json, explain),
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
            replay(&g, &run_id, envelope, command, stub, &novel, json)
        }
        Cmd::Runs {
            state,
            awaiting,
            limit,
            json,
            fleet: Some(url),
        } => super::fleet::runs(&url, awaiting, state.as_deref(), limit, json),
        Cmd::Runs {
            state,
            awaiting,
            limit,
            json,
            fleet: None,
        } => {
            let state = if awaiting {
                Some("awaiting_approval")
            } else {
                state.as_deref()
            };
            runs(&g, state, limit, json)
        }
        Cmd::Show { run_id, json } => with_run_id(&g, &run_id, |id| {
            match send(&door(&g), &Show { id, wait_s: None }) {
                Ok(r) => {
                    show_record(&r, json);
                    0
                }
                Err(code) => code,
            }
        }),
        Cmd::Diff {
            run_id,
            other,
            json,
        } => diff(&g, &run_id, other.as_deref(), json),
        Cmd::Approve {
            run_id,
            note,
            override_block,
            json,
            fleet,
        } if fleet.fleet.is_some() => super::fleet::decide(
            &fleet,
            &run_id,
            true,
            &note.unwrap_or_default(),
            override_block,
            json,
        ),
        Cmd::Reject {
            run_id,
            note,
            json,
            fleet,
        } if fleet.fleet.is_some() => super::fleet::decide(
            &fleet,
            &run_id,
            false,
            &note.unwrap_or_default(),
            false,
            json,
        ),
        Cmd::Approve {
            run_id,
            note,
            override_block,
            json,
            ..
        } => super::review::review(
            &g,
            &run_id,
            ReviewAction::Approve,
            note.unwrap_or_default(),
            override_block,
            json,
        ),
        Cmd::Reject {
            run_id, note, json, ..
        } => super::review::review(
            &g,
            &run_id,
            ReviewAction::Reject,
            note.unwrap_or_default(),
            false,
            json,
        ),
        Cmd::Withdraw { run_id, note, json } => super::review::review(
            &g,
            &run_id,
            ReviewAction::Withdraw,
            note.unwrap_or_default(),
            false,
            json,
        ),
        Cmd::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut super::command(), "dryrun", &mut out);
            print!("{}", String::from_utf8_lossy(&out));
            0
        }
        Cmd::Man => {
            let mut out = Vec::new();
            if let Err(e) = clap_mangen::Man::new(super::command()).render(&mut out) {
                return super::output::error("internal", &format!("man page: {e}"), EXIT_INTERNAL);
            }
            print!("{}", String::from_utf8_lossy(&out));
            0
        }
        Cmd::Promote {
            run_id,
            json,
            replay_output,
            host_prompt_token,
            await_approval,
            local_only,
        } if replay_output || host_prompt_token.is_some() || await_approval.is_some() => {
            with_run_id(&g, &run_id, |id| {
                crate::doors::promote::promote_for_host(
                    &doors_target(&g),
                    id.as_str(),
                    &crate::doors::promote::PromoteOptions {
                        replay_output,
                        host_prompt_token,
                        await_approval_s: await_approval,
                        local_only,
                    },
                    |r| show_promoted(r, json),
                )
            })
        }
        Cmd::Promote {
            run_id,
            json,
            local_only,
            ..
        } => promote(&g, &run_id, local_only, json),
        Cmd::Hook { host } => crate::doors::hook::run_hook(
            match host {
                HookHost::ClaudeCode => crate::doors::hook::Host::ClaudeCode,
                HookHost::Codex => crate::doors::hook::Host::Codex,
            },
            doors_target(&g),
        ),
        Cmd::Mcp { http: None } => crate::doors::mcp::run_mcp(doors_target(&g)),
        Cmd::Mcp { http: Some(addr) } => {
            use crate::doors::mcp_http::{parse_loopback, run_mcp_http};
            match parse_loopback(&addr).and_then(|a| run_mcp_http(doors_target(&g), a)) {
                Ok(()) => 0,
                Err(e) => {
                    say_err!("dryrun mcp: {e}");
                    if matches!(e, crate::doors::mcp_http::McpHttpError::NotLoopback(_)) {
                        2
                    } else {
                        1
                    }
                }
            }
        }
        Cmd::Review { fleet: None, .. } => super::tui::review(&g),
        Cmd::Review {
            fleet: Some(url),
            json,
        } => super::fleet::review(&url, json),
        Cmd::Fleet { fleet, cmd } => super::fleet::fleet_cmd(&fleet, cmd),
        Cmd::Gc {
            budget_mb,
            dry_run,
            json,
        } => super::gc::gc(&g, budget_mb, dry_run, json),
        Cmd::Rollback { receipt_id, json } => {
            with_receipt_id(&receipt_id, |id| match door(&g).send(&Rollback { id }) {
                Ok(rc) => {
                    show_receipt(&rc, json);
                    0
                }
                Err(e) => refused(e),
            })
        }
        Cmd::Receipt {
            cmd: ReceiptCmd::Show { receipt_id, json },
        } => with_receipt_id(&receipt_id, |id| {
            match send(&door(&g), &ShowReceipt { id }) {
                Ok(rc) => {
                    show_receipt(&rc, json);
                    0
                }
                Err(code) => code,
            }
        }),
        Cmd::Cancel { run_id, json } => with_run_id(&g, &run_id, |id| {
            let d = door(&g);
            if !d.is_daemon() {
                return usage_error(
                    "cancel talks to a daemon; a local rehearsal is cancelled with Ctrl-C (nothing is promoted)",
                );
            }
            match d.send(&Cancel { id }) {
                Ok(r) => {
                    show_record(&r, json);
                    0
                }
                Err(e) => super::failed(e),
            }
        }),
        Cmd::Journal {
            cmd:
                JournalCmd::Verify {
                    json,
                    fleet: Some(url),
                    host,
                },
        } => super::fleet::verify(&g, &url, host, json),
        Cmd::Journal {
            cmd: JournalCmd::Verify { json, .. },
        } => match send(&door(&g), &VerifyJournal) {
            Ok(rep) => {
                if json {
                    print_json(&rep);
                } else {
                    render::print_journal_report(&rep);
                }
                if rep.ok {
                    0
                } else if rep.first_bad.is_some() {
                    EXIT_JOURNAL_BROKEN
                } else if rep.anchor_damaged {
                    super::EXIT_JOURNAL_ANCHOR_DAMAGED
                } else {
                    EXIT_JOURNAL_BROKEN
                }
            }
            Err(code) => code,
        },
    }
}

/// Resolve a run id as typed (whole, a unique prefix, or `last`), then `f`.
fn with_run_id(g: &GlobalOpts, id: &str, f: impl FnOnce(RunId) -> i32) -> i32 {
    match super::ids::resolve_run_id(&door(g), id) {
        Ok(id) => f(id),
        Err(code) => code,
    }
}

fn with_receipt_id(id: &str, f: impl FnOnce(ReceiptId) -> i32) -> i32 {
    match ReceiptId::parse(id) {
        Ok(id) => f(id),
        Err(e) => usage_error(e),
    }
}

fn show_record(r: &RunRecord, json: bool) {
    if json {
        print_json(r);
    } else {
        render::print_evidence(r);
    }
}

fn runs(g: &GlobalOpts, state: Option<&str>, limit: Option<usize>, json: bool) -> i32 {
    let state = match state {
        None => None,
        Some(s) => match RunState::parse(s) {
            Some(st) => Some(st),
            None => {
                return usage_error(format!(
                    "--state {s:?} is not a run state; use queued, running, rehearsed, awaiting_approval, approved, rejected, promoted or failed"
                ));
            }
        },
    };
    match send(&door(g), &List { state, limit }) {
        Ok(l) => {
            if json {
                print_json(&l.runs);
            } else {
                render::print_run_list(&l.runs, state == Some(RunState::AwaitingApproval));
            }
            0
        }
        Err(code) => code,
    }
}

fn diff(g: &GlobalOpts, run_id: &str, other: Option<&str>, json: bool) -> i32 {
    with_run_id(g, run_id, |id| match other {
        Some(other) => with_run_id(g, other, |against| {
            match send(&door(g), &Compare { id, against }) {
                Ok(cmp) => {
                    if json {
                        print_json(&cmp);
                    } else {
                        render::print_comparison(&cmp);
                    }
                    0
                }
                Err(code) => code,
            }
        }),
        None => match send(&door(g), &Diff { id }) {
            Ok(d) => {
                if json {
                    print_json(&d);
                } else {
                    render::print_diff(&d);
                }
                0
            }
            Err(code) => code,
        },
    })
}

fn promote(g: &GlobalOpts, run_id: &str, local_only: bool, json: bool) -> i32 {
    with_run_id(g, run_id, |id| {
        let d = door(g);
        // Mode `rerun`: hand over the host variables the run's live:
        // section names, from this process's environment.
        let record = match d.send(&Show {
            id: id.clone(),
            wait_s: None,
        }) {
            Ok(r) => r,
            Err(e) => return refused(e),
        };
        let env = record
            .live
            .as_ref()
            .filter(|l| l.mode == crate::record::LiveMode::Rerun)
            .map(|l| {
                l.env_from_host
                    .iter()
                    .filter_map(|n| std::env::var(n).ok().map(|v| (n.clone(), v)))
                    .collect()
            })
            .unwrap_or_default();
        if local_only && !json {
            let calls = crate::engine::shown_actions(
                &record
                    .rehearsal
                    .as_ref()
                    .map(|h| h.would_be_actions.clone())
                    .unwrap_or_default(),
            );
            if !calls.is_empty() {
                say_err!(
                    "dryrun: --local-only: these calls answered by stubs in the rehearsal will NOT be made:"
                );
                // Each call's words are escaped already (`shown_actions`).
                for c in &calls {
                    say_err!("  {}", Shown::message(c));
                }
            }
        }
        match d.send(&Promote {
            id,
            env,
            host_prompt_token: None,
            local_only,
        }) {
            Ok(r) => {
                show_promoted(&r, json);
                0
            }
            Err(e) => refused(e),
        }
    })
}

fn show_promoted(r: &RunRecord, json: bool) {
    if json {
        print_json(r);
    } else {
        match &r.receipt {
            Some(rc) => render::print_receipt(rc),
            None => render::print_evidence(r),
        }
    }
}

/// For a door that runs the engine in this process: start the resident
/// sandbox helper now, from the main thread, so that its exec runs while
/// this process loads the policy and writes the run's first records, and
/// the rehearsal forks a small process instead of executing this binary.
fn with_resident(d: Door) -> Door {
    if !d.is_daemon()
        && let Err(e) = crate::engine::start_resident_sandbox_helper()
    {
        tracing::debug!("no resident sandbox helper: {e}; rehearsals start the helper by exec");
    }
    d
}

/// Where the doors (`hook`, `mcp`, a hook's `promote`) send requests: the
/// same choice as every other subcommand.
fn doors_target(g: &GlobalOpts) -> crate::doors::Target {
    super::target_of(g, with_resident(door(g)))
}

fn show_receipt(rc: &crate::record::Receipt, json: bool) {
    if json {
        print_json(rc);
    } else {
        render::print_receipt(rc);
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
    cfg.host_prompt_approvals = a.host_prompt_approvals;
    cfg.egress_resolve = a.egress_resolve;
    // Each ceiling not given stays the machine's (`engine::machine`).
    for (field, given) in [
        ("timeout_s", a.max_timeout_s),
        ("memory_mb", a.max_memory_mb),
        ("pids", a.max_pids),
        ("output_kb", a.max_output_kb),
        ("disk_mb", a.max_disk_mb),
        ("cpus", a.max_cpus),
    ] {
        if let Some(v) = given {
            *cfg.ceilings.field_mut(field) = v;
        }
    }
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
    cfg.retention.state_budget_bytes =
        (a.state_budget_mb > 0).then_some(a.state_budget_mb.saturating_mul(1 << 20));
    if let Some(d) = a.blob_retention_days {
        cfg.retention.blob_days = d;
    }
    if let Some(d) = a.record_retention_days {
        cfg.retention.record_days = d;
    }
    if a.approval_expiry == 0 {
        return usage_error("--approval-expiry must be at least 1 second");
    }
    cfg.approval_expiry = std::time::Duration::from_secs(a.approval_expiry);
    if a.notify_queue == 0 {
        return usage_error("--notify-queue must be at least 1");
    }
    cfg.notify = a.notify_command.map(|command| crate::daemon::NotifyConfig {
        command,
        timeout: std::time::Duration::from_secs(a.notify_timeout.max(1)),
        queue: a.notify_queue,
    });
    if a.fleet.is_some() || a.fleet_config.is_some() {
        let config = a.fleet_config.clone().or_else(|| {
            let p = std::path::PathBuf::from(crate::fleet::FLEET_CONFIG);
            p.exists().then_some(p)
        });
        match crate::fleet::FleetSpec::load(config.as_deref(), a.fleet.as_deref()) {
            Ok(s) => cfg.fleet = Some(s),
            Err(e) => return usage_error(e),
        }
    }
    match crate::daemon::run_daemon(cfg) {
        Ok(()) => 0,
        Err(e) => {
            say_err!("dryrun daemon: {e}");
            EXIT_INTERNAL
        }
    }
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
    let mut options = EngineOptions::default();
    options.allow_degraded |= a.allow_degraded_sandbox;
    options.egress.pins.extend(a.egress_resolve.iter().cloned());
    // The door first: an in-process run starts its resident sandbox helper
    // now, so that its exec overlaps this process's own work.
    let d = with_resident(door_with(g, options));
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
        read_envelope_file(f)
    } else if let Some(c) = &a.command {
        Ok(Envelope {
            command: Some(c.clone()),
            ..Default::default()
        })
    } else {
        return usage_error("give --task NAME, --file ENVELOPE or --command 'SHELL STRING'");
    };
    let mut env = match loaded {
        Ok(e) => e,
        Err(e) => return usage_error(e),
    };
    // The workspace is this directory (or --workspace) unless the envelope
    // names one.
    if env.working_dir.is_none() {
        env.working_dir = Some(workspace);
    }
    // The command's environment is this process's (the caller's), filtered
    // by the engine, unless the envelope carries one.
    env.caller_env
        .get_or_insert_with(crate::caller_env::of_this_process);
    if env.caller_umask.is_none() {
        env.caller_umask = crate::caller_env::umask_of_this_process();
    }
    env.intent
        .expected_writes
        .extend(a.expect_write.iter().cloned());
    env.intent.forbidden_paths.extend(a.forbid.iter().cloned());
    if a.read_only {
        env.intent.mode = Mode::ReadOnly;
    }
    env.intent.require_success |= a.require_success;
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
    env.intent.network.add(&a.allow_net);
    env.intent.network.add_services(&a.service);
    if d.is_daemon() && a.allow_degraded_sandbox {
        return usage_error(
            "--allow-degraded-sandbox applies to in-process runs; a daemon decides for itself (dryrun daemon --allow-degraded-sandbox), or pass --local",
        );
    }
    if d.is_daemon() && !a.egress_resolve.is_empty() {
        return usage_error(
            "--egress-resolve applies to in-process runs; a daemon takes its own (dryrun daemon --egress-resolve), or pass --local",
        );
    }
    let op = Submit {
        envelope: env,
        wait: true,
    };
    let progress = super::output::Progress::start(format!(
        "rehearsing {}",
        if d.is_daemon() {
            "through the daemon"
        } else {
            "in-process"
        }
    ));
    let sent = send(&d, &op).map(|r| r.into_record());
    drop(progress);
    match sent {
        Ok(Some(record)) => report_run(&record, a.json),
        Ok(None) => super::output::error(
            "internal",
            "the daemon queued the run without waiting for its verdict",
            EXIT_INTERNAL,
        ),
        Err(code) => code,
    }
}

/// `dryrun replay`: through the daemon or in-process, like `execute`.
fn replay(
    g: &GlobalOpts,
    run_id: &str,
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
    with_run_id(g, run_id, |id| {
        let op = Replay {
            id,
            changes: ReplayBody {
                envelope,
                command,
                stubs,
                novel: Some(novel),
            },
            wait: true,
        };
        match send(&with_resident(door(g)), &op).map(|r| r.into_record()) {
            Ok(Some(record)) => report_run(&record, json),
            Ok(None) => {
                say_err!("dryrun: the daemon queued the replay without waiting for its verdict");
                EXIT_INTERNAL
            }
            Err(code) => code,
        }
    })
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
                say_err!(
                    "dryrun: the rehearsal could not run: {}",
                    Shown::message(record.error.as_deref().unwrap_or("unknown error"))
                );
            }
            EXIT_INTERNAL
        }
        (_, Some(v)) => v.decision.exit_code(),
        (_, None) => EXIT_INTERNAL,
    }
}
