//! The risk classifier: a real bash parse → every simple command that will
//! run (wrappers unwrapped, `sh -c` strings followed) → findings scored by the
//! policy. Pure: no I/O, nothing the caller says about risk is consulted.

mod bypass;
mod carriers;
mod file_lists;
mod forms;
mod inline;
mod operands;
pub mod parse;
mod paths;
pub mod principles;
mod rules;
mod runners;
mod stdin_programs;
mod tables;
mod words;
mod wrappers;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::model::Decision;
use crate::policy::{Level, Policy};
use parse::{Extracted, RedirectKind, SimpleCommand, Word};
pub use tables::SECRET_MARKERS;
use tables::{INTERPRETERS, SENSITIVE_NAMES, SHELLS, SYSTEM_DIRS};
use wrappers::{peel_wrappers, shell_args_for_rules};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RiskFinding {
    pub rule: String,
    pub level: Level,
    pub score: u32,
    pub reason: String,
    /// The simple command it was found in, as words.
    pub command: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approval: bool,
}

/// The record's `risk` object plus details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    pub score: u32,
    pub level: String,
    pub requires_approval: bool,
    pub reasons: Vec<String>,
    pub decision: Decision,
    pub permission: Level,
    pub findings: Vec<RiskFinding>,
    /// Every simple command seen, after unwrapping.
    pub commands: Vec<String>,
    pub policy_hash: String,
}

/// One finding explained: its rule, the principle the rule comes from, and
/// what it saw (`dryrun classify --explain`, the MCP `classify` tool).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explained {
    pub rule: String,
    pub principle: principles::Principle,
    pub principle_text: &'static str,
    pub level: Level,
    pub score: u32,
    pub reason: String,
    pub command: String,
}

impl Classification {
    /// Every finding with the principle its rule comes from, most severe
    /// first (the order of `findings`).
    pub fn explain(&self) -> Vec<Explained> {
        self.findings
            .iter()
            .map(|f| {
                let principle = principles::Principle::of(&f.rule, f.level);
                Explained {
                    rule: f.rule.clone(),
                    principle,
                    principle_text: principle.describe(),
                    level: f.level,
                    score: f.score,
                    reason: f.reason.clone(),
                    command: f.command.clone(),
                }
            })
            .collect()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Paths inside it are not "outside the workspace".
    pub workspace: Option<PathBuf>,
    /// The command is one of an envelope's explicit `steps`.
    pub is_step: bool,
}

struct Ctx<'a> {
    policy: &'a Policy,
    opts: &'a Options,
    findings: Vec<RiskFinding>,
    commands: Vec<String>,
    /// Where an earlier `cd` went (relative paths after it are judged from
    /// there; never reset, which errs on the safe side).
    cwd: Cwd,
    /// Most simple commands in any one shell string (the top-level string,
    /// or one passed to `sh -c`/`eval`); wrappers are not counted.
    max_chain: usize,
    /// Aliases the string defines (`alias x='rm -rf'`), resolved where it
    /// uses them later on.
    aliases: BTreeMap<String, String>,
    /// Files a downloader in this string wrote (`curl -o i.sh`), so that
    /// running one later is seen as running a download.
    downloaded: Vec<String>,
    /// Files this string writes (`> f`, `tee f`, `cp x f`), by path or by
    /// the variable that names them (`$TF`): code read back from one of
    /// them later in the same string was never seen by anyone.
    written: Vec<String>,
    /// How many of `written` came from commands before the current one (a
    /// command's own outputs, `docker build -t app`, are not code it runs).
    written_before: usize,
    /// The simple command being analysed has something we can read on its
    /// stdin (a heredoc, a here-string, a redirect, a pipe).
    stdin_fed: bool,
    /// The command being analysed gets more operands from elsewhere (a
    /// file list on xargs' stdin): what, for a reason.
    targets_from: Option<&'static str>,
    /// This command's stdin is a list of workspace file names
    /// (`find . | xargs rm`: `file_lists`).
    workspace_list: bool,
    /// The program being analysed is given directories as its targets
    /// (`find -type d`'s results, by `-exec` or a list piped to xargs).
    dir_targets: bool,
    /// Variables `read`/`mapfile` fill from input in this string.
    read_vars: Vec<String>,
    /// Variables this string sets (`X=...`, `for X in`, `read X`): any
    /// other comes from the caller's environment.
    set_vars: Vec<String>,
}

/// Where relative paths point, after the `cd`s seen so far.
#[derive(Debug, Clone, PartialEq)]
enum Cwd {
    /// Where the command starts (the workspace).
    Start,
    /// A directory written out (`cd src`, `cd /etc`, `cd ~`).
    Known(String),
    /// A directory computed when it runs (`cd "$d"`, `cd -`): relative
    /// paths then point somewhere unknown. They are not taken as outside
    /// the workspace (a loop over `services/*/` stays inside), but a delete
    /// of them is a delete of unknown targets.
    Unknown,
}

/// Classify one shell string.
pub fn classify(src: &str, policy: &Policy, opts: &Options) -> Classification {
    let mut cx = Ctx {
        policy,
        opts,
        findings: Vec::new(),
        commands: Vec::new(),
        max_chain: 0,
        cwd: Cwd::Start,
        aliases: BTreeMap::new(),
        downloaded: Vec::new(),
        written: Vec::new(),
        written_before: 0,
        stdin_fed: false,
        targets_from: None,
        workspace_list: false,
        dir_targets: false,
        read_vars: Vec::new(),
        set_vars: Vec::new(),
    };
    let mut pipeline_counter = 0;
    cx.analyse_source(src, 0, &mut pipeline_counter);
    cx.finish()
}

/// Classify an envelope's steps (or its one command): each step on its own,
/// combined by taking the maximum.
pub fn classify_steps(
    steps: &[String],
    uses_steps: bool,
    policy: &Policy,
    opts: &Options,
) -> Classification {
    let mut per: Vec<Classification> = steps
        .iter()
        .map(|s| {
            classify(
                s,
                policy,
                &Options {
                    is_step: uses_steps,
                    ..opts.clone()
                },
            )
        })
        .collect();
    if per.len() == 1 {
        return per.pop().expect("one");
    }
    let mut findings = Vec::new();
    let mut commands = Vec::new();
    for (i, c) in per.iter().enumerate() {
        for f in &c.findings {
            let mut f = f.clone();
            f.reason = format!("step {}: {}", i + 1, f.reason);
            findings.push(f);
        }
        commands.extend(c.commands.iter().cloned());
    }
    let score = per.iter().map(|c| c.score).max().unwrap_or(0);
    let permission = per
        .iter()
        .map(|c| c.permission)
        .max()
        .unwrap_or(Level::Read);
    let decision = per
        .iter()
        .map(|c| c.decision)
        .max()
        .unwrap_or(Decision::Promote);
    let requires_approval = per.iter().any(|c| c.requires_approval);
    let reasons = findings
        .iter()
        .map(|f| format!("[{}] {}", f.rule, f.reason))
        .collect();
    Classification {
        score,
        level: permission.risk_level().into(),
        requires_approval,
        reasons,
        decision,
        permission,
        findings,
        commands,
        policy_hash: policy.hash.clone(),
    }
}

fn render(argv: &[Word]) -> String {
    let mut out = String::with_capacity(argv.iter().map(|w| w.raw.len() + 1).sum());
    for (i, w) in argv.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&w.raw);
    }
    out
}

fn is_flag(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1
}

/// The last component of a program name (`/usr/bin/rm` → `rm`).
fn base_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

pub use crate::model::stubs::has_flag;

impl Ctx<'_> {
    fn add(&mut self, rule: &str, reason: String, command: &str) {
        let (level, score) = self.policy.builtin(rule);
        self.push(rule, level, score, reason, command, false);
    }

    fn push(
        &mut self,
        rule: &str,
        level: Level,
        score: u32,
        reason: String,
        command: &str,
        approval: bool,
    ) {
        if self
            .findings
            .iter()
            .any(|f| f.rule == rule && f.reason == reason && f.command == command)
        {
            return;
        }
        self.findings.push(RiskFinding {
            rule: rule.into(),
            level,
            score,
            reason,
            command: command.into(),
            approval,
        });
    }

    fn analyse_source(&mut self, src: &str, depth: u32, counter: &mut usize) {
        let mut ex = Extracted::default();
        if let Err(e) = parse::extract(src, depth, &mut ex, counter) {
            let shown: String = src.chars().take(120).collect();
            if depth > 0 {
                // The command parses; a program string it hands to a shell
                // (`sh -c '...'`, `ssh host '...'`, `su -c`) does not: what
                // it runs cannot be read (a shell that is not bash, or an
                // error at run time), which is `hides_what_runs`.
                self.add(
                    "exec.unreadable_code",
                    format!("a program string it runs does not parse as bash ({e}); what it runs cannot be read"),
                    &shown,
                );
                return;
            }
            self.add(
                "parse.error",
                format!("does not parse as bash ({e}); it cannot be scored"),
                &shown,
            );
            return;
        }
        self.set_vars.extend(ex.loop_vars.iter().cloned());
        for u in ex.unhandled.clone() {
            self.add("parse.unhandled", u, "");
        }
        for f in ex.functions.clone() {
            if self.policy.knows(&f) || SENSITIVE_NAMES.contains(&f.as_str()) {
                self.add(
                    "obfuscation.redefinition",
                    format!("defines a function named {f}, shadowing the real command"),
                    &f,
                );
            }
        }
        let n_commands = ex.commands.iter().filter(|c| !c.argv.is_empty()).count();
        self.max_chain = self.max_chain.max(n_commands);
        if depth == 0 && n_commands > 1 {
            self.add(
                "chain.opaque",
                format!("a one-liner of {n_commands} commands; intermediate effects are only seen together"),
                "",
            );
        }
        self.typed_keys(&ex, src, depth);
        for c in &ex.commands {
            self.stdin_program(c, &ex, depth, counter);
            self.stdin_script(c, &ex);
            self.workspace_list = self.cwd == Cwd::Start && file_lists::workspace_file_list(c, &ex);
            self.dir_targets = file_lists::xargs_of_directories(c, &ex);
            self.simple(c, depth, counter);
            (self.workspace_list, self.dir_targets) = (false, false);
        }
    }

    /// Pipelines, heredocs, here-strings and `< <(...)` feeding a shell or
    /// an interpreter its program.
    fn stdin_program(
        &mut self,
        c: &SimpleCommand,
        ex: &Extracted,
        depth: u32,
        counter: &mut usize,
    ) {
        {
            let inner = peel_wrappers(&c.argv);
            if !self.reads_program_from_stdin(inner) {
                return;
            }
            let shown = render(&c.argv);
            // A shell's program on stdin is bash we can read; another
            // interpreter's is scored by the policy (inline code).
            let is_shell = inner
                .first()
                .and_then(|w| w.literal.as_deref())
                .map(base_name)
                .is_some_and(|n| SHELLS.contains(&n) || matches!(n, "source" | "."));
            if !is_shell && let Some(name) = inner.first().and_then(|w| w.literal.as_deref()) {
                // An interpreter's program on stdin is matched by the
                // policy's inline-code rules as if it were given with `-c`.
                let mut with_code: Vec<Word> = inner[1..].to_vec();
                with_code.extend(c.stdin_text.iter().filter(|w| w.literal.is_some()).cloned());
                if with_code.len() > inner.len() - 1 {
                    self.match_rules(base_name(name), &with_code, &shown);
                }
                let code: Vec<&str> = c
                    .stdin_text
                    .iter()
                    .filter_map(|w| w.literal.as_deref())
                    .collect();
                if !code.is_empty() {
                    self.inline_code(base_name(name), &code.join("\n"), &shown);
                }
            }
            if !is_shell
                && c.stdin_text.is_empty()
                && c.position == 0
                && !c.redirects.iter().any(|r| r.kind == RedirectKind::Read)
            {
                self.stdin_unseen(inner, &shown);
            }
            for w in c.stdin_text.iter().filter(|_| is_shell) {
                match &w.literal {
                    Some(text) => {
                        let text = text.clone();
                        self.nested(&text, depth, counter);
                    }
                    None => self.add(
                        "obfuscation.dynamic_command",
                        "an interpreter runs a here-string computed at run time".into(),
                        &shown,
                    ),
                }
            }
            for r in c.redirects.iter().filter(|_| is_shell) {
                if r.kind == RedirectKind::Read && c.stdin_text.is_empty() {
                    if r.target.literal.is_none() {
                        self.add(
                            "obfuscation.pipe_to_shell",
                            format!(
                                "feeds {} into an interpreter, which runs it unseen",
                                r.target.raw
                            ),
                            &shown,
                        );
                    } else {
                        self.add(
                            "exec.unknown",
                            format!(
                                "an interpreter runs the file {}, whose contents are not analysed",
                                r.target.raw
                            ),
                            &shown,
                        );
                        let t = r.target.text().to_string();
                        self.ran_written_file(&t, &shown);
                    }
                }
            }
            if c.position > 0 {
                let feeder = ex
                    .commands
                    .iter()
                    .find(|o| o.pipeline == c.pipeline && o.position == c.position - 1)
                    .map(|o| render(&o.argv))
                    .unwrap_or_default();
                self.add(
                    "obfuscation.pipe_to_shell",
                    format!(
                        "pipes the output of `{feeder}` into an interpreter, which runs it unseen"
                    ),
                    &render(&c.argv),
                );
            }
        }
    }

    /// A shell or interpreter with no program argument reads its program
    /// from stdin.
    fn reads_program_from_stdin(&self, argv: &[Word]) -> bool {
        let Some(name) = argv.first().and_then(|w| w.literal.as_deref()) else {
            return false;
        };
        let base = base_name(name);
        if matches!(base, "source" | ".") {
            // `source /dev/stdin <<< ...`
            return argv.get(1).is_some_and(|w| {
                matches!(w.text(), "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0")
            });
        }
        let base = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let is_shell = SHELLS.contains(&base);
        let is_interp = INTERPRETERS
            .iter()
            .any(|i| i.trim_end_matches(|c: char| c.is_ascii_digit()) == base);
        let rest: Vec<&str> = argv[1..].iter().map(|w| w.text()).collect();
        if !is_shell && !is_interp {
            return tables::REPLS.contains(&base) && rest.iter().all(|a| is_flag(a));
        }
        if rest.iter().any(|a| {
            *a == "-c"
                || *a == "-e"
                || (is_flag(a) && !a.starts_with("--") && a.contains('c') && is_shell)
        }) || stdin_programs::program_in_option(base, &rest)
        {
            return false;
        }
        // `python3 -` or no non-flag argument at all; a program file that
        // is the standard input (`bash /dev/stdin`) is the same.
        rest.iter().all(|a| is_flag(a) || *a == "-")
            || rest.contains(&"-")
            || rest.contains(&"-s")
            || rest
                .iter()
                .find(|a| !is_flag(a))
                .is_some_and(|a| matches!(*a, "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0"))
    }

    fn simple(&mut self, c: &SimpleCommand, depth: u32, counter: &mut usize) {
        let shown = render(&c.argv);
        let first = c.argv.first().and_then(|w| w.literal.as_deref());
        for (name, w) in &c.assignments {
            self.assignment(name, w, &shown, first, depth, counter);
            if c.argv.is_empty() {
                self.set_vars.push(name.clone());
            }
        }
        if matches!(
            first,
            Some("export" | "local" | "declare" | "typeset" | "readonly")
        ) {
            for w in &c.argv[1..] {
                if let Some((n, _)) = w.raw.split_once('=') {
                    self.set_vars.push(n.to_string());
                }
            }
        }
        for r in &c.redirects {
            self.redirect(r.kind, &r.target, &shown);
        }
        let certificate = forms::certificate_operand(&c.argv);
        for (i, w) in c
            .argv
            .iter()
            .chain(c.assignments.iter().map(|(_, w)| w))
            .enumerate()
        {
            if certificate != Some(i) {
                self.credential_word(w, &shown);
            }
            self.expansion_tricks(w, &shown);
            self.subscript_code(w, &shown, depth, counter);
        }
        self.record_downloads(c);
        self.written_before = self.written.len();
        self.record_written(c);
        if c.argv.is_empty() {
            return;
        }
        self.stdin_fed = !c.stdin_text.is_empty()
            || c.position > 0
            || c.redirects.iter().any(|r| r.kind == RedirectKind::Read);
        self.targets_from = None;
        self.command_shown(&c.argv, Some(shown), depth, counter);
        self.stdin_fed = false;
        self.targets_from = None;
    }

    fn command(&mut self, argv_in: &[Word], depth: u32, counter: &mut usize) {
        self.command_shown(argv_in, None, depth, counter);
    }

    /// [`Ctx::command`], with `argv_in` already rendered when the caller
    /// has it.
    fn command_shown(
        &mut self,
        argv_in: &[Word],
        mut first_shown: Option<String>,
        depth: u32,
        counter: &mut usize,
    ) {
        // What runs next after a wrapper; the first round borrows the input.
        let mut unwrapped: Option<Vec<Word>> = None;
        let mut guard = 0;
        loop {
            guard += 1;
            let argv: &[Word] = unwrapped.as_deref().unwrap_or(argv_in);
            if guard > 32 || argv.is_empty() {
                return;
            }
            let shown = first_shown.take().unwrap_or_else(|| render(argv));
            let name_word = &argv[0];
            let computed = self.known_computed_name(name_word);
            let Some(name) = name_word.literal.clone().or(computed) else {
                self.commands.push(shown.clone());
                self.add(
                    "obfuscation.dynamic_command",
                    format!(
                        "the command name {} is computed when it runs",
                        name_word.raw
                    ),
                    &shown,
                );
                return;
            };
            if self.hidden_program(argv, depth, counter, &shown)
                || self.resolve_alias(&name, argv, depth, counter, &shown)
            {
                return;
            }
            let args = &argv[1..];
            let name = self.canonical_program(name, &shown);
            let base = if name.contains('/') {
                match SYSTEM_DIRS.iter().find(|d| name.starts_with(*d)) {
                    Some(d) if !name[d.len()..].contains('/') => name[d.len()..].to_string(),
                    _ => {
                        self.path_program(&name, args, &shown, depth, counter);
                        return;
                    }
                }
            } else {
                name
            };
            // `\ls`: one leading backslash is the everyday way past an
            // alias; the name stays plain to a reader and to the rules.
            let alias_escape = name_word.raw.strip_prefix('\\') == Some(base.as_str());
            if name_word.quoted
                && !alias_escape
                && (self.policy.knows(&base) || SENSITIVE_NAMES.contains(&base.as_str()))
            {
                self.add(
                    "obfuscation.quoted_name",
                    format!(
                        "the command name is quoted or escaped ({}), which hides {base} from simple matching",
                        name_word.raw
                    ),
                    &shown,
                );
            }
            self.commands.push(shown.clone());
            if matches!(base.as_str(), "cd" | "pushd") {
                self.change_dir(args);
            }
            // Policy rules for this name (wrappers included: sudo is ADMIN).
            let level = self.match_rules(&base, shell_args_for_rules(&base, args), &shown);
            self.inline_code_args(&base, args, &shown);
            if level > Level::Read {
                self.passes_written_file(&base, args, &shown);
            }
            self.remember_read_vars(&base, args);
            self.delete_targets(&base, args, &shown);
            self.bypass_checks(&base, args, &shown, depth, counter);
            match self.unwrap(&base, args, depth, counter, &shown) {
                Some(next) => unwrapped = Some(next),
                None => return,
            }
        }
    }

    /// A program run by a path outside the system's binary directories
    /// (`./x`, `bin/x`, `/tmp/x/x`, `~/x`). It is judged by what its name
    /// says it can do (`bin/rails db:drop` is a database drop) and, when
    /// that name is a known program's and the path is not a project
    /// environment's own copy of a toolchain, as a look-alike.
    fn path_program(
        &mut self,
        name: &str,
        args: &[Word],
        shown: &str,
        depth: u32,
        counter: &mut usize,
    ) {
        let base = base_name(name);
        self.commands.push(shown.to_string());
        self.runs_download(name, shown);
        self.ran_written_file(name, shown);
        let known = self.policy.knows(base)
            || SENSITIVE_NAMES.contains(&base)
            || tables::is_shell_or_interpreter(base);
        if known && tables::lookalike_location(name) && !tables::project_toolchain(name, base) {
            self.add(
                "exec.lookalike",
                format!(
                    "runs {name}, a program named like {base} from outside the system's program directories: it may be anything"
                ),
                shown,
            );
        } else {
            self.add(
                "exec.path",
                format!("runs {name}, a program from a path, not a system command"),
                shown,
            );
        }
        if self.policy.builtin("exec.path").0 >= Level::Write {
            self.blast_radius(name, args, shown);
        }
        if known {
            // At least what the program it is named like does.
            self.match_rules(base, shell_args_for_rules(base, args), shown);
            self.inline_code_args(base, args, shown);
        }
        self.passes_written_file(base, args, shown);
        self.bypass_checks(base, args, shown, depth, counter);
    }

    fn nested(&mut self, src: &str, depth: u32, counter: &mut usize) {
        if depth + 1 > parse::MAX_DEPTH {
            self.add(
                "parse.unhandled",
                format!(
                    "nesting deeper than {} levels is not followed",
                    parse::MAX_DEPTH
                ),
                "",
            );
            return;
        }
        self.analyse_source(src, depth + 1, counter);
    }

    fn finish(mut self) -> Classification {
        self.findings
            .sort_by_key(|f| std::cmp::Reverse((f.level, f.score)));
        // The most severe finding dominates; the others add a fifth of their
        // score (many small edits are not one dangerous one).
        let max = self.findings.iter().map(|f| f.score).max().unwrap_or(0);
        let rest: u32 = self.findings.iter().map(|f| f.score).sum::<u32>() - max;
        let total: u32 = (max + rest / 5).min(100);
        let permission = self
            .findings
            .iter()
            .map(|f| f.level)
            .max()
            .unwrap_or(Level::Read);
        let requires_approval = permission >= Level::Admin
            || total >= self.policy.approval_threshold
            || self.findings.iter().any(|f| f.approval);
        let simple_commands = self.max_chain;
        let mut decision = if requires_approval {
            Decision::NeedsApproval
        } else {
            Decision::Promote
        };
        let mut reasons: Vec<String> = Vec::with_capacity(self.findings.len() + 1);
        for f in &self.findings {
            // `[rule] reason (in: command)`, built without the formatter.
            let mut r = String::with_capacity(f.rule.len() + f.reason.len() + f.command.len() + 10);
            r.push('[');
            r.push_str(&f.rule);
            r.push_str("] ");
            r.push_str(&f.reason);
            if !f.command.is_empty() {
                r.push_str(" (in: ");
                r.push_str(&f.command);
                r.push(')');
            }
            reasons.push(r);
        }
        if total >= self.policy.block_threshold && !self.opts.is_step && simple_commands > 1 {
            decision = Decision::Blocked;
            reasons.insert(
                0,
                format!(
                    "[risk.opaque_one_liner] a high-risk one-liner of {simple_commands} commands (score {total}); \
                     split it into `steps:` so each is classified and observed on its own"
                ),
            );
        }
        Classification {
            score: total,
            level: permission.risk_level().into(),
            requires_approval,
            reasons,
            decision,
            permission,
            findings: self.findings,
            commands: self.commands,
            policy_hash: self.policy.hash.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_matching() {
        assert!(has_flag("-rf", "-r"));
        assert!(has_flag("-fr", "-f"));
        assert!(has_flag("--force", "--force"));
        assert!(has_flag("--force=yes", "--force"));
        assert!(!has_flag("--forced", "--force"));
        assert!(!has_flag("--recursive", "-r"));
        assert!(!has_flag("-", "-r"));
    }
}
