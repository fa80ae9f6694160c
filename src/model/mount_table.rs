//! The mount table (`/proc/self/mountinfo`) as data: what is mounted
//! where, and where a path lies on its filesystem. The callers read the
//! table themselves (this layer does no I/O), each with its own bound.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Where the kernel shows a process its mount table.
pub(crate) const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountLine {
    /// The mount's id (what `statx`'s `STATX_MNT_ID` answers for a path
    /// on it).
    pub id: u64,
    /// The filesystem (`major:minor`).
    pub dev: (u32, u32),
    /// The directory of that filesystem mounted here.
    pub root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
    /// The mount, or its filesystem, is read-only.
    pub read_only: bool,
    /// A FUSE filesystem (a user process serves it), and the user its
    /// mounter said it serves (`user_id=`), when the table says.
    pub fuse: Option<Option<u32>>,
}

/// The mount table, in mount order (a later mount on the same point is
/// the one on top).
#[derive(Debug, Default)]
pub(crate) struct MountTable(pub Vec<MountLine>);

/// Where a path lies on its filesystem.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FsPlace {
    pub dev: (u32, u32),
    pub path: PathBuf,
}

impl MountTable {
    /// The first `max_lines` lines of `text`; a line that is not a mount
    /// table's is left out.
    pub(crate) fn parse(text: &[u8], max_lines: usize) -> MountTable {
        let lines = text.split(|b| *b == b'\n').take(max_lines);
        MountTable(lines.filter_map(parse_line).collect())
    }

    /// The filesystem `p` (absolute, resolved) is on, and its path there.
    pub(crate) fn locate(&self, p: &Path) -> Option<FsPlace> {
        let m = self
            .0
            .iter()
            .enumerate()
            .filter(|(_, m)| p.starts_with(&m.point))
            .max_by_key(|(i, m)| (m.point.components().count(), *i))?
            .1;
        let rest = p.strip_prefix(&m.point).ok()?;
        Some(FsPlace {
            dev: m.dev,
            path: m.root.join(rest),
        })
    }

    /// Mounts whose mount point is `dir` or lies below it.
    pub(crate) fn at_or_below<'a>(
        &'a self,
        dir: &'a Path,
    ) -> impl Iterator<Item = &'a MountLine> + 'a {
        self.0.iter().filter(move |m| m.point.starts_with(dir))
    }
}

fn parse_line(line: &[u8]) -> Option<MountLine> {
    let f: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
    if f.len() < 5 {
        return None;
    }
    let (a, b) = std::str::from_utf8(f[2]).ok()?.split_once(':')?;
    let path = |s: &[u8]| PathBuf::from(OsString::from_vec(unescape(s)));
    let ro =
        |opts: Option<&&[u8]>| opts.is_some_and(|o| o.split(|b| *b == b',').any(|x| x == b"ro"));
    // The mount's options, then after the optional fields and `-`, the
    // filesystem type, its source and the filesystem's options.
    let sep = f.iter().skip(6).position(|x| *x == b"-").map(|i| i + 6);
    let fs_type = sep.and_then(|i| f.get(i + 1)).copied().unwrap_or_default();
    let fuse = [&b"fuse"[..], b"fuseblk"]
        .iter()
        .any(|t| fs_type == *t || (fs_type.starts_with(t) && fs_type.get(t.len()) == Some(&b'.')));
    let fuse_user = || {
        let opts = sep.and_then(|i| f.get(i + 3))?;
        let id = opts
            .split(|b| *b == b',')
            .find_map(|o| o.strip_prefix(b"user_id="))?;
        std::str::from_utf8(id).ok()?.parse().ok()
    };
    Some(MountLine {
        id: std::str::from_utf8(f[0]).ok()?.parse().ok()?,
        dev: (a.parse().ok()?, b.parse().ok()?),
        root: path(f[3]),
        point: path(f[4]),
        read_only: ro(f.get(5)) || sep.is_some_and(|i| ro(f.get(i + 3))),
        fuse: fuse.then(fuse_user),
    })
}

/// The mount table's octal escapes (`\040` for a space) undone; a
/// backslash not followed by three octal digits of a byte stays as it is.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s.get(i + 1..i + 4) {
            Some(o)
                if s[i] == b'\\'
                    && (b'0'..=b'3').contains(&o[0])
                    && o.iter().all(|c| (b'0'..=b'7').contains(c)) =>
            {
                out.push((o[0] - b'0') * 64 + (o[1] - b'0') * 8 + (o[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_escapes_and_read_only_flags() {
        let text = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
            40 22 0:50 /cache\\040dir /home/u/my\\040cache rw - tmpfs t rw\n\
            41 22 0:51 / /home/u/tail\\134 rw - tmpfs t rw\n\
            42 22 8:1 /r /home/u/.rustup ro,relatime shared:1 - ext4 /dev/sda1 rw\n\
            43 22 7:0 / /home/u/sq rw shared:2 master:3 - squashfs /dev/loop0 ro\n\
            44 22 0:60 / /home/u/fs rw - fuse.bindfs bindfs rw,user_id=1000,group_id=1000\n\
            45 22 0:61 / /home/u/fb rw - fuseblk /dev/sdb1 rw\n\
            46 22 0:62 / /home/u/fc rw - fusectl fusectl rw\n\
            short line\n";
        let t = MountTable::parse(text, usize::MAX).0;
        assert_eq!(t.len(), 8);
        let ro: Vec<bool> = t.iter().map(|m| m.read_only).collect();
        assert_eq!(ro, [false, false, false, true, true, false, false, false]);
        let fuse: Vec<Option<Option<u32>>> = t.iter().map(|m| m.fuse).collect();
        assert_eq!(
            fuse,
            [
                None,
                None,
                None,
                None,
                None,
                Some(Some(1000)),
                Some(None),
                None
            ]
        );
        assert_eq!(t[1].dev, (0, 50));
        assert_eq!(t[1].id, 40);
        assert_eq!(t[1].root, PathBuf::from("/cache dir"));
        assert_eq!(t[1].point, PathBuf::from("/home/u/my cache"));
        assert_eq!(t[2].point, PathBuf::from("/home/u/tail\\"));
        assert_eq!(MountTable::parse(text, 2).0.len(), 2);
        assert_eq!(unescape(b"a\\04"), b"a\\04");
        assert_eq!(unescape(b"\\400"), b"\\400");
    }

    #[test]
    fn a_path_is_located_on_the_topmost_mount_over_it() {
        let m = MountTable::parse(
            b"22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n\
              30 22 8:1 /home/u /tmp/my\\040bind rw - ext4 /dev/sda1 rw\n\
              31 22 0:50 / /home rw - tmpfs tmpfs rw\n",
            usize::MAX,
        );
        assert_eq!(m.0.len(), 3);
        assert_eq!(m.0[1].point, Path::new("/tmp/my bind"));
        assert_eq!(
            m.locate(Path::new("/tmp/my bind/x")),
            Some(FsPlace {
                dev: (8, 1),
                path: "/home/u/x".into()
            })
        );
        assert_eq!(
            m.locate(Path::new("/home/v")),
            Some(FsPlace {
                dev: (0, 50),
                path: "/v".into()
            })
        );
        let below: Vec<&Path> = m
            .at_or_below(Path::new("/tmp"))
            .map(|l| l.point.as_path())
            .collect();
        assert_eq!(below, [Path::new("/tmp/my bind")]);
    }
}
