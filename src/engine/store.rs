//! The run store: `runs/<run_id>/` (record, envelope, kept content),
//! records saved atomically and capped in size, per-uid usage and quota,
//! retention (housekeeping).
//!
//! ```text
//! runs/<run_id>/record.json     the run record (replaced atomically, see `replace_record`)
//! runs/<run_id>/record.json.partial  its spare: the version before
//! runs/<run_id>/envelope.json   the validated envelope (live lane, replay)
//! runs/<run_id>/blobs/<hash>    content of created/modified files (+ small "before" files)
//! ```
//!
//! # Which writes are synced, and why (the rules, in one place)
//!
//! A process killed at any point loses nothing it wrote: the kernel's page
//! cache outlives it. Only a stop of the machine (power loss, kernel
//! crash) loses writes that were not synced, and the machine's next boot
//! has a new boot id, by which start-up recovery knows to look for them
//! (`recover.rs`). So:
//!
//! - **Synced** (`fdatasync`, then the directory): what cannot be rebuilt
//!   and is relied on once acknowledged: every journal record, before the
//!   request it belongs to is answered (`journal/`, group commit); a run's
//!   final record and its envelope, before the run's outcome is returned
//!   ([`Engine::save_with`]; approval and promotion read them); reviewer
//!   decisions in `txn/` and promotions' plans and receipts.
//! - **Not synced**: a run's first record ([`Engine::save_first`]), its
//!   `queued` -> `running` change ([`Engine::save_relaxed`]), its in-flight
//!   marker, and the journal's anchor. Each is either superseded by a
//!   synced write before anything depends on it, or rebuilt after a
//!   restart of the machine: a run whose `run_submitted` record is in the
//!   journal but whose record is missing, cut short or still in flight is
//!   marked `failed` with the reason, and that is journaled.
//!
//! docs/design.md ("What survives a crash, step by step") walks a run
//! through these points.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::run_id::valid_run_id;
use super::{Engine, EngineError, RECORD_MAX_BYTES, What};
use crate::record::{RunRecord, RunState};
use crate::verdict::Decision;

/// The default state directory: `/var/lib/dryrun` for root, else
/// `$XDG_STATE_HOME/dryrun` (or `~/.local/state/dryrun`).
pub fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/dryrun");
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("dryrun");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/dryrun")
}

pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.partial");
    let mut f = open_for_writing(&tmp, true)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// A record and files of its directory read only through it (the
/// envelope, read once the run is settled) are saved in two halves:
/// [`stage_record_with`] writes those in place (never through a link) and
/// the record as the spare ([`replace_record`]), each `fdatasync`ed, then
/// [`install_record`] puts the record in place and syncs the directory
/// once. Whoever reads the new record finds them whole.
///
/// This first half changes nothing a reader goes by.
pub(super) fn stage_record_with(
    dir: &Path,
    record: &[u8],
    others: &[(&str, &[u8])],
) -> std::io::Result<()> {
    use std::io::Write;
    for (name, bytes) in others {
        let mut f = open_for_writing(&dir.join(name), true)?;
        f.write_all(bytes)?;
        f.sync_data()?;
    }
    stage_spare(dir, record, true)
}

/// The second half: the staged record put in place, the directory synced.
pub(super) fn install_record(dir: &Path) -> std::io::Result<()> {
    exchange_spare(dir)?;
    std::fs::File::open(dir)?.sync_all()
}

/// The record's spare: the version before the current one, rewritten in
/// place by the next change.
const SPARE: &str = "record.json.partial";

/// Put `bytes` in place as `dir/record.json`, whole or not at all, without
/// allocating or freeing an inode once the run has a spare: the bytes go
/// into `record.json.partial` (the spare, which holds an older version of
/// the record, or a new file the first time), `fdatasync`ed when `sync`,
/// and `renameat2(RENAME_EXCHANGE)` swaps the two names, so the spare then
/// holds the version just replaced. A rename over the old record would
/// free its inode each time, and on a file system without a journal every
/// inode freed in the last minutes slows each later file creation (ext4's
/// `recently_deleted` check). Where the exchange is refused (no record yet,
/// or a file system without it), a plain rename.
///
/// A reader that opened the record two versions ago may find its file
/// being rewritten under it: [`read_record`] reads again.
fn replace_record(dir: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    stage_spare(dir, bytes, sync)?;
    exchange_spare(dir)
}

/// `bytes` into the spare, `fdatasync`ed when `sync`.
fn stage_spare(dir: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = open_for_writing(&dir.join(SPARE), true)?;
    f.write_all(bytes)?;
    if sync {
        f.sync_data()?;
    }
    Ok(())
}

/// The spare and the record swap names (a plain rename where the exchange
/// is refused).
fn exchange_spare(dir: &Path) -> std::io::Result<()> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    let spare = dir.join(SPARE);
    let path = dir.join("record.json");
    match renameat2(
        AT_FDCWD,
        &spare,
        AT_FDCWD,
        &path,
        RenameFlags::RENAME_EXCHANGE,
    ) {
        Ok(()) => Ok(()),
        Err(_) => std::fs::rename(&spare, &path),
    }
}

/// A file of the state directory opened for writing (created if missing,
/// emptied when `truncate`), as [`crate::state_file`] opens every one:
/// never through a link, never blocking on a fifo put in its place, and
/// only a regular file.
fn open_for_writing(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    crate::state_file::open(
        path,
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(truncate),
    )
}

/// A run's record, parsed. A record read while its file was being
/// rewritten as the spare (see [`replace_record`]) fails to parse: it is
/// read once more, by name, and only a second failure is an error.
fn read_record(path: &Path) -> Result<Option<RunRecord>, EngineError> {
    let mut last = None;
    for _ in 0..2 {
        let text = match crate::state_file::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(EngineError::storage(path, source)),
        };
        match serde_json::from_slice(&text) {
            Ok(r) => return Ok(Some(r)),
            Err(e) => last = Some(e),
        }
    }
    Err(EngineError::corrupt(
        path.to_path_buf(),
        last.expect("two failed parses"),
    ))
}

/// Whether taking a run's lock waits for its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    Block,
    /// Recovery: a held lock means a live process is working on the run.
    NotIfHeld,
}

/// A run's transition lock: an exclusive `flock` on `runs/<id>/lock`.
///
/// One lock per run, so a slow or stalled promotion of one run (its
/// workspace agent runs as the agent's user, who may stop it) never holds
/// up another run's review. `flock` belongs to the open file, so it
/// excludes other threads of this process (each opens its own) as well as
/// other processes on the same state directory (in-process engines of
/// concurrent `dryrun` commands), and the kernel releases it when its
/// holder dies: start-up recovery settles a run's leftovers only when it
/// can take the lock, never under a live holder's feet.
pub(crate) struct RunGuard {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl RunGuard {
    /// `Ok(None)`: `wait` is [`Wait::NotIfHeld`] and another holds it.
    pub(super) fn acquire(
        run_dir: &Path,
        run_id: &str,
        wait: Wait,
    ) -> Result<Option<RunGuard>, EngineError> {
        if !valid_run_id(run_id) {
            return Err(EngineError::BadId {
                what: What::Run,
                id: run_id.to_string(),
            });
        }
        let path = run_dir.join("lock");
        let mut file = match open_for_writing(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(EngineError::not_found(What::Run, run_id));
            }
            Err(source) => return Err(EngineError::storage(path, source)),
        };
        let arg = match wait {
            Wait::Block => nix::fcntl::FlockArg::LockExclusive,
            Wait::NotIfHeld => nix::fcntl::FlockArg::LockExclusiveNonblock,
        };
        loop {
            match nix::fcntl::Flock::lock(file, arg) {
                Ok(lock) => return Ok(Some(RunGuard { _lock: lock })),
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
                // Interrupted by a signal: try again.
                Err((f, nix::errno::Errno::EINTR)) => file = f,
                Err((_, e)) => return Err(EngineError::storage(path, e.into())),
            }
        }
    }
}

impl Engine {
    pub(super) fn run_dir(&self, id: &str) -> PathBuf {
        self.state_dir.join("runs").join(id)
    }

    pub fn blob_path(&self, id: &str, hash: &str) -> PathBuf {
        self.run_dir(id).join("blobs").join(hash)
    }

    /// The run's first record, into its new directory: created in place
    /// (a listing that meets it half-written skips it, and recovery reads
    /// it only through its in-flight marker, made after) and not synced
    /// (the module's rules: the journal's `run_submitted` record, synced
    /// next, is what recovery goes by).
    pub(super) fn save_first(&self, record: &RunRecord) -> Result<(), EngineError> {
        use std::io::Write;
        let (_, path, bytes) = self.serialized(record)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&bytes))
            .map_err(|source| EngineError::storage(path, source))?;
        self.announce(record);
        Ok(())
    }

    /// Save without waiting for the disk (intermediate states only).
    pub(super) fn save_relaxed(&self, record: &RunRecord) -> Result<(), EngineError> {
        let (dir, path, bytes) = self.serialized(record)?;
        replace_record(&dir, &bytes, false).map_err(|source| EngineError::storage(path, source))?;
        self.announce(record);
        Ok(())
    }

    pub fn save(&self, record: &RunRecord) -> Result<(), EngineError> {
        self.save_with(record, &[])
    }

    /// [`Engine::save`], with files of the run's directory that are read
    /// only through the record written in the same go (one directory sync
    /// for all; see [`stage_record_with`]).
    pub(super) fn save_with(
        &self,
        record: &RunRecord,
        others: &[(&str, &[u8])],
    ) -> Result<(), EngineError> {
        let dir = self.run_dir(&record.run_id);
        std::fs::create_dir_all(&dir).map_err(|source| EngineError::storage(&dir, source))?;
        self.stage_with(record, others)?;
        self.install(record)
    }

    /// [`Engine::save_with`] in two halves, for a caller that syncs
    /// something else meanwhile: `stage` writes and syncs, and changes
    /// nothing a reader goes by; `install` puts the record in place.
    pub(super) fn stage_with(
        &self,
        record: &RunRecord,
        others: &[(&str, &[u8])],
    ) -> Result<(), EngineError> {
        let (dir, path, bytes) = self.serialized(record)?;
        stage_record_with(&dir, &bytes, others).map_err(|source| EngineError::storage(path, source))
    }

    /// The record as saved, with its run's directory and its path (refused
    /// when larger than a record may be).
    fn serialized(&self, record: &RunRecord) -> Result<(PathBuf, PathBuf, Vec<u8>), EngineError> {
        let dir = self.run_dir(&record.run_id);
        let path = dir.join("record.json");
        let bytes = serde_json::to_vec_pretty(record).expect("records serialize");
        if bytes.len() > RECORD_MAX_BYTES {
            return Err(record_too_large(path, bytes.len()));
        }
        Ok((dir, path, bytes))
    }

    /// The second half of [`Engine::stage_with`].
    pub(super) fn install(&self, record: &RunRecord) -> Result<(), EngineError> {
        let dir = self.run_dir(&record.run_id);
        install_record(&dir)
            .map_err(|source| EngineError::storage(dir.join("record.json"), source))?;
        self.announce(record);
        Ok(())
    }

    pub fn get(&self, id: &str) -> Result<RunRecord, EngineError> {
        if !valid_run_id(id) {
            return Err(EngineError::BadId {
                what: What::Run,
                id: id.into(),
            });
        }
        let path = self.run_dir(id).join("record.json");
        read_record(&path)?.ok_or_else(|| EngineError::not_found(What::Run, id))
    }

    /// All runs, newest first, optionally filtered by state.
    pub fn list(&self, state: Option<RunState>) -> Result<Vec<RunRecord>, EngineError> {
        let runs = self.state_dir.join("runs");
        let mut out = Vec::new();
        let rd = std::fs::read_dir(&runs).map_err(|source| EngineError::storage(&runs, source))?;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !valid_run_id(&name) {
                continue;
            }
            if let Ok(r) = self.get(&name)
                && state.is_none_or(|s| s == r.state)
            {
                out.push(r);
            }
        }
        out.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.run_id.cmp(&a.run_id))
        });
        Ok(out)
    }

    /// Housekeeping of `runs/`, by age of the run's last state change (its
    /// directory's modification time): past `blob_days`, a run's kept
    /// content goes; past `record_days`, the whole run (record, envelope,
    /// content) goes. Runs awaiting approval, approved, queued or running
    /// are kept whatever their age. Per-uid usage is counted again after.
    pub fn collect_garbage(&self) {
        let r = &self.opts.retention;
        let blob_age = Duration::from_secs(r.blob_days.saturating_mul(86_400));
        let record_age = Duration::from_secs(r.record_days.saturating_mul(86_400));
        if let Ok(rd) = std::fs::read_dir(self.state_dir.join("runs")) {
            for e in rd.flatten() {
                let dir = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if !valid_run_id(&name) {
                    continue;
                }
                // Only old runs are read at all, so this costs one stat per run.
                let Some(age) = std::fs::symlink_metadata(&dir)
                    .ok()
                    .filter(|m| m.is_dir())
                    .and_then(|m| m.modified().ok())
                    .map(|t| t.elapsed().unwrap_or_default())
                else {
                    continue;
                };
                if age < blob_age.min(record_age) {
                    continue;
                }
                let pending = self.get(&name).is_ok_and(|r| r.state.is_pending());
                if pending {
                    continue;
                }
                if age >= record_age {
                    let _ = std::fs::remove_dir_all(&dir);
                } else if age >= blob_age {
                    let _ = std::fs::remove_dir_all(dir.join("blobs"));
                }
            }
        }
        *self.usage.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if let Err(e) = self.gc(None, false) {
            tracing::warn!("fitting the state directory into its budget: {e}");
        }
    }

    /// Refuse a daemon client that keeps its quota's worth or more.
    pub(super) fn check_quota(&self, uid: u32) -> Result<(), EngineError> {
        let Some(quota) = self.opts.retention.quota_per_uid_bytes else {
            return Ok(());
        };
        let used = self.usage_of(uid);
        if used < quota {
            return Ok(());
        }
        let r = &self.opts.retention;
        Err(EngineError::QuotaExceeded {
            uid,
            used_bytes: used,
            quota_bytes: quota,
            blob_days: r.blob_days,
            record_days: r.record_days,
        })
    }

    /// Bytes `uid`'s runs keep under `runs/` (records, envelopes, kept
    /// content; apparent sizes). Counted once by a scan, then kept up to
    /// date as runs finish.
    pub fn usage_of(&self, uid: u32) -> u64 {
        let mut g = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert_with(|| self.scan_usage())
            .get(&uid)
            .copied()
            .unwrap_or(0)
    }

    fn scan_usage(&self) -> std::collections::HashMap<u32, u64> {
        let mut m = std::collections::HashMap::new();
        for e in std::fs::read_dir(self.state_dir.join("runs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = e.path();
            if let Some(uid) = run_owner(&dir) {
                *m.entry(uid).or_insert(0) += run_dir_bytes(&dir);
            }
        }
        m
    }

    /// Add a settled run's bytes to its submitter's usage.
    pub(super) fn count_usage(&self, r: &RunRecord) {
        let Some(uid) = r.submitted_by.as_ref().map(|a| a.uid) else {
            return;
        };
        let mut g = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = g.as_mut() {
            *m.entry(uid).or_insert(0) += run_dir_bytes(&self.run_dir(&r.run_id));
        }
    }
}

/// The submitter's uid of the run in `dir`, read without keeping the record.
fn run_owner(dir: &Path) -> Option<u32> {
    #[derive(Deserialize)]
    struct Submitter {
        uid: u32,
    }
    #[derive(Deserialize)]
    struct Owner {
        submitted_by: Option<Submitter>,
    }
    let f = crate::state_file::open_read(&dir.join("record.json")).ok()?;
    let f = std::io::Read::take(f, crate::state_file::READ_MAX);
    let o: Owner = serde_json::from_reader(std::io::BufReader::new(f)).ok()?;
    o.submitted_by.map(|s| s.uid)
}

/// Apparent size of a run directory's files and kept content (a sparse
/// blob counts at its full length).
fn run_dir_bytes(dir: &Path) -> u64 {
    let files = |d: &Path| -> u64 {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    };
    files(dir) + files(&dir.join("blobs"))
}

fn record_too_large(path: PathBuf, len: usize) -> EngineError {
    EngineError::storage(
        path,
        std::io::Error::other(format!(
            "the record would be {len} bytes, over the {RECORD_MAX_BYTES}-byte cap; not written"
        )),
    )
}

/// Hold a finished record under [`RECORD_MAX_BYTES`]: output, then long
/// lists, then the change list are cut until it fits. A record that had to
/// be cut names the `record` limit and is blocked: what was cut cannot be
/// reviewed, so the run is never promoted as is.
pub(super) fn fit_record(record: &mut RunRecord) {
    const OUTPUT_KEPT: usize = 64 << 10;
    const LIST_KEPT: usize = 1000;
    let size = |r: &RunRecord| serde_json::to_vec_pretty(r).map_or(usize::MAX, |b| b.len());
    let before = size(record);
    // Room for the notes added below.
    let cap = RECORD_MAX_BYTES - (16 << 10);
    if before <= cap {
        return;
    }
    fn cut_text(t: &mut String, max: usize) -> bool {
        if t.len() <= max {
            return false;
        }
        let mut end = max;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t.truncate(end);
        true
    }
    fn cut_list<T>(v: &mut Vec<T>, max: usize) {
        v.truncate(max);
    }
    if let Some(reh) = record.rehearsal.as_mut() {
        let a = cut_text(&mut reh.stdout, OUTPUT_KEPT);
        let b = cut_text(&mut reh.stderr, OUTPUT_KEPT);
        reh.output_truncated |= a || b;
    }
    if size(record) > cap {
        if let Some(v) = record.verdict.as_mut() {
            cut_list(&mut v.surprise_paths, LIST_KEPT);
            cut_list(&mut v.forbidden_paths_touched, LIST_KEPT);
            cut_list(&mut v.reasons, LIST_KEPT);
            cut_list(&mut v.findings, LIST_KEPT);
            cut_list(&mut v.notes, LIST_KEPT);
        }
        if let Some(reh) = record.rehearsal.as_mut() {
            cut_list(&mut reh.blocked, LIST_KEPT);
            cut_list(&mut reh.stripped, LIST_KEPT);
            cut_list(&mut reh.would_be_actions, LIST_KEPT);
            cut_list(&mut reh.incomplete, LIST_KEPT);
        }
    }
    while size(record) > cap {
        let Some(reh) = record.rehearsal.as_mut() else {
            break;
        };
        if reh.changes.is_empty() {
            break;
        }
        let keep = reh.changes.len() / 2;
        reh.changes.truncate(keep);
    }
    let message = format!(
        "the run record would have been {} MiB, over the {} MiB cap: output, long lists and the change list were cut, so this run cannot be reviewed in full or promoted",
        before.div_ceil(1 << 20),
        RECORD_MAX_BYTES >> 20
    );
    if let Some(reh) = record.rehearsal.as_mut() {
        reh.limits_hit.push(crate::model::LimitHit::Record);
        reh.limits_hit.sort();
        reh.limits_hit.dedup();
        reh.blocked.push(crate::model::Blocked {
            kind: crate::model::BlockedKind::Limit,
            detail: message.clone(),
        });
    }
    if let Some(v) = record.verdict.as_mut() {
        v.decision = Decision::Blocked;
        v.reasons.insert(0, format!("[limits.record] {message}"));
        v.findings.insert(
            0,
            crate::model::Finding {
                rule: "limits.record".into(),
                decision: Decision::Blocked,
                message,
            },
        );
        v.to_change = crate::model::advice::to_change(&v.findings);
        record.state = RunState::Rehearsed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run_id::new_run_id;
    use crate::engine::{EngineOptions, Retention};
    use crate::record::{Rehearsal, SCHEMA};
    use std::time::SystemTime;

    fn test_engine(dir: &Path, quota: Option<u64>) -> Engine {
        let opts = EngineOptions {
            retention: Retention {
                blob_days: 7,
                record_days: 30,
                quota_per_uid_bytes: quota,
                state_budget_bytes: None,
            },
            ..EngineOptions::default()
        };
        Engine::open(dir, opts).unwrap()
    }

    #[test]
    fn run_ids_made_one_after_another_sort_in_that_order() {
        let ids: Vec<String> = (0..200)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_micros(3));
                new_run_id()
            })
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
        assert!(ids.iter().all(|i| valid_run_id(i)), "{ids:?}");
    }

    /// A run directory as a finished run leaves it, last changed `days` ago.
    fn fake_run(e: &Engine, id: &str, state: &str, uid: u32, days: u64, blob: usize) {
        let dir = e.run_dir(id);
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        let record = serde_json::json!({
            "schema": SCHEMA, "run_id": id, "task": null, "command": "true",
            "workspace": "/nowhere", "created_at": "2020-01-01T00:00:00Z",
            "envelope_hash": "", "rehearsal": null, "verdict": null, "receipt": null,
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "state": state,
            "submitted_by": {"uid": uid, "gid": uid, "via": "daemon"},
        });
        std::fs::write(dir.join("record.json"), record.to_string()).unwrap();
        std::fs::write(dir.join("blobs").join("b"), vec![0u8; blob]).unwrap();
        let when = SystemTime::now() - Duration::from_secs(days * 86_400);
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    #[test]
    fn retention_removes_old_content_then_old_records_but_keeps_pending_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let e = test_engine(tmp.path(), None);
        fake_run(&e, "r1-0001", "rehearsed", 1000, 1, 10);
        fake_run(&e, "r1-0002", "rehearsed", 1000, 10, 10);
        fake_run(&e, "r1-0003", "promoted", 1000, 40, 10);
        fake_run(&e, "r1-0004", "failed", 1000, 40, 10);
        fake_run(&e, "r1-0005", "awaiting_approval", 1000, 400, 10);
        fake_run(&e, "r1-0006", "approved", 1000, 400, 10);
        fake_run(&e, "r1-0007", "rejected", 1000, 31, 10);
        e.collect_garbage();
        let has = |id: &str, sub: &str| e.run_dir(id).join(sub).exists();
        // Young: everything stays.
        assert!(has("r1-0001", "record.json") && has("r1-0001", "blobs"));
        // Past the content retention: content goes, the record stays.
        assert!(has("r1-0002", "record.json") && !has("r1-0002", "blobs"));
        // Past the record retention: the whole run goes.
        for id in ["r1-0003", "r1-0004", "r1-0007"] {
            assert!(!e.run_dir(id).exists(), "{id}");
        }
        // Waiting for a person, or approved: kept whatever their age.
        for id in ["r1-0005", "r1-0006"] {
            assert!(has(id, "record.json") && has(id, "blobs"), "{id}");
        }
        assert_eq!(e.list(None).unwrap().len(), 4);
    }

    #[test]
    fn a_uid_at_its_quota_is_refused_and_others_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let e = test_engine(tmp.path(), Some(1 << 20));
        fake_run(&e, "r1-0001", "rehearsed", 1000, 0, 600 << 10);
        fake_run(&e, "r1-0002", "rehearsed", 1000, 0, 600 << 10);
        fake_run(&e, "r1-0003", "rehearsed", 1001, 0, 10);
        // Apparent sizes: a sparse blob counts in full.
        let sparse = e.run_dir("r1-0003").join("blobs").join("sparse");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(900 << 20)
            .unwrap();
        assert!(e.usage_of(1000) >= 1200 << 10);
        assert!(e.usage_of(1001) >= 900 << 20);
        let err = e.check_quota(1000).unwrap_err();
        assert!(matches!(err, EngineError::QuotaExceeded { .. }));
        let msg = err.to_string();
        assert!(msg.contains("quota of 1 MiB"), "{msg}");
        assert!(msg.contains("30 days"), "{msg}");
        assert!(e.check_quota(1002).is_ok());
        // Housekeeping counts again: with the content gone, uid 1000 is
        // under its quota.
        std::fs::remove_dir_all(e.run_dir("r1-0001")).unwrap();
        e.collect_garbage();
        assert!(e.check_quota(1000).is_ok());
    }

    #[test]
    fn an_oversized_record_is_cut_blocked_and_never_written_whole() {
        let change = |i: usize| crate::model::Change {
            path: format!("{}/{i}", "d".repeat(2000)),
            ..serde_json::from_value(serde_json::json!({
                "path": "x", "kind": "created", "file_type": "file", "before": null, "after": null
            }))
            .unwrap()
        };
        let mut r: RunRecord = serde_json::from_value(serde_json::json!({
            "schema": SCHEMA, "run_id": "r1-0001", "task": null, "command": "true",
            "workspace": "/nowhere", "created_at": "2020-01-01T00:00:00Z",
            "envelope_hash": "", "verdict": null, "receipt": null,
            "intent": {"summary": "", "mode": "mutating", "expected_writes": [], "forbidden_paths": []},
            "state": "rehearsed", "rehearsal": null,
        }))
        .unwrap();
        r.rehearsal = Some(Rehearsal {
            stdout: "o".repeat(RECORD_MAX_BYTES),
            changes: (0..6_000).map(change).collect(),
            ..Default::default()
        });
        r.verdict = Some(crate::verdict::Verdict {
            decision: Decision::Promote,
            surprise_paths: Vec::new(),
            forbidden_paths_touched: Vec::new(),
            reasons: Vec::new(),
            findings: Vec::new(),
            notes: Vec::new(),
            to_change: Vec::new(),
        });
        assert!(serde_json::to_vec_pretty(&r).unwrap().len() > RECORD_MAX_BYTES);
        fit_record(&mut r);
        assert!(serde_json::to_vec_pretty(&r).unwrap().len() <= RECORD_MAX_BYTES);
        let reh = r.rehearsal.as_ref().unwrap();
        assert!(reh.limits_hit.contains(&crate::model::LimitHit::Record));
        assert!(reh.output_truncated);
        let v = r.verdict.as_ref().unwrap();
        assert_eq!(v.decision, Decision::Blocked);
        assert!(
            v.reasons[0].starts_with("[limits.record]"),
            "{:?}",
            v.reasons
        );
        // And the store refuses anything larger, whatever the caller.
        let tmp = tempfile::tempdir().unwrap();
        let e = test_engine(tmp.path(), None);
        r.rehearsal.as_mut().unwrap().stdout = "o".repeat(RECORD_MAX_BYTES);
        assert!(e.save(&r).is_err());
        assert!(!e.run_dir("r1-0001").join("record.json").exists());
    }
}
