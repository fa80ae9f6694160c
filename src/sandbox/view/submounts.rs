//! Mounts beneath the shown home (a bind-mounted `~/.rustup`, a
//! container's cache volume, an NFS subdirectory): an overlay's lower
//! layer shows its own filesystem only, so each one the view can show is
//! a throwaway layer of its own, mounted over the home's at its path; the
//! others are named in the record, never shown silently as the empty
//! directory under them.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::access::{self, overlaps};
use super::{RULE_HOME_ALIAS, ShownDir, ViewRequest, ViewSpec};

/// The most mounts beneath the home shown as layers of their own.
pub(crate) const MAX_SUBMOUNTS: usize = 32;
/// How much of the mount table is read.
const MOUNTINFO_MAX_BYTES: u64 = 4 << 20;
const MOUNTINFO_MAX_LINES: usize = 10_000;

/// One line of the mount table: the filesystem (`major:minor`), the
/// directory of it mounted, and where.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MountLine {
    pub dev: (u32, u32),
    pub root: PathBuf,
    pub point: PathBuf,
    /// The mount, or its filesystem, is read-only.
    pub read_only: bool,
}

/// The planner's own mount table (empty when it cannot be read: then no
/// mount beneath the home is shown, as before).
pub(super) fn read_mount_table() -> Vec<MountLine> {
    use std::io::Read;
    let mut text = Vec::new();
    let read = std::fs::File::open("/proc/self/mountinfo")
        .and_then(|f| f.take(MOUNTINFO_MAX_BYTES).read_to_end(&mut text));
    if read.is_err() {
        return Vec::new();
    }
    parse_mount_table(&text)
}

pub(super) fn parse_mount_table(text: &[u8]) -> Vec<MountLine> {
    text.split(|b| *b == b'\n')
        .take(MOUNTINFO_MAX_LINES)
        .filter_map(|line| {
            let f: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
            if f.len() < 5 {
                return None;
            }
            let (a, b) = std::str::from_utf8(f[2]).ok()?.split_once(':')?;
            let path = |s: &[u8]| PathBuf::from(OsString::from_vec(unescape(s)));
            let ro = |opts: Option<&&[u8]>| {
                opts.is_some_and(|o| o.split(|b| *b == b',').any(|x| x == b"ro"))
            };
            // The mount's options, then after the optional fields and `-`,
            // the filesystem type, its source and the filesystem's options.
            let sep = f.iter().skip(6).position(|x| *x == b"-").map(|i| i + 6);
            Some(MountLine {
                dev: (a.parse().ok()?, b.parse().ok()?),
                root: path(f[3]),
                point: path(f[4]),
                read_only: ro(f.get(5)) || sep.is_some_and(|i| ro(f.get(i + 3))),
            })
        })
        .collect()
}

/// The mount table's octal escapes (`\040` for a space) undone.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let octal = s.get(i + 1..i + 4);
        match octal {
            Some(o)
                if s[i] == b'\\'
                    && o.iter()
                        .all(|c| (b'0'..=b'3').contains(&o[0]) && (b'0'..=b'7').contains(c)) =>
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

/// Adds to `v` a layer for every mount point strictly beneath the shown
/// `home` that the view can show (parents first once sorted), and names
/// the others under `notes`. Mount points in the workspace (its own
/// overlay) or dryrun's state directory (masked), and beneath a mount
/// point not shown, are left to what covers them.
pub(super) fn plan_submounts(r: &ViewRequest, v: &mut ViewSpec, home: &Path, table: &[MountLine]) {
    let mut points: Vec<&MountLine> = table
        .iter()
        .filter(|m| m.point.starts_with(home) && m.point != home)
        .collect();
    points.sort_by(|a, b| a.point.cmp(&b.point));
    // A mount point mounted over again shows its last mount.
    points.dedup_by(|later, earlier| {
        if later.point == earlier.point {
            std::mem::swap(later, earlier);
            true
        } else {
            false
        }
    });
    if points.is_empty() {
        return;
    }
    // Where the home itself lies on its filesystem: a mount of it, or of
    // a directory within or above it, is another name of the home.
    let home_at = table
        .iter()
        .filter(|m| home.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
        .and_then(|m| Some((m.dev, m.root.join(home.strip_prefix(&m.point).ok()?))));
    let others: Vec<PathBuf> = access::other_homes(r.user.uid)
        .into_iter()
        .map(|(_, h)| h)
        .collect();
    let mut skipped: Vec<&Path> = Vec::new();
    let mut shown = 0;
    for m in points {
        let p = m.point.as_path();
        if skipped.iter().any(|s| p.starts_with(s)) {
            continue;
        }
        if p.starts_with(r.workspace) || p.starts_with(r.state_dir) {
            skipped.push(p);
            continue;
        }
        let why = match std::fs::symlink_metadata(p) {
            Err(e) => Some(format!(
                "a mount beneath the home that could not be looked at: {e}; the command sees the directory under it"
            )),
            Ok(meta) if !meta.is_dir() => Some(
                "a file mounted beneath the home is not shown: the command sees the file under the mount"
                    .to_string(),
            ),
            Ok(_)
                if home_at
                    .as_ref()
                    .is_some_and(|(dev, at)| *dev == m.dev && overlaps(&m.root, at))
                    || (!others.is_empty() && (r.reaches_home)(p, &others)) =>
            {
                Some(format!(
                    "{RULE_HOME_ALIAS}; the command sees the directory under the mount"
                ))
            }
            Ok(_) if shown >= MAX_SUBMOUNTS => Some(format!(
                "not shown: more than {MAX_SUBMOUNTS} mounts beneath the home; the command sees the directory under it"
            )),
            Ok(meta) => {
                shown += 1;
                if m.read_only {
                    v.read_only.push(p.to_path_buf());
                }
                v.layers.push(ShownDir {
                    path: p.to_path_buf(),
                    identity: Some((meta.dev(), meta.ino())),
                });
                None
            }
        };
        if let Some(why) = why {
            v.notes.push(format!("hidden:{} ({why})", p.display()));
            skipped.push(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_table_is_read_with_its_escapes_undone() {
        let text = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
            40 22 0:50 /cache\\040dir /home/u/my\\040cache rw - tmpfs t rw\n\
            41 22 0:51 / /home/u/tail\\134 rw - tmpfs t rw\n\
            42 22 8:1 /r /home/u/.rustup ro,relatime shared:1 - ext4 /dev/sda1 rw\n\
            43 22 7:0 / /home/u/sq rw shared:2 master:3 - squashfs /dev/loop0 ro\n\
            short line\n";
        let t = parse_mount_table(text);
        assert_eq!(t.len(), 5);
        let ro: Vec<bool> = t.iter().map(|m| m.read_only).collect();
        assert_eq!(ro, [false, false, false, true, true]);
        assert_eq!(t[1].dev, (0, 50));
        assert_eq!(t[1].root, PathBuf::from("/cache dir"));
        assert_eq!(t[1].point, PathBuf::from("/home/u/my cache"));
        assert_eq!(t[2].point, PathBuf::from("/home/u/tail\\"));
        assert_eq!(unescape(b"a\\04"), b"a\\04");
        assert_eq!(unescape(b"\\400"), b"\\400");
    }
}
