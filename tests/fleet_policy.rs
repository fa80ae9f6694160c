//! One policy for the fleet (docs/fleet.md): versions published to the
//! store are picked up by every host at once and recorded with each run
//! they judged; a host's own system files may only tighten the fleet's; a
//! host that cannot load the fleet's minimum does not start, and one that
//! falls below it while running judges nothing.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::*;
use common::fleet::*;
use common::*;

/// A rule that makes `touch` wait for a person.
const TOUCH_ASKS: &str = "rules:\n  - id: fleet.touch\n    match: {command: touch}\n    level: ADMIN\n    score: 100\n    reason: the fleet reviews every touch\n    approval: true\n";

fn publish(f: &Fleet, text: &str, extra: &[&str]) -> String {
    let file = f.cfg_dir.path().join("policy.yaml");
    std::fs::write(&file, text).unwrap();
    let url = f.pg.role_url("admin");
    let mut args = vec!["fleet", "--fleet", &url];
    args.extend_from_slice(&["policy", "publish", file.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let out = f.cli(&args);
    assert!(out.status.success(), "{}", text_of(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text_of(o: &std::process::Output) -> String {
    text(o)
}

/// A root-owned system policy directory holding `yaml` (the host's own
/// layer), as `DRYRUN_SYSTEM_POLICY_DIR` accepts one.
fn local_policy(yaml: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-policy-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(d.path().join("host.yaml"), yaml).unwrap();
    d
}

#[test]
fn policy_versions_are_picked_up_at_once_and_recorded_with_each_run() {
    if !require_root() || !common::pg::require_postgres() {
        return;
    }
    let f = Fleet::new();
    assert!(publish(&f, "rules: []\n", &[]).contains("version 1"));
    let a = f.host("host_a", &[]);
    let ws = user_workspace();
    let before = submit_user(&a, &ws, "touch t1", &["--expect-write", "t1"]);
    assert_eq!(before.decision(), "promote", "{before:?}");
    assert_eq!(record(&a, &run_id(&before))["fleet_policy_version"], 1);
    // Version 2: the host has it at once (notified), no restart.
    assert!(publish(&f, TOUCH_ASKS, &[]).contains("version 2"));
    eventually("host A on version 2", || {
        f.pg.sql("SELECT policy_version FROM dryrun.hosts WHERE host_id = 'host_a'") == "2"
    });
    let after = submit_user(&a, &ws, "touch t2", &["--expect-write", "t2"]);
    assert_eq!(after.json["state"], "awaiting_approval", "{after:?}");
    assert!(
        after.reasons().iter().any(|r| r.contains("fleet.touch")),
        "{after:?}"
    );
    let id = run_id(&after);
    assert_eq!(record(&a, &id)["fleet_policy_version"], 2);
    let submitted = journaled(&a.state, "run_submitted", &id);
    assert_eq!(
        submitted[0]["data"]["fleet_policy_version"], 2,
        "{submitted:?}"
    );
    eventually("the fleet's row says which version judged it", || {
        f.pg.sql(&format!(
            "SELECT policy_version FROM dryrun.runs WHERE run_id = '{id}'"
        )) == "2"
    });
    // The host's own files may only tighten the fleet's policy.
    let loosen = local_policy("thresholds: {approval: 99, block: 99}\n");
    let b = f.host_env(
        "host_b",
        &[],
        &[("DRYRUN_SYSTEM_POLICY_DIR", loosen.path().to_str().unwrap())],
    );
    let r = submit_user(&b, &ws, "touch t3", &["--expect-write", "t3"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        format!("{r:?}").contains("may only lower thresholds"),
        "{r:?}"
    );
    drop(b);
    let tighten = local_policy(
        "rules:\n  - id: host.echo\n    match: {command: echo}\n    level: ADMIN\n    score: 100\n    reason: this host reviews echo\n    approval: true\n",
    );
    let b = f.host_env(
        "host_b",
        &[],
        &[("DRYRUN_SYSTEM_POLICY_DIR", tighten.path().to_str().unwrap())],
    );
    let r = submit_user(&b, &ws, "echo hi > e.txt", &["--expect-write", "e.txt"]);
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    assert!(r.reasons().iter().any(|x| x.contains("host.echo")), "{r:?}");
    // And the fleet's rule still holds there.
    let r = submit_user(&b, &ws, "touch t4", &["--expect-write", "t4"]);
    assert!(
        r.reasons().iter().any(|x| x.contains("fleet.touch")),
        "{r:?}"
    );
}

#[test]
fn a_host_below_the_fleets_minimum_does_not_start_and_one_that_falls_below_judges_nothing() {
    if !require_root() || !common::pg::require_postgres() {
        return;
    }
    let f = Fleet::new();
    publish(&f, "rules: []\n", &[]);
    let a = f.host("host_a", &[]);
    let ws = user_workspace();
    assert_eq!(
        submit_user(&a, &ws, "touch t1", &["--expect-write", "t1"]).decision(),
        "promote"
    );
    // Version 2 as a newer dryrun would write it (a section this one does
    // not know), made the minimum, written around this binary's own check.
    f.pg.sql(
        "SELECT dryrun.publish_policy('future_section: {}' || chr(10), encode(sha256('x'), 'hex'), false)",
    );
    let future = "future_section: {}\n";
    let hash = blake3::hash(future.as_bytes()).to_hex().to_string();
    f.pg.sql(&format!(
        "UPDATE dryrun.policies SET text = 'future_section: {{}}' || chr(10), hash = '{hash}' WHERE version = 2"
    ));
    f.pg.sql("UPDATE dryrun.settings SET min_policy_version = 2");
    f.pg.sql("SELECT pg_notify('dryrun_policy', '2')");
    // The running host stops judging: every submission is refused, naming why.
    eventually("host A refuses to judge", || {
        let r = submit_user(&a, &ws, "touch t2", &["--expect-write", "t2"]);
        r.code != 0 && format!("{r:?}").contains("fleet's minimum is version 2")
    });
    drop(a);
    // A host starting now does not start.
    let args = f.host_args("host_b");
    let dir = tempfile::Builder::new()
        .prefix("dryrun-daemon-")
        .tempdir_in("/tmp")
        .unwrap();
    let out = Command::new(bin())
        .arg("daemon")
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("does not start below it"),
        "{}",
        text(&out)
    );
    assert!(!dir.path().join("s.sock").exists());
    // A version it can load, made the minimum: hosts start and judge again.
    std::thread::sleep(Duration::from_millis(10));
    publish(&f, "rules: []\n", &["--minimum"]);
    let b = f.host("host_b", &[]);
    let r = submit_user(&b, &ws, "touch t5", &["--expect-write", "t5"]);
    assert_eq!(r.decision(), "promote", "{r:?}");
    assert_eq!(record(&b, &run_id(&r))["fleet_policy_version"], 3);
}
