//! Programs that read a program on their standard input and are not
//! shells or interpreters (principle `runs_programs`: a program that reads
//! a program on stdin runs it). `m4` runs `esyscmd(...)`, `ed` and `ex`
//! run `!cmd`, `gdb` runs `shell`/`!`/`python`, `sqlite3` runs `.shell`
//! and writes `.output FILE`, `dc` runs `!cmd`, `pic` runs `sh`;
//! `launchctl` with no subcommand runs the subcommands it reads. What they
//! are fed is read when it is text in the command (a heredoc, a
//! here-string, `echo`/`printf` piped in, a dot-command given as an
//! argument): its escape to a program asks; plain input (`echo 'define(x)'
//! | m4`, `sqlite3 db 'select 1'`) stays what the program is. Input fed
//! from elsewhere (a file, another program's output) is a program nobody
//! has read, and asks.

use super::parse::{Extracted, RedirectKind, SimpleCommand};
use super::wrappers::peel_wrappers;
use super::{Ctx, Word, base_name, render};

/// The program's name, and the escapes of its language that run a program
/// or write a file, as substrings of its input.
const STDIN_PROGRAMS: &[(&str, &[&str])] = &[
    ("m4", &["syscmd", "esyscmd", "include(/"]),
    ("ed", &["!", "w /", "w ~", "W /"]),
    ("red", &["!", "w /"]),
    ("ex", &["!", "w /", "shell", "sh"]),
    ("gdb", &["shell", "!", "python", "pipe", "|", "call"]),
    ("dc", &["!"]),
    ("pic", &["sh "]),
    (
        "sqlite3",
        &[
            ".shell", ".system", ".output", ".once", ".load", ".import", ".save", ".backup",
        ],
    ),
];

impl Ctx<'_> {
    /// `c` is one of [`STDIN_PROGRAMS`]: judge what it is fed.
    pub(super) fn stdin_script(&mut self, c: &SimpleCommand, ex: &Extracted) {
        let argv = peel_wrappers(&c.argv);
        let Some(name) = argv.first().and_then(|w| w.literal.as_deref()) else {
            return;
        };
        let base = base_name(name);
        if base == "crontab" {
            self.crontab_from_stdin(argv, &render(&c.argv));
            return;
        }
        if base == "launchctl" && argv.len() == 1 {
            self.add(
                "exec.stdin_program",
                "launchctl with no subcommand runs the subcommands fed to its standard input (loading, starting and removing services)".to_string(),
                &render(&c.argv),
            );
            return;
        }
        let Some((_, escapes)) = STDIN_PROGRAMS.iter().find(|(n, _)| *n == base) else {
            return;
        };
        let shown = render(&c.argv);
        // sqlite3's dot-commands and gdb's commands also come as arguments
        // (`-cmd '.shell sh'`, `sqlite3 db '.output /x'`, `gdb -ex '!sh'`).
        let mut texts: Vec<String> = if matches!(base, "sqlite3" | "gdb" | "dc") {
            argv[1..].iter().map(|w| w.text().to_string()).collect()
        } else {
            Vec::new()
        };
        let mut unread = false;
        for w in &c.stdin_text {
            match &w.literal {
                Some(t) => texts.push(t.clone()),
                None => unread = true,
            }
        }
        if c.position > 0 {
            let feeder = ex
                .commands
                .iter()
                .find(|o| o.pipeline == c.pipeline && o.position == c.position - 1);
            match feeder.map(|f| printed(&f.argv)) {
                Some(Some(t)) => texts.push(t),
                _ => unread = true,
            }
        }
        if c.redirects
            .iter()
            .any(|r| r.kind == RedirectKind::Read && c.stdin_text.is_empty())
        {
            unread = true;
        }
        let escape = texts
            .iter()
            .find_map(|t| escapes.iter().find(|e| has_escape(base, t, e)));
        if let Some(e) = escape {
            self.add(
                "exec.stdin_program",
                format!(
                    "{base} is fed a program that uses `{e}`, which runs a program or writes a file"
                ),
                &shown,
            );
        } else if unread {
            self.add(
                "exec.stdin_program",
                format!(
                    "{base} runs the program fed to its standard input, which is not in the command"
                ),
                &shown,
            );
        }
    }
}

impl Ctx<'_> {
    /// `crontab` with no file (or `-`) installs the table it reads on its
    /// standard input: every line of it is a command that runs later,
    /// outside any rehearsal, whatever feeds it (`echo '* * * * * x' |
    /// crontab`). Listing (`-l`), editing (`-e`) and removing (`-r`) have
    /// their own rules.
    fn crontab_from_stdin(&mut self, argv: &[Word], shown: &str) {
        let mut i = 1;
        while i < argv.len() {
            let a = argv[i].text();
            match a {
                "-u" => i += 2,
                "-" => i += 1,
                _ if a.starts_with('-') && a.len() > 1 && !a.contains(['l', 'e', 'r', 'i']) => {
                    i += 1
                }
                _ => return,
            }
        }
        self.add(
            "exec.stdin_program",
            "crontab installs the table fed to its standard input: commands that run later, outside any rehearsal".to_string(),
            shown,
        );
    }
}

/// The text `echo`/`printf` with literal arguments prints.
fn printed(argv: &[Word]) -> Option<String> {
    let name = argv.first()?.literal.as_deref()?;
    if !matches!(base_name(name), "echo" | "printf") {
        return None;
    }
    let words: Option<Vec<&str>> = argv[1..].iter().map(|w| w.literal.as_deref()).collect();
    Some(words?.join(" ").replace("\\n", "\n"))
}

/// `e` occurs in `text` as the language's escape: for the line-oriented
/// editors and debuggers at the start of a line (`!cmd`, `shell cmd`),
/// elsewhere anywhere.
fn has_escape(base: &str, text: &str, e: &str) -> bool {
    match base {
        "ed" | "red" | "ex" | "gdb" => text.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with(e)
                && (e.len() == 1
                    || l[e.len()..]
                        .chars()
                        .next()
                        .is_none_or(|c| !c.is_alphanumeric()))
        }),
        _ => text.contains(e),
    }
}

impl Ctx<'_> {
    /// A shell or an interpreter started with no program and nothing we
    /// can read on its stdin runs whatever reaches it there (a terminal, a
    /// parent's pipe): code nobody sees before it runs.
    pub(super) fn stdin_unseen(&mut self, argv: &[Word], shown: &str) {
        let Some(name) = argv.first().and_then(|w| w.literal.as_deref()) else {
            return;
        };
        if matches!(base_name(name), "source" | ".") {
            return;
        }
        // `python3 -V`, `node --version`: prints and exits, reads nothing.
        let prints_and_exits = argv[1..].iter().any(|w| {
            matches!(
                w.literal.as_deref(),
                Some(
                    "-V" | "--version"
                        | "-version"
                        | "-h"
                        | "--help"
                        | "--info"
                        | "--modules"
                        | "--ini"
                )
            ) || (base_name(name) == "node" && w.literal.as_deref() == Some("-v"))
        });
        if prints_and_exits {
            return;
        }
        self.add(
            "exec.stdin_shell",
            format!(
                "{} runs whatever reaches its standard input, which is not in the command",
                base_name(name)
            ),
            shown,
        );
    }
}

/// A key typed into an interactive program, on a line of its own after
/// it: one letter (`q`, `S`, `v`) or a troff request (`.PS`). GTFOBins writes a program's escapes so
/// (`ranger` then `S` opens a shell, `less` then `s FILE` saves its input,
/// `pic -U` then `.PS`/`sh X` runs a program): no shell runs such a line,
/// the program before it reads it from its terminal.
fn typed_key(name: &str) -> bool {
    let one_letter = name.len() == 1 && name.chars().all(|c| c.is_ascii_alphabetic());
    let request = name.len() > 1
        && name.len() <= 3
        && name.starts_with('.')
        && name[1..].chars().all(|c| c.is_ascii_uppercase());
    one_letter || request
}

impl Ctx<'_> {
    /// Lines of a command typed into the program that runs before them
    /// (principle `runs_programs`): what an interactive program does with
    /// the keys it reads from its terminal cannot be followed, and its
    /// escapes run a shell or write files (`exec.stdin_shell`).
    pub(super) fn typed_keys(&mut self, ex: &Extracted, src: &str, depth: u32) {
        if depth > 0 || !src.contains('\n') {
            return;
        }
        for (k, c) in ex.commands.iter().enumerate().skip(1) {
            let Some(name) = c.argv.first().and_then(|w| w.literal.as_deref()) else {
                continue;
            };
            // A shell escape typed into the program before it (`!sh`,
            // `:!id`, with its arguments): no shell runs a word that starts
            // with `!` as a program, an interactive one hands the rest to
            // a shell.
            let escape = name.len() > 1 && (name.starts_with('!') || name.starts_with(":!"));
            // A key is a line alone: `q`, not `k get pods`.
            if !escape && (c.argv.len() > 1 || !c.redirects.is_empty() || !typed_key(name)) {
                continue;
            }
            let before = ex.commands[..k]
                .iter()
                .rev()
                .find_map(|p| p.argv.first().and_then(|w| w.literal.as_deref()))
                .map(base_name)
                .unwrap_or("the program before it");
            self.add(
                "exec.stdin_shell",
                format!(
                    "`{name}` on a line of its own is a key typed into {before}, which reads its terminal: what an interactive program does with its keys (a shell escape, a file saved) is not in the command"
                ),
                &render(&c.argv),
            );
            return;
        }
    }
}

/// An interpreter given its program by an option, attached or at the end
/// of a cluster (`python3 -mjson.tool`, `python -c"print(1)"`, `perl -nle
/// CODE`, `perl -anE'…'`, `ruby -ne CODE`, `node -p CODE`, `php -r CODE`):
/// what it reads on its standard input is data, not its program. The
/// letters that give the program, and those whose value follows them in
/// the cluster (where scanning stops: `perl -i.bak`, `python -Werror`).
pub(super) fn program_in_option(base: &str, rest: &[&str]) -> bool {
    let (program, valued): (&str, &str) = match base {
        "python" | "python2" | "python3" | "pypy" | "pypy3" => ("cm", "WXQ"),
        "perl" => ("eE", "FIMmixdDC0"),
        "ruby" => ("e", "IrxCEFiKTW0"),
        "node" | "nodejs" | "bun" => ("ep", "r"),
        "php" => ("r", "cdfzt"),
        "lua" | "luajit" => ("e", "l"),
        _ => return false,
    };
    rest.iter()
        .take_while(|a| **a != "--")
        .filter_map(|a| a.strip_prefix('-').filter(|c| !c.starts_with('-')))
        .any(|cluster| {
            for c in cluster.chars() {
                if program.contains(c) {
                    return true;
                }
                if valued.contains(c) || !c.is_ascii_alphanumeric() {
                    return false;
                }
            }
            false
        })
}
