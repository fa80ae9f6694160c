//! Which environment variables are credentials and which are configuration,
//! judged by name: the one rule the caller's environment filter
//! (`crate::caller_env`) and output redaction (`crate::redact`) both use.
//! The reasoning is in `docs/environment.md`.
//!
//! A name is secret-looking when
//! - it contains one of [`SECRET_SUBSTRINGS`] (`TOKEN`, `SECRET`,
//!   `PASSWORD`, ...: words no configuration name uses), or
//! - one of its `_`-separated words is a credential word: `KEY` or a word
//!   ending in `KEY` (`API_KEY`, `SSHKEY`), `PASS` or a word ending in it
//!   (`DB_PASS`), `PWD` (`MYSQL_PWD`; the shell's own `PWD` and `OLDPWD`
//!   are not), `PAT`, `CREDS`, `SESSION`, `OAUTH`, or a word starting with
//!   `AUTH` other than `AUTHOR`/`AUTHORS` (so `GIT_AUTHOR_NAME` is not), or
//! - it starts with one of [`SECRET_PREFIXES`]: the credential families of
//!   cloud and forge CLIs, and the variables that point at an agent socket
//!   or a cluster's credentials.
//!
//! Words, not substrings, for the short markers: `KEY` inside `KEYMAP` or
//! `AUTH` inside `GIT_AUTHOR_EMAIL` is not a credential.

/// Substrings that make any name secret-looking.
pub(crate) const SECRET_SUBSTRINGS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "APIKEY",
    "PRIVATE",
    "COOKIE",
];

/// `_`-separated words that make a name secret-looking (see the module docs
/// for the word endings and `AUTH*`).
pub(crate) const SECRET_WORDS: &[&str] = &["PWD", "PAT", "CREDS", "SESSION", "OAUTH"];

/// Prefixes of credential families: every variable of these tools is
/// withheld (their profiles, regions and hosts lead to their credentials).
pub(crate) const SECRET_PREFIXES: &[&str] = &[
    "AWS_",
    "AZURE_",
    "GOOGLE_",
    "GCLOUD_",
    "CLOUDSDK_",
    "GH_",
    "GITHUB_",
    "OPENAI_",
    "ANTHROPIC_",
    "VAULT_",
    "DOCKER_",
    "KUBECONFIG",
    "SSH_AGENT_",
    "GPG_AGENT_",
];

/// Whether a variable's name looks like it holds a credential.
pub(crate) fn is_secret_looking_name(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    if up == "PWD" || up == "OLDPWD" {
        return false;
    }
    SECRET_SUBSTRINGS.iter().any(|m| up.contains(m))
        || SECRET_PREFIXES.iter().any(|p| up.starts_with(p))
        || up.split('_').any(|w| {
            SECRET_WORDS.contains(&w)
                || w.ends_with("KEY")
                || w.ends_with("KEYS")
                || w.ends_with("PASS")
                || (w.starts_with("AUTH") && w != "AUTHOR" && w != "AUTHORS")
        })
}

/// Configuration that is never a secret: the locale, paths, the user's
/// identity (what `git commit` stamps), the terminal, and the toolchains'
/// and tools' own settings. Their values are not looked for in a run's
/// output (a `git log` shows the author's name as it is), unless the name
/// is also secret-looking.
pub(crate) const CONFIGURATION_NAMES: &[&str] = &[
    // The session and the shell.
    "PATH",
    "HOME",
    "PWD",
    "OLDPWD",
    "SHELL",
    "USER",
    "LOGNAME",
    "HOSTNAME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "FORCE_COLOR",
    "CI",
    "TZ",
    "TMPDIR",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "SOURCE_DATE_EPOCH",
    // Identity.
    "EMAIL",
    "DEBEMAIL",
    "DEBFULLNAME",
    // Toolchains and how tools behave.
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "CONDA_EXE",
    "CARGO_HOME",
    "CARGO_TARGET_DIR",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "RUSTFLAGS",
    "GOPATH",
    "GOROOT",
    "GOMODCACHE",
    "GOCACHE",
    "GOFLAGS",
    "NVM_DIR",
    "NVM_BIN",
    "NODE_PATH",
    "NODE_ENV",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "JAVA_HOME",
    "MAVEN_HOME",
    "GRADLE_USER_HOME",
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "PKG_CONFIG_PATH",
    "LD_LIBRARY_PATH",
    "MAKEFLAGS",
];

/// Prefixes of configuration names: locale categories, git's identity
/// variables, the XDG base directories.
pub(crate) const CONFIGURATION_PREFIXES: &[&str] =
    &["LC_", "GIT_AUTHOR_", "GIT_COMMITTER_", "XDG_"];

/// Whether a variable is configuration (see [`CONFIGURATION_NAMES`]); a
/// secret-looking name never is.
pub(crate) fn is_configuration_name(name: &str) -> bool {
    (CONFIGURATION_NAMES.contains(&name)
        || CONFIGURATION_PREFIXES.iter().any(|p| name.starts_with(p)))
        && !is_secret_looking_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_by_name() {
        for n in [
            "AWS_SECRET_ACCESS_KEY",
            "AWS_PROFILE",
            "GH_TOKEN",
            "GITHUB_PAT",
            "GITLAB_PAT",
            "NPM_TOKEN",
            "CARGO_REGISTRY_TOKEN",
            "OPENAI_API_KEY",
            "STRIPE_APIKEY",
            "DB_PASS",
            "MYSQL_PWD",
            "PGPASSWORD",
            "SSH_AUTH_SOCK",
            "SSH_AGENT_PID",
            "DBUS_SESSION_BUS_ADDRESS",
            "HTTP_AUTHORIZATION",
            "OAUTH_CLIENT",
            "SIGNING_KEY",
            "my_private_thing",
            "KUBECONFIG",
            "DOCKER_HOST",
            "SESSION_COOKIE",
            "DEPLOY_CREDS",
        ] {
            assert!(is_secret_looking_name(n), "{n}");
        }
    }

    #[test]
    fn configuration_is_not_secret() {
        for n in [
            "PATH",
            "PWD",
            "OLDPWD",
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "GIT_COMMITTER_NAME",
            "KEYMAP",
            "PASSTHROUGH_MODE",
            "VIRTUAL_ENV",
            "RUSTUP_TOOLCHAIN",
            "PYTHONDONTWRITEBYTECODE",
            "npm_config_cache",
            "LANG",
            "LC_ALL",
            "TERM",
        ] {
            assert!(!is_secret_looking_name(n), "{n}");
        }
        for n in ["GIT_AUTHOR_NAME", "LC_ALL", "XDG_CACHE_HOME", "VIRTUAL_ENV"] {
            assert!(is_configuration_name(n), "{n}");
        }
        // Listed by prefix, but secret-looking: not configuration.
        assert!(!is_configuration_name("XDG_SESSION_ID"));
        assert!(!is_configuration_name("DEPLOY_TOKEN"));
    }
}
