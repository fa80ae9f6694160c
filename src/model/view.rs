//! What the rehearsal's view of the host adds to the evidence: the writes
//! a command made outside the workspace (into the throwaway layers over
//! the home, `/tmp` and `/var/tmp`), and what the sandbox hid that the
//! command tried to use (a program or a path the host has).

use serde::{Deserialize, Serialize};

/// Writes outside the workspace, summarised by directory
/// (`rehearsal.outside_writes`). The live lane applies the workspace's
/// change set only: none of these happen live.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutsideWrite {
    /// The directory the writes are summarised under (absolute): a cache's
    /// root, the directory a new tree was created in, or the directory
    /// holding the files written.
    pub path: String,
    /// Entries created, changed or deleted beneath it.
    pub count: u64,
    /// Bytes of the files written (apparent size).
    pub bytes: u64,
    /// A known cache (listed only), named by `cache_rule`; otherwise the
    /// writes are a finding.
    pub cache: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_rule: Option<String>,
    /// A few of the entries written, relative to `path`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// What kind of thing the sandbox hid.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum HiddenKind {
    /// A program the command tried to run: on the host, not in the view.
    Program,
    /// A path the command named: on the host, not in the view.
    Path,
    /// A masked path the command opened (or named).
    Masked,
}

impl HiddenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HiddenKind::Program => "program",
            HiddenKind::Path => "path",
            HiddenKind::Masked => "masked",
        }
    }
}

/// Something the command tried to use that the sandbox hid
/// (`rehearsal.hidden`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hidden {
    pub kind: HiddenKind,
    /// The host path that was hidden.
    pub path: String,
    /// The view's rule that hid it (`mask:ssh`, `view.other_home`, ...).
    pub rule: String,
    /// Why that rule hides it.
    pub reason: String,
    /// How the rehearsal saw the attempt (`stderr: cargo: command not
    /// found`, `opened`).
    pub seen: String,
}

impl Hidden {
    /// One line for people: what, where, which rule and why.
    pub fn describe(&self) -> String {
        let what = match self.kind {
            HiddenKind::Program => format!("the program {} exists on the host", self.path),
            HiddenKind::Path => format!("{} exists on the host", self.path),
            HiddenKind::Masked => format!("{} is masked", self.path),
        };
        format!(
            "{what} but the sandbox hid it (rule {}: {}); seen: {}",
            self.rule, self.reason, self.seen
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hidden_program_names_path_rule_and_reason() {
        let h = Hidden {
            kind: HiddenKind::Program,
            path: "/home/a/bin/tool".into(),
            rule: "view.other_home".into(),
            reason: "another user's home is never shown".into(),
            seen: "stderr: tool: command not found".into(),
        };
        let d = h.describe();
        assert!(d.contains("/home/a/bin/tool"), "{d}");
        assert!(d.contains("view.other_home"), "{d}");
        assert!(d.contains("command not found"), "{d}");
    }
}
