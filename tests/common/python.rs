//! Python set-up the dependency tests share.

use std::path::Path;
use std::process::Command;

/// Gives a promoted venv a build backend. Python 3.12 and later make venvs
/// without setuptools (ensurepip stopped bundling it), and the tests that
/// install a local sdist with `--no-build-isolation` need one in the venv:
/// it is installed here, host side and offline, from the distribution's
/// wheel (Debian's python3-setuptools-whl), before the run under test. A venv
/// that already has setuptools (Python 3.11 and older) is left as it is.
pub fn venv_build_backend(venv: &Path) {
    let python = venv.join("bin/python");
    let has = Command::new(&python)
        .args(["-c", "import setuptools"])
        .output()
        .expect("the venv's python runs");
    if has.status.success() {
        return;
    }
    let wheel = std::fs::read_dir("/usr/share/python-wheels")
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("setuptools-") && n.ends_with(".whl"))
        });
    let Some(wheel) = wheel else {
        panic!(
            "no setuptools wheel in /usr/share/python-wheels: install the Debian package python3-setuptools-whl (tests/run.sh does)"
        );
    };
    venv_install_wheel(venv, &wheel);
}

/// The pinned setuptools wheel with PEP 660 editable installs (setuptools
/// 80.9.0, benches/fidelity/pins.json), fetched by tests/run.sh into the
/// fidelity cache.
pub fn pinned_build_backend() -> std::path::PathBuf {
    let wheel = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/fidelity/cache/wheels/setuptools-80.9.0-py3-none-any.whl");
    assert!(
        wheel.is_file(),
        "{} is missing: tests/run.sh fetches it (benches/fidelity/fidelity.py prepare)",
        wheel.display()
    );
    wheel
}

/// Installs `wheel` into `venv` host side, offline.
pub fn venv_install_wheel(venv: &Path, wheel: &Path) {
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "--no-index", "--quiet"])
        .arg(wheel)
        .output()
        .expect("the venv's pip runs");
    assert!(
        out.status.success(),
        "{} into {}: {}",
        wheel.display(),
        venv.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A project setuptools builds with PEP 660 in a flat layout (so an
/// editable install of it is setuptools' finder): `pyproject.toml` and
/// `NAME/__init__.py` under `dir`.
pub fn write_flat_project(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(dir.join(name).join("__init__.py"), "X = 1\n").unwrap();
    std::fs::write(
        dir.join("pyproject.toml"),
        format!(
            "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"{name}\"\nversion = \"0.1.0\"\n\n[tool.setuptools]\npackages = [\"{name}\"]\n"
        ),
    )
    .unwrap();
}

/// The same project in a `src/` layout (an editable install of it is a
/// `.pth` of one path).
pub fn write_src_project(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join("src").join(name)).unwrap();
    std::fs::write(dir.join("src").join(name).join("__init__.py"), "X = 1\n").unwrap();
    std::fs::write(
        dir.join("pyproject.toml"),
        format!(
            "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"{name}\"\nversion = \"0.1.0\"\n\n[tool.setuptools]\npackages = [\"{name}\"]\npackage-dir = {{\"\" = \"src\"}}\n"
        ),
    )
    .unwrap();
}
