//! A fleet for the tests: a private PostgreSQL cluster (`pg.rs`) with two
//! host roles, two reviewers and an admin, and daemons that are its hosts.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::daemon::*;
use super::pg::*;
use super::*;
use serde_json::Value;

/// The people of every host's fleet config: the test user's runs are
/// alice's, whose reviewer role is `alice`; `bob` is another reviewer.
pub const PEOPLE: &str =
    "  alice: {roles: [alice], accounts: [dryrun-test]}\n  bob: {roles: [bob]}\n";

pub struct Fleet {
    pub pg: Pg,
    pub cfg_dir: tempfile::TempDir,
}

impl Fleet {
    pub fn new() -> Fleet {
        let pg = Pg::start(None);
        for h in ["host_a", "host_b"] {
            pg.add_role(h, "dryrun_host");
        }
        for r in ["alice", "bob"] {
            pg.add_role(r, "dryrun_reviewer");
        }
        pg.add_role("admin", "dryrun_admin");
        let cfg_dir = tempfile::tempdir().unwrap();
        Fleet { pg, cfg_dir }
    }

    /// A daemon that is host `role` of this fleet.
    pub fn host(&self, role: &str, extra: &[&str]) -> Daemon {
        self.host_env(role, extra, &[])
    }

    /// The daemon's arguments that make it host `role`.
    pub fn host_args(&self, role: &str) -> Vec<String> {
        let cfg = host_config(self.cfg_dir.path(), role, PEOPLE);
        let url = self.pg.url_no_password(role, "127.0.0.1");
        vec![
            "--fleet".into(),
            url,
            "--fleet-config".into(),
            cfg.to_str().unwrap().into(),
        ]
    }

    /// [`Fleet::host`] with environment variables.
    pub fn host_env(&self, role: &str, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let own = self.host_args(role);
        let mut args: Vec<&str> = own.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        Daemon::start_env(&args, env)
    }

    /// `dryrun ARGS` as a command-line client of the fleet (no daemon).
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("DRYRUN_STATE_DIR", "/nonexistent-dryrun-state")
            .args(args)
            .output()
            .unwrap()
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.cli(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
    }
}

pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Wait (at most a minute: a bound, not a measurement) for `f` to hold.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A run of the test user that waits for a person (a call a stub answered).
pub fn waiting_run(d: &Daemon, ws: &Ws) -> String {
    waiting_run_n(d, ws, 4)
}

/// [`waiting_run`] with its own command (`gh pr merge N`): a run of the
/// same command in the same workspace supersedes the one before it.
pub fn waiting_run_n(d: &Daemon, ws: &Ws, n: u32) -> String {
    let r = submit_user(
        d,
        ws,
        &format!("gh pr merge {n} && echo x > a{n}.txt"),
        &["--expect-write", "a*.txt"],
    );
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    run_id(&r)
}

/// The journal's records of `kind` for `run`.
pub fn journaled(state: &Path, kind: &str, run: &str) -> Vec<Value> {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["body"].clone())
        .filter(|b| b["kind"] == kind && b["run_id"] == run)
        .collect()
}

pub fn record(d: &Daemon, run: &str) -> Value {
    let p = d.state.join("runs").join(run).join("record.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}
