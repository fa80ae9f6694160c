//! The Python client (`clients/python`, standard library only) and its
//! LangGraph-style `tools_node` example, tested with pytest against a real
//! daemon running this build. pytest lives in the test virtualenv
//! (`target/py-mcp`, installed by `.ci/run` or here, cached).

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn pytest_against_a_real_daemon() {
    let py = common::py_venv_with("pytest", "pytest==9.2.0");
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
