//! Unified text diffs of a run's changes, from the blobs kept in its scratch
//! area (so a diff shows what was rehearsed even if the workspace moved on).

use serde::Serialize;

use crate::engine::Engine;
use crate::model::{ChangeKind, FileType};
use crate::record::RunRecord;

/// Files larger than this, or not valid UTF-8, get no text diff.
const MAX_TEXT_DIFF: u64 = 256 * 1024;

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct FileDiff {
    pub path: String,
    pub kind: ChangeKind,
    pub file_type: FileType,
    /// Unified diff, or null when not shown (binary, too large, content not kept).
    pub diff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct RunDiff {
    pub run_id: String,
    pub files: Vec<FileDiff>,
}

fn load_text(engine: &Engine, run_id: &str, hash: Option<&str>) -> Result<String, &'static str> {
    let Some(h) = hash else {
        return Ok(String::new());
    };
    let p = engine.blob_path(run_id, h);
    let bytes = crate::state_file::read_capped(&p, MAX_TEXT_DIFF).map_err(|e| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            "too large for a text diff"
        } else {
            "content not kept"
        }
    })?;
    if bytes.contains(&0) {
        return Err("binary");
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text")
}

pub fn run_diff(engine: &Engine, r: &RunRecord) -> RunDiff {
    let mut files = Vec::new();
    let changes = r
        .rehearsal
        .as_ref()
        .map(|x| x.changes.as_slice())
        .unwrap_or(&[]);
    for c in changes {
        let mut fd = FileDiff {
            path: c.path.clone(),
            kind: c.kind,
            file_type: c.file_type,
            diff: None,
            note: None,
        };
        if c.file_type == FileType::File
            && matches!(c.kind, ChangeKind::Created | ChangeKind::Modified)
        {
            let before = if c.kind == ChangeKind::Created {
                Ok(String::new())
            } else {
                load_text(engine, &r.run_id, c.before.as_deref())
            };
            match (before, load_text(engine, &r.run_id, c.after.as_deref())) {
                (Ok(b), Ok(a)) => {
                    let d = similar::TextDiff::from_lines(&b, &a);
                    let old = if c.kind == ChangeKind::Created {
                        "/dev/null".to_string()
                    } else {
                        format!("a/{}", c.path)
                    };
                    fd.diff = Some(
                        d.unified_diff()
                            .context_radius(3)
                            .header(&old, &format!("b/{}", c.path))
                            .to_string(),
                    );
                }
                (Err(n), _) | (_, Err(n)) => fd.note = Some(n.to_string()),
            }
        }
        files.push(fd);
    }
    RunDiff {
        run_id: r.run_id.clone(),
        files,
    }
}
