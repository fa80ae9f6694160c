//! The change tree a reviewer reads: paths the verdict flagged (forbidden,
//! surprise) are always on their own line; a directory whose subtree holds
//! only ordinary changes, more than a handful of them, is one line with a
//! count. Three hundred reformatted files under `fmt/` are one line; the
//! one sensitive config beside them is never inside a count.

use std::collections::BTreeMap;

use crate::model::{Change, ChangeKind};

/// More ordinary changes than this under one directory are collapsed.
pub const COLLAPSE_OVER: usize = 3;

/// Why a path is shown on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flag {
    #[default]
    Ordinary,
    /// Written outside `expected_writes` (or in a read-only run).
    Surprise,
    /// Touched a path the intent forbids.
    Forbidden,
}

/// One line of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeLine {
    /// One change: its index in the record's change list, its flag and its
    /// depth under the workspace root (for indentation).
    Path {
        index: usize,
        flag: Flag,
        depth: usize,
    },
    /// Ordinary changes under `dir` (workspace-relative, escaped for a
    /// terminal, ending in `/`), counted by kind. `only_here`: the count is
    /// of the files directly in `dir` beside flagged paths, not its subtree.
    Collapsed {
        dir: String,
        depth: usize,
        counts: KindCounts,
        only_here: bool,
    },
}

/// How many changes of each kind a collapsed line stands for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindCounts {
    pub created: usize,
    pub modified: usize,
    pub deleted: usize,
    pub metadata: usize,
    pub identical: usize,
}

impl KindCounts {
    fn add(&mut self, k: ChangeKind) {
        match k {
            ChangeKind::Created => self.created += 1,
            ChangeKind::Modified => self.modified += 1,
            ChangeKind::Deleted => self.deleted += 1,
            ChangeKind::Metadata => self.metadata += 1,
            ChangeKind::Identical => self.identical += 1,
        }
    }

    pub fn total(&self) -> usize {
        self.created + self.modified + self.deleted + self.metadata + self.identical
    }

    /// `300 modified, 2 created`.
    pub fn describe(&self) -> String {
        let parts = [
            (self.created, "created"),
            (self.modified, "modified"),
            (self.deleted, "deleted"),
            (self.metadata, "metadata"),
            (self.identical, "identical rewrite"),
        ];
        parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A directory of the change tree (path components as raw bytes).
#[derive(Default)]
struct Node {
    /// Changes whose path is directly in this directory: (name, index, kind).
    files: Vec<(Vec<u8>, usize, ChangeKind)>,
    dirs: BTreeMap<Vec<u8>, Node>,
    /// Subtree totals.
    flagged: usize,
    /// The most severe flag in the subtree.
    worst: Flag,
    ordinary: KindCounts,
}

/// The tree lines for `changes`, flagging each with `flag_of(index)`.
/// `expand_all` shows every path (no collapsing).
pub fn change_tree(
    changes: &[Change],
    flag_of: impl Fn(usize) -> Flag,
    expand_all: bool,
) -> Vec<TreeLine> {
    let mut root = Node::default();
    for (i, c) in changes.iter().enumerate() {
        let bytes = c.path_bytes();
        let parts: Vec<&[u8]> = bytes
            .split(|b| *b == b'/')
            .filter(|p| !p.is_empty())
            .collect();
        let Some((name, dirs)) = parts.split_last() else {
            continue;
        };
        let flag = flag_of(i);
        let mut node = &mut root;
        for d in dirs {
            count(node, flag, c.kind);
            node = node.dirs.entry(d.to_vec()).or_default();
        }
        count(node, flag, c.kind);
        node.files.push((name.to_vec(), i, c.kind));
    }
    let mut out = Vec::new();
    emit(&root, "", 0, &flag_of, expand_all, &mut out);
    out
}

fn count(node: &mut Node, flag: Flag, kind: ChangeKind) {
    node.worst = node.worst.max(flag);
    if flag != Flag::Ordinary {
        node.flagged += 1;
    } else {
        node.ordinary.add(kind);
    }
}

fn emit(
    node: &Node,
    prefix: &str,
    depth: usize,
    flag_of: &impl Fn(usize) -> Flag,
    expand_all: bool,
    out: &mut Vec<TreeLine>,
) {
    let ordinary_here = node
        .files
        .iter()
        .filter(|(_, i, _)| flag_of(*i) == Flag::Ordinary)
        .count();
    let collapse_here = !expand_all && ordinary_here > COLLAPSE_OVER;
    // Files and subdirectories together, the most severe first (a
    // directory ranks by the worst path under it), then by name.
    enum Item<'a> {
        File(usize, ChangeKind),
        Dir(&'a Node),
    }
    let mut items: Vec<(Flag, &Vec<u8>, Item)> = node
        .files
        .iter()
        .map(|(n, i, k)| (flag_of(*i), n, Item::File(*i, *k)))
        .chain(node.dirs.iter().map(|(n, d)| (d.worst, n, Item::Dir(d))))
        .collect();
    items.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut here = KindCounts::default();
    for (flag, name, item) in items {
        match item {
            Item::File(index, kind) => {
                if flag == Flag::Ordinary && collapse_here {
                    here.add(kind);
                } else {
                    out.push(TreeLine::Path { index, flag, depth });
                }
            }
            Item::Dir(child) => {
                let path = format!(
                    "{prefix}{}/",
                    crate::model::text::escape_for_humans(name.as_slice())
                );
                if !expand_all && child.flagged == 0 && child.ordinary.total() > COLLAPSE_OVER {
                    out.push(TreeLine::Collapsed {
                        dir: path,
                        depth,
                        counts: child.ordinary,
                        only_here: false,
                    });
                } else {
                    emit(child, &path, depth + 1, flag_of, expand_all, out);
                }
            }
        }
    }
    if collapse_here {
        out.push(TreeLine::Collapsed {
            dir: if prefix.is_empty() {
                "./".into()
            } else {
                prefix.to_string()
            },
            depth,
            counts: here,
            only_here: node.flagged > 0 || !node.dirs.is_empty(),
        });
    }
}
