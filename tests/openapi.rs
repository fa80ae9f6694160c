//! `docs/openapi.yaml` cannot drift from what the daemon sends: every route
//! is called on a real daemon with real requests, and each JSON answer is
//! validated (JSON Schema 2020-12, the `jsonschema` crate) against the
//! schema the document gives for that route and status. Server-produced
//! objects are closed (`additionalProperties: false`), so a field added to
//! the run record without the document fails here.

mod common;

use common::daemon::*;
use common::*;
use serde_json::json;

/// The document as JSON.
fn document() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.yaml");
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Follows `$ref: "#/components/..."` in the document.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let ptr = r.strip_prefix('#').expect("local reference");
            resolve(
                doc,
                doc.pointer(ptr).unwrap_or_else(|| panic!("{r} is missing")),
            )
        }
        None => v,
    }
}

/// The schema the document gives for a JSON answer of `method path` with
/// `status`, as a standalone JSON Schema whose `components` are the
/// document's (so `#/components/schemas/...` references resolve).
fn response_schema(doc: &Value, method: &str, path: &str, status: u16) -> Value {
    let op = &doc["paths"][path][method.to_lowercase()];
    assert!(op.is_object(), "{method} {path} is not documented");
    let resp = resolve(doc, &op["responses"][status.to_string()]);
    assert!(
        resp.is_object(),
        "{method} {path} answered {status}, which the document does not list"
    );
    let mut schema = resp["content"]["application/json"]["schema"].clone();
    assert!(
        schema.is_object(),
        "{method} {path} {status} has no JSON schema"
    );
    schema["components"] = doc["components"].clone();
    schema
}

struct Checker {
    doc: Value,
    seen: Vec<String>,
}

impl Checker {
    /// Validates one answer; returns it.
    fn check(&mut self, route: (&str, &str), got: (u16, Value)) -> Value {
        let (method, path) = route;
        let (status, body) = got;
        let schema = response_schema(&self.doc, method, path, status);
        let validator = jsonschema::draft202012::options()
            .build(&schema)
            .unwrap_or_else(|e| {
                panic!("{method} {path} {status}: the schema does not compile: {e}")
            });
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| format!("  at {}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} {status}: the answer does not match docs/openapi.yaml:\n{}\n\nanswer: {}",
            errors.join("\n"),
            serde_json::to_string_pretty(&body).unwrap()
        );
        self.seen.push(format!("{method} {path} {status}"));
        body
    }
}

fn envelope(ws: &Ws, command: &str, expected: &[&str]) -> String {
    json!({
        "task": "openapi",
        "command": command,
        "working_dir": ws.dir,
        "intent": {
            "summary": "schema check",
            "mode": "mutating",
            "expected_writes": expected,
            "forbidden_paths": ["secrets/"],
            "reviewer_note": "a note",
        },
        "limits": {"timeout_s": 30},
        "env": {"LANG": "C.UTF-8"},
        "live": {"mode": "apply"},
    })
    .to_string()
}

fn settled(d: &Daemon, c: &mut Checker, id: &str) -> Value {
    for _ in 0..60 {
        let r = c.check(
            ("GET", "/v1/runs/{id}"),
            d.curl(Who::User, "GET", &format!("/v1/runs/{id}?wait=30"), None),
        );
        if !matches!(r["state"].as_str(), Some("queued" | "running")) {
            return r;
        }
    }
    panic!("run {id} never settled");
}

#[test]
fn every_route_answers_as_the_openapi_document_says() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&["--max-running", "1", "--host-prompt-approvals"]);
    let mut c = Checker {
        doc: document(),
        seen: Vec::new(),
    };
    let ws = user_workspace();
    ws.write("notes.txt", "one\n");
    ws.chown_all();

    c.check(
        ("GET", "/v1/health"),
        d.curl(Who::User, "GET", "/v1/health", None),
    );

    // Submit without waiting (202), then the record as it settles (with
    // `?wait`): a clean run that writes what it declared.
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs",
        Some(&envelope(
            &ws,
            "echo two >> notes.txt; echo new > out.txt",
            &["notes.txt", "out.txt"],
        )),
    );
    let sub = c.check(("POST", "/v1/runs"), (st, v));
    assert_eq!(st, 202, "{sub}");
    let clean = sub["run_id"].as_str().unwrap().to_string();
    let clean_rec = settled(&d, &mut c, &clean);
    assert_eq!(clean_rec["verdict"]["decision"], "promote", "{clean_rec}");

    // Submit and wait (200): a run with a remote effect (a stubbed
    // `curl -X POST`) needs approval.
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs?wait=true",
        Some(&envelope(
            &ws,
            "echo x > w.txt; curl -sS -X POST https://example.com/w",
            &["w.txt"],
        )),
    );
    assert_eq!(st, 200, "{v}");
    let waiting = c.check(("POST", "/v1/runs"), (st, v));
    let waiting_id = waiting["run_id"].as_str().unwrap().to_string();

    // A run with a network allowlist: the egress proxy refuses a name
    // outside it and the DNS responder records a lookup (`rehearsal.egress`).
    let mut net: Value = serde_json::from_str(&envelope(
        &ws,
        "getent hosts secret.attacker.example; curl -sS http://other.example/; true",
        &[],
    ))
    .unwrap();
    net["intent"]["network"] = json!({"allow": ["pkgs.example:8080", "*.mirror.example"]});
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs?wait=true",
        Some(&net.to_string()),
    );
    assert_eq!(st, 200, "{v}");
    let net_rec = c.check(("POST", "/v1/runs"), (st, v));
    let egress = net_rec["rehearsal"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        egress.iter().any(|e| e["how"] == "dns") && egress.iter().any(|e| e["how"] == "proxy"),
        "{net_rec}"
    );

    // Three more awaiting approval: one to approve, one to reject, one
    // its submitter withdraws.
    let mut awaiting = Vec::new();
    for f in ["a.txt", "b.txt", "c.txt"] {
        let (st, v) = d.curl(
            Who::User,
            "POST",
            "/v1/runs?wait=true",
            Some(&envelope(
                &ws,
                &format!("echo x > {f}; curl -sS -X POST https://example.com/{f}"),
                &[f],
            )),
        );
        assert_eq!(st, 200, "{v}");
        let r = c.check(("POST", "/v1/runs"), (st, v));
        assert_eq!(r["state"], "awaiting_approval", "{r}");
        awaiting.push(r["run_id"].as_str().unwrap().to_string());
    }

    // A blocked run (a forbidden path) waits too, marked override_required.
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs?wait=true",
        Some(&envelope(
            &ws,
            "mkdir -p secrets; echo s > secrets/k",
            &["out.txt"],
        )),
    );
    assert_eq!(st, 200, "{v}");
    let blocked = c.check(("POST", "/v1/runs"), (st, v));
    assert_eq!(blocked["verdict"]["decision"], "blocked", "{blocked}");
    assert_eq!(blocked["state"], "awaiting_approval", "{blocked}");
    assert_eq!(blocked["override_required"], true, "{blocked}");

    // The event stream, while a run goes through its states: each `state`
    // event's data is a RunEvent.
    let stream = std::thread::scope(|s| {
        let t = s.spawn(|| d.curl_stream(Who::User, "/v1/events", 4));
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (st, v) = d.curl(
            Who::User,
            "POST",
            "/v1/runs?wait=true",
            Some(&envelope(&ws, "echo e > e.txt", &["e.txt"])),
        );
        assert_eq!(st, 200, "{v}");
        t.join().unwrap()
    });
    assert_eq!(stream.0, 200, "{}", stream.1);
    let event_schema = json!({
        "$ref": "#/components/schemas/RunEvent",
        "components": c.doc["components"].clone(),
    });
    let validator = jsonschema::draft202012::options()
        .build(&event_schema)
        .unwrap();
    let data: Vec<Value> = stream
        .1
        .split("\n\n")
        .filter(|e| e.lines().any(|l| l == "event: state"))
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data:")))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    assert!(data.len() >= 2, "too few state events: {}", stream.1);
    for ev in &data {
        let errors: Vec<String> = validator.iter_errors(ev).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "event data {ev}: {errors:?}");
    }
    c.seen.push("GET /v1/events 200".into());

    // A blocked run (a forbidden path).
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs?wait=true",
        Some(&envelope(
            &ws,
            "mkdir -p secrets && echo k > secrets/key",
            &["out.txt"],
        )),
    );
    assert_eq!(st, 200, "{v}");
    c.check(("POST", "/v1/runs"), (st, v));

    // A failed run (cancelled while queued or running).
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs",
        Some(&envelope(&ws, "sleep 20", &[])),
    );
    let slow = c.check(("POST", "/v1/runs"), (st, v))["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, v) = d.curl(
        Who::User,
        "POST",
        "/v1/runs",
        Some(&envelope(&ws, "sleep 20", &[])),
    );
    let queued = c.check(("POST", "/v1/runs"), (st, v))["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    for id in [&queued, &slow] {
        let (st, v) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/cancel"), None);
        assert_eq!(st, 200, "{v}");
        let r = c.check(("POST", "/v1/runs/{id}/cancel"), (st, v));
        assert_eq!(r["state"], "failed", "{r}");
    }
    // Cancelling again is a conflict.
    let got = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{queued}/cancel"),
        None,
    );
    assert_eq!(got.0, 409, "{}", got.1);
    c.check(("POST", "/v1/runs/{id}/cancel"), got);

    // List, all and filtered.
    for q in ["", "?state=awaiting_approval", "?state=failed&limit=5"] {
        let (st, v) = d.curl(Who::User, "GET", &format!("/v1/runs{q}"), None);
        assert_eq!(st, 200, "{q}: {v}");
        c.check(("GET", "/v1/runs"), (st, v));
    }
    let (st, v) = d.curl(Who::Root, "GET", "/v1/runs", None);
    assert_eq!(st, 200, "{v}");
    c.check(("GET", "/v1/runs"), (st, v));
    // The review queue comes oldest first.
    let (_, v) = d.curl(Who::Root, "GET", "/v1/runs?state=awaiting_approval", None);
    let queue: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["created_at"].as_str().unwrap())
        .collect();
    assert!(queue.len() >= 5, "{v}");
    assert!(queue.windows(2).all(|w| w[0] <= w[1]), "{queue:?}");

    // Show, and a long poll that times out on a settled run.
    for q in ["", "?wait=1"] {
        let (st, v) = d.curl(Who::User, "GET", &format!("/v1/runs/{clean}{q}"), None);
        assert_eq!(st, 200, "{v}");
        c.check(("GET", "/v1/runs/{id}"), (st, v));
    }

    // Diff, and a comparison with another run.
    let (st, v) = d.curl(Who::User, "GET", &format!("/v1/runs/{clean}/diff"), None);
    assert_eq!(st, 200, "{v}");
    c.check(("GET", "/v1/runs/{id}/diff"), (st, v));
    let (st, v) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/runs/{clean}/diff?against={waiting_id}"),
        None,
    );
    assert_eq!(st, 200, "{v}");
    let cmp = c.check(("GET", "/v1/runs/{id}/diff"), (st, v));
    assert!(cmp.get("run_a").is_some(), "{cmp}");

    // The submitter may not approve its own run (403); a reviewer may.
    let got = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{}/approve", awaiting[0]),
        Some(r#"{"note":"mine"}"#),
    );
    assert_eq!(got.0, 403, "{}", got.1);
    c.check(("POST", "/v1/runs/{id}/approve"), got);
    let (st, v) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{}/approve", awaiting[0]),
        Some(r#"{"note":"looks fine"}"#),
    );
    assert_eq!(st, 200, "{v}");
    c.check(("POST", "/v1/runs/{id}/approve"), (st, v));
    // Approving a run that needs no approval is a conflict.
    let got = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{clean}/approve"),
        Some("{}"),
    );
    assert_eq!(got.0, 409, "{}", got.1);
    c.check(("POST", "/v1/runs/{id}/approve"), got);

    let (st, v) = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{}/reject", awaiting[1]),
        Some(r#"{"note":"no"}"#),
    );
    assert_eq!(st, 200, "{v}");
    let rejected = c.check(("POST", "/v1/runs/{id}/reject"), (st, v));
    assert_eq!(rejected["rejected_because"], "reviewer", "{rejected}");

    // Only the submitter withdraws.
    let got = d.curl(
        Who::Root,
        "POST",
        &format!("/v1/runs/{}/withdraw", awaiting[2]),
        Some("{}"),
    );
    assert_eq!(got.0, 403, "{}", got.1);
    c.check(("POST", "/v1/runs/{id}/withdraw"), got);
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{}/withdraw", awaiting[2]),
        Some(r#"{"note":"not needed"}"#),
    );
    assert_eq!(st, 200, "{v}");
    let withdrawn = c.check(("POST", "/v1/runs/{id}/withdraw"), (st, v));
    assert_eq!(withdrawn["rejected_because"], "withdrawn", "{withdrawn}");
    assert_eq!(
        withdrawn["approvals"][0]["action"], "withdraw",
        "{withdrawn}"
    );
    let got = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{}/withdraw", awaiting[2]),
        None,
    );
    assert_eq!(got.0, 409, "{}", got.1);
    c.check(("POST", "/v1/runs/{id}/withdraw"), got);

    // Replay of the clean run, waiting for its record.
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{clean}/replay?wait=true"),
        Some(r#"{"novel":"stub"}"#),
    );
    assert_eq!(st, 200, "{v}");
    c.check(("POST", "/v1/runs/{id}/replay"), (st, v));
    let (st, v) = d.curl(Who::User, "POST", &format!("/v1/runs/{clean}/replay"), None);
    assert_eq!(st, 202, "{v}");
    let replayed = c.check(("POST", "/v1/runs/{id}/replay"), (st, v));
    settled(&d, &mut c, replayed["run_id"].as_str().unwrap());

    // A host-prompt grant for the run awaiting approval, consumed by its
    // promotion.
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{waiting_id}/host-prompt"),
        Some(r#"{"host":"claude-code"}"#),
    );
    assert_eq!(st, 200, "{v}");
    let grant = c.check(("POST", "/v1/runs/{id}/host-prompt"), (st, v));
    let got = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{waiting_id}/host-prompt"),
        Some(r#"{"host":"claude-code"}"#),
    );
    assert_eq!(got.0, 409, "{}", got.1);
    c.check(("POST", "/v1/runs/{id}/host-prompt"), got);
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{waiting_id}/promote"),
        Some(&json!({"host_prompt_token": grant["token"], "local_only": true}).to_string()),
    );
    assert_eq!(st, 200, "{v}");
    c.check(("POST", "/v1/runs/{id}/promote"), (st, v));

    // The approved run's stubbed call is not made live: a plain apply is
    // refused, naming it.
    let got = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{}/promote", awaiting[0]),
        None,
    );
    assert_eq!(got.0, 409, "{}", got.1);
    assert!(
        got.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--local-only"),
        "{}",
        got.1
    );
    c.check(("POST", "/v1/runs/{id}/promote"), got);

    // Promote the clean run and the approved one (saying its call is not
    // made); a second promotion is 409.
    let mut receipts = Vec::new();
    for (id, body) in [
        (&clean, None),
        (&awaiting[0], Some(r#"{"local_only":true}"#)),
    ] {
        let (st, v) = d.curl(Who::User, "POST", &format!("/v1/runs/{id}/promote"), body);
        assert_eq!(st, 200, "{v}");
        let r = c.check(("POST", "/v1/runs/{id}/promote"), (st, v));
        assert_eq!(r["state"], "promoted", "{r}");
        receipts.push(r["receipt"]["receipt_id"].as_str().unwrap().to_string());
    }
    let got = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{clean}/promote"),
        None,
    );
    assert_eq!(got.0, 409, "{}", got.1);
    c.check(("POST", "/v1/runs/{id}/promote"), got);

    // Receipts, a rollback, and the receipt rolled back.
    let (st, v) = d.curl(
        Who::User,
        "GET",
        &format!("/v1/receipts/{}", receipts[0]),
        None,
    );
    assert_eq!(st, 200, "{v}");
    c.check(("GET", "/v1/receipts/{id}"), (st, v));
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/receipts/{}/rollback", receipts[1]),
        None,
    );
    assert_eq!(st, 200, "{v}");
    let rolled = c.check(("POST", "/v1/receipts/{id}/rollback"), (st, v));
    assert!(rolled.get("rolled_back").is_some(), "{rolled}");
    let got = d.curl(
        Who::User,
        "POST",
        &format!("/v1/receipts/{}/rollback", receipts[1]),
        None,
    );
    assert_eq!(got.0, 409, "{}", got.1);
    c.check(("POST", "/v1/receipts/{id}/rollback"), got);
    let (st, v) = d.curl(Who::User, "GET", &format!("/v1/runs/{}", awaiting[0]), None);
    assert_eq!(st, 200, "{v}");
    c.check(("GET", "/v1/runs/{id}"), (st, v));

    let (st, v) = d.curl(Who::User, "GET", "/v1/journal/verify", None);
    assert_eq!(st, 200, "{v}");
    let report = c.check(("GET", "/v1/journal/verify"), (st, v));
    assert_eq!(report["ok"], true, "{report}");

    // Errors.
    let errors: [(&str, &str, &str, Option<&str>, u16); 11] = [
        ("GET", "/v1/health", "/v1/health?x=1", None, 400),
        (
            "GET",
            "/v1/journal/verify",
            "/v1/journal/verify?x=1",
            None,
            400,
        ),
        ("GET", "/v1/events", "/v1/events?x=1", None, 400),
        (
            "POST",
            "/v1/runs",
            "/v1/runs",
            Some(r#"{"command":"true","bogus":1}"#),
            400,
        ),
        ("POST", "/v1/runs", "/v1/runs", Some("not json"), 400),
        ("GET", "/v1/runs", "/v1/runs?colour=blue", None, 400),
        ("GET", "/v1/runs/{id}", "/v1/runs/nope", None, 400),
        ("GET", "/v1/runs/{id}", "/v1/runs/r0-0", None, 404),
        ("GET", "/v1/runs/{id}/diff", "/v1/runs/r0-0/diff", None, 404),
        ("GET", "/v1/receipts/{id}", "/v1/receipts/p0-0", None, 404),
        (
            "POST",
            "/v1/runs/{id}/reject",
            "/v1/runs/r0-0/reject",
            Some("{}"),
            404,
        ),
    ];
    for (method, route, path, body, want) in errors {
        let got = d.curl(Who::User, method, path, body);
        assert_eq!(got.0, want, "{method} {path}: {}", got.1);
        c.check((method, route), got);
    }
    eprintln!("validated:\n  {}", c.seen.join("\n  "));

    // Every documented route with a JSON answer was exercised, with an
    // answer of its success status.
    let doc = c.doc.clone();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let Some(responses) = op["responses"].as_object() else {
                continue;
            };
            for (status, resp) in responses {
                let resp = resolve(&doc, resp);
                let json = resp["content"].get("application/json").is_some();
                if json && status.starts_with('2') {
                    let want = format!("{} {path} {status}", method.to_uppercase());
                    assert!(
                        c.seen.contains(&want),
                        "{want} is documented but this test never saw it"
                    );
                }
            }
        }
    }
}
