//! Policies: the rules the classifier scores commands with, loaded from YAML
//! (`policies/default.yaml` is compiled in; system files and a workspace file
//! layer on top) and validated once into a [`Policy`].
//!
//! Layering: the shipped default, then system policy files
//! (`/etc/dryrun/policy.d/*.yaml`, which may change anything), then the
//! workspace's `.dryrun/policy.yaml`, which may only tighten: add rules and
//! protected paths, raise a rule's level or score, lower thresholds. A
//! workspace file that tries to loosen anything is an error naming the rule
//! and field (the workspace is writable by the agent being judged), and the
//! rules it adds are scored next to the other layers' conclusion about a
//! command, never in its place ([`Rule::from_workspace`]).

pub(crate) mod budget;
mod cache;
pub(crate) mod egress;
pub mod fleet;
mod merge;
mod view;
pub use view::{ViewMaskConfig, ViewPolicyConfig};
pub(crate) mod stubs;

pub use cache::RuleRegex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The shipped default policy.
pub const DEFAULT_POLICY_YAML: &str = include_str!("../../policies/default.yaml");
pub const STUBS_POLICY_YAML: &str = include_str!("../../policies/stubs.yaml");

/// Permission levels, ordered: combining is `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Level {
    Read,
    Write,
    Admin,
    Irreversible,
}

impl Level {
    pub fn risk_level(self) -> &'static str {
        match self {
            Level::Read => "low",
            Level::Write => "medium",
            Level::Admin => "high",
            Level::Irreversible => "critical",
        }
    }
}

/// One policy file as written.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub version: Option<u32>,
    #[serde(default)]
    pub thresholds: Option<ThresholdsConfig>,
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// Workspace paths (globs) whose change needs approval even when the
    /// envelope did not forbid them.
    #[serde(default)]
    pub protected_paths: Vec<String>,
    /// Scores of the classifier's built-in checks, by rule id.
    #[serde(default)]
    pub builtin: BTreeMap<String, BuiltinConfig>,
    /// Shadow stubs by id; later files replace an id.
    #[serde(default)]
    pub stubs: BTreeMap<String, stubs::StubConfig>,
    /// Egress names and pins (see `policy/egress.rs`).
    #[serde(default)]
    pub egress: Option<egress::EgressPolicyConfig>,
    /// Which directories may be a workspace (system policy only; see
    /// `engine::bound`).
    #[serde(default)]
    pub workspace_bound: Option<WorkspaceBoundConfig>,
    /// What the rehearsal's view hides besides the built-in masks (see
    /// `docs/sandbox-view.md`); every layer may only add.
    #[serde(default)]
    pub view: Option<ViewPolicyConfig>,
    /// Interpreters whose inline code is trusted (system policy only).
    #[serde(default)]
    pub inline_code: Option<InlineCodeConfig>,
}

/// `inline_code:` in a system policy file.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InlineCodeConfig {
    /// Interpreters (`python3`, `node`, ...) whose inline code
    /// (`python3 -c`, `node -e`, a heredoc) is trusted: what it does is
    /// left to the rehearsal, as for a script file, instead of asking
    /// before it runs (`exec.inline_code.*`). A workspace policy may not
    /// set it.
    #[serde(default)]
    pub trust: Vec<String>,
}

/// `workspace_bound:` in a system policy file.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceBoundConfig {
    /// A home directory, or a directory holding one, may be a workspace
    /// (off: refused, with the reason; `/` never is).
    #[serde(default)]
    pub allow_homes: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsConfig {
    /// A total score at or above this requires approval.
    pub approval: u32,
    /// A total score at or above this, in a one-liner of several commands,
    /// blocks (with advice to split it into steps).
    pub block: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BuiltinConfig {
    pub level: Level,
    pub score: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    pub id: String,
    #[serde(rename = "match")]
    pub matcher: MatchConfig,
    pub level: Level,
    pub score: u32,
    pub reason: String,
    /// Always require approval when this rule matches, whatever the score.
    #[serde(default)]
    pub approval: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// Command name(s). `rm` matches `rm`, `\rm`, `'rm'` and `/usr/bin/rm`,
    /// never `./rm` or `/tmp/x/rm`.
    pub command: OneOrMany,
    /// Leading positional arguments, space-separated: `push`, `pr merge`.
    #[serde(default)]
    pub subcommand: Option<OneOrMany>,
    /// At least one of these flags, in any position; `-r` also matches
    /// clusters such as `-rf`, `--force` also `--force=x`.
    #[serde(default)]
    pub flags_any: Vec<String>,
    /// All of these flags.
    #[serde(default)]
    pub flags_all: Vec<String>,
    /// Some argument matches this regular expression.
    #[serde(default)]
    pub arg_regex: Option<String>,
}

/// Deserialized by hand in `cache.rs` (not `#[serde(untagged)]`, which
/// buffers every value first: a seventh of loading the shipped policy).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
#[serde(untagged)]
pub enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn items(&self) -> Vec<String> {
        match self {
            OneOrMany::None => Vec::new(),
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// A validated rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub commands: Vec<String>,
    pub subcommands: Vec<Vec<String>>,
    pub flags_any: Vec<String>,
    pub flags_all: Vec<String>,
    pub arg_regex: Option<RuleRegex>,
    pub level: Level,
    pub score: u32,
    pub reason: String,
    pub approval: bool,
    /// Added by the workspace's tighten-only file: the classifier scores
    /// it IN ADDITION to what the other layers conclude about the command,
    /// so it can only add a finding, never replace one.
    pub from_workspace: bool,
}

/// The validated, layered policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub approval_threshold: u32,
    pub block_threshold: u32,
    pub rules: Vec<Rule>,
    /// (rule index, index in its `commands`), sorted by that command name,
    /// then by position: the rules naming a command, in rule order, with no
    /// string copied (see `merge::CommandIndex`).
    by_command: merge::CommandIndex,
    pub protected_paths: Vec<String>,
    /// `protected_paths` compiled (protected-path semantics: at any depth
    /// unless anchored with `/`) at the first look-up, for the classifier
    /// and the verdict.
    protected_matcher: std::sync::Arc<crate::workspace::paths::PathMatcher>,
    pub builtin: BTreeMap<String, BuiltinConfig>,
    /// BLAKE3 over the layered files, for receipts.
    pub hash: String,
    /// Which files made it, in order.
    pub sources: Vec<String>,
    /// Shadow stubs, validated, in id order.
    pub stubs: Vec<crate::model::stubs::StubRule>,
    /// Always- and never-allowed names and pins for runs with an allowlist.
    pub egress: crate::egress::EgressSystem,
    /// The system policy lets a home directory (or a directory holding
    /// one) be a workspace (`workspace_bound.allow_homes`; a workspace
    /// policy cannot set it).
    pub allow_home_workspaces: bool,
    /// Paths every layer added to the view's masks: (path, reason).
    pub view_masks: Vec<(String, String)>,
    /// Interpreters whose inline code the system policy trusts
    /// (`inline_code.trust`; a workspace policy cannot set it).
    pub trusted_inline_code: Vec<String>,
    /// The fleet policy version among the layers, on a host of a fleet.
    pub fleet_version: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy {file}: {message}")]
    Parse { file: String, message: String },
    #[error("policy {file}, rule {rule}, field {field}: {message}")]
    Rule {
        file: String,
        rule: String,
        field: String,
        message: String,
    },
    #[error("policy {file}: {message}")]
    Unreadable { file: String, message: String },
    #[error("policy {file}: cannot read it: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
}

fn rule_err(file: &str, rule: &str, field: &str, message: impl Into<String>) -> PolicyError {
    PolicyError::Rule {
        file: file.into(),
        rule: rule.into(),
        field: field.into(),
        message: message.into(),
    }
}

/// The built-in checks the classifier always runs, with their default level
/// and score (a policy's `builtin:` section may change them).
pub const BUILTIN_DEFAULTS: &[(&str, Level, u32)] = &[
    ("parse.error", Level::Admin, 60),
    ("parse.unhandled", Level::Admin, 60),
    ("exec.path", Level::Write, 25),
    ("exec.unknown", Level::Write, 10),
    ("obfuscation.dynamic_command", Level::Admin, 60),
    ("obfuscation.quoted_name", Level::Admin, 60),
    ("obfuscation.eval", Level::Admin, 50),
    ("obfuscation.pipe_to_shell", Level::Irreversible, 80),
    ("obfuscation.env_hijack", Level::Admin, 60),
    ("obfuscation.redefinition", Level::Admin, 60),
    ("redirect.write", Level::Write, 10),
    ("redirect.outside", Level::Admin, 50),
    ("redirect.device", Level::Irreversible, 90),
    ("blast.root", Level::Irreversible, 80),
    ("blast.home", Level::Admin, 60),
    ("blast.outside", Level::Admin, 40),
    ("credential.file", Level::Admin, 60),
    ("credential.variable", Level::Admin, 50),
    ("chain.opaque", Level::Write, 10),
    // The published bypasses of approval systems (issue 16).
    ("agent.approvals_off", Level::Admin, 80),
    ("obfuscation.builtin_substitution", Level::Admin, 60),
    ("obfuscation.indirect_expansion", Level::Admin, 60),
    ("obfuscation.run_stream", Level::Irreversible, 80),
    ("obfuscation.brace_command", Level::Admin, 60),
    ("obfuscation.glob_command", Level::Admin, 60),
    ("obfuscation.alias", Level::Admin, 60),
    ("obfuscation.exec_argv0", Level::Admin, 60),
    ("exfil.substitution", Level::Admin, 60),
    ("exfil.dev_tcp", Level::Admin, 90),
    ("protected.write", Level::Admin, 40),
    ("blast.empty_variable", Level::Irreversible, 80),
    // Principles over lists (issue 32; docs/classifier.md).
    ("exec.lookalike", Level::Admin, 60),
    ("exec.written_code", Level::Admin, 60),
    ("exec.stdin_shell", Level::Admin, 60),
    ("exec.unreadable_code", Level::Admin, 60),
    ("exec.stdin_program", Level::Admin, 60),
    ("delete.unknown_targets", Level::Admin, 60),
    ("read.plan", Level::Read, 0),
    // Inline interpreter code (docs/classifier.md, "Inline code").
    ("exec.inline_code.process", Level::Admin, 60),
    ("exec.inline_code.native", Level::Admin, 60),
    ("exec.inline_code.delete", Level::Admin, 60),
    ("exec.inline_code.write_outside", Level::Admin, 60),
    ("exec.inline_code.network", Level::Admin, 60),
    ("exec.inline_code.payload", Level::Admin, 70),
    ("exec.inline_code.written", Level::Admin, 60),
    // A read subcommand of a catch-all rule; an unknown program's verb.
    ("read.subcommand", Level::Read, 0),
    ("exec.unknown.verb", Level::Admin, 50),
    ("exec.option.command", Level::Admin, 60),
    ("system.kill.unknown_targets", Level::Admin, 60),
];

/// Protected paths no policy file can take away (files only add to the
/// list): the workspace's own dryrun configuration.
/// dryrun's own configuration in a workspace: its policy (`.dryrun/`) and
/// `dryrun.yaml` (named tasks, and the `hook:` intent the hooks rehearse
/// under): a run that rewrites them loosens how the next runs are judged,
/// so changing them always needs a person, through every door.
pub const ALWAYS_PROTECTED: &[&str] = &[".dryrun/", "/dryrun.yaml"];

fn parse_file(file: &str, text: &str) -> Result<PolicyFile, PolicyError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| PolicyError::Parse {
        file: file.into(),
        message: format!(
            "{} (at {})",
            crate::errtext::content_free(&e.inner().to_string()),
            crate::errtext::content_free_path(&e.path().to_string())
        ),
    })
}

/// A rule as written, checked; its `arg_regex` is compiled now (an invalid
/// one is an error naming the rule).
fn validate_rule(file: &str, r: &RuleConfig) -> Result<Rule, PolicyError> {
    let valid_id = !r.id.is_empty()
        && r.id.len() <= 80
        && r.id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !valid_id {
        return Err(rule_err(
            file,
            &r.id,
            "id",
            "must be 1-80 characters of [A-Za-z0-9._-]",
        ));
    }
    let commands = r.matcher.command.items();
    if commands.is_empty() || commands.iter().any(|c| c.is_empty() || c.contains('/')) {
        return Err(rule_err(
            file,
            &r.id,
            "match.command",
            "give one or more command names (no paths)",
        ));
    }
    if r.score > 100 {
        return Err(rule_err(file, &r.id, "score", "must be between 0 and 100"));
    }
    if r.reason.trim().is_empty() {
        return Err(rule_err(
            file,
            &r.id,
            "reason",
            "must say why the rule matters",
        ));
    }
    for f in r.matcher.flags_any.iter().chain(r.matcher.flags_all.iter()) {
        if !f.starts_with('-') || f == "-" || f == "--" {
            return Err(rule_err(
                file,
                &r.id,
                "match.flags",
                format!("{f:?} is not a flag"),
            ));
        }
    }
    let arg_regex = match &r.matcher.arg_regex {
        Some(re) => Some(
            RuleRegex::compile(re)
                .map_err(|e| rule_err(file, &r.id, "match.arg_regex", e.to_string()))?,
        ),
        None => None,
    };
    let subcommands = r
        .matcher
        .subcommand
        .as_ref()
        .map(|s| s.items())
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.split_whitespace().map(String::from).collect::<Vec<_>>())
        .collect::<Vec<_>>();
    if subcommands.iter().any(|s| s.is_empty()) {
        return Err(rule_err(file, &r.id, "match.subcommand", "is empty"));
    }
    Ok(Rule {
        id: r.id.clone(),
        commands,
        subcommands,
        flags_any: r.matcher.flags_any.clone(),
        flags_all: r.matcher.flags_all.clone(),
        arg_regex,
        level: r.level,
        score: r.score,
        reason: r.reason.clone(),
        approval: r.approval,
        from_workspace: false,
    })
}

/// A workspace's own policy file (`.dryrun/policy.yaml`), as read with the
/// workspace owner's rights (see `workspace::owner`): the name it is shown
/// by, and its text.
#[derive(Debug, Clone)]
pub struct WorkspacePolicy {
    pub name: String,
    pub text: String,
}

/// Where a workspace's policy lives, relative to the workspace root.
pub const WORKSPACE_POLICY_PATH: &str = ".dryrun/policy.yaml";
/// The largest workspace policy file read.
pub const WORKSPACE_POLICY_MAX: u64 = 256 * 1024;

/// Read a workspace's policy file with the owner's rights (`access` acts as
/// the workspace owner): fd-relative from the pinned workspace, no symlink,
/// a regular file of at most [`WORKSPACE_POLICY_MAX`] bytes. Errors name the
/// file, never its content.
pub fn read_workspace_policy(
    access: &crate::workspace::owner::OwnerSession,
    workspace: &Path,
    identity: &crate::workspace::apply::Identity,
) -> Result<Option<WorkspacePolicy>, PolicyError> {
    let name = WORKSPACE_POLICY_PATH.to_string();
    let bytes = access
        .read_file(
            workspace,
            identity,
            WORKSPACE_POLICY_PATH.as_bytes(),
            WORKSPACE_POLICY_MAX,
        )
        .map_err(|e| PolicyError::Unreadable {
            file: name.clone(),
            message: e.to_string(),
        })?;
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).map_err(|_| PolicyError::Unreadable {
        file: name.clone(),
        message: "is not UTF-8 text".into(),
    })?;
    Ok(Some(WorkspacePolicy { name, text }))
}

/// BLAKE3 over the layers' names and texts, in order: the policy's hash
/// in receipts.
fn content_hash(files: &[(String, String)], tighten_only: Option<&(String, String)>) -> String {
    content_hash_all(files, tighten_only.map(std::slice::from_ref).unwrap_or(&[]))
}

fn content_hash_all(files: &[(String, String)], tighten: &[(String, String)]) -> String {
    let mut hasher = blake3::Hasher::new();
    for (name, text) in files.iter().chain(tighten) {
        hasher.update(name.as_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.finalize().to_hex().to_string()
}

/// One BLAKE3 pass over every layer's name and text: the policy's `hash`
/// (as [`content_hash`]), and keys for the in-process memo and the policy
/// cache (those digests with the lengths that frame them, so two different
/// layerings never share a key).
pub(super) struct LayerDigests {
    pub(super) hash: String,
    memo_key: [u8; 32],
    /// The system layers' (not the workspace's): the cache file's key.
    pub(super) system_key: [u8; 32],
}

#[cfg(test)]
pub(super) fn layer_digests(
    files: &[(String, String)],
    tighten_only: Option<&(String, String)>,
) -> LayerDigests {
    layer_digests_all(files, tighten_only.map(std::slice::from_ref).unwrap_or(&[]))
}

pub(super) fn layer_digests_all(
    files: &[(String, String)],
    tighten: &[(String, String)],
) -> LayerDigests {
    let mut content = blake3::Hasher::new();
    let mut lengths: Vec<u8> = Vec::new();
    let framed = |what: &[u8], lengths: &[u8], digest: blake3::Hash| {
        let mut h = blake3::Hasher::new();
        h.update(what).update(lengths).update(digest.as_bytes());
        *h.finalize().as_bytes()
    };
    fn add(content: &mut blake3::Hasher, lengths: &mut Vec<u8>, (name, text): &(String, String)) {
        for part in [name.as_bytes(), text.as_bytes()] {
            content.update(part);
            lengths.extend_from_slice(&(part.len() as u64).to_le_bytes());
        }
    }
    for f in files {
        add(&mut content, &mut lengths, f);
    }
    let system = content.finalize();
    let n_system = lengths.len();
    for ws in tighten {
        add(&mut content, &mut lengths, ws);
    }
    let all = content.finalize();
    let flag: &[u8] = if !tighten.is_empty() {
        b"system+workspace"
    } else {
        b"system"
    };
    LayerDigests {
        hash: all.to_hex().to_string(),
        memo_key: framed(flag, &lengths, all),
        system_key: framed(b"system", &lengths[..n_system], system),
    }
}

/// Policy layers as (file name, text): the freely layered ones, then the
/// tighten-only ones (a fleet host's own files, the workspace's), and the
/// fleet policy version among them.
struct Layers {
    files: Vec<(String, String)>,
    tighten: Vec<(String, String)>,
    fleet_version: Option<i64>,
}

impl Policy {
    /// The shipped default alone.
    pub fn default_policy() -> Self {
        Self::layered(&Self::shipped_layers(), None)
            .expect("the shipped default policy is valid (checked by a unit test)")
    }

    /// The shipped layers, as (name, text).
    fn shipped_layers() -> Vec<(String, String)> {
        vec![
            (
                "policies/default.yaml".to_string(),
                DEFAULT_POLICY_YAML.to_string(),
            ),
            (
                "policies/stubs.yaml".to_string(),
                STUBS_POLICY_YAML.to_string(),
            ),
        ]
    }

    /// Load default + system files + an optional workspace file.
    pub fn load(
        system_dir: &Path,
        workspace: Option<WorkspacePolicy>,
    ) -> Result<Self, PolicyError> {
        let l = Self::read_layers(system_dir, workspace)?;
        let mut p = Self::layered_all(&l.files, &l.tighten)?;
        p.fleet_version = l.fleet_version;
        Ok(p)
    }

    /// [`Policy::load`], memoized on the exact text of every layer: a
    /// long-lived daemon parses the ~1,900-line default once, and any edit
    /// to a system or workspace policy file is picked up at the next run.
    /// With `cache_dir` (the state directory), the system layers' merge is
    /// also kept, in memory and on disk for the next process (see
    /// `cache.rs`): a run then adds only its workspace layer to it.
    pub fn load_cached(
        system_dir: &Path,
        workspace: Option<WorkspacePolicy>,
        cache_dir: Option<&Path>,
    ) -> Result<std::sync::Arc<Self>, PolicyError> {
        use std::collections::HashMap;
        use std::sync::{Arc, Mutex, OnceLock};
        static CACHE: OnceLock<Mutex<HashMap<[u8; 32], Arc<Policy>>>> = OnceLock::new();
        let l = Self::read_layers(system_dir, workspace)?;
        let digests = layer_digests_all(&l.files, &l.tighten);
        let key = digests.memo_key;
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(p.clone());
        }
        let mut p = match cache_dir {
            Some(dir) => cache::layered_via_disk_all(dir, &l.files, &l.tighten, digests)?,
            None => Self::layered_all(&l.files, &l.tighten)?,
        };
        p.fleet_version = l.fleet_version;
        let p = Arc::new(p);
        let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.len() >= 64 {
            c.clear();
        }
        c.insert(key, p.clone());
        Ok(p)
    }

    fn read_layers(
        system_dir: &Path,
        workspace: Option<WorkspacePolicy>,
    ) -> Result<Layers, PolicyError> {
        let mut files = Self::shipped_layers();
        let mut local = Vec::new();
        if let Ok(rd) = std::fs::read_dir(system_dir) {
            let mut paths: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                .collect();
            paths.sort();
            for p in paths {
                let text = std::fs::read_to_string(&p).map_err(|source| PolicyError::Read {
                    file: p.display().to_string(),
                    source,
                })?;
                local.push((p.display().to_string(), text));
            }
        }
        // On a fleet host, the fleet's policy is the system layer and this
        // host's own files may only tighten it.
        let mut tighten = Vec::new();
        let mut fleet_version = None;
        match fleet::current().as_deref() {
            None => files.extend(local),
            Some(fleet::FleetLayer::Version { version, text }) => {
                files.push((fleet::layer_name(*version), text.to_string()));
                tighten.extend(local);
                fleet_version = Some(*version);
            }
            Some(fleet::FleetLayer::BelowMinimum { have, minimum }) => {
                return Err(fleet::below_minimum(*have, *minimum));
            }
        }
        tighten.extend(workspace.map(|w| (w.name, w.text)));
        Ok(Layers {
            files,
            tighten,
            fleet_version,
        })
    }

    /// `files` may change anything (later wins by rule id); `tighten_only`
    /// may only make the policy stricter.
    // Long on purpose: the files in order (later wins by rule id), then the tighten-only
    // layer checked against what they set, sharing one merge state and one hash.
    pub fn layered(
        files: &[(String, String)],
        tighten_only: Option<&(String, String)>,
    ) -> Result<Self, PolicyError> {
        let parsed = files
            .iter()
            .map(|(name, text)| Ok((name.clone(), parse_file(name, text)?)))
            .collect::<Result<Vec<_>, PolicyError>>()?;
        let tighten = match tighten_only {
            Some((name, text)) => Some((name.clone(), parse_file(name, text)?)),
            None => None,
        };
        Self::merge(
            &parsed,
            tighten.as_slice(),
            content_hash(files, tighten_only),
        )
    }

    /// [`Policy::layered`] with any number of tighten-only layers, in order.
    fn layered_all(
        files: &[(String, String)],
        tighten: &[(String, String)],
    ) -> Result<Self, PolicyError> {
        let parsed = files
            .iter()
            .map(|(name, text)| Ok((name.clone(), parse_file(name, text)?)))
            .collect::<Result<Vec<_>, PolicyError>>()?;
        let tight = tighten
            .iter()
            .map(|(name, text)| Ok((name.clone(), parse_file(name, text)?)))
            .collect::<Result<Vec<_>, PolicyError>>()?;
        Self::merge(&parsed, &tight, content_hash_all(files, tighten))
    }

    /// Parsed layers merged and validated (see [`Policy::layered`] and
    /// `merge.rs`).
    fn merge(
        files: &[(String, PolicyFile)],
        tighten: &[(String, PolicyFile)],
        hash: String,
    ) -> Result<Self, PolicyError> {
        let mut m = merge::Merged::new();
        for (name, f) in files {
            m.add_system_layer(name, f)?;
        }
        for (name, f) in tighten {
            m.add_workspace_layer(name, f)?;
        }
        Ok(m.into_policy(hash))
    }

    /// Rules that name `command`.
    pub fn rules_for(&self, command: &str) -> impl Iterator<Item = &Rule> {
        self.by_command
            .naming(&self.rules, command)
            .iter()
            .map(|(i, _)| &self.rules[*i as usize])
    }

    /// The protected-path pattern covering `path` (workspace-relative), if
    /// any: the same list the rehearsal's verdict checks changes against.
    pub fn protected_path(&self, path: &str) -> Option<&str> {
        self.protected_matcher.first_match(path.as_bytes())
    }

    /// The protected paths' matcher, shared (compiled once per policy).
    pub(crate) fn protected_matcher(&self) -> std::sync::Arc<crate::workspace::paths::PathMatcher> {
        self.protected_matcher.clone()
    }

    pub fn knows(&self, command: &str) -> bool {
        !self.by_command.naming(&self.rules, command).is_empty()
    }

    pub fn builtin(&self, id: &str) -> (Level, u32) {
        self.builtin
            .get(id)
            .map(|b| (b.level, b.score))
            .unwrap_or((Level::Admin, 60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_system_policy_lets_homes_be_workspaces() {
        let allow = "workspace_bound: {allow_homes: true}\n";
        assert!(!Policy::default_policy().allow_home_workspaces);
        let sys = Policy::layered(&[("sys.yaml".into(), allow.into())], None).unwrap();
        assert!(sys.allow_home_workspaces);
        let e = Policy::layered(
            &[("sys.yaml".into(), "rules: []\n".into())],
            Some(&(".dryrun/policy.yaml".into(), allow.into())),
        )
        .unwrap_err();
        assert!(e.to_string().contains("only a system policy file"), "{e}");
        // Saying no again is not loosening.
        let p = Policy::layered(
            &[("sys.yaml".into(), allow.into())],
            Some(&(
                ".dryrun/policy.yaml".into(),
                "workspace_bound: {allow_homes: false}\n".into(),
            )),
        )
        .unwrap();
        assert!(p.allow_home_workspaces);
        let e = Policy::layered(
            &[(
                "sys.yaml".into(),
                "workspace_bound: {allow_home: true}\n".into(),
            )],
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("allow_home"), "{e}");
    }

    #[test]
    fn the_workspace_dryrun_dir_is_protected_whatever_the_files_say() {
        let bare = Policy::layered(&[("empty.yaml".into(), "rules: []\n".into())], None).unwrap();
        assert!(bare.protected_paths.iter().any(|p| p == ".dryrun/"));
        assert!(
            Policy::default_policy()
                .protected_paths
                .iter()
                .any(|p| p == ".dryrun/")
        );
    }
}
