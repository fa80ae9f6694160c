//! What the hostile view tests ask of every run: a secret nowhere in
//! what it reported or kept, and the test user's home to plant files in.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Run, TEST_USER, Ws, random_hex, test_user, to_run};

/// `dryrun execute --json --file` of the envelope `body` (written 0644 in
/// the workspace's scratch root), started through `wrapper`.
pub fn execute_envelope(ws: &Ws, wrapper: &[String], body: &serde_json::Value) -> Run {
    let p = ws.root.path().join(format!("attack-{}.json", random_hex()));
    std::fs::write(&p, body.to_string()).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = ws
        .command_via(wrapper)
        .args(["execute", "--json", "--file"])
        .arg(&p)
        .output()
        .unwrap();
    to_run(out)
}

/// The test user's passwd home, made (its own, 0755) when missing.
pub fn test_home() -> PathBuf {
    let out = Command::new("getent")
        .args(["passwd", TEST_USER])
        .output()
        .unwrap();
    let home = PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(':')
            .nth(5)
            .unwrap(),
    );
    if !home.exists() {
        let (u, g) = test_user();
        std::fs::create_dir_all(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(u), Some(g)).unwrap();
    }
    home
}

/// `secret` is in `text`, as it is or reversed (`rev` in the command: the
/// output's redaction looks for credentials by their shape, so a reader
/// that wants one out turns it around first).
pub fn leaked(text: &str, secret: &str) -> bool {
    let rev: String = secret.chars().rev().collect();
    text.contains(secret) || text.contains(&rev)
}

/// Everything a run reported, as one text.
pub fn reported(r: &Run) -> String {
    format!("{}\n{}\n{}", r.json, r.stdout, r.stderr)
}

/// Every file under `dir` whose content holds `needle` (the state
/// directory: records, kept content, the journal).
pub fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if e.file_type().is_file()
            && std::fs::read(e.path())
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        {
            hits.push(e.path().to_path_buf());
        }
    }
    hits
}

/// The secret nowhere: not in the run's answer, not in its state
/// directory (record, journal, blobs).
pub fn assert_nowhere(what: &str, r: &Run, state: &Path, secret: &str) {
    assert!(
        !leaked(&reported(r), secret),
        "{what}: {secret} came back:\n{}",
        reported(r)
    );
    let hits = files_holding(state, secret);
    assert!(hits.is_empty(), "{what}: {secret} stored in {hits:?}");
}
