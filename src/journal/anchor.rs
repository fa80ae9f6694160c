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
        // Only an anchor of another size can be from before the check: a
        // fixed-size one without it (its name edited) is damaged.
        if stored.check.is_none() && bytes.len() == HEAD_BYTES {
            return None;
        }
        match &stored.check {
            Some(c) if *c != stored.head.check() => None,
            _ => Some(stored.head),
        }
    }
}

/// What `journal.head` holds. Only a file that is not there (or holds no
/// byte at all: a first anchor whose data a file system lost in a crash)
/// is the soft case; an anchor that is there and does not check out is
/// tampering or corruption, never rebuilt over silently: rebuilding it
/// would hide records cut from the journal's end.
#[derive(Debug, PartialEq)]
pub(super) enum Anchor {
    Absent,
    Damaged(String),
    Present(Head),
}

impl Anchor {
    /// Why the anchor cannot be trusted, for an error that names it.
    pub(super) fn damage(&self) -> Option<&str> {
        match self {
            Anchor::Damaged(why) => Some(why),
            _ => None,
        }
    }
}

impl Journal {
    pub(super) fn read_head(&self) -> Anchor {
        use std::io::Read as _;
        // Never through a link, never waiting on a fifo, a regular file
        // only: anything else in its place is damage.
        let mut f = match crate::state_file::open_read(&self.head_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Anchor::Absent,
            Err(e) => return Anchor::Damaged(format!("it cannot be read ({e})")),
        };
        match f.metadata() {
            Ok(m) if m.len() > 4 * HEAD_BYTES as u64 => {
                return Anchor::Damaged(format!(
                    "it is {} bytes; an anchor is {HEAD_BYTES}",
                    m.len()
                ));
            }
            Ok(_) => {}
            Err(e) => return Anchor::Damaged(format!("it cannot be read ({e})")),
        }
        let mut text = Vec::with_capacity(HEAD_BYTES);
        if let Err(e) = f.read_to_end(&mut text) {
            return Anchor::Damaged(format!("it cannot be read ({e})"));
        }
        if text.is_empty() {
            return Anchor::Absent;
        }
        match Head::from_stored_bytes(&text) {
            Some(h) => Anchor::Present(h),
            None => Anchor::Damaged(
                "it does not parse as an anchor or fails its check: it was edited or corrupted"
                    .into(),
            ),
        }
    }

    /// Replace the anchor. Not fsync'd: it is written after the records it
    /// names are durable, so after a crash it is either this one or an
    /// older one (whose later records `find_tail` adopts by a scan). One
    /// write of 256 bytes at offset 0 lies in the file's first sector; only
    /// a power loss while writeback copies the page can tear it, and a torn
    /// anchor fails its check and is reported as damaged (the operator
    /// moves it aside; docs/journal-format.md), never rebuilt silently.
    ///
    /// Overwritten in place, one `pwrite` of a fixed size: no new file (and
    /// no freed one) per append. A file of any other size (none yet, or
    /// one from a version without the check) is replaced whole, by rename.
    pub(super) fn write_head(&self, head: &Head) -> Result<(), JournalError> {
        use std::os::unix::fs::FileExt;
        let bytes = head.to_stored_bytes();
        let in_place = crate::state_file::open(&self.head_path, File::options().write(true))
            .ok()
            .filter(|f| f.metadata().is_ok_and(|m| m.len() == HEAD_BYTES as u64));
        if let Some(f) = in_place {
            return f.write_all_at(&bytes, 0).map_err(io(&self.head_path));
        }
        let tmp = self.dir.join(format!("{HEAD_FILE}.partial"));
        let mut f = crate::state_file::open(
            &tmp,
            File::options().write(true).create(true).truncate(true),
        )
        .map_err(io(&tmp))?;
        f.write_all(&bytes).map_err(io(&tmp))?;
        // Once per journal: synced before it takes the anchor's name, so
        // that a crash leaves no anchor, the old one or this one, never a
        // file whose data was lost (which would read as damaged).
        f.sync_data().map_err(io(&tmp))?;
        std::fs::rename(&tmp, &self.head_path).map_err(io(&self.head_path))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::super::{Entry, HEAD_FILE, Journal};
    use super::{Anchor, HEAD_BYTES, Head};

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
    fn a_damaged_anchor_is_refused_and_only_an_absent_one_is_rebuilt() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::new(d.path());
        for i in 0..3 {
            append(&j, i);
        }
        let path = d.path().join(HEAD_FILE);
        let good = std::fs::read(&path).unwrap();
        // Torn or edited: half of a different anchor over the real one,
        // or one byte flipped. Neither is rebuilt over, by an append or a
        // verification: both are refused, naming the anchor.
        let other = Head {
            seq: 1,
            hash: "c".repeat(64),
            start: 0,
            end: 1,
        }
        .to_stored_bytes();
        let mut torn = good.clone();
        torn[..100].copy_from_slice(&other[..100]);
        let mut flipped = good.clone();
        flipped[40] ^= 1;
        for bad in [torn, flipped] {
            std::fs::write(&path, &bad).unwrap();
            assert!(j.read_head().damage().is_some());
            let e = j.append(&Entry {
                kind: "verdict".into(),
                run_id: None,
                actor: None,
                data: serde_json::json!({}),
            });
            assert!(
                e.as_ref()
                    .is_err_and(|e| e.to_string().contains("journal.head")),
                "{e:?}"
            );
            let rep = j.verify().unwrap();
            assert!(!rep.ok && rep.anchor_damaged, "{rep:?}");
            assert_eq!(std::fs::read(&path).unwrap(), bad, "left as evidence");
        }
        // Moved aside (absent), or empty: rebuilt by a scan.
        std::fs::write(&path, b"").unwrap();
        assert!(j.verify().unwrap().ok);
        assert_eq!(append(&j, 3), 3);
        assert!(j.verify().unwrap().anchor.contains("record 3 agrees"));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(append(&j, 4), 4);
        assert!(j.verify().unwrap().anchor.contains("record 4 agrees"));
        // An anchor without a check (written by an earlier version) is read
        // as it is, and the next append moves to the fixed-size form.
        let Anchor::Present(h) = j.read_head() else {
            panic!("anchor")
        };
        let plain =
            serde_json::json!({"seq": h.seq, "hash": h.hash, "start": h.start, "end": h.end});
        std::fs::write(&path, serde_json::to_vec(&plain).unwrap()).unwrap();
        assert_eq!(j.read_head(), Anchor::Present(h));
        assert_eq!(append(&j, 5), 5);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), HEAD_BYTES as u64);
        assert!(j.verify().unwrap().ok);
    }
}
