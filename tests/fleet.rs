//! The fleet store (docs/fleet.md): hosts register and publish their runs
//! to a private PostgreSQL cluster the test starts; reviewers see every
//! host's waiting runs and decide them through the store; the owning host
//! applies a decision once, journaled, or refuses it (the submitter's own
//! role, evidence that is not the run's). Attacks are tried for real and
//! judged on the host's side: its run record and its journal.

mod common;

use std::process::Command;
use std::time::Duration;

use common::daemon::*;
use common::fleet::*;
use common::pg::*;
use common::*;
use serde_json::Value;

#[test]
fn hosts_register_and_publish_runs_and_reviewers_see_every_hosts_queue() {
    if !require_root() || !require_postgres() {
        return;
    }
    let f = Fleet::new();
    let a = f.host("host_a", &[]);
    let b = f.host("host_b", &[]);
    let ws = user_workspace();
    let promoted = submit_user(&a, &ws, "echo x > a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(promoted.decision(), "promote", "{promoted:?}");
    let waiting_a = waiting_run(&a, &ws);
    let ws_b = user_workspace();
    let waiting_b = waiting_run(&b, &ws_b);

    // Registration: each host is its login role, with its version and ABI.
    let hosts = f.pg.sql("SELECT string_agg(host_id || ':' || landlock_abi || ':' || version, ',' ORDER BY host_id) FROM dryrun.hosts");
    assert!(
        hosts.starts_with("host_a:") && hosts.contains(",host_b:"),
        "{hosts}"
    );
    // Publication: every journal record of host A as an event, in order.
    let records = std::fs::read_to_string(a.state.join("journal.jsonl"))
        .unwrap()
        .lines()
        .count();
    eventually("host A's journal published", || {
        f.pg.sql("SELECT count(*) FROM dryrun.events WHERE host_id = 'host_a'")
            == records.to_string()
    });
    let promoted_id = run_id(&promoted);
    eventually("the promoted run's summary", || {
        f.pg.sql(&format!(
            "SELECT state || ' ' || decision FROM dryrun.runs WHERE run_id = '{promoted_id}'"
        )) == "rehearsed promote"
    });
    // Only a run waiting for a person carries evidence.
    eventually("both waiting runs with evidence", || {
        f.pg.sql("SELECT count(*) FROM dryrun.evidence") == "2"
    });
    assert_eq!(
        f.pg.sql(&format!(
            "SELECT count(*) FROM dryrun.evidence WHERE run_id = '{promoted_id}'"
        )),
        "0"
    );
    let submitter = f.pg.sql(&format!("SELECT submitter_person || ' ' || submitter_name || ' ' || array_to_string(submitter_roles, ',') FROM dryrun.runs WHERE run_id = '{waiting_a}'"));
    assert_eq!(submitter, format!("alice {TEST_USER} alice"));

    // A reviewer sees both hosts' waiting runs, oldest first, with evidence.
    let q = f.json(&["review", "--fleet", &f.pg.role_url("bob"), "--json"]);
    let ids: Vec<&str> = q
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [waiting_a.as_str(), waiting_b.as_str()], "{q}");
    let ra = &q[0];
    assert_eq!(ra["host"], "host_a");
    assert_eq!(
        ra["evidence_hash"],
        record(&a, &waiting_a)["rehearsal"]["evidence_hash"]
    );
    assert!(
        ra["summary"]["would_be_actions"][0]["call"]
            .as_str()
            .unwrap()
            .contains("gh pr merge 4"),
        "{ra}"
    );
    assert_eq!(ra["diffs"][0]["path"], "a4.txt", "{ra}");
    let human = f.cli(&["review", "--fleet", &f.pg.role_url("bob")]);
    assert!(
        text(&human).contains(&format!("{waiting_b} on host host_b")),
        "{}",
        text(&human)
    );
    let runs = f.json(&[
        "runs",
        "--fleet",
        &f.pg.role_url("bob"),
        "--awaiting",
        "--json",
    ]);
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    let all = f.json(&["runs", "--fleet", &f.pg.role_url("bob"), "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");

    // A host writes only its own rows: host B cannot touch host A's run.
    let out = Command::new("psql")
        .arg(f.pg.role_url("host_b"))
        .args(["-tAqc", &format!("UPDATE dryrun.runs SET state = 'approved' WHERE run_id = '{waiting_a}' RETURNING run_id")])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "{}",
        text(&out)
    );
    assert_eq!(
        f.pg.sql(&format!(
            "SELECT state FROM dryrun.runs WHERE run_id = '{waiting_a}'"
        )),
        "awaiting_approval"
    );
}

#[test]
fn a_fleet_approval_by_another_person_is_applied_once_by_the_owning_host_and_journaled() {
    if !require_root() || !require_postgres() {
        return;
    }
    let f = Fleet::new();
    let mut a = f.host("host_a", &[]);
    let ws = user_workspace();
    let run = waiting_run(&a, &ws);
    eventually("the run in the fleet queue", || {
        f.pg.sql("SELECT count(*) FROM dryrun.evidence") == "1"
    });
    let out = f.cli(&[
        "approve",
        "--fleet",
        &f.pg.role_url("bob"),
        &run,
        "--note",
        "looks right",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "applied", "{v}");
    let decision = v["decision"].as_i64().unwrap();
    // On the host: approved, by bob's role, bound to the decision.
    let r = record(&a, &run);
    assert_eq!(r["state"], "approved", "{r}");
    let ap = &r["approvals"][0];
    assert_eq!(ap["authenticated_by"], "fleet_role");
    assert_eq!(ap["fleet"]["role"], "bob");
    assert_eq!(ap["fleet"]["person"], "bob");
    assert_eq!(ap["fleet"]["decision"], decision);
    let j = journaled(&a.state, "approval", &run);
    assert_eq!(j.len(), 1, "{j:?}");
    assert_eq!(j[0]["data"]["fleet_decision"], decision);
    assert_eq!(j[0]["data"]["note"], "looks right");
    assert_eq!(
        f.pg.sql(&format!(
            "SELECT outcome FROM dryrun.decisions WHERE id = {decision}"
        )),
        "applied"
    );
    eventually("the fleet sees the run approved", || {
        f.pg.sql(&format!(
            "SELECT state FROM dryrun.runs WHERE run_id = '{run}'"
        )) == "approved"
    });
    // Once: the store told again (the decision made pending again, as a
    // lost acknowledgement would leave it) and the host restarted.
    f.pg.sql(&format!(
        "UPDATE dryrun.decisions SET outcome = NULL, applied_at = NULL WHERE id = {decision}"
    ));
    a.kill9();
    a.spawn(
        &[
            "--fleet",
            &f.pg.url_no_password("host_a", "127.0.0.1"),
            "--fleet-config",
            f.cfg_dir.path().join("host_a.fleet.yaml").to_str().unwrap(),
        ],
        &[],
    );
    f.pg.sql(&format!(
        "SELECT pg_notify('dryrun_decision', 'host_a {decision}')"
    ));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(journaled(&a.state, "approval", &run).len(), 1);
    assert!(journaled(&a.state, "fleet_decision_refused", &run).is_empty());
    assert_eq!(record(&a, &run)["approvals"].as_array().unwrap().len(), 1);
    // The republication from its journal gives the outcome back.
    eventually("the outcome published again", || {
        f.pg.sql(&format!(
            "SELECT outcome FROM dryrun.decisions WHERE id = {decision}"
        )) == "applied"
    });
    // And the approved run promotes as any approved run does.
    let out = a
        .cli_user()
        .args(["promote", &run, "--local-only", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn the_submitters_own_role_never_approves_through_the_store_nor_at_the_host() {
    if !require_root() || !require_postgres() {
        return;
    }
    let f = Fleet::new();
    let a = f.host("host_a", &[]);
    let ws = user_workspace();
    let run = waiting_run(&a, &ws);
    eventually("the run in the fleet queue", || {
        f.pg.sql("SELECT count(*) FROM dryrun.evidence") == "1"
    });
    // alice's agent (the test user's account) submitted it; alice's role
    // is refused by the store.
    let out = f.cli(&["approve", "--fleet", &f.pg.role_url("alice"), &run]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(
        text(&out).contains("the submitter never approves its own run"),
        "{}",
        text(&out)
    );
    assert_eq!(f.pg.sql("SELECT count(*) FROM dryrun.decisions"), "0");
    // A decision row in alice's name written around dryrun.decide() (by the
    // database's owner): the host refuses it itself, and journals why.
    let evidence = record(&a, &run)["rehearsal"]["evidence_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let id = f.pg.sql(&format!(
        "INSERT INTO dryrun.decisions (run_id, host_id, action, evidence_hash, reviewer_role) VALUES ('{run}', 'host_a', 'approve', '{evidence}', 'alice') RETURNING id"
    ));
    f.pg.sql(&format!(
        "SELECT pg_notify('dryrun_decision', 'host_a {id}')"
    ));
    eventually("the host's refusal published", || {
        f.pg.sql(&format!(
            "SELECT coalesce(outcome, '') FROM dryrun.decisions WHERE id = {id}"
        )) == "refused"
    });
    let refused = journaled(&a.state, "fleet_decision_refused", &run);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0]["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("never approve its own run"),
        "{refused:?}"
    );
    assert_eq!(record(&a, &run)["state"], "awaiting_approval");
    assert!(journaled(&a.state, "approval", &run).is_empty());
    // A role no person of the host's config is: refused too.
    f.pg.add_role("mallory", "dryrun_reviewer");
    let out = f.cli(&[
        "approve",
        "--fleet",
        &f.pg.role_url("mallory"),
        &run,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(
        text(&out).contains("no person's in this host's fleet config"),
        "{}",
        text(&out)
    );
    assert_eq!(record(&a, &run)["state"], "awaiting_approval");
    // bob may.
    let out = f.cli(&["approve", "--fleet", &f.pg.role_url("bob"), &run]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(record(&a, &run)["state"], "approved");
}

#[test]
fn a_decision_on_evidence_that_is_not_the_runs_is_refused() {
    if !require_root() || !require_postgres() {
        return;
    }
    let f = Fleet::new();
    let a = f.host("host_a", &[]);
    let ws = user_workspace();
    let run = waiting_run(&a, &ws);
    eventually("the run in the fleet queue", || {
        f.pg.sql("SELECT count(*) FROM dryrun.evidence") == "1"
    });
    let other = "0".repeat(64);
    // The reviewer pins what they saw; the store refuses other evidence.
    let out = f.cli(&[
        "approve",
        "--fleet",
        &f.pg.role_url("bob"),
        &run,
        "--evidence",
        &other,
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(text(&out).contains("evidence changed"), "{}", text(&out));
    // The published row rewritten to match a forged decision: the host
    // compares with its own record and refuses.
    f.pg.sql(&format!(
        "UPDATE dryrun.runs SET evidence_hash = '{other}' WHERE run_id = '{run}'"
    ));
    let out = f.cli(&["approve", "--fleet", &f.pg.role_url("bob"), &run, "--json"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "refused", "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("the decision was made on evidence"),
        "{v}"
    );
    assert_eq!(record(&a, &run)["state"], "awaiting_approval");
    assert!(journaled(&a.state, "approval", &run).is_empty());
    assert_eq!(journaled(&a.state, "fleet_decision_refused", &run).len(), 1);
    // A run decided locally first: the fleet's later decision finds its
    // state changed and is refused, not applied on top.
    let run2 = waiting_run(&a, &ws);
    eventually("the second run in the queue", || {
        f.pg.sql(&format!(
            "SELECT count(*) FROM dryrun.evidence WHERE run_id = '{run2}'"
        )) == "1"
    });
    let evidence = record(&a, &run2)["rehearsal"]["evidence_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let out = a
        .cli_root()
        .args(["reject", &run2, "--note", "no"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let id = f.pg.sql(&format!(
        "INSERT INTO dryrun.decisions (run_id, host_id, action, evidence_hash, reviewer_role) VALUES ('{run2}', 'host_a', 'approve', '{evidence}', 'bob') RETURNING id"
    ));
    f.pg.sql(&format!(
        "SELECT pg_notify('dryrun_decision', 'host_a {id}')"
    ));
    eventually("refused", || {
        f.pg.sql(&format!(
            "SELECT coalesce(outcome, '') FROM dryrun.decisions WHERE id = {id}"
        )) == "refused"
    });
    assert_eq!(record(&a, &run2)["state"], "rejected");
}
