//! The credential shapes the output redaction knows, each with the
//! necessary condition that decides whether its regex is compiled and run.

use std::sync::LazyLock;

use regex::bytes::Regex;

use super::{MIN_ENTROPY_BITS, MIN_ENTROPY_LEN};

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
    pub(super) accept: fn(&[u8]) -> bool,
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
                text.iter().any(|c| *c == b'=' || *c == b':')
                    && words.iter().any(|w| {
                        text.windows(w.len())
                            .any(|x| x.eq_ignore_ascii_case(w.as_bytes()))
                    })
            }
        }
    }

    pub(super) fn regex(&self) -> &Regex {
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
