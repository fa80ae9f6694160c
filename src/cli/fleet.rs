//! The `--fleet` commands: the fleet's runs and review queue, decisions on
//! any host's runs, `journal verify --fleet`, and `dryrun fleet` (schema,
//! policy, hosts). Each connects to the fleet store as the role its
//! connection string names (its password there or in `PGPASSWORD`); the
//! store's own authentication is who the reviewer is.

use std::time::Duration;

use serde_json::Value;

use super::args::{FleetCmd, FleetDecideArgs, FleetPolicyCmd};
use super::screen::{Shown, say, say_err};
use super::{EXIT_INTERNAL, EXIT_JOURNAL_BROKEN, EXIT_REFUSED, GlobalOpts, print_json};
use crate::engine::summary::ReviewSummary;
use crate::fleet::{FleetError, FleetSpec, db, query};

/// Run `f` with a connection to the store; errors printed, exit code back.
fn with_store<T>(
    url: &str,
    f: impl AsyncFnOnce(&mut tokio_postgres::Client) -> Result<T, FleetError>,
) -> Result<T, i32> {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return Err(super::output::error(
                "internal",
                &e.to_string(),
                EXIT_INTERNAL,
            ));
        }
    };
    rt.block_on(async {
        let mut conn = db::connect(&FleetSpec::client(url)).await.map_err(fail)?;
        db::check_schema(&conn.client).await.map_err(fail)?;
        f(&mut conn.client).await.map_err(fail)
    })
}

fn fail(e: FleetError) -> i32 {
    let (code, exit) = match &e {
        FleetError::Db(_) => ("refused", EXIT_REFUSED),
        _ => ("fleet", EXIT_INTERNAL),
    };
    super::output::error(code, &e.to_string(), exit)
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `dryrun runs --fleet URL`.
pub(super) fn runs(
    url: &str,
    awaiting: bool,
    state: Option<&str>,
    limit: Option<usize>,
    json: bool,
) -> i32 {
    let state = if awaiting {
        Some("awaiting_approval")
    } else {
        state
    };
    if let Some(s) = state
        && crate::record::RunState::parse(s).is_none()
    {
        return super::usage_error(format!("--state {s:?} is not a run state"));
    }
    let limit = limit.unwrap_or(1000) as i64;
    let runs = match with_store(url, async |c| query::runs(c, state, limit).await) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if json {
        print_json(&runs);
        return 0;
    }
    if runs.is_empty() {
        say!(
            "no runs{}",
            if awaiting {
                " waiting for a person"
            } else {
                ""
            }
        );
    }
    for r in &runs {
        say!(
            "{}  {}  {:<18} {:<15} {}  {}",
            Shown::raw(text(r, "run_id")),
            Shown::raw(text(r, "host")),
            Shown::raw(text(r, "state")),
            Shown::raw(text(r, "decision")),
            Shown::raw(text(r, "submitter_person")),
            Shown::raw(text(r, "command"))
        );
    }
    0
}

/// `dryrun review --fleet URL`: the queue of every host with evidence.
pub(super) fn review(url: &str, json: bool) -> i32 {
    let q = match with_store(url, async |c| query::queue(c).await) {
        Ok(q) => q,
        Err(code) => return code,
    };
    if json {
        print_json(&q);
        return 0;
    }
    if q.is_empty() {
        say!("no run of the fleet waits for a person");
    }
    for r in &q {
        print_waiting(r);
    }
    0
}

fn print_waiting(r: &Value) {
    say!(
        "── {} on host {} · waiting since {}",
        Shown::raw(text(r, "run_id")),
        Shown::raw(text(r, "host")),
        Shown::raw(text(r, "waiting_since"))
    );
    say!(
        "submitted by {} (account {})",
        Shown::raw(text(r, "submitter_person")),
        Shown::raw(text(r, "submitter_name"))
    );
    match r
        .get("summary")
        .cloned()
        .map(serde_json::from_value::<ReviewSummary>)
    {
        Some(Ok(s)) => {
            for l in super::render::review_summary_lines(&s) {
                say!("{l}");
            }
        }
        _ => say!("(no evidence published)"),
    }
    if let Some(egress) = r
        .get("egress")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())
    {
        say!("network:");
        for e in egress {
            say!("  {}", Shown::raw(&e.to_string()));
        }
    }
    if let Some(diffs) = r.get("diffs").and_then(Value::as_array) {
        for d in diffs {
            say!(
                "diff {} ({})",
                Shown::raw(text(d, "path")),
                Shown::raw(text(d, "kind"))
            );
            match d.get("diff").and_then(Value::as_str) {
                Some(t) => {
                    for l in t.lines() {
                        say!("  {}", Shown::raw(l));
                    }
                }
                None => say!("  (not shown: too large, or not text)"),
            }
        }
    }
    say!("evidence {}", Shown::raw(text(r, "evidence_hash")));
    say!(
        "decide: dryrun approve|reject --fleet URL {}",
        Shown::raw(text(r, "run_id"))
    );
    say!("");
}

/// `dryrun approve|reject --fleet URL RUN`: the evidence, the decision
/// (bound to that evidence), then the host's outcome.
pub(super) fn decide(
    a: &FleetDecideArgs,
    run_id: &str,
    approve: bool,
    note: &str,
    override_block: bool,
    json: bool,
) -> i32 {
    let url = a.fleet.as_deref().unwrap_or_default();
    let wait = Duration::from_secs(a.wait);
    let pinned = a.evidence.clone();
    let out = with_store(url, async |c| {
        let r = query::run(c, run_id).await?;
        let id = text(&r, "run_id").to_string();
        let evidence = pinned.unwrap_or_else(|| text(&r, "evidence_hash").to_string());
        if !json && let Some(s) = r.get("summary").filter(|s| !s.is_null()) {
            print_waiting(&serde_json::json!({
                "run_id": id, "host": r["host"], "summary": s, "diffs": r["diffs"],
                "egress": r["egress"], "submitter_person": r["submitter_person"],
                "submitter_name": r["submitter_name"], "evidence_hash": evidence,
                "waiting_since": "",
            }));
        }
        let d = query::decide(c, &id, approve, &evidence, note, override_block).await?;
        let outcome = query::wait_outcome(c, d, wait).await?;
        Ok((id, r, d, outcome))
    });
    let (id, r, d, outcome) = match out {
        Ok(x) => x,
        Err(code) => return code,
    };
    let host = text(&r, "host");
    if json {
        print_json(&serde_json::json!({
            "run_id": id, "host": host, "decision": d,
            "action": if approve { "approve" } else { "reject" },
            "outcome": outcome.as_ref().map(|o| o.0.clone()),
            "reason": outcome.as_ref().and_then(|o| o.1.clone()),
        }));
    }
    match outcome {
        Some((o, _)) if o == "applied" => {
            if !json {
                say!(
                    "decision {d}: run {} {} on host {}",
                    Shown::raw(&id),
                    if approve { "approved" } else { "rejected" },
                    Shown::raw(host)
                );
            }
            0
        }
        Some((_, reason)) => {
            if !json {
                say_err!(
                    "dryrun: decision {d} was refused by host {}: {}",
                    Shown::raw(host),
                    Shown::raw(reason.as_deref().unwrap_or("no reason given"))
                );
            }
            EXIT_REFUSED
        }
        None => {
            if !json {
                say!(
                    "decision {d} recorded; host {} has not applied it yet (it applies it when it is back; `dryrun runs --fleet URL` shows the run's state)",
                    Shown::raw(host)
                );
            }
            0
        }
    }
}

/// `dryrun journal verify --fleet URL [--host HOST]`.
pub(super) fn verify(g: &GlobalOpts, url: &str, host: Option<String>, json: bool) -> i32 {
    let dir = super::state_dir(g);
    let journal = crate::journal::Journal::new(&dir);
    let local = match journal.verify() {
        Ok(r) => r,
        Err(e) => return super::output::error("journal", &e.to_string(), EXIT_INTERNAL),
    };
    let host = host.or_else(|| crate::fleet::host_id_of(&dir));
    let mine = match (&host, journal.hashes()) {
        (Some(h), Ok(v)) => Some((h.clone(), v)),
        (None, _) => None,
        (_, Err(e)) => return super::output::error("journal", &e.to_string(), EXIT_INTERNAL),
    };
    let fleet = match with_store(url, async |c| crate::fleet::verify::verify(c, mine).await) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let ok = local.ok && fleet.ok;
    if json {
        print_json(&serde_json::json!({"ok": ok, "journal": local, "fleet": fleet}));
    } else {
        super::render::print_journal_report(&local);
        for h in &fleet.hosts {
            say!(
                "host {}: {} records published, {} anchors (last at record {}): {}",
                Shown::raw(&h.host),
                h.records,
                h.anchors,
                h.last_anchor.map_or("-".into(), |a| a.to_string()),
                match &h.problem {
                    None => "chain OK".to_string(),
                    Some(p) => format!("BROKEN: {p}"),
                }
            );
        }
        match &fleet.local {
            Some(l) if l.ok => say!(
                "this journal (host {}): {} records, agrees with the {} published records and {} anchors",
                Shown::raw(&l.host),
                l.records,
                l.published_checked,
                l.anchors_checked
            ),
            Some(l) => say!(
                "this journal (host {}) DISAGREES with the fleet: {}",
                Shown::raw(&l.host),
                Shown::raw(l.problem.as_deref().unwrap_or(""))
            ),
            None => say!(
                "this state directory has not published to the fleet (give --host HOST for a copy of a host's journal)"
            ),
        }
    }
    if ok { 0 } else { EXIT_JOURNAL_BROKEN }
}

/// `dryrun fleet --fleet URL ...`.
pub(super) fn fleet_cmd(url: &str, cmd: FleetCmd) -> i32 {
    match cmd {
        FleetCmd::Migrate => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let r = rt.block_on(async {
                let mut conn = db::connect(&FleetSpec::client(url)).await?;
                db::migrate(&mut conn.client).await
            });
            match r {
                Ok((from, to)) if from == to => {
                    say!("fleet store schema: version {to}, nothing to do");
                    0
                }
                Ok((from, to)) => {
                    say!("fleet store schema: version {from} -> {to}");
                    0
                }
                Err(e) => fail(e),
            }
        }
        FleetCmd::Hosts { json } => match with_store(url, async |c| query::hosts(c).await) {
            Ok(h) if json => {
                print_json(&h);
                0
            }
            Ok(h) => {
                for x in &h {
                    say!(
                        "{}  dryrun {}  policy v{}  landlock {}  last seen {}  published {}",
                        Shown::raw(text(x, "host")),
                        Shown::raw(text(x, "version")),
                        x["policy_version"],
                        x["landlock_abi"],
                        Shown::raw(text(x, "last_seen")),
                        x["published_seq"]
                    );
                }
                0
            }
            Err(code) => code,
        },
        FleetCmd::Policy {
            cmd: FleetPolicyCmd::Publish { file, minimum },
        } => {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => return super::usage_error(format!("{}: {e}", file.display())),
            };
            // This binary must be able to load it (hosts check again).
            if let Err(e) = crate::policy::fleet::check(0, &text) {
                return super::usage_error(e);
            }
            match with_store(url, async |c| {
                query::publish_policy(c, &text, minimum).await
            }) {
                Ok(v) => {
                    say!(
                        "fleet policy version {v} published{}",
                        if minimum {
                            " (the fleet's minimum)"
                        } else {
                            ""
                        }
                    );
                    0
                }
                Err(code) => code,
            }
        }
        FleetCmd::Policy {
            cmd: FleetPolicyCmd::Minimum { version },
        } => match with_store(url, async |c| query::set_minimum(c, version).await) {
            Ok(()) => {
                say!("the fleet's minimum policy version is {version}");
                0
            }
            Err(code) => code,
        },
    }
}
