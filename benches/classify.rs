//! Classification throughput over tests/classifier_corpus.txt and over the
//! public corpus, tests/corpus/public_corpus.tsv (the target: at
//! least 100k commands/s on one core). Run with `cargo bench --bench
//! classify`; besides criterion's report it prints the measured commands
//! per second for each set.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dryrun::classify::{Options, classify};
use dryrun::policy::Policy;
use std::hint::black_box;
use std::time::Instant;

/// The allocator the `dryrun` binary classifies with (its `main.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CORPUS: &str = include_str!("../tests/classifier_corpus.txt");
const PUBLIC: &str = include_str!("../tests/corpus/public_corpus.tsv");

/// CPU time this thread has used, in seconds: on a machine shared with
/// other work, commands per CPU-second is what one core does, where the
/// wall clock also counts time the thread waited for a core.
fn thread_cpu_secs() -> f64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
        .unwrap_or(f64::NAN)
}

/// The corpus's commands; `DRYRUN_BENCH_CORPUS=FILE` measures another
/// labelled file instead (to compare two versions on the same commands).
fn commands() -> Vec<String> {
    let text = std::env::var("DRYRUN_BENCH_CORPUS")
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| CORPUS.to_string());
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .map(|(_, cmd)| cmd.replace('⏎', "\n"))
        .collect()
}

/// Every row of the public corpus, both parts (family, label, split,
/// command, source): the shapes agents and people actually type, where the
/// hand-written corpus is mostly attacks.
fn public_commands() -> Vec<String> {
    PUBLIC
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split('\t').nth(3))
        .map(|cmd| cmd.replace('⏎', "\n"))
        .collect()
}

/// Classifies `cmds` `rounds` times after a warm-up pass and prints
/// commands per second, wall clock and per CPU-second of this thread.
/// Returns the wall-clock seconds.
fn throughput(name: &str, cmds: &[String], rounds: usize, policy: &Policy, opts: &Options) -> f64 {
    for cmd in cmds {
        black_box(classify(cmd, policy, opts));
    }
    let start = Instant::now();
    let cpu_start = thread_cpu_secs();
    for _ in 0..rounds {
        for cmd in cmds {
            black_box(classify(black_box(cmd), policy, opts));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_secs() - cpu_start;
    let n = (rounds * cmds.len()) as f64;
    println!(
        "classify: {} {name} commands x {rounds} rounds in {secs:.3}s = {:.0} commands/s on one core (target >= 100000)",
        cmds.len(),
        n / secs
    );
    println!(
        "classify: {name}: {cpu:.3} CPU-seconds on this thread = {:.0} commands per CPU-second (what one core does when the machine is shared)",
        n / cpu
    );
    secs
}

fn bench(c: &mut Criterion) {
    let policy = Policy::default_policy();
    let opts = Options {
        workspace: Some("/home/me/project".into()),
        is_step: false,
    };
    let cmds = commands();

    // Plain wall-clock figures, single-threaded, after a warm-up pass.
    let rounds = 20;
    let secs = throughput("corpus", &cmds, rounds, &policy, &opts);
    throughput("public corpus", &public_commands(), 5, &policy, &opts);
    let n = (rounds * cmds.len()) as f64;

    // The share of that spent in the bash parse alone.
    let start = Instant::now();
    for _ in 0..rounds {
        for cmd in &cmds {
            let mut ex = dryrun::classify::parse::Extracted::default();
            let mut counter = 0;
            let _ = black_box(dryrun::classify::parse::extract(
                black_box(cmd),
                0,
                &mut ex,
                &mut counter,
            ));
            black_box(ex);
        }
    }
    let parse_secs = start.elapsed().as_secs_f64();
    println!(
        "classify: parsing alone (top level, no sh -c strings) {:.0} commands/s ({:.0}% of the time)",
        n / parse_secs,
        100.0 * parse_secs / secs
    );

    let mut g = c.benchmark_group("classify");
    g.throughput(Throughput::Elements(cmds.len() as u64));
    g.bench_function("corpus", |b| {
        b.iter(|| {
            for cmd in &cmds {
                black_box(classify(black_box(cmd), &policy, &opts));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
