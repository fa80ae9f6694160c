//! Stub configuration (policy files' and envelopes' `stubs:` maps, and the
//! CLI's `--stub 'TOOL WORDS=exit N'`), validated into
//! [`crate::model::stubs::StubRule`]s.

use serde::{Deserialize, Serialize};

use super::OneOrMany;
use crate::model::stubs::{Answer, StdinMode, StubRule};

/// One stub as written: `id: {match: {...}, answer: {...}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StubConfig {
    #[serde(rename = "match")]
    pub matcher: StubMatchConfig,
    #[serde(default)]
    pub answer: Answer,
    /// Why the tool is shadowed (shown to reviewers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `auto` (default): read stdin only when an argument says the tool
    /// takes it (`-`, `@-`, `--password-stdin`, ...); `read`; `ignore`.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub stdin: StdinMode,
}

fn is_auto(m: &StdinMode) -> bool {
    *m == StdinMode::Auto
}

/// Like a policy rule's `match`, for exactly one tool.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StubMatchConfig {
    pub command: String,
    #[serde(default)]
    pub subcommand: Option<OneOrMany>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags_any: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags_all: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg_regex: Option<String>,
}

pub(crate) use crate::model::stubs::NEVER_STUBBED;
/// Largest answer text (each of stdout and stderr).
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// Validate one stub; `field` names it in errors (`stubs.gh-merge`).
/// `compile_regex`: check that `arg_regex` compiles (every caller does; a
/// cached policy keeps stubs already validated, see `policy/cache.rs`).
pub(crate) fn validate_stub(
    field: &str,
    id: &str,
    c: &StubConfig,
    origin: &str,
    compile_regex: bool,
) -> Result<StubRule, String> {
    let err = |sub: &str, msg: String| format!("{field}.{sub}: {msg}");
    if id.is_empty() || id.len() > 128 || id.chars().any(|ch| ch.is_control()) {
        return Err(format!(
            "{field}: a stub id must be 1 to 128 printable characters"
        ));
    }
    let tool = c.matcher.command.as_str();
    let valid_name = !tool.is_empty()
        && tool.len() <= 64
        && tool
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "._+-".contains(ch))
        && !tool.starts_with('.')
        && !tool.starts_with('-');
    if !valid_name {
        return Err(err(
            "match.command",
            format!("{tool:?} is not a plain tool name (letters, digits, . _ + -)"),
        ));
    }
    if NEVER_STUBBED.contains(&tool) {
        return Err(err(
            "match.command",
            format!("{tool} cannot be stubbed: the sandbox needs the real one"),
        ));
    }
    let subcommands: Vec<Vec<String>> = c
        .matcher
        .subcommand
        .as_ref()
        .map(|s| s.items())
        .unwrap_or_default()
        .iter()
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .collect();
    if subcommands.iter().any(|s: &Vec<String>| s.is_empty()) {
        return Err(err("match.subcommand", "is empty".into()));
    }
    if let Some(re) = c.matcher.arg_regex.as_ref().filter(|_| compile_regex) {
        regex::Regex::new(re).map_err(|e| err("match.arg_regex", e.to_string()))?;
    }
    for f in c.matcher.flags_any.iter().chain(&c.matcher.flags_all) {
        if !f.starts_with('-') || f.len() < 2 {
            return Err(err("match.flags", format!("{f:?} is not a flag")));
        }
    }
    if !(0..=255).contains(&c.answer.exit) {
        return Err(err("answer.exit", "must be 0 to 255".into()));
    }
    for (name, text) in [("stdout", &c.answer.stdout), ("stderr", &c.answer.stderr)] {
        if text.len() > MAX_ANSWER_BYTES {
            return Err(err(
                &format!("answer.{name}"),
                format!("is {} bytes; at most {MAX_ANSWER_BYTES}", text.len()),
            ));
        }
    }
    Ok(StubRule {
        id: id.to_string(),
        origin: origin.to_string(),
        tool: tool.to_string(),
        subcommands,
        flags_any: c.matcher.flags_any.clone(),
        flags_all: c.matcher.flags_all.clone(),
        arg_regex: c.matcher.arg_regex.clone(),
        answer: c.answer.clone(),
        stdin: c.stdin,
    })
}

/// `--stub 'gh pr merge=exit 1'`, `--stub 'curl=exit 22; stderr=curl: (22) 500'`:
/// the left side is the tool and its subcommand words, the right side
/// `exit N` and optionally `stdout=TEXT` / `stderr=TEXT`, separated by `;`.
/// Escapes `\n` and `\t` are honoured in TEXT.
pub(crate) fn parse_cli_stub(spec: &str) -> Result<StubConfig, String> {
    let (left, right) = spec.split_once('=').ok_or_else(|| {
        format!(
            "--stub {spec:?}: expected 'TOOL [SUBCOMMAND...]=exit N[; stdout=TEXT][; stderr=TEXT]'"
        )
    })?;
    let mut words = left.split_whitespace();
    let command = words
        .next()
        .ok_or_else(|| format!("--stub {spec:?}: no tool name before '='"))?
        .to_string();
    let sub: Vec<&str> = words.collect();
    let mut answer = Answer::default();
    let mut saw_exit = false;
    for part in right.split(';') {
        let part = part.trim_start();
        if let Some(n) = part.strip_prefix("exit ") {
            answer.exit = n
                .trim()
                .parse()
                .map_err(|_| format!("--stub {spec:?}: exit needs a number, got {n:?}"))?;
            saw_exit = true;
        } else if let Some(t) = part.strip_prefix("stdout=") {
            answer.stdout = unescape(t);
        } else if let Some(t) = part.strip_prefix("stderr=") {
            answer.stderr = unescape(t);
        } else if !part.trim().is_empty() {
            return Err(format!(
                "--stub {spec:?}: {part:?} is not 'exit N', 'stdout=TEXT' or 'stderr=TEXT'"
            ));
        }
    }
    if !saw_exit {
        return Err(format!("--stub {spec:?}: the answer needs 'exit N'"));
    }
    Ok(StubConfig {
        matcher: StubMatchConfig {
            command,
            subcommand: (!sub.is_empty()).then(|| OneOrMany::One(sub.join(" "))),
            flags_any: Vec::new(),
            flags_all: Vec::new(),
            arg_regex: None,
        },
        answer,
        reason: Some(format!("--stub {spec}")),
        stdin: StdinMode::Auto,
    })
}

fn unescape(t: &str) -> String {
    t.replace("\\n", "\n").replace("\\t", "\t")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_stub_syntax() {
        let c = parse_cli_stub("gh pr merge=exit 1").unwrap();
        assert_eq!(c.matcher.command, "gh");
        assert_eq!(
            c.matcher.subcommand,
            Some(OneOrMany::One("pr merge".into()))
        );
        assert_eq!(c.answer.exit, 1);
        let c = parse_cli_stub("curl=exit 22; stderr=curl: (22) 500\\n").unwrap();
        assert_eq!(c.answer.stderr, "curl: (22) 500\n");
        assert!(
            parse_cli_stub("gh pr merge")
                .unwrap_err()
                .contains("expected")
        );
        assert!(
            parse_cli_stub("gh=stdout=x")
                .unwrap_err()
                .contains("exit N")
        );
        assert!(parse_cli_stub("=exit 1").unwrap_err().contains("no tool"));
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = parse_cli_stub("bash=exit 0").unwrap();
        let e = validate_stub("stubs.x", "x", &c, "envelope", true).unwrap_err();
        assert!(e.starts_with("stubs.x.match.command"), "{e}");
        c.matcher.command = "../gh".into();
        assert!(validate_stub("stubs.x", "x", &c, "envelope", true).is_err());
        c.matcher.command = "gh".into();
        c.answer.exit = 300;
        let e = validate_stub("stubs.x", "x", &c, "envelope", true).unwrap_err();
        assert!(e.contains("answer.exit"), "{e}");
    }
}
