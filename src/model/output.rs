//! The order in which a command wrote its stdout and stderr.
//!
//! The run record keeps the two streams apart (`rehearsal.stdout`,
//! `rehearsal.stderr`, as they always were) and, beside them, the order
//! they were written in (`rehearsal.output_order`): a list of chunks, each
//! one stream and a length in bytes of that stream's text, in the order
//! the sandbox read them. Reading the chunks in turn, each from where its
//! stream's previous chunk ended, gives the output as a terminal showed it
//! (cargo's `Running unittests` before the results, not after them).
//!
//! The order is a presentation, never evidence: two pipes read by one
//! process cannot order writes closer together than one poll turn, so it
//! is left out of the evidence hash (same command, same evidence, whatever
//! the scheduler did). Whatever the list says, a reader shows every byte of
//! both streams exactly once: chunks are cut at the end of their stream and
//! moved to the next character boundary, and whatever the list does not
//! cover follows it, stdout first. A record without a list (older ones, or
//! a list the engine did not trust) reads as stdout, then stderr.

use serde::{Deserialize, Serialize};

/// One of the command's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// A stretch of one stream, written before the next chunk's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputChunk {
    pub stream: OutputStream,
    /// Bytes of that stream's text.
    pub bytes: u64,
}

/// The most chunks an order keeps (a command that alternates its streams
/// more often than this: the rest of each stream follows, stdout first).
pub(crate) const MAX_CHUNKS: usize = 4096;

/// Append `n` bytes of `stream` to an order: merged into the last chunk
/// when it is the same stream; past [`MAX_CHUNKS`] not recorded (the
/// readers' rule for what a list leaves uncovered places it).
pub(crate) fn record_chunk(order: &mut Vec<OutputChunk>, stream: OutputStream, n: u64) {
    if n == 0 {
        return;
    }
    let full = order.len() >= MAX_CHUNKS;
    match order.last_mut() {
        Some(last) if last.stream == stream => last.bytes += n,
        _ if full => {}
        _ => order.push(OutputChunk { stream, bytes: n }),
    }
}

/// The output in the order it was written: pieces of `stdout` and
/// `stderr`, each tagged with its stream. The pieces of one stream put
/// together are that stream exactly.
pub(crate) fn interleave<'a>(
    stdout: &'a str,
    stderr: &'a str,
    order: &[OutputChunk],
) -> Vec<(OutputStream, &'a str)> {
    let text = |s: OutputStream| match s {
        OutputStream::Stdout => stdout,
        OutputStream::Stderr => stderr,
    };
    // Pieces as (stream, start, end) of that stream; adjacent pieces of
    // one stream are one piece.
    let mut spans: Vec<(OutputStream, usize, usize)> = Vec::new();
    let mut pos = [0usize, 0usize];
    let mut take = |s: OutputStream, want: usize| {
        let t = text(s);
        let p = &mut pos[usize::from(s == OutputStream::Stderr)];
        let end = ceil_char_boundary(t, p.saturating_add(want).min(t.len()));
        if end > *p {
            match spans.last_mut() {
                Some(last) if last.0 == s => last.2 = end,
                _ => spans.push((s, *p, end)),
            }
        }
        *p = end;
    };
    for c in order {
        take(c.stream, usize::try_from(c.bytes).unwrap_or(usize::MAX));
    }
    take(OutputStream::Stdout, usize::MAX);
    take(OutputStream::Stderr, usize::MAX);
    spans
        .into_iter()
        .map(|(s, a, b)| (s, &text(s)[a..b]))
        .collect()
}

/// The output as one text, in the order it was written.
pub(crate) fn interleaved_text(stdout: &str, stderr: &str, order: &[OutputChunk]) -> String {
    interleave(stdout, stderr, order)
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

fn ceil_char_boundary(t: &str, mut i: usize) -> usize {
    while i < t.len() && !t.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Where an order's chunks end in each stream (ascending offsets), to be
/// moved along when the texts are edited (redacted, made UTF-8, cut) and
/// turned back into an order for the edited texts.
#[derive(Debug, Default)]
pub(crate) struct ChunkEnds {
    streams: Vec<OutputStream>,
    pub(crate) stdout: Vec<usize>,
    pub(crate) stderr: Vec<usize>,
}

impl ChunkEnds {
    /// The ends of `order`'s chunks; none at all when the order does not
    /// cover both streams (`stdout_len`, `stderr_len` bytes) exactly: such
    /// an order is not trusted, and the output reads as stdout, then stderr.
    pub(crate) fn of(order: &[OutputChunk], stdout_len: usize, stderr_len: usize) -> ChunkEnds {
        let ends = |stream: OutputStream, len: usize| {
            let mut at = 0usize;
            let mut ends = Vec::new();
            for c in order.iter().filter(|c| c.stream == stream) {
                at = at.checked_add(usize::try_from(c.bytes).ok()?)?;
                ends.push(at);
            }
            (at == len).then_some(ends)
        };
        match (
            ends(OutputStream::Stdout, stdout_len),
            ends(OutputStream::Stderr, stderr_len),
        ) {
            (Some(stdout), Some(stderr)) => ChunkEnds {
                streams: order.iter().map(|c| c.stream).collect(),
                stdout,
                stderr,
            },
            _ => ChunkEnds::default(),
        }
    }

    /// The order of the edited texts (`stdout_len`, `stderr_len` bytes now):
    /// the last chunk of each stream runs to its end (a cut's marker goes
    /// with it), and chunks that became empty go.
    pub(crate) fn into_order(mut self, stdout_len: usize, stderr_len: usize) -> Vec<OutputChunk> {
        if let Some(l) = self.stdout.last_mut() {
            *l = stdout_len;
        }
        if let Some(l) = self.stderr.last_mut() {
            *l = stderr_len;
        }
        let mut order = Vec::new();
        let (mut next, mut last) = ([0usize; 2], [0usize; 2]);
        for s in &self.streams {
            let i = usize::from(*s == OutputStream::Stderr);
            let ends = if i == 0 { &self.stdout } else { &self.stderr };
            let Some(&end) = ends.get(next[i]) else { break };
            next[i] += 1;
            let end = end.max(last[i]);
            record_chunk(&mut order, *s, (end - last[i]) as u64);
            last[i] = end;
        }
        order
    }
}

/// One replacement in a text: `start..end` (of the text before it) became
/// `new_len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edit {
    pub start: usize,
    pub end: usize,
    pub new_len: usize,
}

/// Move ascending offsets of a text through ascending, disjoint edits: an
/// offset before an edit keeps its place, one after it moves by the
/// edit's growth, and one inside it goes to the end of the replacement (a
/// redaction marker is never split between two chunks).
pub(crate) fn move_offsets(offsets: &mut [usize], edits: &[Edit]) {
    let mut delta: isize = 0;
    let mut k = 0;
    for o in offsets.iter_mut() {
        while k < edits.len() && edits[k].end <= *o {
            delta += edits[k].new_len as isize - (edits[k].end - edits[k].start) as isize;
            k += 1;
        }
        *o = match edits.get(k) {
            Some(e) if e.start < *o => (e.start as isize + delta) as usize + e.new_len,
            _ => (*o as isize + delta) as usize,
        };
    }
}

/// `bytes` as UTF-8 text (each invalid sequence one U+FFFD, as
/// `String::from_utf8_lossy`), with `offsets` into it moved alike and
/// then onto character boundaries.
pub(crate) fn lossy_with_offsets(bytes: &[u8], offsets: &mut [usize]) -> String {
    let mut edits = Vec::new();
    let mut at = 0usize;
    for chunk in bytes.utf8_chunks() {
        at += chunk.valid().len();
        let bad = chunk.invalid().len();
        if bad > 0 {
            edits.push(Edit {
                start: at,
                end: at + bad,
                new_len: char::REPLACEMENT_CHARACTER.len_utf8(),
            });
            at += bad;
        }
    }
    let text = String::from_utf8_lossy(bytes).into_owned();
    move_offsets(offsets, &edits);
    for o in offsets.iter_mut() {
        *o = ceil_char_boundary(&text, (*o).min(text.len()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutputStream::{Stderr, Stdout};

    fn c(stream: OutputStream, bytes: u64) -> OutputChunk {
        OutputChunk { stream, bytes }
    }

    #[test]
    fn chunks_are_read_in_turn_and_what_they_leave_follows() {
        let order = [c(Stderr, 8), c(Stdout, 3), c(Stderr, 4)];
        let pieces = interleave("ok\nrest\n", "Running\nmore\n", &order);
        assert_eq!(
            pieces,
            [
                (Stderr, "Running\n"),
                (Stdout, "ok\n"),
                (Stderr, "more"),
                (Stdout, "rest\n"),
                (Stderr, "\n"),
            ]
        );
        assert_eq!(interleave("a", "b", &[]), [(Stdout, "a"), (Stderr, "b")]);
    }

    #[test]
    fn a_lying_order_never_loses_or_repeats_a_byte() {
        let (out, err) = ("héllo wörld\n", "ërr\n");
        for order in [
            vec![
                c(Stdout, 2),
                c(Stderr, 1),
                c(Stdout, u64::MAX),
                c(Stderr, 99),
            ],
            vec![c(Stderr, 0), c(Stdout, 0)],
            vec![c(Stdout, 1); 50],
        ] {
            let pieces = interleave(out, err, &order);
            let of = |s| {
                pieces
                    .iter()
                    .filter(|p| p.0 == s)
                    .map(|p| p.1)
                    .collect::<String>()
            };
            assert_eq!(of(Stdout), out, "{order:?}");
            assert_eq!(of(Stderr), err, "{order:?}");
        }
    }

    #[test]
    fn an_order_is_merged_and_capped() {
        let mut o = Vec::new();
        record_chunk(&mut o, Stdout, 2);
        record_chunk(&mut o, Stdout, 3);
        record_chunk(&mut o, Stderr, 0);
        assert_eq!(o, [c(Stdout, 5)]);
        for i in 0..2 * MAX_CHUNKS {
            record_chunk(&mut o, if i % 2 == 0 { Stderr } else { Stdout }, 1);
        }
        assert_eq!(o.len(), MAX_CHUNKS);
    }

    #[test]
    fn offsets_move_through_edits_and_never_split_a_replacement() {
        // "ab SECRET cd" -> "ab [r] cd": SECRET is 3..9, [r] 3 bytes.
        let edits = [Edit {
            start: 3,
            end: 9,
            new_len: 3,
        }];
        let mut o = [2, 3, 5, 9, 12];
        move_offsets(&mut o, &edits);
        assert_eq!(o, [2, 3, 6, 6, 9]);
        let mut bad = [1, 2, 3];
        let t = lossy_with_offsets(b"a\xffb", &mut bad);
        assert_eq!(t, "a\u{fffd}b");
        assert_eq!(bad, [1, 4, 5]);
        // An offset inside a character moves to its end.
        let mut mid = [2];
        assert_eq!(lossy_with_offsets("é!".as_bytes(), &mut mid), "é!");
        assert_eq!(mid, [2]);
        let mut mid = [1];
        lossy_with_offsets("é!".as_bytes(), &mut mid);
        assert_eq!(mid, [2]);
    }

    #[test]
    fn an_order_is_rebuilt_from_moved_ends() {
        let order = [c(Stderr, 4), c(Stdout, 2), c(Stderr, 3)];
        let ends = ChunkEnds::of(&order, 2, 7);
        assert_eq!(
            (ends.stdout.as_slice(), ends.stderr.as_slice()),
            (&[2][..], &[4, 7][..])
        );
        // Not covering a stream exactly: not trusted.
        assert!(ChunkEnds::of(&order, 3, 7).into_order(3, 7).is_empty());
        let mut ends = ChunkEnds::of(&order, 2, 7);
        ends.stderr[0] = 6;
        assert_eq!(
            ends.into_order(2, 10),
            [c(Stderr, 6), c(Stdout, 2), c(Stderr, 4)]
        );
        // A chunk that became empty is dropped and its neighbours merge.
        let mut ends = ChunkEnds::of(&order, 2, 7);
        ends.stdout[0] = 0;
        assert_eq!(ends.into_order(0, 7), [c(Stderr, 7)]);
    }
}
