//! `intent.network` as the envelope writes it: `none` (the default) or
//! `{allow: [PATTERN, ...]}`. Parsed strictly here; the patterns are
//! validated by [`super::parse_patterns`] when the envelope is.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum NetworkIntent {
    /// No network (only loopback in the sandbox), as always.
    #[default]
    None,
    /// Names reachable through the run's egress proxy.
    Allow(Vec<String>),
}

impl NetworkIntent {
    /// The allowlist entries (none for `none`).
    pub(crate) fn allow(&self) -> &[String] {
        match self {
            NetworkIntent::None => &[],
            NetworkIntent::Allow(a) => a,
        }
    }

    /// The validated allowlist; `{allow: []}` is an error (write `none`).
    pub(crate) fn patterns(&self) -> Result<Vec<super::HostPattern>, (String, String)> {
        if matches!(self, NetworkIntent::Allow(a) if a.is_empty()) {
            return Err((
                "intent.network.allow".into(),
                "is empty; list the hosts the command may reach, or write network: none".into(),
            ));
        }
        super::parse_patterns("intent.network.allow", self.allow())
    }

    /// Add entries (`--allow-net`), turning `none` into an allowlist.
    pub(crate) fn add(&mut self, more: &[String]) {
        if more.is_empty() {
            return;
        }
        let mut list = self.allow().to_vec();
        for m in more {
            if !list.contains(m) {
                list.push(m.clone());
            }
        }
        *self = NetworkIntent::Allow(list);
    }
}

impl Serialize for NetworkIntent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            NetworkIntent::None => s.serialize_str("none"),
            NetworkIntent::Allow(a) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("allow", a)?;
                m.end()
            }
        }
    }
}

const EXPECTED: &str = "none, or {allow: [\"host\", \"*.suffix\", \"host:port\"]}";

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

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NetworkIntent, A::Error> {
        let mut allow: Option<Vec<String>> = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != "allow" {
                return Err(de::Error::custom(format!(
                    "unknown field {key:?} in network; expected {EXPECTED}"
                )));
            }
            if allow.is_some() {
                return Err(de::Error::custom("duplicate field allow in network"));
            }
            allow = Some(map.next_value()?);
        }
        let allow =
            allow.ok_or_else(|| de::Error::custom(format!("network: expected {EXPECTED}")))?;
        Ok(NetworkIntent::Allow(allow))
    }
}

impl<'de> Deserialize<'de> for NetworkIntent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NetworkVisitor)
    }
}
