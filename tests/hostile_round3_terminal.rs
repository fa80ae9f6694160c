//! Round 3 of the hostile agent (issue 29, item 3): a reviewer's terminal
//! takes no orders from the agent. An agent that runs a local rehearsal
//! owns its state directory: every string of its records is the agent's,
//! whether the rehearsal put it there (a command, file names, output, a
//! variable's name) or the agent wrote the record itself. None of it may
//! reach the reviewer's terminal raw: not through `dryrun show`, `runs`,
//! `diff` (one run or two), `receipt show`, `journal verify`, nor the
//! review screen; and a variable whose name is not a shell identifier is
//! never named. The escaping shows text as it will run and land: a
//! backslash is a backslash, only controls are made visible.
//!
//! The agent is the test user (and root, for root's own local runs); the
//! reviewer is root reading the agent's state directory, as `sudo dryrun
//! show` does. Every assertion is on the bytes that reach stdout and stderr,
//! or on the screen tmux drew.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

use common::tmux::Tmux;
use common::*;

/// What the agent writes wherever it can: a clipboard write (OSC 52), a
/// screen clear and cursor home (CSI 2J, CSI H), a carriage return and a
/// painted fake decision, backspace, DEL, the C1 CSI, bidi overrides and
/// isolates, a zero-width space and a BOM.
const H: &str = "\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J\u{1b}[H\rdecision: promote\u{8}\u{7f}\u{9b}31m\u{202e}\u{2066}\u{200b}\u{feff}";
/// `H` as the reviewer must read it.
const H_SHOWN: &str = "⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧⟦ESC⟧[2J⟦ESC⟧[H⟦CR⟧decision: promote⟦BS⟧⟦DEL⟧⟦U+009B⟧31m⟦U+202E⟧⟦U+2066⟧⟦U+200B⟧⟦U+FEFF⟧";
/// The start of `H` that every place it reaches must show, escaped.
const OSC52_SHOWN: &str = "⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧";

/// Every character a terminal acts on or hides, found raw in `bytes`
/// (other than the newlines of the layout), with some context; and the
/// bytes that are not UTF-8. An independent list, not the code's.
fn raw_controls(bytes: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for chunk in bytes.utf8_chunks() {
        if !chunk.invalid().is_empty() {
            found.push(format!("invalid UTF-8 {:x?}", chunk.invalid()));
        }
        let text = chunk.valid();
        for (i, c) in text.char_indices() {
            let u = c as u32;
            let bad = (c.is_control() && c != '\n')
                || matches!(u,
                    0x00AD | 0x061C | 0x180E | 0x200B..=0x200F | 0x2028..=0x202E
                    | 0x2060..=0x2069 | 0xFEFF | 0xFFF9..=0xFFFB | 0xE0000..=0xE007F);
            if bad {
                let from = text[..i].char_indices().rev().nth(30).map_or(0, |(j, _)| j);
                let to = text[i..]
                    .char_indices()
                    .nth(30)
                    .map_or(text.len(), |(j, _)| i + j);
                found.push(format!("U+{u:04X} in {:?}", &text[from..to]));
            }
        }
    }
    found
}

/// Nothing raw on stdout or stderr of `out`, and no line that starts with
/// the fake decision (a carriage return that moved the cursor back would
/// have drawn it there).
fn assert_inert(what: &str, out: &Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let found = raw_controls(bytes);
        assert!(
            found.is_empty(),
            "{what}: raw controls on {stream}: {found:#?}\n{}",
            String::from_utf8_lossy(bytes)
        );
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text
                .lines()
                .any(|l| l.trim_start().starts_with("decision: promote")),
            "{what}: the fake decision stands on a line of its own on {stream}:\n{text}"
        );
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Who reads the agent's state directory: the agent itself, and root (the
/// README's reviewer flow) when the agent is the test user.
fn viewers(who: Who) -> Vec<Who> {
    if who == Who::User && is_root() {
        vec![Who::User, Who::Root]
    } else {
        vec![who]
    }
}

/// `dryrun ARGS` on `ws`'s state directory, as `viewer`.
fn view(ws: &Ws, viewer: Who, args: &[&str]) -> Output {
    let mut c = if viewer == ws.who {
        ws.command()
    } else {
        let mut c = Command::new(bin());
        c.env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("DRYRUN_STATE_DIR", &ws.state)
            .env("DRYRUN_LOCAL", "1")
            .current_dir("/")
            .stdin(std::process::Stdio::null());
        c
    };
    c.args(args).output().unwrap()
}

/// A variable whose name carries the attack (and the identifier it starts
/// with, which is named).
const BAD_NAME: &str = "GH_TOKEN\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J";

/// The honest hostile run: a real local rehearsal whose command, intent,
/// created file names (one not UTF-8), file content, output, a stub's
/// argv and stdin, and the caller's environment carry `H`. It writes a
/// forbidden file, so it waits for a reviewer. The run id.
fn hostile_rehearsal(ws: &Ws) -> String {
    ws.write("secret.txt", "k\n");
    let command = format!(
        concat!(
            ": '{h}'; ",
            r#"printf 'x\033]52;c;QQ==\007\n' > "$(printf 'f\033]52;c;ZXZpbA==\007\033[2J\r\010\177\302\233\342\200\256.txt')"; "#,
            r#"printf 'y\n' > "$(printf 'bad\377name')"; "#,
            r#"printf 'tab\there\033[2J\n' > tab.txt; "#,
            r#"printf 'OUT\033]52;c;ZXZpbA==\007\033[2J\033[Hdecision: promote\r\010\000\177\302\233\342\200\256\n'; "#,
            r#"printf 'ERR\033]0;PWNED\007\n' >&2; "#,
            r#"printf 'IN\033]52;c;ZXZpbA==\007\n' | gh pr comment "$(printf '1\033[2J\302\233')" --body-file - >/dev/null; "#,
            "echo k >> secret.txt"
        ),
        h = H
    );
    let glob = "g\u{1b}]52;c;ZXZpbA==\u{7}\u{9b}\u{202e}\u{200b}\u{7f}";
    let envelope = serde_json::json!({
        "task": "t\u{202e}\u{2066}\u{200b}\u{feff}x",
        "command": command,
        "intent": {
            "summary": H,
            "mode": "mutating",
            "expected_writes": ["**", glob],
            "forbidden_paths": ["secret.txt", glob],
            "reviewer_note": H,
        },
        "env": {"X_VALUE": H},
    });
    ws.write("envelope.json", &envelope.to_string());
    let mut c = ws.command();
    c.env(std::ffi::OsStr::from_bytes(BAD_NAME.as_bytes()), "x")
        .env("GH_TOKEN", "not-a-real-token")
        .args(["execute", "--json", "--file", "envelope.json"]);
    let r = to_run(c.output().unwrap());
    assert_eq!(
        r.json["state"], "awaiting_approval",
        "{:?}: {} {}",
        ws.who, r.stdout, r.stderr
    );
    assert_eq!(
        r.json["command"],
        command.as_str(),
        "--json shows it as given"
    );
    // The variable whose name is not an identifier is counted, never named;
    // the identifier is named.
    let stripped = r.stripped();
    assert!(
        stripped.contains(&"env:(1 variable whose name is not a shell identifier)".to_string()),
        "{stripped:?}"
    );
    assert!(
        stripped.contains(&"env:GH_TOKEN".to_string()),
        "{stripped:?}"
    );
    let record = std::fs::read(ws.state.join("runs").join(run_id(&r)).join("record.json")).unwrap();
    let text = String::from_utf8_lossy(&record);
    assert!(
        !text.contains("GH_TOKEN\\u001b") && !text.contains("ZXZpbA==\\u0007\\u001b[2J\""),
        "the record names the variable: {text}"
    );
    run_id(&r)
}

#[test]
fn a_hostile_local_rehearsal_reaches_no_terminal_raw() {
    for who in identities() {
        let ws = Ws::new(who);
        let id = hostile_rehearsal(&ws);
        // A second run to compare with: other output, other files.
        let other = ws.rehearse(
            &format!(
                "printf 'OTHER{}\\n'; printf 'z' > \"$(printf 'o\\033[2J')\"",
                "\\033]52;c;ZXZpbA==\\007"
            ),
            &["--expect-write", "**"],
        );
        let other = run_id(&other);
        // The execute that ran it, without --json.
        let mut c = ws.command();
        c.env(std::ffi::OsStr::from_bytes(BAD_NAME.as_bytes()), "x")
            .args(["execute", "--file", "envelope.json"]);
        let out = c.output().unwrap();
        assert_inert(&format!("{who:?}: execute"), &out);
        assert!(stdout(&out).contains(H_SHOWN), "{}", stdout(&out));
        for viewer in viewers(who) {
            let tag = |what: &str| format!("{who:?}'s run, {viewer:?} reading: {what}");
            let show = view(&ws, viewer, &["show", &id]);
            assert!(show.status.success(), "{show:?}");
            assert_inert(&tag("show"), &show);
            let text = stdout(&show);
            for want in [
                format!("command: : '{H_SHOWN}'; printf"),
                format!("intent: {H_SHOWN} (mutating)"),
                format!("note for the reviewer: {H_SHOWN}"),
                "expected writes: **, g⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧⟦U+009B⟧⟦U+202E⟧⟦U+200B⟧⟦DEL⟧".into(),
                "task t⟦U+202E⟧⟦U+2066⟧⟦U+200B⟧⟦U+FEFF⟧x".into(),
                "  + f⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧⟦ESC⟧[2J⟦CR⟧⟦BS⟧⟦DEL⟧⟦U+009B⟧⟦U+202E⟧.txt [file]".into(),
                "  + bad⟦0xFF⟧name [file]".into(),
                "  | OUT⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧⟦ESC⟧[2J⟦ESC⟧[Hdecision: promote⟦CR⟧⟦BS⟧⟦NUL⟧⟦DEL⟧⟦U+009B⟧⟦U+202E⟧".into(),
                "  | ERR⟦ESC⟧]0;PWNED⟦BEL⟧".into(),
                "  gh pr comment 1⟦ESC⟧[2J⟦U+009B⟧ --body-file - → exit 0".into(),
                format!("    | IN{OSC52_SHOWN}"),
                "env:(1 variable whose name is not a shell identifier)".into(),
            ] {
                assert!(text.contains(&want), "{}: no {want:?} in:\n{text}", tag("show"));
            }
            let mut outputs = vec![
                ("runs", view(&ws, viewer, &["runs"])),
                (
                    "runs --awaiting",
                    view(&ws, viewer, &["runs", "--awaiting"]),
                ),
                ("diff", view(&ws, viewer, &["diff", &id])),
                ("diff A B", view(&ws, viewer, &["diff", &id, &other])),
                ("journal verify", view(&ws, viewer, &["journal", "verify"])),
            ];
            outputs.push(("show --json (stderr)", {
                let mut o = view(&ws, viewer, &["show", "--json", &id]);
                o.stdout.clear();
                o
            }));
            for (what, out) in &outputs {
                assert_inert(&tag(what), out);
            }
            let runs = stdout(&outputs[0].1);
            assert!(runs.contains(&format!(": '{OSC52_SHOWN}")), "{runs}");
            let diff = stdout(&outputs[2].1);
            for want in [
                "+++ b/f⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧⟦ESC⟧[2J⟦CR⟧⟦BS⟧⟦DEL⟧⟦U+009B⟧⟦U+202E⟧.txt",
                "+x⟦ESC⟧]52;c;QQ==⟦BEL⟧",
                "+tab⟦TAB⟧here⟦ESC⟧[2J",
            ] {
                assert!(
                    diff.contains(want),
                    "{}: no {want:?} in:\n{diff}",
                    tag("diff")
                );
            }
            let cmp = stdout(&outputs[3].1);
            assert!(cmp.contains(&format!("-OUT{OSC52_SHOWN}")), "{cmp}");
            assert!(cmp.contains(&format!("+OTHER{OSC52_SHOWN}")), "{cmp}");
            assert!(
                stdout(&outputs[4].1).starts_with("journal OK"),
                "{}",
                stdout(&outputs[4].1)
            );
        }
    }
}

/// `H` with a NUL, for the fields a record can hold one in.
fn h0() -> String {
    format!("{H}\u{0}")
}

/// Append `H` (and a NUL) to every string of a record or receipt the
/// agent can edit, but those the store needs as they are: the run's id
/// (it names the run's directory), enums (and `also`), the hashes that
/// name kept content, and the live lane's settings (enums). What is left
/// still parses: the forged record passes every check the store makes.
fn taint(v: &mut Value, key: Option<&str>, also: &[&str]) {
    const KEEP: &[&str] = &[
        "run_id",
        "receipt_id",
        "state",
        "decision",
        "kind",
        "file_type",
        "level",
        "permission",
        "before",
        "after",
        "live",
        "how",
        "limits_hit",
        "rejected_because",
        "path_hex",
        "workspace_identity",
        // `rehearsal.output_order`'s streams (an enum, as `kind` is).
        "stream",
    ];
    if key.is_some_and(|k| KEEP.contains(&k) || also.contains(&k)) {
        return;
    }
    match v {
        Value::String(s) => s.push_str(&h0()),
        Value::Array(a) => a.iter_mut().for_each(|x| taint(x, key, also)),
        Value::Object(o) => o.iter_mut().for_each(|(k, x)| taint(x, Some(k), also)),
        _ => {}
    }
}

/// Write `v` over `path`, keeping the file (and its owner, the agent).
fn write_json(path: &std::path::Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec(v).unwrap()).unwrap();
}

/// Forge a run of `ws`'s state directory the way its owner can: every
/// string of the record tainted, and the fields a rehearsal left empty
/// filled (steps, error, a replay link, approvals, egress, a file that is
/// not UTF-8, a hard link, a special file, extended attributes). The run
/// id.
fn forge_run(ws: &Ws) -> String {
    ws.write("secret.txt", "k\n");
    let r = ws.rehearse(
        "mkdir -p out; printf 'x\\ty\\n' > out/a.txt; ln -s /etc/passwd out/link; \
         printf 'in\\n' | gh pr comment 1 --body-file -; echo > /dev/tcp/203.0.113.9/80; \
         echo k >> secret.txt; echo out; echo err >&2",
        &["--forbid", "secret.txt", "--expect-write", "out/**"],
    );
    assert_eq!(r.json["state"], "awaiting_approval", "{r:?}");
    let id = run_id(&r);
    let path = ws.state.join("runs").join(&id).join("record.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    // Fields the rehearsal left empty get a label; the taint follows.
    v["task"] = "task".into();
    v["steps"] = serde_json::json!(["one", "two"]);
    v["error"] = "error".into();
    v["replay_of"] = serde_json::json!({"baseline": "base", "novel": "novel"});
    v["intent"]["summary"] = "summary".into();
    v["intent"]["reviewer_note"] = "note".into();
    v["intent"]["network"] = serde_json::json!(["net"]);
    v["approvals"] = serde_json::json!([{
        "action": "approve", "by": {"uid": 4242, "gid": 4242, "via": "via"}, "at": "at",
        "note": "why", "overrode_block": true, "authenticated_by": "auth",
    }]);
    let reh = &mut v["rehearsal"];
    reh["egress"] = serde_json::json!([
        {"name": "up", "port": 443, "how": "proxy", "allowed": true, "bytes_out": 1, "bytes_in": 2},
        {"name": "dns", "port": null, "how": "dns", "allowed": false, "reason": "refused"},
    ]);
    reh["incomplete"] = serde_json::json!(["incomplete"]);
    let mut name = b"bad\xff".to_vec();
    name.extend_from_slice(H.as_bytes());
    let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
    reh["changes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "path": "bad", "path_hex": hex, "kind": "created", "file_type": "other",
            "before": null, "after": null, "special": "fifo", "hardlink_of": "other",
            "xattrs_changed": ["user.x"],
        }));
    taint(&mut v, None, &[]);
    // The stub's stdin as text (a NUL would make it "not text", shown by size).
    v["rehearsal"]["would_be_actions"][0]["stdin"]["head"] = format!("in\n{H}").into();
    write_json(&path, &v);
    id
}

/// A promoted run's receipt, forged the same way. The receipt id.
fn forge_receipt(ws: &Ws) -> String {
    let r = ws.rehearse("echo hi > a.txt", &["--expect-write", "a.txt"]);
    assert_eq!(r.decision(), "promote", "{r:?}");
    let out = ws
        .command()
        .args(["promote", "--json", &run_id(&r)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let promoted: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rid = promoted["receipt"]["receipt_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no receipt: {promoted}"))
        .to_string();
    let path = walkdir::WalkDir::new(&ws.state)
        .into_iter()
        .flatten()
        .find(|e| e.file_name() == "receipt.json" && e.path().to_string_lossy().contains(&rid))
        .unwrap_or_else(|| panic!("no receipt.json for {rid}"))
        .into_path();
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["calls_not_made"] = serde_json::json!(["call"]);
    v["rolled_back"] =
        serde_json::json!({"at": "at", "by": {"uid": 1, "gid": 1, "via": "via"}, "steps": 1});
    taint(&mut v, None, &["mode"]);
    write_json(&path, &v);
    rid
}

/// A journal line the owner appended: its "hash" is the attack, and its
/// 12th byte falls inside a character.
fn forge_journal_line(ws: &Ws) {
    use std::io::Write;
    let line = serde_json::json!({
        "hash": format!("\u{1b}]52;c;QQ=\u{202e}{H}"),
        "body": {"v": 1},
    });
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(ws.state.join("journal.jsonl"))
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

#[test]
fn a_forged_local_record_with_controls_in_every_field_reaches_no_terminal_raw() {
    for who in identities() {
        let ws = Ws::new(who);
        let id = forge_run(&ws);
        let honest = hostile_rehearsal(&ws);
        let rid = forge_receipt(&ws);
        // The forged record passes the store's checks: it is served.
        let out = view(&ws, who, &["show", "--json", &id]);
        assert!(
            out.status.success(),
            "{who:?}: the forged record is refused: {out:?}"
        );
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(json["command"].as_str().unwrap().ends_with(&h0()), "{json}");
        forge_journal_line(&ws);
        for viewer in viewers(who) {
            let tag = |what: &str| format!("{who:?}'s forged run, {viewer:?} reading: {what}");
            let outputs = [
                ("show", view(&ws, viewer, &["show", &id])),
                ("runs", view(&ws, viewer, &["runs"])),
                (
                    "runs --awaiting",
                    view(&ws, viewer, &["runs", "--awaiting"]),
                ),
                ("diff", view(&ws, viewer, &["diff", &id])),
                ("diff A B", view(&ws, viewer, &["diff", &id, &honest])),
                (
                    "receipt show",
                    view(&ws, viewer, &["receipt", "show", &rid]),
                ),
                ("journal verify", view(&ws, viewer, &["journal", "verify"])),
            ];
            for (what, out) in &outputs {
                assert_inert(&tag(what), out);
            }
            let show = stdout(&outputs[0].1);
            // Every field that carries the attack shows it, escaped: the
            // forged text did reach the screen, and inert.
            let shown_h0 = format!("{H_SHOWN}⟦NUL⟧");
            let x = |label: &str| format!("{label}{shown_h0}");
            for want in [
                format!("dryrun run {id} · task {}", x("task")),
                format!("  step 1: {}", x("one")),
                format!("intent: {} ({})", x("summary"), x("mutating")),
                format!("expected writes: {}", x("out/**")),
                format!("forbidden paths: {}", x("secret.txt")),
                format!("network asked for: {}", x("net")),
                format!("note for the reviewer: {}", x("note")),
                format!("(via {})", x("local")),
                format!("sandbox: overlay on {}", x(&ws.dir.display().to_string())),
                format!("  + {} [file]", x("out/a.txt")),
                format!("-> {}", x("/etc/passwd")),
                format!(
                    "  + bad⟦0xFF⟧{H_SHOWN} [other]  ({}; hard link of {}; xattrs: {})",
                    x("fifo"),
                    x("other"),
                    x("user.x")
                ),
                format!("  {}", x("secret.txt")),
                format!("network: {}", x("connect stream to 203.0.113.9:80")),
                format!("{}:443 (proxy, 1 B out, 2 B in)", x("up")),
                format!("{} (dns): {}", x("dns"), x("refused")),
                format!("  {} {}", x("gh"), x("pr")),
                format!(" → exit 0 ({}, rule ", x("stub")),
                format!("    | {H_SHOWN}"),
                format!("replay of: {} (novel calls: {})", x("base"), x("novel")),
                format!("incomplete: {}", x("incomplete")),
                format!("stripped: {}", x("masked:/etc/shadow")),
                format!(
                    "{} by uid 4242 at {} via {} (override of a blocked verdict): {}",
                    x("approve"),
                    x("at"),
                    x("auth"),
                    x("why")
                ),
            ] {
                assert!(
                    show.contains(&want),
                    "{}: no {want:?} in:\n{show}",
                    tag("show")
                );
            }
            // The output's last line (after its newline) is the attack, in
            // stdout and in stderr.
            assert_eq!(
                show.matches(&format!("  | {shown_h0}\n")).count(),
                2,
                "{}:\n{show}",
                tag("show")
            );
            let decision = show
                .lines()
                .find(|l| l.starts_with("decision: "))
                .unwrap_or("");
            assert!(decision.ends_with(&shown_h0), "{decision}");
            for (i, want) in [
                (1, "  mkdir -p out; printf".to_string()),
                (3, format!("+++ b/{}", x("out/a.txt"))),
                (3, "+x⟦TAB⟧y".to_string()),
                (4, format!("only in A: created bad⟦0xFF⟧{H_SHOWN}")),
                (5, format!("command: {}", x("echo hi > a.txt"))),
                (
                    5,
                    "calls answered by stubs in the rehearsal and NOT made live:".into(),
                ),
                (5, format!("  {}", x("call"))),
                (5, format!("rolled back: {} by uid 1", x("at"))),
                (6, "journal BROKEN at line".into()),
                (6, "(stored ⟦ESC⟧]52;c;QQ=⟦U+202E⟧⟦ESC⟧, content".into()),
            ] {
                let text = stdout(&outputs[i].1);
                assert!(
                    text.contains(&want),
                    "{}: no {want:?} in:\n{text}",
                    tag(outputs[i].0)
                );
            }
            assert_eq!(outputs[6].1.status.code(), Some(5), "{:?}", outputs[6].1);
        }
    }
}

/// Escape sequences in a tmux capture taken with `-e` other than SGR
/// (`ESC [ params m`, tmux's own drawing of colours and attributes).
fn non_sgr_sequences(capture: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in capture.match_indices('\u{1b}') {
        let rest = &capture[i + 1..];
        let sgr = rest.strip_prefix('[').is_some_and(|p| {
            let end = p
                .find(|c: char| !(c.is_ascii_digit() || c == ';' || c == ':'))
                .unwrap_or(p.len());
            p[end..].starts_with('m')
        });
        if !sgr {
            found.push(format!("{:?}", &rest[..rest.len().min(20)]));
        }
    }
    found
}

/// The shell line that starts `dryrun review` on `ws`'s state directory as
/// `viewer`; it stays on screen after it exits.
fn review_command(ws: &Ws, viewer: Who) -> String {
    let run_as = match viewer {
        Who::Root => String::new(),
        Who::User => {
            let (u, g) = test_user();
            format!("setpriv --reuid={u} --regid={g} --clear-groups -- ")
        }
    };
    format!(
        "exec {run_as}env -i PATH=/usr/bin:/bin TERM=tmux-256color DRYRUN_LOCAL=1 DRYRUN_STATE_DIR={} {} review",
        ws.state.display(),
        bin().display()
    )
}

#[test]
fn the_review_screen_draws_hostile_and_forged_records_without_obeying_them() {
    for who in identities() {
        let ws = Ws::new(who);
        let honest = hostile_rehearsal(&ws);
        let forged = forge_run(&ws);
        for viewer in viewers(who) {
            let tag = format!("{who:?}'s runs, {viewer:?} reviewing");
            let t = Tmux::start(
                &format!("{who:?}-{viewer:?}").to_lowercase(),
                &review_command(&ws, viewer),
            );
            let mut seen = String::new();
            for id in [&honest, &forged] {
                let mut screens = vec![t.select(id)];
                // Every part of the evidence: the tree expanded, scrolled
                // to the end and back.
                for k in ["e", "PgDn", "PgDn", "PgDn", "PgDn", "PgUp", "e"] {
                    t.keys(&[k]);
                    screens.push(t.settled());
                    let drawn = t.screen_with_escapes();
                    let found = non_sgr_sequences(&drawn);
                    assert!(
                        found.is_empty(),
                        "{tag}: sequences reached the pane: {found:?}\n{drawn}"
                    );
                }
                for s in &screens {
                    let found = raw_controls(s.as_bytes());
                    assert!(
                        found.is_empty(),
                        "{tag}: raw on the screen: {found:#?}\n{s}"
                    );
                    // The fake decision is drawn only where its escaped
                    // carriage return stands before it.
                    for (i, _) in s.match_indices("decision: promote") {
                        assert!(
                            s[..i].ends_with("⟦CR⟧"),
                            "{tag}: the fake decision stands on its own:\n{s}"
                        );
                    }
                    seen.push_str(s);
                }
            }
            for want in [
                OSC52_SHOWN,
                "f⟦ESC⟧]52;c;ZXZpbA==⟦BEL⟧⟦ESC⟧[2J⟦CR⟧⟦BS⟧⟦DEL⟧⟦U+009B⟧⟦U+202E⟧.txt",
                "bad⟦0xFF⟧name",
                "+tab⟦TAB⟧here⟦ESC⟧[2J",
                "env:(1 variable whose name is not a shell identifier)",
                "⟦U+202E⟧⟦U+2066⟧⟦U+200B⟧⟦U+FEFF⟧⟦NUL⟧",
            ] {
                assert!(
                    seen.contains(want),
                    "{tag}: {want:?} was never drawn:\n{seen}"
                );
            }
            let title = t.title();
            assert!(
                !title.contains("PWNED"),
                "{tag}: the pane's title was set: {title}"
            );
            let buffer = t.buffer();
            assert!(
                !buffer.contains("evil"),
                "{tag}: the clipboard was written: {buffer}"
            );
            t.keys(&["q"]);
        }
    }
}

#[test]
fn a_command_and_a_diff_are_shown_as_they_will_run_and_land() {
    // What bash runs: `a\b` printed, a real tab into tab.txt, a backslash
    // and a `t` into lit.txt.
    let command = r"printf 'a\\b\n'; printf 'x\ty\n' > tab.txt; printf 'x\\ty\n' > lit.txt";
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse(command, &["--expect-write", "*.txt"]);
        assert_eq!(r.out(), "a\\b\n", "{who:?}: {r:?}");
        let id = run_id(&r);
        let show = stdout(&view(&ws, who, &["show", &id]));
        // Exactly as written: no backslash doubled, nothing added.
        assert!(
            show.lines().any(|l| l == format!("command: {command}")),
            "{who:?}:\n{show}"
        );
        assert!(show.lines().any(|l| l == r"  | a\b"), "{who:?}:\n{show}");
        let runs = stdout(&view(&ws, who, &["runs"]));
        assert!(
            runs.contains(r"printf 'a\\b\n'; printf 'x\ty\n' > tab.txt;"),
            "{who:?}:\n{runs}"
        );
        // A tab in a file is the notation's; a backslash-t is itself.
        let diff = stdout(&view(&ws, who, &["diff", &id]));
        let lines: Vec<&str> = diff.lines().collect();
        assert!(lines.contains(&"+x⟦TAB⟧y"), "{who:?}:\n{diff}");
        assert!(lines.contains(&r"+x\ty"), "{who:?}:\n{diff}");
        assert_ne!("+x⟦TAB⟧y", r"+x\ty");
    }
}
