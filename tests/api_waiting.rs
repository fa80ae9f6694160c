//! Waiting on runs over the API, with real clients (curl) and two
//! identities: `GET /v1/runs/{id}?wait=SECONDS` long-polls until the run's
//! state changes, `GET /v1/events` streams state changes as Server-Sent
//! Events (the user sees only its own runs, a reviewer all), and unknown
//! query parameters are a 400 that names them on every route.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::*;
use common::*;

/// Submit without waiting, as the user; the run id.
fn submit_queued(d: &Daemon, ws: &Ws, cmd: &str) -> String {
    let body = serde_json::json!({
        "command": cmd,
        "working_dir": ws.dir,
        "intent": {"expected_writes": ["**"]},
    })
    .to_string();
    let (code, v) = d.curl(Who::User, "POST", "/v1/runs", Some(&body));
    assert_eq!(code, 202, "{v}");
    v["run_id"].as_str().unwrap().to_string()
}

#[test]
fn a_long_poll_answers_when_the_state_changes_and_not_before() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    // A rehearsal that takes about two seconds.
    let id = submit_queued(&d, &ws, "sleep 2; echo done > out.txt");
    let t0 = Instant::now();
    let (code, first) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}?wait=60"), None);
    assert_eq!(code, 200, "{first}");
    let st = first["state"].as_str().unwrap().to_string();
    assert_ne!(
        st, "queued",
        "a long poll answered with the state it started in"
    );
    // Poll until the verdict: each answer is a different state than the
    // one before, and the last is the verdict's.
    let mut seen = vec![st];
    while !matches!(
        seen.last().unwrap().as_str(),
        "rehearsed" | "awaiting_approval" | "failed"
    ) {
        let (code, r) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}?wait=60"), None);
        assert_eq!(code, 200, "{r}");
        let s = r["state"].as_str().unwrap().to_string();
        assert_ne!(
            &s,
            seen.last().unwrap(),
            "the long poll answered without a change"
        );
        seen.push(s);
    }
    assert!(
        t0.elapsed() < Duration::from_secs(50),
        "the long poll waited for its full time although the run finished: {seen:?}"
    );
    // Nothing changes any more: the poll waits its time, then answers the
    // unchanged record.
    let t1 = Instant::now();
    let (code, r) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}?wait=1"), None);
    assert_eq!(code, 200);
    assert_eq!(r["state"].as_str(), seen.last().map(String::as_str));
    assert!(
        t1.elapsed() >= Duration::from_millis(900),
        "a poll on a settled run answered before its time"
    );
    // Someone else's run: 404 at once, as if absent, even while waiting.
    let other = Ws::new(Who::Root);
    let root_body = serde_json::json!({"command": "true", "working_dir": other.dir}).to_string();
    let (code, v) = d.curl(Who::Root, "POST", "/v1/runs", Some(&root_body));
    assert_eq!(code, 202, "{v}");
    let root_id = v["run_id"].as_str().unwrap();
    let (code, v) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/runs/{root_id}?wait=30"),
        None,
    );
    assert_eq!(code, 404, "{v}");
    // Bad waits are named.
    for q in ["wait=601", "wait=-1", "wait=soon"] {
        let (code, v) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}?{q}"), None);
        assert_eq!(code, 400, "{q}: {v}");
        assert_eq!(v["error"]["code"], "invalid_query", "{v}");
    }
}

/// An SSE stream read by curl as `who`; its lines arrive on a channel.
struct EventStream {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    state: Vec<serde_json::Value>,
    kind: String,
}

impl EventStream {
    /// Connect, and return once the daemon says the subscription exists
    /// (the stream's first line, `: subscribed`).
    fn open(d: &Daemon, who: Who) -> EventStream {
        let mut c = if who == Who::User {
            as_test_user("curl")
        } else {
            Command::new(tool("curl", "curl"))
        };
        c.args(["-sSN", "--max-time", "300", "--unix-socket"])
            .arg(&d.socket)
            .arg("http://dryrun/v1/events")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the event stream sent nothing in 60 s");
        assert_eq!(first, ": subscribed", "the stream's first line");
        EventStream {
            child,
            lines,
            state: Vec::new(),
            kind: String::new(),
        }
    }

    /// Read `state` events until `done` holds for those read so far (or
    /// 60 s pass); all of them.
    fn until(&mut self, done: impl Fn(&[serde_json::Value]) -> bool) -> &[serde_json::Value] {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(&self.state) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                break;
            };
            if let Some(k) = line.strip_prefix("event:") {
                self.kind = k.trim().to_string();
            } else if let Some(data) = line.strip_prefix("data:")
                && self.kind == "state"
            {
                self.state.push(serde_json::from_str(data.trim()).unwrap());
            }
        }
        &self.state
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn has_state(evs: &[serde_json::Value], id: &str, states: &[&str]) -> bool {
    evs.iter()
        .any(|e| e["run_id"] == id && states.contains(&e["state"].as_str().unwrap_or("")))
}

#[test]
fn the_event_stream_shows_each_identity_what_it_may_see() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let root_ws = Ws::new(Who::Root);
    let mut user_stream = EventStream::open(&d, Who::User);
    let mut root_stream = EventStream::open(&d, Who::Root);
    let mine = submit_queued(&d, &ws, "echo a > a.txt");
    let root_body = serde_json::json!({"command": "true", "working_dir": root_ws.dir}).to_string();
    let (code, v) = d.curl(Who::Root, "POST", "/v1/runs?wait=true", Some(&root_body));
    assert_eq!(code, 200, "{v}");
    let roots = v["run_id"].as_str().unwrap().to_string();
    // A run the user submits after root's run has finished: its events
    // come after all of root's in the stream, so reading up to its verdict
    // reads past anything of root's the user could have been shown.
    let later = submit_queued(&d, &ws, "echo b > b.txt");

    let verdict = ["rehearsed", "awaiting_approval"];
    let seen = |e: &[serde_json::Value], id: &str| e.iter().any(|x| x["run_id"] == id);
    let root_events = root_stream
        .until(|e| has_state(e, &mine, &verdict) && seen(e, &roots))
        .to_vec();
    let user_events = user_stream
        .until(|e| has_state(e, &mine, &verdict) && has_state(e, &later, &verdict))
        .to_vec();
    assert!(
        has_state(&user_events, &later, &verdict),
        "the user's stream stopped short: {user_events:?}"
    );
    let ids = |evs: &[serde_json::Value]| -> Vec<String> {
        evs.iter()
            .map(|e| e["run_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        has_state(&user_events, &mine, &verdict),
        "the user did not see its own run reach its verdict: {user_events:?}"
    );
    assert!(
        !ids(&user_events).contains(&roots),
        "the user saw root's run: {user_events:?}"
    );
    assert!(ids(&root_events).contains(&mine), "{root_events:?}");
    assert!(ids(&root_events).contains(&roots), "{root_events:?}");
    // Events carry the id and the state only (who submitted stays home).
    for e in &root_events {
        let keys: Vec<&String> = e.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["run_id", "state"], "{e}");
    }
}

#[test]
fn unknown_query_parameters_are_refused_on_every_route() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let r = submit_user(&d, &ws, "echo x > x.txt", &["--expect-write", "x.txt"]);
    let id = r.json["run_id"].as_str().unwrap().to_string();
    for (method, path) in [
        ("GET", "/v1/runs?colour=red".to_string()),
        ("GET", format!("/v1/runs/{id}?verbose=1")),
        ("GET", format!("/v1/runs/{id}/diff?agianst=r1")),
        ("POST", format!("/v1/runs/{id}/approve?force=1")),
        ("POST", format!("/v1/runs/{id}/reject?force=1")),
        ("POST", format!("/v1/runs/{id}/promote?dry=1")),
        ("POST", format!("/v1/runs/{id}/cancel?now=1")),
        ("GET", "/v1/receipts/p1?full=1".to_string()),
        ("POST", "/v1/receipts/p1/rollback?x=1".to_string()),
        ("GET", "/v1/journal/verify?deep=1".to_string()),
        ("GET", "/v1/health?x=1".to_string()),
        ("GET", "/v1/events?since=0".to_string()),
        ("POST", "/v1/runs?wiat=true".to_string()),
    ] {
        let body = (method == "POST").then_some("{}");
        let (code, v) = d.curl(Who::User, method, &path, body);
        assert_eq!(code, 400, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "invalid_query", "{method} {path}: {v}");
        let name = path.split('?').nth(1).unwrap().split('=').next().unwrap();
        assert!(
            v["error"]["message"].as_str().unwrap().contains(name),
            "{method} {path}: the error does not name {name}: {v}"
        );
    }
    // The run was not promoted by any of them.
    let (_, rec) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}"), None);
    assert_ne!(rec["state"], "promoted");
    assert!(!ws.dir.join("x.txt").exists());
}
