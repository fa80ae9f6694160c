//! `egress:` in a policy file: names every run with a network allowlist may
//! reach (a company mirror), names no run may reach, pins
//! (`HOST:PORT:ADDR`, as `--egress-resolve`), and the host services a run
//! may declare (`services`, see `crate::egress::service`). A system policy
//! file may set all four; a workspace policy may only add `never_allow`
//! (it can only tighten).

use serde::{Deserialize, Serialize};

use super::PolicyError;
use crate::egress::service::{self, ServiceRule};
use crate::egress::{EgressSystem, ResolvePin, parse_patterns};
use crate::model::ServiceEndpoint;

#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EgressPolicyConfig {
    /// Added to every allowlist (only runs that declare one get a proxy).
    #[serde(default)]
    pub always_allow: Vec<String>,
    /// Refused even when a run's allowlist names them.
    #[serde(default)]
    pub never_allow: Vec<String>,
    /// Pins, `HOST:PORT:ADDR`, exempt from the private-range refusal.
    #[serde(default)]
    pub resolve: Vec<String>,
    /// Host services a run may declare in `intent.network.services`.
    #[serde(default)]
    pub services: Vec<ServiceConfig>,
    /// The most a run's allowlist may ask for (absent: any name).
    #[serde(default)]
    pub ceiling: Option<Vec<String>>,
    /// Registry presets' hosts as the system names them (winning over
    /// the tool configuration of the user the command runs as).
    #[serde(default)]
    pub presets: std::collections::BTreeMap<String, Vec<String>>,
}

/// One entry of `egress.services`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// `127.0.0.1:PORT`, `[::1]:PORT` or a Unix socket's absolute path.
    pub endpoint: String,
    /// A throwaway service: talking to it needs no approval.
    #[serde(default)]
    pub disposable: bool,
}

fn err(file: &str, message: String) -> PolicyError {
    PolicyError::Parse {
        file: file.to_string(),
        message,
    }
}

/// A system policy file's `egress:` into the layered whole.
pub(super) fn merge_system(
    into: &mut EgressSystem,
    file: &str,
    c: &EgressPolicyConfig,
) -> Result<(), PolicyError> {
    let bad = |(f, m): (String, String)| err(file, format!("{f}: {m}"));
    into.always_allow
        .extend(parse_patterns("egress.always_allow", &c.always_allow).map_err(bad)?);
    into.never_allow
        .extend(parse_patterns("egress.never_allow", &c.never_allow).map_err(bad)?);
    for (i, r) in c.resolve.iter().enumerate() {
        let pin: ResolvePin = r
            .parse()
            .map_err(|m| err(file, format!("egress.resolve[{i}]: {m}")))?;
        into.pins.push(pin);
    }
    if let Some(ceiling) = &c.ceiling {
        into.ceiling
            .get_or_insert_with(Vec::new)
            .extend(parse_patterns("egress.ceiling", ceiling).map_err(bad)?);
    }
    for (name, hosts) in &c.presets {
        if !crate::egress::preset::is_preset(name) {
            return Err(err(
                file,
                format!(
                    "egress.presets.{name}: not a preset ({})",
                    crate::egress::preset::PRESETS.join(", ")
                ),
            ));
        }
        let f = format!("egress.presets.{name}");
        into.presets
            .insert(name.clone(), parse_patterns(&f, hosts).map_err(bad)?);
    }
    for (i, sc) in c.services.iter().enumerate() {
        let at = |m: String| err(file, format!("egress.services[{i}].endpoint: {m}"));
        let endpoint = ServiceEndpoint::parse(&sc.endpoint).map_err(at)?;
        if let Some(why) = service::never_reason(&endpoint) {
            return Err(at(format!("{endpoint} is never rehearsable: {why}")));
        }
        into.services.retain(|r| r.endpoint != endpoint);
        into.services.push(ServiceRule {
            endpoint,
            disposable: sc.disposable,
        });
    }
    Ok(())
}

/// A workspace policy's `egress:`: only `never_allow`.
pub(super) fn merge_workspace(
    into: &mut EgressSystem,
    file: &str,
    c: &EgressPolicyConfig,
) -> Result<(), PolicyError> {
    if !c.always_allow.is_empty()
        || !c.resolve.is_empty()
        || !c.services.is_empty()
        || c.ceiling.is_some()
        || !c.presets.is_empty()
    {
        return Err(err(
            file,
            "egress: a workspace policy may only add never_allow (always_allow, resolve, services, ceiling and presets belong to the system policy)".into(),
        ));
    }
    merge_system(into, file, c)
}

#[cfg(test)]
mod tests {
    use crate::policy::Policy;

    fn file(name: &str, text: &str) -> (String, String) {
        (name.to_string(), text.to_string())
    }

    #[test]
    fn system_files_set_egress_and_workspace_files_only_add_refusals() {
        let sys = file(
            "sys.yaml",
            "egress: {always_allow: [mirror.corp.example], never_allow: ['*.evil.example'], resolve: ['mirror.corp.example:443:10.0.0.5']}\n",
        );
        let p = Policy::layered(std::slice::from_ref(&sys), None).unwrap();
        assert_eq!(p.egress.always_allow.len(), 1);
        assert_eq!(p.egress.pins[0].port, 443);
        let ws = file("ws.yaml", "egress: {always_allow: [x.example]}\n");
        let e = Policy::layered(std::slice::from_ref(&sys), Some(&ws)).unwrap_err();
        assert!(e.to_string().contains("only add never_allow"), "{e}");
        let ws = file("ws.yaml", "egress: {resolve: ['x.example:80:127.0.0.1']}\n");
        assert!(Policy::layered(std::slice::from_ref(&sys), Some(&ws)).is_err());
        let ws = file("ws.yaml", "egress: {never_allow: [y.example]}\n");
        let p = Policy::layered(std::slice::from_ref(&sys), Some(&ws)).unwrap();
        assert_eq!(p.egress.never_allow.len(), 2);
        let bad = file("sys.yaml", "egress: {always_allow: ['*']}\n");
        let e = Policy::layered(&[bad], None).unwrap_err();
        assert!(e.to_string().contains("egress.always_allow[0]"), "{e}");
    }

    #[test]
    fn services_come_from_system_files_and_never_the_dangerous_sockets() {
        let sys = file(
            "sys.yaml",
            "egress: {services: [{endpoint: '127.0.0.1:5432', disposable: true}, {endpoint: /run/app/app.sock}]}\n",
        );
        let p = Policy::layered(std::slice::from_ref(&sys), None).unwrap();
        assert_eq!(p.egress.services.len(), 2);
        assert!(p.egress.services[0].disposable && !p.egress.services[1].disposable);
        // A later file's entry for the same endpoint replaces the earlier.
        let later = file(
            "z.yaml",
            "egress: {services: [{endpoint: '127.0.0.1:5432'}]}\n",
        );
        let p = Policy::layered(&[sys.clone(), later], None).unwrap();
        assert_eq!(p.egress.services.len(), 2);
        assert!(!p.egress.services.iter().any(|s| s.disposable));
        let ws = file(
            "ws.yaml",
            "egress: {services: [{endpoint: '127.0.0.1:6379'}]}\n",
        );
        let e = Policy::layered(std::slice::from_ref(&sys), Some(&ws)).unwrap_err();
        assert!(
            e.to_string()
                .contains("services, ceiling and presets belong to the system policy"),
            "{e}"
        );
        for (text, want) in [
            (
                "egress: {services: [{endpoint: /var/run/docker.sock}]}\n",
                "never rehearsable",
            ),
            (
                "egress: {services: [{endpoint: '10.0.0.1:5432'}]}\n",
                "loopback",
            ),
            (
                "egress: {services: [{endpoint: '127.0.0.1:1', disposble: true}]}\n",
                "unknown field",
            ),
        ] {
            let e = Policy::layered(&[file("sys.yaml", text)], None).unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
    }
}
