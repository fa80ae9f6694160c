//! An audit no single host can rewrite (docs/fleet.md): each host anchors
//! its journal head in the store at every group commit and publishes every
//! record's hash; `dryrun journal verify --fleet` checks every host's
//! published chain and a host's local journal against it, and names a
//! journal cut short or rewritten after it anchored, even when the local
//! chain (and its anchor file) were rewritten consistently, which the
//! local check alone cannot see.

mod common;

use std::path::Path;

use common::daemon::*;
use common::fleet::*;
use common::*;
use serde_json::Value;

/// `dryrun journal verify --fleet URL` on `state` (as root).
fn verify(f: &Fleet, state: &Path, extra: &[&str]) -> (Option<i32>, Value) {
    let url = f.pg.role_url("bob");
    let mut args = vec![
        "--state-dir",
        state.to_str().unwrap(),
        "journal",
        "verify",
        "--fleet",
        &url,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = std::process::Command::new(bin())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("DRYRUN_LOCAL", "1")
        .args(&args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    (out.status.code(), v)
}

/// Rewrite a journal consistently from record `from` on: that record's
/// note changed, every later record re-chained and re-hashed, the anchor
/// file removed (what someone who can write the state directory can do).
fn rewrite_from(state: &Path, from: usize) {
    let path = state.join("journal.jsonl");
    let raw = std::fs::read_to_string(&path).unwrap();
    let raws: Vec<&str> = raw.lines().collect();
    let lines: Vec<Value> = raws
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut prev = lines[from]["body"]["prev"].as_str().unwrap().to_string();
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        if i < from {
            out.push_str(raws[i]);
            out.push('\n');
            continue;
        }
        let mut body = l["body"].clone();
        if i == from {
            body["at"] = Value::from("2020-01-01T00:00:00.000000Z");
        }
        body["prev"] = Value::from(prev.clone());
        let bytes = serde_json::to_string(&body).unwrap();
        let hash = blake3::hash(bytes.as_bytes()).to_hex().to_string();
        out.push_str(&format!("{{\"hash\":\"{hash}\",\"body\":{bytes}}}\n"));
        prev = hash;
    }
    std::fs::write(&path, out).unwrap();
    let _ = std::fs::remove_file(state.join("journal.head"));
}

#[test]
fn a_journal_cut_short_or_rewritten_after_it_anchored_is_named_by_the_fleet() {
    if !require_root() || !common::pg::require_postgres() {
        return;
    }
    let f = Fleet::new();
    let mut a = f.host("host_a", &[]);
    let b = f.host("host_b", &[]);
    let ws = user_workspace();
    for i in 0..3 {
        let r = submit_user(
            &a,
            &ws,
            &format!("echo {i} > f{i}"),
            &["--expect-write", "f*"],
        );
        assert_eq!(r.decision(), "promote", "{r:?}");
    }
    submit_user(&b, &ws, "echo b > g", &["--expect-write", "g"]);
    let records = std::fs::read_to_string(a.state.join("journal.jsonl"))
        .unwrap()
        .lines()
        .count();
    eventually("host A's journal published and anchored", || {
        f.pg.sql("SELECT coalesce(max(seq), -1) FROM dryrun.anchors WHERE host_id = 'host_a'")
            == (records - 1).to_string()
    });
    // Host B's too (a host publishes what no reviewer waits for within
    // 250 ms, batched): the verification below names both hosts.
    let b_records = std::fs::read_to_string(b.state.join("journal.jsonl"))
        .unwrap()
        .lines()
        .count();
    eventually("host B's journal published and anchored", || {
        f.pg.sql("SELECT coalesce(max(seq), -1) FROM dryrun.anchors WHERE host_id = 'host_b'")
            == (b_records - 1).to_string()
    });
    let (code, v) = verify(&f, &a.state, &[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["fleet"]["local"]["host"], "host_a", "{v}");
    assert_eq!(v["fleet"]["hosts"].as_array().unwrap().len(), 2, "{v}");
    assert!(
        v["fleet"]["local"]["anchors_checked"].as_u64().unwrap() >= 1,
        "{v}"
    );
    a.kill9();

    // Cut short (and the local anchor file with it): the local chain is
    // whole, the fleet knows more was written.
    let saved = std::fs::read(a.state.join("journal.jsonl")).unwrap();
    let keep: Vec<&str> = std::str::from_utf8(&saved)
        .unwrap()
        .lines()
        .take(records - 2)
        .collect();
    std::fs::write(a.state.join("journal.jsonl"), keep.join("\n") + "\n").unwrap();
    let head = std::fs::read(a.state.join("journal.head")).unwrap();
    std::fs::remove_file(a.state.join("journal.head")).unwrap();
    let (code, v) = verify(&f, &a.state, &[]);
    assert_eq!(
        v["journal"]["ok"], true,
        "the local check alone passes: {v}"
    );
    assert_eq!(code, Some(5), "{v}");
    let problem = v["fleet"]["local"]["problem"].as_str().unwrap();
    assert!(problem.contains("truncated after it anchored"), "{problem}");

    // Rewritten consistently from record 2 on: same length, every hash
    // re-made; only the fleet's copy of the hashes can tell.
    std::fs::write(a.state.join("journal.jsonl"), &saved).unwrap();
    std::fs::write(a.state.join("journal.head"), &head).unwrap();
    assert_eq!(verify(&f, &a.state, &[]).0, Some(0));
    rewrite_from(&a.state, 2);
    let (code, v) = verify(&f, &a.state, &[]);
    assert_eq!(
        v["journal"]["ok"], true,
        "the local check alone passes: {v}"
    );
    assert_eq!(code, Some(5), "{v}");
    let problem = v["fleet"]["local"]["problem"].as_str().unwrap();
    assert!(problem.contains("local record 2 hashes to"), "{problem}");
    assert!(problem.contains("rewritten after it anchored"), "{problem}");
    // A copy of host B's journal is checked as host B's.
    let (code, v) = verify(&f, &b.state, &["--host", "host_b"]);
    assert_eq!(code, Some(0), "{v}");
    // The daemon itself refuses to publish from a diverged journal.
    let args = f.host_args("host_a");
    a.spawn(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    eventually("the host says its journal diverged", || {
        a.log_text().contains("disagrees with what it published")
    });
}
