//! Wrappers: commands that run another command (`env`, `sudo`, `nice`,
//! `timeout`, `xargs`, `find -exec`, `watch`, `script -c`, ...), shells
//! given a string (`sh -c`), `eval`, `trap`, and the aliases and
//! functions a string defines. Each returns what runs next, or analyses
//! the string it carries as a nested command.

use super::tables::{SENSITIVE_NAMES, SHELLS};
use super::{Ctx, Word, base_name, is_flag};

/// Skip the wrappers in front of a command (`sudo -u x env A=b nice ...`),
/// for checks that look at what finally runs.
pub(super) fn peel_wrappers(argv: &[Word]) -> &[Word] {
    let mut rest = argv;
    for _ in 0..16 {
        let Some(name) = rest.first().and_then(|w| w.literal.as_deref()) else {
            return rest;
        };
        let with_value: &[&str] = match base_name(name) {
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
        let base = base_name(name);
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

/// A shell's arguments up to its `-c STRING`: what follows are `$0`,
/// `$1`, ... for the string (`sh -c 'wc -l "$1"' _ /abs/file`), not script
/// paths, so rules about running a script file do not see them.
pub(super) fn shell_args_for_rules<'a>(base: &str, args: &'a [Word]) -> &'a [Word] {
    if !SHELLS.contains(&base) {
        return args;
    }
    for (i, w) in args.iter().enumerate() {
        let a = w.text();
        if a == "-c" || (is_flag(a) && !a.starts_with("--") && a[1..].contains('c')) {
            return &args[..(i + 2).min(args.len())];
        }
        if !is_flag(a) {
            break;
        }
    }
    args
}

/// Index of the first argument after the options (skipping the values of
/// `with_value` options), or after `--`.
fn skip_options(args: &[Word], with_value: &[&str]) -> usize {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].text();
        if a == "--" {
            return i + 1;
        }
        if !is_flag(a) {
            return i;
        }
        i += if with_value.contains(&a) { 2 } else { 1 };
    }
    i
}

/// The words' texts joined by spaces (a command string).
fn join_texts(ws: &[Word]) -> String {
    ws.iter().map(|w| w.text()).collect::<Vec<_>>().join(" ")
}

/// The rest of `args` from `i` (empty past the end).
fn from(args: &[Word], i: usize) -> Option<Vec<Word>> {
    Some(args.get(i..).map(|a| a.to_vec()).unwrap_or_default())
}

impl Ctx<'_> {
    /// Returns the wrapped command's argv when `base` is a wrapper.
    pub(super) fn unwrap(
        &mut self,
        base: &str,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) -> Option<Vec<Word>> {
        match base {
            "env" => self.unwrap_env(args, depth, counter, shown),
            "sudo" | "doas" | "pkexec" | "run0" => {
                let with_value = [
                    "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user", "--group",
                ];
                let i = skip_options(args, &with_value);
                (i < args.len()).then(|| args[i..].to_vec())
            }
            "nice" => from(args, skip_options(args, &["-n", "--adjustment"])),
            "ionice" => from(args, skip_options(args, &["-c", "-n", "-p", "-P", "-u"])),
            "nohup" | "setsid" | "unbuffer" | "time" | "builtin" => {
                from(args, skip_options(args, &[]))
            }
            "stdbuf" => from(args, skip_options(args, &["-i", "-o", "-e"])),
            "chrt" | "taskset" => from(args, skip_options(args, &["-p"]) + 1),
            "timeout" => from(
                args,
                skip_options(args, &["-s", "--signal", "-k", "--kill-after"]) + 1,
            ),
            "command" => {
                if args.iter().any(|w| matches!(w.text(), "-v" | "-V")) {
                    return None;
                }
                from(args, skip_options(args, &[]))
            }
            "exec" => self.unwrap_exec(args, shown),
            "flock" => {
                if self.nested_option(args, &["-c", "--command"], depth, counter) {
                    return None;
                }
                let i = skip_options(args, &["-w", "--timeout", "-E", "--conflict-exit-code"]);
                from(args, i + 1)
            }
            "script" => {
                // `script -qc CMD [file]`: CMD runs in a new shell.
                self.nested_short_option(args, 'c', "--command", depth, counter);
                None
            }
            "chroot" => from(args, skip_options(args, &["--userspec", "--groups"]) + 1),
            "runuser" if self.nested_option(args, &["-c", "--command"], depth, counter) => None,
            "parallel" | "tmux" | "screen" | "uv" | "poetry" | "pipenv" | "pdm" | "hatch"
            | "rye" | "conda" | "mamba" | "bundle" | "pnpm" | "yarn" | "npm" | "npx" | "direnv"
            | "nix-shell" | "nix" | "dotenv" | "op" | "doppler" | "aws-vault" | "systemd-run"
            | "setpriv" | "prlimit" | "cgexec" => self.unwrap_runner(base, args, depth, counter),
            "runuser" | "unshare" | "nsenter" | "busybox" | "strace" | "ltrace" | "catchsegv"
            | "xvfb-run" | "proxychains" | "proxychains4" | "torsocks" | "firejail" | "bwrap" => {
                let with_value = [
                    "-u", "-g", "-t", "-o", "-e", "-p", "-s", "--user", "--group", "--target",
                ];
                from(args, skip_options(args, &with_value))
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
                let i = skip_options(args, &with_value);
                (i < args.len()).then(|| args[i..].to_vec())
            }
            "watch" => {
                let i = skip_options(args, &["-n", "--interval", "-g", "-q"]);
                if args.iter().any(|w| matches!(w.text(), "-x" | "--exec")) {
                    return from(args, i);
                }
                let s = args[i.min(args.len())..]
                    .iter()
                    .map(|w| w.text())
                    .collect::<Vec<_>>()
                    .join(" ");
                self.nested(&s, depth, counter);
                None
            }
            "su" => {
                self.nested_option(args, &["-c", "--command"], depth, counter);
                None
            }
            "find" => {
                self.unwrap_find(args, depth, counter);
                None
            }
            "eval" => {
                self.unwrap_eval(args, depth, counter, shown);
                None
            }
            "trap" => {
                self.unwrap_trap(args, depth, counter, shown);
                None
            }
            "alias" => {
                self.record_aliases(args, shown);
                None
            }
            b if SHELLS.contains(&b) => {
                self.unwrap_shell(b, args, depth, counter, shown);
                None
            }
            _ => None,
        }
    }

    /// `OPT STRING` (one of `names`): analyse STRING as a command. Returns
    /// whether the option was there.
    pub(super) fn nested_option(
        &mut self,
        args: &[Word],
        names: &[&str],
        depth: u32,
        counter: &mut usize,
    ) -> bool {
        let Some(i) = args.iter().position(|w| names.contains(&w.text())) else {
            return false;
        };
        let s = args.get(i + 1).map(|w| w.text()).unwrap_or("").to_string();
        self.nested(&s, depth, counter);
        true
    }

    /// Like [`Ctx::nested_option`], also for a short option at the end of a
    /// cluster (`script -qc CMD`) and `--command=CMD`.
    pub(super) fn nested_short_option(
        &mut self,
        args: &[Word],
        short: char,
        long: &str,
        depth: u32,
        counter: &mut usize,
    ) -> bool {
        for (i, w) in args.iter().enumerate() {
            let a = w.text();
            if let Some(v) = a.strip_prefix(long).and_then(|r| r.strip_prefix('=')) {
                let v = v.to_string();
                self.nested(&v, depth, counter);
                return true;
            }
            let cluster = a.len() > 1 && a.starts_with('-') && !a.starts_with("--");
            if a == long || (cluster && a.ends_with(short)) {
                let s = args.get(i + 1).map(|w| w.text()).unwrap_or("").to_string();
                self.nested(&s, depth, counter);
                return true;
            }
        }
        false
    }

    /// Tools that run a command they are given: job runners (`parallel`),
    /// terminal multiplexers (`tmux new 'cmd'`, `screen -dm cmd`), project
    /// environments (`uv run`, `poetry run`, `bundle exec`, `npm exec`,
    /// `nix-shell --run`), secret injectors (`op run -- cmd`) and
    /// privilege or resource wrappers (`systemd-run`, `setpriv`).
    pub(super) fn unwrap_runner(
        &mut self,
        base: &str,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
    ) -> Option<Vec<Word>> {
        let first = args.first().map(|w| w.text()).unwrap_or("");
        match base {
            "parallel" => {
                self.unwrap_parallel(args, depth, counter);
                None
            }
            "tmux" => {
                self.unwrap_tmux(args, depth, counter);
                None
            }
            "screen" => {
                let mut i = 0;
                while i < args.len() && is_flag(args[i].text()) {
                    let a = args[i].text();
                    let takes = matches!(a, "-S" | "-c" | "-e" | "-p" | "-X" | "-T" | "-h")
                        || (!a.starts_with("--") && a.len() > 2 && a.ends_with('S'));
                    i += if takes { 2 } else { 1 };
                }
                from(args, i)
            }
            "nix-shell" => {
                self.nested_option(args, &["--run", "--command"], depth, counter);
                None
            }
            "nix" => {
                let i = args
                    .iter()
                    .position(|w| matches!(w.text(), "-c" | "--command"))?;
                from(args, i + 1)
            }
            "npm" | "npx" | "pnpm" | "yarn" => {
                if self.nested_option(args, &["-c", "--call"], depth, counter) {
                    return None;
                }
                if base == "npx" || !matches!(first, "exec" | "x") {
                    return None;
                }
                match args.iter().position(|w| w.text() == "--") {
                    Some(i) => from(args, i + 1),
                    None => from(
                        args,
                        1 + skip_options(&args[1..], &["--package", "-p", "-w", "--workspace"]),
                    ),
                }
            }
            "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" | "conda" | "mamba" => {
                if first != "run" {
                    return None;
                }
                let with_value = [
                    "--with",
                    "--from",
                    "-p",
                    "--python",
                    "--directory",
                    "--project",
                    "--env-file",
                    "--group",
                    "--extra",
                    "--package",
                    "-n",
                    "--name",
                    "--prefix",
                    "-e",
                    "--env",
                ];
                from(args, 1 + skip_options(&args[1..], &with_value))
            }
            "bundle" => (first == "exec").then(|| args[1..].to_vec()),
            "direnv" => {
                (first == "exec").then(|| args.get(2..).map(|a| a.to_vec()).unwrap_or_default())
            }
            "systemd-run" | "setpriv" | "prlimit" | "cgexec" => {
                let with_value = [
                    "--unit",
                    "-u",
                    "-p",
                    "--property",
                    "--uid",
                    "--gid",
                    "-E",
                    "--setenv",
                    "--working-directory",
                    "-M",
                    "--machine",
                    "--slice",
                    "-g",
                    "--reuid",
                    "--regid",
                    "--groups",
                    "--pid",
                ];
                from(args, skip_options(args, &with_value))
            }
            // dotenv, op run, doppler run, aws-vault exec: the command follows `--`.
            _ => {
                let i = args.iter().position(|w| w.text() == "--")?;
                from(args, i + 1)
            }
        }
    }

    /// `parallel [options] CMD ::: ARGS`: CMD is a command string.
    fn unwrap_parallel(&mut self, args: &[Word], depth: u32, counter: &mut usize) {
        let with_value = [
            "-j",
            "-P",
            "--jobs",
            "-S",
            "--sshlogin",
            "-a",
            "--arg-file",
            "--delay",
            "--timeout",
            "--joblog",
            "--results",
            "-N",
            "-n",
            "-L",
            "--colsep",
            "-d",
            "-I",
            "--tmpdir",
            "--workdir",
        ];
        let i = skip_options(args, &with_value).min(args.len());
        let end = args[i..]
            .iter()
            .position(|w| w.text().starts_with(":::"))
            .map(|p| i + p)
            .unwrap_or(args.len());
        if i < end {
            let s = join_texts(&args[i..end]);
            self.nested(&s, depth, counter);
        }
    }

    /// `tmux new 'cmd'`, `tmux send-keys 'cmd' Enter`: the command a pane
    /// runs or is typed into it.
    fn unwrap_tmux(&mut self, args: &[Word], depth: u32, counter: &mut usize) {
        let first = args.first().map(|w| w.text()).unwrap_or("");
        let runs = matches!(
            first,
            "new"
                | "new-session"
                | "new-window"
                | "neww"
                | "split-window"
                | "splitw"
                | "respawn-pane"
                | "respawnp"
                | "respawn-window"
                | "respawnw"
                | "run-shell"
                | "run"
                | "send-keys"
                | "send"
                | "display-popup"
                | "popup"
        );
        if !runs {
            return;
        }
        let with_value = [
            "-s", "-n", "-t", "-c", "-x", "-y", "-F", "-e", "-l", "-L", "-S", "-f", "-w", "-T",
        ];
        let rest = &args[1..];
        let mut words: Vec<Word> = Vec::new();
        let mut i = 0;
        while i < rest.len() {
            let a = rest[i].text();
            if with_value.contains(&a) {
                i += 2;
                continue;
            }
            if !is_flag(a) && !matches!(a, "Enter" | "C-m" | "KPEnter") {
                words.push(rest[i].clone());
            }
            i += 1;
        }
        if !words.is_empty() {
            let s = join_texts(&words);
            self.nested(&s, depth, counter);
        }
    }

    pub(super) fn unwrap_env(
        &mut self,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) -> Option<Vec<Word>> {
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
                let s = args.get(i + 1).map(|w| w.text()).unwrap_or("").to_string();
                self.nested(&s, depth, counter);
                return None;
            }
            if is_flag(a) {
                i += 1;
                continue;
            }
            // `NAME=value`; bash's exported functions are named
            // `BASH_FUNC_name%%`.
            if let Some((k, v)) = a.split_once('=')
                && !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '%')
            {
                self.assignment(k, &args[i], shown, None);
                if let Some(name) = k.strip_prefix("BASH_FUNC_") {
                    let name = name.trim_end_matches('%');
                    let body = v.trim_start();
                    if body.starts_with("()") {
                        let s = format!("{name} {body}");
                        self.nested(&s, depth, counter);
                    }
                }
                i += 1;
                continue;
            }
            break;
        }
        from(args, i)
    }

    pub(super) fn unwrap_exec(&mut self, args: &[Word], shown: &str) -> Option<Vec<Word>> {
        if let Some(i) = args.iter().position(|w| w.text() == "-a") {
            let name = args.get(i + 1).map(|w| w.raw.as_str()).unwrap_or("");
            self.add(
                "obfuscation.exec_argv0",
                format!(
                    "exec -a runs a program under another name ({name}), hiding what runs from process listings and name checks"
                ),
                shown,
            );
        }
        from(args, skip_options(args, &["-a"]))
    }

    pub(super) fn unwrap_find(&mut self, args: &[Word], depth: u32, counter: &mut usize) {
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
        let first_start = starts
            .first()
            .map(|w| w.text().to_string())
            .unwrap_or_else(|| ".".into());
        let mut i = 0;
        while i < args.len() {
            if matches!(args[i].text(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                let start = i + 1;
                let mut j = start;
                while j < args.len() && !matches!(args[j].text(), ";" | "\\;" | "+") {
                    j += 1;
                }
                // `{}` stands for every file under the start paths; inside
                // a longer word (`sh -c 'wc {}'`) for one of them.
                let mut sub: Vec<Word> = Vec::new();
                for w in &args[start..j] {
                    if w.text() == "{}" && !sub.is_empty() {
                        sub.extend(starts.iter().cloned());
                    } else if w.text().contains("{}") && w.literal.is_some() {
                        sub.push(Word {
                            literal: Some(w.text().replace("{}", &first_start)),
                            ..w.clone()
                        });
                    } else {
                        sub.push(w.clone());
                    }
                }
                if !sub.is_empty() {
                    self.command(&sub, depth + 1, counter);
                }
                i = j;
            }
            i += 1;
        }
    }

    pub(super) fn unwrap_eval(
        &mut self,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) {
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
            return;
        }
        self.add(
            "obfuscation.eval",
            "eval runs a string as a new command".into(),
            shown,
        );
        let s = args.iter().map(|w| w.text()).collect::<Vec<_>>().join(" ");
        self.nested(&s, depth, counter);
    }

    /// `trap 'CMD' SIGNAL...`: CMD runs later, in this shell.
    pub(super) fn unwrap_trap(
        &mut self,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) {
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
    }

    /// `alias NAME=VALUE`: a known name redefined is a finding now; every
    /// alias is remembered so a later use in the same string is resolved.
    pub(super) fn record_aliases(&mut self, args: &[Word], shown: &str) {
        for w in args {
            let Some((n, v)) = w.text().split_once('=') else {
                continue;
            };
            if self.policy.knows(n) || SENSITIVE_NAMES.contains(&n) {
                self.add(
                    "obfuscation.redefinition",
                    format!("redefines {n} with an alias"),
                    shown,
                );
            }
            if w.literal.is_some() && self.aliases.len() < 64 {
                self.aliases.insert(n.to_string(), v.to_string());
            }
        }
    }

    /// `sh -c STRING`, `bash -ec STRING`, `bash -lc STRING`.
    pub(super) fn unwrap_shell(
        &mut self,
        b: &str,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) {
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
                return;
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
    }
}
