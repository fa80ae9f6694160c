mod common;
use common::*;

// Evidence: what a rehearsal reports it changed. Every
// test rehearses a real command over a real workspace, as root (shifted ids)
// and as an ordinary user, asserts the exact change records (kinds, BLAKE3
// hashes computed here, modes, sizes, link targets) and the verdict they lead
// to, and proves the real workspace was not touched.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// BLAKE3 hex of some bytes, as the run record spells hashes.
fn h(bytes: impl AsRef<[u8]>) -> String {
    blake3::hash(bytes.as_ref()).to_hex().to_string()
}

/// Write a workspace file with an explicit mode (the evidence compares modes).
fn put(ws: &Ws, rel: &str, content: &str, mode: u32) {
    let p = ws.write(rel, content);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `(path, kind, file_type)` of every change, sorted.
fn summary(r: &Run) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = r
        .changes()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or("").to_string(),
                c["kind"].as_str().unwrap_or("").to_string(),
                c["file_type"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Assert the exact set of changes, as `(path, kind, file_type)`.
fn assert_changes(who: Who, r: &Run, expected: &[(&str, &str, &str)]) {
    let mut want: Vec<(String, String, String)> = expected
        .iter()
        .map(|(p, k, t)| (p.to_string(), k.to_string(), t.to_string()))
        .collect();
    want.sort();
    assert_eq!(summary(r), want, "{who:?}: changes were {:#?}", r.changes());
    for c in r.changes() {
        // The record format: these keys are always present (before/after may be null).
        for k in ["path", "kind", "file_type", "before", "after"] {
            assert!(c.get(k).is_some(), "{who:?}: change without {k}: {c}");
        }
    }
}

/// The change at `path`, or a panic that shows every change.
fn change(who: Who, r: &Run, path: &str) -> Value {
    r.change(path).unwrap_or_else(|| {
        panic!(
            "{who:?}: no change for {path:?}; changes: {:#?}; record: {}",
            r.changes(),
            r.stdout
        )
    })
}

/// Assert each listed field of a change. `null` in `expected` also accepts an
/// absent field.
fn assert_fields(who: Who, c: &Value, expected: &Value) {
    for (k, v) in expected.as_object().unwrap() {
        assert_eq!(&c[k.as_str()], v, "{who:?}: field {k} of {c}");
    }
}

fn surprise_paths(r: &Run) -> Vec<String> {
    strings(&r.json["verdict"]["surprise_paths"])
}

fn forbidden_touched(r: &Run) -> Vec<String> {
    strings(&r.json["verdict"]["forbidden_paths_touched"])
}

/// A rehearsal that ran to completion: a record in state `rehearsed`, the
/// command exited 0, and the CLI's exit code matches the decision.
fn assert_ran(who: Who, r: &Run, decision: &str) {
    assert_eq!(r.json["schema"], "dryrun.run/v1", "{who:?}: {r:?}");
    assert_eq!(
        r.exit_code(),
        Some(0),
        "{who:?}: the command failed: {}",
        r.err()
    );
    assert_eq!(r.decision(), decision, "{who:?}: reasons {:?}", r.reasons());
    let code = match decision {
        "promote" => 0,
        "needs_approval" => 3,
        _ => 4,
    };
    assert_eq!(
        r.code, code,
        "{who:?}: exit code of dryrun execute for a {decision} run"
    );
}

/// `dryrun ARGS...` in this workspace, raw output.
fn dryrun(ws: &Ws, args: &[&str]) -> std::process::Output {
    ws.command().args(args).output().expect("dryrun runs")
}

#[test]
fn created_modified_and_deleted_files_carry_exact_hashes_and_sizes() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "hello\n", 0o644);
        put(&ws, "gone.txt", "bye\n", 0o644);
        put(&ws, "keep.txt", "keep\n", 0o644);
        let r = ws.rehearse_untouched(
            "umask 022; printf 'brand new\\n' > new.txt; printf 'hello world\\n' > a.txt; rm gone.txt; cat keep.txt",
            &["--expect-write", "*.txt"],
        );
        assert_ran(who, &r, "promote");
        assert_eq!(r.out(), "keep\n", "{who:?}");
        assert_changes(
            who,
            &r,
            &[
                ("a.txt", "modified", "file"),
                ("gone.txt", "deleted", "file"),
                ("new.txt", "created", "file"),
            ],
        );
        assert_fields(
            who,
            &change(who, &r, "a.txt"),
            &serde_json::json!({
                "before": h("hello\n"), "after": h("hello world\n"), "size_after": 12,
                "mode_before": 0o644, "mode_after": 0o644,
            }),
        );
        assert_fields(
            who,
            &change(who, &r, "new.txt"),
            &serde_json::json!({
                "before": null, "after": h("brand new\n"), "size_after": 10,
                "mode_before": null, "mode_after": 0o644,
            }),
        );
        let gone = change(who, &r, "gone.txt");
        assert_fields(
            who,
            &gone,
            &serde_json::json!({"before": h("bye\n"), "after": null, "mode_before": 0o644, "size_after": null}),
        );
        assert!(
            gone["after"].is_null() && gone.get("after").is_some(),
            "{who:?}: {gone}"
        );
        assert!(
            r.change("keep.txt").is_none(),
            "{who:?}: a file that was only read is not a change"
        );
        assert!(
            r.notes()
                .iter()
                .any(|n| n == "3 change(s), all within the declared intent"),
            "{who:?}: {:?}",
            r.notes()
        );
    }
}

#[test]
fn a_new_symlink_is_recorded_as_a_link_and_an_escaping_one_blocks() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "a\n", 0o644);
        let r = ws.rehearse_untouched("ln -s /etc/passwd leak", &["--expect-write", "**"]);
        assert_ran(who, &r, "blocked");
        assert_changes(who, &r, &[("leak", "created", "symlink")]);
        let c = change(who, &r, "leak");
        assert_fields(
            who,
            &c,
            &serde_json::json!({
                "before": null,
                // The hash of the link's target string, never of what it points to.
                "after": h("/etc/passwd"),
                "symlink_target": "/etc/passwd",
                "symlink_escapes": true,
                "size_after": null,
            }),
        );
        if let Ok(passwd) = std::fs::read("/etc/passwd") {
            assert_ne!(
                c["after"],
                Value::String(h(passwd)),
                "{who:?}: the link was followed"
            );
        }
        assert!(
            r.reasons().iter().any(|x| x
                == "[evidence.symlink_escape] leak: a symlink pointing outside the workspace (/etc/passwd) is never promoted"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert!(
            surprise_paths(&r).is_empty(),
            "{who:?}: {:?}",
            surprise_paths(&r)
        );
    }
}

#[test]
fn symlinks_that_stay_inside_the_workspace_do_not_escape() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "a\n", 0o644);
        let abs = std::fs::canonicalize(&ws.dir)
            .unwrap()
            .join("a.txt")
            .display()
            .to_string();
        let cmd = format!(
            "ln -s a.txt l && mkdir sub && ln -s ../a.txt sub/ok && ln -s '{abs}' abs && ln -s ../../x sub/up"
        );
        let r = ws.rehearse_untouched(&cmd, &["--expect-write", "**"]);
        assert_eq!(r.exit_code(), Some(0), "{who:?}: {}", r.err());
        assert_changes(
            who,
            &r,
            &[
                ("abs", "created", "symlink"),
                ("l", "created", "symlink"),
                ("sub", "created", "dir"),
                ("sub/ok", "created", "symlink"),
                ("sub/up", "created", "symlink"),
            ],
        );
        for (path, target) in [
            ("l", "a.txt"),
            ("sub/ok", "../a.txt"),
            ("abs", abs.as_str()),
        ] {
            let c = change(who, &r, path);
            assert_fields(
                who,
                &c,
                &serde_json::json!({"before": null, "after": h(target), "symlink_target": target}),
            );
            assert_ne!(
                c["symlink_escapes"], true,
                "{who:?}: {path} stays inside: {c}"
            );
        }
        // `..` climbing above the workspace root escapes.
        let up = change(who, &r, "sub/up");
        assert_fields(
            who,
            &up,
            &serde_json::json!({"symlink_target": "../../x", "symlink_escapes": true}),
        );
        assert_eq!(r.decision(), "blocked", "{who:?}");
        let rs = r.reasons();
        assert_eq!(
            rs.iter()
                .filter(|x| x.starts_with("[evidence.symlink_escape]"))
                .count(),
            1,
            "{who:?}: only sub/up escapes: {rs:?}"
        );
        assert!(
            rs.iter()
                .any(|x| x.starts_with("[evidence.symlink_escape] sub/up: ")),
            "{who:?}: {rs:?}"
        );

        // Only the in-workspace link: promoted.
        let ws = Ws::new(who);
        put(&ws, "a.txt", "a\n", 0o644);
        let r = ws.rehearse_untouched("ln -s a.txt l", &["--expect-write", "**"]);
        assert_ran(who, &r, "promote");
        assert_changes(who, &r, &[("l", "created", "symlink")]);
        let l = change(who, &r, "l");
        assert!(
            l.get("symlink_escapes").is_none_or(|v| v == false),
            "{who:?}: {l}"
        );
    }
}

#[test]
fn a_retargeted_workspace_symlink_is_modified() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "a\n", 0o644);
        put(&ws, "b.txt", "b\n", 0o644);
        std::os::unix::fs::symlink("a.txt", ws.dir.join("link")).unwrap();
        ws.chown_all();
        let r = ws.rehearse_untouched("ln -sfn b.txt link", &["--expect-write", "link"]);
        assert_ran(who, &r, "promote");
        assert_changes(who, &r, &[("link", "modified", "symlink")]);
        assert_fields(
            who,
            &change(who, &r, "link"),
            &serde_json::json!({"before": h("a.txt"), "after": h("b.txt"), "symlink_target": "b.txt"}),
        );
        assert_ne!(change(who, &r, "link")["symlink_escapes"], true, "{who:?}");
    }
}

/// Names with a newline, an ANSI escape, a bidi override and invalid UTF-8.
const HOSTILE_CMD: &str =
    r"touch $'new\nline' $'\x1b[31mred' $'evil\xe2\x80\xaetxt.sh' $'bad\xffname'";

#[test]
fn hostile_names_are_exact_in_json() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched(HOSTILE_CMD, &["--expect-write", "**"]);
        assert_ran(who, &r, "promote");
        let empty = h("");
        for name in ["new\nline", "\x1b[31mred", "evil\u{202e}txt.sh"] {
            let c = change(who, &r, name);
            assert_fields(
                who,
                &c,
                &serde_json::json!({"kind": "created", "file_type": "file", "after": empty, "size_after": 0, "path_hex": null}),
            );
        }
        let bad: Vec<Value> = r
            .changes()
            .into_iter()
            .filter(|c| c.get("path_hex").is_some())
            .collect();
        assert_eq!(bad.len(), 1, "{who:?}: {:#?}", r.changes());
        let raw: &[u8] = b"bad\xffname";
        let hexed: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        assert_fields(
            who,
            &bad[0],
            &serde_json::json!({
                "path_hex": hexed, "path": "bad\u{fffd}name", "kind": "created", "file_type": "file", "after": empty,
            }),
        );
        assert_eq!(r.changes().len(), 4, "{who:?}: {:#?}", r.changes());
    }
}

fn assert_human_output_is_inert(who: Who, out: &[u8], what: &str) {
    assert!(!out.contains(&0x1b), "{who:?}: raw ESC in the {what}");
    assert!(
        !out.contains(&0xff),
        "{who:?}: raw invalid byte in the {what}"
    );
    let text = String::from_utf8(out.to_vec())
        .unwrap_or_else(|e| panic!("{who:?}: the {what} is not UTF-8: {e}"));
    assert!(
        !text.contains('\u{202e}'),
        "{who:?}: raw U+202E in the {what}"
    );
    for line in text.lines() {
        assert!(
            !line.starts_with("line"),
            "{who:?}: a path was split across lines in the {what}:\n{text}"
        );
    }
    for shown in [
        "new⟦LF⟧line",
        "⟦ESC⟧[31mred",
        "evil⟦U+202E⟧txt.sh",
        "bad⟦0xFF⟧name",
    ] {
        assert!(
            text.lines().any(|l| l == format!("  + {shown} [file]")),
            "{who:?}: no change line for {shown} in the {what}:\n{text}"
        );
    }
    // Also in the surprise path list (the non-UTF-8 name has its own test).
    for shown in ["new⟦LF⟧line", "⟦ESC⟧[31mred", "evil⟦U+202E⟧txt.sh"] {
        assert!(
            text.lines().any(|l| l == format!("  {shown}")),
            "{who:?}: {shown} not in the surprise list:\n{text}"
        );
    }
}

/// Rehearse the hostile names without `--json` (and without expected writes,
/// so they also land in surprise paths and reasons): the evidence block.
fn hostile_human_block(who: Who) -> String {
    let ws = Ws::new(who);
    let before = ws.snapshot();
    let out = dryrun(&ws, &["execute", "--command", HOSTILE_CMD]);
    assert_eq!(before, ws.snapshot(), "{who:?}: the real workspace changed");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{who:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{who:?}: not UTF-8: {e}"))
}

#[test]
fn a_non_utf8_name_keeps_its_bytes_in_the_surprise_list() {
    // The change line shows `bad⟦0xFF⟧name`; the surprise list must show the
    // same name the same way, not a lossy `bad\u{fffd}name` that any other
    // invalid byte (or a real U+FFFD) would render identically.
    for who in identities() {
        let text = hostile_human_block(who);
        assert!(
            text.lines().any(|l| l == "  bad⟦0xFF⟧name"),
            "{who:?}: the surprise list lost the name's bytes:\n{text}"
        );
        assert!(
            !text.contains('\u{fffd}'),
            "{who:?}: a lossy U+FFFD in:\n{text}"
        );
    }
}

#[test]
fn reasons_in_human_output_show_hostile_names_escaped_once() {
    // A path reads the same in the change list and in the reasons: escaping
    // twice turns `new⟦LF⟧line` into `new⟦U+27E6⟧LF⟧line`, which by the
    // same notation names a different file (one with a literal bracket).
    for who in identities() {
        let text = hostile_human_block(who);
        for shown in [
            "new⟦LF⟧line",
            "⟦ESC⟧[31mred",
            "evil⟦U+202E⟧txt.sh",
            "bad⟦0xFF⟧name",
        ] {
            let want =
                format!("  [intent.expected_writes] created {shown} but intent expected no writes");
            assert!(
                text.lines().any(|l| l == want),
                "{who:?}: no reason line {want:?} in:\n{text}"
            );
        }
        let decision = text
            .lines()
            .find(|l| l.starts_with("decision: "))
            .unwrap_or("");
        assert_eq!(
            decision,
            "decision: blocked \u{2014} created ⟦ESC⟧[31mred but intent expected no writes",
            "{who:?}:\n{text}"
        );
    }
}

#[test]
fn hostile_names_are_escaped_in_human_output() {
    for who in identities() {
        let ws = Ws::new(who);
        let before = ws.snapshot();
        // No expected writes: the names also land in surprise paths and reasons.
        let out = dryrun(&ws, &["execute", "--command", HOSTILE_CMD]);
        assert_eq!(before, ws.snapshot(), "{who:?}: the real workspace changed");
        assert_eq!(
            out.status.code(),
            Some(4),
            "{who:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_human_output_is_inert(who, &out.stdout, "evidence block");
        assert!(
            !out.stderr.contains(&0x1b) && !out.stderr.contains(&0xff),
            "{who:?}: raw bytes on stderr"
        );

        // The stored run renders the same way.
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let id = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("dryrun run "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("{who:?}: no run id in:\n{text}"))
            .to_string();
        let shown = dryrun(&ws, &["show", &id]);
        assert_eq!(
            shown.status.code(),
            Some(0),
            "{who:?}: {}",
            String::from_utf8_lossy(&shown.stderr)
        );
        assert_human_output_is_inert(who, &shown.stdout, "`dryrun show` output");
        let diff = dryrun(&ws, &["diff", &id]);
        assert_eq!(
            diff.status.code(),
            Some(0),
            "{who:?}: {}",
            String::from_utf8_lossy(&diff.stderr)
        );
        assert!(
            !diff.stdout.contains(&0x1b) && !diff.stdout.contains(&0xff),
            "{who:?}: raw bytes in `dryrun diff`"
        );
        assert!(
            !String::from_utf8_lossy(&diff.stdout).contains('\u{202e}'),
            "{who:?}: raw U+202E in `dryrun diff`"
        );
    }
}

#[test]
fn hard_links_name_each_other() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "linked\n", 0o644);
        let r = ws.rehearse_untouched("ln a.txt b.txt", &["--expect-write", "b.txt"]);
        assert_ran(who, &r, "promote");
        let b = change(who, &r, "b.txt");
        assert_fields(
            who,
            &b,
            &serde_json::json!({"kind": "created", "file_type": "file", "after": h("linked\n"), "size_after": 7}),
        );
        let a = r.change("a.txt");
        let linked =
            b["hardlink_of"] == "a.txt" || a.as_ref().is_some_and(|a| a["hardlink_of"] == "b.txt");
        assert!(
            linked,
            "{who:?}: neither names the other: {:#?}",
            r.changes()
        );
        // The copied-up original is not a write.
        if let Some(a) = &a {
            assert_fields(
                who,
                a,
                &serde_json::json!({"kind": "identical", "before": h("linked\n"), "after": h("linked\n")}),
            );
        }
        assert!(
            r.notes().iter().any(|n| n.contains("hard link")),
            "{who:?}: the verdict notes the hard link: {:?}",
            r.notes()
        );

        // Both names new.
        let r = ws.rehearse_untouched(
            "echo q > c.txt && ln c.txt d.txt",
            &["--expect-write", "*.txt"],
        );
        assert_ran(who, &r, "promote");
        assert_changes(
            who,
            &r,
            &[("c.txt", "created", "file"), ("d.txt", "created", "file")],
        );
        let (c, d) = (change(who, &r, "c.txt"), change(who, &r, "d.txt"));
        assert!(
            d["hardlink_of"] == "c.txt" || c["hardlink_of"] == "d.txt",
            "{who:?}: {:#?}",
            r.changes()
        );
        assert_eq!(c["after"], Value::String(h("q\n")), "{who:?}");
        assert_eq!(d["after"], Value::String(h("q\n")), "{who:?}");
    }
}

#[test]
fn a_fifo_is_a_special_file_and_blocks() {
    for who in identities() {
        let ws = Ws::new(who);
        let r = ws.rehearse_untouched("mkfifo p", &["--expect-write", "**"]);
        assert_ran(who, &r, "blocked");
        assert_changes(who, &r, &[("p", "created", "other")]);
        assert_fields(
            who,
            &change(who, &r, "p"),
            &serde_json::json!({"special": "fifo", "before": null, "after": null}),
        );
        assert!(
            r.reasons()
                .iter()
                .any(|x| x == "[evidence.special_file] p: a fifo is never promoted"),
            "{who:?}: {:?}",
            r.reasons()
        );
    }
}

#[test]
fn chmod_alone_is_a_metadata_change() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "content\n", 0o644);
        let r = ws.rehearse_untouched("chmod 600 a.txt", &["--expect-write", "a.txt"]);
        assert_ran(who, &r, "promote");
        assert_changes(who, &r, &[("a.txt", "metadata", "file")]);
        assert_fields(
            who,
            &change(who, &r, "a.txt"),
            &serde_json::json!({
                "mode_before": 0o644, "mode_after": 0o600,
                "before": h("content\n"), "after": h("content\n"), "size_after": 8,
            }),
        );

        // Unexpected, it is still a write; the human block shows the modes.
        let r = ws.rehearse_untouched("chmod 600 a.txt", &[]);
        assert_ran(who, &r, "blocked");
        assert_eq!(surprise_paths(&r), vec!["a.txt"], "{who:?}");
        assert!(
            r.reasons().iter().any(|x| x == "[intent.expected_writes] changed metadata of a.txt but intent expected no writes"),
            "{who:?}: {:?}",
            r.reasons()
        );
        let id = r.json["run_id"].as_str().unwrap().to_string();
        let shown = dryrun(&ws, &["show", &id]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(
            text.lines()
                .any(|l| l == "  ~ a.txt [file]  (mode 644 -> 600)"),
            "{who:?}: {text}"
        );
    }
}

#[test]
fn same_size_change_with_a_backdated_mtime_is_modified() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "aaaa", 0o644);
        // The real file already carries the old date: size and mtime match.
        let st = Command::new("touch")
            .args(["-d", "2000-01-01"])
            .arg(ws.dir.join("a.txt"))
            .status()
            .unwrap();
        assert!(st.success());
        let r = ws.rehearse_untouched(
            "printf bbbb > a.txt && touch -d 2000-01-01 a.txt",
            &["--expect-write", "a.txt"],
        );
        assert_ran(who, &r, "promote");
        assert_changes(who, &r, &[("a.txt", "modified", "file")]);
        assert_fields(
            who,
            &change(who, &r, "a.txt"),
            &serde_json::json!({"before": h("aaaa"), "after": h("bbbb"), "size_after": 4}),
        );
    }
}

#[test]
fn identical_rewrites_are_reported_but_are_not_writes() {
    for who in identities() {
        for cmd in [
            "cp a.txt /tmp/x && cp /tmp/x a.txt",
            "touch a.txt",
            "cat a.txt > /tmp/y && cat /tmp/y > a.txt",
        ] {
            let ws = Ws::new(who);
            put(&ws, "a.txt", "same\n", 0o644);
            // A mutating run that expects no writes at all.
            let r = ws.rehearse_untouched(cmd, &[]);
            assert_ran(who, &r, "promote");
            assert_changes(who, &r, &[("a.txt", "identical", "file")]);
            assert_fields(
                who,
                &change(who, &r, "a.txt"),
                &serde_json::json!({
                    "before": h("same\n"), "after": h("same\n"), "mode_before": 0o644, "mode_after": 0o644,
                }),
            );
            assert!(surprise_paths(&r).is_empty(), "{who:?} {cmd}");
            assert!(
                r.notes().iter().any(|n| n.contains("identical content")),
                "{who:?} {cmd}: {:?}",
                r.notes()
            );
            // Nor in a read-only run.
            let r = ws.rehearse_untouched(cmd, &["--read-only"]);
            assert_ran(who, &r, "promote");
        }
    }
}

#[test]
fn recursive_delete_lists_every_deleted_entry() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "dir/a.txt", "A\n", 0o644);
        put(&ws, "dir/sub/b.txt", "B\n", 0o644);
        put(&ws, "other.txt", "o\n", 0o644);
        let r = ws.rehearse_untouched("rm -r dir", &["--expect-write", "dir/**"]);
        assert_ran(who, &r, "promote");
        assert_changes(
            who,
            &r,
            &[
                ("dir", "deleted", "dir"),
                ("dir/a.txt", "deleted", "file"),
                ("dir/sub", "deleted", "dir"),
                ("dir/sub/b.txt", "deleted", "file"),
            ],
        );
        assert_fields(
            who,
            &change(who, &r, "dir/a.txt"),
            &serde_json::json!({"before": h("A\n"), "after": null}),
        );
        assert_fields(
            who,
            &change(who, &r, "dir/sub/b.txt"),
            &serde_json::json!({"before": h("B\n"), "after": null}),
        );
        assert_fields(
            who,
            &change(who, &r, "dir"),
            &serde_json::json!({"before": null, "after": null}),
        );
    }
}

#[test]
fn moving_a_directory_is_a_delete_plus_a_create() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "dir/a.txt", "A\n", 0o644);
        put(&ws, "dir/sub/b.txt", "B\n", 0o644);
        let r = ws.rehearse_untouched(
            "mv dir dir2",
            &["--expect-write", "dir/**", "--expect-write", "dir2/**"],
        );
        assert_ran(who, &r, "promote");
        assert_changes(
            who,
            &r,
            &[
                ("dir", "deleted", "dir"),
                ("dir/a.txt", "deleted", "file"),
                ("dir/sub", "deleted", "dir"),
                ("dir/sub/b.txt", "deleted", "file"),
                ("dir2", "created", "dir"),
                ("dir2/a.txt", "created", "file"),
                ("dir2/sub", "created", "dir"),
                ("dir2/sub/b.txt", "created", "file"),
            ],
        );
        assert_fields(
            who,
            &change(who, &r, "dir/a.txt"),
            &serde_json::json!({"before": h("A\n"), "after": null}),
        );
        assert_fields(
            who,
            &change(who, &r, "dir2/a.txt"),
            &serde_json::json!({"before": null, "after": h("A\n"), "size_after": 2}),
        );
        assert_fields(
            who,
            &change(who, &r, "dir2/sub/b.txt"),
            &serde_json::json!({"before": null, "after": h("B\n"), "size_after": 2}),
        );
    }
}

/// Extended attributes are evidence (a metadata change), and a change the
/// live lane could never write as rehearsed (their values are not kept):
/// the verdict blocks it with the planner's own words.
#[test]
fn extended_attributes_are_metadata_changes() {
    // /usr/bin/python3 sets the xattrs inside the sandbox.
    if !require_tool("/usr/bin/python3", "python3") {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "x\n", 0o644);
        let r = ws.rehearse_untouched(
            "python3 -c \"import os; os.setxattr('a.txt', 'user.test', b'1')\"",
            &["--expect-write", "a.txt"],
        );
        assert_ran(who, &r, "blocked");
        assert_changes(who, &r, &[("a.txt", "metadata", "file")]);
        assert!(
            r.reasons().iter().any(|x| x
                == "[evidence.xattrs] a.txt: extended attribute changes (user.test) cannot be promoted (their values are not kept)"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert_fields(
            who,
            &change(who, &r, "a.txt"),
            &serde_json::json!({
                "xattrs_changed": ["user.test"], "before": h("x\n"), "after": h("x\n"),
                "mode_before": 0o644, "mode_after": 0o644,
            }),
        );

        // An attribute the real file has, removed; another added.
        let ws = Ws::new(who);
        put(&ws, "b.txt", "y\n", 0o644);
        let p = ws.dir.join("b.txt").display().to_string();
        let st = Command::new("/usr/bin/python3")
            .args([
                "-c",
                &format!("import os; os.setxattr({p:?}, 'user.keep', b'v')"),
            ])
            .status()
            .unwrap();
        if !st.success() {
            eprintln!("SKIP removal half: the host filesystem does not take user xattrs");
            continue;
        }
        let r = ws.rehearse_untouched(
            "python3 -c \"import os; os.removexattr('b.txt', 'user.keep'); os.setxattr('b.txt', 'user.new', b'2')\"",
            &["--expect-write", "b.txt"],
        );
        assert_ran(who, &r, "blocked");
        assert_changes(who, &r, &[("b.txt", "metadata", "file")]);
        assert_fields(
            who,
            &change(who, &r, "b.txt"),
            &serde_json::json!({"xattrs_changed": ["user.keep", "user.new"], "before": h("y\n"), "after": h("y\n")}),
        );
    }
}

/// The workspace root's own attributes are there inside the sandbox as they
/// are outside, and are no change; a change the command makes to them is
/// recorded as a metadata change of `.` (both were wrong before: the root's
/// attributes were missing inside, reported as removed on every run, and a
/// change to them was never seen).
#[test]
fn the_workspace_roots_attributes_are_kept_and_a_change_to_them_is_recorded() {
    for who in identities() {
        let ws = Ws::new(who);
        let root = ws.dir.display().to_string();
        let st = Command::new("/usr/bin/python3")
            .args([
                "-c",
                &format!("import os; os.setxattr({root:?}, 'user.note', b'hi')"),
            ])
            .status()
            .unwrap();
        assert!(st.success(), "the host file system takes user xattrs");
        let r = ws.rehearse_untouched(
            "python3 -c \"import os, sys; sys.stdout.write(os.getxattr('.', 'user.note').decode())\"",
            &[],
        );
        assert_ran(who, &r, "promote");
        assert_eq!(r.out(), "hi", "{who:?}: the root's attribute inside");
        assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());

        let r = ws.rehearse_untouched(
            "python3 -c \"import os; os.setxattr('.', 'user.note', b'changed'); os.setxattr('.', 'user.new', b'1')\"",
            &[],
        );
        assert_changes(who, &r, &[(".", "metadata", "dir")]);
        assert_eq!(
            change(who, &r, ".")["xattrs_changed"],
            serde_json::json!(["user.new", "user.note"]),
            "{who:?}"
        );
    }
}

#[test]
fn any_write_in_a_read_only_run_blocks() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "a\n", 0o644);
        let r = ws.rehearse_untouched("echo x > new.txt", &["--read-only"]);
        assert_ran(who, &r, "blocked");
        assert_changes(who, &r, &[("new.txt", "created", "file")]);
        assert_eq!(surprise_paths(&r), vec!["new.txt"], "{who:?}");
        assert!(
            r.reasons()
                .iter()
                .any(|x| x
                    == "[intent.read_only] created new.txt but the run was declared read_only"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert_eq!(r.json["intent"]["mode"], "read_only", "{who:?}");

        for cmd in [
            "echo more >> a.txt",
            "rm a.txt",
            "chmod 600 a.txt",
            "mkdir d",
        ] {
            let r = ws.rehearse_untouched(cmd, &["--read-only"]);
            assert_ran(who, &r, "blocked");
            assert!(
                r.reasons()
                    .iter()
                    .any(|x| x.starts_with("[intent.read_only] ")),
                "{who:?} {cmd}: {:?}",
                r.reasons()
            );
        }

        // Reading is fine.
        let r = ws.rehearse_untouched("cat a.txt; ls -la", &["--read-only"]);
        assert_ran(who, &r, "promote");
        assert!(r.changes().is_empty(), "{who:?}: {:?}", r.changes());
    }
}

#[test]
fn forbidden_paths_block_and_are_checked_before_expected_writes() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "secrets/old", "s\n", 0o644);
        let r = ws.rehearse_untouched("echo x > secrets/x", &["--forbid", "secrets/"]);
        assert_ran(who, &r, "blocked");
        assert_changes(who, &r, &[("secrets/x", "created", "file")]);
        assert_eq!(forbidden_touched(&r), vec!["secrets/x"], "{who:?}");
        let rs = r.reasons();
        assert_eq!(
            rs.first().map(String::as_str),
            Some("[intent.forbidden_paths] created secrets/x which intent forbids (secrets/)"),
            "{who:?}: {rs:?}"
        );

        // Expected writes that also cover the path do not lift the ban.
        for allow in ["**", "secrets/*"] {
            let r = ws.rehearse_untouched(
                "echo x > secrets/x",
                &["--forbid", "secrets/", "--expect-write", allow],
            );
            assert_ran(who, &r, "blocked");
            assert_eq!(forbidden_touched(&r), vec!["secrets/x"], "{who:?} {allow}");
            assert!(
                surprise_paths(&r).is_empty(),
                "{who:?} {allow}: {:?}",
                surprise_paths(&r)
            );
            assert!(
                r.reasons()[0].starts_with("[intent.forbidden_paths] "),
                "{who:?} {allow}: {:?}",
                r.reasons()
            );
        }

        // Even an identical rewrite of a forbidden file is a touch.
        let r = ws.rehearse_untouched("touch secrets/old", &["--forbid", "secrets/"]);
        assert_ran(who, &r, "blocked");
        assert_eq!(forbidden_touched(&r), vec!["secrets/old"], "{who:?}");

        // Outside the forbidden tree nothing is flagged.
        let r = ws.rehearse_untouched(
            "echo x > public.txt",
            &["--forbid", "secrets/", "--expect-write", "*.txt"],
        );
        assert_ran(who, &r, "promote");
        assert!(forbidden_touched(&r).is_empty(), "{who:?}");
    }
}

#[test]
fn a_write_outside_the_expected_globs_is_a_surprise() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "blog/a.md", "# A\n", 0o644);
        put(&ws, "blog/index.html", "<h1>blog</h1>\n", 0o644);
        let r = ws.rehearse_untouched(
            "echo more >> blog/a.md; echo '<p>x</p>' >> blog/index.html",
            &["--expect-write", "blog/*.md"],
        );
        assert_ran(who, &r, "blocked");
        assert_changes(
            who,
            &r,
            &[
                ("blog/a.md", "modified", "file"),
                ("blog/index.html", "modified", "file"),
            ],
        );
        assert_eq!(surprise_paths(&r), vec!["blog/index.html"], "{who:?}");
        assert!(forbidden_touched(&r).is_empty(), "{who:?}");
        assert!(
            r.reasons()
                .iter()
                .any(|x| x == "[intent.expected_writes] modified blog/index.html but intent only allowed blog/*.md"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert_fields(
            who,
            &change(who, &r, "blog/index.html"),
            &serde_json::json!({"before": h("<h1>blog</h1>\n"), "after": h("<h1>blog</h1>\n<p>x</p>\n")}),
        );

        // Within the globs: promoted.
        let r = ws.rehearse_untouched("echo more >> blog/a.md", &["--expect-write", "blog/*.md"]);
        assert_ran(who, &r, "promote");
        assert!(surprise_paths(&r).is_empty(), "{who:?}");
    }
}

#[test]
fn diff_shows_a_unified_text_diff_of_a_modified_file() {
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "one\ntwo\nthree\n", 0o644);
        let r = ws.rehearse_untouched(
            "sed -i 's/two/TWO/' a.txt && printf 'hi\\n' > new.txt",
            &["--expect-write", "*.txt"],
        );
        assert_ran(who, &r, "promote");
        assert_changes(
            who,
            &r,
            &[
                ("a.txt", "modified", "file"),
                ("new.txt", "created", "file"),
            ],
        );
        let id = r.json["run_id"].as_str().unwrap().to_string();

        let out = dryrun(&ws, &["diff", &id, "--json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{who:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let d: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{who:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(d["run_id"], id.as_str(), "{who:?}");
        let files = d["files"]
            .as_array()
            .unwrap_or_else(|| panic!("{who:?}: {d}"));
        let file = |p: &str| {
            files
                .iter()
                .find(|f| f["path"] == p)
                .cloned()
                .unwrap_or_else(|| panic!("{who:?}: no diff entry for {p}: {d}"))
        };
        let a = file("a.txt");
        assert_eq!(a["kind"], "modified", "{who:?}");
        let text = a["diff"]
            .as_str()
            .unwrap_or_else(|| panic!("{who:?}: no diff text: {a}"));
        for line in [
            "--- a/a.txt",
            "+++ b/a.txt",
            " one",
            "-two",
            "+TWO",
            " three",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{who:?}: {line:?} missing from\n{text}"
            );
        }
        let n = file("new.txt");
        let text = n["diff"]
            .as_str()
            .unwrap_or_else(|| panic!("{who:?}: no diff text: {n}"));
        assert!(
            text.lines().any(|l| l == "--- /dev/null"),
            "{who:?}: {text}"
        );
        assert!(text.lines().any(|l| l == "+hi"), "{who:?}: {text}");

        // Human form.
        let out = dryrun(&ws, &["diff", &id]);
        assert_eq!(out.status.code(), Some(0), "{who:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines().any(|l| l == "-two") && text.lines().any(|l| l == "+TWO"),
            "{who:?}: {text}"
        );
    }
}

#[test]
fn evidence_comes_from_the_upper_layer_only() {
    for who in identities() {
        let ws = Ws::new(who);
        for d in 0..50 {
            let dir = ws.dir.join(format!("tree/d{d:02}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..100 {
                let p = dir.join(format!("f{f:03}.txt"));
                std::fs::write(&p, format!("file {d} {f}\n")).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        ws.chown_all();
        // Read everything, change one file.
        let r = ws.rehearse_untouched(
            "cat tree/*/*.txt > /dev/null && echo changed >> tree/d07/f042.txt",
            &["--expect-write", "tree/**"],
        );
        assert_ran(who, &r, "promote");
        assert_changes(who, &r, &[("tree/d07/f042.txt", "modified", "file")]);
        assert_fields(
            who,
            &change(who, &r, "tree/d07/f042.txt"),
            &serde_json::json!({"before": h("file 7 42\n"), "after": h("file 7 42\nchanged\n"), "size_after": 18}),
        );
    }
}

/// The phase marks of a run's rehearsal, by name.
fn phases(r: &Run) -> Vec<String> {
    r.json["rehearsal"]["timings_us"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| p[0].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The evidence reader (the process holding only the owner's ids that opens
/// workspace files for the walk) is forked only when the walk has to open
/// something through it: a run that changes nothing never starts it; a run
/// that modifies a workspace file does, and the file's old hash, which only
/// the reader can read, is in the record.
#[test]
fn the_evidence_reader_is_started_only_when_the_walk_opens_through_it() {
    const STARTED: &str = "P9 reader started";
    for who in identities() {
        let ws = Ws::new(who);
        put(&ws, "a.txt", "hello\n", 0o644);
        let r = ws.rehearse_untouched("true", &[]);
        assert_ran(who, &r, "promote");
        assert_changes(who, &r, &[]);
        let marks = phases(&r);
        assert!(
            marks.iter().any(|p| p == "P9 evidence done"),
            "{who:?}: the walk's marks are missing: {marks:?}"
        );
        assert!(
            !marks.iter().any(|p| p == STARTED),
            "{who:?}: the reader was started for a run that changed nothing: {marks:?}"
        );

        let r = ws.rehearse_untouched("echo world >> a.txt", &["--expect-write", "a.txt"]);
        assert_ran(who, &r, "promote");
        assert_changes(who, &r, &[("a.txt", "modified", "file")]);
        assert_fields(
            who,
            &change(who, &r, "a.txt"),
            &serde_json::json!({"before": h("hello\n"), "after": h("hello\nworld\n")}),
        );
        let marks = phases(&r);
        let at = |name: &str| marks.iter().position(|p| p == name);
        assert!(
            at(STARTED).is_some(),
            "{who:?}: the walk read a lower file without the reader: {marks:?}"
        );
        assert!(
            at("P9 evidence") < at(STARTED) && at(STARTED) < at("P9 evidence done"),
            "{who:?}: the reader started outside the walk: {marks:?}"
        );
        assert_eq!(
            marks.iter().filter(|p| *p == STARTED).count(),
            1,
            "{who:?}: the reader was started more than once: {marks:?}"
        );
    }
}
