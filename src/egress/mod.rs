//! Egress: what a rehearsal may reach on the network, and the host-side
//! proxy that enforces it.
//!
//! - this file: the network intent's allowlist patterns (`host`,
//!   `*.suffix`, optional `:port`: without one, an allowlist entry means
//!   the web's ports 80 and 443 only), the system's pins
//!   (`--egress-resolve HOST:PORT:ADDR`), and [`EgressConfig`], the
//!   validated whole a run's proxy enforces;
//! - [`addr`]: which resolved addresses the proxy refuses, asking the
//!   kernel ([`route`]) whether an address is this host's own;
//! - [`proxy`]: the per-run proxy (HTTP CONNECT and plain HTTP, hyper) and
//!   the sandbox's DNS responder ([`dns`]), both serving sockets the
//!   sandbox's init created inside the sandbox's network namespace;
//! - [`service`]: which host services (`intent.network.services`) a run
//!   may talk to, and [`forward`]: serving them (the same hand-over, a
//!   connection to the real endpoint with the owner's credentials).
//!
//! The envelope controls only the allowlist; pins, always-allowed and
//! never-allowed names come from the system (the daemon's or `execute`'s
//! command line, the system policy).

pub(crate) mod addr;
mod dns;
pub(crate) mod forward;
pub(crate) mod handover;
pub(crate) mod intent;
pub(crate) mod preset;
pub(crate) mod proxy;
pub(crate) mod route;
pub(crate) mod service;
mod tls;
mod tunnel;
mod upstream;

use serde::Serialize;
use std::net::IpAddr;

/// At most this many allowlist entries per run.
pub const MAX_ALLOW: usize = 64;

/// The ports an allowlist entry without `:port` allows: plain HTTP and
/// HTTPS, never a raw tunnel to another service of an allowed host (SSH,
/// a database): that needs the port named in the entry.
pub const WEB_PORTS: [u16; 2] = [80, 443];

/// One allowlist pattern: `host`, `*.suffix`, either with `:port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPattern {
    /// Lowercase, no trailing dot; for a wildcard, the suffix after `*.`.
    host: String,
    wildcard: bool,
    /// `None`: no port named. In an allowlist that is [`WEB_PORTS`]
    /// ([`HostPattern::allows`]); in a never-allow list, every port
    /// ([`HostPattern::covers`]).
    port: Option<u16>,
}

impl HostPattern {
    /// Parse one pattern; the error says what is wrong and what to write.
    pub fn parse(s: &str) -> Result<HostPattern, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("is empty; give a host name such as registry.example".into());
        }
        if t.contains("://") {
            return Err(format!(
                "{t:?} looks like a URL; give the host name without a scheme (registry.example, not https://registry.example)"
            ));
        }
        if t.contains('/') || t.contains('?') || t.contains('@') {
            return Err(format!(
                "{t:?} has a path or user part; give only HOST or HOST:PORT"
            ));
        }
        if t == "*" || t == "*.*" {
            return Err(
                "a bare * would allow every host; list the hosts, or a *.suffix such as *.registry.example"
                    .into(),
            );
        }
        if t.starts_with('[') || t.matches(':').count() > 1 {
            return Err(format!(
                "{t:?} is an IP address; the allowlist names hosts (the proxy resolves names itself and checks the addresses)"
            ));
        }
        let (host, port) = match t.rsplit_once(':') {
            Some((h, p)) => {
                let port: u16 = p.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                    format!("{t:?} has a bad port {p:?}; give a number from 1 to 65535")
                })?;
                (h, Some(port))
            }
            None => (t, None),
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.parse::<IpAddr>().is_ok() {
            return Err(format!(
                "{t:?} is an IP address; the allowlist names hosts (the proxy resolves names itself and checks the addresses)"
            ));
        }
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, host.clone()),
        };
        if name.contains('*') {
            return Err(format!(
                "{t:?}: a * may only stand first, as in *.registry.example"
            ));
        }
        if !valid_host_name(&name) {
            return Err(format!(
                "{t:?} is not a valid host name (letters, digits, '-' and '.', labels of 1 to 63 characters)"
            ));
        }
        if looks_numeric(&name) {
            return Err(format!(
                "{t:?} is an IP address in another notation (a numeric last label); the allowlist names hosts"
            ));
        }
        if wildcard && !name.contains('.') {
            return Err(format!(
                "{t:?} would allow a whole top-level domain; give a longer suffix"
            ));
        }
        Ok(HostPattern {
            host: name,
            wildcard,
            port,
        })
    }

    /// As an allowlist entry: whether it allows `name` (normalized by
    /// [`normalize_name`]) on `port`; `port: None` asks about the name
    /// alone (a DNS lookup). An entry without a port allows [`WEB_PORTS`].
    pub fn allows(&self, name: &str, port: Option<u16>) -> bool {
        self.names(name)
            && match (self.port, port) {
                (_, None) => true,
                (Some(a), Some(b)) => a == b,
                (None, Some(b)) => WEB_PORTS.contains(&b),
            }
    }

    /// As a never-allow entry: whether it refuses `name` on `port`; an
    /// entry without a port refuses every port, and a lookup of any name
    /// it names.
    pub fn covers(&self, name: &str, port: Option<u16>) -> bool {
        self.names(name)
            && match (self.port, port) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    /// Whether everything this allowlist entry allows, `ceiling` (an
    /// allowlist entry of the system's) allows too: the same name or one
    /// under a wildcard ceiling, and ports within the ceiling's.
    pub fn within(&self, ceiling: &HostPattern) -> bool {
        let names = if ceiling.wildcard {
            (self.wildcard && self.host == ceiling.host) || ceiling.names(&self.host)
        } else {
            !self.wildcard && self.host == ceiling.host
        };
        names
            && match (ceiling.port, self.port) {
                (None, None) => true,
                (None, Some(p)) => WEB_PORTS.contains(&p),
                (Some(c), Some(p)) => c == p,
                (Some(_), None) => false,
            }
    }

    /// Whether the entry names `name`, whatever the port.
    pub fn names(&self, name: &str) -> bool {
        if self.wildcard {
            name.len() > self.host.len() + 1
                && name.ends_with(&self.host)
                && name.as_bytes()[name.len() - self.host.len() - 1] == b'.'
        } else {
            name == self.host
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.host)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

fn valid_host_name(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Whether a resolver would read `h` as an IPv4 address in one of the
/// old notations (`2130706433`, `0x7f.1`, `017700000001`): a top-level
/// label is never all digits, nor `0x` and hex digits.
fn looks_numeric(h: &str) -> bool {
    let last = h.rsplit('.').next().unwrap_or(h);
    last.bytes().all(|b| b.is_ascii_digit())
        || last
            .strip_prefix("0x")
            .is_some_and(|x| x.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Longest name shown as asked for in the egress report (a DNS name is at
/// most 253 characters); longer ones are cut and their length given.
const MAX_SHOWN_NAME: usize = 253;

/// Why the proxy refuses `name` (normalized) before any policy or
/// resolution, and the name as the report shows it: a name that is not a
/// host name, or one that reads as a numeric address, never reaches the
/// resolver. `_` is accepted (some service names carry it).
pub(crate) fn malformed_name(name: &str) -> Option<(String, String)> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SHOWN_NAME
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !ok {
        // Shown printable: a name is evidence, never a terminal escape.
        let printable: String = name
            .chars()
            .take(64)
            .map(|c| if c.is_ascii_graphic() { c } else { '?' })
            .collect();
        let shown = if name.chars().count() > 64 {
            format!("{printable}... ({} bytes)", name.len())
        } else {
            printable
        };
        return Some((
            shown,
            "not a host name (letters, digits, '-', '_' and '.', labels of 1 to 63 characters, 253 in all)".into(),
        ));
    }
    None
}

/// [`malformed_name`] for a name as a request gave it (an IP literal is
/// named as such).
pub(crate) fn refused_request_name(name: &str) -> Option<(String, String)> {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() || looks_numeric(name) {
        return Some((
            name.into(),
            "an IP address (in any notation); the proxy connects only to names, which it resolves itself".into(),
        ));
    }
    malformed_name(name)
}

/// Lowercase, without a trailing dot: how names are compared and reported.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Parse a list of patterns, naming the entry that is wrong as
/// `{field}[{i}]`.
pub fn parse_patterns(field: &str, items: &[String]) -> Result<Vec<HostPattern>, (String, String)> {
    if items.len() > MAX_ALLOW {
        return Err((field.into(), format!("at most {MAX_ALLOW} entries")));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, s)| HostPattern::parse(s).map_err(|m| (format!("{field}[{i}]"), m)))
        .collect()
}

/// `--egress-resolve HOST:PORT:ADDR`: the system pins a name to an address
/// (exempt from the address refusals). Never from an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvePin {
    pub host: String,
    pub port: u16,
    pub addr: IpAddr,
}

impl std::str::FromStr for ResolvePin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("{s:?}: expected HOST:PORT:ADDR, e.g. registry.example:443:192.0.2.10");
        let (host, rest) = s.split_once(':').ok_or_else(bad)?;
        let (port, addr) = rest.split_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
        let addr: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        let host = normalize_name(host);
        if !valid_host_name(&host) || host.parse::<IpAddr>().is_ok() {
            return Err(format!("{s:?}: {host:?} is not a host name"));
        }
        Ok(ResolvePin { host, port, addr })
    }
}

/// The system's egress configuration (never from an envelope): pins from
/// `--egress-resolve`, names every run with an allowlist may reach, names
/// none may.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressSystem {
    pub pins: Vec<ResolvePin>,
    pub always_allow: Vec<HostPattern>,
    pub never_allow: Vec<HostPattern>,
    /// Host services rehearsals may talk to (system policy only).
    pub services: Vec<service::ServiceRule>,
    /// `egress.ceiling`: the most a run's allowlist may ask for (`None`:
    /// any name, as `--allow-net` always could; `never_allow` still
    /// refuses).
    pub ceiling: Option<Vec<HostPattern>>,
    /// `egress.presets`: a registry preset's hosts as the system names
    /// them (winning over the tool's configuration).
    pub presets: std::collections::BTreeMap<String, Vec<HostPattern>>,
}

impl EgressSystem {
    /// These settings with a layered policy's added (the command line's
    /// and the system policy's together).
    pub fn with_policy(&self, policy: &EgressSystem) -> EgressSystem {
        let mut s = self.clone();
        s.pins.extend(policy.pins.iter().cloned());
        s.always_allow.extend(policy.always_allow.iter().cloned());
        s.never_allow.extend(policy.never_allow.iter().cloned());
        s.services.extend(policy.services.iter().cloned());
        if let Some(c) = &policy.ceiling {
            s.ceiling
                .get_or_insert_with(Vec::new)
                .extend(c.iter().cloned());
        }
        for (k, v) in &policy.presets {
            s.presets.insert(k.clone(), v.clone());
        }
        s
    }

    /// Whether a run's intent may ask for `entry` (one allowlist entry as
    /// written, or a host a preset gave): the one rule every door's
    /// request meets. Refused: an entry a `never_allow` entry covers, and,
    /// with `egress.ceiling` set, an entry beyond it; the message names the
    /// entry and the setting.
    pub fn may_ask(&self, entry: &HostPattern) -> Result<(), String> {
        if let Some(n) = self
            .never_allow
            .iter()
            .find(|n| n.names(&entry.host) || entry.within(n))
        {
            return Err(format!(
                "{entry} is refused by the system policy (egress.never_allow: {n}); leave it out"
            ));
        }
        match &self.ceiling {
            Some(c) if !c.iter().any(|c| entry.within(c)) => Err(format!(
                "{entry} is beyond what the system policy lets a run ask for (egress.ceiling: {}); an administrator adds it to egress.ceiling in a system policy file (/etc/dryrun/policy.d), or leave it out",
                if c.is_empty() {
                    "no names".to_string()
                } else {
                    c.iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )),
            _ => Ok(()),
        }
    }

    /// A run's allowlist as asked (`allow`, presets named in `presets`),
    /// expanded and admitted: each preset's hosts (the system's
    /// `egress.presets`, else the caller's tool configuration through
    /// `resolve`), then every entry meets [`EgressSystem::may_ask`] (but a
    /// system preset's hosts, which the system wrote). The error names the
    /// field and what to do; the notes say what each preset became.
    pub(crate) fn admit_intent(
        &self,
        allow: &[HostPattern],
        presets: &[String],
        resolve: &preset::Resolver<'_>,
    ) -> Result<(Vec<HostPattern>, Vec<String>), (String, String)> {
        let field = "intent.network.allow";
        let mut out: Vec<HostPattern> = Vec::new();
        for (i, p) in allow.iter().enumerate() {
            self.may_ask(p).map_err(|m| (format!("{field}[{i}]"), m))?;
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        let mut notes = Vec::new();
        for name in presets {
            let at = || format!("{field}: preset {name}");
            let (hosts, from, system) = match self.presets.get(name) {
                Some(h) => (
                    h.clone(),
                    "the system policy's egress.presets".to_string(),
                    true,
                ),
                None => {
                    let (h, from) = resolve(name).map_err(|m| (at(), m))?;
                    (h, format!("the caller's {from}"), false)
                }
            };
            for h in &hosts {
                if !system {
                    self.may_ask(h).map_err(|m| (at(), m))?;
                }
                if !out.contains(h) {
                    out.push(h.clone());
                }
            }
            notes.push(format!(
                "preset {name}: {} (from {from})",
                hosts
                    .iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if out.len() > MAX_ALLOW {
            return Err((
                field.into(),
                format!("at most {MAX_ALLOW} entries, presets expanded"),
            ));
        }
        Ok((out, notes))
    }

    /// The whole a run's proxy enforces, given the run's own allowlist.
    pub fn for_run(&self, allow: &[HostPattern]) -> EgressConfig {
        let mut all = allow.to_vec();
        all.extend(self.always_allow.iter().cloned());
        EgressConfig {
            allow: all,
            never: self.never_allow.clone(),
            pins: self.pins.clone(),
        }
    }
}

/// What one run's proxy enforces: validated, combined from the envelope's
/// intent and the system's configuration.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// The run's allowlist (intent, `--allow-net`) plus the system's
    /// always-allowed names.
    pub allow: Vec<HostPattern>,
    /// Names the system never allows (win over `allow`).
    pub never: Vec<HostPattern>,
    /// The system's pins.
    pub pins: Vec<ResolvePin>,
}

/// Whether a destination may be reached, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Allowed,
    Refused(String),
}

impl EgressConfig {
    /// The policy decision by name (addresses are checked after resolution).
    pub fn admit(&self, name: &str, port: Option<u16>) -> Admission {
        if let Some(p) = self.never.iter().find(|p| p.covers(name, port)) {
            return Admission::Refused(format!(
                "the system policy never allows {p} (egress.never_allow)"
            ));
        }
        if self.allow.iter().any(|p| p.allows(name, port)) {
            return Admission::Allowed;
        }
        let named: Vec<&HostPattern> = self.allow.iter().filter(|p| p.names(name)).collect();
        match (named.is_empty(), port) {
            (false, Some(port)) => Admission::Refused(format!(
                "port {port} is not allowed for {name}: the allowlist names it as {} (an entry without a port allows only ports 80 and 443; name the port, as {name}:{port}, to allow it)",
                named
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Admission::Refused(
                "not on the run's network allowlist (intent.network.allow)".into(),
            ),
        }
    }

    /// The pinned address for `name:port`, if the system pinned one.
    pub fn pinned(&self, name: &str, port: u16) -> Option<IpAddr> {
        self.pins
            .iter()
            .find(|p| p.host == name && p.port == port)
            .map(|p| p.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_and_match() {
        let p = HostPattern::parse("*.Pythonhosted.example:443").unwrap();
        assert!(p.allows("files.pythonhosted.example", Some(443)));
        assert!(!p.allows("pythonhosted.example", Some(443)));
        assert!(!p.allows("xpythonhosted.example", Some(443)));
        assert!(!p.allows("files.pythonhosted.example", Some(80)));
        assert!(p.allows("files.pythonhosted.example", None));
        let h = HostPattern::parse("pypi.example").unwrap();
        assert_eq!(h.to_string(), "pypi.example");
        let p = HostPattern::parse("pypi.example:8080").unwrap();
        assert!(p.allows("pypi.example", Some(8080)));
        assert!(!p.allows("pypi.example", Some(443)));
    }

    #[test]
    fn an_entry_without_a_port_allows_the_web_ports_only() {
        let h = HostPattern::parse("pypi.example").unwrap();
        assert!(h.allows("pypi.example", Some(80)));
        assert!(h.allows("pypi.example", Some(443)));
        assert!(h.allows("pypi.example", None), "a lookup of the name");
        for p in [22, 25, 5432, 8080, 8443] {
            assert!(!h.allows("pypi.example", Some(p)), "{p}");
        }
        // A never-allow entry without a port refuses every port.
        assert!(h.covers("pypi.example", Some(22)));
        assert!(h.covers("pypi.example", None));
        let cfg = EgressConfig {
            allow: vec![h],
            never: vec![],
            pins: vec![],
        };
        let Admission::Refused(why) = cfg.admit("pypi.example", Some(22)) else {
            panic!("port 22 allowed by a port-less entry");
        };
        assert!(
            why.contains("port 22")
                && why.contains("pypi.example:22")
                && why.contains("80 and 443"),
            "{why}"
        );
        let Admission::Refused(why) = cfg.admit("other.example", Some(443)) else {
            panic!("another name allowed");
        };
        assert!(why.contains("not on the run's network allowlist"), "{why}");
    }

    #[test]
    fn bad_patterns_say_why() {
        for (s, want) in [
            ("", "empty"),
            ("*", "bare *"),
            ("https://pypi.example", "URL"),
            ("pypi.example/simple", "path"),
            ("pypi.example:0", "bad port"),
            ("pypi.example:99999", "bad port"),
            ("pypi.example:http", "bad port"),
            ("10.0.0.1", "IP address"),
            ("[::1]:443", "IP address"),
            ("fe80::1", "IP address"),
            ("a*.example", "may only stand first"),
            ("*.com", "top-level"),
            ("bad_name.example", "not a valid host name"),
            ("2130706433", "another notation"),
            ("0x7f000001:80", "another notation"),
            ("0x7f.0.0.1", "IP address"),
            ("127.1", "another notation"),
        ] {
            let e = HostPattern::parse(s).unwrap_err();
            assert!(e.contains(want), "{s:?}: {e}");
        }
    }

    #[test]
    fn the_proxy_refuses_names_that_are_not_host_names() {
        assert!(malformed_name("pkgs.example").is_none());
        assert!(malformed_name("_srv.pkgs.example").is_none());
        let (shown, why) = malformed_name(&"a".repeat(70_000)).unwrap();
        assert!(
            shown.len() < 100 && shown.ends_with("(70000 bytes)"),
            "{shown}"
        );
        assert!(why.contains("not a host name"));
        for n in ["a..b", "a b", "x\u{1b}[31m", "[::1]"] {
            assert!(malformed_name(n).is_some(), "{n:?}");
        }
        for n in [
            "2130706433",
            "0x7f000001",
            "127.1",
            "127.0.0.1",
            "[::ffff:127.0.0.1]",
        ] {
            let (_, why) = refused_request_name(n).unwrap();
            assert!(why.contains("IP address"), "{n:?}");
        }
        assert!(refused_request_name("pkgs.example").is_none());
    }

    #[test]
    fn pins_parse() {
        let p: ResolvePin = "Reg.example:8443:127.0.0.1".parse().unwrap();
        assert_eq!((p.host.as_str(), p.port), ("reg.example", 8443));
        let p: ResolvePin = "reg.example:443:[::1]".parse().unwrap();
        assert!(p.addr.is_loopback());
        assert!("reg.example:443".parse::<ResolvePin>().is_err());
        assert!("reg.example:x:127.0.0.1".parse::<ResolvePin>().is_err());
    }

    #[test]
    fn the_ceiling_bounds_what_a_run_may_ask_for_naming_entry_and_setting() {
        let p = |s: &str| HostPattern::parse(s).unwrap();
        let sys = EgressSystem {
            ceiling: Some(vec![
                p("registry.test"),
                p("*.mirror.test"),
                p("git.test:22"),
            ]),
            never_allow: vec![p("secret.mirror.test")],
            ..Default::default()
        };
        for ok in [
            "registry.test",
            "registry.test:443",
            "a.mirror.test",
            "*.b.mirror.test",
            "git.test:22",
        ] {
            assert_eq!(sys.may_ask(&p(ok)), Ok(()), "{ok}");
        }
        for (beyond, setting) in [
            ("other.test", "egress.ceiling"),
            ("registry.test:8080", "egress.ceiling"),
            ("mirror.test", "egress.ceiling"),
            ("*.other.test", "egress.ceiling"),
            ("git.test", "egress.ceiling"),
            ("secret.mirror.test", "egress.never_allow"),
        ] {
            let m = sys.may_ask(&p(beyond)).unwrap_err();
            assert!(m.contains(beyond) && m.contains(setting), "{beyond}: {m}");
        }
        // No ceiling: any name (never_allow still refuses).
        let open = EgressSystem::default();
        assert_eq!(open.may_ask(&p("anything.test")), Ok(()));
        // Presets: the system's hosts win and are trusted; the caller's
        // configuration meets the ceiling.
        let mut sys = sys;
        sys.presets
            .insert("crates".into(), vec![p("index.elsewhere.test")]);
        let from_caller = |_: &str| {
            Ok((
                vec![p("registry.test:4873")],
                "registry= in the project's .npmrc".into(),
            ))
        };
        let e = sys
            .admit_intent(&[], &["npm".into()], &from_caller)
            .unwrap_err();
        assert_eq!(e.0, "intent.network.allow: preset npm");
        assert!(
            e.1.contains("registry.test:4873") && e.1.contains("egress.ceiling"),
            "{e:?}"
        );
        let (allow, notes) = sys
            .admit_intent(&[p("registry.test")], &["crates".into()], &from_caller)
            .unwrap();
        assert_eq!(allow, vec![p("registry.test"), p("index.elsewhere.test")]);
        assert!(notes[0].contains("egress.presets"), "{notes:?}");
        let e = sys
            .admit_intent(&[p("x.test")], &[], &from_caller)
            .unwrap_err();
        assert_eq!(e.0, "intent.network.allow[0]");
    }

    #[test]
    fn never_wins_over_allow() {
        let cfg = EgressConfig {
            allow: vec![
                HostPattern::parse("*.corp.example").unwrap(),
                HostPattern::parse("secret.corp.example:8443").unwrap(),
            ],
            never: vec![HostPattern::parse("secret.corp.example").unwrap()],
            pins: vec![],
        };
        assert!(matches!(
            cfg.admit("secret.corp.example", Some(8443)),
            Admission::Refused(_)
        ));
        assert_eq!(
            cfg.admit("pkgs.corp.example", Some(443)),
            Admission::Allowed
        );
        assert!(matches!(
            cfg.admit("secret.corp.example", Some(443)),
            Admission::Refused(_)
        ));
        assert!(matches!(
            cfg.admit("other.example", None),
            Admission::Refused(_)
        ));
    }
}
