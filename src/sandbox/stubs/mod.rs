//! Shadow stubs inside the rehearsal.
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
//!
//! The files: `install` (what the helper does to put the stubs in place),
//! `exec` (the `__stub-exec` program the scripts run), `calls` (reading the
//! call records back after the run). The vocabulary and its rules are in
//! `crate::model::stubs`.

mod calls;
mod exec;
mod install;

pub use crate::model::stubs::*;
pub(crate) use calls::collect_calls;
pub use exec::{run_small_stub, run_stub};
pub(crate) use install::{
    Interpreters, StubInstallError, image_path_dirs, install_stubs, open_own_exe, open_small_stub,
    path_with_stubs,
};

/// Where things live inside the sandbox.
pub(crate) const STUB_ROOT: &str = "/.dryrun";
pub(crate) const STUB_BIN_DIR: &str = "/.dryrun/stubs/bin";
const STUB_TABLE: &str = "/.dryrun/stubs/table.json";
/// A second, read-only view of the image taken before any stub covers a
/// tool: passthrough runs the real file here, by the same path below it, so
/// a tool that loads files relative to itself (`npm` -> `npm-cli.js` ->
/// `../lib/cli.js`) finds them.
pub(crate) const REAL_ROOT: &str = "/.dryrun/stubs/real-root";
pub(crate) const CALLS_DIR: &str = "/.dryrun/calls";
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
/// At most this many would-be actions are recorded per run.
pub(crate) const MAX_ACTIONS: usize = 256;
/// The calls directory's size: room for MAX_ACTIONS records.
pub(crate) const CALLS_DIR_BYTES: u64 = 32 << 20;
/// The largest set of recorded calls a replay carries into the sandbox
/// (the sandbox spec is at most 16 MiB).
pub(crate) const MAX_REPLAY_SET_BYTES: usize = 8 << 20;
/// The largest call record the sandbox's init reads (a record within the
/// bounds above is well below it even with every byte JSON-escaped).
const RECORD_MAX_BYTES: u64 = 2 << 20;
/// A stub reads at most this much stdin (hashing all of it).
const STDIN_MAX: u64 = 64 << 20;

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

    /// The table travels to the sandbox as raw JSON through the host side's
    /// parse of the spec, and comes back the same table, with its tools.
    #[test]
    fn stub_plan_carries_the_table_through_the_spec_unchanged() {
        use crate::sandbox::spec::StubPlan;
        let t = StubTable {
            rules: vec![
                rule("a", "gh", &["pr", "merge"], "envelope", 0),
                rule("b", "curl", &[], "policy", 0),
                rule("c", "gh", &["pr", "create"], "policy", 1),
            ],
            replay: None,
            build: String::new(),
        };
        let plan = StubPlan::new(&t);
        assert_eq!(plan.tools, s(&["curl", "gh"]));
        let wire = serde_json::to_string(&plan).unwrap();
        let back: StubPlan = serde_json::from_str(&wire).unwrap();
        assert_eq!(back, plan);
        assert_eq!(back.table().unwrap(), t);
        let stubs_read: StubTable = serde_json::from_str(back.table_json()).unwrap();
        assert_eq!(stubs_read, t);
        let none = StubPlan::new(&StubTable::default());
        assert!(none.tools.is_empty() && none.table_json().is_empty());
        assert_eq!(none.table().unwrap(), StubTable::default());
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
            build: String::new(),
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
            build: String::new(),
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
            build: String::new(),
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
            env_unnamed: 0,
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
        let mut named = good.clone();
        named.env_names = vec!["GH_TOKEN\u{1b}]52;c;QQ==\u{7}".into()];
        assert!(
            !record_is_consistent(&named, &t),
            "a name that is not a shell identifier"
        );
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
