//! `dryrun hook claude-code|codex`: an agent host's command hook. The host
//! hands over a tool call as JSON on stdin before running it; for a shell
//! command the hook rehearses it under the workspace's hook intent and
//! answers with the host's own vocabulary:
//!
//! - decision `promote` → allow, the command rewritten to a `dryrun promote`
//!   of that run, which applies exactly the reviewed change set and then
//!   replays the rehearsal's output (in the order written) and exit
//!   status; a run with nothing to apply is rewritten to a replay of its
//!   output by shell builtins alone (`replay.rs`): no promotion, no
//!   receipt, no second process;
//! - `needs_approval` → ask (Claude Code) with an evidence summary, the
//!   rewrite carrying a single-use token bound to the run; Codex has no
//!   ask: its rewrite waits for a dryrun reviewer's approval;
//! - `blocked` → deny, the evidence as the reason;
//! - anything else (unreadable input, no workspace, a dead daemon, a
//!   timeout, a failed rehearsal) → exit 2 with the reason on stderr:
//!   both hosts block the call on exit 2, and fail open on malformed JSON,
//!   so nothing but one well-formed answer is ever printed.
//!
//! Every reason that reaches the model or the person carries what the
//! command printed, in the order it was written, and what to change
//! (`summary.rs`).
//!
//! The agent's own `dryrun` invocations are denied: only the rewrites this
//! hook issues may carry a run out (and a rewrite seen again is judged
//! again, never waved through on its own say-so).

mod claude;
mod codex;
mod replay;
mod rewrite;
mod summary;

pub use rewrite::{Rewrite, invokes_dryrun, quote};
use rewrite::{own_exe, rewritten_input};
use summary::changes_line;
pub(crate) use summary::esc;
pub use summary::{evidence_summary, output_and_advice};

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::{Backend, DoorError, Target};
use crate::envelope::{Envelope, HookIntent, Intent, Mode};
use crate::record::{RunRecord, RunState};
use crate::verdict::Decision;

/// The agent hosts dryrun speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    ClaudeCode,
    Codex,
}

impl Host {
    pub fn name(self) -> &'static str {
        match self {
            Host::ClaudeCode => "claude-code",
            Host::Codex => "codex",
        }
    }
}

/// Exit status of a blocking answer (both hosts: the call is blocked and
/// stderr is the reason).
pub const EXIT_BLOCK: i32 = 2;

/// The largest hook input read.
const INPUT_MAX: u64 = 4 << 20;

/// Default wall-clock limit of a hook rehearsal, seconds (`hook.timeout_s`
/// sets it). Its deadline, this plus [`DEADLINE_MARGIN_S`], must stay
/// below the host's own hook timeout (docs/doors.md), so it is not the
/// engine's larger default.
pub const DEFAULT_TIMEOUT_S: u64 = 60;

/// How much longer than the rehearsal's timeout the hook waits for a
/// verdict: the sandbox's setup, the walk of what changed, the verdict, and
/// a busy daemon's queue.
pub const DEADLINE_MARGIN_S: u64 = 40;

/// When the hook gives up and blocks the call: `hook.timeout_s` plus
/// [`DEADLINE_MARGIN_S`], or `DRYRUN_HOOK_DEADLINE_S` when set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub secs: u64,
    /// The rehearsal's timeout it follows; `None`: set by
    /// `DRYRUN_HOOK_DEADLINE_S`.
    pub follows_timeout_s: Option<u64>,
}

impl Deadline {
    /// The deadline of a rehearsal of `timeout_s` seconds; `set`: the
    /// value of `DRYRUN_HOOK_DEADLINE_S`. A deadline that leaves the
    /// rehearsal less than its timeout and the margin is refused (the hook
    /// would block calls the engine would have judged in time).
    pub fn for_timeout(timeout_s: u64, set: Option<u64>) -> Result<Deadline, HookError> {
        let needed = timeout_s.saturating_add(DEADLINE_MARGIN_S);
        match set {
            Some(secs) if secs < needed => Err(HookError::DeadlineTooShort { secs, timeout_s }),
            Some(secs) => Ok(Deadline {
                secs,
                follows_timeout_s: None,
            }),
            None => Ok(Deadline {
                secs: needed,
                follows_timeout_s: Some(timeout_s),
            }),
        }
    }
}

/// `DRYRUN_HOOK_DEADLINE_S` from this process's environment (the agent
/// host's hook configuration), when it is a positive number.
fn deadline_from_env() -> Option<u64> {
    std::env::var("DRYRUN_HOOK_DEADLINE_S")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
}

/// What the hook hands to the host.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Not a shell command: no output, exit 0; the host goes on as usual.
    PassThrough,
    /// Run `input` (the rewritten tool input) without asking.
    Allow { input: Value, reason: String },
    /// Ask the person; their yes runs `input`.
    Ask { input: Value, reason: String },
    /// Do not run it; `reason` goes to the model.
    Deny { reason: String },
}

/// The fields of a hook event dryrun reads (hosts add more; ignored).
#[derive(Debug, Deserialize)]
pub struct HookInput {
    pub hook_event_name: String,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_input: Option<Value>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Claude Code's permission mode for the session (`default`,
    /// `acceptEdits`, `plan`, `bypassPermissions`, `auto`, `dontAsk`).
    #[serde(default)]
    pub permission_mode: Option<String>,
}

/// Does the host put an `ask` before a person in this permission mode?
/// Only then may the answer to it approve a run (a host-prompt token). In
/// `bypassPermissions`, `auto` (a classifier decides) and `dontAsk`, and
/// in any mode not known here, an `ask` may be answered with no person
/// (hosts have passed it through unasked in such modes): the run waits
/// for a reviewer instead.
fn ask_reaches_a_person(host: Host, permission_mode: Option<&str>) -> bool {
    host == Host::ClaudeCode && matches!(permission_mode, Some("default" | "acceptEdits" | "plan"))
}

/// Why the hook blocks without an answer (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("unreadable hook input: {0}")]
    Input(String),
    #[error("{0}")]
    Workspace(String),
    #[error("{0}")]
    Engine(String),
    #[error("{}", timeout_message(.0))]
    Timeout(Deadline),
    #[error(
        "DRYRUN_HOOK_DEADLINE_S={secs} leaves a rehearsal of hook.timeout_s = {timeout_s} s no room: the hook needs {DEADLINE_MARGIN_S} s more than the rehearsal's timeout (setup, evidence, a daemon's queue); raise DRYRUN_HOOK_DEADLINE_S to at least {} (and the host's hook timeout above it), or lower hook.timeout_s in dryrun.yaml; the command was not run",
        timeout_s.saturating_add(DEADLINE_MARGIN_S)
    )]
    DeadlineTooShort { secs: u64, timeout_s: u64 },
}

/// Why the hook blocked at its deadline, and which setting moves it.
fn timeout_message(d: &Deadline) -> String {
    match d.follows_timeout_s {
        Some(t) => format!(
            "no verdict within {} s (hook.timeout_s = {t} s and {DEADLINE_MARGIN_S} s for setup, evidence and a daemon's queue); the command was not run. The rehearsal stops at hook.timeout_s, so the rest went to waiting for the engine: try again, or set DRYRUN_HOOK_DEADLINE_S above {} (and the host's hook timeout above that)",
            d.secs, d.secs
        ),
        None => format!(
            "no verdict within {} s (DRYRUN_HOOK_DEADLINE_S); the command was not run (raise DRYRUN_HOOK_DEADLINE_S, and the host's hook timeout above it, or lower hook.timeout_s in dryrun.yaml)",
            d.secs
        ),
    }
}

/// What the deciding thread tells the waiting one.
enum Progress {
    /// The rehearsal's timeout is known (from `dryrun.yaml`): the deadline
    /// is now this, counted from the hook's start.
    Deadline(Deadline),
    Done(Result<(String, Answer), HookError>),
}

impl From<DoorError> for HookError {
    fn from(e: DoorError) -> Self {
        HookError::Engine(e.to_string())
    }
}

/// `dryrun hook HOST`: read the event, decide, answer. Returns the exit
/// status; whatever fails, the answer is a block.
pub fn run_hook(host: Host, target: Target) -> i32 {
    let start = std::time::Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let tell = |d: Deadline| {
            let _ = tx.send(Progress::Deadline(d));
        };
        let r = read_input().and_then(|input| {
            decide(host, &target, &input, &tell).map(|a| (input.hook_event_name.clone(), a))
        });
        let _ = tx.send(Progress::Done(r));
    });
    // A host that times its hook out lets the call through: answer (a
    // block) before any host would. See docs/doors.md. Until the
    // workspace's `hook.timeout_s` is read, the default's deadline.
    let mut deadline =
        Deadline::for_timeout(DEFAULT_TIMEOUT_S, deadline_from_env()).unwrap_or(Deadline {
            secs: deadline_from_env().unwrap_or(DEFAULT_TIMEOUT_S + DEADLINE_MARGIN_S),
            follows_timeout_s: None,
        });
    let outcome = loop {
        let left = Duration::from_secs(deadline.secs).saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(Progress::Deadline(d)) => deadline = d,
            Ok(Progress::Done(r)) => break r,
            Err(_) => break Err(HookError::Timeout(deadline)),
        }
    };
    crate::phase("hook: answered");
    match outcome {
        Ok((event, answer)) => match render(host, &event, &answer) {
            Some(text) => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                if out
                    .write_all(text.as_bytes())
                    .and_then(|_| out.write_all(b"\n"))
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    eprintln!("dryrun hook: could not write the answer; blocking the call");
                    return EXIT_BLOCK;
                }
                0
            }
            None => 0,
        },
        Err(e) => {
            eprintln!("dryrun hook {}: blocked: {e}", host.name());
            EXIT_BLOCK
        }
    }
}

fn render(host: Host, event: &str, answer: &Answer) -> Option<String> {
    let v = match (host, event) {
        (_, "PermissionRequest") => codex::render_permission_request(answer)?,
        (Host::ClaudeCode, _) => claude::render(answer)?,
        (Host::Codex, _) => codex::render(answer)?,
    };
    Some(serde_json::to_string(&v).expect("a JSON value serializes"))
}

fn read_input() -> Result<HookInput, HookError> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(INPUT_MAX + 1)
        .read_to_end(&mut buf)
        .map_err(|e| HookError::Input(format!("reading stdin: {e}")))?;
    if buf.len() as u64 > INPUT_MAX {
        return Err(HookError::Input(format!(
            "more than {INPUT_MAX} bytes on stdin"
        )));
    }
    parse_input(&buf)
}

pub fn parse_input(bytes: &[u8]) -> Result<HookInput, HookError> {
    serde_json::from_slice(bytes).map_err(|e| {
        HookError::Input(format!(
            "not a hook event ({})",
            crate::errtext::content_free(&e.to_string())
        ))
    })
}

/// Tools whose input is a shell command the host would run.
fn is_shell_tool(host: Host, name: &str) -> bool {
    match host {
        Host::ClaudeCode => name == "Bash",
        // Codex names its shell tool `Bash` in hook events; older builds
        // and other front ends used these.
        Host::Codex => matches!(
            name,
            "Bash" | "shell" | "local_shell" | "exec_command" | "shell_command"
        ),
    }
}

/// Decide one event. `on_deadline` hears the hook's deadline once the
/// rehearsal's timeout is known.
pub fn decide(
    host: Host,
    target: &Target,
    input: &HookInput,
    on_deadline: &dyn Fn(Deadline),
) -> Result<Answer, HookError> {
    let event = input.hook_event_name.as_str();
    let tool = input.tool_name.as_deref().unwrap_or("");
    if !matches!(event, "PreToolUse" | "PermissionRequest") || !is_shell_tool(host, tool) {
        return Ok(Answer::PassThrough);
    }
    let tool_input = input
        .tool_input
        .as_ref()
        .and_then(Value::as_object)
        .ok_or_else(|| HookError::Input("tool_input is not an object".into()))?;
    let command = tool_input
        .get("command")
        .and_then(command_string)
        .ok_or_else(|| HookError::Input("tool_input.command is not a string".into()))?;
    let cwd = input
        .cwd
        .clone()
        .ok_or_else(|| HookError::Input("cwd is missing".into()))?;
    if !cwd.is_absolute() {
        return Err(HookError::Input("cwd is not an absolute path".into()));
    }
    // The hook's own looks at the host's paths share their judged mounts;
    // let go before the rehearsal (which may take minutes, and an
    // approval longer): what is held pins mounts.
    let looks = crate::engine::Looks::hold();
    let backend = Backend::connect(target)?;
    crate::phase("hook: backend");
    // Our own rewrite, seen again (a host that re-hooks it, or Codex's
    // PermissionRequest after the PreToolUse rewrite): judged again.
    if let Some(run_id) = replay::run_of(&command) {
        drop(looks);
        return judge_replay(host, &backend, &run_id, &command, tool_input);
    }
    if let Some(form) = Rewrite::parse(&command) {
        drop(looks);
        let person = ask_reaches_a_person(host, input.permission_mode.as_deref());
        return judge_rewrite(host, target, &backend, event, person, &form, tool_input);
    }
    if event == "PermissionRequest" {
        return Ok(Answer::Deny {
            reason: "dryrun: only a command rewritten by dryrun's PreToolUse hook may run; this one was not rehearsed".into(),
        });
    }
    let cache_dir = target.policy_cache_dir();
    if invokes_dryrun(&command, cache_dir.as_deref()) {
        return Ok(Answer::Deny {
            reason: "dryrun: an agent may not run dryrun through its shell (approving, promoting or changing runs is for people); run the command itself and dryrun's hook rehearses it".into(),
        });
    }
    // The project the host works in bounds where a command may run: a
    // `cd ~` or `cd /` in the agent's shell must not make the home or the
    // root directory the workspace whose change set goes live. (The
    // engine refuses a home, a directory holding one, and `/` for every
    // door: `engine::bound`; this is the hook's own, narrower bound.)
    let project = project_root(&cwd)?;
    // Compared as they are on disk: a symlink in the project or a `..`
    // that leads out of it is outside it, whatever its spelling.
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    if !real(&cwd).starts_with(real(&project)) || !cwd.starts_with(&project) {
        return Ok(Answer::Deny {
            reason: format!(
                "dryrun: the command would run in {}, outside the project {}; dryrun rehearses and promotes commands only inside it",
                esc(&cwd.display().to_string()),
                esc(&project.display().to_string())
            ),
        });
    }
    // Rehearsed where it is on disk, not through a link that may change.
    let cwd = real(&cwd);
    crate::phase("hook: checks");
    // The engine's workspace bound, before anything of the workspace is
    // read (the engine applies it again to the run itself).
    crate::engine::bound::check_here(&cwd, cache_dir.as_deref())
        .map_err(|e| HookError::Workspace(e.to_string()))?;
    crate::phase("hook: bound");
    let hook_intent = crate::envelope::read_task_file(&project, "hook")
        .map_err(|e| HookError::Workspace(format!("workspace {}: {e}", project.display())))?
        .and_then(|tf| tf.hook);
    let timeout_s = hook_intent
        .as_ref()
        .and_then(|h| h.timeout_s)
        .unwrap_or(DEFAULT_TIMEOUT_S);
    on_deadline(Deadline::for_timeout(timeout_s, deadline_from_env())?);
    let envelope = hook_envelope(host, &command, &cwd, hook_intent.as_ref());
    crate::phase("hook: envelope");
    drop(looks);
    let record = backend
        .execute(&envelope, &cwd)
        .map_err(|e| name_hook_field(e, &project))?;
    crate::phase("hook: record");
    let await_s = hook_intent
        .as_ref()
        .and_then(|h| h.await_approval_s)
        .unwrap_or(codex::AWAIT_APPROVAL_S);
    let person = ask_reaches_a_person(host, input.permission_mode.as_deref());
    answer_for(host, target, &backend, &record, tool_input, await_s, person)
}

/// The project directory: `DRYRUN_HOOK_WORKSPACE`, else Claude Code's
/// `CLAUDE_PROJECT_DIR` (set for its hooks), else the event's `cwd`.
fn project_root(cwd: &Path) -> Result<PathBuf, HookError> {
    let named = std::env::var_os("DRYRUN_HOOK_WORKSPACE")
        .or_else(|| std::env::var_os("CLAUDE_PROJECT_DIR"))
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    match named {
        Some(p) if p.is_absolute() => Ok(p),
        Some(p) => Err(HookError::Workspace(format!(
            "the project directory {} is not an absolute path",
            p.display()
        ))),
        None => Ok(cwd.to_path_buf()),
    }
}

fn command_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        // Codex's exec tool sends argv; a shell sees it joined.
        Value::Array(a) => {
            let words: Option<Vec<&str>> = a.iter().map(Value::as_str).collect();
            let words = words?;
            match words.as_slice() {
                [sh, flag, script] if is_shell(sh) && (*flag == "-c" || *flag == "-lc") => {
                    Some(script.to_string())
                }
                _ => Some(words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")),
            }
        }
        _ => None,
    }
}

fn is_shell(w: &str) -> bool {
    matches!(
        Path::new(w).file_name().and_then(|n| n.to_str()),
        Some("bash" | "sh" | "zsh" | "dash")
    )
}

/// The envelope of a hook rehearsal: the command, in `cwd`, under the
/// workspace's `hook:` intent or the built-in default (mutating, may
/// write anything, 60 s). The engine adds
/// [`crate::engine::bound::BUILTIN_FORBIDDEN`] (the hook's own
/// configuration and the agent hosts' settings) to its forbidden paths,
/// as to every run's.
pub fn hook_envelope(host: Host, command: &str, cwd: &Path, hi: Option<&HookIntent>) -> Envelope {
    let default = HookIntent::default();
    let hi = hi.unwrap_or(&default);
    let mode = hi.mode.unwrap_or(Mode::Mutating);
    let forbidden: Vec<String> = hi.forbidden_paths.clone();
    let expected = match mode {
        Mode::ReadOnly => Vec::new(),
        Mode::Mutating => hi
            .expected_writes
            .clone()
            .unwrap_or_else(|| vec!["**".into()]),
    };
    Envelope {
        task: None,
        command: Some(command.to_string()),
        working_dir: Some(cwd.to_path_buf()),
        intent: Intent {
            summary: format!("an agent's shell command, through the {} hook", host.name()),
            mode,
            expected_writes: expected,
            forbidden_paths: forbidden,
            require_success: hi.require_success,
            network: hi.network.clone(),
            ..Default::default()
        },
        limits: hi.limits(hi.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)),
        env: hi.env.clone(),
        ..Default::default()
    }
}

/// An engine's refusal of a limit, which came from the `hook:` section of
/// the project's `dryrun.yaml` (or the hook's default timeout): named as
/// that file's field.
fn name_hook_field(e: DoorError, project: &Path) -> HookError {
    let mut msg = e.to_string();
    let file = project.join("dryrun.yaml");
    for (f, _) in crate::envelope::DEFAULT_LIMITS.fields() {
        let asked = format!("limits.{f}: ");
        if msg.contains(&asked) {
            msg = msg.replacen(&asked, &format!("hook.{f} in {}: ", file.display()), 1);
            break;
        }
    }
    HookError::Engine(msg)
}
/// The host-facing answer for a finished rehearsal.
fn answer_for(
    host: Host,
    target: &Target,
    backend: &Backend,
    r: &RunRecord,
    tool_input: &serde_json::Map<String, Value>,
    await_s: u64,
    person: bool,
) -> Result<Answer, HookError> {
    let Some(v) = &r.verdict else {
        return Err(HookError::Engine(format!(
            "run {} has no verdict ({}): {}",
            r.run_id,
            r.state.as_str(),
            r.error.as_deref().unwrap_or("the rehearsal could not run")
        )));
    };
    if r.state == RunState::Failed {
        return Err(HookError::Engine(format!(
            "the rehearsal of run {} failed: {}",
            r.run_id,
            r.error.as_deref().unwrap_or("unknown error")
        )));
    }
    let mut rw = Rewrite {
        exe: own_exe()?,
        global: Backend::global_args(target),
        run_id: r.run_id.clone(),
        token: None,
        await_s: None,
    };
    // The live lane refuses a plain apply of stubbed work (the model's one
    // rule): never offer the agent a promotion that would be refused.
    let mode = r.live.as_ref().map(|l| l.mode).unwrap_or_default();
    let actions = r.rehearsal.as_ref().map(|h| h.would_be_actions.as_slice());
    if v.decision != Decision::Blocked
        && let Err(refusal) =
            crate::model::promotion::check_stubbed_calls(mode, actions.unwrap_or_default(), false)
    {
        return Ok(Answer::Deny {
            reason: format!(
                "dryrun: {}\n{}",
                refusal.message(&r.run_id),
                output_and_advice(r)
            ),
        });
    }
    // Nothing to apply: the output is the answer, replayed by the shell's
    // builtins (no promotion, no receipt, no second process).
    if let Some(command) = replay::render(r, replay_streams(host)) {
        return Ok(Answer::Allow {
            input: rewritten_input(tool_input, command),
            reason: format!(
                "dryrun rehearsed it (run {}): no files changed, nothing to apply; what runs now prints its output and exits with its status",
                r.run_id
            ),
        });
    }
    // Not promoted and not waiting: only the agent can act on it.
    if v.decision != Decision::Promote && r.state == RunState::Rehearsed {
        return Ok(Answer::Deny {
            reason: evidence_summary(
                r,
                "was stopped, and nothing in it is for a person to decide; change the command and run it again",
            ),
        });
    }
    Ok(match v.decision {
        Decision::Promote => Answer::Allow {
            input: rewritten_input(tool_input, rw.render()),
            reason: format!(
                "dryrun rehearsed it (run {}): {}; what runs now applies exactly that change set and replays the output",
                r.run_id,
                changes_line(r)
            ),
        },
        Decision::NeedsApproval => match host {
            // A token only where a person answers the ask (see
            // `ask_reaches_a_person`).
            Host::ClaudeCode => match person
                .then(|| backend.grant_host_prompt(&r.run_id, host.name()))
                .transpose()?
                .flatten()
            {
                Some(token) => {
                    rw.token = Some(token);
                    Answer::Ask {
                        input: rewritten_input(tool_input, rw.render()),
                        reason: with_output(r, evidence_summary(r, "needs your approval")),
                    }
                }
                // The daemon keeps approvals with its reviewers: the
                // person's yes here only lets the command wait for one.
                None => {
                    rw.await_s = Some(await_s);
                    let mut input = rewritten_input(tool_input, rw.render());
                    // Claude Code's Bash tool stops a command after its
                    // `timeout` (ms; 2 min by default, at most 10): long
                    // enough for the wait and the promotion.
                    input["timeout"] = Value::from(((await_s + 60) * 1000).min(600_000));
                    Answer::Ask {
                        input,
                        reason: with_output(
                            r,
                            evidence_summary(
                                r,
                                &format!(
                                    "needs a dryrun reviewer's approval (`dryrun approve {}` by another identity); say yes and it waits up to {await_s} s for it, then applies the reviewed change set",
                                    r.run_id
                                ),
                            ),
                        ),
                    }
                }
            },
            Host::Codex => {
                rw.await_s = Some(await_s);
                Answer::Allow {
                    input: rewritten_input(tool_input, rw.render()),
                    reason: with_output(
                        r,
                        evidence_summary(r, "waits for a dryrun reviewer's approval"),
                    ),
                }
            }
        },
        Decision::Blocked => Answer::Deny {
            reason: with_output(r, evidence_summary(r, "was blocked; change the command")),
        },
    })
}

/// How a host's replay writes the two streams (see [`replay::Streams`]).
fn replay_streams(host: Host) -> replay::Streams {
    match host {
        Host::ClaudeCode => replay::Streams::Apart,
        Host::Codex => replay::Streams::OnStdout,
    }
}

/// A reason with the run's output and what to change after the summary.
fn with_output(r: &RunRecord, summary: String) -> String {
    format!("{summary}\n{}", output_and_advice(r))
}

/// A replay this hook issued, presented again: allowed only when it is
/// exactly what the hook renders for that run now.
fn judge_replay(
    host: Host,
    backend: &Backend,
    run_id: &str,
    command: &str,
    tool_input: &serde_json::Map<String, Value>,
) -> Result<Answer, HookError> {
    let r = backend.run(run_id)?;
    Ok(
        if replay::render(&r, replay_streams(host)).as_deref() == Some(command) {
            Answer::Allow {
                input: Value::Object(tool_input.clone()),
                reason: format!(
                    "dryrun: replays the output of run {run_id}, which changed nothing"
                ),
            }
        } else {
            Answer::Deny {
                reason: format!(
                    "dryrun: this replay is not the one dryrun's hook issues for run {run_id}; run the command itself and dryrun rehearses it"
                ),
            }
        },
    )
}

/// A rewrite this hook issued, presented again.
fn judge_rewrite(
    host: Host,
    target: &Target,
    backend: &Backend,
    event: &str,
    person: bool,
    form: &Rewrite,
    tool_input: &serde_json::Map<String, Value>,
) -> Result<Answer, HookError> {
    let own = own_exe()?;
    if form.exe != own {
        return Ok(Answer::Deny {
            reason: "dryrun: this promote command names another dryrun binary than the hook's own"
                .into(),
        });
    }
    // The rewrite reaches the engine the hook judged it with, never a
    // socket or state directory the agent chose (its own fake engine).
    if form.global != Backend::global_args(target) {
        return Ok(Answer::Deny {
            reason:
                "dryrun: this promote command reaches another dryrun engine than the hook's own"
                    .into(),
        });
    }
    let r = backend.run(&form.run_id)?;
    let decision = r.verdict.as_ref().map(|v| v.decision);
    let same = Value::Object(tool_input.clone());
    Ok(match (&form.token, form.await_s) {
        (None, None) if r.state == RunState::Rehearsed && decision == Some(Decision::Promote) => {
            Answer::Allow {
                input: same,
                reason: format!("dryrun: promotes run {} as reviewed", r.run_id),
            }
        }
        // A token is the person's yes, never the hook's: ask again.
        (Some(_), None)
            if host == Host::ClaudeCode
                && person
                && event == "PreToolUse"
                && r.state == RunState::AwaitingApproval =>
        {
            Answer::Ask {
                input: same,
                reason: with_output(&r, evidence_summary(&r, "needs your approval")),
            }
        }
        // Claude Code's person said yes to the wait once; the same
        // command presented again (the agent re-running it after a no)
        // is asked again, never waved through on the agent's say-so.
        (None, Some(_))
            if host == Host::ClaudeCode
                && event == "PreToolUse"
                && r.state == RunState::AwaitingApproval =>
        {
            Answer::Ask {
                input: same,
                reason: with_output(
                    &r,
                    evidence_summary(
                        &r,
                        &format!(
                            "needs a dryrun reviewer's approval (`dryrun approve {}` by another identity); say yes and it waits for it, then applies the reviewed change set",
                            r.run_id
                        ),
                    ),
                ),
            }
        }
        // Waiting for a reviewer: promote checks the approval itself.
        (None, Some(_))
            if matches!(r.state, RunState::AwaitingApproval | RunState::Approved)
                && !r.override_required =>
        {
            Answer::Allow {
                input: same,
                reason: format!(
                    "dryrun: waits for a reviewer's approval of run {}",
                    r.run_id
                ),
            }
        }
        _ => Answer::Deny {
            reason: format!(
                "dryrun: run {} is {}; this promote command is not one dryrun's hook would issue now",
                r.run_id,
                r.state.as_str()
            ),
        },
    })
}
