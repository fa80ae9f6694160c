//! Fault injection for the crash and release tests: environment
//! variables that make the journal stall or fail where a test needs it.
//! Never set in production.

use std::fs::File;
use std::io::Write;

use super::Entry;

/// Fault injection for the release tests (tests/submission_release.rs):
/// with `DRYRUN_FAULT_JOURNAL_FAIL=KIND`, a batch holding an entry of that
/// kind fails as a disk error would, and nothing of it is written. Never
/// set in production.
pub(super) fn fault_injection_fail(batch: &[(u64, Entry)]) -> std::io::Result<()> {
    match std::env::var("DRYRUN_FAULT_JOURNAL_FAIL") {
        Ok(kind) if batch.iter().any(|(_, e)| e.kind == kind) => Err(std::io::Error::other(
            format!("injected failure of a {kind} entry (DRYRUN_FAULT_JOURNAL_FAIL)"),
        )),
        _ => Ok(()),
    }
}

/// Fault injection for the crash tests (tests/daemon.rs): with
/// `DRYRUN_FAULT_JOURNAL_STALL_MS=N`, half of each record is written, then
/// the writer sleeps N ms before the rest, so a test can kill -9 the daemon
/// in the middle of an append. Never set in production.
pub(super) fn fault_injection_torn_write(f: &mut File, line: &[u8]) {
    let Some(ms) = std::env::var("DRYRUN_FAULT_JOURNAL_STALL_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let half = line.len() / 2;
    if f.write_all(&line[..half]).is_ok() {
        let _ = f.sync_data();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        // The rest is written by the caller after truncating our half away.
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.set_len(len - half as u64);
    }
}
