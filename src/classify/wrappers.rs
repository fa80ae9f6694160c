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
            "nohup" | "time" | "command" | "exec" | "setsid" | "builtin" | "unbuffer"
            | "eatmydata" | "fakeroot" | "nocache" | "chronic" | "dbus-run-session" => &[],
            _ => return rest,
        };
        let base = base_name(name);
        // `command -v NAME` prints where NAME is found; it runs nothing.
        if base == "command" && rest.iter().any(|w| matches!(w.text(), "-v" | "-V")) {
            return rest;
        }
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
pub(super) fn skip_options(args: &[Word], with_value: &[&str]) -> usize {
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
pub(super) fn join_texts(ws: &[Word]) -> String {
    ws.iter().map(|w| w.text()).collect::<Vec<_>>().join(" ")
}

/// The rest of `args` from `i` (empty past the end).
pub(super) fn from(args: &[Word], i: usize) -> Option<Vec<Word>> {
    Some(args.get(i..).map(|a| a.to_vec()).unwrap_or_default())
}

/// Where the command starts after a prefix wrapper that only changes how
/// it runs (priority, scheduling, buffering, a time limit, a root, a lock
/// on its data, ...): past the wrapper's options and its own operands
/// (`timeout 5`, `taskset 0x3`, `chroot /srv`, `faketime '-1d'`).
fn prefix_command_start(base: &str, args: &[Word]) -> usize {
    match base {
        "nice" => skip_options(args, &["-n", "--adjustment"]),
        "ionice" => skip_options(args, &["-c", "-n", "-p", "-P", "-u"]),
        "stdbuf" => skip_options(args, &["-i", "-o", "-e"]),
        "chrt" | "taskset" => skip_options(args, &["-p"]) + 1,
        "timeout" => skip_options(args, &["-s", "--signal", "-k", "--kill-after"]) + 1,
        "chroot" => skip_options(args, &["--userspec", "--groups"]) + 1,
        "faketime" => skip_options(args, &["-m", "-f"]) + 1,
        "numactl" => skip_options(
            args,
            &[
                "-C",
                "-N",
                "-m",
                "-p",
                "-i",
                "--physcpubind",
                "--cpunodebind",
                "--membind",
            ],
        ),
        "cpulimit" => skip_options(args, &["-l", "--limit", "-p", "--pid", "-e", "--exe"]),
        "rlwrap" => skip_options(
            args,
            &["-f", "-H", "-P", "-S", "-a", "-b", "-e", "-l", "-w"],
        ),
        "catchsegv" => skip_options(args, TRACER_WITH_VALUE),
        _ => skip_options(args, &[]),
    }
}

/// Options that take a value, per privilege wrapper.
const PRIVILEGE_WITH_VALUE: &[&str] = &[
    "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user", "--group",
];

/// Tracers, sandboxes and proxies put in front of a command; their options
/// that take a value.
const TRACER_WITH_VALUE: &[&str] = &[
    "-u", "-g", "-t", "-o", "-e", "-p", "-s", "--user", "--group", "--target",
];

impl Ctx<'_> {
    /// Returns the wrapped command's argv when `base` is a wrapper; a
    /// wrapper that carries a command string analyses it here and returns
    /// `None`. One step per family of wrappers.
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
                let i = skip_options(args, PRIVILEGE_WITH_VALUE);
                (i < args.len()).then(|| args[i..].to_vec())
            }
            "exec" => self.unwrap_exec(args, shown),
            "command" if args.iter().any(|w| matches!(w.text(), "-v" | "-V")) => None,
            "nice" | "ionice" | "nohup" | "setsid" | "unbuffer" | "time" | "builtin"
            | "command" | "stdbuf" | "chrt" | "taskset" | "timeout" | "chroot" | "eatmydata"
            | "fakeroot" | "nocache" | "chronic" | "rlwrap" | "dbus-run-session" | "numactl"
            | "cpulimit" | "faketime" | "catchsegv" => from(args, prefix_command_start(base, args)),
            "flock" | "script" | "su" | "runuser" | "watch" => {
                self.unwrap_string_carrier(base, args, depth, counter)
            }
            "parallel" | "sem" | "tmux" | "screen" | "uv" | "poetry" | "pipenv" | "pdm"
            | "hatch" | "rye" | "conda" | "mamba" | "bundle" | "pnpm" | "yarn" | "npm" | "npx"
            | "pnpx" | "bunx" | "uvx" | "pipx" | "bun" | "direnv" | "nix-shell" | "nix"
            | "dotenv" | "op" | "doppler" | "aws-vault" | "systemd-run" | "setpriv" | "prlimit"
            | "cgexec" => self.unwrap_runner(base, args, depth, counter),
            "unshare" | "nsenter" | "busybox" | "strace" | "ltrace" | "xvfb-run"
            | "proxychains" | "proxychains4" | "torsocks" | "firejail" | "bwrap" => {
                from(args, skip_options(args, TRACER_WITH_VALUE))
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
                // What it runs gets its operands from stdin: a file list,
                // from elsewhere unless the workspace's own listing.
                let arg_file = args[..i].iter().any(|w| {
                    let a = w.text();
                    a == "-a" || a.starts_with("--arg-file")
                });
                if !self.workspace_list || arg_file {
                    self.targets_from = Some("a list xargs reads from its input");
                }
                // `-o`: what it runs gets the terminal as its stdin, not
                // the list piped to xargs (`xargs -o ... /bin/sh`).
                if args[..i]
                    .iter()
                    .any(|w| matches!(w.text(), "-o" | "--open-tty"))
                {
                    self.stdin_fed = false;
                }
                (i < args.len()).then(|| args[i..].to_vec())
            }
            "find" => {
                self.unwrap_find(args, depth, counter);
                None
            }
            "fd" | "fdfind" => {
                self.unwrap_fd(args, depth, counter);
                None
            }
            "entr" => {
                self.unwrap_entr(args, depth, counter);
                None
            }
            "ssh" => {
                self.unwrap_ssh(args, depth, counter);
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
                self.record_aliases(args, depth, counter, shown);
                None
            }
            b if SHELLS.contains(&b) => {
                self.unwrap_shell(b, args, depth, counter, shown);
                None
            }
            _ => None,
        }
    }

    /// Wrappers that run either a command string given to an option or
    /// the rest of their arguments: `flock [-c CMD | FILE CMD...]`, `script
    /// -qc CMD`, `su -c CMD`, `runuser -c CMD`, `watch CMD` (a string for
    /// `sh -c`, or an argv with `-x`).
    fn unwrap_string_carrier(
        &mut self,
        base: &str,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
    ) -> Option<Vec<Word>> {
        match base {
            "flock" => {
                if self.nested_option(args, &["-c", "--command"], depth, counter) {
                    return None;
                }
                let i = skip_options(args, &["-w", "--timeout", "-E", "--conflict-exit-code"]);
                from(args, i + 1)
            }
            "script" => {
                // `script -qc CMD [file]`: CMD runs in a new shell; with no
                // command it starts an interactive one.
                if !self.nested_short_option(args, 'c', "--command", depth, counter) {
                    self.interactive_shell("script", args);
                }
                None
            }
            "runuser" => {
                if self.nested_option(args, &["-c", "--command"], depth, counter) {
                    return None;
                }
                from(args, skip_options(args, TRACER_WITH_VALUE))
            }
            "su" => {
                self.nested_option(args, &["-c", "--command"], depth, counter);
                None
            }
            _ => {
                // watch
                let i = skip_options(args, &["-n", "--interval", "-g", "-q"]);
                if args.iter().any(|w| matches!(w.text(), "-x" | "--exec")) {
                    return from(args, i);
                }
                let s = join_texts(args.get(i..).unwrap_or(&[]));
                self.nested(&s, depth, counter);
                None
            }
        }
    }

    /// A terminal tool started with no command (`script -q /dev/null`,
    /// `screen`) runs an interactive shell: whatever reaches it from the
    /// terminal or a parent's pipe runs, unseen (as `bash` alone). Listing
    /// and version flags start none.
    pub(super) fn interactive_shell(&mut self, base: &str, args: &[Word]) {
        let lists = args.iter().any(|w| {
            matches!(
                w.text(),
                "-ls" | "-list" | "-wipe" | "-v" | "-V" | "--version" | "-h" | "--help" | "-Q"
            )
        });
        if !lists {
            self.add(
                "exec.stdin_shell",
                format!("{base} starts an interactive shell, which runs whatever reaches it, not in the command"),
                &format!("{base} {}", join_texts(args)),
            );
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
                self.assignment(k, &args[i], shown, None, depth, counter);
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
    /// An alias that runs the program it names with more options, one
    /// plain command (`alias ls='ls -lrta'`, `alias grep='grep
    /// --color=auto'`), hides no program: it is judged as that command
    /// (`alias git='git -c core.pager=sh'` still asks for its option).
    /// The same holds when the program is named by its system path or run
    /// with variables set, and when its output goes on to other programs
    /// (`alias pwd='/bin/pwd | pbcopy'`, `alias go='GOFLAGS=-mod=mod go'`):
    /// what the name runs later starts with that program, and the rest is
    /// judged now; code computed when it is used (`$(…)`, a variable) still
    /// asks. A suffix alias (zsh's `alias -s ps='okular'`) names a
    /// file extension, not a program: its value is judged, no name is
    /// redefined.
    pub(super) fn record_aliases(
        &mut self,
        args: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) {
        let suffix = args.iter().any(|w| w.text() == "-s");
        for w in args {
            let Some((n, v)) = w.text().split_once('=') else {
                continue;
            };
            // The program the value starts, after its variable settings.
            let first = v.split_whitespace().find(|t| {
                !t.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
            });
            let names_itself = first.is_some_and(|f| {
                f == n
                    || super::tables::SYSTEM_DIRS
                        .iter()
                        .any(|d| f.strip_prefix(d) == Some(n))
            });
            // Not a builtin that changes the shell itself: analysing its
            // value would move the directory or the variables the rest of
            // the string is judged in.
            let same_program = w.literal.is_some()
                && !SHELL_STATE_BUILTINS.contains(&n)
                && (names_itself || suffix)
                && !v.contains(['`', '$', '\n', '\\']);
            if same_program {
                self.nested(v, depth, counter);
            } else if self.policy.knows(n) || SENSITIVE_NAMES.contains(&n) {
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
                if matches!(a, "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0") {
                    // A script file that is the standard input.
                    break;
                }
                // A script file: the policy's rules judge it.
                return;
            }
            i += 1;
        }
        // No `-c` and no script: the shell runs its standard input.
        if !self.stdin_fed {
            let mut argv = vec![Word {
                raw: b.to_string(),
                literal: Some(b.to_string()),
                quoted: false,
                ansi_c: false,
                params: Vec::new(),
                tilde: false,
            }];
            argv.extend(args.iter().cloned());
            self.stdin_unseen(&argv, shown);
        }
    }
}

/// Builtins that change the shell running the rest of the string.
const SHELL_STATE_BUILTINS: &[&str] = &[
    "cd", "pushd", "popd", "export", "declare", "typeset", "local", "readonly", "set", "unset",
    "shopt", "source", ".", "eval", "exec", "alias", "unalias", "trap", "builtin", "command",
    "enable", "hash", "umask", "ulimit",
];

impl Ctx<'_> {
    /// A command name computed when it runs whose value is still known:
    /// the path `which NAME`, `command -v NAME` or `type -P NAME` prints is
    /// NAME as the shell finds it on the PATH (`` `which find` . -print ``
    /// runs find), and `$SHELL` is the user's login shell unless this
    /// string sets it (`$SHELL -c 'echo "$0"'` is a shell given a string).
    /// The program is then judged as what it is; any other computed name
    /// stays `obfuscation.dynamic_command`.
    pub(super) fn known_computed_name(&self, w: &Word) -> Option<String> {
        let raw = w
            .raw
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .unwrap_or(&w.raw);
        if matches!(raw, "$SHELL" | "${SHELL}") {
            let set = self
                .set_vars
                .iter()
                .chain(&self.read_vars)
                .any(|v| v == "SHELL");
            return (!set).then(|| "sh".to_string());
        }
        let inner = raw
            .strip_prefix("$(")
            .and_then(|r| r.strip_suffix(')'))
            .or_else(|| raw.strip_prefix('`').and_then(|r| r.strip_suffix('`')))?;
        let words: Vec<&str> = inner.split_whitespace().collect();
        let name = match words.as_slice() {
            ["which", n] | ["command", "-v", n] | ["type", "-P" | "-p", n] => *n,
            _ => return None,
        };
        let plain = !name.starts_with(['-', '.'])
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'));
        plain.then(|| name.to_string())
    }
}
