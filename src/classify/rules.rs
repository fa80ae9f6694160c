//! Matching a command against the policy's rules: subcommands by
//! position (where `model::subcommand` says one starts, the same rule as the shadow stubs'), flags in any position,
//! argument patterns.

use super::forms::{help_request, interactive_subcommand, listing_form, read_form_of};
use super::principles::Principle;
use super::tables::harmless_pager;
use super::words::{
    ACTION_WORDS, CHANGE_VERBS, NETWORK_SUBCOMMAND_FIRST, READ_PREFIXES, READ_VERBS,
    SUBCOMMAND_FIRST, UNKNOWN_CHANGE_FLAGS, UNKNOWN_CHANGE_PREFIXES, UNKNOWN_CHANGE_VERBS,
    UNKNOWN_STATE_VERBS, collection_listing, sql_change, verb_parts,
};
use super::{Ctx, Word, has_flag};
use crate::model::subcommand::Positionals;

/// `git -c core.pager=cat`, `-c pager.log=less -c color.ui=always`:
/// settings that run nothing but a pager, or only change colours, are
/// dropped before matching (the rest of the command is judged as usual).
fn drop_harmless_git_settings(texts: &mut Vec<&str>) {
    let mut i = 0;
    while i + 1 < texts.len() {
        let harmless = texts[i] == "-c"
            && texts[i + 1].split_once('=').is_some_and(|(k, v)| {
                let k = k.to_ascii_lowercase();
                ((k == "core.pager" || k.starts_with("pager."))
                    && (harmless_pager(v) || matches!(v, "true" | "false")))
                    || k.starts_with("color.")
                    || k == "core.quotepath"
                    || k == "log.showsignature"
            });
        if harmless {
            texts.drain(i..i + 2);
        } else {
            i += 1;
        }
    }
}

/// A flag that makes the command only show what it would do (`--dry-run`,
/// `--check`, `-n` where it means that), or `None`. `--dry-run=none` (a
/// real run in kubectl) is not one.
fn plan_flag(base: &str, subcommand: Option<&str>, texts: &[&str]) -> Option<String> {
    // After `--` a word is an operand, never a flag: `rm -rf -- ~ --dry-run`
    // deletes the home and a file named `--dry-run`.
    if let Some(h) = help_request(base, texts) {
        return Some(h.to_string());
    }
    let end = texts.iter().position(|a| *a == "--").unwrap_or(texts.len());
    for a in &texts[..end] {
        let (flag, value) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (*a, None),
        };
        if matches!(value, Some("none" | "false" | "0" | "no")) {
            continue;
        }
        if matches!(
            flag,
            "--dry-run"
                | "--dryrun"
                | "--dry_run"
                | "--what-if"
                | "--whatif"
                | "--noop"
                | "--simulate"
        ) || help_flag(a)
        {
            return Some(flag.to_string());
        }
        let short_n = a.starts_with('-') && !a.starts_with("--") && a[1..].contains('n');
        let means_no_op = match base {
            "make" | "gmake" | "rsync" => short_n,
            "git" => {
                a.starts_with('-')
                    && !a.starts_with("--")
                    && a.len() == 2
                    && short_n
                    && matches!(
                        subcommand,
                        Some("clean" | "add" | "rm" | "mv" | "push" | "prune" | "gc")
                    )
            }
            "apt-get" | "apt" => matches!(*a, "-s" | "--simulate" | "--just-print" | "--recon"),
            "ansible-playbook" | "ansible" | "salt" | "chef-client" => {
                matches!(*a, "--check" | "-C")
            }
            "helm" => *a == "--dry-run",
            // pacman's `--print` (`-p` beside an operation) prints the
            // targets, `-h` beside one its help; `-y` still refreshes the
            // package databases, so not beside it.
            "pacman" => {
                pacman_print(texts)
                    && (*a == "--print"
                        || a.starts_with('-')
                            && !a.starts_with("--")
                            && a[1..].contains(['p', 'h']))
            }
            _ => false,
        };
        if means_no_op {
            return Some(a.to_string());
        }
    }
    None
}
use crate::policy::Level;

/// `pacman -Rp x`, `pacman -Up f`, `pacman -S --print x`, `pacman -Uh`:
/// an operation asked only to print its targets or its help, with no
/// database refresh (`-y`, `--refresh`) beside it.
fn pacman_print(texts: &[&str]) -> bool {
    let short = |a: &&str| a.starts_with('-') && !a.starts_with("--");
    let refresh = texts
        .iter()
        .any(|a| *a == "--refresh" || short(a) && a.contains('y'));
    let operation = texts.iter().any(|a| {
        matches!(*a, "--remove" | "--upgrade" | "--sync") || short(a) && a.contains(['R', 'U', 'S'])
    });
    let print = texts
        .iter()
        .any(|a| matches!(*a, "--print" | "--help") || short(a) && a[1..].contains(['p', 'h']));
    operation && print && !refresh
}

/// `--help`, `--version`: the program prints and exits, whatever else it
/// was asked (before any `--`; see `plan_flag`).
fn help_flag(a: &str) -> bool {
    matches!(a, "--help" | "--version")
}

/// The first `--help`/`--version` before any `--`.
fn help_of<'a>(texts: &[&'a str]) -> Option<&'a str> {
    texts
        .iter()
        .take_while(|a| **a != "--")
        .find(|a| help_flag(a))
        .copied()
}

/// A subcommand word that only reads: a read verb among its parts, or a
/// compound word that starts with one (`listen` is not `list`).
fn is_read_word(w: &str) -> bool {
    verb_parts(w).any(|p| READ_VERBS.contains(&p))
        || READ_PREFIXES.iter().any(|r| {
            w.strip_prefix(r).is_some_and(|rest| {
                rest.len() >= 2
                    && rest.chars().all(|c| c.is_ascii_lowercase())
                    && !w.starts_with("listen")
            })
        })
        || READ_SUFFIXES.iter().any(|r| {
            w.strip_suffix(r).is_some_and(|named| {
                named.len() >= 3
                    && named.chars().all(|c| c.is_ascii_lowercase())
                    && !LIST_CHANGES.iter().any(|c| named.ends_with(c))
            })
        })
}

/// Read verbs that also end compound subcommand words, after what they
/// show (`dominfo`, `domblklist`, `nodeinfo`, `domstats`).
const READ_SUFFIXES: &[&str] = &["info", "list", "stats"];

/// What a list is changed by when its name ends the word (`blacklist`,
/// `allowlist`, `setinfo`, `dellist`): not a read.
const LIST_CHANGES: &[&str] = &[
    "black", "white", "allow", "deny", "block", "ban", "trust", "ignore", "set", "add", "del",
    "remove", "skip", "safe",
];

/// A flag that names a change (`--delete`, `--repair`, `--force`,
/// `--add-port`): a read verb beside it does not make the command a read.
/// An option named after a credential (`--token`, `--access-token`)
/// passes one; it does not make one.
fn change_flag(texts: &[&str]) -> bool {
    texts.iter().any(|a| {
        // A listing flag names what it shows (`--list-new`,
        // `--show-deleted`).
        !LISTING_FLAG_PREFIXES.iter().any(|p| a.starts_with(p))
            && a.strip_prefix("--").is_some_and(|f| {
                let f = f.split('=').next().unwrap_or(f);
                verb_parts(f).any(|p| {
                    UNKNOWN_CHANGE_FLAGS.contains(&p)
                        || (CHANGE_VERBS.contains(&p) && p != "token")
                        || matches!(
                            p,
                            "repair"
                                | "fix"
                                | "force"
                                | "write"
                                | "reset"
                                | "add"
                                | "enable"
                                | "disable"
                                | "reload"
                                | "start"
                                | "stop"
                                | "kill"
                        )
                })
            })
    })
}

/// A long flag that asks a tool to show rather than act (`--list`,
/// `--list-all-zones`, `--status`, `--display`, `--get-selections`,
/// `--print-cache`, `--show-…`, `--query`, `--info`; not `--all`, which
/// `ipcrm --all` deletes).
const LISTING_FLAG_PREFIXES: &[&str] = &["--list-", "--get-", "--print-", "--show-", "--display-"];

fn read_flag<'a>(texts: &[&'a str]) -> Option<&'a str> {
    texts.iter().take_while(|a| **a != "--").copied().find(|a| {
        let Some(f) = a.strip_prefix("--") else {
            return false;
        };
        let f = f.split('=').next().unwrap_or(f);
        matches!(f, "list" | "status" | "display" | "query" | "info")
            || LISTING_FLAG_PREFIXES.iter().any(|p| a.starts_with(p))
    })
}

/// The read verb among the first subcommand words, when none of the words
/// up to it changes anything: the words before it name the group, the
/// words after it what it reads (`doctl balance get --access-token
/// access_token`: the token is passed, not made). A verb as the first
/// word, right before the read verb, is a group's name (`glab release
/// list`, as for a program no rule knows), unless it acts on a name
/// (`run`, `attach`) or deletes, publishes or resets (`remove list`
/// removes one named `list`); `release` and `deploy` name their lists.
fn read_subcommand<'a>(words: &[&'a str]) -> Option<&'a str> {
    let first = &words[..words.len().min(4)];
    let at = first.iter().position(|w| is_read_word(w))?;
    let group = |i: usize, w: &str| {
        i == 0
            && at == 1
            && !ACTION_WORDS.contains(&w)
            && (!UNKNOWN_CHANGE_VERBS.contains(&w) || matches!(w, "release" | "deploy"))
    };
    if first[..=at]
        .iter()
        .enumerate()
        .any(|(i, w)| verb_parts(w).any(|p| CHANGE_VERBS.contains(&p)) && !group(i, w))
    {
        return None;
    }
    Some(first[at])
}

/// A read verb right after the words that made a rule match (its
/// subcommand, or the argument its pattern matched), when those words name
/// a group of subcommands rather than an action and nothing after them
/// changes anything: `docker service ls`, `kubectl rollout history`,
/// `npm access list`, `gcloud config list`, `aws configure list`.
fn read_after_group<'a>(matched: &[&'a str], rest: &[&'a str]) -> Option<&'a str> {
    if matched.is_empty()
        || matched
            .iter()
            .any(|w| ACTION_WORDS.contains(w) || verb_parts(w).any(|p| CHANGE_VERBS.contains(&p)))
    {
        return None;
    }
    // A second group's name may stand between (`gcloud config
    // configurations list`): a plain word that neither acts nor changes.
    let verb = match rest {
        [v, ..] if is_read_word(v) => *v,
        [group, v, ..]
            if is_read_word(v)
                && group.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                && !ACTION_WORDS.contains(group)
                && !UNKNOWN_CHANGE_VERBS.contains(group) =>
        {
            *v
        }
        _ => return None,
    };
    if !is_read_word(verb)
        || rest[..rest.len().min(3)]
            .iter()
            .any(|w| verb_parts(w).any(|p| CHANGE_VERBS.contains(&p)))
    {
        return None;
    }
    Some(verb)
}

/// A verb among an unknown program's first subcommand words (or a flag
/// named like one, `--delete`) that deletes or changes remote state.
fn unknown_change_verb(base: &str, words: &[&str], texts: &[&str]) -> Option<String> {
    // SQL that changes data, whatever flag carries it (`--query`).
    if let Some(sql) = texts.iter().find_map(|a| sql_change(a)) {
        return Some(sql);
    }
    // A flag that asks the tool to show (`--list`) makes it a read.
    if read_flag(texts).is_some() {
        return None;
    }
    let changes = |p: &str| UNKNOWN_CHANGE_VERBS.contains(&p.to_ascii_lowercase().as_str());
    // The program's own name (`distrobox-rm`, `fprintd-delete`,
    // `Remove-NodeVersion`, `elasticsearch-reset-password`).
    if base.contains(['-', '_']) && verb_parts(base).any(changes) {
        return Some(base.to_string());
    }
    // Its first subcommand words that are words, not a path, a file name
    // or a value (`ykman oath accounts delete`, `rabbitmqctl --node
    // rabbit@host reset`).
    let subcommand = words.iter().take(4).filter(|w| {
        w.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':'))
    });
    let subcommand: Vec<&str> = subcommand.copied().collect();
    for (k, w) in subcommand.iter().enumerate() {
        let lower = w.to_ascii_lowercase();
        // A word right after a long option is most likely its value
        // (`--suite release_name`); a verb word followed by a read verb
        // names a group of subcommands (`fj release list`).
        let value_like = texts.iter().position(|t| t == w).is_some_and(|i| {
            i > 0 && texts[i - 1].starts_with("--") && !texts[i - 1].contains('=')
        });
        let group = subcommand
            .get(k + 1)
            .is_some_and(|n| READ_VERBS.contains(n));
        if value_like || group {
            continue;
        }
        if verb_parts(w).any(changes)
            || UNKNOWN_STATE_VERBS.contains(&lower.as_str())
            || UNKNOWN_CHANGE_PREFIXES
                .iter()
                .any(|p| lower.len() > p.len() && lower.starts_with(p))
            || compound_delete(&lower)
        {
            return Some(w.to_string());
        }
    }
    // A flag named like one (`--delete`, `--kill`; not `--remove-all-
    // unused-imports`, which names what it removes from the files given).
    texts
        .iter()
        .take_while(|a| **a != "--")
        .find(|a| {
            a.strip_prefix("--")
                .or_else(|| a.strip_prefix('-').filter(|r| r.len() > 2))
                .is_some_and(|f| UNKNOWN_CHANGE_FLAGS.contains(&f) || matches!(f, "kill" | "reset"))
        })
        .map(|a| a.to_string())
}

/// A subcommand word that ends in a delete (`userdel`, `groupdel`,
/// `pkgremove`, `nodedelete`): three letters or more naming what, then
/// the verb; all letters (`model` is too short to be one).
fn compound_delete(lower: &str) -> bool {
    lower.chars().all(|c| c.is_ascii_lowercase())
        && ["del"]
            .iter()
            .chain(UNKNOWN_CHANGE_PREFIXES)
            .any(|v| lower.len() >= v.len() + 3 && lower.ends_with(v))
}

impl Ctx<'_> {
    /// Returns the level the system policy gives this use (READ when it
    /// only plans; `exec.unknown`'s when no rule covers it).
    pub(super) fn match_rules(&mut self, base: &str, args: &[Word], shown: &str) -> Level {
        let mut texts: Vec<&str> = args.iter().map(|w| w.text()).collect();
        if base == "git" {
            drop_harmless_git_settings(&mut texts);
        }
        // Where the subcommand starts: one rule with the shadow stubs'.
        let at = Positionals::of(base, &texts);
        let policy = self.policy;
        // The other layers' conclusion and the workspace's additions are
        // found separately and BOTH scored: a workspace rule can add a
        // finding to a command, never stand in for what the system policy
        // says about it (a READ rule for an unknown command would otherwise
        // replace `exec.unknown`).
        let mut best: Option<&crate::policy::Rule> = None;
        let mut added: Option<&crate::policy::Rule> = None;
        let mut any_rule = false;
        // Every system rule that matched, and where the words after what
        // made it match begin (None: it matched the tool in general).
        let mut matched: Vec<(&crate::policy::Rule, Option<usize>)> = Vec::new();
        for r in policy.rules_for(base) {
            if read_form_of(r, base, &texts, self.dir_targets) {
                continue;
            }
            any_rule |= !r.from_workspace;
            if !r.subcommands.is_empty() && !r.subcommands.iter().any(|sub| at.starts_with(sub)) {
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
            if !r.from_workspace {
                let after = r
                    .subcommands
                    .iter()
                    .find_map(|sub| at.after(sub))
                    .or_else(|| {
                        let re = r.arg_regex.as_ref()?;
                        at.words.iter().position(|w| re.is_match(w)).map(|i| i + 1)
                    });
                matched.push((r, after));
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
        // What a plan, a help text or a read subcommand can stand in for:
        // every rule that matched must be about changes, a privilege or
        // the network, never about running programs, credentials or the
        // agent's controls.
        let all_of = |ok: &dyn Fn(Principle) -> bool| {
            matched
                .iter()
                .all(|(r, _)| r.level <= Level::Read || ok(Principle::of(&r.id, r.level)))
        };
        let changes = |p: Principle| {
            matches!(
                p,
                Principle::ChangesRemoteState
                    | Principle::Deletes
                    | Principle::ChangesWorkspace
                    | Principle::WritesOutside
                    | Principle::UnknownProgram
            )
        };
        let help = help_of(&texts).or_else(|| help_request(base, &texts));
        if let Some(r) = best
            && r.level > Level::Read
            && let Some(flag) = plan_flag(base, at.first(), &texts)
            && (all_of(&changes)
                || help.is_some()
                    && all_of(&|p| {
                        changes(p)
                            || matches!(p, Principle::UsesPrivilege | Principle::ReachesNetwork)
                    }))
        {
            let (level, score) = self.policy.builtin("read.plan");
            self.push(
                "read.plan",
                level,
                score,
                format!(
                    "{flag} only shows what {base} would do ({} applies to the real run)",
                    r.id
                ),
                shown,
                false,
            );
            return level;
        }
        let remote_or_privileged = |p: Principle| {
            matches!(
                p,
                Principle::ChangesRemoteState
                    | Principle::UsesPrivilege
                    | Principle::ChangesWorkspace
            )
        };
        if let Some(r) = best
            && r.level > Level::Read
            && r.flags_any.is_empty()
            && r.flags_all.is_empty()
            && all_of(&|p| {
                remote_or_privileged(p)
                    || p == Principle::ReachesNetwork && NETWORK_SUBCOMMAND_FIRST.contains(&base)
            })
            && !change_flag(&texts)
            && let Some((rule, after)) = matched.iter().find(|(m, _)| m.id == r.id)
            && let Some(verb) = match after {
                // A read verb after a group of subcommands, for any rule
                // that names its subcommands or its arguments.
                // `--list` itself asks any subcommand to list
                // (`kubectl annotate pods x --list`, `npm star --list`).
                Some(k) if Principle::of(&r.id, r.level) != Principle::ReachesNetwork => {
                    read_after_group(&at.words[..*k], &at.words[*k..]).or_else(|| {
                        // Not beside a verb that changes (`kubectl delete ns x
                        // --list` deletes where the tool ignores the flag).
                        let changes = at
                            .words
                            .iter()
                            .any(|w| verb_parts(w).any(|p| CHANGE_VERBS.contains(&p)));
                        texts.iter().copied().find(|a| *a == "--list" && !changes)
                    })
                }
                // A remote store's copy tool (`gsutil ls`, `mc ls`): its
                // first word is a subcommand, and only a read verb there
                // (the listing of the store) stands in for the rule.
                None if Principle::of(&r.id, r.level) == Principle::ReachesNetwork => {
                    at.words.first().copied().filter(|w| READ_VERBS.contains(w))
                }
                // A rule about the tool in general (a forge, cloud or
                // infrastructure CLI's catch-all, a system tool's): its
                // first subcommand words, or a flag that asks it to show.
                None if rule.subcommands.is_empty()
                    && rule.arg_regex.is_none()
                    && Principle::of(&r.id, r.level) != Principle::ChangesWorkspace =>
                {
                    // A system tool's operands may be a process, a user
                    // or a host named like a verb (`pkill top`, `userdel
                    // list`): only a remote tool's words are subcommands.
                    (Principle::of(&r.id, r.level) == Principle::ChangesRemoteState
                        || SUBCOMMAND_FIRST.contains(&base))
                    .then(|| read_subcommand(&at.words))
                    .flatten()
                    .or_else(|| {
                        (Principle::of(&r.id, r.level) == Principle::ChangesRemoteState)
                            .then(|| collection_listing(&at.words))
                            .flatten()
                    })
                    .or_else(|| {
                        // (A file name is an operand, not a verb:
                        // `pg_restore --list archive_file.dump`.)
                        read_flag(&texts).filter(|_| {
                            !at.words.iter().take(3).any(|w| {
                                !w.contains(['.', '/'])
                                    && verb_parts(w).any(|p| CHANGE_VERBS.contains(&p))
                            })
                        })
                    })
                }
                _ => None,
            }
            // A tool's own listing form (`mount`, `swapon`, `losetup
            // --all`, `brew tap`, `zpool import` with nothing to import).
            .or_else(|| listing_form(base, &texts))
        {
            // A rule about the tool in general, and a subcommand that only
            // reads: the subcommand says more about this use.
            let (level, score) = self.policy.builtin("read.subcommand");
            self.push(
                "read.subcommand",
                level,
                score,
                format!(
                    "`{verb}` only reads or shows ({} applies to {base}'s other subcommands)",
                    r.id
                ),
                shown,
                false,
            );
            return level;
        }
        match best {
            Some(r) => {
                self.push(&r.id, r.level, r.score, r.reason.clone(), shown, r.approval);
                if r.level >= Level::Write {
                    self.blast_radius(base, args, shown);
                }
                r.level
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
                let plan = plan_flag(base, at.first(), &texts);
                if plan.is_none()
                    && let Some(verb) = interactive_subcommand(&at.words)
                {
                    self.add(
                        "exec.stdin_shell",
                        format!(
                            "{base} {verb} starts an interactive shell or console, which runs whatever reaches it, not in the command"
                        ),
                        shown,
                    );
                }
                let change = unknown_change_verb(base, &at.words, &texts);
                // A read verb or a read flag and nothing that changes: its
                // operands are what it reads (`pvesh get /nodes`, `dconf
                // read /org/key`, `nix-store --query /nix/store/x`).
                let reads = change.is_none()
                    && !change_flag(&texts)
                    && !super::forms::names_output(&texts)
                    && (read_subcommand(&at.words).is_some()
                        || read_flag(&texts).is_some()
                        || base == "ssh-keygen" && super::forms::ssh_keygen_shows(&texts));
                // Unless what it deletes is a file of the workspace.
                let change = change
                    .filter(|v| !super::operands::deletes_only_workspace_files(base, v, &texts));
                if let Some(verb) = change
                    && plan.is_none()
                {
                    self.add(
                        "exec.unknown.verb",
                        format!(
                            "{base} is asked to `{verb}`: a program no rule knows is judged at least by what its subcommand says, and a delete, an uninstall or a publish is not in the workspace"
                        ),
                        shown,
                    );
                }
                let level = self.policy.builtin("exec.unknown").0;
                // A help request prints; its operands are not touched.
                // Read operands outside the workspace are reads.
                if level >= Level::Write && plan.is_none() && !reads {
                    self.blast_radius(base, args, shown);
                }
                level
            }
        }
    }
}
