//! The envelope: what the caller submits. Parsed strictly (unknown
//! fields are errors) and validated once into an [`EnvelopeSpec`]; code past
//! validation never re-checks.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::workspace::paths::{PathMatcher, PatternError};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Envelope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<PathBuf>,
    #[serde(default)]
    pub intent: Intent,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub stubs: BTreeMap<String, crate::policy::stubs::StubConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Live>,
    /// The submitting client's own environment, filled by dryrun's clients
    /// (absent: the login default). Only what passes the filter is kept,
    /// hashed and saved (see `crate::caller_env`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_env: Option<BTreeMap<String, String>>,
    /// The submitting client's file mode creation mask (`umask`, 0 to
    /// 0o777), filled by dryrun's clients: files the command creates get
    /// the modes they would get in the client's own shell. Absent: the
    /// engine's own (in-process, the caller's; a daemon's, its unit's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_umask: Option<u32>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Mode {
    ReadOnly,
    #[default]
    Mutating,
}

/// `intent.network`: `none` or `{allow: [...], services: [...]}` (see `crate::egress`).
pub(crate) use crate::egress::intent::NetworkIntent as Network;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Intent {
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub expected_writes: Vec<String>,
    #[serde(default)]
    pub forbidden_paths: Vec<String>,
    #[serde(default)]
    pub network: Network,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer_note: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_success: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_kb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
}

impl Limits {
    /// The field named `name` (see [`LimitsSpec::fields`]).
    fn get(&self, name: &str) -> Option<u64> {
        match name {
            "timeout_s" => self.timeout_s,
            "memory_mb" => self.memory_mb,
            "pids" => self.pids,
            "output_kb" => self.output_kb,
            "disk_mb" => self.disk_mb,
            _ => self.cpus,
        }
    }
}

pub(crate) use crate::model::{LiveMode, LiveNetwork};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Live {
    #[serde(default)]
    pub mode: LiveMode,
    #[serde(default)]
    pub network: LiveNetwork,
    #[serde(default)]
    pub env_from_host: Vec<String>,
}

/// `dryrun.yaml` at a workspace root.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct TaskFile {
    #[serde(default)]
    pub tasks: BTreeMap<String, Envelope>,
    /// The default intent of commands an agent host's hook rehearses
    /// (`dryrun hook claude-code|codex`); absent: the built-in default.
    #[serde(default)]
    pub hook: Option<HookIntent>,
}

/// `hook:` in `dryrun.yaml`: what an agent's shell commands may write when
/// they reach dryrun through a hook, which declares no intent of its own.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct HookIntent {
    /// Globs the agent's commands may write (default: everything).
    #[serde(default)]
    pub expected_writes: Option<Vec<String>>,
    /// Globs they must never touch (added to the built-in list).
    #[serde(default)]
    pub forbidden_paths: Vec<String>,
    /// `read_only` blocks every write.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// Each rehearsal's limits (absent: the engine's defaults, sized to
    /// the machine; at most its ceilings). The hook's own deadline follows
    /// `timeout_s`.
    #[serde(default)]
    pub timeout_s: Option<u64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub disk_mb: Option<u64>,
    #[serde(default)]
    pub pids: Option<u64>,
    #[serde(default)]
    pub cpus: Option<u64>,
    #[serde(default)]
    pub output_kb: Option<u64>,
    /// Variables given to every rehearsed command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Codex (which cannot ask): how long the rewritten command of a run
    /// that needs approval waits for a reviewer (default 300 s).
    #[serde(default)]
    pub await_approval_s: Option<u64>,
    /// A non-zero exit blocks (default: a failure inside the intent is a result).
    #[serde(default)]
    pub require_success: bool,
    /// What the agent's commands may reach, as `intent.network`: names,
    /// registry presets (`npm`, `pypi`, ...) and host services, within
    /// what the system policy allows.
    #[serde(default)]
    pub network: Network,
}

impl HookIntent {
    /// The `limits` of the hook's envelopes, with `timeout_s` as given.
    pub(crate) fn limits(&self, timeout_s: u64) -> Limits {
        Limits {
            timeout_s: Some(timeout_s),
            memory_mb: self.memory_mb,
            pids: self.pids,
            output_kb: self.output_kb,
            disk_mb: self.disk_mb,
            cpus: self.cpus,
        }
    }
}

/// Validated limits in plain units. What a run gets for a field it does
/// not ask for, and the most it may ask for, are the engine's (sized to the
/// machine: `engine::machine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsSpec {
    pub timeout_s: u64,
    pub memory_mb: u64,
    pub pids: u64,
    pub output_kb: u64,
    pub disk_mb: u64,
    /// CPUs' worth of time per period (a cgroup's CPU quota).
    #[serde(default)]
    pub cpus: u64,
}

/// The lowest value each limit field accepts.
pub(crate) const LIMIT_MINIMA: LimitsSpec = LimitsSpec {
    timeout_s: 1,
    memory_mb: 16,
    pids: 8,
    output_kb: 1,
    disk_mb: 1,
    cpus: 1,
};

/// The highest value each limit field accepts, whatever the ceilings say;
/// a configured ceiling may not exceed it.
pub(crate) const LIMIT_MAXIMA: LimitsSpec = LimitsSpec {
    timeout_s: 86_400,
    memory_mb: 1 << 20,
    pids: 1 << 20,
    output_kb: 1 << 20,
    disk_mb: 1 << 20,
    cpus: 4096,
};

/// A limit the envelope asked for above the configured ceiling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AboveCeiling {
    pub field: &'static str,
    pub asked: u64,
    pub ceiling: u64,
}

impl LimitsSpec {
    /// `(name, value)` of each field, in envelope order.
    pub fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("timeout_s", self.timeout_s),
            ("memory_mb", self.memory_mb),
            ("pids", self.pids),
            ("output_kb", self.output_kb),
            ("disk_mb", self.disk_mb),
            ("cpus", self.cpus),
        ]
    }

    pub(crate) fn field_mut(&mut self, name: &str) -> &mut u64 {
        match name {
            "timeout_s" => &mut self.timeout_s,
            "memory_mb" => &mut self.memory_mb,
            "pids" => &mut self.pids,
            "output_kb" => &mut self.output_kb,
            "disk_mb" => &mut self.disk_mb,
            _ => &mut self.cpus,
        }
    }
}

/// A validated envelope.
#[derive(Debug, Clone)]
pub(crate) struct EnvelopeSpec {
    pub task: Option<String>,
    pub steps: Vec<String>,
    pub uses_steps: bool,
    /// The command as recorded: the shell string, or the steps joined by
    /// ` && ` (they run in that order and stop at the first failure).
    pub command: String,
    pub workspace: PathBuf,
    /// The workspace directory as resolved for the requester (device,
    /// inode, owner): what the sandbox mounts and the live lane writes.
    pub workspace_identity: crate::workspace::apply::Identity,
    pub summary: String,
    pub mode: Mode,
    pub expected_writes: PathMatcher,
    pub forbidden: PathMatcher,
    pub reviewer_note: Option<String>,
    /// `intent.network.allow` and `.services` (the system admits these later).
    pub network: Vec<crate::egress::HostPattern>,
    /// The registry presets `intent.network.allow` named (`npm`, ...): the
    /// engine expands them for the user the command runs as.
    pub presets: Vec<String>,
    pub services: Vec<crate::model::ServiceEndpoint>,
    /// As asked, the rest [`DEFAULT_LIMITS`] until the engine fits them to
    /// its machine ([`EnvelopeSpec::fit_limits`]).
    pub limits: LimitsSpec,
    pub env: BTreeMap<String, String>,
    /// The client's environment, filtered (`None`: it sent none).
    pub caller_env: Option<crate::caller_env::FilteredEnv>,
    /// The client's umask (`None`: it sent none).
    pub caller_umask: Option<u32>,
    pub live: Live,
    /// The envelope's stub overrides, validated (they take precedence over
    /// the policy's and over a replay's recording).
    pub stubs: Vec<crate::model::stubs::StubRule>,
    /// The envelope as validated (with `working_dir` filled in), for hashing.
    pub envelope: Envelope,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum EnvelopeError {
    #[error("{field}: {message}")]
    Field { field: String, message: String },
    #[error("{source_name}: {message}")]
    Parse {
        source_name: String,
        message: String,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("task {name:?} is not defined in {file}; defined tasks: {known}")]
    UnknownTask {
        name: String,
        file: PathBuf,
        known: String,
    },
}

fn field(field: &str, message: impl Into<String>) -> EnvelopeError {
    EnvelopeError::Field {
        field: field.into(),
        message: message.into(),
    }
}

/// Parse YAML or JSON (JSON is YAML, but a JSON body gets JSON's error
/// messages). Errors name the field path.
pub(crate) fn parse_envelope(source_name: &str, text: &str) -> Result<Envelope, EnvelopeError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| EnvelopeError::Parse {
            source_name: source_name.into(),
            message: format!(
                "{} (at {})",
                crate::errtext::content_free(&e.inner().to_string()),
                path_or_root(&crate::errtext::content_free_path(&e.path().to_string()))
            ),
        })
    } else {
        let de = serde_yaml::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| EnvelopeError::Parse {
            source_name: source_name.into(),
            message: format!(
                "{} (at {})",
                crate::errtext::content_free(&e.inner().to_string()),
                path_or_root(&crate::errtext::content_free_path(&e.path().to_string()))
            ),
        })
    }
}

fn path_or_root(p: &str) -> String {
    if p.is_empty() || p == "." {
        "the top level".into()
    } else {
        p.to_string()
    }
}

pub(crate) fn parse_task_text(source_name: &str, text: &str) -> Result<TaskFile, EnvelopeError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| EnvelopeError::Parse {
        source_name: source_name.to_string(),
        message: format!(
            "{} (at {})",
            crate::errtext::content_free(&e.inner().to_string()),
            path_or_root(&crate::errtext::content_free_path(&e.path().to_string()))
        ),
    })
}

/// The largest `dryrun.yaml` read.
pub(crate) const TASK_FILE_MAX: u64 = 1 << 20;

/// Find task `name` in `<workspace>/dryrun.yaml`, read with the workspace
/// owner's rights (a root CLI in a user's workspace reads it as that user),
/// from the resolved workspace, never through a symlink, at most 1 MiB.
pub(crate) fn load_task(workspace: &Path, name: &str) -> Result<Envelope, EnvelopeError> {
    let file = workspace.join("dryrun.yaml");
    let tf = read_task_file(workspace, "--task")?.ok_or_else(|| EnvelopeError::Field {
        field: "--task".into(),
        message: format!(
            "{} does not exist; define tasks there or use --command / --file",
            file.display()
        ),
    })?;
    let mut env = tf
        .tasks
        .get(name)
        .cloned()
        .ok_or_else(|| EnvelopeError::UnknownTask {
            name: name.into(),
            file: file.clone(),
            known: tf.tasks.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
    if env.working_dir.is_some() {
        return Err(field(
            &format!("tasks.{name}.working_dir"),
            "tasks in dryrun.yaml run in the workspace that holds the file; remove working_dir",
        ));
    }
    if env.caller_env.is_some() {
        return Err(field(
            &format!("tasks.{name}.caller_env"),
            "is the submitting client's own environment, which dryrun sends; set variables in env",
        ));
    }
    if env.caller_umask.is_some() {
        return Err(field(
            &format!("tasks.{name}.caller_umask"),
            "is the submitting client's own umask, which dryrun sends; remove it",
        ));
    }
    if let Some(t) = &env.task
        && t != name
    {
        return Err(field(
            &format!("tasks.{name}.task"),
            format!("names the task {t:?} but is listed as {name:?}; remove it or make them equal"),
        ));
    }
    env.task = Some(name.to_string());
    env.working_dir = Some(workspace.to_path_buf());
    Ok(env)
}

/// `<workspace>/dryrun.yaml`, parsed; `None` when there is none. Read with
/// the workspace owner's rights (a root CLI in a user's workspace reads it
/// as that user), from the resolved workspace, never through a symlink, at
/// most 1 MiB. `field` names what asked for it in errors.
pub(crate) fn read_task_file(
    workspace: &Path,
    field: &str,
) -> Result<Option<TaskFile>, EnvelopeError> {
    use crate::workspace::owner::{Creds, OwnerSession};
    let file = workspace.join("dryrun.yaml");
    let read_err = |message: String| EnvelopeError::Field {
        field: field.into(),
        message,
    };
    let me = OwnerSession::start(&Creds::current()).map_err(|e| read_err(e.to_string()))?;
    let resolved = me
        .resolve(workspace)
        .map_err(|e| read_err(format!("the workspace {e}")))?;
    let owner = OwnerSession::reader_for_owner(&resolved.identity, me)
        .map_err(|e| read_err(e.to_string()))?;
    let Some(bytes) = owner
        .read_file(
            &resolved.canonical,
            &resolved.identity,
            b"dryrun.yaml",
            TASK_FILE_MAX,
        )
        .map_err(|e| read_err(e.to_string()))?
    else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| read_err(format!("{} is not UTF-8 text", file.display())))?;
    parse_task_text(&file.display().to_string(), &text).map(Some)
}

/// What a validated envelope holds for a limit it did not ask for, until
/// the engine puts its own default there (sized to its machine).
pub(crate) const DEFAULT_LIMITS: LimitsSpec = LimitsSpec {
    timeout_s: 60,
    memory_mb: 1024,
    pids: 512,
    output_kb: 256,
    disk_mb: 1024,
    cpus: 1,
};

impl Envelope {
    /// Validate into an [`EnvelopeSpec`]. `default_dir` stands in for a
    /// missing `working_dir` (the caller's cwd).
    // Long on purpose: one check per envelope field, building the spec once (code past
    // validation never re-checks).
    pub(crate) fn validate(
        mut self,
        default_dir: Option<&Path>,
        access: &crate::workspace::owner::OwnerSession,
    ) -> Result<EnvelopeSpec, EnvelopeError> {
        if let Some(t) = &self.task
            && (t.is_empty() || t.len() > 128 || t.chars().any(|c| c.is_control()))
        {
            return Err(field("task", "must be 1 to 128 printable characters"));
        }
        let (steps, uses_steps) = match (&self.command, &self.steps) {
            (Some(_), Some(_)) => {
                return Err(field("command", "give either command or steps, not both"));
            }
            (None, None) => {
                return Err(field(
                    "command",
                    "missing: give a shell string in command (or a list in steps)",
                ));
            }
            (Some(c), None) => {
                if c.trim().is_empty() {
                    return Err(field(
                        "command",
                        "is empty; give the shell command to rehearse",
                    ));
                }
                (vec![c.clone()], false)
            }
            (None, Some(s)) => {
                if s.is_empty() {
                    return Err(field("steps", "is an empty list; give at least one step"));
                }
                for (i, st) in s.iter().enumerate() {
                    if st.trim().is_empty() {
                        return Err(field(&format!("steps[{i}]"), "is empty"));
                    }
                }
                (s.clone(), true)
            }
        };
        for (i, st) in steps.iter().enumerate() {
            if st.contains('\0') {
                let f = if uses_steps {
                    format!("steps[{i}]")
                } else {
                    "command".into()
                };
                return Err(field(&f, "contains a NUL byte"));
            }
            if st.len() > 256 * 1024 {
                let f = if uses_steps {
                    format!("steps[{i}]")
                } else {
                    "command".into()
                };
                return Err(field(&f, "is longer than 256 KiB"));
            }
        }

        let wd = match (&self.working_dir, default_dir) {
            (Some(w), _) => w.clone(),
            (None, Some(d)) => d.to_path_buf(),
            (None, None) => {
                return Err(field(
                    "working_dir",
                    "missing; give the workspace's absolute path",
                ));
            }
        };
        if !wd.is_absolute() {
            return Err(field(
                "working_dir",
                format!("{} is relative; give an absolute path", wd.display()),
            ));
        }
        // Resolved with the requester's own rights (a daemon passes a
        // session acting as its client), so an error tells the requester
        // nothing it could not see itself.
        let resolved = access
            .resolve(&wd)
            .map_err(|e| field("working_dir", format!("cannot be used: {e}")))?;
        let canon = resolved.canonical.clone();
        self.working_dir = Some(canon.clone());

        let expected = PathMatcher::new(&self.intent.expected_writes)
            .map_err(|e: PatternError| field("intent.expected_writes", e.to_string()))?;
        let forbidden = PathMatcher::new(&self.intent.forbidden_paths)
            .map_err(|e: PatternError| field("intent.forbidden_paths", e.to_string()))?;
        let ((network, presets), services) =
            (self.intent.network.validated()).map_err(|(f, m)| field(&f, m))?;
        if self.intent.mode == Mode::ReadOnly && !self.intent.expected_writes.is_empty() {
            return Err(field(
                "intent.expected_writes",
                "a read_only run cannot expect writes; drop expected_writes or use mode: mutating",
            ));
        }

        let mut limits = DEFAULT_LIMITS;
        for (((name, _), (_, lo)), (_, hi)) in DEFAULT_LIMITS
            .fields()
            .into_iter()
            .zip(LIMIT_MINIMA.fields())
            .zip(LIMIT_MAXIMA.fields())
        {
            if let Some(v) = self.limits.get(name) {
                if v < lo || v > hi {
                    return Err(field(
                        &format!("limits.{name}"),
                        format!("{v} is out of range; use a value from {lo} to {hi}"),
                    ));
                }
                *limits.field_mut(name) = v;
            }
        }
        // Only what passes the filter is kept, hashed and saved.
        let caller_env = match &self.caller_env {
            Some(raw) => Some(
                crate::caller_env::filter(raw).map_err(|e| field("caller_env", e.to_string()))?,
            ),
            None => None,
        };
        self.caller_env = caller_env.as_ref().map(|c| c.vars.clone());
        if let Some(m) = self.caller_umask
            && m > 0o777
        {
            return Err(field(
                "caller_umask",
                format!("{m} is not a file mode creation mask; use a value from 0 to 511 (0o777)"),
            ));
        }

        for (k, v) in &self.env {
            if !crate::model::text::is_shell_identifier(k) {
                // The name is not one to repeat raw: shown escaped.
                return Err(field(
                    &format!(
                        "env.{}",
                        crate::model::text::escape_for_humans(k.as_bytes())
                    ),
                    "is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
                ));
            }
            if v.contains('\0') {
                return Err(field(&format!("env.{k}"), "contains a NUL byte"));
            }
        }
        if self.stubs.len() > 64 {
            return Err(field("stubs", "at most 64 stubs per envelope"));
        }
        let mut stubs = Vec::new();
        for (id, c) in &self.stubs {
            let r = crate::policy::stubs::validate_stub(
                &format!("stubs.{id}"),
                id,
                c,
                "envelope",
                true,
            )
            .map_err(|m| {
                let (f, msg) = m.split_once(": ").unwrap_or(("stubs", m.as_str()));
                field(f, msg)
            })?;
            stubs.push(r);
        }
        let live = self.live.clone().unwrap_or_default();
        if live.mode == LiveMode::Apply
            && (live.network != LiveNetwork::None || !live.env_from_host.is_empty())
        {
            return Err(field(
                "live",
                "network and env_from_host only apply to mode: rerun; mode apply writes the reviewed change set",
            ));
        }
        for (i, k) in live.env_from_host.iter().enumerate() {
            if !crate::model::text::is_shell_identifier(k) {
                return Err(field(
                    &format!("live.env_from_host[{i}]"),
                    "is not a valid variable name",
                ));
            }
        }
        let command = if uses_steps {
            steps.join(" && ")
        } else {
            steps[0].clone()
        };
        Ok(EnvelopeSpec {
            task: self.task.clone(),
            command,
            steps,
            uses_steps,
            workspace: canon,
            workspace_identity: resolved.identity,
            summary: self.intent.summary.clone(),
            mode: self.intent.mode,
            expected_writes: expected,
            forbidden,
            reviewer_note: self.intent.reviewer_note.clone(),
            network,
            presets,
            services,
            limits,
            env: self.env.clone(),
            caller_env,
            caller_umask: self.caller_umask,
            live,
            stubs,
            envelope: self,
        })
    }
}

impl EnvelopeSpec {
    /// The limits for this machine: a field the envelope asked for must be
    /// within `ceiling` (else an error, and nothing runs); the others get
    /// `default`, held to `ceiling`.
    pub(crate) fn fit_limits(
        &mut self,
        default: &LimitsSpec,
        ceiling: &LimitsSpec,
    ) -> Result<(), AboveCeiling> {
        for ((field, v), ((_, d), (_, max))) in self
            .limits
            .fields()
            .into_iter()
            .zip(default.fields().into_iter().zip(ceiling.fields()))
        {
            let asked = self.envelope.limits.get(field).is_some();
            if asked && v > max {
                return Err(AboveCeiling {
                    field,
                    asked: v,
                    ceiling: max,
                });
            }
            if !asked {
                *self.limits.field_mut(field) = d.min(max);
            }
        }
        Ok(())
    }

    pub(crate) fn envelope_for_submission(&self) -> &Envelope {
        &self.envelope
    }

    /// BLAKE3 of the canonical JSON of the validated envelope.
    pub(crate) fn envelope_hash(&self) -> String {
        let bytes = serde_json::to_vec(&self.envelope).expect("envelope serializes");
        blake3::hash(&bytes).to_hex().to_string()
    }
}

#[cfg(test)]
mod tests;
