//! The answer for a run that changed nothing: its output is the answer.
//!
//! A command whose rehearsal left the workspace as it was (no change, or
//! only identical rewrites), made no call a stub answered, and whose
//! decision is promote needs no promotion: there is nothing to apply, so
//! no receipt and no "applied" line. The hook rewrites the host's command
//! to one that only prints the rehearsal's output, in the order it was
//! written, and exits with its status:
//!
//! ```text
//! : dryrun replay r…; printf %s 'line one
//! '; printf %s 'a warning
//! ' >&2; exit 1
//! ```
//!
//! Shell builtins only (`:`, `printf`, `exit`), so no second process runs
//! and the host shows the model the output as the command's own tool
//! result, with its exit status. Every byte of output is inside single
//! quotes (a quote as `'\''`, no NUL), the one quoting every POSIX shell
//! reads alike, and the rendering is parsed back with this module's own
//! strict reader before it is handed out: anything that does not read
//! back as exactly the same pieces is not offered (the hook falls back to
//! `dryrun promote`). Seen again (a host that hooks the rewrite, Codex's
//! `PermissionRequest`), a replay is allowed only when it is, byte for
//! byte, what this module renders for that run now.

use crate::model::output::OutputStream;
use crate::record::{RunRecord, RunState};
use crate::verdict::Decision;

/// The most output bytes a replay carries; past it the middle is left
/// out, with a line that says how much (the hosts cut a command's output
/// near there themselves).
const KEEP_BYTES: usize = 24 << 10;
/// The longest replay command offered (far under the kernel's 128 KiB for
/// one argument, even quoted again by a host).
const MAX_COMMAND: usize = 32 << 10;

/// Does `r` need no promotion, so that its output can be the answer?
/// Decision promote, still `rehearsed`, nothing to apply (every change an
/// identical rewrite that leaves no time to set), no call a stub answered,
/// and a live lane that would only apply.
pub(super) fn nothing_to_apply(r: &RunRecord) -> bool {
    let Some(h) = &r.rehearsal else { return false };
    r.state == RunState::Rehearsed
        && r.verdict.as_ref().map(|v| v.decision) == Some(Decision::Promote)
        && !h.changes.iter().any(crate::model::Change::goes_live)
        && h.would_be_actions.is_empty()
        && r.live
            .as_ref()
            .is_none_or(|l| l.mode == crate::model::LiveMode::Apply)
}

/// Where a replay writes stderr's pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Streams {
    /// To stderr (Claude Code captures both streams in one file, in the
    /// order written).
    Apart,
    /// To stdout too: a host that reads the two pipes apart (Codex) shows
    /// pieces written microseconds apart in either order, and shows the
    /// two as one text anyway.
    OnStdout,
}

/// The replay command for `r`, or `None` when `r` needs a promotion or
/// the rendering does not read back exactly.
pub(super) fn render(r: &RunRecord, streams: Streams) -> Option<String> {
    if !nothing_to_apply(r) || !crate::engine::valid_run_id(&r.run_id) {
        return None;
    }
    let h = r.rehearsal.as_ref()?;
    let exit = match (h.exit_code, h.signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    let stream = |s| match streams {
        Streams::Apart => s,
        Streams::OnStdout => OutputStream::Stdout,
    };
    let mut pieces: Vec<(OutputStream, String)> = h
        .output_pieces()
        .into_iter()
        // A terminal shows nothing for a NUL; no shell word can hold one.
        .map(|(s, p)| (stream(s), p.replace('\0', "")))
        .filter(|(_, p)| !p.is_empty())
        .fold(Vec::new(), |mut v: Vec<(OutputStream, String)>, (s, p)| {
            // Adjacent pieces of one stream are one.
            match v.last_mut() {
                Some((ls, lp)) if *ls == s => lp.push_str(&p),
                _ => v.push((s, p)),
            }
            v
        });
    if h.output_truncated {
        pieces.push((
            stream(OutputStream::Stderr),
            "\n[dryrun: the output was cut to the run's output limit]\n".into(),
        ));
    }
    let mut keep = KEEP_BYTES;
    loop {
        let shown = cut_middle(&pieces, keep, &r.run_id, stream(OutputStream::Stderr));
        let command = compose(&r.run_id, &shown, exit);
        if command.len() <= MAX_COMMAND {
            // Offered only if it reads back as exactly what it carries.
            return (read(&command) == Some((r.run_id.clone(), shown, exit))).then_some(command);
        }
        if keep < 1024 {
            return None;
        }
        keep /= 2;
    }
}

/// The run a replay command names, if `command` starts as one.
pub(super) fn run_of(command: &str) -> Option<String> {
    let rest = command.strip_prefix(": dryrun replay ")?;
    let id = rest.split(';').next()?;
    crate::engine::valid_run_id(id).then(|| id.to_string())
}

fn compose(run_id: &str, pieces: &[(OutputStream, String)], exit: i32) -> String {
    let mut parts = vec![format!(": dryrun replay {run_id}")];
    for (s, p) in pieces {
        // Always quoted, whatever the text.
        let q = format!("'{}'", p.replace('\'', "'\\''"));
        parts.push(match s {
            OutputStream::Stdout => format!("printf %s {q}"),
            OutputStream::Stderr => format!("printf %s {q} >&2"),
        });
    }
    if exit != 0 {
        // Only on failure: a host that runs something after the command
        // (Claude Code records the working directory) still does so.
        parts.push(format!("exit {exit}"));
    }
    parts.join("; ")
}

/// The first and last bytes of the output within `keep`, the middle
/// replaced by a line that says how much was left out.
fn cut_middle(
    pieces: &[(OutputStream, String)],
    keep: usize,
    run_id: &str,
    note_on: OutputStream,
) -> Vec<(OutputStream, String)> {
    let total: usize = pieces.iter().map(|(_, p)| p.len()).sum();
    if total <= keep {
        return pieces.to_vec();
    }
    let head = keep / 4;
    let tail_from = total - (keep - head);
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut marked = false;
    for (s, p) in pieces {
        let (a, b) = (at, at + p.len());
        at = b;
        // The part of this piece before `head`, and after `tail_from`.
        let first = head.clamp(a, b) - a;
        let last = tail_from.clamp(a, b) - a;
        let first = floor_char(p, first);
        let last = ceil_char(p, last);
        if first > 0 {
            out.push((*s, p[..first].to_string()));
        }
        if !marked && b > head {
            marked = true;
            out.push((
                note_on,
                format!(
                    "\n[dryrun: {} bytes of output left out here; run {run_id}'s record keeps them]\n",
                    tail_from - head
                ),
            ));
        }
        if last < p.len() && b > tail_from {
            out.push((*s, p[last..].to_string()));
        }
    }
    out
}

fn floor_char(t: &str, mut i: usize) -> usize {
    while !t.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(t: &str, mut i: usize) -> usize {
    while i < t.len() && !t.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A replay command's run, its pieces of output and its exit status.
type Replayed = (String, Vec<(OutputStream, String)>, i32);

/// What a replay command says: its run, its pieces of output and its exit
/// status; `None` for anything not exactly of the shape [`compose`]
/// makes. Outside single quotes only the words it writes are accepted.
fn read(command: &str) -> Option<Replayed> {
    let mut statements = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        '\0' => return None,
                        ch => w.push(ch),
                    }
                }
            }
            '\\' => {
                // Only `\'`, between two quoted stretches.
                if chars.next()? != '\'' {
                    return None;
                }
                word.get_or_insert_with(String::new).push('\'');
            }
            ' ' => words.push(word.take()?),
            ';' => {
                words.push(word.take()?);
                statements.push(std::mem::take(&mut words));
                if chars.next()? != ' ' {
                    return None;
                }
            }
            c if c.is_ascii_alphanumeric() || ":%>&-".contains(c) => {
                word.get_or_insert_with(String::new).push(c)
            }
            _ => return None,
        }
    }
    words.push(word.take()?);
    statements.push(words);
    let mut st = statements.into_iter();
    let run_id = match st.next()?.as_slice() {
        [colon, d, r, id] if colon == ":" && d == "dryrun" && r == "replay" => id.clone(),
        _ => return None,
    };
    let mut pieces = Vec::new();
    let mut exit = 0;
    let mut ended = false;
    for s in st {
        if ended {
            return None;
        }
        match s.as_slice() {
            [p, f, text] if p == "printf" && f == "%s" => {
                pieces.push((OutputStream::Stdout, text.clone()))
            }
            [p, f, text, r] if p == "printf" && f == "%s" && r == ">&2" => {
                pieces.push((OutputStream::Stderr, text.clone()))
            }
            [e, n] if e == "exit" && n.bytes().all(|b| b.is_ascii_digit()) && n.len() <= 3 => {
                exit = n.parse().ok()?;
                ended = true;
            }
            _ => return None,
        }
    }
    Some((run_id, pieces, exit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stdout: &str, stderr: &str, exit: i32) -> RunRecord {
        let mut r: RunRecord = serde_json::from_value(serde_json::json!({
            "schema": "dryrun.run/v1", "run_id": "r1234-abcd", "task": null,
            "command": "ls", "workspace": "/w", "created_at": "t", "envelope_hash": "",
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "rehearsal": null, "state": "rehearsed", "receipt": null,
            "verdict": {"decision": "promote", "surprise_paths": [], "forbidden_paths_touched": [],
                        "reasons": []},
        }))
        .unwrap();
        r.rehearsal = Some(crate::record::Rehearsal {
            exit_code: Some(exit),
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..Default::default()
        });
        r
    }

    #[test]
    fn a_replay_reads_back_as_exactly_its_output() {
        let hostile = "it's $(touch /tmp/x) `id` \\' '\\'' ; exit 0\n\"q\" ⟦ESC⟧ \u{1b}[31m\r\n";
        let r = run(hostile, "warn: 'x'\n", 3);
        let c = render(&r, Streams::Apart).expect("rendered");
        assert!(
            c.starts_with(": dryrun replay r1234-abcd; printf %s '"),
            "{c}"
        );
        let (id, pieces, exit) = read(&c).unwrap();
        assert_eq!(id, "r1234-abcd");
        assert_eq!(exit, 3);
        assert_eq!(
            pieces,
            [
                (OutputStream::Stdout, hostile.to_string()),
                (OutputStream::Stderr, "warn: 'x'\n".to_string())
            ]
        );
        assert_eq!(run_of(&c).as_deref(), Some("r1234-abcd"));
        // Success exits as the last printf does.
        assert!(
            !render(&run("ok\n", "", 0), Streams::Apart)
                .unwrap()
                .contains("exit")
        );
        // One stream: everything on stdout, in order.
        let one = render(&r, Streams::OnStdout).unwrap();
        assert!(!one.contains(">&2"), "{one}");
        assert_eq!(one.matches("printf").count(), 1, "{one}");
    }

    #[test]
    fn only_a_run_with_nothing_to_apply_is_replayed() {
        let mut r = run("x", "", 0);
        r.rehearsal
            .as_mut()
            .unwrap()
            .changes
            .push(crate::model::Change::new(
                b"a",
                crate::model::ChangeKind::Created,
                crate::model::FileType::File,
            ));
        assert_eq!(render(&r, Streams::Apart), None);
        let mut r = run("x", "", 0);
        r.verdict.as_mut().unwrap().decision = Decision::NeedsApproval;
        assert_eq!(render(&r, Streams::Apart), None);
        let mut r = run("x", "", 0);
        r.state = RunState::Promoted;
        assert_eq!(render(&r, Streams::Apart), None);
    }

    #[test]
    fn a_long_output_keeps_its_head_and_tail() {
        let out: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let c = render(&run(&out, "", 1), Streams::Apart).unwrap();
        assert!(c.len() <= MAX_COMMAND);
        let (_, pieces, _) = read(&c).unwrap();
        let text: String = pieces.iter().map(|(_, p)| p.as_str()).collect();
        assert!(text.starts_with("line 0\n"));
        assert!(text.ends_with("line 19999\n"));
        assert!(text.contains("bytes of output left out here"));
        // Quotes everywhere: cut further until it fits.
        let quotes = "'".repeat(200_000);
        let c = render(&run(&quotes, "", 0), Streams::Apart).unwrap();
        assert!(c.len() <= MAX_COMMAND);
    }

    #[test]
    fn the_reader_refuses_anything_but_its_own_shape() {
        for bad in [
            ": dryrun replay r1-a; printf %s 'x'; rm -rf /",
            ": dryrun replay r1-a; printf %s 'x' >&2 >/tmp/f",
            ": dryrun replay r1-a; printf %s x$(id)",
            ": dryrun replay r1-a; printf %s 'x'\n",
            ": dryrun replay r1-a; exit 1; printf %s 'x'",
            ": dryrun replay r1-a;printf %s 'x'",
            ": dryrun replay r1-a; printf %s 'x' && id",
            ": dryrun replay r1-a; printf %s 'unclosed",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
    }
}
