//! Shadow stubs, replay and counterfactuals, through the real
//! binary and the real sandbox: a script whose job is a remote effect
//! (`gh pr merge`) keeps its real control flow, the call is recorded as a
//! would-be action, and a replay answers from the recording.

mod common;

use common::*;
use std::path::PathBuf;

const MERGE_SCRIPT: &str = r#"#!/bin/bash
# Merge, then record which branch the script took.
if printf 'merge body' | gh pr merge 12 --squash; then
  echo merged > status.txt
else
  echo failed > status.txt
fi
cat status.txt
"#;

fn argv(a: &Value) -> Vec<String> {
    strings(&a["argv"])
}

fn merge_ws(who: Who) -> Ws {
    let ws = Ws::new(who);
    ws.write("merge.sh", MERGE_SCRIPT);
    ws.write("notes.txt", "unrelated\n");
    std::fs::set_permissions(
        ws.dir.join("merge.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    ws
}

fn envelope(ws: &Ws, extra_env: &str) -> PathBuf {
    let p = ws.root.path().join("envelope.json");
    std::fs::write(
        &p,
        format!(
            r#"{{"command": "./merge.sh", "working_dir": "{}",
                "intent": {{"expected_writes": ["status.txt"]}},
                "env": {{{extra_env}}}}}"#,
            ws.dir.display()
        ),
    )
    .unwrap();
    p
}

#[test]
fn gh_pr_merge_is_answered_recorded_and_takes_the_success_branch() {
    for who in identities() {
        let ws = merge_ws(who);
        let canary = "ghp_canary_value_never_recorded_7f3a";
        let env = envelope(&ws, &format!(r#""GH_TOKEN": "{canary}""#));
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        assert_ran(who, &r);
        assert_eq!(r.out(), "merged\n", "success branch: {r:?}");
        assert!(r.err().contains("Merged pull request"), "{}", r.err());
        let a = actions(&r);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(argv(&a[0]), ["gh", "pr", "merge", "12", "--squash"]);
        assert_eq!(a[0]["tool"], "gh");
        assert_eq!(a[0]["rule"], "gh.pr.merge");
        assert_eq!(a[0]["source"], "stub");
        assert_eq!(a[0]["cwd"], ws.dir.display().to_string());
        // `gh pr merge` without `--body-file -` does not read stdin live,
        // so the stub leaves it alone too.
        assert_eq!(a[0]["stdin"]["read"], false, "{}", a[0]);
        assert_eq!(a[0]["stdin"]["bytes"], 0);
        let names = strings(&a[0]["env_names"]);
        assert!(names.contains(&"GH_TOKEN".to_string()), "{names:?}");
        assert!(
            !a[0].to_string().contains(canary),
            "a would-be action holds variable names, never values"
        );
        assert!(r.stripped().contains(&"stub:gh".to_string()));
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[stubs.would_be_action]") && x.contains("gh pr merge 12")),
            "{:?}",
            r.reasons()
        );
        // The real workspace is untouched by the rehearsal.
        assert!(!ws.dir.join("status.txt").exists());
    }
}

#[test]
fn a_stub_reads_stdin_only_when_the_call_says_the_tool_takes_it() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("list.txt", "1\n2\n3\n");
        let r = ws.rehearse(
            "printf 'merge body' | gh pr merge 12 --body-file -; \
             while read -r n; do gh pr close \"$n\"; echo \"closed $n\"; done < list.txt",
            &[],
        );
        assert_ran(who, &r);
        let a = actions(&r);
        assert_eq!(a.len(), 4, "{who:?}: {a:?}");
        assert_eq!(a[0]["stdin"]["read"], true);
        assert_eq!(a[0]["stdin"]["bytes"], 10);
        assert_eq!(a[0]["stdin"]["head"], "merge body");
        assert_eq!(
            a[0]["stdin"]["blake3"],
            blake3::hash(b"merge body").to_hex().to_string()
        );
        // The loop's input is left for `read`, as the real gh leaves it.
        assert_eq!(r.out(), "closed 1\nclosed 2\nclosed 3\n", "{who:?}");
        for (i, x) in a[1..].iter().enumerate() {
            assert_eq!(argv(x), ["gh", "pr", "close", &(i + 1).to_string()]);
            assert_eq!(x["stdin"]["read"], false);
        }
    }
}

#[test]
fn a_failing_stub_takes_the_failure_branch() {
    let ws = merge_ws(Who::User);
    let env = envelope(&ws, "");
    let r = ws.execute(&[
        "--file",
        env.to_str().unwrap(),
        "--stub",
        "gh pr merge=exit 1; stderr=X merge failed\\n",
    ]);
    assert_eq!(r.out(), "failed\n", "failure branch: {r:?}");
    assert!(r.err().contains("X merge failed"), "{}", r.err());
    let a = actions(&r);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["source"], "override");
    assert_eq!(a[0]["answer"]["exit"], 1);
    assert!(
        r.reasons()
            .iter()
            .any(|x| x.starts_with("[stubs.override]")),
        "{:?}",
        r.reasons()
    );
    // A malformed --stub is invalid input: nothing runs.
    let bad = ws.execute(&["--command", "true", "--stub", "gh pr merge"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("--stub"), "{}", bad.stderr);
}

#[test]
fn a_tool_called_by_absolute_path_is_still_caught_and_other_uses_run_for_real() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(
            "echo '{\"a\":1}' | /usr/bin/curl -sS -X POST -d @- https://api.example.invalid/x; echo \"curl=$?\"; \
             /bin/curl -X DELETE https://api.example.invalid/y; git --version | cut -d' ' -f1-2",
            &[],
        );
        assert_ran(who, &r);
        assert_eq!(r.out(), "{}\ncurl=0\n{}\ngit version\n", "{r:?}");
        let a = actions(&r);
        assert_eq!(a.len(), 2, "the POST and the DELETE, not git: {a:?}");
        assert_eq!(a[0]["tool"], "curl");
        assert_eq!(
            argv(&a[0]),
            [
                "curl",
                "-sS",
                "-X",
                "POST",
                "-d",
                "@-",
                "https://api.example.invalid/x"
            ]
        );
        assert_eq!(a[0]["stdin"]["head"], "{\"a\":1}\n");
        assert_eq!(
            argv(&a[1]),
            ["curl", "-X", "DELETE", "https://api.example.invalid/y"]
        );
        assert_eq!(a[1]["rule"], "curl.method");
        // The stub answered: the command never reached for the network.
        assert!(
            !r.blocked().iter().any(|b| b["kind"] == "network"),
            "{:?}",
            r.blocked()
        );
        assert!(
            r.json["rehearsal"]["incomplete"].is_null()
                || r.json["rehearsal"]["incomplete"] == serde_json::json!([])
        );
    }
}

#[test]
fn a_network_call_no_stub_answers_makes_the_evidence_incomplete() {
    let ws = Ws::new(Who::User);
    // A GET is not stubbed: the real curl runs and meets the cut network.
    let r = ws.rehearse("curl -sS --max-time 2 http://10.0.0.1:9/ ; echo rc=$?", &[]);
    let inc = strings(&r.json["rehearsal"]["incomplete"]);
    assert!(
        inc.iter().any(|x| x.contains("network")),
        "incomplete: {inc:?}; blocked {:?}",
        r.blocked()
    );
    assert!(
        r.notes()
            .iter()
            .any(|n| n.contains("rehearsal is incomplete")),
        "{:?}",
        r.notes()
    );
}

#[test]
fn replay_answers_from_the_recording_after_an_unrelated_edit() {
    let ws = merge_ws(Who::User);
    let env = envelope(&ws, "");
    let base = ws.execute(&["--file", env.to_str().unwrap()]);
    let base_id = base.json["run_id"].as_str().unwrap().to_string();
    // Edit a file the command never reads.
    ws.write("notes.txt", "edited since the recording\n");
    let r = replay(&ws, &base_id, &[]);
    assert!(r.code == 0 || r.code == 3, "{r:?}");
    assert_eq!(r.json["replay_of"]["baseline"], base_id);
    let (a, b) = (actions(&base), actions(&r));
    assert_eq!(
        a.iter().map(argv).collect::<Vec<_>>(),
        b.iter().map(argv).collect::<Vec<_>>()
    );
    assert_eq!(b[0]["source"], "replay");
    assert_eq!(a[0]["argv_hash"], b[0]["argv_hash"]);
    assert_eq!(r.out(), "merged\n");
    // A changed envelope (no working_dir: the recorded run's).
    let e2 = ws.root.path().join("envelope2.json");
    std::fs::write(
        &e2,
        r#"{"command": "gh pr merge 12 --squash && echo via-file", "intent": {"mode": "read_only"}}"#,
    )
    .unwrap();
    let r2 = replay(&ws, &base_id, &["--file", e2.to_str().unwrap()]);
    assert_eq!(r2.out(), "via-file\n", "{r2:?}");
    assert_eq!(actions(&r2)[0]["source"], "replay");
    assert_eq!(r2.json["workspace"], ws.dir.display().to_string());
    // The same evidence: the edit was unrelated.
    let c = ws
        .command()
        .args([
            "diff",
            &base_id,
            r.json["run_id"].as_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&c.stdout).unwrap();
    assert_eq!(d["actions_only_in_a"], serde_json::json!([]), "{d}");
    assert_eq!(d["actions_only_in_b"], serde_json::json!([]), "{d}");
}

#[test]
fn a_novel_call_under_strict_fails_naming_it() {
    let ws = merge_ws(Who::User);
    let env = envelope(&ws, "");
    let base = ws.execute(&["--file", env.to_str().unwrap()]);
    let base_id = base.json["run_id"].as_str().unwrap().to_string();
    let r = replay(
        &ws,
        &base_id,
        &[
            "--novel",
            "strict",
            "--command",
            "gh pr merge 13 && echo went-on",
        ],
    );
    assert_eq!(r.code, 4, "{r:?}");
    assert!(
        r.reasons()
            .iter()
            .any(|x| x.starts_with("[replay.novel_call]") && x.contains("gh pr merge 13")),
        "{:?}",
        r.reasons()
    );
    assert!(!r.out().contains("went-on"), "the call failed: {}", r.out());
    // fuzzy: the nearest recorded call of the same tool answers.
    let r = replay(
        &ws,
        &base_id,
        &[
            "--novel",
            "fuzzy",
            "--command",
            "gh pr merge 13 --squash && echo went-on",
        ],
    );
    assert_eq!(r.out(), "went-on\n", "{r:?}");
    assert_eq!(actions(&r)[0]["source"], "replay_fuzzy");
}

#[test]
fn a_counterfactual_replay_and_diff_show_the_other_path() {
    let ws = merge_ws(Who::User);
    let env = envelope(&ws, "");
    let base = ws.execute(&["--file", env.to_str().unwrap()]);
    let base_id = base.json["run_id"].as_str().unwrap().to_string();
    let cf = replay(&ws, &base_id, &["--stub", "gh pr merge=exit 1"]);
    assert_eq!(cf.out(), "failed\n", "{cf:?}");
    let cf_id = cf.json["run_id"].as_str().unwrap().to_string();
    let out = ws
        .command()
        .args(["diff", &base_id, &cf_id, "--json"])
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["same_evidence"], false);
    let only = |k: &str| -> Vec<(String, i64)> {
        d[k].as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["call"].as_str().unwrap().to_string(),
                    x["exit"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        only("actions_only_in_a"),
        [("gh pr merge 12 --squash".to_string(), 0)]
    );
    assert_eq!(
        only("actions_only_in_b"),
        [("gh pr merge 12 --squash".to_string(), 1)]
    );
    assert_eq!(d["changes"]["different"][0]["path"], "status.txt");
    assert!(d["changes"]["only_in_a"].as_array().unwrap().is_empty());
    let so = d["stdout_diff"].as_str().unwrap();
    assert!(so.contains("-merged") && so.contains("+failed"), "{so}");
    let text = ws
        .command()
        .args(["diff", &base_id, &cf_id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("would-be action only in B: gh pr merge 12 --squash → exit 1"),
        "{text}"
    );
}

#[test]
fn twenty_rehearsals_with_a_stubbed_call_give_one_evidence_hash() {
    let ws = merge_ws(Who::User);
    let env = envelope(&ws, "");
    // Each hash with the first rehearsal that gave it: a difference is
    // shown as the two rehearsals, not only as two hashes.
    let mut hashes = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        let reh = r.json["rehearsal"].clone();
        let h = reh["evidence_hash"].as_str().unwrap().to_string();
        hashes.entry(h).or_insert(reh);
    }
    assert_eq!(hashes.len(), 1, "{hashes:#?}");
}

#[test]
fn replay_under_a_changed_policy_is_judged_by_todays_policy_with_the_recorded_answers() {
    let ws = Ws::new(Who::User);
    let base = ws.rehearse(
        "gh pr merge 12 --squash && echo merged > status.txt",
        &["--expect-write", "status.txt"],
    );
    let base_id = base.json["run_id"].as_str().unwrap().to_string();
    assert!(
        !base.json["risk"]["reasons"]
            .to_string()
            .contains("project.no-merges"),
        "{}",
        base.json["risk"]
    );
    // The project tightens its policy after the recording.
    std::fs::create_dir_all(ws.dir.join(".dryrun")).unwrap();
    std::fs::write(
        ws.dir.join(".dryrun/policy.yaml"),
        "rules:\n  - id: project.no-merges\n    match: {command: gh, subcommand: \"pr merge\"}\n    level: IRREVERSIBLE\n    score: 90\n    reason: \"merges go through the release manager\"\n",
    )
    .unwrap();
    ws.chown_all();
    let r = replay(&ws, &base_id, &[]);
    assert_eq!(r.json["replay_of"]["baseline"], base_id, "{r:?}");
    assert!(
        r.json["risk"]["reasons"]
            .to_string()
            .contains("[project.no-merges]"),
        "today's policy scores the replay: {}",
        r.json["risk"]
    );
    assert_ne!(
        r.json["risk"]["policy_hash"],
        base.json["risk"]["policy_hash"]
    );
    assert_eq!(r.json["risk"]["requires_approval"], true);
    // Now high-risk, the one-liner of two commands is blocked (split it
    // into steps); the baseline was not.
    assert_eq!(base.code, 3, "{base:?}");
    assert_eq!(r.code, 4, "{r:?}");
    assert!(
        r.reasons()
            .iter()
            .any(|x| x.starts_with("[risk.opaque_one_liner]")),
        "{:?}",
        r.reasons()
    );
    // The tool's answer still comes from the recording, and the command
    // takes the same path.
    assert_eq!(actions(&r)[0]["source"], "replay");
    assert_eq!(
        r.change("status.txt").unwrap()["after"],
        base.change("status.txt").unwrap()["after"]
    );
}

#[test]
fn a_stub_on_one_name_of_a_program_leaves_its_other_names_running_for_real() {
    // `/usr/bin/python3 -> python3.X` (Debian's layout; `python3.11` on
    // Debian 12): a stub on `python3.X publish` covers the file both names
    // lead to. `python3` is another program's name as far as the command is
    // concerned and runs for real, from the view of the image no stub
    // covers; `python3.X` calls no rule matches run for real too.
    let Some(py) = python3_versioned_name() else {
        return;
    };
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("publish", "print('ran the local script')\n");
        let env = ws.root.path().join("alias.json");
        std::fs::write(
            &env,
            serde_json::json!({
                "command": format!("python3 -c 'print(41+1)'; /usr/bin/python3 -c 'print(43)'; \
                            {py} -c 'print(44)'; {py} publish pkg; \
                            /usr/bin/{py} publish pkg2; python3 publish"),
                "working_dir": ws.dir,
                "stubs": {"py-publish": {"match": {"command": py, "subcommand": "publish"},
                                         "answer": {"stdout": "published\n"}}}
            })
            .to_string(),
        )
        .unwrap();
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        assert_ran(who, &r);
        assert_eq!(
            r.out(),
            "42\n43\n44\npublished\npublished\nran the local script\n",
            "{who:?}: {}",
            r.err()
        );
        let a = actions(&r);
        assert_eq!(
            a.iter().map(argv).collect::<Vec<_>>(),
            [
                [py.as_str(), "publish", "pkg"],
                [py.as_str(), "publish", "pkg2"]
            ],
            "{who:?}"
        );
        assert_eq!(a[0]["rule"], "py-publish");
    }
}

/// Every bind the sandbox makes over a file of the image (a stub over a real
/// tool, a secret's mask, the stubs' interpreter) is its own mount,
/// read-only, nosuid and nodev, and nothing can be written through it.
#[test]
fn stubs_and_masks_are_read_only_nosuid_nodev_mounts() {
    let mut files = vec![
        "/usr/bin/git",
        "/.dryrun/bin/dryrun",
        "/.dryrun/bin/dryrun-stub",
    ];
    files.extend(
        ["/etc/machine-id", "/etc/subuid"]
            .into_iter()
            .filter(|p| std::path::Path::new(p).is_file()),
    );
    assert!(
        std::path::Path::new("/usr/bin/git").is_file(),
        "the test needs the host's /usr/bin/git (a stubbed tool) in the image"
    );
    let list = files.join(" ");
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(
            &format!(
                "for f in {list}; do \
                   awk -v f=\"$f\" '$5 == f {{print $5, $6}}' /proc/self/mountinfo; \
                   (echo x >> \"$f\") 2>/dev/null && echo \"WRITTEN $f\"; \
                 done; true"
            ),
            &[],
        );
        assert_ran(who, &r);
        assert!(!r.out().contains("WRITTEN"), "{who:?}: {}", r.out());
        for f in &files {
            let line = r
                .out()
                .lines()
                .find(|l| l.split_whitespace().next() == Some(*f))
                .unwrap_or_else(|| panic!("{who:?}: no mount over {f}: {}", r.out()));
            let opts: Vec<&str> = line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .split(',')
                .collect();
            for want in ["ro", "nosuid", "nodev"] {
                assert!(opts.contains(&want), "{who:?}: {f} is not {want}: {line}");
            }
        }
    }
}

/// The stub scripts' interpreter is the build's small stub program
/// (`dryrun-stub`) when it is installed beside `dryrun`, as cargo builds
/// it, and `dryrun` itself when it is not (a copy of `dryrun` alone): either
/// way a stubbed call is answered and recorded and a passthrough call runs
/// the real tool.
#[test]
fn the_scripts_run_the_small_stub_program_or_dryrun_without_it() {
    use std::os::unix::fs::PermissionsExt;
    let small = bin().with_file_name("dryrun-stub");
    assert!(
        small.is_file(),
        "cargo builds dryrun-stub beside dryrun: {}",
        small.display()
    );
    let alone = tempfile::tempdir().unwrap();
    std::fs::set_permissions(alone.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = alone.path().join("dryrun");
    std::fs::copy(bin(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let through_copy: Vec<std::ffi::OsString> = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("shift; exec '{}' \"$@\"", copy.display()).into(),
        "sh".into(),
    ];
    for who in identities() {
        for (interpreter, prefix) in [
            ("/.dryrun/bin/dryrun-stub", Vec::new()),
            ("/.dryrun/bin/dryrun", through_copy.clone()),
        ] {
            let ws = Ws::new(who);
            let out = ws
                .command_through(&prefix)
                .args(["execute", "--json", "--command"])
                .arg("head -n1 /.dryrun/stubs/bin/git; git push origin main; git --version")
                .output()
                .unwrap();
            let r = to_run(out);
            assert_ran(who, &r);
            assert_eq!(
                r.out().lines().next(),
                Some(format!("#!{interpreter} __stub-exec git").as_str()),
                "{who:?}: {r:?}"
            );
            assert!(r.out().contains("git version"), "{who:?}: {r:?}");
            let pushes: Vec<Value> = actions(&r)
                .into_iter()
                .filter(|a| a["rule"] == "git.push" && a["source"] == "stub")
                .collect();
            assert_eq!(pushes.len(), 1, "{who:?} {interpreter}: {:?}", actions(&r));
        }
    }
}
