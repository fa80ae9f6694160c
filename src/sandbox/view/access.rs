//! What a user may reach on the host, judged from the file modes the way
//! the kernel would, without following symlinks; and where other users'
//! homes are. The view never shows a directory the user could not reach
//! live, nor one inside (or holding) another user's home.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::Resolver;

/// The user a view is planned for: the uid the command runs as on the
/// host and its groups.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostUser {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl HostUser {
    /// Mode bits `want` (`r` = 4, `w` = 2, `x` = 1) of `meta`, for this
    /// user: owner, else group, else other. Root passes (it would live).
    fn may(&self, meta: &std::fs::Metadata, want: u32) -> bool {
        if self.uid == 0 {
            return true;
        }
        let mode = meta.mode();
        let bits = if meta.uid() == self.uid {
            (mode >> 6) & 7
        } else if meta.gid() == self.gid || self.groups.contains(&meta.gid()) {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        bits & want == want
    }

    /// Could this user reach `path` (absolute, without `..`) on the host,
    /// with every directory on the way searchable and no symlink among
    /// its components? The final component's metadata when so. Access
    /// control lists are not read: a directory with one is judged by its
    /// mode bits, which the kernel keeps as their mask. Looked at through
    /// `look` (nothing on a mount it does not cross).
    pub(crate) fn reach(&self, look: &Resolver, path: &Path) -> Option<std::fs::Metadata> {
        let opened = look
            .open_exact_through(path, &mut |dir| dir.is_dir() && self.may(dir, 1))
            .ok()?;
        opened.meta().ok()
    }

    /// Could this user run the regular file `path`?
    pub(crate) fn may_run(&self, look: &Resolver, path: &Path) -> bool {
        self.reach(look, path)
            .is_some_and(|m| m.is_file() && self.may(&m, 1) && m.mode() & 0o111 != 0)
    }

    /// Could this user use `path` live: search it (a directory) or read
    /// it (anything else)?
    pub(crate) fn may_use(&self, look: &Resolver, path: &Path) -> bool {
        self.reach(look, path)
            .is_some_and(|m| self.may(&m, if m.is_dir() { 1 } else { 4 }))
    }

    /// Could this user search the directory `path`?
    pub(crate) fn may_search(&self, look: &Resolver, path: &Path) -> bool {
        self.reach(look, path)
            .is_some_and(|m| m.is_dir() && self.may(&m, 1))
    }
}

/// The homes of the host's other login accounts (uid 0 and uids from
/// 1000, as `/etc/passwd` lists them; `/` and relative homes left out),
/// for the user `uid`. Accounts only a directory service knows are not
/// listed: their homes are judged by the modes alone.
pub(crate) fn other_homes(uid: u32) -> Vec<(u32, PathBuf)> {
    use std::io::Read;
    let mut text = String::new();
    let read =
        std::fs::File::open("/etc/passwd").and_then(|f| f.take(4 << 20).read_to_string(&mut text));
    if read.is_err() {
        return Vec::new();
    }
    // A system account (uid below 1000) whose home is a directory it owns
    // is a user's home too (a test or service user with a real home).
    // Looked at through the resolver: such a home may be a directory the
    // agent made and mounted over.
    let look = Resolver::new();
    let owns = |u: u32, home: &Path| {
        let (Some(dir), Some(name)) = (home.parent(), home.file_name()) else {
            return false;
        };
        look.canonicalize(dir)
            .and_then(|d| Ok(look.open_exact(&d.join(name))?.meta()?))
            .is_ok_and(|m| m.is_dir() && m.uid() == u)
    };
    parse_other_homes(&text, uid, owns)
}

fn parse_other_homes(
    passwd: &str,
    uid: u32,
    owns: impl Fn(u32, &Path) -> bool,
) -> Vec<(u32, PathBuf)> {
    passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let (u, home) = (f.get(2)?.parse::<u32>().ok()?, PathBuf::from(f.get(5)?));
            let login = u == 0 || (1000..65534).contains(&u) || (u != 65534 && owns(u, &home));
            (u != uid && login && home.is_absolute() && home != Path::new("/")).then_some((u, home))
        })
        .collect()
}

/// `a` lies inside `b`, or `b` inside `a`.
pub(crate) fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_homes_are_login_accounts_but_the_user() {
        let p = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n\
                 a:x:1000:1000::/home/a:/bin/bash\nb:x:1001:1001::/home/b:/bin/bash\n\
                 nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\nweird:x:1002:1:::/bin/sh\n";
        let none = |_: u32, _: &Path| false;
        let h = parse_other_homes(p, 1000, none);
        assert_eq!(
            h,
            vec![
                (0, PathBuf::from("/root")),
                (1001, PathBuf::from("/home/b"))
            ]
        );
        assert_eq!(parse_other_homes(p, 0, none).len(), 2);
        // A system account owning its home directory counts.
        let sys = |u: u32, h: &Path| u == 1 && h == Path::new("/usr/sbin");
        assert_eq!(parse_other_homes(p, 1000, sys).len(), 3);
    }

    #[test]
    fn reach_follows_the_modes_and_refuses_symlinks() {
        let me = HostUser {
            uid: 4242,
            gid: 4242,
            groups: vec![],
        };
        let look = Resolver::new();
        assert!(me.may_search(&look, Path::new("/usr/bin")));
        assert!(me.may_run(&look, Path::new("/usr/bin/env")));
        let root_home = std::fs::symlink_metadata("/root").unwrap();
        if root_home.mode() & 0o001 == 0 {
            assert!(!me.may_search(&look, Path::new("/root")));
        }
        // Root passes every mode check; a symlink on the way still fails.
        let root = HostUser {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/usr", d.path().join("l")).unwrap();
        assert!(root.reach(&look, &d.path().join("l/bin")).is_none());
        assert!(root.reach(&look, d.path()).is_some());
    }
}
