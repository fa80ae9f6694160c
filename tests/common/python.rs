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
    let out = Command::new(&python)
        .args(["-m", "pip", "install", "--no-index", "--quiet"])
        .arg(&wheel)
        .output()
        .expect("the venv's pip runs");
    assert!(
        out.status.success(),
        "setuptools into {}: {}",
        venv.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
