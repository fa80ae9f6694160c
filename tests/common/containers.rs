//! What the tests of agents in containers share: the envelope a container
//! submits, the host directories that serve as mount points in a client's
//! namespace, a promotion over the daemon's API.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::daemon::Daemon;
use super::{Who, chown_r, test_user};

/// What the container's command writes to `a.txt`.
pub const CONTENT: &str = "from-the-container\n";

/// `echo from-the-container > a.txt` in `wd`, declared.
pub fn envelope(wd: &Path) -> Value {
    serde_json::json!({
        "command": "echo from-the-container > a.txt",
        "working_dir": wd,
        "intent": {"expected_writes": ["a.txt"]},
    })
}

/// An empty directory on the host, mode 0755, owned by `who`: a mount
/// point in a client's namespace. Gone with the `TempDir`.
pub fn empty_dir(who: Who) -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::Builder::new()
        .prefix("dryrun-ctr-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = t.path().join("inside");
    std::fs::create_dir(&p).unwrap();
    chown_to(&p, who);
    (t, p)
}

/// `p` and everything beneath it given to `who` (root's stays root's).
pub fn chown_to(p: &Path, who: Who) {
    if who == Who::User {
        let (u, g) = test_user();
        chown_r(p, u, g);
    }
}

/// `POST /v1/runs/ID/promote` as `who`: (HTTP status, body).
pub fn promote(d: &Daemon, who: Who, id: &str) -> (u16, Value) {
    d.curl(who, "POST", &format!("/v1/runs/{id}/promote"), None)
}
