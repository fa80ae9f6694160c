//! The journal read from a byte offset on, each record with its hash and
//! where it ends, and the head after each group commit: what the fleet
//! publisher sends to the fleet store (`crate::fleet`, docs/fleet.md). The
//! journal is the host's outbox: what it has not published yet is what
//! follows the published position.

use std::io::{Read, Seek, SeekFrom};

use super::{Appended, Body, Head, Journal, JournalError, Line, hash_body, io, lines};

/// The most bytes one call reads.
const READ_MAX: u64 = 8 << 20;

/// A record as read back: its place in the chain and its content.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    pub seq: u64,
    pub hash: String,
    pub prev: String,
    pub kind: String,
    pub run_id: Option<String>,
    /// The writer's clock (RFC 3339).
    pub at: String,
    pub data: serde_json::Value,
    /// The byte offset just past this record (its newline).
    pub end: u64,
}

impl Journal {
    /// The complete records from byte `from` (the start of a record) on, at
    /// most `max` of them, each checked against its own hash (the chain is
    /// the verifier's business: a record that does not match its hash
    /// ends the read, so nothing damaged is ever handed on).
    pub(crate) fn records_with_hash_from(
        &self,
        from: u64,
        max: usize,
    ) -> Result<Vec<Published>, JournalError> {
        let mut f = match crate::state_file::open_read(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.path)(e)),
        };
        let len = f.metadata().map_err(io(&self.path))?.len();
        if from >= len {
            return Ok(Vec::new());
        }
        f.seek(SeekFrom::Start(from)).map_err(io(&self.path))?;
        let mut buf = Vec::new();
        f.take(READ_MAX)
            .read_to_end(&mut buf)
            .map_err(io(&self.path))?;
        let mut out = Vec::new();
        for (s, e, nl) in lines(&buf) {
            if !nl || out.len() >= max {
                break;
            }
            let Some((hash, body)) = parse_checked(&buf[s..e]) else {
                tracing::warn!(
                    offset = from + s as u64,
                    "journal record does not check out; not read further"
                );
                break;
            };
            out.push(Published {
                seq: body.seq,
                hash,
                prev: body.prev,
                kind: body.kind,
                run_id: body.run_id,
                at: body.at,
                data: body.data,
                end: from + e as u64 + 1,
            });
        }
        // A record longer than what was read this time: read it alone.
        if out.is_empty() && buf.len() as u64 == READ_MAX && len > from + READ_MAX {
            tracing::warn!(offset = from, "journal record larger than one read");
        }
        Ok(out)
    }

    /// The byte offset just past record `seq` (by a scan; 0 for `None`:
    /// before the first record). `None` when the journal has no such record.
    pub(crate) fn offset_after(&self, seq: Option<u64>) -> Result<Option<u64>, JournalError> {
        let Some(seq) = seq else { return Ok(Some(0)) };
        let buf = match crate::state_file::read_capped(&self.path, u64::MAX) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&self.path)(e)),
        };
        for (n, (_, e, nl)) in lines(&buf).enumerate() {
            if !nl {
                break;
            }
            if n as u64 == seq {
                return Ok(Some(e as u64 + 1));
            }
        }
        Ok(None)
    }

    /// Every complete record's sequence number and hash, in order (stops at
    /// the first line that does not check out against its own hash).
    pub(crate) fn hashes(&self) -> Result<Vec<(u64, String)>, JournalError> {
        let buf = match crate::state_file::read_capped(&self.path, u64::MAX) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.path)(e)),
        };
        let mut out = Vec::new();
        for (s, e, nl) in lines(&buf) {
            if !nl {
                break;
            }
            match parse_checked(&buf[s..e]) {
                Some((hash, body)) => out.push((body.seq, hash)),
                None => break,
            }
        }
        Ok(out)
    }

    /// The head after each group commit this process makes from now on
    /// (nobody listening costs nothing; a slow listener skips).
    pub(crate) fn subscribe_commits(&self) -> tokio::sync::broadcast::Receiver<Appended> {
        self.commits.subscribe()
    }

    pub(super) fn committed(&self, head: &Head) {
        let _ = self.commits.send(Appended {
            seq: head.seq,
            hash: head.hash.clone(),
        });
    }
}

/// A line's hash and body, if the hash is the body's.
fn parse_checked(line: &[u8]) -> Option<(String, Body)> {
    let parsed: Line = serde_json::from_slice(line).ok()?;
    if hash_body(parsed.body.get().as_bytes()) != parsed.hash {
        return None;
    }
    let body: Body = serde_json::from_str(parsed.body.get()).ok()?;
    Some((parsed.hash, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Entry;

    #[test]
    fn records_come_back_with_their_hashes_and_ends() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::new(d.path());
        let mut commits = j.subscribe_commits();
        let mut appended = Vec::new();
        for i in 0..3 {
            appended.push(
                j.append(&Entry {
                    kind: "test".into(),
                    run_id: Some(format!("r{i}")),
                    actor: None,
                    data: serde_json::json!(i),
                })
                .unwrap(),
            );
        }
        let all = j.records_with_hash_from(0, 10).unwrap();
        assert_eq!(all.len(), 3);
        for (r, a) in all.iter().zip(&appended) {
            assert_eq!((r.seq, &r.hash), (a.seq, &a.hash));
        }
        assert_eq!(all[1].prev, all[0].hash);
        let rest = j.records_with_hash_from(all[0].end, 10).unwrap();
        assert_eq!(rest.len(), 2);
        assert_eq!(j.offset_after(Some(0)).unwrap(), Some(all[0].end));
        assert_eq!(j.offset_after(Some(7)).unwrap(), None);
        assert_eq!(j.hashes().unwrap().len(), 3);
        assert_eq!(commits.try_recv().unwrap().seq, 0);
    }
}
