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
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};
use regex::bytes::Regex;
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

/// One credential shape: matches of `re` are redacted as `kind`. The span
/// replaced is the first capture group that took part in the match (the
/// value of an assignment, keeping its name), else the whole match.
///
/// Its regex is compiled the first time a text passes its `gate`: a
/// necessary condition of every match (literal text each match holds), so
/// output with nothing a detector could match, most output, costs no
/// compilation (about a millisecond for all of them).
pub(crate) struct Detector {
    pub kind: &'static str,
    pattern: String,
    re: std::sync::OnceLock<Regex>,
    gate: Gate,
    /// Replace only when this holds for the value (entropy, placeholders).
    accept: fn(&[u8]) -> bool,
}

/// What every match of a detector holds.
enum Gate {
    /// One of these, as written.
    Literal(&'static [&'static str]),
    /// An `=` or `:`, and one of these words, ASCII case ignored.
    Assigned(&'static [&'static str]),
}

impl Detector {
    /// Could this detector match somewhere in `text`? False only when no
    /// match is possible.
    pub(crate) fn may_match(&self, text: &[u8]) -> bool {
        let has = |hay: &[u8], w: &str| hay.windows(w.len()).any(|x| x == w.as_bytes());
        match self.gate {
            Gate::Literal(ls) => ls.iter().any(|l| has(text, l)),
            Gate::Assigned(words) => {
                text.iter().any(|c| *c == b'=' || *c == b':') && {
                    let lower = text.to_ascii_lowercase();
                    words.iter().any(|w| has(&lower, w))
                }
            }
        }
    }

    fn regex(&self) -> &Regex {
        self.re.get_or_init(|| {
            Regex::new(&format!("(?-u){}", self.pattern)).expect("detector patterns compile")
        })
    }
}

/// Could any detector match somewhere in `text`? (The caller's
/// environment filter asks before it runs them on a value.)
pub(crate) fn may_match_a_detector(text: &[u8]) -> bool {
    detectors().iter().any(|d| d.may_match(text))
}

fn always(_: &[u8]) -> bool {
    true
}

/// Shannon entropy of `v` in bits per byte.
pub(crate) fn shannon_entropy(v: &[u8]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in v {
        counts[b as usize] += 1;
    }
    let n = v.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Not a placeholder (`$TOKEN`, `${X}`, `<token>`, `***`, `%s`, an
/// earlier redaction) and not a bare word that prose puts after `token:`.
fn real_value(v: &[u8]) -> bool {
    let placeholder = matches!(v.first(), Some(b'$' | b'<' | b'*' | b'%' | b'{' | b'['))
        || v.iter()
            .all(|&b| b == b'x' || b == b'X' || b == b'*' || b == b'.');
    !placeholder && !matches!(v, b"null" | b"none" | b"None" | b"true" | b"false")
}

fn high_entropy(v: &[u8]) -> bool {
    v.len() >= MIN_ENTROPY_LEN && real_value(v) && shannon_entropy(v) >= MIN_ENTROPY_BITS
}

/// Between a name and its value: an optional closing quote, then `=`, `:`
/// or `:=` with spaces around (an opening quote is each pattern's own).
const ASSIGN: &str = r#"["']?[ \t]*(?::=|[:=])[ \t]*"#;

/// The credential shapes, in the order they are applied.
pub(crate) fn detectors() -> &'static [Detector] {
    static DETECTORS: LazyLock<Vec<Detector>> = LazyLock::new(|| {
        let d = |kind, gate, re: &str, accept| Detector {
            kind,
            pattern: re.to_string(),
            re: std::sync::OnceLock::new(),
            gate,
            accept,
        };
        const ASSIGNED_WORDS: &[&str] =
            &["token", "secret", "key", "passwd", "password", "passphrase"];
        const NAME_WORDS: &[&str] = &["key", "token", "secret", "passw", "credential", "auth"];
        vec![
            // A PEM private key block through its END line; a block cut
            // short (output cap, stdin head) up to where its body stops.
            d(
                "private_key",
                Gate::Literal(&["PRIVATE KEY"]),
                r"-----BEGIN[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----(?s:.*?)-----END[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----|-----BEGIN[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----[A-Za-z0-9+/=:,\r\n \t\\-]*",
                always,
            ),
            d(
                "aws_access_key",
                Gate::Literal(&["AKIA", "ASIA", "ABIA", "ACCA", "AROA", "AIDA"]),
                r"\b(?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[A-Z0-9]{16}\b",
                always,
            ),
            d(
                "github_token",
                Gate::Literal(&["gh", "github_pat_"]),
                r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
                always,
            ),
            d(
                "gitlab_token",
                Gate::Literal(&["glpat-"]),
                r"\bglpat-[A-Za-z0-9_-]{20,}",
                always,
            ),
            d(
                "slack_token",
                Gate::Literal(&["xox"]),
                r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
                always,
            ),
            d(
                "stripe_key",
                Gate::Literal(&["k_live_"]),
                r"\b[sr]k_live_[A-Za-z0-9]{16,}\b",
                always,
            ),
            d(
                "gcp_api_key",
                Gate::Literal(&["AIza"]),
                r"\bAIza[0-9A-Za-z_-]{35}\b",
                always,
            ),
            // header.payload.signature, base64url, the header a JSON object.
            d(
                "jwt",
                Gate::Literal(&["eyJ"]),
                r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
                always,
            ),
            // AWS secret access keys: 40 base64 characters assigned to a
            // name that says so.
            d(
                "aws_secret_key",
                Gate::Assigned(&["aws"]),
                &format!(
                    r#"(?i)aws[A-Za-z0-9_.-]{{0,20}}(?:secret|sk)[A-Za-z0-9_.-]{{0,30}}{ASSIGN}["']?([A-Za-z0-9/+]{{40}})(?:[^A-Za-z0-9/+=]|\z)"#
                ),
                always,
            ),
            // password=..., passwd: ..., DB_PASSWORD=..., token=...,
            // secret=..., api_key=... (a bare token/secret/api_key name, or
            // any name ending in a password word): any real value.
            d(
                "assignment",
                Gate::Assigned(ASSIGNED_WORDS),
                &format!(
                    r#"(?i)(?:(?:\A|[^A-Za-z0-9_.-])(?:token|secret|api[_-]?key|apikey|access[_-]?token|auth[_-]?token|client[_-]?secret)|pass(?:wd|word|phrase)){ASSIGN}(?:"([^"\r\n]+)"|'([^'\r\n]+)'|([^\s"'`,;&)]+))"#
                ),
                real_value,
            ),
            // High-entropy values assigned to names containing KEY, TOKEN,
            // SECRET, PASSWORD, CREDENTIAL or AUTH: FOO_TOKEN=..., "api_key": "...".
            d(
                "high_entropy",
                Gate::Assigned(NAME_WORDS),
                &format!(
                    r#"(?i)[A-Za-z0-9_.-]*(?:key|token|secret|passw|credential|auth)[A-Za-z0-9_.-]*{ASSIGN}["']?([A-Za-z0-9+/=_.~-]{{{MIN_ENTROPY_LEN},}})"#
                ),
                high_entropy,
            ),
        ]
    });
    &DETECTORS
}

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
mod tests {
    use super::*;

    fn shapes(text: &str) -> (String, Redactions) {
        let mut t = Redactions::default();
        let out = Redactor::default().redact_str(text, &mut t);
        (out, t)
    }

    fn kinds(t: &Redactions) -> Vec<&str> {
        t.kinds.keys().map(String::as_str).collect()
    }

    const GHP: &str = "ghp_R8kQ2vX9mN4pL7tY1wZ3aB6cD0eF5gH8jK2m";
    const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIDx9G3k0rYQm8W1pS7nV2tL4cJ6hF8bE0aZ5uX3yK9qD\n-----END PRIVATE KEY-----";
    const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

    #[test]
    fn given_values_are_replaced_with_their_name() {
        let r = Redactor::new(
            [("DEPLOY_TOKEN", "s3cr3t-deploy-value"), ("LANG", "C.UTF-8")],
            [("GH_HOST_TOKEN", "host-value-42")],
        );
        let mut t = Redactions::default();
        let out = r.redact_str(
            "a s3cr3t-deploy-value b host-value-42 c s3cr3t-deploy-value C.UTF-8",
            &mut t,
        );
        assert_eq!(
            out,
            "a [redacted:env:DEPLOY_TOKEN] b [redacted:env:GH_HOST_TOKEN] c [redacted:env:DEPLOY_TOKEN] C.UTF-8"
        );
        assert_eq!(t.count, 3);
        assert_eq!(t.kinds["env:DEPLOY_TOKEN"], 2);
        assert!(
            !format!("{r:?}").contains("s3cr3t"),
            "Debug shows names only"
        );
    }

    #[test]
    fn short_common_numeric_and_configuration_values_are_kept() {
        let r = Redactor::new(
            [
                ("DEBUG", "1"),
                ("MODE", "true"),
                ("SHORT", "abcde"),
                ("PORT_LIST", "8080443"),
                ("STAGE", "production"),
                ("PATH", "/usr/local/bin:/usr/bin"),
                ("LC_ALL", "de_DE.UTF-8"),
                ("HOME", "/home/someone"),
            ],
            [],
        );
        let text =
            "1 true abcde 8080443 production /usr/local/bin:/usr/bin de_DE.UTF-8 /home/someone";
        let mut t = Redactions::default();
        assert_eq!(r.redact_str(text, &mut t), text);
        assert_eq!(t.count, 0);
        // Host values have no name exemption.
        let r = Redactor::new([], [("HOME", "/home/someone")]);
        assert_eq!(
            r.redact_str("at /home/someone", &mut t),
            "at [redacted:env:HOME]"
        );
    }

    #[test]
    fn the_longest_given_value_wins() {
        let r = Redactor::new([("A", "abcdef123"), ("B", "abcdef123456")], []);
        let mut t = Redactions::default();
        assert_eq!(
            r.redact_str("abcdef123456 abcdef123", &mut t),
            "[redacted:env:B] [redacted:env:A]"
        );
    }

    #[test]
    fn aws_access_key_ids() {
        let (o, t) = shapes("id AKIAIOSFODNN7EXAMPLE and ASIAY34FZKBOKMUTVV7A.");
        assert_eq!(
            o,
            "id [redacted:aws_access_key] and [redacted:aws_access_key]."
        );
        assert_eq!(t.kinds["aws_access_key"], 2);
        // Too short, or inside a longer word: kept.
        let (o, _) = shapes("AKIA1234 XAKIAIOSFODNN7EXAMPLE");
        assert_eq!(o, "AKIA1234 XAKIAIOSFODNN7EXAMPLE");
    }

    #[test]
    fn aws_secret_keys_in_assignments() {
        let (o, t) = shapes("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n");
        assert_eq!(o, "AWS_SECRET_ACCESS_KEY=[redacted:aws_secret_key]\n");
        assert_eq!(kinds(&t), ["aws_secret_key"]);
        let (o, _) =
            shapes(r#"{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}"#);
        assert_eq!(
            o,
            r#"{"aws_secret_access_key": "[redacted:aws_secret_key]"}"#
        );
    }

    #[test]
    fn forge_chat_and_payment_tokens() {
        for (text, kind) in [
            (GHP, "github_token"),
            ("gho_16C7e42F292c6912E7710c838347Ae178B4a", "github_token"),
            ("ghs_16C7e42F292c6912E7710c838347Ae178B4a", "github_token"),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV012345",
                "github_token",
            ),
            ("glpat-xz8LmQ2vR9tY3wK6pN1s", "gitlab_token"),
            (
                "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
                "slack_token",
            ),
            ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
            ("AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "gcp_api_key"),
        ] {
            let (o, t) = shapes(&format!("token is: {text} ."));
            assert!(!o.contains(text), "{kind}: {o}");
            assert!(t.kinds.contains_key(kind), "{kind}: {t:?} {o}");
        }
    }

    #[test]
    fn private_key_blocks_whole_or_cut_short() {
        let (o, t) = shapes(&format!("before\n{PEM}\nafter\n"));
        assert_eq!(o, "before\n[redacted:private_key]\nafter\n");
        assert_eq!(kinds(&t), ["private_key"]);
        let rsa = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEpAIBAAKCAQEA\n";
        let (o, _) = shapes(&format!("x {rsa}"));
        assert_eq!(o, "x [redacted:private_key]");
        // GCP service-account JSON: the key with escaped newlines.
        let json = r#"{"type": "service_account", "private_key_id": "3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n", "client_email": "x@p.iam.gserviceaccount.com"}"#;
        let (o, t) = shapes(json);
        assert!(!o.contains("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"), "{o}");
        assert!(
            !o.contains("3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098"),
            "{o}"
        );
        assert!(o.contains("x@p.iam.gserviceaccount.com"), "{o}");
        assert_eq!(t.kinds["private_key"], 1);
        // A public key or certificate is not a secret.
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
        assert_eq!(shapes(cert).0, cert);
    }

    #[test]
    fn jwts() {
        let (o, t) = shapes(&format!("Authorization: Bearer {JWT}\n"));
        assert_eq!(o, "Authorization: Bearer [redacted:jwt]\n");
        assert_eq!(kinds(&t), ["jwt"]);
    }

    #[test]
    fn keyword_assignments() {
        for (text, want) in [
            ("password=hunter22", "password=[redacted:assignment]"),
            ("passwd: letmein", "passwd: [redacted:assignment]"),
            ("DB_PASSWORD=short1", "DB_PASSWORD=[redacted:assignment]"),
            (
                "url?token=abc123&x=1",
                "url?token=[redacted:assignment]&x=1",
            ),
            ("secret = 'two words'", "secret = '[redacted:assignment]'"),
            (
                r#""api_key": "k-9""#,
                r#""api_key": "[redacted:assignment]""#,
            ),
            ("--password=p4ss", "--password=[redacted:assignment]"),
        ] {
            assert_eq!(shapes(text).0, want, "{text}");
        }
        // Placeholders and prose are kept.
        for text in [
            "password=$DB_PASSWORD",
            "token=${TOKEN}",
            "password: ********",
            "token=<your token>",
            "api_key: null",
            "the password is not set",
            "tokenizer=fast",
            "sort_key=created_at",
        ] {
            assert_eq!(shapes(text).0, text);
        }
    }

    #[test]
    fn high_entropy_values_assigned_to_secret_names() {
        let (o, t) = shapes("export FOO_TOKEN=Zx8q2LmV9rT4wY7pK1sN6bC3\n");
        assert_eq!(o, "export FOO_TOKEN=[redacted:high_entropy]\n");
        assert_eq!(kinds(&t), ["high_entropy"]);
        let (o, _) = shapes(r#"{"signing_key": "q8Vd2LmZ9rT4wY7pK1sN6bC3xE5"}"#);
        assert_eq!(o, r#"{"signing_key": "[redacted:high_entropy]"}"#);
        // Low entropy, or too short: kept.
        for text in [
            "CACHE_KEY=aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "PRIMARY_KEY=user_id",
            "NEXT_TOKEN=abc",
        ] {
            assert_eq!(shapes(text).0, text);
        }
    }

    /// Output with nothing a detector could match passes no gate (and so
    /// compiles no detector); one literal a shape needs opens its gate.
    #[test]
    fn plain_output_opens_no_gate() {
        for plain in [
            &b"Cargo.toml\nREADME.md\nsrc\n"[..],
            b" M src/lib.rs\n?? notes.txt\n",
            b"test result: ok. 12 passed; 0 failed\n",
        ] {
            assert!(
                !may_match_a_detector(plain),
                "{}",
                String::from_utf8_lossy(plain)
            );
        }
        assert!(may_match_a_detector(b"export API_KEY=x"));
        assert!(may_match_a_detector(b"id AKIA..."));
    }

    #[test]
    fn benign_output_is_untouched() {
        let text = "commit 3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098\n\
                    id 123e4567-e89b-12d3-a456-426614174000\n\
                    /home/me/site/blog/2024-01-01-hello.md\n\
                    42 3.14159 1700000000 -17 0xdeadbeef\n\
                    sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
                    Merged pull request #12 (squash)\n\
                    key: value\n\
                    tokens: 1234\n";
        let (o, t) = shapes(text);
        assert_eq!(o, text);
        assert_eq!(t.count, 0);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_scrubbed_and_kept() {
        let mut input = vec![0xff, 0xfe, b' '];
        input.extend_from_slice(GHP.as_bytes());
        input.extend_from_slice(&[b' ', 0xc3, 0x28, 0x80]);
        let mut t = Redactions::default();
        let out = Redactor::default().redact_bytes(&input, &mut t);
        let mut want = vec![0xff, 0xfe, b' '];
        want.extend_from_slice(b"[redacted:github_token]");
        want.extend_from_slice(&[b' ', 0xc3, 0x28, 0x80]);
        assert_eq!(out, want);
        assert_eq!(t.count, 1);
    }

    #[test]
    fn growth_is_bounded() {
        let r = Redactor::new(
            [("A_VERY_LONG_VARIABLE_NAME_THAT_MAKES_MARKERS_BIG", "abcdef")],
            [],
        );
        let text = "abcdef ".repeat(10_000);
        let mut t = Redactions::default();
        let out = r.redact_bytes(text.as_bytes(), &mut t);
        assert!(out.len() <= text.len() + CUT_MARKER.len(), "{}", out.len());
        assert!(out.ends_with(CUT_MARKER.as_bytes()));
        assert!(!out.windows(7).any(|w| w == b"abcdef "));
    }

    #[test]
    fn output_grows_only_into_the_room_below_the_cap() {
        let r = Redactor::new([("SOME_TOKEN", "abcdef")], []);
        let mut t = Redactions::default();
        let (out, cut) = r.redact_output(b"x abcdef y", 1024, &mut t, &mut []);
        assert_eq!(out, b"x [redacted:env:SOME_TOKEN] y");
        assert!(!cut);
        let text = "abcdef\n".repeat(100);
        let (out, cut) = r.redact_output(text.as_bytes(), text.len(), &mut t, &mut []);
        assert!(cut);
        assert_eq!(out.len(), text.len());
        assert!(out.ends_with(CUT_MARKER.as_bytes()));
        assert!(!out.windows(6).any(|w| w == b"abcdef"));
    }

    #[test]
    fn redacting_twice_changes_nothing_more() {
        let text = format!("{GHP} password=hunter22 {JWT} FOO_TOKEN=Zx8q2LmV9rT4wY7pK1sN6bC3");
        let (once, t1) = shapes(&text);
        let (twice, t2) = shapes(&once);
        assert_eq!(once, twice);
        assert_eq!(t1.count, 4, "{once}");
        assert_eq!(t2.count, 0);
    }

    #[test]
    fn entropy() {
        assert_eq!(shannon_entropy(b"aaaa"), 0.0);
        assert!((shannon_entropy(b"abcd") - 2.0).abs() < 1e-9);
    }
}
