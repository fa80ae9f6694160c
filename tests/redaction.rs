//! Logs are a second leak path: what a rehearsal prints, and what it hands
//! to stubbed tools as arguments or stdin, is scrubbed of the run's given
//! variable values and of credential shapes before anything is kept,
//! journaled or returned. Real-shaped canaries (fake, but shaped like the
//! real thing), printed to stdout and stderr and passed to `gh` (stubbed by
//! the default policy) as argv and stdin; asserted host-side on every copy:
//! `--json`, `record.json`, the journal, everything else in the state
//! directory, `dryrun show`, and the daemon's answers.

mod common;

use common::daemon::*;
use common::*;
use std::path::Path;
use std::process::Command;

const AKIA: &str = "AKIAQ4XJ7RZ2MB5KTW3N";
const GHP: &str = "ghp_R8kQ2vX9mN4pL7tY1wZ3aB6cD0eF5gH8jK2m";
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJkcnlydW4tY2FuYXJ5IiwiaWF0IjoxNzAwMDAwMDAwfQ.k3Jx9Qd2LmVb7Wn4Rt8Yp1Zs6Hc0Fg5Ke3Ua9Xo2Mi4";
const ENV_NAME: &str = "DEPLOY_TOKEN";
const ENV_VALUE: &str = "envcanary-Qm7x2Lp9wZ";
const FIXED_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIFq3mV8xR2tN7cL0pW4kJ9sH1gD6fB5aE3yU8iO2zQ7v\n-----END PRIVATE KEY-----\n";

/// Benign output that must come through untouched.
const BENIGN: &[&str] = &[
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "request 123e4567-e89b-12d3-a456-426614174000",
    "wrote /usr/share/doc/bash/README and ./blog/2024-01-01-hello.md",
    "42 1700000000 3.14159 -17",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
];

const EMIT: &str = r#"#!/bin/bash
cat data/canaries.txt
cat data/canaries.txt >&2
echo "deploying with $DEPLOY_TOKEN"
echo "deploying with $DEPLOY_TOKEN" >&2
cat data/benign.txt
gh secret set DEPLOY_KEY --body "$(cat data/ghp)" >/dev/null
gh pr comment 12 --body "$(cat data/akia) and $DEPLOY_TOKEN" >/dev/null
gh pr comment 13 --body-file - < data/jwt >/dev/null
gh pr comment 14 --body-file - < data/canaries.txt >/dev/null
exit 0
"#;

/// A PEM private key: a fresh one from openssl when it is there.
fn pem() -> String {
    let out = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519"])
        .output();
    match out {
        Ok(o) if o.status.success() && o.stdout.starts_with(b"-----BEGIN PRIVATE KEY-----") => {
            String::from_utf8(o.stdout).unwrap()
        }
        _ => FIXED_PEM.to_string(),
    }
}

/// The base64 body of the key (the part that is secret).
fn pem_body(pem: &str) -> String {
    pem.lines().filter(|l| !l.starts_with("-----")).collect()
}

struct Canaries {
    pem: String,
}

impl Canaries {
    fn all(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws", AKIA.to_string()),
            ("ghp", GHP.to_string()),
            ("jwt", JWT.to_string()),
            ("env", ENV_VALUE.to_string()),
            ("pem", pem_body(&self.pem)),
        ]
    }

    /// No canary in `bytes` (named `what` in the failure).
    fn assert_absent(&self, what: &str, bytes: &[u8]) {
        for (name, c) in self.all() {
            assert!(
                !bytes.windows(c.len()).any(|w| w == c.as_bytes()),
                "the {name} canary leaked into {what}"
            );
        }
    }
}

fn setup(ws: &Ws) -> Canaries {
    let pem = pem();
    let canaries = format!("aws_access_key_id = {AKIA}\ntoken: {GHP}\n{pem}jwt {JWT}\n");
    ws.write("data/canaries.txt", &canaries);
    ws.write("data/ghp", GHP);
    ws.write("data/akia", AKIA);
    ws.write("data/jwt", JWT);
    ws.write("data/benign.txt", &(BENIGN.join("\n") + "\n"));
    write_script(ws, "emit.sh", EMIT);
    ws.chown_all();
    Canaries { pem }
}

fn envelope(dir: &Path) -> String {
    serde_json::json!({
        "command": "./emit.sh",
        "working_dir": dir,
        "intent": {"summary": "print things", "mode": "read_only"},
        "env": {ENV_NAME: ENV_VALUE, "LANG": "C.UTF-8"},
    })
    .to_string()
}

/// Every file under `dir` but the submitted envelope (the run's input,
/// kept for the live lane and replay), read as root.
fn assert_state_clean(c: &Canaries, dir: &Path) {
    let mut seen = 0;
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if !e.file_type().is_file() || e.file_name() == "envelope.json" {
            continue;
        }
        let bytes = std::fs::read(e.path()).unwrap();
        c.assert_absent(&e.path().display().to_string(), &bytes);
        seen += 1;
    }
    assert!(
        seen >= 2,
        "the state directory holds a record and a journal"
    );
}

fn assert_record(c: &Canaries, v: &Value, what: &str) {
    c.assert_absent(what, v.to_string().as_bytes());
    let reh = &v["rehearsal"];
    let out = reh["stdout"].as_str().unwrap_or_default();
    let err = reh["stderr"].as_str().unwrap_or_default();
    for b in BENIGN {
        assert!(out.contains(b), "{what}: benign {b:?} was changed: {out}");
    }
    for kind in ["aws_access_key", "github_token", "private_key", "jwt"] {
        let m = format!("[redacted:{kind}]");
        assert!(out.contains(&m) && err.contains(&m), "{what}: {m}: {out}");
    }
    assert!(
        out.contains(&format!("deploying with [redacted:env:{ENV_NAME}]")),
        "{what}: {out}"
    );
    // stdout 5 + stderr 5 (4 shapes and the variable each), argv 3 (the
    // forge token, the access key and the variable), stdin heads 5 (the JWT,
    // then the four shapes of the canaries file).
    let r = &reh["redactions"];
    assert_eq!(r["count"], 18, "{what}: {r}");
    assert_eq!(r["kinds"]["aws_access_key"], 4, "{r}");
    assert_eq!(r["kinds"]["github_token"], 4, "{r}");
    assert_eq!(r["kinds"]["private_key"], 3, "{r}");
    assert_eq!(r["kinds"]["jwt"], 4, "{r}");
    assert_eq!(r["kinds"][format!("env:{ENV_NAME}")], 3, "{r}");
    let a = reh["would_be_actions"].as_array().unwrap();
    assert_eq!(a.len(), 4, "{what}: {a:?}");
    assert_eq!(
        strings(&a[0]["argv"]),
        [
            "gh",
            "secret",
            "set",
            "DEPLOY_KEY",
            "--body",
            "[redacted:github_token]"
        ]
    );
    assert_eq!(
        strings(&a[1]["argv"])[5],
        format!("[redacted:aws_access_key] and [redacted:env:{ENV_NAME}]")
    );
    assert_eq!(a[2]["stdin"]["head"], "[redacted:jwt]");
    assert!(a[2]["stdin"]["bytes"].as_u64() == Some(JWT.len() as u64));
}

#[test]
fn canaries_never_reach_the_record_the_journal_or_show() {
    for who in identities() {
        let ws = Ws::new(who);
        let c = setup(&ws);
        let env = ws.root.path().join("envelope.json");
        std::fs::write(&env, envelope(&ws.dir)).unwrap();
        let r = ws.execute(&["--file", env.to_str().unwrap()]);
        assert_ran(who, &r);
        c.assert_absent("the --json output", r.stdout.as_bytes());
        c.assert_absent("the CLI's stderr", r.stderr.as_bytes());
        assert_record(&c, &r.json, "--json");
        let id = r.json["run_id"].as_str().unwrap();

        let rec = std::fs::read(ws.state.join("runs").join(id).join("record.json")).unwrap();
        let rec: Value = serde_json::from_slice(&rec).unwrap();
        assert_record(&c, &rec, "record.json");
        assert_state_clean(&c, &ws.state);

        let mut show = ws.command();
        let out = show.args(["show", id]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        c.assert_absent("dryrun show", &out.stdout);
        c.assert_absent("dryrun show's stderr", &out.stderr);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("[redacted:"),
            "show prints the redacted output"
        );
        let mut show = ws.command();
        let out = show.args(["show", id, "--json"]).output().unwrap();
        c.assert_absent("dryrun show --json", &out.stdout);
    }
}

#[test]
fn the_same_output_gives_the_same_redacted_evidence_hash() {
    let who = identities()[0];
    let ws = Ws::new(who);
    let _c = setup(&ws);
    let env = ws.root.path().join("envelope.json");
    std::fs::write(&env, envelope(&ws.dir)).unwrap();
    let a = ws.execute(&["--file", env.to_str().unwrap()]);
    let b = ws.execute(&["--file", env.to_str().unwrap()]);
    assert_ran(who, &a);
    let h = |r: &Run| {
        r.json["rehearsal"]["evidence_hash"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(h(&a), h(&b));
    assert!(!h(&a).is_empty());
}

#[test]
fn the_daemon_answers_and_journals_only_redacted_text() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let c = setup(&ws);
    let (code, rec) = d.curl(
        Who::User,
        "POST",
        "/v1/runs?wait=true",
        Some(&envelope(&ws.dir)),
    );
    assert_eq!(code, 200, "{rec}");
    assert_record(&c, &rec, "the daemon's POST answer");
    let id = rec["run_id"].as_str().unwrap();
    let (code, got) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(code, 200, "{got}");
    assert_record(&c, &got, "GET /v1/runs/{id}");
    let (_, diff) = d.curl(Who::User, "GET", &format!("/v1/runs/{id}/diff"), None);
    c.assert_absent("GET /v1/runs/{id}/diff", diff.to_string().as_bytes());
    let (_, list) = d.curl(Who::Root, "GET", "/v1/runs", None);
    c.assert_absent("GET /v1/runs", list.to_string().as_bytes());
    let out = d.cli_user().args(["show", id]).output().unwrap();
    c.assert_absent("dryrun show through the daemon", &out.stdout);
    assert!(!d.journal().is_empty());
    assert_state_clean(&c, &d.state);
    c.assert_absent("the daemon's log", d.log_text().as_bytes());
}
