//! `intent.network` as the envelope writes it: `none` (the default), or
//! `{allow: [PATTERN, ...], services: [ENDPOINT, ...]}` with either list
//! alone. Parsed strictly here; the patterns are validated by
//! [`super::parse_patterns`] and the services by
//! [`crate::model::ServiceEndpoint::parse`] when the envelope is (what the
//! system policy allows is the engine's check, `super::service`).

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::ServiceEndpoint;

/// At most this many services per run.
pub const MAX_SERVICES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum NetworkIntent {
    /// No network (only loopback in the sandbox), as always.
    #[default]
    None,
    /// Names reachable through the run's egress proxy (`allow`, absent
    /// when only services are declared), and host services forwarded into
    /// the sandbox.
    Declared {
        allow: Option<Vec<String>>,
        services: Vec<String>,
    },
}

impl NetworkIntent {
    /// The allowlist entries (none for `none`).
    pub(crate) fn allow(&self) -> &[String] {
        match self {
            NetworkIntent::Declared { allow: Some(a), .. } => a,
            _ => &[],
        }
    }

    /// The declared services as written (none for `none`).
    pub(crate) fn services(&self) -> &[String] {
        match self {
            NetworkIntent::Declared { services, .. } => services,
            NetworkIntent::None => &[],
        }
    }

    /// The validated allowlist's names and the registry presets it names
    /// (`npm`, `pypi`, ...: [`super::preset`]); `{allow: []}` is an error
    /// (write `none`).
    pub(crate) fn patterns(
        &self,
    ) -> Result<(Vec<super::HostPattern>, Vec<String>), (String, String)> {
        let field = "intent.network.allow";
        if matches!(self, NetworkIntent::Declared { allow: Some(a), .. } if a.is_empty()) {
            return Err((
                field.into(),
                "is empty; list the hosts the command may reach, or write network: none".into(),
            ));
        }
        let all = self.allow();
        if all.len() > super::MAX_ALLOW {
            return Err((
                field.into(),
                format!("at most {} entries", super::MAX_ALLOW),
            ));
        }
        let mut names = Vec::new();
        let mut presets: Vec<String> = Vec::new();
        for (i, s) in all.iter().enumerate() {
            if super::preset::is_preset(s) {
                let p = s.trim().to_string();
                if !presets.contains(&p) {
                    presets.push(p);
                }
            } else {
                names.push(super::HostPattern::parse(s).map_err(|m| (format!("{field}[{i}]"), m))?);
            }
        }
        Ok((names, presets))
    }

    /// The validated allowlist (names, presets) and services, the error
    /// naming the entry.
    pub(crate) fn validated(&self) -> ValidatedNetwork {
        let patterns = self.patterns()?;
        let field = "intent.network.services";
        let items = self.services();
        if matches!(self, NetworkIntent::Declared { allow: None, services } if services.is_empty())
        {
            return Err((
                field.into(),
                "is empty; list the host services the command talks to, or write network: none"
                    .into(),
            ));
        }
        if items.len() > MAX_SERVICES {
            return Err((field.into(), format!("at most {MAX_SERVICES} entries")));
        }
        let mut services: Vec<ServiceEndpoint> = Vec::new();
        for (i, s) in items.iter().enumerate() {
            let e = ServiceEndpoint::parse(s).map_err(|m| (format!("{field}[{i}]"), m))?;
            if !services.contains(&e) {
                services.push(e);
            }
        }
        Ok((patterns, services))
    }

    /// Add entries (`--allow-net`), turning `none` into an allowlist.
    pub(crate) fn add(&mut self, more: &[String]) {
        self.extend(more, &[]);
    }

    /// Add services (`--service`).
    pub(crate) fn add_services(&mut self, more: &[String]) {
        self.extend(&[], more);
    }

    fn extend(&mut self, allow_more: &[String], services_more: &[String]) {
        if allow_more.is_empty() && services_more.is_empty() {
            return;
        }
        let (mut allow, mut services) = match std::mem::take(self) {
            NetworkIntent::None => (None, Vec::new()),
            NetworkIntent::Declared { allow, services } => (allow, services),
        };
        if !allow_more.is_empty() {
            let list = allow.get_or_insert_with(Vec::new);
            for m in allow_more {
                if !list.contains(m) {
                    list.push(m.clone());
                }
            }
        }
        for m in services_more {
            if !services.contains(m) {
                services.push(m.clone());
            }
        }
        *self = NetworkIntent::Declared { allow, services };
    }
}

/// The allowlist's patterns and the declared services, or the field and
/// what is wrong with it.
pub(crate) type ValidatedNetwork =
    Result<((Vec<super::HostPattern>, Vec<String>), Vec<ServiceEndpoint>), (String, String)>;

impl Serialize for NetworkIntent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            NetworkIntent::None => s.serialize_str("none"),
            NetworkIntent::Declared { allow, services } => {
                // An envelope with an allowlist alone serializes (and so
                // hashes) as it always did.
                let n = usize::from(allow.is_some()) + usize::from(!services.is_empty());
                let mut m = s.serialize_map(Some(n))?;
                if let Some(a) = allow {
                    m.serialize_entry("allow", a)?;
                }
                if !services.is_empty() {
                    m.serialize_entry("services", services)?;
                }
                m.end()
            }
        }
    }
}

const EXPECTED: &str = "none, a list of hosts, or {allow: [\"host\", \"*.suffix\", \"host:port\", \"npm\" (a registry preset)], services: [\"127.0.0.1:PORT\", \"/path/to/socket\"]} (either list alone)";

struct NetworkVisitor;

impl<'de> Visitor<'de> for NetworkVisitor {
    type Value = NetworkIntent;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<NetworkIntent, E> {
        match v {
            "none" => Ok(NetworkIntent::None),
            other => Err(E::custom(format!(
                "unknown network {other:?}; expected {EXPECTED}"
            ))),
        }
    }

    /// A bare list is the allowlist alone (`network: [npm, registry.test]`).
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<NetworkIntent, A::Error> {
        let mut allow = Vec::new();
        while let Some(s) = seq.next_element::<String>()? {
            allow.push(s);
        }
        Ok(NetworkIntent::Declared {
            allow: Some(allow),
            services: Vec::new(),
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NetworkIntent, A::Error> {
        let mut allow: Option<Vec<String>> = None;
        let mut services: Option<Vec<String>> = None;
        while let Some(key) = map.next_key::<String>()? {
            let slot = match key.as_str() {
                "allow" => &mut allow,
                "services" => &mut services,
                _ => {
                    return Err(de::Error::custom(format!(
                        "unknown field {key:?} in network; expected {EXPECTED}"
                    )));
                }
            };
            if slot.is_some() {
                return Err(de::Error::custom(format!(
                    "duplicate field {key} in network"
                )));
            }
            *slot = Some(map.next_value()?);
        }
        if allow.is_none() && services.is_none() {
            return Err(de::Error::custom(format!("network: expected {EXPECTED}")));
        }
        Ok(NetworkIntent::Declared {
            allow,
            services: services.unwrap_or_default(),
        })
    }
}

impl<'de> Deserialize<'de> for NetworkIntent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NetworkVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<NetworkIntent, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    #[test]
    fn services_alone_or_with_an_allowlist() {
        let n = parse("{services: ['127.0.0.1:5432', /run/pg.sock]}").unwrap();
        let (allow, services) = n.validated().unwrap();
        assert!(allow.0.is_empty());
        assert_eq!(services.len(), 2);
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"services":["127.0.0.1:5432","/run/pg.sock"]}"#
        );
        let n = parse("{allow: [pypi.example], services: ['[::1]:6379']}").unwrap();
        let (allow, services) = n.validated().unwrap();
        assert_eq!((allow.0.len(), services.len()), (1, 1));
        // An allowlist alone serializes as before (the envelope hash).
        let n = parse("{allow: [pypi.example]}").unwrap();
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"allow":["pypi.example"]}"#
        );
    }

    #[test]
    fn bad_services_name_the_entry() {
        let (f, m) = parse("{services: ['127.0.0.1:5432', '10.1.2.3:5432']}")
            .unwrap()
            .validated()
            .unwrap_err();
        assert_eq!(f, "intent.network.services[1]");
        assert!(m.contains("loopback"), "{m}");
        let (f, _) = parse("{services: []}").unwrap().validated().unwrap_err();
        assert_eq!(f, "intent.network.services");
        assert!(parse("{service: ['127.0.0.1:1']}").is_err());
        assert!(parse("{}").is_err());
    }

    #[test]
    fn flags_add_to_either_list() {
        let mut n = NetworkIntent::None;
        n.add_services(&["127.0.0.1:5432".into()]);
        assert_eq!(n.allow(), &[] as &[String]);
        n.add(&["pypi.example".into()]);
        n.add_services(&["127.0.0.1:5432".into()]);
        assert_eq!(n.services(), &["127.0.0.1:5432".to_string()]);
        assert_eq!(n.allow(), &["pypi.example".to_string()]);
    }
}
