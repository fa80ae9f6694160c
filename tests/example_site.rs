//! The bundled example workspace and its tasks, as a newcomer runs them.

mod common;
use common::*;

fn copy_site(ws: &Ws) {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/site");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(&ws.dir)
        .status()
        .unwrap();
    assert!(st.success());
    ws.chown_all();
}

#[test]
fn frontmatter_task_is_blocked_on_the_index_surprise() {
    for who in identities() {
        let ws = Ws::new(who);
        copy_site(&ws);
        let before = ws.snapshot();
        let r = ws.execute(&["--task", "normalize-blog-frontmatter"]);
        assert_eq!(before, ws.snapshot(), "{who:?}: the real workspace changed");
        assert_eq!(r.code, 4, "{who:?}: {}", r.stderr);
        assert_eq!(r.decision(), "blocked");
        assert_eq!(r.json["task"], "normalize-blog-frontmatter");
        assert_eq!(
            r.json["verdict"]["surprise_paths"],
            serde_json::json!(["blog/index.html"])
        );
        let modified = r
            .changes()
            .iter()
            .filter(|c| c["kind"] == "modified")
            .count();
        assert_eq!(modified, 14, "{who:?}: {:?}", r.changes());
        let reason = r.json["verdict"]["reasons"][0].as_str().unwrap();
        assert!(
            reason.contains("blog/index.html but intent only allowed blog/*.md"),
            "{reason}"
        );
        assert_eq!(
            r.json["rehearsal"]["sandbox"]["landlock_abi"],
            expected_landlock_abi(),
            "{who:?}"
        );

        // Human output: the evidence block from the README.
        let out = ws
            .command()
            .args(["execute", "--task", "normalize-blog-frontmatter"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(4));
        assert!(text.contains("sandbox: overlay on "), "{text}");
        assert!(
            text.contains("exit code: 0 · files changed: 14 · surprise paths: 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "decision: blocked — modified blog/index.html but intent only allowed blog/*.md"
            ),
            "{text}"
        );
    }
}

#[test]
fn posts_only_task_promotes_and_read_only_task_stays_clean() {
    for who in identities() {
        let ws = Ws::new(who);
        copy_site(&ws);
        let before = ws.snapshot();
        let r = ws.execute(&["--task", "normalize-posts-only"]);
        assert_eq!(r.code, 0, "{who:?}: {:?} {}", r.json["verdict"], r.stderr);
        assert_eq!(r.decision(), "promote");
        assert_eq!(r.changes().len(), 13);
        let c = r.change("blog/post-02.md").unwrap();
        assert_ne!(c["before"], c["after"]);
        let r = ws.execute(&["--task", "word-count"]);
        assert_eq!(r.code, 0, "{who:?}: {:?}", r.json["verdict"]);
        assert!(r.out().contains("total"), "{}", r.out());
        assert_eq!(before, ws.snapshot());
    }
}

#[test]
fn announce_task_is_blocked_with_the_network_attempt_as_evidence() {
    for who in identities() {
        let ws = Ws::new(who);
        copy_site(&ws);
        let r = ws.execute(&["--task", "announce-posts"]);
        assert_eq!(r.code, 4, "{who:?}: {} {}", r.json["error"], r.stderr);
        // The script's urllib goes through the run's egress proxy (its
        // variables are set in every run), which refuses the address and
        // names it; a tool that ignored them would be a blocked connect.
        let egress = r.json["rehearsal"]["egress"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let blocked = r.blocked();
        assert!(
            egress.iter().any(|e| e["allowed"] == false
                && e["name"]
                    .as_str()
                    .is_some_and(|n| n.contains("203.0.113.10"))
                && e["reason"]
                    .as_str()
                    .is_some_and(|w| w.contains("intent.network is none")))
                || blocked.iter().any(|b| b["kind"] == "network"
                    && b["detail"].as_str().unwrap().contains("203.0.113.10:80")),
            "{who:?}: egress {egress:?} blocked {blocked:?}"
        );
        assert!(
            r.json["verdict"]["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x.as_str().unwrap().starts_with("[evidence.network]"))
        );
    }
}

#[test]
fn release_task_is_answered_by_the_gh_stub_and_its_failure_path_can_be_seen() {
    for who in identities() {
        let ws = Ws::new(who);
        copy_site(&ws);
        let before = ws.snapshot();
        let r = ws.execute(&["--task", "publish-release"]);
        assert_eq!(before, ws.snapshot(), "{who:?}: the real workspace changed");
        // The stub answered like the forge: success branch, one would-be
        // action, approval needed because the live lane will not make it.
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.json["verdict"], r.stderr);
        let a = &r.json["rehearsal"]["would_be_actions"];
        assert_eq!(
            strings(&a[0]["argv"]),
            [
                "gh",
                "release",
                "create",
                "v1.13",
                "--title",
                "Site v1.13",
                "--notes-file",
                "-"
            ],
            "{who:?}: {a}"
        );
        assert_eq!(a[0]["stdin"]["head"], "This release has 13 posts.\n");
        assert_eq!(a[0]["rule"], "gh.release");
        assert_eq!(r.change("release-status.txt").unwrap()["kind"], "created");
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[stubs.would_be_action]")),
            "{:?}",
            r.reasons()
        );
        // The counterfactual from the README: the failure branch.
        let f = ws.execute(&[
            "--task",
            "publish-release",
            "--stub",
            "gh release create=exit 1; stderr=HTTP 422: Validation Failed\\n",
        ]);
        // The failure is a result, not a block: what decides is the stub
        // override and the would-be action (a person's to weigh).
        assert_eq!(f.code, 3, "{who:?}: {:?}", f.json["verdict"]);
        assert_eq!(f.exit_code(), Some(1));
        assert_eq!(f.err(), "HTTP 422: Validation Failed\n");
        assert_ne!(
            f.change("release-status.txt").unwrap()["after"],
            r.change("release-status.txt").unwrap()["after"],
            "the failure branch wrote a different status"
        );
        assert_eq!(before, ws.snapshot());
    }
}

/// The Landlock ABI CI pins (DRYRUN_EXPECT_LANDLOCK_ABI), else what the
/// kernel reports, capped at the newest ABI dryrun knows (7).
fn expected_landlock_abi() -> u64 {
    if let Ok(v) = std::env::var("DRYRUN_EXPECT_LANDLOCK_ABI") {
        return v.parse().expect("DRYRUN_EXPECT_LANDLOCK_ABI is a number");
    }
    eprintln!("note: DRYRUN_EXPECT_LANDLOCK_ABI not set; accepting the kernel's ABI");
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes;print(ctypes.CDLL(None).syscall(444,None,0,1))",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<u64>()
        .unwrap()
        .min(7)
}
