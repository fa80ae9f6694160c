//! The words of subcommands and flags the rules read: verbs that only
//! read, verbs that change, words that act rather than name a group, and
//! the verbs that make a program no rule knows ask.

/// Subcommand words that act (run, copy, attach, label...) rather than
/// name a group of subcommands: `kubectl run list` runs a pod named
/// `list`, where `kubectl rollout history` and `docker service ls` read.
pub(super) const ACTION_WORDS: &[&str] = &[
    "run",
    "exec",
    "start",
    "stop",
    "restart",
    "kill",
    "cp",
    "mv",
    "copy",
    "move",
    "sync",
    "attach",
    "label",
    "annotate",
    "scale",
    "autoscale",
    "expose",
    "edit",
    "replace",
    "taint",
    "cordon",
    "uncordon",
    "drain",
    "debug",
    "proxy",
    "port-forward",
    "pause",
    "unpause",
    "rename",
    "upload",
    "download",
    "send",
    "invoke",
    "install",
    "uninstall",
    "add",
    "login",
    "logout",
    "connect",
    "ssh",
    "scp",
    "import",
    "export",
    "restore",
    "reset",
    "mb",
    "rb",
    "star",
    "unstar",
    "deprecate",
    "init",
    "up",
    "down",
];

/// Subcommand verbs that only read or show (`glab mr list`, `doctl apps
/// get`, `consul kv get`, `cdk diff`, `hub ci-status`, `vagrant box
/// outdated`).
pub(super) const READ_VERBS: &[&str] = &[
    "list", "ls", "get", "describe", "show", "status", "info", "logs", "log", "diff", "plan",
    "view", "whoami", "inspect", "search", "cat", "tree", "history", "version", "help", "validate",
    "check", "top", "events", "explain", "print", "preview", "outputs", "output", "read", "query",
    "find", "browse", "ps", "stats", "synth", "doctor", "lint", "lookup", "members", "whois",
    "usage", "outdated",
];

/// Subcommand verbs that change something, wherever they stand among the
/// first words (`glab mr merge`, `consul kv delete`).
pub(super) const CHANGE_VERBS: &[&str] = &[
    "create",
    "delete",
    "rm",
    "remove",
    "del",
    "destroy",
    "drop",
    "purge",
    "update",
    "set",
    "put",
    "post",
    "patch",
    "apply",
    "deploy",
    "push",
    "publish",
    "merge",
    "close",
    "reopen",
    "approve",
    "revoke",
    "add",
    "edit",
    "rename",
    "move",
    "mv",
    "cp",
    "copy",
    "start",
    "stop",
    "restart",
    "reboot",
    "kill",
    "scale",
    "upgrade",
    "install",
    "uninstall",
    "rollback",
    "restore",
    "reset",
    "run",
    "exec",
    "ssh",
    "login",
    "logout",
    "enable",
    "disable",
    "attach",
    "detach",
    "import",
    "upload",
    "sync",
    "tag",
    "lock",
    "unlock",
    "cancel",
    "retry",
    "trigger",
    "transfer",
    "archive",
    "fork",
    "prune",
    "clean",
    "wipe",
    "terminate",
    "suspend",
    "resume",
    "promote",
    "rotate",
    "grant",
    "assign",
    "invite",
    "accept",
    "reject",
    "submit",
    "comment",
    "note",
    "write",
    "release",
    "unregister",
    "deregister",
    "erase",
    "truncate",
    "flush",
    "format",
    "token",
    "new",
    "init",
    "mount",
    "unmount",
    "connect",
    "send",
];

/// System tools whose first word is always a subcommand (`zfs list`,
/// `zpool status`, `btrfs filesystem usage`, `virsh dominfo`): their
/// words are not a process, a user or a host named like a verb.
pub(super) const SUBCOMMAND_FIRST: &[&str] = &[
    "zfs",
    "zpool",
    "btrfs",
    "cryptsetup",
    "virsh",
    "qm",
    "pct",
    "dmsetup",
    "lvm",
    "tc",
    "nft",
    "ipset",
    "bootctl",
    "trust",
    "ctr",
    "lxc",
    "incus",
    "multipass",
];

/// Copy tools of remote stores whose first word is always a subcommand
/// (`gsutil ls`, `s3cmd ls s3://bucket`, `mc ls`, `rclone ls remote:`):
/// a read verb there lists the store and sends nothing of ours.
pub(super) const NETWORK_SUBCOMMAND_FIRST: &[&str] = &["gsutil", "s3cmd", "mc", "rclone", "azcopy"];

/// Verbs that, as an unknown program's subcommand, delete or change state
/// the rehearsal cannot show (a package manager, a cloud, a device).
pub(super) const UNKNOWN_CHANGE_VERBS: &[&str] = &[
    "delete",
    "remove",
    "rm",
    "del",
    "uninstall",
    "destroy",
    "drop",
    "purge",
    "wipe",
    "erase",
    "truncate",
    "deploy",
    "publish",
    "upload",
    "push",
    "kill",
    "terminate",
    "revoke",
    "unregister",
    "deregister",
    "flush",
    "rrdelete",
    "reset",
    "rollback",
    "unpublish",
    "undeploy",
    "teardown",
    "unsubscribe",
    "autoremove",
    "rmi",
    "put",
    "pub",
    "apply",
    "release",
    "shutdown",
    "logout",
    "signout",
];

/// Verbs that, as an unknown program's subcommand word (not part of its
/// name: `kernel-install inspect` reads), change state kept outside the
/// workspace: what is installed on a device or for the machine, what is
/// turned on or off, an artifact changed in place, a deployment brought up
/// (`adb install`, `corepack disable`, `crane append`, `kompose up`).
pub(super) const UNKNOWN_STATE_VERBS: &[&str] =
    &["install", "enable", "disable", "append", "flatten", "up"];

/// Change verbs that also start compound subcommand words
/// (`removerepo`, `deletenode`, `uninstallall`).
pub(super) const UNKNOWN_CHANGE_PREFIXES: &[&str] = &[
    "remove",
    "delete",
    "uninstall",
    "destroy",
    "purge",
    "unpublish",
    "undeploy",
];

/// Flags named like those verbs (`--delete`, `--purge`).
pub(super) const UNKNOWN_CHANGE_FLAGS: &[&str] = &[
    "delete",
    "remove",
    "purge",
    "uninstall",
    "destroy",
    "drop",
    "wipe",
    "erase",
    "upload",
    "put",
    "put-file",
    "publish",
    "unpublish",
    "deploy",
    "undeploy",
    "push",
];

/// The words of a subcommand word (`admin-delete-user`, `db:drop`,
/// `ci-status`).
pub(super) fn verb_parts(w: &str) -> impl Iterator<Item = &str> {
    w.split(['-', '_', ':', '.'])
}

/// Read verbs that also start compound subcommand words
/// (`showvminfo`, `listsnapshot`, `getall`, `statusall`).
pub(super) const READ_PREFIXES: &[&str] = &[
    "list", "show", "get", "describe", "status", "inspect", "view",
];

/// Subcommand words that name a collection, the last of them plural and
/// nothing after them but numbers and options: a remote tool asked for a
/// collection lists it (`ibmcloud regions`, `doctl kubernetes options
/// sizes`, `linode-cli account settings`). Not when any word acts or
/// changes, nor with a word after the plural (`linode-cli linodes resize
/// 1`), nor for a word that only looks plural (`access`, `alias`,
/// `status`, `process`).
pub(super) fn collection_listing<'a>(words: &[&'a str]) -> Option<&'a str> {
    let named = words
        .iter()
        .take_while(|w| {
            w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'))
        })
        .count();
    if named == 0 || named > 4 {
        return None;
    }
    let last = words[named - 1];
    let plural = last.ends_with('s')
        && !["ss", "us", "is", "as", "os", "ys"]
            .iter()
            .any(|e| last.ends_with(e))
        && last.len() > 3;
    // A change verb in the plural is still one (`reboots`, `pushes`).
    let changes = |p: &str| {
        [
            p,
            p.strip_suffix('s').unwrap_or(p),
            p.strip_suffix("es").unwrap_or(p),
        ]
        .iter()
        .any(|v| {
            ACTION_WORDS.contains(v) || CHANGE_VERBS.contains(v) || UNKNOWN_CHANGE_VERBS.contains(v)
        })
    };
    let acts = words[..named]
        .iter()
        .any(|w| changes(w) || verb_parts(w).any(changes));
    let rest_plain = words[named..]
        .iter()
        .all(|w| w.starts_with('-') || w.chars().all(|c| c.is_ascii_digit()));
    (plural && !acts && rest_plain).then_some(last)
}

/// A SQL statement that changes data or schema, as a whole argument or one
/// of its statements (`delete from t`, `drop table t`, `update t set`,
/// `insert into t`, `alter table t`, `truncate t`): what a program no rule
/// knows is asked to run against a database (`sqlite-utils query db
/// "delete from t"`, `dolt sql -q "drop table t"`). Its words, lowercased.
pub(super) fn sql_change(arg: &str) -> Option<String> {
    // Every statement the pattern knows has whitespace after its first
    // word: an argument without any is none, and the pattern is compiled
    // only for one that could be (most processes classify no SQL).
    if !arg.contains(char::is_whitespace) {
        return None;
    }
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r#"(?i)(?:^|;)\s*(delete\s+from|drop\s+(?:table|database|schema|view|index|user|role)|truncate\s+(?:table\s+)?[\w."`\[]|update\s+[\w."`\[\]]+\s+set|insert\s+(?:or\s+\w+\s+)?into|alter\s+(?:table|database|user|role))\b"#,
        )
        .expect("the SQL pattern compiles")
    });
    let m = re.captures(arg)?.get(1)?;
    Some(
        m.as_str()
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_lowercase(),
    )
}
