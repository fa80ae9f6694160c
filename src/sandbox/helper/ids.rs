//! After P8, in an ordinary user's rehearsal that failed: the workspace
//! entries the sandbox could not change because their owner or group is
//! not mapped into its user namespace (see `sandbox::ids`). They show
//! inside as the overflow ids, and the overlay cannot copy them up to
//! change them (EOVERFLOW); live, the command may well change them. The
//! scan reads the lower layer (the real workspace, read-only) from P1's
//! descriptor, directory by directory, never following a link, within an
//! entry budget, and lists the topmost such entries by name.
//!
//! It runs only when it can matter: a self plan (a root rehearsal maps ids
//! 0-65535), and a step that exited non-zero or output that carries the
//! error's text; a run that hides both is not scanned (docs/services.md).

use std::os::fd::{AsFd, OwnedFd};

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, fstatat};

use super::super::spec::SandboxSpec;
use super::init::{LowerLayer, RunIds};
use crate::model::text::escape_for_humans;
use crate::model::{RehearsalReport, UnmappedEntry, UnmappedIds};

/// Entries the scan visits at most.
const BUDGET: u64 = 200_000;

/// What the error looks like in a tool's output (C library, Python, Rust,
/// Node): the scan's trigger besides a non-zero exit.
const EOVERFLOW_TEXTS: &[&[u8]] = &[
    b"Value too large for defined data type",
    b"value too large for defined data type",
    b"EOVERFLOW",
    b"[Errno 75]",
    b"(os error 75)",
];

/// P7 (self plan with delegated groups): which of them the id map holds,
/// read from the namespace's own `gid_map` (`newgidmap` may have refused:
/// not installed setuid, or a caller under `no_new_privs`).
pub(super) fn describe_mapped_groups(spec: &SandboxSpec) -> Option<String> {
    if spec.mapped_groups.is_empty() {
        return None;
    }
    let map = std::fs::read_to_string("/proc/self/gid_map").unwrap_or_default();
    let held = |g: u32| {
        map.lines().any(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            f.len() == 3 && (f[1]..f[1] + f[2]).contains(&u64::from(g))
        })
    };
    let (ok, not): (Vec<u32>, Vec<u32>) = spec.mapped_groups.iter().partition(|g| held(**g));
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    Some(if not.is_empty() {
        format!(
            "groups: {} mapped through newgidmap (delegated in /etc/subgid)",
            list(&ok)
        )
    } else {
        format!(
            "groups: newgidmap did not map the delegated groups {} (is it installed setuid root, and does the caller run without no_new_privs?); only the caller's own group is mapped",
            list(&not)
        )
    })
}

/// Fill `report.unmapped` when the run is a user's and failed.
pub(super) fn name_unmapped_entries(
    ids: &RunIds,
    lower: &LowerLayer,
    report: &mut RehearsalReport,
) {
    if ids.shifted {
        return;
    }
    let failed = report.steps.iter().any(|s| s.exit_code != Some(0))
        || report.exit_code != Some(0)
        || [&report.stdout, &report.stderr]
            .iter()
            .any(|out| EOVERFLOW_TEXTS.iter().any(|t| contains(out, t)));
    if failed {
        report.unmapped = scan(&lower.fd);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The kernel's overflow id (how an unmapped id shows inside).
fn overflow(which: &str) -> u32 {
    std::fs::read_to_string(format!("/proc/sys/kernel/overflow{which}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65534)
}

fn scan(root: &OwnedFd) -> UnmappedIds {
    let (ou, og) = (overflow("uid"), overflow("gid"));
    let mut out = UnmappedIds::default();
    let mut visited = 0u64;
    let unmapped = |uid: u32, gid: u32| (uid == ou, gid == og);
    let Ok(st) = fstatat(root, "", AtFlags::AT_EMPTY_PATH) else {
        return out;
    };
    // (directory, its path, the listed entry it lies in)
    let mut stack: Vec<(OwnedFd, Vec<u8>, Option<usize>)> = Vec::new();
    let root_listed = note(&mut out, b".", unmapped(st.st_uid, st.st_gid), None);
    if let Ok(fd) = nix::fcntl::openat(root, ".", dir_flags(), Mode::empty()) {
        stack.push((fd, Vec::new(), root_listed));
    }
    'dirs: while let Some((fd, path, listed_in)) = stack.pop() {
        let Ok(mut dir) = Dir::from_fd(fd) else {
            continue;
        };
        let entries: Vec<(Vec<u8>, Option<Type>)> = dir
            .iter()
            .flatten()
            .map(|e| (e.file_name().to_bytes().to_vec(), e.file_type()))
            .filter(|(n, _)| n != b"." && n != b"..")
            .collect();
        for (name, _) in entries {
            visited += 1;
            if visited > BUDGET {
                out.cut = true;
                break 'dirs;
            }
            let Ok(st) = fstatat(dir.as_fd(), name.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            let mut rel = path.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(&name);
            let listed = note(&mut out, &rel, unmapped(st.st_uid, st.st_gid), listed_in);
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            if is_dir
                && let Ok(sub) =
                    nix::fcntl::openat(dir.as_fd(), name.as_slice(), dir_flags(), Mode::empty())
            {
                stack.push((sub, rel, listed));
            }
        }
    }
    out.entries.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Count an entry whose ids are `(owner, group)` unmapped: under the
/// listed entry it lies in, or as a new listed entry. Returns the listed
/// entry its children lie in.
fn note(
    out: &mut UnmappedIds,
    rel: &[u8],
    (owner, group): (bool, bool),
    listed_in: Option<usize>,
) -> Option<usize> {
    if !(owner || group) {
        return listed_in;
    }
    if let Some(i) = listed_in {
        if let Some(e) = out.entries.get_mut(i) {
            e.beneath += 1;
        }
        return listed_in;
    }
    if out.entries.len() >= UnmappedIds::MAX_LISTED {
        out.more += 1;
        // Its children are counted with it (not listed on their own).
        return Some(usize::MAX);
    }
    out.entries.push(UnmappedEntry {
        path: escape_for_humans(rel),
        owner_unmapped: owner,
        group_unmapped: group,
        beneath: 0,
    });
    Some(out.entries.len() - 1)
}
