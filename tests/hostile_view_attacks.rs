//! A hostile agent against the view (issue 30): the attacks
//! `tests/hostile_view.rs` does not make. Credential lines a filtered file
//! keeps when written in another of its syntax's forms; credential files
//! the mask table does not name; every `/proc/PID/{root,cwd,fd,map_files}`
//! of the sandbox as a way to the host's trees (read and write); sizes and
//! listings of masked files; masks renamed, linked, copied and unmounted
//! inside the layer; writes outside the workspace dressed up as cache
//! writes or metadata-only changes (a run the record must not let through
//! unreviewed); names with control characters and a flood of rows in
//! `outside_writes`; `HOME` and `PATH` naming root's home, another user's
//! home and symlinks to them; a root daemon serving two users at once;
//! another user's 0600 files in the host's `/tmp`; a run's namespaces seen
//! from the host by another user.
//!
//! Every attack is judged on the host side: canaries of unique random
//! content never appear in anything the run reports, host files are
//! unchanged, and no file the attack tried to write exists on the host.
//! The homes attacked belong to this file's own account (`dryrun-hv`), so
//! planting credential files touches no home another test uses.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::daemon::*;
use common::leaks::*;
use common::*;

/// The tests share one account's home: one test at a time.
static HOME_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

const HV_USER: &str = "dryrun-hv";

fn lock() -> std::sync::MutexGuard<'static, ()> {
    HOME_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// This file's own account: (uid, gid, home), created (home 0755) when
/// missing.
fn hv_user() -> (u32, u32, PathBuf) {
    static U: OnceLock<(u32, u32, PathBuf)> = OnceLock::new();
    U.get_or_init(|| common::account_with_home(HV_USER, "/home/dryrun-hv"))
        .clone()
}

/// A file of the account's, with its mode.
fn put(p: &Path, content: &str, mode: u32) {
    let (u, g, _) = hv_user();
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    let mut d = p.to_path_buf();
    let (_, _, home) = hv_user();
    while d.starts_with(&home) {
        let _ = std::os::unix::fs::chown(&d, Some(u), Some(g));
        if !d.pop() {
            break;
        }
    }
}

/// The state of `paths` (type, content hash, mode, owner, size, mtime;
/// "absent" for a missing one): what an attack must leave as it was.
fn state_of(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| {
            let snap = snapshot_tree(p.parent().unwrap());
            let rel = p.strip_prefix(p.parent().unwrap()).unwrap();
            format!(
                "{}: {}",
                p.display(),
                snap.get(rel).cloned().unwrap_or_else(|| "absent".into())
            )
        })
        .collect()
}

/// A workspace of this file's account, and how to run `dryrun` on it.
fn account_ws(mode: Mode) -> (Ws, Vec<String>) {
    let (u, g, _) = hv_user();
    common::account_ws(mode, u, g)
}

/// `dryrun execute --json --file` of `cmd` with `env` (HOME defaults to
/// the account's).
fn attack_env(ws: &Ws, wrapper: &[String], cmd: &str, env: serde_json::Value) -> Run {
    let (u, g, home) = hv_user();
    let mut env = env;
    if env.get("HOME").is_none() {
        env["HOME"] = serde_json::json!(home);
    }
    if env.get("PATH").is_none() {
        env["PATH"] = serde_json::json!("/usr/bin:/bin");
    }
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir, "env": env});
    chown_r(&ws.dir, u, g);
    execute_envelope(ws, wrapper, &body)
}

fn attack(ws: &Ws, wrapper: &[String], cmd: &str) -> Run {
    attack_env(ws, wrapper, cmd, serde_json::json!({}))
}

/// Paths named `*{marker}*` anywhere under the host's `/tmp`, `/var/tmp`,
/// `/dev/shm` and homes (an attack's attempted writes).
fn host_files_named(marker: &str) -> Vec<String> {
    let out = Command::new("find")
        .args([
            "/tmp", "/var/tmp", "/dev/shm", "/home", "/root", "-xdev", "-name",
        ])
        .arg(format!("*{marker}*"))
        .stderr(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// The filtered files, each with its credential written in a form its own
/// syntax allows and the tools read: a continuation line (INI's indented
/// value, git's backslash), a TOML multi-line string, a YAML block
/// scalar, an XML file on one line, a key the filter's word list misses
/// (`gpr.key`, the GitHub Packages token of Gradle's docs; the in-memory
/// signing key). The run reads each filtered file: no credential may come
/// back. (The settings lines prove the files were served at all.)
#[test]
fn filtered_files_keep_no_credential_in_any_form_their_syntax_allows() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hv_user();
    let tag = random_hex();
    let files: &[(&str, String)] = &[
        (
            ".pypirc",
            format!(
                "[distutils]\nindex-servers =\n    pypi\n\n[pypi]\nusername = __token__\npassword =\n    PYPIRC-{tag}\n"
            ),
        ),
        (
            ".gitconfig",
            format!(
                "[user]\n\tname = A B\n[http \"https://forge.invalid/\"]\n\textraheader = AUTHORIZATION: bearer \\\n\tGITCONFIG-{tag}\n"
            ),
        ),
        (
            ".cargo/config.toml",
            format!(
                "[registries.acme]\nindex = \"sparse+https://r.invalid/\"\ntoken = \"\"\"\nCARGO-{tag}\n\"\"\"\n"
            ),
        ),
        (
            ".m2/settings.xml",
            format!(
                "<settings><servers><server><id>acme</id><username>u</username><password>MAVEN-{tag}</password></server></servers></settings>\n"
            ),
        ),
        (
            ".yarnrc.yml",
            format!("npmRegistryServer: \"https://r.invalid\"\nnpmAuthToken: >-\n  YARN-{tag}\n"),
        ),
        (
            ".gradle/gradle.properties",
            format!(
                "org.gradle.jvmargs=-Xmx2g\ngpr.user=me\ngpr.key=GRADLE-{tag}\nsigningInMemoryKey=GRADLESIGN-{tag}\n"
            ),
        ),
    ];
    for (rel, text) in files {
        put(&home.join(rel), text, 0o600);
    }
    let mut leaks = Vec::new();
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        let cmd = files
            .iter()
            .map(|(rel, _)| format!("cat ~/{rel}; rev ~/{rel}; echo"))
            .collect::<Vec<_>>()
            .join("; ")
            + "; exit 0";
        let r = attack(&ws, &wrapper, &cmd);
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        assert!(r.out().contains("A B"), "{mode:?}: served: {}", r.out());
        let all = reported(&r);
        for w in [
            "PYPIRC",
            "GITCONFIG",
            "CARGO",
            "MAVEN",
            "YARN",
            "GRADLE",
            "GRADLESIGN",
        ] {
            if leaked(&all, &format!("{w}-{tag}")) {
                leaks.push(format!("{mode:?} {w}"));
            }
        }
    }
    for (rel, _) in files {
        let _ = std::fs::remove_file(home.join(rel));
    }
    assert!(
        leaks.is_empty(),
        "credentials served through the filter: {leaks:?}"
    );
}

/// Well-known credential files the mask table does not name: the Hugging
/// Face token (`~/.cache/huggingface/token`), age keys of sops
/// (`~/.config/sops/age/keys.txt`), s3cmd's keys (`~/.s3cfg`), Terraform's
/// CLI tokens (`~/.terraformrc`), a git config include holding an
/// `extraheader` (the filter covers `~/.gitconfig`, not what it includes),
/// and an editor's backup of a masked file (`~/.netrc~`). A gap of the
/// table, not of its enforcement: each is read in the run.
#[test]
fn credential_files_beside_the_mask_table_stay_hidden() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hv_user();
    let tag = random_hex();
    let files: Vec<(&str, String)> = vec![
        (".cache/huggingface/token", format!("hf_HF-{tag}\n")),
        (
            ".config/sops/age/keys.txt",
            format!("AGE-SECRET-KEY-AGE-{tag}\n"),
        ),
        (
            ".s3cfg",
            format!("[default]\naccess_key = x\nsecret_key = S3CFG-{tag}\n"),
        ),
        (
            ".terraformrc",
            format!("credentials \"app.terraform.io\" {{\n  token = \"TFRC-{tag}\"\n}}\n"),
        ),
        (
            ".gitconfig",
            "[include]\n\tpath = ~/.config/git/tokens.inc\n".into(),
        ),
        (
            ".config/git/tokens.inc",
            format!("[http]\n\textraheader = AUTHORIZATION: bearer GITINC-{tag}\n"),
        ),
        (
            ".netrc",
            format!("machine h login u password NETRC-{tag}\n"),
        ),
        (
            ".netrc~",
            format!("machine h login u password NETRCBAK-{tag}\n"),
        ),
    ];
    for (rel, text) in &files {
        put(&home.join(rel), text, 0o600);
    }
    let (ws, wrapper) = account_ws(Mode::RootEngine);
    let cmd = files
        .iter()
        .map(|(rel, _)| format!("cat ~/{rel}; rev ~/{rel}"))
        .collect::<Vec<_>>()
        .join("; ")
        + "; git config --global --get http.extraheader; exit 0";
    let r = attack(&ws, &wrapper, &cmd);
    for (rel, _) in &files {
        let _ = std::fs::remove_file(home.join(rel));
    }
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    let all = reported(&r);
    assert!(!leaked(&all, &format!("NETRC-{tag}")), "the mask itself");
    let leaks: Vec<&str> = ["HF", "AGE", "S3CFG", "TFRC", "GITINC", "NETRCBAK"]
        .into_iter()
        .filter(|w| leaked(&all, &format!("{w}-{tag}")))
        .collect();
    assert!(
        leaks.is_empty(),
        "credential files the view shows: {leaks:?}"
    );
}

/// Plant the masked files these tests attack: a directory mask with a key
/// (`~/.ssh/id_ed25519`), file masks (`~/.aws/credentials`,
/// `~/.config/gh/hosts.yml`, `~/.kube/config`), each `size` bytes long,
/// each holding `SECRET-{tag}`. Returns the files.
fn plant_secrets(tag: &str, size: usize) -> Vec<PathBuf> {
    let (_, _, home) = hv_user();
    let mut out = Vec::new();
    for rel in [
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".config/gh/hosts.yml",
        ".kube/config",
    ] {
        let head = format!("SECRET-{tag}\n");
        let text = format!("{head}{}\n", "k".repeat(size - head.len() - 1));
        let p = home.join(rel);
        put(&p, &text, 0o600);
        out.push(p);
    }
    out
}

fn remove_secrets(files: &[PathBuf]) {
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}

/// Every process of the sandbox (the command's, its shell's, the init's
/// as far as `/proc` shows them) and each of its `root`, `cwd`, `fd/*` and
/// `map_files/*` links: read through each to the masked files' real
/// paths, list each, and write a file through each into the home, `/tmp`
/// and the link's own directory. Nothing of a secret comes back, and no
/// file the command wrote exists on the host afterwards.
#[test]
fn proc_links_of_the_sandbox_reach_no_host_tree() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hv_user();
    let tag = random_hex();
    let secrets = plant_secrets(&tag, 1000);
    let h = home.display();
    let script = format!(
        r#"exec 2>/dev/null
marker=esc-{tag}
(sleep 3) &
for p in /proc/[0-9]* /proc/self /proc/thread-self; do
  for l in root cwd; do
    ls -A $p/$l/ >/dev/null
    timeout 1 cat $p/$l{h}/.ssh/id_ed25519 $p/$l{h}/.aws/credentials $p/$l{h}/.kube/config
    echo x > $p/$l{h}/$marker-home
    echo x > $p/$l/tmp/$marker-tmp
    echo x > $p/$l/var/tmp/$marker-vartmp
  done
  for f in $p/fd/* $p/map_files/*; do
    timeout 1 cat $f/.ssh/id_ed25519 $f/.aws/credentials $f{h}/.ssh/id_ed25519 < /dev/null
    timeout 1 ls -A $f/ < /dev/null
    echo x > $f/$marker-fd
    echo x > $f/.ssh/$marker-fd
  done
  timeout 1 cat $p/environ | tr '\0' '\n'
done
grep -rs "SECRET-" /proc/[0-9]*/root{h} /proc/[0-9]*/cwd
echo done-{tag}
exit 0
"#
    );
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        write_script(&ws, "attack.sh", &script);
        let r = attack(&ws, &wrapper, "./attack.sh");
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        assert!(r.out().contains(&format!("done-{tag}")), "{mode:?}: {r:?}");
        assert_nowhere(
            &format!("{mode:?}"),
            &r,
            &ws.state,
            &format!("SECRET-{tag}"),
        );
        let escaped = host_files_named(&format!("esc-{tag}"));
        assert!(
            escaped.is_empty(),
            "{mode:?}: written on the host: {escaped:?}"
        );
    }
    remove_secrets(&secrets);
}

/// A masked file's size, blocks and content through every reader: `stat`,
/// `du`, `wc`, `find -printf`, `ls -l`, Python's `os.stat`, `scandir` and
/// `mmap`, `dd` past the start, `tar` of the whole home, `lseek` to the
/// end: every size reads 0 and the real size (an odd 4,973 bytes) never
/// shows; a masked directory lists nothing.
#[test]
fn masked_files_show_no_size_and_no_content_to_any_reader() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let tag = random_hex();
    let secrets = plant_secrets(&tag, 4973);
    let mut script = String::from("exec 2>&1\n");
    for s in &secrets {
        let q = sq(&s.display().to_string());
        script.push_str(&format!(
            "stat -c 'size=%s blocks=%b' {q}; du -b {q}; du -k {q}; wc -c < {q}; find {q} -printf 'size=%s\\n'; ls -ln {q}\n\
             dd if={q} bs=1 skip=10 count=64 2>/dev/null; echo\n\
             python3 -c 'import os,sys,mmap; p=sys.argv[1]; f=os.open(p,os.O_RDONLY); print(\"size=%d\" % os.lseek(f,0,2)); print(\"size=%d\" % os.stat(p).st_size)\ntry:\n  print(mmap.mmap(f,0,prot=mmap.PROT_READ)[:64])\nexcept Exception as e: print(\"mmap:\", e)' {q}\n"
        ));
    }
    script.push_str(
        "echo LIST-BEGIN; ls -A ~/.ssh; python3 -c 'import os; print(os.listdir(os.path.expanduser(\"~/.ssh\")))'; echo LIST-END\n\
         python3 -c 'import os; [print(e.name, e.stat(follow_symlinks=False).st_size) for d in (\"~/.aws\",\"~/.config/gh\",\"~/.kube\",\"~/.ssh\") for e in os.scandir(os.path.expanduser(d))]'\n\
         tar cf - -C ~ . 2>/dev/null | tr -c '[:print:]\\n' '.' | grep -ao 'SECRET-[0-9a-f]*'\n\
         du -sb ~/.ssh ~/.aws ~/.kube\nexit 0\n",
    );
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        write_script(&ws, "attack.sh", &script);
        let r = attack(&ws, &wrapper, "./attack.sh");
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        assert_nowhere(
            &format!("{mode:?}"),
            &r,
            &ws.state,
            &format!("SECRET-{tag}"),
        );
        let out = r.out();
        assert!(
            !out.contains("4973"),
            "{mode:?}: the real size shows:\n{out}"
        );
        assert!(
            out.lines()
                .filter_map(|l| l.strip_prefix("size="))
                .all(|s| s.starts_with('0')),
            "{mode:?}: a masked file has a size:\n{out}"
        );
        let listing = out
            .split("LIST-BEGIN")
            .nth(1)
            .and_then(|l| l.split("LIST-END").next())
            .unwrap_or_else(|| panic!("{mode:?}: no listing:\n{out}"));
        assert!(
            !listing.contains("id_ed25519"),
            "{mode:?}: the masked directory lists its keys:\n{listing}"
        );
    }
    remove_secrets(&secrets);
}

/// A mask moved, linked, copied, unmounted or deleted inside the layer,
/// and its parent directory renamed or copied whole: nothing of a secret
/// comes back, and the real home is unchanged afterwards.
#[test]
fn masks_renamed_linked_copied_or_unmounted_inside_the_layer_show_nothing() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hv_user();
    let tag = random_hex();
    let secrets = plant_secrets(&tag, 500);
    let script = r#"exec 2>&1
mv ~/.ssh ~/ssh-moved; ls -la ~/ssh-moved; cat ~/ssh-moved/id_ed25519
mv ~/.aws ~/aws-moved && cat ~/aws-moved/credentials
ln ~/.config/gh/hosts.yml ~/gh-link; cat ~/gh-link
ln -s ~/.kube/config ~/kube-sym; cat ~/kube-sym
cp -a ~/.config ~/cfg-copy; cat ~/cfg-copy/gh/hosts.yml
mv ~/.config ~/cfg-moved; cat ~/cfg-moved/gh/hosts.yml
umount ~/.kube; umount -l ~/.aws/credentials; umount -l ~/.ssh
rm -rf ~/.kube; ls -la ~/.kube; cat ~/.kube/config
python3 -c 'import os; os.rename(os.path.expanduser("~/.kube"), os.path.expanduser("~/k2"))'; cat ~/k2/config
cat /proc/self/mountinfo | grep -c . 
tar cf - -C ~ . 2>/dev/null | tr -c '[:print:]\n' '.' | grep -ao 'SECRET-[0-9a-f]*'
exit 0
"#;
    let mut watched = secrets.clone();
    for n in [
        "ssh-moved",
        "aws-moved",
        "gh-link",
        "kube-sym",
        "cfg-copy",
        "cfg-moved",
        "k2",
        ".ssh",
        ".aws",
        ".kube",
        ".config",
    ] {
        watched.push(home.join(n));
    }
    for mode in MODES {
        let before = state_of(&watched);
        let (ws, wrapper) = account_ws(mode);
        write_script(&ws, "attack.sh", script);
        let r = attack(&ws, &wrapper, "./attack.sh");
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        assert_nowhere(
            &format!("{mode:?}"),
            &r,
            &ws.state,
            &format!("SECRET-{tag}"),
        );
        assert_eq!(
            before,
            state_of(&watched),
            "{mode:?}: the real home changed"
        );
    }
    remove_secrets(&secrets);
}

/// The home's ordinary files these tests change: a shell's start-up file
/// and git's configuration (no credential in it: served as it is).
fn plant_dotfiles(tag: &str) -> Vec<PathBuf> {
    let (_, _, home) = hv_user();
    let mut out = Vec::new();
    for (rel, text) in [
        (".bashrc", format!("# bashrc {tag}\nalias ll='ls -l'\n")),
        (".profile", format!("# profile {tag}\n")),
        (".gitconfig", "[user]\n\tname = A B\n".to_string()),
    ] {
        let p = home.join(rel);
        put(&p, &text, 0o644);
        out.push(p);
    }
    let (u, g, _) = hv_user();
    for d in [".cache", ".config"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
        std::os::unix::fs::chown(home.join(d), Some(u), Some(g)).unwrap();
    }
    out
}

/// Writes outside the workspace dressed up so as not to be one: a home
/// file changed through a hard link made in a cache, through a symlink in
/// a cache, moved into a cache, changed in its metadata only (mode, times,
/// an extended attribute), truncated, written through
/// `/proc/self/root`, and a cache replaced by a symlink to `~/.config`.
/// Each run must carry the `view.outside_writes` finding (it needs
/// approval: the live lane will not make the write), list a row outside
/// the caches, and the real files stay as they were.
#[test]
fn a_home_write_dressed_as_a_cache_write_is_still_a_finding() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hv_user();
    let tag = random_hex();
    let files = plant_dotfiles(&tag);
    let attacks = [
        (
            "hard link into a cache",
            "ln ~/.gitconfig ~/.cache/g && printf '[alias]\\n\\tx = !evil\\n' >> ~/.cache/g",
        ),
        (
            "symlink in a cache",
            "ln -s ~/.bashrc ~/.cache/b && echo evil >> ~/.cache/b",
        ),
        ("moved into a cache", "mv ~/.bashrc ~/.cache/bashrc"),
        ("mode only", "chmod 600 ~/.profile"),
        ("times only", "touch -d 2001-01-01 ~/.profile"),
        (
            "xattr only",
            "python3 -c 'import os; os.setxattr(os.path.expanduser(\"~/.profile\"), \"user.hv\", b\"1\")'",
        ),
        ("truncated", ": > ~/.profile"),
        (
            "through /proc/self/root",
            "echo evil >> /proc/self/root\"$HOME\"/.profile",
        ),
        (
            "a cache replaced by a symlink",
            "rm -rf ~/.cache && ln -s ~/.config ~/.cache && echo evil > ~/.cache/autostart-evil",
        ),
    ];
    let mut watched = files.clone();
    for n in [".cache", ".config", ".cache/g", ".cache/b", ".cache/bashrc"] {
        watched.push(home.join(n));
    }
    let before = state_of(&watched);
    let mut passed_unseen = Vec::new();
    for mode in MODES {
        for (what, cmd) in attacks {
            let (ws, wrapper) = account_ws(mode);
            let r = attack(&ws, &wrapper, &format!("{cmd}; echo rc=$?"));
            assert!(
                r.out().contains("rc=0"),
                "{mode:?} {what}: the write itself failed: {r:?}"
            );
            let rows = r.json["rehearsal"]["outside_writes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let finding = r
                .reasons()
                .iter()
                .any(|m| m.starts_with("[view.outside_writes]"));
            let listed = rows.iter().any(|w| w["cache"] == false);
            if !finding || !listed || r.decision() == "promote" {
                passed_unseen.push(format!(
                    "{mode:?} {what}: decision {}, rows {}",
                    r.decision(),
                    serde_json::Value::Array(rows)
                ));
            }
            assert_eq!(
                before,
                state_of(&watched),
                "{mode:?} {what}: the real home changed"
            );
        }
    }
    for f in &files {
        let _ = std::fs::remove_file(f);
    }
    assert!(
        passed_unseen.is_empty(),
        "writes outside the workspace the record let through:\n{}",
        passed_unseen.join("\n")
    );
}

/// Names a command makes outside the workspace with control characters
/// (a newline, a terminal escape that clears the screen, one that sets
/// the window title, a right-to-left override), and a flood of rows (250
/// directories of the home written): the record stays valid JSON, the
/// finding is there with the rows past 200 counted, and neither the
/// record's text form (`dryrun show`) nor the reasons carry a raw control
/// character to the reviewer's terminal.
#[test]
fn control_characters_and_a_flood_in_outside_writes_reach_no_terminal() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home) = hv_user();
    let flood = home.join(".hvflood");
    for i in 0..250 {
        std::fs::create_dir_all(flood.join(format!("d{i}"))).unwrap();
    }
    chown_r(&flood, u, g);
    let script = r#"exec 2>&1
touch ~/"$(printf 'evil\nline')" ~/"$(printf 'x\033[2J\033[Hclear')" ~/"$(printf 't\033]0;pwned\007')" ~/"$(printf 'r\342\200\256gpj.exe')"
mkdir -p ~/"$(printf 'dir\033[31m')"/sub && touch ~/"$(printf 'dir\033[31m')"/sub/f
for i in $(seq 0 249); do echo x > ~/.hvflood/d$i/f; done
exit 0
"#;
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        write_script(&ws, "attack.sh", script);
        let r = attack(&ws, &wrapper, "./attack.sh");
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        assert!(
            r.json.is_object(),
            "{mode:?}: the record is not JSON: {r:?}"
        );
        assert_ne!(r.decision(), "promote", "{mode:?}");
        assert!(
            r.reasons()
                .iter()
                .any(|m| m.starts_with("[view.outside_writes]")),
            "{mode:?}: {:?}",
            r.reasons()
        );
        let rows = r.json["rehearsal"]["outside_writes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(rows.len() <= 200, "{mode:?}: {} rows", rows.len());
        assert!(
            r.json["rehearsal"]["outside_writes_unlisted"]
                .as_u64()
                .is_some_and(|n| n > 0),
            "{mode:?}: {}",
            r.json["rehearsal"]["outside_writes_unlisted"]
        );
        for reason in r.reasons() {
            assert!(
                !reason.chars().any(|c| c.is_control() || c == '\u{202e}'),
                "{mode:?}: a raw control character in a reason: {reason:?}"
            );
        }
        let id = run_id(&r);
        let show = ws
            .command_via(&wrapper)
            .args(["show", &id])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&show.stdout).into_owned()
            + &String::from_utf8_lossy(&show.stderr);
        assert!(show.status.success(), "{mode:?}: {text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'),
            "{mode:?}: `dryrun show` prints a raw control character:\n{text:?}"
        );
    }
    std::fs::remove_dir_all(&flood).unwrap();
}

/// Canaries in root's home (0600) and in the account's home (0644, under
/// a 0755 home: the test user could read it live), a tool in the
/// account's home, and symlinks to both homes in a directory the test
/// user owns outside the view's trees (`/dev/shm`).
struct OtherHomes {
    tag: String,
    root_canary: PathBuf,
    other_canary: PathBuf,
    other_bin: PathBuf,
    links: PathBuf,
}

impl OtherHomes {
    fn plant() -> OtherHomes {
        let (u, g, home) = hv_user();
        let tag = random_hex();
        let root_canary = PathBuf::from(format!("/root/hv-canary-{tag}"));
        std::fs::write(&root_canary, format!("ROOTSECRET-{tag}\n")).unwrap();
        std::fs::set_permissions(&root_canary, std::fs::Permissions::from_mode(0o600)).unwrap();
        let other_canary = home.join(format!("hv-canary-{tag}"));
        put(&other_canary, &format!("OTHERSECRET-{tag}\n"), 0o644);
        let other_bin = home.join(format!("bin-{tag}"));
        put(
            &other_bin.join(format!("hv-tool-{tag}")),
            &format!("#!/bin/sh\necho OTHERTOOL-{tag}\n"),
            0o755,
        );
        let links = PathBuf::from(format!("/dev/shm/hv-links-{tag}"));
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink("/root", links.join("to-root")).unwrap();
        std::os::unix::fs::symlink(&home, links.join("to-other")).unwrap();
        let (tu, tg) = test_user();
        chown_r(&links, tu, tg);
        let _ = (u, g);
        OtherHomes {
            tag,
            root_canary,
            other_canary,
            other_bin,
            links,
        }
    }

    fn secrets(&self) -> [String; 3] {
        let t = &self.tag;
        [
            format!("ROOTSECRET-{t}"),
            format!("OTHERSECRET-{t}"),
            format!("OTHERTOOL-{t}"),
        ]
    }
}

impl Drop for OtherHomes {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.root_canary);
        let _ = std::fs::remove_file(&self.other_canary);
        let _ = std::fs::remove_dir_all(&self.other_bin);
        let _ = std::fs::remove_dir_all(&self.links);
    }
}

/// The test user, through a root daemon, names root's home, the other
/// account's home and symlinks to them as its `HOME`, and puts them (and
/// the other account's tool directory, reached directly and through the
/// symlink) on its `PATH`: nothing of either home shows, the tool does
/// not run, and the record names the PATH directories it hid. Root
/// submitting for the test user's workspace with the same environment
/// fares no better.
#[test]
fn home_and_path_naming_other_homes_show_nothing_of_them() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let o = OtherHomes::plant();
    let (_, _, other_home) = hv_user();
    let _ = test_home();
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let t = &o.tag;
    let l = o.links.display();
    let cmd = format!(
        "exec 2>&1; echo HOME=$HOME; ls -A \"$HOME\"; cat \"$HOME\"/hv-canary-{t} /root/hv-canary-{t} {oh}/hv-canary-{t} {l}/to-root/hv-canary-{t} {l}/to-other/hv-canary-{t}; \
         ls -A /root {oh} {l}/to-other/; hv-tool-{t}; {l}/to-other/bin-{t}/hv-tool-{t}; exit 0",
        oh = other_home.display()
    );
    let path = format!(
        "/root:{ob}:{l}/to-root:{l}/to-other:{l}/to-other/bin-{t}:{oh}:/usr/bin:/bin",
        ob = o.other_bin.display(),
        oh = other_home.display()
    );
    let homes = [
        "/root".to_string(),
        other_home.display().to_string(),
        format!("{l}/to-root"),
        format!("{l}/to-other"),
        format!("{}", o.other_bin.display()),
    ];
    for home in &homes {
        for root_submits in [false, true] {
            let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                          "env": {"HOME": home, "PATH": path}});
            let (_keep, file) = agent_envelope_file(&body.to_string());
            let mut c = if root_submits {
                d.cli_root()
            } else {
                d.cli_user()
            };
            let r = run_json(
                c.current_dir(&ws.dir)
                    .args(["execute", "--json", "--file"])
                    .arg(&file)
                    .output()
                    .unwrap(),
            );
            let what = format!("HOME={home} root_submits={root_submits}");
            assert_eq!(r.exit_code(), Some(0), "{what}: {r:?}");
            for s in o.secrets() {
                assert_nowhere(&what, &r, &d.state, &s);
            }
            assert!(
                !r.out().contains(&format!("hv-canary-{t}\n")),
                "{what}: a listing shows the canary: {}",
                r.out()
            );
            let stripped = r.stripped();
            assert!(
                stripped.contains(&format!(
                    "hidden:{} (view.other_home)",
                    o.other_bin.display()
                )),
                "{what}: {stripped:?}"
            );
        }
    }
}

/// One root daemon, two users' runs at the same time: the account's run
/// holds a canary in its environment, its command line, its `/tmp` and
/// its home layer for some seconds while the test user's run looks for
/// it everywhere it can (`/proc`, `/home`, `/tmp`, `/var/tmp`). Neither
/// run sees the other, and nothing of either is left in the host's
/// `/tmp` afterwards.
#[test]
fn two_users_running_at_once_see_nothing_of_each_other() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hv_user();
    let _ = test_home();
    let tag = random_hex();
    let d = Daemon::start(&[]);
    // The account's run, submitted by root for the account's workspace.
    let (ws_b, _) = account_ws(Mode::RootEngine);
    let cmd_b = format!(
        "echo HVB-{tag} > /tmp/hvb-{tag}; echo HVB-{tag} > ~/hvb-{tag}; echo HVB-{tag} > /var/tmp/hvb-{tag}; sleep 6; echo HVB-done-{tag}"
    );
    let body_b = serde_json::json!({"command": cmd_b, "working_dir": ws_b.dir,
                                    "env": {"HOME": home, "PATH": "/usr/bin:/bin", "HVB": format!("HVB-{tag}")}});
    let (_kb, file_b) = agent_envelope_file(&body_b.to_string());
    let b = d
        .cli_root()
        .current_dir(&ws_b.dir)
        .args(["execute", "--json", "--file"])
        .arg(&file_b)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let ws_a = user_workspace();
    let cmd_a = format!(
        "for i in $(seq 1 30); do cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -a HVB; \
         ls -A /home /tmp /var/tmp /home/* 2>/dev/null | grep -a hvb; cat /tmp/hvb-* /var/tmp/hvb-* {h}/hvb-* 2>/dev/null; sleep 0.1; done; echo A-done; exit 0",
        h = home.display()
    );
    let r_a = submit_user(&d, &ws_a, &cmd_a, &[]);
    let r_b = run_json(b.wait_with_output().unwrap());
    assert!(r_a.out().contains("A-done"), "{r_a:?}");
    assert!(
        r_b.out().contains(&format!("HVB-done-{tag}")),
        "the account's run ran: {r_b:?}"
    );
    assert!(
        !reported(&r_a).contains(&format!("HVB-{tag}"))
            && !reported(&r_a).contains(&format!("hvb-{tag}")),
        "the test user saw the other run: {}",
        r_a.out()
    );
    let left = host_files_named(&format!("hvb-{tag}"));
    assert!(left.is_empty(), "left on the host: {left:?}");
}

/// Files another account and root keep 0600 in the host's `/tmp` (and a
/// 0700 directory of the account's there): the test user's run, through
/// a root daemon and through its own engine, can neither read them, nor
/// take them over (chmod, chown, copy-up by a write), and sees them owned
/// by someone else; the host files are unchanged.
#[test]
fn other_users_private_files_in_host_tmp_stay_private() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, _) = hv_user();
    let tag = random_hex();
    let dir = PathBuf::from(format!("/tmp/hv-private-{tag}"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let other = dir.join("other-0600");
    std::fs::write(&other, format!("OTHERTMP-{tag}\n")).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&other, Some(u), Some(g)).unwrap();
    let rootf = dir.join("root-0600");
    std::fs::write(&rootf, format!("ROOTTMP-{tag}\n")).unwrap();
    std::fs::set_permissions(&rootf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let private = dir.join("private-0700");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("inner"), format!("INNERTMP-{tag}\n")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    chown_r(&private, u, g);
    let before = snapshot_tree(&dir);
    let dd = dir.display();
    let cmd = format!(
        "exec 2>&1; id -u; stat -c '%n %u %a' {dd}/*; cat {dd}/other-0600 {dd}/root-0600 {dd}/private-0700/inner; \
         chmod 644 {dd}/other-0600 {dd}/root-0600; chown $(id -u) {dd}/other-0600; echo y >> {dd}/other-0600; \
         cp {dd}/other-0600 /tmp/hv-copy; cat /tmp/hv-copy; chmod 755 {dd}/private-0700; ls {dd}/private-0700; \
         cat {dd}/other-0600; exit 0"
    );
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let via_daemon = submit_user(&d, &ws, &cmd, &[]);
    let ws2 = Ws::new(Who::User);
    ws2.write("README.md", "x\n");
    let own = ws2.rehearse(&cmd, &[]);
    for (what, r, state) in [
        ("daemon", &via_daemon, d.state.clone()),
        ("own engine", &own, ws2.state.clone()),
    ] {
        assert_eq!(r.exit_code(), Some(0), "{what}: {r:?}");
        for s in ["OTHERTMP", "ROOTTMP", "INNERTMP"] {
            assert_nowhere(what, r, &state, &format!("{s}-{tag}"));
        }
        let (tu, _) = test_user();
        assert!(
            !r.out().contains(&format!("other-0600 {tu} ")),
            "{what}: the other account's file shows as the test user's: {}",
            r.out()
        );
    }
    assert_eq!(before, snapshot_tree(&dir), "the host files changed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run's namespaces seen from the host by another user: while the test
/// user's run sleeps, the account (another ordinary user) tries its
/// processes' `root`, `cwd`, `environ` and `fd` links, reading the run's
/// home and `/tmp` layers and writing into them and into the workspace's
/// upper layer. Nothing is reachable, the run's change set holds only
/// what its command wrote, and no mount of the run is left in the host's
/// mount table afterwards.
#[test]
fn a_runs_layers_are_out_of_another_users_reach() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, _) = hv_user();
    let _ = test_home();
    let tag = random_hex();
    let mounts_before = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    let cmd = format!(
        "echo RUNSECRET-{tag} > /tmp/run-{tag}; echo RUNSECRET-{tag} > ~/run-{tag}; echo ok > mine.txt; exec -a sleeper-{tag} sleep 5"
    );
    let body = serde_json::json!({"command": cmd, "working_dir": ws.dir,
                                  "env": {"HOME": test_home(), "PATH": "/usr/bin:/bin", "RUNENV": format!("RUNSECRET-{tag}")}});
    let (_k, file) = agent_envelope_file(&body.to_string());
    let child = d
        .cli_user()
        .current_dir(&ws.dir)
        .args(["execute", "--json", "--file"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pids = Vec::new();
    wait_until("the run's command", 30, || {
        pids = processes_with(&format!("sleeper-{tag}"))
            .into_iter()
            .filter_map(|l| l.split(':').next().and_then(|p| p.parse::<u32>().ok()))
            .collect();
        !pids.is_empty()
    });
    let th = test_home();
    let mut script = String::from("exec 2>&1\n");
    for p in &pids {
        script.push_str(&format!(
            "cat /proc/{p}/root/tmp/run-{tag} /proc/{p}/root{h}/run-{tag} /proc/{p}/environ; ls /proc/{p}/root/ /proc/{p}/cwd/ /proc/{p}/fd/; \
             echo injected > /proc/{p}/cwd/injected-{tag}; echo injected > /proc/{p}/root{w}/injected-{tag}; echo x > /proc/{p}/root/tmp/esc-{tag}\n",
            h = th.display(),
            w = ws.dir.display()
        ));
    }
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={u}"),
            &format!("--regid={g}"),
            "--clear-groups",
            "--",
            "bash",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout).into_owned();
    let r = run_json(child.wait_with_output().unwrap());
    assert!(
        !seen.contains(&format!("RUNSECRET-{tag}")),
        "another user read the run's layers: {seen}"
    );
    assert!(r.change("mine.txt").is_some(), "{r:?}");
    assert!(
        r.changes()
            .iter()
            .all(|c| !c["path"].as_str().unwrap_or("").contains("injected")),
        "another user's write is in the change set: {:?}",
        r.changes()
    );
    let left = host_files_named(&format!("-{tag}"));
    assert!(left.is_empty(), "left on the host: {left:?}");
    drop(d);
    std::thread::sleep(Duration::from_millis(300));
    let mounts_after = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let new: Vec<&str> = mounts_after
        .lines()
        .filter(|l| !mounts_before.contains(*l) && (l.contains("dryrun") || l.contains("overlay")))
        .collect();
    assert!(new.is_empty(), "mounts left on the host: {new:?}");
}

/// The home changes on the host while a run goes on (a dotfile manager
/// moving `~/.ssh` aside, `mv ~/.aws ~/.aws.bak` while reconfiguring, or
/// the agent's own user helping from outside): once the masks are in
/// place, the account renames its masked directory and the directory
/// holding a masked file, and renames a masked file in its directory. The command, polling the new names, must still read
/// nothing of the secrets.
#[test]
fn a_masked_directory_renamed_on_the_host_during_a_run_stays_masked() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, home) = hv_user();
    let tag = random_hex();
    let secrets = plant_secrets(&tag, 300);
    let script = r#"exec 2>&1
echo started > ready.txt
# Wait on a listing (a lookup of a name not there yet would be cached as
# absent), then read through the new names.
for i in $(seq 1 100); do
  ls -A ~ | grep -q aws-moved && break
  sleep 0.1
done
ls -la ~ | grep -a moved
for i in $(seq 1 100); do
  ls -A ~/.config/gh | grep -q hosts.yml.moved && break
  sleep 0.1
done
ls -la ~/.config/gh | grep -a hosts
cat ~/ssh-moved/id_ed25519 ~/aws-moved/credentials ~/.config/gh/hosts.yml.moved
ls -la ~/ssh-moved ~/aws-moved
exit 0
"#;
    let mut leaks = Vec::new();
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        write_script(&ws, "attack.sh", script);
        let body = serde_json::json!({"command": "./attack.sh", "working_dir": ws.dir,
                                      "env": {"HOME": home, "PATH": "/usr/bin:/bin"}});
        let p = ws.root.path().join("attack.json");
        std::fs::write(&p, body.to_string()).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        chown_r(&ws.dir, u, g);
        let child = ws
            .command_via(&wrapper)
            .args(["execute", "--json", "--file"])
            .arg(&p)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The run has started once its command is there (a process whose
        // command line names the script); then the masks are in place.
        wait_until("the run's command", 30, || {
            !processes_with("./attack.sh")
                .iter()
                .all(|l| l.contains("execute"))
        });
        std::thread::sleep(Duration::from_millis(700));
        let mv = |a: &str, b: &str| {
            let st = Command::new("setpriv")
                .args([
                    &format!("--reuid={u}"),
                    &format!("--regid={g}"),
                    "--clear-groups",
                    "--",
                    "mv",
                ])
                .arg(home.join(a))
                .arg(home.join(b))
                .status()
                .unwrap();
            assert!(st.success(), "mv {a} {b}");
        };
        mv(".ssh", "ssh-moved");
        mv(".aws", "aws-moved");
        mv(".config/gh/hosts.yml", ".config/gh/hosts.yml.moved");
        let r = run_json(child.wait_with_output().unwrap());
        mv("ssh-moved", ".ssh");
        mv("aws-moved", ".aws");
        mv(".config/gh/hosts.yml.moved", ".config/gh/hosts.yml");
        // The renames landed while the command ran (it polls for them and
        // they are made before it can finish), so the run is refused after
        // the command, its output and changes withheld: a mask stayed on an
        // old name.
        let error = r.json["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("is masked")
                && error.contains("renamed, removed or given another name on the host")
                && error.contains("withheld"),
            "{mode:?}: the host's renames during the run went unnoticed: {r:?}"
        );
        assert_eq!(
            r.json["rehearsal"],
            serde_json::Value::Null,
            "{mode:?}: {r:?}"
        );
        if leaked(&reported(&r), &format!("SECRET-{tag}"))
            || !files_holding(&ws.state, &format!("SECRET-{tag}")).is_empty()
        {
            leaks.push(format!("{mode:?}: {}", r.out()));
        }
    }
    remove_secrets(&secrets);
    assert!(
        leaks.is_empty(),
        "a masked file read after the host renamed it: {leaks:#?}"
    );
}

/// A second name of the homes on the host (a bind mount of `/home` under
/// `/srv`, as a machine whose homes live on a data volume has): the
/// account puts its own home and another user's home, reached by that
/// name, on its `PATH`. The masks cover the home's path only, so by the
/// other name the account's own masked files (0600: its own engine runs
/// with its own ids) and the test user's home would show, unmasked.
#[test]
fn a_path_directory_that_is_another_name_of_a_home_shows_no_secret() {
    let _l = lock();
    if !require_root() {
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.0.join("homes"))
                .status();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let (_, _, home) = hv_user();
    let th = test_home();
    let tag = random_hex();
    let secrets = plant_secrets(&tag, 200);
    let other = th.join(format!("hv-canary-{tag}"));
    std::fs::write(&other, format!("TESTUSERCANARY-{tag}\n")).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).unwrap();
    let srv = PathBuf::from(format!("/srv/hv-{tag}"));
    std::fs::create_dir_all(srv.join("homes")).unwrap();
    std::fs::set_permissions(&srv, std::fs::Permissions::from_mode(0o755)).unwrap();
    let guard = Unmount(srv.clone());
    let st = Command::new("mount")
        .args(["--bind", "/home"])
        .arg(srv.join("homes"))
        .status()
        .unwrap();
    assert!(st.success());
    let alias = srv.join("homes").join(home.file_name().unwrap());
    let talias = srv.join("homes").join(th.file_name().unwrap());
    let path = format!(
        "{}:{}:{}:/usr/bin:/bin",
        alias.display(),
        talias.display(),
        srv.join("homes").display()
    );
    let a = alias.display();
    let cmd = format!(
        "exec 2>&1; id; ls -ln {a}/.ssh {a}/.aws; cat {a}/.ssh/id_ed25519 {a}/.aws/credentials {a}/.kube/config {a}/.config/gh/hosts.yml | rev; cat {t}/hv-canary-{tag} | rev; exit 0",
        t = talias.display()
    );
    let mut leaks = Vec::new();
    for mode in MODES {
        let (ws, wrapper) = account_ws(mode);
        let r = attack_env(&ws, &wrapper, &cmd, serde_json::json!({"PATH": path}));
        assert_eq!(r.exit_code(), Some(0), "{mode:?}: {r:?}");
        for s in [format!("SECRET-{tag}"), format!("TESTUSERCANARY-{tag}")] {
            if leaked(&reported(&r), &s) {
                leaks.push(format!("{mode:?}: {s}"));
            }
        }
    }
    drop(guard);
    let _ = std::fs::remove_file(&other);
    remove_secrets(&secrets);
    assert!(leaks.is_empty(), "shown by another name: {leaks:#?}");
}

/// A `HOME` under `/tmp` or `/var/tmp` that the view does not show is
/// made for the command by the sandbox's init before the pivot. A `HOME`
/// that starts with `/tmp` or `/var/tmp` but climbs out with `..` names a
/// directory outside the new root: made there, on the host's own
/// filesystems (the init's mount namespace still holds them), it would
/// outlive the run. No such directory may exist on the host afterwards,
/// through the account's own engine, root's engine, or a root daemon
/// serving the test user.
#[test]
fn a_home_that_climbs_out_of_tmp_is_not_made_on_the_host() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (_, _, home) = hv_user();
    let tag = random_hex();
    let up = "/..".repeat(12);
    let targets = [
        format!("/var/tmp{up}/var/tmp/hv-esc-{tag}-vartmp"),
        format!("/tmp{up}{}/hv-esc-{tag}-home", home.display()),
        format!("/tmp{up}/dev/shm/hv-esc-{tag}-shm"),
    ];
    let mut made = Vec::new();
    for mode in MODES {
        for h in &targets {
            let (ws, wrapper) = account_ws(mode);
            let r = attack_env(
                &ws,
                &wrapper,
                "echo HOME=$HOME; ls -ld \"$HOME\"; exit 0",
                serde_json::json!({ "HOME": h }),
            );
            let left = host_files_named(&format!("hv-esc-{tag}"));
            if !left.is_empty() {
                made.push(format!("{mode:?} HOME={h}: {left:?} (run: {})", r.out()));
                for l in left {
                    let _ = std::fs::remove_dir_all(l);
                }
            }
        }
    }
    // The test user through a root daemon.
    let d = Daemon::start(&[]);
    let ws = user_workspace();
    for h in &targets {
        let body = serde_json::json!({"command": "echo HOME=$HOME; exit 0", "working_dir": ws.dir,
                                      "env": {"HOME": h, "PATH": "/usr/bin:/bin"}});
        let (_k, file) = agent_envelope_file(&body.to_string());
        let r = run_json(
            d.cli_user()
                .current_dir(&ws.dir)
                .args(["execute", "--json", "--file"])
                .arg(&file)
                .output()
                .unwrap(),
        );
        let left = host_files_named(&format!("hv-esc-{tag}"));
        if !left.is_empty() {
            made.push(format!("daemon HOME={h}: {left:?} (run: {})", r.out()));
            for l in left {
                let _ = std::fs::remove_dir_all(l);
            }
        }
    }
    assert!(made.is_empty(), "made on the host: {made:#?}");
}

/// The Claude Code hook door: the agent host's own environment is the
/// command's, so a `HOME` that climbs out of `/var/tmp` with `..` reaches
/// the view through the hook as well (its in-process engine, as the
/// account). A mutating command is rehearsed; nothing may be made on the
/// host.
#[test]
fn the_hook_door_makes_no_home_on_the_host_either() {
    let _l = lock();
    if !require_root() {
        return;
    }
    let (u, g, _) = hv_user();
    let tag = random_hex();
    let w = common::hook::hook_ws("dryrun-hv-hook-");
    std::fs::set_permissions(w.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_r(w.root.path(), u, g);
    let up = "/..".repeat(12);
    let home = format!("/var/tmp{up}/var/tmp/hv-esc-{tag}-hook");
    let event = common::hook::claude_event(&w.ws, "echo changed > a.txt");
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={u}"),
        &format!("--regid={g}"),
        "--clear-groups",
        "--",
    ])
    .arg(bin())
    .args(["hook", "claude-code"])
    .env_clear()
    .env("PATH", "/usr/bin:/bin")
    .env("HOME", &home)
    .env("DRYRUN_LOCAL", "1")
    .env("DRYRUN_STATE_DIR", &w.state)
    .current_dir(&w.ws)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut ch = c.spawn().unwrap();
    use std::io::Write;
    ch.stdin
        .take()
        .unwrap()
        .write_all(event.to_string().as_bytes())
        .unwrap();
    let out = ch.wait_with_output().unwrap();
    let left = host_files_named(&format!("hv-esc-{tag}"));
    for l in &left {
        let _ = std::fs::remove_dir_all(l);
    }
    assert!(
        left.is_empty(),
        "made on the host through the hook: {left:?} (hook: {} / {})",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
