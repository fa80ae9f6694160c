//! `view:` in a policy file: what the rehearsal's view hides besides the
//! built-in masks (see `docs/sandbox-view.md`); every layer may only add.

use serde::{Deserialize, Serialize};

use super::PolicyError;

/// `view:` in a policy file.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ViewPolicyConfig {
    /// Paths to mask in every rehearsal: absolute, or `~/` for the home
    /// the rehearsal shows, each with the reason the record gives.
    #[serde(default)]
    pub mask: Vec<ViewMaskConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ViewMaskConfig {
    pub path: String,
    pub reason: String,
}

/// A `view.mask` entry checked: a path that names something (absolute or
/// `~/`-relative, without `..`, not `/` or the home itself) and a reason.
pub(crate) fn validate_view_mask(file: &str, m: &ViewMaskConfig) -> Result<(), PolicyError> {
    let bad = |message: &str| PolicyError::Parse {
        file: file.into(),
        message: format!("view.mask {:?}: {message}", m.path),
    };
    let rest = m
        .path
        .strip_prefix("~/")
        .or_else(|| m.path.strip_prefix('/'))
        .ok_or_else(|| bad("must be absolute or start with ~/"))?;
    let rest = rest.trim_end_matches('/');
    if rest.is_empty()
        || rest
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(bad(
            "must name a file or directory below / or ~/, without . or ..",
        ));
    }
    if m.reason.trim().is_empty() {
        return Err(bad("needs a reason (the record and the findings give it)"));
    }
    Ok(())
}
