//! The caller's environment, filtered: what a rehearsed command's
//! environment is made of, through every door. The reasoning and the lists
//! are in `docs/environment.md`.
//!
//! - The client sends its own process environment in the envelope's
//!   `caller_env`: the CLI, the hooks and the MCP server fill it from their
//!   own environment (the agent host's, which started them), the Python
//!   client from `os.environ`. The engine never takes its own process
//!   environment for a client's (a daemon's is not its clients').
//! - [`filter`] keeps every variable but those that could carry a
//!   credential or cannot be passed: names that are not shell identifiers
//!   (counted, never named), secret-looking names
//!   ([`crate::model::variables`]), secret-looking values
//!   ([`is_secret_looking_value`]), values that are not text as the host
//!   had them, and values too long for `execve`. Each one removed is named
//!   `env:NAME` in `rehearsal.stripped`.
//! - A client that sends nothing gets the login environment of the user the
//!   command runs as ([`login_default`]), each variable named
//!   `provided:env:NAME`.
//! - [`command_env`]: that, `PWD`, then the envelope's `env` over it.
//!   Nothing else is added: no `SOURCE_DATE_EPOCH`, no fixed `USER`. `PATH`
//!   is always there (the system's, named as provided, when neither gave
//!   one: the stubs' directory goes on it).

use std::collections::BTreeMap;
use std::path::Path;

use crate::model::text::is_shell_identifier;
use crate::model::variables::is_secret_looking_name;

/// The system's command path: a login's default, and `PATH` when the caller
/// gave none.
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin";

/// The longest value passed: `execve` refuses a longer string
/// (`MAX_ARG_STRLEN`, 32 pages).
pub(crate) const MAX_VALUE_BYTES: usize = 128 * 1024 - 1;

/// The most a client's environment may hold (names and values); above it
/// the envelope is refused.
pub(crate) const MAX_TOTAL_BYTES: usize = 512 * 1024;

/// The most variables a client's environment may hold.
pub(crate) const MAX_VARS: usize = 4096;

/// Values shorter than this are never taken for random tokens.
const TOKEN_MIN_LEN: usize = 20;
/// Hex strings from this length on are taken for keys.
const HEX_TOKEN_MIN_LEN: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum CallerEnvError {
    #[error(
        "{count} variables, more than the {MAX_VARS} a rehearsal takes; send the client's environment without the extra variables"
    )]
    TooMany { count: usize },
    #[error(
        "{bytes} bytes of names and values, more than the {MAX_TOTAL_BYTES} a rehearsal takes; send the client's environment without its largest variables"
    )]
    TooLarge { bytes: usize },
}

/// A client's environment after [`filter`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FilteredEnv {
    /// What reaches the command.
    pub vars: BTreeMap<String, String>,
    /// Names removed (secret-looking, or a value that cannot be passed),
    /// sorted: named `env:NAME` in the record.
    pub removed: Vec<String>,
    /// Variables whose names are not shell identifiers: dropped and
    /// counted, never named.
    pub unnamed: usize,
}

/// The client's environment without what could carry a credential or
/// cannot be passed (see the module docs). Idempotent: the filtered
/// variables filter to themselves.
pub(crate) fn filter(raw: &BTreeMap<String, String>) -> Result<FilteredEnv, CallerEnvError> {
    if raw.len() > MAX_VARS {
        return Err(CallerEnvError::TooMany { count: raw.len() });
    }
    let bytes: usize = raw.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if bytes > MAX_TOTAL_BYTES {
        return Err(CallerEnvError::TooLarge { bytes });
    }
    let mut out = FilteredEnv::default();
    for (k, v) in raw {
        if !is_shell_identifier(k) {
            out.unnamed += 1;
        } else if is_secret_looking_name(k) || !is_passable(v) || is_secret_looking_value(v) {
            out.removed.push(k.clone());
        } else {
            out.vars.insert(k.clone(), v.clone());
        }
    }
    Ok(out)
}

/// A value `execve` takes as the host had it: no NUL, no bytes that were
/// not text (the client's lossy conversion left U+FFFD for them), not too
/// long.
fn is_passable(v: &str) -> bool {
    !v.contains('\0') && !v.contains('\u{FFFD}') && v.len() <= MAX_VALUE_BYTES
}

/// Whether a value looks like a credential whatever its name: a shape the
/// output redaction knows (cloud and forge keys, private key blocks, JWTs,
/// `password=...`), a URL with a password in it, or a long random token
/// (mixed-case letters and digits with high entropy, or a long hex string).
pub(crate) fn is_secret_looking_value(v: &str) -> bool {
    (may_match_a_detector(v) && {
        let mut t = crate::redact::Redactions::default();
        let _ = crate::redact::Redactor::default().redact_bytes(v.as_bytes(), &mut t);
        t.count > 0
    }) || has_url_password(v)
        || is_token_like(v)
}

/// Whether one of the output redaction's detectors could match `v`: false
/// only when no match is possible (each detector's own necessary
/// condition), so that the detectors are not run on an environment of
/// paths and plain settings. Never a verdict: when true the detectors
/// decide.
fn may_match_a_detector(v: &str) -> bool {
    crate::redact::may_match_a_detector(v.as_bytes())
}

/// `scheme://user:password@host` anywhere in `v`.
fn has_url_password(v: &str) -> bool {
    let mut rest = v;
    while let Some(i) = rest.find("://") {
        rest = &rest[i + 3..];
        let authority = rest
            .split(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .next()
            .unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && userinfo
                .split_once(':')
                .is_some_and(|(_, pw)| !pw.is_empty())
        {
            return true;
        }
    }
    false
}

/// A long random token: base64-like characters only (no path, no dots),
/// at least [`TOKEN_MIN_LEN`] long, and either upper and lower case letters
/// and digits at high entropy, or hex of at least [`HEX_TOKEN_MIN_LEN`].
fn is_token_like(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() < TOKEN_MIN_LEN
        || b[0] == b'/'
        || !b
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"+/=_-".contains(c))
    {
        return false;
    }
    let has = |f: fn(&u8) -> bool| b.iter().any(f);
    let (upper, lower, digit) = (
        has(u8::is_ascii_uppercase),
        has(u8::is_ascii_lowercase),
        has(u8::is_ascii_digit),
    );
    let hex = b.iter().all(u8::is_ascii_hexdigit);
    (upper
        && lower
        && digit
        && crate::redact::shannon_entropy(b) >= crate::redact::MIN_ENTROPY_BITS)
        || (hex && digit && (upper || lower) && b.len() >= HEX_TOKEN_MIN_LEN)
}

/// This process's environment, as a client sends it: names and values as
/// text (bytes that are not UTF-8 become U+FFFD, so such a name is counted
/// and such a value removed and named by [`filter`]).
pub(crate) fn of_this_process() -> BTreeMap<String, String> {
    std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// This process's file mode creation mask, as a client sends it (read
/// from `/proc/self/status`: `umask(2)` can only be read by changing it,
/// which another thread could see). `None` when it cannot be read.
pub(crate) fn umask_of_this_process() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let v = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(v.trim(), 8)
        .ok()
        .filter(|m| *m <= 0o777)
}

/// The environment a login of `uid` starts with, for a client that sent
/// none: `HOME`, `USER`, `LOGNAME` and `SHELL` from the password database,
/// and [`DEFAULT_PATH`].
pub(crate) fn login_default(uid: u32) -> BTreeMap<String, String> {
    let mut env = BTreeMap::from([("PATH".to_string(), DEFAULT_PATH.to_string())]);
    if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        env.insert("HOME".into(), u.dir.display().to_string());
        env.insert("USER".into(), u.name.clone());
        env.insert("LOGNAME".into(), u.name);
        env.insert("SHELL".into(), u.shell.display().to_string());
    }
    env
}

/// Where a command's environment came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnvSource {
    /// The client's own, filtered.
    Client,
    /// The client sent none: [`login_default`].
    LoginDefault,
}

/// A command's environment and what the record says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandEnv {
    /// Sorted by name.
    pub vars: Vec<(String, String)>,
    /// Variables dryrun set that the caller did not give: named
    /// `provided:env:NAME`.
    pub provided: Vec<String>,
    pub source: EnvSource,
}

/// The command's environment: the client's filtered environment (or the
/// login default of `run_uid`, the user the command runs as), `PWD` (the
/// directory it starts in, as its shell sets it), then the envelope's
/// `env` over them; `PATH` always.
pub(crate) fn command_env(
    caller: Option<&FilteredEnv>,
    run_uid: u32,
    envelope_env: &BTreeMap<String, String>,
    workdir: &Path,
) -> CommandEnv {
    let (mut env, mut provided, source) = match caller {
        Some(c) => (c.vars.clone(), Vec::new(), EnvSource::Client),
        None => {
            let d = login_default(run_uid);
            let names = d.keys().cloned().collect();
            (d, names, EnvSource::LoginDefault)
        }
    };
    if !env.contains_key("PATH") && !envelope_env.contains_key("PATH") {
        env.insert("PATH".into(), DEFAULT_PATH.into());
        provided.push("PATH".into());
    }
    env.insert("PWD".into(), workdir.display().to_string());
    // Validation refused any other name; the one rule holds here as well.
    for (k, v) in envelope_env.iter().filter(|(k, _)| is_shell_identifier(k)) {
        env.insert(k.clone(), v.clone());
        provided.retain(|p| p != k);
    }
    provided.sort();
    provided.dedup();
    CommandEnv {
        vars: env.into_iter().collect(),
        provided,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detectors_find(v: &str) -> bool {
        let mut t = crate::redact::Redactions::default();
        let _ = crate::redact::Redactor::default().redact_bytes(v.as_bytes(), &mut t);
        t.count > 0
    }

    /// The prefilter never hides what a detector finds: one value of each
    /// detector's shape, each in a few surroundings, and random mixes of
    /// the detectors' pieces; and plain paths and settings skip them.
    #[test]
    fn detector_prefilter_never_hides_a_detected_value() {
        let shapes = [
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
            "AKIAABCDEFGHIJKLMNOP",
            "ASIAABCDEFGHIJKLMNOP",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_abcdefghijklmnopqrstuvwxyz",
            "glpat-abcdefghijklmnopqrst",
            "xoxb-1234567890-abcdef",
            "sk_live_abcdefghijklmnop",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
            "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "password=hunter2xyz",
            "DB_PASSWORD: s3cr3t-value",
            "api_key=\"q8Zr2LmX0pVt\"",
            "AUTH_TOKEN=Zx8Qw3Er5Ty7Ui9OpAs2Df4Gh6Jk8Lz",
            "client_secret: 'abc123def456'",
            "MY_CREDENTIAL=Qm9vbGVhbkxvZ2ljSXNGdW4xMjM0NTY3ODk",
        ];
        for s in shapes {
            for v in [s.to_string(), format!("x {s} y"), format!("a:b={s}")] {
                assert!(detectors_find(&v), "fixture not detected: {v}");
                assert!(may_match_a_detector(&v), "prefilter hid {v}");
            }
        }
        let pieces = [
            "AKIA",
            "ghp_",
            "xox",
            "eyJ",
            "AIza",
            "k_live_",
            "-----BEGIN",
            " PRIVATE KEY-----",
            "=",
            ":",
            "\"",
            "'",
            " ",
            "token",
            "Secret",
            "PASS",
            "word",
            "key",
            "aws",
            "sk",
            "auth",
            "credential",
            "abcdefghijklmnopqrstuvwxyz",
            "0123456789ABCDEFGHIJ",
            "Zx8Qw3Er5Ty7Ui9OpAs2Df4Gh6Jk8Lz",
            "/usr/bin",
            "_",
            "-",
            ".",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut detected = 0;
        for _ in 0..20_000 {
            let n = 1 + next() % 6;
            let v: String = (0..n)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect();
            if detectors_find(&v) {
                detected += 1;
                assert!(may_match_a_detector(&v), "prefilter hid {v:?}");
            }
        }
        assert!(
            detected > 100,
            "the random values must exercise the detectors ({detected})"
        );
        for plain in [
            "/home/u/.cargo/bin:/usr/bin:/bin",
            "en_US.UTF-8",
            "di=01;34:ln=01;36:mi=00:pi=40;33",
            "stable-x86_64-unknown-linux-gnu",
            "xterm-256color",
        ] {
            assert!(!may_match_a_detector(plain), "{plain}");
            assert!(!is_secret_looking_value(plain), "{plain}");
        }
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keeps_toolchains_and_identity_and_removes_secrets() {
        let raw = env(&[
            ("PATH", "/home/u/.cargo/bin:/usr/bin:/bin"),
            ("HOME", "/home/u"),
            ("USER", "u"),
            ("LANG", "en_US.UTF-8"),
            ("VIRTUAL_ENV", "/home/u/proj/.venv"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("RUSTUP_TOOLCHAIN", "stable-x86_64-unknown-linux-gnu"),
            ("GIT_AUTHOR_NAME", "Alice Example"),
            ("GIT_AUTHOR_EMAIL", "alice@example.com"),
            ("LS_COLORS", "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33"),
            ("DJANGO_SETTINGS_MODULE", "site.settings.Production2024"),
            (
                "AWS_SECRET_ACCESS_KEY",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ),
            ("GH_TOKEN", "ghp_R8kQ2vX9mN4pL7tY1wZ3aB6cD0eF5gH8jK2m"),
            ("INNOCENT", "ghp_R8kQ2vX9mN4pL7tY1wZ3aB6cD0eF5gH8jK2m"),
            (
                "DATABASE_URL",
                "postgres://app:hunter2@db.internal:5432/app",
            ),
            ("PUBLIC_URL", "https://alice@example.com/x"),
            ("RANDOMISH", "Zx81kQpL0vN4mR7tY2wB9cD5"),
            ("BUILD_ID", "0123456789abcdef0123456789abcdef"),
            ("BAD-NAME", "x"),
            ("NOT_TEXT", "a\u{FFFD}b"),
        ]);
        let f = filter(&raw).unwrap();
        for kept in [
            "PATH",
            "HOME",
            "USER",
            "LANG",
            "VIRTUAL_ENV",
            "PYTHONDONTWRITEBYTECODE",
            "RUSTUP_TOOLCHAIN",
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "LS_COLORS",
            "DJANGO_SETTINGS_MODULE",
            "PUBLIC_URL",
        ] {
            assert_eq!(f.vars.get(kept), raw.get(kept), "{kept}");
        }
        assert_eq!(
            f.removed,
            [
                "AWS_SECRET_ACCESS_KEY",
                "BUILD_ID",
                "DATABASE_URL",
                "GH_TOKEN",
                "INNOCENT",
                "NOT_TEXT",
                "RANDOMISH"
            ]
        );
        assert_eq!(f.unnamed, 1);
        // Idempotent: what a saved envelope carries filters to itself.
        assert_eq!(filter(&f.vars).unwrap().vars, f.vars);
    }

    #[test]
    fn sizes_are_capped() {
        let many: BTreeMap<String, String> = (0..=MAX_VARS)
            .map(|i| (format!("V{i}"), "x".into()))
            .collect();
        assert!(matches!(filter(&many), Err(CallerEnvError::TooMany { .. })));
        let big = env(&[("A", &"x".repeat(MAX_TOTAL_BYTES))]);
        assert!(matches!(filter(&big), Err(CallerEnvError::TooLarge { .. })));
        let long = env(&[("LONG", &"x y".repeat(MAX_VALUE_BYTES / 3 + 1))]);
        assert_eq!(filter(&long).unwrap().removed, ["LONG"]);
    }

    #[test]
    fn the_command_env_adds_only_pwd_and_what_is_missing() {
        let f = filter(&env(&[("HOME", "/home/u"), ("PATH", "/p")])).unwrap();
        let e = command_env(
            Some(&f),
            0,
            &env(&[("GIT_AUTHOR_NAME", "A")]),
            Path::new("/w"),
        );
        assert_eq!(
            e.vars,
            [
                ("GIT_AUTHOR_NAME".to_string(), "A".to_string()),
                ("HOME".into(), "/home/u".into()),
                ("PATH".into(), "/p".into()),
                ("PWD".into(), "/w".into()),
            ]
        );
        assert!(e.provided.is_empty());
        assert_eq!(e.source, EnvSource::Client);
        // No PATH from the client: the system's, named.
        let e = command_env(
            Some(&FilteredEnv::default()),
            0,
            &BTreeMap::new(),
            Path::new("/w"),
        );
        assert_eq!(e.provided, ["PATH"]);
        // Nothing sent: root's login environment, every variable named.
        let e = command_env(None, 0, &env(&[("HOME", "/h")]), Path::new("/w"));
        assert_eq!(e.source, EnvSource::LoginDefault);
        assert!(e.vars.contains(&("USER".into(), "root".into())), "{e:?}");
        assert!(e.vars.contains(&("HOME".into(), "/h".into())), "{e:?}");
        assert_eq!(e.provided, ["LOGNAME", "PATH", "SHELL", "USER"]);
    }
}
