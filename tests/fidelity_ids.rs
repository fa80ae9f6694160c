//! Fidelity: files of the user's other groups (a setgid team directory).
//! Live, the test user removes them; a rehearsal must either do the same
//! (an ordinary user's, through the groups `/etc/subgid` delegates and
//! `newgidmap` maps; a root daemon's, with the owner's supplementary
//! groups held by the command) or name exactly the files it could not
//! change and why. Every result is checked on the host: what is left in
//! the real workspace after the promotion.
//!
//! Setup (root): two groups, `dryrun-team-a` and `dryrun-team-b`, the test
//! user a member of both, and `dryrun-test:GID:1` in `/etc/subgid` for
//! team-a only (added once, kept, like the test user itself).

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

const TEAM_A: &str = "dryrun-team-a";
const TEAM_B: &str = "dryrun-team-b";

fn gid_of(group: &str) -> Option<u32> {
    nix::unistd::Group::from_name(group)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

/// (team-a's gid, team-b's gid), set up once.
fn teams() -> (u32, u32) {
    static TEAMS: OnceLock<(u32, u32)> = OnceLock::new();
    *TEAMS.get_or_init(|| {
        test_user();
        for g in [TEAM_A, TEAM_B] {
            if gid_of(g).is_none() {
                let _ = Command::new("groupadd").args(["--system", g]).status();
            }
            let st = Command::new("gpasswd")
                .args(["-a", TEST_USER, g])
                .output()
                .unwrap();
            assert!(st.status.success(), "gpasswd: {st:?}");
        }
        let (a, b) = (gid_of(TEAM_A).unwrap(), gid_of(TEAM_B).unwrap());
        let line = format!("{TEST_USER}:{a}:1");
        let subgid = std::fs::read_to_string("/etc/subgid").unwrap_or_default();
        if !subgid.lines().any(|l| l == line) {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open("/etc/subgid")
                .unwrap();
            std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()).unwrap();
        }
        (a, b)
    })
}

fn ready() -> bool {
    require_root() && require_tool("newgidmap", "uidmap")
}

/// `dir` (relative to the workspace) made a setgid directory of `gid`, with
/// `owner` owning it and two files and a subdirectory in it, group-writable.
fn team_dir(ws: &Ws, dir: &str, owner: u32, gid: u32) {
    for f in ["a.o", "sub/b.o"] {
        ws.write(&format!("{dir}/{f}"), "object\n");
    }
    for p in [dir, &format!("{dir}/sub")] {
        std::fs::set_permissions(ws.dir.join(p), std::fs::Permissions::from_mode(0o2775)).unwrap();
    }
    let st = Command::new("chown")
        .args(["-R", &format!("{owner}:{gid}")])
        .arg(ws.dir.join(dir))
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("chmod")
        .args(["-R", "g+w"])
        .arg(ws.dir.join(dir))
        .status()
        .unwrap();
    assert!(st.success());
}

fn rm_rf(c: &mut Command, dir: &str) -> Run {
    let glob = format!("{dir}/**");
    c.args(["execute", "--json", "--command", &format!("rm -rf {dir}")])
        .args(["--expect-write", dir, "--expect-write", &glob]);
    to_run(c.output().unwrap())
}

fn promote(ws: &Ws, run: &Run) -> Run {
    let mut c = ws.command_with_groups();
    c.args(["promote", "--json", &run_id(run)]);
    to_run(c.output().unwrap())
}

#[test]
fn a_users_rehearsal_changes_files_of_a_delegated_group_and_promotes() {
    if !ready() {
        return;
    }
    let (a, _) = teams();
    let ws = Ws::new(Who::User);
    team_dir(&ws, "build", test_user().0, a);
    let r = rm_rf(&mut ws.command_with_groups(), "build");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.decision(), "promote");
    assert!(r.change("build/sub/b.o").is_some(), "{:?}", r.changes());
    let sb = &r.json["rehearsal"]["sandbox"];
    assert!(
        sb["enforcement"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap_or("")
                == format!("groups: {a} mapped through newgidmap (delegated in /etc/subgid)")),
        "{sb}"
    );
    let p = promote(&ws, &r);
    assert_eq!(p.code, 0, "{p:?}");
    assert!(!ws.dir.join("build").exists(), "the promotion left build/");
}

#[test]
fn a_users_rehearsal_names_the_files_of_groups_it_could_not_map() {
    if !ready() {
        return;
    }
    let (a, b) = teams();
    // Team-b is not delegated; team-a is, but a user who does not hold it
    // (groups cleared) cannot have it mapped: both are named.
    for (gid, holds_groups) in [(b, true), (a, false)] {
        let ws = Ws::new(Who::User);
        team_dir(&ws, "build", test_user().0, gid);
        let before = ws.snapshot();
        let mut c = if holds_groups {
            ws.command_with_groups()
        } else {
            ws.command()
        };
        let r = rm_rf(&mut c, "build");
        assert_ne!(r.exit_code(), Some(0), "gid {gid}: {r:?}");
        let reasons = r.reasons().join("\n");
        assert!(
            reasons.contains("[evidence.unmapped_ids]")
                && reasons.contains("build (group) and 3 entries beneath it")
                && reasons.contains("EOVERFLOW")
                && reasons.contains("/etc/subgid"),
            "gid {gid}: {reasons}"
        );
        assert_ne!(r.decision(), "promote");
        assert_eq!(before, ws.snapshot(), "gid {gid}: the workspace changed");
    }
}

/// A root daemon maps ids 0-65535; the command must also hold the owner's
/// groups, or what the user may change only as a group member (a file
/// owned by someone else, group-writable; a directory of a colleague's in
/// a team tree) cannot be changed in the rehearsal.
#[test]
fn through_a_root_daemon_the_command_holds_the_owners_groups() {
    use common::daemon::{Daemon, submit_user, user_workspace};
    if !ready() {
        return;
    }
    let (_, b) = teams();
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("notes.txt", "first\n");
    team_dir(&ws, "shared", 0, b);
    // Owned by root, group team-b, group-writable: the user may append to
    // it only as a member of team-b.
    std::os::unix::fs::chown(ws.dir.join("notes.txt"), Some(0), Some(b)).unwrap();
    std::fs::set_permissions(
        ws.dir.join("notes.txt"),
        std::fs::Permissions::from_mode(0o664),
    )
    .unwrap();
    let r = submit_user(
        &d,
        &ws,
        "id -G && echo second >> notes.txt",
        &["--expect-write", "notes.txt"],
    );
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert!(
        r.out().split_whitespace().any(|g| g == b.to_string()),
        "the command does not hold team-b: {}",
        r.out()
    );
    assert_eq!(r.decision(), "promote", "{r:?}");
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["promote", "--json", &run_id(&r)])
        .output()
        .unwrap();
    let p = to_run(out);
    assert_eq!(p.code, 0, "{p:?}");
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("notes.txt")).unwrap(),
        "first\nsecond\n"
    );
    // A colleague's directory in the team tree: removed as a member.
    let r = submit_user(
        &d,
        &ws,
        "rm -rf shared",
        &["--expect-write", "shared", "--expect-write", "shared/**"],
    );
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert_eq!(r.decision(), "promote", "{r:?}");
    assert!(Path::new(&ws.dir.join("shared/sub/b.o")).exists());
}
