//! Paths in a command: where a relative path points after a `cd`, what is
//! outside the workspace, the blast radius of a command (root, home,
//! outside), credentials, redirects, and writes to the policy's protected
//! paths (the same list the rehearsal's verdict uses).

use super::operands::read_only_operands;
use super::tables::{
    CREDENTIAL_PATHS, OUTPUT_FLAGS, SECRET_MARKERS, WRITES_ITS_LAST_OPERAND, WRITES_ITS_OPERANDS,
    is_secret_file_name,
};
use super::{Ctx, Cwd, RedirectKind, Word, is_flag};
use std::borrow::Cow;
use std::path::Path;

/// `t` mentions a credential store (`~/.ssh`, `/.aws/`, `.git-credentials`,
/// ...): one pass of a compiled set of literals, not one search per entry.
fn names_credential_path(t: &str) -> bool {
    static SET: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let alternation = CREDENTIAL_PATHS
            .iter()
            .map(|p| regex::escape(p))
            .collect::<Vec<_>>()
            .join("|");
        regex::Regex::new(&alternation).expect("escaped literals form a valid pattern")
    })
    .is_match(t)
}

/// The last path component of `t` names a secret (`.env`, `key.pem`,
/// `id_ed25519`).
fn names_secret_file(t: &str) -> bool {
    let t = t.trim_end_matches('/');
    is_secret_file_name(t.rsplit(['/', '@', '=', ':', '<']).next().unwrap_or(t))
}

/// Indexes of arguments that are programs for the command (a sed script, an
/// awk program, `-e CODE`), not paths: blast-radius checks skip them.
pub(super) fn script_args(base: &str, args: &[Word]) -> Vec<usize> {
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

/// `-rf`, `-sv`: single-dash letters.
pub(super) fn is_short_cluster(a: &str) -> bool {
    a.len() > 1
        && a.starts_with('-')
        && !a.starts_with("--")
        && a[1..].chars().all(|c| c.is_ascii_alphabetic())
}

/// `ln -s TARGET LINK`: (index of TARGET, the directory the link is
/// created in), which is where a relative TARGET is resolved from.
fn symlink_dir(base: &str, args: &[Word]) -> Option<(usize, String)> {
    if base != "ln"
        || !args
            .iter()
            .any(|w| has_short(w.text(), 's') || w.text() == "--symbolic")
    {
        return None;
    }
    let mut target_dir: Option<String> = None;
    let mut pos = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].text();
        if a == "-t" || a == "--target-directory" {
            target_dir = args.get(i + 1).map(|w| w.text().to_string());
            i += 2;
            continue;
        }
        if let Some(d) = a.strip_prefix("--target-directory=") {
            target_dir = Some(d.to_string());
        } else if !is_flag(a) {
            pos.push(i);
        }
        i += 1;
    }
    let first = *pos.first()?;
    let dir = match (target_dir, pos.len()) {
        (Some(d), _) => d,
        (None, 1) => ".".to_string(),
        (None, _) => {
            let link = args[*pos.last()?].text();
            if link.ends_with('/') {
                link.trim_end_matches('/').to_string()
            } else {
                match link.rsplit_once('/') {
                    Some((d, _)) if !d.is_empty() => d.to_string(),
                    Some(_) => "/".to_string(),
                    None => ".".to_string(),
                }
            }
        }
    };
    Some((first, dir))
}

/// `-s` alone or in a cluster of short flags (`-sf`).
fn has_short(a: &str, c: char) -> bool {
    a.starts_with('-') && !a.starts_with("--") && a[1..].contains(c)
}

/// Candidate files a command writes: flag-attached outputs (`--output=P`,
/// `-o P`, `-oP`), `of=P`, and per tool its operands.
pub(super) fn write_targets(base: &str, args: &[Word]) -> Vec<Word> {
    let mut out = Vec::new();
    let in_place = matches!(base, "sed" | "gsed" | "perl" | "ruby")
        && args.iter().any(|w| {
            let a = w.text();
            a.starts_with("--in-place")
                || (a.starts_with('-') && !a.starts_with("--") && a.contains('i'))
        });
    let all_operands = WRITES_ITS_OPERANDS.contains(&base) || in_place;
    let last_operand = !all_operands && WRITES_ITS_LAST_OPERAND.contains(&base);
    let mut last: Option<&Word> = None;
    let mut n_operands = 0;
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        let a = w.text();
        i += 1;
        if !a.starts_with('-') {
            if let Some(v) = a.strip_prefix("of=") {
                out.push(Word {
                    literal: Some(v.to_string()),
                    ..w.clone()
                });
            } else if all_operands {
                out.push(w.clone());
            } else if last_operand {
                last = Some(w);
                n_operands += 1;
            }
            continue;
        }
        if let Some((flag, value)) = a.split_once('=')
            && OUTPUT_FLAGS.contains(&flag)
        {
            out.push(Word {
                literal: Some(value.to_string()),
                ..w.clone()
            });
        } else if OUTPUT_FLAGS.contains(&a) {
            if let Some(v) = args.get(i) {
                out.push(v.clone());
            }
            i += 1;
        } else if a.len() > 2 && a.starts_with("-o") && !a.starts_with("--") && w.literal.is_some()
        {
            out.push(Word {
                literal: Some(a[2..].to_string()),
                ..w.clone()
            });
        } else if a == "-" && all_operands {
            out.push(w.clone());
        }
    }
    if n_operands >= 2 {
        out.extend(last.cloned());
    }
    out
}

impl Ctx<'_> {
    pub(super) fn credential_word(&mut self, w: &Word, shown: &str) {
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
            && (names_credential_path(t) || names_secret_file(t))
        {
            self.add(
                "credential.file",
                format!("touches {t}, a credential store"),
                shown,
            );
        }
    }

    pub(super) fn redirect(&mut self, kind: RedirectKind, target: &Word, shown: &str) {
        let rebased = self.rebase_on_cwd(target);
        let target = &rebased;
        let t = target.text();
        match kind {
            _ if t.starts_with("/dev/tcp/") || t.starts_with("/dev/udp/") => {
                self.add(
                    "exfil.dev_tcp",
                    format!("opens the network connection {t} (bash's /dev/tcp): a reverse shell or a data channel the rehearsal cannot show"),
                    shown,
                );
            }
            RedirectKind::Dup => {}
            RedirectKind::Read => {
                if names_credential_path(t) || names_secret_file(t) {
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
                    self.protected_write(target, shown);
                }
            }
        }
    }

    /// `cd DIR`: remember where relative paths now point.
    pub(super) fn change_dir(&mut self, args: &[Word]) {
        let target = args.iter().find(|w| !is_flag(w.text()));
        self.cwd = match target {
            None => Cwd::Known("~".to_string()),
            Some(w) if w.params.iter().any(|p| p == "HOME") || w.tilde => Cwd::Known(format!(
                "~{}",
                w.text()
                    .trim_start_matches('~')
                    .trim_start_matches("$HOME")
                    .trim_start_matches("${HOME}")
            )),
            // Computed at run time, or the previous directory.
            Some(w) if w.literal.is_none() || w.text() == "-" => Cwd::Unknown,
            // Relative to a directory only known when it runs.
            Some(w) if self.cwd == Cwd::Unknown && !w.text().starts_with('/') => Cwd::Unknown,
            Some(w) => Cwd::Known(self.rebase_on_cwd(w).text().to_string()),
        };
    }

    /// Relative paths now point at a directory only known when it runs.
    pub(super) fn cwd_unknown(&self) -> bool {
        self.cwd == Cwd::Unknown
    }

    /// A word as a path relative to the last `cd`.
    pub(super) fn rebase_on_cwd<'w>(&self, w: &'w Word) -> Cow<'w, Word> {
        let t = w.text();
        match &self.cwd {
            Cwd::Known(dir)
                if !t.starts_with('/')
                    && !t.starts_with('~')
                    && !w.tilde
                    && w.literal.is_some() =>
            {
                Cow::Owned(Word {
                    literal: Some(if dir.ends_with('/') {
                        format!("{dir}{t}")
                    } else {
                        format!("{dir}/{t}")
                    }),
                    tilde: dir.starts_with('~'),
                    ..w.clone()
                })
            }
            _ => Cow::Borrowed(w),
        }
    }

    pub(super) fn outside_workspace(&self, w: &Word) -> bool {
        let t = w.text();
        if w.tilde || t.starts_with('~') || w.params.iter().any(|p| p == "HOME") {
            return true;
        }
        if t.starts_with('/') {
            // The system's temporary directories are scratch: the
            // rehearsal gives both throwaway layers, and the live lane
            // replays the workspace's change set only.
            // (`..` climbs out of them: `/tmp/../etc`.)
            let scratch = ["/tmp", "/var/tmp"].iter().any(|d| {
                t.strip_prefix(d).is_some_and(|r| {
                    (r.is_empty() || r.starts_with('/')) && !r.split('/').any(|p| p == "..")
                })
            });
            return !scratch
                && match &self.opts.workspace {
                    Some(ws) => !Path::new(t).starts_with(ws),
                    None => true,
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
    /// A workspace-relative path for `w`, when it is a literal path inside
    /// the workspace (after the last `cd`), normalised (`./a/../b` → `b`).
    pub(super) fn workspace_relative(&self, w: &Word) -> Option<String> {
        let w = self.rebase_on_cwd(w);
        let t = w.literal.as_deref()?;
        if w.tilde || t.starts_with('~') || t.is_empty() {
            return None;
        }
        let rel = if t.starts_with('/') {
            let ws = self.opts.workspace.as_ref()?;
            Path::new(t).strip_prefix(ws).ok()?.to_str()?.to_string()
        } else {
            t.to_string()
        };
        let mut parts: Vec<&str> = Vec::new();
        for part in rel.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop()?;
                }
                p => parts.push(p),
            }
        }
        Some(parts.join("/"))
    }

    /// A write to one of the policy's protected paths (agent and editor
    /// settings, git hooks, shell start-up files, manifests' script hooks):
    /// the same list the rehearsal's verdict checks every change against.
    pub(super) fn protected_write(&mut self, target: &Word, shown: &str) {
        let Some(rel) = self.workspace_relative(target) else {
            return;
        };
        if rel.is_empty() {
            return;
        }
        if let Some(pattern) = self.policy.protected_path(&rel) {
            let pattern = pattern.to_string();
            self.add(
                "protected.write",
                format!(
                    "writes {rel}, a protected path ({pattern}) where agents persist or turn approvals off"
                ),
                shown,
            );
        }
    }

    /// Every file the command names as an output, checked against the
    /// protected paths; for a recursive copy or move, also a destination
    /// directory that holds a protected path (`cp -r hooks .git/`).
    pub(super) fn protected_writes(&mut self, base: &str, args: &[Word], shown: &str) {
        let recursive = matches!(base, "cp" | "mv" | "rsync" | "install" | "ln")
            && args.iter().any(|w| {
                let a = w.text();
                a == "--recursive"
                    || a == "--archive"
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains(['r', 'R', 'a']))
            });
        for t in write_targets(base, args) {
            self.protected_write(&t, shown);
            if recursive {
                self.protected_ancestor(&t, shown);
            }
        }
        let code: Vec<usize> = script_args(base, args);
        for i in code {
            if let Some(w) = args.get(i) {
                self.inline_code_writes(w.text(), shown);
            }
        }
    }

    /// `cp -r x .git`: the destination holds protected paths.
    fn protected_ancestor(&mut self, target: &Word, shown: &str) {
        let Some(rel) = self.workspace_relative(target) else {
            return;
        };
        if rel.is_empty() {
            return;
        }
        let prefix = format!("{rel}/");
        let hit = self
            .policy
            .protected_paths
            .iter()
            .find(|p| p.trim_start_matches('/').starts_with(&prefix))
            .cloned();
        if let Some(pattern) = hit {
            self.add(
                "protected.write",
                format!(
                    "copies a tree into {rel}, which holds a protected path ({pattern}) where agents persist or turn approvals off"
                ),
                shown,
            );
        }
    }

    /// Inline code (`python -c`, `node -e`, `perl -e`) that writes a file
    /// whose quoted name is a protected path.
    fn inline_code_writes(&mut self, code: &str, shown: &str) {
        let writes = [
            "write", "'w'", "\"w\"", "'a'", "\"a\"", "append", ">>", "dump", "open(F", "> ",
        ]
        .iter()
        .any(|m| code.contains(m));
        if !writes {
            return;
        }
        for (i, part) in code.split(['\'', '"', '`']).enumerate() {
            // Odd parts are inside quotes.
            if i % 2 == 1 && !part.is_empty() && !part.contains(char::is_whitespace) {
                self.protected_write(&Word::quoted_literal(part), shown);
            }
        }
    }

    /// `rm -rf "$DIR"/`: with `DIR` empty or unset this is `/`.
    pub(super) fn empty_variable_root(&mut self, base: &str, w: &Word, shown: &str) {
        if !matches!(
            base,
            "rm" | "shred" | "chmod" | "chown" | "chgrp" | "mv" | "find" | "rsync"
        ) {
            return;
        }
        if w.literal.is_some() || w.params.is_empty() || w.raw.contains(":?") {
            return;
        }
        // Only parameter expansions before the last `/` (and `*` after it).
        let raw = w.raw.trim_end_matches('*').trim_end_matches('"');
        let Some(before) = raw.strip_suffix('/') else {
            return;
        };
        let stripped: String = before
            .chars()
            .filter(|c| !matches!(c, '"' | '$' | '{' | '}'))
            .collect();
        if !stripped.is_empty()
            && stripped
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            && w.params.iter().any(|p| stripped.contains(p.as_str()))
        {
            self.add(
                "blast.empty_variable",
                format!(
                    "operates on {}: if the variable is empty or unset this is the root of the filesystem (write ${{VAR:?}} to refuse that)",
                    w.raw
                ),
                shown,
            );
        }
    }

    pub(super) fn blast_radius(&mut self, base: &str, args: &[Word], shown: &str) {
        let mut skip = script_args(base, args);
        skip.extend(read_only_operands(base, args));
        let link_dir = symlink_dir(base, args);
        for (i, w) in args.iter().enumerate() {
            let t = w.text();
            if is_flag(t) || skip.contains(&i) {
                continue;
            }
            self.empty_variable_root(base, w, shown);
            // A relative symlink target is resolved from the link's
            // directory, not from here.
            if let Some((target, dir)) = &link_dir
                && *target == i
                && !t.starts_with('/')
                && !w.tilde
            {
                let joined = Word {
                    literal: Some(format!("{dir}/{t}")),
                    ..w.clone()
                };
                if !self.outside_workspace(&self.rebase_on_cwd(&joined)) {
                    continue;
                }
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
}

/// Programs whose operands are files they delete.
const DELETERS: &[&str] = &[
    "rm",
    "unlink",
    "shred",
    "rmdir",
    "srm",
    "wipe",
    "trash",
    "trash-put",
    "gio",
];

impl Ctx<'_> {
    /// `read f`, `mapfile -t files`: these variables hold input, not
    /// anything written in the command.
    pub(super) fn remember_read_vars(&mut self, base: &str, args: &[Word]) {
        if !matches!(base, "read" | "mapfile" | "readarray") {
            return;
        }
        let mut i = 0;
        while i < args.len() {
            let a = args[i].text();
            if matches!(
                a,
                "-d" | "-n" | "-N" | "-p" | "-t" | "-u" | "-a" | "-C" | "-c" | "-O" | "-s"
            ) && base != "mapfile"
                && base != "readarray"
                && a != "-a"
            {
                i += 2;
                continue;
            }
            if !is_flag(a) && self.read_vars.len() < 32 {
                self.read_vars.push(a.to_string());
            }
            i += 1;
        }
    }

    /// A delete whose targets come from elsewhere: a file list (xargs, a
    /// variable filled by `read`), a command substitution, the positional
    /// parameters of a string run by `-exec sh -c`, or a relative path
    /// after a `cd` to a directory only known when it runs. What it
    /// deletes is not in the command.
    pub(super) fn delete_targets(&mut self, base: &str, args: &[Word], shown: &str) {
        // `ps ... | xargs kill`: processes named by a list from elsewhere.
        if matches!(base, "kill" | "pkill" | "killall" | "skill")
            && let Some(from) = self.targets_from
        {
            self.add(
                "system.kill.unknown_targets",
                format!("{base} signals processes named by {from}: processes this command did not start, on the live machine"),
                shown,
            );
        }
        // `find DIR -delete` deletes what it finds under its start paths.
        let find_delete = base == "find" && args.iter().any(|w| w.text() == "-delete");
        if !DELETERS.contains(&base) && !find_delete {
            return;
        }
        let operands: Vec<&Word> = if find_delete {
            args.iter()
                .take_while(|w| !w.text().starts_with(['-', '(', '!']))
                .collect()
        } else {
            args.iter().filter(|w| !is_flag(w.text())).collect()
        };
        let why: Option<String> = if let Some(from) = self.targets_from {
            Some(from.to_string())
        } else if let Some(w) = operands
            .iter()
            .find(|w| w.raw.contains("$(") || w.raw.contains('`'))
        {
            Some(format!("the output of a command ({})", w.raw))
        } else if let Some(w) = operands.iter().find(|w| {
            w.params.iter().any(|p| {
                p.chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '@' | '*' | '#'))
                    || self.read_vars.contains(p)
            })
        }) {
            Some(format!("values read or passed in from outside ({})", w.raw))
        } else if let Some(w) = operands.iter().find(|w| {
            // `${OUT:?}` fails when unset or empty: the documented safe form.
            !w.raw.contains(":?")
                && w.params.iter().any(|p| {
                    !self.set_vars.contains(p)
                        && !self.read_vars.contains(p)
                        && !matches!(p.as_str(), "HOME" | "PWD" | "!" | "?" | "$")
                        && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && !p.chars().all(|c| c.is_ascii_digit())
                })
        }) {
            Some(format!(
                "a value from the caller's environment ({}), which this command does not set",
                w.raw
            ))
        } else if self.cwd_unknown() {
            operands
                .iter()
                .find(|w| !w.text().starts_with('/') && !w.text().starts_with('~') && !w.tilde)
                .map(|w| format!("{} in a directory only known when it runs", w.raw))
        } else {
            None
        };
        if let Some(why) = why {
            self.add(
                "delete.unknown_targets",
                format!("{base} deletes targets that come from elsewhere: {why}"),
                shown,
            );
        }
    }
}
