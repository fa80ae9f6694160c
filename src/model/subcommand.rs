//! Where a tool's subcommand starts: one rule for the classifier's policy
//! rules (`match.subcommand`) and the shadow stubs' rules, which used to
//! spell it twice and disagree (`git stash push` was a push to one of
//! them).
//!
//! For a tool whose global options we know (`git`, `gh`, `kubectl`, `aws`,
//! `npm`, `cargo`, ...), the subcommand is the first words after those
//! options and their values (`git -C sub -c a=b push`: `push`; `git stash
//! push`: `stash push`, never `push`). For any other tool it starts at the
//! first positional word, or later only past words that stand right after
//! an option (its possible value: `tool --profile prod deploy`), at most
//! two of them.

/// Global options that take a value, per tool whose subcommands are
/// matched strictly by position.
fn global_options_with_value(tool: &str) -> Option<&'static [&'static str]> {
    Some(match tool {
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

/// A container engine's management command names the kind of object its
/// verb acts on, and means the short form (`docker container stop` is
/// `docker stop`, `docker image tag` is `docker tag`): its verb may start
/// the subcommand too (1), besides the long form (`image ls`).
fn management_group(tool: &str, words: &[&str]) -> usize {
    let engine = matches!(tool, "docker" | "podman" | "nerdctl");
    (engine && matches!(words.first(), Some(&("container" | "image")))).into()
}

fn is_flag(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1
}

/// The words a subcommand is matched against, and the positions among
/// them where one may start (see the module's rule).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Positionals<'a> {
    /// The positional words, options and their known values left out.
    pub(crate) words: Vec<&'a str>,
    /// How many of the leading `words` may be option values (a subcommand
    /// may start at index 0 up to this, at most 2).
    starts: usize,
}

impl<'a> Positionals<'a> {
    /// `tool`'s arguments (without the tool's name).
    pub(crate) fn of(tool: &str, args: &[&'a str]) -> Positionals<'a> {
        let Some(with_value) = global_options_with_value(tool) else {
            let words: Vec<&str> = args.iter().copied().filter(|a| !is_flag(a)).collect();
            // Leading positionals that stand right after an option (no
            // `=`): each may be that option's value.
            let starts = args
                .iter()
                .enumerate()
                .filter(|(_, a)| !is_flag(a))
                .take_while(|(i, _)| {
                    *i > 0
                        && is_flag(args[i - 1])
                        && !args[i - 1].contains('=')
                        && args[i - 1] != "--"
                })
                .count()
                .min(2);
            let starts = starts.max(management_group(tool, &words));
            return Positionals { words, starts };
        };
        let mut words = Vec::new();
        let mut i = 0;
        let mut in_globals = true;
        while i < args.len() {
            let a = args[i];
            if in_globals && with_value.contains(&a) {
                i += 2;
                continue;
            }
            // `cargo +nightly build`: a toolchain, not the subcommand.
            if in_globals && a.starts_with('+') && matches!(tool, "cargo" | "rustup") {
                i += 1;
                continue;
            }
            if a == "--" && in_globals {
                i += 1;
                continue;
            }
            if !is_flag(a) {
                in_globals = false;
                words.push(a);
            }
            i += 1;
        }
        let starts = management_group(tool, &words);
        Positionals { words, starts }
    }

    /// Does the subcommand `sub` (words) start where one may?
    pub(crate) fn starts_with<S: AsRef<str>>(&self, sub: &[S]) -> bool {
        (0..=self.starts).any(|start| {
            self.words
                .get(start..start + sub.len())
                .is_some_and(|w| w.iter().zip(sub).all(|(a, b)| *a == b.as_ref()))
        })
    }

    /// Where the words after the first place `sub` starts begin.
    pub(crate) fn after<S: AsRef<str>>(&self, sub: &[S]) -> Option<usize> {
        (0..=self.starts).find_map(|start| {
            self.words
                .get(start..start + sub.len())
                .filter(|w| w.iter().zip(sub).all(|(a, b)| *a == b.as_ref()))
                .map(|_| start + sub.len())
        })
    }

    /// The first positional word, if any (the subcommand for a tool whose
    /// options are known).
    pub(crate) fn first(&self) -> Option<&'a str> {
        self.words.first().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tool: &str, args: &str, sub: &str) -> bool {
        let a: Vec<&str> = args.split_whitespace().collect();
        let s: Vec<&str> = sub.split_whitespace().collect();
        Positionals::of(tool, &a).starts_with(&s)
    }

    /// One rule for both callers: the cases each of them was fixed for.
    #[test]
    fn a_subcommand_starts_where_no_option_value_can_stand() {
        for yes in [
            "push origin main",
            "--no-pager push",
            "-C dir push",
            "-C dir -c a=b push -f",
            "--git-dir .git push",
        ] {
            assert!(at("git", yes, "push"), "{yes}");
        }
        for no in [
            "stash push",
            "stash push -m x",
            "-c a=b stash push",
            "log push",
        ] {
            assert!(!at("git", no, "push"), "{no}");
        }
        assert!(at("gh", "--repo o/r pr merge 4", "pr merge"));
        assert!(!at("gh", "api pr merge", "pr merge"));
        assert!(at("cargo", "+nightly publish", "publish"));
        // A tool whose options are not known: the first positional, or
        // past words that may be option values.
        assert!(at("frob", "deploy prod", "deploy"));
        assert!(at("frob", "--profile prod deploy", "deploy"));
        assert!(!at("frob", "logs deploy", "deploy"));
        assert!(!at("frob", "--profile=prod logs deploy", "deploy"));
        // A container engine's management command means the short form.
        assert!(at("docker", "container stop c", "stop"));
        assert!(at("podman", "image tag a b", "tag"));
        assert!(at("nerdctl", "container kill c", "kill"));
        assert!(at("docker", "image ls", "image ls"));
        assert!(!at("docker", "network disconnect n c", "disconnect"));
        assert!(!at("docker", "logs container stop", "stop"));
    }
}
