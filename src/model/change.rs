//! One entry of the evidence's change list (`rehearsal.changes` in the run
//! record): what a rehearsal created, modified, deleted or re-moded.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
    Metadata,
    Identical,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One entry of `rehearsal.changes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Workspace-relative path (lossy UTF-8 when the name is not UTF-8; then
    /// `path_hex` holds the exact bytes).
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub kind: ChangeKind,
    pub file_type: FileType,
    pub before: Option<String>,
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_before: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_after: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_after: Option<u64>,
    /// The setuid or setgid bit is set on the result.
    #[serde(default, skip_serializing_if = "is_false")]
    pub setid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// The link points outside the workspace (absolute elsewhere, or `..`
    /// climbing above the root).
    #[serde(default, skip_serializing_if = "is_false")]
    pub symlink_escapes: bool,
    /// Why an escaping link is expected all the same (a virtual
    /// environment's interpreter link to the caller's own interpreter);
    /// such a link is promoted as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_expected: Option<String>,
    /// Another changed path that is the same inode (a hard link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardlink_of: Option<String>,
    /// fifo, socket, char or block device (with numbers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub special: Option<String>,
    /// Extended attribute names whose presence or value changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xattrs_changed: Vec<String>,
    /// The command's user could not read this file (before or after): no
    /// hash and no content are kept, so the evidence discloses nothing the
    /// command itself could not see.
    #[serde(default, skip_serializing_if = "is_false")]
    pub content_withheld: bool,
    /// The file's content did not fit the run's kept-content budget
    /// (apparent size): it was neither hashed nor kept, so the change can
    /// be neither verified nor promoted.
    #[serde(default, skip_serializing_if = "is_false")]
    pub content_not_kept: bool,
    /// The file is a copy of a shadow stub's script (the command copied a
    /// stubbed tool, `cp /usr/bin/git x`): live, it would be the real TOOL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stub_copy_of: Option<String>,
    /// The result's modification time in the rehearsal (nanoseconds since
    /// the epoch), when it differs from what the workspace had: the live
    /// lane gives what it writes this time, as the command would have (a
    /// `touch -d`, `cp -p` or `tar x` keeps an older time, a `touch` of
    /// unchanged content a newer one). Not part of the evidence hash: a run
    /// a second later is not another result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_after_ns: Option<i64>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Change {
    pub fn path_bytes(&self) -> Vec<u8> {
        match &self.path_hex {
            Some(h) => hex::decode(h).unwrap_or_else(|_| self.path.as_bytes().to_vec()),
            None => self.path.as_bytes().to_vec(),
        }
    }

    /// Does the live lane write anything for this change? Everything but
    /// an identical rewrite does; an identical rewrite only its time, which
    /// the evidence keeps only where the verdict judged it
    /// (`verdict::keep_only_judged_times`: a mutating run's expected write).
    pub fn goes_live(&self) -> bool {
        self.kind != ChangeKind::Identical || self.mtime_after_ns.is_some()
    }

    pub fn new(path: &[u8], kind: ChangeKind, file_type: FileType) -> Self {
        let (path, path_hex) = match std::str::from_utf8(path) {
            Ok(s) => (s.to_string(), None),
            Err(_) => (
                String::from_utf8_lossy(path).into_owned(),
                Some(hex::encode(path)),
            ),
        };
        Change {
            path,
            path_hex,
            kind,
            file_type,
            before: None,
            after: None,
            mode_before: None,
            mode_after: None,
            size_after: None,
            setid: false,
            symlink_target: None,
            symlink_escapes: false,
            link_expected: None,
            hardlink_of: None,
            special: None,
            xattrs_changed: Vec::new(),
            content_withheld: false,
            content_not_kept: false,
            stub_copy_of: None,
            mtime_after_ns: None,
        }
    }
}
