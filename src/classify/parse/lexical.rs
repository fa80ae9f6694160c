//! Reading the simplest shell text without the full parser: a lone simple
//! command of plain and simply quoted words, a plain word's value, and
//! `$'...'` bodies. Each gives exactly what brush's parser gives for the
//! text it accepts (checked in the tests), and declines everything else.

/// Words bash reserves at the start of a command (`if`, `for`, `time`, ...).
const RESERVED_WORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while", "until", "for",
    "in", "select", "function", "time", "coproc",
];

/// Builtins that take `NAME=value` arguments as assignments.
const DECLARATION_BUILTINS: &[&str] = &["export", "declare", "typeset", "local", "readonly"];

/// The raw words of `src` when it is exactly one simple command whose
/// words are made of plain characters, `'single-quoted'` parts and
/// `"double-quoted"` parts without `$`, backquote or backslash, separated
/// by spaces; `None` for anything else (operators, redirections,
/// expansions, comments, newlines, an assignment or a reserved word first,
/// `NAME=value` given to a declaration builtin), which goes to the parser.
pub(super) fn lone_simple_command(src: &str) -> Option<Vec<&str>> {
    let b = src.as_bytes();
    let plain = |c: u8| c.is_ascii_alphanumeric() || b"-_./,:=+@%^*?".contains(&c);
    let mut words = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b' ' {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i] != b' ' {
            let c = b[i];
            if plain(c) {
                i += 1;
            } else if c == b'\'' || c == b'"' {
                let end = i + 1 + b[i + 1..].iter().position(|x| *x == c)?;
                if c == b'"' && b[i + 1..end].iter().any(|x| b"$`\\!".contains(x)) {
                    return None;
                }
                i = end + 1;
            } else {
                return None;
            }
        }
        words.push(&src[start..i]);
    }
    let first = *words.first()?;
    if first.contains('=') || RESERVED_WORDS.contains(&first) {
        return None;
    }
    if DECLARATION_BUILTINS.contains(&first) && words.iter().any(|w| w.contains('=')) {
        return None;
    }
    Some(words)
}

/// The value of a word made only of plain characters, `'single-quoted'`
/// parts and `"double-quoted"` parts with no `$`, backquote or backslash in
/// them, and whether any part was quoted: what brush's word parser would
/// give for it, without running it. `None` for every other word (tilde,
/// globs with brackets, braces, escapes, expansions, ANSI-C quoting).
pub(super) fn plain_word_value(raw: &str) -> Option<(String, bool)> {
    let b = raw.as_bytes();
    if b.is_empty() {
        return None;
    }
    let plain = |c: u8| c.is_ascii_alphanumeric() || b"-_./,:=+@%^*?".contains(&c);
    if b.iter().all(|c| plain(*c)) {
        return Some((raw.to_string(), false));
    }
    let mut out = String::with_capacity(raw.len());
    let mut quoted = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if plain(c) {
            let start = i;
            while i < b.len() && plain(b[i]) {
                i += 1;
            }
            out.push_str(&raw[start..i]);
            continue;
        }
        if c != b'\'' && c != b'"' {
            return None;
        }
        let end = i + 1 + b[i + 1..].iter().position(|x| *x == c)?;
        let inner = &raw[i + 1..end];
        if c == b'"' && inner.contains(['$', '`', '\\']) {
            return None;
        }
        out.push_str(inner);
        quoted = true;
        i = end + 1;
    }
    Some((out, quoted))
}

/// Decode the body of `$'...'`.
pub fn decode_ansi_c(s: &str) -> String {
    let b: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != '\\' || i + 1 >= b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = b[i + 1];
        i += 2;
        match c {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            '?' => out.push('?'),
            'x' | 'u' | 'U' => {
                let max = match c {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut v = 0u32;
                let mut n = 0;
                while n < max && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + b[i].to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 {
                    out.push('\\');
                    out.push(c);
                } else if let Some(ch) = char::from_u32(v) {
                    out.push(ch);
                }
            }
            '0'..='7' => {
                let mut v = c.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 && i < b.len() && ('0'..='7').contains(&b[i]) {
                    v = v * 8 + b[i].to_digit(8).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if let Some(ch) = char::from_u32(v) {
                    out.push(ch);
                }
            }
            'c' if i < b.len() => {
                out.push(char::from_u32((b[i] as u32) & 0x1f).unwrap_or('?'));
                i += 1;
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}
