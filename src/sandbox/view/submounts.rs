//! Mounts beneath the shown home (a bind-mounted `~/.rustup`, a
//! container's cache volume, an NFS subdirectory): an overlay's lower
//! layer shows its own filesystem only, so each one the view can show is
//! a throwaway layer of its own, mounted over the home's at its path; the
//! others are named in the record, never shown silently as the empty
//! directory under them.

use std::path::{Path, PathBuf};

use super::super::sys::{self, MountPointStat};
use super::access::{self, overlaps};
use super::{RULE_HOME_ALIAS, Refusal, Resolver, ShownDir, ViewRequest, ViewSpec};
use crate::model::mount_table::{MOUNTINFO, MountLine, MountTable};

/// The most mounts beneath the home shown as layers of their own.
pub(crate) const MAX_SUBMOUNTS: usize = 32;
/// How much of the mount table is read.
const MOUNTINFO_MAX_BYTES: u64 = 4 << 20;
const MOUNTINFO_MAX_LINES: usize = 10_000;
/// What a usual mount table fits in.
pub(crate) const TABLE_ROOM: usize = 64 << 10;

/// A file of this process's `/proc`, opened only if it is one: a regular
/// file on a procfs, opened without blocking. A look from within a
/// client's view (chrooted into a root its user made) may find a FIFO
/// there, or a file that lies: then an error, and nothing is read.
pub(super) fn open_proc_file(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)?;
    let fs = nix::sys::statfs::fstatfs(&f)?;
    if fs.filesystem_type() != nix::sys::statfs::PROC_SUPER_MAGIC || !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not this process's /proc",
            p.display()
        )));
    }
    Ok(f)
}

/// The planner's own mount table (empty when it cannot be read: then no
/// mount beneath the home is shown, as before).
pub(super) fn read_mount_table() -> MountTable {
    use std::io::Read;
    // Room for a usual table: read in one call, not in doubling chunks
    // (each a pass of the kernel's formatting).
    let mut text = Vec::with_capacity(TABLE_ROOM);
    let read = open_proc_file(Path::new(MOUNTINFO))
        .and_then(|f| f.take(MOUNTINFO_MAX_BYTES).read_to_end(&mut text));
    if read.is_err() {
        return MountTable::default();
    }
    MountTable::parse(&text, MOUNTINFO_MAX_LINES)
}

/// Adds to `v` a layer for every mount point strictly beneath the shown
/// `home` that the view can show (parents first once sorted), and names
/// the others under `notes`. Mount points in the workspace (its own
/// overlay) or dryrun's state directory (masked), and beneath a mount
/// point not shown, are left to what covers them.
pub(super) fn plan_submounts(
    r: &ViewRequest,
    v: &mut ViewSpec,
    home: &Path,
    table: &MountTable,
    look: &Resolver,
) {
    let at = |p: &Path| -> Result<MountPointStat, Refusal> {
        let opened = look.open_exact(p)?;
        Ok(sys::statx_mount_point(&opened.file)?)
    };
    plan_submounts_with(r, v, home, table, look, &at);
}

/// [`plan_submounts`], with `at` telling what is at a mount point now.
/// A line of the table is shown only as the mount it names: the object
/// at its path must be the root of that very mount (its id), so that what
/// the checks below judge (the line's filesystem and root) is what the
/// layer shows. A mount covered by a later one, or a path whose
/// directories the home's owner renamed or swapped between the reading
/// of the table and the look (another mount, an alias of the home or a
/// directory of the home's own moved there), is named instead.
fn plan_submounts_with(
    r: &ViewRequest,
    v: &mut ViewSpec,
    home: &Path,
    table: &MountTable,
    look: &Resolver,
    at: &dyn Fn(&Path) -> Result<MountPointStat, Refusal>,
) {
    let mut points: Vec<&MountLine> = table
        .0
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
    let home_at = table.locate(home);
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
        // A FUSE filesystem answers through the process that serves it:
        // one another user serves (the agent's own, through fusermount)
        // could keep a planner that looks at it waiting forever, or show
        // it anything. Only its own user's planner looks.
        if let Some(served) = m.fuse
            && served != Some(nix::unistd::geteuid().as_raw())
        {
            v.notes.push(format!(
                "hidden:{} (a FUSE mount beneath the home served by {}: not looked at, its server could keep the run waiting; the command sees the directory under it)",
                p.display(),
                served.map_or("a user the mount table does not name".into(), |u| format!("uid {u}"))
            ));
            continue;
        }
        let why = match at(p) {
            Err(Refusal::NotLooked(named)) => {
                v.notes.push(named);
                continue;
            }
            Err(Refusal::Io(e)) => format!(
                "a mount beneath the home that could not be looked at: {e}; the command sees the directory under it"
            ),
            Ok(at) if !at.dir => {
                "a file mounted beneath the home is not shown: the command sees the file under the mount"
                    .to_string()
            }
            Ok(at) if at.root_of_mount != Some(m.id) => {
                "a mount beneath the home that another mount covers, or whose path changed while the run was planned: not shown as a layer of its own; the command sees what the view shows at that path"
                    .to_string()
            }
            Ok(_)
                if home_at
                    .as_ref()
                    .is_some_and(|at| at.dev == m.dev && overlaps(&m.root, &at.path))
                    || (!others.is_empty() && (r.reaches_home)(look, p, &others)) =>
            {
                format!("{RULE_HOME_ALIAS}; the command sees the directory under the mount")
            }
            Ok(at) => {
                shown += 1;
                if m.read_only {
                    v.read_only.push(p.to_path_buf());
                }
                v.layers.push(ShownDir {
                    path: p.to_path_buf(),
                    identity: Some((at.dev, at.ino)),
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

    fn line(dev: (u32, u32), root: &str, point: &Path, read_only: bool) -> MountLine {
        MountLine {
            id: 0,
            dev,
            root: root.into(),
            point: point.to_path_buf(),
            read_only,
            fuse: None,
        }
    }

    /// What is at `p`, as though the mounts of `table` were there: a
    /// directory or file of the test's, the root of the last mount the
    /// table names at `p`.
    fn as_mounted(table: &MountTable, p: &Path) -> std::io::Result<MountPointStat> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(p)?;
        Ok(MountPointStat {
            dir: meta.is_dir(),
            dev: meta.dev(),
            ino: meta.ino(),
            root_of_mount: table.0.iter().rev().find(|l| l.point == p).map(|l| l.id),
        })
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
            reaches_home: &|_, _, _| false,
        };
        for (i, l) in table.iter_mut().enumerate() {
            l.id = 100 + i as u64;
        }
        let table = MountTable(table);
        let mut v = ViewSpec::default();
        plan_submounts_with(&r, &mut v, &home, &table, &Resolver::new(), &|p| {
            Ok(as_mounted(&table, p)?)
        });
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

    /// A line of the table is shown only as the mount it names: when the
    /// object at its path is not that mount's root (the home's owner
    /// swapped the directories above it after the table was read, so that
    /// another mount, an alias of the home, or a plain directory stands
    /// there; or a later mount covers it), it is named, never shown as a
    /// layer judged by the line's filesystem and root.
    #[test]
    fn a_line_is_shown_only_as_the_mount_at_its_path() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        for d in ["kept", "swapped", "plain"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        let table = MountTable(vec![
            MountLine {
                id: 7,
                dev: (0, 40),
                root: "/".into(),
                point: home.join("kept"),
                read_only: false,
                fuse: None,
            },
            MountLine {
                id: 8,
                dev: (0, 41),
                root: "/cache".into(),
                point: home.join("swapped"),
                read_only: false,
                fuse: None,
            },
            MountLine {
                id: 9,
                dev: (0, 42),
                root: "/cache".into(),
                point: home.join("plain"),
                read_only: false,
                fuse: None,
            },
        ]);
        let me = HostUser {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        let image = super::super::super::spec::ImageProfile::default_profile();
        let (ws, state) = (t.path().join("ws"), t.path().join("state"));
        let r = ViewRequest {
            user: &me,
            env: &[],
            workspace: &ws,
            state_dir: &state,
            image: &image,
            policy_masks: &[],
            reaches_home: &|_, _, _| false,
        };
        // Now: `kept` is its mount's root, another mount (an alias of the
        // home, say) stands at `swapped`, and `plain` is no mount's root.
        let now = |p: &Path| -> Result<MountPointStat, Refusal> {
            let mut at = as_mounted(&table, p)?;
            at.root_of_mount = match p.file_name().and_then(|n| n.to_str()) {
                Some("swapped") => Some(31),
                Some("plain") => None,
                _ => at.root_of_mount,
            };
            Ok(at)
        };
        let mut v = ViewSpec::default();
        plan_submounts_with(&r, &mut v, &home, &table, &Resolver::new(), &now);
        let layers: Vec<&Path> = v.layers.iter().map(|l| l.path.as_path()).collect();
        assert_eq!(layers, [home.join("kept")], "{:?}", v.notes);
        for p in ["plain", "swapped"] {
            assert!(
                v.notes.iter().any(|n| n
                    .starts_with(&format!("hidden:{} (", home.join(p).display()))
                    && n.contains("path changed while the run was planned")),
                "{p}: {:?}",
                v.notes
            );
        }
    }

    /// A FUSE mount another user serves is named without being looked at
    /// (its server could keep the planner waiting forever); one the
    /// planner's own user serves is looked at as any other.
    #[test]
    fn a_fuse_mount_another_user_serves_is_not_looked_at() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let me = nix::unistd::geteuid().as_raw();
        let mut table = Vec::new();
        for (i, (name, fuse)) in [
            ("theirs", Some(Some(me.wrapping_add(1)))),
            ("unnamed", Some(None)),
            ("mine", Some(Some(me))),
        ]
        .into_iter()
        .enumerate()
        {
            std::fs::create_dir_all(home.join(name)).unwrap();
            table.push(MountLine {
                id: 50 + i as u64,
                dev: (0, 70 + i as u32),
                root: "/".into(),
                point: home.join(name),
                read_only: false,
                fuse,
            });
        }
        let table = MountTable(table);
        let user = HostUser {
            uid: me,
            gid: 0,
            groups: vec![],
        };
        let image = super::super::super::spec::ImageProfile::default_profile();
        let (ws, state) = (t.path().join("ws"), t.path().join("state"));
        let r = ViewRequest {
            user: &user,
            env: &[],
            workspace: &ws,
            state_dir: &state,
            image: &image,
            policy_masks: &[],
            reaches_home: &|_, _, _| false,
        };
        let looked = std::cell::RefCell::new(Vec::new());
        let look = |p: &Path| {
            looked.borrow_mut().push(p.to_path_buf());
            as_mounted(&table, p)
        };
        let mut v = ViewSpec::default();
        plan_submounts_with(&r, &mut v, &home, &table, &Resolver::new(), &|p| {
            Ok(look(p)?)
        });
        assert_eq!(*looked.borrow(), [home.join("mine")]);
        let layers: Vec<&Path> = v.layers.iter().map(|l| l.path.as_path()).collect();
        assert_eq!(layers, [home.join("mine")], "{:?}", v.notes);
        for p in ["theirs", "unnamed"] {
            assert!(
                v.notes
                    .iter()
                    .any(|n| n
                        .starts_with(&format!("hidden:{} (a FUSE mount", home.join(p).display()))),
                "{p}: {:?}",
                v.notes
            );
        }
    }
}
