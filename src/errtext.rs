//! Error text that names files, lines and fields but never quotes their
//! content.
//!
//! Parsers (serde_yaml, serde_json) put values from the input into their
//! messages (`invalid type: string "root:$y$…", expected …`). A daemon that
//! reads a file on someone's behalf must not hand that back: the file might
//! be something the requester cannot read. Every parse error that leaves
//! dryrun goes through [`content_free`] (messages) and [`content_free_path`]
//! (field paths).

/// Whether a quoted token is safe to show: a short identifier-like word
/// (field and variant names), not free text.
fn is_name_like(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `message` with every double-quoted string replaced by `"…"` and every
/// backtick-quoted token that is not a short name replaced by `` `…` ``;
/// control characters are dropped and the result is capped at 300 chars.
pub(crate) fn content_free(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(300));
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                // Skip to the closing quote (escapes included).
                let mut escaped = false;
                for d in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == '"' {
                        break;
                    }
                }
                out.push_str("\"…\"");
            }
            '`' => {
                let mut tok = String::new();
                for d in chars.by_ref() {
                    if d == '`' {
                        break;
                    }
                    tok.push(d);
                }
                if is_name_like(&tok) {
                    out.push('`');
                    out.push_str(&tok);
                    out.push('`');
                } else {
                    out.push_str("`…`");
                }
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
        if out.chars().count() > 300 {
            out.push('…');
            break;
        }
    }
    out
}

/// A serde field path (`tasks.build.intent.mode`, `steps[2]`) with every
/// segment that is not a short name replaced by `…`.
pub(crate) fn content_free_path(path: &str) -> String {
    path.split('.')
        .map(|seg| {
            let base = seg.split('[').next().unwrap_or("");
            let index_ok = seg[base.len()..]
                .chars()
                .all(|c| c.is_ascii_digit() || c == '[' || c == ']');
            if (base.is_empty() || is_name_like(base)) && index_ok {
                seg.to_string()
            } else {
                "…".to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_dropped_and_names_kept() {
        let m = content_free(
            r#"invalid type: string "root:$y$j9T$secret:19000:0:99999:7:::", expected struct PolicyFile at line 1 column 1"#,
        );
        assert!(!m.contains("secret"), "{m}");
        assert!(m.contains("line 1 column 1"), "{m}");
        let m = content_free("unknown field `expected_write`, expected one of `mode`, `summary`");
        assert!(m.contains("`expected_write`"), "{m}");
        let m = content_free("invalid value: `-----BEGIN OPENSSH PRIVATE KEY----- abc`");
        assert!(!m.contains("PRIVATE"), "{m}");
        let m = content_free("escaped \"a\\\"secret\" end");
        assert!(!m.contains("secret") && m.contains("end"), "{m}");
    }

    #[test]
    fn paths_keep_names_only() {
        assert_eq!(
            content_free_path("tasks.build.intent"),
            "tasks.build.intent"
        );
        assert_eq!(content_free_path("steps[2]"), "steps[2]");
        assert_eq!(
            content_free_path("tasks.ssh-rsa AAAA x.mode"),
            "tasks.….mode"
        );
    }
}
