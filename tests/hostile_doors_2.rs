//! A hostile agent against root's use of the agent's local state
//! directory. In local mode the state directory belongs to the agent, so
//! its files (records, in-flight markers, promotion plans) are the agent's
//! to forge. A reviewer (root) who opens it — `sudo dryrun approve`, or
//! `dryrun --state-dir ~agent/... show RUN` / `runs` / `promote RUN` as the
//! README's Codex section suggests — must not become the agent's hands.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::{Value, Who, Ws, as_test_user, bin, test_user};

fn root_cli(state: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("DRYRUN_LOCAL", "1")
        .args(["--local", "--state-dir"])
        .arg(state)
        .stdin(std::process::Stdio::null());
    c
}

fn chown_to_agent(p: &Path) {
    let (u, g) = test_user();
    let st = Command::new("chown")
        .args(["-R", "-h", &format!("{u}:{g}")])
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A directory and a file of root's, outside every workspace.
fn root_target() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("dryrun-rootonly-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = d.path().join("victim.txt");
    std::fs::write(&victim, "root-content\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    (d, victim)
}

/// Attack: the agent promotes a run of its own locally (a real plan and
/// backup in `receipts/`), then forges an "interrupted promotion": a
/// `promoting/RUN` marker naming a new receipt whose `plan.json` names a
/// root-owned directory (its real device, inode, uid 0) and whose backup
/// is content of the agent's choosing. The next `dryrun` root runs on that
/// state directory — even `runs` — recovers the "crash" by restoring the
/// backup into root's directory, as root.
///
/// Fixed: root takes the filesystem identity of the state directory's
/// owner for every local request (not only `approve`), so the restore is
/// refused by the kernel.
#[test]
fn root_opening_an_agents_state_dir_never_restores_a_forged_plan_into_roots_files() {
    if !common::daemon::require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write("a.txt", "agent-chosen\n");
    let r = ws.rehearse("echo new > a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(r.decision(), "promote", "{}", r.err());
    let run_id = r.json["run_id"].as_str().unwrap().to_string();
    let o = ws.command().args(["promote", &run_id]).output().unwrap();
    assert!(o.status.success(), "{o:?}");

    let (dir, victim) = root_target();
    let receipts = ws.state.join("receipts");
    let real = std::fs::read_dir(&receipts)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    // Another receipt id of the same shape, never journaled.
    let rid = {
        let mut name = real.file_name().unwrap().to_string_lossy().into_owned();
        let last = name.pop().unwrap();
        name.push(if last == 'a' { 'b' } else { 'a' });
        name
    };
    let forged = receipts.join(&rid);
    std::fs::create_dir_all(forged.join("backup")).unwrap();
    std::fs::copy(real.join("backup/0"), forged.join("backup/0")).unwrap();
    let mut plan: Value =
        serde_json::from_slice(&std::fs::read(real.join("plan.json")).unwrap()).unwrap();
    let m = std::fs::metadata(dir.path()).unwrap();
    plan["receipt_id"] = Value::from(rid.clone());
    plan["workspace"] = Value::from(dir.path().display().to_string());
    plan["workspace_identity"] =
        serde_json::json!({"dev": m.dev(), "ino": m.ino(), "uid": 0, "gid": 0});
    plan["ops"][0]["path"] = Value::from("victim.txt");
    plan["ops"][0]["path_hex"] = Value::from(hex_of(b"victim.txt"));
    plan["ops"][0]["backup"]["owner"] = serde_json::json!([0, 0]);
    std::fs::write(forged.join("plan.json"), plan.to_string()).unwrap();
    let promoting = ws.state.join("promoting");
    std::fs::create_dir_all(&promoting).unwrap();
    std::fs::write(promoting.join(&run_id), format!("{rid}\n1 1")).unwrap();
    chown_to_agent(&ws.state);

    // The reviewer looks.
    for args in [
        vec!["runs"],
        vec!["show", &run_id],
        vec!["journal", "verify"],
    ] {
        let _ = root_cli(&ws.state).args(&args).output().unwrap();
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "root-content\n",
            "root restored the agent's backup into its own file ({args:?})"
        );
        let vm = std::fs::metadata(&victim).unwrap();
        assert_eq!(vm.mode() & 0o777, 0o600, "{args:?}");
        assert_eq!(vm.uid(), 0);
    }
}

/// Attack: the agent replaces its state directory by a link to a root
/// directory (`/etc` on a real host); root's `dryrun --state-dir` (or
/// `sudo dryrun approve`, which judged the owner through the link) creates
/// `runs/`, `inflight/`, `txn/` there and makes it mode 0700.
///
/// Fixed: the owner is the first non-root owner along the path, each
/// component not followed: the link's owner.
#[test]
fn root_never_chmods_or_fills_a_root_directory_through_the_agents_state_link() {
    if !common::daemon::require_root() {
        return;
    }
    let (dir, _victim) = root_target();
    let base = tempfile::Builder::new()
        .prefix("dryrun-agentstate-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_to_agent(base.path());
    let link = base.path().join("state");
    let st = as_test_user("ln")
        .arg("-s")
        .arg(dir.path())
        .arg(&link)
        .status()
        .unwrap();
    assert!(st.success());
    for args in [vec!["runs"], vec!["approve", "r1234abcd-0000000000000000"]] {
        let _ = root_cli(&link).args(&args).output().unwrap();
        let m = std::fs::metadata(dir.path()).unwrap();
        assert_eq!(
            m.mode() & 0o777,
            0o755,
            "{args:?}: root chmodded its directory"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["victim.txt".to_string()], "{args:?}");
    }
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
