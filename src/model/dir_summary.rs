//! A long change list summarised by directory, for people and for the
//! journal: `node_modules/ (50,000 created in 2,000 dirs)`. The full list
//! stays in the run record; paths a verdict flagged (forbidden, surprise)
//! are named on their own by every caller, never only inside a count.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::change::ChangeKind;

/// At most this many groups: the deepest grouping (up to
/// [`SUMMARY_DEPTH_MAX`] directory levels) that stays within it is chosen.
pub(crate) const SUMMARY_GROUPS_MAX: usize = 24;
/// Groups are never deeper than this many directory levels.
pub(crate) const SUMMARY_DEPTH_MAX: usize = 3;

/// The changes below one directory, counted by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirSummary {
    /// Workspace-relative, ending in `/`; `./` for entries at the root.
    pub dir: String,
    pub created: usize,
    pub modified: usize,
    pub deleted: usize,
    pub metadata: usize,
    pub identical: usize,
    /// How many distinct directories these changes lie in.
    pub dirs: usize,
}

impl DirSummary {
    /// `50,000 created, 3 modified in 2,000 dirs`.
    pub(crate) fn counts_text(&self) -> String {
        let parts: Vec<String> = [
            (self.created, "created"),
            (self.modified, "modified"),
            (self.deleted, "deleted"),
            (self.metadata, "metadata"),
            (self.identical, "identical"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{} {what}", thousands(*n)))
        .collect();
        let dirs = if self.dirs > 1 {
            format!(" in {} dirs", thousands(self.dirs))
        } else {
            String::new()
        };
        format!("{}{dirs}", parts.join(", "))
    }
}

/// `50000` as `50,000`.
pub(crate) fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The directory part of `path` (without its last component), cut to
/// `depth` levels, ending in `/`; `./` at the root.
fn group_of(path: &str, depth: usize) -> &str {
    let Some(parent_end) = path.rfind('/') else {
        return "./";
    };
    let mut end = 0;
    for (levels, (i, _)) in path[..parent_end]
        .match_indices('/')
        .chain(std::iter::once((parent_end, "/")))
        .enumerate()
    {
        end = i;
        if levels + 1 == depth {
            break;
        }
    }
    &path[..=end]
}

/// Summarise `(path, kind)` pairs by directory: linear in the number of
/// changes for each depth tried, whatever their number.
pub(crate) fn summarise_by_dir(changes: &[(&str, ChangeKind)]) -> Vec<DirSummary> {
    let groups_at = |depth: usize| {
        changes
            .iter()
            .map(|(p, _)| group_of(p, depth))
            .collect::<HashSet<_>>()
            .len()
    };
    let mut depth = 1;
    while depth < SUMMARY_DEPTH_MAX && groups_at(depth + 1) <= SUMMARY_GROUPS_MAX {
        depth += 1;
    }
    let mut groups: BTreeMap<&str, (DirSummary, HashSet<&str>)> = BTreeMap::new();
    for (p, kind) in changes {
        let g = groups.entry(group_of(p, depth)).or_default();
        match kind {
            ChangeKind::Created => g.0.created += 1,
            ChangeKind::Modified => g.0.modified += 1,
            ChangeKind::Deleted => g.0.deleted += 1,
            ChangeKind::Metadata => g.0.metadata += 1,
            ChangeKind::Identical => g.0.identical += 1,
        }
        g.1.insert(group_of(p, usize::MAX));
    }
    groups
        .into_iter()
        .map(|(dir, (mut s, dirs))| {
            s.dir = dir.to_string();
            s.dirs = dirs.len();
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_the_deepest_level_that_stays_short() {
        let mut paths: Vec<String> = (0..2000)
            .flat_map(|d| (0..25).map(move |f| format!("node_modules/pkg{d:04}/f{f}.js")))
            .collect();
        paths.push("src/main.rs".into());
        paths.push("README.md".into());
        let pairs: Vec<(&str, ChangeKind)> = paths
            .iter()
            .map(|p| (p.as_str(), ChangeKind::Created))
            .collect();
        let s = summarise_by_dir(&pairs);
        let dirs: Vec<&str> = s.iter().map(|g| g.dir.as_str()).collect();
        assert_eq!(dirs, ["./", "node_modules/", "src/"]);
        assert_eq!(s[1].created, 50_000);
        assert_eq!(s[1].dirs, 2000);
        assert_eq!(s[1].counts_text(), "50,000 created in 2,000 dirs");
        assert_eq!(s.iter().map(|g| g.created).sum::<usize>(), 50_002);
    }

    #[test]
    fn few_directories_are_shown_deeper() {
        let pairs = [
            ("a/b/c/d/e.txt", ChangeKind::Modified),
            ("a/b/x.txt", ChangeKind::Deleted),
            ("a/y.txt", ChangeKind::Created),
        ];
        let s = summarise_by_dir(&pairs);
        let dirs: Vec<&str> = s.iter().map(|g| g.dir.as_str()).collect();
        assert_eq!(dirs, ["a/", "a/b/", "a/b/c/"]);
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }
}
