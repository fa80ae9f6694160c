//! A machine the size of the user's: the limits a run gets when it asks for
//! none, and the ceilings of what it may ask for, as fractions of the
//! machine the engine runs on (the reasoning is in `docs/environment.md`).
//!
//! | limit | default | ceiling |
//! |---|---|---|
//! | `cpus` | every CPU this process may use | the same |
//! | `memory_mb` | half the RAM (at least 1 GiB) | three quarters |
//! | `disk_mb` (the upper layer: a tmpfs, so memory) | a quarter of the RAM (at least 1 GiB) | half |
//! | `timeout_s` | 600 | 3600 |
//! | `pids` | 4096 | 16384 |
//! | `output_kb` | 256 | 4096 |
//!
//! Probed once per process: a daemon's are fixed for its life, so runs of
//! the same envelope get the same limits.

use std::sync::OnceLock;

use crate::envelope::{LIMIT_MAXIMA, LIMIT_MINIMA, LimitsSpec};

/// What the limits are fractions of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    /// CPUs this process may run on (affinity and its cgroup's quota).
    pub cpus: u64,
    /// Physical memory, MiB.
    pub memory_mb: u64,
}

/// The smallest machine assumed when the probe fails.
const FALLBACK: Machine = Machine {
    cpus: 1,
    memory_mb: 2048,
};

impl Machine {
    /// This machine, probed once.
    pub fn this() -> Machine {
        static THIS: OnceLock<Machine> = OnceLock::new();
        *THIS.get_or_init(|| Machine {
            cpus: std::thread::available_parallelism().map_or(FALLBACK.cpus, |n| n.get() as u64),
            memory_mb: meminfo_total_mb().unwrap_or(FALLBACK.memory_mb),
        })
    }

    /// What a run gets for each limit it does not ask for (held to the
    /// ceilings when they are lower).
    pub fn default_limits(&self) -> LimitsSpec {
        clamp(LimitsSpec {
            timeout_s: 600,
            memory_mb: (self.memory_mb / 2).max(1024),
            pids: 4096,
            output_kb: 256,
            disk_mb: (self.memory_mb / 4).max(1024),
            cpus: self.cpus,
        })
    }

    /// The most a run may ask for, unless configured (`dryrun daemon
    /// --max-*`): never below the defaults.
    pub fn default_ceilings(&self) -> LimitsSpec {
        let d = self.default_limits();
        clamp(LimitsSpec {
            timeout_s: 3600,
            memory_mb: (self.memory_mb * 3 / 4).max(d.memory_mb),
            pids: 16_384,
            output_kb: 4096,
            disk_mb: (self.memory_mb / 2).max(d.disk_mb),
            cpus: self.cpus,
        })
    }
}

/// Each field within [`LIMIT_MINIMA`] and [`LIMIT_MAXIMA`].
fn clamp(mut l: LimitsSpec) -> LimitsSpec {
    for ((name, _), ((_, lo), (_, hi))) in l
        .fields()
        .into_iter()
        .zip(LIMIT_MINIMA.fields().into_iter().zip(LIMIT_MAXIMA.fields()))
    {
        let v = l.field_mut(name);
        *v = (*v).clamp(lo, hi);
    }
    l
}

/// `MemTotal` of `/proc/meminfo`, MiB.
fn meminfo_total_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_of_the_machine() {
        let m = Machine {
            cpus: 16,
            memory_mb: 32768,
        };
        let d = m.default_limits();
        assert_eq!((d.cpus, d.memory_mb, d.disk_mb), (16, 16384, 8192));
        let c = m.default_ceilings();
        assert_eq!((c.cpus, c.memory_mb, c.disk_mb), (16, 24576, 16384));
        // A small machine: the old 1 GiB floor, ceilings never below it.
        let small = Machine {
            cpus: 1,
            memory_mb: 1024,
        };
        let (d, c) = (small.default_limits(), small.default_ceilings());
        assert_eq!((d.memory_mb, d.disk_mb), (1024, 1024));
        for ((f, dv), (_, cv)) in d.fields().into_iter().zip(c.fields()) {
            assert!(dv <= cv, "{f}: default {dv} above ceiling {cv}");
        }
        let this = Machine::this();
        assert!(this.cpus >= 1 && this.memory_mb > 0, "{this:?}");
    }
}
