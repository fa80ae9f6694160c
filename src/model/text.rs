//! Showing names and messages to people: nothing a command named can move
//! the cursor, recolour the screen or reorder what a reviewer reads.

use std::fmt::Write as _;

/// Render a byte path for a terminal: control characters, ANSI escapes,
/// bidirectional overrides and other invisible format characters are shown as
/// visible escapes, invalid UTF-8 as `\xNN`. A name can therefore never move
/// the cursor, recolour the screen or reorder what a reviewer reads.
pub(crate) fn escape_for_humans(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if is_dangerous_char(c) => {
                    let _ = write!(out, "\\u{{{:04x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Make an already-composed message (whose embedded names were escaped with
/// [`escape_for_humans`]) safe for a terminal without escaping it twice:
/// control and bidi characters become visible, backslashes stay as they are.
pub(crate) fn sanitize_for_terminal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_dangerous_char(c) {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

fn is_dangerous_char(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || matches!(u,
            0x061C | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2069 | 0xFEFF | 0xFFF9..=0xFFFB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_for_humans_shows_what_a_terminal_would_hide() {
        assert_eq!(escape_for_humans(b"a\nb"), r"a\nb");
        assert_eq!(escape_for_humans("x\u{202e}y".as_bytes()), r"x\u{202e}y");
        assert_eq!(escape_for_humans(b"\x1b[2J"), r"\u{001b}[2J");
        assert_eq!(escape_for_humans(b"bad\xff"), r"bad\xff");
    }
}
