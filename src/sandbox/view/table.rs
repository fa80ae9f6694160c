//! The built-in tables of the view, with the reason for each entry: what
//! the sandbox masks, which files it serves with their credential lines
//! removed, and which directories outside the workspace are caches (their
//! writes are listed, not judged). `docs/sandbox-view.md` shows the same
//! tables; a unit test keeps the two in step.
//!
//! A path that starts with `~/` is in the home the rehearsal shows (the
//! passwd home of the user the command runs as); others are absolute.

/// One rule of the tables: an id (named in findings and in the record as
/// `mask:ID`, `filter:ID`, `cache:ID`), the paths it covers, and why.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub id: &'static str,
    pub paths: &'static [&'static str],
    pub reason: &'static str,
}

const fn e(id: &'static str, paths: &'static [&'static str], reason: &'static str) -> Entry {
    Entry { id, paths, reason }
}

/// Masked: a file becomes an empty read-only file, a directory an empty
/// read-only directory. The command can neither read nor list what was
/// there, nor write it.
pub(crate) const MASKS: &[Entry] = &[
    // ---- the host's own secrets, in the system trees the image shows
    e(
        "shadow",
        &[
            "/etc/shadow",
            "/etc/shadow-",
            "/etc/gshadow",
            "/etc/gshadow-",
            "/etc/security/opasswd",
        ],
        "password hashes of the host's accounts",
    ),
    e(
        "sudoers",
        &["/etc/sudoers", "/etc/sudoers.d"],
        "who may become root on the host, and how",
    ),
    e(
        "host-keys",
        &["/etc/ssh"],
        "the host's SSH private keys and its sshd configuration",
    ),
    e(
        "tls-keys",
        &["/etc/ssl/private"],
        "the host's TLS private keys",
    ),
    e(
        "kerberos",
        &["/etc/krb5.keytab"],
        "the host's Kerberos service keys",
    ),
    e(
        "machine-id",
        &["/etc/machine-id"],
        "a stable identifier of the host that tools send home",
    ),
    e(
        "container-auth",
        &["/etc/docker", "/etc/containers/auth.json"],
        "container registry credentials and the container daemon's configuration",
    ),
    e(
        "network-secrets",
        &[
            "/etc/NetworkManager/system-connections",
            "/etc/wpa_supplicant",
        ],
        "Wi-Fi and VPN passwords",
    ),
    e(
        "netrc-system",
        &["/etc/netrc"],
        "passwords for hosts, system-wide",
    ),
    e(
        "subids",
        &["/etc/subuid", "/etc/subgid"],
        "the host's id delegations, dryrun's own range among them",
    ),
    e(
        "dryrun",
        &["/etc/dryrun"],
        "dryrun's system policy: egress pins, services and reviewers are not the command's business",
    ),
    // ---- keys and credential stores in the home
    e(
        "ssh",
        &["~/.ssh"],
        "SSH private keys (under any name), agent sockets and the hosts the user reaches; the rehearsal has no network to use them on",
    ),
    e(
        "gnupg",
        &["~/.gnupg"],
        "GnuPG private keys and the agent's sockets",
    ),
    e(
        "password-store",
        &["~/.password-store"],
        "pass(1)'s encrypted passwords, whose file names list the user's accounts",
    ),
    e(
        "keyrings",
        &[
            "~/.local/share/keyrings",
            "~/.local/share/kwalletd",
            "~/.config/kwalletrc",
        ],
        "the desktop keyrings (GNOME Keyring, KWallet)",
    ),
    e(
        "password-managers",
        &[
            "~/.config/1Password",
            "~/.config/op",
            "~/.config/Bitwarden",
            "~/.config/Bitwarden CLI",
            "~/.config/keepassxc",
        ],
        "password managers' vaults, sessions and unlock state",
    ),
    e(
        "browsers",
        &[
            "~/.mozilla",
            "~/.thunderbird",
            "~/.config/google-chrome",
            "~/.config/chromium",
            "~/.config/BraveSoftware",
            "~/.config/microsoft-edge",
            "~/.config/vivaldi",
            "~/.config/opera",
            "~/snap/firefox",
            "~/snap/chromium",
            "~/.var/app/org.mozilla.firefox",
            "~/.var/app/com.google.Chrome",
        ],
        "browser and mail profiles: cookies, saved passwords, history and mail",
    ),
    // ---- cloud, cluster and registry credentials
    e(
        "aws",
        &["~/.aws/credentials", "~/.aws/sso/cache", "~/.aws/cli/cache"],
        "AWS access keys and cached session tokens (~/.aws/config is served filtered)",
    ),
    e(
        "gcloud",
        &["~/.config/gcloud"],
        "Google Cloud credentials and access tokens",
    ),
    e(
        "azure",
        &["~/.azure"],
        "Azure CLI tokens and service principal secrets",
    ),
    e(
        "cloud-misc",
        &[
            "~/.oci",
            "~/.config/doctl",
            "~/.config/hcloud",
            "~/.terraform.d/credentials.tfrc.json",
            "~/.vault-token",
            "~/.config/flyctl",
            "~/.terraformrc",
            "~/.s3cfg",
            "~/.config/rclone/rclone.conf",
        ],
        "other cloud and infrastructure CLIs' API keys and tokens (OCI, DigitalOcean, Hetzner, Terraform Cloud, Vault, Fly.io, s3cmd, rclone)",
    ),
    e(
        "ml-hubs",
        &[
            "~/.cache/huggingface/token",
            "~/.cache/huggingface/stored_tokens",
            "~/.huggingface/token",
            "~/.kaggle/kaggle.json",
        ],
        "model and dataset hubs' access tokens (Hugging Face, Kaggle), some kept inside a cache directory",
    ),
    e(
        "encryption-keys",
        &["~/.config/sops/age", "~/.age", "~/.config/age"],
        "age and SOPS private keys, which decrypt the secrets a repository keeps encrypted",
    ),
    e(
        "kube",
        &["~/.kube"],
        "Kubernetes cluster credentials (client keys and tokens in kubeconfigs)",
    ),
    e(
        "docker",
        &["~/.docker/config.json", "~/.config/containers/auth.json"],
        "container registry credentials (Docker, Podman)",
    ),
    e(
        "netrc",
        &["~/.netrc", "~/_netrc"],
        "passwords for hosts, used by curl, git, pip and others",
    ),
    e(
        "git-credentials",
        &["~/.git-credentials", "~/.config/git/credentials"],
        "git's store helper: tokens in plain text",
    ),
    e(
        "forge-cli",
        &[
            "~/.config/gh/hosts.yml",
            "~/.config/glab-cli/config.yml",
            "~/.config/hub",
            "~/.config/tea/config.yml",
        ],
        "the forge CLIs' tokens (GitHub, GitLab, Gitea)",
    ),
    e(
        "package-tokens",
        &[
            "~/.cargo/credentials.toml",
            "~/.cargo/credentials",
            "~/.gem/credentials",
            "~/.config/composer/auth.json",
            "~/.composer/auth.json",
            "~/.m2/settings-security.xml",
            "~/.local/share/pypoetry/auth.toml",
            "~/.config/pypoetry/auth.toml",
        ],
        "package registries' publishing tokens (Cargo, RubyGems, Composer, Maven, Poetry): files that hold nothing else",
    ),
    e(
        "database-passwords",
        &["~/.pgpass", "~/.my.cnf", "~/.mylogin.cnf"],
        "database passwords",
    ),
    // ---- the agents' own credentials and transcripts
    e(
        "agents",
        &[
            "~/.claude/.credentials.json",
            "~/.claude.json",
            "~/.claude/history.jsonl",
            "~/.claude/projects",
            "~/.codex/auth.json",
            "~/.codex/history.jsonl",
            "~/.codex/sessions",
            "~/.config/github-copilot",
            "~/.gemini/oauth_creds.json",
            "~/.aider.conf.yml",
        ],
        "AI agents' own sign-ins, API keys and conversation transcripts",
    ),
    // ---- private history
    e(
        "shell-history",
        &[
            "~/.bash_history",
            "~/.zsh_history",
            "~/.zhistory",
            "~/.histfile",
            "~/.sh_history",
            "~/.ksh_history",
            "~/.local/share/fish/fish_history",
            "~/.config/fish/fish_history",
        ],
        "shell history: every command typed, secrets pasted into them included",
    ),
    e(
        "repl-history",
        &[
            "~/.python_history",
            "~/.node_repl_history",
            "~/.irb_history",
            "~/.pry_history",
            "~/.psql_history",
            "~/.mysql_history",
            "~/.sqlite_history",
            "~/.rediscli_history",
            "~/.lesshst",
            "~/.viminfo",
            "~/.Rhistory",
            "~/.julia/logs/repl_history.jl",
        ],
        "REPL, pager and editor history: queries and passwords typed into them",
    ),
];

/// Served filtered: configuration the tools need (registries, indexes,
/// identity, aliases), as a read-only copy without the lines that carry
/// credentials (a key naming a token, password, secret, auth or
/// credential, or a URL with a user name or password in it; under an
/// INI-style section header that carries one, the whole section). The
/// record names each file and how many lines were removed.
pub(crate) const FILTERS: &[Entry] = &[
    e(
        "npmrc",
        &["~/.npmrc"],
        "npm's registries and settings; `_authToken`, `_auth` and `_password` lines removed",
    ),
    e(
        "yarnrc",
        &["~/.yarnrc.yml", "~/.yarnrc"],
        "Yarn's registries and settings; `npmAuthToken` and `npmAuthIdent` lines removed",
    ),
    e(
        "pypirc",
        &["~/.pypirc"],
        "the package index list for uploads; password lines removed",
    ),
    e(
        "pip-conf",
        &["~/.config/pip/pip.conf", "~/.pip/pip.conf"],
        "pip's indexes and settings; index URLs with a user name or password removed",
    ),
    e(
        "cargo-config",
        &["~/.cargo/config.toml", "~/.cargo/config"],
        "cargo's registries, aliases and build settings; registry tokens removed",
    ),
    e(
        "gitconfig",
        &["~/.gitconfig", "~/.config/git/config"],
        "the user's git identity, aliases and settings; extra headers and URLs with credentials removed",
    ),
    e(
        "aws-config",
        &["~/.aws/config"],
        "AWS profiles and regions; access keys removed",
    ),
    e(
        "gradle-properties",
        &["~/.gradle/gradle.properties"],
        "Gradle's settings; signing and publishing passwords removed",
    ),
    e(
        "maven-settings",
        &["~/.m2/settings.xml"],
        "Maven's mirrors and profiles; password lines removed",
    ),
];

/// Caches: writes beneath these are listed in the record, not judged.
/// Tools rebuild them, and the live run writes its own.
pub(crate) const CACHES: &[Entry] = &[
    e(
        "tmp",
        &["/tmp", "/var/tmp"],
        "scratch space: nothing there outlives its use",
    ),
    e(
        "xdg-cache",
        &["~/.cache"],
        "the XDG cache directory (pip, go-build, node-gyp, pre-commit, uv, ...)",
    ),
    e(
        "cargo",
        &[
            "~/.cargo/registry",
            "~/.cargo/git",
            "~/.cargo/.package-cache",
            "~/.cargo/.package-cache-mutate",
            "~/.cargo/.global-cache",
        ],
        "downloaded crates and cargo's own locks",
    ),
    e(
        "rustup",
        &["~/.rustup/tmp", "~/.rustup/downloads"],
        "rustup's downloads in progress",
    ),
    e(
        "npm",
        &["~/.npm", "~/.node-gyp", "~/.config/configstore"],
        "npm's content cache, its logs, node-gyp's headers and the update notifiers' last check",
    ),
    e(
        "js-stores",
        &[
            "~/.yarn/berry/cache",
            "~/.local/share/pnpm/store",
            "~/.pnpm-store",
            "~/.bun/install/cache",
        ],
        "Yarn's, pnpm's and Bun's package stores",
    ),
    e("go", &["~/go/pkg/mod"], "the Go module cache"),
    e(
        "jvm",
        &[
            "~/.m2/repository",
            "~/.gradle/caches",
            "~/.gradle/wrapper/dists",
            "~/.gradle/daemon",
            "~/.gradle/native",
            "~/.ivy2/cache",
        ],
        "Maven's and Gradle's downloaded artifacts and daemons' state",
    ),
    e("nuget", &["~/.nuget/packages"], "NuGet's package cache"),
];

/// Directories that are caches wherever they are, by name.
pub(crate) const CACHE_DIR_NAMES: &[Entry] = &[e(
    "pycache",
    &["__pycache__"],
    "Python's compiled bytecode, written beside the modules it imports",
)];
