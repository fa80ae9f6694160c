//! Submitting a run: check the envelope against this machine and the
//! caller, classify the command, plan the sandbox (ids, limits, stubs,
//! environment), build the record, charge the risk budget, and journal the
//! submission. The run is then [`Prepared`] for the rehearsal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::run_id::new_run_id;
use super::{
    Engine, EngineError, ID_COUNT, Input, LiveRun, MIN_LANDLOCK_ABI, Prepared, authz, bound,
    entries, now_rfc3339, system_policy_dir, unix_now,
};
use crate::classify::Classification;
use crate::envelope::{EnvelopeSpec, Mode};
use crate::journal::Actor;
use crate::model::stubs::{ReplaySet, StubTable};
use crate::record::{IntentRecord, RunRecord, RunState, SCHEMA};
use crate::sandbox;
use crate::sandbox::spec::{IdPlan, LandlockPlan, SandboxLimits, SandboxSpec, StubPlan};
use crate::workspace::owner::OwnerSession;
use crate::workspace::paths::PathMatcher;

/// What the policy says about a command, read with the workspace owner's
/// rights.
struct Classified {
    policy: Arc<crate::policy::Policy>,
    risk: Classification,
    protected: Arc<PathMatcher>,
    /// The workspace owner's groups: the evidence walk's reader's.
    owner_groups: Vec<u32>,
    /// The group the command runs with as root's sandbox: the workspace
    /// directory's when its owner is a member, else the owner's own
    /// (`Creds::of_user`; a directory given with `chown UID DIR` keeps
    /// group 0, which must not become the command's).
    owner_gid: u32,
}

/// Host-side file access with `actor`'s own rights (for resolving a
/// `working_dir` it names).
pub fn access_as(actor: &Actor) -> Result<OwnerSession, EngineError> {
    OwnerSession::start(&crate::workspace::owner::Creds::of_user(
        actor.uid, actor.gid,
    ))
    .map_err(|e| EngineError::invalid(Input::Workspace, e.to_string()))
}

impl Engine {
    /// Rehearse the envelope and judge it, in this process. A sandbox that
    /// could not be built yields a record in state `failed` (never a silent pass).
    /// `requester`: the session that resolved the envelope's `working_dir`
    /// (see [`Engine::prepare`]).
    pub fn execute(
        &self,
        spec: &EnvelopeSpec,
        actor: &Actor,
        requester: OwnerSession,
    ) -> Result<RunRecord, EngineError> {
        // Rehearsed at once: saved `running` from the start (one record
        // write fewer than `queued` then `running`).
        let prepared = self.prepare_in(
            spec,
            actor,
            (None, None),
            RunState::Running,
            Some(requester),
            true,
        )?;
        self.rehearse_prepared(prepared, None)
    }

    /// Validate the envelope against this machine, classify the command,
    /// allocate the run and journal its submission. The record is saved in
    /// state `queued`; [`Engine::rehearse_prepared`] carries it on.
    /// `requester` is the session that resolved the envelope's
    /// `working_dir`: the workspace policy is read through it when it acts
    /// with exactly the owner's credentials (one agent, not two).
    /// `answered_after_verdict`: the caller hears of the run only with its
    /// verdict (a client that waits), so the submission's sync may run
    /// while the run waits for its rehearsal; otherwise it is on disk
    /// before this returns (the run is answered as queued at once).
    pub fn prepare(
        &self,
        spec: &EnvelopeSpec,
        actor: &Actor,
        requester: OwnerSession,
        answered_after_verdict: bool,
    ) -> Result<Prepared, EngineError> {
        let t_prepare = std::time::Instant::now();
        let r = self.prepare_in(
            spec,
            actor,
            (None, None),
            RunState::Queued,
            Some(requester),
            answered_after_verdict,
        );
        tracing::debug!(elapsed = ?t_prepare.elapsed(), "run prepared");
        r
    }

    /// `live`: the live lane's rerun of another run (network and host
    /// variables as its `live:` section grants; never persisted).
    /// `replay`: the recorded answers of a replayed run.
    pub(super) fn prepare_run(
        &self,
        spec: &EnvelopeSpec,
        actor: &Actor,
        live: Option<&LiveRun>,
        replay: Option<ReplaySet>,
    ) -> Result<Prepared, EngineError> {
        self.prepare_in(spec, actor, (live, replay), RunState::Queued, None, false)
    }

    /// [`Engine::prepare_run`], the record first saved in `state`
    /// (`queued`, or `running` when the rehearsal follows at once).
    /// `sync_later`: see [`Engine::persist_submission`].
    fn prepare_in(
        &self,
        spec: &EnvelopeSpec,
        actor: &Actor,
        (live, replay): (Option<&LiveRun>, Option<ReplaySet>),
        state: RunState,
        requester: Option<OwnerSession>,
        sync_later: bool,
    ) -> Result<Prepared, EngineError> {
        // The looks at the host's paths below share their judged mounts.
        let _looks = super::Looks::hold();
        let mut spec = self.fit_to_this_machine(spec, actor)?;
        // The workspace as resolved for the requester (no symlinks, device,
        // inode and owner): what the sandbox mounts and runs as.
        let ws = spec.workspace_identity;
        authz::may_submit_for(actor, &spec.workspace, ws.uid)?;
        // The live lane's rerun carries out an approved run: not refused here.
        if actor.via == "daemon" && live.is_none() {
            self.check_quota(actor.uid)?;
        }
        let t0_ns = sandbox::helper::monotonic_ns();
        crate::phase("engine: fitted");
        let c = classify(&spec, &self.state_dir, requester)?;
        crate::phase("engine: classified");
        let egress = self.opts.egress.with_policy(&c.policy.egress);
        // Declared services the system does not list refuse the run before
        // anything is allocated (the rehearsal's egress asks again).
        crate::egress::service::admit(&egress.services, &spec.services, &spec.workspace)
            .map_err(|(f, m)| EngineError::invalid(Input::Request, format!("{f}: {m}")))?;
        let command_env = crate::caller_env::command_env(
            spec.caller_env.as_ref(),
            spec.workspace_identity.uid,
            &spec.env,
            &spec.workspace,
        );
        // The allowlist within the system's: presets expanded for the user
        // the command runs as, every entry admitted by the one rule.
        let preset_notes = super::egress::admit_allowlist(
            &egress,
            &mut spec,
            (ws.uid, c.owner_gid),
            &command_env.vars,
        )?;
        let spec = &spec;

        let run_id = new_run_id();
        let dir = self.run_dir(&run_id);
        // The run's directory only: `blobs/` is made when the first blob
        // arrives (a run that changes nothing never has one).
        let blobs = dir.join("blobs");
        std::fs::create_dir_all(&dir).map_err(|source| EngineError::storage(&dir, source))?;

        let mut sspec = self.sandbox_spec(&run_id, spec, &c, live, replay.clone(), &command_env)?;
        sspec.t0_ns = t0_ns;
        let path_dirs = self.path_dirs(spec, &sspec);
        let mut record = new_record(&run_id, spec, actor, &c.risk, live, replay.as_ref());
        record.intent.network_presets = preset_notes;
        record.state = state;
        record.fleet_policy_version = c.policy.fleet_version;
        self.charge_budget(actor, &run_id, &c.risk, &dir)?;
        // Kept content, counted at apparent size: the upper layer's size
        // plus a little for "before" copies (see `kept_content_budget`).
        let max_blobs = sandbox::spec::kept_content_budget(sspec.limits.disk_bytes);
        crate::phase("engine: planned");
        let submitted = self.persist_submission(&record, actor, &c.risk, &dir, sync_later)?;
        crate::phase("engine: persisted");
        // The agent moved on: what it left waiting here leaves the queue.
        if live.is_none() {
            self.supersede_waiting(&record);
        }
        let (ids_desc, risk) = (describe_ids_of(&sspec), c.risk);
        Ok(Prepared {
            record,
            sspec,
            spec: spec.clone(),
            protected: c.protected,
            risk,
            ids_desc,
            max_blobs,
            blobs,
            egress,
            redactor: crate::redact::Redactor::new(
                spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                live.iter()
                    .flat_map(|l| l.extra_env.iter())
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            ),
            path_dirs,
            command_env: CommandEnvNotes {
                provided: command_env.provided,
                source: command_env.source,
            },
            owner: (ws.uid, c.owner_gid, c.owner_groups),
            submitted,
        })
    }

    /// The directories inside the workspace on a `PATH` that counts: the
    /// rehearsal's own, the in-process caller's, and the per-user ones a
    /// login shell adds for the workspace's owner and the caller
    /// (`~/.local/bin`, `~/bin`).
    fn path_dirs(&self, spec: &EnvelopeSpec, sspec: &SandboxSpec) -> Vec<String> {
        let mut paths: Vec<&std::ffi::OsStr> = sspec
            .env
            .iter()
            .filter(|(k, _)| k == "PATH")
            .map(|(_, v)| std::ffi::OsStr::new(v.as_str()))
            .collect();
        if let Some(p) = &self.opts.caller.path {
            paths.push(p);
        }
        let owner_home =
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(spec.workspace_identity.uid))
                .ok()
                .flatten()
                .map(|u| u.dir);
        let dirs: Vec<PathBuf> = owner_home
            .iter()
            .chain(self.opts.caller.home.iter())
            .filter(|h| h.is_absolute() && *h != Path::new("/"))
            .flat_map(|h| [h.join(".local/bin"), h.join("bin")])
            .collect();
        bound::path_dirs_in(&spec.workspace, &paths, &dirs)
    }

    /// The envelope within this engine's ceilings, for a workspace the
    /// sandbox can mount and the workspace bound allows, with the paths no
    /// run may touch added to its forbidden ones, on a kernel that can
    /// rehearse it.
    fn fit_to_this_machine(
        &self,
        spec: &EnvelopeSpec,
        actor: &Actor,
    ) -> Result<EnvelopeSpec, EngineError> {
        // The configured ceilings first: a run asking for more never starts.
        let mut fitted = spec.clone();
        fitted
            .fit_limits(&self.opts.defaults, &self.opts.ceilings)
            .map_err(|e| EngineError::AboveCeiling {
                field: e.field,
                asked: e.asked,
                ceiling: e.ceiling,
                ceilings_of: self.opts.ceilings_of,
            })?;
        let ws = &fitted.workspace;
        if let Some(tree) = self.opts.image.covers(ws) {
            return Err(EngineError::invalid(
                Input::Workspace,
                format!(
                    "{} lies inside {}, which the sandbox image mounts read-only; use a project directory elsewhere",
                    ws.display(),
                    tree.display()
                ),
            ));
        }
        for special in ["/proc", "/sys", "/dev"] {
            if ws.starts_with(special) {
                return Err(EngineError::invalid(
                    Input::Workspace,
                    format!(
                        "{} lies inside {special}, which the sandbox replaces; use a project directory",
                        ws.display()
                    ),
                ));
            }
        }
        if self.state_dir.starts_with(ws) {
            return Err(EngineError::invalid(
                Input::Workspace,
                format!(
                    "the state directory {} is inside the workspace {}; choose another --state-dir",
                    self.state_dir.display(),
                    ws.display()
                ),
            ));
        }
        bound::check(
            &fitted.workspace,
            &fitted.workspace_identity,
            actor.uid,
            self.opts.caller.home.as_deref(),
            Some(&self.state_dir),
        )?;
        fitted.forbidden =
            PathMatcher::new(&bound::with_builtin_forbidden(&fitted.forbidden.patterns))
                .map_err(|e| EngineError::invalid(Input::Request, e.to_string()))?;
        let abi = sandbox::probe::landlock_abi();
        if abi < MIN_LANDLOCK_ABI && !self.opts.allow_degraded {
            return Err(EngineError::LandlockTooOld {
                found: abi,
                needed: MIN_LANDLOCK_ABI,
            });
        }
        Ok(fitted)
    }

    /// What the sandbox is told: command, environment, limits, ids, image,
    /// Landlock, cgroups and stubs.
    fn sandbox_spec(
        &self,
        run_id: &str,
        spec: &EnvelopeSpec,
        c: &Classified,
        live: Option<&LiveRun>,
        replay: Option<ReplaySet>,
        command_env: &crate::caller_env::CommandEnv,
    ) -> Result<SandboxSpec, EngineError> {
        let ws = spec.workspace_identity;
        let ids = self.plan_ids(ws.uid, c.owner_gid)?;
        let mut env = command_env.vars.clone();
        if let Some(l) = live {
            env.retain(|(k, _)| !l.extra_env.iter().any(|(n, _)| n == k));
            env.extend(l.extra_env.iter().cloned());
        }
        let view = sandbox::view::plan_view(&sandbox::view::ViewRequest {
            user: &view_user(&ids, c),
            env: &env,
            workspace: &spec.workspace,
            state_dir: &self.state_dir,
            image: &self.opts.image,
            policy_masks: &c.policy.view_masks,
            reaches_home: &super::bound::reaches_a_home_by_another_name,
        });
        Ok(SandboxSpec {
            run_id: run_id.to_string(),
            parent_pid: std::process::id() as i32,
            workspace: spec.workspace.clone(),
            steps: spec.steps.clone(),
            shell: PathBuf::from("/bin/bash"),
            env,
            // The client's, else this engine's own (the caller's when
            // in-process).
            umask: spec
                .caller_umask
                .or_else(crate::caller_env::umask_of_this_process)
                .unwrap_or(0o022),
            limits: SandboxLimits {
                timeout_ms: spec.limits.timeout_s * 1000,
                memory_bytes: spec.limits.memory_mb << 20,
                pids: spec.limits.pids,
                output_bytes: spec.limits.output_kb << 10,
                disk_bytes: spec.limits.disk_mb << 20,
                tmp_bytes: self.opts.image.tmp_size_mb << 20,
                cpus: spec.limits.cpus,
            },
            image: self.opts.image.clone(),
            landlock: LandlockPlan {
                min_abi: MIN_LANDLOCK_ABI,
                allow_degraded: self.opts.allow_degraded,
            },
            cgroup: sandbox::limits::plan_cgroups(run_id),
            diff_before_max: 256 * 1024,
            t0_ns: 0,
            workspace_identity: (ws.dev, ws.ino),
            client_view: crate::workspace::owner::view::find(&spec.workspace, &ws).is_some(),
            network_host: live.is_some_and(|l| l.network_host),
            reader_groups: c
                .owner_groups
                .iter()
                .copied()
                .filter(|g| *g < ID_COUNT)
                .collect(),
            // The live lane's rerun makes the real calls: no stubs there.
            stubs: if live.is_some() {
                StubPlan::default()
            } else {
                let mut rules = spec.stubs.clone();
                rules.extend(c.policy.stubs.iter().cloned());
                StubPlan::new(&StubTable::new(rules, replay))
            },
            egress: None,
            view,
            mapped_groups: match &ids {
                IdPlan::SelfOnly { uid, gid } => sandbox::ids::delegated_groups(*uid, *gid),
                IdPlan::Shifted { .. } => Vec::new(),
            },
            ids,
        })
    }

    /// Which host ids the sandbox's ids map to: as root, a shifted range
    /// where the command runs as the workspace's owner; otherwise only the
    /// caller's own id.
    fn plan_ids(&self, uid: u32, gid: u32) -> Result<IdPlan, EngineError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(IdPlan::SelfOnly {
                uid: nix::unistd::geteuid().as_raw(),
                gid: nix::unistd::getegid().as_raw(),
            });
        }
        if uid >= ID_COUNT || gid >= ID_COUNT {
            return Err(EngineError::invalid(
                Input::Workspace,
                format!(
                    "the workspace belongs to {uid}:{gid}; as root, dryrun maps ids 0-{} only: use a workspace owned by a smaller id",
                    ID_COUNT - 1
                ),
            ));
        }
        Ok(IdPlan::Shifted {
            host_base: self.opts.id_base,
            count: ID_COUNT,
            run_uid: uid,
            run_gid: gid,
        })
    }

    /// Charge a daemon client's risk budget for the run (its directory
    /// goes when the budget is spent).
    fn charge_budget(
        &self,
        actor: &Actor,
        run_id: &str,
        risk: &Classification,
        dir: &Path,
    ) -> Result<(), EngineError> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        if actor.via != "daemon" || risk.score == 0 {
            return Ok(());
        }
        let who = format!("uid:{}", actor.uid);
        budget
            .charge(&who, run_id, risk.score as u64, unix_now())
            .map_err(|e| match e {
                crate::policy::budget::BudgetError::Exhausted { retry_after_s, .. } => {
                    let _ = std::fs::remove_dir_all(dir);
                    EngineError::BudgetExhausted {
                        message: e.to_string(),
                        retry_after_s,
                    }
                }
                other => EngineError::BudgetLedger(other),
            })?;
        Ok(())
    }

    /// Save the first record, mark the run in flight, and journal it. Only
    /// the journal record is synced (the rules: `store.rs`); the envelope
    /// is saved, synced, with the final record. With `sync_later` the
    /// entry's sync runs while the sandbox is built (the command waits for
    /// it, see [`Prepared`]; for a run nobody hears of before its verdict);
    /// otherwise (a queued run, answered before it is rehearsed) it is on
    /// disk when this returns. A run whose submission could not be
    /// journaled was never acknowledged and leaves no trace but the error
    /// ([`Engine::undo_submission`]).
    fn persist_submission(
        &self,
        record: &RunRecord,
        actor: &Actor,
        risk: &Classification,
        dir: &Path,
        sync_later: bool,
    ) -> Result<crate::journal::Durable, EngineError> {
        let undo = |e: EngineError| {
            self.undo_submission(&record.run_id, dir);
            e
        };
        self.save_first(record).map_err(undo)?;
        self.mark_inflight(&record.run_id).map_err(undo)?;
        let entry = entries::run_submitted(record, actor, risk);
        if sync_later {
            return Ok(self.journal.append_later(&entry));
        }
        let appended = self.journal.append(&entry).map_err(|e| undo(e.into()))?;
        Ok(crate::journal::Durable::settled(appended))
    }

    /// Until the run's submission is on disk; if it never will be, the run
    /// is undone.
    pub(super) fn submission_durable(
        &self,
        submitted: &crate::journal::Durable,
        run_id: &str,
    ) -> Result<(), EngineError> {
        submitted.wait().map(|_| ()).map_err(|e| {
            self.undo_submission(run_id, &self.run_dir(run_id));
            e.into()
        })
    }

    /// A submission the journal does not hold leaves no trace: no in-flight
    /// marker, no run directory (`dir`).
    fn undo_submission(&self, run_id: &str, dir: &Path) {
        self.clear_inflight(run_id);
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The workspace's own policy (read with its owner's rights) over the
/// system's, and the command classified by it alone.
/// `requester`: a session of the requester's, taken over when it acts
/// with exactly the owner's credentials.
fn classify(
    spec: &EnvelopeSpec,
    state_dir: &Path,
    requester: Option<OwnerSession>,
) -> Result<Classified, EngineError> {
    let owner = match requester {
        Some(s) => OwnerSession::for_owner_from(&spec.workspace_identity, s),
        None => OwnerSession::for_owner_at(&spec.workspace_identity, &spec.workspace),
    }
    .map_err(|e| EngineError::invalid(Input::Workspace, e.to_string()))?;
    let ws_policy =
        crate::policy::read_workspace_policy(&owner, &spec.workspace, &spec.workspace_identity)?;
    // Where the root repository's pointer and config put its hooks and
    // config: protected for this run like `.git/hooks/` and `.git/config`.
    let repository =
        super::gitdir::repository_patterns(&owner, &spec.workspace, &spec.workspace_identity);
    // The same ids and groups are the evidence walk's reader's.
    let owner_groups = owner.creds().groups.clone();
    let owner_gid = owner.creds().gid;
    drop(owner);
    let policy =
        crate::policy::Policy::load_cached(&system_policy_dir(), ws_policy, Some(state_dir))?;
    let risk = crate::classify::classify_steps(
        &spec.steps,
        spec.uses_steps,
        &policy,
        &crate::classify::Options {
            workspace: Some(spec.workspace.clone()),
            is_step: spec.uses_steps,
        },
    );
    let protected = match repository.is_empty() {
        true => policy.protected_matcher(),
        false => Arc::new(PathMatcher::deferred_any_depth(
            &[policy.protected_matcher().patterns.clone(), repository].concat(),
        )),
    };
    Ok(Classified {
        policy,
        risk,
        protected,
        owner_groups,
        owner_gid,
    })
}

/// The record of a run just accepted, in state `queued`.
fn new_record(
    run_id: &str,
    spec: &EnvelopeSpec,
    actor: &Actor,
    risk: &Classification,
    live: Option<&LiveRun>,
    replay: Option<&ReplaySet>,
) -> RunRecord {
    RunRecord {
        schema: SCHEMA.into(),
        run_id: run_id.to_string(),
        task: spec.task.clone(),
        command: spec.command.clone(),
        steps: spec.uses_steps.then(|| spec.steps.clone()),
        workspace: spec.workspace.display().to_string(),
        created_at: now_rfc3339(),
        envelope_hash: spec.envelope_hash(),
        intent: IntentRecord {
            summary: spec.summary.clone(),
            mode: match spec.mode {
                Mode::ReadOnly => "read_only".into(),
                Mode::Mutating => "mutating".into(),
            },
            expected_writes: spec.expected_writes.patterns.clone(),
            forbidden_paths: spec.forbidden.patterns.clone(),
            reviewer_note: spec.reviewer_note.clone(),
            network: spec.network.iter().map(|p| p.to_string()).collect(),
            require_success: spec.envelope.intent.require_success,
            services: spec.services.iter().map(|s| s.to_string()).collect(),
            network_presets: Vec::new(),
        },
        risk: Some(risk.clone()),
        rehearsal: None,
        verdict: None,
        state: RunState::Queued,
        error: None,
        receipt: None,
        submitted_by: Some(actor.clone()),
        approvals: Vec::new(),
        live: Some(crate::record::LiveRecord {
            mode: spec.live.mode,
            network: spec.live.network,
            env_from_host: spec.live.env_from_host.clone(),
        }),
        rerun_of: live.map(|l| l.rerun_of.clone()),
        override_required: false,
        rejected_because: None,
        replay_of: replay.map(|r| crate::record::ReplayLink {
            baseline: r.baseline.clone(),
            novel: r.novel.as_str().into(),
        }),
        workspace_identity: Some(spec.workspace_identity),
        workspace_view: crate::workspace::owner::view::find(
            &spec.workspace,
            &spec.workspace_identity,
        )
        .map(|v| v.describe()),
        superseded_by: None,
        fleet_policy_version: None,
    }
}

/// The host user whose world the rehearsal shows: the one the command
/// runs as (the workspace's owner as root's sandbox, else this process's
/// own user), with its groups.
fn view_user(ids: &IdPlan, c: &Classified) -> sandbox::view::access::HostUser {
    match *ids {
        IdPlan::Shifted {
            run_uid, run_gid, ..
        } => sandbox::view::access::HostUser {
            uid: run_uid,
            gid: run_gid,
            groups: c.owner_groups.clone(),
        },
        IdPlan::SelfOnly { uid, gid } => sandbox::view::access::HostUser {
            uid,
            gid,
            groups: nix::unistd::getgroups()
                .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
                .unwrap_or_default(),
        },
    }
}

/// The id mapping as the record states it.
fn describe_ids(ids: &IdPlan) -> String {
    match *ids {
        IdPlan::Shifted {
            host_base: base,
            count,
            run_uid: uid,
            run_gid: gid,
        } => format!(
            "shifted: sandbox ids 0-{} are host ids {base}-{}; the command runs as {uid}:{gid} (host {}:{})",
            count - 1,
            base + count - 1,
            base + uid,
            base + gid
        ),
        IdPlan::SelfOnly { uid, gid } => {
            format!("self: the only id inside is the caller's own ({uid}:{gid})")
        }
    }
}

/// What the record says of a command's environment besides what the
/// client's filter removed (`spec.caller_env`).
pub(super) struct CommandEnvNotes {
    /// Set by dryrun, not the caller: `provided:env:NAME`.
    pub provided: Vec<String>,
    pub source: crate::caller_env::EnvSource,
}

/// [`describe_ids`], with the groups a self plan maps besides the caller's
/// own.
fn describe_ids_of(sspec: &SandboxSpec) -> String {
    match sspec.mapped_groups.as_slice() {
        [] => describe_ids(&sspec.ids),
        g => format!(
            "{}; and the groups /etc/subgid delegates to it ({}), through newgidmap (the enforcement list says whether they were mapped)",
            describe_ids(&sspec.ids),
            g.iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
