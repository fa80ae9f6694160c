//! `dryrun journal verify --fleet URL`: every host's published chain is
//! checked in the store (sequence numbers without gaps, each record naming
//! its predecessor's hash, every anchor on the chain), and a local journal
//! (this state directory's, or a copy of another host's with `--host`) is
//! checked against what its host published and anchored: a journal cut
//! short after a record was anchored, or any published record rewritten,
//! is reported with the first record where they part.

use serde::Serialize;
use tokio_postgres::Client;

use super::FleetError;
use crate::journal::GENESIS;

/// One host's chain as the store holds it.
#[derive(Debug, Clone, Serialize)]
pub struct HostCheck {
    pub host: String,
    pub records: i64,
    pub anchors: i64,
    pub last_anchor: Option<i64>,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A local journal against its host's published chain and anchors.
#[derive(Debug, Clone, Serialize)]
pub struct LocalCheck {
    pub host: String,
    pub records: u64,
    pub published_checked: u64,
    pub anchors_checked: u64,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub ok: bool,
    pub hosts: Vec<HostCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalCheck>,
}

/// Check every host's chain, and `local` (a host id and that journal's
/// `(seq, hash)` records) against its host's.
pub async fn verify(
    c: &Client,
    local: Option<(String, Vec<(u64, String)>)>,
) -> Result<FleetReport, FleetError> {
    let hosts: Vec<String> = c
        .query(
            "SELECT DISTINCT host_id::text FROM dryrun.events ORDER BY 1",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut report = FleetReport {
        ok: true,
        hosts: Vec::new(),
        local: None,
    };
    for host in &hosts {
        let events: Vec<(i64, String, String)> = c
            .query(
                "SELECT seq, hash, prev FROM dryrun.events WHERE host_id = $1 ORDER BY seq",
                &[host],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let anchors: Vec<(i64, String)> = c
            .query(
                "SELECT seq, hash FROM dryrun.anchors WHERE host_id = $1 ORDER BY seq",
                &[host],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let problem = chain_problem(&events).or_else(|| anchors_problem(&events, &anchors));
        report.ok &= problem.is_none();
        report.hosts.push(HostCheck {
            host: host.clone(),
            records: events.len() as i64,
            anchors: anchors.len() as i64,
            last_anchor: anchors.last().map(|a| a.0),
            ok: problem.is_none(),
            problem,
        });
        if let Some((h, mine)) = &local
            && h == host
        {
            let l = local_check(h, mine, &events, &anchors);
            report.ok &= l.ok;
            report.local = Some(l);
        }
    }
    if let Some((h, mine)) = local
        && report.local.is_none()
    {
        report.local = Some(LocalCheck {
            host: h,
            records: mine.len() as u64,
            published_checked: 0,
            anchors_checked: 0,
            ok: true,
            problem: Some("this host has published nothing yet".into()),
        });
    }
    Ok(report)
}

/// The published chain: from record 0 without a gap, each naming its
/// predecessor.
fn chain_problem(events: &[(i64, String, String)]) -> Option<String> {
    let mut prev = GENESIS.to_string();
    for (i, (seq, hash, p)) in events.iter().enumerate() {
        if *seq != i as i64 {
            return Some(format!(
                "the published chain has record {seq} where record {i} belongs"
            ));
        }
        if *p != prev {
            return Some(format!(
                "published record {seq} does not name its predecessor's hash"
            ));
        }
        prev = hash.clone();
    }
    None
}

fn anchors_problem(events: &[(i64, String, String)], anchors: &[(i64, String)]) -> Option<String> {
    anchors
        .iter()
        .find_map(|(seq, hash)| match events.get(*seq as usize) {
            Some((_, h, _)) if h == hash => None,
            Some(_) => Some(format!(
                "anchor at record {seq} is not on the published chain"
            )),
            None => Some(format!(
                "anchor at record {seq} is past the published chain"
            )),
        })
}

fn local_check(
    host: &str,
    mine: &[(u64, String)],
    events: &[(i64, String, String)],
    anchors: &[(i64, String)],
) -> LocalCheck {
    let short = |h: &str| h.chars().take(12).collect::<String>();
    let mut problem = None;
    for (seq, hash) in anchors {
        match mine.get(*seq as usize) {
            None => {
                problem = Some(format!(
                    "the local journal ends after record {} but record {seq} was anchored in the fleet (hash {}): it was truncated after it anchored",
                    mine.len() as i64 - 1,
                    short(hash)
                ));
                break;
            }
            Some((_, h)) if h != hash => {
                problem = Some(format!(
                    "local record {seq} hashes to {} but the fleet anchored {}: the journal was rewritten after it anchored",
                    short(h),
                    short(hash)
                ));
                break;
            }
            Some(_) => {}
        }
    }
    if problem.is_none() {
        for (seq, hash, _) in events {
            match mine.get(*seq as usize) {
                Some((_, h)) if h == hash => {}
                Some((_, h)) => {
                    problem = Some(format!(
                        "local record {seq} hashes to {} but the host published {}: the journal was rewritten after it published",
                        short(h),
                        short(hash)
                    ));
                    break;
                }
                None => {
                    problem = Some(format!(
                        "the local journal ends after record {} but the host published record {seq}: it was truncated after it published",
                        mine.len() as i64 - 1
                    ));
                    break;
                }
            }
        }
    }
    LocalCheck {
        host: host.to_string(),
        records: mine.len() as u64,
        published_checked: events.len() as u64,
        anchors_checked: anchors.len() as u64,
        ok: problem.is_none(),
        problem,
    }
}
