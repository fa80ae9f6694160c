//! Issue 31, item 6, attacked: the single-user approval (root approving
//! root's own run as a person at a terminal no process here made), by an
//! agent confined to dryrun's doors: its commands run only as rehearsals.
//!
//! - From inside a rehearsal, it runs `dryrun approve` of its own waiting
//!   run under a pseudo-terminal it makes (so it can read the code and type
//!   it back), plain and from a pid namespace of its own (where the
//!   terminal's holder would be out of sight).
//! - From inside a rehearsal started at a person's terminal, it injects
//!   keystrokes into that terminal (`TIOCSTI` on the streams it was given,
//!   on `/dev/tty`, on every terminal device it can open) so that the
//!   person's shell would run what it typed.
//! - Through Claude Code's prompt (the in-process hook's host-prompt token)
//!   in a permission mode where nobody answers the `ask`.
//! - As the unprivileged agent uid against a root daemon: the single-user
//!   rule is not reachable over the socket, for its own run or root's, nor
//!   when the agent is a reviewer.
//!
//! Every assertion is host-side: the run's record and the journal in the
//! state directory, and what the person's shell read from its terminal.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::daemon::*;
use common::*;

fn approvals_in_journal(state: &Path) -> usize {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"kind\":\"approval\""))
        .count()
}

fn state_of(state: &Path, id: &str) -> String {
    let v: Value = serde_json::from_slice(
        &std::fs::read(state.join("runs").join(id).join("record.json")).unwrap(),
    )
    .unwrap();
    v["state"].as_str().unwrap_or_default().to_string()
}

/// A run of `ws`'s identity that waits for a person.
fn waiting_run(ws: &Ws) -> String {
    let r = ws.rehearse("echo 'all:' > Makefile", &["--expect-write", "**"]);
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    run_id(&r)
}

/// A Python program, run inside the rehearsal, that starts `argv` under a
/// pseudo-terminal of its own, reads the code `dryrun approve` shows, types
/// it back, and prints everything it saw.
fn type_back_program(argv: &[String]) -> String {
    format!(
        r#"
import os, pty, re, sys
argv = {argv:?}
try:
    pid, fd = pty.fork()
except OSError as e:
    print("no pty:", e); sys.exit(0)
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
seen = b""
typed = False
while True:
    try:
        d = os.read(fd, 1024)
    except OSError:
        break
    if not d:
        break
    seen += d
    m = re.search(rb"type this code to confirm: (\w+)", seen)
    if m and not typed and b">" in seen[m.end():]:
        os.write(fd, m.group(1) + b"\n")
        typed = True
os.waitpid(pid, 0)
print("SEEN:", seen.decode(errors="replace"))
"#
    )
}

/// From inside a root rehearsal, in-process (a root container's agent, whose
/// commands the hook rehearses): `dryrun approve` of root's own waiting run
/// under a pty the rehearsal made, and again from a pid namespace the
/// rehearsal made (where the pty's holder would be out of sight, as a
/// container runtime's is), the code read and typed back. The run still
/// waits and the journal holds no approval: the rehearsal gets no
/// pseudo-terminal outside its own devpts instance, cannot make a namespace (nor so a devpts
/// of its own), and its view of the state directory is masked. The
/// control: the same program run live by root does approve (the limit
/// docs/approvals.md states: a root shell of its own is not confined).
#[test]
fn a_rehearsal_cannot_approve_its_own_run_at_a_terminal_it_made() {
    if !require_root() || !require_tool("python3", "python3") {
        return;
    }
    let ws = Ws::new(Who::Root);
    let id = waiting_run(&ws);
    let approve = |prefix: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
        v.extend(
            [
                bin().to_str().unwrap(),
                "--local",
                "--state-dir",
                ws.state.to_str().unwrap(),
                "approve",
                &id,
                "--note",
                "from-a-rehearsal",
            ]
            .map(String::from),
        );
        v
    };
    for prefix in [
        &[][..],
        &["unshare", "--pid", "--fork", "--mount-proc"][..],
        &[
            "unshare",
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount-proc",
        ][..],
    ] {
        let script = ws.write("attack.py", &type_back_program(&approve(prefix)));
        // Plain, and with a terminal device of its own: a devpts instance
        // mounted in a user and mount namespace the rehearsal makes.
        for wrap in [
            String::new(),
            "unshare --user --map-root-user --mount sh -c 'mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts && mount --bind /dev/pts/ptmx /dev/ptmx && exec \"$0\" \"$@\"' "
                .to_string(),
        ] {
            let r = ws.rehearse(
                &format!("{wrap}python3 {}", script.display()),
                &["--expect-write", "**"],
            );
            let out = r.json["rehearsal"]["stdout"].as_str().unwrap_or_default().to_string()
                + r.json["rehearsal"]["stderr"].as_str().unwrap_or_default();
            eprintln!("ATTEMPT {wrap} {prefix:?}: {out}");
            assert_eq!(state_of(&ws.state, &id), "awaiting_approval", "{out}");
            assert_eq!(approvals_in_journal(&ws.state), 0, "{out}");
        }
    }
    // The control, and the limit docs/approvals.md states: the same
    // program run live by root (a root shell of its own, not confined to
    // dryrun's doors) from a pid namespace of its own does approve.
    let script = ws.write(
        "attack.py",
        &type_back_program(&approve(&["unshare", "--pid", "--fork", "--mount-proc"])),
    );
    let out = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(state_of(&ws.state, &id), "approved", "{said}");
    assert_eq!(approvals_in_journal(&ws.state), 1, "{said}");
}

/// A shell at a pseudo-terminal the test made (the person's terminal), as
/// `who`: it runs `dryrun execute` of a command that injects a line into
/// every terminal it can reach (`TIOCSTI` on fds 0 to 2, on `/dev/tty`, on
/// each terminal device it can open), then reads, without waiting, what the
/// terminal holds as typed input. The injected line never reaches it: the
/// person's shell would run it after dryrun exits.
/// With `live`, the same command runs without dryrun (the control: the
/// line does land, so the check can see it). What the terminal held.
fn injection_at_a_terminal(who: Who, live: bool) -> String {
    let ws = Ws::new(who);
    ws.write(
        "inject.py",
        r#"
import fcntl, glob, os, termios
line = b"echo INJECTED-7c2d\n"
def sti(fd):
    try:
        for c in line:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        return "yes"
    except OSError as e:
        return e.strerror
for fd in (0, 1, 2):
    print("fd", fd, os.isatty(fd), sti(fd))
for p in ["/dev/tty", "/dev/console"] + sorted(glob.glob("/dev/pts/*")) + sorted(glob.glob("/dev/tty[0-9]*")):
    try:
        fd = os.open(p, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        print(p, "open:", e.strerror)
        continue
    print(p, sti(fd))
    os.close(fd)
"#,
    );
    let cmd = "python3 inject.py";
    let t = common::terminal::at_a_terminal(&ws, who, cmd, live);
    let (pending, seen) = (t.pending, t.seen);
    if live {
        return pending;
    }
    // What each injection attempt got, from the run's record.
    let tried = t.rehearsed;
    eprintln!("INJECT {who:?}: {tried:?}");
    assert!(
        tried.iter().any(|t| t.contains("fd 0 ")),
        "the injection did not run: {tried:?} {seen}"
    );
    assert_eq!(pending, "none", "input was injected: {seen}");
    pending
}

#[test]
fn a_rehearsal_at_a_persons_terminal_types_nothing_into_it() {
    if !require_root() || !require_tool("python3", "python3") {
        return;
    }
    for who in [Who::Root, Who::User] {
        // The control: run live at that terminal, the line lands.
        let live = injection_at_a_terminal(who, true);
        assert!(live.contains("INJECTED-7c2d"), "{who:?}: {live}");
        assert_eq!(injection_at_a_terminal(who, false), "none");
    }
}

/// The agent uid against a root daemon: the single-user rule is root's,
/// locally; over the socket neither the agent's own run nor root's own is
/// approved by anyone who submitted it, and the agent approves nothing.
#[test]
fn over_the_daemon_the_agent_uid_has_no_single_user_rule() {
    if !require_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let uws = user_workspace();
    let submit = |who: Who, dir: &Path| -> String {
        let r = submit_as(&d, who, dir, "echo x > Makefile", &["--expect-write", "**"]);
        assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
        run_id(&r)
    };
    let mine = submit(Who::User, &uws.dir);
    let rws = Ws::new(Who::Root);
    let roots = submit(Who::Root, &rws.dir);
    for id in [&mine, &roots] {
        let (st, v) = d.curl(
            Who::User,
            "POST",
            &format!("/v1/runs/{id}/approve"),
            Some("{\"note\": \"me\"}"),
        );
        assert!(st == 403 || st == 404, "{st} {v}");
    }
    // The CLI over the socket, at no terminal: refused the same way.
    let out = d
        .cli_user()
        .args(["approve", &mine, "--note", "me"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let (st, v) = d.curl(Who::Root, "GET", &format!("/v1/runs/{mine}"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "awaiting_approval", "{v}");
    assert!(
        v["approvals"].as_array().is_none_or(|a| a.is_empty()),
        "{v}"
    );
    drop(d);

    // The agent a reviewer too (its group the approver group): still never
    // for its own run.
    let group = Command::new("id")
        .args(["-gn", &test_user().0.to_string()])
        .output()
        .unwrap();
    let group = String::from_utf8(group.stdout).unwrap().trim().to_string();
    let d = Daemon::start(&["--approver-group", &group]);
    let r = submit_user(&d, &uws, "echo y > Makefile", &["--expect-write", "**"]);
    let mine = run_id(&r);
    let (st, v) = d.curl(
        Who::User,
        "POST",
        &format!("/v1/runs/{mine}/approve"),
        Some("{\"note\": \"me\"}"),
    );
    assert_eq!(st, 403, "{v}");
    let (_, v) = d.curl(Who::Root, "GET", &format!("/v1/runs/{mine}"), None);
    assert_eq!(v["state"], "awaiting_approval", "{v}");
}

/// The root container's other way to approve: Claude Code's own prompt
/// (the hook in-process, host-prompt approvals on). An `ask` approves a
/// run only if a person answers it; in the permission modes where Claude
/// Code answers it without one (`bypassPermissions`, `auto`, where a
/// classifier decides, `dontAsk`) or a mode not known, the hook's `ask`
/// carries no token: the yes only lets the command wait for a reviewer
/// (`--await-approval`), no grant is written, and running that command
/// approves nothing. A token granted in `default` mode and presented again
/// after the session switched to `auto` is denied, not asked (an `ask`
/// there would pass unanswered). In `default` the token is offered (the
/// control).
#[test]
fn a_host_prompt_no_person_answers_approves_nothing() {
    use common::hook::{answer, claude_event, hook, hook_ws};
    if !require_root() {
        return;
    }
    let w = hook_ws("dryrun-hsu-");
    let ask = |mode: Option<&str>, command: &str| -> Value {
        let mut e = claude_event(&w.ws, command);
        match mode {
            Some(m) => e["permission_mode"] = Value::from(m),
            None => {
                e.as_object_mut().unwrap().remove("permission_mode");
            }
        }
        answer(&hook(&w, "claude-code", e.to_string().as_bytes(), &[]))["hookSpecificOutput"]
            .clone()
    };
    let grants = || {
        std::fs::read_dir(w.state.join("host-prompt"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    for (i, mode) in [
        Some("bypassPermissions"),
        Some("auto"),
        Some("dontAsk"),
        Some("weird"),
        None,
    ]
    .into_iter()
    .enumerate()
    {
        let f = format!("f{i}.txt");
        std::fs::write(w.ws.join(&f), "x\n").unwrap();
        let out = ask(mode, &format!("shred -n 0 -z {f}"));
        let cmd = out["updatedInput"]["command"].as_str().unwrap_or_default();
        assert!(!cmd.contains("--host-prompt-token"), "{mode:?}: {out}");
        assert!(cmd.contains("--await-approval"), "{mode:?}: {out}");
        assert_eq!(grants(), 0, "{mode:?}: a grant was written");
    }
    // The control: in default mode the ask carries a token.
    std::fs::write(w.ws.join("g.txt"), "x\n").unwrap();
    let out = ask(Some("default"), "shred -n 0 -z g.txt");
    assert_eq!(out["permissionDecision"], "ask", "{out}");
    let with_token = out["updatedInput"]["command"].as_str().unwrap().to_string();
    assert!(with_token.contains("--host-prompt-token"), "{out}");
    assert_eq!(grants(), 1);
    // Presented again once nobody answers asks: denied, grant unspent.
    let again = ask(Some("auto"), &with_token);
    assert_eq!(again["permissionDecision"], "deny", "{again}");
    assert_eq!(grants(), 1);
    let journal = std::fs::read_to_string(w.state.join("journal.jsonl")).unwrap();
    assert!(!journal.contains("\"kind\":\"approval\""), "{journal}");
}
