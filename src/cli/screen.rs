//! The one way human output reaches a terminal.
//!
//! Renderers show a record's fields with [`Shown`] (text as someone wrote
//! it: `raw`; a message dryrun composed: `message`; see `model::text` for
//! the notation), and hand each finished line to [`line`] (stdout, through
//! `say!`) or [`warn`] (stderr, through `say_err!`). Both show the line once
//! more as a message: what a renderer forgot to escape still reaches the
//! terminal visible, never as something the terminal acts on, and no line
//! can break into two (a newline inside one is shown as `⟦LF⟧`). The only
//! escape sequences written are the decision's colour, from
//! [`decision_line`]. A unit test keeps `println!`, `print!` and
//! `eprintln!` out of the renderers.

use super::output::{Colour, paint};
use crate::model::Decision;
pub(crate) use crate::model::text::{Shown, split_lines};

/// One line of human output on stdout.
macro_rules! say {
    () => { $crate::cli::screen::line("") };
    ($($t:tt)*) => { $crate::cli::screen::line(&format!($($t)*)) };
}

/// One line (or, for a message of dryrun's own with several, each of its
/// lines) on stderr.
macro_rules! say_err {
    ($($t:tt)*) => { $crate::cli::screen::warn(&format!($($t)*)) };
}

pub(crate) use {say, say_err};

/// Write one line on stdout, shown as a message.
pub(crate) fn line(text: &str) {
    super::output::stdout(format_args!("{}\n", Shown::message(text)));
}

/// `{before}{decision}{after}`, the decision coloured on terminals.
pub(crate) fn decision_line(before: &str, d: Decision, after: &str) {
    let colour = match d {
        Decision::Promote => Colour::Green,
        Decision::NeedsApproval => Colour::Yellow,
        Decision::Blocked => Colour::Red,
    };
    super::output::stdout(format_args!(
        "{}{}{}\n",
        Shown::message(before),
        paint(d.as_str(), colour),
        Shown::message(after)
    ));
}

/// Write a message of dryrun's own on stderr: its line breaks are kept,
/// each line shown as a message.
pub(crate) fn warn(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    for l in split_lines(text) {
        let _ = writeln!(err, "{}", Shown::message(l));
    }
}

#[cfg(test)]
mod tests {
    /// The renderers write through `say!` / `say_err!` only.
    #[test]
    fn renderers_reach_the_terminal_only_through_the_screen() {
        for (name, text) in [
            ("render/mod.rs", include_str!("render/mod.rs")),
            ("render/lists.rs", include_str!("render/lists.rs")),
            ("review.rs", include_str!("review.rs")),
            ("tui/evidence.rs", include_str!("tui/evidence.rs")),
            ("tui/view.rs", include_str!("tui/view.rs")),
        ] {
            for (i, l) in text.lines().enumerate() {
                let code = l.split("//").next().unwrap_or("");
                for m in ["println!", "print!", "eprintln!", "eprint!"] {
                    assert!(
                        !code.contains(m),
                        "{name}:{}: `{m}` writes around the screen's escaping: {l}",
                        i + 1
                    );
                }
            }
        }
    }
}
