//! The sample outputs shown in README.md and docs/ come from real runs of
//! the example tasks in examples/site: this test rehearses each task (as
//! root, over a copy of the example workspace), normalises what changes from
//! run to run (run ids, timestamps, durations, the workspace's path) and
//! compares it with the committed sample in docs/samples/; it also
//! rehearses the README's tour (execute, diff, promote on a copy of the
//! example) and feeds the hooks the agent hosts' events. The README's
//! quotes of the quick start's run, the tour and a hook's event and answer
//! must be these samples.
//!
//! `docs/samples/make.sh` (or `DRYRUN_UPDATE_SAMPLES=1` on this test)
//! rewrites the samples from a fresh run.

mod common;
use common::*;
use std::path::Path;

/// The tasks whose output the docs show: (sample file, `dryrun execute` arguments).
const SAMPLES: &[(&str, &[&str])] = &[
    (
        "execute-normalize-blog-frontmatter.txt",
        &["execute", "--task", "normalize-blog-frontmatter"],
    ),
    (
        "execute-normalize-posts-only.txt",
        &["execute", "--task", "normalize-posts-only"],
    ),
    (
        "execute-word-count.txt",
        &["execute", "--task", "word-count"],
    ),
    (
        "execute-announce-posts.txt",
        &["execute", "--task", "announce-posts"],
    ),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What differs between two runs of the same task, made fixed: the
/// workspace's path, the binary's, run and receipt ids, timestamps,
/// durations, the Landlock ABI (CI pins 7) and the journal's hashes (its
/// records carry times).
fn normalise(text: &str, ws: &Path, shown: &str) -> String {
    let mut t = text
        .replace(&ws.display().to_string(), shown)
        .replace(&bin().display().to_string(), "/usr/local/bin/dryrun");
    let rules = [
        (
            r"\b([rp])[0-9a-f]{8}-[0-9a-f]{10,}",
            "${1}0123abcd-0123456789abcdef",
        ),
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "2026-11-24T09:01:32Z"),
        (r"· \d+ ms", "· 81 ms"),
        (r"landlock ABI \d+", "landlock ABI 7"),
        (r"change set [0-9a-f]{16}", "change set 8c48e893ba8f73ef"),
        (
            r"record (\d+) \([0-9a-f]{16}\)",
            "record $1 (c92a8656ee112a92)",
        ),
        (
            r"head [0-9a-f]{64}",
            "head c92a8656ee112a9243e087577e95f286fe6ca451687e55930699b1a12469e5a0",
        ),
    ];
    for (re, to) in rules {
        t = regex::Regex::new(re)
            .unwrap()
            .replace_all(&t, to)
            .into_owned();
    }
    t
}

fn site() -> Ws {
    let ws = Ws::new(Who::Root);
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", repo().join("examples/site").display()))
        .arg(&ws.dir)
        .status()
        .unwrap();
    assert!(st.success());
    ws
}

fn run_sample(args: &[&str]) -> String {
    let ws = site();
    let out = ws
        .command()
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.is_empty(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    normalise(&text, &ws.dir, QUICK_START_PATH)
}

/// Where the quick start's samples say the example workspace is (the
/// README's `./examples/run.sh` rehearses `examples/site` of a checkout).
const QUICK_START_PATH: &str = "/home/me/dryrun/examples/site";
/// Where the tour's and the hooks' samples say the workspace is (the README
/// copies the example there first).
const TOUR_PATH: &str = "/tmp/site";

/// The tour: one workspace, these commands in turn; each sample is
/// `$ dryrun ARGS` and its output.
const TOUR: &[(&str, &[&str])] = &[
    (
        "tour-1-execute.txt",
        &["execute", "--task", "normalize-posts-only"],
    ),
    ("tour-2-show.txt", &["runs"]),
    ("tour-3-diff.txt", &["diff", "last"]),
    ("tour-4-promote.txt", &["promote", "last"]),
    ("tour-5-journal.txt", &["journal", "verify"]),
];

fn tour() -> Vec<(&'static str, String)> {
    let ws = site();
    TOUR.iter()
        .map(|(file, args)| {
            let out = ws
                .command()
                .args(*args)
                .env("NO_COLOR", "1")
                .output()
                .unwrap();
            let text = format!(
                "$ dryrun {}\n{}",
                args.join(" "),
                String::from_utf8(out.stdout).unwrap()
            );
            let text = text.replace(&ws.state.display().to_string(), "/root/.local/state/dryrun");
            (*file, normalise(&text, &ws.dir, TOUR_PATH))
        })
        .collect()
}

/// The hooks' samples: (sample file, host, event, command). Each sample is
/// the event the host sends on stdin and dryrun's answer on stdout.
const HOOK_SAMPLES: &[(&str, &str, &str, &str)] = &[
    (
        "hook-claude-code-promote.json",
        "claude-code",
        "PreToolUse",
        "python3 scripts/rewrite_frontmatter.py --no-index blog/*.md",
    ),
    (
        "hook-claude-code-blocked.json",
        "claude-code",
        "PreToolUse",
        "curl -sS -X POST -d @blog/post-01.md http://203.0.113.10/announce",
    ),
    (
        "hook-codex-promote.json",
        "codex",
        "PreToolUse",
        "python3 scripts/rewrite_frontmatter.py --no-index blog/*.md",
    ),
];

fn hook_sample(host: &str, event: &str, command: &str) -> String {
    let ws = site();
    let input = match host {
        "claude-code" => serde_json::json!({
            "session_id": "9a1f", "transcript_path": "/home/me/.claude/projects/site/9a1f.jsonl",
            "cwd": ws.dir, "permission_mode": "default", "hook_event_name": event,
            "tool_name": "Bash",
            "tool_input": {"command": command, "description": "d", "timeout": 120000},
            "tool_use_id": "toolu_01"
        }),
        _ => serde_json::json!({
            "session_id": "01a2", "turn_id": "01a3", "transcript_path": null, "cwd": ws.dir,
            "hook_event_name": event, "model": "gpt-5", "permission_mode": "default",
            "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "call_1"
        }),
    };
    let mut c = std::process::Command::new(bin());
    c.args(["hook", host])
        .env("DRYRUN_LOCAL", "1")
        .env("DRYRUN_STATE_DIR", &ws.state)
        .env("NO_COLOR", "1")
        .env_remove("DRYRUN_SOCKET")
        .env_remove("CLAUDE_PROJECT_DIR")
        .env_remove("DRYRUN_HOOK_WORKSPACE");
    let out = output_with_stdin(&mut c, input.to_string().as_bytes());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = format!(
        "event (stdin):\n{}\nanswer (stdout):\n{}\n",
        serde_json::to_string_pretty(&input).unwrap(),
        serde_json::to_string_pretty(&answer).unwrap()
    );
    let text = text.replace(&ws.state.display().to_string(), "/root/.local/state/dryrun");
    normalise(&text, &ws.dir, TOUR_PATH)
}

#[test]
fn committed_samples_match_a_fresh_run() {
    if !require_root() {
        return;
    }
    let update = std::env::var("DRYRUN_UPDATE_SAMPLES").is_ok_and(|v| v == "1");
    let dir = repo().join("docs/samples");
    let mut stale = Vec::new();
    let runs = SAMPLES.iter().map(|(f, a)| (*f, run_sample(a)));
    let hooks = HOOK_SAMPLES
        .iter()
        .map(|(f, h, e, c)| (*f, hook_sample(h, e, c)));
    for (file, fresh) in runs.chain(hooks).chain(tour()) {
        let path = dir.join(file);
        if update {
            std::fs::write(&path, &fresh).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != fresh {
            stale.push(format!(
                "docs/samples/{file} differs from a fresh run (docs/samples/make.sh rewrites it):\n--- committed\n{committed}--- fresh\n{fresh}"
            ));
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}

/// README.md's code blocks that quote a sample: the block's first line,
/// and the sample (whose lines follow it; for the tour the sample's own
/// first line is the block's).
const QUOTED: &[(&str, &str)] = &[
    ("", "execute-normalize-blog-frontmatter.txt"),
    ("", "tour-1-execute.txt"),
    ("", "tour-3-diff.txt"),
    ("", "tour-4-promote.txt"),
    ("", "hook-claude-code-promote.json"),
];

/// Each quoted block in README.md is its sample: whole, except where it
/// elides lines with `...` (a run of similar lines).
#[test]
fn readme_quotes_the_samples() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for (first, file) in QUOTED {
        let sample = std::fs::read_to_string(repo().join("docs/samples").join(file)).unwrap();
        let mut lines: Vec<&str> = sample.lines().collect();
        if !first.is_empty() {
            lines.insert(0, first);
        }
        let start = readme
            .find(&format!("\n{}\n", lines[0]))
            .unwrap_or_else(|| {
                panic!(
                    "README.md quotes docs/samples/{file}: a block starting {:?}",
                    lines[0]
                )
            });
        let shown: Vec<&str> = readme[start + 1..]
            .lines()
            .take_while(|l| *l != "```")
            .collect();
        let mut j = 0;
        for (k, l) in shown.iter().enumerate() {
            if l.trim() == "..." {
                let next = shown.get(k + 1);
                if next.is_none() {
                    j = lines.len();
                    continue;
                }
                let Some(skip) = lines[j..].iter().position(|s| Some(s) == next) else {
                    panic!(
                        "README.md's `...` in the quote of docs/samples/{file} is followed by {next:?}, not a line of the sample"
                    );
                };
                j += skip;
                continue;
            }
            assert_eq!(
                Some(l),
                lines.get(j),
                "README.md's quote of docs/samples/{file} differs at its line {}",
                k + 1
            );
            j += 1;
        }
        assert_eq!(
            j,
            lines.len(),
            "README.md's quote of docs/samples/{file} stops before the sample ends"
        );
    }
}
