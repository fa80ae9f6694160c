//! A rehearsal's sandbox is built while the run's `run_submitted` journal
//! entry is synced, and the command is released only once that entry is on
//! disk: nothing of a command runs that the journal does not hold. Judged
//! from the host, in-process and through a daemon (a client that waits for
//! the verdict), as root and as the test user: with the journal's write stalled, the command starts only after
//! the stall; with it failing, the command never starts (no process of it
//! ever shows on the host), the run is undone and the error names the
//! journal.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::daemon::{Daemon, processes_with};
use common::*;

/// Where a run is submitted: in-process (the fault injected into the
/// CLI's environment) or to a daemon started with it.
struct Door(Option<Daemon>);

impl Door {
    /// In-process, and a daemon when the tests run as root.
    fn all(env: (&str, &str)) -> Vec<Door> {
        let mut d = vec![Door(None)];
        if require_root() {
            d.push(Door(Some(Daemon::start_env(&[], &[env]))));
        }
        d
    }

    fn name(&self) -> &'static str {
        if self.0.is_some() {
            "daemon"
        } else {
            "in-process"
        }
    }

    /// `dryrun execute --json --command CMD` in `ws`, as `ws`'s identity.
    fn execute(&self, ws: &Ws, cmd: &str, env: (&str, &str)) -> std::process::Command {
        let mut c = match &self.0 {
            None => {
                let mut c = ws.command();
                c.env(env.0, env.1);
                c
            }
            Some(d) if ws.who == Who::User => d.cli_user(),
            Some(d) => d.cli_root(),
        };
        c.current_dir(&ws.dir)
            .args(["execute", "--json", "--command", cmd]);
        c
    }

    /// The state directory the run lands in.
    fn state(&self, ws: &Ws) -> std::path::PathBuf {
        self.0
            .as_ref()
            .map_or(ws.state.clone(), |d| d.state.clone())
    }
}

/// The command's start, in ns since the epoch, as it printed it.
fn started_at(r: &Run) -> u128 {
    r.out()
        .lines()
        .find_map(|l| l.strip_prefix("started "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the command printed no start: {r:?}"))
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn the_command_starts_only_once_its_submission_is_on_disk() {
    const STALL_MS: u128 = 1_500;
    let stall = STALL_MS.to_string();
    let env = ("DRYRUN_FAULT_JOURNAL_STALL_MS", stall.as_str());
    for door in Door::all(env) {
        for who in identities() {
            let ws = Ws::new(who);
            let name = door.name();
            let t0 = now_ns();
            let out = door
                .execute(&ws, "echo started $(date +%s%N)", env)
                .output()
                .unwrap();
            let r = to_run(out);
            assert_eq!(r.decision(), "promote", "{name} {who:?}: {r:?}");
            // The submission's batch stalls before its second half and its
            // sync: a command released before that would start at once.
            let waited_ms = (started_at(&r) - t0) / 1_000_000;
            assert!(
                waited_ms >= STALL_MS,
                "{name} {who:?}: the command started {waited_ms} ms after the submission began, before its journal entry was on disk ({STALL_MS} ms stall)"
            );
            let state = door.state(&ws);
            let journal = std::fs::read_to_string(state.join("journal.jsonl")).unwrap();
            let id = run_id(&r);
            let at = |kind: &str| {
                journal
                    .lines()
                    .position(|l| l.contains(&format!("\"{kind}\"")) && l.contains(&id))
            };
            assert!(
                at("run_submitted").is_some() && at("run_submitted") < at("verdict"),
                "{name} {who:?}: the journal holds the submission before the verdict:\n{journal}"
            );
        }
    }
}

#[test]
fn a_submission_that_cannot_be_journaled_never_starts_its_command() {
    let env = ("DRYRUN_FAULT_JOURNAL_FAIL", "run_submitted");
    for door in Door::all(env) {
        for who in identities() {
            let ws = Ws::new(who);
            let name = door.name();
            let marker = format!("dryrun-release-{}", random_hex());
            let started = Instant::now();
            // Quoted in two halves: the CLI's own command line does not
            // hold the marker, only the released command's would.
            let (a, b) = marker.split_at(8);
            let cmd = format!("exec -a '{a}''{b}' sleep 5");
            let mut child = door
                .execute(&ws, &cmd, env)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // Watched from the host until the CLI ends: a released command
            // would show as a process named by the marker for five seconds.
            let mut seen = Vec::new();
            while child.try_wait().unwrap().is_none() {
                seen.extend(processes_with(&marker));
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "{name} {who:?}: the CLI did not end"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let out = child.wait_with_output().unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(seen.is_empty(), "{name} {who:?}: the command ran: {seen:?}");
            assert_ne!(out.status.code(), Some(0), "{name} {who:?}: {said}");
            assert!(
                said.contains("journal") && said.contains("DRYRUN_FAULT_JOURNAL_FAIL"),
                "{name} {who:?}: the error names the journal's failure: {said}"
            );
            // Undone as a failed submission is: no run directory, no marker.
            let state = door.state(&ws);
            let runs: Vec<_> = std::fs::read_dir(state.join("runs"))
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            assert!(runs.is_empty(), "{name} {who:?}: runs left: {runs:?}");
            let inflight: Vec<_> = std::fs::read_dir(state.join("inflight"))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with('r'))
                        .collect()
                })
                .unwrap_or_default();
            assert!(
                inflight.is_empty(),
                "{name} {who:?}: markers left: {inflight:?}"
            );
        }
    }
}
