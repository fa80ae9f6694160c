//! Forms of a command that say what it does whatever the program is: a
//! request for its help text (it prints and exits), an interactive shell
//! or console it opens, a prompt string whose only code is the command
//! substitutions written in it.

use super::{Ctx, Word};

/// Programs whose `-h` acts instead of printing help (`shutdown -h`
/// halts the machine).
const DASH_H_ACTS: &[&str] = &["shutdown", "halt", "poweroff", "reboot", "init", "telinit"];

/// Tools whose documented help form is a trailing `help` word after the
/// subcommand (`aws s3 rm help` prints the manual of `aws s3 rm`).
const TRAILING_HELP: &[&str] = &["aws", "aws2", "awslocal"];

/// A request for the program's help text that the tool's own conventions
/// make unambiguous, beyond `--help`/`--version` anywhere (`plan_flag`):
/// `-h`, `-?` or `-help` as the only argument, and a trailing `help` word
/// for the tools that document it. Returns the word that asks for help.
pub(super) fn help_request<'a>(base: &str, texts: &[&'a str]) -> Option<&'a str> {
    if let [only] = texts
        && matches!(*only, "-h" | "-?" | "-help")
        && !DASH_H_ACTS.contains(&base)
    {
        return Some(*only);
    }
    if let Some(h) = windows_help(texts) {
        return Some(h);
    }
    if completion_script(texts) {
        return Some(texts[0]);
    }
    if TRAILING_HELP.contains(&base)
        && texts.len() >= 2
        && texts.last() == Some(&"help")
        && !texts.contains(&"--")
    {
        return Some("help");
    }
    None
}

/// `completion [SHELL]` (`frpc completion bash`, `gh completion --shell
/// zsh`, `starship completions fish`): the program prints the script a
/// shell completes its words with, and exits, as for `--help`.
fn completion_script(texts: &[&str]) -> bool {
    const SHELLS: &[&str] = &[
        "bash",
        "zsh",
        "fish",
        "powershell",
        "pwsh",
        "elvish",
        "nushell",
    ];
    let shell = |w: &str| SHELLS.contains(&w);
    match texts {
        [c, rest @ ..] if matches!(*c, "completion" | "completions") => match rest {
            [] => true,
            [s] => shell(s) || s.strip_prefix("--shell=").is_some_and(shell),
            [f, s] => matches!(*f, "--shell" | "-s") && shell(s),
            _ => false,
        },
        _ => false,
    }
}

/// `export 'NAME=value'`, `local NAME='$(x)'`: a declaration builtin
/// evaluates a name's subscript, an array's `(...)` value and the values
/// of integer or reference variables (`-i`, `-n`), never a plain value,
/// which stays the text written (a prompt's substitutions run later and
/// are judged by `Ctx::prompt_value`).
pub(super) fn declared_plain_value(base: &str, texts: &[&str], text: &str) -> bool {
    if !matches!(
        base,
        "export" | "declare" | "typeset" | "local" | "readonly"
    ) {
        return false;
    }
    let Some((name, value)) = text.split_once('=') else {
        return false;
    };
    let plain_flags = texts
        .iter()
        .filter(|a| a.starts_with(['-', '+']))
        .all(|a| a.len() > 1 && a[1..].chars().all(|c| matches!(c, 'x' | 'g' | 'r')));
    plain_flags
        && !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !value.starts_with('(')
}

/// A chmod mode that sets the setgid bit and not the setuid bit (`2775`,
/// `g+s`, `u=rwx,g+rws`). On a directory it only makes the files created
/// in it take the directory's group (a shared project tree): nothing runs
/// with another's privilege, which the setuid bit, or setgid on a program,
/// is about.
pub(super) fn setgid_only(texts: &[&str]) -> bool {
    let special = |a: &str| {
        (a.len() == 4 && a.bytes().all(|c| c.is_ascii_digit()) && a.as_bytes()[0] > b'1')
            || a.split(',')
                .any(|c| c.contains(['+', '=']) && c.contains('s'))
    };
    let modes: Vec<&str> = texts.iter().copied().filter(|a| special(a)).collect();
    !modes.is_empty()
        && modes.iter().all(|a| {
            if a.bytes().all(|c| c.is_ascii_digit()) {
                return matches!(a.as_bytes()[0], b'2' | b'3');
            }
            a.split(',').all(|c| {
                let Some(at) = c.find(['+', '=', '-']) else {
                    return true;
                };
                let (who, perms) = c.split_at(at);
                !perms.contains('s')
                    || (!who.is_empty() && who.chars().all(|w| matches!(w, 'g' | 'o')))
            })
        })
}

/// A use that rule `id` (matched by a flag or an argument) is not about,
/// because the tool's own syntax makes it a read: rpm's query mode, a
/// read subcommand of pip with `--user` (`pip list --user`), `git config
/// KEY` with no value (it prints the value), `at`'s list and print modes,
/// the setgid bit on directories.
pub(super) fn read_form_of(
    rule: &crate::policy::Rule,
    base: &str,
    texts: &[&str],
    dir_targets: bool,
) -> bool {
    let id = rule.id.as_str();
    let words: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-'))
        .collect();
    match id {
        "fs.chmod.setuid" => dir_targets && setgid_only(texts),
        "pkg.dpkg" => base == "rpm" && rpm_query(texts),
        // `at -l` is atq, `at -c JOB` prints a job: nothing is scheduled.
        "exec.schedule" => base == "at" && matches!(texts.first(), Some(&("-l" | "-c"))),
        "pkg.pip.system" => {
            matches!(base, "pip" | "pip3")
                && matches!(words.first(), Some(&("list" | "freeze" | "show" | "check")))
        }
        "credential.ssh_keygen" => base == "ssh-keygen" && ssh_keygen_shows(texts),
        "credential.store" => credential_names_listing(&words, texts),
        // `enable` with no name lists the builtins (`-a` all, `-n` the
        // disabled, `-s` the special ones); a name turns one on or off.
        "shell.enable" => texts.iter().all(|a| {
            a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| "pasn".contains(c))
        }),
        // `aws configure get KEY` prints one setting; only the keys that
        // hold a credential (`aws_secret_access_key`, `aws_session_token`,
        // `aws_access_key_id`, a `sso_…` token's) are what the rule is about.
        "credential.cloud" => {
            let mut rest = Vec::new();
            let mut it = texts.iter();
            while let Some(a) = it.next() {
                match *a {
                    "--profile" => {
                        it.next();
                    }
                    a if a.starts_with("--profile=") => {}
                    a => rest.push(a),
                }
            }
            base == "aws"
                && matches!(rest.as_slice(), ["configure", "get", key] if {
                    let k = key.to_ascii_lowercase();
                    !["key", "secret", "token", "password", "credential", "sso"]
                        .iter()
                        .any(|s| k.contains(s))
                })
        }
        // Proxmox's `qm config ID`, `qm pending ID` and `pct config ID`
        // print a guest's configuration (`qm set` changes it); vagrant's
        // `port` and `ssh-config` print a machine's forwarded ports and
        // the SSH settings to reach it.
        "infra.vm" => {
            matches!(base, "qm" | "pct") && matches!(words.first(), Some(&("config" | "pending")))
        }
        "infra.cloud.cli" => {
            base == "vagrant" && matches!(words.first(), Some(&("port" | "ssh-config")))
        }
        // `setcap -v` checks that a file has the capabilities: it sets none.
        "system.attrs" => base == "setcap" && texts.contains(&"-v"),
        "exec.option.tar" => tar_compressor_only(texts),
        "net.http.send" => http_read_method(&rule.flags_any, texts),
        "system.date.set" => base == "date" && !date_sets_clock(texts),
        // A forge's catch-all is not about checking a pull or merge
        // request out (`vcs.forge.checkout`: a fetch and a local switch).
        "vcs.glab" => matches!(words.as_slice(), ["pr" | "mr", "checkout", ..]),
        // `kubectl attach POD` without `-i` streams the container's output;
        // `apply view-last-applied` prints what was applied.
        "infra.kubectl.mutate" => {
            matches!(words.as_slice(), ["apply", "view-last-applied", ..])
                || matches!(words.first(), Some(&"attach"))
                    && !texts.iter().any(|a| {
                        matches!(*a, "--stdin" | "--stdin=true" | "--tty" | "--tty=true")
                            || a.starts_with('-')
                                && !a.starts_with("--")
                                && a[1..].contains(['i', 't'])
                    })
        }
        // `git symbolic-ref HEAD` prints what HEAD points at; with a second
        // operand it sets it, with `-d` it deletes it.
        "vcs.git.reflog.expire" => {
            base == "git"
                && words.len() == 2
                && words[0] == "symbolic-ref"
                && texts
                    .iter()
                    .all(|a| !a.starts_with('-') || matches!(*a, "--short" | "-q" | "--quiet"))
        }
        "vcs.git.config.exec" => {
            base == "git"
                && words.len() == 2
                && words[0] == "config"
                && texts.iter().all(|a| {
                    !a.starts_with('-')
                        || matches!(
                            *a,
                            "--get" | "--global" | "--local" | "--system" | "--show-origin"
                        )
                })
        }
        _ => false,
    }
}

/// Groups of a credential store whose listing prints what they keep
/// (`bw list items` prints every login's password, `doppler secrets` every
/// value), and words that ask for a value.
const SECRET_WORDS: &[&str] = &[
    "item",
    "items",
    "secret",
    "secrets",
    "password",
    "passwords",
    "login",
    "logins",
    "note",
    "notes",
    "value",
    "values",
    "env",
    "run",
    "exec",
    "inject",
    "read",
    "get",
    "show",
    "otp",
];

/// A credential store asked for the names it keeps, not a secret: nothing
/// at all (`pass` lists its tree; the other stores print their help), a
/// listing verb (`op vault list`, `pass ls`, `vault kv list secret/`,
/// `aws-vault list`, `security list-keychains`, `keyctl list @u`), or a
/// collection named in the plural (`doppler projects`). Not a group whose
/// listing prints what it keeps (`bw list items`, `doppler secrets`,
/// `op item list`), a short option (`chamber list -e` expands values), or
/// a long one that reveals, shows, copies or exports.
fn credential_names_listing(words: &[&str], texts: &[&str]) -> bool {
    let flags_ok = texts.iter().filter(|a| a.starts_with('-')).all(|a| {
        a.starts_with("--") && {
            let f = a.to_ascii_lowercase();
            ![
                "reveal", "expand", "secret", "value", "password", "show", "plain", "decrypt",
                "export", "field", "otp", "qr", "clip", "copy", "raw", "unlock",
            ]
            .iter()
            .any(|w| f.contains(w))
        }
    });
    if !flags_ok
        || words
            .iter()
            .any(|w| SECRET_WORDS.contains(&w.to_ascii_lowercase().as_str()))
    {
        return false;
    }
    let Some(first) = words.first() else {
        return true;
    };
    let listing = |w: &str| matches!(w, "list" | "ls") || w.starts_with("list-");
    listing(first)
        || words.get(1).is_some_and(|w| listing(w))
        || super::words::collection_listing(words).is_some()
}

/// Whether `date` is told to set the clock: `-s`/`--set` as an option of
/// its own, not a letter of a value attached to the option before it
/// (`date -Iseconds` prints in ISO 8601 to the second, `-d`, `-f`, `-r`
/// take the rest of their cluster or the next word as their value).
fn date_sets_clock(texts: &[&str]) -> bool {
    let mut i = 0;
    while i < texts.len() {
        let a = texts[i];
        i += 1;
        if a == "--" {
            break;
        }
        if a == "--set" || a.starts_with("--set=") {
            return true;
        }
        if matches!(a, "--date" | "--file" | "--reference") {
            i += 1;
            continue;
        }
        let Some(cluster) = a.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
            continue;
        };
        for (k, c) in cluster.char_indices() {
            match c {
                's' => return true,
                'I' => break,
                'd' | 'f' | 'r' => {
                    if k + 1 == cluster.len() {
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    false
}

/// An HTTP client told only which method to use, a method that reads
/// (`curl -X GET URL`, `--request HEAD`, `-XOPTIONS`): the request sends
/// no data, whatever the flag that names a method is otherwise about
/// (`-X POST`, and any data or upload flag beside a GET, still send).
fn http_read_method(flags: &[String], texts: &[&str]) -> bool {
    use crate::model::stubs::has_flag;
    let mut method = false;
    let mut i = 0;
    while i < texts.len() {
        let a = texts[i];
        i += 1;
        if a == "--" {
            break;
        }
        let value = if a == "-X" || a == "--request" {
            i += 1;
            texts.get(i - 1).copied()
        } else if let Some(v) = a.strip_prefix("--request=") {
            Some(v)
        } else if let Some(v) = a.strip_prefix("-X").filter(|v| !v.is_empty()) {
            Some(v)
        } else if flags.iter().any(|f| has_flag(a, f)) {
            // Data, a form, an upload, or `-X` inside a cluster (`-sX`).
            return false;
        } else {
            continue;
        };
        match value {
            Some(v) if matches!(v.to_ascii_uppercase().as_str(), "GET" | "HEAD" | "OPTIONS") => {
                method = true;
            }
            _ => return false,
        }
    }
    method
}

/// Compressors a tar may be told to filter its archive through: each
/// reads its input and writes its output, and runs nothing else.
const COMPRESSORS: &[&str] = &[
    "gzip", "pigz", "bzip2", "pbzip2", "lbzip2", "xz", "pxz", "pixz", "zstd", "pzstd", "lz4",
    "lzip", "plzip", "lzop", "lzma", "brotli", "compress",
];

/// tar's program options name only a compressor, by its bare name with
/// options of its own (`tar -I pbzip2 -cf x.tbz d`,
/// `--use-compress-program='zstd -19'`): the program it runs is that
/// compressor, which the rules know, not a command hidden in an option.
/// A path, a script, a shell or any other program option still asks.
fn tar_compressor_only(texts: &[&str]) -> bool {
    use crate::model::stubs::has_flag;
    let compressor = |v: &str| {
        let mut w = v.split_whitespace();
        w.next().is_some_and(|p| COMPRESSORS.contains(&p))
            && w.all(|o| {
                o.starts_with('-')
                    && o[1..]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '=')
            })
    };
    let others = [
        "--to-command",
        "--checkpoint-action",
        "--info-script",
        "--new-volume-script",
        "-F",
        "--rsh-command",
        "--rmt-command",
    ];
    let mut named = false;
    for (i, a) in texts.iter().enumerate() {
        if others.iter().any(|f| has_flag(a, f)) {
            return false;
        }
        let value = if *a == "-I" || *a == "--use-compress-program" {
            texts.get(i + 1).copied()
        } else if let Some(v) = a.strip_prefix("--use-compress-program=") {
            Some(v)
        } else if has_flag(a, "-I") || has_flag(a, "--use-compress-program") {
            // `-cIf`, `-Ixz`: where the value starts is the tool's guess.
            return false;
        } else {
            continue;
        };
        if !value.is_some_and(compressor) {
            return false;
        }
        named = true;
    }
    named
}

/// `ssh-keygen -l -f F` (a fingerprint), `-F HOST` (a known host), `-L`
/// (a certificate), `-B` (a bubblebabble digest): it shows a key and
/// changes none. Only with options that shape what is shown (`-f`, `-E`,
/// `-v`, `-q`); `-R`, `-H`, `-p`, `-y` and the rest change a file or print
/// a key.
pub(super) fn ssh_keygen_shows(texts: &[&str]) -> bool {
    let clusters: Vec<&str> = texts
        .iter()
        .filter(|a| a.starts_with('-') && !a.starts_with("--") && a.len() > 1)
        .map(|a| &a[1..])
        .collect();
    clusters.iter().any(|c| c.contains(['l', 'F', 'L', 'B']))
        && clusters
            .iter()
            .all(|c| c.chars().all(|ch| "lFLBfEvq".contains(ch)))
        && !texts.iter().any(|a| a.starts_with("--"))
}

/// A system tool's own listing form, documented by the tool: given no
/// operand (and only options that shape the listing), it shows what is
/// set up instead of changing it. `mount` lists the mounts, `swapon` the
/// swap areas, `losetup` (`-a`, `-l`) the loop devices, `kpartx -l` the
/// mappings it would add, `zpool import` the pools it could import, `brew
/// tap` and `brew services` the taps and services. An operand (`mount
/// /dev/sdb1 /mnt`, `zpool import tank`, `brew tap user/repo`) or any
/// other option (`zpool import -a`, `swapon -a`) changes, and is judged
/// by the tool's rule.
pub(super) fn listing_form<'a>(base: &'a str, texts: &[&'a str]) -> Option<&'a str> {
    let only = |allowed: &[&str]| {
        texts
            .iter()
            .all(|a| allowed.contains(&a.split('=').next().unwrap_or(a)))
    };
    let listing = match base {
        "mount" => only(&["-l", "--show-labels"]),
        "swapon" => only(&[
            "--show",
            "-s",
            "--summary",
            "--noheadings",
            "--bytes",
            "--raw",
        ]),
        "losetup" => only(&[
            "-a",
            "--all",
            "-l",
            "--list",
            "-n",
            "--noheadings",
            "-J",
            "--json",
            "--raw",
        ]),
        "kpartx" => {
            texts.first() == Some(&"-l")
                && texts[1..].iter().all(|a| !a.starts_with('-') || *a == "-v")
        }
        "zpool" => texts == ["import"],
        "brew" => texts == ["tap"] || texts == ["services"],
        // efibootmgr alone prints the boot entries (`-v` with their
        // paths, `-u` reads its arguments as UCS-2); mkinitcpio alone is a
        // dry run that writes no image.
        "efibootmgr" => only(&["-v", "--verbose", "-u", "--unicode"]),
        "mkinitcpio" => texts.is_empty(),
        _ => false,
    };
    listing.then(|| texts.first().copied().unwrap_or(base))
}

/// The word `openssl x509` reads as a certificate (`-in F`): x509 parses
/// and prints only the certificate in a file, never a private key beside
/// it, so the file is not read as a credential store. Not when a key is
/// named to sign with (`-signkey`, `-CAkey`, `-key`).
pub(super) fn certificate_operand(argv: &[Word]) -> Option<usize> {
    let name = argv.first()?.text();
    if name.rsplit('/').next() != Some("openssl") || argv.get(1)?.text() != "x509" {
        return None;
    }
    if argv
        .iter()
        .any(|w| matches!(w.text(), "-signkey" | "-CAkey" | "-key" | "-CAkeyform"))
    {
        return None;
    }
    argv.iter().position(|w| w.text() == "-in").map(|i| i + 1)
}

/// An option that names a file the command writes (`-o PATH`,
/// `--output=PATH`, `--dest PATH`): beside a read verb it still writes
/// there, so the command's operands are not all reads.
pub(super) fn names_output(texts: &[&str]) -> bool {
    texts.iter().any(|t| {
        let flag = t.split('=').next().unwrap_or(t);
        super::tables::OUTPUT_FLAGS.contains(&flag)
    })
}

/// `rpm -q…`/`--query`: rpm takes one mode per run, and in query mode
/// `-i` is `--info`, `-l` `--list` (`rpm -qi bash`, `rpm -qfi FILE`), not
/// an install.
pub(super) fn rpm_query(texts: &[&str]) -> bool {
    texts.iter().take_while(|a| **a != "--").any(|a| {
        *a == "--query"
            || (a.starts_with('-')
                && !a.starts_with("--")
                && a[1..].chars().all(|c| c.is_ascii_alphabetic())
                && a.contains('q'))
    })
}

/// A Windows-style help switch as the last word (`msbuild /help`, `wine
/// reg add /?`), with no Unix-style option beside it (`rm -rf /?` is a glob of the root's one-letter
/// names, not a help request).
pub(super) fn windows_help<'a>(texts: &[&'a str]) -> Option<&'a str> {
    let last = *texts.last()?;
    // Before it, only more of the tool's words (a subcommand, `/`-switches):
    // no operand a Unix tool would act on before it met the `/?` (`shred
    // /dev/sda /?` shreds, then fails on `/?`).
    let words_only = texts[..texts.len() - 1].iter().all(|a| {
        a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    (matches!(last, "/?" | "/help" | "/h")
        && words_only
        && !texts[..texts.len() - 1].iter().any(|a| a.starts_with('-')))
    .then_some(last)
}

/// The subcommand of a program no rule knows that opens an interactive
/// shell or console (`ansible-test shell`, `cdist shell`, `X console`):
/// it runs whatever is typed or piped into it, not in the command.
/// With more words it runs them as a command instead (`adb shell pidof
/// x`), which is judged as the program's other uses are.
pub(super) fn interactive_subcommand<'a>(words: &[&'a str]) -> Option<&'a str> {
    let [first] = words else {
        return None;
    };
    matches!(*first, "shell" | "console" | "repl").then_some(*first)
}

/// Prompt strings: bash expands them only when it shows a prompt (an
/// interactive shell, or `PS4` under `set -x`), and the only code they
/// can run is the command substitutions written in their value.
pub(super) fn is_prompt_var(name: &str) -> bool {
    matches!(name, "PS0" | "PS1" | "PS2" | "PS3" | "PS4")
}

/// The command substitutions written in a value (`$(...)` with its
/// parentheses balanced, and backquoted text), in order; `None` when one
/// is not closed (what would run cannot be read).
pub(super) fn written_substitutions(text: &str) -> Option<Vec<String>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == b'$' && b.get(i + 1) == Some(&b'(') && b.get(i + 2) != Some(&b'(') {
            let start = i + 2;
            let mut depth = 1;
            let mut j = start;
            while j < b.len() && depth > 0 {
                match b[j] {
                    b'(' => depth += 1,
                    b')' => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
            if depth > 0 {
                return None;
            }
            out.push(text[start..j - 1].to_string());
            i = j;
            continue;
        }
        if b[i] == b'`' {
            let end = text[i + 1..].find('`')? + i + 1;
            out.push(text[i + 1..end].to_string());
            i = end + 1;
            continue;
        }
        i += 1;
    }
    Some(out)
}

impl Ctx<'_> {
    /// `PS1='…'`: judged by the command substitutions written in it
    /// (they run at every prompt), not as a hook. Returns false when the
    /// value cannot be read (computed from other variables), which the
    /// caller treats as the hook it may be.
    pub(super) fn prompt_value(
        &mut self,
        value: &super::Word,
        depth: u32,
        counter: &mut usize,
    ) -> bool {
        let Some(text) = value.literal.as_deref() else {
            // Command substitutions in an unquoted or double-quoted value
            // run now and are judged where they stand; a parameter's value
            // is not known.
            return value.params.is_empty();
        };
        let Some(subs) = written_substitutions(text) else {
            return false;
        };
        for s in subs {
            self.nested(&s, depth, counter);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_forms() {
        assert_eq!(help_request("hcloud", &["-h"]), Some("-h"));
        assert_eq!(help_request("shutdown", &["-h"]), None);
        assert_eq!(help_request("ls", &["-h", "x"]), None);
        assert_eq!(help_request("aws", &["s3", "rm", "help"]), Some("help"));
        assert_eq!(help_request("kubectl", &["delete", "pod", "help"]), None);
        assert_eq!(windows_help(&["reg", "add", "/?"]), Some("/?"));
        assert_eq!(windows_help(&["-rf", "/?"]), None);
        assert_eq!(help_request("msbuild", &["/help"]), Some("/help"));
    }

    #[test]
    fn rpm_modes() {
        assert!(rpm_query(&["-qi", "bash"]));
        assert!(rpm_query(&["--query", "--info", "bash"]));
        assert!(!rpm_query(&["-i", "x.rpm"]));
        assert!(!rpm_query(&["-Uvh", "x.rpm"]));
    }

    #[test]
    fn setgid_modes() {
        assert!(setgid_only(&["2775", "dir"]));
        assert!(setgid_only(&["g+s", "dir"]));
        assert!(setgid_only(&["u=rwx,g+rws", "dir"]));
        assert!(!setgid_only(&["4755", "x"]));
        assert!(!setgid_only(&["6775", "x"]));
        assert!(!setgid_only(&["+s", "x"]));
        assert!(!setgid_only(&["ug+s", "x"]));
        assert!(!setgid_only(&["644", "x"]));
    }

    #[test]
    fn declared_values() {
        assert!(declared_plain_value("export", &["PS1=$(x)"], "PS1=$(x)"));
        assert!(!declared_plain_value("export", &["a[$(x)]=1"], "a[$(x)]=1"));
        assert!(!declared_plain_value(
            "declare",
            &["-a", "a=($(x))"],
            "a=($(x))"
        ));
        assert!(!declared_plain_value(
            "declare",
            &["-i", "a=$(x)"],
            "a=$(x)"
        ));
        assert!(!declared_plain_value("printf", &["-v", "a=$(x)"], "a=$(x)"));
    }

    #[test]
    fn substitutions_in_a_value() {
        assert_eq!(
            written_substitutions("$(whoami)@`hostname`:$((1+2)) $(a $(b))"),
            Some(vec!["whoami".into(), "hostname".into(), "a $(b)".into()])
        );
        assert_eq!(written_substitutions("\\$(x) \\u@\\h"), Some(vec![]));
        assert_eq!(written_substitutions("$(rm -rf ~"), None);
    }
}
