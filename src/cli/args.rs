//! The subcommands and their arguments (clap derive).

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub(super) enum Cmd {
    /// Rehearse a command in the sandbox and judge it against its intent.
    Execute(ExecuteArgs),
    /// Score a shell command's risk from a real parse, without running it.
    Classify {
        /// The shell string (as `bash -c` would run it).
        command: String,
        /// Workspace (for "outside the workspace" and its policy file).
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Explain every finding: its rule id, the principle the rule comes
        /// from, level, score and what it saw (with --json, an `explain`
        /// array beside the classification).
        #[arg(long)]
        explain: bool,
    },
    /// List runs, newest first (the review queue, `--awaiting`, oldest first).
    Runs {
        /// Only runs in this state (rehearsed, awaiting_approval, approved,
        /// rejected, promoted, failed).
        #[arg(long, conflicts_with = "awaiting")]
        state: Option<String>,
        /// The review queue: runs waiting for a person, oldest first.
        #[arg(long)]
        awaiting: bool,
        /// At most N runs.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        #[arg(long)]
        json: bool,
        /// The runs of every host of a fleet, from its store (a PostgreSQL
        /// connection string; docs/fleet.md).
        #[arg(long, value_name = "URL")]
        fleet: Option<String>,
    },
    /// Show a run's record (RUN_ID: a run id, a unique prefix, or `last`).
    Show {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Show a run's changes as unified diffs; with a second run, what
    /// differs between the two runs.
    Diff {
        run_id: String,
        /// Compare with this run: changes, exit status, output.
        other: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Approve a run awaiting approval (a reviewer; never its submitter).
    Approve {
        run_id: String,
        /// Why (journaled with your identity).
        #[arg(long)]
        note: Option<String>,
        /// Approve a run whose verdict was `blocked` (journaled as an override).
        #[arg(long = "override")]
        override_block: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        fleet: FleetDecideArgs,
    },
    /// Reject a run (a reviewer, or its submitter withdrawing it).
    Reject {
        run_id: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        fleet: FleetDecideArgs,
    },
    /// Withdraw your own run from the review queue (its submitter only).
    Withdraw {
        run_id: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Carry out a promotable (or approved) run: apply its reviewed change
    /// set to the real workspace, with a receipt in the journal.
    Promote {
        run_id: String,
        #[arg(long)]
        json: bool,
        /// After promoting, print the rehearsal's stdout and stderr and exit
        /// with its status (the form an agent-host hook rewrites a command to).
        #[arg(long)]
        replay_output: bool,
        /// The single-use token of an approval given in the agent host's
        /// prompt (issued by `dryrun hook` for this run only).
        #[arg(long, value_name = "TOKEN")]
        host_prompt_token: Option<String>,
        /// Wait up to S seconds for a reviewer's approval first.
        #[arg(long, value_name = "S")]
        await_approval: Option<u64>,
        /// Live mode apply of a run whose rehearsal answered calls with
        /// stubs: apply the local writes anyway; the calls are NOT made
        /// (listed in the receipt and journaled). Or declare live.mode: rerun.
        #[arg(long)]
        local_only: bool,
    },
    /// Undo a promotion: restore what it replaced, if nothing changed since.
    Rollback {
        receipt_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Receipts of promotions.
    Receipt {
        #[command(subcommand)]
        cmd: ReceiptCmd,
    },
    /// Reviewers' terminal UI: the queue of runs waiting for a person, each
    /// run's evidence, approve / reject / override with a note (see docs/user-guide.md).
    /// With --fleet: the fleet's queue, every host's waiting runs with their
    /// evidence, printed (decide with `approve|reject --fleet`).
    Review {
        /// The fleet store (a PostgreSQL connection string).
        #[arg(long, value_name = "URL")]
        fleet: Option<String>,
        /// The fleet's queue as JSON.
        #[arg(long, requires = "fleet")]
        json: bool,
    },
    /// A fleet's store: its schema, its policy, its hosts (docs/fleet.md).
    Fleet {
        /// The fleet store (a PostgreSQL connection string; its password
        /// in it or in PGPASSWORD).
        #[arg(long, value_name = "URL")]
        fleet: String,
        #[command(subcommand)]
        cmd: FleetCmd,
    },
    /// Cancel a queued or running rehearsal (daemon only).
    Cancel {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Fit the state directory into its size budget: the kept content,
    /// then the records, of the oldest runs nothing pending needs (never the
    /// journal, receipts, or a run waiting for a person or approved).
    Gc {
        /// The budget for this collection in MiB (default:
        /// DRYRUN_STATE_BUDGET_MB, else 512; 0 collects everything nothing
        /// pending needs).
        #[arg(long, value_name = "MIB")]
        budget_mb: Option<u64>,
        /// Say what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// The hash-chained journal.
    Journal {
        #[command(subcommand)]
        cmd: JournalCmd,
    },
    /// Agent-host hook: a tool-call event as JSON on stdin, the answer as
    /// JSON on stdout (exit 2 blocks). See docs/doors.md.
    Hook {
        #[arg(value_enum)]
        host: HookHost,
    },
    /// MCP server on stdio: execute, classify, show, diff, list_runs, wait,
    /// promote (no approvals). See docs/doors.md.
    Mcp {
        /// Serve Streamable HTTP at this loopback address instead (e.g.
        /// 127.0.0.1:8765; port 0 picks one), to this uid's clients only.
        #[arg(long, value_name = "ADDR:PORT")]
        http: Option<String>,
    },
    /// Serve the API on a Unix socket.
    Daemon(DaemonArgs),
    /// Print shell completions for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout: `dryrun man > dryrun.1`.
    Man,
    /// Rehearse a recorded run again, answering its stubbed tool calls from
    /// the recording (against today's workspace, a changed command, or
    /// changed answers).
    Replay {
        run_id: String,
        /// Replay with this envelope instead of the recorded one (its
        /// working_dir defaults to the recorded run's).
        #[arg(long, value_name = "ENVELOPE")]
        file: Option<PathBuf>,
        /// Replay this command instead of the recorded one.
        #[arg(long)]
        command: Option<String>,
        /// Replace a tool's answer (counterfactual), e.g. 'gh pr merge=exit 1'.
        #[arg(
            long = "stub",
            value_name = "TOOL [WORDS]=exit N[; stdout=T][; stderr=T]"
        )]
        stub: Vec<String>,
        /// A call the recording never saw: strict (the replay fails naming
        /// it), stub (the default stub's answer), fuzzy (the nearest
        /// recorded call of the same tool).
        #[arg(long, default_value = "stub", value_parser = ["strict", "stub", "fuzzy"])]
        novel: String,
        #[arg(long)]
        json: bool,
    },
}

/// The agent hosts `dryrun hook` speaks to.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(super) enum HookHost {
    ClaudeCode,
    Codex,
}

#[derive(Subcommand, Debug)]
pub(super) enum ReceiptCmd {
    /// Print a receipt.
    Show {
        receipt_id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum JournalCmd {
    /// Walk the chain; name the first bad record. Exit 0 when intact, 5 when not.
    Verify {
        #[arg(long)]
        json: bool,
        /// Also check every host's published chain in the fleet store, and
        /// this state directory's journal against its host's anchors.
        #[arg(long, value_name = "URL")]
        fleet: Option<String>,
        /// The host this journal is (default: the one this state directory
        /// published as), for a copy of another host's journal.
        #[arg(long, value_name = "HOST", requires = "fleet")]
        host: Option<String>,
    },
}

/// `approve` / `reject` in a fleet.
#[derive(Args, Debug)]
pub(super) struct FleetDecideArgs {
    /// Decide a run of any host of the fleet, in its store (a PostgreSQL
    /// connection string; the reviewer is the role it logs in as).
    #[arg(long, value_name = "URL")]
    pub(super) fleet: Option<String>,
    /// The evidence hash you reviewed (`review --fleet` shows it); by
    /// default the one shown before the decision.
    #[arg(long, value_name = "HASH", requires = "fleet")]
    pub(super) evidence: Option<String>,
    /// Seconds to wait for the run's host to apply the decision.
    #[arg(long, value_name = "S", default_value_t = 10, requires = "fleet")]
    pub(super) wait: u64,
}

#[derive(Subcommand, Debug)]
pub(super) enum FleetCmd {
    /// Create or update the store's schema (as the database's owner).
    Migrate,
    /// Every host: version, policy, Landlock ABI, last seen, published.
    Hosts {
        /// The hosts as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The fleet policy.
    Policy {
        #[command(subcommand)]
        cmd: FleetPolicyCmd,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum FleetPolicyCmd {
    /// Publish a system policy file as the fleet policy's next version.
    Publish {
        file: PathBuf,
        /// Make it the fleet's minimum too: hosts that cannot load it
        /// judge nothing (and do not start) until they can.
        #[arg(long)]
        minimum: bool,
    },
    /// Set the fleet's minimum policy version.
    Minimum {
        /// The version (clap's own `version` is the --version flag).
        #[arg(id = "policy_version", value_name = "VERSION")]
        version: i64,
    },
}

#[derive(Args, Debug)]
pub(super) struct DaemonArgs {
    /// Group allowed to connect (the socket is mode 0660).
    #[arg(long, value_name = "GROUP")]
    pub(super) socket_group: Option<String>,
    /// Group whose members (and root) may approve and reject.
    #[arg(long, value_name = "GROUP", default_value = "dryrun-approvers")]
    pub(super) approver_group: String,
    /// Rehearsals at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub(super) max_running: Option<usize>,
    /// Submissions waiting beyond those; past it, 429 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub(super) max_queued: usize,
    /// Largest request body accepted.
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    pub(super) max_body_kb: usize,
    /// Seconds running rehearsals get to finish at shutdown before they are cancelled.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub(super) shutdown_grace: u64,
    /// Risk points each client uid may spend per window (0: no budget).
    #[arg(long, value_name = "POINTS", default_value_t = 1000)]
    pub(super) budget_points: u64,
    /// The budget's sliding window.
    #[arg(long, value_name = "S", default_value_t = 3600)]
    pub(super) budget_window: u64,
    /// Rehearse even when the kernel's Landlock is below the minimum ABI.
    #[arg(long)]
    pub(super) allow_degraded_sandbox: bool,
    /// Let a "yes" in an agent host's permission prompt (Claude Code's
    /// `ask`) approve a run. Off by default: any process running as the
    /// agent's uid could ask for that grant and present it itself.
    #[arg(long)]
    pub(super) host_prompt_approvals: bool,
    /// Ceiling of limits.timeout_s; a run asking for more is refused (400).
    /// Default: 3600.
    #[arg(long, value_name = "S")]
    pub(super) max_timeout_s: Option<u64>,
    /// Ceiling of limits.memory_mb. Default: three quarters of the RAM.
    #[arg(long, value_name = "MIB")]
    pub(super) max_memory_mb: Option<u64>,
    /// Ceiling of limits.pids. Default: 16384.
    #[arg(long, value_name = "N")]
    pub(super) max_pids: Option<u64>,
    /// Ceiling of limits.output_kb. Default: 4096.
    #[arg(long, value_name = "KIB")]
    pub(super) max_output_kb: Option<u64>,
    /// Ceiling of limits.disk_mb (also bounds what one run keeps). Default:
    /// half the RAM (the upper layer is memory).
    #[arg(long, value_name = "MIB")]
    pub(super) max_disk_mb: Option<u64>,
    /// Ceiling of limits.cpus. Default: every CPU the daemon may use.
    #[arg(long, value_name = "N")]
    pub(super) max_cpus: Option<u64>,
    /// Records and kept content each client uid may keep in the state
    /// directory; past it, submissions are refused (507). 0: no quota.
    #[arg(long, value_name = "MIB", default_value_t = crate::engine::DEFAULT_QUOTA_PER_UID_BYTES >> 20)]
    pub(super) quota_per_uid_mb: u64,
    /// The state directory's size budget in MiB: each hourly housekeeping
    /// removes the kept content, then the records, of the oldest runs
    /// nothing pending needs until it fits (0: no budget; see `dryrun gc`).
    #[arg(long, value_name = "MIB", default_value_t = crate::engine::DEFAULT_STATE_BUDGET_BYTES >> 20)]
    pub(super) state_budget_mb: u64,
    /// Days the kept content of runs not awaiting approval is kept.
    #[arg(long, value_name = "DAYS")]
    pub(super) blob_retention_days: Option<u64>,
    /// Days the records of finished runs are kept.
    #[arg(long, value_name = "DAYS")]
    pub(super) record_retention_days: Option<u64>,
    /// Pin a name the egress proxy resolves to an address, exempt from its
    /// address refusals (private ranges, the host's own addresses) for that
    /// name and port (curl's --resolve syntax; repeatable).
    #[arg(long = "egress-resolve", value_name = "HOST:PORT:ADDR")]
    pub(super) egress_resolve: Vec<crate::egress::ResolvePin>,
    /// Seconds a run waits for a person before it expires (rejected,
    /// `rejected_because: expired`; default 24 hours).
    #[arg(long, value_name = "S", default_value_t = crate::engine::DEFAULT_APPROVAL_EXPIRY.as_secs())]
    pub(super) approval_expiry: u64,
    /// Run this executable (no shell) when a run starts waiting for a
    /// person, with the run's review summary as JSON on stdin.
    #[arg(long, value_name = "PATH")]
    pub(super) notify_command: Option<PathBuf>,
    /// Seconds the notification command may take before it is killed.
    #[arg(long, value_name = "S", default_value_t = 10)]
    pub(super) notify_timeout: u64,
    /// Notifications that may wait for a free notification command (four
    /// run at once); past that one is dropped, logged and counted in
    /// /metrics (`dryrun_notifications_total{outcome="dropped"}`).
    #[arg(long, value_name = "N", default_value_t = crate::daemon::NOTIFY_QUEUE_DEFAULT)]
    pub(super) notify_queue: usize,
    /// Be a host of a fleet: its store (a PostgreSQL connection string; the
    /// host is the role it logs in as). Default: `url:` of the fleet config.
    #[arg(long, value_name = "URL")]
    pub(super) fleet: Option<String>,
    /// The fleet config (people, password file, TLS root; default
    /// /etc/dryrun/fleet.yaml when --fleet is given and it exists).
    #[arg(long, value_name = "FILE")]
    pub(super) fleet_config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(super) struct ExecuteArgs {
    /// A task from dryrun.yaml at the workspace root.
    #[arg(long, conflicts_with_all = ["file", "command"])]
    pub(super) task: Option<String>,
    /// An envelope file (YAML or JSON; `-` for stdin).
    #[arg(long, conflicts_with = "command")]
    pub(super) file: Option<PathBuf>,
    /// A shell string, run by `bash -c`.
    #[arg(long)]
    pub(super) command: Option<String>,
    /// The workspace (default: the current directory).
    #[arg(long)]
    pub(super) workspace: Option<PathBuf>,
    /// A path glob the command is expected to write (repeatable).
    #[arg(long = "expect-write", value_name = "GLOB")]
    pub(super) expect_write: Vec<String>,
    /// A path glob the command must never touch (repeatable).
    #[arg(long = "forbid", value_name = "GLOB")]
    pub(super) forbid: Vec<String>,
    /// Declare the run read-only: any write blocks it.
    #[arg(long)]
    pub(super) read_only: bool,
    /// A non-zero exit blocks the run (intent.require_success); by default
    /// a failure inside the intent is a result, promoted as it would land.
    #[arg(long)]
    pub(super) require_success: bool,
    /// Wall-clock limit in seconds.
    #[arg(long, value_name = "S")]
    pub(super) timeout: Option<u64>,
    /// Print the run record as one JSON object.
    #[arg(long)]
    pub(super) json: bool,
    /// Rehearse even when the kernel's Landlock is below the minimum ABI.
    #[arg(long)]
    pub(super) allow_degraded_sandbox: bool,
    /// Replace a tool's answer for this run, e.g. 'gh pr merge=exit 1' or
    /// 'curl=exit 22; stderr=curl: (22) 500' (repeatable; see docs/user-guide.md, stubs).
    #[arg(
        long = "stub",
        value_name = "TOOL [WORDS]=exit N[; stdout=T][; stderr=T]"
    )]
    pub(super) stub: Vec<String>,
    /// A host the command may reach through the run's egress proxy:
    /// HOST, *.SUFFIX, either with :PORT (without one, ports 80 and 443
    /// only; repeatable; adds to intent.network.allow).
    #[arg(long = "allow-net", value_name = "HOST[:PORT]")]
    pub(super) allow_net: Vec<String>,
    /// A host service the command talks to, forwarded into the sandbox:
    /// 127.0.0.1:PORT, [::1]:PORT or a Unix socket's absolute path; only
    /// endpoints the system policy lists (egress.services) are accepted
    /// (repeatable; adds to intent.network.services; see docs/services.md).
    #[arg(long = "service", value_name = "HOST:PORT|PATH")]
    pub(super) service: Vec<String>,
    /// Pin a name the egress proxy resolves to an address, exempt from its
    /// address refusals (private ranges, the host's own addresses) for that
    /// name and port (in-process runs; curl's --resolve syntax).
    #[arg(long = "egress-resolve", value_name = "HOST:PORT:ADDR")]
    pub(super) egress_resolve: Vec<crate::egress::ResolvePin>,
}

impl Cmd {
    /// Did the caller ask for JSON (so errors come as JSON too)?
    pub(super) fn wants_json(&self) -> bool {
        match self {
            Cmd::Execute(a) => a.json,
            Cmd::Classify { json, .. }
            | Cmd::Runs { json, .. }
            | Cmd::Show { json, .. }
            | Cmd::Diff { json, .. }
            | Cmd::Approve { json, .. }
            | Cmd::Reject { json, .. }
            | Cmd::Withdraw { json, .. }
            | Cmd::Promote { json, .. }
            | Cmd::Rollback { json, .. }
            | Cmd::Cancel { json, .. }
            | Cmd::Replay { json, .. }
            | Cmd::Gc { json, .. }
            | Cmd::Receipt {
                cmd: ReceiptCmd::Show { json, .. },
            }
            | Cmd::Review { json, .. }
            | Cmd::Fleet {
                cmd: FleetCmd::Hosts { json },
                ..
            }
            | Cmd::Journal {
                cmd: JournalCmd::Verify { json, .. },
            } => *json,
            Cmd::Hook { .. }
            | Cmd::Mcp { .. }
            | Cmd::Daemon(_)
            | Cmd::Completions { .. }
            | Cmd::Man
            | Cmd::Fleet { .. } => false,
        }
    }
}
