//! The Kubernetes manifests in `deploy/kubernetes/`, checked offline (no
//! cluster runs on the test machines): every manifest validates against the
//! Kubernetes JSON schemas, strictly (an unknown field is an error), with
//! `kubernetes-validate` (pinned, with its bundled schemas, installed into
//! `target/k8s-validate` by tests/run.sh); a broken copy fails naming the
//! file and the field; every `dryrun daemon` flag the DaemonSet passes
//! exists in `dryrun daemon --help`; the ConfigMap's system policy loads as
//! dryrun's policy.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes version the schemas are checked against.
const KUBE_VERSION: &str = "1.37.0";

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

fn manifests() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(manifests_dir())
        .expect("deploy/kubernetes exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    v
}

/// The validator, installed by tests/run.sh; missing, the test fails.
fn validator() -> PathBuf {
    let venv = std::env::var_os("DRYRUN_TEST_K8S_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/k8s-validate"));
    let bin = venv.join("bin/kubernetes-validate");
    assert!(
        bin.is_file(),
        "{} is missing: run `./tests/run.sh --setup-only` (it installs the pinned \
         kubernetes-validate into target/k8s-validate)",
        bin.display()
    );
    bin
}

/// (success, combined output) of validating `files`.
fn validate(files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(validator())
        .args([
            "--strict",
            "--no-warn",
            "--kubernetes-version",
            KUBE_VERSION,
        ])
        .args(files)
        .output()
        .expect("run kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn documents(path: &Path) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn find_kind(kind: &str) -> serde_yaml::Value {
    manifests()
        .iter()
        .flat_map(|p| documents(p))
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes"))
}

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    let files = manifests();
    let kinds: Vec<String> = files
        .iter()
        .flat_map(|p| documents(p))
        .map(|d| d["kind"].as_str().unwrap_or("").to_string())
        .collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "DaemonSet",
        "Deployment",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in {kinds:?}");
    }
    for f in &files {
        let (ok, out) = validate(std::slice::from_ref(f));
        assert!(ok, "{} does not validate:\n{out}", f.display());
        assert!(out.contains("passed"), "{}: {out}", f.display());
    }
}

#[test]
fn a_broken_manifest_fails_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(manifests_dir().join("40-daemonset.yaml")).unwrap();
    // A misspelt field, as a hand edit would make it.
    let bad = good.replacen("periodSeconds: 30", "periodSecnds: 30", 1);
    assert_ne!(
        bad, good,
        "the DaemonSet's liveness probe has periodSeconds: 30"
    );
    let path = dir.path().join("broken-daemonset.yaml");
    std::fs::write(&path, bad).unwrap();
    let (ok, out) = validate(std::slice::from_ref(&path));
    assert!(!ok, "a misspelt field validated:\n{out}");
    assert!(
        out.contains("broken-daemonset.yaml"),
        "no file named: {out}"
    );
    assert!(
        out.contains("livenessProbe") && out.contains("periodSecnds"),
        "no field named: {out}"
    );
    // A wrong type, too.
    let bad = good.replacen("hostPID: true", "hostPID: \"yes\"", 1);
    std::fs::write(&path, bad).unwrap();
    let (ok, out) = validate(std::slice::from_ref(&path));
    assert!(!ok, "a string hostPID validated:\n{out}");
    assert!(out.contains("hostPID"), "no field named: {out}");
}

#[test]
fn the_daemonset_passes_only_flags_dryrun_daemon_has() {
    let help = Command::new(env!("CARGO_BIN_EXE_dryrun"))
        .args(["daemon", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    let known = |flag: &str| {
        help.lines()
            .map(str::trim_start)
            .any(|l| l.starts_with(&format!("{flag} ")) || l == flag)
    };
    let ds = find_kind("DaemonSet");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"][0].as_str(), Some("daemon"), "{c:?}");
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let flags: Vec<&str> = args
        .iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap())
        .collect();
    for want in [
        "--socket",
        "--socket-group",
        "--state-dir",
        "--approver-group",
        "--fleet-config",
    ] {
        assert!(flags.contains(&want), "the DaemonSet does not pass {want}");
    }
    for flag in flags {
        assert!(known(flag), "`dryrun daemon --help` has no {flag}:\n{help}");
    }
    // The socket is where the hostPath and the probe say it is.
    assert!(
        args.contains(&"--socket=/run/dryrun/dryrun.sock"),
        "{args:?}"
    );
    let probe = format!("{:?}", c["livenessProbe"]["exec"]["command"]);
    assert!(
        probe.contains("/run/dryrun/dryrun.sock") && probe.contains("/v1/health"),
        "{probe}"
    );
}

#[test]
fn the_configmap_policy_loads_as_dryruns_system_policy() {
    let cm = find_kind("ConfigMap");
    let data = cm["data"].as_mapping().expect("ConfigMap data");
    assert!(!data.is_empty());
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in data {
        std::fs::write(
            dir.path().join(name.as_str().unwrap()),
            text.as_str().unwrap(),
        )
        .unwrap();
    }
    if let Err(e) = dryrun::policy::Policy::load(dir.path(), None) {
        panic!("the ConfigMap's policy does not load: {e}");
    }
}

#[test]
fn the_fleet_secret_is_a_fleet_config_the_daemon_loads_where_the_daemonset_mounts_it() {
    use std::os::unix::fs::PermissionsExt;
    let secret = find_kind("Secret");
    let data = &secret["stringData"];
    let config = data["fleet.yaml"].as_str().expect("stringData fleet.yaml");
    let password = data["password"].as_str().expect("stringData password");
    // The DaemonSet mounts each key as one file (subPath, no link), root's,
    // mode 0400, where --fleet-config and password_file name them.
    let ds = find_kind("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let vol = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"].as_str() == Some("dryrun-fleet"))
        .expect("a volume of the dryrun-fleet Secret");
    assert_eq!(
        vol["secret"]["defaultMode"].as_u64(),
        Some(0o400),
        "{vol:?}"
    );
    let name = vol["name"].as_str().unwrap();
    let mounts: Vec<(&str, &str)> = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|m| m["name"].as_str() == Some(name))
        .map(|m| {
            (
                m["subPath"].as_str().expect("mounted by subPath"),
                m["mountPath"].as_str().unwrap(),
            )
        })
        .collect();
    let at = |key: &str| {
        mounts
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, p)| p.to_string())
            .unwrap_or_else(|| panic!("the Secret's {key} is not mounted: {mounts:?}"))
    };
    let args = format!("{:?}", pod["containers"][0]["args"]);
    assert!(
        args.contains(&format!("--fleet-config={}", at("fleet.yaml"))),
        "{args}"
    );
    // The config as the daemon reads it, its password_file pointed at the
    // copy here (same key, same mode).
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("password");
    std::fs::write(&pw, password).unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o400)).unwrap();
    let mounted_pw = at("password");
    assert!(
        config.contains(&format!("password_file: {mounted_pw}\n")),
        "the config's password_file is not where the password is mounted ({mounted_pw}):\n{config}"
    );
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, config.replace(&mounted_pw, pw.to_str().unwrap())).unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o400)).unwrap();
    let spec = dryrun::FleetSpec::load(Some(&cfg), None)
        .unwrap_or_else(|e| panic!("the Secret's fleet.yaml does not load: {e}"));
    assert!(spec.url.starts_with("postgresql://"), "{}", spec.url);
    assert_eq!(spec.password.as_deref(), Some(password));
}
