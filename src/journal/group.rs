//! Group commit: appends that arrive while another is being written wait
//! in a queue; the next writer (the leader) takes the whole queue, chains
//! the records in arrival order, writes them with one `write(2)`, makes
//! them durable with one `fdatasync` and updates the anchor once. Every
//! appender returns only after the `fdatasync` that covers its record has
//! succeeded, so nothing is acknowledged before it is durable; if the write
//! or the sync fails, every record of the batch gets the error (and none
//! is counted as appended: the next append's tail check cuts a partial
//! write away as a torn record).

use super::faults::{fault_injection_fail, fault_injection_torn_write};
use super::{Appended, Body, Entry, FORMAT_VERSION, Journal, JournalError, MAX_RECORD_BYTES};
use super::{Head, hash_body, io};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Condvar, Mutex};

#[derive(Default)]
pub(super) struct GroupCommit {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    queue: Vec<(u64, Entry)>,
    finished: HashMap<u64, Result<Appended, JournalError>>,
    writing: bool,
}

impl GroupCommit {
    pub(super) fn append(
        &self,
        journal: &Journal,
        entry: &Entry,
    ) -> Result<Appended, JournalError> {
        let ticket = self.enqueue(entry);
        self.wait(journal, ticket)
    }

    /// Take `entry`'s place in the chain now (it is written after every
    /// entry enqueued before it and before every later one); durable only
    /// once [`GroupCommit::wait`] for its ticket returns `Ok`.
    pub(super) fn enqueue(&self, entry: &Entry) -> u64 {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push((ticket, entry.clone()));
        ticket
    }

    /// Until the entry of `ticket` is on disk (or failed): leads a batch
    /// when nobody is writing.
    pub(super) fn wait(&self, journal: &Journal, ticket: u64) -> Result<Appended, JournalError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = st.finished.remove(&ticket) {
                return r;
            }
            if st.writing {
                st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // Lead: write everything queued so far, ours included.
            st.writing = true;
            let batch = std::mem::take(&mut st.queue);
            drop(st);
            let results = write_batch(journal, &batch);
            st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.writing = false;
            st.finished.extend(results);
            self.done.notify_all();
        }
    }
}

/// Append `batch` (in order) with one write and one `fdatasync`.
fn write_batch(j: &Journal, batch: &[(u64, Entry)]) -> Vec<(u64, Result<Appended, JournalError>)> {
    match write_locked(j, batch) {
        Ok(v) => v,
        Err(e) => {
            let msg = e.to_string();
            let mut first = Some(e);
            batch
                .iter()
                .map(|(t, _)| {
                    let e = first.take().unwrap_or_else(|| JournalError::Io {
                        path: j.path.clone(),
                        source: std::io::Error::other(msg.clone()),
                    });
                    (*t, Err(e))
                })
                .collect()
        }
    }
}

type BatchResult = Vec<(u64, Result<Appended, JournalError>)>;

fn write_locked(j: &Journal, batch: &[(u64, Entry)]) -> Result<BatchResult, JournalError> {
    let f = crate::state_file::open(
        &j.path,
        OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600),
    )
    .map_err(io(&j.path))?;
    // Other processes (a local CLI on the same state directory) append too.
    let mut locked =
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| {
            JournalError::Io {
                path: j.path.clone(),
                source: e.into(),
            }
        })?;
    let f: &mut File = &mut locked;
    let tail = j.find_tail(f)?;
    let (mut seq, mut prev, mut end) = (tail.next_seq, tail.prev, tail.end);
    let mut out = Vec::with_capacity(batch.len());
    let mut buf = Vec::new();
    let mut last: Option<Head> = None;
    for (ticket, entry) in batch {
        let body = Body {
            v: FORMAT_VERSION,
            seq,
            prev: prev.clone(),
            at: humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
            kind: entry.kind.clone(),
            run_id: entry.run_id.clone(),
            actor: entry.actor.clone(),
            data: entry.data.clone(),
        };
        let body_bytes = serde_json::to_vec(&body).expect("records serialize");
        let hash = hash_body(&body_bytes);
        let mut line = Vec::with_capacity(body_bytes.len() + 90);
        line.extend_from_slice(b"{\"hash\":\"");
        line.extend_from_slice(hash.as_bytes());
        line.extend_from_slice(b"\",\"body\":");
        line.extend_from_slice(&body_bytes);
        line.extend_from_slice(b"}\n");
        if line.len() > MAX_RECORD_BYTES {
            // Only this record is refused; the chain goes on without it.
            out.push((*ticket, Err(JournalError::TooLarge(line.len()))));
            continue;
        }
        last = Some(Head {
            seq,
            hash: hash.clone(),
            start: end,
            end: end + line.len() as u64,
        });
        end += line.len() as u64;
        buf.extend_from_slice(&line);
        out.push((
            *ticket,
            Ok(Appended {
                seq,
                hash: hash.clone(),
            }),
        ));
        seq += 1;
        prev = hash;
    }
    let Some(head) = last else {
        return Ok(out);
    };
    fault_injection_fail(batch).map_err(io(&j.path))?;
    fault_injection_torn_write(f, &buf);
    f.write_all(&buf).map_err(io(&j.path))?;
    f.sync_data().map_err(io(&j.path))?;
    j.write_head(&head)?;
    j.committed(&head);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_appends_all_land_once_in_one_valid_chain() {
        let dir = tempfile::tempdir().unwrap();
        let j = std::sync::Arc::new(Journal::new(dir.path()));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let j = j.clone();
                std::thread::spawn(move || {
                    (0..25)
                        .map(|i| {
                            j.append(&Entry {
                                kind: "test".into(),
                                run_id: Some(format!("r{t}-{i}")),
                                actor: None,
                                data: serde_json::json!({"t": t, "i": i}),
                            })
                            .unwrap()
                            .seq
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seqs: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        seqs.sort();
        assert_eq!(
            seqs,
            (0..200).collect::<Vec<_>>(),
            "each record once, no gap"
        );
        let report = j.verify().unwrap();
        assert!(report.ok, "{report:?}");
        assert_eq!(report.records, 200);
        let bodies = j.read_all().unwrap();
        let mut ids: Vec<_> = bodies.iter().filter_map(|b| b.run_id.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 200);
    }

    /// Start-up recovery after a restart of the machine reads the records
    /// from a byte offset on (`Journal::records_from`).
    #[test]
    fn records_are_read_from_an_offset_on_whole() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        let e = |i: u64| Entry {
            kind: "test".into(),
            run_id: Some(format!("r{i}")),
            actor: None,
            data: serde_json::json!(i),
        };
        j.append(&e(0)).unwrap();
        let from = j.len().unwrap();
        j.append(&e(1)).unwrap();
        j.append(&e(2)).unwrap();
        let ids = |from| -> Vec<String> {
            j.records_from(from)
                .unwrap()
                .into_iter()
                .filter_map(|b| b.run_id)
                .collect()
        };
        assert_eq!(ids(0), ["r0", "r1", "r2"]);
        assert_eq!(ids(from), ["r1", "r2"]);
        // Inside a record: from the next one on.
        assert_eq!(ids(from + 3), ["r2"]);
        assert!(ids(j.len().unwrap()).is_empty());
        assert!(ids(j.len().unwrap() + 100).is_empty());
        // A torn last line is no record.
        let mut f = OpenOptions::new().append(true).open(&j.path).unwrap();
        f.write_all(b"{\"hash\":\"ab").unwrap();
        assert_eq!(ids(from), ["r1", "r2"]);
    }

    #[test]
    fn a_too_large_record_is_refused_alone() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        let big = Entry {
            kind: "test".into(),
            run_id: None,
            actor: None,
            data: serde_json::json!("x".repeat(MAX_RECORD_BYTES)),
        };
        let small = Entry {
            data: serde_json::json!(1),
            ..big.clone()
        };
        let out = write_batch(&j, &[(0, small.clone()), (1, big), (2, small)]);
        assert!(out[0].1.is_ok() && out[2].1.is_ok());
        assert!(matches!(out[1].1, Err(JournalError::TooLarge(_))));
        assert_eq!(out[2].1.as_ref().unwrap().seq, 1);
        assert!(j.verify().unwrap().ok);
    }
}
