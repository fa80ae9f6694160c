//! Per-actor risk budget: each actor (a uid, or a daemon client identity)
//! spends its runs' risk scores within a sliding window; a reviewer's
//! rejection refunds a run's points (a submitter withdrawing or cancelling
//! its own run gets nothing back). The ledger is an append-only JSON-lines file, so a
//! crash loses at most the line being written. (The daemon enforces the
//! budget; this module only keeps the accounts.)

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// Points an actor may spend per window.
    pub points: u64,
    pub window_s: u64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            points: 1000,
            window_s: 3600,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Entry {
    Charge {
        actor: String,
        run_id: String,
        points: u64,
        at: u64,
    },
    Refund {
        run_id: String,
        at: u64,
    },
}

#[derive(Debug, thiserror::Error)]
#[allow(unreachable_pub)] // carried by the engine's public error type
pub enum BudgetError {
    #[error(
        "risk budget exhausted for {actor}: {used} of {limit} points spent in the last {window_s} s; \
         this run needs {needed}; retry in {retry_after_s} s or ask a reviewer"
    )]
    Exhausted {
        actor: String,
        used: u64,
        limit: u64,
        needed: u64,
        window_s: u64,
        retry_after_s: u64,
    },
    #[error("budget ledger {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(crate) struct Ledger {
    path: PathBuf,
    cfg: BudgetConfig,
}

impl Ledger {
    pub(crate) fn new(path: &Path, cfg: BudgetConfig) -> Self {
        Ledger {
            path: path.to_path_buf(),
            cfg,
        }
    }

    fn entries(&self) -> Result<Vec<Entry>, BudgetError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(BudgetError::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        // A torn last line (crash mid-append) is ignored.
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    fn append(&self, e: &Entry) -> Result<(), BudgetError> {
        let io = |source| BudgetError::Io {
            path: self.path.clone(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        let mut line = serde_json::to_vec(e).expect("entries serialize");
        line.push(b'\n');
        f.write_all(&line).map_err(io)?;
        f.sync_data().map_err(io)
    }

    /// Points `actor` has spent in the window ending at `now` (seconds).
    pub(crate) fn spent(&self, actor: &str, now: u64) -> Result<(u64, u64), BudgetError> {
        let entries = self.entries()?;
        let refunded: std::collections::HashSet<&str> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Refund { run_id, .. } => Some(run_id.as_str()),
                _ => None,
            })
            .collect();
        let start = now.saturating_sub(self.cfg.window_s);
        let mut used = 0;
        let mut oldest = now;
        for e in &entries {
            if let Entry::Charge {
                actor: a,
                run_id,
                points,
                at,
            } = e
                && a == actor
                && *at > start
                && !refunded.contains(run_id.as_str())
            {
                used += points;
                oldest = oldest.min(*at);
            }
        }
        Ok((used, oldest))
    }

    /// Charge a run's score, or refuse with a clear error when it would
    /// exceed the budget.
    pub(crate) fn charge(
        &self,
        actor: &str,
        run_id: &str,
        points: u64,
        now: u64,
    ) -> Result<u64, BudgetError> {
        let (used, oldest) = self.spent(actor, now)?;
        if used + points > self.cfg.points {
            return Err(BudgetError::Exhausted {
                actor: actor.into(),
                used,
                limit: self.cfg.points,
                needed: points,
                window_s: self.cfg.window_s,
                retry_after_s: (oldest + self.cfg.window_s).saturating_sub(now).max(1),
            });
        }
        self.append(&Entry::Charge {
            actor: actor.into(),
            run_id: run_id.into(),
            points,
            at: now,
        })?;
        Ok(self.cfg.points - used - points)
    }

    /// A reviewer (not the submitter) rejected the run: its points come back.
    pub(crate) fn refund(&self, run_id: &str, now: u64) -> Result<(), BudgetError> {
        self.append(&Entry::Refund {
            run_id: run_id.into(),
            at: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_refuses_refunds_and_forgets_old_runs() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger::new(
            &d.path().join("budget.jsonl"),
            BudgetConfig {
                points: 100,
                window_s: 60,
            },
        );
        assert_eq!(l.charge("1000", "r1", 60, 1000).unwrap(), 40);
        let e = l.charge("1000", "r2", 50, 1010).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("risk budget exhausted for 1000: 60 of 100"),
            "{msg}"
        );
        assert!(msg.contains("retry in 50 s"), "{msg}");
        // Another actor has its own budget.
        assert!(l.charge("1001", "r3", 90, 1010).is_ok());
        // A rejection refunds.
        l.refund("r1", 1020).unwrap();
        assert!(l.charge("1000", "r4", 90, 1021).is_ok());
        // The window slides.
        assert!(l.charge("1000", "r5", 90, 1100).is_ok());
        // A torn last line is ignored.
        std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join("budget.jsonl"))
            .unwrap()
            .write_all(b"{\"op\":\"charge\",\"act")
            .unwrap();
        assert_eq!(l.spent("1000", 1100).unwrap().0, 90);
    }
}
