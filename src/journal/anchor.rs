//! The journal's anchor, `journal.head`: the last record written, its hash
//! and its byte range (docs/journal-format.md, "The anchor").

use std::fs::File;
use std::io::Write;

use serde::{Deserialize, Serialize};

use super::{HEAD_FILE, Journal, JournalError, io};

/// The anchor: where the last acknowledged record ends.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct Head {
    pub(super) seq: u64,
    pub(super) hash: String,
    pub(super) start: u64,
    pub(super) end: u64,
}

/// The anchor file's fixed size: one JSON object padded with spaces.
const HEAD_BYTES: usize = 256;

/// The anchor as stored. `check` is BLAKE3 over the other fields and comes
/// first, so that a torn overwrite (the first bytes of a new anchor over
/// the rest of the old one) either fails to parse or fails its check:
/// it can never read as an anchor with fields of both. Anchors written
/// before the check existed have none and are taken as they are.
#[derive(Serialize, Deserialize)]
struct StoredHead {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    check: Option<String>,
    #[serde(flatten)]
    head: Head,
}

impl Head {
    fn check(&self) -> String {
        let fields = format!("{}\n{}\n{}\n{}", self.seq, self.hash, self.start, self.end);
        blake3::hash(fields.as_bytes()).to_hex().to_string()
    }

    /// The anchor's bytes: exactly `HEAD_BYTES`, ending in a newline.
    fn to_stored_bytes(&self) -> Vec<u8> {
        let stored = StoredHead {
            check: Some(self.check()),
            head: self.clone(),
        };
        let mut buf = serde_json::to_vec(&stored).expect("serializes");
        assert!(buf.len() < HEAD_BYTES, "an anchor is at most ~230 bytes");
        buf.resize(HEAD_BYTES - 1, b' ');
        buf.push(b'\n');
        buf
    }

    fn from_stored_bytes(bytes: &[u8]) -> Option<Head> {
        let stored: StoredHead = serde_json::from_slice(bytes).ok()?;
        match &stored.check {
            Some(c) if *c != stored.head.check() => None,
            _ => Some(stored.head),
        }
    }
}

impl Journal {
    pub(super) fn read_head(&self) -> Option<Head> {
        let text = std::fs::read(&self.head_path).ok()?;
        Head::from_stored_bytes(&text)
    }

    /// Replace the anchor. Not fsync'd: it is written after the records it
    /// names are durable, so after a crash it is either this one or an
    /// older one (whose later records `find_tail` adopts by a scan), or
    /// unreadable (torn, or lost by the file system): the whole chain is
    /// then scanned and the anchor rebuilt.
    ///
    /// Overwritten in place, one `pwrite` of a fixed size: no new file (and
    /// no freed one) per append. A file of any other size (none yet, or
    /// one from a version without the check) is replaced whole, by rename.
    pub(super) fn write_head(&self, head: &Head) -> Result<(), JournalError> {
        use std::os::unix::fs::FileExt;
        let bytes = head.to_stored_bytes();
        let in_place = File::options()
            .write(true)
            .open(&self.head_path)
            .ok()
            .filter(|f| {
                f.metadata()
                    .is_ok_and(|m| m.is_file() && m.len() == HEAD_BYTES as u64)
            });
        if let Some(f) = in_place {
            return f.write_all_at(&bytes, 0).map_err(io(&self.head_path));
        }
        let tmp = self.dir.join(format!("{HEAD_FILE}.partial"));
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&bytes).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &self.head_path).map_err(io(&self.head_path))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::super::{Entry, HEAD_FILE, Journal};
    use super::{HEAD_BYTES, Head};

    fn append(j: &Journal, i: u64) -> u64 {
        j.append(&Entry {
            kind: "verdict".into(),
            run_id: Some(format!("r{i}")),
            actor: None,
            data: serde_json::json!({ "i": i }),
        })
        .unwrap()
        .seq
    }

    #[test]
    fn the_anchor_is_overwritten_in_place_at_a_fixed_size() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::new(d.path());
        append(&j, 0);
        let path = d.path().join(HEAD_FILE);
        let ino = std::fs::metadata(&path).unwrap().ino();
        for i in 1..5 {
            assert_eq!(append(&j, i), i);
            let m = std::fs::metadata(&path).unwrap();
            assert_eq!((m.ino(), m.len()), (ino, HEAD_BYTES as u64));
        }
        assert!(j.verify().unwrap().anchor.contains("record 4 agrees"));
        assert!(!d.path().join(format!("{HEAD_FILE}.partial")).exists());
    }

    /// Every way the first bytes of a new anchor can land over an old one
    /// reads as the old anchor, the new one, or none (then the chain is
    /// scanned): never as a mix of both.
    #[test]
    fn a_torn_anchor_never_reads_as_a_mix_of_two() {
        let old = Head {
            seq: 9,
            hash: "a".repeat(64),
            start: 1200,
            end: 1350,
        };
        let new = Head {
            seq: 10,
            hash: "b".repeat(64),
            start: 1350,
            end: 1500,
        };
        let (o, n) = (old.to_stored_bytes(), new.to_stored_bytes());
        let mut seen = (0, 0, 0);
        for k in 0..=HEAD_BYTES {
            let mixed = [&n[..k], &o[k..]].concat();
            match Head::from_stored_bytes(&mixed) {
                None => seen.0 += 1,
                Some(h) if h == old => seen.1 += 1,
                Some(h) if h == new => seen.2 += 1,
                Some(h) => panic!("torn at {k}: read as {h:?}"),
            }
        }
        assert!(seen.0 > 0 && seen.1 > 0 && seen.2 > 0, "{seen:?}");
    }

    #[test]
    fn a_torn_anchor_on_disk_is_rebuilt_by_a_scan_and_an_old_one_still_reads() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::new(d.path());
        for i in 0..3 {
            append(&j, i);
        }
        let path = d.path().join(HEAD_FILE);
        // Torn: half of a different anchor over the real one.
        let mut bytes = std::fs::read(&path).unwrap();
        let other = Head {
            seq: 1,
            hash: "c".repeat(64),
            start: 0,
            end: 1,
        }
        .to_stored_bytes();
        bytes[..100].copy_from_slice(&other[..100]);
        std::fs::write(&path, &bytes).unwrap();
        assert!(j.read_head().is_none());
        assert_eq!(append(&j, 3), 3);
        assert!(j.verify().unwrap().anchor.contains("record 3 agrees"));
        // An anchor without a check (written by an earlier version) is read
        // as it is, and the next append moves to the fixed-size form.
        let h = j.read_head().unwrap();
        let plain =
            serde_json::json!({"seq": h.seq, "hash": h.hash, "start": h.start, "end": h.end});
        std::fs::write(&path, serde_json::to_vec(&plain).unwrap()).unwrap();
        assert_eq!(j.read_head(), Some(h));
        assert_eq!(append(&j, 4), 4);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), HEAD_BYTES as u64);
        assert!(j.verify().unwrap().ok);
    }
}
