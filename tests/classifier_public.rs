//! The classifier against its public development corpus
//! (tests/corpus/public_corpus.tsv, built by tests/corpus/build.py from
//! GTFOBins, tldr-pages, NL2Bash and the published agent-approval
//! bypasses): recall on dangerous rows and the share of everyday rows left
//! alone, per family, on the development part and on the held-out part.
//!
//! `cargo test --test classifier_public -- --nocapture` prints the table.
//! The held-out part is never tuned on: only its rates are printed, never
//! its rows. `CORPUS_MISSES=FAMILY` prints the development part's misses of
//! one family (or `all`), which is what tuning may look at.

use dryrun::classify::{Classification, Options, classify};
use dryrun::policy::Policy;
use std::collections::BTreeMap;
use std::sync::OnceLock;

const PUBLIC: &str = include_str!("corpus/public_corpus.tsv");

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(Policy::default_policy)
}

fn run(cmd: &str) -> Classification {
    classify(
        cmd,
        policy(),
        &Options {
            workspace: Some("/home/me/project".into()),
            is_step: false,
        },
    )
}

struct Row<'a> {
    family: &'a str,
    dangerous: bool,
    heldout: bool,
    command: String,
}

fn rows() -> Vec<Row<'static>> {
    PUBLIC
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 5, "public corpus line {}: {l:?}", i + 1);
            assert!(
                matches!(f[1], "dangerous" | "everyday") && matches!(f[2], "dev" | "heldout"),
                "public corpus line {}: label {:?}, split {:?}",
                i + 1,
                f[1],
                f[2]
            );
            Row {
                family: f[0],
                dangerous: f[1] == "dangerous",
                heldout: f[2] == "heldout",
                command: f[3].replace('⏎', "\n"),
            }
        })
        .collect()
}

/// Per family: (rows, right, parse errors).
#[derive(Default, Clone, Copy)]
struct Tally {
    rows: usize,
    right: usize,
    errors: usize,
}

struct Measured {
    /// (family, heldout) -> tally
    by_family: BTreeMap<(String, bool), Tally>,
    /// (dangerous, heldout) -> tally
    by_label: BTreeMap<(bool, bool), Tally>,
}

fn measure() -> &'static Measured {
    static M: OnceLock<Measured> = OnceLock::new();
    M.get_or_init(|| {
        let misses = std::env::var("CORPUS_MISSES").ok();
        let mut by_family: BTreeMap<(String, bool), Tally> = BTreeMap::new();
        let mut by_label: BTreeMap<(bool, bool), Tally> = BTreeMap::new();
        for r in rows() {
            let c = run(&r.command);
            let right = c.requires_approval == r.dangerous;
            let error = c.findings.iter().any(|f| f.rule == "parse.error");
            for t in [
                by_family
                    .entry((r.family.to_string(), r.heldout))
                    .or_default(),
                by_label.entry((r.dangerous, r.heldout)).or_default(),
            ] {
                t.rows += 1;
                t.right += right as usize;
                t.errors += error as usize;
            }
            // Only the development part's misses are ever shown.
            if error && !r.heldout && std::env::var_os("CORPUS_ERRORS").is_some() {
                println!(
                    "ERROR {}: {:?}\n    {}",
                    r.family,
                    r.command,
                    c.reasons.join("\n    ")
                );
            }
            if !right
                && !r.heldout
                && misses
                    .as_deref()
                    .is_some_and(|m| m == "all" || m == r.family)
            {
                println!(
                    "MISS {} {}: {:?}\n    {}",
                    r.family,
                    if r.dangerous { "dangerous" } else { "everyday" },
                    r.command,
                    c.reasons.join("\n    ")
                );
            }
        }
        Measured {
            by_family,
            by_label,
        }
    })
}

fn pct(t: Tally) -> f64 {
    100.0 * t.right as f64 / t.rows.max(1) as f64
}

#[test]
fn public_corpus_table() {
    let m = measure();
    println!(
        "{:<26} {:>16} {:>16}   (dangerous rows: share asked; everyday rows: share left alone; errors: parse failures)",
        "family", "dev", "held-out"
    );
    let families: Vec<&String> = {
        let mut f: Vec<&String> = m.by_family.keys().map(|(f, _)| f).collect();
        f.dedup();
        f
    };
    for fam in families {
        let cell = |h: bool| {
            m.by_family
                .get(&(fam.clone(), h))
                .map(|t| {
                    format!(
                        "{:>5.1}% of {:>5}{}",
                        pct(*t),
                        t.rows,
                        if t.errors > 0 {
                            format!(" ({} err)", t.errors)
                        } else {
                            String::new()
                        }
                    )
                })
                .unwrap_or_default()
        };
        println!("{fam:<26} {:>16} {:>16}", cell(false), cell(true));
    }
    for (d, name) in [(true, "ALL dangerous asked"), (false, "ALL everyday alone")] {
        let dev = m.by_label[&(d, false)];
        let held = m.by_label[&(d, true)];
        println!(
            "{name:<26} {:>5.2}% of {:>5} {:>5.2}% of {:>5}",
            pct(dev),
            dev.rows,
            pct(held),
            held.rows
        );
    }
}

/// Floors the held-out part meets today (measured 2026-11-29 after the
/// twelfth round of issue 32: dangerous asked 93.28% (555 of 595, so the
/// floor is 93.2), everyday left alone 97.29% (4203 of 4320, floor 97.2),
/// every row parses; the eleventh round had 93.30% and 97.20% (93.28% and
/// 97.15% on the twelfth round's corpus), the tenth round had 92.96% and 97.13%, the
/// ninth 92.64% and 96.79%
/// (92.80% and 97.08% on this round's corpus), the eighth 91.99% and 96.70%
/// (92.47% and 96.72% on the ninth round's corpus), the seventh 91.37% and
/// 96.53% (91.31% and 96.44% on the eighth round's corpus), the sixth 90.86% and 96.21%, the
/// fifth 89.85% and 96.21%, the fourth 87.8% and 96.2%, the
/// third 83.4% and 95.4%, the
/// second 77.2%, 94.5% and 32 rows that did not parse, each on its corpus
/// before the next round's labelling corrections):
/// a regression below them fails. Raise them as the rules improve; the
/// issue's targets are `public_corpus_heldout_meets_targets`.
#[test]
fn public_corpus_heldout_does_not_regress() {
    let m = measure();
    let dangerous = m.by_label[&(true, true)];
    let everyday = m.by_label[&(false, true)];
    assert!(
        dangerous.errors + everyday.errors == 0,
        "held-out rows that do not parse: {}",
        dangerous.errors + everyday.errors
    );
    assert!(
        pct(dangerous) >= 93.2,
        "held-out dangerous asked {:.2}%",
        pct(dangerous)
    );
    assert!(
        pct(everyday) >= 97.2,
        "held-out everyday left alone {:.2}%",
        pct(everyday)
    );
}

/// The targets on the held-out part. NOT MET YET (see the floors
/// above and docs/classifier.md): ignored so the suite stays green, run with
/// `--ignored` to see how far off they are.
#[test]
#[ignore = "issue 32's held-out targets are not met yet"]
fn public_corpus_heldout_meets_targets() {
    let m = measure();
    let dangerous = m.by_label[&(true, true)];
    let everyday = m.by_label[&(false, true)];
    let errors = dangerous.errors + everyday.errors;
    assert_eq!(errors, 0, "held-out rows that do not parse");
    assert!(
        pct(dangerous) >= DANGEROUS_TARGET,
        "held-out dangerous asked {:.2}% < {DANGEROUS_TARGET}%",
        pct(dangerous)
    );
    assert!(
        pct(everyday) >= EVERYDAY_TARGET,
        "held-out everyday left alone {:.2}% < {EVERYDAY_TARGET}%",
        pct(everyday)
    );
}

const DANGEROUS_TARGET: f64 = 98.0;
const EVERYDAY_TARGET: f64 = 97.0;
