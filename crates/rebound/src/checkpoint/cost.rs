//! FIR's time-cost model (4.3.3), with costs measured on this machine.
//!
//! Both kinds of checkpoint write the complete run, so they differ in how
//! each entry is obtained: a *resolved* entry is read from a live leaf and
//! traced to its newest committed version; a *copied* entry comes from the
//! previous checkpoint for a subtree nobody wrote. With `N` entries and an
//! estimated fraction `u` of them in leaves written since the last
//! checkpoint:
//!
//! ```text
//! T_full        = N · c_resolve
//! T_incremental = u · N · c_resolve + (1 − u) · N · c_copy
//! ```
//!
//! `u` comes from the sampled updates (FIR eq. 2's sample): `p` = fraction
//! of sampled keys written, `L` = entries per leaf, `u = 1 − (1 − p)^L`
//! (a leaf is rewritten if any of its keys was). FIR's α is computed from
//! the same sample and reported. `c_resolve` and `c_copy` are measured from
//! the checkpoints taken so far (exponential average); until an incremental
//! checkpoint has been measured, `c_copy` is assumed to be `c_resolve / 4`.

use super::CheckpointStats;
use crate::txn::{Sample, Store};

#[derive(Debug, Clone, Copy, Default)]
pub struct CostModel {
    ns_per_resolved: Option<f64>,
    ns_per_copied: Option<f64>,
}

/// The model's view of the next checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct Prediction {
    pub alpha: f64,
    pub full_ns: f64,
    pub incremental_ns: f64,
}

/// Default guess before the first measurement (a DRAM leaf read plus a
/// version-chain lookup is on the order of 100 ns).
const INITIAL_RESOLVE_NS: f64 = 100.0;

impl CostModel {
    pub fn predict(&self, store: &Store, samples: &[Sample]) -> Prediction {
        let resolve = self.ns_per_resolved.unwrap_or(INITIAL_RESOLVE_NS);
        let copy = self.ns_per_copied.unwrap_or(resolve / 4.0);
        let (mut full_ns, mut incremental_ns, mut alpha_sum, mut written) = (0.0, 0.0, 0.0, 0.0);
        for (table, sample) in store.tables().zip(samples) {
            let entries = table.index().len() as f64;
            let per_leaf = (entries / table.index().node_count().max(1) as f64).max(1.0);
            let touched = sample.touched_fraction(table.index().len());
            let in_touched_leaves = 1.0 - (1.0 - touched).powf(per_leaf);
            full_ns += entries * resolve;
            incremental_ns +=
                entries * (in_touched_leaves * resolve + (1.0 - in_touched_leaves) * copy);
            let updates = sample.updates();
            alpha_sum += sample.alpha() * updates;
            written += updates;
        }
        let alpha = if written > 0.0 {
            alpha_sum / written
        } else {
            0.0
        };
        Prediction {
            alpha,
            full_ns,
            incremental_ns,
        }
    }

    /// Learns per-entry costs from a finished checkpoint's collection phase.
    pub fn observe(&mut self, stats: &CheckpointStats) {
        let collect_ns = stats.collect_time.as_nanos() as f64;
        if !stats.incremental && stats.entries_resolved > 0 {
            let measured = collect_ns / stats.entries_resolved as f64;
            self.ns_per_resolved = Some(average(self.ns_per_resolved, measured));
        } else if stats.entries_copied > 0 {
            let resolve = self.ns_per_resolved.unwrap_or(INITIAL_RESOLVE_NS);
            let copy_ns = (collect_ns - resolve * stats.entries_resolved as f64).max(0.0);
            let measured = copy_ns / stats.entries_copied as f64;
            self.ns_per_copied = Some(average(self.ns_per_copied, measured));
        }
    }
}

fn average(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| 0.7 * o + 0.3 * new)
}
