//! Checks for the published ways around an approval system (issue 16):
//! agents started with their approvals off, substitutions hidden in
//! builtins' arguments, running a download or a stream, environment hooks,
//! exfiltration through a network argument, and programs whose name is
//! hidden (brace expansion, globs, ANSI-C quoting, aliases). Each cause is
//! its own finding with a rule id, so every decision is explained.

use super::forms::{declared_plain_value, is_prompt_var};
use super::paths::write_targets;
use super::tables::{
    DOWNLOADERS, HARMLESS_GENERATORS, HIJACK_PREFIXES, HIJACK_VARS, IFS_READERS, INTERPRETERS,
    NETWORK_TOOLS, PAGER_VARS, SHELLS, SUBSCRIPT_BUILTINS, WRITES_ITS_LAST_OPERAND,
    WRITES_ITS_OPERANDS, harmless_pager,
};
use super::{Ctx, RedirectKind, SimpleCommand, Word, base_name, is_flag};

/// Has a command substitution (`$(...)`, backticks) in its source.
fn has_substitution(w: &Word) -> bool {
    w.literal.is_none() && (w.raw.contains("$(") || w.raw.contains('`'))
}

/// The whole word is one command substitution (`"$(curl -s x)"`): its
/// output, not text around it, becomes the program.
fn is_whole_substitution(w: &Word) -> bool {
    let r = w.raw.trim_matches('"');
    w.literal.is_none()
        && ((r.starts_with("$(") && r.ends_with(')'))
            || (r.len() > 1 && r.starts_with('`') && r.ends_with('`')))
}

/// Every command substitution in `raw` only runs a generator of harmless
/// text with literal arguments (`$(date +%F)`), so nothing is read out.
fn only_harmless_substitutions(raw: &str) -> bool {
    // Backquotes are the same substitution as `$(...)`: pairs of them, not
    // escaped, are read as one.
    let converted;
    let raw = if raw.contains('`') {
        if raw.contains("\\`") || !raw.matches('`').count().is_multiple_of(2) {
            return false;
        }
        let mut open = false;
        converted = raw
            .split('`')
            .enumerate()
            .map(|(i, part)| {
                if i == 0 {
                    return part.to_string();
                }
                open = !open;
                format!("{}{part}", if open { "$(" } else { ")" })
            })
            .collect::<String>();
        converted.as_str()
    } else {
        raw
    };
    let mut rest = raw;
    let mut seen = false;
    while let Some(i) = rest.find("$(") {
        let inner = &rest[i + 2..];
        let Some(end) = inner.find(')') else {
            return false;
        };
        let body = &inner[..end];
        if body.contains(['$', '<', '>', '(', '`']) {
            return false;
        }
        for part in body.split(['|', ';', '&']) {
            let name = part.split_whitespace().next().unwrap_or("");
            if !HARMLESS_GENERATORS.contains(&name) {
                return false;
            }
        }
        seen = true;
        rest = &inner[end + 1..];
    }
    seen
}

/// Text that bash will evaluate again as code when it is used as a name or
/// an arithmetic expression.
fn looks_like_code(text: &str) -> bool {
    text.contains("$(") || text.contains('`') || text.contains("${")
}

/// Shells and interpreters run a file given as their first operand.
fn runs_its_operand(base: &str) -> bool {
    if matches!(base, "source" | ".") {
        return true;
    }
    // Cheap rejection first: every shell and interpreter name starts with
    // one of these letters.
    if !base.starts_with([
        'a', 'b', 'c', 'd', 'f', 'k', 'l', 'm', 'n', 'p', 'R', 'r', 's', 't', 'z',
    ]) {
        return false;
    }
    let trimmed = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    SHELLS.contains(&trimmed)
        || INTERPRETERS
            .iter()
            .any(|i| i.trim_end_matches(|c: char| c.is_ascii_digit()) == trimmed)
}

/// A path as compared between a download and a run (`./a.sh` is `a.sh`).
fn same_file_key(t: &str) -> String {
    let mut t = t;
    while let Some(rest) = t.strip_prefix("./") {
        t = rest;
    }
    t.to_string()
}

/// Tools that copy, move, pack, compare, commit or change the mode of a
/// file without running what is in it.
fn handles_files_as_data(base: &str) -> bool {
    WRITES_ITS_OPERANDS.contains(&base)
        || WRITES_ITS_LAST_OPERAND.contains(&base)
        || matches!(
            base,
            "git"
                | "tar"
                | "zip"
                | "unzip"
                | "gzip"
                | "gunzip"
                | "xz"
                | "bzip2"
                | "zstd"
                | "7z"
                | "patch"
                | "sed"
                | "gsed"
                | "split"
                | "csplit"
                | "iconv"
                | "dos2unix"
                | "cmp"
                | "file"
                | "stat"
                | "wc"
                | "md5sum"
                | "sha256sum"
                | "b2sum"
                | "gpg"
                | "scp"
        )
}

/// A file as compared between a write and a run: its path, or the
/// variable that holds it (`"$TF"` is `$TF`).
fn file_key(w: &Word) -> String {
    match &w.literal {
        Some(t) => same_file_key(t),
        None => w.raw.trim_matches('"').to_string(),
    }
}

/// `LESS=-R` holds options, not a program; other pager variables a
/// harmless pager.
fn harmless_pager_or_less_flags(v: &str) -> bool {
    harmless_pager(v)
        || v.split_whitespace()
            .all(|w| w.starts_with('-') && !w.contains(['`', '$', ';', '|']))
}

/// `PATH=$PATH:dir` only appends: names found before still win.
fn appends_to_path(w: &Word) -> bool {
    let raw = w.raw.strip_prefix("PATH=").unwrap_or(&w.raw);
    [
        "$PATH:",
        "${PATH}:",
        "\"$PATH\":",
        "\"${PATH}\":",
        "\"$PATH:",
        "\"${PATH}:",
    ]
    .iter()
    .any(|p| raw.starts_with(p))
}

/// `/usr//bin/rm`, `/bin/./rm`, `/usr/bin/../bin/rm` as `/usr/bin/rm`:
/// `None` when the name is already in plain form.
fn canonical_program_path(name: &str) -> Option<String> {
    if !name.starts_with('/')
        || !(name.contains("//")
            || name.contains("/./")
            || name.contains("/../")
            || name.ends_with("/."))
    {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for p in name.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// A file name that is a stream: what another process writes into it runs.
fn is_stream_path(t: &str) -> bool {
    matches!(t, "/dev/stdin" | "-" | "/dev/fd/0" | "/proc/self/fd/0")
        || t.starts_with("/dev/fd/")
        || t.starts_with("/proc/self/fd/")
}

impl Ctx<'_> {
    /// An assignment in front of a command (or alone, or by `export`/`env`):
    /// a variable that makes a later program run or load something else.
    /// `IFS=` in front of `read`/`mapfile` is ordinary field splitting.
    pub(super) fn assignment(
        &mut self,
        name: &str,
        w: &Word,
        shown: &str,
        before: Option<&str>,
        depth: u32,
        counter: &mut usize,
    ) {
        let ifs_for_reader = (name == "IFS" && before.is_some_and(|c| IFS_READERS.contains(&c)))
            || (name == "PATH" && appends_to_path(w))
            || (PAGER_VARS.contains(&name)
                && w.literal
                    .as_deref()
                    .is_some_and(harmless_pager_or_less_flags));
        // `RESTIC_PASSWORD_COMMAND=CMD`, `FOO_CMD=...`: a variable named
        // for a command holds a program the tool that reads it runs; one
        // named for a program or for where a tool looks its programs up
        // does too (`PYTHON_BIN=x`, `GROFF_BIN_PATH=.`: nroff runs the
        // `groff` it finds there).
        let names_command = [
            "_COMMAND",
            "_CMD",
            "_PROG",
            "_PROGRAM",
            "_BIN",
            "_EXE",
            "BIN_PATH",
            "EXEC_PATH",
            "_BINDIR",
            "_BIN_DIR",
        ]
        .iter()
        .any(|s| name.ends_with(s))
            && !w.raw.is_empty()
            && !w.raw.trim_matches(['"', '\'']).is_empty();
        // A prompt string runs only the substitutions written in it,
        // which are judged as commands (`forms::is_prompt_var`).
        let prompt = is_prompt_var(name) && self.prompt_value(w, depth, counter);
        let hijack = (HIJACK_VARS.contains(&name) && !prompt)
            || HIJACK_PREFIXES.iter().any(|p| name.starts_with(p))
            || names_command;
        if hijack && !ifs_for_reader {
            let what = if name.starts_with("BASH_FUNC_") {
                "defines an exported bash function, which every bash started later imports"
                    .to_string()
            } else {
                format!("sets {name}, which changes what later commands run or load")
            };
            self.add("obfuscation.env_hijack", what, shown);
        }
        self.credential_word(w, shown);
    }

    /// Checks on every word of a simple command, before wrappers are
    /// unwrapped: parameter expansions that evaluate a value as code.
    pub(super) fn expansion_tricks(&mut self, w: &Word, shown: &str) {
        if w.literal.is_some() {
            return;
        }
        if w.raw.contains("${!") {
            self.add(
                "obfuscation.indirect_expansion",
                format!(
                    "{} expands a variable named by another variable's value; a name like a[$(cmd)] runs a command",
                    w.raw
                ),
                shown,
            );
        }
        if w.raw.contains("@P}") {
            self.add(
                "obfuscation.indirect_expansion",
                format!(
                    "{} expands a value as a prompt string, which runs the command substitutions in it",
                    w.raw
                ),
                shown,
            );
        }
    }

    /// The program name is hidden: brace expansion (`{rm,-rf,x}`), a glob
    /// (`/b?n/r?`), ANSI-C quoting of a name no rule knows. Returns true
    /// when the command was fully handled here.
    pub(super) fn hidden_program(
        &mut self,
        argv: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) -> bool {
        let w = &argv[0];
        let name = w.text();
        let raw = w.raw.as_str();
        if raw.starts_with('{') && raw.ends_with('}') && raw.contains(',') && !w.quoted {
            self.add(
                "obfuscation.brace_command",
                format!("the command is built by brace expansion ({raw}), which hides its program"),
                shown,
            );
            let inner = &raw[1..raw.len() - 1];
            let mut s = inner.split(',').collect::<Vec<_>>().join(" ");
            for a in &argv[1..] {
                s.push(' ');
                s.push_str(&a.raw);
            }
            self.nested(&s, depth, counter);
            return true;
        }
        let unquoted_glob = raw.contains(['?', '*']) || (raw.contains('[') && raw.contains(']'));
        if unquoted_glob && !matches!(name, "[" | "[[") && !w.quoted {
            self.commands.push(shown.to_string());
            self.add(
                "obfuscation.glob_command",
                format!("the program is a glob pattern ({raw}), only resolved when it runs"),
                shown,
            );
            return true;
        }
        if w.ansi_c {
            self.add(
                "obfuscation.quoted_name",
                format!("the command name is ANSI-C quoted ({raw}), which hides the program"),
                shown,
            );
        }
        if name.chars().any(look_alike_char) {
            self.add(
                "obfuscation.hidden_name",
                format!("the command name {raw} has characters outside ASCII (look-alikes hide the program)"),
                shown,
            );
        }
        false
    }

    /// A program path in an unusual form (`/usr/bin/../bin/rm`,
    /// `/bin//rm`): said so, and read as its plain form.
    pub(super) fn canonical_program(&mut self, name: String, shown: &str) -> String {
        match canonical_program_path(&name) {
            Some(plain) => {
                self.add(
                    "obfuscation.hidden_name",
                    format!("the program path {name} is written around its plain form {plain}"),
                    shown,
                );
                plain
            }
            None => name,
        }
    }

    /// Remember what a downloader writes (`curl -o f`, `wget URL`,
    /// `curl URL > f`), so running it later in the same string is seen.
    pub(super) fn record_downloads(&mut self, c: &SimpleCommand) {
        let Some(first) = c.argv.first().and_then(|w| w.literal.as_deref()) else {
            return;
        };
        let base = base_name(first);
        if !DOWNLOADERS.contains(&base) {
            return;
        }
        let args = &c.argv[1..];
        let mut files: Vec<String> = write_targets(base, args)
            .iter()
            .map(|w| w.text().to_string())
            .collect();
        for r in &c.redirects {
            if matches!(
                r.kind,
                RedirectKind::Write | RedirectKind::Append | RedirectKind::Clobber
            ) {
                files.push(r.target.text().to_string());
            }
        }
        let remote_name = match base {
            "wget" => !args
                .iter()
                .any(|w| w.text().starts_with("-O") || w.text().starts_with("--output-document")),
            _ => args.iter().any(|w| {
                let a = w.text();
                a == "--remote-name"
                    || a == "--remote-name-all"
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains('O'))
            }),
        };
        if remote_name {
            for w in args.iter().filter(|w| w.text().contains("://")) {
                let url = w.text().split(['?', '#']).next().unwrap_or("");
                if let Some(name) = url
                    .rsplit('/')
                    .next()
                    .filter(|n| !n.is_empty() && !n.contains(':'))
                {
                    files.push(name.to_string());
                }
            }
        }
        for f in files {
            if self.downloaded.len() < 64 {
                self.downloaded.push(same_file_key(&f));
            }
        }
    }

    /// Remember every file this command writes, by path or by the variable
    /// naming it, so that running one later in the same string is seen.
    pub(super) fn record_written(&mut self, c: &SimpleCommand) {
        let mut keys: Vec<String> = Vec::new();
        for r in &c.redirects {
            if matches!(
                r.kind,
                RedirectKind::Write | RedirectKind::Append | RedirectKind::Clobber
            ) {
                keys.push(file_key(&r.target));
            }
        }
        if let Some(first) = c.argv.first().and_then(|w| w.literal.as_deref()) {
            let base = base_name(first);
            for w in write_targets(base, &c.argv[1..]) {
                keys.push(file_key(&w));
            }
        }
        for k in keys {
            if !k.is_empty() && !k.starts_with("/dev/") && self.written.len() < 64 {
                self.written.push(k);
            }
        }
    }

    /// The program, script or stdin about to run is a file this string
    /// wrote: its code was never seen.
    pub(super) fn ran_written_file(&mut self, path: &str, shown: &str) {
        let key = same_file_key(path.trim_matches('"'));
        if self.written[..self.written_before].contains(&key) {
            self.add(
                "exec.written_code",
                format!(
                    "runs {path}, which this same command wrote: code that nobody has reviewed"
                ),
                shown,
            );
        }
    }

    /// A file this string wrote, handed to a program that does more than
    /// read it (`echo 'execute_process(...)' > CMakeLists.txt; cmake .` is
    /// the same shape as `echo '...' > $TF; tool --config=$TF`): a config
    /// or script it may run, whose code nobody reviewed.
    pub(super) fn passes_written_file(&mut self, base: &str, args: &[Word], shown: &str) {
        let written = &self.written[..self.written_before];
        if written.is_empty() || handles_files_as_data(base) {
            return;
        }
        for w in args {
            let key = file_key(w);
            let value = key
                .split_once('=')
                .map(|(_, v)| same_file_key(v.trim_matches('"')))
                .unwrap_or_default();
            let hit = [key.as_str(), value.as_str()]
                .into_iter()
                .find(|k| !k.is_empty() && written.iter().any(|x| x == k));
            if let Some(file) = hit {
                self.add(
                    "exec.written_code",
                    format!(
                        "{base} is given {file}, which this same command wrote: a script or config it may run, never reviewed"
                    ),
                    shown,
                );
                return;
            }
        }
    }

    /// The program or script about to run is a file this string downloaded.
    pub(super) fn runs_download(&mut self, path: &str, shown: &str) {
        if self.downloaded.contains(&same_file_key(path)) {
            self.add(
                "obfuscation.run_stream",
                format!("runs {path}, which this command downloaded: code nobody has seen"),
                shown,
            );
        }
    }

    /// Text shaped like an array subscript holding a command substitution
    /// (`'a[$(cmd)]'`), anywhere: bash evaluates it wherever it is later used
    /// as a name or in arithmetic.
    pub(super) fn subscript_code(
        &mut self,
        w: &Word,
        shown: &str,
        depth: u32,
        counter: &mut usize,
    ) {
        let Some(text) = w.literal.as_deref() else {
            return;
        };
        if !(text.contains("[$(") || text.contains("[`")) {
            return;
        }
        self.add(
            "obfuscation.builtin_substitution",
            format!(
                "{text} is an array subscript holding a command substitution, which runs wherever bash evaluates it as a name or arithmetic"
            ),
            shown,
        );
        let s = format!(": {text}");
        self.nested(&s, depth, counter);
    }

    /// A name the same string defined as an alias: resolve it (worst case,
    /// as if aliases were expanded) and say so.
    pub(super) fn resolve_alias(
        &mut self,
        name: &str,
        argv: &[Word],
        depth: u32,
        counter: &mut usize,
        shown: &str,
    ) -> bool {
        let Some(value) = self.aliases.remove(name) else {
            return false;
        };
        self.add(
            "obfuscation.alias",
            format!(
                "{name} is an alias defined in the same command ({value}), which hides the program"
            ),
            shown,
        );
        let mut s = value.clone();
        for a in &argv[1..] {
            s.push(' ');
            s.push_str(&a.raw);
        }
        self.nested(&s, depth, counter);
        self.aliases.insert(name.to_string(), value);
        true
    }

    /// Checks on what finally runs (wrappers unwrapped), besides the rules.
    pub(super) fn bypass_checks(
        &mut self,
        base: &str,
        args: &[Word],
        shown: &str,
        depth: u32,
        counter: &mut usize,
    ) {
        self.agent_approvals_off(base, args, shown);
        if SUBSCRIPT_BUILTINS.contains(&base) {
            self.builtin_substitutions(base, args, shown, depth, counter);
        }
        if runs_its_operand(base) {
            self.runs_stream(base, args, shown);
        }
        if let Some(w) = args
            .iter()
            .find(|w| has_substitution(w) && !only_harmless_substitutions(&w.raw))
            && NETWORK_TOOLS.contains(&base)
        {
            self.add(
                "exfil.substitution",
                format!(
                    "sends the output of a command substitution ({}) to the network: data can leave in a URL, a name or a packet",
                    w.raw
                ),
                shown,
            );
        }
        self.protected_writes(base, args, shown);
        self.reader_outputs(base, args, shown);
        self.command_carriers(base, args, shown);
    }

    /// `printf -v 'a[$(cmd)]'`, `read 'a[$(cmd)]'`, `let`, `declare -n`,
    /// `test -v`: a quoted word that bash evaluates as a subscript or an
    /// arithmetic expression runs the substitution in it.
    pub(super) fn builtin_substitutions(
        &mut self,
        base: &str,
        args: &[Word],
        shown: &str,
        depth: u32,
        counter: &mut usize,
    ) {
        let mut code: Vec<String> = Vec::new();
        let texts: Vec<&str> = args.iter().map(|w| w.text()).collect();
        for (i, w) in args.iter().enumerate() {
            let Some(text) = w.literal.as_deref() else {
                continue;
            };
            let prev = if i > 0 { args[i - 1].text() } else { "" };
            let is_name = match base {
                "printf" => prev == "-v" || (text.starts_with("-v") && text.len() > 2),
                "test" | "[" => matches!(prev, "-v" | "-R"),
                _ => !is_flag(text) || text.starts_with("-v"),
            };
            if is_name && looks_like_code(text) && !declared_plain_value(base, &texts, text) {
                code.push(text.to_string());
            }
        }
        for text in code {
            self.add(
                "obfuscation.builtin_substitution",
                format!(
                    "{base} evaluates {text} as a name or arithmetic, which runs the substitution in it (quoted words are not always data)"
                ),
                shown,
            );
            let s = format!(": {text}");
            self.nested(&s, depth, counter);
        }
    }

    /// `. <(curl ...)`, `bash <(wget -O- ...)`, `source /dev/stdin`: a shell
    /// runs whatever another process writes, unseen.
    pub(super) fn runs_stream(&mut self, base: &str, args: &[Word], shown: &str) {
        // `python3 -c "$(curl ...)"`, `node -e "$(wget -O- ...)"`.
        for (i, w) in args.iter().enumerate() {
            let a = w.text();
            let code_flag = matches!(a, "-c" | "-e" | "-E" | "--eval" | "-p" | "--print" | "-r")
                || (SHELLS.contains(&base)
                    && is_flag(a)
                    && !a.starts_with("--")
                    && a.ends_with('c'));
            if code_flag && let Some(code) = args.get(i + 1).filter(|c| is_whole_substitution(c)) {
                self.add(
                    "obfuscation.run_stream",
                    format!(
                        "{base} runs code that a command substitution produces ({}), a download or stream that is never seen",
                        code.raw
                    ),
                    shown,
                );
            }
        }
        let Some(first) = args.iter().find(|w| !is_flag(w.text()) || w.text() == "-") else {
            return;
        };
        if let Some(t) = first.literal.as_deref() {
            let t = t.to_string();
            self.runs_download(&t, shown);
        }
        let key = file_key(first);
        self.ran_written_file(&key, shown);
        let process_sub = first.literal.is_none() && first.raw == "<(...)";
        let stream = first.literal.as_deref().is_some_and(is_stream_path);
        if process_sub || (stream && matches!(base, "source" | ".")) {
            self.add(
                "obfuscation.run_stream",
                format!(
                    "{base} runs the output of another command ({}), a download or stream that is never seen",
                    first.raw
                ),
                shown,
            );
        }
    }
}

/// A character outside ASCII that can make a name look like another:
/// anything but the typographic punctuation a reader sees as such (curly
/// quotes and guillemets pasted from a web page: `“*.txt”` split at a
/// `|` gives a "program" `TXT]”`, visibly no known program's name).
fn look_alike_char(c: char) -> bool {
    !c.is_ascii()
        && !matches!(
            c,
            '\u{2018}'
                ..='\u{201F}'
                    | '\u{00AB}'
                    | '\u{00BB}'
                    | '\u{2039}'
                    | '\u{203A}'
                    | '\u{00A8}'
                    | '\u{00B4}'
        )
}
