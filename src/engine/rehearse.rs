//! Rehearsing a prepared run: the sandbox, then the evidence scrubbed of
//! secrets, judged, recorded and journaled.

use super::egress::start_egress;
use super::store::fit_record;
use super::{Engine, EngineError, Prepared, entries};
use crate::envelope::EnvelopeSpec;
use crate::model::output::{ChunkEnds, lossy_with_offsets};
use crate::model::{HostReport, RehearsalReport};
use crate::record::{Rehearsal, RunRecord, RunState, SandboxRecord};
use crate::sandbox::{self, SandboxError};
use crate::verdict;

impl Engine {
    /// Rehearse a prepared run and judge it; journals the verdict (or the
    /// failure) and returns the final record.
    pub fn rehearse_prepared(
        &self,
        p: Prepared,
        cancel: Option<&sandbox::CancelHandle>,
    ) -> Result<RunRecord, EngineError> {
        let Prepared {
            mut record,
            mut sspec,
            spec,
            protected,
            risk,
            ids_desc,
            max_blobs,
            blobs,
            redactor,
            egress,
            path_dirs,
            command_env,
            owner,
            submitted,
        } = p;
        // Time spent queued is not the rehearsal's.
        sspec.t0_ns = sandbox::helper::monotonic_ns();
        let run_id = record.run_id.clone();
        // Saved with the final record, synced (the rules: `store.rs`).
        let envelope = serde_json::to_vec(spec.envelope_for_submission()).expect("serializes");
        if record.state != RunState::Running {
            record.state = RunState::Running;
            self.save_relaxed(&record)?;
        }
        // The command is released once its submission is on disk: by the
        // egress proxy, which hands the sandbox the word; without one, the
        // sandbox starts only then.
        let proxy = match start_egress(&egress, &spec, &mut sspec, &owner, &submitted) {
            Ok(p) => p,
            Err(e) => {
                self.submission_durable(&submitted, &run_id)?;
                record.state = RunState::Failed;
                record.error = Some(format!(
                    "the rehearsal's egress (proxy, DNS responder, declared services) could not start, so nothing ran: {e}"
                ));
                let _ = std::fs::remove_dir_all(&blobs);
                return self.commit_outcome(record, &envelope, false);
            }
        };
        if proxy.is_none() {
            self.submission_durable(&submitted, &run_id)?;
        }
        crate::phase("engine: egress started");
        let t_sandbox = std::time::Instant::now();
        let view = crate::workspace::owner::view::find(&spec.workspace, &spec.workspace_identity);
        let outcome = sandbox::rehearse(
            &sspec,
            &blobs,
            max_blobs,
            cancel,
            view.as_deref().map(super::view_fds),
        );
        crate::phase("engine: sandbox returned");
        let egress_log = proxy.map(|p| p.finish());
        crate::phase("engine: egress finished");
        // A submission that never reached the disk: the sandbox was told
        // so and never started the command; the run is undone.
        self.submission_durable(&submitted, &run_id)?;
        tracing::debug!(run = %run_id, elapsed = ?t_sandbox.elapsed(), "sandbox returned");
        match outcome {
            Ok((mut report, host)) => {
                report_content_not_kept(&mut report, max_blobs);
                if let Some(log) = egress_log {
                    super::egress::fill_egress_report(log, &mut report);
                }
                // Before the report is judged, recorded or journaled: the
                // verdict's reasons quote would-be actions and details too.
                let redactions = redactor.scrub_report(&mut report, sspec.limits.output_bytes);
                // From the scrubbed error output: what the view hid that
                // the command tried to use.
                report.hidden.extend(sandbox::view::explain_hidden(
                    &sspec.view,
                    &sandbox::view::Shown {
                        image: &sspec.image,
                        workspace: &sspec.workspace,
                    },
                    &report.stderr,
                ));
                let dependencies = read_dependencies(
                    &risk,
                    &path_dirs,
                    &protected,
                    &spec,
                    &sspec,
                    &blobs,
                    &mut report,
                );
                verdict::keep_only_judged_times(&spec, Some(&protected), &mut report.changes);
                let mut verdict = verdict::judge_with(
                    &spec,
                    &report,
                    &host,
                    &verdict::JudgeContext {
                        protected: Some(&protected),
                        risk: Some(&risk),
                        path_dirs: &path_dirs,
                        deps: dependencies.as_ref(),
                    },
                );
                super::egress::hint_undeclared_services(&egress, &report, &mut verdict.notes);
                crate::phase("engine: judged");
                record.state = RunState::after_verdict(verdict.decision, &verdict.findings);
                if verdict.decision != verdict::Decision::Promote
                    && record.state == RunState::Rehearsed
                {
                    verdict
                        .notes
                        .insert(0, super::queue::NOT_FOR_A_PERSON.into());
                }
                record.override_required =
                    crate::model::run_state::override_required(verdict.decision);
                let evidence = Evidence {
                    spec: &spec,
                    sspec: &sspec,
                    ids_desc,
                    redactions,
                    command_env,
                };
                let mut rehearsal = self.rehearsal_record(report, &host, evidence);
                rehearsal.dependencies = dependencies;
                record.rehearsal = Some(rehearsal);
                record.verdict = Some(verdict);
                fit_record(&mut record);
                if let Some(reh) = record.rehearsal.as_mut() {
                    reh.evidence_hash = crate::record::evidence_hash(reh);
                }
            }
            Err(e) => {
                record.state = RunState::Failed;
                record.error = Some(match e {
                    SandboxError::Cancelled => {
                        "cancelled before the rehearsal finished; nothing was promoted".into()
                    }
                    // May quote the helper's stderr.
                    e => redactor
                        .redact_str(&e.to_string(), &mut crate::redact::Redactions::default()),
                });
                let _ = std::fs::remove_dir_all(&blobs);
            }
        }
        self.commit_outcome(record, &envelope, sspec.cgroup.is_some())
    }

    /// Journal the outcome, then save it with the envelope, both synced: a
    /// run never shows a final state the journal lacks, and its outcome is
    /// returned only once all three are on disk. The envelope and the new
    /// record are written and synced while the journal syncs (nothing a
    /// reader goes by changes until the record is put in place, after the
    /// journal's entry is on disk): one disk wait instead of three.
    fn commit_outcome(
        &self,
        mut record: RunRecord,
        envelope: &[u8],
        had_cgroups: bool,
    ) -> Result<RunRecord, EngineError> {
        let t_commit = std::time::Instant::now();
        crate::phase("engine: commit");
        let run_id = record.run_id.clone();
        let (journaled, staged) = std::thread::scope(|s| {
            let staged = s.spawn(|| self.stage_with(&record, &[("envelope.json", envelope)]));
            let journaled = self.journal.append(&entries::outcome(&record));
            let staged = staged.join().unwrap_or_else(|_| {
                Err(EngineError::storage(
                    self.run_dir(&record.run_id).join("record.json"),
                    std::io::Error::other("writing the record panicked"),
                ))
            });
            (journaled, staged)
        });
        if let Err(e) = journaled {
            record.state = RunState::Failed;
            record.error = Some(format!("the verdict could not be journaled: {e}"));
            let _ = self.save(&record);
            self.clear_inflight(&run_id);
            return Err(e.into());
        }
        if had_cgroups && record.state == RunState::Failed {
            // A cancelled or killed helper cannot remove its cgroups.
            sandbox::limits::reap_run_cgroups(&run_id);
        }
        crate::phase("engine: journaled");
        staged?;
        self.install(&record)?;
        crate::phase("engine: saved");
        if record.state == RunState::AwaitingApproval {
            self.mark_waiting(&run_id);
        }
        self.clear_inflight(&run_id);
        self.count_usage(&record);
        tracing::debug!(run = %run_id, elapsed = ?t_commit.elapsed(), "verdict saved and journaled");
        crate::phase("engine: done");
        Ok(record)
    }

    /// Mark a run that never reached the sandbox as failed (cancelled while
    /// queued, or the daemon shutting down).
    pub fn fail_unstarted(&self, p: Prepared, why: &str) -> Result<RunRecord, EngineError> {
        self.submission_durable(&p.submitted, &p.record.run_id)?;
        let mut r = p.record;
        r.state = RunState::Failed;
        r.error = Some(why.to_string());
        let _ = std::fs::remove_dir_all(&p.blobs);
        let envelope = serde_json::to_vec(p.spec.envelope_for_submission()).expect("serializes");
        self.save_with(&r, &[("envelope.json", &envelope)])?;
        self.journal.append(&entries::outcome(&r))?;
        self.clear_inflight(&r.run_id);
        self.count_usage(&r);
        Ok(r)
    }

    /// The record's `rehearsal`: the helper's report and the host's, with
    /// what was stripped and enforced named.
    fn rehearsal_record(
        &self,
        report: RehearsalReport,
        host: &HostReport,
        ev: Evidence<'_>,
    ) -> Rehearsal {
        let spec = ev.spec;
        let mut stripped = report.stripped.clone();
        stripped.extend(env_stripped(spec, &ev.command_env));
        let mut enforcement = host.enforcement.clone();
        enforcement.extend(report.enforcement.iter().cloned());
        enforcement.push(env_note(spec, &ev.command_env));
        enforcement.push(format!(
            "timeout: {} s wall clock, whole process tree",
            spec.limits.timeout_s
        ));
        enforcement.push(format!(
            "disk: {} MiB upper layer (tmpfs)",
            spec.limits.disk_mb
        ));
        enforcement.push(format!("output: {} KiB", spec.limits.output_kb));
        let mut limits_hit = report.limits_hit.clone();
        limits_hit.extend(host.limits_hit.iter().cloned());
        limits_hit.sort();
        limits_hit.dedup();
        let mut timings_us = report.timings_us.clone();
        for (phase, us) in &host.timings_us {
            if !timings_us.iter().any(|(p, _)| p == phase) {
                timings_us.push((phase.clone(), *us));
            }
        }
        timings_us.sort_by_key(|(_, us)| *us);
        timings_us.push((
            "engine: answer read".into(),
            (sandbox::helper::monotonic_ns() - ev.sspec.t0_ns) / 1000,
        ));
        let incomplete = incomplete_evidence(&report);
        // As text, with the order of the streams moved along.
        let mut ends = ChunkEnds::of(
            &report.output_order,
            report.stdout.len(),
            report.stderr.len(),
        );
        let stdout = lossy_with_offsets(&report.stdout, &mut ends.stdout);
        let stderr = lossy_with_offsets(&report.stderr, &mut ends.stderr);
        let output_order = ends.into_order(stdout.len(), stderr.len());
        Rehearsal {
            exit_code: report.exit_code,
            signal: report.signal,
            timed_out: report.timed_out,
            duration_ms: report.duration_ms,
            stdout,
            stderr,
            output_order,
            output_truncated: report.output_truncated,
            changes: report.changes,
            blocked: report.blocked,
            stripped,
            limits_hit,
            steps: report.steps,
            leftover_processes_killed: report.leftover_processes_killed
                + host.leftover_processes_killed,
            max_processes: report.max_processes,
            timings_us,
            sandbox: SandboxRecord {
                image: self.opts.image.name.clone(),
                landlock_abi: report.landlock_abi,
                landlock_status: report.landlock_status,
                seccomp: report.seccomp,
                ids: ev.ids_desc,
                enforcement,
                network: if ev.sspec.network_host {
                    "host (the live lane's rerun, as live.network: host grants)".into()
                } else {
                    describe_network(ev.sspec.egress.as_ref(), !ev.spec.network.is_empty())
                },
                limits: Some(spec.limits),
            },
            evidence_hash: String::new(),
            incomplete,
            would_be_actions: report.would_be_actions,
            egress: report.egress,
            redactions: ev.redactions,
            outside_writes: report.outside_writes,
            outside_writes_unlisted: report.outside_writes_unlisted,
            hidden: report.hidden,
            dependencies: None,
        }
    }
}

/// A package manager's run summarised per package (`engine::deps`), and a
/// virtual environment's interpreter links to the caller's interpreter
/// marked as expected.
fn read_dependencies(
    risk: &crate::classify::Classification,
    path_dirs: &[String],
    protected: &crate::workspace::paths::PathMatcher,
    spec: &EnvelopeSpec,
    sspec: &sandbox::spec::SandboxSpec,
    blobs: &std::path::Path,
    report: &mut RehearsalReport,
) -> Option<crate::model::deps::DependencyReport> {
    let owner = std::cell::OnceCell::new();
    let read = |rel: &[u8], max: u64| -> Option<Vec<u8>> {
        let session = owner
            .get_or_init(|| {
                crate::workspace::owner::OwnerSession::for_owner_at(
                    &spec.workspace_identity,
                    &spec.workspace,
                )
                .ok()
            })
            .as_ref()?;
        session
            .read_file(&spec.workspace, &spec.workspace_identity, rel, max)
            .ok()?
    };
    let deps = super::deps::summarise(
        &risk.commands,
        path_dirs,
        &report.changes,
        &super::deps::Sources {
            blobs,
            read_workspace: &read,
        },
        &|tree: &str| {
            protected.matches(tree.as_bytes())
                || tree.split('/').any(|s| s == ".git" || s == ".dryrun")
        },
    );
    super::deps::mark_interpreter_links(
        &mut report.changes,
        deps.as_ref(),
        &sspec.env,
        &spec.workspace,
    );
    deps
}

/// The record's `sandbox.network`: what the command could reach.
fn describe_network(plan: Option<&sandbox::spec::EgressPlan>, allows: bool) -> String {
    let base = match plan {
        Some(_) if allows => {
            "egress proxy only (new network namespace, loopback only; allowlisted names through the run's proxy)"
        }
        Some(_) => {
            "none (new network namespace, loopback only; the run's egress proxy refuses every name)"
        }
        None => "none (new network namespace, loopback only)",
    };
    match plan.map(|e| &e.services[..]).unwrap_or_default() {
        [] => base.into(),
        s => format!(
            "{base}; declared host services forwarded: {}",
            s.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What the record of a rehearsal needs besides the reports.
struct Evidence<'a> {
    spec: &'a EnvelopeSpec,
    sspec: &'a sandbox::spec::SandboxSpec,
    ids_desc: String,
    redactions: crate::redact::Redactions,
    command_env: super::submit::CommandEnvNotes,
}

/// What the record names of the command's environment: the client's
/// variables the filter removed (`env:NAME`; not those the envelope's
/// `env` gives anyway), those whose names are not shell identifiers
/// (counted, never named), and what dryrun provided (`provided:env:NAME`).
fn env_stripped(spec: &EnvelopeSpec, notes: &super::submit::CommandEnvNotes) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(c) = &spec.caller_env {
        out.extend(
            c.removed
                .iter()
                .filter(|n| !spec.env.contains_key(*n))
                .map(|n| format!("env:{n}")),
        );
        if c.unnamed > 0 {
            out.push(crate::model::text::unnamed_variables(c.unnamed));
        }
    }
    out.extend(notes.provided.iter().map(|n| format!("provided:env:{n}")));
    out
}

/// The enforcement line that says where the environment came from.
fn env_note(spec: &EnvelopeSpec, notes: &super::submit::CommandEnvNotes) -> String {
    use crate::caller_env::EnvSource;
    match (notes.source, &spec.caller_env) {
        (EnvSource::Client, Some(c)) => format!(
            "environment: the caller's, filtered ({} kept, {} removed as secret-looking or not passable, {} with names that are not shell identifiers), then the envelope's env ({})",
            c.vars.len(),
            c.removed.len(),
            c.unnamed,
            spec.env.len()
        ),
        _ => format!(
            "environment: the caller sent none: the login environment of the user the command runs as (HOME, USER, LOGNAME, SHELL, the system PATH), then the envelope's env ({})",
            spec.env.len()
        ),
    }
}

/// Why the evidence may differ from what the command does live.
fn incomplete_evidence(report: &RehearsalReport) -> Vec<String> {
    let net = report
        .blocked
        .iter()
        .filter(|b| b.kind == crate::model::BlockedKind::Network)
        .count()
        + report.egress.iter().filter(|e| !e.allowed).count();
    let mut why = Vec::new();
    if net > 0 {
        why.push(format!(
            "the command tried the network {net} time(s) and no stub answered; what it does after those calls differs live"
        ));
    }
    if report.would_be_actions_dropped > 0 {
        why.push(format!(
            "{} would-be action record(s) were not kept (unreadable, or past the first {})",
            report.would_be_actions_dropped,
            sandbox::stubs::MAX_ACTIONS
        ));
    }
    why
}

/// Files the walk could not keep within the run's kept-content budget
/// (counted at apparent size, so a sparse file counts at its full length)
/// make the run hit its disk limit, named in `limits_hit` and `blocked`.
fn report_content_not_kept(report: &mut RehearsalReport, budget: u64) {
    let not_kept: Vec<&str> = report
        .changes
        .iter()
        .filter(|c| c.content_not_kept)
        .map(|c| c.path.as_str())
        .collect();
    if not_kept.is_empty() {
        return;
    }
    let detail = format!(
        "kept content: {} file(s) did not fit the run's kept-content budget of {} MiB (apparent sizes, so sparse files count in full; the budget follows limits.disk_mb); their content was not kept, so the run cannot be promoted: {}{}",
        not_kept.len(),
        budget >> 20,
        not_kept
            .iter()
            .take(5)
            .map(|p| crate::workspace::paths::escape_for_humans(p.as_bytes()))
            .collect::<Vec<_>>()
            .join(", "),
        if not_kept.len() > 5 { ", ..." } else { "" }
    );
    report.blocked.push(crate::model::Blocked {
        kind: crate::model::BlockedKind::Limit,
        detail,
    });
    report.limits_hit.push(crate::model::LimitHit::Disk);
    report.limits_hit.sort();
    report.limits_hit.dedup();
}
