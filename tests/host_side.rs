//! Threat: the privileged host side used as the agent's eyes or hands.
//!
//! A root daemon, an unprivileged agent (the test user) that owns its
//! workspace, and root's secrets. Each attack is made as the agent, and the
//! assertions look at the host: no byte of a canary in any answer, record,
//! journal or kept blob; nothing written outside the workspace; the limits
//! named with the evidence so far.

mod common;
use common::daemon::*;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A root-only secret outside every workspace (0600 in a 0700 directory).
struct RootSecret {
    _dir: tempfile::TempDir,
    path: PathBuf,
    content: String,
}

fn root_secret() -> RootSecret {
    let dir = tempfile::Builder::new()
        .prefix("dryrun-root-secret-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let content = format!("CANARY-ROOT-{}", random_hex());
    let path = dir.path().join("id_ed25519");
    std::fs::write(&path, format!("{content}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    RootSecret {
        _dir: dir,
        path,
        content,
    }
}

/// Every file below `dir` (not following links) that contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if e.file_type().is_file()
            && std::fs::read(e.path())
                .map(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .unwrap_or(false)
        {
            hits.push(e.path().to_path_buf());
        }
    }
    hits
}

fn assert_nowhere(d: &Daemon, needle: &str, answers: &[&str]) {
    for a in answers {
        assert!(!a.contains(needle), "the canary reached the agent: {a}");
    }
    let hits = files_containing(&d.state, needle);
    assert!(hits.is_empty(), "the canary is in the state dir: {hits:?}");
}

fn user_cli(d: &Daemon, ws: &Ws, args: &[&str]) -> (i32, String, String) {
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Make `p` the test user's (without following a link).
fn give_to_user(p: &Path) {
    let (u, g) = test_user();
    std::os::unix::fs::lchown(p, Some(u), Some(g)).unwrap();
}

#[test]
fn a_workspace_policy_that_points_at_root_secrets_is_never_read_or_quoted() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let secret = root_secret();
    let ws = user_workspace();
    std::fs::create_dir_all(ws.dir.join(".dryrun")).unwrap();
    give_to_user(&ws.dir.join(".dryrun"));
    let policy = ws.dir.join(".dryrun/policy.yaml");
    let mut answers = Vec::new();

    // A link to a root-only file, to a device, and a fifo in its place.
    for target in [secret.path.as_path(), Path::new("/dev/zero")] {
        let _ = std::fs::remove_file(&policy);
        std::os::unix::fs::symlink(target, &policy).unwrap();
        give_to_user(&policy);
        let (code, out, err) = user_cli(&d, &ws, &["execute", "--json", "--command", "true"]);
        assert_eq!(code, 2, "{target:?}: {out}{err}");
        assert!(err.contains(".dryrun/policy.yaml"), "{err}");
        assert!(err.contains("symlink"), "{err}");
        answers.push(out + &err);
    }
    let _ = std::fs::remove_file(&policy);
    nix::unistd::mkfifo(&policy, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    give_to_user(&policy);
    let t0 = Instant::now();
    let (code, out, err) = user_cli(&d, &ws, &["execute", "--json", "--command", "true"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("not a regular file"), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "a fifo hung the daemon"
    );

    // The agent's own file with a secret-shaped value that is not a policy:
    // the error names the file and the place, never the value.
    let _ = std::fs::remove_file(&policy);
    let own = format!("OWN-VALUE-{}", random_hex());
    std::fs::write(&policy, format!("{own}\n")).unwrap();
    give_to_user(&policy);
    let (code, out, err) = user_cli(&d, &ws, &["execute", "--json", "--command", "true"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(".dryrun/policy.yaml"), "{err}");
    assert!(!err.contains(&own), "a parse error quoted the file: {err}");

    // Too large to be a policy.
    std::fs::write(&policy, "#".repeat(300 * 1024)).unwrap();
    give_to_user(&policy);
    let (code, _, err) = user_cli(&d, &ws, &["execute", "--json", "--command", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than"), "{err}");

    answers.push(err);
    let refs: Vec<&str> = answers.iter().map(|s| s.as_str()).collect();
    assert_nowhere(&d, &secret.content, &refs);
}

#[test]
fn links_that_resolve_outside_the_workspace_are_blocked_and_never_promoted() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    // An existing loop link in the workspace (the agent made it on the host).
    std::fs::create_dir(ws.dir.join("pre")).unwrap();
    std::os::unix::fs::symlink("..", ws.dir.join("pre/up")).unwrap();
    ws.chown_all();
    let cases = [
        // Absolute, textually under the workspace, resolving out through `..`.
        "ln -s \"$PWD/../../../../../../etc/passwd\" abs",
        // A chain through a loop link created in the same run.
        "mkdir sub && ln -s .. sub/up && ln -s sub/up/sub/up/../../../../../../etc/passwd chain",
        // A chain through a loop link that already existed.
        "ln -s pre/up/pre/up/../../../../../../etc/shadow old",
    ];
    for cmd in cases {
        let r = submit_user(&d, &ws, cmd, &["--expect-write", "**"]);
        assert_ne!(r.decision(), "promote", "{cmd}: {r:?}");
        assert!(
            r.changes().iter().any(|c| c["symlink_escapes"] == true),
            "{cmd}: no change is marked as escaping: {r:?}"
        );
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.contains("evidence.symlink_escape")),
            "{cmd}: {:?}",
            r.reasons()
        );
        // Even a reviewer's override does not take it live.
        let id = r.json["run_id"].as_str().unwrap();
        let out = d
            .cli_root()
            .args(["approve", id, "--override", "--note", "testing", "--json"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (code, _, err) = user_cli(&d, &ws, &["promote", id, "--json"]);
        assert_eq!(code, 4, "{cmd}: promoted: {err}");
        assert!(err.contains("outside the workspace"), "{err}");
    }
    for name in ["abs", "chain", "old", "sub"] {
        assert!(
            std::fs::symlink_metadata(ws.dir.join(name)).is_err(),
            "{name} was written live"
        );
    }
}

/// Exchange two paths atomically (renameat2 RENAME_EXCHANGE), in a loop, as
/// the test user, until the returned child is killed. (The interpreter by
/// its absolute path: as the test user, a `python3` found on root's PATH
/// may be a shim under root's home that it cannot run, and then no swap
/// ever happens.)
fn exchange_loop(a: &Path, b: &Path) -> std::process::Child {
    let script = format!(
        "import ctypes,os\nlibc=ctypes.CDLL(None,use_errno=True)\na={a:?}.encode();b={b:?}.encode()\nwhile True:\n    libc.renameat2(-100,a,-100,b,2)\n",
        a = a.display().to_string(),
        b = b.display().to_string()
    );
    as_test_user("/usr/bin/python3")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The agent swaps a root-only file of its directory with its own file
/// while runs go on. The positive control: the race must land — in some
/// run the evidence walk met the root-only file at the agent's path (the
/// change is `content_withheld` with no hash of what was there before, or,
/// were the file read, the hash before is the root file's); a swapper that
/// never swaps (as when it could not start) passes nothing.
#[test]
fn a_root_only_file_swapped_in_during_the_evidence_walk_is_never_read() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    ws.write("mine.txt", "the agent's own text\n");
    // A root-only file in the agent's directory: the agent may rename it
    // (it owns the directory) but never read it.
    let canary = format!("CANARY-SWAP-{}", random_hex());
    let rootfile = ws.dir.join("rootfile");
    std::fs::write(&rootfile, format!("{canary}\n")).unwrap();
    std::fs::set_permissions(&rootfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let canary_hash = blake3::hash(format!("{canary}\n").as_bytes())
        .to_hex()
        .to_string();
    let mut swapper = exchange_loop(&ws.dir.join("mine.txt"), &rootfile);
    let mut answers = Vec::new();
    // Runs in which the walk met the root-only file at `mine.txt`: withheld
    // (it was not read), or, were it read, hashed as what was there before.
    let mut walk_met_the_swap = 0;
    let mut runs = 0;
    while runs < 8 || (walk_met_the_swap < 2 && runs < 40) {
        runs += 1;
        let r = submit_user(
            &d,
            &ws,
            "echo more >> mine.txt; cat mine.txt rootfile",
            &["--expect-write", "**"],
        );
        let id = r.json["run_id"].as_str().unwrap_or_default().to_string();
        answers.push(r.out().to_string() + r.err());
        if r.change("mine.txt").is_some_and(|c| {
            (c["content_withheld"] == true && c["before"].is_null())
                || c["before"] == canary_hash.as_str()
        }) {
            walk_met_the_swap += 1;
        }
        for args in [
            vec!["diff", id.as_str()],
            vec!["show", id.as_str(), "--json"],
        ] {
            let (_, out, err) = user_cli(&d, &ws, &args);
            answers.push(out + &err);
        }
    }
    let swapper_ended = swapper.try_wait().unwrap();
    let _ = swapper.kill();
    let _ = swapper.wait();
    assert_eq!(
        swapper_ended, None,
        "the swapper ended early: the race was never run"
    );
    assert!(
        walk_met_the_swap >= 1,
        "in {runs} runs the evidence walk never met the swapped-in file: the race did not land"
    );
    let refs: Vec<&str> = answers.iter().map(|s| s.as_str()).collect();
    assert_nowhere(&d, &canary, &refs);
}

#[test]
fn a_file_an_acl_denies_the_agent_is_withheld_after_a_rename() {
    if !require_root() {
        return;
    }
    if std::process::Command::new(tool("setfacl", "acl"))
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("setfacl is missing (install the acl package; .ci/run does)");
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let canary = format!("CANARY-ACL-{}", random_hex());
    let f = ws.dir.join("acl.txt");
    std::fs::write(&f, format!("{canary}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (u, _) = test_user();
    let st = std::process::Command::new(tool("setfacl", "acl"))
        .args(["-m", &format!("u:{u}:---")])
        .arg(&f)
        .status()
        .unwrap();
    assert!(st.success());
    let r = submit_user(&d, &ws, "mv acl.txt moved.txt", &["--expect-write", "**"]);
    let moved = r.change("moved.txt").unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(moved["content_withheld"], true, "{moved}");
    assert!(moved["after"].is_null(), "{moved}");
    assert_ne!(r.decision(), "promote", "{r:?}");
    let id = r.json["run_id"].as_str().unwrap();
    let (_, diff, derr) = user_cli(&d, &ws, &["diff", id]);
    assert_nowhere(&d, &canary, &[r.out(), r.err(), &diff, &derr]);
}

#[test]
fn chmod_000_on_a_workspace_file_is_a_metadata_change() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("notes.txt", "keep me\n");
        let r = ws.rehearse("chmod 000 notes.txt", &["--expect-write", "**"]);
        assert_ran(who, &r);
        let c = r
            .change("notes.txt")
            .unwrap_or_else(|| panic!("{who:?}: {r:?}"));
        assert_eq!(c["kind"], "metadata", "{who:?}: {c}");
        assert_eq!(c["before"], c["after"], "{who:?}: {c}");
        assert!(c["content_withheld"] != true, "{who:?}: {c}");
    }
}

fn envelope_file(ws: &Ws, command: &str, extra_yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("dryrun-envelope-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let yaml = format!(
        "command: {}\nworking_dir: {}\nintent: {{summary: t, mode: mutating, expected_writes: [\"**\"]}}\n{extra_yaml}",
        serde_json::to_string(command).unwrap(),
        serde_json::to_string(&ws.dir.display().to_string()).unwrap()
    );
    let path = dir.path().join("envelope.yaml");
    std::fs::write(&path, yaml).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, path)
}

#[test]
fn a_full_disk_inside_the_sandbox_is_the_disk_limit_with_the_evidence_so_far() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("a.txt", "a\n");
        for cmd in [
            // Many files until the upper layer is full.
            "for i in $(seq 200); do head -c 300000 /dev/zero > f$i || break; done; echo kept > last.txt; echo done",
            // Preallocated space.
            "fallocate -l 15900K big1; fallocate -l 2M big2; echo kept > last.txt; echo done",
            // Directories and small files until the inodes or blocks run out.
            "mkdir d; for i in $(seq 4000); do echo $i > d/$i || break; done; head -c 20000000 /dev/zero > fill; echo done",
        ] {
            let (_d, env) = envelope_file(&ws, cmd, "limits: {disk_mb: 16}\n");
            let r = ws.execute(&["--file", env.to_str().unwrap()]);
            // A limit is for the agent to fix: judged, not waiting for a person.
            assert_eq!(r.json["state"], "rehearsed", "{who:?} {cmd}: {r:?}");
            assert_eq!(r.json["override_required"], true, "{who:?} {cmd}: {r:?}");
            assert!(
                r.limits_hit().contains(&"disk".to_string()),
                "{who:?} {cmd}: {:?}",
                r.limits_hit()
            );
            assert!(!r.changes().is_empty(), "{who:?} {cmd}: no evidence");
            assert_eq!(r.decision(), "blocked", "{who:?} {cmd}");
        }
    }
}

#[test]
fn paths_deeper_than_path_max_are_a_named_limit_not_a_failed_run() {
    for who in identities() {
        let ws = Ws::new(who);
        let cmd = "echo top > top.txt; for i in $(seq 300); do mkdir d0123456789abcdef && cd d0123456789abcdef || break; done; echo deep > deep.txt; echo done";
        let r = ws.rehearse(cmd, &["--expect-write", "**"]);
        // Judged (blocked by the limit), not failed; a limit is for the
        // agent to fix, so it does not wait for a person.
        assert_eq!(r.json["state"], "rehearsed", "{who:?}: {r:?}");
        assert_eq!(r.json["override_required"], true, "{who:?}: {r:?}");
        assert!(r.out().contains("done"), "{who:?}: {r:?}");
        assert!(
            r.limits_hit().contains(&"path_depth".to_string()),
            "{who:?}: {:?}",
            r.limits_hit()
        );
        assert!(
            r.change("top.txt").is_some(),
            "{who:?}: the rest of the evidence"
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
    }
}

#[test]
fn oracles_are_closed_for_paths_runs_receipts_and_the_daemons_environment() {
    if !require_root() {
        return;
    }
    let daemon_secret_name = "AWS_SECRET_ACCESS_KEY";
    let d = Daemon::start_env(&[], &[(daemon_secret_name, "daemon-own-value")]);
    let ws = user_workspace();

    // working_dir under a directory the agent cannot search: an existing
    // and a missing path answer alike.
    let hidden = tempfile::Builder::new()
        .prefix("dryrun-hidden-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(hidden.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(hidden.path().join("exists")).unwrap();
    let ask = |p: &Path| {
        let body = serde_json::json!({"command": "true", "working_dir": p}).to_string();
        let (code, v) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
        let msg = v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .replace(&p.display().to_string(), "PATH");
        (code, v["error"]["code"].clone(), msg)
    };
    let a = ask(&hidden.path().join("exists"));
    let b = ask(&hidden.path().join("missing"));
    assert_eq!(
        a, b,
        "an existing and a missing hidden path answer differently"
    );
    assert_eq!(a.0, 400, "{a:?}");

    // The agent's own run never names the daemon's variables.
    let r = submit_user(&d, &ws, "true", &[]);
    assert!(
        !r.stripped().iter().any(|s| s.contains(daemon_secret_name)),
        "{:?}",
        r.stripped()
    );

    // Root's run and receipt are as missing to the agent as a made-up id.
    let root_ws = Ws::new(Who::Root);
    root_ws.write("x.txt", "x\n");
    let out = d
        .cli_root()
        .current_dir(&root_ws.dir)
        .args([
            "execute",
            "--json",
            "--command",
            "echo y > y.txt",
            "--expect-write",
            "*",
        ])
        .output()
        .unwrap();
    let rr = run_json(out);
    let rid = rr.json["run_id"].as_str().unwrap().to_string();
    let out = d
        .cli_root()
        .args(["promote", &rid, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let receipt = rec["receipt_id"]
        .as_str()
        .or(rec["receipt"]["receipt_id"].as_str())
        .unwrap_or_else(|| panic!("{rec}"))
        .to_string();
    let missing_run = "r00000000-0000000000000000";
    for (method, path_of) in [
        ("GET", "/v1/runs/{}"),
        ("GET", "/v1/runs/{}/diff"),
        ("POST", "/v1/runs/{}/approve"),
        ("POST", "/v1/runs/{}/reject"),
        ("POST", "/v1/runs/{}/promote"),
    ] {
        let mine = d.curl(Who::User, method, &path_of.replace("{}", &rid), Some("{}"));
        let none = d.curl(
            Who::User,
            method,
            &path_of.replace("{}", missing_run),
            Some("{}"),
        );
        assert_eq!(mine.0, 404, "{method} {path_of}: {mine:?}");
        assert_eq!(mine.0, none.0, "{method} {path_of}");
        assert_eq!(
            mine.1["error"]["code"], none.1["error"]["code"],
            "{method} {path_of}"
        );
    }
    let missing_receipt = receipt
        .chars()
        .map(|c| if c.is_ascii_hexdigit() { '0' } else { c })
        .collect::<String>();
    for (method, path_of) in [
        ("GET", "/v1/receipts/{}"),
        ("POST", "/v1/receipts/{}/rollback"),
    ] {
        let mine = d.curl(Who::User, method, &path_of.replace("{}", &receipt), None);
        let none = d.curl(
            Who::User,
            method,
            &path_of.replace("{}", &missing_receipt),
            None,
        );
        assert_eq!(mine.0, 404, "{method} {path_of}: {mine:?}");
        assert_eq!(
            mine.1["error"]["code"], none.1["error"]["code"],
            "{method} {path_of}"
        );
    }
    // Root's workspace is untouched by the agent's attempts: the promoted
    // file still holds root's content and is still root's.
    let y = root_ws.dir.join("y.txt");
    assert_eq!(std::fs::read_to_string(&y).unwrap(), "y\n");
    let m = std::fs::symlink_metadata(&y).unwrap();
    assert!(m.file_type().is_file(), "{m:?}");
    assert_eq!(
        (m.uid(), m.gid()),
        (0, 0),
        "root's promoted file changed owner"
    );
}
