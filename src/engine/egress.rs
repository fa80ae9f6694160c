//! A rehearsal's egress: the engine starts the run's egress for every
//! rehearsal (not the live lane's rerun on the host's network): the proxy
//! and the sandbox's DNS responder, on one thread of the engine's, and the
//! command gets the proxy variables. When the intent allows names, the
//! proxy serves them; with `network: none` it answers every request `403`
//! at once and the DNS responder answers REFUSED, so that a tool gives up
//! at once (npm retries a failed lookup for about 70 s, but not a proxy's
//! refusal) and each attempt is recorded by the name asked for rather than
//! as a datagram to whatever resolver the host's configuration names.
//! Afterwards the proxy's log (and, with an allowlist, the direct attempts
//! the sandbox saw) becomes `rehearsal.egress`, one entry per destination.
//!
//! The run's declared services (`intent.network.services`), admitted again
//! here by the one rule (`egress::service::admit`) against the same system
//! configuration the submission was checked with, are served by the same
//! egress; their connections are made with the workspace owner's
//! credentials (`sandbox::service`).

use crate::egress::forward::ServiceSet;
use crate::egress::proxy::{self, EgressError, EgressLog, EgressProxy, PROXY_PORT, Serve};
use crate::envelope::EnvelopeSpec;
use crate::model::{EgressEntry, EgressHow, RehearsalReport};
use crate::sandbox::{self, spec::EgressPlan, spec::SandboxSpec};

use crate::egress::EgressSystem;

/// The variables that point tools at the proxy (upper and lower case).
const PROXY_VARS: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];
const NO_PROXY_VARS: [&str; 2] = ["NO_PROXY", "no_proxy"];
/// Loopback inside the sandbox stays direct.
const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// Why a run's egress did not start (nothing ran).
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    #[error(transparent)]
    Proxy(#[from] EgressError),
    #[error("{0}: {1}")]
    Service(String, String),
}

/// Start the run's egress (not for the live lane's rerun on the host's
/// network): the proxy, serving the intent's names or (`network: none`)
/// refusing every one, the DNS responder, and the declared services; the
/// command's proxy variables point at the proxy either way. `owner`: the
/// workspace owner's uid, gid and groups.
pub(super) fn start_egress(
    system: &EgressSystem,
    spec: &EnvelopeSpec,
    sspec: &mut SandboxSpec,
    owner: &(u32, u32, Vec<u32>),
    submitted: &crate::journal::Durable,
) -> Result<Option<EgressProxy>, StartError> {
    if sspec.network_host {
        return Ok(None);
    }
    let rules = crate::egress::service::admit(&system.services, &spec.services, &spec.workspace)
        .map_err(|(f, m)| StartError::Service(f, m))?;
    let services = (!rules.is_empty()).then(|| ServiceSet {
        rules: rules.clone(),
        owner: owner.clone(),
        connect_as: sandbox::service::connect_as_owner,
    });
    let endpoints = rules.into_iter().map(|r| r.endpoint).collect();
    let serve = if spec.network.is_empty() {
        Serve::NoNetwork
    } else {
        Serve::Allowlist(system.for_run(&spec.network))
    };
    let proxy = proxy::start(
        serve,
        services,
        sandbox::receive_egress_sockets,
        submitted.subscribe(),
    )?;
    sspec.egress = Some(EgressPlan {
        control: proxy.control_path().to_path_buf(),
        proxy_port: Some(PROXY_PORT),
        allows_names: !spec.network.is_empty(),
        services: endpoints,
    });
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let given: Vec<(&str, &str)> = PROXY_VARS
        .iter()
        .map(|k| (*k, url.as_str()))
        .chain(NO_PROXY_VARS.iter().map(|k| (*k, NO_PROXY)))
        .collect();
    sspec
        .env
        .retain(|(k, _)| !given.iter().any(|(g, _)| g == k));
    sspec
        .env
        .extend(given.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Ok(Some(proxy))
}

/// Expand the run's registry presets for the user the command runs as
/// (`owner`: uid and gid; `env`: the command's environment) and admit its
/// whole allowlist by the one rule ([`EgressSystem::admit_intent`]):
/// `spec.network` becomes what the run's proxy allows. Every door's run
/// passes here. Returns what each preset became.
pub(super) fn admit_allowlist(
    system: &EgressSystem,
    spec: &mut EnvelopeSpec,
    owner: (u32, u32),
    env: &[(String, String)],
) -> Result<Vec<String>, crate::engine::EngineError> {
    if spec.network.is_empty() && spec.presets.is_empty() {
        return Ok(Vec::new());
    }
    let workspace = spec.workspace.clone();
    let resolve = |name: &str| {
        crate::egress::preset::resolve(
            name,
            &crate::egress::preset::Caller {
                uid: owner.0,
                gid: owner.1,
                env,
                workspace: &workspace,
                become_user: crate::sandbox::become_on_this_thread,
            },
        )
    };
    let (allow, notes) = system
        .admit_intent(&spec.network, &spec.presets, &resolve)
        .map_err(|(f, m)| {
            crate::engine::EngineError::invalid(crate::engine::Input::Request, format!("{f}: {m}"))
        })?;
    spec.network = allow;
    spec.presets.clear();
    Ok(notes)
}

/// A note for each service the system policy lists that the command tried
/// to reach without declaring it (the attempt itself is already named as
/// a blocked network attempt): how to declare it.
pub(super) fn hint_undeclared_services(
    system: &EgressSystem,
    report: &RehearsalReport,
    notes: &mut Vec<String>,
) {
    use crate::model::ServiceEndpoint;
    for rule in &system.services {
        let e = &rule.endpoint;
        let declared = report
            .egress
            .iter()
            .any(|x| x.how == EgressHow::Service && (x.name.clone(), x.port) == e.report_name());
        let tried = match e {
            ServiceEndpoint::Tcp(a) => report
                .direct
                .iter()
                .any(|d| (d.addr, d.port) == (a.ip(), a.port())),
            ServiceEndpoint::Unix(p) => {
                let shown = format!("unix socket {}", p.display());
                report.blocked.iter().any(|b| {
                    b.detail
                        .split(" to ")
                        .nth(1)
                        .is_some_and(|d| d.trim_end_matches(" (refused)") == shown)
                })
            }
        };
        if tried && !declared {
            notes.push(format!(
                "the command tried to reach {e}, a host service the system policy lists as rehearsable; declare it (intent.network.services, or --service {e}) to reach it in the rehearsal"
            ));
        }
    }
}

/// Fill `report.egress` from the proxy's log and, with an allowlist, the
/// direct attempts; name the provided variables under `stripped`. A direct
/// attempt becomes one egress entry, by name where the sandbox's DNS
/// responder gave the address, and its line under `blocked` goes (one
/// reason per destination in the verdict, not two). With `network: none`
/// only what the proxy and the DNS responder saw is added: direct attempts
/// stay under `blocked`, as they always were in such runs.
pub(super) fn fill_egress_report(log: EgressLog, report: &mut RehearsalReport) {
    let mut entries = log.entries;
    let direct = if log.no_network {
        &[][..]
    } else {
        &report.direct[..]
    };
    for d in direct {
        let name = match d.addr {
            std::net::IpAddr::V4(v4) => log.fake_addrs.get(&v4).cloned(),
            _ => None,
        }
        .unwrap_or_else(|| d.addr.to_string());
        let target = match d.addr {
            std::net::IpAddr::V4(a) => format!(" to {a}:{}", d.port),
            std::net::IpAddr::V6(a) => format!(" to [{a}]:{}", d.port),
        };
        let is_this = |b: &crate::model::Blocked| {
            b.kind == crate::model::BlockedKind::Network
                && (b.detail.ends_with(&target) || b.detail.contains(&format!("{target} ")))
        };
        let seen: Vec<String> = report
            .blocked
            .iter()
            .filter(|b| is_this(b))
            .map(|b| b.detail.clone())
            .collect();
        report.blocked.retain(|b| !is_this(b));
        let how = if seen.is_empty() {
            format!("a connection{target}")
        } else {
            seen.join(", ")
        };
        let e = EgressEntry {
            name,
            port: Some(d.port),
            how: EgressHow::Direct,
            allowed: false,
            reason: Some(format!(
                "{how}: a direct connection, not through the proxy (the sandbox has no route out)"
            )),
            bytes_out: 0,
            bytes_in: 0,
            disposable: false,
        };
        match entries
            .iter_mut()
            .find(|x| x.name == e.name && x.port == e.port && x.how == e.how)
        {
            // Two addresses of one name (or an address asked twice): one entry.
            Some(x) => {
                if let (Some(r), Some(more)) = (x.reason.as_mut(), e.reason)
                    && r.len() < 1024
                {
                    r.push_str("; ");
                    r.push_str(&more);
                }
            }
            None => entries.push(e),
        }
    }
    if let Some(p) = log.problem {
        report.blocked.push(crate::model::Blocked {
            kind: crate::model::BlockedKind::Network,
            detail: format!("egress proxy: {p}"),
        });
    }
    if log.dropped > 0 {
        report.blocked.push(crate::model::Blocked {
            kind: crate::model::BlockedKind::Network,
            detail: format!(
                "egress: {} more destinations or names not listed",
                log.dropped
            ),
        });
    }
    report.egress = entries;
    for k in PROXY_VARS.iter().chain(NO_PROXY_VARS.iter()) {
        report.stripped.push(format!("provided:env:{k}"));
    }
}
