//! What a command wrote outside the workspace: the upper layers of the
//! throwaway layers over the home, `/tmp` and `/var/tmp`, summarised by
//! directory (`rehearsal.outside_writes`). Metadata only (no content is
//! read), and like the workspace's walk its cost grows with what changed:
//! only the upper layers are walked, the lower ones looked up per
//! directory met, never listed.
//!
//! How entries are grouped: beneath a cache's root (the view's cache
//! table), at that root; a directory the run created (absent from the
//! real tree, or made opaque), with all it holds, at the directory holding
//! it; anything else (a file written, a link made, an entry deleted) at
//! its own directory.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::model::OutsideWrite;

/// At most this many directories are listed; the rest are counted.
const MAX_ROWS: usize = 200;
/// At most this many entries are visited in all (the layers' tmpfs caps
/// their inodes anyway).
const MAX_ENTRIES: u64 = 400_000;
/// Examples kept per row.
const MAX_EXAMPLES: usize = 3;

/// One throwaway layer to summarise.
pub(crate) struct OutsideLayer<'a> {
    /// Where the layer is mounted in the sandbox (the host path it covers).
    pub target: &'a Path,
    /// Its upper directory (may go through a `/proc/self/fd` link).
    pub upper: PathBuf,
    /// Its lower directory (the real tree), opened `O_PATH`.
    pub lower: &'a OwnedFd,
}

/// Which paths are caches: roots (absolute) and directory names, each with
/// its rule id.
pub(crate) struct CacheRules {
    pub roots: Vec<(PathBuf, String)>,
    pub dir_names: Vec<(String, String)>,
}

impl CacheRules {
    /// The cache a path lies in: (the cache's root, its rule).
    fn of(&self, path: &Path) -> Option<(PathBuf, &str)> {
        let mut best: Option<(&PathBuf, &str)> = None;
        for (root, rule) in &self.roots {
            if path.starts_with(root)
                && best.is_none_or(|(b, _)| root.as_os_str().len() > b.as_os_str().len())
            {
                best = Some((root, rule));
            }
        }
        if let Some((root, rule)) = best {
            // A named cache directory inside a root stays under the root.
            return Some((root.clone(), rule));
        }
        let mut at = PathBuf::new();
        for c in path.components() {
            at.push(c);
            if let Some((_, rule)) = self
                .dir_names
                .iter()
                .find(|(n, _)| c.as_os_str().as_bytes() == n.as_bytes())
            {
                return Some((at, rule));
            }
        }
        None
    }
}

#[derive(Default)]
struct Row {
    count: u64,
    bytes: u64,
    cache_rule: Option<String>,
    examples: Vec<String>,
}

struct Summary<'a> {
    rows: BTreeMap<PathBuf, Row>,
    caches: &'a CacheRules,
    /// Directories the sandbox made itself (a `HOME` the view created):
    /// walked as if they had been there.
    made: &'a [PathBuf],
    visited: u64,
}

impl Summary<'_> {
    /// Count `n` entries of `bytes` at `path` (written as `example`,
    /// relative to its group unless a cache regroups it).
    fn add(&mut self, path: &Path, n: u64, bytes: u64) {
        let (group, rule) = match self.caches.of(path) {
            Some((root, rule)) => (root, Some(rule.to_string())),
            None => (path.parent().unwrap_or(path).to_path_buf(), None),
        };
        let row = self.rows.entry(group.clone()).or_default();
        row.count += n;
        row.bytes += bytes;
        row.cache_rule = rule;
        if row.examples.len() < MAX_EXAMPLES
            && let Ok(rel) = path.strip_prefix(&group)
            && let Some(first) = rel.components().next()
        {
            let e = String::from_utf8_lossy(first.as_os_str().as_bytes()).into_owned();
            if !row.examples.contains(&e) {
                row.examples.push(e);
            }
        }
    }
}

/// Is `rel` a directory in the lower layer (the real tree)?
fn lower_has_dir(lower: &OwnedFd, rel: &Path) -> bool {
    if rel.as_os_str().is_empty() {
        return true;
    }
    match nix::sys::stat::fstatat(lower.as_fd(), rel, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st.st_mode & libc::S_IFMT == libc::S_IFDIR,
        // Not visible to the walk (no search right): the command could
        // not have created a copy of it either; walked as existing.
        Err(nix::errno::Errno::EACCES) => true,
        Err(_) => false,
    }
}

/// Entries and bytes of a tree the run created (the directory included).
fn count_tree(dir: &Path, s: &mut Summary) -> (u64, u64) {
    let (mut n, mut bytes) = (1u64, 0u64);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (n, bytes);
    };
    for e in rd.flatten() {
        s.visited += 1;
        if s.visited > MAX_ENTRIES {
            break;
        }
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if m.is_dir() {
            let (a, b) = count_tree(&e.path(), s);
            n += a;
            bytes += b;
        } else {
            n += 1;
            bytes += if m.is_file() { m.size() } else { 0 };
        }
    }
    (n, bytes)
}

fn walk_dir(layer: &OutsideLayer, rel: &Path, s: &mut Summary) {
    let dir = layer.upper.join(rel);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in rd.flatten() {
        s.visited += 1;
        if s.visited > MAX_ENTRIES {
            return;
        }
        let rel = rel.join(e.file_name());
        let path = layer.target.join(&rel);
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        let ft = m.file_type();
        if ft.is_char_device() && m.rdev() == 0 {
            // A whiteout: the entry was deleted.
            s.add(&path, 1, 0);
        } else if ft.is_dir() {
            let opaque = xattr::get(e.path(), "user.overlay.opaque")
                .ok()
                .flatten()
                .is_some_and(|v| v == b"y");
            let made = s.made.iter().any(|m| m.starts_with(&path));
            if made || (!opaque && lower_has_dir(layer.lower, &rel)) {
                walk_dir(layer, &rel, s);
            } else {
                let (n, bytes) = count_tree(&e.path(), s);
                s.add(&path, n, bytes);
            }
        } else {
            s.add(&path, 1, if ft.is_file() { m.size() } else { 0 });
        }
    }
}

/// The summary of every layer's writes, and how many directories were
/// left out of it past [`MAX_ROWS`] (their entries counted).
pub(crate) fn summarise_outside_writes(
    layers: &[OutsideLayer],
    caches: &CacheRules,
    made: &[PathBuf],
) -> (Vec<OutsideWrite>, u64) {
    let mut s = Summary {
        rows: BTreeMap::new(),
        caches,
        made,
        visited: 0,
    };
    for l in layers {
        walk_dir(l, Path::new(""), &mut s);
    }
    let mut unlisted = 0;
    let mut out = Vec::new();
    for (path, row) in s.rows {
        if out.len() >= MAX_ROWS {
            unlisted += row.count;
            continue;
        }
        out.push(OutsideWrite {
            path: String::from_utf8_lossy(path.as_os_str().as_bytes()).into_owned(),
            count: row.count,
            bytes: row.bytes,
            cache: row.cache_rule.is_some(),
            cache_rule: row.cache_rule,
            examples: row.examples,
        });
    }
    if s.visited > MAX_ENTRIES {
        unlisted += 1;
    }
    (out, unlisted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> CacheRules {
        CacheRules {
            roots: vec![
                ("/h/.cache".into(), "cache:xdg-cache".into()),
                ("/tmp".into(), "cache:tmp".into()),
            ],
            dir_names: vec![("__pycache__".into(), "cache:pycache".into())],
        }
    }

    #[test]
    fn writes_are_grouped_by_cache_new_tree_or_directory() {
        let upper = tempfile::tempdir().unwrap();
        let lower = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir_all(lower.path().join(".local/lib")).unwrap();
        // The home's cache directory exists already (as it does for a user
        // who ran anything); the run adds a tool's tree under it.
        std::fs::create_dir_all(lower.path().join(".cache")).unwrap();
        std::fs::create_dir_all(u.join(".cache/tool")).unwrap();
        std::fs::write(u.join(".cache/tool/state.json"), "12345").unwrap();
        std::fs::write(u.join(".gitconfig"), "[user]\n").unwrap();
        std::fs::create_dir_all(u.join(".local/lib/site/pkg")).unwrap();
        std::fs::write(u.join(".local/lib/site/pkg/a.py"), "x").unwrap();
        std::fs::create_dir_all(u.join(".local/lib/mod/__pycache__")).unwrap();
        std::fs::create_dir_all(lower.path().join(".local/lib/mod")).unwrap();
        std::fs::write(u.join(".local/lib/mod/__pycache__/m.pyc"), "pyc").unwrap();
        let lower_fd: OwnedFd = std::fs::File::open(lower.path()).unwrap().into();
        let layer = OutsideLayer {
            target: Path::new("/h"),
            upper: u.to_path_buf(),
            lower: &lower_fd,
        };
        let (rows, unlisted) = summarise_outside_writes(&[layer], &rules(), &[]);
        assert_eq!(unlisted, 0);
        let row = |p: &str| {
            rows.iter()
                .find(|r| r.path == p)
                .unwrap_or_else(|| panic!("{p}: {rows:?}"))
        };
        let cache = row("/h/.cache");
        assert!(
            cache.cache && cache.count == 2 && cache.bytes == 5,
            "{cache:?}"
        );
        assert_eq!(cache.examples, vec!["tool"]);
        let home = row("/h");
        assert!(!home.cache && home.count == 1, "{home:?}");
        assert_eq!(home.examples, vec![".gitconfig"]);
        let site = row("/h/.local/lib");
        assert!(!site.cache && site.count == 3, "{site:?}");
        assert_eq!(site.examples, vec!["site"]);
        let pyc = row("/h/.local/lib/mod/__pycache__");
        assert_eq!(pyc.cache_rule.as_deref(), Some("cache:pycache"));
    }
}
