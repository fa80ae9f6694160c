//! Programs handed a command line to run (an option named for one, a
//! shell's path inside other text) and other coding agents started with
//! their approvals off: each runs a program that the rules of the tool's
//! own name never see.

use super::tables::*;
use super::{Ctx, Word};

impl Ctx<'_> {
    /// Any program handed a command line to run: an option named for one
    /// (`--password-command=CMD`, `--on-download-complete=CMD`,
    /// `--conf-script=CMD`) whose value looks like a command (a path, words,
    /// shell syntax), or an argument that holds a shell's path inside
    /// other text (`'!/bin/sh'`, `system("/bin/sh")`,
    /// `enter:execute(/bin/sh)`, `\write18{/bin/sh}`). The tool runs it;
    /// the rules of the tool's name never see it.
    pub(super) fn command_carriers(&mut self, base: &str, args: &[Word], shown: &str) {
        // Tools whose arguments are text or patterns, or whose program
        // arguments are judged elsewhere (sed, awk, inline code, shells).
        if matches!(
            base,
            "echo"
                | "printf"
                | "grep"
                | "egrep"
                | "fgrep"
                | "rg"
                | "ag"
                | "sed"
                | "gsed"
                | "awk"
                | "gawk"
                | "mawk"
                | "nawk"
                | "git"
                | "tr"
                | "cut"
                | "sort"
                | "diff"
                | "cmp"
                | "test"
                | "["
                | "[["
                | "which"
                | "type"
                | "command"
                | "ls"
                | "file"
                | "stat"
                | "readlink"
                | "realpath"
                | "ldd"
                | "cat"
                | "head"
                | "tail"
                | "sha256sum"
                | "md5sum"
                | "wc"
                | "strings"
                | "chsh"
                | "usermod"
                | "useradd"
        ) || SHELLS.contains(&base)
            || lang_of_interpreter(base)
        {
            return;
        }
        let looks_like_command =
            |v: &str| !v.is_empty() && v.contains(['/', ' ', '\t', ';', '|', '&', '$', '`', '(']);
        for (i, w) in args.iter().enumerate() {
            let a = w.text();
            let (name, value) = match a.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
                _ if a.starts_with("--") => (
                    a,
                    args.get(i + 1)
                        .map(|n| n.text())
                        .filter(|n| !n.starts_with('-'))
                        .map(str::to_string),
                ),
                _ => ("", None),
            };
            let names_command = name.strip_prefix("--").is_some_and(|n| {
                matches!(n, "command" | "cmd" | "exec" | "execute")
                    || n.starts_with("on-")
                    || [
                        "-command", "-cmd", "-exec", "-script", "-shell", "-hook", "-program",
                        "-prog", "-helper", "-handler",
                    ]
                    .iter()
                    .any(|s| n.ends_with(s))
            });
            // A filter given as a program's absolute path outside the
            // system's program directories (`split --filter=/opt/x/run`,
            // `pandoc --filter /x/f.py`) is a program the tool runs over
            // its data, which may be anything; a filter rule or expression
            // (`rsync --filter='- *.o'`, `--filter=blob:none`, `--filter
            // status=exited`) is not, and a script of the workspace
            // (`--filter=./f.sh`) runs as it would on its own.
            let program_filter = name
                .strip_prefix("--")
                .is_some_and(|n| n == "filter" || n.ends_with("-filter"))
                && value.as_deref().is_some_and(|v| {
                    v.starts_with('/')
                        && v[1..].contains('/')
                        && !SYSTEM_DIRS.iter().any(|d| v.starts_with(d))
                });
            if (names_command || program_filter)
                && let Some(v) = value.filter(|v| looks_like_command(v))
            {
                self.add(
                    "exec.option.command",
                    format!(
                        "{base} is given a command to run in {name} ({v}): a program the rules of {base} never see"
                    ),
                    shown,
                );
                return;
            }
            if let Some((rule, why)) = program_inside(base, a) {
                self.add(rule, why, shown);
                return;
            }
        }
    }

    pub(super) fn agent_approvals_off(&mut self, base: &str, args: &[Word], shown: &str) {
        // Whether this is a coding agent is only worked out when a flag
        // that needs it is there (most commands have none).
        let mut is_agent: Option<bool> = None;
        for (i, w) in args.iter().enumerate() {
            let a = w.text();
            let (flag, attached) = match a.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v)),
                _ => (a, None),
            };
            if !flag.starts_with('-') {
                continue;
            }
            let found = AGENT_APPROVALS_OFF_ANYWHERE.contains(&flag)
                || (AGENT_APPROVALS_OFF.iter().any(|(f, _)| *f == flag)
                    && *is_agent.get_or_insert_with(|| {
                        AGENTS.contains(&base)
                            || args
                                .iter()
                                .any(|w| AGENT_PACKAGES.iter().any(|p| w.text().contains(p)))
                    })
                    && AGENT_APPROVALS_OFF.iter().any(|(f, v)| {
                        *f == flag
                            && (v.is_empty()
                                || attached
                                    .or_else(|| args.get(i + 1).map(|n| n.text()))
                                    .is_some_and(|x| x == *v))
                    }));
            if found {
                let shown_flag = match (attached, args.get(i + 1)) {
                    (None, Some(n))
                        if !a.starts_with("--")
                            || AGENT_APPROVALS_OFF
                                .iter()
                                .any(|(f, v)| *f == a && !v.is_empty()) =>
                    {
                        format!("{a} {}", n.text())
                    }
                    _ => a.to_string(),
                };
                self.add(
                    "agent.approvals_off",
                    format!(
                        "starts a coding agent with its own approvals or sandbox turned off ({shown_flag}): everything it then does is unreviewed"
                    ),
                    shown,
                );
                return;
            }
        }
    }
}

/// `python3`, `node`, `perl`...: their inline code has its own checks.
fn lang_of_interpreter(base: &str) -> bool {
    INTERPRETERS.contains(&base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.'))
        || matches!(
            base,
            "pwsh" | "powershell" | "julia" | "luajit" | "irb" | "pypy3"
        )
}

/// A shell's path inside a larger argument, not a script's `#!` line
/// (`--x=/bin/sh`, `'!/bin/sh'`, `system("/bin/bash -i")`), or `None`.
fn shell_path_inside(a: &str) -> Option<&'static str> {
    const PATHS: &[&str] = &[
        "/bin/sh",
        "/bin/bash",
        "/bin/dash",
        "/bin/zsh",
        "/bin/ksh",
        "/bin/csh",
        "/bin/tcsh",
        "/bin/fish",
        "/bin/ash",
        "/bin/mksh",
        "/bin/busybox",
    ];
    // Every path above has `/bin/` in it: one search rules most words out
    // (this runs for every argument of every command).
    if !a.contains("/bin/") {
        return None;
    }
    for p in PATHS {
        let mut from = 0;
        while let Some(at) = a[from..].find(p).map(|x| x + from) {
            let end = at + p.len();
            let after_ok = a[end..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-'));
            // `/usr/bin/sh`, `/usr/local/bin/bash`: the same shell.
            let mut start = at;
            for prefix in ["/usr/local", "/usr"] {
                if a[..start].ends_with(prefix) {
                    start -= prefix.len();
                    break;
                }
            }
            let shebang = a[..start].ends_with("#!") || a[..start].ends_with("#! ");
            let whole = start == 0 && end == a.len();
            let before_ok = a[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '/'));
            if after_ok && before_ok && !shebang && !whole {
                return Some(p);
            }
            from = end;
        }
    }
    None
}

/// A program an argument of `base` holds, whatever option it is given to:
/// the rule and the reason, for the first of a shell's path in a command
/// line, code that starts processes, a call of a program outside the
/// system's program directories, and a shell escape.
fn program_inside(base: &str, a: &str) -> Option<(&'static str, String)> {
    if let Some(m) = shell_path_inside(a) {
        return Some((
            "exec.option.command",
            format!(
                "{base} is given a command line holding the shell {m} ({a}): a program the rules of {base} never see"
            ),
        ));
    }
    if super::inline::starts_processes_in(a) {
        return Some((
            "exec.inline_code.process",
            format!(
                "{base} is given code that starts processes ({a}), which are not in the command"
            ),
        ));
    }
    if let Some(program) = program_call_inside(a) {
        return Some((
            "exec.option.command",
            format!(
                "{base} is given code that runs {program} ({a}), a program outside the system's program directories: it may be anything, and the rules of {base} never see it"
            ),
        ));
    }
    let program = shell_escape_inside(a)?;
    Some((
        "exec.option.command",
        format!(
            "{base} is given a shell escape that runs {program} ({a}): a program the rules of {base} never see"
        ),
    ))
}

/// The path `rest` starts with (letters, digits and `/._-`), and what
/// follows it.
fn leading_path(rest: &str) -> (&str, &str) {
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-')))
        .unwrap_or(rest.len());
    rest.split_at(end)
}

/// Whether an absolute path names a program in a directory (`/opt/x/run`),
/// not a directory (`/usr/lib/`), a top-level name or a doubled slash.
fn names_a_program(path: &str) -> bool {
    !path.ends_with('/') && path.matches('/').count() >= 2 && !path.contains("//")
}

/// A shell escape inside an argument: `!` (alone, after `:` or `\`, as
/// the escapes of ed, vi, gdb, dc, ftp clients, less and database clients
/// are written: `'!/path/to/cmd'`, `':!/usr/bin/id'`, `'\! /opt/x/run'`)
/// followed by a program's absolute path, which the tool hands to a shell.
/// Not a script's `#!` line, not `!=` or `!~`, not a pattern between
/// slashes (`awk '!/^#/'`, `!/usr/lib/`: a path ends in a name).
fn shell_escape_inside(a: &str) -> Option<&str> {
    if !a.contains('!') {
        return None;
    }
    let bytes = a.as_bytes();
    for (at, _) in a.match_indices('!') {
        let before_ok = at == 0
            || matches!(
                bytes[at - 1],
                b':' | b'\\' | b' ' | b'\t' | b'\n' | b';' | b'(' | b'{'
            );
        if !before_ok {
            continue;
        }
        let rest = a[at + 1..].trim_start_matches([' ', '\t']);
        if !rest.starts_with('/') {
            continue;
        }
        let (path, after) = leading_path(rest);
        let after_ok = after
            .chars()
            .next()
            .is_none_or(|c| c.is_whitespace() || matches!(c, '\'' | '"' | ';' | ')' | '}'));
        if after_ok && names_a_program(path) {
            return Some(path);
        }
    }
    None
}

/// Words that start a program in the languages and configurations tools
/// take in an argument: `system("/x")`, `exec "/x"`, `popen(`, `spawn
/// /x`, Haskell's `callCommand "/x"`, Lisp's `(run-shell-command "/x"`,
/// TeX's `\write18{/x}`, make's `$(shell /x)`, ssh's `ProxyCommand /x`,
/// rpm's `%(/x)`, sd-bus's `unixexec:path=/x`, fzf's `execute(/x)`.
const PROGRAM_CALLS: &[&str] = &[
    "system",
    "exec",
    "execute",
    "execl",
    "execlp",
    "execv",
    "execvp",
    "execve",
    "execSync",
    "popen",
    "spawn",
    "spawnSync",
    "callCommand",
    "run-shell-command",
    "shell_exec",
    "proc_open",
    "passthru",
    "write18",
    "ProxyCommand",
    "shell",
    "%",
    "unixexec:path",
];

/// A program outside the system's program directories started by code in
/// an argument: one of [`PROGRAM_CALLS`], one separator (`(`, `{`, a
/// space, `=`), an optional quote, then an absolute path of two names or
/// more (`gnuplot -e 'system("/path/to/command")'`, `latex
/// '\write18{/opt/x/run}'`). A shell's path anywhere is
/// [`shell_path_inside`]'s; a program in `/usr/bin` is a known one.
fn program_call_inside(a: &str) -> Option<&str> {
    // Every call needs a separator before its path: a plain path or word
    // (`src/main.rs`, the most common argument with a `/`) holds none.
    if !a.contains('/') || !a.contains([' ', '(', '{', '=']) {
        return None;
    }
    for call in PROGRAM_CALLS {
        for (at, _) in a.match_indices(call) {
            let word_start = a[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'));
            if !word_start && *call != "%" {
                continue;
            }
            let mut rest = &a[at + call.len()..];
            let Some(sep) = rest.chars().next() else {
                continue;
            };
            if !matches!(sep, '(' | '{' | ' ' | '=') || *call == "%" && sep != '(' {
                continue;
            }
            rest = &rest[1..];
            rest = rest.strip_prefix(['"', '\'', '`']).unwrap_or(rest);
            if !rest.starts_with('/') {
                continue;
            }
            let (path, _) = leading_path(rest);
            let system = SYSTEM_DIRS.iter().any(|d| path.starts_with(d));
            if !system && names_a_program(path) {
                return Some(path);
            }
        }
    }
    None
}
