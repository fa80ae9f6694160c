//! Every HTTP route path, written once. The router and its `ROUTES` table
//! (checked against `docs/openapi.yaml`) use the patterns; the CLI's client
//! builds concrete paths with the functions below. No other file in `src/`
//! spells a `/v1/` path (a test below keeps it so).

/// `POST` submit a run, `GET` list runs (`?state=`, `?wait=true`).
pub const RUNS: &str = "/v1/runs";
/// `GET` one run record.
pub const RUN: &str = "/v1/runs/{id}";
/// `GET` a run's text diff (`?against=<id>` compares two runs).
pub const RUN_DIFF: &str = "/v1/runs/{id}/diff";
/// `POST` approve a run awaiting approval.
pub const RUN_APPROVE: &str = "/v1/runs/{id}/approve";
/// `POST` reject a run awaiting approval.
pub const RUN_REJECT: &str = "/v1/runs/{id}/reject";
/// `POST` withdraw a run waiting for approval (its submitter only).
pub const RUN_WITHDRAW: &str = "/v1/runs/{id}/withdraw";
/// `POST` cancel a queued or running run.
pub const RUN_CANCEL: &str = "/v1/runs/{id}/cancel";
/// `POST` promote a run's change set to the real workspace.
pub const RUN_PROMOTE: &str = "/v1/runs/{id}/promote";
/// `POST` issue the single-use token an agent host's prompt approves a
/// run with (the submitter's hook; see `dryrun hook`).
pub const RUN_HOST_PROMPT: &str = "/v1/runs/{id}/host-prompt";
/// `POST` rehearse a run again (`?wait=true`).
pub const RUN_REPLAY: &str = "/v1/runs/{id}/replay";
/// `GET` one promotion receipt.
pub const RECEIPT: &str = "/v1/receipts/{id}";
/// `POST` roll a promotion back.
pub const RECEIPT_ROLLBACK: &str = "/v1/receipts/{id}/rollback";
/// `GET` Server-Sent Events: state changes of the caller's runs.
pub const EVENTS: &str = "/v1/events";
/// `GET` verify the journal's hash chain.
pub const JOURNAL_VERIFY: &str = "/v1/journal/verify";
/// `GET` liveness and sandbox features.
pub const HEALTH: &str = "/v1/health";
/// `GET` Prometheus metrics.
pub const METRICS: &str = "/metrics";

/// `/v1/runs/<id>`.
pub fn run(id: &str) -> String {
    with_id(RUN, id)
}

/// `/v1/runs/<id>/diff`.
pub fn run_diff(id: &str) -> String {
    with_id(RUN_DIFF, id)
}

/// `/v1/runs/<id>/approve`.
pub fn run_approve(id: &str) -> String {
    with_id(RUN_APPROVE, id)
}

/// `/v1/runs/<id>/reject`.
pub fn run_reject(id: &str) -> String {
    with_id(RUN_REJECT, id)
}

/// `/v1/runs/<id>/withdraw`.
pub fn run_withdraw(id: &str) -> String {
    with_id(RUN_WITHDRAW, id)
}

/// `/v1/runs/<id>/cancel`.
pub fn run_cancel(id: &str) -> String {
    with_id(RUN_CANCEL, id)
}

/// `/v1/runs/<id>/promote`.
pub fn run_promote(id: &str) -> String {
    with_id(RUN_PROMOTE, id)
}

/// `/v1/runs/<id>/host-prompt`.
pub fn run_host_prompt(id: &str) -> String {
    with_id(RUN_HOST_PROMPT, id)
}

/// `/v1/runs/<id>/replay`.
pub fn run_replay(id: &str) -> String {
    with_id(RUN_REPLAY, id)
}

/// `/v1/receipts/<id>`.
pub fn receipt(id: &str) -> String {
    with_id(RECEIPT, id)
}

/// `/v1/receipts/<id>/rollback`.
pub fn receipt_rollback(id: &str) -> String {
    with_id(RECEIPT_ROLLBACK, id)
}

/// The pattern with `{id}` replaced by the percent-encoded id.
fn with_id(pattern: &str, id: &str) -> String {
    pattern.replacen("{id}", &encode_id(id), 1)
}

/// Percent-encode an id for one path segment (or a query value): ASCII
/// letters, digits and `-` pass as they are (every valid run and receipt id
/// is only those), every other byte becomes `%XX`, so a typo'd id such as
/// `../x` reaches the daemon as one segment and is refused there.
pub fn encode_id(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn builders_fill_their_pattern() {
        let id = "r1234-abcd";
        for (built, pattern) in [
            (run(id), RUN),
            (run_diff(id), RUN_DIFF),
            (run_approve(id), RUN_APPROVE),
            (run_reject(id), RUN_REJECT),
            (run_withdraw(id), RUN_WITHDRAW),
            (run_cancel(id), RUN_CANCEL),
            (run_promote(id), RUN_PROMOTE),
            (run_replay(id), RUN_REPLAY),
            (run_host_prompt(id), RUN_HOST_PROMPT),
            (receipt(id), RECEIPT),
            (receipt_rollback(id), RECEIPT_ROLLBACK),
        ] {
            assert_eq!(built, pattern.replace("{id}", id));
        }
        assert_eq!(run_approve("r1-1"), "/v1/runs/r1-1/approve");
        assert_eq!(receipt_rollback("c9-x"), "/v1/receipts/c9-x/rollback");
    }

    #[test]
    fn ids_stay_one_segment() {
        assert_eq!(encode_id("r1-Ab9"), "r1-Ab9");
        assert_eq!(run("../etc"), "/v1/runs/%2E%2E%2Fetc");
        assert_eq!(run_diff("a b?c"), "/v1/runs/a%20b%3Fc/diff");
        assert_eq!(encode_id("é"), "%C3%A9");
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// Route paths are written here and nowhere else in `src/`.
    #[test]
    fn no_route_literal_outside_this_module() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let this = src.join("request").join("routes.rs");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(files.contains(&this), "walk missed {}", this.display());
        let needle = concat!("\"", "/v1");
        let mut found = Vec::new();
        for f in files.iter().filter(|f| **f != this) {
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                if line.contains(needle) {
                    found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "route paths spelled outside src/request/routes.rs (use its constants and builders):\n{}",
            found.join("\n")
        );
    }
}
