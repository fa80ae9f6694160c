//! Faults (docs/fleet.md): the store and a host daemon are killed in the
//! middle of a load of runs and decisions, in both orders. A host without
//! the store goes on alone (its runs rehearse, a local reviewer decides),
//! and catches up when the store is back; no decision is lost or applied
//! twice, and `journal verify --fleet` is green afterwards.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::daemon::*;
use common::fleet::*;
use common::*;
use serde_json::Value;

#[derive(Clone, Copy, Debug)]
enum Order {
    StoreThenHost,
    HostThenStore,
}

/// A reviewer deciding every run in `ids`, again and again until each has
/// a decision (the store away: the attempt fails and is made again).
fn decider(
    url: String,
    ids: Vec<String>,
    stop: Arc<AtomicBool>,
    made: Arc<Mutex<BTreeMap<String, String>>>,
) {
    let mut left: Vec<String> = ids;
    while !left.is_empty() && !stop.load(Ordering::SeqCst) {
        let id = left.remove(0);
        let out = std::process::Command::new(bin())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .args(["approve", "--fleet", &url, &id, "--wait", "0", "--json"])
            .output()
            .unwrap();
        let t = text(&out);
        match out.status.code() {
            Some(0) => {
                made.lock().unwrap().insert(id, "decided".into());
            }
            // Decided already (a retry after the answer was lost), or the
            // run was decided at its host.
            Some(4) => {
                made.lock().unwrap().insert(id, t);
            }
            _ => {
                left.push(id);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn faults(order: Order) {
    let f = Fleet::new();
    let mut a = f.host("host_a", &[]);
    let ws = user_workspace();
    let mut ids: Vec<String> = (0..8).map(|n| waiting_run_n(&a, &ws, n)).collect();
    eventually("the queue published", || {
        f.pg.sql("SELECT count(*) FROM dryrun.evidence") == "8"
    });
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(Mutex::new(BTreeMap::new()));
    let t = {
        let (url, ids, stop, made) = (
            f.pg.role_url("bob"),
            ids.clone(),
            stop.clone(),
            made.clone(),
        );
        std::thread::spawn(move || decider(url, ids, stop, made))
    };
    eventually("decisions under way", || made.lock().unwrap().len() >= 3);
    let args = f.host_args("host_a");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The faults, mid-load; the host works alone in between.
    let mut alone = Vec::new();
    match order {
        Order::StoreThenHost => {
            f.pg.kill();
            alone.push(waiting_run_n(&a, &ws, 100));
            a.kill9();
            a.spawn(&args, &[]);
            alone.push(waiting_run_n(&a, &ws, 101));
            f.pg.start_server();
        }
        Order::HostThenStore => {
            a.kill9();
            f.pg.kill();
            a.spawn(&args, &[]);
            alone.push(waiting_run_n(&a, &ws, 100));
            alone.push(waiting_run_n(&a, &ws, 101));
            f.pg.start_server();
        }
    }
    // A local reviewer decided one of them while the store was away.
    let out = a
        .cli_root()
        .args(["reject", &alone[0], "--note", "local"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    t.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    assert_eq!(made.lock().unwrap().len(), 8, "{:?}", made.lock().unwrap());
    // The runs made alone reach the fleet; a fleet approval of the one the
    // local reviewer rejected is refused at the host.
    for id in &alone {
        eventually("a run made alone published", || {
            f.pg.sql(&format!(
                "SELECT count(*) FROM dryrun.runs WHERE run_id = '{id}'"
            )) == "1"
        });
    }
    eventually("the local rejection published", || {
        f.pg.sql(&format!(
            "SELECT state FROM dryrun.runs WHERE run_id = '{}'",
            alone[0]
        )) == "rejected"
    });
    ids.push(alone[1].clone());
    let out = f.cli(&[
        "approve",
        "--fleet",
        &f.pg.role_url("bob"),
        &alone[1],
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // Every decision has its outcome; every applied one is one approval in
    // the host's journal, and no run was approved twice.
    eventually("every decision answered by the host", || {
        f.pg.sql("SELECT count(*) FROM dryrun.decisions WHERE outcome IS NULL") == "0"
    });
    let rows = f.pg.sql("SELECT string_agg(id || ' ' || run_id || ' ' || outcome, ',' ORDER BY id) FROM dryrun.decisions");
    let decisions: Vec<(i64, String, String)> = rows
        .split(',')
        .map(|r| {
            let mut p = r.split(' ');
            (
                p.next().unwrap().parse().unwrap(),
                p.next().unwrap().into(),
                p.next().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        decisions.len(),
        ids.len(),
        "one decision per run: {rows} {:?}",
        made.lock().unwrap()
    );
    let runs: BTreeSet<&String> = decisions.iter().map(|d| &d.1).collect();
    assert_eq!(runs.len(), ids.len(), "{rows}");
    for (id, run, outcome) in &decisions {
        assert_eq!(outcome, "applied", "decision {id} on {run}: {rows}");
        let approvals = journaled(&a.state, "approval", run);
        assert_eq!(
            approvals.len(),
            1,
            "run {run} approved {} times",
            approvals.len()
        );
        assert_eq!(approvals[0]["data"]["fleet_decision"], *id);
        assert_eq!(record(&a, run)["state"], "approved");
    }
    assert!(journaled(&a.state, "approval", &alone[0]).is_empty());
    // And the audit is whole.
    let out = std::process::Command::new(bin())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .args([
            "--local",
            "--state-dir",
            a.state.to_str().unwrap(),
            "journal",
            "verify",
            "--fleet",
            &f.pg.role_url("bob"),
            "--json",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(v["fleet"]["local"]["ok"], true, "{v}");
}

#[test]
fn killing_the_store_then_the_host_mid_load_loses_and_repeats_no_decision() {
    if !require_root() || !common::pg::require_postgres() {
        return;
    }
    faults(Order::StoreThenHost);
}

#[test]
fn killing_the_host_then_the_store_mid_load_loses_and_repeats_no_decision() {
    if !require_root() || !common::pg::require_postgres() {
        return;
    }
    faults(Order::HostThenStore);
}
