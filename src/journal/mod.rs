//! The hash-chained, append-only journal of every decision.
//! Format: docs/journal-format.md. In short, one JSON object per line:
//!
//! ```text
//! {"hash":"<blake3 of body bytes>","body":{"v":1,"seq":N,"prev":"<hash of N-1>",...}}
//! ```
//!
//! The hash covers the body's bytes exactly as written, and the body names
//! the previous record's hash, so editing, removing or reordering any record
//! breaks the chain at that record. A separate anchor file (`journal.head`)
//! holds the last acknowledged record's sequence number, hash and end offset,
//! so a journal cut short is detected too.
//!
//! Durability: a record is written with one `write(2)` in append mode and
//! `fdatasync`ed before [`Journal::append`] returns, which is before any
//! request that depends on it is acknowledged; concurrent appends in one
//! process are written together and share that `fdatasync` (group commit). A crash mid-write leaves a
//! torn last line that was never acknowledged; the next append (or open)
//! moves it to `journal.torn.<offset>` and truncates it away.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

mod anchor;
mod faults;
mod group;
mod later;
mod tail;
pub(crate) use tail::Published;

use anchor::{Anchor, Head};
pub(crate) use later::Durable;

pub(crate) const JOURNAL_FILE: &str = "journal.jsonl";
pub(crate) const HEAD_FILE: &str = "journal.head";
pub(crate) const FORMAT_VERSION: u32 = 1;
/// `prev` of the first record.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// A record larger than this is refused (reasons and notes are capped well below).
pub(crate) const MAX_RECORD_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "journal {path} is damaged: {problem}; nothing was appended. Inspect it with `dryrun journal verify`"
    )]
    Damaged { path: PathBuf, problem: String },
    #[error("journal record too large ({0} bytes)")]
    TooLarge(usize),
    /// An entry appended on a thread ([`Journal::append_later`]) that did
    /// not reach the disk: the first error, as text.
    #[error("{0}")]
    Later(String),
}

/// Who did something: from the socket's peer credentials (daemon) or the
/// process's own ids (local mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub uid: u32,
    pub gid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// `daemon` (peer credentials of a socket client) or `local` (in-process CLI).
    pub via: String,
}

impl Actor {
    pub fn local() -> Actor {
        Actor {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            pid: Some(std::process::id() as i32),
            via: "local".into(),
        }
    }
    pub fn system() -> Actor {
        Actor {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            pid: Some(std::process::id() as i32),
            via: "system".into(),
        }
    }
}

/// What a record says, before it is chained.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Entry {
    /// run_submitted, verdict, approval, rejection, run_failed, run_cancelled,
    /// promotion, rollback.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    pub data: serde_json::Value,
}

/// A chained record as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Body {
    pub v: u32,
    pub seq: u64,
    pub prev: String,
    pub at: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    pub data: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    hash: String,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// The tail a writer continues from.
#[derive(Debug, Clone, PartialEq)]
struct Tail {
    next_seq: u64,
    prev: String,
    end: u64,
}

/// An appended record: where it is and what it hashes to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Appended {
    pub seq: u64,
    pub hash: String,
}

/// The outcome of `dryrun journal verify`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct VerifyReport {
    pub ok: bool,
    pub path: String,
    pub records: u64,
    /// Hash of the last good record (the chain's head).
    pub head: Option<String>,
    /// The first bad record: its line number (1-based) and what is wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<BadRecord>,
    /// Bytes after the last complete record that are not a record: a write
    /// interrupted by a crash (never acknowledged). Not tampering by itself.
    pub torn_tail_bytes: u64,
    /// What the anchor file says, and whether it agrees.
    pub anchor: String,
    /// The anchor file is there but does not check out (edited, corrupted
    /// or torn): the chain's end cannot be vouched for. Its own exit code.
    #[serde(default)]
    pub anchor_damaged: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct BadRecord {
    pub line: u64,
    /// The sequence number the chain expected at that line.
    pub expected_seq: u64,
    pub problem: String,
}

fn hash_body(body: &[u8]) -> String {
    blake3::hash(body).to_hex().to_string()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Check one line against the chain; `Ok(hash)` or the problem.
fn check_line(line: &[u8], expected_seq: u64, prev: &str) -> Result<(String, Body), String> {
    let parsed: Line = serde_json::from_slice(line)
        .map_err(|e| format!("not a journal record ({e}): edited or corrupted"))?;
    let body_bytes = parsed.body.get().as_bytes();
    let actual = hash_body(body_bytes);
    if actual != parsed.hash {
        return Err(format!(
            "its content does not match its hash (stored {}, content hashes to {}): the record was edited",
            short(&parsed.hash),
            short(&actual)
        ));
    }
    let body: Body = serde_json::from_slice(body_bytes)
        .map_err(|e| format!("hash matches but the body is not a record ({e})"))?;
    if body.v != FORMAT_VERSION {
        return Err(format!("format version {} is not {FORMAT_VERSION}", body.v));
    }
    if body.seq != expected_seq {
        return Err(format!(
            "it is record {} but record {expected_seq} belongs here: records were removed or reordered",
            body.seq
        ));
    }
    if body.prev != prev {
        return Err(format!(
            "it does not chain to the record before it (prev {} but the previous record hashes to {}): records were removed, reordered or replaced",
            short(&body.prev),
            short(prev)
        ));
    }
    Ok((parsed.hash, body))
}

/// The first 12 characters of a hash, for messages (a damaged or forged
/// record's "hash" may be any text: cut on a character, never mid-byte).
fn short(h: &str) -> &str {
    h.char_indices().nth(12).map_or(h, |(i, _)| &h[..i])
}

/// Iterate `(start, end_excluding_newline, has_newline)` over the lines of `buf`.
fn lines(buf: &[u8]) -> impl Iterator<Item = (usize, usize, bool)> + '_ {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos >= buf.len() {
            return None;
        }
        let start = pos;
        match buf[pos..].iter().position(|b| *b == b'\n') {
            Some(i) => {
                pos = start + i + 1;
                Some((start, start + i, true))
            }
            None => {
                pos = buf.len();
                Some((start, buf.len(), false))
            }
        }
    })
}

pub(crate) struct Journal {
    dir: PathBuf,
    path: PathBuf,
    head_path: PathBuf,
    group: group::GroupCommit,
    /// The head after each group commit of this process (`tail.rs`).
    commits: tokio::sync::broadcast::Sender<Appended>,
}

impl Journal {
    pub(crate) fn new(state_dir: &Path) -> Journal {
        Journal {
            dir: state_dir.to_path_buf(),
            path: state_dir.join(JOURNAL_FILE),
            head_path: state_dir.join(HEAD_FILE),
            group: group::GroupCommit::default(),
            commits: tokio::sync::broadcast::Sender::new(1024),
        }
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record, durably (see `group.rs`: concurrent appends
    /// share one `fdatasync`). Returns its sequence number and hash once
    /// the record is on disk.
    pub(crate) fn append(&self, entry: &Entry) -> Result<Appended, JournalError> {
        self.group.append(self, entry)
    }

    /// Where the next record goes: trusts the anchor when the file agrees
    /// with it (O(1)), rescans otherwise. A torn tail is cut away (kept
    /// aside); a journal shorter than its anchor is refused.
    fn find_tail(&self, f: &mut File) -> Result<Tail, JournalError> {
        let len = f.metadata().map_err(io(&self.path))?.len();
        let anchor = self.read_head();
        if let Some(why) = anchor.damage() {
            return Err(JournalError::Damaged {
                path: self.path.clone(),
                problem: format!(
                    "its anchor {} is there but cannot be trusted: {why}. Keep it as evidence and move it aside (the next start rebuilds it from a scan; truncation at the end can then not be ruled out)",
                    self.head_path.display()
                ),
            });
        }
        if let Anchor::Present(h) = anchor {
            if len < h.end {
                return Err(JournalError::Damaged {
                    path: self.path.clone(),
                    problem: format!(
                        "it is {len} bytes but its anchor says record {} ends at byte {}: it was truncated",
                        h.seq, h.end
                    ),
                });
            }
            if h.end >= h.start && h.end - h.start <= MAX_RECORD_BYTES as u64 {
                let mut buf = vec![0u8; (h.end - h.start) as usize];
                f.seek(SeekFrom::Start(h.start)).map_err(io(&self.path))?;
                f.read_exact(&mut buf).map_err(io(&self.path))?;
                let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
                let ok = serde_json::from_slice::<Line>(line)
                    .ok()
                    .filter(|l| l.hash == h.hash && hash_body(l.body.get().as_bytes()) == h.hash);
                if ok.is_some() {
                    if len == h.end {
                        return Ok(Tail {
                            next_seq: h.seq + 1,
                            prev: h.hash,
                            end: h.end,
                        });
                    }
                    // Records after the anchor (a crash between the record's
                    // fsync and the anchor's update) or a torn write.
                    return self.scan_from(f, h.end, h.seq + 1, h.hash, len);
                }
            }
            return Err(JournalError::Damaged {
                path: self.path.clone(),
                problem: format!(
                    "the record its anchor names (record {}, bytes {}..{}) is not there",
                    h.seq, h.start, h.end
                ),
            });
        }
        self.scan_from(f, 0, 0, GENESIS.to_string(), len)
    }

    fn scan_from(
        &self,
        f: &mut File,
        from: u64,
        mut seq: u64,
        mut prev: String,
        len: u64,
    ) -> Result<Tail, JournalError> {
        let mut buf = Vec::with_capacity((len - from) as usize);
        f.seek(SeekFrom::Start(from)).map_err(io(&self.path))?;
        f.read_to_end(&mut buf).map_err(io(&self.path))?;
        let mut end = from;
        let mut torn_at: Option<u64> = None;
        let all: Vec<_> = lines(&buf).collect();
        for (i, (s, e, nl)) in all.iter().copied().enumerate() {
            let last = i + 1 == all.len();
            match check_line(&buf[s..e], seq, &prev) {
                Ok((h, _)) if nl => {
                    seq += 1;
                    prev = h;
                    end = from + (e + 1) as u64;
                }
                // An unterminated or unparsable last line is a torn write.
                _ if last && !nl => torn_at = Some(from + s as u64),
                Err(problem) => {
                    return Err(JournalError::Damaged {
                        path: self.path.clone(),
                        problem: format!("record {seq} (byte {}): {problem}", from + s as u64),
                    });
                }
                Ok(_) => unreachable!("only the last line can lack its newline"),
            }
        }
        if let Some(at) = torn_at {
            let aside = self.dir.join(format!("journal.torn.{at}"));
            let _ = std::fs::write(&aside, &buf[(at - from) as usize..]);
            tracing::warn!(
                "journal: cut a torn last record ({} bytes at offset {at}, never acknowledged) into {}",
                len - at,
                aside.display()
            );
            f.set_len(at).map_err(io(&self.path))?;
            f.sync_data().map_err(io(&self.path))?;
        }
        if seq > 0 {
            // Re-anchor at the last complete record.
            let (s, _) = last_line_bounds(&buf, (end - from) as usize);
            self.write_head(&Head {
                seq: seq - 1,
                hash: prev.clone(),
                start: from + s as u64,
                end,
            })?;
        }
        Ok(Tail {
            next_seq: seq,
            prev,
            end,
        })
    }

    /// Walk the whole chain; name the first bad record.
    pub(crate) fn verify(&self) -> Result<VerifyReport, JournalError> {
        let buf = match crate::state_file::read_capped(&self.path, u64::MAX) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(&self.path)(e)),
        };
        let anchor = self.read_head();
        let damage = anchor.damage().map(str::to_string);
        let head = match anchor {
            Anchor::Present(h) => Some(h),
            _ => None,
        };
        let mut rep = VerifyReport {
            ok: true,
            path: self.path.display().to_string(),
            records: 0,
            head: None,
            first_bad: None,
            torn_tail_bytes: 0,
            anchor: String::new(),
            anchor_damaged: damage.is_some(),
        };
        let mut prev = GENESIS.to_string();
        let mut hashes_at_seq: Option<(u64, String)> = None;
        let all: Vec<_> = lines(&buf).collect();
        for (i, (s, e, nl)) in all.iter().copied().enumerate() {
            let last = i + 1 == all.len();
            let seq = rep.records;
            match check_line(&buf[s..e], seq, &prev) {
                Ok((h, _)) if nl => {
                    if head.as_ref().is_some_and(|hd| hd.seq == seq) {
                        hashes_at_seq = Some((seq, h.clone()));
                    }
                    rep.records += 1;
                    prev = h;
                }
                _ if last && !nl => rep.torn_tail_bytes = (buf.len() - s) as u64,
                Err(problem) => {
                    rep.ok = false;
                    rep.first_bad = Some(BadRecord {
                        line: i as u64 + 1,
                        expected_seq: seq,
                        problem,
                    });
                    break;
                }
                Ok(_) => unreachable!("only the last line can lack its newline"),
            }
        }
        rep.head = (rep.records > 0).then(|| prev.clone());
        rep.anchor = match &head {
            None if let Some(why) = &damage => {
                rep.ok = false;
                format!(
                    "anchor {} DAMAGED: {why}; the end of the chain cannot be vouched for (records may have been cut from the end). Keep it as evidence and move it aside to start again from a scan",
                    self.head_path.display()
                )
            }
            None if rep.records == 0 => "no anchor (empty journal)".into(),
            None => "no anchor file: truncation at the end cannot be ruled out".into(),
            Some(h) if rep.first_bad.is_some() => format!("anchor at record {}", h.seq),
            Some(h) if h.seq >= rep.records => {
                rep.ok = false;
                if rep.first_bad.is_none() {
                    rep.first_bad = Some(BadRecord {
                        line: rep.records + 1,
                        expected_seq: rep.records,
                        problem: format!(
                            "the journal ends after record {} but its anchor says record {} (hash {}) was written: records were removed from the end (truncated)",
                            rep.records as i64 - 1,
                            h.seq,
                            short(&h.hash)
                        ),
                    });
                }
                format!("anchor at record {}: beyond the end of the journal", h.seq)
            }
            Some(h) => match &hashes_at_seq {
                Some((_, hh)) if *hh == h.hash => format!("anchor at record {} agrees", h.seq),
                _ => {
                    rep.ok = false;
                    rep.first_bad = Some(BadRecord {
                        line: h.seq + 1,
                        expected_seq: h.seq,
                        problem: format!(
                            "its anchor says record {} hashes to {}, but the journal's record {} differs: the journal was rewritten",
                            h.seq,
                            short(&h.hash),
                            h.seq
                        ),
                    });
                    format!("anchor at record {} disagrees", h.seq)
                }
            },
        };
        Ok(rep)
    }

    /// Every record, in order (stops at the first bad one).
    #[cfg(test)]
    pub(crate) fn read_all(&self) -> Result<Vec<Body>, JournalError> {
        let buf = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.path)(e)),
        };
        let mut out = Vec::new();
        let mut prev = GENESIS.to_string();
        for (s, e, nl) in lines(&buf) {
            if !nl {
                break;
            }
            match check_line(&buf[s..e], out.len() as u64, &prev) {
                Ok((h, b)) => {
                    prev = h;
                    out.push(b);
                }
                Err(_) => break,
            }
        }
        Ok(out)
    }

    /// The journal's length in bytes (0 when there is none yet).
    pub(crate) fn len(&self) -> Result<u64, JournalError> {
        match std::fs::metadata(&self.path) {
            Ok(m) => Ok(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(io(&self.path)(e)),
        }
    }

    /// The complete records from byte `from` on, in order, unchecked
    /// against the chain (the next append checks the tail; `verify` the
    /// whole). `from` past the end reads nothing; `from` inside a record
    /// starts at the next one. Used after a restart of the machine to find
    /// the runs its last boot left unsettled.
    pub(crate) fn records_from(&self, from: u64) -> Result<Vec<Body>, JournalError> {
        let mut f = match crate::state_file::open_read(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.path)(e)),
        };
        let len = f.metadata().map_err(io(&self.path))?.len();
        // One byte before `from`: is `from` the start of a line?
        let start = from.min(len).saturating_sub(1);
        f.seek(SeekFrom::Start(start)).map_err(io(&self.path))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(io(&self.path))?;
        let skip = if from == 0 {
            0
        } else {
            match buf.iter().position(|b| *b == b'\n') {
                Some(i) => i + 1,
                None => return Ok(Vec::new()),
            }
        };
        let rest = &buf[skip..];
        Ok(lines(rest)
            .filter(|(_, _, nl)| *nl)
            .filter_map(|(s, e, _)| {
                let line: Line = serde_json::from_slice(&rest[s..e]).ok()?;
                serde_json::from_str::<Body>(line.body.get()).ok()
            })
            .collect())
    }

    /// Records whose text contains `needle`, among the last `window` bytes.
    /// (Used at recovery to find a transition's nonce near the end.)
    pub(crate) fn tail_contains(&self, needle: &str, window: u64) -> Result<bool, JournalError> {
        let mut f = match crate::state_file::open_read(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io(&self.path)(e)),
        };
        let len = f.metadata().map_err(io(&self.path))?.len();
        let from = len.saturating_sub(window);
        f.seek(SeekFrom::Start(from)).map_err(io(&self.path))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(io(&self.path))?;
        // Only complete lines count (a torn write was never acknowledged).
        let complete = match buf.iter().rposition(|b| *b == b'\n') {
            Some(i) => &buf[..=i],
            None => return Ok(false),
        };
        Ok(complete
            .windows(needle.len().max(1))
            .any(|w| w == needle.as_bytes()))
    }
}

/// Bounds of the last line ending at `end` (exclusive, includes its newline).
fn last_line_bounds(buf: &[u8], end: usize) -> (usize, usize) {
    let body = &buf[..end.saturating_sub(1)];
    let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> Entry {
        Entry {
            kind: "verdict".into(),
            run_id: Some(format!("r{i:x}")),
            actor: Some(Actor {
                uid: 1000,
                gid: 1000,
                pid: None,
                via: "local".into(),
            }),
            data: serde_json::json!({"i": i, "note": "ünïcode \n and \"quotes\""}),
        }
    }

    fn journal_with(n: u64) -> (tempfile::TempDir, Journal) {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::new(d.path());
        for i in 0..n {
            let a = j.append(&entry(i)).unwrap();
            assert_eq!(a.seq, i);
        }
        (d, j)
    }

    fn lines_of(j: &Journal) -> Vec<String> {
        std::fs::read_to_string(j.path())
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    fn rewrite(j: &Journal, lines: &[String]) {
        let mut s = lines.join("\n");
        s.push('\n');
        std::fs::write(j.path(), s).unwrap();
    }

    #[test]
    fn a_clean_journal_verifies_and_reads_back() {
        let (_d, j) = journal_with(5);
        let r = j.verify().unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!(r.records, 5);
        assert_eq!(r.torn_tail_bytes, 0);
        assert!(r.anchor.contains("agrees"), "{}", r.anchor);
        let all = j.read_all().unwrap();
        assert_eq!(all.len(), 5);
        assert_eq!(all[3].data["i"], 3);
        assert_eq!(all[0].prev, GENESIS);
    }

    #[test]
    fn every_single_byte_flip_is_caught_at_its_record() {
        let (_d, j) = journal_with(4);
        let orig = std::fs::read(j.path()).unwrap();
        let starts: Vec<usize> = lines(&orig).map(|(s, _, _)| s).collect();
        for pos in 0..orig.len() {
            if orig[pos] == b'\n' {
                continue;
            }
            let mut bad = orig.clone();
            bad[pos] ^= 0x01;
            std::fs::write(j.path(), &bad).unwrap();
            let r = j.verify().unwrap();
            let line = starts.iter().rposition(|s| *s <= pos).unwrap() as u64 + 1;
            assert!(!r.ok, "flip at byte {pos} went unnoticed");
            let fb = r
                .first_bad
                .unwrap_or_else(|| panic!("flip at {pos}: no first_bad"));
            assert_eq!(fb.line, line, "flip at byte {pos}: {}", fb.problem);
        }
    }

    #[test]
    fn removal_reordering_and_truncation_are_named() {
        let (_d, j) = journal_with(6);
        let orig = lines_of(&j);

        let mut removed = orig.clone();
        removed.remove(2);
        rewrite(&j, &removed);
        let r = j.verify().unwrap();
        assert_eq!(r.first_bad.as_ref().unwrap().line, 3, "{r:?}");
        assert!(
            r.first_bad
                .unwrap()
                .problem
                .contains("removed or reordered")
        );

        let mut swapped = orig.clone();
        swapped.swap(3, 4);
        rewrite(&j, &swapped);
        let r = j.verify().unwrap();
        assert_eq!(r.first_bad.unwrap().line, 4);

        rewrite(&j, &orig[..4]);
        let r = j.verify().unwrap();
        assert!(!r.ok);
        let fb = r.first_bad.unwrap();
        assert_eq!(fb.line, 5);
        assert!(fb.problem.contains("truncated"), "{}", fb.problem);
        // Appending to a truncated journal is refused, not papered over.
        let e = j.append(&entry(99)).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }

    #[test]
    fn a_torn_last_record_is_cut_and_nothing_acknowledged_is_lost() {
        let (d, j) = journal_with(3);
        let good = std::fs::read(j.path()).unwrap();
        let mut torn = good.clone();
        torn.extend_from_slice(b"{\"hash\":\"abc\",\"body\":{\"v\":1,\"se");
        std::fs::write(j.path(), &torn).unwrap();
        let r = j.verify().unwrap();
        assert!(r.ok, "a torn tail alone is not tampering: {r:?}");
        assert_eq!(r.records, 3);
        assert!(r.torn_tail_bytes > 0);
        let a = j.append(&entry(3)).unwrap();
        assert_eq!(a.seq, 3);
        let after = std::fs::read(j.path()).unwrap();
        assert!(after.starts_with(&good), "acknowledged records are intact");
        assert!(j.verify().unwrap().ok);
        assert!(
            std::fs::read_dir(d.path())
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("journal.torn."))
        );
    }

    #[test]
    fn records_written_after_a_stale_anchor_are_adopted() {
        let (d, j) = journal_with(2);
        let head = std::fs::read(d.path().join(HEAD_FILE)).unwrap();
        j.append(&entry(2)).unwrap();
        // Crash between the record's fsync and the anchor's update.
        std::fs::write(d.path().join(HEAD_FILE), head).unwrap();
        assert_eq!(j.append(&entry(3)).unwrap().seq, 3);
        let r = j.verify().unwrap();
        assert!(r.ok && r.records == 4, "{r:?}");
    }

    #[test]
    fn a_lost_anchor_is_rebuilt_by_a_scan() {
        let (d, j) = journal_with(3);
        std::fs::remove_file(d.path().join(HEAD_FILE)).unwrap();
        assert!(j.verify().unwrap().anchor.contains("no anchor"));
        assert_eq!(j.append(&entry(3)).unwrap().seq, 3);
        assert!(j.verify().unwrap().anchor.contains("agrees"));
    }

    #[test]
    fn tail_search_sees_only_complete_records() {
        let (_d, j) = journal_with(2);
        j.append(&Entry {
            kind: "approval".into(),
            run_id: None,
            actor: None,
            data: serde_json::json!({"txn": "nonce-123"}),
        })
        .unwrap();
        assert!(j.tail_contains("nonce-123", 4096).unwrap());
        assert!(!j.tail_contains("nonce-456", 4096).unwrap());
    }
}
