//! Output redaction: what a rehearsal printed or handed to a stubbed tool is
//! scrubbed of secrets before anything is persisted, journaled or returned
//! (logs are a second leak path).
//!
//! Two sources of matches, applied in this order to every text that comes
//! from the command's run (stdout, stderr, would-be actions' argv, cwd,
//! stdin head and answer, blocked attempts' details, failure messages):
//!
//! 1. **The values the run was given**: the envelope's `env` and, on the live
//!    lane's rerun, the `env_from_host` values. Every occurrence of a value is
//!    replaced by `[redacted:env:NAME]`. Values that would destroy ordinary
//!    output are not looked for: shorter than [`MIN_ENV_VALUE_LEN`] bytes,
//!    digits only and shorter than [`MIN_NUMERIC_ENV_VALUE_LEN`], one of
//!    [`COMMON_VALUES`], or (envelope `env` only) a configuration variable
//!    ([`crate::model::variables::is_configuration_name`]: `PATH`, `HOME`,
//!    `LANG`, `LC_*`, `GIT_AUTHOR_NAME`, `VIRTUAL_ENV`, ...). Host values on
//!    the live lane have no name exemption: they are secrets by design.
//!    The caller's own environment (`crate::caller_env`) is not looked for:
//!    what of it reaches the command passed the secret filter, and its
//!    values (paths, names, versions) are the output's ordinary words.
//! 2. **Known credential shapes** ([`detectors`]): cloud access keys, forge
//!    and chat tokens, private key blocks, JWTs, `password=` / `token=` /
//!    `secret=` / `api_key=` assignments, and high-entropy values assigned to
//!    names containing KEY, TOKEN, SECRET, PASSWORD, ... Generic high-entropy
//!    strings elsewhere (git object ids, UUIDs, hashes) are left alone.
//!
//! Everything works on bytes (`regex::bytes`, ASCII-only classes), so output
//! that is not UTF-8 is scrubbed the same way; a match never splits a UTF-8
//! sequence, so text that was valid stays valid. A text never grows by more
//! than [`MAX_GROWTH`] bytes: past that it is cut (and the cut is marked),
//! so the output caps still hold.

use std::collections::BTreeMap;

use aho_corasick::{AhoCorasick, MatchKind};
use serde::{Deserialize, Serialize};

use crate::model::RehearsalReport;
use crate::model::output::{ChunkEnds, Edit, move_offsets};

/// Given variables' values shorter than this are not redacted (they would
/// match ordinary words and numbers all over the output).
pub(crate) const MIN_ENV_VALUE_LEN: usize = 6;
/// A value made of digits only is redacted from this length on (ports,
/// counts, years and ids are shorter).
pub(crate) const MIN_NUMERIC_ENV_VALUE_LEN: usize = 10;
/// Values too common to be secrets.
pub(crate) const COMMON_VALUES: &[&str] = &[
    "C.UTF-8",
    "C.utf8",
    "en_US.UTF-8",
    "en_US.utf8",
    "POSIX",
    "true",
    "false",
    "enabled",
    "disabled",
    "production",
    "development",
    "staging",
    "localhost",
    "127.0.0.1",
    "/bin/sh",
    "/bin/bash",
    "/usr/bin/env",
    "xterm-256color",
    "warning",
    "critical",
];
/// How much a redacted text may grow over the original before it is cut.
pub(crate) const MAX_GROWTH: usize = 1024;
/// Appended where a text was cut after redaction.
pub(crate) const CUT_MARKER: &str = "\n[dryrun: output cut after redaction]\n";
/// Values assigned to secret-looking names are redacted when at least this
/// long and at least [`MIN_ENTROPY_BITS`] bits of Shannon entropy per byte.
pub(crate) const MIN_ENTROPY_LEN: usize = 20;
pub(crate) const MIN_ENTROPY_BITS: f64 = 3.5;

/// How many matches were replaced, by kind (`env:NAME`, `github_token`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redactions {
    pub count: u64,
    pub kinds: BTreeMap<String, u64>,
}

impl Redactions {
    fn add(&mut self, kind: &str) {
        self.count += 1;
        *self.kinds.entry(kind.to_string()).or_default() += 1;
    }
}

mod detectors;
pub(crate) use detectors::{Detector, detectors, may_match_a_detector, shannon_entropy};

/// The secrets of one run: the given variables' values, then the shapes.
#[derive(Default)]
pub(crate) struct Redactor {
    /// Variable names, in the order of `env_values`' patterns.
    env_names: Vec<String>,
    env_values: Option<AhoCorasick>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("Redactor")
            .field("env_names", &self.env_names)
            .finish()
    }
}

/// Is this given value worth looking for? (See the module docs.)
pub(crate) fn is_redactable_value(value: &str) -> bool {
    value.len() >= MIN_ENV_VALUE_LEN
        && !(value.bytes().all(|b| b.is_ascii_digit()) && value.len() < MIN_NUMERIC_ENV_VALUE_LEN)
        && !COMMON_VALUES.contains(&value)
}

/// Is this envelope variable configuration rather than a credential? The
/// one rule: [`crate::model::variables::is_configuration_name`] (the
/// locale, paths, the user's identity, toolchains' settings).
pub(crate) fn is_config_name(name: &str) -> bool {
    crate::model::variables::is_configuration_name(name)
}

impl Redactor {
    /// `env`: the envelope's variables (configuration names exempt);
    /// `host`: the live lane's host variables (none exempt).
    pub(crate) fn new<'a>(
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
        host: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let mut pairs: Vec<(String, String)> = env
            .into_iter()
            .filter(|(k, _)| !is_config_name(k))
            .chain(host)
            .filter(|(_, v)| is_redactable_value(v))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // Longest values first, so a value inside another is not matched
        // in its place; among equals, by name, for determinism.
        pairs.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        pairs.dedup_by(|a, b| a.1 == b.1);
        if pairs.is_empty() {
            return Redactor::default();
        }
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(pairs.iter().map(|(_, v)| v.as_bytes()))
            .ok();
        Redactor {
            // A marker names only a shell identifier (validation admits no
            // other; the one rule holds here as well).
            env_names: pairs
                .into_iter()
                .map(|(k, _)| {
                    if crate::model::text::is_shell_identifier(&k) {
                        k
                    } else {
                        "(a variable whose name is not a shell identifier)".into()
                    }
                })
                .collect(),
            env_values: ac,
        }
    }

    /// `text` with every secret replaced by `[redacted:KIND]`, counted in
    /// `tally`. Never longer than the input plus [`MAX_GROWTH`] (cut and
    /// marked past that).
    pub(crate) fn redact_bytes(&self, text: &[u8], tally: &mut Redactions) -> Vec<u8> {
        self.redact_bytes_moving(text, tally, &mut [])
    }

    /// [`Redactor::redact_bytes`], moving `offsets` (ascending, into
    /// `text`) to the same places in the result: where the output's chunks
    /// end (`model::output`). A secret split over two chunks is found all
    /// the same, and its marker is never split.
    pub(crate) fn redact_bytes_moving(
        &self,
        text: &[u8],
        tally: &mut Redactions,
        offsets: &mut [usize],
    ) -> Vec<u8> {
        if text.is_empty() {
            // Nothing to find, and the detectors are not compiled for it.
            return Vec::new();
        }
        let mut edits = Vec::new();
        let mut cur: Vec<u8> = match &self.env_values {
            Some(ac) if ac.is_match(text) => {
                let mut out = Vec::with_capacity(text.len());
                let mut last = 0;
                for m in ac.find_iter(text) {
                    out.extend_from_slice(&text[last..m.start()]);
                    let kind = format!("env:{}", self.env_names[m.pattern().as_usize()]);
                    let at = out.len();
                    push_marker(&mut out, &kind);
                    edits.push(Edit {
                        start: m.start(),
                        end: m.end(),
                        new_len: out.len() - at,
                    });
                    tally.add(&kind);
                    last = m.end();
                }
                out.extend_from_slice(&text[last..]);
                out
            }
            _ => text.to_vec(),
        };
        move_offsets(offsets, &edits);
        for d in detectors() {
            edits.clear();
            if let Some(next) = apply_detector(d, &cur, tally, &mut edits) {
                cur = next;
                move_offsets(offsets, &edits);
            }
        }
        if cur.len() > text.len() + MAX_GROWTH {
            cur.truncate(text.len());
            clamp(offsets, text.len());
            cur.extend_from_slice(CUT_MARKER.as_bytes());
        }
        cur
    }

    /// The command's stdout or stderr: redacted, and at most `allowed`
    /// bytes or its own length, whichever is more (cut and marked past
    /// that). Returns whether it was cut. `offsets` move as in
    /// [`Redactor::redact_bytes_moving`].
    pub(crate) fn redact_output(
        &self,
        text: &[u8],
        allowed: usize,
        tally: &mut Redactions,
        offsets: &mut [usize],
    ) -> (Vec<u8>, bool) {
        let mut out = self.redact_bytes_moving(text, tally, offsets);
        let allowed = allowed.max(text.len());
        if out.len() > allowed {
            let keep = allowed.saturating_sub(CUT_MARKER.len());
            out.truncate(keep);
            clamp(offsets, keep);
            out.extend_from_slice(CUT_MARKER.as_bytes());
            return (out, true);
        }
        (out, false)
    }

    /// Everything in a rehearsal's report that comes from the command's
    /// run: stdout, stderr, blocked attempts' details, and each would-be
    /// action's argv, cwd, stdin head and answer. Call before the report is
    /// judged, recorded or journaled. The argv and stdin hashes stay those
    /// of the real call (a replay looks answers up by them).
    ///
    /// `output_cap`: the run's output limit (stdout and stderr together).
    /// Markers longer than what they replace may use the room the output
    /// left below the cap, shared between the two streams; output already at
    /// the cap never grows.
    pub(crate) fn scrub_report(&self, report: &mut RehearsalReport, output_cap: u64) -> Redactions {
        let mut t = Redactions::default();
        let used = report.stdout.len() + report.stderr.len();
        let room = usize::try_from(output_cap)
            .unwrap_or(usize::MAX)
            .saturating_sub(used)
            / 2;
        // Where the output's chunks end in each stream, moved with the
        // redactions (`model::output`).
        let mut ends = ChunkEnds::of(
            &report.output_order,
            report.stdout.len(),
            report.stderr.len(),
        );
        let (out, cut_out) = self.redact_output(
            &report.stdout,
            report.stdout.len() + room,
            &mut t,
            &mut ends.stdout,
        );
        let (err, cut_err) = self.redact_output(
            &report.stderr,
            report.stderr.len() + room,
            &mut t,
            &mut ends.stderr,
        );
        report.output_order = ends.into_order(out.len(), err.len());
        report.stdout = out;
        report.stderr = err;
        report.output_truncated |= cut_out || cut_err;
        for b in &mut report.blocked {
            self.redact_in_place(&mut b.detail, &mut t);
        }
        // A name can carry data out (`AKIA....attacker.example`).
        for e in &mut report.egress {
            self.redact_in_place(&mut e.name, &mut t);
            if let Some(r) = e.reason.as_mut() {
                self.redact_in_place(r, &mut t);
            }
        }
        for a in &mut report.would_be_actions {
            for arg in a.argv.iter_mut().skip(1) {
                self.redact_in_place(arg, &mut t);
            }
            self.redact_in_place(&mut a.cwd, &mut t);
            self.redact_in_place(&mut a.stdin.head, &mut t);
            self.redact_in_place(&mut a.answer.stdout, &mut t);
            self.redact_in_place(&mut a.answer.stderr, &mut t);
        }
        t
    }

    /// [`Redactor::redact_bytes`] on text; stays valid UTF-8.
    pub(crate) fn redact_str(&self, text: &str, tally: &mut Redactions) -> String {
        let out = self.redact_bytes(text.as_bytes(), tally);
        match String::from_utf8(out) {
            Ok(s) => s,
            // Only a cut after redaction can split a character.
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// In place, for the record's text fields.
    pub(crate) fn redact_in_place(&self, text: &mut String, tally: &mut Redactions) {
        *text = self.redact_str(text, tally);
    }
}

fn clamp(offsets: &mut [usize], max: usize) {
    for o in offsets {
        *o = (*o).min(max);
    }
}

fn push_marker(out: &mut Vec<u8>, kind: &str) {
    out.extend_from_slice(b"[redacted:");
    out.extend_from_slice(kind.as_bytes());
    out.push(b']');
}

/// `None` when nothing matched (the text is kept as it is).
fn apply_detector(
    d: &Detector,
    text: &[u8],
    tally: &mut Redactions,
    edits: &mut Vec<Edit>,
) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut last = 0;
    if !d.may_match(text) {
        return None;
    }
    for caps in d.regex().captures_iter(text) {
        let span = caps
            .iter()
            .skip(1)
            .flatten()
            .next()
            .or_else(|| caps.get(0))
            .expect("a match has group 0");
        if span.start() < last || !(d.accept)(span.as_bytes()) {
            continue;
        }
        let o = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
        o.extend_from_slice(&text[last..span.start()]);
        let at = o.len();
        push_marker(o, d.kind);
        edits.push(Edit {
            start: span.start(),
            end: span.end(),
            new_len: o.len() - at,
        });
        tally.add(d.kind);
        last = span.end();
    }
    let mut o = out?;
    o.extend_from_slice(&text[last..]);
    Some(o)
}

#[cfg(test)]
mod tests;
