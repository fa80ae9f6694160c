//! The classifier's fixed vocabulary: which directories hold system
//! programs, which names are shells and interpreters, which variables and
//! paths change what runs or hold credentials, and the flags and options
//! behind the published bypasses (issue 16). The policy's rules are in
//! `policies/`; these are the built-in checks' word lists.

/// Directories whose programs are "the system's" (so `/usr/bin/rm` is `rm`).
pub(super) const SYSTEM_DIRS: &[&str] = &[
    "/usr/bin/",
    "/bin/",
    "/usr/sbin/",
    "/sbin/",
    "/usr/local/bin/",
    "/usr/local/sbin/",
];
pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "rbash", "posh",
    "yash", "oksh", "loksh", "sash", "elvish", "xonsh",
];
pub(super) const INTERPRETERS: &[&str] = &[
    "python",
    "python2",
    "python3",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "php",
    "lua",
    "deno",
    "bun",
    "Rscript",
    "tclsh",
    "wish",
    "pwsh",
    "powershell",
    "irb",
    "jshell",
    "julia",
];
/// Language interpreters with a read-eval-print loop that the lists above
/// do not hold: given no program (only options), they run whatever reaches
/// their standard input or terminal, as `python3` alone does (`echo CODE |
/// jjs`, `R --no-save`). Their code given in an option is judged where
/// `inline.rs` knows the language; any other argument is a script file.
pub(super) const REPLS: &[&str] = &[
    "jjs",
    "jrunscript",
    "guile",
    "racket",
    "sbcl",
    "clisp",
    "ecl",
    "scala",
    "ghci",
    "erl",
    "iex",
    "octave",
    "octave-cli",
    "gnuplot",
    "slsh",
    "groovysh",
    "R",
];
/// Variables that make a later program run or load something else: the
/// shell's own hooks, loaders, interpreters' start-up options, and the
/// pagers, editors, diff drivers and helpers tools launch (issue 16's
/// environment hooks). `IFS` is here too, but not as the temporary
/// assignment in front of `read`/`mapfile` (`while IFS= read -r l`), where
/// it is ordinary.
pub(super) const HIJACK_VARS: &[&str] = &[
    "PATH",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PS0",
    "PS1",
    "PS4",
    "IFS",
    "SHELLOPTS",
    "BASHOPTS",
    "CDPATH",
    "GLOBIGNORE",
    "HISTFILE",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_PARAMETERS",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PROXY_COMMAND",
    "GIT_TEMPLATE_DIR",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "EDITOR",
    "VISUAL",
    "BROWSER",
    "MAKEFLAGS",
    "MAKESHELL",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONINSPECT",
    "PYTHONBREAKPOINT",
    "PERL5OPT",
    "PERL5LIB",
    "PERL5DB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_TARGET_DIR_RUNNER",
    "NPM_CONFIG_SCRIPT_SHELL",
    "npm_config_script_shell",
    "DOCKER_HOST",
    "KUBECONFIG",
    "HOME",
    "XDG_CONFIG_HOME",
    "ZDOTDIR",
    "INPUTRC",
];
/// Variable-name prefixes with the same effect (`LD_PRELOAD`, `LD_AUDIT`,
/// `GIT_CONFIG_KEY_0`, bash's exported functions `BASH_FUNC_name%%`).
pub(super) const HIJACK_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_CONFIG_KEY_",
    "GIT_CONFIG_VALUE_",
    "BASH_FUNC_",
    "CARGO_TARGET_",
];
/// Builtins whose temporary `IFS=` prefix is ordinary (field splitting of
/// the line they read).
pub(super) const IFS_READERS: &[&str] = &["read", "mapfile", "readarray"];
pub(super) const CREDENTIAL_PATHS: &[&str] = &[
    "~/.ssh",
    "/.ssh/",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "~/.aws",
    "/.aws/",
    "~/.netrc",
    "/.netrc",
    "~/.config/gh",
    "/.config/gh/",
    "~/.docker/config.json",
    "/.docker/config.json",
    "~/.kube",
    "/.kube/config",
    "~/.gnupg",
    "/.gnupg/",
    "~/.git-credentials",
    ".git-credentials",
    "~/.npmrc",
    ".npmrc",
    "~/.pypirc",
    ".pypirc",
    "/.kube/",
    "kubeconfig",
    ".docker/config.json",
    "id_dsa",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "~/.config/gcloud",
    "~/.azure",
];
/// Parts of a variable name that mark it as a credential.
pub const SECRET_MARKERS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "PRIVATE",
];
/// Builtins and common commands whose redefinition changes what a later word
/// means.
pub(super) const SENSITIVE_NAMES: &[&str] = &[
    "cd", "ls", "echo", "printf", "test", "[", "command", "builtin", "exec", "eval", "source",
    "alias", "unalias", "set", "export", "read", "type", "which", "sudo", "git", "cat", "rm", "cp",
    "mv", "sh", "bash", "true", "false",
];

/// File names (last path component) that hold secrets: `.env` and its
/// variants (not the committed `.env.example`), private keys.
pub(super) fn is_secret_file_name(name: &str) -> bool {
    if name == ".env" {
        return true;
    }
    if let Some(rest) = name.strip_prefix(".env.") {
        return !matches!(
            rest,
            "example" | "sample" | "template" | "dist" | "defaults" | "schema" | "test.example"
        );
    }
    (name.ends_with(".pem") && !names_public_pem(name))
        || name.ends_with(".p12")
        || name.ends_with(".pfx")
        || name.ends_with(".key") && !name.ends_with(".pub.key")
        || (["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"]
            .iter()
            .any(|k| name.starts_with(k))
            && !name.ends_with(".pub"))
}

/// A PEM file named as a public key or a certificate (`public.pem`,
/// `certificate.pem`, `fullchain.pem`, `ca-cert.pem`): published, not a
/// secret, unless the name also says it holds a private key
/// (`cert-and-key.pem`, `privkey.pem`).
fn names_public_pem(name: &str) -> bool {
    let stem = name.trim_end_matches(".pem").to_ascii_lowercase();
    let parts: Vec<&str> = stem.split(['-', '_', '.']).collect();
    parts.iter().any(|p| {
        matches!(
            *p,
            "public"
                | "pub"
                | "pubkey"
                | "cert"
                | "certificate"
                | "crt"
                | "chain"
                | "fullchain"
                | "ca"
                | "cacert"
                | "bundle"
        )
    }) && !parts
        .iter()
        .any(|p| matches!(*p, "key" | "private" | "priv" | "privkey" | "secret"))
}

/// Flags that launch a coding agent with its own approvals turned off
/// (issue 16, class 1), on any program: the agent may be started through
/// `npx`, a path or a wrapper.
pub(super) const AGENT_APPROVALS_OFF_ANYWHERE: &[&str] = &[
    "--dangerously-skip-permissions",
    "--allow-dangerously-skip-permissions",
    "--dangerously-bypass-approvals-and-sandbox",
    "--yolo",
    "--trust-all-tools",
    "--allow-all-tools",
    "--dangerously-allow-all",
    "--skip-permissions-unsafe",
];
/// The same, for flags that only mean it on a coding agent (see
/// [`AGENTS`] and [`AGENT_PACKAGES`]).
pub(super) const AGENT_APPROVALS_OFF: &[(&str, &str)] = &[
    ("--trust-tools", ""),
    ("--full-auto", ""),
    ("--auto-approve", ""),
    ("--always-approve", ""),
    ("--no-confirm", ""),
    ("--yes-always", ""),
    ("--permission-mode", "bypassPermissions"),
    ("--approval-mode", "yolo"),
    ("--ask-for-approval", "never"),
    ("-a", "never"),
    ("--sandbox", "danger-full-access"),
    ("-s", "danger-full-access"),
    ("--force", ""),
    ("-y", ""),
    ("--yes", ""),
    ("--allowedTools", "Bash"),
    ("--allowedTools", "Bash(*)"),
    ("--allowed-tools", "Bash"),
    ("--allowed-tools", "Bash(*)"),
    ("--allowed-tools", "run_shell_command"),
    ("-c", "approval_policy=never"),
    ("-c", "approval_policy=\"never\""),
    ("--config", "approval_policy=never"),
    ("-c", "sandbox_mode=danger-full-access"),
    ("-c", "sandbox_mode=\"danger-full-access\""),
    ("--config", "sandbox_mode=danger-full-access"),
    ("--approval-policy", "never"),
];
/// Programs that are coding agents. In [`AGENT_APPROVALS_OFF`] each entry
/// is `(flag, value)`: `""` means the flag alone; otherwise the flag's
/// value (`--flag=v` or `--flag v`) must be this.
pub(super) const AGENTS: &[&str] = &[
    "claude",
    "gemini",
    "codex",
    "q",
    "kiro-cli",
    "cursor-agent",
    "aider",
    "amp",
    "opencode",
    "goose",
    "qwen",
    "crush",
    "copilot",
    "cline",
    "auggie",
    "droid",
];
/// Package names an agent is started by (`npx @google/gemini-cli`).
pub(super) const AGENT_PACKAGES: &[&str] = &[
    "claude-code",
    "gemini-cli",
    "@openai/codex",
    "amazon-q",
    "cursor-agent",
    "aider-chat",
    "opencode-ai",
    "@qwen-code",
];
/// Programs that talk to the network, for a command substitution hidden in
/// one of their arguments (exfiltration through a URL, a DNS name, a ping
/// pattern).
pub(super) const NETWORK_TOOLS: &[&str] = &[
    "curl",
    "wget",
    "http",
    "https",
    "xh",
    "httpie",
    "nslookup",
    "dig",
    "host",
    "drill",
    "kdig",
    "ping",
    "ping6",
    "traceroute",
    "nc",
    "ncat",
    "netcat",
    "socat",
    "telnet",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "ftp",
    "aria2c",
    "lynx",
    "w3m",
    "links",
    "openssl",
    "whois",
    "mail",
    "sendmail",
    "mutt",
    "aws",
    "gcloud",
    "az",
    "s3cmd",
    "rclone",
];
/// Commands whose output carries no data worth stealing (a date stamp in a
/// download's URL is not exfiltration).
pub(super) const HARMLESS_GENERATORS: &[&str] = &[
    "date", "seq", "nproc", "expr", "basename", "dirname", "echo", "printf", "uname", "arch",
    "getconf",
];
/// Builtins that evaluate an array subscript or arithmetic in a *name*
/// argument: `printf -v 'a[$(cmd)]'`, `read 'a[$(cmd)]'`, `let`, a
/// nameref's target. Text that looks like quoted data there is code.
pub(super) const SUBSCRIPT_BUILTINS: &[&str] = &[
    "printf",
    "read",
    "let",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
    "unset",
    "mapfile",
    "readarray",
    "getopts",
    "wait",
    "test",
    "[",
];
/// Flags that name a file the command writes, given attached
/// (`--output=PATH`) or as the next word (`-o PATH`), for any program.
/// Only checked against the protected-path list, so a flag that means
/// something else for some tool (`ssh -o Option`) costs nothing.
pub(super) const OUTPUT_FLAGS: &[&str] = &[
    "-o",
    "--output",
    "--output-file",
    "--output-document",
    "--out",
    "--out-file",
    "--outfile",
    "--log-file",
    "--logfile",
    "--log",
    "--target",
    "--target-directory",
    "-t",
    "--save",
    "--write",
    "--dest",
    "--destination",
    "--config-file",
    "--settings",
    "-fprint",
    "-fprint0",
    "-fprintf",
    "-fls",
    "-O",
];
/// Programs that download: what they write and a shell later runs in the
/// same string is a download being run.
pub(super) const DOWNLOADERS: &[&str] = &["curl", "wget", "aria2c", "fetch", "http", "xh"];
/// Programs whose positional arguments are all files they change.
pub(super) const WRITES_ITS_OPERANDS: &[&str] = &[
    "tee", "touch", "truncate", "rm", "unlink", "shred", "chmod", "chown", "chgrp", "chattr",
    "mkdir", "rmdir", "setfacl",
];
/// Programs whose last positional argument is the file they create.
pub(super) const WRITES_ITS_LAST_OPERAND: &[&str] = &[
    "cp", "mv", "install", "ln", "link", "rsync", "curl", "wget", "dd",
];

/// A shell or an interpreter, by name (`python3.12` is `python3`).
pub(super) fn is_shell_or_interpreter(base: &str) -> bool {
    let trimmed = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    SHELLS.contains(&trimmed)
        || INTERPRETERS
            .iter()
            .any(|i| i.trim_end_matches(|c: char| c.is_ascii_digit()) == trimmed)
}

/// Where a program with a known name is a look-alike: anywhere but the
/// system's and the packaging's own directories: a relative path (the
/// workspace), the home, a temporary directory, and any other absolute
/// path (`/path/to/command`, `/mnt/x/ls`, `/srv/app/bin/rm`) outside the
/// directories the system and its package managers install programs in.
pub(super) fn lookalike_location(path: &str) -> bool {
    !path.starts_with('/')
        || ![
            "/bin/",
            "/sbin/",
            "/usr/",
            "/opt/",
            "/lib/",
            "/lib32/",
            "/lib64/",
            "/libx32/",
            "/libexec/",
            "/etc/",
            "/nix/",
            "/gnu/",
            "/snap/",
            "/app/",
            "/var/lib/",
            "/run/current-system/",
            "/Applications/",
            "/System/",
            "/Library/",
        ]
        .iter()
        .any(|d| path.starts_with(d))
}

/// Toolchains a project environment holds its own copy of: a virtualenv's
/// `bin/python`, `node_modules/.bin/eslint`, a Rails binstub `bin/rails`.
/// In those directories these names are what they say; anything else
/// there (`node_modules/.bin/ls`) is still a look-alike.
pub(super) fn project_toolchain(path: &str, base: &str) -> bool {
    const ENV_DIRS: &[&str] = &[
        "/bin/",
        "/Scripts/",
        "node_modules/.bin/",
        "vendor/bin/",
        ".tox/",
        "bin/",
    ];
    const TOOLCHAIN: &[&str] = &[
        "python",
        "pip",
        "pip3",
        "pypy",
        "pypy3",
        "node",
        "npm",
        "npx",
        "yarn",
        "pnpm",
        "bun",
        "deno",
        "ruby",
        "gem",
        "bundle",
        "bundler",
        "rake",
        "rails",
        "rspec",
        "rubocop",
        "php",
        "composer",
        "phpunit",
        "artisan",
        "perl",
        "cpanm",
        "eslint",
        "prettier",
        "tsc",
        "jest",
        "vitest",
        "mocha",
        "playwright",
        "pytest",
        "ruff",
        "black",
        "mypy",
        "flake8",
        "isort",
        "pylint",
        "uv",
        "poetry",
        "tox",
        "nox",
        "pre-commit",
        "django-admin",
        "alembic",
        "flask",
        "uvicorn",
        "gunicorn",
        "celery",
        "cargo",
        "rustc",
        "go",
        "java",
        "mvn",
        "gradle",
        "webpack",
        "vite",
        "next",
        "nuxt",
        "ng",
        "tsx",
        "ts-node",
        "esbuild",
        "rollup",
        "lerna",
        "nx",
        "turbo",
        "prisma",
        "sequelize",
        "knex",
        "typeorm",
        "drizzle-kit",
        "jupyter",
        "ipython",
        "coverage",
        "sphinx-build",
        "mkdocs",
    ];
    let trimmed = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    (TOOLCHAIN.contains(&base) || TOOLCHAIN.contains(&trimmed))
        && ENV_DIRS
            .iter()
            .any(|d| path.contains(d) || path.starts_with(d))
}

/// A pager or editor setting that runs nothing but a pager: `cat`,
/// `less -R`, `more`, an empty value (no pager). `PAGER=cat`,
/// `git -c core.pager=cat`, `GIT_PAGER='less -FRX'` are everyday.
pub(super) fn harmless_pager(value: &str) -> bool {
    let mut words = value
        .trim_matches(|c| c == '"' || c == '\'')
        .split_whitespace();
    match words.next() {
        None => true,
        Some(p) => {
            matches!(
                p,
                "cat"
                    | "less"
                    | "more"
                    | "most"
                    | "/usr/bin/cat"
                    | "/usr/bin/less"
                    | "/bin/cat"
                    | "/bin/less"
                    | "/usr/bin/more"
                    | "/bin/more"
            ) && words.all(|w| {
                w.starts_with('-')
                    && w[1..]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-')
            })
        }
    }
}

/// Variables that name a pager (a harmless value there is no hijack).
pub(super) const PAGER_VARS: &[&str] = &["PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER", "LESS"];
