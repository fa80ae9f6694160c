//! The helper's answer: a stream of frames on its stdout.
//!
//! Frame = tag (1 byte) + payload length (u64 LE) + payload.
//! - `B`: a content blob: 32-byte BLAKE3 hash, then the bytes.
//! - `R`: the rehearsal report (JSON), written by the sandbox's init after the
//!   command's processes are all dead.
//! - `H`: host-side observations (JSON), written by the outer helper last.
//! - `E`: a setup failure (JSON `{"stage": ..., "message": ...}`).

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::path::Path;

pub(crate) use crate::model::{Blocked, HostReport, RehearsalReport, StepOutcome};

pub(crate) const TAG_BLOB: u8 = b'B';
pub(crate) const TAG_REPORT: u8 = b'R';
pub(crate) const TAG_HOST: u8 = b'H';
pub(crate) const TAG_ERROR: u8 = b'E';

/// Largest JSON frame accepted (the report carries capped output).
const MAX_JSON_FRAME: u64 = 256 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct SetupFailure {
    pub stage: String,
    pub message: String,
}

pub(crate) fn write_frame(out: &mut dyn Write, tag: u8, payload: &[u8]) -> io::Result<()> {
    out.write_all(&[tag])?;
    out.write_all(&(payload.len() as u64).to_le_bytes())?;
    out.write_all(payload)?;
    out.flush()
}

pub(crate) fn write_json<T: Serialize>(out: &mut dyn Write, tag: u8, v: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(v).map_err(io::Error::other)?;
    write_frame(out, tag, &bytes)
}

pub(crate) fn write_blob(
    out: &mut dyn Write,
    hash: &blake3::Hash,
    len: u64,
    content: &mut dyn Read,
) -> io::Result<()> {
    out.write_all(&[TAG_BLOB])?;
    out.write_all(&(len + 32).to_le_bytes())?;
    out.write_all(hash.as_bytes())?;
    let copied = io::copy(&mut content.take(len), out)?;
    if copied != len {
        // The file shrank under us (cannot happen once the run is dead, but a
        // short frame would desynchronise the stream): pad, the hash check on
        // the receiving side then rejects the blob.
        io::copy(&mut io::repeat(0).take(len - copied), out)?;
    }
    out.flush()
}

/// Everything read back from a helper.
#[derive(Debug, Default)]
pub(crate) struct HelperOutput {
    pub report: Option<RehearsalReport>,
    pub host: Option<HostReport>,
    pub failure: Option<SetupFailure>,
    pub blobs_stored: u64,
    pub bad_blobs: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("reading the sandbox helper's answer: {0}")]
    Io(#[from] io::Error),
    #[error("the sandbox helper sent a malformed frame: {0}")]
    Malformed(String),
    #[error("the sandbox helper sent more than the disk limit allows ({0} bytes)")]
    TooLarge(u64),
}

/// The frame after which the helper has nothing more to say.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastFrame {
    /// The report (no cgroups: the host side adds nothing after it).
    Report,
    /// The host side's report, which follows the sandbox's report.
    Host,
}

/// How the host side names, on its stderr, the limits a run hit when the
/// sandbox ended without its report.
const LIMITS_NOTE: &str = "dryrun host side: the run hit its limits: ";

/// Write that note (one line) on this process's stderr.
pub(crate) fn note_limits_on_stderr(limits: &[crate::model::LimitHit]) {
    eprintln!("{LIMITS_NOTE}{}", limit_names(limits));
}

/// The limits' names, joined by ", " (as [`limits_noted_in`] splits them).
pub(crate) fn limit_names(limits: &[crate::model::LimitHit]) -> String {
    let names: Vec<&str> = limits.iter().map(|l| l.as_str()).collect();
    names.join(", ")
}

/// The limits named by the host side's note in a helper's stderr (only a
/// line that is exactly a note: the command never writes there).
pub(crate) fn limits_noted_in(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix(LIMITS_NOTE))
        .find(|rest| {
            rest.split(", ")
                .all(|n| crate::model::LimitHit::ALL.iter().any(|l| l.as_str() == n))
        })
        .map(str::to_string)
}

/// Read frames until EOF, or until the report and then `last` arrived,
/// storing blobs under `blob_dir` (named by hash).
pub(crate) fn read_frames(
    input: &mut dyn Read,
    blob_dir: &Path,
    max_blob_bytes: u64,
    last: LastFrame,
) -> Result<HelperOutput, WireError> {
    let mut out = HelperOutput::default();
    let mut blob_total: u64 = 0;
    let mut blob_dir_made = false;
    loop {
        let mut tag = [0u8; 1];
        if input.read(&mut tag)? == 0 {
            break;
        }
        let mut lenb = [0u8; 8];
        input.read_exact(&mut lenb)?;
        let len = u64::from_le_bytes(lenb);
        match tag[0] {
            TAG_BLOB => {
                if len < 32 {
                    return Err(WireError::Malformed(
                        "blob frame shorter than its hash".into(),
                    ));
                }
                blob_total += len - 32;
                if blob_total > max_blob_bytes {
                    return Err(WireError::TooLarge(blob_total));
                }
                let mut hb = [0u8; 32];
                input.read_exact(&mut hb)?;
                let want = blake3::Hash::from_bytes(hb);
                let name = want.to_hex().to_string();
                let final_path = blob_dir.join(&name);
                let tmp = blob_dir.join(format!(".{name}.partial"));
                if !blob_dir_made {
                    // Made at the first blob, not per run: one directory
                    // fewer for every run that changes nothing.
                    match std::fs::create_dir(blob_dir) {
                        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                            return Err(e.into());
                        }
                        _ => blob_dir_made = true,
                    }
                }
                let mut f = std::fs::File::create(&tmp)?;
                let mut hasher = blake3::Hasher::new();
                let mut limited = input.take(len - 32);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = limited.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                    f.write_all(&buf[..n])?;
                }
                if limited.limit() != 0 {
                    return Err(WireError::Malformed("blob frame cut short".into()));
                }
                if hasher.finalize() == want {
                    // Not fsync'd one by one: a blob lost to a crash is
                    // detected by its hash when the change set is used, and
                    // that run must then be rehearsed again. The record
                    // itself is written durably.
                    std::fs::rename(&tmp, &final_path)?;
                    out.blobs_stored += 1;
                } else {
                    let _ = std::fs::remove_file(&tmp);
                    out.bad_blobs.push(name);
                }
            }
            TAG_REPORT | TAG_HOST | TAG_ERROR => {
                if len > MAX_JSON_FRAME {
                    return Err(WireError::Malformed(format!("JSON frame of {len} bytes")));
                }
                let mut buf = vec![0u8; len as usize];
                input.read_exact(&mut buf)?;
                let bad = |e: serde_json::Error| WireError::Malformed(e.to_string());
                match tag[0] {
                    TAG_REPORT => {
                        out.report = Some(serde_json::from_slice(&buf).map_err(bad)?);
                        if last == LastFrame::Report {
                            break;
                        }
                    }
                    TAG_HOST => {
                        out.host = Some(serde_json::from_slice(&buf).map_err(bad)?);
                        if last == LastFrame::Host && out.report.is_some() {
                            break;
                        }
                    }
                    _ => out.failure = Some(serde_json::from_slice(&buf).map_err(bad)?),
                }
            }
            other => {
                return Err(WireError::Malformed(format!(
                    "unknown frame tag {other:#x}"
                )));
            }
        }
    }
    Ok(out)
}
