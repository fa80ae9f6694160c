//! Mounts beneath the home (a bind-mounted `~/.cargo` or `~/.rustup`, a
//! container's cache volume): the rehearsal shows what is mounted there,
//! as the live run sees it, with its writes listed and dropped and its
//! masks on; what it cannot show is named, never an empty directory in
//! silence.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;

/// The passwd home of `who`.
fn home_for(who: Who) -> PathBuf {
    let user = match who {
        Who::Root => "root",
        Who::User => TEST_USER,
    };
    let out = std::process::Command::new("getent")
        .args(["passwd", user])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    PathBuf::from(line.trim().split(':').nth(5).expect("a passwd entry"))
}

/// A path the test made in the home, removed when it ends.
struct Made(Vec<PathBuf>);

impl Drop for Made {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
        }
    }
}

fn chown_to(who: Who, p: &Path) {
    if who == Who::User {
        let (u, g) = test_user();
        std::os::unix::fs::chown(p, Some(u), Some(g)).unwrap();
    }
}

/// Runs `cmd` as `who` in a private mount namespace where `~/.cargo` is a
/// bind mount of a tree holding a canary and a registry token
/// (`credentials.toml`, masked), and a file is bind-mounted over
/// `~/.dryrun-submount-file-HEX`, and the tree is bound read-only at
/// `~/.dryrun-submount-ro-HEX`. Returns the run, the canary, the tree and
/// what the test made in the home (removed when dropped).
fn rehearse_with_submounts(who: Who) -> (Run, String, PathBuf, Made) {
    let ws = Ws::new(who);
    let home = home_for(who);
    let hex = random_hex();
    let mut made = Made(Vec::new());
    if !home.exists() {
        std::fs::create_dir_all(&home).unwrap();
        chown_to(who, &home);
    }
    let cargo = home.join(".cargo");
    if !cargo.exists() {
        std::fs::create_dir(&cargo).unwrap();
        chown_to(who, &cargo);
        made.0.push(cargo.clone());
    }
    let ro_point = home.join(format!(".dryrun-submount-ro-{hex}"));
    std::fs::create_dir(&ro_point).unwrap();
    made.0.push(ro_point.clone());
    let file_point = home.join(format!(".dryrun-submount-file-{hex}"));
    std::fs::write(&file_point, "under the mount\n").unwrap();
    made.0.push(file_point.clone());
    let tree = ws.root.path().join(format!("mounted-{hex}"));
    std::fs::create_dir(&tree).unwrap();
    std::fs::set_permissions(ws.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&tree, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_to(who, &tree);
    let canary = format!("canary-{hex}");
    std::fs::write(tree.join("canary"), format!("{canary}\n")).unwrap();
    std::fs::write(
        tree.join("credentials.toml"),
        format!("[registry]\ntoken = \"secret-{hex}\"\n"),
    )
    .unwrap();
    let file_src = ws.root.path().join(format!("file-{hex}"));
    std::fs::write(&file_src, "the mounted file\n").unwrap();
    let mounted: Vec<String> = [&tree, &cargo, &file_src, &file_point, &ro_point]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let wrapper = ns::in_private_mount_ns(
        "mount --bind \"$0\" \"$1\" && mount --bind \"$2\" \"$3\" && mount --bind \"$0\" \"$4\" && \
         mount -o remount,bind,ro \"$4\" && shift 4 && exec \"$@\"",
        &mounted,
    );
    let mut c = ws.command_via(&wrapper);
    c.args(["execute", "--json", "--command", &cmd(who, &hex)]);
    let r = to_run(c.output().unwrap());
    // The mounts were the private namespace's only.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&format!("mounted-{hex}")),
        "{mountinfo}"
    );
    (r, canary, tree, made)
}

/// Reads the canary, writes beside it and reads the token, in the `.cargo`
/// of `who`'s home (the run's `HOME` is the test's own), then reads the
/// canary through the read-only mount and tries to write there.
fn cmd(who: Who, hex: &str) -> String {
    let home = home_for(who);
    let c = home.join(".cargo");
    let c = c.display();
    let ro = home.join(format!(".dryrun-submount-ro-{hex}"));
    let ro = ro.display();
    format!(
        "cat {c}/canary; echo new > {c}/written-in-rehearsal && echo wrote; \
         echo \"token:$(cat {c}/credentials.toml 2>&1)\"; cat {ro}/canary; \
         echo new > {ro}/new 2>/dev/null && echo ro-wrote || echo ro-refused; exit 0"
    )
}

fn outside_paths(r: &Run) -> Vec<String> {
    r.json["rehearsal"]["outside_writes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|w| w["path"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Root's run: the mounted tree is shown (its canary read), a write
/// beneath it is listed under its path and never reaches the tree, its
/// registry token is masked, and the file mounted over a path of the
/// home is named (a file cannot be a layer).
#[test]
fn a_mount_beneath_roots_home_is_shown_with_its_writes_listed_and_masks_on() {
    if !require_root() {
        return;
    }
    let (r, canary, tree, _made) = rehearse_with_submounts(Who::Root);
    assert_ran(Who::Root, &r);
    let home = home_for(Who::Root);
    assert_eq!(
        r.out(),
        format!("{canary}\nwrote\ntoken:\n{canary}\nro-refused\n"),
        "{}\n{:?}",
        r.err(),
        r.stripped()
    );
    let cargo = home.join(".cargo");
    let paths = outside_paths(&r);
    assert!(
        paths.iter().any(|p| Path::new(p).starts_with(&cargo)),
        "{paths:?}"
    );
    assert!(!tree.join("written-in-rehearsal").exists());
    let stripped = r.stripped();
    assert!(
        stripped.contains(&format!(
            "masked:{}",
            cargo.join("credentials.toml").display()
        )),
        "{stripped:?}"
    );
    assert!(
        stripped.iter().any(|s| s
            .starts_with(&format!("hidden:{}/.dryrun-submount-file-", home.display()))
            && s.contains("a file mounted beneath the home")),
        "{stripped:?}"
    );
}

/// A user's run: in the user's own namespace the kernel may refuse the
/// home as a layer (it holds mounts); then the mounted tree is still shown
/// on its own, or what is left out is named. Never a silent empty
/// directory, never a secret shown.
#[test]
fn a_mount_beneath_a_users_home_is_shown_or_named() {
    if !require_root() {
        return;
    }
    let (r, canary, tree, _made) = rehearse_with_submounts(Who::User);
    assert_ran(Who::User, &r);
    let home = home_for(Who::User);
    let cargo = home.join(".cargo");
    let stripped = r.stripped();
    let out = r.out();
    assert!(!out.contains("secret-"), "{out}");
    assert!(!tree.join("written-in-rehearsal").exists());
    if out.starts_with(&format!("{canary}\n")) {
        assert_eq!(
            out,
            format!("{canary}\nwrote\ntoken:\n{canary}\nro-refused\n"),
            "{}",
            r.err()
        );
        let paths = outside_paths(&r);
        assert!(
            paths.iter().any(|p| Path::new(p).starts_with(&cargo)),
            "{paths:?}"
        );
    } else {
        assert!(
            stripped
                .iter()
                .any(|s| s.starts_with(&format!("hidden:{}", cargo.display()))),
            "{out}\n{stripped:?}"
        );
    }
    assert!(
        stripped
            .iter()
            .any(|s| s.starts_with(&format!("hidden:{}/.dryrun-submount-file-", home.display()))),
        "{stripped:?}"
    );
}
