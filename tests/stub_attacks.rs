//! Adversarial review of shadow stubs, replay and run diffs:
//! attacks from inside the rehearsal (the stub interpreter, the stub table,
//! the calls directory), hostile envelopes and `--stub` values, and what
//! reaches the reviewer. Every test drives the real binary and the real
//! sandbox and asserts on the host side. Tests named `finding_*` show a
//! defect found in the review (see REVIEW-stubs.md); the others are attacks
//! that are defended and must stay so.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn write_envelope(ws: &Ws, name: &str, json: &str) -> PathBuf {
    let p = ws.root.path().join(name);
    std::fs::write(&p, json).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

fn record_path(ws: &Ws, id: &str) -> PathBuf {
    ws.state.join("runs").join(id).join("record.json")
}

fn runs_in_state(ws: &Ws) -> usize {
    std::fs::read_dir(ws.state.join("runs"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Every byte of every file under `dir` (the state directory), for canary searches.
fn all_bytes_under(dir: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let e = e.unwrap();
        if e.file_type().is_file() {
            v.extend(std::fs::read(e.path()).unwrap_or_default());
            v.push(b'\n');
        }
    }
    v
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn argv_hash(argv: &[&str]) -> String {
    blake3::hash(&serde_json::to_vec(argv).unwrap())
        .to_hex()
        .to_string()
}

// ---------------------------------------------------------------------------
// Findings (these fail on the reviewed commit).

/// `bash`, `sh`, `dash`, `env` and `dryrun` can never be stubbed, by name.
/// But the stub is bind-mounted over the *resolved* file of each copy in the
/// image, and `/usr/bin/rbash -> bash`: stubbing `rbash` puts the stub over
/// `/usr/bin/bash`, the sandbox's own shell, so the whole command is
/// "answered" by the stub and never runs (the evidence is the envelope's
/// made-up answer).
#[test]
fn finding_an_alias_of_bash_cannot_stub_the_sandbox_shell() {
    let alias_of_bash = ["/usr/bin/rbash", "/bin/rbash"].iter().any(|p| {
        std::fs::canonicalize(p).is_ok_and(|t| t.file_name().is_some_and(|n| n == "bash"))
    });
    if !alias_of_bash {
        eprintln!("SKIP: no rbash -> bash symlink on this host");
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let env = write_envelope(
            &ws,
            "env.json",
            &format!(
                r#"{{"command": "echo real > created.txt; echo real-ran",
                    "working_dir": "{}",
                    "intent": {{"expected_writes": ["created.txt"]}},
                    "stubs": {{"shell": {{"match": {{"command": "rbash"}},
                               "answer": {{"stdout": "FAKE\n", "exit": 0}}}}}}}}"#,
                ws.dir.display()
            ),
        );
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        if r.code == 2 {
            // Refused before anything ran: acceptable, as long as it names the field.
            assert!(r.stderr.contains("stubs.shell"), "{who:?}: {}", r.stderr);
            continue;
        }
        assert_eq!(
            r.out(),
            "real-ran\n",
            "{who:?}: the sandbox shell was replaced by a stub; the command never ran: {:?}",
            r.json["rehearsal"]
        );
        assert!(
            r.change("created.txt").is_some(),
            "{who:?}: {:?}",
            r.changes()
        );
    }
}

/// A real stubbed call whose record is larger than the 1 MiB the init reads
/// (argv with control bytes: JSON escapes them 6:1) is answered by the stub
/// (the command takes the success path) but not recorded; the verdict
/// ignored dropped records, so the run was promoted with no
/// `stubs.would_be_action` finding, and `incomplete` said the calls were
/// "past the first 256", which is not what happened. (The verdict half is
/// fixed on this branch; the record is still lost.)
#[test]
fn finding_a_stubbed_call_with_a_large_argv_is_not_silently_dropped() {
    for who in identities() {
        let ws = Ws::new(who);
        write_script(
            &ws,
            "post.sh",
            "X=\"$(head -c 100000 /dev/zero | tr '\\0' '\\001')\"\n\
             curl -X POST -d \"$X\" -d \"$X\" https://api.example.invalid/x && echo posted > out.txt\n\
             exit 0\n",
        );
        let r = ws.rehearse("bash post.sh", &["--expect-write", "out.txt"]);
        assert_ran(who, &r);
        assert!(
            r.change("out.txt").is_some(),
            "{who:?}: the stub answered the POST (success path taken): {:?}",
            r.changes()
        );
        assert_ne!(
            r.decision(),
            "promote",
            "{who:?}: a POST answered by a stub left no would-be action and the run was promoted \
             (incomplete={:?}, reasons={:?})",
            r.json["rehearsal"]["incomplete"],
            r.reasons()
        );
        // And the reviewer sees which call it was.
        let a = actions(&r);
        assert!(
            a.len() == 1 && a[0]["tool"] == "curl" && a[0]["rule"] == "curl.data",
            "{who:?}: the POST is missing from would_be_actions (incomplete={:?})",
            r.json["rehearsal"]["incomplete"]
        );
        // Kept bounded, marked as cut, hashed whole.
        assert_eq!(a[0]["argv_truncated"], true);
        assert_eq!(a[0]["argc"], 8);
        assert!(strings(&a[0]["argv"]).iter().all(|x| x.len() <= 4096));
        assert_eq!(a[0]["argv"][7], "https://api.example.invalid/x");
        let x = "\u{1}".repeat(100_000);
        assert_eq!(
            a[0]["argv_hash"].as_str().unwrap(),
            argv_hash(&[
                "curl",
                "-X",
                "POST",
                "-d",
                &x,
                "-d",
                &x,
                "https://api.example.invalid/x"
            ])
        );
    }
}

/// dryrun knows it could not read some call records (unparsable, e.g.
/// overwritten by the command), yet such a run is promoted: the verdict
/// must not treat "some would-be actions were lost" as "there were none".
#[test]
fn finding_unreadable_call_records_do_not_let_a_run_be_promoted() {
    let ws = Ws::new(Who::User);
    // A real stubbed call, then its record overwritten (the command owns it).
    write_script(
        &ws,
        "merge.sh",
        "gh pr merge 12 --squash || exit 1\n\
         for f in /.dryrun/calls/*.json; do echo garbage > \"$f\"; done\n\
         exit 0\n",
    );
    let r = ws.rehearse("bash merge.sh", &[]);
    assert_ran(Who::User, &r);
    // The record says some calls were lost (`incomplete`).
    assert!(
        !strings(&r.json["rehearsal"]["incomplete"]).is_empty(),
        "{:?}",
        r.json["rehearsal"]
    );
    assert_ne!(
        r.decision(),
        "promote",
        "would-be actions were lost and the run was promoted: reasons {:?}, incomplete {:?}",
        r.reasons(),
        r.json["rehearsal"]["incomplete"]
    );
}

/// The stub reads all of its stdin even when the real tool would not
/// (`gh pr close N` never reads stdin). In the most common loop shape,
/// `while read n; do gh pr close "$n"; done < list`, the first stubbed call
/// swallows the rest of the list: the rehearsal shows one would-be action
/// where the live run makes three, and the control flow differs from live.
#[test]
fn finding_a_stub_does_not_swallow_the_stdin_of_a_while_read_loop() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("list.txt", "1\n2\n3\n");
        let r = ws.rehearse(
            "while read -r n; do gh pr close \"$n\"; echo \"closed $n\"; done < list.txt; exit 0",
            &[],
        );
        assert_ran(who, &r);
        let calls: Vec<Vec<String>> = actions(&r).iter().map(|a| strings(&a["argv"])).collect();
        assert_eq!(
            r.out(),
            "closed 1\nclosed 2\nclosed 3\n",
            "{who:?}: the loop's control flow changed under the stub; actions {calls:?}"
        );
        assert_eq!(calls.len(), 3, "{who:?}: {calls:?}");
    }
}

/// A would-be action's record comes from a file the command can rewrite,
/// and `dryrun show` / `execute` print it. The host keeps only a record the
/// run's stub could have written (`record_is_consistent`: the answer, rule
/// and source the table gives for that argv, the hash over argv, bounded
/// fields), but the stdin head is not checked against anything: the forged
/// record below passes the check (it is kept, with its head) and its
/// terminal sequences must still reach neither stdout nor stderr raw.
#[test]
fn finding_forged_call_records_cannot_write_escape_sequences_to_the_terminal() {
    for who in identities() {
        forged_call_record_reaches_no_terminal_raw(who);
    }
}

fn forged_call_record_reaches_no_terminal_raw(who: Who) {
    let ws = Ws::new(who);
    write_script(
        &ws,
        "forge.sh",
        r#"gh pr merge 1 >/dev/null
python3 - <<'PY'
import glob, json
for p in glob.glob("/.dryrun/calls/*.json"):
    r = json.load(open(p))
    head = "in\n\u001b]0;PWNED\u0007\u001b[2J\u001b]52;c;ZXZpbA==\u0007\u009b31m\n"
    r["stdin"] = {"read": True, "bytes": len(head.encode()), "blake3": "", "head": head}
    json.dump(r, open(p, "w"))
PY
exit 0
"#,
    );
    let r = ws.rehearse("bash forge.sh", &[]);
    assert_ran(ws.who, &r);
    // The forged record passed the check: kept, with the forged head.
    let acts = actions(&r);
    assert_eq!(
        acts.len(),
        1,
        "{who:?}: the forged record was not kept: {:?}",
        r.json
    );
    assert!(
        acts[0]["stdin"]["head"]
            .as_str()
            .is_some_and(|h| h.contains("\u{1b}]0;PWNED")),
        "{acts:?}"
    );
    let id = run_id(&r);
    let mut c = ws.command();
    c.args(["execute", "--command", "bash forge.sh"]);
    let human = c.output().unwrap();
    let show = ws.command().args(["show", &id]).output().unwrap();
    for (what, out) in [("execute", &human), ("show", &show)] {
        for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let text = String::from_utf8_lossy(bytes);
            assert!(
                !bytes.contains(&0x1b) && !bytes.contains(&0x07) && !text.contains('\u{9b}'),
                "{who:?}: {what}'s {stream} carries raw escape sequences: {text:?}"
            );
        }
        // The forged stdin was shown, escaped.
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("    | ⟦ESC⟧]0;PWNED⟦BEL⟧⟦ESC⟧[2J⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧⟦U+009B⟧31m"),
            "{who:?}: {what}: the forged stdin is not shown:\n{text}"
        );
    }
}

/// The stub table is written into the sandbox root, a 1 MiB tmpfs. An
/// envelope that validates (each answer within the 16 KiB limit) but whose
/// table exceeds 1 MiB makes the run fail at "P3 stubs: No space left on
/// device" (exit 1, run recorded as failed) instead of running, or being
/// refused up front (exit 2 naming `stubs`).
#[test]
fn finding_a_valid_envelope_with_many_stub_answers_runs_or_is_refused_up_front() {
    let ws = Ws::new(Who::User);
    let mut stubs = serde_json::Map::new();
    for i in 0..40 {
        stubs.insert(
            format!("s{i}"),
            serde_json::json!({"match": {"command": format!("tool{i}")},
                               "answer": {"stdout": "o".repeat(16000), "stderr": "e".repeat(16000)}}),
        );
    }
    let env = serde_json::json!({"command": "echo hi", "working_dir": ws.dir, "stubs": stubs});
    let p = write_envelope(&ws, "big.json", &env.to_string());
    let r = ws.execute(&["--file", p.to_str().unwrap()]);
    if r.code == 2 {
        assert!(r.stderr.contains("stubs"), "{}", r.stderr);
        assert_eq!(runs_in_state(&ws), 0, "refused, yet a run was recorded");
        return;
    }
    assert_eq!(
        r.json["state"], "awaiting_approval",
        "exit {}: {:?} {}",
        r.code, r.json["error"], r.stderr
    );
    assert_eq!(r.out(), "hi\n");
}

/// Same cause, reachable without any override: a replay writes every
/// recorded call (argv and answer) into the table. A baseline with 100
/// `gh pr comment N --body <12 KB>` calls (well within the 256 recorded)
/// cannot be replayed at all.
#[test]
fn finding_a_run_with_many_recorded_calls_can_be_replayed() {
    let ws = Ws::new(Who::User);
    let base = ws.rehearse(
        "B=$(head -c 12000 /dev/zero | tr '\\0' x); \
         for i in $(seq 100); do gh pr comment $i --body \"$B\" >/dev/null 2>&1 || exit 9; done; echo ok",
        &[],
    );
    assert_eq!(base.out(), "ok\n", "{:?}", base.json["rehearsal"]["stderr"]);
    assert_eq!(actions(&base).len(), 100);
    let r = replay(&ws, &run_id(&base), &[]);
    assert_ne!(
        r.json["state"], "failed",
        "the replay could not run: {:?} {}",
        r.json["error"], r.stderr
    );
    assert_eq!(r.out(), "ok\n");
    assert!(actions(&r).iter().all(|a| a["source"] == "replay"));
}

/// `npm` is shadowed by the shipped policy, and `/usr/bin/npm` is a symlink
/// to `.../npm/bin/npm-cli.js`, which `require('../lib/cli.js')`. The real
/// tool is set aside at `/.dryrun/stubs/real/npm`, where that relative
/// require no longer resolves: every passthrough `npm` call (`npm test`,
/// `npm ci`, `npm --version`) fails in every rehearsal.
#[test]
fn finding_passthrough_of_a_symlinked_script_tool_still_works() {
    let host = std::process::Command::new("/usr/bin/npm")
        .arg("--version")
        .output()
        .ok();
    let Some(host) = host.filter(|o| o.status.success()) else {
        eprintln!("SKIP: no working /usr/bin/npm on this host");
        return;
    };
    let host_version = String::from_utf8_lossy(&host.stdout).into_owned();
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse("npm --version", &[]);
        assert_eq!(
            r.out(),
            host_version,
            "{who:?}: npm (not a stubbed use) no longer runs in a rehearsal: {}",
            r.err()
        );
    }
}

/// A call record's `argv_hash` is the replay's lookup key and the diff's
/// comparison key, yet it is taken from the file as written: a record whose
/// hash does not match its argv is accepted as is. And the documented
/// bounds (first KiB of stdin, answers of at most 16 KiB) do not hold for a
/// record the command wrote itself, so one run can put ~32 MiB of "would-be
/// actions" into its record (the output cap is 256 KiB) and into a replay's
/// stub table.
#[test]
fn finding_call_records_are_checked_when_collected() {
    let ws = Ws::new(Who::User);
    write_script(
        &ws,
        "forge.py",
        r#"import json
big = "x" * 900000
for i in range(3):
    rec = {"tool": "gh", "argv": ["gh", "pr", "merge", str(i)], "argv_hash": "0" * 64,
           "cwd": "/", "stdin": {"bytes": 1, "blake3": "", "head": big},
           "env_names": [], "rule": "gh.pr.merge", "source": "stub",
           "answer": {"stdout": big[:100000], "stderr": "", "exit": 0}}
    with open("/.dryrun/calls/%d.json" % i, "w") as f:
        json.dump(rec, f)
"#,
    );
    let r = ws.rehearse("python3 forge.py; exit 0", &[]);
    assert_ran(Who::User, &r);
    for a in actions(&r) {
        let argv = strings(&a["argv"]);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        assert_eq!(
            a["argv_hash"].as_str().unwrap(),
            argv_hash(&argv),
            "a would-be action's argv_hash does not match its argv"
        );
        assert!(
            a["stdin"]["head"].as_str().unwrap().len() <= 1024 * 4,
            "stdin.head holds {} bytes (documented: the first KiB)",
            a["stdin"]["head"].as_str().unwrap().len()
        );
        assert!(
            a["answer"]["stdout"].as_str().unwrap().len() <= 16 * 1024,
            "an answer of {} bytes (stub answers are at most 16 KiB)",
            a["answer"]["stdout"].as_str().unwrap().len()
        );
    }
}

// ---------------------------------------------------------------------------
// Defended attacks (must stay defended).

/// From inside: the stub interpreter (this very binary) is called with its
/// other hidden subcommands and modes; the stub table, scripts, interpreter
/// and binds are attacked. Nothing reaches the host, the binds stay, and the
/// stubs keep answering and recording.
#[test]
fn the_stub_interpreter_and_its_files_cannot_be_abused_from_inside() {
    for who in identities() {
        let ws = Ws::new(who);
        let (_canary_dir, canary) = host_canary("untouched", "host\n");
        let target = canary.parent().unwrap().join("created-from-inside");
        write_script(
            &ws,
            "attack.sh",
            &format!(
                r#"D=/.dryrun/bin/dryrun
echo '{{"rules":[]}}' > /.dryrun/stubs/table.json 2>/dev/null && echo TABLE-WRITTEN
echo x > /.dryrun/stubs/bin/gh 2>/dev/null && echo SCRIPT-WRITTEN
echo x >> $D 2>/dev/null && echo INTERP-WRITTEN
echo x > /usr/bin/git 2>/dev/null && echo GIT-WRITTEN
mv /.dryrun/stubs/table.json /tmp/t 2>/dev/null && echo TABLE-MOVED
umount /usr/bin/git 2>/dev/null && echo UMOUNTED
umount -l /.dryrun/stubs/bin/gh 2>/dev/null && echo UMOUNTED2
mount --bind /tmp /.dryrun/stubs 2>/dev/null && echo MOUNTED
ln /etc/passwd /.dryrun/calls/link.json 2>/dev/null && echo HARDLINKED
echo '{{}}' | $D __sandbox-helper >/dev/null 2>&1 && echo HELPER-RAN
DRYRUN_STATE_DIR=/tmp/st $D execute --local --command 'touch {target}' >/dev/null 2>&1
echo x > {canary} 2>/dev/null
timeout 2 $D daemon --socket /tmp/d.sock --state-dir /tmp/dst >/dev/null 2>&1
$D '__stub-exec git' /usr/bin/git push origin main >/dev/null 2>&1 || echo DIRECT-STUB-FAILED
S=/.dryrun/bin/dryrun-stub
echo x >> $S 2>/dev/null && echo SMALL-STUB-WRITTEN
$S '__stub-exec git' /usr/bin/git push origin main >/dev/null 2>&1 || echo DIRECT-SMALL-FAILED
git push origin main >/dev/null 2>&1 || echo PUSH-FAILED
exit 0
"#,
                target = target.display(),
                canary = canary.display()
            ),
        );
        let r = ws.rehearse("bash attack.sh", &[]);
        assert_ran(who, &r);
        assert_eq!(
            r.out(),
            "",
            "{who:?}: an attack step succeeded: {}",
            r.out()
        );
        assert!(
            !target.exists(),
            "{who:?}: a nested dryrun reached the host"
        );
        // The canary lies in the host's /tmp, which the view shows as a
        // throwaway layer: the write above may succeed inside (a live run
        // could write it too) but lands in the layer, never on the host.
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "host\n");
        // The three pushes (through either interpreter directly and
        // through PATH) were answered by the stub and recorded, after all
        // the attacks.
        let pushes: Vec<Value> = actions(&r)
            .into_iter()
            .filter(|a| a["rule"] == "git.push" && a["source"] == "stub")
            .collect();
        assert_eq!(pushes.len(), 3, "{who:?}: {:?}", actions(&r));
        assert_ne!(r.decision(), "promote");
    }
}

/// Hostile entries in the calls directory: a symlink to a file the init
/// could read, a FIFO (a blocking open would hang the init), a directory,
/// and hundreds of junk files. The init neither hangs nor follows the link,
/// and the real call is still collected.
#[test]
fn hostile_entries_in_the_calls_directory_are_skipped() {
    for who in identities() {
        let ws = Ws::new(who);
        // A well-formed record, reachable only through a symlink.
        ws.write(
            "marker.json",
            r#"{"tool":"gh","argv":["gh","followed-a-symlink"],"argv_hash":"00","cwd":"/","stdin":{"bytes":0,"blake3":"","head":""},"env_names":[],"rule":"x","source":"stub","answer":{"stdout":"","stderr":"","exit":0}}"#,
        );
        write_script(
            &ws,
            "junk.sh",
            "cd /.dryrun/calls\n\
             ln -s \"$OLDPWD/marker.json\" 1link.json\n\
             ln -s /proc/1/environ 1environ.json\n\
             mkfifo 1fifo.json\n\
             mkdir 1dir.json\n\
             for i in $(seq 200); do echo '{' > \"0junk$i.json\"; done\n\
             cd - >/dev/null\n\
             gh pr merge 7 || exit 1\n\
             exit 0\n",
        );
        let started = std::time::Instant::now();
        let r = ws.rehearse("bash junk.sh", &["--timeout", "30"]);
        assert_ran(who, &r);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(25),
            "{who:?}: the init hung on the calls directory"
        );
        let a = actions(&r);
        assert_eq!(a.len(), 1, "{who:?}: {a:?}");
        assert_eq!(strings(&a[0]["argv"]), ["gh", "pr", "merge", "7"]);
        let record = std::fs::read_to_string(record_path(&ws, &run_id(&r))).unwrap();
        assert!(
            !record.contains("followed-a-symlink"),
            "{who:?}: the init followed a symlink in the calls directory"
        );
        // The caller's variable names reach the command (and the stub's
        // `env_names`); an environ file's content would be NAME=VALUE.
        assert!(
            !record.contains(&format!("DRYRUN_STATE_DIR={}", ws.state.display())),
            "{who:?}: P1's environ leaked"
        );
    }
}

/// Hostile stub overrides and replay arguments are invalid input: exit 2,
/// the problem named, nothing run (no run recorded).
#[test]
fn hostile_stub_values_and_replay_arguments_are_refused_before_anything_runs() {
    let ws = Ws::new(Who::User);
    let long = format!("gh=exit 0; stdout={}", "x".repeat(17000));
    for (stub, named) in [
        ("../gh=exit 0", "match.command"),
        ("/usr/bin/gh=exit 0", "match.command"),
        ("bash=exit 0", "bash cannot be stubbed"),
        ("sh -c=exit 0", "sh cannot be stubbed"),
        ("dash=exit 0", "dash cannot be stubbed"),
        ("env=exit 0", "env cannot be stubbed"),
        ("dryrun=exit 0", "dryrun cannot be stubbed"),
        ("gh=exit 256", "answer.exit"),
        ("gh=exit -1", "answer.exit"),
        ("gh=exit 1e3", "exit needs a number"),
        (long.as_str(), "answer.stdout"),
        ("gh\u{1b}[2J=exit 0", "match.command"),
        ("gh pr merge", "expected"),
        ("=exit 0", "no tool name"),
        ("gh=exit 0; rm=-rf", "is not 'exit N'"),
    ] {
        let r = ws.rehearse("touch ran", &["--stub", stub]);
        assert_eq!(r.code, 2, "--stub {stub:?}: {r:?}");
        assert!(r.stderr.contains(named), "--stub {stub:?}: {}", r.stderr);
        assert!(!r.stderr.contains('\u{1b}'), "the error echoes raw ESC");
    }
    for (stubs, named) in [
        (
            r#"{"x": {"match": {"command": "gh", "arg_regex": "(a{1000}){1000}"}}}"#,
            "arg_regex",
        ),
        (
            r#"{"x": {"match": {"command": "gh", "arg_regex": "("}}}"#,
            "arg_regex",
        ),
        (
            r#"{"x": {"match": {"command": "gh", "flags_any": ["x"]}}}"#,
            "match.flags",
        ),
        (
            r#"{"x": {"match": {"command": "gh", "subcommand": "  "}}}"#,
            "match.subcommand",
        ),
        (
            r#"{"x": {"match": {"command": "gh"}, "answer": {"exit": 0, "bogus": 1}}}"#,
            "bogus",
        ),
        (r#"{"x\u0007": {"match": {"command": "gh"}}}"#, "stub id"),
    ] {
        let p = write_envelope(
            &ws,
            "hostile.json",
            &format!(
                r#"{{"command": "touch ran", "working_dir": "{}", "stubs": {stubs}}}"#,
                ws.dir.display()
            ),
        );
        let r = ws.execute(&["--file", p.to_str().unwrap()]);
        assert_eq!(r.code, 2, "stubs {stubs}: {r:?}");
        assert!(r.stderr.contains(named), "stubs {stubs}: {}", r.stderr);
    }
    assert_eq!(
        runs_in_state(&ws),
        0,
        "a refused input was recorded as a run"
    );
    for id in ["../../etc", "r$(id)", "", "r00000000-0000000000000000"] {
        let r = replay(&ws, id, &[]);
        assert_eq!(r.code, 2, "replay {id:?}: {r:?}");
    }
    // A real baseline, then bogus replay arguments.
    let base = ws.rehearse("true", &[]);
    let id = run_id(&base);
    for args in [
        &["--novel", "bogus"][..],
        &["--novel", "STRICT"][..],
        &["--stub", "bash=exit 0"][..],
        &["--stub", "rbash"][..],
    ] {
        let r = replay(&ws, &id, args);
        assert_eq!(r.code, 2, "replay {args:?}: {r:?}");
    }
    assert_eq!(
        runs_in_state(&ws),
        1,
        "a refused replay was recorded as a run"
    );
    assert!(!ws.dir.join("ran").exists());
}

/// A secret in the caller's environment never reaches a would-be action,
/// the run record, the journal or anything else in the state directory,
/// even when the command hands every variable it has to a stubbed tool.
#[test]
fn a_host_secret_never_reaches_would_be_actions_or_the_state_dir() {
    for who in identities() {
        let ws = Ws::new(who);
        let secret = format!("ghp_canary_{}", std::process::id());
        let mut c = ws.command();
        c.env("GH_TOKEN", &secret)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .args([
                "execute",
                "--json",
                "--command",
                "env | gh api -X POST /repos/o/r/issues --input - ; \
                 gh pr merge 1 --body \"$GH_TOKEN$AWS_SECRET_ACCESS_KEY\"; exit 0",
            ]);
        let r = to_run(c.output().unwrap());
        assert_ran(who, &r);
        assert_eq!(actions(&r).len(), 2, "{who:?}: {:?}", actions(&r));
        for a in actions(&r) {
            let names = strings(&a["env_names"]);
            assert!(
                !names.contains(&"GH_TOKEN".to_string()),
                "{who:?}: {names:?}"
            );
        }
        let all = all_bytes_under(&ws.state);
        assert!(
            !contains(&all, secret.as_bytes()),
            "{who:?}: the host secret reached the state directory"
        );
        assert!(!r.stdout.contains(&secret));
    }
}

/// Determinism: the evidence hash moves with what a stubbed call was given
/// (its stdin), and not with the run id, scratch paths or time.
#[test]
fn the_evidence_hash_covers_would_be_actions_and_nothing_incidental() {
    let ws = Ws::new(Who::User);
    let hash = |r: &Run| {
        r.json["rehearsal"]["evidence_hash"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cmd =
        |body: &str| format!("echo {body} | gh pr merge 1 --body-file - >/dev/null 2>&1; exit 0");
    let a1 = ws.rehearse(&cmd("one"), &[]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let a2 = ws.rehearse(&cmd("one"), &[]);
    let b = ws.rehearse(&cmd("two"), &[]);
    assert_ne!(run_id(&a1), run_id(&a2));
    assert_eq!(hash(&a1), hash(&a2), "same run twice, different hash");
    assert_ne!(
        hash(&a1),
        hash(&b),
        "the stubbed call's stdin differs but the evidence hash does not"
    );
    // The diff names the differing action.
    let d = ws
        .command()
        .args(["diff", &run_id(&a1), &run_id(&b), "--json"])
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(d["same_evidence"], false);
    assert_eq!(d["actions_only_in_a"].as_array().unwrap().len(), 1, "{d}");
}

/// A call that slips past a stub's matcher (the push handshake of git's
/// remote helper, `git remote-http`: the matcher sees no `push` word) runs
/// the real tool; that is a coverage gap, not a hole: the real tool meets
/// the cut network, which blocks the run. (`git -c alias.p=push p` used to
/// be the example; git runs an expanded alias as a child `git push` with
/// its exec path first on PATH, whose `git` is now covered too, so that one
/// is answered by the `git.push` stub.)
#[test]
fn calls_that_slip_past_the_matchers_still_meet_the_cut_network() {
    let ws = Ws::new(Who::User);
    let r = ws.rehearse(
        "git init -q r && cd r && git -c user.email=a@b.c -c user.name=a commit -q --allow-empty -m x && \
         git -c alias.p=push p http://198.51.100.7/r.git HEAD; \
         printf 'list for-push\\n' | git remote-http origin http://198.51.100.7/r.git; exit 0",
        &["--expect-write", "r/**"],
    );
    assert_ran(Who::User, &r);
    let pushes: Vec<Value> = actions(&r)
        .into_iter()
        .filter(|a| a["rule"] == "git.push")
        .collect();
    assert_eq!(
        pushes.len(),
        1,
        "the alias's push is answered by the stub: {:?}",
        actions(&r)
    );
    assert_eq!(
        strings(&pushes[0]["argv"]),
        ["git", "push", "http://198.51.100.7/r.git", "HEAD"]
    );
    // The real helper meets the cut network: through the run's egress
    // proxy (its variables are set in every run), which refuses the
    // address and names it, or, ignoring them, as a blocked connect.
    let refused = r.json["rehearsal"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .any(|e| {
            e["allowed"] == false
                && e["name"]
                    .as_str()
                    .is_some_and(|n| n.contains("198.51.100.7"))
        });
    assert!(
        refused || r.blocked().iter().any(|b| b["kind"] == "network"),
        "{:?} {:?} {:?}",
        r.json["rehearsal"]["egress"],
        r.blocked(),
        actions(&r)
    );
    assert_eq!(r.decision(), "blocked", "{:?}", r.reasons());
}
