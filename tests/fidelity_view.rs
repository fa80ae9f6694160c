//! The view: a rehearsal shows the user's own world (its home and the
//! toolchains there, its PATH, /tmp and /var/tmp), writes outside the
//! workspace are seen and listed instead of lost, and what the sandbox hid
//! is named. The attacks on the view are in `hostile_view.rs`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::daemon::*;
use common::*;

/// The passwd home of `user` (made, owned by it, when missing: the test
/// user is created without one).
fn home_of(user: &str) -> PathBuf {
    let out = std::process::Command::new("getent")
        .args(["passwd", user])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let home = PathBuf::from(line.trim().split(':').nth(5).expect("a passwd entry"));
    if !home.exists() && is_root() {
        std::fs::create_dir_all(&home).unwrap();
        let (u, g) = test_user();
        std::os::unix::fs::chown(&home, Some(u), Some(g)).unwrap();
    }
    home
}

/// The home a run of `who` shows: root's, or the test user's.
fn home_for(who: Who) -> PathBuf {
    match who {
        Who::Root => home_of("root"),
        Who::User => home_of(TEST_USER),
    }
}

/// `dryrun execute --json --file ENVELOPE` in `ws` for `cmd`, with `env`
/// (the real `HOME` and a `PATH`) and `extra` envelope fields.
fn run_with_env(ws: &Ws, cmd: &str, env: serde_json::Value, extra: serde_json::Value) -> Run {
    let mut body = serde_json::json!({"command": cmd, "working_dir": ws.dir, "env": env});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let p = ws
        .root
        .path()
        .join(format!("envelope-{}.json", random_hex()));
    std::fs::write(&p, body.to_string()).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    ws.execute(&["--file", p.to_str().unwrap()])
}

fn env_for(who: Who, path: &str) -> serde_json::Value {
    serde_json::json!({"HOME": home_for(who), "PATH": path})
}

fn outside(r: &Run) -> Vec<Value> {
    r.json["rehearsal"]["outside_writes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A script in the workspace (what the classifier sees is `./NAME`, not
/// the writes it makes).
fn script(ws: &Ws, name: &str, body: &str) {
    write_script(ws, name, &format!("#!/bin/bash\nset -e\n{body}\n"));
}

/// Root's own toolchains, where root keeps them: rustup's cargo and rustc
/// in `~/.cargo/bin`, pyenv's python, run in a root-submitted rehearsal
/// as they run on the host.
#[test]
fn roots_toolchains_in_its_home_run_in_its_rehearsal() {
    if !require_root()
        || !require_tool("/root/.cargo/bin/cargo", "rustup (in root's home)")
        || !require_tool(
            "/root/.pyenv/shims/python",
            "pyenv (in root's home; tests/run.sh makes a stand-in)",
        )
    {
        return;
    }
    let path = "/root/.cargo/bin:/root/.pyenv/shims:/usr/local/bin:/usr/bin:/bin";
    let cmd = "cargo --version; rustc --version; python --version; command -v rustc python";
    let host = std::process::Command::new("bash")
        .args(["-c", cmd])
        .env_clear()
        .env("PATH", path)
        .env("HOME", "/root")
        .output()
        .unwrap();
    assert!(host.status.success(), "the host itself: {host:?}");
    let ws = Ws::new(Who::Root);
    let r = run_with_env(&ws, cmd, env_for(Who::Root, path), serde_json::json!({}));
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert_eq!(
        r.out().trim_end(),
        String::from_utf8_lossy(&host.stdout).trim_end(),
        "{r:?}"
    );
    assert!(r.out().contains("/root/.cargo/bin/rustc"), "{}", r.out());
}

/// A toolchain-like program in the test user's own `~/.local/bin`, on its
/// PATH, runs in its rehearsals: in-process as the user, and through a
/// root daemon (the home shown through an id-mapped layer, where a file
/// only the user may read is the user's to read).
#[test]
fn a_program_in_the_users_local_bin_runs_in_its_rehearsal() {
    if !require_root() {
        return;
    }
    let home = home_of(TEST_USER);
    let tag = random_hex();
    let bin = home.join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join(format!("dryrun-view-tool-{tag}"));
    std::fs::write(&tool, format!("#!/bin/sh\necho tool-{tag} \"$@\"\n")).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = home.join(format!("dryrun-view-private-{tag}"));
    std::fs::write(&private, format!("private-{tag}\n")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (u, g) = test_user();
    for p in [
        home.join(".local"),
        bin.clone(),
        tool.clone(),
        private.clone(),
    ] {
        std::os::unix::fs::chown(&p, Some(u), Some(g)).unwrap();
    }
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let cmd = format!("dryrun-view-tool-{tag} ran; cat {}", private.display());
    let want = format!("tool-{tag} ran\nprivate-{tag}");
    // In-process, as the user.
    let ws = Ws::new(Who::User);
    let r = run_with_env(&ws, &cmd, env_for(Who::User, &path), serde_json::json!({}));
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert_eq!(r.out().trim_end(), want);
    // Through a root daemon.
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                  "env": env_for(Who::User, &path)});
    let (_keep, file) = agent_envelope_file(&body.to_string());
    let out = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--file"])
        .arg(&file)
        .output()
        .unwrap();
    let r = run_json(out);
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert_eq!(r.out().trim_end(), want);
    assert!(
        r.json["rehearsal"]["sandbox"]["ids"]
            .as_str()
            .unwrap()
            .starts_with("shifted"),
        "{r:?}"
    );
    std::fs::remove_file(&tool).unwrap();
    std::fs::remove_file(&private).unwrap();
}

/// A write into a cache in the home (`~/.cache`) is listed, not judged:
/// the run promotes, the promotion applies the workspace's change only,
/// and the real cache is untouched.
#[test]
fn a_cache_write_is_listed_and_the_run_promotes() {
    for who in identities() {
        let home = home_for(who);
        let tag = random_hex();
        // Its directory and file, and `~/.cache` itself when the user had
        // none yet (a fresh machine's test user): the run makes it too.
        let expected = if home.join(".cache").is_dir() { 2 } else { 3 };
        let ws = Ws::new(who);
        script(
            &ws,
            "tool.sh",
            &format!(
                "mkdir -p \"$HOME/.cache/dryrun-view-{tag}\"\necho state > \"$HOME/.cache/dryrun-view-{tag}/state.json\"\necho built > out.txt"
            ),
        );
        let r = run_with_env(
            &ws,
            "./tool.sh",
            env_for(who, "/usr/bin:/bin"),
            serde_json::json!({"intent": {"expected_writes": ["out.txt"]}}),
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let rows = outside(&r);
        let cache = home.join(".cache").display().to_string();
        let row = rows
            .iter()
            .find(|w| w["path"] == cache.as_str())
            .unwrap_or_else(|| panic!("{who:?}: no row for {cache}: {rows:?}"));
        assert_eq!(row["cache"], true, "{row}");
        assert_eq!(row["cache_rule"], "cache:xdg-cache", "{row}");
        assert_eq!(row["count"], expected, "{row}");
        assert_eq!(r.decision(), "promote", "{who:?}: {:?}", r.reasons());
        let id = run_id(&r);
        let out = ws
            .command()
            .args(["promote", &id, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{who:?}: {out:?}");
        assert_eq!(
            std::fs::read_to_string(ws.dir.join("out.txt")).unwrap(),
            "built\n"
        );
        assert!(!home.join(format!(".cache/dryrun-view-{tag}")).exists());
    }
}

/// A write to the user's real configuration (`~/.gitconfig`, as `git
/// config --global` makes) is a finding: the live lane will not make it,
/// so the run needs approval, and the real file is untouched.
#[test]
fn a_gitconfig_write_is_a_finding_and_needs_approval() {
    if !require_tool("git", "git") {
        return;
    }
    for who in identities() {
        let home = home_for(who);
        let before = std::fs::read(home.join(".gitconfig")).ok();
        let ws = Ws::new(who);
        script(
            &ws,
            "setup.sh",
            "git config --global dryrun.viewtest yes\ngit config --global --get dryrun.viewtest",
        );
        let r = run_with_env(
            &ws,
            "./setup.sh",
            env_for(who, "/usr/bin:/bin"),
            serde_json::json!({}),
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert_eq!(r.out().trim_end(), "yes");
        let rows = outside(&r);
        let row = rows
            .iter()
            .find(|w| w["path"] == home.display().to_string().as_str())
            .unwrap_or_else(|| panic!("{who:?}: {rows:?}"));
        assert_eq!(row["cache"], false, "{row}");
        assert!(
            strings(&row["examples"]).contains(&".gitconfig".to_string()),
            "{row}"
        );
        assert_eq!(r.decision(), "needs_approval", "{who:?}: {:?}", r.reasons());
        assert_eq!(r.code, 3);
        let reason = r
            .reasons()
            .into_iter()
            .find(|m| m.starts_with("[view.outside_writes]"))
            .unwrap_or_else(|| panic!("{who:?}: {:?}", r.reasons()));
        assert!(
            reason.contains(".gitconfig") && reason.contains("will not happen live"),
            "{reason}"
        );
        assert_eq!(
            std::fs::read(home.join(".gitconfig")).ok(),
            before,
            "{who:?}"
        );
    }
}

/// Writes to `/tmp` and `/var/tmp` land in throwaway layers over the real
/// ones: the command reads the host's files there and its own writes, the
/// writes are listed (a cache), and the host never sees them.
#[test]
fn tmp_and_var_tmp_writes_are_listed_and_dropped() {
    for who in identities() {
        let tag = random_hex();
        let (_d, canary) = host_canary("visible.txt", &format!("host-{tag}"));
        let ws = Ws::new(who);
        script(
            &ws,
            "scratch.sh",
            &format!(
                "cat {}\nmkdir /tmp/dryrun-view-{tag}\necho a > /tmp/dryrun-view-{tag}/a\necho b > /var/tmp/dryrun-view-{tag}\ncat /tmp/dryrun-view-{tag}/a /var/tmp/dryrun-view-{tag}",
                canary.display()
            ),
        );
        let r = run_with_env(
            &ws,
            "./scratch.sh",
            env_for(who, "/usr/bin:/bin"),
            serde_json::json!({}),
        );
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert_eq!(r.out().trim_end(), format!("host-{tag}a\nb"));
        let rows = outside(&r);
        for dir in ["/tmp", "/var/tmp"] {
            let row = rows
                .iter()
                .find(|w| w["path"] == dir)
                .unwrap_or_else(|| panic!("{who:?}: no {dir} row: {rows:?}"));
            assert_eq!(row["cache_rule"], "cache:tmp", "{row}");
            assert!(
                strings(&row["examples"]).contains(&format!("dryrun-view-{tag}")),
                "{row}"
            );
        }
        assert_eq!(r.decision(), "promote", "{who:?}: {:?}", r.reasons());
        assert!(!Path::new(&format!("/tmp/dryrun-view-{tag}")).exists());
        assert!(!Path::new(&format!("/var/tmp/dryrun-view-{tag}")).exists());
    }
}

/// A program the host has on the run's PATH, in a directory the view hides
/// (another user's home, for root's run): exit 127 says so plainly, in the
/// verdict's reasons and in the human output, naming the path and the
/// rule.
#[test]
fn exit_127_names_a_program_the_host_has_but_the_sandbox_hid() {
    if !require_root() {
        return;
    }
    let home = home_of(TEST_USER);
    let tag = random_hex();
    let dir = home.join(format!("dryrun-view-bin-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = dir.join(format!("hidden-tool-{tag}"));
    std::fs::write(&tool, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = Ws::new(Who::Root);
    let path = format!("{}:/usr/bin:/bin", dir.display());
    let cmd = format!("hidden-tool-{tag}");
    let r = run_with_env(&ws, &cmd, env_for(Who::Root, &path), serde_json::json!({}));
    assert_eq!(r.exit_code(), Some(127), "{r:?}");
    let reasons = r.reasons().join("\n");
    let shown = tool.display().to_string();
    assert!(
        reasons.contains(&format!(
            "[view.hidden] the rehearsal differs from the live run: the program {shown} exists on the host but the sandbox hid it (rule view.other_home"
        )),
        "{reasons}"
    );
    // The exit status (a result, not a block by itself) says why too.
    let notes = r.notes().join("\n");
    assert!(
        notes.contains(&format!(
            "the command exited with status 127 (command not found: {shown} is on the host, but the sandbox hid it: rule view.other_home"
        )),
        "{notes}"
    );
    let hidden = &r.json["rehearsal"]["hidden"][0];
    assert_eq!(hidden["kind"], "program", "{hidden}");
    assert_eq!(hidden["path"], shown.as_str(), "{hidden}");
    // The human output says it too.
    let p = ws.root.path().join("e.json");
    std::fs::write(
        &p,
        serde_json::json!({"command": cmd, "working_dir": ws.dir, "env": env_for(Who::Root, &path)})
            .to_string(),
    )
    .unwrap();
    let out = ws
        .command()
        .args(["execute", "--file"])
        .arg(&p)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("command not found")
            && text.contains(&shown)
            && text.contains("view.other_home"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A host tree holding a mount (a chroot's `/proc` under `/var/tmp`, a
/// bind under `/tmp`) cannot be a lower layer for the test user's run (the
/// kernel refuses it): the run goes on without that layer and the record
/// names it. `/tmp` and `/var/tmp` are then fresh ones (the command writes
/// there as it would live, the host's stay as they were). The mounts are
/// made in a private mount namespace
/// the run starts in, so no other process on the host ever sees them.
#[test]
fn a_scratch_tree_holding_a_mount_is_left_out_and_named() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    let tmp_tree = tempfile::Builder::new()
        .prefix("dryrun-held-")
        .tempdir_in("/tmp")
        .unwrap();
    let var_tree = tempfile::Builder::new()
        .prefix("dryrun-held-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let name = format!("dryrun-fallback-{}", random_hex());
    let wrapper = ns::in_private_mount_ns(
        "mkdir \"$0/proc\" \"$1/proc\" && mount -t proc proc \"$0/proc\" && \
         mount -t proc proc \"$1/proc\" && shift && exec \"$@\"",
        &[
            tmp_tree.path().display().to_string(),
            var_tree.path().display().to_string(),
        ],
    );
    let mut c = ws.command_via(&wrapper);
    c.args([
        "execute",
        "--json",
        "--command",
        &format!(
            "echo t > /tmp/{name} && echo tmp-ok; echo v > /var/tmp/{name} 2>/dev/null && echo var-ok || echo var-refused; \
             ls /tmp | grep -c dryrun-held-; exit 0"
        ),
    ]);
    let r = to_run(c.output().unwrap());
    assert_ran(Who::User, &r);
    // Both scratch trees are fresh ones the command may write, as it may
    // the host's (a build's temporary files, a test's scratch directory).
    assert_eq!(r.out(), "tmp-ok\nvar-ok\n0\n", "{}", r.err());
    let stripped = r.stripped();
    for (tree, instead) in [
        ("/tmp", "a fresh, empty /tmp"),
        ("/var/tmp", "a fresh, empty /var/tmp"),
    ] {
        assert!(
            stripped
                .iter()
                .any(|s| s.starts_with(&format!(
                    "hidden:{tree} (the host's tree could not be layered:"
                )) && s.ends_with(&format!("the command sees {instead} instead)"))),
            "{tree} not named: {stripped:?}"
        );
    }
    // Host side: nothing written, and the mounts were never the host's.
    assert!(!Path::new("/tmp").join(&name).exists());
    assert!(!Path::new("/var/tmp").join(&name).exists());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains("dryrun-held-"), "{mountinfo}");
}

/// A fresh `/var/tmp` (the host's held a mount) is capped as `/tmp` is, and
/// a command that fills it has hit the run's disk limit: the record says so
/// (`limits_hit: disk`), as it does for a full workspace layer or `/tmp`,
/// instead of a bare ENOSPC the reviewer has to explain. Only `/var/tmp`
/// holds a mount here, so `/tmp` is the throwaway layer and is not full.
#[test]
fn filling_a_fresh_var_tmp_is_the_disk_limit() {
    if !require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    let var_tree = tempfile::Builder::new()
        .prefix("dryrun-held-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let wrapper = ns::in_private_mount_ns(
        "mkdir \"$0/proc\" && mount -t proc proc \"$0/proc\" && exec \"$@\"",
        &[var_tree.path().display().to_string()],
    );
    let name = format!("dryrun-fill-{}", random_hex());
    let mut c = ws.command_via(&wrapper);
    c.args([
        "execute",
        "--json",
        "--command",
        &format!("dd if=/dev/zero of=/var/tmp/{name} bs=1M count=1024 status=none"),
    ]);
    let r = to_run(c.output().unwrap());
    assert!(
        r.stripped()
            .iter()
            .any(|s| s.starts_with("hidden:/var/tmp (the host's tree could not be layered:")),
        "the fallback did not happen: {:?}",
        r.stripped()
    );
    assert_ne!(r.exit_code(), Some(0), "{}", r.err());
    assert!(r.err().contains("No space left on device"), "{}", r.err());
    assert!(
        r.limits_hit().contains(&"disk".to_string()),
        "limits_hit {:?}, rehearsal {}",
        r.limits_hit(),
        r.json["rehearsal"]
    );
    assert!(!Path::new("/var/tmp").join(&name).exists());
}
