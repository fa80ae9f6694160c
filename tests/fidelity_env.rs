//! The rehearsal is the live world, part E: the caller's environment
//! reaches the command, filtered, through every door (the CLI, the daemon
//! with the client's environment, never the daemon's own, MCP, the hook);
//! a machine the size of the user's (the limits' defaults sized to this
//! machine, the `hook:` section's limits within the ceilings, the hook's
//! deadline following `hook.timeout_s`).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::daemon::*;
use common::hook::claude_event;
use common::*;

/// The caller's variables the command must see as they are.
const KEPT: &[(&str, &str)] = &[
    ("LANG", "C.UTF-8"),
    ("USER", "fidelity-user"),
    ("LOGNAME", "fidelity-user"),
    ("VIRTUAL_ENV", "/opt/fidelity-venv"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("GIT_AUTHOR_NAME", "Alice Example"),
    ("GIT_AUTHOR_EMAIL", "alice@example.com"),
    ("FIDELITY_PLAIN", "plain-value-42"),
];

/// The caller's variables that must not reach it: secret-looking names,
/// and values that look like keys under innocent names.
const SECRETS: &[(&str, &str)] = &[
    (
        "AWS_SECRET_ACCESS_KEY",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYcanary0000001",
    ),
    ("GH_TOKEN", "gh-token-canary-000002"),
    ("BUILD_SETTING", "ghp_R8kQ2vX9mN4pL7tY1wZ3aB6cD0eF5gH8jK2m"),
    (
        "SERVICE_URL",
        "postgres://app:pw-canary-000003@db.internal/app",
    ),
    ("RANDOM_LOOKING", "Zx81kQpL0vN4mR7tY2wB9cD5canary4"),
];

/// A directory only the caller's PATH names.
const CALLER_PATH: &str = "/opt/fidelity-tools/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// What the command prints: its whole environment.
const PRINT_ENV: &str = "env | sort";

/// The caller's environment for a dryrun process started with a cleared
/// one: [`KEPT`], [`SECRETS`], PATH and HOME.
fn caller_env(c: &mut Command, home: &Path) {
    c.env("PATH", CALLER_PATH).env("HOME", home);
    c.envs(KEPT.iter().copied()).envs(SECRETS.iter().copied());
}

/// The command saw exactly the caller's environment, filtered: the kept
/// variables as they were, none of the secret ones (named in `stripped`,
/// their values nowhere in `record`), nothing the caller did not have.
fn assert_callers_env(what: &str, stdout: &str, stripped: &[String], record: &str, home: &Path) {
    for (k, v) in KEPT {
        assert!(
            stdout.lines().any(|l| l == format!("{k}={v}")),
            "{what}: {k}={v} did not reach the command:\n{stdout}"
        );
    }
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("HOME={}", home.display())),
        "{what}: the caller's HOME did not reach the command:\n{stdout}"
    );
    // The stubs' directory goes first; the rest is the caller's.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("PATH=") && l.ends_with(CALLER_PATH)),
        "{what}: the caller's PATH did not reach the command:\n{stdout}"
    );
    for (k, v) in SECRETS {
        assert!(
            !stdout.contains(&format!("{k}=")),
            "{what}: {k} reached the command:\n{stdout}"
        );
        assert!(!record.contains(v), "{what}: {k}'s value is in the record");
        assert!(
            stripped.contains(&format!("env:{k}")),
            "{what}: env:{k} not named in stripped {stripped:?}"
        );
    }
    // Nothing set that the caller did not have.
    for absent in [
        "SOURCE_DATE_EPOCH=",
        "USER=dryrun",
        "TZ=",
        "TMPDIR=",
        "SHELL=",
    ] {
        assert!(
            !stdout.lines().any(|l| l.starts_with(absent)),
            "{what}: {absent} was set for the command:\n{stdout}"
        );
    }
}

fn stripped_of(record: &Value) -> Vec<String> {
    record["rehearsal"]["stripped"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// A command as `who`: the test user through `setpriv`, else root.
fn as_who(who: Who) -> Command {
    match who {
        Who::User => as_test_user(bin()),
        Who::Root => Command::new(bin()),
    }
}

/// Attack: a variable only the caller has, secrets in its environment, and
/// an identity value given in the envelope's `env`, through the CLI
/// in-process. The caller's variables reach the command, the secrets do
/// not and are named, the identity is not redacted from `git log`.
#[test]
fn the_cli_passes_the_callers_environment_filtered() {
    for who in identities() {
        let ws = Ws::new(who);
        let cmd = format!(
            "{PRINT_ENV}; git init -q . && git -c user.email=c@example.com commit -q --allow-empty -m m && git log --format='log:%an|%cn'"
        );
        let envelope = serde_json::json!({
            "command": cmd, "working_dir": ws.dir,
            "intent": {"expected_writes": ["**"]},
            "env": {"GIT_COMMITTER_NAME": "Bob Builder"},
        });
        let file = ws.root.path().join("envelope.json");
        std::fs::write(&file, envelope.to_string()).unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let mut c = ws.command();
        caller_env(&mut c, ws.root.path());
        c.args(["execute", "--json", "--file"]).arg(&file);
        let r = to_run(c.output().unwrap());
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let what = format!("{who:?} CLI");
        assert_callers_env(&what, r.out(), &r.stripped(), &r.stdout, ws.root.path());
        assert!(
            r.out().contains("log:Alice Example|Bob Builder"),
            "{what}: identities were redacted or lost:\n{}",
            r.out()
        );
        let enforcement = r.json["rehearsal"]["sandbox"]["enforcement"].to_string();
        assert!(
            enforcement.contains("environment: the caller's, filtered"),
            "{what}: {enforcement}"
        );
    }
}

/// Attack: a root daemon's own environment holds a canary and a toolchain
/// variable of its own; root and the test user submit through it with
/// theirs. Each command sees its client's environment, never the
/// daemon's. An HTTP client that sends none gets the login environment of
/// the user the command runs as, each variable named as provided.
#[test]
fn a_daemon_passes_each_clients_environment_never_its_own() {
    if !require_root() {
        return;
    }
    let canary = format!("daemon-canary-{}", std::process::id());
    let d = Daemon::start_env(
        &[],
        &[
            ("DRYRUN_DAEMON_CANARY", canary.as_str()),
            ("VIRTUAL_ENV", "/daemon-own-venv"),
            ("HOME", "/daemon-own-home"),
        ],
    );
    for who in [Who::Root, Who::User] {
        let ws = if who == Who::User {
            user_workspace()
        } else {
            Ws::new(Who::Root)
        };
        let home = ws.root.path().to_path_buf();
        let mut c = if who == Who::User {
            d.cli_user()
        } else {
            d.cli_root()
        };
        caller_env(&mut c, &home);
        c.current_dir(&ws.dir)
            .args(["execute", "--json", "--command", PRINT_ENV]);
        let r = to_run(c.output().unwrap());
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let what = format!("{who:?} through the daemon");
        assert_callers_env(&what, r.out(), &r.stripped(), &r.stdout, &home);
        for own in [canary.as_str(), "DRYRUN_DAEMON_CANARY", "/daemon-own-"] {
            assert!(!r.stdout.contains(own), "{what}: the daemon's {own} leaked");
        }

        // A plain HTTP client that sends no environment.
        let body = serde_json::json!({"command": PRINT_ENV, "working_dir": ws.dir});
        let (code, rec) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body.to_string()));
        assert_eq!(code, 200, "{what}, no caller_env: {rec}");
        let out = rec["rehearsal"]["stdout"].as_str().unwrap().to_string();
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(match who {
            Who::Root => 0,
            Who::User => test_user().0,
        }))
        .unwrap()
        .unwrap();
        for want in [
            format!("HOME={}", user.dir.display()),
            format!("USER={}", user.name),
            format!("LOGNAME={}", user.name),
        ] {
            assert!(out.lines().any(|l| l == want), "{what}: no {want}:\n{out}");
        }
        let stripped = stripped_of(&rec);
        for n in ["HOME", "USER", "LOGNAME", "SHELL", "PATH"] {
            assert!(
                stripped.contains(&format!("provided:env:{n}")),
                "{what}: provided:env:{n} not named: {stripped:?}"
            );
        }
        for own in [canary.as_str(), "DRYRUN_DAEMON_CANARY", "/daemon-own-"] {
            assert!(
                !rec.to_string().contains(own),
                "{what}, no caller_env: the daemon's {own} leaked"
            );
        }
    }
}

/// `dryrun mcp` as `who` with the caller's environment: one `execute` of
/// `command` in `ws`; the tool's structured result.
fn mcp_execute(who: Who, ws: &Ws, command: &str) -> Value {
    use std::io::BufRead;
    let mut c = as_who(who);
    c.env_clear();
    caller_env(&mut c, ws.root.path());
    c.env("DRYRUN_STATE_DIR", &ws.state)
        .env("DRYRUN_LOCAL", "1")
        .current_dir(&ws.dir)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut ch = c.spawn().unwrap();
    let mut stdin = ch.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(ch.stdout.take().unwrap());
    let mut send = |v: Value| {
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    let mut read_id = |id: i64| -> Value {
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "dryrun mcp closed");
            let v: Value = serde_json::from_str(line.trim()).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fidelity-env", "version": "1"}}}),
    );
    read_id(1);
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "execute", "arguments": {"command": command, "working_dir": ws.dir}}}),
    );
    let v = read_id(2);
    drop(stdin);
    let _ = ch.wait();
    v["result"]["structuredContent"].clone()
}

/// The record of `id` from `ws`'s state directory.
fn show(ws: &Ws, id: &str) -> Value {
    let out = ws.command().args(["show", id, "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The MCP server (started by the agent host, so holding its environment)
/// passes that environment, filtered.
#[test]
fn mcp_passes_the_callers_environment_filtered() {
    for who in identities() {
        let ws = Ws::new(who);
        let res = mcp_execute(who, &ws, PRINT_ENV);
        let id = res["run_id"].as_str().unwrap_or_else(|| panic!("{res}"));
        let rec = show(&ws, id);
        let what = format!("{who:?} MCP");
        assert_callers_env(
            &what,
            res["stdout"].as_str().unwrap(),
            &stripped_of(&rec),
            &rec.to_string(),
            ws.root.path(),
        );
    }
}

/// `dryrun hook claude-code` as `who` on `event`, in-process on `ws`'s
/// state directory, with the caller's environment and `extra`.
fn hook_as(who: Who, ws: &Ws, event: &Value, extra: &[(&str, &str)]) -> Output {
    let mut c = as_who(who);
    c.env_clear();
    caller_env(&mut c, ws.root.path());
    c.env("DRYRUN_STATE_DIR", &ws.state)
        .env("DRYRUN_LOCAL", "1")
        .envs(extra.iter().copied())
        .current_dir(&ws.dir)
        .args(["hook", "claude-code"]);
    output_with_stdin(&mut c, event.to_string().as_bytes())
}

/// The one run in `ws`'s state directory.
fn only_run(ws: &Ws) -> Value {
    let out = ws.command().args(["runs", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v["runs"].as_array().cloned().unwrap_or_else(|| {
        v.as_array()
            .cloned()
            .unwrap_or_else(|| panic!("not a run list: {v}"))
    });
    assert_eq!(runs.len(), 1, "{v}");
    show(ws, runs[0]["run_id"].as_str().unwrap())
}

/// The hook (started by the agent host) passes the host's environment,
/// filtered.
#[test]
fn the_hook_passes_the_agent_hosts_environment_filtered() {
    for who in identities() {
        let ws = Ws::new(who);
        let o = hook_as(who, &ws, &claude_event(&ws.dir, PRINT_ENV), &[]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {o:?}");
        let rec = only_run(&ws);
        assert_callers_env(
            &format!("{who:?} hook"),
            rec["rehearsal"]["stdout"].as_str().unwrap(),
            &stripped_of(&rec),
            &rec.to_string(),
            ws.root.path(),
        );
    }
}

/// `MemTotal` of this machine, MiB.
fn mem_total_mb() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    kb / 1024
}

fn cpus() -> u64 {
    std::thread::available_parallelism().unwrap().get() as u64
}

/// A run that asks for nothing gets the documented machine-sized limits:
/// every CPU (`nproc` inside says so too), half the RAM, a quarter of it
/// for the upper layer, 600 s.
#[test]
fn a_rehearsal_gets_a_machine_the_size_of_the_users() {
    let mem = mem_total_mb();
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse("nproc", &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert_eq!(r.out().trim(), cpus().to_string(), "{who:?}: nproc");
        let l = &r.json["rehearsal"]["sandbox"]["limits"];
        assert_eq!(l["cpus"], cpus(), "{who:?}: {l}");
        assert_eq!(l["memory_mb"], (mem / 2).max(1024), "{who:?}: {l}");
        assert_eq!(l["disk_mb"], (mem / 4).max(1024), "{who:?}: {l}");
        assert_eq!(l["timeout_s"], 600, "{who:?}: {l}");
    }
}

/// The CPU quota of the cgroup the rehearsed command runs in, read on the
/// host while it runs (root's rehearsals have cgroups): every CPU by
/// default, one when the envelope asks for one.
#[test]
fn the_cpu_quota_on_the_host_is_the_runs_cpus() {
    if !require_root() || !require_cgroup_v1("cpu") {
        return;
    }
    for (asked, want) in [(None, cpus()), (Some(1), 1)] {
        let ws = Ws::new(Who::Root);
        let marker = format!("{}.{}", 31 + want, std::process::id());
        let mut envelope = serde_json::json!({
            "command": format!("sleep {marker}; true"), "working_dir": ws.dir,
        });
        if let Some(n) = asked {
            envelope["limits"] = serde_json::json!({"cpus": n});
        }
        let file = ws.root.path().join("envelope.json");
        std::fs::write(&file, envelope.to_string()).unwrap();
        let child = ws
            .command()
            .args(["execute", "--json", "--file"])
            .arg(&file)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pid = None;
        wait_until("the rehearsed sleep", 60, || {
            pid = processes()
                .into_iter()
                .find(|(_, _, cmd)| cmd.trim() == format!("sleep {marker}"))
                .map(|(p, _, _)| p);
            pid.is_some()
        });
        let pid = pid.unwrap();
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let path = cg
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctrls, p) = (f.next()?, f.next()?, f.next()?);
                ctrls.split(',').any(|c| c == "cpu").then(|| p.to_string())
            })
            .unwrap();
        let dir = PathBuf::from("/sys/fs/cgroup/cpu").join(path.trim_start_matches('/'));
        let quota = std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).unwrap();
        let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).unwrap();
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            (quota.trim(), period.trim()),
            (&*(want * 100_000).to_string(), "100000"),
            "asked {asked:?}: the cgroup {} ({})",
            dir.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// Write `<ws>/dryrun.yaml` with this `hook:` section, readable by its owner.
fn hook_section(ws: &Ws, yaml: &str) {
    ws.write("dryrun.yaml", &format!("hook:\n{yaml}"));
    ws.chown_all();
}

/// A `hook:` section that raises limits within the ceilings takes effect;
/// one above a ceiling is refused, naming its field in `dryrun.yaml`, and
/// nothing runs.
#[test]
fn the_hook_section_raises_limits_within_the_ceilings() {
    let mem = mem_total_mb();
    for who in identities() {
        let ws = Ws::new(who);
        hook_section(
            &ws,
            "  timeout_s: 7\n  memory_mb: 1536\n  pids: 300\n  cpus: 1\n",
        );
        let o = hook_as(who, &ws, &claude_event(&ws.dir, "true"), &[]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {o:?}");
        let l = &only_run(&ws)["rehearsal"]["sandbox"]["limits"];
        assert_eq!(
            (&l["timeout_s"], &l["memory_mb"], &l["pids"], &l["cpus"]),
            (
                &Value::from(7),
                &Value::from(1536),
                &Value::from(300),
                &Value::from(1)
            ),
            "{who:?}: {l}"
        );
        // What the section leaves out is the machine's default.
        assert_eq!(l["disk_mb"], (mem / 4).max(1024), "{who:?}: {l}");

        for (field, above) in [("memory_mb", mem * 3 / 4 + 1), ("cpus", cpus() + 1)] {
            let ws = Ws::new(who);
            hook_section(&ws, &format!("  {field}: {above}\n"));
            let o = hook_as(who, &ws, &claude_event(&ws.dir, "true"), &[]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{who:?} {field}: {o:?}");
            let named = format!(
                "hook.{field} in {}: {above} is above",
                ws.dir.join("dryrun.yaml").display()
            );
            assert!(
                err.contains(&named) && err.contains("ceiling"),
                "{who:?}: {err}"
            );
            let runs = ws.command().args(["runs", "--json"]).output().unwrap();
            assert!(
                !String::from_utf8_lossy(&runs.stdout).contains("run_id"),
                "{who:?}: a run was made"
            );
        }
    }
}

/// `DRYRUN_HOOK_DEADLINE_S` shorter than `hook.timeout_s` and the margin
/// would block calls the engine judges in time: refused before anything
/// runs, naming both settings.
#[test]
fn a_hook_deadline_shorter_than_the_rehearsal_is_refused() {
    let ws = Ws::new(Who::Root);
    hook_section(&ws, "  timeout_s: 30\n");
    let o = hook_as(
        Who::Root,
        &ws,
        &claude_event(&ws.dir, "true"),
        &[("DRYRUN_HOOK_DEADLINE_S", "50")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        err.contains("DRYRUN_HOOK_DEADLINE_S=50")
            && err.contains("hook.timeout_s = 30 s")
            && err.contains("at least 70"),
        "{err}"
    );
    assert!(
        !ws.state.join("runs").exists()
            || std::fs::read_dir(ws.state.join("runs"))
                .unwrap()
                .next()
                .is_none()
    );
}

/// The hook's deadline follows `hook.timeout_s`: against an engine that
/// never answers (a socket nobody serves), a hook whose rehearsals stop at
/// 1 s blocks at 1 s plus the margin, and says which settings move it.
#[test]
fn the_hook_deadline_follows_hook_timeout_s() {
    let ws = Ws::new(Who::Root);
    hook_section(&ws, "  timeout_s: 1\n");
    let sock = ws.root.path().join("silent.sock");
    let _silent = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mut c = Command::new(bin());
    c.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("DRYRUN_SOCKET", &sock)
        .current_dir(&ws.dir)
        .args(["hook", "claude-code"]);
    let o = output_with_stdin(&mut c, claude_event(&ws.dir, "true").to_string().as_bytes());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
    assert!(
        err.contains("no verdict within 41 s (hook.timeout_s = 1 s")
            && err.contains("DRYRUN_HOOK_DEADLINE_S"),
        "{err}"
    );
}

/// `c` with `mask` as its umask.
fn with_umask(c: &mut Command, mask: u32) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: umask(2) is async-signal-safe and touches nothing else.
    unsafe {
        c.pre_exec(move || {
            libc::umask(mask as libc::mode_t);
            Ok(())
        })
    }
}

/// The modes of what the run created, by path.
fn created_modes(rec: &Value) -> Vec<(String, u64)> {
    rec["rehearsal"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["mode_after"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Files the command creates get the modes the client's own shell would
/// give them: the client's umask reaches the command in-process and
/// through a daemon (whose own umask, here the test's, is never the
/// command's when the client sent one); a plain HTTP client that sends
/// none gets the daemon's; a mask out of range is refused naming the field.
#[test]
fn files_are_created_with_each_clients_umask() {
    if !require_root() {
        return;
    }
    const MAKE: &str = "mkdir d && echo x > d/f && umask";
    let d = Daemon::start(&[]);
    for who in [Who::Root, Who::User] {
        let ws = if who == Who::User {
            user_workspace()
        } else {
            Ws::new(Who::Root)
        };
        for (mask, dir, file) in [(0o077, 0o700, 0o600), (0o002, 0o775, 0o664)] {
            for via_daemon in [false, true] {
                let what = format!("{who:?}, umask {mask:03o}, daemon {via_daemon}");
                let _ = std::fs::remove_dir_all(ws.dir.join("d"));
                let mut c = match (via_daemon, who) {
                    (true, Who::User) => d.cli_user(),
                    (true, Who::Root) => d.cli_root(),
                    (false, _) => ws.command(),
                };
                with_umask(&mut c, mask).current_dir(&ws.dir).args([
                    "execute",
                    "--json",
                    "--expect-write",
                    "**",
                    "--command",
                    MAKE,
                ]);
                let r = to_run(c.output().unwrap());
                assert_eq!(r.exit_code(), Some(0), "{what}: {r:?}");
                assert_eq!(r.out().trim(), format!("{mask:04o}"), "{what}");
                let modes = created_modes(&r.json);
                assert_eq!(
                    modes,
                    vec![("d".to_string(), dir), ("d/f".to_string(), file)],
                    "{what}"
                );
            }
        }
        // No umask sent: the daemon's own (the test's, which started it).
        let own = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Umask:").map(|v| v.trim().to_string()))
            .unwrap();
        let body = serde_json::json!({"command": "umask", "working_dir": ws.dir});
        let (code, rec) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body.to_string()));
        assert_eq!(code, 200, "{who:?}: {rec}");
        assert_eq!(rec["rehearsal"]["stdout"].as_str().unwrap().trim(), own);
        let body =
            serde_json::json!({"command": "true", "working_dir": ws.dir, "caller_umask": 512});
        let (code, rec) = d.curl(who, "POST", "/v1/runs?wait=true", Some(&body.to_string()));
        assert_eq!(code, 400, "{who:?}: {rec}");
        assert!(rec.to_string().contains("caller_umask"), "{who:?}: {rec}");
    }
}

/// The command sees the host's own host name (`uname -n`, `hostname`, and
/// `/etc/hostname` agree), as the live run does: a build stamp, a
/// coverage file's name or git's fallback identity made with it are the
/// live run's. As root and as the test user.
#[test]
fn the_command_sees_the_hosts_own_host_name() {
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse("uname -n; hostname", &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert_eq!(r.out(), format!("{host}\n{host}\n"), "{who:?}");
    }
}

/// The sandbox has the `/dev` a program expects of a Linux machine beyond
/// the null devices: `/dev/shm` (Python's `multiprocessing` locks and
/// process pools fail without it) and pseudo-terminals of its own
/// (`script`, `expect`, tests of terminal programs). Both are the
/// sandbox's own: the host's terminals are not in its `/dev/pts`, and
/// what it leaves in `/dev/shm` never reaches the host's; a line
/// discipline cannot be set on its terminals (the kernel would load the
/// discipline's module). As root and as the test user.
#[test]
fn shared_memory_and_pseudo_terminals_are_the_sandboxes_own() {
    let tag = format!("dryrun-shm-canary-{}", std::process::id());
    let py = "import multiprocessing as m\nfrom concurrent.futures import ProcessPoolExecutor\n\
              l = m.Lock()\nwith ProcessPoolExecutor(2) as ex: print('pool', sum(ex.map(abs, [-1, -2])))";
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("mp.py", py);
        ws.write(
            "ldisc.py",
            "import fcntl, os, pty, struct, termios\nm, s = pty.openpty()\n\
             try:\n    fcntl.ioctl(s, termios.TIOCSETD, struct.pack('i', 21))\n    print('ldisc set')\n\
             except OSError as e:\n    print('ldisc', e.strerror)\n",
        );
        let cmd = format!(
            "python3 mp.py && script -qc 'tty' /dev/null && ls /dev/pts && echo x > /dev/shm/{tag} && ls /dev/shm && python3 ldisc.py"
        );
        let r = ws.rehearse(&cmd, &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let out = r.out().replace('\r', "");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "pool 3", "{who:?}: {out}");
        assert!(lines[1].starts_with("/dev/pts/"), "{who:?}: {out}");
        assert_eq!(
            lines[2], "ptmx",
            "{who:?}: only its own (none open now): {out}"
        );
        assert_eq!(lines[3], tag, "{who:?}: {out}");
        assert_eq!(lines[4], "ldisc Operation not permitted", "{who:?}: {out}");
        assert!(
            !Path::new("/dev/shm").join(&tag).exists(),
            "{who:?}: the sandbox's /dev/shm reached the host's"
        );
    }
}

/// The system's package databases are shown read-only: what `dpkg-query`
/// and `dpkg -s` say is installed is what they say live. Without them both
/// answered "nothing" (`dpkg -l` printed no package, with exit 0), and an
/// agent would have installed what is there. As root and as the test user.
#[test]
fn the_package_databases_say_what_is_installed() {
    if !require_tool("dpkg-query", "dpkg") {
        return;
    }
    let cmd =
        "dpkg-query -W -f '${Package} ${Version}\\n' | sort | sha256sum && dpkg -s bash | head -1";
    let live = Command::new("bash").args(["-c", cmd]).output().unwrap();
    let live = String::from_utf8_lossy(&live.stdout).into_owned();
    assert!(live.contains("Package: bash"), "{live}");
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(cmd, &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert_eq!(r.out(), live, "{who:?}: {r:?}");
    }
}
