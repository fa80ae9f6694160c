//! The rewrites a hook issues (`dryrun promote RUN ...` in the host's
//! command) and how one is recognised again; the agent's own `dryrun`
//! invocations, seen through wrappers.

use std::path::Path;

use serde_json::Value;

use super::HookError;

/// Does any simple command of `command` (after unwrapping `sh -c`,
/// `env`, `sudo`, substitutions, ...) run dryrun? The system policy is
/// read through its cache under `cache_dir` (a state directory), and
/// kept in memory for the rest of this process (the workspace bound's
/// check reads the same).
pub fn invokes_dryrun(command: &str, cache_dir: Option<&Path>) -> bool {
    let own = std::env::current_exe().ok();
    if plainly_not_dryrun(command, own.as_deref()) {
        return false;
    }
    let policy = match crate::policy::Policy::load_cached(
        &crate::engine::system_policy_dir(),
        None,
        cache_dir,
    ) {
        Ok(p) => p,
        // No policy, no parse: judge by the text (fail closed).
        Err(_) => return command.contains("dryrun"),
    };
    names_dryrun(command, &policy, own.as_deref())
}

/// Does a simple command of `command`, as the classifier parses it, run
/// a program named `dryrun*` or this binary?
fn names_dryrun(command: &str, policy: &crate::policy::Policy, own: Option<&Path>) -> bool {
    let c = crate::classify::classify(command, policy, &Default::default());
    c.commands.iter().any(|simple| {
        let first = program_of(simple);
        Path::new(&first)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("dryrun"))
            || own.is_some_and(|o| Path::new(&first) == o)
            || is_pattern(&first)
    }) || (c.commands.is_empty() && command.contains("dryrun"))
}

/// A program word the shell may expand into another name before it runs
/// it (`dry?un`, `dr[y]run`, `dr{y,}run`, `dry@(run)` with `extglob`):
/// which name it becomes depends on the files present, so it may be
/// dryrun's (fail closed). The test command `[` and the group's braces
/// are words of their own.
fn is_pattern(word: &str) -> bool {
    !matches!(word, "[" | "[[" | "{" | "}")
        && (word.contains(['*', '?', '[', '{']) || has_extglob(word))
}

/// Text holding an extended glob's opener (`@(`, `+(`, `!(`; `?(` and
/// `*(` hold a glob character already).
fn has_extglob(text: &str) -> bool {
    ["@(", "+(", "!("].iter().any(|o| text.contains(o))
}

/// The program a simple command's text names, as the shell reads it
/// after quote removal (`d\ryrun`, `dr""yrun`, `$'\x64ryrun'` are
/// `dryrun`); its first word as written when it does not parse.
fn program_of(simple: &str) -> String {
    let mut parsed = crate::classify::parse::Extracted::default();
    let mut pipelines = 0;
    if crate::classify::parse::extract(simple, 0, &mut parsed, &mut pipelines).is_ok()
        && let Some(word) = parsed.commands.first().and_then(|c| c.argv.first())
    {
        return word.text().to_string();
    }
    let first = simple.split_whitespace().next().unwrap_or("");
    first.trim_matches(|ch| ch == '\'' || ch == '"').to_string()
}

/// A command that cannot name dryrun whatever the parse: its text holds
/// neither `dryrun` nor the name this binary runs under, and no character
/// the shell's parse turns into other text (quotes, escapes, expansions,
/// braces, globs, extended globs, `~`), so every word of it is the text
/// itself. Judged without reading the policy.
fn plainly_not_dryrun(command: &str, own: Option<&Path>) -> bool {
    let own_name = own
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned());
    !command.contains("dryrun")
        && !has_extglob(command)
        && own_name.is_none_or(|n| !n.is_empty() && !command.contains(n.as_str()))
        && command.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || c.is_ascii_whitespace()
                || "-_./=:,@%+|&;<>()#!^".contains(c)
        })
}

/// The `dryrun promote` command a hook issues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub exe: String,
    pub global: Vec<String>,
    pub run_id: String,
    pub token: Option<String>,
    pub await_s: Option<u64>,
}

impl Rewrite {
    pub fn render(&self) -> String {
        let mut words = vec![self.exe.clone()];
        words.extend(self.global.iter().cloned());
        words.push("promote".into());
        words.push(self.run_id.clone());
        words.push("--replay-output".into());
        if let Some(t) = &self.token {
            words.push("--host-prompt-token".into());
            words.push(t.clone());
        }
        if let Some(s) = self.await_s {
            words.push("--await-approval".into());
            words.push(s.to_string());
        }
        words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
    }

    /// Recognise exactly the shape [`Rewrite::render`] produces.
    pub fn parse(command: &str) -> Option<Rewrite> {
        let words = split_quoted(command)?;
        let promote = words.iter().position(|w| w == "promote")?;
        let exe = words.first()?.clone();
        if !Path::new(&exe)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("dryrun"))
        {
            return None;
        }
        let global = words[1..promote].to_vec();
        let ok_global = match global.as_slice() {
            [] => true,
            [s, _] if s == "--socket" => true,
            [l, s, _] if l == "--local" && s == "--state-dir" => true,
            _ => false,
        };
        if !ok_global {
            return None;
        }
        let rest = &words[promote + 1..];
        let (run_id, flags) = rest.split_first()?;
        if !crate::engine::valid_run_id(run_id) {
            return None;
        }
        let mut token = None;
        let mut await_s = None;
        match flags {
            [r] if r == "--replay-output" => {}
            [r, t, v] if r == "--replay-output" && t == "--host-prompt-token" => {
                token = Some(v.clone())
            }
            [r, a, v] if r == "--replay-output" && a == "--await-approval" => {
                await_s = Some(v.parse().ok()?)
            }
            _ => return None,
        }
        Some(Rewrite {
            exe,
            global,
            run_id: run_id.clone(),
            token,
            await_s,
        })
    }
}

/// Single-quote `w` for a POSIX shell unless it is plain.
pub fn quote(w: &str) -> String {
    if !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// Words of a command made only of plain and single-quoted words
/// separated by single spaces (what [`quote`] makes); `None` otherwise.
pub(super) fn split_quoted(s: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    let mut in_word = false;
    while let Some(c) = chars.next() {
        match c {
            ' ' => {
                if !in_word {
                    return None;
                }
                words.push(std::mem::take(&mut cur));
                in_word = false;
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => cur.push(ch),
                    }
                }
                // '\'' inside a quoted word: end quote, \', reopen.
                if chars.peek() == Some(&'\\') {
                    chars.next();
                    if chars.next()? != '\'' {
                        return None;
                    }
                    cur.push('\'');
                }
            }
            c if c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c) => {
                in_word = true;
                cur.push(c);
            }
            _ => return None,
        }
    }
    if !in_word {
        return None;
    }
    words.push(cur);
    Some(words)
}

pub(super) fn rewritten_input(
    tool_input: &serde_json::Map<String, Value>,
    command: String,
) -> Value {
    let mut m = tool_input.clone();
    m.insert("command".into(), Value::String(command));
    Value::Object(m)
}

pub(super) fn own_exe() -> Result<String, HookError> {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .map_err(|e| HookError::Engine(format!("cannot name dryrun's own binary: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_round_trips() {
        let rw = Rewrite {
            exe: "/usr/local/bin/dryrun".into(),
            global: vec!["--local".into(), "--state-dir".into(), "/tmp/a b'c".into()],
            run_id: "r1234-abcd".into(),
            token: Some("00ff".into()),
            await_s: None,
        };
        let s = rw.render();
        assert_eq!(Rewrite::parse(&s), Some(rw));
        assert_eq!(Rewrite::parse(&format!("{s}; rm -rf /")), None);
        assert_eq!(Rewrite::parse(&format!("{s} && x")), None);
        assert_eq!(
            Rewrite::parse("/usr/bin/dryrun promote r1-a --replay-output --override"),
            None
        );
    }

    #[test]
    fn dryrun_invocations_are_seen_through_wrappers() {
        for c in [
            "dryrun approve r1",
            "sh -c 'dryrun promote r1'",
            "env X=1 /usr/bin/dryrun approve r1",
            "echo $(dryrun runs)",
            "cd /tmp && ./dryrun approve r1",
        ] {
            assert!(invokes_dryrun(c, None), "{c}");
        }
        for c in ["ls", "grep -r dryrun src", "cat dryrun.yaml"] {
            assert!(!invokes_dryrun(c, None), "{c}");
        }
    }

    /// The shortcut that skips the policy never answers "no" where the
    /// parse would say "yes": over the classifier's corpus and spellings
    /// that reach dryrun only through the parse (each of which the
    /// shortcut must leave to it).
    #[test]
    fn the_shortcut_agrees_with_the_parse() {
        let policy =
            crate::policy::Policy::load_cached(&crate::engine::system_policy_dir(), None, None)
                .expect("the built-in policy");
        let own = Path::new("/usr/local/bin/dr");
        let corpus = include_str!("../../../tests/classifier_corpus.txt");
        let mut plain = 0;
        for line in corpus.lines().filter(|l| !l.starts_with('#')) {
            let Some((_, command)) = line.split_once('\t') else {
                continue;
            };
            if plainly_not_dryrun(command, Some(own)) {
                plain += 1;
                assert!(!names_dryrun(command, &policy, Some(own)), "{command}");
            }
        }
        assert!(
            plain > 100,
            "the corpus exercised the shortcut {plain} times"
        );
        for command in [
            "d\\ryrun approve r1",
            "$'\\x64ryrun' approve r1",
            "dr\"\"yrun approve r1",
            "dr''yrun approve r1",
            "/usr/local/bin/dr approve r1",
            "shopt -s extglob\ndry@(run) approve r1",
            "shopt -s extglob\n/usr/bin/dr+(y)run approve r1",
            "dry!(x)un approve r1",
            "dry?un approve r1",
            "/usr/bin/dr[y]run approve r1",
            "dr{y,}run approve r1",
        ] {
            assert!(names_dryrun(command, &policy, Some(own)), "{command}");
            assert!(!plainly_not_dryrun(command, Some(own)), "{command}");
        }
        // The test command is not a pattern.
        assert!(!names_dryrun("[ -f a ] && echo y", &policy, Some(own)));
        // The binary's own name, found on PATH: left to the parse too.
        assert!(!plainly_not_dryrun("dr approve r1", Some(own)));
    }
}
