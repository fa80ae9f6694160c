//! Deletions: whiteouts, deleted lower directories listed entry by entry,
//! opaque directories hiding the lower one.

use std::io::{self};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::OFlag;

use super::layers::{LowerEntry, lookup_lower, open_lower};
use super::{DiffError, Lower, MAX_DELETED_EXPANSION};
use crate::model::change::{Change, ChangeKind, FileType};

pub(super) fn push_deleted(
    changes: &mut Vec<Change>,
    lower: &Lower,
    rel: &Path,
    l: &LowerEntry,
) -> Result<(), DiffError> {
    let mut c = Change::new(rel.as_os_str().as_bytes(), ChangeKind::Deleted, l.file_type);
    c.before = l.hash.clone();
    c.content_withheld = l.withheld;
    c.mode_before = Some(l.mode);
    changes.push(c);
    if l.file_type == FileType::Dir {
        let mut budget = MAX_DELETED_EXPANSION;
        expand_lower_dir(changes, lower, rel, &mut budget)?;
    }
    Ok(())
}

/// List what a deleted lower directory held, as deletions.
pub(super) fn expand_lower_dir(
    changes: &mut Vec<Change>,
    lower: &Lower,
    rel: &Path,
    budget: &mut usize,
) -> Result<(), DiffError> {
    for name in list_lower_dir(lower, rel)? {
        if *budget == 0 {
            return Ok(());
        }
        *budget -= 1;
        let child = rel.join(std::ffi::OsStr::from_bytes(&name));
        if let Some(l) = lookup_lower(lower, &child).map_err(|source| DiffError::Lower {
            path: child.display().to_string(),
            source,
        })? {
            let mut c = Change::new(
                child.as_os_str().as_bytes(),
                ChangeKind::Deleted,
                l.file_type,
            );
            c.before = l.hash.clone();
            c.mode_before = Some(l.mode);
            changes.push(c);
            if l.file_type == FileType::Dir {
                expand_lower_dir(changes, lower, &child, budget)?;
            }
        }
    }
    Ok(())
}

pub(super) fn list_lower_dir(lower: &Lower, rel: &Path) -> Result<Vec<Vec<u8>>, DiffError> {
    let err = |source: io::Error| DiffError::Lower {
        path: rel.display().to_string(),
        source,
    };
    let fd = open_lower(lower, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY).map_err(err)?;
    let mut names = Vec::new();
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(|e| err(e.into()))?;
    for ent in dir.iter() {
        let ent = ent.map_err(|e| err(e.into()))?;
        let n = ent.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        names.push(n.to_vec());
    }
    names.sort();
    Ok(names)
}

/// An opaque upper directory hides the whole lower directory: the lower
/// children that the upper one does not hold were deleted.
pub(super) fn expand_opaque(
    changes: &mut Vec<Change>,
    lower: &Lower,
    rel: &Path,
    upper_dir: &Path,
) -> Result<(), DiffError> {
    let mut budget = MAX_DELETED_EXPANSION;
    for name in list_lower_dir(lower, rel)? {
        let os = std::ffi::OsStr::from_bytes(&name);
        if upper_dir.join(os).symlink_metadata().is_ok() {
            continue; // listed by the walk itself
        }
        let child = rel.join(os);
        if let Some(l) = lookup_lower(lower, &child).map_err(|source| DiffError::Lower {
            path: child.display().to_string(),
            source,
        })? {
            if budget == 0 {
                break;
            }
            budget -= 1;
            push_deleted(changes, lower, &child, &l)?;
        }
    }
    Ok(())
}
