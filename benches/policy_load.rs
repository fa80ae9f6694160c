//! What a CLI run spends loading its policy: the shipped layers (read back
//! from the state directory's policy cache after the first run) with a
//! small workspace layer on top, as `engine::submit` loads it. Each round
//! changes the workspace layer's text, so the in-process memo never
//! answers. Run with `cargo bench --bench policy_load`; it prints the
//! median and spread in microseconds.

use dryrun::policy::{Policy, WorkspacePolicy};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 400;

fn workspace_layer(i: usize) -> WorkspacePolicy {
    WorkspacePolicy {
        name: ".dryrun/policy.yaml".into(),
        text: format!(
            "# round {i}\nprotected_paths: [\"secrets/\"]\nrules:\n  - id: local.deploy\n    match: {{command: deploy}}\n    level: ADMIN\n    score: 70\n    reason: deploys leave the machine\n"
        ),
    }
}

fn report(what: &str, mut us: Vec<f64>) {
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() - 1) as f64 * q) as usize];
    println!(
        "{what}: median {:.0} us (p10 {:.0}, p90 {:.0}, n {})",
        at(0.5),
        at(0.1),
        at(0.9),
        us.len()
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let system = tempfile::tempdir().unwrap();
    // The first load writes the cache; the rounds after read it back.
    let cold = Instant::now();
    Policy::load_cached(system.path(), Some(workspace_layer(0)), Some(state.path())).unwrap();
    println!(
        "first load (writes the cache): {:.0} us",
        cold.elapsed().as_secs_f64() * 1e6
    );
    let mut warm = Vec::new();
    for i in 1..=ROUNDS {
        let t = Instant::now();
        let p = Policy::load_cached(system.path(), Some(workspace_layer(i)), Some(state.path()));
        black_box(p.unwrap());
        warm.push(t.elapsed().as_secs_f64() * 1e6);
    }
    report("warm load (cache file + workspace layer)", warm);
    let mut yaml = Vec::new();
    for i in 0..ROUNDS / 8 {
        let t = Instant::now();
        black_box(Policy::load(system.path(), Some(workspace_layer(i))).unwrap());
        yaml.push(t.elapsed().as_secs_f64() * 1e6);
    }
    report("uncached load (YAML)", yaml);
}
