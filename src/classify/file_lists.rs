//! A file list made in the workspace: `find . -name '*.o' | xargs rm`,
//! `ls -tp | grep -v / | tail -n +6 | xargs rm --`. The names come from a
//! listing of the workspace itself, through filters that only drop, keep
//! or reorder whole lines, so what xargs' program deletes or changes is in
//! the workspace and the rehearsal shows it (principle `deletes`: a delete
//! whose targets come from elsewhere is one of unknown targets; these do
//! not come from elsewhere).

use super::parse::{Extracted, SimpleCommand, Word};

/// Filters that pass whole input lines through unchanged (`grep -o`
/// prints a part of a line, which may be an absolute path: not one).
fn passes_lines(argv: &[Word]) -> bool {
    let Some(name) = argv.first().and_then(|w| w.literal.as_deref()) else {
        return false;
    };
    match name {
        "grep" | "egrep" | "fgrep" => !argv[1..].iter().any(|w| {
            let a = w.text();
            a == "--only-matching"
                || (a.starts_with('-') && !a.starts_with("--") && a.contains('o'))
        }),
        "sort" | "uniq" | "head" | "tail" | "tac" | "shuf" => true,
        _ => false,
    }
}

/// A path in the workspace as written: relative, no `..`, nothing
/// computed when it runs.
fn workspace_relative(w: &Word) -> bool {
    let Some(t) = w.literal.as_deref() else {
        return false;
    };
    !w.tilde && !t.starts_with('/') && !t.split('/').any(|c| c == "..")
}

/// `find` over workspace paths that prints the names it finds as they are
/// (no `-printf`, no symlinks followed out), or `ls` of workspace paths.
fn lists_workspace(argv: &[Word]) -> bool {
    let Some(name) = argv.first().and_then(|w| w.literal.as_deref()) else {
        return false;
    };
    let args = &argv[1..];
    match name {
        "find" => {
            let starts = args.iter().take_while(|w| {
                !w.text().starts_with('-') && !matches!(w.text(), "(" | "!" | "\\(" | "\\!")
            });
            let mut starts = starts.peekable();
            let no_start = starts.peek().is_none();
            (no_start || starts.all(workspace_relative))
                && !args.iter().any(|w| {
                    matches!(
                        w.text(),
                        "-L" | "-H"
                            | "-follow"
                            | "-printf"
                            | "-fprintf"
                            | "-fprint"
                            | "-fprint0"
                            | "-ls"
                            | "-fls"
                            | "-exec"
                            | "-execdir"
                            | "-ok"
                            | "-okdir"
                    )
                })
        }
        "ls" => args
            .iter()
            .all(|w| w.text().starts_with('-') || workspace_relative(w)),
        _ => false,
    }
}

/// The stages of `c`'s pipeline before it, in order.
fn stages_before<'a>(c: &SimpleCommand, ex: &'a Extracted) -> Vec<&'a SimpleCommand> {
    let mut stages: Vec<&SimpleCommand> = ex
        .commands
        .iter()
        .filter(|o| o.pipeline == c.pipeline && o.position < c.position && o.depth == c.depth)
        .collect();
    stages.sort_by_key(|o| o.position);
    stages
}

/// Is `c`'s standard input a list of workspace file names: the first
/// stage of its pipeline lists the workspace, every stage between only
/// passes whole lines?
pub(super) fn workspace_file_list(c: &SimpleCommand, ex: &Extracted) -> bool {
    if c.position == 0 || !c.stdin_text.is_empty() {
        return false;
    }
    let stages = stages_before(c, ex);
    stages.len() == c.position
        && stages.iter().all(|o| o.redirects.is_empty())
        && stages.iter().enumerate().all(|(i, o)| {
            o.position == i
                && if i == 0 {
                    lists_workspace(&o.argv)
                } else {
                    passes_lines(&o.argv)
                }
        })
}

/// Is `c` xargs reading a list of directories: the first stage of its
/// pipeline is `find ... -type d` printing the names it finds, every stage
/// between only passes whole lines?
pub(super) fn xargs_of_directories(c: &SimpleCommand, ex: &Extracted) -> bool {
    if c.position == 0 || c.argv.first().and_then(|w| w.literal.as_deref()) != Some("xargs") {
        return false;
    }
    let stages = stages_before(c, ex);
    stages.len() == c.position
        && stages.iter().enumerate().all(|(i, o)| {
            o.position == i
                && if i == 0 {
                    finds_directories(&o.argv)
                } else {
                    passes_lines(&o.argv)
                }
        })
}

/// `find ... -type d` that prints only what it finds (no `-o` alternative
/// that could print something else, no `-exec`).
pub(super) fn finds_directories(argv: &[Word]) -> bool {
    let texts: Vec<&str> = argv.iter().map(|w| w.text()).collect();
    texts.first() == Some(&"find")
        && texts.windows(2).any(|p| p == ["-type", "d"])
        && !texts.iter().any(|a| {
            matches!(
                *a,
                "-o" | "-or" | "-printf" | "-exec" | "-execdir" | "-ok" | "-okdir"
            )
        })
}
