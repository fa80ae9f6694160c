//! World-writable modes in a change set: any other user of the host could
//! then plant or rewrite code in the project. Created so or opened up by a
//! mode change, files and directories (sticky or not) need approval; the
//! real workspace is untouched and nothing is promoted without a reviewer.

mod common;
use common::*;

fn rules(r: &Run) -> Vec<String> {
    r.reasons()
        .iter()
        .map(|x| {
            x.split(']')
                .next()
                .unwrap_or("")
                .trim_start_matches('[')
                .to_string()
        })
        .collect()
}

#[test]
fn world_writable_files_and_directories_need_approval() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("notes.txt", "keep\n");
        std::fs::create_dir_all(ws.dir.join("shared")).unwrap();
        std::fs::create_dir_all(ws.dir.join("drop")).unwrap();
        ws.chown_all();
        for (cmd, path, rule) in [
            (
                "chmod 666 notes.txt",
                "notes.txt",
                "evidence.world_writable",
            ),
            (
                "chmod o+w notes.txt",
                "notes.txt",
                "evidence.world_writable",
            ),
            ("chmod 777 shared", "shared", "evidence.world_writable"),
            ("chmod 1777 drop", "drop", "evidence.world_writable_sticky"),
            (
                "echo x > new.txt && chmod 646 new.txt",
                "new.txt",
                "evidence.world_writable",
            ),
            ("mkdir -m 777 open", "open", "evidence.world_writable"),
            (
                "mkdir -m 1777 tmpish",
                "tmpish",
                "evidence.world_writable_sticky",
            ),
        ] {
            let r = ws.rehearse_untouched(cmd, &["--expect-write", "**"]);
            assert_ran(who, &r);
            assert_eq!(r.code, 3, "{who:?} {cmd}: {:?}", r.reasons());
            assert!(
                r.reasons()
                    .iter()
                    .any(|x| x.starts_with(&format!("[{rule}]")) && x.contains(path)),
                "{who:?} {cmd}: {:?}",
                r.reasons()
            );
            let kind = r.change(path).unwrap()["kind"].clone();
            assert!(kind == "metadata" || kind == "created", "{cmd}: {kind}");
        }
        // Not world-writable: promoted as before.
        let r = ws.rehearse_untouched(
            "chmod 664 notes.txt && chmod 750 shared && mkdir -m 700 private",
            &["--expect-write", "**"],
        );
        assert_eq!(r.code, 0, "{who:?}: {:?}", rules(&r));
    }
}
