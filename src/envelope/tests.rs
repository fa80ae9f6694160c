//! The envelope's validation: unknown fields, commands, working_dir,
//! limits and their ceilings, the caller's environment, hashing.

use super::*;

fn v(yaml: &str) -> Result<EnvelopeSpec, EnvelopeError> {
    parse_envelope("test", yaml)?.validate(
        Some(Path::new("/tmp")),
        &crate::workspace::owner::OwnerSession::start(&crate::workspace::owner::Creds::current())
            .unwrap(),
    )
}

#[test]
fn unknown_fields_are_errors_with_their_path() {
    let e = v("command: ls\nintent: {summary: x, expected_write: [a]}\n").unwrap_err();
    let s = e.to_string();
    assert!(s.contains("unknown field `expected_write`"), "{s}");
    assert!(s.contains("intent"), "{s}");
    let e = parse_envelope("t", r#"{"command":"ls","limts":{}}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `limts`"), "{e}");
}

#[test]
fn command_rules() {
    assert!(
        v("command: ''\n")
            .unwrap_err()
            .to_string()
            .starts_with("command: is empty")
    );
    assert!(
        v("intent: {summary: x}\n")
            .unwrap_err()
            .to_string()
            .starts_with("command: missing")
    );
    assert!(
        v("command: ls\nsteps: [ls]\n")
            .unwrap_err()
            .to_string()
            .contains("not both")
    );
    let s = v("steps: [make, 'make test']\n").unwrap();
    assert_eq!(s.command, "make && make test");
    assert_eq!(s.steps.len(), 2);
}

#[test]
fn working_dir_rules() {
    let e = v("command: ls\nworking_dir: rel/dir\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("working_dir:") && e.contains("relative"),
        "{e}"
    );
    let e = v("command: ls\nworking_dir: /definitely/missing/dir\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("working_dir:"), "{e}");
    let e = v("command: ls\nworking_dir: /\n").unwrap_err().to_string();
    assert!(e.contains("root directory"), "{e}");
}

#[test]
fn limits_asked_above_a_ceiling_are_refused_and_defaults_are_lowered() {
    let default = LimitsSpec {
        disk_mb: 2048,
        cpus: 8,
        ..DEFAULT_LIMITS
    };
    let ceiling = LimitsSpec {
        disk_mb: 64,
        timeout_s: 30,
        cpus: 8,
        ..LIMIT_MAXIMA
    };
    let mut s = v("command: ls\nlimits: {disk_mb: 1048576}\n").unwrap();
    assert_eq!(
        s.fit_limits(&default, &ceiling),
        Err(AboveCeiling {
            field: "disk_mb",
            asked: 1 << 20,
            ceiling: 64
        })
    );
    let mut s = v("command: ls\nlimits: {cpus: 9}\n").unwrap();
    assert_eq!(s.fit_limits(&default, &ceiling).unwrap_err().field, "cpus");
    let mut s = v("command: ls\nlimits: {disk_mb: 64, timeout_s: 30, cpus: 2}\n").unwrap();
    assert_eq!(s.fit_limits(&default, &ceiling), Ok(()));
    assert_eq!((s.limits.disk_mb, s.limits.cpus), (64, 2));
    // Defaults (disk 2048, timeout 60) above the ceilings are lowered;
    // the others are the engine's.
    let mut s = v("command: ls\n").unwrap();
    assert_eq!(s.fit_limits(&default, &ceiling), Ok(()));
    assert_eq!((s.limits.disk_mb, s.limits.timeout_s), (64, 30));
    assert_eq!(
        (s.limits.memory_mb, s.limits.cpus),
        (DEFAULT_LIMITS.memory_mb, 8)
    );
}

#[test]
fn the_callers_environment_is_filtered_before_it_is_kept() {
    let s = v("{\"command\": \"ls\", \"caller_env\": {\"HOME\": \"/h\", \"GH_TOKEN\": \"x\"}}")
        .unwrap();
    let c = s.caller_env.as_ref().unwrap();
    assert_eq!(c.removed, ["GH_TOKEN"]);
    let kept = serde_json::to_string(s.envelope_for_submission()).unwrap();
    assert!(
        kept.contains("\"HOME\":\"/h\"") && !kept.contains("GH_TOKEN"),
        "{kept}"
    );
    assert!(v("command: ls\n").unwrap().caller_env.is_none());
}

#[test]
fn the_callers_umask_is_a_mode_mask() {
    assert_eq!(
        v("{\"command\": \"ls\", \"caller_umask\": 63}")
            .unwrap()
            .caller_umask,
        Some(0o077)
    );
    let e = v("{\"command\": \"ls\", \"caller_umask\": 512}")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("caller_umask:"), "{e}");
    assert!(v("command: ls\n").unwrap().caller_umask.is_none());
}

#[test]
fn globs_and_limits() {
    let e = v("command: ls\nintent: {expected_writes: ['../x']}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("intent.expected_writes:") && e.contains(".."),
        "{e}"
    );
    let e = v("command: ls\nintent: {forbidden_paths: ['/etc']}\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("intent.forbidden_paths:"), "{e}");
    let e = v("command: ls\nlimits: {timeout_s: 0}\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("limits.timeout_s:"), "{e}");
    let e = v("command: ls\nlimits: {memory_mb: 99999999}\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("limits.memory_mb:"), "{e}");
    let e = v("command: ls\nintent: {network: host}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("network"), "{e}");
    let e = v("command: ls\nenv: {'A-B': x}\n").unwrap_err().to_string();
    assert!(e.starts_with("env.A-B:"), "{e}");
    let e = v("command: ls\nintent: {mode: read_only, expected_writes: [a]}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("read_only"), "{e}");
}

#[test]
fn hash_is_stable() {
    let a = v("command: ls\n").unwrap().envelope_hash();
    let b = v("{\"command\": \"ls\"}").unwrap().envelope_hash();
    assert_eq!(a, b);
}
