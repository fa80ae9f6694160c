use super::*;

#[test]
fn shells_missing_programs_are_read_from_their_messages() {
    assert_eq!(
        missing_program("bash: line 1: cargo: command not found"),
        Some("cargo")
    );
    assert_eq!(
        missing_program("bash: cargo: command not found"),
        Some("cargo")
    );
    assert_eq!(
        missing_program("/bin/sh: 1: rustc: not found"),
        Some("rustc")
    );
    assert_eq!(missing_program("bash: ./x: command not found"), None);
    assert_eq!(missing_program("error: thing not found here"), None);
}

#[test]
fn absolute_paths_are_taken_from_error_lines() {
    assert_eq!(
        absolute_paths("cat: /root/.ssh/id_rsa: No such file or directory"),
        vec![PathBuf::from("/root/.ssh/id_rsa")]
    );
    assert_eq!(
        absolute_paths("bash: ./x: /home/a/venv/bin/python: bad interpreter: No such file"),
        vec![PathBuf::from("/home/a/venv/bin/python")]
    );
}

#[test]
fn table_paths_expand_in_the_home_and_every_rule_has_a_reason() {
    let home = Path::new("/home/u");
    assert_eq!(
        expand("~/.ssh", Some(home)),
        Some(PathBuf::from("/home/u/.ssh"))
    );
    assert_eq!(expand("~/.ssh", None), None);
    assert_eq!(
        expand("/etc/shadow", None),
        Some(PathBuf::from("/etc/shadow"))
    );
    let v = ViewSpec::default();
    for (kind, t) in [
        ("mask", table::MASKS),
        ("filter", table::FILTERS),
        ("cache", table::CACHES),
        ("cache", table::CACHE_DIR_NAMES),
    ] {
        for e in t {
            assert!(!e.reason.is_empty());
            assert_eq!(v.reason(&format!("{kind}:{}", e.id)), e.reason);
            for p in e.paths {
                assert!(
                    p.starts_with("~/") || p.starts_with('/') || !p.contains('/'),
                    "{kind}:{}: {p}",
                    e.id
                );
                assert!(!p.contains("/../"), "{p}");
            }
        }
    }
    for r in [
        RULE_ROOT_HOME,
        RULE_OTHER_HOME,
        RULE_TOO_WIDE,
        RULE_SYMLINKED,
        RULE_OUTSIDE,
    ] {
        assert!(builtin_reason(r).is_some(), "{r}");
    }
}

/// The user's guide lists every rule and path of the tables: the two
/// cannot drift apart.
#[test]
fn the_guide_lists_every_table_entry() {
    let guide = include_str!("../../../docs/sandbox-view.md");
    for (kind, t) in [
        ("mask", table::MASKS),
        ("filter", table::FILTERS),
        ("cache", table::CACHES),
        ("cache", table::CACHE_DIR_NAMES),
    ] {
        for e in t {
            assert!(
                guide.contains(&format!("`{kind}:{}`", e.id)),
                "docs/sandbox-view.md does not name `{kind}:{}`",
                e.id
            );
            for p in e.paths {
                assert!(
                    guide.contains(&format!("`{p}`")),
                    "docs/sandbox-view.md does not list `{p}` ({kind}:{})",
                    e.id
                );
            }
        }
    }
}

#[test]
fn a_plan_masks_the_state_directory_and_hides_other_homes_on_path() {
    let me = HostUser {
        uid: 0,
        gid: 0,
        groups: vec![],
    };
    let image = ImageProfile::default_profile();
    let env = vec![
        (
            "PATH".to_string(),
            "/usr/bin:relative:/nonexistent-dir-x".to_string(),
        ),
        ("HOME".to_string(), "/tmp/home".to_string()),
    ];
    let ws = Path::new("/tmp/some-workspace");
    let v = plan_view(&ViewRequest {
        user: &me,
        env: &env,
        workspace: ws,
        state_dir: Path::new("/var/lib/dryrun-test-state"),
        image: &image,
        policy_masks: &[("~/.config/mine".into(), "mine".into())],
        reaches_home: &|_, _, _| false,
    });
    assert!(v.layers.iter().any(|l| l.path == Path::new("/tmp")));
    assert!(v.path_binds.is_empty(), "{:?}", v.path_binds);
    assert!(
        v.masks
            .iter()
            .any(|m| m.rule == RULE_STATE && m.path == Path::new("/var/lib/dryrun-test-state"))
    );
    assert!(v.masks.iter().any(|m| m.path == Path::new("/etc/shadow")));
    if let Some(h) = &v.home {
        assert!(v.masks.iter().any(|m| m.path == h.join(".ssh")));
        assert!(
            v.masks
                .iter()
                .any(|m| m.rule == RULE_POLICY && m.path == h.join(".config/mine"))
        );
        assert_eq!(v.reason(RULE_POLICY), "mine");
        assert_eq!(v.make_home.as_deref(), Some(Path::new("/tmp/home")));
    }
}

/// The hostile test plants a canary at every home path of the mask table
/// and attacks it: its list must name each of them.
#[test]
fn the_hostile_test_attacks_every_home_mask() {
    let attacks = include_str!("../../../tests/hostile_view.rs");
    for e in table::MASKS {
        for p in e.paths.iter().filter(|p| p.starts_with("~/")) {
            assert!(
                attacks.contains(&format!("(\"{p}\", ")),
                "tests/hostile_view.rs does not attack {p} (mask:{})",
                e.id
            );
        }
    }
}

/// What the helper shows of a planned directory: only the directory the
/// plan saw (device and inode), reached without a symlink. A path swapped
/// for a symlink, or for another directory, between the plan and the
/// mount is not shown.
#[test]
fn a_planned_directory_swapped_since_is_not_opened() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("bin");
    std::fs::create_dir(&dir).unwrap();
    let m = std::fs::metadata(&dir).unwrap();
    let id = Some((m.dev(), m.ino()));
    let open = |p: &Path, id| super::super::mounts::open_dir_no_symlinks(p, id).unwrap();
    assert!(open(&dir, id).is_some());
    // Swapped for another directory.
    std::fs::rename(&dir, d.path().join("old")).unwrap();
    std::fs::create_dir(&dir).unwrap();
    assert!(open(&dir, id).is_none());
    // Swapped for a symlink to the directory the plan saw.
    std::fs::remove_dir(&dir).unwrap();
    std::os::unix::fs::symlink(d.path().join("old"), &dir).unwrap();
    assert!(open(&dir, id).is_none());
    assert!(open(&dir, None).is_none(), "a symlink is never followed");
}
