//! The Python client (`clients/python`, standard library only) and its
//! LangGraph-style `tools_node` example, tested with pytest against a real
//! daemon running this build. pytest lives in the test virtualenv
//! (`target/py-mcp`, installed by `.ci/run` or here, cached).

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn pytest_against_a_real_daemon() {
    let venv = std::env::var_os("DRYRUN_TEST_PY_MCP")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/py-mcp"));
    let py = venv.join("bin/python");
    let has_pytest = Command::new(&py)
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_pytest {
        if !py.exists() {
            assert!(
                Command::new("python3")
                    .args(["-m", "venv"])
                    .arg(&venv)
                    .status()
                    .unwrap()
                    .success()
            );
        }
        assert!(
            Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "pytest==9.2.0"])
                .status()
                .unwrap()
                .success(),
            "pip install pytest failed (.ci/run installs it)"
        );
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python");
    let out = Command::new(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&dir)
        .env("DRYRUN_BIN", common::bin())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
