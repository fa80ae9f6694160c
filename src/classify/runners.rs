//! Job runners and other tools that run a command they are given, each
//! in its own shape: `find -exec`, `fd -x`/`-X`, GNU `parallel` (and its
//! `sem`), terminal multiplexers, project environments (`uv run`, `npm
//! exec`, `bundle exec`), secret injectors (`op run --`), `entr`, and
//! `ssh HOST CMD` (a command for another host's shell). Each returns the
//! argv that runs next, or analyses the string it carries as a nested
//! command.

use super::wrappers::{from, join_texts, skip_options};
use super::{Ctx, Word, is_flag};

/// Arguments with `{}`-style placeholders filled in: a placeholder word on
/// its own stands for every start path (`rm {}` under `/` is `rm /`); inside
/// a longer word (`sh -c 'wc {}'`) for the first one. The first word (the
/// program) is left alone.
fn fill_placeholders(
    words: &[Word],
    starts: &[Word],
    first_start: &str,
    placeholders: &[&str],
) -> Vec<Word> {
    let mut sub: Vec<Word> = Vec::with_capacity(words.len());
    for w in words {
        let t = w.text();
        if placeholders.contains(&t) && !sub.is_empty() {
            sub.extend(starts.iter().cloned());
        } else if w.literal.is_some() && placeholders.iter().any(|p| t.contains(p)) {
            let mut filled = t.to_string();
            for p in placeholders {
                filled = filled.replace(p, first_start);
            }
            sub.push(Word {
                literal: Some(filled),
                ..w.clone()
            });
        } else {
            sub.push(w.clone());
        }
    }
    sub
}

/// GNU parallel's options that take a value (as separate words).
const PARALLEL_WITH_VALUE: &[&str] = &[
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
    "--delimiter",
    "-I",
    "--tmpdir",
    "--workdir",
    "--env",
    "--basefile",
    "--return",
    "--transferfile",
    "--tagstring",
    "--halt",
    "--memfree",
    "--load",
    "--retries",
    "--id",
    "--semaphorename",
    "--fg",
];

/// fd's options that take a value (as separate words).
const FD_WITH_VALUE: &[&str] = &[
    "-e",
    "--extension",
    "-t",
    "--type",
    "-d",
    "--max-depth",
    "--min-depth",
    "--exact-depth",
    "-E",
    "--exclude",
    "-S",
    "--size",
    "--changed-within",
    "--changed-before",
    "-o",
    "--owner",
    "-j",
    "--threads",
    "--max-results",
    "-c",
    "--color",
    "--base-directory",
    "--search-path",
    "--path-separator",
    "--ignore-file",
    "--format",
    "--batch-size",
    "--and",
];

/// ssh's options that take a value (`-p 22`, `-o X=y`, `-i key`).
const SSH_WITH_VALUE: &str = "BbcDEeFIiJLlmOoPpQRSWw";

impl Ctx<'_> {
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
            "parallel" | "sem" => {
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
                // `-r`/`-x` attach to a session that already runs.
                if i >= args.len()
                    && !args.iter().any(|w| {
                        matches!(
                            w.text(),
                            "-r" | "-R" | "-x" | "-X" | "-d" | "-D" | "-dm" | "-dmS"
                        )
                    })
                {
                    self.interactive_shell("screen", args);
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
            "npm" | "npx" | "pnpm" | "yarn" | "pnpx" | "bunx" | "uvx" | "bun" | "pipx" => {
                if self.nested_option(args, &["-c", "--call"], depth, counter) {
                    return None;
                }
                // A package runner runs the package's program with the
                // rest of its words: that program is judged as well
                // (`npx cdk destroy` is a `cdk destroy`).
                let runs_package = match base {
                    "npx" | "pnpx" | "bunx" | "uvx" => Some(0),
                    "pnpm" | "yarn" if first == "dlx" => Some(1),
                    "bun" if first == "x" => Some(1),
                    "pipx" if first == "run" => Some(1),
                    _ => None,
                };
                if let Some(at) = runs_package {
                    let with_value = [
                        "-p",
                        "--package",
                        "--from",
                        "--with",
                        "--python",
                        "--spec",
                        "--registry",
                        "--cache",
                        "--index-url",
                        "-i",
                    ];
                    let rest = args.get(at..).unwrap_or_default();
                    let mut cmd = from(rest, skip_options(rest, &with_value))?;
                    // The package names its program: `@scope/name@1.2`
                    // runs `name`.
                    if let Some(w) = cmd.first_mut()
                        && let Some(t) = w.literal.as_deref()
                        && t.contains('@')
                    {
                        let name = t
                            .strip_prefix('@')
                            .map_or(t, |r| r.rsplit('/').next().unwrap_or(r));
                        let name = name.split('@').next().unwrap_or(name).to_string();
                        w.raw = name.clone();
                        w.literal = Some(name);
                    }
                    return Some(cmd);
                }
                if !matches!(base, "npm" | "pnpm" | "yarn") || !matches!(first, "exec" | "x") {
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
                let sub = fill_placeholders(&args[start..j], &starts, &first_start, &["{}"]);
                if !sub.is_empty() {
                    // `-type d` before it (and no `-o`): it is given
                    // directories.
                    self.dir_targets = args[..i]
                        .windows(2)
                        .any(|p| p[0].text() == "-type" && p[1].text() == "d")
                        && !args[..i].iter().any(|w| matches!(w.text(), "-o" | "-or"));
                    self.command(&sub, depth + 1, counter);
                    self.dir_targets = false;
                }
                i = j;
            }
            i += 1;
        }
    }

    /// `parallel [options] TEMPLATE ::: ARGS` (GNU parallel's manual,
    /// "SYNOPSIS" and "QUOTING"): TEMPLATE's words are joined with spaces
    /// and run by a shell, `{}` standing for each argument; with `-q` they
    /// are one argv. Both readings are scored (worst case), so `parallel sh
    /// -c 'rm -rf "$1"' _ ::: /srv` is seen as the `sh -c` it is either
    /// way. With no template, each argument is itself a command line
    /// (`parallel ::: 'rm -rf /srv' ls`).
    fn unwrap_parallel(&mut self, args: &[Word], depth: u32, counter: &mut usize) {
        let i = skip_options(args, PARALLEL_WITH_VALUE).min(args.len());
        let quote = args[..i]
            .iter()
            .any(|w| matches!(w.text(), "-q" | "--quote"));
        let end = args[i..]
            .iter()
            .position(|w| w.text().starts_with(":::"))
            .map(|p| i + p)
            .unwrap_or(args.len());
        // The arguments given on the command line after `:::` (not those
        // read from files after `::::`).
        let inputs: Vec<Word> = args[end..]
            .iter()
            .scan(false, |literal_inputs, w| {
                let t = w.text();
                if t.starts_with(":::") {
                    *literal_inputs = t == ":::" || t == ":::+";
                    return Some(None);
                }
                Some(literal_inputs.then(|| w.clone()))
            })
            .flatten()
            .collect();
        if i == end {
            for w in &inputs {
                let s = w.text().to_string();
                self.nested(&s, depth, counter);
            }
            return;
        }
        let placeholders = ["{}", "{.}", "{/}", "{//}", "{/.}", "{#}", "{%}", "{1}"];
        let words = &args[i..end];
        let template: Vec<Word> = if inputs.is_empty() {
            words.to_vec()
        } else if words
            .iter()
            .any(|w| placeholders.iter().any(|p| w.text().contains(p)))
        {
            let first = inputs[0].text().to_string();
            fill_placeholders(words, &inputs, &first, &placeholders)
        } else {
            // No placeholder: the arguments are appended.
            words.iter().chain(&inputs).cloned().collect()
        };
        if !quote {
            let s = join_texts(&template);
            self.nested(&s, depth, counter);
        }
        if quote || template.len() > 1 {
            self.command(&template, depth + 1, counter);
        }
    }

    /// `fd [options] [PATTERN] [PATH...] -x CMD [ARGS] [;]` and `-X`/
    /// `--exec-batch` (fd's README, "Command execution"): CMD runs as an
    /// argv (no shell) for the results, `{}`, `{/}`, `{//}`, `{.}` and
    /// `{/.}` standing for a result; everything after `-x` up to `;` is the
    /// command.
    pub(super) fn unwrap_fd(&mut self, args: &[Word], depth: u32, counter: &mut usize) {
        let mut paths: Vec<Word> = Vec::new();
        let mut positionals = 0;
        let mut i = 0;
        while i < args.len() {
            let a = args[i].text();
            if matches!(a, "-x" | "--exec" | "-X" | "--exec-batch") {
                let start = i + 1;
                let mut j = start;
                while j < args.len() && !matches!(args[j].text(), ";" | "\\;") {
                    j += 1;
                }
                let first = paths
                    .first()
                    .map(|w| w.text().to_string())
                    .unwrap_or_else(|| ".".into());
                if paths.is_empty() {
                    paths.push(Word {
                        raw: ".".into(),
                        literal: Some(".".into()),
                        quoted: false,
                        ansi_c: false,
                        params: Vec::new(),
                        tilde: false,
                    });
                }
                let placeholders = ["{}", "{/}", "{//}", "{.}", "{/.}"];
                let sub = fill_placeholders(&args[start..j], &paths, &first, &placeholders);
                if !sub.is_empty() {
                    self.command(&sub, depth + 1, counter);
                }
                i = j + 1;
                continue;
            }
            if FD_WITH_VALUE.contains(&a) {
                if matches!(a, "--search-path" | "--base-directory")
                    && let Some(w) = args.get(i + 1)
                {
                    paths.push(w.clone());
                }
                i += 2;
                continue;
            }
            if !is_flag(a) {
                // The first positional is the pattern, the others paths.
                if positionals > 0 {
                    paths.push(args[i].clone());
                }
                positionals += 1;
            }
            i += 1;
        }
    }

    /// `ssh [options] HOST [CMD...]` (ssh(1): the words after the host are
    /// joined with spaces and run by the remote user's shell): the remote
    /// command is analysed like a `sh -c` string, so what it would do there
    /// is part of the explanation (`ssh prod 'rm -rf /srv'`).
    pub(super) fn unwrap_ssh(&mut self, args: &[Word], depth: u32, counter: &mut usize) {
        let mut i = 0;
        let mut no_command = false;
        while i < args.len() {
            let a = args[i].text();
            if a == "--" {
                i += 1;
                break;
            }
            let Some(cluster) = a.strip_prefix('-').filter(|c| !c.is_empty()) else {
                break;
            };
            no_command |= cluster.contains('N') && !cluster.contains(['o', 'p', 'i']);
            // In a cluster, the first option that takes a value takes the
            // rest of the word, or the next word when it ends the cluster.
            let takes_next = cluster
                .char_indices()
                .find(|(_, c)| SSH_WITH_VALUE.contains(*c))
                .is_some_and(|(k, c)| k + c.len_utf8() == cluster.len());
            i += if takes_next { 2 } else { 1 };
        }
        // The host, then the command.
        let rest = args.get(i + 1..).unwrap_or(&[]);
        if no_command || rest.is_empty() {
            return;
        }
        let s = join_texts(rest);
        self.nested(&s, depth, counter);
    }

    /// `entr [-s] CMD`: runs CMD (an argv; with `-s`, a shell string) each
    /// time a file it watches changes.
    pub(super) fn unwrap_entr(&mut self, args: &[Word], depth: u32, counter: &mut usize) {
        let i = skip_options(args, &[]);
        let shell = args[..i.min(args.len())]
            .iter()
            .any(|w| !w.text().starts_with("--") && w.text().contains('s'));
        if shell {
            let s = join_texts(args.get(i..).unwrap_or(&[]));
            self.nested(&s, depth, counter);
        } else if i < args.len() {
            self.command(&args[i..], depth + 1, counter);
        }
    }
}
