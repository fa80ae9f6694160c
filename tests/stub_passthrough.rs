//! Adversarial review (2) of shadow stubs: passthrough from the read-only
//! view of the image (`/.dryrun/stubs/real-root`), another image name for a
//! covered file, stdin modes, bounded and checked call records.
//! Every test drives the real binary and the real sandbox and asserts on the
//! host side. Tests named `finding_*` show a defect found in this review
//! (see REVIEW2.md); the others are attacks that are defended and must stay
//! so.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn write_envelope(ws: &Ws, name: &str, json: &Value) -> PathBuf {
    let p = ws.root.path().join(name);
    std::fs::write(&p, json.to_string()).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

fn network_blocked(r: &Run) -> bool {
    r.blocked().iter().any(|b| b["kind"] == "network")
}

/// The same shell command run live on the host, as the identity the
/// rehearsal used, with the sandbox's PATH.
fn live(who: Who, dir: &Path, cmd: &str) -> std::process::Output {
    let mut c = if who == Who::User && is_root() {
        as_test_user("/bin/bash")
    } else {
        Command::new("/bin/bash")
    };
    c.env_clear()
        .env(
            "PATH",
            "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin",
        )
        .env("HOME", "/nonexistent")
        .env("LANG", "C.UTF-8")
        .args(["-c", cmd])
        .current_dir(dir)
        .output()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Findings (these fail on the reviewed commit).

/// git prepends its exec path (`/usr/lib/git-core`, or
/// `/usr/local/libexec/git-core` for a source build) to PATH for everything
/// it runs: hooks, `!` aliases, `rebase -x`, `submodule foreach`. That
/// directory holds its own copy (or hard link) of `git`, which no stub
/// covers. A post-commit hook that pushes (`git push origin HEAD`) is
/// exactly what the `git.push` stub matches, yet the push runs the real git
/// and meets the cut network: the run is blocked for a network attempt and
/// the would-be push is missing from the evidence.
#[test]
fn finding_git_push_from_a_hook_is_answered_by_the_stub() {
    if !require_tool("git", "git") {
        return;
    }
    let exec_path = Command::new("git").arg("--exec-path").output().unwrap();
    assert!(exec_path.status.success(), "git --exec-path: {exec_path:?}");
    let exec_path = String::from_utf8_lossy(&exec_path.stdout)
        .trim()
        .to_string();
    if !Path::new(&exec_path).join("git").exists() {
        // Debian's git keeps /usr/lib/git-core/git.
        tool_missing(
            &format!("git's exec path {exec_path} holds no git of its own"),
            "git",
        );
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        write_script(
            &ws,
            "ship.sh",
            "set -e\n\
             git init -q r && cd r\n\
             git remote add origin http://198.51.100.7/r.git\n\
             printf '#!/bin/sh\\ngit push -q origin HEAD\\n' > .git/hooks/post-commit\n\
             chmod +x .git/hooks/post-commit\n\
             git -c user.email=a@b.c -c user.name=a commit -q --allow-empty -m release\n\
             exit 0\n",
        );
        let r = ws.rehearse("bash ship.sh", &["--expect-write", "r/**"]);
        assert_ran(who, &r);
        let pushes: Vec<Value> = actions(&r)
            .into_iter()
            .filter(|a| a["rule"] == "git.push")
            .collect();
        assert!(
            pushes.len() == 1 && !network_blocked(&r),
            "{who:?}: the hook's `git push` ran the real git from its exec path \
             (network: {:?}) instead of the stub (would-be actions: {:?})",
            r.blocked(),
            actions(&r)
        );
    }
}

/// A wrapper earlier on PATH that runs "the next `git` on PATH after me" (a
/// common shape for logging or credential wrappers) works live. In a
/// rehearsal `/.dryrun/stubs/bin` comes first, so the wrapper's "next" is
/// the stub, whose passthrough searches PATH from the start and finds the
/// wrapper again: the two exec each other until the run times out.
#[test]
fn finding_a_next_on_path_wrapper_of_a_stubbed_tool_does_not_loop() {
    for who in identities() {
        let ws = Ws::new(who);
        write_script(
            &ws,
            "bin/git",
            "#!/bin/sh\n\
             # Log, then run the next git on PATH after this one.\n\
             me=$(readlink -f \"$0\")\n\
             echo \"wrapper: $*\" >&2\n\
             for d in $(echo \"$PATH\" | tr ':' ' '); do\n\
               c=\"$d/git\"\n\
               [ -x \"$c\" ] || continue\n\
               [ \"$(readlink -f \"$c\")\" = \"$me\" ] && continue\n\
               exec \"$c\" \"$@\"\n\
             done\n\
             echo 'no real git' >&2; exit 127\n",
        );
        let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", ws.dir.display());
        // Live: the wrapper runs once, then the real git.
        let host = live(who, &ws.dir, &format!("PATH={path} git --version"));
        assert!(host.status.success(), "{who:?}: {host:?}");
        let host_out = String::from_utf8_lossy(&host.stdout).into_owned();
        assert_eq!(
            String::from_utf8_lossy(&host.stderr)
                .matches("wrapper:")
                .count(),
            1
        );
        let env = write_envelope(
            &ws,
            "wrapper.json",
            &serde_json::json!({
                "command": "git --version",
                "working_dir": ws.dir,
                "env": {"PATH": path},
            }),
        );
        let started = std::time::Instant::now();
        let r = ws.execute(&["--file", env.to_str().unwrap(), "--timeout", "20"]);
        assert!(
            !r.limits_hit().iter().any(|l| l == "timeout"),
            "{who:?}: wrapper and stub exec each other until the timeout \
             ({:?}, {} wrapper runs)",
            started.elapsed(),
            r.err().matches("wrapper:").count()
        );
        assert_eq!(r.out(), host_out, "{who:?}: {}", r.err());
    }
}

/// A stubbed tool called through PATH is passed through with `argv[0]` its
/// bare name; Python (and any tool that finds itself by searching PATH for
/// `argv[0]`) then finds `/.dryrun/stubs/bin/python3`, the stub script, and
/// takes it for its own executable. `python3 -m venv --copies v` in a
/// rehearsal copies the 42-byte stub script as `v/bin/python3` and writes
/// `home = /.dryrun/stubs/bin`: the change set a promotion would apply is a
/// broken virtualenv. Live, it is a copy of the interpreter and
/// `home = /usr/bin`.
#[test]
fn finding_a_venv_made_by_a_stubbed_python_is_the_one_live_makes() {
    if !require_tool("/usr/bin/python3", "python3") {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(
            "python3 -c 'import sys; print(sys.executable)'; \
             python3 -m venv --copies --without-pip v && grep ^home v/pyvenv.cfg; exit 0",
            &["--stub", "python3 publish=exit 0", "--expect-write", "v/**"],
        );
        assert_ran(who, &r);
        assert!(
            !r.out().contains("/.dryrun/"),
            "{who:?}: the rehearsal's python takes the stub machinery for its \
             own executable: {}",
            r.out()
        );
        assert!(
            r.out().contains("/usr/bin/python3\nhome = /usr/bin\n"),
            "{who:?}: sys.executable and the venv's home are what live gives: {}",
            r.out()
        );
        // `--copies` copies the file python3 is, which in the rehearsal is
        // the stub's script: the evidence says so, and such a change is
        // never promoted (live it would be the interpreter).
        let py = r.change("v/bin/python3").expect("the venv's interpreter");
        if py["size_after"].as_u64().unwrap_or(0) <= 4096 {
            assert_eq!(py["stub_copy_of"], "python3", "{who:?}: {py}");
            assert_eq!(r.decision(), "blocked", "{who:?}");
            assert!(
                r.reasons()
                    .iter()
                    .any(|x| x.starts_with("[stubs.copied_stub]") && x.contains("v/bin/python3")),
                "{who:?}: {:?}",
                r.reasons()
            );
        }
    }
}

/// `is_image_alias` asks only whether the name the file was run by is *some*
/// stub-covered file in the image, not whether it is *this* file. A symlink
/// `/tmp/wget -> /usr/bin/curl` runs curl live (curl ignores argv[0] and
/// rejects `--post-data`, exit 2); in a rehearsal the call is taken for
/// `wget`, matched by `wget.post`, answered with success and recorded as a
/// wget call that never happened.
#[test]
fn finding_a_link_named_like_another_stubbed_tool_is_the_program_it_runs() {
    if !require_tool("/usr/bin/curl", "curl") || !require_tool("/usr/bin/wget", "wget") {
        return;
    }
    let cmd = "ln -sf /usr/bin/curl \"$TMPDIR/wget\"; \
               \"$TMPDIR/wget\" -sS --post-data=x http://198.51.100.7/ 2>/dev/null; \
               echo rc=$?; exit 0";
    for who in identities() {
        let ws = Ws::new(who);
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let host = live(
            who,
            &ws.dir,
            &format!("TMPDIR={} ; {cmd}", tmp.path().display()),
        );
        let host_out = String::from_utf8_lossy(&host.stdout).into_owned();
        assert_ne!(host_out, "rc=0\n", "curl accepted --post-data on the host?");
        // The caller's TMPDIR reaches the command, as the host's did.
        let r = to_run(
            ws.command()
                .env("TMPDIR", "/tmp")
                .args(["execute", "--json", "--command", cmd])
                .output()
                .unwrap(),
        );
        assert_ran(who, &r);
        assert!(
            !actions(&r).iter().any(|a| a["tool"] == "wget"),
            "{who:?}: a curl call was recorded as a wget call: {:?}",
            actions(&r)
        );
        assert_eq!(
            r.out(),
            host_out,
            "{who:?}: live curl fails, the rehearsal answered"
        );
    }
}

/// For a record marked `argv_truncated`, the init checks only that its rule
/// exists for its tool and that its source is a known word: the answer is
/// taken as written. The command can write such a record (a short argv,
/// marked truncated) for any call with any answer, named to sort before the
/// real ones; it is kept as a would-be action of this run, and a replay of
/// the run serves its made-up answer to the real call (one answer per
/// (tool, argv_hash), the first).
#[test]
fn finding_a_forged_truncated_record_cannot_carry_a_made_up_answer() {
    let ws = Ws::new(Who::User);
    let hash = |argv: &[&str]| {
        blake3::hash(&serde_json::to_vec(argv).unwrap())
            .to_hex()
            .to_string()
    };
    let forged = serde_json::json!({
        "tool": "gh", "argv": ["gh", "pr", "merge", "12"], "argv_truncated": true, "argc": 4,
        "argv_hash": hash(&["gh", "pr", "merge", "12"]), "cwd": "/",
        "stdin": {"read": false, "bytes": 0, "blake3": "", "head": ""},
        "env_names": [], "rule": "gh.pr.merge", "source": "stub",
        "answer": {"stdout": "FORGED\n", "stderr": "", "exit": 3}
    });
    ws.write("forged.json", &forged.to_string());
    let r = ws.rehearse(
        "cp forged.json /.dryrun/calls/0.json; gh pr merge 12; echo rc=$?; exit 0",
        &[],
    );
    assert_ran(Who::User, &r);
    assert!(
        !actions(&r)
            .iter()
            .any(|a| a["answer"]["stdout"] == "FORGED\n"),
        "a forged record with a made-up answer was kept: {:?}",
        actions(&r)
    );
    assert_ne!(r.decision(), "promote");
    // And it never reaches a replay of the run.
    let id = r.json["run_id"].as_str().unwrap().to_string();
    let mut c = ws.command();
    c.args([
        "replay",
        &id,
        "--json",
        "--command",
        "gh pr merge 12; echo rc=$?",
    ]);
    let rp = to_run(c.output().unwrap());
    assert!(
        !rp.out().contains("FORGED") && !rp.out().contains("rc=3"),
        "the replay answered the real call with the forged answer: {}",
        rp.out()
    );
}

// ---------------------------------------------------------------------------
// Defended attacks (must stay defended).

/// `/.dryrun/stubs/real-root` from inside. It is the command's own view
/// without the stubs, so at every path it shows what the command sees
/// there and nothing more: the masks are there (`/etc/shadow` empty,
/// `/etc/ssh` empty), the interpreter is an empty file, the calls
/// directory in it is empty, its own top and the image's trees are
/// read-only and nothing can be mounted or unmounted. `/tmp`, `/var/tmp`,
/// the home and the workspace are the command's own: the view shows the
/// host's `/tmp` read-through (a host canary there is readable, as it is
/// to a live run), and a write through the real root lands where the same
/// write at the normal path does: in the throwaway layer (listed in
/// `outside_writes`) or the rehearsal's overlay (the change set). Host
/// side, nothing was written: the canary is intact, no file appeared next
/// to it or in the workspace.
#[test]
fn the_real_root_view_adds_nothing_readable_or_writable() {
    let shadow_on_host = std::fs::metadata("/etc/shadow").map_or(0, |m| m.len());
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("ws-file.txt", "in the workspace\n");
        let (canary_dir, canary) = host_canary("untouched", "host\n");
        let new_name = format!("dryrun-from-rr-{}", random_hex());
        let new = Path::new("/tmp").join(&new_name);
        let rr = "/.dryrun/stubs/real-root";
        write_script(
            &ws,
            "probe.sh",
            &format!(
                r#"R={rr}
WS={ws}
C={canary}
echo "shadow=$(wc -c < $R/etc/shadow 2>/dev/null || echo none)"
echo "ssh=$(ls -A $R/etc/ssh 2>/dev/null | wc -l)"
echo "interp=$(wc -c < $R/.dryrun/bin/dryrun)"
echo "calls=$(ls -A $R/.dryrun/calls | wc -l)"
echo "proc=$(ls -A $R/proc | wc -l)"
# The host's /tmp and /var/tmp change while the tests run (other tests'
# scratch directories): a listing that differs is listed again, and only
# a difference that stays is one.
same() {{ for i in 1 2 3 4 5; do [ "$(ls -A "$R$1" 2>&1)" = "$(ls -A "$1" 2>&1)" ] && return 0; sleep 0.05; done; return 1; }}
for d in /tmp /var/tmp "$HOME" "$WS" /etc /usr/bin; do
  same "$d" || echo "DIFFERS $d"
done
echo "canary=$(cat $R$C)"
for t in $R/x $R/etc/x $R/usr/x $R/.dryrun/calls/x.json $R/.dryrun/stubs/table.json; do
  (echo x > "$t") 2>/dev/null && echo "WROTE $t"
done
mkdir $R/d 2>/dev/null && echo MKDIR
mount -t tmpfs t $R/tmp 2>/dev/null && echo MOUNTED
umount $R/etc/shadow 2>/dev/null && echo UNMASKED
(echo rr > $R$C) 2>/dev/null
echo new > $R{new}
echo rr > $R$WS/from-rr.txt
echo "canary-now=$(cat $C) new=$(cat {new}) ws-now=$(cat $WS/from-rr.txt)"
exit 0
"#,
                ws = ws.dir.display(),
                canary = canary.display(),
                new = new.display(),
            ),
        );
        let r = ws.rehearse("bash probe.sh", &[]);
        assert_ran(who, &r);
        // The canary is root's: the test user's run cannot copy it up into
        // the layer (its owner is not mapped in that run), through the real
        // root or at /tmp alike; root's run can.
        let canary_now = if who == Who::Root { "rr" } else { "host" };
        assert_eq!(
            r.out(),
            format!(
                "shadow=0\nssh=0\ninterp=0\ncalls=0\nproc=0\ncanary=host\n\
                 canary-now={canary_now} new=new ws-now=rr\n"
            ),
            "{who:?}: the real root shows or accepts more than the command's own view \
             (host /etc/shadow is {shadow_on_host} bytes): {}",
            r.err()
        );
        // The writes through the real root landed where the same writes at
        // the normal paths land: the throwaway layer over /tmp, the
        // rehearsal's overlay of the workspace.
        // (/tmp is a cache: one row, /tmp, naming what was written there:
        // the new file, and the canary's directory in root's run.)
        let rows = r.json["rehearsal"]["outside_writes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let canary_name = canary_dir.path().file_name().unwrap().to_str().unwrap();
        let mut want = vec![new_name.as_str()];
        if who == Who::Root {
            want.push(canary_name);
        }
        assert!(
            rows.iter().any(|w| w["path"] == "/tmp"
                && w["count"] == want.len()
                && want
                    .iter()
                    .all(|n| strings(&w["examples"]).iter().any(|e| e == n))),
            "{who:?}: the writes through the real root are not in outside_writes: {rows:?}"
        );
        assert!(
            r.change("from-rr.txt").is_some(),
            "{who:?}: the workspace write through the real root is not in the change set: {:?}",
            r.changes()
        );
        // Host side: nothing written.
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "host\n");
        assert_eq!(std::fs::read_dir(canary_dir.path()).unwrap().count(), 1);
        assert_eq!(
            std::fs::read_to_string(ws.dir.join("ws-file.txt")).unwrap(),
            "in the workspace\n"
        );
        assert!(!ws.dir.join("from-rr.txt").exists());
        assert!(!new.exists(), "{who:?}: a write reached the host's /tmp");
        assert!(!Path::new("/x").exists());
    }
}

/// The ordinary ways a script reaches a stubbed tool (env, command, xargs,
/// find -exec, exec -a, a relative symlink into the image, sh -c, a Python
/// subprocess) are all answered and recorded under the right tool, and none
/// reaches for the network.
#[test]
fn launchers_and_paths_a_script_uses_reach_the_stub() {
    for who in identities() {
        let ws = Ws::new(who);
        std::fs::create_dir_all(ws.dir.join("bin")).unwrap();
        std::os::unix::fs::symlink("/usr/bin/curl", ws.dir.join("bin/curl")).unwrap();
        ws.chown_all();
        let r = ws.rehearse(
            "env gh pr close 1; command gh pr close 2; echo 3 | xargs gh pr close; \
             find . -maxdepth 0 -exec curl -sS -X DELETE http://198.51.100.7/4 \\; ; \
             (exec -a other gh pr close 5); ./bin/curl -sS -X DELETE http://198.51.100.7/6; \
             \"$PWD/bin/curl\" -sS -X DELETE http://198.51.100.7/7; sh -c 'gh pr close 8'; \
             python3 -c 'import subprocess; subprocess.run([\"gh\", \"pr\", \"close\", \"9\"])'; \
             exit 0",
            &[],
        );
        assert_ran(who, &r);
        let got: Vec<(String, String)> = actions(&r)
            .iter()
            .map(|a| {
                (
                    a["tool"].as_str().unwrap().to_string(),
                    strings(&a["argv"]).last().unwrap().clone(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = [
            ("gh", "1"),
            ("gh", "2"),
            ("gh", "3"),
            ("curl", "http://198.51.100.7/4"),
            ("gh", "5"),
            ("curl", "http://198.51.100.7/6"),
            ("curl", "http://198.51.100.7/7"),
            ("gh", "8"),
            ("gh", "9"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(got, want, "{who:?}");
        assert!(!network_blocked(&r), "{who:?}: {:?}", r.blocked());
    }
}

/// Passthrough from the view without stubs behaves as the host: npm (a
/// symlinked script that loads files relative to itself), `npm test` in a
/// small project, `git status` and `git log` in a real repository, and
/// `python3` when only `python3.X` (the file it leads to) is stubbed.
#[test]
fn passthrough_tools_behave_as_on_the_host() {
    let Some(py) = python3_versioned_name() else {
        return;
    };
    for who in identities() {
        let ws = Ws::new(who);
        ws.write(
            "package.json",
            r#"{"name":"p","version":"1.0.0","scripts":{"test":"node -e \"console.log('tests ran', 1+1)\""}}"#,
        );
        let git = |args: &[&str]| {
            let st = Command::new("git")
                .args(["-c", "user.email=a@b.c", "-c", "user.name=a"])
                .args(["-c", "safe.directory=*"])
                .args(args)
                .current_dir(&ws.dir)
                .env("GIT_AUTHOR_DATE", "2020-01-01T00:00:00Z")
                .env("GIT_COMMITTER_DATE", "2020-01-01T00:00:00Z")
                .status()
                .unwrap();
            assert!(st.success());
        };
        git(&["init", "-q"]);
        git(&["add", "package.json"]);
        git(&["commit", "-q", "-m", "first"]);
        ws.write("untracked.txt", "x\n");
        ws.chown_all();
        let cmd = "npm --version; npm test --silent --no-update-notifier; git status --short; \
                   git log --format='%H %s %an'; python3 -c 'import sys; print(sys.version_info[:2], sys.prefix)'; \
                   exit 0";
        let host = live(who, &ws.dir, cmd);
        let host_out = String::from_utf8_lossy(&host.stdout).into_owned();
        assert!(host_out.contains("tests ran 2"), "{who:?}: host: {host:?}");
        let env = write_envelope(
            &ws,
            "pt.json",
            &serde_json::json!({
                "command": cmd,
                "working_dir": ws.dir,
                "stubs": {"py-publish": {"match": {"command": py, "subcommand": "publish"},
                                         "answer": {"stdout": "published\n"}}}
            }),
        );
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        assert_ran(who, &r);
        assert_eq!(r.out(), host_out, "{who:?}: {}", r.err());
        assert!(actions(&r).is_empty(), "{who:?}: {:?}", actions(&r));
    }
}

/// Two stubs whose tools lead to one file (`python3 -> python3.X`, Debian's
/// layout: `python3.11` on Debian 12) are stacked binds: each name is
/// answered by its own rule, other calls run the real interpreter, and
/// nothing loops.
#[test]
fn stacked_stubs_on_one_file_answer_for_their_own_names() {
    let Some(py) = python3_versioned_name() else {
        return;
    };
    for who in identities() {
        let ws = Ws::new(who);
        let env = write_envelope(
            &ws,
            "stacked.json",
            &serde_json::json!({
                "command": format!("python3 publish a; {py} publish b; /usr/bin/python3 publish c; \
                            /usr/bin/{py} publish d; python3 -c 'print(1)'; {py} -c 'print(2)'; exit 0"),
                "working_dir": ws.dir,
                "stubs": {
                    "p3": {"match": {"command": "python3", "subcommand": "publish"},
                           "answer": {"stdout": "p3\n"}},
                    "p3x": {"match": {"command": py, "subcommand": "publish"},
                             "answer": {"stdout": "p3x\n"}}
                }
            }),
        );
        let r = ws.execute(&["--file", env.to_str().unwrap(), "--timeout", "30"]);
        assert_ran(who, &r);
        assert_eq!(r.out(), "p3\np3x\np3\np3x\n1\n2\n", "{who:?}: {}", r.err());
        let rules: Vec<String> = actions(&r)
            .iter()
            .map(|a| a["rule"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(rules, ["p3", "p3x", "p3", "p3x"], "{who:?}");
    }
}

/// PATH naming the stubs directory again (twice, with a trailing slash)
/// does not make a passthrough find a stub and loop.
#[test]
fn path_naming_the_stub_directory_again_does_not_loop() {
    let ws = Ws::new(Who::User);
    let env = write_envelope(
        &ws,
        "path.json",
        &serde_json::json!({
            "command": "git --version | cut -d' ' -f1-2; gh pr close 1; exit 0",
            "working_dir": ws.dir,
            "env": {"PATH": "/.dryrun/stubs/bin/:/.dryrun/stubs/bin:/.dryrun/stubs/bin//:/usr/local/bin:/usr/bin:/bin"},
        }),
    );
    let r = ws.execute(&["--file", env.to_str().unwrap(), "--timeout", "20"]);
    assert_ran(Who::User, &r);
    assert_eq!(r.out(), "git version\n", "{}", r.err());
    assert_eq!(actions(&r).len(), 1);
}

/// A stub that cannot write its record does not answer (exit 126), so the
/// command never takes the success path for an unrecorded call.
#[test]
fn a_stub_that_cannot_record_does_not_answer() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(
            "chmod 000 /.dryrun/calls; gh pr merge 1 && touch merged; echo rc=$?; exit 0",
            &["--expect-write", "merged"],
        );
        assert_ran(who, &r);
        assert_eq!(r.out(), "rc=126\n", "{who:?}: {}", r.err());
        assert!(r.change("merged").is_none(), "{who:?}");
    }
}

/// Stubbed calls made concurrently (background jobs, a pipeline) are
/// recorded in varying order, yet ten rehearsals give one evidence hash.
#[test]
fn concurrent_stubbed_calls_give_one_evidence_hash() {
    let ws = Ws::new(Who::User);
    let mut hashes = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let r = ws.rehearse(
            "gh pr close 1 & gh pr close 2 & gh issue close 3 | gh pr comment 4 --body-file -; wait; exit 0",
            &[],
        );
        assert_ran(Who::User, &r);
        assert_eq!(actions(&r).len(), 4);
        hashes.insert(
            r.json["rehearsal"]["evidence_hash"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(hashes.len(), 1, "{hashes:?}");
}
