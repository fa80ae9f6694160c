//! Resource fairness, attacked as the agent: a root daemon, the unprivileged
//! test user as the client. The daemon's configuration sets the ceilings;
//! what a run keeps is counted at apparent size; each uid has a quota in the
//! state directory and at most half of the running slots.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::*;
use common::*;

/// Apparent bytes of every file under `dir` (sparse files in full).
fn apparent_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if m.is_dir() {
            total += apparent_bytes(&e.path());
        } else {
            total += m.len();
        }
    }
    total
}

/// Allocated bytes of every file under `dir`.
fn allocated_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        total += m.blocks() * 512;
        if m.is_dir() {
            total += allocated_bytes(&e.path());
        }
    }
    total
}

fn run_dirs(d: &Daemon) -> Vec<String> {
    std::fs::read_dir(d.state.join("runs"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn submitted(d: &Daemon) -> usize {
    d.journal()
        .iter()
        .filter(|b| b["kind"] == "run_submitted")
        .count()
}

fn envelope(ws: &Ws, command: &str, extra: &str) -> String {
    let wd = ws.dir.display().to_string();
    let mut v: Value = serde_json::from_str(&format!("{{{extra}}}")).unwrap();
    v["command"] = command.into();
    v["working_dir"] = wd.into();
    v.to_string()
}

#[test]
fn limits_above_the_ceilings_get_400_naming_the_ceiling_and_nothing_runs() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[
        "--max-disk-mb",
        "64",
        "--max-timeout-s",
        "120",
        "--max-memory-mb",
        "8192",
        "--max-pids",
        "4096",
        "--max-cpus",
        "1",
    ]);
    let ws = user_workspace();
    for (limits, named) in [
        (
            r#""limits": {"disk_mb": 1048576}"#,
            "limits.disk_mb: 1048576 is above this daemon's ceiling of 64",
        ),
        (
            r#""limits": {"timeout_s": 86400}"#,
            "limits.timeout_s: 86400 is above this daemon's ceiling of 120",
        ),
        (
            r#""limits": {"memory_mb": 1048576}"#,
            "limits.memory_mb: 1048576 is above this daemon's ceiling of 8192",
        ),
        (
            r#""limits": {"pids": 100000}"#,
            "limits.pids: 100000 is above this daemon's ceiling of 4096",
        ),
        (
            r#""limits": {"output_kb": 100000}"#,
            "limits.output_kb: 100000 is above this daemon's ceiling of 4096",
        ),
        (
            r#""limits": {"cpus": 2}"#,
            "limits.cpus: 2 is above this daemon's ceiling of 1; ask for at most 1 (the ceiling is `dryrun daemon --max-cpus`)",
        ),
    ] {
        let body = envelope(&ws, "touch ran-anyway", limits);
        let (st, v) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["code"], "invalid_envelope", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(named), "{msg}");
    }
    // Nothing ran, nothing was journaled or kept.
    assert_eq!(submitted(&d), 0);
    assert!(run_dirs(&d).is_empty(), "{:?}", run_dirs(&d));
    assert!(!ws.dir.join("ran-anyway").exists());

    // A limit left to its default is held to the ceiling instead.
    let body = envelope(&ws, "true", "");
    let (st, v) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "{v}");
    let enforcement = strings(&v["rehearsal"]["sandbox"]["enforcement"]);
    assert!(
        enforcement.iter().any(|e| e.starts_with("disk: 64 MiB")),
        "{enforcement:?}"
    );

    // The in-process engine has ceilings too (sized to the machine: half
    // its RAM for the upper layer, docs/environment.md).
    let state = tempfile::tempdir().unwrap();
    let ws = Ws::new(Who::Root);
    let body = envelope(&ws, "true", r#""limits": {"disk_mb": 1048576}"#);
    let out = execute_envelope_in_background(
        std::process::Command::new(bin())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .arg("--local")
            .arg("--state-dir")
            .arg(state.path()),
        &body,
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.disk_mb: 1048576 is above"), "{err}");
    let mem_mb = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        / 1024;
    let ceiling = (mem_mb / 2).max(1024);
    assert!(err.contains(&format!("ceiling of {ceiling};")), "{err}");
    assert!(err.contains("sized to this machine"), "{err}");
}

#[test]
fn a_sparse_file_counts_at_its_apparent_size_and_the_limit_is_named() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    // Each file stays under the file size limit (the run's disk_mb) and
    // takes no blocks in the upper layer; together they are 900 MiB.
    let body = envelope(
        &ws,
        "for i in $(seq 10 69); do truncate -s 15M f$i; done && echo small > small.txt",
        r#""limits": {"disk_mb": 16}, "intent": {"summary": "x", "mode": "mutating", "expected_writes": ["**"]}"#,
    );
    let (st, v) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "{v}");
    let id = v["run_id"].as_str().unwrap().to_string();
    let reh = &v["rehearsal"];
    assert_eq!(reh["exit_code"], 0, "{v}");
    assert!(
        strings(&reh["limits_hit"]).contains(&"disk".to_string()),
        "{reh}"
    );
    let blocked = reh["blocked"].as_array().unwrap();
    assert!(
        blocked.iter().any(|b| b["kind"] == "limit"
            && b["detail"]
                .as_str()
                .unwrap()
                .contains("kept-content budget of 32 MiB")),
        "{blocked:?}"
    );
    let changes = reh["changes"].as_array().unwrap();
    let sparse: Vec<&Value> = changes
        .iter()
        .filter(|c| c["path"].as_str().unwrap().starts_with('f'))
        .collect();
    assert_eq!(sparse.len(), 60);
    assert!(sparse.iter().all(|c| c["size_after"] == 15u64 << 20));
    // 2 x 16 MiB of budget: two 15 MiB files fit, the rest are not kept.
    let not_kept: Vec<&&Value> = sparse
        .iter()
        .filter(|c| c["content_not_kept"] == true)
        .collect();
    assert_eq!(not_kept.len(), 58, "{sparse:?}");
    assert!(not_kept.iter().all(|c| c["after"].is_null()));
    // The small file's content is kept as usual.
    let small = changes.iter().find(|c| c["path"] == "small.txt").unwrap();
    let hash = small["after"].as_str().unwrap();
    assert!(
        d.state
            .join("runs")
            .join(&id)
            .join("blobs")
            .join(hash)
            .exists()
    );
    // Never promote a change whose content was not kept.
    assert_eq!(v["verdict"]["decision"], "blocked", "{}", v["verdict"]);
    let (st, _) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/promote"), None);
    assert_eq!(st, 409);

    // Host side: the state directory holds at most the run's budget, not
    // 900 MiB (nor the 2 x disk_mb + 64 MiB it used to allow).
    let runs = d.state.join("runs");
    let kept = apparent_bytes(&runs);
    assert!(kept <= (32 << 20) + (1 << 20), "{kept} bytes");
    assert!(allocated_bytes(&runs) <= (32 << 20) + (1 << 20));
    assert!(!ws.dir.join("f10").exists());
}

#[test]
fn a_uid_over_its_quota_is_refused_and_other_uids_are_not() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--quota-per-uid-mb", "1"]);
    let ws = user_workspace();
    let write = r#""intent": {"summary": "x", "mode": "mutating", "expected_writes": ["**"]}"#;
    let body = envelope(&ws, "head -c 1500000 /dev/zero > data.bin", write);
    let (st, v) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "rehearsed", "{v}");
    let before = submitted(&d);
    let runs_before = run_dirs(&d).len();

    // Over the quota now: refused, with the quota and the way out named.
    let body = envelope(&ws, "touch again", write);
    let (st, v) = d.curl(Who::User, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"]["code"], "quota_exceeded");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("quota of 1 MiB"), "{msg}");
    assert!(
        msg.contains("records of finished runs older than 30 days"),
        "{msg}"
    );
    assert!(msg.contains("--quota-per-uid-mb"), "{msg}");
    assert_eq!(submitted(&d), before, "nothing journaled");
    assert_eq!(run_dirs(&d).len(), runs_before, "nothing kept");

    // The quota is per uid: root's runs still go through.
    let rws = Ws::new(Who::Root);
    let body = envelope(&rws, "true", "");
    let (st, v) = d.curl(Who::Root, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "{v}");
}

#[test]
fn a_uid_holding_slots_with_long_sleeps_does_not_stop_another_uids_run() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--max-running", "2"]);
    let ws = user_workspace();
    // The agent asks for every slot, for as long as the ceiling allows.
    let mut held = Vec::new();
    for i in 0..2 {
        let body = envelope(
            &ws,
            &format!("sleep 600; : fair-hold-{i}"),
            r#""limits": {"timeout_s": 3600}"#,
        );
        let (st, v) = d.curl(Who::User, "POST", "/v1/runs", Some(&body));
        assert_eq!(st, 202, "{v}");
        held.push(v["run_id"].as_str().unwrap().to_string());
    }
    let state = |id: &str| -> String {
        let (_, v) = d.curl(Who::Root, "GET", &format!("/v1/runs/{id}"), None);
        v["state"].as_str().unwrap_or_default().to_string()
    };
    wait_until("one of the agent's runs to be running", 30, || {
        held.iter().any(|id| state(id) == "running")
    });
    std::thread::sleep(Duration::from_millis(500));
    // Half of two slots: one runs, the other waits in the queue.
    let states: Vec<String> = held.iter().map(|id| state(id)).collect();
    assert_eq!(
        states.iter().filter(|s| *s == "running").count(),
        1,
        "{states:?}"
    );
    assert_eq!(
        states.iter().filter(|s| *s == "queued").count(),
        1,
        "{states:?}"
    );

    // Another uid's run starts and finishes while the agent holds its share.
    let rws = Ws::new(Who::Root);
    let body = envelope(&rws, "echo other-uid", "");
    let t0 = Instant::now();
    let (st, v) = d.curl(Who::Root, "POST", "/v1/runs?wait=true", Some(&body));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "rehearsed", "{v}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let states: Vec<String> = held.iter().map(|id| state(id)).collect();
    assert!(
        states.iter().any(|s| s == "running") && states.iter().any(|s| s == "queued"),
        "the agent's runs were still holding their share: {states:?}"
    );

    for id in &held {
        let (st, v) = d.curl(Who::Root, "POST", &format!("/v1/runs/{id}/cancel"), None);
        assert_eq!(st, 200, "{v}");
    }
    wait_until("the agent's sandboxes to be gone", 20, || {
        processes_with("fair-hold-").is_empty()
    });
}
