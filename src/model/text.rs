//! Showing text to people: the one notation for what a terminal would act
//! on or hide, and the one rule for which variable names are ever named.
//!
//! A reviewer approves what they read, so text is shown exactly as it will
//! run and land: a backslash is a backslash, a tab in a command line is the
//! tab the shell will see. Only what a terminal would act on or hide is made
//! visible, each as one bracketed name:
//!
//! - C0 controls and DEL by their ASCII names: `⟦ESC⟧`, `⟦TAB⟧`, `⟦CR⟧`,
//!   `⟦LF⟧`, `⟦NUL⟧`, `⟦BEL⟧`, `⟦BS⟧`, `⟦DEL⟧`, ...;
//! - C1 controls, bidirectional format characters and everything that
//!   draws nothing (Unicode's default-ignorable characters: zero-width
//!   ones, variation selectors, tags) by code point: `⟦U+009B⟧`,
//!   `⟦U+202E⟧`, `⟦U+200B⟧`, `⟦U+FE0F⟧`;
//! - a byte that is not UTF-8 by value: `⟦0xFF⟧`;
//! - the opening bracket itself, when the text has one: `⟦U+27E6⟧`. So
//!   every `⟦` on the screen starts an escape, and no text can pass for one.
//!
//! One-line fields (a command, a path, a name, a reason) show a newline as
//! `⟦LF⟧`; multi-line fields (output, diffs, stdin) are split into lines
//! first ([`split_lines`]) and each line is shown on its own.
//!
//! [`Shown`] is the one implementation: [`escape_for_humans`] (used where a
//! message embeds a name) and every renderer go through it.

use std::fmt;

/// Opens every escape; escaped itself when the text has one.
pub(crate) const OPEN: char = '\u{27e6}';
/// Closes an escape.
pub(crate) const CLOSE: char = '\u{27e7}';

/// What a text shown on a terminal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// As a command, a file, a person or an agent wrote it: everything that
    /// needs escaping is escaped, the opening bracket included.
    Raw,
    /// A message dryrun composed, whose embedded names it escaped ([`Raw`])
    /// when it composed it: their brackets are the notation's and stay;
    /// anything else a terminal would act on is still made visible (a
    /// record can be edited by whoever owns its state directory).
    ///
    /// [`Raw`]: Form::Raw
    Message,
}

/// A text as it may reach a terminal: on one line, every control, invisible
/// and bidirectional character and every byte that is not UTF-8 made
/// visible in the notation of this module. `Display` writes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown<'a> {
    bytes: &'a [u8],
    form: Form,
}

impl<'a> Shown<'a> {
    /// Text as someone wrote it (a command line, a path, a name, a note,
    /// a line of output).
    pub(crate) fn raw(text: &'a str) -> Shown<'a> {
        Shown::bytes(text.as_bytes())
    }

    /// Bytes as someone wrote them (a file name that need not be UTF-8).
    pub(crate) fn bytes(bytes: &'a [u8]) -> Shown<'a> {
        Shown {
            bytes,
            form: Form::Raw,
        }
    }

    /// A message dryrun composed (a reason, a note, an error), whose
    /// embedded names were escaped when it was composed.
    pub(crate) fn message(text: &'a str) -> Shown<'a> {
        Shown {
            bytes: text.as_bytes(),
            form: Form::Message,
        }
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.bytes.utf8_chunks() {
            let valid = chunk.valid();
            let mut start = 0;
            for (i, c) in valid.char_indices() {
                let escape = if c == OPEN {
                    self.form == Form::Raw
                } else {
                    is_dangerous_char(c)
                };
                if escape {
                    out.write_str(&valid[start..i])?;
                    write_escape(out, c)?;
                    start = i + c.len_utf8();
                }
            }
            out.write_str(&valid[start..])?;
            for b in chunk.invalid() {
                write!(out, "{OPEN}0x{b:02X}{CLOSE}")?;
            }
        }
        Ok(())
    }
}

/// ASCII's names of the C0 controls, by value.
const C0_NAMES: [&str; 32] = [
    "NUL", "SOH", "STX", "ETX", "EOT", "ENQ", "ACK", "BEL", "BS", "TAB", "LF", "VT", "FF", "CR",
    "SO", "SI", "DLE", "DC1", "DC2", "DC3", "DC4", "NAK", "SYN", "ETB", "CAN", "EM", "SUB", "ESC",
    "FS", "GS", "RS", "US",
];

fn write_escape(out: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c as u32 {
        u @ 0..0x20 => write!(out, "{OPEN}{}{CLOSE}", C0_NAMES[u as usize]),
        0x7f => write!(out, "{OPEN}DEL{CLOSE}"),
        u => write!(out, "{OPEN}U+{u:04X}{CLOSE}"),
    }
}

/// What a terminal acts on or does not show: C0, DEL and C1 controls, the
/// line and paragraph separators and interlinear annotations, and every
/// character Unicode says draws nothing (`Default_Ignorable_Code_Point`):
/// zero-width spaces and joiners, marks, embeddings, overrides and
/// isolates, the BOM, soft hyphen, fillers, variation selectors (which can
/// make two names that differ look the same, or carry hidden text), the
/// deprecated format characters, and the tag characters that can spell
/// text no one sees.
pub(crate) fn is_dangerous_char(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || matches!(u,
            0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
            | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x206F | 0x3164
            | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF)
}

/// Bytes shown on one line (see the module docs), as a `String`: for a
/// message that names a path, a file or a variable.
pub(crate) fn escape_for_humans(bytes: &[u8]) -> String {
    Shown::bytes(bytes).to_string()
}

/// The lines of a multi-line text (output, a diff, stdin), split at `\n`
/// only (a `\r` stays in its line, to be shown), without the empty piece
/// after a final newline; none for an empty text.
pub(crate) fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .take(if text.is_empty() { 0 } else { usize::MAX })
}

/// Whether an environment variable's name is a shell identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`): the only names dryrun passes to a command
/// or ever names. A variable with any other name is dropped and counted
/// ([`unnamed_variables`]), never named.
pub(crate) fn is_shell_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// What a record says instead of names that are not shell identifiers: a
/// count, in words no variable can be named.
pub(crate) fn unnamed_variables(n: usize) -> String {
    if n == 1 {
        "env:(1 variable whose name is not a shell identifier)".into()
    } else {
        format!("env:({n} variables whose names are not shell identifiers)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> String {
        Shown::raw(s).to_string()
    }

    #[test]
    fn text_is_shown_as_it_runs_with_only_what_a_terminal_hides_made_visible() {
        // Backslashes and their letters are text: shown once, as written.
        assert_eq!(raw(r"printf 'a\\b\n'"), r"printf 'a\\b\n'");
        assert_eq!(raw("a\\tb"), "a\\tb");
        assert_eq!(raw("a\tb"), "a⟦TAB⟧b");
        assert_eq!(raw("a\nb\r"), "a⟦LF⟧b⟦CR⟧");
        assert_eq!(
            raw("\u{1b}]52;c;QQ==\u{7}\u{1b}[2J"),
            "⟦ESC⟧]52;c;QQ==⟦BEL⟧⟦ESC⟧[2J"
        );
        assert_eq!(raw("\0\u{8}\u{7f}\u{9b}"), "⟦NUL⟧⟦BS⟧⟦DEL⟧⟦U+009B⟧");
        assert_eq!(raw("x\u{202e}y\u{2066}z"), "x⟦U+202E⟧y⟦U+2066⟧z");
        assert_eq!(raw("\u{feff}a\u{200b}b"), "⟦U+FEFF⟧a⟦U+200B⟧b");
        assert_eq!(raw("tag\u{e0041}"), "tag⟦U+E0041⟧");
        // Variation selectors and the rest of what draws nothing.
        assert_eq!(
            raw("a\u{fe0f}b\u{e0100}c\u{206a}d\u{1d173}e\u{180b}f\u{17b4}"),
            "a⟦U+FE0F⟧b⟦U+E0100⟧c⟦U+206A⟧d⟦U+1D173⟧e⟦U+180B⟧f⟦U+17B4⟧"
        );
        assert_eq!(escape_for_humans(b"bad\xff\xfe"), "bad⟦0xFF⟧⟦0xFE⟧");
        assert_eq!(raw("blog/ok-é.md 日本"), "blog/ok-é.md 日本");
    }

    #[test]
    fn no_text_passes_for_an_escape() {
        // A name spelling the notation is shown with its bracket escaped:
        // every bracket on the screen opens a real escape.
        assert_eq!(raw("a⟦ESC⟧b"), "a⟦U+27E6⟧ESC⟧b");
        assert_ne!(raw("a⟦ESC⟧b"), raw("a\u{1b}b"));
        // A message keeps the escapes its names got when it was composed,
        // and still makes a raw control visible.
        let composed = format!("wrote {}", escape_for_humans("a\u{1b}⟦b".as_bytes()));
        assert_eq!(
            Shown::message(&composed).to_string(),
            "wrote a⟦ESC⟧⟦U+27E6⟧b"
        );
        assert_eq!(Shown::message("x\u{1b}[2J\n").to_string(), "x⟦ESC⟧[2J⟦LF⟧");
    }

    #[test]
    fn lines_split_at_newlines_only() {
        assert_eq!(split_lines("").count(), 0);
        assert_eq!(split_lines("a\n").collect::<Vec<_>>(), ["a"]);
        assert_eq!(split_lines("a\r\nb").collect::<Vec<_>>(), ["a\r", "b"]);
        assert_eq!(split_lines("a\n\n").collect::<Vec<_>>(), ["a", ""]);
        assert_eq!(split_lines("\n").collect::<Vec<_>>(), [""]);
    }

    #[test]
    fn only_shell_identifiers_are_named() {
        for ok in ["GH_TOKEN", "_x", "A1", "a"] {
            assert!(is_shell_identifier(ok), "{ok}");
        }
        for bad in [
            "",
            "1A",
            "A-B",
            "GH_TOKEN\u{1b}]52;c;x\u{7}",
            "É",
            "A B",
            "A=B",
        ] {
            assert!(!is_shell_identifier(bad), "{bad:?}");
        }
        assert_eq!(
            unnamed_variables(2),
            "env:(2 variables whose names are not shell identifiers)"
        );
    }
}
