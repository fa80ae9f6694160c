//! The README's sample output is a real run: the quick start's example task
//! is rehearsed afresh and compared with the block after
//! `<!-- sample: normalize-blog-frontmatter -->`, run ids, times, durations
//! and the workspace's path normalised on both sides. `DRYRUN_BLESS=1 cargo
//! test --test readme_sample` writes the block anew from the run.

mod common;
use common::*;

const MARK: &str = "<!-- sample: normalize-blog-frontmatter -->\n```text\n";

fn normalise(text: &str, workspace: &str) -> String {
    let rules = [
        (r"r[0-9a-f]{8}-[0-9a-f]{10,}", "RUN_ID"),
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME"),
        (r"· \d+ ms", "· N ms"),
        (r"landlock ABI \d+", "landlock ABI N"),
    ];
    let mut t = text.replace(workspace, "WORKSPACE");
    for (re, to) in rules {
        t = regex::Regex::new(re)
            .unwrap()
            .replace_all(&t, to)
            .into_owned();
    }
    t
}

#[test]
fn the_quick_starts_sample_is_what_the_example_prints() {
    // The sample is root's run (its ids line says so).
    if !require_root() {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::Builder::new()
        .prefix("dryrun-sample-")
        .tempdir_in("/tmp")
        .unwrap();
    let ws = dir.path().join("site");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(root.join("examples/site"))
        .arg(&ws)
        .status()
        .unwrap();
    assert!(st.success());
    let out = std::process::Command::new(bin())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("NO_COLOR", "1")
        .current_dir(&ws)
        .arg("--local")
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["execute", "--task", "normalize-blog-frontmatter"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let fresh = String::from_utf8(out.stdout).unwrap();
    let ws_text = ws.to_str().unwrap();

    let readme_path = root.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let start = readme.find(MARK).expect("the README has the sample block") + MARK.len();
    let end = start + readme[start..].find("```\n").unwrap();
    let shown = &readme[start..end];
    let (want, have) = (normalise(&fresh, ws_text), normalise(shown, ws_text));
    if want == have {
        return;
    }
    if std::env::var_os("DRYRUN_BLESS").is_some() {
        let sample = normalise(&fresh, ws_text).replace("landlock ABI N", "landlock ABI 7");
        std::fs::write(
            &readme_path,
            format!("{}{sample}{}", &readme[..start], &readme[end..]),
        )
        .unwrap();
        return;
    }
    panic!(
        "the README's sample differs from a fresh run of the example (run `DRYRUN_BLESS=1 cargo test --test readme_sample` and review the diff)\n--- README\n{have}\n--- fresh run\n{want}"
    );
}
