//! What is read from a file besides its type: extended attributes, the
//! content hash (and whether it is a shadow-stub script), special files.

use std::collections::BTreeMap;
use std::fs::Metadata;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use super::OVERLAY_XATTR_PREFIX;
use super::layers::LowerEntry;

pub(super) fn read_xattrs_file(f: &std::fs::File) -> BTreeMap<String, Vec<u8>> {
    use xattr::FileExt;
    let mut out = BTreeMap::new();
    if let Ok(names) = f.list_xattr() {
        for n in names {
            let name = n.to_string_lossy().into_owned();
            if name.starts_with(OVERLAY_XATTR_PREFIX) {
                continue;
            }
            if let Ok(Some(v)) = f.get_xattr(&n) {
                out.insert(name, v);
            }
        }
    }
    out
}

/// Extended attributes of an upper-layer entry. Overlay keeps its own
/// bookkeeping under `user.overlay.*` and stores attributes the *command* set
/// with that prefix escaped as `user.overlay.overlay.*`: those are reported
/// under the name the command used, never skipped.
pub(super) fn read_xattrs_path(p: &Path) -> BTreeMap<String, Vec<u8>> {
    read_xattrs(p, false)
}

/// [`read_xattrs_path`] of what `p` leads to: for the upper layer's root,
/// named by its `/proc/self/fd` link (the link itself has no attributes).
pub(super) fn read_xattrs_deref(p: &Path) -> BTreeMap<String, Vec<u8>> {
    read_xattrs(p, true)
}

fn read_xattrs(p: &Path, deref: bool) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let names = if deref {
        xattr::list_deref(p)
    } else {
        xattr::list(p)
    };
    if let Ok(names) = names {
        for n in names {
            let name = n.to_string_lossy().into_owned();
            let shown = if let Some(rest) = name.strip_prefix("user.overlay.overlay.") {
                format!("{OVERLAY_XATTR_PREFIX}{rest}")
            } else if name.starts_with(OVERLAY_XATTR_PREFIX) {
                continue;
            } else {
                name
            };
            let value = if deref {
                xattr::get_deref(p, &n)
            } else {
                xattr::get(p, &n)
            };
            if let Ok(Some(v)) = value {
                out.insert(shown, v);
            }
        }
    }
    out
}

pub(super) fn xattr_diff(upper: &Path, lower: Option<&LowerEntry>) -> Vec<String> {
    xattr_names_differing(&read_xattrs_path(upper), lower)
}

pub(super) fn xattr_names_differing(
    up: &BTreeMap<String, Vec<u8>>,
    lower: Option<&LowerEntry>,
) -> Vec<String> {
    let empty = BTreeMap::new();
    let low = lower.map(|l| &l.xattrs).unwrap_or(&empty);
    let mut names: Vec<String> = up
        .iter()
        .filter(|(k, v)| low.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .chain(low.keys().filter(|k| !up.contains_key(*k)).cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A file of the upper layer: its hash, and the tool it is the shadow-stub
/// script of when it is one (`#!/.dryrun/bin/dryrun-stub __stub-exec TOOL\n`,
/// see `sandbox::stubs`). A file small enough to be a stub script is read
/// once for both.
pub(super) fn hash_created_file(
    f: &mut std::fs::File,
    size: u64,
) -> io::Result<(blake3::Hash, Option<String>)> {
    const STUB_SCRIPT_MAX: u64 = 256;
    if size > STUB_SCRIPT_MAX {
        let mut h = blake3::Hasher::new();
        h.update_reader(f)?;
        return Ok((h.finalize(), None));
    }
    let mut text = Vec::new();
    f.take(STUB_SCRIPT_MAX + 1).read_to_end(&mut text)?;
    let tool = crate::model::stubs::stub_script_tool(&text);
    Ok((blake3::hash(&text), tool))
}

pub(super) fn describe_special(m: &Metadata) -> String {
    let ft = m.file_type();
    let (maj, min) = (libc::major(m.rdev()), libc::minor(m.rdev()));
    if ft.is_fifo() {
        "fifo".into()
    } else if ft.is_socket() {
        "socket".into()
    } else if ft.is_char_device() {
        format!("char device {maj}:{min}")
    } else if ft.is_block_device() {
        format!("block device {maj}:{min}")
    } else {
        "unknown".into()
    }
}
