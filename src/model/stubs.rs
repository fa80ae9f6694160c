//! The stub vocabulary and its pure rules: which rule answers a call, with
//! what, how a call record is bounded and when a record is one a stub of
//! the table could have written. Installing stubs and the `__stub-exec`
//! program live in `sandbox::stubs`; the policy's configuration in
//! `policy::stubs`.

use serde::{Deserialize, Serialize};

/// The argument (after the shebang's interpreter) that selects stub mode.
pub const STUB_ARG_PREFIX: &str = "__stub-exec ";
/// The `dryrun` binary inside the sandbox: the stub scripts' interpreter
/// when the build's small stub program is not installed beside it, and
/// where that program hands a call it should not decide.
pub(crate) const STUB_INTERPRETER: &str = "/.dryrun/bin/dryrun";
/// The small stub program (`dryrun-stub`, the same stub code and nothing
/// else) inside the sandbox: the scripts' interpreter when it is there.
pub(crate) const SMALL_STUB_INTERPRETER: &str = "/.dryrun/bin/dryrun-stub";
/// The small stub program's file name, beside the `dryrun` binary.
pub(crate) const SMALL_STUB_NAME: &str = "dryrun-stub";
/// This build's identity (see `build.rs`): the stub table carries the
/// helper's, the small stub program compares it with its own.
pub(crate) const BUILD_ID: &str = env!("DRYRUN_BUILD_ID");
/// How a stub script run by `interpreter` begins (the tool's name follows).
pub(crate) fn stub_script_prefix(interpreter: &str) -> String {
    format!("#!{interpreter} {STUB_ARG_PREFIX}")
}
/// The tool a stub script shadows, when `text` is one (either interpreter).
pub(crate) fn stub_script_tool(text: &[u8]) -> Option<String> {
    [STUB_INTERPRETER, SMALL_STUB_INTERPRETER]
        .iter()
        .find_map(|i| text.strip_prefix(stub_script_prefix(i).as_bytes()))
        .and_then(|rest| std::str::from_utf8(rest).ok())
        .map(|t| t.trim_end().to_string())
}
/// Tools a stub may never shadow: the shell that runs the command and the
/// stubs' own interpreters.
pub(crate) const NEVER_STUBBED: [&str; 6] =
    ["bash", "sh", "dash", "env", "dryrun", SMALL_STUB_NAME];
/// How a strict replay's refusal of a novel call begins (its stderr).
pub(crate) const NOVEL_REFUSAL_PREFIX: &str = "dryrun replay (strict): ";
/// The first bytes of stdin kept in a would-be action.
pub(crate) const STDIN_HEAD: usize = 1024;
/// What a call record keeps of the call (the argv hash covers all of it):
/// each argument up to ARG_MAX_KEPT bytes, the arguments up to ARGV_MAX_KEPT
/// bytes in all, ENV_NAMES_MAX_KEPT variable names of up to NAME_MAX_KEPT
/// bytes, a cwd of up to PATH_MAX_KEPT bytes.
pub(crate) const ARG_MAX_KEPT: usize = 4096;
pub(crate) const ARGV_MAX_KEPT: usize = 64 * 1024;
pub(crate) const ENV_NAMES_MAX_KEPT: usize = 512;
pub(crate) const NAME_MAX_KEPT: usize = 128;
pub(crate) const PATH_MAX_KEPT: usize = 4096;

/// How a stub answers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    #[serde(default)]
    pub exit: i32,
}

/// Whether a stub reads its stdin (to hash it and keep its first KiB).
/// The real tool reads stdin only for some calls; a stub that read it
/// always would swallow input meant for the rest of a script
/// (`while read n; do gh pr close "$n"; done < list`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// Read stdin when an argument says the tool takes it: `-`, `@-`,
    /// `...=-`, `...=@-`, `/dev/stdin`, or a flag naming stdin
    /// (`--password-stdin`).
    #[default]
    Auto,
    /// Always read stdin (a tool that takes its input there unasked).
    Read,
    /// Never read stdin.
    Ignore,
}

impl StdinMode {
    pub fn reads(self, args: &[String]) -> bool {
        match self {
            StdinMode::Read => true,
            StdinMode::Ignore => false,
            StdinMode::Auto => args.iter().any(|a| {
                a == "-"
                    || a.ends_with("=-")
                    || a.ends_with("@-")
                    || a.contains("/dev/stdin")
                    || (a.starts_with('-') && a.contains("stdin"))
            }),
        }
    }
}

/// A validated stub rule (see `policy::stubs` for the configuration).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StubRule {
    pub id: String,
    /// `policy` or `envelope` (an envelope's or a `--stub` override).
    pub origin: String,
    pub tool: String,
    /// Alternatives; each a sequence of leading positional words.
    pub subcommands: Vec<Vec<String>>,
    pub flags_any: Vec<String>,
    pub flags_all: Vec<String>,
    pub arg_regex: Option<String>,
    pub answer: Answer,
    #[serde(default)]
    pub stdin: StdinMode,
}

/// What a replay does with a call the recording never saw.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NovelPolicy {
    /// The call fails and the replay is blocked, naming it.
    Strict,
    /// The stub rule's own answer.
    #[default]
    Stub,
    /// The nearest recorded call of the same tool.
    Fuzzy,
}

impl NovelPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            NovelPolicy::Strict => "strict",
            NovelPolicy::Stub => "stub",
            NovelPolicy::Fuzzy => "fuzzy",
        }
    }
}

/// A recorded call and its answer, for a replay.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedCall {
    pub tool: String,
    pub argv_hash: String,
    pub argv: Vec<String>,
    pub answer: Answer,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplaySet {
    pub baseline: String,
    pub novel: NovelPolicy,
    pub calls: Vec<RecordedCall>,
}

/// Everything the stubs of one run need, written read-only into the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StubTable {
    /// In priority order: overrides first, then the policy's.
    pub rules: Vec<StubRule>,
    #[serde(default)]
    pub replay: Option<ReplaySet>,
    /// The build that wrote the table ([`BUILD_ID`]).
    #[serde(default)]
    pub build: String,
}

fn yes() -> bool {
    true
}

/// The stdin a stubbed call was given.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct StdinRecord {
    /// Whether the stub read stdin at all (see [`StdinMode`]); when not,
    /// the other fields are empty and the input is left for whoever reads
    /// it next, as with the real tool.
    #[serde(default = "yes")]
    pub read: bool,
    pub bytes: u64,
    pub blake3: String,
    /// The first KiB, as text (invalid UTF-8 replaced).
    pub head: String,
    /// More than the stub reads (64 MiB) was offered; the hash covers what was read.
    #[serde(default)]
    pub truncated: bool,
}

/// One call a stub answered instead of the real tool.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WouldBeAction {
    pub tool: String,
    /// The argument vector, `argv[0]` being the tool's name (each argument
    /// kept up to 4 KiB and 64 KiB in all; see `argv_truncated`).
    pub argv: Vec<String>,
    /// Some of argv was cut to keep the record bounded; `argc` counts all
    /// of it and `argv_hash` covers all of it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_truncated: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub argc: usize,
    /// BLAKE3 of the canonical argv (JSON array of tool and arguments); a
    /// replay looks answers up by (tool, argv_hash).
    pub argv_hash: String,
    pub cwd: String,
    pub stdin: StdinRecord,
    /// Names (never values) of the environment variables the tool saw:
    /// shell identifiers only (see `model::text`).
    pub env_names: Vec<String>,
    /// How many variables the tool saw whose names are not shell
    /// identifiers (counted, never named).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub env_unnamed: usize,
    /// The stub rule that matched.
    pub rule: String,
    /// `stub` (the rule's answer), `override` (an envelope/--stub answer),
    /// `replay` (the recording's answer), `replay_fuzzy` (the nearest
    /// recorded call's), `novel` (a strict replay refused it).
    pub source: String,
    pub answer: Answer,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl WouldBeAction {
    /// The call as reviewers read it: `gh pr merge 12 --squash`.
    pub fn shown(&self) -> String {
        shown_call(&self.tool, &self.argv[1.min(self.argv.len())..])
    }
}

/// Canonical argv hash: BLAKE3 over the JSON array `[tool, args...]`.
pub(crate) fn argv_hash(tool: &str, args: &[String]) -> String {
    let mut v: Vec<&str> = Vec::with_capacity(args.len() + 1);
    v.push(tool);
    v.extend(args.iter().map(String::as_str));
    let json = serde_json::to_vec(&v).expect("strings serialize");
    blake3::hash(&json).to_hex().to_string()
}

impl StubRule {
    /// Does a call of this rule's tool with `args` match? The subcommand
    /// starts where the classifier's rules say it does (one rule:
    /// `model::subcommand`): `git stash push` is `stash`, never `push`.
    /// Flags in any position.
    pub fn matches(&self, args: &[String]) -> bool {
        let texts: Vec<&str> = args.iter().map(String::as_str).collect();
        let positionals = super::subcommand::Positionals::of(&self.tool, &texts);
        if !self.subcommands.is_empty()
            && !self
                .subcommands
                .iter()
                .any(|sub| positionals.starts_with(sub))
        {
            return false;
        }
        let has = |f: &String| args.iter().any(|a| has_flag(a, f));
        if !self.flags_any.is_empty() && !self.flags_any.iter().any(has) {
            return false;
        }
        if !self.flags_all.iter().all(has) {
            return false;
        }
        if let Some(re) = &self.arg_regex {
            // Validated when the rule was built.
            let Ok(re) = regex::Regex::new(re) else {
                return false;
            };
            if !args.iter().any(|a| re.is_match(a)) {
                return false;
            }
        }
        true
    }
}

/// What a stub does with one call.
#[derive(Debug, Clone, PartialEq)]
pub enum StubDecision {
    /// No rule matches: run the real tool.
    Passthrough,
    Answer {
        rule: String,
        source: &'static str,
        answer: Answer,
        /// The matching rule's stdin mode.
        stdin: StdinMode,
    },
}

impl StubTable {
    /// A table of this build.
    pub fn new(rules: Vec<StubRule>, replay: Option<ReplaySet>) -> Self {
        StubTable {
            rules,
            replay,
            build: BUILD_ID.to_string(),
        }
    }

    pub fn tools(&self) -> Vec<String> {
        let mut t: Vec<String> = self.rules.iter().map(|r| r.tool.clone()).collect();
        t.sort();
        t.dedup();
        t
    }

    pub fn decide(&self, tool: &str, args: &[String]) -> StubDecision {
        let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.tool == tool && r.matches(args))
        else {
            return StubDecision::Passthrough;
        };
        let answer = |source: &'static str, answer: &Answer| StubDecision::Answer {
            rule: rule.id.clone(),
            source,
            answer: answer.clone(),
            stdin: rule.stdin,
        };
        if rule.origin == "envelope" {
            // A counterfactual: this answer replaces the recording's too.
            return answer("override", &rule.answer);
        }
        let Some(replay) = &self.replay else {
            return answer("stub", &rule.answer);
        };
        let hash = argv_hash(tool, args);
        if let Some(c) = replay
            .calls
            .iter()
            .find(|c| c.tool == tool && c.argv_hash == hash)
        {
            return answer("replay", &c.answer);
        }
        match replay.novel {
            NovelPolicy::Stub => answer("stub", &rule.answer),
            NovelPolicy::Strict => StubDecision::Answer {
                rule: rule.id.clone(),
                source: "novel",
                stdin: StdinMode::Ignore,
                answer: Answer {
                    stdout: String::new(),
                    stderr: format!(
                        "{NOVEL_REFUSAL_PREFIX}the recording of run {} never saw `{}`; nothing answered it\n",
                        replay.baseline,
                        shown_call(tool, args)
                    ),
                    exit: 127,
                },
            },
            NovelPolicy::Fuzzy => {
                let nearest = replay
                    .calls
                    .iter()
                    .filter(|c| c.tool == tool)
                    .min_by_key(|c| token_distance(&c.argv[1.min(c.argv.len())..], args));
                match nearest {
                    Some(c) => answer("replay_fuzzy", &c.answer),
                    None => answer("stub", &rule.answer),
                }
            }
        }
    }
}

/// `tool arg1 arg2`, for messages (long calls shortened), escaped for
/// people like every name a message embeds (see [`super::text`]).
pub(crate) fn shown_call(tool: &str, args: &[String]) -> String {
    let mut s = tool.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    if s.chars().count() > 200 {
        let cut: String = s.chars().take(200).collect();
        return format!("{}…", super::text::escape_for_humans(cut.as_bytes()));
    }
    super::text::escape_for_humans(s.as_bytes())
}

/// Edit distance between two argument lists, counted in whole arguments.
pub(crate) fn token_distance(a: &[String], b: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(x != y);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Does `arg` carry flag `flag`? `-r` matches `-r`, `-rf`, `-fr` (single-dash
/// clusters of letters), and `-H` matches `-H/bin/sh` (getopt reads a short
/// option's value attached to it; `-Dkey=value` is `-D`'s, not `-e`'s);
/// `--force` matches `--force` and `--force=...`. Stub rules and the
/// classifier's rules match flags the same way.
pub fn has_flag(arg: &str, flag: &str) -> bool {
    if let Some(long) = flag.strip_prefix("--") {
        return arg == flag
            || arg
                .strip_prefix("--")
                .is_some_and(|a| a.split('=').next() == Some(long));
    }
    if arg == flag {
        return true;
    }
    let f = flag.trim_start_matches('-');
    if f.chars().count() == 1 && arg.starts_with('-') && !arg.starts_with("--") {
        let body = &arg[1..];
        if body.chars().all(|c| c.is_ascii_alphanumeric()) {
            return body.contains(f);
        }
        return body.starts_with(f);
    }
    false
}

/// Is a call record (written inside the sandbox, where the command could
/// have written it too) what a stub of `table` writes? The answer must be
/// the one the table gives for that argv (so it cannot be forged into
/// something milder), the hash must cover the argv, and every field must be
/// within the bounds the stub keeps.
pub(crate) fn record_is_consistent(a: &WouldBeAction, table: &StubTable) -> bool {
    let bounded = a.argv.len() <= 1 + ARGV_MAX_KEPT
        && a.argv.iter().map(String::len).sum::<usize>() <= ARG_MAX_KEPT + ARGV_MAX_KEPT
        && a.argv.iter().all(|x| x.len() <= ARG_MAX_KEPT)
        && a.cwd.len() <= PATH_MAX_KEPT
        && a.env_names.len() <= ENV_NAMES_MAX_KEPT
        && a.env_names
            .iter()
            .all(|n| n.len() <= NAME_MAX_KEPT && super::text::is_shell_identifier(n))
        // The head is at most 1 KiB of input, each invalid byte shown as
        // U+FFFD (3 bytes).
        && a.stdin.head.len() <= 3 * STDIN_HEAD
        && a.argv_hash.len() == 64
        && a.argv.first() == Some(&a.tool);
    if !bounded {
        return false;
    }
    if a.argv_truncated {
        // The argv cannot be matched again; what can be checked: the cut is
        // real (the stub marks only an argv it had to cut), and the answer
        // is one this rule can give with this source.
        let args = &a.argv[1..];
        let cut = a.argc > a.argv.len()
            || args.iter().any(|x| x.len() + 3 >= ARG_MAX_KEPT)
            || args.iter().map(String::len).sum::<usize>() + 3 >= ARGV_MAX_KEPT;
        let Some(rule) = table
            .rules
            .iter()
            .find(|r| r.tool == a.tool && r.id == a.rule)
        else {
            return false;
        };
        let replayed = |fuzzy: bool| {
            table.replay.as_ref().is_some_and(|r| {
                (!fuzzy || r.novel == NovelPolicy::Fuzzy)
                    && r.calls
                        .iter()
                        .any(|c| c.tool == a.tool && c.answer == a.answer)
            })
        };
        let answer_ok = match a.source.as_str() {
            "override" => rule.origin == "envelope" && a.answer == rule.answer,
            "stub" => rule.origin != "envelope" && a.answer == rule.answer,
            "replay" => rule.origin != "envelope" && replayed(false),
            "replay_fuzzy" => rule.origin != "envelope" && replayed(true),
            "novel" => {
                rule.origin != "envelope"
                    && table
                        .replay
                        .as_ref()
                        .is_some_and(|r| r.novel == NovelPolicy::Strict)
                    && a.answer.exit == 127
                    && a.answer.stdout.is_empty()
                    && a.answer.stderr.len() <= 2048
                    && a.answer.stderr.starts_with(NOVEL_REFUSAL_PREFIX)
            }
            _ => false,
        };
        return a.argc >= a.argv.len() && cut && answer_ok;
    }
    let args = &a.argv[1..];
    if argv_hash(&a.tool, args) != a.argv_hash {
        return false;
    }
    match table.decide(&a.tool, args) {
        StubDecision::Answer {
            rule,
            source,
            answer,
            ..
        } => rule == a.rule && source == a.source && answer == a.answer,
        StubDecision::Passthrough => false,
    }
}
/// `s` cut to at most `max` bytes, on a character boundary.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The argv a call record keeps, and whether any of it was cut.
pub(crate) fn kept_argv(tool: &str, args: &[String]) -> (Vec<String>, bool) {
    let mut kept = vec![cut(tool, ARG_MAX_KEPT)];
    let mut budget = ARGV_MAX_KEPT;
    let mut truncated = false;
    for a in args {
        if budget == 0 {
            truncated = true;
            break;
        }
        let c = cut(a, ARG_MAX_KEPT.min(budget));
        truncated |= c.len() < a.len();
        budget -= c.len();
        kept.push(c);
    }
    (kept, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(sub: &[&str]) -> StubRule {
        StubRule {
            id: "git.push".into(),
            origin: "policy".into(),
            tool: "git".into(),
            subcommands: vec![sub.iter().map(|s| s.to_string()).collect()],
            flags_any: vec![],
            flags_all: vec![],
            arg_regex: None,
            answer: Answer::default(),
            stdin: StdinMode::default(),
        }
    }

    fn args(a: &str) -> Vec<String> {
        a.split_whitespace().map(str::to_string).collect()
    }

    /// A stub's rule finds the subcommand where the classifier's rules do
    /// (`model::subcommand`): `git stash push` is a stash, not a push (it
    /// was answered by the push stub, and the stash never made).
    #[test]
    fn a_stub_finds_the_subcommand_where_the_classifier_does() {
        let push = rule(&["push"]);
        for yes in ["push origin main", "-C dir -c a=b push -f"] {
            assert!(push.matches(&args(yes)), "{yes}");
        }
        for no in ["stash push -m x", "-c a=b stash push"] {
            assert!(!push.matches(&args(no)), "{no}");
        }
        let mut merge = rule(&["pr", "merge"]);
        merge.tool = "gh".into();
        assert!(merge.matches(&args("--repo o/r pr merge 4")));
        assert!(!merge.matches(&args("api pr merge")));
    }
}
