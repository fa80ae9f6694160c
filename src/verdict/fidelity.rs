//! Two checks of where a rehearsal touched, or could not reach, the live
//! world: the declared host services it talked to (real effects), and the
//! workspace entries an ordinary user's rehearsal could not change
//! because their ids are not mapped into the sandbox.

use crate::envelope::LiveMode;
use crate::model::{Decision, EgressEntry, EgressHow, Finding, UnmappedIds};
use crate::workspace::paths::escape_for_humans;

fn finding(rule: &str, message: String) -> Finding {
    Finding {
        rule: rule.into(),
        decision: Decision::NeedsApproval,
        message,
    }
}

/// `evidence.service`: a connection to a declared service had real effects
/// (needs approval unless the system policy marks it disposable); one that
/// did not reach the service left the rehearsal unlike the live run.
pub(super) fn services(
    egress: &[EgressEntry],
    live: LiveMode,
    notes: &mut Vec<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in egress.iter().filter(|e| e.how == EgressHow::Service) {
        let dest = escape_for_humans(e.destination().as_bytes());
        if let Some(why) = &e.reason {
            out.push(finding(
                "evidence.service",
                format!(
                    "the declared host service {dest} did not answer during the rehearsal ({why}); the command saw its connection closed, so what it did afterwards is not what it does live"
                ),
            ));
            continue;
        }
        let traffic = format!("{} bytes out, {} in", e.bytes_out, e.bytes_in);
        let again = match live {
            LiveMode::Apply => {
                "the live lane (mode apply) writes only the workspace's changes and will not talk to it again"
            }
            LiveMode::Rerun => "the live lane (mode rerun) will talk to it again",
        };
        if e.disposable {
            notes.push(format!(
                "talked to the host service {dest} ({traffic}), which the system policy marks disposable; {again}"
            ));
        } else {
            out.push(finding(
                "evidence.service",
                format!(
                    "the command talked to the real host service {dest} ({traffic}): whatever it changed there (rows written, keys set, messages sent) happened during the rehearsal and is not undone; {again}. The system policy does not mark {dest} disposable"
                ),
            ));
        }
    }
    out
}

/// `evidence.unmapped_ids`: entries an ordinary user's rehearsal could not
/// change, named, with why and what makes them rehearsable.
pub(super) fn unmapped(u: &UnmappedIds) -> Option<Finding> {
    if u.entries.is_empty() {
        return None;
    }
    let mut named: Vec<String> = u
        .entries
        .iter()
        .map(|e| {
            let whose = match (e.owner_unmapped, e.group_unmapped) {
                (true, true) => "owner and group",
                (true, false) => "owner",
                _ => "group",
            };
            let beneath = match e.beneath {
                0 => String::new(),
                n => format!(" and {n} entries beneath it"),
            };
            format!("{} ({whose}){beneath}", e.path)
        })
        .collect();
    if u.more > 0 {
        named.push(format!("{} more", u.more));
    }
    let cut = if u.cut {
        " (the scan stopped at its entry budget; there may be more)"
    } else {
        ""
    };
    Some(finding(
        "evidence.unmapped_ids",
        format!(
            "this ordinary user's rehearsal could not change {}{cut}: their owner or group is not mapped into the sandbox, so they show as the overflow ids and changing them fails with EOVERFLOW (\"Value too large for defined data type\"), where the live command may change them; the rehearsed result can differ from the live one. To rehearse them, have the administrator delegate your groups in /etc/subgid (one line USER:GID:1 per group, with newgidmap from the uidmap package installed), or submit through the system daemon, which maps ids 0-65535",
            named.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::UnmappedEntry;

    fn svc(disposable: bool, reason: Option<&str>) -> EgressEntry {
        EgressEntry {
            name: "127.0.0.1".into(),
            port: Some(5432),
            how: EgressHow::Service,
            allowed: true,
            reason: reason.map(Into::into),
            bytes_out: 10,
            bytes_in: 20,
            disposable,
        }
    }

    #[test]
    fn a_real_service_needs_approval_and_a_disposable_one_a_note() {
        let mut notes = Vec::new();
        let f = services(&[svc(false, None)], LiveMode::Apply, &mut notes);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.contains("10 bytes out, 20 in"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("not undone"));
        assert!(notes.is_empty());
        let f = services(&[svc(true, None)], LiveMode::Apply, &mut notes);
        assert!(f.is_empty());
        assert!(notes[0].contains("disposable"));
        let f = services(&[svc(true, Some("refused"))], LiveMode::Apply, &mut notes);
        assert!(f[0].message.contains("did not answer"), "{}", f[0].message);
    }

    #[test]
    fn unmapped_entries_are_named_with_the_fix() {
        assert!(unmapped(&UnmappedIds::default()).is_none());
        let u = UnmappedIds {
            entries: vec![UnmappedEntry {
                path: "build".into(),
                owner_unmapped: false,
                group_unmapped: true,
                beneath: 3,
            }],
            more: 0,
            cut: false,
        };
        let f = unmapped(&u).unwrap();
        assert!(
            f.message.contains("build (group) and 3 entries beneath it")
                && f.message.contains("/etc/subgid"),
            "{}",
            f.message
        );
    }
}
