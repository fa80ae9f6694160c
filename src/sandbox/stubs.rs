//! Shadow stubs inside the rehearsal (SPEC §7).
//!
//! A stubbed tool is caught however the command calls it: a small script
//! `#!/.dryrun/bin/dryrun __stub-exec TOOL` is bind-mounted over every copy
//! of the tool in the image's PATH directories (so `/usr/bin/curl` is caught)
//! and placed first on PATH in `/.dryrun/stubs/bin` (so tools the host lacks,
//! such as `gh`, are caught too). The interpreter is this binary, bound
//! read-only into the sandbox; in stub mode it reads the run's stub table,
//! and either
//! - answers the call (the rule's answer, the recording's answer in a replay,
//!   or a counterfactual override) and records it as a **would-be action** in
//!   `/.dryrun/calls/`, or
//! - hands the call to the real tool (kept at `/.dryrun/stubs/real/TOOL`) when
//!   no stub rule matches (`git status` runs for real, `git push` is stubbed).
//!
//! After the command ends, the sandbox's init reads `/.dryrun/calls/` into the
//! report. Stubs keep the command's control flow honest; they are not a
//! containment boundary (the network namespace is): a command that copies a
//! tool elsewhere or calls the real copy directly is not recorded, and its
//! network attempt is (see docs/threat-model.md).

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The argument (after the shebang's interpreter) that selects stub mode.
pub const STUB_ARG_PREFIX: &str = "__stub-exec ";
/// How every stub script begins (the tool's name follows).
pub fn stub_script_prefix() -> String {
    format!("#!{STUB_INTERPRETER} {STUB_ARG_PREFIX}")
}
/// Where things live inside the sandbox.
pub const STUB_ROOT: &str = "/.dryrun";
pub const STUB_BIN_DIR: &str = "/.dryrun/stubs/bin";
const STUB_INTERPRETER: &str = "/.dryrun/bin/dryrun";
const STUB_TABLE: &str = "/.dryrun/stubs/table.json";
/// A second, read-only view of the image taken before any stub covers a
/// tool: passthrough runs the real file here, by the same path below it, so
/// a tool that loads files relative to itself (`npm` -> `npm-cli.js` ->
/// `../lib/cli.js`) finds them.
pub const REAL_ROOT: &str = "/.dryrun/stubs/real-root";
pub const CALLS_DIR: &str = "/.dryrun/calls";
/// Where a tool can be found in the image (the command's default PATH).
const PATH_DIRS: [&str; 6] = [
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/bin",
    "/usr/sbin",
    "/bin",
    "/sbin",
];
/// Other directories a tool runs its own copy from, covered too: git puts
/// its exec path first on PATH for hooks, `!` aliases, `rebase -x` and
/// `submodule foreach`, and that directory holds a `git` of its own.
fn extra_dirs(tool: &str) -> &'static [&'static str] {
    match tool {
        "git" => &[
            "/usr/lib/git-core",
            "/usr/libexec/git-core",
            "/usr/local/libexec/git-core",
        ],
        _ => &[],
    }
}
/// How a strict replay's refusal of a novel call begins (its stderr).
const NOVEL_REFUSAL_PREFIX: &str = "dryrun replay (strict): ";
/// At most this many would-be actions are recorded per run.
pub const MAX_ACTIONS: usize = 256;
/// The calls directory's size: room for MAX_ACTIONS records.
pub const CALLS_DIR_BYTES: u64 = 32 << 20;
/// The largest set of recorded calls a replay carries into the sandbox
/// (the sandbox spec is at most 16 MiB).
pub const MAX_REPLAY_SET_BYTES: usize = 8 << 20;
/// The first bytes of stdin kept in a would-be action.
const STDIN_HEAD: usize = 1024;
/// What a call record keeps of the call (the argv hash covers all of it):
/// each argument up to ARG_MAX_KEPT bytes, the arguments up to ARGV_MAX_KEPT
/// bytes in all, ENV_NAMES_MAX_KEPT variable names of up to NAME_MAX_KEPT
/// bytes, a cwd of up to PATH_MAX_KEPT bytes.
const ARG_MAX_KEPT: usize = 4096;
const ARGV_MAX_KEPT: usize = 64 * 1024;
const ENV_NAMES_MAX_KEPT: usize = 512;
const NAME_MAX_KEPT: usize = 128;
const PATH_MAX_KEPT: usize = 4096;
/// The largest call record the sandbox's init reads (a record within the
/// bounds above is well below it even with every byte JSON-escaped).
const RECORD_MAX_BYTES: u64 = 2 << 20;
/// A stub reads at most this much stdin (hashing all of it).
const STDIN_MAX: u64 = 64 << 20;

/// How a stub answers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    #[serde(default)]
    pub exit: i32,
}

/// Whether a stub reads its stdin (to hash it and keep its first KiB).
/// The real tool reads stdin only for some calls; a stub that read it
/// always would swallow input meant for the rest of a script
/// (`while read n; do gh pr close "$n"; done < list`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// Read stdin when an argument says the tool takes it: `-`, `@-`,
    /// `...=-`, `...=@-`, `/dev/stdin`, or a flag naming stdin
    /// (`--password-stdin`).
    #[default]
    Auto,
    /// Always read stdin (a tool that takes its input there unasked).
    Read,
    /// Never read stdin.
    Ignore,
}

impl StdinMode {
    pub fn reads(self, args: &[String]) -> bool {
        match self {
            StdinMode::Read => true,
            StdinMode::Ignore => false,
            StdinMode::Auto => args.iter().any(|a| {
                a == "-"
                    || a.ends_with("=-")
                    || a.ends_with("@-")
                    || a.contains("/dev/stdin")
                    || (a.starts_with('-') && a.contains("stdin"))
            }),
        }
    }
}

/// A validated stub rule (see `policy::stubs` for the configuration).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StubRule {
    pub id: String,
    /// `policy` or `envelope` (an envelope's or a `--stub` override).
    pub origin: String,
    pub tool: String,
    /// Alternatives; each a sequence of leading positional words.
    pub subcommands: Vec<Vec<String>>,
    pub flags_any: Vec<String>,
    pub flags_all: Vec<String>,
    pub arg_regex: Option<String>,
    pub answer: Answer,
    #[serde(default)]
    pub stdin: StdinMode,
}

/// What a replay does with a call the recording never saw.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NovelPolicy {
    /// The call fails and the replay is blocked, naming it.
    Strict,
    /// The stub rule's own answer.
    #[default]
    Stub,
    /// The nearest recorded call of the same tool.
    Fuzzy,
}

impl NovelPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            NovelPolicy::Strict => "strict",
            NovelPolicy::Stub => "stub",
            NovelPolicy::Fuzzy => "fuzzy",
        }
    }
}

/// A recorded call and its answer, for a replay.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedCall {
    pub tool: String,
    pub argv_hash: String,
    pub argv: Vec<String>,
    pub answer: Answer,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplaySet {
    pub baseline: String,
    pub novel: NovelPolicy,
    pub calls: Vec<RecordedCall>,
}

/// Everything the stubs of one run need, written read-only into the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StubTable {
    /// In priority order: overrides first, then the policy's.
    pub rules: Vec<StubRule>,
    #[serde(default)]
    pub replay: Option<ReplaySet>,
}

fn yes() -> bool {
    true
}

/// The stdin a stubbed call was given.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct StdinRecord {
    /// Whether the stub read stdin at all (see [`StdinMode`]); when not,
    /// the other fields are empty and the input is left for whoever reads
    /// it next, as with the real tool.
    #[serde(default = "yes")]
    pub read: bool,
    pub bytes: u64,
    pub blake3: String,
    /// The first KiB, as text (invalid UTF-8 replaced).
    pub head: String,
    /// More than the stub reads (64 MiB) was offered; the hash covers what was read.
    #[serde(default)]
    pub truncated: bool,
}

/// One call a stub answered instead of the real tool (SPEC §7).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WouldBeAction {
    pub tool: String,
    /// The argument vector, `argv[0]` being the tool's name (each argument
    /// kept up to 4 KiB and 64 KiB in all; see `argv_truncated`).
    pub argv: Vec<String>,
    /// Some of argv was cut to keep the record bounded; `argc` counts all
    /// of it and `argv_hash` covers all of it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_truncated: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub argc: usize,
    /// BLAKE3 of the canonical argv (JSON array of tool and arguments); a
    /// replay looks answers up by (tool, argv_hash).
    pub argv_hash: String,
    pub cwd: String,
    pub stdin: StdinRecord,
    /// Names (never values) of the environment variables the tool saw.
    pub env_names: Vec<String>,
    /// The stub rule that matched.
    pub rule: String,
    /// `stub` (the rule's answer), `override` (an envelope/--stub answer),
    /// `replay` (the recording's answer), `replay_fuzzy` (the nearest
    /// recorded call's), `novel` (a strict replay refused it).
    pub source: String,
    pub answer: Answer,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl WouldBeAction {
    /// The call as reviewers read it: `gh pr merge 12 --squash`.
    pub fn shown(&self) -> String {
        shown_call(&self.tool, &self.argv[1.min(self.argv.len())..])
    }
}

/// Canonical argv hash: BLAKE3 over the JSON array `[tool, args...]`.
pub fn argv_hash(tool: &str, args: &[String]) -> String {
    let mut v: Vec<&str> = Vec::with_capacity(args.len() + 1);
    v.push(tool);
    v.extend(args.iter().map(String::as_str));
    let json = serde_json::to_vec(&v).expect("strings serialize");
    blake3::hash(&json).to_hex().to_string()
}

fn is_flag(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1
}

impl StubRule {
    /// Does a call of this rule's tool with `args` match? Same semantics as
    /// the classifier's rules: subcommand words among the first positionals
    /// (global options' values may come first), flags in any position.
    pub fn matches(&self, args: &[String]) -> bool {
        let positionals: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .filter(|a| !is_flag(a))
            .collect();
        if !self.subcommands.is_empty()
            && !self.subcommands.iter().any(|sub| {
                positionals
                    .windows(sub.len())
                    .take(3)
                    .any(|w| w.iter().zip(sub).all(|(a, b)| a == b))
            })
        {
            return false;
        }
        let has = |f: &String| args.iter().any(|a| crate::classify::has_flag(a, f));
        if !self.flags_any.is_empty() && !self.flags_any.iter().any(has) {
            return false;
        }
        if !self.flags_all.iter().all(has) {
            return false;
        }
        if let Some(re) = &self.arg_regex {
            // Validated when the rule was built.
            let Ok(re) = regex::Regex::new(re) else {
                return false;
            };
            if !args.iter().any(|a| re.is_match(a)) {
                return false;
            }
        }
        true
    }
}

/// What a stub does with one call.
#[derive(Debug, Clone, PartialEq)]
pub enum StubDecision {
    /// No rule matches: run the real tool.
    Passthrough,
    Answer {
        rule: String,
        source: &'static str,
        answer: Answer,
        /// The matching rule's stdin mode.
        stdin: StdinMode,
    },
}

impl StubTable {
    pub fn tools(&self) -> Vec<String> {
        let mut t: Vec<String> = self.rules.iter().map(|r| r.tool.clone()).collect();
        t.sort();
        t.dedup();
        t
    }

    pub fn decide(&self, tool: &str, args: &[String]) -> StubDecision {
        let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.tool == tool && r.matches(args))
        else {
            return StubDecision::Passthrough;
        };
        let answer = |source: &'static str, answer: &Answer| StubDecision::Answer {
            rule: rule.id.clone(),
            source,
            answer: answer.clone(),
            stdin: rule.stdin,
        };
        if rule.origin == "envelope" {
            // A counterfactual: this answer replaces the recording's too.
            return answer("override", &rule.answer);
        }
        let Some(replay) = &self.replay else {
            return answer("stub", &rule.answer);
        };
        let hash = argv_hash(tool, args);
        if let Some(c) = replay
            .calls
            .iter()
            .find(|c| c.tool == tool && c.argv_hash == hash)
        {
            return answer("replay", &c.answer);
        }
        match replay.novel {
            NovelPolicy::Stub => answer("stub", &rule.answer),
            NovelPolicy::Strict => StubDecision::Answer {
                rule: rule.id.clone(),
                source: "novel",
                stdin: StdinMode::Ignore,
                answer: Answer {
                    stdout: String::new(),
                    stderr: format!(
                        "{NOVEL_REFUSAL_PREFIX}the recording of run {} never saw `{}`; nothing answered it\n",
                        replay.baseline,
                        shown_call(tool, args)
                    ),
                    exit: 127,
                },
            },
            NovelPolicy::Fuzzy => {
                let nearest = replay
                    .calls
                    .iter()
                    .filter(|c| c.tool == tool)
                    .min_by_key(|c| token_distance(&c.argv[1.min(c.argv.len())..], args));
                match nearest {
                    Some(c) => answer("replay_fuzzy", &c.answer),
                    None => answer("stub", &rule.answer),
                }
            }
        }
    }
}

/// `tool arg1 arg2`, for messages (long calls shortened).
pub fn shown_call(tool: &str, args: &[String]) -> String {
    let mut s = tool.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    if s.chars().count() > 200 {
        let cut: String = s.chars().take(200).collect();
        return format!("{cut}…");
    }
    s
}

/// Edit distance between two argument lists, counted in whole arguments.
fn token_distance(a: &[String], b: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(x != y);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

// ---------------------------------------------------------------------------
// Installing the stubs (the sandbox's init, before pivot_root).

#[derive(Debug, thiserror::Error)]
pub enum StubInstallError {
    #[error("installing stubs: {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn ioerr(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StubInstallError {
    let path = path.to_path_buf();
    move |source| StubInstallError::Io { what, path, source }
}

fn bind_file(src: &Path, target: &Path, mounted_at: &Path) -> Result<(), StubInstallError> {
    use nix::mount::{MsFlags, mount};
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| ioerr("bind", target)(e.into()))?;
    remount_ro(mounted_at)
}

fn remount_ro(target: &Path) -> Result<(), StubInstallError> {
    super::mounts::remount_ro(target)
        .map_err(|e| ioerr("read-only remount", target)(std::io::Error::other(e.to_string())))
}

/// Open this binary by its path in the current mount namespace (a bind
/// from `/proc/self/exe` itself fails: that mount belongs to the namespace
/// the helper was started in), checking it is the same file.
pub fn open_own_exe() -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    let path = std::fs::read_link("/proc/self/exe")?;
    let fd = nix::fcntl::open(
        &path,
        OFlag::O_PATH | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let a = nix::sys::stat::fstat(&fd)?;
    let b = nix::sys::stat::stat("/proc/self/exe")?;
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
        return Err(std::io::Error::other(format!(
            "{} is no longer the running binary",
            path.display()
        )));
    }
    Ok(fd)
}

/// Install the run's stubs under `root` (the future `/`): a read-only view
/// of the image as it is before any stub (the real tools, [`REAL_ROOT`]),
/// the interpreter, the table, a script per tool on PATH and over each copy
/// in the image, and the calls directory. Returns the tools shadowed.
pub fn install_stubs(
    root: &Path,
    table: &StubTable,
    table_json: &[u8],
    exe: &std::os::fd::OwnedFd,
    run_uid: u32,
    run_gid: u32,
    image_path_dirs: &[String],
) -> Result<Vec<String>, StubInstallError> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    for d in [STUB_BIN_DIR, REAL_ROOT, CALLS_DIR, "/.dryrun/bin"] {
        std::fs::create_dir_all(at(d)).map_err(ioerr("mkdir", &at(d)))?;
    }
    // The real tools: the whole image, recursively, before anything covers
    // a tool (mounts are private, so later binds do not reach this view).
    // Its own top is made read-only; the image's trees already are.
    let real_root = at(REAL_ROOT);
    {
        use nix::mount::{MsFlags, mount};
        mount(
            Some(root),
            &real_root,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| ioerr("recursive bind", &real_root)(e.into()))?;
        remount_ro(&real_root)?;
    }
    let interp = at(STUB_INTERPRETER);
    std::fs::write(&interp, b"").map_err(ioerr("create", &interp))?;
    bind_file(
        Path::new(&format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(exe)
        )),
        &interp,
        &interp,
    )?;
    let table_path = at(STUB_TABLE);
    std::fs::write(&table_path, table_json).map_err(ioerr("write", &table_path))?;
    std::fs::set_permissions(&table_path, std::fs::Permissions::from_mode(0o644))
        .map_err(ioerr("chmod", &table_path))?;
    // The command writes its calls here (its own small tmpfs; Landlock
    // allows it), the init reads them afterwards.
    let calls = at(CALLS_DIR);
    super::mounts::mount_tmpfs_capped(&calls, CALLS_DIR_BYTES, MAX_ACTIONS as u64 + 64, 0o1777)
        .map_err(|e| ioerr("tmpfs", &calls)(std::io::Error::other(e.to_string())))?;
    let _ = nix::unistd::chown(
        &calls,
        Some(nix::unistd::Uid::from_raw(run_uid)),
        Some(nix::unistd::Gid::from_raw(run_gid)),
    );

    let root_fd = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| ioerr("open", root)(e.into()))?;
    // Resolved inside the new root: an absolute symlink in the image
    // (/bin -> /usr/bin) must not lead to the host's tree.
    let open_in_root = |rel: &str| {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        nix::fcntl::openat2(&root_fd, rel, how)
    };
    // The files behind the tools that can never be stubbed (the sandbox's
    // shell among them): a tool that is only another name for one of them
    // (`/usr/bin/rbash -> bash`) must not cover it.
    let protected: Vec<(libc::dev_t, libc::ino_t)> = crate::policy::stubs::NEVER_STUBBED
        .iter()
        .flat_map(|t| {
            PATH_DIRS
                .iter()
                .map(move |d| format!("{}/{t}", d.trim_start_matches('/')))
        })
        .filter_map(|rel| {
            let fd = open_in_root(&rel).ok()?;
            let st = nix::sys::stat::fstat(&fd).ok()?;
            Some((st.st_dev, st.st_ino))
        })
        .collect();
    let tools = table.tools();
    for tool in &tools {
        let script = at(&format!("{STUB_BIN_DIR}/{tool}"));
        std::fs::write(&script, format!("{}{tool}\n", stub_script_prefix()))
            .map_err(ioerr("write", &script))?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(ioerr("chmod", &script))?;
        let mut seen: Vec<PathBuf> = Vec::new();
        let dirs = PATH_DIRS
            .iter()
            .copied()
            .chain(extra_dirs(tool).iter().copied())
            .chain(image_path_dirs.iter().map(String::as_str));
        for dir in dirs {
            let rel = format!("{}/{tool}", dir.trim_start_matches('/'));
            let Ok(fd) = open_in_root(&rel) else {
                continue;
            };
            let Ok(st) = nix::sys::stat::fstat(&fd) else {
                continue;
            };
            if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mode & 0o111 == 0 {
                continue;
            }
            let fd_path = PathBuf::from(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            ));
            let Ok(resolved) = std::fs::read_link(&fd_path) else {
                continue;
            };
            if seen.contains(&resolved) {
                continue;
            }
            // Mounted through the handle (what was checked), made read-only
            // through the path (the handle still names the file beneath).
            if !resolved.starts_with(root) || protected.contains(&(st.st_dev, st.st_ino)) {
                continue;
            }
            bind_file(&script, &fd_path, &resolved)?;
            seen.push(resolved);
        }
    }
    Ok(tools)
}

/// Is a call record (written inside the sandbox, where the command could
/// have written it too) what a stub of `table` writes? The answer must be
/// the one the table gives for that argv (so it cannot be forged into
/// something milder), the hash must cover the argv, and every field must be
/// within the bounds the stub keeps.
fn record_is_consistent(a: &WouldBeAction, table: &StubTable) -> bool {
    let bounded = a.argv.len() <= 1 + ARGV_MAX_KEPT
        && a.argv.iter().map(String::len).sum::<usize>() <= ARG_MAX_KEPT + ARGV_MAX_KEPT
        && a.argv.iter().all(|x| x.len() <= ARG_MAX_KEPT)
        && a.cwd.len() <= PATH_MAX_KEPT
        && a.env_names.len() <= ENV_NAMES_MAX_KEPT
        && a.env_names.iter().all(|n| n.len() <= NAME_MAX_KEPT)
        // The head is at most 1 KiB of input, each invalid byte shown as
        // U+FFFD (3 bytes).
        && a.stdin.head.len() <= 3 * STDIN_HEAD
        && a.argv_hash.len() == 64
        && a.argv.first() == Some(&a.tool);
    if !bounded {
        return false;
    }
    if a.argv_truncated {
        // The argv cannot be matched again; what can be checked: the cut is
        // real (the stub marks only an argv it had to cut), and the answer
        // is one this rule can give with this source.
        let args = &a.argv[1..];
        let cut = a.argc > a.argv.len()
            || args.iter().any(|x| x.len() + 3 >= ARG_MAX_KEPT)
            || args.iter().map(String::len).sum::<usize>() + 3 >= ARGV_MAX_KEPT;
        let Some(rule) = table
            .rules
            .iter()
            .find(|r| r.tool == a.tool && r.id == a.rule)
        else {
            return false;
        };
        let replayed = |fuzzy: bool| {
            table.replay.as_ref().is_some_and(|r| {
                (!fuzzy || r.novel == NovelPolicy::Fuzzy)
                    && r.calls
                        .iter()
                        .any(|c| c.tool == a.tool && c.answer == a.answer)
            })
        };
        let answer_ok = match a.source.as_str() {
            "override" => rule.origin == "envelope" && a.answer == rule.answer,
            "stub" => rule.origin != "envelope" && a.answer == rule.answer,
            "replay" => rule.origin != "envelope" && replayed(false),
            "replay_fuzzy" => rule.origin != "envelope" && replayed(true),
            "novel" => {
                rule.origin != "envelope"
                    && table
                        .replay
                        .as_ref()
                        .is_some_and(|r| r.novel == NovelPolicy::Strict)
                    && a.answer.exit == 127
                    && a.answer.stdout.is_empty()
                    && a.answer.stderr.len() <= 2048
                    && a.answer.stderr.starts_with(NOVEL_REFUSAL_PREFIX)
            }
            _ => false,
        };
        return a.argc >= a.argv.len() && cut && answer_ok;
    }
    let args = &a.argv[1..];
    if argv_hash(&a.tool, args) != a.argv_hash {
        return false;
    }
    match table.decide(&a.tool, args) {
        StubDecision::Answer {
            rule,
            source,
            answer,
            ..
        } => rule == a.rule && source == a.source && answer == a.answer,
        StubDecision::Passthrough => false,
    }
}

/// The would-be actions the stubs recorded, in call order, and how many
/// records were not kept: unreadable, inconsistent with `table` (see
/// [`record_is_consistent`]), or past [`MAX_ACTIONS`].
pub fn collect_calls(table: &StubTable) -> (Vec<WouldBeAction>, usize) {
    let Ok(rd) = std::fs::read_dir(CALLS_DIR) else {
        return (Vec::new(), 0);
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    let mut dropped = 0;
    for n in names {
        if out.len() >= MAX_ACTIONS {
            dropped += 1;
            continue;
        }
        // The command owns this directory: read regular files only, never
        // through a symlink, and bounded. Anything else named like a record
        // counts as one not kept.
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(Path::new(CALLS_DIR).join(&n))
        else {
            dropped += 1;
            continue;
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            dropped += 1;
            continue;
        }
        let mut text = Vec::new();
        if f.take(RECORD_MAX_BYTES).read_to_end(&mut text).is_err() {
            dropped += 1;
            continue;
        }
        match serde_json::from_slice::<WouldBeAction>(&text) {
            Ok(a) if record_is_consistent(&a, table) => out.push(a),
            _ => dropped += 1,
        }
    }
    (out, dropped)
}

// ---------------------------------------------------------------------------
// Stub mode: the interpreter of the stub scripts, inside the sandbox.

/// Entry point when `argv[1]` starts with [`STUB_ARG_PREFIX`]:
/// `argv = [interpreter, "__stub-exec TOOL", script path, args...]`.
pub fn run_stub(argv: Vec<std::ffi::OsString>) -> ! {
    let code = match stub_main(argv) {
        Ok(code) => code,
        Err(msg) => {
            let _ = writeln!(std::io::stderr(), "dryrun stub: {msg}");
            126
        }
    };
    std::process::exit(code)
}

fn stub_main(argv: Vec<std::ffi::OsString>) -> Result<i32, String> {
    use std::os::unix::ffi::OsStrExt;
    let lossy = |s: &std::ffi::OsString| String::from_utf8_lossy(s.as_bytes()).into_owned();
    let mut tool = argv
        .get(1)
        .map(lossy)
        .and_then(|a| a.strip_prefix(STUB_ARG_PREFIX).map(str::to_string))
        .ok_or("missing tool name")?;
    // The path the command ran (the kernel passes it to the interpreter):
    // `/.dryrun/stubs/bin/gh` through PATH, `/usr/bin/curl`, `./c`, ...
    let script = PathBuf::from(argv.get(2).cloned().unwrap_or_else(|| tool.clone().into()));
    let raw_args: Vec<std::ffi::OsString> = argv.iter().skip(3).cloned().collect();
    let args: Vec<String> = raw_args.iter().map(lossy).collect();
    let table: StubTable = std::fs::read(STUB_TABLE)
        .map_err(|e| {
            format!("cannot read {STUB_TABLE}: {e} (stub mode runs only inside a rehearsal)")
        })
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("{STUB_TABLE}: {e}")))?;
    // Another name in the image for the file this stub covers (a
    // multi-call binary: `rustc` and `cargo` both lead to `rustup`) is that
    // name's own program: stubbed if it is a stubbed tool, else the real one.
    let invoked = script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut alias = false;
    let covered = CoveredFiles::find();
    if invoked != tool && is_image_alias(&covered, &invoked, &script) {
        if table.rules.iter().any(|r| r.tool == invoked) {
            tool = invoked.clone();
        } else {
            alias = true;
        }
    }
    let decision = if alias {
        StubDecision::Passthrough
    } else {
        table.decide(&tool, &args)
    };
    let (rule, source, answer, stdin_mode) = match decision {
        StubDecision::Passthrough => {
            let Some((real, known_as)) = find_real(&covered, &tool, &script) else {
                let _ = writeln!(std::io::stderr(), "{tool}: command not found");
                return Ok(127);
            };
            let c =
                |s: &[u8]| std::ffi::CString::new(s).map_err(|_| "NUL in an argument".to_string());
            // argv[0]: the path the tool is known by in the image. Live, a
            // PATH call gets the bare name, but a tool that finds itself by
            // searching PATH for it (python's sys.executable) would find the
            // stub's script here.
            let arg0 = known_as.as_os_str().as_bytes().to_vec();
            let mut cargv = vec![c(&arg0)?];
            for a in &raw_args {
                cargv.push(c(a.as_bytes())?);
            }
            let path = c(real.as_os_str().as_bytes())?;
            let e = nix::unistd::execv(&path, &cargv).unwrap_err();
            return Err(format!("cannot run the real {tool}: {e}"));
        }
        StubDecision::Answer {
            rule,
            source,
            answer,
            stdin,
        } => (rule, source, answer, stdin),
    };
    let stdin = if stdin_mode.reads(&args) {
        read_stdin()
    } else {
        StdinRecord {
            read: false,
            ..Default::default()
        }
    };
    let mut env_names: Vec<String> = std::env::vars_os()
        .map(|(k, _)| String::from_utf8_lossy(k.as_bytes()).into_owned())
        .filter(|k| k.len() <= NAME_MAX_KEPT)
        .collect();
    env_names.sort();
    env_names.dedup();
    env_names.truncate(ENV_NAMES_MAX_KEPT);
    let (kept, truncated) = kept_argv(&tool, &args);
    let action = WouldBeAction {
        argv_hash: argv_hash(&tool, &args),
        argv: kept,
        argv_truncated: truncated,
        argc: if truncated { args.len() + 1 } else { 0 },
        tool,
        cwd: std::env::current_dir()
            .map(|p| cut(&p.display().to_string(), PATH_MAX_KEPT))
            .unwrap_or_default(),
        stdin,
        env_names,
        rule,
        source: source.to_string(),
        answer: answer.clone(),
    };
    record_call(&action)?;
    let mut out = std::io::stdout();
    let _ = out.write_all(answer.stdout.as_bytes());
    let _ = out.flush();
    let mut err = std::io::stderr();
    let _ = err.write_all(answer.stderr.as_bytes());
    Ok(answer.exit)
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The argv a call record keeps, and whether any of it was cut.
fn kept_argv(tool: &str, args: &[String]) -> (Vec<String>, bool) {
    let mut kept = vec![cut(tool, ARG_MAX_KEPT)];
    let mut budget = ARGV_MAX_KEPT;
    let mut truncated = false;
    for a in args {
        if budget == 0 {
            truncated = true;
            break;
        }
        let c = cut(a, ARG_MAX_KEPT.min(budget));
        truncated |= c.len() < a.len();
        budget -= c.len();
        kept.push(c);
    }
    (kept, truncated)
}

/// The directories of the command's `PATH` (the envelope's, or the fixed
/// base's) that come from the image: absolute, outside the workspace and
/// `/tmp`. Copies of a stubbed tool there are covered too.
pub fn image_path_dirs(path: &str, workspace: &Path) -> Vec<String> {
    path.split(':')
        .filter(|d| {
            let p = Path::new(d);
            p.is_absolute()
                && !p.starts_with(workspace)
                && !p.starts_with("/tmp")
                && !p.starts_with(STUB_ROOT)
                && !d.split('/').any(|c| c == "..")
        })
        .map(str::to_string)
        .collect()
}

/// The command's `PATH` with the stubs' directory in it: just before the
/// first image directory (`image`, from [`image_path_dirs`]), so the
/// command's own directories (a wrapper in `./bin`, `node_modules/.bin`)
/// come first as they do live, and the stub's passthrough can look for the
/// real tool after its own place.
pub fn path_with_stubs(path: &str, image: &[String]) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut placed = false;
    for d in path.split(':') {
        if !placed && image.iter().any(|i| i == d) {
            out.push(STUB_BIN_DIR);
            placed = true;
        }
        out.push(d);
    }
    if !placed {
        out.push(STUB_BIN_DIR);
    }
    out.join(":")
}

/// The files stub scripts cover: stub scripts live on the sandbox root's
/// own tmpfs, the image's programs come from other mounts, so a covered
/// file is a regular file on that tmpfs's device.
struct CoveredFiles {
    stub_dev: Option<u64>,
}

impl CoveredFiles {
    fn find() -> Self {
        use std::os::unix::fs::MetadataExt;
        CoveredFiles {
            stub_dev: std::fs::metadata(STUB_BIN_DIR).ok().map(|m| m.dev()),
        }
    }

    fn is_covered(&self, m: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        m.is_file() && Some(m.dev()) == self.stub_dev
    }

    fn covers(&self, p: &Path) -> bool {
        std::fs::metadata(p).is_ok_and(|m| self.is_covered(&m))
    }
}

/// Is `name` in the image's PATH directories a file a stub covers and the
/// very file `script` leads to (another name for a tool's file, as `rustc`
/// and `cargo` are for `rustup`)? A link named like some other stubbed tool
/// (`/tmp/wget -> /usr/bin/curl`) is not: it runs curl.
fn is_image_alias(covered: &CoveredFiles, name: &str, script: &Path) -> bool {
    let Ok(target) = std::fs::canonicalize(script) else {
        return false;
    };
    !name.is_empty()
        && !name.contains('/')
        && PATH_DIRS.iter().any(|d| {
            let p = Path::new(d).join(name);
            covered.covers(&p) && std::fs::canonicalize(&p).is_ok_and(|c| c == target)
        })
}

/// The real program behind a passthrough call, and the path it is known by:
/// the file the command ran, or (called through PATH) the first `tool` on
/// the command's PATH after the stubs' directory; a file a stub covers is
/// run from [`REAL_ROOT`] by its resolved path, so everything relative to
/// it is where it expects.
fn find_real(covered: &CoveredFiles, tool: &str, script: &Path) -> Option<(PathBuf, PathBuf)> {
    let real = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        if !covered.is_covered(&m) {
            return (m.is_file() && m.permissions().mode() & 0o111 != 0).then(|| p.to_path_buf());
        }
        // Resolved here (every link followed), then taken from the view of
        // the image no stub covers.
        let resolved = std::fs::canonicalize(p).ok()?;
        let real = Path::new(REAL_ROOT).join(resolved.strip_prefix("/").ok()?);
        std::fs::metadata(&real)
            .is_ok_and(|m| m.is_file() && !covered.is_covered(&m))
            .then_some(real)
    };
    if !script.starts_with(STUB_BIN_DIR) {
        return real(script).map(|r| (r, script.to_path_buf()));
    }
    // Found through PATH at the stubs' place: the real tool is the next one
    // on PATH after it (what the lookup would have found without stubs).
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .skip_while(|d| Path::new(d) != Path::new(STUB_BIN_DIR))
        .filter(|d| !d.is_empty() && Path::new(d) != Path::new(STUB_BIN_DIR))
        .find_map(|d| {
            let p = Path::new(d).join(tool);
            real(&p).map(|r| (r, p))
        })
}

fn read_stdin() -> StdinRecord {
    let mut hasher = blake3::Hasher::new();
    let mut head = Vec::new();
    let mut total: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdin = std::io::stdin().lock();
    let mut truncated = false;
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                if head.len() < STDIN_HEAD {
                    let take = (STDIN_HEAD - head.len()).min(n);
                    head.extend_from_slice(&buf[..take]);
                }
                total += n as u64;
                if total >= STDIN_MAX {
                    truncated = true;
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    StdinRecord {
        read: true,
        bytes: total,
        blake3: hasher.finalize().to_hex().to_string(),
        head: String::from_utf8_lossy(&head).into_owned(),
        truncated,
    }
}

/// One file per call, named so that sorting gives call order.
fn record_call(a: &WouldBeAction) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let ns = super::helper::monotonic_ns();
    let name = format!("{CALLS_DIR}/{ns:020}-{:010}.json", std::process::id());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&name)
        .map_err(|e| format!("cannot record the call (so it is not answered): {e}"))?;
    f.write_all(&serde_json::to_vec(a).expect("serializes"))
        .map_err(|e| format!("cannot record the call (so it is not answered): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, tool: &str, sub: &[&str], origin: &str, exit: i32) -> StubRule {
        StubRule {
            id: id.into(),
            origin: origin.into(),
            tool: tool.into(),
            subcommands: if sub.is_empty() {
                vec![]
            } else {
                vec![sub.iter().map(|s| s.to_string()).collect()]
            },
            flags_any: vec![],
            flags_all: vec![],
            arg_regex: None,
            answer: Answer {
                stdout: format!("{id}\n"),
                stderr: String::new(),
                exit,
            },
            stdin: StdinMode::Auto,
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn matching_and_priority() {
        let t = StubTable {
            rules: vec![
                rule("cf", "gh", &["pr", "merge"], "envelope", 1),
                rule("gh.pr.merge", "gh", &["pr", "merge"], "policy", 0),
                rule("gh.pr.create", "gh", &["pr", "create"], "policy", 0),
            ],
            replay: None,
        };
        match t.decide("gh", &s(&["-R", "o/r", "pr", "merge", "12"])) {
            StubDecision::Answer { rule, source, .. } => {
                assert_eq!((rule.as_str(), source), ("cf", "override"))
            }
            d => panic!("{d:?}"),
        }
        assert_eq!(
            t.decide("gh", &s(&["pr", "list"])),
            StubDecision::Passthrough
        );
        assert_eq!(t.decide("git", &s(&["push"])), StubDecision::Passthrough);
    }

    #[test]
    fn replay_lookup_and_novel_policies() {
        let recorded = RecordedCall {
            tool: "gh".into(),
            argv_hash: argv_hash("gh", &s(&["pr", "merge", "12"])),
            argv: s(&["gh", "pr", "merge", "12"]),
            answer: Answer {
                stdout: "recorded\n".into(),
                stderr: String::new(),
                exit: 0,
            },
        };
        let mut t = StubTable {
            rules: vec![rule("gh.pr.merge", "gh", &["pr", "merge"], "policy", 0)],
            replay: Some(ReplaySet {
                baseline: "base".into(),
                novel: NovelPolicy::Strict,
                calls: vec![recorded],
            }),
        };
        let get = |t: &StubTable, args: &[&str]| match t.decide("gh", &s(args)) {
            StubDecision::Answer { source, answer, .. } => (source, answer),
            d => panic!("{d:?}"),
        };
        assert_eq!(get(&t, &["pr", "merge", "12"]).0, "replay");
        let (src, ans) = get(&t, &["pr", "merge", "13"]);
        assert_eq!(src, "novel");
        assert!(ans.stderr.contains("gh pr merge 13"), "{}", ans.stderr);
        assert_ne!(ans.exit, 0);
        t.replay.as_mut().unwrap().novel = NovelPolicy::Fuzzy;
        let (src, ans) = get(&t, &["pr", "merge", "13"]);
        assert_eq!((src, ans.stdout.as_str()), ("replay_fuzzy", "recorded\n"));
        t.replay.as_mut().unwrap().novel = NovelPolicy::Stub;
        assert_eq!(get(&t, &["pr", "merge", "13"]).0, "stub");
    }

    #[test]
    fn stdin_is_read_only_when_the_call_says_so() {
        for args in [
            &["pr", "merge", "1", "--body-file", "-"][..],
            &["-d", "@-", "https://x"],
            &["--data-binary=@-"],
            &["apply", "--filename=-"],
            &["login", "--password-stdin"],
            &["-T", "/dev/stdin"],
        ] {
            assert!(StdinMode::Auto.reads(&s(args)), "{args:?}");
        }
        for args in [&["pr", "close", "3"][..], &["-X", "POST", "https://x/a-b"]] {
            assert!(!StdinMode::Auto.reads(&s(args)), "{args:?}");
        }
        assert!(StdinMode::Read.reads(&[]));
        assert!(!StdinMode::Ignore.reads(&s(&["-"])));
    }

    #[test]
    fn call_records_must_be_what_the_table_answers() {
        let t = StubTable {
            rules: vec![rule("gh.pr.merge", "gh", &["pr", "merge"], "policy", 0)],
            replay: None,
        };
        let args = s(&["pr", "merge", "1"]);
        let StubDecision::Answer { answer, .. } = t.decide("gh", &args) else {
            panic!()
        };
        let (argv, truncated) = kept_argv("gh", &args);
        let good = WouldBeAction {
            tool: "gh".into(),
            argv,
            argv_truncated: truncated,
            argc: 0,
            argv_hash: argv_hash("gh", &args),
            cwd: "/w".into(),
            stdin: StdinRecord::default(),
            env_names: vec!["PATH".into()],
            rule: "gh.pr.merge".into(),
            source: "stub".into(),
            answer,
        };
        assert!(record_is_consistent(&good, &t));
        let mut milder = good.clone();
        milder.answer.exit = 1;
        assert!(!record_is_consistent(&milder, &t), "a forged answer");
        let mut rehashed = good.clone();
        rehashed.argv_hash = "0".repeat(64);
        assert!(!record_is_consistent(&rehashed, &t), "a hash not over argv");
        let mut other = good.clone();
        other.argv = s(&["gh", "pr", "list"]);
        other.argv_hash = argv_hash("gh", &s(&["pr", "list"]));
        assert!(!record_is_consistent(&other, &t), "no stub answers that");
        let mut big = good.clone();
        big.stdin.head = "x".repeat(4 * STDIN_HEAD);
        assert!(!record_is_consistent(&big, &t), "out of bounds");
        // A long argv is cut, marked, and still checked for rule and source.
        let long = vec!["pr".to_string(), "merge".into(), "y".repeat(10_000)];
        let (argv, truncated) = kept_argv("gh", &long);
        assert!(truncated && argv[3].len() == ARG_MAX_KEPT);
        let mut cut_rec = good.clone();
        cut_rec.argv = argv;
        cut_rec.argv_truncated = true;
        cut_rec.argc = 4;
        cut_rec.argv_hash = argv_hash("gh", &long);
        assert!(record_is_consistent(&cut_rec, &t));
        let mut made_up = cut_rec.clone();
        made_up.answer.stdout = "FORGED\n".into();
        assert!(
            !record_is_consistent(&made_up, &t),
            "an answer no rule gives"
        );
        let mut replayed = cut_rec.clone();
        replayed.source = "replay".into();
        assert!(
            !record_is_consistent(&replayed, &t),
            "a replay source, no replay"
        );
        let mut short = good.clone();
        short.argv_truncated = true;
        short.argc = 4;
        assert!(!record_is_consistent(&short, &t), "marked cut, nothing cut");
        cut_rec.rule = "made.up".into();
        assert!(!record_is_consistent(&cut_rec, &t));
    }

    #[test]
    fn argv_hash_is_unambiguous() {
        assert_ne!(
            argv_hash("a", &s(&["b c"])),
            argv_hash("a", &s(&["b", "c"]))
        );
        assert_ne!(argv_hash("a", &s(&["b"])), argv_hash("ab", &s(&[])));
        assert_eq!(token_distance(&s(&["a", "b"]), &s(&["a", "c"])), 1);
    }
}
