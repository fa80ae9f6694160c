//! Merging parsed policy layers into a [`Policy`], in one fixed sequence:
//! the built-in defaults, each system layer in order
//! ([`Merged::add_system_layer`]: may change anything, later wins by rule
//! id), at most one workspace layer ([`Merged::add_workspace_layer`]: may
//! only tighten), then [`Merged::into_policy`].
//!
//! [`Policy::merge`] runs the whole sequence; the policy cache (see
//! `cache.rs`) runs it cut in two: the system layers' [`Merged`] is kept
//! (in memory and on disk), and each run adds its workspace layer to a copy
//! of it with the same function. The two paths are the same computation,
//! which `cache.rs`'s tests check on the shipped policy.

use super::egress::{self, EgressPolicyConfig};
use super::{
    ALWAYS_PROTECTED, BUILTIN_DEFAULTS, BuiltinConfig, Policy, PolicyError, PolicyFile, Rule,
    ThresholdsConfig, rule_err, stubs, validate_rule,
};
use crate::model::stubs::StubRule;
use crate::workspace::paths::PathMatcher;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the layers added so far set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Merged {
    thresholds: ThresholdsConfig,
    rules: Vec<Rule>,
    protected: Vec<String>,
    builtin: BTreeMap<String, BuiltinConfig>,
    /// The layers' names, in order.
    sources: Vec<String>,
    stubs: BTreeMap<String, StubRule>,
    /// The `egress:` sections as written, in order: what `egress` was
    /// built from (kept so a cached copy can rebuild it, see
    /// [`Merged::rebuild_egress`]).
    egress_layers: Vec<(String, EgressPolicyConfig)>,
    #[serde(skip)]
    egress: crate::egress::EgressSystem,
    /// The command index of `rules[..n]` as `(index, n)`, if built since
    /// the last system layer ([`Merged::index_commands`]).
    index: Option<(CommandIndex, usize)>,
    /// `workspace_bound.allow_homes` as the system layers set it.
    allow_homes: bool,
    /// `view.mask` of every layer so far: (path, reason).
    #[serde(default)]
    view_masks: Vec<(String, String)>,
    /// `inline_code.trust` as the system layers set it (a later layer's
    /// list replaces an earlier one's).
    trusted_inline_code: Vec<String>,
}

impl Merged {
    /// Nothing but the built-in defaults.
    pub(super) fn new() -> Self {
        Merged {
            thresholds: ThresholdsConfig {
                approval: 50,
                block: 90,
            },
            rules: Vec::new(),
            protected: ALWAYS_PROTECTED.iter().map(|p| p.to_string()).collect(),
            builtin: BUILTIN_DEFAULTS
                .iter()
                .map(|(id, level, score)| {
                    let b = BuiltinConfig {
                        level: *level,
                        score: *score,
                    };
                    (id.to_string(), b)
                })
                .collect(),
            sources: Vec::new(),
            stubs: BTreeMap::new(),
            egress_layers: Vec::new(),
            egress: crate::egress::EgressSystem::default(),
            index: None,
            allow_homes: false,
            view_masks: Vec::new(),
            trusted_inline_code: Vec::new(),
        }
    }

    /// The layers' names so far, in order.
    pub(super) fn sources(&self) -> &[String] {
        &self.sources
    }

    /// A system layer: may change anything; a rule replaces the one with
    /// its id. Every pattern is checked (rule regexes compiled) here.
    pub(super) fn add_system_layer(
        &mut self,
        name: &str,
        f: &PolicyFile,
    ) -> Result<(), PolicyError> {
        if let Some(t) = f.thresholds {
            self.thresholds = t;
        }
        self.index = None;
        for rc in &f.rules {
            let r = validate_rule(name, rc)?;
            match self.rules.iter_mut().find(|x| x.id == r.id) {
                Some(slot) => *slot = r,
                None => self.rules.push(r),
            }
        }
        for p in &f.protected_paths {
            self.add_protected(name, p)?;
        }
        for (id, b) in &f.builtin {
            if !self.builtin.contains_key(id) {
                return Err(rule_err(name, id, "builtin", "is not a built-in check"));
            }
            self.builtin.insert(id.clone(), b.clone());
        }
        for (id, c) in &f.stubs {
            let r = stubs::validate_stub(&format!("stubs.{id}"), id, c, "policy", true).map_err(
                |message| PolicyError::Parse {
                    file: name.into(),
                    message,
                },
            )?;
            self.stubs.insert(id.clone(), r);
        }
        if let Some(e) = &f.egress {
            egress::merge_system(&mut self.egress, name, e)?;
            self.egress_layers.push((name.into(), e.clone()));
        }
        if let Some(b) = f.workspace_bound {
            self.allow_homes = b.allow_homes;
        }
        self.add_view_masks(name, f)?;
        if let Some(c) = &f.inline_code {
            self.trusted_inline_code = c.trust.clone();
        }
        self.sources.push(name.into());
        Ok(())
    }

    /// The workspace's layer (agent-writable): may only tighten; its new
    /// rules are scored next to the others ([`Rule::from_workspace`]).
    pub(super) fn add_workspace_layer(
        &mut self,
        name: &str,
        f: &PolicyFile,
    ) -> Result<(), PolicyError> {
        if let Some(t) = f.thresholds {
            for (field, new, cur) in [
                ("approval", t.approval, self.thresholds.approval),
                ("block", t.block, self.thresholds.block),
            ] {
                if new > cur {
                    return Err(rule_err(
                        name,
                        "thresholds",
                        field,
                        "a workspace policy may only lower thresholds",
                    ));
                }
            }
            self.thresholds = t;
        }
        for rc in &f.rules {
            let r = validate_rule(name, rc)?;
            match self.rules.iter_mut().find(|x| x.id == r.id) {
                Some(slot) => {
                    tighten_rule(name, slot, &r)?;
                    let from_workspace = slot.from_workspace;
                    *slot = Rule {
                        from_workspace,
                        ..r
                    };
                }
                None => self.rules.push(Rule {
                    from_workspace: true,
                    ..r
                }),
            }
        }
        for p in &f.protected_paths {
            self.add_protected(name, p)?;
        }
        for (id, b) in &f.builtin {
            let Some(cur) = self.builtin.get(id) else {
                return Err(rule_err(name, id, "builtin", "is not a built-in check"));
            };
            if b.level < cur.level || b.score < cur.score {
                return Err(rule_err(
                    name,
                    id,
                    "builtin",
                    "a workspace policy may only raise a check's level and score",
                ));
            }
            self.builtin.insert(id.clone(), b.clone());
        }
        if !f.stubs.is_empty() {
            return Err(PolicyError::Parse {
                file: name.into(),
                message: "stubs: a workspace policy may not shadow tools (stubs change what a rehearsal shows); put stubs in a system policy file or the envelope".into(),
            });
        }
        if let Some(e) = &f.egress {
            egress::merge_workspace(&mut self.egress, name, e)?;
        }
        if f.workspace_bound.is_some_and(|b| b.allow_homes) {
            return Err(rule_err(
                name,
                "workspace_bound",
                "allow_homes",
                "only a system policy file (/etc/dryrun/policy.d) may let a home directory be a workspace",
            ));
        }
        // Masks only hide more: a workspace may add them as a system file may.
        self.add_view_masks(name, f)?;
        if f.inline_code.as_ref().is_some_and(|c| !c.trust.is_empty()) {
            return Err(rule_err(
                name,
                "inline_code",
                "trust",
                "only a system policy file (/etc/dryrun/policy.d) may trust an interpreter's inline code",
            ));
        }
        self.sources.push(name.into());
        Ok(())
    }

    fn add_view_masks(&mut self, file: &str, f: &PolicyFile) -> Result<(), PolicyError> {
        for m in f.view.iter().flat_map(|v| v.mask.iter()) {
            super::view::validate_view_mask(file, m)?;
            let entry = (m.path.clone(), m.reason.clone());
            if !self.view_masks.contains(&entry) {
                self.view_masks.push(entry);
            }
        }
        Ok(())
    }

    fn add_protected(&mut self, file: &str, p: &String) -> Result<(), PolicyError> {
        PathMatcher::at_any_depth_lazy(std::slice::from_ref(p)).map_err(|e| {
            PolicyError::Parse {
                file: file.into(),
                message: format!("protected_paths: {e}"),
            }
        })?;
        if !self.protected.contains(p) {
            self.protected.push(p.clone());
        }
        Ok(())
    }

    /// Build the command index of the rules so far (a workspace layer then
    /// only adds its own rules to it: it cannot change what a rule names).
    pub(super) fn index_commands(&mut self) {
        self.index = Some((CommandIndex::build(&self.rules), self.rules.len()));
    }

    /// Whether a copy read back from the cache is whole: its command index
    /// (if any) covers its rules exactly, in order.
    pub(super) fn index_is_sound(&self) -> bool {
        match &self.index {
            None => true,
            Some((ix, n)) => *n == self.rules.len() && ix.is_sound(&self.rules),
        }
    }

    /// `egress` again from `egress_layers` (for a copy read back from the
    /// cache, which does not carry it); `None` if a section no longer
    /// parses.
    pub(super) fn rebuild_egress(&mut self) -> Option<()> {
        let mut e = crate::egress::EgressSystem::default();
        for (name, c) in &self.egress_layers {
            egress::merge_system(&mut e, name, c).ok()?;
        }
        self.egress = e;
        Some(())
    }

    /// The policy, with `hash` (of every layer's name and text).
    pub(super) fn into_policy(self, hash: String) -> Policy {
        let by_command = match self.index {
            Some((mut ix, n)) => {
                ix.add_rules(&self.rules, n);
                ix
            }
            None => CommandIndex::build(&self.rules),
        };
        // Each pattern was checked when its layer was added; the set is
        // built at the first look-up.
        let protected_matcher = PathMatcher::deferred_any_depth(&self.protected);
        Policy {
            approval_threshold: self.thresholds.approval,
            block_threshold: self.thresholds.block,
            rules: self.rules,
            by_command,
            protected_matcher: std::sync::Arc::new(protected_matcher),
            protected_paths: self.protected,
            builtin: self.builtin,
            hash,
            sources: self.sources,
            stubs: self.stubs.into_values().collect(),
            egress: self.egress,
            allow_home_workspaces: self.allow_homes,
            view_masks: self.view_masks,
            trusted_inline_code: self.trusted_inline_code,
            fleet_version: None,
        }
    }
}

/// Which rules name a command: (rule index, index in that rule's
/// `commands`) pairs sorted by the command's name, then by rule and
/// position; a look-up is a binary search, and no name is copied.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct CommandIndex(Vec<(u32, u32)>);

impl CommandIndex {
    fn name<'a>(rules: &'a [Rule], &(r, c): &(u32, u32)) -> &'a str {
        &rules[r as usize].commands[c as usize]
    }

    fn entries(rules: &[Rule], from: usize) -> impl Iterator<Item = (u32, u32)> + '_ {
        (from..rules.len())
            .flat_map(|i| (0..rules[i].commands.len()).map(move |c| (i as u32, c as u32)))
    }

    fn build(rules: &[Rule]) -> Self {
        let mut v: Vec<(u32, u32)> = Self::entries(rules, 0).collect();
        v.sort_by(|a, b| {
            Self::name(rules, a)
                .cmp(Self::name(rules, b))
                .then(a.cmp(b))
        });
        CommandIndex(v)
    }

    /// `rules[from..]` (appended since the index was built) added.
    fn add_rules(&mut self, rules: &[Rule], from: usize) {
        for e in Self::entries(rules, from) {
            let key = (Self::name(rules, &e), e);
            let at = self.0.partition_point(|x| (Self::name(rules, x), *x) < key);
            self.0.insert(at, e);
        }
    }

    /// Every command of every rule once, in range, in order.
    fn is_sound(&self, rules: &[Rule]) -> bool {
        let in_range = |&(r, c): &(u32, u32)| {
            rules
                .get(r as usize)
                .is_some_and(|x| (c as usize) < x.commands.len())
        };
        self.0.len() == Self::entries(rules, 0).count()
            && self.0.iter().all(in_range)
            && self
                .0
                .windows(2)
                .all(|w| (Self::name(rules, &w[0]), w[0]) < (Self::name(rules, &w[1]), w[1]))
    }

    /// The entries for `command`, in rule order.
    pub(super) fn naming(&self, rules: &[Rule], command: &str) -> &[(u32, u32)] {
        let lo = self.0.partition_point(|x| Self::name(rules, x) < command);
        let n = self.0[lo..].partition_point(|x| Self::name(rules, x) == command);
        &self.0[lo..lo + n]
    }
}

/// A workspace layer's `r` in place of the rule `slot` with its id: only
/// stricter, and matching exactly the same commands.
fn tighten_rule(file: &str, slot: &Rule, r: &Rule) -> Result<(), PolicyError> {
    let only = |field: &str, what: &str| {
        Err(rule_err(
            file,
            &r.id,
            field,
            format!("a workspace policy may only {what}"),
        ))
    };
    if r.level < slot.level {
        return only("level", "raise a rule's level");
    }
    if r.score < slot.score {
        return only("score", "raise a rule's score");
    }
    if slot.approval && !r.approval {
        return Err(rule_err(
            file,
            &r.id,
            "approval",
            "a workspace policy may not drop an approval requirement",
        ));
    }
    if r.commands != slot.commands
        || r.subcommands != slot.subcommands
        || r.flags_any != slot.flags_any
        || r.flags_all != slot.flags_all
        || r.arg_regex.as_ref().map(|x| x.as_str()) != slot.arg_regex.as_ref().map(|x| x.as_str())
    {
        return Err(rule_err(
            file,
            &r.id,
            "match",
            "a workspace policy may not change what a shipped rule matches; add a rule with a new id",
        ));
    }
    Ok(())
}

#[cfg(test)]
impl Policy {
    /// Everything a policy holds, as text, to compare two policies.
    pub(super) fn canonical(&self) -> String {
        serde_json::json!({
            "approval": self.approval_threshold,
            "block": self.block_threshold,
            "rules": self.rules,
            "by_command": self.by_command.0,
            "protected": self.protected_paths,
            "builtin": self.builtin,
            "hash": self.hash,
            "sources": self.sources,
            "stubs": self.stubs,
            "egress": format!("{:?}", self.egress),
        })
        .to_string()
    }
}
