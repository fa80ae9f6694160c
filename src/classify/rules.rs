//! Matching a command against the policy's rules: subcommands by
//! position (per tool, after its global options), flags in any position,
//! argument patterns.

use super::{Ctx, Word, has_flag, is_flag};
use crate::policy::Level;

/// Global options that take a value, per tool whose subcommands are
/// matched strictly by position (`git -C dir stash push`: the subcommand
/// is `stash push`, never `push`).
fn global_options_with_value(base: &str) -> Option<&'static [&'static str]> {
    Some(match base {
        "git" => &[
            "-C",
            "-c",
            "--git-dir",
            "--work-tree",
            "--namespace",
            "--super-prefix",
            "--config-env",
            "--exec-path",
            "--list-cmds",
            "--attr-source",
        ],
        "gh" => &["-R", "--repo", "--hostname"],
        "helm" => &[
            "-n",
            "--namespace",
            "--kube-context",
            "--kubeconfig",
            "--registry-config",
            "--repository-config",
            "--repository-cache",
        ],
        "pulumi" => &["-C", "--cwd", "-s", "--stack", "--color", "--logflow", "-v"],
        "aws" => &[
            "--region",
            "--profile",
            "--output",
            "--endpoint-url",
            "--query",
            "--ca-bundle",
            "--cli-read-timeout",
            "--cli-connect-timeout",
            "--color",
        ],
        "npm" | "pnpm" | "yarn" | "bun" => &[
            "--prefix",
            "-C",
            "--dir",
            "--cwd",
            "-w",
            "--workspace",
            "--filter",
            "-F",
            "--loglevel",
        ],
        "cargo" | "rustup" => &["-C", "-Z", "--config", "--color", "--toolchain"],
        "go" | "terraform" | "tofu" | "terragrunt" | "openssl" | "brew" | "etcdctl" | "deno"
        | "pip" | "pip3" | "uv" | "pipx" | "gem" | "docker" | "podman" | "kubectl" => &[
            "-C",
            "--endpoints",
            "-H",
            "--host",
            "--context",
            "--config",
            "-n",
            "--namespace",
            "--kubeconfig",
            "--cluster",
            "--user",
            "-s",
            "--server",
        ],
        _ => return None,
    })
}

/// The words a rule's `subcommand` is matched against, and whether it must
/// match at their start (tools we know the global options of) or anywhere
/// among the first three (others).
fn subcommand_words<'a>(base: &str, texts: &[&'a str]) -> (Vec<&'a str>, bool) {
    let Some(with_value) = global_options_with_value(base) else {
        return (
            texts.iter().copied().filter(|a| !is_flag(a)).collect(),
            false,
        );
    };
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_globals = true;
    while i < texts.len() {
        let a = texts[i];
        if in_globals && with_value.contains(&a) {
            i += 2;
            continue;
        }
        // `cargo +nightly build`: a toolchain, not the subcommand.
        if in_globals && a.starts_with('+') && matches!(base, "cargo" | "rustup") {
            i += 1;
            continue;
        }
        if a == "--" && in_globals {
            i += 1;
            continue;
        }
        if !is_flag(a) {
            in_globals = false;
            out.push(a);
        }
        i += 1;
    }
    (out, true)
}

fn subcommand_matches(positionals: &[&str], sub: &[String], strict: bool) -> bool {
    let matches_at = |w: &[&str]| w.len() == sub.len() && w.iter().zip(sub).all(|(a, b)| a == b);
    if strict {
        positionals.len() >= sub.len() && matches_at(&positionals[..sub.len()])
    } else {
        positionals.windows(sub.len()).take(3).any(matches_at)
    }
}

impl Ctx<'_> {
    pub(super) fn match_rules(&mut self, base: &str, args: &[Word], shown: &str) {
        let texts: Vec<&str> = args.iter().map(|w| w.text()).collect();
        let (positionals, strict) = subcommand_words(base, &texts);
        let policy = self.policy;
        // The other layers' conclusion and the workspace's additions are
        // found separately and BOTH scored: a workspace rule can add a
        // finding to a command, never stand in for what the system policy
        // says about it (a READ rule for an unknown command would otherwise
        // replace `exec.unknown`).
        let mut best: Option<&crate::policy::Rule> = None;
        let mut added: Option<&crate::policy::Rule> = None;
        let mut any_rule = false;
        for r in policy.rules_for(base) {
            any_rule |= !r.from_workspace;
            if !r.subcommands.is_empty()
                && !r
                    .subcommands
                    .iter()
                    .any(|sub| subcommand_matches(&positionals, sub, strict))
            {
                continue;
            }
            if !r.flags_any.is_empty()
                && !r
                    .flags_any
                    .iter()
                    .any(|f| texts.iter().any(|a| has_flag(a, f)))
            {
                continue;
            }
            if !r
                .flags_all
                .iter()
                .all(|f| texts.iter().any(|a| has_flag(a, f)))
            {
                continue;
            }
            if let Some(re) = &r.arg_regex
                && !texts.iter().any(|a| re.is_match(a))
            {
                continue;
            }
            let slot = if r.from_workspace {
                &mut added
            } else {
                &mut best
            };
            *slot = match *slot {
                Some(b) if (b.level, b.score) >= (r.level, r.score) => Some(b),
                _ => Some(r),
            };
        }
        if let Some(r) = added {
            self.push(&r.id, r.level, r.score, r.reason.clone(), shown, r.approval);
            if r.level >= Level::Write {
                self.blast_radius(base, args, shown);
            }
        }
        match best {
            Some(r) => {
                self.push(&r.id, r.level, r.score, r.reason.clone(), shown, r.approval);
                if r.level >= Level::Write {
                    self.blast_radius(base, args, shown);
                }
            }
            None => {
                // No rule at all, or rules for other uses of this command
                // only: the policy does not vouch for this use.
                let reason = if any_rule {
                    format!(
                        "no rule covers this use of {base}; its effects are judged by the rehearsal"
                    )
                } else {
                    format!("{base} is not in the policy; its effects are judged by the rehearsal")
                };
                self.add("exec.unknown", reason, shown);
                if self.policy.builtin("exec.unknown").0 >= Level::Write {
                    self.blast_radius(base, args, shown);
                }
            }
        }
    }
}
