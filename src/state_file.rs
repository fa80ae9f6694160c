//! Opening a file of a state directory: the one way every read and write
//! of run records, kept content, plans, receipts, markers, grants and the
//! journal and its anchor reaches the disk.
//!
//! A local state directory belongs to the agent that submitted its runs,
//! and root reads it: the README's reviewer flow (`sudo dryrun runs`,
//! `show`, `diff`, `approve`, `journal verify`, `dryrun review`), and the
//! start-up recovery every one of them runs first. So a file there is
//! whatever its owner made it: a fifo put in a record's place hung root's
//! `dryrun runs` and `show` forever (and the journal's anchor `journal
//! verify`), a link would send root's read or write elsewhere, a sparse
//! file of terabytes would be read into memory. Here a file is opened
//! never through a symlink (`O_NOFOLLOW`), never waiting for a fifo's other
//! end (`O_NONBLOCK`: the open returns, and the file is then refused), only
//! when it is a regular file (checked on the open file), and a read is
//! capped. (Root acting on such a directory also takes its owner's
//! filesystem identity: see `request::door::act_as_state_dir_owner`.)

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most of one state file read into memory (a record is written at
/// most 64 MiB, a receipt's change list about 30 MiB at the walk's cap);
/// the journal, read whole only by `journal verify`, has no cap.
pub(crate) const READ_MAX: u64 = 256 << 20;

/// `path` opened with `opts` (which say read, write, create, truncate,
/// append), never through a link, never blocking on a fifo, and only if it
/// is a regular file: anything else is an error naming the file.
pub(crate) fn open(path: &Path, opts: &mut OpenOptions) -> io::Result<File> {
    let f = opts
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::other(format!(
                "{} is a symbolic link; a state directory's files are never followed",
                shown(path)
            )),
            _ => e,
        })?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file (a fifo, a device or a directory in its place is never read or written)",
            shown(path)
        )));
    }
    Ok(f)
}

/// `path` opened for reading (see [`open`]).
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().read(true))
}

/// The whole of `path` (see [`open`]), at most `max` bytes: a larger file
/// is an error (`FileTooLarge`) and is not read.
pub(crate) fn read_capped(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = open_read(path)?;
    let len = f.metadata()?.len();
    if len > max {
        return Err(too_large(path, max));
    }
    let mut out = Vec::with_capacity(len as usize);
    f.take(max.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_large(path, max));
    }
    Ok(out)
}

/// [`read_capped`] at [`READ_MAX`].
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    read_capped(path, READ_MAX)
}

/// [`read`], as UTF-8 text.
pub(crate) fn read_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not UTF-8 text", shown(path)),
        )
    })
}

fn too_large(path: &Path, max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("{} is larger than {max} bytes; not read", shown(path)),
    )
}

fn shown(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    crate::model::text::escape_for_humans(path.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_links_directories_and_oversized_files_are_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("record.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let e = read(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // For writing, with no reader: refused by the kernel at once.
        assert!(open(&fifo, OpenOptions::new().write(true)).is_err());
        let real = d.path().join("real");
        std::fs::write(&real, "0123456789").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(read(d.path()).is_err());
        assert_eq!(read_capped(&real, 10).unwrap(), b"0123456789");
        let e = read_capped(&real, 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        let e = read(&d.path().join("absent")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
