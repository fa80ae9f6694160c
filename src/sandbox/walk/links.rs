//! Whether a symlink the command made can lead out of the workspace.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Whether a symlink at `rel` with `target` resolves (lexically) outside the
/// workspace.
pub(in crate::sandbox) fn symlink_escapes(rel: &Path, target: &Path, workspace: &Path) -> bool {
    if target.is_absolute() {
        return !target.starts_with(workspace);
    }
    let mut depth: i64 = rel.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// What a path of the merged tree is, for [`link_leaves_workspace`].
pub(in crate::sandbox) enum LinkLookup {
    /// A symlink with this target.
    Link(Vec<u8>),
    /// Something that is not a symlink.
    Other,
    /// Nothing there.
    Missing,
    /// Could not be looked at.
    Unknown,
}

/// Whether the symlink at `rel` (workspace-relative) with `target`, resolved
/// the way the kernel would in the tree `lookup` describes — through other
/// links, `..` after a link taken physically — can leave the workspace.
///
/// Judged escaping as well: a resolution that needs more than 40 links, a
/// component that cannot be looked at, and a link that resolves to one of
/// its own ancestors (a directory loop, through which a chain of links can
/// climb any number of levels: `sub/up -> ..` makes
/// `sub/up/sub/up/../../..` climb out).
pub(in crate::sandbox) fn link_leaves_workspace(
    rel: &[u8],
    target: &[u8],
    workspace: &Path,
    lookup: &mut dyn FnMut(&[u8]) -> LinkLookup,
) -> bool {
    let split = |b: &[u8]| -> Vec<Vec<u8>> {
        b.split(|c| *c == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .map(|c| c.to_vec())
            .collect()
    };
    let ws_parts = split(workspace.as_os_str().as_bytes());
    let parent: Vec<Vec<u8>> = {
        let mut p = split(rel);
        p.pop();
        p
    };
    let mut cur: Vec<Vec<u8>> = parent.clone();
    let mut queue: std::collections::VecDeque<Vec<u8>> = Default::default();
    // Start (or restart, for an absolute target) a resolution.
    let absolute =
        |t: &[u8], cur: &mut Vec<Vec<u8>>, q: &mut std::collections::VecDeque<Vec<u8>>| {
            let parts = split(t);
            if parts.len() < ws_parts.len() || parts[..ws_parts.len()] != ws_parts[..] {
                return false;
            }
            cur.clear();
            for p in parts[ws_parts.len()..].iter().rev() {
                q.push_front(p.clone());
            }
            true
        };
    if target.first() == Some(&b'/') {
        if !absolute(target, &mut cur, &mut queue) {
            return true;
        }
    } else {
        queue.extend(split(target));
    }
    let mut hops = 0;
    while let Some(c) = queue.pop_front() {
        if c == b".." {
            if cur.pop().is_none() {
                return true;
            }
            continue;
        }
        let mut cand = cur.join(&b'/');
        if !cand.is_empty() {
            cand.push(b'/');
        }
        cand.extend_from_slice(&c);
        match lookup(&cand) {
            LinkLookup::Link(t) => {
                hops += 1;
                if hops > 40 {
                    return true;
                }
                if t.first() == Some(&b'/') {
                    if !absolute(&t, &mut cur, &mut queue) {
                        return true;
                    }
                } else {
                    for p in split(&t).into_iter().rev() {
                        queue.push_front(p);
                    }
                }
            }
            LinkLookup::Other | LinkLookup::Missing => cur.push(c),
            LinkLookup::Unknown => return true,
        }
    }
    // A loop: the link lands on its own directory or one above it.
    cur.len() <= parent.len() && parent[..cur.len()] == cur[..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree<'a>(
        links: &'a [(&'a str, &'a str)],
        dirs: &'a [&'a str],
    ) -> impl FnMut(&[u8]) -> LinkLookup + 'a {
        move |p: &[u8]| {
            if let Some((_, t)) = links.iter().find(|(l, _)| l.as_bytes() == p) {
                LinkLookup::Link(t.as_bytes().to_vec())
            } else if dirs.iter().any(|d| d.as_bytes() == p) {
                LinkLookup::Other
            } else {
                LinkLookup::Missing
            }
        }
    }

    #[test]
    fn links_are_judged_by_resolution() {
        let ws = Path::new("/home/me/site");
        let esc = |rel: &str, target: &str, links: &[(&str, &str)], dirs: &[&str]| {
            link_leaves_workspace(
                rel.as_bytes(),
                target.as_bytes(),
                ws,
                &mut tree(links, dirs),
            )
        };
        // Plain links inside stay inside.
        assert!(!esc("a/l", "../b/c", &[], &["a", "b"]));
        assert!(!esc("l", "/home/me/site/b", &[], &["b"]));
        // Absolute through `..`: textually under the workspace, resolves out.
        assert!(esc("l", "/home/me/site/../../../../etc/passwd", &[], &[]));
        // A chain through a loop link inside the workspace.
        assert!(esc(
            "x",
            "sub/up/sub/up/../../../../etc/passwd",
            &[("sub/up", "..")],
            &["sub"]
        ));
        // The loop link itself is judged escaping (it lets chains climb).
        assert!(esc("sub/up", "..", &[], &["sub"]));
        assert!(esc("cur", ".", &[], &[]));
        // Through another link that points out.
        assert!(esc("a", "b/x", &[("b", "/etc")], &[]));
        assert!(!esc("a", "b/x", &[("b", "/home/me/site/d")], &["d"]));
        // Too many hops.
        assert!(esc("a", "p", &[("p", "q"), ("q", "p")], &[]));
        // A missing component followed by `..` is taken lexically.
        assert!(esc("l", "nope/../..", &[], &[]));
        assert!(!esc("d/l", "nope/../f", &[], &["d"]));
    }

    #[test]
    fn symlink_escape_detection() {
        let ws = Path::new("/home/me/site");
        assert!(!symlink_escapes(Path::new("a/link"), Path::new("../b"), ws));
        assert!(symlink_escapes(
            Path::new("a/link"),
            Path::new("../../b"),
            ws
        ));
        assert!(symlink_escapes(
            Path::new("link"),
            Path::new("/etc/passwd"),
            ws
        ));
        assert!(!symlink_escapes(
            Path::new("link"),
            Path::new("/home/me/site/x"),
            ws
        ));
        assert!(symlink_escapes(
            Path::new("link"),
            Path::new("a/../../x"),
            ws
        ));
    }
}
