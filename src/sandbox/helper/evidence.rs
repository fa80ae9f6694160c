//! P9: walk the overlay's upper layer (the evidence), judge changed links in
//! the merged tree, stream content blobs and the `R` frame.

use crate::model::{BlockedKind, LimitHit};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::super::reader::LazyLayerReader;
use super::super::spec::{self, SandboxSpec};
use super::super::walk::{BlobSink, walk_upper_layer};
use super::super::wire::{self, Blocked, RehearsalReport};
use super::error::HelperError;
use super::init::{LowerLayer, RunIds};
use super::{FdWriter, OUT_FD, mark};

/// Blob sink writing `B` frames to fd 1, within the run's kept-content
/// budget (the host enforces the same number). Each content is sent once:
/// a dependency install writes the same LICENSE thousands of times. Every
/// copy still counts against the budget at its apparent size: the budget
/// also bounds how many bytes the walk reads and hashes, and a run of
/// identical sparse files must not buy unbounded hashing with it.
struct FrameSink {
    room: u64,
    sent: std::collections::HashSet<[u8; 32]>,
}

impl BlobSink for FrameSink {
    fn reserve(&mut self, len: u64) -> bool {
        match self.room.checked_sub(len) {
            Some(left) => {
                self.room = left;
                true
            }
            None => false,
        }
    }

    fn put(
        &mut self,
        hash: &blake3::Hash,
        len: u64,
        content: &mut dyn Read,
    ) -> std::io::Result<()> {
        if self.sent.contains(hash.as_bytes()) {
            // Already sent: not sent again (its room stays spent).
            return Ok(());
        }
        let mut out = std::io::BufWriter::with_capacity(1 << 16, FdWriter(OUT_FD));
        let mut hashing = Hashing {
            inner: content,
            hasher: blake3::Hasher::new(),
        };
        wire::write_blob(&mut out, hash, len, &mut hashing)?;
        out.flush()?;
        // Only content that was what its hash says counts as sent (the host
        // drops a frame whose bytes do not match: a later copy must go).
        if hashing.hasher.finalize() == *hash {
            self.sent.insert(*hash.as_bytes());
        }
        Ok(())
    }
}

/// A reader that hashes what passes through it.
struct Hashing<'a> {
    inner: &'a mut dyn Read,
    hasher: blake3::Hasher,
}

impl Read for Hashing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// P9: the change set from the upper layer; lower files, and upper files the
/// command does not own, are opened by a reader holding only the owner's
/// ids (sandbox/reader.rs), forked when the walk first needs it.
pub(super) fn walk_evidence(
    spec: &SandboxSpec,
    ids: &RunIds,
    lower: &LowerLayer,
    upper_fd: &OwnedFd,
    report: &mut RehearsalReport,
) -> Result<(), HelperError> {
    mark("P9 evidence");
    let upper_path = PathBuf::from(format!("/proc/self/fd/{}", upper_fd.as_raw_fd()));
    let mut sink = FrameSink {
        room: spec::kept_content_budget(spec.limits.disk_bytes),
        sent: std::collections::HashSet::new(),
    };
    // Forked at the walk's first open through it: none for a walk that
    // needs none (an empty upper layer).
    let reader = LazyLayerReader::new(
        &lower.fd,
        upper_fd,
        ids.uid,
        ids.gid,
        ids.shifted.then_some(spec.reader_groups.as_slice()),
        || mark("P9 reader started"),
    );
    let walked = walk_upper_layer(
        &upper_path,
        &lower.fd,
        &spec.workspace,
        spec.diff_before_max,
        Some(ids.uid),
        &reader,
        &mut sink,
    );
    // A reader that did not start fails the run, whatever the walk made of
    // the failed opens.
    if let Some(e) = reader.start_failure() {
        return Err(HelperError::EvidenceReader(e));
    }
    let walked = walked.map_err(HelperError::Evidence)?;
    drop(reader);
    report.changes = walked.changes;
    judge_links_in_merged_tree(&spec.workspace, &mut report.changes);
    if walked.truncated {
        report.limits_hit.push(LimitHit::Changes);
    }
    if walked.too_deep > 0 {
        report.limits_hit.push(LimitHit::PathDepth);
        report.blocked.push(Blocked {
            kind: BlockedKind::Limit,
            detail: format!(
                "{} path(s) lie deeper than the evidence walk can name (PATH_MAX); they are left out of the change set",
                walked.too_deep
            ),
        });
    }
    mark("P9 evidence done");
    Ok(())
}

/// P9: the `R` frame, with the phase marks.
pub(super) fn send_report(mut report: RehearsalReport) -> Result<(), HelperError> {
    report.timings_us = super::marks_so_far();
    let mut out = FdWriter(OUT_FD);
    wire::write_json(&mut out, wire::TAG_REPORT, &report).map_err(HelperError::Answer)
}

/// A changed symlink escapes when resolving it in the merged tree (the
/// overlay at the workspace path, as it will be live) can leave the
/// workspace: through other links, `..` included, not by its text alone.
fn judge_links_in_merged_tree(ws: &Path, changes: &mut [crate::model::Change]) {
    use super::super::walk::{LinkLookup, link_leaves_workspace};
    use crate::model::{ChangeKind, FileType};
    use nix::fcntl::{OpenHow, ResolveFlag};
    let Ok(root) = open(
        ws,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        for c in changes
            .iter_mut()
            .filter(|c| c.file_type == FileType::Symlink)
        {
            c.symlink_escapes = true;
        }
        return;
    };
    let mut lookup = |rel: &[u8]| -> LinkLookup {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
        match nix::fcntl::openat2(&root, std::ffi::OsStr::from_bytes(rel), how) {
            Ok(fd) => match nix::sys::stat::fstat(&fd) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                    match nix::fcntl::readlinkat(&fd, "") {
                        Ok(t) => LinkLookup::Link(t.as_bytes().to_vec()),
                        Err(_) => LinkLookup::Unknown,
                    }
                }
                Ok(_) => LinkLookup::Other,
                Err(_) => LinkLookup::Unknown,
            },
            Err(nix::errno::Errno::ENOENT) | Err(nix::errno::Errno::ENOTDIR) => LinkLookup::Missing,
            Err(_) => LinkLookup::Unknown,
        }
    };
    for c in changes
        .iter_mut()
        .filter(|c| c.file_type == FileType::Symlink && c.kind != ChangeKind::Deleted)
    {
        let rel = c.path_bytes();
        let target = match lookup(&rel) {
            LinkLookup::Link(t) => t,
            _ => {
                c.symlink_escapes = true;
                continue;
            }
        };
        if link_leaves_workspace(&rel, &target, ws, &mut lookup) {
            c.symlink_escapes = true;
        }
    }
}
