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
    // Points are sorted, so what lies beneath a skipped one follows it.
    let mut skipped: Option<&Path> = None;
    let (mut shown, mut looked, mut past) = (0, 0, 0);
    for m in points {
        let p = m.point.as_path();
        if skipped.is_some_and(|s| p.starts_with(s)) {
            continue;
        }
        if p.starts_with(r.workspace) || p.starts_with(r.state_dir) {
            skipped = Some(p);
            continue;
        }
        skipped = Some(p);
        if shown >= MAX_SUBMOUNTS || looked >= 4 * MAX_SUBMOUNTS {
            past += 1;
            if past <= MAX_SUBMOUNTS {
                v.notes.push(format!(
                    "hidden:{} (not shown: more than {MAX_SUBMOUNTS} mounts beneath the home; the command sees the directory under it)",
                    p.display()
                ));
            }
            continue;
        }
        looked += 1;
        let why = match std::fs::symlink_metadata(p) {
            Err(e) => format!(
                "a mount beneath the home that could not be looked at: {e}; the command sees the directory under it"
            ),
            Ok(meta) if !meta.is_dir() => {
                "a file mounted beneath the home is not shown: the command sees the file under the mount"
                    .to_string()
            }
            Ok(_)
                if home_at
                    .as_ref()
                    .is_some_and(|(dev, at)| *dev == m.dev && overlaps(&m.root, at))
                    || (!others.is_empty() && (r.reaches_home)(p, &others)) =>
            {
                format!("{RULE_HOME_ALIAS}; the command sees the directory under the mount")
            }
            Ok(meta) => {
                shown += 1;
                if m.read_only {
                    v.read_only.push(p.to_path_buf());
                }
                v.layers.push(ShownDir {
                    path: p.to_path_buf(),
                    identity: Some((meta.dev(), meta.ino())),
                });
                skipped = None;
                continue;
            }
        };
        v.notes.push(format!("hidden:{} ({why})", p.display()));
    }
    if past > MAX_SUBMOUNTS {
        v.notes.push(format!(
            "mounts beneath the home: {} more not shown or named (more than {MAX_SUBMOUNTS}); the command sees the directory under each",
            past - MAX_SUBMOUNTS
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::access::HostUser;
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

    fn line(dev: (u32, u32), root: &str, point: &Path, read_only: bool) -> MountLine {
        MountLine {
            dev,
            root: root.into(),
            point: point.to_path_buf(),
            read_only,
        }
    }

    /// What the plan makes of the mounts beneath a home: directories are
    /// layers (read-only ones marked), a file, an alias of the home and
    /// those past the cap are named, the workspace's and the state
    /// directory's and what lies beneath a named one are left alone.
    #[test]
    fn mounts_beneath_the_home_are_layers_or_named() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let ws = home.join("ws");
        let state = home.join(".local/state/dryrun");
        for d in [
            "cache",
            "a-ro",
            "alias/inner",
            "ws/sub",
            ".local/state/dryrun/x",
        ] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".gitconfig"), "").unwrap();
        for i in 0..MAX_SUBMOUNTS + 40 {
            std::fs::create_dir_all(home.join(format!("many/{i:03}"))).unwrap();
        }
        let mut table = vec![
            line((8, 1), "/", Path::new("/"), false),
            line((0, 40), "/c", &home.join("cache"), false),
            line((0, 41), "/r", &home.join("a-ro"), true),
            line((0, 42), "/f", &home.join(".gitconfig"), false),
            line((8, 1), "/", &home.join("alias"), false),
            line((0, 43), "/", &home.join("alias/inner"), false),
            line((0, 44), "/", &ws.join("sub"), false),
            line((0, 45), "/", &state.join("x"), false),
            line((0, 46), "/", &home.join("gone"), false),
        ];
        for i in 0..MAX_SUBMOUNTS + 40 {
            table.push(line(
                (1, i as u32),
                "/",
                &home.join(format!("many/{i:03}")),
                false,
            ));
        }
        let me = HostUser {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        let image = super::super::super::spec::ImageProfile::default_profile();
        let r = ViewRequest {
            user: &me,
            env: &[],
            workspace: &ws,
            state_dir: &state,
            image: &image,
            policy_masks: &[],
            reaches_home: &|_, _| false,
        };
        let mut v = ViewSpec::default();
        plan_submounts(&r, &mut v, &home, &table);
        let layers: Vec<&Path> = v.layers.iter().map(|l| l.path.as_path()).collect();
        assert_eq!(layers.len(), MAX_SUBMOUNTS, "{layers:?}");
        assert_eq!(layers[0], home.join("a-ro"), "{layers:?} {:?}", v.notes);
        assert_eq!(layers[1], home.join("cache"));
        assert_eq!(layers[2], home.join("many/000"));
        assert_eq!(v.read_only, vec![home.join("a-ro")]);
        let named = |p: &Path, why: &str| {
            v.notes
                .iter()
                .any(|n| n.starts_with(&format!("hidden:{} (", p.display())) && n.contains(why))
        };
        assert!(
            named(&home.join(".gitconfig"), "a file mounted"),
            "{:?}",
            v.notes
        );
        assert!(named(&home.join("alias"), RULE_HOME_ALIAS), "{:?}", v.notes);
        assert!(
            named(&home.join("gone"), "could not be looked at"),
            "{:?}",
            v.notes
        );
        assert!(
            named(&home.join("many/030"), "more than 32 mounts"),
            "{:?}",
            v.notes
        );
        assert!(!named(&home.join("many/029"), ""), "{:?}", v.notes);
        for quiet in [home.join("alias/inner"), ws.join("sub"), state.join("x")] {
            assert!(
                !layers.contains(&quiet.as_path()) && !named(&quiet, ""),
                "{quiet:?}"
            );
        }
        // 42 past the cap: 32 named, 10 counted.
        assert!(
            v.notes.last().unwrap().contains(": 10 more not shown"),
            "{:?}",
            v.notes
        );
    }
}
