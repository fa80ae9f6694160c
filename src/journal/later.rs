//! An append whose place in the chain is taken now and whose `fdatasync`
//! runs on a thread of its own, so that a run's sandbox is built while its
//! submission reaches the disk. What depends on the entry being durable
//! waits for it: the command inside the sandbox is released only once
//! [`Durable`] says the entry is on disk (the egress proxy hands the
//! sandbox that word, see `egress/handover.rs`), and nothing about the run is
//! answered or journaled after it before [`Durable::wait`] returns.

use std::sync::{Arc, Condvar, Mutex};

use super::{Appended, Entry, Journal, JournalError};

/// The durability of one entry appended with [`Journal::append_later`].
#[derive(Clone)]
pub(crate) struct Durable {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` until the entry's batch was written and synced (or failed).
    result: Mutex<Option<Result<Appended, String>>>,
    done: Condvar,
    /// The same outcome for async waiters: `Some(true)` durable.
    released: tokio::sync::watch::Sender<Option<bool>>,
}

impl Durable {
    fn pending() -> Durable {
        Durable {
            inner: Arc::new(Inner {
                result: Mutex::new(None),
                done: Condvar::new(),
                released: tokio::sync::watch::Sender::new(None),
            }),
        }
    }

    /// An entry that is already on disk (or a run with nothing to wait
    /// for).
    pub(crate) fn settled(appended: Appended) -> Durable {
        let d = Durable::pending();
        d.settle(Ok(appended));
        d
    }

    fn settle(&self, r: Result<Appended, String>) {
        let ok = r.is_ok();
        *self.inner.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.inner.done.notify_all();
        self.inner.released.send_replace(Some(ok));
    }

    /// Until the entry is on disk: its place, or why it is not there.
    pub(crate) fn wait(&self) -> Result<Appended, JournalError> {
        let mut r = self.inner.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = r.as_ref() {
                return r.clone().map_err(JournalError::Later);
            }
            r = self.inner.done.wait(r).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// For an async waiter: becomes `Some(true)` once the entry is on
    /// disk, `Some(false)` if it never will be.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<bool>> {
        self.inner.released.subscribe()
    }
}

impl Journal {
    /// [`Journal::append`], returning at once: the entry's place in the
    /// chain is fixed before this returns (entries appended later by any
    /// thread of this process follow it); it is written and synced on a
    /// thread, and [`Durable::wait`] tells when it is on disk. A thread
    /// that cannot start falls back to appending here.
    pub(crate) fn append_later(self: &Arc<Self>, entry: &Entry) -> Durable {
        let ticket = self.group.enqueue(entry);
        let durable = Durable::pending();
        let (journal, d) = (self.clone(), durable.clone());
        let started = std::thread::Builder::new()
            .name("dryrun-journal".into())
            .spawn(move || {
                let r = journal.group.wait(&journal, ticket);
                d.settle(r.map_err(|e| e.to_string()));
            });
        if started.is_err() {
            let r = self.group.wait(self, ticket);
            durable.settle(r.map_err(|e| e.to_string()));
        }
        durable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Actor;

    fn entry(n: u32) -> Entry {
        Entry {
            kind: "test".into(),
            run_id: Some(format!("r{n}")),
            actor: Some(Actor::system()),
            data: serde_json::json!({ "n": n }),
        }
    }

    #[test]
    fn a_later_append_keeps_its_place_before_appends_made_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let j = Arc::new(Journal::new(dir.path()));
        let first = j.append_later(&entry(1));
        let second = j.append(&entry(2)).unwrap();
        let mut rx = first.subscribe();
        let first = first.wait().unwrap();
        assert!(first.seq < second.seq, "{} then {}", first.seq, second.seq);
        assert_eq!(*rx.borrow_and_update(), Some(true));
    }

    #[test]
    fn a_failed_write_is_told_to_every_waiter() {
        let dir = tempfile::tempdir().unwrap();
        // The journal's path is a directory: opening it for append fails.
        std::fs::create_dir(dir.path().join(crate::journal::JOURNAL_FILE)).unwrap();
        let j = Arc::new(Journal::new(dir.path()));
        let d = j.append_later(&entry(1));
        let mut rx = d.subscribe();
        assert!(d.wait().is_err());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let seen = rt.block_on(async { *rx.wait_for(|v| v.is_some()).await.unwrap() });
        assert_eq!(seen, Some(false));
    }
}
