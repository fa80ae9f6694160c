//! How many workspace agents a root daemon starts per run, read from its
//! `/metrics` (`dryrun_workspace_agents_started_total`).
//!
//! - An ordinary user submitting in a workspace of its own: one agent per
//!   run. The session that resolved `working_dir` with the user's rights
//!   acts with exactly the owner's credentials, so it also reads the
//!   workspace policy (two agents per run before).
//! - Root submitting in that user's workspace: root's own session resolves
//!   `working_dir` in-process, and the policy is still read by an agent
//!   with the owner's rights, never by root's session (zero agents would
//!   mean root read the user's file).
//!
//! In both cases the workspace policy, read through whichever agent, is
//! in force: it lowers a command the shipped policy holds for approval.

mod common;
use common::daemon::*;
use common::*;

const RUNS: u64 = 3;

/// A user's workspace whose policy makes `frobnicate` a plain read (the
/// shipped policy does not know it).
fn workspace_with_policy() -> Ws {
    let ws = user_workspace();
    ws.write(
        ".dryrun/policy.yaml",
        "rules:\n - {id: ws.frob, match: {command: frobnicate}, level: READ, score: 0, reason: a harmless tool of this project}\n",
    );
    ws.chown_all();
    ws
}

fn assert_policy_applied(r: &Run) {
    let reasons = r.json["risk"]["reasons"].to_string();
    assert!(
        reasons.contains("ws.frob"),
        "the workspace policy was not in force: {r:?}"
    );
}

#[test]
fn a_user_in_its_own_workspace_costs_one_agent_per_run() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = workspace_with_policy();
    let before = d.agents_started(Who::Root);
    for _ in 0..RUNS {
        let r = submit_user(&d, &ws, "frobnicate --version || true", &[]);
        assert_ne!(r.json["state"], "failed", "{r:?}");
        assert_policy_applied(&r);
    }
    let after = d.agents_started(Who::Root);
    assert_eq!(
        after - before,
        RUNS,
        "one agent per run (it resolves working_dir and reads the workspace policy)"
    );
}

#[test]
fn root_in_a_users_workspace_still_reads_its_policy_through_the_owners_agent() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = workspace_with_policy();
    let before = d.agents_started(Who::Root);
    for _ in 0..RUNS {
        let out = d
            .cli_root()
            .current_dir(&ws.dir)
            .args([
                "execute",
                "--json",
                "--command",
                "frobnicate --version || true",
            ])
            .output()
            .unwrap();
        let r = run_json(out);
        assert_ne!(r.json["state"], "failed", "{r:?}");
        assert_policy_applied(&r);
    }
    let after = d.agents_started(Who::Root);
    assert_eq!(
        after - before,
        RUNS,
        "root's own session must not read the user's policy: one owner's agent per run"
    );
}
