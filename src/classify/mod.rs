//! The risk classifier: a real bash parse → every simple command that will
//! run (wrappers unwrapped, `sh -c` strings followed) → findings scored by the
//! policy. Pure: no I/O, nothing the caller says about risk is consulted.

pub mod parse;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::model::Decision;
use crate::policy::{Level, Policy};
use parse::{Extracted, RedirectKind, SimpleCommand, Word};

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

/// The record's `risk` object (SPEC §5) plus details.
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

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Paths inside it are not "outside the workspace".
    pub workspace: Option<PathBuf>,
    /// The command is one of an envelope's explicit `steps`.
    pub is_step: bool,
}

/// Directories whose programs are "the system's" (so `/usr/bin/rm` is `rm`).
const SYSTEM_DIRS: &[&str] = &[
    "/usr/bin/",
    "/bin/",
    "/usr/sbin/",
    "/sbin/",
    "/usr/local/bin/",
    "/usr/local/sbin/",
];
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh",
];
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "deno", "bun",
    "Rscript",
];
const HIJACK_VARS: &[&str] = &[
    "PATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "IFS",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "GIT_SSH_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_CONFIG_GLOBAL",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "NODE_OPTIONS",
    "PERL5OPT",
    "RUBYOPT",
];
const CREDENTIAL_PATHS: &[&str] = &[
    "~/.ssh",
    "/.ssh/",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "~/.aws",
    "/.aws/",
    "~/.netrc",
    "/.netrc",
    "~/.config/gh",
    "/.config/gh/",
    "~/.docker/config.json",
    "/.docker/config.json",
    "~/.kube",
    "/.kube/config",
    "~/.gnupg",
    "/.gnupg/",
    "~/.git-credentials",
    ".git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "~/.config/gcloud",
    "~/.azure",
];
/// Parts of a variable name that mark it as a credential.
pub const SECRET_MARKERS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "PRIVATE",
];
/// Builtins and common commands whose redefinition changes what a later word
/// means.
const SENSITIVE_NAMES: &[&str] = &[
    "cd", "ls", "echo", "printf", "test", "[", "command", "builtin", "exec", "eval", "source",
    "alias", "unalias", "set", "export", "read", "type", "which", "sudo", "git", "cat", "rm", "cp",
    "mv", "sh", "bash", "true", "false",
];

struct Ctx<'a> {
    policy: &'a Policy,
    opts: &'a Options,
    findings: Vec<RiskFinding>,
    commands: Vec<String>,
    /// Where an earlier `cd` went (relative paths after it are judged from
    /// there; never reset, which errs on the safe side).
    cwd: Option<String>,
    /// Most simple commands in any one shell string (the top-level string,
    /// or one passed to `sh -c`/`eval`); wrappers are not counted.
    max_chain: usize,
}

/// Classify one shell string.
pub fn classify(src: &str, policy: &Policy, opts: &Options) -> Classification {
    let mut cx = Ctx {
        policy,
        opts,
        findings: Vec::new(),
        commands: Vec::new(),
        max_chain: 0,
        cwd: None,
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
    argv.iter()
        .map(|w| w.raw.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_flag(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1
}

pub use crate::model::stubs::has_flag;

/// Skip the wrappers in front of a command (`sudo -u x env A=b nice ...`),
/// for checks that look at what finally runs.
fn peel_wrappers(argv: &[Word]) -> &[Word] {
    let mut rest = argv;
    for _ in 0..16 {
        let Some(name) = rest.first().and_then(|w| w.literal.as_deref()) else {
            return rest;
        };
        let base = name.rsplit('/').next().unwrap_or(name);
        let with_value: &[&str] = match base {
            "sudo" | "doas" | "pkexec" | "run0" => &[
                "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user",
            ],
            "env" => &["-u", "--unset", "-C", "--chdir"],
            "nice" | "ionice" => &["-n", "-c", "--adjustment"],
            "timeout" => &["-s", "--signal", "-k", "--kill-after"],
            "stdbuf" => &["-i", "-o", "-e"],
            "nohup" | "time" | "command" | "exec" | "setsid" | "builtin" | "unbuffer" => &[],
            _ => return rest,
        };
        let mut i = 1;
        while i < rest.len() {
            let a = rest[i].text();
            if a == "--" {
                i += 1;
                break;
            }
            if with_value.contains(&a) {
                i += 2;
            } else if is_flag(a) || (base == "env" && a.contains('=')) {
                i += 1;
            } else {
                break;
            }
        }
        if base == "timeout" {
            i += 1; // the duration
        }
        rest = rest.get(i..).unwrap_or(&[]);
    }
    rest
}

/// Indexes of arguments that are programs for the command (a sed script, an
/// awk program, `-e CODE`), not paths: blast-radius checks skip them.
fn script_args(base: &str, args: &[Word]) -> Vec<usize> {
    let (code_flags, first_positional_is_code): (&[&str], bool) = match base {
        "sed" | "gsed" => (&["-e", "--expression"], true),
        "awk" | "gawk" | "mawk" | "nawk" => (&["-e", "--source"], true),
        "perl" | "ruby" => (&["-e", "-E"], false),
        "python" | "python2" | "python3" | "pypy3" => (&["-c"], false),
        "node" | "nodejs" | "deno" | "bun" => (&["-e", "--eval", "-p", "--print"], false),
        "jq" | "gojq" | "yq" => (&[], true),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut has_program_flag = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].text();
        if code_flags.contains(&a) {
            has_program_flag = true;
            out.push(i + 1);
            i += 2;
            continue;
        }
        if matches!(a, "-f" | "--file") {
            has_program_flag = true;
        }
        i += 1;
    }
    if first_positional_is_code
        && !has_program_flag
        && let Some(i) = args.iter().position(|w| !is_flag(w.text()))
    {
        out.push(i);
    }
    out
}

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
            self.add(
                "parse.error",
                format!("does not parse as bash ({e}); it cannot be scored"),
                &shown,
            );
            return;
        }
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
        // Pipelines, heredocs, here-strings and `< <(...)` feeding a shell.
        for c in &ex.commands {
            let inner = peel_wrappers(&c.argv);
            if !self.reads_program_from_stdin(inner) {
                continue;
            }
            let shown = render(&c.argv);
            // A shell's program on stdin is bash we can read; another
            // interpreter's is scored by the policy (inline code).
            let is_shell = inner
                .first()
                .and_then(|w| w.literal.as_deref())
                .map(|n| n.rsplit('/').next().unwrap_or(n))
                .is_some_and(|n| SHELLS.contains(&n));
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
        let n_commands = ex.commands.iter().filter(|c| !c.argv.is_empty()).count();
        self.max_chain = self.max_chain.max(n_commands);
        if depth == 0 && n_commands > 1 {
            self.add(
                "chain.opaque",
                format!("a one-liner of {n_commands} commands; intermediate effects are only seen together"),
                "",
            );
        }
        for c in &ex.commands {
            self.simple(c, depth, counter);
        }
    }

    /// A shell or interpreter with no program argument reads its program
    /// from stdin.
    fn reads_program_from_stdin(&self, argv: &[Word]) -> bool {
        let Some(name) = argv.first().and_then(|w| w.literal.as_deref()) else {
            return false;
        };
        let base = name.rsplit('/').next().unwrap_or(name);
        let base = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let is_shell = SHELLS.contains(&base);
        let is_interp = INTERPRETERS
            .iter()
            .any(|i| i.trim_end_matches(|c: char| c.is_ascii_digit()) == base);
        if !is_shell && !is_interp {
            return false;
        }
        let rest: Vec<&str> = argv[1..].iter().map(|w| w.text()).collect();
        if rest.iter().any(|a| {
            *a == "-c"
                || *a == "-e"
                || (is_flag(a) && !a.starts_with("--") && a.contains('c') && is_shell)
        }) {
            return false;
        }
        // `python3 -` or no non-flag argument at all.
        rest.iter().all(|a| is_flag(a) || *a == "-") || rest.contains(&"-") || rest.contains(&"-s")
    }

    fn simple(&mut self, c: &SimpleCommand, depth: u32, counter: &mut usize) {
        let shown = render(&c.argv);
        for (name, w) in &c.assignments {
            self.assignment(name, w, &shown);
        }
        for r in &c.redirects {
            self.redirect(r.kind, &r.target, &shown);
        }
        for w in &c.argv {
            self.credential_word(w, &shown);
        }
        if c.argv.is_empty() {
            return;
        }
        self.command(&c.argv, depth, counter);
    }

    fn assignment(&mut self, name: &str, w: &Word, shown: &str) {
        if HIJACK_VARS.contains(&name) {
            self.add(
                "obfuscation.env_hijack",
                format!("sets {name}, which changes what later commands run or load"),
                shown,
            );
        }
        self.credential_word(w, shown);
    }

    fn credential_word(&mut self, w: &Word, shown: &str) {
        for p in &w.params {
            let up = p.to_ascii_uppercase();
            if SECRET_MARKERS.iter().any(|m| up.contains(m)) {
                self.add(
                    "credential.variable",
                    format!("uses the variable {p}, which looks like a credential"),
                    shown,
                );
            }
        }
        let t = w.text();
        // (Every credential path has a `.`, a `/` or `id_` in it.)
        if (t.contains(['.', '/']) || t.contains("id_"))
            && CREDENTIAL_PATHS.iter().any(|p| t.contains(p))
        {
            self.add(
                "credential.file",
                format!("touches {t}, a credential store"),
                shown,
            );
        }
    }

    fn redirect(&mut self, kind: RedirectKind, target: &Word, shown: &str) {
        let rebased = self.rebase_on_cwd(target);
        let target = &rebased;
        let t = target.text();
        match kind {
            RedirectKind::Dup => {}
            RedirectKind::Read => {
                if CREDENTIAL_PATHS.iter().any(|p| t.contains(p)) {
                    self.add(
                        "credential.file",
                        format!("reads {t}, a credential store"),
                        shown,
                    );
                }
            }
            _ => {
                if matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
                    || t.starts_with("/dev/fd/")
                {
                    return;
                }
                if t.starts_with("/dev/") {
                    self.add(
                        "redirect.device",
                        format!("writes to the device {t}"),
                        shown,
                    );
                } else if self.outside_workspace(target) {
                    self.add(
                        "redirect.outside",
                        format!("redirects output into {t}, outside the workspace"),
                        shown,
                    );
                } else {
                    self.add(
                        "redirect.write",
                        format!("redirects output into {t}"),
                        shown,
                    );
                }
            }
        }
    }

    /// `cd DIR`: remember where relative paths now point.
    fn change_dir(&mut self, args: &[Word]) {
        let target = args.iter().find(|w| !is_flag(w.text()));
        let dir = match target {
            None => "~".to_string(),
            Some(w) if w.literal.is_none() && !w.params.iter().any(|p| p == "HOME") => {
                // Computed at run time: assume the worst, the root.
                "/".to_string()
            }
            Some(w) if w.params.iter().any(|p| p == "HOME") || w.tilde => {
                format!(
                    "~{}",
                    w.text()
                        .trim_start_matches('~')
                        .trim_start_matches("$HOME")
                        .trim_start_matches("${HOME}")
                )
            }
            Some(w) => {
                let t = w.text();
                if t == "-" {
                    "/".to_string()
                } else {
                    self.rebase_on_cwd(w).text().to_string()
                }
            }
        };
        self.cwd = Some(dir);
    }

    /// A word as a path relative to the last `cd`.
    fn rebase_on_cwd(&self, w: &Word) -> Word {
        let t = w.text();
        match &self.cwd {
            Some(dir)
                if !t.starts_with('/')
                    && !t.starts_with('~')
                    && !w.tilde
                    && w.literal.is_some() =>
            {
                Word {
                    literal: Some(if dir.ends_with('/') {
                        format!("{dir}{t}")
                    } else {
                        format!("{dir}/{t}")
                    }),
                    tilde: dir.starts_with('~'),
                    ..w.clone()
                }
            }
            _ => w.clone(),
        }
    }

    fn outside_workspace(&self, w: &Word) -> bool {
        let t = w.text();
        if w.tilde || t.starts_with('~') || w.params.iter().any(|p| p == "HOME") {
            return true;
        }
        if t.starts_with('/') {
            return match &self.opts.workspace {
                Some(ws) => !Path::new(t).starts_with(ws) && !t.starts_with("/tmp/") && t != "/tmp",
                None => !t.starts_with("/tmp/") && t != "/tmp",
            };
        }
        // `..` climbing above the start.
        let mut depth: i64 = 0;
        for part in t.split('/') {
            match part {
                ".." => {
                    depth -= 1;
                    if depth < 0 {
                        return true;
                    }
                }
                "" | "." => {}
                _ => depth += 1,
            }
        }
        false
    }

    /// Unwrap wrappers, follow `sh -c`, then match the policy.
    fn command(&mut self, argv: &[Word], depth: u32, counter: &mut usize) {
        let mut argv: Vec<Word> = argv.to_vec();
        let mut guard = 0;
        loop {
            guard += 1;
            if guard > 32 || argv.is_empty() {
                return;
            }
            let shown = render(&argv);
            let name_word = argv[0].clone();
            let Some(name) = name_word.literal.clone() else {
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
            let base = if name.contains('/') {
                match SYSTEM_DIRS.iter().find(|d| name.starts_with(*d)) {
                    Some(d) if !name[d.len()..].contains('/') => name[d.len()..].to_string(),
                    _ => {
                        self.add(
                            "exec.path",
                            format!("runs {name}, a program from a path, not a system command"),
                            &shown,
                        );
                        self.commands.push(shown.clone());
                        if self.policy.builtin("exec.path").0 >= Level::Write {
                            self.blast_radius(&name, &argv[1..], &shown);
                        }
                        return;
                    }
                }
            } else {
                name.clone()
            };
            if name_word.quoted
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
            let args: Vec<Word> = argv[1..].to_vec();
            if matches!(base.as_str(), "cd" | "pushd") {
                self.change_dir(&args);
            }
            // Policy rules for this name (wrappers included: sudo is ADMIN).
            self.match_rules(&base, &args, &shown);
            match self.unwrap(&base, &args, depth, counter, &shown) {
                Some(next) => argv = next,
                None => return,
            }
        }
    }

    fn match_rules(&mut self, base: &str, args: &[Word], shown: &str) {
        let texts: Vec<&str> = args.iter().map(|w| w.text()).collect();
        let positionals: Vec<&str> = texts.iter().copied().filter(|a| !is_flag(a)).collect();
        let policy = self.policy;
        // The other layers' conclusion and the workspace's additions are
        // found separately and BOTH scored: a workspace rule can add a
        // finding to a command, never stand in for what the system policy
        // says about it (a READ rule for an unknown command would otherwise
        // replace `exec.unknown`).
        let mut best: Option<&crate::policy::Rule> = None;
        let mut added: Option<&crate::policy::Rule> = None;
        let mut any_rule = false;
        for r in policy.rules_for(base) {
            any_rule |= !r.from_workspace;
            if !r.subcommands.is_empty()
                && !r.subcommands.iter().any(|sub| {
                    // Positionals in order, skipping global options' values is
                    // approximated by searching the sequence in the first few.
                    positionals
                        .windows(sub.len())
                        .take(3)
                        .any(|w| w.iter().zip(sub).all(|(a, b)| a == b))
                })
            {
                continue;
            }
            if !r.flags_any.is_empty()
                && !r
                    .flags_any
                    .iter()
                    .any(|f| texts.iter().any(|a| has_flag(a, f)))
            {
                continue;
            }
            if !r
                .flags_all
                .iter()
                .all(|f| texts.iter().any(|a| has_flag(a, f)))
            {
                continue;
            }
            if let Some(re) = &r.arg_regex
                && !texts.iter().any(|a| re.is_match(a))
            {
                continue;
            }
            let slot = if r.from_workspace {
                &mut added
            } else {
                &mut best
            };
            *slot = match *slot {
                Some(b) if (b.level, b.score) >= (r.level, r.score) => Some(b),
                _ => Some(r),
            };
        }
        if let Some(r) = added {
            self.push(&r.id, r.level, r.score, r.reason.clone(), shown, r.approval);
            if r.level >= Level::Write {
                self.blast_radius(base, args, shown);
            }
        }
        match best {
            Some(r) => {
                self.push(&r.id, r.level, r.score, r.reason.clone(), shown, r.approval);
                if r.level >= Level::Write {
                    self.blast_radius(base, args, shown);
                }
            }
            None => {
                // No rule at all, or rules for other uses of this command
                // only: the policy does not vouch for this use.
                let reason = if any_rule {
                    format!(
                        "no rule covers this use of {base}; its effects are judged by the rehearsal"
                    )
                } else {
                    format!("{base} is not in the policy; its effects are judged by the rehearsal")
                };
                self.add("exec.unknown", reason, shown);
                if self.policy.builtin("exec.unknown").0 >= Level::Write {
                    self.blast_radius(base, args, shown);
                }
            }
        }
    }

    fn blast_radius(&mut self, base: &str, args: &[Word], shown: &str) {
        let skip = script_args(base, args);
        for (i, w) in args.iter().enumerate() {
            let t = w.text();
            if is_flag(t) || skip.contains(&i) {
                continue;
            }
            // Relative to a directory an earlier `cd` went to.
            let rebased = self.rebase_on_cwd(w);
            let w = &rebased;
            let t = w.text();
            let trimmed = t.trim_end_matches('/');
            if matches!(t, "/" | "/*" | "/." | "/..") || trimmed.is_empty() && t.starts_with('/') {
                self.add(
                    "blast.root",
                    format!("operates on {t}, the root of the filesystem"),
                    shown,
                );
            } else if matches!(
                t,
                "~" | "~/" | "~/*" | "$HOME" | "${HOME}" | "$HOME/" | "$HOME/*"
            ) || (w.tilde && trimmed == "~")
            {
                self.add(
                    "blast.home",
                    format!("operates on {t}, the whole home directory"),
                    shown,
                );
            } else if self.outside_workspace(w) && !t.starts_with("/dev/") {
                self.add(
                    "blast.outside",
                    format!("operates on {t}, outside the workspace"),
                    shown,
                );
            }
        }
    }

    /// Returns the wrapped command's argv when `base` is a wrapper.
    fn unwrap(
        &mut self,
        base: &str,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) -> Option<Vec<Word>> {
        let t = |i: usize| args.get(i).map(|w| w.text()).unwrap_or("");
        let skip = |with_value: &[&str], stop_at_first_positional: bool| -> usize {
            let mut i = 0;
            while i < args.len() {
                let a = args[i].text();
                if a == "--" {
                    return i + 1;
                }
                if !is_flag(a) {
                    if stop_at_first_positional {
                        return i;
                    }
                    i += 1;
                    continue;
                }
                if with_value.contains(&a) {
                    i += 2;
                } else {
                    i += 1;
                }
            }
            i
        };
        match base {
            "env" => {
                let mut i = 0;
                while i < args.len() {
                    let a = args[i].text();
                    if a == "--" {
                        i += 1;
                        break;
                    }
                    if matches!(a, "-u" | "--unset" | "-C" | "--chdir") {
                        i += 2;
                        continue;
                    }
                    if a == "-S" || a == "--split-string" {
                        let s = t(i + 1).to_string();
                        self.nested(&s, depth, counter);
                        return None;
                    }
                    if is_flag(a) {
                        i += 1;
                        continue;
                    }
                    if let Some((k, _)) = a.split_once('=')
                        && !k.is_empty()
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        self.assignment(k, &args[i], shown);
                        i += 1;
                        continue;
                    }
                    break;
                }
                Some(args[i.min(args.len())..].to_vec())
            }
            "sudo" | "doas" | "pkexec" | "run0" => {
                let with_value = [
                    "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user", "--group",
                ];
                let i = skip(&with_value, true);
                if i >= args.len() {
                    return None;
                }
                Some(args[i..].to_vec())
            }
            "nice" => Some(args[skip(&["-n", "--adjustment"], true)..].to_vec()),
            "ionice" => Some(args[skip(&["-c", "-n", "-p", "-P", "-u"], true)..].to_vec()),
            "nohup" | "setsid" | "unbuffer" | "time" | "builtin" => {
                Some(args[skip(&[], true)..].to_vec())
            }
            "stdbuf" => Some(args[skip(&["-i", "-o", "-e"], true)..].to_vec()),
            "chrt" | "taskset" => {
                let i = skip(&["-p"], true);
                Some(args.get(i + 1..).map(|a| a.to_vec()).unwrap_or_default())
            }
            "timeout" => {
                let i = skip(&["-s", "--signal", "-k", "--kill-after"], true);
                Some(args.get(i + 1..).map(|a| a.to_vec()).unwrap_or_default())
            }
            "command" => {
                if args.iter().any(|w| matches!(w.text(), "-v" | "-V")) {
                    return None;
                }
                Some(args[skip(&[], true)..].to_vec())
            }
            "exec" => Some(args[skip(&["-a"], true)..].to_vec()),
            "flock" => {
                if let Some(i) = args
                    .iter()
                    .position(|w| matches!(w.text(), "-c" | "--command"))
                {
                    let s = t(i + 1).to_string();
                    self.nested(&s, depth, counter);
                    return None;
                }
                let i = skip(&["-w", "--timeout", "-E", "--conflict-exit-code"], true);
                Some(args.get(i + 1..).map(|a| a.to_vec()).unwrap_or_default())
            }
            "chroot" => {
                let i = skip(&["--userspec", "--groups"], true);
                Some(args.get(i + 1..).map(|a| a.to_vec()).unwrap_or_default())
            }
            "runuser" | "unshare" | "nsenter" | "busybox" | "strace" | "ltrace" | "catchsegv"
            | "xvfb-run" | "proxychains" | "torsocks" => {
                let with_value = [
                    "-u", "-g", "-t", "-o", "-e", "-p", "-s", "--user", "--group", "--target",
                ];
                Some(args[skip(&with_value, true)..].to_vec())
            }
            "xargs" => {
                let with_value = [
                    "-I",
                    "-n",
                    "-L",
                    "-P",
                    "-d",
                    "-E",
                    "-s",
                    "-a",
                    "--max-args",
                    "--max-procs",
                    "--delimiter",
                    "--arg-file",
                ];
                let i = skip(&with_value, true);
                if i >= args.len() {
                    return None; // echo
                }
                Some(args[i..].to_vec())
            }
            "watch" => {
                let i = skip(&["-n", "--interval", "-g", "-q"], true);
                if args.iter().any(|w| matches!(w.text(), "-x" | "--exec")) {
                    return Some(args[i..].to_vec());
                }
                let s = args[i..]
                    .iter()
                    .map(|w| w.text())
                    .collect::<Vec<_>>()
                    .join(" ");
                self.nested(&s, depth, counter);
                None
            }
            "su" => {
                if let Some(i) = args
                    .iter()
                    .position(|w| matches!(w.text(), "-c" | "--command"))
                {
                    let s = t(i + 1).to_string();
                    self.nested(&s, depth, counter);
                }
                None
            }
            "find" => {
                // Start paths: the arguments before the first expression.
                let starts: Vec<Word> = args
                    .iter()
                    .skip_while(|w| matches!(w.text(), "-H" | "-L" | "-P"))
                    .take_while(|w| {
                        let a = w.text();
                        !(a.starts_with('-') || a == "(" || a == "!" || a == "\\(" || a == "\\!")
                    })
                    .cloned()
                    .collect();
                let mut i = 0;
                while i < args.len() {
                    if matches!(args[i].text(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                        let start = i + 1;
                        let mut j = start;
                        while j < args.len() && !matches!(args[j].text(), ";" | "\\;" | "+") {
                            j += 1;
                        }
                        // `{}` stands for every file under the start paths.
                        let mut sub: Vec<Word> = Vec::new();
                        for w in &args[start..j] {
                            if w.text().contains("{}") && !sub.is_empty() {
                                for s in &starts {
                                    sub.push(s.clone());
                                }
                            }
                            sub.push(w.clone());
                        }
                        if !sub.is_empty() {
                            self.command(&sub, depth + 1, counter);
                        }
                        i = j;
                    }
                    i += 1;
                }
                None
            }
            "eval" => {
                if args.iter().any(|w| w.literal.is_none()) {
                    self.add(
                        "obfuscation.eval",
                        "eval of text computed at run time".into(),
                        shown,
                    );
                    self.add(
                        "obfuscation.dynamic_command",
                        "eval runs a string that is only known when it runs".into(),
                        shown,
                    );
                    return None;
                }
                self.add(
                    "obfuscation.eval",
                    "eval runs a string as a new command".into(),
                    shown,
                );
                let s = args.iter().map(|w| w.text()).collect::<Vec<_>>().join(" ");
                self.nested(&s, depth, counter);
                None
            }
            "trap" => {
                // `trap 'CMD' SIGNAL...`: CMD runs later, in this shell.
                if let Some(w) = args.iter().find(|w| !is_flag(w.text())) {
                    match &w.literal {
                        Some(s) if !s.is_empty() && s != "-" => {
                            let s = s.clone();
                            self.nested(&s, depth, counter);
                        }
                        Some(_) => {}
                        None => self.add(
                            "obfuscation.dynamic_command",
                            format!("trap runs a string computed at run time ({})", w.raw),
                            shown,
                        ),
                    }
                }
                None
            }
            "alias" => {
                for w in args {
                    if let Some((n, _)) = w.text().split_once('=')
                        && (self.policy.knows(n) || SENSITIVE_NAMES.contains(&n))
                    {
                        self.add(
                            "obfuscation.redefinition",
                            format!("redefines {n} with an alias"),
                            shown,
                        );
                    }
                }
                None
            }
            b if SHELLS.contains(&b) => {
                // `sh -c STRING`, `bash -ec STRING`, `bash -lc STRING`.
                let mut i = 0;
                while i < args.len() {
                    let a = args[i].text();
                    if a == "-c" || (is_flag(a) && !a.starts_with("--") && a[1..].contains('c')) {
                        match args.get(i + 1) {
                            Some(w) if w.literal.is_some() => {
                                let s = w.text().to_string();
                                self.nested(&s, depth, counter);
                            }
                            Some(w) => self.add(
                                "obfuscation.dynamic_command",
                                format!("{b} -c runs a string computed at run time ({})", w.raw),
                                shown,
                            ),
                            None => {}
                        }
                        return None;
                    }
                    if matches!(a, "-o" | "-O" | "+O" | "--init-file" | "--rcfile") {
                        i += 2;
                        continue;
                    }
                    if !is_flag(a) {
                        break;
                    }
                    i += 1;
                }
                None
            }
            _ => None,
        }
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
        let mut reasons: Vec<String> = self
            .findings
            .iter()
            .map(|f| {
                if f.command.is_empty() {
                    format!("[{}] {}", f.rule, f.reason)
                } else {
                    format!("[{}] {} (in: {})", f.rule, f.reason, f.command)
                }
            })
            .collect();
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
