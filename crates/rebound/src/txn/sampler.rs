//! Update-skew sampling for the checkpoint cost model (FIR 4.3.3, eq. 2).
//!
//! A fixed 1 % of keys (chosen by hash) is the sample; every write to a
//! sampled key bumps its counter. The checkpoint thread drains the counts.

use parking_lot::Mutex;
use std::collections::HashMap;

/// One key in `SAMPLE_EVERY` is sampled.
pub const SAMPLE_EVERY: u32 = 100;

#[derive(Default)]
pub struct UpdateSampler {
    counts: Mutex<HashMap<u32, u32>>,
}

/// Update counts of the sampled keys since the previous drain.
pub struct Sample {
    counts: Vec<u32>,
}

impl UpdateSampler {
    #[inline]
    pub fn record(&self, key: &[u8]) {
        let hash = crate::medium::checksum::crc32c(key);
        if hash.is_multiple_of(SAMPLE_EVERY) {
            *self.counts.lock().entry(hash).or_insert(0) += 1;
        }
    }

    pub fn drain(&self) -> Sample {
        let counts = std::mem::take(&mut *self.counts.lock());
        Sample {
            counts: counts.into_values().collect(),
        }
    }
}

impl Sample {
    /// Updates counted over all sampled keys.
    pub fn updates(&self) -> f64 {
        self.counts.iter().map(|&c| c as f64).sum()
    }

    /// FIR's skew coefficient α = 1 − Σ (uᵢ / C)² over the sampled keys
    /// that were updated (0 when nothing was).
    pub fn alpha(&self) -> f64 {
        let total: f64 = self.counts.iter().map(|&c| c as f64).sum();
        if total == 0.0 {
            return 0.0;
        }
        1.0 - self
            .counts
            .iter()
            .map(|&c| (c as f64 / total).powi(2))
            .sum::<f64>()
    }

    /// Estimated fraction of all keys written since the previous drain,
    /// given the number of keys in the table.
    pub fn touched_fraction(&self, keys: usize) -> f64 {
        let sampled_keys = (keys as f64 / SAMPLE_EVERY as f64).max(1.0);
        (self.counts.len() as f64 / sampled_keys).min(1.0)
    }
}
