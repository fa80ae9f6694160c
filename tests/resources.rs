//! Threat: exhausting the host through a rehearsal (processes, memory, disk,
//! output, time) or leaving processes behind after it. Every attack runs in
//! a real rehearsal with small limits from an envelope file; the assertions
//! look at the host (its process table, its workspace) and at the run record.

mod common;
use common::daemon::parent_of;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An envelope file in its own temporary directory (never in the workspace).
struct EnvelopeFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn envelope(ws: &Ws, command: &str, limits: &[(&str, u64)]) -> EnvelopeFile {
    let dir = tempfile::Builder::new()
        .prefix("dryrun-envelope-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // JSON strings are valid YAML double-quoted scalars.
    let mut yaml = format!(
        "command: {}\nworking_dir: {}\nlimits:\n",
        serde_json::to_string(command).unwrap(),
        serde_json::to_string(&ws.dir.display().to_string()).unwrap()
    );
    for (k, v) in limits {
        yaml.push_str(&format!("  {k}: {v}\n"));
    }
    let path = dir.path().join("envelope.yaml");
    std::fs::write(&path, yaml).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    EnvelopeFile { _dir: dir, path }
}

/// Run an envelope and assert the real workspace stayed byte-identical.
fn run_envelope_untouched(ws: &Ws, env: &EnvelopeFile) -> Run {
    let before = ws.snapshot();
    let r = ws.execute(&["--file", env.path.to_str().unwrap()]);
    assert_eq!(
        before,
        ws.snapshot(),
        "{:?}: the real workspace changed during a rehearsal",
        ws.who
    );
    assert_ne!(r.json, Value::Null, "{:?}: no run record: {r:?}", ws.who);
    r
}

/// Host processes (other than this test binary) whose command line
/// contains `marker`: (pid, command line).
fn procs_with(marker: &str) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmd.contains(marker) {
            out.push((pid, cmd));
        }
    }
    out
}

/// Host processes whose argv[0] is exactly `argv0`.
fn procs_with_argv0(argv0: &str) -> Vec<i32> {
    procs_with(argv0)
        .into_iter()
        .filter(|(_, cmd)| cmd.split(' ').next() == Some(argv0))
        .map(|(pid, _)| pid)
        .collect()
}

/// Poll `f` every 50 ms until it returns true or `limit` passes.
fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills what a failed test left behind (only processes carrying this
/// test's unique marker), so a failure does not leak processes.
struct Sweep(String);
impl Drop for Sweep {
    fn drop(&mut self) {
        for _ in 0..20 {
            let left = procs_with(&self.0);
            if left.is_empty() {
                return;
            }
            for (pid, _) in left {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// After dryrun has returned, nothing carrying `marker` may be left (a short
/// bounded grace period covers processes already dying of SIGKILL).
fn assert_no_survivors(who: Who, marker: &str) {
    let clean = wait_until(Duration::from_secs(3), || procs_with(marker).is_empty());
    assert!(
        clean,
        "{who:?}: processes of the run survived it: {:?}",
        procs_with(marker)
    );
}

fn host_can_fork() -> bool {
    Command::new("true").status().is_ok_and(|s| s.success())
}

/// The classic bomb: the top-level shell forks `:|:&` and returns at once;
/// its descendants multiply until the pids limit stops them.
#[test]
fn a_fork_bomb_is_contained() {
    for who in identities() {
        let ws = Ws::new(who);
        let marker = format!("dryrun-forkbomb-{}", random_hex());
        let _sweep = Sweep(marker.clone());
        let env = envelope(
            &ws,
            &format!(":(){{ :|:& }};: # {marker}"),
            &[("pids", 64), ("timeout_s", 10)],
        );
        let r = run_envelope_untouched(&ws, &env);
        let reh = &r.json["rehearsal"];
        assert_eq!(
            r.code,
            4,
            "{who:?}: exit_code {}, signal {}, timed_out {}, limits_hit {}, enforcement {}, verdict {}",
            reh["exit_code"],
            reh["signal"],
            reh["timed_out"],
            reh["limits_hit"],
            reh["sandbox"]["enforcement"],
            r.json["verdict"]
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
        // Either the bomb ran into the pids limit before its top shell
        // returned, or it was cut short when the shell returned: then the
        // processes it left behind are the finding.
        let reasons = r.json["verdict"]["reasons"].to_string();
        assert!(
            !r.limits_hit().is_empty() || reasons.contains("[evidence.background_processes]"),
            "{who:?}: neither a limit nor the leftover processes reported: {:?}",
            r.json
        );
        assert!(
            host_can_fork(),
            "{who:?}: the host cannot fork after the run"
        );
        assert_no_survivors(who, &marker);
    }
}

/// The same bomb, but its top-level shell stays alive for a while, so the
/// bomb certainly runs into the pids limit before the step ends: the limit
/// hit must be in the record whichever mechanism enforces it (cgroup as
/// root, RLIMIT_NPROC otherwise).
#[test]
fn a_fork_bomb_that_outlives_its_shell_reports_the_pids_limit() {
    for who in identities() {
        let ws = Ws::new(who);
        let marker = format!("dryrun-forkbomb-wait-{}", random_hex());
        let _sweep = Sweep(marker.clone());
        let env = envelope(
            &ws,
            &format!(":(){{ :|:& }};:; sleep 3 # {marker}"),
            &[("pids", 64), ("timeout_s", 10)],
        );
        let r = run_envelope_untouched(&ws, &env);
        // The bomb did run into a process limit inside.
        assert!(
            r.err().contains("fork: retry") || r.err().contains("Resource temporarily unavailable"),
            "{who:?}: stderr {:?}",
            r.err()
        );
        assert!(
            r.limits_hit().contains(&"pids".to_string()),
            "{who:?}: limits_hit {:?}; enforcement {}; exit_code {}; decision {}",
            r.limits_hit(),
            r.json["rehearsal"]["sandbox"]["enforcement"],
            r.json["rehearsal"]["exit_code"],
            r.decision()
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
        assert_eq!(r.code, 4, "{who:?}");
        assert!(
            host_can_fork(),
            "{who:?}: the host cannot fork after the run"
        );
        assert_no_survivors(who, &marker);
    }
}

#[test]
fn a_memory_bomb_is_stopped() {
    for who in identities() {
        let ws = Ws::new(who);
        let cmd = "python3 -c 'x = []\nfor i in range(32):\n    x.append(b\"x\" * (64 << 20))\nprint(\"allocated 2 GiB\")'";
        // The memory cgroup holds memory_mb + disk_mb + /tmp (files are
        // tmpfs pages): a small disk_mb, so 2 GiB is past the ceiling
        // whatever the machine's default disk_mb.
        let env = envelope(
            &ws,
            cmd,
            &[("memory_mb", 128), ("disk_mb", 256), ("timeout_s", 60)],
        );
        let r = run_envelope_untouched(&ws, &env);
        assert_ne!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert!(!r.out().contains("allocated 2 GiB"), "{who:?}: {}", r.out());
        assert_ne!(r.code, 0, "{who:?}");
        assert_eq!(r.decision(), "blocked", "{who:?}");
        if who == Who::Root && require_cgroup_v1("memory") {
            assert!(
                r.limits_hit().contains(&"memory".to_string()),
                "{who:?}: limits_hit {:?}, rehearsal {:?}",
                r.limits_hit(),
                r.json["rehearsal"]
            );
            // The OOM kill above counted in the run's memory cgroup, so the
            // command was inside it: joined by a single-thread self-move,
            // not by a pid write that waits for the global lock.
            let enforcement = r.json["rehearsal"]["sandbox"]["enforcement"].to_string();
            assert!(
                enforcement.contains("cgroup join: v1 single-thread self-move"),
                "{enforcement}"
            );
        }
        assert!(host_can_fork());
    }
}

/// Files the run writes live in memory (the upper layer and `/tmp` are
/// tmpfs) and are charged to the run's memory cgroup. Files that fit
/// `disk_mb` never push a run over `memory_mb` (the cgroup's ceiling is the
/// sum); when the processes' memory and the files together fill it, the
/// OOM killer ends the command (its score is raised before it execs), not
/// the sandbox's init: the run is complete, says the memory limit was hit,
/// and lists the file. The command cannot lower its score below where it
/// started. (Before, a 300 MiB file in a 128 MiB limit got the init
/// killed and the run failed.)
#[test]
fn files_count_against_memory_and_a_full_limit_ends_the_command_not_the_init() {
    for who in identities() {
        let ws = Ws::new(who);
        let env = envelope(
            &ws,
            "head -c 300M /dev/zero > big && echo wrote",
            &[("memory_mb", 128), ("disk_mb", 512), ("timeout_s", 60)],
        );
        let r = run_envelope_untouched(&ws, &env);
        assert_ne!(r.json["state"], "failed", "{who:?}: {}", r.json);
        assert_eq!(r.out(), "wrote\n", "{who:?}");
        assert!(r.change("big").is_some(), "{who:?}: {:?}", r.changes());
        assert!(r.limits_hit().is_empty(), "{who:?}: {:?}", r.limits_hit());
        if who != Who::Root || !require_cgroup_v1("memory") {
            continue;
        }
        let cmd = "cat /proc/self/oom_score_adj; (echo -1 > /proc/self/oom_score_adj) 2>/dev/null || echo refused; \
                   head -c 60M /dev/zero > fill; \
                   python3 -c 'b = bytearray(600 << 20); print(\"allocated\")'; echo after=$?";
        let env = envelope(
            &ws,
            cmd,
            &[("memory_mb", 64), ("disk_mb", 64), ("timeout_s", 60)],
        );
        let r = run_envelope_untouched(&ws, &env);
        assert_ne!(r.json["state"], "failed", "{who:?}: {}", r.json);
        assert_eq!(r.out(), "1000\nrefused\nafter=137\n", "{who:?}: {}", r.json);
        assert!(
            r.limits_hit().contains(&"memory".to_string()),
            "{who:?}: {:?}",
            r.limits_hit()
        );
        assert!(r.change("fill").is_some(), "{who:?}: {:?}", r.changes());
        assert_eq!(r.decision(), "blocked", "{who:?}");
        let enforcement = r.json["rehearsal"]["sandbox"]["enforcement"].to_string();
        assert!(
            enforcement.contains("memory: cgroup v1 (384 MiB: memory_mb + disk_mb + /tmp; 32 MiB more for the init's walk once the command is gone)"),
            "{enforcement}"
        );
    }
}

#[test]
fn filling_the_disk_fails_and_is_reported() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("keep.txt", "keep");
        let env = envelope(
            &ws,
            "dd if=/dev/zero of=big bs=1M count=64",
            &[("disk_mb", 8), ("timeout_s", 30)],
        );
        let r = run_envelope_untouched(&ws, &env);
        assert_ne!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        let err = r.err();
        assert!(
            err.contains("No space left on device")
                || err.contains("File too large")
                || r.json["rehearsal"]["signal"] == 25,
            "{who:?}: {err:?} / signal {}",
            r.json["rehearsal"]["signal"]
        );
        assert!(
            r.limits_hit().contains(&"disk".to_string()),
            "{who:?}: limits_hit {:?}, rehearsal {}",
            r.limits_hit(),
            r.json["rehearsal"]
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
        assert!(!ws.dir.join("big").exists());
    }
}

#[test]
fn an_output_flood_is_truncated() {
    for who in identities() {
        let ws = Ws::new(who);
        let env = envelope(&ws, "yes", &[("output_kb", 4), ("timeout_s", 30)]);
        let r = run_envelope_untouched(&ws, &env);
        let reh = &r.json["rehearsal"];
        assert_eq!(reh["output_truncated"], true, "{who:?}: {reh}");
        assert!(
            r.limits_hit().contains(&"output".to_string()),
            "{who:?}: {:?}",
            r.limits_hit()
        );
        assert!(
            r.out().contains("[dryrun: output truncated"),
            "{who:?}: {:?}",
            r.out()
        );
        // The cap holds: 4 KiB of `y\n` plus the marker line.
        assert!(
            r.out().len() + r.err().len() <= 4096 + 200,
            "{who:?}: {} bytes kept",
            r.out().len()
        );
        assert_ne!(r.exit_code(), Some(0), "{who:?}: {reh}");
        assert_ne!(r.code, 0, "{who:?}");
        assert_eq!(r.decision(), "blocked", "{who:?}");
    }
}

#[test]
fn a_timeout_kills_the_command() {
    for who in identities() {
        let ws = Ws::new(who);
        let marker = format!("dryrun-timeout-{}", random_hex());
        let _sweep = Sweep(marker.clone());
        let r = ws.rehearse_untouched(&format!("exec -a {marker} sleep 100"), &["--timeout", "2"]);
        let reh = &r.json["rehearsal"];
        assert_eq!(reh["timed_out"], true, "{who:?}: {reh}");
        assert!(
            r.limits_hit().contains(&"timeout".to_string()),
            "{who:?}: {:?}",
            r.limits_hit()
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
        assert_eq!(r.code, 4, "{who:?}");
        assert_no_survivors(who, &marker);
    }
}

#[test]
fn orphans_and_double_forks_do_not_survive_the_run() {
    for who in identities() {
        let ws = Ws::new(who);
        let marker = format!("dryrun-orphan-{}", random_hex());
        let _sweep = Sweep(marker.clone());
        let script = format!(
            "(setsid bash -c 'exec -a {marker}-setsid sleep 1000' </dev/null >/dev/null 2>&1 &); \
             nohup bash -c 'exec -a {marker}-nohup sleep 1000' </dev/null >/dev/null 2>&1 & disown; \
             (bash -c '(exec -a {marker}-double sleep 1000 &)' &); \
             bash -c 'trap \"\" HUP TERM; exec -a {marker}-trap sleep 1000' </dev/null >/dev/null 2>&1 & disown; \
             setsid -f bash -c 'exec -a {marker}-setsidf sleep 1000' </dev/null >/dev/null 2>&1; \
             sleep 0.3; ps -eo args | grep -c '^{marker}'; exit 0"
        );
        let r = ws.rehearse_untouched(&script, &[]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        // They did start inside (the rehearsal saw them).
        let seen: i64 = r
            .out()
            .trim()
            .lines()
            .last()
            .unwrap_or("0")
            .trim()
            .parse()
            .unwrap_or(0);
        assert!(
            seen >= 4,
            "{who:?}: only {seen} background processes started: {r:?}"
        );
        assert_no_survivors(who, &marker);
    }
}

/// Run cgroups a killed helper left behind (its clean-up never ran) are
/// removed by the next start of dryrun once they are 10 minutes old and
/// empty; a fresh empty one (a run between its cgroups' creation and its
/// join) and an old one with a process in it stay.
#[test]
fn run_cgroups_left_behind_are_swept_by_the_next_start() {
    if !common::daemon::require_root() || !require_cgroup_v1("pids") {
        return;
    }
    let base = std::path::Path::new("/sys/fs/cgroup/pids/dryrun");
    std::fs::create_dir_all(base).unwrap();
    let tag = random_hex();
    let old = base.join(format!("r-sweep-old-{tag}"));
    let busy = base.join(format!("r-sweep-busy-{tag}"));
    let fresh = base.join(format!("r-sweep-fresh-{tag}"));
    for d in [&old, &busy, &fresh] {
        std::fs::create_dir(d).unwrap();
    }
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    std::fs::write(busy.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
    for d in [&old, &busy] {
        let st = Command::new("touch")
            .args(["-d", "20 minutes ago"])
            .arg(d)
            .status()
            .unwrap();
        assert!(st.success());
        // Another test's start of dryrun may sweep `old` as soon as it is
        // old: gone is what this test wants of it. `busy` must stay.
        let meta = match std::fs::metadata(d) {
            Err(e) if *d == old && e.kind() == std::io::ErrorKind::NotFound => continue,
            m => m.unwrap(),
        };
        let age = meta.modified().unwrap().elapsed().unwrap();
        assert!(
            age > Duration::from_secs(15 * 60),
            "{}: {age:?}",
            d.display()
        );
    }
    // A start of the in-process engine on a state directory whose
    // housekeeping is due (a new one).
    let ws = Ws::new(Who::Root);
    let r = ws.rehearse("true", &[]);
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    let gone = !old.exists();
    let busy_kept = busy.exists();
    let fresh_kept = fresh.exists();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    for d in [&old, &busy, &fresh] {
        let _ = wait_until(Duration::from_secs(5), || {
            std::fs::remove_dir(d).is_ok() || !d.exists()
        });
    }
    assert!(gone, "an empty run cgroup 20 minutes old was left");
    assert!(busy_kept, "a run cgroup with a process in it was removed");
    assert!(fresh_kept, "a fresh empty run cgroup was removed");
}

#[test]
fn killing_dryrun_kills_the_sandbox() {
    for who in identities() {
        let ws = Ws::new(who);
        let marker = format!("dryrun-killed-{}", random_hex());
        let _sweep = Sweep(marker.clone());
        let mut c = ws.command();
        c.arg("execute")
            .arg("--json")
            .arg("--command")
            .arg(format!("exec -a {marker} sleep 1000"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        let appeared = wait_until(Duration::from_secs(10), || {
            !procs_with_argv0(&marker).is_empty()
        });
        if !appeared {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{who:?}: the sandboxed command never appeared on the host");
        }
        let sandboxed = procs_with_argv0(&marker);
        // The helper processes between dryrun and the command, identified by
        // (pid, start time) so a reused pid is not mistaken for a survivor.
        let chain: Vec<(i32, u64)> = sandboxed
            .first()
            .map(|p| ancestors_below(*p, child.id() as i32))
            .unwrap_or_default();
        // SIGKILL: dryrun gets no chance to clean up by itself.
        child.kill().unwrap();
        child.wait().unwrap();
        let gone = wait_until(Duration::from_secs(5), || {
            procs_with(&marker).is_empty() && chain.iter().all(|(p, t)| start_time(*p) != Some(*t))
        });
        let helpers_left: Vec<String> = chain
            .iter()
            .filter(|(p, t)| start_time(*p) == Some(*t))
            .map(|(p, _)| format!("{p} ({})", status_line(*p, "Uid")))
            .collect();
        assert!(
            gone,
            "{who:?}: after dryrun (pid {}) was killed, the sandbox survived: command {:?}, helpers {helpers_left:?}",
            child.id(),
            procs_with(&marker)
        );
    }
}

/// Field 22 of /proc/PID/stat (start time in clock ticks).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

fn status_line(pid: i32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `pid` and its ancestors up to (not including) `top`, with start times.
fn ancestors_below(pid: i32, top: i32) -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    let mut p = pid;
    for _ in 0..16 {
        if p <= 1 || p == top {
            break;
        }
        if let Some(t) = start_time(p) {
            out.push((p, t));
        }
        match parent_of(p as u32) {
            Some(pp) => p = pp as i32,
            None => break,
        }
    }
    out
}

/// The helper turns transparent huge pages off for its own allocator (a
/// short-lived process that zeroes whole 2 MiB pages wastes CPU), and that
/// flag survives fork and exec: the command must get the host's setting
/// back, so memory behaves in rehearsal as it will live.
#[test]
fn the_command_runs_with_the_hosts_transparent_huge_page_setting() {
    let host = std::fs::read_to_string("/proc/self/status").unwrap();
    let host_line = host
        .lines()
        .find(|l| l.starts_with("THP_enabled:"))
        .expect("this kernel reports THP_enabled")
        .to_string();
    for who in identities() {
        let ws = Ws::new(who);
        let env = envelope(&ws, "grep THP_enabled /proc/self/status", &[]);
        let r = run_envelope_untouched(&ws, &env);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {r:?}");
        assert_eq!(r.out().trim(), host_line, "{who:?}");
    }
}

/// A process the command leaves behind that ends on its own a moment later
/// (git 2.47's detached auto-maintenance that finds nothing to do) is no
/// background process: its write is the command's, walked and promoted.
/// One that keeps running is still killed and is the finding.
#[test]
fn a_process_left_behind_that_ends_at_once_is_no_background_process() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(
            "(sleep 0.2; echo late > late.txt) & echo started",
            &["--expect-write", "late.txt"],
        );
        assert_eq!(r.decision(), "promote", "{who:?}: {}", r.json["verdict"]);
        assert_eq!(
            r.json["rehearsal"]["leftover_processes_killed"], 0,
            "{who:?}"
        );
        assert!(r.change("late.txt").is_some(), "{who:?}: {:?}", r.changes());
        let r = ws.rehearse("sleep 30 & echo started", &[]);
        assert_eq!(r.decision(), "blocked", "{who:?}");
        assert!(
            r.json["verdict"]["reasons"]
                .to_string()
                .contains("[evidence.background_processes]"),
            "{who:?}: {}",
            r.json["verdict"]
        );
    }
}
