//! Rehearsing a prepared run: the sandbox, then the evidence scrubbed of
//! secrets, judged, recorded and journaled.

use super::egress::start_egress;
use super::store::fit_record;
use super::{Engine, EngineError, Prepared, entries};
use crate::envelope::EnvelopeSpec;
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
        let proxy = match start_egress(&egress, &spec, &mut sspec) {
            Ok(p) => p,
            Err(e) => {
                record.state = RunState::Failed;
                record.error = Some(format!(
                    "the rehearsal's egress proxy could not start, so nothing ran: {e}"
                ));
                let _ = std::fs::remove_dir_all(&blobs);
                return self.commit_outcome(record, &envelope, false);
            }
        };
        let t_sandbox = std::time::Instant::now();
        let outcome = sandbox::rehearse(&sspec, &blobs, max_blobs, cancel);
        eprintln!("TIMING sandbox {:?}", t_sandbox.elapsed());
        let egress_log = proxy.map(|p| p.finish());
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
                let verdict = verdict::judge_with(
                    &spec,
                    &report,
                    &host,
                    &verdict::JudgeContext {
                        protected: Some(&protected),
                        risk: Some(&risk),
                        path_dirs: &path_dirs,
                    },
                );
                record.state = RunState::after_verdict(verdict.decision);
                record.override_required =
                    crate::model::run_state::override_required(verdict.decision);
                let evidence = Evidence {
                    spec: &spec,
                    sspec: &sspec,
                    ids_desc,
                    redactions,
                    local: record
                        .submitted_by
                        .as_ref()
                        .is_none_or(|a| a.via == "local"),
                };
                record.rehearsal = Some(self.rehearsal_record(report, &host, evidence));
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
    /// returned only once all three are on disk.
    fn commit_outcome(
        &self,
        mut record: RunRecord,
        envelope: &[u8],
        had_cgroups: bool,
    ) -> Result<RunRecord, EngineError> {
        let t_commit = std::time::Instant::now();
        let run_id = record.run_id.clone();
        if let Err(e) = self.journal.append(&entries::outcome(&record)) {
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
        self.save_with(&record, &[("envelope.json", envelope)])?;
        self.clear_inflight(&run_id);
        self.count_usage(&record);
        tracing::debug!(run = %run_id, elapsed = ?t_commit.elapsed(), "verdict saved and journaled");
        Ok(record)
    }

    /// Mark a run that never reached the sandbox as failed (cancelled while
    /// queued, or the daemon shutting down).
    pub fn fail_unstarted(&self, p: Prepared, why: &str) -> Result<RunRecord, EngineError> {
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
        // Only the submitter's own variables are named: in-process, this
        // process's environment is the submitter's; a daemon's environment
        // is its own and never named to a client.
        if ev.local {
            let caller = caller_env_names();
            for n in caller.secret_looking {
                if !spec.env.contains_key(&n) {
                    stripped.push(format!("env:{n}"));
                }
            }
            // Never named: counted.
            if caller.not_identifiers > 0 {
                stripped.push(crate::model::text::unnamed_variables(
                    caller.not_identifiers,
                ));
            }
        }
        let mut enforcement = host.enforcement.clone();
        enforcement.extend(report.enforcement.iter().cloned());
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
        Rehearsal {
            exit_code: report.exit_code,
            signal: report.signal,
            timed_out: report.timed_out,
            duration_ms: report.duration_ms,
            stdout: String::from_utf8_lossy(&report.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&report.stderr).into_owned(),
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
                } else if ev
                    .sspec
                    .egress
                    .as_ref()
                    .is_some_and(|e| e.proxy_port.is_some())
                {
                    "egress proxy only (new network namespace, loopback only; allowlisted names through the run's proxy)".into()
                } else {
                    "none (new network namespace, loopback only)".into()
                },
            },
            evidence_hash: String::new(),
            incomplete,
            would_be_actions: report.would_be_actions,
            egress: report.egress,
            redactions: ev.redactions,
            outside_writes: report.outside_writes,
            outside_writes_unlisted: report.outside_writes_unlisted,
            hidden: report.hidden,
        }
    }
}

/// What the record of a rehearsal needs besides the reports.
struct Evidence<'a> {
    spec: &'a EnvelopeSpec,
    sspec: &'a sandbox::spec::SandboxSpec,
    ids_desc: String,
    redactions: crate::redact::Redactions,
    /// Submitted in-process (this process's environment is the submitter's).
    local: bool,
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

/// What a local run's record says of the caller's environment (the
/// sandbox never inherits it): the names that look like credentials, and
/// how many variables have a name that is not a shell identifier (never
/// named: such a name can carry anything, terminal escapes included).
pub struct CallerEnvNames {
    pub secret_looking: Vec<String>,
    pub not_identifiers: usize,
}

/// See [`CallerEnvNames`].
pub fn caller_env_names() -> CallerEnvNames {
    let (names, others): (Vec<_>, Vec<_>) = std::env::vars_os()
        .map(|(k, _)| k.into_string().ok())
        .partition(|k| {
            k.as_deref()
                .is_some_and(crate::model::text::is_shell_identifier)
        });
    CallerEnvNames {
        secret_looking: secret_looking(names.into_iter().flatten()),
        not_identifiers: others.len(),
    }
}

/// The names among `names` that look like credentials, sorted.
fn secret_looking(names: impl Iterator<Item = String>) -> Vec<String> {
    const MORE_MARKERS: &[&str] = &["AUTH", "SESSION", "COOKIE"];
    const PREFIXES: &[&str] = &[
        "AWS_",
        "GH_",
        "GITHUB_",
        "GOOGLE_",
        "AZURE_",
        "OPENAI_",
        "ANTHROPIC_",
        "SSH_AUTH_SOCK",
        "DOCKER_",
        "KUBECONFIG",
        "NPM_",
        "PYPI_",
        "VAULT_",
    ];
    let mut names: Vec<String> = names
        .filter(|k| {
            let up = k.to_ascii_uppercase();
            crate::classify::SECRET_MARKERS
                .iter()
                .chain(MORE_MARKERS)
                .any(|m| up.contains(m))
                || PREFIXES.iter().any(|p| up.starts_with(p))
        })
        .collect();
    names.sort();
    names
}
