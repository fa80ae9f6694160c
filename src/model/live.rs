//! How the live lane carries a run out: the envelope's `live.mode` and
//! `live.network`, kept in the run record as the same strings.

use serde::{Deserialize, Serialize};

/// `apply` (write the reviewed change set) or `rerun` (run the command
/// again for real, then compare).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LiveMode {
    #[default]
    Apply,
    Rerun,
}

impl LiveMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LiveMode::Apply => "apply",
            LiveMode::Rerun => "rerun",
        }
    }
}

impl std::fmt::Display for LiveMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The network a live rerun gets: `none` or `host`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LiveNetwork {
    #[default]
    None,
    Host,
}

impl LiveNetwork {
    pub fn as_str(self) -> &'static str {
        match self {
            LiveNetwork::None => "none",
            LiveNetwork::Host => "host",
        }
    }
}

impl std::fmt::Display for LiveNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialize_to_the_strings_records_already_hold() {
        for m in [LiveMode::Apply, LiveMode::Rerun] {
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{m}\""));
            let back: LiveMode = serde_json::from_str(&format!("\"{}\"", m.as_str())).unwrap();
            assert_eq!(back, m);
        }
        for n in [LiveNetwork::None, LiveNetwork::Host] {
            assert_eq!(serde_json::to_string(&n).unwrap(), format!("\"{n}\""));
            let back: LiveNetwork = serde_json::from_str(&format!("\"{}\"", n.as_str())).unwrap();
            assert_eq!(back, n);
        }
        assert_eq!(LiveMode::Apply.as_str(), "apply");
        assert_eq!(LiveMode::Rerun.as_str(), "rerun");
        assert_eq!(LiveNetwork::None.as_str(), "none");
        assert_eq!(LiveNetwork::Host.as_str(), "host");
    }
}
