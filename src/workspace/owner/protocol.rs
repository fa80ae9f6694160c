//! The messages between the root side and the workspace agent, and their
//! framing: every frame bounded, data streamed in chunks.

use std::io::{Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{AccessError, CHUNK, MAX_JSON_FRAME, Resolved};
use crate::workspace::apply::{Backup, Identity, State};

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum Request {
    Resolve {
        path: PathBuf,
    },
    Open {
        path: PathBuf,
        identity: Identity,
        max_file: u64,
    },
    Read {
        rel_hex: String,
        max: u64,
    },
    State {
        rel_hex: String,
    },
    BackupFile {
        rel_hex: String,
    },
    BackupSymlink {
        rel_hex: String,
    },
    /// Followed by a data stream.
    WriteFile {
        rel_hex: String,
        hash: String,
        mode: u32,
        tag: String,
    },
    MakeDir {
        rel_hex: String,
        mode: u32,
    },
    Symlink {
        rel_hex: String,
        target_hex: String,
        tag: String,
    },
    Remove {
        rel_hex: String,
    },
    Chmod {
        rel_hex: String,
        mode: u32,
    },
    SetTime {
        rel_hex: String,
        mtime_ns: i64,
    },
    /// Make every step taken so far durable (an fsync of each path the
    /// steps changed, or one `syncfs` for thousands: `durable.rs`).
    Sync,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub(super) enum Reply {
    Ok,
    Resolved {
        resolved: Resolved,
    },
    State {
        state: State,
    },
    Backup {
        backup: Backup,
    },
    /// A data stream follows.
    Data,
    Absent,
    AccessError {
        error: AccessError,
    },
    ApplyError {
        path: String,
        message: String,
    },
}

// ---------------------------------------------------------------------------
// Framing: [tag u8][len u32 LE][payload]; 'J' JSON, 'D' data chunk, 'E' end.

pub(super) fn write_frame(w: &mut dyn Write, tag: u8, payload: &[u8]) -> std::io::Result<()> {
    w.write_all(&[tag])?;
    w.write_all(&(payload.len() as u32).to_le_bytes())?;
    w.write_all(payload)
}

pub(super) fn read_frame(r: &mut dyn Read, max: usize) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the limit of {max}"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok((head[0], buf))
}

pub(super) fn write_json<T: Serialize>(w: &mut dyn Write, v: &T) -> std::io::Result<()> {
    write_frame(w, b'J', &serde_json::to_vec(v).expect("serializes"))
}

pub(super) fn read_json<T: for<'de> Deserialize<'de>>(r: &mut dyn Read) -> std::io::Result<T> {
    let (tag, body) = read_frame(r, MAX_JSON_FRAME)?;
    if tag != b'J' {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "expected a control frame",
        ));
    }
    serde_json::from_slice(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}

/// Copy `src` as data frames and an end frame.
pub(super) fn send_stream(w: &mut dyn Write, src: &mut dyn Read) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match src.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Tell the other side the stream is broken.
                write_frame(w, b'X', b"")?;
                return Err(e);
            }
        };
        if n == 0 {
            return write_frame(w, b'E', b"");
        }
        write_frame(w, b'D', &buf[..n])?;
    }
}

/// A data stream as a reader (ends at the end frame; an abort frame is an
/// error).
pub(super) struct StreamReader<'a> {
    r: &'a mut dyn Read,
    buf: Vec<u8>,
    pos: usize,
    done: bool,
}

impl<'a> StreamReader<'a> {
    pub(super) fn new(r: &'a mut dyn Read) -> Self {
        StreamReader {
            r,
            buf: Vec::new(),
            pos: 0,
            done: false,
        }
    }

    /// Consume whatever is left of the stream (so the connection stays in
    /// step after an early error).
    pub(super) fn drain(&mut self) -> std::io::Result<()> {
        let mut sink = [0u8; 8192];
        while self.read(&mut sink)? > 0 {}
        Ok(())
    }
}

impl Read for StreamReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.done {
                return Ok(0);
            }
            let (tag, body) = read_frame(self.r, CHUNK)?;
            match tag {
                b'D' => {
                    self.buf = body;
                    self.pos = 0;
                }
                b'E' => self.done = true,
                _ => {
                    self.done = true;
                    return Err(std::io::Error::other("the sender aborted the stream"));
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
