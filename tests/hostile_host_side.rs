//! Hostile agent against the privileged host side (issue 12's fixes): a root
//! daemon, the unprivileged agent uid `dryrun-test`, a workspace the agent
//! owns, and root's secrets around and inside it.
//!
//! The first tests reproduce attacks that WORKED on the branch they were
//! written against (they fail until fixed):
//!
//! - the workspace agent runs as the agent's uid, so the agent may signal
//!   it; a `SIGSTOP` while it serves a promotion leaves the daemon's global
//!   transition lock held: every other user's approve / reject / promote /
//!   rollback hangs for as long as the agent likes;
//! - a sparse file in the live workspace that a (promote-decision) run
//!   deletes is backed up by the promotion at its full apparent size into
//!   root's state directory, past the per-uid quota and every ceiling (and,
//!   hashed twice without a size cap, under that same global lock).
//!
//! The rest are attacks that were stopped, kept as regression guards.

mod common;
use common::daemon::*;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Bytes allocated on disk under `dir` (st_blocks, so sparse files count at
/// what they really take).
fn allocated(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        total += m.blocks() * 512;
        if m.is_dir()
            && let Ok(rd) = std::fs::read_dir(&p)
        {
            stack.extend(rd.flatten().map(|e| e.path()));
        }
    }
    total
}

/// Every file under `dir` (at most 64 MiB each) that contains `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if m.is_file()
            && m.len() <= 64 << 20
            && let Ok(b) = std::fs::read(&p)
            && b.windows(needle.len()).any(|w| w == needle)
        {
            found.push(p.display().to_string());
        }
    }
    found
}

/// curl on the daemon socket with a time limit: (status, body, seconds).
/// Status 0 when curl gave up (no answer in time).
fn curl_timed(
    d: &Daemon,
    who: Who,
    method: &str,
    path: &str,
    body: Option<&str>,
    max_s: u64,
) -> (u16, String, f64) {
    let mut c = if who == Who::User {
        as_test_user("curl")
    } else {
        Command::new(tool("curl", "curl"))
    };
    c.args([
        "-sS",
        "-m",
        &max_s.to_string(),
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
    ])
    .arg("--unix-socket")
    .arg(&d.socket)
    .args(["-X", method])
    .arg(format!("http://dryrun{path}"));
    if let Some(b) = body {
        c.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let t0 = Instant::now();
    let out = c.output().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string(), secs)
}

// ---------------------------------------------------------------------------
// Attacks that worked.

/// The agent finds the `__workspace-agent` process that serves its own
/// promotion (it runs as the agent's uid: `pgrep -u`, `/proc/PID/cmdline`
/// is world-readable) and stops it with `kill -STOP`, which the kernel
/// allows (same real uid). The root daemon waits for its answer with no
/// time limit while holding the engine's `transitions` lock, so a reviewer's
/// action on any other run (here root rejecting another run) does not
/// answer: one unprivileged uid freezes every approval, rejection,
/// promotion and rollback of every user.
#[test]
fn a_stopped_workspace_agent_does_not_freeze_other_reviews() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let (uid, _) = test_user();
    let other = submit_user(&d, &ws, "echo o > o.txt", &["--expect-write", "o.txt"]);
    assert_eq!(other.decision(), "promote", "{other:?}");
    let other_id = run_id(&other);

    // The daemon's workspace agents are forks of its resident sandbox
    // helper (no exec: their command line is the resident's), running as
    // the workspace owner: the only processes of that uid under it.
    let (pid, promote) = stop_own_workspace_agent(&d, &ws, 3)
        .expect("the agent found and stopped its workspace agent");
    // The agent really could: the process is the agent's own.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    assert!(status.contains("State:\tT"), "{status}");
    // A fork of the resident, not an exec of the agent program, holding
    // the owner's ids and nothing more.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        cmdline.contains("__sandbox-resident") && !cmdline.contains("__workspace-agent"),
        "{cmdline}"
    );
    for line in [
        format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}"),
        "CapPrm:\t0000000000000000".into(),
        "CapEff:\t0000000000000000".into(),
        "NoNewPrivs:\t1".into(),
    ] {
        assert!(status.contains(&line), "{line} in {status}");
    }

    // Root (a reviewer) rejects another run: a quick answer, normally.
    let (code, body, secs) = curl_timed(
        &d,
        Who::Root,
        "POST",
        &format!("/v1/runs/{other_id}/reject"),
        Some(r#"{"note":"reviewer"}"#),
        10,
    );
    // Let everything go before asserting.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    // Its output is piped: read to the end, or a promotion that writes
    // more than a pipe holds never ends.
    let _ = promote.wait_with_output();
    assert!(
        code == 200 && secs < 9.0,
        "a reviewer's rejection of another run did not answer while the agent held its workspace agent stopped (status {code} after {secs:.1}s: {body})"
    );
}

/// The agent makes a 512 MiB sparse file in its own workspace (8 KiB on
/// disk) and rehearses `rm big` (decision promote, nothing kept). Promoting
/// it backs the file up for rollback by copying every byte into root's
/// state directory: 512 MiB written densely, past a 32 MiB per-uid quota
/// and a 64 MiB disk ceiling. `truncate -s 1T` fills the daemon's disk (and
/// the copy and two unbounded hashes hold the global transition lock for
/// minutes: 150 s for 20 GiB here).
#[test]
fn a_sparse_file_removed_by_a_run_is_not_backed_up_past_the_quota() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--quota-per-uid-mb", "32", "--max-disk-mb", "64"]);
    let ws = user_workspace();
    let big = ws.dir.join("big");
    let st = as_test_user("truncate")
        .args(["-s", "512M"])
        .arg(&big)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(std::fs::metadata(&big).unwrap().blocks() * 512 < 1 << 20);
    let r = submit_user(&d, &ws, "rm big", &["--expect-write", "big"]);
    assert_eq!(r.decision(), "promote", "{r:?}");
    let before = allocated(&d.state);
    let out = d
        .cli_user()
        .args(["promote", &run_id(&r)])
        .output()
        .unwrap();
    let grown = allocated(&d.state).saturating_sub(before);
    assert!(
        grown < 128 << 20,
        "promoting the removal of a sparse file put {} MiB into root's state directory (quota 32 MiB, disk ceiling 64 MiB); promote said: {}{}",
        grown >> 20,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------
// Attacks that were stopped (regression guards).

/// Root's 0600 file and a file whose ACL denies the agent, both inside the
/// agent's workspace, renamed inside the rehearsal (so the upper layer holds
/// copy-ups of them) and `cat`: no byte of either reaches the record, the
/// diff, the state directory (blobs, journal) or, after a promotion attempt,
/// any other file of the workspace.
#[test]
fn renamed_root_files_in_the_workspace_stay_withheld() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let canary = format!("CANARY-ROOT-{}", random_hex());
    let secret = ws.dir.join("rootsecret");
    std::fs::write(&secret, format!("{canary}-mode\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let acl = ws.dir.join("aclsecret");
    std::fs::write(&acl, format!("{canary}-acl\n")).unwrap();
    std::fs::set_permissions(&acl, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (uid, _) = test_user();
    let have_acl = Command::new(tool("setfacl", "acl"))
        .args(["-m", &format!("u:{uid}:---")])
        .arg(&acl)
        .status()
        .is_ok_and(|s| s.success());
    let r = submit_user(
        &d,
        &ws,
        "mv rootsecret x1; mv aclsecret x2; cat x1 x2 rootsecret aclsecret; cp x1 x3; ls -la",
        &["--expect-write", "**"],
    );
    let id = run_id(&r);
    let x1 = r.change("x1").expect("x1 listed");
    assert_eq!(x1["content_withheld"], true, "{x1}");
    if have_acl {
        let x2 = r.change("x2").expect("x2 listed");
        assert_eq!(x2["content_withheld"], true, "{x2}");
    }
    let mut seen = format!("{}\n{}", r.stdout, r.stderr);
    for args in [
        vec!["show", "--json", id.as_str()],
        vec!["diff", id.as_str()],
        vec!["runs", "--json"],
        vec!["promote", id.as_str()],
    ] {
        let out = d.cli_user().args(&args).output().unwrap();
        seen.push_str(&String::from_utf8_lossy(&out.stdout));
        seen.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    let (_, diff, _) = curl_timed(
        &d,
        Who::User,
        "GET",
        &format!("/v1/runs/{id}/diff"),
        None,
        20,
    );
    seen.push_str(&diff);
    assert!(!seen.contains(&canary), "canary in what the agent sees");
    let leaked = files_containing(&d.state, canary.as_bytes());
    assert!(
        leaked.is_empty(),
        "canary in the state directory: {leaked:?}"
    );
    // Only the two root files hold it in the workspace (wherever they are now).
    let mut holders = files_containing(&ws.dir, canary.as_bytes());
    holders.sort();
    for h in &holders {
        let m = std::fs::metadata(h).unwrap();
        assert_eq!(m.uid(), 0, "{h} holds the canary and is not root's");
    }
    assert!(holders.len() <= 2, "{holders:?}");
}

/// Another uid's run and receipt: every read and action answers 404 exactly
/// like an id that never existed.
#[test]
fn another_uids_run_and_receipt_look_missing() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let rootws = tempfile::Builder::new()
        .prefix("dryrun-rootws-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(rootws.path().join("r.txt"), "r\n").unwrap();
    let out = d
        .cli_root()
        .current_dir(rootws.path())
        .args([
            "execute",
            "--json",
            "--command",
            "echo x > y",
            "--expect-write",
            "y",
        ])
        .output()
        .unwrap();
    let r = run_json(out);
    let rid = run_id(&r);
    let out = d
        .cli_root()
        .args(["promote", "--json", &rid])
        .output()
        .unwrap();
    let p: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let rc = p["receipt_id"]
        .as_str()
        .or(p["receipt"]["receipt_id"].as_str())
        .unwrap_or_else(|| panic!("no receipt: {p}"))
        .to_string();
    let flip = |s: &str| {
        let last = if s.ends_with('0') { '1' } else { '0' };
        format!("{}{last}", &s[..s.len() - 1])
    };
    let (fake_run, fake_rc) = (flip(&rid), flip(&rc));
    let norm = |s: &str, real: &str, fake: &str| s.replace(real, "ID").replace(fake, "ID");
    for (method, real, fake) in [
        (
            "GET",
            format!("/v1/runs/{rid}"),
            format!("/v1/runs/{fake_run}"),
        ),
        (
            "GET",
            format!("/v1/runs/{rid}/diff"),
            format!("/v1/runs/{fake_run}/diff"),
        ),
        (
            "GET",
            format!("/v1/receipts/{rc}"),
            format!("/v1/receipts/{fake_rc}"),
        ),
        (
            "POST",
            format!("/v1/runs/{rid}/promote"),
            format!("/v1/runs/{fake_run}/promote"),
        ),
        (
            "POST",
            format!("/v1/runs/{rid}/reject"),
            format!("/v1/runs/{fake_run}/reject"),
        ),
        (
            "POST",
            format!("/v1/runs/{rid}/replay"),
            format!("/v1/runs/{fake_run}/replay"),
        ),
        (
            "POST",
            format!("/v1/receipts/{rc}/rollback"),
            format!("/v1/receipts/{fake_rc}/rollback"),
        ),
    ] {
        let body = (method == "POST").then_some("{}");
        let (c1, b1, _) = curl_timed(&d, Who::User, method, &real, body, 20);
        let (c2, b2, _) = curl_timed(&d, Who::User, method, &fake, body, 20);
        assert_eq!(c1, 404, "{method} {real}: {b1}");
        assert_eq!(c1, c2, "{method} {real}: {b1} / {b2}");
        assert_eq!(
            norm(&b1, &rid, &fake_run)
                .replace(&rc, "ID")
                .replace(&fake_rc, "ID"),
            norm(&b2, &rid, &fake_run)
                .replace(&rc, "ID")
                .replace(&fake_rc, "ID"),
            "{method} {real}"
        );
    }
    // The root workspace was not rolled back or touched: `y` still holds
    // root's content and is still root's.
    let y = rootws.path().join("y");
    assert_eq!(std::fs::read_to_string(&y).unwrap(), "x\n");
    let m = std::fs::symlink_metadata(&y).unwrap();
    assert!(m.file_type().is_file(), "{m:?}");
    assert_eq!(
        (m.uid(), m.gid()),
        (0, 0),
        "root's promoted file changed owner"
    );
}

/// `working_dir` below a root-only directory: an existing directory, a file
/// and a missing path give the same answer (with the path swapped).
#[test]
fn working_dir_under_a_root_only_directory_is_no_oracle() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let hidden = tempfile::Builder::new()
        .prefix("dryrun-hidden-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(hidden.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(hidden.path().join("dir")).unwrap();
    std::fs::write(hidden.path().join("file"), "x").unwrap();
    let mut answers = Vec::new();
    for name in ["dir", "file", "missing", "dir/missing"] {
        let wd = hidden.path().join(name);
        let body = serde_json::json!({"command": "true", "working_dir": wd}).to_string();
        let (code, text, _) =
            curl_timed(&d, Who::User, "POST", "/v1/runs?wait=true", Some(&body), 30);
        answers.push((code, text.replace(wd.to_str().unwrap(), "WD")));
    }
    for a in &answers[1..] {
        assert_eq!(a, &answers[0], "{answers:?}");
    }
    assert!(answers[0].0 >= 400, "{answers:?}");
}

/// The agent starting the hidden workspace-agent entry point itself: as
/// uid 0, or as itself with groups it does not have. Both refused before
/// anything is served.
#[test]
fn the_agent_cannot_start_a_privileged_workspace_agent() {
    if !require_root() {
        return;
    }
    let (uid, gid) = test_user();
    for args in [
        vec!["0".to_string(), "0".into(), "0".into()],
        vec![uid.to_string(), gid.to_string(), "0".into()],
        vec![uid.to_string(), "0".into(), gid.to_string()],
    ] {
        let out = as_test_user(bin())
            .arg("__workspace-agent")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
}

/// `.dryrun/policy.yaml` as a symlink to a root-only file, as a hard link
/// to one (refused by the kernel: protected_hardlinks), or as a fifo: the
/// submission never quotes it and never hangs.
#[test]
fn workspace_policy_tricks_do_not_read_root_files() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let canary = format!("CANARY-ROOT-{}", random_hex());
    let (_keep, host) = host_canary("secret.yaml", &format!("rules: [{canary}]\n"));
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dot = ws.dir.join(".dryrun");
    std::fs::create_dir_all(&dot).unwrap();
    ws.chown_all();
    let pol = dot.join("policy.yaml");
    let mut seen = String::new();
    for how in ["symlink", "hardlink", "fifo"] {
        let _ = std::fs::remove_file(&pol);
        let made = match how {
            "symlink" => as_test_user("ln").arg("-s").arg(&host).arg(&pol).status(),
            "hardlink" => as_test_user("ln").arg(&host).arg(&pol).status(),
            _ => as_test_user("mkfifo").arg(&pol).status(),
        }
        .unwrap();
        if how == "hardlink" {
            assert!(!made.success(), "the agent hard-linked root's file");
            continue;
        }
        assert!(made.success(), "{how}");
        let body = serde_json::json!({"command": "true", "working_dir": ws.dir}).to_string();
        let (code, text, secs) =
            curl_timed(&d, Who::User, "POST", "/v1/runs?wait=true", Some(&body), 30);
        assert!(secs < 25.0, "{how}: the submission hung");
        assert!(code >= 400, "{how}: {code} {text}");
        seen.push_str(&text);
    }
    assert!(!seen.contains(&canary), "{seen}");
    assert!(files_containing(&d.state, canary.as_bytes()).is_empty());
}
