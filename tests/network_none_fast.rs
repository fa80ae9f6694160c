//! A run with `network: none` (no allowlist) and real tools that want the
//! network: npm (`npm view` against a registry name, `npm ci` from a
//! lockfile naming an https registry), pip, curl and git over https. Each
//! must give up on its own, at once, and name what it wanted: the run's
//! egress proxy answers every request `403`, where a failed lookup alone
//! had npm retry for about 70 s, past the run's 60 s timeout. Asserted on
//! the outcome, not on time: every tool ran and failed, the script ran to
//! its end, no limit was hit (the timeout is not the reason), and
//! `rehearsal.egress` names each host and port, refused through the proxy.
//!
//! The system pins every name to a loopback listener of the host's (the
//! canary): a run without network must not reach a pinned name either, so
//! the listener takes no connection. Through `dryrun execute` and through
//! the hooks (a `hook:` section without `network:`), as root and as the
//! unprivileged test user.

mod common;
use common::net::{accepted, canary_listener};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// The names the tools want, each on the canary's port.
const NAMES: [&str; 5] = [
    "registry.test",
    "tarballs.test",
    "pypi.test",
    "files.test",
    "git.test",
];

/// The tools, each status printed, then a marker that the script ended.
fn script(port: u16) -> String {
    format!(
        "export GIT_TERMINAL_PROMPT=0\n\
         npm view demo-pkg version --registry http://registry.test:{port}/ --cache /tmp/npm-cache --update-notifier=false; echo npm-view-rc=$?\n\
         npm ci --cache /tmp/npm-cache --no-audit --no-fund --update-notifier=false; echo npm-ci-rc=$?\n\
         python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir --index-url https://pypi.test:{port}/simple/ -d /tmp/vendor demo-pkg; echo pip-rc=$?\n\
         curl -sS https://files.test:{port}/x; echo curl-rc=$?\n\
         git ls-remote https://git.test:{port}/repo.git; echo git-rc=$?\n\
         echo script-ended\n"
    )
}

/// A project whose lockfile has npm fetch its one dependency from
/// `tarballs.test` over https.
fn npm_project(ws: &Ws, port: u16) {
    ws.write(
        "package.json",
        "{\"name\": \"app\", \"version\": \"1.0.0\", \"dependencies\": {\"demo-pkg\": \"1.0.0\"}}\n",
    );
    ws.write(
        "package-lock.json",
        &format!(
            "{{\"name\": \"app\", \"version\": \"1.0.0\", \"lockfileVersion\": 3, \"requires\": true,\n \
             \"packages\": {{\"\": {{\"name\": \"app\", \"version\": \"1.0.0\", \"dependencies\": {{\"demo-pkg\": \"1.0.0\"}}}},\n \
             \"node_modules/demo-pkg\": {{\"version\": \"1.0.0\", \"resolved\": \"https://tarballs.test:{port}/demo-pkg/-/demo-pkg-1.0.0.tgz\", \
             \"integrity\": \"sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==\"}}}}}}\n"
        ),
    );
}

/// The system policy: every name pinned to the canary.
fn pinning_policy(port: u16) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dryrun-nnet-policy-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pins: Vec<String> = NAMES
        .iter()
        .map(|n| format!("'{n}:{port}:127.0.0.1'"))
        .collect();
    let f = d.path().join("egress.yaml");
    std::fs::write(&f, format!("egress:\n  resolve: [{}]\n", pins.join(", "))).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    d
}

/// What every run must show: each tool ran and failed, the script ended
/// (no limit stopped it), each name is refused through the proxy and
/// blocks, and the canary took no connection.
fn assert_gave_up_at_once(
    who: Who,
    door: &str,
    r: &Run,
    port: u16,
    canary: &std::net::TcpListener,
) {
    assert_ran(who, r);
    let out = r.out();
    assert!(
        out.contains("script-ended"),
        "{who:?} {door}: {out}\n{}",
        r.err()
    );
    assert!(
        r.limits_hit().is_empty(),
        "{who:?} {door}: the run hit {:?}",
        r.limits_hit()
    );
    for tool in ["npm-view", "npm-ci", "pip", "curl", "git"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{tool}-rc=")))
            .unwrap_or_else(|| panic!("{who:?} {door}: {tool} did not run: {out}"));
        assert_ne!(line, format!("{tool}-rc=0"), "{who:?} {door}: {out}");
    }
    let e = common::net::egress(r);
    for name in NAMES {
        let x = e
            .iter()
            .find(|x| x["name"] == name && x["port"] == port && x["how"] == "proxy")
            .unwrap_or_else(|| panic!("{who:?} {door}: {name}:{port} not named: {e:?}"));
        assert_eq!(x["allowed"], false, "{who:?} {door}: {x}");
        assert!(
            x["reason"]
                .as_str()
                .is_some_and(|s| s.contains("intent.network is none")),
            "{who:?} {door}: {x}"
        );
        assert!(
            r.reasons()
                .iter()
                .any(|m| m.contains(&format!("{name}:{port}"))),
            "{who:?} {door}: {:?}",
            r.reasons()
        );
    }
    assert_eq!(r.decision(), "blocked", "{who:?} {door}");
    assert_eq!(
        r.json["rehearsal"]["sandbox"]["network"],
        "none (new network namespace, loopback only; the run's egress proxy refuses every name)",
        "{who:?} {door}"
    );
    assert_eq!(
        accepted(canary),
        0,
        "{who:?} {door}: a pinned name was reached"
    );
}

#[test]
fn real_tools_in_a_run_without_network_give_up_at_once_through_execute() {
    if !(require_root() && require_tool("npm", "npm") && require_tool("git", "git")) {
        return;
    }
    let (canary, port) = canary_listener();
    let mut pins = Vec::new();
    for n in NAMES {
        pins.push("--egress-resolve".to_string());
        pins.push(format!("{n}:{port}:127.0.0.1"));
    }
    for who in identities() {
        let ws = Ws::new(who);
        npm_project(&ws, port);
        let mut args: Vec<&str> = pins.iter().map(String::as_str).collect();
        args.extend(["--timeout", "60", "--expect-write", "**"]);
        let r = ws.rehearse_untouched(&script(port), &args);
        assert_gave_up_at_once(who, "execute", &r, port, &canary);
        // The tools were pointed at the proxy as in a run with an
        // allowlist; the record names what dryrun provided.
        assert!(
            r.stripped()
                .contains(&"provided:env:HTTPS_PROXY".to_string()),
            "{who:?}: {:?}",
            r.stripped()
        );
    }
}

/// The answer's reason: Claude Code's and Codex's deny carry it in JSON.
fn hook_reason(out: &std::process::Output) -> String {
    let a: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON answer: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    a["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn real_tools_in_a_run_without_network_give_up_at_once_through_the_hooks() {
    if !(require_root() && require_tool("npm", "npm") && require_tool("git", "git")) {
        return;
    }
    let (canary, port) = canary_listener();
    let policy = pinning_policy(port);
    for who in identities() {
        for host in ["claude-code", "codex"] {
            let ws = Ws::new(who);
            npm_project(&ws, port);
            ws.write("dryrun.yaml", "hook:\n  timeout_s: 60\n");
            let event = match host {
                "claude-code" => common::hook::claude_event(&ws.dir, &script(port)),
                _ => common::hook::codex_event("PreToolUse", &ws.dir, &script(port)),
            };
            let mut c = if who == Who::User {
                as_test_user(bin())
            } else {
                Command::new(bin())
            };
            c.args(["hook", host])
                .env("DRYRUN_LOCAL", "1")
                .env("DRYRUN_STATE_DIR", &ws.state)
                .env("DRYRUN_SYSTEM_POLICY_DIR", policy.path())
                .env_remove("DRYRUN_SOCKET")
                .env_remove("CLAUDE_PROJECT_DIR")
                .env_remove("DRYRUN_HOOK_WORKSPACE");
            let out = output_with_stdin(&mut c, event.to_string().as_bytes());
            let reason = hook_reason(&out);
            assert!(
                reason.contains(&format!("registry.test:{port}")),
                "{who:?} {host}: {reason}"
            );
            let show = ws
                .command()
                .args(["show", "last", "--json"])
                .output()
                .unwrap();
            let r = to_run(show);
            assert_gave_up_at_once(who, host, &r, port, &canary);
        }
    }
}
